"""A real agent client: mini-swe-agent (PyPI; it speaks OpenAI through litellm, with a `bash` tool)
pointed at tern for a few steps of a trivial task in a temp dir. The small model need not solve
anything; the protocol must hold up: every step's request is answered, tool calls come back in a
form the agent parses, and observations go back as tool messages the next request accepts.

The commands a 135M model invents are run only when they are harmless (a short allowlist, inside
the temp dir); anything else is answered with a refusal the agent sees as its observation."""
import os
import re
import shlex

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

import yaml  # noqa: E402  (mini-swe-agent depends on it)
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_path  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

SAFE_COMMANDS = {"echo", "ls", "pwd", "cat", "printf", "touch", "mkdir", "wc", "head", "tail", "grep", "true"}


class AllowlistEnvironment(LocalEnvironment):
    """Runs a command only if every word that starts a command is allowlisted and no path leaves
    the working directory."""

    def execute(self, action, cwd="", *, timeout=None):
        command = action.get("command", "")
        try:
            words = shlex.split(command)
        except ValueError:
            words = None
        starts = [w for i, w in enumerate(words or []) if i == 0 or words[i - 1] in ("&&", "||", ";", "|")]
        safe = (words is not None and starts and all(w in SAFE_COMMANDS for w in starts)
                and not re.search(r"(^|\s|=)(/|~|\.\.)", command) and "`" not in command and "$(" not in command)
        self.commands.append((command, bool(safe)))
        if not safe:
            return {"output": "refused by the test harness: only simple commands inside the work dir run here",
                    "returncode": 1, "exception_info": ""}
        return super().execute(action, cwd, timeout=timeout)


def test_mini_swe_agent_runs_a_few_steps(server, tmp_path):
    config = yaml.safe_load(get_config_path("mini").read_text())
    model = LitellmModel(
        model_name="openai/" + server.model,
        cost_tracking="ignore_errors",
        model_kwargs={"api_base": server.base_url + "/v1", "api_key": "unused", "temperature": 0,
                      "max_tokens": 160, "tool_choice": "required"},
        **{k: v for k, v in config.get("model", {}).items() if k not in ("model_name", "model_kwargs")},
    )
    env = AllowlistEnvironment(cwd=str(tmp_path), timeout=10)
    env.commands = []
    # Six steps: mini-swe-agent 2.4 counts a truncated answer and a malformed tool call as steps, so
    # three could end on the first observation, before the request that carries it back.
    agent = DefaultAgent(model, env, **{**config["agent"], "step_limit": 6, "cost_limit": 0})
    result = agent.run("Create a file named hello.txt that contains the word hi.")

    assert result.get("exit_status") in ("LimitsExceeded", "Submitted", "RepeatedFormatError"), result
    assert agent.n_calls >= 2
    # tool_choice=required with the one bash tool: answers come back as structured bash calls that
    # the agent parses into commands (harmful or not, they reached the environment).
    calls = [c for m in agent.messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    assert calls and all(c["function"]["name"] == "bash" for c in calls), agent.messages
    assert env.commands
    # The observation went back as a tool message answering the call, and the next request was served.
    tool_index = next(i for i, m in enumerate(agent.messages) if m.get("role") == "tool")
    assert agent.messages[tool_index].get("tool_call_id") == calls[0]["id"]
    assert any(m.get("role") in ("assistant", "user") for m in agent.messages[tool_index + 1:])

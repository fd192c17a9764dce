"""Fixtures for the live-server tests: a `tern serve` on a free loopback port with the default model.

The binary and model come from the environment ctest sets (TERN_BINARY, TERN_MODEL); run by hand:
    TERN_BINARY=build/tern python3 -m pytest -q tests/server_py
"""
import os
import signal
import subprocess
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def binary():
    return os.environ.get("TERN_BINARY", os.path.join(REPO, "build", "tern"))


def model_path():
    path = os.environ.get("TERN_MODEL", os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(path):
        pytest.fail(f"default model missing at {path} (scripts/fetch-model)")
    return path


class LiveServer:
    """A running `tern serve`; stop() sends SIGTERM and checks the exit is clean."""

    def __init__(self, *extra_args):
        cmd = [binary(), "serve", "-m", model_path(), "--port", "0", "--threads", "2", *extra_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.time() + 60
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if "listening on" in line or not line:
                break
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError("tern serve did not start: " + "".join(self.stderr_lines))
        self.base_url = line.strip().split("listening on ")[1]
        self.model = os.path.splitext(os.path.basename(model_path()))[0]

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    # A small context keeps "prompt over the context" cheap to provoke; 4 requests decode at once.
    s = LiveServer("--ctx", "2048", "--parallel", "4", "--kv-mem", "192M", "--max-body-mb", "1")
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)


@pytest.fixture(scope="session")
def keyed_server():
    s = LiveServer("--ctx", "1024", "--kv-mem", "32M", "--api-key", "sekrit")
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)

// Cache-stable history (issue 4): multi-turn tool-use conversations for each supported template,
// with clients that re-serialize tool-call JSON, strip reasoning or send the model's text back as
// plain content. The "model" writes its tool calls in its own spacing and its tokens are not the
// canonical tokenization of its text (as sampled tokens often are not), so re-tokenizing the
// template's rendering cannot reproduce them: only splicing can.
//
// The property: where the template renders the conversation so far unchanged (the reference
// conversation's text for turn k is a prefix of turn k+1's), turn k+1's prompt tokens begin with
// all of turn k's prompt + generated tokens. Where the template itself changes an earlier message
// (Qwen3 drops old reasoning, Mistral moves the tools to the last user message), the prompt still
// begins with the prompt of the latest turn the template left intact; the reuse is printed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "server/json_fields.h"
#include "server/prompt_builder.h"

namespace tern::server {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::unique_ptr<tok::Tokenizer> load_tokenizer(const std::string& path) {
  if (!fs::exists(path)) return nullptr;
  auto file = gguf::File::open(path);
  if (!file.is_ok()) return nullptr;
  auto tok = tok::Tokenizer::from_gguf(file.value());
  return tok.is_ok() ? std::move(tok).value() : nullptr;
}

std::string models_dir() { return fs::path(TERN_DEFAULT_MODEL).parent_path().string(); }

bool starts_with(const std::vector<int32_t>& v, const std::vector<int32_t>& prefix) {
  return v.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), v.begin());
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

enum class Client { kStructured, kStripsReasoning, kPlainText };

const char* client_name(Client c) {
  return c == Client::kStructured ? "structured" : c == Client::kStripsReasoning ? "strips-reasoning" : "plain-text";
}

struct Family {
  std::string name;
  std::string template_file;  // tests/data/templates/src
  std::string bos, eos;
  std::string tokenizer;      // a GGUF under models/ or ../shared/data; "" = the default model's
  bool thinks = false;        // the model writes <think>...</think> first
  int unstable = 0;           // transitions where the template itself rewrites earlier messages
  bool system = true;         // the conversation starts with a system message
  // The template renders history as the model saw it somewhere (not so for Mistral v0.3 with a
  // system message: no answer was ever written after the prompt that history renders).
  bool spliceable = true;
};

// One turn of the scripted model: a call of read_file(path) or a final text.
struct Step {
  std::string call_path;  // "" = a text answer
  std::string text;
};

// The model's own text for a step, in its template's tool-call format and its own JSON spacing.
std::string model_output(const Step& s, chat::OutputFormat format, bool thinks) {
  std::string out = thinks ? "<think>\nI should " + (s.call_path.empty() ? std::string("answer") : "read " + s.call_path) +
                                 " now.\n</think>\n\n"
                           : "";
  if (s.call_path.empty()) return out + s.text;
  const std::string args = "{\"path\":\"" + s.call_path + "\",\"max_lines\":20}";
  switch (format) {
    case chat::OutputFormat::Llama3: return out + "{\"name\": \"read_file\", \"parameters\": " + args + "}";
    case chat::OutputFormat::Mistral: return out + "[TOOL_CALLS] [{\"name\": \"read_file\", \"arguments\": " + args + "}]";
    default: return out + "<tool_call>\n{\"name\": \"read_file\", \"arguments\": " + args + "}\n</tool_call>";
  }
}

// Sampled tokens spell the text but are not its canonical tokenization: encoded in 5-byte pieces.
std::vector<int32_t> sampled_tokens(const tok::Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size(); i += 5) {
    const std::vector<int32_t> piece = tok.encode(text.substr(i, 5), false, false);
    ids.insert(ids.end(), piece.begin(), piece.end());
  }
  // SentencePiece vocabularies add a space prefix per encode: fall back to the whole text.
  return tok.decode(ids) == text ? ids : tok.encode(text, false, false);
}

struct RunResult {
  int n_transitions = 0;
  int n_stable = 0;       // the template left turn k's prompt text intact in turn k+1
  int n_extended = 0;     // of those: turn k+1's tokens begin with turn k's prompt + output
  int n_kept_intact = 0;  // unstable ones whose prompt begins with the last intact turn's prompt
  std::vector<std::string> reuse;  // unstable transitions: tokens reused / turn k's tokens
  SpliceStats last_stats;
};

class HistoryRun {
 public:
  HistoryRun(const Family& family, const tok::Tokenizer& tok, Client client, TurnMemory* memory)
      : family_(family), tok_(tok), client_(client), memory_(memory) {}

  RunResult run(ChatFormat& format) {
    const std::vector<Step> steps = {{"src/a.txt", ""}, {"src/b.txt", ""}, {"", "Both files say hello."},
                                     {"src/c.txt", ""}, {"", "It says hello too."}};
    Json sent = Json::array({{{"role", "user"}, {"content", "Read src/a.txt and src/b.txt."}}});
    if (family_.system) sent.insert(sent.begin(), Json{{"role", "system"}, {"content", "You are a coding agent."}});
    Json reference = sent;  // the conversation with every message as the model wrote it
    RunResult r;
    std::vector<std::vector<int32_t>> prompts, full;  // per turn: prompt; prompt + output
    std::vector<std::string> texts;                   // per turn: the reference conversation's text
    const HistoryContext history{memory_, 42};
    for (size_t k = 0; k < steps.size(); ++k) {
      GenerationSpec spec = spec_for(sent);
      ApiOr<BuiltPrompt> built = build_prompt(spec, format, tok_, "call", history);
      EXPECT_TRUE(built.is_ok()) << family_.name << " turn " << k << ": " << (built.is_ok() ? "" : built.error().message);
      if (!built.is_ok()) return r;
      BuiltPrompt& p = built.value();
      r.last_stats = p.history;
      ApiOr<TemplateInput> in = template_input(spec_for(reference), format);
      Result<std::string> text = chat::apply_chat_template(format.tmpl, in.value().request);
      EXPECT_TRUE(text.is_ok()) << text.status().message();
      texts.push_back(text.is_ok() ? text.value() : "");

      if (k > 0) {
        ++r.n_transitions;
        if (texts[k].starts_with(texts[k - 1])) {
          ++r.n_stable;
          if (starts_with(p.tokens, full[k - 1])) {
            ++r.n_extended;
          } else if (memory_ != nullptr) {
            ADD_FAILURE() << family_.name << " (" << client_name(client_) << ") turn " << k << ": "
                          << common_prefix(p.tokens, full[k - 1]) << " of " << full[k - 1].size()
                          << " tokens reused; first difference in\n"
                          << tok_.decode(std::vector<int32_t>(p.tokens.begin(), p.tokens.begin() + std::min<size_t>(p.tokens.size(), common_prefix(p.tokens, full[k - 1]) + 8)));
          }
        } else {
          size_t j = k;
          while (j > 0 && !texts[k].starts_with(texts[j - 1])) --j;
          if (j == 0 || starts_with(p.tokens, prompts[j - 1])) ++r.n_kept_intact;
          r.reuse.push_back(std::to_string(common_prefix(p.tokens, full[k - 1])) + "/" + std::to_string(full[k - 1].size()));
        }
      }

      // The model answers; the server parses and remembers the answer.
      const std::string output = model_output(steps[k], format.tool_format, family_.thinks);
      const std::vector<int32_t> generated = sampled_tokens(tok_, output);
      Completion answer = parse(p, output);
      EXPECT_EQ(answer.tool_calls.size(), steps[k].call_path.empty() ? 0u : 1u) << family_.name << ": " << output;
      remember_answer(history, p, answer, generated, tok_);
      prompts.push_back(p.tokens);
      full.push_back(p.tokens);
      full.back().insert(full.back().end(), generated.begin(), generated.end());

      // The client sends the answer back its own way, then the tool result or the next question.
      const std::string id = "call" + std::to_string(100000 + k).substr(1);  // 9 characters (Mistral)
      sent.push_back(client_message(answer, output, id));
      reference.push_back(structured_message(answer, id, /*reasoning=*/true, /*indent=*/-1));
      Json next = steps[k].call_path.empty()
                      ? Json{{"role", "user"}, {"content", "Thanks. Now read src/c.txt."}}
                      : Json{{"role", "tool"}, {"tool_call_id", id}, {"content", "contents of " + steps[k].call_path + ": hello"}};
      sent.push_back(next);
      reference.push_back(next);
    }
    return r;
  }

 private:
  GenerationSpec spec_for(const Json& messages) const {
    GenerationSpec s;
    s.chat = true;
    s.messages = to_value(messages);
    s.tools = to_value(Json::parse(R"([{"type": "function", "function": {"name": "read_file",
      "description": "Read a file", "parameters": {"type": "object", "properties": {
      "path": {"type": "string"}, "max_lines": {"type": "integer"}}, "required": ["path"]}}}])"));
    return s;
  }

  Completion parse(const BuiltPrompt& p, const std::string& output) const {
    chat::OutputParser parser(p.parser);
    Completion c;
    auto fold = [&](std::vector<chat::OutputEvent> events) {
      for (chat::OutputEvent& o : events) {
        GenEvent g;
        g.output = std::move(o);
        accumulate(c, g);
      }
    };
    fold(parser.feed(output));
    fold(parser.finish());
    return c;
  }

  Json structured_message(const Completion& c, const std::string& id, bool reasoning, int indent) const {
    Json m = {{"role", "assistant"}, {"content", c.text.empty() && !c.tool_calls.empty() ? Json() : Json(c.text)}};
    if (reasoning && !c.reasoning.empty()) m["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCall& t : c.tool_calls) {
        // Re-serialized the client's way: keys sorted (the model wrote path first), other spacing.
        const std::string args = nlohmann::json::parse(t.arguments).dump(indent);
        calls.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", args}}}});
      }
      m["tool_calls"] = calls;
    }
    return m;
  }

  Json client_message(const Completion& c, const std::string& output, const std::string& id) const {
    switch (client_) {
      case Client::kStructured: return structured_message(c, id, true, 2);
      case Client::kStripsReasoning: return structured_message(c, id, false, -1);
      case Client::kPlainText: break;
    }
    return Json{{"role", "assistant"}, {"content", output}};
  }

  const Family& family_;
  const tok::Tokenizer& tok_;
  Client client_;
  TurnMemory* memory_;
};

std::vector<Family> families() {
  return {
      {"smollm2", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja", "<|im_start|>", "<|im_end|>", "", false, 0},
      {"qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", "", false, 0},
      {"qwen2.5-vocab", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", "qwen2.5-vocab.gguf", false, 0},
      {"qwen3", "Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", "", true, 1},
      {"qwen3-vocab", "Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", "qwen2.5-vocab.gguf", true, 1},
      {"llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "", false, 0},
      {"llama3.2", "meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", "", false, 0},
      // Mistral v0.3 writes the tools before the last user message (they move when the user speaks
      // again) and the system message into the last message if that is a user message (it
      // vanishes as soon as the assistant answers).
      {"mistral", "mistralai-Mistral-7B-Instruct-v0.3.jinja", "<s>", "</s>", "", false, 1, false},
      {"mistral-spm", "mistralai-Mistral-7B-Instruct-v0.3.jinja", "<s>", "</s>", "shared:ggml-vocab-llama-spm.gguf", false, 1, false},
      {"mistral-system", "mistralai-Mistral-7B-Instruct-v0.3.jinja", "<s>", "</s>", "", false, 3, true, false},
      {"gemma3", "google-gemma-3-4b-it.jinja", "<bos>", "<eos>", "", false, 0},
      {"gemma3-vocab", "google-gemma-3-4b-it.jinja", "<bos>", "<eos>", "gemma-3-270m-q4_k_m.gguf", false, 0},
  };
}

class CacheStableHistory : public ::testing::TestWithParam<std::tuple<Family, Client>> {
 protected:
  void SetUp() override {
    const Family& f = std::get<0>(GetParam());
    std::string path = TERN_DEFAULT_MODEL;
    if (f.tokenizer.starts_with("shared:")) path = std::string(TERN_SHARED_DATA) + "/tokenizer-vectors/" + f.tokenizer.substr(7);
    else if (!f.tokenizer.empty()) path = models_dir() + "/" + f.tokenizer;
    // Mistral's template counts an assistant turn without tool_calls as a reply that must
    // alternate with user turns, so a tool loop cannot be sent back as plain text there.
    if (f.name.starts_with("mistral") && std::get<1>(GetParam()) == Client::kPlainText)
      GTEST_SKIP() << "the Mistral template refuses tool results after plain-text assistant turns";
    tok_ = load_tokenizer(path);
    if (!tok_) GTEST_SKIP() << path << " not present (scripts/fetch-test-models)";
    auto format = ChatFormat::from_template(read_text(std::string(TERN_TEST_DATA) + "/templates/src/" + f.template_file), f.bos, f.eos);
    ASSERT_TRUE(format.is_ok()) << format.status().message();
    format_ = std::make_unique<ChatFormat>(std::move(format).value());
  }
  std::unique_ptr<tok::Tokenizer> tok_;
  std::unique_ptr<ChatFormat> format_;
};

TEST_P(CacheStableHistory, EachTurnExtendsThePreviousTurnsTokens) {
  const auto& [family, client] = GetParam();
  TurnMemory memory;
  const RunResult r = HistoryRun(family, *tok_, client, &memory).run(*format_);
  EXPECT_EQ(r.n_transitions, 4);
  EXPECT_EQ(r.n_stable, r.n_transitions - family.unstable);  // the template is as stable as known
  EXPECT_EQ(r.n_extended, r.n_stable);
  EXPECT_EQ(r.n_kept_intact, family.unstable);
  // The last prompt spliced every remembered assistant turn the template renders as written.
  if (family.spliceable) {
    EXPECT_GT(r.last_stats.n_spliced, 0);
  }
  EXPECT_EQ(r.last_stats.n_remembered, 4);
  if (!r.reuse.empty()) {
    std::cout << "[ reuse    ] " << family.name << " (" << client_name(client) << "): tokens reused where the "
              << "template rewrites history:";
    for (const std::string& s : r.reuse) std::cout << " " << s;
    std::cout << "\n";
  }
}

// The control: without the turn memory the same conversations lose the prefix, so the test above
// can fail.
TEST_P(CacheStableHistory, WithoutTheMemoryRetokenizingBreaksThePrefix) {
  const auto& [family, client] = GetParam();
  const RunResult r = HistoryRun(family, *tok_, client, nullptr).run(*format_);
  EXPECT_EQ(r.n_stable, r.n_transitions - family.unstable);
  EXPECT_LT(r.n_extended, r.n_stable);
}

INSTANTIATE_TEST_SUITE_P(Templates, CacheStableHistory,
                         ::testing::Combine(::testing::ValuesIn(families()),
                                            ::testing::Values(Client::kStructured, Client::kStripsReasoning, Client::kPlainText)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param).name + "_" + client_name(std::get<1>(info.param));
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace tern::server

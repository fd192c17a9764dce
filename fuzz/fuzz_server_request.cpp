// libFuzzer target for the server's request path (untrusted HTTP bodies): body parsing, the
// OpenAI and Anthropic translators, the shared prompt builder, and the response encoders fed with
// what the request contained. Beyond "no crash, no leak" it checks:
//   - every refusal is a 4xx whose message starts with the field it names (when it names one);
//   - every accepted spec renders through the chat template and tokenizes to ids in range, or is
//     refused with an error naming "messages";
//   - streamed and non-streamed answers of every dialect are valid JSON even when the generated
//     text is arbitrary bytes (invalid UTF-8 is replaced, never thrown).
// Input: byte 0 picks the endpoint (chat, completions, messages, count_tokens); the rest is the
// body. The tokenizer is the default model's (TERN_MODEL overrides); without it the builder step
// is skipped.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/check.h"
#include "formats/gguf.h"
#include "server/anthropic.h"
#include "server/openai.h"
#include "server/prompt_builder.h"

#ifndef TERN_DEFAULT_MODEL
#define TERN_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace {

using namespace tern::server;

struct Model {
  std::unique_ptr<tern::tok::Tokenizer> tokenizer;
  std::unique_ptr<ChatFormat> format;
};

Model load() {
  Model m;
  const char* env = std::getenv("TERN_MODEL");
  auto file = tern::gguf::File::open(env != nullptr ? env : TERN_DEFAULT_MODEL);
  if (!file) return m;
  if (auto tok = tern::tok::Tokenizer::from_gguf(*file)) m.tokenizer = std::move(tok).value();
  auto source = file->get_string_opt("tokenizer.chat_template");
  if (source && source.value()) {
    if (auto f = ChatFormat::from_template(*source.value(), "<|im_start|>", "<|im_end|>"))
      m.format = std::make_unique<ChatFormat>(std::move(f).value());
  }
  return m;
}

void check_error(const ApiError& e) {
  TERN_CHECK(e.http_status >= 400 && e.http_status < 500);
  TERN_CHECK(!e.message.empty());
  if (!e.param.empty()) TERN_CHECK(e.message.rfind(e.param + ": ", 0) == 0);
  (void)Json::parse(openai_error_body(e));
  (void)Json::parse(anthropic_error_body(e));
}

// Text the "model" generates: taken from the request so that odd bytes reach the encoders.
std::string sample_text(const GenerationSpec& spec) {
  if (!spec.prompt.empty()) return spec.prompt;
  if (spec.messages.is_array() && !spec.messages.as_array().empty()) {
    const tern::chat::Value* c = spec.messages.as_array().back().get("content");
    if (c != nullptr && c->is_string()) return c->as_string();
  }
  return "x";
}

void exercise_encoders(const GenerationSpec& spec) {
  using K = tern::chat::OutputEvent::Kind;
  const std::string text = sample_text(spec);
  std::vector<GenEvent> events(6);
  events[0].kind = GenEvent::Kind::kStarted;
  for (int i = 1; i <= 4; ++i) events[i].kind = GenEvent::Kind::kOutput;
  events[1].output = {K::Text, text, "", "", false};
  events[2].output = {K::ToolCallStart, "", "call_0", text, false};
  events[3].output = {K::ToolCallArgs, text, "call_0", "", false};
  events[4].output = {K::ToolCallEnd, "", "call_0", "", false};
  events[5].kind = GenEvent::Kind::kFinished;
  events[5].finish.reason = FinishReason::kToolCalls;
  const ResponseMeta meta{"id", spec.model, 0};
  Completion c;
  std::unique_ptr<StreamEncoder> encoders[] = {openai_chat_stream(meta, true), openai_completion_stream(meta, true),
                                                anthropic_stream(meta)};
  for (auto& enc : encoders)
    for (const GenEvent& e : events) (void)enc->encode(e);
  for (const GenEvent& e : events) accumulate(c, e);
  (void)openai_chat_response(c, meta).dump(-1, ' ', false, Json::error_handler_t::replace);
  (void)openai_completion_response(c, meta).dump(-1, ' ', false, Json::error_handler_t::replace);
  (void)anthropic_response(c, meta).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Model model = load();
  if (size < 1) return 0;
  const int endpoint = data[0] % 4;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ApiOr<Json> json = parse_request_body(body);
  if (!json.is_ok()) {
    check_error(json.error());
    return 0;
  }
  ApiOr<GenerationSpec> spec = endpoint == 0   ? parse_openai_chat(json.value())
                               : endpoint == 1 ? parse_openai_completion(json.value())
                                               : parse_anthropic_messages(json.value(), endpoint == 3);
  if (!spec.is_ok()) {
    check_error(spec.error());
    return 0;
  }
  if (model.tokenizer && model.format) {
    ApiOr<BuiltPrompt> built = build_prompt(spec.value(), *model.format, *model.tokenizer, "call_f_");
    if (built.is_ok()) {
      for (int32_t id : built.value().tokens) TERN_CHECK(id >= 0 && id < model.tokenizer->n_vocab());
    } else {
      check_error(built.error());
    }
  }
  exercise_encoders(spec.value());
  return 0;
}

// The parser is a resumable scanner over buf_: every step either consumes bytes or reports that it
// needs more, so the same bytes produce the same events however they were split into deltas.
// In Call mode buf_ holds the whole markup of the current call from its start marker, so a call
// that fails can be handed back as raw text.
#include "chat/output_parser.h"

#include <algorithm>
#include <cstdio>

#include "chat/json.h"

namespace tern::chat {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";
constexpr size_t kMaxNameBytes = 256;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Bytes at the end of `s` that start a UTF-8 sequence the text does not finish yet.
size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// Length of the longest proper prefix of `marker` that `s` ends with.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

// True when buf[pos..] starts with `marker`; sets *partial when it holds only a prefix of it.
bool starts_with_at(std::string_view buf, size_t pos, std::string_view marker, bool* partial) {
  const std::string_view rest = buf.substr(pos);
  if (rest.size() >= marker.size()) {
    *partial = false;
    return rest.substr(0, marker.size()) == marker;
  }
  *partial = marker.substr(0, rest.size()) == rest;
  return false;
}

}  // namespace

OutputParserOptions output_options_for_template(std::string_view template_source, std::string_view prompt,
                                                const Value& tools) {
  auto has = [&](std::string_view s) { return template_source.find(s) != std::string_view::npos; };
  OutputParserOptions o;
  o.tools = tools;
  if (has(kToolCallOpen) && has(kFunctionOpen) && has(kParamOpen)) {
    o.format = OutputFormat::Qwen3Coder;
  } else if (has(kToolCallOpen)) {
    o.format = OutputFormat::Hermes;
  } else if (has(kMistralCalls)) {
    o.format = OutputFormat::Mistral;
  } else if (has("<|start_header_id|>") && (has(kPythonTag) || has("\"parameters\""))) {
    o.format = OutputFormat::Llama3;
  }
  o.reasoning = has(kThinkOpen) || has(kThinkClose);
  // The generation prompt of reasoning templates (DeepSeek-R1, Qwen3 thinking models) may end
  // inside an open <think>.
  std::string_view tail = prompt;
  while (!tail.empty() && is_ws(tail.back())) tail.remove_suffix(1);
  o.starts_in_reasoning = o.reasoning && tail.size() >= kThinkOpen.size() &&
                          tail.substr(tail.size() - kThinkOpen.size()) == kThinkOpen;
  return o;
}

OutputParser::OutputParser(OutputParserOptions options) : opt_(std::move(options)) {
  if (opt_.tools.is_array()) {
    for (const Value& t : opt_.tools.as_array()) {
      const Value* fn = t.get("function");
      const Value* name = fn != nullptr ? fn->get("name") : t.get("name");
      if (name != nullptr && name->is_string()) tool_names_.push_back(name->as_string());
    }
  }
  if (opt_.reasoning && opt_.starts_in_reasoning) mode_ = Mode::Reasoning;
}

std::vector<OutputEvent> OutputParser::feed(std::string_view delta) {
  std::vector<OutputEvent> out;
  buf_.append(delta);
  step(&out, false);
  return out;
}

std::vector<OutputEvent> OutputParser::finish() {
  std::vector<OutputEvent> out;
  step(&out, true);
  if (mode_ == Mode::Call) {
    pos_ = buf_.size();
    fail_call(&out);
    step(&out, true);
  }
  if (mode_ == Mode::Reasoning) {
    OutputEvent e;
    e.kind = OutputEvent::Kind::Reasoning;
    e.text = std::move(buf_);
    e.malformed = true;  // the <think> block never closed
    out.push_back(std::move(e));
    buf_.clear();
  }
  return out;
}

void OutputParser::step(std::vector<OutputEvent>* out, bool at_end) {
  while (true) {
    bool progressed = false;
    switch (mode_) {
      case Mode::Text: progressed = step_text(out, at_end); break;
      case Mode::Reasoning: progressed = step_reasoning(out, at_end); break;
      case Mode::Call: progressed = step_call(out, at_end); break;
    }
    if (!progressed) return;
  }
}

void OutputParser::emit_text(std::vector<OutputEvent>* out, std::string text, bool malformed) {
  if (text.empty()) return;
  if (std::any_of(text.begin(), text.end(), [](char c) { return !is_ws(c); })) saw_content_ = true;
  if (!out->empty() && out->back().kind == OutputEvent::Kind::Text && out->back().malformed == malformed) {
    out->back().text += text;
    return;
  }
  OutputEvent e;
  e.kind = OutputEvent::Kind::Text;
  e.text = std::move(text);
  e.malformed = malformed;
  out->push_back(std::move(e));
}

bool OutputParser::step_text(std::vector<OutputEvent>* out, bool at_end) {
  if (buf_.empty()) return false;
  if (malformed_rest_) {
    const size_t keep = at_end ? 0 : incomplete_utf8_tail(buf_);
    emit_text(out, buf_.substr(0, buf_.size() - keep), true);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  if (!malformed_until_.empty()) {
    const size_t close = buf_.find(malformed_until_);
    if (close != std::string::npos) {
      emit_text(out, buf_.substr(0, close + malformed_until_.size()), true);
      buf_.erase(0, close + malformed_until_.size());
      malformed_until_ = {};
      return true;
    }
    size_t keep = at_end ? 0 : partial_suffix(buf_, malformed_until_);
    if (!at_end) keep += incomplete_utf8_tail(std::string_view(buf_).substr(0, buf_.size() - keep));
    emit_text(out, buf_.substr(0, buf_.size() - keep), true);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  // The markers that may start here, and where the earliest one is.
  std::vector<std::string_view> markers;
  if (opt_.reasoning && !saw_content_) markers.push_back(kThinkOpen);
  if (opt_.format == OutputFormat::Hermes || opt_.format == OutputFormat::Qwen3Coder) markers.push_back(kToolCallOpen);
  if (opt_.format == OutputFormat::Mistral) markers.push_back(kMistralCalls);
  if (opt_.format == OutputFormat::Llama3) markers.push_back(kPythonTag);
  size_t hit = std::string::npos;
  std::string_view hit_marker;
  for (std::string_view m : markers) {
    size_t at = buf_.find(m);
    // <think> opens reasoning only before any content (whitespace aside).
    if (m == kThinkOpen && at != std::string::npos &&
        !std::all_of(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(at), is_ws)) {
      at = std::string::npos;
    }
    if (at < hit) {
      hit = at;
      hit_marker = m;
    }
  }
  // Llama 3: a message that opens with '{' is a JSON tool call (or plain JSON text).
  bool llama_object = false;
  if (opt_.format == OutputFormat::Llama3 && !saw_content_) {
    size_t first = 0;
    while (first < buf_.size() && is_ws(buf_[first])) ++first;
    if (first < buf_.size() && buf_[first] == '{' && first < hit) {
      hit = first;
      hit_marker = "";
      llama_object = true;
    }
  }
  if (hit != std::string::npos) {
    emit_text(out, buf_.substr(0, hit), false);
    buf_.erase(0, hit);
    if (hit_marker == kThinkOpen) {
      buf_.erase(0, kThinkOpen.size());
      mode_ = Mode::Reasoning;
      return true;
    }
    if (llama_object) {
      begin_call("", Stage::ObjOpen);
      after_object_ = Stage::LlamaNext;
    } else if (hit_marker == kPythonTag) {
      begin_call(std::string(kPythonTag), Stage::ObjOpen);
      after_object_ = Stage::LlamaNext;
    } else if (hit_marker == kMistralCalls) {
      begin_call(std::string(kMistralCalls), Stage::MistralArrayOpen);
    } else if (opt_.format == OutputFormat::Qwen3Coder) {
      begin_call(std::string(kToolCallOpen), Stage::XmlFunctionOpen);
    } else {
      begin_call(std::string(kToolCallOpen), Stage::ObjOpen);
      after_object_ = Stage::HermesClose;
    }
    return true;
  }
  // No marker: emit all but a possible marker prefix (or, for Llama, leading whitespace that may
  // precede a '{') and an unfinished UTF-8 sequence.
  size_t hold = 0;
  if (!at_end) {
    for (std::string_view m : markers) hold = std::max(hold, partial_suffix(buf_, m));
    if (opt_.format == OutputFormat::Llama3 && !saw_content_ &&
        std::all_of(buf_.begin(), buf_.end(), [](char c) { return is_ws(c); })) {
      hold = buf_.size();
    }
    hold = std::max(hold, incomplete_utf8_tail(std::string_view(buf_).substr(0, buf_.size() - hold)) + hold);
  }
  if (hold >= buf_.size()) return false;
  emit_text(out, buf_.substr(0, buf_.size() - hold), false);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool OutputParser::step_reasoning(std::vector<OutputEvent>* out, bool at_end) {
  if (buf_.empty()) return false;
  const size_t close = buf_.find(kThinkClose);
  size_t n_emit = close;
  if (close == std::string::npos) {
    if (at_end) return false;  // finish() flags the unclosed block
    const size_t hold = partial_suffix(buf_, kThinkClose);
    n_emit = buf_.size() - hold;
    n_emit -= incomplete_utf8_tail(std::string_view(buf_).substr(0, n_emit));
  }
  if (n_emit > 0) {
    if (!out->empty() && out->back().kind == OutputEvent::Kind::Reasoning) {
      out->back().text += buf_.substr(0, n_emit);
    } else {
      OutputEvent e;
      e.kind = OutputEvent::Kind::Reasoning;
      e.text = buf_.substr(0, n_emit);
      out->push_back(std::move(e));
    }
  }
  if (close == std::string::npos) {
    buf_.erase(0, n_emit);
    return false;
  }
  buf_.erase(0, close + kThinkClose.size());
  mode_ = Mode::Text;
  return true;
}

void OutputParser::begin_call(std::string start_marker, Stage stage) {
  mode_ = Mode::Call;
  pos_ = start_marker.size();
  stage_ = stage;
  call_id_.clear();
  call_name_.clear();
  call_started_ = false;
  call_has_args_ = false;
  args_seen_ = false;
  n_xml_params_ = 0;
}

bool OutputParser::tool_known(const std::string& name) const {
  if (name.empty()) return false;
  if (tool_names_.empty()) return true;
  return std::find(tool_names_.begin(), tool_names_.end(), name) != tool_names_.end();
}

void OutputParser::start_call(std::vector<OutputEvent>* out) {
  if (call_started_) return;
  char id[32];
  std::snprintf(id, sizeof(id), "%0*zu", static_cast<int>(opt_.id_prefix.size() < 9 ? 9 - opt_.id_prefix.size() : 1),
                n_calls_++);
  call_id_ = opt_.id_prefix + id;
  OutputEvent e;
  e.kind = OutputEvent::Kind::ToolCallStart;
  e.id = call_id_;
  e.name = call_name_;
  out->push_back(std::move(e));
  call_started_ = true;
}

void OutputParser::emit_args(std::vector<OutputEvent>* out, std::string fragment) {
  if (fragment.empty()) return;
  call_has_args_ = true;
  if (!out->empty() && out->back().kind == OutputEvent::Kind::ToolCallArgs && out->back().id == call_id_) {
    out->back().text += fragment;
    return;
  }
  OutputEvent e;
  e.kind = OutputEvent::Kind::ToolCallArgs;
  e.id = call_id_;
  e.text = std::move(fragment);
  out->push_back(std::move(e));
}

void OutputParser::end_call(std::vector<OutputEvent>* out) {
  if (!call_has_args_) emit_args(out, "{}");
  OutputEvent e;
  e.kind = OutputEvent::Kind::ToolCallEnd;
  e.id = call_id_;
  out->push_back(std::move(e));
  call_started_ = false;
}

bool OutputParser::name_too_long(size_t start, size_t delim_at, size_t delim_len) const {
  const size_t seen = delim_at == std::string::npos ? buf_.size() - start : delim_at + delim_len - 1 - start;
  return seen > kMaxNameBytes;
}

bool OutputParser::fail_long_name(std::vector<OutputEvent>* out, size_t start) {
  pos_ = start + kMaxNameBytes + 1;
  fail_call(out);
  return true;
}

void OutputParser::fail_call(std::vector<OutputEvent>* out) {
  // Llama 3: a leading JSON object that never looked like a call is just text.
  const bool plain = opt_.format == OutputFormat::Llama3 && !call_started_ && call_name_.empty() &&
                     buf_.compare(0, kPythonTag.size(), kPythonTag) != 0;
  if (call_started_) {
    OutputEvent e;
    e.kind = OutputEvent::Kind::ToolCallEnd;
    e.id = call_id_;
    e.malformed = true;
    out->push_back(std::move(e));
    call_started_ = false;
  }
  const bool was_tool_call_tag = buf_.compare(0, kToolCallOpen.size(), kToolCallOpen) == 0;
  std::string raw = buf_.substr(0, pos_);
  buf_.erase(0, pos_);
  pos_ = 0;
  mode_ = Mode::Text;
  emit_text(out, std::move(raw), !plain);
  saw_content_ = true;
  if (was_tool_call_tag) {
    malformed_until_ = kToolCallClose;
  } else if (!plain) {
    malformed_rest_ = true;
  }
}

bool OutputParser::skip_ws(bool at_end) {
  while (pos_ < buf_.size() && is_ws(buf_[pos_])) ++pos_;
  return pos_ < buf_.size();
}

bool OutputParser::scan_value(ValueScan* s, bool at_end, bool* bad) {
  *bad = false;
  while (pos_ < buf_.size()) {
    const char c = buf_[pos_];
    if (!s->started) {
      s->started = true;
      s->first = c;
      if (c == '{' || c == '[') {
        s->depth = 1;
      } else if (c == '"') {
        s->in_string = true;
      } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n' || c == 'N' || c == 'I') {
        s->scalar = true;
      } else {
        *bad = true;
        return false;
      }
      ++pos_;
      if (s->scalar) continue;
      continue;
    }
    if (s->in_string) {
      if (!s->escape && static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
        *bad = true;  // pos_ stays on the offending byte: everything before it was scanned
        return false;
      }
      ++pos_;
      if (s->escape) {
        s->escape = false;
      } else if (c == '\\') {
        s->escape = true;
      } else if (c == '"') {
        s->in_string = false;
        if (s->depth == 0) return true;
      }
      continue;
    }
    if (s->scalar) {
      if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '+' ||
          c == '-') {
        ++pos_;
        continue;
      }
      return true;  // the delimiter belongs to the enclosing grammar
    }
    ++pos_;
    if (c == '"') {
      s->in_string = true;
    } else if (c == '{' || c == '[') {
      if (++s->depth > kMaxNesting) {
        --pos_;
        *bad = true;
        return false;
      }
    } else if (c == '}' || c == ']') {
      if (--s->depth == 0) return true;
    }
  }
  return at_end && s->scalar;  // a number at the very end of the output is complete
}

bool OutputParser::step_call(std::vector<OutputEvent>* out, bool at_end) {
  if (opt_.format == OutputFormat::Qwen3Coder) return step_xml(out, at_end);
  bool partial = false;
  switch (stage_) {
    case Stage::HermesClose: {
      if (!skip_ws(at_end)) return false;
      if (starts_with_at(buf_, pos_, kToolCallClose, &partial)) {
        pos_ += kToolCallClose.size();
        end_call(out);
        buf_.erase(0, pos_);
        pos_ = 0;
        mode_ = Mode::Text;
        return true;
      }
      if (partial) return false;
      fail_call(out);
      return true;
    }
    case Stage::MistralArrayOpen: {
      if (!skip_ws(at_end)) return false;
      if (buf_[pos_] == '[') {
        ++pos_;
        stage_ = Stage::ObjOpen;
        after_object_ = Stage::MistralArrayNext;
      } else {
        stage_ = Stage::MistralName;
      }
      return true;
    }
    case Stage::MistralArrayNext: {
      if (!skip_ws(at_end)) return false;
      const char c = buf_[pos_++];
      buf_.erase(0, pos_);
      pos_ = 0;
      if (c == ',') {
        begin_call("", Stage::ObjOpen);
        after_object_ = Stage::MistralArrayNext;
        return true;
      }
      if (c == ']') {
        mode_ = Mode::Text;
        return true;
      }
      buf_.insert(buf_.begin(), c);
      pos_ = 1;
      fail_call(out);
      return true;
    }
    case Stage::MistralName: {
      const size_t bracket = buf_.find('[', pos_);
      if (name_too_long(pos_, bracket, 1)) return fail_long_name(out, pos_);
      if (bracket == std::string::npos) return false;
      std::string name = buf_.substr(pos_, bracket - pos_);
      while (!name.empty() && is_ws(name.back())) name.pop_back();
      size_t after = bracket;
      if (starts_with_at(buf_, after, kMistralCallId, &partial)) {
        // [CALL_ID]id[ARGS]: the model's own id is dropped; tern numbers calls itself.
        const size_t args = buf_.find(kMistralArgs, after);
        if (name_too_long(after, args, kMistralArgs.size())) return fail_long_name(out, after);
        if (args == std::string::npos) return false;
        after = args;
      } else if (partial) {
        return false;
      }
      if (!starts_with_at(buf_, after, kMistralArgs, &partial)) {
        if (partial) return false;
        pos_ = after;
        fail_call(out);
        return true;
      }
      call_name_ = name;
      if (!tool_known(name) || name.find_first_of(" \t\n\"{}") != std::string::npos) {
        pos_ = after;
        fail_call(out);
        return true;
      }
      pos_ = after + kMistralArgs.size();
      start_call(out);
      scan_ = ValueScan{};
      stage_ = Stage::MistralArgs;
      return true;
    }
    case Stage::MistralArgs: {
      if (!scan_.started && !skip_ws(at_end)) return false;
      if (!scan_.started) value_start_ = pos_;
      if (!scan_.started && buf_[pos_] != '{') {
        fail_call(out);
        return true;
      }
      const size_t before = pos_;
      bool bad = false;
      const bool done = scan_value(&scan_, at_end, &bad);
      // The bytes scanned before a bad one go out first, as they would have if they had
      // arrived in an earlier delta.
      emit_args(out, buf_.substr(before, pos_ - before));
      if (bad) {
        fail_call(out);
        return true;
      }
      if (!done) return false;
      if (!parse_json(std::string_view(buf_).substr(value_start_, pos_ - value_start_)).is_ok()) {
        fail_call(out);
        return true;
      }
      end_call(out);
      buf_.erase(0, pos_);
      pos_ = 0;
      mode_ = Mode::Text;
      return true;
    }
    case Stage::LlamaNext: {
      size_t p = pos_;
      while (p < buf_.size() && is_ws(buf_[p])) ++p;
      if (p >= buf_.size() && !at_end) return false;
      if (p < buf_.size() && buf_[p] == ';') {
        size_t q = p + 1;
        while (q < buf_.size() && is_ws(buf_[q])) ++q;
        if (q >= buf_.size() && !at_end) return false;
        if (q < buf_.size() && buf_[q] == '{') {
          buf_.erase(0, q);
          begin_call("", Stage::ObjOpen);
          after_object_ = Stage::LlamaNext;
          return true;
        }
      }
      // Whatever follows the calls is text.
      buf_.erase(0, pos_);
      pos_ = 0;
      mode_ = Mode::Text;
      saw_content_ = true;
      return true;
    }
    default: {
      bool done = false;
      const bool progressed = step_json_object(out, at_end, &done);
      if (!done) return progressed;
      if (after_object_ == Stage::HermesClose) {
        stage_ = Stage::HermesClose;
        return true;
      }
      end_call(out);
      buf_.erase(0, pos_);
      pos_ = 0;
      begin_call("", after_object_);
      return true;
    }
  }
}

// One JSON call object: {"name": "...", "arguments" | "parameters": {...}, other keys...}.
bool OutputParser::step_json_object(std::vector<OutputEvent>* out, bool at_end, bool* done) {
  *done = false;
  bool bad = false;
  switch (stage_) {
    case Stage::ObjOpen:
      if (!skip_ws(at_end)) return false;
      if (buf_[pos_] != '{') return fail_call(out), true;
      obj_start_ = pos_++;
      stage_ = Stage::ObjKeyOrEnd;
      return true;
    case Stage::ObjKeyOrEnd:
      if (!skip_ws(at_end)) return false;
      if (buf_[pos_] == '}') break;  // the object ends
      if (buf_[pos_] != '"') return fail_call(out), true;
      value_start_ = pos_;
      scan_ = ValueScan{};
      stage_ = Stage::ObjKey;
      return true;
    case Stage::ObjKey: {
      if (!scan_value(&scan_, at_end, &bad)) return bad ? (fail_call(out), true) : false;
      Result<Value> key = parse_json(std::string_view(buf_).substr(value_start_, pos_ - value_start_));
      if (!key.is_ok() || !key->is_string()) return fail_call(out), true;
      key_ = key->as_string();
      stage_ = Stage::ObjColon;
      return true;
    }
    case Stage::ObjColon:
      if (!skip_ws(at_end)) return false;
      if (buf_[pos_] != ':') return fail_call(out), true;
      ++pos_;
      stage_ = Stage::ObjValue;
      return true;
    case Stage::ObjValue:
      if (!skip_ws(at_end)) return false;
      value_start_ = pos_;
      scan_ = ValueScan{};
      if (key_ == "name") {
        if (buf_[pos_] != '"') return fail_call(out), true;
        stage_ = Stage::ObjNameString;
      } else if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
        if (buf_[pos_] != '{' && buf_[pos_] != '"') return fail_call(out), true;
        args_seen_ = true;
        args_start_ = pos_;
        stage_ = call_name_.empty() ? Stage::ObjSkipValue : Stage::ObjArgs;
      } else {
        stage_ = Stage::ObjSkipValue;
      }
      return true;
    case Stage::ObjNameString: {
      if (!scan_value(&scan_, at_end, &bad)) return bad ? (fail_call(out), true) : false;
      Result<Value> name = parse_json(std::string_view(buf_).substr(value_start_, pos_ - value_start_));
      if (!name.is_ok() || !name->is_string() || !call_name_.empty()) return fail_call(out), true;
      call_name_ = name->as_string();
      if (!tool_known(call_name_)) return fail_call(out), true;
      start_call(out);
      if (args_seen_) {
        // The arguments came before the name: they were scanned, and go out now in one piece.
        const std::string raw = buf_.substr(args_start_, args_end_ - args_start_);
        if (raw[0] == '"') {
          Result<Value> s = parse_json(raw);
          if (!s.is_ok()) return fail_call(out), true;
          emit_args(out, s->as_string());
        } else {
          emit_args(out, raw);
        }
      }
      stage_ = Stage::ObjCommaOrEnd;
      return true;
    }
    case Stage::ObjArgs: {
      const size_t before = pos_;
      const bool complete = scan_value(&scan_, at_end, &bad);
      if (scan_.first == '{') emit_args(out, buf_.substr(before, pos_ - before));
      if (bad) return fail_call(out), true;
      if (!complete) return pos_ > before;
      args_end_ = pos_;
      if (scan_.first == '"') {
        // Arguments as a JSON string holding JSON: stream its decoded text.
        Result<Value> s = parse_json(std::string_view(buf_).substr(args_start_, pos_ - args_start_));
        if (!s.is_ok() || !s->is_string()) return fail_call(out), true;
        emit_args(out, s->as_string());
      }
      stage_ = Stage::ObjCommaOrEnd;
      return true;
    }
    case Stage::ObjSkipValue: {
      const size_t before = pos_;
      if (!scan_value(&scan_, at_end, &bad)) return bad ? (fail_call(out), true) : (pos_ > before);
      if (args_seen_ && args_start_ == value_start_) args_end_ = pos_;
      stage_ = Stage::ObjCommaOrEnd;
      return true;
    }
    case Stage::ObjCommaOrEnd:
      if (!skip_ws(at_end)) return false;
      if (buf_[pos_] == ',') {
        ++pos_;
        stage_ = Stage::ObjKeyOrEnd;
        return true;
      }
      if (buf_[pos_] != '}') return fail_call(out), true;
      break;
    default: return false;
  }
  // '}' at pos_: the object is complete. It must be valid JSON and name a tool.
  ++pos_;
  Result<Value> whole = parse_json(std::string_view(buf_).substr(obj_start_, pos_ - obj_start_));
  if (!whole.is_ok() || call_name_.empty()) return fail_call(out), true;
  // The arguments streamed are the first "arguments" / "parameters" value (a repeated key is
  // skipped); given as a string, it must hold a JSON object. (Checked on that value's own text:
  // a lookup in the parsed object could see the repeated key's value instead.)
  if (args_seen_) {
    const std::string_view raw = std::string_view(buf_).substr(args_start_, args_end_ - args_start_);
    if (raw.front() == '"') {
      const Result<Value> s = parse_json(raw);
      bool object = false;
      if (s.is_ok() && s->is_string()) {
        const Result<Value> inner = parse_json(s->as_string());
        object = inner.is_ok() && inner->is_object();
      }
      if (!object) return fail_call(out), true;
    }
  }
  *done = true;
  return true;
}

std::string OutputParser::param_json(const std::string& key, const std::string& raw) const {
  // Qwen3-Coder writes parameter values raw; the tool schema says how to read them.
  std::string type;
  if (opt_.tools.is_array()) {
    for (const Value& t : opt_.tools.as_array()) {
      const Value* fn = t.get("function") ? t.get("function") : &t;
      const Value* name = fn->get("name");
      if (name == nullptr || !name->is_string() || name->as_string() != call_name_) continue;
      const Value* params = fn->get("parameters");
      const Value* props = params != nullptr ? params->get("properties") : nullptr;
      const Value* prop = props != nullptr ? props->get(key) : nullptr;
      const Value* ty = prop != nullptr ? prop->get("type") : nullptr;
      if (ty != nullptr && ty->is_string()) type = ty->as_string();
    }
  }
  if (!type.empty() && type != "string") {
    Result<Value> v = parse_json(raw);
    if (v.is_ok()) {
      const bool fits = (type == "integer" && v->is_int()) || (type == "number" && (v->is_int() || v->is_float())) ||
                        (type == "boolean" && v->is_bool()) || (type == "object" && v->is_object()) ||
                        (type == "array" && v->is_array()) || type == "null";
      if (fits) return dump_json(*v).value();
    }
  }
  return dump_json(Value(raw)).value();
}

bool OutputParser::step_xml(std::vector<OutputEvent>* out, bool at_end) {
  bool partial = false;
  switch (stage_) {
    case Stage::XmlFunctionOpen: {
      if (!skip_ws(at_end)) return false;
      if (!starts_with_at(buf_, pos_, kFunctionOpen, &partial)) return partial ? false : (fail_call(out), true);
      const size_t name_start = pos_ + kFunctionOpen.size();
      const size_t gt = buf_.find('>', name_start);
      if (name_too_long(name_start, gt, 1)) return fail_long_name(out, name_start);
      if (gt == std::string::npos) return false;
      call_name_ = buf_.substr(name_start, gt - name_start);
      if (!tool_known(call_name_)) return fail_call(out), true;
      pos_ = gt + 1;
      start_call(out);
      stage_ = Stage::XmlBody;
      return true;
    }
    case Stage::XmlBody: {
      if (!skip_ws(at_end)) return false;
      if (starts_with_at(buf_, pos_, kParamOpen, &partial)) {
        const size_t key_start = pos_ + kParamOpen.size();
        const size_t gt = buf_.find('>', key_start);
        if (name_too_long(key_start, gt, 1)) return fail_long_name(out, key_start);
        if (gt == std::string::npos) return false;
        key_ = buf_.substr(key_start, gt - key_start);
        pos_ = gt + 1;
        value_start_ = pos_;
        stage_ = Stage::XmlParamValue;
        return true;
      }
      bool partial_close = false;
      if (starts_with_at(buf_, pos_, kFunctionClose, &partial_close)) {
        pos_ += kFunctionClose.size();
        emit_args(out, n_xml_params_ == 0 ? "{}" : "}");
        stage_ = Stage::XmlFunctionClosed;
        return true;
      }
      if (partial || partial_close) return false;
      fail_call(out);
      return true;
    }
    case Stage::XmlParamValue: {
      const size_t close = buf_.find(kParamClose, value_start_);
      if (close == std::string::npos) return false;
      std::string raw = buf_.substr(value_start_, close - value_start_);
      if (!raw.empty() && raw.front() == '\n') raw.erase(0, 1);
      if (!raw.empty() && raw.back() == '\n') raw.pop_back();
      emit_args(out, (n_xml_params_ == 0 ? "{" : ", ") + dump_json(Value(key_)).value() + ": " + param_json(key_, raw));
      ++n_xml_params_;
      pos_ = close + kParamClose.size();
      stage_ = Stage::XmlBody;
      return true;
    }
    case Stage::XmlFunctionClosed: {
      if (!skip_ws(at_end)) return false;
      if (starts_with_at(buf_, pos_, kToolCallClose, &partial)) {
        pos_ += kToolCallClose.size();
        end_call(out);
        buf_.erase(0, pos_);
        pos_ = 0;
        mode_ = Mode::Text;
        return true;
      }
      if (partial) return false;
      fail_call(out);
      return true;
    }
    default: return false;
  }
}

}  // namespace tern::chat

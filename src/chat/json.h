// JSON for the chat layer, matching Python's `json` module, because chat templates print tool
// schemas and arguments with Hugging Face's `tojson` filter, which is json.dumps(x,
// ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys), and renders must
// be byte-identical. The chat layer owns this small codec (instead of nlohmann-json, which stays in
// server/) so that chat/ depends only on core/ and its Value keeps Python's int/float distinction
// and dict order exactly.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/value.h"
#include "core/status.h"

namespace tern::chat {

struct JsonDumpOptions {
  // Python's indent: nullopt is a single line; n >= 0 puts each item on its own line, indented by
  // n spaces per level. `indent_text` (when set) is used instead of spaces (json.dumps(indent="\t")).
  std::optional<int> indent;
  std::optional<std::string> indent_text;
  // Separators; nullopt means Python's defaults: (", ", ": ") without indent, (",", ": ") with.
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
  bool sort_keys = false;
};

// json.dumps. Fails (naming the type, as Python does) for values JSON cannot hold: Undefined,
// callables, namespaces.
Result<std::string> dump_json(const Value& v, const JsonDumpOptions& options = {});

struct JsonParseOptions {
  int max_depth = 512;  // nesting bound: the parser is recursive and its input untrusted
};

// json.loads: objects keep key order (a repeated key keeps its first position, last value),
// integers stay ints (beyond int64 they become floats), NaN/Infinity/-Infinity are accepted as
// Python accepts them. Errors name the line and column and what was expected.
Result<Value> parse_json(std::string_view text, const JsonParseOptions& options = {});

}  // namespace tern::chat

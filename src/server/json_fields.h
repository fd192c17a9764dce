// JSON at the server boundary: parsing request bodies (bounded nesting), converting between
// nlohmann::json and the chat layer's Value, and reading typed fields with errors that name the
// field's full path ("messages[2].content: expected a string or a list of parts, got a number").
//
// note: the field readers throw FieldError, which each translator's public entry point catches and
// returns as an ApiError. Validation is deep and field-by-field, and a Result after every read
// would bury the translation itself; no exception crosses a translator's public interface.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "chat/value.h"
#include "server/api_types.h"

namespace tern::server {

// Objects keep their key order: tool schemas are printed into prompts, and Hugging Face renders
// them in the client's order.
using Json = nlohmann::ordered_json;

// Nesting deeper than this is refused (the conversions below recurse).
constexpr int kMaxJsonDepth = 64;
// Members per object: an ordered object looks keys up linearly, so a body of a million keys
// would otherwise take quadratic time to parse.
constexpr int kMaxObjectMembers = 4096;

// Parses a request body that must be a JSON object. Errors name the byte offset.
ApiOr<Json> parse_request_body(std::string_view body);

// Thrown by the readers; converted to the ApiError it carries at translator entry points.
struct FieldError {
  ApiError error;
};
[[noreturn]] void fail_field(const std::string& path, const std::string& message);

// "a string", "a number", ... (for "expected X, got Y" messages).
const char* json_type_name(const Json& j);

// A JSON object with its path, read field by field.
class Fields {
 public:
  // Throws unless j is an object.
  Fields(const Json& j, std::string path);

  const Json* get(std::string_view key) const;  // nullptr when absent or null
  std::string path(std::string_view key) const;
  const Json& json() const { return *j_; }
  const std::string& path() const { return path_; }

  const Json& required(std::string_view key) const;
  std::string required_string(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  std::optional<bool> boolean(std::string_view key) const;
  // Numbers within [lo, hi] (inclusive); integers reject fractions.
  std::optional<double> number(std::string_view key, double lo, double hi) const;
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi) const;
  // A required array / object (throws naming the field), or nullptr when absent.
  const Json* array(std::string_view key) const;
  const Json* object(std::string_view key) const;
  // Fails with "unsupported value" unless absent or equal to `allowed` (a parameter with one
  // supported value, such as n = 1).
  void only(std::string_view key, const Json& allowed) const;

 private:
  const Json* j_;
  std::string path_;
};

// The path of an array element: "messages" + 2 -> "messages[2]".
std::string index_path(const std::string& path, size_t i);

// nlohmann <-> chat::Value, keeping object key order and the int/float distinction.
chat::Value to_value(const Json& j);
Json from_value(const chat::Value& v);

}  // namespace tern::server

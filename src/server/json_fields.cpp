#include "server/json_fields.h"

#include <cmath>
#include <vector>

#include "chat/value.h"

namespace tern::server {

ApiError invalid_field(std::string param, std::string message) {
  ApiError e;
  e.http_status = 400;
  e.message = param.empty() ? std::move(message) : param + ": " + message;
  e.param = std::move(param);
  return e;
}

void fail_field(const std::string& path, const std::string& message) { throw FieldError{invalid_field(path, message)}; }

namespace {

// Thrown from the parse callback to stop at the first structural limit.
struct LimitExceeded {
  std::string message;
};

}  // namespace

ApiOr<Json> parse_request_body(std::string_view body) {
  std::vector<int> members;  // member count of each open object, by depth
  auto limits = [&](int depth, Json::parse_event_t event, Json&) {
    if (depth > kMaxJsonDepth)
      throw LimitExceeded{"nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
    if (event == Json::parse_event_t::object_start) {
      members.resize(static_cast<size_t>(depth) + 1);
      members[depth] = 0;
    } else if (event == Json::parse_event_t::key && depth >= 1 && static_cast<size_t>(depth - 1) < members.size()) {
      if (++members[depth - 1] > kMaxObjectMembers)
        throw LimitExceeded{"an object with more than " + std::to_string(kMaxObjectMembers) + " members"};
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(body.begin(), body.end(), limits);
  } catch (const Json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    std::string what = e.what();
    const size_t at = what.find("] ");
    return invalid_field("", "the body is not valid JSON: " + (at == std::string::npos ? what : what.substr(at + 2)));
  } catch (const LimitExceeded& e) {
    return invalid_field("", "the body is refused: " + e.message);
  } catch (const Json::exception& e) {
    return invalid_field("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return invalid_field("", std::string("expected a JSON object as the body, got ") + json_type_name(j));
  return j;
}

const char* json_type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unsupported JSON value";
  }
}

std::string index_path(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

Fields::Fields(const Json& j, std::string path) : j_(&j), path_(std::move(path)) {
  if (!j.is_object()) fail_field(path_, std::string("expected an object, got ") + json_type_name(j));
}

std::string Fields::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const Json* Fields::get(std::string_view key) const {
  auto it = j_->find(key);
  if (it == j_->end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& Fields::required(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) fail_field(path(key), "required field is missing");
  return *v;
}

std::string Fields::required_string(std::string_view key) const {
  const Json& v = required(key);
  if (!v.is_string()) fail_field(path(key), std::string("expected a string, got ") + json_type_name(v));
  return v.get<std::string>();
}

std::optional<std::string> Fields::string(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) fail_field(path(key), std::string("expected a string, got ") + json_type_name(*v));
  return v->get<std::string>();
}

std::optional<bool> Fields::boolean(std::string_view key) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) fail_field(path(key), std::string("expected a boolean, got ") + json_type_name(*v));
  return v->get<bool>();
}

namespace {

std::string number_text(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

}  // namespace

std::optional<double> Fields::number(std::string_view key, double lo, double hi) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) fail_field(path(key), std::string("expected a number, got ") + json_type_name(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))  // also refuses NaN
    fail_field(path(key), "expected a number in [" + number_text(lo) + ", " + number_text(hi) + "], got " + number_text(x));
  return x;
}

std::optional<int64_t> Fields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const Json* v = get(key);
  if (v == nullptr) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());  // 16.0 is an integer to Python clients
  } else {
    fail_field(path(key), std::string("expected an integer, got ") + json_type_name(*v));
  }
  if (x < lo || x > hi)
    fail_field(path(key), "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                              std::to_string(x));
  return x;
}

const Json* Fields::array(std::string_view key) const {
  const Json* v = get(key);
  if (v != nullptr && !v->is_array()) fail_field(path(key), std::string("expected an array, got ") + json_type_name(*v));
  return v;
}

const Json* Fields::object(std::string_view key) const {
  const Json* v = get(key);
  if (v != nullptr && !v->is_object()) fail_field(path(key), std::string("expected an object, got ") + json_type_name(*v));
  return v;
}

void Fields::only(std::string_view key, const Json& allowed) const {
  const Json* v = get(key);
  if (v != nullptr && *v != allowed)
    fail_field(path(key), "unsupported value " + v->dump(-1, ' ', false, Json::error_handler_t::replace) +
                              " (only " + allowed.dump() + " is supported)");
}

chat::Value to_value(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return chat::Value();
    case Json::value_t::boolean: return chat::Value(j.get<bool>());
    case Json::value_t::number_integer: return chat::Value(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return chat::Value(static_cast<double>(u));
      return chat::Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return chat::Value(j.get<double>());
    case Json::value_t::string: return chat::Value(j.get<std::string>());
    case Json::value_t::array: {
      std::vector<chat::Value> items;
      items.reserve(j.size());
      for (const Json& item : j) items.push_back(to_value(item));
      return chat::Value::array(std::move(items));
    }
    case Json::value_t::object: {
      chat::Object o;
      for (const auto& [k, v] : j.items()) o.set(k, to_value(v));
      return chat::Value::object(std::move(o));
    }
    default: return chat::Value();
  }
}

Json from_value(const chat::Value& v) {
  switch (v.kind()) {
    case chat::Kind::Bool: return v.as_bool();
    case chat::Kind::Int: return v.as_int();
    case chat::Kind::Float: return v.as_float();
    case chat::Kind::String: return v.as_string();
    case chat::Kind::Array: {
      Json a = Json::array();
      for (const chat::Value& item : v.as_array()) a.push_back(from_value(item));
      return a;
    }
    case chat::Kind::Object: {
      Json o = Json::object();
      for (const auto& [k, item] : v.as_object().items()) o[k] = from_value(item);
      return o;
    }
    default: return nullptr;  // None, Undefined, callables
  }
}

}  // namespace tern::server

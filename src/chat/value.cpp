#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/utf8.h"

namespace tern::chat {

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Object::find(std::string_view key) {
  for (auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::set(std::string key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  holds_namespace = holds_namespace || value.holds_namespace();
  if (Value* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  items_.emplace_back(std::move(key), std::move(value));
}

bool Object::erase(std::string_view key) {
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    if (it->first == key) {
      items_.erase(it);
      return true;
    }
  }
  return false;
}

namespace {
std::shared_ptr<ArrayData> make_array(std::vector<Value> items) {
  auto a = std::make_shared<ArrayData>();
  for (const Value& item : items) {
    a->depth = std::max(a->depth, item.depth() + 1);
    a->holds_namespace = a->holds_namespace || item.holds_namespace();
  }
  a->items = std::move(items);
  return a;
}
}  // namespace

Value Value::array(std::vector<Value> items) { return Value(make_array(std::move(items))); }

Value Value::tuple(std::vector<Value> items) {
  auto a = make_array(std::move(items));
  a->is_tuple = true;
  return Value(std::move(a));
}

int Value::depth() const {
  if (is_array()) return as_array_data().depth;
  if (is_object()) return as_object().depth;
  return 0;
}

bool Value::holds_namespace() const {
  if (is_array()) return as_array_data().holds_namespace;
  if (is_object()) return as_object().is_namespace || as_object().holds_namespace;
  return false;
}

Value Value::generator(std::vector<Value> items) {
  auto a = make_array(std::move(items));
  a->is_generator = true;
  return Value(std::move(a));
}

std::string Object::encode_key(const Value& key) {
  switch (key.kind()) {
    case Kind::String: return key.as_string();
    case Kind::Int: return std::string("\0i", 2) + std::to_string(key.as_int());
    case Kind::Bool: return std::string("\0i", 2) + (key.as_bool() ? "1" : "0");  // Python: True == 1
    case Kind::Float:
      if (key.as_float() == std::floor(key.as_float()) && std::fabs(key.as_float()) < 9e18) {
        return std::string("\0i", 2) + std::to_string(static_cast<int64_t>(key.as_float()));  // 1.0 == 1
      }
      return std::string("\0f", 2) + float_repr(key.as_float());
    default: return std::string("\0n", 2);
  }
}

Value Object::decode_key(const std::string& key) {
  if (key.size() < 2 || key[0] != '\0') return Value(key);
  if (key[1] == 'i') return Value(static_cast<int64_t>(std::stoll(key.substr(2))));
  if (key[1] == 'f') return Value(std::stod(key.substr(2)));
  return Value();
}

Value Value::object() { return object(Object()); }

Value Value::object(Object o) { return Value(std::make_shared<Object>(std::move(o))); }

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->call = std::move(fn);
  return Value(std::move(c));
}

double Value::as_number() const {
  switch (kind()) {
    case Kind::Int: return static_cast<double>(as_int());
    case Kind::Float: return as_float();
    case Kind::Bool: return as_bool() ? 1.0 : 0.0;
    default: return 0.0;
  }
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::Array: return std::get<std::shared_ptr<ArrayData>>(v_).get();
    case Kind::Object: return std::get<std::shared_ptr<Object>>(v_).get();
    case Kind::Callable: return std::get<std::shared_ptr<Callable>>(v_).get();
    default: return nullptr;
  }
}

const Value* Value::get(std::string_view key) const { return is_object() ? as_object().find(key) : nullptr; }

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.as_bool();
    case Kind::Int: return v.as_int() != 0;
    case Kind::Float: return v.as_float() != 0.0;
    case Kind::String: return !v.as_string().empty();
    case Kind::Array: return v.as_array_data().is_generator || !v.as_array().empty();
    case Kind::Object: return v.as_object().is_namespace || !v.as_object().empty();
    case Kind::Callable: return true;
  }
  return false;
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth);
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

namespace {
bool equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNesting) return false;
  if (a.identity() != nullptr && a.identity() == b.identity()) return true;
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      const int64_t x = a.is_int() ? a.as_int() : int64_t{a.as_bool()};
      const int64_t y = b.is_int() ? b.as_int() : int64_t{b.as_bool()};
      return x == y;
    }
    return a.as_number() == b.as_number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.as_string() == b.as_string();
    case Kind::Array: {
      const auto& x = a.as_array_data();
      const auto& y = b.as_array_data();
      // Python: a list never equals a tuple.
      if (x.is_generator || y.is_generator) return &x == &y;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equals_at(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case Kind::Object: {
      const Object& x = a.as_object();
      const Object& y = b.as_object();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::Callable: return a.identity() == b.identity();
    default: return false;
  }
}

}  // namespace

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "jinja2.runtime.Undefined object";
    case Kind::None: return "NoneType object";
    case Kind::Bool: return "bool object";
    case Kind::Int: return "int object";
    case Kind::Float: return "float object";
    case Kind::String: return "str object";
    case Kind::Array:
      return v.as_array_data().is_generator ? "generator object"
                                            : (v.as_array_data().is_tuple ? "tuple object" : "list object");
    case Kind::Object: return v.as_object().is_namespace ? "Namespace object" : "dict object";
    case Kind::Callable: return "function object";
  }
  return "object";
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form, e.g. "1.5e-05" -> digits "15", exponent -5.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  const int n_digits = static_cast<int>(digits.size());
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
    } else if (exp10 + 1 >= n_digits) {
      out += digits + std::string(static_cast<size_t>(exp10 + 1 - n_digits), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp10 + 1)) + "." + digits.substr(static_cast<size_t>(exp10 + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n_digits > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  return out + exp_buf;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t cp = utf8::next(s, &pos);
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (utf8::is_printable(cp)) {
      out.append(s, start, pos - start);
    } else {
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

namespace {

// Appends repr(v) to *out, stopping (with "...") past kMaxNesting levels or once *out holds
// `budget` bytes: a template can build a value whose repr is exponentially large ({% set x = [x, x] %}
// in a loop) or, through a namespace, cyclic.
void repr_into(const Value& v, int depth, size_t budget, std::string* out) {
  if (depth > kMaxNesting || out->size() > budget) {
    *out += "...";
    return;
  }
  switch (v.kind()) {
    case Kind::String: *out += repr_string(v.as_string()); return;
    case Kind::Array: {
      const ArrayData& a = v.as_array_data();
      if (a.is_generator) {
        *out += "<generator object>";  // Python adds an address; no render can match it
        return;
      }
      *out += a.is_tuple ? "(" : "[";
      for (size_t i = 0; i < a.items.size() && out->size() <= budget; ++i) {
        if (i > 0) *out += ", ";
        repr_into(a.items[i], depth + 1, budget, out);
      }
      if (a.is_tuple && a.items.size() == 1) *out += ",";
      *out += a.is_tuple ? ")" : "]";
      return;
    }
    case Kind::Object: {
      const Object& o = v.as_object();
      *out += o.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : o.items()) {
        if (out->size() > budget) break;
        if (!first) *out += ", ";
        first = false;
        repr_into(Object::decode_key(k), depth + 1, budget, out);
        *out += ": ";
        repr_into(item, depth + 1, budget, out);
      }
      *out += o.is_namespace ? "}>" : "}";
      return;
    }
    case Kind::Undefined: *out += "Undefined"; return;
    default: *out += to_display(v); return;
  }
}

}  // namespace

std::string repr(const Value& v, size_t max_bytes) {
  std::string out;
  repr_into(v, 0, max_bytes, &out);
  return out;
}

std::string to_display(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return float_repr(v.as_float());
    case Kind::String: return v.as_string();
    case Kind::Callable: return "<function " + v.as_callable().name + ">";
    default: return repr(v);
  }
}

}  // namespace tern::chat

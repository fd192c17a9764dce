// GGUF metadata values: typed access, deep equality and one-line rendering. The reader and the
// writer agree on which variant alternative each ValueType uses:
//   U8/U16/U32/U64 -> uint64_t, I8/I16/I32/I64 -> int64_t, F32/F64 -> double, BOOL -> bool,
//   STRING -> std::string, ARRAY -> shared_ptr<Array>.
// Accessors use get_if, so a hand-built Value whose payload disagrees with its type reads as
// "not that kind" rather than throwing.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "formats/gguf.h"

namespace tern::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

Value Value::array(ValueType elem_type, std::vector<Value> items) {
  auto arr = std::make_shared<Array>();
  arr->elem_type = elem_type;
  arr->items = std::move(items);
  return Value{ValueType::ARRAY, std::move(arr)};
}

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}
bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

}  // namespace

std::optional<uint64_t> Value::as_uint() const {
  if (is_unsigned(type)) {
    if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  } else if (is_signed(type)) {
    if (const auto* i = std::get_if<int64_t>(&data); i != nullptr && *i >= 0) return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<int64_t> Value::as_int() const {
  if (is_signed(type)) {
    if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  } else if (is_unsigned(type)) {
    const auto* u = std::get_if<uint64_t>(&data);
    if (u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> Value::as_float() const {
  if (is_float(type)) {
    if (const auto* d = std::get_if<double>(&data)) return *d;
  } else if (is_unsigned(type)) {
    if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  } else if (is_signed(type)) {
    if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  }
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (type != ValueType::BOOL) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* Value::as_string() const {
  return type == ValueType::STRING ? std::get_if<std::string>(&data) : nullptr;
}

const Array* Value::as_array() const {
  if (type != ValueType::ARRAY) return nullptr;
  const auto* p = std::get_if<std::shared_ptr<Array>>(&data);
  return p != nullptr ? p->get() : nullptr;
}

bool operator==(const Array& a, const Array& b) {
  return a.elem_type == b.elem_type && a.items == b.items;
}

bool operator==(const Value& a, const Value& b) {
  if (a.type != b.type || a.data.index() != b.data.index()) return false;
  if (const auto* da = std::get_if<double>(&a.data)) {
    const double db = std::get<double>(b.data);
    return std::memcmp(da, &db, sizeof(double)) == 0;
  }
  if (const auto* pa = std::get_if<std::shared_ptr<Array>>(&a.data)) {
    const auto& pb = std::get<std::shared_ptr<Array>>(b.data);
    if (*pa == nullptr || pb == nullptr) return *pa == pb;
    return **pa == *pb;
  }
  return a.data == b.data;
}

namespace {

// Appends `s` quoted, with control bytes, quotes and backslashes escaped so the result stays on
// one line. Bytes >= 0x80 pass through (UTF-8 text shows as text).
void append_quoted(std::string* out, const std::string& s, size_t max_bytes) {
  const size_t n = (max_bytes == 0 || s.size() <= max_bytes) ? s.size() : max_bytes;
  out->push_back('"');
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
  if (n < s.size()) *out += "... (" + std::to_string(s.size()) + " bytes)";
}

void append_scalar(std::string* out, const Value& v, size_t max_string_bytes) {
  char buf[64];
  if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64, *u);
  } else if (const auto* i = std::get_if<int64_t>(&v.data)) {
    std::snprintf(buf, sizeof(buf), "%" PRId64, *i);
  } else if (const auto* d = std::get_if<double>(&v.data)) {
    // %.9g round-trips any float; F64 needs 17 digits.
    std::snprintf(buf, sizeof(buf), v.type == ValueType::F32 ? "%.9g" : "%.17g", *d);
  } else if (const auto* b = std::get_if<bool>(&v.data)) {
    std::snprintf(buf, sizeof(buf), "%s", *b ? "true" : "false");
  } else if (const auto* s = std::get_if<std::string>(&v.data)) {
    append_quoted(out, *s, max_string_bytes);
    return;
  } else {
    std::snprintf(buf, sizeof(buf), "?");
  }
  *out += buf;
}

void append_value(std::string* out, const Value& v, size_t max_items, size_t max_string_bytes) {
  const Array* arr = v.as_array();
  if (arr == nullptr) {
    append_scalar(out, v, max_string_bytes);
    return;
  }
  *out += "[";
  *out += value_type_name(arr->elem_type);
  *out += "; " + std::to_string(arr->items.size()) + (arr->items.size() == 1 ? " item]" : " items]");
  const size_t shown = std::min(arr->items.size(), max_items);
  for (size_t i = 0; i < shown; ++i) {
    *out += i == 0 ? " " : ", ";
    if (arr->items[i].as_array() != nullptr) {
      *out += "(";
      append_value(out, arr->items[i], max_items, max_string_bytes);
      *out += ")";
    } else {
      append_value(out, arr->items[i], max_items, max_string_bytes);
    }
  }
  if (shown < arr->items.size()) *out += ", ...";
}

}  // namespace

std::string summarize(const Value& v, size_t max_items, size_t max_string_bytes) {
  std::string out;
  append_value(&out, v, max_items, max_string_bytes);
  return out;
}

}  // namespace tern::gguf

#include "chat/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/utf8.h"

namespace tern::chat {
namespace {

void dump_string(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t cp = utf8::next(s, &pos);
    char buf[16];
    switch (cp) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      *out += buf;
    } else if (ensure_ascii && cp >= 0x80) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      *out += buf;
    } else {
      out->append(s, start, pos - start);
    }
  }
  out->push_back('"');
}

struct Dumper {
  const JsonDumpOptions& opt;
  std::string item_sep;
  std::string key_sep;
  std::string indent_unit;
  bool indented;
  std::string out;
  size_t max_bytes = size_t{64} << 20;

  void newline(int depth) {
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out += indent_unit;
  }

  Status dump(const Value& v, int depth) {
    if (depth > kMaxNesting) return error("ValueError: nesting deeper than " + std::to_string(kMaxNesting) + " levels");
    if (out.size() > max_bytes) return error("json output larger than " + std::to_string(max_bytes) + " bytes");
    switch (v.kind()) {
      case Kind::None: out += "null"; return Status::ok();
      case Kind::Bool: out += v.as_bool() ? "true" : "false"; return Status::ok();
      case Kind::Int: out += std::to_string(v.as_int()); return Status::ok();
      case Kind::Float: {
        const double f = v.as_float();
        if (std::isnan(f)) {
          out += "NaN";
        } else if (std::isinf(f)) {
          out += f < 0 ? "-Infinity" : "Infinity";
        } else {
          out += float_repr(f);
        }
        return Status::ok();
      }
      case Kind::String: dump_string(v.as_string(), opt.ensure_ascii, &out); return Status::ok();
      case Kind::Array: {
        if (v.as_array_data().is_generator) return error("Object of type generator is not JSON serializable");
        const auto& items = v.as_array();
        if (items.empty()) {
          out += "[]";
          return Status::ok();
        }
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_sep;
          if (indented) newline(depth + 1);
          TERN_RETURN_IF_ERROR(dump(items[i], depth + 1));
        }
        if (indented) newline(depth);
        out.push_back(']');
        return Status::ok();
      }
      case Kind::Object: {
        const Object& o = v.as_object();
        if (o.is_namespace) return error("Object of type Namespace is not JSON serializable");
        if (o.empty()) {
          out += "{}";
          return Status::ok();
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : o.items()) items.push_back(&kv);
        if (opt.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        }
        out.push_back('{');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_sep;
          if (indented) newline(depth + 1);
          // json.dumps writes a non-string key (int, float, bool, None) as its JSON text, quoted.
          const Value key = Object::decode_key(items[i]->first);
          if (key.is_string()) {
            dump_string(key.as_string(), opt.ensure_ascii, &out);
          } else {
            Dumper inner{opt, {}, {}, {}, false, {}};
            TERN_RETURN_IF_ERROR(inner.dump(key, 0));
            dump_string(inner.out, false, &out);
          }
          out += key_sep;
          TERN_RETURN_IF_ERROR(dump(items[i]->second, depth + 1));
        }
        if (indented) newline(depth);
        out.push_back('}');
        return Status::ok();
      }
      case Kind::Undefined: return error("Object of type Undefined is not JSON serializable");
      case Kind::Callable: return error("Object of type function is not JSON serializable");
    }
    return Status::ok();
  }
};

class Parser {
 public:
  Parser(std::string_view text, const JsonParseOptions& opt) : s_(text), opt_(opt) {}

  Result<Value> parse_document() {
    skip_ws();
    Value v;
    TERN_RETURN_IF_ERROR(parse_value(0, &v));
    skip_ws();
    if (pos_ != s_.size()) return fail("end of input");
    return v;
  }

 private:
  std::string_view s_;
  const JsonParseOptions& opt_;
  size_t pos_ = 0;

  Status fail(const std::string& expected) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string got = pos_ >= s_.size() ? "end of input" : "'" + std::string(1, s_[pos_]) + "'";
    return error("json: expected " + expected + " at line " + std::to_string(line) + " column " +
                 std::to_string(col) + ", got " + got);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status parse_value(int depth, Value* out) {
    if (depth > opt_.max_depth) return fail("nesting of at most " + std::to_string(opt_.max_depth) + " levels");
    if (pos_ >= s_.size()) return fail("a value");
    const char c = s_[pos_];
    if (c == '{') return parse_object(depth, out);
    if (c == '[') return parse_array(depth, out);
    if (c == '"') {
      std::string str;
      TERN_RETURN_IF_ERROR(parse_string(&str));
      *out = Value(std::move(str));
      return Status::ok();
    }
    if (consume("true")) return *out = Value(true), Status::ok();
    if (consume("false")) return *out = Value(false), Status::ok();
    if (consume("null")) return *out = Value(nullptr), Status::ok();
    if (consume("NaN")) return *out = Value(std::numeric_limits<double>::quiet_NaN()), Status::ok();
    if (consume("Infinity")) return *out = Value(std::numeric_limits<double>::infinity()), Status::ok();
    if (consume("-Infinity")) return *out = Value(-std::numeric_limits<double>::infinity()), Status::ok();
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
    return fail("a value");
  }

  Status parse_number(Value* out) {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t d0 = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d0;
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return fail("a digit");
    }
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return fail("a digit after '.'");
      is_float = true;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return fail("a digit in the exponent");
      is_float = true;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (!is_float) {
      int64_t i = 0;
      const auto res = std::from_chars(first, last, i);
      if (res.ec == std::errc() && res.ptr == last) {
        *out = Value(i);
        return Status::ok();
      }
    }
    double d = 0;
    const auto res = std::from_chars(first, last, d);
    if (res.ec == std::errc::result_out_of_range) {
      // Python turns an overflowing literal into inf and an underflowing one into 0.
      const std::string_view lit = s_.substr(start, pos_ - start);
      const size_t e = lit.find_first_of("eE");
      const bool underflow = e != std::string_view::npos && e + 1 < lit.size() && lit[e + 1] == '-';
      d = underflow ? 0.0 : std::numeric_limits<double>::infinity();
      if (s_[start] == '-') d = -d;
    }
    *out = Value(d);
    return Status::ok();
  }

  Status parse_hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return fail("4 hex digits after \\u");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return --pos_, fail("a hex digit");
    }
    *out = v;
    return Status::ok();
  }

  Status parse_string(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return fail("'\"' to close the string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return Status::ok();
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("no control character inside a string");
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return fail("an escape character");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          TERN_RETURN_IF_ERROR(parse_hex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            const size_t save = pos_;
            pos_ += 2;
            uint32_t lo = 0;
            TERN_RETURN_IF_ERROR(parse_hex4(&lo));
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          utf8::append(out, cp);  // a lone surrogate becomes U+FFFD
          break;
        }
        default: --pos_; return fail("a valid escape (one of \"\\/bfnrtu)");
      }
    }
  }

  Status parse_array(int depth, Value* out) {
    ++pos_;
    std::vector<Value> items;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      *out = Value::array(std::move(items));
      return Status::ok();
    }
    while (true) {
      skip_ws();
      Value item;
      TERN_RETURN_IF_ERROR(parse_value(depth + 1, &item));
      items.push_back(std::move(item));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        *out = Value::array(std::move(items));
        return Status::ok();
      }
      return fail("',' or ']'");
    }
  }

  Status parse_object(int depth, Value* out) {
    ++pos_;
    Object obj;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      *out = Value::object(std::move(obj));
      return Status::ok();
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("a string key");
      std::string key;
      TERN_RETURN_IF_ERROR(parse_string(&key));
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("':'");
      ++pos_;
      skip_ws();
      Value item;
      TERN_RETURN_IF_ERROR(parse_value(depth + 1, &item));
      obj.set(std::move(key), std::move(item));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        *out = Value::object(std::move(obj));
        return Status::ok();
      }
      return fail("',' or '}'");
    }
  }
};

}  // namespace

Result<std::string> dump_json(const Value& v, const JsonDumpOptions& options) {
  Dumper d{options, {}, {}, {}, options.indent.has_value() || options.indent_text.has_value(), {}};
  d.item_sep = options.item_separator.value_or(d.indented ? "," : ", ");
  d.key_sep = options.key_separator.value_or(": ");
  if (options.indent_text) {
    d.indent_unit = *options.indent_text;
  } else if (options.indent) {
    d.indent_unit = std::string(static_cast<size_t>(std::max(0, *options.indent)), ' ');
  }
  TERN_RETURN_IF_ERROR(d.dump(v, 0));
  return std::move(d.out);
}

Result<Value> parse_json(std::string_view text, const JsonParseOptions& options) {
  return Parser(text, options).parse_document();
}

}  // namespace tern::chat

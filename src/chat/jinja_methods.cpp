// Python methods templates call on values ("a".strip(), d.get(k), d.items()) and the globals of
// Hugging Face's environment (range, namespace, dict, raise_exception, strftime_now).
// Methods that mutate a list or dict fail like the ImmutableSandboxedEnvironment's SecurityError.
// A real Python method tern does not implement fails with "unsupported construct", so an
// unimplemented call is never mistaken for a missing attribute.
#include <algorithm>
#include <set>

#include "chat/jinja_interp.h"
#include "chat/utf8.h"

namespace tern::chat::jinja {
namespace {

const std::set<std::string, std::less<>> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
const std::set<std::string, std::less<>> kDictMethods = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                                         "pop", "popitem", "setdefault", "update", "values"};
const std::set<std::string, std::less<>> kListMethods = {"append", "clear", "copy", "count", "extend", "index",
                                                         "insert", "pop", "remove", "reverse", "sort"};
const std::set<std::string, std::less<>> kUnsafe = {"append", "clear", "extend", "insert", "pop", "popitem",
                                                    "remove", "reverse", "setdefault", "sort", "update"};

std::string need_str(Interpreter& in, const Value& v, const char* what) {
  if (!v.is_string()) {
    std::string t = type_name(v);
    in.fail(std::string("TypeError: ") + what + " must be str, not " + t.substr(0, t.find(' ')));
  }
  return v.as_string();
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right, Interpreter& in) {
  const std::u32string cps = utf8::decode(s);
  const bool whitespace = chars.is_none() || chars.is_undefined();
  const std::u32string set = whitespace ? std::u32string() : utf8::decode(need_str(in, chars, "strip arg"));
  auto strip_it = [&](char32_t c) { return whitespace ? utf8::is_space(c) : set.find(c) != std::u32string::npos; };
  size_t a = 0, b = cps.size();
  if (left) {
    while (a < b && strip_it(cps[a])) ++a;
  }
  if (right) {
    while (b > a && strip_it(cps[b - 1])) --b;
  }
  return utf8::encode(cps.substr(a, b - a));
}

Value split(Interpreter& in, const std::string& s, const Value& sep_v, const Value& maxsplit_v, bool from_right) {
  int64_t maxsplit = maxsplit_v.is_int() ? maxsplit_v.as_int() : -1;
  std::vector<Value> parts;
  if (sep_v.is_none() || sep_v.is_undefined()) {
    // Runs of whitespace separate; leading/trailing whitespace yields no empty parts.
    const std::u32string cps = utf8::decode(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t i = 0;
      while (i < cps.size()) {
        while (i < cps.size() && utf8::is_space(cps[i])) ++i;
        if (i >= cps.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t end = cps.size();
          while (end > i && utf8::is_space(cps[end - 1])) --end;
          words.push_back(cps.substr(i, end - i));
          break;
        }
        size_t j = i;
        while (j < cps.size() && !utf8::is_space(cps[j])) ++j;
        words.push_back(cps.substr(i, j - i));
        i = j;
      }
    } else {
      size_t i = cps.size();
      while (i > 0) {
        while (i > 0 && utf8::is_space(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t start = 0;
          while (start < i && utf8::is_space(cps[start])) ++start;
          words.push_back(cps.substr(start, i - start));
          break;
        }
        size_t j = i;
        while (j > 0 && !utf8::is_space(cps[j - 1])) --j;
        words.push_back(cps.substr(j, i - j));
        i = j;
      }
      std::reverse(words.begin(), words.end());
    }
    for (const auto& w : words) parts.emplace_back(utf8::encode(w));
    return Value::array(std::move(parts));
  }
  const std::string sep = need_str(in, sep_v, "separator");
  if (sep.empty()) in.fail("ValueError: empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (true) {
      const size_t hit = (maxsplit < 0 || static_cast<int64_t>(pieces.size()) < maxsplit) ? s.find(sep, start)
                                                                                          : std::string::npos;
      if (hit == std::string::npos) {
        pieces.push_back(s.substr(start));
        break;
      }
      pieces.push_back(s.substr(start, hit - start));
      start = hit + sep.size();
    }
  } else {
    size_t end = s.size();
    while (true) {
      size_t hit = std::string::npos;
      if ((maxsplit < 0 || static_cast<int64_t>(pieces.size()) < maxsplit) && end >= sep.size()) {
        hit = s.rfind(sep, end - sep.size());
      }
      if (hit == std::string::npos) {
        pieces.push_back(s.substr(0, end));
        break;
      }
      pieces.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
      end = hit;
    }
    std::reverse(pieces.begin(), pieces.end());
  }
  for (auto& p : pieces) parts.emplace_back(std::move(p));
  return Value::array(std::move(parts));
}

bool affix_match(Interpreter& in, const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string x = need_str(in, a, prefix ? "startswith arg" : "endswith arg");
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_array()) {
    for (const Value& a : affix.as_array()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

Value replace(Interpreter& in, const std::string& s, CallArgs& args) {
  const std::string old_s = need_str(in, args.get(0, "old", Value()), "replace arg 1");
  const std::string new_s = need_str(in, args.get(1, "new", Value()), "replace arg 2");
  const Value count_v = args.get(2, "count", Value(int64_t{-1}));
  int64_t count = count_v.is_int() ? count_v.as_int() : -1;
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` before every code point and at the end.
    const std::vector<size_t> offs = utf8::offsets(s);
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (count != 0) {
        out += new_s;
        --count;
      }
      out.append(s, offs[i], offs[i + 1] - offs[i]);
    }
    if (count != 0) out += new_s;
    if (out.size() > in.limits().max_output_bytes) in.fail("replace result larger than the output limit");
    return Value(std::move(out));
  }
  size_t start = 0;
  while (count != 0) {
    const size_t hit = s.find(old_s, start);
    if (hit == std::string::npos) break;
    out.append(s, start, hit - start);
    out += new_s;
    start = hit + old_s.size();
    --count;
    if (out.size() > in.limits().max_output_bytes) in.fail("replace result larger than the output limit");
  }
  out.append(s, start, std::string::npos);
  return Value(std::move(out));
}

// str.format with auto ({}) or explicit ({0}, {name}) fields and no conversions or format specs.
Value format(Interpreter& in, const std::string& s, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      const size_t close = s.find('}', i);
      if (close == std::string::npos) in.fail("ValueError: Single '{' encountered in format string");
      const std::string field = s.substr(i + 1, close - i - 1);
      if (field.find_first_of("!:.[") != std::string::npos) {
        in.fail("unsupported construct: str.format field '{" + field + "}'");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t k = static_cast<size_t>(std::stoul(field));
        v = k < args.positional.size() ? &args.positional[k] : nullptr;
      } else {
        for (const auto& [name, value] : args.named) {
          if (name == field) v = &value;
        }
      }
      if (v == nullptr) in.fail("IndexError: str.format has no argument for '{" + field + "}'");
      out += to_str(*v);
      i = close;
    } else if (c == '}') {
      in.fail("ValueError: Single '}' encountered in format string");
    } else {
      out.push_back(c);
    }
  }
  return Value(std::move(out));
}

std::string python_title(const std::string& s) {
  std::u32string cps = utf8::decode(s);
  bool prev_cased = false;
  for (char32_t& c : cps) {
    const bool cased = utf8::to_upper(c) != c || utf8::to_lower(c) != c;
    c = prev_cased ? utf8::to_lower(c) : utf8::to_upper(c);
    prev_cased = cased;
  }
  return utf8::encode(cps);
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  const std::u32string cps = utf8::decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

Value call_str_method(Interpreter& in, const std::string& s, const std::string& name, CallArgs& args) {
  if (name == "strip") return Value(strip(s, args.get(0, "chars", Value()), true, true, in));
  if (name == "lstrip") return Value(strip(s, args.get(0, "chars", Value()), true, false, in));
  if (name == "rstrip") return Value(strip(s, args.get(0, "chars", Value()), false, true, in));
  if (name == "split" || name == "rsplit") {
    return split(in, s, args.get(0, "sep", Value()), args.get(1, "maxsplit", Value(int64_t{-1})), name == "rsplit");
  }
  if (name == "startswith" || name == "endswith") {
    return Value(affix_match(in, s, args.get(0, "prefix", Value()), name == "startswith"));
  }
  if (name == "upper" || name == "lower") return in.apply_filter(name, Value(s), args);
  if (name == "capitalize") return in.apply_filter("capitalize", Value(s), args);
  if (name == "title") return Value(python_title(s));
  if (name == "replace") return replace(in, s, args);
  if (name == "format") return format(in, s, args);
  if (name == "join") {
    std::string out;
    size_t i = 0;
    for (const Value& item : in.iterate(args.get(0, "iterable", Value()))) {
      if (!item.is_string()) {
        std::string t = type_name(item);
        in.fail("TypeError: sequence item " + std::to_string(i) + ": expected str instance, " +
                t.substr(0, t.find(' ')) + " found");
      }
      if (i++ > 0) out += s;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const std::string sub = need_str(in, args.get(0, "sub", Value()), "substring");
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(utf8::length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    const size_t hit = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (hit == std::string::npos) {
      if (name == "index" || name == "rindex") in.fail("ValueError: substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(utf8::length(std::string_view(s).substr(0, hit))));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string a = need_str(in, args.get(0, "prefix", Value()), name.c_str());
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0) return Value(s.substr(a.size()));
    if (name == "removesuffix" && !a.empty() && s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value(s.substr(0, s.size() - a.size()));
    }
    return Value(s);
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    const std::u32string cps = utf8::decode(s);
    const bool keepends = truthy(args.get(0, "keepends", Value(false)));
    std::u32string cur;
    for (size_t i = 0; i < cps.size(); ++i) {
      const char32_t c = cps[i];
      const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                       c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) {
        cur.push_back(c);
        continue;
      }
      std::u32string end(1, c);
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end.push_back(cps[++i]);
      lines.emplace_back(utf8::encode(keepends ? cur + end : cur));
      cur.clear();
    }
    if (!cur.empty()) lines.emplace_back(utf8::encode(cur));
    return Value::array(std::move(lines));
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    return Value(all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  }
  if (name == "isalpha") return Value(all_chars(s, utf8::is_alpha));
  if (name == "isalnum") return Value(all_chars(s, [](char32_t c) { return utf8::is_alpha(c) || (c >= '0' && c <= '9'); }));
  if (name == "isspace") return Value(all_chars(s, utf8::is_space));
  if (name == "isupper" || name == "islower") return Value(in.apply_test(name.substr(2), Value(s), args));
  if (name == "zfill") {
    const Value w = args.get(0, "width", Value());
    if (!w.is_int()) in.fail("TypeError: zfill needs an integer width");
    const int64_t n = static_cast<int64_t>(utf8::length(s));
    if (w.as_int() <= n) return Value(s);
    const size_t pad = static_cast<size_t>(std::min<int64_t>(w.as_int() - n, 1 << 20));
    const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value(sign ? s.substr(0, 1) + std::string(pad, '0') + s.substr(1) : std::string(pad, '0') + s);
  }
  if (name == "center") return in.apply_filter("center", Value(s), args);
  in.fail("unsupported construct: str." + name + "()");
}

Value call_dict_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args) {
  const Object& o = obj.as_object();
  if (name == "get") {
    const Value key = args.get(0, "key", Value());
    const Value* v = o.find(Object::encode_key(key));
    return v != nullptr ? *v : args.get(1, "default", Value());
  }
  if (name == "items") {
    // dict.items() is a view: sized and falsy when empty, unlike the items filter's generator.
    std::vector<Value> out;
    for (const auto& [k, v] : o.items()) out.push_back(Value::tuple({Object::decode_key(k), v}));
    return Value::array(std::move(out));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : o.items()) out.push_back(name == "keys" ? Object::decode_key(k) : v);
    return Value::array(std::move(out));
  }
  if (name == "copy") return Value::object(o);
  in.fail("unsupported construct: dict." + name + "()");
}

Value call_list_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args) {
  const std::vector<Value>& items = obj.as_array();
  const Value x = args.get(0, "value", Value::undefined());
  if (name == "count") {
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, x); })));
  }
  if (name == "index") {
    for (size_t i = 0; i < items.size(); ++i) {
      if (equals(items[i], x)) return Value(static_cast<int64_t>(i));
    }
    in.fail("ValueError: " + repr(x) + " is not in list");
  }
  if (name == "copy") return Value::array(items);
  in.fail("unsupported construct: list." + name + "()");
}

}  // namespace

std::string printf_format(Interpreter& in, const std::string& fmt, const Value& args) {
  // Python's `fmt % args`: a tuple supplies the positional values, a dict the %(name)s ones,
  // anything else is the single value.
  std::vector<Value> values;
  if (args.is_array() && args.as_array_data().is_tuple) {
    values = args.as_array();
  } else {
    values.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) in.fail("ValueError: incomplete format");
    const Value* value = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos || !args.is_object()) in.fail("TypeError: format requires a mapping");
      const std::string key = fmt.substr(i + 1, close - i - 1);
      value = args.as_object().find(key);
      if (value == nullptr) in.fail("KeyError: '" + key + "'");
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    size_t width = 0;
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') width = std::min<size_t>(width * 10 + (fmt[i++] - '0'), 4096);
    int precision = -1;
    if (i < fmt.size() && fmt[i] == '.') {
      precision = 0;
      while (++i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision = std::min(precision * 10 + (fmt[i] - '0'), 400);
    }
    if (i >= fmt.size()) in.fail("ValueError: incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (value == nullptr) {
      if (next >= values.size()) in.fail("TypeError: not enough arguments for format string");
      value = &values[next++];
    }
    std::string piece;
    if (conv == 's' || conv == 'r' || conv == 'a') {
      piece = conv == 's' ? to_str(*value) : repr(*value);
      if (precision >= 0) {
        const std::vector<size_t> offs = utf8::offsets(piece);
        if (static_cast<size_t>(precision) + 1 < offs.size()) piece.resize(offs[static_cast<size_t>(precision)]);
      }
    } else if (std::string_view("diouxXcfFeEgG").find(conv) != std::string_view::npos) {
      if (!value->is_number()) {
        in.fail(std::string("TypeError: %") + conv + " format: a real number is required, not " + type_name(*value));
      }
      char buf[512];
      const std::string cspec = "%" + flags + (precision >= 0 ? "." + std::to_string(precision) : "");
      if (conv == 'c') {
        utf8::append(&piece, static_cast<char32_t>(value->as_number()));
      } else if (std::string_view("diouxX").find(conv) != std::string_view::npos) {
        const double d = value->as_number();
        const long long v = value->is_float() ? static_cast<long long>(d) : static_cast<long long>(value->is_int() ? value->as_int() : value->as_bool());
        std::snprintf(buf, sizeof(buf), (cspec + "ll" + (conv == 'i' || conv == 'u' ? 'd' : conv)).c_str(), v);
        piece = buf;
      } else {
        std::snprintf(buf, sizeof(buf), (cspec + conv).c_str(), value->as_number());
        piece = buf;
      }
    } else {
      in.fail(std::string("ValueError: unsupported format character '") + conv + "'");
    }
    const size_t len = utf8::length(piece);
    if (width > len) {
      const bool left = flags.find('-') != std::string::npos;
      const bool zeros = !left && flags.find('0') != std::string::npos && conv != 's' && conv != 'r';
      const std::string pad(width - len, zeros ? '0' : ' ');
      if (left) {
        piece += pad;
      } else if (zeros && !piece.empty() && (piece[0] == '-' || piece[0] == '+' || piece[0] == ' ')) {
        piece = piece.substr(0, 1) + pad + piece.substr(1);
      } else {
        piece = pad + piece;
      }
    }
    out += piece;
  }
  if (!used_mapping && next < values.size()) {
    in.fail("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

Value bind_method(Interpreter& in, const Value& obj, const std::string& name) {
  const std::set<std::string, std::less<>>* methods = nullptr;
  const char* type = nullptr;
  if (obj.is_string()) {
    methods = &kStrMethods;
    type = "str";
  } else if (obj.is_object() && !obj.as_object().is_namespace) {
    methods = &kDictMethods;
    type = "dict";
  } else if (obj.is_array()) {
    methods = &kListMethods;
    type = obj.as_array_data().is_tuple ? "tuple" : "list";
  }
  if (methods == nullptr || methods->count(name) == 0) {
    return Value::undefined("'" + type_name(obj) + "' has no attribute '" + name + "'");
  }
  if (kUnsafe.count(name) && !obj.is_string()) {
    // The sandbox refuses the attribute itself: calling it (or printing it) fails.
    in.fail(std::string("SecurityError: access to attribute '") + name + "' of '" + type + "' object is unsafe.");
  }
  return Value::function(std::string(type) + "." + name, [obj, name](Interpreter& interp, CallArgs& args) -> Value {
    if (obj.is_string()) return call_str_method(interp, obj.as_string(), name, args);
    if (obj.is_object()) return call_dict_method(interp, obj, name, args);
    return call_list_method(interp, obj, name, args);
  });
}

void add_globals(Object* globals) {
  globals->set("range", Value::function("range", [](Interpreter& in, CallArgs& args) -> Value {
    std::vector<int64_t> a;
    for (const Value& v : args.positional) {
      if (!v.is_int() && !v.is_bool()) in.fail("TypeError: range() takes integers, got " + type_name(v));
      a.push_back(v.is_int() ? v.as_int() : int64_t{v.as_bool()});
    }
    if (a.empty() || a.size() > 3) in.fail("TypeError: range expected 1 to 3 arguments");
    const int64_t start = a.size() == 1 ? 0 : a[0];
    const int64_t stop = a.size() == 1 ? a[0] : a[1];
    const int64_t step = a.size() == 3 ? a[2] : 1;
    if (step == 0) in.fail("ValueError: range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= in.limits().max_range) in.fail("range() larger than " + std::to_string(in.limits().max_range));
      out.emplace_back(i);
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return Value::array(std::move(out));
  }));
  auto make_object = [](Interpreter& in, CallArgs& args, bool is_namespace) {
    Object o;
    o.is_namespace = is_namespace;
    for (const Value& v : args.positional) {
      if (!v.is_object()) in.fail("TypeError: expected a mapping, got " + type_name(v));
      for (const auto& [k, item] : v.as_object().items()) o.set(k, item);
    }
    for (const auto& [k, v] : args.named) o.set(k, v);
    if (is_namespace) {
      if (o.holds_namespace) in.fail("unsupported construct: storing a namespace inside a namespace");
      if (o.depth > kMaxNesting) in.fail("value nesting deeper than " + std::to_string(kMaxNesting) + " levels");
      for (const auto& kv : o.items()) {
        if (!kv.first.empty() && kv.first[0] == '_') {
          in.fail("SecurityError: chat templates cannot store underscore-prefixed attributes on a namespace");
        }
      }
    }
    return Value::object(std::move(o));
  };
  globals->set("namespace", Value::function("namespace", [make_object](Interpreter& in, CallArgs& args) {
    return make_object(in, args, true);
  }));
  globals->set("dict", Value::function("dict", [make_object](Interpreter& in, CallArgs& args) {
    return make_object(in, args, false);
  }));
  globals->set("raise_exception", Value::function("raise_exception", [](Interpreter& in, CallArgs& args) -> Value {
    in.fail("TemplateError: " + to_str(args.get(0, "message", Value(std::string()))));
  }));
  globals->set("strftime_now", Value::function("strftime_now", [](Interpreter& in, CallArgs& args) -> Value {
    const std::string fmt = to_str(args.get(0, "format", Value(std::string())));
    if (fmt.empty()) return Value(std::string());
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &in.now());
    if (n == 0) in.fail("strftime_now: format '" + fmt + "' produced nothing or more than 511 bytes");
    return Value(std::string(buf, n));
  }));
}

}  // namespace tern::chat::jinja

// jinja2's builtin filters (plus Hugging Face's `tojson`), with jinja2's argument names and
// defaults. Filters jinja2 has that chat templates do not use (urlize, wordwrap, ...) are known
// names that fail when applied, so a template using one gets a clear "unsupported" error.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/json.h"
#include "chat/utf8.h"

namespace tern::chat::jinja {
namespace {

std::string str_of(const Value& v) { return to_str(v); }

// Python str.strip(chars) over code points; `chars` null strips whitespace.
std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string cps = utf8::decode(s);
  std::u32string set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) set = utf8::decode(str_of(chars));
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

std::string map_case(const std::string& s, bool upper) {
  std::u32string out;
  for (char32_t c : utf8::decode(s)) {
    if (upper && c == 0xDF) {
      out += U"SS";  // Python's full case mapping: "ß".upper() == "SS"
    } else {
      out.push_back(upper ? utf8::to_upper(c) : utf8::to_lower(c));
    }
  }
  return utf8::encode(out);
}

Value length_of(Interpreter& in, const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return Value(int64_t{0});
    case Kind::String: return Value(static_cast<int64_t>(utf8::length(v.as_string())));
    case Kind::Array:
      if (v.as_array_data().is_generator) in.fail("TypeError: object of type 'generator' has no len()");
      return Value(static_cast<int64_t>(v.as_array().size()));
    case Kind::Object:
      if (!v.as_object().is_namespace) return Value(static_cast<int64_t>(v.as_object().size()));
      [[fallthrough]];
    default: {
      std::string t = type_name(v);
      in.fail("TypeError: object of type '" + t.substr(0, t.find(' ')) + "' has no len()");
    }
  }
}

// jinja2's attribute getter for filters: "a.b.0" walks items first (environment.getitem).
Value attr_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return in.get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = numeric ? in.get_item(v, Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10))))
                : in.get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    if (v.is_undefined()) return v;
    start = dot + 1;
  }
}

// A sort key that ignores case when asked (jinja2's ignore_case: lower() on strings only).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(map_case(v.as_string(), false));
  return v;
}

Value f_tojson(Interpreter& in, const Value& input, CallArgs& args) {
  // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonDumpOptions opt;
  opt.ensure_ascii = truthy(args.get(0, "ensure_ascii", Value(false)));
  const Value indent = args.get(1, "indent", Value());
  if (indent.is_int() || indent.is_bool()) opt.indent = static_cast<int>(indent.is_int() ? indent.as_int() : indent.as_bool());
  else if (indent.is_string()) opt.indent_text = indent.as_string();
  else if (!indent.is_none() && !indent.is_undefined()) in.fail("TypeError: tojson indent must be an int or a string");
  const Value seps = args.get(2, "separators", Value());
  if (seps.is_array()) {
    if (seps.as_array().size() != 2 || !seps.as_array()[0].is_string() || !seps.as_array()[1].is_string()) {
      in.fail("ValueError: tojson separators must be two strings");
    }
    opt.item_separator = seps.as_array()[0].as_string();
    opt.key_separator = seps.as_array()[1].as_string();
  }
  opt.sort_keys = truthy(args.get(3, "sort_keys", Value(false)));
  Result<std::string> s = dump_json(input, opt);
  if (!s.is_ok()) in.fail("TypeError: " + s.status().message());
  return Value(std::move(s).value());
}

Value f_length(Interpreter& in, const Value& input, CallArgs&) { return length_of(in, input); }

Value f_trim(Interpreter&, const Value& input, CallArgs& args) {
  return Value(strip_chars(str_of(input), args.get(0, "chars", Value()), true, true));
}

Value f_default(Interpreter&, const Value& input, CallArgs& args) {
  const bool boolean = truthy(args.get(1, "boolean", Value(false)));
  if (input.is_undefined() || (boolean && !truthy(input))) return args.get(0, "default_value", Value(std::string()));
  return input;
}

Value f_string(Interpreter&, const Value& input, CallArgs&) {
  return input.is_markup() ? input : Value(str_of(input));  // soft_str keeps Markup
}
Value f_safe(Interpreter&, const Value& input, CallArgs&) { return Value::markup(str_of(input)); }
Value f_upper(Interpreter&, const Value& input, CallArgs&) { return Value(map_case(str_of(input), true)); }
Value f_lower(Interpreter&, const Value& input, CallArgs&) { return Value(map_case(str_of(input), false)); }

Value f_capitalize(Interpreter&, const Value& input, CallArgs&) {
  std::u32string cps = utf8::decode(str_of(input));
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? utf8::to_upper(cps[i]) : utf8::to_lower(cps[i]);
  return Value(utf8::encode(cps));
}

Value f_title(Interpreter&, const Value& input, CallArgs&) {
  // jinja2 splits at runs of [-\s({[<] and capitalizes each piece.
  std::u32string cps = utf8::decode(str_of(input));
  auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || utf8::is_space(c); };
  bool piece_start = true;
  for (char32_t& c : cps) {
    const bool sep = separator(c);
    if (sep) {
      piece_start = true;
      continue;
    }
    c = piece_start ? utf8::to_upper(c) : utf8::to_lower(c);
    piece_start = false;
  }
  return Value(utf8::encode(cps));
}

Value f_join(Interpreter& in, const Value& input, CallArgs& args) {
  const std::string sep = str_of(args.get(0, "d", Value(std::string())));
  const Value attribute = args.get(1, "attribute", Value());
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(input)) {
    if (!first) out += sep;
    first = false;
    out += str_of(attribute.is_none() || attribute.is_undefined() ? item : attr_path(in, item, attribute));
  }
  return Value(std::move(out));
}

Value f_items(Interpreter& in, const Value& input, CallArgs&) {
  if (input.is_undefined()) return Value::array();
  if (!input.is_object() || input.as_object().is_namespace) in.fail("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, v] : input.as_object().items()) out.push_back(Value::tuple({Object::decode_key(k), v}));
  return Value::generator(std::move(out));
}

Value f_escape(Interpreter&, const Value& input, CallArgs&) {
  if (input.is_markup()) return input;
  std::string out;
  for (char c : str_of(input)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::markup(std::move(out));
}

Value f_list(Interpreter& in, const Value& input, CallArgs&) { return Value::array(in.iterate(input)); }

Value f_first(Interpreter& in, const Value& input, CallArgs&) {
  std::vector<Value> items = in.iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter& in, const Value& input, CallArgs&) {
  std::vector<Value> items = in.iterate(input);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_reverse(Interpreter& in, const Value& input, CallArgs&) {
  if (input.is_string()) {
    std::u32string cps = utf8::decode(input.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(utf8::encode(cps));
  }
  std::vector<Value> items = in.iterate(input);
  std::reverse(items.begin(), items.end());
  return Value::generator(std::move(items));  // Python's reversed() iterator
}

std::vector<Value> sorted(Interpreter& in, std::vector<Value> items, bool reverse, bool case_sensitive,
                          const Value& attribute) {
  const bool by_attr = !attribute.is_none() && !attribute.is_undefined();
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = sort_key(by_attr ? attr_path(in, item, attribute) : item, case_sensitive);
    keyed.emplace_back(std::move(key), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare_values(in, b.first, a.first, "<") < 0 : compare_values(in, a.first, b.first, "<") < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

Value f_sort(Interpreter& in, const Value& input, CallArgs& args) {
  return Value::array(sorted(in, in.iterate(input), truthy(args.get(0, "reverse", Value(false))),
                             truthy(args.get(1, "case_sensitive", Value(false))), args.get(2, "attribute", Value())));
}

Value f_dictsort(Interpreter& in, const Value& input, CallArgs& args) {
  if (!input.is_object()) in.fail("TypeError: dictsort expects a mapping, got " + type_name(input));
  const bool case_sensitive = truthy(args.get(0, "case_sensitive", Value(false)));
  const std::string by = str_of(args.get(1, "by", Value("key")));
  const bool reverse = truthy(args.get(2, "reverse", Value(false)));
  if (by != "key" && by != "value") in.fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [k, v] : input.as_object().items()) pairs.push_back(Value::tuple({Object::decode_key(k), v}));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const size_t i = by == "key" ? 0 : 1;
    const Value ka = sort_key(a.as_array()[i], case_sensitive), kb = sort_key(b.as_array()[i], case_sensitive);
    return reverse ? compare_values(in, kb, ka, "<") < 0 : compare_values(in, ka, kb, "<") < 0;
  });
  return Value::array(std::move(pairs));
}

Value f_unique(Interpreter& in, const Value& input, CallArgs& args) {
  const bool case_sensitive = truthy(args.get(0, "case_sensitive", Value(false)));
  const Value attribute = args.get(1, "attribute", Value());
  std::vector<Value> seen, out;
  for (const Value& item : in.iterate(input)) {
    const Value key =
        sort_key(attribute.is_none() || attribute.is_undefined() ? item : attr_path(in, item, attribute), case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::generator(std::move(out));
}

Value min_max(Interpreter& in, const Value& input, CallArgs& args, bool want_max) {
  std::vector<Value> items = in.iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = truthy(args.get(0, "case_sensitive", Value(false)));
  const Value attribute = args.get(1, "attribute", Value());
  const bool by_attr = !attribute.is_none() && !attribute.is_undefined();
  size_t best = 0;
  Value best_key = sort_key(by_attr ? attr_path(in, items[0], attribute) : items[0], case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(by_attr ? attr_path(in, items[i], attribute) : items[i], case_sensitive);
    const int c = compare_values(in, key, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& input, CallArgs& args) { return min_max(in, input, args, false); }
Value f_max(Interpreter& in, const Value& input, CallArgs& args) { return min_max(in, input, args, true); }

// select/reject/selectattr/rejectattr share jinja2's select_or_reject.
Value select_or_reject(Interpreter& in, const Value& input, CallArgs& args, bool use_attr, bool keep) {
  size_t next = 0;
  Value attribute;
  if (use_attr) {
    if (args.positional.empty()) in.fail("TypeError: missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    test = str_of(args.positional[next++]);
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
    test_args.named = args.named;
  }
  std::vector<Value> out;
  if (!truthy(input)) return Value::generator({});  // jinja2 checks `if seq:` before iterating
  for (const Value& item : in.iterate(input)) {
    const Value probe = use_attr ? attr_path(in, item, attribute) : item;
    const bool passed = test.empty() ? truthy(probe) : in.apply_test(test, probe, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, false); }

Value f_map(Interpreter& in, const Value& input, CallArgs& args) {
  std::vector<Value> out;
  if (!truthy(input)) return Value::generator({});  // jinja2 checks `if value:` before iterating
  const Value* attribute = nullptr;
  for (const auto& [k, v] : args.named) {
    if (k == "attribute") attribute = &v;
  }
  if (attribute != nullptr) {
    Value fallback = Value::undefined();
    for (const auto& [k, v] : args.named) {
      if (k == "default") fallback = v;
    }
    for (const Value& item : in.iterate(input)) {
      Value v = attr_path(in, item, *attribute);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::generator(std::move(out));
  }
  if (args.positional.empty()) in.fail("FilterArgumentError: map requires a filter argument");
  const std::string filter = str_of(args.positional[0]);
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.named = args.named;
  for (const Value& item : in.iterate(input)) out.push_back(in.apply_filter(filter, item, filter_args));
  return Value::generator(std::move(out));
}

// Python str.splitlines() separators.
bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

Value f_indent(Interpreter&, const Value& input, CallArgs& args) {
  const Value width = args.get(0, "width", Value(int64_t{4}));
  const bool first = truthy(args.get(1, "first", Value(false)));
  const bool blank = truthy(args.get(2, "blank", Value(false)));
  const std::string indention =
      width.is_string() ? width.as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.is_int() ? width.as_int() : 4)), ' ');
  // jinja2 appends "\n" and splits with str.splitlines(), which drops that last empty line.
  const std::u32string s = utf8::decode(str_of(input) + "\n");
  std::vector<std::string> lines;
  std::u32string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (is_line_break(s[i])) {
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      lines.push_back(utf8::encode(cur));
      cur.clear();
    } else {
      cur.push_back(s[i]);
    }
  }
  if (!cur.empty()) lines.push_back(utf8::encode(cur));
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) rv += "\n";
    if (i > 0 && (blank || !lines[i].empty())) rv += indention;
    rv += lines[i];
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Value f_replace(Interpreter& in, const Value& input, CallArgs& args) {
  CallArgs method_args;
  method_args.positional = {args.get(0, "old", Value(std::string())), args.get(1, "new", Value(std::string()))};
  const Value count = args.get(2, "count", Value());
  if (!count.is_none() && !count.is_undefined()) method_args.positional.push_back(count);
  Value bound = bind_method(in, Value(str_of(input)), "replace");
  return in.call(bound, method_args);
}

Value to_int(const Value& v, const Value& fallback, int base) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float()) {
    const double d = v.as_float();
    if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
    return fallback;
  }
  if (v.is_string()) {
    std::string s = strip_chars(v.as_string(), Value(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, base);
      if (*end == '\0' && errno == 0) return Value(static_cast<int64_t>(i));
      const double d = std::strtod(s.c_str(), &end);
      if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value f_int(Interpreter&, const Value& input, CallArgs& args) {
  const Value base = args.get(1, "base", Value(int64_t{10}));
  return to_int(input, args.get(0, "default", Value(int64_t{0})), base.is_int() ? static_cast<int>(base.as_int()) : 10);
}

Value f_float(Interpreter&, const Value& input, CallArgs& args) {
  const Value fallback = args.get(0, "default", Value(0.0));
  if (input.is_number()) return Value(input.as_number());
  if (input.is_string()) {
    const std::string s = strip_chars(input.as_string(), Value(), true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  return fallback;
}

Value f_abs(Interpreter& in, const Value& input, CallArgs&) {
  if (input.is_int()) return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
  if (input.is_bool()) return Value(int64_t{input.as_bool()});
  if (input.is_float()) return Value(std::fabs(input.as_float()));
  in.fail("TypeError: bad operand type for abs(): '" + type_name(input) + "'");
}

Value f_round(Interpreter& in, const Value& input, CallArgs& args) {
  const Value precision_v = args.get(0, "precision", Value(int64_t{0}));
  const std::string method = str_of(args.get(1, "method", Value("common")));
  const int precision = precision_v.is_int() ? static_cast<int>(std::clamp<int64_t>(precision_v.as_int(), -300, 300)) : 0;
  if (!input.is_number()) in.fail("TypeError: round expects a number, got " + type_name(input));
  if (input.is_int() || input.is_bool()) {
    if (method == "common" && precision >= 0) return input.is_int() ? input : Value(int64_t{input.as_bool()});
  }
  const double x = input.as_number();
  const double scale = std::pow(10.0, precision);
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  if (method != "common") in.fail("FilterArgumentError: method must be common, ceil or floor");
  if (precision < 0 || !std::isfinite(x)) return Value(std::nearbyint(x * scale) / scale);
  // Python's round(x, n) rounds the exact binary value half-to-even, which is what a correctly
  // rounded "%.*f" does.
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, x);
  return Value(std::strtod(buf, nullptr));
}

Value f_sum(Interpreter& in, const Value& input, CallArgs& args) {
  const Value attribute = args.get(0, "attribute", Value());
  Value total = args.get(1, "start", Value(int64_t{0}));
  const bool by_attr = !attribute.is_none() && !attribute.is_undefined();
  for (const Value& item : in.iterate(input)) {
    const Value v = by_attr ? attr_path(in, item, attribute) : item;
    if (!v.is_number() || !total.is_number()) in.fail("TypeError: unsupported operand type(s) for +: sum of non-numbers");
    if (!v.is_float() && !total.is_float()) {
      total = Value((total.is_int() ? total.as_int() : int64_t{total.as_bool()}) + (v.is_int() ? v.as_int() : int64_t{v.as_bool()}));
    } else {
      total = Value(total.as_number() + v.as_number());
    }
  }
  return total;
}

Value f_center(Interpreter&, const Value& input, CallArgs& args) {
  const std::string s = str_of(input);
  const Value w = args.get(0, "width", Value(int64_t{80}));
  const int64_t width = w.is_int() ? std::min<int64_t>(w.as_int(), 1 << 20) : 80;
  const int64_t n = static_cast<int64_t>(utf8::length(s));
  if (width <= n) return Value(s);
  // Python's str.center puts the extra space on the right when the padding is odd, unless the
  // string length is odd.
  const int64_t pad = width - n;
  const int64_t left = pad / 2 + (pad & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_batch(Interpreter& in, const Value& input, CallArgs& args) {
  const Value count_v = args.get(0, "linecount", Value());
  if (!count_v.is_int() || count_v.as_int() <= 0) in.fail("ValueError: batch needs a positive line count");
  const size_t count = static_cast<size_t>(count_v.as_int());
  const Value fill = args.get(1, "fill_with", Value());
  std::vector<Value> out, cur;
  for (const Value& item : in.iterate(input)) {
    cur.push_back(item);
    if (cur.size() == count) {
      out.push_back(Value::array(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none() && !fill.is_undefined()) cur.resize(count, fill);
    out.push_back(Value::array(std::move(cur)));
  }
  return Value::array(std::move(out));
}

Value f_attr(Interpreter& in, const Value& input, CallArgs& args) {
  const Value name = args.get(0, "name", Value());
  if (!name.is_string()) in.fail("TypeError: attr expects a string name");
  if (input.is_object() && !input.as_object().is_namespace) {
    return bind_method(in, input, name.as_string());  // attributes only: dict keys are not attributes
  }
  return in.get_attr(input, name.as_string());
}

Value f_format(Interpreter& in, const Value& input, CallArgs& args) {
  // jinja2: "%s, %s" | format(a, b) is "%s, %s" % (a, b); keyword arguments fill %(name)s.
  if (!args.named.empty()) {
    Object mapping;
    for (const auto& [k, v] : args.named) mapping.set(k, v);
    return Value(printf_format(in, str_of(input), Value::object(std::move(mapping))));
  }
  return Value(printf_format(in, str_of(input), Value::tuple(args.positional)));
}

Value f_wordcount(Interpreter&, const Value& input, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8::decode(str_of(input))) {
    const bool word = c == '_' || (c >= '0' && c <= '9') || utf8::is_alpha(c);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},          {"attr", f_attr},         {"batch", f_batch},          {"capitalize", f_capitalize},
    {"center", f_center},    {"count", f_length},      {"d", f_default},            {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},         {"escape", f_escape},        {"filesizeformat", nullptr},
    {"first", f_first},      {"float", f_float},       {"forceescape", nullptr},   {"format", f_format},
    {"groupby", nullptr},    {"indent", f_indent},     {"int", f_int},              {"items", f_items},
    {"join", f_join},        {"last", f_last},         {"length", f_length},        {"list", f_list},
    {"lower", f_lower},      {"map", f_map},           {"max", f_max},              {"min", f_min},
    {"pprint", nullptr},     {"random", nullptr},      {"reject", f_reject},        {"rejectattr", f_rejectattr},
    {"replace", f_replace},  {"reverse", f_reverse},   {"round", f_round},          {"safe", f_safe},
    {"select", f_select},    {"selectattr", f_selectattr}, {"slice", nullptr},      {"sort", f_sort},
    {"string", f_string},    {"striptags", nullptr},   {"sum", f_sum},              {"title", f_title},
    {"tojson", f_tojson},    {"trim", f_trim},         {"truncate", nullptr},       {"unique", f_unique},
    {"upper", f_upper},      {"urlencode", nullptr},   {"urlize", nullptr},         {"wordcount", f_wordcount},
    {"wordwrap", nullptr},   {"xmlattr", nullptr},
};

}  // namespace

FilterFn find_filter(std::string_view name, bool* known) {
  for (const FilterEntry& f : kFilters) {
    if (f.name == name) {
      *known = true;
      return f.fn;
    }
  }
  *known = false;
  return nullptr;
}

bool is_known_filter(std::string_view name) {
  bool known = false;
  find_filter(name, &known);
  return known;
}

}  // namespace tern::chat::jinja

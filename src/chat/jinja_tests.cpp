// jinja2's builtin tests (`x is defined`, `x is mapping`, ...), with Python's type model: a bool
// is a number, an Undefined is iterable (and a "sequence": it has len() and __getitem__), a
// string is a sequence and iterable but not a mapping.
#include <string_view>

#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"
#include "chat/utf8.h"

namespace tern::chat::jinja {
namespace {

Value arg0(Interpreter& in, CallArgs& args, const char* test) {
  const Value* v = args.find(0, "other");
  if (v == nullptr) in.fail(std::string("TypeError: test '") + test + "' needs an argument");
  return *v;
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_object() && !v.as_object().is_namespace; }
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_array() || (v.is_object() && !v.as_object().is_namespace);
}
bool t_sequence(Interpreter& in, const Value& v, CallArgs& a) { return t_iterable(in, v, a); }
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }  // no Markup values in tern

bool t_odd(Interpreter& in, const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool()) in.fail("TypeError: 'odd' test needs an integer, got " + type_name(v));
  return ((v.is_int() ? v.as_int() : int64_t{v.as_bool()}) % 2) != 0;
}
bool t_even(Interpreter& in, const Value& v, CallArgs& a) { return !t_odd(in, v, a); }
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& args) {
  const Value n = arg0(in, args, "divisibleby");
  if (!v.is_int() || !n.is_int()) in.fail("TypeError: 'divisibleby' needs integers");
  if (n.as_int() == 0) in.fail("ZeroDivisionError: integer modulo by zero");
  return v.as_int() % n.as_int() == 0;
}

bool case_test(const Value& v, bool upper) {
  // Python: at least one cased character, and no cased character of the other case.
  bool cased = false;
  for (char32_t c : utf8::decode(to_str(v))) {
    const bool is_upper = utf8::to_lower(c) != c;
    const bool is_lower = utf8::to_upper(c) != c;
    if (upper ? is_lower : is_upper) return false;
    cased = cased || is_upper || is_lower;
  }
  return cased;
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) { return case_test(v, false); }
bool t_upper(Interpreter&, const Value& v, CallArgs&) { return case_test(v, true); }

bool t_eq(Interpreter& in, const Value& v, CallArgs& a) { return equals(v, arg0(in, a, "eq")); }
bool t_ne(Interpreter& in, const Value& v, CallArgs& a) { return !equals(v, arg0(in, a, "ne")); }
bool t_lt(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg0(in, a, "lt"), "<") < 0; }
bool t_le(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg0(in, a, "le"), "<=") <= 0; }
bool t_gt(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg0(in, a, "gt"), ">") > 0; }
bool t_ge(Interpreter& in, const Value& v, CallArgs& a) { return compare_values(in, v, arg0(in, a, "ge"), ">=") >= 0; }

bool t_sameas(Interpreter& in, const Value& v, CallArgs& a) {
  const Value other = arg0(in, a, "sameas");
  if (v.identity() != nullptr || other.identity() != nullptr) return v.identity() == other.identity();
  // Python's singletons (None, True, False) are identical to themselves; small values compare by value.
  return v.kind() == other.kind() && equals(v, other);
}

bool t_in(Interpreter& in, const Value& v, CallArgs& a) {
  const Value seq = arg0(in, a, "in");
  if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
  if (seq.is_object()) return v.is_string() && seq.as_object().find(v.as_string()) != nullptr;
  for (const Value& item : in.iterate(seq)) {
    if (equals(item, v)) return true;
  }
  return false;
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
    {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},             {"escaped", t_escaped},
    {"even", t_even},       {"false", t_false},       {"filter", nullptr},      {"float", t_float},
    {"ge", t_ge},           {">=", t_ge},             {"gt", t_gt},             {">", t_gt},
    {"greaterthan", t_gt},  {"in", t_in},             {"integer", t_integer},   {"iterable", t_iterable},
    {"le", t_le},           {"<=", t_le},             {"lower", t_lower},       {"lessthan", t_lt},
    {"lt", t_lt},           {"<", t_lt},              {"mapping", t_mapping},   {"ne", t_ne},
    {"!=", t_ne},           {"none", t_none},         {"number", t_number},     {"odd", t_odd},
    {"sameas", t_sameas},   {"sequence", t_sequence}, {"string", t_string},     {"test", nullptr},
    {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name, bool* known) {
  for (const TestEntry& t : kTests) {
    if (t.name == name) {
      *known = true;
      return t.fn;
    }
  }
  *known = false;
  return nullptr;
}

bool is_known_test(std::string_view name) {
  bool known = false;
  find_test(name, &known);
  return known;
}

}  // namespace tern::chat::jinja

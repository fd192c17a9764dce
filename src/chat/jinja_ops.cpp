// Operators with Python semantics: int arithmetic stays int (and fails on 64-bit overflow instead
// of growing), `/` is always float division, `//` and `%` floor, `+` concatenates strings and
// lists, `*` repeats them, `~` concatenates str() of both sides, comparisons order numbers,
// strings (code point order, which is UTF-8 byte order) and lists, and `in` tests membership.
#include <cmath>
#include <limits>

#include "chat/jinja_interp.h"

namespace tern::chat {

using jinja::Expr;

namespace jinja {

std::string to_str(const Value& v) { return to_display(v); }

namespace {

std::string short_type(const Value& v) {
  std::string t = type_name(v);
  return t.substr(0, t.find(' '));
}

int three_way(double a, double b) { return a < b ? -1 : (a > b ? 1 : 0); }

}  // namespace

int compare_values(Interpreter& in, const Value& a, const Value& b, const char* op) {
  if (a.depth() > kMaxNesting || b.depth() > kMaxNesting) in.fail("comparison of values nested too deeply");
  if (a.is_undefined()) in.fail_undefined(a);
  if (b.is_undefined()) in.fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      const int64_t x = a.is_int() ? a.as_int() : int64_t{a.as_bool()};
      const int64_t y = b.is_int() ? b.as_int() : int64_t{b.as_bool()};
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return three_way(a.as_number(), b.as_number());
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array() && a.as_array_data().is_tuple == b.as_array_data().is_tuple) {
    const auto& x = a.as_array();
    const auto& y = b.as_array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare_values(in, x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  in.fail(std::string("TypeError: '") + op + "' not supported between instances of '" + short_type(a) + "' and '" +
          short_type(b) + "'");
}

}  // namespace jinja

namespace {

// Python ints are unbounded; tern's are 64-bit and overflow is an error, never a wrong number.
template <typename Op>
int64_t checked(Interpreter& in, int64_t x, int64_t y, Op op) {
  int64_t r = 0;
  if (op(x, y, &r)) in.fail("integer overflow (tern's ints are 64-bit)");
  return r;
}
bool add_ovf(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub_ovf(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul_ovf(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

int64_t as_int64(const Value& v) { return v.is_int() ? v.as_int() : int64_t{v.as_bool()}; }

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value(std::string()) : Value::array();
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_array().size();
  if (unit != 0 && static_cast<uint64_t>(times) > in.limits().max_output_bytes / unit) {
    in.fail("sequence repetition larger than the output limit");
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_array().begin(), seq.as_array().end());
  return seq.as_array_data().is_tuple ? Value::tuple(std::move(out)) : Value::array(std::move(out));
}

Value arithmetic(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  if (a.is_number() && b.is_number()) {
    if (ints) {
      const int64_t x = as_int64(a), y = as_int64(b);
      if (op == "+") return Value(checked(in, x, y, add_ovf));
      if (op == "-") return Value(checked(in, x, y, sub_ovf));
      if (op == "*") return Value(checked(in, x, y, mul_ovf));
      if (op == "/") {
        if (y == 0) in.fail("ZeroDivisionError: division by zero");
        return Value(static_cast<double>(x) / static_cast<double>(y));
      }
      if (op == "//" || op == "%") {
        if (y == 0) in.fail(std::string("ZeroDivisionError: integer ") + (op == "//" ? "division" : "modulo") +
                            " by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) in.fail("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q -= 1;
          m += y;
        }
        return Value(op == "//" ? q : m);
      }
      if (op == "**") {
        if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t result = 1, base = x, e = y;
        while (e > 0) {
          if (e & 1) result = checked(in, result, base, mul_ovf);
          e >>= 1;
          if (e > 0) base = checked(in, base, base, mul_ovf);
        }
        return Value(result);
      }
    }
    const double x = a.as_number(), y = b.as_number();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      if (y == 0) in.fail("ZeroDivisionError: float division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) in.fail("ZeroDivisionError: float modulo");
      // CPython's float divmod: the remainder takes the divisor's sign, the quotient is floored.
      double m = std::fmod(x, y);
      double div = (x - m) / y;
      if (m != 0 && ((y < 0) != (m < 0))) {
        m += y;
        div -= 1.0;
      }
      if (op == "%") return Value(m != 0 ? m : std::copysign(0.0, y));
      double floor_div = std::floor(div);
      if (div - floor_div > 0.5) floor_div += 1.0;
      return Value(div != 0 ? floor_div : std::copysign(0.0, x / y));
    }
    if (op == "**") return Value(std::pow(x, y));
  }
  if (op == "+") {
    if (a.is_array() && a.as_array_data().is_generator) {
      in.fail("TypeError: unsupported operand type(s) for +: 'generator' and '" + type_name(b) + "'");
    }
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {
        // Markup.__add__/__radd__ escape the plain side.
        CallArgs none;
        const std::string x = a.is_markup() ? a.as_string() : in.apply_filter("escape", a, none).as_string();
        const std::string y = b.is_markup() ? b.as_string() : in.apply_filter("escape", b, none).as_string();
        return Value::markup(x + y);
      }
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_array() && b.is_array() && a.as_array_data().is_tuple == b.as_array_data().is_tuple) {
      std::vector<Value> out = a.as_array();
      out.insert(out.end(), b.as_array().begin(), b.as_array().end());
      return a.as_array_data().is_tuple ? Value::tuple(std::move(out)) : Value::array(std::move(out));
    }
    if (a.is_string()) {
      std::string t = type_name(b);
      in.fail("TypeError: can only concatenate str (not \"" + t.substr(0, t.find(' ')) + "\") to str");
    }
    if (a.is_array() && !a.as_array_data().is_tuple) {
      std::string t = type_name(b);
      in.fail("TypeError: can only concatenate list (not \"" + t.substr(0, t.find(' ')) + "\") to list");
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) return repeat(in, a, as_int64(b));
    if ((b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) return repeat(in, b, as_int64(a));
  }
  if (op == "%" && a.is_string()) return Value(jinja::printf_format(in, a.as_string(), b));
  std::string ta = type_name(a), tb = type_name(b);
  in.fail("TypeError: unsupported operand type(s) for " + op + ": '" + ta.substr(0, ta.find(' ')) + "' and '" +
          tb.substr(0, tb.find(' ')) + "'");
}

bool contains(Interpreter& in, const Value& needle, const Value& hay) {
  switch (hay.kind()) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (!needle.is_string()) {
        std::string t = type_name(needle);
        in.fail("TypeError: 'in <string>' requires string as left operand, not " + t.substr(0, t.find(' ')));
      }
      return hay.as_string().find(needle.as_string()) != std::string::npos;
    case Kind::Array:
      for (const Value& item : hay.as_array()) {
        if (equals(item, needle)) return true;
      }
      return false;
    case Kind::Object:
      if (hay.as_object().is_namespace) in.fail("TypeError: argument of type 'Namespace' is not iterable");
      return hay.as_object().find(Object::encode_key(needle)) != nullptr;
    default: {
      std::string t = type_name(hay);
      in.fail("TypeError: argument of type '" + t.substr(0, t.find(' ')) + "' is not iterable");
    }
  }
}

}  // namespace

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<jinja::Frame>& frame) {
  if (e.name == "and") {
    Value a = eval(*e.a, frame);
    return truthy(a) ? eval(*e.b, frame) : a;
  }
  if (e.name == "or") {
    Value a = eval(*e.a, frame);
    return truthy(a) ? a : eval(*e.b, frame);
  }
  const Value a = eval(*e.a, frame);
  const Value b = eval(*e.b, frame);
  at(e.line, e.col);
  if (e.name == "~") return Value(jinja::to_str(a) + jinja::to_str(b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  return arithmetic(*this, e.name, a, b);
}

Value Interpreter::eval_compare(const Expr& e, const std::shared_ptr<jinja::Frame>& frame) {
  Value left = eval(*e.a, frame);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i], frame);
    at(e.line, e.col);
    const std::string& op = e.ops[i];
    bool ok = false;
    if (op == "==") {
      ok = equals(left, right);
    } else if (op == "!=") {
      ok = !equals(left, right);
    } else if (op == "in" || op == "notin") {
      ok = contains(*this, left, right) == (op == "in");
    } else {
      const int c = jinja::compare_values(*this, left, right, op.c_str());
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace tern::chat

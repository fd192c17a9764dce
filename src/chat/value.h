// chat::Value: the data model of the chat layer. Messages, tool schemas and every value a Jinja
// template computes are Values. It mirrors the Python objects jinja2 sees when Hugging Face
// renders a chat template (None, bool, int, float, str, list, tuple, dict, jinja2's Undefined,
// callables), because the renders must be byte-identical to Python's.
//
// Invariants:
// - Strings are UTF-8. Python's str counts code points, so length/index/slice go through utf8.h.
// - Objects keep insertion order (Python dicts do) and have string keys only.
// - Arrays and objects are shared and immutable once built (the HF sandbox forbids mutating
//   lists and dicts), except a namespace(), whose attributes `{% set ns.x = ... %}` assigns:
//   like a Python object, every copy of the Value sees the change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tern::chat {

class Value;

class Object;
struct ArrayData;

struct CallArgs;
class Interpreter;
// A callable: a macro, a global function (range, namespace, raise_exception, ...) or a bound
// method ("abc".upper). It reports errors through Interpreter::fail().
struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

// jinja2's Undefined: what a missing variable, key or attribute evaluates to. It prints as "", is
// falsy, iterates as empty, and raises when used in arithmetic or when its attributes are read.
// `hint` is jinja2's message for that error ("'dict object' has no attribute 'x'").
struct Undefined {
  std::string hint;
};

// jinja2's Markup (what `|safe` returns): a string that `+` does not escape, while the plain
// string on the other side of `+` gets HTML-escaped. It is a String in every other respect.
struct Markup {
  std::string text;
};

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Callable };

class Value {
 public:
  Value() : v_(std::nullptr_t{}) {}  // None
  Value(std::nullptr_t) : v_(std::nullptr_t{}) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(int64_t{v}) {}
  Value(int64_t v) : v_(v) {}
  Value(double v) : v_(v) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(std::shared_ptr<ArrayData> a) : v_(std::move(a)) {}
  Value(std::shared_ptr<Object> o) : v_(std::move(o)) {}
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}

  static Value undefined(std::string hint = {}) { return Value(Undefined{std::move(hint)}); }
  static Value markup(std::string s) {
    Value v;
    v.v_ = Markup{std::move(s)};
    return v;
  }
  static Value array(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value generator(std::vector<Value> items);
  static Value object();  // an empty dict
  static Value object(Object o);
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);

  Kind kind() const { return v_.index() == kMarkupIndex ? Kind::String : static_cast<Kind>(v_.index()); }
  bool is_markup() const { return v_.index() == kMarkupIndex; }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::String; }
  bool is_array() const { return kind() == Kind::Array; }
  bool is_object() const { return kind() == Kind::Object; }
  bool is_callable() const { return kind() == Kind::Callable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  double as_number() const;  // int, float or bool as a double
  const std::string& as_string() const {
    return is_markup() ? std::get<Markup>(v_).text : std::get<std::string>(v_);
  }
  const ArrayData& as_array_data() const { return *std::get<std::shared_ptr<ArrayData>>(v_); }
  const std::vector<Value>& as_array() const;
  const Object& as_object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  Object& mutable_object() const { return *std::get<std::shared_ptr<Object>>(v_); }  // namespaces only
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  // Identity of a shared array/object (Python `is`); null for scalars.
  const void* identity() const;

  // Nesting depth: 0 for scalars, 1 for a flat list or dict, ...
  int depth() const;
  // True for a namespace or a container holding one (at any depth).
  bool holds_namespace() const;

  // Object member or nullptr (also nullptr when this is not an object).
  const Value* get(std::string_view key) const;

 private:
  static constexpr size_t kMarkupIndex = 9;
  // The first nine alternatives are in Kind order.
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<ArrayData>,
               std::shared_ptr<Object>, std::shared_ptr<Callable>, Markup>
      v_;
};

// An insertion-ordered map. Keys are strings; the rare non-string key of a template dict literal
// ({0: 'a'}) is stored encoded (see encode_key) so that lookups by the same value find it. Lookups are linear: chat objects are small (a message has
// a handful of keys), and order matters more than asymptotics here.
class Object {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // Inserts or replaces; a replaced key keeps its position (as a Python dict does).
  void set(std::string key, Value value);
  bool erase(std::string_view key);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

  bool is_namespace = false;  // a jinja2 namespace(): attribute-assignable, prints as <Namespace>
  // Nesting depth (1 + the deepest member) and whether a namespace is inside, kept up to date by
  // set(): the interpreter bounds nesting and refuses namespace cycles with them.
  int depth = 1;
  bool holds_namespace = false;

  // A dict key as stored: strings as themselves, ints/floats/bools/None as "\0" + a tag + text.
  static std::string encode_key(const Value& key);
  // The Value a stored key stands for (the inverse of encode_key).
  static Value decode_key(const std::string& key);

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

struct ArrayData {
  std::vector<Value> items;
  bool is_tuple = false;  // Python tuple: prints as (a, b); otherwise behaves like a list
  // A Python generator (what jinja2's map/select/selectattr/unique/items filters return): it
  // iterates like a list but is always truthy, has no len(), and json.dumps rejects it.
  bool is_generator = false;
  int depth = 1;                 // 1 + the deepest item's depth (set by the Value factories)
  bool holds_namespace = false;  // some item is or holds a namespace
};

inline const std::vector<Value>& Value::as_array() const { return as_array_data().items; }

// Python truthiness (Undefined is falsy, an empty string/list/dict is falsy, callables are truthy).
bool truthy(const Value& v);
// Python `==`: numbers compare by value across int/float/bool, containers element-wise.
bool equals(const Value& a, const Value& b);
// jinja2's name for a type in messages: "dict object", "str object", "NoneType object"...
std::string type_name(const Value& v);
// Python's repr(float): the shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string float_repr(double v);
// Containers nested deeper than this are not compared, printed or serialized (Python would raise
// RecursionError near here); it also bounds every recursion over a Value.
inline constexpr int kMaxNesting = 512;

// Python repr(): strings quoted and escaped, containers recursively ("{'a': [1, None]}"). Output
// past `max_bytes` (or nesting past kMaxNesting) is cut with "...".
std::string repr(const Value& v, size_t max_bytes = size_t{64} << 20);
// Python str(): what `{{ v }}` prints. Undefined prints as "".
std::string to_display(const Value& v);

}  // namespace tern::chat

// The Jinja evaluator: walks a parsed template and renders it, with the semantics of Python
// jinja2 in Hugging Face's ImmutableSandboxedEnvironment:
// - scopes: a for-loop iteration and a macro call get their own frame; `set` writes the current
//   frame (so a `set` inside a loop never leaks out, hence namespace()); `if` has no scope;
//   macros see their defining scope as it is at call time;
// - lookups: `a.b` tries attributes (methods) before keys, `a[b]` keys before attributes; a
//   missing key/attribute/index is Undefined, and reading through an Undefined raises;
// - lists and dicts cannot be mutated (append/pop/update raise a SecurityError like the sandbox);
// - every render is bounded: output bytes, evaluation steps, macro call depth.
// Template errors (raise_exception, type errors, undefined access) become a Status naming the
// template line and column.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/value.h"
#include "core/status.h"

namespace tern::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  uint64_t max_steps = 20'000'000;  // statements + loop iterations + calls
  int max_call_depth = 100;         // nested macro calls
  size_t max_range = 1'000'000;     // items range() may produce
};

// Arguments of a call, filter or test (the filter/test input is not among them).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // positional[index] if present, else the keyword `name`, else nullptr.
  const Value* find(size_t index, std::string_view name) const;
  Value get(size_t index, std::string_view name, Value fallback = Value::undefined()) const;
};

namespace jinja {
struct Frame;
}

class Interpreter {
 public:
  // `now` is what strftime_now() formats (local wall-clock time, as Python's datetime.now()).
  Interpreter(const RenderLimits& limits, const std::tm& now);
  ~Interpreter();

  // Renders `body` with `context` (an object: messages, tools, add_generation_prompt, ...).
  Result<std::string> render(const jinja::Body& body, const Value& context);

  // --- for builtins (filters, tests, methods, globals) ---
  // Throws the render error (caught by render()); `message` is prefixed with the position.
  [[noreturn]] void fail(const std::string& message) const;
  // Like fail() for an Undefined that was used: jinja2's UndefinedError with its hint.
  [[noreturn]] void fail_undefined(const Value& undefined) const;
  Value call(const Value& callee, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args);
  // Materialises an iterable as jinja2 iterates it: list items, dict keys, string characters;
  // Undefined is empty; other values raise "'int' object is not iterable".
  std::vector<Value> iterate(const Value& v) const;
  const std::tm& now() const { return now_; }
  const RenderLimits& limits() const { return limits_; }
  void count_steps(uint64_t n);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const jinja::Body& body, const std::shared_ptr<jinja::Frame>& frame);
  Flow exec(const jinja::Stmt& s, const std::shared_ptr<jinja::Frame>& frame);
  Flow exec_for(const jinja::Stmt& s, const std::shared_ptr<jinja::Frame>& frame);
  void exec_set(const jinja::Stmt& s, const std::shared_ptr<jinja::Frame>& frame);
  Value make_macro(const jinja::Stmt& s, const std::shared_ptr<jinja::Frame>& frame);
  std::string capture(const jinja::Body& body, const std::shared_ptr<jinja::Frame>& frame);

  Value eval(const jinja::Expr& e, const std::shared_ptr<jinja::Frame>& frame);
  Value eval_binary(const jinja::Expr& e, const std::shared_ptr<jinja::Frame>& frame);
  Value eval_compare(const jinja::Expr& e, const std::shared_ptr<jinja::Frame>& frame);
  Value eval_call(const jinja::Expr& e, const std::shared_ptr<jinja::Frame>& frame);
  CallArgs eval_args(const jinja::CallArgsExpr& a, const std::shared_ptr<jinja::Frame>& frame);
  Value eval_filter_chain(const std::vector<jinja::ExprPtr>& filters, Value input,
                          const std::shared_ptr<jinja::Frame>& frame);
  Value lookup(const std::string& name, const std::shared_ptr<jinja::Frame>& frame) const;
  void emit(std::string_view text);
  void at(int line, int col) {
    line_ = line;
    col_ = col;
  }

  RenderLimits limits_;
  std::tm now_;
  // Frames that define a macro: the macro holds its frame and the frame holds the macro, so
  // render() clears these frames when it ends to break the reference cycles.
  std::vector<std::weak_ptr<jinja::Frame>> macro_frames_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  int col_ = 0;
};

// Builtins, implemented in jinja_filters.cpp, jinja_tests.cpp and jinja_methods.cpp.
namespace jinja {
// nullptr when jinja2 has no such filter; a filter jinja2 has but tern lacks fails when applied.
using FilterFn = Value (*)(Interpreter&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& input, CallArgs& args);
FilterFn find_filter(std::string_view name, bool* known);
TestFn find_test(std::string_view name, bool* known);
// A method bound to `obj` ("abc".upper); Undefined (with jinja2's hint) when the type has none.
Value bind_method(Interpreter& in, const Value& obj, const std::string& name);
// The globals of HF's environment that chat templates use: range, namespace, dict,
// raise_exception, strftime_now (jinja2's cycler, joiner and lipsum are not provided).
void add_globals(Object* globals);
// Python comparisons used by sort/min/max and the < > operators; fails on mismatched types.
int compare_values(Interpreter& in, const Value& a, const Value& b, const char* op);
// Python str() with Markup-free semantics (what `|string` and `~` produce).
std::string to_str(const Value& v);
// Python's printf-style `fmt % args` (also the `format` filter): %s %r %d %i %x %o %c %f %e %g
// with flags, width and precision, %(name)s from a dict, %%.
std::string printf_format(Interpreter& in, const std::string& fmt, const Value& args);
}  // namespace jinja

}  // namespace tern::chat

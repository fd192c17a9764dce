// note: template errors unwind the (deeply recursive) evaluator as a private RenderError that
// render() catches and returns as a Status. It never leaves this library, and keeps every
// expression evaluation free of Result plumbing.
#include "chat/jinja_interp.h"

#include <cmath>
#include <limits>
#include <new>

#include "chat/utf8.h"

namespace tern::chat {

namespace jinja {

struct RenderError {
  std::string message;
};

// One scope. Lookups walk the parent chain; `set` writes here.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;

  Value* find_local(std::string_view name) {
    for (auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    if (Value* existing = find_local(name)) {
      *existing = std::move(v);
    } else {
      vars.emplace_back(name, std::move(v));
    }
  }
};

}  // namespace jinja

using jinja::Expr;
using jinja::ExprKind;
using jinja::Frame;
using jinja::Stmt;
using jinja::StmtKind;
using FramePtr = std::shared_ptr<Frame>;

const Value* CallArgs::find(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : named) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value CallArgs::get(size_t index, std::string_view name, Value fallback) const {
  const Value* v = find(index, name);
  return v != nullptr ? *v : std::move(fallback);
}

Interpreter::Interpreter(const RenderLimits& limits, const std::tm& now) : limits_(limits), now_(now) {}
Interpreter::~Interpreter() = default;

void Interpreter::fail(const std::string& message) const {
  throw jinja::RenderError{"template line " + std::to_string(line_) + ", column " + std::to_string(col_) + ": " +
                           message};
}

void Interpreter::fail_undefined(const Value& undefined) const {
  const std::string& hint = undefined.is_undefined() ? undefined.undefined_hint() : std::string();
  fail("UndefinedError: " + (hint.empty() ? std::string("value is undefined") : hint));
}

void Interpreter::count_steps(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) fail("render exceeded " + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    fail("rendered output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out_->append(text);
}

Result<std::string> Interpreter::render(const jinja::Body& body, const Value& context) {
  auto globals = std::make_shared<Frame>();
  Object builtins;
  jinja::add_globals(&builtins);
  for (auto& [k, v] : builtins.items()) globals->set(k, v);
  if (context.is_object()) {
    for (const auto& [k, v] : context.as_object().items()) globals->set(k, v);
  }
  auto root = std::make_shared<Frame>();
  root->parent = globals;
  std::string out;
  out_ = &out;
  steps_ = 0;
  call_depth_ = 0;
  Status status;
  try {
    exec_body(body, root);
  } catch (const jinja::RenderError& e) {
    status = error(e.message);
  } catch (const std::bad_alloc&) {
    status = error("template render ran out of memory");
  }
  out_ = nullptr;
  for (const auto& weak : macro_frames_) {
    if (auto frame = weak.lock()) frame->vars.clear();
  }
  macro_frames_.clear();
  if (!status.is_ok()) return status;
  return out;
}

// ---------------------------------------------------------------- statements

Interpreter::Flow Interpreter::exec_body(const jinja::Body& body, const FramePtr& frame) {
  for (const auto& s : body) {
    const Flow f = exec(*s, frame);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::capture(const jinja::Body& body, const FramePtr& frame) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, frame);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const FramePtr& frame) {
  count_steps(1);
  at(s.line, s.col);
  switch (s.kind) {
    case StmtKind::Text: emit(s.text); return Flow::Normal;
    case StmtKind::Output: {
      const Value v = eval(*s.expr, frame);
      emit(jinja::to_str(v));
      return Flow::Normal;
    }
    case StmtKind::If:
      if (truthy(eval(*s.expr, frame))) return exec_body(s.body, frame);
      return exec_body(s.else_body, frame);
    case StmtKind::For: return exec_for(s, frame);
    case StmtKind::Set: exec_set(s, frame); return Flow::Normal;
    case StmtKind::SetBlock: {
      std::string text = capture(s.body, frame);
      frame->set(s.targets[0], eval_filter_chain(s.filters, Value(std::move(text)), frame));
      return Flow::Normal;
    }
    case StmtKind::Macro: frame->set(s.name, make_macro(s, frame)); return Flow::Normal;
    case StmtKind::FilterBlock: {
      std::string text = capture(s.body, frame);
      emit(jinja::to_str(eval_filter_chain(s.filters, Value(std::move(text)), frame)));
      return Flow::Normal;
    }
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
    case StmtKind::Scope: return exec_body(s.body, frame);
  }
  return Flow::Normal;
}

namespace {

// Binds a for/set target list to a value (tuple unpacking when there are several names).
void bind_targets(Interpreter& in, Frame& frame, const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    frame.set(targets[0], v);
    return;
  }
  const std::vector<Value> items = in.iterate(v);
  if (items.size() != targets.size()) {
    in.fail("ValueError: expected " + std::to_string(targets.size()) + " values to unpack, got " +
            std::to_string(items.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) frame.set(targets[i], items[i]);
}

}  // namespace

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const FramePtr& frame) {
  const Value iterable = eval(*s.expr, frame);
  std::vector<Value> items = iterate(iterable);
  if (s.cond) {
    // The `if` filter runs before the loop, so loop.length/index count the kept items only.
    std::vector<Value> kept;
    for (Value& item : items) {
      count_steps(1);
      auto probe = std::make_shared<Frame>();
      probe->parent = frame;
      bind_targets(*this, *probe, s.targets, item);
      if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    return exec_body(s.else_body, frame) == Flow::Break ? Flow::Break : Flow::Normal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    count_steps(1);
    auto iter_frame = std::make_shared<Frame>();
    iter_frame->parent = frame;
    Object loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    const int64_t index0 = i;
    loop.set("cycle", Value::function("loop.cycle", [index0](Interpreter& in, CallArgs& args) {
               if (args.positional.empty()) in.fail("TypeError: no items for cycling given");
               return args.positional[static_cast<size_t>(index0) % args.positional.size()];
             }));
    iter_frame->set("loop", Value::object(std::move(loop)));
    bind_targets(*this, *iter_frame, s.targets, items[static_cast<size_t>(i)]);
    if (exec_body(s.body, iter_frame) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s, const FramePtr& frame) {
  Value v = eval(*s.expr, frame);
  if (s.text.empty()) {
    bind_targets(*this, *frame, s.targets, v);
    return;
  }
  const Value target = lookup(s.targets[0], frame);
  if (!target.is_object() || !target.as_object().is_namespace) {
    fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
  }
  if (!s.text.empty() && s.text[0] == '_') {
    fail("SecurityError: chat templates cannot store underscore-prefixed attributes on a namespace");
  }
  // A namespace is the only mutable value: refusing namespaces inside namespaces rules out
  // reference cycles, and the depth bound keeps every recursion over values shallow.
  if (v.holds_namespace()) fail("unsupported construct: storing a namespace inside a namespace");
  if (v.depth() >= kMaxNesting) fail("value nesting deeper than " + std::to_string(kMaxNesting) + " levels");
  target.mutable_object().set(s.text, std::move(v));
}

Value Interpreter::make_macro(const Stmt& s, const FramePtr& frame) {
  const Stmt* macro = &s;
  FramePtr defining = frame;
  macro_frames_.push_back(frame);
  return Value::function(s.name, [macro, defining](Interpreter& in, CallArgs& args) -> Value {
    if (args.positional.size() > macro->params.size()) {
      in.fail("TypeError: macro '" + macro->name + "' takes not more than " + std::to_string(macro->params.size()) +
              " argument(s)");
    }
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      in.fail("macro calls nested deeper than " + std::to_string(in.limits_.max_call_depth));
    }
    auto call_frame = std::make_shared<Frame>();
    call_frame->parent = defining;
    for (const auto& [key, v] : args.named) {
      bool is_param = false;
      for (const auto& p : macro->params) is_param = is_param || p.name == key;
      if (!is_param) in.fail("TypeError: macro '" + macro->name + "' takes no keyword argument '" + key + "'");
    }
    for (size_t i = 0; i < macro->params.size(); ++i) {
      const jinja::MacroParam& p = macro->params[i];
      if (const Value* given = args.find(i, p.name)) {
        call_frame->set(p.name, *given);
      } else if (p.default_value) {
        // Defaults are evaluated per call, in the call's scope (so they may use earlier params).
        call_frame->set(p.name, in.eval(*p.default_value, call_frame));
      } else {
        call_frame->set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
      }
    }
    const int line = in.line_, col = in.col_;
    std::string text = in.capture(macro->body, call_frame);
    in.at(line, col);
    --in.call_depth_;
    return Value(std::move(text));
  });
}

// ---------------------------------------------------------------- expressions

Value Interpreter::lookup(const std::string& name, const FramePtr& frame) const {
  for (Frame* f = frame.get(); f != nullptr; f = f->parent.get()) {
    if (Value* v = f->find_local(name)) return *v;
  }
  return Value::undefined("'" + name + "' is undefined");
}

std::vector<Value> Interpreter::iterate(const Value& v) const {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::Array: return v.as_array();
    case Kind::Object: {
      if (v.as_object().is_namespace) fail("TypeError: 'Namespace' object is not iterable");
      std::vector<Value> keys;
      for (const auto& kv : v.as_object().items()) keys.push_back(Object::decode_key(kv.first));
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        utf8::next(s, &pos);
        chars.emplace_back(s.substr(start, pos - start));
      }
      return chars;
    }
    default: {
      std::string type = type_name(v);
      type = type.substr(0, type.find(' '));
      fail("TypeError: '" + type + "' object is not iterable");
    }
  }
}

Value Interpreter::eval_filter_chain(const std::vector<jinja::ExprPtr>& filters, Value input, const FramePtr& frame) {
  for (const auto& f : filters) {
    CallArgs args = eval_args(f->args, frame);
    at(f->line, f->col);
    input = apply_filter(f->name, input, args);
  }
  return input;
}

CallArgs Interpreter::eval_args(const jinja::CallArgsExpr& a, const FramePtr& frame) {
  CallArgs args;
  for (const auto& p : a.positional) args.positional.push_back(eval(*p, frame));
  for (const auto& [k, v] : a.named) args.named.emplace_back(k, eval(*v, frame));
  if (a.star_args) {
    for (Value& v : iterate(eval(*a.star_args, frame))) args.positional.push_back(std::move(v));
  }
  if (a.star_kwargs) {
    const Value kw = eval(*a.star_kwargs, frame);
    if (!kw.is_object()) fail("TypeError: argument after ** must be a mapping, not " + type_name(kw));
    for (const auto& [k, v] : kw.as_object().items()) args.named.emplace_back(k, v);
  }
  return args;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) fail("TypeError: '" + type_name(callee) + "' is not callable");
  count_steps(1);
  return callee.as_callable().call(*this, args);
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  bool known = false;
  jinja::FilterFn fn = jinja::find_filter(name, &known);
  if (!known) fail("TemplateRuntimeError: No filter named '" + name + "' found.");
  if (fn == nullptr) fail("unsupported construct: filter '" + name + "'");
  return fn(*this, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  bool known = false;
  jinja::TestFn fn = jinja::find_test(name, &known);
  if (!known) fail("TemplateRuntimeError: No test named '" + name + "' found.");
  if (fn == nullptr) fail("unsupported construct: test '" + name + "'");
  return fn(*this, input, args);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_object()) {
    const Object& o = obj.as_object();
    if (!o.is_namespace) {
      Value method = jinja::bind_method(*this, obj, name);
      if (!method.is_undefined()) return method;
    }
    if (const Value* v = o.find(name)) return *v;
    return Value::undefined("'" + type_name(obj) + "' has no attribute '" + name + "'");
  }
  if (obj.is_none()) return Value::undefined("'None' has no attribute '" + name + "'");
  return jinja::bind_method(*this, obj, name);
}

namespace {

// Python's slice.indices(): clamps start/stop for a sequence of n items.
void slice_indices(Interpreter& in, const Value& start_v, const Value& stop_v, const Value& step_v, int64_t n,
                   int64_t* start, int64_t* stop, int64_t* step) {
  auto as_index = [&](const Value& v, const char* what) -> int64_t {
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool() ? 1 : 0;
    in.fail(std::string("TypeError: slice ") + what + " must be an integer or None, got " + type_name(v));
  };
  *step = step_v.is_none() || step_v.is_undefined() ? 1 : as_index(step_v, "step");
  if (*step == 0) in.fail("ValueError: slice step cannot be zero");
  const int64_t lower = *step < 0 ? -1 : 0;
  const int64_t upper = *step < 0 ? n - 1 : n;
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_none() || v.is_undefined()) return fallback;
    int64_t i = as_index(v, "index");
    if (i < 0) {
      i += n;
      return i < lower ? lower : i;
    }
    return i > upper ? upper : i;
  };
  *start = clamp(start_v, *step < 0 ? upper : lower);
  *stop = clamp(stop_v, *step < 0 ? lower : upper);
}

}  // namespace

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_object()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_object().find(key.as_string())) return *v;
      Value method = obj.as_object().is_namespace ? Value::undefined() : jinja::bind_method(*this, obj, key.as_string());
      if (!method.is_undefined()) return method;
      return Value::undefined("'" + type_name(obj) + "' has no attribute '" + key.as_string() + "'");
    }
    if (const Value* v = obj.as_object().find(Object::encode_key(key))) return *v;
    return Value::undefined("'" + type_name(obj) + "' has no attribute '" + to_display(key) + "'");
  }
  if (obj.is_array() && obj.as_array_data().is_generator) {
    return Value::undefined("'generator' object is not subscriptable");
  }
  if (obj.is_array() || obj.is_string()) {
    if (key.is_int() || key.is_bool()) {
      int64_t i = key.is_int() ? key.as_int() : int64_t{key.as_bool()};
      if (obj.is_array()) {
        const auto& items = obj.as_array();
        const int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("list index out of range");
        return items[static_cast<size_t>(i)];
      }
      const std::vector<size_t> offs = utf8::offsets(obj.as_string());
      const int64_t n = static_cast<int64_t>(offs.size()) - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("string index out of range");
      const size_t a = offs[static_cast<size_t>(i)];
      return Value(obj.as_string().substr(a, offs[static_cast<size_t>(i) + 1] - a));
    }
    if (key.is_string()) return get_attr(obj, key.as_string());
    return Value::undefined("'" + type_name(obj) + "' has no attribute '" + to_display(key) + "'");
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + type_name(obj) + "' has no attribute '" + to_display(key) + "'");
}

Value Interpreter::eval(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::Literal: return e.literal;
    case ExprKind::Name: return lookup(e.name, frame);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item, frame));
      return e.kind == ExprKind::List ? Value::array(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Object o;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const Value key = eval(*e.items[i], frame);
        at(e.line, e.col);
        if (key.is_array() || key.is_object() || key.is_callable() || key.is_undefined()) {
          fail("TypeError: unhashable dict key of type '" + type_name(key) + "'");
        }
        o.set(Object::encode_key(key), eval(*e.items[i + 1], frame));
      }
      return Value::object(std::move(o));
    }
    case ExprKind::Getattr: {
      const Value obj = eval(*e.a, frame);
      at(e.line, e.col);
      return get_attr(obj, e.name);
    }
    case ExprKind::Getitem: {
      const Value obj = eval(*e.a, frame);
      if (e.b->kind == ExprKind::Slice) {
        const Expr& sl = *e.b;
        const Value start = sl.items[0] ? eval(*sl.items[0], frame) : Value();
        const Value stop = sl.items[1] ? eval(*sl.items[1], frame) : Value();
        const Value step = sl.items[2] ? eval(*sl.items[2], frame) : Value();
        at(e.line, e.col);
        if (obj.is_undefined()) fail_undefined(obj);
        if (!obj.is_array() && !obj.is_string()) return Value::undefined("'" + type_name(obj) + "' is not sliceable");
        std::u32string chars;
        const std::vector<Value>* items = nullptr;
        int64_t n = 0;
        if (obj.is_string()) {
          chars = utf8::decode(obj.as_string());
          n = static_cast<int64_t>(chars.size());
        } else {
          items = &obj.as_array();
          n = static_cast<int64_t>(items->size());
        }
        int64_t a = 0, b = 0, st = 1;
        slice_indices(*this, start, stop, step, n, &a, &b, &st);
        std::vector<Value> picked;
        std::u32string picked_chars;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
          if (items) {
            picked.push_back((*items)[static_cast<size_t>(i)]);
          } else {
            picked_chars.push_back(chars[static_cast<size_t>(i)]);
          }
        }
        if (!items) return Value(utf8::encode(picked_chars));
        return obj.as_array_data().is_tuple ? Value::tuple(std::move(picked)) : Value::array(std::move(picked));
      }
      const Value key = eval(*e.b, frame);
      at(e.line, e.col);
      return get_item(obj, key);
    }
    case ExprKind::Slice: fail("unexpected slice");
    case ExprKind::Call: return eval_call(e, frame);
    case ExprKind::Filter: {
      const Value input = e.a ? eval(*e.a, frame) : Value::undefined();
      CallArgs args = eval_args(e.args, frame);
      at(e.line, e.col);
      return apply_filter(e.name, input, args);
    }
    case ExprKind::Test: {
      const Value input = eval(*e.a, frame);
      CallArgs args = eval_args(e.args, frame);
      at(e.line, e.col);
      return Value(apply_test(e.name, input, args) != e.negated);
    }
    case ExprKind::Unary: {
      const Value v = eval(*e.a, frame);
      at(e.line, e.col);
      if (e.name == "not") return Value(!truthy(v));
      if (v.is_undefined()) fail_undefined(v);
      if (v.is_int() || v.is_bool()) {
        const int64_t i = v.is_int() ? v.as_int() : int64_t{v.as_bool()};
        if (e.name == "-" && i == std::numeric_limits<int64_t>::min()) fail("integer overflow");
        return Value(e.name == "-" ? -i : i);
      }
      if (v.is_float()) return Value(e.name == "-" ? -v.as_float() : v.as_float());
      fail("TypeError: bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    }
    case ExprKind::Binary: return eval_binary(e, frame);
    case ExprKind::Compare: return eval_compare(e, frame);
    case ExprKind::CondExpr: {
      if (truthy(eval(*e.a, frame))) return eval(*e.b, frame);
      if (e.c) return eval(*e.c, frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value::undefined();
}

Value Interpreter::eval_call(const Expr& e, const FramePtr& frame) {
  const Value callee = eval(*e.a, frame);
  CallArgs args = eval_args(e.args, frame);
  at(e.line, e.col);
  return call(callee, args);
}

}  // namespace tern::chat

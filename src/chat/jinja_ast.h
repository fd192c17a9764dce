// The Jinja syntax tree. Expressions and statements are tagged nodes; each kind names the fields
// it uses. Every node keeps the line and column of its first token for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace tern::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Literal,   // literal
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // items: key0, value0, key1, value1, ...
  Getattr,   // a.name
  Getitem,   // a[b]
  Slice,     // items: start, stop, step (each may be null); only as Getitem's b
  Call,      // a(args)
  Filter,    // a | name(args); a is null in a filter block / set block filter chain
  Test,      // a is [not] name(args)
  Unary,     // name ("-", "+", "not") a
  Binary,    // a name b: + - * / // % ** ~ and or
  Compare,   // a ops[0] items[0] ops[1] items[1] ...: == != < <= > >= in notin
  CondExpr,  // b if a else c (c may be null)
};

struct CallArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
  ExprPtr star_args;    // *expr
  ExprPtr star_kwargs;  // **expr
};

struct Expr {
  ExprKind kind = ExprKind::Literal;
  int line = 0;
  int col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  ExprPtr a, b, c;
  CallArgsExpr args;
  bool negated = false;     // Test: `is not`
  bool soft = false;        // Filter/Test inside a conditional: an unknown name fails only when evaluated
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // if expr: body else else_body (an elif is an If inside else_body)
  For,          // for targets in expr [if cond]: body else else_body
  Set,          // set targets = expr, or set targets[0].attr = expr (namespace attribute)
  SetBlock,     // set targets[0] | filters: body
  Macro,        // macro name(params): body
  FilterBlock,  // filter filters: body
  Break,
  Continue,
  Scope,        // body rendered in place ({% generation %})
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required (Undefined when not passed)
};

struct Stmt {
  StmtKind kind = StmtKind::Text;
  int line = 0;
  int col = 0;
  std::string text;                  // Text; Set: the namespace attribute ("" for plain set)
  std::string name;                  // Macro name
  ExprPtr expr;                      // Output, If, For (iterable), Set (value)
  ExprPtr cond;                      // For: the `if` filter
  std::vector<std::string> targets;  // For, Set, SetBlock
  std::vector<ExprPtr> filters;      // SetBlock, FilterBlock: Filter nodes with a null input
  std::vector<MacroParam> params;    // Macro
  Body body;
  Body else_body;
};

}  // namespace tern::chat::jinja

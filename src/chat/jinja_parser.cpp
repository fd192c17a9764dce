// note: the recursive-descent parser reports errors by throwing a private SyntaxError that
// parse_template() turns into a Status; nothing is thrown across the public API. Threading a
// Result through every one of the ~30 mutually recursive grammar functions would hide the grammar.
#include "chat/jinja_parser.h"

#include <cerrno>
#include <cstdlib>
#include <set>

#include "chat/jinja_lexer.h"

namespace tern::chat::jinja {
namespace {

struct SyntaxError {
  std::string message;
};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits) : toks_(std::move(tokens)), limits_(limits) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != Tok::End) fail(cur(), "unexpected '" + peek_tag_name() + "'");
    return body;
  }

 private:
  std::vector<Token> toks_;
  const ParseLimits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int soft_depth_ = 0;  // inside an if-statement or a conditional expression

  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser, const Token& at) : p(parser) {
      if (++p->depth_ > p->limits_.max_depth) {
        p->fail(at, "nesting deeper than " + std::to_string(p->limits_.max_depth) + " levels");
      }
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& at(size_t k) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& advance() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }

  [[noreturn]] void fail(const Token& t, const std::string& message) const {
    throw SyntaxError{"template line " + std::to_string(t.line) + ", column " + std::to_string(t.col) + ": " +
                      message};
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::End: return "end of template";
      case Tok::Text: return "template text";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::String: return "string literal";
      default: return "'" + t.text + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), std::string("expected '") + op + "', got " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur(), "expected a name, got " + describe(cur()));
    return advance().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail(cur(), "expected end of statement '%}', got " + describe(cur()));
    advance();
  }
  std::string peek_tag_name() const { return at(1).text; }

  ExprPtr node(ExprKind kind, const Token& t) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = t.line;
    e->col = t.col;
    return e;
  }

  // ---------------------------------------------------------------- statements

  // Parses until `{% <one of end_tags>` (left unconsumed) or the end of the template.
  Body parse_body(const std::set<std::string>& end_tags) {
    Body body;
    while (cur().type != Tok::End) {
      const Token& t = cur();
      if (t.type == Tok::Text) {
        auto s = stmt(StmtKind::Text, t);
        s->text = t.text;
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::VarBegin) {
        advance();
        auto s = stmt(StmtKind::Output, t);
        s->expr = parse_tuple();
        if (cur().type != Tok::VarEnd) fail(cur(), "expected end of print statement '}}', got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        const Token& tag = at(1);
        if (tag.type == Tok::Name && end_tags.count(tag.text)) return body;
        advance();
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
    if (!end_tags.empty()) {
      std::string wanted;
      for (const auto& e : end_tags) wanted += (wanted.empty() ? "'" : " or '") + e + "'";
      fail(cur(), "unexpected end of template, expected " + wanted);
    }
    return body;
  }

  StmtPtr stmt(StmtKind kind, const Token& t) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = t.line;
    s->col = t.col;
    return s;
  }

  // Consumes `{% name` of an end tag.
  std::string take_end_tag() {
    advance();  // {%
    return advance().text;
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    DepthGuard guard(this, t);
    if (t.type != Tok::Name) fail(t, "expected a statement name, got " + describe(t));
    const std::string& name = t.text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "filter") return parse_filter_block();
    if (name == "generation") {
      advance();
      expect_block_end();
      auto s = stmt(StmtKind::Scope, t);
      s->body = parse_body({"endgeneration"});
      take_end_tag();
      expect_block_end();
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(t, "'" + name + "' outside of a loop");
      advance();
      expect_block_end();
      return stmt(name == "break" ? StmtKind::Break : StmtKind::Continue, t);
    }
    static const std::set<std::string> kUnsupported = {"include", "import", "from", "extends", "block", "call",
                                                       "with", "autoescape", "trans"};
    if (kUnsupported.count(name)) fail(t, "unsupported construct '{% " + name + " %}'");
    fail(t, "encountered unknown tag '" + name + "'");
  }

  StmtPtr parse_if() {
    const Token& t = advance();  // if / elif
    auto s = stmt(StmtKind::If, t);
    ++soft_depth_;
    s->expr = parse_tuple(/*with_condexpr=*/false);
    expect_block_end();
    s->body = parse_body({"elif", "else", "endif"});
    const std::string end = at(1).text;
    if (end == "elif") {
      advance();  // {%
      s->else_body.push_back(parse_if());
      --soft_depth_;
      return s;
    }
    take_end_tag();
    expect_block_end();
    if (end == "else") {
      s->else_body = parse_body({"endif"});
      take_end_tag();
      expect_block_end();
    }
    --soft_depth_;
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool paren = is_op("(");
    if (paren) advance();
    do {
      targets.push_back(expect_name());
      if (!is_op(",")) break;
      advance();
    } while (cur().type == Tok::Name);
    if (paren) expect_op(")");
    return targets;
  }

  StmtPtr parse_for() {
    const Token& t = advance();
    auto s = stmt(StmtKind::For, t);
    s->targets = parse_targets();
    if (!is_name("in")) fail(cur(), "expected 'in' in for loop, got " + describe(cur()));
    advance();
    s->expr = parse_tuple(/*with_condexpr=*/false);
    if (is_name("if")) {
      advance();
      s->cond = parse_expression();
    }
    if (is_name("recursive")) fail(cur(), "unsupported construct 'recursive' for loop");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (take_end_tag() == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
      take_end_tag();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token& t = advance();
    // `set ns.attr = value`: a namespace attribute.
    if (cur().type == Tok::Name && at(1).type == Tok::Op && at(1).text == ".") {
      auto s = stmt(StmtKind::Set, t);
      s->targets.push_back(advance().text);
      advance();  // .
      s->text = expect_name();
      expect_op("=");
      s->expr = parse_tuple();
      expect_block_end();
      return s;
    }
    std::vector<std::string> targets = parse_targets();
    if (is_op("=")) {
      advance();
      auto s = stmt(StmtKind::Set, t);
      s->targets = std::move(targets);
      s->expr = parse_tuple();
      expect_block_end();
      return s;
    }
    auto s = stmt(StmtKind::SetBlock, t);
    if (targets.size() != 1) fail(t, "a block set assigns exactly one name");
    s->targets = std::move(targets);
    while (is_op("|")) s->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    s->body = parse_body({"endset"});
    take_end_tag();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    const Token& t = advance();
    auto s = stmt(StmtKind::Macro, t);
    s->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (is_op("=")) {
        advance();
        p.default_value = parse_expression();
      }
      s->params.push_back(std::move(p));
    }
    advance();
    expect_block_end();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro boundary
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved_loop_depth;
    take_end_tag();
    if (cur().type == Tok::Name) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    const Token& t = cur();  // the 'filter' name doubles as the first filter's '|'
    auto s = stmt(StmtKind::FilterBlock, t);
    s->filters.push_back(parse_filter(nullptr));
    while (is_op("|")) s->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    s->body = parse_body({"endfilter"});
    take_end_tag();
    expect_block_end();
    return s;
  }

  // ---------------------------------------------------------------- expressions

  // A comma-separated list becomes a tuple (`{{ a, b }}`, `set x = 1, 2`); one expression stays itself.
  ExprPtr parse_tuple(bool with_condexpr = true, bool explicit_parens = false) {
    const Token& t = cur();
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        advance();
        saw_comma = true;
      }
      if (tuple_ends()) break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    if (!saw_comma && items.size() == 1) return std::move(items[0]);
    if (items.empty() && !explicit_parens) fail(t, "expected an expression, got " + describe(t));
    auto e = node(ExprKind::Tuple, t);
    e->items = std::move(items);
    return e;
  }

  bool tuple_ends() const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::End) return true;
    if (t.type == Tok::Op && (t.text == ")" || t.text == "]" || t.text == "=")) return true;
    return t.type == Tok::Name && (t.text == "in" || t.text == "if" || t.text == "recursive");
  }

  ExprPtr parse_expression() { return parse_condexpr(); }

  ExprPtr parse_condexpr() {
    DepthGuard guard(this, cur());
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& t = advance();
      ++soft_depth_;
      auto e = node(ExprKind::CondExpr, t);
      e->a = parse_or();
      e->b = std::move(expr);
      if (is_name("else")) {
        advance();
        e->c = parse_condexpr();
      }
      --soft_depth_;
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(const Token& t, std::string op, ExprPtr a, ExprPtr b) {
    auto e = node(ExprKind::Binary, t);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& t = advance();
      left = binary(t, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& t = advance();
      left = binary(t, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this, cur());
      const Token& t = advance();
      auto e = node(ExprKind::Unary, t);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& t = cur();
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    while (true) {
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        ops.push_back(advance().text);
      } else if (is_name("in")) {
        advance();
        ops.push_back("in");
      } else if (is_name("not") && at(1).type == Tok::Name && at(1).text == "in") {
        advance();
        advance();
        ops.push_back("notin");
      } else {
        break;
      }
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(ExprKind::Compare, t);
    e->a = std::move(first);
    e->ops = std::move(ops);
    e->items = std::move(rest);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = advance();
      left = binary(t, t.text, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& t = advance();
      left = binary(t, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = advance();
      left = binary(t, t.text, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& t = advance();
      left = binary(t, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this, cur());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = advance();
      e = node(ExprKind::Unary, t);
      e->name = t.text;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case Tok::Name: {
        advance();
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = node(ExprKind::Literal, t);
          e->literal = Value(t.text == "true" || t.text == "True");
          return e;
        }
        if (t.text == "none" || t.text == "None") return node(ExprKind::Literal, t);
        auto e = node(ExprKind::Name, t);
        e->name = t.text;
        return e;
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) s += advance().text;
        auto e = node(ExprKind::Literal, t);
        e->literal = Value(std::move(s));
        return e;
      }
      case Tok::Int: {
        advance();
        auto e = node(ExprKind::Literal, t);
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(t.text.c_str(), &end, 10);
        if (errno == ERANGE) fail(t, "integer literal out of the 64-bit range: " + t.text);
        e->literal = Value(static_cast<int64_t>(v));
        return e;
      }
      case Tok::Float: {
        advance();
        auto e = node(ExprKind::Literal, t);
        e->literal = Value(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case Tok::Op: {
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, /*explicit_parens=*/true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto e = node(ExprKind::List, t);
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression());
          }
          advance();
          return e;
        }
        if (t.text == "{") {
          advance();
          auto e = node(ExprKind::Dict, t);
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression());
            expect_op(":");
            e->items.push_back(parse_expression());
          }
          advance();
          return e;
        }
        break;
      }
      default: break;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& t = advance();
    if (t.text == ".") {
      const Token& attr = cur();
      if (attr.type == Tok::Name) {
        advance();
        auto e = node(ExprKind::Getattr, t);
        e->a = std::move(obj);
        e->name = attr.text;
        return e;
      }
      if (attr.type == Tok::Int) {
        advance();
        auto e = node(ExprKind::Getitem, t);
        e->a = std::move(obj);
        e->b = node(ExprKind::Literal, attr);
        e->b->literal = Value(static_cast<int64_t>(std::strtoll(attr.text.c_str(), nullptr, 10)));
        return e;
      }
      fail(attr, "expected an attribute name after '.', got " + describe(attr));
    }
    std::vector<ExprPtr> index;
    while (!is_op("]")) {
      if (!index.empty()) expect_op(",");
      if (is_op("]")) break;
      index.push_back(parse_subscribed());
    }
    advance();
    auto e = node(ExprKind::Getitem, t);
    e->a = std::move(obj);
    if (index.size() == 1) {
      e->b = std::move(index[0]);
    } else {
      if (index.empty()) fail(t, "expected an index inside '[]'");
      e->b = node(ExprKind::Tuple, t);
      e->b->items = std::move(index);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const Token& t = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression();
      if (!is_op(":")) return start;
    }
    advance();  // :
    auto slice = node(ExprKind::Slice, t);
    slice->items.resize(3);
    slice->items[0] = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) slice->items[1] = parse_expression();
    if (is_op(":")) {
      advance();
      if (!is_op("]") && !is_op(",")) slice->items[2] = parse_expression();
    }
    return slice;
  }

  void parse_call_args(CallArgsExpr* args) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*")) {
        advance();
        args->star_args = parse_expression();
      } else if (is_op("**")) {
        advance();
        args->star_kwargs = parse_expression();
      } else if (cur().type == Tok::Name && at(1).type == Tok::Op && at(1).text == "=") {
        std::string key = advance().text;
        advance();
        args->named.emplace_back(std::move(key), parse_expression());
      } else {
        if (!args->named.empty()) fail(cur(), "a positional argument after a keyword argument");
        args->positional.push_back(parse_expression());
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Token& t = cur();
    auto e = node(ExprKind::Call, t);
    e->a = std::move(callee);
    parse_call_args(&e->args);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      advance();
      name += "." + expect_name();
    }
    return name;
  }

  // `| name(args)`; the current token is '|' (or the `filter` tag name of a filter block).
  ExprPtr parse_filter(ExprPtr input) {
    const Token& t = advance();
    auto e = node(ExprKind::Filter, t);
    e->a = std::move(input);
    e->name = dotted_name();
    e->soft = soft_depth_ > 0;
    if (!e->soft && !is_known_filter(e->name)) fail(t, "no filter named '" + e->name + "'");
    if (is_op("(")) parse_call_args(&e->args);
    return e;
  }

  ExprPtr parse_test(ExprPtr input) {
    const Token& t = advance();  // is
    auto e = node(ExprKind::Test, t);
    e->a = std::move(input);
    if (is_name("not")) {
      advance();
      e->negated = true;
    }
    e->name = dotted_name();
    e->soft = soft_depth_ > 0;
    if (!e->soft && !is_known_test(e->name)) fail(t, "no test named '" + e->name + "'");
    const Token& n = cur();
    if (is_op("(")) {
      parse_call_args(&e->args);
    } else if ((n.type == Tok::Name || n.type == Tok::String || n.type == Tok::Int || n.type == Tok::Float ||
                (n.type == Tok::Op && (n.text == "[" || n.text == "{"))) &&
               !(n.type == Tok::Name && (n.text == "else" || n.text == "or" || n.text == "and"))) {
      if (n.type == Tok::Name && n.text == "is") fail(n, "you cannot chain multiple tests with 'is'");
      e->args.positional.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }
};

}  // namespace

Result<Body> parse_template(std::string_view source, const ParseLimits& limits) {
  TERN_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source));
  try {
    Parser parser(std::move(tokens), limits);
    return parser.parse_all();
  } catch (const SyntaxError& e) {
    return error(e.message);
  }
}

}  // namespace tern::chat::jinja

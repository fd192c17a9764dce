// Jinja parser: tokens -> syntax tree, following jinja2's grammar and operator precedence
// (including its quirks: `-x ** 2` is `(-x) ** 2`, `is` binds tighter than comparisons, adjacent
// string literals concatenate). A construct outside the supported subset (include, import,
// extends, call blocks, recursive loops, `do`, ...) is an error naming the construct, its line and
// its column, never a crash.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"
#include "core/status.h"

namespace tern::chat::jinja {

struct ParseLimits {
  int max_depth = 200;  // nesting of statements and expressions (the parser is recursive)
};

Result<Body> parse_template(std::string_view source, const ParseLimits& limits = {});

// Names the interpreter implements; the parser uses them to reject unknown filters and tests
// outside conditionals at parse time, as jinja2 does at compile time.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace tern::chat::jinja

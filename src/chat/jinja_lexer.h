// Jinja lexer: template source -> tokens, with jinja2's whitespace rules applied to the text
// between tags exactly as Hugging Face configures them (trim_blocks and lstrip_blocks on,
// keep_trailing_newline off):
// - Newlines (\r\n, \r) become \n and one trailing newline of the source is dropped.
// - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}` all after it.
// - trim_blocks: the first newline after `%}` or `#}` is removed (`+%}` keeps it).
// - lstrip_blocks: spaces and tabs between a line start and `{%`/`{#` are removed (`{%+` keeps them).
// `{% raw %}...{% endraw %}` becomes one Text token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::chat::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };

struct Token {
  Tok type = Tok::End;
  std::string text;  // Text: the text; Name; String: the decoded value; Int/Float: the literal; Op
  int line = 1;      // 1-based position of the token's first byte in the source
  int col = 1;
};

struct LexLimits {
  size_t max_tokens = 4'000'000;
};

Result<std::vector<Token>> lex(std::string_view source, const LexLimits& limits = {});

// Removes trailing Python whitespace (str.rstrip()).
std::string_view rstrip_space(std::string_view s);

}  // namespace tern::chat::jinja

#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cstring>

#include "chat/utf8.h"

namespace tern::chat::jinja {

std::string_view rstrip_space(std::string_view s) {
  size_t keep = 0;
  for (size_t pos = 0; pos < s.size();) {
    const char32_t cp = utf8::next(s, &pos);
    if (!utf8::is_space(cp)) keep = pos;
  }
  return s.substr(0, keep);
}

namespace {

size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t next = pos;
    if (!utf8::is_space(utf8::next(s, &next))) break;
    pos = next;
  }
  return pos;
}

// jinja2 reads string literals with Python's unicode-escape codec (unknown escapes keep their
// backslash).
Status decode_string_literal(std::string_view body, std::string* out) {
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out->push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](int n_digits) -> Status {
      uint32_t v = 0;
      for (int k = 0; k < n_digits; ++k) {
        if (i + 1 >= body.size()) return error("truncated \\" + std::string(1, e) + " escape in a string literal");
        const char h = body[++i];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
        else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
        else return error("invalid \\" + std::string(1, e) + " escape in a string literal");
      }
      utf8::append(out, v);
      return Status::ok();
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case 'x': TERN_RETURN_IF_ERROR(hex(2)); break;
      case 'u': TERN_RETURN_IF_ERROR(hex(4)); break;
      case 'U': TERN_RETURN_IF_ERROR(hex(8)); break;
      case 'N': return error("unsupported construct: \\N{...} escape in a string literal");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          utf8::append(out, v);
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
    }
  }
  return Status::ok();
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Digits with single underscores between them (Python's numeric literal grammar).
size_t scan_digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_digit(s[pos])) return pos;
  while (pos < s.size()) {
    if (is_digit(s[pos])) {
      ++pos;
    } else if (s[pos] == '_' && pos + 1 < s.size() && is_digit(s[pos + 1])) {
      pos += 2;
    } else {
      break;
    }
  }
  return pos;
}

class Lexer {
 public:
  Lexer(std::string source, const LexLimits& limits) : src_(std::move(source)), limits_(limits) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;
    const std::string_view s = src_;
    while (pos < s.size()) {
      // The earliest tag start: "{{", "{%" or "{#".
      size_t tag = pos;
      while (true) {
        tag = s.find('{', tag);
        if (tag == std::string_view::npos || tag + 1 >= s.size()) {
          tag = std::string_view::npos;
          break;
        }
        const char k = s[tag + 1];
        if (k == '{' || k == '%' || k == '#') break;
        ++tag;
      }
      if (tag == std::string_view::npos) {
        emit_text(s.substr(pos), pos);
        break;
      }
      const char kind = s[tag + 1];
      const char sign = tag + 2 < s.size() ? s[tag + 2] : '\0';
      std::string_view text = s.substr(pos, tag - pos);
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the whitespace between the line start and a block or comment tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            rstrip_space(text.substr(l_pos)).empty()) {
          text = text.substr(0, l_pos);
        }
      }
      emit_text(text, pos);
      size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        TERN_ASSIGN_OR_RETURN(pos, lex_comment(body, tag, &line_starting));
        continue;
      }
      if (kind == '%') {
        // {% raw %}: everything up to {% endraw %} is text.
        size_t p = skip_space(s, body);
        if (s.compare(p, 3, "raw") == 0 && (p + 3 >= s.size() || !is_name_char(s[p + 3]))) {
          TERN_ASSIGN_OR_RETURN(pos, lex_raw(p + 3, tag, &line_starting));
          continue;
        }
      }
      push(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, kind == '{' ? "{{" : "{%", tag);
      TERN_ASSIGN_OR_RETURN(pos, lex_tag(body, kind == '%', tag, &line_starting));
    }
    push(Tok::End, "", s.size());
    return std::move(tokens_);
  }

 private:
  std::string src_;
  const LexLimits& limits_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;

  void position(size_t offset, int* line, int* col) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<int>(line_index + 1);
    *col = static_cast<int>(offset - line_starts_[line_index] + 1);
  }

  Status fail(size_t offset, const std::string& message) const {
    int line = 0, col = 0;
    position(offset, &line, &col);
    return error("template line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + message);
  }

  void push(Tok type, std::string text, size_t offset) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    position(offset, &t.line, &t.col);
    tokens_.push_back(std::move(t));
  }

  void emit_text(std::string_view text, size_t offset) {
    if (!text.empty()) push(Tok::Text, std::string(text), offset);
  }

  Result<size_t> lex_comment(size_t pos, size_t tag, bool* line_starting) {
    const std::string_view s = src_;
    for (size_t i = pos; i + 1 < s.size(); ++i) {
      if (s[i] == '+' && s.compare(i + 1, 2, "#}") == 0) {
        *line_starting = false;
        return i + 3;
      }
      if (s[i] == '-' && s.compare(i + 1, 2, "#}") == 0) {
        const size_t end = skip_space(s, i + 3);
        *line_starting = end > i + 3 && s[end - 1] == '\n';
        return end;
      }
      if (s.compare(i, 2, "#}") == 0) {
        size_t end = i + 2;
        if (end < s.size() && s[end] == '\n') ++end;
        *line_starting = s[end - 1] == '\n';
        return end;
      }
    }
    return fail(tag, "missing end of comment tag '#}'");
  }

  // After `{% raw`: the block end, then text up to `{% endraw %}` (whose `-` strips that text).
  Result<size_t> lex_raw(size_t pos, size_t tag, bool* line_starting) {
    const std::string_view s = src_;
    pos = skip_space(s, pos);
    size_t after_open = 0;
    if (s.compare(pos, 3, "-%}") == 0) {
      after_open = skip_space(s, pos + 3);
    } else if (s.compare(pos, 2, "%}") == 0) {
      after_open = pos + 2;  // jinja2 applies no trim_blocks after `raw %}`
    } else {
      return fail(tag, "expected '%}' after 'raw'");
    }
    for (size_t i = after_open; i + 1 < s.size(); ++i) {
      if (s.compare(i, 2, "{%") != 0) continue;
      size_t p = i + 2;
      const char sign = p < s.size() ? s[p] : '\0';
      if (sign == '-' || sign == '+') ++p;
      p = skip_space(s, p);
      if (s.compare(p, 6, "endraw") != 0) continue;
      p = skip_space(s, p + 6);
      std::string_view text = s.substr(after_open, i - after_open);
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 && l_pos < text.size() && rstrip_space(text.substr(l_pos)).empty()) {
          text = text.substr(0, l_pos);
        }
      }
      size_t end = 0;
      if (s.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (s.compare(p, 3, "-%}") == 0) {
        end = skip_space(s, p + 3);
      } else if (s.compare(p, 2, "%}") == 0) {
        end = p + 2;
        if (end < s.size() && s[end] == '\n') ++end;
      } else {
        return fail(p, "expected '%}' after 'endraw'");
      }
      emit_text(text, after_open);
      *line_starting = s[end - 1] == '\n';
      return end;
    }
    return fail(tag, "missing end of raw directive ({% endraw %})");
  }

  // Expression tokens inside `{{ ... }}` or `{% ... %}`, up to and including the end tag.
  Result<size_t> lex_tag(size_t pos, bool is_block, size_t tag, bool* line_starting) {
    const std::string_view s = src_;
    std::vector<char> brackets;  // closers expected; an end tag only counts when this is empty
    while (true) {
      if (tokens_.size() > limits_.max_tokens) return fail(pos, "template too large (token limit)");
      if (pos >= s.size()) {
        return fail(tag, std::string("unexpected end of template, expected '") + (is_block ? "%}" : "}}") + "'");
      }
      if (brackets.empty()) {
        const char* close = is_block ? "%}" : "}}";
        if (is_block && s.compare(pos, 3, "+%}") == 0) {
          push(Tok::BlockEnd, "%}", pos);
          *line_starting = false;
          return pos + 3;
        }
        if (s[pos] == '-' && s.compare(pos + 1, 2, close) == 0) {
          push(is_block ? Tok::BlockEnd : Tok::VarEnd, close, pos);
          const size_t end = skip_space(s, pos + 3);
          *line_starting = end > pos + 3 && s[end - 1] == '\n';
          return end;
        }
        if (s.compare(pos, 2, close) == 0) {
          push(is_block ? Tok::BlockEnd : Tok::VarEnd, close, pos);
          size_t end = pos + 2;
          if (is_block && end < s.size() && s[end] == '\n') ++end;
          *line_starting = s[end - 1] == '\n';
          return end;
        }
      }
      const char c = s[pos];
      size_t next = pos;
      if (utf8::is_space(utf8::next(s, &next))) {
        pos = next;
        continue;
      }
      if (is_digit(c)) {
        size_t end = scan_digits(s, pos);
        bool is_float = false;
        if (end + 1 < s.size() && s[end] == '.' && is_digit(s[end + 1])) {
          end = scan_digits(s, end + 1);
          is_float = true;
        }
        if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
          size_t e = end + 1;
          if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
          const size_t e_end = scan_digits(s, e);
          if (e_end > e) {
            end = e_end;
            is_float = true;
          }
        }
        std::string literal;
        for (size_t k = pos; k < end; ++k) {
          if (s[k] != '_') literal.push_back(s[k]);
        }
        push(is_float ? Tok::Float : Tok::Int, std::move(literal), pos);
        pos = end;
        continue;
      }
      if (is_name_start(c)) {
        size_t end = pos;
        while (end < s.size() && is_name_char(s[end])) ++end;
        push(Tok::Name, std::string(s.substr(pos, end - pos)), pos);
        pos = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < s.size() && s[end] != c) end += (s[end] == '\\') ? 2 : 1;
        if (end >= s.size()) return fail(pos, "unterminated string literal");
        std::string value;
        const Status decoded = decode_string_literal(s.substr(pos + 1, end - pos - 1), &value);
        if (!decoded.is_ok()) return fail(pos, decoded.message());
        push(Tok::String, std::move(value), pos);
        pos = end + 1;
        continue;
      }
      static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                         "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
      const char* op = nullptr;
      for (const char* candidate : kOps) {
        if (s.compare(pos, std::strlen(candidate), candidate) == 0) {
          op = candidate;
          break;
        }
      }
      if (op == nullptr) return fail(pos, "unexpected character '" + std::string(1, c) + "'");
      const std::string_view o = op;
      if (o == "(" || o == "[" || o == "{") {
        brackets.push_back(o == "(" ? ')' : (o == "[" ? ']' : '}'));
      } else if (o == ")" || o == "]" || o == "}") {
        if (brackets.empty() || brackets.back() != o[0]) return fail(pos, "unexpected '" + std::string(o) + "'");
        brackets.pop_back();
      }
      push(Tok::Op, std::string(o), pos);
      pos += o.size();
    }
  }
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source, const LexLimits& limits) {
  // Newline normalization and keep_trailing_newline=False, as jinja2 does before lexing.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized), limits).run();
}

}  // namespace tern::chat::jinja

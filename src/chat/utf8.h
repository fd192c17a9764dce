// UTF-8 helpers for Python-str semantics over UTF-8 bytes: templates index, slice and measure
// strings in code points, and Python's strip()/split() treat Unicode whitespace as whitespace.
// Malformed bytes never fail: each invalid byte decodes as one code point (U+FFFD stands in only
// when re-encoding is needed), so arbitrary input stays total.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tern::chat::utf8 {

// Decodes one code point at s[*pos] and advances *pos (by 1 for an invalid byte, which decodes to
// the byte's value so that encode(decode(x)) keeps ASCII intact).
char32_t next(std::string_view s, size_t* pos);
void append(std::string* out, char32_t cp);
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
size_t length(std::string_view s);  // code points
// Byte offsets of each code point start, plus s.size() at the end.
std::vector<size_t> offsets(std::string_view s);

// Python str.isspace() for one code point (Unicode White_Space plus the \x1c-\x1f separators).
bool is_space(char32_t cp);
// Python str.upper()/lower() for one code point, over the alphabets chat text uses (Latin,
// Greek, Cyrillic); other scripts are returned unchanged.
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);
bool is_alpha(char32_t cp);  // letters of the same alphabets, plus any code point above U+00FF that changes case
// Python's str.isprintable() for one code point: false for controls, format characters,
// separators other than ' ', surrogates and private use (what repr() escapes).
bool is_printable(char32_t cp);
// True when every byte sequence is well-formed UTF-8.
bool valid(std::string_view s);

}  // namespace tern::chat::utf8

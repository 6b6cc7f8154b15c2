// Small text helpers shared by the .ts and CSV readers (not part of the public data API).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "../core/error.hpp"

namespace kformer::data::detail {

inline std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

inline bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// "?" (the .ts convention), "NaN" in any case, or nothing at all.
inline bool is_missing(std::string_view token) {
  return token.empty() || token == "?" || equals_ignoring_case(token, "nan");
}

// The whole of `token` as a finite number. strtod rather than from_chars because the latter's
// floating-point overloads are missing from older standard libraries; strtod reads '.' as the
// decimal point in the "C" locale, which a program has unless it calls setlocale itself.
inline bool parse_number(std::string_view token, double& value) {
  if (token.empty() || std::isspace(static_cast<unsigned char>(token.front()))) return false;
  char small[64];
  std::string large;
  const char* text = small;
  if (token.size() < sizeof(small)) {
    std::memcpy(small, token.data(), token.size());
    small[token.size()] = '\0';
  } else {
    large.assign(token);
    text = large.c_str();
  }
  char* end = nullptr;
  value = std::strtod(text, &end);
  return end == text + token.size() && std::isfinite(value);
}

inline bool fits_float(double value) {
  return std::abs(value) <= double(std::numeric_limits<float>::max());
}

// `text` fit for a one-line message: control characters and bytes that are not UTF-8 as \xNN, so
// that the text a message quotes from a binary or UTF-16 file neither cuts nor garbles it.
std::string printable(std::string_view text);

// Throws Error("<where>: <source>:<line>:<column>: <parts...>"), the position of a problem in a
// text file (both counted from 1; column in bytes), the quoted text made printable.
template <class... Parts>
[[noreturn]] void fail_at(const std::string& where, const std::string& source, std::int64_t line,
                          std::int64_t column, const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  fail(where, source, ':', line, ':', column, ": ", printable(message.str()));
}

// The whole file as text. Throws Error("<where>: cannot read '<path>': <reason>").
std::string read_text_file(const std::string& path, const std::string& where);

// The bytes of a UTF-8 byte order mark at the start of `text` (3, or 0 without one): editors and
// spreadsheets write one; it is skipped, and columns on the first line count after it.
inline std::size_t utf8_bom_length(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
}

// Calls on_line(line_number, line) for each line of `text` (numbered from 1, without the line
// break; a trailing '\r' of Windows line ends is dropped; a leading UTF-8 byte order mark too).
template <class OnLine>
void for_each_line(std::string_view text, OnLine&& on_line) {
  std::int64_t number = 0;
  std::size_t start = utf8_bom_length(text);
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    on_line(++number, line);
    start = end + 1;
  }
}

}  // namespace kformer::data::detail

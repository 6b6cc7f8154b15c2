#include "text_parsing.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "../core/file_io.hpp"

namespace kformer::data::detail {

std::string printable(std::string_view text) {
  static const char* const digits = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    // The length of a UTF-8 sequence starting here, 0 where none starts.
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    for (std::size_t k = 1; k < n; ++k)
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) n = 0;
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7F))) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 0xF];
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string read_text_file(const std::string& path, const std::string& where) {
  require_regular_file(path, where);  // before fopen, which waits forever on a FIFO
  std::FILE* stream = std::fopen(path.c_str(), "rb");
  if (!stream) fail(where, "cannot read '", path, "': ", std::strerror(errno));
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(stream, &std::fclose);
  struct stat status;
  if (fstat(fileno(stream), &status) != 0 || !S_ISREG(status.st_mode))
    fail(where, "cannot read '", path, "': not a regular file");
  std::string text;
  char buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), stream)) > 0)
    text.append(buffer, n);
  if (std::ferror(stream)) fail(where, "cannot read '", path, "': ", std::strerror(errno));
  const std::string_view head(text.data(), std::min<std::size_t>(text.size(), 4));
  if (head.substr(0, 2) == "\xFF\xFE" || head.substr(0, 2) == "\xFE\xFF")
    fail(where, path, " is UTF-16 or UTF-32 text (it starts with the byte order mark ",
         printable(head.substr(0, 2)), "); kformer reads UTF-8 or ASCII: save it as UTF-8");
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(nul), '\n');
    fail(where, path, ":", line, ": a NUL byte (byte ", nul, " of the file): it is not a text file");
  }
  return text;
}

}  // namespace kformer::data::detail

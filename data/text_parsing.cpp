#include "text_parsing.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kformer::data::detail {

std::string read_text_file(const std::string& path, const std::string& where) {
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
  return text;
}

}  // namespace kformer::data::detail

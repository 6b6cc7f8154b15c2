#include "file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "error.hpp"

namespace kformer {

void require_regular_file(const std::string& path, const std::string& where) {
  struct stat status;
  if (stat(path.c_str(), &status) != 0)
    fail(where, "cannot read '", path, "': ", std::strerror(errno));
  if (S_ISREG(status.st_mode)) return;
  const char* kind = S_ISDIR(status.st_mode)    ? "a directory"
                     : S_ISFIFO(status.st_mode) ? "a FIFO (a pipe)"
                     : S_ISSOCK(status.st_mode) ? "a socket"
                     : S_ISCHR(status.st_mode) || S_ISBLK(status.st_mode) ? "a device"
                                                                          : "not a regular file";
  fail(where, "cannot read '", path, "': it is ", kind, ", not a regular file");
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string where = "kformer::write_file_atomic";
  if (path.empty()) fail(where, "output path is empty");
  std::string tmp = path + ".tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) fail(where, "cannot create a file next to '", path, "': ", std::strerror(errno));
  tmp.assign(name.data());
  const auto give_up = [&](const char* what) {
    const int err = errno;
    close(fd);
    std::remove(tmp.c_str());
    fail(where, what, " '", path, "': ", std::strerror(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) give_up("writing");
    done += static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0) give_up("flushing");
  // mkstemp creates the file 0600; give it the usual permissions, as an ofstream would.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  if (close(fd) != 0) {
    std::remove(tmp.c_str());
    fail(where, "closing '", path, "': ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(where, "renaming the new file over '", path, "': ", std::strerror(err));
  }
}

}  // namespace kformer

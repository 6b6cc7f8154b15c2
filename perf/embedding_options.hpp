// The command line and memory reading shared by perf/embedding_bench.cpp (kformer) and
// perf/embedding_bench_libtorch.cpp (LibTorch): the same sizes, refused alike. No Kokkos or Torch.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace embedding_bench {

struct Sizes {
  int members = 32, tokens = 8, patch = 8, width = 32, steps = 50, repeat = 7;
};

// A field of /proc/self/status in MiB (VmRSS, VmHWM).
inline double status_mib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0)
      return std::strtod(line.c_str() + field.size() + 1, nullptr) / 1024;
  return 0;
}

// Reads --members, --tokens, --patch, --width, --steps, --repeat into s; 0, or 2 after a message
// naming the program and the argument.
inline int parse(const char* program, int argc, char** argv, Sizes& s) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int* target = arg == "--members"  ? &s.members
                  : arg == "--tokens" ? &s.tokens
                  : arg == "--patch"  ? &s.patch
                  : arg == "--width"  ? &s.width
                  : arg == "--steps"  ? &s.steps
                  : arg == "--repeat" ? &s.repeat
                                      : nullptr;
    if (target == nullptr || i + 1 == argc) {
      std::fprintf(stderr, "%s: unknown option or missing value: %s\n", program, arg.c_str());
      return 2;
    }
    char* end = nullptr;
    const long value = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || value < 1 || value > 1 << 20) {
      std::fprintf(stderr, "%s: %s must be a whole number in [1, 1048576], got %s\n", program,
                   arg.c_str(), argv[i]);
      return 2;
    }
    *target = static_cast<int>(value);
  }
  if (s.width % 4 != 0) {
    std::fprintf(stderr, "%s: --width must be a multiple of the 4 heads, got %d\n", program,
                 s.width);
    return 2;
  }
  return 0;
}

}  // namespace embedding_bench

// What the fuzz targets (tests/fuzz/fuzz_*.cpp) share: the libFuzzer entry point, which
// replay_main.cpp also calls, and the report of a finding that is not a crash by itself: a parse
// that succeeded with an inconsistent result, or a round trip that changed something.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace kformer::fuzz {

// Prints the finding and aborts: libFuzzer keeps the input as a crash, the corpus replay fails.
[[noreturn]] inline void finding(const char* target, const std::string& what) {
  std::fprintf(stderr, "\n%s: finding: %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kformer::fuzz

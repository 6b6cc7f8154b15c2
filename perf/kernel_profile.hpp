// A minimal in-process Kokkos Tools profiler for kformer-bench --profile: wall time per kernel
// label and per region (layer forward/backward, KokkosBlas::gemm), from the Tools callbacks.
// Host backends run kernels synchronously, so the time between begin and end is the kernel's;
// on a GPU it is the launch time unless the run fences (CUDA_LAUNCH_BLOCKING=1).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

namespace kformer::bench {

class KernelProfile {
 public:
  struct Entry {
    double seconds = 0;
    std::int64_t calls = 0;
  };

  static void install() {
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_begin_parallel_for_callback(&begin);
    tools::set_begin_parallel_reduce_callback(&begin);
    tools::set_begin_parallel_scan_callback(&begin);
    tools::set_end_parallel_for_callback(&end);
    tools::set_end_parallel_reduce_callback(&end);
    tools::set_end_parallel_scan_callback(&end);
    tools::set_push_region_callback(&push);
    tools::set_pop_region_callback(&pop);
  }
  static void reset() {
    state().kernels.clear();
    state().regions.clear();
  }
  // Prints the entries that take at least `min_fraction` of `total_seconds`, largest first.
  static void print(double total_seconds, double min_fraction = 0.01) {
    print_table("regions (layers)", state().regions, total_seconds, min_fraction);
    print_table("kernels", state().kernels, total_seconds, min_fraction);
  }

 private:
  using clock = std::chrono::steady_clock;
  struct State {
    std::map<std::string, Entry> kernels, regions;
    std::vector<std::pair<std::string, clock::time_point>> open_kernels, open_regions;
  };
  static State& state() {
    static State s;
    return s;
  }
  static void begin(const char* name, const std::uint32_t, std::uint64_t* id) {
    *id = state().open_kernels.size();
    state().open_kernels.emplace_back(name, clock::now());
  }
  static void end(const std::uint64_t) {
    auto& open = state().open_kernels;
    if (open.empty()) return;
    auto& e = state().kernels[open.back().first];
    e.seconds += std::chrono::duration<double>(clock::now() - open.back().second).count();
    ++e.calls;
    open.pop_back();
  }
  static void push(const char* name) { state().open_regions.emplace_back(name, clock::now()); }
  static void pop() {
    auto& open = state().open_regions;
    if (open.empty()) return;
    auto& e = state().regions[open.back().first];
    e.seconds += std::chrono::duration<double>(clock::now() - open.back().second).count();
    ++e.calls;
    open.pop_back();
  }
  static void print_table(const char* title, const std::map<std::string, Entry>& entries,
                          double total_seconds, double min_fraction) {
    std::vector<std::pair<std::string, Entry>> sorted(entries.begin(), entries.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::printf("  %s (share of %.3f ms):\n", title, total_seconds * 1e3);
    for (const auto& [name, e] : sorted) {
      if (e.seconds < min_fraction * total_seconds) break;
      std::printf("    %6.1f %%  %9.3f ms  %7lld calls  %s\n", 100 * e.seconds / total_seconds,
                  e.seconds * 1e3, static_cast<long long>(e.calls), name.c_str());
    }
  }
};

}  // namespace kformer::bench

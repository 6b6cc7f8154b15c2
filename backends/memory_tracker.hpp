// Accounting of Kokkos allocations (all memory spaces) through the Kokkos Tools allocate and
// deallocate callbacks: how many allocations and bytes so far, the bytes live now and their
// high-water mark. kformer-bench reports each case's peak_bytes from it, and the tests check that
// steady-state passes allocate nothing. Kokkos keeps one callback per event, so install() takes
// those two over. The callbacks run concurrently (Kokkos' OpenMP backend allocates per-thread
// scratch inside a parallel region): only atomics here.
#pragma once

#include <atomic>
#include <cstdint>

#include <Kokkos_Core.hpp>

namespace kformer::backends {

class MemoryTracker {
 public:
  // Registers the callbacks (after Kokkos::initialize).
  static void install() {
    Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(&on_deallocate);
  }
  static std::uint64_t allocations() { return state().allocations.load(); }
  static std::uint64_t allocated_bytes() { return state().allocated_bytes.load(); }
  static std::int64_t live() { return state().live.load(); }
  static std::int64_t peak() { return state().peak.load(); }
  // Starts a new high-water mark at what is live now.
  static void reset_peak() { state().peak.store(state().live.load()); }

 private:
  struct State {
    std::atomic<std::uint64_t> allocations{0}, allocated_bytes{0};
    std::atomic<std::int64_t> live{0}, peak{0};
  };
  static State& state() {
    static State s;
    return s;
  }
  static void on_allocate(const Kokkos_Profiling_SpaceHandle, const char*, const void*,
                          const std::uint64_t size) {
    State& s = state();
    ++s.allocations;
    s.allocated_bytes += size;
    const std::int64_t now = s.live += static_cast<std::int64_t>(size);
    std::int64_t peak = s.peak.load();
    while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
    }
  }
  static void on_deallocate(const Kokkos_Profiling_SpaceHandle, const char*, const void*,
                            const std::uint64_t size) {
    state().live -= static_cast<std::int64_t>(size);
  }
};

}  // namespace kformer::backends

// Live and peak bytes of Kokkos allocations (all memory spaces), from the Kokkos Tools
// allocate/deallocate callbacks: kformer-bench reports each case's peak_bytes, the high-water
// mark of what it allocated above what was live before it started. The callbacks run
// concurrently (Kokkos' OpenMP backend allocates per-thread scratch inside a parallel region):
// only atomics here.
#pragma once

#include <atomic>
#include <cstdint>

#include <Kokkos_Core.hpp>

namespace kformer::bench {

class MemoryTracker {
 public:
  static void install() {
    Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(&on_deallocate);
  }
  static std::int64_t live() { return live_ref().load(); }
  static std::int64_t peak() { return peak_ref().load(); }
  // Starts a new high-water mark at what is live now.
  static void reset_peak() { peak_ref().store(live_ref().load()); }

 private:
  static std::atomic<std::int64_t>& live_ref() {
    static std::atomic<std::int64_t> bytes{0};
    return bytes;
  }
  static std::atomic<std::int64_t>& peak_ref() {
    static std::atomic<std::int64_t> bytes{0};
    return bytes;
  }
  static void on_allocate(const Kokkos_Profiling_SpaceHandle, const char*, const void*,
                          const std::uint64_t size) {
    const std::int64_t now = live_ref() += static_cast<std::int64_t>(size);
    std::int64_t peak = peak_ref().load();
    while (now > peak && !peak_ref().compare_exchange_weak(peak, now)) {
    }
  }
  static void on_deallocate(const Kokkos_Profiling_SpaceHandle, const char*, const void*,
                            const std::uint64_t size) {
    live_ref() -= static_cast<std::int64_t>(size);
  }
};

}  // namespace kformer::bench

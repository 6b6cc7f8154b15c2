// Counts Kokkos allocations in a scope (backends::MemoryTracker, installed by the test runner), so
// that tests can check that a steady-state forward/backward allocates nothing.
#pragma once

#include <cstdint>

#include <kformer/backends/memory_tracker.hpp>

namespace kformer::testing {

class AllocationCounter {
 public:
  static void install() { backends::MemoryTracker::install(); }
  // Allocations (count and bytes) since construction.
  AllocationCounter()
      : start_count_(backends::MemoryTracker::allocations()),
        start_bytes_(backends::MemoryTracker::allocated_bytes()) {}
  std::uint64_t allocations() const {
    return backends::MemoryTracker::allocations() - start_count_;
  }
  std::uint64_t allocated_bytes() const {
    return backends::MemoryTracker::allocated_bytes() - start_bytes_;
  }

 private:
  std::uint64_t start_count_, start_bytes_;
};

}  // namespace kformer::testing

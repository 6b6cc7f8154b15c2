// Counts Kokkos allocations through the Kokkos Tools allocate-data callback, so that tests can
// check that a steady-state forward/backward allocates nothing.
#pragma once

#include <atomic>
#include <cstdint>

#include <Kokkos_Core.hpp>

namespace kformer::testing {

class AllocationCounter {
 public:
  // Registers the callback (once per process, after Kokkos::initialize).
  static void install() { Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate); }
  // Allocations (count and bytes) since construction.
  AllocationCounter() : start_count_(count()), start_bytes_(bytes()) {}
  std::uint64_t allocations() const { return count() - start_count_; }
  std::uint64_t allocated_bytes() const { return bytes() - start_bytes_; }

 private:
  static std::atomic<std::uint64_t>& count_ref() {
    static std::atomic<std::uint64_t> c{0};
    return c;
  }
  static std::atomic<std::uint64_t>& bytes_ref() {
    static std::atomic<std::uint64_t> b{0};
    return b;
  }
  static std::uint64_t count() { return count_ref().load(); }
  static std::uint64_t bytes() { return bytes_ref().load(); }
  // Called concurrently: Kokkos' OpenMP backend allocates each thread's team scratch from inside
  // a parallel region, so everything here must be atomic.
  static void on_allocate(const Kokkos_Profiling_SpaceHandle, const char*, const void*,
                          const std::uint64_t size) {
    ++count_ref();
    bytes_ref() += size;
  }

  std::uint64_t start_count_, start_bytes_;
};

}  // namespace kformer::testing

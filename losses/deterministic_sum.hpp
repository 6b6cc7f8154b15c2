// Sums of per-index terms delivered to the host, with the same bits on a backend for any number
// of threads: losses, metrics and the global gradient norm reduce through it.
//
//   [0, n) is cut into kBlocks contiguous blocks of ceil(n / kBlocks) indices; block b is read by
//   kLanes lanes, lane l taking indices begin_b + l, begin_b + l + kLanes, ... in order, and
//   accumulating in double into its slot (b, l). The host then adds the kBlocks * kLanes slot
//   sums in slot order.
//
// The structure depends only on n, never on the backend's thread count or team sizes, and there
// are no floating-point atomics. Lanes of a block read consecutive addresses, so a GPU's warps
// load coalesced; on a CPU each thread walks whole blocks, which stay in cache.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <Kokkos_Core.hpp>

#include "../backends/reduce.hpp"
#include "../core/profiling.hpp"
#include "../core/workspace.hpp"

namespace kformer {

template <class ExecutionSpace, int Terms = 1>
class DeterministicSum {
 public:
  static_assert(Terms >= 1, "DeterministicSum needs at least one term");
  using memory_space = typename ExecutionSpace::memory_space;
  static constexpr int kBlocks = backends::kReductionBlocks;
  static constexpr int kLanes = 32;
  static constexpr int kSlots = kBlocks * kLanes;

  // Returns { sum_i acc_i[q] } for q < Terms, where term(i, acc) adds index i's contributions to
  // acc[0 .. Terms) (a double*). term is called exactly once per index, so it may also write
  // per-index outputs (a gradient). Blocks until the sums are on the host.
  template <class Term>
  std::array<double, Terms> operator()(const ExecutionSpace& exec, const std::string& label,
                                       std::int64_t n, const Term& term) {
    const auto partial = partial_sums(exec, label, n, term);
    const double* slots = nullptr;
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, memory_space>::accessible) {
      exec.fence();
      slots = partial.data();
    } else {
      const auto host = host_partial_.view(kSlots, Terms);
      Kokkos::deep_copy(exec, host, partial);
      exec.fence();
      slots = host.data();
    }
    std::array<double, Terms> total{};
    for (int slot = 0; slot < kSlots; ++slot)
      for (int q = 0; q < Terms; ++q)
        total[q] += slots[slot * Terms + q];
    return total;
  }

  // The same sums, left on the device: finish(total) runs once, in a kernel on exec after the
  // sums, with total a double[Terms] holding the same bits as operator() returns (the slots are
  // added in the same order); it writes wherever the caller wants them (a loss in a View). Nothing
  // waits: the caller fences when it reads them.
  template <class Term, class Finish>
  void on_device(const ExecutionSpace& exec, const std::string& label, std::int64_t n,
                 const Term& term, const Finish& finish) {
    const auto partial = partial_sums(exec, label, n, term);
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::deterministic_sum::total"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) {
          double total[Terms] = {};
          for (int slot = 0; slot < kSlots; ++slot)
            for (int q = 0; q < Terms; ++q)
              total[q] += partial(slot, q);
          finish(total);
        });
  }

  // Each slot's partial sums, (kSlots, Terms), launched on exec and not waited for. (Public, and
  // its return type spelled out: CUDA's extended lambdas may not live in private member functions
  // nor in functions with a deduced return type.)
  using Partial = Kokkos::View<double**, Kokkos::LayoutRight, memory_space>;
  template <class Term>
  Partial partial_sums(const ExecutionSpace& exec, const std::string& label, std::int64_t n,
                       const Term& term) {
    auto partial = partial_.view(kSlots, Terms);
    const std::int64_t block_size = (n + kBlocks - 1) / kBlocks;
    const int lanes = kLanes;
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecutionSpace>(exec, 0, kSlots), KOKKOS_LAMBDA(const int slot) {
          const std::int64_t begin = (slot / lanes) * block_size;
          const std::int64_t end = begin + block_size < n ? begin + block_size : n;
          double acc[Terms] = {};
          for (std::int64_t i = begin + slot % lanes; i < end; i += lanes)
            term(i, acc);
          for (int q = 0; q < Terms; ++q)
            partial(slot, q) = acc[q];
        });
    return partial;
  }

 private:
  GrowingBuffer<double, memory_space> partial_{"kformer::DeterministicSum::partial"};
  GrowingBuffer<double, Kokkos::HostSpace> host_partial_{"kformer::DeterministicSum::host"};
};

}  // namespace kformer

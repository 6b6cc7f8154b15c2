// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// Element i of a draw is a pure function of (seed, i), so initialisation and dropout masks are
// bitwise identical on every backend and for every thread count or team size. (A Kokkos random
// pool hands out per-thread states, which makes the numbers depend on how work is scheduled.)
#pragma once

#include <cstdint>
#include <string_view>

#include <Kokkos_Core.hpp>

#include "profiling.hpp"
#include "tensor.hpp"

namespace kformer {

struct Philox4x32 {
  std::uint32_t key0, key1;

  KOKKOS_INLINE_FUNCTION explicit Philox4x32(std::uint64_t seed)
      : key0(static_cast<std::uint32_t>(seed)), key1(static_cast<std::uint32_t>(seed >> 32)) {}

  // Four independent 32-bit words for the 128-bit counter (c0, c1, c2, c3). The ten rounds are
  // written out (no loop), so that loops calling this vectorise across counters on CPUs.
  KOKKOS_INLINE_FUNCTION void operator()(std::uint32_t c[4]) const {
    constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    round(c, key0, key1);
    round(c, key0 + W0, key1 + W1);
    round(c, key0 + 2 * W0, key1 + 2 * W1);
    round(c, key0 + 3 * W0, key1 + 3 * W1);
    round(c, key0 + 4 * W0, key1 + 4 * W1);
    round(c, key0 + 5 * W0, key1 + 5 * W1);
    round(c, key0 + 6 * W0, key1 + 6 * W1);
    round(c, key0 + 7 * W0, key1 + 7 * W1);
    round(c, key0 + 8 * W0, key1 + 8 * W1);
    round(c, key0 + 9 * W0, key1 + 9 * W1);
  }

  KOKKOS_INLINE_FUNCTION static void round(std::uint32_t c[4], std::uint32_t k0, std::uint32_t k1) {
    constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    const std::uint64_t p0 = static_cast<std::uint64_t>(M0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(M1) * c[2];
    const std::uint32_t c1 = c[1], c3 = c[3];
    c[0] = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    c[1] = static_cast<std::uint32_t>(p1);
    c[2] = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c[3] = static_cast<std::uint32_t>(p0);
  }

  // Four words for the 128-bit counter (index, stream): element 4 index + w of a stream uses
  // word w, so one evaluation serves four elements.
  KOKKOS_INLINE_FUNCTION void words(std::uint64_t index, std::uint64_t stream,
                                    std::uint32_t out[4]) const {
    out[0] = static_cast<std::uint32_t>(index);
    out[1] = static_cast<std::uint32_t>(index >> 32);
    out[2] = static_cast<std::uint32_t>(stream);
    out[3] = static_cast<std::uint32_t>(stream >> 32);
    (*this)(out);
  }

  // The first word for element `index` of stream `stream`.
  KOKKOS_INLINE_FUNCTION std::uint32_t bits(std::uint64_t index, std::uint32_t stream = 0) const {
    std::uint32_t c[4] = {static_cast<std::uint32_t>(index),
                          static_cast<std::uint32_t>(index >> 32), stream, 0u};
    (*this)(c);
    return c[0];
  }
};

// Uniform in [0, 1) from the top 24 bits (exactly representable in float and double).
KOKKOS_INLINE_FUNCTION double uniform01(std::uint32_t bits) {
  return static_cast<double>(bits >> 8) * (1.0 / 16777216.0);
}

// A child seed for a named part (a parameter, a layer), so that one user seed drives many
// independent draws. FNV-1a over the name, mixed with the parent seed.
inline std::uint64_t derive_seed(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (char ch : name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

// v[i] = lo + (hi - lo) * u(seed, i) for every element of a contiguous View.
template <class ExecutionSpace, class ViewType>
void fill_uniform(const ExecutionSpace& exec, const ViewType& v, double lo, double hi,
                  std::uint64_t seed) {
  using T = typename ViewType::non_const_value_type;
  T* data = v.data();
  const Philox4x32 rng(seed);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::random::fill_uniform"),
      Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::int64_t>>(
          exec, 0, static_cast<std::int64_t>(v.span())),
      KOKKOS_LAMBDA(const std::int64_t i) {
        data[i] =
            static_cast<T>(lo + (hi - lo) * uniform01(rng.bits(static_cast<std::uint64_t>(i))));
      });
}

}  // namespace kformer

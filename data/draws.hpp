// Random draws for the generated datasets that give the same numbers with every standard library
// (std::shuffle and the standard distributions do not), and independent seeds per set and series.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace kformer::data {

// splitmix64 of (seed, stream): independent seeds for sets and series.
inline std::uint64_t derive(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Draws from the raw 64-bit output, the same on every standard library.
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : rng_(seed) {}
  // Uniform on [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(rng_() >> 11) / 9007199254740992.0; }  // 2^53
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal (Box-Muller, cosine branch).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [lo, hi].
  std::int64_t integer(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(uniform() * static_cast<double>(hi - lo + 1));
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace kformer::data

// Elementary functions that vectorise: branch-free polynomial forms for float results, so that
// loops over softmax scores, GELU activations and value encodings compile to SIMD code on CPUs
// (libm's expf/erff/sin/cos are scalar calls) and stay cheap on GPUs. Double precision uses the
// library functions unchanged.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "compat.hpp"

namespace kformer::math {

// a * b + c, fused (one rounding) where the target has an FMA instruction: GPUs, and CPUs compiled
// for one (-march=native on any x86 since 2013; every 64-bit ARM). Elsewhere two operations: libm's
// fmaf emulates the single rounding in software, far slower than the polynomials it would serve.
// The build turns off implicit contraction (see CMakeLists.txt), so these are the only fused
// operations and they are the same in every instantiation of a kernel.
KOKKOS_INLINE_FUNCTION float fma(const float a, const float b, const float c) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return ::fmaf(a, b, c);
#elif (defined(__FMA__) || defined(__ARM_FEATURE_FMA)) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
KOKKOS_INLINE_FUNCTION double fma(const double a, const double b, const double c) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return ::fma(a, b, c);
#elif (defined(__FMA__) || defined(__ARM_FEATURE_FMA)) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_fma(a, b, c);
#else
  return a * b + c;
#endif
}

// Whether math::fma rounds once in the code being compiled (each of CUDA's and HIP's passes asks
// for itself). Algorithms that need a product's exact rounding error, fma(a, b, -a * b), ask this.
KOKKOS_INLINE_FUNCTION constexpr bool has_fused_multiply_add() {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || \
    ((defined(__FMA__) || defined(__ARM_FEATURE_FMA)) &&         \
     (defined(__GNUC__) || defined(__clang__)))
  return true;
#else
  return false;
#endif
}

// e^x for float x <= 0 (correct up to 88; NaN gives NaN), as softmax weights (scores minus their
// row's maximum) and GELU's derivative (e^{-x^2/2}) need it: relative error below 2e-7 (about 1.5
// ulp) down to -87, ~1e-38 below (close enough to 0 for softmax weights).
//   x = k ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), e^r by a degree-6 Taylor/minimax
//   polynomial, 2^k assembled in the exponent bits.
// Only the lower end is clamped: GCC compiles a two-sided clamp into selects of precomputed
// results for the clamped lanes (about 20 more instructions per 8 floats), the lower clamp alone
// into two. On one core of the AVX2 development machine a softmax row's exponentials took
// 0.66-0.86 ns a score, against 0.86-1.08 with both clamps.
KOKKOS_INLINE_FUNCTION float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  // k = round(x / ln2): adding 1.5 * 2^23 rounds to an integer in the FPU's nearest mode (no call
  // to floor, which SSE2 cannot vectorise) and leaves k in the low bits of the sum's mantissa, read
  // from there rather than by a conversion, which would be undefined behaviour for a NaN x.
  constexpr float round_shift = 12582912.0f;
  constexpr std::uint32_t round_shift_bits = 0x4B400000u;
  const float shifted = x * 1.44269504088896341f + round_shift;
  const float k = shifted - round_shift;
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = fma(p, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  p = fma(p, r * r, r) + 1.0f;
  std::uint32_t k_bits;
  memcpy(&k_bits, &shifted, sizeof(k_bits));  // unqualified: HIP's device memcpy is not std::memcpy
  // Unsigned arithmetic: k + 127 is in [1, 254] for x in [-87, 88], and wraps harmlessly for NaN.
  const std::uint32_t bits = (k_bits - round_shift_bits + 127u) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
KOKKOS_INLINE_FUNCTION double exp_nonpositive(const double x) {
  return compat::math::exp(x);
}

// erf(x) for float, odd in x, with a relative error below 4e-7 (3.6e-7 measured on a 1e-5 grid
// over [-10, 10]): x P(x^2) / Q(x^2) with P and Q of degree 5, fitted on |x| <= 3.92 by
// tools/fit_erf.py; beyond that erf rounds to +-1 in float, so x is clamped there (a NaN stays
// NaN). Ten FMAs and a division: GELU took 0.76 ns per element on one core of the AVX2
// development machine, where a series below 0.6 and Abramowitz & Stegun 7.1.26 with an
// exponential above, both evaluated and one selected, took 1.45.
KOKKOS_INLINE_FUNCTION float erf(const float x) {
  const float c = x < -3.92f ? -3.92f : (x > 3.92f ? 3.92f : x);
  const float z = c * c;
  float p = 2.034582600e-06f;
  p = fma(p, z, 2.874759142e-04f);
  p = fma(p, z, 3.868534432e-03f);
  p = fma(p, z, 5.306109029e-02f);
  p = fma(p, z, 1.927699725e-01f);
  p = fma(p, z, 1.128379022e+00f);
  float q = 3.806888055e-05f;
  q = fma(q, z, 1.188150215e-03f);
  q = fma(q, z, 1.517271643e-02f);
  q = fma(q, z, 1.150869062e-01f);
  q = fma(q, z, 5.041696069e-01f);
  q = fma(q, z, 1.0f);
  const float r = c * p / q;
  return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);  // the rounding of P/Q can pass 1 near 3.92
}
KOKKOS_INLINE_FUNCTION double erf(double x) {
  return compat::math::erf(x);
}

// sin and cos of k pi/2 + r, |r| <= pi/4 (a little more is harmless), given r and k mod 4: Cephes'
// minimax polynomials for sinf and cosf (degrees 7 and 8) and the quadrant's swap and signs.
KOKKOS_INLINE_FUNCTION void sin_cos_reduced(const float r, const unsigned quadrant, float& sin_out,
                                            float& cos_out) {
  const float r2 = r * r;
  float sin_r = -1.9515295891e-4f;
  sin_r = fma(sin_r, r2, 8.3321608736e-3f);
  sin_r = fma(sin_r, r2, -1.6666654611e-1f);
  sin_r = fma(sin_r * r2, r, r);
  float cos_r = 2.443315711809948e-5f;
  cos_r = fma(cos_r, r2, -1.388731625493765e-3f);
  cos_r = fma(cos_r, r2, 4.166664568298827e-2f);
  cos_r = fma(cos_r * r2, r2, fma(-0.5f, r2, 1.0f));
  // quadrant 0: (sin r, cos r), 1: (cos r, -sin r), 2: (-sin r, -cos r), 3: (-cos r, sin r)
  // The signs go into the sign bits directly: fewer vector operations than selecting -s or s.
  const float s = (quadrant & 1u) ? cos_r : sin_r;
  const float c = (quadrant & 1u) ? sin_r : cos_r;
  std::uint32_t s_bits, c_bits;
  memcpy(&s_bits, &s, sizeof(s));
  memcpy(&c_bits, &c, sizeof(c));
  s_bits ^= (quadrant & 2u) << 30;
  c_bits ^= ((quadrant + 1u) & 2u) << 30;
  memcpy(&sin_out, &s_bits, sizeof(s_bits));
  memcpy(&cos_out, &c_bits, sizeof(c_bits));
}

// sin and cos of a double angle as floats, to an absolute error below 1e-7 for |angle| <=
// kSinCosLimit (8e-8 measured against long double, 2e6 random angles per decade of range), and
// branch-free so that loops over it vectorise (libm's sin and cos are scalar calls):
//   angle = k pi/2 + r, |r| <= pi/4, in double: k by rounding with the 1.5 * 2^52 shift (its low
//   mantissa bits are k mod 4 in two's complement), r by Cody-Waite with fdlibm's 33-bit part of
//   pi/2 and its remainder (k * part is exact for |k| < 2^20; beyond, its rounding adds up to
//   ~8e-9 at the limit);
//   sin r and cos r in float by Cephes' minimax polynomials for sinf and cosf (degrees 7 and 8);
//   the quadrant k mod 4 swaps and signs them.
inline constexpr double kSinCosLimit = 67108864.0;  // 2^26

KOKKOS_INLINE_FUNCTION void sin_cos(const double angle, float& sin_angle, float& cos_angle) {
  constexpr double round_shift = 6755399441055744.0;  // 1.5 * 2^52
  const double shifted = angle * 0.636619772367581343076 + round_shift;
  const double k = shifted - round_shift;
  std::uint64_t bits;
  memcpy(&bits, &shifted, sizeof(bits));
  const unsigned quadrant = static_cast<unsigned>(bits & 3u);
  const float r = static_cast<float>(
      fma(-k, 6.07710050650619224932e-11, fma(-k, 1.57079632673412561417e+00, angle)));
  sin_cos_reduced(r, quadrant, sin_angle, cos_angle);
}

// sin and cos of the product v w, w given as w_hi + w_lo (two floats: w_hi = float(w), w_lo =
// float(w - w_hi)), to an absolute error below 1.2e-7 for |v w_hi| <= kSinCosProductLimit (1.11e-7
// measured against long double, 4e6 random products per range), all in float: eight lanes per
// AVX2 vector where sin_cos above works on four doubles, 20 % faster per pair. The product is
// carried as p + t, p = v w_hi rounded and t = its exact rounding error fma(v, w_hi, -p) plus
// v w_lo; where math::fma does not round once (has_fused_multiply_add()), that error is not at
// hand and the product goes to sin_cos in double instead.
//   p = k pi/2 + r, |r| <= pi/4 (plus t): k by rounding with the 1.5 * 2^23 shift (its low mantissa
//   bits are k mod 4), r by Cody-Waite with three float parts of pi/2 (the first has 8 bits, so
//   p - k part_1 is exact for |k| < 2^17), then sin r and cos r as in sin_cos.
inline constexpr float kSinCosProductLimit = 131072.0f;  // 2^17

// v (w_hi + w_lo) as p + t: p = v w_hi rounded, t = its exact rounding error plus v w_lo. Only
// where has_fused_multiply_add().
struct SplitProduct {
  float p, t;
};
KOKKOS_INLINE_FUNCTION SplitProduct split_product(const float v, const float w_hi,
                                                  const float w_lo) {
  const float p = v * w_hi;
  return {p, fma(v, w_lo, fma(v, w_hi, -p))};
}

KOKKOS_INLINE_FUNCTION void sin_cos_product(const float v, const float w_hi, const float w_lo,
                                            float& sin_product, float& cos_product) {
  if (!has_fused_multiply_add())
    return sin_cos(double(v) * (double(w_hi) + double(w_lo)), sin_product, cos_product);
  const SplitProduct product = split_product(v, w_hi, w_lo);
  constexpr float round_shift = 12582912.0f;  // 1.5 * 2^23
  const float shifted = fma(product.p, 0.636619772367581343f, round_shift);
  const float k = shifted - round_shift;
  std::uint32_t bits;
  memcpy(&bits, &shifted, sizeof(bits));
  const unsigned quadrant = bits & 3u;
  float r = fma(-k, 1.5703125f, product.p);
  r = fma(-k, 4.83751296997070312e-4f, r);
  r = fma(-k, 7.54978995489188216e-8f, r) + product.t;
  sin_cos_reduced(r, quadrant, sin_product, cos_product);
}

// sin_cos_product for |v w_hi| <= kSinCosSmallProductLimit, below pi/4: no reduction (k = 0), so
// the same bits as sin_cos_product for these products at half its cost.
inline constexpr float kSinCosSmallProductLimit = 0.78f;

KOKKOS_INLINE_FUNCTION void sin_cos_small_product(const float v, const float w_hi, const float w_lo,
                                                  float& sin_product, float& cos_product) {
  if (!has_fused_multiply_add())
    return sin_cos(double(v) * (double(w_hi) + double(w_lo)), sin_product, cos_product);
  const SplitProduct product = split_product(v, w_hi, w_lo);
  sin_cos_reduced(product.p + product.t, 0u, sin_product, cos_product);
}

}  // namespace kformer::math

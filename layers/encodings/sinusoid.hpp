// The sinusoid of Vaswani et al. shared by the fixed positional encoding and the value encoding.
//
// For a value v (a position, an m/z, an intensity, a time stamp) and dim columns there are
// n_freq = ceil(dim/2) frequencies w_0 > w_1 > ...; frequency i contributes sin(v w_i) and, when
// i < n_cos = floor(dim/2), cos(v w_i). With odd dim the last column is a sine.
//
//   Interleaved (PyTorch tutorials, TST, GeometricMachineLearning): column 2i = sin, 2i+1 = cos.
//   SplitHalves (depthcharge-style): columns [0, n_cos) sines, [n_cos, 2 n_cos) cosines, and for
//                odd dim column 2 n_cos = the last sine.
//
// Frequencies:
//   base mode (default)   w_i = base^(-2i/dim) = exp(-2i ln(base) / dim)      (base 10000)
//   wavelength mode       w_i = 2 pi / lambda_i, lambda_i geometric from min to max wavelength
#pragma once

#include <cmath>
#include <string>

#include <Kokkos_Core.hpp>

#include "../../core/compat.hpp"
#include "../../core/error.hpp"

namespace kformer {

enum class SinusoidLayout { Interleaved, SplitHalves };

struct SinusoidOptions {
  SinusoidLayout layout = SinusoidLayout::Interleaved;
  double base = 10000.0;
  // Both > 0 selects wavelength mode: lambda_i = min * (max/min)^(i / (n_freq - 1)).
  double min_wavelength = 0.0;
  double max_wavelength = 0.0;
};

// Column placement and frequencies for one (dim, options) pair; cheap to copy into kernels.
struct Sinusoid {
  int dim = 0;
  int n_freq = 0;  // number of sines, ceil(dim / 2)
  int n_cos = 0;   // number of cosines, floor(dim / 2)
  bool interleaved = true;
  bool wavelength_mode = false;
  double log_base = 0.0;        // base mode
  double log_min_lambda = 0.0;  // wavelength mode
  double log_lambda_ratio = 0.0;

  Sinusoid() = default;
  Sinusoid(const std::string& where, int dim_, const SinusoidOptions& opt) {
    if (dim_ < 1) fail(where, "dim must be at least 1, got ", dim_);
    dim = dim_;
    n_freq = (dim + 1) / 2;
    n_cos = dim / 2;
    interleaved = opt.layout == SinusoidLayout::Interleaved;
    wavelength_mode = opt.min_wavelength > 0.0 || opt.max_wavelength > 0.0;
    if (wavelength_mode) {
      if (!(opt.min_wavelength > 0.0) || !(opt.max_wavelength >= opt.min_wavelength) ||
          !std::isfinite(opt.max_wavelength))
        fail(where,
             "wavelength range must satisfy 0 < min_wavelength <= max_wavelength < inf, got [",
             opt.min_wavelength, ", ", opt.max_wavelength, "]");
      log_min_lambda = std::log(opt.min_wavelength);
      log_lambda_ratio = std::log(opt.max_wavelength / opt.min_wavelength);
    } else {
      if (!(opt.base > 1.0) || !std::isfinite(opt.base))
        fail(where, "base must be a finite number > 1, got ", opt.base);
      log_base = std::log(opt.base);
    }
  }

  KOKKOS_INLINE_FUNCTION double frequency(int i) const {
    if (wavelength_mode) {
      const double t = n_freq > 1 ? static_cast<double>(i) / (n_freq - 1) : 0.0;
      constexpr double two_pi = 6.283185307179586476925286766559;
      return two_pi * compat::math::exp(-(log_min_lambda + t * log_lambda_ratio));
    }
    return compat::math::exp(-(2.0 * i) * log_base / dim);
  }
  KOKKOS_INLINE_FUNCTION int sin_column(int i) const {
    return interleaved ? 2 * i : (i < n_cos ? i : 2 * n_cos);
  }
  // Valid for i < n_cos.
  KOKKOS_INLINE_FUNCTION int cos_column(int i) const { return interleaved ? 2 * i + 1 : n_cos + i; }
};

// Frequencies [f_begin, f_end) of a row of dim values in the layout of s, with
// sin_cos_of(i, sin, cos) giving frequency i's pair (called once per i, in increasing order). The
// layout is fixed inside each loop, so that the loops vectorise on CPUs.
template <class T, class SinCos>
KOKKOS_INLINE_FUNCTION void write_sinusoid_frequencies(const Sinusoid& s, T* const row,
                                                       const int f_begin, const int f_end,
                                                       const SinCos& sin_cos_of) {
  T sin_v, cos_v;
  const int cos_end = f_end < s.n_cos ? f_end : s.n_cos;
  if (s.interleaved) {
    for (int i = f_begin; i < cos_end; ++i) {
      sin_cos_of(i, sin_v, cos_v);
      row[2 * i] = sin_v;
      row[2 * i + 1] = cos_v;
    }
  } else {
    for (int i = f_begin; i < cos_end; ++i) {
      sin_cos_of(i, sin_v, cos_v);
      row[i] = sin_v;
      row[s.n_cos + i] = cos_v;
    }
  }
  if (s.n_cos < f_end) {  // an odd dim's last column: the sine of frequency n_cos
    sin_cos_of(s.n_cos, sin_v, cos_v);
    row[s.dim - 1] = sin_v;
  }
}

// The columns that frequencies [f_begin, f_end) fill: at most two runs [begin[r], end[r]).
struct SinusoidColumnRuns {
  int count = 0;
  int begin[2] = {0, 0};
  int end[2] = {0, 0};
};
KOKKOS_INLINE_FUNCTION SinusoidColumnRuns sinusoid_column_runs(const Sinusoid& s, const int f_begin,
                                                               const int f_end) {
  SinusoidColumnRuns runs;
  // An odd dim's last sine (column dim - 1) follows the last cosine in both layouts.
  const int last = f_end == s.n_freq ? s.dim : -1;
  if (s.interleaved) {
    runs.count = 1;
    runs.begin[0] = 2 * f_begin;
    runs.end[0] = last >= 0 ? last : 2 * f_end;
  } else {
    const int cos_end = f_end < s.n_cos ? f_end : s.n_cos;
    runs.count = 2;
    runs.begin[0] = f_begin < s.n_cos ? f_begin : s.n_cos;
    runs.end[0] = cos_end;
    runs.begin[1] = s.n_cos + runs.begin[0];
    runs.end[1] = last >= 0 ? last : s.n_cos + cos_end;
  }
  return runs;
}

}  // namespace kformer

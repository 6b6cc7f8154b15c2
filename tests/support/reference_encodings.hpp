// Double-precision host reference for the sinusoidal encodings, written from the formulas and
// independently of the kernels (direct sin/cos of each angle, pow instead of exp/log, no
// recurrences, no shared helpers).
#pragma once

#include <cmath>
#include <vector>

namespace kformer::testing {

// PE[p, j] for position p of a dim-column encoding.
//   interleaved: column 2i = sin(p w_i), 2i+1 = cos(p w_i)
//   split:       columns [0, h) sines, [h, 2h) cosines, column 2h (odd dim) the sine of w_h,
//                h = floor(dim / 2)
// w_i = base^(-2i/dim) unless a wavelength range is given (lambda_i geometric, w = 2 pi / lambda).
struct ReferenceSinusoid {
  int dim;
  bool interleaved = true;
  double base = 10000.0;
  double min_wavelength = 0.0, max_wavelength = 0.0;

  double frequency(int i) const {
    if (min_wavelength > 0) {
      const int n_freq = (dim + 1) / 2;
      const double t = n_freq > 1 ? double(i) / (n_freq - 1) : 0.0;
      const double lambda = min_wavelength * std::pow(max_wavelength / min_wavelength, t);
      return 2.0 * M_PI / lambda;
    }
    return std::pow(base, -2.0 * i / dim);
  }

  double operator()(double value, int j) const {
    if (interleaved) {
      const int i = j / 2;
      return j % 2 == 0 ? std::sin(value * frequency(i)) : std::cos(value * frequency(i));
    }
    const int h = dim / 2;
    if (j < h) return std::sin(value * frequency(j));
    if (j < 2 * h) return std::cos(value * frequency(j - h));
    return std::sin(value * frequency(h));
  }

  // The (seq, dim) matrix, row-major, for positions first, first+1, ...
  std::vector<double> matrix(long seq, long first = 0) const {
    std::vector<double> m(static_cast<std::size_t>(seq) * dim);
    for (long p = 0; p < seq; ++p)
      for (int j = 0; j < dim; ++j)
        m[p * dim + j] = (*this)(double(p + first), j);
    return m;
  }
};

}  // namespace kformer::testing

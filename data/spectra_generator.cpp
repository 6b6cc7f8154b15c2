#include "spectra_generator.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "../core/error.hpp"

namespace kformer::data {

std::vector<Spectrum> generate_spectra(const GeneratedSpectraOptions& o) {
  const char* where = "kformer::data::generate_spectra";
  if (o.spectra < 1) fail(where, "spectra must be at least 1, got ", o.spectra);
  if (o.bits < 2 || o.bits > 4096) fail(where, "bits must be in [2, 4096], got ", o.bits);
  if (o.fragments_per_bit < 1 || o.fragments_per_bit > 64)
    fail(where, "fragments_per_bit must be in [1, 64], got ", o.fragments_per_bit);
  if (!(o.bit_probability > 0 && o.bit_probability <= 1))
    fail(where, "bit_probability must be in (0, 1], got ", o.bit_probability);
  if (!(o.missing >= 0 && o.missing < 1)) fail(where, "missing must be in [0, 1), got ", o.missing);
  if (!(o.ppm >= 0 && o.ppm <= 1e5)) fail(where, "ppm must be in [0, 1e5], got ", o.ppm);
  if (!(o.jitter >= 0 && o.jitter < 1)) fail(where, "jitter must be in [0, 1), got ", o.jitter);
  if (!(o.noise_peaks >= 0 && o.noise_peaks <= 1000))
    fail(where, "noise_peaks must be in [0, 1000], got ", o.noise_peaks);
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * unit(rng); };
  // the library
  std::vector<std::vector<double>> fragment_mz(o.bits), fragment_intensity(o.bits);
  std::vector<double> mass(o.bits);
  for (int j = 0; j < o.bits; ++j) {
    for (int f = 0; f < o.fragments_per_bit; ++f) {
      fragment_mz[j].push_back(std::round(uniform(50, 500) * 1e4) / 1e4);
      fragment_intensity[j].push_back(uniform(0.2, 1.0));
    }
    mass[j] = uniform(20, 80);
  }
  std::normal_distribution<double> mz_error(0.0, o.ppm * 1e-6);
  std::poisson_distribution<int> noise_count(o.noise_peaks);
  std::vector<Spectrum> spectra(o.spectra);
  for (int i = 0; i < o.spectra; ++i) {
    Spectrum& s = spectra[i];
    std::vector<std::uint8_t> bits(o.bits, 0);
    int set = 0;
    while (set == 0)
      for (int j = 0; j < o.bits; ++j)
        set += bits[j] = unit(rng) < o.bit_probability ? 1 : 0;
    char title[32];
    std::snprintf(title, sizeof title, "generated_%05d", i + 1);
    s.title = title;
    s.precursor_mz = 100;
    std::string fingerprint;
    for (int j = 0; j < o.bits; ++j) {
      fingerprint += bits[j] ? '1' : '0';
      if (!bits[j]) continue;
      s.precursor_mz += mass[j];
      for (int f = 0; f < o.fragments_per_bit; ++f) {
        if (unit(rng) < o.missing) continue;
        s.mz.push_back(fragment_mz[j][f] * (1 + mz_error(rng)));
        s.intensity.push_back(fragment_intensity[j][f] * uniform(1 - o.jitter, 1 + o.jitter));
      }
    }
    const int noise = noise_count(rng);
    for (int k = 0; k < noise || s.mz.empty(); ++k) {
      s.mz.push_back(uniform(50, 500));
      s.intensity.push_back(uniform(0.01, 0.15));
    }
    s.metadata.emplace_back("fingerprint", fingerprint);
    s.metadata.emplace_back("class", std::to_string(bits[0] + 2 * bits[1]));
  }
  return spectra;
}

namespace {

const std::string* metadata(const Spectrum& s, const char* key) {
  for (const auto& [k, v] : s.metadata)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

std::vector<std::uint8_t> fingerprint_of(const Spectrum& s, int bits, std::size_t index) {
  const char* where = "kformer::data::fingerprint_of";
  const std::string* text = metadata(s, "fingerprint");
  if (text == nullptr)
    fail(where, "spectrum ", index + 1, " '", s.title,
         "' has no 'Fingerprint' field (a string of 0 and 1)");
  if (text->size() != std::size_t(bits))
    fail(where, "spectrum ", index + 1, " '", s.title, "': its fingerprint has ", text->size(),
         " bits, expected ", bits);
  std::vector<std::uint8_t> out(bits);
  for (int j = 0; j < bits; ++j) {
    const char c = (*text)[j];
    if (c != '0' && c != '1')
      fail(where, "spectrum ", index + 1, " '", s.title, "': fingerprint character ", j + 1,
           " is '", std::string(1, c), "', expected 0 or 1");
    out[j] = c == '1';
  }
  return out;
}

int class_of(const Spectrum& s, int classes, std::size_t index) {
  const char* where = "kformer::data::class_of";
  const std::string* text = metadata(s, "class");
  if (text == nullptr) fail(where, "spectrum ", index + 1, " '", s.title, "' has no 'Class' field");
  char* end = nullptr;
  const long value = std::strtol(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || value < 0 || value >= classes)
    fail(where, "spectrum ", index + 1, " '", s.title, "': class '", *text,
         "' is not a whole number in [0, ", classes, ")");
  return static_cast<int>(value);
}

}  // namespace kformer::data

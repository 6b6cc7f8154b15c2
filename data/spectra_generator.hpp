// Synthetic MS/MS spectra with known molecular fingerprints, for training and testing spectrum
// models where no licensed library is at hand. The data are SYNTHETIC: a toy model of
// fragmentation, not chemistry.
//
// The model (all draws from `seed`):
//   - a "library" of `bits` substructures: substructure j has `fragments_per_bit` fragment m/z
//     values, uniform in [50, 500] Da, each with a base intensity uniform in [0.2, 1], and a mass
//     uniform in [20, 80] Da;
//   - a molecule is a fingerprint: each bit set with probability `bit_probability` (at least one);
//     its precursor m/z is 100 + the masses of its set bits;
//   - its spectrum: every fragment of every set bit, each missing with probability `missing`, its
//     m/z off by a normal error of `ppm` parts per million, its intensity the base intensity times
//     a uniform factor in [1 - jitter, 1 + jitter]; plus noise peaks (a Poisson number with mean
//     `noise_peaks`, m/z uniform in [50, 500], intensity uniform in [0.01, 0.15]);
//   - its class (for the classification task): bit 0 + 2 × bit 1, so 4 classes.
// What a model can learn: which fragment m/z belong to which bit (the same m/z within the ppm
// error in every spectrum that has the bit), that noise peaks are weaker than fragments, and the
// class from the presence of bits 0 and 1. The peaks' order (by m/z) carries nothing more.
// The fingerprint and class are written as metadata ("Fingerprint: 0110...", "Class: 2").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spectra_format.hpp"

namespace kformer::data {

struct GeneratedSpectraOptions {
  int spectra = 3000;
  int bits = 32;
  int fragments_per_bit = 2;
  double bit_probability = 0.25;
  double missing = 0.1;
  double ppm = 10.0;
  double jitter = 0.3;
  double noise_peaks = 6.0;
  std::uint64_t seed = 0;
};

// The spectra, titled "generated_<index>", with their fingerprints and classes as metadata.
std::vector<Spectrum> generate_spectra(const GeneratedSpectraOptions& options);

// A spectrum's fingerprint from its "fingerprint" metadata (a string of 0 and 1), checked to have
// `bits` bits; throws kformer::Error naming the spectrum otherwise.
std::vector<std::uint8_t> fingerprint_of(const Spectrum& spectrum, int bits, std::size_t index);
// Its class from its "class" metadata (a whole number in [0, classes)).
int class_of(const Spectrum& spectrum, int classes, std::size_t index);

}  // namespace kformer::data

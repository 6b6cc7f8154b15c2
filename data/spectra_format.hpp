// MS/MS spectra from the two text formats they come in, and the preprocessing that turns a
// spectrum's peaks into a transformer's tokens (IDSL_MINT's peaks as tokens).
//
// NIST MSP (what IDSL_MINT reads):
//
//   Name: caffeine
//   PrecursorMZ: 195.0877
//   Formula: C8H10N4O2                 <- any other "Key: value" line: metadata
//   Num Peaks: 3
//   110.0713 12.5
//   138.0662	100; 195.0877 45.1 "an annotation"
//                                       <- a blank line (or the next Name:) ends the spectrum
//
// Keys are case-insensitive ("NAME:", "precursor_mz:" and "PrecursorMZ:" alike; "Num Peaks",
// "NumPeaks" and "num_peaks" too). After "Num Peaks: N" come exactly N (m/z, intensity) pairs,
// one or more per line, their numbers separated by blanks, tabs, ';', ':' or ','; a quoted
// annotation after a pair is skipped. A line of comments starts with '#'.
//
// Mascot MGF:
//
//   BEGIN IONS
//   TITLE=caffeine
//   PEPMASS=195.0877 1200000           <- the precursor m/z, and optionally its intensity
//   CHARGE=1+
//   110.0713 12.5                      <- m/z intensity [charge]
//   END IONS
//
// Other KEY=value lines inside a block are metadata; lines outside blocks (global parameters)
// and comment lines ('#', ';', '!', '/') are skipped. kformer needs every peak's intensity (MGF
// allows a bare m/z): a peak line without one is an error.
//
// Both: a UTF-8 byte order mark and Windows line ends are read; every m/z must be positive and
// finite, every intensity finite and non-negative; a spectrum without peaks, or with more than
// max_peaks, is an error. Every problem is a kformer::Error
//   "kformer::data::read_msp: <file>:<line>:<column>: spectrum <index> '<title>': <what>"
// (the spectrum's index counts from 1), raised before anything is returned.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kformer::data {

struct Spectrum {
  std::string title;                                                      // MSP Name, MGF TITLE
  double precursor_mz = std::numeric_limits<double>::quiet_NaN();         // NaN when not given
  double precursor_intensity = std::numeric_limits<double>::quiet_NaN();  // MGF PEPMASS's second
  std::string charge;                                                     // MGF CHARGE, as written
  std::vector<std::pair<std::string, std::string>> metadata;  // other fields: lower-case key, value
  std::vector<double> mz, intensity;                          // the peaks, in file order
};

struct SpectraReadOptions {
  std::int64_t max_peaks = 100000;  // a spectrum with more is refused (a 10⁶-peak one, say)
};

std::vector<Spectrum> read_msp(const std::string& path, const SpectraReadOptions& options = {});
std::vector<Spectrum> parse_msp(std::string_view text, const std::string& source,
                                const SpectraReadOptions& options = {});
std::vector<Spectrum> read_mgf(const std::string& path, const SpectraReadOptions& options = {});
std::vector<Spectrum> parse_mgf(std::string_view text, const std::string& source,
                                const SpectraReadOptions& options = {});

// The text of spectra in each format (numbers with the fewest digits that read back the same);
// metadata keys and values must be one line each. Throws kformer::Error for what the format
// cannot hold (a line break in a title or value, a spectrum without peaks).
std::string format_msp(const std::vector<Spectrum>& spectra);
std::string format_mgf(const std::vector<Spectrum>& spectra);

// How a spectrum's peaks become tokens, each step optional (spectra models' usual preprocessing):
struct SpectrumPreprocessing {
  bool normalize = true;                // intensities relative to the base (largest) peak
  double min_relative_intensity = 0.0;  // drop peaks below this fraction of the base peak
  double merge_tolerance = 0.0;         // merge peaks within this m/z distance (Da): the merged
                                        // peak's m/z is intensity-weighted, intensities add
  int top_k = 0;                        // keep the k most intense peaks (0: all)
  bool precursor_token = false;         // the precursor (m/z, intensity 2 after normalising) as
                                        // the first token, when the spectrum has one
};

// Tokens of one spectrum: (m/z, intensity) pairs ordered by m/z (the precursor first when asked).
struct SpectrumTokens {
  std::vector<double> mz, intensity;
};
SpectrumTokens preprocess(const Spectrum& spectrum, const SpectrumPreprocessing& options);

}  // namespace kformer::data

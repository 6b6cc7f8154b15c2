// Fuzz target: the MSP and MGF readers (data/spectra_format.cpp) on arbitrary text; the first byte
// chooses the format (even: MSP, odd: MGF). Bad input must be refused with a kformer::Error; the
// spectra of a file that parses must be whole (peaks positive and finite, as many intensities as
// m/z) and, when the writer can write them, read back from its text unchanged.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/data/spectra_format.hpp>

#include "fuzz_support.hpp"

namespace {

using kformer::data::Spectrum;

constexpr const char* target = "fuzz_spectra";

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool same(const std::vector<Spectrum>& a, const std::vector<Spectrum>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].title != b[i].title || a[i].mz != b[i].mz || a[i].intensity != b[i].intensity ||
        !same_bits(a[i].precursor_mz, b[i].precursor_mz) || a[i].metadata != b[i].metadata)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool msp = data[0] % 2 == 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto parse = [&](std::string_view t, const char* source) {
    return msp ? kformer::data::parse_msp(t, source) : kformer::data::parse_mgf(t, source);
  };
  std::vector<Spectrum> spectra;
  try {
    spectra = parse(text, "fuzz");
  } catch (const kformer::Error&) {
    return 0;
  }
  for (const Spectrum& s : spectra) {
    if (s.mz.empty() || s.mz.size() != s.intensity.size())
      kformer::fuzz::finding(target, "a spectrum without peaks, or with other counts of m/z and "
                                     "intensities, was read");
    for (std::size_t k = 0; k < s.mz.size(); ++k)
      if (!(s.mz[k] > 0) || !std::isfinite(s.mz[k]) || !(s.intensity[k] >= 0) ||
          !std::isfinite(s.intensity[k]))
        kformer::fuzz::finding(target, "a peak outside the documented ranges was read");
  }
  std::string written;
  try {
    written = msp ? kformer::data::format_msp(spectra) : kformer::data::format_mgf(spectra);
  } catch (const kformer::Error&) {
    return 0;
  }
  std::vector<Spectrum> again;
  try {
    again = parse(written, "written");
  } catch (const kformer::Error& e) {
    kformer::fuzz::finding(target,
                           std::string("the writer wrote what the reader refuses: ") + e.what() +
                               "\n" + written);
  }
  if (!same(spectra, again))
    kformer::fuzz::finding(target, "writing then reading changed the spectra:\n" + written);
  return 0;
}

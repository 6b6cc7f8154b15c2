#include "spectra_format.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "../core/error.hpp"
#include "../core/file_io.hpp"
#include "text_parsing.hpp"

namespace kformer::data {
namespace {

using detail::equals_ignoring_case;
using detail::fail_at;
using detail::for_each_line;
using detail::parse_number;
using detail::trim;

// A key as compared: lower case, without blanks, '_' and '-' ("Num Peaks" = "num_peaks").
std::string normal_key(std::string_view key) {
  std::string out;
  for (const char c : key)
    if (c != ' ' && c != '\t' && c != '_' && c != '-')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_peak(std::string_view line) {
  const char c = line.front();
  return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+';
}

// The reader's position and the spectrum being read, for messages.
class Reader {
 public:
  Reader(const char* where, const std::string& source, const SpectraReadOptions& options)
      : where_(where), source_(source), options_(options) {}

  template <class... Parts>
  [[noreturn]] void fail_here(std::int64_t line, std::string_view at, std::string_view text,
                              const Parts&... parts) const {
    const std::int64_t column = static_cast<std::int64_t>(at.data() - text.data()) + 1;
    if (open_)
      fail_at(where_, source_, line, column, "spectrum ", spectra_.size() + 1, " '", current_.title,
              "': ", parts...);
    fail_at(where_, source_, line, column, parts...);
  }

  void open(std::int64_t line) {
    open_ = true;
    current_ = Spectrum();
    first_line_ = line;
  }
  bool is_open() const { return open_; }
  Spectrum& current() { return current_; }

  // Adds one peak, checking its values.
  void add_peak(std::int64_t line, std::string_view text, std::string_view mz_token,
                std::string_view intensity_token) {
    double mz = 0, intensity = 0;
    if (!parse_number(mz_token, mz) || !(mz > 0))
      fail_here(line, mz_token, text, "a peak's m/z must be a positive number, got '", mz_token,
                "'");
    if (!parse_number(intensity_token, intensity) || !(intensity >= 0))
      fail_here(line, intensity_token, text,
                "a peak's intensity must be a non-negative number, got '", intensity_token, "'");
    if (std::int64_t(current_.mz.size()) >= options_.max_peaks)
      fail_here(line, mz_token, text, "more than ", options_.max_peaks,
                " peaks (SpectraReadOptions::max_peaks)");
    current_.mz.push_back(mz);
    current_.intensity.push_back(intensity);
  }

  void set_precursor(std::int64_t line, std::string_view text, std::string_view value) {
    double mz = 0;
    if (!parse_number(value, mz) || !(mz > 0))
      fail_here(line, value, text, "the precursor m/z must be a positive number, got '", value,
                "'");
    current_.precursor_mz = mz;
  }

  // Closes the spectrum; `line` and `text` locate the line that closed it.
  void close(std::int64_t line, std::string_view text) {
    if (current_.mz.empty())
      fail_here(line, text, text, "has no peaks (it starts on line ", first_line_, ")");
    spectra_.push_back(std::move(current_));
    open_ = false;
  }

  std::vector<Spectrum> take() { return std::move(spectra_); }

 private:
  const char* where_;
  const std::string& source_;
  SpectraReadOptions options_;
  std::vector<Spectrum> spectra_;
  Spectrum current_;
  bool open_ = false;
  std::int64_t first_line_ = 0;
};

void check_options(const char* where, const SpectraReadOptions& options) {
  if (options.max_peaks < 1) fail(where, "max_peaks must be at least 1, got ", options.max_peaks);
}

}  // namespace

std::vector<Spectrum> parse_msp(std::string_view text, const std::string& source,
                                const SpectraReadOptions& options) {
  const char* where = "kformer::data::read_msp";
  check_options(where, options);
  Reader reader(where, source, options);
  // remaining: peaks still to read after "Num Peaks: N" (-1 before it); pending: a number read
  // without its partner at the end of a line (pairs may not span lines).
  std::int64_t remaining = -1, declared = 0, last_line = 0;
  std::string_view last_text;
  for_each_line(text, [&](std::int64_t line, std::string_view raw) {
    last_line = line;
    last_text = raw;
    const std::string_view content = trim(raw);
    if (content.empty()) {
      if (!reader.is_open()) return;
      if (remaining > 0)
        reader.fail_here(line, raw, raw, "'Num Peaks: ", declared, "' but ", declared - remaining,
                         " peaks before the blank line");
      if (remaining < 0) reader.fail_here(line, raw, raw, "ends before its 'Num Peaks:' line");
      reader.close(line, raw);
      remaining = -1;
      return;
    }
    if (content.front() == '#') return;
    if (starts_peak(content)) {
      if (!reader.is_open()) reader.fail_here(line, content, raw, "a peak line before any 'Name:'");
      if (remaining < 0)
        reader.fail_here(line, content, raw, "a peak line before the 'Num Peaks:' line");
      // Tokens: numbers separated by blanks, tabs, ';', ':' or ','; "quoted annotations" skipped.
      std::vector<std::string_view> numbers;
      std::size_t i = 0;
      while (i < content.size()) {
        const char c = content[i];
        if (c == ' ' || c == '\t' || c == ';' || c == ':' || c == ',') {
          ++i;
        } else if (c == '"') {
          const std::size_t end = content.find('"', i + 1);
          if (end == std::string_view::npos)
            reader.fail_here(line, content.substr(i), raw,
                             "an annotation's closing quote is missing");
          i = end + 1;
        } else {
          std::size_t end = i;
          while (end < content.size() &&
                 std::string_view(" \t;:,\"").find(content[end]) == std::string_view::npos)
            ++end;
          numbers.push_back(content.substr(i, end - i));
          i = end;
        }
      }
      if (numbers.size() % 2 != 0)
        reader.fail_here(line, numbers.back(), raw, "the peak m/z '", numbers.back(),
                         "' has no intensity after it on its line");
      for (std::size_t k = 0; k < numbers.size(); k += 2) {
        if (remaining == 0)
          reader.fail_here(line, numbers[k], raw, "more peaks than its 'Num Peaks: ", declared,
                           "'");
        reader.add_peak(line, raw, numbers[k], numbers[k + 1]);
        --remaining;
      }
      return;
    }
    const std::size_t colon = content.find(':');
    if (colon == std::string_view::npos)
      reader.fail_here(line, content, raw, "expected 'Key: value' or a peak line, got '", content,
                       "'");
    const std::string key = normal_key(content.substr(0, colon));
    const std::string_view value = trim(content.substr(colon + 1));
    if (key == "name") {
      if (reader.is_open()) {
        if (remaining > 0)
          reader.fail_here(line, content, raw, "'Num Peaks: ", declared, "' but ",
                           declared - remaining, " peaks before the next 'Name:'");
        if (remaining < 0)
          reader.fail_here(line, content, raw, "a new 'Name:' before this one's 'Num Peaks:'");
        reader.close(line, raw);
      }
      reader.open(line);
      reader.current().title = std::string(value);
      remaining = -1;
      return;
    }
    if (!reader.is_open()) reader.open(line);  // a record whose first field is not its name
    if (remaining >= 0)
      reader.fail_here(line, content, raw,
                       "a 'Key: value' line after its peaks (a blank line "
                       "or 'Name:' starts the next spectrum)");
    if (key == "numpeaks") {
      double n = 0;
      if (!parse_number(value, n) || n != std::floor(n) || n < 0)
        reader.fail_here(line, value, raw, "'Num Peaks:' must be a whole number, got '", value,
                         "'");
      if (n == 0) reader.fail_here(line, value, raw, "has no peaks ('Num Peaks: 0')");
      if (n > double(options.max_peaks))
        reader.fail_here(line, value, raw, "'Num Peaks: ", value, "' is more than ",
                         options.max_peaks, " peaks (SpectraReadOptions::max_peaks)");
      declared = remaining = static_cast<std::int64_t>(n);
    } else if (key == "precursormz") {
      reader.set_precursor(line, raw, value);
    } else {
      reader.current().metadata.emplace_back(lower(trim(content.substr(0, colon))),
                                             std::string(value));
    }
  });
  if (reader.is_open()) {
    if (remaining > 0)
      reader.fail_here(last_line, last_text, last_text, "'Num Peaks: ", declared, "' but ",
                       declared - remaining, " peaks before the end of the file");
    if (remaining < 0)
      reader.fail_here(last_line, last_text, last_text,
                       "the file ends before its 'Num Peaks:' line");
    reader.close(last_line, last_text);
  }
  return reader.take();
}

std::vector<Spectrum> parse_mgf(std::string_view text, const std::string& source,
                                const SpectraReadOptions& options) {
  const char* where = "kformer::data::read_mgf";
  check_options(where, options);
  Reader reader(where, source, options);
  std::int64_t last_line = 0;
  std::string_view last_text;
  for_each_line(text, [&](std::int64_t line, std::string_view raw) {
    last_line = line;
    last_text = raw;
    const std::string_view content = trim(raw);
    if (content.empty() || std::string_view("#;!/").find(content.front()) != std::string_view::npos)
      return;
    if (equals_ignoring_case(content, "BEGIN IONS")) {
      if (reader.is_open())
        reader.fail_here(line, content, raw, "'BEGIN IONS' before this spectrum's 'END IONS'");
      reader.open(line);
      return;
    }
    if (equals_ignoring_case(content, "END IONS")) {
      if (!reader.is_open())
        reader.fail_here(line, content, raw, "'END IONS' without 'BEGIN IONS'");
      reader.close(line, raw);
      return;
    }
    if (!reader.is_open()) {
      if (content.find('=') != std::string_view::npos && !starts_peak(content))
        return;  // a global parameter
      reader.fail_here(line, content, raw, "expected 'BEGIN IONS', got '", content, "'");
    }
    if (starts_peak(content)) {
      std::vector<std::string_view> tokens;
      std::size_t i = 0;
      while (i < content.size()) {
        if (content[i] == ' ' || content[i] == '\t') {
          ++i;
          continue;
        }
        const std::size_t end = std::min(content.find_first_of(" \t", i), content.size());
        tokens.push_back(content.substr(i, end - i));
        i = end;
      }
      if (tokens.size() < 2)
        reader.fail_here(line, tokens.front(), raw, "the peak m/z '", tokens.front(),
                         "' has no intensity after it");
      if (tokens.size() > 3)
        reader.fail_here(line, tokens[3], raw,
                         "a peak line holds m/z, intensity and at most a "
                         "charge, got '",
                         content, "'");
      reader.add_peak(line, raw, tokens[0], tokens[1]);
      return;
    }
    const std::size_t equals = content.find('=');
    if (equals == std::string_view::npos)
      reader.fail_here(line, content, raw, "expected 'KEY=value', a peak line or 'END IONS', got '",
                       content, "'");
    const std::string key = normal_key(content.substr(0, equals));
    const std::string_view value = trim(content.substr(equals + 1));
    if (key == "title") {
      reader.current().title = std::string(value);
    } else if (key == "pepmass") {
      const std::size_t blank = value.find_first_of(" \t");
      reader.set_precursor(line, raw, value.substr(0, blank));
      if (blank != std::string_view::npos) {
        const std::string_view second = trim(value.substr(blank));
        double intensity = 0;
        if (!parse_number(second, intensity) || !(intensity >= 0))
          reader.fail_here(line, second, raw,
                           "PEPMASS's intensity must be a non-negative number, got '", second, "'");
        reader.current().precursor_intensity = intensity;
      }
    } else if (key == "charge") {
      reader.current().charge = std::string(value);
    } else {
      reader.current().metadata.emplace_back(lower(trim(content.substr(0, equals))),
                                             std::string(value));
    }
  });
  if (reader.is_open())
    reader.fail_here(last_line, last_text, last_text, "the file ends before its 'END IONS'");
  return reader.take();
}

std::vector<Spectrum> read_msp(const std::string& path, const SpectraReadOptions& options) {
  return parse_msp(detail::read_text_file(path, "kformer::data::read_msp"), path, options);
}

std::vector<Spectrum> read_mgf(const std::string& path, const SpectraReadOptions& options) {
  return parse_mgf(detail::read_text_file(path, "kformer::data::read_mgf"), path, options);
}

namespace {

// The shortest decimal form that reads back as the same double (at most 17 digits).
std::string shortest(double value) {
  char text[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

void check_writable(const char* where, std::size_t index, const Spectrum& s) {
  const auto one_line = [&](const std::string& text, const char* what) {
    if (text.find_first_of("\r\n") != std::string::npos)
      fail(where, "spectrum ", index + 1, " '", s.title, "': its ", what,
           " holds a line break, which the format cannot");
  };
  one_line(s.title, "title");
  one_line(s.charge, "charge");
  for (const auto& [key, value] : s.metadata) {
    one_line(key, "metadata key");
    one_line(value, "metadata value");
  }
  if (s.mz.empty() || s.mz.size() != s.intensity.size())
    fail(where, "spectrum ", index + 1, " '", s.title, "': ", s.mz.size(), " m/z and ",
         s.intensity.size(), " intensities; a spectrum needs at least one peak");
}

}  // namespace

std::string format_msp(const std::vector<Spectrum>& spectra) {
  std::string out;
  for (std::size_t i = 0; i < spectra.size(); ++i) {
    const Spectrum& s = spectra[i];
    check_writable("kformer::data::format_msp", i, s);
    out += "Name: " + s.title + "\n";
    if (!std::isnan(s.precursor_mz)) out += "PrecursorMZ: " + shortest(s.precursor_mz) + "\n";
    for (const auto& [key, value] : s.metadata)
      out.append(key).append(": ").append(value).append("\n");
    out += "Num Peaks: " + std::to_string(s.mz.size()) + "\n";
    for (std::size_t k = 0; k < s.mz.size(); ++k)
      out.append(shortest(s.mz[k])).append(" ").append(shortest(s.intensity[k])).append("\n");
    out += "\n";
  }
  return out;
}

std::string format_mgf(const std::vector<Spectrum>& spectra) {
  std::string out;
  for (std::size_t i = 0; i < spectra.size(); ++i) {
    const Spectrum& s = spectra[i];
    check_writable("kformer::data::format_mgf", i, s);
    out += "BEGIN IONS\nTITLE=" + s.title + "\n";
    if (!std::isnan(s.precursor_mz)) {
      out += "PEPMASS=" + shortest(s.precursor_mz);
      if (!std::isnan(s.precursor_intensity)) out += " " + shortest(s.precursor_intensity);
      out += "\n";
    }
    if (!s.charge.empty()) out += "CHARGE=" + s.charge + "\n";
    for (const auto& [key, value] : s.metadata)
      out.append(key).append("=").append(value).append("\n");
    for (std::size_t k = 0; k < s.mz.size(); ++k)
      out.append(shortest(s.mz[k])).append(" ").append(shortest(s.intensity[k])).append("\n");
    out += "END IONS\n\n";
  }
  return out;
}

SpectrumTokens preprocess(const Spectrum& spectrum, const SpectrumPreprocessing& options) {
  const char* where = "kformer::data::preprocess";
  if (!(options.min_relative_intensity >= 0 && options.min_relative_intensity <= 1))
    fail(where, "min_relative_intensity must be in [0, 1], got ", options.min_relative_intensity);
  if (!(options.merge_tolerance >= 0) || !std::isfinite(options.merge_tolerance))
    fail(where, "merge_tolerance must be finite and at least 0, got ", options.merge_tolerance);
  if (options.top_k < 0) fail(where, "top_k must be at least 0, got ", options.top_k);
  if (spectrum.mz.empty() || spectrum.mz.size() != spectrum.intensity.size())
    fail(where, "spectrum '", spectrum.title, "' has ", spectrum.mz.size(), " m/z and ",
         spectrum.intensity.size(), " intensities; expected the same number, at least 1");
  // Peaks by m/z.
  std::vector<std::size_t> order(spectrum.mz.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return spectrum.mz[a] < spectrum.mz[b]; });
  SpectrumTokens peaks;
  for (const std::size_t i : order) {
    // Merge with the previous peak when within the tolerance of it.
    if (!peaks.mz.empty() && spectrum.mz[i] - peaks.mz.back() <= options.merge_tolerance) {
      const double total = peaks.intensity.back() + spectrum.intensity[i];
      if (total > 0)
        peaks.mz.back() =
            (peaks.mz.back() * peaks.intensity.back() + spectrum.mz[i] * spectrum.intensity[i]) /
            total;
      peaks.intensity.back() = total;
      continue;
    }
    peaks.mz.push_back(spectrum.mz[i]);
    peaks.intensity.push_back(spectrum.intensity[i]);
  }
  const double base = *std::max_element(peaks.intensity.begin(), peaks.intensity.end());
  const double scale = options.normalize && base > 0 ? 1.0 / base : 1.0;
  // Kept: above the threshold, then the top k by intensity (ties to the lower m/z), in m/z order.
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < peaks.mz.size(); ++i)
    if (peaks.intensity[i] >= options.min_relative_intensity * base) kept.push_back(i);
  if (options.top_k > 0 && kept.size() > std::size_t(options.top_k)) {
    std::stable_sort(kept.begin(), kept.end(), [&](std::size_t a, std::size_t b) {
      return peaks.intensity[a] > peaks.intensity[b];
    });
    kept.resize(std::size_t(options.top_k));
    std::sort(kept.begin(), kept.end());
  }
  SpectrumTokens tokens;
  if (options.precursor_token && !std::isnan(spectrum.precursor_mz)) {
    tokens.mz.push_back(spectrum.precursor_mz);
    tokens.intensity.push_back(options.normalize ? 2.0 : 2.0 * base);
  }
  for (const std::size_t i : kept) {
    tokens.mz.push_back(peaks.mz[i]);
    tokens.intensity.push_back(peaks.intensity[i] * scale);
  }
  return tokens;
}

}  // namespace kformer::data

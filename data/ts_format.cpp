#include "ts_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/file_io.hpp"
#include "text_parsing.hpp"

namespace kformer::data {
namespace {

using detail::fail_at;
using detail::trim;

struct Token {
  std::string_view text;
  std::int64_t column;  // of text's first byte, from 1
};

std::size_t leading_blanks(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && (text[n] == ' ' || text[n] == '\t'))
    ++n;
  return n;
}

// Splits `text` (which starts at `column`) at every `separator`; the pieces are trimmed.
void split(std::string_view text, std::int64_t column, char separator, std::vector<Token>& out) {
  out.clear();
  std::size_t start = 0;
  while (true) {
    const std::size_t end = std::min(text.find(separator, start), text.size());
    const std::string_view piece = text.substr(start, end - start);
    out.push_back({trim(piece), column + static_cast<std::int64_t>(start + leading_blanks(piece))});
    if (end == text.size()) break;
    start = end + 1;
  }
}

// Splits at runs of white space.
std::vector<Token> words(std::string_view line) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t')
      ++i;
    if (i > start)
      out.push_back({line.substr(start, i - start), static_cast<std::int64_t>(start) + 1});
  }
  return out;
}

class TsParser {
 public:
  explicit TsParser(std::string source) : source_(std::move(source)) {}

  void line(std::int64_t number, std::string_view text) {
    line_ = number;
    const std::string_view content = trim(text);
    if (content.empty() || content.front() == '#') return;
    if (in_data_) {
      if (content.front() == '@')
        error(first_column(text), "expected a series, found the identifier '", words(text)[0].text,
              "' after @data (metadata must come before @data)");
      series(text);
    } else {
      if (content.front() != '@')
        error(first_column(text), "expected a '#' comment or an @identifier before @data, found '",
              content.substr(0, 20), content.size() > 20 ? "...'" : "'");
      identifier(words(text));
    }
  }

  SeriesSet finish() {
    if (!in_data_) fail(where, source_, ": no @data line (the metadata block must end with @data)");
    if (lengths_.empty()) fail(where, source_, ": no series after @data (line ", data_line_, ")");
    const std::int64_t n = static_cast<std::int64_t>(lengths_.size());
    const std::int64_t max_len = *std::max_element(lengths_.begin(), lengths_.end());
    SeriesSet set;
    set.reset(n, max_len, dimensions_);
    std::size_t read = 0;
    for (std::int64_t s = 0; s < n; ++s) {
      const std::size_t count = static_cast<std::size_t>(lengths_[s] * dimensions_);
      std::copy(steps_.begin() + read, steps_.begin() + read + count,
                set.values.begin() + set.offset(s, 0));
      read += count;
    }
    set.lengths.assign(lengths_.begin(), lengths_.end());
    if (class_label_) {
      if (class_names_.empty()) {  // no names declared: sorted, as pandas categories
        std::vector<std::string> names(label_text_.begin(), label_text_.end());
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        class_names_ = names;
        for (const auto& text : label_text_)
          labels_.push_back(static_cast<std::int32_t>(
              std::lower_bound(names.begin(), names.end(), text) - names.begin()));
      }
      set.class_names = class_names_;
      set.labels = labels_;
    }
    if (target_label_) {
      set.n_targets = n_targets_ > 0 ? n_targets_ : 1;  // 1 for a file without series
      set.targets = targets_;
    }
    return set;
  }

  static constexpr const char* where = "kformer::data::read_ts";

 private:
  template <class... Parts>
  [[noreturn]] void error(std::int64_t column, const Parts&... parts) const {
    fail_at(where, source_, line_, column, parts...);
  }

  static std::int64_t first_column(std::string_view text) {
    return static_cast<std::int64_t>(leading_blanks(text)) + 1;
  }

  bool boolean(const Token& name, const std::vector<Token>& tokens, std::size_t at = 1) const {
    if (tokens.size() <= at)
      error(name.column + static_cast<std::int64_t>(name.text.size()),
            "expected true or false after ", name.text);
    const Token& value = tokens[at];
    if (detail::equals_ignoring_case(value.text, "true")) return true;
    if (detail::equals_ignoring_case(value.text, "false")) return false;
    error(value.column, "expected true or false after ", name.text, ", found '", value.text, "'");
  }

  std::int64_t positive(const Token& name, const std::vector<Token>& tokens) const {
    if (tokens.size() < 2)
      error(name.column + static_cast<std::int64_t>(name.text.size()),
            "expected a positive integer after ", name.text);
    const Token& value = tokens[1];
    // At most 12 digits, so that n cannot overflow.
    std::int64_t n = 0;
    bool ok = !value.text.empty() && value.text.size() <= 12;
    for (std::size_t i = 0; ok && i < value.text.size(); ++i) {
      const char c = value.text[i];
      ok = c >= '0' && c <= '9';
      n = n * 10 + (c - '0');
    }
    if (!ok || n <= 0)
      error(value.column, "expected a positive integer after ", name.text, ", found '", value.text,
            "'");
    return n;
  }

  void no_more(const Token& name, const std::vector<Token>& tokens, std::size_t count) const {
    if (tokens.size() > count)
      error(tokens[count].column, "unexpected '", tokens[count].text, "' after ", name.text);
  }

  void identifier(const std::vector<Token>& tokens) {
    const Token& name = tokens[0];
    std::string key(name.text.substr(1));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (key == "dimension") key = "dimensions";
    if (const auto it = seen_.find(key); it != seen_.end())
      error(name.column, name.text, " appears twice (first on line ", it->second, ")");
    seen_.emplace(key, line_);

    if (key == "problemname") {
      if (tokens.size() < 2)
        error(name.column + static_cast<std::int64_t>(name.text.size()), "expected a name after ",
              name.text);
    } else if (key == "timestamps") {
      if (boolean(name, tokens))
        error(tokens[1].column,
              "timestamped series (@timeStamps true) are not supported; write the values "
              "without time stamps, one value per step");
      no_more(name, tokens, 2);
    } else if (key == "missing") {
      boolean(name, tokens);  // informational: '?' is accepted either way
      no_more(name, tokens, 2);
    } else if (key == "univariate") {
      univariate_ = boolean(name, tokens);
      no_more(name, tokens, 2);
      if (univariate_ && dimensions_ > 1)
        error(tokens[1].column, "@univariate true contradicts @dimensions ", dimensions_);
      if (univariate_) dimensions_ = 1;
    } else if (key == "dimensions") {
      const std::int64_t n = positive(name, tokens);
      no_more(name, tokens, 2);
      if (univariate_ && n != 1)
        error(tokens[1].column, name.text, " ", n, " contradicts @univariate true");
      dimensions_ = n;
    } else if (key == "equallength") {
      equal_length_ = boolean(name, tokens);
      no_more(name, tokens, 2);
    } else if (key == "serieslength") {
      series_length_ = positive(name, tokens);
      series_length_line_ = line_;
      no_more(name, tokens, 2);
    } else if (key == "classlabel") {
      class_label_ = boolean(name, tokens);
      if (class_label_ && target_label_)
        error(tokens[1].column,
              "a file has class labels or regression targets, not both "
              "(@targetLabel is true too)");
      if (!class_label_) no_more(name, tokens, 2);
      for (std::size_t i = 2; i < tokens.size(); ++i) {
        const std::string label(tokens[i].text);
        if (std::find(class_names_.begin(), class_names_.end(), label) != class_names_.end())
          error(tokens[i].column, "class label '", label, "' is declared twice");
        class_names_.push_back(label);
      }
    } else if (key == "targetlabel") {
      target_label_ = boolean(name, tokens);
      no_more(name, tokens, 2);
      if (target_label_ && class_label_)
        error(tokens[1].column,
              "a file has class labels or regression targets, not both "
              "(@classLabel is true too)");
    } else if (key == "data") {
      no_more(name, tokens, 1);
      in_data_ = true;
      data_line_ = line_;
    } else {
      error(name.column, "unknown identifier ", name.text,
            " (expected @problemName, @timeStamps, @missing, @univariate, @dimensions, "
            "@equalLength, @seriesLength, @classLabel, @targetLabel or @data)");
    }
  }

  void series(std::string_view text) {
    split(text, 1, ':', fields_);
    const std::int64_t label_fields = (class_label_ || target_label_) ? 1 : 0;
    const std::int64_t n_fields = static_cast<std::int64_t>(fields_.size());
    const char* label_kind = class_label_    ? " and a class label"
                             : target_label_ ? " and a target"
                                             : "";
    if (dimensions_ == 0) {  // not declared: the first series decides
      if (n_fields - label_fields < 1)
        error(static_cast<std::int64_t>(text.size()) + 1,
              "expected at least one dimension before the label");
      dimensions_ = n_fields - label_fields;
    }
    if (n_fields != dimensions_ + label_fields) {
      const bool too_many = n_fields > dimensions_ + label_fields;
      const std::int64_t column =
          too_many ? fields_[static_cast<std::size_t>(dimensions_ + label_fields)].column - 1
                   : static_cast<std::int64_t>(text.size()) + 1;
      error(column, "expected ", dimensions_, dimensions_ == 1 ? " dimension" : " dimensions",
            label_kind, " separated by ':', found ", n_fields, " field", n_fields == 1 ? "" : "s",
            label_fields == 0 && too_many
                ? " (no @classLabel or @targetLabel line declares a label)"
                : "");
    }

    std::int64_t length = 0;
    for (std::int64_t d = 0; d < dimensions_; ++d) {
      const Token& field = fields_[static_cast<std::size_t>(d)];
      split(field.text, field.column, ',', values_);
      const std::int64_t count = static_cast<std::int64_t>(values_.size());
      if (d == 0) {
        length = count;
        case_.assign(static_cast<std::size_t>(length * dimensions_), 0.0f);
      } else if (count != length) {
        error(field.column, "dimension ", d + 1, " has ", count, count == 1 ? " value" : " values",
              " but dimension 1 has ", length,
              "; the dimensions of a series must have equal lengths");
      }
      for (std::int64_t t = 0; t < count; ++t)
        case_[static_cast<std::size_t>(t * dimensions_ + d)] = number(values_[t]);
    }
    if (equal_length_) {
      if (series_length_ == 0) {
        series_length_ = length;
        series_length_line_ = line_;
      }
      if (length != series_length_)
        error(1, "the series has ", length, " steps but ",
              seen_.count("serieslength") ? "@seriesLength is " : "the first series has ",
              series_length_, " (line ", series_length_line_, ") and @equalLength is true");
    }
    if (label_fields) label(fields_.back());
    steps_.insert(steps_.end(), case_.begin(), case_.end());
    lengths_.push_back(length);
  }

  float number(const Token& token) const {
    if (detail::is_missing(token.text)) {
      if (token.text.empty() && values_.size() == 1)
        error(token.column, "expected a number or '?', found an empty dimension");
      if (token.text.empty()) error(token.column, "expected a number or '?', found nothing");
      return std::numeric_limits<float>::quiet_NaN();
    }
    if (token.text.front() == '(')
      error(token.column, "timestamped values '(time,value)' are not supported");
    double value;
    if (!detail::parse_number(token.text, value))
      error(token.column, "expected a number or '?', found '", token.text, "'");
    if (!detail::fits_float(value))
      error(token.column, "value ", token.text, " does not fit in a float");
    return static_cast<float>(value);
  }

  void label(const Token& field) {
    if (field.text.empty())
      error(field.column, "expected a label after the last ':', found nothing");
    if (target_label_) {
      // One target, or several separated by ',' (a kformer extension for multi-target
      // regression); every series has as many as the first.
      split(field.text, field.column, ',', values_);
      const std::int64_t count = static_cast<std::int64_t>(values_.size());
      if (n_targets_ == 0) {
        n_targets_ = count;
        n_targets_line_ = line_;
      }
      if (count != n_targets_)
        error(field.column, "expected ", n_targets_, n_targets_ == 1 ? " target" : " targets",
              " (as on line ", n_targets_line_, "), found ", count);
      for (const Token& target : values_) {
        double value;
        if (!detail::parse_number(target.text, value) || !detail::fits_float(value))
          error(target.column, "expected a numeric target, found '", target.text, "'");
        targets_.push_back(static_cast<float>(value));
      }
    } else if (class_names_.empty()) {
      label_text_.emplace_back(field.text);
    } else {
      const auto it = std::find(class_names_.begin(), class_names_.end(), field.text);
      if (it == class_names_.end()) {
        std::string declared;
        for (const auto& name : class_names_)
          declared += (declared.empty() ? "" : " ") + name;
        error(field.column, "unknown class label '", field.text,
              "' (@classLabel declares: ", declared, ")");
      }
      labels_.push_back(static_cast<std::int32_t>(it - class_names_.begin()));
    }
  }

  std::string source_;
  std::int64_t line_ = 0;
  std::map<std::string, std::int64_t> seen_;  // identifier -> line
  bool in_data_ = false;
  std::int64_t data_line_ = 0;
  bool univariate_ = false;
  std::int64_t dimensions_ = 0;  // 0 until declared or seen
  bool equal_length_ = false;
  std::int64_t series_length_ = 0, series_length_line_ = 0;
  bool class_label_ = false, target_label_ = false;
  std::vector<std::string> class_names_;

  std::vector<Token> fields_, values_;  // reused for every line
  std::vector<float> case_;             // the current series, (length, dimensions)
  std::vector<float> steps_;            // all series, back to back
  std::vector<std::int64_t> lengths_;
  std::vector<std::int32_t> labels_;
  std::vector<std::string> label_text_;  // labels when @classLabel names none
  std::vector<float> targets_;
  std::int64_t n_targets_ = 0, n_targets_line_ = 0;  // targets per series, and where first seen
};

// The shortest decimal form that reads back as the same float (at most 9 significant digits).
std::string shortest(float value) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, static_cast<double>(value));
    if (static_cast<float>(std::strtod(text, nullptr)) == value) break;
  }
  return text;
}

bool is_plain_name(const std::string& name) {
  return !name.empty() && name.find_first_of(" \t\r\n:") == std::string::npos;
}

}  // namespace

SeriesSet parse_ts(std::string_view text, const std::string& source) {
  TsParser parser(source);
  detail::for_each_line(
      text, [&](std::int64_t number, std::string_view line) { parser.line(number, line); });
  return parser.finish();
}

SeriesSet read_ts(const std::string& path) {
  return parse_ts(detail::read_text_file(path, TsParser::where), path);
}

std::string format_ts(const SeriesSet& data, const std::string& problem_name) {
  const std::string where = "kformer::data::format_ts";
  data.validate(where);
  if (!is_plain_name(problem_name))
    fail(where, "problem name '", problem_name, "' must be non-empty without spaces or ':'");
  if (data.n_series == 0 || data.n_features == 0)
    fail(where, "nothing to write (", data.n_series, " series of ", data.n_features, " features)");
  if (data.is_classification() && data.is_regression())
    fail(where, "a .ts file holds class labels or a regression target, not both");
  for (const auto& name : data.class_names)
    if (!is_plain_name(name))
      fail(where, "class name '", name, "' must be non-empty without spaces or ':'");
  bool missing = false, equal_length = true;
  for (std::int64_t s = 0; s < data.n_series; ++s) {
    const std::int32_t length = data.lengths[static_cast<std::size_t>(s)];
    if (length == 0) fail(where, "series ", s, " has no observed steps");
    equal_length = equal_length && length == data.lengths[0];
    for (std::size_t i = data.offset(s, 0); i < data.offset(s, length); ++i)
      missing = missing || std::isnan(data.values[i]);
    for (std::int64_t k = 0; k < data.n_targets; ++k)
      if (!std::isfinite(data.targets[static_cast<std::size_t>(s * data.n_targets + k)]))
        fail(where, "series ", s, " has a target that is not a finite number");
  }

  std::string out = "# Written by kformer.\n@problemName " + problem_name +
                    "\n@timeStamps false\n@missing " + (missing ? "true" : "false") +
                    "\n@univariate " + (data.n_features == 1 ? "true" : "false") + "\n";
  if (data.n_features > 1) out += "@dimensions " + std::to_string(data.n_features) + "\n";
  out += std::string("@equalLength ") + (equal_length ? "true" : "false") + "\n";
  if (equal_length) out += "@seriesLength " + std::to_string(data.lengths[0]) + "\n";
  if (data.is_classification()) {
    out += "@classLabel true";
    for (const auto& name : data.class_names)
      out += " " + name;
    out += "\n";
  } else if (data.is_regression()) {
    out += "@targetLabel true\n";
  } else {
    out += "@classLabel false\n";
  }
  out += "@data\n";
  for (std::int64_t s = 0; s < data.n_series; ++s) {
    const std::int32_t length = data.lengths[static_cast<std::size_t>(s)];
    for (std::int64_t f = 0; f < data.n_features; ++f) {
      if (f) out += ':';
      for (std::int64_t t = 0; t < length; ++t) {
        if (t) out += ',';
        const float v = data.value(s, t, f);
        out += std::isnan(v) ? std::string("?") : shortest(v);
      }
    }
    if (data.is_classification())
      out += ":" + data.class_names[static_cast<std::size_t>(data.labels[s])];
    for (std::int64_t k = 0; k < data.n_targets; ++k)
      out += (k ? "," : ":") +
             shortest(data.targets[static_cast<std::size_t>(s * data.n_targets + k)]);
    out += '\n';
  }
  return out;
}

void write_ts(const std::string& path, const SeriesSet& data, const std::string& problem_name) {
  write_file_atomic(path, format_ts(data, problem_name));
}

}  // namespace kformer::data

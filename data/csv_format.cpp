#include "csv_format.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "../core/error.hpp"
#include "text_parsing.hpp"

namespace kformer::data {
namespace {

using detail::fail_at;

struct Field {
  std::string text;
  std::int64_t column;  // of the field's first byte, from 1
};

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

// One CSV file read record by record, with the positions that messages need.
class CsvReader {
 public:
  CsvReader(std::string text, std::string source, char delimiter, std::string where)
      : text_(std::move(text)),
        source_(std::move(source)),
        where_(std::move(where)),
        delimiter_(delimiter) {
    position_ = detail::utf8_bom_length(text_);
    std::string_view line;
    while (next_line(line))
      if (!detail::trim(line).empty()) break;
    if (detail::trim(line).empty()) fail(where_, source_, ": no header line (the file is empty)");
    header_line_ = line_;
    split(line, header_);
    std::unordered_set<std::string_view> seen;  // a pass per column would be quadratic
    for (std::size_t i = 0; i < header_.size(); ++i) {
      const Field& name = header_[i];
      if (name.text.empty()) error(name.column, "column ", i + 1, " of the header has no name");
      if (!seen.insert(name.text).second)
        error(name.column, "column '", name.text, "' appears twice in the header");
      names_.push_back(name.text);
    }
  }

  const std::string& source() const { return source_; }
  const std::string& where() const { return where_; }
  const std::vector<std::string>& names() const { return names_; }
  std::int64_t header_line() const { return header_line_; }
  std::int64_t line() const { return line_; }

  // The next record into `fields`; false at the end of the file. Blank lines are skipped.
  bool next(std::vector<Field>& fields) {
    std::string_view line;
    do {
      if (!next_line(line)) return false;
    } while (detail::trim(line).empty());
    split(line, fields);
    if (fields.size() != header_.size()) {
      const bool too_many = fields.size() > header_.size();
      error(too_many ? fields[header_.size()].column - 1 : std::int64_t(line.size()) + 1,
            "expected ", header_.size(), " fields as in the header (line ", header_line_,
            "), found ", fields.size());
    }
    return true;
  }

  // Index of column `name`; `role` says what it was asked for ("id column").
  std::size_t column(const std::string& name, const char* role) const {
    const auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end())
      fail_at(where_, source_, header_line_, 1, "no ", role, " '", name,
              "' in the header (columns: ", join(names_), ")");
    return static_cast<std::size_t>(it - names_.begin());
  }

  template <class... Parts>
  [[noreturn]] void error(std::int64_t column, const Parts&... parts) const {
    fail_at(where_, source_, line_, column, parts...);
  }

  // A feature value: a number, or NaN for a missing one.
  float value(const Field& field, std::size_t column) const {
    if (detail::is_missing(field.text)) return std::numeric_limits<float>::quiet_NaN();
    double v;
    if (!detail::parse_number(field.text, v))
      error(field.column, "column '", names_[column],
            "': expected a number (or nothing, '?' or NaN for a missing value), found '",
            field.text, "'");
    if (!detail::fits_float(v))
      error(field.column, "column '", names_[column], "': ", field.text,
            " does not fit in a float");
    return static_cast<float>(v);
  }

  // A number that must be present (a time or a target).
  double required_number(const Field& field, std::size_t column) const {
    double v;
    if (!detail::parse_number(field.text, v) || !detail::fits_float(v))
      error(field.column, "column '", names_[column], "': expected a number, found '", field.text,
            "'");
    return v;
  }

 private:
  bool next_line(std::string_view& line) {
    if (position_ >= text_.size()) return false;
    std::size_t end = text_.find('\n', position_);
    if (end == std::string::npos) end = text_.size();
    line = std::string_view(text_).substr(position_, end - position_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    position_ = end + 1;
    ++line_;
    return true;
  }

  bool blank(char c) const { return (c == ' ' || c == '\t') && c != delimiter_; }

  void split(std::string_view line, std::vector<Field>& out) const {
    out.clear();
    std::size_t i = 0;
    while (true) {
      while (i < line.size() && blank(line[i]))
        ++i;
      Field field{std::string(), static_cast<std::int64_t>(i) + 1};
      if (i < line.size() && line[i] == '"') {
        const std::size_t open = i++;
        while (true) {
          if (i >= line.size())
            error(std::int64_t(open) + 1,
                  "unterminated quoted field (line breaks inside quotes are not supported)");
          if (line[i] == '"') {
            if (i + 1 < line.size() && line[i + 1] == '"') {
              field.text += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          field.text += line[i++];
        }
        while (i < line.size() && blank(line[i]))
          ++i;
        if (i < line.size() && line[i] != delimiter_)
          error(std::int64_t(i) + 1, "expected '", delimiter_,
                "' or the end of the line after a quoted field, found '", line[i], "'");
      } else {
        const std::size_t start = i;
        while (i < line.size() && line[i] != delimiter_)
          ++i;
        field.text = std::string(detail::trim(line.substr(start, i - start)));
      }
      out.push_back(std::move(field));
      if (i >= line.size()) break;
      ++i;  // past the delimiter
    }
  }

  std::string text_, source_, where_;
  char delimiter_;
  std::size_t position_ = 0;
  std::int64_t line_ = 0, header_line_ = 0;
  std::vector<Field> header_;
  std::vector<std::string> names_;
};

// The rows of one series as read, before ordering and padding.
struct SeriesRows {
  std::string id;
  std::string values_source, label_source;  // the files its rows and its label came from
  std::vector<float> values;                // (rows, features)
  std::vector<double> times;
  std::vector<std::int64_t> lines, time_columns;
  bool labelled = false;
  std::string label;
  std::int64_t label_line = 0, label_column = 0;
  std::vector<float> targets;
  std::int64_t rows() const { return static_cast<std::int64_t>(lines.size()); }
};

// Sorts the rows by time (stable), refusing equal times.
void order_by_time(SeriesRows& series, std::int64_t n_features, const std::string& where) {
  std::vector<std::size_t> order(series.lines.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return series.times[a] < series.times[b]; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const std::size_t a = order[k - 1], b = order[k];
    if (series.times[a] == series.times[b]) {
      const std::size_t later = std::max(a, b), earlier = std::min(a, b);
      fail_at(where, series.values_source, series.lines[later], series.time_columns[later],
              "series '", series.id, "' has time ", series.times[later], " twice (also on line ",
              series.lines[earlier], ")");
    }
  }
  std::vector<float> sorted;
  sorted.reserve(series.values.size());
  for (const std::size_t r : order)
    sorted.insert(sorted.end(), series.values.begin() + std::int64_t(r) * n_features,
                  series.values.begin() + std::int64_t(r + 1) * n_features);
  series.values = std::move(sorted);
}

// The padded set; class indices from `declared` or the sorted labels.
SeriesSet assemble(const std::vector<SeriesRows>& all, std::int64_t n_features, bool labelled,
                   std::int64_t n_targets, const std::vector<std::string>& declared,
                   const std::string& where) {
  std::int64_t max_len = 0;
  for (const auto& series : all)
    max_len = std::max(max_len, series.rows());
  SeriesSet set;
  set.reset(static_cast<std::int64_t>(all.size()), max_len, n_features);
  for (std::size_t s = 0; s < all.size(); ++s) {
    std::copy(all[s].values.begin(), all[s].values.end(),
              set.values.begin() + set.offset(static_cast<std::int64_t>(s), 0));
    set.lengths[s] = static_cast<std::int32_t>(all[s].rows());
  }
  if (labelled) {
    set.class_names = declared;
    if (set.class_names.empty()) {
      for (const auto& series : all)
        set.class_names.push_back(series.label);
      std::sort(set.class_names.begin(), set.class_names.end());
      set.class_names.erase(std::unique(set.class_names.begin(), set.class_names.end()),
                            set.class_names.end());
    }
    for (const auto& series : all) {
      const auto it = std::find(set.class_names.begin(), set.class_names.end(), series.label);
      if (it == set.class_names.end())
        fail_at(where, series.label_source, series.label_line, series.label_column, "series '",
                series.id, "': class label '", series.label,
                "' is not one of the given class names (", join(declared), ")");
      set.labels.push_back(static_cast<std::int32_t>(it - set.class_names.begin()));
    }
  }
  set.n_targets = n_targets;
  for (const auto& series : all)
    set.targets.insert(set.targets.end(), series.targets.begin(), series.targets.end());
  return set;
}

// The feature columns: `requested` in that order, or every column not in `reserved`.
std::vector<std::size_t> feature_columns(const CsvReader& reader,
                                         const std::vector<std::string>& requested,
                                         const std::vector<std::string>& reserved) {
  std::vector<std::size_t> columns;
  if (requested.empty()) {
    for (std::size_t c = 0; c < reader.names().size(); ++c)
      if (std::find(reserved.begin(), reserved.end(), reader.names()[c]) == reserved.end())
        columns.push_back(c);
  } else {
    for (const auto& name : requested) {
      if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
        fail(reader.where(), "feature column '", name,
             "' is also the id, time, label or target column");
      columns.push_back(reader.column(name, "feature column"));
    }
  }
  if (columns.empty())
    fail_at(reader.where(), reader.source(), reader.header_line(), 1,
            "no feature columns in the header (columns: ", join(reader.names()), ")");
  return columns;
}

}  // namespace

SeriesSet read_csv(const std::string& path, const CsvOptions& options) {
  return parse_csv(detail::read_text_file(path, "kformer::data::read_csv"), path, options);
}

SeriesSet parse_csv(std::string text, const std::string& source, const CsvOptions& options) {
  const std::string where = "kformer::data::read_csv";
  CsvReader reader(std::move(text), source, options.delimiter, where);

  std::vector<std::string> reserved = {options.id_column};
  if (!options.time_column.empty()) reserved.push_back(options.time_column);
  if (!options.label_column.empty()) reserved.push_back(options.label_column);
  reserved.insert(reserved.end(), options.target_columns.begin(), options.target_columns.end());
  for (std::size_t i = 0; i < reserved.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (reserved[i] == reserved[j])
        fail(where, "column '", reserved[i], "' is given two roles (id, time, label, target)");
  const std::size_t id_column = reader.column(options.id_column, "id column");
  const bool timed = !options.time_column.empty();
  const std::size_t time_column = timed ? reader.column(options.time_column, "time column") : 0;
  const bool labelled = !options.label_column.empty();
  const std::size_t label_column =
      labelled ? reader.column(options.label_column, "label column") : 0;
  std::vector<std::size_t> target_columns;
  for (const auto& name : options.target_columns)
    target_columns.push_back(reader.column(name, "target column"));
  const std::vector<std::size_t> features =
      feature_columns(reader, options.feature_columns, reserved);
  const std::int64_t n_features = static_cast<std::int64_t>(features.size());

  std::vector<SeriesRows> all;
  std::map<std::string, std::size_t> index;  // id -> position in `all`
  std::vector<Field> fields;
  std::vector<float> targets(target_columns.size());
  while (reader.next(fields)) {
    const Field& id = fields[id_column];
    if (id.text.empty())
      reader.error(id.column, "column '", options.id_column, "': empty series id");
    auto [it, is_new] = index.emplace(id.text, all.size());
    if (is_new) {
      all.emplace_back();
      all.back().id = id.text;
      all.back().values_source = source;
      all.back().label_source = source;
    }
    SeriesRows& series = all[it->second];
    for (const std::size_t c : features)
      series.values.push_back(reader.value(fields[c], c));
    series.lines.push_back(reader.line());
    if (timed) {
      series.times.push_back(reader.required_number(fields[time_column], time_column));
      series.time_columns.push_back(fields[time_column].column);
    }
    if (labelled) {
      const Field& label = fields[label_column];
      if (label.text.empty())
        reader.error(label.column, "column '", options.label_column, "': empty class label");
      if (!series.labelled) {
        series.labelled = true;
        series.label = label.text;
        series.label_line = reader.line();
        series.label_column = label.column;
      } else if (label.text != series.label) {
        reader.error(label.column, "series '", series.id, "' has label '", label.text,
                     "' here but '", series.label, "' on line ", series.label_line);
      }
    }
    for (std::size_t k = 0; k < target_columns.size(); ++k)
      targets[k] =
          static_cast<float>(reader.required_number(fields[target_columns[k]], target_columns[k]));
    if (is_new) {
      series.targets = targets;
    } else if (series.targets != targets) {
      reader.error(fields[target_columns.front()].column, "series '", series.id,
                   "' has targets that differ from those on line ", series.lines.front());
    }
  }
  if (all.empty())
    fail_at(where, source, reader.header_line() + 1, 1, "no data rows after the header");
  if (timed)
    for (auto& series : all)
      order_by_time(series, n_features, where);
  return assemble(all, n_features, labelled, static_cast<std::int64_t>(target_columns.size()),
                  options.class_names, where);
}

SeriesSet read_csv_directory(const std::string& directory, const std::string& labels_path,
                             const CsvDirectoryOptions& options) {
  const std::string where = "kformer::data::read_csv_directory";
  CsvReader labels(detail::read_text_file(labels_path, where), labels_path, options.delimiter,
                   where);
  const std::size_t id_column = labels.column(options.id_column, "id column");
  const bool has_label = !options.label_column.empty();
  const std::size_t label_column =
      has_label ? labels.column(options.label_column, "label column") : 0;

  std::vector<SeriesRows> all;
  std::map<std::string, std::int64_t> listed;  // id -> line
  std::vector<Field> fields;
  std::vector<std::int64_t> id_columns;
  while (labels.next(fields)) {
    const Field& id = fields[id_column];
    if (id.text.empty() || id.text == "." || id.text == ".." ||
        id.text.find('/') != std::string::npos)
      labels.error(id.column, "column '", options.id_column, "': '", id.text,
                   "' is not a file name (empty, '.', '..' or containing '/')");
    if (const auto [it, is_new] = listed.emplace(id.text, labels.line()); !is_new)
      labels.error(id.column, "series '", id.text, "' is listed twice (first on line ", it->second,
                   ")");
    SeriesRows series;
    series.id = id.text;
    id_columns.push_back(id.column);
    if (has_label) {
      const Field& label = fields[label_column];
      series.label_line = labels.line();
      series.label_column = label.column;
      series.label_source = labels_path;
      if (options.regression) {
        series.targets.push_back(static_cast<float>(labels.required_number(label, label_column)));
      } else {
        if (label.text.empty())
          labels.error(label.column, "column '", options.label_column, "': empty class label");
        series.labelled = true;
        series.label = label.text;
      }
    }
    all.push_back(std::move(series));
  }
  if (all.empty())
    fail_at(where, labels_path, labels.header_line() + 1, 1, "no series listed after the header");

  std::vector<std::string> feature_names = options.feature_columns;
  std::string first_file;
  for (std::size_t s = 0; s < all.size(); ++s) {
    SeriesRows& series = all[s];
    const std::string path = directory + "/" + series.id + options.extension;
    struct stat status;
    if (stat(path.c_str(), &status) != 0 || !S_ISREG(status.st_mode))
      fail_at(where, labels_path, listed[series.id], id_columns[s], "no file '", path,
              "' for series '", series.id, "'");
    CsvReader reader(detail::read_text_file(path, where), path, options.delimiter, where);
    const bool timed = !options.time_column.empty();
    const std::size_t time_column = timed ? reader.column(options.time_column, "time column") : 0;
    std::vector<std::string> reserved;
    if (timed) reserved.push_back(options.time_column);
    if (feature_names.empty()) {  // the first file decides
      for (const std::size_t c : feature_columns(reader, {}, reserved))
        feature_names.push_back(reader.names()[c]);
      first_file = path;
    } else if (options.feature_columns.empty() &&
               reader.names().size() != feature_names.size() + reserved.size()) {
      fail_at(where, path, reader.header_line(), 1, "columns (", join(reader.names()),
              ") differ from those of the first series' file ", first_file, " (",
              join(feature_names), timed ? ", " + options.time_column : std::string(), ")");
    }
    const std::vector<std::size_t> features = feature_columns(reader, feature_names, reserved);
    const std::int64_t n_features = static_cast<std::int64_t>(features.size());
    series.values_source = path;
    while (reader.next(fields)) {
      for (const std::size_t c : features)
        series.values.push_back(reader.value(fields[c], c));
      series.lines.push_back(reader.line());
      if (timed) {
        series.times.push_back(reader.required_number(fields[time_column], time_column));
        series.time_columns.push_back(fields[time_column].column);
      }
    }
    if (series.lines.empty())
      fail_at(where, path, reader.header_line() + 1, 1, "no data rows after the header");
    if (timed) order_by_time(series, n_features, where);
  }
  return assemble(all, static_cast<std::int64_t>(feature_names.size()),
                  has_label && !options.regression, has_label && options.regression ? 1 : 0,
                  options.class_names, where);
}

std::vector<std::uint8_t> read_mask_csv(const std::string& path, const SeriesSet& data) {
  return parse_mask_csv(detail::read_text_file(path, "kformer::data::read_mask_csv"), path, data);
}

std::vector<std::uint8_t> parse_mask_csv(std::string text, const std::string& source,
                                         const SeriesSet& data) {
  const std::string where = "kformer::data::read_mask_csv";
  CsvReader reader(std::move(text), source, ',', where);
  const std::size_t columns[3] = {reader.column("series", "series column"),
                                  reader.column("step", "step column"),
                                  reader.column("feature", "feature column")};
  const std::int64_t limits[3] = {data.n_series, data.max_len, data.n_features};
  std::vector<std::uint8_t> mask(
      static_cast<std::size_t>(data.n_series * data.max_len * data.n_features), 1);
  std::vector<Field> fields;
  while (reader.next(fields)) {
    std::int64_t index[3];
    for (int k = 0; k < 3; ++k) {
      const Field& f = fields[columns[k]];
      double value = 0;
      if (!detail::parse_number(detail::trim(f.text), value) || value != std::floor(value) ||
          value < 0 || value >= double(limits[k]))
        reader.error(f.column, "expected an index in [0, ", limits[k], "), found '", f.text, "'");
      index[k] = static_cast<std::int64_t>(value);
    }
    mask[static_cast<std::size_t>((index[0] * data.max_len + index[1]) * data.n_features +
                                  index[2])] = 0;
  }
  return mask;
}

}  // namespace kformer::data

// Multivariate series from CSV files, in the two layouts users most often have.
//
// Common rules: the first non-blank line is a header of column names; fields are separated by
// `delimiter` and may be quoted ("a,b", "" for a quote; no line breaks inside quotes); blanks
// around fields are ignored; a missing value is an empty field, '?' or NaN (any case). Class
// indices follow `class_names` when given (every label must be one of them; pass the training
// set's names when reading a test set), otherwise the sorted labels found. Every problem is a
// kformer::Error "<function>: <file>:<line>:<column>: <what was expected and what was found>".
#pragma once

#include <string>
#include <vector>

#include "series_set.hpp"

namespace kformer::data {

// Layout 1: one file, one row per time step, a column naming the series of each row.
//
//   series_id,time,temperature,pressure,label
//   a,0,20.5,1013,calm
//   a,1,20.7,,calm
//   b,0,18.1,1002,storm
//
// Series appear in the order of their first row. Their rows may be interleaved with other
// series' rows and are taken in file order, or sorted by `time_column` when one is named (times
// must be numbers, distinct within a series). Labels and targets must be the same on every row
// of a series.
struct CsvOptions {
  char delimiter = ',';
  std::string id_column = "series_id";
  std::string time_column;                   // optional
  std::vector<std::string> feature_columns;  // in this order; empty = every other column
  std::string label_column;                  // optional: class label of each series
  std::vector<std::string> target_columns;   // optional: regression targets of each series
  std::vector<std::string> class_names;      // optional: the class order
};
SeriesSet read_csv(const std::string& path, const CsvOptions& options = {});
// The same from text in memory; `source` stands for the file name in messages.
SeriesSet parse_csv(std::string text, const std::string& source, const CsvOptions& options = {});

// Layout 2: one file per series, <directory>/<id><extension>, each with a header and one row per
// time step, and a labels file naming the series and their labels:
//
//   id,label          <- labels_path          time,x,y      <- <directory>/run7.csv
//   run7,calm                                  0,1.5,2.0
//   run8,storm                                 1,1.6,?
//
// The series are the labels file's rows, in its order (other files in the directory are
// ignored). Every series file must have the same feature columns (in any order).
struct CsvDirectoryOptions {
  char delimiter = ',';
  std::string extension = ".csv";
  std::string id_column = "id";              // in the labels file
  std::string label_column = "label";        // in the labels file; empty = no labels
  bool regression = false;                   // the label column holds numeric targets
  std::string time_column;                   // optional, in the series files
  std::vector<std::string> feature_columns;  // empty = every column but the time column
  std::vector<std::string> class_names;      // optional: the class order
};
SeriesSet read_csv_directory(const std::string& directory, const std::string& labels_path,
                             const CsvDirectoryOptions& options = {});

// A mask for imputation from a CSV file with the columns series, step, feature (0-based indices,
// any order, a header line first): 1 = keep for every value of `data` except the listed ones,
// which are 0 (hidden from the model, to be predicted). Laid out (n_series, max_len, n_features).
// An index outside the data is a kformer::Error with the file, line and column.
std::vector<std::uint8_t> read_mask_csv(const std::string& path, const SeriesSet& data);
// The same from text in memory; `source` stands for the file name in messages.
std::vector<std::uint8_t> parse_mask_csv(std::string text, const std::string& source,
                                         const SeriesSet& data);

}  // namespace kformer::data

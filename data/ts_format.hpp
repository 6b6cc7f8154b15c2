// The UEA / sktime .ts format (https://www.sktime.net, "ts File Format v1.0"), the form of the UEA
// multivariate classification archive and the Monash regression archive that the TST paper uses.
//
//   # comment lines
//   @problemName BasicMotions
//   @timeStamps false
//   @missing true
//   @univariate false
//   @dimensions 3
//   @equalLength false
//   @classLabel true Standing Running Walking
//   @data
//   1.0,2.0,?:0.5,0.4,0.3:2.5,2.4,2.1:Walking
//
// One series per data line: its dimensions separated by ':', each a ','-separated list of values
// ('?' or NaN for a missing value), then the class label or regression target after a last ':'
// when @classLabel or @targetLabel is true. Several regression targets per series, separated by
// ',' after the last ':', are a kformer extension (sktime's format has one); every series of a
// file has the same number. Identifiers are case-insensitive; @dimension and
// @dimensions are both accepted. Timestamped series ("@timeStamps true", "(t,value)" tokens) are
// refused with an error.
#pragma once

#include <string>
#include <string_view>

#include "series_set.hpp"

namespace kformer::data {

// Reads a .ts file. The series are padded with NaN to the longest one (max_len); every dimension
// of a series must have the same number of values. Class indices follow the order of the names on
// the @classLabel line; when the line lists no names, the labels found are sorted (as pandas'
// categories, which the TST reference code uses). Regression files have one target per series, or
// several (as many on every line).
// Every problem is a kformer::Error "kformer::data::read_ts: <file>:<line>:<column>: <what was
// expected and what was found>".
SeriesSet read_ts(const std::string& path);
// The same from text in memory; `source` stands for the file name in messages.
SeriesSet parse_ts(std::string_view text, const std::string& source);

// The .ts text of a set: observed steps only (padding is not written), NaN as '?', each value
// with the fewest digits that read back as the same float. Throws kformer::Error for what the
// format cannot hold: both labels and targets, a non-finite target, a series without
// observed steps, class or problem names with white space or ':'.
std::string format_ts(const SeriesSet& data, const std::string& problem_name);
// format_ts written with write_file_atomic.
void write_ts(const std::string& path, const SeriesSet& data, const std::string& problem_name);

}  // namespace kformer::data

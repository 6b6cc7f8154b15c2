// data/: the .ts and CSV readers on small hand-written files (values, padding, labels, and the
// file:line:column of every malformed input), the .ts writer, standardization, splits, batches,
// and the Lorenz-96 default datasets.
#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/lorenz96.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/data/series_set.hpp>
#include <kformer/data/ts_format.hpp>

using namespace kformer;
using namespace kformer::data;

namespace {

const float NaN = std::numeric_limits<float>::quiet_NaN();

// A scratch directory, removed with everything in it at the end of the test.
struct ScratchDir {
  std::string path;
  std::vector<std::string> created;  // files and folders, removed in reverse order
  ScratchDir() {
    char name[] = "/tmp/kformer-data-XXXXXX";
    path = mkdtemp(name);
  }
  ~ScratchDir() {
    for (auto it = created.rbegin(); it != created.rend(); ++it)
      std::remove(it->c_str());
    rmdir(path.c_str());
  }
  std::string file(const std::string& name, const std::string& text) {
    const std::string full = path + "/" + name;
    std::ofstream(full, std::ios::binary) << text;
    if (std::find(created.begin(), created.end(), full) == created.end()) created.push_back(full);
    return full;
  }
  std::string folder(const std::string& name) {
    const std::string full = path + "/" + name;
    mkdir(full.c_str(), 0700);
    created.push_back(full);
    return full;
  }
  std::string track(const std::string& full) {
    created.push_back(full);
    return full;
  }
};

// The message of the kformer::Error that `read` throws, or "" when it throws none.
template <class Read>
std::string error_of(Read&& read) {
  try {
    read();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Values compared as bits, so that NaN positions count.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Element-wise equality where NaN equals NaN.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

}  // namespace

// --- .ts ----------------------------------------------------------------------------------------

TEST_CASE(".ts: equal-length multivariate classification", "[data][ts]") {
  ScratchDir dir;
  const std::string path = dir.file("tiny.ts",
                                    "# A comment line\n"
                                    "#another\n"
                                    "\n"
                                    "@problemName Tiny\n"
                                    "@TimeStamps false\n"
                                    "@missing true\n"
                                    "@univariate false\n"
                                    "@dimensions 2\n"
                                    "@equalLength true\n"
                                    "@seriesLength 3\n"
                                    "@classLabel true walk run\n"
                                    "@data\n"
                                    "1,2,3:4,5,6:run\n"
                                    " 7 , ? ,9:10,11,NaN:walk\r\n");
  const SeriesSet set = read_ts(path);
  CHECK(set.n_series == 2);
  CHECK(set.max_len == 3);
  CHECK(set.n_features == 2);
  CHECK(set.lengths == std::vector<std::int32_t>{3, 3});
  CHECK(set.class_names == std::vector<std::string>{"walk", "run"});  // declared order
  CHECK(set.labels == std::vector<std::int32_t>{1, 0});
  CHECK(set.n_targets == 0);
  // (series, step, feature): the .ts dimensions become the fastest index.
  CHECK(same_values(set.values, {1, 4, 2, 5, 3, 6, 7, 10, NaN, 11, 9, NaN}));
  CHECK_NOTHROW(set.validate("test"));
}

TEST_CASE(".ts: unequal-length univariate regression", "[data][ts]") {
  const SeriesSet set = parse_ts(
      "@problemName Reg\n@timeStamps false\n@missing false\n@univariate true\n"
      "@equalLength false\n@targetLabel true\n@data\n1.5,2.5:0.25\n-1e3,4,5,6:-2\n",
      "reg.ts");
  CHECK(set.n_series == 2);
  CHECK(set.max_len == 4);
  CHECK(set.n_features == 1);
  CHECK(set.lengths == std::vector<std::int32_t>{2, 4});
  CHECK(same_values(set.values, {1.5f, 2.5f, NaN, NaN, -1000, 4, 5, 6}));
  CHECK(set.n_targets == 1);
  CHECK(set.targets == std::vector<float>{0.25f, -2.0f});
  CHECK(set.class_names.empty());
  CHECK(set.labels.empty());
}

TEST_CASE(".ts: labels without declared names are sorted, and unlabelled files read",
          "[data][ts]") {
  const SeriesSet labelled =
      parse_ts("@dimension 1\n@classLabel true\n@data\n1,2:b\n3:a\n4:b\n", "x.ts");
  CHECK(labelled.class_names == std::vector<std::string>{"a", "b"});
  CHECK(labelled.labels == std::vector<std::int32_t>{1, 0, 1});
  CHECK(labelled.lengths == std::vector<std::int32_t>{2, 1, 1});

  const SeriesSet unlabelled = parse_ts("@classLabel false\n@data\n1,2:3,4\n5:6\n", "x.ts");
  CHECK(unlabelled.n_features == 2);  // from the first series
  CHECK(unlabelled.lengths == std::vector<std::int32_t>{2, 1});
  CHECK(same_values(unlabelled.values, {1, 3, 2, 4, 5, 6, NaN, NaN}));
  CHECK_FALSE(unlabelled.is_classification());
  CHECK_FALSE(unlabelled.is_regression());
}

TEST_CASE("Classes relabelled to a model's order: another order, a subset, an unknown class",
          "[data][ts]") {
  // The file lists its classes as walk, run; the model (trained in TST, which sorts labels)
  // knows run, sit, walk.
  SeriesSet set =
      parse_ts("@dimension 1\n@classLabel true walk run\n@data\n1:run\n2:walk\n3:run\n", "x.ts");
  REQUIRE(set.labels == std::vector<std::int32_t>{1, 0, 1});
  set.relabel_classes({"run", "sit", "walk"}, "here");
  CHECK(set.class_names == std::vector<std::string>{"run", "sit", "walk"});
  CHECK(set.labels == std::vector<std::int32_t>{0, 2, 0});

  SeriesSet other =
      parse_ts("@dimension 1\n@classLabel true jump walk\n@data\n1:jump\n2:walk\n", "y.ts");
  CHECK_THROWS_WITH(other.relabel_classes({"run", "sit", "walk"}, "here"),
                    "here: class(es) jump are not among the model's classes (run, sit, walk)");
  CHECK(other.labels == std::vector<std::int32_t>{0, 1});  // unchanged on error
}

TEST_CASE(".ts: malformed files name the file, line and column", "[data][ts][errors]") {
  const std::string header =
      "@problemName Bad\n@univariate false\n@dimensions 2\n@equalLength false\n"
      "@classLabel true a b\n@data\n";  // lines 1-6; the data starts on line 7
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"@problemName X\n@foo bar\n@data\n1:a\n", "bad.ts:2:1: unknown identifier @foo"},
      {"@timeStamps true\n@data\n1\n",
       "bad.ts:1:13: timestamped series (@timeStamps true) are not supported"},
      {header + "1.0,abc,3:1,2,3:a\n", "bad.ts:7:5: expected a number or '?', found 'abc'"},
      {header + "1,2,3:1,2:a\n", "bad.ts:7:7: dimension 2 has 2 values but dimension 1 has 3"},
      {header + "1:2:3:a\n",
       "bad.ts:7:6: expected 2 dimensions and a class label separated by ':', found 4 fields"},
      {header + "1,2:a\n",
       "bad.ts:7:6: expected 2 dimensions and a class label separated by "
       "':', found 2 fields"},
      {header + "1:2:c\n", "bad.ts:7:5: unknown class label 'c' (@classLabel declares: a b)"},
      {header + "1,,2:3,4,5:a\n", "bad.ts:7:3: expected a number or '?', found nothing"},
      {header + ":1,2:a\n", "bad.ts:7:1: expected a number or '?', found an empty dimension"},
      {header + "1e39:1:a\n", "bad.ts:7:1: value 1e39 does not fit in a float"},
      {header + "1:2:a\n1:2:3:b\n", "bad.ts:8:6: expected 2 dimensions and a class label"},
      {"@equalLength true\n@seriesLength 3\n@data\n1,2,3\n1,2\n",
       "bad.ts:5:1: the series has 2 steps but @seriesLength is 3 (line 2) and @equalLength is "
       "true"},
      {"@equalLength true\n@data\n1,2,3\n1,2\n",
       "bad.ts:4:1: the series has 2 steps but the first series has 3 (line 3)"},
      {"@problemName X\n", "bad.ts: no @data line"},
      {"", "bad.ts: no @data line"},
      {"@data\n\n", "bad.ts: no series after @data (line 1)"},
      {"@data\n1\n@classLabel true a\n",
       "bad.ts:3:1: expected a series, found the identifier '@classLabel' after @data"},
      {"@missing false\n@missing true\n", "bad.ts:2:1: @missing appears twice (first on line 1)"},
      {"@dimensions x\n", "bad.ts:1:13: expected a positive integer after @dimensions, found 'x'"},
      {"@dimensions 0\n", "bad.ts:1:13: expected a positive integer"},
      {"@missing maybe\n", "bad.ts:1:10: expected true or false after @missing, found 'maybe'"},
      {"@univariate true\n@dimensions 3\n", "bad.ts:2:13: @dimensions 3 contradicts @univariate"},
      {"@classLabel true a\n@targetLabel true\n",
       "bad.ts:2:14: a file has class labels or regression targets, not both"},
      {"@classLabel true a a\n", "bad.ts:1:20: class label 'a' is declared twice"},
      {"@targetLabel true\n@data\n1,2:high\n",
       "bad.ts:3:5: expected a numeric target, found 'high'"},
      {"@targetLabel true\n@data\n1,2:\n", "bad.ts:3:5: expected a label after the last ':'"},
      {"@data\n(1,2.0),(2,3.0)\n",
       "bad.ts:2:1: timestamped values '(time,value)' are not supported"},
      {"hello\n@data\n",
       "bad.ts:1:1: expected a '#' comment or an @identifier before @data, "
       "found 'hello'"},
      {"@classLabel false\n@data\n1:2:3\n1:2\n",
       "bad.ts:4:4: expected 3 dimensions separated by "
       "':', found 2 fields"},
  };
  ScratchDir dir;
  for (const auto& [text, expected] : cases) {
    const std::string path = dir.file("bad.ts", text);
    const std::string message = error_of([&] { read_ts(path); });
    INFO(text);
    CHECK_THAT(message, StartsWithText("kformer::data::read_ts: " + dir.path + "/") &&
                            ContainsText(expected));
  }
  CHECK_THAT(error_of([&] { read_ts(dir.path + "/missing.ts"); }),
             ContainsText("cannot read '" + dir.path + "/missing.ts'"));
  // With too many fields and no label declared, the message says why a label would not fit.
  CHECK_THAT(error_of([] { parse_ts("@dimensions 1\n@data\n1:a\n", "x.ts"); }),
             ContainsText("x.ts:3:2: expected 1 dimension separated by ':', found 2 fields "
                          "(no @classLabel or @targetLabel line declares a label)"));
}

TEST_CASE(".ts: written sets read back identically", "[data][ts]") {
  SeriesSet set;
  set.reset(3, 4, 2);
  set.lengths = {4, 2, 3};
  const std::vector<float> observed = {0.1f, -1e-7f, 3.4e38f,   1.0f / 3.0f, NaN,    2.0f,
                                       7.0f, 8.0f,   -0.5f,     16.0f,       1e-30f, NaN,
                                       5.0f, 6.0f,   123456.7f, -9.0f,       NaN,    0.0f};
  std::size_t next = 0;
  for (std::int64_t s = 0; s < 3; ++s)
    for (std::int64_t t = 0; t < set.lengths[s]; ++t)
      for (std::int64_t f = 0; f < 2; ++f)
        set.value(s, t, f) = observed[next++];
  set.class_names = {"x", "y"};
  set.labels = {1, 0, 1};

  ScratchDir dir;
  const std::string path = dir.track(dir.path + "/round.ts");
  write_ts(path, set, "RoundTrip");
  const SeriesSet back = read_ts(path);
  CHECK(back.n_series == 3);
  CHECK(back.max_len == 4);
  CHECK(back.n_features == 2);
  CHECK(back.lengths == set.lengths);
  CHECK(same_bits(back.values, set.values));
  CHECK(back.class_names == set.class_names);
  CHECK(back.labels == set.labels);
  // The header says what the data is.
  const std::string text = format_ts(set, "RoundTrip");
  CHECK_THAT(text, ContainsText("@missing true\n") && ContainsText("@dimensions 2\n") &&
                       ContainsText("@equalLength false\n") &&
                       ContainsText("@classLabel true x y\n"));
  CHECK_THAT(text, ContainsText("\n0.1,3.4e+38,?,7:-1e-07,0.33333334,2,8:y\n"));

  SeriesSet regression;
  regression.reset(2, 2, 1);
  regression.lengths = {2, 2};
  regression.values = {1, 2, 3, 4};
  regression.n_targets = 1;
  regression.targets = {0.5f, -1.25f};
  const SeriesSet regression_back = parse_ts(format_ts(regression, "R"), "r.ts");
  CHECK(regression_back.targets == regression.targets);
  CHECK(regression_back.values == regression.values);
  CHECK_THAT(format_ts(regression, "R"), ContainsText("@univariate true\n@equalLength true\n"
                                                      "@seriesLength 2\n@targetLabel true\n"));

  // Several targets per series: ','-separated after the last ':', read back in order.
  SeriesSet two_targets = regression;
  two_targets.n_targets = 2;
  two_targets.targets = {0.5f, 7.0f, -1.25f, 1e-3f};
  const std::string two_text = format_ts(two_targets, "R2");
  CHECK_THAT(two_text, ContainsText("\n1,2:0.5,7\n3,4:-1.25,0.001\n"));
  const SeriesSet two_back = parse_ts(two_text, "r2.ts");
  CHECK(two_back.n_targets == 2);
  CHECK(two_back.targets == two_targets.targets);
}

TEST_CASE(".ts: several regression targets need the same count on every line",
          "[data][ts][errors]") {
  const std::string head = "@problemName R\n@univariate true\n@targetLabel true\n@data\n";
  const SeriesSet three = parse_ts(head + "1,2:0.5,1,2\n3:4,5,6\n", "r.ts");
  CHECK(three.n_targets == 3);
  CHECK(three.targets == std::vector<float>{0.5f, 1, 2, 4, 5, 6});
  CHECK_THAT(error_of([&] { parse_ts(head + "1,2:0.5,1\n3:4\n", "r.ts"); }),
             ContainsText("r.ts:6:3: expected 2 targets (as on line 5), found 1"));
  CHECK_THAT(error_of([&] { parse_ts(head + "1,2:0.5,x\n", "r.ts"); }),
             ContainsText("r.ts:5:9: expected a numeric target, found 'x'"));
}

TEST_CASE(".ts: the writer refuses what the format cannot hold", "[data][ts][errors]") {
  SeriesSet set;
  set.reset(1, 2, 1);
  set.lengths = {2};
  set.values = {1, 2};
  CHECK_THAT(error_of([&] { format_ts(set, "has space"); }), ContainsText("problem name"));
  SeriesSet infinite_target = set;
  infinite_target.n_targets = 2;
  infinite_target.targets = {1, std::numeric_limits<float>::infinity()};
  CHECK_THAT(error_of([&] { format_ts(infinite_target, "P"); }),
             ContainsText("series 0 has a target that is not a finite number"));
  SeriesSet bad_class = set;
  bad_class.class_names = {"a b"};
  bad_class.labels = {0};
  CHECK_THAT(error_of([&] { format_ts(bad_class, "P"); }), ContainsText("class name 'a b'"));
  SeriesSet empty_series = set;
  empty_series.lengths = {0};
  empty_series.values = {NaN, NaN};
  CHECK_THAT(error_of([&] { format_ts(empty_series, "P"); }),
             ContainsText("series 0 has no observed steps"));
  SeriesSet inconsistent = set;
  inconsistent.values = {1, 2, 3};
  CHECK_THAT(error_of([&] { format_ts(inconsistent, "P"); }),
             ContainsText("values holds 3 entries, expected 2"));
}

// --- CSV ----------------------------------------------------------------------------------------

TEST_CASE("CSV, one file: rows by series id, sorted by time, missing values", "[data][csv]") {
  ScratchDir dir;
  const std::string path = dir.file("long.csv",
                                    "series_id,time,temp,\"pres,sure\",label\n"
                                    "b,1,5.5,?,storm\n"
                                    "a,1,1.5,10,calm\n"
                                    "a,0,0.5,,calm\n"
                                    "b,0, 4.5 ,NaN,storm\n"
                                    "\n"
                                    "a,2,2.5,nan,calm\r\n");
  CsvOptions options;
  options.time_column = "time";
  options.label_column = "label";
  const SeriesSet set = read_csv(path, options);
  CHECK(set.n_series == 2);  // b first: the order of first appearance
  CHECK(set.max_len == 3);
  CHECK(set.n_features == 2);
  CHECK(set.lengths == std::vector<std::int32_t>{2, 3});
  CHECK(same_values(set.values, {4.5f, NaN, 5.5f, NaN, NaN, NaN, 0.5f, NaN, 1.5f, 10, 2.5f, NaN}));
  CHECK(set.class_names == std::vector<std::string>{"calm", "storm"});
  CHECK(set.labels == std::vector<std::int32_t>{1, 0});

  // Without a time column the rows keep their file order; declared classes set the indices.
  options.time_column.clear();
  options.feature_columns = {"temp"};
  options.class_names = {"storm", "calm"};
  const SeriesSet in_file_order = read_csv(path, options);
  CHECK(in_file_order.n_features == 1);
  CHECK(same_values(in_file_order.values, {5.5f, 4.5f, NaN, 1.5f, 0.5f, 2.5f}));
  CHECK(in_file_order.labels == std::vector<std::int32_t>{0, 1});

  const std::string targets = dir.file("targets.csv",
                                       "series_id;x;y;z\n"
                                       "s1;1;0.5;7\n"
                                       "s1;2;0.5;7\n"
                                       "s2;3;-1;8\n");
  CsvOptions regression;
  regression.delimiter = ';';
  regression.target_columns = {"y", "z"};
  const SeriesSet r = read_csv(targets, regression);
  CHECK(r.n_features == 1);
  CHECK(r.n_targets == 2);
  CHECK(r.targets == std::vector<float>{0.5f, 7, -1, 8});
  CHECK(same_values(r.values, {1, 2, 3, NaN}));
}

TEST_CASE("CSV, one file: malformed input names the file, line and column", "[data][csv][errors]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"id,x\na,1\n", "bad.csv:1:1: no id column 'series_id' in the header (columns: id, x)"},
      {"series_id,x\na,1,2\n", "bad.csv:2:4: expected 2 fields as in the header (line 1), found 3"},
      {"series_id,x,y\na,1\n", "bad.csv:2:4: expected 3 fields as in the header (line 1), found 2"},
      {"series_id,x\na,abc\n",
       "bad.csv:2:3: column 'x': expected a number (or nothing, '?' or NaN for a missing value), "
       "found 'abc'"},
      {"series_id,x\na,1e40\n", "bad.csv:2:3: column 'x': 1e40 does not fit in a float"},
      {"series_id,x,label\na,1,p\na,2,q\n",
       "bad.csv:3:5: series 'a' has label 'q' here but 'p' on line 2"},
      {"series_id,x,label\na,1,\n", "bad.csv:2:5: column 'label': empty class label"},
      {"series_id,t,x\na,1,5\nb,1,5\na,1,6\n",
       "bad.csv:4:3: series 'a' has time 1 twice (also on line 2)"},
      {"series_id,t,x\na,,5\n", "bad.csv:2:3: column 't': expected a number, found ''"},
      {"series_id,x\n\"a,1\n", "bad.csv:2:1: unterminated quoted field"},
      {"series_id,x\n\"a\"b,1\n",
       "bad.csv:2:4: expected ',' or the end of the line after a quoted field, found 'b'"},
      {"", "bad.csv: no header line (the file is empty)"},
      {"series_id,x,x\n", "bad.csv:1:13: column 'x' appears twice in the header"},
      {"series_id,,x\n", "bad.csv:1:11: column 2 of the header has no name"},
      {"series_id,x\n", "bad.csv:2:1: no data rows after the header"},
      {"series_id,x,y\na,1,2\na,1,3\n",
       "bad.csv:3:5: series 'a' has targets that differ from those on line 2"},
      {"series_id,t,label\na,1,p\n", "bad.csv:1:1: no feature columns in the header"},
      {"series_id,x,label\na,1,p\nb,2,z\n",
       "bad.csv:3:5: series 'b': class label 'z' is not one of the given class names (p, q)"},
      {",x\n,1\n", "bad.csv:1:1: column 1 of the header has no name"},
      {"series_id,x\n,1\n", "bad.csv:2:1: column 'series_id': empty series id"},
  };
  ScratchDir dir;
  for (const auto& [text, expected] : cases) {
    const std::string path = dir.file("bad.csv", text);
    CsvOptions options;
    options.time_column = text.rfind("series_id,t,", 0) == 0 ? "t" : "";
    options.label_column = text.find(",label") != std::string::npos ? "label" : "";
    if (expected.find("targets that differ") != std::string::npos) options.target_columns = {"y"};
    if (expected.find("given class names") != std::string::npos) options.class_names = {"p", "q"};
    const std::string message = error_of([&] { read_csv(path, options); });
    INFO(text);
    CHECK_THAT(message, StartsWithText("kformer::data::read_csv: " + dir.path + "/") &&
                            ContainsText(expected));
  }
  CsvOptions clash;
  clash.time_column = "series_id";
  const std::string path = dir.file("ok.csv", "series_id,x\na,1\n");
  CHECK_THAT(error_of([&] { read_csv(path, clash); }),
             ContainsText("column 'series_id' is given two roles"));
  CsvOptions unknown_feature;
  unknown_feature.feature_columns = {"nope"};
  CHECK_THAT(error_of([&] { read_csv(path, unknown_feature); }),
             ContainsText("ok.csv:1:1: no feature column 'nope' in the header"));
  CHECK_THAT(error_of([&] { read_csv(dir.path + "/missing.csv"); }),
             ContainsText("cannot read '" + dir.path + "/missing.csv'"));
}

TEST_CASE("A UTF-8 byte order mark is skipped, and a header of 100 000 columns read in one pass",
          "[data][csv][ts]") {
  const std::string bom = "\xEF\xBB\xBF";
  const SeriesSet ts = parse_ts(bom + "@problemName p\n@univariate true\n@targetLabel true\n"
                                      "@data\n1,2:3\n",
                                "bom.ts");
  CHECK(ts.n_series == 1);
  CHECK(ts.targets == std::vector<float>{3});
  CsvOptions o;
  o.id_column = "id";
  const SeriesSet csv = parse_csv(bom + "id,x\na,1\na,2\n", "bom.csv", o);
  CHECK(csv.n_series == 1);
  CHECK(csv.n_features == 1);
  // 100 000 features: each header name checked against the others once (a pairwise check took a
  // minute), and a duplicate still found.
  std::string header = "id", row = "a";
  for (int c = 0; c < 100000; ++c) {
    header += ",c" + std::to_string(c);
    row += ",1";
  }
  const SeriesSet wide = parse_csv(header + "\n" + row + "\n", "wide.csv", o);
  CHECK(wide.n_features == 100000);
  CHECK_THAT(error_of([&] { parse_csv(header + ",c77\n" + row + ",1\n", "wide.csv", o); }),
             ContainsText("column 'c77' appears twice in the header"));
}

TEST_CASE("CSV, one file per series: labels file, time order, columns by name", "[data][csv]") {
  ScratchDir dir;
  const std::string series = dir.folder("series");
  dir.track(series + "/run1.csv");
  dir.track(series + "/run2.csv");
  dir.track(series + "/ignored.csv");
  std::ofstream(series + "/run1.csv") << "time,x,y\n1,2.0,20\n0,1.0,10\n";
  std::ofstream(series + "/run2.csv") << "y,time,x\n30,0,3.0\n?,1,4.0\n40,2,\n";
  std::ofstream(series + "/ignored.csv") << "not,a,series\n";
  const std::string labels = dir.file("labels.csv", "id,label\nrun2,storm\nrun1,calm\n");

  CsvDirectoryOptions options;
  options.time_column = "time";
  const SeriesSet set = read_csv_directory(series, labels, options);
  CHECK(set.n_series == 2);    // the labels file's order
  CHECK(set.n_features == 2);  // y, x: the first file's order without the time column
  CHECK(set.max_len == 3);
  CHECK(set.lengths == std::vector<std::int32_t>{3, 2});
  CHECK(same_values(set.values, {30, 3, NaN, 4, 40, NaN, 10, 1, 20, 2, NaN, NaN}));
  CHECK(set.class_names == std::vector<std::string>{"calm", "storm"});
  CHECK(set.labels == std::vector<std::int32_t>{1, 0});

  const std::string targets = dir.file("targets.csv", "id,target\nrun1,0.5\n");
  CsvDirectoryOptions regression;
  regression.label_column = "target";
  regression.regression = true;
  regression.feature_columns = {"x"};
  const SeriesSet r = read_csv_directory(series, targets, regression);
  CHECK(r.n_targets == 1);
  CHECK(r.targets == std::vector<float>{0.5f});
  CHECK(same_values(r.values, {2, 1}));  // file order: no time column given
  CHECK_FALSE(r.is_classification());
}

TEST_CASE("CSV, one file per series: errors point at the labels file or the series file",
          "[data][csv][errors]") {
  ScratchDir dir;
  const std::string series = dir.folder("series");
  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{{"run1.csv", "time,x,y\n0,1,2\n"},
                                                        {"run5.csv", "time,x\n0,1\n"},
                                                        {"run6.csv", "time,x,z\n0,1,2\n"},
                                                        {"run7.csv", "time,x,y\n"},
                                                        {"run8.csv", "time,x,y\n0,1,2\n0,3,4\n"}}) {
    dir.track(series + "/" + name);
    std::ofstream(series + "/" + name) << text;
  }
  CsvDirectoryOptions options;
  options.time_column = "time";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"id,label\nrun3,calm\n",
       "labels.csv:2:1: no file '" + series + "/run3.csv' for series 'run3'"},
      {"id,label\nrun1,a\nrun5,b\n",
       "run5.csv:1:1: columns (time, x) differ from those of the first series' file " + series +
           "/run1.csv (x, y, time)"},
      {"id,label\nrun1,a\nrun6,b\n",
       "run6.csv:1:1: no feature column 'y' in the header (columns: time, x, z)"},
      {"id,label\nrun1,a\nrun1,b\n",
       "labels.csv:3:1: series 'run1' is listed twice (first on line 2)"},
      {"id,label\n../run1,a\n", "labels.csv:2:1: column 'id': '../run1' is not a file name"},
      {"id,label\nrun7,a\n", "run7.csv:2:1: no data rows after the header"},
      {"id,label\nrun8,a\n", "run8.csv:3:1: series 'run8' has time 0 twice (also on line 2)"},
      {"id,label\nrun1,\n", "labels.csv:2:6: column 'label': empty class label"},
      {"name,label\nrun1,a\n",
       "labels.csv:1:1: no id column 'id' in the header (columns: name, label)"},
      {"id,label\n", "labels.csv:2:1: no series listed after the header"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string labels = dir.file("labels.csv", text);
    INFO(text);
    CHECK_THAT(error_of([&] { read_csv_directory(series, labels, options); }),
               StartsWithText("kformer::data::read_csv_directory: ") && ContainsText(expected));
  }
  CsvDirectoryOptions regression = options;
  regression.regression = true;
  const std::string labels = dir.file("labels.csv", "id,label\nrun1,tall\n");
  CHECK_THAT(error_of([&] { read_csv_directory(series, labels, regression); }),
             ContainsText("labels.csv:2:6: column 'label': expected a number, found 'tall'"));
}

// --- preprocessing ------------------------------------------------------------------------------

namespace {

// Two series of two features: lengths 3 and 2 (max_len 3), one missing value each.
SeriesSet small_set() {
  SeriesSet set;
  set.reset(2, 3, 2);
  set.lengths = {3, 2};
  set.values = {1, 4, 2,   4, 3,   NaN,  //
                5, 4, NaN, 4, NaN, NaN};
  set.class_names = {"a", "b"};
  set.labels = {0, 1};
  return set;
}

}  // namespace

TEST_CASE("Standardization fits on observed values and restores from its vectors",
          "[data][preprocess]") {
  SeriesSet set = small_set();
  const Standardization fitted = Standardization::fit(set);
  // Feature 0 observes 1, 2, 3, 5: mean 2.75; squared deviations 3.0625 + 0.5625 + 0.0625 +
  // 5.0625 = 8.75, sample variance 8.75 / 3. Feature 1 observes 4, 4, 4: std 0 -> 1.
  CHECK(fitted.mean[0] == Approx(2.75f));
  CHECK(fitted.std[0] == Approx(std::sqrt(8.75 / 3.0)));
  CHECK(fitted.mean[1] == 4.0f);
  CHECK(fitted.std[1] == 1.0f);

  const Standardization restored{fitted.mean, fitted.std};
  restored.apply(set);
  const float s0 = static_cast<float>(std::sqrt(8.75 / 3.0));
  CHECK(set.values[0] == Approx((1 - 2.75f) / s0));
  CHECK(set.values[1] == 0.0f);
  CHECK(set.values[6] == Approx((5 - 2.75f) / s0));
  CHECK(std::isnan(set.values[5]));   // missing stays missing
  CHECK(std::isnan(set.values[10]));  // padding stays padding
  restored.invert(set.values.data(), set.values.size());
  CHECK(set.values[0] == Approx(1.0f));
  CHECK(set.values[6] == Approx(5.0f));

  SeriesSet sparse;
  sparse.reset(1, 2, 2);
  sparse.lengths = {1};
  sparse.values = {7, NaN, NaN, NaN};  // feature 0 seen once, feature 1 never
  const Standardization s = Standardization::fit(sparse);
  CHECK(s.mean == std::vector<float>{7, 0});
  CHECK(s.std == std::vector<float>{1, 1});

  SeriesSet three_features;
  three_features.reset(1, 1, 3);
  CHECK_THROWS_WITH(fitted.apply(three_features),
                    ContainsText("fitted for 2 means and 2 stds, the data has 3 features"));
  const Standardization broken{{0, 0}, {1, 0}};
  CHECK_THROWS_WITH(broken.apply(set), ContainsText("feature 1 has mean 0 and std 0"));
  std::vector<float> ragged(3);
  CHECK_THROWS_WITH(fitted.apply(ragged.data(), ragged.size()),
                    ContainsText("3 values are not whole steps of 2 features"));
}

TEST_CASE("train_validation_split is deterministic, a partition, and stratified",
          "[data][preprocess]") {
  SeriesSet set;
  set.reset(40, 1, 1);
  set.class_names = {"a", "b", "c", "d"};
  for (std::int32_t s = 0; s < 40; ++s)
    set.labels.push_back(s < 10 ? 0 : s < 20 ? 1 : s < 30 ? 2 : 3);
  const Split first = train_validation_split(set, 0.2, 7);
  const Split again = train_validation_split(set, 0.2, 7);
  const Split other = train_validation_split(set, 0.2, 8);
  CHECK(first.train == again.train);
  CHECK(first.validation == again.validation);
  CHECK(first.validation != other.validation);
  CHECK(first.validation.size() == 8);
  std::map<std::int32_t, int> per_class;
  for (const auto s : first.validation)
    ++per_class[set.labels[s]];
  CHECK(per_class == std::map<std::int32_t, int>{{0, 2}, {1, 2}, {2, 2}, {3, 2}});
  std::vector<std::int64_t> all = first.train;
  all.insert(all.end(), first.validation.begin(), first.validation.end());
  std::sort(all.begin(), all.end());
  for (std::int64_t s = 0; s < 40; ++s)
    CHECK(all[s] == s);
  CHECK(std::is_sorted(first.train.begin(), first.train.end()));

  SeriesSet regression;
  regression.reset(10, 1, 1);
  CHECK(train_validation_split(regression, 0.25, 1).validation.size() == 3);  // round(2.5)
  CHECK(train_validation_split(regression, 0.0, 1).train.size() == 10);
  CHECK_THROWS_WITH(train_validation_split(regression, 1.0, 1),
                    ContainsText("validation fraction 1 is outside [0, 1)"));
}

TEST_CASE("seeded_shuffle draws every permutation equally often", "[data][preprocess]") {
  std::mt19937_64 rng(3);
  std::map<std::vector<std::int64_t>, int> counts;
  for (int trial = 0; trial < 6000; ++trial) {
    std::vector<std::int64_t> v = {0, 1, 2};
    seeded_shuffle(v, rng);
    ++counts[v];
  }
  REQUIRE(counts.size() == 6);
  for (const auto& [permutation, count] : counts)
    CHECK(std::abs(count - 1000) < 120);  // about 4 standard deviations
}

TEST_CASE("gather_batch fills preallocated buffers with values, masks and labels",
          "[data][preprocess]") {
  SeriesSet set = small_set();
  set.n_targets = 1;
  set.targets = {0.5f, -0.5f};
  HostBatch batch = make_batch_buffers(set, 3);
  CHECK(batch.values.size() == 3 * 3 * 2);
  CHECK(batch.padding_mask.size() == 3 * 3);
  const float* values = batch.values.data();
  const std::uint8_t* mask = batch.padding_mask.data();

  const std::vector<std::int64_t> order = {1, 0, 1};
  gather_batch(set, order, 0, 2, batch);  // series 1, then 0; the third row is padding
  CHECK(batch.size == 2);
  CHECK(same_values(batch.values, {5, 4, NaN, 4, NaN, NaN,  //
                                   1, 4, 2, 4, 3, NaN,      //
                                   NaN, NaN, NaN, NaN, NaN, NaN}));
  CHECK(batch.padding_mask == std::vector<std::uint8_t>{1, 1, 0, 1, 1, 1, 0, 0, 0});
  CHECK(batch.lengths == std::vector<std::int32_t>{2, 3, 0});
  CHECK(batch.labels == std::vector<std::int32_t>{1, 0, -1});
  CHECK(same_values(batch.targets, {-0.5f, 0.5f, NaN}));
  CHECK(batch.indices == std::vector<std::int64_t>{1, 0, -1});

  gather_batch(set, order, 2, 1, batch);  // a shorter batch clears the rows after it
  CHECK(batch.size == 1);
  CHECK(batch.padding_mask == std::vector<std::uint8_t>{1, 1, 0, 0, 0, 0, 0, 0, 0});
  CHECK(batch.indices == std::vector<std::int64_t>{1, -1, -1});
  CHECK(batch.values.data() == values);  // never reallocated
  CHECK(batch.padding_mask.data() == mask);

  CHECK_THROWS_WITH(gather_batch(set, {0, 1, 0, 1}, 0, 4, batch),
                    ContainsText("batch of 4 series, the buffers hold 3"));
  CHECK_THROWS_WITH(gather_batch(set, {0, 5}, 0, 2, batch),
                    ContainsText("index 5 at position 1 is outside [0, 2)"));
  CHECK_THROWS_WITH(gather_batch(set, order, 2, 2, batch),
                    ContainsText("series [2, 4) of an order of 3"));
  CHECK(batch.indices == std::vector<std::int64_t>{1, -1, -1});  // untouched by failures
  SeriesSet longer = set;
  longer.set_max_len(5);
  CHECK_THROWS_WITH(gather_batch(longer, order, 0, 1, batch),
                    ContainsText("the batch was made for series of (3 steps"));
}

TEST_CASE("SeriesSet subset, set_max_len and validate", "[data]") {
  const SeriesSet set = small_set();
  const SeriesSet picked = set.subset({1});
  CHECK(picked.n_series == 1);
  CHECK(picked.lengths == std::vector<std::int32_t>{2});
  CHECK(picked.labels == std::vector<std::int32_t>{1});
  CHECK(same_values(picked.values, {5, 4, NaN, 4, NaN, NaN}));
  CHECK_THROWS_WITH(set.subset({2}), ContainsText("index 2 is outside [0, 2)"));

  SeriesSet cut = set;
  cut.set_max_len(2);
  CHECK(cut.lengths == std::vector<std::int32_t>{2, 2});
  CHECK(same_values(cut.values, {1, 4, 2, 4, 5, 4, NaN, 4}));
  cut.set_max_len(4);
  CHECK(
      same_values(cut.values, {1, 4, 2, 4, NaN, NaN, NaN, NaN, 5, 4, NaN, 4, NaN, NaN, NaN, NaN}));
  CHECK_NOTHROW(cut.validate("test"));

  SeriesSet bad = set;
  bad.values[5 * 2 + 1] = 1.0f;  // series 1, step 2: padding
  CHECK_THROWS_WITH(bad.validate("kformer::test"),
                    ContainsText("kformer::test: series 1 (length 2) has a value in its padding"));
  bad = set;
  bad.labels[0] = 2;
  CHECK_THROWS_WITH(bad.validate("x"), ContainsText("series 0 has label 2, outside [0, 2)"));
}

// --- the default datasets -----------------------------------------------------------------------

TEST_CASE("Lorenz-96 data is deterministic per seed and per series", "[data][lorenz96]") {
  Lorenz96Options small;
  small.max_len = 24;
  const SeriesSet a = lorenz96_classification(12, 5, small);
  const SeriesSet b = lorenz96_classification(12, 5, small);
  const SeriesSet c = lorenz96_classification(12, 6, small);
  CHECK(same_bits(a.values, b.values));
  CHECK(a.lengths == b.lengths);
  CHECK_FALSE(same_bits(a.values, c.values));
  // Series i depends only on (seed, i): a longer set starts with the same series.
  const SeriesSet longer = lorenz96_classification(20, 5, small);
  CHECK(same_bits(longer.subset({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}).values, a.values));
  const SeriesSet r1 = lorenz96_regression(8, 9, small), r2 = lorenz96_regression(8, 9, small);
  CHECK(same_bits(r1.values, r2.values));
  CHECK(r1.targets == r2.targets);

  Lorenz96Options bad = small;
  bad.sample_interval = 0.1;
  bad.rk4_step = 0.03;
  CHECK_THROWS_WITH(lorenz96_classification(4, 1, bad),
                    ContainsText("kformer::data::lorenz96_classification: options out of range"));
}

namespace {

// Per-feature means of a series' observed values.
std::vector<double> feature_means(const SeriesSet& set, std::int64_t s) {
  std::vector<double> sum(set.n_features, 0.0);
  std::vector<int> count(set.n_features, 0);
  for (std::int64_t t = 0; t < set.lengths[s]; ++t)
    for (std::int64_t f = 0; f < set.n_features; ++f)
      if (!std::isnan(set.value(s, t, f))) {
        sum[f] += set.value(s, t, f);
        ++count[f];
      }
  for (std::int64_t f = 0; f < set.n_features; ++f)
    sum[f] /= count[f];
  return sum;
}

// Per-series statistics of single steps, blind to their order: per-feature means, variances and
// covariances of ring neighbours at the same step (over observed values).
std::vector<double> step_statistics(const SeriesSet& set, std::int64_t s) {
  const auto mean = feature_means(set, s);
  const std::int64_t k = set.n_features;
  std::vector<double> out = mean;
  std::vector<double> moments(2 * k, 0.0);
  std::vector<int> count(2 * k, 0);
  for (std::int64_t t = 0; t < set.lengths[s]; ++t)
    for (std::int64_t f = 0; f < k; ++f) {
      const double a = set.value(s, t, f), b = set.value(s, t, (f + 1) % k);
      if (!std::isnan(a)) moments[f] += (a - mean[f]) * (a - mean[f]), ++count[f];
      if (!std::isnan(a) && !std::isnan(b))
        moments[k + f] += (a - mean[f]) * (b - mean[(f + 1) % k]), ++count[k + f];
    }
  for (std::int64_t i = 0; i < 2 * k; ++i)
    out.push_back(moments[i] / count[i]);
  return out;
}

// A nearest class centroid classifier on features(set, s), fitted on `train`: its predictions
// for `test`.
template <class Features>
std::vector<int> nearest_centroid(const SeriesSet& train, const SeriesSet& test,
                                  const Features& features) {
  const std::size_t classes = train.class_names.size();
  std::vector<std::vector<double>> centroid(classes);
  std::vector<int> count(classes, 0);
  for (std::int64_t s = 0; s < train.n_series; ++s) {
    const auto x = features(train, s);
    auto& c = centroid[train.labels[s]];
    c.resize(x.size(), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i)
      c[i] += x[i];
    ++count[train.labels[s]];
  }
  for (std::size_t c = 0; c < classes; ++c)
    for (auto& x : centroid[c])
      x /= count[c];
  std::vector<int> predicted;
  for (std::int64_t s = 0; s < test.n_series; ++s) {
    const auto x = features(test, s);
    std::size_t best = 0;
    double best_distance = std::numeric_limits<double>::max();
    for (std::size_t c = 0; c < classes; ++c) {
      double d = 0;
      for (std::size_t i = 0; i < x.size(); ++i)
        d += (x[i] - centroid[c][i]) * (x[i] - centroid[c][i]);
      if (d < best_distance) best_distance = d, best = c;
    }
    predicted.push_back(static_cast<int>(best));
  }
  return predicted;
}

// The fraction of test series whose predicted label, mapped by `part`, matches.
template <class Part>
double agreement(const std::vector<int>& predicted, const SeriesSet& test, const Part& part) {
  int correct = 0;
  for (std::int64_t s = 0; s < test.n_series; ++s)
    correct += part(predicted[s]) == part(test.labels[s]);
  return double(correct) / double(test.n_series);
}

// Which way the waves run round the ring: the lag-1 cross-covariance of neighbours,
// sum_k sum_t x_k(t) x_{k+1}(t+1) - x_{k+1}(t) x_k(t+1), over centred values (missing ones as 0).
double wave_direction(const SeriesSet& set, std::int64_t s) {
  const auto mean = feature_means(set, s);
  const auto centred = [&](std::int64_t t, std::int64_t f) {
    const float v = set.value(s, t, f % set.n_features);
    return std::isnan(v) ? 0.0 : v - mean[f % set.n_features];
  };
  double sum = 0;
  for (std::int64_t t = 0; t + 1 < set.lengths[s]; ++t)
    for (std::int64_t k = 0; k < set.n_features; ++k)
      sum += centred(t, k) * centred(t + 1, k + 1) - centred(t, k + 1) * centred(t + 1, k);
  return sum;
}

}  // namespace

TEST_CASE("Missing values interpolated along time as TST does, padding and empty features kept",
          "[data][preprocess]") {
  // Two features; feature 0: NaN at the start, inside and at the end; feature 1 never observed.
  SeriesSet set;
  set.reset(2, 6, 2);
  set.lengths = {5, 2};
  const float values0[5] = {NaN, 1.0f, NaN, NaN, 4.0f};
  for (int t = 0; t < 5; ++t)
    set.value(0, t, 0) = values0[t];
  set.value(1, 0, 0) = NaN;
  set.value(1, 1, 0) = 7.0f;
  interpolate_missing(set);
  // pandas: Series([nan, 1, nan, nan, 4]).interpolate(method='linear', limit_direction='both')
  CHECK(set.value(0, 0, 0) == 1.0f);
  CHECK(set.value(0, 1, 0) == 1.0f);
  CHECK(set.value(0, 2, 0) == 2.0f);
  CHECK(set.value(0, 3, 0) == 3.0f);
  CHECK(set.value(0, 4, 0) == 4.0f);
  CHECK(std::isnan(set.value(0, 5, 0)));  // padding
  for (int t = 0; t < 6; ++t)
    CHECK(std::isnan(set.value(0, t, 1)));  // no observed value: stays NaN
  CHECK(set.value(1, 0, 0) == 7.0f);        // a trailing value extended backwards
  CHECK(set.value(1, 1, 0) == 7.0f);
  CHECK(std::isnan(set.value(1, 2, 0)));
  CHECK(parse_missing_values("interpolate", "w") == MissingValues::Interpolate);
  CHECK_THROWS_WITH(parse_missing_values("mean", "w"),
                    "w: missing values 'mean': expected zero or interpolate");
}

TEST_CASE("Lorenz-96 default pool: balanced classes, none of the default sets' series",
          "[data][lorenz96]") {
  const SeriesSet pool = default_pool_dataset(40, 2021);
  const DefaultDatasets sets = generate_default_datasets(2021);
  CHECK(pool.n_series == 40);
  CHECK(pool.class_names == sets.classification_train.class_names);
  CHECK_NOTHROW(pool.validate("pool"));
  for (std::int64_t s = 0; s < pool.n_series; ++s)
    CHECK(pool.labels[s] == s % 4);
  // Its own seed: no series equals one of the classification sets' at the same index.
  for (const SeriesSet* set : {&sets.classification_train, &sets.classification_test})
    for (std::int64_t s = 0; s < pool.n_series; ++s)
      CHECK(pool.value(s, 0, 0) != set->value(s, 0, 0));
  // The same seed gives the same pool.
  CHECK(same_values(default_pool_dataset(40, 2021).values, pool.values));
}

TEST_CASE("Lorenz-96 default datasets: shapes, balance, missing values, learnable classes",
          "[data][lorenz96]") {
  const DefaultDatasets sets = generate_default_datasets(2021);
  const SeriesSet& train = sets.classification_train;
  const SeriesSet& test = sets.classification_test;
  CHECK(train.n_series == 600);
  CHECK(test.n_series == 200);
  CHECK(sets.regression_train.n_series == 600);
  CHECK(sets.regression_test.n_series == 200);
  for (const SeriesSet* set : {&train, &test, &sets.regression_train, &sets.regression_test}) {
    CHECK(set->n_features == 8);
    CHECK(set->max_len == 96);
    CHECK_NOTHROW(set->validate("default data"));  // padding is NaN, labels in range
    std::int64_t observed = 0, missing = 0, too_short = 0, out_of_range = 0;
    for (std::int64_t s = 0; s < set->n_series; ++s) {
      too_short += set->lengths[s] < 58;  // ceil(0.6 * 96)
      for (std::int64_t t = 0; t < set->lengths[s]; ++t)
        for (std::int64_t f = 0; f < 8; ++f) {
          const float v = set->value(s, t, f);
          ++observed;
          if (std::isnan(v))
            ++missing;
          else
            out_of_range += !(std::isfinite(v) && std::abs(v) < 50);
        }
    }
    CHECK(too_short == 0);
    CHECK(out_of_range == 0);
    const double missing_fraction = double(missing) / double(observed);
    CHECK(missing_fraction > 0.025);
    CHECK(missing_fraction < 0.035);
  }
  CHECK(*std::min_element(train.lengths.begin(), train.lengths.end()) < 62);
  CHECK(*std::max_element(train.lengths.begin(), train.lengths.end()) == 96);
  std::vector<int> per_class(4, 0);
  for (const auto label : train.labels)
    ++per_class[label];
  CHECK(per_class == std::vector<int>{150, 150, 150, 150});
  const auto [lowest, highest] = std::minmax_element(sets.regression_train.targets.begin(),
                                                     sets.regression_train.targets.end());
  CHECK(*lowest >= 1.5f);
  CHECK(*highest <= 10.0f);

  // Per-feature means give the regime but not the direction of time: about 50 %.
  const auto same = [](int label) { return label; };
  const auto regime_of = [](int label) { return label / 2; };
  const auto direction_of = [](int label) { return label % 2; };
  const auto by_means = nearest_centroid(train, test, feature_means);
  CHECK(agreement(by_means, test, same) > 0.4);
  CHECK(agreement(by_means, test, same) < 0.65);
  CHECK(agreement(by_means, test, regime_of) > 0.95);
  // Nothing about single steps tells the direction of time (the same states are visited both
  // ways): chance, give or take the test set's 200 series.
  const auto by_steps = nearest_centroid(train, test, step_statistics);
  CHECK(agreement(by_steps, test, direction_of) < 0.62);
  // Consecutive steps do: the regime from the level of the series (as the centroids do) and the
  // direction of time from the way the waves run round the ring.
  int correct = 0;
  for (std::int64_t s = 0; s < test.n_series; ++s) {
    double level = 0;
    for (const double m : feature_means(test, s))
      level += m / 8;
    const int regime = level > 1.8 ? 1 : 0;  // periodic means ~1.1-1.6, chaotic ~2.1-2.7
    const int backward = wave_direction(test, s) > 0 ? 1 : 0;
    correct += (2 * regime + backward) == test.labels[s];
  }
  CHECK(double(correct) / double(test.n_series) > 0.95);

  // The forcing drives the level of the series: the regression target is in the data.
  double sxy = 0, sxx = 0, syy = 0, mx = 0, my = 0;
  const SeriesSet& reg = sets.regression_train;
  std::vector<double> level(reg.n_series);
  for (std::int64_t s = 0; s < reg.n_series; ++s) {
    for (const double m : feature_means(reg, s))
      level[s] += m / 8;
    mx += level[s] / double(reg.n_series);
    my += reg.targets[s] / double(reg.n_series);
  }
  for (std::int64_t s = 0; s < reg.n_series; ++s) {
    sxy += (level[s] - mx) * (reg.targets[s] - my);
    sxx += (level[s] - mx) * (level[s] - mx);
    syy += (reg.targets[s] - my) * (reg.targets[s] - my);
  }
  CHECK(sxy / std::sqrt(sxx * syy) > 0.8);

  // The generated data survives the .ts writer and reader unchanged.
  ScratchDir dir;
  const std::string path = dir.track(dir.path + "/train.ts");
  write_ts(path, train, "Lorenz96Regimes");
  const SeriesSet back = read_ts(path);
  CHECK(same_bits(back.values, train.values));
  CHECK(back.labels == train.labels);
  CHECK(back.class_names == train.class_names);
}

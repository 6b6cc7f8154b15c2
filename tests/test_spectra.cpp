// Mass spectra: the MSP and MGF readers on small hand-written files (peaks, precursor, metadata,
// the separators and comments the formats allow, BOM and Windows line ends), every malformed input
// refused with its file:line:column and the spectrum's index and title, the writers read back
// unchanged, each preprocessing step against values worked out by hand, the synthetic spectra,
// binary cross-entropy against its closed form, and the spectrum transformer on every backend:
// gradients against finite differences (fixed, learnable and no positional encoding), padding that
// changes nothing, its representations against the logits they give, and its checkpoints.
#include "support/catch.hpp"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/core/error.hpp>
#include <kformer/data/spectra_format.hpp>
#include <kformer/data/spectra_generator.hpp>
#include <kformer/losses/binary_cross_entropy.hpp>
#include <kformer/models/spectrum_transformer.hpp>
#include <kformer/training/spectrum_checkpoint.hpp>

#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::data;
using namespace kformer::testing;

namespace {

const char* const kMsp =
    "# a library of two spectra\n"
    "Name: caffeine\n"
    "PrecursorMZ: 195.0877\n"
    "Formula: C8H10N4O2\n"
    "Num Peaks: 3\n"
    "110.0713 12.5\n"
    "138.0662\t100; 195.0877 45.1 \"the precursor\"\n"
    "\n"
    "NAME: theophylline\n"
    "precursor_mz: 181.072\n"
    "num peaks: 2\n"
    "124.05:30,181.072:100\n";

const char* const kMgf =
    "COM=global parameters are skipped\n"
    "BEGIN IONS\n"
    "TITLE=caffeine\n"
    "PEPMASS=195.0877 1200000\n"
    "CHARGE=1+\n"
    "RTINSECONDS=62.5\n"
    "110.0713 12.5\n"
    "# a comment\n"
    "138.0662 100 1+\n"
    "END IONS\n"
    "\n"
    "begin ions\n"
    "TITLE=theophylline\n"
    "PEPMASS=181.072\n"
    "124.05\t30\n"
    "end ions\n";

}  // namespace

TEST_CASE("MSP: peaks, precursor and metadata, with the separators NIST files use", "[spectra]") {
  const auto spectra = parse_msp(kMsp, "lib.msp");
  REQUIRE(spectra.size() == 2);
  CHECK(spectra[0].title == "caffeine");
  CHECK(spectra[0].precursor_mz == 195.0877);
  CHECK(spectra[0].mz == std::vector<double>{110.0713, 138.0662, 195.0877});
  CHECK(spectra[0].intensity == std::vector<double>{12.5, 100, 45.1});
  REQUIRE(spectra[0].metadata.size() == 1);
  CHECK(spectra[0].metadata[0] == std::pair<std::string, std::string>{"formula", "C8H10N4O2"});
  CHECK(spectra[1].title == "theophylline");
  CHECK(spectra[1].precursor_mz == 181.072);
  CHECK(spectra[1].mz == std::vector<double>{124.05, 181.072});
  CHECK(spectra[1].intensity == std::vector<double>{30, 100});
  // a byte order mark and Windows line ends read the same
  std::string crlf = "\xEF\xBB\xBF";
  for (const char* c = kMsp; *c; ++c)
    crlf += *c == '\n' ? std::string("\r\n") : std::string(1, *c);
  const auto again = parse_msp(crlf, "lib.msp");
  REQUIRE(again.size() == 2);
  CHECK(again[0].mz == spectra[0].mz);
  CHECK(again[1].intensity == spectra[1].intensity);
}

TEST_CASE("MGF: blocks, PEPMASS with its intensity, charge and metadata", "[spectra]") {
  const auto spectra = parse_mgf(kMgf, "run.mgf");
  REQUIRE(spectra.size() == 2);
  CHECK(spectra[0].title == "caffeine");
  CHECK(spectra[0].precursor_mz == 195.0877);
  CHECK(spectra[0].precursor_intensity == 1200000);
  CHECK(spectra[0].charge == "1+");
  CHECK(spectra[0].mz == std::vector<double>{110.0713, 138.0662});
  CHECK(spectra[0].intensity == std::vector<double>{12.5, 100});
  REQUIRE(spectra[0].metadata.size() == 1);
  CHECK(spectra[0].metadata[0].first == "rtinseconds");
  CHECK(std::isnan(spectra[1].precursor_intensity));
  CHECK(spectra[1].mz == std::vector<double>{124.05});
}

TEST_CASE("MSP and MGF writers read back unchanged", "[spectra]") {
  for (const bool msp : {true, false}) {
    const auto spectra = msp ? parse_msp(kMsp, "a") : parse_mgf(kMgf, "a");
    const auto back =
        msp ? parse_msp(format_msp(spectra), "b") : parse_mgf(format_mgf(spectra), "b");
    REQUIRE(back.size() == spectra.size());
    for (std::size_t i = 0; i < back.size(); ++i) {
      CHECK(back[i].title == spectra[i].title);
      CHECK(back[i].mz == spectra[i].mz);
      CHECK(back[i].intensity == spectra[i].intensity);
      CHECK(back[i].precursor_mz == spectra[i].precursor_mz);
      CHECK(back[i].metadata == spectra[i].metadata);
    }
  }
  Spectrum bad;
  bad.title = "two\nlines";
  bad.mz = {100};
  bad.intensity = {1};
  CHECK_THROWS_WITH(format_msp({bad}),
                    ContainsText("spectrum 1 'two\nlines': its title holds a line break"));
  CHECK_THROWS_WITH(format_mgf({Spectrum()}), ContainsText("a spectrum needs at least one peak"));
}

TEST_CASE("MSP: malformed spectra are refused, naming the line, the spectrum and the problem",
          "[spectra]") {
  const std::string first = "Name: a\nNum Peaks: 1\n100 1\n\n";
  const auto refused = [&](const std::string& second, const std::string& message) {
    CAPTURE(second);
    CHECK_THROWS_WITH(parse_msp(first + second, "x.msp"), ContainsText(message));
  };
  refused("Name: b\nNum Peaks: 2\n100\n",
          "x.msp:7:1: spectrum 2 'b': the peak m/z '100' has no intensity");
  refused("Name: b\nNum Peaks: 1\n-5 1\n",
          "x.msp:7:1: spectrum 2 'b': a peak's m/z must be a positive number, got '-5'");
  refused("Name: b\nNum Peaks: 1\nnan 1\n", "expected 'Key: value' or a peak line, got 'nan 1'");
  refused("Name: b\nNum Peaks: 1\n100 nan\n",
          "a peak's intensity must be a non-negative number, got 'nan'");
  refused("Name: b\nNum Peaks: 1\n100 -1\n",
          "a peak's intensity must be a non-negative number, got '-1'");
  refused("Name: b\nNum Peaks: 3\n100 1\n101 2\n\n",
          "spectrum 2 'b': 'Num Peaks: 3' but 2 peaks before the blank line");
  refused("Name: b\nNum Peaks: 3\n100 1\n",
          "'Num Peaks: 3' but 1 peaks before the end of the file");
  refused("Name: b\nNum Peaks: 1\n100 1\n101 2\n",
          "x.msp:8:1: spectrum 2 'b': more peaks than its 'Num Peaks: 1'");
  refused("Name: b\nNum Peaks: 0\n", "spectrum 2 'b': has no peaks ('Num Peaks: 0')");
  refused("Name: b\nNum Peaks: two\n", "'Num Peaks:' must be a whole number, got 'two'");
  refused("Name: b\n100 1\n", "spectrum 2 'b': a peak line before the 'Num Peaks:' line");
  refused("Name: b\nPrecursorMZ: abc\nNum Peaks: 1\n100 1\n",
          "the precursor m/z must be a positive number, got 'abc'");
  refused("Name: b\nComment: c\n", "the file ends before its 'Num Peaks:' line");
  refused("Name: b\nName: c\n", "spectrum 2 'b': a new 'Name:' before this one's 'Num Peaks:'");
  refused("Name: b\nNum Peaks: 1\n100 1 \"open\n", "an annotation's closing quote is missing");
  refused("just text\n", "x.msp:5:1: expected 'Key: value' or a peak line, got 'just text'");
  // more peaks than max_peaks: refused at the Num Peaks line, before reading them
  std::string huge = "Name: big\nNum Peaks: 1000000\n";
  CHECK_THROWS_WITH(
      parse_msp(huge, "big.msp"),
      ContainsText(
          "big.msp:2:12: spectrum 1 'big': 'Num Peaks: 1000000' is more than 100000 peaks"));
  SpectraReadOptions few;
  few.max_peaks = 2;
  CHECK_THROWS_WITH(parse_msp("Name: a\nNum Peaks: 2\n1 1 2 2\nName: b\nNum Peaks: 3\n", "x", few),
                    ContainsText("'Num Peaks: 3' is more than 2 peaks"));
}

TEST_CASE("MGF: malformed spectra are refused, naming the line, the spectrum and the problem",
          "[spectra]") {
  const std::string first = "BEGIN IONS\nTITLE=a\n100 1\nEND IONS\n";
  const auto refused = [&](const std::string& second, const std::string& message) {
    CAPTURE(second);
    CHECK_THROWS_WITH(parse_mgf(first + second, "x.mgf"), ContainsText(message));
  };
  refused("BEGIN IONS\nTITLE=b\n100\nEND IONS\n",
          "x.mgf:7:1: spectrum 2 'b': the peak m/z '100' has no intensity");
  refused("BEGIN IONS\nTITLE=b\n100 1\n",
          "x.mgf:7:1: spectrum 2 'b': the file ends before its 'END IONS'");
  refused("BEGIN IONS\nTITLE=b\n100 1\nBEGIN IONS\n",
          "x.mgf:8:1: spectrum 2 'b': 'BEGIN IONS' before this spectrum's 'END IONS'");
  refused("BEGIN IONS\nTITLE=b\nEND IONS\n", "x.mgf:7:1: spectrum 2 'b': has no peaks");
  refused("END IONS\n", "'END IONS' without 'BEGIN IONS'");
  refused("BEGIN IONS\nTITLE=b\n-1 5\nEND IONS\n",
          "a peak's m/z must be a positive number, got '-1'");
  refused("BEGIN IONS\nTITLE=b\n100 inf\nEND IONS\n",
          "a peak's intensity must be a non-negative number, got 'inf'");
  refused("BEGIN IONS\nTITLE=b\nPEPMASS=x\n",
          "the precursor m/z must be a positive number, got 'x'");
  refused("BEGIN IONS\nTITLE=b\nPEPMASS=100 -3\n",
          "PEPMASS's intensity must be a non-negative number, got '-3'");
  refused("BEGIN IONS\nTITLE=b\n1 2 3 4\nEND IONS\n",
          "a peak line holds m/z, intensity and at most a charge");
  refused("BEGIN IONS\nTITLE=b\nsomething\nEND IONS\n",
          "expected 'KEY=value', a peak line or 'END IONS', got 'something'");
  refused("100 1\n", "x.mgf:5:1: expected 'BEGIN IONS', got '100 1'");
  SpectraReadOptions few;
  few.max_peaks = 1;
  CHECK_THROWS_WITH(parse_mgf("BEGIN IONS\nTITLE=t\n1 1\n2 2\nEND IONS\n", "x", few),
                    ContainsText("x:4:1: spectrum 1 't': more than 1 peaks"));
}

TEST_CASE("Spectrum preprocessing: normalising, threshold, merging, top k, precursor token",
          "[spectra]") {
  Spectrum s;
  s.title = "s";
  s.precursor_mz = 300;
  s.mz = {200.0, 100.0, 100.004, 150.0, 250.0};
  s.intensity = {40, 10, 30, 80, 2};
  SpectrumPreprocessing none;
  none.normalize = false;
  auto t = preprocess(s, none);
  CHECK(t.mz == std::vector<double>{100.0, 100.004, 150.0, 200.0, 250.0});  // by m/z
  CHECK(t.intensity == std::vector<double>{10, 30, 80, 40, 2});
  SpectrumPreprocessing all;
  all.merge_tolerance = 0.01;        // 100.0 and 100.004 merge: m/z (100*10 + 100.004*30) / 40
  all.min_relative_intensity = 0.1;  // 250 (2/80) goes
  all.top_k = 2;                     // then the 2 most intense: 150 (80), and of 100 and 200
  all.precursor_token = true;        // (40 each) the lower m/z
  t = preprocess(s, all);
  REQUIRE(t.mz.size() == 3);
  CHECK(t.mz[0] == 300);
  CHECK(t.intensity[0] == 2.0);
  CHECK(t.mz[1] == Approx((100.0 * 10 + 100.004 * 30) / 40).epsilon(1e-15));
  CHECK(t.mz[2] == 150.0);
  CHECK(t.intensity[1] == 0.5);
  CHECK(t.intensity[2] == 1.0);
  all.top_k = 0;
  CHECK(preprocess(s, all).mz.size() == 4);  // the precursor, 100, 150 and 200 (250 is below 10 %)
  SpectrumPreprocessing bad;
  bad.top_k = -1;
  CHECK_THROWS_WITH(preprocess(s, bad), ContainsText("top_k must be at least 0, got -1"));
  bad = {};
  bad.min_relative_intensity = 2;
  CHECK_THROWS_WITH(preprocess(s, bad),
                    ContainsText("min_relative_intensity must be in [0, 1], got 2"));
}

TEST_CASE("Generated spectra follow their documented model", "[spectra]") {
  GeneratedSpectraOptions o;
  o.spectra = 200;
  o.bits = 16;
  o.noise_peaks = 0;
  o.missing = 0;
  o.seed = 4;
  const auto spectra = generate_spectra(o);
  REQUIRE(spectra.size() == 200);
  const auto again = generate_spectra(o);
  CHECK(again[17].mz == spectra[17].mz);  // the seed decides everything
  for (std::size_t i = 0; i < spectra.size(); ++i) {
    const auto bits = fingerprint_of(spectra[i], 16, i);
    int set = 0;
    for (const auto b : bits)
      set += b;
    CHECK(set >= 1);
    // without noise or missing fragments: 2 fragments per set bit, within 10 ppm x 6 sigma
    CHECK(spectra[i].mz.size() == std::size_t(2 * set));
    for (const double mz : spectra[i].mz)
      CHECK((mz > 50 * (1 - 6e-5) && mz < 500 * (1 + 6e-5)));
    CHECK(class_of(spectra[i], 4, i) == bits[0] + 2 * bits[1]);
  }
  Spectrum unlabelled;
  unlabelled.title = "u";
  CHECK_THROWS_WITH(fingerprint_of(unlabelled, 16, 2),
                    ContainsText("spectrum 3 'u' has no 'Fingerprint' field"));
  unlabelled.metadata = {{"fingerprint", "0102"}, {"class", "7"}};
  CHECK_THROWS_WITH(fingerprint_of(unlabelled, 4, 0),
                    ContainsText("fingerprint character 4 is '2', expected 0 or 1"));
  CHECK_THROWS_WITH(fingerprint_of(unlabelled, 8, 0),
                    ContainsText("its fingerprint has 4 bits, expected 8"));
  CHECK_THROWS_WITH(class_of(unlabelled, 4, 0),
                    ContainsText("class '7' is not a whole number in [0, 4)"));
}

TEMPLATE_LIST_TEST_CASE("Binary cross-entropy with logits against its closed form",
                        "[spectra][losses]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const std::vector<double> z = {-60, -3, -0.5, 0, 0.25, 2, 45, 1e-3};
  const std::vector<double> y = {0, 1, 1, 0, 1, 0, 1, 1};
  Tensor2<double, M> d("d", 2, 4);
  BinaryCrossEntropy<double, Space> bce;
  const double value =
      bce(Space(), device_from<double, Space>(z, 2, 4), device_from<double, Space>(y, 2, 4), d);
  double expected = 0;
  std::vector<double> grad(8);
  for (int i = 0; i < 8; ++i) {
    // log(1 + e^z) - y z, and sigmoid(z) - y, each written another way
    expected +=
        (z[i] > 0 ? z[i] + std::log1p(std::exp(-z[i])) : std::log1p(std::exp(z[i]))) - y[i] * z[i];
    grad[i] = (1 / (1 + std::exp(-z[i])) - y[i]) / 8;
  }
  CHECK(value == Approx(expected / 8).epsilon(1e-14));
  CHECK(max_abs_diff(host_values(d), grad) < 1e-16);
  CHECK_THROWS_WITH(
      bce(Space(), device_from<double, Space>(z, 2, 4), device_from<double, Space>(y, 4, 2), d),
      ContainsText("targets has shape (4, 2), expected (2, 4)"));
}

TEMPLATE_LIST_TEST_CASE("SpectrumTransformer: gradients, and padding changes nothing",
                        "[spectra][gradcheck]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  using Mask = Kokkos::View<bool**, Kokkos::LayoutRight, M>;
  SpectrumTransformerOptions o;
  o.d_model = 8;
  o.heads = 2;
  o.layers = 1;
  o.dim_feedforward = 12;
  o.outputs = 5;
  o.seed = 3;
  // 2 spectra of 4 token slots; the second has 3 peaks and one padding slot
  const std::vector<double> mz = {101.5, 150.25, 230.0, 410.7, 88.1, 120.0, 300.3, 0.0};
  const std::vector<double> intensity = {0.3, 1.0, 0.05, 0.6, 1.0, 0.2, 0.7, 0.0};
  const auto padding = [&](int peaks, const std::vector<int>& valid) {
    Mask m("padding", 2, peaks);
    auto h = Kokkos::create_mirror_view(m);
    for (int b = 0; b < 2; ++b)
      for (int s = 0; s < peaks; ++s)
        h(b, s) = s >= valid[b];
    Kokkos::deep_copy(m, h);
    return m;
  };
  for (const auto pe : {PositionalEncodingKind::Fixed, PositionalEncodingKind::Learnable,
                        PositionalEncodingKind::None}) {
    for (const bool in : {true, false}) {
      CAPTURE(to_string(pe), in);
      o.positional_encoding = pe;
      o.max_tokens = 4;
      o.intensity_encoding = in;
      SpectrumTransformer<double, Space> model(Space(), o);
      const auto mzd = device_from<double, Space>(mz, 2, 4);
      const auto ind = device_from<double, Space>(intensity, 2, 4);
      const auto pad = padding(4, {4, 3});
      const auto fwd = [&](const std::vector<double>&) {
        Tensor2<double, M> logits("logits", 2, 5);
        model.forward(Space(), {}, mzd, ind, pad, logits);
        return host_values(logits);
      };
      const auto bwd = [&](const std::vector<double>&, const std::vector<double>& dy) {
        Tensor2<double, M> logits("logits", 2, 5);
        model.forward(Space(), {}, mzd, ind, pad, logits);
        model.backward(Space(), {}, mzd, pad, device_from<double, Space>(dy, 2, 5));
        return std::vector<double>{};
      };
      check_gradients(gradcheck<Space>(model, {0.0}, fwd, bwd, 7), 1e-6);
      // The second spectrum alone, in 3 slots without padding: the same logits.
      const std::vector<double> mz3 = {88.1, 120.0, 300.3}, in3 = {1.0, 0.2, 0.7};
      Tensor2<double, M> one("one", 1, 5), both("both", 2, 5);
      Mask none("none", 1, 3);
      model.forward(Space(), {}, device_from<double, Space>(mz3, 1, 3),
                    device_from<double, Space>(in3, 1, 3), none, one);
      model.forward(Space(), {}, mzd, ind, pad, both);
      const auto b = host_values(both);
      CHECK(max_abs_diff(host_values(one), std::vector<double>(b.begin() + 5, b.end())) < 1e-12);
    }
  }
  o.d_model = 6;
  o.heads = 4;
  CHECK_THROWS_WITH(
      (SpectrumTransformer<double, Space>(Space(), o)),
      ContainsText(
          "d_model must be at least 2 and a multiple of heads, got d_model 6 and heads 4"));
}

TEST_CASE("The hand-written example files read as MSP and MGF alike", "[spectra]") {
  // tests/spectra/example.{msp,mgf}: the same two spectra in both formats (also the files
  // tools/compare_matchms.py was run on)
  const std::string dir = std::string(KFORMER_GOLDEN_DIR) + "/../spectra/";
  const auto msp = read_msp(dir + "example.msp");
  const auto mgf = read_mgf(dir + "example.mgf");
  REQUIRE(msp.size() == 2);
  REQUIRE(mgf.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(msp[i].title == mgf[i].title);
    CHECK(msp[i].precursor_mz == mgf[i].precursor_mz);
    CHECK(msp[i].mz == mgf[i].mz);
    CHECK(msp[i].intensity == mgf[i].intensity);
  }
  CHECK(msp[0].mz.size() == 5);
  CHECK(msp[0].metadata.size() == 4);  // synon, precursor_type, formula, comments
  CHECK_THROWS_WITH(read_msp(dir + "missing.msp"), ContainsText("missing.msp"));
}

namespace {

std::string temporary_directory() {
  char name[] = "/tmp/kformer-spectra-XXXXXX";
  return mkdtemp(name);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "SpectrumTransformer: checkpoints load bit for bit, and embed gives what the head reads",
    "[spectra][checkpoint]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  using Mask = Kokkos::View<bool**, Kokkos::LayoutRight, M>;
  SpectrumTransformerOptions o;
  o.d_model = 8;
  o.heads = 2;
  o.layers = 2;
  o.dim_feedforward = 12;
  o.outputs = 6;
  o.positional_encoding = PositionalEncodingKind::Learnable;
  o.max_tokens = 5;
  o.seed = 3;
  SpectrumTransformer<double, Space> trained(Space(), o);
  // Weights unlike any seed's: every parameter shifted by a value of its own.
  std::size_t index = 0;
  trained.visit_parameters([&](const std::string&, auto& p) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.value);
    for (std::size_t i = 0; i < h.size(); ++i)
      h.data()[i] += 0.01 * std::sin(double(++index));
    Kokkos::deep_copy(p.value, h);
  });
  const std::vector<double> mz = {101.5, 150.25, 230.0, 410.7, 88.1, 120.0, 300.3, 0.0};
  const std::vector<double> intensity = {0.3, 1.0, 0.05, 0.6, 1.0, 0.2, 0.7, 0.0};
  const auto mzd = device_from<double, Space>(mz, 2, 4);
  const auto ind = device_from<double, Space>(intensity, 2, 4);
  Mask pad("padding", 2, 4);
  Kokkos::deep_copy(Kokkos::subview(pad, 1, 3), true);
  const auto logits_of = [&](SpectrumTransformer<double, Space>& model) {
    Tensor2<double, M> logits("logits", 2, 6);
    model.forward(Space(), {}, mzd, ind, pad, logits);
    return host_values(logits);
  };
  const std::vector<double> expected = logits_of(trained);

  const std::string dir = temporary_directory();
  SpectrumCheckpointInfo info;
  info.preprocessing.top_k = 5;
  info.bits = 4;
  info.classes = 2;
  info.epochs = 7;
  info.variant = "full";
  save_spectrum_checkpoint(Space(), dir + "/model", trained, info);
  const SpectrumCheckpointInfo read = read_spectrum_checkpoint_info(dir + "/model");
  CHECK(to_json(read) == to_json([&] {
          SpectrumCheckpointInfo saved = info;
          saved.model = o;
          return saved;
        }()));
  SpectrumTransformerOptions other_seed = read.model;
  other_seed.seed = 99;
  SpectrumTransformer<double, Space> loaded(Space(), other_seed);
  CHECK_FALSE(bitwise_equal(logits_of(loaded), expected));
  load_spectrum_checkpoint(Space(), dir + "/model", loaded);
  CHECK(bitwise_equal(logits_of(loaded), expected));

  // embed: the representations from which the head's logits = p W^T + b, computed here on the
  // host from the loaded weights.
  Tensor2<double, M> pooled("pooled", 2, 8);
  loaded.embed(Space(), {}, mzd, ind, pad, pooled);
  const auto p = host_values(pooled);
  std::vector<double> weight, bias;
  loaded.visit_parameters([&](const std::string& name, auto& param) {
    if (name == "output.weight") weight = host_values(param.value);
    if (name == "output.bias") bias = host_values(param.value);
  });
  REQUIRE(weight.size() == 6 * 8);
  std::vector<double> head(12);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 6; ++j) {
      head[b * 6 + j] = bias[j];
      for (int k = 0; k < 8; ++k)
        head[b * 6 + j] += p[b * 8 + k] * weight[j * 8 + k];
    }
  CHECK(max_abs_diff(head, expected) < 1e-12);

  // Refused, and the model left as it was: another architecture, another kind of checkpoint,
  // metadata that is not a spectrum model's.
  SpectrumTransformerOptions wider = o;
  wider.d_model = 12;
  SpectrumTransformer<double, Space> wide(Space(), wider);
  CHECK_THROWS_WITH(load_spectrum_checkpoint(Space(), dir + "/model", wide),
                    ContainsText("the model's options differ from the checkpoint's"));
  SpectrumTransformerOptions fixed = o;
  fixed.positional_encoding = PositionalEncodingKind::Fixed;
  SpectrumTransformer<double, Space> fixed_model(Space(), fixed);
  CHECK_THROWS_WITH(load_spectrum_checkpoint(Space(), dir + "/model", fixed_model),
                    ContainsText("\"positional_encoding\":\"fixed\""));
  auto file = safetensors::File::read(dir + "/model/model.safetensors");
  safetensors::Writer foreign;
  for (const auto& t : file.tensors())
    foreign.add(t.name, t.shape, file.to_double(t.name));
  foreign.set_metadata("format", "kformer-tst/1");
  std::filesystem::create_directories(dir + "/foreign");
  foreign.write(dir + "/foreign/model.safetensors");
  CHECK_THROWS_WITH(load_spectrum_checkpoint(Space(), dir + "/foreign", loaded),
                    ContainsText("format 'kformer-tst/1' is not a spectrum model's"));
  CHECK(bitwise_equal(logits_of(loaded), expected));
  const std::string source = "the test";
  CHECK_THROWS_WITH(
      spectrum_checkpoint_info_from_json("{\"model\": {}, \"preprocessing\": {}, \"bits\": 1, "
                                         "\"classes\": 1, \"epochs\": 0, \"colour\": 1}",
                                         source),
      ContainsText("unknown key 'colour'"));
  std::string text = to_json(read);
  const std::string four_bits = "\"bits\": 4";
  text.replace(text.find(four_bits), four_bits.size(), "\"bits\": 5");
  CHECK_THROWS_WITH(spectrum_checkpoint_info_from_json(text, source),
                    ContainsText("5 bits and 2 classes for 6 outputs"));
  std::filesystem::remove_all(dir);
}

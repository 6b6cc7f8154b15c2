#include "spectra_command.hpp"

#include "dispatch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <kformer/core/error.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/core/parameter_buffer.hpp>
#include <kformer/core/png.hpp>
#include <kformer/data/spectra_format.hpp>
#include <kformer/data/spectra_generator.hpp>
#include <kformer/layers/encodings/positional_encoding.hpp>
#include <kformer/losses/binary_cross_entropy.hpp>
#include <kformer/losses/losses.hpp>
#include <kformer/models/spectrum_transformer.hpp>
#include <kformer/optimizers/optimizers.hpp>
#include <kformer/training/checkpoint.hpp>
#include <kformer/training/spectrum_checkpoint.hpp>

namespace kformer::app {
namespace {

const char* const kWhere = "kformer spectra";

// Spectra as padded token rows: (n, peaks) m/z and intensities, padding true past a spectrum's
// last token; their fingerprints (n, bits) and classes (n).
struct TokenSet {
  int n = 0, peaks = 0, bits = 0;
  std::vector<double> mz, intensity;
  std::vector<std::uint8_t> padding, fingerprints;
  std::vector<int> classes;
};

std::vector<data::Spectrum> read_spectra(const std::string& path, const SpectraCliOptions& o) {
  if (path.empty()) fail(kWhere, "no spectra file given");
  const std::string extension = std::filesystem::path(path).extension().string();
  data::SpectraReadOptions read;
  read.max_peaks = o.max_peaks;
  if (extension == ".msp" || extension == ".MSP") return data::read_msp(path, read);
  if (extension == ".mgf" || extension == ".MGF") return data::read_mgf(path, read);
  fail(kWhere, path, ": expected an .msp or .mgf file, got the extension '", extension, "'");
}

data::SpectrumPreprocessing preprocessing_of(const SpectraCliOptions& o) {
  data::SpectrumPreprocessing p;
  p.normalize = true;
  p.min_relative_intensity = o.min_relative_intensity;
  p.merge_tolerance = o.merge_tolerance;
  p.top_k = o.top_k;
  p.precursor_token = o.precursor_token;
  return p;
}

// The spectra as tokens; with labels, their fingerprints of `bits` bits and classes below
// `classes` too (each spectrum must have both fields).
TokenSet tokenize(const std::vector<data::Spectrum>& spectra, const data::SpectrumPreprocessing& p,
                  int bits, int classes, bool labels) {
  TokenSet t;
  t.n = static_cast<int>(spectra.size());
  t.bits = bits;
  std::vector<data::SpectrumTokens> tokens;
  for (std::size_t i = 0; i < spectra.size(); ++i) {
    tokens.push_back(data::preprocess(spectra[i], p));
    t.peaks = std::max<int>(t.peaks, static_cast<int>(tokens.back().mz.size()));
    if (labels) {
      const auto fingerprint = data::fingerprint_of(spectra[i], bits, i);
      t.fingerprints.insert(t.fingerprints.end(), fingerprint.begin(), fingerprint.end());
      t.classes.push_back(data::class_of(spectra[i], classes, i));
    } else {
      t.fingerprints.insert(t.fingerprints.end(), std::size_t(bits), 0);
      t.classes.push_back(0);
    }
  }
  // A spectrum without a token would be all padding: its attention has no key.
  t.peaks = std::max(t.peaks, 1);
  t.mz.assign(std::size_t(t.n) * t.peaks, 0.0);
  t.intensity.assign(t.mz.size(), 0.0);
  t.padding.assign(t.mz.size(), 1);
  for (int i = 0; i < t.n; ++i)
    for (std::size_t k = 0; k < tokens[i].mz.size(); ++k) {
      const std::size_t at = std::size_t(i) * t.peaks + k;
      t.mz[at] = tokens[i].mz[k];
      t.intensity[at] = tokens[i].intensity[k];
      t.padding[at] = 0;
    }
  return t;
}

// Pads every row to `peaks` tokens (peaks >= t.peaks).
void repad(TokenSet& t, int peaks) {
  if (peaks == t.peaks) return;
  TokenSet padded = t;
  padded.peaks = peaks;
  padded.mz.assign(std::size_t(t.n) * peaks, 0.0);
  padded.intensity.assign(padded.mz.size(), 0.0);
  padded.padding.assign(padded.mz.size(), 1);
  for (int i = 0; i < t.n; ++i)
    for (int k = 0; k < t.peaks; ++k) {
      const std::size_t from = std::size_t(i) * t.peaks + k, to = std::size_t(i) * peaks + k;
      padded.mz[to] = t.mz[from];
      padded.intensity[to] = t.intensity[from];
      padded.padding[to] = t.padding[from];
    }
  t = std::move(padded);
}

template <class T, class Space>
struct DeviceTokens {
  using M = typename Space::memory_space;
  Tensor2<T, M> mz, intensity, fingerprints;
  Kokkos::View<bool**, Kokkos::LayoutRight, M> padding;
  Tensor1<std::int32_t, M> classes;

  DeviceTokens(const Space& exec, const TokenSet& t)
      : mz("kformer::spectra::mz", t.n, t.peaks),
        intensity("kformer::spectra::intensity", t.n, t.peaks),
        fingerprints("kformer::spectra::fingerprints", t.n, t.bits),
        padding("kformer::spectra::padding", t.n, t.peaks),
        classes("kformer::spectra::classes", t.n) {
    auto hm = Kokkos::create_mirror_view(mz);
    auto hi = Kokkos::create_mirror_view(intensity);
    auto hf = Kokkos::create_mirror_view(fingerprints);
    auto hp = Kokkos::create_mirror_view(padding);
    auto hc = Kokkos::create_mirror_view(classes);
    for (int i = 0; i < t.n; ++i) {
      for (int k = 0; k < t.peaks; ++k) {
        const std::size_t at = std::size_t(i) * t.peaks + k;
        hm(i, k) = static_cast<T>(t.mz[at]);
        hi(i, k) = static_cast<T>(t.intensity[at]);
        hp(i, k) = t.padding[at] != 0;
      }
      for (int j = 0; j < t.bits; ++j)
        hf(i, j) = static_cast<T>(t.fingerprints[std::size_t(i) * t.bits + j]);
      hc(i) = t.classes[i];
    }
    Kokkos::deep_copy(exec, mz, hm);
    Kokkos::deep_copy(exec, intensity, hi);
    Kokkos::deep_copy(exec, fingerprints, hf);
    Kokkos::deep_copy(exec, padding, hp);
    Kokkos::deep_copy(exec, classes, hc);
    exec.fence();
  }
};

// Rows order(first .. first+n-1) of the data into the batch buffers.
template <class Space, class D, class Order, class B2, class P, class C>
void gather_rows(const Space& exec, const D& data, const Order& order, std::int64_t first, int n,
                 const B2& mz, const B2& intensity, const P& padding, const B2& bits,
                 const C& cls) {
  const int peaks = mz.extent(1), nbits = bits.extent(1), width = std::max(peaks, nbits);
  const auto dmz = data.mz;
  const auto dint = data.intensity;
  const auto dpad = data.padding;
  const auto dbits = data.fingerprints;
  const auto dcls = data.classes;
  Kokkos::parallel_for(
      "kformer::spectra::gather", Kokkos::RangePolicy<Space>(exec, 0, std::int64_t(n) * width),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / width, k = idx % width;
        const std::int64_t row = order(first + b);
        if (k < peaks) {
          mz(b, k) = dmz(row, k);
          intensity(b, k) = dint(row, k);
          padding(b, k) = dpad(row, k);
        }
        if (k < nbits) bits(b, k) = dbits(row, k);
        if (k == 0) cls(b) = dcls(row);
      });
}

// logits (n, bits + classes) split into the fingerprint's (n, bits) and the class's (n, classes)
// columns, and their gradients merged back.
template <class Space, class L, class F, class C>
void split_columns(const Space& exec, const L& logits, const F& fingerprint, const C& cls) {
  const int n = logits.extent(0), nbits = fingerprint.extent(1), width = logits.extent(1);
  Kokkos::parallel_for(
      "kformer::spectra::split", Kokkos::RangePolicy<Space>(exec, 0, std::int64_t(n) * width),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / width, j = idx % width;
        if (j < nbits)
          fingerprint(b, j) = logits(b, j);
        else
          cls(b, j - nbits) = logits(b, j);
      });
}
template <class Space, class L, class F, class C>
void merge_columns(const Space& exec, const F& fingerprint, const C& cls, const L& logits) {
  const int n = logits.extent(0), nbits = fingerprint.extent(1), width = logits.extent(1);
  Kokkos::parallel_for(
      "kformer::spectra::merge", Kokkos::RangePolicy<Space>(exec, 0, std::int64_t(n) * width),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / width, j = idx % width;
        logits(b, j) = j < nbits ? fingerprint(b, j) : cls(b, j - nbits);
      });
}

struct Metrics {
  double tanimoto = 0, f1 = 0, accuracy = 0;
};

// Mean Tanimoto (1 for two empty sets), micro F1 over every bit, and class accuracy.
Metrics score(const std::vector<std::uint8_t>& predicted_bits, const std::vector<int>& predicted,
              const TokenSet& truth) {
  Metrics m;
  std::int64_t tp = 0, fp = 0, fn = 0, correct = 0;
  for (int i = 0; i < truth.n; ++i) {
    int both = 0, either = 0;
    for (int j = 0; j < truth.bits; ++j) {
      const bool p = predicted_bits[std::size_t(i) * truth.bits + j] != 0;
      const bool t = truth.fingerprints[std::size_t(i) * truth.bits + j] != 0;
      both += p && t;
      either += p || t;
      tp += p && t;
      fp += p && !t;
      fn += !p && t;
    }
    m.tanimoto += either == 0 ? 1.0 : double(both) / either;
    correct += predicted[i] == truth.classes[i];
  }
  m.tanimoto /= truth.n;
  m.f1 = tp + fp + fn == 0 ? 1.0 : 2.0 * double(tp) / double(2 * tp + fp + fn);
  m.accuracy = double(correct) / truth.n;
  return m;
}

// Runs the model over every spectrum of `data` in order, `batch` at a time, and hands each
// batch's outputs to consume(first, host (n, width)): the logits, or with `embed` the spectra's
// representations.
template <class T, class Space, class Consume>
void run_batches(const Space& exec, SpectrumTransformer<T, Space>& model,
                 const DeviceTokens<T, Space>& data, int batch, bool embed, Consume&& consume) {
  using M = typename Space::memory_space;
  const int n_total = data.mz.extent(0), peaks = data.mz.extent(1);
  const int width = embed ? model.options().d_model : model.options().outputs;
  batch = std::max(1, std::min(batch, n_total));
  Tensor2<T, M> mz("mz", batch, peaks), intensity("intensity", batch, peaks),
      bits("bits", batch, data.fingerprints.extent(1)), out("out", batch, width);
  Kokkos::View<bool**, Kokkos::LayoutRight, M> padding("padding", batch, peaks);
  Tensor1<std::int32_t, M> classes("classes", batch);
  Tensor1<std::int64_t, M> order("order", n_total);
  auto host_order = Kokkos::create_mirror_view(order);
  for (int i = 0; i < n_total; ++i)
    host_order(i) = i;
  Kokkos::deep_copy(exec, order, host_order);
  const RunContext eval{false, 0, false};
  for (int first = 0; first < n_total; first += batch) {
    const int n = std::min(batch, n_total - first);
    gather_rows(exec, data, order, first, n, mz, intensity, padding, bits, classes);
    const Tensor2<T, M> mz_n(mz.data(), n, peaks), in_n(intensity.data(), n, peaks),
        out_n(out.data(), n, width);
    const decltype(padding) pad_n(padding.data(), n, peaks);
    if (embed)
      model.embed(exec, eval, mz_n, in_n, pad_n, out_n);
    else
      model.forward(exec, eval, mz_n, in_n, pad_n, out_n);
    consume(first, Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out_n));
  }
}

// The predictions of (n, bits + classes) logits: the bits with a positive logit, the class of
// the largest.
template <class Host>
void decode(const Host& logits, int bits, int classes, std::vector<std::uint8_t>& predicted_bits,
            std::vector<int>& predicted) {
  for (std::size_t b = 0; b < logits.extent(0); ++b) {
    for (int j = 0; j < bits; ++j)
      predicted_bits.push_back(logits(b, j) > 0 ? 1 : 0);
    int best = 0;
    for (int c = 1; c < classes; ++c)
      if (logits(b, bits + c) > logits(b, bits + best)) best = c;
    predicted.push_back(best);
  }
}

struct VariantResult {
  std::string name;
  Metrics metrics;
  double train_loss = 0, seconds = 0;
  std::int64_t parameters = 0;
};

template <class T, class Space>
VariantResult train_variant(const Space& exec, const SpectraCliOptions& o, const std::string& name,
                            const TokenSet& train_tokens, const TokenSet& test_tokens,
                            const DeviceTokens<T, Space>& train,
                            const DeviceTokens<T, Space>& test) {
  using M = typename Space::memory_space;
  const auto start = std::chrono::steady_clock::now();
  SpectrumTransformerOptions mo;
  mo.d_model = o.d_model;
  mo.heads = o.heads;
  mo.layers = o.layers;
  mo.dim_feedforward = o.dim_feedforward;
  mo.outputs = o.bits + o.classes;
  mo.positional_encoding = name == "full" || name == "no-intensity-encoding"
                               ? parse_pos_encoding(o.pos_encoding)
                               : PositionalEncodingKind::None;
  // A learnable table covers every spectrum the preprocessing can give (top_k peaks and the
  // precursor), or the longest of these data when every peak is kept.
  mo.max_tokens = o.top_k > 0 ? o.top_k + (o.precursor_token ? 1 : 0) : train_tokens.peaks;
  mo.intensity_encoding = name == "full" || name == "no-positional-encoding";
  mo.seed = derive_seed(o.seed, "model");  // the same initial weights for every variant
  SpectrumTransformer<T, Space> model(exec, mo);
  model.set_finite_checks(true);  // a peak that T cannot hold is an error, not NaN logits
  ParameterBuffer<T, M> parameters;
  parameters.gather(exec, model);
  Optimizer<T, Space> adam(exec, parameters.values().extent(0), OptimizerOptions{});
  Losses<T, Space> losses;
  BinaryCrossEntropy<T, Space> bce;
  const int batch = o.batch_size, peaks = train_tokens.peaks, width = mo.outputs;
  Tensor2<T, M> mz("mz", batch, peaks), intensity("intensity", batch, peaks),
      bits("bits", batch, o.bits), logits("logits", batch, width),
      d_logits("d_logits", batch, width), fingerprint_logits("fp", batch, o.bits),
      class_logits("cls", batch, o.classes), d_fingerprint("dfp", batch, o.bits),
      d_class("dcls", batch, o.classes);
  Kokkos::View<bool**, Kokkos::LayoutRight, M> padding("padding", batch, peaks);
  Tensor1<std::int32_t, M> classes("classes", batch);
  Tensor1<std::int64_t, M> order("order", train_tokens.n);
  auto host_order = Kokkos::create_mirror_view(order);
  std::mt19937_64 rng(derive_seed(o.seed, "batches"));
  std::vector<std::int64_t> shuffled(train_tokens.n);
  std::iota(shuffled.begin(), shuffled.end(), std::int64_t{0});

  const auto slice = [&](auto view, int n) {
    return decltype(view)(view.data(), n, view.extent(1));
  };
  VariantResult r;
  r.name = name;
  r.parameters = parameters.values().extent(0);
  RunContext ctx{true, 0, true};
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (int i = 0; i < train_tokens.n; ++i)
      host_order(i) = shuffled[i];
    Kokkos::deep_copy(exec, order, host_order);
    double sum = 0;
    int batches = 0;
    for (int first = 0; first < train_tokens.n; first += batch) {
      const int n = std::min(batch, train_tokens.n - first);
      gather_rows(exec, train, order, first, n, mz, intensity, padding, bits, classes);
      const auto lg = slice(logits, n);
      const auto pad = decltype(padding)(padding.data(), n, peaks);
      Kokkos::deep_copy(exec, parameters.grads(), T(0));
      model.forward(exec, ctx, slice(mz, n), slice(intensity, n), pad, lg);
      split_columns(exec, lg, slice(fingerprint_logits, n), slice(class_logits, n));
      sum += bce(exec, slice(fingerprint_logits, n), slice(bits, n), slice(d_fingerprint, n));
      sum += losses.cross_entropy(exec, slice(class_logits, n),
                                  Tensor1<const std::int32_t, M>(classes.data(), n),
                                  slice(d_class, n));
      merge_columns(exec, slice(d_fingerprint, n), slice(d_class, n), slice(d_logits, n));
      model.backward(exec, ctx, slice(mz, n), pad, slice(d_logits, n));
      adam.step(exec, parameters.values(), parameters.grads(), o.learning_rate);
      ++batches;
      ++ctx.step;
    }
    r.train_loss = sum / batches;
    if (!std::isfinite(r.train_loss))
      fail(kWhere, name, ": the training loss is ", r.train_loss, " at epoch ", epoch + 1,
           "; try a smaller --lr");
    std::printf("  %-24s epoch %3d  loss %.4f\n", name.c_str(), epoch + 1, r.train_loss);
    std::fflush(stdout);
  }
  SpectrumCheckpointInfo info;
  info.preprocessing = preprocessing_of(o);
  info.bits = o.bits;
  info.classes = o.classes;
  info.epochs = o.epochs;
  info.variant = name;
  save_spectrum_checkpoint(exec, o.output_dir + "/" + name, model, info);
  std::vector<std::uint8_t> predicted_bits;
  std::vector<int> predicted;
  run_batches(exec, model, test, batch, false, [&](int, const auto& host) {
    decode(host, o.bits, o.classes, predicted_bits, predicted);
  });
  r.metrics = score(predicted_bits, predicted, test_tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

template <class T, class Space>
void run(const Space& exec, const SpectraCliOptions& o) {
  // Checkpoints of an earlier run are replaced only when asked; a second run into the same
  // directory at once is refused by the lock.
  for (const auto& name : o.variants)
    if (!o.overwrite &&
        std::filesystem::exists(spectrum_checkpoint_path(o.output_dir + "/" + name)))
      fail(kWhere, "--output-dir ", o.output_dir, " already holds the checkpoint ",
           spectrum_checkpoint_path(o.output_dir + "/" + name),
           ": give --overwrite to replace it, or choose another --output-dir");
  // The user's files are read and checked before anything is created; generated spectra are
  // written first and read back, so that they go through the readers a user's files do.
  std::string train_path = o.train, test_path = o.test;
  TokenSet train_tokens, test_tokens;
  const auto read_both = [&] {
    const auto train_spectra = read_spectra(train_path, o);
    const auto test_spectra = read_spectra(test_path, o);
    if (train_spectra.empty() || test_spectra.empty())
      fail(kWhere, "no spectra in ", train_spectra.empty() ? train_path : test_path);
    train_tokens = tokenize(train_spectra, preprocessing_of(o), o.bits, o.classes, true);
    test_tokens = tokenize(test_spectra, preprocessing_of(o), o.bits, o.classes, true);
  };
  if (!o.train.empty()) read_both();
  const OutputDirectoryLock lock(o.output_dir);
  if (o.train.empty()) {
    data::GeneratedSpectraOptions g;
    g.spectra = o.spectra;
    g.bits = o.bits;
    g.seed = o.seed;
    auto all = data::generate_spectra(g);
    const std::size_t n_train = all.size() * 4 / 5;
    train_path = o.output_dir + "/train.msp";
    test_path = o.output_dir + "/test.mgf";
    write_file_atomic(train_path,
                      data::format_msp({all.begin(), all.begin() + std::ptrdiff_t(n_train)}));
    write_file_atomic(test_path,
                      data::format_mgf({all.begin() + std::ptrdiff_t(n_train), all.end()}));
    std::printf("generated %zu synthetic spectra (%d-bit fingerprints, 4 classes): %s, %s\n",
                all.size(), o.bits, train_path.c_str(), test_path.c_str());
    read_both();
  }
  // Both sets padded to the same number of tokens.
  const int peaks = std::max(train_tokens.peaks, test_tokens.peaks);
  repad(train_tokens, peaks);
  repad(test_tokens, peaks);
  std::printf(
      "training %d spectra, test %d, up to %d peaks each; d_model %d, %d layers, %d "
      "epochs\n",
      train_tokens.n, test_tokens.n, train_tokens.peaks, o.d_model, o.layers, o.epochs);
  const DeviceTokens<T, Space> train(exec, train_tokens), test(exec, test_tokens);

  std::vector<VariantResult> results;
  for (const auto& name : o.variants)
    results.push_back(train_variant<T>(exec, o, name, train_tokens, test_tokens, train, test));

  // Baselines: every bit at its majority value in the training set; the majority class.
  std::vector<std::uint8_t> majority_bits;
  std::vector<int> class_counts(o.classes, 0);
  for (int i = 0; i < train_tokens.n; ++i)
    ++class_counts[train_tokens.classes[i]];
  const int majority_class = static_cast<int>(
      std::max_element(class_counts.begin(), class_counts.end()) - class_counts.begin());
  std::vector<std::uint8_t> bit_majority(o.bits);
  for (int j = 0; j < o.bits; ++j) {
    int ones = 0;
    for (int i = 0; i < train_tokens.n; ++i)
      ones += train_tokens.fingerprints[std::size_t(i) * o.bits + j];
    bit_majority[j] = 2 * ones > train_tokens.n;
  }
  for (int i = 0; i < test_tokens.n; ++i)
    majority_bits.insert(majority_bits.end(), bit_majority.begin(), bit_majority.end());
  const Metrics baseline =
      score(majority_bits, std::vector<int>(test_tokens.n, majority_class), test_tokens);

  std::ostringstream csv;
  csv << "variant,positional_encoding,intensity_encoding,tanimoto,f1,class_accuracy,train_loss,"
         "seconds\n";
  std::printf("\n%-24s %9s %10s %9s %7s %15s %8s\n", "variant", "PE", "intensity", "Tanimoto", "F1",
              "class accuracy", "seconds");
  for (const auto& r : results) {
    const bool pe = r.name == "full" || r.name == "no-intensity-encoding";
    const bool in = r.name == "full" || r.name == "no-positional-encoding";
    std::printf("%-24s %9s %10s %9.3f %7.3f %15.3f %8.1f\n", r.name.c_str(),
                pe ? o.pos_encoding.c_str() : "off", in ? "on" : "off", r.metrics.tanimoto,
                r.metrics.f1, r.metrics.accuracy, r.seconds);
    csv << r.name << ',' << (pe ? o.pos_encoding : "none") << ',' << in << ',' << r.metrics.tanimoto
        << ',' << r.metrics.f1 << ',' << r.metrics.accuracy << ',' << r.train_loss << ','
        << r.seconds << '\n';
  }
  std::printf("%-24s %9s %10s %9.3f %7.3f %15.3f\n", "baseline (majority)", "", "",
              baseline.tanimoto, baseline.f1, baseline.accuracy);
  csv << "baseline,,," << baseline.tanimoto << ',' << baseline.f1 << ',' << baseline.accuracy
      << ",,\n";
  write_file_atomic(o.output_dir + "/results.csv", csv.str());
  // The positional-encoding matrix for this d_model and the spectra's token count.
  const auto pe = positional_encoding<double>(Kokkos::DefaultHostExecutionSpace(), o.d_model,
                                              train_tokens.peaks);
  std::vector<double> values(pe.data(), pe.data() + pe.size());
  write_heatmap_png(o.output_dir + "/positional_encoding.png", values, train_tokens.peaks,
                    o.d_model, -1.0, 1.0, 8, 8);
  std::printf(
      "\nwritten: %s/results.csv, %s/positional_encoding.png (the encoding matrix, %d "
      "peaks x d_model %d), and a checkpoint per variant (%s/<variant>)\n",
      o.output_dir.c_str(), o.output_dir.c_str(), train_tokens.peaks, o.d_model,
      o.output_dir.c_str());
}

// A CSV field: quoted, with quotes doubled, when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text)
    quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// evaluate, predict or embed with the checkpoint o.checkpoint on the spectra of o.data.
template <class T, class Space>
void run_action(const Space& exec, const SpectraCliOptions& o) {
  const std::string where = std::string(kWhere) + " " + o.action;
  const SpectrumCheckpointInfo info = read_spectrum_checkpoint_info(o.checkpoint);
  SpectrumTransformer<T, Space> model(exec, info.model);
  model.set_finite_checks(true);  // a peak that T cannot hold is an error, not NaN outputs
  load_spectrum_checkpoint(exec, o.checkpoint, model);
  const auto spectra = read_spectra(o.data, o);
  if (spectra.empty()) fail(where, "no spectra in ", o.data);
  const bool evaluate = o.action == "evaluate";
  const TokenSet tokens =
      tokenize(spectra, info.preprocessing, info.bits, info.classes, /*labels=*/evaluate);
  if (info.model.positional_encoding == PositionalEncodingKind::Learnable)
    for (std::size_t i = 0; i < spectra.size(); ++i) {
      const auto n = data::preprocess(spectra[i], info.preprocessing).mz.size();
      if (n > std::size_t(info.model.max_tokens))
        fail(where, o.data, ": spectrum ", i + 1, " '", spectra[i].title, "' has ", n,
             " tokens after the checkpoint's preprocessing; its learnable positional encoding ",
             "has ", info.model.max_tokens);
    }
  const DeviceTokens<T, Space> device(exec, tokens);
  if (evaluate) {
    std::vector<std::uint8_t> predicted_bits;
    std::vector<int> predicted;
    run_batches(exec, model, device, o.batch_size, false, [&](int, const auto& host) {
      decode(host, info.bits, info.classes, predicted_bits, predicted);
    });
    const Metrics m = score(predicted_bits, predicted, tokens);
    const std::string variant = info.variant.empty() ? "" : " (" + info.variant + ")";
    std::printf("%d spectra of %s, checkpoint %s%s: Tanimoto %.3f  F1 %.3f  class accuracy %.3f\n",
                tokens.n, o.data.c_str(), o.checkpoint.c_str(), variant.c_str(), m.tanimoto, m.f1,
                m.accuracy);
    return;
  }
  const bool embed = o.action == "embed";
  std::ostringstream csv;
  csv.precision(9);
  csv << "index,title";
  if (embed) {
    for (int k = 0; k < info.model.d_model; ++k)
      csv << ",e" << k;
  } else {
    csv << ",class,fingerprint";
    for (int c = 0; c < info.classes; ++c)
      csv << ",p_class" << c;
    for (int j = 0; j < info.bits; ++j)
      csv << ",p_bit" << j;
  }
  csv << '\n';
  run_batches(exec, model, device, o.batch_size, embed, [&](int first, const auto& host) {
    for (std::size_t b = 0; b < host.extent(0); ++b) {
      const std::size_t i = first + b;
      csv << i << ',' << csv_field(spectra[i].title);
      if (embed) {
        for (std::size_t k = 0; k < host.extent(1); ++k)
          csv << ',' << double(host(b, k));
      } else {
        // class probabilities by a softmax of the class logits, bits by their sigmoids
        double largest = -std::numeric_limits<double>::infinity(), sum = 0;
        int best = 0;
        for (int c = 0; c < info.classes; ++c) {
          const double z = host(b, info.bits + c);
          if (z > largest) {
            largest = z;
            best = c;
          }
        }
        for (int c = 0; c < info.classes; ++c)
          sum += std::exp(double(host(b, info.bits + c)) - largest);
        csv << ',' << best << ',';
        for (int j = 0; j < info.bits; ++j)
          csv << (host(b, j) > 0 ? '1' : '0');
        for (int c = 0; c < info.classes; ++c)
          csv << ',' << std::exp(double(host(b, info.bits + c)) - largest) / sum;
        for (int j = 0; j < info.bits; ++j)
          csv << ',' << 1 / (1 + std::exp(-double(host(b, j))));
      }
      csv << '\n';
    }
  });
  write_file_atomic(o.output, csv.str());
  std::printf("%s of %d spectra of %s: %s\n", embed ? "representations" : "predictions", tokens.n,
              o.data.c_str(), o.output.c_str());
}

}  // namespace

void run_spectra_command(const std::string& backend, const std::string& precision,
                         const SpectraCliOptions& options) {
  if (!options.list.empty()) {
    for (const auto& s : read_spectra(options.list, options)) {
      nlohmann::json j;
      j["title"] = s.title;
      j["precursor_mz"] =
          std::isnan(s.precursor_mz) ? nlohmann::json() : nlohmann::json(s.precursor_mz);
      j["charge"] = s.charge;
      j["metadata"] = nlohmann::json::object();
      for (const auto& [key, value] : s.metadata)
        j["metadata"][key] = value;
      j["mz"] = s.mz;
      j["intensity"] = s.intensity;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return;
  }
  if (!options.action.empty()) {
    dispatch(backend, precision,
             [&](auto space, auto p) { run_action<typename decltype(p)::type>(space, options); });
    return;
  }
  for (const auto& v : options.variants)
    if (v != "full" && v != "no-positional-encoding" && v != "no-intensity-encoding" &&
        v != "neither")
      fail(kWhere,
           "--variant must be full, no-positional-encoding, no-intensity-encoding or "
           "neither, got '",
           v, "'");
  if (options.train.empty() != options.test.empty())
    fail(kWhere, "--train and --test go together (or neither, for generated spectra)");
  dispatch(backend, precision,
           [&](auto space, auto p) { run<typename decltype(p)::type>(space, options); });
}

}  // namespace kformer::app

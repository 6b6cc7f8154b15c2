// kformer-bench: benchmarks on every enabled execution space, with the machine's limits measured
// in the same run (a copy kernel for bandwidth, a large sgemm for compute), printed as a table
// and written as JSON (perf/report.py turns any number of such files, and compare_pytorch.py's,
// into tables and charts).
//
//   kformer-bench [--filter TEXT|GLOB] [--backend NAME] [--repeat N] [--json FILE] [--list]
//   [--profile]
//   kformer-bench report [-o DIR] RESULT.json...      (runs perf/report.py)
//
// Each case allocates its state when it starts and frees it when it ends, so that its
// peak_bytes (the high-water mark of Kokkos allocations above what was live before it) is its
// own. The scaling.* cases run only when --filter selects them.
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include <kformer/backends/memory_tracker.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/kformer.hpp>

#include "kernel_profile.hpp"

namespace {

struct Options {
  std::string filter;
  std::string backend;
  int repeat = 20;
  std::string json;
  bool list = false;
  bool profile = false;  // time per layer region and per kernel label (Kokkos Tools callbacks)
};

// One benchmark case: what it moves and computes, and how to set it up and run it once.
struct Case {
  std::string name;        // "encoding.fixed.add"
  std::string shape;       // "(8, 4096, 512) float"
  double bytes = 0;        // bytes read + written by one run
  double flops = 0;        // floating-point operations of one run
  std::string baseline;    // the case it is timed in alternation with and compared to ("" = none)
  int batch = 0, seq = 0;  // of the model cases (0: not applicable)
  // Allocates the case's state and returns one run; the state lives as long as the run.
  std::function<std::function<void()>()> setup;

  bool compute_bound() const { return flops > 0; }
  double rate(double seconds) const { return (compute_bound() ? flops : bytes) / seconds * 1e-9; }
};

struct Timing {
  double median = 0, min = 0, max = 0, total = 0;
};

Timing summarize(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  double total = 0;
  for (const double s : seconds)
    total += s;
  return {seconds[seconds.size() / 2], seconds.front(), seconds.back(), total};
}

// Times `c` and, when given, `baseline` in alternation (c, baseline, c, ...), so that both see
// the same machine state: on shared machines bandwidth drifts by 10-30 % within seconds, which
// would otherwise show up in the ratio. `after_warmup` runs between the warm-up runs and the timed
// ones.
template <class Space>
std::pair<Timing, Timing> time_case(const Space& space, const std::function<void()>& run,
                                    const std::function<void()>* baseline, int repeat,
                                    const std::function<void()>& after_warmup) {
  for (int warm = 0; warm < 2; ++warm) {  // first touch of pages, scratch pools, BLAS buffers
    run();
    if (baseline) (*baseline)();
  }
  space.fence();
  if (after_warmup) after_warmup();
  std::vector<double> seconds, baseline_seconds;
  for (int r = 0; r < repeat; ++r) {
    Kokkos::Timer timer;
    run();
    space.fence();
    seconds.push_back(timer.seconds());
    if (baseline) {
      timer.reset();
      (*baseline)();
      space.fence();
      baseline_seconds.push_back(timer.seconds());
    }
  }
  return {summarize(seconds), baseline ? summarize(baseline_seconds) : Timing{}};
}

template <class T, class Space>
using Tensor3 = kformer::Tensor3<T, typename Space::memory_space>;
template <class T, class Space>
using Tensor2 = kformer::Tensor2<T, typename Space::memory_space>;

// "(a, b, c)"
std::string dims(std::initializer_list<long long> extents) {
  std::string text = "(";
  for (const long long e : extents)
    text += (text.size() > 1 ? ", " : "") + std::to_string(e);
  return text + ")";
}

// y = x over n floats: the bandwidth every memory-bound case is compared with. On a CPU a Kokkos
// loop (GCC turns each thread's part into a memcpy); on a GPU the vendor's device-to-device copy
// (Kokkos::deep_copy), since a loop with one float per thread reaches only about a quarter of an
// H200's bandwidth (822 GB/s against 3.1 TB/s for PyTorch's copy, measured).
template <class Space>
Case copy_case(const Space& space, std::int64_t n, const std::string& name,
               const std::string& shape) {
  return {name, shape, 2.0 * n * sizeof(float), 0, "", 0, 0, [=]() -> std::function<void()> {
            Kokkos::View<float*, typename Space::memory_space> x("x", n), y("y", n);
            Kokkos::deep_copy(x, 1.0f);
            return [=]() {
              if constexpr (kformer::backends::runs_on_host<Space>)
                Kokkos::parallel_for(
                    "bench::copy",
                    Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(space, 0, n),
                    KOKKOS_LAMBDA(const std::int64_t i) { y(i) = x(i); });
              else
                Kokkos::deep_copy(space, y, x);
            };
          }};
}

template <class Space>
Case sgemm_case(const Space& space, int n) {
  return {"limit.sgemm",
          "(" + std::to_string(n) + ")^3 float",
          3.0 * n * n * sizeof(float),
          2.0 * n * n * double(n),
          "",
          0,
          0,
          [=]() -> std::function<void()> {
            Tensor2<float, Space> a("a", n, n), b("b", n, n), c("c", n, n);
            Kokkos::deep_copy(a, 0.5f);
            Kokkos::deep_copy(b, 0.25f);
            return [=]() {
              kformer::backends::gemm(space, kformer::backends::Op::N, kformer::backends::Op::N,
                                      1.0f, a, b, 0.0f, c);
            };
          }};
}

template <class Space>
std::vector<Case> encoding_cases(const Space& space) {
  const int batch = 8, seq = 4096, dim = 512;
  const std::string shape = "(8, 4096, 512) float";
  const std::int64_t n = std::int64_t(batch) * seq * dim;
  const double tensor_bytes = double(n) * sizeof(float);
  const double table_bytes = double(seq) * dim * sizeof(float);
  const std::string copy = "encoding.copy";
  // The input and output every encoding case reads and writes.
  const auto tensors = [=]() {
    Tensor3<float, Space> x("x", batch, seq, dim), y("y", batch, seq, dim);
    Kokkos::deep_copy(x, 0.5f);
    Kokkos::deep_copy(y, 0.5f);
    return std::pair{x, y};
  };
  const auto model_case = [&](std::string name, std::string case_shape, double bytes,
                              std::function<std::function<void()>()> setup) {
    return Case{std::move(name), std::move(case_shape), bytes, 0, copy, batch, seq,
                std::move(setup)};
  };
  std::vector<Case> cases;
  cases.push_back(copy_case(space, n, copy, shape));
  cases.push_back(model_case("encoding.fixed.add", shape, 2 * tensor_bytes, [=]() {
    const auto io = tensors();
    const auto x = io.first, y = io.second;
    auto fixed = std::make_shared<kformer::PositionalEncoding<float, Space>>(dim);
    return std::function<void()>([=]() { fixed->forward(space, {}, x, y); });
  }));
  cases.push_back(model_case("encoding.fixed.inplace", shape, 2 * tensor_bytes, [=]() {
    const auto io = tensors();
    const auto x = io.first, y = io.second;
    auto fixed = std::make_shared<kformer::PositionalEncoding<float, Space>>(dim);
    return std::function<void()>([=]() { fixed->forward(space, {}, y, y); });
  }));
  cases.push_back(model_case("encoding.fixed.matrix", "(4096, 512) float", table_bytes, [=]() {
    // Into the caller's matrix: a fresh allocation would time the page faults of its first touch.
    const Tensor2<float, Space> table("table", seq, dim);
    return std::function<void()>([=]() { kformer::positional_encoding(space, table); });
  }));
  // What the fixed encoding avoids: x + a cached (seq, dim) table, as PyTorch's TST does.
  cases.push_back(model_case("encoding.cached_table.add", shape, 2 * tensor_bytes, [=]() {
    const auto io = tensors();
    const auto x = io.first, y = io.second;
    const auto table = kformer::positional_encoding<float>(space, dim, seq);
    return std::function<void()>([=]() {
      const std::int64_t per_batch = std::int64_t(seq) * dim;
      const float* t = table.data();
      const float* in = x.data();
      float* out = y.data();
      Kokkos::parallel_for(
          "bench::cached_table_add",
          Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(space, 0, per_batch),
          KOKKOS_LAMBDA(const std::int64_t i) {
            for (int b = 0; b < batch; ++b)
              out[b * per_batch + i] = in[b * per_batch + i] + t[i];
          });
    });
  }));
  cases.push_back(
      model_case("encoding.learnable.forward", shape, 2 * tensor_bytes + table_bytes, [=]() {
        const auto io = tensors();
        const auto x = io.first, y = io.second;
        auto learnable =
            std::make_shared<kformer::LearnablePositionalEncoding<float, Space>>(space, seq, dim);
        return std::function<void()>([=]() { learnable->forward(space, {}, x, y); });
      }));
  cases.push_back(
      model_case("encoding.learnable.backward", shape, 2 * tensor_bytes + 2 * table_bytes, [=]() {
        const auto io = tensors();
        const auto x = io.first, y = io.second;
        auto learnable =
            std::make_shared<kformer::LearnablePositionalEncoding<float, Space>>(space, seq, dim);
        return std::function<void()>([=]() { learnable->backward(space, {}, x, x, y); });
      }));
  cases.push_back(model_case(
      "encoding.value.add", shape, 2 * tensor_bytes + double(batch) * seq * sizeof(float), [=]() {
        const auto io = tensors();
        const auto x = io.first, y = io.second;
        auto value = std::make_shared<kformer::ValueEncoding<float, Space>>(space, dim);
        // m/z values spread over [50, 1000), as the peaks of spectra (angles up to 1000 rad).
        Tensor2<float, Space> values("values", batch, seq);
        auto host_values = Kokkos::create_mirror_view(values);
        for (int i = 0; i < batch * seq; ++i)
          host_values(i / seq, i % seq) = 50.0f + 0.01f * float((i * 7919) % 95000);
        Kokkos::deep_copy(values, host_values);
        return std::function<void()>([=]() { value->forward(space, {}, values, x, y); });
      }));
  return cases;
}

// Linear(512 -> 2048) on 8192 rows: forward (one GEMM) and backward (input and weight gradients,
// two GEMMs, plus the bias column sums), the GEMM-bound part of every layer. The .reproducible
// variants run in backends::set_reproducible_gemm mode, to show what it costs.
template <class Space>
std::vector<Case> linear_cases(const Space& space) {
  const int rows = 8192, in = 512, out = 2048;
  const std::string shape = "(8192, 512) -> 2048";
  const double gemm_flops = 2.0 * rows * in * double(out);
  const auto setup = [=](bool backward, bool reproducible) {
    return [=]() -> std::function<void()> {
      auto linear = std::make_shared<kformer::Linear<float, Space>>(space, in, out);
      Tensor2<float, Space> x("x", rows, in), y("y", rows, out), dy("dy", rows, out),
          dx("dx", rows, in);
      Kokkos::deep_copy(x, 0.5f);
      Kokkos::deep_copy(dy, 0.01f);
      return [=]() {
        kformer::backends::set_reproducible_gemm(reproducible);
        if (backward)
          linear->backward(space, {}, x, dy, dx);
        else
          linear->forward(space, {}, x, y);
        kformer::backends::set_reproducible_gemm(false);
      };
    };
  };
  std::vector<Case> cases;
  for (const bool reproducible : {false, true}) {
    const std::string suffix = reproducible ? ".reproducible" : "";
    cases.push_back({"linear.forward" + suffix, shape, 0, gemm_flops, "limit.sgemm", rows, 0,
                     setup(false, reproducible)});
    cases.push_back({"linear.backward" + suffix, shape, 0, 2 * gemm_flops, "limit.sgemm", rows, 0,
                     setup(true, reproducible)});
  }
  return cases;
}

// One run of a (batch, seq, d) -> (batch, seq, d) layer on fixed inputs: the forward in eval mode,
// or forward and backward in training mode (a new dropout step each run).
template <class Space, class Layer>
std::function<void()> layer_run(const Space& space, std::shared_ptr<Layer> layer, int batch,
                                int seq, int d, bool training) {
  Tensor3<float, Space> x("x", batch, seq, d), y("y", batch, seq, d), dy("dy", batch, seq, d),
      dx("dx", batch, seq, d);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(dy, 0.01f);
  auto step = std::make_shared<std::uint64_t>(0);
  return [=]() {
    layer->forward(space, kformer::RunContext{training, ++*step, training}, x, y);
    if (training) layer->backward(space, {}, x, dy, dx);
  };
}

// Multi-head self-attention (dropout 0.1): forward in eval mode, and a training step (forward and
// backward in training mode). As compare_pytorch.py calls PyTorch's (need_weights=False), the
// layer keeps no probabilities for inspection. Flops: the projections 2 N d (3d + d) and the two
// batched products 4 B S^2 d; a training step counts three times the forward. Where the backend
// has a specialised fused kernel (CPUs with a BLAS), the same cases with the portable kernel are
// named *.portable, so that both are timed in one run.
template <class Space>
std::vector<Case> attention_cases(const Space& space, const std::string& tag, int batch, int seq,
                                  int d, int heads) {
  const double n = double(batch) * seq;
  const double forward_flops =
      2 * n * d * 3 * d + 4.0 * batch * seq * double(seq) * d + 2 * n * d * d;
  const std::string shape = dims({batch, seq, d}) + " h" + std::to_string(heads);
  const auto setup = [=](bool training, kformer::AttentionKernel kernel) {
    return [=]() -> std::function<void()> {
      kformer::MultiHeadAttentionOptions options{heads, 0.1, 1};
      options.keep_probabilities = false;
      options.kernel = kernel;
      auto mha = std::make_shared<kformer::MultiHeadAttention<float, Space>>(space, d, options);
      return layer_run(space, mha, batch, seq, d, training);
    };
  };
  std::vector<Case> cases;
  const bool specialised =
      kformer::impl::runs_host_specialisation<Space, float>(kformer::AttentionKernel::Best);
  for (const auto kernel : {kformer::AttentionKernel::Best, kformer::AttentionKernel::Portable}) {
    if (kernel == kformer::AttentionKernel::Portable && !specialised) continue;
    const std::string suffix = kernel == kformer::AttentionKernel::Portable ? ".portable" : "";
    cases.push_back({"attention." + tag + ".forward" + suffix, shape, 0, forward_flops,
                     "limit.sgemm", batch, seq, setup(false, kernel)});
    cases.push_back({"attention." + tag + ".train_step" + suffix, shape, 0, 3 * forward_flops,
                     "limit.sgemm", batch, seq, setup(true, kernel)});
  }
  return cases;
}

// The flops of one TST encoder layer's forward on (batch, seq, d).
double encoder_layer_flops(int batch, int seq, int d, int ff) {
  const double n = double(batch) * seq;
  return 2 * n * d * 3 * d + 4.0 * batch * seq * double(seq) * d + 2 * n * d * d + 4 * n * d * ff;
}

// A TST-style encoder stack (BatchNorm, GELU, post-norm, dropout 0.1) at a (batch, seq) shape:
// forward in eval mode, and a training step (forward + backward in training mode).
template <class Space>
std::vector<Case> encoder_cases(const Space& space, const std::string& prefix, int batch, int seq,
                                int d, int heads, int ff, int layers, bool forward_case = true) {
  const double forward_flops = layers * encoder_layer_flops(batch, seq, d, ff);
  std::string shape = dims({batch, seq, d}) + " h" + std::to_string(heads) + " ff" +
                      std::to_string(ff) + " L" + std::to_string(layers);
  if (prefix.rfind("encoder_layer.", 0) == 0) shape = shape.substr(0, shape.rfind(" L"));
  const auto setup = [=](bool training) {
    return [=]() -> std::function<void()> {
      kformer::EncoderLayerOptions o;
      o.d_model = d;
      o.heads = heads;
      o.dim_feedforward = ff;
      auto encoder = std::make_shared<kformer::TransformerEncoder<float, Space>>(space, layers, o);
      return layer_run(space, encoder, batch, seq, d, training);
    };
  };
  std::vector<Case> cases;
  if (forward_case)
    cases.push_back(
        {prefix + ".forward", shape, 0, forward_flops, "limit.sgemm", batch, seq, setup(false)});
  cases.push_back({prefix + ".train_step", shape, 0, 3 * forward_flops, "limit.sgemm", batch, seq,
                   setup(true)});
  return cases;
}

// The whole TST classifier at its defaults: inference (eval forward) and a training step
// (forward, cross-entropy, backward, Adam), as PyTorch's reference trains it.
template <class Space>
std::vector<Case> tst_cases(const Space& space) {
  const int batch = 32, seq = 128, features = 8, d = 64, heads = 8, ff = 256, layers = 3;
  const int classes = 4;
  const double forward_flops = 2.0 * batch * seq * features * d +
                               layers * encoder_layer_flops(batch, seq, d, ff) +
                               2.0 * batch * double(seq) * d * classes;
  const std::string shape = "(32, 128, 8) d64 h8 ff256 L3 c4";
  const auto setup = [=](bool training) {
    return [=]() -> std::function<void()> {
      kformer::TstConfig config;
      config.feat_dim = features;
      config.max_len = seq;
      config.d_model = d;
      config.n_heads = heads;
      config.num_layers = layers;
      config.dim_feedforward = ff;
      config.task = kformer::TstTask::Classification;
      config.num_outputs = classes;
      using Model = kformer::TimeSeriesTransformer<float, Space>;
      auto model = std::make_shared<Model>(space, config);
      auto losses = std::make_shared<kformer::Losses<float, Space>>();
      auto adam = std::make_shared<kformer::Optimizer<float, Space>>(
          space, model->parameters().values().extent(0), kformer::OptimizerOptions{});
      Tensor3<float, Space> x("x", batch, seq, features);
      Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, typename Space::memory_space> keep(
          "keep", batch, seq);
      kformer::Tensor1<std::int32_t, typename Space::memory_space> labels("labels", batch);
      Tensor2<float, Space> logits("logits", batch, classes), d_logits("d_logits", batch, classes);
      Kokkos::deep_copy(x, 0.5f);
      Kokkos::deep_copy(keep, std::uint8_t(1));
      Kokkos::parallel_for(
          "bench::labels", Kokkos::RangePolicy<Space>(space, 0, batch),
          KOKKOS_LAMBDA(const int b) { labels(b) = b % classes; });
      auto step = std::make_shared<std::uint64_t>(0);
      return [=]() {
        model->forward(space, kformer::RunContext{training, ++*step, training}, x, keep, logits);
        if (!training) return;
        losses->cross_entropy(space, logits, labels, d_logits);
        model->zero_grad(space);
        model->backward(space, {}, x, keep, d_logits);
        adam->step(space, model->parameters().values(), model->parameters().grads(), 1e-3);
      };
    };
  };
  return {
      {"tst.default.inference", shape, 0, forward_flops, "limit.sgemm", batch, seq, setup(false)},
      {"tst.default.train_step", shape, 0, 3 * forward_flops, "limit.sgemm", batch, seq,
       setup(true)}};
}

// How a training step grows with the sequence (attention's S^2 in time and memory) and with the
// batch: one encoder layer, d 64, 8 heads.
template <class Space>
std::vector<Case> scaling_cases(const Space& space) {
  std::vector<Case> cases;
  for (int seq = 64; seq <= 4096; seq *= 2)
    for (auto& c :
         encoder_cases(space, "scaling.seq." + std::to_string(seq), 4, seq, 64, 8, 256, 1, false))
      cases.push_back(std::move(c));
  for (const int batch : {1, 4, 16, 64})
    for (auto& c : encoder_cases(space, "scaling.batch." + std::to_string(batch), batch, 256, 64, 8,
                                 256, 1, false))
      cases.push_back(std::move(c));
  return cases;
}

// --filter: a glob over the whole name if it has * ? or [, a part of the name otherwise (as in
// compare_pytorch.py). The scaling cases are long and big: only an explicit filter runs them.
bool selected(const Options& o, const std::string& name) {
  if (name.rfind("limit.", 0) == 0) return true;
  if (o.filter.empty()) return name.rfind("scaling.", 0) != 0;
  if (o.filter.find_first_of("*?[") != std::string::npos)
    return fnmatch(o.filter.c_str(), name.c_str(), 0) == 0;
  return name.find(o.filter) != std::string::npos;
}

template <class Space>
void run_backend(const Space& space, const Options& o, nlohmann::json& results) {
  const auto info = kformer::backends::backend_info(space);
  std::printf("\n== %s: %s\n", info.backend.c_str(), info.device.c_str());
  std::vector<Case> cases;
  cases.push_back(copy_case(space, std::int64_t(32) << 20, "limit.copy", "2 x 128 MiB float"));
  cases.push_back(sgemm_case(space, 1024));
  const auto append = [&](std::vector<Case> more) {
    for (auto& c : more)
      cases.push_back(std::move(c));
  };
  append(encoding_cases(space));
  append(linear_cases(space));
  append(attention_cases(space, "tst_default", 32, 64, 64, 8));
  append(attention_cases(space, "long", 4, 1024, 128, 8));
  append(encoder_cases(space, "encoder_layer.tst_default", 32, 64, 64, 8, 256, 1));
  append(encoder_cases(space, "encoder.tst_default", 32, 64, 64, 8, 256, 3));
  append(encoder_cases(space, "encoder.tst_large", 64, 128, 128, 8, 256, 3));
  append(tst_cases(space));
  append(scaling_cases(space));

  // Baselines are set up once and kept; every other case lives only while it is measured.
  std::map<std::string, std::function<void()>> baselines;
  const auto baseline_run = [&](const std::string& name) -> const std::function<void()>* {
    if (name.empty()) return nullptr;
    auto found = baselines.find(name);
    if (found == baselines.end())
      for (const auto& c : cases)
        if (c.name == name) found = baselines.emplace(name, c.setup()).first;
    return found == baselines.end() ? nullptr : &found->second;
  };
  const auto rate_of = [&](const std::string& name, double seconds) {
    for (const auto& c : cases)
      if (c.name == name) return c.rate(seconds);
    return 0.0;
  };

  // A filter that selects only the limits is a typo: refuse it before timing anything.
  if (std::none_of(cases.begin(), cases.end(), [&](const Case& c) {
        return c.name.rfind("limit.", 0) != 0 && selected(o, c.name);
      }))
    kformer::fail("--filter", "no case matches '", o.filter,
                  "' (kformer-bench --list shows the cases)");

  std::printf("%-36s %-32s %10s %9s %9s %11s %10s\n", "case", "shape", "median ms", "GB/s",
              "GFLOP/s", "vs baseline", "peak MiB");
  for (const auto& c : cases) {
    if (!selected(o, c.name)) continue;
    if (o.list) {
      std::printf("%s %s\n", c.name.c_str(), c.shape.c_str());
      continue;
    }
    const auto* baseline = o.profile ? nullptr : baseline_run(c.baseline);
    space.fence();
    const std::int64_t live_before = kformer::backends::MemoryTracker::live();
    kformer::backends::MemoryTracker::reset_peak();
    Timing t, tb;
    {
      // A case of the baseline itself reuses the baseline's state.
      const bool is_baseline = baselines.count(c.name) > 0;
      const std::function<void()> run = is_baseline ? baselines[c.name] : c.setup();
      // A profile covers the timed runs only: the warm-ups' first touches of new pages (0.3 ms a
      // bias broadcast instead of 0.08 in the TST train step) would swell the shares of the
      // kernels that write new buffers.
      std::tie(t, tb) = time_case(space, run, baseline, o.repeat, [&]() {
        if (o.profile) kformer::bench::KernelProfile::reset();
      });
      space.fence();
    }
    const std::int64_t peak_bytes = kformer::backends::MemoryTracker::peak() - live_before;
    if (o.profile) {
      std::printf("%-36s %-32s %10.3f   (profile of the %d timed runs)\n", c.name.c_str(),
                  c.shape.c_str(), t.median * 1e3, o.repeat);
      kformer::bench::KernelProfile::print(t.total);
      continue;
    }
    const double gbs = c.bytes / t.median * 1e-9, gflops = c.flops / t.median * 1e-9;
    const double ratio = baseline ? c.rate(t.median) / rate_of(c.baseline, tb.median) : 0.0;
    char ratio_text[32] = "";
    if (baseline)
      std::snprintf(ratio_text, sizeof ratio_text, "%.2fx %s", ratio, c.flops > 0 ? "flop" : "bw");
    std::printf("%-36s %-32s %10.3f %9.2f %9.2f %11s %10.1f\n", c.name.c_str(), c.shape.c_str(),
                t.median * 1e3, gbs, gflops, ratio_text, peak_bytes / 1048576.0);
    nlohmann::json r = {{"backend", info.backend},
                        {"device", info.device},
                        {"threads", info.concurrency},
                        {"case", c.name},
                        {"shape", c.shape},
                        {"median_s", t.median},
                        {"min_s", t.min},
                        {"max_s", t.max},
                        {"repeat", o.repeat},
                        {"bytes", c.bytes},
                        {"flops", c.flops},
                        {"gb_per_s", gbs},
                        {"gflop_per_s", gflops},
                        {"peak_bytes", peak_bytes},
                        {"batch", c.batch > 0 ? nlohmann::json(c.batch) : nlohmann::json()},
                        {"seq", c.seq > 0 ? nlohmann::json(c.seq) : nlohmann::json()}};
    if (baseline) {
      r["baseline"] = c.baseline;
      r["baseline_median_s"] = tb.median;
      r["ratio_to_baseline"] = ratio;
    }
    results.push_back(r);
  }
}

// The first line a shell command prints, or "unknown".
std::string first_line_of(const std::string& command) {
  std::string line;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[256];
    if (std::fgets(buffer, sizeof buffer, pipe)) line = buffer;
    pclose(pipe);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.pop_back();
  return line.empty() ? "unknown" : line;
}

// The source tree's revision; KFORMER_GIT_REVISION names it where the binary runs away from its
// source tree (scripts/gpu-bundle's bundles).
std::string git_revision() {
  if (const char* given = std::getenv("KFORMER_GIT_REVISION")) return given;
  return first_line_of("git -C '" + std::string(KFORMER_SOURCE_DIR) +
                       "' rev-parse --short HEAD 2>/dev/null");
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
}

// --repeat's value: a whole number in [1, kMaxRepeat], or 0 for anything else.
constexpr int kMaxRepeat = 100000;
int positive_int(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  const bool whole = !text.empty() && *end == '\0' && errno == 0;
  return whole && value >= 1 && value <= kMaxRepeat ? static_cast<int>(value) : 0;
}

// Why a file cannot be created at `path` (write_file_atomic's temporary next to it), or "".
std::string cannot_write(const std::string& path) {
  std::string probe = path + ".probe.XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) return std::strerror(errno);
  close(fd);
  std::remove(probe.c_str());
  return "";
}

// kformer-bench report ARGS...: perf/report.py with the system Python (which has matplotlib).
int run_report(int argc, char* argv[]) {
  const std::string script = std::string(KFORMER_PERF_DIR) + "/report.py";
  const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::vector<char*> args{const_cast<char*>(python), const_cast<char*>(script.c_str())};
  for (int i = 2; i < argc; ++i)
    args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp(python, args.data());
  std::fprintf(stderr, "kformer-bench report: cannot run %s %s\n", python, script.c_str());
  return 2;
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc >= 2 && std::strcmp(argv[1], "report") == 0) return run_report(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kformer-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--filter")
      o.filter = value();
    else if (a == "--backend")
      o.backend = value();
    else if (a == "--repeat") {
      const std::string text = value();
      o.repeat = positive_int(text);
      if (o.repeat == 0) {
        std::fprintf(stderr,
                     "kformer-bench: --repeat needs a whole number from 1 to %d, got '%s'\n",
                     kMaxRepeat, text.c_str());
        return 2;
      }
    } else if (a == "--json")
      o.json = value();
    else if (a == "--list")
      o.list = true;
    else if (a == "--profile")
      o.profile = true;
    else if (a.rfind("--kokkos-", 0) == 0)
      continue;
    else {
      std::fprintf(stderr, "kformer-bench: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (!o.json.empty()) {
    // Refused before the suite runs, not after: a run takes minutes.
    if (o.list || o.profile) {
      std::fprintf(stderr, "kformer-bench: --json cannot go with %s, which records no results\n",
                   o.list ? "--list" : "--profile");
      return 2;
    }
    if (const std::string why = cannot_write(o.json); !why.empty()) {
      std::fprintf(stderr, "kformer-bench: cannot write --json %s: %s\n", o.json.c_str(),
                   why.c_str());
      return 2;
    }
  }
  // One Tools callback set at a time: --profile times kernels, otherwise memory is tracked.
  if (o.profile)
    kformer::bench::KernelProfile::install();
  else
    kformer::backends::MemoryTracker::install();
  nlohmann::json results = nlohmann::json::array();
  try {
    kformer::backends::print_backends(std::cout);
    const auto run = [&](auto space) { run_backend(space, o, results); };
    if (o.backend.empty())
      kformer::backends::for_each_space(run);
    else
      kformer::backends::dispatch(o.backend, run);  // refuses a backend that is not compiled in
  } catch (const kformer::Error& e) {
    std::fprintf(stderr, "kformer-bench: error: %s\n", e.what());
    return 2;
  }
  if (!o.json.empty()) {
    const kformer::backends::HostBlasInfo blas = kformer::backends::host_blas_info();
    nlohmann::json doc = {{"kokkos", kformer::backends::kokkos_version()},
                          {"compiler", kformer::backends::compiler_description()},
                          {"host_blas", blas.library},
                          {"host_blas_kernels", blas.kernels},
                          {"git_revision", git_revision()},
                          {"host", host_name()},
                          {"date", utc_now()},
                          {"results", results}};
    try {
      kformer::write_file_atomic(o.json, doc.dump(2));
    } catch (const kformer::Error& e) {
      std::fprintf(stderr, "kformer-bench: error: %s\n", e.what());
      return 2;
    }
  }
  return 0;
}

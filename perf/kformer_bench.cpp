// kformer-bench: benchmarks on every enabled execution space, with the machine's limits measured
// in the same run (a copy kernel for bandwidth, a large sgemm for compute), printed as a table
// and written as JSON.
//
//   kformer-bench [--filter PREFIX] [--backend NAME] [--repeat N] [--json FILE] [--list]
//   [--profile]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// One benchmark case: what it moves and computes, and how to run it once.
struct Case {
  std::string name;      // "encoding.fixed.add"
  std::string shape;     // "(8, 4096, 512) float"
  double bytes = 0;      // bytes read + written by one run
  double flops = 0;      // floating-point operations of one run
  std::string baseline;  // the case it is timed in alternation with and compared to ("" = none)
  std::function<void()> run;

  bool compute_bound() const { return flops > 0; }
  double rate(double seconds) const { return (compute_bound() ? flops : bytes) / seconds * 1e-9; }
};

struct Timing {
  double median = 0, min = 0, max = 0;
};

Timing summarize(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], seconds.front(), seconds.back()};
}

// Times `c` and, when given, `baseline` in alternation (c, baseline, c, ...), so that both see
// the same machine state: on shared machines bandwidth drifts by 10-30 % within seconds, which
// would otherwise show up in the ratio.
template <class Space>
std::pair<Timing, Timing> time_case(const Space& space, const Case& c, const Case* baseline,
                                    int repeat) {
  for (int warm = 0; warm < 2; ++warm) {  // first touch of pages, scratch pools, BLAS buffers
    c.run();
    if (baseline) baseline->run();
  }
  space.fence();
  std::vector<double> seconds, baseline_seconds;
  for (int r = 0; r < repeat; ++r) {
    Kokkos::Timer timer;
    c.run();
    space.fence();
    seconds.push_back(timer.seconds());
    if (baseline) {
      timer.reset();
      baseline->run();
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

// y = x over n floats: the bandwidth every memory-bound case is compared with.
template <class Space>
Case copy_case(const Space& space, std::int64_t n, const std::string& name,
               const std::string& shape) {
  Kokkos::View<float*, typename Space::memory_space> x("x", n), y("y", n);
  Kokkos::deep_copy(x, 1.0f);
  Case c{name, shape, 2.0 * n * sizeof(float), 0, "", {}};
  c.run = [=]() {
    Kokkos::parallel_for(
        "bench::copy", Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(space, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { y(i) = x(i); });
  };
  return c;
}

template <class Space>
Case sgemm_case(const Space& space, int n) {
  Tensor2<float, Space> a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  Case k{"limit.sgemm",
         "(" + std::to_string(n) + ")^3 float",
         3.0 * n * n * sizeof(float),
         2.0 * n * n * double(n),
         "",
         {}};
  k.run = [=]() {
    kformer::backends::gemm(space, kformer::backends::Op::N, kformer::backends::Op::N, 1.0f, a, b,
                            0.0f, c);
  };
  return k;
}

template <class Space>
std::vector<Case> encoding_cases(const Space& space) {
  const int batch = 8, seq = 4096, dim = 512;
  const std::string shape = "(8, 4096, 512) float";
  const std::int64_t n = std::int64_t(batch) * seq * dim;
  const double tensor_bytes = double(n) * sizeof(float);
  std::vector<Case> cases;
  const std::string copy = "encoding.copy";
  cases.push_back(copy_case(space, n, copy, shape));

  Tensor3<float, Space> x("x", batch, seq, dim), y("y", batch, seq, dim);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(y, 0.5f);
  auto fixed = std::make_shared<kformer::PositionalEncoding<float, Space>>(dim);
  cases.push_back({"encoding.fixed.add", shape, 2 * tensor_bytes, 0, copy,
                   [=]() { fixed->forward(space, x, y); }});
  cases.push_back({"encoding.fixed.inplace", shape, 2 * tensor_bytes, 0, copy,
                   [=]() { fixed->forward_inplace(space, y); }});
  const double table_bytes = double(seq) * dim * sizeof(float);
  cases.push_back({"encoding.fixed.matrix", "(4096, 512) float", table_bytes, 0, copy,
                   [=]() { kformer::positional_encoding<float>(space, dim, seq); }});
  // What the fixed encoding avoids: x + a cached (seq, dim) table, as PyTorch's TST does.
  const auto table = kformer::positional_encoding<float>(space, dim, seq);
  cases.push_back(
      {"encoding.cached_table.add", shape, 2 * tensor_bytes, 0, copy, [=]() {
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
       }});

  auto learnable =
      std::make_shared<kformer::LearnablePositionalEncoding<float, Space>>(space, seq, dim);
  cases.push_back({"encoding.learnable.forward", shape, 2 * tensor_bytes + table_bytes, 0, copy,
                   [=]() { learnable->forward(space, x, y); }});
  cases.push_back({"encoding.learnable.backward", shape, 2 * tensor_bytes + 2 * table_bytes, 0,
                   copy, [=]() { learnable->backward(space, x, y); }});

  auto value = std::make_shared<kformer::ValueEncoding<float, Space>>(space, dim);
  Tensor2<float, Space> values("values", batch, seq);
  Kokkos::deep_copy(values, 0.75f);
  cases.push_back({"encoding.value.add", shape,
                   2 * tensor_bytes + double(batch) * seq * sizeof(float), 0, copy,
                   [=]() { value->forward(space, values, x, y); }});
  return cases;
}

// A TST-style encoder stack (BatchNorm, GELU, post-norm, dropout 0.1) at a (batch, seq) shape:
// forward in eval mode, and a training step (forward + backward in training mode).
template <class Space>
std::vector<Case> encoder_cases(const Space& space, const std::string& tag, int batch, int seq,
                                int d, int heads, int ff, int layers) {
  kformer::EncoderLayerOptions o;
  o.d_model = d;
  o.heads = heads;
  o.dim_feedforward = ff;
  auto encoder = std::make_shared<kformer::TransformerEncoder<float, Space>>(space, layers, o);
  Tensor3<float, Space> x("x", batch, seq, d), y("y", batch, seq, d), dy("dy", batch, seq, d),
      dx("dx", batch, seq, d);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(dy, 0.01f);
  const double n = double(batch) * seq;
  const double forward_flops = layers * (2 * n * d * 3 * d + 4.0 * batch * seq * double(seq) * d +
                                         2 * n * d * d + 4 * n * d * ff);
  const std::string shape = "(" + std::to_string(batch) + ", " + std::to_string(seq) + ", " +
                            std::to_string(d) + ") h" + std::to_string(heads) + " ff" +
                            std::to_string(ff) + " L" + std::to_string(layers);
  auto step = std::make_shared<std::uint64_t>(0);
  std::vector<Case> cases;
  cases.push_back({"encoder." + tag + ".forward", shape, 0, forward_flops, "limit.sgemm", [=]() {
                     encoder->forward(space, kformer::RunContext{false, 0}, x, y);
                   }});
  cases.push_back(
      {"encoder." + tag + ".train_step", shape, 0, 3 * forward_flops, "limit.sgemm", [=]() {
         encoder->forward(space, kformer::RunContext{true, ++*step}, x, y);
         encoder->backward(space, x, dy, dx);
       }});
  return cases;
}

bool selected(const Options& o, const std::string& name) {
  return o.filter.empty() || name.find(o.filter) != std::string::npos ||
         name.rfind("limit.", 0) == 0;
}

template <class Space>
void run_backend(const Space& space, const Options& o, nlohmann::json& results) {
  const auto info = kformer::backends::backend_info(space);
  std::printf("\n== %s: %s\n", info.backend.c_str(), info.device.c_str());
  std::vector<Case> cases;
  cases.push_back(copy_case(space, std::int64_t(32) << 20, "limit.copy", "2 x 128 MiB float"));
  cases.push_back(sgemm_case(space, 1024));
  // Families are built (their buffers allocated) only when the filter can select them.
  const auto wanted = [&](const std::string& family) {
    return o.filter.empty() || o.filter.rfind(family, 0) == 0 || family.rfind(o.filter, 0) == 0;
  };
  const auto append = [&](std::vector<Case> more) {
    for (auto& c : more)
      cases.push_back(std::move(c));
  };
  if (wanted("encoding")) append(encoding_cases(space));
  if (wanted("encoder.tst_default"))
    append(encoder_cases(space, "tst_default", 32, 64, 64, 8, 256, 3));
  if (wanted("encoder.tst_large"))
    append(encoder_cases(space, "tst_large", 64, 128, 128, 8, 256, 3));
  const auto find = [&](const std::string& name) -> const Case* {
    for (const auto& c : cases)
      if (c.name == name) return &c;
    return nullptr;
  };

  std::printf("%-30s %-22s %10s %10s %10s %12s\n", "case", "shape", "median ms", "GB/s", "GFLOP/s",
              "vs baseline");
  for (const auto& c : cases) {
    if (!selected(o, c.name)) continue;
    if (o.list) {
      std::printf("%s %s\n", c.name.c_str(), c.shape.c_str());
      continue;
    }
    const Case* baseline = c.baseline.empty() ? nullptr : find(c.baseline);
    if (o.profile) kformer::bench::KernelProfile::reset();
    const auto [t, tb] = time_case(space, c, o.profile ? nullptr : baseline, o.repeat);
    if (o.profile) {
      kformer::bench::KernelProfile::print(t.median * (o.repeat + 2));
      continue;
    }
    const double gbs = c.bytes / t.median * 1e-9, gflops = c.flops / t.median * 1e-9;
    const double ratio = baseline ? c.rate(t.median) / baseline->rate(tb.median) : 0.0;
    std::printf("%-30s %-22s %10.3f %10.2f %10.2f %12s\n", c.name.c_str(), c.shape.c_str(),
                t.median * 1e3, gbs, gflops,
                baseline ? (std::to_string(ratio).substr(0, 4) + "x " +
                            (baseline->compute_bound() ? "flop" : "bw"))
                               .c_str()
                         : "");
    nlohmann::json r = {
        {"backend", info.backend}, {"device", info.device}, {"threads", info.concurrency},
        {"case", c.name},          {"shape", c.shape},      {"median_s", t.median},
        {"min_s", t.min},          {"max_s", t.max},        {"repeat", o.repeat},
        {"bytes", c.bytes},        {"flops", c.flops},      {"gb_per_s", gbs},
        {"gflop_per_s", gflops}};
    if (baseline) {
      r["baseline"] = c.baseline;
      r["baseline_median_s"] = tb.median;
      r["ratio_to_baseline"] = ratio;
    }
    results.push_back(r);
  }
}

}  // namespace

int main(int argc, char* argv[]) {
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
    else if (a == "--repeat")
      o.repeat = std::max(1, std::atoi(value().c_str()));
    else if (a == "--json")
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
  if (o.profile) kformer::bench::KernelProfile::install();
  nlohmann::json results = nlohmann::json::array();
  try {
    kformer::backends::print_backends(std::cout);
    kformer::backends::for_each_space([&](auto space) {
      if (o.backend.empty() || o.backend == kformer::backends::space_name<decltype(space)>())
        run_backend(space, o, results);
    });
  } catch (const kformer::Error& e) {
    std::fprintf(stderr, "kformer-bench: error: %s\n", e.what());
    return 2;
  }
  if (!o.json.empty()) {
    nlohmann::json doc = {{"kokkos", kformer::backends::kokkos_version()},
                          {"compiler", kformer::backends::compiler_description()},
                          {"results", results}};
    kformer::write_file_atomic(o.json, doc.dump(2));
  }
  return 0;
}

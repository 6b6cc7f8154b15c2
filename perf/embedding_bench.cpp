// The embedded surrogate's two steps, timed: inference (forward) and online training (zero_grad,
// forward, MSE with its value left on the device, backward, Adam), for the model of
// examples/simulation (Linear(patch -> width), PositionalEncoding, a 2-layer encoder with 4 heads,
// LayerNorm and GELU, Linear(width -> patch)) in double on Kokkos' default execution space.
// perf/embedding_bench_libtorch.cpp is the same loop in LibTorch; perf/embedding_side_by_side.py
// runs both on the same threads and prints the table of docs/embedding.md.
//
//   kformer-embedding-bench [--members B] [--tokens S] [--patch P] [--width D] [--steps N]
//                           [--repeat R]
// prints one JSON object: the median time per step of R rounds of N steps each, for each step
// kind, and the peak resident memory over the resident memory before the model was made.
#include <kformer/kformer.hpp>

#include "embedding_options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using embedding_bench::Sizes;
using embedding_bench::status_mib;

using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;
using Net =
    kformer::Sequential<double, Space, kformer::Linear<double, Space>,
                        kformer::PositionalEncoding<double, Space>,
                        kformer::TransformerEncoder<double, Space>, kformer::Linear<double, Space>>;

// Median over rounds of the mean time per step of `steps` calls of f, in ms.
template <class F>
double median_ms(const Sizes& s, F&& f) {
  std::vector<double> rounds;
  for (int r = 0; r < s.repeat; ++r) {
    Kokkos::Timer timer;
    for (int i = 0; i < s.steps; ++i)
      f(i);
    Space().fence();
    rounds.push_back(timer.seconds() * 1e3 / s.steps);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int main(int argc, char* argv[]) {
  Sizes s;
  if (const int rc = embedding_bench::parse("kformer-embedding-bench", argc, argv, s)) return rc;
  Kokkos::ScopeGuard kokkos(argc, argv);
  const double rss_before = status_mib("VmRSS");
  const Space exec;
  const kformer::EncoderLayerOptions encoder{
      s.width, 4, 2 * s.width, 0.0, kformer::Activation::GELU, kformer::NormType::LayerNorm,
      false,   3};
  Net net(exec, s.patch, kformer::Linear<double, Space>(exec, s.patch, s.width, {true, 1}),
          kformer::PositionalEncoding<double, Space>(exec, s.width),
          kformer::TransformerEncoder<double, Space>(exec, 2, encoder),
          kformer::Linear<double, Space>(exec, s.width, s.patch, {true, 2}));
  kformer::Optimizer<double, Space> adam(exec, net.parameters().size(), {});
  kformer::Losses<double, Space> losses;
  using T3 = kformer::Tensor3<double, Memory>;
  T3 x("x", s.members, s.tokens, s.patch), target("target", s.members, s.tokens, s.patch);
  T3 y("y", s.members, s.tokens, s.patch), dy("dy", s.members, s.tokens, s.patch);
  kformer::fill_uniform(exec, x, -1.0, 1.0, 11);
  kformer::fill_uniform(exec, target, -1.0, 1.0, 12);
  const Kokkos::View<double, Memory> loss("loss");
  const std::int64_t rows = std::int64_t(s.members) * s.tokens;
  const kformer::Tensor2<const double, Memory> y_flat(y.data(), rows, s.patch),
      target_flat(target.data(), rows, s.patch);
  const kformer::Tensor2<double, Memory> dy_flat(dy.data(), rows, s.patch);

  const auto infer = [&](int) { net.forward(exec, kformer::RunContext{false, 0, false}, x, y); };
  const auto train = [&](int i) {
    const kformer::RunContext ctx{true, static_cast<std::uint64_t>(i), true};
    net.zero_grad(exec);
    net.forward(exec, ctx, x, y);
    losses.mse(exec, y_flat, target_flat, dy_flat, loss);
    net.backward(exec, ctx, x, dy, T3());
    adam.step(exec, net.parameters().values(), net.parameters().grads(), 1e-4);
  };
  for (int i = 0; i < 5; ++i) {  // warm-up: buffers grow, caches fill
    infer(i);
    train(i);
  }
  const double inference = median_ms(s, infer), training = median_ms(s, train);
  std::printf(
      "{\"engine\": \"kformer\", \"backend\": \"%s\", \"threads\": %d, \"members\": %d, "
      "\"tokens\": %d, \"patch\": %d, \"width\": %d, \"parameters\": %lld, "
      "\"inference_ms\": %.6f, \"training_ms\": %.6f, \"memory_mib\": %.1f}\n",
      Space::name(), kformer::compat::concurrency(exec), s.members, s.tokens, s.patch, s.width,
      static_cast<long long>(net.parameters().size()), inference, training,
      status_mib("VmHWM") - rss_before);
  return 0;
}

// A user's program against the installed kformer: the documented first row of the positional
// encoding, then a small TST classifier trained for a few steps on a fixed batch, whose loss must
// fall. Built with find_package(kformer) only, without kformer::math_flags.
#include <kformer/config.hpp>
#include <kformer/kformer.hpp>

#include <cmath>
#include <cstdio>

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using Space = Kokkos::DefaultExecutionSpace;
  using Memory = Space::memory_space;
  std::printf("consumer: kformer %s on Kokkos %s (%s)\n", KFORMER_VERSION_STRING,
              KFORMER_KOKKOS_VERSION_STRING, Space::name());

  Kokkos::View<float***, Kokkos::LayoutRight, Memory> pe("pe", 2, 3, 4);
  const kformer::PositionalEncoding<float, Space> encoding(4);
  encoding.forward(Space(), {}, pe, pe);
  const auto h = kformer::to_host(pe);
  const bool row_ok =
      h(1, 0, 0) == 0.0f && h(1, 0, 1) == 1.0f && h(1, 0, 2) == 0.0f && h(1, 0, 3) == 1.0f;
  std::printf("consumer: first row (%g, %g, %g, %g) %s\n", h(1, 0, 0), h(1, 0, 1), h(1, 0, 2),
              h(1, 0, 3), row_ok ? "ok" : "WRONG");

  // Two classes told apart by the sign of the series' mean.
  const int batch = 8, seq = 16, features = 3;
  kformer::TstConfig config;
  config.feat_dim = features;
  config.max_len = seq;
  config.d_model = 16;
  config.n_heads = 2;
  config.num_layers = 1;
  config.dim_feedforward = 32;
  config.dropout = 0.0;
  config.task = kformer::TstTask::Classification;
  config.num_outputs = 2;
  kformer::TimeSeriesTransformer<float, Space> model(Space(), config);
  Kokkos::View<float***, Kokkos::LayoutRight, Memory> x("x", batch, seq, features);
  Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, Memory> keep("keep", batch, seq);
  Kokkos::View<std::int32_t*, Kokkos::LayoutRight, Memory> labels("labels", batch);
  Kokkos::parallel_for(
      "consumer::data", Kokkos::RangePolicy<Space>(0, batch), KOKKOS_LAMBDA(const int b) {
        labels(b) = b % 2;
        for (int s = 0; s < seq; ++s) {
          keep(b, s) = 1;
          for (int f = 0; f < features; ++f)
            x(b, s, f) = (b % 2 ? 0.5f : -0.5f) + 0.1f * ((s * 7 + f * 3 + b) % 5 - 2);
        }
      });
  Kokkos::View<float**, Kokkos::LayoutRight, Memory> logits("logits", batch, 2),
      d_logits("d_logits", batch, 2);
  kformer::Losses<float, Space> losses;
  kformer::Optimizer<float, Space> adam(Space(), model.parameters().size(), {});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    model.forward(Space(), kformer::RunContext{true, std::uint64_t(step)}, x, keep, logits);
    const double loss = losses.cross_entropy(Space(), logits, labels, d_logits);
    model.zero_grad(Space());
    model.backward(Space(), {}, x, keep, d_logits);
    adam.step(Space(), model.parameters().values(), model.parameters().grads(), 1e-3);
    if (step == 0) first = loss;
    last = loss;
  }
  const bool trained = std::isfinite(last) && last < first;
  std::printf("consumer: cross-entropy %.4f -> %.4f after 20 steps %s\n", first, last,
              trained ? "ok" : "WRONG");
  return row_ok && trained ? 0 : 1;
}

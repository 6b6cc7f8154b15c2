// perf/embedding_bench.cpp's loop in LibTorch C++ (Debian's libtorch-dev 1.13): the same model
// (Linear(patch -> width), the sinusoidal positional encoding added, a 2-layer
// nn::TransformerEncoder with 4 heads, dim_feedforward 2 width, GELU, post-norm LayerNorm, no
// dropout, Linear(width -> patch)), in double, on torch's intra-op threads (OMP_NUM_THREADS).
// Inference under NoGradGuard; a training step is zero_grad, forward, MSE, backward, Adam. Only
// for the comparison; never built by default nor needed by kformer or its tests.
//
//   kformer-embedding-bench-libtorch [--members B] [--tokens S] [--patch P] [--width D]
//                                    [--steps N] [--repeat R]
#include <torch/torch.h>

#include "embedding_options.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using embedding_bench::Sizes;
using embedding_bench::status_mib;

template <class F>
double median_ms(const Sizes& s, F&& f) {
  std::vector<double> rounds;
  for (int r = 0; r < s.repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < s.steps; ++i)
      f();
    rounds.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        s.steps);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

// Interleaved sinusoid (kformer's PositionalEncoding): pe(s, 2i) = sin(s w_i), pe(s, 2i+1) =
// cos(s w_i), w_i = 10000^(-2i/d); shape (S, 1, d) to add to (S, B, d).
torch::Tensor positional_encoding(int tokens, int width) {
  auto pe = torch::zeros({tokens, 1, width}, torch::kFloat64);
  auto a = pe.accessor<double, 3>();
  for (int s = 0; s < tokens; ++s)
    for (int i = 0; 2 * i < width; ++i) {
      const double w = std::pow(10000.0, -2.0 * i / width);
      a[s][0][2 * i] = std::sin(s * w);
      if (2 * i + 1 < width) a[s][0][2 * i + 1] = std::cos(s * w);
    }
  return pe;
}

}  // namespace

int main(int argc, char* argv[]) {
  Sizes s;
  if (const int rc = embedding_bench::parse("kformer-embedding-bench-libtorch", argc, argv, s))
    return rc;
  const char* threads = std::getenv("OMP_NUM_THREADS");
  if (threads != nullptr) torch::set_num_threads(std::atoi(threads));
  const double rss_before = status_mib("VmRSS");
  torch::manual_seed(0);
  torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  torch::nn::Linear up(s.patch, s.width), down(s.width, s.patch);
  torch::nn::TransformerEncoder encoder(
      torch::nn::TransformerEncoderOptions(torch::nn::TransformerEncoderLayerOptions(s.width, 4)
                                               .dim_feedforward(2 * s.width)
                                               .dropout(0.0)
                                               .activation(torch::kGELU),
                                           2));
  const torch::Tensor pe = positional_encoding(s.tokens, s.width);
  std::vector<torch::Tensor> parameters;
  for (auto* module : std::vector<torch::nn::Module*>{up.get(), encoder.get(), down.get()})
    for (const auto& p : module->parameters())
      parameters.push_back(p);
  torch::optim::Adam adam(parameters, torch::optim::AdamOptions(1e-4));
  // (S, B, patch): LibTorch 1.13's C++ TransformerEncoder is sequence-first.
  const torch::Tensor x = torch::rand({s.tokens, s.members, s.patch}) * 2 - 1;
  const torch::Tensor target = torch::rand({s.tokens, s.members, s.patch}) * 2 - 1;
  const auto model = [&](const torch::Tensor& in) {
    return down->forward(encoder->forward(up->forward(in) + pe));
  };
  const auto infer = [&] {
    torch::NoGradGuard no_grad;
    return model(x);
  };
  const auto train = [&] {
    adam.zero_grad();
    const torch::Tensor loss = torch::mse_loss(model(x), target);
    loss.backward();
    adam.step();
  };
  for (int i = 0; i < 5; ++i) {
    infer();
    train();
  }
  const double inference = median_ms(s, infer), training = median_ms(s, train);
  std::int64_t count = 0;
  for (const auto& p : parameters)
    count += p.numel();
  std::printf(
      "{\"engine\": \"libtorch\", \"backend\": \"cpu\", \"threads\": %d, \"members\": %d, "
      "\"tokens\": %d, \"patch\": %d, \"width\": %d, \"parameters\": %lld, "
      "\"inference_ms\": %.6f, \"training_ms\": %.6f, \"memory_mib\": %.1f, "
      "\"torch_version\": \"%d.%d.%d\"}\n",
      torch::get_num_threads(), s.members, s.tokens, s.patch, s.width,
      static_cast<long long>(count), inference, training, status_mib("VmHWM") - rss_before,
      TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  return 0;
}

// Transformer integrators (GeometricMachineLearning.jl's TransformerIntegrator): a network that
// maps a window of seq_length past states of a trajectory to the next prediction_window states,
// trained with MSE on windows cut from trajectories, and iterated on the device to roll a
// trajectory forward.
//
//   window x: (batch, seq_length, sys_dim) = states s .. s+seq_length-1
//   network:  y = net(x) (batch, seq_length, sys_dim); its last prediction_window rows are the
//             prediction of states s+seq_length .. s+seq_length+prediction_window-1
//   loss:     MSE of those rows against the trajectory's states
//
// The networks: VolumePreservingTransformer, or StandardTransformerNetwork below (a linear
// up-projection to d_model, kformer's encoder stack, a linear down-projection). kformer's
// PositionalEncoding (identity Jacobian, no parameters) goes in front of either when asked; it is
// off by default, as in the Julia package (the order is in the data).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/parameter_buffer.hpp"
#include "../core/profiling.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "../layers/elementwise.hpp"
#include "../layers/encoder.hpp"
#include "../layers/encodings/positional_encoding.hpp"
#include "../layers/linear.hpp"
#include "../losses/losses.hpp"
#include "../optimizers/optimizers.hpp"

namespace kformer {

struct StandardTransformerOptions {
  int d_model = 32;
  int heads = 4;
  int layers = 2;
  int dim_feedforward = 64;
  std::uint64_t seed = 0;
};

// Linear(sys_dim -> d_model), TransformerEncoder (LayerNorm, GELU, no dropout), Linear(d_model ->
// sys_dim).   x, y: (batch, seq, sys_dim)
template <class T, class ExecutionSpace>
class StandardTransformerNetwork {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;

  StandardTransformerNetwork(const ExecutionSpace& exec, int sys_dim,
                             const StandardTransformerOptions& o)
      : sys_dim_(sys_dim),
        d_model_(o.d_model),
        up_(exec, sys_dim, o.d_model, {true, derive_seed(o.seed, "up")},
            "kformer::StandardTransformerNetwork.up"),
        encoder_(exec, o.layers,
                 EncoderLayerOptions{o.d_model, o.heads, o.dim_feedforward, 0.0, Activation::GELU,
                                     NormType::LayerNorm, false, derive_seed(o.seed, "encoder")},
                 "kformer::StandardTransformerNetwork.encoder"),
        down_(exec, o.d_model, sys_dim, {true, derive_seed(o.seed, "down")},
              "kformer::StandardTransformerNetwork.down") {}

  template <class F>
  void visit_parameters(F&& f) {
    up_.visit_parameters([&](const std::string& n, auto& p) { f("up." + n, p); });
    encoder_.visit_parameters([&](const std::string& n, auto& p) { f("encoder." + n, p); });
    down_.visit_parameters([&](const std::string& n, auto& p) { f("down." + n, p); });
  }
  void zero_grad(const ExecutionSpace& exec) {
    up_.zero_grad(exec);
    encoder_.zero_grad(exec);
    down_.zero_grad(exec);
  }

  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& y) {
    const int batch = x.extent(0), seq = x.extent(1);
    auto hidden = hidden_.view(2, batch, seq, d_model_);
    const Tensor3 h0(&hidden(0, 0, 0, 0), batch, seq, d_model_);
    const Tensor3 h1(&hidden(1, 0, 0, 0), batch, seq, d_model_);
    up_.forward(exec, ctx, as_matrix(x), as_matrix(h0));
    encoder_.forward(exec, ctx, h0, h1);
    down_.forward(exec, ctx, as_matrix(ConstTensor3(h1)), as_matrix(y));
  }
  // dx may be empty (the up-projection's input gradient is then skipped).
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const ConstTensor3& dy, const Tensor3& dx) {
    const int batch = x.extent(0), seq = x.extent(1);
    auto hidden = hidden_.view(2, batch, seq, d_model_);
    auto grads = grads_.view(2, batch, seq, d_model_);
    const Tensor3 h0(&hidden(0, 0, 0, 0), batch, seq, d_model_);
    const Tensor3 h1(&hidden(1, 0, 0, 0), batch, seq, d_model_);
    const Tensor3 g1(&grads(1, 0, 0, 0), batch, seq, d_model_);
    const Tensor3 g0(&grads(0, 0, 0, 0), batch, seq, d_model_);
    down_.backward(exec, ctx, as_matrix(ConstTensor3(h1)), as_matrix(dy), as_matrix(g1));
    encoder_.backward(exec, ctx, h0, g1, g0);
    up_.backward(exec, ctx, as_matrix(x), as_matrix(ConstTensor3(g0)),
                 dx.data() ? as_matrix(dx) : Tensor2<T, memory_space>());
  }

 private:
  static Tensor2<const T, memory_space> as_matrix(const ConstTensor3& x) {
    return Tensor2<const T, memory_space>(x.data(), x.extent(0) * x.extent(1), x.extent(2));
  }
  static Tensor2<T, memory_space> as_matrix(const Tensor3& x) {
    return Tensor2<T, memory_space>(x.data(), x.extent(0) * x.extent(1), x.extent(2));
  }

  int sys_dim_ = 0, d_model_ = 0;
  Linear<T, ExecutionSpace> up_;
  TransformerEncoder<T, ExecutionSpace> encoder_;
  Linear<T, ExecutionSpace> down_;
  GrowingBuffer<T, memory_space> hidden_{"kformer::StandardTransformerNetwork::hidden"};
  GrowingBuffer<T, memory_space> grads_{"kformer::StandardTransformerNetwork::grads"};
};

namespace impl {

// Windows order(first .. first+n-1) of trajectories (count, steps, d) into x (n, seq, d) and the
// `window` states after each into target (n * window, d); window index w = trajectory * per +
// start. (Free functions: CUDA's extended lambdas may not live in private member functions.)
template <class ExecutionSpace, class Trajectories, class Order, class X, class Target>
void gather_windows(const ExecutionSpace& exec, const Trajectories& trajectories,
                    const Order& order, std::int64_t first, std::int64_t per, const X& x,
                    const Target& target) {
  const int n = x.extent(0), seq = x.extent(1), d = x.extent(2);
  const int window = target.extent(0) / (n > 0 ? n : 1);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::TransformerIntegrator::gather"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(n) * (seq + window) * d),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / ((seq + window) * d), r = (idx / d) % (seq + window), k = idx % d;
        const std::int64_t w = order(first + b);
        const std::int64_t t = w / per, start = w % per;
        if (r < seq)
          x(b, r, k) = trajectories(t, start + r, k);
        else
          target(std::int64_t(b) * window + r - seq, k) = trajectories(t, start + r, k);
      });
}

// rows (n * window, d) = the last `window` rows of each y(b) (n, seq, d).
template <class ExecutionSpace, class Y, class Rows>
void last_rows(const ExecutionSpace& exec, const Y& y, int window, const Rows& rows) {
  const int n = y.extent(0), seq = y.extent(1), d = y.extent(2);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::TransformerIntegrator::last_rows"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(n) * window * d),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / (window * d), r = (idx / d) % window, k = idx % d;
        rows(std::int64_t(b) * window + r, k) = y(b, seq - window + r, k);
      });
}

// dy (n, seq, d): the rows (n * window, d) in each dy(b)'s last `window` rows, zero above them.
template <class ExecutionSpace, class Rows, class DY>
void into_last_rows(const ExecutionSpace& exec, const Rows& rows, const DY& dy) {
  const int n = dy.extent(0), seq = dy.extent(1), d = dy.extent(2);
  const int window = rows.extent(0) / (n > 0 ? n : 1);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::TransformerIntegrator::into_last_rows"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(n) * seq * d),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / (seq * d), r = (idx / d) % seq, k = idx % d;
        dy(b, r, k) = r >= seq - window ? rows(std::int64_t(b) * window + r - (seq - window), k)
                                        : typename DY::non_const_value_type(0);
      });
}

}  // namespace impl

struct TransformerIntegratorOptions {
  int seq_length = 3;
  int prediction_window = 1;
  bool positional_encoding = false;  // kformer's PositionalEncoding(sys_dim) in front
  int batch_size = 64;
  double learning_rate = 1e-3;
  std::uint64_t seed = 0;  // the order of the windows in each epoch
};

template <class T, class ExecutionSpace, class Network>
class TransformerIntegrator {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;

  TransformerIntegrator(const ExecutionSpace& exec, Network& network, int sys_dim,
                        const TransformerIntegratorOptions& options)
      : network_(network),
        sys_dim_(sys_dim),
        options_(options),
        encoding_(sys_dim),
        optimizer_(exec, 0, OptimizerOptions{}) {
    constexpr const char* where = "kformer::TransformerIntegrator";
    if (options.seq_length < 1)
      fail(where, "seq_length must be at least 1, got ", options.seq_length);
    if (options.prediction_window < 1 || options.prediction_window > options.seq_length)
      fail(where, "prediction_window must be between 1 and seq_length (", options.seq_length,
           "), got ", options.prediction_window);
    if (options.batch_size < 1)
      fail(where, "batch_size must be at least 1, got ", options.batch_size);
    parameters_.gather(exec, network_);
    optimizer_ =
        Optimizer<T, ExecutionSpace>(exec, parameters_.values().extent(0), OptimizerOptions{});
  }

  const TransformerIntegratorOptions& options() const { return options_; }
  std::int64_t parameter_count() const { return parameters_.values().extent(0); }

  // Windows (with their targets) that fit in trajectories of `steps` states.
  std::int64_t windows_per_trajectory(std::int64_t steps) const {
    return std::max<std::int64_t>(0, steps - options_.seq_length - options_.prediction_window + 1);
  }

  // One epoch over every window of `trajectories` (trajectories, steps, sys_dim) in a shuffled
  // order; returns the mean training loss of its batches.
  double train_epoch(const ExecutionSpace& exec, const ConstTensor3& trajectories, int epoch) {
    const std::int64_t count = check_trajectories("train_epoch", trajectories);
    std::vector<std::int64_t> order(count);
    for (std::int64_t i = 0; i < count; ++i)
      order[i] = i;
    std::mt19937_64 rng(derive_seed(options_.seed, "epoch " + std::to_string(epoch)));
    std::shuffle(order.begin(), order.end(), rng);
    auto device_order = order_.view(count);
    auto host_order = Kokkos::create_mirror_view(device_order);
    for (std::int64_t i = 0; i < count; ++i)
      host_order(i) = order[i];
    Kokkos::deep_copy(exec, device_order, host_order);
    double sum = 0;
    int batches = 0;
    RunContext ctx{true, 0, true};
    for (std::int64_t first = 0; first < count; first += options_.batch_size) {
      const int n = static_cast<int>(std::min<std::int64_t>(options_.batch_size, count - first));
      gather(exec, trajectories, device_order, first, n);
      fill(exec, T(0), parameters_.grads());
      sum += loss_and_gradient(exec, ctx, n, true);
      optimizer_.step(exec, parameters_.values(), parameters_.grads(), options_.learning_rate);
      ++batches;
      ++ctx.step;
    }
    exec.fence();
    return batches > 0 ? sum / batches : 0.0;
  }

  // The MSE over every window of `trajectories`, without training.
  double loss(const ExecutionSpace& exec, const ConstTensor3& trajectories) {
    const std::int64_t count = check_trajectories("loss", trajectories);
    auto device_order = order_.view(count);
    Kokkos::parallel_for(
        KFORMER_LABEL("kformer::TransformerIntegrator::identity_order"),
        Kokkos::RangePolicy<ExecutionSpace>(exec, 0, count),
        KOKKOS_LAMBDA(const std::int64_t i) { device_order(i) = i; });
    double sum = 0;
    std::int64_t weight = 0;
    for (std::int64_t first = 0; first < count; first += options_.batch_size) {
      const int n = static_cast<int>(std::min<std::int64_t>(options_.batch_size, count - first));
      gather(exec, trajectories, device_order, first, n);
      sum += loss_and_gradient(exec, RunContext{false, 0, false}, n, false) * n;
      weight += n;
    }
    return sum / static_cast<double>(weight);
  }

  // Rolls every trajectory forward: its first seq_length states are given, the rest are
  // predicted window after window, all on the device (kernels only: no host round trip and no
  // fence per step).   trajectories: (trajectories, steps, sys_dim), steps >= seq_length
  void rollout(const ExecutionSpace& exec, const Tensor3& trajectories) {
    constexpr const char* where = "kformer::TransformerIntegrator::rollout";
    check_shape(where, "trajectories", trajectories, {-1, -1, sys_dim_});
    const int seq = options_.seq_length, window = options_.prediction_window, d = sys_dim_;
    const int count = trajectories.extent(0);
    const std::int64_t steps = trajectories.extent(1);
    if (steps < seq)
      fail(where, "trajectories have ", steps, " steps, fewer than seq_length (", seq, ")");
    auto x = inputs_.view(count, seq, d);
    auto y = outputs_.view(count, seq, d);
    const RunContext ctx{false, 0, false};
    for (std::int64_t s = seq; s < steps; s += window) {
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::TransformerIntegrator::rollout_window"),
          Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(count) * seq * d),
          KOKKOS_LAMBDA(const std::int64_t idx) {
            const int t = idx / (seq * d), r = (idx / d) % seq, k = idx % d;
            x(t, r, k) = trajectories(t, s - seq + r, k);
          });
      run_network(exec, ctx, x, y);
      const int take = static_cast<int>(std::min<std::int64_t>(window, steps - s));
      Kokkos::parallel_for(
          KFORMER_LABEL("kformer::TransformerIntegrator::rollout_append"),
          Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(count) * take * d),
          KOKKOS_LAMBDA(const std::int64_t idx) {
            const int t = idx / (take * d), r = (idx / d) % take, k = idx % d;
            trajectories(t, s + r, k) = y(t, seq - window + r, k);
          });
    }
  }

 private:
  std::int64_t check_trajectories(const char* method, const ConstTensor3& trajectories) const {
    const std::string where = std::string("kformer::TransformerIntegrator::") + method;
    check_shape(where, "trajectories", trajectories, {-1, -1, sys_dim_});
    const std::int64_t per = windows_per_trajectory(trajectories.extent(1));
    if (per < 1 || trajectories.extent(0) < 1)
      fail(where, "trajectories of ", trajectories.extent(1), " steps hold no window of ",
           options_.seq_length, " + ", options_.prediction_window,
           " steps (seq_length + prediction_window)");
    return per * std::int64_t(trajectories.extent(0));
  }

  // Windows order(first .. first+n-1) into inputs_ (n, seq, d) and their targets into
  // targets_ (n * window, d); window index w = trajectory * per + start.
  void gather(const ExecutionSpace& exec, const ConstTensor3& trajectories,
              const Tensor1<std::int64_t, memory_space>& order, std::int64_t first, int n) {
    const int seq = options_.seq_length, window = options_.prediction_window, d = sys_dim_;
    const std::int64_t per = windows_per_trajectory(trajectories.extent(1));
    impl::gather_windows(exec, trajectories, order, first, per, inputs_.view(n, seq, d),
                         targets_.view(std::int64_t(n) * window, d));
  }

  // The network (with the encoding in front when asked) on the gathered inputs.
  void run_network(const ExecutionSpace& exec, const RunContext& ctx, const Tensor3& x,
                   const Tensor3& y) {
    if (options_.positional_encoding) {
      auto encoded = encoded_.view(x.extent(0), x.extent(1), x.extent(2));
      encoding_.forward(exec, ctx, x, encoded);
      network_.forward(exec, ctx, encoded, y);
    } else {
      network_.forward(exec, ctx, x, y);
    }
  }

  // MSE of the last prediction_window rows of the network's output on inputs_ (n windows)
  // against targets_; with `backward`, the parameter gradients of it.
  double loss_and_gradient(const ExecutionSpace& exec, const RunContext& ctx, int n,
                           bool backward) {
    const int seq = options_.seq_length, window = options_.prediction_window, d = sys_dim_;
    auto x = inputs_.view(n, seq, d);
    auto y = outputs_.view(n, seq, d);
    run_network(exec, ctx, x, y);
    auto prediction = prediction_.view(std::int64_t(n) * window, d);
    auto d_prediction = d_prediction_.view(std::int64_t(n) * window, d);
    impl::last_rows(exec, y, window, prediction);
    auto target = targets_.view(std::int64_t(n) * window, d);
    const double value =
        losses_.mse(exec, prediction, target, backward ? d_prediction : Tensor2<T, memory_space>());
    if (!backward) return value;
    auto dy = d_outputs_.view(n, seq, d);
    impl::into_last_rows(exec, d_prediction, dy);
    // The encoding's Jacobian is the identity and it has no parameters: the network's input
    // gradient is not needed.
    const Tensor3 no_dx;
    if (options_.positional_encoding)
      network_.backward(exec, ctx, encoded_.view(n, seq, d), dy, no_dx);
    else
      network_.backward(exec, ctx, x, dy, no_dx);
    return value;
  }

  Network& network_;
  int sys_dim_ = 0;
  TransformerIntegratorOptions options_;
  PositionalEncoding<T, ExecutionSpace> encoding_;
  ParameterBuffer<T, memory_space> parameters_;
  Optimizer<T, ExecutionSpace> optimizer_;
  Losses<T, ExecutionSpace> losses_;
  GrowingBuffer<std::int64_t, memory_space> order_{"kformer::TransformerIntegrator::order"};
  GrowingBuffer<T, memory_space> inputs_{"kformer::TransformerIntegrator::inputs"};
  GrowingBuffer<T, memory_space> encoded_{"kformer::TransformerIntegrator::encoded"};
  GrowingBuffer<T, memory_space> outputs_{"kformer::TransformerIntegrator::outputs"};
  GrowingBuffer<T, memory_space> d_outputs_{"kformer::TransformerIntegrator::d_outputs"};
  GrowingBuffer<T, memory_space> targets_{"kformer::TransformerIntegrator::targets"};
  GrowingBuffer<T, memory_space> prediction_{"kformer::TransformerIntegrator::prediction"};
  GrowingBuffer<T, memory_space> d_prediction_{"kformer::TransformerIntegrator::d_prediction"};
};

}  // namespace kformer

// The TST model of Zerveas et al. (KDD 2021): a transformer encoder for multivariate time series
// with an imputation head (masked-value pretraining) or a classification/regression head.
//
//   h  = project_inp(x) * sqrt(d)              x: (B, S, F) standardized, missing values filled
//   h  = dropout(h + PE[:S])                   fixed, learnable or no positional encoding
//   z  = act(transformer_encoder(h, key_padding_mask = !keep))
//   z  = dropout(z)
//   imputation:                 out = output_layer(z)                  (B, S, F)
//   classification/regression:  out = output_layer(flatten(z * keep))  (B, n_out), S = max_len
//
// keep: (B, S) with 1 for the observed steps of a series and 0 for padding (TST's padding_masks).
// Parameter names are TST's state_dict names: project_inp.*, pos_enc.pe (learnable),
// transformer_encoder.layers.{i}.*, output_layer.*. All parameters live in one ParameterBuffer
// whose last entries are the output layer's (so fine-tuning with a frozen encoder updates a tail).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/finite.hpp"
#include "../core/parameter_buffer.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "../layers/activation.hpp"
#include "../layers/conv1d.hpp"
#include "../layers/dropout.hpp"
#include "../layers/elementwise.hpp"
#include "../layers/encoder.hpp"
#include "../layers/encodings/learnable_positional_encoding.hpp"
#include "../layers/encodings/positional_encoding.hpp"
#include "../layers/linear.hpp"
#include "tst_config.hpp"

namespace kformer {

namespace impl {

// kpm = !keep (PyTorch's key_padding_mask: true = ignore).
template <class ExecutionSpace, class Keep, class Kpm>
void key_padding_mask_from_keep(const ExecutionSpace& exec, const Keep& keep, const Kpm& kpm) {
  const int seq = keep.extent(1);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::tst::key_padding_mask"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, int(keep.extent(0)) * seq),
      KOKKOS_LAMBDA(const int i) { kpm(i / seq, i % seq) = keep(i / seq, i % seq) == 0; });
}

// a[b, s, :] = 0 where keep[b, s] == 0.
template <class ExecutionSpace, class Keep, class A>
void zero_padded_steps(const ExecutionSpace& exec, const Keep& keep, const A& a) {
  using T = typename A::non_const_value_type;
  const int seq = a.extent(1), d = a.extent(2);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::tst::zero_padding"),
      Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<3>>(exec, {0, 0, 0},
                                                             {int(a.extent(0)), seq, d}),
      KOKKOS_LAMBDA(const int b, const int s, const int j) {
        if (!keep(b, s)) a(b, s, j) = T(0);
      });
}

// steps = act(z); pooled[b, :] = mean of steps[b, s, :] over the kept steps (0 with none).
template <class ExecutionSpace, class Keep, class Z, class Steps, class Pooled>
void pooled_representations(const ExecutionSpace& exec, Activation act, const Keep& keep,
                            const Z& z, const Steps& steps, const Pooled& pooled) {
  using T = typename Steps::non_const_value_type;
  const int batch = z.extent(0), seq = z.extent(1), d = z.extent(2);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::tst::representations"),
      Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(exec, {0, 0}, {batch, d}),
      KOKKOS_LAMBDA(const int b, const int j) {
        T sum = 0;
        int kept = 0;
        for (int s = 0; s < seq; ++s) {
          const T v = activation_value(act, z(b, s, j));
          steps(b, s, j) = v;
          if (keep(b, s)) {
            sum += v;
            ++kept;
          }
        }
        pooled(b, j) = kept > 0 ? sum / kept : T(0);
      });
}

}  // namespace impl

template <class T, class ExecutionSpace>
class TimeSeriesTransformer {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using KeepMask =
      RowMajorView<Kokkos::View<const std::uint8_t**, Kokkos::LayoutRight, memory_space>>;

  TimeSeriesTransformer(const ExecutionSpace& exec, const TstConfig& config) : config_(config) {
    config_.validate("kformer::TimeSeriesTransformer");
    const auto& c = config_;
    const std::uint64_t seed = c.seed;
    if (c.projection == ProjectionKind::Linear)
      linear_projection_.emplace(exec, c.feat_dim, c.d_model,
                                 LinearOptions{true, derive_seed(seed, "project_inp")},
                                 "kformer::TST.project_inp");
    else
      conv_projection_.emplace(exec, c.feat_dim, c.d_model, conv_options(),
                               "kformer::TST.project_inp");
    const double input_scale = std::sqrt(static_cast<double>(c.d_model));
    if (c.pos_encoding == PositionalEncodingKind::Fixed) {
      PositionalEncodingOptions o;
      o.input_scale = input_scale;
      fixed_pe_.emplace(exec, c.d_model, o);
    } else if (c.pos_encoding == PositionalEncodingKind::Learnable) {
      LearnablePositionalEncodingOptions o;
      o.seed = derive_seed(seed, "pos_enc");
      o.input_scale = input_scale;
      learnable_pe_.emplace(exec, c.max_len, c.d_model, o);
      learnable_pe_->pe().shape = {c.max_len, 1, c.d_model};  // TST's (max_len, 1, d_model)
    }
    pos_dropout_ = Dropout<T, ExecutionSpace>(exec, c.dropout, derive_seed(seed, "pos_enc.dropout"),
                                              "kformer::TST.pos_enc.dropout");
    EncoderLayerOptions layer;
    layer.d_model = c.d_model;
    layer.heads = c.n_heads;
    layer.dim_feedforward = c.dim_feedforward;
    layer.dropout = c.dropout;
    layer.activation = c.activation;
    layer.norm = c.norm;
    layer.norm_first = c.norm_first;
    layer.seed = derive_seed(seed, "transformer_encoder");
    encoder_ = TransformerEncoder<T, ExecutionSpace>(exec, c.num_layers, layer,
                                                     "kformer::TST.transformer_encoder");
    output_dropout_ = Dropout<T, ExecutionSpace>(exec, c.dropout, derive_seed(seed, "dropout1"),
                                                 "kformer::TST.dropout1");
    const int head_in = c.task == TstTask::Imputation ? c.d_model : c.d_model * c.max_len;
    output_layer_ = Linear<T, ExecutionSpace>(
        exec, head_in, c.output_size(), LinearOptions{true, derive_seed(seed, "output_layer")},
        "kformer::TST.output_layer");
    parameters_.gather(exec, *this);
  }

  const TstConfig& config() const { return config_; }
  bool has_learnable_positional_encoding() const { return learnable_pe_.has_value(); }
  bool has_fixed_positional_encoding() const { return fixed_pe_.has_value(); }
  ParameterBuffer<T, memory_space>& parameters() { return parameters_; }
  TransformerEncoder<T, ExecutionSpace>& encoder() { return encoder_; }
  // The offset in parameters() where the output layer's parameters start.
  std::int64_t output_layer_offset() const {
    return parameters_.find("output_layer.weight")->offset;
  }

  // f(name, Param&) for every parameter, by TST state_dict name; the output layer comes last.
  template <class F>
  void visit_parameters(F&& f) {
    if (linear_projection_)
      linear_projection_->visit_parameters(
          [&](const std::string& n, auto& p) { f("project_inp." + n, p); });
    if (conv_projection_)
      conv_projection_->visit_parameters(
          [&](const std::string& n, auto& p) { f("project_inp." + n, p); });
    if (learnable_pe_)
      learnable_pe_->visit_parameters([&](const std::string& n, auto& p) { f("pos_enc." + n, p); });
    encoder_.visit_parameters(
        [&](const std::string& n, auto& p) { f("transformer_encoder." + n, p); });
    output_layer_.visit_parameters(
        [&](const std::string& n, auto& p) { f("output_layer." + n, p); });
  }
  // f(name, View) for the BatchNorm running statistics.
  template <class F>
  void visit_buffers(F&& f) {
    encoder_.visit_buffers(
        [&](const std::string& n, auto& b) { f("transformer_encoder." + n, b); });
  }
  // f(name, shape, View) for state that is computed rather than learned but that TST keeps in its
  // state_dict: the fixed encoding's table, pos_enc.pe (max_len, 1, d_model).
  template <class F>
  void visit_computed_state(const ExecutionSpace& exec, F&& f) {
    if (!fixed_pe_) return;
    const auto table = positional_encoding<T>(exec, config_.d_model, config_.max_len);
    f(std::string("pos_enc.pe"), std::vector<std::int64_t>{config_.max_len, 1, config_.d_model},
      table);
  }
  // f(name, BatchNorm&) for every BatchNorm layer (their num_batches_tracked counters).
  template <class F>
  void visit_batch_norms(F&& f) {
    for (int i = 0; i < encoder_.num_layers(); ++i) {
      auto& layer = encoder_.layer(i);
      const std::string prefix = "transformer_encoder.layers." + std::to_string(i) + ".";
      if (auto* bn = layer.norm1().template get<BatchNorm<T, ExecutionSpace>>())
        f(prefix + "norm1", *bn);
      if (auto* bn = layer.norm2().template get<BatchNorm<T, ExecutionSpace>>())
        f(prefix + "norm2", *bn);
    }
  }
  void zero_grad(const ExecutionSpace& exec) { fill(exec, T(0), parameters_.grads()); }

  // out = TST(x).   x: (B, S, F); keep: (B, S); out: (B*S, F) for imputation, (B, n_out) otherwise.
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const KeepMask& keep, const Matrix& out) {
    constexpr const char* where = "kformer::TimeSeriesTransformer::forward";
    const ProfilingRegion region(where);
    check_inputs(where, x, keep);
    if (check_finite_)
      require_finite(exec, x, where, "x (missing values must be filled before the model)");
    const int batch = x.extent(0), seq = x.extent(1), d = config_.d_model;
    check_shape(where, "out", out, output_shape(batch, seq));
    batch_ = batch;
    seq_ = seq;
    const auto h = input_.view(batch, seq, d);
    const auto z = encoded_.view(batch, seq, d);
    const auto a = activated_.view(batch, seq, d);
    const auto kpm = padding_.view(batch, seq);
    impl::key_padding_mask_from_keep(exec, keep, kpm);

    project(exec, ctx, x, h);
    check(exec, h, "project_inp", "forward");
    if (fixed_pe_)
      fixed_pe_->forward(exec, ctx, h, h);
    else if (learnable_pe_)
      learnable_pe_->forward(exec, ctx, h, h);
    else
      scale_copy(exec, static_cast<T>(std::sqrt(static_cast<double>(d))), h, h);
    check(exec, h, "pos_enc", "forward");
    pos_dropout_.forward(exec, ctx, h, h);
    encoder_.forward(exec, ctx, h, z, kpm);
    activation_forward(exec, config_.activation, z, a);
    output_dropout_.forward(exec, ctx, a, a);
    if (config_.task == TstTask::Imputation) {
      output_layer_.forward(exec, ctx, as_matrix(a), out);
    } else {
      impl::zero_padded_steps(exec, keep, a);
      output_layer_.forward(exec, ctx, Matrix(a.data(), batch, seq * d), out);
    }
    check(exec, out, "output_layer", "forward");
  }

  // Finite checks, off by default (each is a reduction read back on the host): with them on,
  // forward verifies its input x, and forward and backward every block's output and input
  // gradient and the parameter gradients, and stop with the first one holding a NaN or Inf.
  // The trainer checks each batch's values on the host as it gathers them.
  void set_finite_checks(bool on) {
    check_finite_ = on;
    encoder_.set_finite_checks(on);
  }

  // Parameter gradients of the last forward for d_out (accumulated into parameters().grads());
  // with freeze_encoder only the output layer's.
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
                const KeepMask& keep, const ConstMatrix& d_out, bool freeze_encoder = false) {
    constexpr const char* where = "kformer::TimeSeriesTransformer::backward";
    const ProfilingRegion region(where);
    check_inputs(where, x, keep);
    const int batch = x.extent(0), seq = x.extent(1), d = config_.d_model;
    if (batch != batch_ || seq != seq_)
      fail(where, "x has shape ", shape_of(x), " but the last forward saw (", batch_, ", ", seq_,
           ", *)");
    check_shape(where, "d_out", d_out, output_shape(batch, seq));
    const auto h = input_.view(batch, seq, d);
    const auto z = encoded_.view(batch, seq, d);
    const auto a = activated_.view(batch, seq, d);
    const auto da = d_activated_.view(batch, seq, d);
    const auto dh = d_input_.view(batch, seq, d);
    check(exec, d_out, "the loss gradient", "backward");
    if (config_.task == TstTask::Imputation) {
      output_layer_.backward(exec, ctx, as_matrix(a), d_out,
                             freeze_encoder ? Matrix() : as_matrix(da));
    } else {
      output_layer_.backward(exec, ctx, Matrix(a.data(), batch, seq * d), d_out,
                             freeze_encoder ? Matrix() : Matrix(da.data(), batch, seq * d));
      if (!freeze_encoder) impl::zero_padded_steps(exec, keep, da);
    }
    if (freeze_encoder) return check_parameter_gradients(exec);
    check(exec, da, "output_layer", "backward");
    output_dropout_.backward(exec, ctx, a, da, da);
    activation_backward(exec, config_.activation, z, da, da);
    encoder_.backward(exec, ctx, h, da, dh);
    pos_dropout_.backward(exec, ctx, h, dh, dh);
    if (learnable_pe_)
      learnable_pe_->backward(exec, ctx, h, dh, dh);
    else if (fixed_pe_)
      fixed_pe_->backward(exec, ctx, h, dh, dh);
    else
      scale_copy(exec, static_cast<T>(std::sqrt(static_cast<double>(d))), dh, dh);
    if (linear_projection_)
      linear_projection_->backward(exec, ctx, as_matrix(x), as_matrix(dh), Matrix());
    else
      conv_projection_->backward(exec, ctx, x, dh, Tensor3());
    check_parameter_gradients(exec);
  }

  // The representations of the last forward: per-step z (B, S, d) (the output layer's input,
  // before padding is zeroed) and, per series, the mean of z over its kept steps (B, d).
  void representations(const ExecutionSpace& exec, const KeepMask& keep, const Tensor3& steps,
                       const Matrix& pooled) {
    constexpr const char* where = "kformer::TimeSeriesTransformer::representations";
    const int batch = batch_, seq = seq_, d = config_.d_model;
    check_shape(where, "keep", keep, {batch, seq});
    check_shape(where, "steps", steps, {batch, seq, d});
    check_shape(where, "pooled", pooled, {batch, d});
    impl::pooled_representations(exec, config_.activation, keep, encoded_.view(batch, seq, d),
                                 steps, pooled);
  }

  std::array<std::int64_t, 2> output_shape(std::int64_t batch, std::int64_t seq) const {
    if (config_.task == TstTask::Imputation) return {batch * seq, config_.feat_dim};
    return {batch, config_.output_size()};
  }

 private:
  Conv1dOptions conv_options() const {
    Conv1dOptions o = config_.conv;
    o.same_padding = true;  // one output step per input step
    o.stride = 1;
    o.seed = derive_seed(config_.seed, "project_inp");
    return o;
  }

  template <class ViewType>
  void check(const ExecutionSpace& exec, const ViewType& v, const char* block,
             const char* pass) const {
    if (check_finite_)
      require_finite(exec, v, "kformer: non-finite value", std::string(block) + " (" + pass + ")");
  }

  // The first parameter whose gradient holds a NaN or Inf, by name.
  void check_parameter_gradients(const ExecutionSpace& exec) const {
    if (!check_finite_) return;
    const std::int64_t i = first_non_finite(exec, parameters_.grads());
    if (i < 0) return;
    for (const auto& e : parameters_.entries())
      if (i >= e.offset && i < e.offset + e.numel)
        fail("kformer: non-finite value", "the gradient of ", e.name,
             " holds a NaN or Inf at element ", i - e.offset);
  }

  void check_inputs(const Where& where, const ConstTensor3& x, const KeepMask& keep) const {
    check_shape(where, "x", x, {-1, -1, config_.feat_dim});
    const int seq = x.extent(1);
    if (config_.task != TstTask::Imputation && seq != config_.max_len)
      fail(where, "classification and regression flatten (seq * d_model): x must have max_len = ",
           config_.max_len, " steps, got x of shape ", shape_of(x));
    if (learnable_pe_ && seq > config_.max_len)
      fail(where, "sequence length ", seq, " exceeds the learnable encoding's max_len ",
           config_.max_len);
    check_shape(where, "keep", keep, {std::int64_t(x.extent(0)), seq});
  }

  void project(const ExecutionSpace& exec, const RunContext& ctx, const ConstTensor3& x,
               const Tensor3& h) {
    if (linear_projection_)
      linear_projection_->forward(exec, ctx, as_matrix(x), as_matrix(h));
    else
      conv_projection_->forward(exec, ctx, x, h);
  }

  TstConfig config_;
  int batch_ = 0, seq_ = 0;
  bool check_finite_ = false;
  std::optional<Linear<T, ExecutionSpace>> linear_projection_;
  std::optional<Conv1dProjection<T, ExecutionSpace>> conv_projection_;
  std::optional<PositionalEncoding<T, ExecutionSpace>> fixed_pe_;
  std::optional<LearnablePositionalEncoding<T, ExecutionSpace>> learnable_pe_;
  Dropout<T, ExecutionSpace> pos_dropout_, output_dropout_;
  TransformerEncoder<T, ExecutionSpace> encoder_;
  Linear<T, ExecutionSpace> output_layer_;
  ParameterBuffer<T, memory_space> parameters_;
  GrowingBuffer<T, memory_space> input_{"kformer::TST::encoder_input"},
      encoded_{"kformer::TST::encoded"}, activated_{"kformer::TST::activated"},
      d_activated_{"kformer::TST::d_activated"}, d_input_{"kformer::TST::d_encoder_input"};
  GrowingBuffer<bool, memory_space> padding_{"kformer::TST::key_padding_mask"};
};

}  // namespace kformer

// A transformer over MS/MS spectra, IDSL_MINT's way: the peaks are the tokens, each embedded as
// the sinusoid of its m/z (and of its intensity), projected, given a positional encoding when
// asked, passed through kformer's encoder stack with the padding masked, averaged over the
// spectrum's peaks and mapped to the outputs: fingerprint bits (with binary cross-entropy) or
// classes (with cross-entropy).
//
//   tokens:   mz, intensity (batch, peaks), padding (batch, peaks): true where a spectrum has no
//             peak (shorter spectra are padded); intensities relative to the base peak
//   h0 = enc_mz(mz) [+ enc_int(intensity_scale * intensity)]       (batch, peaks, d_model)
//   h1 = h0 W_in^T + b_in  [+ PE]                                   input projection, encoding
//   h2 = encoder(h1, key_padding_mask = padding)
//   p  = mean over the unpadded peaks of h2                          (batch, d_model): embed()
//   logits = p W_out^T + b_out                                       (batch, outputs)
//
// PE is the fixed sinusoid of the peak's rank, or a learnable (max_tokens, d_model) table (TST's
// and IDSL_MINT's option), or none. Parameters by state_dict name: input.*, encoder.*, output.*,
// and pos_enc.pe for the learnable table; checkpoints in training/spectrum_checkpoint.hpp.
//
// The m/z sinusoid has geometric wavelengths from mz_min_wavelength to mz_max_wavelength
// (depthcharge's mass encoder: 0.001 to 10000 Da resolves both the integer mass and its decimals);
// the intensity's, the positional encoding's frequencies. Every step is a Kokkos kernel on the
// given execution space; the encodings have no parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../core/view_adapters.hpp"
#include "../core/workspace.hpp"
#include "../layers/encoder.hpp"
#include "../layers/encodings/learnable_positional_encoding.hpp"
#include "../layers/encodings/positional_encoding.hpp"
#include "../layers/encodings/value_encoding.hpp"
#include "../layers/linear.hpp"
#include "tst_config.hpp"

namespace kformer {

struct SpectrumTransformerOptions {
  int d_model = 64;
  int heads = 4;
  int layers = 2;
  int dim_feedforward = 128;
  int outputs = 32;  // fingerprint bits, or classes
  // Of the peak's rank (by m/z): the fixed sinusoid, a learnable table of max_tokens rows, none.
  PositionalEncodingKind positional_encoding = PositionalEncodingKind::Fixed;
  int max_tokens = 256;  // the learnable table's rows: the most tokens a spectrum may have
  bool intensity_encoding = true;  // the intensity's sinusoid added to the m/z's
  double intensity_scale = 100.0;  // intensity 1 (the base peak) as position 100
  double mz_min_wavelength = 0.001;
  double mz_max_wavelength = 10000.0;
  std::uint64_t seed = 0;
};

namespace impl {

// p(b, k) = mean over the s with !padding(b, s) of h(b, s, k); 0 for a spectrum without peaks.
template <class ExecutionSpace, class H, class Padding, class P>
void masked_mean(const ExecutionSpace& exec, const H& h, const Padding& padding, const P& p) {
  const int batch = h.extent(0), peaks = h.extent(1), d = h.extent(2);
  using T = typename P::non_const_value_type;
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::SpectrumTransformer::masked_mean"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(batch) * d),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / d, k = idx % d;
        T sum = T(0);
        int count = 0;
        for (int s = 0; s < peaks; ++s)
          if (!padding(b, s)) {
            sum += h(b, s, k);
            ++count;
          }
        p(b, k) = count > 0 ? sum / T(count) : T(0);
      });
}

// dh(b, s, k) = dp(b, k) / count_b where !padding(b, s), else 0.
template <class ExecutionSpace, class DP, class Padding, class DH>
void masked_mean_backward(const ExecutionSpace& exec, const DP& dp, const Padding& padding,
                          const DH& dh) {
  const int batch = dh.extent(0), peaks = dh.extent(1), d = dh.extent(2);
  using T = typename DH::non_const_value_type;
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::SpectrumTransformer::masked_mean_backward"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(batch) * peaks * d),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        const int b = idx / (peaks * d), s = (idx / d) % peaks, k = idx % d;
        int count = 0;
        for (int t = 0; t < peaks; ++t)
          count += padding(b, t) ? 0 : 1;
        dh(b, s, k) = padding(b, s) || count == 0 ? T(0) : dp(b, k) / T(count);
      });
}

// y = scale * x, elementwise.
template <class ExecutionSpace, class X, class Y>
void scaled_copy(const ExecutionSpace& exec, double scale, const X& x, const Y& y) {
  const int rows = x.extent(0), cols = x.extent(1);
  using T = typename Y::non_const_value_type;
  const T s = static_cast<T>(scale);
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::SpectrumTransformer::scale_intensity"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, std::int64_t(rows) * cols),
      KOKKOS_LAMBDA(const std::int64_t idx) {
        y(idx / cols, idx % cols) = s * x(idx / cols, idx % cols);
      });
}

}  // namespace impl

template <class T, class ExecutionSpace>
class SpectrumTransformer {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Tensor3 = RowMajorView<kformer::Tensor3<T, memory_space>>;
  using ConstTensor3 = RowMajorView<kformer::Tensor3<const T, memory_space>>;
  using Matrix = RowMajorView<Tensor2<T, memory_space>>;
  using ConstMatrix = RowMajorView<Tensor2<const T, memory_space>>;
  using Mask = RowMajorView<Kokkos::View<const bool**, Kokkos::LayoutRight, memory_space>>;

  SpectrumTransformer(const ExecutionSpace& exec, const SpectrumTransformerOptions& o)
      : options_(checked(o)),
        mz_encoding_(exec, o.d_model,
                     SinusoidOptions{SinusoidLayout::Interleaved, 10000.0, o.mz_min_wavelength,
                                     o.mz_max_wavelength}),
        intensity_encoding_(exec, o.d_model),
        positional_encoding_(o.d_model),
        learnable_encoding_(learnable_encoding(exec, o)),
        input_(exec, o.d_model, o.d_model, {true, derive_seed(o.seed, "input")},
               "kformer::SpectrumTransformer.input"),
        encoder_(exec, o.layers,
                 EncoderLayerOptions{o.d_model, o.heads, o.dim_feedforward, 0.0, Activation::GELU,
                                     NormType::LayerNorm, false, derive_seed(o.seed, "encoder")},
                 "kformer::SpectrumTransformer.encoder"),
        output_(exec, o.d_model, o.outputs, {true, derive_seed(o.seed, "output")},
                "kformer::SpectrumTransformer.output") {}

  const SpectrumTransformerOptions& options() const { return options_; }

  template <class F>
  void visit_parameters(F&& f) {
    input_.visit_parameters([&](const std::string& n, auto& p) { f("input." + n, p); });
    if (learnable_encoding_)
      learnable_encoding_->visit_parameters(
          [&](const std::string& n, auto& p) { f("pos_enc." + n, p); });
    encoder_.visit_parameters([&](const std::string& n, auto& p) { f("encoder." + n, p); });
    output_.visit_parameters([&](const std::string& n, auto& p) { f("output." + n, p); });
  }
  template <class F>
  void visit_buffers(F&& f) {
    encoder_.visit_buffers([&](const std::string& n, auto& b) { f("encoder." + n, b); });
  }
  void zero_grad(const ExecutionSpace& exec) {
    input_.zero_grad(exec);
    if (learnable_encoding_) learnable_encoding_->zero_grad(exec);
    encoder_.zero_grad(exec);
    output_.zero_grad(exec);
  }

  // Whether embed() first checks that the m/z and intensities are finite, naming the first that
  // is not (off by default: a reduction read back on the host per call).
  void set_finite_checks(bool on) {
    mz_encoding_.set_finite_checks(on);
    intensity_encoding_.set_finite_checks(on);
  }

  // logits (batch, outputs) of the spectra in mz, intensity, padding (batch, peaks).
  void forward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& mz,
               const ConstMatrix& intensity, const Mask& padding, const Matrix& logits) {
    check_shape("kformer::SpectrumTransformer::forward", "logits", logits,
                {std::int64_t(mz.extent(0)), options_.outputs});
    auto pooled = pooled_.view(mz.extent(0), options_.d_model);
    embed(exec, ctx, mz, intensity, padding, pooled);
    output_.forward(exec, ctx, pooled, logits);
  }

  // The spectra's representations p (batch, d_model): the mean of the encoder's outputs over each
  // spectrum's peaks, what the heads read. A training forward must go through forward().
  void embed(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& mz,
             const ConstMatrix& intensity, const Mask& padding, const Matrix& pooled) {
    constexpr const char* where = "kformer::SpectrumTransformer::embed";
    check_shape(where, "intensity", intensity, extents_of(mz));
    check_shape(where, "padding", padding, extents_of(mz));
    check_shape(where, "pooled", pooled, {std::int64_t(mz.extent(0)), options_.d_model});
    const int batch = mz.extent(0), peaks = mz.extent(1), d = options_.d_model;
    if (learnable_encoding_ && peaks > options_.max_tokens)
      fail(where, "the spectra have ", peaks, " token slots, the learnable positional encoding ",
           options_.max_tokens, " (max_tokens)");
    auto h = hidden_.view(3, batch, peaks, d);
    const Tensor3 h0 = slot(h, 0), h1 = slot(h, 1), h2 = slot(h, 2);
    mz_encoding_.encode(exec, mz, h0);
    if (options_.intensity_encoding) {
      auto scaled = scaled_.view(batch, peaks);
      impl::scaled_copy(exec, options_.intensity_scale, intensity, scaled);
      intensity_encoding_.forward(exec, ctx, scaled, h0, h1);
      Kokkos::deep_copy(exec, h0, h1);
    }
    input_.forward(exec, ctx, flat(h0), flat(h1));
    if (options_.positional_encoding == PositionalEncodingKind::Fixed)
      positional_encoding_.forward(exec, ctx, h1, h1);
    else if (learnable_encoding_)
      learnable_encoding_->forward(exec, ctx, h1, h1);
    encoder_.forward(exec, ctx, h1, h2, padding);
    impl::masked_mean(exec, h2, padding, pooled);
  }

  // Parameter gradients (accumulated) from d_logits (batch, outputs), after a forward of the same
  // spectra; the encodings' inputs get no gradient.
  void backward(const ExecutionSpace& exec, const RunContext& ctx, const ConstMatrix& mz,
                const Mask& padding, const ConstMatrix& d_logits) {
    constexpr const char* where = "kformer::SpectrumTransformer::backward";
    check_shape(where, "padding", padding, extents_of(mz));
    check_shape(where, "d_logits", d_logits, {std::int64_t(mz.extent(0)), options_.outputs});
    const int batch = mz.extent(0), peaks = mz.extent(1), d = options_.d_model;
    auto h = hidden_.view(3, batch, peaks, d);
    const Tensor3 h0 = slot(h, 0), h1 = slot(h, 1);
    auto pooled = pooled_.view(batch, d);
    auto d_pooled = d_pooled_.view(batch, d);
    output_.backward(exec, ctx, pooled, d_logits, d_pooled);
    auto g = grads_.view(2, batch, peaks, d);
    const Tensor3 g2 = slot(g, 0), g1 = slot(g, 1);
    impl::masked_mean_backward(exec, d_pooled, padding, g2);
    encoder_.backward(exec, ctx, h1, g2, g1);
    // An encoding's Jacobian is the identity: g1 is the projection's output gradient too; the
    // learnable table adds its own gradient.
    if (learnable_encoding_) learnable_encoding_->backward(exec, ctx, h1, g1, g1);
    input_.backward(exec, ctx, flat(h0), flat(g1), Matrix());
  }

 private:
  static const SpectrumTransformerOptions& checked(const SpectrumTransformerOptions& o) {
    constexpr const char* where = "kformer::SpectrumTransformer";
    if (o.d_model < 2 || o.heads < 1 || o.d_model % o.heads != 0)
      fail(where, "d_model must be at least 2 and a multiple of heads, got d_model ", o.d_model,
           " and heads ", o.heads);
    if (o.outputs < 1) fail(where, "outputs must be at least 1, got ", o.outputs);
    if (!(o.intensity_scale > 0))
      fail(where, "intensity_scale must be positive, got ", o.intensity_scale);
    if (o.positional_encoding == PositionalEncodingKind::Learnable && o.max_tokens < 1)
      fail(where, "max_tokens must be at least 1 for a learnable positional encoding, got ",
           o.max_tokens);
    return o;
  }
  static std::optional<LearnablePositionalEncoding<T, ExecutionSpace>> learnable_encoding(
      const ExecutionSpace& exec, const SpectrumTransformerOptions& o) {
    if (o.positional_encoding != PositionalEncodingKind::Learnable) return std::nullopt;
    LearnablePositionalEncodingOptions lo;
    lo.seed = derive_seed(o.seed, "positional_encoding");
    return LearnablePositionalEncoding<T, ExecutionSpace>(exec, o.max_tokens, o.d_model, lo);
  }
  template <class View4>
  static Tensor3 slot(const View4& v, int i) {
    return Tensor3(&v(i, 0, 0, 0), v.extent(1), v.extent(2), v.extent(3));
  }
  static Matrix flat(const Tensor3& x) {
    return Matrix(x.data(), x.extent(0) * x.extent(1), x.extent(2));
  }

  SpectrumTransformerOptions options_;
  ValueEncoding<T, ExecutionSpace> mz_encoding_, intensity_encoding_;
  PositionalEncoding<T, ExecutionSpace> positional_encoding_;
  std::optional<LearnablePositionalEncoding<T, ExecutionSpace>> learnable_encoding_;
  Linear<T, ExecutionSpace> input_;
  TransformerEncoder<T, ExecutionSpace> encoder_;
  Linear<T, ExecutionSpace> output_;
  GrowingBuffer<T, memory_space> hidden_{"kformer::SpectrumTransformer::hidden"};
  GrowingBuffer<T, memory_space> grads_{"kformer::SpectrumTransformer::grads"};
  GrowingBuffer<T, memory_space> scaled_{"kformer::SpectrumTransformer::scaled"};
  GrowingBuffer<T, memory_space> pooled_{"kformer::SpectrumTransformer::pooled"};
  GrowingBuffer<T, memory_space> d_pooled_{"kformer::SpectrumTransformer::d_pooled"};
};

}  // namespace kformer

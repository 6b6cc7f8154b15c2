// Whole-model parity of the TST model with PyTorch 1.13, on the goldens that
// tests/golden/make_tst_goldens.py computed from TST's reference architecture:
//
// - eval-mode outputs of checkpoints converted by tools/pth_to_safetensors.py (both norms, fixed
//   and learnable encodings, imputation, classification and regression heads, unequal lengths
//   with padding) loaded through load_checkpoint: float32, max error relative to the largest
//   reference value <= 1e-5;
// - one training step (dropout 0, TST's masked MSE, backward, clip_grad_norm at 4.0, Adam with
//   lr 1e-3): loss, gradient norm, clipped gradients, updated weights and BatchNorm running
//   statistics against PyTorch's;
// - the state_dict kformer writes (add_state_dict and save_checkpoint) has exactly the keys,
//   shapes and dtypes of the PyTorch module's state_dict, so that PyTorch loads it with
//   load_state_dict(strict=True) (the goldens store PyTorch's listing; CI needs no Python).
//
// With KFORMER_TST_EXPORT_DIR set, every case's model is also saved there as a kformer checkpoint
// (after the step, for the training case), for make_tst_goldens.py --check-checkpoint; with
// KFORMER_TST_REPORT set, the measured errors are printed.
#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/core/safetensors.hpp>
#include <kformer/losses/deterministic_sum.hpp>
#include <kformer/losses/losses.hpp>
#include <kformer/models/tst.hpp>
#include <kformer/optimizers/optimizers.hpp>
#include <kformer/training/checkpoint.hpp>
#include <kformer/training/state_dict.hpp>

#include "support/golden.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

// Eval-mode outputs, relative to the largest reference value. PyTorch's own float32 outputs
// differ from its float64 ones by at most 5.5e-7 (relative) on these cases (the script prints it),
// so 1e-5 leaves room for kformer's different summation orders and nothing else.
constexpr double kOutputTolerance = 1e-5;
// Loss, gradient norm and running statistics: relative; weights after the step: absolute.
constexpr double kScalarTolerance = 1e-5;
constexpr double kWeightTolerance = 1e-5;
// Clipped gradients: per tensor, relative to max(largest value of the tensor, 1 % of the largest
// gradient of the model), as the layer parity tests.
constexpr double kGradientTolerance = 1e-4;

const std::vector<std::string> kEvalCases = {
    "imputation_fixed_batchnorm", "imputation_learnable_layernorm",
    "classification_learnable_batchnorm", "classification_fixed_layernorm",
    "regression_fixed_batchnorm"};
const std::string kTrainCase = "train_imputation_fixed_batchnorm";

const Golden& goldens() {
  static const Golden g(KFORMER_GOLDEN_DIR "/tst_parity.safetensors");
  return g;
}

std::string checkpoint_of(const std::string& c) {
  return std::string(KFORMER_GOLDEN_DIR) + "/" +
         goldens().hyper(c).at("checkpoint").get<std::string>();
}

bool reporting() {
  return std::getenv("KFORMER_TST_REPORT") != nullptr;
}

template <class Space>
using Model = TimeSeriesTransformer<float, Space>;
template <class Space>
using KeepView = Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class Space>
using MaskView = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, typename Space::memory_space>;

// A golden 0/1 tensor as a device uint8 View of the given extents.
template <class View, class... Extents>
View mask_from(const GoldenTensor& t, Extents... extents) {
  View v("test::mask", extents...);
  auto h = Kokkos::create_mirror_view(v);
  REQUIRE(t.values.size() == h.size());
  for (std::size_t i = 0; i < h.size(); ++i)
    h.data()[i] = t.values[i] != 0.0;
  Kokkos::deep_copy(v, h);
  return v;
}

// (shape, dtype) by name.
using Listing = std::map<std::string, std::pair<std::vector<std::int64_t>, std::string>>;

// PyTorch's state_dict as the golden metadata lists it.
Listing pytorch_listing(const std::string& c) {
  Listing out;
  for (const auto& entry : goldens().hyper(c).at("state_dict"))
    out[entry.at(0).get<std::string>()] = {entry.at(1).get<std::vector<std::int64_t>>(),
                                           entry.at(2).get<std::string>()};
  return out;
}

// A safetensors file's tensors, without the keys that are not model state.
Listing file_listing(const safetensors::File& file) {
  Listing out;
  for (const auto& info : file.tensors()) {
    if (info.name.rfind("optimizer.", 0) == 0 || info.name.rfind("training.", 0) == 0 ||
        info.name.rfind("standardization.", 0) == 0)
      continue;
    out[info.name] = {info.shape, safetensors::dtype_name(info.dtype)};
  }
  return out;
}

// The configuration the converter wrote agrees with the hyper-parameters the model was built with.
void check_config(const TstConfig& c, const nlohmann::json& h) {
  CHECK(c.feat_dim == h.at("feat_dim").get<int>());
  CHECK(c.max_len == h.at("max_len").get<int>());
  CHECK(c.d_model == h.at("d_model").get<int>());
  CHECK(c.n_heads == h.at("n_heads").get<int>());
  CHECK(c.num_layers == h.at("num_layers").get<int>());
  CHECK(c.dim_feedforward == h.at("dim_feedforward").get<int>());
  CHECK(c.dropout == h.at("dropout").get<double>());
  CHECK(c.activation == parse_activation(h.at("activation").get<std::string>()));
  CHECK(c.norm == parse_norm(h.at("normalization_layer").get<std::string>()));
  CHECK(c.pos_encoding == parse_pos_encoding(h.at("pos_encoding").get<std::string>()));
  CHECK(c.projection == ProjectionKind::Linear);
  CHECK(!c.norm_first);
  CHECK(c.task == parse_task(h.at("task").get<std::string>()));
  CHECK(c.num_outputs == h.at("num_outputs").get<int>());
}

// A scratch directory for save_checkpoint, removed with its files at the end.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char name[] = "/tmp/kformer-tst-parity-XXXXXX";
    path = mkdtemp(name);
  }
  ~ScratchDir() {
    for (const char* f : {"/model.safetensors", "/config.json"})
      std::remove((path + f).c_str());
    rmdir(path.c_str());
  }
};

template <class Space>
void export_checkpoint(const std::string& c, Model<Space>& model,
                       const Optimizer<float, Space>* optimizer, const CheckpointInfo& info) {
  const char* dir = std::getenv("KFORMER_TST_EXPORT_DIR");
  if (dir == nullptr) return;
  save_checkpoint(std::string(dir) + "/" + c, model, optimizer, info);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "TST parity with PyTorch: eval-mode outputs of converted PyTorch checkpoints", "[parity][tst]",
    backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  for (const std::string& c : kEvalCases) {
    CAPTURE(c);
    const auto& h = goldens().hyper(c);
    const std::string dir = checkpoint_of(c);
    const CheckpointInfo config = read_checkpoint_config(dir);
    check_config(config.config, h);
    Model<Space> model(Space(), config.config);
    const CheckpointInfo info =
        load_checkpoint(Space(), dir, model, static_cast<Optimizer<float, Space>*>(nullptr));
    if (config.config.task == TstTask::Classification)
      CHECK(info.class_names.size() == static_cast<std::size_t>(config.config.num_outputs));

    const auto& x = goldens().tensor(c + ".x");
    const int batch = x.shape.at(0), seq = x.shape.at(1), features = x.shape.at(2);
    const auto keep = mask_from<KeepView<Space>>(goldens().tensor(c + ".keep"), batch, seq);
    const auto shape = model.output_shape(batch, seq);
    Tensor2<float, M> y("y", shape[0], shape[1]);
    model.forward(Space(), RunContext{false, 0},
                  device_from<float, Space>(x.values, batch, seq, features), keep, y);
    const auto out = host_values(y);
    const double error = max_rel_diff(out, goldens().tensor(c + ".y").values);
    CHECK(error <= kOutputTolerance);
    if (reporting())
      std::printf("%s [%s]: max rel error %.2e vs PyTorch float32, %.2e vs PyTorch float64\n",
                  c.c_str(), Space::name(), error,
                  max_rel_diff(out, goldens().tensor(c + ".y_f64").values));
    export_checkpoint(c, model, static_cast<const Optimizer<float, Space>*>(nullptr), info);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "TST parity with PyTorch: kformer writes PyTorch's state_dict keys, shapes and dtypes",
    "[parity][tst][state_dict]", backends::EnabledSpaces) {
  using Space = TestType;
  std::vector<std::string> cases = kEvalCases;
  cases.push_back(kTrainCase);
  for (const std::string& c : cases) {
    CAPTURE(c);
    const std::string dir = checkpoint_of(c);
    const CheckpointInfo info = read_checkpoint_config(dir);
    Model<Space> model(Space(), info.config);
    load_checkpoint(Space(), dir, model, static_cast<Optimizer<float, Space>*>(nullptr));
    const Listing expected = pytorch_listing(c);

    // add_state_dict alone: exactly PyTorch's state_dict.
    safetensors::Writer writer;
    add_state_dict(Space(), writer, model);
    const auto written = safetensors::File::parse(writer.serialize(), "add_state_dict");
    CHECK(written.tensors().size() == expected.size());
    CHECK(file_listing(written) == expected);

    // A whole checkpoint: PyTorch's state_dict besides the optimizer/training entries, with the
    // values that were loaded (the fixed encoding's table is recomputed, so it is compared
    // loosely).
    ScratchDir scratch;
    save_checkpoint(scratch.path, model, static_cast<const Optimizer<float, Space>*>(nullptr),
                    info);
    const auto saved = safetensors::File::read(checkpoint_weights_path(scratch.path));
    const auto source = safetensors::File::read(checkpoint_weights_path(dir));
    CHECK(file_listing(saved) == expected);
    for (const auto& [name, entry] : expected) {
      CAPTURE(name);
      if (!saved.contains(name)) continue;  // reported above
      if (name == "pos_enc.pe" && info.config.pos_encoding == PositionalEncodingKind::Fixed)
        CHECK(max_abs_diff(saved.to_double(name), source.to_double(name)) <= 1e-6);
      else
        CHECK(bitwise_equal(saved.to_double(name), source.to_double(name)));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("TST parity with PyTorch: one training step of the imputation model",
                        "[parity][tst][training]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const std::string c = kTrainCase;
  const auto& h = goldens().hyper(c);
  const std::string dir = checkpoint_of(c);
  const CheckpointInfo config = read_checkpoint_config(dir);
  check_config(config.config, h);
  REQUIRE(config.config.dropout == 0.0);
  Model<Space> model(Space(), config.config);
  const CheckpointInfo info =
      load_checkpoint(Space(), dir, model, static_cast<Optimizer<float, Space>*>(nullptr));

  const auto& x = goldens().tensor("train.x");
  const int batch = x.shape.at(0), seq = x.shape.at(1), features = x.shape.at(2);
  const auto xd = device_from<float, Space>(x.values, batch, seq, features);
  const auto target =
      device_from<float, Space>(goldens().tensor("train.target").values, batch, seq, features);
  const auto loss_mask =
      mask_from<MaskView<Space>>(goldens().tensor("train.loss_mask"), batch, seq, features);
  const auto keep = mask_from<KeepView<Space>>(goldens().tensor("train.keep"), batch, seq);

  // The parameters before the step, by name.
  std::map<std::string, std::vector<double>> before;
  model.visit_parameters(
      [&](const std::string& name, auto& p) { before[name] = host_values(p.value); });

  // TST's training step: forward (training mode), masked MSE, backward, clip_grad_norm_, Adam.
  model.zero_grad(Space());
  Tensor2<float, M> out("out", batch * seq, features);
  model.forward(Space(), RunContext{true, 0}, xd, keep, out);
  Losses<float, Space> losses;
  Tensor3<float, M> d_pred("d_pred", batch, seq, features);
  const MaskedLoss loss =
      losses.masked_mse(Space(), Tensor3<const float, M>(out.data(), batch, seq, features), target,
                        loss_mask, d_pred);
  CHECK(loss.count == h.at("masked").get<std::int64_t>());
  const double ref_loss = goldens().tensor("train.loss").values.at(0);
  CHECK(std::abs(loss.loss - ref_loss) <= kScalarTolerance * std::abs(ref_loss));
  model.backward(Space(), {}, xd, keep,
                 Tensor2<const float, M>(d_pred.data(), batch * seq, features));
  DeterministicSum<Space> workspace;
  const double norm = clip_grad_norm(Space(), model.parameters().grads(),
                                     h.at("clip_norm").get<double>(), workspace);
  const double ref_norm = goldens().tensor("train.grad_norm").values.at(0);
  CHECK(std::abs(norm - ref_norm) <= kScalarTolerance * ref_norm);
  REQUIRE(ref_norm > h.at("clip_norm").get<double>());  // the clipping is exercised

  // Clipped gradients, per parameter tensor.
  double g_max = 0;
  for (const auto& [name, unused] : before)
    for (double g : goldens().tensor("train.grad." + name).values)
      g_max = std::max(g_max, std::abs(g));
  double worst_gradient = 0;
  model.visit_parameters([&](const std::string& name, auto& p) {
    CAPTURE(name);
    const double e = max_rel_diff(host_values(p.grad),
                                  goldens().tensor("train.grad." + name).values, 0.01 * g_max);
    worst_gradient = std::max(worst_gradient, e);
    CHECK(e <= kGradientTolerance);
  });

  OptimizerOptions adam;
  adam.kind = OptimizerKind::Adam;
  adam.beta1 = h.at("betas").at(0).get<double>();
  adam.beta2 = h.at("betas").at(1).get<double>();
  adam.eps = h.at("eps").get<double>();
  Optimizer<float, Space> optimizer(Space(), model.parameters().size(), adam);
  const double lr = h.at("lr").get<double>();
  const auto grads = model.parameters().grads();
  optimizer.step(Space(), model.parameters().values(),
                 Tensor1<const float, M>(grads.data(), grads.size()), lr);
  Space().fence();

  // Weights. Adam's first step moves each weight by lr * g / (|g| + eps): by almost exactly lr
  // with the gradient's sign. Gradients that are zero in exact arithmetic (the value and key biases
  // of the attention, out_proj.bias and linear2.bias: a per-channel constant that the following
  // BatchNorm removes; PyTorch's are below 2e-8 of the largest gradient here, the smallest other
  // one is 5e-6 of it) leave the update to rounding noise of either side; for those weights
  // (|g| <= 1e-6 of the largest PyTorch gradient) both updates must stay within lr, and their
  // gradients agree to within 1e-6 of the largest gradient (checked above). Every other weight
  // must be within 1e-5 of PyTorch's.
  const double ill_conditioned = 1e-6 * g_max;
  double worst_weight = 0;
  std::int64_t checked = 0, noise_driven = 0;
  model.visit_parameters([&](const std::string& name, auto& p) {
    CAPTURE(name);
    const auto after = host_values(p.value);
    const auto& ref = goldens().tensor("train.after." + name).values;
    const auto& ref_grad = goldens().tensor("train.grad." + name).values;
    const auto& start = before.at(name);
    REQUIRE(after.size() == ref.size());
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (std::abs(ref_grad[i]) > ill_conditioned) {
        const double e = std::abs(after[i] - ref[i]);
        worst_weight = std::max(worst_weight, e);
        if (!(e <= kWeightTolerance))
          FAIL_CHECK(name << "[" << i << "]: " << after[i] << " vs PyTorch's " << ref[i]);
        ++checked;
      } else {
        CHECK(std::abs(after[i] - start[i]) <= lr * (1 + 1e-4));
        CHECK(std::abs(ref[i] - start[i]) <= lr * (1 + 1e-4));
        ++noise_driven;
      }
    }
  });
  CHECK(checked > 10 * noise_driven);

  // BatchNorm running statistics (batch statistics over batch x time, padded steps included) and
  // the batch counters.
  double worst_buffer = 0;
  model.visit_buffers([&](const std::string& name, auto& v) {
    CAPTURE(name);
    const double e = max_rel_diff(host_values(v), goldens().tensor("train.after." + name).values);
    worst_buffer = std::max(worst_buffer, e);
    CHECK(e <= kScalarTolerance);
  });
  model.visit_batch_norms([&](const std::string& name, auto& bn) {
    CAPTURE(name);
    CHECK(bn.num_batches_tracked() ==
          static_cast<std::int64_t>(
              goldens().tensor("train.after." + name + ".num_batches_tracked").values.at(0)));
  });
  if (reporting())
    std::printf(
        "%s [%s]: loss %.9g vs %.9g, grad norm %.9g vs %.9g, clipped gradients max rel error %.2e, "
        "weights max abs error %.2e (%lld weights; %lld with noise-level gradients within lr), "
        "running statistics max rel error %.2e\n",
        c.c_str(), Space::name(), loss.loss, ref_loss, norm, ref_norm, worst_gradient, worst_weight,
        static_cast<long long>(checked), static_cast<long long>(noise_driven), worst_buffer);
  export_checkpoint(c, model, &optimizer, info);
}

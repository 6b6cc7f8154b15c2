// Training and evaluating a TST model on host datasets: batches gathered on the host into buffers
// allocated once and copied to the device per batch, noise masks drawn on the device, the loss of
// the task, backward, gradient clipping and one optimizer kernel over the parameter buffer.
//
// Everything random is a function of (options.seed, epoch, step, series index): batch order, noise
// masks and dropout masks. A run resumed at an epoch boundary from a checkpoint (parameters,
// BatchNorm state, optimizer state and the global step) therefore continues bit for bit.
//
// Data-parallel training (set_communicator, distributed/communicator.hpp): every rank holds a
// replica and takes its share of each global batch of batch_size x ranks series of the same
// shuffled order; its loss gradient is scaled by its share of the global batch's values, the
// gradients are summed to the same bits on every rank (formed on rank 0 and broadcast), and each
// rank then takes the same optimizer step, so the replicas stay identical. BatchNorm statistics
// are the rank's own batch's (as PyTorch's DDP) unless options.sync_batchnorm (SyncBatchNorm).
// A last global batch of fewer series than ranks is left out. Dropout decisions follow a series'
// place in its rank's batch, so with dropout the run differs from one rank's on the same global
// batches; without it, only in the order of floating-point sums.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/random.hpp"
#include "../core/run_context.hpp"
#include "../core/tensor.hpp"
#include "../data/preprocess.hpp"
#include "../data/series_set.hpp"
#include "../distributed/communicator.hpp"
#include "../layers/elementwise.hpp"
#include "../losses/deterministic_sum.hpp"
#include "../losses/losses.hpp"
#include "../masking/noise_mask.hpp"
#include "../models/tst.hpp"
#include "../models/tst_config.hpp"
#include "../optimizers/optimizers.hpp"

namespace kformer {

struct TrainingOptions {
  int batch_size = 64;
  double lr = 1e-3;
  std::vector<int> lr_step;  // epochs (from 1) after which the rate is multiplied by lr_factor
  double lr_factor = 0.1;
  OptimizerOptions optimizer;   // Adam by default
  double clip_norm = 4.0;       // global gradient norm; 0 disables clipping
  double l2_reg = 0.0;          // l2_reg * |output_layer.weight|^2 added to the loss (TST)
  NoiseMaskOptions masking;     // pretraining (imputation) masks
  int forecast_horizon = 0;     // > 0: mask the last steps of every series instead
  bool freeze_encoder = false;  // fine-tune the output layer only
  bool check_finite = false;    // stop at the first block that produces a NaN or Inf (slower)
  bool sync_batchnorm = false;  // data-parallel: BatchNorm statistics over every rank's batch
  std::uint64_t seed = 1337;
};

struct EpochStats {
  int epoch = 0;
  double loss = 0;  // mean over the epoch (per masked value for imputation, per series otherwise)
  double lr = 0;
  double grad_norm = 0;  // of the last step, before clipping
  std::int64_t steps = 0, series = 0;
  double seconds = 0;
};

struct Evaluation {
  double loss = 0;  // masked MSE (imputation), cross-entropy (classification), MSE (regression)
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // classification
  double rmse = std::numeric_limits<double>::quiet_NaN(),
         mae = std::numeric_limits<double>::quiet_NaN();
  std::int64_t series = 0, values = 0;  // series seen; values the loss averages over
};

// Progress of an epoch, reported after every batch.
struct BatchProgress {
  int epoch = 0;
  std::int64_t batch = 0, batches = 0;
  double loss = 0;  // the batch's
  double seconds = 0, series_per_second = 0;
};

namespace impl {

// l2 * sum(w^2) over n weights; adds its gradient 2 l2 w to g (TST's l2_reg on the output layer).
template <class ExecutionSpace, class T>
double l2_penalty(const ExecutionSpace& exec, const T* w, T* g, std::int64_t n, double l2,
                  DeterministicSum<ExecutionSpace, 1>& workspace) {
  const T two_l2 = static_cast<T>(2 * l2);
  const auto sums = workspace(
      exec, KFORMER_LABEL("kformer::trainer::output_l2"), n,
      KOKKOS_LAMBDA(const std::int64_t i, double* acc) {
        acc[0] += double(w[i]) * double(w[i]);
        g[i] += two_l2 * w[i];
      });
  return l2 * sums[0];
}

}  // namespace impl

template <class T, class ExecutionSpace>
class TstTrainer {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Model = TimeSeriesTransformer<T, ExecutionSpace>;
  using Mask3 = Kokkos::View<std::uint8_t***, Kokkos::LayoutRight, memory_space>;
  using Keep = Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, memory_space>;
  using Ints = Tensor1<std::int32_t, memory_space>;

  // Buffers for batches of up to options.batch_size series of `schema`'s extents.
  TstTrainer(const ExecutionSpace& exec, Model& model, const TrainingOptions& options,
             const data::SeriesSet& schema)
      : model_(model),
        options_(options),
        schedule_(options.lr, options.lr_step, std::vector<double>{options.lr_factor}),
        optimizer_(exec, trainable_size(model, options), options.optimizer),
        noise_(exec, options.masking),
        host_(data::make_batch_buffers(schema, options.batch_size)) {
    const std::string where = "kformer::TstTrainer";
    const auto& c = model.config();
    if (options.batch_size < 1)
      fail(where, "batch_size must be at least 1, got ", options.batch_size);
    if (schema.n_features != c.feat_dim)
      fail(where, "the data has ", schema.n_features, " features, the model expects ", c.feat_dim);
    if (c.task != TstTask::Imputation && schema.max_len != c.max_len)
      fail(where, "the data has max_len ", schema.max_len, ", the model was built for ", c.max_len);
    // Data without labels or targets serve predict() and representations(); training and
    // evaluation refuse them (require_targets).
    if (c.task == TstTask::Classification && schema.is_classification() &&
        std::int64_t(schema.class_names.size()) != c.num_outputs)
      fail(where, "the data has ", schema.class_names.size(), " classes, the model ",
           c.num_outputs);
    if (c.task == TstTask::Regression && schema.is_regression() &&
        schema.n_targets != c.num_outputs)
      fail(where, "the data has ", schema.n_targets, " regression targets, the model ",
           c.num_outputs);
    model.set_finite_checks(options.check_finite);
    const std::int64_t cap = options.batch_size, S = schema.max_len, F = schema.n_features;
    values_ = Tensor3<T, memory_space>("kformer::batch::values", cap, S, F);
    inputs_ = Tensor3<T, memory_space>("kformer::batch::inputs", cap, S, F);
    keep_ = Keep("kformer::batch::keep", cap, S);
    lengths_ = Ints("kformer::batch::lengths", cap);
    ids_ = Ints("kformer::batch::series", cap);
    labels_ = Ints("kformer::batch::labels", cap);
    targets_ = Tensor2<T, memory_space>("kformer::batch::targets", cap,
                                        std::max<std::int64_t>(schema.n_targets, 1));
    noise_mask_ = Mask3("kformer::batch::noise_mask", cap, S, F);
    predict_mask_ = Mask3("kformer::batch::predict_mask", cap, S, F);
    const auto shape = model.output_shape(cap, S);
    outputs_ = Tensor2<T, memory_space>("kformer::batch::outputs", shape[0], shape[1]);
    d_outputs_ = Tensor2<T, memory_space>("kformer::batch::d_outputs", shape[0], shape[1]);
    host_values_ = Kokkos::create_mirror_view(values_);
    host_targets_ = Kokkos::create_mirror_view(targets_);
    host_keep_ = Kokkos::create_mirror_view(keep_);
    host_lengths_ = Kokkos::create_mirror_view(lengths_);
    host_ids_ = Kokkos::create_mirror_view(ids_);
    host_labels_ = Kokkos::create_mirror_view(labels_);
    host_mask_ = Kokkos::create_mirror_view(noise_mask_);
  }

  ~TstTrainer() {
    if (comm_ && options_.sync_batchnorm)  // the model may train later without this trainer
      model_.visit_batch_norms([](const std::string&, auto& bn) { bn.set_replica_sums({}, {}); });
  }
  TstTrainer(const TstTrainer&) = delete;
  TstTrainer& operator=(const TstTrainer&) = delete;

  // Trains as one replica of `comm`'s ranks (null or a group of one: this process alone). Every
  // rank calls it at the same point with the same model: it refuses ranks that disagree on the
  // model or the batch size (on every rank, before any other collective), and hands rank 0's
  // parameters, buffers, optimizer state and step to the others, so that the replicas start
  // identical. With options.sync_batchnorm the model's BatchNorm layers sum their statistics over
  // the ranks.
  void set_communicator(const ExecutionSpace& exec, distributed::Communicator* comm) {
    comm_ = comm != nullptr && comm->size() > 1 ? comm : nullptr;
    if (comm_ == nullptr) return;
    // The sizes one by one first, so that the error names the one that differs.
    const TstConfig& config = model_.config();
    comm_->require_same("the feature count (feat_dim)", config.feat_dim);
    comm_->require_same("the series length (max_len)", config.max_len);
    comm_->require_same("d_model", config.d_model);
    comm_->require_same("the head count", config.n_heads);
    comm_->require_same("the layer count", config.num_layers);
    comm_->require_same("dim_feedforward", config.dim_feedforward);
    comm_->require_same("the output count (classes or targets)", config.num_outputs);
    comm_->require_same("the model configuration", to_json(config));
    comm_->require_same("the parameter count", model_.parameters().size());
    comm_->require_same("the batch size", options_.batch_size);
    comm_->require_same("sync_batchnorm", options_.sync_batchnorm ? 1 : 0);
    const auto values = model_.parameters().values();
    comm_->broadcast(exec, values.data(), std::int64_t(values.size()));
    model_.visit_buffers([&](const std::string&, auto& v) {
      comm_->broadcast(exec, v.data(), std::int64_t(v.size()));
    });
    comm_->broadcast(exec, optimizer_.exp_avg().data(), std::int64_t(optimizer_.exp_avg().size()));
    comm_->broadcast(exec, optimizer_.exp_avg_sq().data(),
                     std::int64_t(optimizer_.exp_avg_sq().size()));
    std::int64_t steps = optimizer_.steps(), step = static_cast<std::int64_t>(step_);
    comm_->broadcast(steps);
    comm_->broadcast(step);
    optimizer_.set_steps(steps);
    step_ = static_cast<std::uint64_t>(step);
    if (options_.sync_batchnorm) {
      distributed::Communicator* const c = comm_;
      model_.visit_batch_norms([c](const std::string&, auto& bn) {
        bn.set_replica_sums(
            [c](const ExecutionSpace& e, T* p, std::int64_t n) { c->sum_identical(e, p, n); },
            [c](std::int64_t n) {
              c->sum(&n, 1);
              return n;
            });
      });
    }
  }

  Optimizer<T, ExecutionSpace>& optimizer() { return optimizer_; }
  const TrainingOptions& options() const { return options_; }
  std::uint64_t global_step() const { return step_; }
  void set_global_step(std::uint64_t step) { step_ = step; }
  double learning_rate(int epoch) const { return schedule_.lr(epoch); }

  // One pass over `data` (standardized) in an order drawn from (seed, epoch).
  EpochStats train_epoch(const ExecutionSpace& exec, const data::SeriesSet& data, int epoch,
                         const std::function<void(const BatchProgress&)>& progress = {}) {
    const ProfilingRegion region("kformer::TstTrainer::train_epoch");
    require_targets("kformer::TstTrainer::train_epoch", data);
    if (comm_) require_shardable("kformer::TstTrainer::train_epoch", data);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::int64_t> order = in_order(data);
    std::mt19937_64 rng(derive_seed(options_.seed, "epoch." + std::to_string(epoch)));
    data::seeded_shuffle(order, rng);
    EpochStats stats;
    stats.epoch = epoch;
    stats.lr = schedule_.lr(epoch);
    double weighted_loss = 0, weight = 0;
    for_each_batch(
        exec, data, order, /*sharded=*/true,
        [&](std::int64_t b, std::int64_t batches, std::int64_t, int n) {
          const auto [loss, count] = step(exec, n, epoch, stats);
          weighted_loss += loss * count;
          weight += count;
          stats.series += n;
          if (progress) {
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            progress({epoch, b + 1, batches, loss, seconds, stats.series / seconds});
          }
        });
    stats.loss = weight > 0 ? weighted_loss / weight : 0.0;
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
  }

  // Loss and metrics over `data` in eval mode. Imputation uses noise masks from a fixed stream,
  // so that evaluations at different epochs score the same masked values.
  Evaluation evaluate(const ExecutionSpace& exec, const data::SeriesSet& data) {
    const ProfilingRegion region("kformer::TstTrainer::evaluate");
    require_targets("kformer::TstTrainer::evaluate", data);
    if (comm_) {  // the ranks' shares of data, scored with the same running statistics
      comm_->require_same("the evaluation data's series count", data.n_series);
      model_.visit_buffers([&](const std::string&, auto& v) {
        comm_->broadcast(exec, v.data(), std::int64_t(v.size()));
      });
    }
    Evaluation e;
    double loss_sum = 0, squared = 0, absolute = 0;
    std::int64_t correct = 0, errors = 0;
    // Several ranks: each scores its contiguous share of the series, and the sums are added up.
    std::vector<std::int64_t> order = in_order(data);
    if (comm_) {
      const auto [first, last] = comm_->share(data.n_series);
      order = std::vector<std::int64_t>(order.begin() + first, order.begin() + last);
    }
    for_each_batch(exec, data, order, /*sharded=*/false,
                   [&](std::int64_t, std::int64_t, std::int64_t, int n) {
                     prepare_inputs(exec, n, kEvaluationStream);
                     const auto out = outputs(n);
                     model_.forward(exec, RunContext{false, 0, false}, inputs(n), keep(n), out);
                     const auto [loss, count] = task_loss(exec, n, Tensor2<T, memory_space>());
                     loss_sum += loss * count;
                     e.values += count;
                     e.series += n;
                     if (model_.config().task == TstTask::Classification) {
                       correct += losses_.correct_count(
                           exec, out, Tensor1<const std::int32_t, memory_space>(labels_.data(), n));
                     } else if (model_.config().task == TstTask::Regression) {
                       const auto sums = losses_.error_sums(exec, out, targets(n));
                       squared += sums.squared;
                       absolute += sums.absolute;
                       errors += sums.count;
                     }
                   });
    if (comm_) {  // the sums over every rank's share
      double sums[7] = {loss_sum, double(e.values), double(e.series), double(correct),
                        squared,  absolute,         double(errors)};
      comm_->sum_identical(sums, 7);
      loss_sum = sums[0];
      e.values = std::int64_t(sums[1]);
      e.series = std::int64_t(sums[2]);
      correct = std::int64_t(sums[3]);
      squared = sums[4];
      absolute = sums[5];
      errors = std::int64_t(sums[6]);
    }
    e.loss = e.values > 0 ? loss_sum / e.values : 0.0;
    if (model_.config().task == TstTask::Classification && e.series > 0)
      e.accuracy = double(correct) / e.series;
    if (model_.config().task == TstTask::Regression && errors > 0) {
      e.rmse = std::sqrt(squared / errors);
      e.mae = absolute / errors;
    }
    return e;
  }

  // Eval-mode outputs for every series, on the host: imputation (n, max_len, F), the model's
  // reconstruction of every step; classification logits or regression outputs (n, n_out).
  // Imputation hides the values that `given_mask` (n, max_len, F), 1 = keep, marks 0; without it
  // the evaluation noise masks when apply_masks, nothing otherwise.
  std::vector<float> predict(const ExecutionSpace& exec, const data::SeriesSet& data,
                             bool apply_masks = true,
                             const std::vector<std::uint8_t>* given_mask = nullptr) {
    const std::int64_t row = values_.extent(1) * values_.extent(2);
    if (given_mask && std::int64_t(given_mask->size()) != data.n_series * row)
      fail("kformer::TstTrainer::predict", "the mask holds ", given_mask->size(),
           " values, the data ", data.n_series * row);
    std::vector<float> result;
    for_each_batch(exec, data, in_order(data), /*sharded=*/false,
                   [&](std::int64_t, std::int64_t, std::int64_t first, int n) {
                     if (given_mask) {
                       for (std::int64_t i = 0; i < n * row; ++i)
                         host_mask_.data()[i] = (*given_mask)[first * row + i];
                       Kokkos::deep_copy(exec, noise_mask_, host_mask_);
                       exec.fence();
                     }
                     prepare_inputs(exec, n,
                                    given_mask    ? kGivenMasks
                                    : apply_masks ? kEvaluationStream
                                                  : kNoMasks);
                     const auto out = outputs(n);
                     model_.forward(exec, RunContext{false, 0, false}, inputs(n), keep(n), out);
                     const auto h = to_host(out);
                     result.insert(result.end(), h.data(), h.data() + h.size());
                   });
    return result;
  }

  // Eval-mode representations of every series, on the host: per-step (n, max_len, d_model) and
  // pooled over the observed steps (n, d_model).
  void representations(const ExecutionSpace& exec, const data::SeriesSet& data,
                       std::vector<float>& steps, std::vector<float>& pooled) {
    steps.clear();
    pooled.clear();
    const int S = static_cast<int>(data.max_len), d = model_.config().d_model;
    Tensor3<T, memory_space> step_buffer("kformer::representations", options_.batch_size, S, d);
    Tensor2<T, memory_space> pooled_buffer("kformer::representations::pooled", options_.batch_size,
                                           d);
    for_each_batch(
        exec, data, in_order(data), /*sharded=*/false,
        [&](std::int64_t, std::int64_t, std::int64_t, int n) {
          prepare_inputs(exec, n, kNoMasks);
          model_.forward(exec, RunContext{false, 0, false}, inputs(n), keep(n), outputs(n));
          const Tensor3<T, memory_space> z(step_buffer.data(), n, S, d);
          const Tensor2<T, memory_space> p(pooled_buffer.data(), n, d);
          model_.representations(exec, keep(n), z, p);
          const auto hz = to_host(z);
          const auto hp = to_host(p);
          steps.insert(steps.end(), hz.data(), hz.data() + hz.size());
          pooled.insert(pooled.end(), hp.data(), hp.data() + hp.size());
        });
  }

 private:
  // Streams of the noise-mask generator: training draws stream = epoch.
  static constexpr std::uint32_t kEvaluationStream = 0xFFFFFFFDu;
  static constexpr std::uint32_t kGivenMasks = 0xFFFFFFFEu;  // already in noise_mask_
  static constexpr std::uint32_t kNoMasks = 0xFFFFFFFFu;

  // Training and evaluation score the model against the data's labels or targets.
  void require_targets(const char* where, const data::SeriesSet& data) const {
    const auto& c = model_.config();
    if (c.task == TstTask::Classification && !data.is_classification())
      fail(where,
           "a classification model needs class labels in the data (predict and embed "
           "do not)");
    if (c.task == TstTask::Regression && !data.is_regression())
      fail(where, "a regression model needs targets in the data (predict and embed do not)");
  }

  // The series of data in their order: 0, 1, ..., n_series - 1.
  static std::vector<std::int64_t> in_order(const data::SeriesSet& data) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(data.n_series));
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<std::int64_t>(i);
    return order;
  }

  // The one batch loop: for each batch of series order[first, first + n) (batch_size at a time,
  // the last one shorter), uploads them to the device buffers and calls
  // f(batch index, number of batches, first, n). Sharded over several ranks, the batches are
  // global ones of batch_size x ranks series, of which this rank takes its share (a last one of
  // fewer series than ranks is left out on every rank).
  template <class F>
  void for_each_batch(const ExecutionSpace& exec, const data::SeriesSet& data,
                      const std::vector<std::int64_t>& order, bool sharded, F&& f) {
    const std::int64_t ranks = sharded && comm_ ? comm_->size() : 1;
    const std::int64_t global = std::int64_t(options_.batch_size) * ranks;
    const std::int64_t count = static_cast<std::int64_t>(order.size());
    std::int64_t batches = (count + global - 1) / global;
    if (batches > 0 && count - (batches - 1) * global < ranks) --batches;
    for (std::int64_t b = 0; b < batches; ++b) {
      const std::int64_t g0 = b * global, in_batch = std::min(global, count - g0);
      std::int64_t first = 0, last = in_batch;
      if (ranks > 1) std::tie(first, last) = comm_->share(in_batch);
      const int n = static_cast<int>(last - first);
      upload(exec, data, order, g0 + first, n);
      f(b, batches, g0 + first, n);
    }
  }

  // Refuses, on every rank, data the ranks cannot share: other series counts or features than
  // rank 0's, or fewer series than ranks.
  void require_shardable(const char* where, const data::SeriesSet& data) const {
    comm_->require_same("the training data's series count", data.n_series);
    comm_->require_same("the training data's feature count", data.n_features);
    if (data.n_series < comm_->size())
      distributed::fail_on_every_rank(where, "the training data has ", data.n_series,
                                      " series for ", comm_->size(),
                                      " ranks: each rank needs at least one");
  }

  static std::int64_t trainable_size(Model& model, const TrainingOptions& options) {
    return options.freeze_encoder ? model.parameters().size() - model.output_layer_offset()
                                  : model.parameters().size();
  }

  // The first n rows of the batch buffers.
  Tensor3<T, memory_space> inputs(int n) const {
    return Tensor3<T, memory_space>(inputs_.data(), n, inputs_.extent(1), inputs_.extent(2));
  }
  Tensor3<const T, memory_space> values(int n) const {
    return Tensor3<const T, memory_space>(values_.data(), n, values_.extent(1), values_.extent(2));
  }
  Kokkos::View<const std::uint8_t**, Kokkos::LayoutRight, memory_space> keep(int n) const {
    return Kokkos::View<const std::uint8_t**, Kokkos::LayoutRight, memory_space>(keep_.data(), n,
                                                                                 keep_.extent(1));
  }
  Tensor2<T, memory_space> outputs(int n) const {
    const auto shape = model_.output_shape(n, values_.extent(1));
    return Tensor2<T, memory_space>(outputs_.data(), shape[0], shape[1]);
  }
  Tensor2<T, memory_space> d_outputs(int n) const {
    const auto shape = model_.output_shape(n, values_.extent(1));
    return Tensor2<T, memory_space>(d_outputs_.data(), shape[0], shape[1]);
  }
  Tensor2<const T, memory_space> targets(int n) const {
    return Tensor2<const T, memory_space>(targets_.data(), n, targets_.extent(1));
  }

  [[noreturn]] void fail_on_infinity(std::size_t i, float value) const {
    const auto steps = static_cast<std::size_t>(host_.max_len);
    const auto features = static_cast<std::size_t>(host_.n_features);
    const std::size_t b = i / (steps * features);
    fail("kformer::TstTrainer", "series ", host_.indices[b], " holds ", value, " at time step ",
         i / features % steps, ", feature ", i % features,
         "; values must be finite (a missing value is NaN or empty)");
  }

  // Gathers series order[first .. first + n) on the host and copies them to the device buffers
  // (one deep_copy per buffer; no allocation).
  void upload(const ExecutionSpace& exec, const data::SeriesSet& data,
              const std::vector<std::int64_t>& order, std::int64_t first, int n) {
    data::gather_batch(data, order, first, n, host_);
    const std::size_t values = host_.values.size();
    for (std::size_t i = 0; i < values; ++i) {
      const T value = static_cast<T>(host_.values[i]);
      // NaN marks a missing value (filled before the model); an infinity is no value at all.
      // Checked here, on the host, where the model's own check is opt-in (a device reduction).
      if (std::isinf(value)) fail_on_infinity(i, host_.values[i]);
      host_values_.data()[i] = value;
    }
    for (std::size_t i = 0; i < host_.padding_mask.size(); ++i)
      host_keep_.data()[i] = host_.padding_mask[i];
    for (std::int64_t b = 0; b < host_.capacity; ++b) {
      host_lengths_(b) = host_.lengths[b];
      host_ids_(b) = static_cast<std::int32_t>(host_.indices[b]);
      host_labels_(b) = host_.labels.empty() ? 0 : host_.labels[b];
    }
    for (std::size_t i = 0; i < host_.targets.size(); ++i)
      host_targets_.data()[i] = static_cast<T>(host_.targets[i]);
    Kokkos::deep_copy(exec, values_, host_values_);
    Kokkos::deep_copy(exec, keep_, host_keep_);
    Kokkos::deep_copy(exec, lengths_, host_lengths_);
    Kokkos::deep_copy(exec, ids_, host_ids_);
    Kokkos::deep_copy(exec, labels_, host_labels_);
    if (!host_.targets.empty()) Kokkos::deep_copy(exec, targets_, host_targets_);
    exec.fence();  // the host mirrors are refilled by the next batch
  }

  // The model's input: missing values (NaN) and padding set to 0 (the standardized mean), and for
  // imputation the noise-masked values too; predict_mask marks the values the loss scores. The
  // noise mask is drawn from `stream`, or left as the caller put it (kGivenMasks).
  void prepare_inputs(const ExecutionSpace& exec, int n, std::uint32_t stream) {
    const auto x = values(n);
    const Tensor1<const std::int32_t, memory_space> lengths(lengths_.data(), n);
    const Mask3 mask(noise_mask_.data(), n, noise_mask_.extent(1), noise_mask_.extent(2));
    const Mask3 predict(predict_mask_.data(), n, predict_mask_.extent(1), predict_mask_.extent(2));
    const bool draw = model_.config().task == TstTask::Imputation && stream != kNoMasks;
    if (!draw) {
      Kokkos::deep_copy(exec, mask, std::uint8_t(1));
    } else if (stream == kGivenMasks) {
      // noise_mask_ already holds the caller's mask
    } else if (options_.forecast_horizon > 0) {
      Kokkos::deep_copy(exec, mask, std::uint8_t(1));
      noise_.forecast(exec, options_.forecast_horizon, lengths, mask);
    } else {
      noise_.generate(exec, options_.seed, stream,
                      Tensor1<const std::int32_t, memory_space>(ids_.data(), n), lengths, mask);
    }
    apply_noise_mask<T>(exec, x, mask, lengths, inputs(n), predict);
  }

  // The task's loss on the current outputs, and its gradient into d_out when given.
  // Returns (loss, number of values or series it averages over).
  std::pair<double, std::int64_t> task_loss(const ExecutionSpace& exec, int n,
                                            const Tensor2<T, memory_space>& d_out) {
    const auto out = outputs(n);
    switch (model_.config().task) {
      case TstTask::Imputation: {
        const std::int64_t S = values_.extent(1), F = values_.extent(2);
        const Tensor3<const T, memory_space> pred(out.data(), n, S, F);
        const Tensor3<T, memory_space> grad(d_out.data(), d_out.data() ? n : 0, S, F);
        const Kokkos::View<const std::uint8_t***, Kokkos::LayoutRight, memory_space> predict(
            predict_mask_.data(), n, S, F);
        const auto r = losses_.masked_mse(exec, pred, values(n), predict, grad);
        return {r.loss, r.count};
      }
      case TstTask::Classification:
        return {losses_.cross_entropy(
                    exec, out, Tensor1<const std::int32_t, memory_space>(labels_.data(), n), d_out),
                n};
      case TstTask::Regression:
        return {losses_.mse(exec, out, targets(n), d_out), n};
    }
    return {0.0, 0};
  }

  // One training step on the n series uploaded: returns the batch loss and its weight.
  std::pair<double, std::int64_t> step(const ExecutionSpace& exec, int n, int epoch,
                                       EpochStats& stats) {
    prepare_inputs(exec, n, static_cast<std::uint32_t>(epoch));
    const RunContext ctx{true, step_};
    const auto x = inputs(n);
    const auto out = outputs(n);
    const auto d_out = d_outputs(n);
    model_.forward(exec, ctx, x, keep(n), out);
    auto [loss, count] = task_loss(exec, n, d_out);
    if (comm_) {
      // The global batch's mean: this rank's gradient weighted by its share of the values.
      double sums[2] = {loss * double(count), double(count)};
      comm_->sum_identical(sums, 2);
      scale_copy(exec, static_cast<T>(double(count) / sums[1]), d_out, d_out);
      loss = sums[0] / sums[1];
      count = static_cast<std::int64_t>(sums[1]);
    }
    const auto params = model_.parameters().values();
    const auto grads = model_.parameters().grads();
    if (options_.l2_reg > 0) loss += output_l2(exec);
    model_.backward(exec, ctx, x, keep(n), d_out, options_.freeze_encoder);
    const std::int64_t first = options_.freeze_encoder ? model_.output_layer_offset() : 0;
    const auto range = std::make_pair(first, model_.parameters().size());
    const Tensor1<T, memory_space> p(params.data() + first, range.second - first);
    const Tensor1<T, memory_space> g(grads.data() + first, range.second - first);
    if (comm_) comm_->sum_identical(exec, g.data(), std::int64_t(g.size()));
    stats.grad_norm = options_.clip_norm > 0
                          ? clip_grad_norm(exec, g, options_.clip_norm, norm_workspace_)
                          : global_norm(exec, g, norm_workspace_);
    if (!std::isfinite(stats.grad_norm))
      fail("kformer::TstTrainer::train_epoch", "the gradient norm is ", stats.grad_norm,
           " at epoch ", epoch, ", step ", step_, " (loss ", loss,
           "); the parameters were not updated");
    optimizer_.step(exec, p, Tensor1<const T, memory_space>(g.data(), g.size()),
                    schedule_.lr(epoch));
    fill(exec, T(0), grads);
    ++step_;
    ++stats.steps;
    return {loss, count};
  }

  // l2 |w|^2 of the output layer, its gradient added to the gradients; over several ranks each
  // adds 1/ranks of it, which the gradients' sum over the ranks makes whole.
  double output_l2(const ExecutionSpace& exec) {
    const auto* entry = model_.parameters().find("output_layer.weight");
    const double ranks = comm_ ? comm_->size() : 1;
    return ranks * impl::l2_penalty(exec, model_.parameters().values().data() + entry->offset,
                                    model_.parameters().grads().data() + entry->offset,
                                    entry->numel, options_.l2_reg / ranks, l2_workspace_);
  }

  Model& model_;
  TrainingOptions options_;
  StepDecaySchedule schedule_;
  Optimizer<T, ExecutionSpace> optimizer_;
  NoiseMask<ExecutionSpace> noise_;
  Losses<T, ExecutionSpace> losses_;
  DeterministicSum<ExecutionSpace, 1> norm_workspace_, l2_workspace_;
  distributed::Communicator* comm_ = nullptr;  // several ranks, or null
  std::uint64_t step_ = 0;
  data::HostBatch host_;
  Tensor3<T, memory_space> values_, inputs_;
  Keep keep_;
  Ints lengths_, ids_, labels_;
  Tensor2<T, memory_space> targets_, outputs_, d_outputs_;
  Mask3 noise_mask_, predict_mask_;
  typename Tensor3<T, memory_space>::host_mirror_type host_values_;
  typename Tensor2<T, memory_space>::host_mirror_type host_targets_;
  typename Keep::host_mirror_type host_keep_;
  typename Ints::host_mirror_type host_lengths_, host_ids_, host_labels_;
  typename Mask3::host_mirror_type host_mask_;
};

}  // namespace kformer

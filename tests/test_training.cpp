// The TST training pipeline: masked positions alone drive the pretraining loss, training lowers
// the loss, checkpoints round-trip and a resumed run continues bit for bit, strict and
// non-strict loading, and clear errors for checkpoints that do not fit.
#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <Kokkos_Core.hpp>

#include <kformer/core/finite.hpp>
#include <kformer/data/lorenz96.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/layers/linear.hpp>
#include <kformer/training/checkpoint.hpp>
#include <kformer/training/tst_trainer.hpp>

#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;
using Space = Kokkos::DefaultExecutionSpace;

namespace {

std::string temporary_directory() {
  char name[] = "/tmp/kformer-training-XXXXXX";
  return mkdtemp(name);
}

data::SeriesSet small_set(std::int64_t n, std::uint64_t seed) {
  data::Lorenz96Options o;
  o.n_variables = 4;
  o.max_len = 16;
  auto set = data::lorenz96_classification(n, seed, o);
  data::Standardization::fit(set).apply(set);
  return set;
}

TstConfig small_config(const data::SeriesSet& s, TstTask task) {
  TstConfig c;
  c.feat_dim = static_cast<int>(s.n_features);
  c.max_len = static_cast<int>(s.max_len);
  c.d_model = 8;
  c.n_heads = 2;
  c.num_layers = 2;
  c.dim_feedforward = 16;
  c.task = task;
  c.num_outputs = task == TstTask::Classification ? static_cast<int>(s.class_names.size()) : 0;
  c.seed = 3;
  return c;
}

TrainingOptions small_training() {
  TrainingOptions o;
  o.batch_size = 8;
  o.seed = 17;
  return o;
}

std::vector<double> parameters_of(TimeSeriesTransformer<float, Space>& model) {
  return host_values(model.parameters().values());
}

}  // namespace

TEST_CASE("The trainer refuses an infinite value in a batch, naming the series, step and feature",
          "[training][errors]") {
  auto train = small_set(16, 1);
  train.values[(3 * train.max_len + 2) * train.n_features + 1] =
      std::numeric_limits<float>::infinity();
  TimeSeriesTransformer<float, Space> model(Space(), small_config(train, TstTask::Imputation));
  TstTrainer<float, Space> trainer(Space(), model, small_training(), train);
  CHECK_THROWS_WITH(
      trainer.evaluate(Space(), train),
      ContainsText("kformer::TstTrainer: series 3 holds inf at time step 2, feature 1"));
}

TEST_CASE("Pretraining scores only masked, observed values and lowers the masked MSE",
          "[training]") {
  auto train = small_set(48, 1);
  TimeSeriesTransformer<float, Space> model(Space(), small_config(train, TstTask::Imputation));
  TstTrainer<float, Space> trainer(Space(), model, small_training(), train);
  const Evaluation before = trainer.evaluate(Space(), train);
  // About 15 % of the observed values are masked and scored (test_losses checks that changing
  // the targets of unmasked values leaves the loss unchanged).
  std::int64_t observed = 0;
  for (std::int64_t s = 0; s < train.n_series; ++s)
    for (std::int64_t t = 0; t < train.lengths[s]; ++t)
      for (std::int64_t f = 0; f < train.n_features; ++f)
        observed += !std::isnan(train.value(s, t, f));
  CHECK(before.values > 0.10 * observed);
  CHECK(before.values < 0.20 * observed);
  CHECK(std::isfinite(before.loss));
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 6; ++epoch) {
    const EpochStats s = trainer.train_epoch(Space(), train, epoch);
    CHECK(std::isfinite(s.loss));
    if (epoch == 0) first = s.loss;
    last = s.loss;
  }
  const Evaluation after = trainer.evaluate(Space(), train);
  CHECK(after.values == before.values);  // the same masked values are scored
  CHECK(last < first);
  CHECK(after.loss < 0.8 * before.loss);
}

TEST_CASE("Classification training beats the majority class on held-out data", "[training]") {
  auto train = small_set(160, 2);
  auto test = small_set(80, 3);
  TimeSeriesTransformer<float, Space> model(Space(), small_config(train, TstTask::Classification));
  TrainingOptions o = small_training();
  o.batch_size = 16;
  o.lr = 3e-3;
  TstTrainer<float, Space> trainer(Space(), model, o, train);
  for (int epoch = 0; epoch < 15; ++epoch)
    trainer.train_epoch(Space(), train, epoch);
  const Evaluation e = trainer.evaluate(Space(), test);
  CHECK(e.series == 80);
  CHECK(e.accuracy > 0.5);  // four balanced classes: the majority class is 0.25
}

TEST_CASE("Checkpoints round-trip, and a resumed run continues bit for bit",
          "[training][checkpoint]") {
  const auto train = small_set(40, 4);
  const std::string dir = temporary_directory();
  const auto make = [&]() {
    return TimeSeriesTransformer<float, Space>(Space(),
                                               small_config(train, TstTask::Classification));
  };

  // Uninterrupted: 4 epochs.
  auto straight = make();
  TstTrainer<float, Space> a(Space(), straight, small_training(), train);
  for (int epoch = 0; epoch < 4; ++epoch)
    a.train_epoch(Space(), train, epoch);

  // Interrupted after 2 epochs, saved, loaded into fresh objects, 2 more epochs.
  auto first_half = make();
  TstTrainer<float, Space> b(Space(), first_half, small_training(), train);
  for (int epoch = 0; epoch < 2; ++epoch)
    b.train_epoch(Space(), train, epoch);
  CheckpointInfo info;
  info.class_names = train.class_names;
  info.next_epoch = 2;
  info.step = b.global_step();
  save_checkpoint(dir, first_half, &b.optimizer(), info);

  auto resumed = make();
  TstTrainer<float, Space> c(Space(), resumed, small_training(), train);
  const CheckpointInfo loaded = load_checkpoint(Space(), dir, resumed, &c.optimizer());
  CHECK(bitwise_equal(parameters_of(resumed), parameters_of(first_half)));
  CHECK(loaded.next_epoch == 2);
  CHECK(loaded.class_names == train.class_names);
  c.set_global_step(loaded.step);
  for (int epoch = loaded.next_epoch; epoch < 4; ++epoch)
    c.train_epoch(Space(), train, epoch);
  CHECK(bitwise_equal(parameters_of(resumed), parameters_of(straight)));
  // BatchNorm state resumed too.
  int checked = 0;
  resumed.visit_buffers([&](const std::string& name, auto& v) {
    straight.visit_buffers([&](const std::string& other, auto& w) {
      if (name == other) {
        CHECK(bitwise_equal(host_values(v), host_values(w)));
        ++checked;
      }
    });
  });
  CHECK(checked == 8);
  // Save -> load -> evaluate gives identical predictions.
  const auto predictions = a.predict(Space(), train);
  auto reloaded = make();
  load_checkpoint<float, Space>(Space(), dir, reloaded, nullptr);
  TstTrainer<float, Space> d(Space(), reloaded, small_training(), train);
  CHECK(bitwise_equal(std::vector<double>(predictions.begin(), predictions.end()), [&] {
    auto p = c.predict(Space(), train);
    return std::vector<double>(p.begin(), p.end());
  }()));
  std::remove((dir + "/model.safetensors").c_str());
  std::remove((dir + "/config.json").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("Loading a checkpoint into a model that does not fit fails with every mismatch listed",
          "[training][checkpoint][errors]") {
  const auto train = small_set(16, 5);
  const std::string dir = temporary_directory();
  auto imputer =
      TimeSeriesTransformer<float, Space>(Space(), small_config(train, TstTask::Imputation));
  save_checkpoint<float, Space>(dir, imputer, nullptr, CheckpointInfo{});

  // A classifier's output layer differs: strict loading refuses and writes nothing.
  auto classifier =
      TimeSeriesTransformer<float, Space>(Space(), small_config(train, TstTask::Classification));
  const auto before = parameters_of(classifier);
  CHECK_THROWS_WITH((load_checkpoint<float, Space>(Space(), dir, classifier, nullptr)),
                    ContainsText("does not match the model (strict load)") &&
                        ContainsText("shape mismatches (1)") &&
                        ContainsText("output_layer.weight: file (4, 8), model (4, 128)"));
  CHECK(bitwise_equal(parameters_of(classifier), before));
  // --change-output: everything but the output layer loads.
  LoadOptions skip;
  skip.skip_prefixes = {"output_layer."};
  load_checkpoint<float, Space>(Space(), dir, classifier, nullptr, skip);
  const auto after = parameters_of(classifier);
  const auto source = parameters_of(imputer);
  const std::int64_t encoder = classifier.output_layer_offset();
  CHECK(bitwise_equal(std::vector<double>(after.begin(), after.begin() + encoder),
                      std::vector<double>(source.begin(), source.begin() + encoder)));
  // Non-strict: the mismatch is reported, the rest loads.
  LoadOptions lenient;
  lenient.strict = false;
  const auto file = safetensors::File::read(dir + "/model.safetensors");
  const LoadReport report = load_state_dict(Space(), classifier, file, lenient);
  CHECK(report.mismatched.size() == 1);
  CHECK(report.missing.empty());
  // Fewer features than the checkpoint's model.
  auto narrow_set = small_set(16, 6);
  TstConfig narrow = small_config(narrow_set, TstTask::Imputation);
  narrow.feat_dim = 3;
  auto other = TimeSeriesTransformer<float, Space>(Space(), narrow);
  CHECK_THROWS_WITH((load_checkpoint<float, Space>(Space(), dir, other, nullptr)),
                    ContainsText("was trained on 4 features, the model has 3"));
  std::remove((dir + "/model.safetensors").c_str());
  std::remove((dir + "/config.json").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("A fixed-encoding model checks the file's pos_enc.pe table against its sinusoid",
          "[training][checkpoint][errors]") {
  const auto train = small_set(16, 5);
  TstConfig fixed_config = small_config(train, TstTask::Imputation);
  fixed_config.pos_encoding = PositionalEncodingKind::Fixed;
  TstConfig learnable_config = fixed_config;
  learnable_config.pos_encoding = PositionalEncodingKind::Learnable;
  TimeSeriesTransformer<float, Space> fixed(Space(), fixed_config);
  TimeSeriesTransformer<float, Space> learnable(Space(), learnable_config);

  // A fixed model's own file (its table is the sinusoid) loads.
  safetensors::Writer own;
  add_state_dict(Space(), own, fixed);
  CHECK_NOTHROW(load_state_dict(Space(), fixed, safetensors::File::parse(own.serialize(), "own")));

  // A learnable model's table is not a sinusoid: refused, naming the key, nothing written.
  safetensors::Writer other;
  add_state_dict(Space(), other, learnable);
  const auto file = safetensors::File::parse(other.serialize(), "learned");
  const auto before = parameters_of(fixed);
  CHECK_THROWS_WITH(load_state_dict(Space(), fixed, file),
                    ContainsText("shape mismatches (1)") &&
                        ContainsText("pos_enc.pe: the file's table is not the fixed sinusoid") &&
                        ContainsText("configure pos_encoding learnable"));
  CHECK(bitwise_equal(parameters_of(fixed), before));
}

TEST_CASE("Loading refuses integer weights, negative running variances and counts, writing nothing",
          "[training][checkpoint][errors]") {
  const auto train = small_set(16, 5);
  TimeSeriesTransformer<float, Space> model(Space(), small_config(train, TstTask::Imputation));
  safetensors::Writer own;
  add_state_dict(Space(), own, model);
  const auto good = safetensors::File::parse(own.serialize(), "good");
  // The model's own file with one tensor replaced.
  const auto with = [&](const std::string& replaced, const auto& values) {
    safetensors::Writer w;
    for (const auto& info : good.tensors()) {
      if (info.name == replaced)
        w.add(info.name, info.shape, values);
      else if (info.dtype == safetensors::Dtype::I64)
        w.add(info.name, info.shape, good.to_int64(info.name));
      else
        w.add(info.name, info.shape, good.to_float(info.name));
    }
    return safetensors::File::parse(w.serialize(), "corrupt");
  };
  const std::string weight = "project_inp.weight";
  const auto& info = good.info(weight);
  std::vector<std::int32_t> as_integers(std::size_t(info.numel()), 1);
  std::string variance, count;
  for (const auto& t : good.tensors()) {
    if (variance.empty() && t.name.find(".running_var") != std::string::npos) variance = t.name;
    if (count.empty() && t.name.find(".num_batches_tracked") != std::string::npos) count = t.name;
  }
  REQUIRE(!variance.empty());
  REQUIRE(!count.empty());
  std::vector<float> negative(std::size_t(good.info(variance).numel()), 1.0f);
  negative[2] = -0.5f;
  const auto before = parameters_of(model);
  CHECK_THROWS_WITH(load_state_dict(Space(), model, with(weight, as_integers)),
                    ContainsText("tensor 'project_inp.weight' is I32") &&
                        ContainsText("weights and buffers must be F16, BF16, F32 or F64"));
  CHECK_THROWS_WITH(load_state_dict(Space(), model, with(variance, negative)),
                    ContainsText("holds -0.5 at element 2") &&
                        ContainsText("a running variance cannot be negative"));
  CHECK_THROWS_WITH(load_state_dict(Space(), model, with(count, std::vector<std::int64_t>{-4})),
                    ContainsText("must hold one count of at least 0"));
  CHECK_THROWS_WITH(load_state_dict(Space(), model, with(count, std::vector<float>{3.0f})),
                    ContainsText("is F32; num_batches_tracked must be an integer"));
  CHECK(bitwise_equal(parameters_of(model), before));
  CHECK_NOTHROW(load_state_dict(Space(), model, good));
}

TEST_CASE(
    "The finite guard names the first block that produced a NaN, and NaN input and weights are "
    "refused",
    "[training][errors]") {
  const auto train = small_set(8, 7);
  TimeSeriesTransformer<float, Space> model(Space(), small_config(train, TstTask::Imputation));
  // Poison the second layer's feed-forward.
  const auto* entry = model.parameters().find("transformer_encoder.layers.1.linear1.weight");
  REQUIRE(entry != nullptr);
  Kokkos::deep_copy(Kokkos::subview(model.parameters().values(), entry->offset + 3), std::nanf(""));
  const int batch = 2, seq = static_cast<int>(train.max_len),
            F = static_cast<int>(train.n_features);
  const auto x = device_from<float, Space>(random_values(batch * seq * F, 1), batch, seq, F);
  Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, Space::memory_space> keep("keep", batch, seq);
  Kokkos::deep_copy(keep, 1);
  Tensor2<float, Space::memory_space> out("out", batch * seq, F);
  model.forward(Space(), RunContext{true, 0}, x, keep, out);  // unguarded: NaN flows through
  CHECK(first_non_finite(Space(), out) >= 0);
  model.set_finite_checks(true);
  CHECK_THROWS_WITH(model.forward(Space(), RunContext{true, 0}, x, keep, out),
                    ContainsText("non-finite value") &&
                        ContainsText("transformer_encoder.layers.1.ff (forward)"));
  // With the guard on, the model's input is checked too; off (the default), it is not (the
  // trainer checks each batch on the host instead).
  auto bad = random_values(batch * seq * F, 2);
  bad[5] = std::numeric_limits<double>::infinity();
  model.set_finite_checks(false);
  CHECK_NOTHROW(model.forward(Space(), RunContext{false, 0},
                              device_from<float, Space>(bad, batch, seq, F), keep, out));
  model.set_finite_checks(true);
  CHECK_THROWS_WITH(
      model.forward(Space(), RunContext{false, 0}, device_from<float, Space>(bad, batch, seq, F),
                    keep, out),
      ContainsText("x (missing values must be filled before the model) holds inf at element 5"));
  // A checkpoint holding a NaN weight is refused before anything is loaded.
  const std::string dir = temporary_directory();
  save_checkpoint<float, Space>(dir, model, nullptr, CheckpointInfo{});
  TimeSeriesTransformer<float, Space> fresh(Space(), small_config(train, TstTask::Imputation));
  const auto before = parameters_of(fresh);
  CHECK_THROWS_WITH(
      (load_checkpoint<float, Space>(Space(), dir, fresh, nullptr)),
      ContainsText("transformer_encoder.layers.1.linear1.weight' holds nan at element 3"));
  CHECK(bitwise_equal(parameters_of(fresh), before));
  std::remove((dir + "/model.safetensors").c_str());
  std::remove((dir + "/config.json").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("A checkpoint is one file: the config inside model.safetensors wins over config.json",
          "[training][checkpoint]") {
  const auto train = small_set(16, 5);
  const std::string dir = temporary_directory();
  auto classifier =
      TimeSeriesTransformer<float, Space>(Space(), small_config(train, TstTask::Classification));
  CheckpointInfo info;
  info.class_names = train.class_names;
  info.next_epoch = 3;
  save_checkpoint<float, Space>(dir, classifier, nullptr, info);
  // A run killed after the weights' rename and before config.json's leaves an older config.json
  // (here: another model's) beside the new weights; the checkpoint still loads as saved.
  auto imputer =
      TimeSeriesTransformer<float, Space>(Space(), small_config(train, TstTask::Imputation));
  const std::string other = temporary_directory();
  save_checkpoint<float, Space>(other, imputer, nullptr, CheckpointInfo{});
  std::rename((other + "/config.json").c_str(), (dir + "/config.json").c_str());
  const CheckpointInfo read = read_checkpoint_config(dir);
  CHECK(read.config.task == TstTask::Classification);
  CHECK(read.next_epoch == 3);
  CHECK(read.class_names == train.class_names);
  auto reloaded =
      TimeSeriesTransformer<float, Space>(Space(), small_config(train, TstTask::Classification));
  CHECK(load_checkpoint<float, Space>(Space(), dir, reloaded, nullptr).next_epoch == 3);
  CHECK(bitwise_equal(parameters_of(reloaded), parameters_of(classifier)));
  // A directory with neither file: the error names the config.json it looked for. (Converted
  // checkpoints, which have no embedded copy, load through config.json in test_tst_parity.)
  std::remove((other + "/model.safetensors").c_str());
  CHECK_THROWS_WITH(read_checkpoint_config(other), ContainsText(other + "/config.json"));
  for (const std::string& d : {dir, other}) {
    std::remove((d + "/model.safetensors").c_str());
    std::remove((d + "/config.json").c_str());
    rmdir(d.c_str());
  }
}

TEST_CASE(
    "An output directory is written by one run at a time, and killed runs leave no temporaries",
    "[training][checkpoint]") {
  const std::string dir = temporary_directory();
  const std::string stale = dir + "/model.safetensors.tmp.AbC123";
  std::FILE* f = std::fopen(stale.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("half a checkpoint", f);
  std::fclose(f);
  {
    const OutputDirectoryLock lock(dir);
    CHECK(access(stale.c_str(), F_OK) != 0);
    CHECK_THROWS_WITH(OutputDirectoryLock(dir),
                      ContainsText("another kformer run is writing to") && ContainsText(dir));
  }
  { const OutputDirectoryLock again(dir); }  // released with the first
  CHECK(rmdir(dir.c_str()) == 0);            // empty: the lock added no file to the directory
}

namespace {

// A network of one's own, as an embedding code writes it: only a parameter walk, no BatchNorm
// buffers, counters or computed tables.
struct TwoLinear {
  Linear<double, Space> first, second;
  TwoLinear(const Space& exec, std::uint64_t seed)
      : first(exec, 3, 5, {true, seed}, "first"), second(exec, 5, 2, {false, seed + 1}, "second") {}
  template <class F>
  void visit_parameters(F&& f) {
    first.visit_parameters([&](const std::string& n, auto& p) { f("first." + n, p); });
    second.visit_parameters([&](const std::string& n, auto& p) { f("second." + n, p); });
  }
};

std::vector<double> all_parameters(TwoLinear& net) {
  std::vector<double> values;
  net.visit_parameters([&](const std::string&, auto& p) {
    const auto v = host_values(p.value);
    values.insert(values.end(), v.begin(), v.end());
  });
  return values;
}

}  // namespace

TEST_CASE("A module of one's own saves and loads through its parameter walk alone",
          "[training][checkpoint]") {
  TwoLinear saved(Space(), 5), loaded(Space(), 11);
  REQUIRE_FALSE(bitwise_equal(all_parameters(saved), all_parameters(loaded)));
  safetensors::Writer writer;
  add_state_dict(Space(), writer, saved);
  const auto file = safetensors::File::parse(writer.serialize(), "two_linear");
  CHECK(file.tensors().size() == 3);  // first.weight, first.bias, second.weight
  const LoadReport report = load_state_dict(Space(), loaded, file);
  CHECK(report.loaded.size() == 3);
  CHECK(bitwise_equal(all_parameters(saved), all_parameters(loaded)));
  // A file without second.weight: refused strictly, nothing written.
  safetensors::Writer partial;
  partial.add("first.weight", {5, 3}, std::vector<double>(15, 0.5));
  partial.add("first.bias", {5}, std::vector<double>(5, 0.5));
  TwoLinear untouched(Space(), 11);
  const auto before = all_parameters(untouched);
  CHECK_THROWS_WITH(
      load_state_dict(Space(), untouched, safetensors::File::parse(partial.serialize(), "partial")),
      ContainsText("missing keys (1):\n    second.weight"));
  CHECK(bitwise_equal(all_parameters(untouched), before));
}

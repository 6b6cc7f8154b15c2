// Checkpoints: a directory holding model.safetensors (the state_dict by TST names, and when
// training: the optimizer state, the training progress and the standardization fitted on the
// training data) and config.json (the model's hyper-parameters and what the data looked like).
//
// model.safetensors is the checkpoint: it carries config.json's text in its metadata
// ("checkpoint"), and is written to a temporary name and renamed into place in one step, so a run
// killed at any moment leaves either the previous checkpoint or the new one, whole. config.json is
// written after it as a copy for people and tools; it is read only for checkpoints without the
// embedded copy (older ones, and those made by tools/pth_to_safetensors.py). A checkpoint that
// fails to load changes nothing on disk.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/file_io.hpp"
#include "../core/safetensors.hpp"
#include "../core/safetensors_kokkos.hpp"
#include "../data/preprocess.hpp"
#include "../models/tst.hpp"
#include "../optimizers/optimizers.hpp"
#include "state_dict.hpp"

namespace kformer {

// What a checkpoint says besides the weights.
// The format a checkpoint's config names; others are refused.
inline constexpr const char* kCheckpointFormat = "kformer-tst/1";

struct CheckpointInfo {
  TstConfig config;
  std::vector<std::string> class_names;  // classification: label index -> name
  std::optional<data::Standardization> standardization;
  int next_epoch = 0;          // training resumes at this epoch
  std::uint64_t step = 0;      // global optimizer step (selects dropout masks)
  bool has_optimizer = false;  // optimizer state present
  // How the training data's missing values were filled; inference does the same by default.
  data::MissingValues missing_values = data::MissingValues::Zero;
};

std::string checkpoint_config_json(const CheckpointInfo& info);
// The checkpoint's config: the copy inside model.safetensors where there is one, else
// config.json; throws kformer::Error naming the file and the problem.
CheckpointInfo read_checkpoint_config(const std::string& directory);
// The same from a model.safetensors already read (`file`, of `directory`).
CheckpointInfo checkpoint_config_of(const safetensors::File& file, const std::string& directory);
std::string checkpoint_weights_path(const std::string& directory);

// Held by a training run for as long as it writes checkpoints and metrics into `directory`
// (created if missing): a second run into the same directory is refused instead of interleaving
// its files with the first's. Taking it removes the temporary files (*.tmp.*) that killed runs
// left there. The lock is released when the object is destroyed or the process ends.
class OutputDirectoryLock {
 public:
  explicit OutputDirectoryLock(const std::string& directory);
  ~OutputDirectoryLock();
  OutputDirectoryLock(const OutputDirectoryLock&) = delete;
  OutputDirectoryLock& operator=(const OutputDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Saves the model (and the optimizer, when given) with `info` into `directory` (created if
// missing).
template <class T, class ExecutionSpace>
void save_checkpoint(const std::string& directory, TimeSeriesTransformer<T, ExecutionSpace>& model,
                     const Optimizer<T, ExecutionSpace>* optimizer, CheckpointInfo info);

// Loads model.safetensors of `directory` into `model` (strict unless options say otherwise), the
// optimizer state into `optimizer` when both exist, and returns the checkpoint's info. The model's
// configuration must match config.json's in everything the weights depend on.
template <class T, class ExecutionSpace>
CheckpointInfo load_checkpoint(const ExecutionSpace& exec, const std::string& directory,
                               TimeSeriesTransformer<T, ExecutionSpace>& model,
                               Optimizer<T, ExecutionSpace>* optimizer,
                               const LoadOptions& options = {});

void make_directories(const std::string& directory);

// --- implementation ------------------------------------------------------------------------

template <class T, class ExecutionSpace>
void save_checkpoint(const std::string& directory, TimeSeriesTransformer<T, ExecutionSpace>& model,
                     const Optimizer<T, ExecutionSpace>* optimizer, CheckpointInfo info) {
  make_directories(directory);
  info.config = model.config();
  info.has_optimizer = optimizer != nullptr;
  safetensors::Writer writer;
  add_state_dict(ExecutionSpace(), writer, model);
  if (optimizer) {
    const auto m = to_host(optimizer->exp_avg());
    const auto v = to_host(optimizer->exp_avg_sq());
    writer.add("optimizer.exp_avg", {std::int64_t(m.size())},
               std::vector<T>(m.data(), m.data() + m.size()));
    writer.add("optimizer.exp_avg_sq", {std::int64_t(v.size())},
               std::vector<T>(v.data(), v.data() + v.size()));
    writer.add("optimizer.step", {}, std::vector<std::int64_t>{optimizer->steps()});
  }
  if (info.standardization) {
    const auto& s = *info.standardization;
    writer.add("standardization.mean", {std::int64_t(s.mean.size())}, s.mean);
    writer.add("standardization.std", {std::int64_t(s.std.size())}, s.std);
  }
  writer.add("training.next_epoch", {}, std::vector<std::int64_t>{info.next_epoch});
  writer.add("training.step", {}, std::vector<std::int64_t>{static_cast<std::int64_t>(info.step)});
  writer.set_metadata("format", kCheckpointFormat);
  writer.set_metadata("config", to_json(info.config));
  writer.set_metadata("checkpoint", checkpoint_config_json(info));
  // The one rename that makes the new checkpoint; config.json follows as its copy.
  writer.write(checkpoint_weights_path(directory));
  write_file_atomic(directory + "/config.json", checkpoint_config_json(info));
}

template <class T, class ExecutionSpace>
CheckpointInfo load_checkpoint(const ExecutionSpace& exec, const std::string& directory,
                               TimeSeriesTransformer<T, ExecutionSpace>& model,
                               Optimizer<T, ExecutionSpace>* optimizer,
                               const LoadOptions& options) {
  const std::string where = "kformer::load_checkpoint";
  const auto file = safetensors::File::read(checkpoint_weights_path(directory));
  CheckpointInfo info = checkpoint_config_of(file, directory);
  const TstConfig& mine = model.config();
  if (info.config.feat_dim != mine.feat_dim)
    fail(where, directory, " was trained on ", info.config.feat_dim, " features, the model has ",
         mine.feat_dim);
  // Everything is checked before anything is written.
  if (file.contains("standardization.mean") && file.contains("standardization.std")) {
    data::Standardization s{file.to_float("standardization.mean"),
                            file.to_float("standardization.std")};
    if (std::int64_t(s.mean.size()) != mine.feat_dim || s.std.size() != s.mean.size())
      fail(where, directory, ": the standardization has ", s.mean.size(), " features, the model ",
           mine.feat_dim);
    for (std::size_t f = 0; f < s.mean.size(); ++f)
      if (!std::isfinite(s.mean[f]) || !std::isfinite(s.std[f]) || !(s.std[f] > 0))
        fail(where, directory, ": the standardization of feature ", f, " is mean ", s.mean[f],
             ", std ", s.std[f], " (a finite mean and a positive std)");
    info.standardization = s;
  }
  if (file.contains("training.next_epoch")) {
    const std::int64_t next = file.to_int64("training.next_epoch").at(0);
    if (next < 0 || next > std::numeric_limits<int>::max())
      fail(where, directory, ": training.next_epoch must be from 0 to ",
           std::numeric_limits<int>::max(), ", got ", next);
    info.next_epoch = static_cast<int>(next);
  }
  if (file.contains("training.step"))
    info.step = static_cast<std::uint64_t>(file.to_int64("training.step").at(0));
  info.has_optimizer = file.contains("optimizer.exp_avg") &&
                       file.contains("optimizer.exp_avg_sq") && file.contains("optimizer.step");
  const bool load_optimizer = optimizer && info.has_optimizer;
  if (load_optimizer && (file.info("optimizer.exp_avg").numel() != optimizer->size() ||
                         file.info("optimizer.exp_avg_sq").numel() != optimizer->size()))
    fail(where, directory, ": the optimizer state has ", file.info("optimizer.exp_avg").numel(),
         " values, the optimizer ", optimizer->size());
  LoadOptions state_options = options;
  state_options.other_prefixes.insert(state_options.other_prefixes.end(),
                                      {"optimizer.", "standardization.", "training."});
  load_state_dict(exec, model, file, state_options);
  if (load_optimizer) {
    detail::load_values(file, "optimizer.exp_avg", optimizer->exp_avg());
    detail::load_values(file, "optimizer.exp_avg_sq", optimizer->exp_avg_sq());
    optimizer->set_steps(file.to_int64("optimizer.step").at(0));
  }
  exec.fence();
  return info;
}

}  // namespace kformer

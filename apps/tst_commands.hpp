// The kformer program's TST commands, written once for any execution space and scalar type.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/preprocess.hpp>
#include <kformer/data/series_set.hpp>
#include <kformer/data/ts_format.hpp>
#include <kformer/models/tst.hpp>
#include <kformer/training/checkpoint.hpp>
#include <kformer/training/tst_trainer.hpp>

#include "cli.hpp"
#include "progress.hpp"
#include "report.hpp"

namespace kformer::app {

// Reads a dataset: .ts, a CSV file, or a directory of CSV files with a labels file.
data::SeriesSet load_dataset(const std::string& path, const DataOptions& o,
                             const std::vector<std::string>& class_names = {});

TstConfig model_config(const ModelOptions& m, const data::SeriesSet& data, TstTask task);
// The training options of the command line; throws kformer::Error for an unknown optimizer, mask
// mode or mask distribution, and for a negative number of epochs.
TrainingOptions training_options(const TrainCliOptions& t);
std::string describe(const Evaluation& e, TstTask task);

// Runs epochs [first, epochs) of `trainer`, evaluating on `validation` after each, saving a
// checkpoint after each (so a killed run resumes from the last complete epoch) and logging them.
template <class T, class Space>
Evaluation train_epochs(const Space& exec, TimeSeriesTransformer<T, Space>& model,
                        TstTrainer<T, Space>& trainer, const data::SeriesSet& train,
                        const data::SeriesSet& validation, int first, int epochs,
                        const std::string& run, const std::string& checkpoint_dir,
                        CheckpointInfo info, MetricsLog& log, const RunOptions& r) {
  Progress progress(run, epochs, r.progress && Progress::stdout_is_terminal());
  Evaluation last = trainer.evaluate(exec, validation);
  for (int epoch = first; epoch < epochs; ++epoch) {
    const auto stats = trainer.train_epoch(exec, train, epoch, [&](const BatchProgress& p) {
      progress.batch(p.epoch, p.batch, p.batches, p.loss, p.seconds, p.series_per_second);
    });
    last = trainer.evaluate(exec, validation);
    progress.epoch(epoch, stats.loss, describe(last, model.config().task), stats.seconds);
    const TstTask task = model.config().task;
    log.add({run, epoch + 1, stats.loss, last.loss,
             task == TstTask::Classification ? last.accuracy
             : task == TstTask::Regression   ? last.rmse
                                             : last.loss,
             task == TstTask::Classification ? "accuracy"
             : task == TstTask::Regression   ? "rmse"
                                             : "masked_mse",
             stats.lr, stats.seconds});
    info.next_epoch = epoch + 1;
    info.step = trainer.global_step();
    if (!checkpoint_dir.empty()) save_checkpoint(checkpoint_dir, model, &trainer.optimizer(), info);
    log.write();  // after the checkpoint: the metrics never list an epoch that was not saved
  }
  return last;
}

}  // namespace kformer::app

// Metrics of training runs: one JSON object per epoch (metrics.jsonl), the same as CSV
// (metrics.csv), and a loss-curve PNG drawn by gnuplot from a script written beside it.
#pragma once

#include <string>
#include <vector>

namespace kformer::app {

struct EpochRecord {
  std::string run;  // "pretrain", "finetune", ...
  int epoch = 0;
  double train_loss = 0;
  double validation_loss = 0;
  double validation_metric = 0;  // accuracy (classification), RMSE (regression), masked MSE
  std::string metric_name;
  double lr = 0;
  double seconds = 0;
};

class MetricsLog {
 public:
  explicit MetricsLog(std::string directory);
  void add(const EpochRecord& record);
  // A resumed run: takes back the records of `run`'s epochs 1..epochs from the directory's
  // metrics.jsonl, so that the files written next still hold the epochs before the resume.
  void resume(const std::string& run, int epochs);
  // The records of `run` added so far (the resumed ones included), in epoch order.
  std::vector<EpochRecord> records_of(const std::string& run) const;
  // Rewrites metrics.jsonl and metrics.csv with everything added so far.
  void write() const;
  // Writes loss_curves.gp and runs gnuplot on it to make loss_curves.png; returns the PNG's path,
  // or an empty string (and says why on stderr) when gnuplot is not available.
  // Only the runs named in `runs` when it is not empty.
  std::string plot_loss_curves(const std::vector<std::string>& runs = {}) const;

 private:
  std::string directory_;
  std::vector<EpochRecord> records_;
};

}  // namespace kformer::app

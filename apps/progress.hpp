// Progress of long work on the terminal: a bar with epoch, batch, loss, throughput and ETA that
// redraws in place on a terminal, and degrades to one plain line per epoch when the output is a
// file or a pipe (CI logs).
#pragma once

#include <cstdint>
#include <string>

namespace kformer::app {

class Progress {
 public:
  // interactive: redraw a bar in place (defaults to whether stdout is a terminal).
  explicit Progress(std::string title, int epochs, bool interactive);
  static bool stdout_is_terminal();

  // After every batch.
  void batch(int epoch, std::int64_t batch, std::int64_t batches, double loss, double seconds,
             double series_per_second);
  // After every epoch: a line that stays (train loss, validation summary, time).
  void epoch(int epoch, double train_loss, const std::string& validation, double seconds);

 private:
  std::string title_;
  int epochs_;
  bool interactive_;
  double smoothed_loss_ = -1;
};

}  // namespace kformer::app

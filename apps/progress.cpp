#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace kformer::app {

Progress::Progress(std::string title, int epochs, bool interactive)
    : title_(std::move(title)), epochs_(epochs), interactive_(interactive) {}

bool Progress::stdout_is_terminal() {
  return isatty(fileno(stdout)) != 0;
}

void Progress::batch(int epoch, std::int64_t batch, std::int64_t batches, double loss,
                     double seconds, double series_per_second) {
  smoothed_loss_ = smoothed_loss_ < 0 ? loss : 0.9 * smoothed_loss_ + 0.1 * loss;
  if (!interactive_) return;
  constexpr int width = 24;
  const int filled = static_cast<int>(width * batch / std::max<std::int64_t>(batches, 1));
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  const double eta = batch > 0 ? seconds / batch * (batches - batch) : 0.0;
  std::printf("\r%s epoch %d/%d [%s] %lld/%lld loss %.4f  %.0f series/s  ETA %.0fs   ",
              title_.c_str(), epoch + 1, epochs_, bar.c_str(), static_cast<long long>(batch),
              static_cast<long long>(batches), smoothed_loss_, series_per_second, eta);
  std::fflush(stdout);
}

void Progress::epoch(int epoch, double train_loss, const std::string& validation, double seconds) {
  if (interactive_) std::printf("\r\033[K");
  std::printf("%s epoch %d/%d  train loss %.4f  %s  (%.1fs)\n", title_.c_str(), epoch + 1, epochs_,
              train_loss, validation.c_str(), seconds);
  std::fflush(stdout);
  smoothed_loss_ = -1;
}

}  // namespace kformer::app

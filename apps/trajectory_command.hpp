// kformer trajectory: phase-space trajectories end to end. Generates trajectories of a dynamical
// system (or reads a user's CSV), trains transformer integrators (the volume-preserving
// transformer and a standard one, with and without positional encoding), rolls every validation
// trajectory forward on the device and writes the rollout error over time (CSV and PNG) and a
// table of the runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kformer::app {

struct TrajectoryCliOptions {
  std::string system = "rigid-body";  // or coupled-oscillators
  std::string data;                   // a CSV of the user's trajectories instead
  std::vector<std::string> models = {"vpt", "standard"};
  std::vector<std::string> encodings = {"off", "on"};  // PositionalEncoding in front
  int trajectories = 24;                               // generated, for training
  int validation_trajectories = 8;
  int steps = 120;          // states per training trajectory
  int rollout_steps = 400;  // states per validation trajectory, rolled out
  double time_step = 0.2;
  int seq_length = 3;
  int prediction_window = 3;  // = seq_length: the rollout map is the network's own map
  int units = 1;     // the volume-preserving transformer's L (Julia's default 2 trains worse here)
  int n_blocks = 3;  // its feed-forward networks' blocks
  int n_linear = 2;
  int epochs = 200;
  int batch_size = 64;
  double learning_rate = 3e-3;
  std::uint64_t seed = 1;
  std::string output_dir = "kformer-out/trajectory";
};

// Runs the command on `backend` in `precision`; throws kformer::Error for bad input, before
// anything is written.
void run_trajectory_command(const std::string& backend, const std::string& precision,
                            const TrajectoryCliOptions& options);

}  // namespace kformer::app

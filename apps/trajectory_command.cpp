#include "trajectory_command.hpp"

#include "dispatch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include <Kokkos_Core.hpp>

#include <kformer/core/error.hpp>
#include <kformer/core/file_io.hpp>
#include <kformer/data/csv_format.hpp>
#include <kformer/data/trajectories.hpp>
#include <kformer/models/transformer_integrator.hpp>
#include <kformer/models/volume_preserving_transformer.hpp>

namespace kformer::app {
namespace {

const char* const kWhere = "kformer trajectory";

// Host trajectories: (count, steps, dim) row-major, in double.
struct HostTrajectories {
  int count = 0, steps = 0, dim = 0;
  std::vector<double> values;
  double at(int t, int s, int k) const { return values[(std::size_t(t) * steps + s) * dim + k]; }
};

void check_options(const TrajectoryCliOptions& o) {
  for (const auto& m : o.models)
    if (m != "vpt" && m != "standard")
      fail(kWhere, "--model must be vpt or standard, got '", m, "'");
  for (const auto& e : o.encodings)
    if (e != "off" && e != "on")
      fail(kWhere, "--positional-encoding must be off or on, got '", e, "'");
  if (o.data.empty() && o.system != "rigid-body" && o.system != "coupled-oscillators")
    fail(kWhere, "--system must be rigid-body or coupled-oscillators, got '", o.system, "'");
  if (o.seq_length < 1 || o.seq_length > 256)
    fail(kWhere, "--seq-length must be between 1 and 256, got ", o.seq_length);
  if (o.prediction_window < 1 || o.prediction_window > o.seq_length)
    fail(kWhere, "--prediction-window must be between 1 and --seq-length (", o.seq_length,
         "), got ", o.prediction_window);
  if (o.data.empty()) {
    if (o.steps < o.seq_length + o.prediction_window)
      fail(kWhere, "--steps must be at least --seq-length + --prediction-window (",
           o.seq_length + o.prediction_window, ") for one training window, got ", o.steps);
    if (o.rollout_steps <= o.seq_length)
      fail(kWhere, "--rollout-steps must be more than --seq-length (", o.seq_length, "), got ",
           o.rollout_steps);
    if (!(o.time_step > 0) || !std::isfinite(o.time_step))
      fail(kWhere, "--time-step must be positive and finite, got ", o.time_step);
  }
}

data::DynamicalSystem system_of(const std::string& name) {
  return name == "rigid-body" ? data::DynamicalSystem::RigidBody
                              : data::DynamicalSystem::CoupledOscillators;
}

// The user's trajectories: CSV layout 1 (series_id, optional time, one column per coordinate),
// every trajectory the same length, no missing values. The last quarter (at least one) is kept
// for validation.
void read_user_trajectories(const TrajectoryCliOptions& o, HostTrajectories& train,
                            HostTrajectories& validation) {
  data::CsvOptions csv;
  csv.time_column = "";
  const data::SeriesSet set = data::read_csv(o.data, csv);
  if (set.n_series < 2)
    fail(kWhere, o.data, ": needs at least 2 trajectories (training and validation), got ",
         set.n_series);
  for (std::int64_t s = 0; s < set.n_series; ++s) {
    if (set.lengths[s] != set.max_len)
      fail(kWhere, o.data, ": every trajectory must have the same number of steps: trajectory ",
           s + 1, " has ", set.lengths[s], ", expected ", set.max_len);
    for (std::int64_t step = 0; step < set.max_len; ++step)
      for (std::int64_t k = 0; k < set.n_features; ++k)
        if (!std::isfinite(set.value(s, step, k)))
          fail(kWhere, o.data, ": trajectory ", s + 1, ", step ", step + 1, ", coordinate ", k + 1,
               " is missing or not finite; trajectories must be complete");
  }
  if (set.max_len < o.seq_length + o.prediction_window)
    fail(kWhere, o.data, ": trajectories of ", set.max_len,
         " steps are shorter than --seq-length + --prediction-window (",
         o.seq_length + o.prediction_window, ")");
  const int n_validation = std::max<int>(1, static_cast<int>(set.n_series / 4));
  const int n_train = static_cast<int>(set.n_series) - n_validation;
  for (auto [part, first, count] :
       {std::tuple{&train, 0, n_train}, std::tuple{&validation, n_train, n_validation}}) {
    part->count = count;
    part->steps = static_cast<int>(set.max_len);
    part->dim = static_cast<int>(set.n_features);
    part->values.assign(set.values.begin() + set.offset(first, 0),
                        set.values.begin() + set.offset(first + count, 0));
  }
}

template <class T, class Space>
Tensor3<T, typename Space::memory_space> to_device(const Space& exec, const HostTrajectories& h) {
  Tensor3<T, typename Space::memory_space> v("kformer::trajectory::data", h.count, h.steps, h.dim);
  auto m = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < h.values.size(); ++i)
    m.data()[i] = static_cast<T>(h.values[i]);
  Kokkos::deep_copy(exec, v, m);
  exec.fence();
  return v;
}

template <class View>
HostTrajectories to_host_trajectories(const View& v) {
  HostTrajectories h;
  h.count = v.extent(0);
  h.steps = v.extent(1);
  h.dim = v.extent(2);
  auto m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  h.values.assign(m.size(), 0.0);
  for (std::size_t i = 0; i < m.size(); ++i)
    h.values[i] = static_cast<double>(m.data()[i]);
  return h;
}

struct RunResult {
  std::string model, encoding;
  std::int64_t parameters = 0;
  double train_loss = 0, validation_loss = 0, seconds = 0;
  std::vector<double> error;      // per rollout step, mean over validation trajectories
  std::vector<double> invariant;  // per step, mean |I(predicted) - I(true)| (generated data)
  HostTrajectories rollout;
};

template <class T, class Space, class Network>
RunResult train_and_roll_out(const Space& exec, Network& network, const TrajectoryCliOptions& o,
                             int dim, const Tensor3<T, typename Space::memory_space>& train,
                             const Tensor3<T, typename Space::memory_space>& validation,
                             bool encoding, const std::string& label) {
  const auto start = std::chrono::steady_clock::now();
  TransformerIntegrator<T, Space, Network> integrator(
      exec, network, dim,
      {o.seq_length, o.prediction_window, encoding, o.batch_size, o.learning_rate, o.seed});
  RunResult r;
  r.parameters = integrator.parameter_count();
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    r.train_loss = integrator.train_epoch(exec, train, epoch);
    if (!std::isfinite(r.train_loss))
      fail(kWhere, label, ": the training loss is ", r.train_loss, " at epoch ", epoch + 1,
           "; try a smaller --learning-rate");
    if ((epoch + 1) % 10 == 0 || epoch + 1 == o.epochs)
      std::printf("  %-22s epoch %3d  train MSE %.3e\n", label.c_str(), epoch + 1, r.train_loss);
  }
  r.validation_loss = integrator.loss(exec, validation);
  Tensor3<T, typename Space::memory_space> rolled("kformer::trajectory::rollout",
                                                  validation.extent(0), validation.extent(1),
                                                  validation.extent(2));
  Kokkos::deep_copy(exec, rolled, validation);
  integrator.rollout(exec, rolled);
  r.rollout = to_host_trajectories(rolled);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string format_number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6e", v);
  return buffer;
}

template <class T, class Space>
void run(const Space& exec, const TrajectoryCliOptions& o) {
  HostTrajectories train_host, validation_host;
  const bool generated = o.data.empty();
  const data::DynamicalSystem system = system_of(o.system);
  int dim = 0;
  if (generated) {
    dim = data::system_dim(system);
    train_host = to_host_trajectories(data::make_trajectories<double>(
        exec, {system, o.trajectories, o.steps, o.time_step, o.seed}));
    validation_host = to_host_trajectories(
        data::make_trajectories<double>(exec, {system, o.validation_trajectories, o.rollout_steps,
                                               o.time_step, derive_seed(o.seed, "validation")}));
  } else {
    read_user_trajectories(o, train_host, validation_host);
    dim = train_host.dim;
    if (dim < 2)
      fail(kWhere, o.data, ": the volume-preserving layers need at least 2 coordinates, got ", dim);
  }
  std::filesystem::create_directories(o.output_dir);
  const auto train = to_device<T>(exec, train_host);
  const auto validation = to_device<T>(exec, validation_host);
  std::printf(
      "trajectory: %s, %d coordinates; training %d trajectories x %d steps, validation %d x "
      "%d steps rolled out from their first %d; window %d -> %d\n",
      generated ? data::system_name(system) : o.data.c_str(), dim, train_host.count,
      train_host.steps, validation_host.count, validation_host.steps, o.seq_length, o.seq_length,
      o.prediction_window);

  std::vector<RunResult> results;
  for (const auto& model : o.models)
    for (const auto& encoding : o.encodings) {
      const std::string label = model + (encoding == "on" ? " + encoding" : "");
      RunResult r;
      if (model == "vpt") {
        VolumePreservingTransformer<T, Space> net(
            exec, dim, o.seq_length,
            {o.n_blocks, o.n_linear, o.units, VolumePreservingActivation::Tanh, false,
             derive_seed(o.seed, label)});
        r = train_and_roll_out<T>(exec, net, o, dim, train, validation, encoding == "on", label);
      } else {
        StandardTransformerNetwork<T, Space> net(exec, dim,
                                                 {32, 4, 2, 64, derive_seed(o.seed, label)});
        r = train_and_roll_out<T>(exec, net, o, dim, train, validation, encoding == "on", label);
      }
      r.model = model;
      r.encoding = encoding;
      const int steps = validation_host.steps;
      r.error.assign(steps, 0.0);
      r.invariant.assign(steps, 0.0);
      for (int t = 0; t < validation_host.count; ++t)
        for (int s = 0; s < steps; ++s) {
          double squared = 0;
          std::vector<double> predicted(dim), truth(dim);
          for (int k = 0; k < dim; ++k) {
            predicted[k] = r.rollout.at(t, s, k);
            truth[k] = validation_host.at(t, s, k);
            squared += (predicted[k] - truth[k]) * (predicted[k] - truth[k]);
          }
          r.error[s] += std::sqrt(squared) / validation_host.count;
          if (generated)
            r.invariant[s] += std::abs(data::invariant(system, predicted.data()) -
                                       data::invariant(system, truth.data())) /
                              validation_host.count;
        }
      results.push_back(std::move(r));
    }

  // rollout_error.csv: step, then error and invariant drift of each run
  std::ostringstream csv;
  csv << "step";
  for (const auto& r : results) {
    const std::string name = r.model + (r.encoding == "on" ? "_encoding" : "");
    csv << ',' << name << "_error";
    if (generated) csv << ',' << name << "_invariant_drift";
  }
  csv << '\n';
  for (int s = 0; s < validation_host.steps; ++s) {
    csv << s;
    for (const auto& r : results) {
      csv << ',' << format_number(r.error[s]);
      if (generated) csv << ',' << format_number(r.invariant[s]);
    }
    csv << '\n';
  }
  const std::string error_csv = o.output_dir + "/rollout_error.csv";
  write_file_atomic(error_csv, csv.str());
  // rollout.csv: the first validation trajectory, true and predicted by each run
  std::ostringstream traj;
  traj << "step";
  for (int k = 0; k < dim; ++k)
    traj << ",true_z" << k + 1;
  for (const auto& r : results)
    for (int k = 0; k < dim; ++k)
      traj << ',' << r.model << (r.encoding == "on" ? "_encoding" : "") << "_z" << k + 1;
  traj << '\n';
  for (int s = 0; s < validation_host.steps; ++s) {
    traj << s;
    for (int k = 0; k < dim; ++k)
      traj << ',' << format_number(validation_host.at(0, s, k));
    for (const auto& r : results)
      for (int k = 0; k < dim; ++k)
        traj << ',' << format_number(r.rollout.at(0, s, k));
    traj << '\n';
  }
  const std::string rollout_csv = o.output_dir + "/rollout.csv";
  write_file_atomic(rollout_csv, traj.str());

  // rollout.gp -> rollout.png: the first coordinate of the first validation trajectory, true and
  // predicted, and the error against time (log scale)
  // The left plot's range is the true trajectory's (with a margin): a diverging rollout leaves
  // it instead of flattening the others.
  double lo = validation_host.at(0, 0, 0), hi = lo;
  for (int s = 0; s < validation_host.steps; ++s) {
    lo = std::min(lo, validation_host.at(0, s, 0));
    hi = std::max(hi, validation_host.at(0, s, 0));
  }
  const double margin = 0.5 * (hi - lo) + 1e-3;
  std::ostringstream gp;
  gp << "# kformer trajectory: run gnuplot " << o.output_dir << "/rollout.gp\n"
     << "set terminal pngcairo size 1200,500\nset output '" << o.output_dir << "/rollout.png'\n"
     << "set termoption noenhanced\nset datafile separator ','\nset key autotitle columnhead\n"
     << "set key bottom right\nset multiplot layout 1,2\n"
     << "set title 'first validation trajectory, z1'\nset xlabel 'step'\n"
     << "set yrange [" << lo - margin << ":" << hi + margin << "]\n"
     << "plot '" << rollout_csv << "' using 1:2 with lines lw 2";
  for (std::size_t i = 0; i < results.size(); ++i)
    gp << ", '' using 1:" << 2 + dim * (i + 1) << " with lines";
  gp << "\nset title 'rollout error (mean distance to the true state)'\nset logscale y\n"
     << "set yrange [*:1e3]\n"
     << "set format y '%g'\nplot '" << error_csv << "' every ::1 using 1:2 with lines";
  for (std::size_t i = 1; i < results.size(); ++i)
    gp << ", '' using 1:" << 2 + i * (generated ? 2 : 1) << " with lines";
  gp << "\nunset multiplot\n";
  const std::string script = o.output_dir + "/rollout.gp";
  write_file_atomic(script, gp.str());
  std::string png;
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0 &&
      std::system(("gnuplot '" + script + "' > /dev/null 2>&1").c_str()) == 0)
    png = o.output_dir + "/rollout.png";

  const int last = validation_host.steps - 1;
  std::printf("\n%-22s %10s %12s %14s %16s %18s %8s\n", "model", "parameters", "train MSE",
              "validation MSE", "rollout error", generated ? "invariant drift" : "", "seconds");
  for (const auto& r : results) {
    const std::string label = r.model + (r.encoding == "on" ? " + encoding" : "");
    double worst_drift = 0;
    for (const double v : r.invariant)
      worst_drift = std::isfinite(v) ? std::max(worst_drift, v) : INFINITY;
    // A rollout that left the data's scale (error beyond 1e3, or not finite) is reported as
    // diverged, with the first step where it did.
    std::string rollout;
    for (int s = 0; s <= last && rollout.empty(); ++s)
      if (!(r.error[s] <= 1e3)) rollout = "diverged@" + std::to_string(s);
    if (rollout.empty()) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.3e", r.error[last]);
      rollout = buffer;
    }
    std::printf("%-22s %10lld %12.3e %14.3e %16s %18s %8.1f\n", label.c_str(),
                static_cast<long long>(r.parameters), r.train_loss, r.validation_loss,
                rollout.c_str(), generated ? format_number(worst_drift).c_str() : "", r.seconds);
  }
  std::printf(
      "\nrollout error: at step %d of the validation trajectories (mean distance to the "
      "true state)%s\n",
      last,
      generated ? (system == data::DynamicalSystem::RigidBody
                       ? "; invariant drift: the largest mean |Δ|z|²| (Casimir) "
                         "over the rollout"
                       : "; invariant drift: the largest mean |ΔH| over the rollout")
                : "");
  std::printf("written: %s, %s%s%s\n", error_csv.c_str(), rollout_csv.c_str(),
              png.empty() ? " (gnuplot not found: no PNG; gnuplot " : ", ",
              png.empty() ? (script + ")").c_str() : png.c_str());
}

}  // namespace

void run_trajectory_command(const std::string& backend, const std::string& precision,
                            const TrajectoryCliOptions& options) {
  check_options(options);
  dispatch(backend, precision,
           [&](auto space, auto p) { run<typename decltype(p)::type>(space, options); });
}

}  // namespace kformer::app

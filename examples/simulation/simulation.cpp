// A Kokkos simulation that trains a transformer surrogate of its own time step while it runs.
//
// The simulation: an ensemble of kMembers runs of 1-D periodic advection-diffusion on kPoints grid
// points, its state a Kokkos View u(member, point) on the default execution space; a step is
// kSubsteps explicit Euler substeps,
//   u_i' = u_i + dt (-c (u_{i+1} - u_{i-1}) / (2h) + nu (u_{i+1} - 2 u_i + u_{i-1}) / h^2).
// The surrogate sees each member's state as a sequence of kPatches tokens of kPatch points, the
// same memory viewed as (member, patch, point) (no copy), and maps it to the state a step later:
//   Linear(kPatch -> d), PositionalEncoding(d) (which patch), a 2-layer transformer encoder,
//   Linear(d -> kPatch), in a kformer::Sequential.
// Every step the model predicts the next state on the simulation's own execution space; every
// kTrainEvery steps it takes one Adam step on the pair (state, next state) just computed, its loss
// left on the device (read only when printed). The program prints the loss, the surrogate's
// largest error, each part's time per step and the model's share, checks that the steady-state
// loop allocates nothing (Kokkos' allocation callbacks), and saves and reloads the model.
//
//   simulation [CHECKPOINT_PATH]     (exit status 0 when every check holds)
#include <kformer/backends/memory_tracker.hpp>
#include <kformer/kformer.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;
using State = Kokkos::View<double**, Kokkos::LayoutRight, Memory>;

constexpr int kMembers = 32, kPoints = 64, kPatch = 8, kPatches = kPoints / kPatch;
constexpr int kSubsteps = 8, kSteps = 1200, kTrainEvery = 2, kReportEvery = 300, kWarmup = 4;
constexpr int kWidth = 32;

using Net =
    kformer::Sequential<double, Space, kformer::Linear<double, Space>,
                        kformer::PositionalEncoding<double, Space>,
                        kformer::TransformerEncoder<double, Space>, kformer::Linear<double, Space>>;

Net make_model(const Space& exec, std::uint64_t seed) {
  const kformer::EncoderLayerOptions encoder{
      kWidth, 4, 64, 0.0, kformer::Activation::GELU, kformer::NormType::LayerNorm, false, seed};
  return Net(exec, kPatch, kformer::Linear<double, Space>(exec, kPatch, kWidth, {true, seed + 1}),
             kformer::PositionalEncoding<double, Space>(exec, kWidth),
             kformer::TransformerEncoder<double, Space>(exec, 2, encoder),
             kformer::Linear<double, Space>(exec, kWidth, kPatch, {true, seed + 2}));
}

// The simulation's step: kSubsteps Euler substeps from u into next (scratch holds the substeps).
void simulation_step(const Space& exec, const State& u, const State& next, const State& scratch) {
  const double c = 1.0, nu = 0.02, h = 1.0 / kPoints, dt = 0.25 * h;
  const Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>> all(exec, {0, 0}, {kMembers, kPoints});
  Kokkos::deep_copy(exec, scratch, u);
  for (int k = 0; k < kSubsteps; ++k) {
    const State from = k % 2 == 0 ? scratch : next, to = k % 2 == 0 ? next : scratch;
    Kokkos::parallel_for(
        "simulation::substep", all, KOKKOS_LAMBDA(const int m, const int i) {
          const double left = from(m, (i + kPoints - 1) % kPoints);
          const double right = from(m, (i + 1) % kPoints), here = from(m, i);
          to(m, i) = here + dt * (-c * (right - left) / (2 * h) +
                                  nu * (right - 2 * here + left) / (h * h));
        });
  }
  if (kSubsteps % 2 == 0) Kokkos::deep_copy(exec, next, scratch);
}

// The state of shape (members, points) as the model's (members, patches, patch): same memory.
kformer::Tensor3<double, Memory> as_tokens(const State& u) {
  return kformer::Tensor3<double, Memory>(u.data(), kMembers, kPatches, kPatch);
}

double max_abs_difference(const Space& exec, const State& a, const State& b) {
  double result = 0;
  Kokkos::parallel_reduce(
      "simulation::max_error",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {kMembers, kPoints}),
      KOKKOS_LAMBDA(const int m, const int i, double& acc) {
        const double d = kformer::compat::math::fabs(a(m, i) - b(m, i));
        acc = d > acc ? d : acc;
      },
      Kokkos::Max<double>(result));
  return result;
}

// The program; main() reports what it throws (a kformer::Error names the argument and shapes).
int run(int argc, char* argv[]) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  kformer::backends::MemoryTracker::install();
  const Space exec;
  const std::string checkpoint = argc > 1 ? argv[1] : "simulation_model.safetensors";

  State u("u", kMembers, kPoints), next("next", kMembers, kPoints);
  State scratch("scratch", kMembers, kPoints), predicted("predicted", kMembers, kPoints);
  State d_predicted("d_predicted", kMembers, kPoints);
  const double pi = 3.14159265358979323846;
  Kokkos::parallel_for(
      "simulation::initial_state",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {kMembers, kPoints}),
      KOKKOS_LAMBDA(const int m, const int i) {
        const double x = static_cast<double>(i) / kPoints;
        u(m, i) = kformer::compat::math::sin(2 * pi * x + 0.2 * m) +
                  0.5 * kformer::compat::math::cos(4 * pi * x + 0.1 * m);
      });

  Net model = make_model(exec, 7);
  kformer::Optimizer<double, Space> adam(exec, model.parameters().size(), {});
  kformer::Losses<double, Space> losses;
  const Kokkos::View<double, Memory> loss("loss");
  const auto flat = [](const State& s) {  // the loss reads (members, points) matrices
    return kformer::Tensor2<const double, Memory>(s.data(), kMembers, kPoints);
  };

  std::printf(
      "simulation: %d members x %d points, %d substeps a step; surrogate %lld parameters "
      "on %s\n",
      kMembers, kPoints, kSubsteps, static_cast<long long>(model.parameters().size()),
      Space::name());
  double time_simulation = 0, time_inference = 0, time_training = 0, first_loss = 0;
  std::uint64_t allocations_at_warmup = 0;
  double last_error = 0;
  for (int step = 1; step <= kSteps; ++step) {
    Kokkos::Timer timer;
    simulation_step(exec, u, next, scratch);
    exec.fence();
    time_simulation += timer.seconds();

    timer.reset();
    model.forward(exec, kformer::RunContext{false, 0, false}, as_tokens(u), as_tokens(predicted));
    exec.fence();
    time_inference += timer.seconds();

    if (step % kTrainEvery == 0) {
      timer.reset();
      const kformer::RunContext ctx{true, static_cast<std::uint64_t>(step), true};
      model.zero_grad(exec);
      model.forward(exec, ctx, as_tokens(u), as_tokens(predicted));
      losses.mse(exec, flat(predicted), flat(next),
                 kformer::Tensor2<double, Memory>(d_predicted.data(), kMembers, kPoints), loss);
      model.backward(exec, ctx, as_tokens(u), as_tokens(d_predicted),
                     kformer::Tensor3<double, Memory>());
      adam.step(exec, model.parameters().values(), model.parameters().grads(), 2e-3);
      exec.fence();
      time_training += timer.seconds();
    }
    if (step == kTrainEvery) Kokkos::deep_copy(first_loss, loss);  // the first training step's
    if (step == kWarmup) allocations_at_warmup = kformer::backends::MemoryTracker::allocations();
    if (step % kReportEvery == 0) {
      double loss_value = 0;
      Kokkos::deep_copy(loss_value, loss);
      model.forward(exec, kformer::RunContext{false, 0, false}, as_tokens(u), as_tokens(predicted));
      last_error = max_abs_difference(exec, predicted, next);
      std::printf("step %5d  loss %.3e  surrogate max error %.3e\n", step, loss_value, last_error);
    }
    Kokkos::deep_copy(exec, u, next);
  }
  const std::uint64_t steady_allocations =
      kformer::backends::MemoryTracker::allocations() - allocations_at_warmup;
  const double per_step = 1e3 / kSteps;
  const double model_time = time_inference + time_training;
  std::printf(
      "per step: simulation %.3f ms, inference %.3f ms, training %.3f ms (every %d "
      "steps: %.3f ms each); the model's share of the loop %.0f %%\n",
      time_simulation * per_step, time_inference * per_step, time_training * per_step, kTrainEvery,
      time_training * 1e3 / (static_cast<double>(kSteps) / kTrainEvery),
      100 * model_time / (model_time + time_simulation));
  std::printf("allocations after step %d: %llu\n", kWarmup,
              static_cast<unsigned long long>(steady_allocations));

  // Saved and loaded into a model initialised otherwise: the same predictions, bit for bit.
  kformer::safetensors::Writer writer;
  kformer::add_state_dict(exec, writer, model);
  writer.write(checkpoint);
  Net reloaded = make_model(exec, 99);
  kformer::load_state_dict(exec, reloaded, kformer::safetensors::File::read(checkpoint));
  State again("again", kMembers, kPoints);
  model.forward(exec, {}, as_tokens(u), as_tokens(predicted));
  reloaded.forward(exec, {}, as_tokens(u), as_tokens(again));
  const bool same = max_abs_difference(exec, predicted, again) == 0.0;
  std::printf("reloaded model: %s\n", same ? "same outputs" : "DIFFERENT outputs");

  double final_loss = 0;
  Kokkos::deep_copy(final_loss, loss);
  const bool learned = final_loss < 1e-3 * first_loss && last_error < 0.05;
  std::printf("loss %.3e at the first training step, %.3e at the last\n", first_loss, final_loss);
  std::printf("checks: learned %s, steady state allocation-free %s, reload %s\n",
              learned ? "yes" : "NO", steady_allocations == 0 ? "yes" : "NO", same ? "yes" : "NO");
  return learned && steady_allocations == 0 && same ? 0 : 1;
}

}  // namespace

int main(int argc, char* argv[]) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simulation: %s\n", e.what());
    return 1;
  }
}

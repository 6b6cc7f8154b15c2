// Phase-space trajectories of two dynamical systems, integrated by Kokkos kernels (one thread per
// trajectory) with the implicit midpoint rule, which conserves every quadratic invariant of these
// systems (up to the fixed-point tolerance) and, for the rigid body's divergence-free flow,
// preserves volume.
//
//   rigid body (Euler's equations, sys_dim 3, angular momentum z in the body frame):
//     ż = z × (I⁻¹ z),  inertia I = diag(2, 1, 2/3):
//     ż₁ = z₂ z₃ / 2,  ż₂ = -z₁ z₃,  ż₃ = z₁ z₂ / 2
//     invariants: the Casimir |z|² and the energy Σ z_i² / (2 I_i)
//     initial conditions: on the unit sphere, z = (sin θ cos φ, sin θ sin φ, cos θ), θ, φ
//     uniform in [0.1, π - 0.1] and [0, 2π)
//   coupled harmonic oscillators (sys_dim 4, z = (q₁, q₂, p₁, p₂)):
//     H = p₁²/(2 m₁) + p₂²/(2 m₂) + k₁ q₁²/2 + k₂ q₂²/2 + k (q₁ - q₂)²/2,
//     m = (2, 1), k₁ = 1.5, k₂ = 0.3, k = 0.2;  invariant: H
//     initial conditions: q, p uniform in [-1, 1]
//
// Layout: (trajectories, steps, sys_dim), LayoutRight, step 0 the initial condition.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/profiling.hpp"
#include "../core/tensor.hpp"

namespace kformer::data {

enum class DynamicalSystem { RigidBody, CoupledOscillators };

inline int system_dim(DynamicalSystem system) {
  return system == DynamicalSystem::RigidBody ? 3 : 4;
}
inline const char* system_name(DynamicalSystem system) {
  return system == DynamicalSystem::RigidBody ? "rigid-body" : "coupled-oscillators";
}

struct TrajectoryOptions {
  DynamicalSystem system = DynamicalSystem::RigidBody;
  int trajectories = 16;
  int steps = 200;         // states per trajectory, the initial one included
  double time_step = 0.2;  // h
  std::uint64_t seed = 0;  // initial conditions
};

namespace impl {

// f(z) for the system, in double.
KOKKOS_INLINE_FUNCTION void vector_field(DynamicalSystem system, const double* z, double* f) {
  if (system == DynamicalSystem::RigidBody) {
    f[0] = 0.5 * z[1] * z[2];
    f[1] = -z[0] * z[2];
    f[2] = 0.5 * z[0] * z[1];
  } else {
    const double k1 = 1.5, k2 = 0.3, k = 0.2, m1 = 2.0, m2 = 1.0;
    f[0] = z[2] / m1;
    f[1] = z[3] / m2;
    f[2] = -k1 * z[0] - k * (z[0] - z[1]);
    f[3] = -k2 * z[1] + k * (z[0] - z[1]);
  }
}

}  // namespace impl

// The system's invariant in double: the Casimir |z|² (rigid body) or the energy H (oscillators).
inline double invariant(DynamicalSystem system, const double* z) {
  if (system == DynamicalSystem::RigidBody) return z[0] * z[0] + z[1] * z[1] + z[2] * z[2];
  return z[2] * z[2] / 4.0 + z[3] * z[3] / 2.0 + 1.5 * z[0] * z[0] / 2.0 + 0.3 * z[1] * z[1] / 2.0 +
         0.2 * (z[0] - z[1]) * (z[0] - z[1]) / 2.0;
}

// Initial conditions as the header describes them, drawn on the host from options.seed:
// (trajectories, sys_dim) row-major.
inline std::vector<double> initial_conditions(const TrajectoryOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int d = system_dim(options.system);
  std::vector<double> z(std::size_t(options.trajectories) * d);
  const double pi = 3.14159265358979323846;
  for (int t = 0; t < options.trajectories; ++t) {
    double* zt = &z[std::size_t(t) * d];
    if (options.system == DynamicalSystem::RigidBody) {
      const double theta = 0.1 + (pi - 0.2) * unit(rng), phi = 2 * pi * unit(rng);
      zt[0] = std::sin(theta) * std::cos(phi);
      zt[1] = std::sin(theta) * std::sin(phi);
      zt[2] = std::cos(theta);
    } else {
      for (int k = 0; k < d; ++k)
        zt[k] = 2 * unit(rng) - 1;
    }
  }
  return z;
}

// Integrates every initial condition of `initial` (trajectories, sys_dim) for steps - 1 steps of
// the implicit midpoint rule z' = z + h f((z + z') / 2), solved by fixed-point iteration to
// 1e-15 relative (at most 100 iterations), in double whatever T is.
//   out: (trajectories, steps, sys_dim)
template <class ExecutionSpace, class T>
void integrate_implicit_midpoint(
    const ExecutionSpace& exec, DynamicalSystem system, double time_step,
    const Tensor2<const double, typename ExecutionSpace::memory_space>& initial,
    const Tensor3<T, typename ExecutionSpace::memory_space>& out) {
  const std::string where = "kformer::data::integrate_implicit_midpoint";
  const int d = system_dim(system);
  check_shape(where, "initial", initial, {-1, d});
  check_shape(where, "out", out, {std::int64_t(initial.extent(0)), -1, d});
  if (out.extent(1) < 1) fail(where, "out must hold at least 1 step, got ", out.extent(1));
  if (!(time_step > 0) || !std::isfinite(time_step))
    fail(where, "time_step must be positive and finite, got ", time_step);
  const int steps = out.extent(1);
  const double h = time_step;
  Kokkos::parallel_for(
      KFORMER_LABEL("kformer::data::implicit_midpoint"),
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, initial.extent(0)), KOKKOS_LAMBDA(const int t) {
        double z[4], next[4], mid[4], f[4];
        for (int k = 0; k < d; ++k) {
          z[k] = initial(t, k);
          out(t, 0, k) = static_cast<T>(z[k]);
        }
        for (int s = 1; s < steps; ++s) {
          impl::vector_field(system, z, f);
          for (int k = 0; k < d; ++k)
            next[k] = z[k] + h * f[k];  // explicit Euler as the first guess
          for (int iteration = 0; iteration < 100; ++iteration) {
            for (int k = 0; k < d; ++k)
              mid[k] = 0.5 * (z[k] + next[k]);
            impl::vector_field(system, mid, f);
            double change = 0, scale = 0;
            for (int k = 0; k < d; ++k) {
              const double updated = z[k] + h * f[k];
              change += (updated - next[k]) * (updated - next[k]);
              scale += updated * updated;
              next[k] = updated;
            }
            if (change <= 1e-30 * (scale + 1e-300)) break;
          }
          for (int k = 0; k < d; ++k) {
            z[k] = next[k];
            out(t, s, k) = static_cast<T>(z[k]);
          }
        }
      });
}

// Trajectories of options.system from options.trajectories initial conditions:
// (trajectories, steps, sys_dim) in exec's memory space.
template <class T, class ExecutionSpace>
Tensor3<T, typename ExecutionSpace::memory_space> make_trajectories(
    const ExecutionSpace& exec, const TrajectoryOptions& options) {
  const std::string where = "kformer::data::make_trajectories";
  if (options.trajectories < 1)
    fail(where, "trajectories must be at least 1, got ", options.trajectories);
  if (options.steps < 2) fail(where, "steps must be at least 2, got ", options.steps);
  using M = typename ExecutionSpace::memory_space;
  const int d = system_dim(options.system);
  const std::vector<double> ics = initial_conditions(options);
  Tensor2<double, M> initial("kformer::data::initial_conditions", options.trajectories, d);
  auto host = Kokkos::create_mirror_view(initial);
  for (int t = 0; t < options.trajectories; ++t)
    for (int k = 0; k < d; ++k)
      host(t, k) = ics[std::size_t(t) * d + k];
  Kokkos::deep_copy(exec, initial, host);
  Tensor3<T, M> out(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kformer::data::trajectories"),
      options.trajectories, options.steps, d);
  integrate_implicit_midpoint(exec, options.system, options.time_step, initial, out);
  exec.fence();
  return out;
}

}  // namespace kformer::data

// The volume-preserving layers, transformer and integrator (GeometricMachineLearning.jl's), on
// every backend in double precision: outputs against host reference code written separately,
// gradients against finite differences, and the geometry: det J = 1 to 1e-10 for each layer and
// the whole transformer (with the attention's mixing held, the sense in which the Julia package
// calls it volume-preserving; with PositionalEncoding in front too), the full attention Jacobian
// measurably not volume-preserving, and a device rollout preserving the volume of a small ball.
#include "support/catch.hpp"

#include <cmath>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/data/trajectories.hpp>
#include <kformer/layers/encodings/positional_encoding.hpp>
#include <kformer/layers/volume_preserving_attention.hpp>
#include <kformer/layers/volume_preserving_feed_forward.hpp>
#include <kformer/models/transformer_integrator.hpp>
#include <kformer/models/volume_preserving_transformer.hpp>

#include "support/gradcheck.hpp"
#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::testing;

namespace {

// det of a row-major n×n matrix by LU with partial pivoting, in double.
double determinant(std::vector<double> a, int n) {
  double det = 1;
  for (int p = 0; p < n; ++p) {
    int best = p;
    for (int i = p + 1; i < n; ++i)
      if (std::abs(a[i * n + p]) > std::abs(a[best * n + p])) best = i;
    if (a[best * n + p] == 0) return 0;
    if (best != p) {
      for (int j = 0; j < n; ++j)
        std::swap(a[p * n + j], a[best * n + j]);
      det = -det;
    }
    det *= a[p * n + p];
    for (int i = p + 1; i < n; ++i) {
      const double f = a[i * n + p] / a[p * n + p];
      for (int j = p; j < n; ++j)
        a[i * n + j] -= f * a[p * n + j];
    }
  }
  return det;
}

// The Jacobian (n_out × n_in, row-major) from a vector-Jacobian product: row i is vjp(e_i). Exact
// to rounding, unlike finite differences.
std::vector<double> jacobian_from_vjp(
    const std::function<std::vector<double>(const std::vector<double>&)>& vjp, int n) {
  std::vector<double> j(std::size_t(n) * n);
  for (int i = 0; i < n; ++i) {
    std::vector<double> e(n, 0.0);
    e[i] = 1;
    const auto row = vjp(e);
    REQUIRE(row.size() == std::size_t(n));
    for (int k = 0; k < n; ++k)
      j[std::size_t(i) * n + k] = row[k];
  }
  return j;
}

// Host reference of the triangular layer: y = x + σ(S x + b), S from its packed entries.
std::vector<double> reference_triangular(const std::vector<double>& x, int rows, int d, bool lower,
                                         bool tanh_act, const std::vector<double>& w,
                                         const std::vector<double>& b) {
  std::vector<double> s(std::size_t(d) * d, 0.0);
  std::size_t next = 0;
  // The packed order: rows of the lower triangle (lower), columns of the upper one (upper).
  for (int r = 1; r < d; ++r)
    for (int c = 0; c < r; ++c)
      (lower ? s[r * d + c] : s[c * d + r]) = w[next++];
  std::vector<double> y(x.size());
  for (int n = 0; n < rows; ++n)
    for (int i = 0; i < d; ++i) {
      double a = b.empty() ? 0.0 : b[i];
      for (int j = 0; j < d; ++j)
        a += s[i * d + j] * x[n * d + j];
      y[n * d + i] = x[n * d + i] + (tanh_act ? std::tanh(a) : a);
    }
  return y;
}

// Host reference of the attention for one batch of sequences: Λ from (I + S)⁻¹ by solving with
// partial pivoting, y_t = Σ_s Λ_st x_s.
std::vector<double> reference_attention(const std::vector<double>& x, int batch, int seq, int d,
                                        const std::vector<double>& a,
                                        std::vector<double>* mixing = nullptr) {
  std::vector<double> y(x.size(), 0.0);
  if (mixing) mixing->assign(std::size_t(batch) * seq * seq, 0.0);
  for (int b = 0; b < batch; ++b) {
    const double* xb = &x[std::size_t(b) * seq * d];
    std::vector<double> s(seq * seq, 0.0);
    for (int i = 0; i < seq; ++i)
      for (int j = 0; j < i; ++j) {
        double c = 0;
        for (int k = 0; k < d; ++k)
          for (int l = 0; l < d; ++l)
            c += xb[i * d + k] * a[k * d + l] * xb[j * d + l];
        c /= std::sqrt(double(d));
        s[i * seq + j] = c;
        s[j * seq + i] = -c;
      }
    // Λ = (I - S)(I + S)⁻¹: solve Λ (I + S) = (I - S), i.e. (I + S)ᵀ Λᵀ = (I - S)ᵀ, column by
    // column with partial pivoting.
    std::vector<double> m(seq * seq), rhs(seq * seq);
    for (int i = 0; i < seq; ++i)
      for (int j = 0; j < seq; ++j) {
        m[i * seq + j] = (i == j) + s[j * seq + i];    // (I + S)ᵀ
        rhs[i * seq + j] = (i == j) - s[j * seq + i];  // (I - S)ᵀ
      }
    for (int p = 0; p < seq; ++p) {
      int best = p;
      for (int i = p + 1; i < seq; ++i)
        if (std::abs(m[i * seq + p]) > std::abs(m[best * seq + p])) best = i;
      for (int j = 0; j < seq; ++j) {
        std::swap(m[p * seq + j], m[best * seq + j]);
        std::swap(rhs[p * seq + j], rhs[best * seq + j]);
      }
      for (int i = 0; i < seq; ++i) {
        if (i == p) continue;
        const double f = m[i * seq + p] / m[p * seq + p];
        for (int j = 0; j < seq; ++j) {
          m[i * seq + j] -= f * m[p * seq + j];
          rhs[i * seq + j] -= f * rhs[p * seq + j];
        }
      }
    }
    std::vector<double> lambda_t(seq * seq);  // Λᵀ
    for (int i = 0; i < seq; ++i)
      for (int j = 0; j < seq; ++j)
        lambda_t[i * seq + j] = rhs[i * seq + j] / m[i * seq + i];
    for (int t = 0; t < seq; ++t)
      for (int k = 0; k < d; ++k) {
        double sum = 0;
        for (int src = 0; src < seq; ++src)
          sum += lambda_t[t * seq + src] * xb[src * d + k];
        y[(std::size_t(b) * seq + t) * d + k] = sum;
      }
    if (mixing)
      for (int i = 0; i < seq; ++i)
        for (int j = 0; j < seq; ++j)
          (*mixing)[(std::size_t(b) * seq + i) * seq + j] = lambda_t[j * seq + i];
  }
  return y;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Volume-preserving triangular layers: outputs, gradients and det J = 1",
                        "[volume_preserving]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int d = 5, rows = 4;
  for (const Triangle triangle : {Triangle::Lower, Triangle::Upper})
    for (const auto act : {VolumePreservingActivation::Tanh, VolumePreservingActivation::Identity})
      for (const bool bias : {true, false}) {
        CAPTURE(triangle == Triangle::Lower, act == VolumePreservingActivation::Tanh, bias);
        VolumePreservingTriangular<double, Space> layer(Space(), d, triangle, {act, bias, 3});
        const auto params = parameter_values(layer);
        const auto x = random_values(rows * d, 4, -2, 2);
        const auto fwd = [&](const std::vector<double>& xv) {
          Tensor2<double, M> y("y", xv.size() / d, d);
          layer.forward(Space(), {}, device_from<double, Space>(xv, xv.size() / d, d), y);
          return host_values(y);
        };
        const auto vjp = [&](const std::vector<double>& xv, const std::vector<double>& dy) {
          const auto xd = device_from<double, Space>(xv, xv.size() / d, d);
          Tensor2<double, M> dx("dx", xv.size() / d, d);
          layer.backward(Space(), {}, xd, device_from<double, Space>(dy, xv.size() / d, d), dx);
          return host_values(dx);
        };
        CHECK(max_abs_diff(fwd(x),
                           reference_triangular(x, rows, d, triangle == Triangle::Lower,
                                                act == VolumePreservingActivation::Tanh, params[0],
                                                bias ? params[1] : std::vector<double>{})) < 1e-14);
        check_gradients(gradcheck<Space>(layer, x, fwd, vjp, 5), 1e-7);
        // det J of one token's map, at several tokens
        for (int n = 0; n < rows; ++n) {
          const std::vector<double> token(x.begin() + n * d, x.begin() + (n + 1) * d);
          const auto j = jacobian_from_vjp([&](const auto& e) { return vjp(token, e); }, d);
          CHECK(std::abs(determinant(j, d) - 1.0) < 1e-10);
        }
      }
}

TEMPLATE_LIST_TEST_CASE("VolumePreservingFeedForward: the Julia stack, gradients, det J = 1",
                        "[volume_preserving]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int d = 4, rows = 3;
  VolumePreservingFeedForward<double, Space> net(
      Space(), d, {2, 2, VolumePreservingActivation::Tanh, false, 9});
  // 2 blocks of (2 linear pairs + a nonlinear pair), and the output pair
  CHECK(net.size() == 2 * (2 * 2 + 2) + 2);
  CHECK(net[0].triangle() == Triangle::Lower);
  const auto fwd = [&](const std::vector<double>& xv) {
    Tensor2<double, M> y("y", xv.size() / d, d);
    net.forward(Space(), {}, device_from<double, Space>(xv, xv.size() / d, d), y);
    return host_values(y);
  };
  const auto vjp = [&](const std::vector<double>& xv, const std::vector<double>& dy) {
    const auto xd = device_from<double, Space>(xv, xv.size() / d, d);
    Tensor2<double, M> y("y", xv.size() / d, d), dx("dx", xv.size() / d, d);
    net.forward(Space(), {}, xd, y);
    net.backward(Space(), {}, xd, device_from<double, Space>(dy, xv.size() / d, d), dx);
    return host_values(dx);
  };
  const auto x = random_values(rows * d, 12, -1.5, 1.5);
  check_gradients(gradcheck<Space>(net, x, fwd, vjp, 13), 1e-6);
  for (int n = 0; n < rows; ++n) {
    const std::vector<double> token(x.begin() + n * d, x.begin() + (n + 1) * d);
    const auto j = jacobian_from_vjp([&](const auto& e) { return vjp(token, e); }, d);
    CHECK(std::abs(determinant(j, d) - 1.0) < 1e-10);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "VolumePreservingAttention: the reference, an orthogonal mixing with det "
    "+1, gradients, and which map preserves volume",
    "[volume_preserving]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int batch = 3, seq = 4, d = 3;
  VolumePreservingAttention<double, Space> layer(Space(), d, {21});
  const auto a = parameter_values(layer)[0];
  const auto x = random_values(batch * seq * d, 22, -1, 1);
  const auto fwd = [&](const std::vector<double>& xv) {
    Tensor3<double, M> y("y", xv.size() / (seq * d), seq, d);
    layer.forward(Space(), {}, device_from<double, Space>(xv, xv.size() / (seq * d), seq, d), y);
    return host_values(y);
  };
  const auto vjp_with = [&](MixingDerivative derivative) {
    return [&, derivative](const std::vector<double>& xv, const std::vector<double>& dy) {
      const int b = xv.size() / (seq * d);
      const auto xd = device_from<double, Space>(xv, b, seq, d);
      Tensor3<double, M> y("y", b, seq, d), dx("dx", b, seq, d);
      layer.forward(Space(), {}, xd, y);
      layer.backward(Space(), {}, xd, device_from<double, Space>(dy, b, seq, d), dx,
                     WriteMode::Assign, derivative);
      return host_values(dx);
    };
  };
  std::vector<double> reference_mixing;
  CHECK(max_rel_diff(fwd(x), reference_attention(x, batch, seq, d, a, &reference_mixing)) < 1e-13);
  CHECK(max_abs_diff(host_values(layer.mixing(batch, seq)), reference_mixing) < 1e-13);
  check_gradients(gradcheck<Space>(layer, x, fwd, vjp_with(MixingDerivative::Full), 23), 1e-6);

  const auto held = vjp_with(MixingDerivative::Held);
  const auto full = vjp_with(MixingDerivative::Full);
  const int n = seq * d;
  for (int b = 0; b < batch; ++b) {
    CAPTURE(b);
    const std::vector<double> one(x.begin() + b * n, x.begin() + (b + 1) * n);
    // Λ orthogonal, det +1
    std::vector<double> lambda(reference_mixing.begin() + b * seq * seq,
                               reference_mixing.begin() + (b + 1) * seq * seq);
    for (int i = 0; i < seq; ++i)
      for (int j = 0; j < seq; ++j) {
        double dot = 0;
        for (int k = 0; k < seq; ++k)
          dot += lambda[k * seq + i] * lambda[k * seq + j];
        CHECK(std::abs(dot - (i == j)) < 1e-13);
      }
    CHECK(std::abs(determinant(lambda, seq) - 1.0) < 1e-12);
    // The map with Λ held: det J = det(Λ)^d = 1.
    const double det_held =
        determinant(jacobian_from_vjp([&](const auto& e) { return held(one, e); }, n), n);
    CHECK(std::abs(det_held - 1.0) < 1e-10);
    // The full map X -> Λ(X)ᵀ X is not volume-preserving: its determinant is measurably not 1.
    const double det_full =
        determinant(jacobian_from_vjp([&](const auto& e) { return full(one, e); }, n), n);
    INFO("det of the full attention Jacobian: " << det_full);
    CHECK(std::abs(det_full - 1.0) > 1e-6);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "VolumePreservingTransformer: gradients and det J = 1 with the mixing "
    "held, with and without PositionalEncoding in front",
    "[volume_preserving]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const int seq = 3, d = 3;
  VolumePreservingTransformer<double, Space> vpt(
      Space(), d, seq, {1, 1, 2, VolumePreservingActivation::Tanh, false, 31});
  PositionalEncoding<double, Space> encoding(d);
  const auto fwd = [&](const std::vector<double>& xv) {
    const int b = xv.size() / (seq * d);
    Tensor3<double, M> y("y", b, seq, d);
    vpt.forward(Space(), {}, device_from<double, Space>(xv, b, seq, d), y);
    return host_values(y);
  };
  // vjp of x -> vpt(pe(x)) (with_encoding) or of vpt(x)
  const auto vjp = [&](const std::vector<double>& xv, const std::vector<double>& dy,
                       MixingDerivative derivative, bool with_encoding) {
    const int b = xv.size() / (seq * d);
    const auto xd = device_from<double, Space>(xv, b, seq, d);
    Tensor3<double, M> encoded("encoded", b, seq, d), y("y", b, seq, d), dz("dz", b, seq, d),
        dx("dx", b, seq, d);
    const auto dyd = device_from<double, Space>(dy, b, seq, d);
    if (with_encoding) {
      encoding.forward(Space(), {}, xd, encoded);
      vpt.forward(Space(), {}, encoded, y);
      vpt.backward(Space(), {}, encoded, dyd, dz, WriteMode::Assign, derivative);
      encoding.backward(Space(), {}, xd, dz, dx);
    } else {
      vpt.forward(Space(), {}, xd, y);
      vpt.backward(Space(), {}, xd, dyd, dx, WriteMode::Assign, derivative);
    }
    return host_values(dx);
  };
  const auto x = random_values(2 * seq * d, 32, -1, 1);
  check_gradients(gradcheck<Space>(
                      vpt, x, fwd,
                      [&](const auto& xv, const auto& dy) {
                        return vjp(xv, dy, MixingDerivative::Full, false);
                      },
                      33),
                  1e-6);
  const int n = seq * d;
  const std::vector<double> one(x.begin(), x.begin() + n);
  for (const bool with_encoding : {false, true}) {
    CAPTURE(with_encoding);
    const auto j = jacobian_from_vjp(
        [&](const auto& e) { return vjp(one, e, MixingDerivative::Held, with_encoding); }, n);
    CHECK(std::abs(determinant(j, n) - 1.0) < 1e-10);
  }
  // The encoding's Jacobian is the identity.
  const auto pe_rows = jacobian_from_vjp(
      [&](const auto& e) {
        const auto xd = device_from<double, Space>(one, 1, seq, d);
        Tensor3<double, M> dx("dx", 1, seq, d);
        encoding.backward(Space(), {}, xd, device_from<double, Space>(e, 1, seq, d), dx);
        return host_values(dx);
      },
      n);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k)
      CHECK(pe_rows[i * n + k] == (i == k ? 1.0 : 0.0));
}

TEMPLATE_LIST_TEST_CASE("Trajectories: implicit midpoint steps, and invariants kept",
                        "[volume_preserving][trajectories]", backends::EnabledSpaces) {
  using Space = TestType;
  for (const auto system :
       {data::DynamicalSystem::RigidBody, data::DynamicalSystem::CoupledOscillators}) {
    CAPTURE(data::system_name(system));
    data::TrajectoryOptions o{system, 5, 60, 0.2, 7};
    const auto z = host_values(data::make_trajectories<double>(Space(), o));
    const int d = data::system_dim(system);
    for (int t = 0; t < o.trajectories; ++t) {
      const double* first = &z[std::size_t(t) * o.steps * d];
      const double invariant0 = data::invariant(system, first);
      for (int s = 1; s < o.steps; ++s) {
        const double* prev = first + (s - 1) * d;
        const double* next = first + s * d;
        // The midpoint equation, evaluated here independently: z' - z = h f((z + z') / 2).
        double mid[4], f[4];
        for (int k = 0; k < d; ++k)
          mid[k] = 0.5 * (prev[k] + next[k]);
        if (system == data::DynamicalSystem::RigidBody) {
          f[0] = (1 / (2.0 / 3) - 1 / 1.0) * mid[1] * mid[2];
          f[1] = (1 / 2.0 - 1 / (2.0 / 3)) * mid[2] * mid[0];
          f[2] = (1 / 1.0 - 1 / 2.0) * mid[0] * mid[1];
        } else {
          f[0] = mid[2] / 2.0;
          f[1] = mid[3] / 1.0;
          f[2] = -(1.5 + 0.2) * mid[0] + 0.2 * mid[1];
          f[3] = -(0.3 + 0.2) * mid[1] + 0.2 * mid[0];
        }
        for (int k = 0; k < d; ++k)
          CHECK(std::abs(next[k] - prev[k] - o.time_step * f[k]) < 1e-13);
        CHECK(std::abs(data::invariant(system, next) - invariant0) < 1e-12);
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE(
    "TransformerIntegrator: training lowers the loss, and a device rollout of "
    "the volume-preserving network keeps the volume of a small ball",
    "[volume_preserving][integrator]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  const data::TrajectoryOptions o{data::DynamicalSystem::RigidBody, 4, 40, 0.2, 3};
  const auto trajectories = data::make_trajectories<double>(Space(), o);
  // seq_length 1: the attention of one token is the identity, so one rollout step is the
  // feed-forward network, whose det J is 1, and so is the rollout's.
  VolumePreservingTransformer<double, Space> vpt(
      Space(), 3, 1, {1, 1, 1, VolumePreservingActivation::Tanh, false, 41});
  TransformerIntegrator<double, Space, decltype(vpt)> integrator(Space(), vpt, 3,
                                                                 {1, 1, false, 16, 3e-3, 42});
  const double before = integrator.loss(Space(), trajectories);
  for (int epoch = 0; epoch < 15; ++epoch)
    integrator.train_epoch(Space(), trajectories, epoch);
  const double after = integrator.loss(Space(), trajectories);
  INFO("loss before " << before << ", after " << after);
  CHECK(after < 0.5 * before);

  // A ball around z0: the rollout of z0 ± eps e_k for 8 steps, by central differences (longer
  // rollouts of this briefly trained map stretch the ball too far for finite differences to
  // resolve its determinant).
  const int steps = 9;
  const double eps = 1e-5;
  const std::vector<double> z0 = {0.6, -0.3, 0.74};
  Tensor3<double, M> ball("ball", 6, steps, 3);
  auto host = Kokkos::create_mirror_view(ball);
  for (int k = 0; k < 6; ++k)
    for (int c = 0; c < 3; ++c)
      host(k, 0, c) = z0[c] + (c == k / 2 ? (k % 2 ? -eps : eps) : 0.0);
  Kokkos::deep_copy(ball, host);
  integrator.rollout(Space(), ball);
  Kokkos::deep_copy(host, ball);
  std::vector<double> j(9);
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 3; ++k)
      j[c * 3 + k] = (host(2 * k, steps - 1, c) - host(2 * k + 1, steps - 1, c)) / (2 * eps);
  INFO("J = " << j[0] << " " << j[1] << " " << j[2] << " / " << j[3] << " " << j[4] << " " << j[5]
              << " / " << j[6] << " " << j[7] << " " << j[8]);
  CHECK(std::abs(determinant(j, 3) - 1.0) < 1e-8);
  // the rollout moved
  CHECK(std::abs(host(0, steps - 1, 0) - host(0, 0, 0)) > 1e-3);
}

TEMPLATE_LIST_TEST_CASE("TransformerIntegrator and the layers refuse bad arguments",
                        "[volume_preserving][errors]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  CHECK_THROWS_WITH((VolumePreservingTransformer<double, Space>(Space(), 1, 3)),
                    ContainsText("sys_dim must be at least 2"));
  CHECK_THROWS_WITH((VolumePreservingTransformer<double, Space>(Space(), 3, 0)),
                    ContainsText("seq_length must be between 1 and 256, got 0"));
  VolumePreservingTransformer<double, Space> vpt(Space(), 3, 3);
  CHECK_THROWS_WITH((TransformerIntegrator<double, Space, decltype(vpt)>(
                        Space(), vpt, 3, {3, 0, false, 8, 1e-3, 0})),
                    ContainsText("prediction_window must be between 1 and seq_length (3), got 0"));
  TransformerIntegrator<double, Space, decltype(vpt)> integrator(Space(), vpt, 3,
                                                                 {3, 1, false, 8, 1e-3, 0});
  const Tensor3<double, M> short_trajectories("short", 2, 3, 3);
  CHECK_THROWS_WITH(integrator.train_epoch(Space(), short_trajectories, 0),
                    ContainsText("trajectories of 3 steps hold no window of 3 + 1 steps"));
  const Tensor3<double, M> wrong_dim("wrong", 2, 10, 4);
  CHECK_THROWS_WITH(integrator.loss(Space(), wrong_dim),
                    ContainsText("trajectories has shape (2, 10, 4), expected (*, *, 3)"));
  Tensor3<double, M> x("x", 1, 3, 3);
  CHECK_THROWS_WITH(vpt.forward(Space(), {}, x, x), ContainsText("x and y overlap in memory"));
}

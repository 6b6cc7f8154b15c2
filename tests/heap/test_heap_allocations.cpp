// No heap allocation in a steady-state step: the embedded surrogate's inference and online training
// step (Sequential of Linear, PositionalEncoding, a 2-layer encoder with dropout and Linear; the
// MSE loss left on the device; an Adam step) on every backend, counted by replacing the global
// operator new of this program.
//
// Kokkos 4 and 5 allocate in their own launch path (see below); there the test checks that the
// count stays within what Kokkos makes per launch.
//
// Its own program with its own main: the other tests' runner installs kformer's MemoryTracker as a
// Kokkos tool, and with a tool listening Kokkos and kformer name kernels and regions (strings),
// which a simulation without a tool never pays for.
#define CATCH_CONFIG_RUNNER  // Catch2 2: this file provides main (Catch2 3 never does)
#include "support/catch.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/layers/encoder.hpp>
#include <kformer/layers/encodings/positional_encoding.hpp>
#include <kformer/layers/linear.hpp>
#include <kformer/losses/losses.hpp>
#include <kformer/models/sequential.hpp>
#include <kformer/optimizers/optimizers.hpp>

#include "support/test_support.hpp"

namespace {

std::atomic<bool> counting{false};
std::atomic<std::uint64_t> heap_allocations{0};

// Counts calls of the global operator new (every new and std::string, std::vector, ... in this
// process, Kokkos' included) between its construction and allocations().
class HeapAllocationCounter {
 public:
  HeapAllocationCounter() {
    heap_allocations = 0;
    counting = true;
  }
  ~HeapAllocationCounter() { counting = false; }
  HeapAllocationCounter(const HeapAllocationCounter&) = delete;
  HeapAllocationCounter& operator=(const HeapAllocationCounter&) = delete;
  std::uint64_t allocations() const { return heap_allocations.load(); }
};

}  // namespace

// The replaced global allocation functions (the array and nothrow forms call these). g++ takes
// free() in a replaced operator delete for a mismatch with the operator new it inlines.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t bytes) {
  if (counting.load(std::memory_order_relaxed))
    heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

using namespace kformer;
using namespace kformer::testing;

namespace {

std::atomic<std::uint64_t> kernel_launches{0};
void count_launch(const char*, std::uint32_t, std::uint64_t*) {
  ++kernel_launches;
}

// The kernels (parallel_for, _reduce, _scan) that run(), called once, launches.
template <class Run>
std::uint64_t count_launches(const Run& run) {
  namespace tools = Kokkos::Tools::Experimental;
  kernel_launches = 0;
  tools::set_begin_parallel_for_callback(count_launch);
  tools::set_begin_parallel_reduce_callback(count_launch);
  tools::set_begin_parallel_scan_callback(count_launch);
  run();
  tools::set_begin_parallel_for_callback(nullptr);
  tools::set_begin_parallel_reduce_callback(nullptr);
  tools::set_begin_parallel_scan_callback(nullptr);
  return kernel_launches.load();
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("An embedded surrogate's inference and training steps allocate no heap",
                        "[heap][allocations]", backends::EnabledSpaces) {
  using Space = TestType;
  using M = MemorySpaceOf<Space>;
  using Net = Sequential<float, Space, Linear<float, Space>, PositionalEncoding<float, Space>,
                         TransformerEncoder<float, Space>, Linear<float, Space>>;
  constexpr int kBatch = 4, kSeq = 6, kIn = 5, kWidth = 16;
  const Space exec;
  const EncoderLayerOptions encoder{kWidth, 4, 32, 0.1, Activation::GELU, NormType::LayerNorm,
                                    false,  3};
  Net net(exec, kIn, Linear<float, Space>(exec, kIn, kWidth, {true, 1}),
          PositionalEncoding<float, Space>(exec, kWidth),
          TransformerEncoder<float, Space>(exec, 2, encoder),
          Linear<float, Space>(exec, kWidth, kIn, {true, 2}));
  Optimizer<float, Space> adam(exec, net.parameters().size(), {});
  Losses<float, Space> losses;
  const auto x =
      device_from<float, Space>(random_values(kBatch * kSeq * kIn, 4), kBatch, kSeq, kIn);
  const auto target =
      device_from<float, Space>(random_values(kBatch * kSeq * kIn, 5), kBatch * kSeq, kIn);
  Tensor3<float, M> y("y", kBatch, kSeq, kIn), dy("dy", kBatch, kSeq, kIn);
  const Kokkos::View<double, M> loss("loss");

  const auto inference = [&]() { net.forward(exec, RunContext{false, 0, false}, x, y); };
  const auto training = [&](std::uint64_t step) {
    const RunContext ctx{true, step, true};
    net.zero_grad(exec);
    net.forward(exec, ctx, x, y);
    losses.mse(exec, Tensor2<const float, M>(y.data(), kBatch * kSeq, kIn), target,
               Tensor2<float, M>(dy.data(), kBatch * kSeq, kIn), loss);
    net.backward(exec, ctx, x, dy, Tensor3<float, M>());
    adam.step(exec, net.parameters().values(), net.parameters().grads(), 1e-3);
  };
  for (std::uint64_t step = 1; step <= 2; ++step) {  // warm-up: workspaces reach their size
    inference();
    training(step);
  }
  exec.fence();

  // Heap allocations of 3 inference and 3 training steps (host spaces run kernels to completion
  // before returning; the fences come after the count, as Kokkos 4 names a fence with a string).
  std::uint64_t inference_allocations = 0, training_allocations = 0;
  {
    const HeapAllocationCounter counter;
    for (int i = 0; i < 3; ++i)
      inference();
    inference_allocations = counter.allocations();
  }
  exec.fence();
  {
    const HeapAllocationCounter counter;
    for (std::uint64_t step = 3; step <= 5; ++step)
      training(step);
    training_allocations = counter.allocations();
  }
  exec.fence();
  INFO(Space::name() << ": " << inference_allocations << " heap allocations in 3 inference steps, "
                     << training_allocations << " in 3 training steps");
  // The same steps again, their kernel launches counted by a Kokkos Tools callback.
  const std::uint64_t inference_launches = count_launches([&]() {
    for (int i = 0; i < 3; ++i)
      inference();
  });
  const std::uint64_t training_launches = count_launches([&]() {
    for (std::uint64_t step = 6; step <= 8; ++step)
      training(step);
  });
  INFO(inference_launches << " and " << training_launches << " kernel launches");
  CHECK(inference_launches > 0);
  CHECK(training_launches > inference_launches);
  // What Kokkos' own launch path allocates per launch (and kformer may add nothing to):
  //   Kokkos 3: nothing.
  //   Kokkos 4 (4.5 measured): RangePolicy's constructor builds the message of its bound
  //     conversion check for both bounds, whatever they are (Kokkos_ExecPolicy.hpp): at most two
  //     allocations each.
  //   Kokkos 5: parallel_for/reduce copy the label into a std::string of their own
  //     (Kokkos_Parallel.hpp), on the heap when it is longer than the small-string buffer.
#if KOKKOS_VERSION >= 50000
  constexpr std::uint64_t kokkos_per_launch = 1;
#elif KOKKOS_VERSION >= 40000
  constexpr std::uint64_t kokkos_per_launch = 4;
#else
  constexpr std::uint64_t kokkos_per_launch = 0;
#endif
  CHECK(inference_allocations <= kokkos_per_launch * inference_launches);
  CHECK(training_allocations <= kokkos_per_launch * training_launches);

  // The counter counts: one std::string is one heap allocation here.
  {
    static std::string kept;  // escapes, so that the compiler cannot elide the allocation
    const HeapAllocationCounter counter;
    kept.assign(64, 'x');  // longer than the small-string buffer
    CHECK(counter.allocations() == 1);
  }
}

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Kokkos::ScopeGuard kokkos(argc, argv);
  return session.run();
}

// The replicas of data-parallel training and the few collectives they need, over MPI where the
// build has it (KFORMER_ENABLE_MPI) and as a group of one process otherwise.
//
// Each rank holds a replica of the model and trains on its own shard of every global batch; after
// each backward the replicas' gradients are summed with one all-reduce over the contiguous
// gradient buffer (the trainer scales each rank's loss gradient by its share of the global batch
// first, so that the sum is the global batch's mean gradient). kformer never calls MPI_Init when
// MPI is already initialised: an embedding simulation passes its own communicator.
//
// Collectives wait at most timeout_seconds (KFORMER_MPI_TIMEOUT, default 600): they run as
// non-blocking operations polled until done, and a rank that is still waiting after that (a peer
// died or hangs) prints why and aborts the job with MPI_Abort rather than hanging.
//
// Device buffers go to MPI directly when the MPI is GPU-aware (gpu_aware, KFORMER_MPI_GPU_AWARE=1),
// through a host copy otherwise.
#pragma once

#include <kformer/config.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"

#if KFORMER_ENABLE_MPI
#include <mpi.h>
#endif

namespace kformer::distributed {

// An error that every rank of a communicator raises at the same point, from facts the ranks have
// agreed on (require_same, a shard count, a setup step that failed somewhere): each rank prints
// its own message and ends normally, where any other error ends the job with MPI_Abort (which
// can kill the other ranks before they have said why).
class ErrorOnEveryRank : public Error {
 public:
  using Error::Error;
};

// Throws ErrorOnEveryRank("<where>: <parts...>"); call it only where every rank calls it.
template <class... Parts>
[[noreturn]] void fail_on_every_rank(const std::string& where, const Parts&... parts) {
  std::ostringstream os;
  os << where << ": ";
  (os << ... << parts);
  throw ErrorOnEveryRank(os.str());
}

class Communicator {
 public:
  // A group of one process (no MPI).
  Communicator() = default;

#if KFORMER_ENABLE_MPI
  // The ranks of `comm` (MPI must be initialised; the communicator is used, not duplicated or
  // freed). gpu_aware: device pointers may go to MPI directly.
  explicit Communicator(MPI_Comm comm, bool gpu_aware = gpu_aware_from_environment())
      : comm_(comm), gpu_aware_(gpu_aware), timeout_seconds_(timeout_from_environment()) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      fail("kformer::distributed::Communicator", "MPI is not initialised (MPI_Init first)");
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
  }
  MPI_Comm comm() const {
    return comm_;
  }
#endif

  int rank() const {
    return rank_;
  }
  int size() const {
    return size_;
  }
  bool is_root() const {
    return rank_ == 0;
  }
  bool gpu_aware() const {
    return gpu_aware_;
  }
  double timeout_seconds() const {
    return timeout_seconds_;
  }

  // Sums n values at data over the ranks, in place (every rank gets the sum), on the host.
  void sum(double* data, int n) const {
    collective(data, n, Op::Sum);
  }
  void sum(std::int64_t* data, int n) const {
    collective(data, n, Op::Sum);
  }
  void min(std::int64_t* data, int n) const {
    collective(data, n, Op::Min);
  }
  // The sum with the same bits on every rank (see sum_identical below).
  void sum_identical(double* data, int n) const {
    collective(data, n, Op::SumIdentical);
  }

  // The collectives on a buffer of n values of T in exec's memory space, in place, after exec's
  // work on it is done; through a host copy (staging, grown as needed) where the space is not
  // host-accessible and the MPI is not GPU-aware.
  //   sum:           every rank gets the sum over the ranks (MPI_Allreduce), whose last bits may
  //                  differ between ranks where the MPI sums in different orders on each;
  //   sum_identical: every rank gets the same bits of the sum (formed on rank 0, MPI_Reduce, and
  //                  broadcast), for what must stay identical on every replica (the gradients);
  //   broadcast:     every rank gets rank 0's values.
  template <class ExecutionSpace, class T>
  void sum(const ExecutionSpace& exec, T* data, std::int64_t n) {
    on_device(exec, data, n, Op::Sum);
  }
  template <class ExecutionSpace, class T>
  void sum_identical(const ExecutionSpace& exec, T* data, std::int64_t n) {
    on_device(exec, data, n, Op::SumIdentical);
  }
  template <class ExecutionSpace, class T>
  void broadcast(const ExecutionSpace& exec, T* data, std::int64_t n) {
    on_device(exec, data, n, Op::Broadcast);
  }
  // Rank 0's value of a host scalar.
  void broadcast(std::int64_t& value) const {
    collective(&value, 1, Op::Broadcast);
  }

  // Fails on every rank, naming `what` and the ranks' values, unless every rank passes the same
  // `value` (a model configuration, a feature count): checked before the first collective that
  // would otherwise mismatch or hang.
  void require_same(const std::string& what, std::int64_t value) const {
    std::int64_t bounds[2] = {value, -value};
    min(bounds, 2);
    if (bounds[0] != -bounds[1])
      fail_on_every_rank("kformer::distributed", "the ranks disagree on ", what, ": from ",
                         bounds[0], " to ", -bounds[1], " (rank ", rank_, " has ", value, ")");
  }
  void require_same(const std::string& what, const std::string& text) const {
    require_same(what + " (its hash)", static_cast<std::int64_t>(fnv1a(text) >> 1));
  }

  // Whether every rank passes true: each learns whether some rank failed (a rank that cannot
  // read its file), so that all of them stop with an error rather than wait for the one that left.
  bool all(bool ok) const {
    std::int64_t v = ok ? 1 : 0;
    min(&v, 1);
    return v == 1;
  }

  // Wall seconds spent in collectives so far (waiting for the others included): the share of a
  // training step that communication takes.
  double seconds_in_collectives() const {
    return seconds_;
  }

  // Ends every rank's process with `code` (MPI_Abort), after flushing this one's output.
  [[noreturn]] void abort_all(int code) const {
    std::fflush(stdout);
    std::fflush(stderr);
#if KFORMER_ENABLE_MPI
    MPI_Abort(comm_, code);
#endif
    std::exit(code);
  }

  void barrier() const {
    std::int64_t v = 0;
    sum(&v, 1);
  }

  // The part [first, last) of n items that this rank takes: contiguous shares that differ by at
  // most one item, the first ranks taking the larger ones.
  std::pair<std::int64_t, std::int64_t> share(std::int64_t n) const {
    const std::int64_t base = n / size_, extra = n % size_;
    const std::int64_t first = rank_ * base + std::min<std::int64_t>(rank_, extra);
    return {first, first + base + (rank_ < extra ? 1 : 0)};
  }

  static bool gpu_aware_from_environment() {
    const char* v = std::getenv("KFORMER_MPI_GPU_AWARE");
    return v != nullptr && std::string(v) == "1";
  }
  static double timeout_from_environment() {
    const char* v = std::getenv("KFORMER_MPI_TIMEOUT");
    if (v == nullptr) return 600.0;
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds > 0))
      fail("KFORMER_MPI_TIMEOUT", "expected a positive number of seconds, got '", v, "'");
    return seconds;
  }

 private:
  enum class Op { Sum, Min, SumIdentical, Broadcast };

  template <class ExecutionSpace, class T>
  void on_device(const ExecutionSpace& exec, T* data, std::int64_t n, Op op) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    if (size_ == 1 || n == 0) return;
    exec.fence();
    using memory_space = typename ExecutionSpace::memory_space;
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, memory_space>::accessible;
    if (host || gpu_aware_) {
      in_chunks(data, n, op);
      return;
    }
    auto& staging = staging_<T>();
    if (std::int64_t(staging.size()) < n) staging.resize(std::size_t(n));
    Kokkos::View<T*, memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>> device(data, n);
    Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> copy(
        staging.data(), n);
    Kokkos::deep_copy(exec, copy, device);
    exec.fence();
    in_chunks(staging.data(), n, op);
    Kokkos::deep_copy(exec, device, copy);
    exec.fence();
  }

  static std::uint64_t fnv1a(const std::string& text) {
    std::uint64_t h = 1469598103934665603ull;
    for (const unsigned char c : text)
      h = (h ^ c) * 1099511628211ull;
    return h;
  }

  template <class T>
  std::vector<T>& staging_() {
    if constexpr (std::is_same_v<T, float>)
      return staging_float_;
    else
      return staging_double_;
  }

  // MPI counts are ints: buffers beyond 2^31 values go in pieces.
  template <class T>
  void in_chunks(T* data, std::int64_t n, Op op) const {
    constexpr std::int64_t chunk = std::int64_t(1) << 30;
    for (std::int64_t first = 0; first < n; first += chunk)
      collective(data + first, static_cast<int>(std::min(chunk, n - first)), op);
  }

  template <class T>
  void collective([[maybe_unused]] T* data, [[maybe_unused]] int n, [[maybe_unused]] Op op) const {
#if KFORMER_ENABLE_MPI
    if (size_ == 1) return;
    const double start = MPI_Wtime();
    const MPI_Datatype type = std::is_same_v<T, float>    ? MPI_FLOAT
                              : std::is_same_v<T, double> ? MPI_DOUBLE
                                                          : MPI_INT64_T;
    MPI_Request request;
    switch (op) {
      case Op::Sum:
      case Op::Min:
        MPI_Iallreduce(MPI_IN_PLACE, data, n, type, op == Op::Sum ? MPI_SUM : MPI_MIN, comm_,
                       &request);
        wait(request);
        break;
      case Op::SumIdentical:
        MPI_Ireduce(rank_ == 0 ? MPI_IN_PLACE : data, data, n, type, MPI_SUM, 0, comm_, &request);
        wait(request);
        [[fallthrough]];
      case Op::Broadcast:
        MPI_Ibcast(data, n, type, 0, comm_, &request);
        wait(request);
        break;
    }
    seconds_ += MPI_Wtime() - start;
#endif
  }

#if KFORMER_ENABLE_MPI
  // Polls a request until it completes, or aborts the job after timeout_seconds_. The poll never
  // sleeps: MPI advances a large message's pipeline only inside MPI_Test, and sleeping 1 ms between
  // tests made a 0.7 MB gradient sum take 120 ms instead of 2 (perf/NOTES.md); blocking MPI calls
  // spin the same way.
  void wait(MPI_Request& request) const {
    const double start = MPI_Wtime();
    int done = 0;
    while (true) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (MPI_Wtime() - start > timeout_seconds_) {
        std::fprintf(stderr,
                     "kformer::distributed: rank %d waited %.0f s for the other ranks (a rank "
                     "died or hangs; KFORMER_MPI_TIMEOUT sets the limit): aborting the job\n",
                     rank_, timeout_seconds_);
        MPI_Abort(comm_, 3);
      }
      std::this_thread::yield();
    }
  }
  MPI_Comm comm_ = MPI_COMM_SELF;
#endif
  int rank_ = 0, size_ = 1;
  bool gpu_aware_ = false;
  double timeout_seconds_ = 600.0;
  mutable double seconds_ = 0;
  std::vector<float> staging_float_;
  std::vector<double> staging_double_;
};

}  // namespace kformer::distributed

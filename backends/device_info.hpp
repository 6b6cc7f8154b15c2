// What a run executes on: backend, device, threads, compiler and library versions. Printed by the
// programs and recorded with every benchmark result.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <Kokkos_Core.hpp>

#include "../core/compat.hpp"
#include "spaces.hpp"

namespace kformer::backends {

struct BackendInfo {
  std::string backend;       // "openmp"
  std::string device;        // "AMD EPYC (2 threads)", "NVIDIA H100 80GB HBM3"
  std::string memory_space;  // "HostSpace", "CudaSpace"
  int concurrency = 0;       // threads (host) or resident threads (device)
};

std::string host_cpu_model();
std::string compiler_description();          // "GCC 12.2.0"
std::string kokkos_version();                // "3.4.01"
std::string kokkos_options();                // "deprecated code 4, bounds checks"
std::string kokkos_kernels_description();    // "Kokkos Kernels 4.5.1, TPLs: BLAS"
std::string gpu_device_name(int device_id);  // empty when no GPU backend is compiled in

// The host BLAS as it describes itself: OpenBLAS's build and the kernels it chose for this CPU.
// Empty fields for a BLAS that does not say (another library, or none linked in).
struct HostBlasInfo {
  std::string library;  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Haswell MAX_THREADS=64"
  std::string kernels;  // "Haswell"
  // OpenBLAS runs AVX2 kernels (Haswell, Zen, SandyBridge) on a CPU with AVX-512 (F, CD, BW,
  // DQ, VL). The development machines' environment sets OPENBLAS_CORETYPE=Haswell; on their AMD
  // Zen 5 OpenBLAS 0.3.21 itself picks Cooperlake (AVX-512), whose 1024^3 sgemm ran at 311-362
  // GFLOP/s on 2 threads against 188-206 with Haswell's. A benchmark's fraction of the sgemm limit
  // depends on which it is.
  bool avx512_unused = false;
};
HostBlasInfo host_blas_info();

template <class ExecutionSpace>
BackendInfo backend_info(const ExecutionSpace& exec) {
  BackendInfo info;
  info.backend = space_name<ExecutionSpace>();
  info.memory_space = ExecutionSpace::memory_space::name();
  info.concurrency = compat::concurrency(exec);
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<ExecutionSpace, Kokkos::Cuda>) {
    info.device = gpu_device_name(exec.cuda_device());
    return info;
  }
#endif
#if defined(KOKKOS_ENABLE_HIP)
  if constexpr (std::is_same_v<ExecutionSpace, compat::HIP>) {
    info.device = gpu_device_name(exec.hip_device());
    return info;
  }
#endif
  info.device = host_cpu_model() + " (" + std::to_string(info.concurrency) + " threads)";
  return info;
}

// Bytes that can still be allocated: on the host the smaller of the kernel's MemAvailable and
// the cgroup's memory.max minus memory.current; on a GPU what cudaMemGetInfo / hipMemGetInfo
// report free on the current device. -1 when unknown (the check that uses it then passes).
std::int64_t host_available_bytes();
std::int64_t gpu_available_bytes();

template <class MemorySpace>
std::int64_t available_bytes() {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible)
    return host_available_bytes();
  else
    return gpu_available_bytes();
}

// "1.5 GiB", "12 MiB", "300 B".
std::string format_bytes(double bytes);

// One line per enabled backend, then Kokkos' own configuration report when verbose.
void print_backends(std::ostream& os, bool verbose = false);

}  // namespace kformer::backends

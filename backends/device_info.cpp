#include "device_info.hpp"

#include <fstream>
#include <sstream>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
#endif

namespace kformer::backends {

std::string host_cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        const auto start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? std::string("unknown CPU") : line.substr(start);
      }
    }
  }
  return "unknown CPU";
}

std::string compiler_description() {
  std::ostringstream os;
#if defined(__clang__)
  os << "Clang " << __clang_major__ << '.' << __clang_minor__ << '.' << __clang_patchlevel__;
#elif defined(__GNUC__)
  os << "GCC " << __GNUC__ << '.' << __GNUC_MINOR__ << '.' << __GNUC_PATCHLEVEL__;
#else
  os << "unknown compiler";
#endif
#if defined(__CUDACC_VER_MAJOR__)
  os << " + nvcc " << __CUDACC_VER_MAJOR__ << '.' << __CUDACC_VER_MINOR__;
#endif
  return os.str();
}

std::string kokkos_version() {
  std::ostringstream os;
  os << KOKKOS_VERSION / 10000 << '.' << (KOKKOS_VERSION / 100) % 100 << '.';
  os.width(2);
  os.fill('0');
  os << KOKKOS_VERSION % 100;
  return os.str();
}

std::string gpu_device_name([[maybe_unused]] int device_id) {
#if defined(KOKKOS_ENABLE_CUDA)
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device_id) == cudaSuccess) return prop.name;
#elif defined(KOKKOS_ENABLE_HIP)
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, device_id) == hipSuccess) return prop.name;
#endif
  return {};
}

void print_backends(std::ostream& os, bool verbose) {
  os << "kformer on Kokkos " << kokkos_version() << ", " << compiler_description() << '\n';
  for_each_space([&](auto space) {
    const BackendInfo info = backend_info(space);
    os << "  " << info.backend << ": " << info.device << ", memory " << info.memory_space << '\n';
  });
  os << "  default: " << space_name<Kokkos::DefaultExecutionSpace>() << '\n';
  if (verbose) Kokkos::print_configuration(os, true);
}

}  // namespace kformer::backends

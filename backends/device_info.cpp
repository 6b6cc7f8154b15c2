#include "device_info.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#if KFORMER_ENABLE_MPI
#include <mpi.h>
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
#endif

// OpenBLAS's self-description, where OpenBLAS is linked in (weak: null otherwise).
#if defined(__GNUC__)
extern "C" char* openblas_get_config(void) __attribute__((weak));
extern "C" char* openblas_get_corename(void) __attribute__((weak));
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

HostBlasInfo host_blas_info() {
  HostBlasInfo info;
#if defined(__GNUC__)
  if (openblas_get_config == nullptr || openblas_get_corename == nullptr) return info;
  info.library = openblas_get_config();
  info.kernels = openblas_get_corename();
#if defined(__x86_64__) && !defined(__CUDACC__)  // nvcc's front end may not know the builtin
  std::string core = info.kernels;
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool avx2_kernels = core == "haswell" || core == "zen" || core == "sandybridge";
  info.avx512_unused = avx2_kernels && __builtin_cpu_supports("avx512f") &&
                       __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
#endif
  return info;
}

namespace {

// The first number in a file, or -1 (missing file, "max").
std::int64_t read_number(const std::string& path, const std::string& key = {}) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!key.empty() && line.rfind(key, 0) != 0) continue;
    std::istringstream fields(key.empty() ? line : line.substr(key.size()));
    std::int64_t value = -1;
    if (fields >> value) return value;
    return -1;
  }
  return -1;
}

}  // namespace

std::int64_t host_available_bytes() {
  const std::int64_t available_kib = read_number("/proc/meminfo", "MemAvailable:");
  std::int64_t available = available_kib < 0 ? -1 : available_kib * 1024;
  const std::int64_t limit = read_number("/sys/fs/cgroup/memory.max");
  const std::int64_t used = read_number("/sys/fs/cgroup/memory.current");
  if (limit >= 0 && used >= 0) {
    const std::int64_t room = limit > used ? limit - used : 0;
    available = available < 0 ? room : std::min(available, room);
  }
  return available;
}

std::int64_t gpu_available_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
#if defined(KOKKOS_ENABLE_CUDA)
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    return static_cast<std::int64_t>(free_bytes);
#elif defined(KOKKOS_ENABLE_HIP)
  if (hipMemGetInfo(&free_bytes, &total_bytes) == hipSuccess)
    return static_cast<std::int64_t>(free_bytes);
#endif
  (void)free_bytes;
  (void)total_bytes;
  return -1;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 6) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

std::string kokkos_kernels_description() {
#if KFORMER_ENABLE_KOKKOS_KERNELS
  std::ostringstream os;
  os << "Kokkos Kernels " << KFORMER_KOKKOSKERNELS_VERSION_STRING << ", TPLs:";
  int tpls = 0;
  const auto tpl = [&](const char* name) {
    os << ' ' << name;
    ++tpls;
  };
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  tpl("BLAS");
#endif
#if defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
  tpl("cuBLAS");
#endif
#if defined(KOKKOSKERNELS_ENABLE_TPL_ROCBLAS)
  tpl("rocBLAS");
#endif
  if (tpls == 0) os << " none (its own GEMM kernels)";
  return os.str();
#else
  return "no Kokkos Kernels (GEMMs by kformer's Kokkos-native kernel)";
#endif
}

std::string kokkos_options() {
  std::string options;
  [[maybe_unused]] const auto add = [&](const char* name) {
    options += options.empty() ? name : std::string(", ") + name;
  };
#if defined(KOKKOS_ENABLE_DEPRECATED_CODE_3)
  add("deprecated code 3");
#endif
#if defined(KOKKOS_ENABLE_DEPRECATED_CODE_4)
  add("deprecated code 4");
#endif
#if defined(KOKKOS_ENABLE_DEPRECATED_CODE_5)
  add("deprecated code 5");
#endif
#if defined(KOKKOS_ENABLE_DEBUG)
  add("debug");
#endif
#if defined(KOKKOS_ENABLE_DEBUG_BOUNDS_CHECK)
  add("bounds checks");
#endif
#if defined(KOKKOS_ENABLE_CUDA_LAMBDA) || (defined(KOKKOS_ENABLE_CUDA) && KOKKOS_VERSION >= 40000)
  add("CUDA lambdas");
#endif
#if defined(KOKKOS_ENABLE_CUDA_RELOCATABLE_DEVICE_CODE)
  add("CUDA relocatable device code");
#endif
  return options.empty() ? "none of note" : options;
}

void print_backends(std::ostream& os, bool verbose) {
  os << "kformer " << KFORMER_VERSION_STRING << " (C++" << KFORMER_CXX_STANDARD << ", "
     << compiler_description() << ") on Kokkos " << kokkos_version() << '\n';
  os << "  Kokkos options: " << kokkos_options() << '\n';
  os << "  " << kokkos_kernels_description() << '\n';
  os << "  double precision in the program and benchmarks: "
     << (KFORMER_ENABLE_DOUBLE ? "on" : "off (KFORMER_ENABLE_DOUBLE)") << '\n';
#if KFORMER_ENABLE_MPI
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi, &length);  // allowed before MPI_Init
  const std::string library(mpi, static_cast<std::size_t>(length));
  os << "  MPI: " << library.substr(0, library.find_first_of(",\n"))
     << " (data-parallel training under mpirun)\n";
#else
  os << "  MPI: off (KFORMER_ENABLE_MPI)\n";
#endif
  for_each_space([&](auto space) {
    const BackendInfo info = backend_info(space);
    os << "  " << info.backend << ": " << info.device << ", memory " << info.memory_space << '\n';
  });
  os << "  default: " << space_name<Kokkos::DefaultExecutionSpace>() << '\n';
  const HostBlasInfo blas = host_blas_info();
  if (!blas.library.empty()) os << "  host BLAS: " << blas.library << '\n';
  if (blas.avx512_unused) {
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    os << "  note: this CPU has AVX-512 but OpenBLAS runs its " << blas.kernels
       << " (AVX2) kernels ("
       << (forced != nullptr ? std::string("OPENBLAS_CORETYPE=") + forced + " in the environment"
                             : std::string("its own choice; OPENBLAS_CORETYPE=SkylakeX changes it"))
       << "): BLAS GEMMs and the sgemm limit are AVX2's\n";
  }
  if (verbose) Kokkos::print_configuration(os, true);
}

}  // namespace kformer::backends

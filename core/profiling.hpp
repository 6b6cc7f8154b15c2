// Named regions for Kokkos Tools (and kformer-bench's --profile): every layer's forward and
// backward opens one, so a profiler shows the time per layer, and kernels carry their own labels
// ("kformer::attention::softmax_fwd").
#pragma once

#include <string>

#include <Kokkos_Core.hpp>

namespace kformer {

// Pushes a profiling region for the lifetime of the object (Kokkos::Profiling::ScopedRegion only
// exists from Kokkos 4.x).
class ProfilingRegion {
 public:
  explicit ProfilingRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ProfilingRegion() { Kokkos::Profiling::popRegion(); }
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;
};

}  // namespace kformer

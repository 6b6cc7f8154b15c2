// Named regions for Kokkos Tools (and kformer-bench's --profile): every layer's forward and
// backward opens one, so a profiler shows the time per layer, and kernels carry their own labels
// ("kformer::attention::softmax_fwd").
#pragma once

#include <string>

#include <Kokkos_Core.hpp>

#include "error.hpp"

// A kernel's label as Kokkos takes it (const std::string&), made once per call site: a string
// literal there builds a std::string at every launch, on the heap since kformer's labels are longer
// than the small-string buffer. Helpers that launch kernels take the label as const std::string&.
#define KFORMER_LABEL(text)                              \
  ([]() -> const std::string& {                          \
    static const std::string kformer_kernel_label{text}; \
    return kformer_kernel_label;                         \
  }())

namespace kformer {

// Pushes a profiling region for the lifetime of the object (Kokkos::Profiling::ScopedRegion only
// exists from Kokkos 4.x). The region's name is built only while a tool listens (a loaded library
// or a callback set in the program), so that a layer call allocates nothing for it otherwise.
class ProfilingRegion {
 public:
  explicit ProfilingRegion(const Where& where) : pushed_(Kokkos::Tools::profileLibraryLoaded()) {
    if (pushed_) Kokkos::Profiling::pushRegion(where.str());
  }
  ~ProfilingRegion() {
    if (pushed_) Kokkos::Profiling::popRegion();
  }
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;

 private:
  bool pushed_;
};

}  // namespace kformer

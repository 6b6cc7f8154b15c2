// The names of the norm kinds (the registry's half that configs and the command line read; the
// classes are in norm.hpp's NormVariant, in the same order). No Kokkos here.
#pragma once

#include <array>
#include <string>

namespace kformer {

enum class NormType { BatchNorm, LayerNorm, RMSNorm };

struct NormKind {
  NormType type;
  const char* name;          // in configs and on the command line
  const char* pytorch_name;  // the PyTorch class, accepted as a name too
};
inline constexpr std::array<NormKind, 3> kNormKinds = {{
    {NormType::BatchNorm, "batchnorm", "BatchNorm"},
    {NormType::LayerNorm, "layernorm", "LayerNorm"},
    {NormType::RMSNorm, "rmsnorm", "RMSNorm"},
}};

// "batchnorm, layernorm, rmsnorm": the names a config may use.
inline std::string norm_names() {
  std::string names;
  for (const auto& kind : kNormKinds)
    names += (names.empty() ? "" : ", ") + std::string(kind.name);
  return names;
}

}  // namespace kformer

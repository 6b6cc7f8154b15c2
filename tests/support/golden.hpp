// Golden values written by the scripts in tests/golden/: safetensors files whose tensors the tests
// read as doubles, with each case's hyper-parameters as JSON strings in the metadata.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kformer/core/error.hpp>
#include <kformer/core/safetensors.hpp>

namespace kformer::testing {

struct GoldenTensor {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

class Golden {
 public:
  explicit Golden(const std::string& path) {
    const auto file = safetensors::File::read(path);
    for (const auto& info : file.tensors()) tensors_[info.name] = {info.shape, file.to_double(info.name)};
    for (const auto& [key, value] : file.metadata()) metadata_[key] = nlohmann::json::parse(value);
  }

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const GoldenTensor& tensor(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) fail("kformer::testing::Golden", "no tensor named ", name);
    return it->second;
  }
  const nlohmann::json& hyper(const std::string& name) const { return metadata_.at(name); }

 private:
  std::map<std::string, GoldenTensor> tensors_;
  std::map<std::string, nlohmann::json> metadata_;
};

}  // namespace kformer::testing

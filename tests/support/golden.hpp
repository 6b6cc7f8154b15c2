// Golden values written by the scripts in tests/golden/ (safetensors files of float32 tensors,
// with each case's hyper-parameters as JSON in the metadata).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <kformer/core/error.hpp>

namespace kformer::testing {

struct GoldenTensor {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

class Golden {
 public:
  explicit Golden(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("kformer::testing::Golden", "cannot open ", path);
    std::uint64_t header_size = 0;
    in.read(reinterpret_cast<char*>(&header_size), 8);
    std::string header(header_size, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header_size));
    const auto json = nlohmann::json::parse(header);
    std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const auto& [name, entry] : json.items()) {
      if (name == "__metadata__") {
        for (const auto& [key, value] : entry.items())
          metadata_[key] = nlohmann::json::parse(value.get<std::string>());
        continue;
      }
      if (entry.at("dtype") != "F32") fail("kformer::testing::Golden", name, " is not F32");
      GoldenTensor t;
      t.shape = entry.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
      const std::size_t n = (offsets[1] - offsets[0]) / sizeof(float);
      if (offsets[1] > data.size())
        fail("kformer::testing::Golden", name, " lies past the end of ", path);
      t.values.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, data.data() + offsets[0] + i * sizeof(float), sizeof(float));
        t.values[i] = v;
      }
      tensors_.emplace(name, std::move(t));
    }
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

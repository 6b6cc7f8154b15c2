// Fuzz target: the JSON form of a TST model's hyper-parameters (models/tst_config.cpp), the
// "model" object of every checkpoint's config.json. Bad input must be refused with a
// kformer::Error; a config that parses holds every number and boolean of the input as it was (not
// truncated or wrapped), and to_json of it must read back the same.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include <kformer/core/error.hpp>
#include <kformer/models/tst_config.hpp>

#include "fuzz_support.hpp"

namespace {
constexpr const char* target = "fuzz_config";
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kformer::TstConfig config;
  try {
    config = kformer::tst_config_from_json(text, "fuzz.json");
  } catch (const kformer::Error&) {
    return 0;
  }
  const std::string json = kformer::to_json(config);
  const auto input = nlohmann::json::parse(text);
  const auto output = nlohmann::json::parse(json);
  for (const auto& item : input.items()) {
    const nlohmann::json& value = item.value();
    if ((value.is_number() || value.is_boolean()) && output.at(item.key()) != value)
      kformer::fuzz::finding(target, "key '" + item.key() + "' was " + value.dump() +
                                         " in the input and is " + output.at(item.key()).dump() +
                                         " in the config");
  }
  try {
    const kformer::TstConfig again = kformer::tst_config_from_json(json, "written.json");
    if (kformer::to_json(again) != json)
      kformer::fuzz::finding(target, "to_json then tst_config_from_json changed the config:\n" +
                                         json + "\n" + kformer::to_json(again));
  } catch (const kformer::Error& e) {
    kformer::fuzz::finding(
        target,
        std::string("to_json wrote what tst_config_from_json refuses: ") + e.what() + "\n" + json);
  }
  return 0;
}

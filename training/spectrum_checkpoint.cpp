#include "spectrum_checkpoint.hpp"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "../core/json_integer.hpp"

namespace kformer {

std::string spectrum_checkpoint_path(const std::string& directory) {
  return directory + "/model.safetensors";
}

namespace {

nlohmann::json model_json(const SpectrumTransformerOptions& m) {
  return {{"d_model", m.d_model},
          {"heads", m.heads},
          {"layers", m.layers},
          {"dim_feedforward", m.dim_feedforward},
          {"outputs", m.outputs},
          {"positional_encoding", to_string(m.positional_encoding)},
          {"max_tokens", m.max_tokens},
          {"intensity_encoding", m.intensity_encoding},
          {"intensity_scale", m.intensity_scale},
          {"mz_min_wavelength", m.mz_min_wavelength},
          {"mz_max_wavelength", m.mz_max_wavelength},
          {"seed", m.seed}};
}

}  // namespace

std::string to_json(const SpectrumTransformerOptions& options) {
  return model_json(options).dump();
}

std::string to_json(const SpectrumCheckpointInfo& info) {
  const data::SpectrumPreprocessing& p = info.preprocessing;
  const nlohmann::json j = {{"model", model_json(info.model)},
                            {"preprocessing",
                             {{"normalize", p.normalize},
                              {"min_relative_intensity", p.min_relative_intensity},
                              {"merge_tolerance", p.merge_tolerance},
                              {"top_k", p.top_k},
                              {"precursor_token", p.precursor_token}}},
                            {"bits", info.bits},
                            {"classes", info.classes},
                            {"epochs", info.epochs},
                            {"variant", info.variant}};
  return j.dump(2);
}

namespace {

const char* const kWhere = "kformer::spectrum_checkpoint_info";

// The object j[key] (a copy: small), whose keys must all be in `known`.
nlohmann::json object_at(const nlohmann::json& j, const char* key,
                         const std::set<std::string>& known, const std::string& source) {
  if (!j.contains(key) || !j.at(key).is_object())
    fail(kWhere, source, ": expected an object '", key, "'");
  const nlohmann::json& o = j.at(key);
  for (const auto& item : o.items())
    if (!known.count(item.key()))
      fail(kWhere, source, ": unknown key '", key, ".", item.key(), "'");
  for (const auto& k : known)
    if (!o.contains(k)) fail(kWhere, source, ": missing key '", key, ".", k, "'");
  return o;
}

int integer_at(const nlohmann::json& o, const std::string& key, int min,
               const std::string& source) {
  const int v = get_integer<int>(o.at(key), kWhere, source, key);
  if (v < min) fail(kWhere, source, ": '", key, "' must be at least ", min, ", got ", v);
  return v;
}

bool bool_at(const nlohmann::json& o, const std::string& key, const std::string& source) {
  if (!o.at(key).is_boolean())
    fail(kWhere, source, ": '", key, "' must be true or false, got ", o.at(key).dump());
  return o.at(key).get<bool>();
}

double number_at(const nlohmann::json& o, const std::string& key, const std::string& source) {
  const double v = get_number(o.at(key), kWhere, source, key);
  if (!std::isfinite(v) || v < 0)
    fail(kWhere, source, ": '", key, "' must be a finite number of at least 0, got ", v);
  return v;
}

}  // namespace

SpectrumCheckpointInfo spectrum_checkpoint_info_from_json(const std::string& text,
                                                          const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(kWhere, source, ": the metadata 'spectra' is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(kWhere, source, ": the metadata 'spectra' must be a JSON object");
  for (const auto& item : j.items())
    if (!std::set<std::string>{"model", "preprocessing", "bits", "classes", "epochs", "variant"}
             .count(item.key()))
      fail(kWhere, source, ": unknown key '", item.key(), "'");
  SpectrumCheckpointInfo info;
  const nlohmann::json m =
      object_at(j, "model",
                {"d_model", "heads", "layers", "dim_feedforward", "outputs", "positional_encoding",
                 "max_tokens", "intensity_encoding", "intensity_scale", "mz_min_wavelength",
                 "mz_max_wavelength", "seed"},
                source);
  info.model.d_model = integer_at(m, "d_model", 2, source);
  info.model.heads = integer_at(m, "heads", 1, source);
  info.model.layers = integer_at(m, "layers", 1, source);
  info.model.dim_feedforward = integer_at(m, "dim_feedforward", 1, source);
  info.model.outputs = integer_at(m, "outputs", 1, source);
  info.model.max_tokens = integer_at(m, "max_tokens", 1, source);
  if (!m.at("positional_encoding").is_string())
    fail(kWhere, source, ": 'positional_encoding' must be a string");
  try {
    info.model.positional_encoding = parse_pos_encoding(m.at("positional_encoding"));
  } catch (const Error& e) {
    fail(kWhere, source, ": ", e.what());
  }
  info.model.intensity_encoding = bool_at(m, "intensity_encoding", source);
  info.model.intensity_scale = number_at(m, "intensity_scale", source);
  info.model.mz_min_wavelength = number_at(m, "mz_min_wavelength", source);
  info.model.mz_max_wavelength = number_at(m, "mz_max_wavelength", source);
  info.model.seed = get_integer<std::uint64_t>(m.at("seed"), kWhere, source, "seed");
  const nlohmann::json p = object_at(
      j, "preprocessing",
      {"normalize", "min_relative_intensity", "merge_tolerance", "top_k", "precursor_token"},
      source);
  info.preprocessing.normalize = bool_at(p, "normalize", source);
  info.preprocessing.min_relative_intensity = number_at(p, "min_relative_intensity", source);
  info.preprocessing.merge_tolerance = number_at(p, "merge_tolerance", source);
  info.preprocessing.top_k = integer_at(p, "top_k", 0, source);
  info.preprocessing.precursor_token = bool_at(p, "precursor_token", source);
  for (const char* key : {"bits", "classes", "epochs"})
    if (!j.contains(key)) fail(kWhere, source, ": missing key '", key, "'");
  info.bits = integer_at(j, "bits", 0, source);
  info.classes = integer_at(j, "classes", 0, source);
  info.epochs = integer_at(j, "epochs", 0, source);
  if (j.contains("variant")) {
    if (!j.at("variant").is_string()) fail(kWhere, source, ": 'variant' must be a string");
    info.variant = j.at("variant").get<std::string>();
  }
  if (info.bits + info.classes != info.model.outputs)
    fail(kWhere, source, ": ", info.bits, " bits and ", info.classes, " classes for ",
         info.model.outputs, " outputs");
  if (info.model.d_model % info.model.heads != 0)
    fail(kWhere, source, ": d_model ", info.model.d_model, " is not a multiple of heads ",
         info.model.heads);
  return info;
}

SpectrumCheckpointInfo spectrum_checkpoint_info(const safetensors::File& file) {
  const auto& metadata = file.metadata();
  const auto format = metadata.find("format");
  if (format == metadata.end() || format->second != kSpectrumCheckpointFormat)
    fail(kWhere, file.source(), ": format '",
         format == metadata.end() ? std::string("(none)") : format->second,
         "' is not a spectrum model's (\"", kSpectrumCheckpointFormat, "\")");
  const auto spectra = metadata.find("spectra");
  if (spectra == metadata.end())
    fail(kWhere, file.source(), ": no 'spectra' metadata (the model's options)");
  return spectrum_checkpoint_info_from_json(spectra->second, file.source());
}

SpectrumCheckpointInfo read_spectrum_checkpoint_info(const std::string& directory) {
  return spectrum_checkpoint_info(safetensors::File::read(spectrum_checkpoint_path(directory)));
}

}  // namespace kformer

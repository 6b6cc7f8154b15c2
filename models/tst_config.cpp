#include "tst_config.hpp"

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../core/json_integer.hpp"

namespace kformer {

void TstConfig::validate(const std::string& where) const {
  if (feat_dim < 1) fail(where, "feat_dim must be at least 1, got ", feat_dim);
  if (max_len < 1) fail(where, "max_len must be at least 1, got ", max_len);
  if (d_model < 1 || n_heads < 1 || d_model % n_heads != 0)
    fail(where, "n_heads (", n_heads, ") must divide d_model (", d_model, ")");
  if (num_layers < 1) fail(where, "num_layers must be at least 1, got ", num_layers);
  if (dim_feedforward < 1) fail(where, "dim_feedforward must be at least 1, got ", dim_feedforward);
  if (!(dropout >= 0.0 && dropout < 1.0)) fail(where, "dropout must be in [0, 1), got ", dropout);
  if (task != TstTask::Imputation && num_outputs < 1)
    fail(where, "num_outputs must be at least 1 for ", to_string(task), ", got ", num_outputs);
  if (task == TstTask::Classification && num_outputs < 2)
    fail(where, "classification needs at least 2 classes, got ", num_outputs);
  if (projection == ProjectionKind::Conv1d && (conv.kernel_size < 1 || conv.dilation < 1))
    fail(where, "conv kernel_size and dilation must be at least 1, got ", conv.kernel_size, " and ",
         conv.dilation);
}

std::string to_string(TstTask t) {
  return t == TstTask::Imputation       ? "imputation"
         : t == TstTask::Classification ? "classification"
                                        : "regression";
}
std::string to_string(PositionalEncodingKind p) {
  return p == PositionalEncodingKind::Fixed       ? "fixed"
         : p == PositionalEncodingKind::Learnable ? "learnable"
                                                  : "none";
}
std::string to_string(ProjectionKind p) {
  return p == ProjectionKind::Linear ? "linear" : "conv1d";
}

TstTask parse_task(const std::string& s) {
  if (s == "imputation") return TstTask::Imputation;
  if (s == "classification") return TstTask::Classification;
  if (s == "regression") return TstTask::Regression;
  fail("kformer::parse_task", "unknown task '", s,
       "' (expected imputation, classification or regression)");
}
PositionalEncodingKind parse_pos_encoding(const std::string& s) {
  if (s == "fixed") return PositionalEncodingKind::Fixed;
  if (s == "learnable") return PositionalEncodingKind::Learnable;
  if (s == "none") return PositionalEncodingKind::None;
  fail("kformer::parse_pos_encoding", "unknown positional encoding '", s,
       "' (expected fixed, learnable or none)");
}
ProjectionKind parse_projection(const std::string& s) {
  if (s == "linear") return ProjectionKind::Linear;
  if (s == "conv1d") return ProjectionKind::Conv1d;
  fail("kformer::parse_projection", "unknown projection '", s, "' (expected linear or conv1d)");
}

std::string to_json(const TstConfig& c) {
  const nlohmann::json j = {{"feat_dim", c.feat_dim},
                            {"max_len", c.max_len},
                            {"d_model", c.d_model},
                            {"n_heads", c.n_heads},
                            {"num_layers", c.num_layers},
                            {"dim_feedforward", c.dim_feedforward},
                            {"dropout", c.dropout},
                            {"activation", activation_name(c.activation)},
                            {"normalization_layer", norm_name(c.norm)},
                            {"norm_first", c.norm_first},
                            {"pos_encoding", to_string(c.pos_encoding)},
                            {"projection", to_string(c.projection)},
                            {"conv_kernel_size", c.conv.kernel_size},
                            {"conv_dilation", c.conv.dilation},
                            {"task", to_string(c.task)},
                            {"num_outputs", c.num_outputs},
                            {"seed", c.seed}};
  return j.dump(2);
}

TstConfig tst_config_from_json(const std::string& text, const std::string& source) {
  const std::string where = "kformer::tst_config_from_json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(where, source, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(where, source, ": expected a JSON object");
  TstConfig c;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    const auto get_int = [&] { return get_integer<int>(value, where, source, key); };
    try {
      if (key == "feat_dim")
        c.feat_dim = get_int();
      else if (key == "max_len")
        c.max_len = get_int();
      else if (key == "d_model")
        c.d_model = get_int();
      else if (key == "n_heads")
        c.n_heads = get_int();
      else if (key == "num_layers")
        c.num_layers = get_int();
      else if (key == "dim_feedforward")
        c.dim_feedforward = get_int();
      else if (key == "dropout")
        c.dropout = get_number(value, where, source, key);
      else if (key == "activation")
        c.activation = parse_activation(value.get<std::string>());
      else if (key == "normalization_layer")
        c.norm = parse_norm(value.get<std::string>());
      else if (key == "norm_first")
        c.norm_first = value.get<bool>();
      else if (key == "pos_encoding")
        c.pos_encoding = parse_pos_encoding(value.get<std::string>());
      else if (key == "projection")
        c.projection = parse_projection(value.get<std::string>());
      else if (key == "conv_kernel_size")
        c.conv.kernel_size = get_int();
      else if (key == "conv_dilation")
        c.conv.dilation = get_int();
      else if (key == "task")
        c.task = parse_task(value.get<std::string>());
      else if (key == "num_outputs")
        c.num_outputs = get_int();
      else if (key == "seed")
        c.seed = get_integer<std::uint64_t>(value, where, source, key);
      else
        fail(where, source, ": unknown key '", key, "'");
    } catch (const nlohmann::json::exception& e) {
      fail(where, source, ": key '", key, "' has the wrong type (", value.type_name(),
           "): ", e.what());
    }
  }
  c.validate(where + ": " + source);
  return c;
}

}  // namespace kformer

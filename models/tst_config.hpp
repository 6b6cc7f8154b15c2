// Hyper-parameters of a TST model, with the reference implementation's defaults, and their JSON
// form (the config file stored beside every checkpoint).
#pragma once

#include <cstdint>
#include <string>

#include "../layers/activation.hpp"
#include "../layers/conv1d.hpp"
#include "../layers/norm.hpp"

namespace kformer {

enum class TstTask { Imputation, Classification, Regression };
enum class PositionalEncodingKind { Fixed, Learnable, None };
enum class ProjectionKind { Linear, Conv1d };

struct TstConfig {
  int feat_dim = 1;   // input features per step
  int max_len = 128;  // padded series length (and the learnable encoding's table size)
  int d_model = 64;
  int n_heads = 8;
  int num_layers = 3;
  int dim_feedforward = 256;
  double dropout = 0.1;
  Activation activation = Activation::GELU;
  NormType norm = NormType::BatchNorm;
  bool norm_first = false;
  PositionalEncodingKind pos_encoding = PositionalEncodingKind::Fixed;
  ProjectionKind projection = ProjectionKind::Linear;
  Conv1dOptions conv;  // kernel size and dilation of a Conv1d projection ("same" padding)
  TstTask task = TstTask::Imputation;
  int num_outputs = 0;  // classes (classification) or targets (regression)
  std::uint64_t seed = 0;

  // feat_dim for imputation, num_outputs otherwise.
  int output_size() const { return task == TstTask::Imputation ? feat_dim : num_outputs; }
  // Throws kformer::Error (prefixed with `where`) naming the first inconsistent setting.
  void validate(const std::string& where) const;
};

std::string to_string(TstTask);
std::string to_string(PositionalEncodingKind);
std::string to_string(ProjectionKind);
TstTask parse_task(const std::string&);
PositionalEncodingKind parse_pos_encoding(const std::string&);
ProjectionKind parse_projection(const std::string&);

// {"feat_dim": 8, "max_len": 96, ..., "task": "classification", ...}
std::string to_json(const TstConfig& config);
// The inverse of to_json; unknown keys and wrong types are errors naming the key.
TstConfig tst_config_from_json(const std::string& json, const std::string& source = "<config>");

}  // namespace kformer

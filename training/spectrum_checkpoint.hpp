// Checkpoints of the spectrum transformer: a directory holding model.safetensors, one file
// written to a temporary name and renamed into place (a run killed at any moment leaves the
// previous checkpoint or the new one, whole). It holds the weights by state_dict name (input.*,
// pos_enc.pe when learnable, encoder.*, output.*) and, in its metadata "spectra", what inference
// needs besides them: the model's options, the peak preprocessing the model was trained with (a
// prediction must tokenize a spectrum the same way), and how the outputs split into fingerprint
// bits and classes.
#pragma once

#include <string>

#include <Kokkos_Core.hpp>

#include "../core/safetensors.hpp"
#include "../data/spectra_format.hpp"
#include "../models/spectrum_transformer.hpp"
#include "state_dict.hpp"

namespace kformer {

inline constexpr const char* kSpectrumCheckpointFormat = "kformer-spectra/1";

struct SpectrumCheckpointInfo {
  SpectrumTransformerOptions model;  // model.outputs = bits + classes
  data::SpectrumPreprocessing preprocessing;
  int bits = 0;         // the first `bits` outputs: fingerprint logits
  int classes = 0;      // the last `classes` outputs: class logits
  int epochs = 0;       // epochs trained
  std::string variant;  // which ablation variant (kformer spectra), or empty
};

// The "spectra" metadata's JSON, and its inverse: unknown keys, wrong types and values out of
// range are errors naming the key and `source`.
std::string to_json(const SpectrumCheckpointInfo& info);
std::string to_json(const SpectrumTransformerOptions& options);  // one line
SpectrumCheckpointInfo spectrum_checkpoint_info_from_json(const std::string& json,
                                                          const std::string& source);
// The info of a checkpoint file already read; refuses other formats (a TST checkpoint among
// them) naming the file and the format found.
SpectrumCheckpointInfo spectrum_checkpoint_info(const safetensors::File& file);
// The info of the checkpoint in `directory`.
SpectrumCheckpointInfo read_spectrum_checkpoint_info(const std::string& directory);
std::string spectrum_checkpoint_path(const std::string& directory);

// Saves the model with `info` (whose model options are replaced by the model's own) into
// `directory`, created if missing.
template <class T, class ExecutionSpace>
void save_spectrum_checkpoint(const ExecutionSpace& exec, const std::string& directory,
                              SpectrumTransformer<T, ExecutionSpace>& model,
                              SpectrumCheckpointInfo info);

// Loads the weights of the checkpoint in `directory` into `model` (strictly: every key present,
// none unexpected, shapes equal), after checking that the model has the checkpoint's options;
// returns the checkpoint's info. Nothing is written into the model unless everything checks.
template <class T, class ExecutionSpace>
SpectrumCheckpointInfo load_spectrum_checkpoint(const ExecutionSpace& exec,
                                                const std::string& directory,
                                                SpectrumTransformer<T, ExecutionSpace>& model);

// --- implementation ------------------------------------------------------------------------

void make_directories(const std::string& directory);  // training/checkpoint.cpp

template <class T, class ExecutionSpace>
void save_spectrum_checkpoint(const ExecutionSpace& exec, const std::string& directory,
                              SpectrumTransformer<T, ExecutionSpace>& model,
                              SpectrumCheckpointInfo info) {
  info.model = model.options();
  if (info.bits + info.classes != info.model.outputs)
    fail("kformer::save_spectrum_checkpoint", info.bits, " bits and ", info.classes,
         " classes for a model of ", info.model.outputs, " outputs");
  make_directories(directory);
  safetensors::Writer writer;
  add_state_dict(exec, writer, model);
  writer.set_metadata("format", kSpectrumCheckpointFormat);
  writer.set_metadata("spectra", to_json(info));
  writer.write(spectrum_checkpoint_path(directory));
}

template <class T, class ExecutionSpace>
SpectrumCheckpointInfo load_spectrum_checkpoint(const ExecutionSpace& exec,
                                                const std::string& directory,
                                                SpectrumTransformer<T, ExecutionSpace>& model) {
  const auto file = safetensors::File::read(spectrum_checkpoint_path(directory));
  SpectrumCheckpointInfo info = spectrum_checkpoint_info(file);
  // The same options but the seed (which only drew the initial weights).
  SpectrumCheckpointInfo mine = info;
  mine.model = model.options();
  mine.model.seed = info.model.seed;
  if (to_json(mine) != to_json(info))
    fail("kformer::load_spectrum_checkpoint", directory,
         ": the model's options differ from the checkpoint's (", to_json(mine.model), " against ",
         to_json(info.model),
         "); build the model from read_spectrum_checkpoint_info(directory).model");
  load_state_dict(exec, model, file);
  return info;
}

}  // namespace kformer

// kformer spectra: MS/MS spectra end to end. Reads spectra from MSP or MGF files (or generates a
// synthetic set and writes it as train.msp and test.mgf first), preprocesses their peaks into
// tokens, trains the spectrum transformer with and without positional encoding and with and
// without the intensity's value encoding, each with two heads (fingerprint bits with binary
// cross-entropy, and a class with cross-entropy), prints a table of the test metrics against
// trivial baselines and keeps each variant's model as a checkpoint (<output-dir>/<variant>/).
// Its actions evaluate, predict and embed run such a checkpoint on a user's spectra.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kformer::app {

struct SpectraCliOptions {
  std::string train, test;  // .msp or .mgf with Fingerprint and Class fields; generated otherwise
  int spectra = 2000;       // generated (80 % training, 20 % test)
  int bits = 32;            // fingerprint bits
  int classes = 4;
  int epochs = 30;
  int batch_size = 64;
  double learning_rate = 1e-3;
  int d_model = 64, heads = 4, layers = 2, dim_feedforward = 128;
  int top_k = 48;                       // peaks kept per spectrum
  double min_relative_intensity = 0.0;  // of the base peak
  double merge_tolerance = 0.01;        // Da
  bool precursor_token = false;
  std::int64_t max_peaks = 100000;  // a spectrum with more is refused
  std::vector<std::string> variants = {"full", "no-positional-encoding", "no-intensity-encoding",
                                       "neither"};
  std::string pos_encoding = "fixed";  // of the variants with one: fixed or learnable
  std::uint64_t seed = 1;
  std::string output_dir = "kformer-out/spectra";
  bool overwrite = false;  // replace the checkpoints of an earlier run in output_dir
  std::string list;        // a file to read and print as JSON lines (nothing else runs)

  // An action on a checkpoint instead of training: "evaluate" (the test metrics of --data, whose
  // spectra have Fingerprint and Class fields), "predict" (a CSV of each spectrum's fingerprint
  // and class probabilities) or "embed" (a CSV of each spectrum's representation).
  std::string action;
  std::string checkpoint, data, output;
};

// With options.list set: reads that file and prints one JSON object per spectrum (title,
// precursor_mz, charge, metadata, mz, intensity): what kformer read, for a cross-check against
// another reader (tools/compare_matchms.py).
void run_spectra_command(const std::string& backend, const std::string& precision,
                         const SpectraCliOptions& options);

}  // namespace kformer::app

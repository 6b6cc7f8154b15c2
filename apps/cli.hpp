// The kformer program's command line: every option in plain structs, with the program's defaults,
// and their declaration on a CLI11 app. Free of Kokkos, so that the parsing can be fuzzed on its
// own (tests/fuzz/fuzz_cli.cpp); kformer.cpp and tst_commands turn the result into runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spectra_command.hpp"
#include "trajectory_command.hpp"

namespace CLI {
class App;
}

namespace kformer::app {

struct DataOptions {
  std::string train, test;  // .ts or .csv files, or directories of per-series CSV files
  std::string labels;       // labels CSV for a directory of series
  std::string id_column = "series_id", label_column, time_column;
  std::vector<std::string> target_columns;
  double validation_fraction = 0.2;  // of the training data, when no test set is given
  // "zero" or "interpolate" (data::MissingValues); empty: the checkpoint's (inference, and
  // fine-tuning from a pretrained model), else zero.
  std::string missing_values;
};

struct ModelOptions {
  int d_model = 64, heads = 8, layers = 3, dim_feedforward = 256;
  double dropout = 0.1;
  std::string activation = "gelu", norm = "batchnorm", pos_encoding = "fixed",
              projection = "linear";
  bool norm_first = false;
  int conv_kernel = 3;
  // The architecture options given on the command line ("--d-model", ...), which a pretrained
  // model's own architecture would override.
  std::vector<std::string> architecture_given;
};

// The training options of the command line, turned into a TrainingOptions by training_options()
// (tst_commands.hpp). The defaults are TrainingOptions' (training/tst_trainer.hpp) and must be
// kept equal to them.
struct TrainCliOptions {
  int epochs = 20;
  int batch_size = 64;
  double lr = 1e-3;
  std::vector<int> lr_step;
  double lr_factor = 0.1;
  std::string optimizer = "adam";
  double weight_decay = 0;
  double clip_norm = 4.0;
  double l2_reg = 0;
  double masking_ratio = 0.15, mean_mask_length = 3.0;
  std::string mask_mode = "separate", mask_distribution = "geometric";
  std::vector<int> exclude_features;
  int forecast_horizon = 0;
  std::uint64_t seed = 1337;
  bool freeze_encoder = false;
  bool check_finite = false;
  bool sync_batchnorm = false;  // under mpirun: BatchNorm statistics over every rank's batch
};

// Which epoch's model a training run keeps besides the last one, as TST's model_best.pth, and
// when it stops early.
struct BestEpochOptions {
  bool keep = false;            // the best epoch's model to <output_dir>/best
  std::string metric = "loss";  // "loss" (lowest validation loss) or "accuracy" (highest)
  int patience = 0;             // stop after this many epochs without improvement (0: never)
};

struct RunOptions {
  std::string output_dir;
  bool progress = true;  // a redrawn bar on a terminal, plain lines otherwise
  bool resume = false;
  bool overwrite = false;  // replace a checkpoint already in output_dir (else refused)
  BestEpochOptions best;
};

struct EncodeOptions {
  int dim = 64;
  int len = 256;
  double base = 10000.0;
  long long first_position = 0;
  bool split = false;
  std::string precision = "float";
  std::string csv;
  std::string png;
};

// The subcommand given, or Default for none (the default job).
enum class Command {
  Default,
  Pretrain,
  Finetune,
  Evaluate,
  Embed,
  Predict,
  Encode,
  GenerateData,
  Info,
  Trajectory,
  Spectra
};

// Everything the command line sets.
struct CliOptions {
  std::string backend = "default", precision = "float";
  bool no_progress = false;   // run.progress is its negation after parsing
  bool reproducible = false;  // backends::set_reproducible_gemm
  std::uint64_t demo_seed = 2021;
  DataOptions data;
  ModelOptions model;
  TrainCliOptions training;
  RunOptions run;
  std::string pretrained, checkpoint, output, masks, data_dir;
  bool change_output = false;
  int batch_size = 64;
  EncodeOptions encode;
  TrajectoryCliOptions trajectory;
  SpectraCliOptions spectra;
};

// Declares kformer's options and subcommands on `app` (a default-constructed CLI::App), bound to
// `options`, parses argv (argv[0] is the program's name) and returns the command given. Throws
// CLI::ParseError for what CLI11 refuses and for --help, which app.exit() reports.
Command parse_command_line(CLI::App& app, CliOptions& options, int argc, const char* const* argv);

}  // namespace kformer::app

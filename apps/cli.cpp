#include "cli.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include <kformer/layers/norm_kinds.hpp>

namespace kformer::app {
namespace {

// A 64-bit seed. CLI11 reads "-1" into an unsigned option as 2^64 - 1; a minus sign is refused.
CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        std::strtoull(text.c_str(), &end, 10);
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (digits && errno != ERANGE) return "";
        return text + " is not a seed (a whole number from 0 to 18446744073709551615)";
      },
      "", "seed");
}

void add_data_options(CLI::App* cmd, DataOptions& d, bool with_test) {
  cmd->add_option("--data", d.train,
                  ".ts or .csv file, or a directory of .csv files (one per series)")
      ->required();
  if (with_test) {
    cmd->add_option("--test", d.test, "validation/test data (default: a split of --data)");
    cmd->add_option("--val-ratio", d.validation_fraction,
                    "validation fraction when no --test is given");
  }
  cmd->add_option("--labels", d.labels, "labels CSV (id,label) for a directory of series");
  cmd->add_option("--id-column", d.id_column, "CSV: the series-id column");
  cmd->add_option("--label-column", d.label_column, "CSV: the class-label column");
  cmd->add_option("--target-columns", d.target_columns, "CSV: regression target columns");
  cmd->add_option("--time-column", d.time_column, "CSV: sort each series by this column");
  cmd->add_option("--missing-values", d.missing_values,
                  "zero (the default) or interpolate (linearly along time, as TST); default for "
                  "a checkpoint: the one it was trained with")
      ->check(CLI::IsMember({"zero", "interpolate"}));
}

void add_model_options(CLI::App* cmd, ModelOptions& m) {
  cmd->add_option("--d-model", m.d_model, "model width");
  cmd->add_option("--heads", m.heads, "attention heads");
  cmd->add_option("--layers", m.layers, "encoder layers");
  cmd->add_option("--dim-feedforward", m.dim_feedforward, "feed-forward width");
  cmd->add_option("--dropout", m.dropout, "dropout probability");
  cmd->add_option("--activation", m.activation, "gelu or relu");
  cmd->add_option("--norm", m.norm, kformer::norm_names());
  cmd->add_flag("--norm-first", m.norm_first, "pre-norm encoder layers");
  cmd->add_option("--pos-encoding", m.pos_encoding, "fixed, learnable or none");
  cmd->add_option("--projection", m.projection, "linear or conv1d input projection");
  cmd->add_option("--conv-kernel", m.conv_kernel, "kernel size of the conv1d projection");
}

void add_training_options(CLI::App* cmd, TrainCliOptions& t) {
  cmd->add_option("--epochs", t.epochs, "epochs to train");
  cmd->add_option("--batch-size", t.batch_size, "series per batch");
  cmd->add_option("--lr", t.lr, "learning rate");
  cmd->add_option("--lr-step", t.lr_step,
                  "epochs after which the learning rate is multiplied by --lr-factor");
  cmd->add_option("--lr-factor", t.lr_factor, "learning-rate decay factor");
  cmd->add_option("--optimizer", t.optimizer, "adam, adamw or radam");
  cmd->add_option("--weight-decay", t.weight_decay, "weight decay");
  cmd->add_option("--clip-norm", t.clip_norm, "gradient clipping by global norm (0: off)");
  cmd->add_option("--l2-reg", t.l2_reg, "L2 penalty on the output layer's weight");
  cmd->add_option("--masking-ratio", t.masking_ratio, "pretraining: fraction of values masked");
  cmd->add_option("--mean-mask-length", t.mean_mask_length,
                  "pretraining: mean length of masked runs");
  cmd->add_option("--mask-mode", t.mask_mode, "separate or concurrent");
  cmd->add_option("--mask-distribution", t.mask_distribution, "geometric or bernoulli");
  cmd->add_option("--exclude-features", t.exclude_features, "features never masked");
  cmd->add_option("--forecast", t.forecast_horizon, "pretraining: mask the last N steps instead");
  cmd->add_option("--seed", t.seed, "seed for batches, masks and dropout")->check(seed_value());
  cmd->add_flag("--sync-batchnorm", t.sync_batchnorm,
                "under mpirun: BatchNorm statistics over every rank's batch (SyncBatchNorm); "
                "default: each rank's own, as PyTorch's DDP");
  cmd->add_flag("--check-finite", t.check_finite,
                "stop at the first layer that produces a NaN or Inf, naming it (slower)");
}

// Best-epoch selection and early stopping; `keep` is this command's default.
void add_best_epoch_options(CLI::App* cmd, BestEpochOptions& b, bool& keep) {
  cmd->add_flag("--keep-best,!--no-keep-best", keep,
                std::string("save the epoch with the best validation metric to OUTPUT_DIR/best "
                            "(TST's model_best.pth; default ") +
                    (keep ? "on" : "off") + ")");
  cmd->add_option("--key-metric", b.metric,
                  "validation metric that defines the best epoch: loss or accuracy "
                  "(classification)")
      ->check(CLI::IsMember({"loss", "accuracy"}));
  cmd->add_option("--patience", b.patience,
                  "stop after this many epochs without a better validation metric (0: never)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace

Command parse_command_line(CLI::App& app, CliOptions& options, int argc, const char* const* argv) {
  CliOptions& o = options;
  app.description(
      "kformer: transformer sequence models as Kokkos kernels. Without a command: the default job "
      "(masked pretraining, fine-tuning and the positional-encoding ablation on generated data).");
  app.require_subcommand(0, 1);
  app.add_option("--backend", o.backend, "execution space (serial, openmp, cuda, hip, default)");
  app.add_option("--precision", o.precision, "float or double")
      ->check(CLI::IsMember({"float", "double"}));
  app.add_flag("--no-progress", o.no_progress, "plain lines instead of a progress bar");
  app.add_option("--demo-seed", o.demo_seed, "seed of the default job's data")->check(seed_value());
  app.add_flag("--reproducible", o.reproducible,
               "the same bits for any number of threads (host GEMMs as fixed tiles; slower)");
  // The options above may also follow the subcommand: `kformer encode ... --backend serial`.
  app.fallthrough();

  auto* pretrain = app.add_subcommand("pretrain", "masked-value pretraining (imputation)");
  add_data_options(pretrain, o.data, true);
  add_model_options(pretrain, o.model);
  add_training_options(pretrain, o.training);
  pretrain->add_option("--output-dir", o.run.output_dir, "checkpoint and metrics directory")
      ->default_val("kformer-out/pretrain");
  pretrain->add_flag("--resume", o.run.resume, "continue from the checkpoint in --output-dir");
  pretrain->add_flag("--overwrite", o.run.overwrite, "replace a checkpoint in --output-dir");
  bool keep_best_pretrain = false, keep_best_finetune = true;  // as TST: fine-tuning keeps it
  add_best_epoch_options(pretrain, o.run.best, keep_best_pretrain);

  auto* finetune =
      app.add_subcommand("finetune", "classification or regression, from scratch or pretrained");
  add_data_options(finetune, o.data, true);
  add_model_options(finetune, o.model);
  add_training_options(finetune, o.training);
  finetune->add_option("--pretrained", o.pretrained, "checkpoint directory of a pretrained model");
  finetune->add_flag("--change-output", o.change_output,
                     "replace the pretrained model's output layer");
  finetune->add_flag("--freeze", o.training.freeze_encoder, "train the output layer only");
  finetune->add_option("--output-dir", o.run.output_dir, "checkpoint and metrics directory")
      ->default_val("kformer-out/finetune");
  finetune->add_flag("--resume", o.run.resume, "continue from the checkpoint in --output-dir");
  finetune->add_flag("--overwrite", o.run.overwrite, "replace a checkpoint in --output-dir");
  add_best_epoch_options(finetune, o.run.best, keep_best_finetune);

  auto* evaluate = app.add_subcommand("evaluate", "loss and metrics of a checkpoint on a dataset");
  evaluate->add_option("--checkpoint", o.checkpoint, "checkpoint directory")->required();
  add_data_options(evaluate, o.data, false);
  evaluate->add_option("--batch-size", o.batch_size, "series per batch");

  auto* embed =
      app.add_subcommand("embed", "per-series representations (mean over observed steps) as CSV");
  embed->add_option("--checkpoint", o.checkpoint, "checkpoint directory")->required();
  add_data_options(embed, o.data, false);
  embed->add_option("--output", o.output, "CSV file to write")
      ->default_val("kformer-out/embeddings.csv");
  embed->add_option("--batch-size", o.batch_size, "series per batch");

  auto* predict = app.add_subcommand("predict", "outputs of a checkpoint's model as CSV");
  predict->add_option("--checkpoint", o.checkpoint, "checkpoint directory")->required();
  add_data_options(predict, o.data, false);
  predict->add_option("--masks", o.masks,
                      "imputation: CSV (series,step,feature) of the values to hide and predict");
  predict->add_option("--output", o.output, "CSV file to write")
      ->default_val("kformer-out/predictions.csv");
  predict->add_option("--batch-size", o.batch_size, "series per batch");

  EncodeOptions& encode = o.encode;
  auto* encode_cmd = app.add_subcommand("encode", "the positional-encoding matrix as CSV and PNG");
  encode_cmd->add_option("--dim", encode.dim, "encoding dimension (columns)")
      ->check(CLI::Range(1, 1 << 20));
  encode_cmd->add_option("--len", encode.len, "sequence length (rows)")
      ->check(CLI::Range(1, 1 << 24));
  encode_cmd->add_option("--base", encode.base, "frequency base");
  encode_cmd->add_option("--first-position", encode.first_position, "position of the first row");
  encode_cmd->add_flag("--split", encode.split, "sines in the first half, cosines in the second");
  encode_cmd->add_option("--csv", encode.csv, "write the matrix as CSV");
  encode_cmd->add_option("--png", encode.png, "write the matrix as a heatmap PNG");

  auto* generate =
      app.add_subcommand("generate-data", "write the generated default datasets as .ts files");
  generate->add_option("--output-dir", o.data_dir, "directory")->default_val("kformer-out/data");

  auto* info = app.add_subcommand("info", "list the enabled backends and devices");

  TrajectoryCliOptions& tr = o.trajectory;
  auto* trajectory = app.add_subcommand(
      "trajectory",
      "phase-space trajectories: train transformer integrators (volume-preserving and standard, "
      "with and without positional encoding), roll them out, compare");
  trajectory->add_option("--system", tr.system, "rigid-body or coupled-oscillators")
      ->check(CLI::IsMember({"rigid-body", "coupled-oscillators"}));
  trajectory->add_option("--data", tr.data,
                         "CSV of your own trajectories (series_id, then one column per "
                         "coordinate) instead of a generated system");
  trajectory->add_option("--model", tr.models, "vpt, standard or both")
      ->check(CLI::IsMember({"vpt", "standard"}));
  trajectory->add_option("--positional-encoding", tr.encodings, "off, on or both")
      ->check(CLI::IsMember({"off", "on"}));
  trajectory->add_option("--trajectories", tr.trajectories, "generated training trajectories")
      ->check(CLI::Range(1, 1 << 20));
  trajectory
      ->add_option("--validation-trajectories", tr.validation_trajectories,
                   "generated validation trajectories, rolled out")
      ->check(CLI::Range(1, 1 << 20));
  trajectory->add_option("--steps", tr.steps, "states per training trajectory")
      ->check(CLI::Range(2, 1 << 24));
  trajectory->add_option("--rollout-steps", tr.rollout_steps, "states per validation trajectory")
      ->check(CLI::Range(2, 1 << 24));
  trajectory->add_option("--time-step", tr.time_step, "integrator time step")
      ->check(CLI::PositiveNumber);
  trajectory->add_option("--seq-length", tr.seq_length, "states in a window")
      ->check(CLI::Range(1, 256));
  trajectory
      ->add_option("--prediction-window", tr.prediction_window,
                   "states predicted from a window (at most --seq-length)")
      ->check(CLI::Range(1, 256));
  trajectory
      ->add_option("--units", tr.units,
                   "attention + feed-forward units of the volume-preserving transformer")
      ->check(CLI::Range(1, 64));
  trajectory->add_option("--n-blocks", tr.n_blocks, "blocks of each volume-preserving feed-forward")
      ->check(CLI::Range(0, 64));
  trajectory->add_option("--n-linear", tr.n_linear, "linear layer pairs per block")
      ->check(CLI::Range(1, 64));
  trajectory->add_option("--epochs", tr.epochs, "training epochs of each model")
      ->check(CLI::Range(0, 1 << 20));
  trajectory->add_option("--batch-size", tr.batch_size, "windows per batch")
      ->check(CLI::Range(1, 1 << 20));
  trajectory->add_option("--lr", tr.learning_rate, "Adam's learning rate")
      ->check(CLI::PositiveNumber);
  trajectory->add_option("--seed", tr.seed, "seed of the data and the models")->check(seed_value());
  trajectory->add_option("--output-dir", tr.output_dir, "directory of the CSVs and the plot")
      ->default_val("kformer-out/trajectory");

  SpectraCliOptions& sp = o.spectra;
  auto* spectra = app.add_subcommand(
      "spectra",
      "MS/MS spectra: train the spectrum transformer (fingerprint and class heads) with and "
      "without positional and intensity encodings, and compare");
  spectra->add_option("--train", sp.train,
                      "training spectra, .msp or .mgf with Fingerprint and Class fields "
                      "(generated when not given)");
  spectra->add_option("--test", sp.test, "test spectra, .msp or .mgf");
  spectra->add_option("--spectra", sp.spectra, "generated spectra (80 % training)")
      ->check(CLI::Range(10, 1 << 22));
  spectra->add_option("--bits", sp.bits, "fingerprint bits")->check(CLI::Range(2, 4096));
  spectra->add_option("--classes", sp.classes, "classes of the Class field")
      ->check(CLI::Range(2, 1 << 16));
  spectra
      ->add_option("--variant", sp.variants,
                   "full, no-positional-encoding, no-intensity-encoding, neither (default: all)")
      ->check(
          CLI::IsMember({"full", "no-positional-encoding", "no-intensity-encoding", "neither"}));
  spectra->add_option("--epochs", sp.epochs, "training epochs of each variant")
      ->check(CLI::Range(1, 1 << 20));
  spectra->add_option("--batch-size", sp.batch_size, "spectra per batch")
      ->check(CLI::Range(1, 1 << 20));
  spectra->add_option("--lr", sp.learning_rate, "Adam's learning rate")->check(CLI::PositiveNumber);
  spectra->add_option("--d-model", sp.d_model, "model width")->check(CLI::Range(2, 4096));
  spectra->add_option("--heads", sp.heads, "attention heads")->check(CLI::Range(1, 256));
  spectra->add_option("--layers", sp.layers, "encoder layers")->check(CLI::Range(1, 64));
  spectra->add_option("--dim-feedforward", sp.dim_feedforward, "feed-forward width")
      ->check(CLI::Range(1, 1 << 16));
  spectra->add_option("--top-k", sp.top_k, "peaks kept per spectrum, the most intense (0: all)")
      ->check(CLI::Range(0, 1 << 20));
  spectra
      ->add_option("--min-intensity", sp.min_relative_intensity,
                   "drop peaks below this fraction of the base peak")
      ->check(CLI::Range(0.0, 1.0));
  spectra->add_option("--merge-tolerance", sp.merge_tolerance, "merge peaks this close (Da)")
      ->check(CLI::Range(0.0, 1e6));
  spectra->add_flag("--precursor-token", sp.precursor_token, "the precursor as the first token");
  spectra->add_option("--max-peaks", sp.max_peaks, "refuse spectra with more peaks")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  spectra->add_option("--seed", sp.seed, "seed of the data and the models")->check(seed_value());
  spectra->add_option("--list", sp.list,
                      "only read this .msp or .mgf file and print its spectra as JSON lines");
  spectra
      ->add_option("--pos-encoding", sp.pos_encoding,
                   "positional encoding of the variants with one: fixed or learnable")
      ->check(CLI::IsMember({"fixed", "learnable"}));
  spectra->add_option("--output-dir", sp.output_dir, "directory of the results and checkpoints")
      ->default_val("kformer-out/spectra");
  spectra->add_flag("--overwrite", sp.overwrite, "replace the checkpoints of an earlier run");
  spectra->require_subcommand(0, 1);
  for (const auto& [name, help] : std::vector<std::pair<const char*, const char*>>{
           {"evaluate", "the metrics of a spectrum checkpoint on labelled spectra"},
           {"predict", "a CSV of fingerprint-bit and class probabilities, a row per spectrum"},
           {"embed", "a CSV of the spectra's representations (the pooled encoder output)"}}) {
    auto* action = spectra->add_subcommand(name, help);
    action
        ->add_option("--checkpoint", sp.checkpoint,
                     "a checkpoint directory of kformer spectra (<output-dir>/<variant>)")
        ->required();
    action->add_option("--data", sp.data, "spectra, .msp or .mgf")->required();
    if (std::string(name) != "evaluate")
      action->add_option("--output", sp.output, "the CSV to write")->required();
    action->add_option("--batch-size", sp.batch_size, "spectra per batch")
        ->check(CLI::Range(1, 1 << 20));
    action->add_option("--max-peaks", sp.max_peaks, "refuse spectra with more peaks")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
    action->callback([&sp, name = std::string(name)] { sp.action = name; });
  }

  app.parse(argc, argv);
  for (CLI::App* command : {pretrain, finetune})
    for (const char* name :
         {"--d-model", "--heads", "--layers", "--dim-feedforward", "--activation", "--norm",
          "--norm-first", "--pos-encoding", "--projection", "--conv-kernel"})
      if (*command && command->count(name) > 0) o.model.architecture_given.push_back(name);
  o.run.progress = !o.no_progress;
  o.run.best.keep = *pretrain ? keep_best_pretrain : *finetune && keep_best_finetune;
  o.encode.precision = o.precision;

  if (*info) return Command::Info;
  if (*trajectory) return Command::Trajectory;
  if (*spectra) return Command::Spectra;
  if (*encode_cmd) return Command::Encode;
  if (*generate) return Command::GenerateData;
  if (*pretrain) return Command::Pretrain;
  if (*finetune) return Command::Finetune;
  if (*evaluate) return Command::Evaluate;
  if (*predict) return Command::Predict;
  if (*embed) return Command::Embed;
  return Command::Default;
}

}  // namespace kformer::app

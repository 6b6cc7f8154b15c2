#include "output_safety.hpp"

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <kformer/core/error.hpp>

namespace kformer::app {
namespace {

namespace fs = std::filesystem;

// Whether two paths name the same file or directory: the same object on disk when both exist (a
// hard link or another spelling of it), else the same path once made absolute and normalised.
bool same_path(const std::string& a, const std::string& b) {
  std::error_code error;
  if (fs::exists(a, error) && fs::exists(b, error)) return fs::equivalent(a, b, error);
  return fs::weakly_canonical(a, error) == fs::weakly_canonical(b, error);
}

// Whether `path` is inside `directory` (or is it).
bool inside(const std::string& path, const std::string& directory) {
  std::error_code error;
  const fs::path dir = fs::weakly_canonical(directory, error);
  for (fs::path p = fs::weakly_canonical(path, error); !p.empty(); p = p.parent_path()) {
    if (p == dir) return true;
    if (p == p.parent_path()) break;
  }
  return false;
}

bool holds_checkpoint(const std::string& directory) {
  std::error_code error;
  return fs::exists(fs::path(directory) / "model.safetensors", error) ||
         fs::exists(fs::path(directory) / "config.json", error);
}

// --output of predict and embed: never one of the command's inputs.
void check_output_file(const char* command, const CliOptions& o) {
  const std::string where = std::string("kformer ") + command;
  if (o.output.empty()) fail(where, "--output is empty");
  std::vector<std::pair<const char*, std::string>> inputs = {{"--data", o.data.train}};
  if (!o.masks.empty()) inputs.emplace_back("--masks", o.masks);
  for (const auto& [option, input] : inputs)
    if (same_path(o.output, input))
      fail(where, "--output ", o.output, " is the ", option,
           " file: writing it would destroy the input; choose another --output");
  if (inside(o.output, o.checkpoint))
    fail(where, "--output ", o.output, " is inside the --checkpoint directory ", o.checkpoint,
         ": writing it could destroy the checkpoint; choose another --output");
  std::error_code error;
  if (fs::is_directory(o.output, error))
    fail(where, "--output ", o.output, " is a directory; expected a file name");
}

// --output-dir of pretrain and finetune.
void check_output_dir(const char* command, const CliOptions& o) {
  const std::string where = std::string("kformer ") + command;
  const std::string& dir = o.run.output_dir;
  if (dir.empty()) fail(where, "--output-dir is empty");
  if (o.run.resume && o.run.overwrite)
    fail(where,
         "--resume continues the checkpoint in --output-dir and --overwrite replaces it: "
         "give one of them");
  if (!o.pretrained.empty() && same_path(dir, o.pretrained))
    fail(where, "--output-dir ", dir,
         " is the --pretrained model's directory: fine-tuning would "
         "overwrite the pretrained model; choose another --output-dir");
  for (const auto& [option, input] :
       {std::pair<const char*, std::string>{"--data", o.data.train}, {"--test", o.data.test}})
    if (!input.empty() && same_path(dir, input))
      fail(where, "--output-dir ", dir, " is the ", option, " path; choose another --output-dir");
  if (!o.run.resume && !o.run.overwrite && holds_checkpoint(dir))
    fail(where, "--output-dir ", dir,
         " already holds a checkpoint: give --resume to continue it "
         "or --overwrite to replace it, or choose another --output-dir");
}

}  // namespace

void check_outputs(Command command, const CliOptions& options) {
  switch (command) {
    case Command::Pretrain:
      check_output_dir("pretrain", options);
      break;
    case Command::Finetune:
      check_output_dir("finetune", options);
      break;
    case Command::Predict:
      check_output_file("predict", options);
      break;
    case Command::Embed:
      check_output_file("embed", options);
      break;
    case Command::Trajectory:
      // The files it writes must not be the trajectories it reads.
      if (!options.trajectory.data.empty())
        for (const char* name : {"rollout_error.csv", "rollout.csv", "rollout.gp", "rollout.png"})
          if (same_path(options.trajectory.data, options.trajectory.output_dir + "/" + name))
            fail("kformer trajectory", "--data ", options.trajectory.data,
                 " is the file --output-dir ", options.trajectory.output_dir, " would write as ",
                 name, "; choose another --output-dir");
      break;
    case Command::Spectra:
      if (!options.spectra.action.empty()) {
        const SpectraCliOptions& sp = options.spectra;
        const std::string where = "kformer spectra " + sp.action;
        if (sp.action == "evaluate") break;
        if (sp.output.empty()) fail(where, "--output is empty");
        if (same_path(sp.output, sp.data))
          fail(where, "--output ", sp.output,
               " is the --data file: writing it would destroy the input; choose another --output");
        if (inside(sp.output, sp.checkpoint))
          fail(where, "--output ", sp.output, " is inside the --checkpoint directory ",
               sp.checkpoint, ": writing it could destroy the checkpoint; choose another --output");
        std::error_code error;
        if (fs::is_directory(sp.output, error))
          fail(where, "--output ", sp.output, " is a directory; expected a file name");
        break;
      }
      for (const std::string* input : {&options.spectra.train, &options.spectra.test})
        if (!input->empty())
          for (const char* name : {"results.csv", "positional_encoding.png"})
            if (same_path(*input, options.spectra.output_dir + "/" + name))
              fail("kformer spectra", *input, " is the file --output-dir ",
                   options.spectra.output_dir, " would write as ", name,
                   "; choose another --output-dir");
      break;
    default:
      break;
  }
}

}  // namespace kformer::app

#include "checkpoint.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include <nlohmann/json.hpp>

#include "../core/json_integer.hpp"

namespace kformer {

std::string checkpoint_weights_path(const std::string& directory) {
  return directory + "/model.safetensors";
}

std::string checkpoint_config_json(const CheckpointInfo& info) {
  const nlohmann::json j = {{"format", kCheckpointFormat},
                            {"model", nlohmann::json::parse(to_json(info.config))},
                            {"class_names", info.class_names},
                            {"next_epoch", info.next_epoch},
                            {"step", info.step},
                            {"has_optimizer", info.has_optimizer},
                            {"missing_values", data::missing_values_name(info.missing_values)}};
  return j.dump(2) + "\n";
}

namespace {

// CheckpointInfo from config.json's text; `path` names where the text came from in errors.
CheckpointInfo parse_checkpoint_config(const std::string& text, const std::string& path) {
  const std::string where = "kformer::read_checkpoint_config";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(where, path, ": not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("model"))
    fail(where, path, ": expected an object with a \"model\" entry (a kformer checkpoint config)");
  if (!j.contains("format") || !j.at("format").is_string() ||
      j.at("format").get<std::string>() != kCheckpointFormat)
    fail(where, path, ": format ", j.contains("format") ? j.at("format").dump() : "(none)",
         " is not one this kformer reads (\"", kCheckpointFormat, "\")");
  CheckpointInfo info;
  info.config = tst_config_from_json(j.at("model").dump(), path);
  try {
    if (j.contains("class_names"))
      info.class_names = j.at("class_names").get<std::vector<std::string>>();
    if (j.contains("next_epoch"))
      info.next_epoch = get_integer<int>(j.at("next_epoch"), where, path, "next_epoch");
    if (info.next_epoch < 0)
      fail(where, path, ": next_epoch must be at least 0, got ", info.next_epoch);
    if (j.contains("step"))
      info.step = get_integer<std::uint64_t>(j.at("step"), where, path, "step");
    if (j.contains("missing_values"))
      info.missing_values = data::parse_missing_values(j.at("missing_values").get<std::string>(),
                                                       where + ": " + path);
  } catch (const nlohmann::json::exception& e) {
    fail(where, path, ": ", e.what());
  }
  if (info.config.task == TstTask::Classification &&
      std::int64_t(info.class_names.size()) != info.config.num_outputs)
    fail(where, path, ": ", info.class_names.size(), " class names for ", info.config.num_outputs,
         " classes");
  return info;
}

CheckpointInfo read_config_json(const std::string& directory) {
  const std::string path = directory + "/config.json";
  std::ifstream in(path);
  if (!in)
    fail("kformer::read_checkpoint_config", "cannot read ", path, ": ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_checkpoint_config(text, path);
}

}  // namespace

namespace {

// Refuses a config whose sizes the weights do not have, before a model of that config is built (a
// d_model of 10^6 would otherwise allocate gigabytes before the load finds the mismatch): the
// input projection's (d_model, feat_dim, ...) and each of num_layers feed-forward layers'
// (dim_feedforward, d_model), and no layer beyond them.
void check_config_against_weights(const TstConfig& c, const safetensors::File& file,
                                  const std::string& source) {
  const std::string where = "kformer::read_checkpoint_config";
  const auto shape_of = [&](const std::string& name) -> std::vector<std::int64_t> {
    for (const char* prefix : {"", "_orig_mod.", "module."})
      if (file.contains(prefix + name)) return file.info(prefix + name).shape;
    fail(where, source, ": the weights have no '", name, "', which the config's model has");
  };
  const auto shape_text = [](const std::vector<std::int64_t>& shape) {
    std::string text = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
      text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + ")";
  };
  const auto expect = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    const auto shape = shape_of(name);
    if (shape.size() < 2 || shape[0] != rows || shape[1] != cols)
      fail(where, source, ": the config says ", name, " is (", rows, ", ", cols,
           ", ...), the weights hold ", shape_text(shape));
  };
  expect("project_inp.weight", c.d_model, c.feat_dim);
  for (int l = 0; l < c.num_layers; ++l)
    expect("transformer_encoder.layers." + std::to_string(l) + ".linear1.weight",
           c.dim_feedforward, c.d_model);
  const std::string beyond =
      "transformer_encoder.layers." + std::to_string(c.num_layers) + ".linear1.weight";
  if (file.contains(beyond))
    fail(where, source, ": the config says ", c.num_layers, " layers, the weights hold more");
}

}  // namespace

CheckpointInfo checkpoint_config_of(const safetensors::File& file, const std::string& directory) {
  const auto embedded = file.metadata().find("checkpoint");
  CheckpointInfo info =
      embedded == file.metadata().end()
          ? read_config_json(directory)
          : parse_checkpoint_config(embedded->second, checkpoint_weights_path(directory) +
                                                          " (its \"checkpoint\" metadata)");
  check_config_against_weights(info.config, file, checkpoint_weights_path(directory));
  return info;
}

CheckpointInfo read_checkpoint_config(const std::string& directory) {
  std::error_code error;
  const std::string weights = checkpoint_weights_path(directory);
  if (!std::filesystem::exists(weights, error)) return read_config_json(directory);
  return checkpoint_config_of(safetensors::File::read(weights), directory);
}

OutputDirectoryLock::OutputDirectoryLock(const std::string& directory) {
  const std::string where = "kformer::OutputDirectoryLock";
  make_directories(directory);
  // The lock is on the directory itself (flock on its descriptor), so that no file is added to it.
  fd_ = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) fail(where, "cannot open ", directory, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    if (e == EWOULDBLOCK)
      fail(where, "another kformer run is writing to ", directory,
           "; wait for it or choose another --output-dir");
    fail(where, "cannot lock ", directory, ": ", std::strerror(e));
  }
  // Temporary files of runs that were killed while writing (write_file_atomic's NAME.tmp.XXXXXX).
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(error) && name.find(".tmp.") != std::string::npos)
      std::filesystem::remove(entry.path(), error);
  }
}

OutputDirectoryLock::~OutputDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

void make_directories(const std::string& directory) {
  std::string partial;
  for (std::size_t i = 0; i <= directory.size(); ++i) {
    if (i == directory.size() || directory[i] == '/') {
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
        fail("kformer::make_directories", "cannot create ", partial, ": ", std::strerror(errno));
    }
    if (i < directory.size()) partial += directory[i];
  }
  struct stat st;
  if (stat(directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("kformer::make_directories", directory, " is not a directory");
}

}  // namespace kformer

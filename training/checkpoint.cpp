#include "checkpoint.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "../core/json_integer.hpp"

namespace kformer {

std::string checkpoint_weights_path(const std::string& directory) {
  return directory + "/model.safetensors";
}

std::string checkpoint_config_json(const CheckpointInfo& info) {
  const nlohmann::json j = {{"format", "kformer-tst/1"},
                            {"model", nlohmann::json::parse(to_json(info.config))},
                            {"class_names", info.class_names},
                            {"next_epoch", info.next_epoch},
                            {"step", info.step},
                            {"has_optimizer", info.has_optimizer}};
  return j.dump(2) + "\n";
}

CheckpointInfo read_checkpoint_config(const std::string& directory) {
  const std::string where = "kformer::read_checkpoint_config";
  const std::string path = directory + "/config.json";
  std::ifstream in(path);
  if (!in) fail(where, "cannot read ", path, ": ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(where, path, ": not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("model"))
    fail(where, path, ": expected an object with a \"model\" entry (a kformer checkpoint config)");
  CheckpointInfo info;
  info.config = tst_config_from_json(j.at("model").dump(), path);
  try {
    if (j.contains("class_names"))
      info.class_names = j.at("class_names").get<std::vector<std::string>>();
    if (j.contains("next_epoch"))
      info.next_epoch = get_integer<int>(j.at("next_epoch"), where, path, "next_epoch");
    if (j.contains("step"))
      info.step = get_integer<std::uint64_t>(j.at("step"), where, path, "step");
  } catch (const nlohmann::json::exception& e) {
    fail(where, path, ": ", e.what());
  }
  if (info.config.task == TstTask::Classification &&
      std::int64_t(info.class_names.size()) != info.config.num_outputs)
    fail(where, path, ": ", info.class_names.size(), " class names for ", info.config.num_outputs,
         " classes");
  return info;
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

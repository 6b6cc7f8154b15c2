// The C API (kformer_c.h) over kformer's C++: a StandardTransformerNetwork<T> on the default
// execution space (T double or float, the config's model.precision), its ParameterBuffer, an
// Optimizer and the MSE. Every entry point runs inside `guarded`, which turns every exception into
// a status code and this thread's message.
#include "kformer_c.h"

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>
#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime_api.h>
#endif

#include <kformer/core/compat.hpp>
#include <kformer/core/error.hpp>
#include <kformer/core/finite.hpp>
#include <kformer/core/json_integer.hpp>
#include <kformer/core/parameter_buffer.hpp>
#include <kformer/core/safetensors.hpp>
#include <kformer/core/safetensors_kokkos.hpp>
#include <kformer/layers/elementwise.hpp>
#include <kformer/losses/losses.hpp>
#include <kformer/models/transformer_integrator.hpp>
#include <kformer/optimizers/optimizers.hpp>
#include <kformer/training/state_dict.hpp>

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;
constexpr const char* kFormat = "kformer-c-model/1";

// An error of this API: its status and message.
struct ApiError {
  kformer_status status;
  std::string message;
};
[[noreturn]] void raise(kformer_status status, const std::string& message) {
  throw ApiError{status, message};
}

thread_local std::string last_error;
bool started_kokkos = false;

struct Config {
  int state_dim = 0;
  bool float32 = false;  // model.precision "float32"; "float64" (double) by default
  kformer::StandardTransformerOptions network;
  kformer::OptimizerOptions optimizer;
  double learning_rate = 1e-3;
  std::int64_t step_size = 0;  // 0: a constant learning rate
  double gamma = 1.0;
};

// The keys of `object` must be in `known`; `source` (the config's file) and `where` (the object)
// name it in messages.
void only_keys(const std::string& source, const nlohmann::json& object,
               const std::set<std::string>& known, const std::string& where) {
  if (!object.is_object())
    raise(KFORMER_ERROR_ARGUMENT, source + ": " + where + " must be an object");
  for (const auto& item : object.items())
    if (!known.count(item.key())) {
      std::string message = source;
      message.append(": unknown key '").append(item.key()).append("' in ").append(where);
      raise(KFORMER_ERROR_ARGUMENT, message);
    }
}

std::string type_of(const std::string& source, const nlohmann::json& object,
                    const std::string& where, const std::string& default_type) {
  if (!object.contains("type")) return default_type;
  if (!object.at("type").is_string())
    raise(KFORMER_ERROR_ARGUMENT, source + ": " + where + ".type must be a string");
  return object.at("type").get<std::string>();
}

Config parse_config(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    raise(KFORMER_ERROR_ARGUMENT, source + ": not valid JSON: " + e.what());
  }
  only_keys(source, j, {"model", "loss", "optimizer", "lr_schedule"}, "the config");
  Config c;
  const std::string where = "kformer_c";
  const auto integer = [&](const nlohmann::json& o, const std::string& key, int low, int high,
                           int fallback) {
    if (!o.contains(key)) return fallback;
    const int v = kformer::get_integer<int>(o.at(key), where, source, key);
    if (v < low || v > high)
      raise(KFORMER_ERROR_ARGUMENT, source + ": " + key + " must be from " + std::to_string(low) +
                                        " to " + std::to_string(high) + ", got " +
                                        std::to_string(v));
    return v;
  };
  const auto number = [&](const nlohmann::json& o, const std::string& key, double low, double high,
                          double fallback) {
    if (!o.contains(key)) return fallback;
    const double v = kformer::get_number(o.at(key), where, source, key);
    if (!(v >= low && v <= high))
      raise(KFORMER_ERROR_ARGUMENT, source + ": " + key + " must be from " + std::to_string(low) +
                                        " to " + std::to_string(high) + ", got " +
                                        std::to_string(v));
    return v;
  };
  if (!j.contains("model")) raise(KFORMER_ERROR_ARGUMENT, source + ": no \"model\" entry");
  const auto& m = j.at("model");
  only_keys(
      source, m,
      {"type", "state_dim", "d_model", "heads", "layers", "dim_feedforward", "seed", "precision"},
      "model");
  if (type_of(source, m, "model", "transformer") != "transformer")
    raise(KFORMER_ERROR_ARGUMENT, source + ": unknown model type '" +
                                      m.at("type").get<std::string>() + "' (expected transformer)");
  if (!m.contains("state_dim"))
    raise(KFORMER_ERROR_ARGUMENT, source + ": model.state_dim is required");
  c.state_dim = integer(m, "state_dim", 1, 1 << 20, 0);
  c.network.d_model = integer(m, "d_model", 1, 1 << 16, c.network.d_model);
  c.network.heads = integer(m, "heads", 1, 1024, c.network.heads);
  c.network.layers = integer(m, "layers", 1, 256, c.network.layers);
  c.network.dim_feedforward = integer(m, "dim_feedforward", 1, 1 << 20, c.network.dim_feedforward);
  if (m.contains("seed"))
    c.network.seed = kformer::get_integer<std::uint64_t>(m.at("seed"), where, source, "seed");
  if (m.contains("precision")) {
    const auto& precision = m.at("precision");
    if (!precision.is_string() ||
        (precision.get<std::string>() != "float64" && precision.get<std::string>() != "float32"))
      raise(KFORMER_ERROR_ARGUMENT, source + ": model.precision must be \"float64\" or " +
                                        "\"float32\", got " + precision.dump());
    c.float32 = precision.get<std::string>() == "float32";
  }
  if (c.network.d_model % c.network.heads != 0)
    raise(KFORMER_ERROR_ARGUMENT, source + ": model.d_model " + std::to_string(c.network.d_model) +
                                      " is not a multiple of model.heads " +
                                      std::to_string(c.network.heads));
  if (j.contains("loss")) {
    only_keys(source, j.at("loss"), {"type"}, "loss");
    const std::string loss = type_of(source, j.at("loss"), "loss", "mse");
    if (loss != "mse")
      raise(KFORMER_ERROR_ARGUMENT, source + ": unknown loss '" + loss + "' (expected mse)");
  }
  if (j.contains("optimizer")) {
    const auto& o = j.at("optimizer");
    only_keys(source, o, {"type", "learning_rate", "beta1", "beta2", "eps", "weight_decay"},
              "optimizer");
    const std::string type = type_of(source, o, "optimizer", "adam");
    if (type == "adam")
      c.optimizer.kind = kformer::OptimizerKind::Adam;
    else if (type == "adamw")
      c.optimizer.kind = kformer::OptimizerKind::AdamW;
    else if (type == "radam")
      c.optimizer.kind = kformer::OptimizerKind::RAdam;
    else
      raise(KFORMER_ERROR_ARGUMENT,
            source + ": unknown optimizer '" + type + "' (expected adam, adamw or radam)");
    c.learning_rate = number(o, "learning_rate", 0, 1e3, c.learning_rate);
    c.optimizer.beta1 = number(o, "beta1", 0, 0.999999, c.optimizer.beta1);
    c.optimizer.beta2 = number(o, "beta2", 0, 0.999999999, c.optimizer.beta2);
    c.optimizer.eps = number(o, "eps", 1e-300, 1, c.optimizer.eps);
    c.optimizer.weight_decay = number(o, "weight_decay", 0, 1e3, c.optimizer.weight_decay);
  }
  if (j.contains("lr_schedule")) {
    const auto& s = j.at("lr_schedule");
    only_keys(source, s, {"type", "step_size", "gamma"}, "lr_schedule");
    const std::string type = type_of(source, s, "lr_schedule", "constant");
    if (type == "step") {
      if (!s.contains("step_size"))
        raise(KFORMER_ERROR_ARGUMENT,
              source + ": lr_schedule.step_size is required for a step schedule");
      c.step_size = integer(s, "step_size", 1, 1 << 30, 1);
      c.gamma = number(s, "gamma", 0, 1e3, 0.1);
    } else if (type != "constant") {
      raise(KFORMER_ERROR_ARGUMENT,
            source + ": unknown lr_schedule '" + type + "' (expected constant or step)");
    }
  }
  return c;
}

std::string config_json(const Config& c) {
  const char* optimizer = c.optimizer.kind == kformer::OptimizerKind::AdamW   ? "adamw"
                          : c.optimizer.kind == kformer::OptimizerKind::RAdam ? "radam"
                                                                              : "adam";
  nlohmann::json j = {{"model",
                       {{"type", "transformer"},
                        {"state_dim", c.state_dim},
                        {"d_model", c.network.d_model},
                        {"heads", c.network.heads},
                        {"layers", c.network.layers},
                        {"dim_feedforward", c.network.dim_feedforward},
                        {"seed", c.network.seed},
                        {"precision", c.float32 ? "float32" : "float64"}}},
                      {"loss", {{"type", "mse"}}},
                      {"optimizer",
                       {{"type", optimizer},
                        {"learning_rate", c.learning_rate},
                        {"beta1", c.optimizer.beta1},
                        {"beta2", c.optimizer.beta2},
                        {"eps", c.optimizer.eps},
                        {"weight_decay", c.optimizer.weight_decay}}},
                      {"lr_schedule", c.step_size > 0 ? nlohmann::json{{"type", "step"},
                                                                       {"step_size", c.step_size},
                                                                       {"gamma", c.gamma}}
                                                      : nlohmann::json{{"type", "constant"}}}};
  return j.dump(2);
}

}  // namespace

namespace {

// The network, its parameters and optimizer in one precision T.
template <class T>
struct Engine {
  using value_type = T;
  kformer::StandardTransformerNetwork<T, Space> network;
  kformer::ParameterBuffer<T, Memory> parameters;
  kformer::Optimizer<T, Space> optimizer;
  kformer::Losses<T, Space> losses;
  kformer::GrowingBuffer<T, Memory> d_output{"kformer_c::d_output"};
  kformer::GrowingBuffer<T, Memory> output{"kformer_c::output"};

  explicit Engine(const Config& c)
      : network(Space(), c.state_dim, c.network), optimizer(Space(), 0, c.optimizer) {
    parameters.gather(Space(), network);
    optimizer = kformer::Optimizer<T, Space>(Space(), parameters.values().extent(0), c.optimizer);
  }
};

}  // namespace

struct kformer_model {
  Config config;
  std::unique_ptr<Engine<double>> float64;  // exactly one of the two
  std::unique_ptr<Engine<float>> float32;
  std::int64_t steps = 0;

  explicit kformer_model(const Config& c) : config(c) {
    if (c.float32)
      float32 = std::make_unique<Engine<float>>(c);
    else
      float64 = std::make_unique<Engine<double>>(c);
  }
  // f(engine) on the engine this model has.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return float32 ? f(*float32) : f(*float64);
  }
  double learning_rate() const {
    if (config.step_size == 0) return config.learning_rate;
    const std::int64_t decays = steps / config.step_size;  // whole periods completed
    return config.learning_rate * std::pow(config.gamma, static_cast<double>(decays));
  }
};

namespace {

std::mutex registry_mutex;
std::unordered_set<const kformer_model*> live_models;

// Runs f, turning what it throws into a status and this thread's message.
template <class F>
int guarded(const char* function, F&& f) {
  try {
    last_error.clear();
    f();
    return KFORMER_OK;
  } catch (const ApiError& e) {
    last_error = std::string(function) + ": " + e.message;
    return e.status;
  } catch (const kformer::Error& e) {
    last_error = std::string(function) + ": " + e.what();
    return KFORMER_ERROR_ARGUMENT;
  } catch (const std::bad_alloc&) {
    last_error = std::string(function) + ": out of memory";
    return KFORMER_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    last_error = std::string(function) + ": " + e.what();
    return KFORMER_ERROR_INTERNAL;
  } catch (...) {
    last_error = std::string(function) + ": an unknown error";
    return KFORMER_ERROR_INTERNAL;
  }
}

void require_kokkos() {
  if (!Kokkos::is_initialized())
    raise(KFORMER_ERROR_STATE, "Kokkos is not initialized: call kformer_initialize first");
}

void require_pointer(const void* p, const char* name) {
  if (p == nullptr) raise(KFORMER_ERROR_ARGUMENT, std::string(name) + " is NULL");
}

const kformer_model& live(const kformer_model* model) {
  if (model == nullptr) raise(KFORMER_ERROR_HANDLE, "model is NULL");
  const std::lock_guard<std::mutex> lock(registry_mutex);
  if (!live_models.count(model))
    raise(KFORMER_ERROR_HANDLE, "model is not a live kformer model (destroyed, or never created)");
  return *model;
}
kformer_model& live(kformer_model* model) {
  live(static_cast<const kformer_model*>(model));
  return *model;
}

kformer_model* adopt(std::unique_ptr<kformer_model> model) {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  live_models.insert(model.get());
  return model.release();
}

std::string read_text(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise(KFORMER_ERROR_FILE, std::string("cannot read ") + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

template <class T>
const char* precision_name() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

// The model's engine of precision T, or an Error naming the function that takes the model's.
template <class T>
Engine<T>& engine(const kformer_model& model, const char* takes_float64,
                  const char* takes_float32) {
  Engine<T>* e = nullptr;
  if constexpr (std::is_same_v<T, float>)
    e = model.float32.get();
  else
    e = model.float64.get();
  if (e == nullptr)
    raise(KFORMER_ERROR_ARGUMENT,
          std::string("the model computes in ") + (model.config.float32 ? "float32" : "float64") +
              " (model.precision) but the arrays given are " + precision_name<T>() + ": call " +
              (model.config.float32 ? takes_float32 : takes_float64) + " instead");
  return *e;
}

// That `data` is memory the model's execution space reads: on CUDA and HIP a device or managed
// pointer (a host pointer would fault inside a kernel), as the runtime reports it. Host builds
// have one memory: nothing to check.
void require_model_memory(const void* data, const char* name) {
  bool device = true;
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<Space, Kokkos::Cuda>) {
    cudaPointerAttributes attributes{};
    const bool known = cudaPointerGetAttributes(&attributes, data) == cudaSuccess;
    if (!known) (void)cudaGetLastError();  // clear the sticky error of an unknown pointer
    device = known &&
             (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
  }
#elif defined(KOKKOS_ENABLE_HIP)
  if constexpr (std::is_same_v<Space, kformer::compat::HIP>) {
    hipPointerAttribute_t attributes{};
    const bool known = hipPointerGetAttributes(&attributes, data) == hipSuccess;
    if (!known) (void)hipGetLastError();
#if HIP_VERSION_MAJOR >= 6
    const hipMemoryType type = attributes.type;
#else
    const hipMemoryType type = attributes.memoryType;
#endif
    device = known && (type == hipMemoryTypeDevice || attributes.isManaged != 0);
  }
#else
  (void)data;
#endif
  if (!device)
    raise(KFORMER_ERROR_ARGUMENT,
          std::string(name) +
              " is not in GPU device or managed memory; the model runs on the GPU, so the arrays "
              "must be device arrays (e.g. OpenACC's or CUDA Fortran's device data)");
}

template <class T>
using ConstInput = kformer::Tensor3<const T, Memory>;
template <class T>
using Output = kformer::Tensor3<T, Memory>;

// The caller's (batch, seq, dim) array, unmanaged (no copy), after checking the shape and that
// it holds only finite values.
template <class T>
ConstInput<T> wrap_input(const kformer_model& model, const T* data, const char* name,
                         std::int64_t batch, std::int64_t seq, std::int64_t dim) {
  require_pointer(data, name);
  require_model_memory(data, name);
  if (batch < 1 || seq < 1)
    raise(KFORMER_ERROR_ARGUMENT, "batch and seq must be at least 1, got batch " +
                                      std::to_string(batch) + " and seq " + std::to_string(seq));
  if (dim != model.config.state_dim)
    raise(KFORMER_ERROR_ARGUMENT, "dim must be the model's state_dim " +
                                      std::to_string(model.config.state_dim) + ", got " +
                                      std::to_string(dim));
  ConstInput<T> view(data, batch, seq, dim);
  const std::int64_t bad = kformer::first_non_finite(Space(), view);
  if (bad >= 0)
    raise(KFORMER_ERROR_NOT_FINITE,
          std::string(name) + " holds a NaN or infinity at element " + std::to_string(bad) +
              " (batch " + std::to_string(bad / (seq * dim)) + ", step " +
              std::to_string(bad / dim % seq) + ", component " + std::to_string(bad % dim) + ")");
  return view;
}

void save(const kformer_model& m, const std::string& path) {
  kformer::safetensors::Writer writer;
  m.visit([&](auto& e) {
    using T = typename std::decay_t<decltype(e)>::value_type;
    kformer::add_state_dict(Space(), writer, e.network);
    const auto exp_avg = kformer::to_host(e.optimizer.exp_avg());
    const auto exp_avg_sq = kformer::to_host(e.optimizer.exp_avg_sq());
    writer.add("optimizer.exp_avg", {std::int64_t(exp_avg.size())},
               std::vector<T>(exp_avg.data(), exp_avg.data() + exp_avg.size()));
    writer.add("optimizer.exp_avg_sq", {std::int64_t(exp_avg_sq.size())},
               std::vector<T>(exp_avg_sq.data(), exp_avg_sq.data() + exp_avg_sq.size()));
    writer.add("optimizer.step", {}, std::vector<std::int64_t>{e.optimizer.steps()});
  });
  writer.add("training.step", {}, std::vector<std::int64_t>{m.steps});
  writer.set_metadata("format", kFormat);
  writer.set_metadata("config", config_json(m.config));
  try {
    writer.write(path);
  } catch (const kformer::Error& e) {
    raise(KFORMER_ERROR_FILE, e.what());
  }
}

std::unique_ptr<kformer_model> load(const std::string& path) {
  std::optional<kformer::safetensors::File> file;
  try {
    file.emplace(kformer::safetensors::File::read(path));
  } catch (const kformer::Error& e) {
    raise(KFORMER_ERROR_FILE, e.what());
  }
  const auto& metadata = file->metadata();
  const auto format = metadata.find("format");
  if (format == metadata.end() || format->second != kFormat)
    raise(KFORMER_ERROR_FILE,
          path + ": format '" +
              (format == metadata.end() ? std::string("(none)") : format->second) +
              "' is not a model of the C API (\"" + kFormat + "\")");
  const auto config = metadata.find("config");
  if (config == metadata.end()) raise(KFORMER_ERROR_FILE, path + ": no config in its metadata");
  auto model = std::make_unique<kformer_model>(parse_config(config->second, path));
  kformer::LoadOptions options;
  options.other_prefixes = {"optimizer.", "training."};
  try {
    model->visit([&](auto& e) {
      kformer::load_state_dict(Space(), e.network, *file, options);
      for (const char* name : {"optimizer.exp_avg", "optimizer.exp_avg_sq"})
        if (!file->contains(name) || file->info(name).numel() != e.optimizer.size())
          raise(KFORMER_ERROR_FILE, path + ": " + name + " is missing or of another size");
      for (const char* name : {"optimizer.step", "training.step"})
        if (!file->contains(name) || file->to_int64(name).size() != 1 ||
            file->to_int64(name)[0] < 0)
          raise(KFORMER_ERROR_FILE, path + ": " + name + " is missing or not a count");
      kformer::load_tensor(*file, "optimizer.exp_avg", e.optimizer.exp_avg());
      kformer::load_tensor(*file, "optimizer.exp_avg_sq", e.optimizer.exp_avg_sq());
      e.optimizer.set_steps(file->to_int64("optimizer.step")[0]);
    });
    model->steps = file->to_int64("training.step")[0];
  } catch (const kformer::Error& e) {
    raise(KFORMER_ERROR_FILE, e.what());
  }
  Space().fence();
  return model;
}

// output = f(input) on the caller's arrays.
template <class T>
void forward(kformer_model& m, const T* input, std::int64_t batch, std::int64_t seq,
             std::int64_t dim, T* output) {
  require_kokkos();
  Engine<T>& e = engine<T>(m, "kformer_forward", "kformer_forward_f32");
  const ConstInput<T> x = wrap_input(m, input, "input", batch, seq, dim);
  require_pointer(output, "output");
  require_model_memory(output, "output");
  // The network writes the caller's array directly unless it overlaps the input.
  const Output<T> y(output, batch, seq, dim);
  const bool overlaps = output < input + x.size() && input < output + x.size();
  const Output<T> target = overlaps ? Output<T>(e.output.view(batch, seq, dim)) : y;
  e.network.forward(Space(), kformer::RunContext{false, 0, false}, x, target);
  if (overlaps) Kokkos::deep_copy(Space(), y, target);
  Space().fence();
}

// One optimizer step on the MSE of f(input) against target; *loss is the loss before it.
template <class T>
void train_step(kformer_model& m, const T* input, const T* target, std::int64_t batch,
                std::int64_t seq, std::int64_t dim, double* loss) {
  require_kokkos();
  Engine<T>& e = engine<T>(m, "kformer_train_step", "kformer_train_step_f32");
  require_pointer(loss, "loss");
  const ConstInput<T> x = wrap_input(m, input, "input", batch, seq, dim);
  const ConstInput<T> t = wrap_input(m, target, "target", batch, seq, dim);
  const Output<T> y = e.output.view(batch, seq, dim);
  const Output<T> dy = e.d_output.view(batch, seq, dim);
  const kformer::RunContext ctx{true, static_cast<std::uint64_t>(m.steps), true};
  kformer::fill(Space(), T(0), e.parameters.grads());
  e.network.forward(Space(), ctx, x, y);
  const double value = e.losses.mse(Space(), kformer::as_matrix(ConstInput<T>(y)),
                                    kformer::as_matrix(t), kformer::as_matrix(dy));
  if (!std::isfinite(value))
    raise(KFORMER_ERROR_NOT_FINITE, "the loss is " + std::to_string(value) +
                                        "; no step was taken (a smaller learning_rate?)");
  e.network.backward(Space(), ctx, x, dy, Output<T>());
  e.optimizer.step(Space(), e.parameters.values(), e.parameters.grads(), m.learning_rate());
  ++m.steps;
  Space().fence();
  *loss = value;
}

}  // namespace

extern "C" {

int kformer_initialize(void) {
  return guarded("kformer_initialize", [] {
    if (Kokkos::is_initialized()) return;
    // Unpinned threads unless the caller says otherwise (as the kformer program does): a
    // simulation's own threads share the cores.
    setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
    Kokkos::initialize();
    started_kokkos = true;
  });
}

int kformer_finalize(void) {
  return guarded("kformer_finalize", [] {
    {
      const std::lock_guard<std::mutex> lock(registry_mutex);
      if (!live_models.empty())
        raise(KFORMER_ERROR_STATE, std::to_string(live_models.size()) +
                                       " model(s) not destroyed: destroy them before finalizing");
    }
    if (started_kokkos && Kokkos::is_initialized()) Kokkos::finalize();
    started_kokkos = false;
  });
}

const char* kformer_last_error(void) {
  return last_error.c_str();
}

int kformer_report_error(int status, const char* message) {
  last_error = message != nullptr ? message : "an error without a message";
  return status;
}

int kformer_model_create_from_string(const char* config_json, kformer_model** model) {
  return guarded("kformer_model_create_from_string", [&] {
    require_pointer(config_json, "config_json");
    require_pointer(model, "model");
    require_kokkos();
    *model = adopt(std::make_unique<kformer_model>(parse_config(config_json, "config_json")));
  });
}

int kformer_model_create(const char* config_path, kformer_model** model) {
  return guarded("kformer_model_create", [&] {
    require_pointer(config_path, "config_path");
    require_pointer(model, "model");
    require_kokkos();
    *model =
        adopt(std::make_unique<kformer_model>(parse_config(read_text(config_path), config_path)));
  });
}

int kformer_model_load(const char* path, kformer_model** model) {
  return guarded("kformer_model_load", [&] {
    require_pointer(path, "path");
    require_pointer(model, "model");
    require_kokkos();
    *model = adopt(load(path));
  });
}

int kformer_model_save(const kformer_model* model, const char* path) {
  return guarded("kformer_model_save", [&] {
    const kformer_model& m = live(model);
    require_pointer(path, "path");
    save(m, path);
  });
}

int kformer_model_destroy(kformer_model** model) {
  return guarded("kformer_model_destroy", [&] {
    require_pointer(model, "model");
    live(static_cast<const kformer_model*>(*model));
    {
      const std::lock_guard<std::mutex> lock(registry_mutex);
      live_models.erase(*model);
    }
    delete *model;
    *model = nullptr;
  });
}

int kformer_model_state_dim(const kformer_model* model, int64_t* dim) {
  return guarded("kformer_model_state_dim", [&] {
    const kformer_model& m = live(model);
    require_pointer(dim, "dim");
    *dim = m.config.state_dim;
  });
}

int kformer_model_parameter_count(const kformer_model* model, int64_t* count) {
  return guarded("kformer_model_parameter_count", [&] {
    const kformer_model& m = live(model);
    require_pointer(count, "count");
    *count = m.visit([](auto& e) { return std::int64_t(e.parameters.values().extent(0)); });
  });
}

int kformer_model_step_count(const kformer_model* model, int64_t* steps) {
  return guarded("kformer_model_step_count", [&] {
    const kformer_model& m = live(model);
    require_pointer(steps, "steps");
    *steps = m.steps;
  });
}

int kformer_forward(kformer_model* model, const double* input, int64_t batch, int64_t seq,
                    int64_t dim, double* output) {
  return guarded("kformer_forward", [&] { forward(live(model), input, batch, seq, dim, output); });
}

int kformer_forward_f32(kformer_model* model, const float* input, int64_t batch, int64_t seq,
                        int64_t dim, float* output) {
  return guarded("kformer_forward_f32",
                 [&] { forward(live(model), input, batch, seq, dim, output); });
}

int kformer_train_step(kformer_model* model, const double* input, const double* target,
                       int64_t batch, int64_t seq, int64_t dim, double* loss) {
  return guarded("kformer_train_step",
                 [&] { train_step(live(model), input, target, batch, seq, dim, loss); });
}

int kformer_train_step_f32(kformer_model* model, const float* input, const float* target,
                           int64_t batch, int64_t seq, int64_t dim, double* loss) {
  return guarded("kformer_train_step_f32",
                 [&] { train_step(live(model), input, target, batch, seq, dim, loss); });
}

}  // extern "C"

// A model's weights by their PyTorch / TST state_dict names, in safetensors: saving, and loading
// with PyTorch's strict and non-strict semantics. Both walk the model's one parameter walk
// (visit_parameters) and its BatchNorm buffers, so names, shapes and order have one source.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "../core/safetensors.hpp"
#include "../core/safetensors_kokkos.hpp"
#include "../core/tensor.hpp"

namespace kformer {

struct LoadOptions {
  bool strict = true;                       // every key present, none unexpected, shapes equal
  std::vector<std::string> skip_prefixes;   // model keys left as they are ("output_layer.")
  std::vector<std::string> other_prefixes;  // file keys that are not model state ("optimizer.")
};

struct LoadReport {
  std::vector<std::string> loaded, missing, unexpected, mismatched, skipped;
};

namespace detail {

// A model walks its parameters (visit_parameters, required); BatchNorm running statistics
// (visit_buffers), BatchNorm counters (visit_batch_norms), tables it computes but stores for
// PyTorch (visit_computed_state) and a fixed encoding (has_fixed_positional_encoding) are optional:
// a model without them has none of that state.
struct AnyVisitor {
  template <class... Args>
  void operator()(Args&&...) const {}
};
template <class Model, class = void>
struct has_visit_buffers : std::false_type {};
template <class Model>
struct has_visit_buffers<Model,
                         std::void_t<decltype(std::declval<Model&>().visit_buffers(AnyVisitor{}))>>
    : std::true_type {};
template <class Model, class = void>
struct has_visit_batch_norms : std::false_type {};
template <class Model>
struct has_visit_batch_norms<
    Model, std::void_t<decltype(std::declval<Model&>().visit_batch_norms(AnyVisitor{}))>>
    : std::true_type {};
template <class Model, class ExecutionSpace, class = void>
struct has_visit_computed_state : std::false_type {};
template <class Model, class ExecutionSpace>
struct has_visit_computed_state<Model, ExecutionSpace,
                                std::void_t<decltype(std::declval<Model&>().visit_computed_state(
                                    std::declval<const ExecutionSpace&>(), AnyVisitor{}))>>
    : std::true_type {};
template <class Model, class = void>
struct has_fixed_encoding_query : std::false_type {};
template <class Model>
struct has_fixed_encoding_query<
    Model, std::void_t<decltype(std::declval<const Model&>().has_fixed_positional_encoding())>>
    : std::true_type {};

template <class Model, class F>
void visit_buffers_of(Model& model, F&& f) {
  if constexpr (has_visit_buffers<Model>::value) model.visit_buffers(f);
}
template <class Model, class F>
void visit_batch_norms_of(Model& model, F&& f) {
  if constexpr (has_visit_batch_norms<Model>::value) model.visit_batch_norms(f);
}
template <class ExecutionSpace, class Model, class F>
void visit_computed_state_of(const ExecutionSpace& exec, Model& model, F&& f) {
  if constexpr (has_visit_computed_state<Model, ExecutionSpace>::value)
    model.visit_computed_state(exec, f);
}
template <class Model>
bool has_fixed_positional_encoding_of(const Model& model) {
  if constexpr (has_fixed_encoding_query<Model>::value)
    return model.has_fixed_positional_encoding();
  else
    return false;
}

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// torch.compile saves "_orig_mod.<name>"; DataParallel "module.<name>".
inline std::string strip_wrapper_prefix(const std::string& name) {
  for (const char* prefix : {"_orig_mod.", "module."})
    if (starts_with(name, prefix)) return name.substr(std::string(prefix).size());
  return name;
}

// Same element count and the same extents once size-1 axes are dropped ((L, 1, d) = (L, d)).
inline bool compatible_shapes(std::vector<std::int64_t> a, std::vector<std::int64_t> b) {
  const auto squeeze = [](std::vector<std::int64_t>& v) {
    v.erase(std::remove(v.begin(), v.end(), 1), v.end());
  };
  squeeze(a);
  squeeze(b);
  return a == b;
}

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// Copies a floating-point tensor of any dtype into a flat view of the same element count.
template <class ViewType>
void load_values(const safetensors::File& file, const std::string& name, const ViewType& view) {
  using Value = typename ViewType::non_const_value_type;
  if constexpr (std::is_same_v<Value, float>)
    copy_to_view(file.to_float(name), view, "tensor '" + name + "'");
  else
    copy_to_view(file.to_double(name), view, "tensor '" + name + "'");
}

// "" when the file's pos_enc.pe (file_name) is the fixed sinusoid `model` computes, over the rows
// both have; otherwise what differs. PyTorch builds TST's table in float32, whose sin and cos of
// arguments up to p lose about p * 2^-24: the tolerance grows with the position. A learned table
// (values near 0) or another base fails by orders of magnitude more.
template <class ExecutionSpace, class Model>
std::string fixed_table_difference(const ExecutionSpace& exec, Model& model,
                                   const safetensors::File& file, const std::string& file_name) {
  std::string problem;
  visit_computed_state_of(
      exec, model,
      [&](const std::string& name, const std::vector<std::int64_t>& shape, const auto& v) {
        if (name != "pos_enc.pe") return;
        const auto& info = file.info(file_name);
        const std::int64_t d = shape.back();
        if (info.shape.empty() || info.shape.back() != d || info.numel() % d != 0) {
          problem = "file " + shape_text(info.shape) + ", model " + shape_text(shape);
          return;
        }
        const auto mine = to_host(v);
        const auto theirs = file.to_double(file_name);
        const std::int64_t rows = std::min<std::int64_t>(info.numel() / d, shape[0]);
        for (std::int64_t i = 0; i < rows * d && problem.empty(); ++i) {
          const double expected = static_cast<double>(mine.data()[i]);
          const std::int64_t position = i / d;
          const double tolerance = 1e-5 + 4.0 * static_cast<double>(position) * 0x1p-24;
          if (!(std::abs(theirs[i] - expected) <= tolerance))
            problem = "the file's table is not the fixed sinusoid the model computes: (" +
                      std::to_string(i / d) + ", 0, " + std::to_string(i % d) + ") is " +
                      std::to_string(theirs[i]) + ", the sinusoid " + std::to_string(expected) +
                      " (a learnable encoding? configure pos_encoding learnable)";
        }
      });
  return problem;
}

}  // namespace detail

// Adds the model's parameters and BatchNorm state under their state_dict names to `writer`:
// values in the model's scalar type, running statistics, num_batches_tracked as an int64 scalar,
// and the computed tables TST keeps in its state_dict (so that PyTorch loads the file strictly).
template <class ExecutionSpace, class Model>
void add_state_dict(const ExecutionSpace& exec, safetensors::Writer& writer, Model& model) {
  model.visit_parameters([&](const std::string& name, auto& p) {
    const auto h = to_host(p.value);
    writer.add(name, p.shape,
               std::vector<typename decltype(h)::value_type>(h.data(), h.data() + h.size()));
  });
  detail::visit_buffers_of(model, [&](const std::string& name, auto& v) {
    const auto h = to_host(v);
    writer.add(name, {std::int64_t(h.size())},
               std::vector<typename decltype(h)::value_type>(h.data(), h.data() + h.size()));
  });
  detail::visit_batch_norms_of(model, [&](const std::string& name, auto& bn) {
    writer.add(name + ".num_batches_tracked", {},
               std::vector<std::int64_t>{bn.num_batches_tracked()});
  });
  detail::visit_computed_state_of(
      exec, model,
      [&](const std::string& name, const std::vector<std::int64_t>& shape, const auto& v) {
        const auto h = to_host(v);
        writer.add(name, shape,
                   std::vector<typename decltype(h)::value_type>(h.data(), h.data() + h.size()));
      });
}

namespace detail {

// Model key -> file key, the file's keys stripped of wrapper prefixes; two file keys that name
// one model key are refused.
inline std::map<std::string, std::string> keys_by_model_name(const safetensors::File& file,
                                                             const std::string& where) {
  std::map<std::string, std::string> by_name;
  for (const auto& info : file.tensors()) {
    const std::string key = strip_wrapper_prefix(info.name);
    if (by_name.count(key))
      fail(where, file.source(), ": both '", by_name[key], "' and '", info.name, "' name ", key);
    by_name[key] = info.name;
  }
  return by_name;
}

// Sorts every model key into report (skipped, missing, mismatched) or the returned keys to
// load, and marks in `used` the model keys the file has.
template <class Model>
std::vector<std::string> plan_load(Model& model, const safetensors::File& file,
                                   const std::map<std::string, std::string>& by_name,
                                   const LoadOptions& options, std::set<std::string>& used,
                                   LoadReport& report) {
  const auto classify = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    if (std::any_of(options.skip_prefixes.begin(), options.skip_prefixes.end(),
                    [&](const std::string& prefix) { return starts_with(name, prefix); })) {
      report.skipped.push_back(name);
      if (by_name.count(name)) used.insert(name);
      return false;
    }
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      report.missing.push_back(name);
      return false;
    }
    used.insert(name);
    const auto& info = file.info(it->second);
    if (!compatible_shapes(info.shape, shape)) {
      report.mismatched.push_back(name + ": file " + shape_text(info.shape) + ", model " +
                                  shape_text(shape));
      return false;
    }
    return true;
  };
  std::vector<std::string> to_load;
  model.visit_parameters([&](const std::string& name, auto& p) {
    if (classify(name, p.shape)) to_load.push_back(name);
  });
  visit_buffers_of(model, [&](const std::string& name, auto& v) {
    if (classify(name, {std::int64_t(v.size())})) to_load.push_back(name);
  });
  visit_batch_norms_of(model, [&](const std::string& name, auto&) {
    if (classify(name + ".num_batches_tracked", {}))
      to_load.push_back(name + ".num_batches_tracked");
  });
  return to_load;
}

// The file's keys that the model does not use: unexpected, except those under other_prefixes and
// TST's fixed table pos_enc.pe, which must be the sinusoid the model computes.
template <class ExecutionSpace, class Model>
void report_unused_file_keys(const ExecutionSpace& exec, Model& model,
                             const safetensors::File& file,
                             const std::map<std::string, std::string>& by_name,
                             const std::set<std::string>& used, const LoadOptions& options,
                             LoadReport& report) {
  for (const auto& entry : by_name) {
    // A named copy, not a structured binding: C++17 lambdas cannot capture bindings (clang).
    const std::string& key = entry.first;
    const std::string& file_name = entry.second;
    if (used.count(key)) continue;
    if (std::any_of(options.other_prefixes.begin(), options.other_prefixes.end(),
                    [&](const std::string& p) { return starts_with(key, p); }))
      continue;
    if (key == "pos_enc.pe" && has_fixed_positional_encoding_of(model)) {
      const std::string problem = fixed_table_difference(exec, model, file, file_name);
      if (!problem.empty()) report.mismatched.push_back("pos_enc.pe: " + problem);
      continue;
    }
    report.unexpected.push_back(file_name);
  }
}

// One kformer::Error listing every missing, unexpected and mismatched key.
inline void fail_on_mismatch(const safetensors::File& file, const LoadReport& report,
                             const std::string& where) {
  if (report.missing.empty() && report.unexpected.empty() && report.mismatched.empty()) return;
  std::string message;
  const auto list = [&](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    message += std::string("\n  ") + what + " (" + std::to_string(keys.size()) + "):";
    for (const auto& k : keys)
      message += "\n    " + k;
  };
  list("missing keys", report.missing);
  list("unexpected keys", report.unexpected);
  list("shape mismatches", report.mismatched);
  fail(where, file.source(), " does not match the model (strict load):", message);
}

// What the keys to load must hold, checked before anything is written: weights and buffers
// stored as floating point (an integer tensor in their place is a corrupt or foreign file, not
// weights to convert) and finite, running variances not negative, num_batches_tracked an integer
// that is not negative.
inline void validate_values(const safetensors::File& file,
                            const std::map<std::string, std::string>& by_name,
                            const std::vector<std::string>& to_load, const std::string& where) {
  using safetensors::Dtype;
  for (const auto& name : to_load) {
    const std::string& file_name = by_name.at(name);
    const Dtype dtype = file.info(file_name).dtype;
    const bool floating =
        dtype == Dtype::F16 || dtype == Dtype::BF16 || dtype == Dtype::F32 || dtype == Dtype::F64;
    if (ends_with(name, ".num_batches_tracked")) {
      if (floating || dtype == Dtype::BOOL)
        fail(where, file.source(), ": tensor '", file_name, "' is ", safetensors::dtype_name(dtype),
             "; num_batches_tracked must be an integer");
      const auto count = file.to_int64(file_name);
      if (count.size() != 1 || count[0] < 0)
        fail(where, file.source(), ": tensor '", file_name, "' must hold one count of at least 0");
      continue;
    }
    if (!floating)
      fail(where, file.source(), ": tensor '", file_name, "' is ", safetensors::dtype_name(dtype),
           "; weights and buffers must be F16, BF16, F32 or F64");
    const auto values = file.to_double(file_name);
    const bool variance = ends_with(name, ".running_var");
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i]))
        fail(where, file.source(), ": tensor '", file_name, "' holds ", values[i], " at element ",
             i, "; weights must be finite");
      if (variance && values[i] < 0)
        fail(where, file.source(), ": tensor '", file_name, "' holds ", values[i], " at element ",
             i, "; a running variance cannot be negative");
    }
  }
}

// Copies the planned keys into the model.
template <class ExecutionSpace, class Model>
void copy_planned(const ExecutionSpace& exec, Model& model, const safetensors::File& file,
                  const std::map<std::string, std::string>& by_name,
                  const std::vector<std::string>& to_load) {
  const auto wanted = [&](const std::string& name) {
    return std::find(to_load.begin(), to_load.end(), name) != to_load.end();
  };
  model.visit_parameters([&](const std::string& name, auto& p) {
    if (wanted(name)) load_values(file, by_name.at(name), p.value);
  });
  visit_buffers_of(model, [&](const std::string& name, auto& v) {
    if (wanted(name)) load_values(file, by_name.at(name), v);
  });
  visit_batch_norms_of(model, [&](const std::string& name, auto& bn) {
    const std::string key = name + ".num_batches_tracked";
    if (wanted(key)) bn.set_num_batches_tracked(file.to_int64(by_name.at(key)).at(0));
  });
  exec.fence();
}

}  // namespace detail

// Loads parameters and BatchNorm state from `file` into the model. Keys not in the model are
// `unexpected` (TST's fixed-encoding buffer pos_enc.pe is checked against the sinusoid when the
// model computes its encoding), model keys not in the file `missing`, shapes that differ (beyond
// size-1 axes) `mismatched`. In strict mode any of these is one kformer::Error listing all of them,
// raised before anything is written; otherwise the matching keys load and the report says the rest.
// Values are validated (detail::validate_values) before anything is written too.
template <class ExecutionSpace, class Model>
LoadReport load_state_dict(const ExecutionSpace& exec, Model& model, const safetensors::File& file,
                           const LoadOptions& options = {}) {
  const std::string where = "kformer::load_state_dict";
  const auto by_name = detail::keys_by_model_name(file, where);
  LoadReport report;
  std::set<std::string> used;
  const auto to_load = detail::plan_load(model, file, by_name, options, used, report);
  detail::report_unused_file_keys(exec, model, file, by_name, used, options, report);
  if (options.strict) detail::fail_on_mismatch(file, report, where);
  detail::validate_values(file, by_name, to_load, where);
  detail::copy_planned(exec, model, file, by_name, to_load);
  report.loaded = to_load;
  return report;
}

}  // namespace kformer

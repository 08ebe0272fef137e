// Small helpers shared by the test files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "tolerances.h"
#include "posenc/config.h"
#include "posenc/tasks/registry.h"
#include "posenc/positional/scheme.h"
#include "posenc/train/checkpoint.h"

namespace posenc::testing {

/// A config from the defaults with `path=value` overrides applied.
inline Config config_with(const std::vector<std::string>& overrides) {
  json j = json::object();
  for (const auto& o : overrides) apply_override(j, o);
  return config_from_json(j);
}
inline Config config_with(std::initializer_list<std::string> overrides) {
  return config_with(std::vector<std::string>(overrides));
}

/// A scheme built from its registry entry with default options (plus overrides).
inline PositionalScheme scheme_with(const std::string& type, const SchemeContext& ctx,
                                    const json& options = json::object()) {
  const auto& info = find_scheme(type);
  return info.make(ctx, resolve_scheme_options(info, options, "test"));
}

/// Positions 0..L-1 for queries and keys.
inline Positions arange_positions(int64_t L, ForwardCache* cache = nullptr) {
  auto ids = torch::arange(L, torch::kLong);
  return Positions{ids, ids, L, cache};
}

/// An empty scratch directory name under the system's temp directory (not created).
inline std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("posenc_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

/// A tiny ordering run (seconds) writing to `dir`, plus `path=value` overrides.
inline Config small_config(const std::filesystem::path& dir, const std::vector<std::string>& extra = {}) {
  json j = json::object();
  for (const auto* o :
       {"model.d_model=32", "model.heads=2", "model.layers=2", "model.d_ff=64", "task.vocab_size=16",
        "task.min_length=4", "task.max_length=8", "train.batch_size=32", "train.log_every=10", "train.eval_every=1000",
        "train.val_samples=200", "eval.samples_per_length=200", "eval.lengths=[8,16]", "train.warmup_steps=20"})
    apply_override(j, o);
  apply_override(j, "train.out_dir=" + json(dir.string()).dump());
  for (const auto& e : extra) apply_override(j, e);
  return config_from_json(j);
}

/// The message of the ConfigError that `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

/// The error reading a config of these overrides gives, or "(no error)".
inline std::string config_error(std::initializer_list<std::string> overrides) {
  return error_of([&] {
    json j = json::object();
    for (const auto& s : overrides) apply_override(j, s);
    config_from_json(j);
  });
}

/// The parameters stored in a checkpoint, in model order.
inline std::vector<torch::Tensor> parameters_of(const std::string& ckpt) {
  auto model = load_model(ckpt, torch::kCPU);
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace posenc::testing

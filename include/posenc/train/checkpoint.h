// Checkpoints: model, optimizer, step, RNG state, the trainer's running state
// and the resolved config.
//
// Format 2 (written since the reliability work): a 32-byte header (magic
// "PECKPT02", payload size, FNV-1a 64 checksum of the payload, reserved) and a
// torch archive as the payload. The size and checksum are verified before
// torch parses a byte, so a truncated or bit-flipped file is an error naming
// it, never a silent load of damaged weights. Format 1 (a bare torch archive,
// no checksum) still loads. Written atomically (temp file, fsync, rename);
// never from non-finite weights.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"

namespace posenc {

/// Writes a checkpoint; optimizer may be null (model-only checkpoint). `state`
/// is the trainer's own running state (times, running sums), stored as JSON.
/// Throws std::runtime_error, writing nothing, if a parameter is not finite.
void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer* optimizer, int64_t step,
                     const Config& config, const nlohmann::json& state = nlohmann::json::object());

/// The name of the first parameter holding NaN or inf, or "" if all are finite.
std::string first_non_finite_parameter(Transformer& model);

/// Reads only the config stored in a checkpoint. Errors name the file.
Config read_checkpoint_config(const std::string& path);

/// Loads model (and optimizer, and the RNG state of the model's device) from a
/// checkpoint written for the same config; returns the step it was taken at
/// and, if `state` is given, the trainer state stored with it ({} if none).
int64_t load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer* optimizer,
                        nlohmann::json* state = nullptr);

/// Builds the model a checkpoint describes and loads its weights onto `device`.
Transformer load_model(const std::string& path, torch::Device device, Config* config_out = nullptr);

/// Builds the model of `config` (the checkpoint's, with evaluation-time changes
/// such as RoPE scaling) and loads the checkpoint's weights into it; a change
/// that alters the parameters is a ConfigError naming the file.
Transformer load_model_as(const std::string& path, torch::Device device, const Config& config);

/// train.init_from: copies the parameters of the model the checkpoint at
/// `path` holds into `model`, by name. Every one of them must be a parameter
/// of `model` of the same shape, else a ConfigError naming the file and the
/// parameter; returns the names of `model`'s parameters the checkpoint lacks,
/// which keep their values (model.attention.head_scale's, added for tuning).
/// Buffers are not copied: the config rebuilds them.
std::vector<std::string> init_weights_from(const std::string& path, Transformer& model);

/// Whether a parameter's name (as named_parameters() gives it) is a head
/// scale's lambda (model.attention.head_scale; train.trainable head_scale).
bool is_head_scale(const std::string& parameter_name);

}  // namespace posenc

// Checkpoints: model, optimizer, step, RNG state and the resolved config, in
// one torch archive written atomically (temp file, then rename).
#pragma once

#include <string>

#include <torch/torch.h>

#include "posenc/config.h"
#include "posenc/model/transformer.h"

namespace posenc {

/// Writes a checkpoint; optimizer may be null (model-only checkpoint).
void save_checkpoint(const std::string& path, EncoderClassifier& model, torch::optim::Optimizer* optimizer,
                     int64_t step, const Config& config);

/// Reads only the config stored in a checkpoint. Errors name the file.
Config read_checkpoint_config(const std::string& path);

/// Loads model (and optimizer, and the RNG state of the model's device) from a
/// checkpoint written for the same config; returns the step it was taken at.
int64_t load_checkpoint(const std::string& path, EncoderClassifier& model, torch::optim::Optimizer* optimizer);

/// Builds the model a checkpoint describes and loads its weights onto `device`.
EncoderClassifier load_model(const std::string& path, torch::Device device, Config* config_out = nullptr);

}  // namespace posenc

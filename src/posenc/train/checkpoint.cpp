#include "posenc/train/checkpoint.h"

#include <filesystem>
#include <unistd.h>

#include <spdlog/spdlog.h>

namespace posenc {
namespace {

constexpr int64_t kFormatVersion = 1;

torch::Generator& default_generator(torch::Device device) {
  return const_cast<torch::Generator&>(at::globalContext().defaultGenerator(device));
}

/// Tensors land on `device` whatever device wrote them: a CUDA run's checkpoint
/// loads on a machine without a GPU and the other way round.
torch::serialize::InputArchive open_archive(const std::string& path, torch::Device device = torch::kCPU) {
  if (!std::filesystem::exists(path)) throw ConfigError(path + ": checkpoint not found");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& e) {
    throw ConfigError(path + ": not a readable posenc checkpoint (" + e.what_without_backtrace() + ")");
  }
  return archive;
}

Config config_of(torch::serialize::InputArchive& archive, const std::string& path) {
  c10::IValue version, text;
  if (!archive.try_read("format_version", version) || !archive.try_read("config", text))
    throw ConfigError(path + ": not a posenc checkpoint (no format_version/config entry)");
  if (version.toInt() != kFormatVersion)
    throw ConfigError(path + ": checkpoint format " + std::to_string(version.toInt()) + ", this build reads " +
                      std::to_string(kFormatVersion));
  try {
    return config_from_json(nlohmann::json::parse(text.toStringRef()));
  } catch (const std::exception& e) {
    throw ConfigError(path + ": stored config is invalid: " + e.what());
  }
}

/// Puts back the dropout generator of `device`. A run resumed on another kind
/// of device continues with the weights and optimizer state but a fresh
/// dropout stream (CPU and CUDA generators are different algorithms).
void restore_rng(torch::serialize::InputArchive& archive, torch::Device device, const std::string& path) {
  torch::Tensor cpu_state, cuda_state;
  archive.read("rng", cpu_state, /*is_buffer=*/true);
  default_generator(torch::kCPU).set_state(cpu_state.cpu());
  const bool has_cuda = archive.try_read("rng_cuda", cuda_state, /*is_buffer=*/true);
  if (device.is_cuda() && has_cuda) default_generator(device).set_state(cuda_state.cpu());
  else if (device.is_cuda() || has_cuda)
    spdlog::warn("{} was written on {}, resuming on {}: dropout continues with a new random stream, so the run is "
                 "not bit-identical to an uninterrupted one",
                 path, has_cuda ? "cuda" : "cpu", device.str());
}

}  // namespace

void save_checkpoint(const std::string& path, EncoderClassifier& model, torch::optim::Optimizer* optimizer,
                     int64_t step, const Config& config) {
  torch::serialize::OutputArchive archive;
  archive.write("format_version", c10::IValue(kFormatVersion));
  archive.write("config", c10::IValue(config_to_json(config).dump()));
  archive.write("step", c10::IValue(step));
  torch::serialize::OutputArchive model_archive;
  model->save(model_archive);
  archive.write("model", model_archive);
  if (optimizer) {
    torch::serialize::OutputArchive optim_archive;
    optimizer->save(optim_archive);
    archive.write("optimizer", optim_archive);
  }
  // Dropout draws from the generator of the model's device: keep the CPU one
  // always ("rng", as format 1 always did) and the CUDA one when it is in use.
  archive.write("rng", default_generator(torch::kCPU).get_state(), /*is_buffer=*/true);
  const auto device = model->parameters().front().device();
  if (device.is_cuda()) archive.write("rng_cuda", default_generator(device).get_state(), /*is_buffer=*/true);

  namespace fs = std::filesystem;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  archive.save_to(tmp);
  fs::rename(tmp, target);
}

Config read_checkpoint_config(const std::string& path) {
  auto archive = open_archive(path);
  return config_of(archive, path);
}

int64_t load_checkpoint(const std::string& path, EncoderClassifier& model, torch::optim::Optimizer* optimizer) {
  const torch::Device device = model->parameters().front().device();
  auto archive = open_archive(path, device);
  config_of(archive, path);
  c10::IValue step;
  archive.read("step", step);
  try {
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model->load(model_archive);
    if (optimizer) {
      torch::serialize::InputArchive optim_archive;
      if (!archive.try_read("optimizer", optim_archive))
        throw ConfigError(path + ": checkpoint has no optimizer state; it cannot resume training");
      optimizer->load(optim_archive);
      restore_rng(archive, device, path);
    }
  } catch (const c10::Error& e) {
    throw ConfigError(path + ": checkpoint does not match the model (" + e.what_without_backtrace() + ")");
  }
  return step.toInt();
}

EncoderClassifier load_model(const std::string& path, torch::Device device, Config* config_out) {
  Config cfg = read_checkpoint_config(path);
  EncoderClassifier model(cfg.model, cfg.task.vocab_size);
  load_checkpoint(path, model, nullptr);
  model->to(device);
  model->eval();
  if (config_out) *config_out = cfg;
  return model;
}

}  // namespace posenc

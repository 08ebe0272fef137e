#include "posenc/train/checkpoint.h"

#include <filesystem>
#include <unistd.h>

namespace posenc {
namespace {

constexpr int64_t kFormatVersion = 1;

torch::Generator& default_generator(torch::Device device) {
  return const_cast<torch::Generator&>(at::globalContext().defaultGenerator(device));
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  if (!std::filesystem::exists(path)) throw ConfigError(path + ": checkpoint not found");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
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
  const auto device = model->parameters().front().device();
  archive.write("rng", default_generator(device).get_state(), /*is_buffer=*/true);

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
  auto archive = open_archive(path);
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
      torch::Tensor rng;
      archive.read("rng", rng, /*is_buffer=*/true);
      default_generator(model->parameters().front().device()).set_state(rng);
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

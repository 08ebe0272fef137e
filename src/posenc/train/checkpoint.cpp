#include "posenc/train/checkpoint.h"
#include "posenc/tasks/registry.h"
#include "posenc/util/io.h"
#include "posenc/util/text.h"

#include <cstring>
#include <sstream>

#include <spdlog/spdlog.h>

namespace posenc {
namespace {

constexpr int64_t kLegacyFormat = 1;   // a bare torch archive
constexpr int64_t kFormatVersion = 2;  // header + checksum + torch archive
constexpr char kMagic[8] = {'P', 'E', 'C', 'K', 'P', 'T', '0', '2'};
constexpr size_t kHeaderSize = 32;

uint64_t fnv1a64(const char* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64(const std::string& in, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

torch::Generator& default_generator(torch::Device device) {
  return const_cast<torch::Generator&>(at::globalContext().defaultGenerator(device));
}

/// A checkpoint's bytes, checked and opened. Tensors land on `device` whatever
/// device wrote them: a CUDA run's checkpoint loads on a machine without a GPU
/// and the other way round.
struct OpenedCheckpoint {
  torch::serialize::InputArchive archive;
  int64_t format = kFormatVersion;
};

OpenedCheckpoint open_checkpoint(const std::string& path, torch::Device device = torch::kCPU) {
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const IoError& e) {
    throw ConfigError(std::string(e.what()) + " (checkpoint)");
  }
  OpenedCheckpoint opened;
  const char* payload = bytes.data();
  size_t payload_size = bytes.size();
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0) {
    opened.format = kLegacyFormat;  // format 1: no checksum to verify
  } else {
    if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
      throw ConfigError(path + ": not a posenc checkpoint (" +
                        (bytes.size() < kHeaderSize ? std::to_string(bytes.size()) + " bytes, no header"
                                                    : std::string("unknown header")) +
                        ")");
    const uint64_t size = get_u64(bytes, 8), checksum = get_u64(bytes, 16), reserved = get_u64(bytes, 24);
    if (reserved != 0) throw ConfigError(path + ": checkpoint is corrupted: its header's reserved field is not zero");
    if (size != bytes.size() - kHeaderSize)
      throw ConfigError(path + ": checkpoint is truncated or padded: its header announces " + std::to_string(size) +
                        " bytes of data, the file holds " + std::to_string(bytes.size() - kHeaderSize));
    payload = bytes.data() + kHeaderSize;
    payload_size = size;
    if (fnv1a64(payload, payload_size) != checksum)
      throw ConfigError(path +
                        ": checkpoint is corrupted: its checksum does not match its contents (the file "
                        "changed after it was written)");
  }
  // A damaged archive without the header's checksum (format 1) reaches
  // LibTorch's reader, whose errors may span lines, quote the damaged bytes or
  // be bad_alloc: each becomes one line that names the file.
  try {
    opened.archive.load_from(payload, payload_size, device);
  } catch (const c10::Error& e) {
    throw ConfigError(path + ": not a readable posenc checkpoint (" + one_line(e.what_without_backtrace()) + ")");
  } catch (const std::bad_alloc&) {
    throw ConfigError(path + ": not a readable posenc checkpoint (it announces more data than memory holds)");
  } catch (const std::exception& e) {
    throw ConfigError(path + ": not a readable posenc checkpoint (" + one_line(e.what()) + ")");
  }
  return opened;
}

/// Any torch error while reading the archive's entries, named by file.
template <typename F>
auto reading(const std::string& path, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigError&) {
    throw;
  } catch (const c10::Error& e) {
    throw ConfigError(path + ": " + what + " (" + one_line(e.what_without_backtrace()) + ")");
  } catch (const std::bad_alloc&) {
    throw ConfigError(path + ": " + what + " (it announces more data than memory holds)");
  } catch (const std::exception& e) {
    throw ConfigError(path + ": " + what + " (" + one_line(e.what()) + ")");
  }
}

Config config_of(OpenedCheckpoint& opened, const std::string& path) {
  return reading(path, "cannot read the stored config", [&] {
    c10::IValue version, text;
    if (!opened.archive.try_read("format_version", version) || !opened.archive.try_read("config", text) ||
        !version.isInt() || !text.isString())
      throw ConfigError(path + ": not a posenc checkpoint (no format_version/config entry)");
    if (version.toInt() == kFormatVersion && opened.format == kLegacyFormat)
      throw ConfigError(path + ": checkpoint is damaged: its " + std::to_string(kHeaderSize) +
                        "-byte header (size and checksum) is missing, so its contents cannot be verified (was it "
                        "cut or rewritten by another tool?)");
    if (version.toInt() != opened.format)
      throw ConfigError(path + ": checkpoint format " + std::to_string(version.toInt()) + ", this build reads " +
                        std::to_string(kLegacyFormat) + " and " + std::to_string(kFormatVersion));
    try {
      return config_from_json(parse_json_strict(text.toStringRef(), "stored config"));
    } catch (const std::exception& e) {
      throw ConfigError(path + ": stored config is invalid: " + e.what());
    }
  });
}

/// Puts back the dropout generator of `device`. A run resumed on another kind
/// of device continues with the weights and optimizer state but a fresh
/// dropout stream (CPU and CUDA generators are different algorithms).
void restore_rng(torch::serialize::InputArchive& archive, torch::Device device, const std::string& path) {
  torch::Tensor cpu_state, cuda_state;
  archive.read("rng", cpu_state, /*is_buffer=*/true);
  default_generator(torch::kCPU).set_state(cpu_state.cpu());
  const bool has_cuda = archive.try_read("rng_cuda", cuda_state, /*is_buffer=*/true);
  if (device.is_cuda() && has_cuda)
    default_generator(device).set_state(cuda_state.cpu());
  else if (device.is_cuda() || has_cuda)
    spdlog::warn(
        "{} was written on {}, resuming on {}: dropout continues with a new random stream, so the run is "
        "not bit-identical to an uninterrupted one",
        path, has_cuda ? "cuda" : "cpu", device.str());
}

}  // namespace

std::string first_non_finite_parameter(Transformer& model) {
  for (const auto& p : model->named_parameters())
    if (!torch::isfinite(p.value()).all().item<bool>()) return p.key();
  return "";
}

void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer* optimizer, int64_t step,
                     const Config& config, const nlohmann::json& state) {
  if (const std::string bad = first_non_finite_parameter(model); !bad.empty())
    throw std::runtime_error("refusing to write " + path + ": parameter " + bad + " holds NaN or inf");
  torch::serialize::OutputArchive archive;
  archive.write("format_version", c10::IValue(kFormatVersion));
  archive.write("config", c10::IValue(config_to_json(config).dump()));
  archive.write("step", c10::IValue(step));
  archive.write("state", c10::IValue(state.dump()));
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

  std::ostringstream payload;
  archive.save_to(payload);
  const std::string data = payload.str();
  std::string file(kMagic, sizeof kMagic);
  put_u64(file, data.size());
  put_u64(file, fnv1a64(data.data(), data.size()));
  put_u64(file, 0);  // reserved
  file += data;
  write_file_atomic(path, file);
}

Config read_checkpoint_config(const std::string& path) {
  auto opened = open_checkpoint(path);
  return config_of(opened, path);
}

int64_t load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer* optimizer,
                        nlohmann::json* state) {
  const torch::Device device = model->parameters().front().device();
  auto opened = open_checkpoint(path, device);
  config_of(opened, path);
  auto& archive = opened.archive;
  const int64_t step = reading(path, "cannot read the step", [&] {
    c10::IValue v;
    archive.read("step", v);
    return v.toInt();
  });
  if (state) {
    *state = nlohmann::json::object();
    c10::IValue text;
    if (archive.try_read("state", text) && text.isString())
      *state =
          reading(path, "cannot read the trainer state", [&] { return nlohmann::json::parse(text.toStringRef()); });
  }
  reading(path, "checkpoint does not match the model", [&] {
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
    return 0;
  });
  return step;
}

Transformer load_model(const std::string& path, torch::Device device, Config* config_out) {
  Config cfg = read_checkpoint_config(path);
  if (config_out) *config_out = cfg;
  return load_model_as(path, device, cfg);
}

Transformer load_model_as(const std::string& path, torch::Device device, const Config& config) {
  Transformer model(config.model, task_vocab_size(config.task));
  load_checkpoint(path, model, nullptr);
  model->to(device);
  model->eval();
  return model;
}

namespace {
/// "[4, 64]": a tensor's shape, for an error message.
std::string shape_text(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}
}  // namespace

bool is_head_scale(const std::string& parameter_name) {
  static const std::string kName = "head_scale";
  const auto n = parameter_name.size(), k = kName.size();
  return parameter_name.compare(n < k ? 0 : n - k, std::string::npos, kName) == 0 &&
         (n == k || parameter_name[n - k - 1] == '.');
}

std::vector<std::string> init_weights_from(const std::string& path, Transformer& model) {
  const torch::Device device = model->parameters().front().device();
  Transformer source = [&] {
    try {
      return load_model(path, device);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("train.init_from: ") + e.what());  // which option named the file
    }
  }();
  auto target = model->named_parameters();
  const auto given = source->named_parameters();
  const std::string how =
      "; train.init_from needs a checkpoint of this model, which may add parameters (model.attention.head_scale) "
      "but not drop or reshape one";
  torch::NoGradGuard no_grad;
  for (const auto& p : given) {
    const torch::Tensor* into = target.find(p.key());
    if (into == nullptr)
      throw ConfigError(
          fmt::format("train.init_from {}: its parameter {} is not one of this model's{}", path, p.key(), how));
    if (into->sizes() != p.value().sizes())
      throw ConfigError(fmt::format("train.init_from {}: parameter {} is {} there but {} in this model{}", path,
                                    p.key(), shape_text(p.value()), shape_text(*into), how));
    into->copy_(p.value());
  }
  std::vector<std::string> kept;
  for (const auto& p : target)
    if (given.find(p.key()) == nullptr) kept.push_back(p.key());
  return kept;
}

}  // namespace posenc

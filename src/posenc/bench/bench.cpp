#include "posenc/bench/bench.h"
#include "posenc/compat.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "posenc/config_overlay.h"
#include "posenc/positional/registry.h"
#include "posenc/model/encoder.h"
#include "posenc/tasks/ordering.h"
#include "posenc/train/autocast.h"
#include "posenc/train/cuda_graphs.h"
#include "posenc/train/grad_clip.h"
#include "posenc/train/fits.h"
#include "posenc/train/trainer.h"
#include "posenc/tasks/registry.h"
#include "posenc/tasks/task.h"
#include "posenc/train/objective.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/io.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void synchronize(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize();
}

/// Peak memory: CPU resident set (VmHWM, reset through clear_refs), CUDA allocator peak.
void reset_peak_memory(const torch::Device& d) {
  if (d.is_cpu()) {
    std::ofstream("/proc/self/clear_refs") << "5";
    return;
  }
  compat::reset_cuda_peak_memory(d.index() < 0 ? 0 : d.index());
}

double peak_memory_mb(const torch::Device& d) {
  if (d.is_cpu()) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
    return 0;
  }
  return compat::cuda_peak_allocated_bytes(d.index() < 0 ? 0 : d.index()) / (1024.0 * 1024.0);
}

}  // namespace

// The batch and the length stand for train.batch_size and task.max_length and take their declared
// bounds; the step counts are bounded so that a slip cannot start a case without end.
const std::vector<OptionSpec>& bench_size_keys() {
  static const std::vector<OptionSpec> keys = [] {
    OptionSpec batch = config_key("train.batch_size"), length = config_key("task.max_length");
    batch.name = "batch_size";
    batch.default_value = nullptr;  // required
    batch.doc = "examples in the fixed batch";
    length.name = "length";
    length.default_value = nullptr;  // required
    length.doc = "the task's length of every example (as task.max_length)";
    return std::vector<OptionSpec>{batch,
                                   length,
                                   {"warmup", OptionKind::Int, 5, "untimed steps first", 1, 10000},
                                   {"timed", OptionKind::Int, 20, "timed steps (their median is reported)", 1, 10000}};
  }();
  return keys;
}

namespace {

/// The numbers of a size entry, checked against bench_size_keys(); "name" and "set" are read by the caller.
Options size_numbers(const json& size, const std::string& where) {
  json numbers = size;
  numbers.erase("name");
  numbers.erase("set");
  const Options o = resolve_options(bench_size_keys(), numbers, where, "a bench size", {"name", "set"});
  for (const auto& key : {"batch_size", "length"})
    if (o.json()[key].is_null()) throw ConfigError(where + "." + key + ": required (a positive integer)");
  return o;
}

/// The schemes of a bench file, with "all" (the whole value or an item) expanded to every registered scheme in
/// registry order, so that a new scheme is benchmarked without editing the file.
json expand_all_schemes(const json& schemes) {
  const json items = schemes.is_string() ? json::array({schemes}) : schemes;
  json out = json::array();
  for (const auto& item : items) {
    if (item == "all") {
      for (const auto& name : scheme_names()) out.push_back(name);
    } else {
      out.push_back(item);
    }
  }
  return out;
}

}  // namespace

const std::vector<FileKey>& bench_file_keys() {
  static const std::vector<FileKey> keys = {
      {"description", FileValue::Text, "what the file measures"},
      {"base", FileValue::Path, "the training config every case starts from", true},
      {"schemes", FileValue::Entries, "the schemes: a name sets model.positional.type; an entry's set may set any key",
       true, "", false, true},
      {"qkv", FileValue::Axis, "the attention variants (without it, both)", false, "model.attention.qkv"},
      {"sizes", FileValue::Blocks,
       "the sizes, each {\"name\", \"set\", and the numbers below}: its name, values set in its cases' configs "
       "(an object of \"dotted.path\": value, after the base) and the numbers",
       true},
  };
  return keys;
}

std::vector<BenchCase> plan_bench(const std::string& path, const std::vector<std::string>& only_sizes,
                                  const std::vector<std::string>& only_schemes, int64_t threads,
                                  const std::string& device) {
  const json spec = read_json_file(path);
  check_file_keys(spec, bench_file_keys(), path);
  const json base = read_json_file((fs::path(path).parent_path() / spec["base"].get<std::string>()).string());
  const json schemes = expand_all_schemes(spec["schemes"]);
  std::vector<std::string> qkvs = {"projected", "embedded"};
  if (spec.contains("qkv")) qkvs = spec["qkv"].get<std::vector<std::string>>();  // checked as model.attention.qkv

  std::set<std::string> size_names, scheme_names;
  std::vector<BenchCase> cases;
  for (size_t si = 0; si < spec["sizes"].size(); ++si) {
    const json& size = spec["sizes"][si];
    const std::string where = path + ".sizes[" + std::to_string(si) + "]";
    if (!size.contains("name") || !size["name"].is_string()) throw ConfigError(where + ".name: expected a string");
    const Options numbers = size_numbers(size, where);
    const std::string size_name = size["name"];
    size_names.insert(size_name);
    if (!only_sizes.empty() && std::find(only_sizes.begin(), only_sizes.end(), size_name) == only_sizes.end()) continue;
    for (size_t i = 0; i < schemes.size(); ++i) {
      const std::string swhere = path + ".schemes[" + std::to_string(i) + "]";
      const GridEntry entry = grid_entry(schemes[i], swhere);
      scheme_names.insert(entry.name);
      if (!only_schemes.empty() &&
          std::find(only_schemes.begin(), only_schemes.end(), entry.name) == only_schemes.end())
        continue;
      for (const auto& qkv : qkvs) {
        BenchCase c;
        c.size = size_name;
        c.scheme = entry.name;
        c.qkv = qkv;
        c.batch = numbers.get_int("batch_size");
        c.length = numbers.get_int("length");
        c.warmup = static_cast<int>(numbers.get_int("warmup"));
        c.timed = static_cast<int>(numbers.get_int("timed"));
        json j = base;
        if (size.contains("set")) apply_set(j, size["set"], where + ".set");
        apply_set(j, entry.set, swhere + ".set");
        set_json_path(j, "model.attention.qkv", qkv, path + ".qkv");
        set_json_path(j, "train.threads", threads, "--threads");
        set_json_path(j, "train.device", device, "--device");
        try {
          c.config = config_from_json(j);
          Transformer probe(c.config.model, task_vocab_size(c.config.task));
          const int64_t tokens = make_task(c.config.task)->sequence_length(c.length);
          probe->check_length(tokens);
          // Before any case runs, not when its batch is built: a size that cannot fit is refused at once.
          const torch::Device on(c.config.train.device == Device::Cuda ? torch::kCUDA : torch::kCPU);
          require_memory(
              training_memory_bytes(probe, tokens, c.batch, on), on, "a training step",
              fmt::format("{} examples of {} tokens, with the weights, gradients and AdamW's moments", c.batch, tokens),
              "lower " + where + ".batch_size or .length");
        } catch (const IncompatibleConfig& e) {
          c.skipped = e.what();
        } catch (const ConfigError& e) {
          throw ConfigError(swhere + " \"" + entry.name + "\" at size " + size_name + ": " + e.what());
        }
        cases.push_back(std::move(c));
      }
    }
  }
  for (const auto& s : only_sizes)
    if (!size_names.count(s)) throw ConfigError("--sizes " + s + ": " + path + " has no size of that name");
  for (const auto& s : only_schemes)
    if (!scheme_names.count(s)) throw ConfigError("--schemes " + s + ": " + path + " has no scheme entry of that name");
  return cases;
}

namespace {

/// The case's initial model (seeded by train.seed) and its fixed batch: what the
/// timing and the parity export both start from.
struct InitialCase {
  Transformer model;
  TaskBatch batch;
};

InitialCase initial_case(const BenchCase& c) {
  torch::manual_seed(static_cast<uint64_t>(c.config.train.seed));
  Transformer model(c.config.model, task_vocab_size(c.config.task));
  const auto task = make_task(c.config.task);
  task->check_eval_length(c.length);
  return {model, task->fixed_set(c.length, c.batch, c.config.train.seed)};
}

}  // namespace

namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

/// Calls body(kept) skip + kept_calls times with the device synchronized
/// around each call; the milliseconds of the kept calls (the first `skip` warm up).
template <class Body>
std::vector<double> timed_calls(torch::Device device, int skip, int kept_calls, Body body) {
  std::vector<double> ms;
  for (int i = 0; i < skip + kept_calls; ++i) {
    throw_if_interrupted();  // SIGINT/SIGTERM: stop between steps, not after a case of many
    synchronize(device);
    const auto t0 = Clock::now();
    body(i >= skip);
    synchronize(device);
    if (i >= skip) ms.push_back(ms_between(t0, Clock::now()));
  }
  return ms;
}

}  // namespace

BenchResult run_bench_case(const BenchCase& c, bool bf16, bool explicit_attention) {
  const torch::Device device = resolve_device(c.config.train.device);
  set_threads(c.config.train.threads);
  reset_peak_memory(device);
  auto [model, batch] = initial_case(c);
  model->to(device);
  model->force_explicit_attention(explicit_attention);
  auto optimizer = make_optimizer(model, c.config.train);
  batch.tokens = batch.tokens.to(device);
  if (batch.labels.defined()) batch.labels = batch.labels.to(device);
  const auto tokens = batch.tokens;
  const int64_t T = tokens.size(1);
  // What the model reads: the whole example (encoder), all but the last token (decoder).
  const auto inputs = model->is_decoder() ? tokens.narrow(1, 0, T - 1) : tokens;

  BenchResult r;
  for (const auto& p : model->parameters()) r.parameters += p.numel();
  {
    c10::InferenceMode guard;
    r.initial_loss = task_objective(model, batch).loss.item<double>();
  }
  model->train();
  std::vector<double> forward_ms, backward_ms, optimizer_ms;
  const std::vector<double> step_ms = timed_calls(device, c.warmup, c.timed, [&](bool kept) {
    const auto t0 = Clock::now();
    torch::Tensor loss;
    {
      AutocastGuard autocast(bf16, device);
      loss = task_objective(model, batch).loss;
    }
    synchronize(device);
    const auto t1 = Clock::now();
    optimizer.zero_grad();
    loss.backward();
    synchronize(device);
    const auto t2 = Clock::now();
    if (c.config.train.grad_clip > 0) clip_grad_norm(model->parameters(), c.config.train.grad_clip);
    optimizer.step();
    synchronize(device);
    if (!kept) return;
    forward_ms.push_back(ms_between(t0, t1));
    backward_ms.push_back(ms_between(t1, t2));
    optimizer_ms.push_back(ms_between(t2, Clock::now()));
  });
  r.forward_ms = median(forward_ms);
  r.backward_ms = median(backward_ms);
  r.optimizer_ms = median(optimizer_ms);
  if (device.is_cuda() && cuda_graphs_compiled() && model->capturable()) {
    // The same step as the trainer's graphed_step captures it: gradients
    // zeroed in place, forward, backward, clipping, AdamW from device tensors.
    GraphCache graphs(/*eager_calls=*/2);
    Transformer& net = model;  // a lambda cannot capture structured bindings in C++17
    const TaskBatch& fixed = batch;
    const auto f32 = torch::TensorOptions().device(device).dtype(torch::kFloat);
    const auto lr = torch::full({}, c.config.train.lr, f32), t = torch::zeros({}, f32);
    const int64_t scored = scored_predictions(fixed);
    const auto step = [&] {
      torch::Tensor norm;
      device_step(net, fixed, scored, optimizer, lr, t, c.config.train.grad_clip, bf16, norm);
    };
    // Kept after the 2 eager calls and the capture.
    r.graph_ms = median(timed_calls(device, c.warmup + 3, c.timed, [&](bool) {
      t.fill_(static_cast<double>(optimizer.steps_taken() + 1));
      graphs.run("step", step);
      optimizer.count_device_step();
    }));
  }
  model->eval();
  std::vector<double> eval_ms;
  {
    c10::InferenceMode guard;
    eval_ms = timed_calls(device, c.warmup, c.timed, [&](bool) {
      AutocastGuard autocast(bf16, device);
      NextTokenModel* next = model->next_token();
      auto logits = next ? next->answer_logits(tokens, batch.answer_start)
                         : classifier_of(model, "timing a classifier").forward(tokens);
    });
  }
  r.peak_mb = peak_memory_mb(device);
  r.train_ms = median(step_ms);
  r.train_ms_min = *std::min_element(step_ms.begin(), step_ms.end());
  r.eval_ms = median(eval_ms);
  r.tokens_per_s = static_cast<double>(inputs.numel()) / (r.train_ms / 1000.0);
  r.flops_per_step = 3.0 * model->forward_flops(c.batch, T);
  r.gflops_per_s = r.flops_per_step / (r.train_ms / 1000.0) / 1e9;
  return r;
}

double matmul_peak_gflops(const std::string& device_name, int64_t threads, bool bf16) {
  const torch::Device device = resolve_device(device_name, "--device");
  set_threads(threads);  // the cases' thread count, not LibTorch's default (all cores)
  double best = 0;
  const auto sizes = device.is_cuda() ? std::vector<int64_t>{1024, 4096, 8192} : std::vector<int64_t>{256, 512, 1024};
  const auto opts = torch::TensorOptions().device(device).dtype(bf16 ? torch::kBFloat16 : torch::kFloat);
  for (int64_t n : sizes) {
    auto a = torch::randn({n, n}, opts);
    auto b = torch::randn({n, n}, opts);
    std::vector<double> gflops;
    for (int i = 0; i < 8; ++i) {
      synchronize(device);
      const auto t0 = Clock::now();
      auto c = torch::matmul(a, b);
      synchronize(device);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i >= 2) gflops.push_back(2.0 * n * n * n / s / 1e9);
    }
    best = std::max(best, median(gflops));
  }
  return best;
}

void export_bench_case(const BenchCase& c, const std::string& dir) {
  if (c.config.model.kind != ModelKind::Encoder)
    throw ConfigError("the PyTorch twin (scripts/bench_eager.py) is the encoder classifier; " + c.scheme + " is a " +
                      name_of(c.config.model.kind) + " case");
  fs::create_directories(dir);
  auto [model, batch] = initial_case(c);
  json index = json::array();
  std::string blob;
  for (const auto& item : model->named_parameters()) {
    auto t = item.value().detach().to(torch::kFloat32).contiguous();
    index.push_back({{"name", item.key()}, {"shape", t.sizes().vec()}, {"offset", blob.size() / 4}});
    blob.append(reinterpret_cast<const char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  }
  for (const auto& item : model->named_buffers()) {
    auto t = item.value().detach().to(torch::kFloat32).contiguous();
    index.push_back({{"name", item.key()}, {"shape", t.sizes().vec()}, {"offset", blob.size() / 4}, {"buffer", true}});
    blob.append(reinterpret_cast<const char*>(t.data_ptr<float>()), t.numel() * sizeof(float));
  }
  double loss = 0;
  {
    c10::InferenceMode guard;
    model->eval();
    auto logits = classifier_of(model, "the PyTorch parity export").forward(batch.tokens);  // (B, 2)
    loss = torch::nn::functional::cross_entropy(logits, batch.labels).item<double>();
  }
  auto tokens = batch.tokens.contiguous();
  auto labels = batch.labels.contiguous();
  write_file_atomic((fs::path(dir) / "weights.bin").string(), blob);
  const json meta = {
      {"parameters", index},
      {"tokens", std::vector<int64_t>(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel())},
      {"labels", std::vector<int64_t>(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + labels.numel())},
      {"batch", c.batch},
      {"length", c.length},
      {"loss", loss}};
  write_file_atomic((fs::path(dir) / "weights.json").string(), meta.dump() + "\n");
}

json bench_case_json(const BenchCase& c) {
  // Where the scheme acts under apply_to auto, so that the PyTorch twin need not repeat the registry.
  const bool input = find_scheme(c.config.model.positional.type).default_placement == Placement::Input;
  return {{"size", c.size},
          {"scheme", c.scheme},
          {"qkv", c.qkv},
          {"batch", c.batch},
          {"length", c.length},
          {"warmup", c.warmup},
          {"timed", c.timed},
          {"placement", input ? "input" : "every_layer"},
          {"config", config_to_json(c.config)}};
}

}  // namespace posenc

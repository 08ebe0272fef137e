// posenc translate CHECKPOINT --input TEXT | --file FILE [--beam N]: an
// encoder_decoder's translation of a source (a SCAN command, a sentence of a
// translation file), greedy or by beam search, one output line per input line.
#include <cstdio>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "posenc/environment.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/decode.h"
#include "posenc/train/fits.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/io.h"
#include "posenc/util/text.h"

namespace posenc::cli {

void setup_translate(CLI::App& app, TranslateOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of an encoder_decoder run")
      ->required()
      ->check(CLI::ExistingFile);
  auto* input = app.add_option("--input", o.input, "one source, e.g. \"jump twice after walk left\"")
                    ->check(non_empty_utf8("the source"));
  auto* file = app.add_option("--file", o.file, "a UTF-8 file of sources, one a line")->check(CLI::ExistingFile);
  input->excludes(file);
  file->excludes(input);
  app.add_option("--beam", o.beam, "beam width (1 = greedy)")->check(integer_in(1, 256));
  app.add_option("--length-penalty", o.length_penalty,
                 "GNMT length penalty alpha: hypotheses ranked by log-probability / ((5 + n) / 6)^alpha")
      ->check(number_in(0.0, 10.0));
  app.add_option("--max-tokens", o.max_tokens, "longest output (0: the task's longest evaluation length + 1)")
      ->check(integer_in(0, 1 << 20));
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads")->check(integer_as_declared("train.threads"));
}

namespace {

/// Sources are lines of text: a file of them is read whole, up to this size.
constexpr std::uintmax_t kMaxSourceFileBytes = std::uintmax_t{64} << 20;

/// Refuses a source that beam search cannot decode in memory: the encoder's
/// pass over its `source` tokens, then `beam` hypotheses of up to `max_tokens`
/// each. With a KV cache a hypothesis keeps its keys and values (self and
/// cross) and one row of scores per step; without one, each step runs the
/// whole sequence again.
void check_translation_fits(const Transformer& model, int64_t source, int64_t max_tokens, int64_t beam,
                            torch::Device device, const std::string& where) {
  const auto& m = model->config();
  const double S = static_cast<double>(source), T = static_cast<double>(max_tokens), D = m.d_model;
  const double need =
      model->supports_kv_cache()
          ? evaluation_memory_bytes(model, source, 1, source, device) +
                beam * 4.0 * (2.0 * m.decoder_layers * (T + S) * D + 4.0 * m.heads * (T + S))
          : evaluation_memory_bytes(model, source + max_tokens, beam, (source + max_tokens) * beam, device);
  require_memory(need, device, where + ": translating a source of " + std::to_string(source) + " tokens",
                 fmt::format("up to {} output tokens, beam {}", max_tokens, beam),
                 "give a shorter source, a smaller --beam or fewer --max-tokens");
}

}  // namespace

int run_translate(const TranslateOptions& o) {
  if (o.input.empty() && o.file.empty()) throw ConfigError("give a source with --input TEXT or --file FILE");
  const InterruptGuard stop_cleanly;  // a stop ends between lines; the lines printed stay
  const torch::Device device = resolve_device(o.device, "--device");
  set_threads(o.threads);
  flush_denormals();
  Config cfg;
  Transformer model = load_model(o.checkpoint, device, &cfg);
  if (cfg.model.kind != ModelKind::EncoderDecoder)
    throw ConfigError(o.checkpoint + " is a model.kind=" + name_of(cfg.model.kind) +
                      " checkpoint (task.type=" + cfg.task.type + "); translate needs an encoder_decoder");
  const std::unique_ptr<Task> task = make_task(cfg.task);
  int64_t max_tokens = o.max_tokens;
  if (max_tokens == 0)
    for (int64_t length : cfg.eval.lengths) max_tokens = std::max(max_tokens, length + 1);

  std::vector<std::string> lines;
  if (!o.input.empty()) {
    lines.push_back(o.input);
  } else {
    std::string text;
    try {  // a regular UTF-8 file of bounded size: not /dev/zero, a FIFO or a directory
      text = read_text_file(o.file, kMaxSourceFileBytes);
    } catch (const IoError& e) {
      throw ConfigError(std::string("--file: ") + e.what());
    }
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  BeamOptions beam;
  beam.beam = o.beam;
  beam.length_penalty = o.length_penalty;
  beam.eos = task->end_token();
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int64_t> source;
    try {
      source = task->encode_text(lines[i]);
    } catch (const ConfigError& e) {  // control bytes of a bad line are not echoed raw
      throw ConfigError(one_line(
          o.file.empty() ? std::string("--input: ") + e.what() : fmt::format("{} line {}: {}", o.file, i + 1, e.what()),
          400));
    }
    model->check_length(static_cast<int64_t>(source.size()) + 1 + max_tokens);
    check_translation_fits(model, static_cast<int64_t>(source.size()) + 1, max_tokens, o.beam, device,
                           o.file.empty() ? std::string("--input") : fmt::format("{} line {}", o.file, i + 1));
    source.push_back(task->vocab_size() + 1);                                         // SEP
    const auto prompt = torch::tensor(source, torch::kLong).unsqueeze(0).to(device);  // (1, S + 1)
    Hypothesis best;
    try {
      best = beam_search(model, prompt, max_tokens, beam).front();
    } catch (const Interrupted& e) {
      spdlog::warn("stopped by {} while translating source {} of {}; the {} lines printed are complete",
                   signal_name(e.signal()), i + 1, lines.size(), i);
      throw;
    }
    const std::string text = task->decode_text(best.tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace posenc::cli

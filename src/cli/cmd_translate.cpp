// posenc translate CHECKPOINT --input TEXT | --file FILE [--beam N]: an
// encoder_decoder's translation of a source (a SCAN command, a sentence of a
// translation file), greedy or by beam search, one output line per input line.
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "commands.h"
#include "posenc/environment.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/decode.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"

namespace posenc::cli {

void setup_translate(CLI::App& app, TranslateOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of an encoder_decoder run")
      ->required()
      ->check(CLI::ExistingFile);
  auto* input = app.add_option("--input", o.input, "one source, e.g. \"jump twice after walk left\"")
                    ->check(non_empty_utf8("--input", "the source"));
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
  app.add_option("--threads", o.threads, "intra-op threads")->check(integer_in(1, 1024));
}

int run_translate(const TranslateOptions& o) {
  if (o.input.empty() && o.file.empty()) throw ConfigError("give a source with --input TEXT or --file FILE");
  const InterruptGuard stop_cleanly;  // a stop ends between lines; the lines printed stay
  const torch::Device device = resolve_device(o.device);
  set_threads(o.threads);
  flush_denormals();
  Config cfg;
  Transformer model = load_model(o.checkpoint, device, &cfg);
  if (!model->is_encoder_decoder())
    throw ConfigError(o.checkpoint + " is a model.kind=" + cfg.model.kind + " checkpoint (task.type=" + cfg.task.type +
                      "); translate needs an encoder_decoder");
  const std::unique_ptr<Task> task = make_task(cfg.task);
  int64_t max_tokens = o.max_tokens;
  if (max_tokens == 0)
    for (int64_t length : cfg.eval.lengths) max_tokens = std::max(max_tokens, length + 1);

  std::vector<std::string> lines;
  if (!o.input.empty()) {
    lines.push_back(o.input);
  } else {
    std::ifstream in(o.file);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (in.bad()) throw IoError("cannot read " + o.file);
  }
  BeamOptions beam;
  beam.beam = o.beam;
  beam.length_penalty = o.length_penalty;
  beam.eos = task->end_token();
  for (size_t i = 0; i < lines.size(); ++i) {
    throw_if_interrupted();
    std::vector<int64_t> source;
    try {
      source = task->encode_text(lines[i]);
    } catch (const ConfigError& e) {
      throw ConfigError(o.file.empty() ? std::string("--input: ") + e.what()
                                       : fmt::format("{} line {}: {}", o.file, i + 1, e.what()));
    }
    model->check_length(static_cast<int64_t>(source.size()) + 1 + max_tokens);
    source.push_back(task->vocab_size() + 1);                                         // SEP
    const auto prompt = torch::tensor(source, torch::kLong).unsqueeze(0).to(device);  // (1, S + 1)
    const auto best = beam_search(model, prompt, max_tokens, beam).front();
    const std::string text = task->decode_text(best.tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace posenc::cli

// posenc generate CHECKPOINT --prompt TEXT: a language model's continuation of
// a prompt (as the text generator of SuperML's positional-encoding guide does), sampled with a temperature and top-k,
// from a KV cache where the scheme allows one.
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "posenc/environment.h"
#include "posenc/tasks/task.h"
#include "posenc/train/checkpoint.h"
#include "posenc/train/decode.h"
#include "posenc/train/fits.h"
#include "posenc/train/trainer.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/io.h"
#include "posenc/util/output_guard.h"

namespace posenc::cli {

void setup_generate(CLI::App& app, GenerateOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a charlm run")->required()->check(CLI::ExistingFile);
  app.add_option("--prompt", o.prompt, "text to continue (UTF-8)")->required()->check(non_empty_utf8("the prompt"));
  app.add_option("--tokens", o.tokens, "characters (bytes) to generate")->check(integer_in(1, int64_t{1} << 20));
  app.add_option("--temperature", o.temperature, "softmax temperature: 0 (greedy) or 0.01 to 100")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            // Below 0.01 the scaled logits overflow to inf; NaN passes any range check.
            const double t = std::strtod(text.c_str(), nullptr);
            if (t == 0.0 || (t >= 0.01 && t <= 100.0)) return "";
            return "--temperature " + text + ": expected 0 (greedy) or a number from 0.01 to 100";
          },
          "0 or 0.01..100"));
  app.add_option("--top-k", o.top_k, "sample among the k most likely characters only (0 = all)")
      ->check(integer_in(0, 1 << 20));
  app.add_option("--seed", o.seed, "sampling seed")->check(integer_in(0, int64_t{1} << 62));
  app.add_option("--out", o.out, "also write prompt + continuation to this file")->check(non_empty_utf8());
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", o.threads, "intra-op threads")->check(integer_as_declared("train.threads"));
}

int run_generate(const GenerateOptions& o) {
  // A text file has no "written_by": generate never replaces an existing file.
  if (!o.out.empty()) check_output_target(o.out, "--out", "posenc generate");
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM/SIGHUP: stop between tokens, keep the text so far
  const torch::Device device = resolve_device(o.device, "--device");
  set_threads(o.threads);
  flush_denormals();
  Config cfg;
  Transformer model = load_model(o.checkpoint, device, &cfg);
  if (cfg.model.kind == ModelKind::EncoderDecoder)
    throw ConfigError(o.checkpoint + " is an encoder_decoder (task.type=" + cfg.task.type +
                      "): it translates a source, it does not continue a text; use posenc translate");
  if (cfg.model.kind != ModelKind::Decoder)
    throw ConfigError(o.checkpoint + " is an encoder classifier (task.type=" + cfg.task.type +
                      "); generate needs a decoder trained on a language-modelling task (task.type=charlm)");
  const std::unique_ptr<Task> task = make_task(cfg.task);
  const std::vector<int64_t> prompt_tokens = task->encode_text(o.prompt);
  // The last position the model reads is that of the last token but one.
  model->check_length(static_cast<int64_t>(prompt_tokens.size()) + o.tokens);
  check_generation_fits(model, static_cast<int64_t>(prompt_tokens.size()),
                        static_cast<int64_t>(prompt_tokens.size()) + o.tokens, device);
  auto prompt = torch::tensor(prompt_tokens, torch::kLong).unsqueeze(0).to(device);  // (1, P)
  Sampling sampling;
  sampling.temperature = o.temperature;
  sampling.top_k = o.top_k;
  sampling.first_token = 1;  // never padding (0) or SEP (V + 1)
  sampling.last_token = task->vocab_size();
  sampling.seed = static_cast<uint64_t>(o.seed);
  sampling.interruptible = true;  // a stop keeps what was generated
  auto generated = continue_tokens(model, prompt, o.tokens, sampling)[0].cpu().contiguous();  // (N)
  const std::string text =
      o.prompt + task->decode_text(std::vector<int64_t>(generated.data_ptr<int64_t>(),
                                                        generated.data_ptr<int64_t>() + generated.numel()));
  // Bytes, not a C string: the text may hold NUL bytes.
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!o.out.empty()) write_file_atomic(o.out, text);
  if (const int sig = interrupt_signal()) {
    spdlog::warn("stopped by {} after {} of {} tokens; the text so far is above{}", signal_name(sig), generated.numel(),
                 o.tokens, o.out.empty() ? "" : " and in " + o.out);
    throw Interrupted(sig);
  }
  return 0;
}

}  // namespace posenc::cli

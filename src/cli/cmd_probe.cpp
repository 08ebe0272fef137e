// posenc probe CHECKPOINT [--target NAME] [--lengths L,...] [--fit-lengths L,...] [--samples N] [--ridge R] [--json FILE]
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "posenc/analysis/probe.h"
#include "posenc/errors.h"
#include "posenc/util/interrupt.h"

namespace posenc::cli {

void setup_probe(CLI::App& app, ProbeOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a trained model (encoder, decoder or encoder_decoder)")
      ->required()
      ->check(CLI::ExistingFile);
  add_lengths_option(app, "--lengths", o.lengths,
                     "comma-separated lengths in the task's unit (default: the checkpoint's task.max_length)");
  app.add_option("--samples", o.samples, "examples per length: the first half fitted on, the rest held out")
      ->check(integer_in(4, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--ridge", o.ridge, "the ridge penalty per fitted token on the standardised weights")
      ->check(number_in(1e-9, 1e3))
      ->capture_default_str();
  app.add_option("--target", o.target,
                 "what to read from each layer: position or remaining (every task), or a quantity the checkpoint's "
                 "task defines (`posenc list` names them: addition's column and carry, ordering's descent, ...)")
      ->check(non_empty_utf8("probe targets"))
      ->capture_default_str();
  add_lengths_option(
      app, "--fit-lengths", o.fit_lengths,
      "comma-separated lengths: fit each layer's probe once, on their first halves together, and score it "
      "on every length's second half (default: each length fits its own): does what a layer holds read "
      "the same way at other lengths?");
  app.add_option("--json", o.json, "write the JSON here and print a table (default: the JSON on standard output)")
      ->check(non_empty_utf8());
}

namespace {

/// One stack's rows of the table: `side` names it in an encoder_decoder ("" otherwise).
void print_stack(const nlohmann::json& stack, int64_t length, const std::string& side) {
  std::printf("length %lld%s (%lld positions; %lld tokens fitted, %lld held out):\n", static_cast<long long>(length),
              side.empty() ? "" : (", " + side).c_str(), static_cast<long long>(stack["positions"].get<int64_t>()),
              static_cast<long long>(stack["fitted_tokens"].get<int64_t>()),
              static_cast<long long>(stack["held_out_tokens"].get<int64_t>()));
  std::printf("  %-6s %8s %10s %9s %9s %9s %9s  %s\n", "layer", "R^2", "mean |err|", "rounded", "class", "logistic",
              "baseline", "reads");
  for (const auto& p : stack["layers"]) {
    // The logistic classifier is null where too many rows times classes left it unfitted.
    const std::string logistic =
        p["logistic_accuracy"].is_null() ? "-" : fmt::format("{:.3f}", p["logistic_accuracy"].get<double>());
    std::printf("  %-6lld %8.3f %10.2f %9.3f %9.3f %9s %9.3f  %s\n", static_cast<long long>(p["layer"].get<int64_t>()),
                p["r2"].get<double>(), p["mean_abs_error"].get<double>(), p["rounded_accuracy"].get<double>(),
                p["class_accuracy"].get<double>(), logistic.c_str(), p["baseline_accuracy"].get<double>(),
                p["reads"].get<std::string>().c_str());
  }
}

/// Warns where a stack's probes were fitted on fewer than 10 tokens a feature:
/// fitted to noise, a probe scores a held-out R² of about -features / fitted
/// tokens, and one reading a little can fall far below 0.
void warn_if_overfitting(const nlohmann::json& stack, int64_t length, const std::string& side) {
  const int64_t features = stack["features"].get<int64_t>(), fitted = stack["fitted_tokens"].get<int64_t>();
  if (fitted >= 10 * features) return;
  spdlog::warn(
      "length {}{}: {} tokens fitted for {} features: a linear probe overfits there (one that reads nothing scores "
      "about {:.2f}); choose more --samples or a larger --ridge",
      length, side.empty() ? "" : ", " + side, fitted, features, -static_cast<double>(features) / fitted);
}

}  // namespace

int run_probe(const ProbeOptions& o) {
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: stop between forward chunks, write nothing
  check_json_target(o.json, "probe");
  ProbeRequest r;
  r.lengths = o.lengths;
  r.samples = o.samples;
  r.ridge = o.ridge;
  r.target = o.target;
  r.fit_lengths = o.fit_lengths;
  nlohmann::json j;
  try {
    j = probe_checkpoint(o.checkpoint, r);
  } catch (const Interrupted& e) {
    spdlog::warn("stopped by {} during the probe; nothing written", signal_name(e.signal()));
    throw;
  }
  const bool both = j["kind"] == "encoder_decoder";
  for (const auto& l : j["lengths"]) {
    warn_if_overfitting(l, l["length"].get<int64_t>(), both ? "encoder" : "");
    if (both) warn_if_overfitting(l["decoder"], l["length"].get<int64_t>(), "decoder");
  }
  emit_json(j, o.json, "probe");
  if (o.json.empty()) return 0;
  std::printf("%s probe of %s (%s, %s): ridge regression on held-out examples of %s\n",
              j["target"].get<std::string>().c_str(), o.checkpoint.c_str(), j["scheme"].get<std::string>().c_str(),
              j["kind"].get<std::string>().c_str(), j["target_description"].get<std::string>().c_str());
  if (!o.fit_lengths.empty())
    std::printf("every layer's probe was fitted at length%s %s and is scored at each length below\n",
                o.fit_lengths.size() > 1 ? "s" : "", j["fit_lengths"].dump().c_str());
  for (const auto& l : j["lengths"]) {
    print_stack(l, l["length"].get<int64_t>(), both ? "encoder, over the source" : "");
    if (both) print_stack(l["decoder"], l["length"].get<int64_t>(), "decoder, over the target");
  }
  return 0;
}

}  // namespace posenc::cli

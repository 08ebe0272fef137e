// posenc heads CHECKPOINT [--lengths L,...] [--samples N] [--kind K] [--queries all|answer] [--set path=value ...] [--json FILE]
#include <cstdio>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "posenc/analysis/heads.h"
#include "posenc/errors.h"
#include "posenc/train/evaluation_changes.h"
#include "posenc/util/interrupt.h"

namespace posenc::cli {

void setup_heads(CLI::App& app, HeadsOptions& o) {
  app.add_option("checkpoint", o.checkpoint, "checkpoint.pt of a trained model (encoder, decoder or encoder_decoder)")
      ->required()
      ->check(CLI::ExistingFile);
  add_lengths_option(app, "--lengths", o.lengths,
                     "comma-separated lengths in the task's unit (default: the checkpoint's eval.lengths)");
  app.add_option("--samples", o.samples,
                 "examples per length: the first of the fixed evaluation set (with --kind, those of that kind "
                 "among them)")
      ->check(integer_in(1, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--kind", o.kind,
                 "ordering: count only the examples of this kind (sorted, shuffle, adjacent_swap, random_swap or "
                 "reverse; default: all)")
      ->check(non_empty_utf8("kinds"));
  app.add_option("--queries", o.queries,
                 "all: every token's attention; answer: a decoder's queries that predict an answer token")
      ->check(CLI::IsMember({"all", "answer"}))
      ->capture_default_str();
  app.add_option("--set", o.overrides,
                 "read the model with a change of its stored config that adds or removes no parameter (repeatable): " +
                     allowed_evaluation_changes() + "; e.g. model.attention.logn_from=32")
      ->allow_extra_args(false);
  app.add_option("--json", o.json, "write the JSON here and print a table (default: the JSON on standard output)")
      ->check(non_empty_utf8());
}

namespace {

/// A number of the JSON with `format`, or "-" where it is null (undefined).
void print_number(const nlohmann::json& v, const char* format, int width) {
  if (v.is_null())
    std::printf(" %*s", width, "-");
  else
    std::printf(format, v.get<double>());
}

/// Per head, its mean distance at each length, then its effective keys at
/// each length, then (where the model has logit factors) its mean logit
/// factor at each length; a last row per block with a flat head's.
void print_table(const nlohmann::json& j) {
  const auto& lengths = j["lengths"];
  // The schemes: model.positional.type, with the one in the same attention and the one at the input where there are.
  std::string scheme = j["scheme"].get<std::string>();
  if (j.value("with_scheme", "none") != "none") scheme += " with " + j["with_scheme"].get<std::string>();
  if (j.value("input_scheme", "none") != "none") scheme = j["input_scheme"].get<std::string>() + " input, " + scheme;
  std::printf(
      "%s (%s%s on %s, trained on lengths %lld-%lld), %s queries%s:\n", j["checkpoint"].get<std::string>().c_str(),
      scheme.c_str(),
      j["weights"] == "softmax" ? "" : (" with " + j["weights"].get<std::string>() + " weights").c_str(),
      j["task"].get<std::string>().c_str(), static_cast<long long>(j["trained_lengths"][0].get<int64_t>()),
      static_cast<long long>(j["trained_lengths"][1].get<int64_t>()), j["queries"].get<std::string>().c_str(),
      j["example_kind"].is_null() ? "" : (", examples of kind " + j["example_kind"].get<std::string>()).c_str());
  // Which blocks are windowed and which nope_every leaves without positions, where the model has either.
  std::string windowed, without;
  for (const auto& b : lengths[0]["blocks"]) {
    if (b["window"].get<int64_t>() > 0) windowed += (windowed.empty() ? "" : ", ") + b["block"].get<std::string>();
    if (b["nope_block"].get<bool>()) without += (without.empty() ? "" : ", ") + b["block"].get<std::string>();
  }
  if (!windowed.empty())
    std::printf("  windowed to %lld tokens: %s\n", static_cast<long long>(j["window"].get<int64_t>()),
                windowed.c_str());
  if (!without.empty()) std::printf("  without positions, full attention: %s\n", without.c_str());
  for (const auto& o : j["overrides"]) std::printf("  read with --set %s\n", o.get<std::string>().c_str());
  for (const auto& l : lengths) {
    std::printf("  length %lld: %lld examples", static_cast<long long>(l["length"].get<int64_t>()),
                static_cast<long long>(l["examples"].get<int64_t>()));
    if (!l["accuracy"].is_null()) std::printf(", accuracy %.3f", l["accuracy"].get<double>());
    std::printf("\n");
  }
  // Logit factors (Scalable-Softmax, LogN scaling, the head scale, the logit scale) get columns of their own
  // where the model has one.
  bool factors = false;
  for (const auto& b : lengths[0]["blocks"])
    for (const auto& h : b["heads"]) factors = factors || !h["logit_factor"].is_null();
  std::printf(
      "d@L: mean distance |j - i| under each head at length L; k@L: its effective keys, exp(entropy)%s; "
      "\"flat\": a head flat over the keys each query sees\n",
      factors ? "; f@L: the mean factor its logits were multiplied by" : "");
  const auto columns = [&](const char* prefix) {
    std::printf("  ");
    for (const auto& l : lengths) std::printf(" %8s", (prefix + std::to_string(l["length"].get<int64_t>())).c_str());
  };
  std::printf("%-18s %4s", "block", "head");
  columns("d@");
  columns("k@");
  if (factors) columns("f@");
  std::printf("\n");
  const auto& blocks = lengths[0]["blocks"];
  for (size_t b = 0; b < blocks.size(); ++b) {
    const std::string name = blocks[b]["block"].get<std::string>();
    for (size_t h = 0; h < blocks[b]["heads"].size(); ++h) {
      const auto head_column = [&](const char* key) {
        std::printf("  ");
        for (const auto& l : lengths) print_number(l["blocks"][b]["heads"][h][key], " %8.2f", 8);
      };
      std::printf("%-18s %4zu", name.c_str(), h);
      head_column("distance");
      head_column("effective_keys");
      if (factors) head_column("logit_factor");
      std::printf("\n");
    }
    const auto flat_column = [&](const char* key) {
      std::printf("  ");
      for (const auto& l : lengths) print_number(l["blocks"][b][key], " %8.2f", 8);
    };
    std::printf("%-18s %4s", name.c_str(), "flat");
    flat_column("flat_distance");
    flat_column("keys_seen");
    std::printf("\n");
  }
}

}  // namespace

int run_heads(const HeadsOptions& o) {
  const InterruptGuard stop_cleanly;  // SIGINT/SIGTERM: stop between forward chunks, write nothing
  check_json_target(o.json, "heads");
  HeadsRequest r;
  r.lengths = o.lengths;
  r.samples = o.samples;
  r.kind = o.kind;
  r.queries = o.queries;
  r.overrides = o.overrides;
  nlohmann::json j;
  try {
    j = head_statistics(o.checkpoint, r);
  } catch (const Interrupted& e) {
    spdlog::warn("stopped by {} during the head statistics; nothing written", signal_name(e.signal()));
    throw;
  }
  emit_json(j, o.json, "heads");
  if (!o.json.empty()) print_table(j);
  return 0;
}

}  // namespace posenc::cli

#include "posenc/experiments/summary.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "posenc/tasks/registry.h"
#include "posenc/util/stats.h"
#include "posenc/train/run_dir.h"
#include "posenc/util/text.h"

namespace posenc {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// A score of results.json, whose null is NaN: a length whose outputs were all
/// non-finite (evaluate.h), which a mean then carries as NaN rather than a number.
double number(const json& value) {
  return value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
}

}  // namespace

Stat stat_of(const std::vector<double>& xs) {
  Stat s;
  s.n = static_cast<int>(xs.size());
  if (xs.empty()) return s;
  for (double x : xs) s.mean += x;
  s.mean /= s.n;
  if (s.n > 1) {
    double ss = 0;
    for (double x : xs) ss += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(ss / (s.n - 1));
  }
  return s;
}

int64_t extrapolation_length(double val_accuracy, const std::vector<std::pair<int64_t, double>>& length_accuracy,
                             double chance) {
  if (val_accuracy < kLearnedAccuracy) return kNotLearned;
  const double floor = chance + kRetainedMargin * (val_accuracy - chance);
  auto sorted = length_accuracy;
  std::sort(sorted.begin(), sorted.end());
  int64_t longest = 0;
  for (const auto& [length, accuracy] : sorted) {
    if (accuracy < floor) break;
    longest = length;
  }
  return longest;
}

namespace {

/// A run's score at one evaluation length (results.json "lengths" entry): under
/// its metric's `key`; results written before each metric had its own key held
/// every score as "accuracy".
double score_at(const json& at, const std::string& key) {
  return number(at.contains(key) ? at.at(key) : at.at("accuracy"));
}

/// The runs' scores at their li-th evaluation length: per-run means and
/// deviations, the pooled Wilson interval, per example kind.
LengthSummary summarize_length(const std::vector<json>& results, size_t li) {
  LengthSummary ls;
  const json& first = results[0].at("lengths").at(li);
  ls.length = first.at("length");
  ls.beyond_training = first.at("beyond_training");
  std::vector<double> acc, perplexity, bleu, alarms, alarmed;
  std::map<std::string, std::vector<double>> kinds;
  const std::string key = score_key(results[0].value("metric", std::string("accuracy")));
  for (const auto& r : results) {
    const json& at = r.at("lengths").at(li);
    if (at.at("length") != ls.length)
      throw std::runtime_error("runs of one variant were evaluated at different lengths");
    acc.push_back(score_at(at, key));
    if (at.contains("perplexity")) perplexity.push_back(number(at.at("perplexity")));
    if (at.contains("bleu")) bleu.push_back(number(at.at("bleu")));
    if (at.contains("false_alarms")) {
      alarms.push_back(at["false_alarms"].at("position_rate"));
      alarmed.push_back(at["false_alarms"].at("sequence_rate"));
    }
    ls.correct += at.at("correct").get<int64_t>();
    ls.total += at.at("n").get<int64_t>();
    for (const auto& [kind, t] : at.at("by_kind").items()) kinds[kind].push_back(number(t.at("accuracy")));
  }
  ls.accuracy = stat_of(acc);
  ls.by_seed = perplexity.size() == results.size() ? perplexity : acc;
  if (!perplexity.empty()) ls.perplexity = stat_of(perplexity);
  ls.bleu = stat_of(bleu);
  ls.alarms_per_position = stat_of(alarms);
  ls.alarmed_sequences = stat_of(alarmed);
  const Interval ci = wilson_interval(ls.correct, ls.total);
  ls.ci_lo = ci.lo;
  ls.ci_hi = ci.hi;
  for (const auto& [kind, xs] : kinds) ls.by_kind[kind] = stat_of(xs);
  return ls;
}

/// Perplexity: the longest length up to which every length stays within 10%
/// of the perplexity at the longest training context (0: none).
int64_t perplexity_extrapolation(const std::vector<LengthSummary>& lengths) {
  double reference = 0;
  for (const auto& l : lengths)
    if (!l.beyond_training) reference = l.perplexity.mean;
  int64_t out = 0;
  for (const auto& l : lengths) {
    if (reference <= 0 || l.perplexity.mean > kPerplexityTolerance * reference) break;
    out = l.length;
  }
  return out;
}

/// The extrapolation rule on one run's own scores (results.json).
int64_t run_extrapolation(const json& r, const std::string& metric) {
  const std::string key = score_key(metric);
  std::vector<LengthSummary> lengths;  // only length, beyond_training and the scores are set
  std::vector<std::pair<int64_t, double>> curve;
  for (const json& at : r.at("lengths")) {
    LengthSummary l;
    l.length = at.at("length");
    l.beyond_training = at.at("beyond_training");
    if (at.contains("perplexity")) l.perplexity.mean = number(at.at("perplexity"));
    lengths.push_back(l);
    curve.emplace_back(l.length, score_at(at, key));
  }
  if (metric == "perplexity") return perplexity_extrapolation(lengths);
  return extrapolation_length(number(r.at("val_accuracy")), curve, metric == "accuracy" ? 0.5 : 0.0);
}

}  // namespace

VariantSummary summarize_variant(const std::vector<json>& results, const std::vector<std::string>& ids) {
  if (results.empty()) throw std::invalid_argument("summarize_variant: no runs");
  VariantSummary v;
  v.runs = ids;
  v.task = results[0].value("task", std::string("ordering"));  // results.json before the task registry: ordering
  v.metric = results[0].value("metric", std::string("accuracy"));
  v.scheme = results[0].at("scheme");
  v.qkv = results[0].at("qkv");
  v.pooling = results[0].at("pooling");
  v.parameters = results[0].at("parameters");
  v.steps = results[0].value("steps", int64_t{0});
  if (results[0].contains("averaged_weights")) v.averaged_from = results[0]["averaged_weights"].at("from_step");
  std::vector<double> seconds, val, loss, bleu_within, bleu_beyond;
  for (const auto& r : results) {
    v.seeds.push_back(r.at("seed"));
    seconds.push_back(r.at("train_seconds"));
    val.push_back(r.at("val_accuracy"));
    loss.push_back(r.at("final_train_loss"));
    // A BLEU task's corpus BLEU (null where no length lies on that side of training).
    if (r.contains("bleu") && r["bleu"].is_object()) {
      const json& b = r["bleu"];
      if (b.contains("within_training") && b["within_training"].is_number())
        bleu_within.push_back(b["within_training"]);
      if (b.contains("beyond_training") && b["beyond_training"].is_number())
        bleu_beyond.push_back(b["beyond_training"]);
    }
  }
  v.train_seconds = stat_of(seconds);
  v.val_accuracy = stat_of(val);
  v.final_loss = stat_of(loss);
  v.bleu_within = stat_of(bleu_within);
  v.bleu_beyond = stat_of(bleu_beyond);

  // Lengths in the first run's order; every run of a variant has the same list.
  std::vector<std::pair<int64_t, double>> curve;
  double beyond_sum = 0;
  int beyond_n = 0;
  for (size_t li = 0; li < results[0].at("lengths").size(); ++li) {
    v.lengths.push_back(summarize_length(results, li));
    const LengthSummary& ls = v.lengths.back();
    curve.emplace_back(ls.length, ls.accuracy.mean);
    if (ls.beyond_training) {
      beyond_sum += ls.accuracy.mean;
      ++beyond_n;
    }
  }
  v.beyond_mean = beyond_n ? beyond_sum / beyond_n : -1;
  v.extrapolation = v.metric == "perplexity"
                        ? perplexity_extrapolation(v.lengths)
                        : extrapolation_length(v.val_accuracy.mean, curve, v.metric == "accuracy" ? 0.5 : 0.0);
  for (const auto& r : results) v.extrapolation_by_seed.push_back(run_extrapolation(r, v.metric));
  return v;
}

ComparisonSummary summarize(const ComparePlan& plan) {
  ComparisonSummary s;
  s.source = plan.source;
  s.description = plan.description;
  s.full = plan.full;
  s.tasks = plan.tasks;
  if (!plan.runs.empty()) {
    const Config& c = plan.runs.front().config;
    s.steps = c.train.steps;
    s.batch_size = c.train.batch_size;
    s.train_min_length = c.task.min_length;
    s.train_max_length = c.task.max_length;
    s.samples_per_length = c.eval.samples_per_length;
    s.eval_seed = c.eval.seed;
    s.val_samples = c.train.val_samples;
    if (c.task.options.json().contains("negatives")) s.negatives = c.task.options.get_weights("negatives");
    s.eval_lengths = c.eval.lengths;
  }
  // Group runs by variant, in plan order.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<json>, std::vector<std::string>>> groups;
  std::map<std::string, std::string> skipped;
  for (const auto& run : plan.runs) {
    if (!run.skipped.empty()) {
      if (!skipped.count(run.variant)) s.skipped.emplace_back(run.variant, run.skipped);
      skipped[run.variant] = run.skipped;
      continue;
    }
    const fs::path results = fs::path(plan.run_dir(run)) / run_files::kResults;
    if (!fs::exists(results)) {
      const fs::path diverged = fs::path(plan.run_dir(run)) / run_files::kDiverged;
      if (fs::exists(diverged)) {
        std::string message = "diverged";
        try {
          message = read_json_file(diverged.string()).at("message").get<std::string>();
        } catch (const std::exception&) {
        }
        s.diverged.emplace_back(run.id, message);
      } else {
        s.unfinished.push_back(run.id);
      }
      continue;
    }
    if (!groups.count(run.variant)) order.push_back(run.variant);
    auto& g = groups[run.variant];
    g.first.push_back(read_json_file(results.string()));
    g.second.push_back(run.id);
    const json environment = g.first.back().value("environment", json());
    auto same = std::find_if(s.environments.begin(), s.environments.end(),
                             [&](const EnvironmentGroup& e) { return e.environment == environment; });
    if (same == s.environments.end()) same = s.environments.insert(s.environments.end(), {environment, {}});
    same->runs.push_back(run.id);
  }
  for (const auto& name : order) {
    VariantSummary v = summarize_variant(groups[name].first, groups[name].second);
    v.variant = name;
    // The grid's name (e.g. alibi-directional), not only the registry type.
    for (const auto& run : plan.runs)
      if (run.variant == name) v.scheme = run.scheme;
    s.variants.push_back(std::move(v));
  }
  const auto task_rank = [&](const VariantSummary& v) {
    return std::find(s.tasks.begin(), s.tasks.end(), v.task) - s.tasks.begin();
  };
  std::stable_sort(s.variants.begin(), s.variants.end(), [&](const VariantSummary& a, const VariantSummary& b) {
    if (task_rank(a) != task_rank(b)) return task_rank(a) < task_rank(b);
    const bool la = a.extrapolation != kNotLearned, lb = b.extrapolation != kNotLearned;
    if (la != lb) return la;
    if (a.beyond_mean != b.beyond_mean) return a.beyond_mean > b.beyond_mean;
    return a.val_accuracy.mean > b.val_accuracy.mean;
  });
  return s;
}

std::vector<SeedTest> seed_tests(const ComparisonSummary& s) {
  std::vector<SeedTest> out;
  std::map<std::string, size_t> top_of;  // task -> its first row of kSeedsForTest seeds or more
  for (size_t i = 0; i < s.variants.size(); ++i)
    if (s.variants[i].seeds.size() >= kSeedsForTest) top_of.emplace(s.variants[i].task, i);
  for (size_t i = 0; i < s.variants.size(); ++i) {
    const VariantSummary& v = s.variants[i];
    if (v.seeds.size() < kSeedsForTest || top_of.at(v.task) == i) continue;
    const size_t top = top_of.at(v.task);
    const VariantSummary& t = s.variants[top];
    for (const auto& l : v.lengths) {
      const auto at = std::find_if(t.lengths.begin(), t.lengths.end(),
                                   [&](const LengthSummary& tl) { return tl.length == l.length; });
      if (at != t.lengths.end()) out.push_back({i, top, l.length, permutation_test(l.by_seed, at->by_seed)});
    }
  }
  return out;
}

std::string describe_environment(const json& environment) {
  if (!environment.is_object()) return "not recorded";
  const auto text = [&](const char* key) { return environment.value(key, std::string("unknown")); };
  std::string out = environment.contains("posenc") ? "posenc " + text("posenc") + ", " : "";
  out += fmt::format("{}, LibTorch {}, BLAS {} ({} kernels{})", text("device"), text("libtorch"), text("blas"),
                     text("blas_kernels"),
                     environment.contains("blas_kernels_replaced")
                         ? ", in place of OpenBLAS's own pick, " + text("blas_kernels_replaced")
                         : "");
  for (const char* name : {"OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY"})
    if (environment.contains(name)) out += fmt::format(", {}={}", name, text(name));
  return out;
}

namespace {

/// Where the numbers came from: one line when every finished run shares one
/// environment, else each environment with its runs.
std::string environment_lines(const ComparisonSummary& s) {
  if (s.environments.empty()) return "";
  if (s.environments.size() == 1) {
    const EnvironmentGroup& only = s.environments.front();
    return fmt::format("Computed on: {} (every run{}).\n", describe_environment(only.environment),
                       only.environment.is_object() ? "" : ": results written before posenc recorded it");
  }
  std::string out = fmt::format(
      "The runs were computed in {} environments (posenc's commit, the device, LibTorch, the BLAS kernels); a "
      "change in any can move a trained model's scores, since training amplifies last-bit differences, so a row "
      "whose seeds ran in different ones may not score as any one of them would alone:\n\n",
      s.environments.size());
  for (const auto& e : s.environments)
    out += fmt::format("- {} ({} run{}): {}\n", describe_environment(e.environment), e.runs.size(),
                       e.runs.size() == 1 ? "" : "s", join(e.runs, ", "));
  return out;
}

json stat_json(const Stat& s) { return {{"mean", s.mean}, {"std", s.std}, {"n", s.n}}; }

/// A number, or null for NaN (JSON has no NaN).
json number_json(double x) { return std::isnan(x) ? json(nullptr) : json(x); }

json numbers_json(const std::vector<double>& xs) {
  json out = json::array();
  for (double x : xs) out.push_back(number_json(x));
  return out;
}

/// "-0.121 (p 0.0035)"; "-" where a score is NaN.
std::string seed_test_cell(const PermutationTest& t) {
  if (std::isnan(t.p)) return "-";
  return fmt::format("{:+.3f} (p {:.2g}{})", t.difference, t.p, t.exact ? "" : ", estimated");
}

/// "0.975 ± 0.004": std over seeds, or with one seed the 95% Wilson half-width;
/// a perplexity "3.214 ± 0.051" (std over seeds; nothing with one seed).
std::string cell(const LengthSummary& l) {
  if (l.perplexity.n > 0)
    return l.perplexity.n > 1 ? fmt::format("{:.3f} ± {:.3f}", l.perplexity.mean, l.perplexity.std)
                              : fmt::format("{:.3f}", l.perplexity.mean);
  const double spread =
      l.accuracy.n > 1 ? l.accuracy.std : std::max(l.accuracy.mean - l.ci_lo, l.ci_hi - l.accuracy.mean);
  return fmt::format("{:.3f} ± {:.3f}", l.accuracy.mean, spread);
}

std::string val_cell(const Stat& s) {
  return s.n > 1 ? fmt::format("{:.3f} ± {:.3f}", s.mean, s.std) : fmt::format("{:.3f}", s.mean);
}

std::string extrapolation_word(int64_t length) {
  if (length == kNotLearned) return "not learned";
  if (length == 0) return "none";
  return std::to_string(length);
}

std::string extrapolation_cell(const VariantSummary& v) { return extrapolation_word(v.extrapolation); }

/// summary.json's form: the length, or "not learned".
json extrapolation_json(int64_t length) { return length == kNotLearned ? json("not learned") : json(length); }

/// summary.csv's form, the same: the length (0: none), or "not learned".
std::string extrapolation_field(int64_t length) {
  return length == kNotLearned ? "not learned" : std::to_string(length);
}

/// "50 (5), 40 (1), 30 (3), none (1)": how many seeds extrapolate to each
/// length on their own, longest first ("not learned" last).
std::string per_seed_cell(const VariantSummary& v) {
  std::map<int64_t, int, std::greater<>> seeds_at;
  for (int64_t length : v.extrapolation_by_seed) ++seeds_at[length];
  std::vector<std::string> parts;
  for (const auto& [length, n] : seeds_at) parts.push_back(fmt::format("{} ({})", extrapolation_word(length), n));
  return join(parts, ", ");
}

bool several_seeds(const ComparisonSummary& s) {
  return std::any_of(s.variants.begin(), s.variants.end(), [](const VariantSummary& v) { return v.seeds.size() > 1; });
}

/// A corpus BLEU cell: "73.1", "73.1 ± 2.4" over seeds, "-" where there is none.
std::string bleu_cell(const Stat& s) {
  if (s.n == 0) return "-";
  return s.n > 1 ? fmt::format("{:.1f} ± {:.1f}", s.mean, s.std) : fmt::format("{:.1f}", s.mean);
}

bool any_bleu(const ComparisonSummary& s) {
  return std::any_of(s.variants.begin(), s.variants.end(), [](const VariantSummary& v) { return v.has_bleu(); });
}

std::string length_header(const ComparisonSummary& s, int64_t length) {
  return fmt::format("len {}{}", length, length > s.train_max_length ? "*" : "");
}

/// The rows tested over seeds against their task's top row, as a table, with
/// what the test is and the smallest p it can give; empty when no row is tested.
std::string seed_test_lines(const ComparisonSummary& s) {
  const std::vector<SeedTest> tests = seed_tests(s);
  if (tests.empty()) return "";
  std::vector<int64_t> lengths;
  for (int64_t L : s.eval_lengths)
    if (std::any_of(tests.begin(), tests.end(), [&](const SeedTest& t) { return t.length == L; })) lengths.push_back(L);
  std::vector<std::string> header = {"variant", "against"};
  for (int64_t L : lengths) header.push_back(length_header(s, L));
  Table rows = {header};
  std::map<std::pair<size_t, size_t>, double> smallest;  // (seeds, top's seeds) -> min p
  for (size_t i = 0; i < tests.size();) {
    const SeedTest& first = tests[i];
    std::vector<std::string> row = {s.variants[first.variant].variant, s.variants[first.top].variant};
    for (int64_t L : lengths) {
      const auto at = std::find_if(tests.begin() + static_cast<long>(i), tests.end(),
                                   [&](const SeedTest& t) { return t.variant == first.variant && t.length == L; });
      row.push_back(at == tests.end() ? "-" : seed_test_cell(at->test));
    }
    smallest[{s.variants[first.variant].seeds.size(), s.variants[first.top].seeds.size()}] = first.test.min_p;
    while (i < tests.size() && tests[i].variant == first.variant) ++i;
    rows.push_back(row);
  }
  std::vector<std::string> floors;
  for (const auto& [sizes, p] : smallest)
    floors.push_back(fmt::format("{} seeds against {}: {:.2g}", sizes.first, sizes.second, p));
  return fmt::format(
      "\nOver seeds, each row of {} seeds or more against the top such row of its task: the difference of the seed "
      "means and the p of a two-sided permutation test of it (exact: every way to split the seeds' scores into two "
      "groups of those sizes; estimated from {} random splits where there are over {}). It assumes "
      "nothing of how scores spread over seeds, so few seeds cannot give a small p: the smallest possible is {}. "
      "Each length is a test of its own; across many cells some small p are expected by chance.\n\n{}",
      kSeedsForTest, kRandomSplits, static_cast<int64_t>(kExactSplits), join(floors, "; "), render_markdown(rows, 2));
}

/// The table as rows of cells (header first), shared by Markdown and text.
Table table_rows(const ComparisonSummary& s) {
  std::vector<std::string> header = {"variant", "seeds", "params", "train s", "in-dist"};
  if (!s.tasks.empty()) header.insert(header.begin() + 1, "metric");
  for (int64_t L : s.eval_lengths) header.push_back(length_header(s, L));
  header.push_back("beyond mean");
  header.push_back("extrapolates to");
  const bool per_seed = several_seeds(s);
  if (per_seed) header.push_back("per seed");
  const bool bleu = any_bleu(s);
  if (bleu) {
    header.push_back("BLEU within");
    header.push_back("BLEU beyond");
  }
  Table rows = {header};
  for (const auto& v : s.variants) {
    std::vector<std::string> row = {v.variant, std::to_string(v.seeds.size()), std::to_string(v.parameters),
                                    fmt::format("{:.0f}", v.train_seconds.mean), val_cell(v.val_accuracy)};
    if (!s.tasks.empty()) row.insert(row.begin() + 1, v.metric);
    for (int64_t L : s.eval_lengths) {
      auto it = std::find_if(v.lengths.begin(), v.lengths.end(), [&](const LengthSummary& l) { return l.length == L; });
      row.push_back(it == v.lengths.end() ? "-" : cell(*it));
    }
    row.push_back(v.beyond_mean < 0 ? "-" : fmt::format("{:.3f}", v.beyond_mean));
    row.push_back(extrapolation_cell(v));
    if (per_seed) row.push_back(per_seed_cell(v));
    if (bleu) {
      row.push_back(bleu_cell(v.bleu_within));
      row.push_back(bleu_cell(v.bleu_beyond));
    }
    rows.push_back(row);
  }
  return rows;
}

/// What a task's lengths count (TaskInfo::length_unit); empty for a task
/// posenc no longer has (a summary of old runs).
std::string length_unit_of(const std::string& task) {
  for (const auto& t : task_registry())
    if (t.name == task) return t.length_unit;
  return "";
}

/// "the task's unit: digits of a", or for a grid of tasks "each task's unit:
/// input tokens for copy, reverse and sort; actions for scan".
std::string units_note(const ComparisonSummary& s) {
  std::vector<std::pair<std::string, std::vector<std::string>>> tasks_of;  // unit -> its tasks, as first seen
  for (const auto& v : s.variants) {
    const std::string unit = length_unit_of(v.task);
    if (unit.empty()) continue;
    auto at = std::find_if(tasks_of.begin(), tasks_of.end(), [&](const auto& e) { return e.first == unit; });
    if (at == tasks_of.end()) at = tasks_of.insert(tasks_of.end(), {unit, {}});
    if (std::find(at->second.begin(), at->second.end(), v.task) == at->second.end()) at->second.push_back(v.task);
  }
  if (tasks_of.empty()) return "";
  if (tasks_of.size() == 1 && tasks_of.front().second.size() == 1)
    return " (the task's unit: " + tasks_of.front().first + ")";
  std::string out;
  for (const auto& [unit, tasks] : tasks_of) out += (out.empty() ? "" : "; ") + unit + " for " + join(tasks, ", ");
  return " (each task's unit: " + out + ")";
}

std::string spread_note(const ComparisonSummary& s) {
  int max_seeds = 0;
  for (const auto& v : s.variants) max_seeds = std::max<int>(max_seeds, static_cast<int>(v.seeds.size()));
  return max_seeds > 1
             ? "± is the standard deviation over seeds (rows with one seed: half-width of the 95% Wilson interval)"
             : "± is the half-width of the 95% Wilson interval (one seed per variant)";
}

/// " (coupled-9k: 9000 steps, scored with the mean weights from step 5000 on)":
/// the grid rows whose training differs from the protocol's first run, as one
/// parenthesis; empty when every row trained alike.
std::string training_differences(const ComparisonSummary& s) {
  std::vector<std::string> notes;
  for (const auto& v : s.variants) {
    std::vector<std::string> differences;
    if (v.steps != 0 && v.steps != s.steps) differences.push_back(fmt::format("{} steps", v.steps));
    if (v.averaged_from > 0)
      differences.push_back(fmt::format("scored with the mean weights from step {} on", v.averaged_from));
    if (differences.empty()) continue;
    const std::string note = v.scheme + ": " + join(differences, ", ");
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);  // once per grid row
  }
  return notes.empty() ? "" : " (" + join(notes, "; ") + ")";
}

std::string protocol_text(const ComparisonSummary& s) {
  if (!s.variants.empty() && s.variants.front().metric == "perplexity")
    return fmt::format(
        "Language modelling: trained {} steps{} of batch {} at context {}-{}. In-dist: next-character accuracy on "
        "held-out windows of the training context. Each length column: perplexity per held-out character, the held-out "
        "text cut into consecutive windows of that context (up to {} windows; each character predicted once, from its "
        "window's start); * marks contexts beyond training. {}. \"extrapolates to\": the longest context up to which "
        "every evaluated context stays within {:.0f}% of the perplexity at the training context.",
        s.steps, training_differences(s), s.batch_size, s.train_min_length, s.train_max_length, s.samples_per_length,
        spread_note(s), (kPerplexityTolerance - 1) * 100);
  if (!s.tasks.empty() || (!s.variants.empty() && s.variants.front().metric != "accuracy"))
    return fmt::format(
               "Trained {} steps{} of batch {} on lengths {}-{}{}. "
               "In-dist: {} validation examples over lengths {}-{}, exact match with teacher forcing (equal to greedy "
               "decoding's). Each length: the same examples (up to {}; eval seed {}) for every variant, scored by "
               "greedy "
               "decoding "
               "(exact_match: the whole answer right; perplexity: per held-out character); * marks lengths beyond "
               "training. "
               "{}. \"extrapolates to\": the longest length up to which every evaluated length keeps >= {:.0f}% of the "
               "in-distribution score above chance (0 for exact match); \"not learned\": in-dist < {}.",
               s.steps, training_differences(s), s.batch_size, s.train_min_length, s.train_max_length, units_note(s),
               s.val_samples, s.train_min_length, s.train_max_length, s.samples_per_length, s.eval_seed, spread_note(s),
               kRetainedMargin * 100, kLearnedAccuracy) +
           (any_bleu(s) ? " BLEU within / beyond: corpus BLEU (4-gram, brevity penalty, 0-100) of the greedy answers "
                          "over the evaluated lengths within / beyond training, mean (± std) over seeds."
                        : "");
  std::string negatives;
  for (const auto& [k, w] : s.negatives) negatives += (negatives.empty() ? "" : ", ") + fmt::format("{} {:g}", k, w);
  return fmt::format(
      "Trained {} steps{} of batch {} on lengths {}-{}; negatives mixed by weight ({}). In-dist: {} validation "
      "sequences over lengths {}-{}. Each length: the same {} sequences (eval seed {}) for every variant; "
      "* marks lengths beyond training. {}. \"extrapolates to\": the longest length up to which every evaluated "
      "length keeps >= {:.0f}% of the in-distribution accuracy above chance (0.5); \"not learned\": in-dist < {}.",
      s.steps, training_differences(s), s.batch_size, s.train_min_length, s.train_max_length, negatives, s.val_samples,
      s.train_min_length, s.train_max_length, s.samples_per_length, s.eval_seed, spread_note(s), kRetainedMargin * 100,
      kLearnedAccuracy);
}

/// The protocol, and what "per seed" counts where the table has that column.
std::string protocol_lines(const ComparisonSummary& s) {
  return protocol_text(s) + (several_seeds(s) ? " \"per seed\": the same rule on each seed's run alone, as length "
                                                "(number of seeds), longest first."
                                              : "");
}

}  // namespace

json summary_to_json(const ComparisonSummary& s) {
  const std::vector<SeedTest> tests = seed_tests(s);
  json diverged = json::array();
  for (const auto& [id, message] : s.diverged) diverged.push_back({{"run", id}, {"message", message}});
  json variants = json::array();
  for (const auto& v : s.variants) {
    json lengths = json::array();
    for (const auto& l : v.lengths) {
      json kinds = json::object();
      for (const auto& [k, st] : l.by_kind) kinds[k] = stat_json(st);
      json at = {{"length", l.length},
                 {"beyond_training", l.beyond_training},
                 {"accuracy", stat_json(l.accuracy)},
                 {"correct", l.correct},
                 {"n", l.total},
                 {"ci95", {l.ci_lo, l.ci_hi}},
                 {"by_kind", kinds}};
      if (l.perplexity.n > 0) at["perplexity"] = stat_json(l.perplexity);
      if (l.bleu.n > 0) at["bleu"] = stat_json(l.bleu);
      if (l.alarms_per_position.n > 0)
        at["false_alarms"] = {{"position_rate", stat_json(l.alarms_per_position)},
                              {"sequence_rate", stat_json(l.alarmed_sequences)}};
      at["by_seed"] = numbers_json(l.by_seed);
      for (const auto& st : tests)
        if (&s.variants[st.variant] == &v && st.length == l.length)
          at["against_top"] = {{"variant", s.variants[st.top].variant},
                               {"difference", number_json(st.test.difference)},
                               {"p", number_json(st.test.p)},
                               {"exact", st.test.exact},
                               {"min_p", st.test.min_p}};
      lengths.push_back(at);
    }
    json by_seed = json::array();
    for (int64_t length : v.extrapolation_by_seed) by_seed.push_back(extrapolation_json(length));
    json variant = {{"variant", v.variant},
                    {"task", v.task},
                    {"length_unit", length_unit_of(v.task)},
                    {"metric", v.metric},
                    {"scheme", v.scheme},
                    {"qkv", v.qkv},
                    {"pooling", v.pooling},
                    {"runs", v.runs},
                    {"seeds", v.seeds},
                    {"parameters", v.parameters},
                    {"steps", v.steps},
                    {"averaged_from", v.averaged_from > 0 ? json(v.averaged_from) : json(nullptr)},
                    {"train_seconds", stat_json(v.train_seconds)},
                    {"val_accuracy", stat_json(v.val_accuracy)},
                    {"final_train_loss", stat_json(v.final_loss)},
                    {"lengths", lengths},
                    {"beyond_mean", v.beyond_mean < 0 ? json(nullptr) : json(v.beyond_mean)},
                    {"extrapolation", extrapolation_json(v.extrapolation)},
                    {"extrapolation_by_seed", by_seed}};
    if (v.has_bleu())
      variant["bleu"] = {{"within_training", v.bleu_within.n ? stat_json(v.bleu_within) : json(nullptr)},
                         {"beyond_training", v.bleu_beyond.n ? stat_json(v.bleu_beyond) : json(nullptr)}};
    variants.push_back(variant);
  }
  json skipped = json::array();
  for (const auto& [variant, reason] : s.skipped) skipped.push_back({{"variant", variant}, {"reason", reason}});
  json environments = json::array();
  for (const auto& e : s.environments) environments.push_back({{"environment", e.environment}, {"runs", e.runs}});
  return {{"source", s.source},
          {"description", s.description},
          {"full", s.full},
          {"tasks", s.tasks},
          {"protocol",
           {{"steps", s.steps},
            {"batch_size", s.batch_size},
            {"train_lengths", {s.train_min_length, s.train_max_length}},
            {"negatives", s.negatives},
            {"val_samples", s.val_samples},
            {"eval_lengths", s.eval_lengths},
            {"samples_per_length", s.samples_per_length},
            {"eval_seed", s.eval_seed},
            {"retained_margin", kRetainedMargin},
            {"learned_accuracy", kLearnedAccuracy}}},
          {"variants", variants},
          {"skipped", skipped},
          {"unfinished", s.unfinished},
          {"diverged", diverged},
          {"environments", environments}};
}

std::string summary_to_csv(const ComparisonSummary& s) {
  std::ostringstream out;
  out << "variant,scheme,qkv,pooling,seeds,parameters,train_seconds,val_mean,val_std";
  for (int64_t L : s.eval_lengths) out << fmt::format(",len{0}_mean,len{0}_std,len{0}_ci_lo,len{0}_ci_hi", L);
  out << ",beyond_mean,extrapolation,task,metric,bleu_within,bleu_beyond,extrapolation_by_seed\n";
  for (const auto& v : s.variants) {
    out << fmt::format("{},{},{},{},{},{},{:.2f},{:.4f},{:.4f}", v.variant, v.scheme, v.qkv, v.pooling, v.seeds.size(),
                       v.parameters, v.train_seconds.mean, v.val_accuracy.mean, v.val_accuracy.std);
    for (int64_t L : s.eval_lengths) {
      auto it = std::find_if(v.lengths.begin(), v.lengths.end(), [&](const LengthSummary& l) { return l.length == L; });
      if (it == v.lengths.end())
        out << ",,,,";
      else
        out << fmt::format(",{:.4f},{:.4f},{:.4f},{:.4f}", it->accuracy.mean, it->accuracy.std, it->ci_lo, it->ci_hi);
    }
    out << "," << (v.beyond_mean < 0 ? "" : fmt::format("{:.4f}", v.beyond_mean)) << ","
        << extrapolation_field(v.extrapolation) << "," << v.task << "," << v.metric << ","
        << (v.bleu_within.n ? fmt::format("{:.2f}", v.bleu_within.mean) : "") << ","
        << (v.bleu_beyond.n ? fmt::format("{:.2f}", v.bleu_beyond.mean) : "") << ",";
    for (size_t i = 0; i < v.extrapolation_by_seed.size(); ++i)
      out << (i ? ";" : "") << extrapolation_field(v.extrapolation_by_seed[i]);  // in the order of summary.json's seeds
    out << "\n";
  }
  return out.str();
}

std::string summary_to_markdown(const ComparisonSummary& s) {
  std::ostringstream out;
  out << render_markdown(table_rows(s), 1);
  out << "\n" << protocol_lines(s) << "\n";
  out << seed_test_lines(s);
  if (!s.environments.empty()) out << "\n" << environment_lines(s);
  if (!s.skipped.empty()) {
    out << "\nNot run (the model cannot be built that way):\n\n";
    for (const auto& [variant, reason] : s.skipped) out << "- " << variant << ": " << reason << "\n";
  }
  if (!s.diverged.empty()) {
    out << "\nDiverged runs (NaN or inf; no result, not retried on rerun):\n\n";
    for (const auto& [id, message] : s.diverged) out << "- " << id << ": " << message << "\n";
  }
  if (!s.unfinished.empty()) {
    out << "\nUnfinished runs (no results yet; rerun the same command to continue them):";
    for (const auto& id : s.unfinished) out << " " << id;
    out << "\n";
  }
  return out.str();
}

std::string summary_to_text(const ComparisonSummary& s) {
  std::ostringstream out;
  out << render_text(table_rows(s), 1);
  out << spread_note(s) << "; * = longer than training (" << s.train_min_length << "-" << s.train_max_length << ")\n";
  for (const auto& [variant, reason] : s.skipped) out << "not run: " << variant << " (" << reason << ")\n";
  for (const auto& [id, message] : s.diverged) out << "diverged: " << id << " (" << message << ")\n";
  if (s.environments.size() > 1)
    out << "the runs come from " << s.environments.size() << " numeric environments (summary.md lists them)\n";
  return out.str();
}

}  // namespace posenc

#include "posenc/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "posenc/model/encoder.h"
#include "posenc/tasks/registry.h"
#include "posenc/train/decode.h"
#include "posenc/train/fits.h"
#include "posenc/train/objective.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/text.h"

namespace posenc {

int64_t evaluation_batch_size(const Transformer& model, int64_t tokens, int64_t max_batch_tokens) {
  const int64_t L = std::max<int64_t>(1, model->model_length(tokens));
  const int64_t by_tokens = max_batch_tokens / L;
  const int64_t by_scores = kMaxScoreElements / (model->config().heads * L * L);
  return std::max<int64_t>(1, std::min(by_tokens, by_scores));
}

namespace {

/// Runs `score(start, tokens)` over the set in chunks of evaluation_batch_size()
/// (start: the chunk's first row; tokens on `device`), in eval mode under
/// InferenceMode (the mode is restored afterwards).
template <typename F>
void for_each_chunk(Transformer& model, const TaskBatch& set, torch::Device device, int64_t max_batch_tokens,
                    bool interruptible, F&& score) {
  struct RestoreMode {  // also when a stop request ends the loop
    Transformer& model;
    bool was_training;
    ~RestoreMode() {
      if (was_training) model->train();
    }
  } restore{model, model->is_training()};
  model->eval();
  c10::InferenceMode guard;
  const int64_t n = set.tokens.size(0), T = set.tokens.size(1);
  const int64_t chunk = evaluation_batch_size(model, T, max_batch_tokens);
  for (int64_t start = 0; start < n; start += chunk) {
    if (interruptible) throw_if_interrupted();
    score(start, set.tokens.narrow(0, start, std::min(chunk, n - start)).to(device));
  }
}

}  // namespace

namespace {
/// (b, A) bool: the answer positions that are scored, all but padding after a padded answer's end.
torch::Tensor answer_scored(const TaskBatch& set, const torch::Tensor& targets) {
  return set.padded ? targets.ne(0) : torch::ones_like(targets, targets.options().dtype(torch::kBool));
}
}  // namespace

std::map<int, Tally> score_set(Transformer& model, const TaskBatch& set, torch::Device device, int64_t max_batch_tokens,
                               bool interruptible, FalseAlarms* alarms, std::vector<std::pair<int64_t, int64_t>>* wrong,
                               int64_t keep_wrong) {
  std::vector<torch::Tensor> correct_parts, bad_parts, predicted_parts;
  EncoderImpl& classifier = classifier_of(model, "scoring a classification set");
  for_each_chunk(model, set, device, max_batch_tokens, interruptible, [&](int64_t start, const torch::Tensor& tokens) {
    auto labels = set.labels.narrow(0, start, tokens.size(0)).to(device);
    torch::Tensor logits;  // (b, classes)
    if (alarms) {
      torch::Tensor per_position;  // (b, L, classes)
      std::tie(logits, per_position) = classifier.classify_positions(tokens);
      const auto positive = labels.eq(1);                                                   // (b)
      const auto alarm = per_position.argmax(-1).ne(1).logical_and(positive.unsqueeze(1));  // (b, L)
      const int64_t n_positive = positive.sum().item<int64_t>();
      alarms->sequences += n_positive;
      alarms->positions += n_positive * tokens.size(1);
      alarms->alarms += alarm.sum().item<int64_t>();
      alarms->alarmed += alarm.any(1).sum().item<int64_t>();
    } else {
      logits = classifier.forward(tokens);
    }
    const auto predicted = logits.argmax(-1);  // (b)
    correct_parts.push_back(predicted.eq(labels).cpu());
    if (wrong) predicted_parts.push_back(predicted.cpu());
    bad_parts.push_back(torch::isfinite(logits).logical_not().any(-1).cpu());
  });
  auto correct = torch::cat(correct_parts), bad = torch::cat(bad_parts);  // (n) bool
  auto acc = correct.accessor<bool, 1>();
  auto nonfinite = bad.accessor<bool, 1>();
  std::map<int, Tally> tally;
  for (int64_t i = 0; i < correct.size(0); ++i) {
    auto& t = tally[set.kinds[i]];
    t.n++;
    t.correct += acc[i] ? 1 : 0;
    t.non_finite += nonfinite[i] ? 1 : 0;
  }
  if (wrong) {
    const auto predicted = torch::cat(predicted_parts);  // (n)
    const auto p = predicted.accessor<int64_t, 1>();
    for (int64_t i = 0; i < correct.size(0) && static_cast<int64_t>(wrong->size()) < keep_wrong; ++i)
      if (!acc[i]) wrong->push_back({i, p[i]});
  }
  return tally;
}

namespace {
/// Row r of a (b, A) int64 tensor.
std::vector<int64_t> row_tokens(const torch::Tensor& rows, int64_t r) {
  const auto row = rows[r].contiguous();
  const int64_t* begin = row.data_ptr<int64_t>();
  return {begin, begin + row.numel()};
}
/// `tokens` up to (not including) the first `eos`; all of them when eos is 0.
std::vector<int64_t> cut_before(std::vector<int64_t> tokens, int64_t eos) {
  if (eos > 0) tokens.erase(std::find(tokens.begin(), tokens.end(), eos), tokens.end());
  return tokens;
}

/// The model's likeliest tokens at each kept answer's first wrong token, and
/// the reference's probability there: one teacher-forced pass over the prompt
/// and the model's own answer (its tokens before the first wrong one are the
/// reference's, so the pass sees what greedy decoding saw).
/// chunk (b, T) the prompts and references; decoded (b, A); rows: the kept
/// rows of the chunk, whose entries are kept[0..rows.size()).
void add_choices(Transformer& model, const torch::Tensor& chunk, const torch::Tensor& decoded,
                 const torch::Tensor& positions, const std::vector<int64_t>& rows, WrongDecoding* kept) {
  const int64_t A = decoded.size(1), a = chunk.size(1) - A;
  const auto index = torch::tensor(rows, torch::kLong), on_device = index.to(chunk.device());
  const auto own = torch::cat({chunk.narrow(1, 0, a), decoded}, 1).index_select(0, on_device);          // (k, T)
  const auto ids = positions.defined() ? positions.index_select(0, index) : positions;                  // (k, T)
  const auto logits = next_token_model(model, "keeping wrong answers").answer_logits(own, a, {}, ids);  // (k, A, V+2)
  std::vector<int64_t> firsts;
  for (size_t i = 0; i < rows.size(); ++i) firsts.push_back(kept[i].first_wrong);
  const auto at_first = torch::tensor(firsts, torch::kLong).to(logits.device());
  const auto probabilities =
      logits.index({torch::arange(static_cast<int64_t>(rows.size()), at_first.options()), at_first})
          .to(torch::kFloat)
          .softmax(-1)
          .cpu();                                                                  // (k, V+2)
  const auto references = chunk.narrow(1, a, A).index_select(0, on_device).cpu();  // (k, A)
  for (size_t i = 0; i < rows.size(); ++i) {
    WrongDecoding& w = kept[i];
    const auto at = probabilities[static_cast<int64_t>(i)];  // (V+2) at the first wrong token
    if (!torch::isfinite(at).all().item<bool>()) continue;   // counted as non-finite already; nothing to rank
    const auto [p, token] = at.topk(std::min<int64_t>(kWrongAnswerChoices, at.size(0)));
    for (int64_t c = 0; c < p.size(0); ++c) w.choices.push_back({token[c].item<int64_t>(), p[c].item<double>()});
    w.right_probability = at[references[static_cast<int64_t>(i)][w.first_wrong].item<int64_t>()].item<double>();
  }
}
}  // namespace

std::pair<Tally, Tally> score_decoding(Transformer& model, const TaskBatch& set, torch::Device device,
                                       int64_t max_batch_tokens, bool interruptible, const DecodingDetails& details) {
  BleuCounts* const bleu = details.bleu;
  Tally* const oracle = details.oracle;
  std::map<int64_t, int64_t>* const first_wrong = details.first_wrong;
  std::vector<WrongDecoding>* const kept = details.wrong;
  const int64_t eos = details.eos;
  Tally exact, tokens;
  const int64_t a = set.answer_start, A = set.tokens.size(1) - a;
  for_each_chunk(model, set, device, max_batch_tokens, interruptible, [&](int64_t start, const torch::Tensor& chunk) {
    torch::Tensor bad;  // (b) bool
    Sampling greedy;
    greedy.non_finite_rows = &bad;
    if (set.positions.defined()) greedy.positions = set.positions.narrow(0, start, chunk.size(0));
    auto decoded = continue_tokens(model, chunk.narrow(1, 0, a), A, greedy);  // (b, A)
    auto targets = chunk.narrow(1, a, A);                                     // (b, A)
    auto scored = answer_scored(set, targets);
    auto right = decoded.eq(targets).logical_and(scored);
    auto wrong = right.logical_or(scored.logical_not()).logical_not();  // (b, A) scored and not right
    if (bad.defined()) exact.non_finite += bad.sum().item<int64_t>();
    exact.n += chunk.size(0);
    exact.correct += wrong.any(1).logical_not().sum().item<int64_t>();
    tokens.n += scored.sum().item<int64_t>();
    tokens.correct += right.sum().item<int64_t>();
    if (first_wrong || kept) {
      const auto is_wrong = wrong.any(1).cpu();                                // (b)
      const auto first = wrong.to(torch::kLong).cumsum(1).eq(0).sum(1).cpu();  // (b) the right tokens before it
      const auto w = is_wrong.accessor<bool, 1>();
      const auto f = first.accessor<int64_t, 1>();
      torch::Tensor answers;  // (b, A) on the CPU, once a wrong answer is kept
      std::vector<int64_t> kept_rows;
      for (int64_t r = 0; r < first.size(0); ++r) {
        if (!w[r]) continue;
        if (first_wrong) ++(*first_wrong)[f[r]];
        if (!kept || static_cast<int64_t>(kept->size()) >= details.keep_wrong) continue;
        if (!answers.defined()) answers = decoded.cpu();
        kept->push_back({start + r, row_tokens(answers, r), f[r]});
        kept_rows.push_back(r);
      }
      if (!kept_rows.empty())
        add_choices(model, chunk, decoded, greedy.positions, kept_rows,
                    kept->data() + (kept->size() - kept_rows.size()));
    }
    if (bleu) {
      const auto hypotheses = decoded.cpu(), references = targets.cpu();
      for (int64_t r = 0; r < hypotheses.size(0); ++r)
        bleu->add(cut_before(row_tokens(hypotheses, r), eos), cut_before(row_tokens(references, r), eos));
    }
    if (oracle && eos > 0) {
      // The reference's end: its first eos, else past its last token. (b)
      auto is_end = targets.eq(eos).logical_and(scored);  // (b, A)
      auto ends = torch::where(is_end.any(1), is_end.to(torch::kLong).argmax(1),
                               torch::full_like(is_end.select(1, 0), A, torch::kLong));
      Sampling given_length;
      given_length.positions = greedy.positions;
      given_length.hold_token = eos;
      given_length.hold_until = ends;
      auto held = continue_tokens(model, chunk.narrow(1, 0, a), A, given_length);             // (b, A)
      auto before_end = torch::arange(A, ends.options()).unsqueeze(0).lt(ends.unsqueeze(1));  // (b, A)
      auto wrong = held.ne(targets).logical_and(before_end).logical_and(scored);
      oracle->n += chunk.size(0);
      oracle->correct += wrong.any(1).logical_not().sum().item<int64_t>();
    }
  });
  return {exact, tokens};
}

Tally score_teacher_forced(Transformer& model, const TaskBatch& set, torch::Device device, int64_t max_batch_tokens,
                           double* nll_sum, Tally* exact, bool interruptible) {
  Tally tokens;
  NextTokenModel& next = next_token_model(model, "teacher-forced scoring");
  const int64_t a = set.answer_start, A = set.tokens.size(1) - a;
  for_each_chunk(model, set, device, max_batch_tokens, interruptible, [&](int64_t start, const torch::Tensor& chunk) {
    const auto positions =
        set.positions.defined() ? set.positions.narrow(0, start, chunk.size(0)) : set.positions;  // (b, T)
    auto logits = next.answer_logits(chunk, a, {}, positions).to(torch::kFloat);                  // (b, A, V+2)
    auto targets = chunk.narrow(1, a, A);                                                         // (b, A)
    auto scored = answer_scored(set, targets);
    auto right = logits.argmax(-1).eq(targets).logical_and(scored);  // (b, A)
    const int64_t bad = torch::isfinite(logits).logical_not().flatten(1).any(1).sum().item<int64_t>();
    tokens.non_finite += bad;
    if (exact) exact->non_finite += bad;
    tokens.n += scored.sum().item<int64_t>();
    tokens.correct += right.sum().item<int64_t>();
    if (exact) {
      exact->n += chunk.size(0);
      exact->correct += right.logical_or(scored.logical_not()).all(1).sum().item<int64_t>();
    }
    if (nll_sum) {
      auto nll = torch::nn::functional::cross_entropy(
          logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(0));
      *nll_sum += nll.item<double>();
    }
  });
  return tokens;
}

namespace {
// Validation sets are drawn apart from the evaluation sets of the same eval.seed.
constexpr int64_t kValidationSeedOffset = 1000003;
std::string kind_name(const Task& task, int kind) { return kind < 0 ? "sorted" : task.kind_names().at(kind); }
}  // namespace

EvaluationSpec evaluation_spec(const Config& cfg) {
  const TaskInfo& task = find_task(cfg.task.type);
  const int64_t positions_end = task.positions_end ? task.positions_end(cfg.task, cfg.task.max_length) : 0;
  return {cfg.eval, cfg.task.min_length, cfg.task.max_length, cfg.train.val_samples, positions_end};
}

namespace {

/// Tokens [begin, begin + n) of `set`'s row `r` that are data (1..V): without
/// padding (0) and without the special token (V + 1: CLS, SEP).
std::vector<int64_t> data_tokens(const Task& task, const TaskBatch& set, int64_t r, int64_t begin, int64_t n) {
  std::vector<int64_t> tokens = row_tokens(set.tokens.narrow(1, begin, n), r);
  const int64_t vocab = task.vocab_size();
  tokens.erase(std::remove_if(tokens.begin(), tokens.end(), [&](int64_t t) { return t < 1 || t > vocab; }),
               tokens.end());
  return tokens;
}

/// A classifier's wrong answer as results.json keeps it (LengthResult::wrong_answers).
nlohmann::json wrong_classification(const Task& task, const TaskBatch& set, int64_t row, int64_t predicted) {
  return {{"example", row},
          {"input", task.decode_text(data_tokens(task, set, row, 0, set.tokens.size(1)))},
          {"kind", set.kinds.empty() ? std::string() : kind_name(task, set.kinds[row])},
          {"label", set.labels[row].item<int64_t>()},
          {"predicted", predicted}};
}

/// A decoder's wrong answer as results.json keeps it: the prompt without SEP,
/// the reference and the decoded answer each cut before the end token.
nlohmann::json wrong_decoding(const Task& task, const TaskBatch& set, const WrongDecoding& w) {
  const int64_t a = set.answer_start, eos = task.end_token();
  const auto reference = cut_before(data_tokens(task, set, w.row, a, set.tokens.size(1) - a), eos);
  nlohmann::json choices = nlohmann::json::array();  // [[token, probability], ...]
  for (const auto& [token, p] : w.choices) choices.push_back({task.decode_text({token}), p});
  return {{"example", w.row},
          {"prompt", task.decode_text(data_tokens(task, set, w.row, 0, a))},
          {"reference", task.decode_text(reference)},
          {"answer", task.decode_text(cut_before(w.answer, eos))},
          {"first_wrong_token", w.first_wrong},
          {"first_wrong_choices", choices},
          {"right_token_probability", w.right_probability}};
}

}  // namespace

std::vector<LengthResult> evaluate_lengths(Transformer& model, const Task& task, const EvaluationSpec& spec,
                                           const std::vector<int64_t>& lengths, torch::Device device) {
  check_evaluation_fits(model, task, spec, lengths, device);
  const TaskMetric metric = task.info().metric;
  std::vector<LengthResult> results;
  for (int64_t length : lengths) {
    const TaskBatch set = task.fixed_set(length, spec.sets.samples_per_length, spec.sets.seed);
    LengthResult r;
    r.length = length;
    r.metric = metric;
    if (metric == TaskMetric::Accuracy) {
      r.has_false_alarms = !model->is_decoder() && model->config().pooling != Pooling::Cls;
      std::vector<std::pair<int64_t, int64_t>> wrong;
      for (const auto& [kind, t] :
           score_set(model, set, device, spec.sets.max_batch_tokens, /*interruptible=*/true,
                     r.has_false_alarms ? &r.false_alarms : nullptr, &wrong, spec.sets.wrong_answers)) {
        r.by_kind[kind_name(task, kind)] = t;
        r.total.n += t.n;
        r.total.correct += t.correct;
        r.total.non_finite += t.non_finite;
      }
      for (const auto& [row, predicted] : wrong)
        r.wrong_answers.push_back(wrong_classification(task, set, row, predicted));
    } else if (metric == TaskMetric::ExactMatch) {
      r.has_bleu = task.info().bleu;
      r.has_oracle = spec.sets.oracle_length;
      std::vector<WrongDecoding> wrong;
      DecodingDetails details;
      details.bleu = r.has_bleu ? &r.bleu : nullptr;
      details.eos = task.end_token();
      details.oracle = r.has_oracle ? &r.oracle : nullptr;
      details.first_wrong = &r.first_wrong;
      details.wrong = &wrong;
      details.keep_wrong = spec.sets.wrong_answers;
      std::tie(r.total, r.tokens) = score_decoding(model, set, device, spec.sets.max_batch_tokens, true, details);
      for (const auto& w : wrong) r.wrong_answers.push_back(wrong_decoding(task, set, w));
    } else {
      r.tokens = score_teacher_forced(model, set, device, spec.sets.max_batch_tokens, &r.nll_sum, nullptr, true);
      r.total = r.tokens;
    }
    r.ci95 = wilson_interval(r.total.correct, r.total.n);
    r.non_finite = std::max(r.total.non_finite, r.tokens.non_finite);
    if (r.non_finite > 0 || (metric == TaskMetric::Perplexity && !std::isfinite(r.perplexity())))
      spdlog::warn(
          "length {}: {} of {} examples gave NaN or inf outputs; the score at this length measures nothing "
          "(\"non_finite\" in the results)",
          length, std::max<int64_t>(r.non_finite, 1), r.total.n);
    r.beyond_training = length > task.longest_training_length(spec.max_length);
    r.untrained_positions = r.beyond_training && model->has_position_table();
    // A task's own ids (with training offsets) can stay inside the trained rows at any length.
    if (set.positions.defined() && spec.training_positions_end > 0)
      r.untrained_positions =
          model->has_position_table() && set.positions.max().item<int64_t>() >= spec.training_positions_end;
    results.push_back(r);
  }
  return results;
}

TaskBatch shard_rows(const TaskBatch& batch, int shard, int shards) {
  if (shards == 1) return batch;
  const int64_t n = batch.tokens.size(0), begin = n * shard / shards, end = n * (shard + 1) / shards;
  TaskBatch out;
  out.tokens = batch.tokens.slice(0, begin, end);
  if (batch.labels.defined()) out.labels = batch.labels.slice(0, begin, end);
  out.answer_start = batch.answer_start;
  out.padded = batch.padded;
  if (batch.positions.defined()) out.positions = batch.positions.slice(0, begin, end);
  if (!batch.kinds.empty()) out.kinds.assign(batch.kinds.begin() + begin, batch.kinds.begin() + end);
  return out;
}

Tally validation_accuracy(Transformer& model, const Task& task, const EvaluationSpec& spec, torch::Device device,
                          bool interruptible, int shard, int shards) {
  const auto mine = [&](const TaskBatch& set) { return shard_rows(set, shard, shards); };
  const TaskMetric metric = task.info().metric;
  const int64_t seed = spec.sets.seed + kValidationSeedOffset;
  if (metric == TaskMetric::Perplexity) {  // next-token accuracy on held-out windows of the training context
    const TaskBatch set = mine(task.fixed_set(spec.max_length, spec.val_samples, seed));
    if (set.tokens.size(0) == 0) return Tally{};
    return score_teacher_forced(model, set, device, spec.sets.max_batch_tokens, nullptr, nullptr, interruptible);
  }
  const int64_t lengths = spec.max_length - spec.min_length + 1;
  const int64_t per_length = std::max<int64_t>(2, spec.val_samples / lengths);
  Tally total;
  for (int64_t length = spec.min_length; length <= spec.max_length; ++length) {
    if (interruptible) throw_if_interrupted();
    const TaskBatch set = mine(task.fixed_set(length, per_length, seed));
    if (set.tokens.size(0) == 0) continue;
    if (metric == TaskMetric::ExactMatch) {
      Tally exact;
      score_teacher_forced(model, set, device, spec.sets.max_batch_tokens, nullptr, &exact, interruptible);
      total.n += exact.n;
      total.correct += exact.correct;
      continue;
    }
    for (const auto& [kind, t] : score_set(model, set, device, spec.sets.max_batch_tokens, interruptible)) {
      total.n += t.n;
      total.correct += t.correct;
    }
  }
  return total;
}

namespace {

/// A score over outputs that were all NaN or inf measures nothing: NaN (null
/// in results.json, "nan" in the table), never the score of a model that guessed.
double measured(const Tally& t, double score) {
  return t.n > 0 && t.non_finite >= t.n ? std::numeric_limits<double>::quiet_NaN() : score;
}

}  // namespace

nlohmann::json length_results_to_json(const std::vector<LengthResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [name, t] : r.by_kind)
      kinds[name] = {{"n", t.n}, {"correct", t.correct}, {"accuracy", measured(t, t.accuracy())}};
    // The score once, under its metric's key; the other numbers under their own.
    nlohmann::json j = {{"length", r.length},
                        {"n", r.total.n},
                        {"correct", r.total.correct},
                        {score_key(r.metric), measured(r.total, r.total.accuracy())},
                        {"ci95", {measured(r.total, r.ci95.lo), measured(r.total, r.ci95.hi)}},
                        {"by_kind", kinds},
                        {"beyond_training", r.beyond_training},
                        {"non_finite", r.non_finite},
                        {"untrained_positions", r.untrained_positions}};
    if (r.metric != TaskMetric::Accuracy) j["tokens"] = r.tokens.n;
    if (r.metric == TaskMetric::ExactMatch) {
      j["token_accuracy"] = r.tokens.accuracy();
      // [index, wrong answers]: where greedy decoding first left the reference.
      nlohmann::json first = nlohmann::json::array();
      for (const auto& [index, count] : r.first_wrong) first.push_back({index, count});
      j["first_wrong_token"] = first;
    }
    if (!r.wrong_answers.empty()) j["wrong_answers"] = r.wrong_answers;
    if (r.has_bleu) j["bleu"] = r.bleu.score();
    if (r.has_oracle) j["oracle_length"] = {{"correct", r.oracle.correct}, {"exact_match", r.oracle.accuracy()}};
    if (r.has_false_alarms)
      j["false_alarms"] = {{"position_rate", r.false_alarms.position_rate()},
                           {"sequence_rate", r.false_alarms.sequence_rate()},
                           {"positions", r.false_alarms.positions},
                           {"sequences", r.false_alarms.sequences}};
    if (r.metric == TaskMetric::Perplexity) {
      j["perplexity"] = r.perplexity();
      j["bits_per_token"] = r.tokens.n ? r.nll_sum / r.tokens.n / std::log(2.0) : 0.0;
    }
    out.push_back(j);
  }
  return out;
}

nlohmann::json corpus_bleu_json(const std::vector<LengthResult>& results) {
  BleuCounts all, within, beyond;
  bool any = false, any_within = false, any_beyond = false;
  for (const auto& r : results) {
    if (!r.has_bleu) continue;
    any = true;
    all += r.bleu;
    (r.beyond_training ? beyond : within) += r.bleu;
    (r.beyond_training ? any_beyond : any_within) = true;
  }
  if (!any) return nullptr;
  return {{"all", all.score()},
          {"within_training", any_within ? nlohmann::json(within.score()) : nlohmann::json()},
          {"beyond_training", any_beyond ? nlohmann::json(beyond.score()) : nlohmann::json()}};
}

namespace {

/// Words [first - kWrongContext, first + kWrongContext] of `text`, the word at
/// `first` in brackets, "..." where words are left out.
constexpr int64_t kWrongContext = 4;
std::string window_around(const std::string& text, int64_t first) {
  const std::vector<std::string> words = split_words(text);
  const int64_t n = static_cast<int64_t>(words.size());
  const int64_t begin = std::max<int64_t>(0, first - kWrongContext), end = std::min(n, first + kWrongContext + 1);
  std::string out = begin > 0 ? "..." : "";
  for (int64_t i = begin; i < end; ++i)
    out += (out.empty() ? "" : " ") + (i == first ? "[" + words[i] + "]" : words[i]);
  if (first >= n) out += (out.empty() ? "" : " ") + std::string("[]");  // the answer ended before it
  if (end < n) out += " ...";
  return out;
}

}  // namespace

std::string format_wrong_answers(const std::vector<LengthResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    if (r.wrong_answers.empty()) continue;
    out << "length " << r.length << ": " << r.wrong_answers.size() << " of its " << r.total.n - r.total.correct
        << " wrong answers\n";
    for (const auto& w : r.wrong_answers) {
      if (w.contains("first_wrong_token")) {
        const int64_t first = w["first_wrong_token"];
        out << "  example " << w["example"].get<int64_t>() << ", first wrong token " << first << "\n"
            << "    reference  " << window_around(w["reference"], first) << "\n"
            << "    answer     " << window_around(w["answer"], first) << "\n";
        if (w.contains("first_wrong_choices") && !w["first_wrong_choices"].empty()) {
          std::vector<std::string> shown;
          for (const auto& c : w["first_wrong_choices"])
            shown.push_back(fmt::format("{} {:.3f}", c[0].get<std::string>(), c[1].get<double>()));
          out << "    choices    " << join(shown, ", ")
              << fmt::format(" (the reference's {:.3f})", w["right_token_probability"].get<double>()) << "\n";
        }
      } else {
        out << "  example " << w["example"].get<int64_t>() << " (" << w["kind"].get<std::string>() << "): label "
            << w["label"].get<int64_t>() << ", predicted " << w["predicted"].get<int64_t>() << "\n";
      }
    }
  }
  return out.str();
}

std::string format_length_table(const std::vector<LengthResult>& results, const Task& task) {
  std::ostringstream out;
  const TaskMetric metric = task.info().metric;
  const auto suffix = [](const LengthResult& r) {
    return std::string(r.untrained_positions ? "  (untrained positions)"
                       : r.beyond_training   ? "  (longer than training)"
                                             : "");
  };
  if (metric == TaskMetric::ExactMatch) {
    const bool bleu = task.info().bleu;
    const bool oracle = !results.empty() && results.front().has_oracle;
    out << fmt::format("{:>7} {:>11} {:>17} {:>14}{}{}\n", "length", "exact match", "95% CI", "token accuracy",
                       bleu ? fmt::format(" {:>6}", "BLEU") : "", oracle ? fmt::format(" {:>13}", "length given") : "");
    for (const auto& r : results)
      out << fmt::format("{:>7} {:>11.3f}   [{:.3f}, {:.3f}] {:>14.3f}{}{}{}\n", r.length,
                         measured(r.total, r.total.accuracy()), measured(r.total, r.ci95.lo),
                         measured(r.total, r.ci95.hi), measured(r.tokens, r.tokens.accuracy()),
                         bleu ? fmt::format(" {:>6.1f}", r.bleu.score()) : "",
                         oracle ? fmt::format(" {:>13.3f}", r.oracle.accuracy()) : "", suffix(r));
    if (oracle)
      out << "length given: exact match with the end token held back until the reference's length "
             "(eval.oracle_length)\n";
    const nlohmann::json corpus = corpus_bleu_json(results);
    if (!corpus.is_null()) {
      out << fmt::format("corpus BLEU over these lengths: {:.1f}", corpus["all"].get<double>());
      if (!corpus["within_training"].is_null())
        out << fmt::format("; within the training lengths {:.1f}", corpus["within_training"].get<double>());
      if (!corpus["beyond_training"].is_null())
        out << fmt::format("; beyond them {:.1f}", corpus["beyond_training"].get<double>());
      out << "\n";
    }
    return out.str();
  }
  if (metric == TaskMetric::Perplexity) {
    out << fmt::format("{:>7} {:>10} {:>14} {:>14} {:>9}\n", "context", "perplexity", "bits/char", "next-char acc",
                       "chars");
    for (const auto& r : results)
      out << fmt::format("{:>7} {:>10.3f} {:>14.3f} {:>14.3f} {:>9}{}\n", r.length, r.perplexity(),
                         r.tokens.n ? r.nll_sum / r.tokens.n / std::log(2.0) : 0.0, r.tokens.accuracy(), r.tokens.n,
                         suffix(r));
    return out.str();
  }
  out << fmt::format("{:>7} {:>9} {:>17} ", "length", "accuracy", "95% CI");
  std::vector<std::string> kinds = {"sorted"};
  for (const auto& k : task.kind_names()) kinds.push_back(k);
  for (const auto& k : kinds) out << fmt::format(" {:>13}", k);
  const bool alarms = !results.empty() && results.front().has_false_alarms;
  if (alarms) out << fmt::format(" {:>15} {:>15}", "alarms/position", "alarms/sorted");
  out << "\n";
  for (const auto& r : results) {
    out << fmt::format("{:>7} {:>9.3f}   [{:.3f}, {:.3f}] ", r.length, measured(r.total, r.total.accuracy()),
                       measured(r.total, r.ci95.lo), measured(r.total, r.ci95.hi));
    for (const auto& k : kinds) {
      auto it = r.by_kind.find(k);
      out << (it == r.by_kind.end() ? fmt::format(" {:>13}", "-")
                                    : fmt::format(" {:>13.3f}", measured(it->second, it->second.accuracy())));
    }
    if (alarms)
      out << fmt::format(" {:>15.4f} {:>15.3f}", r.false_alarms.position_rate(), r.false_alarms.sequence_rate());
    out << suffix(r) << "\n";
  }
  if (alarms)
    out << "alarms: on sorted sequences, the share of positions whose own output the classifier calls unsorted, "
           "and the share of sorted sequences with at least one such position\n";
  return out.str();
}

OperandGrid evaluate_operand_grid(Transformer& model, const Task& task, const EvaluationSpec& spec,
                                  const std::vector<int64_t>& digits, torch::Device device) {
  if (!task.info().has_operands)
    throw ConfigError("eval.operand_grid: task " + task.info().name + " has no operands whose lengths could differ");
  EvaluationSpec grid_spec = spec;
  grid_spec.sets.operand_grid = digits;
  check_evaluation_fits(model, task, grid_spec, {}, device);  // the largest cell: two operands of the most digits
  OperandGrid grid;
  grid.digits = digits;
  for (const int64_t a : digits) {
    std::vector<Tally> row;
    for (const int64_t b : digits) {
      const TaskBatch set = task.fixed_operand_set(a, b, spec.sets.samples_per_length, spec.sets.seed);
      row.push_back(score_decoding(model, set, device, spec.sets.max_batch_tokens, /*interruptible=*/true).first);
    }
    grid.exact.push_back(row);
  }
  return grid;
}

nlohmann::json operand_grid_to_json(const OperandGrid& grid) {
  nlohmann::json exact = nlohmann::json::array(), counts = nlohmann::json::array();
  for (const auto& row : grid.exact) {
    nlohmann::json e = nlohmann::json::array(), n = nlohmann::json::array();
    for (const auto& t : row) e.push_back(t.accuracy()), n.push_back(t.n);
    exact.push_back(e);
    counts.push_back(n);
  }
  return {{"digits", grid.digits}, {"exact_match", exact}, {"n", counts}};
}

std::string format_operand_grid(const OperandGrid& grid) {
  std::ostringstream out;
  out << "exact match by operand digits (a down, b across)\n  a \\ b";
  for (const int64_t b : grid.digits) out << fmt::format("{:>7}", b);
  out << "\n";
  for (size_t i = 0; i < grid.digits.size(); ++i) {
    out << fmt::format("{:>7}", grid.digits[i]);
    for (const auto& t : grid.exact[i]) out << fmt::format("{:>7.3f}", t.accuracy());
    out << "\n";
  }
  return out.str();
}

}  // namespace posenc

// Translation on a user's parallel text: a UTF-8 file of `source TAB target`
// lines (task.path), for an encoder_decoder.
//
// Tokens are words (split at blanks: tokenize the file as you want it beforehand)
// or characters (UTF-8 code points, blanks included), task.tokens. One
// vocabulary serves both sides: every token of the file, sorted, then EOS. It
// is recorded in the run's config when training starts (task.vocabulary), with
// the file's size and checksum, so that a checkpoint translates without the
// file and a resume refuses a changed one.
//
// A fixed random task.val_fraction of the pairs is held out (task.split_seed).
// The task length is the target's length in tokens: training draws the
// training pairs whose target has task.min_length..max_length tokens, and an
// evaluation set of length n holds the held-out pairs of n target tokens, so
// that training on short sentences and evaluating long ones measures length
// extrapolation. Evaluation scores exact match, token accuracy and corpus BLEU.
#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "posenc/tasks/pairs.h"
#include "posenc/tasks/task.h"
#include "posenc/tasks/builtin_tasks.h"
#include "posenc/util/io.h"

namespace posenc {
namespace {

/// The example file that comes with posenc (scripts/make_numbers_tsv.py).
constexpr const char* kExampleFile = "configs/data/numbers_en_fr.tsv";
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1} << 30;
/// task.vocabulary and task.checksum before training records them.
constexpr const char* kNotRecorded = "unrecorded";

/// Blanks at both ends removed (spaces, tabs, a Windows line end's \r).
std::string trimmed(const std::string& s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  size_t b = 0, e = s.size();
  while (b < e && blank(s[b])) ++b;
  while (e > b && blank(s[e - 1])) --e;
  return s.substr(b, e - b);
}

/// Words (runs of non-blanks) or UTF-8 code points of valid UTF-8 text.
std::vector<std::string> tokenize(const std::string& text, bool characters) {
  std::vector<std::string> out;
  if (!characters) {
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  }
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string join_tokens(const std::vector<std::string>& tokens, bool characters) {
  std::string out;
  for (const auto& t : tokens) out += (out.empty() || characters ? "" : " ") + t;
  return out;
}

/// The recorded form of a vocabulary: each token followed by a newline (no
/// token holds one, as tokens come from lines).
std::string vocabulary_text(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& t : tokens) out += t + "\n";
  return out;
}

class TranslationTask : public Task {
 public:
  explicit TranslationTask(const TaskConfig& cfg)
      : cfg_(cfg),
        path_(cfg.options.get_string("path")),
        characters_(cfg.options.get_string("tokens") == "char"),
        val_fraction_(cfg.options.get_float("val_fraction")),
        split_seed_(cfg.options.get_int("split_seed")) {
    const std::string recorded = cfg.options.get_string("vocabulary");
    if (recorded != kNotRecorded) {
      if (recorded.empty() || recorded.back() != '\n')
        throw ConfigError("task.vocabulary: not a vocabulary posenc recorded (tokens, each followed by a newline)");
      std::istringstream in(recorded);
      for (std::string t; std::getline(in, t);) vocabulary_.push_back(t);
      index_vocabulary();
    }
    // The pairs are read here, once. A recorded vocabulary (a checkpoint's
    // config) translates without them: where the file is gone, or no longer
    // fits the vocabulary, the task holds no pairs, and what needs them
    // (training, evaluation) says why.
    if (vocabulary_.empty()) {
      data_ = read_pairs();
    } else if (!std::filesystem::exists(path_)) {
      no_data_because_ = fmt::format(
          "task.path: {} does not exist; the run's recorded vocabulary translates without it, but "
          "training and evaluation read its pairs",
          path_);
    } else {
      try {
        data_ = read_pairs();
      } catch (const ConfigError& e) {
        no_data_because_ = e.what();
      }
    }
  }

  const TaskInfo& info() const override { return find_task("translation"); }
  int64_t vocab_size() const override { return eos(); }
  int64_t end_token() const override { return eos(); }
  int64_t sequence_length(int64_t length) const override { return data().source_width + 1 + length + 1; }
  std::string widest_data() const override {
    const Data& d = data();
    return fmt::format("the longest source, {} {} at {} line {}", d.source_width, tokens_word(), path_,
                       d.source_width_line);
  }

  nlohmann::json data_identity() const override {
    return {{"bytes", static_cast<int64_t>(data().bytes)},
            {"checksum", data().checksum},
            {"vocabulary", vocabulary_text(vocabulary())}};
  }

  TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override {
    const Data& d = data();
    if (d.train.empty()) check_training_lengths(cfg_.min_length, cfg_.max_length);
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x74736c6eu}));
    std::uniform_int_distribution<size_t> pick(0, d.train.size() - 1);
    std::vector<size_t> chosen;
    for (int64_t i = 0; i < batch_size; ++i) chosen.push_back(d.train[pick(rng)]);
    return pair_rows(d.pairs, chosen, 0, eos());
  }

  /// Up to n held-out pairs whose target has `length` tokens (none: an empty set).
  TaskBatch fixed_set(int64_t length, int64_t n, int64_t seed) const override {
    const Data& d = data();
    const auto it = d.held_out_by_length.find(length);
    std::vector<size_t> pool = it == d.held_out_by_length.end() ? std::vector<size_t>{} : it->second;
    return pair_rows(d.pairs, fixed_sample(std::move(pool), n, seed, length), 0, eos(), length);
  }

  void check_eval_length(int64_t length) const override {
    const Data& d = data();
    if (d.held_out_by_length.count(length)) return;
    throw ConfigError(
        fmt::format("length {}: no held-out pair of {} has a target of {} {} (held-out target lengths: {})", length,
                    path_, length, tokens_word(), held_out_lengths()));
  }

  void check_training_lengths(int64_t min_length, int64_t max_length) const override {
    const Data& d = data();
    const auto in_range = [&](const std::map<int64_t, std::vector<size_t>>& by_length) {
      return std::any_of(by_length.begin(), by_length.end(),
                         [&](const auto& entry) { return entry.first >= min_length && entry.first <= max_length; });
    };
    if (!in_range(d.train_by_length))
      throw ConfigError(
          fmt::format("task.min_length={}..task.max_length={}: no training pair of {} has a target of "
                      "that many {} (training target lengths: {})",
                      min_length, max_length, path_, tokens_word(), lengths_of(d.train_by_length)));
    if (!in_range(d.held_out_by_length))
      throw ConfigError(
          fmt::format("task.min_length={}..task.max_length={}: no held-out pair of {} has a target of "
                      "that many {} to validate on (held-out target lengths: {}); raise "
                      "task.val_fraction or widen the lengths",
                      min_length, max_length, path_, tokens_word(), held_out_lengths()));
  }

  std::vector<int64_t> encode_text(const std::string& text) const override {
    std::vector<int64_t> out;
    const std::string why = fmt::format("the vocabulary of {} ({} {})", path_, vocabulary().size(), tokens_word());
    for (const auto& t : tokenize(trimmed(text), characters_)) out.push_back(token_id(t, "the source", why));
    if (out.empty()) throw ConfigError("an empty source");
    return out;
  }
  std::string decode_text(const std::vector<int64_t>& tokens) const override {
    std::vector<std::string> out;
    for (int64_t t : tokens) {
      if (t == eos()) break;
      out.push_back(t >= 1 && t < eos() ? vocabulary()[static_cast<size_t>(t - 1)] : "<" + std::to_string(t) + ">");
    }
    return join_tokens(out, characters_);
  }

 private:
  struct Data {
    std::vector<TokenPair> pairs;
    std::vector<size_t> train;  // pairs to train on: not held out, target within the training lengths
    std::map<int64_t, std::vector<size_t>> train_by_length, held_out_by_length;
    int64_t source_width = 0;      // the longest source, in tokens
    size_t source_width_line = 0;  // its line in the file (1-based)
    size_t bytes = 0;
    std::string checksum;
  };

  int64_t eos() const { return static_cast<int64_t>(vocabulary().size()) + 1; }
  std::string tokens_word() const { return characters_ ? "characters" : "words"; }

  void index_vocabulary() {
    for (size_t i = 0; i < vocabulary_.size(); ++i) id_of_[vocabulary_[i]] = static_cast<int64_t>(i) + 1;
  }
  /// A token's id; ConfigError naming `where` and `why` if the vocabulary lacks it.
  int64_t token_id(const std::string& token, const std::string& where, const std::string& why) const {
    const auto it = id_of_.find(token);
    if (it == id_of_.end()) throw ConfigError(fmt::format("{}: \"{}\" is not in {}", where, token, why));
    return it->second;
  }

  /// The recorded vocabulary, or the one of the file.
  const std::vector<std::string>& vocabulary() const { return vocabulary_; }

  static std::string lengths_of(const std::map<int64_t, std::vector<size_t>>& by_length) {
    std::string out;
    for (const auto& [l, _] : by_length) out += (out.empty() ? "" : ", ") + std::to_string(l);
    return out.empty() ? "none" : out;
  }
  std::string held_out_lengths() const { return lengths_of(data().held_out_by_length); }

  /// The pairs; where the task was made without them, an error that says why.
  const Data& data() const {
    if (!data_) throw ConfigError(no_data_because_);
    return *data_;
  }

  /// The file, read, checked and split (and its vocabulary, where none is recorded).
  Data read_pairs() {
    const std::string text = read_task_file(path_, kMaxFileBytes);
    Data d;
    d.bytes = text.size();
    d.checksum = fnv1a_checksum(text);

    std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> lines;
    std::istringstream in(without_bom(text));  // the checksum above is of the file as it is
    size_t line_number = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_number;
      const auto at = [&](const std::string& what) {
        return ConfigError(fmt::format("task.path: {} line {}: {}", path_, line_number, what));
      };
      const size_t tab = line.find('\t');
      if (tab == std::string::npos)
        throw at("not a pair: a line is `source TAB target`, and this one has no tab" +
                 std::string(trimmed(line).empty() ? " (an empty line)" : ""));
      if (line.find('\t', tab + 1) != std::string::npos)
        throw at("not a pair: more than one tab (a line is `source TAB target`)");
      auto source = tokenize(trimmed(line.substr(0, tab)), characters_);
      auto target = tokenize(trimmed(line.substr(tab + 1)), characters_);
      if (source.empty() || target.empty())
        throw at(std::string("the ") + (source.empty() ? "source" : "target") + " is empty");
      lines.emplace_back(std::move(source), std::move(target));
    }
    if (lines.size() < 2)
      throw ConfigError(
          fmt::format("task.path: {} holds {} pair(s); translation needs some to train on and some to "
                      "hold out",
                      path_, lines.size()));

    if (vocabulary_.empty()) {
      std::set<std::string> seen;
      for (const auto& [s, t] : lines) {
        seen.insert(s.begin(), s.end());
        seen.insert(t.begin(), t.end());
      }
      vocabulary_.assign(seen.begin(), seen.end());
      index_vocabulary();
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      TokenPair p;
      const std::string where = fmt::format("task.path: {} line {}", path_, i + 1);
      const std::string why = "the run's vocabulary (the file has changed since the run recorded its vocabulary)";
      for (const auto& t : lines[i].first) p.source.push_back(token_id(t, where, why));
      for (const auto& t : lines[i].second) p.target.push_back(token_id(t, where, why));
      if (static_cast<int64_t>(p.source.size()) > d.source_width) {
        d.source_width = static_cast<int64_t>(p.source.size());
        d.source_width_line = i + 1;
      }
      d.pairs.push_back(std::move(p));
    }

    // A fixed random val_fraction of the distinct pairs (at least one) is
    // held out. Copies of a pair go to the same side, so that held-out scores
    // are never of pairs trained on; without copies this is a split of the lines.
    std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, size_t> distinct;
    std::vector<size_t> group_of(d.pairs.size());
    for (size_t i = 0; i < d.pairs.size(); ++i)
      group_of[i] =
          distinct.emplace(std::make_pair(d.pairs[i].source, d.pairs[i].target), distinct.size()).first->second;
    if (distinct.size() < 2)
      throw ConfigError(
          fmt::format("task.path: {} holds {} pairs but only one distinct pair; translation needs "
                      "some to train on and some to hold out",
                      path_, d.pairs.size()));
    std::vector<size_t> order(distinct.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(split_seed_), 0x74736c6eu}));
    std::shuffle(order.begin(), order.end(), rng);
    const auto n_held = std::clamp<size_t>(
        static_cast<size_t>(std::llround(val_fraction_ * static_cast<double>(order.size()))), 1, order.size() - 1);
    std::vector<bool> held_group(distinct.size(), false);
    for (size_t k = 0; k < n_held; ++k) held_group[order[k]] = true;
    std::vector<bool> held(d.pairs.size(), false);
    for (size_t i = 0; i < d.pairs.size(); ++i) held[i] = held_group[group_of[i]];
    for (size_t i = 0; i < d.pairs.size(); ++i) {
      const auto length = static_cast<int64_t>(d.pairs[i].target.size());
      if (held[i]) {
        d.held_out_by_length[length].push_back(i);
      } else {
        d.train_by_length[length].push_back(i);
        if (length >= cfg_.min_length && length <= cfg_.max_length) d.train.push_back(i);
      }
    }
    return d;
  }

  TaskConfig cfg_;
  std::string path_;
  bool characters_;
  double val_fraction_;
  int64_t split_seed_;
  std::vector<std::string> vocabulary_;
  std::map<std::string, int64_t> id_of_;
  std::optional<Data> data_;     // none: made from a recorded vocabulary without a usable file
  std::string no_data_because_;  // why data_ is empty
};

/// The recorded vocabulary's size with its end token (0 where none is recorded,
/// or where it is not posenc's form, which building the task then names).
int64_t recorded_vocab_size(const TaskConfig& cfg) {
  const std::string recorded = cfg.options.get_string("vocabulary");
  if (recorded == kNotRecorded || recorded.empty() || recorded.back() != '\n') return 0;
  return static_cast<int64_t>(std::count(recorded.begin(), recorded.end(), '\n')) + 1;
}

}  // namespace

TaskInfo translation_task_info() {
  TaskInfo t;
  t.name = "translation";
  t.description = std::string(
                      "translation of a parallel text file: `source TAB target` a line (task.path, default the "
                      "example ") +
                  kExampleFile +
                  ", the numbers 0-999 in English and French); exact match, token accuracy and corpus BLEU on "
                  "held-out pairs (encoder_decoder; length = target tokens)";
  t.model_kinds = {ModelKind::EncoderDecoder};
  t.metric = TaskMetric::ExactMatch;
  t.bleu = true;
  t.padded = true;
  t.options = {
      // A checkpoint may be read from a moved copy of its file (check_data_identity).
      set_on_trained({"path", OptionKind::Path, kExampleFile, "the UTF-8 file of `source TAB target` lines"}),
      {"tokens",
       OptionKind::String,
       "char",
       "char (UTF-8 code points) or word (split at blanks)",
       -1e300,
       1e300,
       {"char", "word"}},
      {"val_fraction", OptionKind::Float, 0.2, "the fraction of pairs held out (drawn at random, task.split_seed)",
       0.001, 0.9},
      {"split_seed", OptionKind::Int, 1, "the seed of the random held-out pairs", 0, 1e15},
      {"vocabulary", OptionKind::String, kNotRecorded,
       "the file's tokens, recorded when training starts (a checkpoint translates without the file)"},
      {"bytes", OptionKind::Int, 0, "the file's size, recorded when training starts (0: not recorded)", 0,
       double(int64_t{1} << 40)},
      {"checksum", OptionKind::String, kNotRecorded,
       "the file's FNV-1a checksum, recorded when training starts: a resume refuses a changed file, eval warns"}};
  t.length_unit = "target tokens";
  t.default_min_length = 2;  // posenc's lengths start at 2: one-token targets are not trained on
  t.default_max_length = 20;
  t.default_eval_lengths = {10, 14, 18, 20, 22, 24, 26, 28};  // the example's held-out lengths
  t.make = [](const TaskConfig& cfg) { return std::make_unique<TranslationTask>(cfg); };
  t.recorded_vocab_size = recorded_vocab_size;
  return t;
}

}  // namespace posenc

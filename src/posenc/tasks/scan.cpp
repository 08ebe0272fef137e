// SCAN (Lake & Baroni 2018): commands such as "jump opposite left after walk
// twice" translated into action sequences, generated from the published grammar
//
//   C -> S and S | S after S | S
//   S -> V twice | V thrice | V
//   V -> D opposite dir | D around dir | D | U      (D here: U or "turn")
//   D -> U left | U right | turn left | turn right
//   U -> walk | look | run | jump
//
// and its interpretation: walk -> WALK (look, run, jump alike), "turn left" ->
// LTURN, "x left" -> LTURN x, "x opposite left" -> LTURN LTURN x, "x around
// left" -> (LTURN x) x 4, "a twice" -> a a, "a and b" -> a b, "a after b" -> b a.
// That is 20,910 distinct commands with 1 to 48 actions.
//
// Splits (task.split): `length` trains on the commands of at most task.cutoff
// actions and tests on the rest (Lake & Baroni's length split at cutoff 22:
// 16,990 / 3,920); `simple` is a random 80/20 split fixed by task.split_seed.
//
// Rows are `command SEP actions EOS` (tasks/task.h's layout for an
// encoder_decoder): the command padded with 0 to 9 words, the answer to the
// batch's longest plus EOS. The task length is the number of actions: an
// evaluation set of length n holds the test commands of n actions (the train
// split's, where the test split has none at n: lengths the run trained on).
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "posenc/tasks/pairs.h"
#include "posenc/tasks/scan.h"
#include "posenc/tasks/task.h"
#include "posenc/tasks/builtin_tasks.h"

namespace posenc {

namespace {

// Token ids: the 13 command words, the 6 actions, then EOS (1-based; 0 = padding).
const std::vector<std::string>& words() {
  static const std::vector<std::string> w = {"walk",     "look",   "run",   "jump",   "turn",  "left",  "right",
                                             "opposite", "around", "twice", "thrice", "and",   "after", "WALK",
                                             "LOOK",     "RUN",    "JUMP",  "LTURN",  "RTURN", "<eos>"};
  return w;
}
int64_t token_of(const std::string& word) {
  const auto& w = words();
  const auto it = std::find(w.begin(), w.end(), word);
  return it == w.end() ? 0 : static_cast<int64_t>(it - w.begin()) + 1;
}
constexpr int64_t kEos = 20;
constexpr int64_t kMaxCommandWords = 9;
constexpr int64_t kMaxActions = 48;

using Words = std::vector<std::string>;

Words concat(const Words& a, const Words& b) {
  Words out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::string upper_action(const std::string& verb) {
  if (verb == "walk") return "WALK";
  if (verb == "look") return "LOOK";
  if (verb == "run") return "RUN";
  return "JUMP";
}

/// The V productions with their actions.
std::vector<ScanExample> verb_phrases() {
  std::vector<ScanExample> v;
  const Words verbs = {"walk", "look", "run", "jump"};
  for (const auto& u : verbs) v.push_back({{u}, {upper_action(u)}});
  for (const std::string dir : {"left", "right"}) {
    const std::string turn = dir == "left" ? "LTURN" : "RTURN";
    for (const auto& u : verbs) v.push_back({{u, dir}, {turn, upper_action(u)}});
    v.push_back({{"turn", dir}, {turn}});
    for (const auto& u : Words{"walk", "look", "run", "jump", "turn"}) {
      const Words x = u == "turn" ? Words{} : Words{upper_action(u)};
      v.push_back({{u, "opposite", dir}, concat({turn, turn}, x)});
      Words around;
      for (int i = 0; i < 4; ++i) around = concat(around, concat({turn}, x));
      v.push_back({{u, "around", dir}, around});
    }
  }
  return v;
}

}  // namespace

std::vector<ScanExample> scan_commands() {
  std::vector<ScanExample> s;
  for (const auto& v : verb_phrases()) {
    s.push_back(v);
    s.push_back({concat(v.command, {"twice"}), concat(v.actions, v.actions)});
    s.push_back({concat(v.command, {"thrice"}), concat(concat(v.actions, v.actions), v.actions)});
  }
  std::vector<ScanExample> c = s;
  for (const auto& a : s)
    for (const auto& b : s) {
      c.push_back({concat(concat(a.command, {"and"}), b.command), concat(a.actions, b.actions)});
      c.push_back({concat(concat(a.command, {"after"}), b.command), concat(b.actions, a.actions)});
    }
  return c;
}

std::string join_words(const std::vector<std::string>& w) {
  std::string out;
  for (const auto& x : w) out += (out.empty() ? "" : " ") + x;
  return out;
}

namespace {

class ScanTask : public Task {
 public:
  explicit ScanTask(const TaskConfig& cfg)
      : split_(cfg.options.get_string("split")), cutoff_(cfg.options.get_int("cutoff")), all_(scan_commands()) {
    for (const auto& e : all_) {
      TokenPair p;
      for (const auto& w : e.command) p.source.push_back(token_of(w));
      for (const auto& a : e.actions) p.target.push_back(token_of(a));
      pairs_.push_back(std::move(p));
    }
    if (split_ == "length") {
      for (size_t i = 0; i < all_.size(); ++i)
        (static_cast<int64_t>(all_[i].actions.size()) <= cutoff_ ? train_ : test_).push_back(i);
      if (test_.empty())
        throw ConfigError("task.cutoff=" + std::to_string(cutoff_) +
                          " leaves no command for the test set: SCAN's longest action sequence has " +
                          std::to_string(kMaxActions) + " actions; choose a cutoff below it");
      if (train_.empty())
        throw ConfigError("task.cutoff=" + std::to_string(cutoff_) + " leaves no command to train on");
    } else {
      std::vector<size_t> order(all_.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(cfg.options.get_int("split_seed")), 0x7363616eu}));
      std::shuffle(order.begin(), order.end(), rng);
      const size_t n_train = all_.size() * 4 / 5;
      train_.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_train));
      test_.assign(order.begin() + static_cast<std::ptrdiff_t>(n_train), order.end());
      std::sort(train_.begin(), train_.end());
      std::sort(test_.begin(), test_.end());
    }
    for (size_t i : test_) test_by_length_[length_of(i)].push_back(i);
    for (size_t i : train_) train_by_length_[length_of(i)].push_back(i);
  }

  const TaskInfo& info() const override { return find_task("scan"); }
  int64_t vocab_size() const override { return kEos; }
  int64_t end_token() const override { return kEos; }
  int64_t sequence_length(int64_t length) const override { return kMaxCommandWords + 1 + length + 1; }
  int64_t longest_training_length(int64_t /*configured*/) const override {
    return split_ == "length" ? cutoff_ : kMaxActions;
  }

  TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x7363616eu}));
    std::uniform_int_distribution<size_t> pick(0, train_.size() - 1);
    std::vector<size_t> chosen;
    for (int64_t i = 0; i < batch_size; ++i) chosen.push_back(train_[pick(rng)]);
    return rows(chosen);
  }

  /// Up to n commands of `length` actions: the test split's, else the training
  /// split's; none (an empty set, which validation skips) where no command has that many.
  TaskBatch fixed_set(int64_t length, int64_t n, int64_t seed) const override {
    std::vector<size_t> pool;
    if (auto it = test_by_length_.find(length); it != test_by_length_.end())
      pool = it->second;
    else if (auto train = train_by_length_.find(length); train != train_by_length_.end())
      pool = train->second;
    return pair_rows(pairs_, fixed_sample(std::move(pool), n, seed, length), kMaxCommandWords, kEos, length);
  }

  void check_eval_length(int64_t length) const override {
    if (test_by_length_.count(length) || train_by_length_.count(length)) return;
    std::string have;
    std::map<int64_t, bool> lengths;
    for (const auto& [l, _] : test_by_length_) lengths[l] = true;
    for (const auto& [l, _] : train_by_length_) lengths[l] = true;
    for (const auto& [l, _] : lengths) have += (have.empty() ? "" : ", ") + std::to_string(l);
    throw ConfigError("SCAN has no command of " + std::to_string(length) + " actions (the lengths there are: " + have +
                      ")");
  }

  std::vector<int64_t> encode_text(const std::string& text) const override {
    std::istringstream in(text);
    std::vector<int64_t> out;
    for (std::string w; in >> w;) {
      const int64_t t = token_of(w);
      if (t == 0 || t > 13)
        throw ConfigError("\"" + w + "\" is not a SCAN command word (they are: " +
                          join_words({words().begin(), words().begin() + 13}) + ")");
      out.push_back(t);
    }
    if (out.empty()) throw ConfigError("an empty command: SCAN commands are words such as \"jump twice\"");
    return out;
  }
  std::string decode_text(const std::vector<int64_t>& tokens) const override {
    std::vector<std::string> out;
    for (int64_t t : tokens) {
      if (t == kEos) break;
      out.push_back(t >= 1 && t <= kEos ? words()[static_cast<size_t>(t - 1)] : "<" + std::to_string(t) + ">");
    }
    return join_words(out);
  }

  /// Examples in each split (the length split at cutoff 22: 16,990 / 3,920).
  size_t train_size() const { return train_.size(); }
  size_t test_size() const { return test_.size(); }

 private:
  int64_t length_of(size_t i) const { return static_cast<int64_t>(all_[i].actions.size()); }

  /// `command SEP actions EOS`, commands padded to 9 words, answers to the longest.
  TaskBatch rows(const std::vector<size_t>& chosen) const { return pair_rows(pairs_, chosen, kMaxCommandWords, kEos); }

  std::string split_;
  int64_t cutoff_;
  std::vector<ScanExample> all_;
  std::vector<TokenPair> pairs_;  // all_ as tokens
  std::vector<size_t> train_, test_;
  std::map<int64_t, std::vector<size_t>> train_by_length_, test_by_length_;
};

}  // namespace

TaskInfo scan_task_info() {
  TaskInfo t;
  t.name = "scan";
  t.description =
      "SCAN (Lake & Baroni 2018): commands -> action sequences from its published grammar, 20,910 commands; "
      "split `length` (train on at most task.cutoff actions, test on longer) or `simple` (random 80/20) "
      "(encoder_decoder; length = actions)";
  t.model_kinds = {ModelKind::EncoderDecoder};
  t.metric = TaskMetric::ExactMatch;
  t.padded = true;
  t.options = {
      {"split",
       OptionKind::String,
       "length",
       "length (train on short action sequences, test on long) or simple",
       -1e300,
       1e300,
       {"length", "simple"}},
      {"cutoff", OptionKind::Int, 22,
       "the length split's longest training action sequence (Csordas et al. sweep 22-40)", 1, 1000},
      {"split_seed", OptionKind::Int, 1, "the seed of the simple split's random 80/20 division", 0, 1e15},
  };
  t.fixed_vocab_size = kEos;
  t.length_unit = "actions";
  t.default_min_length = 2;
  t.default_max_length = 22;
  t.default_eval_lengths = {24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48};
  t.make = [](const TaskConfig& cfg) { return std::make_unique<ScanTask>(cfg); };
  return t;
}

}  // namespace posenc

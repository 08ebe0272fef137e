// Character-level language modelling on a UTF-8 text file (the text generator of
// as in SuperML's positional-encoding guide, docs/sources.md; the ALiBi paper's perplexity-versus-context experiment in miniature).
//
// Tokens are the file's bytes + 1 (1..256), so any UTF-8 file works without a
// stored vocabulary; for ASCII text a byte is a character. The first
// 1 - val_fraction of the file trains, the rest is held out. A training batch
// is random windows of length + 1 bytes from the training part; an evaluation
// set of length L is the held-out text cut into consecutive windows of L + 1
// bytes that share one byte at each seam, so every held-out byte after the first is
// predicted once, with the context from its window's start (the non-overlapping
// evaluation of Press et al. 2022).
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "posenc/tasks/task.h"
#include "posenc/tasks/builtin_tasks.h"
#include "posenc/util/io.h"

namespace posenc {
namespace {

/// The default corpus: Debian's `fortunes` package (BSD fortune's quotations,
/// about 245 KB of English text), installed by scripts/setup.sh.
constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes/cookie";

/// The whole text is held in memory, as bytes and as tokens of a batch.
constexpr std::uintmax_t kMaxCorpusBytes = std::uintmax_t{1} << 30;

std::string read_corpus(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw ConfigError("task.path: " + path + " does not exist" +
                      (path == kDefaultCorpus
                           ? " (it comes with Debian's `fortunes` package, which scripts/setup.sh installs)"
                           : ""));
  return read_task_file(path, kMaxCorpusBytes);
}

/// The value of task.checksum before training records one.
constexpr const char* kUnrecorded = "unrecorded";

class CharLmTask : public Task {
 public:
  explicit CharLmTask(const TaskConfig& cfg)
      : cfg_(cfg), path_(cfg.options.get_string("path")), val_fraction_(cfg.options.get_float("val_fraction")) {}
  // The text is read when first needed: generating from a checkpoint needs only the byte vocabulary.
  const TaskInfo& info() const override { return find_task("charlm"); }
  int64_t vocab_size() const override { return 256; }
  int64_t sequence_length(int64_t length) const override { return length + 1; }

  nlohmann::json data_identity() const override {
    return {{"bytes", static_cast<int64_t>(text().size())}, {"checksum", fnv1a_checksum(text())}};
  }

  TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override {
    text();
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x6c6du}));
    const int64_t length = std::uniform_int_distribution<int64_t>(cfg_.min_length, cfg_.max_length)(rng);
    std::uniform_int_distribution<int64_t> start(0, split_ - (length + 1));
    std::vector<int64_t> starts(batch_size);
    for (auto& s : starts) s = start(rng);
    return windows(starts, length);
  }

  TaskBatch fixed_set(int64_t length, int64_t n, int64_t /*seed*/) const override {
    check_eval_length(length);
    const int64_t available = (static_cast<int64_t>(text().size()) - split_ - 1) / length;
    std::vector<int64_t> starts;
    for (int64_t k = 0; k < std::min(n, available); ++k) starts.push_back(split_ + k * length);
    return windows(starts, length);
  }

  void check_eval_length(int64_t length) const override {
    const int64_t held_out = static_cast<int64_t>(text().size()) - split_;
    if (held_out < length + 1)
      throw ConfigError(
          fmt::format("length {}: the held-out part of {} ({} bytes, task.val_fraction={}) is shorter "
                      "than one evaluation window of {} bytes",
                      length, path_, held_out, val_fraction_, length + 1));
  }

  std::vector<int64_t> encode_text(const std::string& text) const override {
    std::vector<int64_t> tokens;
    for (unsigned char c : text) tokens.push_back(static_cast<int64_t>(c) + 1);
    return tokens;
  }
  std::string decode_text(const std::vector<int64_t>& tokens) const override {
    std::string text;
    for (int64_t t : tokens)
      if (t >= 1 && t <= 256) text.push_back(static_cast<char>(t - 1));
    return text;
  }

 private:
  /// The whole text, read and checked on first use.
  const std::string& text() const {
    if (loaded_) return text_;
    text_ = read_corpus(path_);
    split_ = static_cast<int64_t>(static_cast<double>(text_.size()) * (1.0 - val_fraction_));
    if (split_ < cfg_.max_length + 1)
      throw ConfigError(
          fmt::format("task.path: the training part of {} ({} of {} bytes) is shorter than one "
                      "training window of task.max_length + 1 = {} bytes",
                      path_, split_, text_.size(), cfg_.max_length + 1));
    loaded_ = true;
    return text_;
  }

  TaskBatch windows(const std::vector<int64_t>& starts, int64_t length) const {
    const auto B = static_cast<int64_t>(starts.size());
    TaskBatch b;
    b.tokens = torch::empty({B, length + 1}, torch::kLong);  // (B, L + 1)
    auto a = b.tokens.accessor<int64_t, 2>();
    for (int64_t r = 0; r < B; ++r)
      for (int64_t c = 0; c <= length; ++c) a[r][c] = static_cast<unsigned char>(text_[starts[r] + c]) + 1;
    b.answer_start = 1;
    return b;
  }

  TaskConfig cfg_;
  std::string path_;
  double val_fraction_;
  mutable bool loaded_ = false;
  mutable std::string text_;
  mutable int64_t split_ = 0;  // bytes [0, split_) train, [split_, end) are held out
};

}  // namespace

TaskInfo charlm_task_info() {
  TaskInfo t;
  t.name = "charlm";
  t.description = std::string("character-level language modelling of a UTF-8 file (task.path, default ") +
                  kDefaultCorpus + "); perplexity per held-out character (decoder; length = context)";
  t.model_kinds = {ModelKind::Decoder};
  t.metric = TaskMetric::Perplexity;
  t.options = {
      // A checkpoint may be read from a moved copy of its text (check_data_identity).
      set_on_trained({"path", OptionKind::Path, kDefaultCorpus, "the UTF-8 text file"}),
      {"val_fraction", OptionKind::Float, 0.1, "the fraction at the text's end held out for evaluation", 0.001, 0.9},
      {"bytes", OptionKind::Int, 0, "the text's size, recorded when training starts (0: not recorded)", 0,
       double(int64_t{1} << 40)},
      {"checksum", OptionKind::String, kUnrecorded,
       "the text's FNV-1a checksum, recorded when training starts: a resume refuses a changed text, eval warns"}};
  t.fixed_vocab_size = 256;
  t.length_unit = "characters of context";
  t.default_min_length = 128;
  t.default_max_length = 128;
  t.default_eval_lengths = {128, 256, 512, 1024};
  t.make = [](const TaskConfig& cfg) { return std::make_unique<CharLmTask>(cfg); };
  return t;
}

}  // namespace posenc

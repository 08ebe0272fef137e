// addition and multiplication for the causal decoder (rows `x SEP y`, shared
// with copy, reverse and sort in tasks/sequence_base.h):
//
//   addition x = a + b, two numbers of n digits written least-significant digit
//            first; y = their sum, n + 1 digits, also least-significant first
//            (the order in which a carry is computed; Lee et al. 2023).
//            task.positions gives every token a position id of its own:
//            abacus (McLeish et al. 2024) or coupled (Cho et al. 2024), below.
//   multiplication
//            x = a * b, the same way; y = their product, 2n digits,
//            least-significant first; abacus and coupled ids as for addition.
//
// The task length is n, the digits per operand (a's digits where
// task.multiplier_digits fixes b's).
#include <algorithm>
#include <cmath>
#include <random>

#include "posenc/tasks/builtin_tasks.h"
#include "posenc/tasks/sequence_base.h"
#include "posenc/util/text.h"

namespace posenc {
namespace {

/// Digits 0..9 are tokens 1..10, the operator ('+' or '*') is 11, the index
/// hints (below) 12..11 + H; SEP is the next token.
///
/// An example `a + b SEP s`: a of na digits and b of nb digits, least-significant
/// digit first, and their sum s of m + 1 digits, m = max(na, nb), also
/// least-significant first. For multiplication, `a * b SEP p`: their product p
/// of wa + wb digits (the digits written, below), least-significant first;
/// task.multiplier_digits = k > 0 gives b k digits wherever the task draws it
/// (Cho et al. 2024's N x 2 multiplication is k = 2), and the task length is
/// then a's digits. task.operands: `equal` draws one length n per batch
/// for both (na = nb = n); `independent` draws na and nb per batch, each from
/// [min_length, max_length], as McLeish et al. and Cho et al. train; with
/// task.pad_operands the shorter operand is written with leading zeros to m
/// digits. The task length (eval.lengths) is the digits of both operands; the
/// operand grid (eval.operand_grid) scores every (na, nb) pair.
///
/// task.positions:
///  - sequence: 0..T-1, counted by the model (no ids of the task's own);
///  - abacus (McLeish et al. 2024): a digit's id is 1 + its index inside its own
///    number (the units digit is 1), other tokens 0; in training one random k
///    in [0, position_offset] per batch is added to every nonzero id;
///  - coupled (Cho et al. 2024): digits of equal significance share an id: the
///    units of a and b get start+1, the tens start+2, ...; the operator gets 0.
///    In the answer the token that predicts the answer's digit of significance
///    j carries j's id (SEP carries the units', the answer's units digit the
///    tens', ...), as a decoder reads it; start is drawn per example from
///    [0, position_offset] in training and is 0 in evaluation. For a product,
///    the query that writes digit j then sits at a's digit j: the digits it
///    needs (a_j, a_{j-1}, ... times b's) are at the id distances 0, 1, ...
///
/// task.index_hints = H > 0 (Zhou et al. 2023, 2024; addition only): every digit of a, b and
/// the sum is preceded by a hint token naming its significance, the same hint
/// for the same significance in all three (`a6 b7 + a1 b6 SEP a7 b3 c1`), so
/// the answer is hint, digit, hint, digit, ... The hints are H ordered
/// symbols; in training an example's hints start at a random place in them
/// (consecutive from start s, drawn from [0, H - m - 1]), in evaluation at the
/// first, so every hint an evaluation reads was trained.
///
/// task.multiplier_placement (multiplication with task.multiplier_digits = k):
/// `once` writes `a * b SEP p`; `beside_each_digit` writes b's k digits after
/// every digit of a, `a0 b a1 b ... * SEP p`, each copy with the id of the
/// digit of a before it (coupled) or its own index in b (abacus). Under coupled
/// ids the multiplier is then as near the query that writes digit j as a_j is
/// (id distance 0), where written once it is j ids away.
///
/// task.multiplier_tokens (multiplication with task.multiplier_digits = k):
/// `shared` writes b's digits with the operands' ten tokens; `per_digit` gives
/// each of b's k digits ten tokens of its own (b's units, tens, ...). Beside
/// each digit of a under coupled ids, b's k digits share one id, so that only
/// their tokens (or the causal order) say which of b's digits each is.
///
/// task.carries (multiplication with task.multiplier_digits = k): `hidden`
/// writes the product's digits only; `written` follows each digit p_j by the
/// carry out of its column, `SEP p0 c0 p1 c1 ...`, where column j sums
/// a_{j-l} * b_l over b's digits l and the carry c_{j-1}: p_j is that sum mod
/// 10 and c_j the rest, below 9k, from 9k tokens of their own. Both tokens of
/// column j are predicted by queries with j's coupled id. For N x 1 the carry
/// into a column is fixed by the product digit before it and the digits it
/// multiplies; for N x 2 (carries up to 17) it is not, and written it need not
/// be recomputed. Exact match then needs every carry right too.
///
/// task.answer_tokens: with `shared` an operand's digit and the answer's are one
/// token (d + 1); with `own` the answer's digits are ten tokens of their own.
/// Under coupled ids the keys one id below the query that writes the answer's
/// digit j are the operands' digits j - 1 (the carry's) and the answer's digit
/// j - 2: with shared tokens only the far-off operator and SEP tell them apart.
///
/// task.high_digit_share = s: a share s of training examples draw every digit
/// from [f, 9] with f uniform in 0..9 per example. Uniform digits rarely make a
/// long carry chain or a column of large products (N x 3 columns of 230 or more
/// are 4e-5 of uniform training's); these examples do. Evaluation sets stay uniform.
class ArithmeticTask : public SequenceBase {
 public:
  enum class Op { Add, Multiply };
  static constexpr int64_t kOperator = 11;
  ArithmeticTask(const TaskConfig& cfg, std::string name, Op op)
      : SequenceBase(cfg, std::move(name)),
        op_(op),
        positions_(cfg.options.get_string("positions")),
        offset_(cfg.options.get_int("position_offset")),
        independent_(cfg.options.get_string("operands") == "independent"),
        pad_(cfg.options.get_bool("pad_operands")),
        hints_(op == Op::Add ? cfg.options.get_int("index_hints") : 0),  // multiplication declares no hints
        multiplier_(op == Op::Multiply ? cfg.options.get_int("multiplier_digits") : 0),
        beside_(op == Op::Multiply && cfg.options.get_string("multiplier_placement") == "beside_each_digit"),
        per_digit_multiplier_(op == Op::Multiply && cfg.options.get_string("multiplier_tokens") == "per_digit"),
        carries_(op == Op::Multiply && cfg.options.get_string("carries") == "written"),
        own_answer_tokens_(cfg.options.get_string("answer_tokens") == "own"),
        high_digit_share_(cfg.options.get_float("high_digit_share")) {
    if (multiplier_ > 0 && independent_)
      throw ConfigError("task.operands=independent draws b's digits, which task.multiplier_digits=" +
                        std::to_string(multiplier_) + " fixes: set one of them");
    if (beside_ && multiplier_ == 0)
      throw ConfigError(
          "task.multiplier_placement=beside_each_digit writes b after every digit of a, so b's digits must be "
          "fixed and few: set task.multiplier_digits (1 for N x 1)");
    if (per_digit_multiplier_ && multiplier_ == 0)
      throw ConfigError(
          "task.multiplier_tokens=per_digit gives each of b's digits ten tokens of its own, so b's digits must be "
          "fixed: set task.multiplier_digits (2 for N x 2)");
    if (carries_ && multiplier_ == 0)
      throw ConfigError(
          "task.carries=written writes each column's carry with a token of its own, below 9 times b's digits, so "
          "b's digits must be fixed: set task.multiplier_digits (2 for N x 2)");
    if (!option_bounding_b().empty() && pad_)
      throw ConfigError(option_bounding_b() +
                        " has tokens for b's task.multiplier_digits=" + std::to_string(multiplier_) +
                        " digits, which task.pad_operands would pad to a's length: set one of them");
    if (hints_ > 0 && positions_ != "sequence")
      throw ConfigError("task.index_hints and task.positions=" + positions_ +
                        " both mark a digit's significance: set one of them (task.positions=sequence with hints)");
    if (hints_ > 0 && hints_ < cfg.max_length + 1)
      throw ConfigError("task.index_hints=" + std::to_string(hints_) + " hints cannot mark the " +
                        std::to_string(cfg.max_length + 1) +
                        " digits of a sum of task.max_length=" + std::to_string(cfg.max_length) + " digits");
  }
  /// One past the largest id of an example of `length` (a's digits; b's too
  /// unless multiplier_digits fixes them), or of two operands of `length` digits
  /// (an operand grid's cell), offsets included; 0 for sequence.
  static int64_t positions_end(Op op, const TaskConfig& cfg, int64_t length) {
    const std::string mode = cfg.options.get_string("positions");
    if (mode == "sequence") return 0;
    // The most digits the answer has: a sum's m + 1; a product's, both
    // operands' (b has at most max(length, k) digits; padding writes a with as many).
    int64_t answer_digits = length + 1;
    if (op == Op::Multiply) {
      const int64_t b = std::max(length, cfg.options.get_int("multiplier_digits"));
      answer_digits = cfg.options.get_bool("pad_operands") ? 2 * b : length + b;
    }
    // The answer's last digit: id answer_digits + k (abacus) or start + answer_digits + 1 (coupled).
    return answer_digits + (mode == "abacus" ? 1 : 2) + cfg.options.get_int("position_offset");
  }
  /// Digits 1..10, the operator, the hints, then the answer's own ten digits
  /// where task.answer_tokens=own, b's ten per digit where
  /// task.multiplier_tokens=per_digit, the 9k carries where task.carries=written.
  int64_t vocab_size() const override { return carry_base() + (carries_ ? 9 * multiplier_ : 0); }
  int64_t sequence_length(int64_t length) const override { return operand_sequence_length(length, b_digits(length)); }
  int64_t operand_sequence_length(int64_t a_digits, int64_t b_digits) const override {
    const int64_t wa = pad_ ? std::max(a_digits, b_digits) : a_digits,
                  wb = pad_ ? std::max(a_digits, b_digits) : b_digits;
    check_multiplier_fits(wb);
    if (op_ == Op::Multiply)  // a, '*', b (or b after each digit of a, '*'), SEP, wa + wb product digits (and carries)
      return (beside_ ? wa * (1 + wb) : wa + wb) + (carries_ ? 2 : 1) * (wa + wb) + 2;
    const int64_t digits = wa + wb + std::max(wa, wb) + 1;
    return (hints_ > 0 ? 2 * digits : digits) + 2;  // '+' and SEP; hints double the digits
  }
  void check_eval_length(int64_t length) const override {
    if (hints_ > 0 && length + 1 > hints_)
      throw ConfigError("task.index_hints=" + std::to_string(hints_) + " hints cannot mark the " +
                        std::to_string(length + 1) + " digits of the sum of two " + std::to_string(length) +
                        "-digit operands (eval.lengths, eval.operand_grid): raise task.index_hints");
  }

  /// Tokens as words, least-significant digit first as the model reads them:
  /// the operands' digits "0".."9", the operator "+" or "*", hint i "h<i>",
  /// the answer's own digit d "r<d>" (task.answer_tokens=own), digit d of b's
  /// digit l "b<l>:<d>" (task.multiplier_tokens=per_digit), carry c "c<c>"
  /// (task.carries=written) and SEP "="; any other id "<id>".
  std::string decode_text(const std::vector<int64_t>& tokens) const override {
    std::vector<std::string> words;
    for (int64_t t : tokens) words.push_back(token_word(t));
    return join(words, " ");
  }
  /// The words of decode_text, separated by spaces, as tokens (SEP excepted).
  std::vector<int64_t> encode_text(const std::string& text) const override {
    std::vector<int64_t> out;
    for (const std::string& word : split_words(text)) {
      int64_t token = 0;
      for (int64_t t = 1; t <= vocab_size() && token == 0; ++t)
        if (token_word(t) == word) token = t;
      if (token == 0)
        throw ConfigError("\"" + word + "\": task.type=" + info().name + " reads " + words_read() +
                          ", separated by spaces");
      out.push_back(token);
    }
    if (out.empty()) throw ConfigError("no tokens: task.type=" + info().name + " reads " + words_read());
    return out;
  }

  TaskBatch train_batch(int64_t step, int64_t batch_size, int64_t seed) const override {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x736571u}));
    std::uniform_int_distribution<int64_t> digits(cfg_.min_length, cfg_.max_length);
    const int64_t na = digits(rng), nb = independent_ ? digits(rng) : b_digits(na);
    // The position offsets draw from a stream of their own: the tokens are the
    // same whatever task.positions says.
    std::mt19937_64 offsets(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(step), 0x706f73u}));
    return operand_batch(na, nb, batch_size, rng, &offsets, high_digit_share_);
  }
  TaskBatch fixed_set(int64_t length, int64_t n, int64_t seed) const override {
    return fixed_set_drawing(length, n, seed, nullptr);
  }

 protected:
  /// column: each digit's significance (a's digit i is i, b's digit l is l, the
  /// answer's digit j is j), at the digit tokens. At the token that predicts
  /// the answer's digit j: carry, the carry into column j (0 for the units);
  /// column_sum, all that column j adds (its digits or products and that
  /// carry), whose units are digit j and whose tens the carry out; sum_parity,
  /// column_sum mod 2. With task.carries=written, carry_out: column j's carry
  /// out (column_sum's tens), at the answer's digit j, which predicts it.
  torch::Tensor declared_probe_target(const std::string& name, int64_t length, int64_t n, int64_t seed) const override {
    // probe_target_spec refuses carry_out before this where the carries are not written.
    if (name == "carry_out" && !carries_) throw std::logic_error("probe target carry_out without written carries");
    std::vector<Operands> drawn;
    const TaskBatch set = fixed_set_drawing(length, n, seed, &drawn);
    const std::vector<TokenRole> roles = token_roles(drawn.at(0).a.size(), drawn.at(0).b.size());
    const int64_t width = set.tokens.size(1);
    TORCH_CHECK(static_cast<int64_t>(roles.size()) == width, "token_roles: ", roles.size(), " roles for ", width,
                " tokens");
    auto values = torch::full({set.tokens.size(0), width}, std::nan(""), torch::kFloat64);  // (n, T)
    auto v = values.accessor<double, 2>();
    for (size_t r = 0; r < drawn.size(); ++r) {
      const std::vector<Column> answer = columns(drawn[r]);
      for (int64_t t = 0; t < width; ++t) {
        if (name == "column") {
          if (roles[t].kind != TokenRole::Other) v[r][t] = static_cast<double>(roles[t].column);
          continue;
        }
        if (name == "carry_out") {  // digit j, followed by its written carry
          if (roles[t].kind == TokenRole::AnswerDigit)
            v[r][t] = answer.at(static_cast<size_t>(roles[t].column)).carry();
          continue;
        }
        if (t + 1 == width || roles[t + 1].kind != TokenRole::AnswerDigit) continue;
        const size_t j = static_cast<size_t>(roles[t + 1].column);  // t predicts the answer's digit j
        const Column& c = answer.at(j);
        if (name == "carry") v[r][t] = j == 0 ? 0 : answer.at(j - 1).carry();
        if (name == "column_sum") v[r][t] = static_cast<double>(c.sum);
        if (name == "sum_parity") v[r][t] = static_cast<double>(c.sum % 2);
      }
    }
    return values;
  }

 public:
  TaskBatch fixed_operand_set(int64_t a_digits, int64_t b_digits, int64_t n, int64_t seed) const override {
    if (a_digits == b_digits && multiplier_ == 0) return fixed_set(a_digits, n, seed);  // the per-length set's examples
    std::mt19937_64 rng(mix_seed(
        {static_cast<uint64_t>(seed), static_cast<uint64_t>(a_digits), static_cast<uint64_t>(b_digits), 0x6f7073u}));
    return operand_batch(a_digits, b_digits, n, rng, nullptr, 0.0);
  }

 private:
  /// The digits of one example's operands, units first, as written (wa and wb digits).
  struct Operands {
    std::vector<int> a, b;
  };

  /// fixed_set(length, n, seed), and each example's operands in `drawn` where given.
  TaskBatch fixed_set_drawing(int64_t length, int64_t n, int64_t seed, std::vector<Operands>* drawn) const {
    std::mt19937_64 rng(mix_seed({static_cast<uint64_t>(seed), static_cast<uint64_t>(length), 0x657673u}));
    return operand_batch(length, b_digits(length), n, rng, nullptr, 0.0, drawn);
  }

  /// What one token of an example is, for the probe targets.
  struct TokenRole {
    enum Kind { OperandDigit, AnswerDigit, Other } kind = Other;  // Other: operator, SEP, hint, written carry
    int64_t column = 0;                                           // a digit's significance
  };
  /// The role of every token of `wa digits op wb digits SEP answer`, laid out as example() and add_hints lay them.
  std::vector<TokenRole> token_roles(size_t wa_digits, size_t wb_digits) const {
    const auto wa = static_cast<int64_t>(wa_digits), wb = static_cast<int64_t>(wb_digits);
    const int64_t answer_digits = op_ == Op::Add ? std::max(wa, wb) + 1 : wa + wb;
    const TokenRole other;
    auto digit = [](TokenRole::Kind kind, int64_t column) { return TokenRole{kind, column}; };
    std::vector<TokenRole> operands, answer;
    lay_out_operands(
        wa, wb, [&](int64_t i) { return digit(TokenRole::OperandDigit, i); },
        [&](int64_t, int64_t l) { return digit(TokenRole::OperandDigit, l); }, other, operands);
    for (int64_t j = 0; j < answer_digits; ++j) {
      answer.push_back(digit(TokenRole::AnswerDigit, j));
      if (carries_) answer.push_back(other);  // the carry written after the digit
    }
    if (hints_ > 0) {  // a hint before every digit, as add_hints writes them
      auto hinted = [&](const std::vector<TokenRole>& plain) {
        std::vector<TokenRole> out;
        for (const TokenRole& r : plain) {
          if (r.kind != TokenRole::Other) out.push_back(other);
          out.push_back(r);
        }
        return out;
      };
      operands = hinted(operands);
      answer = hinted(answer);
    }
    operands.push_back(other);  // SEP
    operands.insert(operands.end(), answer.begin(), answer.end());
    return operands;
  }
  /// n examples of na and nb digits; a share `high_digit_share` of them draw
  /// their digits from [f, 9], f uniform in 0..9 per example (training only).
  /// Each example's operands go to `drawn` where given.
  TaskBatch operand_batch(int64_t na, int64_t nb, int64_t n, std::mt19937_64& rng, std::mt19937_64* offsets,
                          double high_digit_share, std::vector<Operands>* drawn = nullptr) const {
    const int64_t m = std::max(na, nb);
    const int64_t wa = pad_ ? m : na, wb = pad_ ? m : nb;  // digits written
    check_multiplier_fits(wb);
    check_eval_length(m);  // every digit of the sum has a hint
    std::uniform_int_distribution<int64_t> hint_start(0, std::max<int64_t>(hints_ - m - 1, 0));
    return assemble(
        n,
        [&](std::vector<int64_t>& input, std::vector<int64_t>& answer) {
          // Drawn only when asked, so that the default's examples stay those it always drew.
          const bool high =
              high_digit_share > 0.0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng) < high_digit_share;
          const int lowest_digit = high ? std::uniform_int_distribution<int>(0, 9)(rng) : 0;
          const Operands x = draw_operands(na, nb, wa, wb, lowest_digit, rng);
          write_example(x, input, answer);
          if (drawn) drawn->push_back(x);
          if (hints_ > 0) add_hints(wa, wb, offsets ? hint_start(*offsets) : 0, input, answer);
        },
        position_ids(wa, wb, n, offsets));
  }

  /// Appends one entry per operand token in the prompt's order: `a op b`, or
  /// with the multiplier beside each digit `a0 b a1 b ... op`. a_entry(i) is
  /// a's digit i's; b_entry(i, l) b's digit l's, in the copy after a's digit i
  /// (i = -1: b written once); op the operator's. Tokens, ids and roles alike.
  template <class Entry, class AEntry, class BEntry>
  void lay_out_operands(int64_t wa, int64_t wb, AEntry a_entry, BEntry b_entry,
                        typename std::vector<Entry>::value_type op, std::vector<Entry>& out) const {
    for (int64_t i = 0; i < wa; ++i) {
      out.push_back(a_entry(i));
      if (beside_)
        for (int64_t l = 0; l < wb; ++l) out.push_back(b_entry(i, l));
    }
    out.push_back(op);
    if (!beside_)
      for (int64_t l = 0; l < wb; ++l) out.push_back(b_entry(int64_t{-1}, l));
  }

  /// One token's word (decode_text).
  std::string token_word(int64_t t) const {
    if (t >= 1 && t <= 10) return std::to_string(t - 1);
    if (t == kOperator) return op_ == Op::Add ? "+" : "*";
    if (t > kOperator && t <= kOperator + hints_) return "h" + std::to_string(t - kOperator - 1);
    if (own_answer_tokens_ && t > kOperator + hints_ && t <= multiplier_base())
      return "r" + std::to_string(t - kOperator - hints_ - 1);
    if (t > multiplier_base() && t <= carry_base()) {
      const int64_t i = t - multiplier_base() - 1;  // 10 l + d
      return "b" + std::to_string(i / 10) + ":" + std::to_string(i % 10);
    }
    if (carries_ && t > carry_base() && t <= vocab_size()) return "c" + std::to_string(t - carry_base() - 1);
    if (t == sep()) return "=";
    return "<" + std::to_string(t) + ">";
  }
  /// The words encode_text reads, for its error.
  std::string words_read() const {
    std::string words = std::string("digits 0-9 and ") + (op_ == Op::Add ? "+" : "*");
    if (hints_ > 0) words += ", hints h0-h" + std::to_string(hints_ - 1);
    if (own_answer_tokens_) words += ", the answer's digits r0-r9";
    if (per_digit_multiplier_) words += ", b's digits b0:0-b" + std::to_string(multiplier_ - 1) + ":9";
    if (carries_) words += ", carries c0-c" + std::to_string(9 * multiplier_ - 1);
    return words;
  }

  /// Per-digit multiplier tokens and written carries have tokens for b's
  /// task.multiplier_digits digits only: a wider b (an operand grid's cell) is refused.
  void check_multiplier_fits(int64_t b_digits) const {
    if (!option_bounding_b().empty() && b_digits > multiplier_)
      throw ConfigError(
          "eval.operand_grid: a b of " + std::to_string(b_digits) + " digits, but " + option_bounding_b() +
          " has tokens for b's task.multiplier_digits=" + std::to_string(multiplier_) +
          " digits only: leave eval.operand_grid out, or keep its digits at most " + std::to_string(multiplier_));
  }

  /// The option whose tokens exist for b's task.multiplier_digits digits only
  /// (per-digit tokens, else written carries); empty when b may be written wider.
  std::string option_bounding_b() const {
    if (per_digit_multiplier_) return "task.multiplier_tokens=per_digit";
    return carries_ ? "task.carries=written" : "";
  }

  /// b's digits where a has `a_digits` and the draw does not decide them.
  int64_t b_digits(int64_t a_digits) const { return multiplier_ > 0 ? multiplier_ : a_digits; }

  /// Puts the hint of each digit's significance before it: hint i is token kOperator + 1 + start + i.
  static void add_hints(int64_t wa, int64_t wb, int64_t start, std::vector<int64_t>& input,
                        std::vector<int64_t>& answer) {
    auto hinted = [&](const int64_t* digits, int64_t n, std::vector<int64_t>& out) {
      for (int64_t i = 0; i < n; ++i) {
        out.push_back(kOperator + 1 + start + i);
        out.push_back(digits[i]);
      }
    };
    std::vector<int64_t> plain_input;
    plain_input.swap(input);  // a (wa digits) '+' b (wb digits)
    hinted(plain_input.data(), wa, input);
    input.push_back(kOperator);
    hinted(plain_input.data() + wa + 1, wb, input);
    std::vector<int64_t> plain_answer;
    plain_answer.swap(answer);
    hinted(plain_answer.data(), static_cast<int64_t>(plain_answer.size()), answer);
  }

  /// a (na digits) and b (nb digits), written with wa >= na and wb >= nb
  /// digits (leading zeros), each digit drawn from [lowest_digit, 9].
  static Operands draw_operands(int64_t na, int64_t nb, int64_t wa, int64_t wb, int lowest_digit,
                                std::mt19937_64& rng) {
    std::uniform_int_distribution<int> digit(lowest_digit, 9);
    Operands x{std::vector<int>(wa, 0), std::vector<int>(wb, 0)};
    for (int64_t i = 0; i < na; ++i) x.a[i] = digit(rng);
    for (int64_t i = 0; i < nb; ++i) x.b[i] = digit(rng);
    return x;
  }
  /// `a op b` (input) and the answer, as tokens.
  void write_example(const Operands& x, std::vector<int64_t>& input, std::vector<int64_t>& answer) const {
    const std::vector<int>&a = x.a, &b = x.b;
    const auto wa = static_cast<int64_t>(a.size()), wb = static_cast<int64_t>(b.size());
    lay_out_operands(
        wa, wb, [&](int64_t i) { return int64_t{a[i]} + 1; },
        [&](int64_t, int64_t l) { return multiplier_token(l, b[l]); }, kOperator, input);
    for (const Column& c : columns(x)) {
      answer.push_back(answer_token(c.digit()));
      if (carries_) answer.push_back(carry_base() + 1 + c.carry());
    }
  }
  /// The token of the answer's digit d: the operands' (d + 1), or with
  /// task.answer_tokens=own one of ten after the operator and the hints.
  int64_t answer_token(int d) const { return own_answer_tokens_ ? kOperator + hints_ + 1 + d : d + 1; }
  /// The token of b's digit l (its units are l = 0) of value d: the operands'
  /// (d + 1), or with task.multiplier_tokens=per_digit ten of digit l's own.
  int64_t multiplier_token(int64_t l, int d) const {
    return per_digit_multiplier_ ? multiplier_base() + 1 + 10 * l + d : d + 1;
  }
  /// The last token before b's per-digit tokens, and before the carries' (carry c is carry_base() + 1 + c).
  int64_t multiplier_base() const { return kOperator + hints_ + (own_answer_tokens_ ? 10 : 0); }
  int64_t carry_base() const { return multiplier_base() + (per_digit_multiplier_ ? 10 * multiplier_ : 0); }

  /// One column of the answer: all it adds (its digits or products and the
  /// carry into it), whose units are its digit and whose tens the carry out.
  struct Column {
    int64_t sum;
    int digit() const { return static_cast<int>(sum % 10); }
    int carry() const { return static_cast<int>(sum / 10); }
  };
  /// The answer's columns, least-significant first: the sum's or the product's.
  std::vector<Column> columns(const Operands& x) const { return op_ == Op::Add ? sum(x.a, x.b) : product(x.a, x.b); }
  /// Least-significant digit first: max(len) + 1 columns, the last the final carry (out of it: 0).
  static std::vector<Column> sum(const std::vector<int>& a, const std::vector<int>& b) {
    std::vector<Column> s;
    int carry = 0;
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const int d = (i < a.size() ? a[i] : 0) + (i < b.size() ? b[i] : 0) + carry;
      carry = d / 10;
      s.push_back({d});
    }
    s.push_back({carry});  // the last digit, a carry of at most 1: nothing carries out of it
    return s;
  }
  /// Least-significant digit first: len(a) + len(b) columns. Column j sums
  /// a_i * b_l over i + l = j and the carry into it; the last carry is 0.
  static std::vector<Column> product(const std::vector<int>& a, const std::vector<int>& b) {
    const auto na = static_cast<int64_t>(a.size()), nb = static_cast<int64_t>(b.size());
    std::vector<Column> p;
    int64_t carry = 0;  // below 9 * min(na, nb)
    for (int64_t j = 0; j < na + nb; ++j) {
      int64_t s = carry;
      for (int64_t l = std::max<int64_t>(0, j - na + 1); l <= std::min(j, nb - 1); ++l) s += a[j - l] * b[l];
      carry = s / 10;
      p.push_back({s});
    }
    return p;
  }

  /// The ids of `wa digits op wb digits SEP` and the answer: an (m + 1)-digit
  /// sum, m = max(wa, wb), or a (wa + wb)-digit product.
  std::vector<std::vector<int64_t>> position_ids(int64_t wa, int64_t wb, int64_t n, std::mt19937_64* offsets) const {
    if (positions_ == "sequence") return {};
    const int64_t m = std::max(wa, wb);
    const int64_t answer_digits = op_ == Op::Add ? m + 1 : wa + wb;
    std::uniform_int_distribution<int64_t> draw(0, offset_);
    std::vector<std::vector<int64_t>> rows;
    const int64_t batch_k = positions_ == "abacus" && offsets ? draw(*offsets) : 0;  // one per batch
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int64_t> ids;
      if (positions_ == "abacus") {  // each digit's index inside its own number
        lay_out_operands(
            wa, wb, [&](int64_t i) { return 1 + i + batch_k; }, [&](int64_t, int64_t l) { return 1 + l + batch_k; }, 0,
            ids);
        ids.push_back(0);  // SEP
        for (int64_t i = 0; i < answer_digits; ++i)
          for (int64_t t = 0; t < (carries_ ? 2 : 1); ++t) ids.push_back(1 + i + batch_k);  // the digit (its carry)
      } else {
        const int64_t start = offsets ? draw(*offsets) : 0;  // one per example
        // A copy of b beside a_i takes a_i's id (i >= 0); b written once, its own significance's.
        lay_out_operands(
            wa, wb, [&](int64_t i) { return start + i + 1; },
            [&](int64_t i, int64_t l) { return start + (i >= 0 ? i : l) + 1; }, 0, ids);
        // SEP predicts digit 0; digit j (with written carries, its carry) predicts
        // digit j + 1, and takes its id; the last predicts nothing.
        ids.push_back(start + 1);
        for (int64_t j = 0; j < answer_digits; ++j) {
          if (carries_) ids.push_back(start + j + 1);  // digit j predicts its own column's carry
          ids.push_back(start + j + 2);
        }
      }
      rows.push_back(std::move(ids));
    }
    return rows;
  }

  Op op_;
  std::string positions_;
  int64_t offset_;
  bool independent_, pad_;
  int64_t hints_;
  int64_t multiplier_;         // b's digits where fixed; 0: drawn like a's
  bool beside_;                // b written after every digit of a (task.multiplier_placement)
  bool per_digit_multiplier_;  // b's digits each with ten tokens of their own (task.multiplier_tokens)
  bool carries_;               // each product digit followed by its column's carry (task.carries)
  bool own_answer_tokens_;
  double high_digit_share_;  // training examples of large digits (task.high_digit_share)
};

/// The options addition and multiplication share; `addition` adds index hints, multiplication a fixed multiplier.
std::vector<OptionSpec> arithmetic_options(bool addition) {
  std::vector<OptionSpec> options = {
      {"positions",
       OptionKind::String,
       "sequence",
       std::string("position ids: sequence (0..T-1), abacus (1 + a digit's index in its number, McLeish et al. 2024) "
                   "or coupled (one id per significance in a, b and the ") +
           (addition ? "sum" : "product") + ", Cho et al. 2024); read by the embedding scheme",
       0,
       0,
       {"sequence", "abacus", "coupled"}},
      {"position_offset", OptionKind::Int, 0,
       "training only: abacus adds a random k in [0, this] per batch to every digit's id, coupled starts each "
       "example's ids at a random offset in [0, this]",
       0, 1 << 20},
      {"operands",
       OptionKind::String,
       "equal",
       "training operands: equal (one length n per batch for both) or independent (a's and b's digits drawn "
       "apart per batch, each from [min_length, max_length])",
       0,
       0,
       {"equal", "independent"}},
      {"pad_operands", OptionKind::Bool, false, "write the shorter operand with leading zeros to the longer's length"},
      {"answer_tokens",
       OptionKind::String,
       "shared",
       std::string("shared: the ") + (addition ? "sum" : "product") +
           "'s digits are the operands' ten tokens; own: ten tokens of their own, so that a digit's token alone "
           "says whether it is an operand's or the answer's (without them the model learns that from where "
           "the operator and SEP are)",
       0,
       0,
       {"shared", "own"}},
      {"high_digit_share", OptionKind::Float, 0.0,
       std::string("training only: the share of training examples whose digits are drawn from [f, 9], f drawn "
                   "from 0-9 per example (the others from 0-9): large digits make the ") +
           (addition ? "long carry chains" : "large column sums and carries") +
           " that uniform digits rarely show; the evaluation sets always draw from 0-9",
       0.0, 1.0},
  };
  if (addition) {
    options.push_back({"index_hints", OptionKind::Int, 0,
                       "0: none; H > 0: every digit is preceded by a hint token naming its significance, from H "
                       "ordered hints (Zhou et al. 2023, 2024); training starts an example's hints at a random one, "
                       "evaluation at the first",
                       0, 1024});
  } else {  // the multiplier and the carries
    options.push_back({"multiplier_digits", OptionKind::Int, 0,
                       "0: b is drawn like a (task.operands); k > 0: b has k digits in training and in the "
                       "per-length evaluation sets, whose length is then a's digits (Cho et al. 2024 train N x 2 "
                       "multiplication: k = 2); eval.operand_grid still sets both",
                       0, 64});
    options.push_back({"multiplier_placement",
                       OptionKind::String,
                       "once",
                       "once: a * b SEP; beside_each_digit: b's digits written after every digit of a "
                       "(a0 b a1 b ... * SEP), each copy with the id of the digit of a before it under coupled ids, "
                       "so a product digit's multiplier is as near as its digit of a; needs task.multiplier_digits",
                       0,
                       0,
                       {"once", "beside_each_digit"}});
    options.push_back({"multiplier_tokens",
                       OptionKind::String,
                       "shared",
                       "shared: b's digits are the operands' ten tokens; per_digit: each of b's digits (units, tens, "
                       "...) has ten tokens of its own, so copies of b that share one id still say which digit of b "
                       "each is; needs task.multiplier_digits",
                       0,
                       0,
                       {"shared", "per_digit"}});
    options.push_back({"carries",
                       OptionKind::String,
                       "hidden",
                       "hidden: the answer is the product's digits; written: each digit is followed by the carry "
                       "out of its column (below 9 times task.multiplier_digits, tokens of their own, the digit's "
                       "id), and exact match needs the carries right too; needs task.multiplier_digits",
                       0,
                       0,
                       {"hidden", "written"}});
  }
  return options;
}

TaskInfo arithmetic_info(const std::string& name, const std::string& description, ArithmeticTask::Op op) {
  TaskInfo t = sequence_info(name, description);
  t.options = arithmetic_options(op == ArithmeticTask::Op::Add);
  t.has_operands = true;
  // The vocabulary depends on the options: ArithmeticTask::vocab_size.
  t.length_unit = "digits per operand";
  t.make = [name, op](const TaskConfig& cfg) { return std::make_unique<ArithmeticTask>(cfg, name, op); };
  t.positions_end = [op](const TaskConfig& cfg, int64_t length) {
    return ArithmeticTask::positions_end(op, cfg, length);
  };
  const std::string answer = op == ArithmeticTask::Op::Add ? "sum" : "product";
  const std::string column_terms =
      op == ArithmeticTask::Op::Add ? "a's and b's digit j" : "the products a_i * b_l of its digits, i + l = j";
  t.probe_targets = {
      {"column", "a digit's significance (0 for the units), at every digit of both operands and the " + answer},
      {"carry", "the carry into column j of the " + answer +
                    " (0 into the units), at the token that predicts its digit j: what that digit needs beside "
                    "the operands' digits"},
      {"column_sum", "all that column j of the " + answer + " adds (" + column_terms +
                         ", and the carry into it), at the token that predicts its digit j: its units are that "
                         "digit, its tens the carry out"},
      {"sum_parity",
       "column_sum mod 2, at the same tokens: the parity of digit j, which the parities of what "
       "the column adds decide without its size"}};
  if (op == ArithmeticTask::Op::Multiply)
    t.probe_targets.push_back(
        {"carry_out",
         "the carry out of column j (column_sum's tens), at the product's digit j, which predicts it as the carry "
         "written next",
         TaskSetting{"carries", "written"},
         "where the carries are not written, the carry is read at the token that predicts the next digit: --target "
         "carry"});
  return t;
}

}  // namespace

TaskInfo addition_task_info() {
  return arithmetic_info("addition",
                         "a + b SEP -> a+b, least-significant digit first; length n: two n-digit operands and "
                         "an (n+1)-digit sum (decoder; task.operands draws the two lengths apart)",
                         ArithmeticTask::Op::Add);
}
TaskInfo multiplication_task_info() {
  TaskInfo t = arithmetic_info("multiplication",
                               "a * b SEP -> a*b, least-significant digit first; length n: two n-digit operands and "
                               "a 2n-digit product (decoder; task.operands draws the two lengths apart)",
                               ArithmeticTask::Op::Multiply);
  // Every digit of a product depends on every digit of the operands below it:
  // lengths that a small model learns on a CPU, and twice them.
  t.length_unit = "digits of a";  // b's too, unless task.multiplier_digits fixes them
  t.default_min_length = 2;
  t.default_max_length = 4;
  t.default_eval_lengths = {2, 3, 4, 5, 6, 8};
  return t;
}

}  // namespace posenc

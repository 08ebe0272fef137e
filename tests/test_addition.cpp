// Addition's operands: lengths drawn apart or padded, every sum right, the ids
// of unequal operands, and the operand grid that scores every (a, b) pair;
// multiplication's products and abacus ids, on the same operands.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "cli_helpers.h"
#include "helpers.h"
#include "reliability_helpers.h"
#include "posenc/model/transformer.h"
#include "posenc/tasks/task.h"
#include "posenc/train/evaluate.h"
#include "posenc/train/objective.h"
#include "posenc/util/text.h"

// This file's names live in a namespace of their own, so that the unity build
// can compile several test files as one unit (CMakeLists.txt).
namespace POSENC_TEST_UNIT {

using namespace posenc;
using posenc::testing::config_error;
using posenc::testing::config_with;
using posenc::testing::error_of;

namespace {

Config addition_config(const std::vector<std::string>& extra, const std::string& task = "addition") {
  std::vector<std::string> o = {"model.kind=\"decoder\"",
                                "model.d_model=32",
                                "model.heads=2",
                                "model.layers=2",
                                "model.d_ff=64",
                                "model.positional.type=\"learned\"",
                                "task.type=\"" + task + "\"",
                                "task.min_length=2",
                                "task.max_length=6",
                                "eval.lengths=[4,8]"};
  o.insert(o.end(), extra.begin(), extra.end());
  json j = json::object();
  for (const auto& s : o) apply_override(j, s);
  return config_from_json(j);
}

std::vector<int64_t> row_of(const torch::Tensor& t, int64_t r) {
  auto row = t[r].contiguous();
  return {row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()};
}

/// One example `a + b SEP s` read back: the digits of a and b (least-significant first) and of s.
struct Sum {
  std::vector<int> a, b, s;
};
Sum read_example(const std::vector<int64_t>& tokens, int64_t answer_start) {
  constexpr int64_t kPlus = 11;
  Sum out;
  bool second = false;
  for (int64_t i = 0; i + 1 < answer_start; ++i) {  // the prompt before SEP
    if (tokens[i] == kPlus) {
      second = true;
      continue;
    }
    (second ? out.b : out.a).push_back(static_cast<int>(tokens[i] - 1));
  }
  for (size_t i = answer_start; i < tokens.size(); ++i) out.s.push_back(static_cast<int>(tokens[i] - 1));
  return out;
}

/// A little-endian digit string's value (at most 19 digits).
uint64_t value_of(const std::vector<int>& digits) {
  uint64_t v = 0;
  for (auto d = digits.rbegin(); d != digits.rend(); ++d) v = 10 * v + static_cast<uint64_t>(*d);
  return v;
}

/// Whether the answer is a + b written with max(len) + 1 digits, by integer
/// arithmetic (an oracle apart from the task's digit-by-digit carry; operands
/// of at most 18 digits).
::testing::AssertionResult is_the_sum(const Sum& e) {
  if (e.a.size() > 18 || e.b.size() > 18) return ::testing::AssertionFailure() << "operands too long to check";
  if (e.s.size() != std::max(e.a.size(), e.b.size()) + 1)
    return ::testing::AssertionFailure() << e.s.size() << " answer digits";
  if (value_of(e.s) != value_of(e.a) + value_of(e.b))
    return ::testing::AssertionFailure() << value_of(e.a) << " + " << value_of(e.b) << " gave " << value_of(e.s);
  return ::testing::AssertionSuccess();
}

/// Every id of multiplication's per-length sets of `lengths`, with `options`,
/// lies below the bound TaskInfo::positions_end declares for that length.
void expect_ids_below_positions_end(const std::vector<std::string>& options, std::initializer_list<int64_t> lengths) {
  const Config c = addition_config(options, "multiplication");
  const auto task = find_task("multiplication").make(c.task);
  for (const int64_t length : lengths) {
    const auto ids = row_of(task->fixed_set(length, 2, 0).positions, 0);
    EXPECT_LT(*std::max_element(ids.begin(), ids.end()), find_task("multiplication").positions_end(c.task, length))
        << length << " digits of a; " << c.task.options.json().dump();
  }
}

/// `a0 B a1 B ... * SEP p` read back, B being b's k digits after each digit of a.
Sum read_beside(const std::vector<int64_t>& tokens, int64_t answer_start, size_t k) {
  Sum out;
  const size_t written = static_cast<size_t>(answer_start) - 2;  // before '*' and SEP
  for (size_t i = 0; i < written; i += 1 + k) {
    out.a.push_back(static_cast<int>(tokens[i] - 1));
    std::vector<int> b;
    for (size_t l = 1; l <= k; ++l) b.push_back(static_cast<int>(tokens[i + l] - 1));
    if (out.b.empty()) out.b = b;
    EXPECT_EQ(b, out.b) << "every copy of b is b";
  }
  EXPECT_EQ(tokens[written], 11) << "the operator closes the operands";
  for (size_t i = answer_start; i < tokens.size(); ++i) out.s.push_back(static_cast<int>(tokens[i] - 1));
  return out;
}

/// Multiplication with the product's own tokens, per-digit multiplier tokens
/// and written carries, b of k digits: digits 1..10, '*' 11, the product's own
/// 12..21, b's digit l at 22 + 10l..31 + 10l, the carries 0..9k-1 from 22 + 10k,
/// then SEP. A column's sum is below 81k + 9k, so its carry is below 9k.
int64_t first_multiplier_token(size_t l) { return 22 + 10 * static_cast<int64_t>(l); }
int64_t first_carry_token(size_t k) { return first_multiplier_token(k); }
int64_t written_carries_sep(size_t k) { return first_carry_token(k) + 9 * static_cast<int64_t>(k); }

/// The options of that format (coupled ids, b beside each digit of a), b of k digits.
std::vector<std::string> written_carries_options(int k) {
  return {"task.positions=\"coupled\"",
          "task.multiplier_digits=" + std::to_string(k),
          "task.multiplier_placement=\"beside_each_digit\"",
          "task.answer_tokens=\"own\"",
          "task.multiplier_tokens=\"per_digit\"",
          "task.carries=\"written\""};
}

/// One example `a0 b0..b(k-1) a1 b0..b(k-1) ... * SEP p0 c0 p1 c1 ...` read
/// back in that layout, checking that every copy of b is b, that each column's
/// digit plus ten times its carry is the column's sum (products of a's and b's
/// digits and the carry into it), that nothing is carried out of the last
/// column, and that the product is a * b by integer arithmetic. Each carry
/// is counted in *carries_seen under its value.
Sum read_written_carries(const std::vector<int64_t>& t, int64_t answer_start, size_t k, const std::string& what,
                         std::map<int, int64_t>* carries_seen) {
  Sum e;
  for (size_t i = 0; i + 2 < static_cast<size_t>(answer_start); i += 1 + k) {  // a_i, b0..b(k-1) ... then '*', SEP
    e.a.push_back(static_cast<int>(t[i] - 1));
    std::vector<int> b;
    for (size_t l = 0; l < k; ++l) {
      const int64_t token = t[i + 1 + l], first = first_multiplier_token(l);
      EXPECT_TRUE(token >= first && token <= first + 9) << what << ": b's digit " << l << " has tokens of its own";
      b.push_back(static_cast<int>(token - first));
    }
    if (e.b.empty()) e.b = b;
    EXPECT_EQ(b, e.b) << what << ": every copy of b is b";
  }
  EXPECT_EQ(t[answer_start - 2], 11) << what;
  EXPECT_EQ(t[answer_start - 1], written_carries_sep(k)) << what;
  int carry = 0;
  for (size_t i = answer_start, j = 0; i < t.size(); i += 2, ++j) {
    const int digit = static_cast<int>(t[i] - 12), out = static_cast<int>(t[i + 1] - first_carry_token(k));
    EXPECT_TRUE(digit >= 0 && digit <= 9 && out >= 0 && out < 9 * static_cast<int>(k)) << what << ", column " << j;
    int column = carry;
    for (size_t l = 0; l < k; ++l)
      if (j >= l && j - l < e.a.size()) column += e.a[j - l] * e.b[l];
    EXPECT_EQ(digit + 10 * out, column) << what << ", column " << j;
    ++(*carries_seen)[out];
    e.s.push_back(digit);
    carry = out;
  }
  EXPECT_EQ(carry, 0) << what << ": nothing is carried out of the last column";
  EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b)) << what;
  return e;
}

}  // namespace

// Checked against the machine's own multiplication of the operands' values.
TEST(Multiplication, EveryProductIsRightAndHasTheDigitsOfBothOperands) {
  const auto task =
      find_task("multiplication").make(addition_config({"task.operands=\"independent\""}, "multiplication").task);
  std::set<std::pair<size_t, size_t>> seen;
  int64_t carries_past_a_digit = 0;  // products whose top digit is not 0
  const auto check = [&](const TaskBatch& batch, int64_t rows, const std::string& what) {
    for (int64_t r = 0; r < rows; ++r) {
      const Sum e = read_example(row_of(batch.tokens, r), batch.answer_start);
      ASSERT_EQ(e.s.size(), e.a.size() + e.b.size()) << what;
      EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b)) << what << " row " << r;
      seen.insert({e.a.size(), e.b.size()});
      carries_past_a_digit += e.s.back() != 0;
    }
  };
  for (int64_t step = 0; step < 200; ++step) check(task->train_batch(step, 4, 0), 4, "step " + std::to_string(step));
  EXPECT_EQ(seen.size(), 25u) << "every pair of lengths in [2, 6] is drawn";
  check(task->fixed_set(9, 32, 1), 32, "9 digits");
  check(task->fixed_operand_set(3, 9, 32, 1), 32, "3 x 9 digits");
  EXPECT_GT(carries_past_a_digit, 100) << "most products use every digit";
  EXPECT_EQ(task->sequence_length(9), task->fixed_set(9, 2, 1).tokens.size(1)) << "n, '*', n, SEP, 2n";
}

// Abacus ids count inside each number, the product's digits included; the
// training offset moves every digit's id by one k per batch.
TEST(Multiplication, AbacusIdsCountInsideEachNumber) {
  const auto abacus =
      find_task("multiplication").make(addition_config({"task.positions=\"abacus\""}, "multiplication").task);
  // a0 a1 * b0 b1 b2 SEP p0 p1 p2 p3 p4
  EXPECT_EQ(row_of(abacus->fixed_operand_set(2, 3, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5}));
  const Config shifted = addition_config({"task.positions=\"abacus\"", "task.position_offset=7"}, "multiplication");
  const auto task = find_task("multiplication").make(shifted.task);
  std::set<int64_t> ks;
  for (int64_t step = 0; step < 40; ++step) {
    const auto b = task->train_batch(step, 3, 0);
    const auto ids = row_of(b.positions, 0);
    const int64_t k = ids[0] - 1;
    ks.insert(k);
    EXPECT_EQ(ids.back(), k + static_cast<int64_t>(ids.size() - b.answer_start)) << "the product's last digit";
    for (int64_t r = 1; r < 3; ++r) EXPECT_EQ(row_of(b.positions, r), ids) << "one k per batch";
    EXPECT_LT(ids.back(), find_task("multiplication").positions_end(shifted.task, shifted.task.max_length));
  }
  EXPECT_GT(ks.size(), 4u) << "k is drawn from [0, 7]";
  // A multiplier longer than a, padded: a is written with as many digits, and
  // the product's ids still end before positions_end.
  expect_ids_below_positions_end({"task.positions=\"abacus\"", "task.multiplier_digits=5", "task.pad_operands=true"},
                                 {2, 6});
}

// Coupled ids (Cho et al. 2024): a's, b's and the product's digits of one
// significance share an id, and the token that predicts digit j carries j's.
TEST(Multiplication, CoupledIdsGiveEachSignificanceOneId) {
  const Config plain = addition_config({"task.positions=\"coupled\""}, "multiplication");
  const auto coupled = find_task("multiplication").make(plain.task);
  // a0 a1 * b0 b1 b2 SEP p0 p1 p2 p3 p4: SEP predicts p0 (the units, id 1), p4 predicts nothing.
  EXPECT_EQ(row_of(coupled->fixed_operand_set(2, 3, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 2, 0, 1, 2, 3, 1, 2, 3, 4, 5, 6}));
  // Training starts each example's ids at its own offset in [0, position_offset]; the tokens do not change.
  const Config shifted = addition_config({"task.positions=\"coupled\"", "task.position_offset=9"}, "multiplication");
  const auto task = find_task("multiplication").make(shifted.task);
  std::set<int64_t> starts;
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = task->train_batch(step, 4, 0);
    EXPECT_TRUE(torch::equal(b.tokens, coupled->train_batch(step, 4, 0).tokens));
    for (int64_t r = 0; r < 4; ++r) {
      const auto ids = row_of(b.positions, r);
      const Sum e = read_example(row_of(b.tokens, r), b.answer_start);
      const int64_t start = ids[0] - 1, na = static_cast<int64_t>(e.a.size());
      starts.insert(start);
      EXPECT_EQ(ids[na], 0) << "the operator";
      EXPECT_EQ(ids[na + 1], start + 1) << "b's units share a's";
      EXPECT_EQ(ids[b.answer_start - 1], start + 1) << "SEP predicts the units";
      EXPECT_EQ(ids.back(), start + static_cast<int64_t>(e.s.size()) + 1) << "the product's last digit";
      EXPECT_LT(ids.back(), find_task("multiplication").positions_end(shifted.task, shifted.task.max_length));
    }
  }
  EXPECT_GT(starts.size(), 5u) << "starts are drawn per example from [0, 9]";
  // N x 2, and b longer than a and padded: the last id still ends before positions_end.
  expect_ids_below_positions_end({"task.positions=\"coupled\"", "task.multiplier_digits=2"}, {2, 6, 9});
  expect_ids_below_positions_end({"task.positions=\"coupled\"", "task.multiplier_digits=5", "task.pad_operands=true"},
                                 {2, 6, 9});
}

// N x k (task.multiplier_digits): b has k digits in training and in the
// per-length sets; the operand grid still sets both.
TEST(Multiplication, AFixedMultiplierGivesBItsDigitsAndTheGridStillSetsBoth) {
  const auto task =
      find_task("multiplication")
          .make(addition_config({"task.multiplier_digits=2", "task.positions=\"abacus\""}, "multiplication").task);
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = task->train_batch(step, 4, 0);
    const Sum e = read_example(row_of(b.tokens, 0), b.answer_start);
    EXPECT_GE(e.a.size(), 2u);
    EXPECT_LE(e.a.size(), 6u);
    EXPECT_EQ(e.b.size(), 2u);
    EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b));
  }
  const auto set = task->fixed_set(9, 8, 1);
  EXPECT_EQ(set.tokens.size(1), task->sequence_length(9)) << "9, '*', 2, SEP, 11";
  EXPECT_EQ(task->sequence_length(9), 24);
  const Sum nine = read_example(row_of(set.tokens, 0), set.answer_start);
  EXPECT_EQ(nine.a.size(), 9u);
  EXPECT_EQ(nine.b.size(), 2u);
  // a0..a8 * b0 b1 SEP p0..p10
  std::vector<int64_t> ids;
  for (int64_t i = 1; i <= 9; ++i) ids.push_back(i);
  ids.insert(ids.end(), {0, 1, 2, 0});
  for (int64_t i = 1; i <= 11; ++i) ids.push_back(i);
  EXPECT_EQ(row_of(set.positions, 0), ids);
  const auto cell = task->fixed_operand_set(5, 5, 8, 1);
  const Sum square = read_example(row_of(cell.tokens, 0), cell.answer_start);
  EXPECT_EQ(square.b.size(), 5u) << "the grid's cell (5, 5) is 5 x 5";
  EXPECT_EQ(cell.tokens.size(1), task->operand_sequence_length(5, 5));
  const Config both = addition_config({"task.multiplier_digits=2", "task.operands=\"independent\""}, "multiplication");
  EXPECT_NE(error_of([&] { find_task("multiplication").make(both.task); }).find("task.multiplier_digits=2 fixes"),
            std::string::npos);
}

// task.multiplier_placement=beside_each_digit: the same operands, b written
// after every digit of a with that digit's coupled id, every product right.
TEST(Multiplication, TheMultiplierBesideEachDigitSharesItsIdAndKeepsEveryProduct) {
  const auto beside_config = [](const std::string& positions, int64_t k) {
    return addition_config({"task.positions=\"" + positions + "\"", "task.multiplier_digits=" + std::to_string(k),
                            "task.multiplier_placement=\"beside_each_digit\""},
                           "multiplication");
  };
  const auto once =
      find_task("multiplication")
          .make(addition_config({"task.positions=\"coupled\"", "task.multiplier_digits=1"}, "multiplication").task);
  const Config c = beside_config("coupled", 1);
  const auto beside = find_task("multiplication").make(c.task);
  // a0 b a1 b a2 b * SEP p0 p1 p2 p3: b shares the id of the digit of a before it.
  EXPECT_EQ(row_of(beside->fixed_set(3, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 1, 2, 2, 3, 3, 0, 1, 2, 3, 4, 5}));
  for (const int64_t length : {2, 5, 9}) {
    const auto set = beside->fixed_set(length, 16, 1), plain = once->fixed_set(length, 16, 1);
    EXPECT_EQ(set.tokens.size(1), beside->sequence_length(length)) << "2n digits, '*', SEP, n + 1";
    for (int64_t r = 0; r < 16; ++r) {
      const Sum e = read_beside(row_of(set.tokens, r), set.answer_start, 1);
      const Sum p = read_example(row_of(plain.tokens, r), plain.answer_start);
      EXPECT_EQ(e.a, p.a) << "the placement moves b, not the draw";
      EXPECT_EQ(e.b, p.b);
      EXPECT_EQ(e.s, p.s);
      EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b)) << length << " digits, row " << r;
    }
  }
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = beside->train_batch(step, 4, 0);
    const Sum e = read_beside(row_of(b.tokens, 0), b.answer_start, 1);
    EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b)) << "step " << step;
  }
  // N x 2 under abacus ids: each copy counts inside b.
  const auto abacus = find_task("multiplication").make(beside_config("abacus", 2).task);
  EXPECT_EQ(row_of(abacus->fixed_set(2, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 1, 2, 2, 1, 2, 0, 0, 1, 2, 3, 4}));
  const auto two = abacus->fixed_set(4, 8, 3);
  EXPECT_EQ(two.tokens.size(1), abacus->sequence_length(4));
  const Sum e = read_beside(row_of(two.tokens, 0), two.answer_start, 2);
  EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b));
  expect_ids_below_positions_end(
      {"task.positions=\"coupled\"", "task.multiplier_digits=2", "task.multiplier_placement=\"beside_each_digit\""},
      {2, 6, 9});
  // Without a fixed multiplier, b would be written n times: refused, naming both keys.
  const std::string error = error_of([] {
    find_task("multiplication")
        .make(addition_config({"task.multiplier_placement=\"beside_each_digit\""}, "multiplication").task);
  });
  EXPECT_NE(error.find("task.multiplier_placement=beside_each_digit"), std::string::npos) << error;
  EXPECT_NE(error.find("task.multiplier_digits"), std::string::npos) << error;
}

// task.carries=written and task.multiplier_tokens=per_digit on N x 2 beside
// each digit: b's digits told apart by their tokens, every column's digit and
// carry right by the column sum, the product right by integer arithmetic.
TEST(Multiplication, WrittenCarriesAddUpEachColumnAndPerDigitTokensNameBsDigits) {
  const std::vector<std::string> options = written_carries_options(2);
  const auto task = find_task("multiplication").make(addition_config(options, "multiplication").task);
  const auto plain = find_task("multiplication")
                         .make(addition_config({"task.positions=\"coupled\"", "task.multiplier_digits=2",
                                                "task.multiplier_placement=\"beside_each_digit\""},
                                               "multiplication")
                                   .task);
  // Tokens: digits 1..10, '*' 11, the product's own 12..21, b's units 22..31
  // and tens 32..41, the carries 0..17 at 42..59, SEP 60.
  EXPECT_EQ(task->vocab_size(), 59);
  // a0 b0 b1 a1 b0 b1 * SEP p0 c0 p1 c1 p2 c2 p3 c3: a column's digit and carry
  // are predicted by the queries with its id.
  EXPECT_EQ(row_of(task->fixed_set(2, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 1, 1, 2, 2, 2, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5}));
  std::map<int, int64_t> carries_seen;
  const auto check = [&](const std::vector<int64_t>& t, int64_t answer_start, const std::string& what) {
    return read_written_carries(t, answer_start, 2, what, &carries_seen);
  };
  for (const int64_t length : {2, 5, 9}) {
    const auto set = task->fixed_set(length, 16, 1), same = plain->fixed_set(length, 16, 1);
    EXPECT_EQ(set.tokens.size(1), task->sequence_length(length)) << "3n, '*', SEP, n + 2 digits and carries";
    for (int64_t r = 0; r < 16; ++r) {
      const Sum e = check(row_of(set.tokens, r), set.answer_start, std::to_string(length) + " digits");
      const Sum p = read_beside(row_of(same.tokens, r), same.answer_start, 2);
      EXPECT_EQ(e.a, p.a) << "the tokens change, not the draw";
      EXPECT_EQ(e.b, p.b);
      EXPECT_EQ(e.s, p.s);
    }
  }
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = task->train_batch(step, 4, 0);
    check(row_of(b.tokens, 0), b.answer_start, "step " + std::to_string(step));
  }
  int64_t carries_of_ten_or_more = 0;
  for (const auto& [carry, count] : carries_seen) carries_of_ten_or_more += carry >= 10 ? count : 0;
  EXPECT_GT(carries_of_ten_or_more, 10) << "N x 2 carries reach past 9, which one digit token could not hold";
  // Abacus ids: a column's digit and carry share the digit's index in the product.
  const auto abacus =
      find_task("multiplication")
          .make(addition_config({"task.positions=\"abacus\"", "task.multiplier_digits=1", "task.carries=\"written\""},
                                "multiplication")
                    .task);
  EXPECT_EQ(row_of(abacus->fixed_set(2, 2, 0).positions, 0), (std::vector<int64_t>{1, 2, 0, 1, 0, 1, 1, 2, 2, 3, 3}));
  expect_ids_below_positions_end(options, {2, 6, 9});
  // b wider than its per-digit tokens and carries allow (padded, or an operand
  // grid's cell): refused, naming the keys, before anything is trained.
  for (const std::string option : {"task.multiplier_tokens=\"per_digit\"", "task.carries=\"written\""}) {
    const std::string padded = error_of([&] {
      find_task("multiplication")
          .make(addition_config({option, "task.multiplier_digits=2", "task.pad_operands=true"}, "multiplication").task);
    });
    EXPECT_NE(padded.find("task.pad_operands"), std::string::npos) << padded;
    const auto grid_task =
        find_task("multiplication").make(addition_config({option, "task.multiplier_digits=2"}, "multiplication").task);
    EXPECT_EQ(grid_task->operand_sequence_length(5, 2), grid_task->sequence_length(5)) << "the per-length shape";
    const std::string cell = error_of([&] { grid_task->operand_sequence_length(3, 3); });
    EXPECT_NE(cell.find("eval.operand_grid: a b of 3 digits"), std::string::npos) << cell;
    EXPECT_NE(cell.find("task.multiplier_digits=2"), std::string::npos) << cell;
    EXPECT_NE(error_of([&] { grid_task->fixed_operand_set(3, 3, 2, 0); }).find("eval.operand_grid"), std::string::npos);
  }
  // Without a fixed multiplier neither has a bounded vocabulary: refused, naming both keys.
  for (const std::string option : {"task.multiplier_tokens=\"per_digit\"", "task.carries=\"written\""}) {
    const std::string error =
        error_of([&] { find_task("multiplication").make(addition_config({option}, "multiplication").task); });
    EXPECT_NE(error.find(option.substr(0, option.find('='))), std::string::npos) << error;
    EXPECT_NE(error.find("task.multiplier_digits"), std::string::npos) << error;
  }
}

// N x 3 (configs/multiplication_n_by_3_carries_compare.json): the same layout
// with three digits of b, whose column sums (three digit products and a carry)
// carry up to 26, past the largest of N x 2 (17).
TEST(Multiplication, NBy3CarriesReachPastNBy2sAndKeepTokensOfTheirOwn) {
  const std::vector<std::string> options = written_carries_options(3);
  const auto task = find_task("multiplication").make(addition_config(options, "multiplication").task);
  // b's digits 22..51, the carries 0..26 at 52..78, SEP 79.
  EXPECT_EQ(task->vocab_size(), 78);
  EXPECT_EQ(written_carries_sep(3), task->vocab_size() + 1);
  // a0 b0 b1 b2 a1 b0 b1 b2 * SEP p0 c0 ... p4 c4: b's copies share their digit of a's id.
  EXPECT_EQ(row_of(task->fixed_set(2, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 1, 1, 1, 2, 2, 2, 2, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6}));
  std::map<int, int64_t> carries_seen;
  for (const int64_t length : {2, 5, 9}) {
    const auto set = task->fixed_set(length, 256, 1);
    EXPECT_EQ(set.tokens.size(1), task->sequence_length(length)) << "4n, '*', SEP, n + 3 digits and carries";
    EXPECT_EQ(task->sequence_length(length), 4 * length + 2 + 2 * (length + 3));
    for (int64_t r = 0; r < 256; ++r)
      read_written_carries(row_of(set.tokens, r), set.answer_start, 3, std::to_string(length) + " digits",
                           &carries_seen);
  }
  for (int64_t step = 0; step < 20; ++step) {
    const auto b = task->train_batch(step, 4, 0);
    for (int64_t r = 0; r < 4; ++r)
      read_written_carries(row_of(b.tokens, r), b.answer_start, 3, "step " + std::to_string(step), &carries_seen);
  }
  EXPECT_GE(carries_seen.rbegin()->first, 18) << "N x 3 carries past N x 2's largest, 17";
  expect_ids_below_positions_end(options, {2, 6, 9});
}

/// What a task's training batches draw: the mean of a's digits, and how often
/// the product's columns carry 23 or more (a column sum of 230 or more).
struct TrainingDraw {
  double mean_digit = 0;
  int64_t large_carries = 0, columns = 0;
};
TrainingDraw n_by_3_training_draw(const Task& task) {
  std::map<int, int64_t> carries;
  int64_t digits = 0, digit_total = 0;
  for (int64_t step = 0; step < 200; ++step) {
    const auto b = task.train_batch(step, 8, 0);
    for (int64_t r = 0; r < 8; ++r) {
      const Sum e =
          read_written_carries(row_of(b.tokens, r), b.answer_start, 3, "step " + std::to_string(step), &carries);
      digits += static_cast<int64_t>(e.a.size());
      digit_total += std::accumulate(e.a.begin(), e.a.end(), int64_t{0});
    }
  }
  TrainingDraw d;
  d.mean_digit = static_cast<double>(digit_total) / static_cast<double>(digits);
  for (const auto& [carry, count] : carries) {
    d.columns += count;
    if (carry >= 23) d.large_carries += count;
  }
  return d;
}

// task.high_digit_share: a share of training examples draw every digit from
// [f, 9], f uniform in 0..9, so that N x 3's largest column sums (230 or more,
// a carry of 23 or more), which uniform digits make in about 4e-5 of columns,
// are trained. Every product stays right (read_written_carries checks each
// column) and the evaluation sets are the ones uniform training is scored on.
TEST(Multiplication, HighDigitShareTrainsLargeColumnSumsAndLeavesTheEvaluationSetsAlone) {
  std::vector<std::string> options = written_carries_options(3);
  const auto uniform = find_task("multiplication").make(addition_config(options, "multiplication").task);
  options.push_back("task.high_digit_share=0.5");
  const auto high = find_task("multiplication").make(addition_config(options, "multiplication").task);
  const TrainingDraw u = n_by_3_training_draw(*uniform), h = n_by_3_training_draw(*high);
  // A digit's mean is 4.5 uniform, and (f + 9) / 2 averaged over f, 6.75, when
  // drawn high: 5.625 at half and half. Over 1,600 examples the mean's
  // standard error is about 0.05 (examples' own means vary by about 2).
  EXPECT_NEAR(u.mean_digit, 4.5, 0.3);
  EXPECT_NEAR(h.mean_digit, 5.625, 0.3);
  // About 11,000 columns: uniform digits expect under one of 230 or more; the
  // tenth of examples of floor 8 or 9 put one in nearly every middle column.
  EXPECT_LE(u.large_carries, 5) << u.columns << " columns";
  EXPECT_GE(h.large_carries, 100) << h.columns << " columns";
  for (const int64_t length : {2, 9}) {
    EXPECT_TRUE(torch::equal(uniform->fixed_set(length, 64, 1).tokens, high->fixed_set(length, 64, 1).tokens))
        << length << " digits: the evaluation sets draw uniform digits whatever the share";
  }
  EXPECT_TRUE(torch::equal(uniform->train_batch(3, 8, 0).positions, high->train_batch(3, 8, 0).positions))
      << "the ids' offsets draw from a stream of their own";
  const std::string error = error_of([] { addition_config({"task.high_digit_share=1.5"}, "multiplication"); });
  EXPECT_NE(error.find("task.high_digit_share"), std::string::npos) << error;
}

// On addition the same draw makes long carry chains: a sum whose every column
// but the last carries (a_i + b_i + carry >= 10 all along) is one of about ten
// 2-6-digit sums with uniform digits (0.45 * 0.55^(n-1)), and most when every
// digit is drawn from [f, 9] (always for f >= 5).
TEST(Addition, HighDigitShareTrainsLongCarryChainsAndEverySumIsRight) {
  const auto carrying_all_along = [](const Task& task) {
    int64_t chains = 0;
    for (int64_t step = 0; step < 200; ++step) {
      const auto batch = task.train_batch(step, 4, 0);
      for (int64_t r = 0; r < 4; ++r) {
        const Sum e = read_example(row_of(batch.tokens, r), batch.answer_start);
        EXPECT_TRUE(is_the_sum(e)) << "step " << step << " row " << r;
        int carry = 0;
        bool all_along = true;
        for (size_t i = 0; i < e.a.size(); ++i) {
          carry = (e.a[i] + e.b[i] + carry) / 10;
          all_along = all_along && carry == 1;
        }
        chains += all_along;
      }
    }
    return static_cast<double>(chains) / 800.0;
  };
  const double uniform = carrying_all_along(*find_task("addition").make(addition_config({}).task));
  const double high =
      carrying_all_along(*find_task("addition").make(addition_config({"task.high_digit_share=1"}).task));
  EXPECT_LT(uniform, 0.2);
  EXPECT_GT(high, 0.5);
}

// Wrong answers (eval.wrong_answers) and attention maps write an arithmetic
// example in words: the value they spell must be the product, and every token
// must read back as itself.
TEST(Multiplication, TokensAreWrittenAsDigitsBsDigitsAndCarriesThatSpellTheProductAndReadBack) {
  const auto task =
      find_task("multiplication").make(addition_config(written_carries_options(3), "multiplication").task);
  const auto set = task->fixed_set(5, 8, 3);
  for (int64_t r = 0; r < 8; ++r) {
    // a0 b0:x b1:y b2:z a1 ... * = r? c? r? c? ...
    const auto words = split_words(task->decode_text(row_of(set.tokens, r)));
    ASSERT_EQ(static_cast<int64_t>(words.size()), set.tokens.size(1));
    Sum e;
    std::vector<int> carries;
    size_t i = 0;
    for (; words[i] != "*"; i += 4) {
      ASSERT_EQ(words[i].size(), 1u) << words[i];
      e.a.push_back(words[i][0] - '0');
      for (int l = 0; l < 3; ++l) {
        const std::string prefix = "b" + std::to_string(l) + ":";
        ASSERT_EQ(words[i + 1 + l].rfind(prefix, 0), 0u) << words[i + 1 + l] << " is not b's digit " << l;
        if (e.a.size() == 1) e.b.push_back(std::stoi(words[i + 1 + l].substr(prefix.size())));
      }
    }
    ASSERT_EQ(words[i + 1], "=");
    for (i += 2; i < words.size(); i += 2) {
      ASSERT_EQ(words[i][0], 'r') << words[i];
      ASSERT_EQ(words[i + 1][0], 'c') << words[i + 1];
      e.s.push_back(std::stoi(words[i].substr(1)));
      carries.push_back(std::stoi(words[i + 1].substr(1)));
    }
    EXPECT_EQ(value_of(e.s), value_of(e.a) * value_of(e.b)) << task->decode_text(row_of(set.tokens, r));
    EXPECT_EQ(carries.back(), 0) << "nothing is carried out of the last column";
  }
  // Every data token has a word of its own, read back as itself.
  std::vector<int64_t> all(static_cast<size_t>(task->vocab_size()));
  std::iota(all.begin(), all.end(), 1);
  EXPECT_EQ(task->encode_text(task->decode_text(all)), all);
  const auto words = split_words(task->decode_text(all));
  EXPECT_EQ(std::set<std::string>(words.begin(), words.end()).size(), all.size());
  EXPECT_EQ(words.back(), "c26") << "N x 3's largest carry";
  const std::string error = error_of([&] { task->encode_text("3 * c27"); });
  EXPECT_NE(error.find("\"c27\""), std::string::npos) << error;
  EXPECT_NE(error.find("carries c0-c26"), std::string::npos) << error;
  EXPECT_EQ(task->decode_text({0, task->vocab_size() + 1, task->vocab_size() + 2}), "<0> = <80>");
}

TEST(Addition, TokensAreWrittenAsDigitsAndHintsThatSpellTheSum) {
  const auto task = find_task("addition").make(addition_config({"task.index_hints=12"}).task);
  const auto set = task->fixed_set(4, 8, 3);
  for (int64_t r = 0; r < 8; ++r) {
    // h0 a0 h1 a1 ... + h0 b0 ... = h0 s0 ...: each digit after its hint.
    const auto words = split_words(task->decode_text(row_of(set.tokens, r)));
    Sum e;
    std::vector<int>* number = &e.a;
    int64_t hint = 0;
    for (const std::string& w : words) {
      if (w == "+" || w == "=") {
        number = w == "+" ? &e.b : &e.s;
        hint = 0;
      } else if (w[0] == 'h') {
        EXPECT_EQ(w, "h" + std::to_string(hint++)) << "evaluation starts the hints at the first";
      } else {
        ASSERT_EQ(w.size(), 1u) << w;
        number->push_back(w[0] - '0');
      }
    }
    EXPECT_TRUE(is_the_sum(e)) << task->decode_text(row_of(set.tokens, r));
  }
  std::vector<int64_t> all(static_cast<size_t>(task->vocab_size()));
  std::iota(all.begin(), all.end(), 1);
  EXPECT_EQ(task->encode_text(task->decode_text(all)), all);
  EXPECT_NE(error_of([&] { task->encode_text("1 * 2"); }).find("digits 0-9 and +, hints h0-h11"), std::string::npos);
}

TEST(Multiplication, WhatOnlyAdditionDefinesIsRefusedNamingTheKey) {
  EXPECT_NE(config_error({"task.type=\"multiplication\"", "model.kind=\"decoder\"", "task.index_hints=8"})
                .find("index_hints"),
            std::string::npos);
}

TEST(Addition, IndependentOperandsDrawEachLengthApartAndEverySumIsRight) {
  const Config c = addition_config({"task.operands=\"independent\""});
  const auto task = find_task("addition").make(c.task);
  std::set<std::pair<size_t, size_t>> seen;
  for (int64_t step = 0; step < 200; ++step) {
    const auto batch = task->train_batch(step, 4, 0);
    for (int64_t r = 0; r < 4; ++r) {
      const Sum e = read_example(row_of(batch.tokens, r), batch.answer_start);
      ASSERT_GE(e.a.size(), 2u);
      ASSERT_LE(e.a.size(), 6u);
      ASSERT_GE(e.b.size(), 2u);
      ASSERT_LE(e.b.size(), 6u);
      ASSERT_TRUE(is_the_sum(e)) << "step " << step << " row " << r;
      seen.insert({e.a.size(), e.b.size()});
    }
  }
  EXPECT_EQ(seen.size(), 25u) << "every pair of lengths in [2, 6] is drawn";
}

TEST(Addition, EqualOperandsKeepTheirTokensAndPaddingWritesLeadingZeros) {
  const auto equal = find_task("addition").make(addition_config({}).task);
  const auto independent = find_task("addition").make(addition_config({"task.operands=\"independent\""}).task);
  const auto padded =
      find_task("addition").make(addition_config({"task.operands=\"independent\"", "task.pad_operands=true"}).task);
  // The evaluation sets of one length are the same whatever the training draws.
  EXPECT_TRUE(torch::equal(equal->fixed_set(5, 16, 3).tokens, independent->fixed_set(5, 16, 3).tokens));
  EXPECT_TRUE(torch::equal(equal->fixed_operand_set(5, 5, 16, 3).tokens, equal->fixed_set(5, 16, 3).tokens));
  // Padded: both operands written with max(na, nb) digits, the shorter's top ones zero; the same sums.
  const auto plain = independent->fixed_operand_set(2, 5, 16, 3), zeros = padded->fixed_operand_set(2, 5, 16, 3);
  for (int64_t r = 0; r < 16; ++r) {
    const Sum p = read_example(row_of(plain.tokens, r), plain.answer_start);
    const Sum z = read_example(row_of(zeros.tokens, r), zeros.answer_start);
    ASSERT_EQ(p.a.size(), 2u);
    ASSERT_EQ(z.a.size(), 5u);
    EXPECT_EQ(std::vector<int>(z.a.begin(), z.a.begin() + 2), p.a);
    EXPECT_EQ(std::vector<int>(z.a.begin() + 2, z.a.end()), std::vector<int>(3, 0));
    EXPECT_EQ(z.b, p.b);
    EXPECT_EQ(z.s, p.s);
    EXPECT_TRUE(is_the_sum(p));
  }
}

// a of 2 digits, b of 4: abacus counts inside each number, coupling gives the
// digits of one significance one id and the answer the ids of the digits it predicts.
TEST(Addition, UnequalOperandsGetTheirOwnIds) {
  const auto abacus = find_task("addition").make(addition_config({"task.positions=\"abacus\""}).task);
  const auto coupled = find_task("addition").make(addition_config({"task.positions=\"coupled\""}).task);
  // a0 a1 + b0 b1 b2 b3 SEP s0 s1 s2 s3 s4
  EXPECT_EQ(row_of(abacus->fixed_operand_set(2, 4, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(row_of(coupled->fixed_operand_set(2, 4, 2, 0).positions, 0),
            (std::vector<int64_t>{1, 2, 0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6}));
}

TEST(Addition, TheOperandGridIsCheckedWhenTheConfigIsRead) {
  const auto error = [](std::initializer_list<std::string> o) { return config_error(o); };
  EXPECT_NE(error({"eval.operand_grid=[4,8]"}).find("eval.operand_grid: task.type=ordering has no operands"),
            std::string::npos);
  const std::string decoder = "model.kind=\"decoder\"", addition = "task.type=\"addition\"";
  EXPECT_EQ(error({decoder, addition, "eval.operand_grid=[1,4,8]"}), "(no error)");
  EXPECT_NE(error({decoder, addition, "eval.operand_grid=[4,4]"}).find("eval.operand_grid[1]: 4 appears twice"),
            std::string::npos);
  EXPECT_NE(error({decoder, addition, "eval.operand_grid=[0]"}).find("eval.operand_grid[0]: 0 is out of range"),
            std::string::npos);
  EXPECT_NE(error({decoder, addition, "eval.operand_grid=[]"}).find("eval.operand_grid: expected a non-empty array"),
            std::string::npos);
  EXPECT_NE(error({decoder, addition, "task.operands=\"both\""}).find("task.operands"), std::string::npos);
  EXPECT_NE(error({decoder, addition, "model.positional.type=\"learned\"", "task.positions=\"abacus\"",
                   "model.positional.max_positions=20", "eval.lengths=[4]", "eval.operand_grid=[4,30]"})
                .find("gives length 30 ids up to 31"),
            std::string::npos)
      << "the grid's longest operand must fit the table";
  const Config c = addition_config({"eval.operand_grid=[3,5]"});
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(c))), config_to_json(c));
}

// A cell of the grid that the model cannot hold fails before the first step,
// not after the training (when results.json would not be written).
TEST(Addition, TheOperandGridsLargestCellIsCheckedBeforeTraining) {
  posenc::testing::Scratch s("operand_grid_fit");
  const auto r = posenc::testing::train_shipped(
      "addition.json", s.path("run"),
      "--set train.steps=5 --set model.positional.type=learned --set model.positional.max_positions=64"
      " --set eval.lengths=[4] --set eval.operand_grid=[4,30]");
  EXPECT_EQ(r.code, 2) << r.output;
  posenc::testing::expect_one_line_error(
      r.output, "eval.operand_grid: the cell of two 30-digit operands: an example of 93 tokens");
  EXPECT_FALSE(std::filesystem::exists(s.path("run/checkpoint.pt"))) << "nothing trained";
  // Multiplication's cell of two n-digit operands is wider than its per-length set of n x 2.
  const auto m = posenc::testing::train_shipped(
      "multiplication.json", s.path("mul"),
      "--set train.steps=5 --set task.positions=\"sequence\" --set model.positional.type=learned"
      " --set model.positional.input=none --set model.positional.max_positions=64 --set task.multiplier_digits=2"
      " --set eval.lengths=[20] --set eval.operand_grid=[2,20]");
  EXPECT_EQ(m.code, 2) << m.output;
  posenc::testing::expect_one_line_error(m.output, "the cell of two 20-digit operands: an example of 82 tokens");
}

// The grid's diagonal holds the per-length sets: its cells score what eval.lengths scores there.
TEST(Addition, TheOperandGridsDiagonalIsThePerLengthScore) {
  torch::manual_seed(0);
  Config c = addition_config({"eval.samples_per_length=40", "task.positions=\"coupled\""});
  c.task.max_length = 3;
  Transformer model(c.model, task_vocab_size(c.task));
  const auto task = find_task("addition").make(c.task);
  // Trained a little, so that some answers are right and the counts can differ.
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  for (int64_t step = 0; step < 1000; ++step) {
    const auto out = task_objective(model, task->train_batch(step, 32, 0));
    opt.zero_grad();
    out.loss.backward();
    opt.step();
  }
  const auto spec = evaluation_spec(c);
  const OperandGrid grid = evaluate_operand_grid(model, *task, spec, {2, 3}, torch::kCPU);
  ASSERT_EQ(grid.exact.size(), 2u);
  const auto lengths = evaluate_lengths(model, *task, spec, {2, 3}, torch::kCPU);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(grid.exact[i][i].n, 40);
    EXPECT_EQ(grid.exact[i][i].correct, lengths[i].total.correct);
    EXPECT_EQ(grid.exact[i][1 - i].n, 40);
  }
  const json j = operand_grid_to_json(grid);
  EXPECT_EQ(j["digits"], json({2, 3}));
  EXPECT_EQ(j["n"][0][1], 40);
}

// Index hints: hint, digit, hint, digit...; the digits of one significance carry
// one hint in a, b and the sum; training starts the hints at random places,
// evaluation at the first; the sums stay right.
TEST(Addition, IndexHintsMarkEachSignificanceAlikeInAllThreeNumbers) {
  constexpr int64_t kPlus = 11, kHints = 16, kFirstHint = kPlus + 1;
  const auto task =
      find_task("addition").make(addition_config({"task.operands=\"independent\"", "task.index_hints=16"}).task);
  EXPECT_EQ(task->vocab_size(), kPlus + kHints);
  const auto strip = [&](const std::vector<int64_t>& tokens, int64_t answer_start, std::vector<int64_t>& hints) {
    // (hint, digit) pairs, with '+' and SEP alone: the tokens without hints, the hints in order.
    std::vector<int64_t> plain;
    int64_t plain_answer_start = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(tokens.size()); ++i) {
      if (i == answer_start) plain_answer_start = static_cast<int64_t>(plain.size());
      if (tokens[i] >= kFirstHint && tokens[i] < kFirstHint + kHints) {
        hints.push_back(tokens[i] - kFirstHint);
        EXPECT_GE(tokens.at(i + 1), 1);
        EXPECT_LE(tokens.at(i + 1), 10) << "a hint is followed by a digit";
        continue;
      }
      plain.push_back(tokens[i]);
    }
    return std::make_pair(plain, plain_answer_start);
  };
  std::set<int64_t> starts;
  int64_t last_hint = 0;
  for (int64_t step = 0; step < 100; ++step) {
    const auto batch = task->train_batch(step, 4, 0);
    for (int64_t r = 0; r < 4; ++r) {
      std::vector<int64_t> hints;
      const auto [plain, answer_start] = strip(row_of(batch.tokens, r), batch.answer_start, hints);
      const Sum e = read_example(plain, answer_start);
      ASSERT_TRUE(is_the_sum(e)) << "step " << step << " row " << r;
      // a's hints, b's, the sum's: each counts up from one start.
      const int64_t start = hints.at(0);
      std::vector<int64_t> expected;
      for (size_t i = 0; i < e.a.size(); ++i) expected.push_back(start + static_cast<int64_t>(i));
      for (size_t i = 0; i < e.b.size(); ++i) expected.push_back(start + static_cast<int64_t>(i));
      for (size_t i = 0; i < e.s.size(); ++i) expected.push_back(start + static_cast<int64_t>(i));
      ASSERT_EQ(hints, expected);
      starts.insert(start);
      last_hint = std::max(last_hint, hints.back());
    }
  }
  EXPECT_GT(starts.size(), 5u) << "training draws the hints' start";
  EXPECT_EQ(last_hint, kHints - 1) << "the training draws reach the set's last hint";
  const auto eval = task->fixed_operand_set(3, 5, 4, 1);
  std::vector<int64_t> hints;
  strip(row_of(eval.tokens, 0), eval.answer_start, hints);
  EXPECT_EQ(hints, (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5}))
      << "evaluation starts at the first";
  EXPECT_EQ(eval.tokens.size(1), task->sequence_length(5) - 4) << "3 + 5 digits, not 5 + 5";

  const auto error = [](std::initializer_list<std::string> extra) {
    return error_of([&] { find_task("addition").make(addition_config(extra).task)->fixed_set(20, 2, 0); });
  };
  EXPECT_NE(error({"task.index_hints=16", "task.positions=\"coupled\""}).find("task.index_hints and task.positions"),
            std::string::npos);
  EXPECT_NE(error({"task.index_hints=4"}).find("task.index_hints=4 hints cannot mark the 7 digits"), std::string::npos);
  EXPECT_NE(error({"task.index_hints=16"}).find("the 21 digits of the sum of two 20-digit operands"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              config_with({"model.kind=\"decoder\"", "task.type=\"copy\"", "task.index_hints=8"});
            }).find("index_hints"),
            std::string::npos)
      << "a task without digits has no hints";
}

// task.answer_tokens=own changes the answer's tokens and nothing else: the
// same sums and products, prompts and ids, the answer's digits moved past the
// operator and the hints, and the vocabulary ten tokens larger.
TEST(Addition, OwnAnswerTokensKeepEverySumAndTellItsDigitsFromTheOperands) {
  constexpr int64_t kPlus = 11;
  for (const std::string task_name : {"addition", "multiplication"}) {
    for (const int64_t hints : {int64_t{0}, int64_t{16}}) {
      if (hints > 0 && task_name != "addition") continue;
      std::vector<std::string> options = {"task.operands=\"independent\""};
      options.push_back(hints > 0 ? "task.index_hints=" + std::to_string(hints) : "task.positions=\"coupled\"");
      const auto shared = find_task(task_name).make(addition_config(options, task_name).task);
      options.push_back("task.answer_tokens=\"own\"");
      const auto own = find_task(task_name).make(addition_config(options, task_name).task);
      const std::string what = task_name + " with " + std::to_string(hints) + " hints";
      EXPECT_EQ(own->vocab_size(), shared->vocab_size() + 10) << what;
      const int64_t first_answer_digit = kPlus + hints + 1;  // the answer's digit 0
      for (const auto& [s, o] :
           {std::make_pair(shared->train_batch(7, 8, 0), own->train_batch(7, 8, 0)),
            std::make_pair(shared->fixed_operand_set(3, 5, 8, 1), own->fixed_operand_set(3, 5, 8, 1))}) {
        ASSERT_EQ(s.answer_start, o.answer_start) << what;
        const int64_t a = s.answer_start;
        EXPECT_TRUE(torch::equal(s.tokens.narrow(1, 0, a - 1), o.tokens.narrow(1, 0, a - 1)))
            << what << ": the prompt before SEP";
        if (s.positions.defined()) {
          EXPECT_TRUE(torch::equal(s.positions, o.positions)) << what << ": the ids";
        }
        const auto answer_shared = s.tokens.narrow(1, a, s.tokens.size(1) - a);
        const auto answer_own = o.tokens.narrow(1, a, o.tokens.size(1) - a);
        // A digit d is d + 1 shared and first_answer_digit + d own; hints stay as they are.
        const auto is_digit = answer_shared.le(10);
        EXPECT_TRUE(torch::equal(answer_own.masked_select(is_digit),
                                 answer_shared.masked_select(is_digit) - 1 + first_answer_digit))
            << what;
        EXPECT_TRUE(torch::equal(answer_own.masked_select(is_digit.logical_not()),
                                 answer_shared.masked_select(is_digit.logical_not())))
            << what << ": the hints";
        EXPECT_GT(answer_own.masked_select(is_digit).min().item<int64_t>(), kPlus + hints) << what;
        EXPECT_LE(answer_own.max().item<int64_t>(), own->vocab_size()) << what << ": inside the vocabulary";
        EXPECT_LE(o.tokens.narrow(1, 0, a - 1).max().item<int64_t>(), kPlus + hints)
            << what << ": the operands keep their tokens";
      }
    }
  }
  EXPECT_NE(config_error({"task.type=\"addition\"", "model.kind=\"decoder\"", "task.answer_tokens=\"separate\""})
                .find("answer_tokens"),
            std::string::npos);
}

TEST(Addition, TheShipped20xConfigIsTheLocalGridsRowEvaluatedTo200Digits) {
  // configs/addition_20x.json trains what every run of the local grid trained
  // (docs/results.md holds its ten seeds), with evaluation lengths to 200 digits.
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/addition_20x.json", "configs/addition_5x_local_seeds_compare.json",
      "kerple-power-local-own-answer-projected-max-s0");
  EXPECT_EQ(shipped.eval.lengths.back(), 200);
}

TEST(Multiplication, TheShipped20xConfigIsTheBesideGridsLocalRowEvaluatedTo200Digits) {
  // configs/multiplication_20x.json trains what the local row of the
  // multiplier-beside grid trained (docs/results.md holds its three seeds),
  // with evaluation lengths to 200 digits.
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/multiplication_20x.json", "configs/multiplication_beside_compare.json",
      "kerple-power-local-own-answer-beside-projected-max-s0");
  EXPECT_EQ(shipped.eval.lengths.back(), 200);
}

TEST(Multiplication, TheShippedNBy2ConfigIsTheCarriesGridsRowEvaluatedTo200Digits) {
  // configs/multiplication_n_by_2.json trains the 20,000-step row of the N x 2
  // grid with b's digits told apart and the carries written (docs/results.md
  // holds its three seeds), with evaluation lengths to 200 digits.
  const Config shipped = posenc::testing::expect_shipped_config_trains_grid_row(
      "configs/multiplication_n_by_2.json", "configs/multiplication_n_by_2_carries_compare.json",
      "kerple-power-local-beside-per-digit-carries-20000-steps-projected-max-s0");
  EXPECT_EQ(shipped.task.options.get_string("carries"), "written");
  EXPECT_EQ(shipped.eval.lengths.back(), 200);
}

}  // namespace POSENC_TEST_UNIT

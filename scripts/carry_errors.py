#!/usr/bin/env python3
"""Where a multiplication model's wrong answers go wrong, column by column.

Reads the wrong answers that `posenc eval` keeps (`--set eval.wrong_answers=N`)
of a multiplication run with written carries (task.carries=written, the
format of configs/multiplication_n_by_2.json and its N x 3 grid) and says, over
all the files given:

- whether each first goes wrong at a product digit or at a carry;
- the column sum the model's own digit and carry spell there (10 x carry +
  digit) minus the right one: an error of reading or adding shows as its size;
- where the answers keep the model's likeliest tokens at the first wrong
  one (posenc keeps five), at a wrong product digit: whether the right digit
  was its second choice, how probable the written and the right digits were,
  and how much of the probability the digits of the right one's parity hold;
- how large the right column sums are where answers first go wrong, against
  the columns of random products of the same shape (a of --digits digits, b
  of the multiplier's digits, all digits uniform, as posenc draws them; a
  range A-B draws a's digits for each product as training does).

    scripts/carry_errors.py RUN/results_eval.json [MORE.json ...] [--digits 50 | --digits 2-10]
    scripts/carry_errors.py RUN/results_eval.json ... --sets UNTRAINED/results.json [--large 230]

With --sets, the results of a model that got every answer wrong and kept them
all (one training step of the same config with eval.wrong_answers set to the
samples per length): the evaluation sets themselves. The column sums are then
compared against the sets' own columns, every product holding a
column sum of --large or more is listed with the files that got it wrong,
and each range of column sums gets its error rate per column reached: of
the columns a model wrote with every token before them right, how many it
first got wrong there (only where each file keeps all its wrong answers:
eval.wrong_answers at least the samples per length).

A column's sum is the carry into it plus the products of the digits of a and
b whose significances add up to the column's; the product digit is its units,
the carry written after it the rest.
"""
import argparse
import collections
import json
import random
import statistics
import sys


def operands(prompt):
    """a's and b's digits, least-significant first, from a prompt in posenc's
    words: a's digits, each followed by b's digits written "b<l>:<d>", then "*"."""
    a, b = [], {}
    for word in prompt.split():
        if word == "*":
            break
        if word.startswith("b"):
            digit, value = word[1:].split(":")
            b[int(digit)] = int(value)
        else:
            a.append(int(word))
    if not a or not b:
        raise ValueError(f"not a prompt of a multiplier written beside each digit: {prompt[:80]!r}")
    return a, [b[digit] for digit in sorted(b)]


def column_sums(a, b):
    """Each column's sum: the carry into it plus its digit products."""
    sums, carry = [], 0
    for j in range(len(a) + len(b)):
        s = carry + sum(a[j - l] * b[l] for l in range(len(b)) if 0 <= j - l < len(a))
        sums.append(s)
        carry = s // 10
    return sums


def value(words, i, kind):
    """words[i] as a number if it is a product digit ("r<d>", kind "r") or a
    carry ("c<c>", kind "c"); None if it is not one, or is missing."""
    if i >= len(words) or words[i][:1] != kind or not words[i][1:].isdigit():
        return None
    return int(words[i][1:])


def first_wrong_column(answer):
    """(column, 'digit' or 'carry', the right column sum, the sum the model's
    digit and carry spell, or None where it wrote something else there)."""
    a, b = operands(answer["prompt"])
    sums = column_sums(a, b)
    first = answer["first_wrong_token"]
    reference, decoded = answer["reference"].split(), answer["answer"].split()
    column = first // 2
    if first % 2 == 0:  # the digit is wrong; the model's carry follows it
        digit, carry, kind = value(decoded, first, "r"), value(decoded, first + 1, "c"), "digit"
    else:  # the digit was right; the carry after it is wrong
        digit, carry, kind = value(reference, first - 1, "r"), value(decoded, first, "c"), "carry"
    if column >= len(sums):
        raise ValueError(f"first wrong token {first} is past the {len(sums)} columns of {answer['prompt'][:60]!r}")
    model = None if digit is None or carry is None else 10 * carry + digit
    return column, kind, sums[column], model


def digit_choices(answer):
    """At a wrong product digit with the model's choices kept: (the right
    digit, [(digit, probability)] of the product-digit choices, likeliest
    first, the right digit's probability); None otherwise."""
    first = answer["first_wrong_token"]
    if first % 2 or "first_wrong_choices" not in answer:
        return None
    right = value(answer["reference"].split(), first, "r")
    choices = [(value([word], 0, "r"), p) for word, p in answer["first_wrong_choices"]]
    return right, [(d, p) for d, p in choices if d is not None], answer["right_token_probability"]


def print_choices(choices):
    """What the model's kept choices say at its wrong product digits."""
    if not choices:
        return
    second = sum(len(c) > 1 and c[1][0] == right for right, c, _ in choices)
    listed = sum(any(d == right for d, _ in c) for right, c, _ in choices)
    same_parity = [sum(p for d, p in c if d % 2 == right % 2) / sum(p for _, p in c) for right, c, _ in choices if c]
    print(f"at {len(choices)} wrong product digits with the model's choices kept: the right digit its second "
          f"choice in {second}, among its kept likeliest in {listed}; median probability of the "
          f"digit written {statistics.median([c[0][1] for _, c, _ in choices if c]):.3f}, of the right one "
          f"{statistics.median([p for _, _, p in choices]):.3f}; digits of the right one's parity hold 0.99 or more of the "
          f"choices' probability in {sum(share >= 0.99 for share in same_parity)} of {len(same_parity)} "
          f"(median {statistics.median(same_parity):.3f})")


def digit_range(text):
    """--digits: "N" or "A-B" (1 <= A <= B) as (A, B)."""
    low, _, high = text.partition("-")
    try:
        low, high = int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N or A-B, digits of a")
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 1 <= A <= B")
    return low, high


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("results", nargs="+", help="results files of posenc eval with wrong_answers")
    parser.add_argument("--digits", type=digit_range, default=(50, 50),
                        help="a's digits in the random products compared against: N, or a range A-B")
    parser.add_argument("--samples", type=int, default=20000, help="random products compared against")
    parser.add_argument("--sets", help="results keeping every answer of the evaluation sets (see above)")
    parser.add_argument("--large", type=int, default=230, help="with --sets: list the products with a column sum this large")
    args = parser.parse_args(argv)

    kinds, differences, sums, choices = collections.Counter(), collections.Counter(), [], []
    multiplier_digits = None
    wrong_in = collections.defaultdict(dict)  # (length, example) -> {file that got it wrong: first wrong column}
    partial = []  # "FILE keeps K of its W wrong answers at length L"
    for path in args.results:
        try:
            with open(path) as f:
                results = json.load(f)
            for length in results.get("lengths", []):
                kept, wrong = len(length.get("wrong_answers", [])), length["n"] - length["correct"]
                if kept < wrong:
                    partial.append(f"{path} keeps {kept} of its {wrong} wrong answers at length {length['length']}")
                for answer in length.get("wrong_answers", []):
                    multiplier_digits = len(operands(answer["prompt"])[1])
                    column, kind, right, model = first_wrong_column(answer)
                    wrong_in[(length["length"], answer["example"])][path] = column
                    kinds[kind] += 1
                    sums.append(right)
                    differences[None if model is None else model - right] += 1
                    kept = digit_choices(answer)
                    if kept is not None:
                        choices.append(kept)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"{path}: {e}")
    if not sums:
        sys.exit("no wrong answers in these files: were they evaluated with --set eval.wrong_answers=N?")

    print(f"{len(sums)} wrong answers: first wrong at a product digit {kinds['digit']}, at a carry {kinds['carry']}")
    unspelled = differences.pop(None, 0)
    print("the model's column sum minus the right one (difference: answers): " +
          ", ".join(f"{d:+d}: {n}" for d, n in sorted(differences.items())) +
          (f"; no sum spelled (not a digit and a carry there): {unspelled}" if unspelled else ""))
    even = sum(n for d, n in differences.items() if d % 2 == 0)
    print(f"even differences: {even} of {sum(differences.values())}")
    print_choices(choices)

    if args.sets:
        try:
            baseline, described = set_columns(args.sets, wrong_in, len(args.results), args.large)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"{args.sets}: {e}")
    else:
        rng = random.Random(0)
        baseline = []
        for _ in range(args.samples):
            a = [rng.randrange(10) for _ in range(rng.randint(*args.digits))]
            b = [rng.randrange(10) for _ in range(multiplier_digits)]
            baseline.extend(column_sums(a, b))
        shape = "-".join(str(d) for d in sorted(set(args.digits)))
        described = f"{args.samples} random {shape} x {multiplier_digits}-digit products"
    print(f"right column sum where answers first go wrong, against the {len(baseline)} columns of {described}:")
    for threshold in (100, 150, 200, args.large):
        wrong = sum(s >= threshold for s in sums)
        share = sum(s >= threshold for s in baseline) / len(baseline)
        print(f"  sum >= {threshold}: {wrong} of {len(sums)} ({wrong / len(sums):.2f}); those columns {share:.3g}")
    if args.sets and partial:
        print("no error rates per column: they need every wrong answer kept, and " + "; ".join(partial))
    elif args.sets:
        print_error_rates(args.sets, wrong_in, args.results, args.large)


def sum_ranges(large):
    """The ranges of column sums error rates are given for: (low, high), high exclusive."""
    edges = sorted({0, 100, 150, 200, large, 10**9})
    return list(zip(edges, edges[1:]))


def print_error_rates(path, wrong_in, files, large):
    """Per range of column sums, over all `files`: the columns reached (every
    token before them right) and how many of them were the first wrong."""
    with open(path) as f:
        sets = json.load(f)
    ranges = sum_ranges(large)
    range_of = lambda s: next(r for r in ranges if r[0] <= s < r[1])
    reached, wrong = collections.Counter(), collections.Counter()
    for length in sets["lengths"]:
        for answer in length["wrong_answers"]:
            columns = column_sums(*operands(answer["prompt"]))
            first = wrong_in.get((length["length"], answer["example"]), {})
            for file in files:
                stop = first.get(file)
                for s in columns[: len(columns) if stop is None else stop + 1]:
                    reached[range_of(s)] += 1
                if stop is not None:
                    wrong[range_of(columns[stop])] += 1
    print(f"error rate per column reached (every token before it right), by the column's right sum, "
          f"over {len(files)} file(s):")
    for r in ranges:
        if reached[r]:
            shown = f"{r[0]}-{r[1] - 1}" if r[1] < 10**9 else f">= {r[0]}"
            print(f"  {shown}: {wrong[r]} of {reached[r]} ({wrong[r] / reached[r]:.2g})")


def set_columns(path, wrong_in, files, large):
    """The column sums of the evaluation sets that `path` holds whole,
    and their description; prints each product with a column sum of `large` or
    more and how many of the `files` got it wrong."""
    with open(path) as f:
        sets = json.load(f)
    sums, lengths = [], []
    for length in sets.get("lengths", []):
        answers = length.get("wrong_answers", [])
        if len(answers) != length["n"]:
            sys.exit(f"{path}: {len(answers)} of the {length['n']} answers at length {length['length']} kept; "
                     "--sets needs them all (a model that gets every answer wrong, eval.wrong_answers >= the samples)")
        lengths.append(str(length["length"]))
        for answer in answers:
            a, b = operands(answer["prompt"])
            columns = column_sums(a, b)
            sums.extend(columns)
            first_large = next((j for j, s in enumerate(columns) if s >= large), None)
            if first_large is not None:
                key = (length["length"], answer["example"])
                print(f"length {key[0]} example {key[1]}: column {first_large} sums to {columns[first_large]} "
                      f"(largest {max(columns)}); wrong in {len(wrong_in.get(key, {}))} of {files} files")
    return sums, f"the evaluation sets at {', '.join(lengths)} digits"


if __name__ == "__main__":
    main(sys.argv[1:])

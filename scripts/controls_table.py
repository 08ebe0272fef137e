#!/usr/bin/env python3
"""The controls grid's table: per row and scheme, accuracy at each length, the
example kinds at the longest length, and the false alarms on sorted sequences.

Reads the results.json of every finished run below RUNS_DIR (a compare's
runs/ folder, e.g. runs/extrapolation_controls_compare/runs), groups the seeds
of each variant, and prints a Markdown table (mean ± standard deviation over
seeds, the sample deviation as in posenc's summaries). --per-seed adds each
seed's accuracy at the longest length.

    scripts/controls_table.py runs/extrapolation_controls_compare/runs [--per-seed]
"""
import argparse
import json
import re
import statistics
import sys
from pathlib import Path


def mean_sd(values):
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f} ± {sd:.3f}"


def mean_sci(values):
    return f"{statistics.fmean(values):.1e}"


def load_runs(runs_dir):
    """{variant: [results of each seed, by seed]} for every finished run."""
    variants = {}
    for results_path in sorted(Path(runs_dir).glob("*/results.json")):
        name = results_path.parent.name
        match = re.fullmatch(r"(.+)-s(\d+)", name)
        if not match:
            continue
        with open(results_path) as f:
            results = json.load(f)
        variants.setdefault(match.group(1), []).append((int(match.group(2)), results))
    return {v: [r for _, r in sorted(runs, key=lambda sr: sr[0])] for v, runs in variants.items()}


def by_length(results):
    return {entry["length"]: entry for entry in results["lengths"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dir")
    parser.add_argument("--per-seed", action="store_true", help="each seed's accuracy at the longest length")
    args = parser.parse_args()
    variants = load_runs(args.runs_dir)
    if not variants:
        sys.exit(f"controls_table: no finished run (results.json) below {args.runs_dir}")

    lengths = sorted(by_length(next(iter(variants.values()))[0]))
    shortest, longest = lengths[0], lengths[-1]
    header = (["variant", "seeds", "in-dist"] + [f"acc {n}" for n in lengths] +
              [f"adjacent_swap {longest}", f"sorted {longest}", f"false alarms / position, {shortest}",
               f"… at {longest}", f"1 − (1 − p)^{longest}", f"flagged sorted sequences, {longest}"])
    if args.per_seed:
        header.append(f"acc {longest} per seed")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")

    for variant, runs in sorted(variants.items()):
        per_run = [by_length(r) for r in runs]
        if any(sorted(lens) != lengths for lens in per_run):
            sys.exit(f"controls_table: {variant} was evaluated at other lengths than {lengths}")
        row = [variant, str(len(runs)), mean_sd([r["val_accuracy"] for r in runs])]
        row += [mean_sd([lens[n]["accuracy"] for lens in per_run]) for n in lengths]
        row.append(mean_sd([lens[longest]["by_kind"]["adjacent_swap"]["accuracy"] for lens in per_run]))
        row.append(mean_sd([lens[longest]["by_kind"]["sorted"]["accuracy"] for lens in per_run]))
        alarms = [lens[shortest].get("false_alarms") for lens in per_run]
        alarms_long = [lens[longest].get("false_alarms") for lens in per_run]
        if all(alarms) and all(alarms_long):  # pooling over every position: max, mean, lse
            row.append(mean_sci([a["position_rate"] for a in alarms]))
            rate = statistics.fmean([a["position_rate"] for a in alarms_long])
            row.append(f"{rate:.1e}")
            # What the per-position rate p would flag if positions erred independently.
            row.append(f"{1 - (1 - rate) ** longest:.3f}")
            row.append(mean_sd([a["sequence_rate"] for a in alarms_long]))
        else:
            row += ["–"] * 4
        if args.per_seed:
            row.append(" / ".join(f"{lens[longest]['accuracy']:.3f}" for lens in per_run))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The controls grid's table: per row and scheme, accuracy at each length, the
example kinds at the longest length, and the false alarms on sorted sequences.

Reads the summary.json that `posenc compare` writes in its output directory
(e.g. runs/extrapolation_controls_compare): per variant, the mean and sample
standard deviation over seeds that posenc computed, printed as a Markdown table
(mean ± sd). --per-seed adds each seed's accuracy at the longest length, from
the results.json of the runs the summary names.

    scripts/controls_table.py runs/extrapolation_controls_compare [--per-seed]

(The comparison's runs/ folder may be given instead of the directory above it.)
"""
import argparse
import json
import sys
from pathlib import Path


def mean_sd(stat):
    return f"{stat['mean']:.3f} ± {stat['std']:.3f}"


def compare_dir(path):
    """The directory holding summary.json: PATH, or the one above a comparison's runs/."""
    path = Path(path)
    if not (path / "summary.json").is_file() and (path.parent / "summary.json").is_file():
        return path.parent
    return path


def by_length(lengths):
    return {entry["length"]: entry for entry in lengths}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("compare_dir")
    parser.add_argument("--per-seed", action="store_true", help="each seed's accuracy at the longest length")
    args = parser.parse_args()
    root = compare_dir(args.compare_dir)
    summary_path = root / "summary.json"
    if not summary_path.is_file():
        sys.exit(f"controls_table: no summary.json in {args.compare_dir} (posenc compare writes it)")
    variants = json.loads(summary_path.read_text())["variants"]
    if not variants:
        sys.exit(f"controls_table: {summary_path} holds no finished variant")

    lengths = sorted(by_length(variants[0]["lengths"]))
    shortest, longest = lengths[0], lengths[-1]
    header = (["variant", "seeds", "in-dist"] + [f"acc {n}" for n in lengths] +
              [f"adjacent_swap {longest}", f"sorted {longest}", f"false alarms / position, {shortest}",
               f"… at {longest}", f"1 − (1 − p)^{longest}", f"flagged sorted sequences, {longest}"])
    if args.per_seed:
        header.append(f"acc {longest} per seed")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")

    for v in sorted(variants, key=lambda v: v["variant"]):
        at = by_length(v["lengths"])
        if sorted(at) != lengths:
            sys.exit(f"controls_table: {v['variant']} was evaluated at other lengths than {lengths}")
        row = [v["variant"], str(len(v["runs"])), mean_sd(v["val_accuracy"])]
        row += [mean_sd(at[n]["accuracy"]) for n in lengths]
        row.append(mean_sd(at[longest]["by_kind"]["adjacent_swap"]))
        row.append(mean_sd(at[longest]["by_kind"]["sorted"]))
        alarms, alarms_long = at[shortest].get("false_alarms"), at[longest].get("false_alarms")
        if alarms and alarms_long:  # pooling over every position: max, mean, lse
            row.append(f"{alarms['position_rate']['mean']:.1e}")
            rate = alarms_long["position_rate"]["mean"]
            row.append(f"{rate:.1e}")
            # What the per-position rate p would flag if positions erred independently.
            row.append(f"{1 - (1 - rate) ** longest:.3f}")
            row.append(mean_sd(alarms_long["sequence_rate"]))
        else:
            row += ["–"] * 4
        if args.per_seed:
            seeds = [json.loads((root / "runs" / run / "results.json").read_text()) for run in v["runs"]]
            row.append(" / ".join(f"{by_length(r['lengths'])[longest]['accuracy']:.3f}" for r in seeds))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

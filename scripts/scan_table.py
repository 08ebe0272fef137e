#!/usr/bin/env python3
"""SCAN results as a Markdown table, from run directories posenc wrote.

    scripts/scan_table.py DIR [DIR ...]

Each DIR is a run directory (with results.json) or a directory holding run
directories (a comparison's runs/). Per run: the test exact match, pooled
over every evaluation length beyond the longest training length (the SCAN
test set, bucketed by action count), the in-distribution validation exact
match, steps, and seconds. Runs of one scheme, split and cutoff are averaged
over seeds (mean, and min-max where there are several).
"""
import json
import sys
from collections import defaultdict
from pathlib import Path


def results_files(paths):
    for p in map(Path, paths):
        if (p / "results.json").is_file():
            yield p / "results.json"
        else:
            yield from sorted(p.glob("**/results.json"))


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    groups = defaultdict(list)
    for path in results_files(argv[1:]):
        r = json.loads(path.read_text())
        task = r["config"]["task"]
        if task["type"] != "scan":
            continue
        beyond = [x for x in r["lengths"] if x["beyond_training"]]
        n = sum(x["n"] for x in beyond)
        test = sum(x["correct"] for x in beyond) / n if n else float("nan")
        split = task["split"] + (f" {task['cutoff']}" if task["split"] == "length" else "")
        if task["split"] == "simple":  # every length is in distribution: the test split is the evaluation set
            n = sum(x["n"] for x in r["lengths"])
            test = sum(x["correct"] for x in r["lengths"]) / n
        groups[(r["scheme"], split)].append((test, n, r["val_accuracy"], r["steps"], r["train_seconds"]))
    if not groups:
        print("no SCAN results.json under " + " ".join(argv[1:]), file=sys.stderr)
        return 1
    print("| scheme | split | test exact match | test examples | validation exact match | seeds | steps | minutes per run |")
    print("|---|---|---|---|---|---|---|---|")
    for (scheme, split), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        tests = [t for t, *_ in runs]
        mean = sum(tests) / len(tests)
        spread = f" ({min(tests):.3f}-{max(tests):.3f})" if len(tests) > 1 else ""
        val = sum(v for _, _, v, _, _ in runs) / len(runs)
        minutes = sum(s for *_, s in runs) / len(runs) / 60
        print(f"| {scheme} | {split} | {mean:.3f}{spread} | {runs[0][1]} | {val:.3f} | {len(runs)} | "
              f"{runs[0][3]} | {minutes:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

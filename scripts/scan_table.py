#!/usr/bin/env python3
"""SCAN results as Markdown tables, from run directories posenc wrote.

    scripts/scan_table.py [--per-length] DIR [DIR ...]

Each DIR is a run directory (with results.json) or a directory holding run
directories (a comparison's runs/). Per run: the test exact match, pooled
over every evaluation length beyond the longest training length (the SCAN
test set, bucketed by action count), the in-distribution validation exact
match, steps, and minutes. Runs that differ only in their seed are averaged
(mean, and min-max where there are several). The "recipe" column names the
training settings that differ from configs/scan.json (dropout, gradient
clipping, weight decay, the learning-rate schedule, scaled token embeddings),
so that runs made to find out what matters stay apart.

Runs evaluated with eval.oracle_length (at training's end, or later by
`posenc eval CKPT --set eval.oracle_length=true`, whose results_eval.json is
read where it exists) add "length given": exact match when the end token is
held back until the reference's length, which separates answers that end too
early from answers whose actions are wrong.

--per-length adds a second table: exact match at each evaluation length (and
with the length given, where measured).
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

# configs/scan.json's training settings; a run that differs says so in its recipe.
BASE = {"dropout": 0.0, "grad_clip": 1.0, "weight_decay": 0.01, "warmup_steps": 200, "min_lr_ratio": 0.1}


def results_files(paths):
    for p in map(Path, paths):
        if (p / "results.json").is_file():
            yield p / "results.json"
        else:
            yield from sorted(p.glob("**/results.json"))


def given_length(run_dir, beyond_lengths):
    """{length: (correct, n)} with the length given, from results.json or results_eval.json."""
    out = {}
    for name in ("results.json", "results_eval.json"):
        path = run_dir / name
        if not path.is_file():
            continue
        for x in json.loads(path.read_text()).get("lengths", []):
            if "oracle_length" in x and x["length"] in beyond_lengths:
                out[x["length"]] = (x["oracle_length"]["correct"], x["n"])
    return out


def recipe(config):
    model, train = config["model"], config["train"]
    parts = []
    if model["dropout"] != BASE["dropout"]:
        parts.append(f"dropout {model['dropout']:g}")
    if train["grad_clip"] != BASE["grad_clip"]:
        parts.append(f"clip {train['grad_clip']:g}")
    if train["weight_decay"] != BASE["weight_decay"]:
        parts.append(f"weight decay {train['weight_decay']:g}")
    if train["warmup_steps"] == 0 and train["min_lr_ratio"] == 1.0:
        parts.append("constant lr")
    elif (train["warmup_steps"], train["min_lr_ratio"]) != (BASE["warmup_steps"], BASE["min_lr_ratio"]):
        parts.append(f"warm-up {train['warmup_steps']}, decay to {train['min_lr_ratio']:g}")
    if model["positional"].get("scale_tokens"):
        parts.append("tokens x sqrt(d_model)")
    return ", ".join(parts) or "scan.json"


def main(argv):
    args = [a for a in argv[1:] if a != "--per-length"]
    per_length = len(args) != len(argv) - 1
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    groups = defaultdict(list)
    for path in results_files(args):
        r = json.loads(path.read_text())
        task = r["config"]["task"]
        if task["type"] != "scan":
            continue
        beyond = [x for x in r["lengths"] if x["beyond_training"]]
        split = task["split"] + (f" {task['cutoff']}" if task["split"] == "length" else "")
        if task["split"] == "simple":  # every length is in distribution: the test split is the evaluation set
            beyond = r["lengths"]
        n = sum(x["n"] for x in beyond)
        test = sum(x["correct"] for x in beyond) / n if n else float("nan")
        by_length = {x["length"]: x["accuracy"] for x in beyond}
        oracle = given_length(path.parent, set(by_length))
        oracle_test = (sum(c for c, _ in oracle.values()) / sum(m for _, m in oracle.values())
                       if oracle and set(oracle) == set(by_length) else None)
        oracle_by_length = {l: c / m for l, (c, m) in oracle.items()}
        key = (r["scheme"], split, recipe(r["config"]), r["steps"])
        groups[key].append((test, n, r["val_accuracy"], r["train_seconds"], by_length, oracle_test, oracle_by_length))
    if not groups:
        print("no SCAN results.json under " + " ".join(args), file=sys.stderr)
        return 1
    order = sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2], kv[0][3]))
    def summary(values):
        mean = sum(values) / len(values)
        return f"{mean:.3f}" + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else "")

    print("| scheme | split | recipe | steps | test exact match | length given | test examples | "
          "validation exact match | seeds | minutes per run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (scheme, split, how, steps), runs in order:
        oracles = [run[5] for run in runs if run[5] is not None]
        given = "-"
        if oracles:
            given = summary(oracles) + (f" ({len(oracles)} of {len(runs)} seeds)" if len(oracles) < len(runs) else "")
        val = sum(run[2] for run in runs) / len(runs)
        minutes = sum(run[3] for run in runs) / len(runs) / 60
        print(f"| {scheme} | {split} | {how} | {steps} | {summary([run[0] for run in runs])} | "
              f"{given} | {runs[0][1]} | {val:.3f} | {len(runs)} | {minutes:.1f} |")
    if per_length:
        lengths = sorted({l for _, runs in order for run in runs for l in run[4]})
        print()
        print("| scheme | split | recipe | steps | " + " | ".join(map(str, lengths)) + " |")
        print("|---|---|---|---|" + "---|" * len(lengths))
        for (scheme, split, how, steps), runs in order:
            cells = []
            for l in lengths:
                values = [run[4][l] for run in runs if l in run[4]]
                given = [run[6][l] for run in runs if l in run[6]]
                cell = f"{sum(values) / len(values):.3f}" if values else ""
                if given:
                    cell += f" ({sum(given) / len(given):.3f})"
                cells.append(cell)
            print(f"| {scheme} | {split} | {how} | {steps} | " + " | ".join(cells) + " |")
        if any(run[6] for _, runs in order for run in runs):
            print()
            print("(In brackets: exact match with the length given.)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

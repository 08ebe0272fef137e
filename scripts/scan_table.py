#!/usr/bin/python3
"""SCAN results as Markdown tables (and a figure), from run directories posenc wrote.

    scripts/scan_table.py [--per-length] [--figure PNG] [--only SCHEME,...] DIR [DIR ...]

Each DIR is a run directory (with results.json) or a directory holding run
directories (a comparison's runs/). Per run: the test exact match, pooled
over every evaluation length beyond the longest training length (the SCAN
test set, bucketed by action count), the in-distribution validation exact
match, steps, and minutes. Runs that differ only in their seed are averaged
(mean, and min-max where there are several). The "recipe" column names the
training settings that differ from those of a run of configs/scan.json
(dropout, gradient clipping, weight decay, the learning-rate schedule, scaled
token embeddings), so that runs made to find out what matters stay apart:
the config's own values, and for the keys it leaves out posenc's defaults
(`posenc list --json`; --posenc names the binary, --base another config).

Runs evaluated with eval.oracle_length (at training's end, or later by
`posenc eval CKPT --set eval.oracle_length=true`, whose results_eval.json is
read where it exists) add "length given": exact match when the end token is
held back until the reference's length, which separates answers that end too
early from answers whose actions are wrong.

--per-length adds a second table: exact match at each evaluation length (and
with the length given, where measured). --figure draws exact match against
length per group, solid, and with the length given, dashed; --only keeps the
named schemes in the figure.
"""
import argparse
import json
import subprocess
import sys
from collections import defaultdict, namedtuple
from pathlib import Path

# The training settings a recipe compares, as (config block, key).
WATCHED = [("model", "dropout"), ("train", "grad_clip"), ("train", "weight_decay"), ("train", "warmup_steps"),
           ("train", "min_lr_ratio")]

# One run: pooled test exact match and its example count, validation exact match,
# training seconds, exact match per test length, and the same with the length given
# (pooled: None where not measured at every test length).
Run = namedtuple("Run", "test n val seconds by_length given given_by_length")


def results_files(paths):
    for p in map(Path, paths):
        if (p / "results.json").is_file():
            yield p / "results.json"
        else:
            yield from sorted(p.glob("**/results.json"))


def given_length(results, run_dir, lengths):
    """{length: (correct, n)} with the length given, from the run's results (parsed) or its results_eval.json."""
    later = run_dir / "results_eval.json"
    out = {}
    for lengths_of in (results["lengths"], json.loads(later.read_text())["lengths"] if later.is_file() else []):
        for x in lengths_of:
            if "oracle_length" in x and x["length"] in lengths:
                out[x["length"]] = (x["oracle_length"]["correct"], x["n"])
    return out


def base_settings(posenc, base_config):
    """The WATCHED settings of a run of base_config: its values, else posenc's defaults."""
    try:
        listed = subprocess.run([posenc, "list", "--json"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"scan_table: cannot read the config defaults from `{posenc} list --json` ({e}); "
                 "build posenc or name it with --posenc")
    defaults = {(b["block"], k["name"]): k.get("default") for b in json.loads(listed)["config"] for k in b["keys"]}
    written = json.loads(Path(base_config).read_text())
    return {key: written.get(key[0], {}).get(key[1], defaults[key]) for key in WATCHED}


def recipe(config, base, base_name):
    model, train = config["model"], config["train"]
    parts = []
    if model["dropout"] != base[("model", "dropout")]:
        parts.append(f"dropout {model['dropout']:g}")
    if train["grad_clip"] != base[("train", "grad_clip")]:
        parts.append(f"clip {train['grad_clip']:g}")
    if train["weight_decay"] != base[("train", "weight_decay")]:
        parts.append(f"weight decay {train['weight_decay']:g}")
    if train["warmup_steps"] == 0 and train["min_lr_ratio"] == 1.0:
        parts.append("constant lr")
    elif (train["warmup_steps"], train["min_lr_ratio"]) != (base[("train", "warmup_steps")],
                                                           base[("train", "min_lr_ratio")]):
        parts.append(f"warm-up {train['warmup_steps']}, decay to {train['min_lr_ratio']:g}")
    if model["positional"].get("scale_tokens"):
        parts.append("tokens x sqrt(d_model)")
    return ", ".join(parts) or base_name


def score(length):
    """A length's exact match: under "exact_match", or "accuracy" in results written before each metric had its key."""
    return length["exact_match"] if "exact_match" in length else length["accuracy"]


def load_groups(paths, base, base_name):
    """{(scheme, split, recipe, steps): [Run, ...]} over the SCAN runs under paths."""
    groups = defaultdict(list)
    for path in results_files(paths):
        r = json.loads(path.read_text())
        task = r["config"]["task"]
        if task["type"] != "scan":
            continue
        split = task["split"] + (f" {task['cutoff']}" if task["split"] == "length" else "")
        # On the simple split every length is in distribution: the test split is the evaluation set.
        tested = r["lengths"] if task["split"] == "simple" else [x for x in r["lengths"] if x["beyond_training"]]
        n = sum(x["n"] for x in tested)
        by_length = {x["length"]: score(x) for x in tested}
        given = given_length(r, path.parent, set(by_length))
        pooled_given = (sum(c for c, _ in given.values()) / sum(m for _, m in given.values())
                        if given and set(given) == set(by_length) else None)
        groups[(r["scheme"], split, recipe(r["config"], base, base_name), r["steps"])].append(
            Run(sum(x["correct"] for x in tested) / n if n else float("nan"), n, r["val_accuracy"],
                r["train_seconds"], by_length, pooled_given, {l: c / m for l, (c, m) in given.items()}))
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2], kv[0][3])))


def mean(values):
    return sum(values) / len(values)


def summary(values):
    return f"{mean(values):.3f}" + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else "")


def print_tables(groups, per_length):
    print("| scheme | split | recipe | steps | test exact match | length given | test examples | "
          "validation exact match | seeds | minutes per run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (scheme, split, how, steps), runs in groups.items():
        givens = [run.given for run in runs if run.given is not None]
        given = "-"
        if givens:
            given = summary(givens) + (f" ({len(givens)} of {len(runs)} seeds)" if len(givens) < len(runs) else "")
        print(f"| {scheme} | {split} | {how} | {steps} | {summary([run.test for run in runs])} | {given} | "
              f"{runs[0].n} | {mean([run.val for run in runs]):.3f} | {len(runs)} | "
              f"{mean([run.seconds for run in runs]) / 60:.1f} |")
    if not per_length:
        return
    lengths = sorted({l for runs in groups.values() for run in runs for l in run.by_length})
    print()
    print("| scheme | split | recipe | steps | " + " | ".join(map(str, lengths)) + " |")
    print("|---|---|---|---|" + "---|" * len(lengths))
    for (scheme, split, how, steps), runs in groups.items():
        cells = []
        for l in lengths:
            plain = [run.by_length[l] for run in runs if l in run.by_length]
            given = [run.given_by_length[l] for run in runs if l in run.given_by_length]
            cells.append((f"{mean(plain):.3f}" if plain else "") + (f" ({mean(given):.3f})" if given else ""))
        print(f"| {scheme} | {split} | {how} | {steps} | " + " | ".join(cells) + " |")
    if any(run.given_by_length for runs in groups.values() for run in runs):
        print()
        print("(In brackets: exact match with the length given.)")


def draw(groups, path, only, base_name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = sorted({key[1] for key in groups})
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 4.2), squeeze=False)
    for ax, split in zip(axes[0], splits):
        for (scheme, s, how, steps), runs in groups.items():
            if s != split or (only and scheme not in only):
                continue
            label = f"{scheme}" + ("" if how == base_name else f", {how}") + f", {steps} steps"
            lengths = sorted({l for run in runs for l in run.by_length})
            plain = [mean([run.by_length[l] for run in runs if l in run.by_length]) for l in lengths]
            (line,) = ax.plot(lengths, plain, marker="o", label=label)
            given_lengths = [l for l in lengths if any(l in run.given_by_length for run in runs)]
            if given_lengths:
                given = [mean([run.given_by_length[l] for run in runs if l in run.given_by_length])
                         for l in given_lengths]
                ax.plot(given_lengths, given, marker="x", linestyle="--", color=line.get_color())
        ax.set_title("SCAN, " + split.replace("length ", "length split, cutoff ") + " (dashed: length given)")
        ax.set_xlabel("actions in the command's answer")
        ax.set_ylabel("exact match (mean over seeds)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"figure: {path}", file=sys.stderr)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--per-length", action="store_true")
    parser.add_argument("--figure")
    parser.add_argument("--only", default="", help="comma-separated schemes kept in the figure")
    parser.add_argument("--base", default="configs/scan.json", help="the config whose settings a recipe omits")
    parser.add_argument("--posenc", default="build/posenc", help="the posenc binary that lists the defaults")
    args = parser.parse_args(argv[1:])
    base_name = Path(args.base).name
    groups = load_groups(args.dirs, base_settings(args.posenc, args.base), base_name)
    if not groups:
        print("no SCAN results.json under " + " ".join(args.dirs), file=sys.stderr)
        return 1
    print_tables(groups, args.per_length)
    if args.figure:
        draw(groups, args.figure, set(filter(None, args.only.split(","))), base_name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

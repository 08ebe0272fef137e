#!/usr/bin/python3
"""The score of single runs against the evaluation length, in one figure.

    build/posenc train configs/ordering.json --out runs/rope
    build/posenc train configs/ordering.json --set model.positional.type=alibi --out runs/alibi
    build/posenc eval runs/alibi/checkpoint.pt --lengths 8,16,32,64,128,256
    /usr/bin/python3 scripts/plot_runs.py runs/rope runs/alibi/results_eval.json --out lengths.png

Each argument is a run directory (its results.json, as `posenc train` wrote
it) or a results file (`results.json`, or `results_eval.json` of `posenc
eval`). One line per file: the task's metric (accuracy, exact match,
perplexity) at each evaluated length, with its 95% interval where the file has
one; the training lengths shaded, a log2 length axis. A comparison grid draws
the same over its seeds: scripts/plot_compare.py.

--out: the PNG to write (default: METRIC_vs_length.png here); --labels: the
legend's names, comma-separated, one per file (default: the run directory's
name and the scheme). Files given one label are pooled into one line (seeds
of one setting, say): at each length their right answers over their examples,
with the Wilson interval of the pooled counts, or for perplexity exp of the
mean log-likelihood over all their predicted tokens (the token-weighted
geometric mean of their perplexities), each file a faint line beside it; the
pooled scores are printed too. A perplexity gets no band: the interval a
language model's results hold is that of its token accuracy. Exit status 2,
with the reason, for a missing or foreign file, files of different metrics,
or a pool of files without counts.

Needs matplotlib and numpy (Debian: python3-matplotlib python3-numpy).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_compare  # noqa: E402  (the figure helpers are the comparison report's; it selects the Agg backend)
import matplotlib.pyplot as plt  # noqa: E402

METRIC_LABEL = plot_compare.METRIC_LABEL


def read_results(arg):
    """(path, results) of a run directory or a results file; ValueError saying what is wrong."""
    path = os.path.join(arg, "results.json") if os.path.isdir(arg) else arg
    try:
        d = plot_compare.load_json(path)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(d, dict) or "metric" not in d or not isinstance(d.get("lengths"), list):
        raise ValueError(f"{path}: not a results file of `posenc train` or `posenc eval` (no \"metric\" and "
                         f"\"lengths\")")
    for row in d["lengths"]:
        if not isinstance(row, dict) or "length" not in row or d["metric"] not in row:
            raise ValueError(f"{path}: a row of \"lengths\" has no \"length\" or \"{d['metric']}\"")
    return path, d


def number(v):
    """A score as results.json holds it; null (outputs that were all NaN or inf measure nothing) as NaN,
    which leaves a gap in the line."""
    return float("nan") if v is None else float(v)


def wilson(k, n, z=1.96):
    """The 95% Wilson score interval of k successes in n trials."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return max(0.0, centre - half), min(1.0, centre + half)


def pooled_rows(members, metric):
    """The rows of files pooled under one label, per length they all hold: the summed right answers over the
    summed examples, or for perplexity exp of the mean log-likelihood per predicted token over every file's
    tokens (the token-weighted geometric mean of their perplexities); ValueError where a file cannot be pooled."""
    counts = ("tokens",) if metric == "perplexity" else ("correct", "n")
    for path, d in members:
        for r in d["lengths"]:
            if metric == "perplexity" and r.get(metric) is None:
                raise ValueError(f"{path}: length {r['length']} has no perplexity to pool (outputs not finite)")
            if not all(isinstance(r.get(c), int) for c in counts) or r[counts[-1]] <= 0:
                what = "token counts" if metric == "perplexity" else "example counts"
                names = ", ".join(f'"{c}"' for c in counts)
                raise ValueError(f"{path}: length {r['length']} has no {what} ({names}) to pool")
    lengths = sorted(set.intersection(*({r["length"] for r in d["lengths"]} for _, d in members)))
    rows = []
    for length in lengths:
        at = [r for _, d in members for r in d["lengths"] if r["length"] == length]
        if metric == "perplexity":
            tokens = sum(r["tokens"] for r in at)
            mean_log = sum(r["tokens"] * math.log(r[metric]) for r in at) / tokens
            rows.append({"length": length, metric: math.exp(mean_log), "tokens": tokens})
            continue
        k, n = sum(r["correct"] for r in at), sum(r["n"] for r in at)
        rows.append({"length": length, metric: k / n, "ci95": list(wilson(k, n)), "correct": k, "n": n})
    return rows


def pooled_text(rows, metric):
    """One pooled row as the script prints it."""
    if metric == "perplexity":
        return ", ".join(f"{r['length']}: {r[metric]:.3f} ({r['tokens']} tokens)" for r in rows)
    return ", ".join(f"{r['length']}: {r[metric]:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] ({r['correct']}/{r['n']})"
                     for r in rows)


def default_label(path, d):
    """The run directory's name and the scheme; the file's name too where it is not results.json."""
    run = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = os.path.basename(path)
    return f"{run} ({d.get('scheme', '?')}" + ("" if name == "results.json" else f", {name}") + ")"


def main():
    parser = argparse.ArgumentParser(description="The score of single runs against the evaluation length.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR_OR_RESULTS_JSON")
    parser.add_argument("--out", metavar="PNG", help="the figure to write (default: METRIC_vs_length.png here)")
    parser.add_argument("--labels", help="legend names, comma-separated, one per file")
    args = parser.parse_args()
    try:
        results = [read_results(a) for a in args.runs]
        metrics = sorted({d["metric"] for _, d in results})
        if len(metrics) > 1:
            raise ValueError("the files hold different metrics (" + ", ".join(metrics) + "): draw each apart")
        labels = args.labels.split(",") if args.labels is not None else [default_label(p, d) for p, d in results]
        if len(labels) != len(results):
            raise ValueError(f"--labels: {len(labels)} names for {len(results)} files")
    except ValueError as e:
        print(f"plot_runs.py: {e}", file=sys.stderr)
        return 2
    metric = metrics[0]
    out = args.out if args.out is not None else f"{metric}_vs_length.png"
    # One line per label, in the order labels first appear; a label of several files pools them.
    groups = {}
    for result, label in zip(results, labels):
        groups.setdefault(label, []).append(result)
    try:
        pooled = {label: pooled_rows(members, metric) for label, members in groups.items() if len(members) > 1}
    except ValueError as e:
        print(f"plot_runs.py: {e}", file=sys.stderr)
        return 2

    fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    trained = set()
    banded = False
    for label, members in groups.items():
        for _, d in members:
            if d.get("train_lengths"):
                trained.add(tuple(d["train_lengths"]))
        rows = pooled[label] if label in pooled else sorted(members[0][1]["lengths"], key=lambda r: r["length"])
        x = [r["length"] for r in rows]
        y = [number(r[metric]) for r in rows]
        unmeasured = [str(r["length"]) for r in rows if r[metric] is None]
        if unmeasured:
            label += " (no score at " + ", ".join(unmeasured) + ": outputs not finite)"
        shown = label if label not in pooled else f"{label} (pooled over {len(members)} files)"
        line, = ax.plot(x, y, marker="o", lw=2.0 if label in pooled else 1.5, label=shown)
        # A row's ci95 is the interval of its right answers (token accuracy beside a perplexity): no band there.
        if metric != "perplexity" and all(isinstance(r.get("ci95"), list) and len(r["ci95"]) == 2 for r in rows):
            banded = True
            ax.fill_between(x, [number(r["ci95"][0]) for r in rows], [number(r["ci95"][1]) for r in rows],
                            color=line.get_color(), alpha=0.15, lw=0)
        if label in pooled:
            for _, d in members:  # each pooled file, faint
                own = sorted(d["lengths"], key=lambda r: r["length"])
                ax.plot([r["length"] for r in own], [number(r[metric]) for r in own], color=line.get_color(),
                        lw=0.8, alpha=0.35)
            print(f"{label} ({len(members)} files): " + pooled_text(rows, metric))
    for lo, hi in sorted(trained):
        ax.axvspan(lo, hi, color="0.88", zorder=0,
                   label="training lengths" if len(trained) == 1 else f"training lengths {lo}-{hi}")
    ax.set_xscale("log", base=2)
    lengths = sorted({r["length"] for _, d in results for r in d["lengths"]})
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("evaluation length")
    ax.set_ylabel(METRIC_LABEL.get(metric, metric))
    if metric != "perplexity":
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(f"{METRIC_LABEL.get(metric, metric)} against length" + (" (band: 95% interval)" if banded else ""),
                 fontsize=10)
    try:
        plot_compare.save(fig, out)
    except OSError as e:
        print(f"plot_runs.py: --out {out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"plot_runs.py: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

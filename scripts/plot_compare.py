#!/usr/bin/python3
"""Figures of a `posenc compare` output directory.

    /usr/bin/python3 scripts/plot_compare.py runs/ordering_compare

Reads summary.json, runs/<id>/metrics.jsonl, inspect/<variant>.json and
attention/<variant>.json (all written by `posenc compare`) and writes PNGs to
OUT/figures/:

  accuracy_vs_length.png   accuracy per evaluation length, one panel per
                           (qkv, pooling); band = +-std over seeds, or the 95%
                           Wilson interval with one seed; training range shaded
  training_curves.png      training loss and validation accuracy per step
  scheme_<variant>.png     the trained scheme (scheme_<variant>.input.png: its
                           model.positional.input scheme, where it has one):
                           for an added encoding, three panels (heatmap,
                           position cosine similarity,
                           selected dimensions as waves); for a rotation, the
                           same for a rotated all-ones vector; for a bias, each
                           head's bias matrix and its profile against j - i
                           (ALiBi: slopes per head on a log2 axis); for score
                           terms or reweighting, the same matrices for an
                           all-ones query and key, or scores of 1
  attention_<variant>.png  attention of every block and head on one sorted example
  operand_grid.png         addition with eval.operand_grid (in results.json, or
                           results_eval.json of `posenc eval --set
                           eval.operand_grid=[...]`): the best run's exact
                           match for every (digits of a, digits of b) pair

Needs matplotlib and numpy (Debian: python3-matplotlib python3-numpy).
"""
import errno
import json
import math
import os
import sys


def die_with_parent():
    """Started by `posenc compare` (which sets POSENC_PARENT_PID), end with SIGTERM when it is gone,
    even killed by SIGKILL, which it could not pass on: the figures would else be drawn into a
    directory it no longer holds. Linux only (prctl); elsewhere the script runs to its end."""
    parent = os.environ.get("POSENC_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # it may have gone before the prctl
        sys.exit(f"plot_compare.py: the posenc compare that started it (pid {parent}) is gone")


die_with_parent()

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DPI = 110


def load_json(path):
    """A JSON file. A path that is not a regular file (a directory, /dev/zero, a FIFO) is an OSError
    saying so, raised before a byte is read: reading /dev/zero would not end."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise OSError(errno.EINVAL, "not a regular file", path)
    with open(path) as f:
        return json.load(f)


def save(fig, path):
    """Atomic: a half-written PNG never replaces a good one."""
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)


def scheme_colors(variants):
    """One colour per grid scheme name, the same in every figure."""
    names = []
    for v in variants:
        if v["scheme"] not in names:
            names.append(v["scheme"])
    if len(names) <= 10:
        palette = [plt.get_cmap("tab10")(i) for i in range(10)]
    else:  # tab20's strong colours first, then their light partners
        tab20 = plt.get_cmap("tab20")
        palette = [tab20(i) for i in range(0, 20, 2)] + [tab20(i) for i in range(1, 20, 2)]
    return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def panel_key(v):
    """One panel per (task, qkv, pooling); the pooling means nothing to a decoder task.
    The task is the grid's task entry where it names one (SCAN at two cutoffs: two panels)."""
    metric = v.get("metric", "accuracy")
    return (v.get("entry", v.get("task", "ordering")), metric, v["qkv"], v["pooling"] if metric == "accuracy" else "-")


def name_entries(summary):
    """Marks each variant with the grid's task entry its name starts with, if any."""
    for v in summary["variants"]:
        for entry in summary.get("tasks", []):
            if v["variant"].startswith(entry + "-"):
                v["entry"] = entry


def training_lengths(root, v, default):
    """task.min_length and max_length of a variant's first run (from OUT/configs/), else `default`."""
    path = os.path.join(root, "configs", v["runs"][0] + ".json") if v.get("runs") else ""
    if path and os.path.exists(path):
        task = load_json(path).get("task", {})
        if "min_length" in task and "max_length" in task:
            return task["min_length"], task["max_length"]
    return default


def panel_keys_of(v, with_bleu=True):
    """The panels a variant is drawn in: its metric's, and a BLEU panel beside it for a BLEU task."""
    k = panel_key(v)
    return [k, (k[0], "bleu", k[2], k[3])] if with_bleu and "bleu" in v else [k]


def panels(variants, with_bleu=True):
    """Panel keys in first-seen order."""
    keys = []
    for v in variants:
        for k in panel_keys_of(v, with_bleu):
            if k not in keys:
                keys.append(k)
    return keys


METRIC_LABEL = {"accuracy": "accuracy", "exact_match": "exact match (greedy decoding)", "perplexity": "perplexity",
                "bleu": "corpus BLEU (greedy decoding)"}


def plot_accuracy(summary, out):
    variants = summary["variants"]
    proto = summary["protocol"]
    root = os.path.dirname(os.path.abspath(out))
    colors = scheme_colors(variants)
    keys = panels(variants)
    cols = min(2, len(keys))  # two panels a row: four in a row would be too wide to read
    rows = (len(keys) + cols - 1) // cols
    metrics = {k[1] for k in keys}
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 5.4 * rows), squeeze=False,
                             sharey=len(metrics) == 1 and "perplexity" not in metrics, layout="constrained")
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys):
        task, metric, qkv, pooling = key
        first = next(v for v in variants if key in panel_keys_of(v))
        lo_train, hi_train = training_lengths(root, first, proto["train_lengths"])
        ax.axvspan(lo_train, hi_train, color="0.85", zorder=0, label=f"training lengths {lo_train}-{hi_train}")
        if metric == "accuracy":
            ax.axhline(0.5, color="0.4", ls="--", lw=1, label="chance")
        for v in variants:
            if key not in panel_keys_of(v):
                continue
            field = metric if metric in ("perplexity", "bleu") else "accuracy"
            # dtype=float reads summary.json's null (a length whose outputs were all NaN or inf: no
            # score) as NaN, a gap in the line.
            x = np.array([l["length"] for l in v["lengths"]])
            y = np.array([l[field]["mean"] for l in v["lengths"]], dtype=float)
            if len(v["seeds"]) > 1:
                s = np.array([l[field]["std"] for l in v["lengths"]], dtype=float)
                lo, hi = y - s, y + s
            elif field == "accuracy":
                lo = np.array([l["ci95"][0] for l in v["lengths"]], dtype=float)
                hi = np.array([l["ci95"][1] for l in v["lengths"]], dtype=float)
            else:
                lo, hi = y, y
            c = colors[v["scheme"]]
            ax.plot(x, y, marker="o", ms=3.5, color=c, label=f'{v["scheme"]} (n={len(v["seeds"])})')
            if field == "accuracy":
                lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
            ax.fill_between(x, lo, hi, color=c, alpha=0.18, lw=0)
        ax.set_xscale("log", base=2)
        ticks = sorted({l["length"] for v in variants if key in panel_keys_of(v) for l in v["lengths"]})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        # Every evaluation length beyond training (SCAN's test set): start at the training's end.
        left = hi_train * 0.9 if min(ticks) > hi_train else min(lo_train, min(ticks)) * 0.9
        ax.set_xlim(left, max(ticks) * 1.1)
        if metric == "accuracy":
            ax.set_ylim(0.4, 1.02)
        elif metric == "exact_match":
            ax.set_ylim(-0.02, 1.02)
        elif metric == "bleu":
            ax.set_ylim(-2, 102)
        else:
            ax.set_yscale("log")
        # The task's unit (summary.json's length_unit; summaries written before it name none).
        unit = first.get("length_unit") or "tokens"
        ax.set_xlabel("context length (characters)" if metric == "perplexity" else f"evaluation length ({unit})")
        ax.set_ylabel(METRIC_LABEL.get(metric, metric))
        ax.set_title(f"{task}: qkv={qkv}" + (f", pooling={pooling}" if metric == "accuracy" else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=legend_columns(ax))
    tasks = sorted({k[0] for k in keys})
    fig.suptitle(f"{', '.join(tasks)}: score against length "
                 "(band: ±std over seeds, or 95% Wilson interval with one seed)", fontsize=11)
    save(fig, os.path.join(out, "accuracy_vs_length.png"))


def legend_columns(ax, panel_inches=5.5, most=4):
    """As many legend columns as the longest label lets fit under one panel
    (a 7-point character is about 0.055 in wide, a marker and gap about 0.45 in),
    so that a legend of long variant names does not run under its neighbour."""
    labels = ax.get_legend_handles_labels()[1]
    longest = max((len(label) for label in labels), default=1)
    return max(1, min(most, int(panel_inches / (0.055 * longest + 0.45))))


def read_metrics(path):
    train, val = {}, {}
    if not os.path.exists(path):
        return train, val
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                m = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            if "loss" in m:
                train[m["step"]] = m["loss"]
            if "val_accuracy" in m:
                val[m["step"]] = m["val_accuracy"]
    return train, val


def mean_curve(curves):
    """Mean over runs at the steps every run has."""
    steps = sorted(set.intersection(*[set(c) for c in curves])) if curves else []
    return np.array(steps), np.array([np.mean([c[s] for c in curves]) for s in steps])


def plot_training(summary, root, out):
    variants = summary["variants"]
    colors = scheme_colors(variants)
    keys = panels(variants, with_bleu=False)
    fig, axes = plt.subplots(2, len(keys), figsize=(6.2 * len(keys), 7.5), squeeze=False, sharex=True,
                             layout="constrained")
    for col, key in enumerate(keys):
        task, metric, qkv, pooling = key
        ax_loss, ax_val = axes[0][col], axes[1][col]
        for v in variants:
            if panel_key(v) != key:
                continue
            runs = [read_metrics(os.path.join(root, "runs", r, "metrics.jsonl")) for r in v["runs"]]
            c = colors[v["scheme"]]
            x, y = mean_curve([t for t, _ in runs if t])
            if len(x):
                ax_loss.plot(x, y, color=c, lw=1.3, label=v["scheme"])
            x, y = mean_curve([vl for _, vl in runs if vl])
            if len(x):
                ax_val.plot(x, y, color=c, lw=1.3, marker="o", ms=3, label=v["scheme"])
        ax_loss.set_yscale("log")
        ax_loss.set_ylabel("training loss (cross-entropy)")
        ax_loss.set_title(f"{task}: qkv={qkv}" + (f", pooling={pooling}" if metric == "accuracy" else ""))
        ax_val.set_ylabel({"accuracy": "validation accuracy", "exact_match": "validation exact match",
                           "perplexity": "validation next-char accuracy"}.get(metric, metric)
                          + " (training lengths)")
        ax_val.set_xlabel("training step")
        ax_val.set_ylim(0.4 if metric == "accuracy" else -0.02, 1.02)
        for ax in (ax_loss, ax_val):
            ax.grid(alpha=0.3)
        ax_loss.legend(fontsize=7, ncol=2)
    fig.suptitle("Training curves (mean over seeds)", fontsize=11)
    save(fig, os.path.join(out, "training_curves.png"))


def cosine_similarity(m):
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1
    u = m / norms
    return u @ u.T


def matrix_panels(axes, m, title, trained_max, row_label):
    """Three panels (heatmap, cosine similarity, selected dimensions) for an (L, D) matrix of position vectors."""
    L, D = m.shape
    im = axes[0].imshow(m, aspect="auto", cmap="RdBu_r", interpolation="nearest")
    axes[0].set_xlabel("dimension")
    axes[0].set_ylabel(row_label)
    axes[0].set_title(title)
    plt.colorbar(im, ax=axes[0], shrink=0.85)
    if trained_max is not None and trained_max < L:
        axes[0].axhline(trained_max - 0.5, color="k", lw=1, ls="--")
    sim = cosine_similarity(m)
    im = axes[1].imshow(sim, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    axes[1].set_xlabel("position")
    axes[1].set_ylabel("position")
    axes[1].set_title("cosine similarity between positions")
    plt.colorbar(im, ax=axes[1], shrink=0.85)
    if trained_max is not None and trained_max < L:
        axes[1].axhline(trained_max - 0.5, color="w", lw=1, ls="--")
        axes[1].axvline(trained_max - 0.5, color="w", lw=1, ls="--")
    dims = sorted(set(d for d in [0, 1, D // 8, D // 4, D // 2, D - 2] if 0 <= d < D))
    for d in dims:
        axes[2].plot(np.arange(L), m[:, d], lw=1.2, label=f"dim {d}")
    if trained_max is not None and trained_max < L:
        axes[2].axvspan(0, trained_max - 1, color="0.9", zorder=0, label="trained positions")
    axes[2].set_xlabel("position")
    axes[2].set_ylabel("value")
    axes[2].set_title("selected dimensions")
    axes[2].legend(fontsize=7, ncol=2)
    axes[2].grid(alpha=0.3)


# What a scheme adds to the attention scores, as inspect writes it: (key, what the colour bar says).
SCORE_MATRICES = (("bias", "bias added to the score"),
                  ("score_terms_of_ones", "score term for an all-ones q and k"),
                  ("value_terms_of_ones", "value term on key j alone, summed over the head"),
                  ("reweighted_ones", "a score of 1 after reweighting"))


def matrix_row(axes, b, shown, bar_label, trained, slopes):
    """One (H, L, L) matrix of `posenc inspect` in a row of axes: the first `shown` heads as images, the
    profile of every head at the middle query, and where `slopes` (ALiBi's bias) the slope of each head."""
    H, L, _ = b.shape
    fig = axes[0].figure
    vmin, vmax = b.min(), b.max()
    for h in range(shown):
        im = axes[h].imshow(b[h], cmap="magma", vmin=vmin, vmax=vmax, interpolation="nearest")
        axes[h].set_title(f"head {h}")
        axes[h].set_xlabel("key position j")
        if h == 0:
            axes[h].set_ylabel("query position i")
    fig.colorbar(im, ax=list(axes[:shown]), shrink=0.8, label=bar_label)
    i = L // 2
    offsets = np.arange(L) - i
    ax = axes[shown]
    for h in range(H):
        ax.plot(offsets, b[h, i], lw=1.2, label=f"head {h}")
    if trained is not None:
        ax.axvspan(-(trained - 1), trained - 1, color="0.9", zorder=0, label="offsets seen in training")
    ax.set_xlabel("key offset j - i")
    ax.set_ylabel(bar_label)
    ax.set_title(f"profile at query i = {i}")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    if slopes:
        # Slope per head between two keys on the left: bias(i, i-1) - bias(i, i-2) = m_h
        # (away from the diagonal, so the directional variant's left offset cancels).
        m = b[:, i, i - 1] - b[:, i, i - 2]
        ax = axes[shown + 1]
        ax.plot(np.arange(H), m, marker="o")
        ax.set_yscale("log", base=2)
        ax.set_xlabel("head h")
        ax.set_ylabel("slope m_h (log2 scale)")
        ratios = m[1:] / m[:-1] if H > 1 else np.array([])
        if len(ratios) and np.allclose(ratios, ratios[0], rtol=1e-4):
            ax.set_title(f"slopes m_h: geometric, ratio {ratios[0]:.4g}")
        else:
            ax.set_title("slopes m_h (ratios " + ", ".join(f"{r:.3g}" for r in ratios) + ")")
        ax.grid(alpha=0.3, which="both")


def figure_label(d):
    """The name a figure is titled with: the grid's variant, else the checkpoint, else the scheme."""
    return d.get("variant") or d.get("checkpoint") or d["scheme"]


def scheme_figure(d):
    """The figure of one `posenc inspect` description (of a scheme, or of a trained one); None if there is
    nothing to draw (no positions at all)."""
    scheme = d["scheme"]
    trained = d.get("trained_lengths", [None, None])[1]
    if trained is not None and d.get("cls_position"):
        trained += 1  # the CLS token takes position 0
    if "trained_ids_end" in d:
        trained = d["trained_ids_end"]  # it reads the task's ids (Abacus, coupled): ids, not lengths
    label = figure_label(d)
    header = ("" if label == scheme else f"{label}: ") + f'{scheme} {json.dumps(d.get("options", {}))}'
    if d.get("slot") == "model.positional.input":
        header += " (model.positional.input, before block 1)"
    if "block" in d:
        header += f' (block {d["block"]})'
    matrices = [(key, bar_label) for key, bar_label in SCORE_MATRICES if key in d]
    if "embedding" in d:
        m = np.array(d["embedding"])
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), layout="constrained")
        matrix_panels(axes, m, "position encoding added to the tokens", trained, "position")
    elif "rotated_ones" in d:
        m = np.array(d["rotated_ones"])
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), layout="constrained")
        matrix_panels(axes, m, f'an all-ones vector rotated at each position (one head, width {m.shape[1]})',
                      None, "position")
        axes[1].set_title("cosine similarity of rotated vectors: depends only on m - n")
    elif matrices:
        # One row per matrix (Shaw has score and value terms), one panel per head, then the profiles.
        H = len(d[matrices[0][0]])
        shown = min(H, 8)
        extra = 2 if "bias" in d and scheme == "alibi" else 1
        fig, rows = plt.subplots(len(matrices), shown + extra, figsize=(3.4 * (shown + extra), 3.9 * len(matrices)),
                                 squeeze=False, layout="constrained")
        for (key, bar_label), axes in zip(matrices, rows):
            matrix_row(axes, np.array(d[key]), shown, bar_label, trained, slopes=(extra == 2 and key == "bias"))
            if extra == 2 and key != "bias":
                axes[shown + 1].axis("off")
    else:
        return None  # none: no positions to draw
    if "trained_ids_end" in d:
        when = (f"after training on lengths up to {d['trained_lengths'][1]}, reading the task's position ids: "
                f"training gives ids up to {d['trained_ids_end'] - 1} at most")
    elif trained is not None:
        when = f"after training on lengths up to {d['trained_lengths'][1]}"
    else:
        when = "at initialization"
    if d.get("slot") in ("model.positional.input", "model.positional.with"):
        when = f"{d['slot']}; {when}"  # the model's second scheme, not model.positional.type
    fig.suptitle(f"{header}  ({when})", fontsize=10)
    return fig


def plot_scheme(d, out):
    """scheme_<variant>.png for the trained scheme of a grid's variant (scheme_<variant>.input.png for its
    model.positional.input scheme, scheme_<variant>.with.png for its model.positional.with scheme); False if
    there is nothing to draw."""
    fig = scheme_figure(d)
    if fig is None:
        return False
    slot = {"model.positional.input": ".input", "model.positional.with": ".with"}.get(d.get("slot"), "")
    save(fig, os.path.join(out, f"scheme_{d['variant']}{slot}.png"))
    return True


def encoder_decoder_attention_figure(d):
    """An encoder_decoder's maps: a row per encoder block (source x source), then per decoder
    block a row of causal self-attention (target x target) and one of cross-attention (target x source)."""
    rows = [(f"encoder {b + 1}", m, d["source"], d["source"]) for b, m in enumerate(d["encoder"])]
    for b, (self_maps, cross_maps) in enumerate(zip(d["decoder_self"], d["cross"])):
        rows.append((f"decoder {b + 1} self", self_maps, d["target"], d["target"]))
        rows.append((f"decoder {b + 1} cross", cross_maps, d["target"], d["source"]))
    n_heads = len(rows[0][1])
    fig, axes = plt.subplots(len(rows), n_heads, figsize=(2.4 * n_heads, 2.6 * len(rows)), squeeze=False,
                             layout="constrained")
    for r, (name, maps, queries, keys) in enumerate(rows):
        for h in range(n_heads):
            ax = axes[r][h]
            m = np.array(maps[h])
            ax.imshow(m, cmap="Blues", vmin=0, vmax=max(1e-9, m.max()), interpolation="nearest", aspect="auto")
            ax.set_xticks(range(len(keys)))
            ax.set_yticks(range(len(queries)))
            ax.set_xticklabels(keys, fontsize=5, rotation=90)
            ax.set_yticklabels(queries, fontsize=5)
            if h == 0:
                ax.set_ylabel(f"{name}\nquery", fontsize=8)
            if r == 0:
                ax.set_title(f"head {h + 1}", fontsize=8)
    cross = d.get("cross_scheme", "none")
    verdict = "every answer token right" if d.get("teacher_forced_right") else "some answer token wrong"
    fig.suptitle(f'{figure_label(d)}: attention on one {d.get("task", "")} example of {d["length"]} target tokens '
                 f'(teacher-forced: {verdict})\nrows: encoder self-attention over the source, then per decoder block '
                 f'its causal self-attention and its cross-attention to the source (cross positions: {cross})\n'
                 f'darker = more attention, each map scaled to its own maximum', fontsize=9)
    return fig


def attention_figure(d):
    """The figure of one `posenc attention` output: every block's and head's map."""
    if d.get("encoder_decoder"):
        return encoder_decoder_attention_figure(d)
    layers = np.array(d["layers"])  # (blocks, heads, L, L)
    n_blocks, n_heads = layers.shape[:2]
    labels = (["CLS"] if d.get("cls") else []) + [str(t) for t in d["tokens"]]
    fig, axes = plt.subplots(n_blocks, n_heads, figsize=(2.9 * n_heads, 2.9 * n_blocks), squeeze=False,
                             layout="constrained")
    for b in range(n_blocks):
        for h in range(n_heads):
            ax = axes[b][h]
            ax.imshow(layers[b, h], cmap="Blues", vmin=0, vmax=max(1e-9, layers[b, h].max()),
                      interpolation="nearest")
            ax.set_xticks(range(len(labels)))
            ax.set_yticks(range(len(labels)))
            ax.set_xticklabels(labels, fontsize=5, rotation=90)
            ax.set_yticklabels(labels, fontsize=5)
            if b == n_blocks - 1:
                ax.set_xlabel("key (token)")
            if h == 0:
                ax.set_ylabel(f"block {b + 1}\nquery (token)")
            if b == 0:
                ax.set_title(f"head {h + 1}")
    if "prediction" in d:
        verdict = "sorted" if d["prediction"] == 1 else "not sorted"
        fig.suptitle(f'{figure_label(d)}: attention on one {d["kind"]} example of length {d["length"]}; '
                     f'model says {verdict} (p_sorted = {d["p_sorted"]:.3f}, label {d["label"]}); darker = more '
                     f'attention, each map scaled to its own maximum', fontsize=10)
    else:
        fig.suptitle(f'{figure_label(d)}: causal attention on one {d.get("task", "")} example of length {d["length"]} '
                     f'(prompt and answer, teacher-forced; the answer starts at token {d.get("answer_start", "?")}); '
                     f'darker = more attention, each map scaled to its own maximum', fontsize=10)
    return fig


def plot_attention(d, out):
    """attention_<variant>.png for a grid's variant."""
    save(attention_figure(d), os.path.join(out, f"attention_{d['variant']}.png"))


def plot_operand_grid(root, out):
    """The run whose operand grid has the highest mean exact match, as a heat map; False if no run has one."""
    best = None
    runs = os.path.join(root, "runs")
    for run in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        # results.json (eval.operand_grid in the grid's config), else a later `posenc eval` of the run.
        grid = None
        for name in ("results.json", "results_eval.json"):
            path = os.path.join(runs, run, name)
            if grid is None and os.path.exists(path):
                grid = load_json(path).get("operand_grid")
        if grid:
            mean = float(np.mean(grid["exact_match"]))
            if best is None or mean > best[0]:
                best = (mean, run, grid)
    if best is None:
        return False
    mean, run, grid = best
    m = np.array(grid["exact_match"])
    digits = grid["digits"]
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(digits), 0.8 + 0.5 * len(digits)))
    im = ax.imshow(m, vmin=0.0, vmax=1.0, cmap="viridis", origin="lower")
    ax.set_xticks(range(len(digits)), [str(d) for d in digits])
    ax.set_yticks(range(len(digits)), [str(d) for d in digits])
    ax.set_xlabel("digits of b")
    ax.set_ylabel("digits of a")
    for i in range(len(digits)):
        for j in range(len(digits)):
            ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if m[i, j] < 0.5 else "black")
    fig.colorbar(im, ax=ax, label="exact match")
    ax.set_title(f"{run}\nexact match by operand lengths (mean {mean:.3f})", fontsize=9)
    save(fig, os.path.join(out, "operand_grid.png"))
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot_compare.py OUT   (the output directory of posenc compare)")
    root = sys.argv[1]
    summary_path = os.path.join(root, "summary.json")
    if not os.path.exists(summary_path):
        sys.exit(f"plot_compare.py: {summary_path} not found; run posenc compare first")
    summary = load_json(summary_path)
    name_entries(summary)
    out = os.path.join(root, "figures")
    os.makedirs(out, exist_ok=True)
    written = []
    if summary["variants"]:
        plot_accuracy(summary, out)
        plot_training(summary, root, out)
        written += ["accuracy_vs_length.png", "training_curves.png"]
    if plot_operand_grid(root, out):
        written.append("operand_grid.png")
    for sub, fn, prefix in (("inspect", plot_scheme, "scheme_"), ("attention", plot_attention, "attention_")):
        folder = os.path.join(root, sub)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                d = load_json(os.path.join(folder, name))
                if fn(d, out) is not False:
                    written.append(prefix + name[:-5] + ".png")
    print(f"plot_compare.py: {len(written)} figures in {out}")


if __name__ == "__main__":
    main()

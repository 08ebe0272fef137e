#!/usr/bin/python3
"""Figures of the JSON files that `posenc inspect`, `posenc attention`, `posenc probe` and `posenc heads` write.

    build/posenc inspect alibi --length 32 --heads 8 --dim 64 --json alibi.json
    build/posenc attention runs/sin/checkpoint.pt --length 16 --json att.json
    build/posenc probe runs/sin/checkpoint.pt --lengths 16,64 --json probe.json
    build/posenc heads runs/sin/checkpoint.pt --lengths 16,128,512 --json heads.json
    /usr/bin/python3 scripts/plot_inspect.py alibi.json att.json probe.json heads.json [--out DIR] [--layer N]

Writes FILE.png beside each FILE.json (or into DIR), the same figures as a
comparison's report draws for each of its schemes (scripts/plot_compare.py):

  an added encoding   heatmap of the encoding, cosine similarity between
                      positions, selected dimensions as waves
  a rotation          the same for an all-ones vector rotated at each position
  a bias              each head's (query, key) matrix and its profile against
                      j - i (ALiBi: the slopes per head on a log2 axis)
  score terms         the same for what they add to q·k of an all-ones query
                      and key (shaw, xl, cope)
  reweighting         the same for scores of 1 after reweighting (da, dape)
  attention maps      every block's and head's attention on the example
  probes              the probe's held-out R^2 against the layer, one line
                      per length, beside the position's mean error or a
                      task target's rounded accuracy over its baseline,
                      and the best layer's mean prediction against the
                      target (an encoder_decoder: a row for each stack)
  head statistics     per block, each head's mean distance |j - i| and its
                      effective keys against the length (log axes), beside
                      a head flat over the keys each query sees (dashed)

A description of `none` has nothing to draw: the script says so and goes on.
Exit status: 0 when every file was read (and drawn where it can be), 2 when a
file is missing, not JSON, or not written by `posenc inspect`, `posenc
attention`, `posenc probe` or `posenc heads` (named with the reason, one line
each; the other files are still drawn).

Needs matplotlib and numpy (Debian: python3-matplotlib python3-numpy).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_compare  # noqa: E402  (the figure code is the comparison report's)


def best_layer(d, stacks, layer=None):
    """`layer` if given (the last one where a stack has fewer), else the layer whose probe reads best (highest R^2)
    at the first length it was fitted at (--fit-lengths), else at the first length."""
    if layer is not None:
        return min(layer, len(stacks[0][1]["layers"]) - 1)
    fit = d.get("fit_lengths", [])
    entry = next((e for length, e in stacks if length in fit), stacks[0][1])
    return max(entry["layers"], key=lambda p: p["r2"])["layer"]


def probe_row(r2_ax, right_ax, means_ax, d, stacks, side, layer=None):
    """One stack's panels: `stacks` pairs each length with that stack's entry; `side` names the stack ("" for the
    only one). The third panel: at the best layer, the mean prediction against the target, per length."""
    target = d.get("target", "position")
    layer = best_layer(d, stacks, layer)
    for length, entry in stacks:
        by_target = next((p.get("by_target", []) for p in entry["layers"] if p["layer"] == layer), [])
        means_ax.plot([m["target"] for m in by_target], [m["mean_prediction"] for m in by_target], marker=".",
                      label=f"length {length}")
    means_ax.axline((0, 0), slope=1, color="grey", linestyle=":", linewidth=1)
    means_ax.set_xlabel(f"{target}")
    means_ax.set_ylabel(f"mean prediction at layer {layer}" + (f" ({side})" if side else ""))
    means_ax.grid(alpha=0.3)
    for length, entry in stacks:
        layers = [p["layer"] for p in entry["layers"]]
        label = f"length {length} ({entry['positions']} positions)"
        line, = r2_ax.plot(layers, [p["r2"] for p in entry["layers"]], marker="o", label=label)
        if target == "position":
            right_ax.plot(layers, [p["mean_abs_error"] / entry["positions"] for p in entry["layers"]], marker="o",
                          label=label)
        else:  # dotted: the least-squares classifier; dash-dot: the logistic one; dashed: the commonest value
            right_ax.plot(layers, [p["rounded_accuracy"] for p in entry["layers"]], marker="o", label=label,
                          color=line.get_color())
            if all("class_accuracy" in p for p in entry["layers"]):  # probes written before it was read lack it
                right_ax.plot(layers, [p["class_accuracy"] for p in entry["layers"]], marker="s", linestyle=":",
                              color=line.get_color())
            # null where the probe left it unfitted (too many rows times classes); absent in older probes
            if all(p.get("logistic_accuracy") is not None for p in entry["layers"]):
                right_ax.plot(layers, [p["logistic_accuracy"] for p in entry["layers"]], marker="^",
                              linestyle="-.", color=line.get_color())
            right_ax.plot(layers, [p["baseline_accuracy"] for p in entry["layers"]], linestyle="--",
                          color=line.get_color())
    block = f"{side} block" if side else "block"
    for ax in (r2_ax, right_ax):
        ax.set_xlabel(f"layer (0: what {block} 1 reads; last: the last one's output)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    r2_ax.set_ylabel(f"held-out R² of the {target}" + (f" ({side})" if side else ""))
    r2_ax.set_ylim(min(-0.05, r2_ax.get_ylim()[0]), 1.02)
    if target == "position":
        right_ax.set_ylabel("mean |error| / positions")
    else:
        right_ax.set_ylabel("rounded accuracy (dotted: least-squares\nclassifier; dash-dot: logistic; dashed: baseline)")
        right_ax.set_ylim(0, 1.02)
    r2_ax.legend(fontsize=8)


def probe_figure(d, layer=None):
    """Held-out R^2 of the probe against the layer, one line per length, beside the position's mean error
    (as a share of the positions) or, for a task's own target, the rounded and the classifier's accuracy over the
    baseline, and the
    best layer's mean prediction against the target; an
    encoder_decoder gets a row for its encoder (over the source) and one for its decoder (over the target)."""
    plt = plot_compare.plt
    target = d.get("target", "position")
    both = d["kind"] == "encoder_decoder"
    fig, axes = plt.subplots(2 if both else 1, 3, figsize=(15, 8 if both else 4), squeeze=False)
    probe_row(*axes[0], d, [(e["length"], e) for e in d["lengths"]], "encoder" if both else "", layer)
    if both:
        probe_row(*axes[1], d, [(e["length"], e["decoder"]) for e in d["lengths"]], "decoder", layer)
    trained = d.get("trained_lengths", [None, None])
    fit = d.get("fit_lengths", [])
    fitted = f"; every probe fitted at length{'s' if len(fit) > 1 else ''} {', '.join(map(str, fit))}" if fit else ""
    fig.suptitle(f"{target} probe: {d['scheme']} {d['kind']} on {d['task']} (trained on lengths "
                 f"{trained[0]}-{trained[1]}{fitted}): {d.get('checkpoint', '')}")
    fig.tight_layout()
    return fig


def heads_figure(d):
    """Per block (a column), each head's mean distance (top) and effective keys (middle) against the length, on
    log axes, with a head flat over the keys each query sees dashed: a local head's lines stay flat as the
    length grows, a flat head's follow the dashed one. Where the model has logit factors (Scalable-Softmax, LogN
    scaling, the temperature, the head scale), a last row draws each head's mean factor, and says so in a block
    that has none."""
    plt = plot_compare.plt
    lengths = [e["length"] for e in d["lengths"]]
    blocks = d["lengths"][0]["blocks"]
    rows = [("distance", "flat_distance", "mean |j - i|"), ("effective_keys", "keys_seen", "effective keys")]
    if any(h.get("logit_factor") is not None for block in blocks for h in block["heads"]):
        rows.append(("logit_factor", None, "logit factor"))
    fig, axes = plt.subplots(len(rows), len(blocks), figsize=(3.6 * len(blocks) + 1, 3.25 * len(rows)),
                             squeeze=False)
    for b, block in enumerate(blocks):
        for row, (key, flat_key, label) in enumerate(rows):
            ax = axes[row][b]
            if key == "logit_factor" and all(h.get(key) is None for h in block["heads"]):
                # A block without any factor (model.attention.length_scaling_in nope_blocks, say): plain logits.
                ax.text(0.5, 0.5, "no logit factor\n(plain logits)", ha="center", va="center",
                        transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            for h in range(len(block["heads"])):
                ax.plot(lengths, [e["blocks"][b]["heads"][h][key] for e in d["lengths"]], marker="o",
                        label=f"head {h}")
            if flat_key:
                ax.plot(lengths, [e["blocks"][b][flat_key] for e in d["lengths"]], "k--", label="flat")
                ax.set_yscale("log")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("length")
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(block["block"] + (" (causal)" if block.get("causal") else ""))
            trained = d.get("trained_lengths", [None, None])
            if trained[1] is not None:
                ax.axvline(trained[1], color="grey", linewidth=0.8)  # the longest training length
    axes[0][0].legend(fontsize=7)
    scored = [f"{e['length']}: {e['accuracy']:.3f}" for e in d["lengths"] if e.get("accuracy") is not None]
    trained = d.get("trained_lengths", [None, None])
    kind = f", {d['example_kind']} examples" if d.get("example_kind") else ""
    fig.suptitle(f"where each head looks: {d['scheme']} {d['kind']} on {d['task']} (trained on lengths "
                 f"{trained[0]}-{trained[1]}, grey line{kind})" + (f"; accuracy {', '.join(scored)}" if scored else "")
                 + f"\n{d.get('checkpoint', '')}", fontsize=10)
    fig.tight_layout()
    return fig


def figure_of(d, layer=None):
    """The figure of one description, attention output or probe; None if it has nothing to draw."""
    written_by = d.get("written_by") if isinstance(d, dict) else None
    if written_by == "posenc inspect":
        return plot_compare.scheme_figure(d)
    if written_by == "posenc attention":
        return plot_compare.attention_figure(d)
    if written_by == "posenc probe":
        return probe_figure(d, layer)
    if written_by == "posenc heads":
        return heads_figure(d)
    raise ValueError("not written by `posenc inspect`, `posenc attention`, `posenc probe` or `posenc heads` "
                     "(no \"written_by\" naming one)")


def main():
    parser = argparse.ArgumentParser(description="Figures of `posenc inspect`, `posenc attention`, `posenc probe` and "
                                     "`posenc heads` JSON files.")
    parser.add_argument("files", nargs="+", metavar="FILE.json")
    parser.add_argument("--out", metavar="DIR", help="write the PNGs here instead of beside each file")
    parser.add_argument("--layer", type=int, metavar="N",
                        help="a probe's mean predictions at this layer (default: the one that reads best where it "
                             "was fitted)")
    args = parser.parse_args()
    if args.layer is not None and args.layer < 0:
        sys.exit(f"plot_inspect.py: --layer {args.layer}: a layer is 0 or more")
    if args.out is not None and not os.path.isdir(args.out):
        sys.exit(f"plot_inspect.py: --out {args.out}: not a directory")
    failed = 0
    for path in args.files:
        try:
            d = plot_compare.load_json(path)
            fig = figure_of(d, args.layer)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            if isinstance(e, KeyError):
                reason = f"missing key {e}"
            elif isinstance(e, OSError) and e.strerror:
                reason = e.strerror  # "No such file or directory", "not a regular file"
            else:
                reason = str(e)
            print(f"plot_inspect.py: {path}: {reason}", file=sys.stderr)
            failed += 1
            continue
        if fig is None:
            print(f"{path}: {d['scheme']} adds no positions: nothing to draw")
            continue
        stem = os.path.splitext(os.path.basename(path))[0]
        png = os.path.join(args.out if args.out is not None else os.path.dirname(os.path.abspath(path)), stem + ".png")
        plot_compare.save(fig, png)
        print(f"{path}: {png}")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

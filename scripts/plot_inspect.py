#!/usr/bin/python3
"""Figures of the JSON files that `posenc inspect` and `posenc attention` write.

    build/posenc inspect alibi --length 32 --heads 8 --dim 64 --json alibi.json
    build/posenc attention runs/sin/checkpoint.pt --length 16 --json att.json
    /usr/bin/python3 scripts/plot_inspect.py alibi.json att.json [--out DIR]

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

A description of `none` has nothing to draw: the script says so and goes on.
Exit status: 0 when every file was read (and drawn where it can be), 2 when a
file is missing, not JSON, or not written by `posenc inspect` or `posenc
attention` (named with the reason, one line each; the other files are still
drawn).

Needs matplotlib and numpy (Debian: python3-matplotlib python3-numpy).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_compare  # noqa: E402  (the figure code is the comparison report's)


def figure_of(d):
    """The figure of one description or attention output; None if it has nothing to draw."""
    written_by = d.get("written_by") if isinstance(d, dict) else None
    if written_by == "posenc inspect":
        return plot_compare.scheme_figure(d)
    if written_by == "posenc attention":
        return plot_compare.attention_figure(d)
    raise ValueError("not written by `posenc inspect` or `posenc attention` (no \"written_by\" naming either)")


def main():
    parser = argparse.ArgumentParser(description="Figures of `posenc inspect` and `posenc attention` JSON files.")
    parser.add_argument("files", nargs="+", metavar="FILE.json")
    parser.add_argument("--out", metavar="DIR", help="write the PNGs here instead of beside each file")
    args = parser.parse_args()
    if args.out is not None and not os.path.isdir(args.out):
        sys.exit(f"plot_inspect.py: --out {args.out}: not a directory")
    failed = 0
    for path in args.files:
        try:
            d = plot_compare.load_json(path)
            fig = figure_of(d)
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

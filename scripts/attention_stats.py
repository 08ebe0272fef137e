#!/usr/bin/python3
"""Where each head looks, from `posenc attention --json` files: a table per file.

    /usr/bin/python3 scripts/attention_stats.py A.json [B.json ...] [--markdown]

For every layer and head, averaged over the queries i of the example:
  left, self, right   attention mass on keys j < i, j = i, j > i
  distance            mean |j - i| under the attention
  to_min_right        mass on the smallest token right of i (ties: all its copies),
                      over queries with a smaller token to their right
The ordering task is "is there a j > i with x_j < x_i?", so a head that puts its
mass on the smallest token to its right answers it at any length.
Plain python (no numpy), so it runs wherever the JSON is.
"""
import json
import sys


def head_stats(rows, tokens):
    L = len(rows)
    left = own = right = distance = 0.0
    to_min, counted = 0.0, 0
    for i, row in enumerate(rows):
        left += sum(row[:i])
        own += row[i]
        right += sum(row[i + 1:])
        distance += sum(w * abs(j - i) for j, w in enumerate(row))
        if i + 1 < L:
            smallest = min(tokens[i + 1:])
            if smallest < tokens[i]:
                to_min += sum(row[j] for j in range(i + 1, L) if tokens[j] == smallest)
                counted += 1
    return {"left": left / L, "self": own / L, "right": right / L, "distance": distance / L,
            "to_min_right": to_min / counted if counted else None}


def file_stats(path):
    with open(path) as f:
        a = json.load(f)
    tokens = a["tokens"]
    if a.get("cls"):
        tokens = [0] + tokens  # position 0 holds the CLS token
    out = []
    for layer, heads in enumerate(a["layers"]):
        for head, rows in enumerate(heads):
            out.append((layer, head, head_stats(rows, tokens)))
    return a, out


def main(argv):
    markdown = "--markdown" in argv
    paths = [p for p in argv if p != "--markdown"]
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        a, stats = file_stats(path)
        title = f"{path}: {a['scheme']}, length {a['length']}, kind {a['kind']}, p(sorted) = {a['p_sorted']:.3f}"
        if markdown:
            print(f"**{title}**\n\n| layer | head | left | self | right | mean distance | on min right |")
            print("|---|---|---|---|---|---|---|")
        else:
            print(title)
        for layer, head, s in stats:
            m = "-" if s["to_min_right"] is None else f"{s['to_min_right']:.2f}"
            cells = [str(layer), str(head), f"{s['left']:.2f}", f"{s['self']:.2f}", f"{s['right']:.2f}",
                     f"{s['distance']:.1f}", m]
            print(("| " + " | ".join(cells) + " |") if markdown else "  " + "  ".join(f"{c:>6}" for c in cells))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])

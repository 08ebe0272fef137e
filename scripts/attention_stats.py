#!/usr/bin/python3
"""Where each head looks, from `posenc attention --json` files: a table per file.

    /usr/bin/python3 scripts/attention_stats.py A.json [B.json ...] [--markdown]

For every block and head, averaged over the queries i of the example:
  left, self, right   attention mass on keys j < i, j = i, j > i
  distance            mean |j - i| under the attention
  to_min_right        (ordering only) mass on the smallest token right of i (ties:
                      all its copies), over queries with a smaller token to their right
The ordering task is "is there a j > i with x_j < x_i?", so a head that puts its
mass on the smallest token to its right answers it at any length.
An encoder's or a decoder's blocks are rows "0", "1", ...; an encoder_decoder's
are "encoder 0", ... and "decoder 0 self", ... (its cross-attention relates two
sequences, where j - i means nothing, and is left out).
A file that is missing, not JSON or not written by `posenc attention` is an
error naming it (exit 2).
Plain python (no numpy), so it runs wherever the JSON is.
"""
import json
import os
import sys


def head_stats(rows, tokens):
    """The statistics of one head's (L, L) map; `tokens` None: no to_min_right (not the ordering task)."""
    L = len(rows)
    left = own = right = distance = 0.0
    to_min, counted = 0.0, 0
    for i, row in enumerate(rows):
        left += sum(row[:i])
        own += row[i]
        right += sum(row[i + 1:])
        distance += sum(w * abs(j - i) for j, w in enumerate(row))
        if tokens is not None and i + 1 < L:
            smallest = min(tokens[i + 1:])
            if smallest < tokens[i]:
                to_min += sum(row[j] for j in range(i + 1, L) if tokens[j] == smallest)
                counted += 1
    return {"left": left / L, "self": own / L, "right": right / L, "distance": distance / L,
            "to_min_right": to_min / counted if counted else None}


def read_attention(path):
    """The JSON `posenc attention` wrote; exits with status 2, naming the file, for anything else."""
    if os.path.exists(path) and not os.path.isfile(path):
        fail(f"{path}: not a regular file")  # /dev/zero, a FIFO: reading would not end
    try:
        with open(path) as f:
            a = json.load(f)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except ValueError as e:
        fail(f"{path}: not JSON ({e})")
    if not isinstance(a, dict) or a.get("written_by") != "posenc attention":
        fail(f"{path}: not written by `posenc attention`")
    return a


def fail(message):
    print(f"attention_stats.py: {message}", file=sys.stderr)
    sys.exit(2)


def self_attention_maps(a):
    """(row name, heads, tokens of the queries and keys) for each self-attention module."""
    if a.get("encoder_decoder"):
        for b, heads in enumerate(a["encoder"]):
            yield f"encoder {b}", heads, a["source"]
        for b, heads in enumerate(a["decoder_self"]):
            yield f"decoder {b} self", heads, a["target"]
        return
    tokens = ([0] if a.get("cls") else []) + a["tokens"]  # position 0 holds the CLS token
    for b, heads in enumerate(a["layers"]):
        yield str(b), heads, tokens


def file_stats(path):
    a = read_attention(path)
    ordering = "p_sorted" in a  # to_min_right means something for the ordering task alone
    out = []
    try:
        for block, heads, tokens in self_attention_maps(a):
            for head, rows in enumerate(heads):
                out.append((block, head, head_stats(rows, tokens if ordering else None)))
    except (KeyError, IndexError, TypeError) as e:
        fail(f"{path}: its maps are not as `posenc attention` writes them ({type(e).__name__}: {e})")
    return a, out


def title_of(path, a):
    if "p_sorted" in a:
        return f"{path}: {a['scheme']}, length {a['length']}, kind {a['kind']}, p(sorted) = {a['p_sorted']:.3f}"
    return f"{path}: {a['scheme']}, {a.get('task', '?')}, length {a['length']}"


def main(argv):
    markdown = "--markdown" in argv
    paths = [p for p in argv if p != "--markdown"]
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        a, stats = file_stats(path)
        title = title_of(path, a)
        if markdown:
            print(f"**{title}**\n\n| block | head | left | self | right | mean distance | on min right |")
            print("|---|---|---|---|---|---|---|")
        else:
            print(title)
        for block, head, s in stats:
            m = "-" if s["to_min_right"] is None else f"{s['to_min_right']:.2f}"
            cells = [block, str(head), f"{s['left']:.2f}", f"{s['self']:.2f}", f"{s['right']:.2f}",
                     f"{s['distance']:.1f}", m]
            print(("| " + " | ".join(cells) + " |") if markdown else "  " + "  ".join(f"{c:>6}" for c in cells))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env bash
# Two-rank data parallel scaling on this machine: the same run on 1 and on 2
# ranks (posenc train --nproc), one intra-op thread per rank, and a table of
# steps per second, scaling efficiency, the time in gradient all-reduces and
# the validation time (split over the ranks, against one process doing it all).
#
# Usage: scripts/data-parallel-scaling.sh [OUT_DIR] [-- --set path=value ...]
#   default: the character LM at width 256, 4 layers, context 256, batch 32,
#   20 steps; OUT_DIR (default runs/scaling) is replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/scaling}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
posenc=build/posenc
[ -x "$posenc" ] || { echo "data-parallel-scaling: build posenc first (scripts/setup.sh)" >&2; exit 1; }
sets=(--set model.d_model=256 --set model.heads=4 --set model.layers=4 --set model.d_ff=1024
      --set task.min_length=256 --set task.max_length=256 --set train.batch_size=32
      --set train.steps=20 --set train.log_every=10 --set train.eval_every=20 --set train.val_samples=64
      --set train.checkpoint_every=1000 --set train.threads=1 --set train.warmup_steps=5
      --set eval.lengths=[256] --set eval.samples_per_length=16 "$@")
rm -rf "$out"
mkdir -p "$out"
for n in 1 2; do
  echo "data-parallel-scaling: $n rank(s)" >&2
  "$posenc" train configs/charlm.json "${sets[@]}" --nproc "$n" --no-progress --out "$out/ranks-$n" \
    > "$out/ranks-$n.log" 2>&1 || { cat "$out/ranks-$n.log" >&2; exit 1; }
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = {}
for n in (1, 2):
    run = out / f"ranks-{n}"
    res = json.loads((run / "results.json").read_text())
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    # steps/s of the second log window: the first includes warm-up (allocations, first-touch pages).
    rate = [l["steps_per_s"] for l in lines if "steps_per_s" in l][-1]
    val = [l["val_seconds"] for l in lines if "val_seconds" in l][-1]
    rows[n] = dict(rate=rate, train=res["train_seconds"], allreduce=res.get("allreduce_seconds", 0.0),
                   val=val, params=res["parameters"], loss=res["final_train_loss"])
print(f"model: {rows[1]['params']:,} parameters; global batch 32 x 256 tokens\n")
print("| ranks | steps/s | speed-up | efficiency | all-reduce share of training | validation (s) | final loss |")
print("|---|---|---|---|---|---|---|")
for n, r in rows.items():
    speedup = r["rate"] / rows[1]["rate"]
    print(f"| {n} | {r['rate']:.3f} | {speedup:.2f}x | {100 * speedup / n:.0f}% | "
          f"{100 * r['allreduce'] / r['train']:.1f}% | {r['val']:.2f} | {r['loss']:.4f} |")
PY

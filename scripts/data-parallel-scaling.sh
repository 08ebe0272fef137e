#!/usr/bin/env bash
# Two-rank data parallel scaling on this machine, four rows: one process with
# one thread, one process with two threads (the same cores as two ranks), one
# process at half the batch (each rank's share), and two ranks with one thread
# each (posenc train --nproc 2). A table of steps and sequences per second, the
# time in gradient all-reduces and the validation time (split over the ranks).
# Run it with nothing else on the machine.
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
# name, ranks, threads per rank, global batch: two ranks against one process
# with the same two cores (two threads), and against one rank at each rank's
# share of the batch (what two independent processes would each do).
rows=("1x1:1:1:32" "1x2:1:2:32" "1x1-half:1:1:16" "2x1:2:1:32")
for row in "${rows[@]}"; do
  IFS=: read -r name ranks threads batch <<<"$row"
  echo "data-parallel-scaling: $ranks rank(s) x $threads thread(s), batch $batch" >&2
  "$posenc" train configs/charlm.json "${sets[@]}" --set train.threads="$threads" --set train.batch_size="$batch" \
    --nproc "$ranks" --no-progress --out "$out/$name" > "$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; exit 1; }
done
/usr/bin/python3 - "$out" "${rows[@]}" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = []
for spec in sys.argv[2:]:
    name, ranks, threads, batch = spec.split(":")
    run = out / name
    res = json.loads((run / "results.json").read_text())
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
    # steps/s of the second log window: the first includes warm-up (allocations, first-touch pages).
    rate = [l["steps_per_s"] for l in lines if "steps_per_s" in l][-1]
    val = [l["val_seconds"] for l in lines if "val_seconds" in l][-1]
    rows.append(dict(ranks=int(ranks), threads=int(threads), batch=int(batch), rate=rate,
                     examples=rate * int(batch), train=res["train_seconds"],
                     allreduce=res.get("allreduce_seconds", 0.0), val=val, params=res["parameters"],
                     loss=res["final_train_loss"]))
base = rows[0]["examples"]
print(f"model: {rows[0]['params']:,} parameters; sequences of 256 tokens\n")
print("| ranks x threads | global batch | steps/s | sequences/s | against 1 x 1 | all-reduce share of training | validation (s) | final loss |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    share = f"{100 * r['allreduce'] / r['train']:.1f}%" if r["ranks"] > 1 else "-"
    print(f"| {r['ranks']} x {r['threads']} | {r['batch']} | {r['rate']:.3f} | {r['examples']:.2f} | "
          f"{r['examples'] / base:.2f}x | {share} | {r['val']:.2f} | {r['loss']:.7f} |")
PY

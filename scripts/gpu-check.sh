#!/usr/bin/env bash
# Checks posenc on a machine with an NVIDIA GPU and a CUDA LibTorch 2.x, with
# no package mirror needed: configure and build, the whole test suite with the
# CUDA tests on, the default config trained on cuda in float32 and bf16, a
# small comparison grid on the GPU, and `posenc bench --device cuda` (eager and
# CUDA-graph steps) against the PyTorch twin on the same GPU. Writes one Markdown report.
#
# Usage: scripts/gpu-check.sh [REPORT_DIR] [STAGE ...]
#   REPORT_DIR  where gpu-report.md and the stage logs go (default runs/gpu-check)
#   STAGE       any of: build test train compare bench profile scan jobs grid determinism
#               (default: build test train compare bench, in that order)
#     profile   the large model in bf16 (none, t5): posenc's phases, and the
#               PyTorch twin's GPU time by kind of kernel (torch.profiler)
#     scan      configs/scan_published.json (xl, 50,000 steps), three seeds side
#               by side, for as long as the time allows; stopped, the runs keep
#               their checkpoints, and the next scan stage over the same folder
#               (POSENC_GPU_SCAN_DIR) continues them: 50,000 steps over several
#               GPU runs. POSENC_GPU_SCAN_BASELINE=1 adds a fourth run beside
#               them: the sinusoids at cutoff 22, the same recipe otherwise
#     jobs      the 13 runs of the ordering grid's first 8 schemes all side by
#               side, then one at a time for what time is left: runs per hour
#               (POSENC_GPU_JOBS_VALUES="13 4 1" times other --jobs values too)
#     grid      posenc compare of POSENC_GPU_GRID (default the decoder grid,
#               configs/decoder_extrapolation_compare.json) with --jobs
#               POSENC_GPU_GRID_JOBS (16) in POSENC_GPU_GRID_DIR, continued
#               there by the next grid stage if the time runs out
#     determinism the CUDA determinism cases, two copies a round beside four
#               eager SCAN trainings, for what time is left
#
# LibTorch: $TORCH_PREFIX, else the one inside python3's torch package
# (torch.utils.cmake_prefix_path). CLI11, spdlog, fmt, nlohmann_json and
# googletest, by either of two routes:
#   - installed where CMake's find_package finds them (a conda environment:
#     `conda install -c conda-forge cli11 spdlog nlohmann_json gtest`, or the
#     distribution's -dev packages); set CMAKE_PREFIX_PATH for a conda prefix;
#   - offline: ./.gpu-deps, a bundle made beforehand on a Debian machine by
#     scripts/bundle-deps.sh (from Debian's packages) and copied along.
# Environment: POSENC_GPU_BUILD (build dir, default build-gpu), POSENC_GPU_JOBS,
# POSENC_GPU_BUILD_TARGET (e.g. posenc: the command alone, without the tests,
# for a machine held only for the scan, jobs or grid stages);
# POSENC_GPU_DEADLINE (epoch seconds; stages then fit themselves before it, or
# say "not run"), POSENC_GPU_RESERVE (seconds the test stage leaves for later ones),
# POSENC_GPU_SCAN_SECONDS (the scan stage's length at most), POSENC_GPU_SCAN_RESERVE
# (seconds it leaves for the jobs stage), POSENC_GPU_SCAN_DIR (where the three
# SCAN runs live, default REPORT_DIR: carry it from one GPU machine to the next);
# POSENC_BUILD_COMMIT names the commit of a copied tree (the report and
# `posenc --version` then say it, whatever .git came along).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-runs/gpu-check}
shift || true
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build test train compare bench)
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${POSENC_GPU_BUILD:-build-gpu}
jobs=${POSENC_GPU_JOBS:-$(nproc)}
report="$out/gpu-report.md"
python=${PYTHON:-python3}
status=0

say() { echo "gpu-check: $*" >&2; }
md() { printf '%s\n' "$@" >>"$report"; }
fence() { md '```'; cat "$1" >>"$report"; md '```'; }
now() { date +%s; }
wants() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
deadline=${POSENC_GPU_DEADLINE:-0}
left() { if [ "$deadline" -gt 0 ]; then echo $((deadline - $(now))); else echo 86400; fi; }
not_run() { md "" "## $1" "" "**Not run**: $2"; say "$1: not run ($2)"; }
fail() { status=1; md "" "**FAILED: $1** (log: \`$(basename "$2")\`, last lines below)"; md "\`\`\`"; tail -n 40 "$2" >>"$report"; md '```'; }

: >"$report"
md "# posenc GPU check" ""
md "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
if [ -n "${POSENC_BUILD_COMMIT:-}" ]; then
  commit=$POSENC_BUILD_COMMIT  # what the copier said, as the build takes it (a copied .git may be stale)
elif commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
else
  commit=unknown
fi
md "- commit: $commit"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
md "- GPU: ${gpu:-none found by nvidia-smi}"
md "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
torch_info=$($python -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.compiled_with_cxx11_abi())' 2>/dev/null)
md "- python torch (version, CUDA, sees GPU, C++11 ABI): ${torch_info:-not importable}"
md "- CMake: $(cmake --version 2>/dev/null | head -1 | sed 's/^cmake version //')"

prefix=${TORCH_PREFIX:-$($python -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)}
[ -d .gpu-deps/usr ] && prefix="$root/.gpu-deps/usr;$prefix"
gtest_src=""
[ -d .gpu-deps/usr/src/googletest ] && gtest_src="$root/.gpu-deps/usr/src/googletest"
[ -z "$gtest_src" ] && [ -d /usr/src/googletest ] && gtest_src=/usr/src/googletest
bin="$root/$build/posenc"

if wants build; then
  say "configure and build in $build ($jobs jobs)"
  t0=$(now)
  # --no-as-needed: otherwise the linker drops libtorch_cuda.so, which nothing
  # calls by name, and LibTorch sees no GPU.
  configure_and_build() {  # extra cmake flags; appends to build.log
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      ${gtest_src:+-DPOSENC_GTEST_SOURCE="$gtest_src"} -DPOSENC_CUDA=ON \
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed" "$@" >>"$out/build.log" 2>&1 &&
      cmake --build "$build" -j "$jobs" ${POSENC_GPU_BUILD_TARGET:+--target "$POSENC_GPU_BUILD_TARGET"} -- -k \
        >>"$out/build.log" 2>&1
  }
  : >"$out/build.log"
  built=0
  if configure_and_build -DPOSENC_NCCL=ON; then
    built=1
  elif grep -q 'error:' "$out/build.log"; then
    # The NCCL backend compiles only against a CUDA LibTorch: if that is what
    # failed, say so and go on without it rather than lose the whole check.
    cp "$out/build.log" "$out/build-nccl-failed.log"
    md "" "**The build failed with the NCCL backend on**; its first errors (log: \`build-nccl-failed.log\`):" '```'
    grep -m 15 'error:' "$out/build-nccl-failed.log" >>"$report"
    md '```' "Built again with -DPOSENC_NCCL=OFF:"
    configure_and_build -DPOSENC_NCCL=OFF && built=1
  fi
  if [ $built = 1 ]; then
    warnings=$(grep -c 'warning:' "$out/build.log" || true)
    own=$(grep 'warning:' "$out/build.log" | grep -c -E "^($root/)?(src|include|tests)/" || true)
    md "" "## Build" "" "$(($(now) - t0)) s with $jobs jobs${POSENC_GPU_BUILD_TARGET:+ (target $POSENC_GPU_BUILD_TARGET)}; compiler warnings: $warnings ($own from posenc's own sources)."
    # The warnings themselves, so that the report says what they were (the log may not come back).
    if [ "$warnings" -gt 0 ]; then md "" "The first of them:" "" '```' "$(grep -m 10 'warning:' "$out/build.log")" '```'; fi
    md "$(grep -m1 'NCCL:' "$out/build.log" | sed 's/^-- //')"
  else
    fail "build" "$out/build.log"
    say "build failed; report in $report"
    exit 1
  fi
fi

if wants test; then
  say "test suite (CUDA tests on)"
  t0=$(now)
  limit=$(($(left) - ${POSENC_GPU_RESERVE:-0}))
  # One thread per test process: with 16 suites side by side, LibTorch's
  # default of one thread per core put up to 256 threads on 16 cores (2026-11-27:
  # the Cli suite took 163 s so, 35 s in a run with one thread each and
  # fewer suites beside it).
  (cd "$build" && OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} timeout -s TERM "$limit" \
    ctest --output-on-failure -j "$jobs" --timeout 900) >"$out/test.log" 2>&1
  rc=$?
  # A time limit stops ctest, not the test processes it started: left running,
  # they would share the GPU with the stages after this one.
  if [ $rc -eq 124 ]; then
    pkill -TERM -f "$root/$build/posenc" 2>/dev/null
    sleep 3
    pkill -KILL -f "$root/$build/posenc" 2>/dev/null
    md "" "## Test suite" "" "$(($(now) - t0)) s: stopped by the time limit ($limit s) before ctest's summary."
    md "" "The CTest suites that finished by then (the others did not finish: not run, not passed):" ""
    md "$(grep -oE 'Test +#[0-9]+: [^ ]+ [.]* *[A-Za-z*]+' "$out/test.log" | sed 's/^/    /')"
  else
    md "" "## Test suite" "" "$(($(now) - t0)) s: $(grep -E 'tests passed|tests failed' "$out/test.log" | tail -1) (CTest counts suites)"
  fi
  md "" "$(scripts/test-cases.sh "$build" | sed '2,$s/^/    /')"
  [ $rc -eq 0 ] || fail "tests" "$out/test.log"
fi

if wants train; then
  md "" "## Default config on CUDA (configs/ordering.json)" ""
  md "| precision | wall s | train s | steps/s | val acc | acc at 8 / 16 / 32 / 64 / 128 |" "|---|---|---|---|---|---|"
  for precision in float32 bf16; do
    say "train configs/ordering.json on cuda, $precision"
    dir="$out/train-$precision"
    rm -rf "$dir"
    t0=$(now)
    if "$bin" train configs/ordering.json --device cuda --set train.precision="\"$precision\"" --out "$dir" \
         --no-progress >"$out/train-$precision.log" 2>&1; then
      $python - "$dir/results.json" "$precision" "$(($(now) - t0))" >>"$report" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
accs = " / ".join(f'{x["accuracy"]:.3f}' for x in r["lengths"])
print(f'| {sys.argv[2]} | {sys.argv[3]} | {r["train_seconds"]:.1f} | {r["steps"] / r["train_seconds"]:.0f} '
      f'| {r["val_accuracy"]:.3f} | {accs} |')
EOF
    else
      fail "train $precision" "$out/train-$precision.log"
    fi
  done
fi

if wants compare; then
  say "compare configs/gpu_compare.json"
  rm -rf "$out/compare"
  t0=$(now)
  if "$bin" compare configs/gpu_compare.json --out "$out/compare" --jobs 6 --no-progress --no-figures \
       >"$out/compare.log" 2>&1; then
    md "" "## Comparison grid on the GPU (configs/gpu_compare.json, 6 runs side by side)" ""
    md "$(($(now) - t0)) s in all." ""
    cat "$out/compare/summary.md" >>"$report"
  else
    fail "compare" "$out/compare.log"
  fi
fi

if wants bench; then
  # configs/bench_gpu.json: the default size for every scheme in float32 (eager,
  # CUDA graph and PyTorch eager step times), the large model in bf16 for a few,
  # and PyTorch's torch.compile(mode="reduce-overhead") for three (it compiles
  # each case for tens of seconds).
  for variant in fp32 bf16 compile; do
    flags=(--device cuda)
    case $variant in
      fp32) flags+=(--sizes small) ;;
      bf16) flags+=(--bf16 --sizes large --schemes none,rope,alibi,t5) ;;
      compile) flags+=(--sizes small --schemes none,rope,alibi) ;;
    esac
    say "bench configs/bench_gpu.json ${flags[*]} ($variant)"
    if POSENC_BENCH_COMPILE=$([ $variant = compile ] && echo 1 || echo 0) \
         "$bin" bench configs/bench_gpu.json "${flags[@]}" --out "$out/bench-$variant" >"$out/bench-$variant.log" 2>&1; then
      md "" "## posenc bench ${flags[*]} ($variant; C++ eager and graphed vs PyTorch on the same GPU)" ""
      cat "$out/bench-$variant/bench.md" >>"$report"
    else
      fail "bench $variant" "$out/bench-$variant.log"
    fi
  done
fi

if wants profile; then
  # The large model of configs/bench_gpu.json in bf16: posenc's eager and
  # graphed step with its phases, the twin's step, and the twin's GPU time by
  # kind of kernel (POSENC_BENCH_PROFILE, scripts/step_profile.py).
  if [ "$(left)" -lt 90 ]; then
    not_run "Profile of the large model" "$(left) s were left of the time limit"
  else
    say "profile: bench the large model in bf16 (none, t5) with the twin under torch.profiler"
    rm -rf "$out/profile"
    mkdir -p "$out/profile"
    if POSENC_BENCH_PROFILE="$out/profile" timeout -s TERM "$(($(left) - 10))" "$bin" bench configs/bench_gpu.json \
         --device cuda --bf16 --sizes large --schemes none,t5 --out "$out/bench-large" >"$out/profile.log" 2>&1; then
      md "" "## The large model in bf16 (posenc bench --device cuda --bf16 --sizes large --schemes none,t5)" ""
      cat "$out/bench-large/bench.md" >>"$report"
      for f in "$out"/profile/profile-*.md; do
        [ -f "$f" ] && { md ""; sed 's/^# /### /' "$f" >>"$report"; }
      done
    else
      fail "profile" "$out/profile.log"
    fi
  fi
fi

if wants scan; then
  # Three seeds of the published SCAN recipe side by side on the GPU, for what
  # the time allows; the steps per second say how long 50,000 steps take.
  seconds=$(($(left) - ${POSENC_GPU_SCAN_RESERVE:-0} - 15))
  cap=${POSENC_GPU_SCAN_SECONDS:-0}  # at most this long, where set
  [ "$cap" -gt 0 ] && [ "$seconds" -gt "$cap" ] && seconds=$cap
  if [ "$seconds" -lt 45 ]; then
    not_run "SCAN at the published budget" "$(left) s were left of the time limit"
  else
    scan_dir=${POSENC_GPU_SCAN_DIR:-$out}
    mkdir -p "$scan_dir"
    # Each run: its directory name, then what it sets beside train.steps=50000.
    runs=("scan-seed0 train.seed=0" "scan-seed1 train.seed=1" "scan-seed2 train.seed=2")
    # The sinusoidal baseline at the usual cutoff of 22 (published: 0%), where asked for.
    baseline="scan22-sinusoidal-seed0 train.seed=0 model.positional.type=\"sinusoidal\" task.cutoff=22"
    baseline+=" task.max_length=22 eval.lengths=[24,25,26,27,28,30,32,33,36,40,48]"
    [ "${POSENC_GPU_SCAN_BASELINE:-0}" = 1 ] && runs+=("$baseline")
    say "scan: configs/scan_published.json, 50,000 steps, ${#runs[@]} runs side by side in $scan_dir, for $seconds s"
    pids=()
    for spec in "${runs[@]}"; do
      read -ra words <<<"$spec"
      name=${words[0]}
      set_args=()
      for kv in "${words[@]:1}"; do set_args+=(--set "$kv"); done
      # --resume=auto: a run that a previous GPU machine stopped goes on from its checkpoint.
      timeout -s TERM "$seconds" "$bin" train configs/scan_published.json --device "${POSENC_GPU_DEVICE:-cuda}" \
        --set train.steps=50000 "${set_args[@]}" --out "$scan_dir/$name" --resume=auto \
        --no-progress >"$out/$name.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    md "" "## SCAN, published recipe (configs/scan_published.json, 50,000 steps): ${#runs[@]} runs side by side" ""
    md "Each run had $seconds s (stopped by SIGTERM, which checkpoints it, unless finished)." ""
    md "| run | from step | to step | steps/s (last logged) | the rest would take | test exact match |" \
      "|---|---:|---:|---:|---:|---|"
    for spec in "${runs[@]}"; do
      name=${spec%% *}
      $python - "$scan_dir/$name" "$name" "$out/$name.log" >>"$report" <<'EOF'
import json, os, re, sys
run, seed, log = sys.argv[1:4]
resumed = re.search(r"resuming \S+ at step (\d+)", open(log).read()) if os.path.exists(log) else None
start = int(resumed.group(1)) if resumed else 0
path = os.path.join(run, "metrics.jsonl")
rows = [json.loads(l) for l in open(path) if '"steps_per_s"' in l] if os.path.exists(path) else []
if not rows:
    print(f"| {seed} | {start} | - | - | - | no step logged (see {seed}.log) |")
    sys.exit()
last = rows[-1]
done = os.path.join(run, "results.json")
if os.path.exists(done):  # pooled over the test lengths, as scripts/scan_table.py pools them
    lengths = json.load(open(done))["lengths"]
    score = "%.3f" % (sum(x["correct"] for x in lengths) / sum(x["n"] for x in lengths))
else:
    score = "not finished"
rest = (50000 - last["step"]) / last["steps_per_s"] / 60
print(f'| {seed} | {start} | {last["step"]} | {last["steps_per_s"]:.1f} | {rest:.0f} min | {score} |')
EOF
    done
  fi
fi

if wants jobs; then
  # The ordering grid's first 8 schemes x both q,k,v variants where the scheme
  # offers them (13 runs of 2000 steps): all side by side, then one at a time
  # for what time is left.
  if [ "$(left)" -lt 60 ]; then
    not_run "Runs side by side against one at a time" "$(left) s were left of the time limit"
  else
    $python - configs/ordering_compare.json "$out/jobs-grid.json" <<'EOF'
import json, os, sys
g = json.load(open(sys.argv[1]))
g["base"] = os.path.abspath(os.path.join(os.path.dirname(sys.argv[1]), g["base"]))
g["schemes"] = g["schemes"][:8]
g.pop("full", None)
json.dump(g, open(sys.argv[2], "w"), indent=1)
EOF
    planned=$("$bin" compare "$out/jobs-grid.json" --out "$out/jobs-plan" --status 2>/dev/null | grep -cE '^[^ ]+ +pending ')
    md "" "## Runs side by side against one at a time ($planned runs: configs/ordering_compare.json's first 8 schemes, both q,k,v where offered)" ""
    md "| --jobs | runs finished | wall s | runs per hour | train s per run (median) |" "|---:|---:|---:|---:|---:|"
    # POSENC_GPU_JOBS_VALUES: the --jobs values to time, in order (default: all side by side, then 1).
    for j in ${POSENC_GPU_JOBS_VALUES:-$planned 1}; do
      seconds=$(($(left) - 10))
      if [ "$seconds" -lt 20 ]; then
        md "| $j | not run: $(left) s were left | | | |"
        continue
      fi
      say "jobs: compare --jobs $j for at most $seconds s"
      rm -rf "$out/jobs-$j"
      t0=$(now)
      timeout -s TERM "$seconds" "$bin" compare "$out/jobs-grid.json" --out "$out/jobs-$j" --jobs "$j" --no-progress \
        --no-figures >"$out/jobs-$j.log" 2>&1
      wall=$(($(now) - t0))
      finished=$(find "$out/jobs-$j" -path '*/runs/*' -name results.json 2>/dev/null | wc -l)
      train=$(find "$out/jobs-$j" -path '*/runs/*' -name results.json -print0 2>/dev/null | xargs -0 -r $python -c '
import json, statistics, sys
print("%.1f" % statistics.median(json.load(open(f))["train_seconds"] for f in sys.argv[1:]))')
      md "| $j | $finished of $planned | $wall | $((finished * 3600 / (wall > 0 ? wall : 1))) | ${train:--} |"
    done
  fi
fi

if wants grid; then
  # One comparison grid on the GPU (by default the decoder grid of the
  # length-generalization schemes), for what the time allows; stopped, its
  # runs keep their checkpoints, and the same stage over the same folder
  # (POSENC_GPU_GRID_DIR) continues it.
  grid=${POSENC_GPU_GRID:-configs/decoder_extrapolation_compare.json}
  grid_dir=${POSENC_GPU_GRID_DIR:-$out/grid}
  grid_jobs=${POSENC_GPU_GRID_JOBS:-16}
  seconds=$(($(left) - 10))
  if [ "$seconds" -lt 60 ]; then
    not_run "posenc compare $grid" "$(left) s were left of the time limit"
  else
    say "grid: compare $grid --jobs $grid_jobs in $grid_dir for at most $seconds s"
    t0=$(now)
    timeout -s TERM "$seconds" "$bin" compare "$grid" --out "$grid_dir" --jobs "$grid_jobs" --no-progress \
      --no-figures >"$out/grid.log" 2>&1
    rc=$?
    md "" "## posenc compare $grid --jobs $grid_jobs on the GPU" ""
    finished=$(find "$grid_dir" -path '*/runs/*' -name results.json 2>/dev/null | wc -l)
    if [ $rc -eq 0 ] && [ -f "$grid_dir/summary.md" ]; then
      md "$(($(now) - t0)) s in this stage; runs finished: $finished." ""
      cat "$grid_dir/summary.md" >>"$report"
    elif [ $rc -eq 124 ]; then
      md "Stopped by the time limit after $(($(now) - t0)) s (runs finished: $finished); the same stage over" \
        "the same folder (POSENC_GPU_GRID_DIR=$grid_dir) continues it."
    else
      fail "grid" "$out/grid.log"
    fi
  fi
fi

if wants determinism; then
  # The CUDA determinism cases (two runs of one config with train.deterministic
  # must end bit-equal, for every scheme) with the GPU busy: four eager SCAN
  # trainings and a second copy of the cases beside each copy, in rounds of two
  # copies for what the time allows. Alone on the GPU the cases hide races
  # between the host and the GPU's streams that a shared GPU shows.
  tests_bin="$root/$build/posenc_tests"
  if [ "$(left)" -lt 90 ] || [ ! -x "$tests_bin" ]; then
    not_run "Determinism under load" "$(left) s were left of the time limit, or $tests_bin was not built"
  else
    load_seconds=$(($(left) - 20))
    say "determinism: the CUDA determinism cases beside four SCAN trainings, for at most $load_seconds s"
    load=()
    for s in 0 1 2 3; do  # 50,000 steps: they outlast the rounds, which stop them
      timeout -s TERM "$load_seconds" "$bin" train configs/scan_published.json --device cuda --set train.seed=$s \
        --set train.steps=50000 \
        --out "$out/det-load-$s" --no-progress >"$out/det-load-$s.log" 2>&1 &
      load+=($!)
    done
    md "" "## Determinism under load: \`*Cuda*Deterministic*\`, two copies a round beside four SCAN trainings" ""
    md "| round | copy | s | cases passed | cases failed (where the runs part) |" "|---:|---|---:|---:|---|"
    round=0
    while [ "$(left)" -gt 130 ]; do
      round=$((round + 1))
      t0=$(now)
      copies=()
      for copy in a b; do
        (cd "$build" && OMP_NUM_THREADS=1 timeout 120 "$tests_bin" --gtest_filter='*Cuda*Deterministic*' \
          >"$out/det-$round-$copy.log" 2>&1) &
        copies+=($!)
      done
      wait "${copies[@]}"
      for copy in a b; do
        f="$out/det-$round-$copy.log"
        passed=$(grep -cE '^\[       OK \]' "$f")
        # Each failed case, with where each of its pairs of runs parted.
        failed=$(grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$f" |
          sed -E 's/.*\/([a-z0-9_]+), where.*/\1/; s/^\[  FAILED  \] ([^ ]+).*/\1/' |
          while read -r name; do
            where=$(grep -E "^$name logging every [0-9]+ steps: parameter" "$f" |
              sed -E 's/: parameter [0-9]+;.*first differ at step ([0-9]+).*/ parted at step \1/; s/: parameter [0-9]+;.*equal at every logged step.*/: losses equal, weights not/' |
              sort -u | paste -sd, - | sed 's/,/, /g')
            printf '%s; ' "${where:-$name}"
          done)
        md "| $round | $copy | $(($(now) - t0)) | $passed | ${failed:-none} |"
      done
    done
    kill -TERM "${load[@]}" 2>/dev/null
    wait "${load[@]}" 2>/dev/null
    [ $round -eq 0 ] && md "| - | - | - | - | not run: $(left) s were left |"
    md "" "The case names the step at which its two runs' logged losses first part."
  fi
fi

say "report: $report"
exit $status

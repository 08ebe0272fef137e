#!/usr/bin/env bash
# Checks posenc on a machine with an NVIDIA GPU and a CUDA LibTorch 2.x, with
# no package mirror needed: configure and build, the whole test suite with the
# CUDA tests on, the default config trained on cuda in float32 and bf16, a
# small comparison grid on the GPU, and `posenc bench --device cuda` (eager and
# CUDA-graph steps) against the PyTorch twin on the same GPU. Writes one Markdown report.
#
# Usage: scripts/gpu-check.sh [REPORT_DIR] [STAGE ...]
#   REPORT_DIR  where gpu-report.md and the stage logs go (default runs/gpu-check)
#   STAGE       any of: build test train compare bench (default: all, in that order)
#
# LibTorch: $TORCH_PREFIX, else the one inside python3's torch package
# (torch.utils.cmake_prefix_path). CLI11, spdlog, fmt, nlohmann_json and
# googletest, by either of two routes:
#   - installed where CMake's find_package finds them (a conda environment:
#     `conda install -c conda-forge cli11 spdlog nlohmann_json gtest`, or the
#     distribution's -dev packages); set CMAKE_PREFIX_PATH for a conda prefix;
#   - offline: ./.gpu-deps, a bundle made beforehand on a Debian machine by
#     scripts/bundle-deps.sh (from Debian's packages) and copied along.
# Environment: POSENC_GPU_BUILD (build dir, default build-gpu), POSENC_GPU_JOBS;
# POSENC_BUILD_COMMIT names the commit of a tree copied without .git (the
# report and `posenc --version` then say it).
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
fail() { status=1; md "" "**FAILED: $1** (log: \`$(basename "$2")\`, last lines below)"; md "\`\`\`"; tail -n 40 "$2" >>"$report"; md '```'; }

: >"$report"
md "# posenc GPU check" ""
md "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
if commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  git diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
else
  commit=${POSENC_BUILD_COMMIT:-unknown}  # a copied tree: what the copier said, as the build takes it
fi
md "- commit: $commit"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
md "- GPU: ${gpu:-none found by nvidia-smi}"
md "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
torch_info=$($python -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.compiled_with_cxx11_abi())' 2>/dev/null)
md "- python torch (version, CUDA, sees GPU, C++11 ABI): ${torch_info:-not importable}"

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
  if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
       ${gtest_src:+-DPOSENC_GTEST_SOURCE="$gtest_src"} -DPOSENC_CUDA=ON \
       -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed" >"$out/build.log" 2>&1 &&
     cmake --build "$build" -j "$jobs" -- -k >>"$out/build.log" 2>&1; then
    warnings=$(grep -c 'warning:' "$out/build.log" || true)
    own=$(grep 'warning:' "$out/build.log" | grep -c -E "^($root/)?(src|include|tests)/" || true)
    md "" "## Build" "" "$(($(now) - t0)) s with $jobs jobs; compiler warnings: $warnings ($own from posenc's own sources)."
    grep -m1 'libtorch=' "$out/build.log" >/dev/null || true
  else
    fail "build" "$out/build.log"
    say "build failed; report in $report"
    exit 1
  fi
fi

if wants test; then
  say "test suite (CUDA tests on)"
  t0=$(now)
  (cd "$build" && ctest --output-on-failure -j "$((jobs < 8 ? jobs : 8))" --timeout 900) >"$out/test.log" 2>&1
  rc=$?
  md "" "## Test suite" "" "$(($(now) - t0)) s: $(grep -E 'tests passed|tests failed' "$out/test.log" | tail -1) (CTest counts suites)"
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

say "report: $report"
exit $status

# Sourced by test-kernel-paths.sh and test-seeds.sh: the suites whose checks
# compare floating-point results or rest on random draws (data parallel against
# one process, fused against explicit attention, golden values, the schemes'
# formulas, the CPU side of the CUDA checks, the PyTorch twin's loss), as one
# GoogleTest filter, and the function that reruns them.
# Data parallel: the cases that compare a run on two ranks with one process, not
# those about launching and stopping ranks, which compare no number.
numeric_suites="DataParallel.TwoGlooRanksMatchOneProcess:DataParallel.SigtermToOneRank*:DataParallel.AnSrunStep*"
numeric_suites+=":DataParallel.OnCuda*:Golden.*:FastPath.*:Cuda.*:Registry/CudaEveryScheme.*:Bench.PythonTwinComputesTheSameLoss"
numeric_suites+=":BatchedMatmul.*:FusedAdamW.*:GradClip.*:Registry/EveryScheme.*:Registry/EverySchemeCausally.*"
numeric_suites+=":Sinusoidal.*:Rope.*:Layouts/RopeLayouts.*:RopeScaling.*:Xpos.*:Alibi.*:Kerple.*:Sandwich.*:T5.*"
numeric_suites+=":StickBreaking.Weights*:StickBreaking.KvCache*"
numeric_suites+=":AttentionWindow.AQuery*:AttentionWindow.RopeWithAWindow*:AttentionWindow.KvCache*:AttentionWindow.Padded*"
numeric_suites+=":QkNorm.Weights*:QkNorm.NoLogit*:QkNorm.EverySchemes*:QkNorm.AnEncoderDecoder*"
numeric_suites+=":Shaw.*:Xl.*:Cope.*:Fox.*:PathScheme.*:Decay.*:Ape.*:Da.*:Dape.*:Learned.*:ScalableSoftmax.*:LogNScaling.*:AttentionTemperature.*:LogitScale.*"
numeric_suites+=":HeadScale.Weights*:HeadScale.AtOne*:HeadScale.KvCache*:HeadScale.Tuning*"
# The probe's fits (a least-squares solve, and L-BFGS for the logistic classifier), not its CLI cases.
numeric_suites+=":Probe.RecoversALinearTargetAndFindsNothingInNoise:Probe.TheClassifier*:Probe.TheLogistic*"

# Of those, the cases whose random draws a rerun under another POSENC_TEST_SEED
# would only repeat: they train in a posenc process seeded by its config, or
# seed the generator themselves. test-seeds.sh leaves them out (they are about
# half the suites' time); the kernel-path reruns keep them.
seed_fixed_cases="DataParallel.*:Bench.PythonTwinComputesTheSameLoss:LogitScale.TheConfigRefuses*"
seed_fixed_cases+=":LogNScaling.TheConfigRefuses*:HeadScale.Tuning*:Probe.RecoversALinearTargetAndFindsNothingInNoise"

# rerun_numeric_suites TESTS PREFIX NAME VAR=VALUE [LEFT_OUT]: runs the suites of
# the test binary TESTS with VAR=VALUE in the environment, less the cases of the
# GoogleTest patterns LEFT_OUT, prints one line (PREFIX NAME: passed or FAILED,
# the time, GoogleTest's count) and, on failure, the failures; returns the
# binary's exit status.
rerun_numeric_suites() {
  local tests=$1 prefix=$2 name=$3 setting=$4 left_out=${5:-} log start rc took summary filter
  filter=$numeric_suites
  [ -n "$left_out" ] && filter+="-$left_out"
  log=$(mktemp)
  start=$(date +%s)
  env "$setting" "$tests" --gtest_filter="$filter" --gtest_brief=1 >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  summary=$(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ tests?' "$log" | tr '\n' ' ')
  if [ $rc -eq 0 ]; then
    echo "$prefix $name: passed in ${took} s: $summary"
  else
    echo "$prefix $name: FAILED (exit $rc) in ${took} s: $summary"
    grep -E '^\[  FAILED  \]|Failure|Expected|actual|Which is|^posenc_tests:' "$log" | head -40
  fi
  rm -f "$log"
  return $rc
}

# check_numeric_patterns TESTS: fails, naming it, on a pattern of the lists above
# that matches no test of TESTS (a renamed test would else drop out of the reruns
# unseen). GoogleTest's patterns are globs, as bash's == matches them.
check_numeric_patterns() {
  local tests=$1 names=() suite line pattern name found unmatched=0
  while IFS= read -r line; do
    if [[ $line != " "* ]]; then
      suite=$line
    else
      line=${line#  }
      names+=("$suite${line%%  #*}")
    fi
  done < <("$tests" --gtest_list_tests)
  IFS=: read -ra patterns <<<"$numeric_suites:$seed_fixed_cases"
  for pattern in "${patterns[@]}"; do
    found=0
    for name in "${names[@]}"; do
      # shellcheck disable=SC2053  # the pattern is a glob on purpose
      if [[ $name == $pattern ]]; then found=1; break; fi
    done
    [ $found -eq 1 ] || { echo "numeric suites: '$pattern' matches no test of $tests" >&2; unmatched=1; }
  done
  return $unmatched
}

# Sourced by test-kernel-paths.sh and test-seeds.sh: the suites whose checks
# compare floating-point results or rest on random draws (data parallel against
# one process, fused against explicit attention, golden values, the schemes'
# formulas, the CPU side of the CUDA checks, the PyTorch twin's loss), as one
# GoogleTest filter, and the function that reruns them.
numeric_suites="DataParallel.*:Golden.*:FastPath.*:Cuda.*:Registry/CudaEveryScheme.*:Bench.PythonTwinComputesTheSameLoss"
numeric_suites+=":BatchedMatmul.*:FusedAdamW.*:GradClip.*:Registry/EveryScheme.*:Registry/EverySchemeCausally.*"
numeric_suites+=":Sinusoidal.*:Rope.*:Layouts/RopeLayouts.*:RopeScaling.*:Xpos.*:Alibi.*:Kerple.*:Sandwich.*:T5.*"
numeric_suites+=":StickBreaking.Weights*:StickBreaking.KvCache*"
numeric_suites+=":AttentionWindow.AQuery*:AttentionWindow.RopeWithAWindow*:AttentionWindow.KvCache*:AttentionWindow.Padded*"
numeric_suites+=":QkNorm.Weights*:QkNorm.NoLogit*:QkNorm.EverySchemes*:QkNorm.AnEncoderDecoder*"
numeric_suites+=":Shaw.*:Xl.*:Cope.*:Fox.*:Decay.*:Ape.*:Da.*:Dape.*:Learned.*:ScalableSoftmax.*:LogNScaling.*:AttentionTemperature.*:HeadScale.*:LogitScale.*"
# The probe's fits (a least-squares solve, and L-BFGS for the logistic classifier), not its CLI cases.
numeric_suites+=":Probe.RecoversALinearTargetAndFindsNothingInNoise:Probe.TheClassifier*:Probe.TheLogistic*"

# rerun_numeric_suites TESTS PREFIX NAME VAR=VALUE: runs the suites of the test
# binary TESTS with VAR=VALUE in the environment, prints one line (PREFIX NAME:
# passed or FAILED, the time, GoogleTest's count) and, on failure, the failures;
# returns the binary's exit status.
rerun_numeric_suites() {
  local tests=$1 prefix=$2 name=$3 setting=$4 log start rc took summary
  log=$(mktemp)
  start=$(date +%s)
  env "$setting" "$tests" --gtest_filter="$numeric_suites" --gtest_brief=1 >"$log" 2>&1
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

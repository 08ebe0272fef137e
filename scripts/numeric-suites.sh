# Sourced by test-kernel-paths.sh and test-seeds.sh: the suites whose checks
# compare floating-point results or rest on random draws (data parallel against
# one process, fused against explicit attention, golden values, the schemes'
# formulas, the CPU side of the CUDA checks, the PyTorch twin's loss), as one
# GoogleTest filter.
numeric_suites="DataParallel.*:Golden.*:FastPath.*:Cuda.*:Registry/CudaEveryScheme.*:Bench.PythonTwinComputesTheSameLoss"
numeric_suites+=":BatchedMatmul.*:FusedAdamW.*:GradClip.*:Registry/EveryScheme.*:Registry/EverySchemeCausally.*"
numeric_suites+=":Sinusoidal.*:Rope.*:Layouts/RopeLayouts.*:RopeScaling.*:Xpos.*:Alibi.*:Kerple.*:Sandwich.*:T5.*"
numeric_suites+=":Shaw.*:Xl.*:Cope.*:Fox.*:Decay.*:Ape.*:Da.*:Dape.*:Learned.*:ScalableSoftmax.*:LogNScaling.*:HeadScale.*:LogitScale.*"
# The probe's fits (a least-squares solve, and L-BFGS for the logistic classifier), not its CLI cases.
numeric_suites+=":Probe.RecoversALinearTargetAndFindsNothingInNoise:Probe.TheClassifier*:Probe.TheLogistic*"

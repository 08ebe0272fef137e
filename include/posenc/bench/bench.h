// `posenc bench`: time, memory and FLOPs of one training step and one
// evaluation forward per scheme and attention variant, at the sizes of a
// bench file (configs/bench.json), against the machine's own matrix-product
// peak, and (with scripts/bench_eager.py) against PyTorch eager.
//
// The bench file, e.g.
//   {"base": "ordering.json", "schemes": ["none", "rope", {"name": "rope-interleaved", "set": {...}}],
//    "qkv": ["projected"], "sizes": [{"name": "small", "batch_size": 64, "length": 16, "timed": 50}]}
// Its keys are declared once: bench_file_keys() and, in each size, bench_size_keys() (`posenc list` prints them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/config.h"
#include "posenc/config_overlay.h"

namespace posenc {

struct BenchCase {
  std::string size, scheme, qkv;  ///< scheme: the bench file's name for the entry
  Config config;
  int64_t batch = 0, length = 0;
  int warmup = 0, timed = 0;
  std::string skipped;  ///< non-empty: the model cannot be built this way
};

/// The top-level keys of a bench file.
const std::vector<FileKey>& bench_file_keys();
/// The numbers of each of its sizes (beside "name" and "set").
const std::vector<OptionSpec>& bench_size_keys();

/// Expands a bench file; `only_sizes`/`only_schemes` filter by name when non-empty.
std::vector<BenchCase> plan_bench(const std::string& path, const std::vector<std::string>& only_sizes,
                                  const std::vector<std::string>& only_schemes, int64_t threads,
                                  const std::string& device);

struct BenchResult {
  int64_t parameters = 0;
  double train_ms = 0, train_ms_min = 0;  ///< median and fastest step (forward, backward, clip, AdamW)
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;  ///< medians of the step's phases (clip + AdamW)
  double eval_ms = 0;                                        ///< median evaluation forward (inference mode)
  double tokens_per_s = 0;                                   ///< batch * length / train_ms
  double peak_mb = 0;                                        ///< CPU: peak RSS during the case; CUDA: allocator peak
  double flops_per_step = 0;                                 ///< 3 x forward FLOPs (backward counted as 2 x forward)
  double gflops_per_s = 0;                                   ///< flops_per_step / train_ms
  double initial_loss = 0;  ///< loss of the initial weights on the batch (parity check)
  /// Median step replayed from a CUDA graph (train.cuda_graphs); 0 where not
  /// run (the CPU, a build without graphs, a scheme that cannot be captured).
  double graph_ms = 0;
};

/// Builds the case's model (seeded by train.seed), runs warmup + timed steps on
/// one fixed batch of the ordering task and measures them. explicit_attention
/// forces the explicit attention path where the fused one would be taken.
BenchResult run_bench_case(const BenchCase& c, bool bf16, bool explicit_attention = false);

/// Median GFLOP/s of square matrix products on the device with `threads`
/// intra-op threads, as the cases run, in float32 (without TF32) or, with
/// `bf16`, in bfloat16 (sizes 256..1024 on the CPU, 1024..8192 on CUDA; best size).
double matmul_peak_gflops(const std::string& device, int64_t threads, bool bf16 = false);

/// Writes the case's initial weights (weights.bin: float32, weights.json: name, shape, offset),
/// its batch and its initial loss into dir, for scripts/bench_eager.py's parity check.
void export_bench_case(const BenchCase& c, const std::string& dir);

nlohmann::json bench_case_json(const BenchCase& c);

}  // namespace posenc

namespace posenc {

struct BenchOptions {
  std::string config = "configs/bench.json";  ///< the bench file
  std::vector<std::string> sizes;             ///< only these sizes (names); empty = all
  std::vector<std::string> schemes;           ///< only these scheme entries; empty = all
  int64_t threads = 1;
  std::string device = "cpu";
  bool bf16 = false;  ///< autocast the forward to bfloat16
  /// "auto": the fused SDPA path where the scheme allows it (LibTorch 2.x);
  /// "explicit": always the explicit scores, on both sides (to measure what SDPA buys)
  std::string attention = "auto";
  bool python = true;              ///< also time scripts/bench_eager.py (PyTorch eager) and check parity
  std::string out = "runs/bench";  ///< bench.json, the PyTorch side's files
};

/// Runs the bench, prints the table, writes OUT/bench.json. Returns the exit status.
int run_benchmark(const BenchOptions& options);

}  // namespace posenc

// Start-up facts worth a log line: LibTorch version, threads, the live BLAS.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace posenc {

/// The git commit posenc was built from, with "-dirty" when tracked files
/// differed from it ("unknown" when built outside a git checkout); written at
/// build time by cmake/build_commit.cmake.
const char* build_commit();
/// The source tree posenc was built from (where find_script looks last for
/// scripts/); written with build_commit().
const char* build_source_dir();
/// "posenc <commit> (LibTorch <version>)", for --version.
std::string version_line();
/// Which libblas.so.3 the alternatives system points at (OpenBLAS or the slow reference BLAS).
std::string live_blas();
/// The kernels OpenBLAS chose for this CPU ("Haswell", "SkylakeX", "Cooperlake",
/// ...; OPENBLAS_CORETYPE overrides the choice), or "unknown" where the BLAS in
/// the process is not OpenBLAS. Matrix products differ in their last bits
/// between kernels, and training amplifies that: the same config and seed can
/// score differently on two machines (docs/platforms.md).
std::string blas_kernels();
/// What an x86-64 CPU's vector units let OpenBLAS's kernels use.
struct CpuVectorUnits {
  bool avx2_fma = false;  ///< AVX2 and FMA (OpenBLAS's Haswell kernels)
  bool avx512 = false;    ///< AVX-512 F, CD, BW, DQ and VL (SkylakeX)
};
/// This CPU's, as the CPU and the operating system report them (all false off x86-64).
CpuVectorUnits cpu_vector_units();
/// The OpenBLAS kernels to use instead of `picked` on a CPU with `units`,
/// best first, or none where `picked` is to stay. OpenBLAS picks the widest
/// kernels a CPU runs when it knows the CPU; kernels narrower than the CPU's
/// widest vector unit mean it did not: each wider set the CPU runs is a
/// candidate, SkylakeX (AVX-512) before Haswell (AVX2 and FMA), for an
/// OpenBLAS that lacks the first. A name this rule does not list (not
/// OpenBLAS, or kernels newer than it) is left alone. (OpenBLAS's Cooperlake
/// and SapphireRapids kernels add bfloat16 products to SkylakeX's, which
/// float32 training does not call, and OpenBLAS 0.3.21 cannot be told to use
/// Cooperlake by name.)
std::vector<std::string> faster_blas_kernels(const std::string& picked, const CpuVectorUnits& units);
/// Called first in main, before any matrix product. OpenBLAS 0.3.21 (Debian
/// 12's) takes Intel's family 6 model 207 for an older CPU and runs its SSE3
/// "Prescott" kernels there, on which a small decoder trains 2-3x slower than
/// on the AVX-512 kernels the CPU runs (AVX2 kernels on an AVX-512 CPU: 15-25%
/// slower, measured on AMD's Zen 5). Where faster_blas_kernels names
/// candidates, this switches OpenBLAS to the first one it has. Every posenc
/// process does so for its own CPU; nothing is handed down to the processes it
/// starts, which may run on other machines.
/// Leaves everything alone where the user set OPENBLAS_CORETYPE (their choice,
/// e.g. to reproduce a result) and where the BLAS is not an OpenBLAS built for
/// several CPUs.
void use_the_cpus_blas_kernels();
/// The kernels OpenBLAS picked itself where use_the_cpus_blas_kernels replaced them, else "".
std::string replaced_blas_kernels();
/// What a result depends on beyond its config, for results.json and
/// results_eval.json: posenc's commit, the device, LibTorch's version, the
/// live BLAS and its kernels (and OpenBLAS's own pick, as
/// `blas_kernels_replaced`, where posenc replaced it), and the kernel
/// overrides a user set (OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY).
nlohmann::json numeric_environment(const std::string& device);
/// Makes glibc malloc keep freed memory for reuse instead of handing it back
/// to the kernel (called first thing in main). A training step frees and
/// re-allocates the same activations every step; with glibc's defaults the
/// large ones are unmapped or trimmed and come back as fresh zeroed pages,
/// which cost 12% of a step at width 512, length 512 (posenc bench). Left
/// alone when the user set MALLOC_* or GLIBC_TUNABLES. Returns what it did,
/// for the start-up log line: "tuned", "user" or "default" (not glibc).
const char* tune_malloc_for_training();
/// Subnormal floats flushed to zero on the calling thread (x86 SSE; false where unsupported).
bool flush_denormals();
/// Logs posenc's commit, LibTorch version, CUDA availability, intra-op threads and the live BLAS and its kernels.
void log_environment();

}  // namespace posenc

// Start-up facts worth a log line: LibTorch version, threads, the live BLAS.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace posenc {

/// The git commit posenc was built from, with "-dirty" when tracked files
/// differed from it ("unknown" when built outside a git checkout); written at
/// build time by cmake/build_commit.cmake.
const char* build_commit();
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
/// What a result depends on beyond its config, for results.json and
/// results_eval.json: posenc's commit, the device, LibTorch's version, the
/// live BLAS and its kernels, and the kernel overrides a user set
/// (OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY).
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

// Start-up facts worth a log line: LibTorch version, threads, the live BLAS.
#pragma once

#include <string>

namespace posenc {

/// Which libblas.so.3 the alternatives system points at (OpenBLAS or the slow reference BLAS).
std::string live_blas();
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
/// Logs LibTorch version, CUDA availability, intra-op threads and the live BLAS.
void log_environment();

}  // namespace posenc

// Start-up facts worth a log line: LibTorch version, threads, the live BLAS.
#pragma once

#include <string>

namespace posenc {

/// Which libblas.so.3 the alternatives system points at (OpenBLAS or the slow reference BLAS).
std::string live_blas();
/// Logs LibTorch version, CUDA availability, intra-op threads and the live BLAS.
void log_environment();

}  // namespace posenc

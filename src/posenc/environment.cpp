#include "posenc/environment.h"

#include <filesystem>

#include <torch/version.h>

namespace posenc {

std::string live_blas() {
  std::error_code ec;
  const auto target = std::filesystem::canonical("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", ec);
  return ec ? std::string("unknown") : target.string();
}

void log_environment() {
  const std::string blas = live_blas();
  spdlog::info("libtorch={} cuda={} threads={} blas={}", TORCH_VERSION, torch::cuda::is_available() ? "yes" : "no",
               torch::get_num_threads(), blas);
  if (blas.find("openblas") == std::string::npos && blas != "unknown")
    spdlog::warn("the live BLAS is not OpenBLAS: matrix products run ~15x slower (install libopenblas0-openmp)");
}

}  // namespace posenc

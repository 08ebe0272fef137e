// The suite's main: GoogleTest's, after the start-up step posenc's own main
// takes that changes numbers, so that the suite tests what posenc runs.
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "posenc/environment.h"

namespace {

/// POSENC_TEST_SEED=N seeds the random draws of the tests that take no seed of
/// their own. A test whose verdict changes with N rests on a lucky draw: on
/// another CPU (whose kernels draw other numbers) or another LibTorch it fails.
/// scripts/test-seeds.sh runs the fast suites under several seeds.
bool seed_from_environment() {
  const char* value = std::getenv("POSENC_TEST_SEED");
  if (value == nullptr || *value == '\0') return true;
  try {
    // stoull would wrap a leading minus around to a huge seed.
    if (*value == '-') throw std::invalid_argument("negative");
    std::size_t used = 0;
    const unsigned long long seed = std::stoull(value, &used);
    if (used != std::string(value).size()) throw std::invalid_argument("trailing characters");
    torch::manual_seed(static_cast<uint64_t>(seed));
    std::cout << "posenc_tests: POSENC_TEST_SEED=" << seed << " seeds the tests that take no seed of their own\n";
    return true;
  } catch (const std::exception&) {
    std::cerr << "posenc_tests: POSENC_TEST_SEED must be a non-negative integer, not '" << value << "'\n";
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS's kernels as posenc's main chooses them (each posenc the suite
  // starts makes the same choice itself: nothing is handed down).
  posenc::use_the_cpus_blas_kernels();
  // One intra-op thread, as posenc's runs take by default (train.threads): CTest
  // runs two suites side by side and scripts/test.sh its reruns, so LibTorch's
  // default of a thread per core put two or three spinning OpenMP threads on
  // each core. Under LibTorch 2.6 two Probe+Addition runs side by side took
  // 185 s with a thread per core and 76 s with one thread each (1.13: 55 s and
  // 58 s; docs/platforms.md, "CI").
  torch::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  if (!seed_from_environment()) return 2;
  return RUN_ALL_TESTS();
}

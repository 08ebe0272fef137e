// The suite's main: GoogleTest's, after the start-up step posenc's own main
// takes that changes numbers, so that the suite tests what posenc runs.
#include <gtest/gtest.h>

#include "posenc/environment.h"

int main(int argc, char** argv) {
  // OpenBLAS's kernels as posenc's main chooses them (each posenc the suite
  // starts makes the same choice itself: nothing is handed down).
  posenc::use_the_cpus_blas_kernels();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

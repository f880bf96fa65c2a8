// The one main of the CUDA unit tests (test_cuda_ops, test_cuda_train, test_cuda_weights,
// test_cuda_inference): exit 77, which ctest reports as skipped, when the CUDA runtime sees no device;
// otherwise doctest with the command line. XTRAIN_TEST_NAME (tests/unit/CMakeLists.txt) names the test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "backend/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  // cuda_device_available() is cudaGetDeviceCount() > 0, with the no-driver error cleared.
  if (!xtrain::cuda_device_available()) {
    std::printf("%s: no CUDA device visible, skipped\n", XTRAIN_TEST_NAME);
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

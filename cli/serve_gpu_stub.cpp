// serve_gpu.cpp's entry point in a build without CUDA.
#include "serve_executor.h"
#include "tripath/error.h"

namespace tripath::cli {

std::unique_ptr<ServeExecutor> make_gpu_executor(const ExecutorConfig& config) {
  throw Error("serve: backend '" + config.backend +
              "' runs on the GPU, and this build has no CUDA (configure with -DTRIPATH_CUDA=ON)");
}

}  // namespace tripath::cli

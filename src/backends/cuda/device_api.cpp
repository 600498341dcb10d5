// tripath/device.h on CUDA.
#include <cuda_runtime.h>

#include <utility>

#include "cuda_util.h"
#include "tripath/device.h"

namespace tripath {

DeviceAllocation::DeviceAllocation(size_t bytes) : bytes_(bytes) {
  TRIPATH_CUDA_CHECK(cudaMalloc(&data_, bytes > 0 ? bytes : 16));
}
DeviceAllocation::~DeviceAllocation() {
  if (data_ != nullptr) cudaFree(data_);
}
DeviceAllocation::DeviceAllocation(DeviceAllocation&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  TRIPATH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  TRIPATH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void device_synchronize() {
  TRIPATH_CUDA_CHECK(cudaDeviceSynchronize());
  TRIPATH_CUDA_CHECK(cudaGetLastError());
}

std::vector<double> time_gpu_calls(const std::function<void(void*)>& call, int warmup,
                                   int repeats, bool use_graph, bool* graph_used) {
  cudaStream_t stream;
  TRIPATH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  if (use_graph) {
    cudaGraph_t graph = nullptr;
    bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) {
      try {
        call(stream);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        throw;
      }
      ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
           cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!ok) {
      exec = nullptr;
      cudaGetLastError();
    }
  }
  if (graph_used != nullptr) *graph_used = exec != nullptr;
  auto launch = [&] {
    if (exec != nullptr) {
      TRIPATH_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      call(stream);
    }
  };
  cudaEvent_t a, b;
  TRIPATH_CUDA_CHECK(cudaEventCreate(&a));
  TRIPATH_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    TRIPATH_CUDA_CHECK(cudaEventRecord(a, stream));
    launch();
    TRIPATH_CUDA_CHECK(cudaEventRecord(b, stream));
    TRIPATH_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    TRIPATH_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms);
  }
  TRIPATH_CUDA_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(stream);
  return times;
}

}  // namespace tripath

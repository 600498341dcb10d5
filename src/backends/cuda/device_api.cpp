// tripath/device.h on CUDA.
#include <cuda_runtime.h>

#include <atomic>
#include <optional>
#include <utility>

#include "common/stream_hold.h"
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

namespace {

// Host-mapped pinned flag for kernels::launch_stream_hold, freed on every exit path.
class HoldFlag {
 public:
  HoldFlag() {
    void* host = nullptr;
    TRIPATH_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int32_t), cudaHostAllocMapped));
    flag_ = static_cast<int32_t*>(host);
    *flag_ = 1;
    void* device = nullptr;
    const cudaError_t e = cudaHostGetDevicePointer(&device, host, 0);
    if (e != cudaSuccess) cudaFreeHost(host);
    TRIPATH_CUDA_CHECK(e);
    device_flag_ = static_cast<const int32_t*>(device);
  }
  ~HoldFlag() {
    if (flag_ != nullptr) {
      release();  // a hold still in the stream ends now rather than at its timeout
      cudaFreeHost(const_cast<int32_t*>(flag_));
    }
  }
  HoldFlag(const HoldFlag&) = delete;
  HoldFlag& operator=(const HoldFlag&) = delete;
  void hold(cudaStream_t stream) {
    *flag_ = 0;
    // 2 s: far past any timed call, and the longest a lost release can stall the stream.
    TRIPATH_CUDA_CHECK(kernels::launch_stream_hold(device_flag_, 2'000'000'000ull, stream));
  }
  void release() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *flag_ = 1;
  }

 private:
  volatile int32_t* flag_ = nullptr;  // the host's view
  const int32_t* device_flag_ = nullptr;
};

}  // namespace

std::vector<double> time_gpu_calls(const std::function<void(void*)>& call, int warmup,
                                   int repeats, bool use_graph, bool* graph_used,
                                   bool hold_stream) {
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
  std::optional<HoldFlag> flag;
  if (hold_stream) flag.emplace();
  cudaEvent_t a, b;
  TRIPATH_CUDA_CHECK(cudaEventCreate(&a));
  TRIPATH_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    // Held: the events and the call are all enqueued before the GPU reaches the start event,
    // so the interval is the GPU's work alone; otherwise it also holds the host's time to
    // submit the call after the start event has run on an idle stream.
    if (flag) flag->hold(stream);
    TRIPATH_CUDA_CHECK(cudaEventRecord(a, stream));
    launch();
    TRIPATH_CUDA_CHECK(cudaEventRecord(b, stream));
    if (flag) flag->release();
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

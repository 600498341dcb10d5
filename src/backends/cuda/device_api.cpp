// tripath/device.h on CUDA.
#include <cuda_runtime.h>

#include <atomic>
#include <optional>
#include <utility>

#include "ceilings/paged_gather.h"
#include "common/stream_hold.h"
#include "cuda_util.h"
#include "tripath/device.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"

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

void launch_paged_gather(const PagedGatherArgs& a, void* stream) {
  TRIPATH_CHECK_ARG(a.k_cache != nullptr && a.v_cache != nullptr, "k_cache / v_cache", "null",
                    "device pointers to the K and V caches");
  TRIPATH_CHECK_ARG(a.num_entries >= 0, "num_entries", a.num_entries, ">= 0");
  TRIPATH_CHECK_ARG(a.num_entries == 0 || (a.blocks != nullptr && a.rows != nullptr),
                    "blocks / rows", "null", "device arrays of num_entries ids and row counts");
  TRIPATH_CHECK_ARG(a.checksum != nullptr, "checksum", "null",
                    "device memory of kPagedGatherSumWords words");
  TRIPATH_CHECK_ARG(is_valid_block_size(a.block_size), "block_size", a.block_size,
                    "a power of two in [1, 256]");
  TRIPATH_CHECK_ARG(a.num_kv_heads >= 1 && a.num_kv_heads <= 65535, "num_kv_heads",
                    a.num_kv_heads, "in [1, 65535]");
  TRIPATH_CHECK_ARG(a.row_bytes >= 16 && a.row_bytes % 16 == 0 && is_power_of_two(a.row_bytes / 16),
                    "row_bytes", a.row_bytes, "16 x a power of two");
  TRIPATH_CHECK_ARG(a.layout >= 0 && a.layout <= 2, "layout", a.layout,
                    "0 (NHD), 1 (HND) or 2 (tiled)");
  static_assert(kPagedGatherSumWords == kernels::kPagedGatherSumWords, "one checksum width");
  kernels::PagedGatherParams p{};
  p.k_cache = static_cast<const unsigned char*>(a.k_cache);
  p.v_cache = static_cast<const unsigned char*>(a.v_cache);
  p.blocks = a.blocks;
  p.rows = a.rows;
  p.num_entries = a.num_entries;
  p.log2_block_size = log2_of(a.block_size);
  p.num_kv_heads = a.num_kv_heads;
  p.log2_row_chunks = log2_of(a.row_bytes / 16);
  p.layout = a.layout;
  p.checksum = a.checksum;
  TRIPATH_CUDA_CHECK(
      kernels::launch_paged_gather_impl(p, static_cast<cudaStream_t>(stream)));
}

}  // namespace tripath

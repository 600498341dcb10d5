// Device memory, copies and GPU timing for the tools above the backends (the bench CLI, tests),
// so they need no CUDA headers. In a build without CUDA every call throws tripath::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tripath {

// An owning device allocation (cudaMalloc), movable.
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  explicit DeviceAllocation(size_t bytes);
  ~DeviceAllocation();
  DeviceAllocation(DeviceAllocation&& other) noexcept;
  DeviceAllocation& operator=(DeviceAllocation&& other) noexcept;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
void device_synchronize();  // also surfaces any asynchronous kernel error

// Times call(stream) on the GPU with CUDA events: `warmup` untimed calls, then `repeats` timed
// ones (milliseconds each). With use_graph the call is captured once into a CUDA graph and each
// timing is one replay; if the capture fails the plain call is timed and *graph_used is false.
// With hold_stream a one-thread kernel holds the stream while the start event, the call and the
// end event are enqueued, so the interval cannot include the host's time to submit the call,
// however busy the host is; without it the start event is enqueued on an idle stream (on an idle
// host the two measured the same: docs/perf-notes.md, run s1).
std::vector<double> time_gpu_calls(const std::function<void(void* stream)>& call, int warmup,
                                   int repeats, bool use_graph, bool* graph_used,
                                   bool hold_stream = true);

// The ceilings GPU figures are reported against, measured in the same run (shared/BENCH.md):
// the copy of 4 GiB (bytes read + written; the fastest of a one-load-per-thread kernel, a
// four-loads-in-flight kernel and cudaMemcpyAsync, each also kept), a read-only kernel over 4 GiB
// with 16-byte loads (four in flight per thread), and cuBLAS bf16 8192^3 on random data.
struct GpuCeilings {
  std::string gpu_name;
  int sm_clock_mhz = 0;  // max clocks the device reports
  int memory_clock_mhz = 0;
  size_t l2_bytes = 0;
  double copy_tbps = 0.0;           // max of the three below: the copy ceiling
  double copy_kernel_tbps = 0.0;    // one 16-byte load in flight per thread (the figure before)
  double copy_x4_kernel_tbps = 0.0; // four in flight per thread
  double copy_memcpy_tbps = 0.0;    // cudaMemcpyAsync device to device
  double read_tbps = 0.0;
  double gemm_tflops = 0.0;
};
GpuCeilings measure_gpu_ceilings();

// A paged gather with nothing computed (shared/BENCH.md): rows [0, rows[i]) of cache block
// blocks[i] for every KV head, read from the K and V caches with 16-byte loads, the bytes a
// decode kernel streams over the same rows. The bench times it on a decode step's own cache and
// blocks (the floor the step's decode approaches). Every 32-bit word read is added (mod 2^32)
// into one of the kPagedGatherSumWords words at `checksum`, so the loads stay live and a test can
// check what was read (the words' sum). Throws tripath::Error naming a bad argument.
inline constexpr int kPagedGatherSumWords = 256;
struct PagedGatherArgs {
  const void* k_cache = nullptr;  // device, one layer's K of the layout below
  const void* v_cache = nullptr;
  const int32_t* blocks = nullptr;  // device, [num_entries] physical block ids
  const int32_t* rows = nullptr;    // device, [num_entries] rows read of each, in [0, block_size]
  int32_t num_entries = 0;
  int32_t block_size = 16;   // a power of two
  int32_t num_kv_heads = 1;
  int32_t row_bytes = 0;     // head_dim x element size: 16 x a power of two
  int32_t layout = 0;        // KvLayout as an integer: 0 NHD, 1 HND, 2 tiled
  uint32_t* checksum = nullptr;  // device, kPagedGatherSumWords words
};
void launch_paged_gather(const PagedGatherArgs& args, void* stream);

}  // namespace tripath

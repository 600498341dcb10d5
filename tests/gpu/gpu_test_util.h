// Helpers of the GPU tests: device buffers, random paged steps with poisoned caches, and the
// comparison against the CPU reference. Tests skip (GTEST_SKIP with the reason) without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "scoped_env.h"
#include "tripath/tripath.h"

#ifdef TRIPATH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tripath::gputest {

// Skips the calling test unless this build has CUDA and a GPU is present.
#define TRIPATH_REQUIRE_GPU()                                                   \
  do {                                                                          \
    const std::string why = ::tripath::gputest::gpu_unavailable_reason();       \
    if (!why.empty()) GTEST_SKIP() << why;                                      \
  } while (0)

std::string gpu_unavailable_reason();

// True when the opt-in timing variable `name` is set, non-empty and not "0".
bool timing_enabled(const char* name);

#ifdef TRIPATH_WITH_CUDA

#define TRIPATH_TEST_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

class DeviceMem {
 public:
  DeviceMem() = default;
  explicit DeviceMem(size_t bytes) { resize(bytes); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  ~DeviceMem() {
    if (ptr_) cudaFree(ptr_);
  }
  void resize(size_t bytes);
  template <typename T>
  void upload(const std::vector<T>& host) {
    resize(host.size() * sizeof(T));
    if (!host.empty()) cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  template <typename T>
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    if (count) cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Median time in microseconds of `reps` runs of `launch` (work queued on the default stream),
// each between two CUDA events, after `warmup` untimed runs: the opt-in timing tests' clock.
// `before`, when given, is queued ahead of each timed run, outside its events.
double median_launch_us(const std::function<void()>& launch, int warmup = 3, int reps = 20,
                        const std::function<void()>& before = {});

#endif

using tripath::test_support::ScopedEnv;

// One request of a generated step.
struct ReqShape {
  int32_t query_len;
  int32_t context_len;
};

// A step with its host tensors in the plan's (ordered if asked) layout; 16-bit tensors hold
// bf16 or f16 bits; the caches are NaN-poisoned outside the written slots.
struct HostStep {
  StepInput input;
  std::vector<int32_t> block_table;
  StepPlan plan;
  KvCacheConfig cache;
  std::vector<uint8_t> k_cache, v_cache;  // raw bytes of the cache (context written)
  std::vector<uint16_t> q, k, v;          // [tokens, heads, dim] of dtype `dtype`
  std::vector<float> sinks;
  DType dtype = DType::kBF16;
};

// Draws each request's blocks from a shuffled pool 2.5x the need (a fragmented cache), fills
// `input` (pool size in input.num_cache_blocks) and plans it; with `ordered`, lays the batch
// out [decode | extend | prefill] and plans again. input.block_table points into `table`.
// decode_segments: StepInput::decode_segments (2 forces the planner's decode segments).
void plan_shuffled_step(const std::vector<ReqShape>& reqs, int block_size, int decode_threshold,
                        int64_t extend_chunk_budget, int num_work_units, int num_kv_heads,
                        bool ordered, std::mt19937_64& rng, StepInput& input,
                        std::vector<int32_t>& table, StepPlan& plan, int decode_segments = 1);

HostStep make_step(const std::vector<ReqShape>& reqs, int q_heads, int kv_heads, int head_dim,
                   int block_size, KvLayout layout, DType dtype, DType cache_dtype, bool ordered,
                   int decode_threshold, int num_work_units, uint64_t seed,
                   int64_t extend_chunk_budget = 32768, int decode_segments = 1);

// Relative L2 error of got vs want over all elements; NaN anywhere in got gives +inf.
double rel_l2(const std::vector<float>& got, const std::vector<float>& want);
std::vector<float> widen(const std::vector<uint16_t>& bits, DType dtype);

}  // namespace tripath::gputest

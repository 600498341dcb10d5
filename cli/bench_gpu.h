// A bench step mirrored on the GPU: device copies of its inputs and outputs, and of the paged
// cache in several rotated copies so back-to-back timed calls do not find the cache in L2
// (BENCH.md: "KV cache far larger than L2, or rotate several copies"). GpuMhaStep mirrors an
// MhaStep (q/k/v/out/sinks, K and V caches), GpuMlaStep an MlaStep (latent rows, q_absorbed /
// out_absorbed, q / kv_b_proj / out, the latent cache); both hand out the step's inputs on one
// cache copy, with or without the cache write, and copy the outputs back for --verify (device
// outputs start NaN-poisoned, so a row a backend never writes cannot pass).
#pragma once

#include <cstddef>
#include <vector>

#include "bench_step.h"
#include "tripath/device.h"

namespace tripath::cli {

// Copies of a cache of `cache_bytes` needed so that together they exceed 3x the L2 (at most 4).
int rotated_cache_copies(size_t cache_bytes, size_t l2_bytes);

class GpuMhaStep {
 public:
  GpuMhaStep(const MhaStep& host, int cache_copies);
  int cache_copies() const { return static_cast<int>(cache_k_.size()); }
  // The step's inputs on cache copy `copy`; with write_cache, run() writes the new K/V first.
  AttentionInputs inputs(int copy, bool write_cache, void* stream) const;
  void download_out(MhaStep& host) const;
  // A paged gather of the decode rows (tripath/device.h) on cache copy `copy`: every context row
  // of every decode request, the bytes BENCH.md's decode formula counts. Null on a step with
  // extend or prefill requests (gather_bytes() 0).
  void gather(int copy, void* stream) const;
  double gather_bytes() const { return gather_bytes_; }

  static int copies_for(const MhaStep& host, size_t l2_bytes);

 private:
  const MhaStep& host_;
  DeviceAllocation q_, k_, v_, out_, sinks_;
  std::vector<DeviceAllocation> cache_k_, cache_v_;
  DeviceAllocation gather_blocks_, gather_rows_, gather_sum_;
  int32_t gather_entries_ = 0, gather_row_bytes_ = 0;
  double gather_bytes_ = 0.0;
};

class GpuMlaStep {
 public:
  GpuMlaStep(const MlaStep& host, int cache_copies);
  int cache_copies() const { return static_cast<int>(cache_.size()); }
  // The step's inputs on cache copy `copy`; with write_cache, run() writes the new latent rows
  // first. Tensors the host step leaves undefined (no decode or no extend/prefill tokens) stay so.
  MlaInputs inputs(int copy, bool write_cache, void* stream) const;
  // out_absorbed (decode tokens) and out (extend + prefill tokens), where the step has them.
  void download_out(MlaStep& host) const;

  static int copies_for(const MlaStep& host, size_t l2_bytes);

 private:
  const MlaStep& host_;
  DeviceAllocation latent_, q_absorbed_, out_absorbed_, q_, kv_b_proj_, out_;
  std::vector<DeviceAllocation> cache_;
};

// The GPU mirror of a host step type, for code written once for both kinds.
template <typename Step>
struct GpuStepOf;
template <>
struct GpuStepOf<MhaStep> {
  using type = GpuMhaStep;
};
template <>
struct GpuStepOf<MlaStep> {
  using type = GpuMlaStep;
};

}  // namespace tripath::cli

// An MHA bench step mirrored on the GPU: device copies of q/k/v/out/sinks, and of the paged
// cache in several rotated copies so back-to-back timed calls do not find the KV in L2 (BENCH.md:
// "KV cache far larger than L2, or rotate several copies").
#pragma once

#include <vector>

#include "bench_step.h"
#include "tripath/device.h"

namespace tripath::cli {

class GpuMhaStep {
 public:
  GpuMhaStep(const MhaStep& host, int cache_copies);
  int cache_copies() const { return static_cast<int>(cache_k_.size()); }
  // The step's inputs on cache copy `copy`; with write_cache, run() writes the new K/V first.
  AttentionInputs inputs(int copy, bool write_cache, void* stream) const;
  void download_out(MhaStep& host) const;

  // Copies needed so that `copies` caches together exceed 3x the L2 (at most 4).
  static int copies_for(const MhaStep& host, size_t l2_bytes);

 private:
  const MhaStep& host_;
  DeviceAllocation q_, k_, v_, out_, sinks_;
  std::vector<DeviceAllocation> cache_k_, cache_v_;
};

}  // namespace tripath::cli

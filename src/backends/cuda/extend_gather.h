// three_path's gathered extend variant (TRIPATH_EXTEND_GATHER=1): each planner chunk of cached
// context is first copied into a contiguous workspace (prefill/gather_context.h), then read by
// the same attention kernels as the in-place variant.
//
// Exactness: the kernels see keys through block_table[key >> log2_block_size] and decide what a
// query row may see only from differences of positions (key <= ctx + t, key >= ctx + t - window,
// key in [kv_begin, kv_end)). Shifting every position of a request by its piece's start s (work
// items [0, len) instead of [s, s + len), context length ctx - s, a table whose logical block b
// is workspace block base + b) therefore selects exactly the same keys with the same masks, for
// any chunk start, aligned or not; window, soft-cap, sinks, GQA and LSE are untouched.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "device_plan.h"
#include "prefill/gather_context.h"
#include "tripath/kv_cache.h"
#include "tripath/step_plan.h"
#include "unified/params.h"

namespace tripath {

class ExtendGather {
 public:
  // Uploads each chunk's gather list, shifted context lengths and block table into `arena`;
  // returns the workspace bytes (K then V) for a 16-bit cache, enough for fp8 too.
  size_t prepare(const StepPlan& plan, int num_kv_heads, int head_dim, DeviceArena& arena);
  // Workspace blocks of the largest chunk (what the workspace holds).
  int32_t capacity_blocks() const { return capacity_blocks_; }
  // Where V starts in the workspace.
  size_t v_offset() const { return v_offset_; }

  // Launches chunk c's copy from the paged cache `p` reads (its k/v_cache, block table and
  // geometry) into the workspace, then points `p` at the workspace: the chunk's items must
  // carry shifted key ranges (shift_items).
  void gather_and_redirect(int32_t c, const DeviceArena& arena, const KvCacheConfig& cache,
                           void* workspace, kernels::UnifiedParams& p, cudaStream_t stream) const;

  // Shifts the key ranges of chunk c's items (ordered-batch requests) to their piece's start.
  static void shift_items(const StepPlan& plan, int32_t c, kernels::UnifiedWorkItem* items,
                          size_t count);

 private:
  struct Chunk {
    size_t blocks = 0, context_lens = 0, table = 0;  // arena byte offsets
    int32_t num_blocks = 0, max_blocks = 1;          // workspace blocks; table row length
  };
  std::vector<Chunk> chunks_;
  int32_t extend_begin_ = 0;
  int32_t capacity_blocks_ = 0;
  size_t v_offset_ = 0;
};

}  // namespace tripath

// Shared machinery of the CUDA attention backends: GPU-side argument rules, the prepared plan
// (uploaded once per step, checked by serial in run), the cache write and the merge.
#pragma once

#include <cuda_runtime.h>

#include "device_plan.h"
#include "tripath/backend.h"
#include "unified/params.h"

namespace tripath {

// GPU rules on top of validate_attention_call: q/k/v/out bf16 or f16 of one dtype, cache of
// that dtype or fp8 e4m3, and a compiled kernel for (head_dim, q dtype, cache dtype).
void validate_cuda_attention_call(const StepPlan& plan, const AttentionParams& params,
                                  const AttentionInputs& in, const char* backend);

class CudaAttentionBackend : public AttentionBackend {
 public:
  void prepare(const StepPlan& plan, const AttentionParams& params, void* stream) final;
  void run(const StepPlan& plan, const AttentionParams& params, const AttentionInputs& in) final;

 protected:
  // Adds the backend's own arrays to the arena and sizes its workspace.
  virtual void prepare_work(const StepPlan& plan, const AttentionParams& params,
                            DeviceArena& arena) = 0;
  // Launches the attention kernels (the cache already holds the new rows of tokens from
  // fused_write_tokens() on); no allocation, no sync.
  virtual void launch(const StepPlan& plan, const AttentionParams& params,
                      const AttentionInputs& in, cudaStream_t stream) = 0;
  // How many of the step's first tokens launch() writes into the cache itself (a kernel that
  // stores its own requests' new K / V rows before reading them); run() launches the cache-write
  // kernel for the rest only. 0 by default.
  virtual int64_t fused_write_tokens(const StepPlan& plan, const AttentionParams& params,
                                     const AttentionInputs& in) const {
    (void)plan;
    (void)params;
    (void)in;
    return 0;
  }

  const DeviceArena& arena() const { return arena_; }
  const DevicePlanOffsets& offsets() const { return offsets_; }
  // The unified kernel's parameters for this call, but for the work list and partial buffers
  // (shared by unified and two_path's prefix-prefill path).
  kernels::UnifiedParams unified_params(const StepPlan& plan, const AttentionParams& params,
                                        const AttentionInputs& in) const;

 private:
  DeviceArena arena_;
  DevicePlanOffsets offsets_;
  uint64_t prepared_serial_ = 0;
  int prepared_q_heads_ = 0, prepared_kv_heads_ = 0, prepared_head_dim_ = 0;
};

}  // namespace tripath

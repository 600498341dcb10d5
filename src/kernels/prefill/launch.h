// Host entry points of the Hopper flash prefill kernel (three_path's prefill and extend paths).
#pragma once

#include <cuda_runtime.h>

#include "tripath/dtype.h"
#include "unified/params.h"

namespace tripath::kernels {

// Packed query rows per work item of the flash kernel (the unified kRows64 tile takes 64).
constexpr int kFlashPrefillRows = 128;

template <int D, int DV, typename T>
cudaError_t launch_flash_prefill_impl(const UnifiedParams& p, cudaStream_t stream);

// True if this build compiled the kernel for sm_90a and (head_dim, q dtype); the KV cache must
// then hold the same 16-bit dtype as q.
bool flash_prefill_built(int head_dim, DType q);
// Takes the unified kernel's parameters with kFlashPrefillRows-row work items.
cudaError_t launch_flash_prefill(int head_dim, DType q, const UnifiedParams& p,
                                 cudaStream_t stream);
// MLA's non-absorbed attention: q/k 192, v 128, bf16 (see launch_unified_mla).
bool flash_prefill_mla_built();
cudaError_t launch_flash_prefill_mla(const UnifiedParams& p, cudaStream_t stream);

}  // namespace tripath::kernels

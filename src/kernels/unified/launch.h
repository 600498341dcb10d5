// Host entry points of the unified kernel: runtime (head dim, dtypes) -> the built template.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "tripath/dtype.h"
#include "unified/params.h"

namespace tripath::kernels {

template <int D, typename T, typename KvT>
cudaError_t launch_unified_impl(const UnifiedParams& p, UnifiedTile tile, cudaStream_t stream);

// True if this build instantiated the kernel for (head_dim, q dtype, kv dtype).
bool unified_built(int head_dim, DType q, DType kv);
// "64/bf16/bf16, 64/bf16/fp8_e4m3, ..." for error messages and `tripath info`.
std::string unified_built_text();
cudaError_t launch_unified(int head_dim, DType q, DType kv, const UnifiedParams& p,
                           UnifiedTile tile, cudaStream_t stream);

// MLA's non-absorbed attention: q/k head dim 192, v head dim 128 (DeepSeek-V3/R1), bf16 q/k/v,
// 64-row tiles. k_cache [.., 192] and v_cache [.., 128] rows are addressed like an NHD cache of
// num_kv_heads heads with those head dims (a contiguous decompressed workspace is an NHD cache
// whose block table is the identity).
cudaError_t launch_unified_mla(const UnifiedParams& p, cudaStream_t stream);

}  // namespace tripath::kernels

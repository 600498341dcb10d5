// Launchers of the classic paged decode kernels of the two_path backend (shared/DESIGN.md
// section 4). The fast path writes per-partition partial states (normalized output, natural LSE)
// that launch_merge_states combines; the generic path writes the final output and LSE itself.
#pragma once

#include <cuda_runtime.h>

#include "paged_decode/params.h"
#include "tripath/dtype.h"

namespace tripath::kernels {

// True iff the fast partitioned kernel covers this step: head_dim in {64, 128}, block_size in
// {16, 32}, group_size (num_q_heads / num_kv_heads) <= 16, max_seq_len <= 131072, no sliding
// window (window_left < 0) and no sinks. Soft-cap and fp8 KV are supported on both paths.
bool paged_decode_fast_path_supported(int head_dim, int block_size, int group_size,
                                      int max_seq_len, int window_left, bool has_sinks);

// q_dtype: kBF16 or kF16 (out has the same dtype); kv_dtype: q_dtype or kFP8E4M3. Unsupported
// combinations return cudaErrorInvalidValue; otherwise the result of cudaGetLastError().
// Fast path: grid (num_kv_heads, request_end - request_begin, max_partitions); writes
// partial_out / partial_lse for every (partition z < ceil(seq_len / 256), token, head).
cudaError_t launch_paged_decode_fast(const PagedDecodeParams& p, DType q_dtype, DType kv_dtype,
                                     cudaStream_t stream);
// Generic path: grid (num_q_heads, request_end - request_begin); writes out and lse (if given).
cudaError_t launch_paged_decode_generic(const PagedDecodeParams& p, DType q_dtype,
                                        DType kv_dtype, cudaStream_t stream);

}  // namespace tripath::kernels

// Merge of partial attention states over disjoint key sets: o = sum w_i o_i / sum w_i with
// w_i = exp(lse_i - max lse), lse = max + log sum w_i; -inf parts weigh nothing and a row whose
// parts are all empty gets 0 and -inf, never NaN. Sinks enter as one more part (output 0).
// Grid: one warp per row, lanes over the head dim. Used by split-KV decode (unified, two_path)
// and the public merge entry point. Tests: tests/cpp/test_gpu_kernels.cpp.
#include "common/device_math.cuh"
#include "merge/merge_states.h"

namespace tripath::kernels {
namespace {

template <typename OutT>
__global__ void merge_states_kernel(const __grid_constant__ MergeParams p) {
  const int64_t row = p.row_begin + (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.row_end) return;
  const int parts = p.token_parts != nullptr ? p.token_parts[row / p.heads] : p.num_parts;
  float mx = -INFINITY;
  for (int i = 0; i < parts; ++i) mx = fmaxf(mx, p.part_lse[i * p.part_stride + row]);
  const float sink = p.sinks != nullptr ? p.sinks[row % p.heads] : -INFINITY;
  mx = fmaxf(mx, sink);
  OutT* out = static_cast<OutT*>(p.out) + row * p.dim;
  if (mx == -INFINITY) {
    for (int d = lane; d < p.dim; d += 32) out[d] = from_float<OutT>(0.0f);
    if (lane == 0 && p.lse != nullptr) p.lse[row] = -INFINITY;
    return;
  }
  float total = p.sinks != nullptr ? expf(sink - mx) : 0.0f;
  for (int i = 0; i < parts; ++i) {
    const float l = p.part_lse[i * p.part_stride + row];
    if (l != -INFINITY) total += expf(l - mx);
  }
  const float inv = 1.0f / total;
  for (int d = lane; d < p.dim; d += 32) {
    float acc = 0.0f;
    for (int i = 0; i < parts; ++i) {
      const float l = p.part_lse[i * p.part_stride + row];
      if (l != -INFINITY) acc += expf(l - mx) * p.part_out[(i * p.part_stride + row) * p.dim + d];
    }
    out[d] = from_float<OutT>(acc * inv);
  }
  if (lane == 0 && p.lse != nullptr) p.lse[row] = mx + logf(total);
}

template <typename OutT>
cudaError_t launch(const MergeParams& p, cudaStream_t stream) {
  const int64_t rows = p.row_end - p.row_begin;
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 256;  // 8 rows per block
  const int64_t blocks = (rows * 32 + kThreads - 1) / kThreads;
  merge_states_kernel<OutT><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_merge_states(const MergeParams& p, DType out, cudaStream_t stream) {
  switch (out) {
    case DType::kF32: return launch<float>(p, stream);
    case DType::kBF16: return launch<bf16>(p, stream);
    case DType::kF16: return launch<fp16>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels

// Generic single-pass paged decode on CUDA cores: the two_path backend's fallback for whatever
// the partitioned kernel (paged_decode_fast.cu) does not cover: head dims {64, 80, 96, 128, 192,
// 256} (any multiple of 16 up to 256 works), block sizes 1..256 (powers of two), any GQA ratio,
// sliding window, attention sinks, soft-cap, fp8 e4m3 KV.
//
// Grid (num_q_heads, request_end - request_begin), 128 threads. A block loops over its request's
// query tokens; for token i (position pos = context_len + i) it streams the visible keys
// [max(0, pos - window_left), pos] in chunks of 128 with an online softmax in log2 units: one
// thread per key computes the full dot product straight from global memory (q row staged as
// float in shared memory), block reductions give the chunk max and sum, then threads over head
// dim pairs accumulate sum_k p_k V[k][d] with coalesced V row reads. The sink, if any, is merged
// at the end as one more part with output 0 and LSE = sinks[h]; the final output (T, times
// v_scale for fp8) and natural-log LSE are written directly (no partials, no merge).
// Simple rather than fast: each query head re-reads its KV head (GQA reuse comes from L2).
// Specializations: q dtype {bf16, f16} x KV dtype {q dtype, fp8 e4m3}; head dim at run time.
// Tests: tests/cpp/test_gpu_backends.cpp (two_path); benchmark: `tripath bench --backend=two_path`.
#include "paged_decode/paged_decode.h"
#include "paged_decode/paged_decode_common.cuh"

namespace tripath::kernels {
namespace {

using paged_decode::kLn2;
using paged_decode::load_as_float;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunkKeys = kThreads;  // one key per thread per chunk
constexpr int kMaxHeadDim = 2 * kThreads;

// Block-wide max / sum; `red` holds kWarps floats. Ends with a barrier so `red` and any shared
// data written before the call are safe to reuse / read afterwards.
__device__ __forceinline__ float block_max(float v, float* red) {
  v = paged_decode::warp_max(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, red[w]);
  __syncthreads();
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = paged_decode::warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) r += red[w];
  __syncthreads();
  return r;
}

template <typename T, typename KvT>
__global__ void __launch_bounds__(kThreads)
    paged_decode_generic_kernel(const __grid_constant__ PagedDecodeParams p) {
  constexpr int kElems = 16 / sizeof(KvT);  // KV elements per 16-byte chunk
  __shared__ __align__(16) float s_q[kMaxHeadDim];
  __shared__ float s_p[kChunkKeys];
  __shared__ float s_red[kWarps];

  const int h = blockIdx.x, req = p.request_begin + blockIdx.y, tid = threadIdx.x;
  const int D = p.head_dim;
  const int g = h / (p.num_q_heads / p.num_kv_heads);
  const int tok0 = p.cu_seqlens_q[req];
  const int qlen = p.cu_seqlens_q[req + 1] - tok0;
  const int ctx = p.context_lens[req];
  const int log2_bs = __ffs(p.block_size) - 1;
  const int32_t* table = p.block_table + int64_t(req) * p.max_blocks_per_request;
  const KvT* k_cache = static_cast<const KvT*>(p.k_cache);
  const KvT* v_cache = static_cast<const KvT*>(p.v_cache);
  // Element offset of chunk `chunk` of key `key` (absolute position) of KV head g.
  auto chunk_offset = [&](int key, int chunk) {
    return kv_chunk_offset(p.layout, table[key >> log2_bs], key & (p.block_size - 1), g, chunk,
                           p.block_size, p.num_kv_heads, D, kElems);
  };
  // Thread tid owns head-dim elements d0, d0 + 1 (a pair never straddles a 16-byte chunk).
  const int d0 = 2 * tid;
  const bool owns_d = d0 < D;

  for (int i = 0; i < qlen; ++i) {
    const int token = tok0 + i, pos = ctx + i;
    const int64_t row = int64_t(token) * p.num_q_heads + h;
    const int lo = p.window_left >= 0 ? max(0, pos - p.window_left) : 0;
    const int hi = pos + 1;  // keys [lo, hi) are visible
    const T* q = static_cast<const T*>(p.q) + row * D;
    for (int d = tid; d < D; d += kThreads) s_q[d] = to_float(q[d]);
    __syncthreads();

    float m = -INFINITY, l = 0.0f;  // running max (log2 units) and sum of exp2(s - m)
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int base = lo; base < hi; base += kChunkKeys) {
      const int key = base + tid;
      float s = -INFINITY;
      if (key < hi) {
        const int num_chunks = D / kElems;
        float dot = 0.0f;
        for (int c = 0; c < num_chunks; ++c) {
          float kf[kElems];
          load_as_float<KvT, kElems>(k_cache + chunk_offset(key, c), kf);
          const float* qc = s_q + c * kElems;
#pragma unroll
          for (int e = 0; e < kElems; ++e) dot += qc[e] * kf[e];
        }
        s = paged_decode::score_log2(dot, p.scale, p.softcap);
      }
      // The chunk's first key is always visible, so m_new is finite.
      const float m_new = fmaxf(m, block_max(s, s_red));
      const float e = key < hi ? exp2f(s - m_new) : 0.0f;
      s_p[tid] = e;
      const float alpha = exp2f(m - m_new);  // 0 on the first chunk (m = -inf)
      l = l * alpha + block_sum(e, s_red);   // its barriers also publish s_p
      m = m_new;

      const int n = min(kChunkKeys, hi - base);
      if (owns_d) {
        float a0 = 0.0f, a1 = 0.0f;
        for (int k = 0; k < n; ++k) {
          float v[2];
          load_as_float<KvT, 2>(v_cache + chunk_offset(base + k, d0 / kElems) + d0 % kElems, v);
          a0 += s_p[k] * v[0];
          a1 += s_p[k] * v[1];
        }
        acc0 = acc0 * alpha + a0;
        acc1 = acc1 * alpha + a1;
      }
      __syncthreads();  // s_p is rewritten by the next chunk
    }

    // Natural-log LSE of the keys, then the sink as one more part with output 0.
    float lse = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
    float factor = l > 0.0f ? p.v_scale / l : 0.0f;
    if (p.sinks != nullptr) fold_sink(p.sinks[h], lse, factor);
    if (owns_d) {
      T* out = static_cast<T*>(p.out) + row * D + d0;
      out[0] = from_float<T>(acc0 * factor);
      out[1] = from_float<T>(acc1 * factor);
    }
    if (tid == 0 && p.lse != nullptr) p.lse[row] = lse;
    __syncthreads();  // s_q is rewritten by the next token
  }
}

template <typename T, typename KvT>
cudaError_t launch(const PagedDecodeParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_q_heads, p.request_end - p.request_begin);
  paged_decode_generic_kernel<T, KvT><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_kv(const PagedDecodeParams& p, DType q_dtype, DType kv_dtype,
                      cudaStream_t stream) {
  if (kv_dtype == q_dtype) return launch<T, T>(p, stream);
  if (kv_dtype == DType::kFP8E4M3) return launch<T, fp8>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_paged_decode_generic(const PagedDecodeParams& p, DType q_dtype,
                                        DType kv_dtype, cudaStream_t stream) {
  // Head dim: a whole number of 16-byte chunks in every KV dtype, at most 2 per thread.
  if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim || p.head_dim % 16 != 0 ||
      p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 || p.block_size <= 0 ||
      p.block_size > 256 || (p.block_size & (p.block_size - 1)) != 0 ||
      p.request_end - p.request_begin > 65535)
    return cudaErrorInvalidValue;
  if (p.request_end <= p.request_begin || p.num_q_heads <= 0) return cudaSuccess;
  switch (q_dtype) {
    case DType::kBF16: return launch_kv<bf16>(p, q_dtype, kv_dtype, stream);
    case DType::kF16: return launch_kv<fp16>(p, q_dtype, kv_dtype, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels

// Classic partitioned paged decode on CUDA cores (the two_path backend's fast path, in the style
// of vLLM's paged attention v2): a thread block computes, for one request, KV head g and
// partition z of 256 keys, all of the request's query tokens x the group_size query heads of g,
// and writes normalized partial outputs (float) and natural-log LSEs for merge_states (DESIGN 5).
// Grid (num_kv_heads, request_end - request_begin, max_partitions), 128 threads (4 warps). Rows
// (token, head), packed row = token * group + head, go 16 per pass, so each K/V byte is read once
// per 16 rows (once per block for a single decode token with GQA <= 16). Per pass:
//   staging: K of the partition -> shared memory by cp.async, 4 tiles of 64 keys all in flight;
//       V tile t overwrites K tile t once QK is past it, streaming in under QK and the softmax.
//       (Registers-only loads, one K/V load per lane per step, were latency-bound: 0.5 TB/s.)
//   QK: lanes of one key split its row in 16-byte chunks and hold partial dots for all 16 rows,
//       reduced by a butterfly reduce-scatter (15 shuffles instead of 16 x log2(lanes)).
//   softmax: one warp per row (max, exp2, sum); LSE converted to natural log once.
//   PV: lanes over the head dim, warps over keys, every thread accumulating all 16 rows; the 4
//       warps' sums are added in a fixed order (bitwise reproducible, no atomics).
// Measured on H200, bf16 D128, 64 requests x 4096 keys: ~1.0 TB/s for GQA 4, 0.6 TB/s GQA 16;
// smem (90 KB) limits bf16/f16 D128 to 2 blocks per SM. Specializations: head dim {64, 128} x
// q dtype {bf16, f16} x KV dtype {q dtype, fp8 e4m3}. Tests: tests/cpp/test_gpu_backends.cpp.
#include "paged_decode/paged_decode.h"
#include "paged_decode/paged_decode_common.cuh"

namespace tripath::kernels {
namespace {

using paged_decode::kLn2;
using paged_decode::load_as_float;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = 16;                   // packed (token, head) rows per pass
constexpr int kPart = kDecodePartitionKeys;    // 256 keys per partition
constexpr int kQkKeysPerLane = 2;              // keys per lane per QK step (reuses q reads)
constexpr int kPvKeys = 8;                     // keys per warp per PV step
constexpr int kPvStep = kWarps * kPvKeys;      // probabilities are zero-padded to this

// In-register reduce-scatter over the kLanes lanes that share one key: on entry each lane holds
// 16 partial dots (one per row); on exit v[j], j < 16 / kLanes, is the full dot of row
// (lane % kLanes) * (16 / kLanes) + j. Each step keeps half of the rows and adds the partner's
// half, so the shuffle count is 8 + 4 + ... instead of 16 per step.
template <int kLanes, int kN = kMaxRows>
__device__ __forceinline__ void butterfly_reduce(float (&v)[kMaxRows], int lane) {
  if constexpr (kLanes > 1) {
    constexpr int kOffset = kLanes / 2, kHalf = kN / 2;
    const bool upper = (lane & kOffset) != 0;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      const float keep = upper ? v[j + kHalf] : v[j];
      const float send = upper ? v[j] : v[j + kHalf];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, kOffset);
    }
    butterfly_reduce<kOffset, kHalf>(v, lane);
  }
}

constexpr int kTileKeys = 64;                 // keys per cp.async commit group
constexpr int kTiles = kPart / kTileKeys;

// Shared memory: q rows (float, reused for the PV warp reduction), scores / weights, row
// statistics, and the partition's K (then V) rows in logical element order.
template <int D, typename KvT>
struct FastSmem {
  static constexpr size_t kQ = size_t(kMaxRows) * D * sizeof(float);
  static constexpr size_t kP = size_t(kMaxRows) * kPart * sizeof(float);
  static constexpr size_t kStats = 2 * kMaxRows * sizeof(float);
  static constexpr size_t kKV = size_t(kPart) * D * sizeof(KvT);
  static constexpr size_t kBytes = kQ + kP + kStats + kKV;
  // Blocks per SM the smem allows (227 KB usable, 1 KB reserved per block), at most 4; used as
  // the register budget hint: 2 (bf16/f16, D = 128) to 4.
  static constexpr int kMinBlocks =
      (227 * 1024) / (kBytes + 1024) < 4 ? int((227 * 1024) / (kBytes + 1024)) : 4;
};

// cp.async.wait_group with a run-time count (0..3).
__device__ __forceinline__ void cp_async_wait_upto(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

template <int D, typename T, typename KvT>
__global__ void __launch_bounds__(kThreads, (FastSmem<D, KvT>::kMinBlocks))
    paged_decode_partition_kernel(const __grid_constant__ PagedDecodeParams p) {
  using Smem = FastSmem<D, KvT>;
  constexpr int kElems = 16 / sizeof(KvT);     // KV elements per 16-byte chunk
  constexpr int kLanes = D / kElems;           // QK: lanes sharing one key (4, 8 or 16)
  constexpr int kKeysPerLoad = 32 / kLanes;    // keys one warp-wide read covers
  constexpr int kQkWarpKeys = kKeysPerLoad * kQkKeysPerLane;
  constexpr int kRowsPerLane = kMaxRows / kLanes;
  constexpr int kVElems = D / 32;              // PV: elements of a V row per lane
  static_assert(kLanes <= 16 && kVElems * sizeof(KvT) <= 16, "supported head dims: 64, 128");
  static_assert(kTileKeys % (kWarps * kQkWarpKeys) == 0, "QK steps tile the staged keys");

  extern __shared__ __align__(16) unsigned char smem[];
  float* s_q = reinterpret_cast<float*>(smem);                    // [16][D]
  float* s_p = reinterpret_cast<float*>(smem + Smem::kQ);         // [16][256]
  float* s_inv = s_p + kMaxRows * kPart;                          // v_scale / row sum, or 0
  float* s_lse = s_inv + kMaxRows;                                // natural-log LSE or -inf
  KvT* s_kv = reinterpret_cast<KvT*>(smem + Smem::kQ + Smem::kP + Smem::kStats);  // [256][D]

  const int g = blockIdx.x, req = p.request_begin + blockIdx.y, z = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tok0 = p.cu_seqlens_q[req];
  const int qlen = p.cu_seqlens_q[req + 1] - tok0;
  const int ctx = p.context_lens[req];
  const int part_begin = z * kPart;
  // The merge reads ceil(seq_len / 256) parts per token; later partitions write nothing.
  if (qlen <= 0 || part_begin >= ctx + qlen) return;

  const int group = p.num_q_heads / p.num_kv_heads;
  const int log2_bs = __ffs(p.block_size) - 1;
  const int32_t* table = p.block_table + int64_t(req) * p.max_blocks_per_request;
  const KvT* k_cache = static_cast<const KvT*>(p.k_cache);
  const KvT* v_cache = static_cast<const KvT*>(p.v_cache);

  const int total_rows = qlen * group;
  for (int row0 = 0; row0 < total_rows; row0 += kMaxRows) {
    const int nrows = min(kMaxRows, total_rows - row0);
    // Keys [part_begin, part_begin + nkeys) are visible to at least the pass's last token.
    const int last_pos = ctx + (row0 + nrows - 1) / group;
    const int nkeys = max(0, min(kPart, last_pos + 1 - part_begin));
    const int ntiles = (nkeys + kTileKeys - 1) / kTileKeys;

    // Copies keys [t * 64, t * 64 + 64) of `cache` (those < nkeys) into s_kv; one commit group
    // per tile, empty or not, so the wait counts below are fixed.
    auto stage_tile = [&](const KvT* cache, int t) {
      for (int idx = tid; idx < kTileKeys * kLanes; idx += kThreads) {
        const int key = t * kTileKeys + idx / kLanes, c = idx % kLanes;
        if (key < nkeys) {
          const int k = part_begin + key;
          cp_async_16(s_kv + key * D + c * kElems,
                      cache + kv_chunk_offset(p.layout, table[k >> log2_bs],
                                              k & (p.block_size - 1), g, c, p.block_size,
                                              p.num_kv_heads, D, kElems),
                      true);
        }
      }
      cp_async_commit();
    };
    for (int t = 0; t < kTiles; ++t) stage_tile(k_cache, t);

    // Stage the pass's q rows as float while K is in flight.
    for (int idx = tid; idx < nrows * (D / 8); idx += kThreads) {
      const int row = idx / (D / 8), c = idx % (D / 8), gr = row0 + row;
      const T* src = static_cast<const T*>(p.q) +
                     (int64_t(tok0 + gr / group) * p.num_q_heads + g * group + gr % group) * D +
                     c * 8;
      float f[8];
      load_as_float<T, 8>(src, f);
      float4* dst = reinterpret_cast<float4*>(s_q + row * D + c * 8);
      dst[0] = make_float4(f[0], f[1], f[2], f[3]);
      dst[1] = make_float4(f[4], f[5], f[6], f[7]);
    }

    // QK, tile by tile: lane c of a key group owns chunk c of the key's row and of every q row.
    const int c = lane % kLanes;
    for (int t = 0; t < ntiles; ++t) {
      // Groups committed after K tile t: K tiles t+1..3 and V tiles 0..t-2.
      cp_async_wait_upto((kTiles - 1 - t) + max(0, t - 1));
      __syncthreads();  // K tile t (and q) visible; every warp is done with K tile t-1
      if (t > 0) stage_tile(v_cache, t - 1);
      const int tile_end = min(nkeys, (t + 1) * kTileKeys);
      for (int base = t * kTileKeys + warp * kQkWarpKeys; base < tile_end;
           base += kWarps * kQkWarpKeys) {
        int key[kQkKeysPerLane];
        float kf[kQkKeysPerLane][kElems];
#pragma unroll
        for (int kk = 0; kk < kQkKeysPerLane; ++kk) {
          key[kk] = base + kk * kKeysPerLoad + lane / kLanes;
          // Rows past nkeys hold stale data: read them (harmless) but never store their score.
          load_as_float<KvT, kElems>(s_kv + key[kk] * D + c * kElems, kf[kk]);
        }
        float dot[kQkKeysPerLane][kMaxRows];
#pragma unroll
        for (int row = 0; row < kMaxRows; ++row) {
#pragma unroll
          for (int kk = 0; kk < kQkKeysPerLane; ++kk) dot[kk][row] = 0.0f;
          if (row < nrows) {
            const float4* q4 = reinterpret_cast<const float4*>(s_q + row * D + c * kElems);
#pragma unroll
            for (int e4 = 0; e4 < kElems / 4; ++e4) {
              const float4 q = q4[e4];
#pragma unroll
              for (int kk = 0; kk < kQkKeysPerLane; ++kk) {
                const float* k = kf[kk] + e4 * 4;
                dot[kk][row] += q.x * k[0] + q.y * k[1] + q.z * k[2] + q.w * k[3];
              }
            }
          }
        }
#pragma unroll
        for (int kk = 0; kk < kQkKeysPerLane; ++kk) {
          butterfly_reduce<kLanes>(dot[kk], lane);
#pragma unroll
          for (int j = 0; j < kRowsPerLane; ++j) {
            const int row = c * kRowsPerLane + j;
            if (row < nrows && key[kk] < nkeys) {
              const bool visible = part_begin + key[kk] <= ctx + (row0 + row) / group;
              s_p[row * kPart + key[kk]] =
                  visible ? paged_decode::score_log2(dot[kk][j], p.scale, p.softcap)
                          : -INFINITY;
            }
          }
        }
      }
    }
    __syncthreads();  // scores complete; every warp is done with the last K tile
    if (ntiles > 0) stage_tile(v_cache, ntiles - 1);

    // Softmax over the partition, one warp per row; weights stay unnormalized (exp2(s - max))
    // and are zero-padded to a multiple of kPvStep so PV needs no per-key row guard.
    const int npad = (nkeys + kPvStep - 1) / kPvStep * kPvStep;
    for (int row = warp; row < nrows; row += kWarps) {
      float* sp = s_p + row * kPart;
      float mx = -INFINITY;
      for (int k = lane; k < nkeys; k += 32) mx = fmaxf(mx, sp[k]);
      mx = paged_decode::warp_max(mx);
      const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no visible key: all 0
      float sum = 0.0f;
      for (int k = lane; k < npad; k += 32) {
        const float e = k < nkeys ? exp2f(sp[k] - base) : 0.0f;
        sp[k] = e;
        sum += e;
      }
      sum = paged_decode::warp_sum(sum);
      if (lane == 0) {
        s_inv[row] = sum > 0.0f ? p.v_scale / sum : 0.0f;
        s_lse[row] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // V and the weights visible

    // PV: lane owns elements [d0, d0 + kVElems) of every row; warp w takes keys
    // [i * kPvStep + w * kPvKeys, + kPvKeys).
    const int d0 = lane * kVElems;
    float acc[kMaxRows][kVElems];
#pragma unroll
    for (int row = 0; row < kMaxRows; ++row)
#pragma unroll
      for (int e = 0; e < kVElems; ++e) acc[row][e] = 0.0f;
    for (int base = warp * kPvKeys; base < nkeys; base += kPvStep) {
      float v[kPvKeys][kVElems];
#pragma unroll
      for (int u = 0; u < kPvKeys; ++u) {
        if (base + u < nkeys) {
          load_as_float<KvT, kVElems>(s_kv + (base + u) * D + d0, v[u]);
        } else {  // stale rows may hold anything (NaN): weight 0 must meet value 0
#pragma unroll
          for (int e = 0; e < kVElems; ++e) v[u][e] = 0.0f;
        }
      }
#pragma unroll
      for (int row = 0; row < kMaxRows; ++row) {
        if (row < nrows) {
          const float4* p4 = reinterpret_cast<const float4*>(s_p + row * kPart + base);
#pragma unroll
          for (int u4 = 0; u4 < kPvKeys / 4; ++u4) {
            const float4 w = p4[u4];
            const float pw[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
              for (int e = 0; e < kVElems; ++e) acc[row][e] += pw[u] * v[u4 * 4 + u][e];
          }
        }
      }
    }

    // Sum the 4 warps' accumulators in warp order through s_q (free since the QK barrier); the
    // last warp scales by v_scale / sum and writes the partial state.
    for (int w = 0; w < kWarps; ++w) {
      if (warp == w) {
#pragma unroll
        for (int row = 0; row < kMaxRows; ++row) {
          if (row < nrows) {
            float* red = s_q + row * D + d0;
            float out[kVElems];
#pragma unroll
            for (int e = 0; e < kVElems; ++e) out[e] = acc[row][e] + (w > 0 ? red[e] : 0.0f);
            if (w < kWarps - 1) {
#pragma unroll
              for (int e = 0; e < kVElems; ++e) red[e] = out[e];
            } else {
              const int gr = row0 + row;
              const int64_t prow =
                  (int64_t(z) * p.num_tokens + tok0 + gr / group) * p.num_q_heads + g * group +
                  gr % group;
              float* dst = p.partial_out + prow * D + d0;
#pragma unroll
              for (int e = 0; e < kVElems; ++e) dst[e] = out[e] * s_inv[row];
            }
          }
        }
        if (w == kWarps - 1 && lane < nrows) {
          const int gr = row0 + lane;
          p.partial_lse[(int64_t(z) * p.num_tokens + tok0 + gr / group) * p.num_q_heads +
                        g * group + gr % group] = s_lse[lane];
        }
      }
      __syncthreads();  // also guards s_q / s_p / s_inv before the next pass reuses them
    }
  }
}

template <int D, typename T, typename KvT>
cudaError_t launch(const PagedDecodeParams& p, cudaStream_t stream) {
  const auto kernel = paged_decode_partition_kernel<D, T, KvT>;
  constexpr size_t kSmem = FastSmem<D, KvT>::kBytes;
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
  if (e != cudaSuccess) return e;
  const dim3 grid(p.num_kv_heads, p.request_end - p.request_begin, p.max_partitions);
  kernel<<<grid, kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <int D, typename T>
cudaError_t launch_kv(const PagedDecodeParams& p, DType q_dtype, DType kv_dtype,
                      cudaStream_t stream) {
  if (kv_dtype == q_dtype) return launch<D, T, T>(p, stream);
  if (kv_dtype == DType::kFP8E4M3) return launch<D, T, fp8>(p, stream);
  return cudaErrorInvalidValue;
}

template <int D>
cudaError_t launch_q(const PagedDecodeParams& p, DType q_dtype, DType kv_dtype,
                     cudaStream_t stream) {
  switch (q_dtype) {
    case DType::kBF16: return launch_kv<D, bf16>(p, q_dtype, kv_dtype, stream);
    case DType::kF16: return launch_kv<D, fp16>(p, q_dtype, kv_dtype, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool paged_decode_fast_path_supported(int head_dim, int block_size, int group_size,
                                      int max_seq_len, int window_left, bool has_sinks) {
  return (head_dim == 64 || head_dim == 128) && (block_size == 16 || block_size == 32) &&
         group_size >= 1 && group_size <= 16 && max_seq_len <= 131072 && window_left < 0 &&
         !has_sinks;
}

cudaError_t launch_paged_decode_fast(const PagedDecodeParams& p, DType q_dtype, DType kv_dtype,
                                     cudaStream_t stream) {
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.num_q_heads / p.num_kv_heads > kMaxRows || p.block_size <= 0 ||
      (p.block_size & (p.block_size - 1)) != 0 || p.request_end - p.request_begin > 65535 ||
      p.max_partitions > 65535)
    return cudaErrorInvalidValue;
  if (p.request_end <= p.request_begin || p.max_partitions <= 0) return cudaSuccess;
  switch (p.head_dim) {
    case 64: return launch_q<64>(p, q_dtype, kv_dtype, stream);
    case 128: return launch_q<128>(p, q_dtype, kv_dtype, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels

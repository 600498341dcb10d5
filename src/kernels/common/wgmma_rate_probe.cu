// The wgmma issue-rate probe (wgmma_rate_probe.h). Shared memory holds a Q-like [64 x 576],
// a K-like [64 x 576] (or [128 x 576] for the 128-key form) and a P-like [64 x 64] region of
// small random bf16 values in the 128-byte-swizzled panels the MLA kernels use.
#include "common/wgmma.cuh"
#include "common/wgmma_rate_probe.h"

namespace tripath::kernels {

namespace {

constexpr int kQBytes = 64 * 576 * 2;
constexpr int kKBytes = 128 * 576 * 2;
constexpr int kPBytes = 64 * 64 * 2;
constexpr int kSmem = 1024 + kQBytes + kKBytes + kPBytes;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// `reps` commit groups of `issue(d)` (one form's wgmmas into the accumulators d), each waited
// for; the accumulators then kept alive by a store that never happens.
template <int N, class Issue>
__device__ void run_groups(int reps, float* sink, Issue issue) {
  float d[N];
#pragma unroll
  for (int i = 0; i < N; ++i) d[i] = 0.0f;
  for (int r = 0; r < reps; ++r) {
    wgmma::fence();
    issue(d);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(d);
  }
  if (d[0] == 12345.0f) *sink = d[1];
}

template <int kForm>
__device__ void run_form(uint32_t aQ, uint32_t aK, uint32_t aP, int reps, float* sink) {
  const uint32_t a[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};  // RS A operand
  if constexpr (kForm == kRateSsN64 || kForm == kRateRsN64 || kForm == kRateSsN64Fenced) {
    run_groups<32>(reps, sink, [&](float (&d)[32]) {
#pragma unroll
      for (int pk = 0; pk < 9; ++pk) {
        if constexpr (kForm == kRateSsN64Fenced) {
          if (pk > 0) wgmma::fence();
        }
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint64_t db = wgmma::desc_sw128(aK + pk * 64 * 128 + ks * 32, 16, 1024);
          if constexpr (kForm != kRateRsN64) {
            const uint64_t da = wgmma::desc_sw128(aQ + pk * 64 * 128 + ks * 32, 16, 1024);
            wgmma::Mma<64, bf16>::ss(d, da, db, pk > 0 || ks > 0);
          } else {
            wgmma::Mma<64, bf16>::rs(d, a, db, pk > 0 || ks > 0);
          }
        }
      }
    });
  } else if constexpr (kForm == kRateSsN128) {
    run_groups<64>(reps, sink, [&](float (&d)[64]) {
#pragma unroll
      for (int pk = 0; pk < 9; ++pk) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint64_t da = wgmma::desc_sw128(aQ + pk * 64 * 128 + ks * 32, 16, 1024);
          const uint64_t db = wgmma::desc_sw128(aK + pk * 128 * 128 + ks * 32, 16, 1024);
          wgmma::Mma<128, bf16>::ss(d, da, db, pk > 0 || ks > 0);
        }
      }
    });
  } else {
    run_groups<128>(reps, sink, [&](float (&d)[128]) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if constexpr (kForm == kRateRsN256) {
          // V of a 64-key tile: MN-major, 64-dim panels 64 x 128 bytes apart.
          const uint64_t db = wgmma::desc_sw128(aK + kk * 16 * 128, 64 * 128, 1024);
          wgmma::Mma<256, bf16>::rs(d, a, db, 1);
        } else {
          const uint64_t da = wgmma::desc_sw128(aP + kk * 32, 16, 1024);
          const uint64_t db = wgmma::desc_sw128(aK + kk * 32, 16, 1024);
          wgmma::Mma<256, bf16>::ss(d, da, db, 1);
        }
      }
    });
  }
}
#endif

template <int kF0, int kF1>
__global__ void __launch_bounds__(256, 1)
    wgmma_rate_kernel(int reps, unsigned long long* cycles, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
  uint16_t* words = reinterpret_cast<uint16_t*>(smem_raw + pad);
  // Small random values (|x| < 0.5): the power drawn is that of real data, not of zeros.
  for (int i = threadIdx.x; i < (kQBytes + kKBytes + kPBytes) / 2; i += blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ (blockIdx.x * 40503u + 0x9e3779b9u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float f = float(h & 0xffffu) * (1.0f / 65536.0f) - 0.5f;
    words[i] = __bfloat16_as_ushort(__float2bfloat16(f));
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  const uint32_t aQ = raw + pad, aK = aQ + kQBytes, aP = aK + kKBytes;
  const int wg = threadIdx.x / 128;
  unsigned long long t0 = clock64();
  if (wg == 0) {
    if constexpr (kF0 >= 0) run_form<kF0>(aQ, aK, aP, reps, sink);
  } else {
    if constexpr (kF1 >= 0) run_form<kF1>(aQ, aK, aP, reps, sink);
  }
  const unsigned long long t1 = clock64();
  const bool idle = wg == 0 ? kF0 < 0 : kF1 < 0;
  if (threadIdx.x % 128 == 0) cycles[2 * blockIdx.x + wg] = idle ? 0ull : t1 - t0;
#else
  __trap();
#endif
}

template <int kF0, int kF1>
cudaError_t launch_pair(int reps, int blocks, unsigned long long* cycles, cudaStream_t stream) {
  // The accumulators' sink: written only in a case that cannot occur, so any word will do.
  float* sink = reinterpret_cast<float*>(cycles);
  const cudaError_t e = cudaFuncSetAttribute(wgmma_rate_kernel<kF0, kF1>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (e != cudaSuccess) return e;
  wgmma_rate_kernel<kF0, kF1><<<blocks, 256, kSmem, stream>>>(reps, cycles, sink);
  return cudaGetLastError();
}

}  // namespace

int wgmma_rate_group_size(int form) {
  return form == kRateRsN256 || form == kRateSsN256 ? 4 : form < 0 ? 0 : 36;
}

cudaError_t launch_wgmma_rate_probe(int form0, int form1, int reps, int blocks,
                                    unsigned long long* cycles, cudaStream_t stream) {
  // The pairs the MLA design questions need: each form alone, each form on both warpgroups,
  // and the seesaw's mix (one warpgroup's S against the other's P V).
#define TRIPATH_RATE_PAIR(a, b) \
  if (form0 == (a) && form1 == (b)) return launch_pair<(a), (b)>(reps, blocks, cycles, stream);
  TRIPATH_RATE_PAIR(kRateSsN64, kRateIdle)
  TRIPATH_RATE_PAIR(kRateRsN64, kRateIdle)
  TRIPATH_RATE_PAIR(kRateRsN256, kRateIdle)
  TRIPATH_RATE_PAIR(kRateSsN256, kRateIdle)
  TRIPATH_RATE_PAIR(kRateSsN128, kRateIdle)
  TRIPATH_RATE_PAIR(kRateSsN64, kRateSsN64)
  TRIPATH_RATE_PAIR(kRateRsN64, kRateRsN64)
  TRIPATH_RATE_PAIR(kRateRsN256, kRateRsN256)
  TRIPATH_RATE_PAIR(kRateSsN256, kRateSsN256)
  TRIPATH_RATE_PAIR(kRateSsN64, kRateRsN256)
  TRIPATH_RATE_PAIR(kRateRsN64, kRateRsN256)
  TRIPATH_RATE_PAIR(kRateSsN64Fenced, kRateIdle)
  TRIPATH_RATE_PAIR(kRateSsN64Fenced, kRateSsN64Fenced)
  TRIPATH_RATE_PAIR(kRateSsN64Fenced, kRateRsN256)
#undef TRIPATH_RATE_PAIR
  return cudaErrorInvalidValue;
}

}  // namespace tripath::kernels

// Warp-level fragments of the split-KV decode kernel (decode_split_kv.cuh): how one warp's
// 16-key slice of a shared-memory K/V stage becomes mma.sync m16n8k16 operands, for 16-bit
// caches (ldmatrix, as in the unified kernel) and for fp8 e4m3 caches widened in registers
// (raw bytes in shared memory, no widened copy, no extra barrier).
//
// fp8, QK^T: a non-transposed ldmatrix of 8 key rows x 16 bytes hands lane l (t = l % 4) the 4
// bytes [4t, 4t + 4) of key l / 4 in one register. The B fragment wants k = 2t, 2t+1 (b0) and
// 2t+8, 2t+9 (b1). A dot product does not care about the order of its terms, so the kernel
// permutes the head dim inside each 16-dim step on both sides: k 2t+j <-> dim 4t+j and
// k 2t+8+j <-> dim 4t+2+j (j = 0, 1). q is stored in that order (decode_q_position), and one
// ldmatrix register widens into b0 (its low two bytes) and b1 (its high two bytes).
//
// fp8, PV: a transposed ldmatrix of 8 key rows x 16 bytes hands lane l (p = l / 4) one register
// holding the bytes (key 2t: dims 2p, 2p+1) and (key 2t+1: dims 2p, 2p+1). A byte permute makes
// it (keys 2t, 2t+1 of dim 2p | keys 2t, 2t+1 of dim 2p+1): the B fragments of two n-tiles, the
// even and the odd dims of the 16-byte chunk. Accumulator tile 2c + parity therefore holds dims
// 16c + 2n + parity (n = 0..7): lane t holds dims 16c + 4t + parity + {0, 2} (decode_o_dim).
//
// Widening: cvt.rn.f16x2.e4m3x2 (one instruction per two values on sm_89+, exact), so fp8 caches
// run the tensor cores in f16 whatever the q dtype (a bf16 q is rescaled by a power of two per
// row into f16's range: see the kernel).
#pragma once

#include <cstdint>

#include "common/device_math.cuh"

namespace tripath::kernels::decode {

// Two e4m3 values (the low byte first) -> two f16 values (the low half first).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Position of head dim d in the fp8 path's permuted q row (see the file comment).
__host__ __device__ __forceinline__ int decode_q_position(int d) {
  const int w = d % 16, t = w / 4, j = w % 4;
  return d - w + (j < 2 ? 2 * t + j : 8 + 2 * t + j - 2);
}

// Head dim held by accumulator element e (0..3) of output tile `tile` in lane t (= lane % 4).
template <bool kFp8>
__host__ __device__ __forceinline__ int decode_o_dim(int tile, int e, int t) {
  if (kFp8) return 16 * (tile / 2) + 4 * t + tile % 2 + 2 * (e % 2);
  return 8 * tile + 2 * t + e % 2;
}

// s[2][4] += Q K^T for this warp's 16 keys (two 8-key n-tiles). `tk` points at the warp's first
// key row of the stage (kRowBytes apart); qf(ks) returns the A fragment of 16-dim step ks.
// kSwizzled: the lane's rows hold logical 16-byte chunk c at c ^ sw (the tiled layout's swizzle,
// landed as it is by bulk copies: sw = the row's key mod 8; rows of whole 8-chunk groups).
template <int D, int kRowBytes, bool kFp8, typename MmaT, bool kSwizzled = false, typename QFrag>
__device__ __forceinline__ void decode_qk(float (&s)[2][4], const unsigned char* tk, int lane,
                                          QFrag&& qf, int sw = 0) {
  constexpr int kSteps = D / 16;
  if constexpr (!kFp8) {
    // Lanes 0-7: keys 0-7, dims 0-7 of the step; 8-15: keys 0-7, dims 8-15; 16-31: keys 8-15.
    const unsigned char* row = tk + ((lane / 16) * 8 + lane % 8) * kRowBytes;
    const int half = (lane / 8) % 2;
    const unsigned char* base = row + half * 16;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      uint32_t b[4];
      ldmatrix_x4(b, kSwizzled ? row + ((2 * ks + half) ^ sw) * 16 : base + ks * 32);
      uint32_t a[4];
      qf(ks, a);
      mma_16816<MmaT>(s[0], a, b[0], b[1]);
      mma_16816<MmaT>(s[1], a, b[2], b[3]);
    }
  } else {
    // One 16-byte chunk of a row is one 16-dim step. Lanes 0-7: keys 0-7 (n-tile 0), step 2i;
    // 8-15: keys 8-15 (n-tile 1), step 2i; 16-23 / 24-31: the same keys, step 2i + 1.
    const unsigned char* row = tk + (((lane / 8) % 2) * 8 + lane % 8) * kRowBytes;
    const unsigned char* base = row + (lane / 16) * 16;
#pragma unroll
    for (int ks = 0; ks + 1 < kSteps; ks += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, kSwizzled ? row + ((ks + lane / 16) ^ sw) * 16 : base + ks * 16);
      uint32_t a[4];
      qf(ks, a);
      mma_16816<MmaT>(s[0], a, e4m3x2_to_f16x2(r[0]), e4m3x2_to_f16x2(r[0] >> 16));
      mma_16816<MmaT>(s[1], a, e4m3x2_to_f16x2(r[1]), e4m3x2_to_f16x2(r[1] >> 16));
      qf(ks + 1, a);
      mma_16816<MmaT>(s[0], a, e4m3x2_to_f16x2(r[2]), e4m3x2_to_f16x2(r[2] >> 16));
      mma_16816<MmaT>(s[1], a, e4m3x2_to_f16x2(r[3]), e4m3x2_to_f16x2(r[3] >> 16));
    }
    if constexpr (kSteps % 2 == 1) {  // head dim 80: the last step alone (lanes 0-15 address)
      uint32_t r[2];
      ldmatrix_x2(r, tk + (((lane / 8) % 2) * 8 + lane % 8) * kRowBytes + (kSteps - 1) * 16);
      uint32_t a[4];
      qf(kSteps - 1, a);
      mma_16816<MmaT>(s[0], a, e4m3x2_to_f16x2(r[0]), e4m3x2_to_f16x2(r[0] >> 16));
      mma_16816<MmaT>(s[1], a, e4m3x2_to_f16x2(r[1]), e4m3x2_to_f16x2(r[1] >> 16));
    }
  }
}

// o[D/8][4] += P V over this warp's 16 keys; `a` is P as the A fragment (k = the 16 keys).
// kSwizzled, sw: as decode_qk's.
template <int D, int kRowBytes, bool kFp8, typename MmaT, bool kSwizzled = false>
__device__ __forceinline__ void decode_pv(float (&o)[D / 8][4], const uint32_t (&a)[4],
                                          const unsigned char* tv, int lane, int sw = 0) {
  constexpr int kChunks = kFp8 ? D / 16 : D / 8;  // 16-byte chunks per row
  // Lanes 0-7: keys 0-7; 8-15: keys 8-15 (the two k halves); 16-31: the next chunk.
  const unsigned char* row = tv + (((lane / 8) % 2) * 8 + lane % 8) * kRowBytes;
  const unsigned char* base = row + (lane / 16) * 16;
  if constexpr (!kFp8) {
#pragma unroll
    for (int c = 0; c < kChunks; c += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, kSwizzled ? row + ((c + lane / 16) ^ sw) * 16 : base + c * 16);
      mma_16816<MmaT>(o[c], a, b[0], b[1]);
      mma_16816<MmaT>(o[c + 1], a, b[2], b[3]);
    }
  } else {
    // Byte permute 0x3120: (b0 b1 b2 b3) -> (b0 b2 | b1 b3): even dim's keys low, odd dim's high.
#pragma unroll
    for (int c = 0; c + 1 < kChunks; c += 2) {
      uint32_t r[4];
      ldmatrix_x4_trans(r, kSwizzled ? row + ((c + lane / 16) ^ sw) * 16 : base + c * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t lo = __byte_perm(r[2 * h], 0, 0x3120);      // keys 0-7 of the k range
        const uint32_t hi = __byte_perm(r[2 * h + 1], 0, 0x3120);  // keys 8-15
        mma_16816<MmaT>(o[2 * (c + h)], a, e4m3x2_to_f16x2(lo), e4m3x2_to_f16x2(hi));
        mma_16816<MmaT>(o[2 * (c + h) + 1], a, e4m3x2_to_f16x2(lo >> 16),
                        e4m3x2_to_f16x2(hi >> 16));
      }
    }
    if constexpr (kChunks % 2 == 1) {  // head dim 80: the last chunk alone
      uint32_t r[2];
      ldmatrix_x2_trans(r, row + (kChunks - 1) * 16);
      const uint32_t lo = __byte_perm(r[0], 0, 0x3120);
      const uint32_t hi = __byte_perm(r[1], 0, 0x3120);
      mma_16816<MmaT>(o[2 * (kChunks - 1)], a, e4m3x2_to_f16x2(lo), e4m3x2_to_f16x2(hi));
      mma_16816<MmaT>(o[2 * (kChunks - 1) + 1], a, e4m3x2_to_f16x2(lo >> 16),
                      e4m3x2_to_f16x2(hi >> 16));
    }
  }
}

}  // namespace tripath::kernels::decode

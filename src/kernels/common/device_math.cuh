// Warp-level building blocks of the tensor-core kernels: cp.async, ldmatrix, mma.sync
// m16n8k16 (bf16/f16 in, f32 accumulate), and element conversions including fp8 e4m3.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace tripath::kernels {

using bf16 = __nv_bfloat16;
using fp16 = __half;
using fp8 = __nv_fp8_e4m3;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 2^x by one MUFU.EX2 (ex2.approx.ftz: ~2 ulp, results below 2^-126 flushed to zero, -inf -> 0).
// Softmax weights relative to the row max lose nothing by the flush; exp2f without fast math
// wraps each MUFU in a range test and two predicated multiplies for denormal results, 3 of the
// ~9 instructions per score element in the flash kernel's softmax (SASS of the D = 128 kernel).
// The tuned kernels use this; the portable baselines (unified, two_path, mla_baseline) keep
// exp2f.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-byte async copy global -> shared; src_bytes 0 fills the destination with zeros.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}
// 4-byte async copy global -> shared (.ca, the only form under 16 bytes): small metadata that a
// later phase reads from shared memory without a dependent global round trip.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
// cp_async_16 with an L2 hint to fetch the whole 128-byte line: for rows streamed whole (K/V,
// latent), where it only saves DRAM requests.
__device__ __forceinline__ void cp_async_16_l2_128(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}
// True when every lane's two row-rescale factors are exactly 1 (no row maximum moved): the
// online softmax's O *= alpha is then the identity, and the tuned loops skip it per warp.
__device__ __forceinline__ bool warp_rescale_is_identity(float alpha0, float alpha1) {
  return __all_sync(0xffffffffu, alpha0 == 1.0f && alpha1 == 1.0f);
}
// An attention sink is one more part with output 0 and LSE = its logit: folds it into a row's
// natural-log `lse` and the `scale` of its normalized output. A row with no keys and a -inf
// sink keeps 0 and -inf (as the reference's merge), never NaN.
__device__ __forceinline__ void fold_sink(float sink, float& lse, float& scale) {
  const float mx = fmaxf(lse, sink);
  if (mx == -INFINITY) return;
  const float merged = mx + logf(expf(lse - mx) + expf(sink - mx));
  scale *= expf(lse - merged);
  lse = merged;
}
// Programmatic dependent launch (sm_90; see launch_kernel.h): a kernel launched as a
// programmatic dependent may start while the kernel before it in the stream is still running.
// pdl_wait() returns once that kernel has completed and its writes are visible (at once after a
// plain launch); every such kernel calls it before its first global access. pdl_launch_dependents()
// lets the next kernel, if launched that way, start now (its own pdl_wait still waits for this
// kernel's end).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Named barriers 1..15 (0 is __syncthreads) over `threads` threads, a multiple of 32: some
// threads arrive (signal and go on), the others sync (wait for all `threads` arrivals).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// A 32-bit read-only global load that the compiler keeps where it is written (asm volatile), so
// it issues ahead of later branches and loads it does not depend on.
__device__ __forceinline__ int32_t load_global_pinned(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.nc.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
// Nanoseconds from the GPU's global timer (one clock for every SM; timing probes only), read
// once `after` is available (the asm's input orders it after the load that produced it).
__device__ __forceinline__ unsigned long long global_timer_ns(int after) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t) : "r"(after));
  return t;
}
__device__ __forceinline__ unsigned int sm_id() {
  unsigned int id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<bf16>(float (&c)[4], const uint32_t (&a)[4],
                                                uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<fp16>(float (&c)[4], const uint32_t (&a)[4],
                                                uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats packed as two 16-bit values in one register (low half = a).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack2<bf16>(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<fp16>(float a, float b) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(fp16 v) { return __half2float(v); }
__device__ __forceinline__ float to_float(fp8 v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ fp16 from_float<fp16>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ fp8 from_float<fp8>(float v) {
  // Round to nearest even, saturate to +-448 (the OCP e4m3 finite range); NaN stays NaN.
  return fp8(__nv_fp8_e4m3(v));
}
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }

// Eight fp8 e4m3 values (8 bytes) -> eight 16-bit values of T (16 bytes).
template <typename T>
__device__ __forceinline__ uint4 fp8x8_to(uint2 raw) {
  const uint32_t words[2] = {raw.x, raw.y};
  uint32_t out[4];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_fp8x2_storage_t pair =
          static_cast<__nv_fp8x2_storage_t>((words[w] >> (16 * h)) & 0xFFFFu);
      const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      out[w * 2 + h] = pack2<T>(f.x, f.y);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Eight 16-bit values of T (16 bytes) -> eight fp8 e4m3 values (8 bytes), stored = e4m3(x /
// scale) with a true division: the CPU reference's rounding, so every cache write agrees with it
// (and with the others) bit for bit.
template <typename T>
__device__ __forceinline__ uint2 fp8x8_from(uint4 raw, float scale) {
  const T* x = reinterpret_cast<const T*>(&raw);
  uint8_t b[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const fp8 q = from_float<fp8>(to_float(x[e]) / scale);
    b[e] = q.__x;
  }
  return *reinterpret_cast<const uint2*>(b);
}

}  // namespace tripath::kernels

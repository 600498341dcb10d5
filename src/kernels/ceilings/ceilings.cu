#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tripath/device.h"
#include "tripath/error.h"

// The bandwidth and matrix-rate ceilings of shared/BENCH.md (declared in tripath/device.h).
namespace tripath {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("tripath bench: ") + what + ": " + cudaGetErrorString(e));
}

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// The same copy with four independent 16-byte loads in flight per thread before its stores: the
// one-load form above waits a full memory round trip per word and measured ~3.96 TB/s on the
// H200, under the ~4.3 that cudaMemcpy reaches (shared/BENCH.md, KINDS.md).
__global__ void copy_x4_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// Reads every 16-byte word, four loads in flight per thread; the xor is written only when
// impossible so the loads stay live.
__global__ void read_kernel(const uint4* __restrict__ src, size_t n, uint32_t* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = x;
  }
}

// Random bf16 in [-1, 1): the rate is measured on random data, never zeros.
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16(static_cast<float>(x & 0xFFFF) / 32768.0f - 1.0f);
  }
}

template <typename F>
double median_ms(int warmup, int repeats, F&& launch) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < repeats; ++i) {
    check(cudaEventRecord(a), "record");
    launch();
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  check(cudaGetLastError(), "ceiling kernel");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

GpuCeilings measure_gpu_ceilings() {
  GpuCeilings c;
  int dev = 0;
  cudaDeviceProp prop{};
  check(cudaGetDevice(&dev), "device");
  check(cudaGetDeviceProperties(&prop, dev), "properties");
  c.gpu_name = prop.name;
  c.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  int clock_khz = 0, mem_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev) == cudaSuccess)
    c.sm_clock_mhz = clock_khz / 1000;
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess)
    c.memory_clock_mhz = mem_khz / 1000;
  cudaGetLastError();

  const size_t bytes = size_t(4) << 30;  // 4 GiB read (and 4 GiB written by the copy)
  const size_t words = bytes / 16;
  void *src = nullptr, *dst = nullptr;
  uint32_t* sink = nullptr;
  check(cudaMalloc(&src, bytes), "malloc 4 GiB");
  check(cudaMalloc(&dst, bytes), "malloc 4 GiB");
  check(cudaMalloc(&sink, 4), "malloc");
  const int grid = prop.multiProcessorCount * 8;
  fill_kernel<<<grid, 256>>>(static_cast<uint32_t*>(src), bytes / 4, 1u);
  // Three copies of the same 4 GiB; the ceiling is the fastest (the best the chip showed us).
  const double copy_ms = median_ms(2, 10, [&] {
    copy_kernel<<<grid, 256>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), words);
  });
  const double copy_x4_ms = median_ms(2, 10, [&] {
    copy_x4_kernel<<<grid, 256>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), words);
  });
  const double memcpy_ms = median_ms(2, 10, [&] {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  });
  auto tbps = [&](double ms) { return 2.0 * bytes / (ms * 1e-3) / 1e12; };
  c.copy_kernel_tbps = tbps(copy_ms);
  c.copy_x4_kernel_tbps = tbps(copy_x4_ms);
  c.copy_memcpy_tbps = tbps(memcpy_ms);
  c.copy_tbps = std::max({c.copy_kernel_tbps, c.copy_x4_kernel_tbps, c.copy_memcpy_tbps});
  const double read_ms = median_ms(2, 10, [&] {
    read_kernel<<<grid, 512>>>(static_cast<const uint4*>(src), words, sink);
  });
  c.read_tbps = double(bytes) / (read_ms * 1e-3) / 1e12;
  check(cudaFree(src), "free");
  check(cudaFree(dst), "free");
  check(cudaFree(sink), "free");

  const int n = 8192;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *d = nullptr;
  const size_t mat = size_t(n) * n;
  check(cudaMalloc(&a, mat * 2), "malloc");
  check(cudaMalloc(&b, mat * 2), "malloc");
  check(cudaMalloc(&d, mat * 2), "malloc");
  fill_bf16_kernel<<<grid, 256>>>(a, mat, 3u);
  fill_bf16_kernel<<<grid, 256>>>(b, mat, 5u);
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw Error("tripath bench: cublasCreate failed");
  const float alpha = 1.0f, beta = 0.0f;
  const double gemm_ms = median_ms(3, 10, [&] {
    cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                 CUDA_R_16BF, n, &beta, d, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
  });
  c.gemm_tflops = 2.0 * n * double(n) * n / (gemm_ms * 1e-3) / 1e12;
  cublasDestroy(handle);
  check(cudaFree(a), "free");
  check(cudaFree(b), "free");
  check(cudaFree(d), "free");
  return c;
}

}  // namespace tripath

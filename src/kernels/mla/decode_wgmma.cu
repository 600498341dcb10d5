// Host side of the wgmma MLA decode kernel (decode_wgmma.cuh).
#include "flash_prefill_specializations.h"  // TRIPATH_FLASH_PREFILL_MLA: 1 when built for sm_90a
#include "mla/decode_wgmma.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

bool mla_decode_wgmma_built() { return TRIPATH_FLASH_PREFILL_MLA != 0; }

cudaError_t launch_mla_decode_wgmma(const MlaDecodeParams& p, cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  const int smem = static_cast<int>(MlaWgmmaConfig::kSmemBytes);
  const cudaError_t e = cudaFuncSetAttribute(mla_decode_wgmma_kernel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  mla_decode_wgmma_kernel<<<p.num_items, MlaWgmmaConfig::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tripath::kernels

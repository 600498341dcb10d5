// Runtime -> template dispatch of the flash prefill kernel over the generated specialization
// table (head dims of TRIPATH_HEAD_DIMS that are multiples of 64, x TRIPATH_DTYPES), built only
// when TRIPATH_CUDA_ARCHS includes 90a.
#include "common/device_math.cuh"
#include "flash_prefill_specializations.h"
#include "prefill/launch.h"

namespace tripath::kernels {

bool flash_prefill_built(int head_dim, DType q) {
#define X(D, T, QE) \
  if (head_dim == D && q == DType::QE) return true;
  TRIPATH_FLASH_PREFILL_SPECIALIZATIONS(X)
#undef X
  return false;
}

cudaError_t launch_flash_prefill(int head_dim, DType q, const UnifiedParams& p,
                                 const FlashTensorMaps* maps, FlashConsumerMode mode,
                                 cudaStream_t stream) {
#define X(D, T, QE)                    \
  if (head_dim == D && q == DType::QE) \
    return launch_flash_prefill_impl<D, D, T>(p, maps, mode, stream);
  TRIPATH_FLASH_PREFILL_SPECIALIZATIONS(X)
#undef X
  return cudaErrorInvalidValue;  // the backend checks flash_prefill_built() first
}

bool flash_prefill_mla_built() { return TRIPATH_FLASH_PREFILL_MLA != 0; }

}  // namespace tripath::kernels

// MLA's non-absorbed attention (q/k 192 = 128 nope + 64 rope, v 128) through the unified kernel.
#include "unified/launch.h"
#include "unified/unified_attention.cuh"

namespace tripath::kernels {

cudaError_t launch_unified_mla(const UnifiedParams& p, cudaStream_t stream) {
  return launch_attention_tiles<192, 128, bf16, bf16>(p, kRows64, stream);
}

}  // namespace tripath::kernels

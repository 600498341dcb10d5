// MLA's non-absorbed attention (q/k 192 = 128 nope + 64 rope, v 128) through the flash kernel.
#include "prefill/flash_prefill.cuh"
#include "prefill/launch.h"

namespace tripath::kernels {

cudaError_t launch_flash_prefill_mla(const UnifiedParams& p, cudaStream_t stream) {
  return launch_flash_prefill_impl<192, 128, bf16>(p, nullptr, FlashConsumerMode::kSerial, stream);
}

}  // namespace tripath::kernels

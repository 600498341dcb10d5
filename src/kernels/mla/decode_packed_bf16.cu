// Instantiations of the heads-packed MLA decode kernel for a bf16 latent cache.
#include "mla/decode_packed.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

template cudaError_t launch_mla_decode_packed_impl<1, bf16>(const MlaDecodeParams&, cudaStream_t);
template cudaError_t launch_mla_decode_packed_impl<2, bf16>(const MlaDecodeParams&, cudaStream_t);
template cudaError_t launch_mla_decode_packed_impl<4, bf16>(const MlaDecodeParams&, cudaStream_t);

cudaError_t launch_mla_decode_packed_loads_only(const MlaDecodeParams& p, cudaStream_t stream) {
  return launch_mla_decode_packed_kernel<1, bf16, true>(p, stream);
}

}  // namespace tripath::kernels

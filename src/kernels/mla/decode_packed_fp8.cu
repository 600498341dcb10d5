// Instantiations of the heads-packed MLA decode kernel for a fp8 latent cache.
#include "mla/decode_packed.cuh"

namespace tripath::kernels {

template cudaError_t launch_mla_decode_packed_impl<1, fp8>(const MlaDecodeParams&, cudaStream_t);
template cudaError_t launch_mla_decode_packed_impl<2, fp8>(const MlaDecodeParams&, cudaStream_t);
template cudaError_t launch_mla_decode_packed_impl<4, fp8>(const MlaDecodeParams&, cudaStream_t);

}  // namespace tripath::kernels

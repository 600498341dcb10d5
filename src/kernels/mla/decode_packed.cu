// Runtime -> template dispatch of the heads-packed MLA decode kernel (decode_packed.cuh); the
// instantiations live in decode_packed_bf16.cu and decode_packed_fp8.cu so they build in
// parallel.
#include "common/device_math.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

template <int kMTiles, typename CacheT>
cudaError_t launch_mla_decode_packed_impl(const MlaDecodeParams& p, cudaStream_t stream);

int mla_decode_packed_rows(int rows_per_request) {
  // 16 heads x 1 token fills one M tile exactly; 16 x 2 two. Anything larger takes 64-row
  // blocks (128 heads: two blocks per split, each reading the split's latent once).
  if (rows_per_request <= 16) return 16;
  if (rows_per_request <= 32) return 32;
  return 64;
}

cudaError_t launch_mla_decode_packed(const MlaDecodeParams& p, int rows_per_block, DType cache,
                                     cudaStream_t stream) {
  const bool fp8_cache = cache == DType::kFP8E4M3;
  if (!fp8_cache && cache != DType::kBF16) return cudaErrorInvalidValue;
  switch (rows_per_block) {
    case 16:
      return fp8_cache ? launch_mla_decode_packed_impl<1, fp8>(p, stream)
                       : launch_mla_decode_packed_impl<1, bf16>(p, stream);
    case 32:
      return fp8_cache ? launch_mla_decode_packed_impl<2, fp8>(p, stream)
                       : launch_mla_decode_packed_impl<2, bf16>(p, stream);
    case 64:
      return fp8_cache ? launch_mla_decode_packed_impl<4, fp8>(p, stream)
                       : launch_mla_decode_packed_impl<4, bf16>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tripath::kernels

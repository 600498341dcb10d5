// Host side of the wgmma MLA decode kernel (decode_wgmma.cuh): its latent-cache tensor map and
// its launch.
#include <algorithm>

#include "common/launch_kernel.h"
#include "common/tensor_map_encode.h"
#include "flash_prefill_specializations.h"  // TRIPATH_FLASH_PREFILL_MLA: 1 when built for sm_90a
#include "mla/decode_wgmma.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

bool mla_decode_wgmma_built() { return TRIPATH_FLASH_PREFILL_MLA != 0; }

bool make_mla_latent_map(const void* cache, int64_t num_blocks, int block_size, MlaLatentMap* map) {
  if (block_size < 8) return false;  // a box of fewer than 8 rows breaks the swizzle period
  const uint32_t rows = static_cast<uint32_t>(std::min(block_size, MlaWgmmaConfig::kN));
  const uint64_t row_bytes = uint64_t(kMlaEntry) * 2;
  const uint64_t dims[3] = {uint64_t(kMlaEntry), uint64_t(block_size), uint64_t(num_blocks)};
  const uint64_t strides[2] = {row_bytes, row_bytes * uint64_t(block_size)};
  const uint32_t box[3] = {64, rows, 1};
  MlaLatentMap m{};
  if (!encode_tensor_map_3d(&m.map, DType::kBF16, cache, dims, strides, box, true)) return false;
  m.rows = static_cast<int32_t>(rows);
  *map = m;
  return true;
}

namespace {

template <int kProbe>
cudaError_t launch_wgmma(const MlaDecodeParams& p, const MlaLatentMap* map, cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  const int smem = static_cast<int>(MlaWgmmaConfig::kSmemBytes);
  const cudaError_t e = cudaFuncSetAttribute(mla_decode_wgmma_kernel<kProbe>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  MlaLatentMap none{};  // rows = 0: cp.async loads
  const MlaLatentMap& m = map != nullptr ? *map : none;
  return launch_kernel(p.pdl != 0, mla_decode_wgmma_kernel<kProbe>, dim3(p.num_items),
                       dim3(MlaWgmmaConfig::kThreads), smem, stream, p, m);
}

}  // namespace

cudaError_t launch_mla_decode_wgmma(const MlaDecodeParams& p, const MlaLatentMap* map,
                                    cudaStream_t stream) {
  return launch_wgmma<kMlaProbeNone>(p, map, stream);
}

cudaError_t launch_mla_decode_wgmma_probe(const MlaDecodeParams& p, int probe,
                                          cudaStream_t stream) {
  switch (probe) {
    case kMlaProbeLoadsOnly:
      return launch_wgmma<kMlaProbeLoadsOnly>(p, nullptr, stream);
    case kMlaProbeMathOnly:
      return launch_wgmma<kMlaProbeMathOnly>(p, nullptr, stream);
    case kMlaProbeNoPV:
      return launch_wgmma<kMlaProbeNoPV>(p, nullptr, stream);
    default:
      return launch_wgmma<kMlaProbeNone>(p, nullptr, stream);
  }
}

}  // namespace tripath::kernels

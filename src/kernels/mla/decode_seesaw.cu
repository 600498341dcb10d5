// Host side of the seesaw MLA decode kernel (decode_seesaw.cuh): its launch, on the latent map
// of decode_wgmma.cu (make_mla_latent_map, boxes of at most tile_keys rows).
#include "common/launch_kernel.h"
#include "mla/decode_seesaw.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

namespace {

template <int kProbe, int kKeys>
cudaError_t launch_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map, uint32_t* trace,
                          cudaStream_t stream) {
  using Cfg = MlaSeesawConfig<kKeys>;
  if (p.num_items == 0) return cudaSuccess;
  // The backend passes a made map only; a tile is a whole number of boxes.
  if (map.rows < 8 || map.rows > kKeys || kKeys % map.rows != 0) return cudaErrorInvalidValue;
  const int smem = static_cast<int>(Cfg::kSmemBytes);
  const cudaError_t e = cudaFuncSetAttribute(mla_decode_seesaw_kernel<kProbe, kKeys>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  return launch_kernel(p.pdl != 0, mla_decode_seesaw_kernel<kProbe, kKeys>, dim3(p.num_items),
                       dim3(Cfg::kThreads), smem, stream, p, map, trace);
}

template <int kKeys>
cudaError_t launch_probe(const MlaDecodeParams& p, const MlaLatentMap& map, int probe,
                         uint32_t* trace, cudaStream_t stream) {
  switch (probe) {
    case kSeesawProbeLoadsOnly:
      return launch_seesaw<kSeesawProbeLoadsOnly, kKeys>(p, map, nullptr, stream);
    case kSeesawProbeTrace:
      return trace != nullptr ? launch_seesaw<kSeesawProbeTrace, kKeys>(p, map, trace, stream)
                              : cudaErrorInvalidValue;
    default:
      return launch_seesaw<kSeesawProbeNone, kKeys>(p, map, nullptr, stream);
  }
}

}  // namespace

cudaError_t launch_mla_decode_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map,
                                     int tile_keys, cudaStream_t stream) {
  if (tile_keys == 32) return launch_seesaw<kSeesawProbeNone, 32>(p, map, nullptr, stream);
  if (tile_keys == 64) return launch_seesaw<kSeesawProbeNone, 64>(p, map, nullptr, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_mla_decode_seesaw_probe(const MlaDecodeParams& p, const MlaLatentMap& map,
                                           int tile_keys, int probe, uint32_t* trace,
                                           cudaStream_t stream) {
  if (tile_keys == 32) return launch_probe<32>(p, map, probe, trace, stream);
  if (tile_keys == 64) return launch_probe<64>(p, map, probe, trace, stream);
  return cudaErrorInvalidValue;
}

}  // namespace tripath::kernels

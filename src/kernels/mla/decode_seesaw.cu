// Host side of the seesaw MLA decode kernel (decode_seesaw.cuh): its launch, on the latent map
// of decode_wgmma.cu (make_mla_latent_map).
#include "common/launch_kernel.h"
#include "mla/decode_seesaw.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

namespace {

template <int kProbe, bool kWide = false>
cudaError_t launch_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map, uint32_t* trace,
                          cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  if (map.rows < 8) return cudaErrorInvalidValue;  // the backend passes a made map only
  const int smem = static_cast<int>(MlaSeesawConfig::kSmemBytes);
  const cudaError_t e = cudaFuncSetAttribute(mla_decode_seesaw_kernel<kProbe, kWide>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  return launch_kernel(p.pdl != 0, mla_decode_seesaw_kernel<kProbe, kWide>, dim3(p.num_items),
                       dim3(MlaSeesawConfig::kThreads), smem, stream, p, map, trace);
}

}  // namespace

cudaError_t launch_mla_decode_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map,
                                     cudaStream_t stream) {
  // H200 run k6 (64 x 4096 keys, 128 heads): at blocks of 16 the four-warp issue took the
  // kernel from 169 to 152 us (mla-decode-4k 171 -> 154); at blocks of 64 (one box per panel)
  // it was 4% slower (151 -> 157 us), so warp 0 keeps issuing there.
  return map.rows < MlaSeesawConfig::kN
             ? launch_seesaw<kSeesawProbeNone, true>(p, map, nullptr, stream)
             : launch_seesaw<kSeesawProbeNone>(p, map, nullptr, stream);
}

cudaError_t launch_mla_decode_seesaw_probe(const MlaDecodeParams& p, const MlaLatentMap& map,
                                           int probe, uint32_t* trace, cudaStream_t stream) {
  switch (probe) {
    case kSeesawProbeLoadsOnly:
      return launch_seesaw<kSeesawProbeLoadsOnly>(p, map, nullptr, stream);
    case kSeesawProbeTrace:
      return trace != nullptr ? launch_seesaw<kSeesawProbeTrace>(p, map, trace, stream)
                              : cudaErrorInvalidValue;
    case kSeesawProbeWide:
      return launch_seesaw<kSeesawProbeNone, true>(p, map, nullptr, stream);
    case kSeesawProbeWideTrace:
      return trace != nullptr ? launch_seesaw<kSeesawProbeTrace, true>(p, map, trace, stream)
                              : cudaErrorInvalidValue;
    default:
      return launch_seesaw<kSeesawProbeNone>(p, map, nullptr, stream);
  }
}

}  // namespace tripath::kernels

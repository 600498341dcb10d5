// Host side of the seesaw MLA decode kernel (decode_seesaw.cuh): its launch, on the latent map
// of decode_wgmma.cu (make_mla_latent_map).
#include <algorithm>

#include "common/launch_kernel.h"
#include "mla/decode_seesaw.cuh"
#include "mla/mla.h"

namespace tripath::kernels {

namespace {

template <int kProbe, bool kPair = false>
cudaError_t launch_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map, uint32_t* trace,
                          cudaStream_t stream) {
  if (p.num_items == 0) return cudaSuccess;
  if (map.rows < 8) return cudaErrorInvalidValue;  // the backend passes a made map only
  const int smem = static_cast<int>(MlaSeesawConfig::kSmemBytes);
  if (kPair && p.num_items % 2 != 0) return cudaErrorInvalidValue;  // CTA pairs
  const cudaError_t e = cudaFuncSetAttribute(mla_decode_seesaw_kernel<kProbe, kPair>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  return launch_kernel_in_clusters(p.pdl != 0, kPair ? 2u : 1u,
                                   mla_decode_seesaw_kernel<kProbe, kPair>, dim3(p.num_items),
                                   dim3(MlaSeesawConfig::kThreads), smem, stream, p, map, trace);
}

}  // namespace

cudaError_t launch_mla_decode_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map,
                                     bool paired, cudaStream_t stream) {
  return paired ? launch_seesaw<kSeesawProbeNone, true>(p, map, nullptr, stream)
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
    case kSeesawProbePaired:
      return launch_seesaw<kSeesawProbeNone, true>(p, map, nullptr, stream);
    case kSeesawProbePairedTrace:
      return trace != nullptr ? launch_seesaw<kSeesawProbeTrace, true>(p, map, trace, stream)
                              : cudaErrorInvalidValue;
    default:
      return launch_seesaw<kSeesawProbeNone>(p, map, nullptr, stream);
  }
}

}  // namespace tripath::kernels

namespace tripath::kernels {

bool mla_decode_items_pair_up(const MlaDecodeWorkItem* items, int32_t num_items,
                              const int32_t* query_lens, int heads) {
  if (num_items <= 0 || num_items % 2 != 0 || heads <= 0) return false;
  constexpr int kRows = MlaSeesawConfig::kM;
  for (int32_t c = 0; c < num_items; c += 2) {
    const MlaDecodeWorkItem& a = items[c];
    const MlaDecodeWorkItem& b = items[c + 1];
    if (a.request != b.request || a.split != b.split || a.kv_begin != b.kv_begin ||
        a.kv_end != b.kv_end || a.row_begin == b.row_begin)
      return false;
    // The same last query token: the same key_hi (mla_item_span), so the same tiles.
    const int rows = query_lens[a.request] * heads;
    const int last_a = (std::min(a.row_begin + kRows, rows) - 1) / heads;
    const int last_b = (std::min(b.row_begin + kRows, rows) - 1) / heads;
    if (last_a != last_b) return false;
  }
  return true;
}

}  // namespace tripath::kernels

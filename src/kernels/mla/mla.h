// Host entry points of the MLA kernels. Each returns the launch's cudaError_t; the backends in
// src/backends/cuda/mla_cuda_backend.cpp validate arguments before calling them.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "mla/params.h"
#include "tripath/dtype.h"

namespace tripath::kernels {

// latent: f32, bf16 or f16; cache: bf16, f16 or fp8 e4m3.
cudaError_t launch_mla_cache_write(const MlaCacheWriteParams& p, DType latent, DType cache,
                                   cudaStream_t stream);

// Baseline absorbed decode, stage 1: every item (16 packed rows, one split) writes a partial
// state to its slot (items must have split >= 0); the merge kernel is stage 2.
inline constexpr int kMlaBaselineRows = 16;
cudaError_t launch_mla_decode_baseline(const MlaDecodeParams& p, DType cache, cudaStream_t stream);

// Heads-packed absorbed decode: `rows_per_block` (16, 32 or 64) packed rows per thread block.
// Items with split < 0 write the final output and LSE; others a partial state.
int mla_decode_packed_rows(int rows_per_request);  // the block height for this many rows
cudaError_t launch_mla_decode_packed(const MlaDecodeParams& p, int rows_per_block, DType cache,
                                     cudaStream_t stream);
// Timing probe of the 16-row bf16 packed kernel: the same latent loads, ring waits and barriers
// without the attention math (outputs meaningless). Only the opt-in GPU timing test calls it.
cudaError_t launch_mla_decode_packed_loads_only(const MlaDecodeParams& p, cudaStream_t stream);

// Hopper wgmma absorbed decode (decode_wgmma.cuh): 64-row items, bf16 cache, sm_90a builds only
// (mla_decode_wgmma_built); same outputs as the packed kernel. `map` (make_mla_latent_map)
// selects TMA tile loads; nullptr the cp.async gather.
inline constexpr int kMlaWgmmaRows = 64;
struct MlaLatentMap {
  CUtensorMap map;  // {576 dims, slot, block} of the bf16 latent cache, boxes of 64 x rows
  int32_t rows;     // keys per box: min(block size, 64)
};
// False (map untouched) where TMA does not apply: block size below 8, no driver entry point.
bool make_mla_latent_map(const void* cache, int64_t num_blocks, int block_size, MlaLatentMap* map);
bool mla_decode_wgmma_built();
cudaError_t launch_mla_decode_wgmma(const MlaDecodeParams& p, const MlaLatentMap* map,
                                    cudaStream_t stream);
// The seesaw form of the wgmma kernel (decode_seesaw.cuh: the two warpgroups each compute S of
// every other tile; TMA loads, so `map` from make_mla_latent_map). Same items and outputs.
// Where a tile is several boxes per panel (cache blocks under 64 keys) each refill's boxes are
// issued by all four warps of a warpgroup, at blocks of 64 by its warp 0 (decode_seesaw.cuh,
// kWideIssue).
cudaError_t launch_mla_decode_seesaw(const MlaDecodeParams& p, const MlaLatentMap& map,
                                     cudaStream_t stream);
// Timing probes of the seesaw kernel (outputs meaningless; `probe` one of MlaSeesawProbe in
// decode_seesaw_probe.h): its loads alone, the kernel with either refill issue whatever the
// block size, and each writing its per-pair event clocks to `trace` ([2 blocks][2 warpgroups]
// [32 pairs][10 events]). Only the opt-in GPU timing test calls it.
cudaError_t launch_mla_decode_seesaw_probe(const MlaDecodeParams& p, const MlaLatentMap& map,
                                           int probe, uint32_t* trace, cudaStream_t stream);
// Timing probe of the wgmma kernel (cp.async loads; outputs meaningless): 1 its loads alone,
// 2 its math alone (stale stages), 3 the math without P V, else the kernel. Only the opt-in GPU
// timing test calls it.
cudaError_t launch_mla_decode_wgmma_probe(const MlaDecodeParams& p, int probe, cudaStream_t stream);

// Non-absorbed path: gather latent rows (+ k_pe broadcast into K), then merge partial states.
cudaError_t launch_mla_gather(const MlaGatherParams& p, DType cache, cudaStream_t stream);
cudaError_t launch_mla_merge_parts(const MlaMergePartsParams& p, cudaStream_t stream);

}  // namespace tripath::kernels

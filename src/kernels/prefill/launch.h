// Host entry points of the Hopper flash prefill kernel (three_path's prefill and extend paths).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tripath/dtype.h"
#include "unified/params.h"

namespace tripath::kernels {

// Packed query rows per work item of the flash kernel (the unified kRows64 tile takes 64).
constexpr int kFlashPrefillRows = 128;
// Keys per K/V tile for q/k head dim d and v head dim dv: 32 where 64 would not leave room for
// the stages in shared memory.
constexpr int flash_prefill_tile_keys(int d, int dv) { return d + dv <= 320 ? 64 : 32; }

// TMA descriptions of the K and V caches for the flash kernel's tensor-map loads: rank 3, a box
// of 64 elements x `rows` keys (rows = min(block size, the kernel's tile keys)).
struct FlashTensorMaps {
  CUtensorMap k;
  CUtensorMap v;
  int32_t rows = 0;
  // Box copies of a tile issued by the first producer warp only (false), or spread over every
  // producer warp, each warp a share of the (K or V, 64-wide panel) columns (true).
  bool all_warps_issue = false;
};

// The flash kernel's consumer loop: kSerial (64-key tiles, S, softmax, P V in series),
// kOverlap (FA3's order inside a warpgroup), kWide (kOverlap with 128-key tiles and a producer
// warpgroup that hands its registers to the consumers), kPingPong (kOverlap with the two consumer
// warpgroups taking turns at the tensor cores), kWideSerial (kWide's tiles and producer
// warpgroup with the serial loop: FA3's 128-key tile shape without its order), kWidePingPong
// (kWide with kPingPong's turns: FA3's whole configuration for head dim 128; three_path's
// default, the fastest measured with the loads spread over the producer warps). All but
// kSerial apply to head dims <= 128 (q/k = v dims).
enum class FlashConsumerMode : int {
  kSerial = 0,
  kOverlap = 1,
  kWide = 2,
  kPingPong = 3,
  kWideSerial = 4,
  kWidePingPong = 5,
  // Timing probes of kWideSerial on TMA loads (outputs meaningless; bench without --verify):
  // the math alone (each item's first stages loaded, then the consumers run on stale stages)
  // and the loads alone (the consumers only wait for each tile and release it).
  kProbeMathOnly = 6,
  kProbeLoadsOnly = 7,
  kProbeMathOnlyWidePingPong = 8,  // kWidePingPong's math alone (as kProbeMathOnly)
  // kWideSerial / kWidePingPong with TMA loads shared by CTA pairs: a 2-CTA cluster runs two
  // consecutive items (the backend keeps one (request, KV head)'s items together), and each
  // tile both read comes out of L2 once, half of its boxes issued by each CTA with multicast.
  // Measured slower (H200 prefill-8k: 9.65 / 9.13 ms against kWideSerial's 8.63): halving the
  // L2 reads (6.7 TB/s in the loads-alone probe) did not pay for tying each CTA to its peer.
  kWideSerialCluster = 9,
  kWidePingPongCluster = 10,
  // kWideSerial / kWidePingPong in persistent CTAs: one per SM, each looping over items, the
  // producer loading the next item's Q and tiles under the current item's last tile and output.
  // A CTA starts on item blockIdx.x and then claims the next unclaimed one in list order
  // (UnifiedParams::item_counter), the hardware's greedy order without a CTA launch per item.
  kWideSerialPersistent = 11,
  kWidePingPongPersistent = 12,
  // kWidePingPong with Q in registers for S = Q K^T (RS wgmma: Q loaded once per item by
  // ldmatrix; S's shared-memory reads are K alone, 64 instead of 96 bytes per clock), and rows
  // that keep a stale max up to 2^8 below the true one, so O is rescaled only on the tiles that
  // raise it by more (fewer instructions per tile: the loop runs at the H200's power cap).
  kWidePingPongQReg = 13,
  // kWidePingPongQReg in persistent CTAs. Q lives in registers, so its tile is free for the next
  // item's Q as soon as an item's rows are loaded: the next item's Q and first tiles arrive while
  // the current item runs, and only the epilogue separates two items.
  kWidePingPongQRegPersistent = 14
};
// Modes whose CTAs loop over items (UnifiedParams::item_counter must be set).
constexpr bool flash_mode_is_persistent(FlashConsumerMode m) {
  return m == FlashConsumerMode::kWideSerialPersistent ||
         m == FlashConsumerMode::kWidePingPongPersistent ||
         m == FlashConsumerMode::kWidePingPongQRegPersistent;
}
// Modes whose CTAs run in 2-CTA clusters (launched on an even grid).
constexpr bool flash_mode_is_cluster(FlashConsumerMode m) {
  return m == FlashConsumerMode::kWideSerialCluster || m == FlashConsumerMode::kWidePingPongCluster;
}
// Modes that run FlashPrefillConfig's wide shape (128-key tiles, a producer warpgroup).
constexpr bool flash_mode_is_wide(FlashConsumerMode m) {
  return m == FlashConsumerMode::kWide || m == FlashConsumerMode::kWideSerial ||
         m == FlashConsumerMode::kWidePingPong || m == FlashConsumerMode::kProbeMathOnly ||
         m == FlashConsumerMode::kProbeLoadsOnly ||
         m == FlashConsumerMode::kProbeMathOnlyWidePingPong || flash_mode_is_cluster(m) ||
         flash_mode_is_persistent(m) || m == FlashConsumerMode::kWidePingPongQReg;
}

template <int D, int DV, typename T>
cudaError_t launch_flash_prefill_impl(const UnifiedParams& p, const FlashTensorMaps* maps,
                                      FlashConsumerMode mode, cudaStream_t stream);

// True if this build compiled the kernel for sm_90a and (head_dim, q dtype); the KV cache must
// then hold the same 16-bit dtype as q.
bool flash_prefill_built(int head_dim, DType q);
// Takes the unified kernel's parameters with kFlashPrefillRows-row work items; `maps` (from
// make_flash_tensor_maps) selects the TMA loads, nullptr the cp.async gather; `mode` the
// consumer loop (ignored where it does not apply).
cudaError_t launch_flash_prefill(int head_dim, DType q, const UnifiedParams& p,
                                 const FlashTensorMaps* maps, FlashConsumerMode mode,
                                 cudaStream_t stream);
// Builds `maps` for a (head_dim, q dtype) cache of `layout` (KvLayoutId); false (maps untouched)
// where the TMA loads do not apply: block size below 8, a head dim that is not a multiple of 64,
// or no driver entry point for cuTensorMapEncodeTiled.
bool make_flash_tensor_maps(const void* k_cache, const void* v_cache, int layout,
                            int64_t num_blocks, int block_size, int num_kv_heads, int head_dim,
                            DType q, FlashTensorMaps* maps);
// MLA's non-absorbed attention: q/k 192, v 128, bf16 (see launch_unified_mla).
bool flash_prefill_mla_built();
cudaError_t launch_flash_prefill_mla(const UnifiedParams& p, cudaStream_t stream);

}  // namespace tripath::kernels

// The seesaw MLA kernel's timing probes (decode_seesaw.cuh; launch_mla_decode_seesaw_probe in
// mla.h), shared by the kernel and the opt-in GPU timing test.
#pragma once

namespace tripath::kernels {

// Probes of launch_mla_decode_seesaw_probe (outputs meaningless). None and Trace run the warp-0
// refill issue, Wide and WideTrace the four-warp one (kWideIssue), whatever the block size.
enum MlaSeesawProbe : int {
  kSeesawProbeNone = 0,
  // The loads, waits, refills and hand-offs without S, softmax or P V. (A math-alone form on
  // stale stages made ptxas serialize its wgmmas, C7520, so it would time something else; the
  // opt-in test times the kernel on an L2-resident cache instead.)
  kSeesawProbeLoadsOnly = 1,
  // The kernel, with thread 0 of each warpgroup of blocks 0 and 1 writing the SM clock at the
  // events of every pair (kSeesawTraceEvents per warpgroup and pair, the first kSeesawTracePairs
  // pairs) to `trace`: [block][warpgroup][pair][event], where each tile's time goes.
  kSeesawProbeTrace = 2,
  kSeesawProbeWide = 3,
  kSeesawProbeWideTrace = 4,
};
inline constexpr int kSeesawTraceEvents = 10;
inline constexpr int kSeesawTracePairs = 32;
inline constexpr int kSeesawTraceBlocks = 2;

}  // namespace tripath::kernels

// Measured issue rate of the wgmma forms the MLA decode kernels use (an opt-in probe; sm_90a
// builds only). Each of the two warpgroups of a block runs one form (or none) back to back out
// of shared memory, so the figures say what the tensor cores deliver per form alone and when
// the two warpgroups share them (the seesaw's situation), without loads or softmax.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tripath::kernels {

enum WgmmaRateForm : int {
  kRateIdle = -1,
  kRateSsN64 = 0,   // S of a 64-key tile: 36 m64n64k16, Q and K from shared memory
  kRateRsN64 = 1,   // the same with Q from registers
  kRateRsN256 = 2,  // P V of a 256-dim half: 4 m64n256k16, P in registers, V MN-major
  kRateSsN256 = 3,  // the same with P from shared memory (K-major B)
  kRateSsN128 = 4,  // S of a 128-key tile: 36 m64n128k16 from shared memory
  kRateSsN64Fenced = 5,  // kRateSsN64 with a wgmma fence (warpgroup arrive) before every 4
};
// wgmma instructions per group of each form (one commit group, then a wait).
int wgmma_rate_group_size(int form);
// Launches `blocks` blocks of 256 threads; warpgroup w runs `reps` groups of form_w and writes
// the clocks they took to cycles[2 * block + w] (0 for an idle warpgroup). Forms outside the
// enum, or a build without sm_90a: cudaErrorInvalidValue.
cudaError_t launch_wgmma_rate_probe(int form0, int form1, int reps, int blocks,
                                    unsigned long long* cycles, cudaStream_t stream);

}  // namespace tripath::kernels

#pragma once

#include <cuda_runtime.h>

#include "merge/params.h"
#include "tripath/dtype.h"

namespace tripath::kernels {

// out dtype: f32, bf16 or f16.
cudaError_t launch_merge_states(const MergeParams& p, DType out, cudaStream_t stream);

}  // namespace tripath::kernels

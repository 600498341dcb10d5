#pragma once

#include <cuda_runtime.h>

#include "cache_write/params.h"
#include "tripath/dtype.h"

namespace tripath::kernels {

// input: k/v dtype (bf16 or f16); cache: the same, or fp8 e4m3.
cudaError_t launch_cache_write(const CacheWriteParams& p, DType input, DType cache,
                               cudaStream_t stream);

}  // namespace tripath::kernels

// Host side of every TMA load: a rank-3 CUtensorMap of a 16-bit tensor in global memory,
// encoded through the driver entry point (no link against libcuda). The flash prefill kernel
// (K/V caches) and the wgmma MLA decode kernel (the latent cache) describe their boxes with it.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "tripath/dtype.h"

namespace tripath::kernels {

// dims / box: innermost first, in elements; strides: bytes of dims 1 and 2. dtype: bf16 or f16.
// swizzle_128b: the box lands in the 128-byte-swizzle order wgmma reads (else as laid out).
// False (map untouched or partly written) when the driver lacks cuTensorMapEncodeTiled or
// rejects the description.
bool encode_tensor_map_3d(CUtensorMap* map, DType dtype, const void* base, const uint64_t dims[3],
                          const uint64_t strides[2], const uint32_t box[3], bool swizzle_128b);

}  // namespace tripath::kernels

// Host side of the flash kernel's TMA loads: CUtensorMaps of the paged K/V caches, encoded
// through the driver entry point (no link against libcuda).
#include <cudaTypedefs.h>

#include <algorithm>

#include "common/kv_layout.h"
#include "prefill/launch.h"

namespace tripath::kernels {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

bool make_flash_tensor_maps(const void* k_cache, const void* v_cache, int layout,
                            int64_t num_blocks, int block_size, int num_kv_heads, int head_dim,
                            DType q, FlashTensorMaps* maps) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_fn();
  if (encode == nullptr || block_size < 8 || head_dim % 64 != 0) return false;
  if (q != DType::kBF16 && q != DType::kF16) return false;
  const int keys = flash_prefill_tile_keys(head_dim, head_dim);
  const cuuint32_t rows = static_cast<cuuint32_t>(std::min(block_size, keys));
  const cuuint64_t e = 2, d = static_cast<cuuint64_t>(head_dim);
  cuuint64_t dims[3];
  cuuint64_t strides[2];  // bytes, of dims 1 and 2
  cuuint32_t box[3];
  if (layout == kLayoutNHD) {  // [blocks][slot][kv head][dim]
    dims[0] = d;
    dims[1] = static_cast<cuuint64_t>(num_kv_heads);
    dims[2] = static_cast<cuuint64_t>(num_blocks) * block_size;
    strides[0] = d * e;
    strides[1] = num_kv_heads * d * e;
    box[0] = 64;
    box[1] = 1;
    box[2] = rows;
  } else {  // HND and tiled: [blocks][kv head][slot][dim]
    dims[0] = d;
    dims[1] = static_cast<cuuint64_t>(block_size);
    dims[2] = static_cast<cuuint64_t>(num_blocks) * num_kv_heads;
    strides[0] = d * e;
    strides[1] = block_size * d * e;
    box[0] = 64;
    box[1] = rows;
    box[2] = 1;
  }
  const cuuint32_t element_strides[3] = {1, 1, 1};
  // The tiled layout stores each row's 16-byte chunks XORed by slot: a plain box copy of 8+
  // slots lands in the 128-byte-swizzle order wgmma reads. The others need the hardware swizzle.
  const CUtensorMapSwizzle swizzle =
      layout == kLayoutTiled ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B;
  const CUtensorMapDataType type =
      q == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  for (int i = 0; i < 2; ++i) {
    CUtensorMap* m = i == 0 ? &maps->k : &maps->v;
    void* base = const_cast<void*>(i == 0 ? k_cache : v_cache);
    if (encode(m, type, 3, base, dims, strides, box, element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
      return false;
    }
  }
  maps->rows = static_cast<int32_t>(rows);
  return true;
}

}  // namespace tripath::kernels

// Host side of the flash kernel's TMA loads: CUtensorMaps of the paged K/V caches.
#include <algorithm>

#include "common/kv_layout.h"
#include "common/tensor_map_encode.h"
#include "prefill/launch.h"

namespace tripath::kernels {

bool make_flash_tensor_maps(const void* k_cache, const void* v_cache, int layout,
                            int64_t num_blocks, int block_size, int num_kv_heads, int head_dim,
                            DType q, FlashTensorMaps* maps) {
  if (block_size < 8 || head_dim % 64 != 0) return false;
  if (q != DType::kBF16 && q != DType::kF16) return false;
  const int keys = flash_prefill_tile_keys(head_dim, head_dim);
  const uint32_t rows = static_cast<uint32_t>(std::min(block_size, keys));
  const uint64_t e = 2, d = static_cast<uint64_t>(head_dim);
  uint64_t dims[3];
  uint64_t strides[2];  // bytes, of dims 1 and 2
  uint32_t box[3];
  if (layout == kLayoutNHD) {  // [blocks][slot][kv head][dim]
    dims[0] = d;
    dims[1] = static_cast<uint64_t>(num_kv_heads);
    dims[2] = static_cast<uint64_t>(num_blocks) * block_size;
    strides[0] = d * e;
    strides[1] = num_kv_heads * d * e;
    box[0] = 64;
    box[1] = 1;
    box[2] = rows;
  } else {  // HND and tiled: [blocks][kv head][slot][dim]
    dims[0] = d;
    dims[1] = static_cast<uint64_t>(block_size);
    dims[2] = static_cast<uint64_t>(num_blocks) * num_kv_heads;
    strides[0] = d * e;
    strides[1] = block_size * d * e;
    box[0] = 64;
    box[1] = rows;
    box[2] = 1;
  }
  // The tiled layout stores each row's 16-byte chunks XORed by slot: a plain box copy of 8+
  // slots lands in the 128-byte-swizzle order wgmma reads. The others need the hardware swizzle.
  const bool swizzle = layout != kLayoutTiled;
  if (!encode_tensor_map_3d(&maps->k, q, k_cache, dims, strides, box, swizzle) ||
      !encode_tensor_map_3d(&maps->v, q, v_cache, dims, strides, box, swizzle)) {
    return false;
  }
  maps->rows = static_cast<int32_t>(rows);
  return true;
}

}  // namespace tripath::kernels

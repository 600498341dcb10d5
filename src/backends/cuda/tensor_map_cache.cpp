#include "tensor_map_cache.h"

namespace tripath {

bool TensorMapCache::get(const void* k, const void* v, int layout, int64_t num_blocks,
                         int block_size, int num_kv_heads, int head_dim, DType q,
                         kernels::FlashTensorMaps* maps) {
  for (const Entry& e : entries_) {
    if (e.k == k && e.v == v && e.layout == layout && e.num_blocks == num_blocks &&
        e.block_size == block_size && e.num_kv_heads == num_kv_heads && e.head_dim == head_dim &&
        e.q == q) {
      if (e.ok) *maps = e.maps;
      return e.ok;
    }
  }
  if (entries_.size() >= kMaxEntries) entries_.clear();
  Entry e{k, v, layout, num_blocks, block_size, num_kv_heads, head_dim, q, false, {}};
  e.ok = kernels::make_flash_tensor_maps(k, v, layout, num_blocks, block_size, num_kv_heads,
                                         head_dim, q, &e.maps);
  entries_.push_back(e);
  if (e.ok) *maps = e.maps;
  return e.ok;
}

}  // namespace tripath

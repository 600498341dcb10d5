// The flash kernel's TMA descriptions (FlashTensorMaps) per KV cache, encoded once per cache and
// geometry instead of at every run: a serving engine runs each layer's cache every step, and
// cuTensorMapEncodeTiled is host work on the per-layer path. Keyed by the K/V pointers and the
// whole geometry, so a cache freed and reallocated at the same address with another shape is
// encoded again. A cache the TMA loads do not apply to is remembered as such.
#pragma once

#include <cstdint>
#include <vector>

#include "prefill/launch.h"
#include "tripath/dtype.h"

namespace tripath {

class TensorMapCache {
 public:
  // make_flash_tensor_maps with memory: true and the maps copied to *maps (a few hundred
  // bytes), or false (maps untouched) where the TMA loads do not apply to this cache.
  bool get(const void* k, const void* v, int layout, int64_t num_blocks, int block_size,
           int num_kv_heads, int head_dim, DType q, kernels::FlashTensorMaps* maps);

 private:
  struct Entry {
    const void* k;
    const void* v;
    int layout;
    int64_t num_blocks;
    int block_size, num_kv_heads, head_dim;
    DType q;
    bool ok;
    kernels::FlashTensorMaps maps;
  };
  static constexpr size_t kMaxEntries = 1024;  // more caches than layers of any model
  std::vector<Entry> entries_;
};

}  // namespace tripath

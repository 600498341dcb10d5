#include "extend_gather.h"

#include <algorithm>

#include "cuda_util.h"

namespace tripath {

namespace {
constexpr int kG = kernels::kGatherBlockSize;
size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }
}  // namespace

size_t ExtendGather::prepare(const StepPlan& plan, int num_kv_heads, int head_dim,
                             DeviceArena& arena) {
  chunks_.clear();
  extend_begin_ = plan.extend.begin;
  capacity_blocks_ = 0;
  const int32_t ne = plan.extend.num_requests();
  std::vector<kernels::GatherBlock> blocks;
  std::vector<int32_t> context_lens(static_cast<size_t>(ne)), table;
  for (int32_t c = 0; c < plan.num_chunks && ne > 0; ++c) {
    Chunk ch;
    for (int32_t e = 0; e < ne; ++e)
      ch.max_blocks = std::max(ch.max_blocks, (plan.chunk_kv_len[c * ne + e] + kG - 1) / kG);
    blocks.clear();
    table.assign(static_cast<size_t>(ne) * ch.max_blocks, 0);
    for (int32_t e = 0; e < ne; ++e) {
      const int32_t i = plan.extend.begin + e;
      const int32_t start = plan.chunk_kv_start[c * ne + e], len = plan.chunk_kv_len[c * ne + e];
      // Positions of request i shift by `start`: key start + k is workspace key k.
      context_lens[e] = plan.context_lens[i] - start;
      for (int32_t b = 0; b * kG < len; ++b) {
        table[static_cast<size_t>(e) * ch.max_blocks + b] = ch.num_blocks;
        blocks.push_back({i, start + b * kG, std::min(kG, len - b * kG), 0});
        ++ch.num_blocks;
      }
    }
    ch.blocks = arena.add(blocks);
    ch.context_lens = arena.add(context_lens);
    ch.table = arena.add(table);
    capacity_blocks_ = std::max(capacity_blocks_, ch.num_blocks);
    chunks_.push_back(ch);
  }
  // At most budget / kG + (extend requests) blocks per chunk: bounded by the chunk budget.
  const size_t tensor = static_cast<size_t>(capacity_blocks_) * kG * num_kv_heads * head_dim * 2;
  v_offset_ = round_up(tensor, 256);
  return capacity_blocks_ > 0 ? 2 * v_offset_ : 0;
}

void ExtendGather::gather_and_redirect(int32_t c, const DeviceArena& arena,
                                       const KvCacheConfig& cache, void* workspace,
                                       kernels::UnifiedParams& p, cudaStream_t stream) const {
  const Chunk& ch = chunks_[static_cast<size_t>(c)];
  char* k_out = static_cast<char*>(workspace);
  char* v_out = k_out + v_offset_;
  kernels::GatherContextParams g{};
  g.k_cache = p.k_cache;
  g.v_cache = p.v_cache;
  g.k_out = k_out;
  g.v_out = v_out;
  g.block_table = p.block_table;
  g.blocks = arena.at<kernels::GatherBlock>(ch.blocks);
  g.num_blocks = ch.num_blocks;
  g.max_blocks_per_request = p.max_blocks_per_request;
  g.block_size = p.block_size;
  g.log2_block_size = p.log2_block_size;
  g.num_kv_heads = cache.num_kv_heads;
  g.head_dim = cache.head_dim;
  g.layout = p.layout;
  TRIPATH_CUDA_CHECK(kernels::launch_gather_context(g, cache.dtype, stream));

  // The kernels index these per request position: the arrays hold the extend requests only,
  // so their base is offset back by extend.begin rows (entries before it are never read).
  p.k_cache = k_out;
  p.v_cache = v_out;
  p.block_table = arena.at<int32_t>(ch.table) - static_cast<int64_t>(extend_begin_) * ch.max_blocks;
  p.context_lens = arena.at<int32_t>(ch.context_lens) - extend_begin_;
  p.max_blocks_per_request = ch.max_blocks;
  p.block_size = kG;
  p.log2_block_size = kernels::kGatherLog2BlockSize;
}

void ExtendGather::shift_items(const StepPlan& plan, int32_t c, kernels::UnifiedWorkItem* items,
                               size_t count) {
  const int32_t ne = plan.extend.num_requests();
  for (size_t k = 0; k < count; ++k) {
    const int32_t start = plan.chunk_kv_start[c * ne + (items[k].request - plan.extend.begin)];
    items[k].kv_begin -= start;
    items[k].kv_end -= start;
  }
}

}  // namespace tripath

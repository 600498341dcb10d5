#include "tripath/block_allocator.h"

#include <algorithm>
#include <string>

#include "tripath/error.h"

namespace tripath {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  TRIPATH_CHECK_ARG(num_blocks > 0 && num_blocks <= INT32_MAX, "num_blocks", num_blocks,
                    "a block count in [1, 2^31)");
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_list_.reserve(static_cast<size_t>(num_blocks));
  // Highest id at the bottom so the first allocations hand out 0, 1, 2, ...
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

void BlockAllocator::check_block(int32_t block, const char* what) const {
  TRIPATH_CHECK_ARG(block >= 0 && block < num_blocks(), what, block,
                    "a block id in [0, " + std::to_string(num_blocks()) + ")");
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  check_block(block, "block");
  return ref_counts_[static_cast<size_t>(block)];
}

bool BlockAllocator::try_allocate(int64_t count, std::vector<int32_t>& out) {
  TRIPATH_CHECK_ARG(count >= 0, "count", count, "a non-negative block count");
  if (count > num_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
    const int32_t b = free_list_.back();
    free_list_.pop_back();
    ref_counts_[static_cast<size_t>(b)] = 1;
    out.push_back(b);
  }
  return true;
}

std::vector<int32_t> BlockAllocator::allocate(int64_t count) {
  std::vector<int32_t> blocks;
  if (!try_allocate(count, blocks)) {
    throw OutOfBlocksError("tripath: out of KV-cache blocks: asked for " +
                           std::to_string(count) + ", " + std::to_string(num_free()) +
                           " of " + std::to_string(num_blocks()) + " free");
  }
  return blocks;
}

std::vector<int32_t> BlockAllocator::fork(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    check_block(b, "fork block");
    TRIPATH_CHECK_ARG(ref_counts_[static_cast<size_t>(b)] > 0, "fork block", b,
                      "an allocated block (this one is free)");
  }
  for (int32_t b : blocks) ++ref_counts_[static_cast<size_t>(b)];
  return blocks;
}

void BlockAllocator::free(const std::vector<int32_t>& blocks) {
  // Validate everything first (a block listed twice needs two references) so that a bad call
  // changes nothing.
  for (int32_t b : blocks) check_block(b, "free block");
  std::vector<int32_t> sorted(blocks);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    const int32_t b = sorted[i];
    const int32_t refs = ref_counts_[static_cast<size_t>(b)];
    TRIPATH_CHECK_ARG(refs >= static_cast<int32_t>(j - i), "free block", b,
                      "an allocated block with at least " + std::to_string(j - i) +
                          " reference(s); it has " + std::to_string(refs));
    i = j;
  }
  for (int32_t b : blocks) {
    if (--ref_counts_[static_cast<size_t>(b)] == 0) free_list_.push_back(b);
  }
}

}  // namespace tripath

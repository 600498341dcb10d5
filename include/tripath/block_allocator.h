// Fixed pool of KV-cache blocks with reference counts, so requests that share a prefix share its
// blocks (fork). Allocation is all-or-nothing: when the pool runs short it throws
// OutOfBlocksError (or try_allocate returns false) and the pool is exactly as before.
#pragma once

#include <cstdint>
#include <vector>

namespace tripath {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_list_.size()); }
  int32_t ref_count(int32_t block) const;

  // `count` fresh blocks, each with reference count 1. Throws OutOfBlocksError if fewer are free.
  std::vector<int32_t> allocate(int64_t count);
  // Appends `count` fresh blocks to `out`; returns false (and changes nothing) if too few free.
  bool try_allocate(int64_t count, std::vector<int32_t>& out);
  // Shares `blocks` with one more owner (a forked request): each reference count goes up by one.
  std::vector<int32_t> fork(const std::vector<int32_t>& blocks);
  // Drops one reference to each block; a block whose count reaches zero returns to the pool.
  // Freeing a block that is not allocated is an error and changes nothing.
  void free(const std::vector<int32_t>& blocks);

  static int64_t blocks_for_tokens(int64_t tokens, int block_size) {
    return (tokens + block_size - 1) / block_size;
  }

 private:
  void check_block(int32_t block, const char* what) const;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_list_;  // LIFO: recently freed blocks are reused first
};

}  // namespace tripath

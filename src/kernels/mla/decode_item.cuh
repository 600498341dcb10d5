// What one absorbed-decode work item covers, as every MLA decode kernel (baseline, packed,
// wgmma) reads it: its packed rows and key range, where a key's latent row lives, and the load
// of its query rows.
#pragma once

#include <cstdint>

#include "common/device_math.cuh"
#include "mla/params.h"

namespace tripath::kernels {

struct MlaItemSpan {
  int tok0;              // first query token of the request
  int row_end;           // end of the block's packed rows (row = token * heads + head)
  int ctx;               // cached context of the request
  int key_lo, key_hi;    // the keys the block attends: the split's, cut at its last row's limit
  const int32_t* table;  // the request's block-table row
  int64_t row0;          // global packed row of the block's local row 0
};

// The span of item `it` for blocks of `block_rows` packed rows.
__device__ __forceinline__ MlaItemSpan mla_item_span(const MlaDecodeParams& p,
                                                     const MlaDecodeWorkItem& it, int block_rows) {
  MlaItemSpan s;
  const int H = p.num_heads;
  s.tok0 = p.cu_seqlens_q[it.request];
  const int rows = (p.cu_seqlens_q[it.request + 1] - s.tok0) * H;
  s.row_end = min(it.row_begin + block_rows, rows);
  s.ctx = p.context_lens[it.request];
  s.key_lo = it.kv_begin;
  s.key_hi = min(it.kv_end, s.ctx + (s.row_end - 1) / H + 1);
  s.table = p.block_table + int64_t(it.request) * p.max_blocks_per_request;
  s.row0 = int64_t(s.tok0) * H + it.row_begin;
  return s;
}

// Element offset of key `kabs`'s latent row in the cache (kabs < key_hi).
__device__ __forceinline__ int64_t mla_latent_offset(const MlaDecodeParams& p, const MlaItemSpan& s,
                                                     int kabs) {
  const int64_t row =
      int64_t(s.table[kabs >> p.log2_block_size]) * p.block_size + (kabs & (p.block_size - 1));
  return row * kMlaEntry;
}

// The block's query rows into shared memory by cp.async (Q is bf16 in every MLA kernel), rows
// past row_end zero-filled: row r's 16-byte chunk c lands at dst(r, c), the kernel's layout.
template <int kRows, int kThreads, class Dst>
__device__ __forceinline__ void mla_load_q_rows(const MlaDecodeParams& p, const MlaDecodeWorkItem& it,
                                                const MlaItemSpan& span, Dst dst) {
  constexpr int kChunks = kMlaEntry / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = it.row_begin + r < span.row_end;
    const bf16* src =
        static_cast<const bf16*>(p.q) + (valid ? (span.row0 + r) * kMlaEntry + c * 8 : 0);
    cp_async_16(dst(r, c), src, valid);
  }
}

}  // namespace tripath::kernels

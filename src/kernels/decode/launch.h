// Host entry points of the split-KV paged decode kernel (decode_split_kv.cuh): runtime (head
// dim, dtypes) -> the built template. It reads the unified kernel's parameters and work items
// (UnifiedParams / UnifiedWorkItem, unified/params.h) with the same meaning and the same partial
// buffer format, so a backend swaps launch_unified(..., kRows16, ...) for launch_paged_decode.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "tripath/dtype.h"
#include "common/kv_layout.h"  // TRIPATH_HD, kLayoutTiled
#include "unified/params.h"

namespace tripath::kernels {

template <int D, typename T, typename KvT>
cudaError_t launch_paged_decode_impl(const UnifiedParams& p, cudaStream_t stream);
template <int D, typename T, typename KvT>
int decode_cluster_capacity_impl();

// The wide configuration (cluster launches) is built for 16-bit caches of head dim <= 128 only:
// the 4-warp kernel, for its one user, small GQA decode batches.
template <int D, typename T, typename KvT>
constexpr bool kDecodeClusterBuilt = std::is_same_v<T, KvT>&& D <= 128;

// The bulk-copy form (the tiled layout's stages by cp.async.bulk, decode_split_kv.cuh) is built
// for caches whose rows are whole 8-chunk swizzle groups: 16-bit with D % 64 == 0, fp8 with
// D % 128 == 0.
template <int D, typename T, typename KvT>
constexpr bool kDecodeBulkBuilt = D * sizeof(KvT) % 128 == 0;

// True if a launch takes the bulk-copy form on a device that runs it (sm_90: the launcher asks):
// built for its dtypes and head dim, the tiled layout, blocks of >= 8 keys (so a key's slot mod
// 8, the layout's chunk swizzle, is the key's mod 8), and chosen by UnifiedParams::decode_copies
// (0: 16-bit caches, 1: none, 2: fp8 caches too).
TRIPATH_HD bool decode_bulk_eligible(bool built, bool fp8, int layout, int block_size,
                                     int copies) {
  return built && layout == kLayoutTiled && block_size >= 8 && (copies == 0 ? !fp8 : copies == 2);
}

// True if this build instantiated the kernel for (head_dim, q dtype, kv dtype): the same table
// as the unified kernel (TRIPATH_HEAD_DIMS x TRIPATH_DTYPES x {q dtype, fp8 e4m3}).
bool decode_built(int head_dim, DType q, DType kv);

// True if launch_paged_decode serves decode requests of up to `max_query_len` tokens with
// `group` query heads per KV head: the kernel packs query_len * group <= 16 rows into one tile
// per (request, KV head, split). Otherwise false, with the reason in *why when given: the
// backend then keeps the unified kernel for the step's decode path.
bool decode_kernel_supports(int head_dim, DType q, DType kv, int group, int max_query_len,
                            std::string* why = nullptr);

// True if launch_paged_decode takes p.cluster_splits for (head_dim, q dtype, kv dtype): the
// wide one-block-per-SM configuration is built for 16-bit caches of head dim <= 128 (sm_90 at
// run time besides).
bool decode_cluster_built(int head_dim, DType q, DType kv);

// The number of 2-CTA clusters of that configuration the current device runs at once
// (cudaOccupancyMaxActiveClusters; one wide block per SM, a cluster's two in one GPC); 0 where
// it is not built or the query fails.
int decode_cluster_capacity(int head_dim, DType q, DType kv);

// p.trace (wide form only; a timing probe): kDecodeTraceSlots stamps per block at
// trace[block * kDecodeTraceSlots + event]: %globaltimer ns at entry, after the first stages
// are issued, when stage 0 has landed, after the last stage, before the cluster barrier, after
// it, and at the end; then the SM id and the block's stage count; then once the item has
// loaded, once the request's lengths and first block-table entries have, and after the
// prologue's barrier (before the first stage copies).
constexpr int kDecodeTraceSlots = 12;

// Pair launches (the wide form: 8 warps x 16 keys = 128-key stages). A block's time is its
// stage count, not its bytes: with every block's ring full the memory system is the limit and a
// partial stage costs a whole round trip, wherever it sits (runs o2-o4: the half with 17
// stages ended 1.3-1.7 us after the half with 16, whether its partial stage held 1 key or 64,
// first or last). So rank 1 takes a remainder of up to kDecodePairTailKeys keys (the decode
// token past a round context) as a tail beside its stages: copied and attended by one warp at
// its first stage (decode_split_kv.cuh).
constexpr int kDecodePairStageKeys = 128;
constexpr int kDecodePairTailKeys = 8;

// Keys of [lo, end) that rank 1 attends as its tail (the rest fills whole stages): the
// remainder past whole stages when it is at most kDecodePairTailKeys and a stage remains.
TRIPATH_HD int decode_pair_tail(int lo, int end) {
  const int keys = end - lo, rem = keys % kDecodePairStageKeys;
  return keys > kDecodePairStageKeys && rem <= kDecodePairTailKeys ? rem : 0;
}

// Where a pair launch cuts a row set of `len` keys: rank 0 takes [0, cut), a whole number of
// stages, rank 1 [cut, len). The stage counts differ by at most one, rank 1 (without the
// merge) taking the larger; a remainder rank 1 can hold as its tail costs no stage.
TRIPATH_HD int decode_pair_cut(int len) {
  const int q = len / kDecodePairStageKeys, rem = len % kDecodePairStageKeys;
  const int rounds = rem == 0 || (rem <= kDecodePairTailKeys && q >= 2) ? q : q + 1;
  const int cut = rounds / 2 * kDecodePairStageKeys;
  return cut < len ? cut : len;
}

// One block per work item (p.items[0, p.num_items)); each item covers all rows of its request
// (row_begin 0, q_head = kv_head * group). Items with split >= 0 write p.partial_out /
// p.partial_lse slot `split` (merge with launch_merge_states); split -1 writes p.out, p.lse and
// applies p.sinks. With p.cluster_splits = 2 the items come in pairs, the two splits of one row
// set, each pair a 2-CTA cluster of wide one-block-per-SM CTAs (8 warps) that
// merges in distributed shared memory and writes p.out / p.lse (sinks applied; no partial
// buffers). Returns cudaErrorInvalidValue for a specialization that was not built, or a pair
// request that decode_cluster_built refuses, with cluster_splits other than 2 or an odd item
// count.
cudaError_t launch_paged_decode(int head_dim, DType q, DType kv, const UnifiedParams& p,
                                cudaStream_t stream);

}  // namespace tripath::kernels

// The merge kernel against the reference merge (empty parts, all-empty rows, no NaN), the
// public device-dispatching cache write on every layout and dtype, bit for bit with the CPU, and
// the benchmark timer's stream hold.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include "gpu_test_util.h"
#include "tripath/device.h"
#include "tripath/error.h"
#include "tripath/kv_cache.h"

#ifdef TRIPATH_WITH_CUDA
#include "common/stream_hold.h"
#endif

namespace tripath::gputest {
namespace {

// Both merge forms: the vectorized one (dims that are multiples of 4 up to 512, 16-byte-aligned
// parts: 96, 200, 512) and the general one (dim 90; parts one float off alignment), with empty
// parts, an all-empty row, and part counts 1, 5 and 33.
TEST(GpuMerge, MatchesReferenceWithEmptyParts) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  // offset: parts start 4 bytes past an allocation (not 16-byte aligned); out_offset: so does
  // the output (the vectorized form's 16-byte stores need it aligned). Either takes the general
  // form.
  struct Case {
    int64_t parts, rows, dim, offset, out_offset;
  };
  for (const Case c : {Case{5, 301, 96, 0, 0}, Case{5, 301, 90, 0, 0}, Case{33, 77, 512, 0, 0},
                       Case{1, 50, 200, 0, 0}, Case{5, 64, 512, 1, 0}, Case{5, 64, 128, 0, 1}}) {
    SCOPED_TRACE("parts " + std::to_string(c.parts) + " dim " + std::to_string(c.dim) + " offset " +
                 std::to_string(c.offset) + " out_offset " + std::to_string(c.out_offset));
    const int64_t parts = c.parts, rows = c.rows, dim = c.dim;
    std::mt19937 rng(11 + static_cast<unsigned>(dim));
    std::normal_distribution<float> normal;
    std::vector<float> outs(c.offset + parts * rows * dim), lses(parts * rows);
    for (float& x : outs) x = normal(rng);
    for (int64_t i = 0; i < parts * rows; ++i) lses[i] = (i % 7 == 3) ? -INFINITY : 4 * normal(rng);
    for (int64_t p = 0; p < parts; ++p) lses[p * rows + 17] = -INFINITY;  // row 17: all empty
    std::vector<float> ref(rows * dim), ref_lse(rows);
    merge_states(TensorView::contiguous(outs.data() + c.offset, DType::kF32, {parts, rows, dim}),
                 TensorView::contiguous(lses.data(), DType::kF32, {parts, rows}),
                 TensorView::contiguous(ref.data(), DType::kF32, {rows, dim}),
                 TensorView::contiguous(ref_lse.data(), DType::kF32, {rows}));
    DeviceMem d_outs, d_lses, d_out, d_lse;
    d_outs.upload(outs);
    d_lses.upload(lses);
    d_out.upload(std::vector<float>(c.out_offset + rows * dim, NAN));
    d_lse.upload(std::vector<float>(rows, NAN));
    merge_states(TensorView::contiguous(static_cast<float*>(d_outs.get()) + c.offset, DType::kF32,
                                        {parts, rows, dim}, Device::kCUDA),
                 TensorView::contiguous(d_lses.get(), DType::kF32, {parts, rows}, Device::kCUDA),
                 TensorView::contiguous(static_cast<float*>(d_out.get()) + c.out_offset,
                                        DType::kF32, {rows, dim}, Device::kCUDA),
                 TensorView::contiguous(d_lse.get(), DType::kF32, {rows}, Device::kCUDA));
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
    auto got = d_out.download<float>(c.out_offset + rows * dim);
    got.erase(got.begin(), got.begin() + c.out_offset);
    const auto got_lse = d_lse.download<float>(rows);
    EXPECT_LT(rel_l2(got, ref), 1e-5);
    for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(got[17 * dim + d], 0.0f);
    EXPECT_EQ(got_lse[17], -INFINITY);
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isinf(ref_lse[r])) {
        EXPECT_EQ(got_lse[r], ref_lse[r]) << "row " << r << " (all parts empty)";
      } else {
        EXPECT_NEAR(got_lse[r], ref_lse[r], 1e-4f) << "row " << r;
      }
    }
  }
#endif
}

TEST(GpuCacheWrite, EveryLayoutAndDtypeMatchesCpu) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int dim : {64, 80, 96, 128, 192, 256}) {
    for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled}) {
      for (DType in_dtype : {DType::kBF16, DType::kF16}) {
        for (bool fp8 : {false, true}) {
          KvCacheConfig c;
          c.num_blocks = 9;
          c.block_size = 16;
          c.num_kv_heads = 3;
          c.head_dim = dim;
          c.layout = layout;
          c.dtype = fp8 ? DType::kFP8E4M3 : in_dtype;
          c.k_scale = 0.03f;
          c.v_scale = 0.05f;
          SCOPED_TRACE(std::to_string(dim) + " " + layout_name(layout) + " " + dtype_name(c.dtype));
          const int64_t n = 40;
          std::vector<uint16_t> k(n * 3 * dim), v(k.size());
          for (auto& x : k)
            x = in_dtype == DType::kBF16 ? float_to_bf16(normal(rng)) : float_to_f16(normal(rng));
          for (auto& x : v)
            x = in_dtype == DType::kBF16 ? float_to_bf16(normal(rng)) : float_to_f16(normal(rng));
          std::vector<int64_t> slots(n);
          for (int64_t t = 0; t < n; ++t) slots[t] = (t % 5 == 2) ? -1 : (t * 37 + 11) % (9 * 16);
          const size_t bytes = static_cast<size_t>(c.bytes_per_tensor());
          std::vector<uint8_t> kc(bytes, 0xFF), vc(bytes, 0xFF);
          const int64_t elems = c.elements_per_tensor();
          KvCacheView cpu{c, TensorView::contiguous(kc.data(), c.dtype, {elems}),
                          TensorView::contiguous(vc.data(), c.dtype, {elems})};
          // Distinct slots only, so the order of writes cannot matter.
          std::vector<int64_t> unique_slots = slots;
          for (int64_t t = 0; t < n; ++t)
            for (int64_t u = 0; u < t; ++u)
              if (unique_slots[u] == unique_slots[t]) unique_slots[t] = -1;
          write_kv_cache(cpu, TensorView::contiguous(k.data(), in_dtype, {n, 3, dim}),
                         TensorView::contiguous(v.data(), in_dtype, {n, 3, dim}),
                         TensorView::contiguous(unique_slots.data(), DType::kI64, {n}));
          DeviceMem dk, dv, dkc, dvc, ds;
          dk.upload(k);
          dv.upload(v);
          dkc.upload(std::vector<uint8_t>(bytes, 0xFF));
          dvc.upload(std::vector<uint8_t>(bytes, 0xFF));
          ds.upload(unique_slots);
          KvCacheView gpu{c, TensorView::contiguous(dkc.get(), c.dtype, {elems}, Device::kCUDA),
                          TensorView::contiguous(dvc.get(), c.dtype, {elems}, Device::kCUDA)};
          write_kv_cache(gpu,
                         TensorView::contiguous(dk.get(), in_dtype, {n, 3, dim}, Device::kCUDA),
                         TensorView::contiguous(dv.get(), in_dtype, {n, 3, dim}, Device::kCUDA),
                         TensorView::contiguous(ds.get(), DType::kI64, {n}, Device::kCUDA));
          TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
          EXPECT_EQ(dkc.download<uint8_t>(bytes), kc);
          EXPECT_EQ(dvc.download<uint8_t>(bytes), vc);
        }
      }
    }
  }
#endif
}

#ifdef TRIPATH_WITH_CUDA
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
#endif

// The held timer's interval covers the GPU's work (a 256 MiB memset cannot beat the H200's 4.8
// TB/s peak) and leaves the host's submission out (never above the plain timer's median).
TEST(GpuTiming, HeldStreamTimesTheGpuWorkAlone) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  constexpr size_t kBytes = size_t(256) << 20;
  DeviceMem buf(kBytes);
  int fill = 0;
  auto call = [&](void* stream) {
    ASSERT_EQ(cudaMemsetAsync(buf.get(), ++fill & 0xFF, kBytes, static_cast<cudaStream_t>(stream)),
              cudaSuccess);
  };
  bool graph_used = false;
  const double held = median_of(time_gpu_calls(call, 2, 15, true, &graph_used, true));
  EXPECT_TRUE(graph_used);
  const double plain = median_of(time_gpu_calls(call, 2, 15, true, nullptr, false));
  const double floor_ms = kBytes / 4.8e12 * 1e3;
  EXPECT_GE(held, floor_ms) << "held " << held << " ms, plain " << plain << " ms";
  EXPECT_LE(held, plain + 0.005) << "held " << held << " ms, plain " << plain << " ms";
  std::cout << "[ timing   ] 256 MiB memset: held " << held * 1e3 << " us, plain " << plain * 1e3
            << " us\n";
#endif
}

// A hold nobody releases ends at its timeout (the stream never hangs); a null flag is refused.
TEST(GpuTiming, StreamHoldEndsAtItsTimeout) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  EXPECT_EQ(kernels::launch_stream_hold(nullptr, 1000, nullptr), cudaErrorInvalidValue);
  int32_t* flag = nullptr;
  TRIPATH_TEST_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int32_t),
                                  cudaHostAllocMapped));
  *flag = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t launched = kernels::launch_stream_hold(flag, 20'000'000ull, nullptr);
  const cudaError_t synced = cudaDeviceSynchronize();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  cudaFreeHost(flag);
  EXPECT_EQ(launched, cudaSuccess);
  EXPECT_EQ(synced, cudaSuccess);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 1000.0);
#endif
}

// The paged gather reads exactly the listed rows [0, rows[i]) of every KV head of its blocks, from
// K and V, on every layout (tiled reads as HND): its checksum is the sum of those 32-bit words.
// Rows of 0 and of a whole block, one-row blocks, 256-row blocks, 1 to 8 heads.
TEST(GpuPagedGather, ReadsExactlyTheListedRows) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  struct Case {
    int layout, block_size, heads, row_bytes, entries;
  };
  for (const Case c : {Case{0, 16, 1, 256, 37}, Case{0, 16, 4, 256, 50}, Case{1, 32, 4, 128, 21},
                       Case{2, 16, 8, 512, 9}, Case{0, 1, 2, 64, 300}, Case{1, 256, 1, 256, 5},
                       Case{2, 16, 1, 128, 1}}) {
    SCOPED_TRACE("layout " + std::to_string(c.layout) + " block " + std::to_string(c.block_size) +
                 " heads " + std::to_string(c.heads) + " row bytes " + std::to_string(c.row_bytes));
    const int num_blocks = c.entries + 7;
    const size_t row_words = c.row_bytes / 4;
    const size_t words = size_t(num_blocks) * c.block_size * c.heads * row_words;
    std::mt19937 rng(1234 + c.entries);
    std::vector<uint32_t> k(words), v(words);
    for (uint32_t& x : k) x = rng();
    for (uint32_t& x : v) x = rng();
    std::vector<int32_t> ids(num_blocks);
    for (int i = 0; i < num_blocks; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> blocks(ids.begin(), ids.begin() + c.entries), rows(c.entries);
    for (int e = 0; e < c.entries; ++e)
      rows[e] = e == 0 ? 0 : e == 1 ? c.block_size
                                    : static_cast<int32_t>(rng() % (c.block_size + 1));
    // The expected sum addresses each word through the library's own layout mapping (a row of
    // row_words 4-byte elements).
    KvCacheConfig config;
    config.block_size = c.block_size;
    config.num_kv_heads = c.heads;
    config.head_dim = static_cast<int>(row_words);
    config.dtype = DType::kF32;
    config.layout = static_cast<KvLayout>(c.layout);
    uint32_t expected = 0;
    for (int e = 0; e < c.entries; ++e)
      for (int h = 0; h < c.heads; ++h)
        for (int r = 0; r < rows[e]; ++r)
          for (int w = 0; w < config.head_dim; ++w) {
            const int64_t at = kv_cache_offset(config, blocks[e], r, h, w);
            expected += k[at] + v[at];
          }
    DeviceMem dk, dv, db, dr, sum(kPagedGatherSumWords * 4);
    dk.upload(k);
    dv.upload(v);
    db.upload(blocks);
    dr.upload(rows);
    TRIPATH_TEST_CUDA(cudaMemset(sum.get(), 0, kPagedGatherSumWords * 4));
    PagedGatherArgs a;
    a.k_cache = dk.get();
    a.v_cache = dv.get();
    a.blocks = static_cast<const int32_t*>(db.get());
    a.rows = static_cast<const int32_t*>(dr.get());
    a.num_entries = c.entries;
    a.block_size = c.block_size;
    a.num_kv_heads = c.heads;
    a.row_bytes = c.row_bytes;
    a.layout = c.layout;
    a.checksum = static_cast<uint32_t*>(sum.get());
    launch_paged_gather(a, nullptr);
    TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
    uint32_t got = 0;
    for (uint32_t w : sum.download<uint32_t>(kPagedGatherSumWords)) got += w;
    EXPECT_EQ(got, expected);
  }
#endif
}

// Bad arguments are refused by name before anything runs (no GPU needed).
TEST(GpuPagedGather, RefusesBadArguments) {
#ifdef TRIPATH_WITH_CUDA
  static uint32_t host_word = 0;  // never dereferenced: every case fails validation first
  auto valid = [] {
    PagedGatherArgs a;
    a.k_cache = a.v_cache = &host_word;
    a.blocks = a.rows = reinterpret_cast<const int32_t*>(&host_word);
    a.num_entries = 1;
    a.row_bytes = 256;
    a.checksum = &host_word;
    return a;
  };
  struct Case {
    const char* needle;
    void (*mutate)(PagedGatherArgs&);
  };
  for (const Case c : {Case{"row_bytes", [](PagedGatherArgs& a) { a.row_bytes = 48; }},
                       Case{"row_bytes", [](PagedGatherArgs& a) { a.row_bytes = 8; }},
                       Case{"block_size", [](PagedGatherArgs& a) { a.block_size = 24; }},
                       Case{"block_size", [](PagedGatherArgs& a) { a.block_size = 512; }},
                       Case{"num_kv_heads", [](PagedGatherArgs& a) { a.num_kv_heads = 0; }},
                       Case{"layout", [](PagedGatherArgs& a) { a.layout = 3; }},
                       Case{"num_entries", [](PagedGatherArgs& a) { a.num_entries = -1; }},
                       Case{"checksum", [](PagedGatherArgs& a) { a.checksum = nullptr; }},
                       Case{"blocks / rows", [](PagedGatherArgs& a) { a.rows = nullptr; }},
                       Case{"k_cache", [](PagedGatherArgs& a) { a.v_cache = nullptr; }}}) {
    PagedGatherArgs a = valid();
    c.mutate(a);
    try {
      launch_paged_gather(a, nullptr);
      ADD_FAILURE() << "accepted a bad " << c.needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
#else
  GTEST_SKIP() << "a build without CUDA: launch_paged_gather only says so";
#endif
}

}  // namespace
}  // namespace tripath::gputest

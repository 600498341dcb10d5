// Every CUDA backend against the CPU reference on fresh random steps: outputs NaN-poisoned before
// the run, caches NaN-poisoned outside written slots and compared bit for bit after the GPU cache
// write, block tables shuffled over a pool 2.5x the need. Covers head dims, GQA ratios (odd one
// too), block sizes, layouts, windows, soft-cap, sinks, LSE, fp8 KV, f16, 128K contexts,
// decode_threshold > 1, zero- and one-token requests, unordered batches (unified), CUDA graphs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <sstream>

#include "gpu_test_util.h"

#ifdef TRIPATH_WITH_CUDA
#include "decode/launch.h"
#include "prefill/launch.h"
#endif

namespace tripath::gputest {
namespace {

struct GpuCase {
  std::string name;
  std::string backend;
  int hq = 8, hkv = 2, dim = 128, block_size = 16;
  KvLayout layout = KvLayout::kNHD;
  DType dtype = DType::kBF16, cache = DType::kBF16;
  int window = -1;
  float softcap = 0.0f;
  bool sinks = false, lse = true, ordered = true;
  int threshold = 1;
  int64_t chunk_budget = 32768;  // extend context tokens per chunk (three_path rounds)
  bool flash_tma = true;         // three_path's TRIPATH_FLASH_TMA: TMA K/V loads (2, the
                                 // default, with tma_all_warps; else 1), 0 cp.async gathers
  bool tma_all_warps = true;     // 2: the boxes issued by every producer warp; 1: by the first
  bool extend_gather = false;    // three_path with TRIPATH_EXTEND_GATHER=1 (gathered chunks)
  bool pdl = false;              // three_path with TRIPATH_PDL=1 (decode and merge launched as
                                 // programmatic dependents)
  bool decode_cluster = true;    // three_path's TRIPATH_DECODE_CLUSTER (an even decode batch of
                                 // few row sets as 2-CTA clusters of halves)
  int decode_segments = 1;       // StepInput::decode_segments: 1 where the planner predicts them
                                 // faster, 2 always (three_path runs them), 0 never (and
                                 // TRIPATH_DECODE_SEGMENTS=0)
  bool expect_segments = false;  // the plan must hold decode segments (with decode_segments 1)
  int decode_write = 1;          // three_path's TRIPATH_DECODE_WRITE: the split-KV decode kernel
                                 // stores its tokens' new rows on a 16-bit cache (1), on any
                                 // cache (2), or the cache-write kernel writes every token (0)
  int fuse_compute = 2;          // three_path's TRIPATH_FUSE_COMPUTE: 2 (default) as 1, and one
                                 // pass per extend item where one round holds every context; 1
                                 // prefill, self-part and first round in one launch; 0 one each
  int flash_overlap = 13;        // three_path's TRIPATH_FLASH_OVERLAP: 13 (default: 128-key
                                 // tiles, producer warpgroup, FA3's order and ping-pong, Q in
                                 // registers for S), 5 (the same with Q read from shared memory),
                                 // 4 (the same tiles, serial loop), 0 (64-key tiles, serial
                                 // loop), 1 (pipelined consumers), 2 (also 128-key tiles,
                                 // producer warpgroup), 3 (ping-pong), 9 / 10
                                 // (4 / 5 in 2-CTA clusters sharing tiles by multicast), or
                                 // 11 / 12 / 14 (4 / 5 / 13 in persistent CTAs)
  std::vector<ReqShape> reqs;
};

std::ostream& operator<<(std::ostream& os, const GpuCase& c) { return os << c.name; }

std::vector<ReqShape> mixed_step() {
  return {{1, 1000}, {70, 300}, {113, 0}, {1, 1}, {20, 1025}, {1, 5000}, {0, 40}, {1, 0}, {2, 0}};
}
std::vector<ReqShape> decode_step() {
  return {{1, 4000}, {1, 17}, {1, 1013}, {1, 2500}, {1, 64}, {1, 3333}, {1, 1}, {1, 777}};
}

std::vector<GpuCase> all_cases() {
  std::vector<GpuCase> out;
  for (const char* backend : {"unified", "two_path", "three_path"}) {
    const std::string b = backend;
    auto add = [&](GpuCase c, const std::string& name) {
      c.backend = b;
      c.name = b + "_" + name;
      out.push_back(c);
    };
    // A copy of each listed case named in `names` (in list order), changed by `edit` and added
    // as `prefix` + its name without the backend.
    auto derive = [&](std::initializer_list<const char*> names, const std::string& prefix,
                      auto edit) {
      for (const GpuCase& m : std::vector<GpuCase>(out)) {
        for (const char* name : names) {
          if (m.name != name) continue;
          GpuCase k = m;
          edit(k);
          add(k, prefix + m.name.substr(b.size() + 1));
        }
      }
    };
    GpuCase base;
    base.reqs = mixed_step();
    for (int d : {64, 80, 96, 128, 192, 256}) {
      GpuCase c = base;
      c.dim = d;
      add(c, "mixed_d" + std::to_string(d));
    }
    for (int g : {1, 4, 8, 16, 3}) {
      for (bool decode : {false, true}) {
        GpuCase c = base;
        c.hkv = 2;
        c.hq = 2 * g;
        if (decode) c.reqs = decode_step();
        add(c, std::string(decode ? "decode" : "mixed") + "_gqa" + std::to_string(g));
      }
    }
    for (int bs : {16, 32, 64}) {
      for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled}) {
        GpuCase c = base;
        c.block_size = bs;
        c.layout = l;
        add(c, std::string("bs") + std::to_string(bs) + "_" + layout_name(l));
        c.reqs = decode_step();
        c.hq = 32;
        add(c, std::string("decode_bs") + std::to_string(bs) + "_" + layout_name(l));
      }
    }
    {
      GpuCase c = base;
      c.window = 64;
      add(c, "window64");
      c.reqs = decode_step();
      add(c, "decode_window64");
      c = base;
      c.softcap = 30.0f;
      add(c, "softcap");
      c = base;
      c.sinks = true;
      add(c, "sinks");
      c.reqs = decode_step();
      add(c, "decode_sinks");
      c = base;
      c.dim = 64;
      c.hq = 16;
      c.window = 128;
      c.sinks = true;
      add(c, "gptoss_like_d64_window_sinks");
      c = base;
      c.dim = 256;
      c.softcap = 50.0f;
      c.window = 200;
      add(c, "gemma_like_d256_softcap_window");
      c = base;
      c.lse = false;
      add(c, "no_lse");
    }
    for (int d : {64, 128, 256}) {
      GpuCase c = base;
      c.dim = d;
      c.cache = DType::kFP8E4M3;
      add(c, "fp8_mixed_d" + std::to_string(d));
      c.reqs = decode_step();
      c.hq = 32;
      add(c, "fp8_decode_d" + std::to_string(d));
      c.layout = KvLayout::kTiled;
      add(c, "fp8_decode_tiled_d" + std::to_string(d));
    }
    {
      GpuCase c = base;
      c.dtype = c.cache = DType::kF16;
      add(c, "f16_mixed");
      c.cache = DType::kFP8E4M3;
      add(c, "f16_fp8_mixed");
      c = base;
      c.hq = 8;
      c.hkv = 1;
      c.reqs = {{1, 131072}, {1, 70000}};
      add(c, "decode_128k");
      c.reqs = {{300, 20000}};
      add(c, "extend_20k");
      c = base;
      c.threshold = 4;
      c.hq = 16;
      c.reqs = {{3, 900}, {4, 10}, {2, 2000}, {1, 50}, {40, 100}, {9, 0}};
      add(c, "threshold4");
      c.reqs = {{3, 900}, {4, 10}, {2, 2000}, {1, 50}};
      add(c, "threshold4_decode_only");
      c = base;
      c.reqs = {{0, 0}, {1, 0}, {0, 17}, {2, 3}, {1, 1}};
      add(c, "edge_tiny");
      c = base;
      c.ordered = false;
      std::reverse(c.reqs.begin(), c.reqs.end());
      if (b == "unified") add(c, "unordered");
      // Many extend chunks (three_path merges one round per chunk), with a window and sinks.
      c = base;
      c.chunk_budget = 100;
      c.reqs = {{70, 300}, {20, 1025}, {33, 5}, {1, 900}, {64, 0}};
      add(c, "many_chunks");
      c.window = 150;
      c.sinks = true;
      add(c, "many_chunks_window_sinks");
      c = base;
      c.chunk_budget = 4096;
      c.hq = 8;
      c.hkv = 1;
      c.reqs = {{500, 40000}, {1, 30000}};
      add(c, "extend_40k_chunked");
    }
    if (b == "three_path") {
      // Decode kernel and merge as programmatic dependents (TRIPATH_PDL=1): GQA, sinks, a
      // window, fp8, many splits, a mixed step (the flash launches after them stay plain).
      derive({"three_path_decode_gqa8", "three_path_decode_sinks", "three_path_decode_window64",
              "three_path_fp8_decode_d128", "three_path_decode_128k", "three_path_mixed_d128"},
             "pdl_", [](GpuCase& k) { k.pdl = true; });
      // Uniform decode batches. The tp8 shard's (64 row sets on 132 SMs) run as 2-CTA clusters
      // by default (TRIPATH_DECODE_CLUSTER=1; add_decode_pairs), and once with the planner's
      // splits and the merge kernel; then pair cases with every feature: lengths within 7/8,
      // sinks, a window, soft-cap, no LSE, two KV heads, HND and tiled layouts, f16, MTP rows
      // (2 x 8 = 16 rows), cache blocks of 64. The others' splits (5, 6, 8) take the merge kernel.
      {
        GpuCase c = base;
        c.hq = 8;
        c.hkv = 1;
        c.reqs.assign(64, {1, 4096});
        add(c, "decode_uniform_tp8");
        c.decode_cluster = false;
        add(c, "merge_kernel_decode_uniform_tp8");
        c = base;
        c.hq = 8;
        c.hkv = 1;
        c.reqs.clear();
        for (int r = 0; r < 64; ++r) c.reqs.push_back({1, 3000 + (r * 37) % 400});
        c.sinks = true;
        c.window = 1500;
        c.softcap = 30.0f;
        add(c, "pairs_tp8_sinks_window_softcap");
        c.window = -1;
        c.softcap = 0.0f;
        c.sinks = false;
        c.lse = false;
        c.layout = KvLayout::kHND;
        c.dtype = c.cache = DType::kF16;
        add(c, "pairs_tp8_f16_hnd_no_lse");
        c = base;
        c.hq = 16;
        c.hkv = 2;
        c.layout = KvLayout::kTiled;
        c.reqs.assign(32, {1, 5000});
        c.reqs[7] = {1, 4400};
        add(c, "pairs_gqa8_2kv_tiled");
        c = base;
        c.hq = 8;
        c.hkv = 1;
        c.threshold = 2;
        c.block_size = 64;
        c.sinks = true;
        c.reqs.assign(60, {2, 3500});
        for (int r = 0; r < 60; r += 3) c.reqs[r] = {1, 3600};
        add(c, "pairs_tp8_mtp2_block64");
        c = base;
        c.hq = 16;
        c.sinks = true;
        c.reqs.assign(24, {1, 2000});
        add(c, "decode_uniform_gqa8_sinks");
        c = base;
        c.hq = 16;
        c.window = 1000;
        c.lse = false;
        c.reqs.assign(16, {1, 8000});
        add(c, "decode_uniform_window_no_lse");
        c = base;
        c.hq = 8;
        c.hkv = 1;
        c.cache = DType::kFP8E4M3;
        c.reqs.assign(40, {1, 3000});
        add(c, "fp8_decode_uniform_tp8");
      }
      // Decode segments (StepInput::decode_segments = 2: the planner's equal key runs, each
      // block streaming a list of pieces): uneven contexts with short and one-key requests,
      // GQA 16, sinks + window + soft-cap, fp8, f16 on HND, tiled, no LSE, MTP rows (4 x 4),
      // blocks of 64, a mixed step (decode segments beside extend and prefill), requests shorter
      // than a snap so every piece is a whole request (direct output, no merge), and uneven
      // contexts of the size the planner takes them for by itself (decode_segments = 1).
      {
        std::vector<ReqShape> uneven;
        for (int r = 0; r < 40; ++r) uneven.push_back({1, (r * 2711) % 9000 + (r % 7 == 0 ? 0 : 5)});
        uneven[3] = {1, 0};
        uneven[11] = {1, 16};
        GpuCase c = base;
        c.decode_segments = 2;
        c.hq = 32;
        c.reqs = uneven;
        add(c, "segments_gqa16");
        c.sinks = true;
        c.window = 700;
        c.softcap = 30.0f;
        add(c, "segments_sinks_window_softcap");
        c.sinks = false;
        c.window = -1;
        c.softcap = 0.0f;
        c.cache = DType::kFP8E4M3;
        add(c, "segments_fp8");
        c.cache = c.dtype = DType::kF16;
        c.layout = KvLayout::kHND;
        add(c, "segments_f16_hnd");
        c.cache = c.dtype = DType::kBF16;
        c.layout = KvLayout::kTiled;
        c.lse = false;
        add(c, "segments_tiled_no_lse");
        c = base;
        c.decode_segments = 2;
        c.threshold = 4;
        c.hq = 8;
        c.block_size = 64;
        c.reqs.clear();
        for (int r = 0; r < 30; ++r) c.reqs.push_back({1 + r % 4, 200 + (r * 911) % 6000});
        add(c, "segments_mtp4_block64");
        c = base;
        c.decode_segments = 2;
        add(c, "segments_mixed_step");
        c.reqs.assign(300, {1, 30});
        add(c, "segments_direct");
        c = base;
        c.hq = 64;
        c.hkv = 4;
        c.reqs.clear();
        std::mt19937_64 lens(0);
        std::uniform_int_distribution<int> ctx(1024, 8192);
        for (int r = 0; r < 64; ++r) c.reqs.push_back({1, ctx(lens)});
        c.expect_segments = true;  // decode-mixed's contexts: the planner's own choice
        add(c, "segments_planned_qwen_like");
        c.expect_segments = false;
        c.decode_segments = 0;
        add(c, "splits_planned_qwen_like");
      }
      // TRIPATH_DECODE_WRITE=0 (the cache-write kernel writes every token before the decode
      // kernel reads): one-split decode, splits and the merge, fp8, pairs, segments, a mixed step.
      // Every other three_path case runs the default, the decode kernel writing its rows.
      derive({"three_path_decode_gqa8", "three_path_decode_128k", "three_path_fp8_decode_d128",
              "three_path_decode_uniform_tp8", "three_path_segments_gqa16",
              "three_path_segments_mixed_step", "three_path_mixed_d128"},
             "cache_kernel_", [](GpuCase& k) { k.decode_write = 0; });
      // TRIPATH_DECODE_WRITE=2: the fused write on fp8 caches too (off by default there).
      derive({"three_path_fp8_decode_d64", "three_path_fp8_decode_d128",
              "three_path_fp8_decode_tiled_d128", "three_path_fp8_decode_uniform_tp8",
              "three_path_segments_fp8", "three_path_fp8_mixed_d128", "three_path_f16_fp8_mixed"},
             "fp8_write_", [](GpuCase& k) { k.decode_write = 2; });
      // TRIPATH_FUSE_COMPUTE=0 (prefill, the extend self-part and each round in their own
      // launches) and 1 (the first three in one launch, partial slots and merges as for many
      // rounds; the default 2 also runs single-round extends in one pass): one round, many
      // rounds, gathered rounds, the unified tiles (f16 on an fp8 cache), features.
      for (const GpuCase& m : std::vector<GpuCase>(out)) {
        for (const char* name :
             {"three_path_mixed_d128", "three_path_many_chunks_window_sinks",
              "three_path_extend_40k_chunked", "three_path_f16_fp8_mixed", "three_path_edge_tiny",
              "three_path_gptoss_like_d64_window_sinks",
              "three_path_gemma_like_d256_softcap_window", "three_path_extend_20k"}) {
          if (m.name != name) continue;
          for (int fuse : {0, 1}) {
            GpuCase k = m;
            k.fuse_compute = fuse;
            const std::string tag = fuse == 0 ? "separate_launches_" : "slot_merge_";
            add(k, tag + m.name.substr(b.size() + 1));
            if (m.name == "three_path_many_chunks_window_sinks") {
              k.extend_gather = true;
              add(k, tag + "gathered_" + m.name.substr(b.size() + 1));
            }
          }
        }
      }
      // The flash kernel's loads, TMA (the default) and cp.async: every layout and block size
      // they take, head dims, the features, extend chunks whose starts are not block-aligned.
      std::vector<GpuCase> tma;
      for (int d : {64, 128, 192, 256}) {
        GpuCase c = base;
        c.dim = d;
        tma.push_back(c);
        tma.back().name = "mixed_d" + std::to_string(d);
      }
      for (int bs : {8, 16, 64, 128}) {
        for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled}) {
          GpuCase c = base;
          c.block_size = bs;
          c.layout = l;
          c.name = std::string("bs") + std::to_string(bs) + "_" + layout_name(l);
          tma.push_back(c);
        }
      }
      GpuCase c = base;
      c.window = 100;
      c.softcap = 30.0f;
      c.sinks = true;
      c.name = "window_softcap_sinks";
      tma.push_back(c);
      c = base;
      c.chunk_budget = 100;
      c.reqs = {{70, 300}, {20, 1025}, {33, 5}, {1, 900}, {64, 0}};
      c.layout = KvLayout::kTiled;
      c.name = "many_chunks_tiled";
      tma.push_back(c);
      c = base;
      c.dtype = c.cache = DType::kF16;
      c.name = "f16_mixed";
      tma.push_back(c);
      for (GpuCase& t : tma) {
        add(t, "tma_" + t.name);
        GpuCase g = t;
        g.flash_tma = false;
        add(g, "cp_async_" + t.name);
      }
      // The other consumer loops (TRIPATH_FLASH_OVERLAP=0 to 4) on the same cases (they apply
      // to head dims <= 128; the others check that they are ignored there), plus long prompts
      // with odd and even tile counts.
      c = base;
      c.reqs = {{3001, 0}, {777, 5000}, {64, 64}, {1, 3000}};
      c.name = "long_odd_tiles";
      tma.push_back(c);
      c.dim = 64;
      c.reqs = {{2048, 0}, {1000, 1000}};
      c.name = "long_even_tiles_d64";
      tma.push_back(c);
      for (int mode : {0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 14}) {
        for (GpuCase t : tma) {  // with the default TMA loads
          t.flash_overlap = mode;
          const char* prefix[] = {"serial_",
                                  "overlap_",
                                  "wide_",
                                  "pingpong_",
                                  "wide_serial_",
                                  "smem_q_pingpong_",
                                  "",
                                  "",
                                  "",
                                  "cluster_",
                                  "cluster_pingpong_",
                                  "persistent_",
                                  "persistent_pingpong_",
                                  "",
                                  "persistent_qreg_"};
          add(t, prefix[mode] + t.name);
        }
      }
      // The cluster modes (=9, =10: CTA pairs sharing tiles by multicast) on an odd item count
      // (the grid's padding CTA), items of two KV heads next to each other (pairs that share
      // nothing), a window (tile starts that differ within a pair) and cp.async loads (no maps:
      // they run =4 / =5).
      for (int mode : {9, 10}) {
        GpuCase t = base;
        t.flash_overlap = mode;
        const std::string prefix = mode == 9 ? "cluster_" : "cluster_pingpong_";
        t.reqs = {{24, 0}, {8, 100}};
        t.name = prefix + "odd_items";
        add(t, t.name);
        t = base;
        t.flash_overlap = mode;
        t.reqs = {{1500, 0}, {300, 2000}};
        t.window = 200;
        t.name = prefix + "window200";
        add(t, t.name);
        t = base;
        t.flash_overlap = mode;
        t.flash_tma = false;
        t.name = prefix + "cp_async";
        add(t, t.name);
      }
      // TRIPATH_FLASH_TMA=1 (the first producer warp issues all of a tile's boxes) on the same
      // cases, with the default loop and the serial one.
      for (int mode : {13, 4}) {
        for (GpuCase t : tma) {
          t.tma_all_warps = false;
          t.flash_overlap = mode;
          add(t, std::string(mode == 13 ? "tma_one_warp_" : "tma_one_warp_serial_") + t.name);
        }
      }
      // The persistent modes (=11, =12, =14: one CTA per SM claiming items, the stage ring and
      // the Q barriers carried from item to item) on ~400 items of uneven lengths (3 or more
      // per CTA on an H200), with the features, and gathered by cp.async.
      for (int mode : {11, 12, 14}) {
        const std::string prefix = mode == 11   ? "persistent_"
                                   : mode == 12 ? "persistent_pingpong_"
                                                : "persistent_qreg_";
        GpuCase t = base;
        t.flash_overlap = mode;
        t.hq = 16;
        t.hkv = 4;
        t.reqs = {{1500, 0}, {900, 700}, {600, 2000}, {1, 500}, {300, 0}};
        t.name = prefix + "many_items";
        add(t, t.name);
        GpuCase f = t;
        f.window = 300;
        f.softcap = 30.0f;
        f.sinks = true;
        f.name = prefix + "many_items_window_softcap_sinks";
        add(f, f.name);
        t.flash_tma = false;
        t.name = prefix + "many_items_cp_async";
        add(t, t.name);
      }
      // The 64-key tiles' serial loop gathered by cp.async (the cp_async_ cases above run the
      // default 128-key tiles that way).
      for (GpuCase t : tma) {
        if (t.name.rfind("mixed_d", 0) != 0 && t.name != "many_chunks_tiled" &&
            t.name != "bs64_hnd") {
          continue;
        }
        t.flash_tma = false;
        t.flash_overlap = 0;
        add(t, "cp_async_serial_" + t.name);
      }
      // Extend chunks gathered to a contiguous workspace: every layout, cache block sizes 16
      // and 64, head dims, the features, many chunks with starts that are not block-aligned,
      // a context over the default budget, fp8 (unified kernel) and the cp.async loads on the
      // workspace (the others take the default TMA loads).
      std::vector<GpuCase> gather;
      const std::vector<ReqShape> chunky = {{70, 300}, {20, 1025}, {33, 5}, {1, 900}, {64, 0}};
      for (int d : {64, 128, 256}) {
        GpuCase g = base;
        g.dim = d;
        g.chunk_budget = 100;
        g.reqs = chunky;
        g.name = "many_chunks_d" + std::to_string(d);
        gather.push_back(g);
      }
      for (int bs : {16, 64}) {
        for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND, KvLayout::kTiled}) {
          GpuCase g = base;
          g.block_size = bs;
          g.layout = l;
          g.chunk_budget = 300;
          g.reqs = chunky;
          g.name = std::string("bs") + std::to_string(bs) + "_" + layout_name(l);
          gather.push_back(g);
        }
      }
      c = base;
      c.dim = 64;
      c.hq = 16;
      c.window = 150;
      c.softcap = 30.0f;
      c.sinks = true;
      c.chunk_budget = 100;
      c.reqs = chunky;
      c.layout = KvLayout::kTiled;
      c.name = "window_softcap_sinks_tiled";
      gather.push_back(c);
      c = base;
      c.hq = 8;
      c.hkv = 1;
      c.window = 5000;
      c.reqs = {{500, 40000}, {77, 9001}, {1, 30000}};  // 49001 context tokens: 2 chunks
      c.name = "extend_49k_window";
      gather.push_back(c);
      c = base;
      c.cache = DType::kFP8E4M3;
      c.chunk_budget = 100;
      c.reqs = chunky;
      c.name = "fp8_many_chunks";
      gather.push_back(c);
      c = base;
      c.dtype = c.cache = DType::kF16;
      c.chunk_budget = 100;
      c.reqs = chunky;
      c.layout = KvLayout::kHND;
      c.name = "f16_many_chunks_hnd";
      gather.push_back(c);
      c = base;
      c.chunk_budget = 100;
      c.reqs = chunky;
      c.layout = KvLayout::kTiled;
      c.flash_tma = false;
      c.name = "cp_async_many_chunks_tiled";
      gather.push_back(c);
      for (GpuCase& g : gather) {
        g.extend_gather = true;
        add(g, "gather_" + g.name);
      }
    }
  }
  return out;
}

std::string spec_name(int dim, DType q, DType kv) {
  return std::to_string(dim) + "/" + dtype_name(q) + "/" + dtype_name(kv);
}

bool spec_built(int dim, DType q, DType kv) {
  const std::string built = ", " + build_info().cuda_specializations + ",";
  return built.find(", " + spec_name(dim, q, kv) + ",") != std::string::npos;
}

struct Views {
  AttentionParams params;
  AttentionInputs in;
};

Views make_views(const GpuCase& c, const HostStep& s, Device dev, void* kc, void* vc, void* q,
                 void* k, void* v, void* out, DType out_dtype, void* lse, void* sinks) {
  Views w;
  w.params.num_q_heads = c.hq;
  w.params.num_kv_heads = c.hkv;
  w.params.head_dim = c.dim;
  w.params.window_left = c.window;
  w.params.softcap = c.softcap;
  w.params.has_sinks = c.sinks;
  const int64_t n = s.plan.num_tokens, elems = s.cache.elements_per_tensor();
  w.in.cache.config = s.cache;
  w.in.cache.k = TensorView::contiguous(kc, s.cache.dtype, {elems}, dev);
  w.in.cache.v = TensorView::contiguous(vc, s.cache.dtype, {elems}, dev);
  w.in.q = TensorView::contiguous(q, s.dtype, {n, c.hq, c.dim}, dev);
  w.in.k = TensorView::contiguous(k, s.dtype, {n, c.hkv, c.dim}, dev);
  w.in.v = TensorView::contiguous(v, s.dtype, {n, c.hkv, c.dim}, dev);
  w.in.out = TensorView::contiguous(out, out_dtype, {n, c.hq, c.dim}, dev);
  if (c.lse) w.in.lse = TensorView::contiguous(lse, DType::kF32, {n, c.hq}, dev);
  if (c.sinks) w.in.sinks = TensorView::contiguous(sinks, DType::kF32, {c.hq}, dev);
  return w;
}

#ifdef TRIPATH_WITH_CUDA
// The graph tests' device side of a step: cache, q / k / v uploaded, 16-bit output and f32 LSE
// buffers, no sinks, and the backend views over them.
struct DeviceStep {
  DeviceMem kc, vc, q, k, v, out, lse, sinks;
  size_t out_elems = 0;
  Views views;
};
void upload_step(const GpuCase& c, const HostStep& s, DeviceStep& d) {
  d.out_elems = static_cast<size_t>(s.plan.num_tokens) * c.hq * c.dim;
  d.kc.upload(s.k_cache);
  d.vc.upload(s.v_cache);
  d.q.upload(s.q);
  d.k.upload(s.k);
  d.v.upload(s.v);
  d.out.resize(d.out_elems * 2);
  d.lse.resize(s.plan.num_tokens * c.hq * 4);
  d.views = make_views(c, s, Device::kCUDA, d.kc.get(), d.vc.get(), d.q.get(), d.k.get(), d.v.get(),
                       d.out.get(), c.dtype, d.lse.get(), d.sinks.get());
}

// One backend->run captured from `stream` and instantiated; both destroyed with it.
struct CapturedRun {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~CapturedRun() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};
void capture_run(AttentionBackend& backend, const StepPlan& plan, Views& g, cudaStream_t stream,
                 CapturedRun& out) {
  TRIPATH_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  backend.run(plan, g.params, g.in);
  TRIPATH_TEST_CUDA(cudaStreamEndCapture(stream, &out.graph));
  TRIPATH_TEST_CUDA(cudaGraphInstantiate(&out.exec, out.graph, 0));
}
#endif

class GpuBackendTest : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuBackendTest, MatchesReference) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  const GpuCase& c = GetParam();
  if (!spec_built(c.dim, c.dtype, c.cache))
    GTEST_SKIP() << "specialization " << spec_name(c.dim, c.dtype, c.cache) << " not built";
  std::unique_ptr<AttentionBackend> backend;
  {
    ScopedEnv tma("TRIPATH_FLASH_TMA", !c.flash_tma ? "0" : c.tma_all_warps ? "2" : "1");
    ScopedEnv gather("TRIPATH_EXTEND_GATHER", c.extend_gather ? "1" : "0");
    ScopedEnv pdl("TRIPATH_PDL", c.pdl ? "1" : "0");
    ScopedEnv cluster("TRIPATH_DECODE_CLUSTER", c.decode_cluster ? "1" : "0");
    ScopedEnv segments("TRIPATH_DECODE_SEGMENTS", c.decode_segments == 0 ? "0" : "1");
    const std::string write_value = std::to_string(c.decode_write);
    ScopedEnv write("TRIPATH_DECODE_WRITE", write_value.c_str());
    const std::string fuse_value = std::to_string(c.fuse_compute);
    ScopedEnv fuse("TRIPATH_FUSE_COMPUTE", fuse_value.c_str());
    const std::string overlap_value = std::to_string(c.flash_overlap);
    ScopedEnv overlap("TRIPATH_FLASH_OVERLAP", overlap_value.c_str());
    backend = create_attention_backend(c.backend);
  }
  const uint64_t seed = std::hash<std::string>{}(c.name);
  HostStep s = make_step(c.reqs, c.hq, c.hkv, c.dim, c.block_size, c.layout, c.dtype, c.cache,
                         c.ordered, c.threshold, build_info().gpu_sm_count, seed, c.chunk_budget,
                         c.decode_segments);
  const int64_t n = s.plan.num_tokens;
  if ((c.decode_segments == 2 && s.plan.decode.num_requests() > 0) || c.expect_segments) {
    ASSERT_GT(s.plan.num_segments(), 0) << "forced decode segments missing from the plan";
  }

  // CPU reference (it writes its own copy of the cache first).
  std::vector<uint8_t> ref_k = s.k_cache, ref_v = s.v_cache;
  std::vector<float> ref_out(static_cast<size_t>(n * c.hq * c.dim)), ref_lse(n * c.hq);
  Views r = make_views(c, s, Device::kCPU, ref_k.data(), ref_v.data(), s.q.data(), s.k.data(),
                       s.v.data(), ref_out.data(), DType::kF32, ref_lse.data(), s.sinks.data());
  create_attention_backend("reference")->run(s.plan, r.params, r.in);

  DeviceMem kc, vc, q, k, v, out, lse, sinks;
  kc.upload(s.k_cache);
  vc.upload(s.v_cache);
  q.upload(s.q);
  k.upload(s.k);
  v.upload(s.v);
  sinks.upload(s.sinks);
  std::vector<uint16_t> poison_out(ref_out.size(), 0xFFFF);
  std::vector<float> poison_lse(ref_lse.size(), NAN);
  out.upload(poison_out);
  lse.upload(poison_lse);
  Views g = make_views(c, s, Device::kCUDA, kc.get(), vc.get(), q.get(), k.get(), v.get(),
                       out.get(), c.dtype, lse.get(), sinks.get());
  backend->prepare(s.plan, g.params, nullptr);
  backend->run(s.plan, g.params, g.in);
  TRIPATH_TEST_CUDA(cudaDeviceSynchronize());

  EXPECT_EQ(kc.download<uint8_t>(s.k_cache.size()), ref_k) << "K cache differs after the write";
  EXPECT_EQ(vc.download<uint8_t>(s.v_cache.size()), ref_v) << "V cache differs after the write";
  const std::vector<float> got = widen(out.download<uint16_t>(ref_out.size()), c.dtype);
  const double tol = c.dtype == DType::kBF16 ? 1e-2 : 4e-3;
  const double err = rel_l2(got, ref_out);
  EXPECT_LT(err, tol) << "relative L2 error of the output";
  if (c.lse) {
    const std::vector<float> got_lse = lse.download<float>(ref_lse.size());
    int bad = 0;
    for (size_t i = 0; i < got_lse.size(); ++i) {
      const bool same_inf = std::isinf(got_lse[i]) && got_lse[i] == ref_lse[i];
      if (!same_inf && !(std::fabs(got_lse[i] - ref_lse[i]) <= 2e-2f)) {
        if (bad++ < 3) ADD_FAILURE() << "lse[" << i << "] " << got_lse[i] << " vs " << ref_lse[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
  // Repeated runs are bitwise identical (no races, no order-dependent reductions), and the
  // second writes every output again (poisoned first: state a launch leaves behind, such as the
  // persistent modes' item counters, must not make it skip work).
  const std::vector<uint16_t> first = out.download<uint16_t>(ref_out.size());
  out.upload(poison_out);
  backend->run(s.plan, g.params, g.in);
  TRIPATH_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(out.download<uint16_t>(ref_out.size()), first) << "second run differs";
#endif
}

INSTANTIATE_TEST_SUITE_P(AllCases, GpuBackendTest, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

// A step captured in a CUDA graph and replayed gives the same bits as a plain run.
TEST(GpuGraph, CaptureAndReplay) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  // three_path_gather: three_path with its extend chunks gathered (the gather kernel captured);
  // three_path_pdl: with TRIPATH_PDL=1 (programmatic edges in the graph); three_path_persistent:
  // TRIPATH_FLASH_OVERLAP=14 (persistent flash CTAs claiming items through counters the graph
  // reuses on every replay).
  for (const std::string name : {"unified", "two_path", "three_path", "three_path_gather",
                                 "three_path_pdl", "three_path_persistent"}) {
    for (bool decode_only : {true, false}) {
      SCOPED_TRACE(name + (decode_only ? " decode" : " mixed"));
      GpuCase c;
      c.hq = 16;
      c.hkv = 2;
      c.reqs = decode_only ? decode_step() : mixed_step();
      if (!spec_built(c.dim, c.dtype, c.cache)) GTEST_SKIP() << "128/bf16/bf16 not built";
      std::unique_ptr<AttentionBackend> backend;
      {
        const bool gather = name == "three_path_gather", pdl = name == "three_path_pdl";
        const bool persistent = name == "three_path_persistent";
        ScopedEnv env("TRIPATH_EXTEND_GATHER", gather ? "1" : "0");
        ScopedEnv pdl_env("TRIPATH_PDL", pdl ? "1" : "0");
        ScopedEnv tma("TRIPATH_FLASH_TMA", nullptr);
        ScopedEnv overlap("TRIPATH_FLASH_OVERLAP", persistent ? "14" : nullptr);
        backend = create_attention_backend(gather || pdl || persistent ? "three_path" : name);
      }
      HostStep s = make_step(c.reqs, c.hq, c.hkv, c.dim, c.block_size, c.layout, c.dtype, c.cache,
                             true, 1, build_info().gpu_sm_count, 7);
      DeviceStep d;
      upload_step(c, s, d);
      const size_t out_elems = d.out_elems;
      DeviceMem& out = d.out;
      Views& g = d.views;
      cudaStream_t stream;
      TRIPATH_TEST_CUDA(cudaStreamCreate(&stream));
      g.in.stream = stream;
      backend->prepare(s.plan, g.params, stream);
      backend->run(s.plan, g.params, g.in);
      TRIPATH_TEST_CUDA(cudaStreamSynchronize(stream));
      const auto plain = out.download<uint16_t>(out_elems);
      TRIPATH_TEST_CUDA(cudaMemset(out.get(), 0xFF, out_elems * 2));
      {
        CapturedRun cap;
        ASSERT_NO_FATAL_FAILURE(capture_run(*backend, s.plan, g, stream, cap));
        // Each replay writes the whole output (poisoned before every one).
        for (int rep = 0; rep < 3; ++rep) {
          TRIPATH_TEST_CUDA(cudaMemsetAsync(out.get(), 0xFF, out_elems * 2, stream));
          TRIPATH_TEST_CUDA(cudaGraphLaunch(cap.exec, stream));
          TRIPATH_TEST_CUDA(cudaStreamSynchronize(stream));
          EXPECT_EQ(out.download<uint16_t>(out_elems), plain) << "replay " << rep;
        }
      }
      cudaStreamDestroy(stream);
    }
  }
#endif
}

#ifdef TRIPATH_WITH_CUDA
// A captured three_path run with one variant variable set: the output of one replay over a
// poisoned buffer, and the grid width of each kernel node of the graph.
struct VariantReplay {
  std::vector<uint16_t> out;
  std::vector<unsigned> grids;
};
void replay_three_path(const char* variable, const char* value, const HostStep& s, DeviceStep& d,
                       VariantReplay& r) {
  cudaStream_t stream;
  TRIPATH_TEST_CUDA(cudaStreamCreate(&stream));
  d.views.in.stream = stream;
  std::unique_ptr<AttentionBackend> backend;
  {
    ScopedEnv env(variable, value);
    backend = create_attention_backend("three_path");
  }
  backend->prepare(s.plan, d.views.params, stream);
  TRIPATH_TEST_CUDA(cudaMemset(d.out.get(), 0xFF, d.out_elems * 2));
  {
    CapturedRun cap;
    ASSERT_NO_FATAL_FAILURE(capture_run(*backend, s.plan, d.views, stream, cap));
    size_t count = 0;
    TRIPATH_TEST_CUDA(cudaGraphGetNodes(cap.graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    TRIPATH_TEST_CUDA(cudaGraphGetNodes(cap.graph, nodes.data(), &count));
    for (cudaGraphNode_t n : nodes) {
      cudaGraphNodeType type;
      TRIPATH_TEST_CUDA(cudaGraphNodeGetType(n, &type));
      if (type != cudaGraphNodeTypeKernel) continue;
      cudaKernelNodeParams kp{};
      TRIPATH_TEST_CUDA(cudaGraphKernelNodeGetParams(n, &kp));
      r.grids.push_back(kp.gridDim.x);
    }
    TRIPATH_TEST_CUDA(cudaGraphLaunch(cap.exec, stream));
    TRIPATH_TEST_CUDA(cudaStreamSynchronize(stream));
  }
  r.out = d.out.download<uint16_t>(d.out_elems);
  cudaStreamDestroy(stream);
}

// Elements of two bf16 outputs apart by more than the merge order's rounding, or unwritten
// (still the 0xFFFF poison) in either.
int outputs_apart(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y) {
  int far = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = bf16_to_float(x[i]), b = bf16_to_float(y[i]);
    if (x[i] == 0xFFFF || y[i] == 0xFFFF || !(std::fabs(a - b) <= 2e-2f * (1.0f + std::fabs(a))))
      ++far;
  }
  return far;
}
#endif

// three_path's 2-CTA cluster decode (TRIPATH_DECODE_CLUSTER=1) really replaces the planner's
// splits and their merge on the shape it is for: a decode batch of as many requests of 4096
// keys as clusters fit in one wave at 8 query / 1 KV head captures one kernel fewer than with the
// variable at 0 (the merge launch gone), and both give the same output up to the merge order's
// rounding.
TEST(GpuGraph, DecodePairsDropTheMergeLaunch) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  GpuCase c;
  c.hq = 8;
  c.hkv = 1;
  if (!spec_built(c.dim, c.dtype, c.cache)) GTEST_SKIP() << "128/bf16/bf16 not built";
  // As many row sets as 2-CTA clusters fit at once (one wave), at most half the SMs.
  const int pairs = std::min(build_info().gpu_sm_count / 2,
                             kernels::decode_cluster_capacity(128, DType::kBF16, DType::kBF16));
  ASSERT_GT(pairs * 4, build_info().gpu_sm_count * 3 / 2) << "cluster capacity " << pairs;
  c.reqs.assign(static_cast<size_t>(pairs), {1, 4096});
  HostStep s = make_step(c.reqs, c.hq, c.hkv, c.dim, c.block_size, c.layout, c.dtype, c.cache, true,
                         1, build_info().gpu_sm_count, 11);
  DeviceStep d;
  upload_step(c, s, d);
  VariantReplay merged, pairs_run;
  ASSERT_NO_FATAL_FAILURE(replay_three_path("TRIPATH_DECODE_CLUSTER", "0", s, d, merged));
  ASSERT_NO_FATAL_FAILURE(replay_three_path("TRIPATH_DECODE_CLUSTER", "1", s, d, pairs_run));
  EXPECT_EQ(pairs_run.grids.size() + 1, merged.grids.size())
      << "kernels with / without the cluster decode";
  EXPECT_EQ(outputs_apart(merged.out, pairs_run.out), 0)
      << "outputs apart between the two decode forms";
#endif
}

// three_path runs the planner's decode segments as one block per (segment, KV head), each
// streaming its list of pieces: on uneven contexts with segments forced, the captured decode
// kernel's grid is segments x KV heads with TRIPATH_DECODE_SEGMENTS=1 and one block per split
// item with 0, and both outputs agree up to the merge order's rounding.
TEST(GpuGraph, DecodeSegmentsRunOneBlockPerSegment) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  GpuCase c;
  c.hq = 32;
  c.hkv = 2;
  if (!spec_built(c.dim, c.dtype, c.cache)) GTEST_SKIP() << "128/bf16/bf16 not built";
  for (int r = 0; r < 48; ++r) c.reqs.push_back({1, 500 + (r * 3571) % 7000});
  HostStep s = make_step(c.reqs, c.hq, c.hkv, c.dim, c.block_size, c.layout, c.dtype, c.cache, true,
                         1, build_info().gpu_sm_count, 21, 32768, 2);
  ASSERT_GT(s.plan.num_segments(), 0);
  const unsigned seg_grid = static_cast<unsigned>(s.plan.num_segments() * c.hkv);
  const unsigned split_grid = static_cast<unsigned>(s.plan.num_splits() * c.hkv);
  ASSERT_NE(seg_grid, split_grid);
  DeviceStep d;
  upload_step(c, s, d);
  VariantReplay splits, segments;
  ASSERT_NO_FATAL_FAILURE(replay_three_path("TRIPATH_DECODE_SEGMENTS", "0", s, d, splits));
  ASSERT_NO_FATAL_FAILURE(replay_three_path("TRIPATH_DECODE_SEGMENTS", "1", s, d, segments));
  auto has = [](const VariantReplay& r, unsigned grid) {
    return std::find(r.grids.begin(), r.grids.end(), grid) != r.grids.end();
  };
  EXPECT_TRUE(has(splits, split_grid)) << "no kernel of the splits' grid " << split_grid;
  EXPECT_TRUE(has(segments, seg_grid)) << "no kernel of the segments' grid " << seg_grid;
  EXPECT_FALSE(has(segments, split_grid)) << "the splits ran with segments on";
  EXPECT_EQ(outputs_apart(splits.out, segments.out), 0) << "segments and splits apart";
#endif
}

// The split-KV decode launcher refuses block lists it cannot run: with the pair clusters, or
// without a grid (host-side checks, before any launch).
TEST(GpuErrors, DecodeBlockItemsChecked) {
#ifdef TRIPATH_WITH_CUDA
  if (!kernels::decode_built(128, DType::kBF16, DType::kBF16))
    GTEST_SKIP() << "decode 128/bf16 not built";
  const int32_t block_items[2] = {0, 1};
  kernels::UnifiedParams p{};
  p.num_items = 1;
  p.block_items = block_items;
  p.num_blocks = 0;
  EXPECT_EQ(kernels::launch_paged_decode(128, DType::kBF16, DType::kBF16, p, nullptr),
            cudaErrorInvalidValue);
  // With pair clusters (the launcher asks the device's compute capability first: GPU only).
  if (build_info().gpu_found) {
    const int32_t pair_items[2] = {0, 2};
    p.num_items = 2;
    p.block_items = pair_items;
    p.num_blocks = 1;
    p.cluster_splits = 2;
    EXPECT_EQ(kernels::launch_paged_decode(128, DType::kBF16, DType::kBF16, p, nullptr),
              cudaErrorInvalidValue);
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The flash kernel's persistent modes claim items through the caller's counters: without them
// the launcher refuses before launching anything (host-side check, no GPU needed).
TEST(GpuErrors, PersistentFlashNeedsItemCounter) {
#ifdef TRIPATH_WITH_CUDA
  if (!kernels::flash_prefill_built(128, DType::kBF16))
    GTEST_SKIP() << "flash prefill 128/bf16 not built";
  kernels::UnifiedParams p{};
  p.num_items = 1;
  for (auto mode : {kernels::FlashConsumerMode::kWideSerialPersistent,
                    kernels::FlashConsumerMode::kWidePingPongPersistent,
                    kernels::FlashConsumerMode::kWidePingPongQRegPersistent}) {
    EXPECT_EQ(kernels::launch_flash_prefill(128, DType::kBF16, p, nullptr, mode, nullptr),
              cudaErrorInvalidValue)
        << "mode " << static_cast<int>(mode);
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// three_path's variant variables: a value it does not know is an error naming the variable,
// never a silent fallback; 0 (off) and unset (the default) are accepted.
TEST(GpuErrors, ThreePathVariantVariables) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  struct Bad {
    const char* name;
    const char* value;
  };
  for (const Bad b :
       {Bad{"TRIPATH_FLASH_TMA", "yes"}, Bad{"TRIPATH_FLASH_TMA", "3"},
        Bad{"TRIPATH_FLASH_OVERLAP", "15"}, Bad{"TRIPATH_FLASH_OVERLAP", "99"},
        Bad{"TRIPATH_EXTEND_GATHER", "on"}, Bad{"TRIPATH_EXTEND_GATHER", "2"},
        Bad{"TRIPATH_PDL", "2"}, Bad{"TRIPATH_PDL", "yes"}, Bad{"TRIPATH_FUSE_COMPUTE", "3"},
        Bad{"TRIPATH_FUSE_COMPUTE", "no"}, Bad{"TRIPATH_DECODE_CLUSTER", "2"},
        Bad{"TRIPATH_DECODE_SEGMENTS", "2"}, Bad{"TRIPATH_DECODE_WRITE", "3"},
        Bad{"TRIPATH_DECODE_WRITE", "fp8"}, Bad{"TRIPATH_DECODE_BULK", "3"}}) {
    ScopedEnv env(b.name, b.value);
    try {
      create_attention_backend("three_path");
      ADD_FAILURE() << b.name << "=" << b.value << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.name), std::string::npos) << e.what();
    }
  }
  for (const char* name : {"TRIPATH_FLASH_TMA", "TRIPATH_FLASH_OVERLAP", "TRIPATH_EXTEND_GATHER",
                           "TRIPATH_PDL", "TRIPATH_FUSE_COMPUTE", "TRIPATH_DECODE_CLUSTER",
                           "TRIPATH_DECODE_SEGMENTS", "TRIPATH_DECODE_WRITE",
                           "TRIPATH_DECODE_BULK"}) {
    for (const char* ok : {"0", ""}) {
      ScopedEnv env(name, ok);
      EXPECT_NO_THROW(create_attention_backend("three_path")) << name << "='" << ok << "'";
    }
  }
#endif
}

// shared/DESIGN.md section 7: with no variable set, "auto" is three_path / mla on Hopper and the
// portable CUDA backends on other GPUs. The compute capability is read from the runtime here, not
// from build_info(), so a wrong build_info() fails the test instead of hiding in both sides.
TEST(GpuRegistry, AutoPicksThreePathAndMlaOnHopper) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  int device = 0, major = 0;
  TRIPATH_TEST_CUDA(cudaGetDevice(&device));
  TRIPATH_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const bool hopper = major == 9;
  ScopedEnv mha("TRIPATH_BACKEND", nullptr), mla("TRIPATH_MLA_BACKEND", nullptr);
  EXPECT_EQ(backend_from_env(false), hopper ? "three_path" : "unified") << "sm_" << major << "x";
  EXPECT_EQ(backend_from_env(true), hopper ? "mla" : "mla_baseline") << "sm_" << major << "x";
  EXPECT_STREQ(create_attention_backend("auto")->name(), hopper ? "three_path" : "unified");
  EXPECT_STREQ(create_mla_backend("auto")->name(), hopper ? "mla" : "mla_baseline");
#endif
}

// run() refuses a plan it was not prepared for, and CPU tensors.
TEST(GpuErrors, UnpreparedPlanAndWrongDevice) {
  TRIPATH_REQUIRE_GPU();
#ifdef TRIPATH_WITH_CUDA
  GpuCase c;
  c.reqs = decode_step();
  HostStep s = make_step(c.reqs, c.hq, c.hkv, c.dim, c.block_size, c.layout, c.dtype, c.cache, true,
                         1, 132, 3);
  DeviceMem kc, vc, q, k, v, out;
  kc.upload(s.k_cache);
  vc.upload(s.v_cache);
  q.upload(s.q);
  k.upload(s.k);
  v.upload(s.v);
  out.resize(s.q.size() * 2);
  Views g = make_views(c, s, Device::kCUDA, kc.get(), vc.get(), q.get(), k.get(), v.get(),
                       out.get(), c.dtype, nullptr, nullptr);
  g.in.lse = TensorView{};
  auto backend = create_attention_backend("unified");
  try {
    backend->run(s.plan, g.params, g.in);
    ADD_FAILURE() << "run without prepare did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prepare"), std::string::npos) << e.what();
  }
  backend->prepare(s.plan, g.params, nullptr);
  Views cpu = g;
  cpu.in.q.device = Device::kCPU;
  try {
    backend->run(s.plan, cpu.params, cpu.in);
    ADD_FAILURE() << "a CPU q did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'q'"), std::string::npos) << e.what();
  }
#endif
}

}  // namespace
}  // namespace tripath::gputest

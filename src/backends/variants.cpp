// The kernel-variant variables: one list (what each does, which backend reads it, the values it
// takes) for the backends that read them (read_variant: one parser, one error), `tripath info`
// and the reports that record them.
#include <cstdlib>
#include <string>
#include <vector>

#include "tripath/backend.h"
#include "tripath/error.h"

namespace tripath {

std::vector<VariantVariable> variant_variables() {
  std::vector<VariantVariable> out = {
      {"TRIPATH_FLASH_TMA", "three_path",
       "2: flash K/V tiles by TMA box copies, each producer warp issuing a share; 1: the same, "
       "all issued by the first producer warp; 0: by cp.async",
       2, 2, ""},
      {"TRIPATH_FLASH_OVERLAP", "three_path",
       "1: FA3-order flash consumers; 2: + 128-key tiles, producer warpgroup; 3: + ping-pong; "
       "4: 128-key tiles, producer warpgroup, serial consumers; 5: 2 + ping-pong; 0: 64-key "
       "tiles, serial consumers; timing probes (wrong outputs): 6 math alone of 4, 7 loads "
       "alone of 4, 8 math alone of 5; 9 / 10: 4 / 5 with 2-CTA clusters sharing K/V tiles by "
       "TMA multicast; 11 / 12: 4 / 5 in persistent CTAs (one per SM, claiming items in list "
       "order); 13: 5 with Q in registers for Q K^T; 14: 13 in persistent CTAs",
       14, 13, ""},
      {"TRIPATH_EXTEND_GATHER", "three_path", "1: extend chunks gathered to contiguous blocks", 1,
       0, ""},
      {"TRIPATH_FUSE_COMPUTE", "three_path",
       "1: prefill, the extend self-part and the first context round in one launch (the round's "
       "long items first, the short causal ones filling its tail); 2: the same, and where one "
       "round holds every extend context, extend items take context and new keys in one pass "
       "(no partial slots, no merge); 0: one launch each",
       2, 2, ""},
      {"TRIPATH_DECODE_CLUSTER", "three_path",
       "1: an even decode batch whose row sets, cut in halves, fit one wave of one block per SM "
       "runs each row set as a 2-CTA cluster of 8-warp blocks merging in distributed shared "
       "memory (no partials, no merge launch); 0: the planner's splits, partial states and the "
       "merge kernel",
       1, 1, ""},
      {"TRIPATH_DECODE_SEGMENTS", "three_path",
       "1: where the planner made decode segments (uneven contexts: equal key runs, one block "
       "per run and KV head streaming a list of pieces), the split-KV kernel runs them; 0: the "
       "planner's uniform splits always",
       1, 1, ""},
      {"TRIPATH_DECODE_WRITE", "three_path",
       "1: on a 16-bit cache the split-KV decode kernel stores the decode tokens' new K / V rows "
       "into the cache itself, before reading them (no cache-write launch for them); 2: on an "
       "fp8 cache too; 0: the cache-write kernel writes every token first",
       2, 1, ""},
      {"TRIPATH_DECODE_BULK", "three_path",
       "1: on the tiled layout the split-KV decode kernel's stages land by bulk copies, one per "
       "run of a cache block's keys, issued by one warp (sm_90, 16-bit cache, head dim a "
       "multiple of 64, blocks of >= 8 keys); 2: fp8 caches too (head dims 128, 256; slower "
       "than cp.async there on an H100); 0: a 16-byte cp.async per chunk from every thread",
       2, 1, ""},
      {"TRIPATH_PDL", "three_path, mla",
       "1: decode kernels and their merge launched as programmatic dependents (they start while "
       "the kernel before them ends)",
       1, 0, ""},
      {"TRIPATH_MLA_WGMMA", "mla",
       "1: wgmma decode kernel for 64-row steps on a bf16 cache; 2: the same with TMA loads; "
       "3: wgmma (TMA) on every bf16 step, rows padded to 64; 4: the seesaw wgmma kernel (both "
       "warpgroups compute S, of alternate tiles; TMA) for 64-row steps; 0: the mma.sync packed "
       "kernel",
       4, 4, ""}};
  for (VariantVariable& v : out) {
    const char* value = std::getenv(v.name.c_str());
    if (value != nullptr) v.value = value;
  }
  return out;
}

int read_variant(std::string_view name) {
  for (const VariantVariable& v : variant_variables()) {
    if (v.name != name) continue;
    std::string expected = "unset";
    for (int d = 0; d <= v.max_value; ++d) {
      expected += d == v.max_value ? " or " : ", ";
      expected += std::to_string(d);
    }
    // A plain decimal 0..max_value: digits only, no sign, no leading zero ("07" is an error).
    int parsed = -1;
    if (!v.value.empty() && v.value.size() <= 2 && (v.value.size() == 1 || v.value[0] != '0')) {
      parsed = 0;
      for (char c : v.value)
        parsed = c >= '0' && c <= '9' && parsed >= 0 ? parsed * 10 + (c - '0') : -1;
    }
    const bool ok = v.value.empty() || (parsed >= 0 && parsed <= v.max_value);
    TRIPATH_CHECK_ARG(ok, v.name, "'" + v.value + "'", expected);
    return v.value.empty() ? v.default_value : parsed;
  }
  TRIPATH_CHECK_ARG(false, "variant variable", std::string(name), "one of variant_variables()");
  return 0;
}

}  // namespace tripath

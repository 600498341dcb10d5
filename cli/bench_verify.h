// --verify: the backend's output against the CPU reference (reference::attention_direct for MHA,
// reference::mla_absorbed / mla_non_absorbed for MLA). The reference runs on its own copy of the
// cache as it was before any backend call, with the step's new rows written by the reference
// writers, so a backend that writes the cache wrongly is caught too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_step.h"

namespace tripath::cli {

// The cache storage of a step, copied, to give every backend the same starting cache.
struct CacheSnapshot {
  std::vector<std::vector<uint8_t>> tensors;
};
CacheSnapshot snapshot_cache(const MhaStep& s);
CacheSnapshot snapshot_cache(const MlaStep& s);
void restore_cache(MhaStep& s, const CacheSnapshot& snapshot);
void restore_cache(MlaStep& s, const CacheSnapshot& snapshot);

// f32 reference outputs of a step; computed from the cache the step holds now (call it before
// any backend has run).
struct ReferenceOutput {
  Buffer out;           // MHA: [tokens, q heads, head dim]; MLA: extend + prefill [.., h, 128]
  Buffer out_absorbed;  // MLA decode: [decode tokens, h, 512]
};
ReferenceOutput reference_output(const MhaStep& s);
ReferenceOutput reference_output(const MlaStep& s);

// Error of a row (one token and head): the largest |got - want| beyond what storing `want` in
// the output dtype costs by itself (u |want|, u = 2^-8 bf16, 2^-11 f16, 0 f32), divided by the
// row's largest |want|. Passes if every row is within `tolerance` and NaN/inf sit exactly where
// the reference has them.
struct VerifyResult {
  bool ok = true;
  double max_error = 0.0;
  double limit = 0.0;
  int64_t bad_rows = 0;
  std::string detail;  // the worst row, when a row fails
};
VerifyResult compare_outputs(const MhaStep& s, const ReferenceOutput& ref, double tolerance);
VerifyResult compare_outputs(const MlaStep& s, const ReferenceOutput& ref, double tolerance);

}  // namespace tripath::cli

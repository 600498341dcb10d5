// Parameters of the log-sum-exp merge of partial attention states (shared/DESIGN.md section 5).
#pragma once

#include <cstdint>

namespace tripath::kernels {

struct MergeParams {
  const float* part_out;    // part i, row r at (i * part_stride + r) * dim: normalized outputs
  const float* part_lse;    // part i, row r at i * part_stride + r: natural LSE; -inf: empty
  void* out;                // [rows, dim] (rows [row_begin, row_end) written), OutT
  float* lse;               // optional [rows]
  const float* sinks;       // optional [heads]: one more part per row, output 0, LSE = sink
  const int32_t* token_parts;  // optional [tokens]: parts of each token; null: num_parts each
  int32_t num_parts;
  int32_t heads;            // rows = tokens * heads; row r belongs to token r / heads
  int32_t dim;
  int64_t part_stride;      // rows from one part to the next (the rows per part when packed;
                            // may be negative: parts anywhere in one allocation)
  int64_t row_begin;        // first row merged
  int64_t row_end;          // one past the last
  int32_t pdl;              // host side: launch as a programmatic dependent (launch_kernel.h)
};

}  // namespace tripath::kernels

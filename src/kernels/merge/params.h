// Parameters of the log-sum-exp merge of partial attention states (shared/DESIGN.md section 5).
#pragma once

#include <cstdint>

namespace tripath::kernels {

struct MergeParams {
  const float* part_out;    // [max_parts, part_rows, dim] normalized partial outputs
  const float* part_lse;    // [max_parts, part_rows] natural-log LSE; -inf: empty part
  void* out;                // [part_rows, dim] (rows from row_begin written), OutT
  float* lse;               // optional [part_rows]
  const float* sinks;       // optional [heads]: one more part per row, output 0, LSE = sink
  const int32_t* token_parts;  // optional [tokens]: parts of each token; null: num_parts each
  int32_t num_parts;
  int32_t heads;            // rows = tokens * heads; row r belongs to token r / heads
  int32_t dim;
  int64_t part_rows;        // rows per part (the partial buffers' row count)
  int64_t row_begin;        // first row merged
  int64_t row_end;          // one past the last
};

}  // namespace tripath::kernels

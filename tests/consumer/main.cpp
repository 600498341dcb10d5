// Plans a tiny step and runs the auto-selected backend through the installed package.
#include <cstdio>
#include <vector>

#include <tripath/tripath.h>

int main() {
  tripath::StepInput in;
  in.query_lens = {1, 3};
  in.context_lens = {5, 0};
  std::vector<int32_t> table = {0, 1};
  in.block_table = table.data();
  in.block_table_stride = 1;
  in.num_cache_blocks = 2;
  in.block_size = 16;
  tripath::StepPlan plan = tripath::plan_step(in);
  std::printf("consumer: tripath %s, %d requests, %lld tokens, backend %s\n",
              tripath::build_info().version.c_str(), plan.num_requests,
              static_cast<long long>(plan.num_tokens), tripath::backend_from_env(false).c_str());
  return plan.num_tokens == 4 ? 0 : 1;
}

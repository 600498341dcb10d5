#include "reference_backend.h"

#include "tripath/reference.h"

namespace tripath {
namespace {

// Writes the cache, then composes the three paths when the batch is ordered, or runs the
// direct definition when it is not: the reference accepts any order.
class ReferenceAttentionBackend final : public AttentionBackend {
 public:
  const char* name() const override { return "reference"; }
  bool needs_ordered_batch() const override { return false; }
  void run(const StepPlan& plan, const AttentionParams& params,
           const AttentionInputs& in) override {
    validate_attention_call(plan, params, in, Device::kCPU);
    if (in.k.defined())
      reference::write_kv_cache(in.cache, in.k, in.v, plan.slot_mapping.data(), plan.num_tokens);
    if (plan.is_ordered) {
      reference::attention_three_path(plan, params, in);
    } else {
      reference::attention_direct(plan, params, in);
    }
  }
};

class ReferenceMlaBackend final : public MlaBackend {
 public:
  const char* name() const override { return "reference"; }
  void run(const StepPlan& plan, const MlaParams& params, const MlaInputs& in) override {
    check_ordered(plan, name());
    validate_mla_call(plan, params, in, Device::kCPU);
    if (in.latent.defined())
      reference::write_mla_cache(in.cache, in.latent, plan.slot_mapping.data(), plan.num_tokens);
    if (plan.decode.num_tokens() > 0) {
      reference::mla_absorbed(plan, plan.decode.begin, plan.decode.end, params, in.cache,
                              in.q_absorbed, in.out_absorbed, in.lse_absorbed);
    }
    if (plan.num_tokens > plan.decode.num_tokens()) {
      // Extend contexts are decompressed in chunks of the plan's budget: bounded workspace.
      reference::mla_non_absorbed(plan, plan.extend.begin, plan.prefill.end, params, in.cache,
                                  in.q, in.kv_b_proj, in.out, in.lse, plan.extend_chunk_budget);
    }
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_reference_attention_backend() {
  return std::make_unique<ReferenceAttentionBackend>();
}

std::unique_ptr<MlaBackend> make_reference_mla_backend() {
  return std::make_unique<ReferenceMlaBackend>();
}

}  // namespace tripath

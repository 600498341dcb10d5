// The continuous-batching scheduler of the serving simulation, with its block manager on
// tripath::BlockAllocator. Host-only and deterministic, so tests drive it step by step.
//
// Clients: a fixed number (`concurrency`) of clients each send one request, wait for it to
// finish, then send the next one of the trace; a request "arrives" when its client sends it (the
// first `concurrency` at t = 0). Arrived requests wait in a FIFO queue until admitted.
//
// One step (schedule()), under a token budget of `max_batched_tokens`:
//   1. every running request with one token left to compute (a decode) takes one token, oldest
//      first;
//   2. running requests still in their prompt take the next chunk of it, as much as the budget
//      allows (a prompt longer than the budget is split over steps; a later chunk has context,
//      so the planner classes it as extend);
//   3. if nobody was preempted in this step, waiting requests are admitted, oldest first, each
//      with a first chunk that fits the remaining budget and the free blocks.
// Every request's blocks grow with it (allocate on demand, all-or-nothing). When the pool runs
// short, the youngest running request is preempted by recompute: its blocks are freed, it goes
// back to the front of the queue and later prefills everything it had (prompt and the tokens
// generated so far) again; the finished chunk yields its next token. Preemptions are counted.
//
// A step computes `query_len` new tokens of each scheduled request; when a request's computed
// tokens reach its known tokens (prompt + generated), the step produced one output token. The
// last output token's KV is never computed (as in an engine: it is sampled, not attended).
//
// Shared prefixes (shared-prefix trace): the first member of a group to be admitted computes the
// group's prefix (rounded down to whole blocks, and shorter than the prompt); once computed, the
// group keeps a reference to those blocks (BlockAllocator::fork) until its last member finishes,
// and every later member forks them when admitted, starting with that many tokens of context.
// Members wait while another member is computing the prefix, so it is prefilled once.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "serve_trace.h"
#include "tripath/block_allocator.h"

namespace tripath::cli {

struct SchedulerConfig {
  int64_t concurrency = 64;
  int64_t max_batched_tokens = 16384;
  int block_size = 16;
  int64_t num_blocks = 0;
  // The free list starts as a seeded random permutation of the pool, so block tables are
  // fragmented like a long-running engine's (shared/BENCH.md: block tables randomly permuted).
  uint64_t seed = 0;
};

enum class RequestState : uint8_t { kPending, kWaiting, kRunning, kFinished };

struct RequestRecord {
  TraceRequest spec;
  RequestState state = RequestState::kPending;
  int64_t computed = 0;         // tokens whose K/V are in the cache
  int64_t generated = 0;        // output tokens produced
  std::vector<int32_t> blocks;  // the block table row
  int64_t shared_tokens = 0;    // leading tokens whose blocks were forked from the group prefix
  double arrival = -1.0;        // seconds of simulated time; -1 until it happens
  double first_token = -1.0;
  double finish = -1.0;
  int32_t preemptions = 0;
  int64_t known() const { return spec.input_len + generated; }
  int64_t remaining() const { return known() - computed; }
};

struct BatchEntry {
  int32_t request = 0;  // index into the trace
  int32_t query_len = 0;
  int32_t context_len = 0;
};

struct ScheduledBatch {
  std::vector<BatchEntry> entries;  // decodes first, then prompt chunks (continued, then new)
  int64_t num_tokens = 0;
  int32_t preemptions = 0;  // requests preempted while building this batch
  // Row-major [entries.size(), block_table_stride]: each entry's blocks for its context and
  // query tokens, padded with block 0.
  int64_t block_table_stride = 0;
  std::vector<int32_t> block_table;
};

class Scheduler {
 public:
  // Throws tripath::Error if a request can never fit the pool or the config is invalid.
  Scheduler(const SchedulerConfig& config, std::vector<TraceRequest> trace);

  // The next step's batch. Non-empty unless done().
  ScheduledBatch schedule();
  // Applies a batch that ran and ended at simulated time `end_time` (seconds): tokens computed,
  // outputs produced, finished requests' blocks freed, clients send their next requests.
  void complete(const ScheduledBatch& batch, double end_time);
  bool done() const { return num_finished_ == static_cast<int64_t>(requests_.size()); }

  const SchedulerConfig& config() const { return config_; }
  const std::vector<RequestRecord>& requests() const { return requests_; }
  const BlockAllocator& allocator() const { return allocator_; }
  const std::vector<int32_t>& running() const { return running_; }
  const std::deque<int32_t>& waiting() const { return waiting_; }
  int64_t in_flight() const { return in_flight_; }  // arrived and not finished
  int64_t num_finished() const { return num_finished_; }
  int64_t preemptions() const { return preemptions_; }
  int64_t prefix_forks() const { return prefix_forks_; }  // admissions that forked
  int64_t prefix_tokens_reused() const { return prefix_tokens_reused_; }
  // The blocks a group's prefix table holds (empty while not computed or after release).
  const std::vector<int32_t>& prefix_blocks(int32_t group) const;
  int64_t prefix_tokens(int32_t group) const;

  // Checks the block manager against the allocator: every block's reference count equals the
  // number of its holders (requests and prefix tables), free blocks have none, running
  // requests hold exactly the blocks their computed tokens need. Throws tripath::Error.
  void check_invariants() const;

 private:
  struct PrefixGroup {
    int64_t tokens = 0;           // shared tokens (whole blocks)
    std::vector<int32_t> blocks;  // the table's own references once computed
    bool ready = false;
    int32_t owner = -1;      // the running member computing it
    int64_t unfinished = 0;  // members not finished
  };
  struct Build {
    ScheduledBatch batch;
    int64_t budget = 0;
    bool preempted = false;
  };

  void arrive(double now);
  void build_step(Build& b);
  bool schedule_running(Build& b, int32_t id, int64_t query_len);
  void admit_waiting(Build& b);
  void preempt(Build& b, int32_t victim);
  bool release_prefix_pins();
  void add_entry(Build& b, int32_t id, int64_t query_len);
  void finish(int32_t id, double end_time);

  SchedulerConfig config_;
  std::vector<RequestRecord> requests_;
  BlockAllocator allocator_;
  std::vector<PrefixGroup> groups_;
  std::vector<int32_t> running_;     // admission order (oldest first)
  std::deque<int32_t> waiting_;      // arrived, not running
  std::vector<int32_t> step_query_;  // per request: tokens scheduled in the batch being built
  int64_t next_pending_ = 0;
  int64_t in_flight_ = 0;
  int64_t num_finished_ = 0;
  int64_t preemptions_ = 0;
  int64_t prefix_forks_ = 0;
  int64_t prefix_tokens_reused_ = 0;
};

}  // namespace tripath::cli

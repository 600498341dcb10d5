#include "serve_scheduler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "tripath/error.h"

namespace tripath::cli {

namespace {

int64_t blocks_for(int64_t tokens, int block_size) {
  return BlockAllocator::blocks_for_tokens(tokens, block_size);
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, std::vector<TraceRequest> trace)
    : config_(config), allocator_(std::max<int64_t>(config.num_blocks, 1)) {
  TRIPATH_CHECK_ARG(config.concurrency >= 1, "concurrency", config.concurrency, "at least 1");
  TRIPATH_CHECK_ARG(config.max_batched_tokens >= 1, "max-batched-tokens", config.max_batched_tokens,
                    "at least 1");
  TRIPATH_CHECK_ARG(config.block_size >= 1, "block-size", config.block_size, "at least 1");
  TRIPATH_CHECK_ARG(config.num_blocks >= 1, "num-blocks", config.num_blocks, "at least 1");
  requests_.resize(trace.size());
  int32_t num_groups = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& t = trace[i];
    TRIPATH_CHECK_ARG(
        t.input_len >= 1 && t.output_len >= 1, "trace request",
        "input " + std::to_string(t.input_len) + ", output " + std::to_string(t.output_len),
        "at least one input and one output token");
    // The most a request ever holds: every token but the last generated one.
    const int64_t need = blocks_for(t.input_len + t.output_len - 1, config.block_size);
    if (need > config.num_blocks) {
      throw Error("request " + std::to_string(i) + " needs " + std::to_string(need) +
                  " KV-cache blocks (" + std::to_string(t.input_len + t.output_len - 1) +
                  " tokens of " + std::to_string(config.block_size) + ") but the pool has " +
                  std::to_string(config.num_blocks) + "; raise --num-blocks");
    }
    requests_[i].spec = t;
    num_groups = std::max(num_groups, t.prefix_group + 1);
  }
  groups_.resize(static_cast<size_t>(num_groups));
  for (const RequestRecord& r : requests_) {
    if (r.spec.prefix_group < 0) continue;
    PrefixGroup& g = groups_[static_cast<size_t>(r.spec.prefix_group)];
    ++g.unfinished;
    // Whole blocks only (the block after the prefix holds the member's own tokens), and at
    // least one prompt token left to compute so the admitting step has a query.
    const int64_t shareable = std::min(r.spec.prefix_len, r.spec.input_len - 1);
    const int64_t tokens = shareable / config.block_size * config.block_size;
    g.tokens = g.unfinished == 1 ? tokens : std::min(g.tokens, tokens);
  }
  step_query_.assign(requests_.size(), 0);

  // Fragment the pool: hand every block out, then return them in a seeded random order.
  std::vector<int32_t> all = allocator_.allocate(allocator_.num_blocks());
  std::mt19937_64 rng(config.seed ^ 0xB10C5EEDull);
  std::shuffle(all.begin(), all.end(), rng);
  allocator_.free(all);

  arrive(0.0);
}

void Scheduler::arrive(double now) {
  while (next_pending_ < static_cast<int64_t>(requests_.size()) &&
         in_flight_ < config_.concurrency) {
    const int32_t id = static_cast<int32_t>(next_pending_++);
    RequestRecord& r = requests_[static_cast<size_t>(id)];
    r.state = RequestState::kWaiting;
    r.arrival = now;
    waiting_.push_back(id);
    ++in_flight_;
  }
}

const std::vector<int32_t>& Scheduler::prefix_blocks(int32_t group) const {
  return groups_.at(static_cast<size_t>(group)).blocks;
}

int64_t Scheduler::prefix_tokens(int32_t group) const {
  return groups_.at(static_cast<size_t>(group)).tokens;
}

void Scheduler::add_entry(Build& b, int32_t id, int64_t query_len) {
  RequestRecord& r = requests_[static_cast<size_t>(id)];
  b.batch.entries.push_back(
      {id, static_cast<int32_t>(query_len), static_cast<int32_t>(r.computed)});
  b.batch.num_tokens += query_len;
  b.budget -= query_len;
  step_query_[static_cast<size_t>(id)] = static_cast<int32_t>(query_len);
}

void Scheduler::preempt(Build& b, int32_t victim) {
  RequestRecord& v = requests_[static_cast<size_t>(victim)];
  const int32_t scheduled = step_query_[static_cast<size_t>(victim)];
  if (scheduled > 0) {
    // Already in this step's batch: take it out and give its tokens back to the budget.
    auto& entries = b.batch.entries;
    entries.erase(std::find_if(entries.begin(), entries.end(),
                               [&](const BatchEntry& e) { return e.request == victim; }));
    b.batch.num_tokens -= scheduled;
    b.budget += scheduled;
    step_query_[static_cast<size_t>(victim)] = 0;
  }
  allocator_.free(v.blocks);
  v.blocks.clear();
  v.computed = 0;
  v.shared_tokens = 0;
  v.state = RequestState::kWaiting;
  ++v.preemptions;
  ++preemptions_;
  ++b.batch.preemptions;
  b.preempted = true;
  if (v.spec.prefix_group >= 0) {
    PrefixGroup& g = groups_[static_cast<size_t>(v.spec.prefix_group)];
    if (g.owner == victim) g.owner = -1;
  }
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  // Back to the front of the queue: victims are taken youngest first, so pushing each to the
  // front keeps the queue in admission order.
  waiting_.push_front(victim);
}

bool Scheduler::release_prefix_pins() {
  bool released = false;
  for (PrefixGroup& g : groups_) {
    if (!g.ready) continue;
    allocator_.free(g.blocks);
    g.blocks.clear();
    g.ready = false;
    released = true;
  }
  return released;
}

// Grows a running request's blocks for `query_len` more tokens, preempting the youngest running
// requests while the pool is short. False if the request itself had to be preempted.
bool Scheduler::schedule_running(Build& b, int32_t id, int64_t query_len) {
  RequestRecord& r = requests_[static_cast<size_t>(id)];
  const int64_t need = blocks_for(r.computed + query_len, config_.block_size) -
                       static_cast<int64_t>(r.blocks.size());
  while (need > 0 && !allocator_.try_allocate(need, r.blocks)) {
    if (running_.size() == 1) {
      // Alone and still short: only prefix tables can be holding the rest of the pool.
      if (release_prefix_pins()) continue;
      throw Error("the KV cache pool (" + std::to_string(allocator_.num_blocks()) +
                  " blocks) cannot hold request " + std::to_string(id) + "; raise --num-blocks");
    }
    const int32_t victim = running_.back();
    preempt(b, victim);
    if (victim == id) return false;
  }
  add_entry(b, id, query_len);
  return true;
}

void Scheduler::admit_waiting(Build& b) {
  for (auto it = waiting_.begin(); it != waiting_.end() && b.budget > 0;) {
    const int32_t id = *it;
    RequestRecord& r = requests_[static_cast<size_t>(id)];
    PrefixGroup* g =
        r.spec.prefix_group >= 0 ? &groups_[static_cast<size_t>(r.spec.prefix_group)] : nullptr;
    bool forked = false;
    if (g != nullptr && g->tokens > 0) {
      if (g->ready) {
        r.blocks = allocator_.fork(g->blocks);
        r.computed = g->tokens;
        r.shared_tokens = g->tokens;
        forked = true;
      } else if (g->owner >= 0 && g->owner != id) {
        ++it;  // another member is computing the prefix: wait for it rather than compute it twice
        continue;
      }
    }
    const int64_t query_len = std::min(r.remaining(), b.budget);
    const int64_t need = blocks_for(r.computed + query_len, config_.block_size) -
                         static_cast<int64_t>(r.blocks.size());
    if (need > 0 && !allocator_.try_allocate(need, r.blocks)) {
      if (forked) {
        allocator_.free(r.blocks);
        r.blocks.clear();
        r.computed = 0;
        r.shared_tokens = 0;
      }
      break;  // out of blocks: admission waits (running requests are never preempted for it)
    }
    if (forked) {
      ++prefix_forks_;
      prefix_tokens_reused_ += g->tokens;
    } else if (g != nullptr && g->tokens > 0 && !g->ready) {
      g->owner = id;
    }
    r.state = RequestState::kRunning;
    running_.push_back(id);
    it = waiting_.erase(it);
    add_entry(b, id, query_len);
  }
}

void Scheduler::build_step(Build& b) {
  // Decodes first, one token each; then the next prompt chunk of each running prefill. Indexes,
  // not iterators: preemption removes the youngest (the back), never a request before i.
  for (size_t i = 0; i < running_.size() && b.budget > 0; ++i) {
    const int32_t id = running_[i];
    if (requests_[static_cast<size_t>(id)].remaining() == 1) schedule_running(b, id, 1);
  }
  for (size_t i = 0; i < running_.size() && b.budget > 0; ++i) {
    const int32_t id = running_[i];
    const RequestRecord& r = requests_[static_cast<size_t>(id)];
    if (r.remaining() > 1 && step_query_[static_cast<size_t>(id)] == 0)
      schedule_running(b, id, std::min(r.remaining(), b.budget));
  }
  if (!b.preempted) admit_waiting(b);
}

ScheduledBatch Scheduler::schedule() {
  Build b;
  int32_t preempted = 0;
  // An attempt can end empty only by preempting every running request (admission waits for
  // the next attempt) or with the pool held by prefix tables; a few attempts settle either.
  for (int attempt = 0; attempt < 4 && !done(); ++attempt) {
    b = Build{};
    b.budget = config_.max_batched_tokens;
    build_step(b);
    preempted += b.batch.preemptions;
    if (!b.batch.entries.empty()) break;
    if (b.preempted) continue;
    if (release_prefix_pins()) continue;
    throw Error("no request can be scheduled: the KV cache pool (" +
                std::to_string(allocator_.num_blocks()) + " blocks, " +
                std::to_string(allocator_.num_free()) + " free) is too small; raise --num-blocks");
  }
  ScheduledBatch& batch = b.batch;
  batch.preemptions = preempted;
  for (const BatchEntry& e : batch.entries) step_query_[static_cast<size_t>(e.request)] = 0;

  int64_t stride = 1;
  for (const BatchEntry& e : batch.entries)
    stride = std::max(stride, blocks_for(int64_t{e.context_len} + e.query_len, config_.block_size));
  batch.block_table_stride = stride;
  batch.block_table.assign(batch.entries.size() * static_cast<size_t>(stride), 0);
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const BatchEntry& e = batch.entries[i];
    const std::vector<int32_t>& blocks = requests_[static_cast<size_t>(e.request)].blocks;
    const int64_t n = blocks_for(int64_t{e.context_len} + e.query_len, config_.block_size);
    std::copy(blocks.begin(), blocks.begin() + n,
              batch.block_table.begin() + static_cast<int64_t>(i) * stride);
  }
  return std::move(batch);
}

void Scheduler::finish(int32_t id, double end_time) {
  RequestRecord& r = requests_[static_cast<size_t>(id)];
  allocator_.free(r.blocks);
  r.blocks.clear();
  r.state = RequestState::kFinished;
  r.finish = end_time;
  --in_flight_;
  ++num_finished_;
  if (r.spec.prefix_group >= 0) {
    PrefixGroup& g = groups_[static_cast<size_t>(r.spec.prefix_group)];
    if (g.owner == id) g.owner = -1;
    if (--g.unfinished == 0 && g.ready) {
      allocator_.free(g.blocks);
      g.blocks.clear();
      g.ready = false;
    }
  }
}

void Scheduler::complete(const ScheduledBatch& batch, double end_time) {
  bool any_finished = false;
  for (const BatchEntry& e : batch.entries) {
    RequestRecord& r = requests_[static_cast<size_t>(e.request)];
    if (r.state != RequestState::kRunning || r.computed != e.context_len ||
        r.computed + e.query_len > r.known()) {
      throw Error("scheduler: batch entry for request " + std::to_string(e.request) +
                  " does not match its state (completed twice or out of order)");
    }
    r.computed += e.query_len;
    if (r.spec.prefix_group >= 0) {
      PrefixGroup& g = groups_[static_cast<size_t>(r.spec.prefix_group)];
      if (!g.ready && g.owner == e.request && g.tokens > 0 && r.computed >= g.tokens) {
        // The prefix is in the cache: the group keeps its own reference to those blocks.
        const auto n = static_cast<size_t>(g.tokens / config_.block_size);
        g.blocks = allocator_.fork(std::vector<int32_t>(r.blocks.begin(), r.blocks.begin() + n));
        g.ready = true;
        g.owner = -1;
      }
    }
    if (r.computed == r.known()) {
      ++r.generated;
      if (r.first_token < 0.0) r.first_token = end_time;
      if (r.generated == r.spec.output_len) {
        finish(e.request, end_time);
        any_finished = true;
      }
    }
  }
  if (any_finished) {
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](int32_t id) {
                                    return requests_[static_cast<size_t>(id)].state ==
                                           RequestState::kFinished;
                                  }),
                   running_.end());
  }
  arrive(end_time);
}

void Scheduler::check_invariants() const {
  std::vector<int32_t> holders(static_cast<size_t>(allocator_.num_blocks()), 0);
  auto hold = [&](const std::vector<int32_t>& blocks) {
    for (int32_t b : blocks) ++holders.at(static_cast<size_t>(b));
  };
  for (const RequestRecord& r : requests_) {
    hold(r.blocks);
    const bool running = r.state == RequestState::kRunning;
    if (!running && !r.blocks.empty()) {
      throw Error("block manager: request " + std::to_string(r.spec.id) +
                  " holds blocks while not running");
    }
    if (running &&
        static_cast<int64_t>(r.blocks.size()) != blocks_for(r.computed, config_.block_size)) {
      throw Error("block manager: request " + std::to_string(r.spec.id) + " holds " +
                  std::to_string(r.blocks.size()) + " blocks for " + std::to_string(r.computed) +
                  " computed tokens");
    }
  }
  for (const PrefixGroup& g : groups_) hold(g.blocks);
  int64_t free = 0;
  for (int32_t b = 0; b < allocator_.num_blocks(); ++b) {
    if (allocator_.ref_count(b) != holders[static_cast<size_t>(b)]) {
      throw Error("block manager: block " + std::to_string(b) + " has reference count " +
                  std::to_string(allocator_.ref_count(b)) + " but " +
                  std::to_string(holders[static_cast<size_t>(b)]) + " holders");
    }
    if (holders[static_cast<size_t>(b)] == 0) ++free;
  }
  if (free != allocator_.num_free()) {
    throw Error("block manager: " + std::to_string(free) + " unheld blocks but the allocator has " +
                std::to_string(allocator_.num_free()) + " free");
  }
  if (in_flight_ > config_.concurrency)
    throw Error("scheduler: more requests in flight than clients");
}

}  // namespace tripath::cli

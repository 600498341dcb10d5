"""plan_step properties, checked against the definitions in shared/DESIGN.md section 1."""

import numpy as np
import pytest

import tripath

DECODE, EXTEND, PREFILL = 0, 1, 2


def random_step(rng, n, block_size, threshold=1):
    query = rng.choice([0, 1, 1, 2, 3, 17, 64, 113], size=n).astype(np.int32)
    context = rng.choice([0, 0, 1, 15, 16, 100, 1013, 1025], size=n).astype(np.int32)
    seq = query + context
    need = -(-seq // block_size)
    width = int(need.max(initial=0)) + int(rng.integers(0, 3))
    num_blocks = max(1, 3 * int(need.sum()))
    perm = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((n, max(width, 1)), -7, dtype=np.int32)  # poison beyond what is needed
    used = 0
    for r in range(n):
        table[r, : need[r]] = perm[used: used + need[r]]
        used += need[r]
    return query, context, table, num_blocks


def check_plan(plan, query, context, table, block_size, threshold, budget):
    n = len(query)
    seq = query + context
    cls = np.where(query <= threshold, DECODE, np.where(context == 0, PREFILL, EXTEND))
    np.testing.assert_array_equal(plan.classes, cls)
    assert plan.class_names == [["decode", "extend", "prefill"][c] for c in cls]

    # Stable partition [decode | extend | prefill] and its inverse.
    order = np.array(sorted(range(n), key=lambda r: cls[r]), dtype=np.int32)
    np.testing.assert_array_equal(plan.order, order)
    np.testing.assert_array_equal(plan.inverse[plan.order], np.arange(n))
    assert plan.is_ordered == bool(np.array_equal(order, np.arange(n)))

    # The token layout is the caller's request order (the ordered one when is_ordered).
    np.testing.assert_array_equal(plan.query_lens, query)
    np.testing.assert_array_equal(plan.context_lens, context)
    np.testing.assert_array_equal(plan.seq_lens, seq)
    np.testing.assert_array_equal(plan.cu_seqlens_q, np.concatenate([[0], np.cumsum(query)]))
    np.testing.assert_array_equal(plan.cu_seqlens_k, np.concatenate([[0], np.cumsum(seq)]))
    assert plan.num_requests == n and plan.num_tokens == query.sum()
    assert plan.max_query_len == query.max(initial=0)
    assert plan.max_decode_query_len == query[cls == DECODE].max(initial=0)
    assert plan.max_seq_len == seq.max(initial=0)
    assert plan.block_size == block_size and plan.decode_threshold == threshold

    # Block table rows and the slot of every new token, in that layout.
    bt = plan.block_table
    assert bt.shape == (n, plan.max_blocks_per_request)
    slots = []
    for r in range(n):
        need = -(-seq[r] // block_size)
        np.testing.assert_array_equal(bt[r, :need], table[r, :need])
        for t in range(query[r]):
            pos = context[r] + t
            slots.append(table[r, pos // block_size] * block_size + pos % block_size)
    np.testing.assert_array_equal(plan.slot_mapping, np.array(slots, dtype=np.int64))
    assert plan.slot_mapping.dtype == np.int64

    # Path ranges, chunks and splits describe the ordered batch: contiguous class runs.
    q, c, s = query[order], context[order], seq[order]
    counts = [int((cls == k).sum()) for k in range(3)]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    cu = np.concatenate([[0], np.cumsum(q)])
    for k, rng_ in enumerate([plan.decode, plan.extend, plan.prefill]):
        assert rng_ == (bounds[k], bounds[k + 1], cu[bounds[k]], cu[bounds[k + 1]])

    # Extend chunks: every context token of every extend request in exactly one chunk, each
    # chunk within the budget.
    e0, e1 = plan.extend[0], plan.extend[1]
    ne = e1 - e0
    starts, lens, cu_kv = plan.chunk_kv_start, plan.chunk_kv_len, plan.chunk_cu_kv
    assert starts.shape == lens.shape == (plan.num_chunks, ne)
    assert cu_kv.shape == (plan.num_chunks, ne + 1)
    assert plan.extend_chunk_budget == budget
    for ch in range(plan.num_chunks):
        assert lens[ch].sum() <= budget
        np.testing.assert_array_equal(cu_kv[ch], np.concatenate([[0], np.cumsum(lens[ch])]))
    for e in range(ne):
        covered = np.zeros(c[e0 + e], dtype=np.int32)
        for ch in range(plan.num_chunks):
            covered[starts[ch, e]: starts[ch, e] + lens[ch, e]] += 1
        assert (covered == 1).all()

    # Decode splits: contiguous, in order, covering each decode request's keys.
    d0, d1 = plan.decode[0], plan.decode[1]
    cu_splits = plan.decode_cu_splits
    assert len(cu_splits) == d1 - d0 + 1 and cu_splits[0] == 0
    assert plan.num_splits == len(plan.split_request) == cu_splits[-1]
    if plan.num_splits:
        assert plan.split_tokens > 0 and plan.split_tokens % block_size == 0
    for d in range(d1 - d0):
        i = d0 + d
        ss = range(cu_splits[d], cu_splits[d + 1])
        expect = s[i] if q[i] > 0 else 0
        pos = 0
        for sp in ss:
            assert plan.split_request[sp] == i and plan.split_kv_start[sp] == pos
            assert 0 < plan.split_kv_len[sp] <= plan.split_tokens
            pos += plan.split_kv_len[sp]
        assert pos == expect


@pytest.mark.parametrize("seed", range(8))
def test_plan_properties(seed):
    rng = np.random.default_rng(seed)
    block_size = [1, 16, 64][seed % 3]
    threshold = [1, 1, 4][seed % 3]
    budget = [100, 32768, 1000][seed % 3]
    n = int(rng.integers(1, 14))
    query, context, table, num_blocks = random_step(rng, n, block_size, threshold)
    plan = tripath.plan_step(query, context, table, num_blocks, block_size=block_size,
                             decode_threshold=threshold, extend_chunk_budget=budget,
                             num_work_units=132, num_kv_heads=4, min_split_tokens=64)
    check_plan(plan, query, context, table, block_size, threshold, budget)
    assert "StepPlan(" in repr(plan)

    # The step laid out in plan order plans to an ordered plan with the same token layout.
    q2, c2, t2 = tripath.ordered_inputs(plan, query, context, table)
    plan2 = tripath.plan_step(q2, c2, t2, num_blocks, block_size=block_size,
                              decode_threshold=threshold, extend_chunk_budget=budget,
                              num_work_units=132, num_kv_heads=4, min_split_tokens=64)
    assert plan2.is_ordered
    np.testing.assert_array_equal(plan2.order, np.arange(n))
    np.testing.assert_array_equal(plan2.slot_mapping,
                                  tripath.reorder_token_rows(plan, plan.slot_mapping))
    np.testing.assert_array_equal(plan2.query_lens, query[plan.order])
    # Its layout is this plan's (caller-order) layout permuted by plan.order.
    np.testing.assert_array_equal(plan2.context_lens, plan.context_lens[plan.order])
    np.testing.assert_array_equal(plan2.classes, plan.classes[plan.order])
    np.testing.assert_array_equal(plan2.block_table, plan.block_table[plan.order])
    np.testing.assert_array_equal(plan2.cu_seqlens_q,
                                  np.concatenate([[0], np.cumsum(plan.query_lens[plan.order])]))
    assert plan2.num_tokens == plan.num_tokens
    # Identical path ranges, extend chunks and decode splits: both describe the ordered batch.
    for field in ("decode", "extend", "prefill"):
        assert getattr(plan2, field) == getattr(plan, field)
    assert plan2.num_chunks == plan.num_chunks and plan2.split_tokens == plan.split_tokens
    assert plan2.num_splits == plan.num_splits
    for field in ("chunk_kv_start", "chunk_kv_len", "chunk_cu_kv", "decode_cu_splits",
                  "split_request", "split_kv_start", "split_kv_len"):
        np.testing.assert_array_equal(getattr(plan2, field), getattr(plan, field), err_msg=field)


def test_plan_accepts_lists_and_ragged_rows():
    plan = tripath.plan_step([1, 5, 3], [20, 0, 4], [[3, 1], [0], [2]], num_cache_blocks=4)
    assert plan.decode == (0, 1, 0, 1) and plan.extend == (1, 2, 1, 4)
    assert plan.prefill == (2, 3, 4, 9)
    np.testing.assert_array_equal(plan.order, [0, 2, 1])
    assert not plan.is_ordered
    # The slots follow the caller's order: r0, r1, r2.
    np.testing.assert_array_equal(plan.slot_mapping, [1 * 16 + 4, 0, 1, 2, 3, 4, 2 * 16 + 4,
                                                      2 * 16 + 5, 2 * 16 + 6])
    assert plan.seq_len(0) == 21
    empty = tripath.plan_step([], [], np.zeros((0, 0), np.int32), num_cache_blocks=1)
    assert empty.num_requests == 0 and empty.num_tokens == 0 and empty.order.shape == (0,)


def test_reorder_token_rows():
    query, context = [3, 1, 2], [0, 9, 0]
    plan = tripath.plan_step(query, context, [[0], [1], [2]], num_cache_blocks=3)
    rows = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)  # plan layout: r0 r0 r0 r1 r2 r2
    out = tripath.reorder_token_rows(plan, rows)
    # Ordered: decode r1, then prefills r0, r2.
    np.testing.assert_array_equal(out, rows[[3, 0, 1, 2, 4, 5]])
    with pytest.raises(ValueError, match="rows"):
        tripath.reorder_token_rows(plan, rows[:5])


def test_plan_errors():
    with pytest.raises(ValueError, match=r"block_table\[1\]\[0\]") as e:
        tripath.plan_step([1, 1], [3, 3], [[0], [9]], num_cache_blocks=4)
    assert "9" in str(e.value)
    with pytest.raises(ValueError, match="block_table row 0"):
        tripath.plan_step([1], [40], [[0, 1]], num_cache_blocks=4)
    with pytest.raises(ValueError, match=r"query_lens\[0\]"):
        tripath.plan_step([-1], [3], [[0]], num_cache_blocks=4)
    with pytest.raises(ValueError, match="context_lens"):
        tripath.plan_step([1, 1], [3], [[0], [1]], num_cache_blocks=4)
    with pytest.raises(ValueError, match="block_size"):
        tripath.plan_step([1], [3], [[0]], num_cache_blocks=4, block_size=24)
    with pytest.raises(ValueError, match="query_lens"):
        tripath.plan_step([1.5], [3], [[0]], num_cache_blocks=4)
    with pytest.raises(ValueError, match="block_table"):
        tripath.plan_step([1, 1], [3, 3], [[0]], num_cache_blocks=4)


def test_plan_decode_segments():
    """Forced decode segments: one per slot and KV head; each request's pieces tile its keys in
    order, and the segments own consecutive pieces. Off: none."""
    rng = np.random.default_rng(3)
    n = 20
    query = np.ones(n, dtype=np.int32)
    context = rng.integers(100, 3000, n).astype(np.int32)
    table = np.arange(n * 200, dtype=np.int32).reshape(n, 200)
    plan = tripath.plan_step(query, context, table, n * 200, num_work_units=16, num_kv_heads=2,
                             decode_segments=2)
    assert plan.num_segments == 16
    cu = plan.decode_cu_pieces
    assert len(cu) == n + 1 and cu[-1] == len(plan.piece_request)
    for d in range(n):
        pos = 0
        for p in range(cu[d], cu[d + 1]):
            assert plan.piece_request[p] == d and plan.piece_kv_start[p] == pos
            pos += plan.piece_kv_len[p]
        assert pos == context[d] + 1
    seg = plan.segment_cu_pieces
    assert seg[0] == 0 and seg[-1] == len(plan.piece_request) and (np.diff(seg) >= 0).all()
    off = tripath.plan_step(query, context, table, n * 200, num_work_units=16, num_kv_heads=2,
                            decode_segments=0)
    assert off.num_segments == 0 and len(off.piece_request) == 0

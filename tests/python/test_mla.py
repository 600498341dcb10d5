"""MLA (absorbed decode, non-absorbed prefill/extend) against the independent NumPy model."""

import numpy as np
import pytest

import npref
import tripath

# (query_len, context_len), already in [decode | extend | prefill] order.
REQUESTS = [(1, 40), (1, 0), (1, 77), (9, 30), (5, 50), (12, 0)]
HEADS = 16


class MlaStep:
    def __init__(self, seed, dtype="f32", block_size=16, scale=1.0, requests=REQUESTS,
                 chunk_budget=32):
        rng = np.random.default_rng(seed)
        self.dtype, self.bs, self.scale = dtype, block_size, scale
        self.query = np.array([r[0] for r in requests], dtype=np.int32)
        self.context = np.array([r[1] for r in requests], dtype=np.int32)
        seq = self.query + self.context
        need = -(-seq // block_size)
        self.num_blocks = 3 * int(need.sum())
        perm = rng.permutation(self.num_blocks)
        self.table = np.zeros((len(requests), int(need.max())), dtype=np.int32)
        used = 0
        for r in range(len(requests)):
            self.table[r, : need[r]] = perm[used: used + need[r]]
            used += need[r]
        self.plan = tripath.plan_step(self.query, self.context, self.table, self.num_blocks,
                                      block_size=block_size, extend_chunk_budget=chunk_budget)
        assert self.plan.is_ordered
        self.config = tripath.MlaCacheConfig(num_blocks=self.num_blocks, block_size=block_size,
                                             dtype=dtype, scale=scale)
        self.latent = [rng.standard_normal((s, npref.ENTRY)).astype(np.float32) for s in seq]
        self.cache = np.full((self.num_blocks, block_size, npref.ENTRY), npref.POISON[dtype],
                             dtype=npref.STORAGE[dtype])
        flat = self.cache.reshape(-1, npref.ENTRY)
        for r in range(len(requests)):
            for pos in range(self.context[r]):
                slot = self.table[r, pos // block_size] * block_size + pos % block_size
                flat[slot] = npref.encode(self.latent[r][pos], dtype, scale)
        self.new_latent = np.concatenate(
            [self.latent[r][self.context[r]:] for r in range(len(requests))])
        self.kv_b_proj = (rng.standard_normal((npref.LATENT, HEADS * 256)) / 16).astype(
            np.float32)
        d0, d1, t0, t1 = self.plan.decode
        self.q_abs = [rng.standard_normal((self.query[r], HEADS, npref.ENTRY)).astype(np.float32)
                      for r in range(d0, d1)]
        self.q = [rng.standard_normal((self.query[r], HEADS, npref.QK)).astype(np.float32)
                  for r in range(d1, len(requests))]

    def cache_with_new_tokens(self):
        cache = self.cache.copy()
        tripath.write_mla_cache(self.config, cache, self.new_latent, self.plan.slot_mapping)
        return cache

    def stored(self, r):
        return npref.decode(npref.encode(self.latent[r], self.dtype, self.scale), self.dtype,
                            self.scale)

    def expected_absorbed(self, scale):
        d0, d1 = self.plan.decode[:2]
        res = [npref.mla_absorbed(self.q_abs[i], self.stored(r), self.context[r], scale)
               for i, r in enumerate(range(d0, d1))]
        return np.concatenate([o for o, _ in res]), np.concatenate([l for _, l in res])

    def expected_non_absorbed(self, scale):
        d1 = self.plan.decode[1]
        res = [npref.mla_non_absorbed(self.q[i], self.stored(r), self.kv_b_proj, self.context[r],
                                      scale)
               for i, r in enumerate(range(d1, len(self.query)))]
        return np.concatenate([o for o, _ in res]), np.concatenate([l for _, l in res])


def assert_close(got, want, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "fp8_e4m3"])
def test_write_mla_cache(dtype):
    scale = 0.5 if dtype == "fp8_e4m3" else 1.0
    s = MlaStep(seed=1, dtype=dtype, scale=scale)
    cache = s.cache_with_new_tokens()
    want = s.cache.copy()
    flat = want.reshape(-1, npref.ENTRY)
    for slot, row in zip(s.plan.slot_mapping, s.new_latent):
        flat[slot] = npref.encode(row, dtype, scale)
    assert np.array_equal(cache.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_mla_decode_and_prefill(dtype):
    s = MlaStep(seed=2, dtype=dtype)
    cache = s.cache_with_new_tokens()
    scale = 1.0 / np.sqrt(192)
    d_tokens = s.plan.decode[3]
    out_abs = np.full((d_tokens, HEADS, 512), np.nan, np.float32)
    lse_abs = np.full((d_tokens, HEADS), np.nan, np.float32)
    tripath.mla_decode(s.plan, s.config, cache, np.concatenate(s.q_abs), out_abs, lse_abs)
    want_o, want_l = s.expected_absorbed(scale)
    assert_close(out_abs, want_o, 1e-4, 2e-5)
    assert_close(lse_abs, want_l, 1e-5, 2e-5)

    n = s.plan.num_tokens - d_tokens
    want_o, want_l = s.expected_non_absorbed(scale)
    for chunk_tokens in (0, 16):
        out = np.full((n, HEADS, 128), np.nan, np.float32)
        lse = np.full((n, HEADS), np.nan, np.float32)
        tripath.mla_prefill(s.plan, s.config, cache, np.concatenate(s.q), s.kv_b_proj, out, lse,
                            chunk_tokens=chunk_tokens)
        assert_close(out, want_o, 1e-4, 2e-5)
        assert_close(lse, want_l, 1e-5, 2e-5)


def test_run_mla_reference_backend():
    s = MlaStep(seed=3, dtype="bf16", chunk_budget=20)
    scale = 0.1
    cache = s.cache.copy()
    d_tokens = s.plan.decode[3]
    n = s.plan.num_tokens - d_tokens
    out_abs = np.full((d_tokens, HEADS, 512), np.nan, np.float32)
    lse_abs = np.full((d_tokens, HEADS), np.nan, np.float32)
    out = np.full((n, HEADS, 128), np.nan, np.float32)
    lse = np.full((n, HEADS), np.nan, np.float32)
    tripath.run_mla("reference", s.plan, s.config, cache, latent=s.new_latent,
                    q_absorbed=np.concatenate(s.q_abs), out_absorbed=out_abs,
                    lse_absorbed=lse_abs, q=np.concatenate(s.q), kv_b_proj=s.kv_b_proj, out=out,
                    lse=lse, scale=scale)
    assert np.array_equal(cache.view(np.uint8), s.cache_with_new_tokens().view(np.uint8))
    want_o, want_l = s.expected_absorbed(scale)
    assert_close(out_abs, want_o, 1e-4, 2e-5)
    assert_close(lse_abs, want_l, 1e-5, 2e-5)
    want_o, want_l = s.expected_non_absorbed(scale)
    assert_close(out, want_o, 1e-4, 2e-5)
    assert_close(lse, want_l, 1e-5, 2e-5)


def test_run_mla_errors():
    s = MlaStep(seed=4, dtype="f16")
    cache = s.cache.copy()
    d_tokens = s.plan.decode[3]
    q_abs = np.concatenate(s.q_abs)
    with pytest.raises(ValueError, match="num_heads"):
        tripath.run_mla("reference", s.plan, s.config, cache)
    with pytest.raises(ValueError, match="out_absorbed"):
        tripath.run_mla("reference", s.plan, s.config, cache, q_absorbed=q_abs,
                        out_absorbed=np.zeros((d_tokens, HEADS, 576), np.float32))
    with pytest.raises(ValueError, match="latent_cache"):
        tripath.run_mla("reference", s.plan, s.config, cache.view(np.uint16).astype(np.uint8),
                        q_absorbed=q_abs)
    # An unordered plan is refused by the MLA reference backend.
    order = [3, 0, 1, 2, 4, 5]
    unordered = tripath.plan_step(s.query[order], s.context[order], s.table[order], s.num_blocks)
    assert not unordered.is_ordered
    with pytest.raises(ValueError, match="ordered"):
        tripath.run_mla("reference", unordered, s.config, cache, q_absorbed=q_abs)

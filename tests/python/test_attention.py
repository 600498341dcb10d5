"""Paged cache writes and MHA/GQA attention against the independent NumPy model (npref).

Every step mixes decode, extend and prefill requests (plus an empty one), in a shuffled input
order, over block tables drawn at random from a pool three times larger than needed whose unused
slots hold NaN, so a read of the wrong slot poisons the result."""

import numpy as np
import pytest

import npref
import tripath

# (query_len, context_len) in input order: decode, prefill, extend, empty, decode at context 0,
# extend with a long context, decode with an odd context, prefill of one block exactly.
REQUESTS = [(1, 37), (19, 0), (7, 50), (0, 20), (1, 0), (23, 130), (1, 113), (16, 0)]


class Step:
    """One step: dense float64 K/V for every request, a paged cache holding the context (written
    here by NumPy), and the new tokens' q/k/v in the plan's layout: the caller's request order
    (unordered here). ordered() / to_ordered() give the same step laid out [decode | extend |
    prefill]."""

    def __init__(self, seed, hq=4, hkv=2, head_dim=64, block_size=16, dtype="f32",
                 layout="nhd", k_scale=1.0, v_scale=1.0, requests=REQUESTS, q_dtype=np.float32,
                 plan_kwargs=None):
        rng = np.random.default_rng(seed)
        self.hq, self.hkv, self.d, self.bs = hq, hkv, head_dim, block_size
        self.dtype, self.layout, self.k_scale, self.v_scale = dtype, layout, k_scale, v_scale
        self.query = np.array([r[0] for r in requests], dtype=np.int32)
        self.context = np.array([r[1] for r in requests], dtype=np.int32)
        seq = self.query + self.context
        need = -(-seq // block_size)
        self.num_blocks = 3 * int(need.sum())
        perm = rng.permutation(self.num_blocks)
        self.table = np.zeros((len(requests), int(need.max()) + 1), dtype=np.int32)
        used = 0
        for r in range(len(requests)):
            self.table[r, : need[r]] = perm[used: used + need[r]]
            used += need[r]
        self.config = tripath.KvCacheConfig(
            num_blocks=self.num_blocks, block_size=block_size, num_kv_heads=hkv,
            head_dim=head_dim, dtype=dtype, layout=layout, k_scale=k_scale, v_scale=v_scale)
        kwargs = dict(extend_chunk_budget=48, num_work_units=16, num_kv_heads=hkv,
                      min_split_tokens=16)
        kwargs.update(plan_kwargs or {})
        self.plan_kwargs = kwargs
        self.plan = tripath.plan_step(self.query, self.context, self.table, self.num_blocks,
                                      block_size=block_size, **kwargs)

        shape = npref.storage_shape(layout, self.num_blocks, block_size, hkv, head_dim)
        store = npref.STORAGE[dtype]
        self.k_cache = np.full(shape, npref.POISON[dtype], dtype=store)
        self.v_cache = np.full(shape, npref.POISON[dtype], dtype=store)
        self.keys = [rng.standard_normal((s, hkv, head_dim)) for s in seq]
        self.values = [rng.standard_normal((s, hkv, head_dim)) for s in seq]
        for r in range(len(requests)):
            self._store(self.k_cache, r, range(self.context[r]), self.keys[r], k_scale)
            self._store(self.v_cache, r, range(self.context[r]), self.values[r], v_scale)

        # New tokens in the plan's layout (input order).
        self.q_rows = [rng.standard_normal((q, hq, head_dim)) for q in self.query]
        n = len(requests)
        self.q = np.concatenate([self.q_rows[r] for r in range(n)]).astype(q_dtype)
        self.k = np.concatenate([self.keys[r][self.context[r]:] for r in range(n)]).astype(
            np.float32)
        self.v = np.concatenate([self.values[r][self.context[r]:] for r in range(n)]).astype(
            np.float32)

    def _store(self, cache, r, positions, rows, scale):
        positions = list(positions)
        npref.store_rows(cache.reshape(-1), self.layout, self.dtype, self.bs, self.hkv, self.d,
                         self.table[r], positions, rows[positions], scale)

    def expected_caches(self):
        """The caches after the new tokens are written: the NumPy writer for every token."""
        k_cache, v_cache = self.k_cache.copy(), self.v_cache.copy()
        for r in range(len(self.query)):
            new = range(self.context[r], self.context[r] + self.query[r])
            npref.store_rows(k_cache.reshape(-1), self.layout, self.dtype, self.bs, self.hkv,
                             self.d, self.table[r], list(new),
                             self.keys[r][list(new)].astype(np.float32), self.k_scale)
            npref.store_rows(v_cache.reshape(-1), self.layout, self.dtype, self.bs, self.hkv,
                             self.d, self.table[r], list(new),
                             self.values[r][list(new)].astype(np.float32), self.v_scale)
        return k_cache, v_cache

    def dequant(self, x, scale):
        """What the cache holds for float rows x: the round trip through its dtype."""
        return npref.decode(npref.encode(x, self.dtype, scale), self.dtype, scale)

    def expected(self, scale=None, window_left=-1, softcap=0.0, sinks=None):
        """out [num_tokens, hq, d] and lse [num_tokens, hq] in the plan's layout."""
        scale = 1.0 / np.sqrt(self.d) if scale is None else scale
        outs, lses = [], []
        for r in range(len(self.query)):
            # New keys are rounded to float32 (the k/v we pass) and then to the cache dtype.
            k = self.dequant(self.keys[r].astype(np.float32), self.k_scale)
            v = self.dequant(self.values[r].astype(np.float32), self.v_scale)
            q = self.q_rows[r].astype(self.q.dtype).astype(np.float64)
            o, l = npref.attention(q, k, v, self.context[r], scale, window_left, softcap, sinks)
            outs.append(o)
            lses.append(l)
        return np.concatenate(outs), np.concatenate(lses)

    def outputs(self, dtype=np.float32):
        n = self.plan.num_tokens
        return np.full((n, self.hq, self.d), np.nan, dtype=dtype), np.full((n, self.hq), np.nan,
                                                                           dtype=np.float32)

    def to_ordered(self, rows):
        """Per-token rows of the plan's layout in the ordered plan's layout."""
        return tripath.reorder_token_rows(self.plan, np.ascontiguousarray(rows))

    def ordered(self):
        """The same step planned from its [decode | extend | prefill] layout: is_ordered."""
        q, c, t = tripath.ordered_inputs(self.plan, self.query, self.context, self.table)
        return tripath.plan_step(q, c, t, self.num_blocks, block_size=self.bs, **self.plan_kwargs)


def assert_close(got, want, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def same_bits(a, b):
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("layout", ["nhd", "hnd", "tiled"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "fp8_e4m3"])
def test_reference_backend_matches_numpy(dtype, layout):
    scales = (0.5, 2.0) if dtype == "fp8_e4m3" else (1.0, 1.0)
    s = Step(seed=len(dtype) * 10 + len(layout), dtype=dtype, layout=layout, k_scale=scales[0],
             v_scale=scales[1])
    assert not s.plan.is_ordered
    want_k, want_v = s.expected_caches()
    want_out, want_lse = s.expected()

    # Unordered plan: the reference runs the direct definition.
    k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
    out, lse = s.outputs()
    tripath.run_attention("reference", s.plan, s.config, s.q, s.k, s.v, k_cache, v_cache, out,
                          lse)
    assert same_bits(k_cache, want_k) and same_bits(v_cache, want_v)
    assert_close(out, want_out, 1e-4, 2e-5)
    assert_close(lse, want_lse, 1e-5, 2e-5)

    # Ordered plan and layout: the three-path composition, cache already written; it agrees
    # with the unordered run's rows moved to the ordered layout.
    out2, lse2 = s.outputs()
    tripath.run_attention("reference", s.ordered(), s.config, s.to_ordered(s.q), None, None,
                          k_cache, v_cache, out2, lse2)
    assert_close(out2, s.to_ordered(want_out), 1e-4, 2e-5)
    assert_close(lse2, s.to_ordered(want_lse), 1e-5, 2e-5)
    assert_close(out2, s.to_ordered(out), 1e-4, 2e-5)
    assert_close(lse2, s.to_ordered(lse), 1e-5, 2e-5)


def test_write_kv_cache_skips_padding_slots():
    s = Step(seed=3, dtype="bf16", layout="tiled")
    want_k, want_v = s.expected_caches()
    slots = s.plan.slot_mapping.copy()
    k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
    tripath.write_kv_cache(s.config, k_cache, v_cache, s.k, s.v, slots)
    assert same_bits(k_cache, want_k) and same_bits(v_cache, want_v)
    # Slot -1 writes nothing.
    k2, v2 = s.k_cache.copy(), s.v_cache.copy()
    tripath.write_kv_cache(s.config, k2, v2, s.k, s.v, np.full_like(slots, -1))
    assert same_bits(k2, s.k_cache) and same_bits(v2, s.v_cache)
    with pytest.raises(ValueError, match=r"slot_mapping\[0\]"):
        bad = slots.copy()
        bad[0] = s.num_blocks * s.bs
        tripath.write_kv_cache(s.config, k2, v2, s.k, s.v, bad)


def e4m3_midpoint_inputs(scale):
    """float32 x whose x / scale sits at, or a few ulps around, every positive e4m3 rounding
    midpoint: where x * (1 / scale) and x / scale can round to different codes."""
    mids = (npref._E4M3_POSITIVE[:-1] + npref._E4M3_POSITIVE[1:]) / 2
    xs = []
    for m in mids:
        x = np.float32(m * np.float32(scale))
        for k in range(-4, 5):
            xs.append(x)
            x = np.nextafter(x, np.float32(np.inf if k >= 0 else 0), dtype=np.float32)
    xs = np.array(xs, dtype=np.float32)
    return np.concatenate([xs, -xs])


@pytest.mark.parametrize("scale", [0.1, 0.3, 3.7])
def test_fp8_writers_store_x_divided_by_scale(scale):
    """Both fp8 writers store e4m3(x / scale), a true float32 division."""
    xs = e4m3_midpoint_inputs(scale)
    n, d = len(xs), 64
    recip = npref.e4m3_encode(xs * (np.float32(1) / np.float32(scale)))
    want = npref.encode(xs, "fp8_e4m3", scale)
    assert (recip != want).any()  # the inputs tell the two roundings apart

    config = tripath.KvCacheConfig(num_blocks=n, block_size=1, num_kv_heads=1, head_dim=d,
                                   dtype="fp8_e4m3", layout="nhd", k_scale=scale,
                                   v_scale=scale / 2)
    k_cache = np.full(config.shape(), 0x7F, np.uint8)
    v_cache = k_cache.copy()
    k = np.repeat(xs[:, None, None], d, axis=2)
    v = np.ascontiguousarray(k[::-1])
    tripath.write_kv_cache(config, k_cache, v_cache, k, v, np.arange(n, dtype=np.int64))
    np.testing.assert_array_equal(k_cache.reshape(n, d), np.repeat(want[:, None], d, axis=1))
    np.testing.assert_array_equal(v_cache.reshape(n, d),
                                  npref.encode(v.reshape(n, d), "fp8_e4m3", scale / 2))

    mla = tripath.MlaCacheConfig(num_blocks=n, block_size=1, dtype="fp8_e4m3", scale=scale)
    latent_cache = np.full((n, 1, npref.ENTRY), 0x7F, np.uint8)
    latent = np.repeat(xs[:, None], npref.ENTRY, axis=1)
    tripath.write_mla_cache(mla, latent_cache, latent, np.arange(n, dtype=np.int64))
    np.testing.assert_array_equal(latent_cache.reshape(n, npref.ENTRY),
                                  np.repeat(want[:, None], npref.ENTRY, axis=1))


@pytest.mark.parametrize("feature", ["gqa8", "mqa", "window", "softcap", "sinks", "scale",
                                     "all"])
def test_attention_features(feature):
    hq, hkv, kw = 8, 2, {}
    if feature == "gqa8":
        hq, hkv = 16, 2
    elif feature == "mqa":
        hq, hkv = 6, 1
    s = Step(seed=11, hq=hq, hkv=hkv, head_dim=64, block_size=16, dtype="f32", layout="hnd")
    rng = np.random.default_rng(5)
    sinks = rng.standard_normal(hq).astype(np.float32) + 1.0
    if feature in ("window", "all"):
        kw["window_left"] = 20
    if feature in ("softcap", "all"):
        kw["softcap"] = 1.5
    if feature in ("scale", "all"):
        kw["scale"] = 0.3
    use_sinks = feature in ("sinks", "all")
    want_out, want_lse = s.expected(scale=kw.get("scale"), window_left=kw.get("window_left", -1),
                                    softcap=kw.get("softcap", 0.0),
                                    sinks=sinks if use_sinks else None)
    same = lambda x: x  # noqa: E731
    for plan, lay in ((s.plan, same), (s.ordered(), s.to_ordered)):
        k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
        out, lse = s.outputs()
        tripath.run_attention("reference", plan, s.config, lay(s.q), lay(s.k), lay(s.v), k_cache,
                              v_cache, out, lse, sinks if use_sinks else None, **kw)
        assert_close(out, lay(want_out), 1e-4, 2e-5)
        assert_close(lse, lay(want_lse), 1e-5, 2e-5)


def test_half_precision_queries_and_outputs():
    s = Step(seed=21, hq=4, hkv=4, head_dim=128, dtype="f16", layout="nhd", q_dtype=np.float16)
    want_out, want_lse = s.expected()
    k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
    out, lse = s.outputs(np.float16)
    backend = tripath.create_attention_backend("reference")
    tripath.run_attention(backend, s.plan, s.config, s.q, s.k.astype(np.float16),
                          s.v.astype(np.float16), k_cache, v_cache, out, lse)
    assert_close(out, want_out, 2e-3, 2e-3)
    assert_close(lse, want_lse, 1e-4, 1e-4)


def test_attention_direct_and_three_path_agree():
    s = Step(seed=7, dtype="f16", layout="tiled", block_size=1, head_dim=96,
             plan_kwargs=dict(extend_chunk_budget=10, min_split_tokens=8))
    k_cache, v_cache = s.expected_caches()  # the cache already holds the step's tokens
    want_out, want_lse = s.expected()
    plan = s.ordered()
    assert plan.num_chunks > 1 and plan.num_splits > plan.decode[1]
    out1, lse1 = s.outputs()
    out2, lse2 = s.outputs()
    tripath.attention_direct(s.plan, s.config, s.q, k_cache, v_cache, out1, lse1)
    tripath.attention_three_path(plan, s.config, s.to_ordered(s.q), k_cache, v_cache, out2, lse2)
    assert_close(out1, want_out, 1e-4, 2e-5)
    assert_close(out2, s.to_ordered(want_out), 1e-4, 2e-5)
    assert_close(lse1, want_lse, 1e-5, 2e-5)
    assert_close(lse2, s.to_ordered(lse1), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="ordered"):
        tripath.attention_three_path(s.plan, s.config, s.q, k_cache, v_cache, out2)


@pytest.mark.parametrize("dtype", ["f32", "fp8_e4m3"])
def test_unordered_run_equals_ordered_run_reordered(dtype):
    """The unordered step through the reference backend (caller-order rows: request r at
    cu_seqlens_q[r]) equals the same step ordered, its inputs and outputs moved by
    reorder_token_rows: the same cache bits, and the direct definition gives the same bits."""
    scales = (0.1, 0.3) if dtype == "fp8_e4m3" else (1.0, 1.0)
    s = Step(seed=17, dtype=dtype, layout="tiled", k_scale=scales[0], v_scale=scales[1])
    assert not s.plan.is_ordered
    cu = s.plan.cu_seqlens_q
    for r in range(len(s.query)):
        np.testing.assert_array_equal(s.q[cu[r]: cu[r + 1]], s.q_rows[r].astype(np.float32))
    want_k, want_v = s.expected_caches()
    ordered = s.ordered()

    k1, v1 = s.k_cache.copy(), s.v_cache.copy()
    out1, lse1 = s.outputs()
    tripath.run_attention("reference", s.plan, s.config, s.q, s.k, s.v, k1, v1, out1, lse1)
    k2, v2 = s.k_cache.copy(), s.v_cache.copy()
    out2, lse2 = s.outputs()
    tripath.run_attention("reference", ordered, s.config, s.to_ordered(s.q), s.to_ordered(s.k),
                          s.to_ordered(s.v), k2, v2, out2, lse2)
    assert same_bits(k1, want_k) and same_bits(v1, want_v)
    assert same_bits(k2, want_k) and same_bits(v2, want_v)
    assert_close(out2, s.to_ordered(out1), 1e-4, 2e-5)
    assert_close(lse2, s.to_ordered(lse1), 1e-5, 2e-5)

    out3, lse3 = s.outputs()
    tripath.attention_direct(ordered, s.config, s.to_ordered(s.q), k1, v1, out3, lse3)
    assert same_bits(out3, s.to_ordered(out1)) and same_bits(lse3, s.to_ordered(lse1))


def test_readonly_inputs_are_accepted():
    s = Step(seed=2, dtype="f32")
    for a in (s.q, s.k, s.v):
        a.setflags(write=False)
    k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
    out, _ = s.outputs()
    tripath.run_attention("reference", s.plan, s.config, s.q, s.k, s.v, k_cache, v_cache, out)
    assert_close(out, s.expected()[0], 1e-4, 2e-5)


def test_attention_argument_errors():
    s = Step(seed=4, dtype="bf16")
    k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
    out, lse = s.outputs()

    def run(**kw):
        args = dict(backend="reference", plan=s.plan, cache_config=s.config, q=s.q, k=s.k, v=s.v,
                    k_cache=k_cache, v_cache=v_cache, out=out)
        args.update(kw)
        tripath.run_attention(**args)

    bad = tripath.KvCacheConfig(num_blocks=s.num_blocks, block_size=16, num_kv_heads=2,
                                head_dim=48, dtype="bf16")
    q48 = np.zeros((s.plan.num_tokens, 4, 48), np.float32)
    with pytest.raises(ValueError, match="head_dim"):
        run(cache_config=bad, q=q48, out=q48.copy(), k=None, v=None,
            k_cache=np.zeros(bad.shape(), np.uint16), v_cache=np.zeros(bad.shape(), np.uint16))
    with pytest.raises(ValueError, match="head_dim"):
        run(params=tripath.AttentionParams(num_q_heads=4, num_kv_heads=2, head_dim=80))
    with pytest.raises(ValueError, match="k_cache"):
        run(k_cache=k_cache.view(np.float16))  # f16 floats are not bf16
    with pytest.raises(ValueError, match="strided"):
        run(q=np.asfortranarray(s.q))
    with pytest.raises(ValueError, match="'out'"):
        run(out=out[:-1])
    with pytest.raises(ValueError, match="sinks"):
        run(sinks=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="'k'"):
        run(k=None)
    with pytest.raises(ValueError, match="valid names"):
        run(backend="fastest")
    with pytest.raises(TypeError):
        run(out=[0.0, 1.0])  # not an array
    readonly = out.copy()
    readonly.setflags(write=False)
    with pytest.raises(TypeError):
        run(out=readonly)


def test_merge_states():
    rng = np.random.default_rng(0)
    parts, rows, dim = 4, 9, 16
    outs = rng.standard_normal((parts, rows, dim)).astype(np.float32)
    lses = (rng.standard_normal((parts, rows)) * 3).astype(np.float32)
    lses[1, 2] = -np.inf
    lses[:, 5] = -np.inf  # a row whose parts are all empty
    lses[[0, 1, 3], 7] = -np.inf
    want_out, want_lse = npref.merge(outs, lses)
    out, lse = tripath.merge_states(outs, lses)
    assert_close(out, want_out, 1e-5, 1e-6)
    np.testing.assert_array_equal(out[5], 0.0)
    assert lse[5] == -np.inf
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6)

    # merge(attn(A), attn(B)) == attn(A u B) for a split of the keys.
    q = rng.standard_normal((3, 2, 64))
    k = rng.standard_normal((40, 2, 64))
    v = rng.standard_normal((40, 2, 64))
    a = npref.attention(q, k[:15], v[:15], 100, 0.125)  # context_len 100: every key is visible
    b = npref.attention(q, k[15:], v[15:], 100, 0.125)
    whole = npref.attention(q, k, v, 100, 0.125)
    outs = np.stack([a[0].reshape(-1, 64), b[0].reshape(-1, 64)]).astype(np.float32)
    lses = np.stack([a[1].reshape(-1), b[1].reshape(-1)]).astype(np.float32)
    out = np.empty((6, 64), np.float32)
    lse = np.empty(6, np.float32)
    tripath.merge_states(outs, lses, out, lse)
    assert_close(out, whole[0].reshape(-1, 64), 1e-5, 1e-6)
    assert_close(lse, whole[1].reshape(-1), 1e-6, 1e-6)


def test_concurrent_calls_from_threads():
    """run releases the GIL; concurrent calls on separate buffers give the serial result."""
    import threading

    s = Step(seed=13, dtype="f16", layout="hnd")
    want = s.expected()[0]
    results = [None] * 4

    def work(i):
        k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
        out, _ = s.outputs()
        tripath.run_attention("reference", s.plan, s.config, s.q, s.k, s.v, k_cache, v_cache,
                              out)
        results[i] = out

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in results:
        assert_close(out, want, 1e-4, 2e-5)
        np.testing.assert_array_equal(out, results[0])  # bitwise repeatable


def test_prepared_backend_object_across_layers():
    """An engine's loop: one backend object, prepared once per step, run per layer."""
    s = Step(seed=17, dtype="f32", layout="nhd")
    backend = tripath.create_attention_backend("reference")
    plan = s.ordered()
    params = tripath.AttentionParams(num_q_heads=s.hq, num_kv_heads=s.hkv, head_dim=s.d)
    backend.check_supported(params, s.config)
    backend.prepare(plan, params)
    want = s.to_ordered(s.expected()[0])
    k_cache, v_cache = s.k_cache.copy(), s.v_cache.copy()
    for layer in range(2):
        out, _ = s.outputs()
        tripath.run_attention(backend, plan, s.config, s.to_ordered(s.q), s.to_ordered(s.k),
                              s.to_ordered(s.v), k_cache, v_cache, out, params=params,
                              prepare=False, write_cache=layer == 0)
        assert_close(out, want, 1e-4, 2e-5)
    # Slot mappings given as a list are converted; the merge takes lse=None.
    k2, v2 = s.k_cache.copy(), s.v_cache.copy()
    tripath.write_kv_cache(s.config, k2, v2, s.k, s.v, s.plan.slot_mapping.tolist())
    assert same_bits(k2, k_cache) and same_bits(v2, v_cache)
    outs = np.ones((2, 3, 8), np.float32)
    out, lse = tripath.merge_states(outs, np.zeros((2, 3), np.float32),
                                    np.empty((3, 8), np.float32))
    assert lse is None and np.allclose(out, 1.0)

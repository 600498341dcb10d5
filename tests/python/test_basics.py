"""Module surface: build info, backends, configs, allocator, error translation, array conversion
and number formats."""

import numpy as np
import pytest

import npref
import tripath
from tripath import _tripath


def test_version_and_build_info():
    assert tripath.__version__ == tripath.version() == "0.1.0"
    info = tripath.build_info()
    assert info["version"] == "0.1.0"
    assert info["num_threads"] >= 1
    assert isinstance(info["with_cuda"], bool)


def test_list_and_resolve_backends():
    backends = tripath.list_backends()
    names = {(b["name"], b["is_mla"]) for b in backends}
    for expected in [("three_path", False), ("unified", False), ("two_path", False),
                     ("reference", False), ("mla", True), ("mla_baseline", True),
                     ("reference", True)]:
        assert expected in names
    for b in backends:
        assert b["available"] == (b["reason"] == "")
    assert tripath.resolve_backend("reference") == "reference"
    assert tripath.resolve_backend("auto") in {b["name"] for b in backends if b["available"]}
    assert tripath.resolve_backend("auto", mla=True) in {
        b["name"] for b in backends if b["available"] and b["is_mla"]}
    with pytest.raises(ValueError, match="valid names: auto, three_path") as e:
        tripath.resolve_backend("fastest")
    assert "'fastest'" in str(e.value)
    assert isinstance(e.value, tripath.Error)
    with pytest.raises(tripath.Error, match="mla_baseline"):
        tripath.resolve_backend("nope", mla=True)
    backend = tripath.create_attention_backend("reference")
    assert backend.name == "reference" and not backend.needs_ordered_batch()
    assert tripath.create_mla_backend("auto").name == tripath.resolve_backend("auto", True)


def test_backend_from_env(monkeypatch):
    monkeypatch.setenv("TRIPATH_BACKEND", "reference")
    assert tripath.backend_from_env() == "reference"
    monkeypatch.setenv("TRIPATH_BACKEND", "bogus")
    with pytest.raises(ValueError, match="TRIPATH_BACKEND"):
        tripath.backend_from_env()
    monkeypatch.delenv("TRIPATH_BACKEND")
    assert tripath.backend_from_env() == tripath.resolve_backend("auto")


def test_unavailable_backend_explains_why():
    unavailable = [b for b in tripath.list_backends() if not b["available"]]
    if not unavailable:
        pytest.skip("every backend is available in this build")
    b = unavailable[0]
    with pytest.raises(ValueError, match="not available") as e:
        tripath.resolve_backend(b["name"], b["is_mla"])
    assert b["reason"] in str(e.value)


def test_kv_cache_config():
    c = tripath.KvCacheConfig(num_blocks=10, block_size=16, num_kv_heads=2, head_dim=128,
                              dtype="fp8_e4m3", layout="hnd", k_scale=0.5)
    assert c.dtype == tripath.DType.fp8_e4m3 and c.layout == tripath.KvLayout.hnd
    assert c.shape() == tripath.kv_cache_shape(c) == (10, 2, 16, 128)
    assert c.elements_per_tensor() == 10 * 2 * 16 * 128 == c.bytes_per_tensor()
    c.validate()
    c.layout = tripath.KvLayout.nhd
    c.dtype = "bf16"
    assert c.shape() == (10, 16, 2, 128) and c.bytes_per_tensor() == 2 * c.elements_per_tensor()
    c.dtype = "float16"  # framework spellings are accepted
    assert c.dtype == tripath.DType.f16
    assert "layout='nhd'" in repr(c)
    with pytest.raises(ValueError, match="layout"):
        tripath.KvCacheConfig(layout="ndh")
    with pytest.raises(ValueError, match="dtype"):
        tripath.KvCacheConfig(dtype="int4")
    bad = tripath.KvCacheConfig(num_blocks=4, num_kv_heads=1, head_dim=48)
    with pytest.raises(ValueError, match="head_dim") as e:
        bad.validate()
    assert "48" in str(e.value) and "128" in str(e.value)
    with pytest.raises(ValueError, match="block_size"):
        tripath.KvCacheConfig(num_blocks=4, block_size=12, num_kv_heads=1, head_dim=64).validate()


def test_mla_cache_config():
    c = tripath.MlaCacheConfig(num_blocks=8, block_size=64, dtype="fp8_e4m3", scale=0.25)
    assert c.shape() == (8, 64, tripath.MLA_ENTRY_DIM) and c.elements() == 8 * 64 * 576
    c.validate()
    assert tripath.MLA_LATENT_DIM + tripath.MLA_ROPE_DIM == tripath.MLA_ENTRY_DIM
    assert tripath.MLA_QK_DIM == 192 and tripath.MLA_V_DIM == 128


def test_cache_offsets_match_independent_layouts():
    for layout in ["nhd", "hnd", "tiled"]:
        for dtype, head_dim in [("f32", 64), ("f16", 80), ("bf16", 96), ("fp8_e4m3", 128),
                                ("f16", 256)]:
            c = tripath.KvCacheConfig(num_blocks=3, block_size=8, num_kv_heads=2,
                                      head_dim=head_dim, dtype=dtype, layout=layout)
            seen = set()
            for block in range(3):
                for slot in range(8):
                    for head in range(2):
                        want = npref.flat_index(layout, npref.ITEMSIZE[dtype], 8, 2, head_dim,
                                                block, slot, head)
                        got = [tripath.kv_cache_offset(c, block, slot, head, d)
                               for d in range(head_dim)]
                        assert got == want.tolist(), (layout, dtype, block, slot, head)
                        seen.update(got)
            assert seen == set(range(c.elements_per_tensor()))  # a bijection


def test_block_allocator():
    a = tripath.BlockAllocator(8)
    assert a.num_blocks == 8 and a.num_free() == 8
    x = a.allocate(3)
    assert len(set(x)) == 3 and a.num_free() == 5
    assert all(a.ref_count(b) == 1 for b in x)
    y = a.fork(x[:2])
    assert y == x[:2] and a.ref_count(x[0]) == 2
    a.free(x)
    assert a.num_free() == 6 and a.ref_count(x[0]) == 1 and a.ref_count(x[2]) == 0
    with pytest.raises(tripath.OutOfBlocksError, match="7") as e:
        a.allocate(7)
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, tripath.Error)
    assert a.num_free() == 6  # unchanged
    assert a.try_allocate(7) is None and a.num_free() == 6
    z = a.try_allocate(6)
    assert len(z) == 6 and a.num_free() == 0
    a.free(z)
    with pytest.raises(ValueError):
        a.free([z[0]])  # no longer allocated
    assert a.num_free() == 6
    assert tripath.BlockAllocator.blocks_for_tokens(33, 16) == 3


def test_params_error_names_head_dim():
    cache = tripath.KvCacheConfig(num_blocks=4, num_kv_heads=2, head_dim=64, dtype="f32")
    p = tripath.AttentionParams(num_q_heads=4, num_kv_heads=2, head_dim=48)
    with pytest.raises(ValueError, match="head_dim") as e:
        p.validate(cache)
    assert "48" in str(e.value)
    p.head_dim = 64
    p.validate(cache)
    assert p.effective_scale() == pytest.approx(1 / 8)
    p.num_q_heads = 3
    with pytest.raises(ValueError, match="num_q_heads"):
        p.validate(cache)


def test_tensor_conversion():
    x = np.zeros((4, 6, 8), dtype=np.float32)
    info = _tripath.tensor_info(x)
    assert info["dtype"] == "f32" and info["device"] == "cpu"
    assert info["shape"] == (4, 6, 8) and info["strides"] == (48, 8, 1) and info["contiguous"]
    assert info["data_ptr"] == x.ctypes.data
    t = x.transpose(1, 0, 2)[:, 1:3]
    info = _tripath.tensor_info(t)
    assert info["shape"] == (6, 2, 8) and info["strides"] == (8, 48, 1) and not info["contiguous"]
    assert info["data_ptr"] == t.ctypes.data
    assert _tripath.tensor_info(x.astype(np.float16))["dtype"] == "f16"
    assert _tripath.tensor_info(x.astype(np.uint8))["dtype"] == "fp8_e4m3"
    ro = x.copy()
    ro.setflags(write=False)
    assert _tripath.tensor_info(ro)["shape"] == (4, 6, 8)
    assert _tripath.tensor_info(np.zeros(3, np.int64))["dtype"] == "i64"
    assert _tripath.tensor_info(np.zeros(3, np.int32))["dtype"] == "i32"
    with pytest.raises(ValueError, match="cache_config.dtype"):
        _tripath.tensor_info(np.zeros(3, np.int32), cache_dtype="i32")
    with pytest.raises(ValueError, match="dtype float64"):
        _tripath.tensor_info(x.astype(np.float64))
    with pytest.raises(ValueError, match="dtype uint16"):
        _tripath.tensor_info(x.astype(np.uint16))
    with pytest.raises(ValueError, match="0-d"):
        _tripath.tensor_info(np.array(1.0, dtype=np.float32))
    # Cache tensors: the config dtype, or integer storage of its size.
    assert _tripath.tensor_info(x.astype(np.uint16), cache_dtype="bf16")["dtype"] == "bf16"
    assert _tripath.tensor_info(x.astype(np.int8), cache_dtype="fp8_e4m3")["dtype"] == "fp8_e4m3"
    assert _tripath.tensor_info(x.astype(np.float16), cache_dtype="f16")["dtype"] == "f16"
    with pytest.raises(ValueError, match="bf16"):
        _tripath.tensor_info(x.astype(np.float16), cache_dtype="bf16")
    with pytest.raises(ValueError, match="fp8_e4m3"):
        _tripath.tensor_info(x.astype(np.uint16), cache_dtype="fp8_e4m3")


def test_encode_decode_match_independent_formats():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.standard_normal(4000) * 10.0 ** rng.integers(-4, 3, 4000),
        [0.0, -0.0, 448.0, 449.0, 464.0, 465.0, 1e6, -1e6, np.inf, -np.inf, 2.0 ** -9,
         2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -6, 1.0625, 1.1875, 240.0, 248.0],
    ]).astype(np.float32)
    bits = tripath.encode(x, "fp8_e4m3")
    assert bits.dtype == np.uint8
    np.testing.assert_array_equal(bits, npref.e4m3_encode(x))
    nan_bits = tripath.encode(np.array([np.nan], np.float32), "fp8_e4m3")
    assert np.isnan(npref.e4m3_decode(nan_bits)).all()
    all_codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(tripath.decode(all_codes, "fp8_e4m3"),
                                  npref.e4m3_decode(all_codes).astype(np.float32))
    bf = tripath.encode(x, "bf16")
    assert bf.dtype == np.uint16
    np.testing.assert_array_equal(bf, npref.bf16_encode(x))
    np.testing.assert_array_equal(tripath.decode(bf, "bf16"), npref.bf16_decode(bf))
    f16 = tripath.encode(x, "f16")
    with np.errstate(over="ignore"):
        x16 = x.astype(np.float16)  # overflows to inf like the library
    np.testing.assert_array_equal(f16, x16.view(np.uint16))
    np.testing.assert_array_equal(tripath.decode(f16.view(np.float16), "f16"),
                                  x16.astype(np.float32))
    with pytest.raises(ValueError, match="i64"):
        tripath.cache_numpy_dtype("int64")
    with pytest.raises(ValueError, match="floating"):
        tripath.encode(x, "i32")
    assert tripath.cache_numpy_dtype("bf16") == np.uint16
    assert tripath.cache_numpy_dtype(tripath.DType.fp8_e4m3) == np.uint8

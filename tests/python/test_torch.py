"""torch tensors through the same entry points (DLPack). Skipped without torch / a CUDA device."""

import numpy as np
import pytest

import npref
import tripath
from tripath import _tripath
from test_attention import Step, assert_close


def _torch_cuda():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    return torch


def test_torch_cpu_tensors():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    s = Step(seed=8, dtype="bf16", layout="nhd")
    k_cache = torch.from_numpy(s.k_cache.view(np.int16)).view(torch.bfloat16)
    v_cache = torch.from_numpy(s.v_cache.view(np.int16)).view(torch.bfloat16)
    out = torch.full((s.plan.num_tokens, s.hq, s.d), float("nan"), dtype=torch.bfloat16)
    tripath.run_attention("reference", s.plan, s.config, torch.from_numpy(s.q),
                          torch.from_numpy(s.k), torch.from_numpy(s.v), k_cache, v_cache, out)
    assert_close(out.float().numpy(), s.expected()[0], 1e-2, 1e-2)


def test_torch_cuda_roundtrip():
    torch = _torch_cuda()
    dev = torch.device("cuda", torch.cuda.current_device())

    # The DLPack conversion carries pointer, dtype, device and strides (in elements).
    x = torch.randn(5, 8, 64, device=dev, dtype=torch.bfloat16)
    info = _tripath.tensor_info(x)
    assert info["device"] == "cuda" and info["device_index"] == dev.index
    assert info["dtype"] == "bf16" and info["shape"] == (5, 8, 64)
    assert info["strides"] == (512, 64, 1) and info["data_ptr"] == x.data_ptr()
    t = x.transpose(0, 1)[:, 1:]
    info = _tripath.tensor_info(t)
    assert info["strides"] == tuple(t.stride()) and info["data_ptr"] == t.data_ptr()
    assert _tripath.tensor_info(x.half())["dtype"] == "f16"
    assert _tripath.tensor_info(x.float())["dtype"] == "f32"
    assert _tripath.tensor_info(torch.zeros(4, dtype=torch.uint8, device=dev))["dtype"] == \
        "fp8_e4m3"
    assert _tripath.tensor_info(x.view(torch.int16), cache_dtype="bf16")["dtype"] == "bf16"

    s = Step(seed=9, dtype="bf16", layout="nhd")
    # CUDA backends take bf16/f16 q/k/v/out: the expected values use the same bf16 queries.
    bf16 = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16)  # noqa: E731
    s.q_rows = [bf16(rows).double().numpy() for rows in s.q_rows]
    cuda = {name: bf16(a).to(dev) for name, a in dict(q=s.q, k=s.k, v=s.v).items()}
    cuda.update({name: torch.from_numpy(np.ascontiguousarray(a)).to(dev)
                 for name, a in dict(k_cache=s.k_cache.view(np.int16),
                                     v_cache=s.v_cache.view(np.int16)).items()})
    cuda["out"] = torch.full((s.plan.num_tokens, s.hq, s.d), float("nan"), device=dev,
                             dtype=torch.bfloat16)
    cuda["lse"] = torch.full((s.plan.num_tokens, s.hq), float("nan"), device=dev)

    # The CPU reference refuses CUDA memory with an error naming the device.
    with pytest.raises(ValueError, match="cuda"):
        tripath.run_attention("reference", s.plan, s.config, **cuda)

    # Every CUDA backend available here must match the NumPy model on the same step.
    want_out, want_lse = s.expected()
    gpu_backends = [b["name"] for b in tripath.list_backends()
                    if b["available"] and not b["is_mla"] and b["name"] != "reference"]
    for name in gpu_backends:
        backend = tripath.create_attention_backend(name)
        bufs = {k: v.clone() for k, v in cuda.items()}
        plan, want_o, want_l = s.plan, want_out, want_lse
        if backend.needs_ordered_batch():
            plan, want_o, want_l = s.ordered(), s.to_ordered(want_out), s.to_ordered(want_lse)
            for key in ("q", "k", "v"):
                rows = bufs[key].float().cpu().numpy()
                bufs[key] = torch.from_numpy(s.to_ordered(rows)).to(dev, torch.bfloat16)
        tripath.run_attention(backend, plan, s.config, **bufs)
        torch.cuda.synchronize()
        assert_close(bufs["out"].float().cpu().numpy(), want_o, 2e-2, 2e-2)
        assert_close(bufs["lse"].cpu().numpy(), want_l, 1e-3, 1e-3)


def test_torch_cuda_cache_write_and_merge():
    """The device-dispatching entry points: CUDA tensors go to the CUDA kernels (bit-exact with
    the NumPy writer; merge within float tolerance), or are refused by a CPU-only build."""
    torch = _torch_cuda()
    dev = torch.device("cuda", torch.cuda.current_device())
    s = Step(seed=10, dtype="bf16", layout="hnd")
    to_dev = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
    k_cache, v_cache = to_dev(s.k_cache.view(np.int16)), to_dev(s.v_cache.view(np.int16))
    slots = to_dev(s.plan.slot_mapping)
    rng = np.random.default_rng(0)
    outs = rng.standard_normal((3, 7, 64)).astype(np.float32)
    lses = rng.standard_normal((3, 7)).astype(np.float32)
    lses[:, 4] = -np.inf
    out, lse = torch.empty((7, 64), device=dev), torch.empty(7, device=dev)
    if not tripath.build_info()["with_cuda"]:
        with pytest.raises(ValueError, match="cuda"):
            tripath.write_kv_cache(s.config, k_cache, v_cache, to_dev(s.k), to_dev(s.v), slots)
        with pytest.raises(ValueError, match="cuda"):
            tripath.merge_states(to_dev(outs), to_dev(lses), out, lse)
        return
    # The CUDA writer takes bf16/f16 rows; f32 -> bf16 rounds as the NumPy writer does.
    tripath.write_kv_cache(s.config, k_cache, v_cache, to_dev(s.k).to(torch.bfloat16),
                           to_dev(s.v).to(torch.bfloat16), slots)
    torch.cuda.synchronize()
    want_k, want_v = s.expected_caches()
    assert np.array_equal(k_cache.cpu().numpy().view(np.uint16), want_k)
    assert np.array_equal(v_cache.cpu().numpy().view(np.uint16), want_v)
    tripath.merge_states(to_dev(outs), to_dev(lses), out, lse)
    torch.cuda.synchronize()
    want_out, want_lse = npref.merge(outs, lses)
    assert_close(out.cpu().numpy(), want_out, 1e-5, 1e-6)
    got_lse = lse.cpu().numpy()
    assert got_lse[4] == -np.inf
    np.testing.assert_allclose(got_lse, want_lse, rtol=1e-6)

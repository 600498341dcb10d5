"""tripath: paged-attention backends for one continuous-batching step.

A step is planned once on the host (:func:`plan_step`), then every layer runs attention through a
backend (:func:`run_attention`, :func:`run_mla`) that writes the new tokens' K/V into the paged
cache and attends to it. ``reference`` is the exact CPU implementation; the CUDA backends
(``three_path``, ``unified``, ``two_path``, ``mla``, ``mla_baseline``) take CUDA tensors through
the same calls.

Arrays: anything that speaks DLPack (NumPy arrays, torch / CuPy tensors) is passed to the library
without a copy. Element types are float32, float16, bfloat16 (torch) and uint8 for fp8 e4m3
storage. Cache tensors may also be integer storage of the cache element size, so a bf16 cache
can live in a NumPy ``uint16`` array (see :func:`cache_numpy_dtype`). Shapes and layouts follow
``include/tripath/attention.h``; the tokens of a step are laid out as ``plan.cu_seqlens_q`` says:
the caller's request order, ``[decode | extend | prefill]`` when the plan is ordered.

Errors: bad arguments raise :class:`Error` (a ``ValueError``) whose message names the argument,
the value and what was expected; an exhausted block pool raises :class:`OutOfBlocksError` (also a
``RuntimeError``), leaving the pool unchanged.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _tripath as _C
from ._tripath import (
    MLA_ENTRY_DIM,
    MLA_LATENT_DIM,
    MLA_NOPE_DIM,
    MLA_QK_DIM,
    MLA_ROPE_DIM,
    MLA_V_DIM,
    AttentionBackend,
    AttentionParams,
    BlockAllocator,
    DType,
    Error,
    KvCacheConfig,
    KvLayout,
    MlaBackend,
    MlaCacheConfig,
    MlaParams,
    OutOfBlocksError,
    RequestClass,
    StepPlan,
)

Plan = StepPlan  # the object plan_step returns

__version__ = _C.version()

__all__ = [
    "MLA_ENTRY_DIM", "MLA_LATENT_DIM", "MLA_NOPE_DIM", "MLA_QK_DIM", "MLA_ROPE_DIM", "MLA_V_DIM",
    "AttentionBackend", "AttentionParams", "BlockAllocator", "DType", "Error", "KvCacheConfig",
    "KvLayout", "MlaBackend", "MlaCacheConfig", "MlaParams", "OutOfBlocksError", "Plan",
    "RequestClass", "StepPlan",
    "attention_direct", "attention_three_path", "backend_from_env", "build_info",
    "cache_numpy_dtype", "create_attention_backend", "create_mla_backend", "decode", "encode",
    "kv_cache_offset", "kv_cache_shape", "list_backends", "merge_states", "mla_decode",
    "mla_prefill", "ordered_inputs", "plan_step", "reorder_token_rows", "resolve_backend",
    "run_attention", "run_mla", "supported_head_dims", "tiled_chunk", "version",
    "write_kv_cache", "write_mla_cache",
]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _int_array(name: str, values: Any, dtype: Any, ndim: int) -> np.ndarray:
    """`values` as a C-contiguous integer array of `dtype`, refusing floats and overflow."""
    a = np.asarray(values)
    if a.size == 0:
        a = a.astype(dtype)
    if a.dtype.kind not in "iu":
        raise Error(f"invalid argument '{name}': got dtype {a.dtype}, expected integers")
    if a.ndim != ndim:
        raise Error(f"invalid argument '{name}': got {a.ndim}-d array of shape {a.shape}, "
                    f"expected {ndim}-d")
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise Error(f"invalid argument '{name}': got values in [{a.min()}, {a.max()}], "
                    f"expected {np.dtype(dtype).name} values")
    return np.ascontiguousarray(a, dtype=dtype)


def _block_table(block_table: Any, num_requests: int) -> np.ndarray:
    """A 2-D int32 block table; ragged lists of rows are padded with 0 (entries past what a
    request needs are never read)."""
    if isinstance(block_table, (list, tuple)) and any(
        isinstance(r, (list, tuple, np.ndarray)) for r in block_table
    ):
        width = max((len(r) for r in block_table), default=0)
        padded = np.zeros((len(block_table), width), dtype=np.int64)
        for i, row in enumerate(block_table):
            padded[i, : len(row)] = np.asarray(row, dtype=np.int64)
        block_table = padded
    if block_table is None or (np.asarray(block_table).size == 0 and num_requests == 0):
        return np.zeros((num_requests, 0), dtype=np.int32)
    return _int_array("block_table", block_table, np.int32, 2)


def _slots(slot_mapping: Any) -> Any:
    """NumPy / lists -> a C-contiguous int64 array; DLPack tensors (torch, on any device) pass
    through for the library to check."""
    if hasattr(slot_mapping, "__dlpack__") and not isinstance(slot_mapping, np.ndarray):
        return slot_mapping
    return _int_array("slot_mapping", slot_mapping, np.int64, 1)


def _stream(stream: Any, *arrays: Any) -> int:
    """The CUDA stream handle to run on: `stream` itself (an int, or an object with a
    ``cuda_stream`` attribute such as ``torch.cuda.Stream``); else torch's current stream on the
    device of the first torch CUDA tensor among `arrays`; else 0 (the default stream)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    for a in arrays:
        device = getattr(a, "device", None)
        if getattr(device, "type", None) == "cuda" and type(a).__module__.startswith("torch"):
            import torch

            return int(torch.cuda.current_stream(device).cuda_stream)
    return 0


# ---- build, backends, dtypes ------------------------------------------------------------------

def version() -> str:
    """The library version (``0.1.0``)."""
    return _C.version()


def build_info() -> dict:
    """Version, whether CUDA was built (and for which architectures), the reference's CPU
    threads, and the GPU found (name, SM count, compute capability)."""
    return _C.build_info()


def list_backends() -> list:
    """Every backend name with its availability here: a list of dicts
    ``{"name", "is_mla", "available", "reason"}`` (reason says why one is unavailable)."""
    return _C.list_backends()


def resolve_backend(name: str, mla: bool = False) -> str:
    """Resolves ``"auto"`` (Hopper: three_path / mla; other GPU: unified / mla_baseline; no GPU:
    reference) and checks that the named backend is available; raises :class:`Error` listing
    the valid and available names otherwise."""
    return _C.resolve_backend(name, mla)


def backend_from_env(mla: bool = False) -> str:
    """The backend named by ``TRIPATH_BACKEND`` (``TRIPATH_MLA_BACKEND`` when ``mla``), ``auto``
    when unset, resolved."""
    return _C.backend_from_env(mla)


def create_attention_backend(name: str = "auto") -> AttentionBackend:
    """A reusable MHA/GQA backend object; pass it to :func:`run_attention` instead of a name to
    keep its state (workspaces) across calls."""
    return _C.create_attention_backend(name)


def create_mla_backend(name: str = "auto") -> MlaBackend:
    """A reusable MLA backend object for :func:`run_mla`."""
    return _C.create_mla_backend(name)


def supported_head_dims() -> list:
    """Head dims every MHA backend supports: ``[64, 80, 96, 128, 192, 256]``."""
    return _C.supported_head_dims()


def cache_numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy storage dtype of a cache of `dtype`: float32, float16, uint16 (bf16 bits) or
    uint8 (fp8 e4m3 bits)."""
    name = _C.dtype_name(dtype)
    storage = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "fp8_e4m3": np.uint8}
    if name not in storage:
        raise Error(f"invalid argument 'dtype': got {name}, expected a cache element type: "
                    "f32, f16, bf16 or fp8_e4m3")
    return np.dtype(storage[name])


def encode(x: Any, dtype: Any) -> np.ndarray:
    """Rounds float32 values to `dtype` exactly as the library stores them (nearest even; fp8
    e4m3 saturates to +-448, NaN stays NaN) and returns the storage array (uint8 / uint16 /
    float32). For fp8 caches divide by the cache scale first."""
    return _C.encode(np.ascontiguousarray(x, dtype=np.float32), dtype)


def decode(bits: Any, dtype: Any) -> np.ndarray:
    """Widens storage of `dtype` (as returned by :func:`encode`) to float32."""
    return _C.decode(np.ascontiguousarray(bits), dtype)


def kv_cache_shape(config: KvCacheConfig) -> Tuple[int, ...]:
    """Storage shape of one of K or V: NHD ``[blocks, block_size, kv_heads, head_dim]``; HND and
    tiled ``[blocks, kv_heads, block_size, head_dim]``."""
    return _C.kv_cache_shape(config)


def kv_cache_offset(config: KvCacheConfig, block: int, slot: int, head: int, dim: int) -> int:
    """Element offset of (block, slot in block, kv head, dim) in one flat K or V cache tensor:
    the single definition of every layout, tiled included."""
    return _C.kv_cache_offset(config, block, slot, head, dim)


def tiled_chunk(chunk: int, row: int, chunks_per_row: int) -> int:
    """Physical 16-byte chunk of logical chunk `chunk` in row `row` of the tiled layout."""
    return _C.tiled_chunk(chunk, row, chunks_per_row)


# ---- planning ---------------------------------------------------------------------------------

def plan_step(query_lens: Sequence[int], context_lens: Sequence[int], block_table: Any,
              num_cache_blocks: int, block_size: int = 16, decode_threshold: int = 1,
              extend_chunk_budget: int = 32768, num_work_units: int = 1, num_kv_heads: int = 1,
              min_split_tokens: int = 256, split_waves: int = 2,
              decode_segments: int = 1) -> StepPlan:
    """Plans one step: classifies each request (decode ``query_len <= decode_threshold``;
    prefill ``context_len == 0``; extend otherwise), orders them stably
    ``[decode | extend | prefill]`` and builds cu_seqlens, the slot mapping, the extend context
    chunk schedule and the decode split-KV partition (uniform splits, and, where the planner's
    model prefers them or ``decode_segments=2``, decode segments: equal key runs per block).

    `block_table` is ``[num_requests, max_blocks]`` (array, or a list of rows, ragged rows
    padded); row r must hold ``ceil((context_len + query_len) / block_size)`` valid ids in
    ``[0, num_cache_blocks)``. The returned :class:`StepPlan` exposes every field as NumPy
    arrays (copies) and ints. Its token layout (query_lens, cu_seqlens, block_table,
    slot_mapping) is the caller's request order; path ranges ``(begin, end, token_begin,
    token_end)``, extend chunks and decode splits describe the ordered batch, which is the same
    layout when ``plan.is_ordered``.
    """
    q = _int_array("query_lens", query_lens, np.int32, 1)
    c = _int_array("context_lens", context_lens, np.int32, 1)
    bt = _block_table(block_table, len(q))
    return _C.plan_step(q.tolist(), c.tolist(), bt, int(num_cache_blocks), block_size,
                        decode_threshold, extend_chunk_budget, num_work_units, num_kv_heads,
                        min_split_tokens, split_waves, decode_segments)


def ordered_inputs(plan: StepPlan, query_lens: Sequence[int], context_lens: Sequence[int],
                   block_table: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step's per-request inputs permuted into ``plan.order``: plan them again to get an
    ordered plan (``is_ordered``), as an engine does after laying its batch out in that order."""
    order = plan.order
    q = _int_array("query_lens", query_lens, np.int32, 1)[order]
    c = _int_array("context_lens", context_lens, np.int32, 1)[order]
    bt = _block_table(block_table, len(order))[order]
    return q, c, bt


def reorder_token_rows(plan: StepPlan, src: Any, dst: Any = None) -> Any:
    """Copies per-token rows ``[num_tokens, ...]`` of the plan's (caller-order) layout into the
    ``[decode | extend | prefill]`` layout of the plan of :func:`ordered_inputs`; allocates `dst`
    (NumPy) when not given and returns it."""
    if dst is None:
        src = np.ascontiguousarray(src)
        dst = np.empty_like(src)
    _C.reorder_token_rows(plan, src, dst)
    return dst


# ---- MHA / GQA --------------------------------------------------------------------------------

def write_kv_cache(cache_config: KvCacheConfig, k_cache: Any, v_cache: Any, k: Any, v: Any,
                   slot_mapping: Any, *, stream: Any = None) -> None:
    """Writes new K/V rows ``[num_tokens, kv_heads, head_dim]`` into the caches at
    `slot_mapping` (int64 ``block * block_size + offset``, on the tensors' device; -1 skips the
    token), in the config's layout and dtype (fp8: ``e4m3(x / scale)``). CPU tensors use the
    reference, CUDA tensors the CUDA writer (on `stream`, default: torch's current stream)."""
    _C.write_kv_cache(cache_config, k_cache, v_cache, k, v, _slots(slot_mapping),
                      _stream(stream, k))


def run_attention(backend: Any, plan: StepPlan, cache_config: KvCacheConfig, q: Any, k: Any,
                  v: Any, k_cache: Any, v_cache: Any, out: Any, lse: Any = None,
                  sinks: Any = None, *, scale: float = 0.0, window_left: int = -1,
                  softcap: float = 0.0, params: Optional[AttentionParams] = None,
                  write_cache: bool = True, prepare: bool = True, stream: Any = None) -> Any:
    """One attention layer call through a backend (a name such as ``"reference"`` or
    ``"auto"``, or an object from :func:`create_attention_backend`).

    Writes `k`/`v` (``[num_tokens, kv_heads, head_dim]``; ``None`` or ``write_cache=False``: no
    write) into the cache at ``plan.slot_mapping``, then computes attention of `q`
    ``[num_tokens, q_heads, head_dim]`` into `out` (same shape) and, when given, the natural-log
    `lse` ``[num_tokens, q_heads]`` float32. Params
    come from the shapes (q heads and head dim from `q`, kv heads from the cache config) plus
    `scale` (0: ``1/sqrt(head_dim)``), `window_left` (-1: none), `softcap` (0: off) and `sinks`
    (``[q_heads]`` float32 logits), unless `params` is given. Returns `out`.

    Layout: the plan's token order (``plan.cu_seqlens_q``): the caller's request order, which is
    ``[decode | extend | prefill]`` for an ordered plan; backends that need that order refuse an
    unordered plan. CUDA tensors run asynchronously on `stream` (an int handle or a
    ``torch.cuda.Stream``; default: torch's current stream).

    `prepare`: call ``backend.prepare(plan, params)`` first (CUDA backends upload the plan
    there). An engine running many layers per step creates the backend once, prepares it once
    per step and passes ``prepare=False`` per layer; a backend given by name is always prepared.
    """
    _C.run_attention(backend, plan, cache_config, q, k, v, k_cache, v_cache, out, lse, sinks,
                     scale, window_left, softcap, params, write_cache, prepare,
                     _stream(stream, q))
    return out


def attention_direct(plan: StepPlan, cache_config: KvCacheConfig, q: Any, k_cache: Any,
                     v_cache: Any, out: Any, lse: Any = None, sinks: Any = None, *,
                     scale: float = 0.0, window_left: int = -1, softcap: float = 0.0,
                     params: Optional[AttentionParams] = None) -> Any:
    """Reference attention by its direct definition, read straight from the paged cache (which
    must already hold the step's tokens: see :func:`write_kv_cache`); any request order."""
    _C.attention_direct(plan, cache_config, q, k_cache, v_cache, out, lse, sinks, scale,
                        window_left, softcap, params)
    return out


def attention_three_path(plan: StepPlan, cache_config: KvCacheConfig, q: Any, k_cache: Any,
                         v_cache: Any, out: Any, lse: Any = None, sinks: Any = None, *,
                         scale: float = 0.0, window_left: int = -1, softcap: float = 0.0,
                         params: Optional[AttentionParams] = None) -> Any:
    """Reference attention composed from the three paths (decode splits, extend chunks plus the
    causal self-part, prefill) merged by log-sum-exp; needs an ordered plan. No cache write."""
    _C.attention_three_path(plan, cache_config, q, k_cache, v_cache, out, lse, sinks, scale,
                            window_left, softcap, params)
    return out


def merge_states(outs: Any, lses: Any, out: Any = None, lse: Any = None, *,
                 stream: Any = None) -> Tuple[Any, Any]:
    """Merges partial attention states over disjoint key sets: `outs` ``[parts, rows, dim]`` and
    `lses` ``[parts, rows]`` (float32) into `out` ``[rows, dim]`` and `lse` ``[rows]``. A part
    with lse -inf weighs nothing; a row whose parts are all empty gives 0 and -inf. For NumPy
    inputs `out` and `lse` are allocated when not given; for CUDA tensors pass `out` (and `lse`
    if wanted). Returns ``(out, lse)``."""
    if out is None and isinstance(outs, np.ndarray):
        out = np.empty(outs.shape[1:], dtype=np.float32)
        if lse is None:
            lse = np.empty(outs.shape[1:2], dtype=np.float32)
    if out is None:
        raise Error("invalid argument 'out': got None, expected the merged output tensor")
    _C.merge_states(outs, lses, out, lse, _stream(stream, outs))
    return out, lse


# ---- MLA --------------------------------------------------------------------------------------

def write_mla_cache(cache_config: MlaCacheConfig, latent_cache: Any, latent: Any,
                    slot_mapping: Any) -> None:
    """Writes new latent rows ``[num_tokens, 576]`` (512 ``c_kv`` + 64 ``k_pe``) into the MLA
    cache at `slot_mapping`. CPU reference."""
    _C.write_mla_cache(cache_config, latent_cache, latent, _slots(slot_mapping))


def mla_decode(plan: StepPlan, cache_config: MlaCacheConfig, latent_cache: Any, q: Any, out: Any,
               lse: Any = None, *, request_begin: int = -1, request_end: int = -1,
               scale: float = 0.0) -> Any:
    """Reference absorbed MLA: `q` ``[tokens, heads, 576]`` attends to the latent rows, `out`
    ``[tokens, heads, 512]`` (apply W_UV yourself). Covers requests
    ``[request_begin, request_end)`` of the ordered plan, by default the decode path. `scale` 0
    means ``1/sqrt(192)``."""
    _C.mla_decode(plan, cache_config, latent_cache, q, out, lse, request_begin, request_end,
                  scale)
    return out


def mla_prefill(plan: StepPlan, cache_config: MlaCacheConfig, latent_cache: Any, q: Any,
                kv_b_proj: Any, out: Any, lse: Any = None, *, request_begin: int = -1,
                request_end: int = -1, scale: float = 0.0, chunk_tokens: int = 0) -> Any:
    """Reference non-absorbed MLA: keys/values decompressed from the latent cache through
    `kv_b_proj` ``[512, heads * 256]`` (per head 128 k_nope columns, then 128 v), k =
    ``[k_nope | k_pe]``; `q` ``[tokens, heads, 192]``, `out` ``[tokens, heads, 128]``, causal.
    Covers requests ``[request_begin, request_end)``, by default extend + prefill.
    `chunk_tokens` > 0 decompresses the context in chunks merged by log-sum-exp."""
    _C.mla_prefill(plan, cache_config, latent_cache, q, kv_b_proj, out, lse, request_begin,
                   request_end, scale, chunk_tokens)
    return out


def run_mla(backend: Any, plan: StepPlan, cache_config: MlaCacheConfig, latent_cache: Any, *,
            latent: Any = None, q_absorbed: Any = None, out_absorbed: Any = None,
            lse_absorbed: Any = None, q: Any = None, kv_b_proj: Any = None, out: Any = None,
            lse: Any = None, scale: float = 0.0, num_heads: int = 0,
            write_cache: bool = True, prepare: bool = True, stream: Any = None) -> None:
    """One MLA layer call on an ordered plan: writes `latent` ``[num_tokens, 576]`` into the
    cache (when given and `write_cache`), then decode tokens run absorbed (`q_absorbed`
    ``[decode tokens, heads, 576]`` -> `out_absorbed` ``[.., 512]``) and extend/prefill tokens
    non-absorbed (`q` ``[other tokens, heads, 192]``, `kv_b_proj`, -> `out` ``[.., 128]``).
    `num_heads` 0 takes it from the queries. `prepare` and `stream` as in
    :func:`run_attention`."""
    _C.run_mla(backend, plan, cache_config, latent_cache, latent, q_absorbed, out_absorbed,
               lse_absorbed, q, kv_b_proj, out, lse, scale, num_heads, write_cache, prepare,
               _stream(stream, latent_cache))

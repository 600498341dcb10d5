"""An independent NumPy model of what tripath computes, written from shared/DESIGN.md and the
header comments only (no library code): number formats, cache layouts, paged caches, attention,
the log-sum-exp merge and MLA. Everything is float64."""

from __future__ import annotations

import numpy as np

# ---- number formats ----------------------------------------------------------------------------

def e4m3_decode(bits):
    """OCP fp8 e4m3 ("e4m3fn") bits -> float64: bias 7, no infinities, S.1111.111 is NaN."""
    b = np.asarray(bits, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = (b & 0x7).astype(np.float64)
    val = np.where(exp == 0, man * 2.0 ** -9, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    val = np.where((b & 0x7F) == 0x7F, np.nan, val)
    return sign * val


_E4M3_POSITIVE = e4m3_decode(np.arange(0x7F))  # codes 0..126, increasing, 0 .. 448


def e4m3_encode(x):
    """float -> fp8 e4m3 bits, round to nearest even, saturating to +-448, NaN -> NaN."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.clip(e, -6, 8)  # below 2^-6 the quantum stays 2^-9 (subnormals)
    quantum = 2.0 ** (e - 3)
    rounded = np.round(np.where(np.isfinite(a), a, 0.0) / quantum) * quantum  # half to even
    rounded = np.minimum(np.where(np.isinf(a), 448.0, rounded), 448.0)
    code = np.searchsorted(_E4M3_POSITIVE, rounded).astype(np.uint8)
    assert np.all(_E4M3_POSITIVE[code] == rounded)
    code = np.where(np.isnan(x), np.uint8(0x7F), code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def bf16_encode(x):
    """float -> bf16 bits, round to nearest even (NaN kept quiet)."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_decode(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)


STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "fp8_e4m3": np.uint8}
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "fp8_e4m3": 1}
POISON = {"f32": np.float32(np.nan), "f16": np.float16(np.nan), "bf16": np.uint16(0x7FC0),
          "fp8_e4m3": np.uint8(0x7F)}


def encode(x, dtype, scale=1.0):
    """Storage of x in a cache of `dtype` (fp8: e4m3(x / scale))."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "f32":
        return x.astype(np.float32)
    if dtype == "f16":
        return x.astype(np.float32).astype(np.float16)
    if dtype == "bf16":
        return bf16_encode(x)
    # The writer's float32 x divided by the config's float32 scale (a true, correctly rounded
    # division, not a multiply by 1 / scale), then rounded to e4m3.
    return e4m3_encode(np.asarray(x, dtype=np.float32) / np.float32(scale))


def decode(bits, dtype, scale=1.0):
    if dtype in ("f32", "f16"):
        return np.asarray(bits).astype(np.float64)
    if dtype == "bf16":
        return bf16_decode(bits)
    return e4m3_decode(bits) * np.float64(np.float32(scale))


# ---- cache layouts -----------------------------------------------------------------------------

def storage_shape(layout, num_blocks, block_size, heads, head_dim):
    if layout == "nhd":
        return (num_blocks, block_size, heads, head_dim)
    return (num_blocks, heads, block_size, head_dim)


def flat_index(layout, itemsize, block_size, heads, head_dim, block, slot, head):
    """Flat element indices of dims 0..head_dim-1 of (block, slot, head)."""
    d = np.arange(head_dim)
    if layout == "nhd":
        return ((block * block_size + slot) * heads + head) * head_dim + d
    base = ((block * heads + head) * block_size + slot) * head_dim
    if layout == "hnd":
        return base + d
    # tiled: 16-byte chunks of each row XOR-swizzled with the row (slot) index.
    per_chunk = 16 // itemsize
    chunks = head_dim // per_chunk
    w = 8
    while w > 1 and (w > chunks or chunks % w):
        w //= 2
    c = d // per_chunk
    phys = (c & ~(w - 1)) | ((c ^ slot) & (w - 1))
    return base + phys * per_chunk + d % per_chunk


def store_rows(cache_flat, layout, dtype, block_size, heads, head_dim, block_row, positions,
               rows, scale=1.0):
    """Writes rows [n, heads, head_dim] (float) of a request at token positions."""
    bits = encode(rows, dtype, scale)
    for i, pos in enumerate(positions):
        block, slot = block_row[pos // block_size], pos % block_size
        for h in range(heads):
            idx = flat_index(layout, ITEMSIZE[dtype], block_size, heads, head_dim, block, slot, h)
            cache_flat[idx] = bits[i, h]


# ---- attention ---------------------------------------------------------------------------------

def attention(q, k, v, context_len, scale, window_left=-1, softcap=0.0, sinks=None):
    """Bottom-right causal attention of q [n, hq, d] (query i at position context_len + i) over
    k [seq, hkv, d], v [seq, hkv, dv]; GQA by head groups; optional left window, soft-cap and
    per-head sink logits. Returns out [n, hq, dv] and the natural-log lse [n, hq]."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n, hq, _ = q.shape
    seq, hkv, dv = v.shape
    group = hq // hkv
    kh = np.repeat(k, group, axis=1)
    vh = np.repeat(v, group, axis=1)
    s = np.einsum("nhd,khd->hnk", q, kh) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    pos = context_len + np.arange(n)[:, None]
    key = np.arange(seq)[None, :]
    mask = key <= pos
    if window_left >= 0:
        mask &= pos - key <= window_left
    s = np.where(mask[None], s, -np.inf)
    m = s.max(axis=-1) if seq else np.full((hq, n), -np.inf)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, dtype=np.float64)[:, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe[..., None])
    denom = p.sum(axis=-1)
    if sinks is not None:
        denom = denom + np.exp(np.asarray(sinks, dtype=np.float64)[:, None] - m_safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.einsum("hnk,khd->nhd", p, vh) / denom.T[..., None]
        lse = np.where(denom > 0, np.log(denom) + m_safe, -np.inf).T
    out = np.where(denom.T[..., None] > 0, out, 0.0)
    return out, lse


def merge(outs, lses):
    """Log-sum-exp merge of parts over disjoint key sets (DESIGN.md section 5)."""
    outs = np.asarray(outs, dtype=np.float64)
    lses = np.asarray(lses, dtype=np.float64)
    m = lses.max(axis=0)
    empty = ~np.isfinite(m)
    m_safe = np.where(empty, 0.0, m)
    w = np.where(np.isfinite(lses), np.exp(lses - m_safe), 0.0)
    total = w.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.einsum("pr,prd->rd", w, outs) / total[:, None]
        lse = m_safe + np.log(total)
    out = np.where(empty[:, None], 0.0, out)
    lse = np.where(empty, -np.inf, lse)
    return out, lse


# ---- MLA ---------------------------------------------------------------------------------------

LATENT, ROPE, ENTRY, NOPE, QK, VDIM = 512, 64, 576, 128, 192, 128


def mla_absorbed(q, latent, context_len, scale):
    """q [n, heads, 576] over latent rows [seq, 576]; values are latent[:, :512]."""
    latent = np.asarray(latent, dtype=np.float64)
    return attention(q, latent[:, None, :], latent[:, None, :LATENT], context_len, scale)


def mla_non_absorbed(q, latent, kv_b_proj, context_len, scale):
    """q [n, heads, 192]; keys [k_nope | k_pe] and values decompressed through kv_b_proj
    [512, heads * 256] (per head 128 k_nope columns then 128 v columns)."""
    latent = np.asarray(latent, dtype=np.float64)
    heads = q.shape[1]
    kv = (latent[:, :LATENT] @ np.asarray(kv_b_proj, dtype=np.float64)).reshape(-1, heads, 256)
    k_pe = np.broadcast_to(latent[:, None, LATENT:], (latent.shape[0], heads, ROPE))
    k = np.concatenate([kv[..., :NOPE], k_pe], axis=-1)
    return attention(q, k, kv[..., NOPE:], context_len, scale)

#!/usr/bin/env python3
"""Times torch's SDPA backends on BENCH.md's prefill-8k (qwen3-235b: 4 x 8192 tokens, 64 q heads,
4 kv heads, head dim 128, bf16, causal) on the device machine, so the issue's "faster than
cuDNN" target is compared on the same card as tripath's own figures of the same call.

    python3 tools/sdpa-peer.py OUT.json

Each backend: 3 warm-ups, then the median of 20 calls timed by CUDA events. K and V are
expanded to 64 heads before timing (not every backend takes GQA), so the timed work is the
same attention tripath does; only the layout of K and V differs.
"""
import json
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

REQUESTS, TOKENS, Q_HEADS, KV_HEADS, HEAD_DIM = 4, 8192, 64, 4, 128
FLOPS = 4 * REQUESTS * TOKENS * TOKENS * Q_HEADS * HEAD_DIM / 2  # causal halves the work


def time_backend(backend, q, k, v):
    with sdpa_kernel([backend]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "sdpa_peer.json"
    torch.manual_seed(0)
    q = torch.randn(REQUESTS, Q_HEADS, TOKENS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(REQUESTS, KV_HEADS, TOKENS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    group = Q_HEADS // KV_HEADS
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    rows = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            ms = time_backend(backend, q, k, v)
            rows[name] = {"ms": round(ms, 4), "tflops": round(FLOPS / ms / 1e9, 1)}
        except Exception as error:  # a backend this build lacks is reported, not fatal
            rows[name] = {"error": str(error).splitlines()[0][:200]}
        print(f"sdpa {name}: {rows[name]}", flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "workload": "prefill-8k qwen3-235b causal bf16", "flops": FLOPS, "backends": rows}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

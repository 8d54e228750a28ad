#!/usr/bin/env python3
"""The three Gemma-4-12B decode chains (knowledge/cuda-h200/kernels.yaml) as plain eager PyTorch
ops in bf16 (F.linear, RMSNorm in float32 as Gemma's reference code does, rotate-half RoPE,
tanh-GELU GeGLU), timed the way cudac times designs: before every timed launch an L2 flush (a
write of 4x the L2 size, then a read of 2x it), CUDA events around the chain, the median of
REPEAT launches. Modes:

  torch-eager        the start event and the chain enqueued behind the flush (cudac's default
                     "queued" mode: the host's Python dispatch overlaps the flush)
  torch-eager-idle   the flush waited for first, so the host's dispatch of every op is timed
                     (what a user's decode step sees when the GPU is waiting on the host)
  torch-graph        the chain captured once with torch.cuda.graphs, replays timed (queued)
  torch-graph-idle   graph replays after waiting for the flush

Used by bench_chains.py --torch; alone: torch_chains.py [--batches 1] [--repeat 30] --out FILE
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F

EPS = 1e-6


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def rope(t, pos, heads, head_dim, inv_freq):
    # t: [B, heads*head_dim]; rotate pairs (i, i + head_dim/2) by pos * 10000^(-2i/head_dim)
    b = t.shape[0]
    t = t.view(b, heads, head_dim).float()
    ang = pos.float()[:, None] * inv_freq[None, :]            # [B, head_dim/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    half = head_dim // 2
    rot = torch.cat([-t[..., half:], t[..., :half]], -1)
    return (t * cos + rot * sin).to(torch.bfloat16).view(b, heads * head_dim)


def make_chains(batch, dev):
    g = torch.Generator(device=dev).manual_seed(1)
    bf = torch.bfloat16

    def w(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[-1])
        return (torch.randn(*shape, generator=g, device=dev, dtype=torch.float32) * scale).to(bf)

    H, QH, KVH, D, FF = 3840, 16, 8, 256, 15360
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    chains = {}

    x = w(batch, H, scale=1.0)
    pos = torch.randint(0, 4096, (batch,), generator=g, device=dev, dtype=torch.int32)
    attn_norm, wq, wk, wv = w(H, scale=1.0), w(QH * D, H), w(KVH * D, H), w(KVH * D, H)
    q_norm, k_norm = w(D, scale=1.0), w(D, scale=1.0)

    def qkv():
        xn = rms_norm(x, attn_norm)
        q = F.linear(xn, wq)
        k = F.linear(xn, wk)
        v = F.linear(xn, wv)
        q = rope(rms_norm(q.view(batch, QH, D), q_norm).view(batch, QH * D), pos, QH, D, inv_freq)
        k = rope(rms_norm(k.view(batch, KVH, D), k_norm).view(batch, KVH * D), pos, KVH, D, inv_freq)
        return q, k, v

    chains["project_qkv"] = (qkv, (QH + 2 * KVH) * D * H * 2 + (H + 2 * D) * 2)

    attn, residual, wo, post_norm = w(batch, QH * D, scale=1.0), w(batch, H, scale=1.0), w(H, QH * D), w(H, scale=1.0)

    def ao():
        return residual + rms_norm(F.linear(attn, wo), post_norm)

    chains["attention_output"] = (ao, H * QH * D * 2 + H * 2)

    xf, ffn_norm, w_gate, w_up, w_down, post_ff = (w(batch, H, scale=1.0), w(H, scale=1.0), w(FF, H), w(FF, H),
                                                   w(H, FF), w(H, scale=1.0))

    def ff():
        xn = rms_norm(xf, ffn_norm)
        h = F.gelu(F.linear(xn, w_gate), approximate="tanh") * F.linear(xn, w_up)
        return xf + rms_norm(F.linear(h, w_down), post_ff)

    chains["feedforward"] = (ff, 3 * H * FF * 2 + 2 * H * 2)
    return chains


def time_chain(fn, repeat, flush_w, flush_r, idle):
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(repeat + 3):
        flush_w.fill_(i & 0xff)
        flush_r.sum()  # reads 2x L2 (flush_r is a view of flush_w)
        if idle:
            torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= 3:  # warm-up launches (allocator, cuBLAS heuristics) not counted
            times.append(start.elapsed_time(end) * 1e6)  # ns
    return times


def run(batches=(1,), repeat=30):
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 * 1024 * 1024)
    flush_w = torch.empty(4 * l2 // 4, dtype=torch.float32, device=dev)
    flush_r = flush_w[: 2 * l2 // 4]
    rows = []
    for batch in batches:
        for kernel, (fn, weight_bytes) in make_chains(batch, dev).items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            torch.cuda.synchronize()
            for mode, f, idle in (("torch-eager", fn, False), ("torch-eager-idle", fn, True),
                                  ("torch-graph", graph.replay, False), ("torch-graph-idle", graph.replay, True)):
                cycles = time_chain(f, repeat, flush_w, flush_r, idle)
                rows.append({"kernel": kernel, "batch": batch, "design": "torch", "mode": mode,
                             "weight_bytes": weight_bytes, "cycles_ns": cycles, "median_ns": statistics.median(cycles),
                             "min_ns": min(cycles), "torch": torch.__version__})
            del graph
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = run([int(b) for b in a.batches.split(",")], a.repeat)
    for row in r:
        print("%-17s b%d %-18s %9.1f us" % (row["kernel"], row["batch"], row["mode"], row["median_ns"] / 1e3))
    json.dump({"rows": r}, open(a.out, "w"), indent=1)

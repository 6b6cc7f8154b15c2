#!/usr/bin/python3
"""Times kformer-bench's cases in PyTorch on the same threads and writes the same JSON schema,
so that reports can show kformer/PyTorch ratios side by side.

    /usr/bin/python3 perf/compare_pytorch.py [--filter PREFIX] [--threads N] [--repeat N] [--json FILE]

Needs Debian's python3-torch (1.13). The encoder is TST's BatchNorm encoder layer (post-norm,
BatchNorm1d over batch x time, GELU, dropout 0.1) stacked without a final norm, as kformer's
TransformerEncoder with its defaults; the encodings are `x + pe[:seq]` with a cached table, as
PyTorch implementations of the fixed encoding do.
"""
import argparse
import json
import math
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class BatchNormEncoderLayer(nn.Module):
    """TST's TransformerBatchNormEncoderLayer, batch-first at its interface."""

    def __init__(self, d, heads, ff, dropout):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.linear1 = nn.Linear(d, ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ff, d)
        self.norm1 = nn.BatchNorm1d(d, eps=1e-5)
        self.norm2 = nn.BatchNorm1d(d, eps=1e-5)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src):  # (seq, batch, d), as TST
        src2 = self.self_attn(src, src, src)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src.permute(1, 2, 0)).permute(2, 0, 1)
        src2 = self.linear2(self.dropout(F.gelu(self.linear1(src))))
        src = src + self.dropout2(src2)
        return self.norm2(src.permute(1, 2, 0)).permute(2, 0, 1)


class Encoder(nn.Module):
    def __init__(self, layers, d, heads, ff, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([BatchNormEncoderLayer(d, heads, ff, dropout) for _ in range(layers)])

    def forward(self, x):  # (batch, seq, d)
        x = x.transpose(0, 1)
        for layer in self.layers:
            x = layer(x)
        return x.transpose(0, 1)


def encoder_cases(tag, batch, seq, d, heads, ff, layers):
    model = Encoder(layers, d, heads, ff)
    x = torch.full((batch, seq, d), 0.5)
    dy = torch.full((batch, seq, d), 0.01)
    n = batch * seq
    forward_flops = layers * (2 * n * d * 3 * d + 4.0 * batch * seq * seq * d + 2 * n * d * d + 4 * n * d * ff)
    shape = f"({batch}, {seq}, {d}) h{heads} ff{ff} L{layers}"

    def forward():
        model.eval()
        with torch.no_grad():
            model(x)

    xg = x.clone().requires_grad_(True)

    def train_step():
        model.train()
        for p in model.parameters():
            p.grad = None
        xg.grad = None
        model(xg).backward(dy)

    return [(f"encoder.{tag}.forward", shape, 0.0, forward_flops, forward),
            (f"encoder.{tag}.train_step", shape, 0.0, 3 * forward_flops, train_step)]


def encoding_cases():
    batch, seq, dim = 8, 4096, 512
    x = torch.full((batch, seq, dim), 0.5)
    y = torch.empty_like(x)
    position = torch.arange(seq).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
    pe = torch.zeros(seq, dim)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    shape = "(8, 4096, 512) float"
    tensor_bytes = x.numel() * 4
    return [("encoding.copy", shape, 2.0 * tensor_bytes, 0.0, lambda: y.copy_(x)),
            ("encoding.fixed.add", shape, 2.0 * tensor_bytes, 0.0, lambda: torch.add(x, pe, out=y)),
            ("encoding.fixed.inplace", shape, 2.0 * tensor_bytes, 0.0, lambda: y.add_(pe))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", default="")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    def wanted(family):
        return not args.filter or args.filter.startswith(family) or family.startswith(args.filter)

    cases = []
    if wanted("encoding"):
        cases += encoding_cases()
    if wanted("encoder.tst_default"):
        cases += encoder_cases("tst_default", 32, 64, 64, 8, 256, 3)
    if wanted("encoder.tst_large"):
        cases += encoder_cases("tst_large", 64, 128, 128, 8, 256, 3)

    device = f"{platform.processor() or platform.machine()} ({args.threads} threads)"
    results = []
    print(f"PyTorch {torch.__version__}, {args.threads} threads")
    print(f"{'case':30} {'shape':22} {'median ms':>10} {'GB/s':>10} {'GFLOP/s':>10}")
    for name, shape, nbytes, flops, run in cases:
        if args.filter and not name.startswith(args.filter):
            continue
        run()
        run()
        seconds = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        median = statistics.median(seconds)
        gbs, gflops = nbytes / median * 1e-9, flops / median * 1e-9
        print(f"{name:30} {shape:22} {median * 1e3:10.3f} {gbs:10.2f} {gflops:10.2f}")
        results.append({"backend": "pytorch", "device": device, "threads": args.threads, "case": name,
                        "shape": shape, "median_s": median, "min_s": min(seconds), "max_s": max(seconds),
                        "repeat": args.repeat, "bytes": nbytes, "flops": flops, "gb_per_s": gbs,
                        "gflop_per_s": gflops})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pytorch": torch.__version__, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()

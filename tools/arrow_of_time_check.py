#!/usr/bin/python3
"""Checks, in PyTorch and independently of kformer, that a classification task needs the
positional encoding: Lorenz-96 series (K = 8, the default data's settings) in their regime
(periodic or chaotic) and their direction of time (as simulated, or played backwards).

A played-back series visits the same states as the original, so every single step, and the set
of steps, has the same distribution in both directions: only the order of the steps tells them
apart. A TST-shaped model (Linear input projection * sqrt(d), sinusoidal or no positional
encoding, 3 post-norm BatchNorm encoder layers d 64 / 8 heads / ff 256, GELU, flatten head) is
trained on 600 series and tested on 200, with and without the encoding.

    python3 tools/arrow_of_time_check.py [--device cuda] [--epochs 40] [--seeds 3]
"""
import argparse
import math
import time

import torch
from torch import nn


def lorenz96_rhs(x, forcing):
    """Forward coupling on a ring, for every series (row) at once."""
    return (x.roll(-1, 1) - x.roll(2, 1)) * x.roll(1, 1) - x + forcing


def rk4(x, forcing, h):
    k1 = lorenz96_rhs(x, forcing)
    k2 = lorenz96_rhs(x + 0.5 * h * k1, forcing)
    k3 = lorenz96_rhs(x + 0.5 * h * k2, forcing)
    k4 = lorenz96_rhs(x + h * k3, forcing)
    return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def dataset(n, seed, max_len=96, k=8, h=0.025, interval=0.15, spin_up=20.0):
    """(n, max_len, k) float32 with NaN padding and missing values, lengths, labels (class i mod
    4: 0 periodic forward, 1 periodic backward, 2 chaotic forward, 3 chaotic backward)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 4
    chaotic, backward = labels >= 2, labels % 2 == 1
    u = torch.rand(n, 1, generator=g, dtype=torch.float64)
    forcing = torch.where(chaotic.unsqueeze(1), 6 + 4 * u, 1.5 + 2 * u)
    lengths = torch.randint(58, max_len + 1, (n,), generator=g)
    x = forcing + 0.5 * torch.randn(n, k, generator=g, dtype=torch.float64)
    for _ in range(int(round(spin_up / h))):
        x = rk4(x, forcing, h)
    steps = []
    for t in range(max_len):
        if t > 0:
            for _ in range(int(round(interval / h))):
                x = rk4(x, forcing, h)
        steps.append(x)
    series = torch.stack(steps, 1)  # (n, max_len, k)
    out = torch.full((n, max_len, k), float("nan"), dtype=torch.float32)
    for i in range(n):
        s = series[i, : lengths[i]]
        if backward[i]:
            s = s.flip(0)  # the same states, played backwards
        s = s + 0.1 * torch.randn(s.shape, generator=g, dtype=torch.float64)
        s[torch.rand(s.shape, generator=g) < 0.03] = float("nan")
        out[i, : lengths[i]] = s.float()
    return out, lengths, labels


class BatchNormEncoderLayer(nn.Module):
    def __init__(self, d, heads, ff, dropout):
        super().__init__()
        self.attention = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.norm1, self.norm2 = nn.BatchNorm1d(d), nn.BatchNorm1d(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(ff, d))
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def norm(self, bn, x):
        return bn(x.transpose(1, 2)).transpose(1, 2)

    def forward(self, x, padding):
        a, _ = self.attention(x, x, x, key_padding_mask=padding, need_weights=False)
        x = self.norm(self.norm1, x + self.drop1(a))
        return self.norm(self.norm2, x + self.drop2(self.ff(x)))


class TST(nn.Module):
    def __init__(self, features, max_len, classes, encoding, d=64, heads=8, ff=256, layers=3,
                 dropout=0.1):
        super().__init__()
        self.d = d
        self.project = nn.Linear(features, d)
        position = torch.arange(max_len).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
        self.register_buffer("pe", pe if encoding else torch.zeros(max_len, d))
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            BatchNormEncoderLayer(d, heads, ff, dropout) for _ in range(layers))
        self.out_drop = nn.Dropout(dropout)
        self.head = nn.Linear(max_len * d, classes)

    def forward(self, x, keep):
        z = self.drop(self.project(x) * math.sqrt(self.d) + self.pe[: x.shape[1]])
        for layer in self.layers:
            z = layer(z, ~keep)
        z = self.out_drop(nn.functional.gelu(z)) * keep.unsqueeze(-1)
        return self.head(z.reshape(z.shape[0], -1))


def run(train, test, encoding, seed, device, epochs):
    torch.manual_seed(seed)
    (xtr, ltr, ytr), (xte, lte, yte) = train, test
    observed = xtr[~xtr.isnan().any(-1)]  # per-feature statistics of the training steps
    mean, std = observed.mean(0), observed.std(0)

    def tensors(x, lengths, y):
        x = torch.nan_to_num((x - mean) / std)
        keep = torch.arange(x.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        return x.to(device), keep.to(device), y.to(device)

    xtr, ktr, ytr = tensors(xtr, ltr, ytr)
    xte, kte, yte = tensors(xte, lte, yte)
    model = TST(8, xtr.shape[1], 4, encoding).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(xtr), generator=generator).split(32):
            batch = batch.to(device)
            loss = nn.functional.cross_entropy(model(xtr[batch], ktr[batch]), ytr[batch])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 4.0)
            optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = model(xte, kte).argmax(1)
    accuracy = (predicted == yte).float().mean().item()
    direction = ((predicted % 2) == (yte % 2)).float().mean().item()
    regime = ((predicted // 2) == (yte // 2)).float().mean().item()
    return accuracy, regime, direction


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n-train", type=int, default=600)
    args = parser.parse_args()
    start = time.time()
    train, test = dataset(args.n_train, 1), dataset(200, 2)
    print(f"data: {time.time() - start:.1f} s")
    for encoding in (True, False):
        for seed in range(args.seeds):
            start = time.time()
            accuracy, regime, direction = run(train, test, encoding, seed, args.device,
                                              args.epochs)
            print(f"encoding={'sinusoidal' if encoding else 'none':10s} seed={seed} "
                  f"accuracy={accuracy:.3f} regime={regime:.3f} direction={direction:.3f} "
                  f"({time.time() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()

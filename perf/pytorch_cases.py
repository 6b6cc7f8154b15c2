"""The PyTorch side of perf/compare_pytorch.py: the models and the timed cases, with kformer-bench's
names, shapes and FLOP counts (compare_pytorch.py's docstring describes them). Imported only once
compare_pytorch.py has checked its command line, so that its refusals and --list need no torch."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class BatchNormEncoderLayer(nn.Module):
    """TST's TransformerBatchNormEncoderLayer, batch-first at its interface. Its attention runs
    without returning weights (need_weights=False, PyTorch's fused scaled_dot_product_attention),
    as kformer's keeps no probabilities; TST's own code asks for the weights, which makes PyTorch
    materialise the (batch, heads, seq, seq) matrices."""

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
        src2 = self.self_attn(src, src, src, need_weights=False)[0]
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


def sinusoid_table(seq, dim):
    position = torch.arange(seq, dtype=torch.float).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))
    pe = torch.zeros(seq, dim)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe


class TSTClassifier(nn.Module):
    """TST's TSTransformerEncoderClassiregressor (fixed encoding, BatchNorm, GELU), for inputs
    without padding: the padding mask is neither passed to attention nor multiplied in."""

    def __init__(self, feat, seq, d, heads, ff, layers, classes, dropout=0.1):
        super().__init__()
        self.d = d
        self.project_inp = nn.Linear(feat, d)
        self.register_buffer("pe", sinusoid_table(seq, d))
        self.pos_dropout = nn.Dropout(dropout)
        self.encoder = Encoder(layers, d, heads, ff, dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.output_layer = nn.Linear(seq * d, classes)

    def forward(self, x):  # (batch, seq, feat)
        h = self.project_inp(x) * math.sqrt(self.d)
        h = self.pos_dropout(h + self.pe[: x.size(1)])
        h = self.dropout1(F.gelu(self.encoder(h)))
        return self.output_layer(h.reshape(h.size(0), -1))


class Case:
    def __init__(self, name, shape, nbytes, flops, run, batch=None, seq=None):
        self.name, self.shape, self.bytes, self.flops, self.run = name, shape, float(nbytes), float(flops), run
        self.batch, self.seq = batch, seq


def attention_flops(batch, seq, d):
    n = batch * seq
    return 2.0 * n * d * 3 * d + 4.0 * batch * seq * seq * d + 2.0 * n * d * d


def layer_flops(batch, seq, d, ff):
    return attention_flops(batch, seq, d) + 4.0 * batch * seq * d * ff


def randn(dev, *shape):
    return torch.randn(*shape).to(dev)


def eval_forward_of(model, x):
    """forward in eval mode without autograd: what an inference case times. The callable keeps
    the model and its input (.model, .input), which perf/compare_onnxruntime.py exports."""

    def forward():
        model.eval()
        with torch.no_grad():
            model(x)

    forward.model, forward.input = model, x
    return forward


def train_step_of(model, x, dy):
    """forward in train mode + backward of a fixed output gradient; parameter gradients are reset
    (set to None) first, so that nothing accumulates."""
    xg = x.clone().requires_grad_(True)

    def train_step():
        model.train()
        for p in model.parameters():
            p.grad = None
        xg.grad = None
        model(xg).backward(dy)

    return train_step


def encoder_cases(dev, prefix, batch, seq, d, heads, ff, layers, shape=None, train=True, forward=True):
    model = Encoder(layers, d, heads, ff).to(dev)
    x = torch.full((batch, seq, d), 0.5, device=dev)
    dy = torch.full((batch, seq, d), 0.01, device=dev)
    forward_flops = layers * layer_flops(batch, seq, d, ff)
    shape = shape or f"({batch}, {seq}, {d}) h{heads} ff{ff} L{layers}"

    cases = []
    if forward:
        cases.append(Case(f"{prefix}.forward", shape, 0, forward_flops, eval_forward_of(model, x), batch, seq))
    if train:
        cases.append(Case(f"{prefix}.train_step", shape, 0, 3 * forward_flops, train_step_of(model, x, dy),
                          batch, seq))
    return cases


def encoding_cases(dev):
    batch, seq, dim = 8, 4096, 512
    x = torch.full((batch, seq, dim), 0.5, device=dev)
    y = torch.zeros_like(x)  # touched now, so that its first touch is not counted in peak_bytes
    pe = sinusoid_table(seq, dim).to(dev)
    shape = "(8, 4096, 512) float"
    tensor_bytes = x.numel() * 4
    return [Case("encoding.copy", shape, 2.0 * tensor_bytes, 0, lambda: y.copy_(x), batch, seq),
            Case("encoding.fixed.add", shape, 2.0 * tensor_bytes, 0, lambda: torch.add(x, pe, out=y), batch, seq),
            Case("encoding.fixed.inplace", shape, 2.0 * tensor_bytes, 0, lambda: y.add_(pe), batch, seq)]


def linear_cases(dev):
    rows, fin, fout = 8192, 512, 2048
    layer = nn.Linear(fin, fout).to(dev)
    x = randn(dev, rows, fin)
    shape = f"({rows}, {fin}) -> {fout}"
    flops = 2.0 * rows * fin * fout

    def forward():
        with torch.no_grad():
            layer(x)

    xg = x.clone().requires_grad_(True)
    y = layer(xg)  # one graph, retained: every run is the same backward
    dy = randn(dev, rows, fout)

    def backward():
        for p in layer.parameters():
            p.grad = None
        xg.grad = None
        y.backward(dy, retain_graph=True)

    return [Case("linear.forward", shape, 0, flops, forward),
            Case("linear.backward", shape, 0, 2 * flops, backward)]


class SelfAttention(nn.Module):
    """nn.MultiheadAttention on (x, x, x) without its weights (need_weights=False), as kformer's
    attention cases run theirs (no probabilities kept)."""

    def __init__(self, d, heads, dropout):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def attention_cases(dev, tag, batch, seq, d, heads=8):
    attn = SelfAttention(d, heads, 0.1).to(dev)
    x = randn(dev, batch, seq, d)
    dy = randn(dev, batch, seq, d) * 0.01
    shape = f"({batch}, {seq}, {d}) h{heads}"
    flops = attention_flops(batch, seq, d)
    return [Case(f"attention.{tag}.forward", shape, 0, flops, eval_forward_of(attn, x), batch, seq),
            Case(f"attention.{tag}.train_step", shape, 0, 3 * flops, train_step_of(attn, x, dy), batch, seq)]


def tst_cases(dev, batch=32, seq=128, feat=8, d=64, heads=8, ff=256, layers=3, classes=4):
    model = TSTClassifier(feat, seq, d, heads, ff, layers, classes).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = randn(dev, batch, seq, feat)
    labels = torch.randint(0, classes, (batch,)).to(dev)
    n = batch * seq
    flops = 2.0 * n * feat * d + layers * layer_flops(batch, seq, d, ff) + 2.0 * batch * (seq * d) * classes
    shape = f"({batch}, {seq}, {feat}) d{d} h{heads} ff{ff} L{layers} c{classes}"

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), labels).backward()
        optimizer.step()

    return [Case("tst.default.inference", shape, 0, flops, eval_forward_of(model, x), batch, seq),
            Case("tst.default.train_step", shape, 0, 3 * flops, train_step, batch, seq)]

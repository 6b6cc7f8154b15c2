#!/usr/bin/python3
"""Golden values for kformer's layer parity tests, computed by PyTorch.

Builds each layer in PyTorch with a fixed seed, runs forward and backward (dropout 0, training
mode unless the case says eval) on fixed inputs, and writes inputs, parameters, outputs and
gradients to layers.safetensors next to this script. The C++ tests read that file; they never run
Python. Regenerate with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_layer_goldens.py

Tensor names: "<case>.x", "<case>.y", "<case>.dy" (the upstream gradient), "<case>.dx",
"<case>.param.<state_dict name>", "<case>.grad.<state_dict name>", "<case>.buffer.<name>" (after
forward), "<case>.key_padding_mask" (1.0 = ignore) and "<case>.attn_mask". The hyper-parameters of
each case are in the metadata as JSON under the case's name.
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from golden_safetensors import write_safetensors

torch.manual_seed(1234)
torch.set_num_threads(1)
tensors = {}
metadata = {}


def put(name, t):
    tensors[name] = t.detach().to(torch.float32).contiguous().numpy()


def record(case, x, y, dy, dx, module, hyper, buffers=()):
    put(f"{case}.x", x)
    put(f"{case}.y", y)
    put(f"{case}.dy", dy)
    if dx is not None:
        put(f"{case}.dx", dx)
    for name, p in module.named_parameters():
        put(f"{case}.param.{name}", p)
        put(f"{case}.grad.{name}", p.grad)
    for name in buffers:
        put(f"{case}.buffer.{name}", module.get_buffer(name))
    metadata[case] = json.dumps(hyper)


def run(module, x, *args, **kwargs):
    x = x.clone().requires_grad_(True)
    y = module(x, *args, **kwargs)
    if isinstance(y, tuple):
        y = y[0]
    dy = torch.randn_like(y)
    y.backward(dy)
    return x, y, dy, x.grad


def randomize(module, scale=1.0):
    """Non-trivial values for every parameter: norm weights near 1, biases around 0, matrices
    scaled by their fan-in."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * scale / math.sqrt(p[0].numel()))


# --- Linear --------------------------------------------------------------------------------
lin = nn.Linear(5, 7)
x, y, dy, dx = run(lin, torch.randn(2, 3, 5))
record("linear", x, y, dy, dx, lin, {"in": 5, "out": 7})

# --- Conv1d as an input projection: (batch, seq, features) -> (batch, seq_out, d) ----------------
class ConvProjection(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


for case, kw in [("conv1d_same", dict(kernel_size=3, padding="same")),
                 ("conv1d_strided", dict(kernel_size=3, stride=2, padding=1, dilation=2))]:
    proj = ConvProjection(nn.Conv1d(4, 6, **kw))
    x, y, dy, dx = run(proj, torch.randn(2, 9, 4))
    hyper = {"in": 4, "out": 6, "kernel_size": kw["kernel_size"], "stride": kw.get("stride", 1),
             "dilation": kw.get("dilation", 1), "same": kw["padding"] == "same",
             "padding": kw["padding"] if isinstance(kw["padding"], int) else 0}
    record(case, x, y, dy, dx, proj, hyper)

# --- Activations ------------------------------------------------------------------------------
for case, fn in [("gelu", nn.GELU()), ("relu", nn.ReLU())]:
    x, y, dy, dx = run(fn, torch.randn(3, 4, 5) * 2)
    record(case, x, y, dy, dx, fn, {})

# --- Normalisation ----------------------------------------------------------------------------
ln = nn.LayerNorm(8)
randomize(ln)
x, y, dy, dx = run(ln, torch.randn(2, 5, 8) * 3 + 1)
record("layernorm", x, y, dy, dx, ln, {"dim": 8})


class TokenBatchNorm(nn.Module):
    """BatchNorm1d over d_model with statistics over batch x time, as TST applies it."""

    def __init__(self, d):
        super().__init__()
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x):  # (batch, seq, d)
        return self.bn(x.permute(0, 2, 1)).permute(0, 2, 1)


bn = TokenBatchNorm(8)
randomize(bn)
x, y, dy, dx = run(bn, torch.randn(2, 5, 8) * 2 - 1)
record("batchnorm_train", x, y, dy, dx, bn, {"dim": 8},
       buffers=("bn.running_mean", "bn.running_var"))

bn_eval = TokenBatchNorm(8)
randomize(bn_eval)
with torch.no_grad():
    bn_eval.bn.running_mean.copy_(torch.randn(8))
    bn_eval.bn.running_var.copy_(torch.rand(8) + 0.5)
running = {"running_mean": bn_eval.bn.running_mean.clone(), "running_var": bn_eval.bn.running_var.clone()}
bn_eval.eval()
x, y, dy, dx = run(bn_eval, torch.randn(2, 5, 8))
record("batchnorm_eval", x, y, dy, dx, bn_eval, {"dim": 8}, buffers=("bn.running_mean", "bn.running_var"))

# --- Multi-head attention -----------------------------------------------------------------------
def padding_mask(lengths, seq):
    return torch.arange(seq)[None, :] >= torch.tensor(lengths)[:, None]  # True = ignore


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)

    def forward(self, x, key_padding_mask=None, attn_mask=None):
        return self.self_attn(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                              need_weights=False)[0]


for case, use_kpm, use_mask in [("mha", False, False), ("mha_padding", True, False),
                                ("mha_masks", True, True)]:
    mha = SelfAttention(8, 2)
    randomize(mha)
    seq = 6
    kpm = padding_mask([6, 4, 2], seq) if use_kpm else None
    mask = torch.randn(seq, seq) if use_mask else None
    x, y, dy, dx = run(mha, torch.randn(3, seq, 8), key_padding_mask=kpm, attn_mask=mask)
    if kpm is not None:
        put(f"{case}.key_padding_mask", kpm.to(torch.float32))
    if mask is not None:
        put(f"{case}.attn_mask", mask)
    record(case, x, y, dy, dx, mha, {"d_model": 8, "heads": 2})

# --- Encoder layers -----------------------------------------------------------------------------
class BatchNormEncoderLayer(nn.Module):
    """TST's TransformerBatchNormEncoderLayer: post-norm with BatchNorm1d over batch x time."""

    def __init__(self, d, heads, ff, activation):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=0.0)
        self.linear1 = nn.Linear(d, ff)
        self.linear2 = nn.Linear(ff, d)
        self.norm1 = nn.BatchNorm1d(d, eps=1e-5)
        self.norm2 = nn.BatchNorm1d(d, eps=1e-5)
        self.activation = F.gelu if activation == "gelu" else F.relu

    def forward(self, src, src_key_padding_mask=None):  # src: (seq, batch, d) as in TST
        src2 = self.self_attn(src, src, src, key_padding_mask=src_key_padding_mask)[0]
        src = src + src2
        src = self.norm1(src.permute(1, 2, 0)).permute(2, 0, 1)
        src2 = self.linear2(self.activation(self.linear1(src)))
        src = src + src2
        return self.norm2(src.permute(1, 2, 0)).permute(2, 0, 1)


class BatchFirst(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, src_key_padding_mask=None):
        return self.layer(x.transpose(0, 1), src_key_padding_mask=src_key_padding_mask).transpose(0, 1)


class Stack(nn.Module):
    """TST's encoder: a stack of layers without a final norm (names layers.{i}.*)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x, src_key_padding_mask=None):
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=src_key_padding_mask)
        return x


d, heads, ff, seq = 8, 2, 16, 5
kpm = padding_mask([5, 3, 4], seq)
for case, make, hyper in [
    ("encoder_layernorm_post",
     lambda: nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True),
     {"norm": "layernorm", "norm_first": False, "activation": "gelu"}),
    ("encoder_layernorm_pre",
     lambda: nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="relu", batch_first=True,
                                        norm_first=True),
     {"norm": "layernorm", "norm_first": True, "activation": "relu"}),
    ("encoder_batchnorm_post", lambda: BatchFirst(BatchNormEncoderLayer(d, heads, ff, "gelu")),
     {"norm": "batchnorm", "norm_first": False, "activation": "gelu"}),
]:
    layer = make()
    randomize(layer, 1.5)
    x, y, dy, dx = run(layer, torch.randn(3, seq, d), src_key_padding_mask=kpm)
    put(f"{case}.key_padding_mask", kpm.to(torch.float32))
    hyper.update({"d_model": d, "heads": heads, "dim_feedforward": ff, "layers": 1})
    # Parameter names without the BatchFirst wrapper's "layer." prefix.
    named = {n.removeprefix("layer."): p for n, p in layer.named_parameters()}
    put(f"{case}.x", x)
    put(f"{case}.y", y)
    put(f"{case}.dy", dy)
    put(f"{case}.dx", dx)
    for n, p in named.items():
        put(f"{case}.param.{n}", p)
        put(f"{case}.grad.{n}", p.grad)
    metadata[case] = json.dumps(hyper)

stack = Stack([BatchFirst(BatchNormEncoderLayer(d, heads, ff, "gelu")) for _ in range(2)])
randomize(stack)
x, y, dy, dx = run(stack, torch.randn(3, seq, d), src_key_padding_mask=kpm)
put("encoder_stack.key_padding_mask", kpm.to(torch.float32))
put("encoder_stack.x", x)
put("encoder_stack.y", y)
put("encoder_stack.dy", dy)
put("encoder_stack.dx", dx)
for n, p in stack.named_parameters():
    n = n.replace(".layer.", ".")
    put(f"encoder_stack.param.{n}", p)
    put(f"encoder_stack.grad.{n}", p.grad)
metadata["encoder_stack"] = json.dumps({"norm": "batchnorm", "norm_first": False, "activation": "gelu",
                                        "d_model": d, "heads": heads, "dim_feedforward": ff, "layers": 2})


out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layers.safetensors")
write_safetensors(out, tensors, metadata)
print(f"wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes")

#!/usr/bin/python3
"""Golden values for kformer's whole-model TST parity tests (tests/test_tst_parity.cpp), computed
by PyTorch, and a check that kformer-written checkpoints load back into PyTorch.

The TST model is rebuilt here from the reference code's description (ts_transformer.py of Zerveas
et al., KDD 2021; see /work/shared/REFERENCE.md): TSTransformerEncoder (imputation) and
TSTransformerEncoderClassiregressor (classification/regression), with a Linear input projection
times sqrt(d_model), the fixed or learnable positional encoding with dropout, nn.TransformerEncoder
over TST's TransformerBatchNormEncoderLayer or nn.TransformerEncoderLayer (LayerNorm), the
activation, dropout1 and the output layer (the classifier zeroes padded steps and flattens).

Generating (Debian's python3-torch; run from anywhere):

    /usr/bin/python3 tests/golden/make_tst_goldens.py

For every case it sets random non-trivial weights (norm weights near 1, non-zero biases, BatchNorm
running statistics calibrated on data and then perturbed), torch.save's the state_dict (in the
formats the TST code and its users write: a bare state_dict, TST's {"epoch", "state_dict",
"optimizer"}, with a torch.compile "_orig_mod." prefix) and converts it with
tools/pth_to_safetensors.py into the kformer checkpoint directory tests/golden/tst/<case>/, then
records eval-mode outputs for fixed inputs (batch 4, unequal lengths, padding masks) in
tests/golden/tst_parity.safetensors. A training case records one optimizer step of the imputation
model (dropout 0, Adam lr 1e-3, gradient clipping at 4.0, TST's masked MSE over masked and observed
values). The .pth files are written to a temporary directory (--keep-pth DIR keeps them).

Tensors in tst_parity.safetensors (float32):
  <case>.x (B, S, F), <case>.keep (B, S) 1 = observed step, <case>.y: (B, S, F) for imputation,
      (B, n_out) otherwise, computed in float32; <case>.y_f64: the same model in float64
  train.x (the masked model input), train.target, train.loss_mask (1 = scored), train.keep,
      train.loss, train.grad_norm (before clipping), train.grad.<name> (after clipping),
      train.after.<state_dict name> (every parameter, running statistic and num_batches_tracked
      after the step)
Metadata: for each case, a JSON string with its hyper-parameters, its checkpoint directory
(relative to tests/golden) and PyTorch's state_dict as [[name, shape, dtype], ...].

Checking kformer-written checkpoints (the other direction):

    /usr/bin/python3 tests/golden/make_tst_goldens.py --check-checkpoint DIR [DIR ...]

builds the PyTorch TST module that DIR/config.json describes, reads DIR/model.safetensors (with
this script's own reader), drops the keys that are not model state ("optimizer.", "training.",
"standardization.") and calls load_state_dict(strict=True). When DIR's name is one of the cases
below, it also compares the outputs on that case's golden inputs (eval cases) or the weights with
train.after.* (the training case). The parity test writes such checkpoints when
KFORMER_TST_EXPORT_DIR is set:

    KFORMER_TST_EXPORT_DIR=/tmp/kformer-export build-interop/tests/test_tst_parity
    /usr/bin/python3 tests/golden/make_tst_goldens.py --check-checkpoint /tmp/kformer-export/*/
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from golden_safetensors import read_safetensors, write_safetensors

# PyTorch 2.x notes that TST's layers (batch_first=False) cannot use its nested-tensor fast path.
warnings.filterwarnings("ignore", message="enable_nested_tensor is True")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONVERTER = os.path.join(ROOT, "tools", "pth_to_safetensors.py")
GOLDEN = os.path.join(HERE, "tst_parity.safetensors")
CHECKPOINTS = os.path.join(HERE, "tst")
NOT_MODEL_STATE = ("optimizer.", "training.", "standardization.")


# --- TST, as ts_transformer.py defines it -------------------------------------------------------------
def _get_activation_fn(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise ValueError(f"activation should be relu/gelu, not {activation}")


class FixedPositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=1024, scale_factor=1.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = scale_factor * pe.unsqueeze(0).transpose(0, 1)  # (max_len, 1, d_model)
        self.register_buffer("pe", pe)

    def forward(self, x):  # x: (seq, batch, d)
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


class LearnablePositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=1024):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.pe = nn.Parameter(torch.empty(max_len, 1, d_model))
        nn.init.uniform_(self.pe, -0.02, 0.02)

    def forward(self, x):
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


def get_pos_encoder(pos_encoding):
    if pos_encoding == "learnable":
        return LearnablePositionalEncoding
    if pos_encoding == "fixed":
        return FixedPositionalEncoding
    raise NotImplementedError(f"pos_encoding should be 'learnable'/'fixed', not '{pos_encoding}'")


class TransformerBatchNormEncoderLayer(nn.modules.Module):
    """Post-norm encoder layer with BatchNorm1d over d_model (statistics over batch x time)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu"):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.BatchNorm1d(d_model, eps=1e-5)
        self.norm2 = nn.BatchNorm1d(d_model, eps=1e-5)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _get_activation_fn(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=None):  # is_causal: PyTorch 2.x
        src2 = self.self_attn(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)  # (seq_len, batch_size, d_model)
        src = src.permute(1, 2, 0)  # (batch_size, d_model, seq_len)
        src = self.norm1(src)
        src = src.permute(2, 0, 1)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = src.permute(1, 2, 0)
        src = self.norm2(src)
        src = src.permute(2, 0, 1)
        return src


def _encoder(d_model, n_heads, num_layers, dim_feedforward, dropout, activation, norm):
    if norm == "LayerNorm":
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward, dropout, activation=activation)
    else:
        layer = TransformerBatchNormEncoderLayer(d_model, n_heads, dim_feedforward, dropout, activation=activation)
    return nn.TransformerEncoder(layer, num_layers)


class TSTransformerEncoder(nn.Module):
    def __init__(self, feat_dim, max_len, d_model, n_heads, num_layers, dim_feedforward, dropout=0.1,
                 pos_encoding="fixed", activation="gelu", norm="BatchNorm", freeze=False):
        super().__init__()
        self.max_len = max_len
        self.d_model = d_model
        self.n_heads = n_heads
        self.project_inp = nn.Linear(feat_dim, d_model)
        self.pos_enc = get_pos_encoder(pos_encoding)(d_model, dropout=dropout * (1.0 - freeze), max_len=max_len)
        self.transformer_encoder = _encoder(d_model, n_heads, num_layers, dim_feedforward,
                                            dropout * (1.0 - freeze), activation, norm)
        self.output_layer = nn.Linear(d_model, feat_dim)
        self.act = _get_activation_fn(activation)
        self.dropout1 = nn.Dropout(dropout)
        self.feat_dim = feat_dim

    def forward(self, X, padding_masks):  # X: (batch, seq, feat_dim); padding_masks: True = keep
        inp = X.permute(1, 0, 2)
        inp = self.project_inp(inp) * math.sqrt(self.d_model)
        inp = self.pos_enc(inp)
        output = self.transformer_encoder(inp, src_key_padding_mask=~padding_masks)
        output = self.act(output)
        output = output.permute(1, 0, 2)
        output = self.dropout1(output)
        return self.output_layer(output)  # (batch, seq, feat_dim)


class TSTransformerEncoderClassiregressor(nn.Module):
    def __init__(self, feat_dim, max_len, d_model, n_heads, num_layers, dim_feedforward, num_classes,
                 dropout=0.1, pos_encoding="fixed", activation="gelu", norm="BatchNorm", freeze=False):
        super().__init__()
        self.max_len = max_len
        self.d_model = d_model
        self.n_heads = n_heads
        self.project_inp = nn.Linear(feat_dim, d_model)
        self.pos_enc = get_pos_encoder(pos_encoding)(d_model, dropout=dropout * (1.0 - freeze), max_len=max_len)
        self.transformer_encoder = _encoder(d_model, n_heads, num_layers, dim_feedforward,
                                            dropout * (1.0 - freeze), activation, norm)
        self.act = _get_activation_fn(activation)
        self.dropout1 = nn.Dropout(dropout)
        self.feat_dim = feat_dim
        self.num_classes = num_classes
        self.output_layer = nn.Linear(d_model * max_len, num_classes)

    def forward(self, X, padding_masks):
        inp = X.permute(1, 0, 2)
        inp = self.project_inp(inp) * math.sqrt(self.d_model)
        inp = self.pos_enc(inp)
        output = self.transformer_encoder(inp, src_key_padding_mask=~padding_masks)
        output = self.act(output)
        output = output.permute(1, 0, 2)
        output = self.dropout1(output)
        output = output * padding_masks.unsqueeze(-1)  # zero-out padding embeddings
        output = output.reshape(output.shape[0], -1)  # (batch, seq * d_model)
        return self.output_layer(output)


def build_model(h):
    """The PyTorch TST module for hyper-parameters in kformer's config names (config.json "model")."""
    common = dict(feat_dim=h["feat_dim"], max_len=h["max_len"], d_model=h["d_model"], n_heads=h["n_heads"],
                  num_layers=h["num_layers"], dim_feedforward=h["dim_feedforward"], dropout=h["dropout"],
                  pos_encoding=h["pos_encoding"], activation=h["activation"],
                  norm="BatchNorm" if h["normalization_layer"] == "batchnorm" else "LayerNorm")
    if h.get("projection", "linear") != "linear" or h.get("norm_first", False):
        raise ValueError("TST has a Linear projection and post-norm layers only")
    if h["task"] == "imputation":
        return TSTransformerEncoder(**common)
    return TSTransformerEncoderClassiregressor(num_classes=h["num_outputs"], **common)


def eval_forward(model, x, keep):
    """Eval-mode outputs on the standard (non-fast) path: with gradients enabled and parameters
    requiring them, PyTorch does not switch to its nested-tensor fast path (which returns zeros at
    padded steps)."""
    model.eval()
    with torch.enable_grad():
        assert all(p.requires_grad for p in model.parameters())
        return model(x, keep).detach()


def torch_state_dict(arrays, model):
    """The model-state entries of a kformer checkpoint as tensors of the module's dtypes."""
    reference = model.state_dict()
    out = {}
    for name, a in arrays.items():
        if name.startswith(NOT_MODEL_STATE):
            continue
        t = torch.from_numpy(a)
        out[name] = t.to(reference[name].dtype) if name in reference else t
    return out


# --- cases ------------------------------------------------------------------------------------------------
COMMON = dict(feat_dim=5, max_len=12, d_model=16, n_heads=4, num_layers=3, dim_feedforward=32)
CASES = [  # name, hyper-parameters (kformer config names), series lengths, how the .pth is saved
    ("imputation_fixed_batchnorm",
     dict(task="imputation", pos_encoding="fixed", normalization_layer="batchnorm", activation="gelu"),
     [10, 7, 4, 2], "tst_checkpoint"),
    ("imputation_learnable_layernorm",
     dict(task="imputation", pos_encoding="learnable", normalization_layer="layernorm", activation="relu"),
     [10, 8, 5, 1], "state_dict"),
    ("classification_learnable_batchnorm",
     dict(task="classification", pos_encoding="learnable", normalization_layer="batchnorm", activation="gelu",
          num_outputs=3),
     [12, 9, 5, 2], "compiled"),
    ("classification_fixed_layernorm",
     dict(task="classification", pos_encoding="fixed", normalization_layer="layernorm", activation="gelu",
          num_outputs=4),
     [12, 11, 6, 3], "state_dict"),
    ("regression_fixed_batchnorm",
     dict(task="regression", pos_encoding="fixed", normalization_layer="batchnorm", activation="relu",
          num_outputs=2),
     [12, 7, 12, 4], "state_dict"),
]
TRAIN_CASE = "train_imputation_fixed_batchnorm"
TRAIN_HYPER = dict(task="imputation", pos_encoding="fixed", normalization_layer="batchnorm", activation="gelu")
TRAIN_LENGTHS = [10, 8, 5, 3]
TRAIN_SEQ = 10
LR, CLIP = 1e-3, 4.0
MASKING_RATIO, MEAN_MASK_LENGTH = 0.25, 3


def hyper_of(h):
    out = dict(COMMON, dropout=0.1, projection="linear", norm_first=False, num_outputs=0)
    out.update(h)
    return out


def randomize(model, gen):
    """Non-trivial values for every parameter: norm weights near 1, non-zero biases, matrices
    scaled by their fan-in, a learnable encoding of the same scale as the projected inputs."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if name == "pos_enc.pe":
                p.copy_(0.5 * r)
            elif p.dim() == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * r)
            elif p.dim() == 1:
                p.copy_(0.3 * r)
            else:
                p.copy_(r / math.sqrt(p[0].numel()))


def calibrate_batch_norms(model, gen, h):
    """BatchNorm running statistics from a few training-mode passes over random data (so that eval
    mode sees realistic scales), then perturbed, with an arbitrary num_batches_tracked."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    if not bns:
        return
    for bn in bns:
        bn.momentum = None  # cumulative average
        bn.reset_running_stats()
    model.train()
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(8, h["max_len"], h["feat_dim"], generator=gen)
            model(x, torch.ones(8, h["max_len"], dtype=torch.bool))
    with torch.no_grad():
        for i, bn in enumerate(bns):
            bn.momentum = 0.1
            bn.running_mean.add_(0.1 * torch.randn(bn.running_mean.shape, generator=gen))
            bn.running_var.mul_(0.8 + 0.4 * torch.rand(bn.running_var.shape, generator=gen))
            bn.num_batches_tracked.fill_(1000 + 17 * i)
    model.eval()


def inputs(gen, lengths, seq, feat_dim):
    """x (B, S, F) with zeros at padded steps (as TST's collate writes them), keep (B, S) bool."""
    keep = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.randn(len(lengths), seq, feat_dim, generator=gen) * 1.5 + 0.2
    return x * keep[:, :, None], keep


def geom_noise_mask_single(L, lm, masking_ratio, rng):
    """TST's geometric noise mask for one variable: True = keep, False = masked."""
    keep_mask = np.ones(L, dtype=bool)
    p_m = 1 / lm
    p_u = p_m * masking_ratio / (1 - masking_ratio)
    p = [p_m, p_u]
    state = int(rng.random() > masking_ratio)  # 0: masking, 1: not masking
    for i in range(L):
        keep_mask[i] = state
        if rng.random() < p[state]:
            state = 1 - state
    return keep_mask


def save_pth(model, path, how):
    """torch.save the model's state_dict in one of the forms converters meet."""
    state = model.state_dict()
    if how == "tst_checkpoint":  # TST's utils.save_model, with an Adam state (a step on zero gradients)
        twin = copy.deepcopy(model)
        optimizer = torch.optim.Adam(twin.parameters(), lr=1e-3)
        for p in twin.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        torch.save({"epoch": 7, "state_dict": state, "optimizer": optimizer.state_dict()}, path)
    elif how == "compiled":  # torch.compile'd module
        torch.save({f"_orig_mod.{k}": v for k, v in state.items()}, path)
    else:
        torch.save(state, path)


def convert(pth, case, h, extra=()):
    out = os.path.join(CHECKPOINTS, case)
    if os.path.isdir(out):
        shutil.rmtree(out)
    cmd = [sys.executable, CONVERTER, pth, out, "--heads", str(h["n_heads"]), "--activation", h["activation"],
           "--pos-encoding", h["pos_encoding"], "--dropout", str(h["dropout"]), "--no-normalization"]
    if h["task"] != "imputation":
        cmd += ["--task", h["task"]]
    if h["task"] == "classification":
        cmd += ["--class-names", ",".join(f"class_{chr(ord('a') + i)}" for i in range(h["num_outputs"]))]
    subprocess.run(cmd + list(extra), check=True)
    return out


def check_converted(directory, model, h):
    """The converted checkpoint holds exactly the module's state_dict and the right config."""
    arrays, _ = read_safetensors(os.path.join(directory, "model.safetensors"))
    arrays = {k: v for k, v in arrays.items() if not k.startswith(NOT_MODEL_STATE)}
    state = model.state_dict()
    assert sorted(arrays) == sorted(state), (sorted(arrays), sorted(state))
    for name, t in state.items():
        a = arrays[name]
        assert tuple(a.shape) == tuple(t.shape), name
        expected = t.numpy().astype(np.int64 if name.endswith("num_batches_tracked") else np.float32)
        assert a.dtype == expected.dtype and np.array_equal(a, expected), name
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)["model"]
    for key in ("feat_dim", "max_len", "d_model", "n_heads", "num_layers", "dim_feedforward", "activation",
                "normalization_layer", "pos_encoding", "task", "num_outputs", "projection", "norm_first"):
        assert config[key] == h[key], (key, config[key], h[key])
    # And the module loads the file strictly.
    fresh = build_model(config)
    fresh.load_state_dict(torch_state_dict(arrays, fresh), strict=True)


def state_dict_listing(model):
    return [[name, list(t.shape), "I64" if name.endswith("num_batches_tracked") else "F32"]
            for name, t in model.state_dict().items()]


def max_rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def generate(keep_pth):
    torch.manual_seed(20210814)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(4242)
    tensors, metadata = {}, {}

    def put(name, t):
        t = torch.as_tensor(t)
        tensors[name] = t.detach().to(torch.float32).reshape(t.shape if t.dim() else (1,)).contiguous().numpy()

    os.makedirs(CHECKPOINTS, exist_ok=True)
    pth_dir = keep_pth or tempfile.mkdtemp(prefix="kformer-tst-pth-")
    os.makedirs(pth_dir, exist_ok=True)
    try:
        for case, spec, lengths, how in CASES:
            h = hyper_of(spec)
            model = build_model(h)
            randomize(model, gen)
            calibrate_batch_norms(model, gen, h)
            seq = h["max_len"] if h["task"] != "imputation" else max(lengths)
            x, keep = inputs(gen, lengths, seq, h["feat_dim"])
            y = eval_forward(model, x, keep)
            y64 = eval_forward(copy.deepcopy(model).double(), x.double(), keep)
            pth = os.path.join(pth_dir, f"{case}.pth")
            save_pth(model, pth, how)
            directory = convert(pth, case, h)
            check_converted(directory, model, h)
            put(f"{case}.x", x)
            put(f"{case}.keep", keep)
            put(f"{case}.y", y)
            put(f"{case}.y_f64", y64)
            metadata[case] = json.dumps(dict(h, lengths=lengths, seq=seq, checkpoint=f"tst/{case}",
                                             state_dict=state_dict_listing(model)))
            print(f"{case}: y {tuple(y.shape)}, PyTorch float32 vs float64 max rel error {max_rel(y, y64):.2e}")

        # --- one training step of the imputation model -------------------------------------------------------
        h = hyper_of(dict(TRAIN_HYPER, dropout=0.0))
        model = build_model(h)
        randomize(model, gen)
        calibrate_batch_norms(model, gen, h)
        pth = os.path.join(pth_dir, f"{TRAIN_CASE}.pth")
        save_pth(model, pth, "state_dict")
        directory = convert(pth, TRAIN_CASE, h)
        check_converted(directory, model, h)
        listing = state_dict_listing(model)

        target, keep = inputs(gen, TRAIN_LENGTHS, TRAIN_SEQ, h["feat_dim"])
        rng = np.random.default_rng(99)
        noise_keep = torch.ones_like(target, dtype=torch.bool)  # True = keep (TST's mask convention)
        for b, length in enumerate(TRAIN_LENGTHS):
            for f in range(h["feat_dim"]):
                noise_keep[b, :length, f] = torch.from_numpy(geom_noise_mask_single(length, MEAN_MASK_LENGTH,
                                                                                    MASKING_RATIO, rng))
        x = target * noise_keep  # TST's collate_unsuperv: X = X * target_masks
        loss_mask = ~noise_keep & keep[:, :, None]  # target_masks = ~target_masks; * padding_masks
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        optimizer.zero_grad()
        pred = model(x, keep)
        loss = F.mse_loss(pred[loss_mask], target[loss_mask])  # TST's MaskedMSELoss, averaged
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=CLIP)
        assert grad_norm > CLIP, f"gradient norm {float(grad_norm)} does not reach the clipping threshold"
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        optimizer.step()
        put("train.x", x)
        put("train.target", target)
        put("train.loss_mask", loss_mask)
        put("train.keep", keep)
        put("train.loss", loss)
        put("train.grad_norm", grad_norm)
        for n, g in grads.items():
            put(f"train.grad.{n}", g)
        for n, t in model.state_dict().items():
            put(f"train.after.{n}", t)
        metadata[TRAIN_CASE] = json.dumps(dict(h, lengths=TRAIN_LENGTHS, seq=TRAIN_SEQ, checkpoint=f"tst/{TRAIN_CASE}",
                                               state_dict=listing, lr=LR, clip_norm=CLIP, optimizer="Adam",
                                               betas=[0.9, 0.999], eps=1e-8, masked=int(loss_mask.sum())))
        print(f"{TRAIN_CASE}: loss {float(loss.detach()):.6f} over {int(loss_mask.sum())} values, gradient norm "
              f"{float(grad_norm):.4f} (clipped to {CLIP})")
    finally:
        if not keep_pth:
            shutil.rmtree(pth_dir)

    write_safetensors(GOLDEN, tensors, metadata)
    print(f"wrote {GOLDEN}: {len(tensors)} tensors, {os.path.getsize(GOLDEN)} bytes; checkpoints in {CHECKPOINTS}")


def check_checkpoints(directories):
    """Loads kformer-written checkpoints into the PyTorch TST module strictly, and compares them with
    the goldens where the directory is named after a case. Returns the number of failures."""
    golden, meta = read_safetensors(GOLDEN) if os.path.exists(GOLDEN) else ({}, {})
    failures = 0
    for directory in directories:
        name = os.path.basename(os.path.normpath(directory))
        try:
            with open(os.path.join(directory, "config.json")) as f:
                config = json.load(f)
            if config.get("format") != "kformer-tst/1":
                raise ValueError(f"config.json has format {config.get('format')!r}, expected 'kformer-tst/1'")
            model = build_model(config["model"])
            arrays, _ = read_safetensors(os.path.join(directory, "model.safetensors"))
            model.load_state_dict(torch_state_dict(arrays, model), strict=True)
            skipped = sorted({n.split(".")[0] + "." for n in arrays if n.startswith(NOT_MODEL_STATE)})
            report = f"load_state_dict(strict=True) ok ({len(model.state_dict())} entries"
            report += f"; not model state: {', '.join(skipped)})" if skipped else ")"
            if f"{name}.x" in golden:
                x = torch.from_numpy(golden[f"{name}.x"])
                keep = torch.from_numpy(golden[f"{name}.keep"]) != 0
                y = eval_forward(model, x, keep)
                err = max_rel(y, torch.from_numpy(golden[f"{name}.y"]))
                report += f"; eval outputs vs golden: max rel error {err:.2e}"
                if not err <= 1e-5:
                    raise ValueError(report)
            elif name == TRAIN_CASE and "train.after.project_inp.weight" in golden:
                # As the C++ test: weights whose PyTorch gradient is at rounding-noise level (zero in
                # exact arithmetic) move by Adam's lr in a direction that noise decides.
                g_max = max(float(np.abs(a).max()) for n, a in golden.items() if n.startswith("train.grad."))
                worst, worst_noise, n_noise = 0.0, 0.0, 0
                for n, t in model.state_dict().items():
                    diff = np.abs(t.double().numpy() - golden[f"train.after.{n}"].reshape(t.shape))
                    noise = (np.abs(golden[f"train.grad.{n}"].reshape(t.shape)) <= 1e-6 * g_max
                             if f"train.grad.{n}" in golden else np.zeros(t.shape, dtype=bool))
                    worst = max(worst, float(diff[~noise].max(initial=0.0)))
                    worst_noise = max(worst_noise, float(diff[noise].max(initial=0.0)))
                    n_noise += int(noise.sum())
                report += (f"; state vs PyTorch's step: max abs difference {worst:.2e}"
                           f" ({n_noise} weights with noise-level gradients: {worst_noise:.2e},"
                           f" at most 2 lr = {2 * LR})")
                if not (worst <= 1e-5 and worst_noise <= 2 * LR * (1 + 1e-4)):
                    raise ValueError(report)
            print(f"{directory}: {report}")
        except Exception as e:  # report every directory
            failures += 1
            print(f"{directory}: FAILED: {e}")
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check-checkpoint", nargs="+", metavar="DIR",
                   help="load kformer checkpoint directories into PyTorch (strict) instead of generating")
    p.add_argument("--keep-pth", metavar="DIR", help="keep the torch.save'd .pth files in DIR")
    args = p.parse_args()
    if args.check_checkpoint:
        sys.exit(1 if check_checkpoints(args.check_checkpoint) else 0)
    generate(args.keep_pth)


if __name__ == "__main__":
    main()

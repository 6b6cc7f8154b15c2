#!/usr/bin/python3
"""Convert a PyTorch TST checkpoint into a kformer checkpoint directory.

The input is what torch.save wrote for a TST model (Zerveas et al., KDD 2021): either the model's
state_dict itself, or a dict holding it under "state_dict", as the TST reference code saves
({"epoch", "state_dict", "optimizer"}). The output is a kformer checkpoint directory:

    OUT/model.safetensors   the state dict by TST names (float32, or float64 with --dtype float64;
                            num_batches_tracked as int64 scalars; "_orig_mod." and "module."
                            prefixes stripped)
    OUT/config.json         {"format": "kformer-tst/1", "model": {...}, "class_names": [...], ...}

which `kformer predict --checkpoint OUT` and kformer::load_checkpoint read.

Everything the weights show is inferred from them: feat_dim and d_model (project_inp.weight; a
rank-3 weight is a Conv1d projection and gives its kernel size), num_layers and dim_feedforward
(the transformer_encoder.layers.*), BatchNorm or LayerNorm (running_mean keys present or not),
max_len (pos_enc.pe, or the classifier's output layer: (n_out, d_model * max_len)), and the task
(an output layer of shape (feat_dim, d_model) is imputation, (n_out, d_model * max_len) is
classification or regression). Whether pos_enc.pe is TST's fixed sinusoid table or a learned one
is read from its values unless --pos-encoding says. What the weights cannot show comes from flags:
--heads (required), --activation, --dropout, --task when classification and regression cannot
be told apart, --class-names, and --max-len for an imputation model without an encoding table.
Inconsistent inputs (missing, unexpected or mis-shaped keys, flags the weights contradict) stop
the conversion with one message listing every problem, before anything is written.

The optimizer state of a TST checkpoint is not converted (kformer starts a fresh optimizer).

Only Debian's python3-torch and numpy are needed. Run it with Debian's Python:

    /usr/bin/python3 tools/pth_to_safetensors.py model_best.pth out/ --heads 8
    /usr/bin/python3 tools/pth_to_safetensors.py model_last.pth out/ --heads 8 --activation relu \\
        --task classification --class-names walking,running,cycling
    /usr/bin/python3 tools/pth_to_safetensors.py --help

The input is unpickled with an unpickler that refuses to import anything but tensors, dtypes and
OrderedDict (what torch.load(weights_only=True) allows; its own unpickler in PyTorch 1.13 cannot
read the optimizer state that TST checkpoints hold). --trust-pickle loads a full pickle (only for
files you trust), which also accepts a torch.save'd nn.Module whose class can be imported.
"""
import argparse
import json
import math
import os
import pickle
import re
import struct
import sys
import tempfile

import numpy as np
import torch

FORMAT = "kformer-tst/1"
WRAPPER_PREFIXES = ("_orig_mod.", "module.")  # torch.compile, DataParallel / DistributedDataParallel
LAYER_KEY = re.compile(r"^transformer_encoder\.layers\.(\d+)\.(.+)$")
LAYER_PARAMS = (
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
)
BATCH_NORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
# Fixed tables differ from a recomputed one by float32 rounding of position * div (~1e-4 at
# position 1000); a learned table (initialised in [-0.02, 0.02]) is nowhere near the sinusoids.
FIXED_TABLE_TOLERANCE = 1e-3


class ConversionError(Exception):
    """A problem with the input or the flags; the message says what and how to fix it."""


def fixed_table(max_len, d_model):
    """TST's FixedPositionalEncoding table (max_len, d_model), computed as TST computes it."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def _allowed_globals():
    """What a pickle of state dicts and optimizer states may name: tensor rebuilders, dtypes,
    OrderedDict. Storage classes are resolved by torch.load itself before they get here."""
    allowed = {("collections", "OrderedDict"), ("torch", "Size"), ("torch", "Tensor"),
               ("torch.nn.parameter", "Parameter"), ("torch.serialization", "_get_layout")}
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter", "_rebuild_parameter_with_state"):
        if hasattr(torch._utils, name):
            allowed.add(("torch._utils", name))
    for dtype in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"):
        allowed.add(("torch", dtype))
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """pickle's Unpickler (every opcode) that refuses to import anything but tensor machinery: the
    safety of torch.load(weights_only=True), whose own unpickler in PyTorch 1.13 cannot read the
    floats of an optimizer state (opcode BINFLOAT), as in every TST checkpoint."""
    ALLOWED = _allowed_globals()

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"the file pickles {module}.{name}, which is neither a tensor nor a dict"
                                         " of them")
        return super().find_class(module, name)


class _RestrictedPickle:
    """A pickle module for torch's loaders."""
    Unpickler = _RestrictedUnpickler
    __name__ = "kformer_restricted_pickle"

    @staticmethod
    def load(file, **kwargs):
        return _RestrictedUnpickler(file, **kwargs).load()


def _restricted_torch_load(path):
    """torch.load with _RestrictedPickle. PyTorch 1.13's torch.load replaces any pickle_module by
    pickle unless weights_only=True, so this calls the zip and legacy loaders that torch.load
    dispatches to; where they are missing (another PyTorch), torch.load(weights_only=True)."""
    ser = torch.serialization
    if not all(hasattr(ser, n) for n in ("_is_zipfile", "_open_zipfile_reader", "_load", "_legacy_load")):
        return torch.load(path, map_location="cpu", weights_only=True)
    with open(path, "rb") as f:
        if ser._is_zipfile(f):
            with ser._open_zipfile_reader(f) as zip_file:
                return ser._load(zip_file, "cpu", _RestrictedPickle, encoding="utf-8")
        return ser._legacy_load(f, "cpu", _RestrictedPickle, encoding="utf-8")


def load_state_dict(path, trust_pickle):
    """The state dict in a torch.save'd file, and the epoch it records (or None)."""
    try:
        if trust_pickle:
            obj = torch.load(path, map_location="cpu", weights_only=False)  # the default from PyTorch 2.6 is True
        else:
            obj = _restricted_torch_load(path)
    except FileNotFoundError:
        raise ConversionError(f"{path}: no such file")
    except Exception as e:  # pickle and zip errors have many types
        hint = "" if trust_pickle else " (if you trust the file, --trust-pickle loads any pickled object)"
        raise ConversionError(f"{path}: torch.load failed: {e}{hint}")
    epoch = None
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    elif isinstance(obj, dict) and "state_dict" in obj:
        epoch = obj.get("epoch")
        if "optimizer" in obj:
            print("note: the optimizer state in the file is not converted", file=sys.stderr)
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not obj:
        raise ConversionError(f"{path}: expected a state_dict (a dict of tensors) or a dict holding one under"
                              f" 'state_dict', got {type(obj).__name__}")
    not_tensors = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise ConversionError(f"{path}: the state_dict has entries that are not tensors: "
                              f"{', '.join(map(str, not_tensors))}")
    return obj, epoch


def strip_prefixes(state):
    """Drops torch.compile's "_orig_mod." and DataParallel's "module." prefixes (also nested)."""
    out = {}
    for key, value in state.items():
        name = key
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if name.startswith(prefix):
                    name, stripped = name[len(prefix):], True
        if name in out:
            raise ConversionError(f"two entries name '{name}' once prefixes are stripped (one is '{key}')")
        out[name] = value
    return out


def shape_text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ")"


def infer_config(state, args):
    """The kformer TstConfig (as its JSON dict) and the class names, from the weights and flags.
    Raises ConversionError listing every problem found."""
    problems = []

    def need(cond, message):
        if not cond:
            problems.append(message)
        return cond

    def shape(name):
        return tuple(state[name].shape) if name in state else None

    # --- projection: feat_dim, d_model, kind -----------------------------------------------------
    w = shape("project_inp.weight")
    if w is None or shape("project_inp.bias") is None:
        raise ConversionError("the state_dict has no project_inp.weight and project_inp.bias: not a TST model"
                              f" (keys start with: {', '.join(sorted(state)[:6])} ...)")
    if len(w) == 2:
        projection, kernel = "linear", 1
        d_model, feat_dim = w
    elif len(w) == 3:
        projection, (d_model, feat_dim, kernel) = "conv1d", w  # kformer pads it as padding='same'
    else:
        raise ConversionError(f"project_inp.weight has shape {shape_text(w)}: expected (d_model, feat_dim) for a Linear"
                              " or (d_model, feat_dim, kernel) for a Conv1d projection")
    need(shape("project_inp.bias") == (d_model,),
         f"project_inp.bias has shape {shape_text(shape('project_inp.bias'))}, expected ({d_model},)")

    # --- encoder layers ----------------------------------------------------------------------------
    layer_keys = {}
    for key in state:
        m = LAYER_KEY.match(key)
        if m:
            layer_keys.setdefault(int(m.group(1)), set()).add(m.group(2))
    num_layers = len(layer_keys)
    if num_layers == 0:
        raise ConversionError("the state_dict has no transformer_encoder.layers.* entries")
    need(sorted(layer_keys) == list(range(num_layers)),
         f"encoder layers are numbered {sorted(layer_keys)}, expected 0..{num_layers - 1}")
    ff_shape = shape("transformer_encoder.layers.0.linear1.weight")
    dim_feedforward = ff_shape[0] if ff_shape and len(ff_shape) == 2 else None
    need(dim_feedforward is not None,
         "transformer_encoder.layers.0.linear1.weight is missing or not a matrix: cannot tell dim_feedforward")
    has_running = [("norm1.running_mean" in keys or "norm2.running_mean" in keys) for keys in layer_keys.values()]
    if all(has_running):
        norm = "batchnorm"
    elif not any(has_running):
        norm = "layernorm"
    else:
        norm = None
        problems.append("some encoder layers have BatchNorm running statistics and others do not")
    expected = {
        "self_attn.in_proj_weight": (3 * d_model, d_model), "self_attn.in_proj_bias": (3 * d_model,),
        "self_attn.out_proj.weight": (d_model, d_model), "self_attn.out_proj.bias": (d_model,),
        "linear1.weight": (dim_feedforward, d_model), "linear1.bias": (dim_feedforward,),
        "linear2.weight": (d_model, dim_feedforward), "linear2.bias": (d_model,),
    }
    for n in ("norm1", "norm2"):
        expected[f"{n}.weight"] = (d_model,)
        expected[f"{n}.bias"] = (d_model,)
        if norm == "batchnorm":
            expected[f"{n}.running_mean"] = (d_model,)
            expected[f"{n}.running_var"] = (d_model,)
            expected[f"{n}.num_batches_tracked"] = ()
    for i in sorted(layer_keys):
        keys = layer_keys[i]
        prefix = f"transformer_encoder.layers.{i}."
        for name, want in expected.items():
            if name not in keys:
                problems.append(f"missing {prefix}{name} {shape_text(want)}")
            elif dim_feedforward is not None and shape(prefix + name) != want:
                problems.append(f"{prefix}{name} has shape {shape_text(shape(prefix + name))},"
                                f" expected {shape_text(want)}")
        for name in sorted(keys - set(expected)):
            problems.append(f"unexpected {prefix}{name} (kformer's TST layers have "
                            "self_attn.in_proj_*, self_attn.out_proj.*, linear1.*, linear2.*, norm1.*, norm2.*)")

    # --- heads, activation, dropout ------------------------------------------------------------------
    heads = args.heads
    need(heads >= 1 and d_model % heads == 0, f"--heads {heads} must divide d_model = {d_model}")
    need(0.0 <= args.dropout < 1.0, f"--dropout must be in [0, 1), got {args.dropout}")

    # --- positional encoding and max_len ------------------------------------------------------------
    pe = state.get("pos_enc.pe")
    table_len = None
    pos_encoding = args.pos_encoding
    if pe is not None:
        pe_shape = tuple(pe.shape)
        if pe_shape[-1:] != (d_model,) or len(pe_shape) not in (2, 3) or (len(pe_shape) == 3 and pe_shape[1] != 1):
            problems.append(f"pos_enc.pe has shape {shape_text(pe_shape)}, expected (max_len, 1, {d_model})")
        else:
            table_len = pe_shape[0]
            if d_model % 2 == 0:
                diff = float((pe.detach().reshape(table_len, d_model).double() -
                              fixed_table(table_len, d_model).double()).abs().max())
            else:
                diff = math.inf  # TST's fixed table needs an even d_model
            looks_fixed = diff <= max(FIXED_TABLE_TOLERANCE, 2 * torch.finfo(pe.dtype).eps)  # bfloat16 tables
            if pos_encoding is None:
                pos_encoding = "fixed" if looks_fixed else "learnable"
                print(f"note: pos_enc.pe {'is' if looks_fixed else 'is not'} TST's fixed sinusoid table"
                      f" (max difference {diff:.3g}): {pos_encoding} encoding", file=sys.stderr)
            elif pos_encoding == "fixed" and not looks_fixed:
                problems.append(f"--pos-encoding fixed, but pos_enc.pe differs from TST's fixed sinusoid table by up to"
                                f" {diff:.3g} (kformer recomputes a fixed table, so these values would be lost):"
                                " is it a learnable encoding (--pos-encoding learnable)?")
            elif pos_encoding == "none":
                problems.append("--pos-encoding none, but the state_dict has pos_enc.pe")
    else:
        if pos_encoding is None:
            pos_encoding = "none"
        elif pos_encoding == "learnable":
            problems.append("--pos-encoding learnable, but the state_dict has no pos_enc.pe")
    if pos_encoding == "fixed":
        need(d_model % 2 == 0, f"the fixed encoding needs an even d_model, got {d_model}")

    # --- output layer: task, outputs, max_len --------------------------------------------------------
    ow, ob = shape("output_layer.weight"), shape("output_layer.bias")
    task = args.task
    num_outputs = 0
    max_len = table_len
    if ow is None or ob is None or len(ow) != 2:
        raise ConversionError("output_layer.weight (a matrix) and output_layer.bias are needed; got "
                              f"{shape_text(ow) if ow else 'none'} and {shape_text(ob) if ob else 'none'}"
                              + ("\n  " + "\n  ".join(problems) if problems else ""))
    n_out, n_in = ow
    need(ob == (n_out,), f"output_layer.bias has shape {shape_text(ob)}, expected ({n_out},)")
    if task is None and n_in == d_model and n_out == feat_dim and not args.class_names:
        task = "imputation"
    if task == "imputation":
        need(ow == (feat_dim, d_model), f"an imputation head maps d_model to feat_dim: output_layer.weight should be"
                                        f" ({feat_dim}, {d_model}), got {shape_text(ow)}")
        if args.max_len is not None:
            need(table_len is None or args.max_len == table_len,
                 f"--max-len {args.max_len} contradicts pos_enc.pe's {table_len} rows")
            max_len = args.max_len
        if max_len is None:
            problems.append("an imputation model without a pos_enc.pe table does not show max_len: pass --max-len")
    else:
        if n_in % d_model != 0:
            problems.append(f"output_layer.weight has shape {shape_text(ow)}: its input size {n_in} is neither"
                            f" d_model = {d_model} (imputation) nor a multiple of it (classification/regression)")
        else:
            flat_len = n_in // d_model
            need(table_len is None or table_len == flat_len,
                 f"output_layer.weight {shape_text(ow)} flattens {flat_len} steps, but pos_enc.pe has {table_len} rows"
                 " (TST builds both from one max_len)")
            need(args.max_len is None or args.max_len == flat_len,
                 f"--max-len {args.max_len} contradicts output_layer.weight {shape_text(ow)} ({flat_len} steps)")
            max_len = flat_len
        num_outputs = n_out
        if task is None:
            if args.class_names:
                task = "classification"
            elif n_out == 1:
                task = "regression"
            else:
                problems.append(f"output_layer.weight {shape_text(ow)} gives {n_out} outputs: pass"
                                " --task classification or --task regression (the weights cannot tell them apart)")
        if task == "classification":
            need(n_out >= 2, f"classification needs at least 2 classes, output_layer has {n_out} output")
    if max_len is not None:
        need(max_len >= 1, f"max_len must be at least 1, got {max_len}")

    class_names = []
    if args.class_names:
        class_names = [c.strip() for c in args.class_names.split(",")]
        if task != "classification":
            problems.append(f"--class-names given for a {task} model")
        elif len(class_names) != num_outputs:
            problems.append(f"--class-names names {len(class_names)} classes, output_layer has {num_outputs} outputs")
        elif len(set(class_names)) != len(class_names) or not all(class_names):
            problems.append("--class-names must be distinct and non-empty")
    elif task == "classification":
        class_names = [str(i) for i in range(num_outputs)]
        print(f"note: no --class-names; the classes are named 0..{num_outputs - 1}", file=sys.stderr)

    # --- anything else is unexpected --------------------------------------------------------------
    known = {"project_inp.weight", "project_inp.bias", "output_layer.weight", "output_layer.bias", "pos_enc.pe"}
    for key in state:
        if key not in known and not LAYER_KEY.match(key):
            final_norm = key.startswith("transformer_encoder.norm")
            why = " (a final encoder norm, which TST does not have)" if final_norm else ""
            problems.append(f"unexpected key {key} {shape_text(tuple(state[key].shape))}{why}")
    for key, value in state.items():
        if key.endswith("num_batches_tracked"):
            need(not value.is_floating_point() and not value.is_complex(),
                 f"{key} has dtype {value.dtype}, expected an integer")
        elif not value.is_floating_point():
            problems.append(f"{key} has dtype {value.dtype}, expected a floating-point type")
        elif not bool(torch.isfinite(value).all()):
            problems.append(f"{key} holds NaN or infinite values")

    if problems:
        raise ConversionError("the checkpoint cannot be converted:\n  " + "\n  ".join(problems))
    config = {
        "feat_dim": int(feat_dim), "max_len": int(max_len), "d_model": int(d_model), "n_heads": int(heads),
        "num_layers": int(num_layers), "dim_feedforward": int(dim_feedforward), "dropout": float(args.dropout),
        "activation": args.activation, "normalization_layer": norm, "norm_first": False,
        "pos_encoding": pos_encoding, "projection": projection,
        "conv_kernel_size": int(kernel) if projection == "conv1d" else 3, "conv_dilation": int(args.conv_dilation),
        "task": task, "num_outputs": int(num_outputs), "seed": 0,
    }
    return config, class_names


SAFETENSORS_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<i8"): "I64"}


def write_safetensors(path, arrays, metadata):
    """Writes {name: numpy array} as safetensors: tensors by decreasing element size (so that each
    starts aligned), then in the given order; the header padded with spaces to 8 bytes."""
    order = sorted(arrays, key=lambda n: -arrays[n].dtype.itemsize)  # stable: keeps the given order
    header = {"__metadata__": metadata}
    offset = 0
    for name in order:
        a = arrays[name]
        header[name] = {"dtype": SAFETENSORS_DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name in order:
            f.write(np.ascontiguousarray(arrays[name]).tobytes())


def write_atomic(path, writer):
    """writer(temporary path), then rename onto path: a failed run leaves no partial file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def convert(state, epoch, args, source):
    """Writes the checkpoint directory args.output; returns the model config."""
    state = strip_prefixes(state)
    config, class_names = infer_config(state, args)
    dtype = np.dtype("<f8") if args.dtype == "float64" else np.dtype("<f4")
    arrays = {}
    for key, value in state.items():
        value = value.detach().cpu()
        if key.endswith("num_batches_tracked"):
            arrays[key] = value.to(torch.int64).reshape(()).numpy().astype("<i8")
        else:
            # bfloat16 has no numpy type: go through float64, which holds every float type exactly.
            arrays[key] = value.to(torch.float64).contiguous().numpy().astype(dtype)
    os.makedirs(args.output, exist_ok=True)
    weights = os.path.join(args.output, "model.safetensors")
    config_path = os.path.join(args.output, "config.json")
    existing = [p for p in (weights, config_path) if os.path.exists(p)]
    if existing and not args.force:
        raise ConversionError(f"{', '.join(existing)} already exist(s): pass --force to replace")
    metadata = {"format": FORMAT, "config": json.dumps(config, indent=2), "converted_from": os.path.basename(source),
                "converted_by": "tools/pth_to_safetensors.py"}
    if epoch is not None:
        metadata["source_epoch"] = str(epoch)
    write_atomic(weights, lambda p: write_safetensors(p, arrays, metadata))
    info = {"format": FORMAT, "model": config, "class_names": class_names, "next_epoch": 0, "step": 0,
            "has_optimizer": False}

    def write_config(p):
        with open(p, "w") as f:
            f.write(json.dumps(info, indent=2) + "\n")

    write_atomic(config_path, write_config)  # weights first: config.json only describes complete weights
    return config


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Convert a PyTorch TST checkpoint (.pth) into a kformer checkpoint directory "
                    "(model.safetensors + config.json).",
        epilog="Example: /usr/bin/python3 tools/pth_to_safetensors.py model_best.pth ckpt/ --heads 8")
    p.add_argument("input", help="torch.save'd state_dict, or a dict holding it under 'state_dict' (TST's .pth)")
    p.add_argument("output", help="checkpoint directory to write (created if missing)")
    p.add_argument("--heads", type=int, required=True, help="attention heads (the weights do not show them)")
    p.add_argument("--activation", choices=("gelu", "relu"), default="gelu", help="default gelu (TST's default)")
    p.add_argument("--pos-encoding", choices=("fixed", "learnable", "none"), default=None,
                   help="default: read from pos_enc.pe (TST's sinusoid table: fixed; other values: learnable;"
                        " absent: none)")
    p.add_argument("--task", choices=("imputation", "classification", "regression"), default=None,
                   help="default: imputation for an output layer (feat_dim, d_model); regression for one output;"
                        " needed otherwise unless --class-names is given")
    p.add_argument("--class-names", default=None, help="comma-separated class names in label order (classification)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout for further training (default 0.1)")
    p.add_argument("--max-len", type=int, default=None,
                   help="padded length, only needed for an imputation model without a pos_enc.pe table")
    p.add_argument("--conv-dilation", type=int, default=1, help="dilation of a Conv1d projection (default 1)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="stored precision")
    p.add_argument("--force", action="store_true", help="replace an existing model.safetensors / config.json")
    p.add_argument("--trust-pickle", action="store_true",
                   help="unpickle arbitrary objects (plain torch.load): only for files you trust")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        state, epoch = load_state_dict(args.input, args.trust_pickle)
        config = convert(state, epoch, args, args.input)
    except ConversionError as e:
        print(f"pth_to_safetensors: error: {e}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{k} {config[k]}" for k in ("task", "feat_dim", "max_len", "d_model", "n_heads", "num_layers",
                                                       "dim_feedforward", "normalization_layer", "pos_encoding",
                                                       "projection", "activation"))
    print(f"wrote {args.output}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

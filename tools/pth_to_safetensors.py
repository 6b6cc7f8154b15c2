#!/usr/bin/python3
"""Convert a PyTorch TST checkpoint into a kformer checkpoint directory.

The input is what the TST reference code (gzerveas/mvts_transformer, Zerveas et al., KDD 2021)
leaves in an experiment directory:

    EXPERIMENT/checkpoints/model_best.pth   {"epoch", "state_dict", "optimizer"} (torch.save)
    EXPERIMENT/configuration.json           every hyper-parameter of the run
    EXPERIMENT/normalization.pickle         the standardization (or min-max) of the training data

INPUT is the experiment directory (its checkpoints/model_best.pth is converted) or a .pth file
(a bare state_dict, TST's dict, a torch.compile'd or DataParallel model); configuration.json and
normalization.pickle are looked up beside it and in the directory above (where TST puts them),
or named with --configuration and --normalization. The output is a kformer checkpoint directory:

    OUT/model.safetensors   the state dict by TST names (float32, or float64 with --dtype float64;
                            num_batches_tracked as int64 scalars; "_orig_mod." and "module."
                            prefixes stripped), the standardization, and config.json's text in its
                            metadata ("checkpoint")
    OUT/config.json         {"format": "kformer-tst/1", "model": {...}, "class_names": [...], ...}

which `kformer predict --checkpoint OUT` and kformer::load_checkpoint read.

What the weights show is read from them: feat_dim and d_model (project_inp.weight; a rank-3
weight is a Conv1d projection and gives its kernel size), num_layers and dim_feedforward (the
transformer_encoder.layers.*), BatchNorm or LayerNorm (running_mean keys present or not), max_len
(pos_enc.pe, or the classifier's output layer: (n_out, d_model * max_len)), and the task (an
output layer of shape (feat_dim, d_model) is imputation, (n_out, d_model * max_len) is
classification or regression). What they cannot show (the heads, the activation, the dropout,
classification or regression) comes from configuration.json, or from flags where there is none;
a flag that contradicts configuration.json or the weights is refused, and so is a missing value
that would otherwise be guessed (without configuration.json: --heads and --activation are needed).
The class names of a classification model are TST's: the labels of its training data (the first
.ts file of configuration.json's data_dir matching its pattern) sorted as strings, as pandas'
categories order them; --class-names gives them when the data are not at hand.

TST's normalization becomes kformer's standardization x -> (x - mean) / std: "standardization"
gives mean and std + eps, "minmax" gives min and max - min + eps (eps = 2.2e-16, as TST adds);
a run without normalization (configuration.json's null, or --no-normalization) gives mean 0, std 1.
TST's per-sample normalizations are not stored by TST and have no kformer equivalent: refused.
Reading normalization.pickle needs pandas (its values are pandas Series; Debian: python3-pandas).

A fixed positional encoding is recomputed by kformer in double precision; TST's stored float32
table differs from it by float32 rounding (up to ~1e-5 at positions in the thousands). The
converter prints the largest difference; --keep-table stores TST's table as a learnable encoding
instead, which reproduces TST's numbers exactly (and is trained if the model is fine-tuned).

Inconsistent inputs (missing, unexpected or mis-shaped keys, flags the weights or the
configuration contradict) stop the conversion with one message listing every problem, before
anything is written. The optimizer state of a TST checkpoint is not converted (kformer starts a
fresh optimizer).

Only Debian's python3-torch, numpy and (for normalization.pickle) python3-pandas are needed. Run
it with Debian's Python:

    /usr/bin/python3 tools/pth_to_safetensors.py EXPERIMENT OUT
    /usr/bin/python3 tools/pth_to_safetensors.py model_last.pth OUT --heads 8 --activation relu \\
        --task classification --class-names walking,running,cycling --normalization norm.pickle
    /usr/bin/python3 tools/pth_to_safetensors.py --help

The input is unpickled with an unpickler that refuses to import anything but tensors, dtypes and
OrderedDict (what torch.load(weights_only=True) allows; its own unpickler in PyTorch 1.13 cannot
read the optimizer state that TST checkpoints hold); normalization.pickle with one that allows only
numpy arrays and pandas' Series and Index. --trust-pickle loads full pickles (only for files you
trust), which also accepts a torch.save'd nn.Module whose class can be imported.
"""
import argparse
import glob
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


def fixed_table(max_len, d_model, dtype=torch.float32):
    """TST's FixedPositionalEncoding table (max_len, d_model), computed as TST computes it in
    float32, or in double precision (dtype=torch.float64) as kformer computes it."""
    pe = torch.zeros(max_len, d_model, dtype=dtype)
    position = torch.arange(0, max_len, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=dtype) * (-math.log(10000.0) / d_model))
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


def experiment_files(args):
    """The .pth to convert and the configuration.json and normalization.pickle that go with it
    (None where there is none): named by flags, else looked up beside the .pth and one directory up
    (TST writes EXPERIMENT/checkpoints/model_best.pth beside EXPERIMENT/configuration.json)."""
    if os.path.isdir(args.input):
        pth = os.path.join(args.input, "checkpoints", "model_best.pth")
        if not os.path.isfile(pth):
            raise ConversionError(f"{args.input} is a directory without checkpoints/model_best.pth (a TST experiment"
                                  " directory has one): give the .pth file to convert")
        places = [args.input]
    else:
        pth = args.input
        here = os.path.dirname(os.path.abspath(pth))
        places = [here, os.path.dirname(here)]

    def find(name, given, flag):
        if given is not None:
            if not os.path.isfile(given):
                raise ConversionError(f"{flag} {given}: no such file")
            return given
        for place in places:
            candidate = os.path.join(place, name)
            if os.path.isfile(candidate):
                return candidate
        return None

    configuration = find("configuration.json", args.configuration, "--configuration")
    normalization = None if args.no_normalization else find("normalization.pickle", args.normalization,
                                                            "--normalization")
    return pth, configuration, normalization


def read_configuration(path):
    """TST's configuration.json (the run's argparse options as a dict)."""
    try:
        with open(path) as f:
            configuration = json.load(f)
    except (OSError, ValueError) as e:
        raise ConversionError(f"{path}: cannot be read as JSON: {e}")
    if not isinstance(configuration, dict):
        raise ConversionError(f"{path}: expected a JSON object of TST's options, got {type(configuration).__name__}")
    return configuration


class _NormalizationUnpickler(pickle.Unpickler):
    """Allows what TST's normalization.pickle holds (a dict of str, None, numpy arrays and pandas
    Series with their Index) and nothing else: no other module's code runs."""
    ALLOWED_MODULES = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric",
                       "numpy._core.numeric", "pandas.core.series", "pandas.core.indexes.base",
                       "pandas.core.indexes.range", "pandas.core.indexes.numeric", "pandas.core.internals.managers",
                       "pandas.core.internals.blocks", "pandas._libs.internals", "pandas.core.internals",
                       "pandas._libs.lib", "pandas.core.arrays.numpy_", "builtins", "copyreg", "_codecs")
    ALLOWED_BUILTINS = {"slice", "object", "tuple", "list", "dict", "range", "complex", "float", "int", "str", "bytes",
                        "bytearray"}

    def find_class(self, module, name):
        if module not in self.ALLOWED_MODULES or (module == "builtins" and name not in self.ALLOWED_BUILTINS):
            raise pickle.UnpicklingError(f"the file pickles {module}.{name}, which is not a number array")
        return super().find_class(module, name)


def read_normalization(path, trust_pickle, feat_dim):
    """TST's normalization.pickle (its Normalizer.__dict__) as kformer's (mean, std) per feature."""
    try:
        with open(path, "rb") as f:
            norm = pickle.load(f) if trust_pickle else _NormalizationUnpickler(f).load()
    except ModuleNotFoundError as e:
        raise ConversionError(f"{path}: reading it needs the module {e.name} (TST pickles pandas Series;"
                              " Debian: apt install python3-pandas)")
    except Exception as e:
        raise ConversionError(f"{path}: cannot be unpickled: {e}")
    if not isinstance(norm, dict) or "norm_type" not in norm:
        raise ConversionError(f"{path}: expected TST's Normalizer state, a dict with 'norm_type', got"
                              f" {type(norm).__name__}")
    kind = norm["norm_type"]

    def values(key):
        v = norm.get(key)
        if v is None:
            raise ConversionError(f"{path}: norm_type {kind!r} but no {key!r} values")
        a = np.asarray(getattr(v, "values", v), dtype=np.float64).reshape(-1)
        if a.size != feat_dim:
            raise ConversionError(f"{path}: {key!r} has {a.size} values, the model has feat_dim = {feat_dim}")
        if not np.all(np.isfinite(a)):
            raise ConversionError(f"{path}: {key!r} holds NaN or infinite values")
        return a

    eps = np.finfo(float).eps  # TST divides by std + eps (and max - min + eps)
    if kind == "standardization":
        mean, std = values("mean"), values("std") + eps
    elif kind == "minmax":
        mean = values("min_val")
        std = values("max_val") - mean + eps
    else:
        raise ConversionError(f"{path}: norm_type {kind!r}: kformer standardizes with statistics of the training"
                              " data (TST's 'standardization' and 'minmax'); per-sample normalizations are not"
                              " stored and have no kformer equivalent")
    if not np.all(std > 0):
        raise ConversionError(f"{path}: the normalization's scale is not positive for feature(s)"
                              f" {np.flatnonzero(std <= 0).tolist()}")
    return mean, std, kind


def ts_labels(path):
    """The class labels of a .ts file's series (the text after each data line's last ':')."""
    labels = []
    in_data = False
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                in_data = line.lower().startswith("@data")
                continue
            labels.append(line.rsplit(":", 1)[-1].strip())
    return labels


def training_class_names(configuration):
    """TST's class order for a classification run: the labels of its training .ts file sorted as
    strings (pandas' categories), or None with the reason when the file is not at hand."""
    data_dir, pattern = configuration.get("data_dir"), configuration.get("pattern")
    if not data_dir or not os.path.isdir(data_dir):
        return None, f"configuration.json's data_dir {data_dir!r} is not a directory here"
    paths = sorted(p for p in glob.glob(os.path.join(data_dir, "*"))
                   if (pattern is None or re.search(pattern, p)) and os.path.isfile(p) and p.endswith(".ts"))
    if not paths:
        return None, f"no .ts file in {data_dir} matches configuration.json's pattern {pattern!r}"
    sets = {p: sorted(set(ts_labels(p))) for p in paths}
    if len({tuple(v) for v in sets.values()}) != 1:
        return None, (f"the .ts files of {data_dir} matching {pattern!r} have different classes"
                      f" ({', '.join(os.path.basename(p) for p in paths)})")
    return sets[paths[0]], None


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


# configuration.json's options that the converter reads, as (TST name, converter flag, TST value ->
# converter value).
CONFIGURATION_OPTIONS = (
    ("num_heads", "heads", int),
    ("activation", "activation", str),
    ("dropout", "dropout", float),
    ("pos_encoding", "pos_encoding", str),
    ("task", "task", str),
)


def resolve_settings(args, configuration, configuration_path):
    """args with what configuration.json says filled in: a flag that contradicts it is a problem,
    and so is a value that neither gives where the weights cannot show it. Returns (settings,
    problems)."""
    settings = argparse.Namespace(**vars(args))
    problems = []
    if configuration is not None:
        where = os.path.basename(configuration_path)
        if configuration.get("model", "transformer") != "transformer":
            problems.append(f"{where}: model {configuration.get('model')!r}: only TST's transformer converts")
        if configuration.get("task") == "transduction":
            problems.append(f"{where}: task 'transduction': kformer runs TST's imputation, classification and"
                            " regression models")
        for key, flag, kind in CONFIGURATION_OPTIONS:
            value = configuration.get(key)
            if value is None:
                continue
            value = kind(value)
            given = getattr(args, flag)
            if given is not None and given != value:
                problems.append(f"--{flag.replace('_', '-')} {given} contradicts {where}'s {key} {value}")
            setattr(settings, flag, value)
    if settings.heads is None or settings.activation is None:
        missing = " and ".join(f for f, v in (("--heads N", settings.heads), ("--activation gelu|relu",
                                                                             settings.activation)) if v is None)
        problems.append(f"the weights do not show the attention heads or the activation and there is no TST"
                        f" configuration.json beside the checkpoint (nor --configuration): pass {missing}")
    if settings.activation is not None and settings.activation not in ("gelu", "relu"):
        problems.append(f"activation {settings.activation!r}: expected gelu or relu")
    if settings.dropout is None:
        settings.dropout = 0.1
        print("note: no dropout in configuration.json or --dropout: 0.1 for further training (TST's default;"
              " it does not change inference)", file=sys.stderr)
    if settings.keep_table:
        if settings.pos_encoding not in (None, "fixed", "learnable"):
            problems.append(f"--keep-table with pos_encoding {settings.pos_encoding!r}: there is no table to keep")
        settings.pos_encoding = "learnable"
    return settings, problems


def check_against_configuration(config, configuration, configuration_path):
    """What configuration.json says about the architecture must be what the weights show."""
    if configuration is None:
        return []
    where = os.path.basename(configuration_path)
    problems = []
    for key, ours in (("d_model", "d_model"), ("dim_feedforward", "dim_feedforward"), ("num_layers", "num_layers")):
        if configuration.get(key) is not None and int(configuration[key]) != config[ours]:
            problems.append(f"{where}'s {key} {configuration[key]} contradicts the weights' {config[ours]}")
    norm = {"BatchNorm": "batchnorm", "LayerNorm": "layernorm"}.get(configuration.get("normalization_layer"))
    if norm is not None and norm != config["normalization_layer"]:
        problems.append(f"{where}'s normalization_layer {configuration['normalization_layer']} contradicts the"
                        f" weights ({config['normalization_layer']})")
    for key in ("max_seq_len", "data_window_len"):
        if configuration.get(key) is not None and int(configuration[key]) != config["max_len"]:
            problems.append(f"{where}'s {key} {configuration[key]} contradicts the weights' max_len"
                            f" {config['max_len']}")
            break
    return problems


def shape_text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ")"


def infer_config(state, args, problems):
    """The kformer TstConfig (as its JSON dict) and the class names, from the weights and the
    settings (resolve_settings). Raises ConversionError listing every problem found, those in
    `problems` included."""

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
    need(heads is None or (heads >= 1 and d_model % heads == 0),
         f"the attention heads ({heads}) must divide d_model = {d_model}")
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
            if pos_encoding == "fixed" and looks_fixed:
                exact = float((pe.detach().reshape(table_len, d_model).double() -
                               fixed_table(table_len, d_model, torch.float64)).abs().max())
                print(f"note: kformer recomputes the fixed encoding in double precision; TST's stored float32 table"
                      f" differs from it by up to {exact:.3g} (--keep-table keeps TST's table instead)",
                      file=sys.stderr)
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
    training_classes, no_training_classes = getattr(args, "training_classes", (None, None))
    if args.class_names:
        class_names = [c.strip() for c in args.class_names.split(",")]
        if task != "classification":
            problems.append(f"--class-names given for a {task} model")
        elif len(class_names) != num_outputs:
            problems.append(f"--class-names names {len(class_names)} classes, output_layer has {num_outputs} outputs")
        elif len(set(class_names)) != len(class_names) or not all(class_names):
            problems.append("--class-names must be distinct and non-empty")
        elif training_classes is not None and class_names != training_classes:
            problems.append(f"--class-names {','.join(class_names)} contradicts TST's class order from its training"
                            f" data: {','.join(training_classes)}")
    elif task == "classification":
        if training_classes is None:
            why = f" ({no_training_classes})" if no_training_classes else " (no TST configuration.json to find them)"
            problems.append(f"the class names cannot be read{why}: pass --class-names in TST's label order (the"
                            " training labels sorted as strings, as pandas orders categories)")
        elif len(training_classes) != num_outputs:
            problems.append(f"the training data have {len(training_classes)} classes"
                            f" ({','.join(training_classes)}), output_layer has {num_outputs} outputs")
        else:
            class_names = training_classes

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


def convert(state, epoch, args, source, configuration=None, configuration_path=None, normalization_path=None):
    """Writes the checkpoint directory args.output; returns the model config."""
    state = strip_prefixes(state)
    settings, problems = resolve_settings(args, configuration, configuration_path)
    if configuration is not None and configuration.get("task") == "classification":
        settings.training_classes = training_class_names(configuration)
    config, class_names = infer_config(state, settings, problems)
    problems = check_against_configuration(config, configuration, configuration_path)

    # The standardization: normalization.pickle, none (configuration.json or --no-normalization), or refused.
    feat_dim = config["feat_dim"]
    tst_normalization = configuration.get("normalization", "standardization") if configuration else None
    if normalization_path is not None:
        mean, std, kind = read_normalization(normalization_path, args.trust_pickle, feat_dim)
        if tst_normalization is not None and kind != tst_normalization:
            problems.append(f"{normalization_path} holds a {kind} normalization, configuration.json says"
                            f" {tst_normalization}")
        print(f"note: {kind} from {normalization_path}", file=sys.stderr)
    elif args.no_normalization or (configuration is not None and tst_normalization is None):
        if tst_normalization is not None:
            problems.append(f"--no-normalization, but configuration.json says the data were normalized"
                            f" ({tst_normalization})")
        mean, std = np.zeros(feat_dim), np.ones(feat_dim)
    elif tst_normalization is not None and tst_normalization.startswith("per_sample"):
        problems.append(f"configuration.json's normalization {tst_normalization}: per-sample normalizations have"
                        " no kformer equivalent")
    else:
        norm_from = configuration.get("norm_from") if configuration else None
        hint = f" (configuration.json's norm_from {norm_from!r} is not a file here)" if norm_from else ""
        problems.append(f"no normalization.pickle beside the checkpoint{hint}: pass --normalization FILE, or"
                        " --no-normalization for a model trained on raw values")
    if problems:
        raise ConversionError("the checkpoint cannot be converted:\n  " + "\n  ".join(problems))
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
    arrays["standardization.mean"] = mean.astype("<f4")
    arrays["standardization.std"] = std.astype("<f4")
    # TST interpolates missing values linearly along time before anything else (its data classes'
    # interpolate_missing); kformer does the same for this checkpoint's data unless told otherwise.
    info = {"format": FORMAT, "model": config, "class_names": class_names, "next_epoch": 0, "step": 0,
            "has_optimizer": False, "missing_values": "interpolate"}
    metadata = {"format": FORMAT, "config": json.dumps(config, indent=2), "converted_from": os.path.basename(source),
                "converted_by": "tools/pth_to_safetensors.py", "checkpoint": json.dumps(info, indent=2) + "\n"}
    if epoch is not None:
        metadata["source_epoch"] = str(epoch)
    write_atomic(weights, lambda p: write_safetensors(p, arrays, metadata))

    def write_config(p):
        with open(p, "w") as f:
            f.write(json.dumps(info, indent=2) + "\n")

    write_atomic(config_path, write_config)  # weights first: config.json only describes complete weights
    return config


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Convert a PyTorch TST checkpoint (a TST experiment directory or a .pth) into a kformer"
                    " checkpoint directory (model.safetensors + config.json).",
        epilog="Example: /usr/bin/python3 tools/pth_to_safetensors.py EXPERIMENT OUT  (EXPERIMENT: the directory"
               " TST's main.py made, with checkpoints/model_best.pth, configuration.json, normalization.pickle)")
    p.add_argument("input", help="a TST experiment directory (its checkpoints/model_best.pth), or a torch.save'd"
                                 " state_dict or dict holding it under 'state_dict' (TST's .pth)")
    p.add_argument("output", help="checkpoint directory to write (created if missing)")
    p.add_argument("--configuration", default=None,
                   help="TST's configuration.json (default: beside the .pth or one directory up)")
    p.add_argument("--normalization", default=None,
                   help="TST's normalization.pickle (default: beside the .pth or one directory up)")
    p.add_argument("--no-normalization", action="store_true",
                   help="the model was trained on raw values (a standardization of mean 0, std 1)")
    p.add_argument("--heads", type=int, default=None,
                   help="attention heads: needed without configuration.json (the weights do not show them)")
    p.add_argument("--activation", choices=("gelu", "relu"), default=None,
                   help="needed without configuration.json (the weights do not show it)")
    p.add_argument("--pos-encoding", choices=("fixed", "learnable", "none"), default=None,
                   help="default: configuration.json's, else read from pos_enc.pe (TST's sinusoid table: fixed;"
                        " other values: learnable; absent: none)")
    p.add_argument("--keep-table", action="store_true",
                   help="store a fixed encoding's float32 table as a learnable encoding (TST's exact numbers)")
    p.add_argument("--task", choices=("imputation", "classification", "regression"), default=None,
                   help="default: configuration.json's, else imputation for an output layer (feat_dim, d_model);"
                        " regression for one output; needed otherwise unless --class-names is given")
    p.add_argument("--class-names", default=None,
                   help="comma-separated class names in label order (default: from the training data that"
                        " configuration.json names)")
    p.add_argument("--dropout", type=float, default=None,
                   help="dropout for further training (default: configuration.json's, else 0.1)")
    p.add_argument("--max-len", type=int, default=None,
                   help="padded length, only needed for an imputation model without a pos_enc.pe table")
    p.add_argument("--conv-dilation", type=int, default=1, help="dilation of a Conv1d projection (default 1)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="stored precision")
    p.add_argument("--force", action="store_true", help="replace an existing model.safetensors / config.json")
    p.add_argument("--trust-pickle", action="store_true",
                   help="unpickle arbitrary objects (plain torch.load): only for files you trust")
    args = p.parse_args(argv)
    if args.no_normalization and args.normalization:
        p.error("--no-normalization and --normalization exclude each other")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        pth, configuration_path, normalization_path = experiment_files(args)
        configuration = read_configuration(configuration_path) if configuration_path else None
        if configuration_path:
            print(f"note: hyper-parameters from {configuration_path}", file=sys.stderr)
            norm_from = configuration.get("norm_from")  # TST read the normalization from there
            if normalization_path is None and not args.no_normalization and norm_from and os.path.isfile(norm_from):
                normalization_path = norm_from
        state, epoch = load_state_dict(pth, args.trust_pickle)
        config = convert(state, epoch, args, pth, configuration, configuration_path, normalization_path)
    except ConversionError as e:
        print(f"pth_to_safetensors: error: {e}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{k} {config[k]}" for k in ("task", "feat_dim", "max_len", "d_model", "n_heads", "num_layers",
                                                       "dim_feedforward", "normalization_layer", "pos_encoding",
                                                       "projection", "activation"))
    print(f"wrote {args.output}: {summary}" + (f" (epoch {epoch} of {pth})" if epoch is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

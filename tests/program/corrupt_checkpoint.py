#!/usr/bin/env python3
"""Writes a corrupted copy of a kformer checkpoint directory, for bad_input_sweep.sh: plain Python
(json, struct), no PyTorch.

    corrupt_checkpoint.py SOURCE_DIR TARGET_DIR KIND

KIND is one of:
  format-version     the embedded config names format "kformer-tst/9"
  negative-epoch     training.next_epoch = -4 (and the config's next_epoch)
  int-weights        project_inp.weight stored as I32 (its values truncated)
  negative-variance  a running_var entry set to -0.5
  huge-weights       project_inp.weight filled with 3e38 (finite; the outputs overflow)
  nan-weights        one value of project_inp.weight NaN
  huge-d-model       the config's d_model 1000000 (the weights unchanged)
  extra-layers       the config's num_layers one more than the weights hold
  zero-std           a standardization std of 0
  negative-count     a num_batches_tracked of -1
"""
import json
import math
import os
import shutil
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    return header, bytearray(data[8 + n:])


def write(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(body))


def tensor(header, body, name):
    info = header[name]
    begin, end = info["data_offsets"]
    return info, begin, end


def set_floats(header, body, name, values):
    info, begin, end = tensor(header, body, name)
    assert info["dtype"] == "F32", info["dtype"]
    body[begin:end] = struct.pack(f"<{len(values)}f", *values)


def floats(header, body, name):
    info, begin, end = tensor(header, body, name)
    return list(struct.unpack(f"<{(end - begin) // 4}f", bytes(body[begin:end])))


def edit_config(header, edit):
    meta = header["__metadata__"]
    checkpoint = json.loads(meta["checkpoint"])
    edit(checkpoint)
    meta["checkpoint"] = json.dumps(checkpoint)
    meta["config"] = json.dumps(checkpoint["model"])


def main():
    source, target, kind = sys.argv[1:4]
    shutil.copytree(source, target)
    path = os.path.join(target, "model.safetensors")
    header, body = read(path)
    if kind == "format-version":
        edit_config(header, lambda c: c.update(format="kformer-tst/9"))
    elif kind == "negative-epoch":
        edit_config(header, lambda c: c.update(next_epoch=-4))
        _, begin, end = tensor(header, body, "training.next_epoch")
        body[begin:end] = struct.pack("<q", -4)
    elif kind == "int-weights":
        # Re-laid out: the I32 tensor takes the F32 one's bytes (both 4 bytes an element).
        values = floats(header, body, "project_inp.weight")
        info, begin, end = tensor(header, body, "project_inp.weight")
        info["dtype"] = "I32"
        body[begin:end] = struct.pack(f"<{len(values)}i", *[int(v) for v in values])
    elif kind == "negative-variance":
        name = next(k for k in header if k.endswith(".running_var"))
        values = floats(header, body, name)
        values[0] = -0.5
        set_floats(header, body, name, values)
    elif kind in ("huge-weights", "nan-weights"):
        values = floats(header, body, "project_inp.weight")
        if kind == "huge-weights":
            values = [3e38] * len(values)
        else:
            values[1] = math.nan
        set_floats(header, body, "project_inp.weight", values)
    elif kind == "huge-d-model":
        edit_config(header, lambda c: c["model"].update(d_model=1000000))
    elif kind == "extra-layers":
        edit_config(header, lambda c: c["model"].update(num_layers=c["model"]["num_layers"] + 1))
    elif kind == "zero-std":
        values = floats(header, body, "standardization.std")
        values[0] = 0.0
        set_floats(header, body, "standardization.std", values)
    elif kind == "negative-count":
        name = next(k for k in header if k.endswith(".num_batches_tracked"))
        _, begin, end = tensor(header, body, name)
        body[begin:end] = struct.pack("<q", -1)
    else:
        sys.exit(f"unknown kind {kind}")
    write(path, header, body)
    if os.path.exists(os.path.join(target, "config.json")):
        os.remove(os.path.join(target, "config.json"))  # the embedded config is the one read


if __name__ == "__main__":
    main()

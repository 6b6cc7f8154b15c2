#!/usr/bin/python3
"""Writes safetensors_golden.safetensors, the reference file for tests/test_safetensors.cpp.

An independent writer: numpy, json and struct only, following the format description
(https://github.com/huggingface/safetensors): an 8-byte little-endian header length, the JSON
header, then the tensors' little-endian bytes back to back. The tensors are written in the order
below, so several start at offsets that are not a multiple of their element size (the reader must
not assume alignment). The values are chosen by hand (extremes, subnormals, negative zero) and
the C++ test spells them out again.

Run from anywhere: /usr/bin/python3 tests/golden/make_safetensors_golden.py
"""
import json
import os
import struct

import numpy as np


def bfloat16_bits(values):
    # bfloat16 is the upper half of a float32; these values are exact in bfloat16.
    bits = np.asarray(values, dtype="<f4").view("<u4") >> 16
    return bits.astype("<u2")


TENSORS = [  # (name, dtype, shape, little-endian array)
    ("u8", "U8", [3], np.array([0, 255, 7], dtype="<u1")),
    ("f64", "F64", [3], np.array([1.0 / 3.0, -1e300, 2.0**-1074], dtype="<f8")),
    ("flag", "BOOL", [3], np.array([True, False, True], dtype="?")),
    ("f32", "F32", [2, 3],
     np.array([[0.0, 1.5, -2.25], [3.4028234663852886e38, 2.0**-149, -0.0]], dtype="<f4")),
    ("f16", "F16", [2, 2], np.array([[1.0, -2.0], [65504.0, 2.0**-24]], dtype="<f2")),
    ("bf16", "BF16", [4], bfloat16_bits([1.0, -3.5, 2.0**100, 0.15625])),
    ("i64", "I64", [4], np.array([-(2**63), 2**63 - 1, 0, -1], dtype="<i8")),
    ("i32", "I32", [2, 2], np.array([[-(2**31), 2**31 - 1], [0, -7]], dtype="<i4")),
    ("i8", "I8", [4], np.array([-128, 127, 0, -1], dtype="<i1")),
    ("step", "I64", [], np.array(42, dtype="<i8")),
    ("empty", "F32", [0, 3], np.zeros((0, 3), dtype="<f4")),
]
METADATA = {"format": "pt", "note": "h\u00e9llo \u2192 kformer"}


def main():
    header = {"__metadata__": METADATA}
    data = b""
    for name, dtype, shape, array in TENSORS:
        raw = array.tobytes()
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "safetensors_golden.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    main()

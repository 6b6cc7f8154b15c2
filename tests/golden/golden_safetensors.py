"""safetensors for the golden generators, written and read from the format's description
(https://github.com/huggingface/safetensors): an 8-byte little-endian header length, the JSON
header (padded with spaces to 8 bytes), then the tensors' little-endian bytes back to back. numpy,
json and struct only, independent of the C++ reader the goldens test."""
import json
import struct

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8"}


def write_safetensors(path, arrays, meta):
    """Writes {name: array} as float32 tensors in name order, with meta as __metadata__."""
    header = {"__metadata__": meta}
    offset = 0
    for name in sorted(arrays):
        a = arrays[name]
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name in sorted(arrays):
            f.write(np.ascontiguousarray(arrays[name], dtype="<f4").tobytes())


def read_safetensors(path):
    """({name: numpy array}, metadata) for F32, F64 and I64 tensors."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    arrays = {}
    for name, info in header.items():
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, this reader knows {list(DTYPES)}")
        begin, end = info["data_offsets"]
        arrays[name] = np.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return arrays, meta

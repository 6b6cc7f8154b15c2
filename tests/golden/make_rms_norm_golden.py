#!/usr/bin/env python3
"""Golden values for kformer's RMSNorm parity test, computed by PyTorch's nn.RMSNorm.

nn.RMSNorm arrived in PyTorch 2.4, after Debian's python3-torch (1.13) that the other goldens use,
so this case has a script and a file of its own (rms_norm.safetensors, next to this script). It
uses the layer goldens' conventions (make_layer_goldens.py): "<case>.x", ".y", ".dy", ".dx",
".param.weight", ".grad.weight", float32, the hyper-parameters in the metadata. Regenerate with any
PyTorch >= 2.4, e.g. from PyPI in a virtual environment:

    python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install torch numpy
    /tmp/torch2/bin/python tests/golden/make_rms_norm_golden.py
"""
import json
import os

import torch
from torch import nn

from golden_safetensors import write_safetensors

torch.manual_seed(4321)
torch.set_num_threads(1)
d = 8
norm = nn.RMSNorm(d, eps=1e-5)
with torch.no_grad():
    norm.weight.copy_(1.0 + 0.3 * torch.randn(d))
x = (torch.randn(2, 5, d) * 3 + 1).requires_grad_(True)
y = norm(x)
dy = torch.randn_like(y)
y.backward(dy)

tensors = {name: t.detach().to(torch.float32).contiguous().numpy() for name, t in {
    "rmsnorm.x": x, "rmsnorm.y": y, "rmsnorm.dy": dy, "rmsnorm.dx": x.grad,
    "rmsnorm.param.weight": norm.weight, "rmsnorm.grad.weight": norm.weight.grad}.items()}
metadata = {"rmsnorm": json.dumps({"dim": d, "eps": 1e-5}), "torch": json.dumps(torch.__version__)}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rms_norm.safetensors")
write_safetensors(out, tensors, metadata)
print(f"wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes (torch {torch.__version__})")

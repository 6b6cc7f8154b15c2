#!/usr/bin/python3
"""Golden values for kformer's losses and optimizers, computed by PyTorch.

Losses: values and gradients of F.mse_loss over the masked, observed elements (TST's pretraining
loss), F.mse_loss (regression) and F.cross_entropy (classification, including logits large enough
to overflow a naive softmax). Optimizers: torch.optim.Adam, AdamW and RAdam stepping two
parameter tensors (flattened and concatenated, as kformer's flat parameter buffer) with given
gradients and a learning rate that changes every step, and torch.nn.utils.clip_grad_norm_.
Everything runs in float32; the C++ tests read training.safetensors and never run Python.
Regenerate with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_training_goldens.py

Tensor names (all float32; integers such as labels and counts are stored exactly):
  masked_mse.{pred,target,mask,lengths,loss,count,d_pred}   mask: 1 = counted element
  mse.{pred,target,loss,d_pred}
  cross_entropy[_large].{logits,labels,loss,d_logits}
  <optimizer case>.{params0,grads,lr,params,exp_avg,exp_avg_sq}
      grads: (steps, n), lr: (steps), params: (steps, n) after each step, states after the last
  clip_{above,below}.{grads,clipped,norm,max_norm}
The hyper-parameters of each optimizer case are in the metadata as JSON under the case's name.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

from golden_safetensors import write_safetensors

torch.manual_seed(2718)
torch.set_num_threads(1)
tensors = {}
metadata = {}


def put(name, t):
    t = torch.as_tensor(t)
    tensors[name] = t.detach().to(torch.float32).reshape(t.shape if t.dim() else (1,)).contiguous().numpy()


# --- Masked MSE: TST's pretraining loss --------------------------------------------------------
batch, seq, features = 3, 7, 4
lengths = torch.tensor([7, 5, 2])
pred = torch.randn(batch, seq, features, requires_grad=True)
target = torch.randn(batch, seq, features)
noise_masked = torch.rand(batch, seq, features) < 0.3
observed = (torch.arange(seq)[None, :] < lengths[:, None])[:, :, None]
counted = noise_masked & observed
loss = F.mse_loss(pred[counted], target[counted])
loss.backward()
for name, t in [("pred", pred), ("target", target), ("mask", counted), ("lengths", lengths),
                ("loss", loss), ("count", counted.sum()), ("d_pred", pred.grad)]:
    put(f"masked_mse.{name}", t)

# --- MSE: regression -----------------------------------------------------------------------------
pred = torch.randn(5, 3, requires_grad=True)
target = torch.randn(5, 3)
loss = F.mse_loss(pred, target)
loss.backward()
for name, t in [("pred", pred), ("target", target), ("loss", loss), ("d_pred", pred.grad)]:
    put(f"mse.{name}", t)

# --- Cross-entropy: classification ---------------------------------------------------------------
for case, scale, offset in [("cross_entropy", 2.0, 0.0), ("cross_entropy_large", 80.0, 1000.0)]:
    logits = (torch.randn(6, 5) * scale + offset).requires_grad_(True)
    labels = torch.tensor([0, 4, 2, 2, 1, 3])
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    for name, t in [("logits", logits), ("labels", labels), ("loss", loss),
                    ("d_logits", logits.grad)]:
        put(f"{case}.{name}", t)

# --- Optimizers ----------------------------------------------------------------------------------
steps = 12  # RAdam: rho_t <= 5 (momentum only) for the first steps, rectified after
shapes = [(5, 4), (17,)]
n = sum(int(np.prod(s)) for s in shapes)
cases = [
    ("adam", torch.optim.Adam, {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}),
    ("adam_l2", torch.optim.Adam, {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw", torch.optim.AdamW, {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.05}),
    ("radam", torch.optim.RAdam, {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}),
    ("radam_l2", torch.optim.RAdam, {"betas": (0.9, 0.98), "eps": 1e-8, "weight_decay": 0.1}),
]
for case, make, options in cases:
    params = [torch.nn.Parameter(torch.rand(s) * 2 - 1) for s in shapes]
    params0 = torch.cat([p.detach().flatten() for p in params])
    optimizer = make(params, lr=0.01, **options)
    grads, lrs, history = [], [], []
    for k in range(steps):
        lr = 0.01 * (1 + 0.25 * (k % 4))
        for group in optimizer.param_groups:
            group["lr"] = lr
        for p in params:
            p.grad = torch.randn_like(p) * 0.5
        grads.append(torch.cat([p.grad.flatten() for p in params]))
        lrs.append(lr)
        optimizer.step()
        history.append(torch.cat([p.detach().flatten() for p in params]))
    state = [optimizer.state[p] for p in params]
    put(f"{case}.params0", params0)
    put(f"{case}.grads", torch.stack(grads))
    put(f"{case}.lr", torch.tensor(lrs))
    put(f"{case}.params", torch.stack(history))
    put(f"{case}.exp_avg", torch.cat([s["exp_avg"].flatten() for s in state]))
    put(f"{case}.exp_avg_sq", torch.cat([s["exp_avg_sq"].flatten() for s in state]))
    metadata[case] = json.dumps({"kind": make.__name__, "beta1": options["betas"][0],
                                 "beta2": options["betas"][1], "eps": options["eps"],
                                 "weight_decay": options["weight_decay"], "steps": steps, "n": n})

# --- Gradient clipping by global norm ------------------------------------------------------------
for case, scale in [("clip_above", 3.0), ("clip_below", 0.2)]:
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * scale
    put(f"{case}.grads", torch.cat([p.grad.flatten() for p in params]))
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm=4.0)
    put(f"{case}.clipped", torch.cat([p.grad.flatten() for p in params]))
    put(f"{case}.norm", norm)
    put(f"{case}.max_norm", torch.tensor(4.0))


out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training.safetensors")
write_safetensors(out, tensors, metadata)
print(f"wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes")

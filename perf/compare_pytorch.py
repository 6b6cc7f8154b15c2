#!/usr/bin/python3
"""Times kformer-bench's cases in PyTorch on the same threads and writes the same JSON schema,
so that reports (perf/report.py) can show kformer/PyTorch ratios side by side.

    /usr/bin/python3 perf/compare_pytorch.py [--filter PATTERN] [--threads N] [--repeat N]
                                             [--device cpu|cuda] [--json FILE] [--list]

Needs Debian's python3-torch (1.13). Cases have the same names, shapes and FLOP counts as
kformer-bench's (N = batch * seq):

  encoding.*                         x + pe[:seq] with a cached table, as PyTorch implementations
                                     of the fixed encoding do, and a copy of the same tensor
  linear.forward|backward            nn.Linear(512, 2048) on (8192, 512): 2*N*in*out flops forward
                                     (no autograd), 4*N*in*out backward (input and weight
                                     gradients; only backward is timed, on a retained graph)
  attention.tst_default|long.forward|train_step
                                     nn.MultiheadAttention(d, 8, dropout=0.1, batch_first=True),
                                     self-attention, need_weights=False; forward in eval mode
                                     under no_grad (PyTorch's fused fast path), train_step =
                                     forward + backward of a fixed output gradient in train mode
                                     (no optimizer); 2*N*d*3d + 4*B*S^2*d + 2*N*d^2 flops forward,
                                     3x for train_step
  encoder_layer.tst_default.*        one TST BatchNorm encoder layer; attention's flops + 4*N*d*ff
  encoder.tst_default|tst_large.*    three of them, stacked without a final norm
  tst.default.inference|train_step   the TST classifier: Linear(feat, d) * sqrt(d), fixed
                                     sinusoidal encoding (+ dropout), 3 BatchNorm encoder layers,
                                     GELU, dropout, Linear(S*d, classes) on the flattened output;
                                     train_step = zero_grad, forward, CrossEntropy, backward, Adam
                                     step (no padding mask, no gradient clipping); 2*N*feat*d +
                                     3*layer + 2*B*S*d*classes flops, 3x for train_step
  scaling.seq.<S>.train_step         one encoder layer's train step at (4, S, 64), S = 64..4096
  scaling.batch.<B>.train_step       the same at (B, 256, 64), B = 1, 4, 16, 64
                                     (the largest seq points need several GiB: PyTorch keeps
                                     (4*8, S, S) attention matrices, 2 GiB each at S = 4096)

The encoder layer is TST's TransformerBatchNormEncoderLayer (post-norm, BatchNorm1d over batch x
time, GELU, dropout 0.1), as kformer's TransformerEncoder with its defaults.

--filter selects cases whose name contains PATTERN, or matches it as a shell glob when it has
*, ? or [ (e.g. 'linear.*', 'scaling.seq.*'), as kformer-bench's --filter does. The scaling cases
run only when the filter selects them; without a filter every other case runs. A filter that
selects nothing, a --repeat or --threads that is not a positive whole number and a --json file that
cannot be created are refused before anything runs.

Every result has "batch" and "seq" (null where the input is not a (batch, seq, feature) tensor)
and "peak_bytes": how far memory rose above what was allocated before the case's first run
(inputs and parameters excluded; the case's workspace, saved activations, gradients and optimizer
state included). On the CPU this is the growth of the process's resident set: the kernel's
high-water mark (VmHWM) is reset through /proc/self/clear_refs before each case or, where that is
not allowed, ru_maxrss (the high-water mark since the process started) is read instead, which
overstates a case that stays below an earlier case's peak. It is
approximate: it counts pages, allocator caching and thread stacks as well as tensors. With
--device cuda it is torch.cuda.max_memory_allocated() after reset_peak_memory_stats(), less
memory_allocated() before the case (the tensors themselves, not the caching allocator's reserve).

The document has "pytorch" (its version), "backend" ("pytorch" on the CPU, "pytorch-cuda"),
"git_revision", "host", "date" (UTC, ISO 8601), "peak_bytes_method" and "results".
"""
import argparse
import ctypes
import datetime
import fnmatch
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class BatchNormEncoderLayer(nn.Module):
    """TST's TransformerBatchNormEncoderLayer, batch-first at its interface."""

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
        src2 = self.self_attn(src, src, src)[0]
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

    def run_forward():
        model.eval()
        with torch.no_grad():
            model(x)

    cases = []
    if forward:
        cases.append(Case(f"{prefix}.forward", shape, 0, forward_flops, run_forward, batch, seq))
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


def attention_cases(dev, tag, batch, seq, d, heads=8):
    attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True).to(dev)
    x = randn(dev, batch, seq, d)
    dy = randn(dev, batch, seq, d) * 0.01
    shape = f"({batch}, {seq}, {d}) h{heads}"
    flops = attention_flops(batch, seq, d)

    def forward():
        attn.eval()
        with torch.no_grad():
            attn(x, x, x, need_weights=False)

    xg = x.clone().requires_grad_(True)

    def train_step():
        attn.train()
        for p in attn.parameters():
            p.grad = None
        xg.grad = None
        attn(xg, xg, xg, need_weights=False)[0].backward(dy)

    return [Case(f"attention.{tag}.forward", shape, 0, flops, forward, batch, seq),
            Case(f"attention.{tag}.train_step", shape, 0, 3 * flops, train_step, batch, seq)]


def tst_cases(dev, batch=32, seq=128, feat=8, d=64, heads=8, ff=256, layers=3, classes=4):
    model = TSTClassifier(feat, seq, d, heads, ff, layers, classes).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = randn(dev, batch, seq, feat)
    labels = torch.randint(0, classes, (batch,)).to(dev)
    n = batch * seq
    flops = 2.0 * n * feat * d + layers * layer_flops(batch, seq, d, ff) + 2.0 * batch * (seq * d) * classes
    shape = f"({batch}, {seq}, {feat}) d{d} h{heads} ff{ff} L{layers} c{classes}"

    def inference():
        model.eval()
        with torch.no_grad():
            model(x)

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), labels).backward()
        optimizer.step()

    return [Case("tst.default.inference", shape, 0, flops, inference, batch, seq),
            Case("tst.default.train_step", shape, 0, 3 * flops, train_step, batch, seq)]


SCALING_SEQ = [64, 128, 256, 512, 1024, 2048, 4096]
SCALING_BATCH = [1, 4, 16, 64]


def scaling_family(kind, value):
    batch, seq = (4, value) if kind == "seq" else (value, 256)
    shape = f"({batch}, {seq}, 64) h8 ff256 L1"
    return ([f"scaling.{kind}.{value}.train_step"],
            lambda dev: encoder_cases(dev, f"scaling.{kind}.{value}", batch, seq, 64, 8, 256, 1, shape,
                                      forward=False))


def families():
    """(case names, builder): a builder allocates its tensors only when one of its names is selected."""
    fams = [
        (["encoding.copy", "encoding.fixed.add", "encoding.fixed.inplace"], encoding_cases),
        (["linear.forward", "linear.backward"], linear_cases),
        (["attention.tst_default.forward", "attention.tst_default.train_step"],
         lambda dev: attention_cases(dev, "tst_default", 32, 64, 64)),
        (["attention.long.forward", "attention.long.train_step"],
         lambda dev: attention_cases(dev, "long", 4, 1024, 128)),
        (["encoder_layer.tst_default.forward", "encoder_layer.tst_default.train_step"],
         lambda dev: encoder_cases(dev, "encoder_layer.tst_default", 32, 64, 64, 8, 256, 1,
                                   "(32, 64, 64) h8 ff256")),
        (["encoder.tst_default.forward", "encoder.tst_default.train_step"],
         lambda dev: encoder_cases(dev, "encoder.tst_default", 32, 64, 64, 8, 256, 3)),
        (["encoder.tst_large.forward", "encoder.tst_large.train_step"],
         lambda dev: encoder_cases(dev, "encoder.tst_large", 64, 128, 128, 8, 256, 3)),
        (["tst.default.inference", "tst.default.train_step"], tst_cases),
    ]
    fams += [scaling_family("seq", s) for s in SCALING_SEQ]
    fams += [scaling_family("batch", b) for b in SCALING_BATCH]
    return fams


def selected(pattern, name):
    """kformer-bench's --filter: a glob over the whole name if it has * ? or [, else a substring;
    without a filter, every case but the long scaling ones."""
    if not pattern:
        return not name.startswith("scaling.")
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


# --- peak memory ------------------------------------------------------------------------------
class PeakMemory:
    """Peak memory above the level before a case (see the module's docstring)."""

    def __init__(self, dev):
        self.dev = dev
        self.libc = None
        try:
            self.libc = ctypes.CDLL("libc.so.6")
        except OSError:
            pass
        if dev.type == "cuda":
            self.method = "cuda-max-allocated"
        elif self._reset_hwm():
            self.method = "rss-hwm"
        else:
            self.method = "ru_maxrss"

    @staticmethod
    def _reset_hwm():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return PeakMemory._status_kib("VmHWM") is not None
        except OSError:
            return False

    @staticmethod
    def _status_kib(key):
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def start(self):
        gc.collect()
        if self.method == "cuda-max-allocated":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return
        if self.libc is not None:
            try:
                self.libc.malloc_trim(0)  # give freed heap pages back, so that they do not hide growth
            except AttributeError:
                pass
        rss = self._status_kib("VmRSS")
        self.base = rss * 1024 if rss is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.method == "rss-hwm":
            self._reset_hwm()

    def peak_bytes(self):
        if self.method == "cuda-max-allocated":
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        elif self.method == "rss-hwm":
            peak = self._status_kib("VmHWM") * 1024
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return max(0, int(peak - self.base))


def git_revision():
    """The source tree's revision; KFORMER_GIT_REVISION names it away from the tree (bundles)."""
    if os.environ.get("KFORMER_GIT_REVISION"):
        return os.environ["KFORMER_GIT_REVISION"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def whole_number(low, high):
    """An argparse type: a whole number in [low, high], refused with a message otherwise."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"needs a whole number from {low} to {high}, got '{text}'")
        return value
    return parse


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", default="",
                        help="part of a case name, or a glob over the whole name with * ? [")
    parser.add_argument("--threads", type=whole_number(1, 4096), default=2)
    parser.add_argument("--repeat", type=whole_number(1, 100000), default=20)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--json")
    parser.add_argument("--list", action="store_true", help="print the selected cases and exit")
    args = parser.parse_args()
    if not any(selected(args.filter, n) for names, _ in families() for n in names):
        parser.error(f"no case matches --filter '{args.filter}' (--list shows the cases)")
    if args.json:  # refused before the cases run, not after
        if args.list:
            parser.error("--json cannot go with --list, which records no results")
        try:
            with tempfile.NamedTemporaryFile(dir=os.path.dirname(os.path.abspath(args.json))):
                pass
        except OSError as e:
            parser.error(f"cannot write --json {args.json}: {e.strerror}")

    if args.list:
        for names, _ in families():
            for name in names:
                if selected(args.filter, name):
                    print(name)
        return

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no CUDA device")
    dev = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = dev.type == "cuda"
    backend = "pytorch-cuda" if cuda else "pytorch"
    if cuda:
        device = torch.cuda.get_device_name(dev)
        threads = None
    else:
        device = f"{platform.processor() or platform.machine()} ({args.threads} threads)"
        threads = args.threads

    def sync():
        if cuda:
            torch.cuda.synchronize()

    memory = PeakMemory(dev)
    results = []
    print(f"PyTorch {torch.__version__}, {backend}: {device}")
    print(f"{'case':38} {'shape':34} {'median ms':>10} {'GB/s':>9} {'GFLOP/s':>9} {'peak MiB':>9}")
    for names, build in families():
        if not any(selected(args.filter, n) for n in names):
            continue
        for case in build(dev):
            if not selected(args.filter, case.name):
                continue
            memory.start()
            case.run()
            case.run()
            sync()
            seconds = []
            for _ in range(args.repeat):
                sync()
                start = time.perf_counter()
                case.run()
                sync()
                seconds.append(time.perf_counter() - start)
            peak = memory.peak_bytes()
            median = statistics.median(seconds)
            gbs, gflops = case.bytes / median * 1e-9, case.flops / median * 1e-9
            print(f"{case.name:38} {case.shape:34} {median * 1e3:10.3f} {gbs:9.2f} {gflops:9.2f} "
                  f"{peak / 2**20:9.1f}", flush=True)
            results.append({"backend": backend, "device": device, "threads": threads, "case": case.name,
                            "shape": case.shape, "batch": case.batch, "seq": case.seq,
                            "median_s": median, "min_s": min(seconds), "max_s": max(seconds),
                            "repeat": args.repeat, "bytes": case.bytes, "flops": case.flops,
                            "gb_per_s": gbs, "gflop_per_s": gflops, "peak_bytes": peak})
        gc.collect()
    if args.json:
        doc = {"pytorch": torch.__version__, "backend": backend, "git_revision": git_revision(),
               "host": platform.node(),
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "peak_bytes_method": memory.method, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()

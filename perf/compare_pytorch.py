#!/usr/bin/python3
"""Times kformer-bench's cases in PyTorch on the same threads and writes the same JSON schema,
so that reports (perf/report.py) can show kformer/PyTorch ratios side by side.

    /usr/bin/python3 perf/compare_pytorch.py [--filter PATTERN] [--threads N] [--repeat N]
                                             [--device cpu|cuda] [--json FILE] [--label NAME]
                                             [--list]

Timing needs PyTorch: Debian's python3-torch (1.13), or PyPI's 2.x from scripts/perf-env, whose
results --label keeps apart (e.g. --label pytorch-2.11); --list and the checks of the arguments run
without it.
The cases (perf/pytorch_cases.py, which must lie beside this file) have the same names, shapes and
FLOP counts as kformer-bench's (N = batch * seq):

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
                                     (PyTorch 1.13's attention keeps (4*8, S, S) matrices,
                                     2 GiB each at S = 4096; 2.x's fused kernel does not)

The encoder layer is TST's TransformerBatchNormEncoderLayer (post-norm, BatchNorm1d over batch x
time, GELU, dropout 0.1), as kformer's TransformerEncoder with its defaults; its attention is
called with need_weights=False (PyTorch 2.x's fused scaled_dot_product_attention), as kformer keeps
no probabilities either.

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
"git_revision", "host", "date" (UTC, ISO 8601), "peak_bytes_method", "host_blas_kernels" (the
kernels OpenBLAS chose, where PyTorch's CPU BLAS is OpenBLAS, as Debian's is: OPENBLAS_CORETYPE
changes them for PyTorch as for kformer) and "results".
"""
import argparse
import ctypes
import datetime
import fnmatch
import gc
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

SCALING_SEQ = [64, 128, 256, 512, 1024, 2048, 4096]
SCALING_BATCH = [1, 4, 16, 64]


def scaling_family(kind, value):
    batch, seq = (4, value) if kind == "seq" else (value, 256)
    shape = f"({batch}, {seq}, 64) h8 ff256 L1"
    return ([f"scaling.{kind}.{value}.train_step"],
            lambda cases, dev: cases.encoder_cases(dev, f"scaling.{kind}.{value}", batch, seq, 64, 8, 256,
                                                   1, shape, forward=False))


def families():
    """(case names, builder): builder(cases, dev) makes the cases with perf/pytorch_cases.py (cases)
    and allocates their tensors, called only when one of its names is selected."""
    fams = [
        (["encoding.copy", "encoding.fixed.add", "encoding.fixed.inplace"],
         lambda cases, dev: cases.encoding_cases(dev)),
        (["linear.forward", "linear.backward"], lambda cases, dev: cases.linear_cases(dev)),
        (["attention.tst_default.forward", "attention.tst_default.train_step"],
         lambda cases, dev: cases.attention_cases(dev, "tst_default", 32, 64, 64)),
        (["attention.long.forward", "attention.long.train_step"],
         lambda cases, dev: cases.attention_cases(dev, "long", 4, 1024, 128)),
        (["encoder_layer.tst_default.forward", "encoder_layer.tst_default.train_step"],
         lambda cases, dev: cases.encoder_cases(dev, "encoder_layer.tst_default", 32, 64, 64, 8, 256, 1,
                                                "(32, 64, 64) h8 ff256")),
        (["encoder.tst_default.forward", "encoder.tst_default.train_step"],
         lambda cases, dev: cases.encoder_cases(dev, "encoder.tst_default", 32, 64, 64, 8, 256, 3)),
        (["encoder.tst_large.forward", "encoder.tst_large.train_step"],
         lambda cases, dev: cases.encoder_cases(dev, "encoder.tst_large", 64, 128, 128, 8, 256, 3)),
        (["tst.default.inference", "tst.default.train_step"], lambda cases, dev: cases.tst_cases(dev)),
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

    def __init__(self, cuda=None):
        """cuda: torch.cuda when the cases run on a CUDA device, else None."""
        self.cuda = cuda
        self.libc = None
        try:
            self.libc = ctypes.CDLL("libc.so.6")
        except OSError:
            pass
        if cuda is not None:
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
            self.cuda.synchronize()
            self.cuda.reset_peak_memory_stats()
            self.base = self.cuda.memory_allocated()
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
            self.cuda.synchronize()
            peak = self.cuda.max_memory_allocated()
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


def refuse_unwritable(parser, path):
    """Ends with parser's error if no file can be created at path: checked before the cases run,
    not after."""
    try:
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(os.path.abspath(path))):
            pass
    except OSError as e:
        parser.error(f"cannot write --json {path}: {e.strerror}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", default="",
                        help="part of a case name, or a glob over the whole name with * ? [")
    parser.add_argument("--threads", type=whole_number(1, 4096), default=2)
    parser.add_argument("--repeat", type=whole_number(1, 100000), default=20)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--json")
    parser.add_argument("--label", help="the results' backend name (default pytorch, pytorch-cuda), "
                        "to keep two PyTorch versions apart in one report (e.g. pytorch-2.11)")
    parser.add_argument("--list", action="store_true", help="print the selected cases and exit")
    args = parser.parse_args()
    if args.label is not None and not re.fullmatch(r"pytorch[A-Za-z0-9.\-]*", args.label):
        parser.error(f"--label must start with 'pytorch' and hold letters, digits, '.' and '-', "
                     f"got '{args.label}'")
    if not any(selected(args.filter, n) for names, _ in families() for n in names):
        parser.error(f"no case matches --filter '{args.filter}' (--list shows the cases)")
    if args.json:
        if args.list:
            parser.error("--json cannot go with --list, which records no results")
        refuse_unwritable(parser, args.json)

    if args.list:
        for names, _ in families():
            for name in names:
                if selected(args.filter, name):
                    print(name)
        return

    # torch only now: the checks above and --list run without it (and its seconds of import).
    try:
        import torch
        import pytorch_cases
    except ImportError as e:
        parser.error(f"timing the cases needs PyTorch (Debian's python3-torch): {e}")

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no CUDA device")
    dev = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = dev.type == "cuda"
    backend = args.label or ("pytorch-cuda" if cuda else "pytorch")
    if cuda:
        device = torch.cuda.get_device_name(dev)
        threads = None
    else:
        device = f"{platform.processor() or platform.machine()} ({args.threads} threads)"
        threads = args.threads

    def sync():
        if cuda:
            torch.cuda.synchronize()

    memory = PeakMemory(torch.cuda if cuda else None)
    results = []
    blas_kernels = openblas_kernels()
    print(f"PyTorch {torch.__version__}, {backend}: {device}"
          + (f", OpenBLAS {blas_kernels} kernels" if blas_kernels else ""))
    print(f"{'case':38} {'shape':34} {'median ms':>10} {'GB/s':>9} {'GFLOP/s':>9} {'peak MiB':>9}")
    for names, build in families():
        if not any(selected(args.filter, n) for n in names):
            continue
        for case in build(pytorch_cases, dev):
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
        if blas_kernels:
            doc["host_blas_kernels"] = blas_kernels
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


def openblas_kernels():
    """The kernels the OpenBLAS that torch loaded chose for this CPU ("Haswell"), or None."""
    try:
        corename = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
    except (OSError, AttributeError):
        return None
    corename.restype = ctypes.c_char_p
    return corename().decode()


if __name__ == "__main__":
    main()

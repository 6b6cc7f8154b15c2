#!/usr/bin/env python3
"""Times kformer-bench's inference cases in ONNX Runtime on the CPU and writes compare_pytorch.py's
JSON schema, so that perf/report.py can put ONNX Runtime beside kformer and PyTorch.

    python3 perf/compare_onnxruntime.py [--filter PATTERN] [--threads N] [--repeat N] [--json FILE]
                                         [--list]

An optional anchor, never a test requirement: it needs PyPI's torch 2.x (to build and export the
same modules as perf/pytorch_cases.py), onnx and onnxruntime (scripts/perf-env installs them into a
virtual environment outside the tree). Each inference case (attention.*.forward, the encoders'
.forward, tst.default.inference) is the PyTorch module of compare_pytorch.py exported to ONNX
(torch.onnx.export, opset 17, fixed shapes) and run by an InferenceSession with the CPU execution
provider, N intra-op threads and one inter-op thread (ORT_SEQUENTIAL), graph optimisations at
their highest level. Names, shapes and FLOP counts are kformer-bench's; --filter selects as there.
Before timing, the session's output is checked against PyTorch's (max abs difference printed and
recorded as "max_abs_vs_pytorch"). "peak_bytes" is the growth of the process's resident set over
the timed runs (compare_pytorch.py's CPU method).
"""
import argparse
import datetime
import io
import json
import os
import platform
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_pytorch  # noqa: E402  (argument helpers, case families, peak memory)

MODELS = ("attention.", "encoder_layer.", "encoder.", "tst.")


def inference_names():
    """The model cases' eval-mode forwards (the layers' own cases, linear.*, are left out)."""
    return [n for names, _ in compare_pytorch.families() for n in names
            if n.startswith(MODELS) and n.endswith((".forward", ".inference"))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", default="",
                        help="part of a case name, or a glob over the whole name with * ? [")
    parser.add_argument("--threads", type=compare_pytorch.whole_number(1, 4096), default=2)
    parser.add_argument("--repeat", type=compare_pytorch.whole_number(1, 100000), default=20)
    parser.add_argument("--json")
    parser.add_argument("--list", action="store_true", help="print the selected cases and exit")
    args = parser.parse_args()
    chosen = [n for n in inference_names() if compare_pytorch.selected(args.filter, n)]
    if not chosen:
        parser.error(f"no inference case matches --filter '{args.filter}' (--list shows them)")
    if args.json:
        if args.list:
            parser.error("--json cannot go with --list, which records no results")
        compare_pytorch.refuse_unwritable(parser, args.json)
    if args.list:
        print("\n".join(chosen))
        return

    try:
        import numpy as np
        import onnxruntime as ort
        import torch
        import pytorch_cases
    except ImportError as e:
        parser.error(f"needs torch 2.x, onnx and onnxruntime from PyPI (scripts/perf-env): {e}")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    device = f"{platform.processor() or platform.machine()} ({args.threads} threads)"
    memory = compare_pytorch.PeakMemory()
    print(f"ONNX Runtime {ort.__version__} (CPUExecutionProvider), exported by PyTorch {torch.__version__}: "
          f"{device}")
    print(f"{'case':38} {'shape':34} {'median ms':>10} {'GFLOP/s':>9} {'vs PyTorch':>11} {'peak MiB':>9}")
    results = []
    cpu = torch.device("cpu")
    for names, build in compare_pytorch.families():
        if not any(n in chosen for n in names):
            continue
        for case in build(pytorch_cases, cpu):
            if case.name not in chosen:
                continue
            model, x = case.run.model, case.run.input
            model.eval()
            with torch.no_grad():
                expected = model(x).numpy()
            onnx_model = io.BytesIO()
            with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(model, (x,), onnx_model, input_names=["x"], output_names=["y"],
                                  opset_version=17, dynamo=False)
            session = ort.InferenceSession(onnx_model.getvalue(), options,
                                           providers=["CPUExecutionProvider"])
            feed = {"x": x.numpy()}
            got = session.run(None, feed)[0]
            max_abs = float(np.max(np.abs(got - expected)))
            memory.start()
            session.run(None, feed)
            session.run(None, feed)
            seconds = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                session.run(None, feed)
                seconds.append(time.perf_counter() - start)
            peak = memory.peak_bytes()
            median = statistics.median(seconds)
            gflops = case.flops / median * 1e-9
            print(f"{case.name:38} {case.shape:34} {median * 1e3:10.3f} {gflops:9.2f} {max_abs:11.1e} "
                  f"{peak / 2**20:9.1f}", flush=True)
            results.append({"backend": "onnxruntime", "device": device, "threads": args.threads,
                            "case": case.name, "shape": case.shape, "batch": case.batch, "seq": case.seq,
                            "median_s": median, "min_s": min(seconds), "max_s": max(seconds),
                            "repeat": args.repeat, "bytes": case.bytes, "flops": case.flops,
                            "gb_per_s": case.bytes / median * 1e-9, "gflop_per_s": gflops,
                            "peak_bytes": peak, "max_abs_vs_pytorch": max_abs})
    if args.json:
        doc = {"onnxruntime": ort.__version__, "pytorch": torch.__version__, "backend": "onnxruntime",
               "git_revision": compare_pytorch.git_revision(), "host": platform.node(),
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "peak_bytes_method": memory.method, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()

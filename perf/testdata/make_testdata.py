#!/usr/bin/python3
"""Writes the synthetic benchmark documents that perf/test_report.py feeds to perf/report.py:

  kformer_bench.json  kformer-bench's format, backends serial and openmp: limits, cases with a
                      side-by-side baseline, and scaling.seq.<S>.train_step for S = 64..4096 with
                      serial time = 1e-6 S^2 s, peak = 4096 S^2 bytes (exact powers; "seq" given)
                      and openmp time = 5e-7 S^2 + 5e-4 s, peak = 65536 S + 1e6 bytes (no "seq"
                      field: report.py reads S from the case name)
  pytorch.json        compare_pytorch.py's format, backend pytorch, same host as the bench

    /usr/bin/python3 perf/testdata/make_testdata.py     # rewrites both files next to itself
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def attention_flops(b, s, d):
    n = b * s
    return 2.0 * n * d * 3 * d + 4.0 * b * s * s * d + 2.0 * n * d * d


def layer_flops(b, s, d, ff):
    return attention_flops(b, s, d) + 4.0 * b * s * d * ff


TST = 2.0 * 32 * 128 * 8 * 64 + 3 * layer_flops(32, 128, 64, 256) + 2.0 * 32 * 128 * 64 * 4
ENC = "(8, 4096, 512) float"
ENC_BYTES = 2.0 * 8 * 4096 * 512 * 4
# case: (shape, bytes, flops, batch, seq, {backend: median_s})
CASES = {
    "limit.copy": ("2 x 128 MiB float", 2.0 * (32 << 20) * 4, 0, None, None,
                   {"serial": 0.0200, "openmp": 0.0100}),
    "limit.sgemm": ("(1024)^3 float", 3.0 * 1024 * 1024 * 4, 2.0 * 1024 ** 3, None, None,
                    {"serial": 0.1000, "openmp": 0.0520}),
    "encoding.copy": (ENC, ENC_BYTES, 0, 8, 4096, {"serial": 0.0100, "openmp": 0.0055, "pytorch": 0.0061}),
    "encoding.fixed.add": (ENC, ENC_BYTES, 0, 8, 4096, {"serial": 0.0125, "openmp": 0.0070, "pytorch": 0.0093}),
    "encoding.fixed.inplace": (ENC, ENC_BYTES, 0, 8, 4096, {"pytorch": 0.0066}),
    "encoding.learnable.forward": (ENC, ENC_BYTES + 4096 * 512 * 4, 0, 8, 4096, {"serial": 0.0131, "openmp": 0.0072}),
    "linear.forward": ("(8192, 512) -> 2048", 0, 2.0 * 8192 * 512 * 2048, None, None,
                       {"serial": 0.80, "openmp": 0.42, "pytorch": 0.63}),
    "attention.tst_default.forward": ("(32, 64, 64) h8", 0, attention_flops(32, 64, 64), 32, 64,
                                      {"serial": 0.060, "openmp": 0.033, "pytorch": 0.0475}),
    "attention.tst_default.train_step": ("(32, 64, 64) h8", 0, 3 * attention_flops(32, 64, 64), 32, 64,
                                         {"serial": 0.19, "openmp": 0.101, "pytorch": 0.173}),
    "encoder.tst_default.train_step": ("(32, 64, 64) h8 ff256 L3", 0, 9 * layer_flops(32, 64, 64, 256), 32, 64,
                                       {"serial": 0.52, "openmp": 0.29, "pytorch": 0.61}),
    "tst.default.train_step": ("(32, 128, 8) d64 h8 ff256 L3 c4", 0, 3 * TST, 32, 128,
                               {"serial": 1.40, "openmp": 0.77, "pytorch": 1.65}),
}
BASELINE = {"encoding.fixed.add": "encoding.copy", "encoding.learnable.forward": "encoding.copy",
            "encoder.tst_default.train_step": "limit.sgemm"}
DEVICE = {"serial": "AMD EPYC 7B13 (1 threads)", "openmp": "AMD EPYC 7B13 (2 threads)", "pytorch": "x86_64 (2 threads)"}
THREADS = {"serial": 1, "openmp": 2, "pytorch": 2}


def result(backend, case, shape, nbytes, flops, median, batch=None, seq=None, peak=None, with_dims=True):
    r = {"backend": backend, "device": DEVICE[backend], "threads": THREADS[backend], "case": case, "shape": shape,
         "median_s": median, "min_s": median * 0.97, "max_s": median * 1.05, "repeat": 10,
         "bytes": nbytes, "flops": flops, "gb_per_s": nbytes / median * 1e-9, "gflop_per_s": flops / median * 1e-9}
    if with_dims:
        r["batch"], r["seq"] = batch, seq
    if peak is not None:
        r["peak_bytes"] = peak
    return r


def main():
    bench, torch = [], []
    for backend in ("serial", "openmp", "pytorch"):
        out = torch if backend == "pytorch" else bench
        for case, (shape, nbytes, flops, batch, seq, times) in CASES.items():
            if backend not in times:
                continue
            r = result(backend, case, shape, nbytes, flops, times[backend], batch, seq,
                       peak=1 << 20 if backend == "pytorch" else None, with_dims=backend == "pytorch")
            if backend != "pytorch" and case in BASELINE:
                base = CASES[BASELINE[case]]
                base_median = base[5][backend] * 1.02
                rate = (flops or nbytes) / times[backend]
                base_rate = (base[2] or base[1]) / base_median
                r.update(baseline=BASELINE[case], baseline_median_s=base_median, ratio_to_baseline=rate / base_rate)
            out.append(r)
        if backend == "pytorch":
            continue
        for s in (64, 128, 256, 512, 1024, 2048, 4096):
            flops = 3 * layer_flops(4, s, 64, 256)
            if backend == "serial":
                median, peak = 1e-6 * s ** 2, 4096 * s ** 2
            else:
                median, peak = 5e-7 * s ** 2 + 5e-4, 65536 * s + 10 ** 6
            out.append(result(backend, f"scaling.seq.{s}.train_step", f"(4, {s}, 64) h8 ff256 L1", 0, flops,
                              median, 4, s, peak, with_dims=backend == "serial"))
    docs = {"kformer_bench.json": {"kokkos": "3.4.01", "compiler": "GCC 12.2.0", "git_revision": "abc1234",
                                   "host": "testhost", "date": "2025-01-01T00:00:00Z",
                                   "host_blas": "OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell", "host_blas_kernels": "Haswell",
                                   "results": bench},
            "pytorch.json": {"pytorch": "1.13.0", "backend": "pytorch", "git_revision": "abc1234",
                             "host": "testhost", "date": "2025-01-01T00:05:00Z", "peak_bytes_method": "rss-hwm",
                             "host_blas_kernels": "Cooperlake", "results": torch}}
    for name, doc in docs.items():
        with open(os.path.join(HERE, name), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()

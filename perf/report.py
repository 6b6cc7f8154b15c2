#!/usr/bin/python3
"""Merges benchmark results (kformer-bench --json, perf/compare_pytorch.py --json) into a Markdown
report with PNG charts.

    /usr/bin/python3 perf/report.py [-o OUTDIR] result.json [result.json ...]

writes OUTDIR/report.md and, with matplotlib (Debian's python3-matplotlib), OUTDIR/throughput.png,
limits.png, speedup.png and scaling.png. OUTDIR defaults to perf/results next to this script
(git ignores it); it is created when missing, and files of earlier reports in it are replaced.

report.md has
  - the input documents (backends, host, revision, date, versions);
  - a table per backend of every case: median time, GFLOP/s (cases with flops > 0, "GEMM-bound")
    or GB/s (memory-bound), and the fraction of the machine limit measured in the same run: the
    bench's own side-by-side ratio (ratio_to_baseline) where the result has one, else the rate
    over limit.sgemm (GFLOP/s) or limit.copy (GB/s) of the same document and backend. A document
    without limits (PyTorch's) borrows them from a kformer-bench document of the same "host"
    (openmp, threads or serial for "pytorch" and "onnxruntime", cuda or hip for "pytorch-cuda"
    and any peer whose name says cuda or hip; one run on the
    same number of threads first), which the table says.
    Targets: 0.9 of the limit for memory-bound cases, 0.6 for GEMM-bound ones;
  - the speed-up of each kformer backend over each PyTorch backend on the same kind of device
    (CPU backends against "pytorch", a labelled PyTorch such as "pytorch-2.11" and "onnxruntime";
    CUDA and HIP against "pytorch-cuda") for the cases both ran
    (matched by name): PyTorch median time / kformer median time, > 1 when kformer is faster,
    and its geometric mean; each pair says whether both ran on the same number of threads (the
    chart's legend gives the counts). PyTorch documents of several thread counts are kept apart
    ("pytorch (1 thread)", "pytorch (2 threads)"), and a kformer backend is compared only with
    those on its own number of threads where there are any;
  - when scaling.seq.<S>.* (or scaling.batch.<B>.*) cases are present, the exponent p of
    time ~ seq^p and of peak_bytes ~ seq^p, fitted by least squares on log-log axes over the
    largest 4 points and over all points.

A case that several documents hold for the same backend is taken from the last file named. Exit
status 2, with a one-line message naming the file, on an unreadable or malformed JSON file or a
document without a "results" list whose entries have "backend", "case", "median_s" (> 0), "flops"
and "bytes". A chart without data is skipped with a note in report.md, as are all charts when
matplotlib is missing.
"""
import argparse
import datetime
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUTDIR = os.path.join(HERE, "results")
TARGETS = {"memory": 0.9, "compute": 0.6}  # fraction of limit.copy / limit.sgemm
CHARTS = ("throughput.png", "limits.png", "speedup.png", "scaling.png")
BACKEND_ORDER = ["serial", "openmp", "threads", "cuda", "hip", "pytorch", "pytorch-cuda",
                 "onnxruntime"]
CPU_BACKENDS = ["openmp", "threads", "serial"]
GPU_BACKENDS = ["cuda", "hip"]
SCALING = re.compile(r"^scaling\.(seq|batch)\.(\d+)\.(.+)$")


class InputError(Exception):
    pass


def is_pytorch(backend):
    """A peer's backend, not kformer's: PyTorch ("pytorch", "pytorch-cuda", or a --label such as
    "pytorch-2.11") or ONNX Runtime ("onnxruntime")."""
    return backend.startswith(("pytorch", "onnxruntime"))


def peer_devices(backend):
    """The kformer backends a peer's backend runs beside: the same kind of device, where a
    document without limits borrows them (same host only) and which it is compared with."""
    return GPU_BACKENDS if "cuda" in backend or "hip" in backend else CPU_BACKENDS


def base_backend(backend):
    """The backend's name without a thread count: "pytorch (1 thread)" -> "pytorch"."""
    return backend.split(" (")[0]


def threads_text(n):
    return f"{n} thread{'' if n == 1 else 's'}"


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load(path, index):
    """The results of one document, each with its document index; raises InputError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON: {e}")
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise InputError(f'{path}: not a benchmark document (no "results" list)')
    rows = []
    for i, r in enumerate(doc["results"]):
        where = f"{path}: results[{i}]"
        if not isinstance(r, dict):
            raise InputError(f"{where} is not an object")
        for key in ("backend", "case"):
            if not isinstance(r.get(key), str) or not r[key]:
                raise InputError(f'{where} lacks "{key}" (a non-empty string)')
        where += f" ({r['case']})"
        if not _number(r.get("median_s")) or r["median_s"] <= 0:
            raise InputError(f'{where} lacks "median_s" (a number > 0)')
        for key in ("flops", "bytes"):
            if not _number(r.get(key)) or r[key] < 0:
                raise InputError(f'{where} lacks "{key}" (a number >= 0)')
        for key in ("peak_bytes", "batch", "seq", "ratio_to_baseline"):
            if r.get(key) is not None and not _number(r[key]):
                raise InputError(f'{where}: "{key}" is not a number')
        row = dict(r, doc=index)
        row["kind"] = "compute" if r["flops"] > 0 else "memory" if r["bytes"] > 0 else "time"
        row["rate"] = (r["flops"] if r["flops"] > 0 else r["bytes"]) / r["median_s"] * 1e-9
        rows.append(row)
    kind = ("onnxruntime" if "onnxruntime" in doc else "pytorch" if "pytorch" in doc
            else "kformer-bench")
    meta = {"file": path, "kind": kind, "results": len(rows),
            "backends": sorted({r["backend"] for r in rows}, key=backend_key)}
    for key in ("host", "git_revision", "date", "kokkos", "compiler", "pytorch", "onnxruntime",
                "host_blas_kernels", "peak_bytes_method"):
        if isinstance(doc.get(key), (str, int, float)):
            meta[key] = str(doc[key])
    return meta, rows


def backend_key(backend):
    base = base_backend(backend)
    return (BACKEND_ORDER.index(base) if base in BACKEND_ORDER else len(BACKEND_ORDER), backend)


# --- the analysis ------------------------------------------------------------------------------
class Report:
    def __init__(self, docs):
        self.docs = [meta for meta, _ in docs]
        self.notes = []
        self.by_backend = {}  # backend -> {case: row}, case order = order of first appearance
        # PyTorch runs on several thread counts (compare_pytorch.py --threads) are kept apart, as
        # "pytorch (N threads)", so that each kformer backend meets the run on its own threads.
        counts = {}
        for _, rows in docs:
            for r in rows:
                if is_pytorch(r["backend"]) and _number(r.get("threads")):
                    counts.setdefault(r["backend"], set()).add(r["threads"])
        for _, rows in docs:
            for r in rows:
                if len(counts.get(r["backend"], ())) > 1 and _number(r.get("threads")):
                    r["backend"] = f"{r['backend']} ({threads_text(r['threads'])})"
        for meta, rows in docs:
            for r in rows:
                cases = self.by_backend.setdefault(r["backend"], {})
                if r["case"] in cases:
                    old = self.docs[cases[r["case"]]["doc"]]["file"]
                    self.notes.append(f"`{r['case']}` on {r['backend']}: {old} and {meta['file']}; "
                                      f"the latter is used.")
                cases[r["case"]] = r
        self.backends = sorted(self.by_backend, key=backend_key)
        # Each document's own limits, also where a later document's row of the same case is the
        # one shown: a row is compared with the limits measured in its own run.
        # (doc, backend) -> {"memory": GB/s, "compute": GFLOP/s, "threads": the limits' threads}
        self.limits = {}
        for _, rows in docs:
            for r in rows:
                if r["case"] == "limit.copy" and r["bytes"] > 0:
                    kind = "memory"
                elif r["case"] == "limit.sgemm" and r["flops"] > 0:
                    kind = "compute"
                else:
                    continue
                limits = self.limits.setdefault((r["doc"], r["backend"]), {})
                limits[kind], limits["threads"] = r["rate"], r.get("threads")
        for cases in self.by_backend.values():
            for r in cases.values():
                r["fraction"], r["reference"] = self.fraction(r)

    def limit_for(self, r):
        """(limit rate, how it was found) for a row, or (None, None)."""
        kind, backend, doc = r["kind"], r["backend"], r["doc"]
        own = self.limits.get((doc, backend), {}).get(kind)
        name = "limit.copy" if kind == "memory" else "limit.sgemm"
        if own:
            return own, name
        host = self.docs[doc].get("host")
        if not host:
            return None, None
        # Limits measured on the row's own number of threads first (PyTorch on 1 thread: Serial's).
        threads = r.get("threads")
        for same_threads in (True, False):
            for other in [backend] + (peer_devices(base_backend(backend)) if is_pytorch(backend)
                                      else []):
                for (d, b), limits in sorted(self.limits.items()):
                    if (b == other and d != doc and self.docs[d].get("host") == host and limits.get(kind)
                            and (not same_threads or limits["threads"] == threads)):
                        return limits[kind], f"{name} of {other} ({os.path.basename(self.docs[d]['file'])}, same host)"
        return None, None

    def fraction(self, r):
        if r["kind"] == "time" or r["case"].startswith("limit."):
            return None, None
        if _number(r.get("ratio_to_baseline")) and r["ratio_to_baseline"] > 0:
            return r["ratio_to_baseline"], f"{r.get('baseline') or 'baseline'} (side by side)"
        limit, how = self.limit_for(r)
        return (r["rate"] / limit, how) if limit else (None, None)

    def speedups(self):
        """[(kformer backend, pytorch backend, [(case, kformer row, pytorch row, speed-up)])]: each
        kformer backend against the PyTorch runs on its kind of device, only those on its own
        number of threads where there are such."""
        pairs = []
        for k in self.backends:
            if is_pytorch(k):
                continue
            candidates = [p for p in self.backends
                          if is_pytorch(p) and k in peer_devices(base_backend(p))]
            kt = self.threads(k)
            same_threads = [p for p in candidates if kt is not None and self.threads(p) == kt]
            for p in same_threads or candidates:
                common = [c for c in self.by_backend[k] if c in self.by_backend[p]]
                rows = [(c, self.by_backend[k][c], self.by_backend[p][c],
                         self.by_backend[p][c]["median_s"] / self.by_backend[k][c]["median_s"]) for c in common]
                if rows:
                    pairs.append((k, p, rows))
        return pairs

    def threads(self, backend):
        """The thread count every result of backend records, or None (none or several, a GPU)."""
        counts = {r.get("threads") for r in self.by_backend[backend].values()}
        return counts.pop() if len(counts) == 1 and _number(next(iter(counts))) else None

    def pair_label(self, k, p):
        """"serial (1 thread) vs pytorch (2 threads)" where both record their threads (CPUs), else
        "cuda vs pytorch-cuda"."""
        kt, pt = self.threads(k), self.threads(p)
        if kt is None or pt is None:
            return f"{k} vs {p}"
        return f"{base_backend(k)} ({threads_text(kt)}) vs {base_backend(p)} ({threads_text(pt)})"

    def scaling(self):
        """{(backend, "seq"|"batch", case suffix): [(value, median_s, peak_bytes or None)] sorted}."""
        series = {}
        for backend in self.backends:
            for r in self.by_backend[backend].values():
                m = SCALING.match(r["case"])
                if not m:
                    continue
                dim, suffix = m.group(1), m.group(3)
                value = r.get(dim) if _number(r.get(dim)) and r.get(dim) > 0 else int(m.group(2))
                peak = r.get("peak_bytes") if _number(r.get("peak_bytes")) and r["peak_bytes"] > 0 else None
                series.setdefault((backend, dim, suffix), []).append((value, r["median_s"], peak))
        return {k: sorted(v) for k, v in series.items()}


def fit_exponent(points):
    """Least-squares slope of log(y) on log(x); None with fewer than 2 distinct x."""
    points = [(x, y) for x, y in points if y is not None and x > 0 and y > 0]
    if len({x for x, _ in points}) < 2:
        return None
    lx = [math.log(x) for x, _ in points]
    ly = [math.log(y) for _, y in points]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx


def exponents(points, column):
    """(over all points, over the largest 4) of time (column 1) or peak bytes (column 2)."""
    xy = [(p[0], p[column]) for p in points if p[column] is not None]
    return fit_exponent(xy), fit_exponent(xy[-4:])


# --- Markdown --------------------------------------------------------------------------------
def fmt(value, spec, none="—"):
    return none if value is None else format(value, spec)


def rate_text(r):
    if r["kind"] == "compute":
        return f"{r['rate']:.2f} GFLOP/s"
    if r["kind"] == "memory":
        return f"{r['rate']:.2f} GB/s"
    return "—"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def markdown(report, chart_notes):
    out = ["# kformer performance report", "",
           f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')} "
           f"by perf/report.py from {len(report.docs)} document(s).", "", "## Inputs", ""]
    rows = []
    for d in report.docs:
        versions = [f"{k} {d[k]}" for k in ("kokkos", "compiler", "pytorch", "onnxruntime") if k in d]
        if "host_blas_kernels" in d:
            versions.append(f"OpenBLAS {d['host_blas_kernels']} kernels")
        versions = ", ".join(versions)
        rows.append([f"`{d['file']}`", d["kind"], ", ".join(d["backends"]), d["results"], d.get("host", "—"),
                     d.get("git_revision", "—"), d.get("date", "—"), versions or "—"])
    out += table(["file", "from", "backends", "results", "host", "revision", "date", "versions"], rows)

    out += ["", "## Results per backend", "",
            "Throughput is GFLOP/s for cases that count flops (GEMM-bound) and GB/s for memory-bound ones. "
            "*Of limit* is the fraction of the machine limit measured in the same run (the column after it "
            f"names it); targets: {TARGETS['memory']} of the copy bandwidth for memory-bound cases, "
            f"{TARGETS['compute']} of sgemm for GEMM-bound ones. Peak is the memory the case used above "
            "what was allocated before it, where the document records it.", ""]
    for backend in report.backends:
        cases = report.by_backend[backend].values()
        devices = sorted({str(r.get("device")) for r in cases if r.get("device")})
        out += [f"### {backend}" + (f" — {', '.join(devices)}" if devices else ""), ""]
        rows = []
        for r in cases:
            target = TARGETS.get(r["kind"])
            met = "—" if r["fraction"] is None or target is None else (
                "met" if r["fraction"] >= target else f"below {target}")
            peak = r.get("peak_bytes")
            rows.append([f"`{r['case']}`", r.get("shape", ""), f"{r['median_s'] * 1e3:.3f}", rate_text(r),
                         fmt(r["fraction"], ".2f"), r["reference"] or "—", met,
                         fmt(peak / 2**20 if _number(peak) else None, ".1f")])
        out += table(["case", "shape", "median ms", "throughput", "of limit", "limit", "target", "peak MiB"], rows)
        out.append("")

    out += ["## kformer vs PyTorch", ""]
    pairs = report.speedups()
    if not pairs:
        out += ["No case was run by both a kformer backend and PyTorch.", ""]
    else:
        out += ["Speed-up = PyTorch median time / kformer median time (> 1: kformer is faster), for the "
                "cases both ran, matched by name.", ""]
    for k, p, rows in pairs:
        out += [f"### {k} vs {p}", ""]
        kt, pt = report.threads(k), report.threads(p)
        if kt is not None and pt is not None:
            if kt == pt:
                out += [f"Both on {threads_text(kt)}.", ""]
            else:
                out += [f"Not the same threads: {k} on {threads_text(kt)}, {p} on "
                        f"{threads_text(pt)}.", ""]
        body = []
        for case, kr, pr, s in rows:
            shape = kr.get("shape", "")
            if pr.get("shape") and shape and pr["shape"] != shape:
                shape += f" (PyTorch: {pr['shape']})"
            body.append([f"`{case}`", shape, f"{kr['median_s'] * 1e3:.3f}", f"{pr['median_s'] * 1e3:.3f}",
                         f"{s:.2f}x"])
        geo = math.exp(sum(math.log(s) for *_, s in rows) / len(rows))
        body.append([f"geometric mean ({len(rows)} cases)", "", "", "", f"{geo:.2f}x"])
        out += table(["case", "shape", f"{k} ms", f"{p} ms", "speed-up"], body)
        out.append("")

    series = report.scaling()
    out += ["## Scaling", ""]
    if not series:
        out += ["No scaling.seq or scaling.batch cases in the inputs.", ""]
    else:
        out += ["Exponent p of time ∝ n^p and of peak bytes ∝ n^p (n = seq or batch), fitted by least "
                "squares on log-log axes over all points and over the 4 largest n.", ""]
        rows = []
        for (backend, dim, suffix), points in series.items():
            t_all, t_top = exponents(points, 1)
            b_all, b_top = exponents(points, 2)
            xs = [p[0] for p in points]
            rows.append([backend, f"`scaling.{dim}.*.{suffix}`", dim, len(points), f"{min(xs)}–{max(xs)}",
                         fmt(t_all, ".3f"), fmt(t_top, ".3f"), fmt(b_all, ".3f"), fmt(b_top, ".3f")])
        out += table(["backend", "cases", "vs", "points", "range", "time p (all)", "time p (largest 4)",
                      "peak bytes p (all)", "peak bytes p (largest 4)"], rows)
        out.append("")

    out += ["## Charts", ""]
    for name in CHARTS:
        note = chart_notes.get(name)
        if note:
            out += [f"- `{name}`: skipped ({note}).", ""]
        else:
            out += [f"![{name[:-4]}]({name})", ""]
    if report.notes:
        out += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    return "\n".join(out)


# --- charts ----------------------------------------------------------------------------------
def plain_cases(report, backends, want):
    """Cases in order of first appearance (scaling cases excluded) for which want(row) holds."""
    seen = []
    for b in backends:
        for c, r in report.by_backend[b].items():
            if c not in seen and not c.startswith("scaling.") and want(r):
                seen.append(c)
    return seen


def colours(backends):
    import matplotlib.pyplot as plt
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {b: cycle[i % len(cycle)] for i, b in enumerate(backends)}


def grouped_barh(ax, cases, series, colour, log=False):
    """Horizontal bars: one group per case, one bar per (label, {case: value}) series."""
    n = max(1, len(series))
    height = 0.8 / n
    for i, (label, values) in enumerate(series):
        ys = [c_i + (i - (n - 1) / 2) * height for c_i, c in enumerate(cases) if values.get(c) is not None]
        xs = [values[c] for c in cases if values.get(c) is not None]
        ax.barh(ys, xs, height=height, label=label, color=colour.get(label))
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels(cases, fontsize=8)
    ax.invert_yaxis()
    if log:
        from matplotlib import ticker
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.grid(axis="x", alpha=0.3)


def legend_outside(ax):
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def panel_height(n):
    return max(1.5, 0.32 * n + 0.8)


def chart_throughput(report, path, plt):
    panels = []
    for kind, unit in (("compute", "GFLOP/s"), ("memory", "GB/s")):
        cases = plain_cases(report, report.backends, lambda r, kind=kind: r["kind"] == kind)
        if cases:
            panels.append((kind, unit, cases))
    if not panels:
        return "no case with a throughput"
    colour = colours(report.backends)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(11, sum(panel_height(len(c)) for *_, c in panels) + 0.6),
                             gridspec_kw={"height_ratios": [len(c) + 2 for *_, c in panels]})
    for ax, (kind, unit, cases) in zip(axes[:, 0], panels):
        series = [(b, {c: r["rate"] for c, r in report.by_backend[b].items() if r["kind"] == kind})
                  for b in report.backends]
        grouped_barh(ax, cases, series, colour, log=True)
        ax.set_xlabel(unit + (" (GEMM-bound cases)" if kind == "compute" else " (memory-bound cases)"))
    legend_outside(axes[0, 0])
    axes[0, 0].set_title("Throughput per case and backend")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def chart_limits(report, path, plt):
    panels = []
    for kind, target in (("memory", TARGETS["memory"]), ("compute", TARGETS["compute"])):
        cases = plain_cases(report, report.backends,
                            lambda r, kind=kind: r["kind"] == kind and r["fraction"] is not None)
        if cases:
            panels.append((kind, target, cases))
    if not panels:
        return "no case with a measured machine limit"
    colour = colours(report.backends)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(11, sum(panel_height(len(c)) for *_, c in panels) + 0.6),
                             gridspec_kw={"height_ratios": [len(c) + 2 for *_, c in panels]})
    for ax, (kind, target, cases) in zip(axes[:, 0], panels):
        series = [(b, {c: r["fraction"] for c, r in report.by_backend[b].items()
                       if r["kind"] == kind and r["fraction"] is not None}) for b in report.backends]
        series = [s for s in series if s[1]]
        grouped_barh(ax, cases, series, colour)
        ax.axvline(target, color="black", linestyle="--", linewidth=1,
                   label=f"target {target} ({'memory' if kind == 'memory' else 'GEMM'}-bound)")
        ax.set_xlabel("fraction of " + ("copy bandwidth" if kind == "memory" else "sgemm GFLOP/s"))
        legend_outside(ax)
    axes[0, 0].set_title("Fraction of the machine limit measured in the same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def chart_speedup(report, path, plt):
    pairs = report.speedups()
    if not pairs:
        return "no case was run by both kformer and PyTorch"
    cases = []
    for _, _, rows in pairs:
        cases += [c for c, *_ in rows if c not in cases]
    labels = [report.pair_label(k, p) for k, p, _ in pairs]
    colour = dict(zip(labels, colours(labels).values()))
    fig, ax = plt.subplots(figsize=(11, panel_height(len(cases)) + 0.8))
    grouped_barh(ax, cases, [(label, {c: s for c, _, _, s in rows})
                             for label, (_, _, rows) in zip(labels, pairs)], colour, log=True)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("speed-up: PyTorch time / kformer time (> 1: kformer faster)")
    ax.set_title("kformer vs PyTorch")
    legend_outside(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def chart_scaling(report, path, plt):
    series = {k: v for k, v in report.scaling().items() if k[1] == "seq"}
    if not series:
        return "no scaling.seq cases"
    with_bytes = any(p[2] is not None for points in series.values() for p in points)
    fig, axes = plt.subplots(1, 2 if with_bytes else 1, squeeze=False, figsize=(11 if with_bytes else 6, 4.5))
    for (backend, _, suffix), points in series.items():
        label = backend + ("" if suffix == "train_step" else f" {suffix}")
        t_all, t_top = exponents(points, 1)
        axes[0, 0].plot([p[0] for p in points], [p[1] for p in points], marker="o",
                        label=f"{label}: p = {fmt(t_top, '.2f')} (largest 4)")
        if with_bytes:
            pts = [p for p in points if p[2] is not None]
            if pts:
                b_all, b_top = exponents(points, 2)
                axes[0, 1].plot([p[0] for p in pts], [p[2] for p in pts], marker="o",
                                label=f"{label}: p = {fmt(b_top, '.2f')} (largest 4)")
    titles = [("median time (s)", "time vs seq"), ("peak bytes", "peak memory vs seq")]
    for ax, (ylabel, title) in zip(axes[0], titles):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("seq")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


def draw_charts(report, outdir):
    """{chart file: why it was skipped} for the charts not drawn."""
    notes = {}
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return {name: f"matplotlib is not available: {e}" for name in CHARTS}
    for name, draw in zip(CHARTS, (chart_throughput, chart_limits, chart_speedup, chart_scaling)):
        path = os.path.join(outdir, name)
        try:
            note = draw(report, path, plt)
        except Exception as e:  # a chart must never fail the report
            note = f"could not be drawn: {type(e).__name__}: {e}"
        finally:
            plt.close("all")
        if note:
            notes[name] = note
            if os.path.exists(path):
                os.remove(path)  # no stale chart from an earlier report
    return notes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--outdir", default=DEFAULT_OUTDIR,
                        help="where report.md and the charts go (default: perf/results)")
    parser.add_argument("inputs", nargs="+", metavar="result.json")
    args = parser.parse_args(argv)
    try:
        docs = [load(path, i) for i, path in enumerate(args.inputs)]
    except InputError as e:
        print(f"report.py: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    report = Report(docs)
    os.makedirs(args.outdir, exist_ok=True)
    notes = draw_charts(report, args.outdir)
    path = os.path.join(args.outdir, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(markdown(report, notes).rstrip("\n") + "\n")
    print(f"wrote {path}" + "".join(f", {n}" for n in CHARTS if n not in notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Tests perf/report.py on the synthetic documents in perf/testdata (see make_testdata.py there):
speed-ups and fitted exponents in report.md against values computed here from the same data,
valid PNG charts, skipped charts, and exit status 2 on bad input.

    /usr/bin/python3 perf/test_report.py        # or: ctest -L perf-report

Needs matplotlib (Debian's python3-matplotlib); no pytest, no torch.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "report.py")
DATA = os.path.join(HERE, "testdata")
BENCH = os.path.join(DATA, "kformer_bench.json")
TORCH = os.path.join(DATA, "pytorch.json")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHARTS = ("throughput.png", "limits.png", "speedup.png", "scaling.png")


def run_report(outdir, *inputs):
    return subprocess.run([sys.executable, REPORT, "-o", outdir, *inputs], capture_output=True, text=True,
                          timeout=300)


def results(path):
    with open(path) as f:
        return json.load(f)["results"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, heading):
    """The text under a Markdown heading, up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1:]
    ends = [i for i in (rest.find("\n" + "#" * n + " ") for n in range(1, len(level) + 1)) if i >= 0]
    return rest[:min(ends)] if ends else rest


def rows(text):
    """Markdown table rows as lists of stripped cells, keyed by their first cell."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[cells[0].strip("`")] = cells
    return out


def slope(points):
    lx = [math.log(x) for x, _ in points]
    ly = [math.log(y) for _, y in points]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.tmp.name, "report")
        cls.proc = run_report(cls.out, BENCH, TORCH)
        md = os.path.join(cls.out, "report.md")
        cls.md = read(md) if os.path.exists(md) else ""

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_runs(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertIn("# kformer performance report", self.md)

    def test_inputs_name_the_blas_kernels(self):
        inputs = {os.path.basename(file): cells for file, cells in rows(section(self.md, "## Inputs")).items()}
        self.assertTrue(inputs["kformer_bench.json"][-1].endswith("OpenBLAS Haswell kernels"),
                        inputs["kformer_bench.json"])
        self.assertTrue(inputs["pytorch.json"][-1].endswith("OpenBLAS Cooperlake kernels"), inputs["pytorch.json"])

    def test_every_case_in_its_backend_table(self):
        for r in results(BENCH) + results(TORCH):
            table = rows(section(self.md, f"### {r['backend']}" + self._device_suffix(r["backend"])))
            self.assertIn(r["case"], table, f"{r['case']} on {r['backend']}")
            self.assertEqual(table[r["case"]][2], f"{r['median_s'] * 1e3:.3f}")

    def _device_suffix(self, backend):
        devices = sorted({r["device"] for r in results(BENCH) + results(TORCH) if r["backend"] == backend})
        return " — " + ", ".join(devices)

    def test_speedups(self):
        torch = {r["case"]: r["median_s"] for r in results(TORCH)}
        for backend in ("serial", "openmp"):
            ours = {r["case"]: r["median_s"] for r in results(BENCH) if r["backend"] == backend}
            common = [c for c in ours if c in torch]
            self.assertGreaterEqual(len(common), 5)
            table = rows(section(self.md, f"### {backend} vs pytorch"))
            speedups = []
            for case in common:
                expected = torch[case] / ours[case]
                speedups.append(expected)
                self.assertIn(case, table, f"{case}: no row in {backend} vs pytorch")
                self.assertEqual(table[case][-1], f"{expected:.2f}x", f"{case} on {backend}")
            self.assertNotIn("encoding.fixed.inplace", table)  # PyTorch only
            self.assertNotIn("limit.sgemm", table)  # kformer only
            geo = math.exp(sum(map(math.log, speedups)) / len(speedups))
            self.assertEqual(table[f"geometric mean ({len(common)} cases)"][-1], f"{geo:.2f}x")

    def test_speedup_threads(self):
        # The synthetic serial run has 1 thread, openmp and PyTorch 2: the report says so.
        serial = section(self.md, "### serial vs pytorch")
        self.assertIn("Not the same threads: serial on 1 thread, pytorch on 2 threads.", serial)
        openmp = section(self.md, "### openmp vs pytorch")
        self.assertIn("Both on 2 threads.", openmp)
        self.assertNotIn("Not the same threads", openmp)

    def test_other_peers(self):
        # ONNX Runtime's document and a labelled PyTorch (another version) are CPU peers: OpenMP
        # is compared with each of them, beside the plain "pytorch" run.
        with open(TORCH) as f:
            doc = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name, factor in (("onnxruntime", 0.5), ("pytorch-2.11", 2.0)):
                other = dict(doc, results=[dict(r, backend=name, median_s=r["median_s"] * factor)
                                           for r in doc["results"]])
                if name == "onnxruntime":
                    other["onnxruntime"] = "1.32.0"
                paths.append(os.path.join(tmp, name + ".json"))
                with open(paths[-1], "w") as f:
                    json.dump(other, f)
            proc = run_report(os.path.join(tmp, "out"), BENCH, TORCH, *paths)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = read(os.path.join(tmp, "out", "report.md"))
        ours = {r["case"]: r["median_s"] for r in results(BENCH) if r["backend"] == "openmp"}
        torch = {r["case"]: r["median_s"] for r in results(TORCH)}
        for name, factor in (("onnxruntime", 0.5), ("pytorch-2.11", 2.0)):
            table = rows(section(md, f"### openmp vs {name}"))
            case = next(c for c in ours if c in torch)
            self.assertEqual(table[case][-1], f"{torch[case] * factor / ours[case]:.2f}x", name)
        self.assertNotIn("### cuda vs onnxruntime", md)

    def test_pytorch_on_several_thread_counts(self):
        # A second PyTorch run on 1 thread, 1.7x slower: Serial (1 thread) is compared with it
        # alone, OpenMP (2 threads) with the 2-thread run alone.
        with open(TORCH) as f:
            doc = json.load(f)
        for r in doc["results"]:
            r["threads"] = 1
            r["device"] = "x86_64 (1 thread)"
            r["median_s"] *= 1.7
        torch2 = {r["case"]: r["median_s"] for r in results(TORCH)}
        with tempfile.TemporaryDirectory() as tmp:
            one_thread = os.path.join(tmp, "pytorch_1thread.json")
            with open(one_thread, "w") as f:
                json.dump(doc, f)
            proc = run_report(os.path.join(tmp, "out"), BENCH, TORCH, one_thread)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = read(os.path.join(tmp, "out", "report.md"))
        self.assertNotIn("### serial vs pytorch (2 threads)", md)
        self.assertNotIn("### openmp vs pytorch (1 thread)", md)
        for backend, threads, scale in (("serial", "1 thread", 1.7), ("openmp", "2 threads", 1.0)):
            text = section(md, f"### {backend} vs pytorch ({threads})")
            self.assertIn(f"Both on {threads}.", text)
            table = rows(text)
            ours = {r["case"]: r["median_s"] for r in results(BENCH) if r["backend"] == backend}
            common = [c for c in ours if c in torch2]
            self.assertGreaterEqual(len(common), 5)
            for case in common:
                self.assertEqual(table[case][-1], f"{torch2[case] * scale / ours[case]:.2f}x", case)
        # The 1-thread run's fractions of the limit use Serial's limits (1 thread, same host).
        own = section(md, "### pytorch (1 thread) — x86_64 (1 thread)")
        self.assertIn("limit.sgemm of serial", own)
        self.assertNotIn("limit.sgemm of openmp", own)

    def test_limit_fractions(self):
        bench = results(BENCH)
        sgemm = next(r for r in bench if r["backend"] == "openmp" and r["case"] == "limit.sgemm")
        linear = next(r for r in bench if r["backend"] == "openmp" and r["case"] == "linear.forward")
        table = rows(section(self.md, "### openmp" + self._device_suffix("openmp")))
        expected = (linear["flops"] / linear["median_s"]) / (sgemm["flops"] / sgemm["median_s"])
        self.assertEqual(table["linear.forward"][4], f"{expected:.2f}")
        add = next(r for r in bench if r["backend"] == "openmp" and r["case"] == "encoding.fixed.add")
        self.assertEqual(table["encoding.fixed.add"][4], f"{add['ratio_to_baseline']:.2f}")

    def test_each_document_keeps_its_own_limits(self):
        # A later run on the same backend (a scaling run, say) measures limit.copy again; the rows
        # of the first run are still compared with the copy of the first run.
        doc = json.load(open(BENCH))
        later = dict(doc, results=[dict(r, median_s=2 * r["median_s"]) for r in doc["results"]
                                   if r["backend"] == "openmp" and r["case"] == "limit.copy"])
        with tempfile.TemporaryDirectory() as tmp:
            second = os.path.join(tmp, "later.json")
            with open(second, "w") as f:
                json.dump(later, f)
            proc = run_report(os.path.join(tmp, "out"), BENCH, second)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = read(os.path.join(tmp, "out", "report.md"))
        table = rows(section(md, "### openmp" + self._device_suffix("openmp")))
        bench = results(BENCH)
        copy = next(r for r in bench if r["backend"] == "openmp" and r["case"] == "encoding.copy")
        limit = next(r for r in bench if r["backend"] == "openmp" and r["case"] == "limit.copy")
        expected = (copy["bytes"] / copy["median_s"]) / (limit["bytes"] / limit["median_s"])
        self.assertEqual(table["encoding.copy"][4], f"{expected:.2f}")
        self.assertEqual(table["encoding.copy"][5], "limit.copy")

    def test_scaling_exponents(self):
        table = section(self.md, "## Scaling")
        by_backend = {cells[0]: cells for cells in rows(table).values() if cells[0] in ("serial", "openmp")}
        self.assertEqual(set(by_backend), {"serial", "openmp"})
        # serial: time and peak bytes are exact powers of seq (2 and 2)
        serial = [float(c) for c in by_backend["serial"][5:9]]
        for value in serial:
            self.assertAlmostEqual(value, 2.0, delta=0.01)
        # openmp: time 5e-7 S^2 + 5e-4 (the overhead bends the small-S end), peak 65536 S + 1e6
        points = sorted((int(r["case"].split(".")[2]), r["median_s"], r["peak_bytes"]) for r in results(BENCH)
                        if r["backend"] == "openmp" and r["case"].startswith("scaling.seq."))
        self.assertEqual(len(points), 7)
        expected = [slope([(s, t) for s, t, _ in points]), slope([(s, t) for s, t, _ in points[-4:]]),
                    slope([(s, b) for s, _, b in points]), slope([(s, b) for s, _, b in points[-4:]])]
        got = [float(c) for c in by_backend["openmp"][5:9]]
        for g, e in zip(got, expected):
            self.assertAlmostEqual(g, e, delta=0.0006)
        self.assertAlmostEqual(got[1], 2.0, delta=0.01)
        self.assertLess(got[0], 1.99)  # all points: the overhead shows

    def test_charts_are_pngs(self):
        for name in CHARTS:
            path = os.path.join(self.out, name)
            self.assertTrue(os.path.exists(path), name)
            with open(path, "rb") as f:
                data = f.read()
            self.assertTrue(data.startswith(PNG_MAGIC), f"{name} is not a PNG")
            self.assertGreater(len(data), 5000, f"{name} is suspiciously small")
            self.assertIn(f"]({name})", self.md)

    def test_chart_without_data_is_skipped(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run_report(tmp, TORCH)  # PyTorch alone: no speed-ups, no scaling, no limits
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = read(os.path.join(tmp, "report.md"))
            for name in ("speedup.png", "scaling.png", "limits.png"):
                self.assertIn(f"`{name}`: skipped", md)
                self.assertFalse(os.path.exists(os.path.join(tmp, name)))
            self.assertTrue(os.path.exists(os.path.join(tmp, "throughput.png")))

    def test_malformed_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "broken.json")
            with open(bad, "w") as f:
                f.write('{"results": [ {"backend": "openmp", ')
            proc = run_report(os.path.join(tmp, "out"), BENCH, bad)
            self.assertEqual(proc.returncode, 2)
            self.assertIn("broken.json", proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "out", "report.md")))

    def test_missing_fields(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "no_median.json")
            with open(bad, "w") as f:
                json.dump({"results": [{"backend": "openmp", "case": "linear.forward", "flops": 1.0, "bytes": 0}]}, f)
            no_results = os.path.join(tmp, "no_results.json")
            with open(no_results, "w") as f:
                json.dump({"kokkos": "3.4.01"}, f)
            for path, word in ((bad, "median_s"), (no_results, "results")):
                proc = run_report(os.path.join(tmp, "out"), path)
                self.assertEqual(proc.returncode, 2, path)
                self.assertIn(os.path.basename(path), proc.stderr)
                self.assertIn(word, proc.stderr)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)

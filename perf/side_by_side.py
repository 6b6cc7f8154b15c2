#!/usr/bin/python3
"""Runs the same cases in kformer-bench and in PyTorch on the same threads, one after the other,
and prints both times and their ratio (PyTorch time / kformer time: > 1 means kformer is faster).

    /usr/bin/python3 perf/side_by_side.py [--bench build/perf/kformer-bench] [--filter encoder]
                                          [--threads 2] [--repeat 10] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from compare_pytorch import refuse_unwritable, whole_number

here = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(here, "..", "build", "perf", "kformer-bench"))
    parser.add_argument("--filter", default="encoder")
    parser.add_argument("--threads", type=whole_number(1, 4096), default=2)
    parser.add_argument("--repeat", type=whole_number(1, 100000), default=10)
    parser.add_argument("--json", help="write both result sets and the ratios here")
    args = parser.parse_args()

    if args.json:
        refuse_unwritable(parser, args.json)

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_PROC_BIND="spread", OMP_PLACES="threads")
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = os.path.join(tmp, "kformer.json"), os.path.join(tmp, "pytorch.json")
        runs = [("kformer-bench", [args.bench, "--backend", "openmp", "--filter", args.filter, "--repeat",
                                   str(args.repeat), "--json", ours]),
                ("compare_pytorch.py", [sys.executable, os.path.join(here, "compare_pytorch.py"), "--filter",
                                        args.filter, "--threads", str(args.threads), "--repeat",
                                        str(args.repeat), "--json", theirs])]
        for name, command in runs:
            try:
                status = subprocess.run(command, env=env, stdout=sys.stderr).returncode
            except OSError as e:
                sys.exit(f"side_by_side.py: cannot run {command[0]}: {e.strerror}")
            if status != 0:  # its own message is above
                sys.exit(f"side_by_side.py: {name} failed (exit status {status})")
        kformer = {r["case"]: r for r in json.load(open(ours))["results"]}
        pytorch = {r["case"]: r for r in json.load(open(theirs))["results"]}

    rows = []
    print(f"{'case':32} {'kformer ms':>11} {'PyTorch ms':>11} {'speed-up':>9} {'kformer GFLOP/s':>16} {'of sgemm':>9}")
    sgemm = kformer.get("limit.sgemm", {}).get("gflop_per_s")
    for name in sorted(set(kformer) & set(pytorch)):
        k, p = kformer[name], pytorch[name]
        ratio = p["median_s"] / k["median_s"]
        of_sgemm = k["gflop_per_s"] / sgemm if sgemm and k["gflop_per_s"] else 0.0
        print(f"{name:32} {k['median_s'] * 1e3:11.3f} {p['median_s'] * 1e3:11.3f} {ratio:8.2f}x "
              f"{k['gflop_per_s']:16.1f} {of_sgemm:8.0%}")
        rows.append({"case": name, "kformer_s": k["median_s"], "pytorch_s": p["median_s"], "speedup": ratio,
                     "kformer_gflop_per_s": k["gflop_per_s"], "fraction_of_sgemm": of_sgemm})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "sgemm_gflop_per_s": sgemm, "comparison": rows,
                       "kformer": list(kformer.values()), "pytorch": list(pytorch.values())}, f, indent=2)


if __name__ == "__main__":
    main()

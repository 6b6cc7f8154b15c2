#!/usr/bin/python3
"""The embedded surrogate's inference and online-training steps in kformer and in LibTorch, on the
same threads, one process after the other, at examples/simulation's sizes and a larger model: a
Markdown table of the times per step, their ratio (LibTorch time / kformer time: > 1 means kformer
is faster) and the memory each process added for the model and its steps.

    /usr/bin/python3 perf/embedding_side_by_side.py --kformer build/perf/kformer-embedding-bench \\
        --libtorch build-libtorch/perf/kformer-embedding-bench-libtorch [--threads 1] [--json out]
"""
import argparse
import json
import os
import platform
import subprocess
import sys

CASES = [
    ("examples/simulation", ["--members", "32", "--tokens", "8", "--patch", "8", "--width", "32"]),
    ("larger", ["--members", "64", "--tokens", "64", "--patch", "16", "--width", "128", "--steps", "10"]),
]


def run(binary, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    done = subprocess.run([binary] + args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kformer", required=True, help="kformer-embedding-bench")
    parser.add_argument("--libtorch", required=True, help="kformer-embedding-bench-libtorch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="write every result here")
    args = parser.parse_args()
    for name in ("kformer", "libtorch"):
        path = getattr(args, name)
        if not os.access(path, os.X_OK):
            parser.error(f"--{name} {path}: not an executable file")
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")

    results = []
    print(f"CPU: {cpu_name()}; {args.threads} thread(s); double precision")
    print("| case | step | kformer ms | LibTorch ms | LibTorch / kformer | kformer MiB | LibTorch MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for case, case_args in CASES:
        ours = run(args.kformer, case_args, args.threads)
        theirs = run(args.libtorch, case_args, args.threads)
        if ours["parameters"] != theirs["parameters"]:
            sys.exit(f"{case}: the models differ: {ours['parameters']} parameters in kformer, "
                     f"{theirs['parameters']} in LibTorch")
        results.append({"case": case, "kformer": ours, "libtorch": theirs})
        shape = f"{case} ({ours['members']}, {ours['tokens']}, {ours['patch']}) d {ours['width']}"
        for step in ("inference", "training"):
            k, t = ours[f"{step}_ms"], theirs[f"{step}_ms"]
            print(f"| {shape} | {step} | {k:.3f} | {t:.3f} | {t / k:.2f} | "
                  f"{ours['memory_mib']:.1f} | {theirs['memory_mib']:.1f} |")
    print(f"LibTorch {results[0]['libtorch']['torch_version']}; kformer on "
          f"{results[0]['kformer']['backend']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_name(), "threads": args.threads, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

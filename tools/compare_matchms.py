#!/usr/bin/env python3
"""Cross-checks kformer's MSP and MGF readers against matchms (PyPI), the mass-spectrometry
community's reader: every spectrum's peaks, precursor m/z and title, file by file.

    python3 tools/compare_matchms.py build/apps/kformer FILE.msp FILE.mgf ...

kformer's side is `kformer spectra --list FILE` (one JSON object per spectrum). matchms sorts each
spectrum's peaks by m/z, so both sides are compared sorted. Prints one line per file and exits
non-zero on any difference. A cross-check run by hand (pip install matchms), not a test
requirement.
"""
import json
import math
import subprocess
import sys


def load_matchms(path):
    from matchms.importing import load_from_mgf, load_from_msp
    loader = load_from_msp if path.lower().endswith(".msp") else load_from_mgf
    return list(loader(path))


def title_of(spectrum):
    for key in ("compound_name", "title", "name"):
        value = spectrum.get(key)
        if value:
            return str(value)
    return ""


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    kformer, paths = sys.argv[1], sys.argv[2:]
    failed = False
    for path in paths:
        listed = subprocess.run([kformer, "spectra", "--list", path], capture_output=True,
                                text=True, check=True).stdout.splitlines()
        ours = [json.loads(line) for line in listed if line.strip()]
        theirs = load_matchms(path)
        problems = []
        if len(ours) != len(theirs):
            problems.append(f"{len(ours)} spectra read by kformer, {len(theirs)} by matchms")
        peaks = 0
        for i, (a, b) in enumerate(zip(ours, theirs)):
            mine = sorted(zip(a["mz"], a["intensity"]))
            mz, intensity = b.peaks.mz, b.peaks.intensities
            if len(mine) != len(mz):
                problems.append(f"spectrum {i + 1}: {len(mine)} peaks, matchms {len(mz)}")
                continue
            peaks += len(mine)
            for (m1, i1), m2, i2 in zip(mine, mz, intensity):
                if not (math.isclose(m1, m2, rel_tol=1e-12) and math.isclose(i1, i2, rel_tol=1e-6)):
                    problems.append(f"spectrum {i + 1}: peak ({m1}, {i1}) against ({m2}, {i2})")
                    break
            precursor = b.get("precursor_mz")
            if (a["precursor_mz"] is None) != (precursor is None) or (
                    precursor is not None and not math.isclose(a["precursor_mz"], precursor,
                                                                rel_tol=1e-12)):
                problems.append(f"spectrum {i + 1}: precursor {a['precursor_mz']}, matchms {precursor}")
            if a["title"] != title_of(b):
                problems.append(f"spectrum {i + 1}: title '{a['title']}', matchms '{title_of(b)}'")
        status = "same" if not problems else "DIFFERENT"
        print(f"{path}: {len(ours)} spectra, {peaks} peaks: {status}")
        for p in problems[:10]:
            print(f"  {p}")
        failed = failed or bool(problems)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

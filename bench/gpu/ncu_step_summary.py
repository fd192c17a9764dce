#!/usr/bin/env python3
"""Per-kernel device time of one forward, from an Nsight Compute CSV of gpu_bench.

  ncu --clock-control none --metrics gpu__time_duration.sum --csv gpu_bench ... > ncu.csv
  python3 bench/gpu/ncu_step_summary.py ncu.csv

A forward starts at its embed_kernel; the last complete forward (the one before the final
embed_kernel) is summarized, grouped by kernel and grid (a GEMV's grid names its shape class).
ncu serializes kernels, so these are times without programmatic-launch overlap or graph
batching: their sum exceeds the measured step time, and tiny kernels weigh more than in a run.
"""
import collections
import re
import csv
import sys


def main(path):
    with open(path) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    header, rows = rows[0], rows[1:]
    name_col, grid_col = header.index("Kernel Name"), header.index("Grid Size")
    value_col = header.index("Metric Value")
    kernels = []
    for r in rows:
        name = re.sub(r"\b(tern::)?(\(anonymous namespace\)|<unnamed>::|\bunnamed>::)", "", r[name_col]).split("(")[0]
        name = name.removeprefix("void ")
        kernels.append((name, r[grid_col], float(r[value_col].replace(",", "")) / 1000.0))
    starts = [i for i, k in enumerate(kernels) if k[0].startswith("embed")]
    if len(starts) < 2:
        sys.exit("fewer than two forwards in the profile")
    step = kernels[starts[-2]:starts[-1]]
    print(f"{len(step)} kernels, {sum(t for _, _, t in step):.1f} us")
    groups = collections.defaultdict(lambda: [0, 0.0])
    for name, grid, t in step:
        groups[(name, grid)][0] += 1
        groups[(name, grid)][1] += t
    for (name, grid), (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:48]:48s} {grid:14s} n={n:4d} total {t:8.1f} us  avg {t / n:7.2f} us")


if __name__ == "__main__":
    main(sys.argv[1])

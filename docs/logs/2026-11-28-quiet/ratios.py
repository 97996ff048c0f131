#!/usr/bin/env python3
"""Ratios of each job's typed exchange to its own contiguous baseline (medians), per library,
from interpose-ab.txt files (raw) or *.summary.txt files (direct, lib, call, name, median, mean)."""
import re, sys, statistics
from collections import defaultdict
rows = defaultdict(list)
for path in sys.argv[1:]:
    job = None
    for line in open(path):
        if path.endswith(".summary.txt"):
            if line.startswith("#"):
                continue
            d, lib, call, name, med, _ = line.split()
            key = (d.split("=")[1], lib)
            rows_key = (key, call, name)
        elif line.startswith("$"):
            d = re.search(r"DIRECT=(\d)", line).group(1)
            lib = re.search(r"LD_PRELOAD=\S*/(\S+?\.so)", line).group(1)
            key = (d, lib)
            continue
        elif line.startswith("bench"):
            f = line.split()
            call, name, med = f[1], f[2], f[4]
        else:
            continue
        if name.endswith("-contiguous"):
            base = name[: -len("-contiguous")]
            typed = [r for r in rows[(key, call, base)] if r[1] is None]
            if typed:
                typed[-1][1] = float(med)
        else:
            rows[(key, call, name)].append([float(med), None])
for (key, call, name), vals in sorted(rows.items()):
    ratios = sorted(round(a / b, 2) for a, b in vals if b)
    print(f"direct={key[0]} {key[1]:8} {call:32} {name:8} n={len(ratios)} median {statistics.median(ratios):.2f}x  {ratios}")

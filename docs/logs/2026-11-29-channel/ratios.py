#!/usr/bin/env python3
"""Each job's faces against its own contiguous baseline (medians), per channel setting, from
face-ab.txt: per face and setting the jobs' ratios, their median, and the medians in µs."""
import re, sys, statistics
from collections import defaultdict
ratios = defaultdict(list)
times = defaultdict(list)
setting = None
for line in open(sys.argv[1]):
    if line.startswith("$"):
        setting = re.search(r"CHANNEL=(\S+)", line).group(1)
        job = {}
        continue
    f = line.split()
    if not f or f[0] != "bench" or setting is None:
        continue
    name, med = f[2], float(f[4])
    job[name] = med
    base = name[: -len("-contiguous")] if name.endswith("-contiguous") else None
    if base and base in job:
        ratios[(base, setting)].append(job[base] / med)
        times[(base, setting)].append((job[base], med))
for (face, c), r in sorted(ratios.items()):
    t = times[(face, c)]
    print(f"{face} channel={c}: median {statistics.median(r):.2f}x over {len(r)} jobs "
          f"({min(r):.2f}-{max(r):.2f}); typed {statistics.median(a for a, _ in t):.2f} us, "
          f"contiguous {statistics.median(b for _, b in t):.2f} us; jobs: "
          + " ".join(f"{x:.2f}" for x in r))

#!/usr/bin/env python3
"""Pair OMB's rows with collbench's (run.sh's raw output) and print one Markdown table.

Per benchmark: the 8 B figure of each (the best over repetitions: lowest time, highest bandwidth)
and their difference, then, from 64 KiB up, the ratio ours / OSU of the best figures at each size (latency: time, lower is better;
bandwidth tests: ours / OSU bandwidth, higher is better), given as its range over sizes. Sizes are
OSU's: each of our rows is paired with the same row of OSU's run (see `table`).
"""
import glob
import os
import re
import statistics
import sys

BANDWIDTH = {"osu_bw", "osu_bibw", "osu_mbw_mr"}


def table(path):
    """{size: value} of an OMB-format file (size 0 for osu_barrier); value = the first number.
    For our file (`NAME.ours.*`), each row is keyed by the size of the same row of OSU's file of
    the same repetition (`NAME.osu.*`): both ran the same size sequence, ours at n times OSU's
    size where the sizes differ, rounded down to whole units for the v forms (see run.sh)."""
    rows = {}
    try:
        text = open(path).read()
    except OSError:
        return rows
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split()
        try:
            nums = [float(c) for c in cells]
        except ValueError:
            continue
        if len(cells) == 1 or (len(cells) == 4 and "." in cells[0]):  # barrier: avg [min max iters]
            rows[0] = nums[0]
        else:
            rows[int(nums[0])] = nums[1]
    if ".ours." in os.path.basename(path):
        theirs = table(path.replace(".ours.", ".osu."))
        return dict(zip(theirs, rows.values())) if len(theirs) == len(rows) else {}
    return rows


def best(files, bandwidth):
    """{size: (best, median, reps)} over the repetitions: the best is the lowest time (the highest
    bandwidth), since work of others on the same cores only ever adds time."""
    per_size = {}
    for f in files:
        for s, v in table(f).items():
            per_size.setdefault(s, []).append(v)
    pick = max if bandwidth else min
    return {s: (pick(v), statistics.median(v), len(v)) for s, v in per_size.items()}


def main(raw):
    names = sorted({os.path.basename(f).split(".")[0] for f in glob.glob(f"{raw}/*.osu.*.txt")})
    order = ["osu_allreduce", "osu_allgather", "osu_allgatherv", "osu_reduce_scatter",
             "osu_reduce_scatter_block", "osu_bcast", "osu_reduce", "osu_alltoall",
             "osu_alltoallv", "osu_gather", "osu_gatherv", "osu_scatter", "osu_scatterv",
             "osu_barrier", "osu_latency", "osu_bw", "osu_bibw", "osu_mbw_mr"]
    names = [n for n in order if n in names] + [n for n in names if n not in order]
    print("| benchmark | 8 B OSU | 8 B ours | ours - OSU | within 0.1 us | ours - OSU, medians | ours / OSU from 64 KiB (min .. max over sizes) | within 1 % | reps |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        bw = name in BANDWIDTH
        osu = best(sorted(glob.glob(f"{raw}/{name}.osu.*.txt")), bw)
        ours = best(sorted(glob.glob(f"{raw}/{name}.ours.*.txt")), bw)
        unit = "MB/s" if bw else "us"
        small = 0 if name == "osu_barrier" else 8
        cells = [name]
        if small in osu and small in ours:
            o, u = osu[small][0], ours[small][0]
            cells += [f"{o:.2f} {unit}", f"{u:.2f} {unit}", f"{u - o:+.2f}"]
            cells.append("n/a (bandwidth)" if bw else ("yes" if u - o <= 0.1 else "**no**"))
            cells.append(f"{ours[small][1] - osu[small][1]:+.2f}")
        else:
            cells += ["-", "-", "-", "-", "-"]
        ratios = [ours[s][0] / osu[s][0] for s in sorted(osu) if s >= 65536 and s in ours and osu[s][0] > 0]
        if ratios:
            cells.append(f"{min(ratios):.3f} .. {max(ratios):.3f}")
            ok = all(r >= 0.99 for r in ratios) if bw else all(r <= 1.01 for r in ratios)
            cells.append("yes" if ok else "**no**")
        else:
            cells += ["-", "-"]
        reps = min([v[2] for v in osu.values()] + [v[2] for v in ours.values()] or [0])
        cells.append(str(reps))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "raw"))

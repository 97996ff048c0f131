"""The tables of docs/python.md from raw/*.txt.

On a shared 2-core machine other processes take the cores now and then, so each figure is taken
over many short rounds: the best round (least disturbed; the usual reading of OSU numbers on a
noisy machine) and the median round. Overhead over C is the tool's figure minus OMB C's, for the
best rounds; for the medians, the median of the per-round differences. Then every round's figure
(`ombpy`: OMB-Py itself, latency only)."""

import pathlib
import statistics
import sys

raw = pathlib.Path(sys.argv[1])
TOOLS = ("c", "mpi4py", "collectives")


def value(path):
    lines = [l for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]
    return float(lines[-1].split()[1])


def rounds(bench):
    return sorted({p.stem.rsplit("-", 1)[1] for p in raw.glob(f"{bench}-c-*.txt")}, key=int)


for reading in ("best", "median"):
    print(f"{reading} round:\n")
    print("| benchmark | OMB C (us) | mpi4py, OMB-Py's loop (us) | collectives, same loop (us) "
          "| mpi4py over C | collectives over C | collectives' overhead / mpi4py's |")
    print("|---|---|---|---|---|---|---|")
    for bench, label in (("latency", "1 B latency"), ("allreduce", "4 B all-reduce")):
        rs = rounds(bench)
        v = {t: [value(raw / f"{bench}-{t}-{r}.txt") for r in rs] for t in TOOLS}
        if reading == "best":
            fig = {t: min(x) for t, x in v.items()}
            over = {t: fig[t] - fig["c"] for t in TOOLS[1:]}
        else:
            fig = {t: statistics.median(x) for t, x in v.items()}
            over = {t: statistics.median(a - c for a, c in zip(v[t], v["c"])) for t in TOOLS[1:]}
        print(
            f"| {label} ({len(rs)} rounds) | {fig['c']:.2f} | {fig['mpi4py']:.2f} | {fig['collectives']:.2f} "
            f"| {over['mpi4py']:.2f} | {over['collectives']:.2f} | {over['collectives'] / over['mpi4py']:.2f} |"
        )
    print()
for bench in ("latency", "allreduce"):
    for t in ("c", "ombpy", "mpi4py", "collectives"):
        xs = [value(raw / f"{bench}-{t}-{r}.txt") for r in rounds(bench) if (raw / f"{bench}-{t}-{r}.txt").exists()]
        if xs:
            print(f"{bench} {t}: " + " ".join(f"{x:.2f}" for x in xs))

"""The table of docs/python.md from raw/*.txt: per benchmark and tool, the median over rounds of
the latency OMB prints, and the overhead over C (median of the per-round differences)."""

import pathlib
import statistics
import sys

raw = pathlib.Path(sys.argv[1])


def value(path):
    lines = [l for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]
    return float(lines[-1].split()[1])


print("| benchmark | OMB C (us) | OMB-Py / mpi4py (us) | collectives (us) | mpi4py over C | collectives over C | ratio |")
print("|---|---|---|---|---|---|---|")
for bench, label in (("latency", "1 B latency"), ("allreduce", "4 B all-reduce")):
    rounds = sorted({p.stem.rsplit("-", 1)[1] for p in raw.glob(f"{bench}-c-*.txt")}, key=int)
    v = {t: [value(raw / f"{bench}-{t}-{r}.txt") for r in rounds] for t in ("c", "mpi4py", "collectives")}
    over = {t: statistics.median(a - c for a, c in zip(v[t], v["c"])) for t in ("mpi4py", "collectives")}
    med = {t: statistics.median(x) for t, x in v.items()}
    print(
        f"| {label} ({len(rounds)} rounds) | {med['c']:.2f} | {med['mpi4py']:.2f} | {med['collectives']:.2f} "
        f"| {over['mpi4py']:.2f} | {over['collectives']:.2f} | {over['collectives'] / over['mpi4py']:.2f} |"
    )
print()
for bench in ("latency", "allreduce"):
    for t in ("c", "mpi4py", "collectives"):
        xs = [value(p) for p in sorted(raw.glob(f"{bench}-{t}-*.txt"))]
        print(f"{bench} {t}: " + " ".join(f"{x:.2f}" for x in xs))

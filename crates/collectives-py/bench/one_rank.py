"""The binding's own cost, without a peer: calls on one rank (MPI's part is then a local copy),
through the collectives module and through mpi4py, in one process, best of 5 timings of 200000
calls each. Steadier than two-rank figures on a shared machine: no second process to be
descheduled.

    mpirun -n 1 python one_rank.py
"""

import time

import numpy as np
from mpi4py import MPI

import collectives

N = 200_000


def best(f):
    for _ in range(1000):
        f()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(N):
            f()
        times.append((time.perf_counter() - t) / N * 1e6)
    return min(times)


def main():
    c = collectives.from_mpi4py(MPI.COMM_WORLD, checked=False, timeout=0)
    m = MPI.COMM_WORLD
    s1, r1 = np.zeros(1, np.uint8), np.zeros(1, np.uint8)
    s4, r4 = np.zeros(1, np.float32), np.zeros(1, np.float32)
    sm, rm = [s1, 1, MPI.BYTE], [r1, 1, MPI.BYTE]
    s4m, r4m = [s4, 1, MPI.FLOAT], [r4, 1, MPI.FLOAT]

    def ours_p2p():
        c.send(s1, 0, 1)
        c.recv(r1, 0, 1)

    def theirs_p2p():
        m.Send(sm, 0, 1)
        m.Recv(rm, 0, 1)

    rows = [
        ("1 B send + recv to self", ours_p2p, theirs_p2p),
        ("4 B all-reduce", lambda: c.all_reduce(s4, r4, "sum"), lambda: m.Allreduce(s4m, r4m, op=MPI.SUM)),
        ("barrier", c.barrier, m.Barrier),
    ]
    print("| call (1 rank) | collectives (us) | mpi4py (us) |")
    print("|---|---|---|")
    for name, ours, theirs in rows:
        print(f"| {name} | {best(ours):.3f} | {best(theirs):.3f} |", flush=True)


if __name__ == "__main__":
    main()

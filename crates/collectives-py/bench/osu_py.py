"""OMB-Py's latency and allreduce loops, through the collectives module instead of mpi4py.

The loops are OMB-Py 7.4's (python/mpi/pt2pt/osu_latency.py, collective/osu_allreduce.py):
the same warm-up skip, iteration count, MPI.Wtime timing and average over ranks, and the same
output lines, so that the three can be read side by side: OMB's C binaries (osu_latency,
osu_allreduce), OMB-Py (mpi4py) and this. Buffers are NumPy arrays made once, before the loop,
as OMB-Py's are; the communicator is unchecked and without a deadline (the release defaults).

    mpirun -n 2 python osu_py.py latency   --min 1 --max 1 --iterations 100000 --skip 1000
    mpirun -n 2 python osu_py.py allreduce --min 4 --max 4 --iterations 100000 --skip 1000
"""

import argparse

import numpy as np
from mpi4py import MPI

import collectives


def sizes(lo, hi):
    size = lo
    while size <= hi:
        yield size
        size *= 2


def print_stats(t_end, t_start, iterations, comm, size):
    """OMB-Py's util.print_stats: the per-rank average latency, averaged over the ranks."""
    latency = np.array([(t_end - t_start) * 1e6 / iterations])
    total = comm.all_reduce(latency)
    if comm.rank == 0:
        print("%-10d%18.2f" % (size, total[0] / comm.size), flush=True)


def latency(comm, args):
    s_buf = np.zeros(args.max, np.uint8)
    r_buf = np.zeros(args.max, np.uint8)
    if comm.rank == 0:
        print("# collectives Python MPI Latency Test")
        print("# %-8s%18s" % ("Size (B)", "Latency (us)"))
    for size in sizes(args.min, args.max):
        iterations = list(range(args.iterations + args.skip))
        s_msg, r_msg = s_buf[:size], r_buf[:size]
        comm.barrier()
        t_start = 0.0
        if comm.rank == 0:
            for i in iterations:
                if i == args.skip:
                    t_start = MPI.Wtime()
                comm.send(s_msg, 1, 1)
                comm.recv(r_msg, 1, 1)
        elif comm.rank == 1:
            for i in iterations:
                if i == args.skip:
                    t_start = MPI.Wtime()
                comm.recv(r_msg, 0, 1)
                comm.send(s_msg, 0, 1)
        t_end = MPI.Wtime()
        print_stats(t_end, t_start, 2 * args.iterations, comm, size)


def allreduce(comm, args):
    s_buf = np.zeros(args.max // 4, np.float32)
    r_buf = np.zeros(args.max // 4, np.float32)
    if comm.rank == 0:
        print("# collectives Python MPI Allreduce Test")
        print("# %-8s%18s" % ("Size (B)", "Latency (us)"))
    for size in sizes(args.min, args.max):
        iterations = list(range(args.iterations + args.skip))
        s_msg, r_msg = s_buf[: size // 4], r_buf[: size // 4]
        comm.barrier()
        for i in iterations:
            if i == args.skip:
                t_start = MPI.Wtime()
            comm.all_reduce(s_msg, r_msg, "sum")
        t_end = MPI.Wtime()
        comm.barrier()
        print_stats(t_end, t_start, args.iterations, comm, size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", choices=["latency", "allreduce"])
    parser.add_argument("--min", type=int, default=1)
    parser.add_argument("--max", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--skip", type=int, default=1000)
    args = parser.parse_args()
    comm = collectives.from_mpi4py(MPI.COMM_WORLD, checked=False, timeout=0)
    {"latency": latency, "allreduce": allreduce}[args.benchmark](comm, args)


if __name__ == "__main__":
    main()

"""OMB-Py's latency and allreduce loops, through the collectives module or through mpi4py.

The loops are OMB-Py 7.4's (python/mpi/pt2pt/osu_latency.py, collective/osu_allreduce.py):
the same warm-up skip, iteration count, MPI.Wtime timing and average over ranks, and the same
output lines, so that they read side by side with OMB's C binaries (osu_latency, osu_allreduce)
and OMB-Py itself. Buffers are NumPy arrays made once, before the loop, as OMB-Py's are; the
collectives communicator is unchecked and without a deadline (the release defaults).

`--via mpi4py` runs the same loop on mpi4py's calls exactly as OMB-Py writes them, but for the
all-reduce's count, which OMB-Py 7.4 passes as `size/4`, a float that mpi4py 4 refuses
(TypeError): here it is `size // 4`.

    mpirun -n 2 python osu_py.py latency   --min 1 --max 1 --iterations 100000 --skip 1000
    mpirun -n 2 python osu_py.py allreduce --min 4 --max 4 --iterations 100000 --skip 1000
    mpirun -n 2 python osu_py.py allreduce --min 4 --max 4 --via mpi4py
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


def latency_mpi4py(comm, args):
    s_buf = np.zeros(args.max, np.uint8)
    r_buf = np.zeros(args.max, np.uint8)
    myid = comm.Get_rank()
    for size in sizes(args.min, args.max):
        iterations = list(range(args.iterations + args.skip))
        s_msg = [s_buf, size, MPI.BYTE]
        r_msg = [r_buf, size, MPI.BYTE]
        comm.Barrier()
        t_start = 0.0
        if myid == 0:
            for i in iterations:
                if i == args.skip:
                    t_start = MPI.Wtime()
                comm.Send(s_msg, 1, 1)
                comm.Recv(r_msg, 1, 1)
        elif myid == 1:
            for i in iterations:
                if i == args.skip:
                    t_start = MPI.Wtime()
                comm.Recv(r_msg, 0, 1)
                comm.Send(s_msg, 0, 1)
        t_end = MPI.Wtime()
        print_stats_mpi4py(t_end, t_start, 2 * args.iterations, comm, size)


def allreduce_mpi4py(comm, args):
    s_buf = np.zeros(args.max // 4, np.float32)
    r_buf = np.zeros(args.max // 4, np.float32)
    for size in sizes(args.min, args.max):
        iterations = list(range(args.iterations + args.skip))
        s_msg = [s_buf, size // 4, MPI.FLOAT]
        r_msg = [r_buf, size // 4, MPI.FLOAT]
        comm.Barrier()
        for i in iterations:
            if i == args.skip:
                t_start = MPI.Wtime()
            comm.Allreduce(s_msg, r_msg, op=MPI.SUM)
        t_end = MPI.Wtime()
        comm.Barrier()
        print_stats_mpi4py(t_end, t_start, args.iterations, comm, size)


def print_stats_mpi4py(t_end, t_start, iterations, comm, size):
    latency = np.array((t_end - t_start) * 1e6 / iterations, "d")
    total = np.array(0.0, "d")
    comm.Reduce([latency, MPI.DOUBLE], [total, MPI.DOUBLE], op=MPI.SUM, root=0)
    if comm.Get_rank() == 0:
        print("%-10d%18.2f" % (size, total / comm.Get_size()), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", choices=["latency", "allreduce"])
    parser.add_argument("--min", type=int, default=1)
    parser.add_argument("--max", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--skip", type=int, default=1000)
    parser.add_argument("--via", choices=["collectives", "mpi4py"], default="collectives")
    args = parser.parse_args()
    if args.via == "mpi4py":
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"# OMB-Py loop on mpi4py: {args.benchmark}")
            print("# %-8s%18s" % ("Size (B)", "Latency (us)"))
        {"latency": latency_mpi4py, "allreduce": allreduce_mpi4py}[args.benchmark](MPI.COMM_WORLD, args)
        return
    comm = collectives.from_mpi4py(MPI.COMM_WORLD, checked=False, timeout=0)
    {"latency": latency, "allreduce": allreduce}[args.benchmark](comm, args)


if __name__ == "__main__":
    main()

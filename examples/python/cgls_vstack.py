"""Distributed least squares with CGLS, as PyLops-MPI's ``MPIVStack`` + ``cgls`` do it, on NumPy.

The operator is a vertical stack of blocks, one per rank: rank r holds the rows A_r of
A = [A_0; A_1; ...] (uneven row counts) and its part d_r of the data; the model x is replicated.
A x is local (each rank computes A_r x); A^T y sums A_r^T y_r over the ranks, one all_reduce
of a model-sized vector per iteration, and the step length needs one all_reduce of a scalar.
At the end the data residual is assembled on every rank with all_gather_v (uneven blocks, no
padding) and the solution is checked against numpy.linalg.lstsq of the whole system.

Run: mpirun -n 4 python examples/python/cgls_vstack.py [--rows 200] [--cols 50] [--iters 100]
Prints the communication time per iteration (the two all_reduces) beside the total.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

import collectives


def local_block(rank, rows, cols, seed=1234):
    """Rank ``rank``'s rows of a well-conditioned random operator and data (reproducible)."""
    rng = np.random.default_rng(seed + rank)
    a = rng.standard_normal((rows, cols))
    x_true = np.linspace(-1.0, 1.0, cols)
    d = a @ x_true + 1e-3 * rng.standard_normal(rows)
    return a, d


def cgls(comm, a, d, cols, niter=100, tol=1e-10):
    """CGLS on the stacked operator; returns (x, iterations, residual norm, seconds in comm)."""
    x = np.zeros(cols)
    s = d - a @ x                      # data residual, distributed
    r = comm.all_reduce(a.T @ s)       # A^T s: model-sized, summed over ranks
    p = r.copy()
    gamma = float(r @ r)
    q_norm = np.empty(1)
    comm_time = 0.0
    it = 0
    for it in range(1, niter + 1):
        q = a @ p                      # local rows of A p
        t0 = time.perf_counter()
        comm.all_reduce(np.array([q @ q]), q_norm)
        comm_time += time.perf_counter() - t0
        alpha = gamma / q_norm[0]
        x += alpha * p
        s -= alpha * q
        t0 = time.perf_counter()
        comm.all_reduce(a.T @ s, r)
        comm_time += time.perf_counter() - t0
        gamma_new = float(r @ r)
        if np.sqrt(gamma_new) < tol:
            gamma = gamma_new
            break
        p = r + (gamma_new / gamma) * p
        gamma = gamma_new
    return x, it, np.sqrt(gamma), comm_time


def run(comm, rows=200, cols=50, niter=100, quiet=False):
    """Solve on ``comm`` (a collectives communicator); returns (x, iterations, error vs lstsq)."""
    rows_here = rows + 10 * comm.rank  # uneven blocks
    a, d = local_block(comm.rank, rows_here, cols)
    t0 = time.perf_counter()
    x, iters, grad_norm, comm_time = cgls(comm, a, d, cols, niter)
    total = time.perf_counter() - t0

    # Check: the whole system on every rank (uneven all-gathers, no padding) against lstsq.
    counts = comm.all_gather_v(np.array([rows_here], np.int64))
    a_all = comm.all_gather_v(a.ravel(), [int(c) * cols for c in counts]).reshape(-1, cols)
    d_all = comm.all_gather_v(d)
    x_ref = np.linalg.lstsq(a_all, d_all, rcond=None)[0]
    error = float(np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref))
    if comm.rank == 0 and not quiet:
        print(
            f"CGLS on {comm.size} ranks: A is {a_all.shape[0]} x {cols} (rows per rank "
            f"{', '.join(str(int(c)) for c in counts)}), {iters} iterations, |A^T r| = {grad_norm:.2e}, "
            f"relative error against numpy.linalg.lstsq {error:.1e}"
        )
        print(
            f"time per iteration: {1e6 * total / iters:.1f} us, of which communication "
            f"{1e6 * comm_time / iters:.1f} us (all_reduce of {cols} float64 + 1 float64)"
        )
    return x, iters, error


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--cols", type=int, default=50)
    parser.add_argument("--iters", type=int, default=100)
    args = parser.parse_args()
    comm = collectives.from_mpi4py(MPI.COMM_WORLD, checked=False)
    run(comm, args.rows, args.cols, args.iters)


if __name__ == "__main__":
    main()

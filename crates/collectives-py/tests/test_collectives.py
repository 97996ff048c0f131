"""Every blocking collective and point-to-point operation against mpi4py's own on the same data,
for every dtype the module takes (and every reduce operation the backend does on it)."""

import numpy as np
import pytest
from mpi4py import MPI

import collectives

DTYPES = [
    np.int8,
    np.uint8,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]
INTEGERS = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64]
REALS = [np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]

# What the MPI backend reduces (README: Sum, Prod, Min, Max on integers and reals; Avg on reals and
# complex; complex Sum, Prod, Avg; float16 moves but does not reduce).
REDUCTIONS = (
    [(d, op) for d in INTEGERS for op in ("sum", "prod", "min", "max")]
    + [(d, op) for d in REALS for op in ("sum", "prod", "min", "max", "avg")]
    + [(d, op) for d in COMPLEX for op in ("sum", "prod", "avg")]
)
MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX, "avg": MPI.SUM}


def data(dtype, n, rank, salt=0):
    """Small values (products of a few ranks stay exact in every dtype), different per rank."""
    base = (np.arange(n) * (rank + 2) + rank + salt) % 3 + 1
    if np.dtype(dtype).kind == "c":
        return (base + 1j * ((base + rank) % 2)).astype(dtype)
    return base.astype(dtype)


def m(a):
    """The array as mpi4py takes it (MPI has no float16: it moves as 16-bit words)."""
    return a.view(np.uint16) if a.dtype == np.float16 else a


def id_of(p):
    return np.dtype(p).name if isinstance(p, type) else str(p)


@pytest.mark.parametrize("dtype,op", REDUCTIONS, ids=lambda p: id_of(p))
def test_all_reduce(comm, mpi, dtype, op):
    x = data(dtype, 5, comm.rank)
    expected = np.empty_like(x)
    mpi.Allreduce(x, expected, op=MPI_OPS[op])
    got = comm.all_reduce(x, op=op)
    if op == "avg":
        np.testing.assert_allclose(got, expected / comm.size, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)
    assert got.dtype == x.dtype
    into = np.zeros_like(x)
    assert comm.all_reduce(x, into, op=op) is into
    np.testing.assert_array_equal(into, got)
    y = x.copy()
    comm.all_reduce_in_place(y, op)
    np.testing.assert_array_equal(y, got)


@pytest.mark.parametrize("dtype,op", REDUCTIONS, ids=lambda p: id_of(p))
def test_reduce_and_reduce_scatter(comm, mpi, dtype, op):
    root = comm.size - 1
    x = data(dtype, 2 * comm.size, comm.rank)
    expected = np.empty_like(x)
    mpi.Reduce(x, expected, op=MPI_OPS[op], root=root)
    got = comm.reduce(x, op=op, root=root)
    block = np.empty(2, dtype)
    mpi.Reduce_scatter_block(x, block, op=MPI_OPS[op])
    scattered = comm.reduce_scatter(x, op=op)
    if op == "avg":
        expected = expected / comm.size
        block = block / comm.size
    if comm.rank == root:
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    else:
        assert got is None
    np.testing.assert_allclose(scattered, block, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=id_of)
def test_broadcast(comm, mpi, dtype):
    x = data(dtype, 7, comm.rank)
    theirs = x.copy()
    mpi.Bcast(m(theirs), root=0)
    assert comm.broadcast(x, root=0) is x
    np.testing.assert_array_equal(x, theirs)


@pytest.mark.parametrize("dtype", DTYPES, ids=id_of)
def test_all_gather_and_gather(comm, mpi, dtype):
    x = data(dtype, 3, comm.rank)
    expected = np.empty(3 * comm.size, dtype)
    mpi.Allgather(m(x), m(expected))
    np.testing.assert_array_equal(comm.all_gather(x), expected)
    got = comm.gather(x, root=0)
    if comm.rank == 0:
        np.testing.assert_array_equal(got, expected)
    else:
        assert got is None


@pytest.mark.parametrize("dtype", DTYPES, ids=id_of)
def test_all_gather_v_has_no_padding(comm, mpi, dtype):
    counts = [(r % 3) + (r == 1) * 2 for r in range(comm.size)]  # 0, 3, 2, 0, ...
    x = data(dtype, counts[comm.rank], comm.rank)
    expected = np.empty(sum(counts), dtype)
    mpi.Allgatherv(m(x), [m(expected), counts])
    got = comm.all_gather_v(x)  # counts all-gathered first
    assert got.shape == (sum(counts),)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(comm.all_gather_v(x, counts), expected)
    g = comm.gather_v(x, counts, root=comm.size - 1)
    if comm.rank == comm.size - 1:
        np.testing.assert_array_equal(g, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=id_of)
def test_scatter_and_scatter_v(comm, mpi, dtype):
    root = 0
    full = data(dtype, 2 * comm.size, 99)
    expected = np.empty(2, dtype)
    mpi.Scatter(m(full), m(expected), root=root)
    got = comm.scatter(full if comm.rank == root else None, np.zeros(2, dtype), root=root)
    np.testing.assert_array_equal(got, expected)
    counts = [r + 1 for r in range(comm.size)]
    full_v = data(dtype, sum(counts), 7)
    expected_v = np.empty(counts[comm.rank], dtype)
    mpi.Scatterv([m(full_v), counts], m(expected_v), root=root)
    got_v = comm.scatter_v(full_v, counts, np.zeros(counts[comm.rank], dtype), root=root)
    np.testing.assert_array_equal(got_v, expected_v)


@pytest.mark.parametrize("dtype", DTYPES, ids=id_of)
def test_all_to_all_and_v(comm, mpi, dtype):
    x = data(dtype, 2 * comm.size, comm.rank)
    expected = np.empty_like(x)
    mpi.Alltoall(m(x), m(expected))
    np.testing.assert_array_equal(comm.all_to_all(x), expected)
    # rank i sends i + j + 1 elements to rank j
    send_counts = [comm.rank + j + 1 for j in range(comm.size)]
    recv_counts = [i + comm.rank + 1 for i in range(comm.size)]
    xv = data(dtype, sum(send_counts), comm.rank, salt=1)
    expected_v = np.empty(sum(recv_counts), dtype)
    mpi.Alltoallv([m(xv), send_counts], [m(expected_v), recv_counts])
    np.testing.assert_array_equal(comm.all_to_all_v(xv, send_counts, recv_counts), expected_v)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, np.int8], ids=id_of)
def test_point_to_point_ring(comm, mpi, dtype):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    x = data(dtype, 4, comm.rank)
    expected = np.empty_like(x)
    mpi.Sendrecv(x, dest=right, recvbuf=expected, source=left)
    got = comm.send_recv(x, right, np.zeros_like(x), left, tag=3)
    np.testing.assert_array_equal(got, expected)
    if comm.size >= 2:
        if comm.rank == 0:
            comm.send(x, 1, tag=9)
        elif comm.rank == 1:
            np.testing.assert_array_equal(comm.recv(np.zeros_like(x), 0, tag=9), data(dtype, 4, 0))
    comm.barrier()


def test_multidimensional_arrays_travel_whole(comm, mpi):
    x = np.arange(12.0).reshape(3, 4) * (comm.rank + 1)
    got = comm.all_reduce(x)
    assert got.shape == (12,)  # results allocated by the module are flat
    np.testing.assert_array_equal(got.reshape(3, 4), np.arange(12.0).reshape(3, 4) * sum(range(1, comm.size + 1)))
    y = np.zeros((3, 4))
    assert comm.all_reduce(x, y) is y


def test_reduce_op_enum_and_strings(comm):
    x = np.array([comm.rank + 1.0])
    assert comm.all_reduce(x, op=collectives.ReduceOp.MAX)[0] == comm.size
    assert comm.all_reduce(x, op="MIN")[0] == 1.0
    assert comm.all_reduce(x)[0] == comm.size * (comm.size + 1) / 2


def test_other_buffer_objects(comm):
    b = bytearray(range(8))
    comm.broadcast(b, root=0)
    assert bytes(b) == bytes(range(8))
    assert bytes(comm.all_gather(b"ab")) == b"ab" * comm.size

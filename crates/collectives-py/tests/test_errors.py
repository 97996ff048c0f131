"""Bad input raises the right exception, with the library's message, on every rank."""

import time

import numpy as np
import pytest

import collectives


def test_non_contiguous_view_names_the_fix(comm):
    a = np.zeros((4, 4))
    with pytest.raises(collectives.InvalidArgumentError, match=r"np\.ascontiguousarray"):
        comm.all_reduce(a[:, 1])
    with pytest.raises(collectives.InvalidArgumentError, match="not C-contiguous"):
        comm.all_reduce(np.ones(4), a[:, 0])
    with pytest.raises(collectives.InvalidArgumentError, match="not C-contiguous"):
        comm.broadcast(a.T)
    comm.all_reduce(np.ascontiguousarray(a[:, 1]))  # the fix works


def test_unsupported_dtypes(comm):
    for bad in (np.zeros(3, np.int16), np.zeros(3, bool), np.zeros(3, ">f8")):
        with pytest.raises(collectives.UnsupportedError, match="not an element type"):
            comm.all_gather(bad)


def test_unsupported_reductions_are_the_librarys_errors(comm):
    with pytest.raises(collectives.UnsupportedError, match="complex numbers are not ordered"):
        comm.all_reduce(np.ones(2, np.complex128), op="max")
    with pytest.raises(collectives.UnsupportedError):
        comm.all_reduce(np.ones(2, np.int32), op="avg")
    with pytest.raises(collectives.UnsupportedError):
        comm.all_reduce(np.ones(2, np.float16))


def test_wrong_lengths_and_roots(comm):
    with pytest.raises(collectives.InvalidArgumentError, match="all_reduce"):
        comm.all_reduce(np.ones(3), np.zeros(4))
    with pytest.raises(collectives.InvalidArgumentError, match="root"):
        comm.broadcast(np.ones(3), root=comm.size)
    with pytest.raises(collectives.InvalidArgumentError):
        comm.all_gather_v(np.ones(2), [2] * (comm.size + 1))


def test_mixed_dtypes_overlap_read_only_and_non_buffers(comm):
    with pytest.raises(collectives.InvalidArgumentError, match="float64 but recv is float32"):
        comm.all_reduce(np.ones(3), np.zeros(3, np.float32))
    x = np.ones(6)
    with pytest.raises(collectives.InvalidArgumentError, match="share memory"):
        comm.all_reduce(x[:3], x[2:5])
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(collectives.InvalidArgumentError, match="read-only"):
        comm.all_reduce(np.ones(3), ro)
    with pytest.raises(collectives.InvalidArgumentError, match="buffer protocol"):
        comm.all_reduce([1.0, 2.0])
    with pytest.raises(collectives.InvalidArgumentError, match="op"):
        comm.all_reduce(np.ones(3), op="median")


def test_ranks_that_disagree_get_mismatch_on_every_rank(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    n = 3 + comm.rank  # a different count on every rank
    with pytest.raises(collectives.MismatchError, match="ranks disagree on count"):
        comm.all_reduce(np.ones(n))
    dtype = np.float64 if comm.rank == 0 else np.float32
    with pytest.raises(collectives.MismatchError):
        comm.all_reduce(np.ones(3, dtype))


def test_a_bad_rank_gets_its_error_the_others_peer_invalid(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    recv = np.zeros(4 if comm.rank == 1 else 3)
    if comm.rank == 1:
        with pytest.raises(collectives.InvalidArgumentError):
            comm.all_reduce(np.ones(3), recv)
    else:
        with pytest.raises(collectives.PeerInvalidError, match=r"\[1\]"):
            comm.all_reduce(np.ones(3), recv)


def test_a_missing_peer_is_a_timeout_then_unusable(mpi):
    if mpi.Get_size() < 2:
        pytest.skip("needs 2 ranks")
    c = collectives.from_mpi4py(mpi, checked=False, timeout=0.3)
    if c.rank == 0:
        with pytest.raises(collectives.TimeoutError, match="timed out"):
            c.barrier()  # the others come only later
        assert not c.usable
        with pytest.raises(collectives.UnusableError, match="unusable"):
            c.all_reduce(np.ones(1))
        mpi.Barrier()
    else:
        mpi.Barrier()  # rank 0 has timed out
        c.barrier()  # completes rank 0's barrier still in flight inside MPI

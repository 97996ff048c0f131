"""Non-blocking operations: each i_* form gives the blocking form's result; requests as context
managers, test(), garbage-collected requests, and buffers held while in flight."""

import gc

import numpy as np
import pytest

import collectives


def values(n, rank, dtype=np.float64):
    return ((np.arange(n) + rank) % 5 + 1).astype(dtype)


def test_every_i_form_equals_its_blocking_form(comm):
    size, rank = comm.size, comm.rank
    x = values(2 * size, rank)
    counts = [r + 1 for r in range(size)]
    xv = values(counts[rank], rank)
    cases = [
        (lambda: comm.i_all_reduce(x, op="avg"), lambda: comm.all_reduce(x, op="avg")),
        (lambda: comm.i_reduce(x, op="max", root=size - 1), lambda: comm.reduce(x, op="max", root=size - 1)),
        (lambda: comm.i_all_gather(x), lambda: comm.all_gather(x)),
        (lambda: comm.i_all_gather_v(xv), lambda: comm.all_gather_v(xv)),
        (lambda: comm.i_all_gather_v(xv, counts), lambda: comm.all_gather_v(xv, counts)),
        (lambda: comm.i_gather(x, root=0), lambda: comm.gather(x, root=0)),
        (lambda: comm.i_gather_v(xv, counts, root=0), lambda: comm.gather_v(xv, counts, root=0)),
        (lambda: comm.i_scatter(x, np.zeros(2), root=0), lambda: comm.scatter(x, np.zeros(2), root=0)),
        (
            lambda: comm.i_scatter_v(values(sum(counts), 0), counts, np.zeros(counts[rank])),
            lambda: comm.scatter_v(values(sum(counts), 0), counts, np.zeros(counts[rank])),
        ),
        (lambda: comm.i_reduce_scatter(x, op="sum"), lambda: comm.reduce_scatter(x, op="sum")),
        (lambda: comm.i_all_to_all(x), lambda: comm.all_to_all(x)),
        (
            lambda: comm.i_all_to_all_v(x, [2] * size, [2] * size),
            lambda: comm.all_to_all_v(x, [2] * size, [2] * size),
        ),
        (lambda: comm.i_broadcast(values(3, rank), root=0), lambda: comm.broadcast(values(3, rank), root=0)),
        (
            lambda: comm.i_all_reduce_in_place(values(3, rank), op="prod"),
            lambda: comm.all_reduce_in_place(values(3, rank), op="prod"),
        ),
        (
            lambda: comm.i_send_recv(x, (rank + 1) % size, np.zeros_like(x), (rank - 1) % size),
            lambda: comm.send_recv(x, (rank + 1) % size, np.zeros_like(x), (rank - 1) % size),
        ),
    ]
    for i, (start, blocking) in enumerate(cases):
        got = start().wait()
        want = blocking()
        if want is None:
            assert got is None, i
        else:
            np.testing.assert_allclose(got, want, err_msg=f"case {i}")


def test_context_manager_and_test(comm):
    x = np.full(4, comm.rank + 1.0)
    with comm.i_all_reduce(x) as req:
        local = float(np.dot(x, x))  # overlaps the reduction
    assert req.done and "complete" in repr(req)
    np.testing.assert_array_equal(req.wait(), np.full(4, comm.size * (comm.size + 1) / 2))
    assert local == 4 * (comm.rank + 1) ** 2
    r = comm.i_barrier()
    while not r.test():
        pass
    assert r.test() and r.wait() is None


def test_send_and_recv(comm):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    incoming = np.zeros(3, np.int64)
    r = comm.i_recv(incoming, left, tag=1)
    s = comm.i_send(np.full(3, comm.rank, np.int64), right, tag=1)
    assert s.wait() is None
    assert r.wait() is incoming
    assert incoming.tolist() == [left] * 3


def test_a_request_holds_its_buffers(comm):
    recv = np.zeros(1 << 16)
    req = comm.i_all_reduce(np.ones(1 << 16), recv)
    # The request holds the array (and its exported buffer): NumPy refuses to resize it under
    # MPI. (`refcheck=False` skips that check, and is as unsafe here as with any other holder.)
    with pytest.raises(ValueError, match="cannot resize"):
        recv.resize(4)
    req.wait()
    del req
    recv.resize(4)  # released once complete and the request is gone


def test_an_unwaited_request_is_completed_when_collected(comm):
    recv = np.zeros(8)
    comm.i_all_reduce(np.ones(8), recv)  # dropped at once
    gc.collect()
    np.testing.assert_array_equal(recv, np.full(8, float(comm.size)))
    comm.barrier()


def test_start_errors_are_raised_at_once(comm):
    with pytest.raises(collectives.InvalidArgumentError):
        comm.i_all_reduce(np.ones(3), np.zeros(4))

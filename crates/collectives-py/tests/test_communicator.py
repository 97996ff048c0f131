"""Making communicators: from mpi4py (duplicated, same MPI library), the world, the options."""

import numpy as np
import pytest
from mpi4py import MPI

import collectives


def test_from_mpi4py_has_mpi4pys_ranks(mpi):
    c = collectives.from_mpi4py(mpi)
    assert (c.rank, c.size) == (mpi.Get_rank(), mpi.Get_size())
    assert c.backend == "mpi"


def test_from_a_split_mpi4py_communicator(mpi):
    sub = mpi.Split(color=mpi.Get_rank() % 2, key=-mpi.Get_rank())
    c = collectives.from_mpi4py(sub)
    assert (c.rank, c.size) == (sub.Get_rank(), sub.Get_size())
    x = np.array([float(mpi.Get_rank())])
    expected = np.empty(1)
    sub.Allreduce(x, expected)
    assert c.all_reduce(x)[0] == expected[0]
    sub.Free()


def test_duplicate_is_ours_mpi4pys_can_be_freed(mpi):
    dup = mpi.Dup()
    c = collectives.from_mpi4py(dup)
    dup.Free()  # the collectives communicator holds its own duplicate
    assert c.all_reduce(np.ones(3))[0] == mpi.Get_size()


def test_messages_do_not_mix_with_mpi4pys(mpi):
    c = collectives.from_mpi4py(mpi)
    if mpi.Get_size() < 2:
        pytest.skip("needs 2 ranks")
    if mpi.Get_rank() == 0:
        mpi.Send(np.full(2, 1.0), dest=1, tag=5)
        c.send(np.full(2, 2.0), 1, tag=5)
    elif mpi.Get_rank() == 1:
        ours = c.recv(np.zeros(2), 0, tag=5)  # posted first, matches only our send
        theirs = np.zeros(2)
        mpi.Recv(theirs, source=0, tag=5)
        assert ours.tolist() == [2.0, 2.0] and theirs.tolist() == [1.0, 1.0]


def test_world_and_library_version(mpi):
    w = collectives.world()
    assert (w.rank, w.size) == (mpi.Get_rank(), mpi.Get_size())
    assert collectives.library_version() == MPI.Get_library_version().rstrip("\x00").rstrip()


def test_options(mpi):
    c = collectives.from_mpi4py(mpi, checked=True, timeout=30)
    assert c.checked and c.timeout == 30.0 and c.usable
    d = c.dup(checked=False, timeout=0)
    assert not d.checked and d.timeout is None
    assert "rank" in repr(c)
    with pytest.raises(collectives.InvalidArgumentError, match="timeout"):
        collectives.from_mpi4py(mpi, timeout=-1)


def test_not_an_mpi4py_communicator():
    with pytest.raises(collectives.InvalidArgumentError, match="mpi4py.MPI.Comm"):
        collectives.from_mpi4py(42)
    with pytest.raises(collectives.InvalidArgumentError, match="COMM_NULL"):
        collectives.from_mpi4py(MPI.COMM_NULL)


def test_split_matches_mpi4pys(mpi, comm):
    color = mpi.Get_rank() % 2
    sub = comm.split(color, key=-comm.rank)
    theirs = mpi.Split(color, key=-mpi.Get_rank())
    assert (sub.rank, sub.size) == (theirs.Get_rank(), theirs.Get_size())
    theirs.Free()
    assert comm.split(None) is None


def test_exception_hierarchy():
    for name in [
        "InvalidArgumentError",
        "UnsupportedError",
        "CountOverflowError",
        "MpiError",
        "MismatchError",
        "PeerInvalidError",
        "NcclError",
        "CudaError",
        "UnavailableError",
        "TimeoutError",
        "UnusableError",
        "PlanActiveError",
        "ThreadLevelError",
    ]:
        cls = getattr(collectives, name)
        assert issubclass(cls, collectives.CollectivesError), name
    assert issubclass(collectives.CollectivesError, Exception)


def test_mpi4py_on_another_mpi_library_is_refused(mpi, monkeypatch):
    # What an mpi4py wheel that loaded another libmpi would report.
    monkeypatch.setattr(MPI, "Get_library_version", lambda: "MPICH Version: 4.2.0\x00")
    with pytest.raises(collectives.UnavailableError, match="another MPI library.*MPICH.*Open MPI"):
        collectives.from_mpi4py(mpi)


def test_world_without_mpi4py_initializes_and_finalizes_mpi(mpi):
    """A separate singleton process that never imports mpi4py: world() initializes MPI, and the
    module finalizes it at exit (the process exits 0)."""
    if mpi.Get_rank() != 0:
        return
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "ORTE_", "OPAL_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    code = (
        "import sys, numpy as np, collectives\n"
        "c = collectives.world()\n"
        "print(c.size, c.all_reduce(np.ones(2))[0])\n"
        "assert 'mpi4py' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1.0"]

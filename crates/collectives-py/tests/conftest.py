"""pytest under mpirun: every rank runs the whole suite; a test passes when it passed on every rank.

Rank 0 prints the usual report, then one line ``mpi-tests: N passed, M failed`` over all ranks
(what ``cargo xtask test`` counts); the other ranks print only their failures, with their rank.
"""

import os
import sys

import pytest
from mpi4py import MPI

import collectives

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()

_outcomes = {}  # nodeid -> "passed" | "failed" | "skipped"
_failures = []  # (nodeid, text) of this rank's failures


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if RANK != 0:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


def pytest_runtest_logreport(report):
    if report.failed:
        _outcomes[report.nodeid] = "failed"
        _failures.append((report.nodeid, report.longreprtext))
    elif report.when == "call" and report.passed:
        _outcomes.setdefault(report.nodeid, "passed")
    elif report.skipped:
        _outcomes.setdefault(report.nodeid, "skipped")


def pytest_sessionfinish(session, exitstatus):
    everyone = WORLD.gather((_outcomes, _failures), root=0)
    if RANK != 0:
        return
    merged = {}
    for outcomes, _ in everyone:
        for nodeid, outcome in outcomes.items():
            if merged.get(nodeid) != "failed":
                merged[nodeid] = "failed" if outcome == "failed" else merged.get(nodeid, outcome)
    for rank, (_, failures) in enumerate(everyone):
        if rank == 0:
            continue
        for nodeid, text in failures:
            print(f"\n---- rank {rank}: {nodeid} FAILED ----\n{text}", flush=True)
    passed = sum(1 for o in merged.values() if o == "passed")
    failed = sum(1 for o in merged.values() if o == "failed")
    skipped = sum(1 for o in merged.values() if o == "skipped")
    print(
        f"\nmpi-tests: {passed} passed, {failed} failed ({skipped} skipped) on {WORLD.Get_size()} ranks",
        flush=True,
    )


@pytest.fixture
def mpi():
    """mpi4py's world communicator."""
    return WORLD


@pytest.fixture
def comm():
    """A collectives communicator over mpi4py's world, in checked mode."""
    c = collectives.from_mpi4py(WORLD, checked=True)
    yield c
    WORLD.Barrier()


@pytest.fixture
def fast():
    """A collectives communicator over mpi4py's world, unchecked (MPI's own errors only)."""
    return collectives.from_mpi4py(WORLD, checked=False)


def pytest_report_header(config):
    return f"collectives on {collectives.library_version()}, {WORLD.Get_size()} ranks"

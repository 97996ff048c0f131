"""The PyLops-MPI-style example (examples/python/cgls_vstack.py) converges to lstsq's answer."""

import importlib.util
import pathlib

import collectives

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "python" / "cgls_vstack.py"


def load():
    spec = importlib.util.spec_from_file_location("cgls_vstack", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cgls_matches_lstsq_on_every_rank(mpi, capsys):
    example = load()
    comm = collectives.from_mpi4py(mpi, checked=False)
    x, iters, error = example.run(comm, rows=120, cols=30, niter=200)
    assert error < 1e-8, error
    assert 0 < iters < 200
    # every rank holds the same model
    assert (comm.all_reduce(x, op="max") == comm.all_reduce(x, op="min")).all()
    out = capsys.readouterr().out
    if comm.rank == 0:
        assert "of which communication" in out

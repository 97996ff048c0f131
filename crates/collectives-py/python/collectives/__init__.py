"""Collective communication over MPI on NumPy arrays, from the Rust ``collectives`` library.

Make a communicator from mpi4py's (or over every rank) and call collectives on NumPy arrays::

    from mpi4py import MPI
    import numpy as np
    import collectives

    comm = collectives.from_mpi4py(MPI.COMM_WORLD, checked=True, timeout=30)
    x = np.arange(4.0) + comm.rank
    total = comm.all_reduce(x, op="sum")            # a new array; or all_reduce(x, recv)
    parts = comm.all_gather_v(x[: comm.rank + 1])   # uneven, no padding
    with comm.i_all_reduce(x) as req:               # non-blocking; waited at the end of the block
        ...                                          # overlap work here
    result = req.wait()                              # the receive array

Arrays must be C-contiguous and of one of the dtypes int8, uint8, int32, uint32, int64, uint64,
float16, float32, float64, complex64, complex128. Every error of the library is an exception
class under ``CollectivesError`` with the library's message (``InvalidArgumentError``,
``UnsupportedError``, ``MismatchError``, ``TimeoutError``, ...).

What is not here: the device backends (NCCL, CUDA-aware MPI, staged) and GPU arrays, and
persistent plans; see the repository's README.
"""

from ._collectives import (
    CollectivesError,
    Communicator,
    CountOverflowError,
    CudaError,
    InvalidArgumentError,
    MismatchError,
    MpiError,
    NcclError,
    PeerInvalidError,
    PlanActiveError,
    ReduceOp,
    Request,
    ThreadLevelError,
    TimeoutError,
    UnavailableError,
    UnsupportedError,
    UnusableError,
    from_mpi4py,
    library_version,
    world,
)

__all__ = [
    "CollectivesError",
    "Communicator",
    "CountOverflowError",
    "CudaError",
    "InvalidArgumentError",
    "MismatchError",
    "MpiError",
    "NcclError",
    "PeerInvalidError",
    "PlanActiveError",
    "ReduceOp",
    "Request",
    "ThreadLevelError",
    "TimeoutError",
    "UnavailableError",
    "UnsupportedError",
    "UnusableError",
    "from_mpi4py",
    "library_version",
    "world",
]

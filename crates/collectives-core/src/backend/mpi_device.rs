//! The argument rules of the two MPI backends on device memory, [`MpiCudaComm`] and
//! [`MpiStagedComm`]: the one table of [`crate::rules`] with the communicator's device and MPI's
//! `int` count limit, so both refuse the same input with the same typed error, in the same order,
//! as every other backend.
//!
//! [`MpiCudaComm`]: super::mpi_cuda::MpiCudaComm
//! [`MpiStagedComm`]: super::mpi_staged::MpiStagedComm

use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::MpiComm;
use crate::comm::Communicator;
use crate::op::BackendKind;
use crate::rules::{CountLimit, Rules};

/// The rules of `backend` for the ranks of `mpi`, on CUDA device `device`.
pub(crate) fn rules(backend: BackendKind, device: usize, mpi: &MpiComm) -> Rules {
    Rules {
        backend,
        rank: mpi.rank(),
        size: mpi.size(),
        device: Some(device),
        limit: CountLimit::Elements(host::count_limit()),
        tag_ub: mpi.tag_ub(),
    }
}

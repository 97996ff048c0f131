//! The argument rules of the two MPI backends on device memory, [`MpiCudaComm`] and
//! [`MpiStagedComm`]: the one table of [`crate::rules`] with the communicator's device and MPI's
//! `int` count limit, its counts turned into what the MPI call takes (`c_int`, or counts and
//! displacements). Both refuse the same input with the same typed error, in the same order, as
//! every other backend.
//!
//! [`MpiCudaComm`]: super::mpi_cuda::MpiCudaComm
//! [`MpiStagedComm`]: super::mpi_staged::MpiStagedComm

use std::ffi::c_int;

use cudarc::driver::CudaSlice;

use crate::backend::mpi_host::raw as host;
use crate::backend::mpi_host::MpiComm;
use crate::comm::{Communicator, Tag};
use crate::element::Element;
use crate::error::Result;
use crate::op::{BackendKind, ReduceOp};
use crate::rules::{CountLimit, Rules};

/// MPI counts and displacements of a `v` collective.
pub(crate) type CountsDispls = (Vec<c_int>, Vec<c_int>);

/// The rules of an MPI communicator on a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceArgs(pub(crate) Rules);

impl DeviceArgs {
    /// The rules of `backend` for the ranks of `mpi`, on CUDA device `device`.
    pub(crate) fn new(backend: BackendKind, device: usize, mpi: &MpiComm) -> Self {
        DeviceArgs(Rules {
            backend,
            rank: mpi.rank(),
            size: mpi.size(),
            device: Some(device),
            limit: CountLimit::Elements(host::count_limit()),
            tag_ub: mpi.tag_ub(),
        })
    }

    /// `broadcast`: the count.
    pub(crate) fn broadcast<T: Element>(
        &self,
        op: &'static str,
        buf: &CudaSlice<T>,
        root: usize,
    ) -> Result<c_int> {
        self.0.broadcast::<T, _>(op, buf, root).map(host::int)
    }

    /// `reduce`: the count, and `recv` on the root.
    pub(crate) fn reduce<'b, T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: Option<&'b mut CudaSlice<T>>,
        red: ReduceOp,
        root: usize,
    ) -> Result<(c_int, Option<&'b mut CudaSlice<T>>)> {
        let (n, recv) = self.0.reduce::<T, _, _>(op, send, recv, red, root)?;
        Ok((host::int(n), recv))
    }

    /// `all_reduce`: the count.
    pub(crate) fn all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<c_int> {
        self.0
            .all_reduce::<T, _>(op, send, recv, red)
            .map(host::int)
    }

    /// `all_reduce_in_place`: the count.
    pub(crate) fn all_reduce_in_place<T: Element>(
        &self,
        op: &'static str,
        buf: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<c_int> {
        self.0
            .all_reduce_in_place::<T, _>(op, buf, red)
            .map(host::int)
    }

    /// `all_gather`: the count of one block.
    pub(crate) fn all_gather<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
    ) -> Result<c_int> {
        self.0.all_gather::<T, _>(op, send, recv).map(host::int)
    }

    /// `all_gather_v`: counts and displacements.
    pub(crate) fn all_gather_v<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        counts: &[usize],
    ) -> Result<CountsDispls> {
        self.0.all_gather_v::<T, _>(op, send, recv, counts)?;
        Ok(host::packed(counts))
    }

    /// `gather`: the count of one block, and `recv` on the root.
    pub(crate) fn gather<'b, T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: Option<&'b mut CudaSlice<T>>,
        root: usize,
    ) -> Result<(c_int, Option<&'b mut CudaSlice<T>>)> {
        let (n, recv) = self.0.gather::<T, _, _>(op, send, recv, root)?;
        Ok((host::int(n), recv))
    }

    /// `gather_v`: counts and displacements, and `recv` on the root.
    pub(crate) fn gather_v<'b, T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: Option<&'b mut CudaSlice<T>>,
        counts: &[usize],
        root: usize,
    ) -> Result<(CountsDispls, Option<&'b mut CudaSlice<T>>)> {
        let recv = self.0.gather_v::<T, _, _>(op, send, recv, counts, root)?;
        Ok((host::packed(counts), recv))
    }

    /// `scatter`: the count of one block, and `send` on the root.
    pub(crate) fn scatter<'b, T: Element>(
        &self,
        op: &'static str,
        send: Option<&'b CudaSlice<T>>,
        recv: &CudaSlice<T>,
        root: usize,
    ) -> Result<(c_int, Option<&'b CudaSlice<T>>)> {
        let (n, send) = self.0.scatter::<T, _, _>(op, send, recv, root)?;
        Ok((host::int(n), send))
    }

    /// `scatter_v`: counts and displacements, and `send` on the root.
    pub(crate) fn scatter_v<'b, T: Element>(
        &self,
        op: &'static str,
        send: Option<&'b CudaSlice<T>>,
        recv: &CudaSlice<T>,
        counts: &[usize],
        root: usize,
    ) -> Result<(CountsDispls, Option<&'b CudaSlice<T>>)> {
        let send = self.0.scatter_v::<T, _, _>(op, send, recv, counts, root)?;
        Ok((host::packed(counts), send))
    }

    /// `reduce_scatter`: the count of one block.
    pub(crate) fn reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<c_int> {
        self.0
            .reduce_scatter::<T, _>(op, send, recv, red)
            .map(host::int)
    }

    /// `all_to_all`: the count of one block.
    pub(crate) fn all_to_all<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
    ) -> Result<c_int> {
        self.0.all_to_all::<T, _>(op, send, recv).map(host::int)
    }

    /// `all_to_all_v`: counts and displacements of both sides.
    pub(crate) fn all_to_all_v<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        send_counts: &[usize],
        recv: &CudaSlice<T>,
        recv_counts: &[usize],
    ) -> Result<(CountsDispls, CountsDispls)> {
        self.0
            .all_to_all_v::<T, _>(op, send, send_counts, recv, recv_counts)?;
        Ok((host::packed(send_counts), host::packed(recv_counts)))
    }

    /// `send` (`what` = `"destination"`) or `recv` (`"source"`): the peer and the count.
    pub(crate) fn point<T: Element>(
        &self,
        op: &'static str,
        what: &str,
        buf: &CudaSlice<T>,
        peer: usize,
        tag: Tag,
    ) -> Result<(c_int, c_int)> {
        let n = self.0.point::<T, _>(op, what, buf, peer, tag)?;
        Ok((host::int(peer), host::int(n)))
    }

    /// `send_recv`: the destination, the source, and the send and receive counts.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_recv<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        dest: usize,
        recv: &CudaSlice<T>,
        source: usize,
        tag: Tag,
    ) -> Result<[c_int; 4]> {
        let (sn, rn) = self
            .0
            .send_recv::<T, _>(op, send, dest, recv, source, tag)?;
        Ok([dest, source, sn, rn].map(host::int))
    }
}

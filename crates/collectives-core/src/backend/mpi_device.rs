//! The argument rules of the two MPI backends on device memory, [`MpiCudaComm`] and
//! [`MpiStagedComm`], in one place: both refuse the same input with the same typed error, checked
//! in the same order, on every rank before the ranks agree. Each rule returns what the MPI call
//! needs (counts as `c_int`, or counts and displacements) and, on the root, the root-only buffer;
//! the staged backend adds its pinned host buffers once the rules pass.
//!
//! [`MpiCudaComm`]: super::mpi_cuda::MpiCudaComm
//! [`MpiStagedComm`]: super::mpi_staged::MpiStagedComm

use std::ffi::c_int;

use cudarc::driver::CudaSlice;

use crate::backend::mpi_host::raw as host;
use crate::check;
use crate::check::check_op;
use crate::element::Element;
use crate::error::Result;
use crate::op::{BackendKind, ReduceOp};

/// MPI counts and displacements of a `v` collective.
pub(crate) type CountsDispls = (Vec<c_int>, Vec<c_int>);

/// What the rules know of the communicator that checks them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceArgs {
    /// The backend, whose reduction rules apply.
    pub(crate) backend: BackendKind,
    /// The communicator's CUDA device.
    pub(crate) device: usize,
    /// This rank.
    pub(crate) rank: usize,
    /// The number of ranks.
    pub(crate) size: usize,
}

impl DeviceArgs {
    /// `buf` lies on the communicator's device.
    pub(crate) fn on_device<T>(
        &self,
        op: &'static str,
        name: &str,
        buf: &CudaSlice<T>,
    ) -> Result<()> {
        check::same_device(op, name, buf.ordinal(), self.device)
    }

    /// The root-only buffer, where this rank has one, on the communicator's device.
    fn on_root_device<T>(
        &self,
        op: &'static str,
        name: &str,
        buf: Option<&CudaSlice<T>>,
    ) -> Result<()> {
        buf.map_or(Ok(()), |b| self.on_device(op, name, b))
    }

    /// Both buffers on the communicator's device.
    pub(crate) fn on_devices<T>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
    ) -> Result<()> {
        self.on_device(op, "send", send)?;
        self.on_device(op, "recv", recv)
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
        check_op::<T>(op, red, self.backend)?;
        check::rank_in_range(op, "root", root, self.size)?;
        self.on_device(op, "send", send)?;
        let recv = check::at_root(
            op,
            "recv",
            self.rank == root,
            recv,
            send.len(),
            "the length of send",
        )?;
        self.on_root_device(op, "recv", recv.as_deref())?;
        Ok((host::count(op, send.len())?, recv))
    }

    /// `all_reduce`: the count.
    pub(crate) fn all_reduce<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<c_int> {
        check_op::<T>(op, red, self.backend)?;
        check::same_len(op, "send", send.len(), "recv", recv.len())?;
        self.on_devices(op, send, recv)?;
        host::count(op, send.len())
    }

    /// `all_gather`: the count of one block.
    pub(crate) fn all_gather<T>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
    ) -> Result<c_int> {
        check::blocks_len(op, "recv", recv.len(), self.size, send.len())?;
        self.on_devices(op, send, recv)?;
        host::count(op, recv.len())?;
        host::count(op, send.len())
    }

    /// `all_gather_v`: counts and displacements.
    pub(crate) fn all_gather_v<T>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        counts: &[usize],
    ) -> Result<CountsDispls> {
        let total = check::v_counts(op, "send", send.len(), counts, self.rank, self.size)?;
        check::len_is(op, "recv", recv.len(), total, "the sum of counts")?;
        self.on_devices(op, send, recv)?;
        host::counts_displs(op, counts)
    }

    /// `gather`: the count of one block, and `recv` on the root.
    pub(crate) fn gather<'b, T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: Option<&'b mut CudaSlice<T>>,
        root: usize,
    ) -> Result<(c_int, Option<&'b mut CudaSlice<T>>)> {
        check::rank_in_range(op, "root", root, self.size)?;
        self.on_device(op, "send", send)?;
        let recv = check::at_root(
            op,
            "recv",
            self.rank == root,
            recv,
            self.size.saturating_mul(send.len()),
            &format!("{} ranks x {} elements", self.size, send.len()),
        )?;
        self.on_root_device(op, "recv", recv.as_deref())?;
        if let Some(r) = &recv {
            host::count(op, r.len())?;
        }
        Ok((host::count(op, send.len())?, recv))
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
        check::rank_in_range(op, "root", root, self.size)?;
        let total = check::v_counts(op, "send", send.len(), counts, self.rank, self.size)?;
        self.on_device(op, "send", send)?;
        let recv = check::at_root(
            op,
            "recv",
            self.rank == root,
            recv,
            total,
            "the sum of counts",
        )?;
        self.on_root_device(op, "recv", recv.as_deref())?;
        Ok((host::counts_displs(op, counts)?, recv))
    }

    /// `scatter`: the count of one block, and `send` on the root.
    pub(crate) fn scatter<'b, T: Element>(
        &self,
        op: &'static str,
        send: Option<&'b CudaSlice<T>>,
        recv: &CudaSlice<T>,
        root: usize,
    ) -> Result<(c_int, Option<&'b CudaSlice<T>>)> {
        check::rank_in_range(op, "root", root, self.size)?;
        self.on_device(op, "recv", recv)?;
        let send = check::at_root(
            op,
            "send",
            self.rank == root,
            send,
            self.size.saturating_mul(recv.len()),
            &format!("{} ranks x {} elements", self.size, recv.len()),
        )?;
        self.on_root_device(op, "send", send)?;
        if let Some(s) = send {
            host::count(op, s.len())?;
        }
        Ok((host::count(op, recv.len())?, send))
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
        check::rank_in_range(op, "root", root, self.size)?;
        let total = check::v_counts(op, "recv", recv.len(), counts, self.rank, self.size)?;
        self.on_device(op, "recv", recv)?;
        let send = check::at_root(
            op,
            "send",
            self.rank == root,
            send,
            total,
            "the sum of counts",
        )?;
        self.on_root_device(op, "send", send)?;
        Ok((host::counts_displs(op, counts)?, send))
    }

    /// `reduce_scatter`: the count of one block.
    pub(crate) fn reduce_scatter<T: Element>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
        red: ReduceOp,
    ) -> Result<c_int> {
        check_op::<T>(op, red, self.backend)?;
        check::blocks_len(op, "send", send.len(), self.size, recv.len())?;
        self.on_devices(op, send, recv)?;
        host::count(op, send.len())?;
        host::count(op, recv.len())
    }

    /// `all_to_all`: the count of one block.
    pub(crate) fn all_to_all<T>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        recv: &CudaSlice<T>,
    ) -> Result<c_int> {
        check::same_len(op, "send", send.len(), "recv", recv.len())?;
        let block = check::equal_blocks(op, "send", send.len(), self.size)?;
        self.on_devices(op, send, recv)?;
        host::count(op, send.len())?;
        host::count(op, block)
    }

    /// `all_to_all_v`: counts and displacements of both sides.
    pub(crate) fn all_to_all_v<T>(
        &self,
        op: &'static str,
        send: &CudaSlice<T>,
        send_counts: &[usize],
        recv: &CudaSlice<T>,
        recv_counts: &[usize],
    ) -> Result<(CountsDispls, CountsDispls)> {
        let s_total = check::counts(op, "send_counts", send_counts, self.size)?;
        let r_total = check::counts(op, "recv_counts", recv_counts, self.size)?;
        check::len_is(op, "send", send.len(), s_total, "the sum of send_counts")?;
        check::len_is(op, "recv", recv.len(), r_total, "the sum of recv_counts")?;
        self.on_devices(op, send, recv)?;
        Ok((
            host::counts_displs(op, send_counts)?,
            host::counts_displs(op, recv_counts)?,
        ))
    }
}

//! Persistent collectives on MPI: MPI-4's `MPI_*_init` or, before MPI 4, Open MPI's `MPIX_*_init`
//! (its `pcollreq` extension, the same prototypes), looked up at run time with `dlsym` (rsmpi's
//! bindings have neither). The request is made once; each run is `MPI_Start` and completes through
//! the same waiting loop as every other MPI request. Where the library has neither, or under a
//! deadline (where MPI must work on copies the operation owns, see [`super::request`]), the front
//! end's replay of the non-blocking call is used instead: the choice depends only on the library
//! and on the communicator's deadline, the same on every rank, as MPI requires (a persistent
//! collective matches only persistent collectives).

use std::ffi::{c_int, c_void};

use mpi::ffi;

use super::comm::MpiComm;
use super::raw;
use super::request::{new_request, wait_requests, Region};
use crate::element::Element;
use crate::error::Result;
use crate::frontend::{BufPtr, PlanCall, PlanOp};
use crate::operation::Op;
use crate::persistent::PlanPath;

type Comm = ffi::MPI_Comm;
type Dt = ffi::MPI_Datatype;
type Info = ffi::MPI_Info;
type Req = *mut ffi::MPI_Request;
type Send = *const c_void;
type Recv = *mut c_void;
type Ints = *const c_int;
/// The prototype of `MPI_Allgather_init` and `MPI_Alltoall_init`: blocks of one count each way
/// (with MPI 4's `MPI_Info` and request).
type BlocksInit = unsafe extern "C" fn(Send, c_int, Dt, Recv, c_int, Dt, Comm, Info, Req) -> c_int;
/// The prototype of `MPI_Gather_init` and `MPI_Scatter_init`: blocks of one count, a root (with
/// MPI 4's `MPI_Info` and request).
type RootedBlocksInit =
    unsafe extern "C" fn(Send, c_int, Dt, Recv, c_int, Dt, c_int, Comm, Info, Req) -> c_int;
/// The prototype of `MPI_Allreduce_init` and `MPI_Reduce_scatter_block_init`: a count and a
/// reduce operation (with MPI 4's `MPI_Info` and request).
type ReductionInit =
    unsafe extern "C" fn(Send, Recv, c_int, Dt, ffi::MPI_Op, Comm, Info, Req) -> c_int;
/// The prototype of `MPI_Allgatherv_init`: this rank's count, and every rank's count and
/// displacement to receive (with MPI 4's `MPI_Info` and request).
type AllgathervInit =
    unsafe extern "C" fn(Send, c_int, Dt, Recv, Ints, Ints, Dt, Comm, Info, Req) -> c_int;
/// The prototype of `MPI_Gatherv_init`: as [`AllgathervInit`], with a root.
type GathervInit =
    unsafe extern "C" fn(Send, c_int, Dt, Recv, Ints, Ints, Dt, c_int, Comm, Info, Req) -> c_int;
/// The prototype of `MPI_Scatterv_init`: every rank's count and displacement to send, this rank's
/// count to receive, a root (with MPI 4's `MPI_Info` and request).
type ScattervInit =
    unsafe extern "C" fn(Send, Ints, Ints, Dt, Recv, c_int, Dt, c_int, Comm, Info, Req) -> c_int;
/// The prototype of `MPI_Alltoallv_init`: every rank's count and displacement each way (with
/// MPI 4's `MPI_Info` and request).
type AlltoallvInit =
    unsafe extern "C" fn(Send, Ints, Ints, Dt, Recv, Ints, Ints, Dt, Comm, Info, Req) -> c_int;

/// The first of `MPI_<name>` and `MPIX_<name>` this process exports, as a function of type `F`,
/// with the name found.
///
/// # Safety
/// `F` is the C prototype of that function (the MPI-4 and Open MPI prototypes are the same).
unsafe fn lookup<F: Copy>(name: &str) -> Option<(F, &'static str)> {
    #[cfg(unix)]
    {
        let this = libloading::os::unix::Library::this();
        for prefix in ["MPI_", "MPIX_"] {
            let symbol = format!("{prefix}{name}\0");
            // SAFETY: a symbol lookup runs no code; `F` is its prototype (the caller's promise).
            if let Ok(f) = unsafe { this.get::<F>(symbol.as_bytes()) } {
                let found: &'static str = match (prefix, name) {
                    ("MPI_", n) => leak(format!("MPI_{n}")),
                    (_, n) => leak(format!("MPIX_{n}")),
                };
                return Some((*f, found));
            }
        }
        None
    }
    #[cfg(not(unix))]
    {
        let _ = name;
        None
    }
}

/// The name of a function found, kept for the life of the process (one small string per kind of
/// collective: names are interned).
fn leak(name: String) -> &'static str {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(&known) = names.get(name.as_str()) {
        return known;
    }
    let name: &'static str = Box::leak(name.into_boxed_str());
    names.insert(name);
    name
}

/// One persistent MPI request and what its runs need.
pub(crate) struct MpiPlan<'s, T: Element> {
    comm: &'s MpiComm,
    op: &'static str,
    function: &'static str,
    request: ffi::MPI_Request,
    /// Counts and displacements MPI may read at every start, until the request is freed.
    _arrays: Vec<Vec<c_int>>,
    /// For `Avg` on MPI (a sum): the receive buffer to divide at each completion.
    average: Option<BufPtr<[T]>>,
}

impl<T: Element> MpiPlan<'_, T> {
    fn finish(&mut self) {
        if let Some(buf) = self.average {
            // SAFETY: the plan borrows the buffer mutably for its life; the run is complete, so MPI
            // no longer writes it, and the caller cannot reach it while the plan is being waited for.
            T::divide_all(unsafe { buf.get_mut() }, self.comm.size);
        }
    }
}

impl<T: Element> PlanOp for MpiPlan<'_, T> {
    fn start(&mut self) -> Result<()> {
        self.comm.ensure_usable(self.op)?;
        // SAFETY: the request came from a successful persistent-collective init on this
        // communicator and is inactive (the front end starts only after the last run completed).
        raw::check(self.op, unsafe { ffi::MPI_Start(&mut self.request) })
    }

    fn wait(&mut self) -> Result<()> {
        let mut status = [raw::status()];
        wait_requests(
            self.op,
            std::slice::from_mut(&mut self.request),
            &mut status,
            None,
        )?;
        self.finish();
        Ok(())
    }

    fn test(&mut self) -> Result<bool> {
        let mut flag: c_int = 0;
        let mut status = raw::status();
        // SAFETY: an active persistent request of this communicator; valid out-pointers.
        let rc = unsafe { ffi::MPI_Test(&mut self.request, &mut flag, &mut status) };
        raw::check(self.op, rc)?;
        if flag == 0 {
            return Ok(false);
        }
        self.finish();
        Ok(true)
    }

    fn path(&self) -> PlanPath {
        PlanPath::Persistent {
            function: self.function,
        }
    }
}

impl<T: Element> Drop for MpiPlan<'_, T> {
    fn drop(&mut self) {
        let mut finalized: c_int = 0;
        // SAFETY: MPI_Finalized may be called at any time.
        unsafe { ffi::MPI_Finalized(&mut finalized) };
        if finalized == 0 {
            // SAFETY: the request is ours and inactive (its last run was completed before the plan
            // is dropped); a drop must not panic, so the error is ignored.
            unsafe { ffi::MPI_Request_free(&mut self.request) };
        }
    }
}

impl MpiComm {
    /// The persistent request for `call`, where this MPI has the persistent collective for it;
    /// `Ok(None)` where it has not.
    ///
    /// # Errors
    /// [`Error::Mpi`](crate::Error::Mpi) from the init call.
    pub(crate) fn persistent_plan<'s, T: Element>(
        &'s self,
        op: &'static str,
        call: &PlanCall<'s, Self, T>,
    ) -> Result<Option<MpiPlan<'s, T>>> {
        let (dt, comm) = (raw::datatype::<T>(), self.raw);
        // SAFETY: a constant handle from rsmpi's shim.
        let info: Info = unsafe { ffi::RSMPI_INFO_NULL };
        let mut request = new_request();
        let req: Req = &mut request;
        let mut arrays: Vec<Vec<c_int>> = Vec::new();
        let mut average = None;
        // Safety of the buffers (below): the plan borrows every buffer mutably for its life ('s) and
        // holds the request until it is freed; MPI keeps the addresses taken here and uses them at
        // each start, when the caller cannot reach the buffers (the front end hands them out only
        // between runs). The counts were checked against the buffers and the communicator, roots
        // are in range.
        // SAFETY: as just said.
        let send_of = |p: &BufPtr<[T]>| Region::send(unsafe { p.get() }).direct();
        // SAFETY: as just said.
        let recv_of = |p: &BufPtr<[T]>| match unsafe { p.get_mut() } {
            [] => raw::empty_out(),
            buf => Region::recv(buf).direct(),
        };
        let opt_send = |p: &Option<BufPtr<[T]>>| p.as_ref().map_or(std::ptr::null_mut(), send_of);
        let opt_recv = |p: &Option<BufPtr<[T]>>| p.as_ref().map_or(std::ptr::null_mut(), recv_of);
        // A counts array packed into MPI's counts and displacements, kept in the plan (MPI reads
        // them at each start): this rank's count and the addresses of the two arrays, which do
        // not move when the arrays do.
        let mut packed = |counts: &[usize]| {
            let (c, d) = raw::packed(counts);
            let found = (c[self.rank], c.as_ptr(), d.as_ptr());
            arrays.extend([c, d]);
            found
        };
        macro_rules! find {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the prototype of the MPI-4 function, which Open MPI's MPIX_ one shares.
                match unsafe { lookup::<$ty>($name) } {
                    Some(found) => found,
                    None => return Ok(None),
                }
            }};
        }
        let n = call.n;
        if call.average {
            average = call.op.buffers().1.copied();
        }
        let (rc, function) = match &call.op {
            Op::Barrier => {
                let (f, name) = find!(
                    "Barrier_init",
                    unsafe extern "C" fn(Comm, Info, Req) -> c_int
                );
                // SAFETY: a valid communicator, info and out-pointer.
                (unsafe { f(comm, info, req) }, name)
            }
            Op::Broadcast { buf, root } => {
                type F = unsafe extern "C" fn(Recv, c_int, Dt, c_int, Comm, Info, Req) -> c_int;
                let (f, name) = find!("Bcast_init", F);
                // SAFETY: as for `recv_of`.
                let p = Region::in_out(unsafe { buf.get_mut() }).direct();
                // SAFETY: see above; `buf` holds `n` elements.
                (
                    unsafe { f(p, raw::int(n), dt, *root as c_int, comm, info, req) },
                    name,
                )
            }
            Op::Reduce {
                send,
                recv,
                op: red,
                root,
            } => {
                type F = unsafe extern "C" fn(
                    Send,
                    Recv,
                    c_int,
                    Dt,
                    ffi::MPI_Op,
                    c_int,
                    Comm,
                    Info,
                    Req,
                ) -> c_int;
                let (f, name) = find!("Reduce_init", F);
                let (s, r) = (send_of(send), opt_recv(recv));
                // SAFETY: see above; `send` holds `n` elements, and on the root `recv` too.
                let rc = unsafe {
                    f(
                        s,
                        r,
                        raw::int(n),
                        dt,
                        raw::op(*red),
                        *root as c_int,
                        comm,
                        info,
                        req,
                    )
                };
                (rc, name)
            }
            Op::AllReduce {
                send,
                recv,
                op: red,
            } => {
                let (f, name) = find!("Allreduce_init", ReductionInit);
                let (s, r) = (send_of(send), recv_of(recv));
                // SAFETY: see above; both buffers hold `n` elements.
                (
                    unsafe { f(s, r, raw::int(n), dt, raw::op(*red), comm, info, req) },
                    name,
                )
            }
            Op::AllReduceInPlace { buf, op: red } => {
                let (f, name) = find!("Allreduce_init", ReductionInit);
                // SAFETY: as for `recv_of`.
                let r = Region::in_out(unsafe { buf.get_mut() }).direct();
                // SAFETY: see above; `buf` holds `n` elements; MPI_IN_PLACE (from the MPI's own
                // header) makes MPI read and write it only.
                (
                    unsafe {
                        f(
                            raw::in_place(),
                            r,
                            raw::int(n),
                            dt,
                            raw::op(*red),
                            comm,
                            info,
                            req,
                        )
                    },
                    name,
                )
            }
            Op::AllGather { send, recv } => {
                let (f, name) = find!("Allgather_init", BlocksInit);
                let n = raw::int(n);
                let (s, r) = (send_of(send), recv_of(recv));
                // SAFETY: see above; `send` holds `n` and `recv` `size * n` elements.
                (unsafe { f(s, n, dt, r, n, dt, comm, info, req) }, name)
            }
            Op::AllGatherV { send, recv, counts } => {
                let (f, name) = find!("Allgatherv_init", AllgathervInit);
                let (mine, c, d) = packed(counts);
                let (s, r) = (send_of(send), recv_of(recv));
                // SAFETY: see above; the arrays live as long as the request (kept in the plan).
                (
                    unsafe { f(s, mine, dt, r, c, d, dt, comm, info, req) },
                    name,
                )
            }
            Op::Gather { send, recv, root } => {
                let (f, name) = find!("Gather_init", RootedBlocksInit);
                let n = raw::int(n);
                let (s, r) = (send_of(send), opt_recv(recv));
                // SAFETY: see above; `send` holds `n`, on the root `recv` `size * n` elements.
                (
                    unsafe { f(s, n, dt, r, n, dt, *root as c_int, comm, info, req) },
                    name,
                )
            }
            Op::GatherV {
                send,
                recv,
                counts,
                root,
            } => {
                let (f, name) = find!("Gatherv_init", GathervInit);
                let (mine, c, d) = packed(counts);
                let (s, r, root) = (send_of(send), opt_recv(recv), *root as c_int);
                // SAFETY: see above; the arrays live as long as the request.
                (
                    unsafe { f(s, mine, dt, r, c, d, dt, root, comm, info, req) },
                    name,
                )
            }
            Op::Scatter { send, recv, root } => {
                let (f, name) = find!("Scatter_init", RootedBlocksInit);
                let n = raw::int(n);
                let (s, r) = (opt_send(send), recv_of(recv));
                // SAFETY: see above; `recv` holds `n`, on the root `send` `size * n` elements.
                (
                    unsafe { f(s, n, dt, r, n, dt, *root as c_int, comm, info, req) },
                    name,
                )
            }
            Op::ScatterV {
                send,
                recv,
                counts,
                root,
            } => {
                let (f, name) = find!("Scatterv_init", ScattervInit);
                let (mine, c, d) = packed(counts);
                let (s, r, root) = (opt_send(send), recv_of(recv), *root as c_int);
                // SAFETY: see above; the arrays live as long as the request.
                (
                    unsafe { f(s, c, d, dt, r, mine, dt, root, comm, info, req) },
                    name,
                )
            }
            Op::ReduceScatter {
                send,
                recv,
                op: red,
            } => {
                let (f, name) = find!("Reduce_scatter_block_init", ReductionInit);
                let (s, r) = (send_of(send), recv_of(recv));
                // SAFETY: see above; `send` holds `size * n` and `recv` `n` elements.
                (
                    unsafe { f(s, r, raw::int(n), dt, raw::op(*red), comm, info, req) },
                    name,
                )
            }
            Op::AllToAll { send, recv } => {
                let (f, name) = find!("Alltoall_init", BlocksInit);
                let n = raw::int(n);
                let (s, r) = (send_of(send), recv_of(recv));
                // SAFETY: see above; both buffers hold `size` blocks of `n` elements.
                (unsafe { f(s, n, dt, r, n, dt, comm, info, req) }, name)
            }
            Op::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            } => {
                let (f, name) = find!("Alltoallv_init", AlltoallvInit);
                let ((_, sc, sd), (_, rc, rd)) = (packed(send_counts), packed(recv_counts));
                let (s, r) = (send_of(send), recv_of(recv));
                // SAFETY: see above; the arrays live as long as the request.
                (
                    unsafe { f(s, sc, sd, dt, r, rc, rd, dt, comm, info, req) },
                    name,
                )
            }
            // Point-to-point operations have no persistent form: the replay's, if ever asked.
            Op::Send { .. } | Op::Recv { .. } | Op::SendRecv { .. } => return Ok(None),
        };
        raw::check(op, rc)?;
        Ok(Some(MpiPlan {
            comm: self,
            op,
            function,
            request,
            _arrays: arrays,
            average,
        }))
    }
}

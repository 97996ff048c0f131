//! The device backends over MPI: `MpiCudaComm` (device pointers to a CUDA-aware MPI) and
//! `MpiStagedComm` (device buffers through pinned host memory), through the same suite as the host
//! backend (tests/common/suite.rs), for f32, f64, bf16 (moved, not reduced), i32, u8 and complex<f64>,
//! plus argument checks, checked mode, the staged pipeline and the CUDA-awareness verdict.
//!
//! One rank per GPU, under either MPI:
//! - a CUDA-aware MPI: `COLLECTIVES_EXPECT_CUDA_AWARE=1 cuda_mpirun -n 2 .../cuda_mpi_collectives-*`
//!   runs both suites;
//! - an MPI that is not: `COLLECTIVES_EXPECT_CUDA_AWARE=0 mpirun -n 2 .../cuda_mpi_collectives-*`
//!   checks that `MpiCudaComm` is refused with the not-CUDA-aware error naming the evidence, and runs
//!   the staged suite.
//!
//! With `COLLECTIVES_EXPECT_CUDA_AWARE` set, detection must agree with it (a CUDA-aware MPI that is not
//! detected is a failure, not a skip); unset, the `MpiCudaComm` cases follow detection. Without a CUDA
//! driver or GPU it reports that it was skipped and passes nothing.

#![allow(clippy::useless_vec)] // buffers are vectors, as in the codes that use the library

mod common;
#[path = "common/halo.rs"]
mod halo_check;

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::Duration;

use collectives::backend::mpi_cuda::{cuda_unavailable, IpcBuffer};
use collectives::cuda_aware::{self, CudaAwareness};
use collectives::cudarc::driver::CudaSlice;
use collectives::halo::{HaloSpec, HaloTransport, Neighbours};
use collectives::{
    device, scope, Checked, Communicator, DeviceBuffer, DeviceBufferMut, DeviceCommunicator, Error,
    MpiCudaComm, MpiStagedComm, ReduceOp,
};
use common::suite::{self, Backend, Val};
use common::{case, catalog, Case, T};
use half::bf16;
use num_complex::Complex;

/// `COLLECTIVES_EXPECT_CUDA_AWARE`: `Some(true)` / `Some(false)` when the run says what the MPI is.
fn expected_awareness() -> Option<bool> {
    match std::env::var("COLLECTIVES_EXPECT_CUDA_AWARE").ok()?.trim() {
        "1" | "yes" | "true" => Some(true),
        "0" | "no" | "false" => Some(false),
        _ => None,
    }
}

impl Backend for MpiCudaComm {
    type Owned<V: Val> = CudaSlice<V>;
    fn r<V: Val>(o: &CudaSlice<V>) -> &dyn DeviceBuffer<V> {
        o
    }
    fn w<V: Val>(o: &mut CudaSlice<V>) -> &mut dyn DeviceBufferMut<V> {
        o
    }
    fn up<V: Val>(&self, host: &[V]) -> CudaSlice<V> {
        device::upload(self.stream(), host).expect("device memory")
    }
    fn down<V: Val>(&self, buf: &dyn DeviceBuffer<V>) -> Vec<V> {
        self.synchronize().expect("the stream completes");
        device::download(self.stream(), buf).expect("a device-to-host copy")
    }
    fn fill<V: Val>(&self, buf: &mut (dyn DeviceBufferMut<V> + '_), host: &[V]) {
        device::copy_to_device(self.stream(), host, buf).expect("a host-to-device copy");
    }
    fn zeros<V: Val>(&self, len: usize) -> CudaSlice<V> {
        device::alloc_zeros(self.stream(), len).expect("device memory")
    }
    fn tag_ub(&self) -> i32 {
        self.mpi().tag_ub()
    }
    fn with_deadline(&self, world: &collectives::MpiComm, after: Duration) -> Result<Self, Error> {
        MpiCudaComm::from_mpi(&world.dup()?.with_timeout(Some(after)), None)
    }
    fn on_other_device<V: Val>(&self, len: usize) -> Option<CudaSlice<V>> {
        suite::other_device_zeros(self.context().ordinal(), len)
    }
}

impl Backend for MpiStagedComm {
    type Owned<V: Val> = CudaSlice<V>;
    fn r<V: Val>(o: &CudaSlice<V>) -> &dyn DeviceBuffer<V> {
        o
    }
    fn w<V: Val>(o: &mut CudaSlice<V>) -> &mut dyn DeviceBufferMut<V> {
        o
    }
    fn up<V: Val>(&self, host: &[V]) -> CudaSlice<V> {
        device::upload(self.stream(), host).expect("device memory")
    }
    fn down<V: Val>(&self, buf: &dyn DeviceBuffer<V>) -> Vec<V> {
        self.synchronize().expect("the stream completes");
        device::download(self.stream(), buf).expect("a device-to-host copy")
    }
    fn fill<V: Val>(&self, buf: &mut (dyn DeviceBufferMut<V> + '_), host: &[V]) {
        device::copy_to_device(self.stream(), host, buf).expect("a host-to-device copy");
    }
    fn zeros<V: Val>(&self, len: usize) -> CudaSlice<V> {
        device::alloc_zeros(self.stream(), len).expect("device memory")
    }
    fn tag_ub(&self) -> i32 {
        self.mpi().tag_ub()
    }
    fn with_deadline(&self, world: &collectives::MpiComm, after: Duration) -> Result<Self, Error> {
        MpiStagedComm::from_mpi(&world.dup()?.with_timeout(Some(after)), None)
    }
    fn on_other_device<V: Val>(&self, len: usize) -> Option<CudaSlice<V>> {
        suite::other_device_zeros(self.context().ordinal(), len)
    }
}

suite::checked_backend!(MpiCudaComm);
suite::checked_backend!(MpiStagedComm);

thread_local! {
    /// One communicator of each backend for the whole run (made collectively by the first test that
    /// needs it, on every rank).
    static CUDA: OnceCell<MpiCudaComm> = const { OnceCell::new() };
    /// One that hands every call to the MPI's device path (reductions and pool memory included),
    /// so both paths of the backend run the whole suite.
    static CUDA_DEVICE: OnceCell<MpiCudaComm> = const { OnceCell::new() };
    static STAGED: OnceCell<MpiStagedComm> = const { OnceCell::new() };
}

fn aware() -> bool {
    cuda_aware::detect().is_ok_and(|d| d.awareness.is_yes())
}

fn with_cuda(t: &T, body: impl FnOnce(&MpiCudaComm)) {
    if expected_awareness().is_none() && !aware() {
        if t.rank() == 0 {
            println!("  (not run: the MPI is not CUDA-aware)");
        }
        return;
    }
    CUDA.with(|cell| {
        if cell.get().is_none() {
            match MpiCudaComm::from_mpi(t.comm, None) {
                Ok(c) => {
                    let _ = cell.set(c.with_checked(false));
                }
                Err(e) => return t.fail(format!("MpiCudaComm::from_mpi: {e}")),
            }
        }
        if let Some(c) = cell.get() {
            body(c)
        }
    })
}

/// An `MpiCudaComm` with every call on the MPI's device path.
fn device_paths(t: &T) -> collectives::Result<MpiCudaComm> {
    MpiCudaComm::builder(t.comm)
        .device_reductions(true)
        .device_pool_memory(true)
        .build()
}

fn with_cuda_device(t: &T, body: impl FnOnce(&MpiCudaComm)) {
    with_cuda(t, |_| {
        CUDA_DEVICE.with(|cell| {
            if cell.get().is_none() {
                match device_paths(t) {
                    Ok(c) => {
                        let _ = cell.set(c.with_checked(false));
                    }
                    Err(e) => return t.fail(format!("MpiCudaComm with device paths: {e}")),
                }
            }
            if let Some(c) = cell.get() {
                body(c)
            }
        })
    })
}

/// The bad-input catalog's communicator with every call on the device path.
fn with_cuda_device_catalog(t: &T, checked: bool, body: &mut dyn FnMut(&MpiCudaComm)) {
    if checked {
        with_cuda(t, |_| match device_paths(t) {
            Ok(c) => body(&c.with_checked(true)),
            Err(e) => t.fail(format!("construction: {e}")),
        })
    } else {
        with_cuda_device(t, |c| body(c))
    }
}

/// The per-call record names the path each call took: a reduction and a call on pool memory
/// through host memory (with why), a call on `cuMemAlloc` memory on the device path; with the
/// device paths chosen, all three on the device path.
fn paths_in_the_record(t: &T) {
    use collectives::record;
    let run = |c: &MpiCudaComm| -> Vec<record::Entry> {
        let n = 1000;
        let (Ok(send), Ok(mut recv)) = (
            IpcBuffer::upload(c.stream(), &vec![1.0f32; n]),
            IpcBuffer::<f32>::zeros(c.stream(), n),
        ) else {
            t.fail("IpcBuffer allocation".into());
            return Vec::new();
        };
        let pooled = c.up(&vec![2.0f32; 3 * n]);
        let mut pooled_recv = c.up(&vec![0.0f32; 3 * n]);
        let (next, prev) = (
            (c.rank() + 1) % c.size(),
            (c.rank() + c.size() - 1) % c.size(),
        );
        record::set_enabled(true);
        record::reset();
        t.ok(c.all_reduce(&send, &mut recv, ReduceOp::Sum), "all_reduce");
        t.ok(c.send_recv(&send, next, &mut recv, prev, 3), "send_recv");
        t.ok(
            c.send_recv(&pooled, next, &mut pooled_recv, prev, 4),
            "send_recv of pool memory",
        );
        let entries = record::snapshot();
        record::set_enabled(false);
        entries
    };
    let path = |entries: &[record::Entry], op: &str, bytes: usize| {
        entries
            .iter()
            .find(|e| e.op == op && e.bytes == bytes)
            .map(|e| (e.path, e.staged))
    };
    with_cuda(t, |c| {
        let e = run(c);
        t.eq(
            &path(&e, "all_reduce", 4000),
            &Some(("through-host (reduction)", true)),
            "an all-reduce's path",
        );
        t.eq(
            &path(&e, "send_recv", 4000),
            &Some(("device-pointers", false)),
            "a send_recv of cuMemAlloc memory",
        );
        t.eq(
            &path(&e, "send_recv", 12000),
            &Some(("through-host (pool memory)", true)),
            "a send_recv of pool memory",
        );
    });
    with_cuda_device(t, |c| {
        let e = run(c);
        for (op, bytes) in [
            ("all_reduce", 4000),
            ("send_recv", 4000),
            ("send_recv", 12000),
        ] {
            t.eq(
                &path(&e, op, bytes),
                &Some(("device-pointers", false)),
                &format!("{op} of {bytes} bytes with the device paths chosen"),
            );
        }
    });
}

fn with_staged(t: &T, body: impl FnOnce(&MpiStagedComm)) {
    STAGED.with(|cell| {
        if cell.get().is_none() {
            match MpiStagedComm::from_mpi(t.comm, None) {
                Ok(c) => {
                    let _ = cell.set(c.with_checked(false));
                }
                Err(e) => return t.fail(format!("MpiStagedComm::from_mpi: {e}")),
            }
        }
        if let Some(c) = cell.get() {
            body(c)
        }
    })
}

/// Detection answers on every rank, the same on every rank, names its evidence, and agrees with
/// `COLLECTIVES_EXPECT_CUDA_AWARE` when that is set.
fn detection(t: &T) {
    let Some(d) = t.ok(cuda_aware::detect(), "detect") else {
        return;
    };
    let code = match &d.awareness {
        CudaAwareness::Yes { .. } => 1i32,
        CudaAwareness::No { .. } => 0,
        _ => -1,
    };
    let mut all = vec![0i32; t.size()];
    t.ok(t.comm.all_gather(&[code][..], &mut all[..]), "all_gather");
    t.check(all.iter().all(|&c| c == code), || {
        format!("ranks disagree on CUDA-awareness: {all:?}")
    });
    if t.rank() == 0 {
        println!("  CUDA-aware: {}", d.awareness);
        for line in d.facts.lines() {
            println!("    {line}");
        }
    }
    if let Some(expected) = expected_awareness() {
        t.check(d.awareness.is_yes() == expected, || {
            format!(
                "COLLECTIVES_EXPECT_CUDA_AWARE says {expected}, detection says {}",
                d.awareness
            )
        });
    }
}

/// Where the MPI is not CUDA-aware, construction is refused on every rank with the error naming the
/// evidence; where it is, construction works.
fn construction(t: &T) {
    let r = MpiCudaComm::from_mpi(t.comm, None);
    if aware() {
        t.ok(r, "MpiCudaComm::from_mpi on a CUDA-aware MPI");
        return;
    }
    let Ok(d) = cuda_aware::detect() else {
        return t.fail("detect failed".into());
    };
    let evidence = match &d.awareness {
        CudaAwareness::No { reason } => reason.to_string(),
        _ => "cannot tell".to_string(),
    };
    if let (0, Err(e)) = (t.rank(), &r) {
        println!("  refused: {e}");
    }
    t.err(r, "MpiCudaComm::from_mpi on an MPI that is not CUDA-aware", |e| {
        matches!(e, Error::Unavailable { what: "a CUDA-aware MPI", message } if message.contains(&evidence))
    });
}

/// The bad-input catalog's communicator for `MpiCudaComm`: the shared one, or a checked one of its own.
fn with_cuda_catalog(t: &T, checked: bool, body: &mut dyn FnMut(&MpiCudaComm)) {
    if checked {
        with_cuda(t, |_| match MpiCudaComm::from_mpi(t.comm, None) {
            Ok(c) => body(&c.with_checked(true)),
            Err(e) => t.fail(format!("construction: {e}")),
        })
    } else {
        with_cuda(t, |c| body(c))
    }
}

/// The bad-input catalog's communicator for `MpiStagedComm`: the shared one, or a checked one of its own.
fn with_staged_catalog(t: &T, checked: bool, body: &mut dyn FnMut(&MpiStagedComm)) {
    if checked {
        with_staged(t, |_| match MpiStagedComm::from_mpi(t.comm, None) {
            Ok(c) => body(&c.with_checked(true)),
            Err(e) => t.fail(format!("construction: {e}")),
        })
    } else {
        with_staged(t, |c| body(c))
    }
}

/// `Checked` around an `MpiCudaComm` of its own whose flag is off: the wrapper alone agrees.
fn with_wrapped_cuda(t: &T, body: impl FnOnce(&Checked<MpiCudaComm>)) {
    with_cuda(t, |_| match MpiCudaComm::from_mpi(t.comm, None) {
        Ok(c) => body(&Checked::new(c.with_checked(false))),
        Err(e) => t.fail(format!("construction: {e}")),
    })
}

/// `Checked` around an `MpiStagedComm` of its own whose flag is off.
fn with_wrapped_staged(t: &T, body: impl FnOnce(&Checked<MpiStagedComm>)) {
    match MpiStagedComm::from_mpi(t.comm, None) {
        Ok(c) => body(&Checked::new(c.with_checked(false))),
        Err(e) => t.fail(format!("construction: {e}")),
    }
}

/// The bad-input catalog's communicator for `Checked<MpiCudaComm>`.
fn with_wrapped_cuda_catalog(t: &T, _checked: bool, body: &mut dyn FnMut(&Checked<MpiCudaComm>)) {
    with_wrapped_cuda(t, |c| body(c))
}

/// The bad-input catalog's communicator for `Checked<MpiStagedComm>`.
fn with_wrapped_staged_catalog(
    t: &T,
    _checked: bool,
    body: &mut dyn FnMut(&Checked<MpiStagedComm>),
) {
    with_wrapped_staged(t, |c| body(c))
}

/// The suite's calls through the wrapper: agreement must not refuse them or change the answers.
fn wrapped_suite<C: Backend>(t: &T, c: &C) {
    t.check(c.checked(), || "Checked says it is checked".into());
    suite::reductions::<f64, C>(t, c);
    suite::movement::<Complex<f64>, C>(t, c);
    suite::uneven::<f32, C>(t, c);
    suite::barrier_split_dup(t, c);
    suite::non_blocking_all::<f64, C>(t, c);
    suite::persistent::<f64, C>(t, c);
}

/// A non-blocking average: the division happens at completion (on the host for both backends).
fn non_blocking_avg<C: Backend>(t: &T, c: &C) {
    let size = c.size();
    let send = c.up(&[c.rank() as f64; 5]);
    let mut recv = c.up(&[0.0f64; 5]);
    let r = scope(|s| {
        c.i_all_reduce::<f64>(s, C::r(&send), C::w(&mut recv), ReduceOp::Avg)?
            .wait()
    });
    t.ok(r.and_then(|x| x), "i_all_reduce avg");
    let mean = (0..size).map(|r| r as f64).sum::<f64>() / size as f64;
    t.eq(
        &c.down::<f64>(C::r(&recv)),
        &vec![mean; 5],
        "i_all_reduce avg",
    );
    let mut buf = c.up(&[c.rank() as f64; 3]);
    t.ok(
        c.all_reduce_in_place::<f64>(C::w(&mut buf), ReduceOp::Avg),
        "all_reduce_in_place avg",
    );
    t.eq(
        &c.down::<f64>(C::r(&buf)),
        &vec![mean; 3],
        "all_reduce_in_place avg",
    );
}

/// A buffer written on another stream of the device is read after that write (cudarc's stream
/// tracking), by either backend.
fn foreign_stream<C: Backend<Memory = collectives::Device>>(
    t: &T,
    c: &C,
    stream: &Arc<collectives::cudarc::driver::CudaStream>,
) {
    let Ok(other) = stream.context().new_stream() else {
        return t.fail("a second stream".into());
    };
    let n = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let Ok(send) = device::upload(&other, &host) else {
        return t.fail("upload on the second stream".into());
    };
    let mut recv = c.up(&vec![0.0f32; n]);
    t.ok(
        c.all_reduce::<f32>(&send, C::w(&mut recv), ReduceOp::Sum),
        "all_reduce",
    );
    let expected: Vec<f32> = host.iter().map(|x| x * c.size() as f32).collect();
    t.check(c.down::<f32>(C::r(&recv)) == expected, || {
        "all_reduce of a buffer written on another stream".into()
    });
}

/// `cuMemAlloc` buffers (`IpcBuffer`, which a CUDA-aware Open MPI maps into its peer with CUDA IPC):
/// an 8 MiB all-reduce and a ring of 8 MiB messages.
macro_rules! ipc_buffers {
    ($name:ident, $comm:ty) => {
        fn $name(t: &T, c: &$comm) {
            let (rank, size) = (c.rank(), c.size());
            let n = 2 << 20;
            let host: Vec<f32> = (0..n).map(|i| ((i + rank) % 5) as f32).collect();
            let (Ok(send), Ok(mut recv)) = (
                IpcBuffer::upload(c.stream(), &host),
                IpcBuffer::<f32>::zeros(c.stream(), n),
            ) else {
                return t.fail("IpcBuffer allocation".into());
            };
            t.ok(c.all_reduce(&send, &mut recv, ReduceOp::Sum), "all_reduce");
            let expected: Vec<f32> = (0..n)
                .map(|i| (0..size).map(|r| ((i + r) % 5) as f32).sum())
                .collect();
            t.check(c.down::<f32>(&recv) == expected, || {
                "all_reduce of IpcBuffers".into()
            });
            let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
            t.ok(c.send_recv(&send, next, &mut recv, prev, 9), "send_recv");
            let from_prev: Vec<f32> = (0..n).map(|i| ((i + prev) % 5) as f32).collect();
            t.check(c.down::<f32>(&recv) == from_prev, || {
                "send_recv of IpcBuffers".into()
            });
        }
    };
}
ipc_buffers!(ipc_buffers_cuda, MpiCudaComm);
ipc_buffers!(ipc_buffers_staged, MpiStagedComm);

/// The grouped exchange on device memory (`DeviceCommunicator::exchange_bytes`), on cudarc's
/// pool memory and on `cuMemAlloc` memory (`IpcBuffer`, which a CUDA-aware MPI takes directly), in
/// two steps into one receive buffer as a pipelined halo exchange makes them: first one part per
/// peer (itself included: a device copy), then two parts in a row to the right neighbour; the
/// first step's bytes must survive the second. Checked against the bytes computed from the ranks.
fn device_grouped_exchange<C: DeviceCommunicator>(t: &T, c: &C) {
    use collectives::cudarc::driver::DevicePtr;
    let (rank, size) = (c.rank(), c.size());
    let l = suite::exchange_layout(rank, size);
    let steps = [(0..size, 0..size), (size..size + 2, size..size + 2)];
    let run = |name: &str, send: u64, recv: u64| {
        for (s, r) in steps.clone() {
            // SAFETY: every part lies inside its buffer (the layout's bytes, uploaded whole, and
            // a receive buffer of its length) and names a rank; both buffers live on this
            // communicator's device until the end of the test; every rank makes the same steps,
            // each send meeting the receive of the same length on its peer.
            let done = unsafe {
                c.exchange_bytes(
                    "grouped_exchange",
                    c.stream(),
                    send,
                    &l.sends[s],
                    recv,
                    &l.recvs[r],
                )
            };
            t.ok(done, &format!("{name}: exchange_bytes"));
        }
        t.ok(c.synchronize(), name);
    };
    // cudarc's pool memory.
    if let (Some(send), Some(recv)) = (
        t.ok(device::upload(c.stream(), &l.send), "upload"),
        t.ok(device::alloc_zeros::<u8>(c.stream(), l.want.len()), "zeros"),
    ) {
        t.ok(c.synchronize(), "uploaded");
        run(
            "pool memory",
            send.device_ptr(c.stream()).0,
            recv.device_ptr(c.stream()).0,
        );
        let got = t.ok(device::download(c.stream(), &recv), "download");
        t.check(got.as_ref() == Some(&l.want), || {
            format!("pool memory: received {got:?}, expected {:?}", l.want)
        });
    }
    // cuMemAlloc memory.
    if let (Some(send), Some(recv)) = (
        t.ok(IpcBuffer::upload(c.stream(), &l.send), "IpcBuffer::upload"),
        t.ok(
            IpcBuffer::<u8>::zeros(c.stream(), l.want.len()),
            "IpcBuffer::zeros",
        ),
    ) {
        t.ok(c.synchronize(), "uploaded");
        run(
            "cuMemAlloc memory",
            send.device_ptr(c.stream()).0,
            recv.device_ptr(c.stream()).0,
        );
        let got = t.ok(device::download(c.stream(), &recv), "download");
        t.check(got.as_ref() == Some(&l.want), || {
            format!("cuMemAlloc memory: received {got:?}, expected {:?}", l.want)
        });
    }
}

/// The halo exchange (`collectives::halo`) over this backend, against the global reference:
/// through the backend's grouped sends and receives and with CUDA IPC between ranks of a node
/// where the GPUs allow it, 6 and 26 neighbours, radius 1 and 3, 1 and 3 chunks, a non-cubic
/// block, exchanges repeated, and the timed exchange.
fn halo_exchange<C: DeviceCommunicator>(t: &T, c: &C) {
    for transport in [HaloTransport::Comm, HaloTransport::Auto] {
        for neighbours in [Neighbours::Faces, Neighbours::All] {
            for (radius, chunks) in [(1, 1), (3, 3)] {
                let spec = HaloSpec::cube(6, radius, 2, neighbours).with_chunks(chunks);
                halo_check::exchange_with(t, c, spec, transport, 2);
            }
        }
        let odd = HaloSpec::new([7, 5, 3], 2, 3, Neighbours::All);
        halo_check::exchange_with(t, c, odd, transport, 1);
        halo_check::timed_exchange(t, c, transport);
    }
}

/// Staged all-reduces in many chunks (the last one short), out of place and in place, sum and avg.
fn staged_pipeline(t: &T) {
    let Ok(c) = MpiStagedComm::from_mpi(t.comm, None) else {
        return t.fail("MpiStagedComm::from_mpi".into());
    };
    let c = c.with_chunk_bytes(4096).with_checked(false);
    t.eq(&c.chunk_bytes(), &4096, "chunk size");
    let (rank, size) = (c.rank(), c.size());
    let n = 10_000 + 3; // 512 f64 per chunk: 20 chunks, the last of 275
    let host: Vec<f64> = (0..n).map(|i| ((i + rank) % 13) as f64).collect();
    let sum: Vec<f64> = (0..n)
        .map(|i| (0..size).map(|r| ((i + r) % 13) as f64).sum())
        .collect();
    let send = c.up(&host);
    let mut recv = c.up(&vec![0.0f64; n]);
    t.ok(
        c.all_reduce(&send, &mut recv, ReduceOp::Sum),
        "pipelined all_reduce",
    );
    t.check(c.down::<f64>(&recv) == sum, || {
        "pipelined all_reduce sum".into()
    });
    let mut buf = c.up(&host);
    t.ok(
        c.all_reduce_in_place(&mut buf, ReduceOp::Avg),
        "pipelined all_reduce_in_place",
    );
    let avg: Vec<f64> = sum.iter().map(|s| s / size as f64).collect();
    let got = c.down::<f64>(&buf);
    t.check(got.iter().zip(&avg).all(|(a, b)| a.close(*b)), || {
        "pipelined all_reduce_in_place avg".into()
    });
    // Complex products through the pipeline: MPI's complex multiplication, chunk by chunk.
    let z: Vec<Complex<f64>> = (0..3000)
        .map(|i| Complex::new(0.0, if (i + rank) % 2 == 0 { 1.0 } else { -1.0 }))
        .collect();
    let mut zb = c.up(&z);
    t.ok(
        c.all_reduce_in_place(&mut zb, ReduceOp::Prod),
        "pipelined complex prod",
    );
    let expected: Vec<Complex<f64>> = (0..3000)
        .map(|i| {
            (0..size).fold(Complex::new(1.0, 0.0), |acc, r| {
                acc * Complex::new(0.0, if (i + r) % 2 == 0 { 1.0 } else { -1.0 })
            })
        })
        .collect();
    t.eq(
        &c.down::<Complex<f64>>(&zb),
        &expected,
        "pipelined complex prod",
    );
    t.check(c.pooled_bytes() > 0, || {
        "the pool keeps pinned buffers".into()
    });
}

macro_rules! suite_cases {
    ($prefix:literal, $with:ident, $comm:ty, $v:ty, $name:literal) => {
        [
            case(concat!($prefix, "_reductions_", $name), |t| {
                $with(t, |c| suite::reductions::<$v, $comm>(t, c))
            }),
            case(concat!($prefix, "_movement_", $name), |t| {
                $with(t, |c| suite::movement::<$v, $comm>(t, c))
            }),
            case(concat!($prefix, "_uneven_", $name), |t| {
                $with(t, |c| suite::uneven::<$v, $comm>(t, c))
            }),
            case(concat!($prefix, "_point_to_point_", $name), |t| {
                $with(t, |c| suite::point_to_point::<$v, $comm>(t, c))
            }),
            case(concat!($prefix, "_non_blocking_", $name), |t| {
                $with(t, |c| suite::non_blocking::<$v, $comm>(t, c))
            }),
            case(concat!($prefix, "_persistent_", $name), |t| {
                $with(t, |c| suite::persistent::<$v, $comm>(t, c))
            }),
        ]
    };
}

macro_rules! backend_cases {
    ($prefix:literal, $with:ident, $comm:ty, $ipc:ident, $catalog:ident) => {{
        let mut v: Vec<Case> = Vec::new();
        v.extend(suite_cases!($prefix, $with, $comm, f32, "f32"));
        v.extend(suite_cases!($prefix, $with, $comm, f64, "f64"));
        v.extend(suite_cases!($prefix, $with, $comm, bf16, "bf16"));
        v.extend(suite_cases!($prefix, $with, $comm, i32, "i32"));
        v.extend(suite_cases!($prefix, $with, $comm, u8, "u8"));
        v.extend(suite_cases!(
            $prefix,
            $with,
            $comm,
            Complex<f64>,
            "complex_f64"
        ));
        v.extend([
            case(concat!($prefix, "_barrier_split_dup"), |t| {
                $with(t, |c| suite::barrier_split_dup(t, c))
            }),
            case(concat!($prefix, "_non_blocking_avg"), |t| {
                $with(t, |c| non_blocking_avg(t, c))
            }),
            case(concat!($prefix, "_foreign_stream"), |t| {
                $with(t, |c| foreign_stream(t, c, c.stream()))
            }),
            case(concat!($prefix, "_views"), |t| {
                $with(t, |c| suite::views(t, c))
            }),
            case(concat!($prefix, "_ipc_buffers"), |t| {
                $with(t, |c| $ipc(t, c))
            }),
            case(concat!($prefix, "_grouped_exchange"), |t| {
                $with(t, |c| device_grouped_exchange(t, c))
            }),
            case(concat!($prefix, "_halo_exchange"), |t| {
                $with(t, |c| halo_exchange(t, c))
            }),
        ]);
        v.extend(catalog::cases($prefix, $catalog));
        if catalog::visible_gpus() >= 2 {
            v.extend(catalog::device_cases($prefix, $catalog));
        }
        v
    }};
}

fn main() {
    if let Some(why) = cuda_unavailable() {
        println!("cuda_mpi_collectives: needs a CUDA driver and a GPU ({why}); skipped");
        println!("mpi-tests: 0 passed, 0 failed (no GPU)");
        return;
    }
    let mut cases: Vec<Case> = vec![
        case("cuda_aware_detection", detection),
        case("mpi_cuda_construction", construction),
    ];
    // With the expectation given, MpiCudaComm runs only where the MPI is CUDA-aware (and must be
    // constructed there); without it, the cases follow detection at run time.
    if expected_awareness() != Some(false) {
        cases.extend(backend_cases!(
            "mpi_cuda",
            with_cuda,
            MpiCudaComm,
            ipc_buffers_cuda,
            with_cuda_catalog
        ));
        cases.extend(backend_cases!(
            "mpi_cuda_device",
            with_cuda_device,
            MpiCudaComm,
            ipc_buffers_cuda,
            with_cuda_device_catalog
        ));
        cases.push(case("mpi_cuda_paths_in_the_record", paths_in_the_record));
        cases.push(case("mpi_cuda_wrapped_suite", |t| {
            with_wrapped_cuda(t, |c| wrapped_suite(t, c))
        }));
        cases.extend(catalog::agreed_cases(
            "mpi_cuda_wrapped",
            with_wrapped_cuda_catalog,
        ));
    }
    cases.extend(backend_cases!(
        "mpi_staged",
        with_staged,
        MpiStagedComm,
        ipc_buffers_staged,
        with_staged_catalog
    ));
    cases.push(case("mpi_staged_wrapped_suite", |t| {
        with_wrapped_staged(t, |c| wrapped_suite(t, c))
    }));
    cases.extend(catalog::agreed_cases(
        "mpi_staged_wrapped",
        with_wrapped_staged_catalog,
    ));
    cases.push(case("mpi_staged_pipeline", staged_pipeline));
    common::run(&cases)
}

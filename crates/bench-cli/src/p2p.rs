//! `collbench p2p`: point-to-point latency and bandwidth between ranks 0 and 1, as the OSU
//! micro-benchmarks measure them, on every backend (host memory for `mpi`, device memory for the
//! others), with the raw MPI baseline on the same device buffers for `cuda-mpi`.
//!
//! - **latency** (`osu_latency`): rank 0 sends a message of the size to rank 1 and receives it back,
//!   `-n` times after `-w` warm-up round trips; the latency is half the average round-trip time, in
//!   microseconds.
//! - **bandwidth** (`osu_bw`): rank 0 starts a window of `--window` (64) non-blocking sends of the
//!   same buffer, rank 1 a window of as many non-blocking receives into distinct buffers; both wait for
//!   the window, then rank 1 sends a one-byte acknowledgement; `-n` windows after `-w` warm-up ones.
//!   Bandwidth = size x window x n / time on rank 0, in MB/s (1 MB = 10^6 bytes).
//! - **timing**: wall clock on the host; device backends drain their stream before the clock stops
//!   (NCCL's calls are stream-ordered and return at once; the MPI backends complete before returning).
//! - **raw** (`--baseline raw`, `cuda-mpi` only): the same loops through `MPI_Send`/`MPI_Recv` and
//!   `MPI_Isend`/`MPI_Irecv`/`MPI_Waitall` on the device pointers of the same buffers, taken once.
//! - **#wrong** (`-c 1`): after timing, one round trip and one window with patterned bytes; rank 1
//!   counts the bytes that differ.
//! - Iterations follow OSU's defaults unless `-n`/`-w` are given: latency 10000 (1000 above 8 KiB)
//!   after 100 (10), bandwidth 100 (20) windows after 10 (2).

use std::borrow::{Borrow, BorrowMut};
use std::ffi::c_void;
use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use collectives_core::backend::mpi_cuda::IpcBuffer;
use collectives_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use collectives_core::{
    device, scope, Buffer, Communicator, DeviceCommunicator, MpiComm, MpiCudaComm, MpiStagedComm,
    NcclComm, ReduceOp,
};
use mpi::ffi;

use crate::backend::{self, Backend, BackendChoice, Baseline};
use crate::osu::{self, P2pTest};
use crate::record::{Document, Machine, Record, SCHEMA};
use crate::report::{fmt_time_us, rounded, Format};
use crate::sizes::{self, Step};

/// OSU's threshold between small and large messages, in bytes.
pub const LARGE: usize = 8192;

/// Which measurements to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// `osu_latency`.
    Latency,
    /// `osu_bw`.
    Bw,
    /// Both.
    Both,
}

/// `collbench p2p` flags.
#[derive(Debug, Args)]
pub struct P2pArgs {
    /// Smallest message in bytes (suffixes K, M, G are powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "1", value_parser = sizes::parse_size)]
    pub min_bytes: usize,
    /// Largest message in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "4M", value_parser = sizes::parse_size)]
    pub max_bytes: usize,
    /// Multiply the size by this factor from one row to the next.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: usize,
    /// Timed iterations (round trips, or windows) per size [default: OSU's, see the module docs].
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: Option<u32>,
    /// Warm-up iterations per size [default: OSU's].
    #[arg(short = 'w', long = "warmup_iters", visible_alias = "warmup-iters")]
    pub warmup_iters: Option<u32>,
    /// Messages in flight per window of the bandwidth test.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub window: u32,
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Test::Both)]
    pub test: Test,
    /// Check the bytes received (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Backend: mpi, mpi-staged, cuda-mpi, nccl, or all (every backend available here).
    #[arg(long, default_value = "mpi", value_parser = |s: &str| s.parse::<BackendChoice>())]
    pub backend: BackendChoice,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// OSU micro-benchmarks' conventions: their flags (-m MIN:MAX, -i, -x, -c, -d cuda) and the
    /// tables of osu_latency and osu_bw.
    #[arg(long)]
    pub osu: bool,
    /// Write the output to this file instead of standard output.
    #[arg(long, value_name = "PATH")]
    pub output: Option<std::path::PathBuf>,
    /// Also time the raw MPI loops on the same device buffers (cuda-mpi).
    #[arg(long, value_enum, hide = true)]
    pub baseline: Option<Baseline>,
}

/// Iterations and warm-up iterations of one test at one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iters {
    /// Timed.
    pub iters: usize,
    /// Warm-up.
    pub warmup: usize,
}

impl P2pArgs {
    /// The flags of `collbench p2p FLAGS`, parsed as the command line would be.
    ///
    /// # Errors
    /// clap's message for bad flags.
    pub fn from_flags(flags: &[&str]) -> Result<P2pArgs, String> {
        /// `collbench p2p` alone, so that parsing its flags needs no other command.
        #[derive(clap::Parser)]
        #[command(name = "collbench p2p")]
        struct P2pCommand {
            #[command(flatten)]
            args: P2pArgs,
        }
        use clap::Parser;
        let argv = std::iter::once("collbench p2p").chain(flags.iter().copied());
        P2pCommand::try_parse_from(argv)
            .map(|c| c.args)
            .map_err(|e| e.to_string())
    }

    /// The message sizes.
    ///
    /// # Errors
    /// Bad sizes or factor.
    pub fn sizes(&self) -> Result<Vec<usize>, String> {
        sizes::sequence(
            self.min_bytes,
            self.max_bytes,
            Step::Factor(self.step_factor),
        )
    }

    /// The iterations of the latency test at `size` (OSU: 10000 after 100, 1000 after 10 above 8 KiB).
    pub fn latency_iters(&self, size: usize) -> Iters {
        let large = size > LARGE;
        Iters {
            iters: self
                .iters
                .map_or(if large { 1000 } else { 10_000 }, |n| n as usize),
            warmup: self
                .warmup_iters
                .map_or(if large { 10 } else { 100 }, |n| n as usize),
        }
    }

    /// The windows of the bandwidth test at `size` (OSU: 100 after 10, 20 after 2 above 8 KiB).
    pub fn bw_iters(&self, size: usize) -> Iters {
        let large = size > LARGE;
        Iters {
            iters: self
                .iters
                .map_or(if large { 20 } else { 100 }, |n| n as usize),
            warmup: self
                .warmup_iters
                .map_or(if large { 2 } else { 10 }, |n| n as usize),
        }
    }
}

/// One size's results on one backend (rank 0's measurements).
#[derive(Clone, Debug, PartialEq)]
pub struct P2pRow {
    /// Backend name.
    pub backend: &'static str,
    /// Message size in bytes.
    pub size: usize,
    /// Half the round-trip time, seconds.
    pub latency: Option<f64>,
    /// Bytes per second.
    pub bandwidth: Option<f64>,
    /// The raw loop's latency, seconds.
    pub raw_latency: Option<f64>,
    /// The raw loop's bandwidth, bytes per second.
    pub raw_bandwidth: Option<f64>,
    /// Bytes received wrong (rank 1's count), with `-c 1`.
    pub wrong: Option<u64>,
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

fn mbs(bytes_per_s: f64) -> String {
    format!("{:.2}", bytes_per_s / 1e6)
}

fn us(seconds: f64) -> String {
    fmt_time_us(seconds * 1e6)
}

impl P2pRow {
    /// Table cells: size, latency, bandwidth, #wrong, and with `raw` the raw latency, raw bandwidth and
    /// the ratios ours/raw (latency) and raw/ours... as ours over raw for bandwidth.
    fn cells(&self, raw: bool) -> Vec<String> {
        let mut v = vec![
            self.size.to_string(),
            opt(self.latency, us),
            opt(self.bandwidth, mbs),
            self.wrong
                .map_or_else(|| "N/A".to_string(), |w| w.to_string()),
        ];
        if raw {
            v.push(opt(self.raw_latency, us));
            v.push(opt(self.raw_bandwidth, mbs));
            v.push(match (self.bandwidth, self.raw_bandwidth) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
                _ => "-".to_string(),
            });
        }
        v
    }

    /// The records of this row: the latency and the bandwidth (where measured), then the raw
    /// loops' (variant `raw`). A latency's time is half the round trip; a bandwidth's time is the
    /// time per message (`size / bandwidth`); `algbw` and `busbw` are `size / time`.
    pub fn records(&self, nranks: usize, machine: &Machine, iters: &P2pArgs) -> Vec<Record> {
        let record = |collective: &str, variant: &str, seconds: f64, n: usize| Record {
            host: machine.host.clone(),
            cores: machine.cores,
            mpi_library: machine.mpi_library.clone(),
            nccl_version: machine.nccl_version.clone(),
            benchmark: "p2p".into(),
            collective: collective.into(),
            backend: self.backend.into(),
            variant: variant.into(),
            placement: "-".into(),
            dtype: "byte".into(),
            op: None,
            root: None,
            ranks: nranks,
            size_bytes: self.size as u64,
            count: self.size as u64,
            time_us: rounded(seconds * 1e6, 3),
            time_min_us: rounded(seconds * 1e6, 3),
            time_max_us: rounded(seconds * 1e6, 3),
            iterations: n as u64,
            algbw_gbps: Some(rounded(crate::timing::algbw(self.size, seconds), 4)),
            busbw_gbps: Some(rounded(crate::timing::algbw(self.size, seconds), 4)),
            wrong: self.wrong,
            iter_min_us: None,
            iter_p50_us: None,
            iter_p99_us: None,
            messages_per_s: None,
            overlap: Default::default(),
        };
        let per_message = |bw: f64| if bw > 0.0 { self.size as f64 / bw } else { 0.0 };
        let (lat_n, bw_n) = (
            iters.latency_iters(self.size).iters,
            iters.bw_iters(self.size).iters * iters.window as usize,
        );
        let mut v = Vec::new();
        for (variant, latency, bandwidth) in [
            ("library", self.latency, self.bandwidth),
            ("raw", self.raw_latency, self.raw_bandwidth),
        ] {
            if let Some(t) = latency {
                v.push(record("latency", variant, t, lat_n));
            }
            if let Some(bw) = bandwidth {
                v.push(record("bw", variant, per_message(bw), bw_n));
            }
        }
        v
    }
}

const WIDTHS: [usize; 7] = [12, 12, 12, 7, 12, 12, 9];

fn line(first: char, cells: &[String]) -> String {
    let mut s = String::new();
    s.push(first);
    for (c, w) in cells.iter().zip(WIDTHS) {
        s.push(' ');
        s.push_str(&format!("{c:>w$}"));
    }
    s.trim_end().to_string()
}

/// The table's column names and units.
pub fn table_header(raw: bool) -> Vec<String> {
    let mut names = vec!["size", "latency", "bandwidth", "#wrong"];
    let mut units = vec!["(B)", "(us)", "(MB/s)", ""];
    if raw {
        names.extend(["raw lat", "raw bw", "bw ratio"]);
        units.extend(["(us)", "(MB/s)", "ours/raw"]);
    }
    let s = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    vec![line('#', &s(names)), line('#', &s(units))]
}

/// `row` as a table line.
pub fn table_row(row: &P2pRow, raw: bool) -> String {
    line(' ', &row.cells(raw))
}

/// The notes printed above the table.
pub const HOW: [&str; 3] = [
    "latency: osu_latency: half the average round-trip time of a ping-pong between ranks 0 and 1 (us)",
    "bandwidth: osu_bw: windows of non-blocking sends of one buffer into as many distinct receive buffers, each window acknowledged by a 1-byte message; size x window x iterations / time on rank 0 (MB/s, 1 MB = 1e6 bytes)",
    "timing: wall clock on the host; device backends drain their stream before the clock stops",
];

/// A backend as the benchmark drives it: buffers of bytes in its own memory.
pub trait P2pBackend: Communicator {
    /// An owned buffer.
    type Owned: BorrowMut<Self::Buf<u8>>;
    /// A buffer holding `bytes`.
    ///
    /// # Errors
    /// Allocation and copy errors.
    fn upload(&self, bytes: &[u8]) -> anyhow::Result<Self::Owned>;
    /// The bytes of `buf`, once the work before it is done.
    ///
    /// # Errors
    /// Copy errors.
    fn read(&self, buf: &Self::Buf<u8>) -> anyhow::Result<Vec<u8>>;
    /// Wait for the work enqueued so far (device backends).
    ///
    /// # Errors
    /// The backend's errors.
    fn drain(&self) -> anyhow::Result<()>;
    /// The device buffer behind `buf`, for the raw baseline on the same memory (device backends).
    fn device(buf: &mut Self::Owned) -> Option<&mut CudaSlice<u8>> {
        let _ = buf;
        None
    }
}

impl P2pBackend for MpiComm {
    type Owned = Vec<u8>;
    fn upload(&self, bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
        Ok(bytes.to_vec())
    }
    fn read(&self, buf: &[u8]) -> anyhow::Result<Vec<u8>> {
        Ok(buf.to_vec())
    }
    fn drain(&self) -> anyhow::Result<()> {
        Ok(())
    }
}

// The MPI device backends use `cuMemAlloc` memory (`IpcBuffer`), which a CUDA-aware Open MPI maps
// into the peer process (CUDA IPC); NCCL uses cudarc's own allocations.
macro_rules! device_backend {
    ($t:ty, $sync:expr, $owned:ty, $upload:expr) => {
        impl P2pBackend for $t {
            type Owned = $owned;
            fn upload(&self, bytes: &[u8]) -> anyhow::Result<$owned> {
                let f: fn(&std::sync::Arc<CudaStream>, &[u8]) -> collectives_core::Result<$owned> =
                    $upload;
                Ok(f(self.stream(), bytes)?)
            }
            fn read(&self, buf: &CudaSlice<u8>) -> anyhow::Result<Vec<u8>> {
                self.drain()?;
                Ok(device::download(self.stream(), buf)?)
            }
            fn drain(&self) -> anyhow::Result<()> {
                let f: fn(&$t) -> collectives_core::Result<()> = $sync;
                Ok(f(self)?)
            }
            fn device(buf: &mut $owned) -> Option<&mut CudaSlice<u8>> {
                Some(buf.borrow_mut())
            }
        }
    };
}
device_backend!(
    MpiCudaComm,
    MpiCudaComm::synchronize,
    IpcBuffer<u8>,
    IpcBuffer::upload
);
device_backend!(
    MpiStagedComm,
    MpiStagedComm::synchronize,
    IpcBuffer<u8>,
    IpcBuffer::upload
);
device_backend!(
    NcclComm,
    NcclComm::synchronize,
    CudaSlice<u8>,
    device::upload
);

const TAG: i32 = 1;
const ACK: i32 = 2;

/// The patterned bytes of the check.
fn pattern(size: usize, salt: usize) -> Vec<u8> {
    (0..size).map(|i| ((i * 7 + salt) % 251) as u8).collect()
}

fn wrong_bytes(got: &[u8], want: &[u8]) -> u64 {
    got.iter().zip(want).filter(|(a, b)| a != b).count() as u64
        + got.len().abs_diff(want.len()) as u64
}

/// One size's buffers on ranks 0 and 1, shared by the library's loops and the raw ones.
struct Buffers<O> {
    /// The ping-pong buffer.
    ping: O,
    /// Rank 0's bandwidth send buffer.
    send: O,
    /// Rank 1's `window` receive buffers (receives in flight may not share a buffer).
    recv: Vec<O>,
    /// The one-byte acknowledgement.
    ack: O,
}

impl<O> Buffers<O> {
    fn new<C: P2pBackend<Owned = O>>(c: &C, size: usize, win: usize) -> anyhow::Result<Self> {
        let zeros = vec![0u8; size];
        let recv = if c.rank() == 1 {
            (0..win)
                .map(|_| c.upload(&zeros))
                .collect::<anyhow::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(Buffers {
            ping: c.upload(&zeros)?,
            send: c.upload(&zeros)?,
            recv,
            ack: c.upload(&[0u8])?,
        })
    }
}

/// The latency (seconds, half a round trip) on rank 0 (`None` on rank 1), and the bytes rank 1
/// received wrong in the check.
fn latency<C: P2pBackend>(
    c: &C,
    buf: &mut C::Owned,
    it: Iters,
    check: bool,
) -> anyhow::Result<(Option<f64>, u64)> {
    let rank = c.rank();
    let peer = 1 - rank;
    let mut start = Instant::now();
    for i in 0..it.warmup + it.iters {
        if i == it.warmup {
            c.drain()?;
            start = Instant::now();
        }
        if rank == 0 {
            c.send::<u8>((*buf).borrow(), peer, TAG)?;
            c.recv::<u8>(buf.borrow_mut(), peer, TAG)?;
        } else {
            c.recv::<u8>(buf.borrow_mut(), peer, TAG)?;
            c.send::<u8>((*buf).borrow(), peer, TAG)?;
        }
    }
    c.drain()?;
    let t = start.elapsed().as_secs_f64() / (2 * it.iters.max(1)) as f64;
    let mut wrong = 0;
    if check {
        let want = pattern(Buffer::len((*buf).borrow()), 3);
        if rank == 0 {
            let out = c.upload(&want)?;
            c.send::<u8>(out.borrow(), peer, TAG)?;
            c.recv::<u8>(buf.borrow_mut(), peer, TAG)?;
        } else {
            c.recv::<u8>(buf.borrow_mut(), peer, TAG)?;
            wrong = wrong_bytes(&c.read((*buf).borrow())?, &want);
            c.send::<u8>((*buf).borrow(), peer, TAG)?;
        }
        c.drain()?;
    }
    Ok(((rank == 0).then_some(t), wrong))
}

/// One window: rank 0 sends `send` `n` times, rank 1 receives into the distinct buffers of `recv`
/// (as many), then acknowledges with one byte.
fn window<C: P2pBackend>(
    c: &C,
    send: &C::Owned,
    n: usize,
    recv: &mut [C::Owned],
    ack: &mut C::Owned,
) -> anyhow::Result<()> {
    if c.rank() == 0 {
        scope(|s| -> collectives_core::Result<()> {
            let requests = (0..n)
                .map(|_| c.i_send::<u8>(s, send.borrow(), 1, TAG))
                .collect::<collectives_core::Result<Vec<_>>>()?;
            requests.into_iter().try_for_each(|r| r.wait())
        })??;
        c.recv::<u8>(ack.borrow_mut(), 1, ACK)?;
    } else {
        scope(|s| -> collectives_core::Result<()> {
            let requests = recv
                .iter_mut()
                .map(|b| c.i_recv::<u8>(s, b.borrow_mut(), 0, TAG))
                .collect::<collectives_core::Result<Vec<_>>>()?;
            requests.into_iter().try_for_each(|r| r.wait())
        })??;
        c.send::<u8>((*ack).borrow(), 0, ACK)?;
    }
    Ok(())
}

/// The bandwidth (bytes per second) on rank 0 (`None` on rank 1), and the bytes rank 1 received
/// wrong in the check.
fn bandwidth<C: P2pBackend>(
    c: &C,
    bufs: &mut Buffers<C::Owned>,
    size: usize,
    win: usize,
    it: Iters,
    check: bool,
) -> anyhow::Result<(Option<f64>, u64)> {
    let rank = c.rank();
    let mut start = Instant::now();
    for i in 0..it.warmup + it.iters {
        if i == it.warmup {
            c.drain()?;
            start = Instant::now();
        }
        window(c, &bufs.send, win, &mut bufs.recv, &mut bufs.ack)?;
    }
    c.drain()?;
    let t = start.elapsed().as_secs_f64();
    let bw = (size * win * it.iters) as f64 / t;
    let mut wrong = 0;
    if check {
        let want = pattern(size, 5);
        let patterned = c.upload(&want)?;
        window(c, &patterned, win, &mut bufs.recv, &mut bufs.ack)?;
        for b in &bufs.recv {
            wrong += wrong_bytes(&c.read(b.borrow())?, &want);
        }
        c.drain()?;
    }
    Ok(((rank == 0).then_some(bw), wrong))
}

/// The raw loops on the device pointers of a `cuda-mpi` communicator's buffers.
struct Raw<'c> {
    comm: &'c MpiCudaComm,
}

fn mpi_ok(what: &str, rc: i32) -> anyhow::Result<()> {
    if rc != 0 {
        bail!("raw {what} failed with MPI error code {rc}");
    }
    Ok(())
}

impl Raw<'_> {
    /// `osu_latency` through `MPI_Send`/`MPI_Recv` on `buf`'s device pointer, taken once.
    fn latency(&self, buf: &mut CudaSlice<u8>, it: Iters) -> anyhow::Result<Option<f64>> {
        let c = self.comm;
        let rank = c.rank();
        let peer = (1 - rank) as i32;
        let n = i32::try_from(buf.len()).context("raw latency: size exceeds an MPI int")?;
        let stream = c.stream();
        let (p, _g) = buf.device_ptr_mut(stream);
        stream.synchronize()?;
        let p = p as usize as *mut c_void;
        let comm = c.mpi().as_raw();
        // SAFETY: reading a constant datatype handle set up by rsmpi's shim.
        let dt = unsafe { ffi::RSMPI_UINT8_T };
        // SAFETY: MPI_Status is a plain C struct of integers; all-zero bytes are a valid value.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        let mut start = Instant::now();
        for i in 0..it.warmup + it.iters {
            if i == it.warmup {
                start = Instant::now();
            }
            // SAFETY: `p` is the device address of a live buffer of `n` bytes, its producers complete
            // (stream drained), on a communicator that outlives the loop; the MPI is CUDA-aware (the
            // library refused otherwise); `status` is a valid out-pointer.
            unsafe {
                if rank == 0 {
                    mpi_ok("MPI_Send", ffi::MPI_Send(p, n, dt, peer, TAG, comm))?;
                    mpi_ok(
                        "MPI_Recv",
                        ffi::MPI_Recv(p, n, dt, peer, TAG, comm, &mut status),
                    )?;
                } else {
                    mpi_ok(
                        "MPI_Recv",
                        ffi::MPI_Recv(p, n, dt, peer, TAG, comm, &mut status),
                    )?;
                    mpi_ok("MPI_Send", ffi::MPI_Send(p, n, dt, peer, TAG, comm))?;
                }
            }
        }
        let t = start.elapsed().as_secs_f64() / (2 * it.iters.max(1)) as f64;
        Ok((rank == 0).then_some(t))
    }

    /// `osu_bw` through `MPI_Isend`/`MPI_Irecv`/`MPI_Waitall` on the device pointers of the same
    /// buffers as the library's loop, taken once.
    fn bandwidth(
        &self,
        send: &CudaSlice<u8>,
        recv: Vec<&mut CudaSlice<u8>>,
        ack: &mut CudaSlice<u8>,
        win: usize,
        it: Iters,
    ) -> anyhow::Result<Option<f64>> {
        let c = self.comm;
        let rank = c.rank();
        let size = send.len();
        let n = i32::try_from(size).context("raw bandwidth: size exceeds an MPI int")?;
        let nwin = i32::try_from(win).context("raw bandwidth: window exceeds an MPI int")?;
        let stream = c.stream();
        let comm = c.mpi().as_raw();
        // SAFETY: reading a constant datatype handle set up by rsmpi's shim.
        let dt = unsafe { ffi::RSMPI_UINT8_T };
        let (sp, _sg) = send.device_ptr(stream);
        let mut rp = Vec::with_capacity(win);
        let mut guards = Vec::with_capacity(win);
        for b in recv {
            let (p, g) = b.device_ptr_mut(stream);
            rp.push(p as usize as *mut c_void);
            guards.push(g);
        }
        let (ap, _ag) = ack.device_ptr_mut(stream);
        let (sp, ap) = (sp as usize as *const c_void, ap as usize as *mut c_void);
        stream.synchronize()?;
        // SAFETY: MPI_Request handles may start as any value (MPI overwrites them); MPI_Status is a
        // plain C struct of integers, for which all-zero bytes are a valid value.
        let (request, status): (ffi::MPI_Request, ffi::MPI_Status) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let mut requests = vec![request; win];
        let mut statuses = vec![status; win];
        let mut status = status;
        let mut start = Instant::now();
        for i in 0..it.warmup + it.iters {
            if i == it.warmup {
                start = Instant::now();
            }
            // SAFETY: every pointer is the device address of a live buffer of the count passed
            // (`size` bytes, or 1 for the acknowledgement), producers complete (stream drained), the
            // receive buffers distinct (one per request); every request is waited for in the same
            // iteration; the MPI is CUDA-aware.
            unsafe {
                if rank == 0 {
                    for r in requests.iter_mut() {
                        mpi_ok("MPI_Isend", ffi::MPI_Isend(sp, n, dt, 1, TAG, comm, r))?;
                    }
                    mpi_ok(
                        "MPI_Waitall",
                        ffi::MPI_Waitall(nwin, requests.as_mut_ptr(), statuses.as_mut_ptr()),
                    )?;
                    mpi_ok(
                        "MPI_Recv",
                        ffi::MPI_Recv(ap, 1, dt, 1, ACK, comm, &mut status),
                    )?;
                } else {
                    for (r, p) in requests.iter_mut().zip(&rp) {
                        mpi_ok("MPI_Irecv", ffi::MPI_Irecv(*p, n, dt, 0, TAG, comm, r))?;
                    }
                    mpi_ok(
                        "MPI_Waitall",
                        ffi::MPI_Waitall(nwin, requests.as_mut_ptr(), statuses.as_mut_ptr()),
                    )?;
                    mpi_ok("MPI_Send", ffi::MPI_Send(ap, 1, dt, 0, ACK, comm))?;
                }
            }
        }
        let t = start.elapsed().as_secs_f64();
        Ok((rank == 0).then_some((size * win * it.iters) as f64 / t))
    }
}

/// Measure every size on one backend; rows on rank 0. Ranks above 1 take part in the barriers and
/// reductions only.
fn measure<C: P2pBackend>(
    c: &C,
    ctl: &MpiComm,
    args: &P2pArgs,
    sizes: &[usize],
    raw: Option<Raw<'_>>,
    emit: &mut dyn FnMut(P2pRow),
) -> anyhow::Result<()> {
    let win = args.window as usize;
    let check = args.check == 1;
    let active = c.rank() < 2;
    for &size in sizes {
        let mut row = P2pRow {
            backend: c.backend().name(),
            size,
            latency: None,
            bandwidth: None,
            raw_latency: None,
            raw_bandwidth: None,
            wrong: None,
        };
        let mut wrong = 0u64;
        let bufs = if active {
            Some(Buffers::new(c, size, win))
        } else {
            None
        };
        // Every rank learns whether ranks 0 and 1 could allocate, so that all stop together.
        let mut ok = [i32::from(bufs.as_ref().map_or(true, |b| b.is_ok()))];
        ctl.all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
        let mut bufs = bufs.transpose().with_context(|| {
            format!(
                "cannot allocate the buffers of {size} bytes on rank {}",
                c.rank()
            )
        })?;
        if ok[0] == 0 {
            bail!("a rank cannot allocate the buffers of {size} bytes");
        }
        if args.test != Test::Bw {
            ctl.barrier()?;
            if let Some(b) = bufs.as_mut() {
                let (t, w) = latency(c, &mut b.ping, args.latency_iters(size), check)?;
                row.latency = t;
                wrong += w;
            }
            if let Some(r) = &raw {
                ctl.barrier()?;
                if let Some(ping) = bufs.as_mut().and_then(|b| C::device(&mut b.ping)) {
                    row.raw_latency = r.latency(ping, args.latency_iters(size))?;
                }
            }
        }
        if args.test != Test::Latency {
            ctl.barrier()?;
            if let Some(b) = bufs.as_mut() {
                let (bw, w) = bandwidth(c, b, size, win, args.bw_iters(size), check)?;
                row.bandwidth = bw;
                wrong += w;
            }
            if let Some(r) = &raw {
                ctl.barrier()?;
                if let Some(b) = bufs.as_mut() {
                    let Buffers {
                        send, recv, ack, ..
                    } = b;
                    let devices: Option<Vec<&mut CudaSlice<u8>>> =
                        recv.iter_mut().map(|x| C::device(x)).collect();
                    if let (Some(send), Some(ack), Some(devices)) =
                        (C::device(send), C::device(ack), devices)
                    {
                        row.raw_bandwidth =
                            r.bandwidth(send, devices, ack, win, args.bw_iters(size))?;
                    }
                }
            }
        }
        drop(bufs);
        let mut all = [wrong];
        ctl.all_reduce_in_place(&mut all[..], ReduceOp::Sum)?;
        row.wrong = check.then_some(all[0]);
        if ctl.rank() == 0 {
            emit(row);
        }
    }
    Ok(())
}

/// The `mpi` backend's rows (on rank 0; empty elsewhere) over the ranks of `world`, which must be two
/// or more. Collective.
///
/// # Errors
/// Fewer than two ranks; bad sizes; MPI errors.
pub fn measure_host(world: &MpiComm, args: &P2pArgs) -> anyhow::Result<Vec<P2pRow>> {
    if world.size() < 2 {
        bail!("p2p measures between ranks 0 and 1: run it on at least 2 ranks (mpirun -n 2)");
    }
    let sizes = args.sizes().map_err(anyhow::Error::msg)?;
    let ctl = world.dup()?.with_checked(false);
    let comm = world.dup()?.with_checked(false);
    let mut rows = Vec::new();
    measure(&comm, &ctl, args, &sizes, None, &mut |r| rows.push(r))?;
    Ok(rows)
}

/// `collbench p2p`.
///
/// # Errors
/// Fewer than two ranks; bad flags; a backend not available; library errors.
pub fn run(universe: &mpi::environment::Universe, args: &P2pArgs) -> anyhow::Result<()> {
    let ctl = MpiComm::world(universe)?.with_checked(false);
    if ctl.size() < 2 {
        bail!("p2p measures between ranks 0 and 1: run it on at least 2 ranks (mpirun -n 2)");
    }
    let sizes = args.sizes().map_err(anyhow::Error::msg)?;
    let availability = crate::doctor::backends_here(&ctl)?;
    let (backends, left_out) = backend::resolve(args.backend, |b| {
        availability
            .iter()
            .find(|(c, _)| *c == b)
            .and_then(|(_, why)| why.clone())
    })
    .map_err(anyhow::Error::msg)?;
    let raw_wanted = args.baseline == Some(Baseline::Raw);
    let rank0 = ctl.rank() == 0;
    let mut machine = Machine::here();
    let mut out: Box<dyn Write> =
        match crate::app::output(ctl.rank() as i32, args.output.as_deref())? {
            Some(out) => out,
            None => Box::new(std::io::sink()),
        };
    let mut rows: Vec<P2pRow> = Vec::new();
    let format = if args.osu { Format::Osu } else { args.format };
    if rank0 {
        match format {
            Format::Table => {
                writeln!(
                    out,
                    "# collbench p2p: ranks 0 and 1 of {}, backend {}, window {}",
                    ctl.size(),
                    backends
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(","),
                    args.window
                )?;
                for h in HOW {
                    writeln!(out, "#  {h}")?;
                }
                if raw_wanted {
                    writeln!(out, "#  raw: MPI_Send/MPI_Recv and MPI_Isend/MPI_Irecv/MPI_Waitall on the device pointers of the same buffers (cuda-mpi only); bw ratio = ours / raw")?;
                }
                for (b, why) in &left_out {
                    writeln!(out, "#  note: {}: not available: {why}", b.name())?;
                }
            }
            Format::Csv => {
                for (b, why) in &left_out {
                    eprintln!("collbench: note: {}: not available: {why}", b.name());
                }
                writeln!(out, "{}", Record::csv_header())?;
            }
            Format::Json | Format::Osu => {}
        }
    }
    let nranks = ctl.size();
    if backends.contains(&Backend::Nccl) {
        machine.nccl_version = collectives_core::nccl_sys::library()
            .ok()
            .map(|l| l.version().to_string());
    }
    for &b in &backends {
        let raw = raw_wanted && b == Backend::CudaMpi;
        if rank0 && format == Format::Table {
            writeln!(out, "# backend {}", b.name())?;
            for l in table_header(raw_wanted) {
                writeln!(out, "{l}")?;
            }
        }
        let first = rows.len();
        let mut emit = |row: P2pRow| {
            let lines = match format {
                Format::Table => vec![table_row(&row, raw_wanted)],
                Format::Csv => row
                    .records(nranks, &machine, args)
                    .iter()
                    .map(Record::csv_line)
                    .collect(),
                Format::Json | Format::Osu => Vec::new(),
            };
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
            rows.push(row);
        };
        let max = sizes.iter().copied().max().unwrap_or(0);
        let started: anyhow::Result<()> = (|| {
            match b {
                Backend::Mpi => {
                    let c = MpiComm::world(universe)?.with_checked(false);
                    measure(&c, &ctl, args, &sizes, None, &mut emit)
                }
                Backend::CudaMpi => {
                    let c = MpiCudaComm::from_mpi(&ctl, None)?.with_checked(false);
                    let r = raw.then_some(Raw { comm: &c });
                    measure(&c, &ctl, args, &sizes, r, &mut emit)?;
                    Ok(c.finalize()?)
                }
                Backend::MpiStaged => {
                    // Every message in flight holds a pinned buffer: keep a window's worth.
                    let pool = (args.window as usize)
                        .saturating_mul(max)
                        .saturating_add(1 << 20);
                    let c = MpiStagedComm::from_mpi(&ctl, None)?
                        .with_checked(false)
                        .with_pool_bytes(pool);
                    measure(&c, &ctl, args, &sizes, None, &mut emit)?;
                    Ok(c.finalize()?)
                }
                Backend::Nccl => {
                    let c = NcclComm::from_mpi(&ctl, None)?.with_checked(false);
                    measure(&c, &ctl, args, &sizes, None, &mut emit)?;
                    Ok(c.finalize()?)
                }
            }
        })();
        started.with_context(|| format!("p2p on {}", b.name()))?;
        if rank0 && format == Format::Osu {
            for line in osu_tables(&rows[first..], args) {
                writeln!(out, "{line}")?;
            }
        }
    }
    if rank0 {
        match format {
            Format::Json => {
                let doc = Document {
                    schema: SCHEMA.into(),
                    benchmark: "p2p".into(),
                    ranks: nranks,
                    machine: machine.clone(),
                    backends: backends.iter().map(|b| b.name().to_string()).collect(),
                    settings: [
                        ("window", serde_json::json!(args.window)),
                        ("minbytes", serde_json::json!(args.min_bytes)),
                        ("maxbytes", serde_json::json!(args.max_bytes)),
                        ("check", serde_json::json!(args.check == 1)),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                    method: HOW.iter().map(|h| h.to_string()).collect(),
                    notes: left_out
                        .iter()
                        .map(|(b, why)| format!("{}: not available: {why}", b.name()))
                        .collect(),
                    environment: Vec::new(),
                    records: rows
                        .iter()
                        .flat_map(|r| r.records(nranks, &machine, args))
                        .collect(),
                };
                write!(out, "{}", doc.to_json())?;
            }
            Format::Table => {
                let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
                if args.check == 1 {
                    writeln!(
                        out,
                        "# wrong bytes total: {wrong} {}",
                        if wrong == 0 { "OK" } else { "FAILED" }
                    )?;
                }
                for l in bandwidth_summary(&rows) {
                    writeln!(out, "# {l}")?;
                }
            }
            Format::Csv | Format::Osu => {}
        }
        out.flush()?;
    }
    let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    let mut any = [wrong];
    ctl.all_reduce_in_place(&mut any[..], ReduceOp::Max)?;
    if any[0] > 0 {
        bail!("{} bytes were received wrong", any[0]);
    }
    Ok(())
}

/// OSU's tables of one backend's rows: `osu_latency`'s, then `osu_bw`'s, as measured.
pub fn osu_tables(rows: &[P2pRow], args: &P2pArgs) -> Vec<String> {
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    let validation = args.check == 1;
    let mut lines = Vec::new();
    if args.test != Test::Bw {
        lines.extend(osu::p2p_header(P2pTest::Latency, first.backend, validation));
        for r in rows {
            let t = r.latency.unwrap_or(0.0);
            lines.push(osu::p2p_row(P2pTest::Latency, r.size, t, 0.0, r.wrong));
        }
    }
    if args.test != Test::Latency {
        lines.extend(osu::p2p_header(P2pTest::Bw, first.backend, validation));
        for r in rows {
            let bw = r.bandwidth.unwrap_or(0.0);
            lines.push(osu::p2p_row(P2pTest::Bw, r.size, 0.0, bw, r.wrong));
        }
    }
    lines
}

/// With several backends: bandwidth and latency per size side by side.
pub fn bandwidth_summary(rows: &[P2pRow]) -> Vec<String> {
    let mut backends: Vec<&str> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    for r in rows {
        if !backends.contains(&r.backend) {
            backends.push(r.backend);
        }
        if !sizes.contains(&r.size) {
            sizes.push(r.size);
        }
    }
    if backends.len() < 2 {
        return Vec::new();
    }
    sizes.sort_unstable();
    let mut head = format!("{:>12}", "size(B)");
    for b in &backends {
        head.push_str(&format!(" {:>22}", format!("{b} us | MB/s")));
    }
    let mut lines = vec![
        "per backend: latency (us) | bandwidth (MB/s)".to_string(),
        head,
    ];
    for s in sizes {
        let mut l = format!("{s:>12}");
        for b in &backends {
            let cell = rows
                .iter()
                .find(|r| r.backend == *b && r.size == s)
                .map_or_else(
                    || "-".to_string(),
                    |r| format!("{} | {}", opt(r.latency, us), opt(r.bandwidth, mbs)),
                );
            l.push_str(&format!(" {cell:>22}"));
        }
        lines.push(l);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> P2pArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            a: P2pArgs,
        }
        let mut v = vec!["p2p"];
        v.extend_from_slice(extra);
        Wrap::try_parse_from(v).unwrap().a
    }

    #[test]
    fn osu_defaults() {
        let a = args(&[]);
        assert_eq!(a.window, 64);
        assert_eq!(a.test, Test::Both);
        assert_eq!(a.sizes().unwrap().first(), Some(&1));
        assert_eq!(a.sizes().unwrap().last(), Some(&(4 << 20)));
        assert_eq!(
            a.latency_iters(8192),
            Iters {
                iters: 10_000,
                warmup: 100
            }
        );
        assert_eq!(
            a.latency_iters(8193),
            Iters {
                iters: 1000,
                warmup: 10
            }
        );
        assert_eq!(
            a.bw_iters(64),
            Iters {
                iters: 100,
                warmup: 10
            }
        );
        assert_eq!(
            a.bw_iters(1 << 20),
            Iters {
                iters: 20,
                warmup: 2
            }
        );
        let a = args(&[
            "-n", "7", "-w", "1", "-b", "64M", "-e", "64M", "--window", "8",
        ]);
        assert_eq!(
            a.bw_iters(1),
            Iters {
                iters: 7,
                warmup: 1
            }
        );
        assert_eq!(a.sizes().unwrap(), vec![64 << 20]);
        assert_eq!(a.window, 8);
    }

    #[test]
    fn the_command_line_reaches_p2p() {
        let a =
            P2pArgs::from_flags(&["--backend", "cuda-mpi", "--baseline", "raw", "--test", "bw"])
                .unwrap();
        assert_eq!(a.backend, BackendChoice::One(Backend::CudaMpi));
        assert_eq!((a.baseline, a.test), (Some(Baseline::Raw), Test::Bw));
        assert!(P2pArgs::from_flags(&["--window", "0"]).is_err());
        assert!(P2pArgs::from_flags(&["--backend", "gloo"]).is_err());
    }

    #[test]
    fn rows_render() {
        let r = P2pRow {
            backend: "cuda-mpi",
            size: 64 << 20,
            latency: Some(180e-6),
            bandwidth: Some(380e9),
            raw_latency: Some(179e-6),
            raw_bandwidth: Some(386e9),
            wrong: Some(0),
        };
        let t = table_row(&r, true);
        assert!(
            t.contains("67108864") && t.contains("380000.00") && t.contains("0.984"),
            "{t}"
        );
        assert_eq!(table_header(true)[0].len(), t.len());
        let args = P2pArgs::from_flags(&["-n", "10", "--window", "4"]).unwrap();
        let recs = r.records(2, &Machine::default(), &args);
        let what: Vec<(&str, &str)> = recs
            .iter()
            .map(|x| (x.collective.as_str(), x.variant.as_str()))
            .collect();
        assert_eq!(
            what,
            [
                ("latency", "library"),
                ("bw", "library"),
                ("latency", "raw"),
                ("bw", "raw")
            ]
        );
        assert_eq!(recs[0].time_us, 180.0);
        assert_eq!((recs[1].algbw_gbps, recs[1].iterations), (Some(380.0), 40));
        assert_eq!(recs[0].csv_line().split(',').count(), Record::COLUMNS.len());
        let osu = osu_tables(std::slice::from_ref(&r), &args);
        assert!(
            osu.contains(&"# Size      Bandwidth (MB/s)        Validation".to_string()),
            "{osu:?}"
        );
        let mut r2 = r.clone();
        r2.backend = "nccl";
        r2.raw_bandwidth = None;
        assert_eq!(bandwidth_summary(&[r.clone(), r2]).len(), 3);
        assert!(bandwidth_summary(&[r]).is_empty());
    }

    #[test]
    fn checks_count_bytes() {
        assert_eq!(wrong_bytes(&pattern(10, 1), &pattern(10, 1)), 0);
        assert_eq!(wrong_bytes(&pattern(10, 1), &pattern(10, 2)), 10);
        assert_eq!(wrong_bytes(&[1, 2], &[1]), 1);
    }
}

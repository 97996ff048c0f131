//! `collbench p2p`: point-to-point latency, bandwidth, bi-directional bandwidth (ranks 0 and 1) and
//! multi-pair bandwidth and message rate (every pair of ranks), as the OSU micro-benchmarks measure
//! them, on every backend (host memory for `mpi`, device memory for the others), with the raw MPI
//! baseline on the same device buffers for `cuda-mpi`.
//!
//! - **latency** (`osu_latency`): rank 0 sends a message of the size to rank 1 and receives it back,
//!   `-n` times after `-w` warm-up round trips; the latency is half the average round-trip time, in
//!   microseconds.
//! - **bandwidth** (`osu_bw`): rank 0 starts a window of `--window` (64) non-blocking sends of the
//!   same buffer, rank 1 a window of as many non-blocking receives into distinct buffers; each
//!   completes its window at once (one wait over all its requests, as OSU's `MPI_Waitall`), then
//!   rank 1 sends a one-byte acknowledgement; `-n` windows after `-w` warm-up ones.
//!   Bandwidth = size x window x n / time on rank 0, in MB/s (1 MB = 10^6 bytes).
//! - **bi-directional bandwidth** (`osu_bibw`): ranks 0 and 1 both start a window of `--window`
//!   non-blocking sends of one buffer and as many non-blocking receives into distinct buffers (each
//!   message a `send_recv` pair, so that NCCL groups the two directions), and wait for both;
//!   `-n` windows after `-w` warm-up ones. Bandwidth = 2 x size x window x n / time on rank 0.
//! - **multi-pair bandwidth and message rate** (`osu_mbw_mr`): the `n/2` ranks of the first half each
//!   send windows to their partner in the second half (rank `i` to rank `i + n/2`; with an odd `n` the
//!   last rank only joins the barriers), each window acknowledged, all ranks meeting at a barrier
//!   before each window; each sender times its windows, the times are averaged over senders.
//!   Bandwidth = pairs x size x window x n / average time; message rate = bandwidth / size.
//! - **timing**: wall clock on the host; device backends drain their stream before the clock stops
//!   (NCCL's calls are stream-ordered and return at once; the MPI backends complete before returning).
//! - **raw** (`--baseline raw`, `cuda-mpi` only): the same loops through `MPI_Send`/`MPI_Recv` and
//!   `MPI_Isend`/`MPI_Irecv`/`MPI_Waitall` on the device pointers of the same buffers, taken once.
//! - **#wrong** (`-c 1`): after timing, one round trip and one window with patterned bytes; rank 1
//!   counts the bytes that differ; for `bibw` one window each way (both ranks count), for `mbw_mr`
//!   one window per pair (the receivers count).
//! - Iterations follow OSU's defaults unless `-n`/`-w` are given: latency 10000 (1000 above 8 KiB)
//!   after 100 (10), bandwidth and bi-directional bandwidth 100 (20) windows after 10 (2),
//!   multi-pair 100 windows after 10 at every size (`osu_mbw_mr` has no large-message setting).

use std::borrow::BorrowMut;
use std::ffi::c_void;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use collectives_core::backend::mpi_cuda::IpcBuffer;
use collectives_core::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use collectives_core::{
    device, scope, wait_all, Buf, BufMut, Buffer, Communicator, DeviceBuffer, DeviceBufferMut,
    DeviceCommunicator, MpiComm, MpiCudaComm, MpiStagedComm, NcclComm, ReduceOp, Request, Scope,
};
use mpi::ffi;

use crate::measure::backend::{self, Backend, BackendChoice, Baseline};
use crate::measure::sizes::SizeArgs;
use crate::output::osu::{self, P2pTest};
use crate::output::record::{fmt_time_us, rounded, Format};
use crate::output::record::{Document, Machine, Record};
use crate::output::sink::Sink;

/// OSU's threshold between small and large messages, in bytes.
pub const LARGE: usize = 8192;

/// Which measurements to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// `osu_latency`.
    Latency,
    /// `osu_bw`.
    Bw,
    /// `osu_bibw`.
    Bibw,
    /// `osu_mbw_mr`.
    #[value(name = "mbw-mr", alias = "mbw_mr")]
    MbwMr,
    /// Latency and bandwidth.
    Both,
    /// All four.
    All,
}

impl Test {
    /// Whether `osu_latency` is measured.
    pub fn latency(self) -> bool {
        matches!(self, Test::Latency | Test::Both | Test::All)
    }
    /// Whether `osu_bw` is measured.
    pub fn bw(self) -> bool {
        matches!(self, Test::Bw | Test::Both | Test::All)
    }
    /// Whether `osu_bibw` is measured.
    pub fn bibw(self) -> bool {
        matches!(self, Test::Bibw | Test::All)
    }
    /// Whether `osu_mbw_mr` is measured.
    pub fn mbw_mr(self) -> bool {
        matches!(self, Test::MbwMr | Test::All)
    }
}

/// `collbench p2p` flags.
#[derive(Debug, Args)]
#[command(
    mut_arg("min_bytes", |a| a.default_value("1")),
    mut_arg("max_bytes", |a| a.default_value("4M"))
)]
pub struct P2pArgs {
    /// Message sizes: -b, -e, -f, -i.
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Timed iterations (round trips, or windows) per size [default: OSU's, see the module docs].
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: Option<u32>,
    /// Warm-up iterations per size [default: OSU's].
    #[arg(short = 'w', long = "warmup_iters", visible_alias = "warmup-iters")]
    pub warmup_iters: Option<u32>,
    /// Messages in flight per window of the bandwidth test.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub window: u32,
    /// What to measure: latency, bw, bibw, mbw-mr, both (latency and bw) or all.
    #[arg(long, value_enum, default_value_t = Test::All)]
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
    /// tables of osu_latency, osu_bw, osu_bibw and osu_mbw_mr.
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
        self.sizes.sequence()
    }

    /// The iterations of the latency test at `size` (OSU: 10000 after 100, 1000 after 10 above 8 KiB).
    pub fn latency_iters(&self, size: usize) -> Iters {
        self.osu_iters(size, (10_000, 100), (1000, 10))
    }

    /// The windows of the bandwidth and bi-directional bandwidth tests at `size` (OSU: 100 after
    /// 10, 20 after 2 above 8 KiB).
    pub fn bw_iters(&self, size: usize) -> Iters {
        self.osu_iters(size, (100, 10), (20, 2))
    }

    /// The windows of the multi-pair test (OSU: 100 after 10 at every size).
    pub fn mbw_iters(&self) -> Iters {
        self.osu_iters(0, (100, 10), (100, 10))
    }

    /// `-n` and `-w` where given, else OSU's (timed, warm-up) counts at `size`: `small` up to
    /// [`LARGE`], `large` above.
    fn osu_iters(&self, size: usize, small: (usize, usize), large: (usize, usize)) -> Iters {
        let (iters, warmup) = if size > LARGE { large } else { small };
        Iters {
            iters: self.iters.map_or(iters, |n| n as usize),
            warmup: self.warmup_iters.map_or(warmup, |n| n as usize),
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
    /// Bytes per second, both directions together (`osu_bibw`).
    pub bibw: Option<f64>,
    /// Bytes per second, all pairs together (`osu_mbw_mr`); the message rate is this over the size.
    pub mbw: Option<f64>,
    /// The pairs of the multi-pair test.
    pub pairs: usize,
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
    /// A row with nothing measured yet.
    pub fn new(backend: &'static str, size: usize, pairs: usize) -> Self {
        P2pRow {
            backend,
            size,
            latency: None,
            bandwidth: None,
            bibw: None,
            mbw: None,
            pairs,
            raw_latency: None,
            raw_bandwidth: None,
            wrong: None,
        }
    }

    /// Messages per second of the multi-pair test, all pairs together.
    pub fn message_rate(&self) -> Option<f64> {
        self.mbw.map(|bw| bw / self.size.max(1) as f64)
    }

    /// Table cells: size, latency, bandwidth, bi-directional bandwidth, multi-pair bandwidth and
    /// message rate, #wrong, and with `raw` the raw latency, raw bandwidth and the bandwidth ratio
    /// ours / raw.
    fn cells(&self, raw: bool) -> Vec<String> {
        let mut v = vec![
            self.size.to_string(),
            opt(self.latency, us),
            opt(self.bandwidth, mbs),
            opt(self.bibw, mbs),
            opt(self.mbw, mbs),
            opt(self.message_rate(), |r| format!("{r:.0}")),
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

    /// The records of this row: `latency`, `bw`, `bibw` and `mbw_mr` (where measured), then the
    /// raw loops' (variant `raw`). A latency's time is half the round trip; a bandwidth's time is
    /// the time per message (`size / bandwidth`, both directions together for `bibw`, all pairs
    /// together for `mbw_mr`, whose record also carries the message rate); `algbw` and `busbw` are
    /// `size / time`.
    pub fn records(&self, nranks: usize, machine: &Machine, iters: &P2pArgs) -> Vec<Record> {
        let record = |collective: &str, variant: &str, seconds: f64, n: usize| {
            let mut r = Record::new(machine, "p2p", collective, self.backend);
            r.variant = variant.into();
            r.dtype = "byte".into();
            (r.ranks, r.iterations) = (nranks, n as u64);
            (r.size_bytes, r.count) = (self.size as u64, self.size as u64);
            r.wrong = self.wrong;
            r.timed(seconds * 1e6, 1.0)
        };
        let per_message = |bw: f64| if bw > 0.0 { self.size as f64 / bw } else { 0.0 };
        let win = iters.window as usize;
        let lat_n = iters.latency_iters(self.size).iters;
        let bw_n = iters.bw_iters(self.size).iters * win;
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
            if variant != "library" {
                continue;
            }
            if let Some(bw) = self.bibw {
                v.push(record("bibw", variant, per_message(bw), 2 * bw_n));
            }
            if let Some(bw) = self.mbw {
                let n = iters.mbw_iters().iters * win * self.pairs;
                let mut r = record("mbw_mr", variant, per_message(bw), n);
                r.messages_per_s = self.message_rate().map(|m| rounded(m, 1));
                v.push(r);
            }
        }
        v
    }
}

const WIDTHS: [usize; 10] = [12, 12, 12, 12, 12, 12, 7, 12, 12, 9];

fn line(first: char, cells: &[String]) -> String {
    crate::output::report::line(first, cells, &WIDTHS)
}

/// The table's column names and units.
pub fn table_header(raw: bool) -> Vec<String> {
    let mut names = vec![
        "size",
        "latency",
        "bandwidth",
        "bibw",
        "mbw",
        "msg rate",
        "#wrong",
    ];
    let mut units = vec!["(B)", "(us)", "(MB/s)", "(MB/s)", "(MB/s)", "(msg/s)", ""];
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
pub const HOW: [&str; 5] = [
    "latency: osu_latency: half the average round-trip time of a ping-pong between ranks 0 and 1 (us)",
    "bandwidth: osu_bw: windows of non-blocking sends of one buffer into as many distinct receive buffers, each window acknowledged by a 1-byte message; size x window x iterations / time on rank 0 (MB/s, 1 MB = 1e6 bytes)",
    "bibw: osu_bibw: ranks 0 and 1 both send a window to each other at once (send/receive pairs); 2 x size x window x iterations / time on rank 0 (MB/s)",
    "mbw, msg rate: osu_mbw_mr: rank i sends windows to rank i + n/2 (n/2 pairs), a barrier before each window, each acknowledged; pairs x size x window x iterations / the senders' average time (MB/s); msg rate = mbw / size",
    "timing: wall clock on the host; device backends drain their stream before the clock stops",
];

/// A backend as the benchmark drives it: buffers of bytes in its own memory.
pub trait P2pBackend: Communicator {
    /// An owned buffer.
    type Owned;
    /// An owned buffer, to read.
    fn r(o: &Self::Owned) -> &Buf<'_, Self, u8>;
    /// An owned buffer, to write.
    fn w(o: &mut Self::Owned) -> &mut BufMut<'_, Self, u8>;
    /// A buffer holding `bytes`.
    ///
    /// # Errors
    /// Allocation and copy errors.
    fn upload(&self, bytes: &[u8]) -> anyhow::Result<Self::Owned>;
    /// The bytes of `buf`, once the work before it is done.
    ///
    /// # Errors
    /// Copy errors.
    fn read(&self, buf: &Buf<Self, u8>) -> anyhow::Result<Vec<u8>>;
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
    fn r(o: &Vec<u8>) -> &[u8] {
        o
    }
    fn w(o: &mut Vec<u8>) -> &mut [u8] {
        o
    }
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
            fn r(o: &$owned) -> &dyn DeviceBuffer<u8> {
                o
            }
            fn w(o: &mut $owned) -> &mut dyn DeviceBufferMut<u8> {
                o
            }
            fn upload(&self, bytes: &[u8]) -> anyhow::Result<$owned> {
                let f: fn(&std::sync::Arc<CudaStream>, &[u8]) -> collectives_core::Result<$owned> =
                    $upload;
                Ok(f(self.stream(), bytes)?)
            }
            fn read(&self, buf: &dyn DeviceBuffer<u8>) -> anyhow::Result<Vec<u8>> {
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

/// One size's buffers on a rank that takes part, shared by the library's loops and the raw ones.
struct Buffers<O> {
    /// The ping-pong buffer.
    ping: O,
    /// The bandwidth send buffer (one buffer, sent `window` times, as OSU's default).
    send: O,
    /// `window` receive buffers, where this rank receives windows (receives in flight may not share
    /// a buffer); empty elsewhere.
    recv: Vec<O>,
    /// The one-byte acknowledgement.
    ack: O,
}

impl<O> Buffers<O> {
    fn new<C: P2pBackend<Owned = O>>(
        c: &C,
        size: usize,
        win: usize,
        receives: bool,
    ) -> anyhow::Result<Self> {
        let zeros = vec![0u8; size];
        let recv = if receives {
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

/// Runs `step` `it.warmup` times untimed, then `it.iters` times timed: `settle` (which drains a
/// device backend's stream) runs before the clock starts and again before it stops. The seconds of
/// the timed steps.
fn timed(
    it: Iters,
    mut settle: impl FnMut() -> anyhow::Result<()>,
    mut step: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    for _ in 0..it.warmup {
        step()?;
    }
    settle()?;
    let start = Instant::now();
    for _ in 0..it.iters {
        step()?;
    }
    settle()?;
    Ok(start.elapsed().as_secs_f64())
}

/// [`timed`] on `c`, whose stream (where it has one) is drained before the clock starts and stops.
fn timed_on<C: P2pBackend>(
    c: &C,
    it: Iters,
    step: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    timed(it, || c.drain(), step)
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
    let t = timed_on(c, it, || {
        if rank == 0 {
            c.send::<u8>(C::r(buf), peer, TAG)?;
            c.recv::<u8>(C::w(buf), peer, TAG)?;
        } else {
            c.recv::<u8>(C::w(buf), peer, TAG)?;
            c.send::<u8>(C::r(buf), peer, TAG)?;
        }
        Ok(())
    })? / (2 * it.iters.max(1)) as f64;
    let mut wrong = 0;
    if check {
        let want = pattern(Buffer::len(C::r(buf)), 3);
        if rank == 0 {
            let out = c.upload(&want)?;
            c.send::<u8>(C::r(&out), peer, TAG)?;
            c.recv::<u8>(C::w(buf), peer, TAG)?;
        } else {
            c.recv::<u8>(C::w(buf), peer, TAG)?;
            wrong = wrong_bytes(&c.read(C::r(buf))?, &want);
            c.send::<u8>(C::r(buf), peer, TAG)?;
        }
        c.drain()?;
    }
    Ok(((rank == 0).then_some(t), wrong))
}

/// Start a window's requests with `start` and complete them all at once, as `osu_bw` and
/// `osu_bibw` complete a window with one `MPI_Waitall`: the library's [`wait_all`] over the
/// window's requests (on the host MPI backend, one `MPI_Waitall` on their MPI requests; on the
/// others, each request's own wait). The first error wins: of a start, else of the completion.
/// Where a start fails, the scope completes the requests already started as it ends.
fn complete_window<'env>(
    start: impl for<'s> FnOnce(&'s Scope<'s, 'env>) -> collectives_core::Result<Vec<Request<'s>>>,
) -> anyhow::Result<()> {
    Ok(scope(|s| start(s).and_then(wait_all))??)
}

/// One window from rank `from` to rank `to`: `from` sends `send` `n` times, `to` receives into the
/// distinct buffers of `recv` (as many), then acknowledges with one byte. Other ranks do nothing.
fn window<C: P2pBackend>(
    c: &C,
    (from, to): (usize, usize),
    send: &C::Owned,
    n: usize,
    recv: &mut [C::Owned],
    ack: &mut C::Owned,
) -> anyhow::Result<()> {
    if c.rank() == from {
        complete_window(|s| {
            (0..n)
                .map(|_| c.i_send::<u8>(s, C::r(send), to, TAG))
                .collect()
        })?;
        c.recv::<u8>(C::w(ack), to, ACK)?;
    } else if c.rank() == to {
        complete_window(|s| {
            recv.iter_mut()
                .map(|b| c.i_recv::<u8>(s, C::w(b), from, TAG))
                .collect()
        })?;
        c.send::<u8>(C::r(ack), from, ACK)?;
    }
    Ok(())
}

/// One window both ways between this rank and `peer`: as many `send_recv` pairs as `recv` has
/// buffers, each sending `send` and receiving into its own buffer, then waiting for all of them.
fn both_ways<C: P2pBackend>(
    c: &C,
    peer: usize,
    send: &C::Owned,
    recv: &mut [C::Owned],
) -> anyhow::Result<()> {
    complete_window(|s| {
        recv.iter_mut()
            .map(|b| c.i_send_recv::<u8>(s, C::r(send), peer, C::w(b), peer, TAG))
            .collect()
    })
}

/// The bytes of `recv` that differ from `want`.
fn wrong_in<C: P2pBackend>(c: &C, recv: &[C::Owned], want: &[u8]) -> anyhow::Result<u64> {
    let mut wrong = 0;
    for b in recv {
        wrong += wrong_bytes(&c.read(C::r(b))?, want);
    }
    Ok(wrong)
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
    let t = timed_on(c, it, || {
        window(c, (0, 1), &bufs.send, win, &mut bufs.recv, &mut bufs.ack)
    })?;
    let bw = (size * win * it.iters) as f64 / t;
    let mut wrong = 0;
    if check {
        let want = pattern(size, 5);
        let patterned = c.upload(&want)?;
        window(c, (0, 1), &patterned, win, &mut bufs.recv, &mut bufs.ack)?;
        c.drain()?;
        if rank == 1 {
            wrong = wrong_in(c, &bufs.recv, &want)?;
        }
    }
    Ok(((rank == 0).then_some(bw), wrong))
}

/// The bi-directional bandwidth (bytes per second, both directions together) on rank 0 (`None` on
/// rank 1), and the bytes this rank received wrong in the check.
fn bibw<C: P2pBackend>(
    c: &C,
    bufs: &mut Buffers<C::Owned>,
    size: usize,
    it: Iters,
    check: bool,
) -> anyhow::Result<(Option<f64>, u64)> {
    let rank = c.rank();
    let peer = 1 - rank;
    let win = bufs.recv.len();
    let t = timed_on(c, it, || both_ways(c, peer, &bufs.send, &mut bufs.recv))?;
    let bw = (2 * size * win * it.iters) as f64 / t;
    let mut wrong = 0;
    if check {
        // Each rank sends its own pattern, so a message from itself or from nowhere counts.
        let patterned = c.upload(&pattern(size, 11 + rank))?;
        both_ways(c, peer, &patterned, &mut bufs.recv)?;
        c.drain()?;
        wrong = wrong_in(c, &bufs.recv, &pattern(size, 11 + peer))?;
    }
    Ok(((rank == 0).then_some(bw), wrong))
}

/// The multi-pair bandwidth (bytes per second, all pairs together) on every rank, and the bytes this
/// rank received wrong in the check. Every rank of `ctl` calls it; `bufs` is `None` on a rank that
/// is in no pair (the last one of an odd number).
#[allow(clippy::too_many_arguments)]
fn mbw_mr<C: P2pBackend>(
    c: &C,
    ctl: &MpiComm,
    mut bufs: Option<&mut Buffers<C::Owned>>,
    size: usize,
    win: usize,
    pairs: usize,
    it: Iters,
    check: bool,
) -> anyhow::Result<(f64, u64)> {
    let rank = c.rank();
    let pair = if rank < pairs {
        (rank, rank + pairs)
    } else {
        (rank.saturating_sub(pairs), rank)
    };
    let mut one = |send: Option<&C::Owned>| -> anyhow::Result<()> {
        if let Some(b) = bufs.as_deref_mut() {
            let Buffers {
                send: own,
                recv,
                ack,
                ..
            } = b;
            window(c, pair, send.unwrap_or(own), win, recv, ack)?;
            c.drain()?;
        }
        Ok(())
    };
    let mut t = 0.0;
    for i in 0..it.warmup + it.iters {
        ctl.barrier()?;
        let start = Instant::now();
        one(None)?;
        if i >= it.warmup && rank < pairs {
            t += start.elapsed().as_secs_f64();
        }
    }
    let mut sum = [t];
    ctl.all_reduce_in_place(&mut sum[..], ReduceOp::Sum)?;
    let avg = sum[0] / pairs.max(1) as f64;
    let bw = (pairs * size * win * it.iters) as f64 / avg;
    let mut wrong = 0;
    if check {
        // Each pair sends its own pattern.
        let salt = 13 + pair.0;
        let patterned = if rank < pairs {
            Some(c.upload(&pattern(size, salt))?)
        } else {
            None
        };
        ctl.barrier()?;
        one(patterned.as_ref())?;
        if rank >= pairs && rank < 2 * pairs {
            if let Some(b) = bufs.as_deref() {
                wrong = wrong_in(c, &b.recv, &pattern(size, salt))?;
            }
        }
    }
    Ok((bw, wrong))
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
    /// [`timed`] for the raw loops, whose MPI calls complete before they return.
    fn timed(it: Iters, step: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
        timed(it, || Ok(()), step)
    }

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
        let t = Raw::timed(it, || {
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
            Ok(())
        })? / (2 * it.iters.max(1)) as f64;
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
        let t = Raw::timed(it, || {
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
            Ok(())
        })?;
        Ok((rank == 0).then_some((size * win * it.iters) as f64 / t))
    }
}

/// The buffers of ranks 0 and 1 (`pt`), for the tests between two ranks.
fn two<O>(bufs: &mut Option<Buffers<O>>, pt: bool) -> Option<&mut Buffers<O>> {
    bufs.as_mut().filter(|_| pt)
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
    let (rank, pairs) = (c.rank(), c.size() / 2);
    let test = args.test;
    // Ranks 0 and 1 run the tests between two ranks; the multi-pair test every rank in a pair.
    let pt = rank < 2;
    let active = pt || (test.mbw_mr() && rank < 2 * pairs);
    let receives = (rank == 1 && test.bw())
        || (pt && test.bibw())
        || (test.mbw_mr() && rank >= pairs && rank < 2 * pairs);
    for &size in sizes {
        let mut row = P2pRow::new(c.backend().name(), size, pairs);
        let mut wrong = 0u64;
        let bufs = if active {
            Some(Buffers::new(c, size, win, receives))
        } else {
            None
        };
        // Every rank learns whether the others could allocate, so that all stop together.
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
        if test.latency() {
            ctl.barrier()?;
            if let Some(b) = two(&mut bufs, pt) {
                let (t, w) = latency(c, &mut b.ping, args.latency_iters(size), check)?;
                row.latency = t;
                wrong += w;
            }
            if let Some(r) = &raw {
                ctl.barrier()?;
                if let Some(ping) = two(&mut bufs, pt).and_then(|b| C::device(&mut b.ping)) {
                    row.raw_latency = r.latency(ping, args.latency_iters(size))?;
                }
            }
        }
        if test.bw() {
            ctl.barrier()?;
            if let Some(b) = two(&mut bufs, pt) {
                let (bw, w) = bandwidth(c, b, size, win, args.bw_iters(size), check)?;
                row.bandwidth = bw;
                wrong += w;
            }
            if let Some(r) = &raw {
                ctl.barrier()?;
                if let Some(b) = two(&mut bufs, pt) {
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
        if test.bibw() {
            ctl.barrier()?;
            if let Some(b) = two(&mut bufs, pt) {
                let (bw, w) = bibw(c, b, size, args.bw_iters(size), check)?;
                row.bibw = bw;
                wrong += w;
            }
        }
        if test.mbw_mr() {
            ctl.barrier()?;
            let (bw, w) = mbw_mr(
                c,
                ctl,
                bufs.as_mut(),
                size,
                win,
                pairs,
                args.mbw_iters(),
                check,
            )?;
            row.mbw = Some(bw);
            wrong += w;
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
    let availability = crate::cmd::doctor::backends_here(&ctl)?;
    let (backends, left_out) = backend::resolve_listed(args.backend, &availability)?;
    let raw_wanted = args.baseline == Some(Baseline::Raw);
    let nranks = ctl.size();
    let mut machine = Machine::here();
    if backends.contains(&Backend::Nccl) {
        machine.nccl_version = collectives_core::nccl_sys::library()
            .ok()
            .map(|l| l.version().to_string());
    }
    let format = if args.osu { Format::Osu } else { args.format };
    let mut doc = Document::new("p2p", nranks, machine).with_settings([
        ("window", serde_json::json!(args.window)),
        ("minbytes", serde_json::json!(args.sizes.min_bytes)),
        ("maxbytes", serde_json::json!(args.sizes.max_bytes)),
        ("check", serde_json::json!(args.check == 1)),
    ]);
    doc.backends = backends.iter().map(|b| b.name().to_string()).collect();
    doc.method = HOW.iter().map(|h| h.to_string()).collect();
    let mut sink = Sink::open(ctl.rank(), args.output.as_deref(), format, doc)?;
    if format == Format::Table {
        sink.lines(preamble(nranks, &backends, args.window, raw_wanted));
    } else {
        sink.begin(Vec::new);
    }
    for (b, why) in &left_out {
        let note = format!("{}: not available: {why}", b.name());
        sink.note(
            note.clone(),
            Some(format!("#  note: {note}")).filter(|_| format == Format::Table),
            Some(format!("collbench: note: {note}")),
        );
    }
    let mut rows: Vec<P2pRow> = Vec::new();
    for &b in &backends {
        let raw = raw_wanted && b == Backend::CudaMpi;
        if format == Format::Table {
            sink.lines(std::iter::once(format!("# backend {}", b.name())));
            sink.lines(table_header(raw_wanted));
        }
        let first = rows.len();
        let mut emit = |row: P2pRow| {
            sink.result(
                || match format {
                    Format::Table => vec![table_row(&row, raw_wanted)],
                    _ => Vec::new(),
                },
                |machine, nranks| row.records(nranks, machine, args),
            );
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
        if format == Format::Osu && sink.writes() {
            sink.lines(osu_tables(&rows[first..], args));
        }
    }
    let footer = match format {
        Format::Table => footer(&rows, args.check == 1),
        _ => Vec::new(),
    };
    sink.finish(|| footer)?;
    let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    let mut any = [wrong];
    ctl.all_reduce_in_place(&mut any[..], ReduceOp::Max)?;
    if any[0] > 0 {
        bail!("{} bytes were received wrong", any[0]);
    }
    Ok(())
}

/// The `#` lines above the table: the run, how each figure is measured, and with `raw` the raw
/// loops'.
pub fn preamble(nranks: usize, backends: &[Backend], window: u32, raw: bool) -> Vec<String> {
    let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    let mut v = vec![format!(
        "# collbench p2p: ranks 0 and 1 of {nranks}, backend {}, window {window}",
        names.join(",")
    )];
    v.extend(HOW.iter().map(|h| format!("#  {h}")));
    if raw {
        v.push("#  raw: MPI_Send/MPI_Recv and MPI_Isend/MPI_Irecv/MPI_Waitall on the device pointers of the same buffers (cuda-mpi only); bw ratio = ours / raw".to_string());
    }
    v
}

/// The table's closing lines: the bytes received wrong (with `-c 1`) and, with several backends,
/// the per-backend summary.
pub fn footer(rows: &[P2pRow], check: bool) -> Vec<String> {
    let mut v = Vec::new();
    if check {
        let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
        v.push(format!(
            "# wrong bytes total: {wrong} {}",
            if wrong == 0 { "OK" } else { "FAILED" }
        ));
    }
    v.extend(
        bandwidth_summary(rows)
            .into_iter()
            .map(|l| format!("# {l}")),
    );
    v
}

/// OSU's tables of one backend's rows: `osu_latency`'s, `osu_bw`'s, `osu_bibw`'s and
/// `osu_mbw_mr`'s, as measured.
pub fn osu_tables(rows: &[P2pRow], args: &P2pArgs) -> Vec<String> {
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    let validation = args.check == 1;
    let backend = first.backend;
    let test = args.test;
    let mut lines = Vec::new();
    let mut table = |t: P2pTest, value: &dyn Fn(&P2pRow) -> (f64, f64)| {
        if matches!(t, P2pTest::MbwMr { .. }) && !lines.is_empty() {
            // osu_mbw_mr's header starts without the blank line of the others.
            lines.push(String::new());
        }
        lines.extend(osu::p2p_header(t, backend, validation));
        for r in rows {
            let (seconds, bytes_per_s) = value(r);
            lines.push(osu::p2p_row(t, r.size, seconds, bytes_per_s, r.wrong));
        }
    };
    if test.latency() {
        table(P2pTest::Latency, &|r| (r.latency.unwrap_or(0.0), 0.0));
    }
    if test.bw() {
        table(P2pTest::Bw, &|r| (0.0, r.bandwidth.unwrap_or(0.0)));
    }
    if test.bibw() {
        table(P2pTest::Bibw, &|r| (0.0, r.bibw.unwrap_or(0.0)));
    }
    if test.mbw_mr() {
        let t = P2pTest::MbwMr {
            pairs: first.pairs,
            window: args.window as usize,
        };
        table(t, &|r| (0.0, r.mbw.unwrap_or(0.0)));
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
        assert_eq!(a.test, Test::All);
        assert!(a.test.latency() && a.test.bw() && a.test.bibw() && a.test.mbw_mr());
        assert!(!Test::Both.bibw() && !Test::Both.mbw_mr() && Test::Both.bw());
        assert_eq!(
            a.mbw_iters(),
            Iters {
                iters: 100,
                warmup: 10
            }
        );
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
        for (name, test) in [
            ("bibw", Test::Bibw),
            ("mbw-mr", Test::MbwMr),
            ("mbw_mr", Test::MbwMr),
            ("both", Test::Both),
        ] {
            assert_eq!(P2pArgs::from_flags(&["--test", name]).unwrap().test, test);
        }
        assert!(P2pArgs::from_flags(&["--backend", "gloo"]).is_err());
    }

    #[test]
    fn rows_render() {
        let r = P2pRow {
            backend: "cuda-mpi",
            size: 64 << 20,
            latency: Some(180e-6),
            bandwidth: Some(380e9),
            bibw: Some(700e9),
            mbw: Some(64e9),
            pairs: 1,
            raw_latency: Some(179e-6),
            raw_bandwidth: Some(386e9),
            wrong: Some(0),
        };
        let t = table_row(&r, true);
        assert!(t.contains("700000.00") && t.contains(" 954 "), "{t}");
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
                ("bibw", "library"),
                ("mbw_mr", "library"),
                ("latency", "raw"),
                ("bw", "raw")
            ]
        );
        assert_eq!(recs[0].time_us, 180.0);
        assert_eq!((recs[2].algbw_gbps, recs[2].iterations), (Some(700.0), 80));
        assert_eq!(recs[3].messages_per_s, Some(953.7));
        assert_eq!(recs[3].iterations, 40);
        assert_eq!((recs[1].algbw_gbps, recs[1].iterations), (Some(380.0), 40));
        assert_eq!(recs[0].csv_line().split(',').count(), Record::COLUMNS.len());
        let osu = osu_tables(std::slice::from_ref(&r), &args);
        assert!(
            osu.contains(&"# Size      Bandwidth (MB/s)        Validation".to_string()),
            "{osu:?}"
        );
        for title in [
            "# OSU MPI-CUDA Latency Test v7.4",
            "# OSU MPI-CUDA Bandwidth Test v7.4",
            "# OSU MPI-CUDA Bi-Directional Bandwidth Test v7.4",
            "# OSU MPI-CUDA Multiple Bandwidth / Message Rate Test v7.4",
            "# [ pairs: 1 ] [ window size: 4 ]",
            "67108864            64000.00            953.67              Pass",
        ] {
            assert!(osu.contains(&title.to_string()), "{title}: {osu:?}");
        }
        let only = P2pArgs::from_flags(&["--test", "mbw-mr"]).unwrap();
        let osu = osu_tables(std::slice::from_ref(&r), &only);
        assert_eq!(
            osu[0],
            "# OSU MPI-CUDA Multiple Bandwidth / Message Rate Test v7.4"
        );
        let mut r2 = r.clone();
        r2.backend = "nccl";
        r2.raw_bandwidth = None;
        assert_eq!(bandwidth_summary(&[r.clone(), r2]).len(), 3);
        assert!(bandwidth_summary(&[r]).is_empty());
    }

    #[test]
    fn a_window_is_completed_at_once() {
        use std::cell::Cell;
        use std::rc::Rc;
        /// Counts the waits of every request of a window.
        struct Counted(Rc<Cell<usize>>);
        impl collectives_core::Pending for Counted {
            fn wait(&mut self) -> collectives_core::Result<()> {
                self.0.set(self.0.get() + 1);
                Ok(())
            }
            fn test(&mut self) -> collectives_core::Result<bool> {
                self.wait().map(|()| true)
            }
        }
        let waits = Rc::new(Cell::new(0));
        complete_window(|s| {
            let window = (0..4)
                .map(|_| Ok(s.register(Box::new(Counted(waits.clone())))))
                .collect();
            // Nothing is waited for while the window is being started.
            assert_eq!(waits.get(), 0);
            window
        })
        .unwrap();
        assert_eq!(waits.get(), 4);
    }

    #[test]
    fn checks_count_bytes() {
        assert_eq!(wrong_bytes(&pattern(10, 1), &pattern(10, 1)), 0);
        assert_eq!(wrong_bytes(&pattern(10, 1), &pattern(10, 2)), 10);
        assert_eq!(wrong_bytes(&[1, 2], &[1]), 1);
    }
}

#[cfg(test)]
mod pinned {
    //! The text of `collbench p2p` as users see it, pinned byte for byte.
    use super::*;

    pub(super) fn rows() -> Vec<P2pRow> {
        // Every column measured, the raw loops too (cuda-mpi's), at 64 MiB.
        let [latency, bandwidth, bibw, mbw, raw_latency, raw_bandwidth] =
            [180e-6, 380e9, 700e9, 64e9, 179e-6, 386e9].map(Some);
        let full = P2pRow {
            latency,
            bandwidth,
            bibw,
            mbw,
            raw_latency,
            raw_bandwidth,
            wrong: Some(0),
            ..P2pRow::new("cuda-mpi", 64 << 20, 1)
        };
        let small = P2pRow {
            latency: Some(1.234e-6),
            bandwidth: Some(5.5e6),
            ..P2pRow::new("mpi", 8, 1)
        };
        let mid = P2pRow {
            latency: Some(12.5e-6),
            bandwidth: Some(1.5e9),
            bibw: Some(2.9e9),
            mbw: Some(1.2e9),
            wrong: Some(0),
            ..P2pRow::new("mpi", 4096, 1)
        };
        vec![full, small, mid]
    }

    pub(super) fn text() -> Vec<String> {
        let [full, small, mid] = &rows()[..] else {
            unreachable!()
        };
        let mut v = table_header(false);
        v.extend(table_header(true));
        v.push(table_row(small, false));
        v.push(table_row(mid, false));
        v.push(table_row(full, true));
        v.push(table_row(small, true));
        let all = P2pArgs::from_flags(&["--window", "4"]).unwrap();
        v.extend(osu_tables(&[small.clone(), mid.clone()], &all));
        let lat = P2pArgs::from_flags(&["--test", "latency", "-c", "0"]).unwrap();
        v.extend(osu_tables(&[small.clone(), mid.clone()], &lat));
        let nccl = P2pRow {
            backend: "nccl",
            ..small.clone()
        };
        v.extend(bandwidth_summary(&[small.clone(), mid.clone(), nccl]));
        v
    }

    #[test]
    fn text_is_unchanged() {
        assert_eq!(
            crate::output::sink::tests::text_of(&text()),
            include_str!("../../tests/golden/p2p.txt")
        );
    }
}

//! `collbench allreduce` on the MPI host backend: per size, warm-up, timed out-of-place and in-place
//! loops, optional baselines interleaved with them, and the `#wrong` check (the NCCL backend's twin is
//! [`crate::nccl`]).
//!
//! Per size and placement the order is: warm-up calls of every measured variant (the library, then the
//! raw baseline, then checked mode on), then for each variant a barrier and its timed loop, all on the same
//! buffers. After both placements, one more call per placement with the check inputs counts wrong
//! elements. All ranks make the same calls in the same order: every decision depends only on the
//! arguments.

use std::ffi::c_int;
use std::io::Write;
use std::marker::PhantomData;

use anyhow::{bail, Context};
use collectives_core::backend::mpi_host;
use collectives_core::check::check_op;
use collectives_core::{Communicator, MpiComm, ReduceOp};
use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use crate::backend::Backend;
use crate::dtype::{DataType, ElementVisitor};
use crate::expected::{poison, BenchElement, Pattern};
use crate::report::{Placement, Reporter, Row};
use crate::sizes;
use crate::timing::{self, Spread};

/// The communicators of one MPI-backend run.
#[derive(Debug)]
pub struct MpiComms {
    /// The measured communicator (checked mode as `--checked`).
    pub main: MpiComm,
    /// Barriers, the reductions of times and wrong counts: never checked, never measured.
    pub ctl: MpiComm,
    /// With `--checked-cost`: the same ranks with checked mode on.
    pub checked_on: Option<MpiComm>,
}

impl MpiComms {
    /// Make the communicators over all ranks of `universe`.
    ///
    /// # Errors
    /// Library errors while duplicating `MPI_COMM_WORLD`.
    pub fn new(
        universe: &mpi::environment::Universe,
        checked: bool,
        checked_cost: bool,
    ) -> anyhow::Result<Self> {
        let main = MpiComm::world(universe)?.with_checked(checked);
        let ctl = MpiComm::world(universe)?.with_checked(false);
        let checked_on = if checked_cost {
            Some(MpiComm::world(universe)?.with_checked(true))
        } else {
            None
        };
        Ok(MpiComms {
            main,
            ctl,
            checked_on,
        })
    }
}

/// What every size of a run shares.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Timed calls.
    pub iters: usize,
    /// Warm-up calls.
    pub warmup_iters: usize,
    /// Count wrong elements.
    pub check: bool,
    /// Time the raw `MPI_Allreduce` baseline too.
    pub baseline: bool,
}

/// Why `op` cannot reduce `dtype` on `backend` (the library's own error), or `Ok` when it can.
///
/// # Errors
/// [`collectives_core::Error::Unsupported`].
pub fn supported(dtype: DataType, op: ReduceOp, backend: Backend) -> collectives_core::Result<()> {
    struct Check(ReduceOp, Backend);
    impl ElementVisitor for Check {
        type Output = collectives_core::Result<()>;
        fn visit<T: BenchElement>(self, _: DataType) -> Self::Output {
            check_op::<T>("all_reduce", self.0, self.1.kind())
        }
    }
    dtype.visit(Check(op, backend))
}

/// Run `dtype` with `op` over `sizes` (bytes) on the MPI host backend, one row per size.
///
/// # Errors
/// Library errors (the same on every rank for the same arguments) and raw MPI errors.
pub fn run_mpi<W: Write>(
    comms: &MpiComms,
    settings: Settings,
    dtype: DataType,
    op: ReduceOp,
    sizes: &[usize],
    reporter: &mut Reporter<W>,
) -> anyhow::Result<()> {
    dtype.visit(MpiJob {
        comms,
        settings,
        op,
        sizes,
        reporter,
    })
}

struct MpiJob<'a, W: Write> {
    comms: &'a MpiComms,
    settings: Settings,
    op: ReduceOp,
    sizes: &'a [usize],
    reporter: &'a mut Reporter<W>,
}

impl<W: Write> ElementVisitor for MpiJob<'_, W> {
    type Output = anyhow::Result<()>;

    fn visit<T: BenchElement>(self, dtype: DataType) -> anyhow::Result<()> {
        let MpiJob {
            comms,
            settings,
            op,
            sizes,
            reporter,
        } = self;
        let (rank, nranks) = (comms.main.rank(), comms.main.size());
        let elem = std::mem::size_of::<T>();
        let counts = sizes::counts(sizes, elem);
        let max = counts.iter().copied().max().unwrap_or(0);
        let pattern = Pattern::<T>::new(op, rank, nranks);
        let alloc = || -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(max).ok()?;
            v.resize(max, T::zeroed());
            Some(v)
        };
        let buffers = (alloc(), alloc(), alloc());
        // Every rank learns whether all could allocate, so that all stop together if one cannot.
        let mut ok = [i32::from(
            buffers.0.is_some() && buffers.1.is_some() && buffers.2.is_some(),
        )];
        comms.ctl.all_reduce_in_place(&mut ok[..], ReduceOp::Min)?;
        let (Some(mut send), Some(mut recv), Some(mut inplace)) = buffers else {
            bail!(
                "cannot allocate 3 buffers of {} bytes on rank {rank}",
                max.saturating_mul(elem)
            );
        };
        if ok[0] == 0 {
            bail!(
                "a rank cannot allocate 3 buffers of {} bytes",
                max.saturating_mul(elem)
            );
        }
        pattern.fill(&mut send);
        let raw = settings
            .baseline
            .then(|| RawAllReduce::<T>::new(&comms.main, op));
        for count in counts {
            let (send, recv, inplace) = (&send[..count], &mut recv[..count], &mut inplace[..count]);
            let m = measure(
                comms,
                settings,
                op,
                raw.as_ref(),
                &pattern,
                send,
                recv,
                inplace,
            )?;
            reporter.row(m.row(Backend::Mpi, dtype, op, count, elem, nranks));
        }
        Ok(())
    }
}

/// One size's results, `[out-of-place, in-place]` each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Through the library.
    pub ours: [Spread; 2],
    /// The raw baseline, when measured.
    pub raw: Option<[Spread; 2]>,
    /// Through the library with checked mode on, when measured.
    pub checked_on: Option<[Spread; 2]>,
    /// Wrong elements summed over ranks, with `-c 1`.
    pub wrong: Option<[u64; 2]>,
}

impl Measured {
    /// Times in seconds per call in the order the variants ran: ours, then raw when `raw`, then checked
    /// mode on when `checked_on`; each as `[out-of-place, in-place]`.
    pub fn from_variants(
        spread: &[Spread],
        raw: bool,
        checked_on: bool,
        wrong: Option<[u64; 2]>,
    ) -> Self {
        let pair = |v: usize| [spread[2 * v], spread[2 * v + 1]];
        let variants = 1 + usize::from(raw) + usize::from(checked_on);
        Measured {
            ours: pair(0),
            raw: raw.then(|| pair(1)),
            checked_on: checked_on.then(|| pair(variants - 1)),
            wrong,
        }
    }

    /// The output row of `count` elements of `elem` bytes each over `nranks` ranks.
    pub fn row(
        &self,
        backend: Backend,
        dtype: DataType,
        op: ReduceOp,
        count: usize,
        elem: usize,
        nranks: usize,
    ) -> Row {
        let size = count * elem;
        let factor = timing::allreduce_busbw_factor(nranks);
        let placement = |p: usize| {
            let time = self.ours[p];
            let algbw = timing::algbw(size, time.avg);
            Placement {
                time,
                algbw,
                busbw: algbw * factor,
                wrong: self.wrong.map(|w| w[p]),
                raw: self.raw.map(|r| r[p]),
                checked_on: self.checked_on.map(|c| c[p]),
                iter: None,
            }
        };
        Row {
            backend: backend.name(),
            size,
            count,
            dtype: dtype.name(),
            redop: op.name(),
            root: -1,
            oop: placement(0),
            ip: placement(1),
            in_place: true,
        }
    }
}

/// The variants timed at one size, in the order they run.
enum Variant<'a, T> {
    Ours(&'a MpiComm),
    Raw(&'a RawAllReduce<T>),
}

impl<T: BenchElement> Variant<'_, T> {
    fn call(&self, op: ReduceOp, send: Option<&[T]>, buf: &mut [T]) -> anyhow::Result<()> {
        match (self, send) {
            (Variant::Ours(c), Some(send)) => c.all_reduce(send, buf, op)?,
            (Variant::Ours(c), None) => c.all_reduce_in_place(buf, op)?,
            (Variant::Raw(r), send) => r.call(send, buf)?,
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn measure<T: BenchElement>(
    comms: &MpiComms,
    settings: Settings,
    op: ReduceOp,
    raw: Option<&RawAllReduce<T>>,
    pattern: &Pattern<T>,
    send: &[T],
    recv: &mut [T],
    inplace: &mut [T],
) -> anyhow::Result<Measured> {
    let mut variants = vec![Variant::Ours(&comms.main)];
    variants.extend(raw.map(Variant::Raw));
    variants.extend(comms.checked_on.as_ref().map(Variant::Ours));
    // times[v][placement], this rank's seconds per call.
    let mut times = vec![[0.0f64; 2]; variants.len()];
    pattern.fill(inplace);
    for placement in 0..2 {
        let out_of_place = placement == 0;
        let (src, buf): (Option<&[T]>, &mut [T]) = if out_of_place {
            (Some(send), &mut *recv)
        } else {
            (None, &mut *inplace)
        };
        for _ in 0..settings.warmup_iters {
            for v in &variants {
                v.call(op, src, buf)?;
            }
        }
        for (v, t) in variants.iter().zip(&mut times) {
            comms.ctl.barrier()?;
            t[placement] = timing::per_call(settings.iters, || v.call(op, src, buf))?;
        }
    }
    let wrong = if settings.check {
        poison(recv);
        comms.main.all_reduce(send, recv, op)?;
        pattern.fill(inplace);
        comms.main.all_reduce_in_place(inplace, op)?;
        let mut w = [pattern.count_wrong(recv), pattern.count_wrong(inplace)];
        comms.ctl.all_reduce_in_place(&mut w[..], ReduceOp::Sum)?;
        Some(w)
    } else {
        None
    };
    let local: Vec<f64> = times.iter().flatten().copied().collect();
    let spread = timing::over_ranks(&comms.ctl, &local)?;
    Ok(Measured::from_variants(
        &spread,
        raw.is_some(),
        comms.checked_on.is_some(),
        wrong,
    ))
}

/// `MPI_Allreduce` called directly through `mpi::ffi` on a communicator's raw handle: the baseline that
/// shows what the library adds per call. Datatype and operation are looked up once, as a hand-written
/// MPI code would have them; an average is a sum followed by a division on each rank, as the library
/// does it.
#[derive(Debug)]
pub struct RawAllReduce<T> {
    comm: ffi::MPI_Comm,
    nranks: usize,
    datatype: ffi::MPI_Datatype,
    op: ffi::MPI_Op,
    avg: bool,
    _element: PhantomData<fn(T)>,
}

impl<T: BenchElement> RawAllReduce<T> {
    /// The baseline for elements `T` and `op` on `comm`'s handle (which must outlive every call).
    pub fn new(comm: &MpiComm, op: ReduceOp) -> Self {
        // SAFETY: the RSMPI_* operation handles are constants set up by rsmpi's C shim.
        let mpi_op = unsafe {
            match op {
                ReduceOp::Prod => ffi::RSMPI_PROD,
                ReduceOp::Min => ffi::RSMPI_MIN,
                ReduceOp::Max => ffi::RSMPI_MAX,
                _ => ffi::RSMPI_SUM,
            }
        };
        RawAllReduce {
            comm: comm.as_raw(),
            nranks: comm.size(),
            datatype: <T::Mpi as Equivalence>::equivalent_datatype().as_raw(),
            op: mpi_op,
            avg: op == ReduceOp::Avg,
            _element: PhantomData,
        }
    }

    /// All-reduce `send` into `buf`, or `buf` in place when `send` is `None`.
    ///
    /// # Errors
    /// Buffers of different lengths; a count beyond `c_int`; the MPI error code.
    pub fn call(&self, send: Option<&[T]>, buf: &mut [T]) -> anyhow::Result<()> {
        if send.is_some_and(|s| s.len() != buf.len()) {
            bail!("raw MPI_Allreduce: send and receive buffers differ in length");
        }
        let n =
            c_int::try_from(buf.len()).context("raw MPI_Allreduce: count exceeds an MPI int")?;
        let sendbuf = match send {
            Some(s) => s.as_ptr().cast(),
            None => mpi_host::in_place().cast_const(),
        };
        // SAFETY: `sendbuf` is either `send` (holding `n` elements of `T`, which `datatype` describes) or
        // MPI_IN_PLACE from the MPI's own header; `buf` holds `n` elements and is exclusively borrowed for
        // the call; `comm` is the handle of a communicator the caller keeps alive; MPI returns before the
        // borrows end.
        let rc = unsafe {
            ffi::MPI_Allreduce(
                sendbuf,
                buf.as_mut_ptr().cast(),
                n,
                self.datatype,
                self.op,
                self.comm,
            )
        };
        if rc != 0 {
            bail!("raw MPI_Allreduce failed with MPI error code {rc}");
        }
        if self.avg {
            buf.iter_mut().for_each(|x| *x = x.div_ranks(self.nranks));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_pairs_follow_the_library() {
        assert!(supported(DataType::Double, ReduceOp::Avg, Backend::Mpi).is_ok());
        assert!(supported(DataType::Complex128, ReduceOp::Prod, Backend::Mpi).is_ok());
        let e = supported(DataType::Int32, ReduceOp::Avg, Backend::Mpi)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("i32 with avg is not supported on the mpi backend"),
            "{e}"
        );
        assert!(supported(DataType::Half, ReduceOp::Sum, Backend::Mpi).is_err());
        assert!(supported(DataType::Complex64, ReduceOp::Max, Backend::Mpi).is_err());
    }

    #[test]
    fn nccl_reduces_every_real_type_and_complex_sum_and_avg() {
        for d in DataType::ALL {
            for o in ReduceOp::ALL {
                let complex = matches!(d, DataType::Complex64 | DataType::Complex128);
                let want = !complex || matches!(o, ReduceOp::Sum | ReduceOp::Avg);
                assert_eq!(
                    supported(d, o, Backend::Nccl).is_ok(),
                    want,
                    "{} {}",
                    d.name(),
                    o.name()
                );
            }
        }
    }

    #[test]
    fn measured_rows_pick_variants_in_order() {
        let s = |us: f64| Spread::uniform(us * 1e-6);
        let spread = [s(10.0), s(12.0), s(8.0), s(9.0), s(15.0), s(16.0)];
        let m = Measured::from_variants(&spread, true, true, Some([0, 2]));
        assert_eq!(m.ours, [s(10.0), s(12.0)]);
        assert_eq!(m.raw, Some([s(8.0), s(9.0)]));
        assert_eq!(m.checked_on, Some([s(15.0), s(16.0)]));
        let m = Measured::from_variants(&spread[..4], false, true, None);
        assert_eq!(m.raw, None);
        assert_eq!(m.checked_on, Some([s(8.0), s(9.0)]));
        let r = Measured::from_variants(&spread[..2], false, false, Some([1, 0])).row(
            Backend::Nccl,
            DataType::Float,
            ReduceOp::Sum,
            250,
            4,
            4,
        );
        assert_eq!(
            (r.backend, r.size, r.count, r.dtype, r.root),
            ("nccl", 1000, 250, "float", -1)
        );
        assert!((r.oop.algbw - 0.1).abs() < 1e-12, "{}", r.oop.algbw);
        assert_eq!(r.oop.busbw, r.oop.algbw * 1.5);
        assert_eq!((r.oop.wrong, r.ip.wrong), (Some(1), Some(0)));
        assert_eq!(r.oop.raw, None);
    }
}

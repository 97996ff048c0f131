//! Every collective on the [`crate::measure::engine`], one file of hooks each, named as nccl-tests
//! names them.
//!
//! # Sizes and bus bandwidth
//!
//! `size` is nccl-tests' size of each collective (bytes per rank of the larger buffer); `count` is
//! `size` in elements; `algbw = size / time`; `busbw = algbw x factor`, the factor that makes `busbw`
//! comparable with a link's bandwidth and across rank counts. Ours next to nccl-tests'
//! (`doc/PERFORMANCE.md`), `n` ranks:
//!
//! | collective | size (per rank) | ours | nccl-tests |
//! |---|---|---|---|
//! | `allreduce` | the buffer | `2(n-1)/n` | `2(n-1)/n` |
//! | `allgather` | the gathered buffer (`n` blocks) | `(n-1)/n` | `(n-1)/n` |
//! | `allgatherv` | the gathered buffer (uneven blocks) | `(n-1)/n` | (none) |
//! | `reducescatter` | the send buffer (`n` blocks) | `(n-1)/n` | `(n-1)/n` |
//! | `broadcast` | the buffer | `1` | `1` |
//! | `reduce` | the buffer | `1` | `1` |
//! | `alltoall` | the send buffer (`n` blocks) | `(n-1)/n` | `(n-1)/n` |
//! | `alltoallv` | the send buffer (uneven blocks) | `(n-1)/n` | (none) |
//! | `gather` | the gathered buffer on the root | `(n-1)/n` | `(n-1)/n` |
//! | `gatherv` | the gathered buffer (uneven blocks) | `(n-1)/n` | (none) |
//! | `scatter` | the scattered buffer on the root | `(n-1)/n` | `(n-1)/n` |
//! | `scatterv` | the scattered buffer (uneven blocks) | `(n-1)/n` | (none) |
//! | `sendrecv` | the buffer sent to the next rank | `1` | `1` |
//! | `barrier` | 0 (one row) | `0` | (none) |
//!
//! The uneven collectives give rank `i` a share proportional to `i + 1`
//! ([`uneven_counts`]); `alltoallv` sends `c(i, j)` elements from rank `i` to rank `j`
//! ([`alltoallv`]).
//!
//! # Check patterns
//!
//! Reducing collectives use [`crate::measure::expected`]'s inputs (exact in every type for every operation);
//! the others put [`crate::measure::expected::moved`]`(rank, i)` at element `i` of rank `rank`: a small integer (or Gaussian
//! integer) that differs between ranks, so an element from the wrong rank or the wrong place counts as
//! wrong.
//!
//! # Adding a collective
//!
//! One file here implementing [`Collective`], one variant of [`CollName`] and one line of
//! [`CollName::run`]; nothing in the engine or the backends.

use std::io::Write;

use collectives_core::ReduceOp;

use crate::measure::dtype::{DataType, ElementVisitor};
use crate::measure::engine::{self, Settings};
use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, Collective};
use crate::measure::persistent::PersistentForm;
use crate::output::report::Reporter;

/// One collective's `Hooks`: `hooks! { "name", items }` declares the unit type `Hooks` (debug-printable,
/// documented as the hooks of `name`) and implements [`Collective`] for it with `NAME` = `"name"`
/// and the given items (constants and hook functions, as in a trait impl). `Collective` must be
/// in scope where it is called.
macro_rules! hooks {
    ($name:literal, $($item:tt)*) => {
        #[doc = concat!("The hooks of `", $name, "`.")]
        #[derive(Debug)]
        pub struct Hooks;

        impl Collective for Hooks {
            const NAME: &'static str = $name;

            $($item)*
        }
    };
}

pub mod allgather;
pub mod allgatherv;
pub mod allreduce;
pub mod alltoall;
pub mod alltoallv;
pub mod barrier;
pub mod broadcast;
pub mod gather;
pub mod gatherv;
mod persistent;
pub mod reduce;
pub mod reducescatter;
pub mod scatter;
pub mod scatterv;
pub mod sendrecv;

/// Uneven per-rank counts summing to at most `total`: rank `i` gets a share proportional to `i + 1`.
pub fn uneven_counts(total: usize, nranks: usize) -> Vec<usize> {
    let weight = nranks * (nranks + 1) / 2;
    (0..nranks)
        .map(|i| total / weight.max(1) * (i + 1))
        .collect()
}

/// The shape of an uneven collective of about `count` elements ([`uneven_counts`]): `buffers(total,
/// own)` gives the send and receive buffers' lengths from the sum of the blocks and this rank's block.
pub fn uneven(
    count: usize,
    ctx: &crate::measure::hooks::Ctx,
    buffers: impl Fn(usize, usize) -> (usize, usize),
) -> crate::measure::hooks::Shape {
    let counts = uneven_counts(count, ctx.nranks);
    let total = counts.iter().sum();
    let (send, recv) = buffers(total, counts[ctx.rank]);
    crate::measure::hooks::Shape {
        count: total,
        send,
        recv,
        counts,
    }
}

/// Where block `rank` starts in `counts` laid back to back.
pub fn offset(counts: &[usize], rank: usize) -> usize {
    counts[..rank].iter().sum()
}

/// The rank whose block holds element `i` of `counts` laid back to back, and the index inside it.
pub fn locate(counts: &[usize], mut i: usize) -> Option<(usize, usize)> {
    for (r, &c) in counts.iter().enumerate() {
        if i < c {
            return Some((r, i));
        }
        i -= c;
    }
    None
}

macro_rules! collectives {
    ($($variant:ident => $module:ident),* $(,)?) => {
        /// A collective, by its nccl-tests name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
        pub enum CollName {
            $(
                #[doc = concat!("`", stringify!($module), "`")]
                $variant,
            )*
        }

        impl CollName {
            /// Every collective.
            pub const ALL: &'static [CollName] = &[$(CollName::$variant),*];

            /// The name (`allreduce`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(CollName::$variant => <$module::Hooks as Collective>::NAME,)*
                }
            }

            /// The bus-bandwidth factor for `nranks`.
            pub fn busbw_factor(self, nranks: usize) -> f64 {
                match self {
                    $(CollName::$variant => <$module::Hooks as Collective>::busbw_factor(nranks),)*
                }
            }

            /// Whether it reduces (`-o` applies).
            pub const fn reduces(self) -> bool {
                match self {
                    $(CollName::$variant => <$module::Hooks as Collective>::REDUCES,)*
                }
            }

            /// Whether it has a root (`-r` applies).
            pub const fn rooted(self) -> bool {
                match self {
                    $(CollName::$variant => <$module::Hooks as Collective>::ROOTED,)*
                }
            }

            /// The library call that makes its persistent plan (`all_reduce_init`, ...); `None`
            /// where the library has none (`sendrecv`).
            pub const fn persistent_init(self) -> Option<&'static str> {
                match self {
                    $(CollName::$variant => <$module::Hooks as PersistentForm>::INIT,)*
                }
            }

            /// Run it with `dtype` and `op` on each of `variants` (backends of one kind that time
            /// different calls: [`crate::measure::variant`]), size by size, the variants in turn at each size.
            ///
            /// # Errors
            /// As [`engine::run`]; no variant.
            pub fn run<B: BenchBackend, W: Write>(
                self,
                variants: &[B],
                settings: Settings,
                dtype: DataType,
                op: ReduceOp,
                sizes: &[usize],
                reporter: &mut Reporter<W>,
            ) -> anyhow::Result<()> {
                match self {
                    $(CollName::$variant => dtype.visit(Visit::<$module::Hooks, B, W> {
                        variants, settings, op, sizes, reporter, _k: std::marker::PhantomData,
                    }),)*
                }
            }
        }
    };
}

collectives! {
    Allreduce => allreduce,
    Allgather => allgather,
    Allgatherv => allgatherv,
    Reducescatter => reducescatter,
    Broadcast => broadcast,
    Reduce => reduce,
    Alltoall => alltoall,
    Alltoallv => alltoallv,
    Gather => gather,
    Gatherv => gatherv,
    Scatter => scatter,
    Scatterv => scatterv,
    Sendrecv => sendrecv,
    Barrier => barrier,
}

impl CollName {
    /// The collective called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// The bus-bandwidth factor as text (the table above).
    pub fn busbw_text(self) -> &'static str {
        crate::output::report::busbw_factor_text(self.name())
    }
}

struct Visit<'a, K, B, W: Write> {
    variants: &'a [B],
    settings: Settings,
    op: ReduceOp,
    sizes: &'a [usize],
    reporter: &'a mut Reporter<W>,
    _k: std::marker::PhantomData<K>,
}

impl<K: PersistentForm, B: BenchBackend, W: Write> ElementVisitor for Visit<'_, K, B, W> {
    type Output = anyhow::Result<()>;
    fn visit<T: BenchElement>(self, dtype: DataType) -> anyhow::Result<()> {
        let Visit {
            variants,
            settings,
            op,
            sizes,
            reporter,
            _k,
        } = self;
        let counts = crate::measure::sizes::counts(sizes, std::mem::size_of::<T>());
        let [first, ..] = variants else {
            anyhow::bail!("{}: no backend to run on", K::NAME);
        };
        if variants.len() == 1 {
            return engine::run::<K, B, T, W>(first, settings, dtype, op, &counts, reporter);
        }
        // Several variants: size by size, each variant in turn, so that all see the machine in the
        // same state; sizes that round to the same buffers run once, as in one engine run.
        let ctx = crate::measure::hooks::Ctx::of(first.comm(), settings.root, op);
        let counts = if K::SIZED { counts } else { vec![0] };
        let mut last = None;
        for c in counts {
            let shape = K::shape(c, &ctx).count;
            if last == Some(shape) {
                continue;
            }
            last = Some(shape);
            for b in variants {
                engine::run::<K, B, T, W>(b, settings, dtype, op, &[c], reporter)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A single-process check of a collective's hooks: every rank's output is computed here from
    //! every rank's input by the collective's definition, then compared with the hooks' answer.
    use super::*;
    use crate::measure::hooks::{count_wrong, fill, Ctx, Shape};

    /// The contexts and shapes of `nranks` ranks for `count`.
    pub fn ranks<K: Collective>(
        count: usize,
        nranks: usize,
        root: usize,
        op: ReduceOp,
    ) -> Vec<(Ctx, Shape)> {
        (0..nranks)
            .map(|rank| {
                let ctx = Ctx {
                    rank,
                    nranks,
                    root,
                    op,
                };
                (ctx, K::shape(count, &ctx))
            })
            .collect()
    }

    /// Every rank's input.
    pub fn inputs<K: Collective, T: BenchElement>(ranks: &[(Ctx, Shape)]) -> Vec<Vec<T>> {
        ranks.iter().map(|(c, s)| fill::<K, T>(c, s)).collect()
    }

    /// For `nranks` ranks each: the ranks of `count` elements with root `root(n)` and `op`, their
    /// inputs, and `outputs(ranks, inputs)`, a correct run's output per rank, [`check`]ed.
    pub fn simulate<K: Collective, T: BenchElement>(
        count: usize,
        nranks: std::ops::Range<usize>,
        root: impl Fn(usize) -> usize,
        op: ReduceOp,
        outputs: impl Fn(&[(Ctx, Shape)], &[Vec<T>]) -> Vec<Vec<T>>,
    ) {
        for n in nranks {
            let r = ranks::<K>(count, n, root(n), op);
            let ins = inputs::<K, T>(&r);
            check::<K, T>(&r, &outputs(&r, &ins));
        }
    }

    /// A correct gather's output per rank: every rank's input in rank order on the root, nothing
    /// elsewhere (for [`simulate`]).
    pub fn gathered<T: BenchElement>(ranks: &[(Ctx, Shape)], inputs: &[Vec<T>]) -> Vec<Vec<T>> {
        ranks
            .iter()
            .map(|(c, _)| {
                if c.is_root() {
                    inputs.concat()
                } else {
                    Vec::new()
                }
            })
            .collect()
    }

    /// Check `outputs` (one per rank) with the hooks: the wrong count of every rank, and that
    /// corrupting one checked element of each rank that has one makes it wrong.
    pub fn check<K: Collective, T: BenchElement>(ranks: &[(Ctx, Shape)], outputs: &[Vec<T>]) {
        for ((ctx, shape), out) in ranks.iter().zip(outputs) {
            assert_eq!(
                count_wrong::<K, T>(ctx, shape, out, 0.0),
                0,
                "rank {} of {}",
                ctx.rank,
                K::NAME
            );
            if let Some(i) = (0..out.len()).find(|&i| K::expected::<T>(ctx, shape, i).is_some()) {
                let mut bad = out.clone();
                bad[i] = T::from_parts(-99, 5);
                assert_eq!(
                    count_wrong::<K, T>(ctx, shape, &bad, 0.0),
                    1,
                    "corrupted rank {}",
                    ctx.rank
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::expected::moved;

    #[test]
    fn busbw_factors_follow_nccl_tests() {
        let f = |c: CollName, n| c.busbw_factor(n);
        assert_eq!(f(CollName::Allreduce, 4), 1.5);
        assert_eq!(f(CollName::Allreduce, 1), 0.0);
        for c in [
            CollName::Allgather,
            CollName::Allgatherv,
            CollName::Reducescatter,
            CollName::Alltoall,
            CollName::Alltoallv,
            CollName::Gather,
            CollName::Gatherv,
            CollName::Scatter,
            CollName::Scatterv,
        ] {
            assert_eq!(f(c, 4), 0.75, "{}", c.name());
            assert_eq!(f(c, 1), 0.0);
            assert_eq!(c.busbw_text(), "(n-1)/n");
        }
        for c in [CollName::Broadcast, CollName::Reduce, CollName::Sendrecv] {
            assert_eq!(f(c, 4), 1.0, "{}", c.name());
            assert_eq!(c.busbw_text(), "1");
        }
        assert_eq!(f(CollName::Barrier, 4), 0.0);
        assert_eq!(CollName::Barrier.busbw_text(), "0");
        assert_eq!(CollName::Allreduce.busbw_text(), "2(n-1)/n");
    }

    #[test]
    fn names_are_nccl_tests_names() {
        let names: Vec<&str> = CollName::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "allreduce",
                "allgather",
                "allgatherv",
                "reducescatter",
                "broadcast",
                "reduce",
                "alltoall",
                "alltoallv",
                "gather",
                "gatherv",
                "scatter",
                "scatterv",
                "sendrecv",
                "barrier"
            ]
        );
        for c in CollName::ALL {
            assert_eq!(CollName::from_name(c.name()), Some(*c));
        }
        assert!(CollName::Reduce.reduces() && !CollName::Gather.reduces());
    }

    #[test]
    fn moved_values_differ_between_ranks_and_are_exact() {
        for i in 0..200 {
            for r in 0..8 {
                for q in (r + 1)..8 {
                    assert_ne!(moved::<i8>(r, i), moved::<i8>(q, i));
                }
                let v: half::bf16 = moved(r, i);
                assert_eq!(v.to_f32(), ((i * 3 + r * 17 + 1) % 101) as f32);
            }
        }
    }

    #[test]
    fn uneven_counts_and_offsets() {
        assert_eq!(uneven_counts(60, 3), [10, 20, 30]);
        assert_eq!(uneven_counts(64, 3), [10, 20, 30]);
        assert_eq!(uneven_counts(2, 3), [0, 0, 0]);
        assert_eq!(offset(&[10, 20, 30], 2), 30);
        assert_eq!(locate(&[10, 0, 30], 15), Some((2, 5)));
        assert_eq!(locate(&[10, 20, 30], 60), None);
    }
}

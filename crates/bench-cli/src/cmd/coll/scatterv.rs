//! `scatterv`: block `r` of the root's buffer to rank `r`, blocks of uneven length
//! ([`super::uneven_counts`]).

use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, Collective, Ctx, Shape};
use collectives_core::Communicator;

use super::{moved, offset, uneven_counts};

/// The hooks of `scatterv`.
#[derive(Debug)]
pub struct Hooks;

impl Collective for Hooks {
    const NAME: &'static str = "scatterv";
    const ROOTED: bool = true;

    fn busbw_factor(nranks: usize) -> f64 {
        super::n_minus_one_over_n(nranks)
    }
    /// `count` is the root's buffer, shared unevenly.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        let counts = uneven_counts(count, ctx.nranks);
        let total = counts.iter().sum();
        let send = if ctx.rank == ctx.root { total } else { 0 };
        Shape {
            count: total,
            send,
            recv: counts[ctx.rank],
            counts,
        }
    }
    fn input<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> T {
        moved(ctx.rank, i)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        Some(moved(ctx.root, offset(&shape.counts, ctx.rank) + i))
    }
    fn run<B: BenchBackend, T: BenchElement>(
        b: &B,
        ctx: &Ctx,
        shape: &Shape,
        send: &B::Owned<T>,
        recv: &mut B::Owned<T>,
    ) -> anyhow::Result<()> {
        let send = (ctx.rank == ctx.root).then(|| B::buf(send));
        Ok(b.comm()
            .scatter_v(send, B::buf_mut(recv), &shape.counts, ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::{check, inputs, ranks};
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        for n in 1..5 {
            let r = ranks::<Hooks>(100, n, 0, ReduceOp::Sum);
            let ins = inputs::<Hooks, i64>(&r);
            let counts = &r[0].1.counts;
            let outs: Vec<Vec<i64>> = (0..n)
                .map(|me| {
                    let at = offset(counts, me);
                    ins[0][at..at + counts[me]].to_vec()
                })
                .collect();
            check::<Hooks, i64>(&r, &outs);
        }
    }
}

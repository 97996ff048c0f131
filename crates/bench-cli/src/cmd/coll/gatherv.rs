//! `gatherv`: every rank's block to the root, blocks of uneven length ([`super::uneven_counts`]).

use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, Collective, Ctx, Shape};
use collectives_core::Communicator;

use super::{locate, moved, uneven_counts};

/// The hooks of `gatherv`.
#[derive(Debug)]
pub struct Hooks;

impl Collective for Hooks {
    const NAME: &'static str = "gatherv";
    const ROOTED: bool = true;

    fn busbw_factor(nranks: usize) -> f64 {
        super::n_minus_one_over_n(nranks)
    }
    /// `count` is the gathered buffer, shared unevenly.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        let counts = uneven_counts(count, ctx.nranks);
        let total = counts.iter().sum();
        let recv = if ctx.rank == ctx.root { total } else { 0 };
        Shape {
            count: total,
            send: counts[ctx.rank],
            recv,
            counts,
        }
    }
    fn input<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> T {
        moved(ctx.rank, i)
    }
    fn expected<T: BenchElement>(_: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        locate(&shape.counts, i).map(|(r, j)| moved(r, j))
    }
    fn run<B: BenchBackend, T: BenchElement>(
        b: &B,
        ctx: &Ctx,
        shape: &Shape,
        send: &B::Owned<T>,
        recv: &mut B::Owned<T>,
    ) -> anyhow::Result<()> {
        let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
        Ok(b.comm()
            .gather_v(B::buf(send), recv, &shape.counts, ctx.root)?)
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
            let r = ranks::<Hooks>(60, n, 0, ReduceOp::Sum);
            let ins = inputs::<Hooks, half::f16>(&r);
            let outs: Vec<Vec<half::f16>> = (0..n)
                .map(|me| if me == 0 { ins.concat() } else { Vec::new() })
                .collect();
            check::<Hooks, half::f16>(&r, &outs);
        }
    }
}

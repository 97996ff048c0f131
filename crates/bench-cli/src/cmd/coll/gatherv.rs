//! `gatherv`: every rank's block to the root, blocks of uneven length ([`super::uneven_counts`]).

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

use super::{locate, uneven};

hooks! {
    "gatherv",
    const ROOTED: bool = true;

    /// `count` is the gathered buffer, shared unevenly.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        uneven(count, ctx, |total, own| (own, ctx.on_root(total)))
    }
    fn expected<T: BenchElement>(_: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        locate(&shape.counts, i).map(|(r, j)| moved(r, j))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let recv = c.ctx.is_root().then_some(c.recv);
        Ok(b.comm()
            .gather_v(c.send, recv, &c.shape.counts, c.ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::{gathered, simulate};
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, half::f16>(60, 1..5, |_| 0, ReduceOp::Sum, gathered);
    }
}

//! `gather`: every rank's block to the root, in rank order.

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "gather",
    const ROOTED: bool = true;

    /// `count` is the gathered buffer (`n` blocks), as in nccl-tests; rounded down to whole blocks.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        Shape::blocks(count, ctx.nranks, 1, ctx.on_root(ctx.nranks))
    }
    fn expected<T: BenchElement>(_: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        Some(moved(i / shape.send, i % shape.send))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let recv = c.ctx.is_root().then_some(c.recv);
        Ok(b.comm().gather(c.send, recv, c.ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::{gathered, simulate};
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, u64>(77, 1..5, |n| n / 2, ReduceOp::Sum, gathered);
    }
}

//! `allgather`: every rank gets every rank's block, in rank order.

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "allgather",
    /// `count` is the gathered buffer (`n` blocks), as in nccl-tests; rounded down to whole blocks.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        Shape::blocks(count, ctx.nranks, 1, ctx.nranks)
    }
    fn expected<T: BenchElement>(_: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        Some(moved(i / shape.send, i % shape.send))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        Ok(b.comm().all_gather(c.send, c.recv)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, f32>(
            101,
            1..5,
            |_| 0,
            ReduceOp::Sum,
            |r, ins| {
                let n = r.len();
                assert_eq!((r[0].1.send, r[0].1.recv), (101 / n, 101 / n * n));
                vec![ins.concat(); n]
            },
        );
    }
}

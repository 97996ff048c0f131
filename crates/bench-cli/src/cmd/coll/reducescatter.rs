//! `reducescatter`: block `r` of the reduction of every rank's `n` blocks goes to rank `r`.

use crate::measure::expected::{expected_value, input_value, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "reducescatter",
    const REDUCES: bool = true;

    /// `count` is the send buffer (`n` blocks), as in nccl-tests; rounded down to whole blocks.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        Shape::blocks(count, ctx.nranks, ctx.nranks, 1)
    }
    fn input<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> T {
        input_value(ctx.op, ctx.rank, ctx.nranks, i)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        Some(expected_value(
            ctx.op,
            ctx.nranks,
            ctx.rank * shape.recv + i,
        ))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        Ok(b.comm().reduce_scatter(c.send, c.recv, c.ctx.op)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, u8>(
            100,
            1..5,
            |_| 0,
            ReduceOp::Max,
            |r, ins| {
                let (n, per) = (r.len(), 100 / r.len());
                assert_eq!((r[0].1.count, r[0].1.recv), (per * n, per));
                let max = |k: usize, i: usize| ins.iter().map(|x| x[k * per + i]).max().unwrap();
                (0..n)
                    .map(|k| (0..per).map(|i| max(k, i)).collect())
                    .collect()
            },
        );
    }
}

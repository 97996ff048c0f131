//! `scatter`: block `r` of the root's buffer to rank `r`.

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "scatter",
    const ROOTED: bool = true;

    /// `count` is the root's buffer (`n` blocks), as in nccl-tests; rounded down to whole blocks.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        Shape::blocks(count, ctx.nranks, ctx.on_root(ctx.nranks), 1)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        Some(moved(ctx.root, ctx.rank * shape.recv + i))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let send = c.ctx.is_root().then_some(c.send);
        Ok(b.comm().scatter(send, c.recv, c.ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, num_complex::Complex<f32>>(
            64,
            1..5,
            |n| n - 1,
            ReduceOp::Sum,
            |r, ins| {
                let (n, per) = (r.len(), 64 / r.len());
                (0..n)
                    .map(|me| ins[n - 1][me * per..(me + 1) * per].to_vec())
                    .collect()
            },
        );
    }
}

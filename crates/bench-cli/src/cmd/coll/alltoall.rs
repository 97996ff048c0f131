//! `alltoall`: block `j` of rank `i` goes to rank `j`, arriving as its block `i`.

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "alltoall",
    /// `count` is each rank's buffer (`n` blocks), as in nccl-tests; rounded down to whole blocks.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        Shape::blocks(count, ctx.nranks, ctx.nranks, ctx.nranks)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        let per = shape.recv / ctx.nranks;
        Some(moved(i / per, ctx.rank * per + i % per))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        Ok(b.comm().all_to_all(c.send, c.recv)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, f64>(
            50,
            1..5,
            |_| 0,
            ReduceOp::Sum,
            |r, ins| {
                let (n, per) = (r.len(), 50 / r.len());
                let block = |s: usize, me: usize| ins[s][me * per..(me + 1) * per].to_vec();
                (0..n)
                    .map(|me| (0..n).flat_map(|s| block(s, me)).collect())
                    .collect()
            },
        );
    }
}

//! `scatterv`: block `r` of the root's buffer to rank `r`, blocks of uneven length
//! ([`super::uneven_counts`]).

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

use super::{offset, uneven};

hooks! {
    "scatterv",
    const ROOTED: bool = true;

    /// `count` is the root's buffer, shared unevenly.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        uneven(count, ctx, |total, own| (ctx.on_root(total), own))
    }
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        Some(moved(ctx.root, offset(&shape.counts, ctx.rank) + i))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let send = c.ctx.is_root().then_some(c.send);
        Ok(b.comm()
            .scatter_v(send, c.recv, &c.shape.counts, c.ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, i64>(
            100,
            1..5,
            |_| 0,
            ReduceOp::Sum,
            |r, ins| {
                let counts = &r[0].1.counts;
                let block = |me: usize| {
                    ins[0][offset(counts, me)..offset(counts, me) + counts[me]].to_vec()
                };
                (0..r.len()).map(block).collect()
            },
        );
    }
}

//! `allgatherv`: every rank gets every rank's block, blocks of uneven length
//! ([`super::uneven_counts`]).

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

use super::{locate, uneven};

hooks! {
    "allgatherv",
    /// `count` is the gathered buffer, shared unevenly.
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        uneven(count, ctx, |total, own| (own, total))
    }
    fn expected<T: BenchElement>(_: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        locate(&shape.counts, i).map(|(r, j)| moved(r, j))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        Ok(b.comm().all_gather_v(c.send, c.recv, &c.shape.counts)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, i8>(
            120,
            1..5,
            |_| 0,
            ReduceOp::Sum,
            |r, ins| {
                let n = r.len();
                assert_eq!(ins.iter().map(Vec::len).sum::<usize>(), r[0].1.recv);
                assert!(n == 1 || ins[n - 1].len() > ins[0].len());
                vec![ins.concat(); n]
            },
        );
    }
}

//! `alltoallv`: rank `i` sends [`c`]`(base, i, j)` elements to rank `j` (uneven, and not symmetric).

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

use super::{locate, offset};

/// `base` of a row of about `count` elements per rank over `nranks`.
pub fn base(count: usize, nranks: usize) -> usize {
    count / (3 * nranks)
}

/// Elements from rank `src` to rank `dst` in a row of `base`: `base x (1 + (src + 2 dst) mod 3)`.
pub fn c(base: usize, src: usize, dst: usize) -> usize {
    base * (1 + (src + 2 * dst) % 3)
}

hooks! {
    "alltoallv",
    /// `counts` holds the send counts, the receive counts, then `base`; the `count` column is the
    /// average send buffer over ranks (the same on every rank).
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        let n = ctx.nranks;
        let b = base(count, n);
        let send: Vec<usize> = (0..n).map(|j| c(b, ctx.rank, j)).collect();
        let recv: Vec<usize> = (0..n).map(|i| c(b, i, ctx.rank)).collect();
        let all: usize = (0..n)
            .map(|i| (0..n).map(|j| c(b, i, j)).sum::<usize>())
            .sum();
        Shape {
            count: all / n,
            send: send.iter().sum(),
            recv: recv.iter().sum(),
            counts: [send, recv, vec![b]].concat(),
        }
    }
    fn expected<T: BenchElement>(ctx: &Ctx, shape: &Shape, i: usize) -> Option<T> {
        let n = ctx.nranks;
        let (src, k) = locate(&shape.counts[n..2 * n], i)?;
        let b = shape.counts[2 * n];
        // Where this rank's block starts in `src`'s send buffer.
        let src_send: Vec<usize> = (0..n).map(|j| c(b, src, j)).collect();
        Some(moved(src, offset(&src_send, ctx.rank) + k))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let (sc, rc) = c.shape.counts.split_at(c.ctx.nranks);
        Ok(b.comm()
            .all_to_all_v(c.send, sc, c.recv, &rc[..c.ctx.nranks])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, i32>(
            90,
            1..5,
            |_| 0,
            ReduceOp::Sum,
            |r, ins| {
                let n = r.len();
                let block = |s: usize, me: usize| {
                    let sc = &r[s].1.counts[..n];
                    ins[s][offset(sc, me)..offset(sc, me) + sc[me]].to_vec()
                };
                let outs: Vec<Vec<i32>> = (0..n)
                    .map(|me| (0..n).flat_map(|s| block(s, me)).collect())
                    .collect();
                assert!(outs.iter().zip(r).all(|(o, (_, s))| o.len() == s.recv));
                outs
            },
        );
    }
}

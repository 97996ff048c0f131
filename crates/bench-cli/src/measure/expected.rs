//! Inputs and expected results for the `#wrong` check.
//!
//! Rank `r` puts `input(op, r, n, i)` at element `i` (a small integer, or a small Gaussian integer for
//! complex types), so that every result is exact in every element type and the expected value can be
//! computed here, independently of the library, by folding the inputs of all ranks. The pattern repeats
//! every [`PERIOD`] elements, so a rank computes [`PERIOD`] expected values, not one per element per rank.
//!
//! | op | real input at element `i` of rank `r` (`j = i % PERIOD`) | complex input |
//! |---|---|---|
//! | sum | `(j + 3r) % 5` | `(j + 3r) % 5 + ((2j + r) % 3)·i` |
//! | prod | `2` where `(j + r) % 4 == 0`, else `1` | `iᵏ` with `k = (j + r) % 4` (exercises complex multiplication) |
//! | min, max | `(j + 3r) % 5` | (not defined for complex) |
//! | avg | `j % 5 + 1 + s(r)` | `j % 5 + 1 + s(r) + (j % 3 + 1 + s(r))·i` |
//!
//! where `s(r)` is `+1` on even ranks that have an odd partner, `-1` on odd ranks and `0` on a last unpaired
//! rank: it sums to zero, so the average is exactly `j % 5 + 1` for any number of ranks, whether an
//! implementation divides at the end or scales before summing. Integer sums and products wrap as
//! two's-complement arithmetic does (the expected value wraps the same way); float sums stay exact while
//! they stay below 2^24 (`f32`), 2^11 (`f16`) or 2^8 (`bf16`), i.e. up to a few dozen ranks for `bf16`.
//!
//! Results are compared exactly, with one exception ([`tolerance`]): NCCL averages floating-point
//! types as a sum of inputs each multiplied by `1/n` (`ncclAvg` is a pre-multiplied sum for them), and
//! `1/n` and the products round unless `n` is a power of two. Each of the `n` products and `n - 1`
//! additions rounds once, and every average input is non-negative, so the result is within
//! `(n + 1)·ε/2 ≤ n·ε` of the exact average relative to it (`ε`: the type's machine epsilon); that is
//! the bound used.

use half::{bf16, f16};
use num_complex::Complex;

use collectives_core::{BackendKind, Element, ElementKind, ReduceOp};

/// The inputs repeat every `PERIOD` elements.
pub const PERIOD: usize = 60;

/// An element type that collbench can fill, reduce locally and compare.
pub trait BenchElement: Element {
    /// The value `re + im·i` (`im` is ignored by real types); integers wrap, floats round.
    fn from_parts(re: i64, im: i64) -> Self;
    /// `a op b` for sum, prod, min and max (avg folds as a sum); integers wrap.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
    /// `self / n`, the last step of an average.
    fn div_ranks(self, n: usize) -> Self;
    /// The machine epsilon of the real type (of the real and imaginary parts for complex types); 0 for
    /// integers.
    const EPSILON: f64;
    /// Whether `self` equals `want` within `rel` relative to `want` (per part for complex types);
    /// `rel = 0` is exact equality. NaN is never within.
    fn within(self, want: Self, rel: f64) -> bool;
}

/// `got` equals `want`, or lies within `rel · |want|` of it; NaN never does.
fn near(got: f64, want: f64, rel: f64) -> bool {
    got == want || (got - want).abs() <= rel * want.abs()
}

macro_rules! bench_int {
    ($($t:ty),*) => {$(
        impl BenchElement for $t {
            fn from_parts(re: i64, _im: i64) -> Self {
                re as $t
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    _ => a.wrapping_add(b),
                }
            }
            fn div_ranks(self, n: usize) -> Self {
                self / (n as $t)
            }
            const EPSILON: f64 = 0.0;
            fn within(self, want: Self, _rel: f64) -> bool {
                self == want
            }
        }
    )*};
}
bench_int!(i8, u8, i32, u32, i64, u64);

macro_rules! bench_float {
    ($t:ty, $from:expr, $n:expr, $to:expr, $eps:expr) => {
        impl BenchElement for $t {
            fn from_parts(re: i64, _im: i64) -> Self {
                $from(re)
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => {
                        if b < a {
                            b
                        } else {
                            a
                        }
                    }
                    ReduceOp::Max => {
                        if b > a {
                            b
                        } else {
                            a
                        }
                    }
                    _ => a + b,
                }
            }
            fn div_ranks(self, n: usize) -> Self {
                self / $n(n)
            }
            const EPSILON: f64 = $eps;
            fn within(self, want: Self, rel: f64) -> bool {
                near($to(self), $to(want), rel)
            }
        }
    };
}
bench_float!(
    f32,
    |v: i64| v as f32,
    |n: usize| n as f32,
    f64::from,
    f32::EPSILON as f64
);
bench_float!(
    f64,
    |v: i64| v as f64,
    |n: usize| n as f64,
    |x: f64| x,
    f64::EPSILON
);
bench_float!(
    f16,
    |v: i64| f16::from_f64(v as f64),
    |n: usize| f16::from_f64(n as f64),
    f16::to_f64,
    0.000_976_562_5 // 2^-10
);
bench_float!(
    bf16,
    |v: i64| bf16::from_f64(v as f64),
    |n: usize| bf16::from_f64(n as f64),
    bf16::to_f64,
    0.007_812_5 // 2^-7
);

macro_rules! bench_complex {
    ($($r:ty),*) => {$(
        impl BenchElement for Complex<$r> {
            fn from_parts(re: i64, im: i64) -> Self {
                Complex::new(re as $r, im as $r)
            }
            /// Min and max are not defined for complex numbers (the library refuses them); they return `a`.
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min | ReduceOp::Max => a,
                    _ => a + b,
                }
            }
            fn div_ranks(self, n: usize) -> Self {
                self / (n as $r)
            }
            const EPSILON: f64 = <$r as BenchElement>::EPSILON;
            fn within(self, want: Self, rel: f64) -> bool {
                self.re.within(want.re, rel) && self.im.within(want.im, rel)
            }
        }
    )*};
}
bench_complex!(f32, f64);

/// The relative tolerance of the `#wrong` check for `T` reduced with `op` over `nranks` ranks on
/// `backend`: `nranks · ε` for NCCL's average of floating-point types (see the module docs), else 0
/// (exact).
pub fn tolerance<T: BenchElement>(backend: BackendKind, op: ReduceOp, nranks: usize) -> f64 {
    if backend == BackendKind::Nccl && op == ReduceOp::Avg && T::KIND != ElementKind::Integer {
        nranks as f64 * T::EPSILON
    } else {
        0.0
    }
}

/// The zero-sum offset of rank `r` of `n` used by the average's inputs.
fn avg_offset(r: usize, n: usize) -> i64 {
    if r % 2 == 1 {
        -1
    } else if r + 1 < n {
        1
    } else {
        0
    }
}

/// The input `(re, im)` of rank `rank` of `nranks` at element `i` for `op` (see the module table).
pub fn input(op: ReduceOp, complex: bool, rank: usize, nranks: usize, i: usize) -> (i64, i64) {
    let j = (i % PERIOD) as i64;
    let r = (rank % PERIOD) as i64;
    match op {
        ReduceOp::Prod if complex => match (j + r) % 4 {
            0 => (1, 0),
            1 => (0, 1),
            2 => (-1, 0),
            _ => (0, -1),
        },
        ReduceOp::Prod => (if (j + r) % 4 == 0 { 2 } else { 1 }, 0),
        ReduceOp::Avg => {
            let s = avg_offset(rank, nranks);
            (j % 5 + 1 + s, j % 3 + 1 + s)
        }
        ReduceOp::Min | ReduceOp::Max => ((j + 3 * r) % 5, 0),
        _ => ((j + 3 * r) % 5, (2 * j + r) % 3),
    }
}

/// The input of this rank at element `i`, as `T`.
pub fn input_value<T: BenchElement>(op: ReduceOp, rank: usize, nranks: usize, i: usize) -> T {
    let (re, im) = input(op, T::KIND == ElementKind::Complex, rank, nranks, i);
    T::from_parts(re, im)
}

/// The all-reduce result at element `i`: the inputs of all `nranks` ranks folded with `op` (then divided
/// by `nranks` for avg), computed in `T`'s own arithmetic.
pub fn expected_value<T: BenchElement>(op: ReduceOp, nranks: usize, i: usize) -> T {
    let mut acc = input_value::<T>(op, 0, nranks, i);
    for r in 1..nranks {
        acc = T::combine(op, acc, input_value::<T>(op, r, nranks, i));
    }
    if op == ReduceOp::Avg {
        acc = acc.div_ranks(nranks);
    }
    acc
}

/// One period of this rank's inputs and of the expected results.
#[derive(Debug)]
pub struct Pattern<T> {
    input: Vec<T>,
    expected: Vec<T>,
}

impl<T: BenchElement> Pattern<T> {
    /// The pattern of rank `rank` of `nranks` for `op`.
    pub fn new(op: ReduceOp, rank: usize, nranks: usize) -> Self {
        Pattern {
            input: (0..PERIOD)
                .map(|i| input_value::<T>(op, rank, nranks, i))
                .collect(),
            expected: (0..PERIOD)
                .map(|i| expected_value::<T>(op, nranks, i))
                .collect(),
        }
    }

    /// Fill `buf` with this rank's inputs.
    pub fn fill(&self, buf: &mut [T]) {
        for chunk in buf.chunks_mut(PERIOD) {
            chunk.copy_from_slice(&self.input[..chunk.len()]);
        }
    }

    /// Number of elements of `buf` that differ from the expected result.
    pub fn count_wrong(&self, buf: &[T]) -> u64 {
        self.count_wrong_within(buf, 0.0)
    }

    /// Number of elements of `buf` farther than `rel` (relative, see [`BenchElement::within`]) from
    /// the expected result; `rel = 0` counts every difference.
    pub fn count_wrong_within(&self, buf: &[T], rel: f64) -> u64 {
        buf.chunks(PERIOD)
            .map(|chunk| {
                chunk
                    .iter()
                    .zip(&self.expected)
                    .filter(|(got, want)| !got.within(**want, rel))
                    .count() as u64
            })
            .sum()
    }
}

/// Fill `buf` with bytes `0xFF` (NaN for floats, `-1`/`MAX` for integers): a value no correct result has,
/// so a buffer the collective never wrote counts as wrong.
pub fn poison<T: BenchElement>(buf: &mut [T]) {
    bytemuck::cast_slice_mut::<T, u8>(buf).fill(0xFF);
}

/// The value a non-reducing collective's rank `rank` holds at element `i` of its input: distinct
/// between ranks (for fewer than 101 ranks), exact in every element type (|value| < 101).
pub fn moved<T: BenchElement>(rank: usize, i: usize) -> T {
    T::from_parts(
        ((i * 3 + rank * 17 + 1) % 101) as i64,
        ((i + 2 * rank) % 7) as i64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_is_the_sum_of_the_formula() {
        for n in 1..7 {
            for i in 0..PERIOD {
                let want: i64 = (0..n).map(|r| ((i + 3 * r) % 5) as i64).sum();
                assert_eq!(expected_value::<f64>(ReduceOp::Sum, n, i), want as f64);
                assert_eq!(expected_value::<i32>(ReduceOp::Sum, n, i), want as i32);
                assert_eq!(
                    expected_value::<bf16>(ReduceOp::Sum, n, i),
                    bf16::from_f64(want as f64)
                );
                let want_im: i64 = (0..n).map(|r| ((2 * i + r) % 3) as i64).sum();
                assert_eq!(
                    expected_value::<Complex<f32>>(ReduceOp::Sum, n, i),
                    Complex::new(want as f32, want_im as f32)
                );
            }
        }
        // Two ranks at element 0: 0 + 3.
        assert_eq!(expected_value::<u8>(ReduceOp::Sum, 2, 0), 3);
    }

    #[test]
    fn avg_is_exact_for_any_rank_count() {
        for n in 1..9 {
            let offsets: i64 = (0..n).map(|r| avg_offset(r, n)).sum();
            assert_eq!(offsets, 0, "n = {n}");
            for i in 0..PERIOD {
                let re = (i % 5 + 1) as f64;
                let im = (i % 3 + 1) as f64;
                assert_eq!(expected_value::<f64>(ReduceOp::Avg, n, i), re);
                assert_eq!(expected_value::<f32>(ReduceOp::Avg, n, i), re as f32);
                assert_eq!(expected_value::<i64>(ReduceOp::Avg, n, i), re as i64);
                assert_eq!(
                    expected_value::<Complex<f64>>(ReduceOp::Avg, n, i),
                    Complex::new(re, im)
                );
                // Every input is non-negative, so unsigned types work too.
                for r in 0..n {
                    let (a, b) = input(ReduceOp::Avg, true, r, n, i);
                    assert!(a >= 0 && b >= 0);
                }
            }
        }
    }

    #[test]
    fn prod_is_a_power_of_two_or_of_i() {
        for n in 1..9 {
            for i in 0..PERIOD {
                let twos = (0..n).filter(|r| (i + r) % 4 == 0).count() as u32;
                assert_eq!(
                    expected_value::<f64>(ReduceOp::Prod, n, i),
                    f64::from(2u32.pow(twos))
                );
                assert_eq!(expected_value::<u64>(ReduceOp::Prod, n, i), 2u64.pow(twos));
                let k: usize = (0..n).map(|r| (i + r) % 4).sum();
                let want = [
                    Complex::new(1.0, 0.0),
                    Complex::new(0.0, 1.0),
                    Complex::new(-1.0, 0.0),
                    Complex::new(0.0, -1.0),
                ][k % 4];
                assert_eq!(expected_value::<Complex<f64>>(ReduceOp::Prod, n, i), want);
            }
        }
        // Three ranks at element 1: i^1 * i^2 * i^3 = i^6 = -1.
        assert_eq!(
            expected_value::<Complex<f32>>(ReduceOp::Prod, 3, 1),
            Complex::new(-1.0, 0.0)
        );
    }

    #[test]
    fn min_and_max() {
        assert_eq!(expected_value::<i8>(ReduceOp::Min, 2, 0), 0);
        assert_eq!(expected_value::<i8>(ReduceOp::Max, 2, 0), 3);
        assert_eq!(expected_value::<f32>(ReduceOp::Max, 2, 3), 3.0); // (3, 6 % 5 = 1)
        assert_eq!(expected_value::<f32>(ReduceOp::Min, 2, 3), 1.0);
        assert_eq!(expected_value::<u32>(ReduceOp::Max, 5, 7), 4);
        assert_eq!(expected_value::<u32>(ReduceOp::Min, 5, 7), 0);
        assert_eq!(
            expected_value::<f16>(ReduceOp::Max, 1, 4),
            f16::from_f64(4.0)
        );
    }

    #[test]
    fn integer_sums_wrap_like_the_hardware() {
        // 200 ranks of int8: the true sum exceeds 127 and wraps.
        let want: i64 = (0..200).map(|r| ((3 * r) % 5) as i64).sum();
        assert_eq!(expected_value::<i8>(ReduceOp::Sum, 200, 0), want as i8);
    }

    #[test]
    fn tolerance_only_for_nccl_float_averages() {
        use BackendKind::{MpiHost, Nccl};
        assert_eq!(tolerance::<f32>(MpiHost, ReduceOp::Avg, 3), 0.0);
        assert_eq!(tolerance::<f32>(Nccl, ReduceOp::Sum, 3), 0.0);
        assert_eq!(tolerance::<i32>(Nccl, ReduceOp::Avg, 3), 0.0);
        assert_eq!(
            tolerance::<f32>(Nccl, ReduceOp::Avg, 3),
            3.0 * f64::from(f32::EPSILON)
        );
        assert_eq!(
            tolerance::<Complex<f64>>(Nccl, ReduceOp::Avg, 4),
            4.0 * f64::EPSILON
        );
        // The constants are the types' machine epsilons.
        assert_eq!(
            f16::from_f64(1.0 + <f16 as BenchElement>::EPSILON),
            f16::from_f64(1.0) + f16::EPSILON
        );
        assert_eq!(<f16 as BenchElement>::EPSILON, f16::EPSILON.to_f64());
        assert_eq!(<bf16 as BenchElement>::EPSILON, bf16::EPSILON.to_f64());
    }

    /// NCCL's average of floats: each input times a rounded 1/n, summed in the type; the result is
    /// within the tolerance for every element and rank count, and at most one ulp or so away.
    fn premultiplied_avg<T: BenchElement>(n: usize, i: usize, mul: impl Fn(T, usize) -> T) -> T {
        let mut acc = mul(input_value::<T>(ReduceOp::Avg, 0, n, i), n);
        for r in 1..n {
            acc = T::combine(
                ReduceOp::Sum,
                acc,
                mul(input_value::<T>(ReduceOp::Avg, r, n, i), n),
            );
        }
        acc
    }

    #[test]
    fn premultiplied_averages_pass_and_wrong_values_do_not() {
        for n in 1..17 {
            let p32 = Pattern::<f32>::new(ReduceOp::Avg, 0, n);
            let p16 = Pattern::<f16>::new(ReduceOp::Avg, 0, n);
            let pb = Pattern::<bf16>::new(ReduceOp::Avg, 0, n);
            let t32 = tolerance::<f32>(BackendKind::Nccl, ReduceOp::Avg, n);
            let t16 = tolerance::<f16>(BackendKind::Nccl, ReduceOp::Avg, n);
            let tb = tolerance::<bf16>(BackendKind::Nccl, ReduceOp::Avg, n);
            let got32: Vec<f32> = (0..PERIOD)
                .map(|i| premultiplied_avg::<f32>(n, i, |x, n| x * (1.0 / n as f32)))
                .collect();
            let got16: Vec<f16> = (0..PERIOD)
                .map(|i| premultiplied_avg::<f16>(n, i, |x, n| x * f16::from_f64(1.0 / n as f64)))
                .collect();
            let gotb: Vec<bf16> = (0..PERIOD)
                .map(|i| premultiplied_avg::<bf16>(n, i, |x, n| x * bf16::from_f64(1.0 / n as f64)))
                .collect();
            assert_eq!(p32.count_wrong_within(&got32, t32), 0, "f32 n = {n}");
            assert_eq!(p16.count_wrong_within(&got16, t16), 0, "f16 n = {n}");
            assert_eq!(pb.count_wrong_within(&gotb, tb), 0, "bf16 n = {n}");
            if n.is_power_of_two() {
                assert_eq!(p32.count_wrong(&got32), 0, "f32 n = {n} is exact");
                assert_eq!(pb.count_wrong(&gotb), 0, "bf16 n = {n} is exact");
            }
            // A value one step of 1/8 off (what a wrong rank's contribution would give) is wrong.
            let mut off = got32.clone();
            off[1] += 0.125;
            assert_eq!(p32.count_wrong_within(&off, t32), 1);
            let mut nan = got16.clone();
            poison(&mut nan);
            assert_eq!(p16.count_wrong_within(&nan, t16), PERIOD as u64);
        }
        let c = Complex::new(1.0f32, 2.0);
        assert!(c.within(Complex::new(1.0, 2.0 + 1e-7), 1e-6));
        assert!(!c.within(Complex::new(1.0, 2.1), 1e-6));
        assert!(3u8.within(3, 0.5) && !3u8.within(4, 0.5));
    }

    #[test]
    fn pattern_fills_checks_and_poisons() {
        let p = Pattern::<f64>::new(ReduceOp::Sum, 0, 1);
        let mut buf = vec![0.0; 2 * PERIOD + 7];
        p.fill(&mut buf);
        // One rank: the result is the input itself.
        assert_eq!(p.count_wrong(&buf), 0);
        buf[PERIOD + 1] += 1.0;
        assert_eq!(p.count_wrong(&buf), 1);
        poison(&mut buf);
        assert!(buf.iter().all(|x| x.is_nan()));
        assert_eq!(p.count_wrong(&buf), buf.len() as u64);
        let p = Pattern::<u8>::new(ReduceOp::Max, 1, 2);
        let mut b = vec![0u8; 5];
        poison(&mut b);
        assert_eq!(b, [255; 5]);
        assert_eq!(p.count_wrong(&b), 5);
        assert_eq!(p.count_wrong(&[]), 0);
    }
}

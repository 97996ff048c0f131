//! The one-shot kernel's CUDA source, one instance per wire type and reduce operation, compiled
//! with NVRTC when first used.
//!
//! The source needs no header: 16-bit floats are carried as their bits and converted with PTX
//! instructions (`f16`) or integer arithmetic (`bf16`, rounding to nearest even), and sums of
//! them are kept in `float` and rounded once.

use crate::element::DType;
use crate::op::ReduceOp;

/// Thread blocks of every launch: a fixed number, so each block's epoch counter advances on
/// every call and the epochs of a block agree on every rank (see the module documentation).
pub(super) const BLOCKS: u32 = 16;
/// Threads per block.
pub(super) const THREADS: u32 = 512;
/// Ranks a communicator may have for this path (flag slots per block).
pub const MAX_RANKS: usize = 8;

/// The CUDA types of a wire type: (stored, accumulated, load, store) as C macros' bodies.
fn types(dtype: DType) -> (&'static str, &'static str, &'static str, &'static str) {
    match dtype {
        DType::I8 => ("signed char", "int", "(int)(x)", "(signed char)(x)"),
        DType::U8 => (
            "unsigned char",
            "unsigned",
            "(unsigned)(x)",
            "(unsigned char)(x)",
        ),
        DType::I32 => ("int", "int", "(x)", "(x)"),
        DType::U32 => ("unsigned", "unsigned", "(x)", "(x)"),
        DType::I64 => ("long long", "long long", "(x)", "(x)"),
        DType::U64 => ("unsigned long long", "unsigned long long", "(x)", "(x)"),
        DType::F32 => ("float", "float", "(x)", "(x)"),
        DType::F64 => ("double", "double", "(x)", "(x)"),
        DType::F16 => ("unsigned short", "float", "h2f(x)", "f2h(x)"),
        DType::Bf16 => ("unsigned short", "float", "b2f(x)", "f2b(x)"),
    }
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::Bf16 | DType::F32 | DType::F64)
}

/// The combining expression of `op` on accumulators `a` and `b`, or `None` where this path does
/// not offer `op` on `dtype` (averages of integers, whose meaning differs between backends).
fn combine(dtype: DType, op: ReduceOp) -> Option<&'static str> {
    let float = is_float(dtype);
    Some(match op {
        ReduceOp::Sum => "a + b",
        ReduceOp::Avg if float => "a + b",
        ReduceOp::Avg => return None,
        ReduceOp::Prod => "a * b",
        ReduceOp::Max if float => "fmax(a, b)",
        ReduceOp::Min if float => "fmin(a, b)",
        ReduceOp::Max => "(a > b ? a : b)",
        ReduceOp::Min => "(a < b ? a : b)",
    })
}

/// The kernel's name.
pub(super) const NAME: &str = "one_shot_all_reduce";

/// The source of the kernel for `dtype` and `op`, or `None` where the path does not offer them.
pub(super) fn source(dtype: DType, op: ReduceOp) -> Option<String> {
    let (elem, acc, load, store) = types(dtype);
    let combine = combine(dtype, op)?;
    let finish = if op == ReduceOp::Avg {
        "acc = acc / (ACC)nranks;"
    } else {
        ""
    };
    Some(format!(
        r#"
typedef unsigned int u32;
typedef unsigned long long u64;
typedef {elem} ELEM;
typedef {acc} ACC;
#define MAX_RANKS {MAX_RANKS}
#define BLOCKS {BLOCKS}

__device__ __forceinline__ float h2f(unsigned short h) {{
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}}
__device__ __forceinline__ unsigned short f2h(float f) {{
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}}
__device__ __forceinline__ float b2f(unsigned short b) {{ return __uint_as_float(((u32)b) << 16); }}
__device__ __forceinline__ unsigned short f2b(float f) {{
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}}
__device__ __forceinline__ ACC load(ELEM x) {{ return {load}; }}
__device__ __forceinline__ ELEM store(ACC x) {{ return {store}; }}
__device__ __forceinline__ ACC combine(ACC a, ACC b) {{ return {combine}; }}
__device__ __forceinline__ u64 umin(u64 a, u64 b) {{ return a < b ? a : b; }}
__device__ __forceinline__ u64 now_ns() {{
  u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}}

// data[r]: rank r's slots of slot_elems elements, nranks per epoch for two epochs (slot p of an
// epoch written by rank p); flags[r]: rank r's flags, MAX_RANKS per block, written by the peers;
// counters: this rank's epoch per block; failed: mapped host word.
extern "C" __global__ void __launch_bounds__({THREADS}) {NAME}(
    const ELEM* in, ELEM* out, u64 n,
    const u64* __restrict__ data, const u64* __restrict__ flags, u32* __restrict__ counters,
    u32 rank, u32 nranks, u64 slot_elems, u64 timeout_ns, u32* failed)
{{
  __shared__ u32 s_epoch;
  __shared__ int s_failed;
  const u32 b = blockIdx.x;
  if (threadIdx.x == 0) {{ s_epoch = counters[b] + 1u; s_failed = 0; }}
  __syncthreads();
  const u32 epoch = s_epoch;
  const u64 per = (n + gridDim.x - 1) / gridDim.x;
  const u64 lo = umin(n, (u64)b * per);
  const u64 hi = umin(n, lo + per);
  // Epoch e's slots on every rank: one per rank, rank r's part in slot r.
  const u64 slot = (u64)(epoch & 1u) * nranks * slot_elems;

  // 1. This block's part of the input into this rank's slot of this epoch on every peer (posted
  //    stores over the link; this rank reads its own part from the input).
  for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {{
    const ELEM v = in[i];
    for (u32 p = 0; p < nranks; ++p)
      if (p != rank) ((ELEM*)data[p] + slot + (u64)rank * slot_elems)[i] = v;
  }}
  __syncthreads();

  // 2. Tell every rank this block's part is there (release, system scope: the copies above,
  //    ordered before it by the barrier, are visible to a reader that acquires the flag), then
  //    wait for every rank's flag of this block (acquire).
  if (threadIdx.x < nranks) {{
    u32* theirs = (u32*)flags[threadIdx.x] + b * MAX_RANKS + rank;
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(theirs), "r"(epoch) : "memory");
    const u32* ours = (const u32*)flags[rank] + b * MAX_RANKS + threadIdx.x;
    // Set (by any rank's kernel) once a kernel gave up: no later call may complete on any rank,
    // so a late rank fails too instead of finishing against peers that left. Read before the
    // flag on every round: a rank that comes after the others gave up finds their flags of this
    // epoch already there (they were written before the others waited), and must not take them.
    const u32* abandoned = (const u32*)flags[rank] + BLOCKS * MAX_RANKS;
    const u64 start = now_ns();
    for (;;) {{
      u32 seen, gone;
      asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(gone) : "l"(abandoned) : "memory");
      if (gone == 0u) {{
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(ours) : "memory");
        if ((int)(seen - epoch) >= 0) break;
      }}
      if (gone != 0u || now_ns() - start > timeout_ns) {{
        s_failed = 1;
        asm volatile("st.relaxed.sys.global.u32 [%0], %1;" :: "l"(failed), "r"(1u) : "memory");
        for (u32 p = 0; p < nranks; ++p) {{
          u32* theirs_gone = (u32*)flags[p] + BLOCKS * MAX_RANKS;
          asm volatile("st.relaxed.sys.global.u32 [%0], %1;" :: "l"(theirs_gone), "r"(1u) : "memory");
        }}
        break;
      }}
    }}
  }}
  __syncthreads();
  if (s_failed) return;

  // 3. Reduce every rank's part in rank order: the same answer, bit for bit, on every rank.
  for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {{
    // Every part from this rank's memory; its own from the input (the same bits its peers got).
    const ELEM* parts = (const ELEM*)data[rank] + slot;
    ACC acc = load(rank == 0u ? in[i] : parts[i]);
    for (u32 r = 1; r < nranks; ++r)
      acc = combine(acc, load(r == rank ? in[i] : parts[(u64)r * slot_elems + i]));
    {finish}
    out[i] = store(acc);
  }}
  if (threadIdx.x == 0) counters[b] = epoch;
}}
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_have_no_average_and_floats_have_every_operation() {
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            assert!(source(DType::I32, op).is_some(), "{op:?}");
        }
        assert!(source(DType::I64, ReduceOp::Avg).is_none());
        for d in [DType::F16, DType::Bf16, DType::F32, DType::F64] {
            let s = source(d, ReduceOp::Avg).expect("floats average");
            assert!(s.contains("acc = acc / (ACC)nranks;"));
        }
    }

    #[test]
    fn sixteen_bit_floats_sum_in_float() {
        let s = source(DType::Bf16, ReduceOp::Sum).expect("bf16 sums");
        assert!(s.contains("typedef unsigned short ELEM;"));
        assert!(s.contains("typedef float ACC;"));
        assert!(s.contains("return b2f(x);"));
        let s = source(DType::F16, ReduceOp::Max).expect("f16 max");
        assert!(s.contains("return fmax(a, b);"));
    }
}

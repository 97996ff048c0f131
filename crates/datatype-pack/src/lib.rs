//! Non-contiguous data described in a canonical stride IR, lowered to plans that a CPU reference
//! packer and generated GPU kernels execute.
//!
//! | layer | module | what it does |
//! |---|---|---|
//! | constructors | [`construct`] | `contiguous`, `vector`, `hvector`, `subarray` (C/Fortran), array-view strides -> [`Type`] |
//! | MPI datatypes | `mpi_decode` (feature `mpi`) | a committed MPI derived datatype decoded into a [`Type`] (regular combiners; irregular ones are `Unsupported`) |
//! | IR | [`ir`] | [`Type`]: strided streams over a dense block, in bytes; defines which bytes are packed, in which order |
//! | canonical | [`canonical`] | named passes to a fixed point: the same packed bytes with the fewest levels |
//! | plan | [`plan`] | [`StridedBlock`] (start, block length, counts, strides), word size, [`LaunchShape`] for a CUDA-like grid |
//! | CPU reference | [`cpu`] | bounds-checked [`cpu::pack`] / [`cpu::unpack`], and a naive tree-walking packer as the independent oracle |
//! | fused regions | [`fused`] | many plans (a halo's faces) packed into one buffer: [`fused::Region`], layout, CPU reference; strided-to-strided copies of equal-shape regions: [`fused::CopyRegion`], CPU reference |
//! | code generation | [`codegen`] | CUDA C source of `pack`/`unpack` kernels baked from a [`StridedBlock`] and word size, fused multi-region kernels and fused copy kernels |
//! | GPU | `gpu` (feature `cuda`) | NVRTC compile and cache; `gpu::Packer`, `gpu::FusedPacker` and `gpu::FusedCopier` launch on cudarc streams, from cudarc buffers or raw device pointers |
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `cuda` | on | the `gpu` module and the `cudarc` dependency. Nothing CUDA is needed to build: `libcuda` and `libnvrtc` are loaded at run time, and their absence is an `Err`, never a panic |
//! | `mpi` | off | the `mpi_decode` module and the `mpi` (rsmpi) dependency, which needs an MPI installation at build time |
//!
//! Unsafe code is denied crate-wide and allowed only in the `gpu` and `mpi_decode`
//! modules, where each block states its invariant; the CPU modules and the code generator are
//! safe Rust.
//!
//! # Example: one face of a 3-D grid
//!
//! A `4 x 5 x 6` grid of `f64` in C order; a halo exchange in x sends the plane `x = 1`.
//!
//! ```
//! use datatype_pack::canonical::canonicalize;
//! use datatype_pack::construct::{subarray, Order};
//! use datatype_pack::{cpu, StridedBlock, Type};
//!
//! let (nz, ny, nx) = (4u64, 5u64, 6u64);
//! let grid: Vec<f64> = (0..nz * ny * nx).map(|i| i as f64).collect();
//! let bytes: Vec<u8> = grid.iter().flat_map(|v| v.to_ne_bytes()).collect();
//!
//! // The x = 1 plane: every (z, y), one element in x.
//! let face = subarray(&[nz, ny, nx], &[nz, ny, 1], &[0, 0, 1], Order::C, 8)?;
//!
//! // Canonical form: the z and y levels merge into one stream of 20 elements, 48 bytes apart.
//! assert_eq!(
//!     canonicalize(face.clone()),
//!     Type::stream(20, 48, Type::dense(8)).with_offset(8)
//! );
//!
//! // The plan, and the word size a packer may use for this buffer.
//! let plan = StridedBlock::from_type(&face)?;
//! assert_eq!(plan.start(), 8);
//! assert_eq!(plan.block_len(), 8);
//! assert_eq!(plan.counts(), &[20]);
//! assert_eq!(plan.strides(), &[48]);
//! assert_eq!(plan.word_size(8, 8), 8);
//!
//! // Pack on the CPU and check the values.
//! let mut packed = vec![0u8; plan.packed_size() as usize];
//! cpu::pack(&plan, &bytes, &mut packed)?;
//! let values: Vec<f64> = packed
//!     .chunks_exact(8)
//!     .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
//!     .collect();
//! let expected: Vec<f64> = (0..nz * ny).map(|row| (row * nx + 1) as f64).collect();
//! assert_eq!(values, expected);
//!
//! // Unpacking into a zeroed grid restores the face and nothing else.
//! let mut ghost = vec![0u8; bytes.len()];
//! cpu::unpack(&plan, &packed, &mut ghost)?;
//! let mut again = vec![0u8; packed.len()];
//! cpu::pack(&face, &ghost, &mut again)?;
//! assert_eq!(again, packed);
//! # Ok::<(), datatype_pack::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod canonical;
pub mod codegen;
pub mod construct;
pub mod cpu;
mod error;
pub mod fused;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
pub mod gpu;
pub mod ir;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
pub mod mpi_decode;
pub mod plan;

pub use construct::Order;
pub use error::{Buffer, Error, Result};
pub use ir::Type;
pub use plan::{LaunchLimits, LaunchShape, StridedBlock};

//! GPU packing: the kernels of [`crate::codegen`] compiled with NVRTC for the device's
//! compute capability, cached, and launched on a stream through [`cudarc`] (re-exported).
//!
//! | item | what it does |
//! |---|---|
//! | [`context`] | a CUDA context for a device, or an `Err` when the driver cannot be loaded |
//! | [`Packer`] | one plan: `pack`/`unpack` between cudarc device buffers on a stream |
//! | [`FusedPacker`] | many [`Region`](crate::fused::Region)s (a halo's faces) packed or unpacked in one launch |
//! | [`Batch`] | launches of several packers (`record_pack_raw`/`record_unpack_raw`) launched together as one CUDA graph |
//! | [`FusedCopier`] | many [`CopyRegion`](crate::fused::CopyRegion)s copied strided to strided in one launch, between two buffers or within one |
//! | [`launch_channel`] | a plan's pack that signals a flag once every block has packed ([`ChannelSend`]) and a plan's unpack that waits on the GPU for such a flag ([`ChannelRecv`]), launched together as one CUDA graph: a message between two processes on two GPUs ordered on the GPUs |
//! | `compile` | NVRTC with an in-memory cache keyed by (source, arch, options) and an optional on-disk cache |
//!
//! One module per concern inside, every public item re-exported here:
//!
//! | module | what it holds |
//! |---|---|
//! | `driver` | opening `libcuda`, a context per device, its architecture, the guard against panics in the bindings |
//! | `compile` | NVRTC compilation and the module cache, in memory and on disk |
//! | `options` | [`GpuOptions`] and the grid policy [`GridCap`] |
//! | `launch` | the one launching path: the device and the grid policy, the kernel sets compiled once per key, the launch (kernel, grid, block, the two addresses, stream), and the front ends that check the stream, buffers and lengths first |
//! | `relaunch` | kernels launched through CUDA graphs kept for reuse, their arguments set per launch: one at a time ([`GpuOptions::relaunch`]) or several packers' launches at once ([`Batch`]) |
//! | `packer` | [`Packer`] |
//! | `fused_launch` | what the fused launchers add: the grid budget shared out among the regions before their source is generated |
//! | `fused_packer` | [`FusedPacker`] |
//! | `fused_copier` | [`FusedCopier`] |
//! | `channel` | [`launch_channel`]: the channel kernels of a [`Packer`] and their kept graphs |
//!
//! # Loading the CUDA libraries
//!
//! Nothing is needed at build time: `libcuda` and `libnvrtc` are opened at run time (cudarc's
//! dynamic loading). cudarc panics when a library or a symbol is missing; this module never lets
//! that reach the caller. Before the first driver (or NVRTC) call it checks that the library
//! opens under one of cudarc's candidate names, and returns [`Error::LibraryNotFound`](crate::Error::LibraryNotFound) with the
//! names it tried if none does; every entry point also runs inside
//! [`std::panic::catch_unwind`], so a missing symbol comes back as [`Error::Cuda`](crate::Error::Cuda). (The panic
//! hook still prints the panic message; with `panic = "abort"` a missing symbol aborts.)
//!
//! # One launching path
//!
//! [`Packer`], [`FusedPacker`] and [`FusedCopier`] hold a launcher each (the device and the
//! kernel sets compiled so far, keyed by word sizes) and contribute only a kernel generator, a
//! key and a length check. Every call (safe, within one buffer, or on raw addresses) goes
//! through one front end that checks the stream's and buffers' context and the lengths, picks
//! the kernel set for the two addresses, and launches it with its grid, its thread block and
//! the two addresses as arguments, in one place.
//!
//! # Launch shapes
//!
//! A [`Packer`] launches its plan's kernels as [`LaunchShape::for_plan`](crate::LaunchShape::for_plan) says: flat (one thread
//! per packed word, 1-D blocks of [`FLAT_THREADS`](crate::plan::FLAT_THREADS) threads, as the
//! one-thread-per-word kernel) for contiguous plans and for plans of at most two dimensions with
//! a power-of-two number of words per block; by axes otherwise. Fused launches
//! ([`FusedPacker`], [`FusedCopier`]) map every region flat
//! ([`codegen::fused_shape`](crate::codegen::fused_shape)), each region over its own span of
//! the one 1-D grid.
//!
//! # Word sizes and variants
//!
//! The word size of a launch is [`StridedBlock::word_size`](crate::StridedBlock::word_size) of the plan *and* the two device
//! addresses passed, so a view that starts at an odd byte of an allocation is packed correctly
//! (in narrower words). Each word size is its own kernel variant, compiled on first use (or
//! ahead of it by `prepare`) and kept by the packer; the variant for 256-byte-aligned buffers
//! (every cudarc allocation) is compiled when the packer is made, so that compile errors
//! surface there.
//!
//! # Compile cache
//!
//! [`compile()`] keeps every image it produced in memory, keyed by the exact source, architecture
//! and options. When the environment variable `DATATYPE_PACK_CACHE` names a directory, images
//! are also stored there (one file per key, named by a hash of the key, holding the full key,
//! which is compared on load) and read back by later processes. The disk cache is best effort:
//! an unreadable or unwritable directory only costs a compile.
//!
//! The cache is one process-wide map behind a mutex, held only to look an image up or store
//! it, never during a compile; NVRTC compiles distinct programs from several threads at once.
//! Since every launcher is `Send + Sync`, a caller about to use many layouts can build them, or
//! [`prepare`](Packer::prepare) their variants ([`FusedPacker::prepare`],
//! [`FusedCopier::prepare`]), from several threads, so that their compiles overlap instead of
//! running one after another on first use. (Two threads compiling the same key at the same
//! time both compile it; the images are the same.)
//!
//! # Bounds
//!
//! Every launch is preceded by the checks of [`crate::cpu::pack`]: the strided buffer must hold
//! the plan's [`extent_end`](crate::StridedBlock::extent_end) and the packed buffer its
//! [`packed_size`](crate::StridedBlock::packed_size); otherwise the call returns
//! [`Error::OutOfBounds`](crate::Error::OutOfBounds) or [`Error::BufferTooSmall`](crate::Error::BufferTooSmall) and launches nothing. Buffers and stream
//! must belong to the packer's context.
//!
//! # Raw device pointers
//!
//! The safe entry points take cudarc buffers, and cudarc orders every use of a buffer against
//! the others through events: once a context has more than one stream, each `pack` makes the
//! stream wait on the buffers' last writes and records a read or write event afterwards. A
//! caller that orders its streams with its own events (a halo exchange over several streams)
//! calls the `unsafe` raw entry points instead ([`Packer::pack_raw`],
//! [`FusedPacker::pack_raw`], [`FusedCopier::copy_raw`], ...), which take device addresses and
//! lengths in bytes and do no event bookkeeping. They make the same checks of the stream's
//! context and of the lengths against the layout, and launch the same kernels; that the
//! addresses belong to the context, hold the lengths given and are not in use by other work is
//! the caller's promise.

mod channel;
mod compile;
mod driver;
mod fused_copier;
mod fused_launch;
mod fused_packer;
mod launch;
mod options;
mod packer;
mod relaunch;

pub use cudarc;

pub use channel::{launch_channel, ChannelRecv, ChannelSend};
pub use compile::{
    clear_memory_cache, compile, nvrtc_available, nvrtc_options, nvrtc_version, CACHE_ENV,
};
pub use driver::{context, device_arch, driver_available, driver_present, Residency};
pub use fused_copier::FusedCopier;
pub use fused_packer::FusedPacker;
pub use options::{GpuOptions, GridCap, AUTO_FULL_ABOVE_WAVES};
pub use packer::Packer;
pub use relaunch::{graph_counts, Batch, GraphCounts};

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn packers_are_send_and_sync() {
        send_sync::<Packer>();
        send_sync::<FusedPacker>();
        send_sync::<FusedCopier>();
    }
}

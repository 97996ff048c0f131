//! An MPI interposer: unmodified MPI programs get derived datatypes on GPU buffers packed by
//! generated kernels, by putting `libcollectives_interpose.so` in front of the system MPI
//! (`LD_PRELOAD`, or first in the link order). See `docs/interpose.md`.
//!
//! | layer | module | what it does |
//! |---|---|---|
//! | direct | `direct`, `target`, `ipc`, `shm` | on one node, a send's device staging lent to its receiver, which unpacks from it over CUDA IPC after the sender's event, or (the write landing) the send's kernel writing straight into a receive buffer its receiver offered; paired with its receive by message order (a blocking pair with no message through the MPI at all); the counting of every send and receive on `MPI_COMM_WORLD`; the protocol's shared-memory mailboxes |
//! | channels | `direct::channels`, `channel` | opt-in: per pair and tag, an `MPI_Sendrecv` of short blocks launching its pack into a slot and its unpack from the peer's, armed, as one graph at its start, ordered on the GPUs by flags (the protocol; the words, the launches and the call-off) |
//! | counted | `counted` | the other send modes, `MPI_Sendrecv_replace`, matched probes, `MPI_Cancel`: counted for the direct path; the probes: their messages' senders told to send bytes; then the real call |
//! | symbols | `intercept` | `MPI_Finalize`, `MPI_Type_commit`/`_free`, `MPI_Pack`/`_Unpack`/`_Pack_size`, `MPI_Send`/`_Recv`/`_Isend`/`_Irecv`/`_Sendrecv`, `MPI_Send_init`/`_Recv_init`/`_Start`/`_Startall`, the waits and tests, `MPI_Request_get_status`, `MPI_Request_free`: the interposer's path or `PMPI_*` |
//! | messages | `message` | what both paths share of a message: how a call is taken, a receive's target and its direct-path state, the packed bytes' MPI type |
//! | path | `path` | whether a call is taken, its staging, pending work of requests, the unpack on completion |
//! | persistent | `persistent` | persistent requests: staging for their life, packed at each start, unpacked at each completion |
//! | datatypes | [`types`] | committed datatypes decoded into the IR (datatype-pack's `mpi_decode`), cached per handle, plans per count |
//! | requests | [`table`] | outstanding requests of the interposer; completion told by `MPI_REQUEST_NULL` |
//! | model | [`model`] | device, one-shot or staged, by estimated cost |
//! | memory | [`memory`] | device or host, asked of the CUDA driver loaded at run time |
//! | engines | `engine` | GPU packers and staging pools; the CPU reference for the testing mode |
//! | settings | [`config`] | the `COLLECTIVES_INTERPOSE_*` variables |
//! | progress | `progress` | lets the real MPI move its messages during a lending start, after its loans (a probe that finds nothing) |
//! | locking | [`sync`] | one mutex per shared map; the gate that keeps a completion and `MPI_Request_get_status`'s unpack of the same request apart |
//! | profile | `profile` | host wall time per phase of each call, printed at `MPI_Finalize` (`COLLECTIVES_INTERPOSE_PROFILE=1`) |
//!
//! Anything the interposer does not take, and any failure before the real MPI has the
//! message, goes to the real MPI unchanged: results never change, only speed.
#![deny(missing_docs)]

mod channel;
pub mod config;
mod counted;
mod direct;
mod engine;
pub mod error;
pub mod handle;
mod intercept;
mod ipc;
mod log;
pub mod memory;
mod message;
pub mod model;
mod path;
mod persistent;
mod profile;
mod progress;
mod shm;
pub mod sync;
pub mod table;
mod target;
pub mod types;

pub use error::{Error, Result};

/// The MPI functions the library defines, in the order of `docs/interpose.md`.
pub const INTERCEPTED: [&str; 42] = [
    "MPI_Init",
    "MPI_Init_thread",
    "MPI_Finalize",
    "MPI_Type_commit",
    "MPI_Type_free",
    "MPI_Pack",
    "MPI_Unpack",
    "MPI_Pack_size",
    "MPI_Send",
    "MPI_Recv",
    "MPI_Isend",
    "MPI_Irecv",
    "MPI_Sendrecv",
    "MPI_Send_init",
    "MPI_Recv_init",
    "MPI_Start",
    "MPI_Startall",
    "MPI_Wait",
    "MPI_Test",
    "MPI_Waitall",
    "MPI_Testall",
    "MPI_Waitany",
    "MPI_Testany",
    "MPI_Waitsome",
    "MPI_Testsome",
    "MPI_Request_get_status",
    "MPI_Request_free",
    "MPI_Bsend",
    "MPI_Ssend",
    "MPI_Rsend",
    "MPI_Ibsend",
    "MPI_Issend",
    "MPI_Irsend",
    "MPI_Bsend_init",
    "MPI_Ssend_init",
    "MPI_Rsend_init",
    "MPI_Sendrecv_replace",
    "MPI_Probe",
    "MPI_Iprobe",
    "MPI_Mprobe",
    "MPI_Improbe",
    "MPI_Cancel",
];

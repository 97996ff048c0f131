//! A message the interposer takes, as both of its paths see it: how a call is taken
//! ([`Taken`]), its packed bytes as the real MPI sees them ([`bytes_type`]), a receive's target
//! kept until its bytes arrive ([`Receive`]) with its state on the direct path ([`Announced`],
//! [`Early`]), and the code of an unpack that failed ([`ERR_INTERN`]). The byte path
//! ([`crate::path`]) and the direct path ([`crate::direct`]) both build on these.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use datatype_pack::StridedBlock;
use mpi::ffi;

use crate::engine::{Engine, Lent, Staging};
use crate::model::Method;
use crate::types::Layout;

/// A call the interposer takes: the layout, its plan, the engine for the buffer and the method
/// of moving the bytes.
pub type Taken = (Arc<Layout>, Arc<StridedBlock>, Engine, Method);

/// The bytes of a packed message as the real MPI sees them.
pub fn bytes_type() -> ffi::MPI_Datatype {
    // SAFETY: reading an immutable handle constant of the rsmpi shim.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// The code for an unpack that failed after its bytes arrived.
pub const ERR_INTERN: c_int = ffi::MPI_ERR_INTERN as c_int;

/// A peer, a tag and a message's number.
pub type Key = (c_int, c_int, u64);

/// A receive that announced itself: its source, tag and number.
#[derive(Debug, Clone, Copy)]
pub struct Announced(pub Key);

/// A receive's note claimed before its real receive completed
/// ([`crate::direct::claim_early`]): the bytes wait in the peer's lent staging, are in the
/// receive's buffer already, or (testing) were carried into the receive's staging.
#[derive(Debug)]
pub enum Early {
    /// Lent by rank `.0` for message `.1`; `queued` once the unpack from it is on the stream.
    Lent(c_int, Key, Lent, bool),
    /// Written into the receive's buffer by rank `.0`'s kernel (the write landing).
    Written(c_int),
    /// Carried: the bytes, copied into the staging once the real receive completed.
    Carried(Vec<u8>),
    /// Through the channel from rank `.0` (message `.1`): the armed unpack has it
    /// ([`crate::channel`]).
    Channel(c_int, Key),
}

/// A receive whose unpack was launched armed, at its call's start ([`crate::channel`]): its
/// number, the message whose slot it reads, and its channel's words.
#[derive(Debug, Clone, Copy)]
pub struct Armed {
    /// The receive's number.
    pub k: u64,
    /// The message the sender lent the slot for (`k - 2`).
    pub from: u64,
    /// The words its blocks wait on.
    pub cell: crate::channel::RecvCell,
    /// The peer's slot mapped here, and its length.
    pub slot: (u64, usize),
}

/// A receive's target, kept until its bytes arrived.
#[derive(Debug)]
pub struct Receive {
    /// The engine of its buffer.
    pub(crate) engine: Engine,
    /// The datatype's layout.
    pub(crate) layout: Arc<Layout>,
    /// The count of elements posted.
    pub(crate) count: u64,
    /// The plan of its elements in its buffer.
    pub(crate) plan: Arc<StridedBlock>,
    /// The program's buffer.
    pub(crate) buf: *mut c_void,
    /// The buffer the real MPI receives into.
    pub staging: Staging,
    /// Its size in bytes, as MPI's count.
    pub bytes: c_int,
    /// The call that posted it, for the log.
    pub(crate) op: &'static str,
    /// Its announcement to the direct path, where it made one ([`crate::direct::announce`]).
    pub direct: Option<Announced>,
    /// Its note, where claimed before the real receive completed ([`crate::direct::claim_early`]).
    pub early: Option<Early>,
    /// Its unpack launched armed ([`crate::direct::open_channel`]), until settled or called off.
    pub armed: Option<Armed>,
}

impl Receive {
    /// Makes the receive's staging where it was left for later ([`Staging::Later`]), before
    /// the real MPI receives into it.
    ///
    /// # Errors
    /// As [`Engine::staging_for`].
    pub fn make_staging(&mut self) -> crate::Result<()> {
        if let Staging::Later(method) = self.staging {
            self.staging = self.engine.staging_for(&self.plan, method)?;
        }
        Ok(())
    }
}

// SAFETY: the user's buffer address is only used by the thread that completes the request;
// MPI's rules keep the buffer alive and untouched until then.
unsafe impl Send for Receive {}

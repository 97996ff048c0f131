//! The verbose log (`COLLECTIVES_INTERPOSE_LOG=1`): one line per decision on stderr, prefixed
//! with the rank in `MPI_COMM_WORLD`.

use std::ffi::c_int;

use mpi::ffi;

/// The rank in `MPI_COMM_WORLD`, or -1 outside `MPI_Init`..`MPI_Finalize`.
pub fn world_rank() -> c_int {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: both may be called at any time, with valid out-pointers.
    unsafe {
        ffi::PMPI_Initialized(&mut init);
        ffi::PMPI_Finalized(&mut fin);
    }
    if init == 0 || fin != 0 {
        return -1;
    }
    let mut rank: c_int = -1;
    // SAFETY: MPI is initialized and not finalized; `RSMPI_COMM_WORLD` is the world
    // communicator's handle; `rank` is a valid out-pointer.
    unsafe { ffi::PMPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank) };
    rank
}

/// Writes one line of the log when it is on.
pub fn line(text: std::fmt::Arguments<'_>) {
    if crate::config::get().log {
        stderr_line(format_args!(
            "[collectives-interpose r{}] {text}",
            world_rank()
        ));
    }
}

/// `text` and its newline, as one buffer.
fn whole_line(text: std::fmt::Arguments<'_>) -> String {
    format!("{text}\n")
}

/// Writes `text` and a newline to stderr in one write, so that the lines of ranks sharing a
/// terminal or `mpirun`'s pipe do not cut into each other (`eprintln!` writes the pieces of its
/// format one by one; one write of a line up to the pipe's atomic size lands whole).
pub fn stderr_line(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    // A line that cannot be written is dropped: the log must never fail a call.
    let _ = std::io::stderr().write_all(whole_line(text).as_bytes());
}

/// `log!("...", args)`: one line of the verbose log.
macro_rules! log {
    ($($t:tt)*) => {
        if $crate::config::get().log {
            $crate::log::line(format_args!($($t)*));
        }
    };
}
pub(crate) use log;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_buffer_with_its_newline() {
        assert_eq!(whole_line(format_args!("a {}", "b")), "a b\n");
        assert_eq!(whole_line(format_args!("")), "\n");
    }
}

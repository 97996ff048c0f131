//! Plumbing of the staged backend: the chunk size of pipelined transfers. The pinned host buffers
//! and the copies through them are in `backend::cuda_common`, shared with the CUDA-aware backend.

use std::ops::Range;

/// Environment variable: the chunk size of pipelined all-reduces, in bytes (suffixes `K`, `M`, `G`
/// are powers of 1024).
pub const CHUNK_ENV: &str = "COLLECTIVES_STAGED_CHUNK";

/// The chunk size when [`CHUNK_ENV`] is not set: 4 MiB was the best or close to it from 16 MiB to 256 MiB
/// on 2xH200 (docs/PERFORMANCE.md, "Staged MPI: the all-reduce chunk size").
pub const DEFAULT_CHUNK_BYTES: usize = 4 << 20;

/// Element ranges of at most `chunk` elements (at least one) covering `0..len`.
pub fn chunks(len: usize, chunk: usize) -> Vec<Range<usize>> {
    let chunk = chunk.max(1);
    (0..len)
        .step_by(chunk)
        .map(|a| a..(a + chunk).min(len))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range() {
        assert_eq!(chunks(0, 4), Vec::<Range<usize>>::new());
        assert_eq!(chunks(3, 4), vec![0..3]);
        assert_eq!(chunks(8, 4), vec![0..4, 4..8]);
        assert_eq!(chunks(9, 4), vec![0..4, 4..8, 8..9]);
        assert_eq!(chunks(2, 0), vec![0..1, 1..2]);
    }
}

//! MPI handles (pointers in Open MPI, integers in MPICH) as integer keys.

/// The bits of a handle, zero-extended to 64 bits.
///
/// Handles are plain values of at most 8 bytes in every MPI (a pointer or an `int`); a larger
/// type keeps its first 8 bytes, which never happens with a real `mpi.h`.
pub fn key<T: Copy>(h: T) -> u64 {
    let n = std::mem::size_of::<T>().min(8);
    let mut bytes = [0u8; 8];
    // SAFETY: `h` is a live local of `size_of::<T>()` bytes, at least `n`; `bytes` holds 8;
    // reading the bytes of a `Copy` handle type (a pointer or an integer, without padding) is
    // defined.
    unsafe {
        std::ptr::copy_nonoverlapping((&h as *const T).cast::<u8>(), bytes.as_mut_ptr(), n);
    }
    u64::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn keys_of_pointers_and_integers() {
        assert_eq!(key(0i32), 0);
        assert_eq!(key(7i32), 7);
        let p = 0x1234_5678usize as *const u8;
        assert_eq!(key(p), 0x1234_5678);
        assert_ne!(key(1i32), key(2i32));
    }
}

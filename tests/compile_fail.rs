//! Compile-fail tests: buffers of non-blocking operations stay borrowed while the operation may use
//! them (and persistent plans borrow theirs for their whole life); a send and a receive buffer that overlap (on host or device memory) do not compile; and
//! `Element` cannot be implemented outside the library.

#[test]
fn non_blocking_buffers_stay_borrowed() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

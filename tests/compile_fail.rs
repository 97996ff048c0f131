//! Compile-fail tests: buffers of non-blocking operations stay borrowed while the operation may use
//! them, and a send and a receive buffer that overlap (on host or device memory) do not compile.

#[test]
fn non_blocking_buffers_stay_borrowed() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

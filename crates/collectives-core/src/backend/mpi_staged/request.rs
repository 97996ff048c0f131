//! Operations in flight: [`StagedPending`], an `MPI_Request` on pinned host buffers and the copy of
//! the result back to the device once complete. It lives in `backend::cuda_common` because the
//! CUDA-aware backend uses it too (where its MPI takes no device buffers in non-blocking
//! collectives).

pub(crate) use crate::backend::cuda_common::StagedPending;

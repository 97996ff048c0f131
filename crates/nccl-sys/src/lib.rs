//! Raw NCCL bindings, loaded at run time (filled in by the NCCL backend work).
#![deny(missing_docs)]

//! The communicators of a run on each backend: the measured one, an unchecked MPI one for barriers
//! and the reductions of times and wrong counts, and with `--checked-cost` a second measured one with
//! checked mode on; and the header line that says what each runs on.

use std::sync::Arc;

use anyhow::bail;
use collectives_core::cudarc::driver::CudaStream;
use collectives_core::{
    Communicator, DeviceCommunicator, MpiComm, MpiCudaComm, MpiStagedComm, NcclComm,
};

use crate::measure::backend::Backend;

/// Whether cudarc tracks buffer uses with events (its default). `COLLBENCH_EVENT_TRACKING=0` turns
/// it off for the run's buffers, to measure what the tracking costs per call.
fn event_tracking() -> bool {
    std::env::var("COLLBENCH_EVENT_TRACKING").map_or(true, |v| v.trim() != "0")
}

/// The communicators of one NCCL-backend run.
#[derive(Debug)]
pub struct NcclComms {
    /// The measured communicator (checked mode as `--checked`).
    pub main: NcclComm,
    /// Barriers, the reductions of times and wrong counts: MPI, never checked, never measured.
    pub ctl: MpiComm,
    /// With `--checked-cost`: a second NCCL communicator over the same ranks with checked mode on.
    pub checked_on: Option<NcclComm>,
}

impl NcclComms {
    /// Make the communicators over all ranks of `universe` (collective; one GPU per rank, chosen by
    /// node-local rank).
    ///
    /// # Errors
    /// The library's errors: no CUDA driver or libnccl, more ranks on a node than GPUs, NCCL
    /// initialization failing or timing out (the same verdict on every rank where the library can
    /// agree on it).
    pub fn new(
        universe: &mpi::environment::Universe,
        checked: bool,
        checked_cost: bool,
    ) -> anyhow::Result<Self> {
        let ctl = MpiComm::world(universe)?.with_checked(false);
        let main = NcclComm::from_mpi(&ctl, None)?.with_checked(checked);
        if !event_tracking() {
            // SAFETY: every buffer of the run is allocated after this and used on the communicator's
            // stream only (uploads, collectives and downloads are all ordered on it), which is what
            // cudarc asks of untracked slices.
            unsafe { main.context().disable_event_tracking() };
        }
        let checked_on = if checked_cost {
            Some(NcclComm::from_mpi(&ctl, None)?.with_checked(true))
        } else {
            None
        };
        Ok(NcclComms {
            main,
            ctl,
            checked_on,
        })
    }

    /// The header line naming the NCCL release and this rank's device.
    pub fn describe(&self) -> String {
        let lib = self.main.library();
        let ctx = self.main.context();
        let tracking = match (event_tracking(), ctx.is_in_multi_stream_mode()) {
            (true, true) => "on, active (the context has several streams)",
            (true, false) => "on, inactive (one stream)",
            (false, _) => "off (COLLBENCH_EVENT_TRACKING=0)",
        };
        let name = ctx.name().unwrap_or_else(|e| format!("name unknown: {e}"));
        format!(
            "nccl: NCCL {} ({}); rank {} on device {} ({name}); one GPU per rank, by node-local rank; cudarc event tracking {tracking}",
            lib.version(),
            lib.path().display(),
            self.main.rank(),
            ctx.ordinal(),
        )
    }

    /// Free the NCCL communicators after their work completes, reporting errors.
    ///
    /// # Errors
    /// The library's errors from waiting and from `ncclCommDestroy`.
    pub fn finalize(self) -> anyhow::Result<()> {
        self.main.finalize()?;
        if let Some(c) = self.checked_on {
            c.finalize()?;
        }
        Ok(())
    }
}

/// A communicator of one of the device backends over MPI.
#[derive(Debug)]
pub enum DeviceMpi {
    /// `cuda-mpi`.
    Cuda(MpiCudaComm),
    /// `mpi-staged`.
    Staged(MpiStagedComm),
}

impl DeviceMpi {
    /// Make one over the ranks of `ctl` for `backend` (`cuda-mpi` or `mpi-staged`), on the GPU of the
    /// node-local rank. Collective.
    ///
    /// # Errors
    /// The library's refusal (an MPI that is not CUDA-aware for `cuda-mpi`, no GPU) or its errors;
    /// another backend.
    pub fn new(ctl: &MpiComm, backend: Backend, checked: bool) -> anyhow::Result<Self> {
        Ok(match backend {
            Backend::CudaMpi => {
                DeviceMpi::Cuda(MpiCudaComm::from_mpi(ctl, None)?.with_checked(checked))
            }
            Backend::MpiStaged => {
                DeviceMpi::Staged(MpiStagedComm::from_mpi(ctl, None)?.with_checked(checked))
            }
            other => bail!("{} is not a device backend over MPI", other.name()),
        })
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            DeviceMpi::Cuda(_) => Backend::CudaMpi,
            DeviceMpi::Staged(_) => Backend::MpiStaged,
        }
    }

    /// The communicator's stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        match self {
            DeviceMpi::Cuda(c) => c.stream(),
            DeviceMpi::Staged(c) => c.stream(),
        }
    }

    /// The MPI communicator underneath.
    pub fn mpi(&self) -> &MpiComm {
        match self {
            DeviceMpi::Cuda(c) => c.mpi(),
            DeviceMpi::Staged(c) => c.mpi(),
        }
    }

    /// Wait for the communicator's stream.
    ///
    /// # Errors
    /// CUDA errors.
    pub fn synchronize(&self) -> anyhow::Result<()> {
        match self {
            DeviceMpi::Cuda(c) => c.synchronize()?,
            DeviceMpi::Staged(c) => c.synchronize()?,
        }
        Ok(())
    }

    /// The header line: backend, device, and what decides the path.
    pub fn describe(&self) -> String {
        let ctx = self.stream().context();
        let name = ctx.name().unwrap_or_else(|e| format!("name unknown: {e}"));
        let how = match self {
            DeviceMpi::Cuda(c) => {
                let verdict = collectives_core::cuda_aware::detect()
                    .map(|d| d.awareness.to_string())
                    .unwrap_or_else(|e| e.to_string());
                let forced = if c.forced() { " (forced)" } else { "" };
                format!("device pointers to MPI; CUDA-aware: {verdict}{forced}")
            }
            DeviceMpi::Staged(c) => format!(
                "pinned host memory and the host MPI; all-reduce chunks of {} bytes",
                c.chunk_bytes()
            ),
        };
        format!(
            "{}: rank {} on device {} ({name}); {how}; timed with the wall clock, stream drained",
            self.backend().name(),
            self.mpi().rank(),
            ctx.ordinal()
        )
    }

    /// Free the communicator.
    ///
    /// # Errors
    /// CUDA and MPI errors.
    pub fn finalize(self) -> anyhow::Result<()> {
        match self {
            DeviceMpi::Cuda(c) => c.finalize()?,
            DeviceMpi::Staged(c) => c.finalize()?,
        }
        Ok(())
    }
}

/// The communicators of one run on a device backend over MPI.
#[derive(Debug)]
pub struct DeviceMpiComms {
    /// The measured communicator (checked mode as `--checked`).
    pub main: DeviceMpi,
    /// Barriers and the reductions of times and wrong counts: host MPI, never checked.
    pub ctl: MpiComm,
    /// With `--checked-cost`: a second communicator with checked mode on.
    pub checked_on: Option<DeviceMpi>,
}

impl DeviceMpiComms {
    /// Make them over all ranks of `universe`. Collective.
    ///
    /// # Errors
    /// As [`DeviceMpi::new`].
    pub fn new(
        universe: &mpi::environment::Universe,
        backend: Backend,
        checked: bool,
        checked_cost: bool,
    ) -> anyhow::Result<Self> {
        let ctl = MpiComm::world(universe)?.with_checked(false);
        let main = DeviceMpi::new(&ctl, backend, checked)?;
        if !event_tracking() {
            // SAFETY: every buffer of the run is allocated after this and used on the communicator's
            // stream only (uploads, collectives, downloads), which is what cudarc asks of untracked
            // slices.
            unsafe { main.stream().context().disable_event_tracking() };
        }
        let checked_on = if checked_cost {
            Some(DeviceMpi::new(&ctl, backend, true)?)
        } else {
            None
        };
        Ok(DeviceMpiComms {
            main,
            ctl,
            checked_on,
        })
    }

    /// Free the communicators.
    ///
    /// # Errors
    /// CUDA and MPI errors.
    pub fn finalize(self) -> anyhow::Result<()> {
        self.main.finalize()?;
        if let Some(c) = self.checked_on {
            c.finalize()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use collectives_core::cudarc::driver::CudaContext;
    use collectives_core::device;
    use collectives_core::ReduceOp;

    use crate::measure::dtype::{DataType, ElementVisitor};
    use crate::measure::expected::{input_value, BenchElement};

    use super::*;

    /// GPU only: device buffers of every element type go up and come back unchanged, as the engine's
    /// device backends move them.
    #[test]
    #[ignore = "needs a CUDA device"]
    fn buffers_round_trip_every_element_type() {
        struct RoundTrip(Arc<CudaStream>);
        impl ElementVisitor for RoundTrip {
            type Output = ();
            fn visit<T: BenchElement>(self, dtype: DataType) {
                let host: Vec<T> = (0..1000)
                    .map(|i| input_value(ReduceOp::Sum, 1, 3, i))
                    .collect();
                let zeros = device::alloc_zeros::<T>(&self.0, host.len()).unwrap();
                let back = device::download(&self.0, &zeros).unwrap();
                assert!(back.iter().all(|x| *x == T::zeroed()), "{}", dtype.name());
                let dev = device::upload(&self.0, &host).unwrap();
                assert!(
                    device::download(&self.0, &dev).unwrap() == host,
                    "{}",
                    dtype.name()
                );
                let mut dev = dev;
                assert!(device::copy_to_device(&self.0, &host[1..], &mut dev).is_err());
                let empty = device::alloc_zeros::<T>(&self.0, 0).unwrap();
                assert!(device::download(&self.0, &empty).unwrap().is_empty());
            }
        }
        let ctx = CudaContext::new(0).unwrap();
        let stream = ctx.new_stream().unwrap();
        for d in DataType::ALL {
            d.visit(RoundTrip(stream.clone()));
        }
    }
}

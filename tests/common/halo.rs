//! The halo exchange checked against the global reference, on any device communicator: shared by
//! the NCCL test (`nccl_halo`) and the MPI device backends' (`cuda_mpi_collectives`), which include
//! it by path.
#![allow(dead_code)] // each binary uses its own part

use collectives::halo::{self, HaloExchange, HaloSpec, HaloTransport, Neighbours};
use collectives::{device, DeviceCommunicator};

use crate::common::T;

/// One exchange of `spec` (called `times` times), compared cell by cell with the reference.
pub fn exchange_and_check<C: DeviceCommunicator>(t: &T, comm: &C, spec: HaloSpec, times: usize) {
    exchange_with(t, comm, spec, HaloTransport::Auto, times);
}

/// [`exchange_and_check`] with the given transport.
pub fn exchange_with<C: DeviceCommunicator>(
    t: &T,
    comm: &C,
    spec: HaloSpec,
    transport: HaloTransport,
    times: usize,
) {
    let what = format!("{spec:?} {} x{times}", transport.name());
    let opts = HaloExchange::default_options();
    let made = HaloExchange::with_transport(comm, spec, &opts, transport);
    let Some(mut ex) = t.ok(made, &format!("{what}: new")) else {
        return;
    };
    let grid = *ex.grid();
    let rank = comm.rank();
    let Some(init) = t.ok(halo::initial_field(&spec, &grid, rank), "initial_field") else {
        return;
    };
    let Some(mut field) = t.ok(device::upload(comm.stream(), &init), "upload") else {
        return;
    };
    for _ in 0..times {
        t.ok(ex.exchange(&mut field), &format!("{what}: exchange"));
    }
    t.ok(comm.synchronize(), &format!("{what}: synchronize"));
    let Some(got) = t.ok(device::download(comm.stream(), &field), "download") else {
        return;
    };
    let Some(want) = t.ok(halo::expected_field(&spec, &grid, rank), "expected_field") else {
        return;
    };
    let wrong: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    if let Some(&first) = wrong.first() {
        t.fail(format!(
            "{what}: rank {rank}: {} of {} cells differ; first at index {first}: got {}, expected {} \
             (grid {:?}, plan {})",
            wrong.len(),
            want.len(),
            got[first],
            want[first],
            grid.dims(),
            ex.plan()
        ));
    }
}

/// The exchange run step by step ([`HaloExchange::exchange_timed`]) with 1 and 3 chunks: the
/// same ghost cells as the reference, and sane times (on one rank, all of them local copies).
pub fn timed_exchange<C: DeviceCommunicator>(t: &T, c: &C, transport: HaloTransport) {
    for chunks in [1, 3] {
        let spec = HaloSpec::cube(8, 3, 2, Neighbours::All).with_chunks(chunks);
        let opts = HaloExchange::default_options();
        let made = HaloExchange::with_transport(c, spec, &opts, transport);
        let Some(mut ex) = t.ok(made, "new") else {
            return;
        };
        let grid = *ex.grid();
        let rank = c.rank();
        let (Some(init), Some(want)) = (
            t.ok(halo::initial_field(&spec, &grid, rank), "initial_field"),
            t.ok(halo::expected_field(&spec, &grid, rank), "expected_field"),
        ) else {
            return;
        };
        let Some(mut field) = t.ok(device::upload(c.stream(), &init), "upload") else {
            return;
        };
        if let Some(times) = t.ok(ex.exchange_timed(&mut field), "exchange_timed") {
            t.check(
                times.pack_ms >= 0.0
                    && times.local_ms >= 0.0
                    && times.transfer_ms >= 0.0
                    && times.unpack_ms >= 0.0
                    && times.pull_ms >= 0.0,
                || format!("negative times {times:?}"),
            );
            t.check(times.total_ms() > 0.0, || format!("zero time {times:?}"));
            // One rank is its own neighbour everywhere: all of its time is local copies.
            if c.size() == 1 {
                t.check(times.local_ms > 0.0 && ex.plan().sends().is_empty(), || {
                    format!("one rank: {times:?}, plan {}", ex.plan())
                });
            }
        }
        let got = t.ok(device::download(c.stream(), &field), "download");
        t.check(got.as_ref() == Some(&want), || {
            format!("exchange_timed, chunks {chunks}")
        });
    }
}

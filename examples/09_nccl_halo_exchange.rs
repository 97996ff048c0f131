//! A 3-D halo exchange on NCCL: every rank holds a 12 x 10 x 8 block of 3 f64 quantities with 2
//! ghost cells on each side, on a periodic process grid; one exchange with all 26 neighbours
//! fills every ghost cell, and each rank checks its field against the global reference (each cell
//! holds a value computed from its global coordinates). Then the same with the 6 face neighbours
//! only, which leaves the edge and corner ghost cells as they were.
//! One rank per GPU: `mpirun -n 2 target/release/examples/09_nccl_halo_exchange`.

use collectives::halo::{self, HaloExchange, HaloSpec, Neighbours};
use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm};

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    let comm = NcclComm::from_mpi(&world, None)?;
    let rank = comm.rank();
    let stream = comm.stream().clone();

    for neighbours in [Neighbours::All, Neighbours::Faces] {
        let spec = HaloSpec::new([12, 10, 8], 2, 3, neighbours);
        let mut halo = HaloExchange::new(&comm, spec)?;
        let grid = *halo.grid();

        // Interior cells hold the global reference, ghost cells halo::GHOST_FILL.
        let mut field = device::upload(&stream, &halo::initial_field(&spec, &grid, rank)?)?;
        halo.exchange(&mut field)?;
        comm.synchronize()?;

        let got = device::download(&stream, &field)?;
        let expected = halo::expected_field(&spec, &grid, rank)?;
        let wrong = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
        assert_eq!(
            wrong, 0,
            "rank {rank}: {wrong} cells differ ({neighbours:?})"
        );
        if rank == 0 {
            println!(
                "09_nccl_halo_exchange: {} ranks on a {:?} grid, {} neighbours, {} messages of {} \
                 bytes in all from rank 0: every ghost cell correct",
                comm.size(),
                grid.dims(),
                neighbours.count(),
                halo.plan().sends().len(),
                halo.plan().payload_bytes()
            );
        }
    }
    Ok(())
}

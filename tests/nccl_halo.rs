//! The 3-D halo exchange on NCCL (`collectives::halo`), checked on every rank against the global
//! reference (`halo::expected_field`: what every ghost cell must hold, computed from the global
//! field), for 6 and 26 neighbours, radius 1 and 3, 1 and 3 quantities, cubic and non-cubic
//! blocks, the default and explicit process grids (so that on 1 and 2 ranks neighbours are the
//! rank itself or the same other rank in several directions), pipeline depths (chunks) with more
//! and fewer quantities than chunks, repeated exchanges, back-to-back exchanges of a changing
//! field, the timed (step by step) exchange, both transports (CUDA IPC between ranks of a node
//! and NCCL, also mixed: ranks that choose differently must agree on NCCL), exchanges made and
//! dropped in a loop, and bad input. One rank per GPU:
//! `mpirun -n 2 target/release/deps/nccl_halo-*`; with `HALO_EXPECT_IPC=1` the run also requires
//! that ranks sharing a node with peer access do use IPC. Without a CUDA driver or libnccl it
//! reports that it was skipped and passes nothing.

#![allow(clippy::useless_vec)] // the shared suite (tests/common) builds buffers as vectors

mod common;
#[path = "common/halo.rs"]
mod halo_check;

use std::cell::OnceCell;

use collectives::backend::nccl::cuda_driver_present;
use collectives::halo::{self, HaloExchange, HaloSpec, HaloTransport, Neighbours};
use collectives::{device, Communicator, DeviceCommunicator, Error, NcclComm};
use common::{case, Case, T};
use halo_check::exchange_and_check;

thread_local! {
    /// One NCCL communicator for the whole run (made collectively by the first test on every rank).
    static NCCL: OnceCell<NcclComm> = const { OnceCell::new() };
}

fn with_nccl(t: &T, body: impl FnOnce(&NcclComm)) {
    NCCL.with(|cell| {
        if cell.get().is_none() {
            match NcclComm::from_mpi(t.comm, None) {
                Ok(c) => {
                    let _ = cell.set(c);
                }
                Err(e) => return t.fail(format!("NcclComm::from_mpi: {e}")),
            }
        }
        if let Some(c) = cell.get() {
            body(c)
        }
    })
}

fn modes_radii_quantities(t: &T) {
    with_nccl(t, |c| {
        for neighbours in [Neighbours::Faces, Neighbours::All] {
            for radius in [1, 3] {
                for quantities in [1, 3] {
                    exchange_and_check(t, c, HaloSpec::cube(6, radius, quantities, neighbours), 1);
                }
            }
        }
    })
}

fn non_cubic_blocks(t: &T) {
    with_nccl(t, |c| {
        for neighbours in [Neighbours::Faces, Neighbours::All] {
            exchange_and_check(t, c, HaloSpec::new([7, 5, 3], 3, 2, neighbours), 1);
            exchange_and_check(t, c, HaloSpec::new([3, 9, 4], 1, 3, neighbours), 1);
            // Radius equal to the smallest side: the whole interior along z is sent.
            exchange_and_check(t, c, HaloSpec::new([8, 6, 2], 2, 1, neighbours), 1);
        }
    })
}

fn explicit_grids(t: &T) {
    with_nccl(t, |c| {
        let size = c.size();
        for dims in [[1, size, 1], [1, 1, size]] {
            for neighbours in [Neighbours::Faces, Neighbours::All] {
                exchange_and_check(
                    t,
                    c,
                    HaloSpec::new([5, 4, 6], 2, 2, neighbours).with_dims(dims),
                    1,
                );
            }
        }
    })
}

fn repeated_exchanges_are_stable(t: &T) {
    // A second exchange sends the same interior cells again: the result does not change.
    with_nccl(t, |c| {
        exchange_and_check(t, c, HaloSpec::cube(5, 2, 3, Neighbours::All), 3);
    })
}

fn pipeline_depths(t: &T) {
    // Fewer, as many and more quantities than chunks (then the z layers are cut), and a chunk
    // count beyond the z layers of a face (empty pieces).
    with_nccl(t, |c| {
        for (quantities, chunks) in [(8, 4), (3, 4), (2, 2), (1, 3), (5, 1), (1, 16)] {
            for neighbours in [Neighbours::Faces, Neighbours::All] {
                let spec = HaloSpec::new([6, 5, 7], 2, quantities, neighbours).with_chunks(chunks);
                exchange_and_check(t, c, spec, 2);
            }
        }
    })
}

/// Three exchanges back to back with no wait in between, the field overwritten on the
/// communicator's stream before each: the last one must see the last field, so every step of
/// the pipeline is ordered after what came before it on that stream.
fn back_to_back_exchanges_see_the_latest_field(t: &T) {
    with_nccl(t, |c| {
        for chunks in [1, 4] {
            let spec = HaloSpec::cube(40, 3, 8, Neighbours::All).with_chunks(chunks);
            let Some(mut ex) = t.ok(HaloExchange::new(c, spec), "new") else {
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
            let Some(mut field) = t.ok(device::alloc_zeros::<f64>(c.stream(), init.len()), "alloc")
            else {
                return;
            };
            for round in 1..=3 {
                let scaled: Vec<f64> = init.iter().map(|v| v * f64::from(round)).collect();
                t.ok(
                    device::copy_to_device(c.stream(), &scaled, &mut field),
                    "copy_to_device",
                );
                t.ok(ex.exchange(&mut field), "exchange");
            }
            t.ok(c.synchronize(), "synchronize");
            let got = t.ok(device::download(c.stream(), &field), "download");
            let want: Vec<f64> = want.iter().map(|v| v * 3.0).collect();
            let wrong = got.as_ref().map_or(usize::MAX, |g| {
                g.iter().zip(&want).filter(|(a, b)| a != b).count()
            });
            t.check(wrong == 0, || {
                format!("chunks {chunks}: {wrong} cells differ after three exchanges")
            });
        }
    })
}

fn timed_exchange_fills_the_same_cells(t: &T) {
    with_nccl(t, |c| halo_check::timed_exchange(t, c, HaloTransport::Auto))
}

/// Whether IPC use is required where it is possible (set on machines known to allow it).
fn expect_ipc() -> bool {
    std::env::var("HALO_EXPECT_IPC").is_ok_and(|v| v == "1")
}

/// Every rank's IPC peers as a matrix (`m[a * size + b]`: rank a reaches rank b through IPC).
fn ipc_matrix(t: &T, ex: &HaloExchange<'_>) -> Option<Vec<u8>> {
    let size = t.comm.size();
    let mut mine = vec![0u8; size];
    for p in ex.ipc_peers() {
        mine[p] = 1;
    }
    let mut all = vec![0u8; size * size];
    t.ok(t.comm.all_gather(&mine[..], &mut all[..]), "all_gather")?;
    Some(all)
}

/// A named transport choice per rank.
type Choice = (&'static str, fn(usize) -> HaloTransport);

/// Each transport choice, also different on different ranks: the pairs that use IPC are agreed
/// by both ends (the matrix is symmetric), a rank that chose NCCL uses no IPC, and three
/// back-to-back exchanges of a changing field with a timed one in between fill every ghost cell.
fn transports(t: &T) {
    with_nccl(t, |c| {
        let (rank, size) = (c.rank(), c.size());
        let choices: [Choice; 3] = [
            ("auto", |_| HaloTransport::Auto),
            ("nccl", |_| HaloTransport::Comm),
            ("mixed", |r| {
                if r == 0 {
                    HaloTransport::Auto
                } else {
                    HaloTransport::Comm
                }
            }),
        ];
        for (name, choose) in choices {
            for (nb, chunks) in [(Neighbours::Faces, 2), (Neighbours::All, 3)] {
                let spec = HaloSpec::cube(24, 2, 4, nb).with_chunks(chunks);
                let what = format!("{name}, {nb:?}, chunks {chunks}");
                let mine = choose(rank);
                let Some(mut ex) = t.ok(
                    HaloExchange::with_transport(c, spec, &HaloExchange::default_options(), mine),
                    &format!("{what}: new"),
                ) else {
                    return;
                };
                t.check(ex.transport() == mine, || format!("{what}: transport"));
                let Some(m) = ipc_matrix(t, &ex) else {
                    return;
                };
                for a in 0..size {
                    for b in 0..size {
                        t.check(m[a * size + b] == m[b * size + a], || {
                            format!("{what}: IPC between {a} and {b} is not agreed: {m:?}")
                        });
                    }
                }
                let everyone_auto = (0..size).all(|r| choose(r) == HaloTransport::Auto);
                if !everyone_auto {
                    t.check(ex.ipc_peers().is_empty(), || {
                        format!(
                            "{what}: IPC peers {:?} although a rank chose NCCL",
                            ex.ipc_peers()
                        )
                    });
                }
                let neighbours: Vec<usize> = {
                    let mut p: Vec<usize> = ex.plan().sends().iter().map(|m| m.peer).collect();
                    p.sort_unstable();
                    p.dedup();
                    p
                };
                if everyone_auto && expect_ipc() {
                    t.check(ex.ipc_peers() == neighbours, || {
                        format!(
                            "{what}: IPC peers {:?}, neighbours {neighbours:?}",
                            ex.ipc_peers()
                        )
                    });
                }
                let grid = *ex.grid();
                let (Some(init), Some(want)) = (
                    t.ok(halo::initial_field(&spec, &grid, rank), "initial_field"),
                    t.ok(halo::expected_field(&spec, &grid, rank), "expected_field"),
                ) else {
                    return;
                };
                let Some(mut field) =
                    t.ok(device::alloc_zeros::<f64>(c.stream(), init.len()), "alloc")
                else {
                    return;
                };
                for round in 1..=4 {
                    let scaled: Vec<f64> = init.iter().map(|v| v * f64::from(round)).collect();
                    t.ok(
                        device::copy_to_device(c.stream(), &scaled, &mut field),
                        "copy_to_device",
                    );
                    if round == 2 {
                        t.ok(
                            ex.exchange_timed(&mut field),
                            &format!("{what}: exchange_timed"),
                        );
                    } else {
                        t.ok(ex.exchange(&mut field), &format!("{what}: exchange"));
                    }
                }
                t.ok(c.synchronize(), "synchronize");
                let got = t.ok(device::download(c.stream(), &field), "download");
                let want: Vec<f64> = want.iter().map(|v| v * 4.0).collect();
                let wrong = got.as_ref().map_or(usize::MAX, |g| {
                    g.iter().zip(&want).filter(|(a, b)| a != b).count()
                });
                t.check(wrong == 0, || {
                    format!(
                        "{what}: rank {rank}: {wrong} cells differ (IPC peers {:?})",
                        ex.ipc_peers()
                    )
                });
            }
        }
    })
}

/// Exchanges made, used and dropped in a loop (their IPC mappings opened and closed each
/// time), two alive at once: every exchange still fills every ghost cell.
fn exchanges_made_and_dropped(t: &T) {
    with_nccl(t, |c| {
        let rank = c.rank();
        for i in 0..6 {
            exchange_and_check(
                t,
                c,
                HaloSpec::cube(12 + i, 1 + i % 3, 2, Neighbours::All).with_chunks(1 + i % 2),
                1 + i % 2,
            );
        }
        let a_spec = HaloSpec::cube(10, 2, 3, Neighbours::Faces);
        let b_spec = HaloSpec::cube(14, 1, 2, Neighbours::All);
        let (Some(mut a), Some(mut b)) = (
            t.ok(HaloExchange::new(c, a_spec), "new a"),
            t.ok(HaloExchange::new(c, b_spec), "new b"),
        ) else {
            return;
        };
        let grid = *a.grid();
        let fields: Option<Vec<_>> = [a_spec, b_spec]
            .iter()
            .map(|s| {
                let init = t.ok(halo::initial_field(s, &grid, rank), "initial_field")?;
                t.ok(device::upload(c.stream(), &init), "upload")
            })
            .collect();
        let Some(mut fields) = fields else {
            return;
        };
        for _ in 0..3 {
            t.ok(a.exchange(&mut fields[0]), "exchange a");
            t.ok(b.exchange(&mut fields[1]), "exchange b");
        }
        t.ok(c.synchronize(), "synchronize");
        for (s, f) in [a_spec, b_spec].iter().zip(&fields) {
            let got = t.ok(device::download(c.stream(), f), "download");
            let want = t.ok(halo::expected_field(s, &grid, rank), "expected_field");
            t.check(got.is_some() && got == want, || {
                format!("{s:?}: interleaved exchanges")
            });
        }
    })
}

fn bad_input(t: &T) {
    with_nccl(t, |c| {
        let spec = HaloSpec::cube(4, 1, 1, Neighbours::Faces);
        let Some(mut ex) = t.ok(HaloExchange::new(c, spec), "new") else {
            return;
        };
        // A field of the wrong length: refused before anything is enqueued.
        if let Some(mut short) = t.ok(
            device::alloc_zeros::<f64>(c.stream(), ex.field_len() - 1),
            "alloc",
        ) {
            t.err(
                ex.exchange(&mut short),
                "short field",
                |e| matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("elements")),
            );
        }
        // A bad spec on every rank: refused on every rank.
        t.err(
            HaloExchange::new(c, HaloSpec::cube(4, 5, 1, Neighbours::All)),
            "radius beyond the block",
            |e| matches!(e, Error::InvalidArgument { .. }),
        );
        t.err(
            HaloExchange::new(
                c,
                // One rank more than there are, whatever the count.
                HaloSpec::cube(4, 1, 1, Neighbours::All).with_dims([c.size() + 1, 1, 1]),
            ),
            "grid of the wrong size",
            |e| matches!(e, Error::InvalidArgument { .. }),
        );
        // Ranks that disagree (rank 0 asks for radius 2, the others for 1) all get an error, and
        // nobody hangs; on one rank nothing disagrees.
        let radius = if c.rank() == 0 { 2 } else { 1 };
        let r = HaloExchange::new(c, HaloSpec::cube(4, radius, 1, Neighbours::All));
        if c.size() > 1 {
            t.err(r, "ranks disagree", |e| {
                matches!(e, Error::InvalidArgument { msg, .. } if msg.contains("different halo specs"))
            });
        } else {
            t.ok(r, "one rank agrees with itself");
        }
        // One rank with a bad spec: every rank gets an error.
        let radius = if c.rank() == 0 { 9 } else { 1 };
        t.err(
            HaloExchange::new(c, HaloSpec::cube(4, radius, 1, Neighbours::All)),
            "one bad spec",
            |e| matches!(e, Error::InvalidArgument { .. }),
        );
    })
}

fn main() {
    if !cuda_driver_present() || collectives::nccl_sys::library().is_err() {
        println!("nccl_halo: needs a CUDA driver and libnccl; skipped");
        println!("mpi-tests: 0 passed, 0 failed (no GPU)");
        return;
    }
    let cases: Vec<Case> = vec![
        case("halo_modes_radii_quantities", modes_radii_quantities),
        case("halo_non_cubic_blocks", non_cubic_blocks),
        case("halo_explicit_grids", explicit_grids),
        case(
            "halo_repeated_exchanges_are_stable",
            repeated_exchanges_are_stable,
        ),
        case("halo_pipeline_depths", pipeline_depths),
        case(
            "halo_back_to_back_exchanges_see_the_latest_field",
            back_to_back_exchanges_see_the_latest_field,
        ),
        case(
            "halo_timed_exchange_fills_the_same_cells",
            timed_exchange_fills_the_same_cells,
        ),
        case("halo_transports", transports),
        case(
            "halo_exchanges_made_and_dropped",
            exchanges_made_and_dropped,
        ),
        case("halo_bad_input", bad_input),
    ];
    common::run(&cases)
}

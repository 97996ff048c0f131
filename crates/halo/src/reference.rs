//! The CPU reference: the field every rank starts with ([`initial_field`]), what every ghost
//! cell must hold afterwards, computed from the global field alone ([`expected_field`]), and
//! the whole exchange of every rank run on the CPU ([`exchange_on_cpu`]).

use std::collections::HashMap;

use collectives_core::{Error, Result};

use crate::boxes::CellBox;
use crate::error::pack_error;
use crate::grid::ProcessGrid;
use crate::plan::HaloPlan;
use crate::spec::{HaloSpec, Neighbours};

/// The value the reference field holds at global cell `g` (`[x, y, z]` on a global grid of
/// `global` cells) for `quantity`: `1 + x + X (y + Y (z + Z quantity))`, exact in f64 up to
/// 2^53 cells, distinct for every cell and quantity, and never 0 or [`GHOST_FILL`].
pub fn reference_value(global: [usize; 3], g: [usize; 3], quantity: usize) -> f64 {
    (1 + g[0] + global[0] * (g[1] + global[1] * (g[2] + global[2] * quantity))) as f64
}

/// What [`initial_field`] puts in every ghost cell.
pub const GHOST_FILL: f64 = -1.0;

/// Global cells of the whole domain: `n x dims` per axis.
pub fn global_cells(spec: &HaloSpec, grid: &ProcessGrid) -> [usize; 3] {
    std::array::from_fn(|a| spec.n[a] * grid.dims()[a])
}

/// The global cell of padded cell `cell` of `rank`, wrapped periodically.
pub fn global_cell(
    spec: &HaloSpec,
    grid: &ProcessGrid,
    rank: usize,
    cell: [usize; 3],
) -> [usize; 3] {
    let c = grid.coords(rank);
    let global = global_cells(spec, grid);
    std::array::from_fn(|a| {
        let g = (c[a] * spec.n[a] + cell[a]) as i64 - spec.radius as i64;
        g.rem_euclid(global[a] as i64) as usize
    })
}

fn field_with(
    spec: &HaloSpec,
    grid: &ProcessGrid,
    rank: usize,
    ghost: impl Fn([usize; 3]) -> bool,
) -> Result<Vec<f64>> {
    let mut f = vec![GHOST_FILL; spec.field_len()?];
    let p = spec.padded();
    let global = global_cells(spec, grid);
    let interior = CellBox {
        start: [spec.radius; 3],
        size: spec.n,
    };
    for q in 0..spec.quantities {
        for z in 0..p[2] {
            for y in 0..p[1] {
                for x in 0..p[0] {
                    let cell = [x, y, z];
                    if interior.contains(cell) || ghost(cell) {
                        let g = global_cell(spec, grid, rank, cell);
                        f[spec.index(q, cell)] = reference_value(global, g, q);
                    }
                }
            }
        }
    }
    Ok(f)
}

/// The field of `rank` before an exchange: interior cells hold [`reference_value`] of their
/// global cell, ghost cells [`GHOST_FILL`].
///
/// # Errors
/// [`Error::InvalidArgument`] for a spec [`HaloSpec::validate`] refuses.
pub fn initial_field(spec: &HaloSpec, grid: &ProcessGrid, rank: usize) -> Result<Vec<f64>> {
    spec.validate()?;
    field_with(spec, grid, rank, |_| false)
}

/// The field of `rank` after an exchange, computed from the global field alone: interior cells
/// as before; every ghost cell the exchange fills (all of them with [`Neighbours::All`], those
/// across one face only with [`Neighbours::Faces`]) holds [`reference_value`] of its
/// periodically wrapped global cell; the others still hold [`GHOST_FILL`].
///
/// # Errors
/// [`Error::InvalidArgument`] for a spec [`HaloSpec::validate`] refuses.
pub fn expected_field(spec: &HaloSpec, grid: &ProcessGrid, rank: usize) -> Result<Vec<f64>> {
    spec.validate()?;
    let r = spec.radius;
    let n = spec.n;
    field_with(spec, grid, rank, |cell| {
        let outside = (0..3)
            .filter(|&a| cell[a] < r || cell[a] >= n[a] + r)
            .count();
        match spec.neighbours {
            Neighbours::All => outside > 0,
            Neighbours::Faces => outside == 1,
        }
    })
}

/// The whole exchange of every rank on the CPU: each rank's send regions packed
/// ([`datatype_pack::fused::pack`]), every message delivered to its peer in posting order (as
/// NCCL and MPI match messages between two ranks), and the receive regions unpacked. `fields[r]`
/// is rank `r`'s field. The reference the GPU exchange is tested against, and the test of the
/// plans and the message order.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad spec or grid, fields of the wrong count or length, or
/// a message whose length differs from what its receiver expects.
pub fn exchange_on_cpu(spec: &HaloSpec, grid: &ProcessGrid, fields: &mut [Vec<f64>]) -> Result<()> {
    const OP: &str = "exchange_on_cpu";
    let len = spec.field_len()?;
    if fields.len() != grid.size() || fields.iter().any(|f| f.len() != len) {
        return Err(Error::invalid(
            OP,
            format!(
                "expected {} fields of {len} elements, got {} fields",
                grid.size(),
                fields.len()
            ),
        ));
    }
    let plans = (0..grid.size())
        .map(|r| HaloPlan::new(spec, grid, r))
        .collect::<Result<Vec<_>>>()?;
    // (from, to, chunk) -> the message's bytes.
    let mut wire: HashMap<(usize, usize, usize), Vec<u8>> = HashMap::new();
    for (rank, plan) in plans.iter().enumerate() {
        let mut packed = vec![0u8; plan.send_bytes() as usize];
        let src: &[u8] = bytemuck::cast_slice(&fields[rank]);
        datatype_pack::fused::pack(plan.send_regions(), src, &mut packed)
            .map_err(|e| pack_error(OP, e))?;
        for m in plan.sends() {
            let bytes = packed[m.offset as usize..(m.offset + m.bytes) as usize].to_vec();
            if wire.insert((rank, m.peer, m.chunk), bytes).is_some() {
                return Err(Error::invalid(
                    OP,
                    format!("rank {rank} sends twice to {} in chunk {}", m.peer, m.chunk),
                ));
            }
        }
    }
    for (rank, plan) in plans.iter().enumerate() {
        let mut packed = vec![0u8; plan.recv_bytes() as usize];
        for m in plan.recvs() {
            let bytes = wire.remove(&(m.peer, rank, m.chunk)).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "rank {rank} expects a message from {} in chunk {}",
                        m.peer, m.chunk
                    ),
                )
            })?;
            if bytes.len() as u64 != m.bytes {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "rank {} sent {} bytes to rank {rank} in chunk {}, which expects {}",
                        m.peer,
                        bytes.len(),
                        m.chunk,
                        m.bytes
                    ),
                ));
            }
            packed[m.offset as usize..(m.offset + m.bytes) as usize].copy_from_slice(&bytes);
        }
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut fields[rank]);
        // Local copies: interior cells straight into this rank's own ghost cells.
        datatype_pack::fused::copy_in_place(&plan.copy_regions()?, dst)
            .map_err(|e| pack_error(OP, e))?;
        datatype_pack::fused::unpack(plan.recv_regions(), &packed, dst)
            .map_err(|e| pack_error(OP, e))?;
        // Wrap copies: edges and corners from the ghost cells just filled.
        datatype_pack::fused::copy_in_place(&plan.wrap_regions()?, dst)
            .map_err(|e| pack_error(OP, e))?;
    }
    if let Some((from, to, chunk)) = wire.keys().next() {
        return Err(Error::invalid(
            OP,
            format!("the message from rank {from} to rank {to} in chunk {chunk} is never received"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boxes::{box_plan, send_box};

    #[test]
    fn expected_field_marks_the_right_ghosts() {
        let spec = HaloSpec::cube(3, 1, 1, Neighbours::Faces);
        let grid = ProcessGrid::new(1, None).unwrap();
        let f = expected_field(&spec, &grid, 0).unwrap();
        // A face ghost holds the wrapped value, an edge ghost is untouched.
        let global = global_cells(&spec, &grid);
        assert_eq!(
            f[spec.index(0, [0, 1, 1])],
            reference_value(global, [2, 0, 0], 0)
        );
        assert_eq!(f[spec.index(0, [0, 0, 1])], GHOST_FILL);
        let all = HaloSpec::cube(3, 1, 1, Neighbours::All);
        let f = expected_field(&all, &grid, 0).unwrap();
        assert_eq!(
            f[spec.index(0, [0, 0, 4])],
            reference_value(global, [2, 2, 0], 0)
        );
    }

    /// The CPU exchange of every rank gives the expected field on every rank, for many grids,
    /// sizes, radii, quantity counts and both modes: the plans, the message order and the
    /// self-messages of periodic grids of 1 and 2 ranks per axis are right.

    #[test]
    fn cpu_exchange_matches_the_global_reference() {
        let mut cases = 0;
        for dims in [
            [1, 1, 1],
            [2, 1, 1],
            [1, 2, 1],
            [1, 1, 2],
            [2, 2, 1],
            [3, 1, 1],
            [2, 2, 2],
            [3, 2, 1],
            [1, 3, 2],
            [3, 3, 3],
        ] {
            for n in [[3, 3, 3], [4, 3, 5], [5, 6, 4]] {
                for radius in 1..=3 {
                    if radius > *n.iter().min().unwrap() {
                        continue;
                    }
                    for (quantities, chunks) in [(1, 1), (3, 1), (3, 2), (1, 4), (3, 3)] {
                        for neighbours in [Neighbours::Faces, Neighbours::All] {
                            let spec = HaloSpec::new(n, radius, quantities, neighbours)
                                .with_dims(dims)
                                .with_chunks(chunks);
                            let size = dims.iter().product();
                            let grid = ProcessGrid::new(size, spec.dims).unwrap();
                            let mut fields: Vec<Vec<f64>> = (0..size)
                                .map(|r| initial_field(&spec, &grid, r).unwrap())
                                .collect();
                            exchange_on_cpu(&spec, &grid, &mut fields).unwrap();
                            for (r, f) in fields.iter().enumerate() {
                                let want = expected_field(&spec, &grid, r).unwrap();
                                assert!(f == &want, "rank {r} differs for {spec:?} on {dims:?}");
                            }
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert!(cases > 500, "{cases}");
    }

    #[test]
    fn cpu_exchange_refuses_bad_fields() {
        let spec = HaloSpec::cube(3, 1, 1, Neighbours::Faces);
        let grid = ProcessGrid::new(2, None).unwrap();
        let mut one = vec![initial_field(&spec, &grid, 0).unwrap()];
        assert!(exchange_on_cpu(&spec, &grid, &mut one).is_err());
        let mut short = vec![vec![0.0; 3]; 2];
        assert!(exchange_on_cpu(&spec, &grid, &mut short).is_err());
    }

    #[test]
    fn box_plans_pack_the_right_cells() {
        let spec = HaloSpec::new([4, 3, 5], 1, 2, Neighbours::Faces);
        let grid = ProcessGrid::new(1, None).unwrap();
        let field = initial_field(&spec, &grid, 0).unwrap();
        let b = send_box(&spec, [0, 1, 0]);
        let plan = box_plan(&spec, &b).unwrap();
        assert_eq!(plan.packed_size(), 8 * 2 * 4 * 5);
        let mut packed = vec![0u8; plan.packed_size() as usize];
        datatype_pack::cpu::pack(&plan, bytemuck::cast_slice(&field), &mut packed).unwrap();
        let got: &[f64] = bytemuck::cast_slice(&packed);
        let mut want = Vec::new();
        for q in 0..2 {
            for z in 1..6 {
                for x in 1..5 {
                    want.push(field[spec.index(q, [x, 3, z])]);
                }
            }
        }
        assert_eq!(got, &want[..]);
    }
}

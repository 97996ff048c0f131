//! The write landing of the direct path ([`crate::direct`]): a receive offers its sender the
//! buffer it receives into, and the sender's kernel copies its own layout straight into it over
//! CUDA IPC, with no staging, no pack, no unpack and no event. A [`Target`] is that offer as
//! the receive's ready message carries it: the exported allocation of the receive buffer, the
//! driver's id of that allocation, and the receive's plan in its buffer. The sender writes only
//! where its own plan has the same shape ([`Target::fits`]); else it lends as before.

use datatype_pack::StridedBlock;

use crate::ipc::{Export, Handle};

/// A receive buffer offered to its sender's kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The receive buffer's allocation: its handle, the buffer's offset in it and the bytes
    /// from the buffer to its end.
    pub alloc: Export,
    /// The driver's id of the allocation (`CU_POINTER_ATTRIBUTE_BUFFER_ID`): an address the
    /// receiver freed and allocated again is another allocation, mapped anew by the sender.
    pub id: u64,
    /// The allocation's address in the receiving process: a target at the same address with
    /// another id tells the sender that the allocation it mapped there is gone, and its
    /// mapping is closed ([`crate::ipc::open_target`]).
    pub base: u64,
    /// The receive's plan in its buffer.
    pub plan: StridedBlock,
}

/// The shortest block a receive offers to be written into by its sender's kernel
/// (`Engine::offer`): each block lands by writes over the link between the GPUs, which move
/// short scattered blocks at a fraction of the link's speed (an x face of 8-byte blocks took
/// longer written than packed, pulled and unpacked: docs/logs/2026-11-28-typed, run 2).
pub const MIN_BLOCK: u64 = 64;

/// Dimensions a target's plan may have on the wire (a plan has a handful).
const MAX_DIMS: u64 = 16;

impl Target {
    /// Whether a send whose plan is `send` may write into this target: the same shape (block
    /// length, counts, strides, directions), so the same packed bytes land where the
    /// receive's own unpack would put them, and the receive's layout inside the allocation.
    pub fn fits(&self, send: &StridedBlock) -> bool {
        send.packed_size() > 0
            && send.same_shape(&self.plan)
            && self.plan.extent_end() <= self.alloc.len
    }

    /// Appends the target's wire form to `b`: its words (id, base, offset, length, the plan's start,
    /// block length, dimensions, counts, strides, a bit per reversed dimension), then the
    /// allocation's handle.
    pub fn encode(&self, b: &mut Vec<u8>) {
        let p = &self.plan;
        let mut w = vec![
            self.id,
            self.base,
            self.alloc.offset,
            self.alloc.len,
            p.start(),
            p.block_len(),
            p.counts().len() as u64,
        ];
        w.extend_from_slice(p.counts());
        w.extend_from_slice(p.strides());
        w.push(
            p.reversed()
                .iter()
                .enumerate()
                .fold(0u64, |m, (i, &r)| m | (u64::from(r) << i)),
        );
        for x in w {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(&self.alloc.handle);
    }

    /// The target whose wire form ([`Target::encode`]) is `b`, or `None` where it is not one.
    pub fn decode(b: &[u8]) -> Option<Target> {
        let word = |i: usize| -> Option<u64> {
            let c = b.get(i * 8..i * 8 + 8)?;
            Some(u64::from_le_bytes(c.try_into().ok()?))
        };
        let dims = word(6)?;
        if dims > MAX_DIMS {
            return None;
        }
        let n = dims as usize;
        let counts = (0..n).map(|i| word(7 + i)).collect::<Option<Vec<u64>>>()?;
        let strides = (0..n)
            .map(|i| word(7 + n + i))
            .collect::<Option<Vec<u64>>>()?;
        let bits = word(7 + 2 * n)?;
        let reversed = (0..n).map(|i| bits >> i & 1 == 1).collect();
        let at = (8 + 2 * n) * 8;
        let handle: Handle = b.get(at..at + 64)?.try_into().ok()?;
        if b.len() != at + 64 {
            return None;
        }
        let plan =
            StridedBlock::with_reversed(word(4)?, word(5)?, counts, strides, reversed).ok()?;
        Some(Target {
            alloc: Export {
                handle,
                offset: word(2)?,
                len: word(3)?,
            },
            id: word(0)?,
            base: word(1)?,
            plan,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn face(start: u64) -> StridedBlock {
        // The x face of a 256^3 f64 grid: 8-byte blocks, 256 by 256, strides 2 KiB and 512 KiB.
        StridedBlock::new(start, 8, vec![256, 256], vec![2048, 524_288]).unwrap()
    }

    fn target(plan: StridedBlock) -> Target {
        Target {
            alloc: Export {
                handle: std::array::from_fn(|i| i as u8 ^ 0x5a),
                offset: 4096,
                len: 128 << 20,
            },
            id: 77,
            base: 0x7f00_0000_0000,
            plan,
        }
    }

    #[test]
    fn targets_round_trip() {
        let reversed =
            StridedBlock::with_reversed(64, 16, vec![3, 5], vec![32, 4096], vec![false, true])
                .unwrap();
        for plan in [
            face(2040),
            reversed,
            StridedBlock::new(0, 24, vec![], vec![]).unwrap(),
        ] {
            let t = target(plan);
            let mut b = vec![];
            t.encode(&mut b);
            assert_eq!(Target::decode(&b), Some(t));
            assert!(Target::decode(&b[..b.len() - 1]).is_none());
            b.push(0);
            assert!(Target::decode(&b).is_none());
        }
    }

    #[test]
    fn a_send_writes_only_into_the_same_shape_inside_the_allocation() {
        let t = target(face(2040));
        // Another start (the interior layer the sender sends) is the same shape.
        assert!(t.fits(&face(8)));
        // Another block length, count or stride is not.
        assert!(!t.fits(&StridedBlock::new(8, 16, vec![256, 128], vec![2048, 524_288]).unwrap()));
        assert!(!t.fits(&StridedBlock::new(8, 8, vec![256, 255], vec![2048, 524_288]).unwrap()));
        assert!(!t.fits(&StridedBlock::new(8, 8, vec![256, 256], vec![4096, 524_288]).unwrap()));
        // The same packed bytes in another order are not.
        let rev = StridedBlock::with_reversed(
            8,
            8,
            vec![256, 256],
            vec![2048, 524_288],
            vec![true, false],
        )
        .unwrap();
        assert!(!t.fits(&rev));
        // A receive layout past the allocation's end is refused whatever the sender's shape.
        let mut short = target(face(2040));
        short.alloc.len = face(2040).extent_end() - 1;
        assert!(!short.fits(&face(8)));
        // Nothing to write: not a target.
        let empty = StridedBlock::new(0, 0, vec![], vec![]).unwrap();
        assert!(!target(empty.clone()).fits(&empty));
    }
}

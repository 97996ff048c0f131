//! The direct path's channels ([`crate::channel`] holds their GPU side): per ordered pair and
//! tag, what each side keeps of the other's words and staging; how a channel is set up over the
//! loans of a loop (the receiver's words offered in its ready message, [`offer_channel`]; the
//! sender's map of them, [`keep_offer`], and its slots, the staging its loans give back); and
//! how an `MPI_Sendrecv` opens both its channels at once ([`open_channel`]), calls an armed
//! unpack off ([`disarm`]) and settles one whose message came through ([`settle_channel`]).

use std::ffi::c_int;
use std::sync::Arc;

use crate::channel::{self, RecvCell};
use crate::config::{self, Channel};
use crate::engine::{Engine, Lent, Staging};
use crate::ipc::{self, Export};
use crate::log::log;
use crate::message::{Armed, Key, Receive, Taken, ERR_INTERN};
use crate::profile::{self, Phase};
use crate::sync::lock;
use crate::target;

use super::{name, state, Offer, State};

/// A send channel to one destination and tag ([`crate::channel`]).
#[derive(Debug)]
pub(super) struct SendChan {
    /// The packed size its messages have.
    pub(super) packed: u64,
    /// The receiver's offer it was made from (name and offset).
    pub(super) offer: (u32, u32),
    /// The receiver's flags, mapped here (none where the channel is refused: one GPU).
    pub(super) flags: Option<u64>,
    /// This rank's block counter for the packs.
    pub(super) counter: u64,
    /// The two slots: the staging lent for message `.1`, given back by the receiver, by
    /// that message's parity.
    pub(super) slots: [Option<(Staging, u64)>; 2],
}

/// A receive channel from one source and tag ([`crate::channel`]).
#[derive(Debug)]
pub(super) struct RecvChan {
    /// The packed size its messages have.
    pub(super) packed: u64,
    /// Its words.
    pub(super) cell: RecvCell,
    /// Its words' allocation as the sender maps it, `offset` at the cell.
    pub(super) export: Export,
    /// The staging the sender lent for message `.0`, by that message's parity.
    pub(super) lent: [Option<(u64, Lent)>; 2],
    /// Whether the sender's staging is on this rank's GPU (asked once it maps).
    pub(super) shared: Option<bool>,
}

/// The offer of the receive channel from `source` with `tag` in the ready message of blocking
/// receive `r` (number `seq`), made where there is none for its packed size: where channels
/// are on, the receive's blocks are short (no buffer offered, [`target::MIN_BLOCK`]) and its
/// GPU has words left. Says the message whose slot `r`'s unpack reads, where it is armed.
pub(super) fn offer_channel(
    st: &mut State,
    source: c_int,
    tag: c_int,
    seq: u64,
    r: &Receive,
) -> Option<Offer> {
    let mode = config::get().channel;
    let packed = r.plan.packed_size();
    let Engine::Gpu(g, _) = &r.engine else {
        return None;
    };
    if mode == Channel::Off || packed == 0 || r.plan.block_len() >= target::MIN_BLOCK {
        return None;
    }
    let export = match st.recvs.get_mut(&(source, tag)) {
        Some(rc) if rc.packed == packed => rc.export,
        Some(rc) => {
            // Another size: the same words, slots known afresh.
            rc.packed = packed;
            rc.lent = [None, None];
            rc.export
        }
        None => {
            let (cell, export) = channel::recv_cell(g)?;
            log!("direct path: receives from rank {source} with tag {tag} offer a channel");
            st.recvs.insert(
                (source, tag),
                RecvChan {
                    packed,
                    cell,
                    export,
                    lent: [None, None],
                    shared: None,
                },
            );
            export
        }
    };
    if st.recvs[&(source, tag)].shared == Some(true) && mode != Channel::Shared {
        return None;
    }
    let name = name(st, source, &export.handle)?;
    Some(Offer {
        name,
        offset: u32::try_from(export.offset).ok()?,
        armed_from: r.armed.filter(|a| a.k == seq).map(|a| a.from),
    })
}

/// Keeps the receive channel `offer` of the ready message from `dest` with `tag` as this
/// rank's send channel there, for sends of `plan` from `engine`: mapped on first sight (or
/// where the receiver's words changed), refused between ranks of one GPU unless testing asks.
pub(super) fn keep_offer(
    st: &mut State,
    engine: &Engine,
    plan: &datatype_pack::StridedBlock,
    (dest, tag): (c_int, c_int),
    offer: Offer,
) {
    let Engine::Gpu(g, _) = engine else {
        return;
    };
    let mode = config::get().channel;
    let packed = plan.packed_size();
    if mode == Channel::Off || plan.block_len() >= target::MIN_BLOCK {
        return;
    }
    let key = (offer.name, offer.offset);
    if let Some(sc) = st.sends.get_mut(&(dest, tag)) {
        if sc.offer == key {
            if sc.packed != packed {
                sc.packed = packed;
                sc.slots = [None, None];
            }
            return;
        }
    }
    let handle = st
        .names
        .get(&dest)
        .and_then(|n| n.get(offer.name as usize))
        .copied();
    let flags = handle.and_then(|h| {
        g.bind().ok()?;
        let base = ipc::open(dest, &h)? + u64::from(offer.offset);
        let shared = channel::same_device(g, base);
        (!shared || mode == Channel::Shared).then_some(base)
    });
    let counter = st
        .sends
        .get(&(dest, tag))
        .map(|sc| sc.counter)
        .or_else(|| channel::send_counter(g));
    let Some(counter) = counter else {
        return;
    };
    log!(
        "direct path: sends to rank {dest} with tag {tag} {}",
        if flags.is_some() {
            "have a channel"
        } else {
            "take no channel (one GPU, or its words do not map)"
        }
    );
    st.sends.insert(
        (dest, tag),
        SendChan {
            packed,
            offer: key,
            flags,
            counter,
            slots: [None, None],
        },
    );
}

/// The slot for message `seq` of a send of `plan` to `dest` with `tag` (taken: the send packs
/// into it), where its channel has one: the staging lent for message `seq - 2`, given back.
/// With the flag of that slot in the receiver and the pack's block counter.
pub(super) fn take_slot(
    st: &mut State,
    (dest, tag, seq): Key,
    plan: &datatype_pack::StridedBlock,
) -> Option<((Staging, u64), u64, u64)> {
    let sc = st.sends.get_mut(&(dest, tag))?;
    let flags = sc.flags?;
    if sc.packed != plan.packed_size() {
        return None;
    }
    let at = (seq % 2) as usize;
    match sc.slots[at].take() {
        Some((staging, m)) if m + 2 == seq => {
            Some(((staging, m), flags + 8 * (seq % 2), sc.counter))
        }
        other => {
            sc.slots[at] = other;
            None
        }
    }
}

/// Whether an `MPI_Sendrecv` of send number `sseq` to `dest` with `stag` and receive number
/// `rseq` from `source` with `rtag` may open channels ([`open_channel`]): both have one, with
/// the slot of their number known. Asked before the send's pack is launched ahead.
pub fn may_open(
    (sseq, dest, stag): (Option<u64>, c_int, c_int),
    (rseq, source, rtag): (Option<u64>, c_int, c_int),
) -> bool {
    let (Some(s), Some(sseq), Some(rseq)) = (state(), sseq, rseq) else {
        return false;
    };
    if config::get().channel == Channel::Off {
        return false;
    }
    let st = lock(s);
    let send = st.sends.get(&(dest, stag)).is_some_and(|sc| {
        sc.flags.is_some()
            && sc.slots[(sseq % 2) as usize]
                .as_ref()
                .is_some_and(|(_, m)| m + 2 == sseq)
    });
    send && st
        .recvs
        .get(&(source, rtag))
        .is_some_and(|rc| rc.lent[(rseq % 2) as usize].is_some_and(|(m, _)| m + 2 == rseq))
}

/// Puts a slot [`take_slot`] gave back where nothing was launched into it.
pub(super) fn put_slot(st: &mut State, (dest, tag): (c_int, c_int), slot: (Staging, u64)) {
    if let Some(sc) = st.sends.get_mut(&(dest, tag)) {
        let at = (slot.1 % 2) as usize;
        if sc.slots[at].is_none() {
            sc.slots[at] = Some(slot);
        }
    }
}

/// What [`open_channel`] launched for the send of an `MPI_Sendrecv`: the slot it packs into
/// and the message the slot was lent for, which [`super::send`] lends again as message `k`.
#[derive(Debug)]
pub struct Slot(pub(super) Staging, pub(super) u64);

/// Opens the channels of an `MPI_Sendrecv` at its start, where both of its sides have one:
/// the send (number `sseq` to `dest` with `stag`, its plan and engine `taken`, its buffer
/// `sendbuf`) has its slot given back and the receive `r` (number `rseq` from `source` with
/// `rtag`) knows that slot's staging, mapped here. Then the pack into the slot and the armed
/// unpack from the peer's go out as one graph on the GPU's stream, `r` says it is armed
/// ([`Receive::armed`]), and the send's slot comes back for [`super::send`]. `None` where nothing
/// was launched.
///
/// # Safety
/// MPI initialized; `sendbuf` is the caller's send buffer and `taken` the interposer's plan
/// of it; `r` is the call's receive, prepared, completed by this call.
pub unsafe fn open_channel(
    (sseq, dest, stag): (Option<u64>, c_int, c_int),
    taken: &Taken,
    (rseq, source, rtag): (Option<u64>, c_int, c_int),
    r: &mut Receive,
) -> Option<Slot> {
    let (Some(s), Some(sseq), Some(rseq)) = (state(), sseq, rseq) else {
        return None;
    };
    let mode = config::get().channel;
    // The slots are the direct path's device staging, whichever way the byte path would go.
    let (_, splan, sengine, _) = taken;
    let (Engine::Gpu(g, sd), Engine::Gpu(rg, rd)) = (sengine, &r.engine) else {
        return None;
    };
    if mode == Channel::Off || !Arc::ptr_eq(g, rg) {
        return None;
    }
    let mut st = lock(s);
    if !st.settled || !st.on_node(dest) || !st.on_node(source) {
        return None;
    }
    let rc = st.recvs.get(&(source, rtag))?;
    let (m, lent) = rc.lent[(rseq % 2) as usize]?;
    if m + 2 != rseq
        || rc.packed != r.plan.packed_size()
        || rc.shared == Some(true) && mode != Channel::Shared
    {
        return None;
    }
    let cell = rc.cell;
    let (slot, flag, counter) = take_slot(&mut st, (dest, stag, sseq), splan)?;
    let mapped = g
        .bind()
        .ok()
        .and_then(|()| ipc::open(source, &lent.staging.handle));
    let Some(base) = mapped else {
        put_slot(&mut st, (dest, stag), slot);
        return None;
    };
    let peer_slot = base + lent.staging.offset;
    let rc = st.recvs.get_mut(&(source, rtag))?;
    let shared = *rc
        .shared
        .get_or_insert_with(|| channel::same_device(g, peer_slot));
    let Some((slot_ptr, slot_len)) = slot.0.kernel_side() else {
        put_slot(&mut st, (dest, stag), slot);
        return None;
    };
    if shared && mode != Channel::Shared {
        put_slot(&mut st, (dest, stag), slot);
        return None;
    }
    drop(st);
    let peer_slot = (peer_slot, usize::try_from(lent.staging.len).ok()?);
    let pack = channel::Pack {
        plan: splan,
        buf: (sd.ptr, usize::try_from(sd.len).ok()?),
        slot: (slot_ptr, slot_len),
        seq: sseq,
        counter,
        flag,
    };
    let unpack = channel::Unpack {
        plan: &r.plan,
        buf: (rd.ptr, usize::try_from(rd.len).ok()?),
        slot: peer_slot,
        seq: rseq,
        cell,
    };
    // SAFETY: the send buffer is the caller's (read where its plan says), the slot this rank's
    // own staging, out of its pool and its channel until lent again; the receive buffer is
    // the program's, which MPI leaves to this call; the peer's slot stays mapped for the
    // process's life and is the staging it lent for message `rseq - 2`, which it packs into
    // for message `rseq` only where its flag then says so.
    let launched = profile::time(Phase::Launch, || unsafe {
        channel::launch(g, Some(pack), Some(unpack), None)
    });
    profile::mark("channel launched");
    if let Err(e) = launched {
        log!("MPI_Sendrecv: the channel's launch failed: {e}");
        let _ = g.wait();
        put_slot(&mut lock(s), (dest, stag), slot);
        return None;
    }
    r.armed = Some(Armed {
        k: rseq,
        from: m,
        cell,
        slot: peer_slot,
    });
    Some(Slot(slot.0, slot.1))
}

/// Calls off the armed unpack of `r`, where it has one: its message came another way.
pub(super) fn disarm(r: &mut Receive) {
    if let (Some(a), Engine::Gpu(g, _)) = (r.armed.take(), &r.engine) {
        if let Err(e) = channel::call_off(g, &a.cell, a.k) {
            // Its patience ends the kernel all the same.
            log!("{}: the armed unpack was not called off: {e}", r.op);
        }
    }
}

/// After the wait of a receive whose message came through the channel ([`super::Finish::Channel`]):
/// where its armed unpack gave up before the flag came, the unpack again, waiting as long as
/// it takes (the note says the peer's pack is under way), and waited for. The unpacked size
/// or MPI's code.
pub fn settle_channel(r: &mut Receive) -> Result<u64, c_int> {
    let n = r.plan.packed_size();
    let (Some(a), Engine::Gpu(g, d)) = (r.armed.take(), &r.engine) else {
        return Err(ERR_INTERN);
    };
    if !a.cell.gave_up(a.k) {
        return Ok(n);
    }
    log!(
        "{}: the armed unpack of message {} gave up waiting: unpacked again",
        r.op,
        a.k
    );
    let unpack = channel::Unpack {
        plan: &r.plan,
        buf: (d.ptr, usize::try_from(d.len).map_err(|_| ERR_INTERN)?),
        slot: a.slot,
        seq: a.k,
        cell: a.cell,
    };
    a.cell.clear_gave_up();
    // SAFETY: as at the armed launch ([`open_channel`]): the receive buffer is the program's
    // until this call returns, the peer's slot mapped for the process's life and kept by the
    // peer until this rank's done message.
    let again = unsafe { channel::launch(g, None, Some(unpack), Some(channel::AGAIN_NS)) }
        .and_then(|()| g.wait());
    match again {
        Ok(()) if !a.cell.gave_up(a.k) => Ok(n),
        Ok(()) => {
            log!("{}: message {} never came through its channel", r.op, a.k);
            Err(ERR_INTERN)
        }
        Err(e) => {
            log!("{}: the unpack again failed: {e}", r.op);
            Err(ERR_INTERN)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_channel_gives_the_slot_of_message_k_minus_two_once() {
        let mut st = State::default();
        st.sends.insert(
            (2, 7),
            SendChan {
                packed: 64,
                offer: (3, 64),
                flags: Some(0x9000),
                counter: 0x9100,
                slots: [
                    Some((Staging::Cpu(vec![0; 64]), 4)),
                    Some((Staging::Cpu(vec![1; 64]), 5)),
                ],
            },
        );
        let plan = datatype_pack::StridedBlock::new(0, 8, vec![8], vec![16]).unwrap();
        assert_eq!(plan.packed_size(), 64);
        // Not the message two before: kept.
        assert!(take_slot(&mut st, (2, 7, 8), &plan).is_none());
        assert!(take_slot(&mut st, (2, 7, 5), &plan).is_none());
        let ((slot, m), flag, counter) = take_slot(&mut st, (2, 7, 6), &plan).unwrap();
        assert_eq!((m, flag, counter), (4, 0x9000, 0x9100));
        assert!(matches!(&slot, Staging::Cpu(v) if v[0] == 0));
        // Taken: not again, until put back.
        assert!(take_slot(&mut st, (2, 7, 6), &plan).is_none());
        put_slot(&mut st, (2, 7), (slot, m));
        let (_, flag, _) = take_slot(&mut st, (2, 7, 7), &plan).unwrap();
        assert_eq!(flag, 0x9008, "odd messages use the second flag");
        assert!(take_slot(&mut st, (2, 7, 6), &plan).is_some());
        // Another packed size, or no flags (one GPU): nothing.
        let other = datatype_pack::StridedBlock::new(0, 8, vec![4], vec![16]).unwrap();
        st.sends.get_mut(&(2, 7)).unwrap().slots[0] = Some((Staging::Cpu(vec![]), 6));
        assert!(take_slot(&mut st, (2, 7, 8), &other).is_none());
        st.sends.get_mut(&(2, 7)).unwrap().flags = None;
        assert!(take_slot(&mut st, (2, 7, 8), &plan).is_none());
    }
}

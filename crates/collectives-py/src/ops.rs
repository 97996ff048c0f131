//! One generic function per operation, called for the element type found at run time
//! ([`dispatch!`](crate::element::dispatch)): the buffers as slices of `T`, then the core's
//! method. The non-blocking ones take the scope their request starts in.

use collectives_core::{Communicator, Element, MpiComm, ReduceOp, Request, Result, Scope};

use crate::buffer::HostBuf;

// SAFETY (for every `slice`/`slice_mut` below): each function is called only through `dispatch!`
// with the `T` of the buffers' element type (the callers check that every buffer of a call has
// the same element type), and the receive buffers were acquired writable and checked not to
// overlap the send buffers.

/// `broadcast`.
pub fn broadcast<T: Element>(c: &MpiComm, buf: &mut HostBuf, root: usize) -> Result<()> {
    // SAFETY: see the top of this module.
    c.broadcast(unsafe { buf.slice_mut::<T>() }, root)
}

/// `reduce`.
pub fn reduce<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    recv: Option<&mut HostBuf>,
    op: ReduceOp,
    root: usize,
) -> Result<()> {
    // SAFETY: see the top of this module.
    let recv = recv.map(|r| unsafe { r.slice_mut::<T>() });
    // SAFETY: see the top of this module.
    c.reduce(unsafe { send.slice::<T>() }, recv, op, root)
}

/// `all_reduce`.
pub fn all_reduce<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    recv: &mut HostBuf,
    op: ReduceOp,
) -> Result<()> {
    // SAFETY: see the top of this module.
    c.all_reduce(
        unsafe { send.slice::<T>() },
        unsafe { recv.slice_mut::<T>() },
        op,
    )
}

/// `all_reduce_in_place`.
pub fn all_reduce_in_place<T: Element>(c: &MpiComm, buf: &mut HostBuf, op: ReduceOp) -> Result<()> {
    // SAFETY: see the top of this module.
    c.all_reduce_in_place(unsafe { buf.slice_mut::<T>() }, op)
}

/// `all_gather`.
pub fn all_gather<T: Element>(c: &MpiComm, send: &HostBuf, recv: &mut HostBuf) -> Result<()> {
    // SAFETY: see the top of this module.
    c.all_gather(unsafe { send.slice::<T>() }, unsafe {
        recv.slice_mut::<T>()
    })
}

/// `all_gather_v`.
pub fn all_gather_v<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    recv: &mut HostBuf,
    counts: &[usize],
) -> Result<()> {
    // SAFETY: see the top of this module.
    c.all_gather_v(
        unsafe { send.slice::<T>() },
        unsafe { recv.slice_mut::<T>() },
        counts,
    )
}

/// `gather`.
pub fn gather<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    recv: Option<&mut HostBuf>,
    root: usize,
) -> Result<()> {
    // SAFETY: see the top of this module.
    let recv = recv.map(|r| unsafe { r.slice_mut::<T>() });
    // SAFETY: see the top of this module.
    c.gather(unsafe { send.slice::<T>() }, recv, root)
}

/// `gather_v`.
pub fn gather_v<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    recv: Option<&mut HostBuf>,
    counts: &[usize],
    root: usize,
) -> Result<()> {
    // SAFETY: see the top of this module.
    let recv = recv.map(|r| unsafe { r.slice_mut::<T>() });
    // SAFETY: see the top of this module.
    c.gather_v(unsafe { send.slice::<T>() }, recv, counts, root)
}

/// `scatter`.
pub fn scatter<T: Element>(
    c: &MpiComm,
    send: Option<&HostBuf>,
    recv: &mut HostBuf,
    root: usize,
) -> Result<()> {
    // SAFETY: see the top of this module.
    let send = send.map(|s| unsafe { s.slice::<T>() });
    // SAFETY: see the top of this module.
    c.scatter(send, unsafe { recv.slice_mut::<T>() }, root)
}

/// `scatter_v`.
pub fn scatter_v<T: Element>(
    c: &MpiComm,
    send: Option<&HostBuf>,
    recv: &mut HostBuf,
    counts: &[usize],
    root: usize,
) -> Result<()> {
    // SAFETY: see the top of this module.
    let send = send.map(|s| unsafe { s.slice::<T>() });
    // SAFETY: see the top of this module.
    c.scatter_v(send, unsafe { recv.slice_mut::<T>() }, counts, root)
}

/// `reduce_scatter`.
pub fn reduce_scatter<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    recv: &mut HostBuf,
    op: ReduceOp,
) -> Result<()> {
    // SAFETY: see the top of this module.
    c.reduce_scatter(
        unsafe { send.slice::<T>() },
        unsafe { recv.slice_mut::<T>() },
        op,
    )
}

/// `all_to_all`.
pub fn all_to_all<T: Element>(c: &MpiComm, send: &HostBuf, recv: &mut HostBuf) -> Result<()> {
    // SAFETY: see the top of this module.
    c.all_to_all(unsafe { send.slice::<T>() }, unsafe {
        recv.slice_mut::<T>()
    })
}

/// `all_to_all_v`.
pub fn all_to_all_v<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    send_counts: &[usize],
    recv: &mut HostBuf,
    recv_counts: &[usize],
) -> Result<()> {
    // SAFETY: see the top of this module.
    let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
    c.all_to_all_v(s, send_counts, r, recv_counts)
}

/// `send`.
pub fn send<T: Element>(c: &MpiComm, buf: &HostBuf, dest: usize, tag: i32) -> Result<()> {
    // SAFETY: see the top of this module.
    c.send(unsafe { buf.slice::<T>() }, dest, tag)
}

/// `recv`.
pub fn recv<T: Element>(c: &MpiComm, buf: &mut HostBuf, source: usize, tag: i32) -> Result<()> {
    // SAFETY: see the top of this module.
    c.recv(unsafe { buf.slice_mut::<T>() }, source, tag)
}

/// `send_recv`.
pub fn send_recv<T: Element>(
    c: &MpiComm,
    send: &HostBuf,
    dest: usize,
    recv: &mut HostBuf,
    source: usize,
    tag: i32,
) -> Result<()> {
    // SAFETY: see the top of this module.
    let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
    c.send_recv(s, dest, r, source, tag)
}

/// The non-blocking forms: the same, started in a scope.
pub mod nb {
    use super::*;

    /// `i_broadcast`.
    pub fn broadcast<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        buf: &'s mut HostBuf,
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        c.i_broadcast(sc, unsafe { buf.slice_mut::<T>() }, root)
    }

    /// `i_reduce`.
    pub fn reduce<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: Option<&'s mut HostBuf>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let recv = recv.map(|r| unsafe { r.slice_mut::<T>() });
        // SAFETY: see the top of this module.
        c.i_reduce(sc, unsafe { send.slice::<T>() }, recv, op, root)
    }

    /// `i_all_reduce`.
    pub fn all_reduce<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: &'s mut HostBuf,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_all_reduce(sc, s, r, op)
    }

    /// `i_all_reduce_in_place`.
    pub fn all_reduce_in_place<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        buf: &'s mut HostBuf,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        c.i_all_reduce_in_place(sc, unsafe { buf.slice_mut::<T>() }, op)
    }

    /// `i_all_gather`.
    pub fn all_gather<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: &'s mut HostBuf,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_all_gather(sc, s, r)
    }

    /// `i_all_gather_v`.
    pub fn all_gather_v<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: &'s mut HostBuf,
        counts: &[usize],
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_all_gather_v(sc, s, r, counts)
    }

    /// `i_gather`.
    pub fn gather<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: Option<&'s mut HostBuf>,
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let recv = recv.map(|r| unsafe { r.slice_mut::<T>() });
        // SAFETY: see the top of this module.
        c.i_gather(sc, unsafe { send.slice::<T>() }, recv, root)
    }

    /// `i_gather_v`.
    pub fn gather_v<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: Option<&'s mut HostBuf>,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let recv = recv.map(|r| unsafe { r.slice_mut::<T>() });
        // SAFETY: see the top of this module.
        c.i_gather_v(sc, unsafe { send.slice::<T>() }, recv, counts, root)
    }

    /// `i_scatter`.
    pub fn scatter<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: Option<&'s HostBuf>,
        recv: &'s mut HostBuf,
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let send = send.map(|s| unsafe { s.slice::<T>() });
        // SAFETY: see the top of this module.
        c.i_scatter(sc, send, unsafe { recv.slice_mut::<T>() }, root)
    }

    /// `i_scatter_v`.
    pub fn scatter_v<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: Option<&'s HostBuf>,
        recv: &'s mut HostBuf,
        counts: &[usize],
        root: usize,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let send = send.map(|s| unsafe { s.slice::<T>() });
        // SAFETY: see the top of this module.
        c.i_scatter_v(sc, send, unsafe { recv.slice_mut::<T>() }, counts, root)
    }

    /// `i_reduce_scatter`.
    pub fn reduce_scatter<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: &'s mut HostBuf,
        op: ReduceOp,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_reduce_scatter(sc, s, r, op)
    }

    /// `i_all_to_all`.
    pub fn all_to_all<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        recv: &'s mut HostBuf,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_all_to_all(sc, s, r)
    }

    /// `i_all_to_all_v`.
    pub fn all_to_all_v<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        send_counts: &[usize],
        recv: &'s mut HostBuf,
        recv_counts: &[usize],
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_all_to_all_v(sc, s, send_counts, r, recv_counts)
    }

    /// `i_send`.
    pub fn send<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        buf: &'s HostBuf,
        dest: usize,
        tag: i32,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        c.i_send(sc, unsafe { buf.slice::<T>() }, dest, tag)
    }

    /// `i_recv`.
    pub fn recv<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        buf: &'s mut HostBuf,
        source: usize,
        tag: i32,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        c.i_recv(sc, unsafe { buf.slice_mut::<T>() }, source, tag)
    }

    /// `i_send_recv`.
    pub fn send_recv<'s, T: Element>(
        c: &'s MpiComm,
        sc: &'s Scope<'s, '_>,
        send: &'s HostBuf,
        dest: usize,
        recv: &'s mut HostBuf,
        source: usize,
        tag: i32,
    ) -> Result<Request<'s>> {
        // SAFETY: see the top of this module.
        let (s, r) = unsafe { (send.slice::<T>(), recv.slice_mut::<T>()) };
        c.i_send_recv(sc, s, dest, r, source, tag)
    }
}

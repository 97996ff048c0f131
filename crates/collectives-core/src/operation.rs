//! The operation as a value: which collective (its [`OpKind`]), how it was called (its
//! [`Form`]), and its arguments ([`Op`]: buffers, counts, root, reduce operation).
//!
//! Every public method of [`Communicator`](crate::Communicator) builds one [`Op`] and hands it to
//! the front end, which runs the same pipeline for every collective and every form: rules,
//! staging, agreement, backend, finishing, record. The value is generic over how it holds its
//! buffers: by reference for a blocking or non-blocking call, by address (a plan's
//! [`BufPtr`](crate::frontend::BufPtr)) for a persistent plan, which lends them out again at
//! each run.
//!
//! The name of an operation is a string only where it is shown ([`Name::as_str`], `Display`, the
//! errors and the per-call record); everything else matches on [`OpKind`].

use crate::comm::Tag;
use crate::op::ReduceOp;
use crate::record::Form;

/// One list of the operations, with their names in the three forms (blocking, non-blocking,
/// persistent): the enum, its names and its tracing spans are made from it.
macro_rules! kinds {
    ($( $(#[$m:meta])* $kind:ident => $plain:literal, $nb:literal, $init:literal; )*) => {
        /// Which operation a call makes, whatever its form.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum OpKind {
            $( $(#[$m])* $kind, )*
        }

        impl OpKind {
            /// Every operation, in the order of their codes.
            pub(crate) const ALL: &'static [OpKind] = &[$(OpKind::$kind),*];

            /// The operation's name, as the blocking trait method is called.
            pub const fn name(self) -> &'static str {
                match self {
                    $(OpKind::$kind => $plain,)*
                }
            }

            /// Its names as the blocking, non-blocking and persistent methods are called.
            const fn names(self) -> [&'static str; 3] {
                match self {
                    $(OpKind::$kind => [$plain, $nb, $init],)*
                }
            }

            /// The tracing span of one call, named after the method called.
            fn span(self, form: Form) -> tracing::Span {
                match (self, form) {
                    $(
                        (OpKind::$kind, Form::Blocking) => tracing::trace_span!($plain),
                        (OpKind::$kind, Form::NonBlocking) => tracing::trace_span!($nb),
                        (OpKind::$kind, _) => tracing::trace_span!($init),
                    )*
                }
            }
        }
    };
}

kinds! {
    /// `barrier`.
    Barrier => "barrier", "i_barrier", "barrier_init";
    /// `broadcast`.
    Broadcast => "broadcast", "i_broadcast", "broadcast_init";
    /// `reduce`.
    Reduce => "reduce", "i_reduce", "reduce_init";
    /// `all_reduce`.
    AllReduce => "all_reduce", "i_all_reduce", "all_reduce_init";
    /// `all_reduce_in_place`.
    AllReduceInPlace => "all_reduce_in_place", "i_all_reduce_in_place", "all_reduce_in_place_init";
    /// `all_gather`.
    AllGather => "all_gather", "i_all_gather", "all_gather_init";
    /// `all_gather_v`.
    AllGatherV => "all_gather_v", "i_all_gather_v", "all_gather_v_init";
    /// `gather`.
    Gather => "gather", "i_gather", "gather_init";
    /// `gather_v`.
    GatherV => "gather_v", "i_gather_v", "gather_v_init";
    /// `scatter`.
    Scatter => "scatter", "i_scatter", "scatter_init";
    /// `scatter_v`.
    ScatterV => "scatter_v", "i_scatter_v", "scatter_v_init";
    /// `reduce_scatter`.
    ReduceScatter => "reduce_scatter", "i_reduce_scatter", "reduce_scatter_init";
    /// `all_to_all`.
    AllToAll => "all_to_all", "i_all_to_all", "all_to_all_init";
    /// `all_to_all_v`.
    AllToAllV => "all_to_all_v", "i_all_to_all_v", "all_to_all_v_init";
    /// `split` (blocking only).
    Split => "split", "i_split", "split_init";
    /// `dup` (blocking only).
    Dup => "dup", "i_dup", "dup_init";
    /// `send` (blocking and non-blocking).
    Send => "send", "i_send", "send_init";
    /// `recv` (blocking and non-blocking).
    Recv => "recv", "i_recv", "recv_init";
    /// `send_recv` (blocking and non-blocking).
    SendRecv => "send_recv", "i_send_recv", "send_recv_init";
}

impl OpKind {
    /// The code of this operation in checked mode's agreement record.
    pub(crate) fn code(self) -> i64 {
        self as i64
    }

    /// Whether the ranks agree on a call of this operation in checked mode (collectives do;
    /// point-to-point operations have no common call to agree on).
    pub(crate) const fn is_collective(self) -> bool {
        !matches!(self, OpKind::Send | OpKind::Recv | OpKind::SendRecv)
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The name of one call: which operation, in which form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Name {
    /// The operation.
    pub kind: OpKind,
    /// How it was called.
    pub form: Form,
}

impl Name {
    /// `kind` called as `form`.
    pub const fn new(kind: OpKind, form: Form) -> Self {
        Name { kind, form }
    }

    /// The method's name (`all_reduce`, `i_all_reduce`, `all_reduce_init`): what errors and the
    /// per-call record show. The runs of a plan carry the name of the method that made it.
    pub const fn as_str(self) -> &'static str {
        let names = self.kind.names();
        match self.form {
            Form::Blocking => names[0],
            Form::NonBlocking => names[1],
            Form::Init | Form::Start => names[2],
        }
    }

    /// The tracing span of the call, named as the method.
    pub(crate) fn span(self) -> tracing::Span {
        self.kind.span(self.form)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One operation with its arguments: `R` a buffer it reads, `W` a buffer it writes, `C` a counts
/// array. A root-only buffer is an `Option` (present on the root; the rules drop one passed
/// elsewhere). Reduce operations are the caller's (`Avg` included): the front end decides how the
/// backend runs them.
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)] // the fields are the collectives' arguments, as the trait methods name them
pub enum Op<R, W, C> {
    Barrier,
    Broadcast {
        buf: W,
        root: usize,
    },
    Reduce {
        send: R,
        recv: Option<W>,
        op: ReduceOp,
        root: usize,
    },
    AllReduce {
        send: R,
        recv: W,
        op: ReduceOp,
    },
    AllReduceInPlace {
        buf: W,
        op: ReduceOp,
    },
    AllGather {
        send: R,
        recv: W,
    },
    AllGatherV {
        send: R,
        recv: W,
        counts: C,
    },
    Gather {
        send: R,
        recv: Option<W>,
        root: usize,
    },
    GatherV {
        send: R,
        recv: Option<W>,
        counts: C,
        root: usize,
    },
    Scatter {
        send: Option<R>,
        recv: W,
        root: usize,
    },
    ScatterV {
        send: Option<R>,
        recv: W,
        counts: C,
        root: usize,
    },
    ReduceScatter {
        send: R,
        recv: W,
        op: ReduceOp,
    },
    AllToAll {
        send: R,
        recv: W,
    },
    AllToAllV {
        send: R,
        send_counts: C,
        recv: W,
        recv_counts: C,
    },
    Send {
        buf: R,
        dest: usize,
        tag: Tag,
    },
    Recv {
        buf: W,
        source: usize,
        tag: Tag,
    },
    SendRecv {
        send: R,
        dest: usize,
        recv: W,
        source: usize,
        tag: Tag,
    },
}

impl<R, W, C> Op<R, W, C> {
    /// Which operation this is.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Barrier => OpKind::Barrier,
            Op::Broadcast { .. } => OpKind::Broadcast,
            Op::Reduce { .. } => OpKind::Reduce,
            Op::AllReduce { .. } => OpKind::AllReduce,
            Op::AllReduceInPlace { .. } => OpKind::AllReduceInPlace,
            Op::AllGather { .. } => OpKind::AllGather,
            Op::AllGatherV { .. } => OpKind::AllGatherV,
            Op::Gather { .. } => OpKind::Gather,
            Op::GatherV { .. } => OpKind::GatherV,
            Op::Scatter { .. } => OpKind::Scatter,
            Op::ScatterV { .. } => OpKind::ScatterV,
            Op::ReduceScatter { .. } => OpKind::ReduceScatter,
            Op::AllToAll { .. } => OpKind::AllToAll,
            Op::AllToAllV { .. } => OpKind::AllToAllV,
            Op::Send { .. } => OpKind::Send,
            Op::Recv { .. } => OpKind::Recv,
            Op::SendRecv { .. } => OpKind::SendRecv,
        }
    }

    /// The same operation with its buffers and counts held another way.
    pub fn map<R2, W2, C2>(
        self,
        mut r: impl FnMut(R) -> R2,
        mut w: impl FnMut(W) -> W2,
        mut c: impl FnMut(C) -> C2,
    ) -> Op<R2, W2, C2> {
        match self {
            Op::Barrier => Op::Barrier,
            Op::Broadcast { buf, root } => Op::Broadcast { buf: w(buf), root },
            Op::Reduce {
                send,
                recv,
                op,
                root,
            } => Op::Reduce {
                send: r(send),
                recv: recv.map(w),
                op,
                root,
            },
            Op::AllReduce { send, recv, op } => Op::AllReduce {
                send: r(send),
                recv: w(recv),
                op,
            },
            Op::AllReduceInPlace { buf, op } => Op::AllReduceInPlace { buf: w(buf), op },
            Op::AllGather { send, recv } => Op::AllGather {
                send: r(send),
                recv: w(recv),
            },
            Op::AllGatherV { send, recv, counts } => Op::AllGatherV {
                send: r(send),
                recv: w(recv),
                counts: c(counts),
            },
            Op::Gather { send, recv, root } => Op::Gather {
                send: r(send),
                recv: recv.map(w),
                root,
            },
            Op::GatherV {
                send,
                recv,
                counts,
                root,
            } => Op::GatherV {
                send: r(send),
                recv: recv.map(w),
                counts: c(counts),
                root,
            },
            Op::Scatter { send, recv, root } => Op::Scatter {
                send: send.map(r),
                recv: w(recv),
                root,
            },
            Op::ScatterV {
                send,
                recv,
                counts,
                root,
            } => Op::ScatterV {
                send: send.map(r),
                recv: w(recv),
                counts: c(counts),
                root,
            },
            Op::ReduceScatter { send, recv, op } => Op::ReduceScatter {
                send: r(send),
                recv: w(recv),
                op,
            },
            Op::AllToAll { send, recv } => Op::AllToAll {
                send: r(send),
                recv: w(recv),
            },
            Op::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            } => Op::AllToAllV {
                send: r(send),
                send_counts: c(send_counts),
                recv: w(recv),
                recv_counts: c(recv_counts),
            },
            Op::Send { buf, dest, tag } => Op::Send {
                buf: r(buf),
                dest,
                tag,
            },
            Op::Recv { buf, source, tag } => Op::Recv {
                buf: w(buf),
                source,
                tag,
            },
            Op::SendRecv {
                send,
                dest,
                recv,
                source,
                tag,
            } => Op::SendRecv {
                send: r(send),
                dest,
                recv: w(recv),
                source,
                tag,
            },
        }
    }

    /// The same operation, borrowing what this one holds.
    pub fn by_ref(&self) -> Op<&R, &W, &C> {
        match self {
            Op::Barrier => Op::Barrier,
            Op::Broadcast { buf, root } => Op::Broadcast { buf, root: *root },
            Op::Reduce {
                send,
                recv,
                op,
                root,
            } => Op::Reduce {
                send,
                recv: recv.as_ref(),
                op: *op,
                root: *root,
            },
            Op::AllReduce { send, recv, op } => Op::AllReduce {
                send,
                recv,
                op: *op,
            },
            Op::AllReduceInPlace { buf, op } => Op::AllReduceInPlace { buf, op: *op },
            Op::AllGather { send, recv } => Op::AllGather { send, recv },
            Op::AllGatherV { send, recv, counts } => Op::AllGatherV { send, recv, counts },
            Op::Gather { send, recv, root } => Op::Gather {
                send,
                recv: recv.as_ref(),
                root: *root,
            },
            Op::GatherV {
                send,
                recv,
                counts,
                root,
            } => Op::GatherV {
                send,
                recv: recv.as_ref(),
                counts,
                root: *root,
            },
            Op::Scatter { send, recv, root } => Op::Scatter {
                send: send.as_ref(),
                recv,
                root: *root,
            },
            Op::ScatterV {
                send,
                recv,
                counts,
                root,
            } => Op::ScatterV {
                send: send.as_ref(),
                recv,
                counts,
                root: *root,
            },
            Op::ReduceScatter { send, recv, op } => Op::ReduceScatter {
                send,
                recv,
                op: *op,
            },
            Op::AllToAll { send, recv } => Op::AllToAll { send, recv },
            Op::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            } => Op::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            },
            Op::Send { buf, dest, tag } => Op::Send {
                buf,
                dest: *dest,
                tag: *tag,
            },
            Op::Recv { buf, source, tag } => Op::Recv {
                buf,
                source: *source,
                tag: *tag,
            },
            Op::SendRecv {
                send,
                dest,
                recv,
                source,
                tag,
            } => Op::SendRecv {
                send,
                dest: *dest,
                recv,
                source: *source,
                tag: *tag,
            },
        }
    }

    /// The operation's shape (everything but its buffers) and its buffers on this rank: every
    /// operation reads at most one buffer and writes at most one (`None`: none, or absent here).
    /// [`fill`](Op::fill) puts buffers back, held another way: a backend that moves data through
    /// other memory (pinned host buffers, device addresses) substitutes its own for the caller's
    /// once, for every operation.
    pub fn split(self) -> (Op<(), (), C>, Option<R>, Option<W>) {
        let (mut read, mut written) = (None, None);
        let shape = self.map(|r| read = Some(r), |w| written = Some(w), |c| c);
        (shape, read, written)
    }

    /// Whether the written buffer is read too, on some rank: a broadcast's (the root's data) and
    /// an in-place all-reduce's.
    pub fn in_out(&self) -> bool {
        matches!(self, Op::Broadcast { .. } | Op::AllReduceInPlace { .. })
    }

    /// Whether this rank's written buffer holds input to copy in before the operation
    /// (`reads`) and output to copy out after it (`writes`): a broadcast's root only reads it,
    /// the others only write it; an in-place all-reduce does both; every other operation only
    /// writes it.
    pub fn written_on(&self, rank: usize) -> (bool, bool) {
        match self {
            Op::Broadcast { root, .. } => (*root == rank, *root != rank),
            Op::AllReduceInPlace { .. } => (true, true),
            _ => (false, true),
        }
    }

    /// The reduce operation the caller asked for, if this operation reduces.
    pub fn reduce_op(&self) -> Option<ReduceOp> {
        self.by_ref().reduce_op_mut().copied()
    }

    /// The reduce operation, to change it, if this operation reduces.
    pub fn reduce_op_mut(&mut self) -> Option<&mut ReduceOp> {
        match self {
            Op::Reduce { op, .. }
            | Op::AllReduce { op, .. }
            | Op::AllReduceInPlace { op, .. }
            | Op::ReduceScatter { op, .. } => Some(op),
            _ => None,
        }
    }

    /// The buffer that holds a reduction's result on this rank (`None`: none here, or the
    /// operation does not reduce).
    pub fn result_mut(&mut self) -> Option<&mut W> {
        match self.reduce_op() {
            Some(_) => self.buffers_mut().1,
            None => None,
        }
    }

    /// The buffer this operation reads and the one it writes, on this rank (`None`: none, or
    /// absent here): every operation reads at most one buffer and writes at most one. The order
    /// of [`lens`](Self::lens), [`slots`](Op::slots) and of what a backend stages.
    pub fn buffers(&self) -> (Option<&R>, Option<&W>) {
        let (_, read, written) = self.by_ref().split();
        (read, written)
    }

    /// [`buffers`](Self::buffers), the written one to write.
    pub fn buffers_mut(&mut self) -> (Option<&R>, Option<&mut W>) {
        match self {
            Op::Barrier => (None, None),
            Op::Broadcast { buf, .. } | Op::AllReduceInPlace { buf, .. } | Op::Recv { buf, .. } => {
                (None, Some(buf))
            }
            Op::Send { buf, .. } => (Some(buf), None),
            Op::Reduce { send, recv, .. }
            | Op::Gather { send, recv, .. }
            | Op::GatherV { send, recv, .. } => (Some(send), recv.as_mut()),
            Op::Scatter { send, recv, .. } | Op::ScatterV { send, recv, .. } => {
                (send.as_ref(), Some(recv))
            }
            Op::AllReduce { send, recv, .. }
            | Op::AllGather { send, recv, .. }
            | Op::AllGatherV { send, recv, .. }
            | Op::ReduceScatter { send, recv, .. }
            | Op::AllToAll { send, recv, .. }
            | Op::AllToAllV { send, recv, .. }
            | Op::SendRecv { send, recv, .. } => (Some(send), Some(recv)),
        }
    }

    /// The lengths of the buffers on this rank (`None`: absent here), measured by `len_r` and
    /// `len_w`: the buffer read, then the buffer written ([`buffers`](Self::buffers)). What
    /// staging takes and the record's size.
    pub fn lens(
        &self,
        len_r: impl Fn(&R) -> usize,
        len_w: impl Fn(&W) -> usize,
    ) -> [Option<usize>; 2] {
        let (r, w) = self.buffers();
        [r.map(len_r), w.map(len_w)]
    }

    /// The operation without its buffers: what [`fill`](Op::fill) gives other buffers to.
    pub fn shape(&self) -> Op<(), (), C>
    where
        C: Copy,
    {
        self.by_ref().map(|_| (), |_| (), |c| *c)
    }

    /// The same operation without the root-only buffers that `present` (from [`lens`](Self::lens)
    /// after the rules) says are absent: a plan keeps what the rules kept.
    pub fn retain(mut self, present: [Option<usize>; 2]) -> Self {
        match &mut self {
            Op::Reduce { recv, .. } | Op::Gather { recv, .. } | Op::GatherV { recv, .. }
                if present[1].is_none() =>
            {
                *recv = None;
            }
            Op::Scatter { send, .. } | Op::ScatterV { send, .. } if present[0].is_none() => {
                *send = None;
            }
            _ => {}
        }
        self
    }
}

impl<C> Op<(), (), C> {
    /// This shape with the buffers `read` and `written` (from [`split`](Op::split), or held
    /// another way): each present where the shape has it. A buffer the shape has but `None` is
    /// given as the type's default (an empty slice, an absent region), which no caller does:
    /// `split` and `fill` are called in pairs on the same shape.
    pub fn fill<R: Default, W: Default>(self, read: Option<R>, written: Option<W>) -> Op<R, W, C> {
        let (mut read, mut written) = (read, written);
        self.map(
            |()| read.take().unwrap_or_default(),
            |()| written.take().unwrap_or_default(),
            |c| c,
        )
    }
}

impl<X: Copy, C> Op<X, X, C> {
    /// The buffers on this rank as a plan hands them back to its caller between runs: the send
    /// buffer, then the receive (or only) buffer (`None`: absent here).
    pub fn slots(&self) -> [Option<X>; 2] {
        let (r, w) = self.buffers();
        [r.copied(), w.copied()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_methods() {
        let name = |k, f| Name::new(k, f).as_str();
        assert_eq!(name(OpKind::AllReduce, Form::Blocking), "all_reduce");
        assert_eq!(name(OpKind::AllReduce, Form::NonBlocking), "i_all_reduce");
        assert_eq!(name(OpKind::AllGatherV, Form::Init), "all_gather_v_init");
        assert_eq!(name(OpKind::AllGatherV, Form::Start), "all_gather_v_init");
        assert_eq!(OpKind::SendRecv.to_string(), "send_recv");
    }

    #[test]
    fn codes_are_the_order_of_the_list() {
        for (i, k) in OpKind::ALL.iter().enumerate() {
            assert_eq!(k.code(), i as i64);
        }
        assert_eq!(
            OpKind::Dup.code(),
            15,
            "agreement codes of existing operations stay"
        );
    }
}

//! Persistent plans as the front end makes them: the checked call a backend's plan is made of
//! ([`PlanCall`]), and the default plan, which replays the non-blocking operation at each start.

use super::backend::{Backend, PlanCall};
use super::{read_of, start_op, Operation, Plan};
use crate::element::Element;
use crate::error::Result;
use crate::op::ReduceOp;
use crate::operation::{Name, Op};
use crate::persistent::{PlanOp, PlanPath};
use crate::request::{Pending, Scope};

impl<B: Backend, T: Element> std::fmt::Debug for PlanCall<'_, B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanCall({})", self.view().0.kind())
    }
}

impl<'s, B: Backend, T: Element> PlanCall<'s, B, T> {
    /// The plan's call as the backend gets it, from the operation the caller made (`plan`, its
    /// root-only buffers already dropped where the rules drop them), the count the rules returned
    /// (`n`) and how the backend reduces (`red`, and `average`: divide at each completion).
    pub(super) fn new(plan: Plan<'s, B, T>, n: usize, red: ReduceOp, average: bool) -> Self {
        match plan {
            Op::Barrier => PlanCall::Barrier,
            Op::Broadcast { buf, root } => PlanCall::Broadcast { buf, root, n },
            Op::Reduce {
                send, recv, root, ..
            } => PlanCall::Reduce {
                send,
                recv,
                red,
                average,
                root,
                n,
            },
            Op::AllReduce { send, recv, .. } => PlanCall::AllReduce {
                send: Some(send),
                recv,
                red,
                average,
                n,
            },
            Op::AllReduceInPlace { buf, .. } => PlanCall::AllReduce {
                send: None,
                recv: buf,
                red,
                average,
                n,
            },
            Op::AllGather { send, recv } => PlanCall::AllGather { send, recv, n },
            Op::AllGatherV { send, recv, counts } => PlanCall::AllGatherV { send, recv, counts },
            Op::Gather { send, recv, root } => PlanCall::Gather {
                send,
                recv,
                root,
                n,
            },
            Op::GatherV {
                send,
                recv,
                counts,
                root,
            } => PlanCall::GatherV {
                send,
                recv,
                counts,
                root,
            },
            Op::Scatter { send, recv, root } => PlanCall::Scatter {
                send,
                recv,
                root,
                n,
            },
            Op::ScatterV {
                send,
                recv,
                counts,
                root,
            } => PlanCall::ScatterV {
                send,
                recv,
                counts,
                root,
            },
            Op::ReduceScatter { send, recv, .. } => PlanCall::ReduceScatter {
                send,
                recv,
                red,
                average,
                n,
            },
            Op::AllToAll { send, recv } => PlanCall::AllToAll { send, recv, n },
            Op::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            } => PlanCall::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            },
            Op::Send { .. } | Op::Recv { .. } | Op::SendRecv { .. } => {
                unreachable!("point-to-point operations have no persistent form")
            }
        }
    }

    /// The call as an operation on the plan's buffers (by address), with the count the rules
    /// returned: what the replay starts at each run.
    fn view(&self) -> (Plan<'s, B, T, &[usize]>, usize) {
        let op = |red: ReduceOp, average: bool| if average { ReduceOp::Avg } else { red };
        match self {
            PlanCall::Barrier => (Op::Barrier, 0),
            PlanCall::Broadcast { buf, root, n } => (
                Op::Broadcast {
                    buf: *buf,
                    root: *root,
                },
                *n,
            ),
            PlanCall::Reduce {
                send,
                recv,
                red,
                average,
                root,
                n,
            } => (
                Op::Reduce {
                    send: *send,
                    recv: *recv,
                    op: op(*red, *average),
                    root: *root,
                },
                *n,
            ),
            PlanCall::AllReduce {
                send: Some(send),
                recv,
                red,
                average,
                n,
            } => (
                Op::AllReduce {
                    send: *send,
                    recv: *recv,
                    op: op(*red, *average),
                },
                *n,
            ),
            PlanCall::AllReduce {
                send: None,
                recv,
                red,
                average,
                n,
            } => (
                Op::AllReduceInPlace {
                    buf: *recv,
                    op: op(*red, *average),
                },
                *n,
            ),
            PlanCall::AllGather { send, recv, n } => (
                Op::AllGather {
                    send: *send,
                    recv: *recv,
                },
                *n,
            ),
            PlanCall::AllGatherV { send, recv, counts } => (
                Op::AllGatherV {
                    send: *send,
                    recv: *recv,
                    counts,
                },
                0,
            ),
            PlanCall::Gather {
                send,
                recv,
                root,
                n,
            } => (
                Op::Gather {
                    send: *send,
                    recv: *recv,
                    root: *root,
                },
                *n,
            ),
            PlanCall::GatherV {
                send,
                recv,
                counts,
                root,
            } => (
                Op::GatherV {
                    send: *send,
                    recv: *recv,
                    counts,
                    root: *root,
                },
                0,
            ),
            PlanCall::Scatter {
                send,
                recv,
                root,
                n,
            } => (
                Op::Scatter {
                    send: *send,
                    recv: *recv,
                    root: *root,
                },
                *n,
            ),
            PlanCall::ScatterV {
                send,
                recv,
                counts,
                root,
            } => (
                Op::ScatterV {
                    send: *send,
                    recv: *recv,
                    counts,
                    root: *root,
                },
                0,
            ),
            PlanCall::ReduceScatter {
                send,
                recv,
                red,
                average,
                n,
            } => (
                Op::ReduceScatter {
                    send: *send,
                    recv: *recv,
                    op: op(*red, *average),
                },
                *n,
            ),
            PlanCall::AllToAll { send, recv, n } => (
                Op::AllToAll {
                    send: *send,
                    recv: *recv,
                },
                *n,
            ),
            PlanCall::AllToAllV {
                send,
                send_counts,
                recv,
                recv_counts,
            } => (
                Op::AllToAllV {
                    send: *send,
                    send_counts,
                    recv: *recv,
                    recv_counts,
                },
                0,
            ),
        }
    }
}

/// A plan's operation on the buffers it borrows, as references for one run.
///
/// # Safety
/// The plan still borrows every buffer for `'s`, no run of it is in flight, and the caller cannot
/// reach the buffers while the references live (they go to the one run about to start, which
/// completes before `'s` ends).
pub(super) unsafe fn lend<'s, 'c, B: Backend, T: Element>(
    plan: Plan<'s, B, T, &'c [usize]>,
) -> Operation<'s, 'c, B, T> {
    // SAFETY: the caller's promise, for every buffer.
    plan.map(
        |p| read_of::<B, T>(unsafe { p.get() }),
        |p| unsafe { p.get_mut() },
        |c| c,
    )
}

/// The default persistent plan: each start issues the backend's non-blocking raw operation on the
/// plan's buffers (with fresh staging), and completes it through the request path, deadline and
/// `Avg` finishing included.
pub(crate) fn replay<'s, 'e, B: Backend, T: Element>(
    comm: &'s B,
    scope: &'s Scope<'s, 'e>,
    call: PlanCall<'s, B, T>,
) -> Box<dyn PlanOp + 's> {
    Box::new(Replay {
        comm,
        scope,
        call,
        pending: None,
    })
}

struct Replay<'s, 'e, B: Backend, T: Element> {
    comm: &'s B,
    scope: &'s Scope<'s, 'e>,
    call: PlanCall<'s, B, T>,
    /// The run in flight, taken out of the scope: the plan's own slot in the same scope completes
    /// it before `'s` ends if nothing else does.
    pending: Option<Box<dyn Pending + 's>>,
}

impl<B: Backend, T: Element> PlanOp for Replay<'_, '_, B, T> {
    fn start(&mut self) -> Result<()> {
        let (plan, n) = self.call.view();
        let name = Name::new(plan.kind(), crate::record::Form::Init);
        // SAFETY: the plan borrows each buffer mutably for 's; the front end starts a run only
        // when the previous one is complete, and between runs the caller reaches the buffers only
        // through the plan, which it cannot do while this call borrows it. The references made
        // here go to the one run in flight, which completes before 's ends (by `wait`, or by the
        // plan's slot in this scope), so they are the only ones in use until then.
        let op = unsafe { lend::<B, T>(plan) };
        let lens = super::lens::<B, T>(&op);
        let staging = super::stage::<B, T>(self.comm, name, lens)?;
        let request = start_op(self.comm, name, self.scope, op, n, staging)?;
        self.pending = request.detach();
        Ok(())
    }

    fn wait(&mut self) -> Result<()> {
        match self.pending.take() {
            Some(mut p) => p.wait(),
            None => Ok(()),
        }
    }

    fn test(&mut self) -> Result<bool> {
        let Some(p) = self.pending.as_mut() else {
            return Ok(true);
        };
        match p.test() {
            Ok(false) => Ok(false),
            done => {
                self.pending = None;
                done
            }
        }
    }

    fn path(&self) -> PlanPath {
        PlanPath::Replay
    }
}

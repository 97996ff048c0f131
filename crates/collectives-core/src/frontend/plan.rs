//! Persistent plans as the front end makes them: the checked operation a backend's plan is made
//! of ([`PlanCall`]), and the default plan, which replays the non-blocking operation at each start.

use super::backend::{Backend, PlanCall};
use super::{read_of, start_op, Operation, Plan};
use crate::element::Element;
use crate::error::Result;
use crate::op::ReduceOp;
use crate::operation::Name;
use crate::persistent::{PlanOp, PlanPath};
use crate::request::{Pending, Scope};

impl<B: Backend, T: Element> std::fmt::Debug for PlanCall<'_, B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanCall({})", self.op.kind())
    }
}

impl<'s, B: Backend, T: Element> PlanCall<'s, B, T> {
    /// The plan's operation, its counts borrowed from the plan: what a backend's plan, or the
    /// replay, runs at each start.
    pub fn view(&self) -> Plan<'s, B, T, &[usize]> {
        self.op.by_ref().map(|p| *p, |p| *p, |c| &c[..])
    }
}

/// A plan's operation on the buffers it borrows, as references for one run.
///
/// # Safety
/// The plan still borrows every buffer for `'s`, no run of it is in flight, and the caller cannot
/// reach the buffers while the references live (they go to the one run about to start, which
/// completes before `'s` ends).
pub(crate) unsafe fn lend<'s, 'c, B: Backend, T: Element>(
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
        let mut plan = self.call.view();
        if self.call.average {
            // The caller's `Avg`, which the front end turns into the backend's run of it again.
            if let Some(red) = plan.reduce_op_mut() {
                *red = ReduceOp::Avg;
            }
        }
        let name = Name::new(plan.kind(), crate::record::Form::Init);
        // SAFETY: the plan borrows each buffer mutably for 's; the front end starts a run only
        // when the previous one is complete, and between runs the caller reaches the buffers only
        // through the plan, which it cannot do while this call borrows it. The references made
        // here go to the one run in flight, which completes before 's ends (by `wait`, or by the
        // plan's slot in this scope), so they are the only ones in use until then.
        let op = unsafe { lend::<B, T>(plan) };
        let lens = super::lens::<B, T>(&op);
        let staging = super::stage::<B, T>(self.comm, name, lens)?;
        let request = start_op(self.comm, name, self.scope, op, self.call.n, staging)?;
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

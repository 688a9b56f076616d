//! Cancellation, between a sender (rank 0) and a receiver (rank 1):
//!
//! * a receive and a probe that nothing can match are cancelled: the cancel must be accepted
//!   and they complete `Cancelled`;
//! * sends are cancelled right after posting or after a random delay, some of them in a burst
//!   that exceeds the eager credits and the message window so they queue. Accepted: the send
//!   completes `Cancelled` and its message must never be delivered (no receive is posted; a
//!   leaked message shows up as a delivery or as leftover state). Refused (`InProgress`) or
//!   already completed: the receiver posts a receive and the message must arrive intact;
//! * receives racing their message are cancelled at a random time: accepted ones are posted
//!   again;
//! * handles of completed operations are cancelled again: the answer must be `UnknownOp`;
//! * sends already on the wire (eager in flight or buffered, rendezvous waiting for their
//!   receive) are cancelled (`Requested`): the receiver withdraws them, and the send completes
//!   `Cancelled` and its message is never delivered, or a receive took it first and both
//!   complete normally. Racing sends have their receive posted at a random time, before or
//!   after the cancel; a receive whose message was withdrawn is cancelled in turn.
//!
//! Every message has its own tag, so each receive names exactly one message.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{draw_size, scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{
    CancelError, CancelOutcome, Nanos, OpError, Rank, Source, Status, Tag, TagMatch,
};
use std::collections::BTreeMap;

const SENDER: Rank = 0;
const RECEIVER: Rank = 1;
const NEVER_TAG: Tag = 999;
const NEVER_PROBE_TAG: Tag = 998;
/// Sends of the burst (more than the message window of 64).
const BURST: usize = 72;

// Token kinds (high 32 bits); the low 32 bits are an index.
const A_POST: u64 = 1;
const A_CANCEL: u64 = 2;
const B_POST: u64 = 3;
const B_CANCEL: u64 = 4;
const C_SEND: u64 = 5;
const C_CANCEL: u64 = 6;
const C_RECV: u64 = 7;
const STALE: u64 = 8;
const D_SEND: u64 = 9;
const D_RECV: u64 = 10;
const D_CANCEL: u64 = 11;
const E_SEND: u64 = 12;
const E_RECV: u64 = 13;
const E_CANCEL: u64 = 14;
const E_RECV_CANCEL: u64 = 15;

fn token(kind: u64, index: usize) -> u64 {
    kind << 32 | index as u64
}

#[derive(Debug, Clone, Copy)]
struct SendPlan {
    tag: Tag,
    len: u64,
    at: Nanos,
    /// Delay after posting at which to cancel it (0: in the same instant).
    cancel_after: Option<Nanos>,
    recv_at: Nanos,
}

#[derive(Debug, Clone, Copy)]
struct RacePlan {
    tag: Tag,
    len: u64,
    send_at: Nanos,
    recv_at: Nanos,
    /// When to cancel the receive after posting it; only the first receive is cancelled.
    cancel_after: Option<Nanos>,
}

/// A send cancelled after it started, its receive racing the cancel.
#[derive(Debug, Clone, Copy)]
struct WithdrawPlan {
    tag: Tag,
    len: u64,
    send_at: Nanos,
    cancel_at: Nanos,
    /// When the receiver posts the receive (`None`: only if the cancel fails).
    recv_at: Option<Nanos>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    NeverRecv,
    NeverProbe,
    Send(usize),
    RaceRecv(usize),
    WithdrawSend(usize),
    WithdrawRecv(usize),
    Other,
}

pub struct Cancel {
    sends: Vec<SendPlan>,
    send_ops: Vec<Option<OpRef>>,
    races: Vec<RacePlan>,
    race_ops: Vec<Option<OpRef>>,
    roles: BTreeMap<OpRef, Role>,
    never_recv: Option<OpRef>,
    never_probe: Option<OpRef>,
    stale: Vec<OpRef>,
    /// Sends cancelled with `Requested`: their completion says whether to receive them.
    requested: Vec<bool>,
    withdraws: Vec<WithdrawPlan>,
    withdraw_sends: Vec<Option<OpRef>>,
    withdraw_recvs: Vec<Option<OpRef>>,
}

impl Cancel {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let mut budget = 2;
        let sends = (0..scaled(10, params.scale))
            .map(|i| SendPlan {
                tag: 1000 + i as Tag,
                len: draw_size(rng, 0.15, &mut budget),
                at: rng.range(0, 1_000_000),
                cancel_after: if rng.chance(0.5) {
                    Some(if rng.chance(0.4) {
                        0
                    } else {
                        rng.range(1, 300_000)
                    })
                } else {
                    None
                },
                recv_at: rng.range(0, 1_500_000),
            })
            .collect::<Vec<_>>();
        // A burst of short sends to a receiver that posts late: beyond the eager credits (buffer
        // policy) or the 64-message window (drop policy) they queue, and a cancel of a queued
        // send is accepted.
        let burst_at = rng.range(100_000, 600_000);
        let mut sends = sends;
        for k in 0..BURST {
            sends.push(SendPlan {
                tag: 3000 + k as Tag,
                len: rng.pick(&[0, 1, 7, 1000, 1400, 4096]),
                at: burst_at,
                cancel_after: if rng.chance(0.3) {
                    Some(rng.range(0, 50_000))
                } else {
                    None
                },
                recv_at: burst_at + rng.range(200_000, 1_000_000),
            });
        }
        let races = (0..scaled(5, params.scale))
            .map(|j| RacePlan {
                tag: 2000 + j as Tag,
                len: draw_size(rng, 0.15, &mut budget),
                send_at: rng.range(0, 1_000_000),
                recv_at: rng.range(0, 1_200_000),
                cancel_after: Some(rng.range(0, 200_000)),
            })
            .collect::<Vec<_>>();
        // Long and short sends cancelled once on the wire: the cancel comes after the message
        // reached the receiver (or while it travels), and the receive races it.
        let withdraws = (0..scaled(8, params.scale))
            .map(|k| {
                let send_at = rng.range(0, 1_000_000);
                WithdrawPlan {
                    tag: 4000 + k as Tag,
                    len: rng.pick(&[0, 7, 1000, 4096, 8192, 8193, 65536, 1 << 20]),
                    send_at,
                    cancel_at: send_at + rng.range(1, 2_000_000),
                    recv_at: rng.chance(0.5).then(|| send_at + rng.range(0, 3_000_000)),
                }
            })
            .collect::<Vec<_>>();
        Self {
            requested: vec![false; sends.len()],
            withdraw_sends: vec![None; withdraws.len()],
            withdraw_recvs: vec![None; withdraws.len()],
            withdraws,
            send_ops: vec![None; sends.len()],
            race_ops: vec![None; races.len()],
            sends,
            races,
            roles: BTreeMap::new(),
            never_recv: None,
            never_probe: None,
            stale: Vec::new(),
        }
    }

    fn after_send_cancel(
        &mut self,
        w: &mut World,
        i: usize,
        answer: Result<CancelOutcome, CancelError>,
    ) {
        match answer {
            Ok(CancelOutcome::Cancelled) => {}
            // The completion says whether the receiver withdrew it.
            Ok(CancelOutcome::Requested) => self.requested[i] = true,
            // Not cancelled (in progress, or finished already): the message must be received.
            Err(_) => self.receive_later(w, i),
        }
    }

    fn receive_later(&mut self, w: &mut World, i: usize) {
        let delay = w.rng.range(0, 100_000);
        w.wake_after(RECEIVER, delay, token(C_RECV, i));
    }

    fn post_withdraw_recv(&mut self, w: &mut World, k: usize, layout: Layout) {
        let plan = self.withdraws[k];
        let withdrawn = self.withdraw_sends[k]
            .is_some_and(|op| w.op(op).result == Some(Err(OpError::Cancelled)));
        if self.withdraw_recvs[k].is_some() || withdrawn {
            return;
        }
        let source = Source::Rank(SENDER);
        if let Ok(op) = w.recv(RECEIVER, source, TagMatch::Tag(plan.tag), plan.len, layout) {
            self.withdraw_recvs[k] = Some(op);
            self.roles.insert(op, Role::WithdrawRecv(k));
        }
    }

    fn stale_later(&mut self, w: &mut World, op: OpRef) {
        if w.rng.chance(0.3) {
            self.stale.push(op);
            let delay = w.rng.range(0, 50_000);
            w.wake_after(w.op(op).rank, delay, token(STALE, self.stale.len() - 1));
        }
    }
}

impl Workload for Cancel {
    fn start(&mut self, w: &mut World) {
        let at = w.rng.range(0, 500_000);
        w.wake_at(RECEIVER, at, token(A_POST, 0));
        let at = w.rng.range(0, 500_000);
        w.wake_at(RECEIVER, at, token(B_POST, 0));
        for (i, plan) in self.sends.iter().enumerate() {
            w.wake_at(SENDER, plan.at, token(C_SEND, i));
            if plan.cancel_after.is_none() {
                w.wake_at(RECEIVER, plan.recv_at, token(C_RECV, i));
            }
        }
        for (j, plan) in self.races.iter().enumerate() {
            w.wake_at(SENDER, plan.send_at, token(D_SEND, j));
            w.wake_at(RECEIVER, plan.recv_at, token(D_RECV, j));
        }
        for (k, plan) in self.withdraws.iter().enumerate() {
            w.wake_at(SENDER, plan.send_at, token(E_SEND, k));
            w.wake_at(SENDER, plan.cancel_at, token(E_CANCEL, k));
            if let Some(at) = plan.recv_at {
                w.wake_at(RECEIVER, at, token(E_RECV, k));
            }
        }
    }

    fn on_wake(&mut self, w: &mut World, _rank: Rank, tok: u64) {
        let index = (tok & 0xFFFF_FFFF) as usize;
        let layout = Layout::draw(&mut w.rng, 0.2);
        match tok >> 32 {
            A_POST => {
                if let Ok(op) = w.recv(
                    RECEIVER,
                    Source::Rank(SENDER),
                    TagMatch::Tag(NEVER_TAG),
                    100,
                    layout,
                ) {
                    self.never_recv = Some(op);
                    self.roles.insert(op, Role::NeverRecv);
                    let delay = w.rng.range(0, 100_000);
                    w.wake_after(RECEIVER, delay, token(A_CANCEL, 0));
                }
            }
            A_CANCEL | B_CANCEL => {
                let op = if tok >> 32 == A_CANCEL {
                    self.never_recv
                } else {
                    self.never_probe
                };
                if let Some(op) = op {
                    let answer = w.cancel(op);
                    if !w.cancel_accepted(answer) {
                        w.violation(
                            "cancel",
                            format!(
                                "cancel of {} that nothing can match answered {answer:?}",
                                w.op(op).describe()
                            ),
                        );
                    }
                }
            }
            B_POST => {
                if let Ok(op) = w.probe(RECEIVER, Source::Any, TagMatch::Tag(NEVER_PROBE_TAG)) {
                    self.never_probe = Some(op);
                    self.roles.insert(op, Role::NeverProbe);
                    let delay = w.rng.range(0, 100_000);
                    w.wake_after(RECEIVER, delay, token(B_CANCEL, 0));
                }
            }
            C_SEND => {
                let plan = self.sends[index];
                // A refused send is a violation already; then there is nothing to receive.
                if let Ok(op) = w.send(SENDER, RECEIVER, plan.tag, plan.len, layout) {
                    self.send_ops[index] = Some(op);
                    self.roles.insert(op, Role::Send(index));
                    match plan.cancel_after {
                        Some(0) => {
                            let answer = w.cancel(op);
                            self.after_send_cancel(w, index, answer);
                        }
                        Some(delay) => w.wake_after(SENDER, delay, token(C_CANCEL, index)),
                        None => {}
                    }
                }
            }
            C_CANCEL => {
                if let Some(op) = self.send_ops[index] {
                    let answer = w.cancel(op);
                    self.after_send_cancel(w, index, answer);
                }
            }
            C_RECV => {
                let plan = self.sends[index];
                let extra = if w.rng.chance(0.5) {
                    0
                } else {
                    w.rng.range(1, 500)
                };
                let _ = w.recv(
                    RECEIVER,
                    Source::Rank(SENDER),
                    TagMatch::Tag(plan.tag),
                    plan.len + extra,
                    layout,
                );
            }
            STALE => {
                let _ = w.cancel(self.stale[index]);
            }
            D_SEND => {
                let plan = self.races[index];
                let _ = w.send(SENDER, RECEIVER, plan.tag, plan.len, layout);
            }
            D_RECV => {
                let plan = self.races[index];
                if let Ok(op) = w.recv(
                    RECEIVER,
                    Source::Rank(SENDER),
                    TagMatch::Tag(plan.tag),
                    plan.len,
                    layout,
                ) {
                    self.race_ops[index] = Some(op);
                    self.roles.insert(op, Role::RaceRecv(index));
                    if let Some(delay) = plan.cancel_after {
                        w.wake_after(RECEIVER, delay, token(D_CANCEL, index));
                    }
                }
            }
            D_CANCEL => {
                if let Some(op) = self.race_ops[index] {
                    // Accepted: the Cancelled completion re-posts the receive.
                    let _ = w.cancel(op);
                }
            }
            E_SEND => {
                let plan = self.withdraws[index];
                if let Ok(op) = w.send(SENDER, RECEIVER, plan.tag, plan.len, layout) {
                    self.withdraw_sends[index] = Some(op);
                    self.roles.insert(op, Role::WithdrawSend(index));
                }
            }
            E_CANCEL => {
                let Some(op) = self.withdraw_sends[index] else {
                    return;
                };
                if !w.op(op).is_pending() {
                    return; // completed already (a short send, or received): nothing to do
                }
                if w.cancel(op).is_err() {
                    self.post_withdraw_recv(w, index, layout);
                }
            }
            E_RECV => self.post_withdraw_recv(w, index, layout),
            E_RECV_CANCEL => {
                if let Some(op) = self.withdraw_recvs[index] {
                    let answer = w.cancel(op);
                    if !w.cancel_accepted(answer) {
                        w.violation(
                            "cancel",
                            format!(
                                "the receive of a withdrawn message could not be cancelled: {}",
                                w.op(op).describe()
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        _rank: Rank,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        let role = self.roles.get(&op).copied().unwrap_or(Role::Other);
        match role {
            Role::NeverRecv | Role::NeverProbe => {
                if result != Err(OpError::Cancelled) {
                    w.violation(
                        "cancel",
                        format!("{} completed with {result:?}", w.op(op).describe()),
                    );
                }
                self.stale_later(w, op);
            }
            Role::Send(i) => {
                if result.is_ok() {
                    if std::mem::take(&mut self.requested[i]) {
                        self.receive_later(w, i);
                    }
                    self.stale_later(w, op);
                }
            }
            Role::WithdrawSend(k) => match result {
                // Withdrawn: a receive posted for it can only be cancelled now.
                Err(OpError::Cancelled) => {
                    if self.withdraw_recvs[k].is_some() {
                        let delay = w.rng.range(0, 50_000);
                        w.wake_after(RECEIVER, delay, token(E_RECV_CANCEL, k));
                    }
                }
                Ok(_) => {
                    let layout = Layout::draw(&mut w.rng, 0.2);
                    self.post_withdraw_recv(w, k, layout);
                }
                Err(_) => {}
            },
            Role::WithdrawRecv(_) => {}
            Role::RaceRecv(j) => {
                if result == Err(OpError::Cancelled) {
                    self.race_ops[j] = None;
                    let delay = w.rng.range(0, 50_000);
                    self.races[j].cancel_after = None;
                    w.wake_after(RECEIVER, delay, token(D_RECV, j));
                } else if result.is_ok() {
                    self.stale_later(w, op);
                }
            }
            Role::Other => {}
        }
    }
}

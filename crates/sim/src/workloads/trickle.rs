//! NetPIPE's stream: rank 0 posts a long run of short (eager) messages to rank 1, a burst at
//! once and the rest one by one a few microseconds apart, and rank 1 receives them one at a
//! time, each receive posted a while after the last completed. The sender spends its eager
//! credits at once and then waits for them (asking the receiver, CREDIT with REQUEST); a
//! receiver that thinks longer than the wait makes it run out, a few messages go by rendezvous,
//! and the next waits again. Either way the i-th receive must get the i-th message, whole.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{Nanos, OpError, Rank, Source, Status, Tag, TagMatch};

const SENDER: Rank = 0;
const RECEIVER: Rank = 1;
const TAG: Tag = 9;
/// Eager sizes only: every message needs a credit.
const SIZES: &[u64] = &[0, 1, 8, 256, 1000, 1400, 4096, 8192];
const POST_RECV: u64 = 1;
const POST_SEND: u64 = 2;

pub struct Trickle {
    lens: Vec<u64>,
    /// Pause of the receiver before each receive: mostly a few microseconds (a receiver that
    /// keeps up), sometimes longer than the sender's longest credit wait.
    think: Vec<Nanos>,
    /// When each send is posted, from the start: a burst at 0, then a few microseconds apart
    /// (posted in the sender's loop while earlier ones wait for credits).
    post_at: Vec<Nanos>,
    sent: usize,
    /// The receive posted and the message it must get.
    pending: Option<(OpRef, usize)>,
    received: usize,
}

impl Trickle {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let count = scaled(40, params.scale);
        let lens = (0..count).map(|_| rng.pick(SIZES)).collect();
        let think = (0..count)
            .map(|_| {
                if rng.chance(0.1) {
                    rng.range(300_000, 3_000_000)
                } else {
                    rng.range(0, 20_000)
                }
            })
            .collect();
        let burst = rng.range(0, 16) as usize;
        let mut at = 0;
        let post_at = (0..count)
            .map(|i| {
                if i >= burst {
                    at += rng.range(0, 30_000);
                }
                at
            })
            .collect();
        Self {
            lens,
            think,
            post_at,
            sent: 0,
            pending: None,
            received: 0,
        }
    }

    /// Posts the sends whose time has come; wakes the sender for the next.
    fn post_sends(&mut self, w: &mut World) {
        while self.sent < self.lens.len() && self.post_at[self.sent] <= w.now() {
            let layout = Layout::draw(&mut w.rng, 0.2);
            let _ = w.send(SENDER, RECEIVER, TAG, self.lens[self.sent], layout);
            self.sent += 1;
        }
        if let Some(&next) = self.post_at.get(self.sent) {
            w.wake_at(SENDER, next, POST_SEND);
        }
    }

    fn post_recv(&mut self, w: &mut World) {
        let index = self.received;
        let capacity = self.lens[index];
        let layout = Layout::draw(&mut w.rng, 0.2);
        if let Ok(op) = w.recv(
            RECEIVER,
            Source::Rank(SENDER),
            TagMatch::Tag(TAG),
            capacity,
            layout,
        ) {
            self.pending = Some((op, index));
        }
    }
}

impl Workload for Trickle {
    fn start(&mut self, w: &mut World) {
        self.post_sends(w);
        w.wake_at(RECEIVER, self.think[0], POST_RECV);
    }

    fn on_wake(&mut self, w: &mut World, _rank: Rank, token: u64) {
        match token {
            POST_SEND => self.post_sends(w),
            _ => self.post_recv(w),
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        if rank != RECEIVER || self.pending.map(|(o, _)| o) != Some(op) {
            return;
        }
        let index = self.received;
        let want = (SENDER, TAG, self.lens[index]);
        if result.map(|s| (s.peer, s.tag, s.len)) != Ok(want) {
            w.violation(
                "outcome",
                format!("receive {index} should get message {index} {want:?}, got {result:?}"),
            );
        }
        self.pending = None;
        self.received += 1;
        if self.received < self.lens.len() {
            w.wake_after(RECEIVER, self.think[self.received], POST_RECV);
        }
    }

    fn finish(&mut self, w: &mut World) {
        if self.received != self.lens.len() {
            w.violation(
                "outcome",
                format!(
                    "the receiver got {} of {} streamed messages",
                    self.received,
                    self.lens.len()
                ),
            );
        }
    }
}

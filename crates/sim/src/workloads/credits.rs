//! More unmatched messages than the receiver has eager buffers, with a later message the
//! receiver waits for. Every rank sends to the next one (a ring): a burst of messages with tag
//! 1 that nobody receives yet, many more than the eager credits (mostly short, some long),
//! then one message with tag 2 and one of the library's (a barrier's, `Context::LIBRARY`). The
//! receiver posted the receives for the tag-2 message and the library message first, before
//! anything was sent. MPI requires both to complete while the burst stays unmatched
//! (non-overtaking orders only messages that match the same receive), so a sender out of
//! credits must not hold them back. Only when both completed does the receiver post the
//! burst's receives, which must then get the burst intact and in order.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{Context, OpError, Rank, Source, Status, Tag, TagMatch};
use std::collections::BTreeMap;

const BURST_TAG: Tag = 1;
const WANTED_TAG: Tag = 2;
const BARRIER_TAG: Tag = 0;
/// Burst sizes: short ones (each would take an eager buffer), with long ones among them, and
/// both edges of every credit class (256/257, 4096/4097).
const BURST_SIZES: &[u64] = &[0, 1, 7, 256, 257, 1000, 1400, 4096, 4097, 8192, 8193, 65536];
/// Largest burst message and wanted message: the receives' capacity.
const CAPACITY: u64 = 65536;

// Token kinds (high 32 bits); the low 32 bits are a rank.
const SEND_ALL: u64 = 1;
const DRAIN: u64 = 2;

fn token(kind: u64, rank: Rank) -> u64 {
    kind << 32 | rank as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The receive of the tag-2 message of this receiver.
    Wanted,
    /// The receive of the library message.
    Barrier,
    Other,
}

pub struct Credits {
    /// Per sender: the burst's sizes, then the wanted message's size.
    bursts: Vec<Vec<u64>>,
    wanted_len: Vec<u64>,
    roles: BTreeMap<OpRef, Role>,
    /// Per receiver: the wanted and barrier receives still pending.
    blockers: Vec<u32>,
}

impl Credits {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let ranks = params.ranks as usize;
        // Eager credits are 8 per peer by default: a burst of 12 to 40 overflows them.
        let burst = || scaled(12, params.scale);
        let bursts = (0..ranks)
            .map(|_| {
                let extra = rng.range(0, 28) as usize;
                (0..burst() + extra)
                    .map(|_| rng.pick(BURST_SIZES))
                    .collect()
            })
            .collect();
        let wanted_len = (0..ranks).map(|_| rng.pick(BURST_SIZES)).collect();
        Self {
            bursts,
            wanted_len,
            roles: BTreeMap::new(),
            blockers: vec![2; ranks],
        }
    }

    fn next(w: &World, rank: Rank) -> Rank {
        (rank + 1) % w.size()
    }

    fn previous(w: &World, rank: Rank) -> Rank {
        (rank + w.size() - 1) % w.size()
    }
}

impl Workload for Credits {
    fn start(&mut self, w: &mut World) {
        for rank in 0..w.size() {
            let from = Source::Rank(Self::previous(w, rank));
            let layout = Layout::draw(&mut w.rng, 0.1);
            if let Ok(op) = w.recv(rank, from, TagMatch::Tag(WANTED_TAG), CAPACITY, layout) {
                self.roles.insert(op, Role::Wanted);
            }
            let barrier = (Context::LIBRARY, TagMatch::Tag(BARRIER_TAG));
            if let Ok(op) = w.recv_in(rank, from, barrier, 0, layout) {
                self.roles.insert(op, Role::Barrier);
            }
            let at = w.rng.range(10_000, 200_000);
            w.wake_at(rank, at, token(SEND_ALL, rank));
        }
    }

    fn on_wake(&mut self, w: &mut World, rank: Rank, tok: u64) {
        let layout = Layout::draw(&mut w.rng, 0.1);
        match tok >> 32 {
            SEND_ALL => {
                let to = Self::next(w, rank);
                for &len in &self.bursts[rank as usize] {
                    let _ = w.send(rank, to, BURST_TAG, len, layout);
                }
                let wanted = self.wanted_len[rank as usize];
                let _ = w.send(rank, to, WANTED_TAG, wanted, layout);
                let _ = w.send_in(rank, to, (Context::LIBRARY, BARRIER_TAG), 0, layout);
            }
            DRAIN => {
                let from = Self::previous(w, rank);
                for _ in 0..self.bursts[from as usize].len() {
                    let tag = TagMatch::Tag(BURST_TAG);
                    let _ = w.recv(rank, Source::Rank(from), tag, CAPACITY, layout);
                }
            }
            _ => {}
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        let role = self.roles.get(&op).copied().unwrap_or(Role::Other);
        if role == Role::Other {
            return;
        }
        if result.is_err() {
            w.violation(
                "credits",
                format!("{} failed: {result:?}", w.op(op).describe()),
            );
        }
        let blockers = &mut self.blockers[rank as usize];
        *blockers -= 1;
        if *blockers == 0 {
            let delay = w.rng.range(0, 100_000);
            w.wake_after(rank, delay, token(DRAIN, rank));
        }
    }
}

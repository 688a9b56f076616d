//! Wildcard receives against the library's own traffic. Every rank posts receives with ANY
//! source and ANY tag, and blocking probes of the same shape, before anything is sent; then
//! every rank exchanges the library's messages (barrier-like rounds: empty and short messages
//! in `Context::LIBRARY`, received by exact receives posted before or after they arrive) and,
//! interleaved, exactly as many user messages as the wildcards wait for.
//!
//! The library's messages must only ever complete the library's receives, however many
//! wildcards of the application wait: the ledger matches each receive to the message whose
//! bytes it got, and a receive that took a message of another context is a violation. Each
//! blocking probe completes on a user message (or is cancelled once every user message is in).

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams, SMALL_SIZES};
use crate::world::World;
use nicmsg_proto::{Context, OpError, Rank, Source, Status, Tag, TagMatch};
use std::collections::BTreeMap;

/// Largest user message: every wildcard receive can hold any of them.
const USER_CAPACITY: u64 = 65536;
/// Library messages are empty or short (a barrier's, a reduction's operands).
const LIBRARY_SIZES: &[u64] = &[0, 0, 0, 8, 64];

// Token kinds (high 32 bits); the low 32 bits are an index.
const USER_SEND: u64 = 1;
const LIBRARY_SEND: u64 = 2;
const LIBRARY_RECV: u64 = 3;
const IPROBE: u64 = 4;

fn token(kind: u64, index: usize) -> u64 {
    kind << 32 | index as u64
}

#[derive(Debug, Clone, Copy)]
struct Message {
    src: Rank,
    dst: Rank,
    tag: Tag,
    len: u64,
}

pub struct Library {
    user: Vec<Message>,
    library: Vec<Message>,
    /// User messages each rank still waits for.
    user_pending: Vec<usize>,
    probes: BTreeMap<OpRef, Rank>,
}

impl Library {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let ranks = params.ranks;
        let rounds = scaled(4, params.scale);
        let mut user = Vec::new();
        let mut library = Vec::new();
        for src in 0..ranks {
            for dst in (0..ranks).filter(|&d| d != src) {
                for round in 0..rounds {
                    library.push(Message {
                        src,
                        dst,
                        tag: round as Tag % 2,
                        len: rng.pick(LIBRARY_SIZES),
                    });
                    user.push(Message {
                        src,
                        dst,
                        tag: rng.range(0, 1000) as Tag,
                        len: rng.pick(SMALL_SIZES),
                    });
                }
            }
        }
        let mut user_pending = vec![0; ranks as usize];
        for msg in &user {
            user_pending[msg.dst as usize] += 1;
        }
        Self {
            user,
            library,
            user_pending,
            probes: BTreeMap::new(),
        }
    }
}

impl Workload for Library {
    fn start(&mut self, w: &mut World) {
        // Every wildcard is posted before anything is sent: it could take anything that comes.
        for rank in 0..w.size() {
            for _ in 0..self.user_pending[rank as usize] {
                let layout = Layout::draw(&mut w.rng, 0.1);
                let _ = w.recv(rank, Source::Any, TagMatch::Any, USER_CAPACITY, layout);
            }
            if let Ok(probe) = w.probe(rank, Source::Any, TagMatch::Any) {
                self.probes.insert(probe, rank);
            }
        }
        let start = 10_000;
        for (i, msg) in self.library.iter().enumerate() {
            let at = start + w.rng.range(0, 500_000);
            w.wake_at(msg.src, at, token(LIBRARY_SEND, i));
            // The library's receive comes before or after its message.
            let at = start + w.rng.range(0, 700_000);
            w.wake_at(msg.dst, at, token(LIBRARY_RECV, i));
        }
        for (i, msg) in self.user.iter().enumerate() {
            let at = start + w.rng.range(0, 600_000);
            w.wake_at(msg.src, at, token(USER_SEND, i));
        }
        // Polling probes meanwhile: whatever they report the ledger checks against the user
        // messages outstanding (a library message is never one).
        for rank in 0..w.size() {
            for k in 0..8 {
                let at = start + w.rng.range(0, 800_000);
                w.wake_at(rank, at, token(IPROBE, k));
            }
        }
    }

    fn on_wake(&mut self, w: &mut World, rank: Rank, tok: u64) {
        let index = (tok & 0xFFFF_FFFF) as usize;
        let layout = Layout::draw(&mut w.rng, 0.1);
        match tok >> 32 {
            USER_SEND => {
                let msg = self.user[index];
                let _ = w.send(msg.src, msg.dst, msg.tag, msg.len, layout);
            }
            LIBRARY_SEND => {
                let msg = self.library[index];
                let key = (Context::LIBRARY, msg.tag);
                let _ = w.send_in(msg.src, msg.dst, key, msg.len, layout);
            }
            LIBRARY_RECV => {
                let msg = self.library[index];
                let key = (Context::LIBRARY, TagMatch::Tag(msg.tag));
                let capacity = LIBRARY_SIZES.iter().copied().max().unwrap_or(0);
                let _ = w.recv_in(msg.dst, Source::Rank(msg.src), key, capacity, layout);
            }
            IPROBE => {
                let _ = w.iprobe(rank, Source::Any, TagMatch::Any);
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
        let is_user_receive = matches!(
            w.op(op).detail,
            crate::ledger::OpDetail::Recv { context, .. } if context == Context::USER
        );
        if is_user_receive && result.is_ok() {
            let pending = &mut self.user_pending[rank as usize];
            *pending -= 1;
            if *pending == 0 {
                // Nothing more will come for the probe to see.
                let probes: Vec<OpRef> = self
                    .probes
                    .iter()
                    .filter(|&(&probe, &r)| r == rank && w.op(probe).is_pending())
                    .map(|(&probe, _)| probe)
                    .collect();
                for probe in probes {
                    let _ = w.cancel(probe);
                }
            }
        }
    }
}

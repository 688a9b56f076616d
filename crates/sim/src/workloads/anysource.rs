//! Wildcard receives. Rank 0 is a sink, every other rank sends to it, in three phases:
//!
//! 1. receives with ANY source and ANY tag;
//! 2. receives with ANY source and a given tag (one receive per message of that tag);
//! 3. receives from a given source with ANY tag;
//! 4. 64-bit tags laid out as Open MPI's libfabric layer packs them (communicator in the high
//!    bits, MPI tag in the low 32), received with a tag and an ignore mask: one receive per
//!    message of each communicator with MPI's `ANY_TAG` mask, which leaves out the negative
//!    tags Open MPI keeps for its collectives, and exact receives for those.
//!
//! Wildcards of different shapes are never outstanding together, so no receive can take a
//! message another receive needs: the next phase's sends start only when every receive of the
//! phase completed. The ledger tells which message each receive got from its bytes and checks
//! per-sender order.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams, SMALL_SIZES};
use crate::world::World;
use nicmsg_proto::{OpError, Rank, Source, Status, Tag, TagMatch};

const SINK: Rank = 0;

/// Phase 4: where Open MPI's ofi layer puts the communicator in a 64-bit tag, two of them (one
/// with its top bit set), the bit of a negative MPI tag, and the ignore mask of `MPI_ANY_TAG`.
const CID_SHIFT: u32 = 34;
const COMMUNICATORS: [u64; 2] = [3, (1 << 30) - 1];
const NEGATIVE_TAG: u64 = 1 << 31;
const ANY_TAG_IGNORE: u64 = 0x7FFF_FFFF;
const MASKED_TAGS: [Tag; 5] = [
    3 << CID_SHIFT | 5,
    3 << CID_SHIFT | 9,
    3 << CID_SHIFT | NEGATIVE_TAG | 7,
    ((1 << 30) - 1) << CID_SHIFT | 5,
    ((1 << 30) - 1) << CID_SHIFT | 0x7FFF_FFFF,
];
const SEND: u64 = 0;
const RECV: u64 = 1;

#[derive(Debug, Clone, Copy)]
struct Msg {
    src: Rank,
    tag: Tag,
    len: u64,
}

struct Phase {
    msgs: Vec<Msg>,
    recvs: Vec<(Source, TagMatch, u64)>,
}

pub struct AnySource {
    phases: Vec<Phase>,
    phase: usize,
    outstanding: usize,
}

impl AnySource {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let per_sender = scaled(6, params.scale);
        let senders: Vec<Rank> = (1..params.ranks).collect();
        let tag_sets: [&[Tag]; 4] = [&[10, 11, 12], &[20, 21], &[30, 31, 32], &MASKED_TAGS];
        let mut large = 1u32;
        let mut phases = Vec::new();
        for (p, tags) in tag_sets.iter().enumerate() {
            let mut msgs = Vec::new();
            for &src in &senders {
                for _ in 0..per_sender {
                    let len = if p == 2 && large > 0 && rng.chance(0.1) {
                        large -= 1;
                        1 << 20
                    } else {
                        rng.pick(SMALL_SIZES)
                    };
                    msgs.push(Msg {
                        src,
                        tag: rng.pick(tags),
                        len,
                    });
                }
            }
            let max_of = |filter: &dyn Fn(&Msg) -> bool| {
                msgs.iter()
                    .filter(|m| filter(m))
                    .map(|m| m.len)
                    .max()
                    .unwrap_or(0)
            };
            let mut recvs = Vec::new();
            match p {
                0 => {
                    let capacity = max_of(&|_| true);
                    for _ in &msgs {
                        recvs.push((Source::Any, TagMatch::Any, capacity + rng.range(0, 100)));
                    }
                }
                1 => {
                    for &tag in *tags {
                        let capacity = max_of(&|m| m.tag == tag);
                        for _ in msgs.iter().filter(|m| m.tag == tag) {
                            recvs.push((
                                Source::Any,
                                TagMatch::Tag(tag),
                                capacity + rng.range(0, 100),
                            ));
                        }
                    }
                }
                3 => {
                    for communicator in COMMUNICATORS {
                        let of = |m: &Msg| m.tag >> CID_SHIFT == communicator;
                        let any_tag = |m: &Msg| of(m) && m.tag & NEGATIVE_TAG == 0;
                        let capacity = max_of(&any_tag);
                        for _ in msgs.iter().filter(|m| any_tag(m)) {
                            let tag = TagMatch::Masked {
                                tag: communicator << CID_SHIFT,
                                ignore: ANY_TAG_IGNORE,
                            };
                            recvs.push((Source::Any, tag, capacity + rng.range(0, 100)));
                        }
                    }
                    for m in msgs.iter().filter(|m| m.tag & NEGATIVE_TAG != 0) {
                        let capacity = max_of(&|x| x.src == m.src && x.tag == m.tag);
                        recvs.push((Source::Rank(m.src), TagMatch::Tag(m.tag), capacity));
                    }
                }
                _ => {
                    for &src in &senders {
                        let capacity = max_of(&|m| m.src == src);
                        for _ in msgs.iter().filter(|m| m.src == src) {
                            recvs.push((
                                Source::Rank(src),
                                TagMatch::Any,
                                capacity + rng.range(0, 100),
                            ));
                        }
                    }
                }
            }
            rng.shuffle(&mut recvs);
            phases.push(Phase { msgs, recvs });
        }
        Self {
            phases,
            phase: 0,
            outstanding: 0,
        }
    }

    fn start_phase(&mut self, w: &mut World) {
        let p = self.phase as u64;
        let phase = &self.phases[self.phase];
        self.outstanding = phase.recvs.len();
        for (i, msg) in phase.msgs.iter().enumerate() {
            let at = w.now() + w.rng.range(0, 200_000);
            w.wake_at(msg.src, at, p << 40 | SEND << 32 | i as u64);
        }
        for i in 0..phase.recvs.len() {
            let at = w.now() + w.rng.range(0, 300_000);
            w.wake_at(SINK, at, p << 40 | RECV << 32 | i as u64);
        }
    }

    fn receive_done(&mut self, w: &mut World) {
        self.outstanding -= 1;
        if self.outstanding == 0 && self.phase + 1 < self.phases.len() {
            self.phase += 1;
            self.start_phase(w);
        }
    }
}

impl Workload for AnySource {
    fn start(&mut self, w: &mut World) {
        self.start_phase(w);
    }

    fn on_wake(&mut self, w: &mut World, _rank: Rank, token: u64) {
        let phase = &self.phases[(token >> 40) as usize];
        let index = (token & 0xFFFF_FFFF) as usize;
        let layout = Layout::draw(&mut w.rng, 0.2);
        if (token >> 32) & 0xFF == SEND {
            let msg = phase.msgs[index];
            let _ = w.send(msg.src, SINK, msg.tag, msg.len, layout);
        } else {
            let (source, tag, capacity) = phase.recvs[index];
            if w.recv(SINK, source, tag, capacity, layout).is_err() {
                self.receive_done(w);
            }
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        _op: OpRef,
        _result: Result<Status, OpError>,
    ) {
        if rank == SINK {
            self.receive_done(w);
        }
    }

    fn finish(&mut self, w: &mut World) {
        if self.phase + 1 != self.phases.len() || self.outstanding != 0 {
            w.violation(
                "outcome",
                format!(
                    "any-source sink stopped in phase {} with {} receives outstanding",
                    self.phase, self.outstanding
                ),
            );
        }
    }
}

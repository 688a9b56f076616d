//! Streams between every ordered pair of ranks: messages of mixed sizes (0 B to 3 MiB) on a few
//! tags, sent in bursts and gaps, with each receive posted at a random time (before the message
//! arrives, or after: unexpected). The i-th receive of a (source, tag) group gets the i-th
//! message of the group, so every receive's outcome is known in advance and checked.
//!
//! The same machinery runs the `scatter` (every buffer scattered), `truncation` (receive
//! buffers shorter than their message) and `peer-death` (one rank dies mid-run) workloads.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{draw_size, scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{Nanos, OpError, Rank, Source, Status, Tag, TagMatch};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct StreamsConfig {
    pub ranks: u32,
    pub msgs_per_pair: usize,
    pub tags: Vec<Tag>,
    /// Probability that a buffer is scattered.
    pub scatter: f64,
    /// Probability of a 1 or 3 MiB message while the budget lasts.
    pub large_p: f64,
    pub large_budget: u32,
    /// Probability that a receive buffer is shorter than its message.
    pub truncate: f64,
    /// Largest gap between two sends of a pair.
    pub gap_max_ns: Nanos,
    /// One random rank dies at a random time.
    pub death: bool,
}

impl StreamsConfig {
    pub fn streams(p: &WorkloadParams) -> Self {
        Self {
            ranks: p.ranks,
            msgs_per_pair: scaled(12, p.scale),
            tags: vec![0, 1, 2],
            scatter: 0.25,
            large_p: 0.05,
            large_budget: scaled(2, p.scale) as u32,
            truncate: 0.0,
            gap_max_ns: 30_000,
            death: false,
        }
    }

    pub fn scatter(p: &WorkloadParams) -> Self {
        Self {
            msgs_per_pair: scaled(10, p.scale),
            tags: vec![3, 4],
            scatter: 1.0,
            large_budget: 1,
            ..Self::streams(p)
        }
    }

    pub fn truncation(p: &WorkloadParams) -> Self {
        Self {
            ranks: 2,
            msgs_per_pair: scaled(16, p.scale),
            tags: vec![5, 6],
            large_budget: 1,
            truncate: 0.4,
            ..Self::streams(p)
        }
    }

    pub fn peer_death(p: &WorkloadParams) -> Self {
        Self {
            msgs_per_pair: scaled(4, p.scale),
            tags: vec![0, 1],
            scatter: 0.2,
            large_p: 0.02,
            large_budget: 1,
            gap_max_ns: 200_000,
            death: true,
            ..Self::streams(p)
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Send {
        src: Rank,
        dst: Rank,
        tag: Tag,
        len: u64,
        layout: Layout,
    },
    Recv {
        rank: Rank,
        src: Rank,
        tag: Tag,
        len: u64,
        capacity: u64,
        layout: Layout,
    },
}

/// What a receive must end with.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    src: Rank,
    tag: Tag,
    len: u64,
    capacity: u64,
}

pub struct Streams {
    plan: Vec<(Nanos, Action)>,
    death: Option<(Rank, Nanos)>,
    expected: BTreeMap<OpRef, Outcome>,
}

impl Streams {
    pub fn new(config: StreamsConfig, rng: &mut SimRng) -> Self {
        let mut plan = Vec::new();
        let mut budget = config.large_budget;
        for src in 0..config.ranks {
            for dst in 0..config.ranks {
                if src == dst {
                    continue;
                }
                let mut t = rng.range(0, 20_000);
                let mut sends = Vec::with_capacity(config.msgs_per_pair);
                for i in 0..config.msgs_per_pair {
                    if i > 0 && !rng.chance(0.3) {
                        t += rng.range(1, config.gap_max_ns);
                    }
                    let tag = rng.pick(&config.tags);
                    let len = draw_size(rng, config.large_p, &mut budget);
                    sends.push((t, tag, len));
                    plan.push((
                        t,
                        Action::Send {
                            src,
                            dst,
                            tag,
                            len,
                            layout: Layout::draw(rng, config.scatter),
                        },
                    ));
                }
                // Receive times: random over the stream's span and a little beyond, sorted within
                // each tag so the i-th receive of a tag is posted before the (i+1)-th.
                let horizon = t + t / 4 + 50_000;
                for &tag in &config.tags {
                    let group: Vec<&(Nanos, Tag, u64)> =
                        sends.iter().filter(|s| s.1 == tag).collect();
                    let mut times: Vec<Nanos> =
                        group.iter().map(|_| rng.range(0, horizon)).collect();
                    times.sort_unstable();
                    for (&&(_, _, len), at) in group.iter().zip(times) {
                        let capacity = if len > 0 && rng.chance(config.truncate) {
                            match rng.below(4) {
                                0 => 0,
                                1 => len - 1,
                                2 => len / 2,
                                _ => rng.range(0, len - 1),
                            }
                        } else if rng.chance(0.5) {
                            len
                        } else {
                            len + rng.range(1, 3000)
                        };
                        let layout = Layout::draw(rng, config.scatter);
                        plan.push((
                            at,
                            Action::Recv {
                                rank: dst,
                                src,
                                tag,
                                len,
                                capacity,
                                layout,
                            },
                        ));
                    }
                }
            }
        }
        let death = config.death.then(|| {
            (
                rng.below(config.ranks as u64) as Rank,
                rng.range(20_000, 3_000_000),
            )
        });
        Self {
            plan,
            death,
            expected: BTreeMap::new(),
        }
    }
}

impl Workload for Streams {
    fn start(&mut self, w: &mut World) {
        for (token, &(at, action)) in self.plan.iter().enumerate() {
            let rank = match action {
                Action::Send { src, .. } => src,
                Action::Recv { rank, .. } => rank,
            };
            w.wake_at(rank, at, token as u64);
        }
        if let Some((rank, at)) = self.death {
            w.kill_at(rank, at);
        }
    }

    fn on_wake(&mut self, w: &mut World, _rank: Rank, token: u64) {
        match self.plan[token as usize].1 {
            Action::Send {
                src,
                dst,
                tag,
                len,
                layout,
            } => {
                let _ = w.send(src, dst, tag, len, layout);
            }
            Action::Recv {
                rank,
                src,
                tag,
                len,
                capacity,
                layout,
            } => {
                if let Ok(op) = w.recv(
                    rank,
                    Source::Rank(src),
                    TagMatch::Tag(tag),
                    capacity,
                    layout,
                ) {
                    self.expected.insert(
                        op,
                        Outcome {
                            src,
                            tag,
                            len,
                            capacity,
                        },
                    );
                }
            }
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        let Some(want) = self.expected.remove(&op) else {
            return;
        };
        if w.is_dead(want.src) {
            return; // anything from a dead sender may fail; the ledger checks the failure is sound
        }
        // The ledger checks the immediate data of every receive, truncated or not.
        let ok = if want.capacity < want.len {
            matches!(result, Err(OpError::Truncated { source_rank, tag, message_len, buffer_len, .. })
                if (source_rank, tag, message_len, buffer_len) == (want.src, want.tag, want.len, want.capacity))
        } else {
            result.map(|status| (status.peer, status.tag, status.len))
                == Ok((want.src, want.tag, want.len))
        };
        if !ok {
            w.violation(
                "outcome",
                format!(
                    "rank {rank}: receive from {} tag {} with a {}-byte buffer should get the {}-byte message in order, got {result:?}",
                    want.src, want.tag, want.capacity, want.len
                ),
            );
        }
    }
}

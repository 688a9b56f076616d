//! All-to-all in rounds among many ranks (16 by default): in each round every rank posts a
//! receive from every other rank (tag = round) and sends to every other rank, in a random order
//! and interleaving; it starts the next round when all its operations of the round completed.
//! Ranks drift apart, so messages of a later round arrive before their receives are posted.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams, SMALL_SIZES};
use crate::world::World;
use nicmsg_proto::{OpError, Rank, Source, Status, TagMatch};

pub struct AllToAll {
    ranks: u32,
    rounds: usize,
    /// sizes[round][src][dst]
    sizes: Vec<Vec<Vec<u64>>>,
    round: Vec<usize>,
    outstanding: Vec<usize>,
}

impl AllToAll {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let n = params.ranks as usize;
        let rounds = scaled(3, params.scale);
        let sizes = (0..rounds)
            .map(|_| {
                (0..n)
                    .map(|_| {
                        (0..n)
                            .map(|_| {
                                if rng.chance(0.05) {
                                    65536
                                } else {
                                    rng.pick(&SMALL_SIZES[..SMALL_SIZES.len() - 1])
                                }
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Self {
            ranks: params.ranks,
            rounds,
            sizes,
            round: vec![0; n],
            outstanding: vec![0; n],
        }
    }

    fn start_round(&mut self, w: &mut World, rank: Rank) {
        let round = self.round[rank as usize];
        let mut steps: Vec<(bool, Rank)> = Vec::new();
        for peer in 0..self.ranks {
            if peer != rank {
                steps.push((true, peer));
                steps.push((false, peer));
            }
        }
        w.rng.shuffle(&mut steps);
        for (is_send, peer) in steps {
            let layout = Layout::draw(&mut w.rng, 0.1);
            let posted = if is_send {
                let len = self.sizes[round][rank as usize][peer as usize];
                w.send(rank, peer, round as u64, len, layout)
            } else {
                let len = self.sizes[round][peer as usize][rank as usize];
                let extra = if w.rng.chance(0.5) {
                    0
                } else {
                    w.rng.range(1, 100)
                };
                w.recv(
                    rank,
                    Source::Rank(peer),
                    TagMatch::Tag(round as u64),
                    len + extra,
                    layout,
                )
            };
            if posted.is_ok() {
                self.outstanding[rank as usize] += 1;
            }
        }
    }
}

impl Workload for AllToAll {
    fn start(&mut self, w: &mut World) {
        for rank in 0..self.ranks {
            let skew = w.rng.range(0, 50_000);
            w.wake_at(rank, skew, 0);
        }
    }

    fn on_wake(&mut self, w: &mut World, rank: Rank, _token: u64) {
        self.start_round(w, rank);
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        _op: OpRef,
        _result: Result<Status, OpError>,
    ) {
        let r = rank as usize;
        self.outstanding[r] -= 1;
        if self.outstanding[r] == 0 {
            self.round[r] += 1;
            if self.round[r] < self.rounds {
                let think = w.rng.range(0, 20_000);
                w.wake_after(rank, think, 0);
            }
        }
    }

    fn finish(&mut self, w: &mut World) {
        for rank in 0..self.ranks {
            if self.round[rank as usize] != self.rounds && !w.is_dead(rank) {
                w.violation(
                    "outcome",
                    format!(
                        "rank {rank} finished {} of {} all-to-all rounds",
                        self.round[rank as usize], self.rounds
                    ),
                );
            }
        }
    }
}

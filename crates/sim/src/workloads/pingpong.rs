//! Ping-pong between ranks 0 and 1: rank 0 sends a ping, rank 1 answers with a pong of the same
//! size, for a number of rounds over every size. Each side posts its receive either before the
//! message can arrive or after a random delay (the message then arrives unexpected).

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{draw_size, scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{Nanos, OpError, Rank, Source, Status, TagMatch};

const PING: u64 = 1;
const PONG: u64 = 2;
const START_ROUND: u64 = 0;
const POST_PONG_RECV: u64 = 1;
const POST_PING_RECV: u64 = 2;

struct Round {
    len: u64,
    /// Rank 0 posts the pong receive before sending the ping.
    pong_recv_early: bool,
    pong_recv_delay: Nanos,
    /// Delay before rank 1 posts the ping receive (0: right away).
    ping_recv_delay: Nanos,
    extra: [u64; 2],
}

pub struct PingPong {
    rounds: Vec<Round>,
    scatter: f64,
    /// Rank 0's current round and what of it completed (ping sent, pong received).
    round: usize,
    ping_sent: bool,
    pong_received: bool,
    ping_op: Option<OpRef>,
    pong_op: Option<OpRef>,
    /// Rank 1's current round.
    round1: usize,
    ping_recv_op: Option<OpRef>,
    completed: usize,
}

impl PingPong {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let mut budget = scaled(2, params.scale) as u32;
        let rounds = (0..scaled(20, params.scale))
            .map(|_| Round {
                len: draw_size(rng, 0.08, &mut budget),
                pong_recv_early: rng.chance(0.5),
                pong_recv_delay: rng.range(0, 100_000),
                ping_recv_delay: if rng.chance(0.4) {
                    0
                } else {
                    rng.range(1, 150_000)
                },
                extra: [
                    rng.range(0, 2) * rng.range(0, 2000),
                    rng.range(0, 2) * rng.range(0, 2000),
                ],
            })
            .collect();
        Self {
            rounds,
            scatter: 0.2,
            round: 0,
            ping_sent: false,
            pong_received: false,
            ping_op: None,
            pong_op: None,
            round1: 0,
            ping_recv_op: None,
            completed: 0,
        }
    }

    fn layout(&self, w: &mut World) -> Layout {
        Layout::draw(&mut w.rng, self.scatter)
    }

    fn post_pong_recv(&mut self, w: &mut World) {
        let r = &self.rounds[self.round];
        let capacity = r.len + r.extra[0];
        let layout = self.layout(w);
        self.pong_op = w
            .recv(0, Source::Rank(1), TagMatch::Tag(PONG), capacity, layout)
            .ok();
    }

    fn start_round(&mut self, w: &mut World) {
        self.ping_sent = false;
        self.pong_received = false;
        let r = &self.rounds[self.round];
        let (early, delay, len) = (r.pong_recv_early, r.pong_recv_delay, r.len);
        if early {
            self.post_pong_recv(w);
        }
        let layout = self.layout(w);
        self.ping_op = w.send(0, 1, PING, len, layout).ok();
        if !early {
            w.wake_after(0, delay, POST_PONG_RECV);
        }
    }

    fn post_ping_recv(&mut self, w: &mut World) {
        let r = &self.rounds[self.round1];
        let capacity = r.len + r.extra[1];
        let layout = self.layout(w);
        self.ping_recv_op = w
            .recv(1, Source::Rank(0), TagMatch::Tag(PING), capacity, layout)
            .ok();
    }
}

impl Workload for PingPong {
    fn start(&mut self, w: &mut World) {
        w.wake_at(1, self.rounds[0].ping_recv_delay, POST_PING_RECV);
        w.wake_at(0, 0, START_ROUND);
    }

    fn on_wake(&mut self, w: &mut World, _rank: Rank, token: u64) {
        match token {
            START_ROUND => self.start_round(w),
            POST_PONG_RECV => self.post_pong_recv(w),
            _ => self.post_ping_recv(w),
        }
    }

    fn on_completion(
        &mut self,
        w: &mut World,
        rank: Rank,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        if rank == 1 {
            if Some(op) == self.ping_recv_op && result.is_ok() {
                let len = self.rounds[self.round1].len;
                let layout = self.layout(w);
                let _ = w.send(1, 0, PONG, len, layout);
                self.round1 += 1;
                if self.round1 < self.rounds.len() {
                    let delay = self.rounds[self.round1].ping_recv_delay;
                    w.wake_after(1, delay, POST_PING_RECV);
                }
            }
            return;
        }
        if Some(op) == self.ping_op && result.is_ok() {
            self.ping_sent = true;
        }
        if Some(op) == self.pong_op && result.is_ok() {
            self.pong_received = true;
        }
        if self.ping_sent && self.pong_received {
            self.ping_sent = false;
            self.pong_received = false;
            self.completed += 1;
            self.round += 1;
            if self.round < self.rounds.len() {
                let think = w.rng.range(0, 20_000);
                w.wake_after(0, think, START_ROUND);
            }
        }
    }

    fn finish(&mut self, w: &mut World) {
        if self.completed != self.rounds.len() {
            w.violation(
                "outcome",
                format!(
                    "ping-pong finished {} of {} rounds",
                    self.completed,
                    self.rounds.len()
                ),
            );
        }
    }
}

//! Probes. Ranks 1.. send messages to rank 0, which repeatedly picks a filter (ANY/ANY, a
//! source, a tag, or both, always one some outstanding message matches) and finds a message by
//!
//! * a blocking probe (`post_probe`),
//! * polling `iprobe` every few microseconds, or
//! * a blocking probe it cancels after a random delay (then starts over), or
//! * polling `claim` (MPI_Improbe), which takes the message it finds;
//!
//! then checks that it is the oldest outstanding message of that source and tag, and that
//! `iprobe(source, tag)` reports the same status (for a probe) or no longer sees that message
//! (for a claim), and receives it with a buffer of exactly the probed length, a claimed one
//! after a random delay by naming its claim (MPI_Mrecv): the receive must complete with the
//! probed status, the ledger checking it took the claimed message. Before any send, `iprobe`
//! must find nothing.

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{draw_size, scaled, Workload, WorkloadParams};
use crate::world::{Claimed, World};
use nicmsg_proto::{Nanos, OpError, Rank, Source, Status, Tag, TagMatch};

const RECEIVER: Rank = 0;
const BEGIN: u64 = 1;
const POLL: u64 = 2;
const RECV_CLAIMED: u64 = 3;
const SEND: u64 = 1 << 32;
const CANCEL: u64 = 2 << 32;

#[derive(Debug, Clone, Copy)]
struct Msg {
    src: Rank,
    tag: Tag,
    len: u64,
    at: Nanos,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Idle,
    Probing {
        op: OpRef,
    },
    Polling {
        source: Source,
        tag: TagMatch,
    },
    Claiming {
        source: Source,
        tag: TagMatch,
    },
    /// A claimed message waits for its receive (a random delay, as an application's).
    Claimed(Claimed),
    Receiving {
        op: OpRef,
        status: Status,
    },
    Done,
}

pub struct Probe {
    msgs: Vec<Msg>,
    /// Messages not yet received, in send order per sender.
    remaining: Vec<usize>,
    state: State,
    received: usize,
}

impl Probe {
    pub fn new(params: &WorkloadParams, rng: &mut SimRng) -> Self {
        let mut msgs = Vec::new();
        let mut budget = 1;
        for src in 1..params.ranks {
            let mut at = rng.range(10_000, 30_000);
            for _ in 0..scaled(8, params.scale) {
                at += rng.range(0, 100_000);
                msgs.push(Msg {
                    src,
                    tag: rng.range(1, 4) as Tag,
                    len: draw_size(rng, 0.05, &mut budget),
                    at,
                });
            }
        }
        let remaining = (0..msgs.len()).collect();
        Self {
            msgs,
            remaining,
            state: State::Idle,
            received: 0,
        }
    }

    fn begin(&mut self, w: &mut World) {
        if self.remaining.is_empty() {
            self.state = State::Done;
            return;
        }
        let target = self.msgs[self.remaining[w.rng.below(self.remaining.len() as u64) as usize]];
        let (source, tag) = match w.rng.below(4) {
            0 => (Source::Any, TagMatch::Any),
            1 => (Source::Rank(target.src), TagMatch::Any),
            2 => (Source::Any, TagMatch::Tag(target.tag)),
            _ => (Source::Rank(target.src), TagMatch::Tag(target.tag)),
        };
        let mode = w.rng.below(100);
        if (35..50).contains(&mode) {
            self.state = State::Claiming { source, tag };
            self.poll(w);
        } else if !(50..85).contains(&mode) {
            match w.probe(RECEIVER, source, tag) {
                Ok(op) => {
                    self.state = State::Probing { op };
                    if mode >= 85 {
                        let delay = w.rng.range(0, 30_000);
                        w.wake_after(RECEIVER, delay, CANCEL | op as u64);
                    }
                }
                Err(_) => self.state = State::Done,
            }
        } else {
            self.state = State::Polling { source, tag };
            self.poll(w);
        }
    }

    fn poll(&mut self, w: &mut World) {
        match self.state {
            State::Polling { source, tag } => match w.iprobe(RECEIVER, source, tag) {
                Some(status) => self.found(w, status),
                None => Self::poll_again(w),
            },
            State::Claiming { source, tag } => match w.claim(RECEIVER, source, tag) {
                Some(claimed) => self.claimed(w, claimed),
                None => Self::poll_again(w),
            },
            _ => {}
        }
    }

    fn poll_again(w: &mut World) {
        let delay = w.rng.range(5_000, 50_000);
        w.wake_after(RECEIVER, delay, POLL);
    }

    /// A claim took the message `claimed` names: it must be the oldest outstanding of its
    /// source and tag, and no probe may see it any more; it is received after a while.
    fn claimed(&mut self, w: &mut World, claimed: Claimed) {
        let status = claimed.status;
        self.check_oldest(w, status);
        let again = w.iprobe(
            RECEIVER,
            Source::Rank(status.peer),
            TagMatch::Tag(status.tag),
        );
        let next = self.outstanding_after(status);
        if again.is_some_and(|seen| next.is_none_or(|m| m.len != seen.len)) {
            w.violation(
                "probe",
                format!("claimed {status:?}, then iprobe of its source and tag still returned {again:?} (next outstanding: {next:?})"),
            );
        }
        self.state = State::Claimed(claimed);
        let delay = w.rng.range(0, 50_000);
        w.wake_after(RECEIVER, delay, RECV_CLAIMED);
    }

    /// The outstanding message of `status`'s source and tag after the oldest one.
    fn outstanding_after(&self, status: Status) -> Option<Msg> {
        self.remaining
            .iter()
            .map(|&i| self.msgs[i])
            .filter(|m| m.src == status.peer && m.tag == status.tag)
            .nth(1)
    }

    fn receive_claimed(&mut self, w: &mut World) {
        let State::Claimed(claimed) = self.state else {
            return;
        };
        let layout = Layout::draw(&mut w.rng, 0.2);
        let status = claimed.status;
        match w.recv_claimed(RECEIVER, claimed, status.len, layout) {
            Ok(op) => self.state = State::Receiving { op, status },
            Err(_) => self.state = State::Done,
        }
    }

    fn check_oldest(&self, w: &mut World, status: Status) {
        let oldest = self
            .remaining
            .iter()
            .map(|&i| self.msgs[i])
            .find(|m| m.src == status.peer && m.tag == status.tag);
        match oldest {
            Some(m) if m.len == status.len => {}
            other => w.violation(
                "probe",
                format!("probe found {status:?} but the oldest outstanding message of that source and tag is {other:?}"),
            ),
        }
    }

    /// A probe saw `status`: cross-check it, then receive exactly that message.
    fn found(&mut self, w: &mut World, status: Status) {
        let again = w.iprobe(
            RECEIVER,
            Source::Rank(status.peer),
            TagMatch::Tag(status.tag),
        );
        if again != Some(status) {
            w.violation(
                "probe",
                format!("probe found {status:?} but iprobe of its source and tag then returned {again:?}"),
            );
        }
        self.check_oldest(w, status);
        let layout = Layout::draw(&mut w.rng, 0.2);
        match w.recv(
            RECEIVER,
            Source::Rank(status.peer),
            TagMatch::Tag(status.tag),
            status.len,
            layout,
        ) {
            Ok(op) => self.state = State::Receiving { op, status },
            Err(_) => self.state = State::Done,
        }
    }
}

impl Workload for Probe {
    fn start(&mut self, w: &mut World) {
        if let Some(status) = w.iprobe(RECEIVER, Source::Any, TagMatch::Any) {
            w.violation(
                "probe",
                format!("iprobe before any send returned {status:?}"),
            );
        }
        for (i, msg) in self.msgs.iter().enumerate() {
            w.wake_at(msg.src, msg.at, SEND | i as u64);
        }
        let at = w.rng.range(0, 100_000);
        w.wake_at(RECEIVER, at, BEGIN);
    }

    fn on_wake(&mut self, w: &mut World, _rank: Rank, token: u64) {
        if token & CANCEL != 0 {
            // Cancel that probe. If it completed meanwhile, the cancel of its stale handle must
            // answer UnknownOp (the ledger checks either way).
            let _ = w.cancel((token & 0xFFFF_FFFF) as OpRef);
            return;
        }
        if token & SEND != 0 {
            let msg = self.msgs[(token & 0xFFFF_FFFF) as usize];
            let layout = Layout::draw(&mut w.rng, 0.2);
            let _ = w.send(msg.src, RECEIVER, msg.tag, msg.len, layout);
            return;
        }
        match token {
            BEGIN => self.begin(w),
            POLL => self.poll(w),
            RECV_CLAIMED => self.receive_claimed(w),
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
        if rank != RECEIVER {
            return;
        }
        match self.state {
            State::Probing { op: probe } if probe == op => match result {
                Ok(status) => self.found(w, status),
                Err(OpError::Cancelled) => {
                    self.state = State::Idle;
                    let delay = w.rng.range(0, 10_000);
                    w.wake_after(RECEIVER, delay, BEGIN);
                }
                Err(_) => self.state = State::Done,
            },
            State::Receiving { op: recv, status } if recv == op => {
                if result != Ok(status) {
                    w.violation(
                        "probe",
                        format!(
                            "receive of the probed message {status:?} completed with {result:?}"
                        ),
                    );
                }
                if let Some(pos) = self.remaining.iter().position(|&i| {
                    self.msgs[i].src == status.peer && self.msgs[i].tag == status.tag
                }) {
                    self.remaining.remove(pos);
                }
                self.received += 1;
                self.state = State::Idle;
                let delay = w.rng.range(0, 10_000);
                w.wake_after(RECEIVER, delay, BEGIN);
            }
            _ => {}
        }
    }

    fn finish(&mut self, w: &mut World) {
        if self.received != self.msgs.len() {
            w.violation(
                "outcome",
                format!(
                    "probe workload received {} of {} messages (state {:?})",
                    self.received,
                    self.msgs.len(),
                    self.state
                ),
            );
        }
    }
}

//! An "unsafe" MPI program: every rank sends many short messages to its peers before it
//! receives any (MPI lets such a program deadlock; ob1 and TCP carry it through their socket
//! buffers), some of the sends withdrawn by cancel, then receives them in order.
//!
//! Each rank posts its sends, a burst at once and the rest a few microseconds apart, to one or
//! more peers on two tags: messages of one frame across the credit classes (0, 8 and 256
//! bytes small, 257, 1000 and a whole frame's payload medium, 6000 eager), a few of several
//! frames. The senders spend their credits on the first ones and send the rest by rendezvous,
//! at once or after their credit waits run out; the receivers, thinking still, keep only those
//! messages' headers. Then each receiver posts one receive at a time per (source, tag), with short
//! pauses (sometimes long ones): as its receives consume the buffered messages, each freed
//! buffer goes to the oldest kept message of its class (small, medium or eager, of one frame
//! or several), which its sender sends again as an eager one (`handover.rs`, "kept messages
//! taken as eager" in the report).
//!
//! Some sends are cancelled: right after posting, at a random time while their message is
//! kept or while the receives run, or just after a receive from their sender completed, when
//! the buffer it freed most likely went to them and the request to send them as eager is on
//! its way. The send's completion says what became of it: `Cancelled` (withdrawn, never
//! delivered) or normal (delivered). A receive is posted only while some message of its
//! stream is sure to be delivered (not cancelled, or its send completed normally), so no
//! receive waits for a message that was withdrawn. At the end, the receives of each stream
//! must have got exactly the delivered messages, in order; the ledger checks each one's
//! contents and that no withdrawn message was delivered. A few receives are shorter than the
//! message they get (truncated, the message consumed).

use crate::ledger::OpRef;
use crate::memory::Layout;
use crate::rng::SimRng;
use crate::workload::{scaled, Workload, WorkloadParams};
use crate::world::World;
use nicmsg_proto::{Nanos, OpError, Rank, Source, Status, Tag, TagMatch};
use nicmsg_wire::{FRAME_HEADER_LEN, MSG_HEADER_LEN};
use std::collections::BTreeMap;

const TAGS: [Tag; 2] = [1, 2];
/// Sends each rank posts before it receives anything (at scale 1).
const SENDS_PER_RANK: usize = 150;
/// Most sends a rank posts at once: the core's send table holds 256 (`Config::max_sends`), and
/// a send it refuses is a violation.
const MAX_SENDS_PER_RANK: usize = 200;
/// Sends cancelled at some point.
const CANCEL_P: f64 = 0.12;
/// Sends of several frames (the rest fit one frame, whatever their class).
const MULTI_FRAME_P: f64 = 0.08;
/// Chance that a receive's completion sets off the cancel of a racing message (`CancelAt`).
const RACING_P: f64 = 0.25;
/// Receives shorter than most messages: the message they get is truncated.
const SHORT_RECV_P: f64 = 0.04;
const SHORT_CAPACITIES: &[u64] = &[0, 8, 300];

// Token kinds (high 32 bits); the low 32 bits are a rank, a message or a stream.
const POST_SENDS: u64 = 1;
const CANCEL: u64 = 2;
const START_RECEIVING: u64 = 3;
const RECV: u64 = 4;
const RACING_FALLBACK: u64 = 5;

fn token(kind: u64, index: usize) -> u64 {
    kind << 32 | index as u64
}

/// When a send is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelAt {
    /// Right after it is posted.
    Posted,
    /// At this time.
    Time(Nanos),
    /// Just after a receive of its receiver from its sender completed, if it is the oldest
    /// such message still pending: the buffer that receive freed most likely went to it, and
    /// the request to send it as eager is on its way (`RACING_P`). At `fallback` if no
    /// receive set it off: while it may yet be withdrawn, no receive waits for it, and the
    /// receives that would set it off may be waiting for it.
    Racing { fallback: Nanos },
}

/// What became of a send, as its completion says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Delivered,
    Withdrawn,
    /// Refused, or failed otherwise (a violation the ledger reports).
    Failed,
}

#[derive(Debug, Clone)]
struct Message {
    stream: usize,
    len: u64,
    /// When its sender posts it.
    post_at: Nanos,
    /// When its send is cancelled, if it is.
    cancel: Option<CancelAt>,
    /// A racing cancel was set off (`CancelAt::Racing`).
    raced: bool,
    op: Option<OpRef>,
    outcome: Outcome,
}

impl Message {
    /// Sure to be delivered: never cancelled, or its send completed normally.
    fn certain(&self) -> bool {
        match self.outcome {
            Outcome::Delivered => true,
            Outcome::Pending => self.cancel.is_none(),
            Outcome::Withdrawn | Outcome::Failed => false,
        }
    }
}

/// The messages of one sender to one receiver with one tag, and the receives taking them.
#[derive(Debug, Clone)]
struct Stream {
    src: Rank,
    dst: Rank,
    tag: Tag,
    /// Its messages, in send order (indices into `UnsafeSends::messages`).
    messages: Vec<usize>,
    /// What each completed receive got, in order: the message's length (also when truncated).
    received: Vec<u64>,
    /// The receive posted and not completed yet.
    recv: Option<OpRef>,
    /// The receiver has stopped thinking and receives.
    receiving: bool,
}

pub struct UnsafeSends {
    sends_per_rank: usize,
    messages: Vec<Message>,
    streams: Vec<Stream>,
    /// Per sender: its messages in posting order.
    by_sender: Vec<Vec<usize>>,
    /// Per sender: how many of its messages it posted.
    posted: Vec<usize>,
    sends: BTreeMap<OpRef, usize>,
    recvs: BTreeMap<OpRef, usize>,
    /// The longest message: the capacity of most receives.
    longest: u64,
}

impl UnsafeSends {
    pub fn new(params: &WorkloadParams, _rng: &mut SimRng) -> Self {
        Self {
            sends_per_rank: scaled(SENDS_PER_RANK, params.scale).min(MAX_SENDS_PER_RANK),
            messages: Vec::new(),
            streams: Vec::new(),
            by_sender: Vec::new(),
            posted: Vec::new(),
            sends: BTreeMap::new(),
            recvs: BTreeMap::new(),
            longest: 0,
        }
    }

    /// Message sizes: of one frame at the network's MTU, in every credit class and on its
    /// edges; of several frames, eager (medium and eager credits) and rendezvous.
    fn sizes(mtu: u32) -> (Vec<u64>, Vec<u64>) {
        let one_frame = u64::from(mtu) - (FRAME_HEADER_LEN + MSG_HEADER_LEN) as u64;
        let one = [0, 8, 256, 257, 1000, 6000, one_frame]
            .into_iter()
            .filter(|&len| len <= one_frame)
            .collect();
        // Medium messages of several frames are taken as eager too, and at small MTUs
        // fill several acknowledgement collections.
        let mut several: Vec<u64> = [one_frame + 1, 2000, 3000, 4096, 6000]
            .into_iter()
            .filter(|&len| len > one_frame)
            .collect();
        several.push(8193);
        (one, several)
    }

    /// The stream from `src` to `dst` with `tag`, made on first use.
    fn stream_of(&mut self, src: Rank, dst: Rank, tag: Tag) -> usize {
        let found = self
            .streams
            .iter()
            .position(|s| (s.src, s.dst, s.tag) == (src, dst, tag));
        found.unwrap_or_else(|| {
            self.streams.push(Stream {
                src,
                dst,
                tag,
                messages: Vec::new(),
                received: Vec::new(),
                recv: None,
                receiving: false,
            });
            self.streams.len() - 1
        })
    }

    /// When each rank posts its sends: a burst at once, then the others a few microseconds
    /// apart (posted in its loop while earlier ones wait for credits).
    fn post_times(&self, w: &mut World) -> Vec<Vec<Nanos>> {
        let count = self.sends_per_rank;
        (0..w.size())
            .map(|_| {
                let mut at = w.rng.range(0, 100_000);
                let burst = w.rng.range(16, count as u64) as usize;
                (0..count)
                    .map(|i| {
                        if i >= burst {
                            at += w.rng.range(0, 30_000);
                        }
                        at
                    })
                    .collect()
            })
            .collect()
    }

    /// Draws every rank's sends: each to one of the peers it sends to, on either tag, posted
    /// at `post_at` by its sender, received from `receiving_at` by its receiver.
    fn plan(&mut self, w: &mut World, post_at: &[Vec<Nanos>], receiving_at: &[Nanos]) {
        let (one_frame, several) = Self::sizes(w.mtu);
        let size = w.size();
        for src in 0..size {
            let others: Vec<Rank> = (0..size).filter(|&r| r != src).collect();
            // One peer, or several (some ranks send to all of theirs).
            let peers: Vec<Rank> = if w.rng.chance(0.3) {
                vec![w.rng.pick(&others)]
            } else {
                others
            };
            let mut mine = Vec::new();
            for &post_at in &post_at[src as usize] {
                let dst = w.rng.pick(&peers);
                let tag = w.rng.pick(&TAGS);
                let len = if w.rng.chance(MULTI_FRAME_P) {
                    w.rng.pick(&several)
                } else {
                    w.rng.pick(&one_frame)
                };
                let cancel = w.rng.chance(CANCEL_P).then(|| {
                    let receiving = receiving_at[dst as usize];
                    match w.rng.below(5) {
                        0 => CancelAt::Posted,
                        // While it is kept, or sent by rendezvous and not kept yet.
                        1 => CancelAt::Time(w.rng.range(post_at, receiving)),
                        // While the receives consume the buffers, which go to kept messages.
                        2 => CancelAt::Time(receiving + w.rng.range(0, 3_000_000)),
                        _ => CancelAt::Racing {
                            fallback: receiving + w.rng.range(3_000_000, 6_000_000),
                        },
                    }
                });
                let stream = self.stream_of(src, dst, tag);
                self.longest = self.longest.max(len);
                self.streams[stream].messages.push(self.messages.len());
                mine.push(self.messages.len());
                self.messages.push(Message {
                    stream,
                    len,
                    post_at,
                    cancel,
                    raced: false,
                    op: None,
                    outcome: Outcome::Pending,
                });
            }
            self.by_sender.push(mine);
        }
    }

    /// Posts the sends of `rank` whose time has come; wakes it for the next.
    fn post_sends(&mut self, w: &mut World, rank: Rank) {
        let mine = self.by_sender[rank as usize].clone();
        let posted = self.posted[rank as usize];
        let due = mine[posted..]
            .iter()
            .take_while(|&&m| self.messages[m].post_at <= w.now())
            .count();
        self.posted[rank as usize] += due;
        for &m in &mine[posted..posted + due] {
            self.post_send(w, rank, m);
        }
        if let Some(&m) = mine.get(posted + due) {
            w.wake_at(
                rank,
                self.messages[m].post_at,
                token(POST_SENDS, rank as usize),
            );
        }
    }

    fn post_send(&mut self, w: &mut World, rank: Rank, m: usize) {
        let stream = &self.streams[self.messages[m].stream];
        let (dst, tag, len) = (stream.dst, stream.tag, self.messages[m].len);
        let layout = Layout::draw(&mut w.rng, 0.1);
        let Ok(op) = w.send(rank, dst, tag, len, layout) else {
            self.messages[m].outcome = Outcome::Failed;
            return;
        };
        self.messages[m].op = Some(op);
        self.sends.insert(op, m);
        match self.messages[m].cancel {
            Some(CancelAt::Posted) => self.cancel(w, m),
            Some(CancelAt::Time(at)) => w.wake_at(rank, at, token(CANCEL, m)),
            Some(CancelAt::Racing { fallback }) => {
                w.wake_at(rank, fallback, token(RACING_FALLBACK, m))
            }
            None => {}
        }
    }

    fn cancel(&mut self, w: &mut World, m: usize) {
        let Some(op) = self.messages[m].op else {
            return;
        };
        // Completed already (from a copy, or delivered): nothing to withdraw.
        if w.op(op).is_pending() {
            // Whatever the answer, the completion says what became of the message.
            let _ = w.cancel(op);
        }
    }

    /// Messages of stream `s` sure to be delivered.
    fn certain(&self, s: usize) -> usize {
        let stream = &self.streams[s];
        stream
            .messages
            .iter()
            .filter(|&&m| self.messages[m].certain())
            .count()
    }

    /// Posts the next receive of stream `s` if its receiver receives, has none posted, and a
    /// message of the stream not received yet is sure to be delivered.
    fn post_recv(&mut self, w: &mut World, s: usize) {
        let stream = &self.streams[s];
        if !stream.receiving || stream.recv.is_some() || stream.received.len() >= self.certain(s) {
            return;
        }
        let capacity = if w.rng.chance(SHORT_RECV_P) {
            w.rng.pick(SHORT_CAPACITIES)
        } else {
            self.longest
        };
        let (src, dst, tag) = (stream.src, stream.dst, stream.tag);
        let layout = Layout::draw(&mut w.rng, 0.1);
        if let Ok(op) = w.recv(dst, Source::Rank(src), TagMatch::Tag(tag), capacity, layout) {
            self.streams[s].recv = Some(op);
            self.recvs.insert(op, s);
        }
    }

    /// Mostly a short pause between receives, sometimes a long one.
    fn pause(w: &mut World) -> Nanos {
        if w.rng.chance(0.03) {
            w.rng.range(300_000, 3_000_000)
        } else {
            w.rng.range(0, 20_000)
        }
    }

    fn on_send_done(&mut self, w: &mut World, m: usize, result: Result<Status, OpError>) {
        self.messages[m].outcome = match result {
            Ok(_) => Outcome::Delivered,
            Err(OpError::Cancelled) => Outcome::Withdrawn,
            Err(_) => Outcome::Failed,
        };
        // A cancelled message that turned out delivered may be what its receiver waits for.
        let s = self.messages[m].stream;
        if self.messages[m].cancel.is_some() && result.is_ok() {
            let pause = Self::pause(w);
            w.wake_after(self.streams[s].dst, pause, token(RECV, s));
        }
    }

    fn on_recv_done(
        &mut self,
        w: &mut World,
        s: usize,
        op: OpRef,
        result: Result<Status, OpError>,
    ) {
        let stream = &self.streams[s];
        let got = match result {
            Ok(status) => Some((status.peer, status.tag, status.len)),
            Err(OpError::Truncated {
                source_rank,
                tag,
                message_len,
                ..
            }) => Some((source_rank, tag, message_len)),
            Err(_) => None,
        };
        let lens = stream.messages.iter().map(|&m| self.messages[m].len);
        let fits = got.is_some_and(|(peer, tag, len)| {
            peer == stream.src && tag == stream.tag && lens.clone().any(|l| l == len)
        });
        if !fits {
            w.violation(
                "outcome",
                format!(
                    "receive {} of stream {} -> {} tag {} got {result:?}: {}",
                    stream.received.len(),
                    stream.src,
                    stream.dst,
                    stream.tag,
                    w.op(op).describe()
                ),
            );
        }
        let stream = &mut self.streams[s];
        stream.recv = None;
        if let Some((_, _, len)) = got {
            stream.received.push(len);
        }
        let pause = Self::pause(w);
        w.wake_after(stream.dst, pause, token(RECV, s));
        self.race_a_cancel(w, s);
    }

    /// A receive of stream `s` completed: its buffer most likely went to the oldest message
    /// its sender has kept there, which the sender may now cancel while the request to send
    /// it as eager comes.
    fn race_a_cancel(&mut self, w: &mut World, s: usize) {
        let (src, dst) = (self.streams[s].src, self.streams[s].dst);
        let racing = self.by_sender[src as usize].iter().copied().find(|&m| {
            let message = &self.messages[m];
            matches!(message.cancel, Some(CancelAt::Racing { .. }))
                && !message.raced
                && message.op.is_some()
                && message.outcome == Outcome::Pending
                && self.streams[message.stream].dst == dst
        });
        if let Some(m) = racing.filter(|_| w.rng.chance(RACING_P)) {
            self.messages[m].raced = true;
            let delay = w.rng.range(0, 2 * w.net.config().delay_ns);
            w.wake_after(src, delay, token(CANCEL, m));
        }
    }
}

impl Workload for UnsafeSends {
    fn start(&mut self, w: &mut World) {
        let ranks = w.size() as usize;
        let post_at = self.post_times(w);
        // After its last send; thinking longer than a credit wait lets messages go by
        // rendezvous and be kept.
        let receiving_at: Vec<Nanos> = (0..ranks)
            .map(|r| post_at[r][post_at[r].len() - 1] + w.rng.range(300_000, 5_000_000))
            .collect();
        self.plan(w, &post_at, &receiving_at);
        self.posted = vec![0; ranks];
        for rank in 0..ranks {
            w.wake_at(rank as Rank, post_at[rank][0], token(POST_SENDS, rank));
            let receiving = token(START_RECEIVING, rank);
            w.wake_at(rank as Rank, receiving_at[rank], receiving);
        }
    }

    fn on_wake(&mut self, w: &mut World, rank: Rank, tok: u64) {
        let index = (tok & 0xFFFF_FFFF) as usize;
        match tok >> 32 {
            POST_SENDS => self.post_sends(w, rank),
            CANCEL => self.cancel(w, index),
            RACING_FALLBACK if !self.messages[index].raced => {
                self.messages[index].raced = true;
                self.cancel(w, index);
            }
            START_RECEIVING => {
                for s in 0..self.streams.len() {
                    if self.streams[s].dst == rank {
                        self.streams[s].receiving = true;
                        self.post_recv(w, s);
                    }
                }
            }
            RECV => self.post_recv(w, index),
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
        if let Some(&m) = self.sends.get(&op) {
            self.on_send_done(w, m, result);
        } else if let Some(&s) = self.recvs.get(&op) {
            self.on_recv_done(w, s, op, result);
        }
    }

    fn finish(&mut self, w: &mut World) {
        for stream in &self.streams {
            let outcomes = stream.messages.iter().map(|&m| &self.messages[m]);
            let pending = outcomes
                .clone()
                .filter(|m| m.outcome == Outcome::Pending)
                .count();
            let delivered: Vec<u64> = outcomes
                .filter(|m| m.outcome == Outcome::Delivered)
                .map(|m| m.len)
                .collect();
            if pending > 0 || stream.received != delivered {
                w.violation(
                    "outcome",
                    format!(
                        "stream {} -> {} tag {}: {pending} sends pending; delivered {delivered:?}, received {:?}",
                        stream.src, stream.dst, stream.tag, stream.received
                    ),
                );
            }
        }
    }
}

//! When the engine runs a due protocol timer: at once when its turn left nothing waiting in
//! the socket, and after a few turns at most while datagrams wait that may acknowledge what it
//! would resend (`MAX_TIMEOUTS_PUT_OFF` in `driver.rs`). Two drivers over an in-memory
//! transport, one turn per iteration as an inline engine makes one per `test` call.

use nicmsg_engine::{
    Driver, Envelope, HostTable, OpCode, Origin, Peeked, Posted, Registry, Table, Transport,
};
use nicmsg_proto::{Config, Context, Endpoint, TagMatch};
use std::collections::VecDeque;
use std::sync::Arc;

/// Datagrams handed over in memory, `per_receive` a call; it can look ahead.
struct Memory {
    inbox: VecDeque<(u32, Vec<u8>)>,
    outbox: Vec<(u32, Vec<u8>)>,
    per_receive: usize,
}

impl Transport for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> std::io::Result<usize> {
        for &(dst, pieces) in frames {
            self.outbox.push((dst, pieces.concat()));
        }
        Ok(frames.len())
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Origin, &[u8])) -> std::io::Result<usize> {
        let count = self.inbox.len().min(self.per_receive);
        for (source, bytes) in self.inbox.drain(..count) {
            deliver(Origin::rank(Some(source)), &bytes);
        }
        Ok(count)
    }

    fn peek(&mut self, head: &mut [u8]) -> Peeked {
        match self.inbox.front() {
            Some((source, bytes)) => Peeked::held(Origin::rank(Some(*source)), bytes, head),
            None => Peeked::Nothing,
        }
    }

    fn readable_fds(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }

    fn max_frame(&self) -> usize {
        1472
    }
}

struct Rank {
    driver: Driver<Memory>,
    host: HostTable,
}

fn rank(rank: u32, per_receive: usize) -> Rank {
    let config = Config::default();
    let endpoint = Endpoint::new(config.clone(), 7, rank, 2).expect("endpoint");
    let slots = config.max_sends + config.max_recvs;
    let table = Arc::new(Table::new(slots, 2));
    let registry = Arc::new(Registry::new(slots * 4));
    let host = HostTable::new(Arc::clone(&table), Arc::clone(&registry));
    let transport = Memory {
        inbox: VecDeque::new(),
        outbox: Vec::new(),
        per_receive,
    };
    let driver = Driver::new(endpoint, transport, table, registry);
    Rank { driver, host }
}

/// Posts `op` of `buffer` on `rank` (the test keeps the buffer alive and never takes it back).
fn post(rank: &mut Rank, op: OpCode, peer: u32, envelope: Envelope, buffer: &mut [u8]) -> Posted {
    // SAFETY: every buffer outlives the drivers (declared before them) and is not touched
    // while posted.
    unsafe {
        rank.host
            .post(op, peer, envelope, &[(buffer.as_mut_ptr(), buffer.len())])
            .expect("room to post")
    }
}

/// What comes to rank 0 each iteration besides its own traffic.
#[derive(Clone, Copy, PartialEq)]
enum Arrivals {
    Nothing,
    /// One short message from rank 1 that completes a posted receive: received in full.
    OneMessage,
    /// More datagrams than a turn reads (`per_receive` 1, four receive batches a turn).
    Backlog,
}

/// Iterations until rank 0 resends its lost message, one turn each, 1 ms apart, the
/// retransmission timer due from the first.
fn iterations_until_resent(arrivals: Arrivals) -> u32 {
    let mut lost = vec![7u8; 1000];
    let mut receives: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; 100]).collect();
    let mut short = vec![1u8; 64];
    let per_receive = if arrivals == Arrivals::Backlog { 1 } else { 64 };
    let (mut a, mut b) = (rank(0, per_receive), rank(1, 64));
    let mut posted = vec![post(
        &mut a,
        OpCode::Send,
        1,
        Envelope::send(Context::USER, 1),
        &mut lost,
    )];
    for buffer in &mut receives {
        let envelope = Envelope::matching(Context::USER, TagMatch::Tag(2));
        posted.push(post(&mut a, OpCode::Recv, 1, envelope, buffer));
    }
    let mut now = 1_000_000u64;
    a.driver.turn(now);
    assert!(!a.driver.transport().outbox.is_empty(), "the message left");
    a.driver.transport_mut().outbox.clear();
    now = a.driver.next_deadline().expect("a retransmission timer") + 1_000;
    for iteration in 1..=64u32 {
        match arrivals {
            Arrivals::Nothing => {}
            Arrivals::OneMessage => {
                posted.push(post(
                    &mut b,
                    OpCode::Send,
                    0,
                    Envelope::send(Context::USER, 2),
                    &mut short,
                ));
                b.driver.turn(now);
                let frames: Vec<_> = b.driver.transport_mut().outbox.drain(..).collect();
                let to_a = frames.into_iter().filter(|(dst, _)| *dst == 0);
                a.driver
                    .transport_mut()
                    .inbox
                    .extend(to_a.map(|(_, bytes)| (1, bytes)));
            }
            Arrivals::Backlog => {
                let junk = (0..10).map(|_| (1, vec![0u8; 10]));
                a.driver.transport_mut().inbox.extend(junk);
            }
        }
        a.driver.turn(now);
        if arrivals != Arrivals::Backlog {
            assert!(
                a.driver.transport().inbox.is_empty(),
                "the turn received everything"
            );
        }
        let outbox = std::mem::take(&mut a.driver.transport_mut().outbox);
        if outbox.iter().any(|(_, bytes)| bytes.len() >= lost.len()) {
            return iteration;
        }
        now += 1_000_000;
    }
    u32::MAX
}

#[test]
fn a_due_timer_runs_at_the_first_turn_that_leaves_nothing_waiting() {
    assert_eq!(
        iterations_until_resent(Arrivals::Nothing),
        1,
        "nothing arrives"
    );
    assert_eq!(
        iterations_until_resent(Arrivals::OneMessage),
        1,
        "a message completing a receive each turn, nothing left waiting"
    );
}

#[test]
fn a_due_timer_waits_a_few_turns_while_datagrams_are_left_waiting() {
    let turns = iterations_until_resent(Arrivals::Backlog);
    assert!(
        (2..=17).contains(&turns),
        "put off while datagrams wait, 16 turns at most: resent at turn {turns}"
    );
}

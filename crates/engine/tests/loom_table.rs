//! Model checking of the descriptor table (issue 16, part 4): loom runs a host thread and an
//! engine thread over the real `Table` and `HostTable` in every interleaving (up to a
//! preemption bound) and with every value the memory model lets each relaxed, acquire and
//! release load return, and reports any unsynchronized access to a slot's descriptor as a data
//! race.
//!
//! The engine here is a stand-in for the driver: it takes commands from the ring, reads each
//! posted descriptor and completes it with a result derived from what it read, so the host can
//! check it got back exactly what the engine wrote about exactly what the host posted.
//!
//! Run (release: loom explores thousands of executions; a target directory of its own, since
//! the cfg changes every crate's build):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p nicmsg-engine --release
//! --test loom_table` (with `LOOM_MAX_PREEMPTIONS=100` it explores every interleaving, in
//! about half a minute).
//!
//! Not checked here: loom does not explore load buffering, so the release/acquire pair on the
//! ring's head (which keeps the host from overwriting a ring entry before the engine has read
//! it) is argued in `table.rs`, not checked; loom treats SeqCst as acquire/release, so the
//! handshake between a blocked host and the engine thread (`hosts_waiting` in `runner.rs`,
//! which needs SeqCst) is out of this model, which covers only the completions word itself.
#![cfg(loom)]

use loom::sync::atomic::Ordering;
use loom::thread;
use nicmsg_engine::table::CANCEL_BIT;
use nicmsg_engine::{Envelope, HostTable, OpCode, Outcome, Posted, Registry, ResultCode, Table};
use nicmsg_proto::Context;
use std::sync::Arc;

/// Each model explores the interleavings with at most this many preemptions (a bound of 2 or
/// 3 finds nearly all concurrency bugs in practice); `LOOM_MAX_PREEMPTIONS` overrides it.
const PREEMPTION_BOUND: usize = 3;

fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTION_BOUND);
    }
    builder.check(model);
}

/// A host over a fresh table of `slots` slots for `ranks` ranks, and `regions` memory regions.
fn host(slots: usize, ranks: u32, regions: usize) -> HostTable {
    HostTable::new(
        Arc::new(Table::new(slots, ranks)),
        Arc::new(Registry::new(regions)),
    )
}

/// What the engine read from a posted descriptor, and the registered address of its one
/// segment (as an integer: a pointer cannot leave the engine's thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    op: OpCode,
    peer: u32,
    context: Context,
    tag: u64,
    len: u64,
    address: Option<usize>,
}

/// One operation as the host posts it.
#[derive(Debug, Clone, Copy)]
struct Op {
    op: OpCode,
    peer: u32,
    tag: u64,
}

impl Op {
    const A: Op = Op {
        op: OpCode::Recv,
        peer: 1,
        tag: 5,
    };
    const B: Op = Op {
        op: OpCode::Send,
        peer: 0,
        tag: 6,
    };
    const C: Op = Op {
        op: OpCode::Probe,
        peer: 1,
        tag: 7,
    };
}

/// Posts `op` with `buffer` (one segment, or none if empty) through the real host path.
fn post(host: &mut HostTable, op: Op, buffer: &mut [u8]) -> Posted {
    let ranges = [(buffer.as_mut_ptr(), buffer.len())];
    let ranges = if buffer.is_empty() {
        &[][..]
    } else {
        &ranges[..]
    };
    // SAFETY: every buffer of these models outlives its operation (taken back before the
    // model returns), and nobody touches it meanwhile (the stand-in engine reads none).
    unsafe {
        host.post(
            op.op,
            op.peer,
            Envelope::send(Context::USER, op.tag),
            ranges,
        )
    }
    .expect("room")
}

/// The host waits (polling the slot's state, as the API does) and takes the result back.
fn take(host: &mut HostTable, mut posted: Posted) -> Outcome {
    loop {
        match host.take(posted) {
            Ok(outcome) => return outcome,
            Err(pending) => posted = pending,
        }
        thread::yield_now();
    }
}

/// The engine waits for the next command on the ring.
fn pop(table: &Table) -> u32 {
    loop {
        if let Some(command) = table.pop() {
            return command;
        }
        thread::yield_now();
    }
}

/// The engine reads a posted slot's descriptor (and the registry, as the driver does for the
/// buffer) and completes it with a result made of what it read.
fn serve(table: &Table, registry: &Registry, slot: u32) -> Seen {
    let seen = {
        // SAFETY: the slot came from the ring, so it is POSTED: the engine's. The borrow ends
        // before `complete` hands the slot back.
        let d = unsafe { table.descriptor(slot) };
        let segment = d.buffer.segments().first().copied();
        Seen {
            op: d.op,
            peer: d.peer,
            context: d.envelope.context,
            tag: d.envelope.tag,
            len: d.buffer.total_len(),
            address: segment
                .and_then(|s| registry.address(s.region, 0, s.len))
                .map(|p| p as usize),
        }
    };
    // SAFETY: as above; the engine's last access to the slot before the host's turn.
    unsafe {
        table.complete(slot, |d| {
            d.result = ResultCode::Truncated;
            d.status_peer = seen.peer + 10;
            d.status_tag = seen.tag + 10;
            d.status_len = seen.len + 10;
            d.buffer_len = seen.len;
        })
    };
    seen
}

/// What the host must see: the engine's result about exactly this operation.
fn assert_outcome(outcome: &Outcome, op: Op, len: u64) {
    assert_eq!(outcome.op, op.op);
    assert_eq!(outcome.peer, op.peer);
    assert_eq!(outcome.result, ResultCode::Truncated);
    assert_eq!(outcome.status_peer, op.peer + 10);
    assert_eq!(outcome.status_tag, op.tag + 10);
    assert_eq!(outcome.status_len, len + 10);
    assert_eq!(outcome.buffer_len, len);
}

/// What the engine must have seen: the host's descriptor, and its buffer registered.
fn assert_seen(seen: &Seen, op: Op, buffer: &[u8]) {
    assert_eq!((seen.op, seen.peer, seen.tag), (op.op, op.peer, op.tag));
    assert_eq!(seen.context, Context::USER);
    assert_eq!(seen.len, buffer.len() as u64);
    let expected = (!buffer.is_empty()).then_some(buffer.as_ptr() as usize);
    assert_eq!(
        seen.address, expected,
        "the engine sees the registered buffer"
    );
}

/// Spawns the stand-in engine: takes `commands` commands off the ring, serves the posts among
/// them, and returns every command it took and what it saw of each post.
fn engine(host: &HostTable, commands: usize) -> thread::JoinHandle<(Vec<u32>, Vec<Seen>)> {
    let table = Arc::clone(host.table());
    let registry = Arc::clone(host.registry());
    thread::spawn(move || {
        let (mut taken, mut seen) = (Vec::new(), Vec::new());
        while taken.len() < commands {
            let command = pop(&table);
            taken.push(command);
            if command & CANCEL_BIT == 0 {
                seen.push(serve(&table, &registry, command));
            }
        }
        (taken, seen)
    })
}

/// The ring holds nothing more: every command pushed was taken exactly once.
fn assert_ring_empty(host: &HostTable) {
    assert_eq!(
        host.table().pop(),
        None,
        "a command left over or duplicated"
    );
}

/// (a) One operation there and back: the engine sees exactly the descriptor the host wrote
/// (and its buffer registered), the host exactly the result the engine wrote.
#[test]
fn a_posted_descriptor_and_its_result_cross_intact() {
    check(|| {
        let mut host = host(1, 2, 1);
        let engine = engine(&host, 1);
        let mut buffer = [0u8; 8];
        let posted = post(&mut host, Op::A, &mut buffer);
        let outcome = take(&mut host, posted);
        assert_outcome(&outcome, Op::A, 8);
        let (commands, seen) = engine.join().unwrap();
        assert_eq!(commands, [0]);
        assert_seen(&seen[0], Op::A, &buffer);
        assert_ring_empty(&host);
    });
}

/// (b) Two posts and a cancel (asked twice: pushed once) while the engine takes commands: the
/// engine takes them in the order pushed, each once, and serves each post with its own
/// descriptor.
#[test]
fn ring_commands_arrive_in_order_exactly_once() {
    check(|| {
        let mut host = host(2, 2, 2);
        let engine = engine(&host, 3);
        let (mut a, mut b) = ([0u8; 8], [0u8; 0]);
        let posted_a = post(&mut host, Op::A, &mut a);
        let posted_b = post(&mut host, Op::B, &mut b);
        host.request_cancel(&posted_a);
        host.request_cancel(&posted_a);
        let expected = [posted_a.slot, posted_b.slot, posted_a.slot | CANCEL_BIT];
        assert_outcome(&take(&mut host, posted_a), Op::A, 8);
        assert_outcome(&take(&mut host, posted_b), Op::B, 0);
        let (commands, seen) = engine.join().unwrap();
        assert_eq!(commands, expected);
        assert_seen(&seen[0], Op::A, &a);
        assert_seen(&seen[1], Op::B, &b);
        assert_ring_empty(&host);
    });
}

/// (c) Slot reuse while the engine works: the host takes A back and posts C in A's slot (and
/// A's memory region) while the engine may still be serving B. The engine must see C, never
/// A's stale descriptor or address, and the host each result in its own operation.
#[test]
fn a_reused_slot_carries_the_new_operation() {
    check(|| {
        let mut host = host(2, 2, 2);
        let engine = engine(&host, 3);
        let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 4], [0u8; 2]);
        let posted_a = post(&mut host, Op::A, &mut a);
        let posted_b = post(&mut host, Op::B, &mut b);
        let slot_a = posted_a.slot;
        assert_outcome(&take(&mut host, posted_a), Op::A, 8);
        let posted_c = post(&mut host, Op::C, &mut c);
        assert_eq!(posted_c.slot, slot_a, "the most recently freed slot first");
        assert_outcome(&take(&mut host, posted_b), Op::B, 4);
        assert_outcome(&take(&mut host, posted_c), Op::C, 2);
        let (commands, seen) = engine.join().unwrap();
        assert_eq!(commands[1], 1 - slot_a);
        assert_eq!(commands[2], slot_a);
        assert_seen(&seen[0], Op::A, &a);
        assert_seen(&seen[1], Op::B, &b);
        assert_seen(&seen[2], Op::C, &c);
        assert_ring_empty(&host);
    });
}

/// (c') The ring wraps around: one slot (a ring of two commands) carries a post, a second post
/// in the reused slot and a cancel. The host never finds the ring full (each slot has room for
/// a post and a cancel) and the engine reads each command after its latest write.
#[test]
fn the_ring_wraps_around_without_losing_a_command() {
    check(|| {
        let mut host = host(1, 2, 1);
        let engine = engine(&host, 3);
        let (mut a, mut c) = ([0u8; 8], [0u8; 2]);
        let posted_a = post(&mut host, Op::A, &mut a);
        assert_outcome(&take(&mut host, posted_a), Op::A, 8);
        let posted_c = post(&mut host, Op::C, &mut c);
        host.request_cancel(&posted_c);
        assert_outcome(&take(&mut host, posted_c), Op::C, 2);
        let (commands, seen) = engine.join().unwrap();
        assert_eq!(commands, [0, 0, CANCEL_BIT]);
        assert_seen(&seen[0], Op::A, &a);
        assert_seen(&seen[1], Op::C, &c);
        assert_ring_empty(&host);
    });
}

/// (d) A rank the engine declares unreachable before completing an operation with that
/// verdict is unreachable for the host once it has taken the result (so its next send to the
/// rank is refused at post time), and no other rank is (bits of both words of a 70-rank job).
#[test]
fn an_unreachable_rank_is_visible_with_the_failure() {
    check(|| {
        let mut host = host(1, 70, 1);
        let table = Arc::clone(host.table());
        let engine = thread::spawn(move || {
            let slot = pop(&table);
            table.mark_unreachable(65);
            // SAFETY: the slot came from the ring: the engine's until this hands it back.
            unsafe {
                table.complete(slot, |d| {
                    d.result = ResultCode::PeerUnreachable;
                    d.status_peer = 65;
                })
            };
        });
        let early = host.is_unreachable(65);
        let posted = post(&mut host, Op::B, &mut []);
        let outcome = take(&mut host, posted);
        assert_eq!(outcome.result, ResultCode::PeerUnreachable);
        assert!(host.is_unreachable(65), "seen before: {early}");
        assert!(!host.is_unreachable(1) && !host.is_unreachable(64));
        engine.join().unwrap();
    });
}

/// (e) The completions word (the futex a blocked host sleeps on): a host that read it, found
/// its slot not done and then saw the word move (what wakes it) finds the slot DONE: the
/// engine bumps the word after publishing the slot, so the wake is never early, nor lost.
#[test]
fn a_host_woken_by_the_completions_word_finds_its_slot_done() {
    check(|| {
        let mut host = host(1, 2, 1);
        let engine = engine(&host, 1);
        let posted = post(&mut host, Op::B, &mut []);
        let seen = host.table().completion_count();
        if !host.is_done(&posted) {
            // The futex wait: returns once the word differs from what the host saw.
            while host.table().completion_count() == seen {
                thread::yield_now();
            }
            assert!(
                host.is_done(&posted),
                "woken before the slot was handed back"
            );
        }
        assert_outcome(&take(&mut host, posted), Op::B, 0);
        engine.join().unwrap();
    });
}

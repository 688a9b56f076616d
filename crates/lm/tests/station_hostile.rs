//! Hostile and malformed frames against LM stations: a third node on the link, a buggy
//! sender, forged or replayed admission messages, a sender that vanishes. Stations run with a
//! simulated device that applies the steering rule and writes each frame where its slot
//! points (no ordinary chunks: like the AF_XDP socket, every frame not steered to a slot goes
//! the ordinary way). Checked: nothing panics, an admitted transfer is delivered exactly once
//! byte for byte, a send completes only once its receiver delivered it, regions come back, and
//! the receiver admits again afterwards.

mod support;

use nicmsg_lm::admission::LEASE_NS;
use nicmsg_lm::fill::{Arrival, Slot};
use nicmsg_lm::station::{SendId, SILENCE_LIMIT_NS};
use nicmsg_lm::TransferKey;
use nicmsg_wire::admission::{AdmissionOp, AdmissionRepr};
use nicmsg_wire::{emit_headers, seal, FrameHeader, FrameKind, FrameView, FRAME_HEADER_LEN};
use support::*;

/// An LM-DATA frame of an admitted transfer (with a key), as the steering rule sees it.
fn is_placed_data(bytes: &[u8]) -> bool {
    matches!(Arrival::of_frame(bytes, LINK), Arrival::Transfer { .. })
}

/// An LM-DATA frame, link bytes first, sealed with a valid checksum.
#[derive(Clone)]
struct Data {
    src: u32,
    dst: u32,
    number: u32,
    key: u32,
    index: u32,
    len: u64,
    payload: Vec<u8>,
}

impl Data {
    fn bytes(&self) -> Vec<u8> {
        let h = FrameHeader {
            kind: FrameKind::LmData,
            flags: 0,
            job: JOB,
            src: self.src,
            dst: self.dst,
            msg_id: self.number,
            frame_index: self.index,
            offset: self.len,
            payload_len: self.payload.len() as u32,
            aux: self.key,
            acked_id: 0,
        };
        let mut frame = vec![0u8; FRAME_HEADER_LEN];
        emit_headers(&h, None, &mut frame).unwrap();
        seal(&mut frame, &[&self.payload]);
        let mut out = vec![0x42; LINK];
        out.extend_from_slice(&frame);
        out.extend_from_slice(&self.payload);
        out
    }
}

/// An ADMISSION frame, link bytes first.
fn control(src: u32, dst: u32, op: AdmissionOp, number: u32, len: u64, key: u32) -> Vec<u8> {
    let repr = AdmissionRepr {
        op,
        number,
        len,
        key,
    };
    let h = repr.to_header(JOB, src, dst).unwrap();
    let mut frame = vec![0u8; FRAME_HEADER_LEN];
    emit_headers(&h, None, &mut frame).unwrap();
    seal(&mut frame, &[]);
    let mut out = vec![0x42; LINK];
    out.extend_from_slice(&frame);
    out
}

/// The key of the transfer `receiver` places now.
fn placing_key(net: &Net, receiver: u32) -> Option<(u32, TransferKey)> {
    net.nodes[receiver as usize].admission().placing()
}

const A: u32 = 0;
const R: u32 = 1;
const C: u32 = 2;
const FRAMES: usize = 20;
const LEN: usize = FRAMES * PAYLOAD - 17;

/// After the hostile run: the admitted transfer came whole, its send completed, and the
/// receiver admits and places a new transfer.
fn assert_healthy_after(net: &mut Net, id: SendId) {
    net.settle();
    assert_eq!(net.sent_ok(id, A), Some(true), "the send completed");
    let got = net.check_received(R);
    assert!(got.contains(&(A, id.number)), "the transfer was delivered");
    assert_eq!(placing_key(net, R), None, "the receiver is free again");
    let placed_before = net.nodes[R as usize].stats().placed_transfers;
    let next = net.send(A, R, LEN);
    net.settle();
    assert_eq!(net.sent_ok(next, A), Some(true));
    assert!(net.check_received(R).contains(&(A, next.number)));
    assert_eq!(
        net.nodes[R as usize].stats().placed_transfers,
        placed_before + 1,
        "the next transfer is placed again"
    );
    assert_eq!(
        net.nodes[R as usize].regions().used(),
        0,
        "every region came back"
    );
    assert_eq!(net.nodes[R as usize].active_placements(), 0);
}

#[test]
fn a_clean_transfer_is_placed_whole() {
    let mut net = Net::new(3);
    let id = net.send(A, R, LEN);
    net.settle();
    assert_eq!(net.sent_ok(id, A), Some(true));
    assert_eq!(net.check_received(R), vec![(A, id.number)]);
    let stats = *net.nodes[R as usize].stats();
    assert_eq!(stats.placed_transfers, 1);
    assert_eq!(stats.copied_bytes_placed, 0);
    assert_healthy_after(&mut net, id);
}

/// A third node aims LM-DATA frames at the head slot of an admitted transfer: right key,
/// index and length (so they take the slot), and every field wrong in turn.
#[test]
fn a_third_node_aiming_at_the_head_slot_corrupts_nothing() {
    let mut net = Net::new(3);
    let id = net.send(A, R, LEN);
    // The request and its accept, nothing else yet.
    let mut volleys = 0;
    let until = net.now + 20 * LEASE_NS;
    let mut held: Vec<Wire> = Vec::new();
    loop {
        // Before each A->R data frame, aim a volley at R's head slot.
        let Some(wire) = net.wire.pop_front() else {
            if held.is_empty() {
                break;
            }
            net.wire.extend(held.drain(..));
            continue;
        };
        if wire.0 == A && wire.1 == R && is_placed_data(&wire.2) {
            if let Some(Slot::Placement {
                transfer,
                index,
                len,
            }) = net.nodes[R as usize].fill_queue_mut().head().copied()
            {
                volleys += 1;
                let payload_len = len as usize - HEADER;
                let base = Data {
                    src: C,
                    dst: R,
                    number: id.number,
                    key: transfer.0,
                    index,
                    len: LEN as u64,
                    payload: vec![0xbd; payload_len],
                };
                // From C as itself, and claiming to be A.
                for src in [C, A] {
                    let frame = Data {
                        src,
                        ..base.clone()
                    }
                    .bytes();
                    net.deliver(C, R, &frame);
                }
                // A buggy A: the right slot, a wrong transfer length, or a wrong number once
                // the receiver knows the transfer's (from its first frame: before it, a frame
                // from A's address with A's key is A's, whatever its number).
                let mut wrong = vec![(id.number, LEN as u64 + 1)];
                if volleys > 1 {
                    wrong.push((id.number + 1, LEN as u64));
                }
                for (number, len) in wrong {
                    let frame = Data {
                        src: A,
                        number,
                        len,
                        ..base.clone()
                    }
                    .bytes();
                    net.deliver(A, R, &frame);
                }
                // A frame beyond the transfer, a wrong key, a short one, a damaged one.
                let mut beyond = base.clone();
                beyond.src = A;
                beyond.index = FRAMES as u32 + 3;
                net.deliver(A, R, &beyond.bytes());
                let mut other = base.clone();
                other.src = C;
                other.number = 1000;
                other.key = transfer.0 + 1;
                net.deliver(C, R, &other.bytes());
                let mut short = base.clone();
                short.src = A;
                let bytes = short.bytes();
                net.deliver(A, R, &bytes[..HEADER - 5]);
                let mut damaged = bytes.clone();
                *damaged.last_mut().unwrap() ^= 1;
                net.deliver(A, R, &damaged);
            }
        }
        net.deliver(wire.0, wire.1, &wire.2);
        if net.now > until {
            break;
        }
        if net.wire.is_empty() {
            net.run(net.now + 1_000_000, &mut |_| true);
        }
    }
    assert!(volleys > 0, "the volleys were aimed");
    assert_healthy_after(&mut net, id);
    let stats = *net.nodes[R as usize].stats();
    assert!(stats.damaged_landings > 0, "some took the slot: {stats:?}");
}

/// A long transfer still under way while many short ones to the same receiver finish: the
/// receiver's window of remembered numbers slides past the long one's number, and its late
/// frames must not be taken for a delivered transfer's (which would complete the send with
/// nothing delivered).
#[test]
fn a_slow_transfer_overtaken_by_many_short_ones_is_not_lost() {
    let mut net = Net::new(3);
    // C's transfer keeps R busy placing, so A's long one goes by copy.
    let _c = net.send(C, R, LEN);
    let mut held = Vec::new();
    let now = net.now;
    net.run(now, &mut |w| {
        if is_data_of(w, C, R, 1) {
            held.push(w.clone());
            return false;
        }
        true
    });
    assert!(placing_key(&net, R).is_some(), "R places C's transfer");
    let long = net.send(A, R, LEN);
    net.run(now, &mut |w| {
        if is_data_of(w, A, R, long.number) || is_data_of(w, C, R, 1) {
            held.push(w.clone());
            return false;
        }
        true
    });
    assert_eq!(net.nodes[R as usize].stats().one_copy_transfers, 0);
    // Many short transfers from A to R finish meanwhile (one frame each: by copy at once).
    let mut refused = 0;
    for _ in 0..70 {
        let Some(short) = net.try_send(A, R, 100) else {
            refused += 1;
            continue;
        };
        net.run(now, &mut |w| {
            !is_data_of(w, A, R, long.number) && !is_data_of(w, C, R, 1)
        });
        assert_eq!(net.sent_ok(short, A), Some(true));
    }
    eprintln!("short sends refused while the long one is unfinished: {refused}");
    // The long transfer's frames arrive at last, and it goes on.
    net.wire.extend(held.drain(..));
    net.settle();
    let delivered = net.check_received(R).contains(&(A, long.number));
    let outcome = net.sent_ok(long, A);
    assert!(
        delivered || outcome == Some(false),
        "the long send completed {outcome:?} but R never delivered it: silently lost"
    );
}

/// Admission and flow messages forged by a third node, before and during an admitted
/// transfer: none may end, steal or wedge it.
#[test]
fn forged_admission_messages_from_a_third_node_change_nothing() {
    use AdmissionOp::*;
    let mut net = Net::new(3);
    let id = net.send(A, R, LEN);
    let mut volleys = 0;
    loop {
        let Some(wire) = net.wire.pop_front() else {
            let until = net.now + 1_000_000;
            net.run(until, &mut |_| true);
            if net.wire.is_empty() && net.sent_ok(id, A).is_some() {
                break;
            }
            continue;
        };
        if wire.0 == A && wire.1 == R && volleys < 50 {
            volleys += 1;
            let key = placing_key(&net, R).map_or(1, |(_, key)| key.0);
            for t in 0..4 {
                // To the receiver, as if C were the sender or the receiver.
                for op in [End, Accept, Reject, EndAck, Busy, Free, BusyAck, FreeAck] {
                    let key = if op == Accept { key } else { 0 };
                    net.deliver(C, R, &control(C, R, op, t, 0, key));
                }
                if placing_key(&net, R).is_some() {
                    // (Asking first, C would be admitted fairly.)
                    net.deliver(C, R, &control(C, R, Request, t + 100, LEN as u64, 0));
                }
                for op in [Grant, Resend] {
                    let range = u64::from(FRAMES as u32) << 32;
                    net.deliver(C, R, &control(C, R, op, id.number, range, key));
                }
                net.deliver(C, R, &control(C, R, Delivered, id.number, 0, 0));
                // To the sender: C is not its receiver.
                net.deliver(C, A, &control(C, A, Delivered, id.number, 0, 0));
                net.deliver(C, A, &control(C, A, Reject, t, 0, 0));
                net.deliver(C, A, &control(C, A, Accept, t, 0, key + 1));
                net.deliver(C, A, &control(C, A, Resend, id.number, u64::MAX, key));
                // Claiming to be A or R, from C's address: malformed.
                net.deliver(C, R, &control(A, R, End, t, 0, 0));
                net.deliver(C, A, &control(R, A, Delivered, id.number, 0, 0));
            }
        }
        net.deliver(wire.0, wire.1, &wire.2);
    }
    assert_eq!(net.sent_ok(id, A), Some(true));
    assert!(net.check_received(R).contains(&(A, id.number)));
    assert_eq!(net.nodes[R as usize].stats().placed_transfers, 1, "placed");
    assert_healthy_after(&mut net, id);
}

/// Every frame of a finished transfer, replayed while the next one is placed (in order and
/// reversed): no second delivery, no corruption, and the next transfer is placed.
#[test]
fn a_finished_transfer_replayed_whole_is_not_delivered_again() {
    let mut net = Net::new(3);
    let mut recorded = Vec::new();
    let first = net.send(A, R, LEN);
    let until = net.now + 10 * LEASE_NS;
    net.run(until, &mut |w| {
        recorded.push(w.clone());
        true
    });
    assert_eq!(net.sent_ok(first, A), Some(true));
    let second = net.send(A, R, LEN);
    let mut replayed = false;
    loop {
        let Some(wire) = net.wire.pop_front() else {
            let until = net.now + 1_000_000;
            net.run(until, &mut |_| true);
            if net.wire.is_empty() && net.sent_ok(second, A).is_some() {
                break;
            }
            continue;
        };
        if !replayed && wire.0 == A && is_placed_data(&wire.2) {
            replayed = true;
            for old in recorded.iter().chain(recorded.iter().rev()) {
                net.deliver(old.0, old.1, &old.2);
            }
        }
        net.deliver(wire.0, wire.1, &wire.2);
    }
    assert!(replayed);
    let got = net.check_received(R);
    assert!(got.contains(&(A, first.number)) && got.contains(&(A, second.number)));
    assert_eq!(got.len(), 2, "nothing delivered twice: {got:?}");
    assert_eq!(net.nodes[R as usize].stats().placed_transfers, 2);
    assert_healthy_after(&mut net, second);
}

/// The admitted sender vanishes mid-transfer: its send fails (it is told), the receiver gives
/// the placement up after its lease, drains its slots, and places the next sender's transfer.
#[test]
fn a_sender_vanishing_mid_transfer_frees_its_receiver() {
    let mut net = Net::new(3);
    let id = net.send(A, R, LEN);
    let mut data = 0;
    let until = net.now + 3 * LEASE_NS;
    net.run(until, &mut |w| {
        if w.0 == A && is_placed_data(&w.2) {
            data += 1;
        }
        // A's link goes down after 5 data frames, in both directions.
        !(data > 5 && (w.0 == A || w.1 == A))
    });
    assert_eq!(net.sent_ok(id, A), Some(false), "the sender is told");
    assert_eq!(placing_key(&net, R), None, "the lease expired");
    assert_eq!(net.nodes[R as usize].active_placements(), 0);
    let placed_before = net.nodes[R as usize].stats().placed_transfers;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(net.send(C, R, LEN));
        let until = net.now + 10 * LEASE_NS;
        net.run(until, &mut |w| w.0 != A && w.1 != A);
    }
    for next in &ids {
        assert_eq!(net.sent_ok(*next, C), Some(true));
        assert!(net.check_received(R).contains(&(C, next.number)));
    }
    assert!(
        net.nodes[R as usize].stats().placed_transfers > placed_before,
        "the receiver places again"
    );
    assert_eq!(net.nodes[R as usize].regions().used(), 0, "regions back");
    assert!(
        net.nodes[R as usize].fill_slots().next().is_none(),
        "no slot left: {:?}",
        net.nodes[R as usize].fill_slots().collect::<Vec<_>>()
    );
}

/// Whether a frame on the wire is an ADMISSION frame saying `op`.
fn is_control(wire: &Wire, op: AdmissionOp) -> bool {
    let view = FrameView::new_checked(&wire.2[LINK..]).unwrap();
    view.kind_code() == FrameKind::Admission as u8 && view.aux() == op as u32
}

/// An ACCEPT with key 0 (the key of frames not admitted) answering a sender's request, from
/// a buggy receiver or a forger on its address: the sender must not keep the transfer
/// admitted in its admission table for ever; after a table's worth of them it still asks,
/// and is placed.
#[test]
fn accepts_with_key_zero_do_not_wedge_the_senders_admission() {
    let mut net = Net::new(3);
    let outgoing = nicmsg_lm::admission::MAX_OUTGOING;
    for _ in 0..outgoing + 2 {
        let id = net.send(A, R, LEN);
        let mut forged = Vec::new();
        let now = net.now;
        net.run(now, &mut |w| {
            if w.0 == A && w.1 == R && is_control(w, AdmissionOp::Request) {
                let view = FrameView::new_checked(&w.2[LINK..]).unwrap();
                forged.push(control(R, A, AdmissionOp::Accept, view.msg_id(), 0, 0));
                return false;
            }
            true
        });
        for frame in forged.drain(..) {
            net.deliver(R, A, &frame);
        }
        net.settle();
        assert_eq!(net.sent_ok(id, A), Some(true), "sent by copy");
    }
    let placed = net.nodes[R as usize].stats().placed_transfers;
    let id = net.send(A, R, LEN);
    net.settle();
    assert_eq!(net.sent_ok(id, A), Some(true));
    assert_eq!(net.check_received(R).len(), outgoing + 3);
    assert_eq!(
        net.nodes[R as usize].stats().placed_transfers,
        placed + 1,
        "the sender still asks, and its transfer is placed (requests sent: {})",
        net.nodes[A as usize].admission().stats().requests_sent
    );
}

/// A receiver silent for a second (started late, or descheduled on a loaded machine) is
/// waited for; one silent for `SILENCE_LIMIT_NS` is taken for gone, and not much later.
#[test]
fn a_silent_receiver_is_waited_for_until_the_silence_limit() {
    let mut net = Net::new(3);
    let start = net.now;
    let id = net.send(A, R, LEN);
    net.run(start + 1_000_000_000, &mut |w| w.1 != R && w.0 != R);
    assert_eq!(net.sent_ok(id, A), None, "still waiting after a second");
    assert_healthy_after(&mut net, id);

    let start = net.now;
    let id = net.send(A, C, LEN);
    net.run(start + SILENCE_LIMIT_NS - 1_000_000, &mut |w| w.1 != C);
    assert_eq!(net.sent_ok(id, A), None, "not given up before the limit");
    // Admission asks for about a quarter of a second before the send goes by copy.
    net.run(start + SILENCE_LIMIT_NS + 500_000_000, &mut |w| w.1 != C);
    assert_eq!(net.sent_ok(id, A), Some(false), "given up at the limit");
    assert!(
        net.dropped.len() < 500,
        "a bounded number of probes: {}",
        net.dropped.len()
    );
}

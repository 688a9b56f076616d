//! Transfer numbers across the wrap: a long-running sender passes 2^32 transfers to one
//! receiver, and its numbers go on from `u32::MAX` to 0. Stations here start numbering a few
//! below `u32::MAX` (`StationConfig::first_number`) to get there in a few transfers. Checked:
//! every transfer is delivered exactly once byte for byte, every send completes only once its
//! receiver delivered it, and a new transfer is never taken for an old one. The network is
//! `support`'s, as in `station_hostile.rs`.

mod support;

use nicmsg_lm::admission::LEASE_NS;
use nicmsg_lm::station::{SendId, MAX_IN_FLIGHT_PER_PEER};
use support::*;

const A: u32 = 0;
const R: u32 = 1;
const C: u32 = 2;
/// A transfer of several frames, placed when its receiver admits it.
const LEN: usize = 20 * PAYLOAD - 17;
/// A transfer of one frame, always by copy.
const SHORT: usize = 100;

/// Whether the numbers of `sent` to `to` crossed the wrap: some before it, and 0.
fn crossed_the_wrap(sent: &[(u32, SendId)], to: u32) -> bool {
    let numbers: Vec<u32> = sent
        .iter()
        .filter(|(_, id)| id.to == to)
        .map(|(_, id)| id.number)
        .collect();
    numbers.contains(&u32::MAX) && numbers.contains(&0)
}

/// Loses about one frame in `one_in`, of every kind, by a fixed pseudo-random sequence.
fn lossy(one_in: u64) -> impl FnMut(&Wire) -> bool {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    move |_| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        !(x >> 33).is_multiple_of(one_in)
    }
}

/// Two senders to one receiver, and the receiver back to one of them, numbered from just
/// below the wrap: placed transfers of several frames and one-frame ones by copy, several in
/// flight at once, under loss.
#[test]
fn many_transfers_across_the_wrap_are_delivered_exactly_once_under_loss() {
    let mut net = Net::numbering_from(3, u32::MAX - 5);
    let sizes = [LEN, SHORT, 3 * PAYLOAD + 5, 1, PAYLOAD, 7 * PAYLOAD, SHORT];
    let mut lose = lossy(8);
    let mut sent = Vec::new();
    for round in 0..40 {
        for (from, to) in [(A, R), (C, R), (R, A)] {
            for k in 0..3 {
                let len = sizes[(round * 3 + k + from as usize) % sizes.len()];
                if let Some(id) = net.try_send(from, to, len) {
                    sent.push((from, id));
                }
            }
        }
        let until = net.now + 3_000_000;
        net.run(until, &mut lose);
    }
    let until = net.now + 2 * LEASE_NS;
    net.run(until, &mut lose);
    net.settle();
    assert!(sent.len() > 300, "sends taken: {}", sent.len());
    assert!(crossed_the_wrap(&sent, R) && crossed_the_wrap(&sent, A));
    net.assert_each_delivered_once(&sent);
    let stats = *net.nodes[R as usize].stats();
    assert!(
        stats.placed_transfers > 10 && stats.one_copy_transfers > 10,
        "both paths taken: {stats:?}"
    );
    assert!(stats.resends_asked > 0, "frames were lost: {stats:?}");
}

/// Frames of the transfers in `holding` (from, number), all to `R`, kept off the wire.
struct Hold {
    holding: Vec<(u32, u32)>,
    held: Vec<Wire>,
}

impl Hold {
    /// Moves frames until the wire is empty, holding those of the held transfers; time
    /// stands still, so nobody retries.
    fn run(&mut self, net: &mut Net) {
        let now = net.now;
        let (holding, held) = (&self.holding, &mut self.held);
        net.run(now, &mut |w| {
            if holding.iter().any(|&(from, n)| is_data_of(w, from, R, n)) {
                held.push(w.clone());
                return false;
            }
            true
        });
    }

    /// Lets the held transfer `which` go on: its frames are put back on the wire.
    fn release(&mut self, net: &mut Net, which: (u32, u32)) {
        self.holding.retain(|&h| h != which);
        let (go, keep) = self
            .held
            .drain(..)
            .partition(|w| is_data_of(w, which.0, R, which.1));
        self.held = keep;
        net.wire.extend(go);
    }
}

/// A long transfer numbered just before the wrap stays unfinished while short transfers to
/// the same receiver, numbered past it, finish, and other long ones after the wrap are
/// held a while too. The sender must measure the span of its unfinished numbers from the
/// oldest, the one before the wrap, not the smallest: measured from the smallest, it numbered
/// transfers more than the receiver's window past the old one, the receiver took the old one
/// for delivered, and its send completed with nothing delivered.
#[test]
fn a_slow_transfer_overtaken_by_many_short_ones_across_the_wrap_is_not_lost() {
    let mut net = Net::numbering_from(3, u32::MAX - 2);
    // C's transfer keeps R busy placing, so A's long ones go by copy.
    let c = net.try_send(C, R, LEN).expect("the first send");
    let mut hold = Hold {
        holding: vec![(C, c.number)],
        held: Vec::new(),
    };
    hold.run(&mut net);
    assert!(
        net.nodes[R as usize].admission().placing().is_some(),
        "R places C's transfer"
    );
    let mut sent = vec![(C, c)];
    let mut first_long = None;
    let mut refused = 0;
    for i in 0..200 {
        let long = i % 10 == 0;
        let len = if long { LEN } else { SHORT };
        let Some(id) = net.try_send(A, R, len) else {
            // Another long one may finish (the oldest after the first): the oldest
            // unfinished, before the wrap, stays.
            refused += 1;
            let first = first_long.expect("a long one is unfinished");
            let next = hold
                .holding
                .iter()
                .copied()
                .find(|&(from, n)| from == A && n != first);
            if let Some(next) = next {
                hold.release(&mut net, next);
            }
            hold.run(&mut net);
            continue;
        };
        sent.push((A, id));
        if long {
            first_long.get_or_insert(id.number);
            hold.holding.push((A, id.number));
        }
        hold.run(&mut net);
        if !long {
            let done = net.sent[A as usize].iter().any(|&(d, ok)| d == id && ok);
            assert!(done, "a short send completes at once");
        }
    }
    let first = first_long.unwrap();
    assert!(
        first > u32::MAX - 3,
        "the first long one is before the wrap"
    );
    assert!(crossed_the_wrap(&sent, R));
    assert!(refused > 0, "the span limit held the sender back");
    let newest = sent.iter().map(|(_, id)| id.number).filter(|&n| n < first);
    let span = newest.max().unwrap().wrapping_sub(first);
    assert!(
        span < MAX_IN_FLIGHT_PER_PEER,
        "numbered {span} past an unfinished transfer"
    );
    // The held frames arrive at last, and everything goes on.
    for which in hold.holding.clone() {
        hold.release(&mut net, which);
    }
    net.settle();
    net.assert_each_delivered_once(&sent);
}

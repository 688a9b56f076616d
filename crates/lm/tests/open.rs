//! Open stations: peers added by address, conversations that start, end and restart, over
//! an in-memory network with the same simulated device as the station tests (the steering
//! rule, placement slots written where they point).

mod support;

use std::collections::VecDeque;
use std::net::SocketAddr;

use nicmsg_lm::fill::{Arrival, Steer};
use nicmsg_lm::open::{OpenEvent, OpenSendError, OpenSendId, OpenStation, QUIET_NS};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{
    HeapRegions, Landing, Received, Regions as _, SendFailed, StationConfig, SILENCE_LIMIT_NS,
};
use support::{byte, geometry, land_on_device, run_timers, JOB, LINK, PAYLOAD};

/// Each node's address: 10.0.0.N:7000.
fn address(node: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, node as u8 + 1], 7000))
}

/// A frame on the wire: (from, to, link bytes + frame).
type Wire = (SocketAddr, SocketAddr, Vec<u8>);

/// A send that finished: its id, destination and outcome.
type Finished = (OpenSendId, SocketAddr, Result<(), SendFailed>);

/// What the network does to a frame.
enum Fate {
    Deliver,
    Lose,
    Twice,
    Late,
}

struct OpenNet {
    nodes: Vec<OpenStation<HeapRegions>>,
    /// Each node's life: a restart makes a new station at the same address.
    lives: Vec<u32>,
    now: u64,
    wire: VecDeque<Wire>,
    /// Per node: transfers received (from, bytes).
    received: Vec<Vec<(SocketAddr, Vec<u8>)>>,
    /// Per node: sends finished (id, to, outcome).
    sent: Vec<Vec<Finished>>,
}

fn station(node: usize, capacity: u32, life: u32) -> OpenStation<HeapRegions> {
    let mut config = StationConfig::new(0, 2, JOB, geometry());
    config.window = 16;
    config.fill_slots = 256;
    // Random-looking, as a process's would be: names are the incarnation XOR the slot number
    // and binding count, so incarnations that differ only in their low bits name different
    // lives' conversations alike.
    let mixed = (node as u64) << 32 | u64::from(life);
    let incarnation = (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32 | 1;
    OpenStation::new(
        config,
        (address(node), capacity, incarnation),
        HeapRegions::new(64 << 20),
    )
}

impl OpenNet {
    /// `nodes` open stations of `capacity` peers each.
    fn new(nodes: usize, capacity: u32) -> Self {
        Self {
            nodes: (0..nodes).map(|n| station(n, capacity, 1)).collect(),
            lives: vec![1; nodes],
            now: 1_000,
            wire: VecDeque::new(),
            received: vec![Vec::new(); nodes],
            sent: vec![Vec::new(); nodes],
        }
    }

    /// Node `node` restarts: a new life at the same address, knowing no one. Its log of
    /// finished sends starts over with it (send ids are a life's own).
    fn restart(&mut self, node: usize, capacity: u32) {
        self.lives[node] += 1;
        self.nodes[node] = station(node, capacity, self.lives[node]);
        self.sent[node].clear();
    }

    /// Transfer `tag` of `len` bytes from `from` to `to`, filled by position and tag.
    fn send(&mut self, from: usize, to: usize, len: usize, tag: u32) -> OpenSendId {
        self.try_send(from, to, len, tag).expect("send taken")
    }

    fn try_send(
        &mut self,
        from: usize,
        to: usize,
        len: usize,
        tag: u32,
    ) -> Result<OpenSendId, OpenSendError> {
        let mut buffer = HoleBuffer::new(geometry(), len as u64).unwrap();
        for (index, piece) in buffer.pieces_mut().enumerate() {
            let start = geometry().payload_range(len, index as u32).start;
            for (i, b) in piece.iter_mut().enumerate() {
                *b = byte(from as u32, to as u32, tag, start + i);
            }
        }
        let now = self.now;
        let sent = self.nodes[from].send(now, address(to), buffer);
        self.collect();
        sent.map_err(|(error, _)| error)
    }

    fn collect(&mut self) {
        for me in 0..self.nodes.len() {
            let node = &mut self.nodes[me];
            while node.station_mut().poll_fill().is_some() {}
            while let Some((to, frame)) = node.poll_transmit() {
                self.wire.push_back((address(me), to, frame.to_vec()));
            }
            while let Some(event) = node.poll_event() {
                match event {
                    OpenEvent::Received { from, message, .. } => {
                        let bytes = match message {
                            Received::Copied(bytes) => bytes,
                            Received::Placed { region, range } => {
                                let station = node.station_mut();
                                let bytes = station.regions().bytes(region)[range].to_vec();
                                station.release(region);
                                bytes
                            }
                        };
                        self.received[me].push((from, bytes));
                    }
                    OpenEvent::Sent {
                        id, to, outcome, ..
                    } => self.sent[me].push((id, to, outcome)),
                }
            }
        }
    }

    /// Takes node 0's finished sends, leaving its frames queued.
    fn collect_events_only(&mut self) {
        while let Some(event) = self.nodes[0].poll_event() {
            if let OpenEvent::Sent {
                id, to, outcome, ..
            } = event
            {
                self.sent[0].push((id, to, outcome));
            }
        }
    }

    fn node_at(address_: SocketAddr) -> Option<usize> {
        (0..64).find(|&n| address(n) == address_)
    }

    /// A frame reaches its node's device: into the head slot if the rule lets it, else the
    /// ordinary way.
    fn deliver(&mut self, (from, to, bytes): Wire) {
        let Some(node) = Self::node_at(to).filter(|&n| n < self.nodes.len()) else {
            return;
        };
        let now = self.now;
        let station = &mut self.nodes[node];
        let arrival = Arrival::of_frame(&bytes, LINK);
        match station.station_mut().fill_queue_mut().steer(arrival) {
            Steer::Kernel => station.arrive(now, from, &bytes[LINK..]),
            Steer::Ring => {
                let (slot, kept) = land_on_device(station.station_mut(), &bytes);
                let landing = Landing::Region {
                    kept: &kept,
                    frame_len: bytes.len() - LINK,
                };
                station
                    .take_landed(now, from, slot, landing)
                    .expect("a landing that matches its slot");
            }
        }
        self.collect();
    }

    /// Moves frames through `filter` (false: lost) and runs timers, up to `until`.
    fn run(&mut self, until: u64, filter: &mut dyn FnMut(&Wire) -> bool) {
        self.run_with_faults(until, &mut |wire| {
            if filter(wire) {
                Fate::Deliver
            } else {
                Fate::Lose
            }
        });
    }

    /// Moves frames, each as `fate` says, and runs timers, up to `until`.
    fn run_with_faults(&mut self, until: u64, fate: &mut dyn FnMut(&Wire) -> Fate) {
        loop {
            while let Some(wire) = self.wire.pop_front() {
                match fate(&wire) {
                    Fate::Deliver => self.deliver(wire),
                    Fate::Lose => {}
                    Fate::Twice => {
                        self.deliver(wire.clone());
                        self.deliver(wire);
                    }
                    // Behind everything on the wire now: overtaken.
                    Fate::Late => self.wire.push_back(wire),
                }
            }
            if !run_timers(&mut self.nodes, &mut self.now, until) {
                return;
            }
            self.collect();
        }
    }

    fn settle(&mut self) {
        let until = self.now + 3 * SILENCE_LIMIT_NS;
        self.run(until, &mut |_| true);
    }

    fn outcome(&self, node: usize, id: OpenSendId) -> Option<Result<(), SendFailed>> {
        self.sent[node]
            .iter()
            .find(|(done, ..)| *done == id)
            .map(|(.., outcome)| *outcome)
    }

    /// The transfers `node` received from `from`, each checked byte for byte against one of
    /// `tags` (sent from node `sender`); returns their tags in arrival order.
    fn tags_received(&self, node: usize, sender: usize, tags: &[u32]) -> Vec<u32> {
        self.received[node]
            .iter()
            .filter(|(from, _)| *from == address(sender))
            .map(|(_, bytes)| {
                *tags
                    .iter()
                    .find(|&&tag| {
                        bytes
                            .iter()
                            .enumerate()
                            .all(|(at, b)| *b == byte(sender as u32, node as u32, tag, at))
                    })
                    .unwrap_or_else(|| panic!("a transfer from {sender} at {node} is wrong"))
            })
            .collect()
    }
}

/// Lengths from one frame to many, placed (two frames or more) and by copy.
const LENGTHS: [usize; 5] = [1, PAYLOAD, PAYLOAD + 1, 40 * PAYLOAD + 3, 300 * PAYLOAD];

#[test]
fn a_server_learns_its_clients_from_their_frames_and_answers_them() {
    let mut net = OpenNet::new(3, 8);
    let mut sends = Vec::new();
    for (tag, &len) in LENGTHS.iter().enumerate() {
        sends.push((1, net.send(1, 0, len, tag as u32)));
        sends.push((2, net.send(2, 0, len + 7, 100 + tag as u32)));
    }
    net.settle();
    for (node, id) in sends {
        assert_eq!(net.outcome(node, id), Some(Ok(())), "send {id:?} of {node}");
    }
    let tags: Vec<u32> = (0..5).collect();
    assert_eq!(net.tags_received(0, 1, &tags), tags, "in order, once each");
    let tags2: Vec<u32> = (100..105).collect();
    assert_eq!(net.tags_received(0, 2, &tags2), tags2);
    let placed = net.nodes[0].station().stats().placed_transfers;
    // One transfer is placed at a time; a sender refused while the server places sends by copy.
    assert!(placed >= 1, "multi-frame transfers were placed: {placed}");
    assert_eq!(net.nodes[0].station().stats().copied_bytes_placed, 0);
    // The server answers each client at the address it heard from.
    let reply = net.send(0, 1, 5 * PAYLOAD, 7);
    net.settle();
    assert_eq!(net.outcome(0, reply), Some(Ok(())));
    assert_eq!(net.tags_received(1, 0, &[7]), [7]);
}

#[test]
fn a_restarted_client_starts_a_new_conversation_and_is_not_taken_for_the_old_one() {
    let mut net = OpenNet::new(2, 4);
    let first = net.send(1, 0, 3 * PAYLOAD, 1);
    net.settle();
    assert_eq!(net.outcome(1, first), Some(Ok(())));
    // The server has a transfer on its way to the client when the client restarts.
    let to_old = net.send(0, 1, 50 * PAYLOAD, 2);
    net.wire.clear();
    net.restart(1, 4);
    // The new life numbers its transfers from the start, as the old one did: taken as new.
    let again = net.send(1, 0, 3 * PAYLOAD, 3);
    net.settle();
    assert_eq!(
        net.outcome(1, again),
        Some(Ok(())),
        "the new life's transfer"
    );
    assert_eq!(net.tags_received(0, 1, &[1, 3]), [1, 3], "each once");
    assert_eq!(
        net.outcome(0, to_old),
        Some(Err(SendFailed::ConversationEnded)),
        "the old life's pending transfer fails"
    );
    assert_eq!(net.nodes[0].stats().restarts, 1);
    assert!(
        net.received[1].is_empty(),
        "the new life got nothing of the old"
    );
}

#[test]
fn a_client_of_a_restarted_server_is_told_and_starts_over() {
    let mut net = OpenNet::new(2, 4);
    let first = net.send(1, 0, 2 * PAYLOAD, 1);
    net.settle();
    assert_eq!(net.outcome(1, first), Some(Ok(())));
    net.restart(0, 4);
    // A transfer of the old conversation reaches a server that never heard of it.
    let lost = net.send(1, 0, 2 * PAYLOAD, 2);
    net.settle();
    assert_eq!(
        net.outcome(1, lost),
        Some(Err(SendFailed::ConversationEnded)),
        "told with RESET, not left to time out"
    );
    assert!(net.nodes[0].stats().forgotten >= 1);
    assert!(net.nodes[1].stats().resets_taken >= 1);
    assert!(
        net.received[0].len() == 1,
        "the new life took nothing of the old"
    );
    let next = net.send(1, 0, 2 * PAYLOAD, 3);
    net.settle();
    assert_eq!(net.outcome(1, next), Some(Ok(())), "a new conversation");
    let tags = net.tags_received(0, 1, &[1, 3]);
    assert_eq!(tags, [1, 3]);
}

#[test]
fn a_full_table_turns_new_peers_away_until_a_slot_is_quiet() {
    let mut net = OpenNet::new(3, 1);
    let first = net.send(1, 0, PAYLOAD, 1);
    let until = net.now + 100_000_000;
    net.run(until, &mut |_| true);
    assert_eq!(net.outcome(1, first), Some(Ok(())));
    // The one slot is node 1's until it has been quiet for QUIET_NS: node 2 is dropped, and
    // its send fails after its silence limit.
    let early = net.send(2, 0, PAYLOAD, 2);
    net.settle();
    assert_eq!(
        net.outcome(2, early),
        Some(Err(SendFailed::PeerUnreachable))
    );
    assert!(net.nodes[0].stats().table_full >= 1);
    let until = net.now + QUIET_NS;
    net.run(until, &mut |_| true);
    let late = net.send(2, 0, PAYLOAD, 3);
    net.settle();
    assert_eq!(net.outcome(2, late), Some(Ok(())), "a quiet slot is reused");
    assert_eq!(net.tags_received(0, 2, &[2, 3]), [3]);
}

#[test]
fn a_station_refuses_to_send_to_itself() {
    let mut net = OpenNet::new(1, 2);
    assert_eq!(net.try_send(0, 0, 10, 1), Err(OpenSendError::ToSelf));
}

#[test]
fn garbage_and_strangers_resets_are_counted_and_change_nothing() {
    let mut net = OpenNet::new(2, 4);
    let id = net.send(1, 0, 4 * PAYLOAD, 1);
    let now = net.now;
    // Bytes that are no frame, and a frame with no conversation name.
    net.nodes[0].arrive(now, address(1), &[0u8; 10]);
    net.nodes[0].arrive(now, address(1), &[0xffu8; 200]);
    net.settle();
    assert_eq!(net.outcome(1, id), Some(Ok(())));
    assert_eq!(net.tags_received(0, 1, &[1]), [1]);
    assert!(net.nodes[0].stats().malformed >= 2);
}

/// Clients that send, restart and send again through a network that loses, duplicates and
/// reorders frames: every transfer the server got is byte-exact, one a client sent, and
/// delivered once; every one a client's send reported delivered is among them.
#[test]
fn restarts_under_loss_duplication_and_reordering_lose_and_repeat_nothing() {
    use rand::{Rng, SeedableRng};
    let (mut delivered_total, mut restarts, mut resets, mut placed) = (0, 0, 0, 0);
    for seed in 0..40u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut net = OpenNet::new(4, 2);
        let mut reported = Vec::new();
        let mut pending: Vec<(usize, OpenSendId, u32)> = Vec::new();
        let mut tag = 0u32;
        let mut harvest =
            |net: &OpenNet, pending: &mut Vec<(usize, OpenSendId, u32)>, client: Option<usize>| {
                pending.retain(|&(c, id, t)| {
                    if client.is_some_and(|only| only != c) {
                        return true;
                    }
                    match net.outcome(c, id) {
                        Some(Ok(())) => {
                            reported.push((c, t));
                            false
                        }
                        Some(Err(_)) => false,
                        // A life that ends with the send pending never reports it.
                        None => client.is_none(),
                    }
                });
            };
        for _ in 0..6 {
            for client in 1..4 {
                for _ in 0..2 {
                    tag += 1;
                    let len = rng.gen_range(1..60 * PAYLOAD);
                    if let Ok(id) = net.try_send(client, 0, len, tag) {
                        pending.push((client, id, tag));
                    }
                }
            }
            let mut faults = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ u64::from(tag) << 20);
            let mut fate = |_: &Wire| match faults.gen_range(0..100) {
                0..=4 => Fate::Lose,
                5..=7 => Fate::Twice,
                8..=15 => Fate::Late,
                _ => Fate::Deliver,
            };
            let until = net.now + 20_000_000;
            net.run_with_faults(until, &mut fate);
            // A client restarts with transfers in flight now and then, and the server less
            // often: transfers of a conversation its new life never heard of are refused with
            // RESET, never taken by it.
            if rng.gen_bool(0.5) {
                let client = rng.gen_range(1..4);
                harvest(&net, &mut pending, Some(client));
                net.restart(client, 2);
            }
            if rng.gen_bool(0.15) {
                net.restart(0, 2);
            }
            let until = net.now + 3 * SILENCE_LIMIT_NS;
            net.run_with_faults(until, &mut fate);
        }
        harvest(&net, &mut pending, None);
        let mut got = Vec::new();
        let tags: Vec<u32> = (1..=tag).collect();
        for client in 1..4 {
            for t in net.tags_received(0, client, &tags) {
                assert!(
                    !got.contains(&(client, t)),
                    "seed {seed}: {client}/{t} twice"
                );
                got.push((client, t));
            }
        }
        for done in &reported {
            assert!(
                got.contains(done),
                "seed {seed}: {done:?} reported delivered, never received"
            );
        }
        delivered_total += got.len();
        let server = net.nodes[0].stats();
        restarts += server.restarts;
        resets += net.nodes.iter().map(|n| n.stats().resets_sent).sum::<u64>();
        placed += net.nodes[0].station().stats().placed_transfers;
    }
    eprintln!("delivered {delivered_total}, restarts seen {restarts}, resets sent {resets}, placed {placed}");
    assert!(
        restarts > 0 && resets > 0,
        "the runs restarted peers and reset conversations"
    );
    assert!(
        delivered_total > 100,
        "the runs delivered something: {delivered_total}"
    );
}

/// An ADMISSION frame from `src` to `dst`, link bytes first.
fn admission_frame(op: nicmsg_wire::admission::AdmissionOp, src: u32, dst: u32) -> Vec<u8> {
    let repr = nicmsg_wire::admission::AdmissionRepr {
        op,
        number: 0,
        len: 0,
        key: 0,
    };
    let h = repr.to_header(JOB, src, dst).unwrap();
    let mut frame = vec![0u8; nicmsg_wire::FRAME_HEADER_LEN];
    nicmsg_wire::emit_headers(&h, None, &mut frame).unwrap();
    nicmsg_wire::seal(&mut frame, &[]);
    let mut out = vec![0x42; LINK];
    out.extend_from_slice(&frame);
    out
}

/// A send to a conversation that ends (RESET) with frames of it still queued, and the slot
/// reused at once for the next send to the same address: that send has the same station id
/// (numbering starts over), so frames queued for the first must not go out as the second's
/// (they left while it still asked admission, unrequested and by copy).
#[test]
fn frames_queued_for_an_ended_conversation_do_not_leave_for_the_next_one() {
    use nicmsg_wire::admission::AdmissionOp;
    use nicmsg_wire::{Frame, FrameKind};
    let mut net = OpenNet::new(2, 1);
    let first = net.send(0, 1, 1, 1);
    let (_, _, frame) = net.wire.pop_front().expect("the first send's frame");
    let mine = Frame::parse(&frame[LINK..]).unwrap().header.src;
    net.wire.clear();
    // Silence: the sender probes, and the probe waits in its queue.
    let now = net.now + 50_000_000;
    net.nodes[0].handle_timeout(now);
    // The receiver says it has no record of the conversation.
    let reset = admission_frame(AdmissionOp::Reset, 0x5555, mine);
    net.nodes[0].arrive(now, address(1), &reset[LINK..]);
    net.now = now + 1;
    net.collect_events_only();
    assert_eq!(
        net.outcome(0, first),
        Some(Err(SendFailed::ConversationEnded))
    );
    // The next send, of three frames, asks admission first: nothing of it may leave yet.
    net.now += 10;
    let second = net.send(0, 1, 3 * PAYLOAD, 2);
    let data: Vec<_> = net
        .wire
        .iter()
        .filter_map(|(.., bytes)| Frame::parse(&bytes[LINK..]).ok())
        .filter(|f| f.header.kind == FrameKind::LmData)
        .map(|f| f.header.frame_index)
        .collect();
    assert!(
        data.is_empty(),
        "frames {data:?} left for the second send before admission answered"
    );
    net.settle();
    assert_eq!(net.outcome(0, second), Some(Ok(())));
    assert_eq!(net.tags_received(1, 0, &[2]), [2]);
}

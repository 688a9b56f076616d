//! Fuzz target for LM's open stations (`nicmsg_lm::open::OpenStation`): two stations at socket
//! addresses send each other transfers through a network the fuzzer controls (it delivers,
//! drops, duplicates and reorders frames), while strangers at other addresses inject frames:
//! copies of frames seen on the wire with fields rewritten and resealed (conversation names,
//! transfer numbers, keys, frame indexes, lengths, admission operations, RESET among them),
//! and raw bytes. Stations restart now and then (a fresh incarnation at the same address).
//!
//! Oracle:
//! * nothing panics, and every loop is bounded: `poll_transmit` runs dry, and after at most a
//!   few rounds of `handle_timeout` at one instant `poll_timeout` lies in the future;
//! * every send reports at most once, and only a send that was started;
//! * with no frame injected or rewritten in their conversation, a transfer received between
//!   the two stations is byte for byte one that was sent (its bytes name its sender and tag).
//!
//! Run: `cargo +nightly fuzz run lm_open_frames -- -max_total_time=600 -rss_limit_mb=2048`
//! from `fuzz/`.

#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use nicmsg_lm::open::{OpenEvent, OpenSendId, OpenStation};
use nicmsg_lm::send_buffer::HoleBuffer;
use nicmsg_lm::station::{HeapRegions, Received, Regions, StationConfig};
use nicmsg_lm::Geometry;
use nicmsg_wire::{seal, FrameView, FRAME_HEADER_LEN};
use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;

const JOB: u32 = 7;
/// Link headers in front of each frame.
const LINK: usize = 42;
const PAYLOAD: usize = 200;
/// Actions per input.
const MAX_ACTIONS: usize = 400;
/// Rounds of `handle_timeout` at one instant before its deadline must be in the future.
const MAX_TIMEOUT_ROUNDS: usize = 8;
/// Frames a station may emit in one drain: far above what any window allows.
const MAX_DRAIN: usize = 100_000;

fn geometry() -> Geometry {
    Geometry::new(LINK + FRAME_HEADER_LEN, PAYLOAD).expect("a geometry")
}

fn address(node: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, node as u8 + 1], 7000))
}

/// The byte at `at` of transfer `tag` from node `from`.
fn byte(from: usize, tag: u32, at: usize) -> u8 {
    (at as u32).wrapping_mul(31).wrapping_add(tag * 7 + from as u32 * 131) as u8
}

struct World {
    stations: [OpenStation<HeapRegions>; 2],
    lives: [u32; 2],
    now: u64,
    /// Frames on the wire: from, to, bytes (link headers first).
    wire: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Frames seen, for strangers to copy.
    seen: Vec<Vec<u8>>,
    /// Sends started and not reported, per node (the life's ids).
    started: [BTreeSet<OpenSendId>; 2],
    /// Whether anything was injected or rewritten: received bytes are then not checked.
    tampered: bool,
}

fn station(node: usize, life: u32) -> OpenStation<HeapRegions> {
    let mut config = StationConfig::new(0, 2, JOB, geometry());
    config.window = 8;
    config.fill_slots = 64;
    let mixed = ((node as u64) << 32 | u64::from(life)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let incarnation = (mixed >> 32) as u32 | 1;
    OpenStation::new(config, (address(node), 3, incarnation), HeapRegions::new(1 << 20))
}

impl World {
    fn new() -> Self {
        Self {
            stations: [station(0, 1), station(1, 1)],
            lives: [1, 1],
            now: 1_000,
            wire: VecDeque::new(),
            seen: Vec::new(),
            started: [BTreeSet::new(), BTreeSet::new()],
            tampered: false,
        }
    }

    /// Takes every station's output: frames onto the wire, events checked.
    fn drain(&mut self) {
        for node in 0..2 {
            let from = address(node);
            let station = &mut self.stations[node];
            for _ in 0..MAX_DRAIN {
                let Some((to, frame)) = station.poll_transmit() else {
                    break;
                };
                let bytes = frame.to_vec();
                if self.seen.len() < 64 {
                    self.seen.push(bytes.clone());
                }
                self.wire.push_back((from, to, bytes));
            }
            assert!(station.poll_transmit().is_none(), "poll_transmit never runs dry");
            while let Some(event) = station.poll_event() {
                match event {
                    OpenEvent::Sent { id, .. } => {
                        assert!(self.started[node].remove(&id), "a send reported twice or never started");
                    }
                    OpenEvent::Received { from, message, .. } => {
                        let bytes = match message {
                            Received::Copied(bytes) => bytes,
                            Received::Placed { region, range } => {
                                let inner = station.station_mut();
                                let bytes = inner.regions().bytes(region)[range].to_vec();
                                inner.release(region);
                                bytes
                            }
                        };
                        check_received(self.tampered, from, &bytes);
                    }
                }
            }
        }
    }

    fn deliver(&mut self, (from, to, bytes): (SocketAddr, SocketAddr, Vec<u8>)) {
        let Some(node) = (0..2).find(|&n| address(n) == to) else {
            return;
        };
        if let Some(frame) = bytes.get(LINK..) {
            self.stations[node].arrive(self.now, from, frame);
        }
    }

    fn timers(&mut self) {
        for station in &mut self.stations {
            for _ in 0..MAX_TIMEOUT_ROUNDS {
                match station.poll_timeout() {
                    Some(at) if at <= self.now => station.handle_timeout(self.now),
                    _ => break,
                }
            }
            assert!(
                station.poll_timeout().is_none_or(|at| at > self.now),
                "handle_timeout leaves its deadline due"
            );
        }
    }

    fn send(&mut self, node: usize, len: usize, tag: u32) {
        let Ok(mut buffer) = HoleBuffer::new(geometry(), len as u64) else {
            return;
        };
        // The first bytes name the sender and the tag, so a receiver can check the rest.
        let mut bytes: Vec<u8> = (0..len).map(|at| byte(node, tag, at)).collect();
        let stamp = [node as u8, (tag >> 8) as u8, tag as u8];
        for (at, b) in stamp.iter().enumerate().take(len) {
            bytes[at] = *b;
        }
        buffer.write_at(0, &bytes).expect("fits");
        let to = address(1 - node);
        if let Ok(id) = self.stations[node].send(self.now, to, buffer) {
            self.started[node].insert(id);
        }
    }

    fn restart(&mut self, node: usize) {
        self.lives[node] += 1;
        self.stations[node] = station(node, self.lives[node]);
        self.started[node].clear();
        // The new life's frames name no old conversation; an old frame may still be taken as
        // a new one's by a peer that never heard the old life (documented), so bytes are not
        // checked across it.
        self.tampered = true;
    }
}

/// A transfer received between the stations is one that was sent, byte for byte.
fn check_received(tampered: bool, from: SocketAddr, bytes: &[u8]) {
    if tampered || bytes.len() < 3 {
        return;
    }
    let node = bytes[0] as usize;
    let tag = u32::from(bytes[1]) << 8 | u32::from(bytes[2]);
    assert_eq!(address(node), from, "a transfer names its sender");
    for (at, b) in bytes.iter().enumerate().skip(3) {
        assert_eq!(*b, byte(node, tag, at), "byte {at} of {node}/{tag}");
    }
}

/// A frame seen on the wire with a field rewritten and resealed, or raw bytes.
fn stranger_frame(u: &mut Unstructured<'_>, seen: &[Vec<u8>]) -> Result<Vec<u8>> {
    if seen.is_empty() || u.ratio(1, 5)? {
        let len = u.int_in_range(0..=LINK + FRAME_HEADER_LEN + 64)?;
        return (0..len).map(|_| u.arbitrary::<u8>()).collect();
    }
    let mut frame = u.choose(seen)?.clone();
    let header = LINK..LINK + FRAME_HEADER_LEN;
    // A word of the header rewritten (names, numbers, key, index, length, operation).
    let at = header.start + 4 * u.int_in_range(0..=(FRAME_HEADER_LEN / 4 - 1))?;
    let word: u32 = if u.ratio(1, 3)? { u.int_in_range(0..=16)? } else { u.arbitrary()? };
    frame[at..at + 4].copy_from_slice(&word.to_le_bytes());
    if u.ratio(4, 5)? {
        let (head, payload) = frame[LINK..].split_at_mut(FRAME_HEADER_LEN);
        seal(head, &[payload]);
    }
    let _ = FrameView::new_checked(&frame[LINK..]);
    Ok(frame)
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mut world = World::new();
    let mut tag = 0u32;
    for _ in 0..MAX_ACTIONS {
        match u.int_in_range(0..=9u8)? {
            0 | 1 => {
                tag += 1;
                let len = u.int_in_range(1..=12 * PAYLOAD)?;
                world.send(usize::from(u.arbitrary::<bool>()?), len, tag);
            }
            2..=4 => {
                if let Some(frame) = world.wire.pop_front() {
                    match u.int_in_range(0..=9u8)? {
                        0 => {}
                        1 => {
                            world.deliver(frame.clone());
                            world.deliver(frame);
                        }
                        2 => world.wire.push_back(frame),
                        _ => world.deliver(frame),
                    }
                }
            }
            5 => {
                world.tampered = true;
                let frame = stranger_frame(u, &world.seen)?;
                let node = usize::from(u.arbitrary::<bool>()?);
                // From a stranger, or forged from the peer's own address.
                let from = if u.arbitrary()? { address(1 - node) } else { address(2 + usize::from(u.arbitrary::<u8>()? % 4)) };
                world.deliver((from, address(node), frame));
            }
            6 | 7 => {
                world.now += u.int_in_range(1..=20_000_000u64)?;
                world.timers();
            }
            8 => {
                if u.ratio(1, 8)? {
                    world.restart(usize::from(u.arbitrary::<bool>()?));
                }
            }
            _ => {
                while let Some(frame) = world.wire.pop_front() {
                    world.deliver(frame);
                    world.drain();
                }
            }
        }
        world.drain();
        world.wire.truncate(4096);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

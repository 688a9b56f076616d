//! The network model: a queue of timed events and the fate of every frame.
//!
//! A frame handed to the network first waits for the sender's link (frames serialise one after
//! another at the link bandwidth), then travels for the base delay plus jitter (plus an extra
//! random delay for the fraction that is reordered). On the way it may be lost, duplicated (each
//! copy has its own fate), or corrupted (1 to 3 bits flipped; the receiver's CRC must catch it).
//! Frames larger than the MTU never leave (the simulator reports a violation). Partitions cut
//! pairs of ranks for an interval: frames departing across a cut are lost. Frames arriving at a
//! dead rank are dropped.
//!
//! Events are ordered by (virtual time, sequence number), so a run is a pure function of its
//! seed and parameters.

use crate::rng::{stream, SimRng};
use nicmsg_proto::{Nanos, Rank};
use nicmsg_wire::FRAME_HEADER_LEN;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// Every parameter of the network model.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    /// Probability that a frame (each copy) is lost.
    pub loss: f64,
    /// Probability that a frame is duplicated.
    pub dup: f64,
    /// Fraction of frames given an extra random delay of up to `reorder_max_ns`.
    pub reorder: f64,
    pub reorder_max_ns: Nanos,
    /// Probability that a frame (each copy) has 1 to 3 bits flipped.
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay_ns: Nanos,
    /// Uniform extra delay `0..=jitter_ns` per frame.
    pub jitter_ns: Nanos,
    /// Per-link (sender side) bandwidth in bits per second.
    pub bandwidth_bps: u64,
    /// Largest frame the network carries; also the endpoints' `Config::mtu`.
    pub mtu: u32,
    /// Probability that a run gets one random partition (the ranks split in two groups).
    pub partition: f64,
    /// Longest random partition. Keep it well below the time the protocol needs to declare a
    /// peer unreachable, or survivors legitimately give up on each other.
    pub partition_max_ns: Nanos,
    /// Partitions always applied, besides the random one.
    pub partitions: Vec<Partition>,
    /// The link verifies payloads, as the kernel's UDP checksum does: a corrupted copy with a
    /// flipped bit past the frame header is dropped on arrival (counted), and the endpoints
    /// seal data frames over their headers only (`Config::link_checks_payload`). A copy
    /// corrupted in its first `FRAME_HEADER_LEN` bytes alone is still delivered, so the
    /// frames' own checksum of their headers stays tested. Half the seeds of a sweep.
    pub link_checks_payload: bool,
}

impl NetConfig {
    /// True if the network does nothing to frames but carry them: no loss, duplication,
    /// reordering, corruption or partition.
    pub fn is_clean(&self) -> bool {
        self.loss == 0.0
            && self.dup == 0.0
            && self.reorder == 0.0
            && self.corrupt == 0.0
            && self.partition == 0.0
            && self.partitions.is_empty()
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_max_ns: 50_000,
            corrupt: 0.0,
            delay_ns: 5_000,
            jitter_ns: 1_000,
            bandwidth_bps: 10_000_000_000,
            mtu: 1472,
            partition: 0.0,
            partition_max_ns: 20_000_000,
            partitions: Vec::new(),
            link_checks_payload: false,
        }
    }
}

/// A set of rank pairs that cannot reach each other (either direction) during `[from, until)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Pairs stored as (lower rank, higher rank).
    pub pairs: BTreeSet<(Rank, Rank)>,
    pub from: Nanos,
    pub until: Nanos,
}

impl Partition {
    pub fn cuts(&self, a: Rank, b: Rank, at: Nanos) -> bool {
        at >= self.from && at < self.until && self.pairs.contains(&(a.min(b), a.max(b)))
    }

    /// Splits `size` ranks into two random non-empty groups and cuts every pair across.
    pub fn random(rng: &mut SimRng, size: u32, max_len: Nanos) -> Self {
        let mut side: Vec<bool> = (0..size).map(|_| rng.chance(0.5)).collect();
        // Both groups non-empty: rank 0 on one side, some other rank on the other.
        let other = 1 + rng.below(size.saturating_sub(1) as u64) as usize;
        side[0] = false;
        if size > 1 {
            side[other] = true;
        }
        let mut pairs = BTreeSet::new();
        for a in 0..size {
            for b in a + 1..size {
                if side[a as usize] != side[b as usize] {
                    pairs.insert((a, b));
                }
            }
        }
        let from = rng.range(0, 5_000_000);
        let until = from + rng.range(100_000, max_len.max(100_000));
        Self { pairs, from, until }
    }
}

/// A frame on the wire.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub src: Rank,
    pub dst: Rank,
    pub bytes: Vec<u8>,
    /// Bits were flipped on the way.
    pub corrupted: bool,
    /// This is the second copy of a duplicated frame.
    pub duplicate: bool,
}

/// Something that happens at a virtual time.
#[derive(Debug, Clone)]
pub enum Event {
    Frame(InFlight),
    /// The application of `rank` asked to be woken (workload token).
    Wake {
        rank: Rank,
        token: u64,
    },
    /// `rank` stops processing forever.
    Death {
        rank: Rank,
    },
    /// The host of dead rank `peer` refused a frame `rank` sent it (ICMP port unreachable):
    /// what a real kernel answers for a port whose process is gone.
    Refused {
        rank: Rank,
        peer: Rank,
    },
}

#[derive(Debug)]
struct Queued {
    time: Nanos,
    seq: u64,
    event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

/// Counters of the network model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Frames handed to the network by endpoints.
    pub frames_offered: u64,
    pub bytes_offered: u64,
    /// Frame copies handed to a live endpoint.
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Corrupted copies handed to a live endpoint (each must be dropped by its checks).
    pub corrupted_delivered: u64,
    /// Corrupted copies the link's payload check dropped (`NetConfig::link_checks_payload`).
    pub link_check_drops: u64,
    pub reordered: u64,
    pub partition_drops: u64,
    pub dead_drops: u64,
    /// Of those, frames answered with a refusal (ICMP port unreachable) to their sender.
    pub refusals: u64,
    pub mtu_drops: u64,
    /// Longest wait of a frame for its sender's link.
    pub max_link_wait_ns: Nanos,
}

impl NetStats {
    pub fn add(&mut self, other: &NetStats) {
        self.frames_offered += other.frames_offered;
        self.bytes_offered += other.bytes_offered;
        self.delivered += other.delivered;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.corrupted += other.corrupted;
        self.corrupted_delivered += other.corrupted_delivered;
        self.link_check_drops += other.link_check_drops;
        self.reordered += other.reordered;
        self.partition_drops += other.partition_drops;
        self.dead_drops += other.dead_drops;
        self.refusals += other.refusals;
        self.mtu_drops += other.mtu_drops;
        self.max_link_wait_ns = self.max_link_wait_ns.max(other.max_link_wait_ns);
    }
}

/// What happened to a frame handed to [`Network::send`] (for traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fate {
    pub too_big: bool,
    pub partitioned: bool,
    /// Copies put on the wire (0 when lost, 2 when duplicated and neither lost).
    pub copies: u8,
    pub lost: u8,
    pub corrupted: u8,
    pub depart: Nanos,
}

/// The event queue and the links.
#[derive(Debug)]
pub struct Network {
    config: NetConfig,
    rng: SimRng,
    queue: BinaryHeap<Reverse<Queued>>,
    next_seq: u64,
    link_free: Vec<Nanos>,
    partitions: Vec<Partition>,
    pub stats: NetStats,
}

impl Network {
    pub fn new(config: NetConfig, size: u32, seed: u64) -> Self {
        let mut rng = SimRng::new(seed, stream::NET);
        let mut partitions = config.partitions.clone();
        if size > 1 && rng.chance(config.partition) {
            partitions.push(Partition::random(&mut rng, size, config.partition_max_ns));
        }
        Self {
            config,
            rng,
            queue: BinaryHeap::new(),
            next_seq: 0,
            link_free: vec![0; size as usize],
            partitions,
            stats: NetStats::default(),
        }
    }

    pub fn config(&self) -> &NetConfig {
        &self.config
    }

    /// True if a partition separates `a` and `b` at `at`.
    pub fn cut(&self, a: Rank, b: Rank, at: Nanos) -> bool {
        self.partitions.iter().any(|p| p.cuts(a, b, at))
    }

    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Schedules an event at `time`.
    pub fn schedule(&mut self, time: Nanos, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Reverse(Queued { time, seq, event }));
    }

    pub fn peek_time(&self) -> Option<Nanos> {
        self.queue.peek().map(|q| q.0.time)
    }

    pub fn pop(&mut self) -> Option<(Nanos, Event)> {
        self.queue.pop().map(|q| (q.0.time, q.0.event))
    }

    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }

    /// Frames still on the wire.
    pub fn frames_in_flight(&self) -> usize {
        self.queue
            .iter()
            .filter(|q| matches!(q.0.event, Event::Frame(_)))
            .count()
    }

    /// Serialisation time of `len` bytes on a link.
    fn serialisation(&self, len: usize) -> Nanos {
        let bits = len as u128 * 8 * 1_000_000_000;
        let bps = self.config.bandwidth_bps.max(1) as u128;
        bits.div_ceil(bps) as Nanos
    }

    /// Hands a frame from `src` to the network at `now`.
    pub fn send(&mut self, now: Nanos, src: Rank, dst: Rank, bytes: Vec<u8>) -> Fate {
        let mut fate = Fate::default();
        self.stats.frames_offered += 1;
        self.stats.bytes_offered += bytes.len() as u64;
        if bytes.len() > self.config.mtu as usize {
            self.stats.mtu_drops += 1;
            fate.too_big = true;
            return fate;
        }
        let depart = now.max(self.link_free[src as usize]);
        let wait = depart - now;
        let on_wire = depart + self.serialisation(bytes.len());
        self.link_free[src as usize] = on_wire;
        self.stats.max_link_wait_ns = self.stats.max_link_wait_ns.max(wait);
        fate.depart = depart;
        if self.partitions.iter().any(|p| p.cuts(src, dst, depart)) {
            self.stats.partition_drops += 1;
            fate.partitioned = true;
            return fate;
        }
        let duplicate = self.rng.chance(self.config.dup);
        if duplicate {
            self.stats.duplicated += 1;
        }
        let copies = if duplicate { 2 } else { 1 };
        let mut original = Some(bytes);
        for copy in 0..copies {
            let mut frame = if copy + 1 == copies {
                original.take().expect("original bytes used once")
            } else {
                original.as_ref().expect("original bytes").clone()
            };
            if self.rng.chance(self.config.loss) {
                self.stats.lost += 1;
                fate.lost += 1;
                continue;
            }
            let mut delay = self.config.delay_ns + self.rng.range(0, self.config.jitter_ns);
            if self.rng.chance(self.config.reorder) {
                self.stats.reordered += 1;
                delay += self.rng.range(1, self.config.reorder_max_ns.max(1));
            }
            let corrupted = self.rng.chance(self.config.corrupt);
            if corrupted {
                self.stats.corrupted += 1;
                fate.corrupted += 1;
                let highest_flip = self.flip_bits(&mut frame);
                if self.config.link_checks_payload && highest_flip >= FRAME_HEADER_LEN as u64 * 8 {
                    self.stats.link_check_drops += 1;
                    continue;
                }
            }
            fate.copies += 1;
            let event = Event::Frame(InFlight {
                src,
                dst,
                bytes: frame,
                corrupted,
                duplicate: copy == 1,
            });
            self.schedule(on_wire + delay, event);
        }
        fate
    }

    /// Flips 1 to 3 distinct random bits; returns the highest bit flipped (0 for an empty
    /// frame).
    fn flip_bits(&mut self, frame: &mut [u8]) -> u64 {
        let bits = frame.len() as u64 * 8;
        if bits == 0 {
            return 0;
        }
        let count = self.rng.range(1, 3.min(bits));
        let mut flipped: Vec<u64> = Vec::with_capacity(3);
        while (flipped.len() as u64) < count {
            let bit = self.rng.below(bits);
            if !flipped.contains(&bit) {
                flipped.push(bit);
                frame[(bit / 8) as usize] ^= 1 << (bit % 8);
            }
        }
        flipped.into_iter().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(net: &mut Network) -> Vec<(Nanos, Rank, Vec<u8>, bool)> {
        let mut out = Vec::new();
        while let Some((t, event)) = net.pop() {
            if let Event::Frame(f) = event {
                out.push((t, f.dst, f.bytes, f.corrupted));
            }
        }
        out
    }

    #[test]
    fn frames_serialise_on_the_sender_link() {
        let config = NetConfig {
            jitter_ns: 0,
            ..NetConfig::default()
        };
        let mut net = Network::new(config, 2, 1);
        for _ in 0..3 {
            net.send(0, 0, 1, vec![0u8; 1250]); // 1 us at 10 Gbit/s
        }
        let times: Vec<Nanos> = drain(&mut net).iter().map(|f| f.0).collect();
        assert_eq!(times, vec![6_000, 7_000, 8_000]);
    }

    #[test]
    fn oversized_frames_never_leave() {
        let mut net = Network::new(NetConfig::default(), 2, 1);
        let fate = net.send(0, 0, 1, vec![0u8; 1473]);
        assert!(fate.too_big);
        assert!(net.is_idle());
        assert_eq!(net.stats.mtu_drops, 1);
    }

    #[test]
    fn faults_follow_their_rates_and_the_seed() {
        let config = NetConfig {
            loss: 0.2,
            dup: 0.1,
            corrupt: 0.1,
            reorder: 0.1,
            ..NetConfig::default()
        };
        let run = |seed| {
            let mut net = Network::new(config.clone(), 4, seed);
            for i in 0..10_000u64 {
                net.send(
                    i * 2_000,
                    (i % 4) as Rank,
                    ((i + 1) % 4) as Rank,
                    vec![(i % 251) as u8; 100],
                );
            }
            let stats = net.stats;
            (stats, drain(&mut net))
        };
        let (stats, frames) = run(5);
        let (stats_again, frames_again) = run(5);
        assert_eq!(stats, stats_again);
        assert_eq!(frames, frames_again);
        let (other, _) = run(6);
        assert_ne!(stats, other);
        let copies = 10_000 + stats.duplicated;
        let loss = stats.lost as f64 / copies as f64;
        assert!((0.18..0.22).contains(&loss), "loss {loss}");
        assert!(
            (800..1200).contains(&stats.duplicated),
            "dup {}",
            stats.duplicated
        );
        assert_eq!(frames.len() as u64, copies - stats.lost);
        // Corrupted copies differ from the original in 1 to 3 bits.
        let mut net = Network::new(
            NetConfig {
                corrupt: 1.0,
                ..NetConfig::default()
            },
            2,
            9,
        );
        for _ in 0..100 {
            net.send(0, 0, 1, vec![0u8; 64]);
        }
        for (_, _, bytes, corrupted) in drain(&mut net) {
            assert!(corrupted);
            let flipped: u32 = bytes.iter().map(|b| b.count_ones()).sum();
            assert!((1..=3).contains(&flipped));
        }
    }

    #[test]
    fn partitions_cut_both_directions_for_their_interval() {
        let mut pairs = BTreeSet::new();
        pairs.insert((0, 1));
        let config = NetConfig {
            partitions: vec![Partition {
                pairs,
                from: 1_000,
                until: 2_000,
            }],
            ..NetConfig::default()
        };
        let mut net = Network::new(config, 3, 1);
        assert!(!net.send(0, 1, 0, vec![0; 60]).partitioned);
        assert!(net.send(1_500, 1, 0, vec![0; 60]).partitioned);
        assert!(net.send(1_500, 0, 1, vec![0; 60]).partitioned);
        assert!(!net.send(1_500, 0, 2, vec![0; 60]).partitioned);
        assert!(!net.send(2_500, 0, 1, vec![0; 60]).partitioned);
    }

    #[test]
    fn random_partitions_split_into_two_groups() {
        let mut rng = SimRng::new(3, stream::NET);
        for size in 2..10 {
            let p = Partition::random(&mut rng, size, 20_000_000);
            assert!(!p.pairs.is_empty());
            assert!(p.until > p.from);
        }
    }
}

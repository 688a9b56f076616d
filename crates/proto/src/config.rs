//! Configuration knobs with their defaults. Every rank of a job must use the same values for
//! `eager_limit`, the credits per peer of every class and `unexpected` (the
//! launcher hands one configuration to all ranks); the rest may differ per rank.

use crate::geometry::Geometry;
use crate::Nanos;
use nicmsg_wire::{Protocol, FRAME_HEADER_LEN, MSG_HEADER_LEN};
use thiserror::Error;

/// What the receiver does with a message that arrives before its receive is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnexpectedPolicy {
    /// Keep short messages in per-peer buffers (bounded by credits) and the header of long ones.
    Buffer,
    /// EMP's no-buffering mode: discard the frames and tell the sender to retry later; the data
    /// is recovered by retransmission once the receive is posted.
    Drop,
}

/// Most frames a sender may have unacknowledged on one message: 64 collections. Bounds the
/// sender's per-message timer table and, with [`MAX_ACK_UNIT`], the receiver's frame bitmap.
pub const MAX_INFLIGHT_COLLECTIONS: usize = 64;
/// Largest acknowledgement unit; 8 x 64 collections = 512 frames tracked by a receiver.
pub const MAX_ACK_UNIT: u8 = 8;
/// Frames a receiver tracks beyond its first missing frame (bitmap size).
pub const RX_TRACKED_FRAMES: u32 = MAX_INFLIGHT_COLLECTIONS as u32 * MAX_ACK_UNIT as u32;
/// Messages one sender may have unfinished towards one receiver (message-id window, a bitmap on
/// each side). More are queued, never dropped. A message the receiver has not matched yet and
/// does not buffer (a long one, or a short one past its sender's credits) stays unfinished, so
/// this is also how many unmatched messages one pair can have before the next message waits.
/// With 1,024, a receiver that takes 2,000 messages of one sender in reverse order never saw
/// the last one: its sender had 1,024 unfinished and waited for them; with 4,096, the same
/// with 5,000 under the MPI provider, whose table lets one destination take 9,144 sends
/// (`held_sends.rs`). 16,384 is the largest engine table (`NICMSG_SLOTS`, the provider's), so
/// the window holds back no send the host has waiting, but for the sends it was told of as
/// complete early (`max_early_sends`, 128 by default): the native library with 16,384 slots
/// may have 16,512 unfinished to one peer. The bitmap's first 128 bits sit in
/// each peer's state and the rest (2 KiB a side) is allocated for a pair the first time an id
/// 128 or more past its oldest unfinished one finishes (`window.rs`).
pub const MSG_WINDOW: u32 = 16_384;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Largest frame in bytes, headers included, that the backend carries (1472 = UDP payload of
    /// an Ethernet frame of MTU 1500).
    pub mtu: u32,
    /// Messages up to this many bytes use the eager protocol; longer ones rendezvous.
    pub eager_limit: u64,
    /// Unexpected eager messages a receiver buffers per sender (each up to `eager_limit` bytes).
    /// A sender starts with this many credits; with none left, it waits for one (asking the
    /// receiver), or sends by rendezvous when the receiver says they are held (`credit_wait.rs`).
    pub eager_credits_per_peer: u32,
    /// Unexpected messages of at most 256 bytes (`SMALL_MESSAGE_MAX`: sent from the sender's
    /// copy) a receiver buffers per sender, in buffers of their own: such messages spend these
    /// credits, never eager ones (`credits.rs`). At most 64.
    pub small_credits_per_peer: u32,
    /// Unexpected messages of 257 bytes to 4 KiB (`MEDIUM_MESSAGE_MAX`) a receiver buffers per
    /// sender, in buffers of their own (of 4 KiB, or `eager_limit` if less): such messages spend
    /// these credits, never eager ones (`credits.rs`). At most 64.
    pub medium_credits_per_peer: u32,
    /// Longest wait of an eager message for a credit before it goes by rendezvous; 0 never
    /// waits. Waiting keeps streams of short messages eager while the receiver keeps up; a
    /// receiver that holds its buffers while it waits for a later message says so at once, and
    /// this bound covers one that waits on a third rank instead.
    pub credit_wait_ns: Nanos,
    /// Frames granted by each CTS (RMPP: at most 16 by default).
    pub cts_window_frames: u32,
    /// Bytes of a rendezvous message sent right behind its RTS, before any CTS, while the
    /// receiver keeps up (its last rendezvous message found its receive posted): they are
    /// placed if the RTS matches at once and discarded otherwise, and then sent again after
    /// the CTS. A blocking send of a long message then waits for the CTS round trip only
    /// beyond them (ob1 sends its first fragment likewise). At most `eager_limit` is sent so,
    /// as much as an eager message sends unasked. 0 waits for the CTS always.
    pub presumed_grant_bytes: u64,
    /// Bytes a receiver has granted and not yet received, across all the rendezvous messages
    /// it receives, past which a message matched now waits for its first grant (`receiver.rs`,
    /// deferred grants): the frames granted arrive in the receiving socket's buffer, and
    /// whatever does not fit is dropped by the kernel. One message is always granted when no
    /// other is open. 0: no bound.
    pub grant_budget_bytes: u64,
    /// Frames before the end of a window at which the RSM flag is set (RMPP's Pre-k).
    pub rsm_pre_frames: u32,
    /// Frames per acknowledged collection (EMP: 3).
    pub ack_unit: u8,
    pub unexpected: UnexpectedPolicy,
    /// Choose each message's frame size from its length (BIP); otherwise every frame is
    /// `mtu`-sized.
    pub adaptive_frames: bool,
    /// First retransmission timeout before any round trip is measured.
    pub rto_initial_ns: Nanos,
    pub rto_min_ns: Nanos,
    /// Ceiling of the backed-off timeout.
    pub rto_max_ns: Nanos,
    /// Repeats of a frame whose loss costs only bookkeeping (MSG-ACK waiting for CLEANUP,
    /// CANCEL-ACK waiting for CLEANUP) before the receiver frees the state anyway.
    pub max_retries: u32,
    /// Silence from a peer we wait on before probing it (sender waiting for a receive to be
    /// posted, receiver waiting for data, posted receive from a specific rank).
    pub keepalive_ns: Nanos,
    /// How long a peer may leave a frame that asks for an answer (data, RTS, END, CANCEL, a
    /// liveness probe) without any frame at all coming back, while something is awaited from
    /// it, before it is declared unreachable. The peer's engine answers these frames itself,
    /// also while its application computes, so only a dead or frozen process (or a cut
    /// network) stays silent this long. Faster evidence: see `Endpoint::handle_refused`.
    pub peer_timeout_ns: Nanos,
    /// Concurrent send operations (posted, queued or in flight), those completed early
    /// included.
    pub max_sends: usize,
    /// Sends that may have completed early and still hold a table entry: short ones (from the
    /// core's copy) waiting for their acknowledgement, rendezvous ones delivered whose END
    /// handshake is not over. The host no longer sees them, so a driver that must never have a
    /// post refused sizes `max_sends` as its own operations plus these.
    pub max_early_sends: usize,
    /// Concurrent posted receives and probes.
    pub max_recvs: usize,
    /// Incoming messages from other ranks being received, buffered unexpected, or awaiting
    /// CLEANUP. (Messages a rank sends itself take entries beyond these, one per local send,
    /// so they are never refused for want of room.)
    pub max_incoming: usize,
    /// How long the acknowledgement of a whole eager message (and the credit it returns) may
    /// wait for an EAGER frame to the same peer to carry it (piggybacked ACK): a reply that
    /// follows within this time costs the request no acknowledgement datagram. 0 acknowledges
    /// at once. Must stay well below `rto_min_ns`, or the sender would retransmit meanwhile.
    pub ack_delay_ns: Nanos,
    /// Control frames (ACK, CTS, ...) waiting to be transmitted; beyond it they are dropped and
    /// counted, which is safe because every control frame is recovered by retransmission.
    pub max_control_queue: usize,
    /// The link verifies every datagram's payload itself (kernel UDP sockets: the UDP checksum),
    /// so data frames are sealed with a checksum of their headers only (`Flags::LINK_CHECKED`)
    /// and such frames are taken. A CRC32C of the payload costs about what a copy of it costs,
    /// on each side (`docs/wire-format.md`). Off (the default, and on links that check nothing,
    /// such as AF_XDP): every checksum covers the payload, and frames without are dropped.
    pub link_checks_payload: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mtu: 1472,
            eager_limit: 8192,
            eager_credits_per_peer: 8,
            // 8-byte `NPopenmpi -s` (a receiver slower than its sender, posting one receive at
            // a time): 4.0 us a message with 8, 2.6 with 32, 2.9 with 64; 8 KiB per sender.
            small_credits_per_peer: 32,
            // 1 KiB and 4 KiB `NPopenmpi -s` on the provider (Open MPI injects them): 4.06 and
            // 4.79 us a message on 8 eager credits, 2.82 and 3.34 on 32 medium; 128 KiB per
            // sender.
            medium_credits_per_peer: 32,
            // Ten minimum retransmission timeouts: a receiver that keeps up returns a credit
            // within a round trip, and one descheduled for a while (2 shared cores) should not
            // turn a whole stream into rendezvous messages; the cases it bounds (a receiver
            // waiting on a third rank) are programs that rely on buffering.
            credit_wait_ns: 2_000_000,
            // Measured with `nicmsg bench bw` over loopback with GSO/GRO: 16 frames (RMPP's
            // window, 23 KB at MTU 1500) leaves the link idle for a round trip every window and
            // caps 1 MiB streams near 0.5 GB/s; 256 frames (half the frames a receiver tracks,
            // `RX_TRACKED_FRAMES`) with the next grant asked for half-way reach ~2 GB/s.
            cts_window_frames: 256,
            rsm_pre_frames: 128,
            // A quarter of a MiB: on loopback a 256 KiB message then goes without waiting for
            // its CTS; a receiver that is not ready costs at most that much sent twice.
            presumed_grant_bytes: 256 << 10,
            // The transport's socket buffer (4 MiB asked for): 600 rendezvous messages of
            // 100,000 bytes matched at once were all granted at once, 60 MB, and what
            // overflowed the socket was resent on the same backed-off timeout, together, into
            // the same overflow. Measured on loopback with that program: 2 MiB took 0.30-0.42 s
            // a run (the grants too few to keep the link busy), 4 MiB 0.12-0.29 s (Open MPI on
            // TCP 0.14-0.16 s), neither stalled; streams of 1 MiB messages, level with no bound.
            grant_budget_bytes: 4 << 20,
            ack_unit: 3,
            unexpected: UnexpectedPolicy::Buffer,
            adaptive_frames: true,
            rto_initial_ns: 1_000_000,
            rto_min_ns: 200_000,
            rto_max_ns: 200_000_000,
            max_retries: 12,
            keepalive_ns: 200_000_000,
            // Far above any scheduling delay of an engine that answers (milliseconds on a
            // loaded machine), far below the minutes a user would wait on a hung job.
            peer_timeout_ns: 10_000_000_000,
            max_sends: 256,
            max_early_sends: 128,
            max_recvs: 256,
            // Unmatched messages from all peers a receiver keeps (the header of a long one, a
            // short one beyond the eager buffers): a sender's later message waits while they
            // fill it. An entry is about 200 bytes.
            max_incoming: 1024,
            // A ping-pong reply comes within a few microseconds; a tenth of `rto_min_ns` keeps
            // the sender's timer far away even when the acknowledgement is not piggybacked.
            ack_delay_ns: 20_000,
            max_control_queue: 1024,
            link_checks_payload: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("mtu {0} leaves no room for data after the {hdr} bytes of headers", hdr = FRAME_HEADER_LEN + MSG_HEADER_LEN)]
    MtuTooSmall(u32),
    #[error("ack_unit must be 1..={MAX_ACK_UNIT}, got {0}")]
    AckUnit(u8),
    #[error("cts_window_frames must be at least 1, got {0}")]
    Window(u32),
    #[error("rsm_pre_frames ({pre}) must be smaller than cts_window_frames ({window})")]
    RsmPosition { pre: u32, window: u32 },
    #[error("rto_min_ns <= rto_initial_ns <= rto_max_ns must hold")]
    Timeouts,
    #[error("ack_delay_ns ({delay}) must be below half of rto_min_ns ({rto_min})")]
    AckDelay { delay: u64, rto_min: u64 },
    #[error("max_retries must be at least 1")]
    Retries,
    #[error("max_early_sends ({early}) must be below max_sends ({sends})")]
    EarlySends { early: usize, sends: usize },
    #[error("peer_timeout_ns ({timeout}) must be at least keepalive_ns and rto_max_ns ({floor}): a live peer needs time to answer a probe")]
    PeerTimeout { timeout: u64, floor: u64 },
    #[error("{0} must be at least 1")]
    ZeroLimit(&'static str),
    #[error("{setting} must be 1..={max}, got {credits}", max = crate::credits::MAX_CREDITS_PER_CLASS)]
    Credits { setting: &'static str, credits: u32 },
    #[error("job size must be 1..=65536 and rank below it (rank {rank}, size {size})")]
    Rank { rank: u32, size: u32 },
}

/// Frames a long message is cut into at least, when frames are adaptive.
pub const PIPELINE_FRAMES: u64 = 8;
/// Smallest adaptive frame payload: below it per-frame costs dominate (measured in
/// `docs/runtime.md`).
pub const MIN_PIPELINE_FRAME_PAYLOAD: u32 = 8192;
/// Frames an eager message may take beyond the fewest so that they all have one size (4 KiB at
/// MTU 1500: four frames of 1 KiB instead of three uneven ones). A message whose frames are
/// uneven ends a GSO run, but each extra frame costs both engines a frame's work: one extra
/// frame paid off, two did not (8 KiB as eight frames of 1 KiB instead of six uneven ones:
/// `nicmsg bench bw` over netns 964 -> 1200 MB/s inline, 630 -> 970-1070 MB/s thread).
const MAX_EXTRA_FRAMES_FOR_EVEN_SPLIT: u64 = 1;
/// Adaptive frame payloads are multiples of this, so frames stay word aligned in buffers.
const FRAME_PAYLOAD_ALIGN: u64 = 64;

/// Largest job: bounds the per-peer table allocated at start-up.
pub const MAX_RANKS: u32 = 65536;

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let min_mtu = (FRAME_HEADER_LEN + MSG_HEADER_LEN + 8) as u32;
        if self.mtu < min_mtu {
            return Err(ConfigError::MtuTooSmall(self.mtu));
        }
        if self.ack_unit == 0 || self.ack_unit > MAX_ACK_UNIT {
            return Err(ConfigError::AckUnit(self.ack_unit));
        }
        if self.cts_window_frames == 0 {
            return Err(ConfigError::Window(self.cts_window_frames));
        }
        if self.rsm_pre_frames >= self.cts_window_frames {
            return Err(ConfigError::RsmPosition {
                pre: self.rsm_pre_frames,
                window: self.cts_window_frames,
            });
        }
        if !(self.rto_min_ns <= self.rto_initial_ns && self.rto_initial_ns <= self.rto_max_ns)
            || self.rto_min_ns == 0
        {
            return Err(ConfigError::Timeouts);
        }
        if self.ack_delay_ns >= self.rto_min_ns / 2 {
            return Err(ConfigError::AckDelay {
                delay: self.ack_delay_ns,
                rto_min: self.rto_min_ns,
            });
        }
        if self.max_retries == 0 {
            return Err(ConfigError::Retries);
        }
        if self.max_early_sends >= self.max_sends {
            return Err(ConfigError::EarlySends {
                early: self.max_early_sends,
                sends: self.max_sends,
            });
        }
        let floor = self.keepalive_ns.max(self.rto_max_ns);
        if self.peer_timeout_ns < floor {
            return Err(ConfigError::PeerTimeout {
                timeout: self.peer_timeout_ns,
                floor,
            });
        }
        for (name, value) in [
            ("max_sends", self.max_sends),
            ("max_recvs", self.max_recvs),
            ("max_incoming", self.max_incoming),
            ("max_control_queue", self.max_control_queue),
            ("keepalive_ns", self.keepalive_ns as usize),
        ] {
            if value == 0 {
                return Err(ConfigError::ZeroLimit(name));
            }
        }
        crate::credits::check_credits(self)
    }

    /// Payload bytes of a frame that carries no message header, at the largest frame size.
    pub fn frame_payload(&self) -> u32 {
        self.mtu - FRAME_HEADER_LEN as u32
    }

    /// Frame payload chosen for a message of `len` bytes sent with `protocol` (BIP's adaptive
    /// packet size): the pipelined size of [`Self::pipelined_frame_payload`], then, for an
    /// eager message of several frames, frames made equal (see [`even_eager_frame_payload`]).
    /// Without `adaptive_frames` every frame is full-sized.
    pub fn frame_payload_for(&self, len: u64, protocol: Protocol) -> u32 {
        if !self.adaptive_frames {
            return self.frame_payload();
        }
        let payload = self.pipelined_frame_payload(len);
        match protocol {
            Protocol::Eager => even_eager_frame_payload(len, payload),
            Protocol::Rendezvous => payload,
        }
    }

    /// A message that fits one frame goes in one frame. A longer one is cut into at least
    /// `PIPELINE_FRAMES` frames, so the receiver copies the first frames while the later ones
    /// are still on their way, but never into frames below `MIN_PIPELINE_FRAME_PAYLOAD`, where
    /// the per-frame cost (a system call and a header) outweighs the overlap. With a 1500-byte
    /// MTU this always gives full frames; it matters for jumbo frames (9000, 65535).
    fn pipelined_frame_payload(&self, len: u64) -> u32 {
        let largest = self.frame_payload();
        if len <= u64::from(largest) - MSG_HEADER_LEN as u64 {
            return largest;
        }
        let pipelined = len
            .div_ceil(PIPELINE_FRAMES)
            .next_multiple_of(FRAME_PAYLOAD_ALIGN);
        pipelined.clamp(
            u64::from(MIN_PIPELINE_FRAME_PAYLOAD.min(largest)),
            u64::from(largest),
        ) as u32
    }
}

/// The frame payload that cuts an eager message of `len` bytes into as many frames as `payload`
/// would, but of equal size where `len` divides evenly (a 1472-byte message at MTU 1500: two
/// frames of 736 bytes instead of 1424 + 48). Every frame of a stream of such messages then has
/// one length, so the transport sends the whole stream as one GSO datagram instead of one per
/// message: with full frames the short last frame ended each run, and a message of two frames
/// cost nearly twice one of one frame (`nicmsg bench bw`, 1400 B -> 1472 B: -27 %).
fn even_eager_frame_payload(len: u64, payload: u32) -> u32 {
    let fewest = Geometry {
        total_len: len,
        frame_payload: payload,
        protocol: Protocol::Eager,
    }
    .frames();
    if fewest <= 1 {
        return payload;
    }
    let frames = (fewest..=fewest + MAX_EXTRA_FRAMES_FOR_EVEN_SPLIT)
        .find(|&frames| len.is_multiple_of(frames))
        .unwrap_or(fewest);
    (len.div_ceil(frames) + MSG_HEADER_LEN as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_frames_pipeline_long_messages_only() {
        let jumbo = Config {
            mtu: 65507,
            ..Config::default()
        };
        let largest = jumbo.frame_payload();
        assert_eq!(
            jumbo.frame_payload_for(100, Protocol::Rendezvous),
            largest,
            "one frame stays one frame"
        );
        assert_eq!(
            jumbo.frame_payload_for(40_000, Protocol::Rendezvous),
            largest
        );
        assert_eq!(
            jumbo.frame_payload_for(70_000, Protocol::Rendezvous),
            8768,
            "70000 / 8, rounded up to 64"
        );
        let small_config = Config {
            mtu: 20_000,
            ..Config::default()
        };
        assert_eq!(
            small_config.frame_payload_for(30_000, Protocol::Rendezvous),
            MIN_PIPELINE_FRAME_PAYLOAD
        );
        let mib = jumbo.frame_payload_for(1 << 20, Protocol::Rendezvous);
        assert_eq!(
            mib, largest,
            "8 frames of 128 KiB would exceed the largest frame"
        );
        let quarter = jumbo.frame_payload_for(256 << 10, Protocol::Rendezvous);
        assert_eq!(quarter, 32 << 10);
        let standard = Config::default();
        for len in [0, 1 << 10, 1 << 20, 1 << 30] {
            assert_eq!(
                standard.frame_payload_for(len, Protocol::Rendezvous),
                standard.frame_payload()
            );
        }
        let fixed = Config {
            adaptive_frames: false,
            ..jumbo
        };
        assert_eq!(
            fixed.frame_payload_for(256 << 10, Protocol::Rendezvous),
            largest
        );
    }

    #[test]
    fn eager_messages_of_several_frames_get_frames_of_one_size() {
        let standard = Config::default();
        let full = standard.frame_payload();
        let header = MSG_HEADER_LEN as u32;
        let one_frame = u64::from(full - header);
        assert_eq!(standard.frame_payload_for(one_frame, Protocol::Eager), full);
        assert_eq!(standard.frame_payload_for(8, Protocol::Eager), full);
        assert_eq!(
            standard.frame_payload_for(1472, Protocol::Eager),
            736 + header,
            "two frames of 736 bytes, not a full one and a short one"
        );
        assert_eq!(
            standard.frame_payload_for(4176, Protocol::Eager),
            1392 + header,
            "three full frames"
        );
        assert_eq!(
            standard.frame_payload_for(4096, Protocol::Eager),
            1024 + header,
            "four frames of 1 KiB rather than three uneven ones"
        );
        assert_eq!(
            standard.frame_payload_for(8192, Protocol::Eager),
            8192u32.div_ceil(6) + header,
            "six frames of 1366 bytes (the last 4 short) rather than eight of 1 KiB: two extra frames cost more"
        );
        for len in (one_frame + 1)..=standard.eager_limit {
            let even = Geometry {
                total_len: len,
                frame_payload: standard.frame_payload_for(len, Protocol::Eager),
                protocol: Protocol::Eager,
            };
            let full_frames = Geometry {
                frame_payload: full,
                ..even
            };
            let (frames, fewest) = (even.frames(), full_frames.frames());
            assert!(
                (fewest..=fewest + MAX_EXTRA_FRAMES_FOR_EVEN_SPLIT).contains(&frames),
                "{len} bytes: {frames} frames, {fewest} at least"
            );
            let last = frames as u32 - 1;
            let all_equal = even.len(0) == even.len(last);
            assert!(
                all_equal || frames == fewest,
                "{len} bytes: extra frames only to even out"
            );
            assert!(even.len(0) - even.len(last) < frames, "{len} bytes");
        }
    }
}

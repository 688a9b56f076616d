//! Counters. Every dropped frame is counted under the reason it was dropped.

use crate::Rank;

/// Why a received frame was discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Not a frame: too short, bad version, bad type, lengths disagree, reserved bits set.
    Malformed,
    /// Checksum mismatch (corruption on the way).
    BadChecksum,
    /// Frame of another job.
    WrongJob,
    /// Addressed to another rank, or from a rank outside the job, or from ourselves.
    WrongRank,
    /// A second copy of something already received; re-acknowledged, never delivered twice.
    Duplicate,
    /// Unexpected data with no posted receive in `drop` mode, or no buffer for it.
    NoPostedReceive,
    /// Message id outside the window, or a frame that contradicts the message state.
    Invalid,
    /// From a peer already declared unreachable.
    DeadPeer,
    /// A reserved frame type this core does not act on (PANIC, admission control).
    Unsupported,
    /// Open mode: from a new peer while every peer slot is in use.
    PeerTableFull,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounts {
    pub malformed: u64,
    pub bad_checksum: u64,
    pub wrong_job: u64,
    pub wrong_rank: u64,
    pub duplicate: u64,
    pub no_posted_receive: u64,
    pub invalid: u64,
    pub dead_peer: u64,
    pub unsupported: u64,
    pub peer_table_full: u64,
}

impl DropCounts {
    pub fn count(&mut self, reason: DropReason) {
        let counter = match reason {
            DropReason::Malformed => &mut self.malformed,
            DropReason::BadChecksum => &mut self.bad_checksum,
            DropReason::WrongJob => &mut self.wrong_job,
            DropReason::WrongRank => &mut self.wrong_rank,
            DropReason::Duplicate => &mut self.duplicate,
            DropReason::NoPostedReceive => &mut self.no_posted_receive,
            DropReason::Invalid => &mut self.invalid,
            DropReason::DeadPeer => &mut self.dead_peer,
            DropReason::Unsupported => &mut self.unsupported,
            DropReason::PeerTableFull => &mut self.peer_table_full,
        };
        *counter += 1;
    }

    pub fn total(&self) -> u64 {
        self.malformed
            + self.bad_checksum
            + self.wrong_job
            + self.wrong_rank
            + self.duplicate
            + self.no_posted_receive
            + self.invalid
            + self.dead_peer
            + self.unsupported
            + self.peer_table_full
    }
}

/// Counters of one endpoint (also kept per peer where the peer is known).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub data_frames_sent: u64,
    pub frames_retransmitted: u64,
    pub frames_received: u64,
    pub bytes_received: u64,
    pub drops: DropCounts,
    /// Eager-sized messages sent by rendezvous because the receiver's eager buffers for this
    /// rank were all taken (its earlier messages not received yet).
    pub credit_stalls: u64,
    /// Times an eager message waited for a credit (and asked the receiver for one) before
    /// either going eager or, when none came back in `credit_wait_ns`, by rendezvous.
    pub credit_waits: u64,
    /// Short messages sent by rendezvous and kept without a receive that the receiver took
    /// as eager into a buffer freed for them (`handover.rs`).
    pub kept_taken_as_eager: u64,
    /// Rendezvous messages whose first grant waited for room in the grant budget
    /// (`Config::grant_budget_bytes`).
    pub grants_deferred: u64,
    /// Control frames not queued because the control queue was full (recovered by retransmit).
    pub control_overflows: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Payload bytes copied once, from the transport's receive buffer to their final place in a
    /// posted receive.
    pub bytes_placed: u64,
    /// Payload bytes the transport put at their final place itself (speculative header/payload
    /// split guessed right): no copy at all.
    pub bytes_placed_direct: u64,
    /// Payload bytes copied out of an unexpected-message buffer.
    pub bytes_copied: u64,
    pub liveness_probes: u64,
    pub peers_declared_unreachable: u64,
    /// Open mode: the peer at this slot's address came back as a new process (its old
    /// conversation was given up on).
    pub peers_restarted: u64,
    /// Acknowledgements of whole eager messages carried by an EAGER frame instead of a
    /// datagram of their own.
    pub acks_piggybacked: u64,
    /// Whole eager messages delivered by the express path (`express.rs`).
    pub messages_express: u64,
    /// Short sends completed when they started, from the core's copy of their bytes.
    pub sends_completed_early: u64,
    /// Of those, sends whose delivery was never confirmed (the peer was declared unreachable
    /// first): reported sent, possibly lost with the peer.
    pub early_sends_unconfirmed: u64,
    /// Started sends the host asked to cancel (a CANCEL to the receiver).
    pub cancels_requested: u64,
    /// Of those, sends whose message the receiver withdrew (completed `Cancelled`).
    pub sends_withdrawn: u64,
    /// Messages from a peer withdrawn here at its request before any receive matched them.
    pub messages_withdrawn: u64,
    /// Messages from a peer claimed by a probe and then discarded unread (`FI_DISCARD`).
    pub messages_discarded: u64,
    /// Frames the peer's host refused (ICMP port unreachable: no process on its port).
    pub frames_refused: u64,
    /// RESET frames sent (this rank declared the peer unreachable) and received (the peer
    /// declared this rank unreachable).
    pub resets_sent: u64,
    pub resets_received: u64,
}

/// Counters for one peer of an endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub rank: Rank,
    pub stats: Stats,
}

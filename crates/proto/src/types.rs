//! Values exchanged between the host and the protocol core.

use thiserror::Error;

/// Rank of a process in the job: 0..size-1 (BIP's logical node numbers).
pub type Rank = u32;
/// Message tag (BIP's receive queue, MPI's tag): 64 bits, as libfabric's tagged messages (Open
/// MPI packs its communicator, protocol bits and MPI tag into one); nicmsg's own API uses 32.
pub type Tag = u64;
/// Time in nanoseconds since an arbitrary origin chosen by the driver. The core never reads a
/// clock: every call that needs the time is handed `now`.
pub type Nanos = u64;

/// A matching context, as MPI's communicator context: a message matches only receives and
/// probes of its own context, whatever their wildcards. The application's traffic is in
/// [`Context::USER`]; the library's own (a barrier's messages) in [`Context::LIBRARY`], so no
/// user receive, however wild, ever takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Context(pub u16);

impl Context {
    /// The application's messages.
    pub const USER: Self = Self(0);
    /// The library's own messages (collectives).
    pub const LIBRARY: Self = Self(1);
    /// PANIC: messages to the programs an engine runs (a program's `SEND`, a host's message to
    /// a program), received by the engine itself; small (a program moves at most a few KiB).
    pub const PROGRAM_MESSAGES: Self = Self(2);
    /// PANIC: a host's requests to an engine (load, unload, run, list, output); a load carries
    /// a whole module, so the engine receives these into larger buffers than messages.
    pub const PROGRAM_REQUESTS: Self = Self(3);
    /// PANIC: messages to a host from programs (`REPLY` to a host) and engines (answers to
    /// requests), received by the host's ordinary receives in this context.
    pub const PROGRAM_ANSWERS: Self = Self(4);
    /// libfabric's untagged messages (`FI_MSG`) on an open endpoint, apart from its tagged
    /// ones (in [`Context::USER`]), as libfabric keeps the two.
    pub const UNTAGGED: Self = Self(5);

    /// True for the contexts whose receives the engine keeps posted at all times (PANIC's
    /// messages and requests): such a receive waiting says nothing about a message the rank
    /// waits for.
    pub fn always_received(self) -> bool {
        self == Self::PROGRAM_MESSAGES || self == Self::PROGRAM_REQUESTS
    }
}

/// Which sender a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Rank(Rank),
    Any,
}

impl Source {
    pub fn matches(self, rank: Rank) -> bool {
        match self {
            Self::Rank(wanted) => wanted == rank,
            Self::Any => true,
        }
    }
}

/// Which tag a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagMatch {
    Tag(Tag),
    Any,
    /// Tags equal to `tag` in every bit not set in `ignore` (libfabric's tag and ignore mask:
    /// Open MPI's `MPI_ANY_TAG` ignores the MPI tag's bits but keeps the communicator's).
    Masked {
        tag: Tag,
        ignore: Tag,
    },
}

impl TagMatch {
    pub fn matches(self, tag: Tag) -> bool {
        match self {
            Self::Tag(wanted) => wanted == tag,
            Self::Any => true,
            Self::Masked {
                tag: wanted,
                ignore,
            } => (wanted ^ tag) & !ignore == 0,
        }
    }

    /// The same match as a tag and an ignore mask (how a descriptor carries it).
    pub fn to_masked(self) -> (Tag, Tag) {
        match self {
            Self::Tag(tag) => (tag, 0),
            Self::Any => (0, Tag::MAX),
            Self::Masked { tag, ignore } => (tag & !ignore, ignore),
        }
    }

    /// The match a tag and an ignore mask describe, in its simplest form.
    pub fn from_masked(tag: Tag, ignore: Tag) -> Self {
        match ignore {
            0 => Self::Tag(tag),
            Tag::MAX => Self::Any,
            _ => Self::Masked {
                tag: tag & !ignore,
                ignore,
            },
        }
    }
}

/// What an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Send,
    Recv,
    Probe,
}

/// Handle of a posted operation. The generation makes a stale handle (of an operation that
/// completed, whose slot was reused) detectable instead of aliasing a new operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId {
    pub kind: OpKind,
    pub index: u32,
    pub generation: u32,
}

/// What a completed operation reports: for a receive or probe, the matched message; for a send,
/// its destination, tag and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub peer: Rank,
    pub tag: Tag,
    pub len: u64,
    /// The message's immediate data, if its sender attached any (libfabric's remote CQ data).
    pub immediate: Option<u32>,
}

/// An operation has finished, successfully or not. Every posted operation yields exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub op: OpId,
    pub result: Result<Status, OpError>,
}

/// Why a posted operation finished without success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum OpError {
    #[error("message of {message_len} bytes from rank {source_rank} tag {tag} does not fit the {buffer_len}-byte receive buffer; nothing was written")]
    Truncated {
        source_rank: Rank,
        tag: Tag,
        message_len: u64,
        buffer_len: u64,
        /// The message's immediate data: a receiver learns who sent it from there (Open MPI
        /// sends its source rank in it), truncated or not.
        immediate: Option<u32>,
    },
    #[error("peer rank {peer} is unreachable: its process ended (its host refused our frames), it stopped answering for the peer timeout (NICMSG_PEER_TIMEOUT), or it gave up on this rank")]
    PeerUnreachable { peer: Rank },
    #[error("operation cancelled")]
    Cancelled,
}

impl OpError {
    /// What a truncated receive learnt of the message it could not hold (its sender, tag,
    /// length and immediate data); `None` for any other failure.
    pub fn truncated_status(&self) -> Option<Status> {
        match *self {
            OpError::Truncated {
                source_rank,
                tag,
                message_len,
                immediate,
                ..
            } => Some(Status {
                peer: source_rank,
                tag,
                len: message_len,
                immediate,
            }),
            _ => None,
        }
    }
}

/// Why a host command was refused. The endpoint is unchanged when one of these is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PostError {
    #[error("rank {rank} is outside the job of {size} ranks")]
    InvalidRank { rank: Rank, size: u32 },
    #[error("the {table} table is full ({limit} entries); complete some operations first")]
    TableFull { table: &'static str, limit: usize },
    #[error("buffer segment {index} does not lie inside registered memory")]
    BadSegment { index: usize },
    #[error("too many buffer segments: {count} (limit {limit})")]
    TooManySegments { count: usize, limit: usize },
    #[error("peer rank {peer} is unreachable")]
    PeerUnreachable { peer: Rank },
    #[error("message of {len} bytes needs more than 2^32 frames")]
    TooLong { len: u64 },
    #[error("peers are added by address only on an open endpoint")]
    NotOpen,
    #[error("the claim names no claimed message (it was received or discarded already, or its sender failed)")]
    UnknownClaim,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum CancelOutcome {
    /// The operation completes with `Cancelled` (it had not left this rank, or was a receive
    /// or probe not matched yet).
    Cancelled,
    /// The send's message may already be with its receiver: the receiver is asked to withdraw
    /// it. The send completes with `Cancelled` if it did (the message is never delivered), or
    /// normally if a receive had matched it first (MPI's `MPI_Test_cancelled` false).
    Requested,
}

/// Why a cancel was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CancelError {
    #[error("no such pending operation (already completed, or never posted)")]
    UnknownOp,
    #[error("the operation is already in progress on the wire and can no longer be cancelled")]
    InProgress,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_tags_compare_only_the_bits_not_ignored() {
        // Open MPI's ofi layout: communicator from bit 34, MPI_ANY_TAG ignores bits 0-30.
        let any_tag_of_3 = TagMatch::Masked {
            tag: 3 << 34,
            ignore: 0x7FFF_FFFF,
        };
        assert!(any_tag_of_3.matches(3 << 34 | 42));
        assert!(!any_tag_of_3.matches(4 << 34 | 42), "another communicator");
        assert!(
            !any_tag_of_3.matches(3 << 34 | 1 << 31),
            "a negative MPI tag"
        );
    }

    #[test]
    fn a_match_survives_the_trip_through_a_descriptor() {
        for wanted in [
            TagMatch::Tag(7),
            TagMatch::Tag(u64::MAX),
            TagMatch::Any,
            TagMatch::Masked {
                tag: 0xF0,
                ignore: 0x0F,
            },
        ] {
            let (tag, ignore) = wanted.to_masked();
            assert_eq!(TagMatch::from_masked(tag, ignore), wanted);
        }
        // Bits under the mask do not matter, and the simplest form comes back.
        assert_eq!(
            TagMatch::from_masked(0xFF, 0x0F),
            TagMatch::Masked {
                tag: 0xF0,
                ignore: 0x0F
            }
        );
        assert_eq!(TagMatch::from_masked(5, u64::MAX), TagMatch::Any);
    }
}

/// What a send carries besides its bytes, and when it completes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// Four bytes delivered with the receive's completion ([`Status::immediate`], libfabric's
    /// remote CQ data).
    pub immediate: Option<u32>,
    /// Complete only once the receiver holds the whole message, never as soon as the core has
    /// copied it (libfabric's `FI_TRANSMIT_COMPLETE` and `FI_DELIVERY_COMPLETE`): a receiver
    /// that dies first fails the send instead of losing a message its sender was told went.
    pub confirmed: bool,
    /// The host keeps the bytes until the send completes but waits for nothing from it (it
    /// reported the send done itself, from a copy of its own: libfabric's provider buffering
    /// a send). The core does not copy them, and the frames say UNWAITED, as those of a send
    /// that completed early from the core's copy do: the receiver may hold the acknowledgement
    /// back for a carrier and gather it with others, instead of a datagram back per message.
    pub unwaited: bool,
}

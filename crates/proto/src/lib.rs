//! # nicmsg protocol core (sans-I/O)
//!
//! One [`Endpoint`] is the whole protocol state of one rank: per-peer state, send and receive
//! operations, incoming messages, matching queues, timers. It performs no I/O, reads no clock and
//! spawns no thread. A driver (the engine, or the simulator) calls, in a loop:
//!
//! 1. host commands: [`Endpoint::post_send`], [`Endpoint::post_recv`], [`Endpoint::post_probe`],
//!    [`Endpoint::iprobe`], [`Endpoint::claim`] (and the receive or discard of a claim),
//!    [`Endpoint::cancel`];
//! 2. [`Endpoint::handle_frame`] for every received datagram, and
//!    [`Endpoint::handle_timeout`] when the deadline from [`Endpoint::poll_timeout`] passes;
//! 3. [`Endpoint::poll_transmit`] until it returns `None`, sending each frame;
//! 4. [`Endpoint::poll_completion`] until it returns `None`, reporting each to the host;
//! 5. sleep until the next frame or [`Endpoint::poll_timeout`].
//!
//! Protocols: eager for short messages (BIP), rendezvous RTS/CTS/RSM/END/MSG-ACK/CLEANUP for
//! long ones (RMPP), collection acknowledgements with adaptive retransmission (EMP). See
//! `docs/protocol.md` for the state machines.

// No unsafe code here: the compiler holds it to that.
#![forbid(unsafe_code)]

mod cancel;
mod claim;
mod collections;
mod config;
mod copy;
mod counters;
mod credit_wait;
mod credits;
mod diagnostics;
mod drain;
mod eager_pool;
mod emit;
mod endpoint;
mod express;
mod first_frame;
mod geometry;
mod handover;
mod lent_copies;
mod liveness;
mod local;
mod matching;
mod memory;
mod open;
mod ops;
mod outputs;
mod peer;
mod peers;
mod piggyback;
mod placement;
mod posted;
mod receiver;
mod recv_side;
mod rto;
mod send_side;
mod sender;
mod sender_lists;
mod slab;
mod state;
mod stats;
mod timers;
mod transmit;
mod types;
mod usage;
mod window;

pub use claim::Claim;
pub use config::{
    Config, ConfigError, UnexpectedPolicy, MAX_ACK_UNIT, MAX_INFLIGHT_COLLECTIONS, MAX_RANKS,
    MSG_WINDOW, RX_TRACKED_FRAMES,
};
#[cfg(any(test, feature = "copy-check"))]
pub use copy::check_copies_at_every_distance;
pub use copy::{copies_by_blocks, copy_bytes, extend_bytes};
pub use credits::{MEDIUM_MESSAGE_MAX, SMALL_MESSAGE_MAX};
pub use endpoint::Endpoint;
pub use first_frame::LookAhead;
pub use lent_copies::{LENT_COPY_ABOVE, MAX_LENT_COPIES};
pub use memory::{HostMemory, RegionId, Segment, SgList, MAX_SEGMENTS};
pub use nicmsg_directory::MAX_OPEN_PEERS;
pub use placement::{ExpectedFrame, PlacedOutcome};
pub use sender::KEPT_REPEAT_DOUBLINGS;
pub use state::PEER_STATE_BYTES;
pub use stats::{DropCounts, DropReason, PeerStats, Stats};
pub use transmit::{Transmit, INLINE_PAYLOAD_MAX};
pub use types::{
    CancelError, CancelOutcome, Completion, Context, Nanos, OpError, OpId, OpKind, PostError, Rank,
    SendOptions, Source, Status, Tag, TagMatch,
};
pub use usage::{TableUsage, Usage};

pub(crate) use slab::{IncomingKey, Key, RecvKey, SendKey};

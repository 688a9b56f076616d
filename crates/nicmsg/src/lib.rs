//! # nicmsg
//!
//! Reliable, zero-copy messaging with MPI-style semantics for commodity Ethernet clusters:
//! ranks, tags, `isend`/`irecv`/`test`/`wait`, probe, cancel, barrier. All protocol work runs in
//! an offload engine: a dedicated thread (`NICMSG_ENGINE=thread`, the default) or the
//! application's own test/wait calls (`inline`).
//!
//! ```no_run
//! use nicmsg::{Comm, Source, TagMatch};
//! let comm = Comm::init()?;
//! if comm.rank() == 0 {
//!     comm.send(b"hello", 1, 7)?;
//! } else if comm.rank() == 1 {
//!     let mut buffer = [0u8; 5];
//!     let status = comm.recv(&mut buffer, Source::Rank(0), TagMatch::Tag(7))?;
//!     assert_eq!(status.len, 5);
//! }
//! # Ok::<(), nicmsg::Error>(())
//! ```

mod backend;
pub mod capi;
mod capi_dgram;
mod capi_handle;
mod capi_lm_dgram;
mod capi_programs;
mod code;
mod comm;
pub mod dgram;
mod error;
pub mod lm_dgram;
mod logging;
mod options;
pub mod programs;
mod report;
mod request;
pub mod tagged;

pub use code::Code;
pub use comm::{Comm, Source, TagMatch};
pub use error::Error;
pub use nicmsg_engine::Snapshot;
pub use options::{
    settings_markdown, EngineMode, Options, Setting, TransportChoice, Value, Values, SETTINGS,
};
pub use programs::{Displayed, ProgramId, Programs, Reply, Segment};
pub use request::Request;

/// Largest user tag (as MPI's `MPI_TAG_UB`); higher tags are reserved for the library.
pub const MAX_TAG: u32 = i32::MAX as u32;

/// What a completed operation reports: the peer (source of a receive, destination of a send),
/// the tag and the message length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: u32,
    pub tag: u32,
    pub len: u64,
    /// On a datagram socket ([`dgram::DgramSocket`]): the sender's address (a receive) or the
    /// destination (a send). `None` in a job.
    pub address: Option<std::net::SocketAddr>,
}

/// A completed operation's tag as the API's 32-bit tags: every message an application's
/// communicator matches was sent with one (the protocol's 64-bit tags serve the libfabric
/// provider), so the high half is zero.
pub(crate) fn api_tag(tag: u64) -> u32 {
    tag as u32
}

impl From<&nicmsg_engine::Outcome> for Status {
    fn from(descriptor: &nicmsg_engine::Outcome) -> Self {
        Self {
            source: descriptor.status_peer,
            tag: api_tag(descriptor.status_tag),
            len: descriptor.status_len,
            address: descriptor.address,
        }
    }
}

//! Every failure of the API as a typed error with a clear message.

use crate::Code;
use nicmsg_engine::ResultCode;
use thiserror::Error;

#[derive(Error)]
pub enum Error {
    #[error("message of {message_len} bytes from rank {source_rank} (tag {tag}) does not fit the {buffer_len}-byte receive buffer; nothing was written")]
    Truncated {
        source_rank: u32,
        tag: u32,
        message_len: u64,
        buffer_len: u64,
    },
    #[error("peer rank {peer} is unreachable: its process ended (its host refused our frames), it stopped answering for the peer timeout (NICMSG_PEER_TIMEOUT), or it gave up on this rank")]
    PeerUnreachable { peer: u32 },
    #[error("{address} is unreachable: it stopped answering, restarted, or forgot this conversation, before the datagram was delivered")]
    AddressUnreachable { address: std::net::SocketAddr },
    #[error("the operation was cancelled")]
    Cancelled,
    #[error("rank {rank} is outside the job of {size} ranks")]
    InvalidRank { rank: u32, size: u32 },
    #[error("tag {0} is outside 0..={max} (higher tags are reserved for the library)", max = crate::MAX_TAG)]
    InvalidTag(u32),
    #[error(
        "the {table} table is full ({limit} entries): complete (wait/test) some operations first"
    )]
    TableFull { table: &'static str, limit: usize },
    #[error("invalid buffer: {0}")]
    BadBuffer(&'static str),
    #[error("the claim names no claimed message: it was received or discarded already, or its sender failed")]
    UnknownClaim,
    #[error("not initialised: {0}")]
    NotInitialised(String),
    #[error("bootstrap failed: {0}")]
    Bootstrap(#[from] nicmsg_bootstrap::BootstrapError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("the engine of rank {rank} refused the program request: {reason}")]
    Program {
        rank: u32,
        status: u32,
        reason: String,
    },
    #[error("the engine thread stopped unexpectedly (a bug in nicmsg: please report it with NICMSG_LOG=debug output); pending operations cannot complete")]
    EngineFailed,
}

/// `Debug` is the message. A `main` returning `Result<(), nicmsg::Error>` (every example does,
/// and users copy them) prints its error with `Debug`; derived, that was `Error:
/// Bootstrap(NoRank)` or `Error: Io(Os { code: 99, .. })`, losing what the message says: which
/// rank, which address or variable, and what to do.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// The C ABI's result code for this error (`include/nicmsg.h`).
    pub fn code(&self) -> Code {
        match self {
            Self::Truncated { .. } => Code::Truncate,
            Self::PeerUnreachable { .. } | Self::AddressUnreachable { .. } => Code::PeerUnreachable,
            Self::Cancelled => Code::Cancelled,
            Self::InvalidRank { .. } => Code::Rank,
            Self::TableFull { .. } => Code::TableFull,
            // As a request already completed (a claim is received once).
            Self::BadBuffer(_) | Self::UnknownClaim => Code::Buffer,
            Self::InvalidTag(_) => Code::Tag,
            Self::NotInitialised(_) => Code::NotInitialised,
            Self::Bootstrap(_) => Code::Bootstrap,
            Self::Config(_) => Code::Config,
            Self::InvalidArgument(_) => Code::Arg,
            Self::Io(_) => Code::Io,
            Self::EngineFailed => Code::EngineFailed,
            Self::Program { .. } => Code::Program,
        }
    }
}

pub(crate) fn from_outcome(
    descriptor: &nicmsg_engine::Outcome,
    size: u32,
    table: &'static str,
    limit: usize,
) -> Result<(), Error> {
    match descriptor.result {
        ResultCode::Success | ResultCode::NotFound => Ok(()),
        ResultCode::Truncated => Err(Error::Truncated {
            source_rank: descriptor.status_peer,
            tag: crate::api_tag(descriptor.status_tag),
            message_len: descriptor.status_len,
            buffer_len: descriptor.buffer_len,
        }),
        ResultCode::PeerUnreachable => Err(Error::PeerUnreachable {
            peer: descriptor.status_peer,
        }),
        ResultCode::Cancelled => Err(Error::Cancelled),
        ResultCode::InvalidRank => Err(Error::InvalidRank {
            rank: descriptor.peer,
            size,
        }),
        ResultCode::TableFull => Err(Error::TableFull { table, limit }),
        ResultCode::BadBuffer => Err(Error::BadBuffer("a segment lies outside registered memory")),
        ResultCode::UnknownClaim => Err(Error::UnknownClaim),
    }
}

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;

/// Everything that can go wrong while a rank finds out who it is and where its peers are.
///
/// Messages name the environment variables or the peer involved, so they can be shown to users
/// as they are.
#[derive(Debug, Error)]
pub enum BootstrapError {
    /// None of the known launcher variables is set.
    #[error(
        "no rank in the environment: run under `nicmsg run`, mpirun, srun, or set \
         NICMSG_RANK/NICMSG_SIZE/NICMSG_BOOTSTRAP"
    )]
    NoRank,

    /// A rank variable is set but none of the variables that give the job size.
    #[error("{rank_var}={rank} is set but the job size is not: set {size_vars}")]
    MissingSize {
        rank_var: &'static str,
        rank: String,
        /// The size variables looked at, e.g. "NICMSG_SIZE" or "OMPI_COMM_WORLD_SIZE or PMIX_SIZE".
        size_vars: String,
    },

    /// A variable holds something that does not parse.
    #[error("{var}={value:?} is not {expected}")]
    InvalidVar {
        var: &'static str,
        value: String,
        /// What was expected, with its article: "a non-negative integer", "an IP address", ...
        expected: &'static str,
    },

    /// The size variable is 0.
    #[error("{size_var}=0: a job needs at least one rank")]
    ZeroSize { size_var: &'static str },

    /// The rank is not below the size.
    #[error("{rank_var}={rank} is not below {size_var}={size}")]
    RankOutOfRange {
        rank_var: &'static str,
        rank: u32,
        size_var: &'static str,
        size: u32,
    },

    /// `NICMSG_BOOTSTRAP` does not resolve to an address.
    #[error("NICMSG_BOOTSTRAP={value:?} is not a usable host:port: {reason}")]
    BadBootstrap { value: String, reason: String },

    /// A job of more than one rank needs `NICMSG_BOOTSTRAP`.
    #[error(
        "NICMSG_BOOTSTRAP is not set, but a job of {size} ranks needs it (rank 0's host:port for \
         the address exchange; `nicmsg run` sets it)"
    )]
    NoBootstrap { size: u32 },

    /// [`crate::JobEnv`] was built by hand with inconsistent fields.
    #[error("invalid job: rank {rank} is not below size {size}")]
    InvalidJob { rank: u32, size: u32 },

    /// Rank 0 could not open its bootstrap service.
    #[error("rank 0: cannot listen on the bootstrap address {addr} (NICMSG_BOOTSTRAP): {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },

    /// A rank other than 0 never reached rank 0's service.
    #[error(
        "rank {rank}: no bootstrap service at {addr} after {timeout:?} (is rank 0 running, and is \
         NICMSG_BOOTSTRAP rank 0's address?); last error: {last}"
    )]
    ConnectTimeout {
        rank: u32,
        addr: SocketAddr,
        timeout: Duration,
        last: String,
    },

    /// Rank 0 did not hear from every rank in time, or a rank did not get the table in time.
    #[error("rank {rank}: bootstrap timed out after {timeout:?}: {waiting_for}")]
    Timeout {
        rank: u32,
        timeout: Duration,
        /// What was still missing, e.g. "waiting for ranks 2, 3 (2 of 4 arrived)".
        waiting_for: String,
    },

    /// Rank 0 refused this rank's hello (wrong job, wrong size, duplicate rank, ...), or aborted
    /// the exchange because of another rank.
    #[error("rank {rank}: rank 0's bootstrap service at {addr} refused: {reason}")]
    Rejected {
        rank: u32,
        addr: SocketAddr,
        reason: String,
    },

    /// Rank 0's end of the connection closed before the address table came: rank 0 exited,
    /// crashed or was killed during the exchange (or the address is another service's, which
    /// hung up on the hello).
    #[error(
        "rank {rank}: rank 0's bootstrap service at {addr} closed the connection {during}: rank \
         0 exited or was killed during the address exchange (its own output, or the launcher's, \
         says why), or NICMSG_BOOTSTRAP names another service"
    )]
    Rank0Closed {
        rank: u32,
        addr: SocketAddr,
        /// "before sending the address table", ...
        during: &'static str,
    },

    /// Rank 0 found an inconsistent peer (it also tells every connected rank).
    #[error("rank 0: bootstrap exchange failed: {0}")]
    InvalidPeer(String),

    /// The other side sent something that is not the bootstrap protocol.
    #[error("bootstrap protocol error with {peer}: {reason}")]
    Protocol { peer: SocketAddr, reason: String },

    /// A PMIx launcher started this rank, but PMIx cannot be used (the library is missing, or
    /// `PMIx_Init` failed) and nicmsg's own bootstrap is not set up either.
    #[error(
        "this rank was started by a PMIx launcher (PMIX_NAMESPACE={namespace}, \
         PMIX_RANK={rank}) but cannot use PMIx: {reason}. Install the PMIx client library \
         (Debian: apt-get install libpmix2; elsewhere put the directory holding libpmix.so.2 in \
         LD_LIBRARY_PATH), or use nicmsg's own bootstrap: set NICMSG_BOOTSTRAP to rank 0's \
         host:port (and NICMSG_BIND_IP) on every rank, e.g. mpirun -x \
         NICMSG_BOOTSTRAP=10.0.0.1:7470 ... (docs/launcher.md)"
    )]
    PmixUnavailable {
        namespace: String,
        rank: String,
        reason: String,
    },

    /// A PMIx call of the bootstrap failed, or another rank published something unusable.
    #[error("rank {rank}: PMIx bootstrap failed while {during}: {reason}")]
    Pmix {
        rank: u32,
        during: &'static str,
        reason: String,
    },

    /// The PMIx job is larger than the PMIx bootstrap takes.
    #[error(
        "the PMIx job has {size} ranks, more than the {max} that nicmsg's PMIx bootstrap takes \
         (every rank reads every rank's records)"
    )]
    TooManyRanks { size: u32, max: u32 },

    /// No network reaches every host of a PMIx job.
    #[error("rank {rank}: cannot choose a bind address: {reason}")]
    NoNetwork { rank: u32, reason: String },

    /// A socket operation failed.
    #[error("bootstrap I/O error with {peer} while {during}: {source}")]
    Io {
        peer: SocketAddr,
        during: &'static str,
        #[source]
        source: io::Error,
    },
}

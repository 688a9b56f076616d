//! What can go wrong while measuring.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error("nicmsg: {0}")]
    Nicmsg(#[from] nicmsg::Error),
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] nicmsg_bootstrap::BootstrapError),
    #[error("{during}: {source}")]
    Io {
        during: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the peer closed the connection")]
    PeerClosed,
    #[error("nothing arrived for {0:?}: raw UDP has no reliability, a datagram was lost")]
    Lost(std::time::Duration),
    #[error("no progress for {0:?}: the peer is gone or stuck")]
    Stalled(std::time::Duration),
    #[error("stream out of step: expected a {expected}-byte message, the header says {got}")]
    OutOfStep { expected: u64, got: u64 },
    #[error("{0}")]
    Usage(String),
}

impl BenchError {
    pub fn io(during: &'static str) -> impl FnOnce(std::io::Error) -> BenchError {
        move |source| BenchError::Io { during, source }
    }
}

//! Placeholder until the external peer adapters land (same interface).
use crate::model::{Pattern, Series};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExternalPeer {
    NetPipe,
    FiUdpRxd,
    FiTcpRxm,
    UcxTcp,
}

impl ExternalPeer {
    pub fn system(&self) -> &'static str {
        match self {
            ExternalPeer::NetPipe => "netpipe",
            ExternalPeer::FiUdpRxd => "fi-udp-rxd",
            ExternalPeer::FiTcpRxm => "fi-tcp-rxm",
            ExternalPeer::UcxTcp => "ucx-tcp",
        }
    }
    pub fn label(&self) -> &'static str {
        self.system()
    }
    pub fn all() -> [ExternalPeer; 4] {
        [ExternalPeer::NetPipe, ExternalPeer::FiUdpRxd, ExternalPeer::FiTcpRxm, ExternalPeer::UcxTcp]
    }
}

pub struct PeerContext {
    pub rank: u32,
    pub server_ip: std::net::IpAddr,
    pub my_ip: std::net::IpAddr,
    pub quick: bool,
    pub iterations: Option<u64>,
    pub timeout: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("external peers are not available yet")]
pub struct ExternalError;

pub fn run(
    _peer: ExternalPeer,
    _pattern: Pattern,
    _sizes: &[u64],
    _ctx: &PeerContext,
) -> Result<Option<Series>, ExternalError> {
    Err(ExternalError)
}

pub fn supports(_peer: ExternalPeer, _pattern: Pattern) -> Result<(), String> {
    Err("not yet".into())
}
impl ExternalPeer {
    pub fn is_installed(&self) -> bool {
        false
    }
    pub fn install_hint(&self) -> &'static str {
        "apt-get install"
    }
}

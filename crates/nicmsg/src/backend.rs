//! Choosing the engine's wire backend at start-up: the UDP transport, or the AF_XDP transport
//! where the rank's address is on an Ethernet interface the library may attach its program to.
//! Each transport implements `nicmsg_engine::Transport` in its own crate; once chosen and told
//! its peers, the engine drives it as a `Box<dyn Transport>` ([`Backend`]).

use crate::options::TransportChoice;
use crate::Error;
use nicmsg_bootstrap::RankAddress;
use nicmsg_engine::Transport;
use nicmsg_udp::UdpTransport;
use nicmsg_xdp::XdpTransport;
use std::net::{IpAddr, SocketAddr};

/// The transport the engine drives.
pub type Backend = Box<dyn Transport>;

/// A transport opened, before it knows its peers.
pub(crate) enum Opened {
    Udp(Box<UdpTransport>),
    Xdp(Box<XdpTransport>),
}

impl Opened {
    /// The addresses peers reach this rank at: its UDP address, and the Ethernet address that
    /// peers framing their own datagrams (AF_XDP) use; and whether its link checks payloads.
    pub(crate) fn address(&self) -> RankAddress {
        match self {
            Opened::Udp(udp) => RankAddress {
                data: udp.local_addr(),
                link: ethernet_address_of(udp.local_addr()),
                checks_payload: udp.checks_payload(),
            },
            // Also when it gives way to UDP later (`connect`): saying "unchecked" is always safe.
            Opened::Xdp(xdp) => RankAddress {
                data: xdp.local_addr(),
                link: Some(xdp.link_address()),
                checks_payload: xdp.checks_payload(),
            },
        }
    }
}

/// The transport to start with: AF_XDP when asked for or, by default, when it can attach to the
/// interface of the rank's address; UDP otherwise.
pub(crate) fn open(udp: UdpTransport, choice: TransportChoice) -> Result<Opened, Error> {
    if choice == TransportChoice::Udp {
        return Ok(Opened::Udp(Box::new(udp)));
    }
    match XdpTransport::open(udp) {
        Ok(xdp) => Ok(Opened::Xdp(Box::new(xdp))),
        Err(refused) if choice == TransportChoice::Auto => {
            tracing::debug!(reason = %refused.reason, "AF_XDP not used: UDP carries the frames");
            Ok(Opened::Udp(Box::new(refused.udp)))
        }
        Err(refused) => Err(Error::Config(format!(
            "NICMSG_TRANSPORT=xdp, but the AF_XDP transport cannot open: {}",
            refused.reason
        ))),
    }
}

/// Tells the transport its peers; AF_XDP gives way to UDP (unless asked for) when another rank
/// shares this rank's address, whose frames go through the kernel's loopback.
pub(crate) fn connect(
    opened: Opened,
    peers: &[RankAddress],
    rank: u32,
    choice: TransportChoice,
) -> Result<Backend, Error> {
    let data: Vec<SocketAddr> = peers.iter().map(|p| p.data).collect();
    match opened {
        Opened::Udp(mut udp) => {
            udp.set_peers(&data);
            Ok(udp)
        }
        Opened::Xdp(mut xdp) => {
            let table: Vec<(SocketAddr, Option<[u8; 6]>)> =
                peers.iter().map(|p| (p.data, p.link)).collect();
            xdp.set_peers(&table);
            if !xdp.shares_address_with_a_peer(rank) {
                return Ok(xdp);
            }
            if choice == TransportChoice::Xdp {
                return Err(Error::Config(
                    "NICMSG_TRANSPORT=xdp, but another rank of the job has this rank's IP \
                     address: their frames go through the kernel's loopback, not the interface"
                        .into(),
                ));
            }
            tracing::debug!("AF_XDP dropped: another rank shares this rank's address");
            let mut udp = xdp.into_udp();
            udp.set_peers(&data);
            Ok(Box::new(udp))
        }
    }
}

fn ethernet_address_of(addr: SocketAddr) -> Option<[u8; 6]> {
    let IpAddr::V4(ip) = addr.ip() else {
        return None;
    };
    nicmsg_xdp::Interface::with_address(ip)
        .ok()
        .flatten()
        .map(|interface| interface.mac)
}

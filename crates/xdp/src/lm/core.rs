//! The station an LM socket runs: a job's, whose nodes are numbered and listed at opening, or
//! an open one, whose peers are addresses bound as they are sent to or heard from
//! (`nicmsg_lm::open`). Either way the socket deals in addresses; this is where they meet the
//! station's peer numbers.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use nicmsg_lm::admission::PeerId;
use nicmsg_lm::open::OpenStation;
use nicmsg_lm::station::{Landing, LandingError, Station};
use nicmsg_lm::Slot;

use super::memory::LmMemory;

/// Where a frame the socket cannot address goes: nowhere (sending to port 0 fails at once).
const NOWHERE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);

pub(super) enum Core {
    /// A job: node `me` of `peers`, by index. (Both stations are boxed: a station is a few
    /// kilobytes, and a socket has one for its life.)
    Job {
        station: Box<Station<LmMemory>>,
        peers: Vec<SocketAddrV4>,
    },
    /// Peers by address.
    Open(Box<OpenStation<LmMemory>>),
}

impl Core {
    pub(super) fn station(&self) -> &Station<LmMemory> {
        match self {
            Core::Job { station, .. } => station,
            Core::Open(open) => open.station(),
        }
    }

    pub(super) fn station_mut(&mut self) -> &mut Station<LmMemory> {
        match self {
            Core::Job { station, .. } => station,
            Core::Open(open) => open.station_mut(),
        }
    }

    /// A frame from the kernel's socket. False if a job's socket has no node at `from`.
    pub(super) fn arrive(&mut self, now: u64, from: SocketAddrV4, frame: &[u8]) -> bool {
        match self {
            Core::Job { station, peers } => {
                let Some(peer) = peer_of(peers, from) else {
                    return false;
                };
                station.arrive(now, peer, frame);
            }
            Core::Open(open) => open.arrive(now, SocketAddr::V4(from), frame),
        }
        true
    }

    /// A frame that landed in `slot`, sent from `from` as its kept headers say.
    pub(super) fn take_landed(
        &mut self,
        now: u64,
        from: SocketAddrV4,
        slot: Slot,
        landing: Landing<'_>,
    ) -> Result<(), LandingError> {
        match self {
            Core::Job { station, peers } => {
                // A frame from no node still fills its slot; the station finds it damaged.
                let peer = peer_of(peers, from).unwrap_or(PeerId::MAX);
                station.take_landed(now, peer, slot, landing)
            }
            Core::Open(open) => open.take_landed(now, SocketAddr::V4(from), slot, landing),
        }
    }

    /// The next frame to send and where to.
    pub(super) fn poll_transmit(&mut self) -> Option<(SocketAddrV4, &mut [u8])> {
        match self {
            Core::Job { station, peers } => {
                let (count, me) = (peers.len(), station.config().me);
                let names_to = |peer: PeerId| ((peer as usize) < count).then_some((me, peer));
                let (to, frame) = station.poll_transmit_to(&names_to)?;
                Some((peers[to as usize], frame))
            }
            Core::Open(open) => {
                let (to, frame) = open.poll_transmit()?;
                // Peers are bound from IPv4 sources and sends to IPv4 addresses only.
                let to = match to {
                    SocketAddr::V4(to) => to,
                    SocketAddr::V6(_) => NOWHERE,
                };
                Some((to, frame))
            }
        }
    }

    pub(super) fn poll_timeout(&self) -> Option<u64> {
        match self {
            Core::Job { station, .. } => station.poll_timeout(),
            Core::Open(open) => open.poll_timeout(),
        }
    }

    pub(super) fn handle_timeout(&mut self, now: u64) {
        match self {
            Core::Job { station, .. } => station.handle_timeout(now),
            Core::Open(open) => open.handle_timeout(now),
        }
    }
}

fn peer_of(peers: &[SocketAddrV4], address: SocketAddrV4) -> Option<PeerId> {
    peers
        .iter()
        .position(|&peer| peer == address)
        .map(|at| at as PeerId)
}

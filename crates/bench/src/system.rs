//! The systems a benchmark can run, by their stable names.

use std::fmt;
use std::str::FromStr;

/// Everything `nicmsg bench` can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// nicmsg, with the engine mode given by `NICMSG_ENGINE` in the worker's environment.
    Nicmsg,
    /// TCP, sleeping in poll(2) when the socket is not ready.
    TcpBlocking,
    /// TCP, spinning on a non-blocking socket.
    TcpBusy,
    /// Raw UDP, spinning on a non-blocking socket, no reliability.
    UdpBusy,
    /// Kernel UDP with one datagram per message (up to 65,507 bytes, cut into IP fragments by
    /// the kernel), sleeping in poll(2): LM's "standard UDP".
    UdpFrag,
    /// nicmsg's LM socket (`nicmsg_xdp::LmSocket`), sending through the AF_XDP transmit ring
    /// from buffers in its UMEM, turning it for 50 us, then sleeping in poll(2).
    Lm,
    /// The same LM socket with its send buffers on the heap: a `sendto` a frame (the A of an
    /// A/B against the transmit ring).
    LmSendto,
    /// The same LM socket without AF_XDP: every transfer by copy through the kernel's UDP
    /// socket, a `sendto` a frame (the A of an A/B against placement).
    LmCopy,
    /// Frames of one MTU through a copy-mode AF_XDP socket's rings and nothing else (no
    /// protocol, no copy in user space), spinning: the floor under any LM path on the link.
    XdpFloor,
    /// An installed program from another project, run by [`crate::external`].
    External(crate::external::ExternalPeer),
    /// Open MPI on a transport (nicmsg's provider among them), run by [`crate::mpi`] for the
    /// MPI patterns.
    Mpi(crate::mpi::MpiSystem),
}

impl System {
    /// The in-project baselines, in the order they are run (before nicmsg, so that nicmsg's
    /// rows can show ratios at once).
    pub const IN_PROJECT_BASELINES: [System; 3] =
        [System::UdpBusy, System::TcpBusy, System::TcpBlocking];

    pub fn name(self) -> &'static str {
        match self {
            System::Nicmsg => "nicmsg",
            System::TcpBlocking => "tcp-blocking",
            System::TcpBusy => "tcp-busy",
            System::UdpBusy => "udp-busy",
            System::UdpFrag => "udp-frag",
            System::Lm => "nicmsg-lm",
            System::LmSendto => "nicmsg-lm-sendto",
            System::LmCopy => "nicmsg-lm-copy",
            System::XdpFloor => "xdp-floor",
            System::External(peer) => peer.system(),
            System::Mpi(system) => system.name(),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            System::Nicmsg => "nicmsg",
            System::TcpBlocking => "TCP (blocking)",
            System::TcpBusy => "TCP (busy-polling)",
            System::UdpBusy => "raw UDP (busy-polling, unreliable)",
            System::UdpFrag => "kernel UDP, IP fragments (blocking, unreliable)",
            System::Lm => "nicmsg LM socket, transmit ring (spin 50 us, then poll)",
            System::LmSendto => "nicmsg LM socket, a sendto a frame (spin 50 us, then poll)",
            System::LmCopy => "nicmsg LM socket, every transfer by copy (spin 50 us, then poll)",
            System::XdpFloor => "AF_XDP rings alone, copy mode (spinning)",
            System::External(peer) => peer.label(),
            System::Mpi(system) => system.label(),
        }
    }

    /// Every baseline: in-project first, then the external peers.
    pub fn all_baselines() -> Vec<System> {
        let mut all = System::IN_PROJECT_BASELINES.to_vec();
        all.extend(crate::external::ExternalPeer::all().map(System::External));
        all
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Systems no pattern runs as a default baseline, run only when named: nicmsg itself, and
/// `lm`'s own series (which other patterns run only when asked). The MPI systems are the MPI
/// patterns' own (`--baselines` may name them there).
const BY_NAME_ONLY: [System; 6] = [
    System::Nicmsg,
    System::Lm,
    System::LmSendto,
    System::LmCopy,
    System::XdpFloor,
    System::UdpFrag,
];

impl FromStr for System {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let known = || {
            BY_NAME_ONLY
                .into_iter()
                .chain(System::all_baselines())
                .chain(crate::mpi::MpiSystem::ALL.map(System::Mpi))
        };
        known().find(|system| system.name() == text).ok_or_else(|| {
            let names: Vec<&str> = known().map(System::name).collect();
            format!("unknown system {text:?}; known: {}", names.join(", "))
        })
    }
}

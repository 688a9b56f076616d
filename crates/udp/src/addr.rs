//! Socket addresses in the kernel's layout, and the canonical form used to look peers up.

use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Room for a `sockaddr_in` or a `sockaddr_in6`: what a UDP socket sends to or receives from.
/// 28 bytes instead of the 128 of `sockaddr_storage`, which keeps the peer table and the
/// receive slots small. Also the address the libfabric provider passes between its C and Rust
/// halves (`union nf_addr`).
#[derive(Clone, Copy)]
#[repr(C)]
pub union RawAddr {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

/// Size the kernel may write as a source address into one [`RawAddr`].
pub const RAW_ADDR_LEN: libc::socklen_t = mem::size_of::<RawAddr>() as libc::socklen_t;

impl RawAddr {
    pub fn zeroed() -> Self {
        // SAFETY: both variants are plain C structs of integers, for which all-zero is valid.
        unsafe { mem::zeroed() }
    }

    /// The address in the form a socket of the given family sends to, with its length. An IPv6
    /// socket reaches IPv4 peers through IPv4-mapped addresses (dual stack); an IPv4 socket reaches
    /// an IPv4-mapped IPv6 address as plain IPv4. Any other IPv6 address on an IPv4 socket is
    /// passed as is, and the kernel refuses it per datagram (counted as a send error).
    pub fn from_socket_addr(addr: SocketAddr, socket_ipv6: bool) -> (Self, libc::socklen_t) {
        let addr = match (addr, socket_ipv6) {
            (SocketAddr::V4(a), true) => {
                SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
            }
            (SocketAddr::V6(a), false) => match a.ip().to_ipv4_mapped() {
                Some(ip) => SocketAddr::V4(SocketAddrV4::new(ip, a.port())),
                None => SocketAddr::V6(a),
            },
            (addr, _) => addr,
        };
        let mut raw = Self::zeroed();
        match addr {
            SocketAddr::V4(a) => {
                raw.v4 = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                (raw, mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
            }
            SocketAddr::V6(a) => {
                raw.v6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                (raw, mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
            }
        }
    }

    /// The address a received datagram came from (`len` bytes written by the kernel), in
    /// canonical form; `0.0.0.0:0`, which is no peer's, for anything else.
    pub fn source_addr(&self, len: libc::socklen_t) -> SocketAddr {
        self.socket_addr(len)
            .unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
    }

    /// The address the kernel wrote (`len` bytes), in canonical form; `None` for a family other
    /// than IPv4 or IPv6, or a short length.
    pub fn socket_addr(&self, len: libc::socklen_t) -> Option<SocketAddr> {
        // SAFETY: the family field lies at the same offset in both variants, and every bit pattern
        // is a valid integer; a zeroed or kernel-written value is always initialised.
        let family = unsafe { self.v4.sin_family } as libc::c_int;
        let len = len as usize;
        match family {
            libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
                // SAFETY: as above; the kernel wrote an IPv4 address.
                let a = unsafe { self.v4 };
                let ip = Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
                // SAFETY: as above; the kernel wrote an IPv6 address.
                let a = unsafe { self.v6 };
                let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                let addr = SocketAddrV6::new(
                    ip,
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                );
                Some(canonical(SocketAddr::V6(addr)))
            }
            _ => None,
        }
    }
}

/// The form in which addresses are compared: IPv4-mapped IPv6 addresses become IPv4 (so a peer
/// given as `10.0.0.2:7000` is recognised when a dual-stack socket reports `[::ffff:10.0.0.2]:7000`),
/// and the IPv6 flow label is ignored (it varies per flow, not per peer).
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => addr,
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(ip) => SocketAddr::V4(SocketAddrV4::new(ip, a.port())),
            None => SocketAddr::V6(SocketAddrV6::new(*a.ip(), a.port(), 0, a.scope_id())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_families() {
        let v4: SocketAddr = "10.1.2.3:7000".parse().unwrap();
        let v6: SocketAddr = "[fd00::2]:7001".parse().unwrap();
        let (raw, len) = RawAddr::from_socket_addr(v4, false);
        assert_eq!(raw.socket_addr(len), Some(v4));
        let (raw, len) = RawAddr::from_socket_addr(v6, true);
        assert_eq!(raw.socket_addr(len), Some(v6));
        // An IPv4 peer on an IPv6 socket travels mapped and comes back canonical.
        let (raw, len) = RawAddr::from_socket_addr(v4, true);
        assert_eq!(len as usize, mem::size_of::<libc::sockaddr_in6>());
        assert_eq!(raw.socket_addr(len), Some(v4));
        // A mapped address on an IPv4 socket becomes plain IPv4.
        let mapped: SocketAddr = "[::ffff:10.1.2.3]:7000".parse().unwrap();
        let (raw, len) = RawAddr::from_socket_addr(mapped, false);
        assert_eq!(len as usize, mem::size_of::<libc::sockaddr_in>());
        assert_eq!(raw.socket_addr(len), Some(v4));
        assert_eq!(RawAddr::zeroed().socket_addr(RAW_ADDR_LEN), None);
    }

    #[test]
    fn canonical_drops_flow_label_keeps_scope() {
        let a = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9, 77, 3));
        assert_eq!(
            canonical(a),
            SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9, 0, 3))
        );
    }
}

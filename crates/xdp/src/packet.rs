//! Ethernet II + IPv4 + UDP framing of the protocol's datagrams. On the wire a frame sent
//! through the AF_XDP socket is exactly what the kernel would send for the same datagram, so a
//! peer may receive it with a plain UDP socket, and frames of peers that send with one arrive
//! here the same way.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Ethernet (14) + IPv4 without options (20) + UDP (8).
pub const HEADERS_LEN: usize = 42;
pub(crate) const ETHER_LEN: usize = 14;
const IP_LEN: usize = 20;
const UDP_LEN: usize = 8;
const ETHER_TYPE_IPV4: [u8; 2] = [0x08, 0x00];
const PROTOCOL_UDP: u8 = 17;
/// Time to live of frames sent: the kernel's default.
const TTL: u8 = 64;
/// Don't Fragment: frames never exceed the link's MTU (the protocol sizes them to it).
const FLAGS_DONT_FRAGMENT: u16 = 0x4000;
/// More-fragments flag and fragment offset.
const FRAGMENT_BITS: u16 = 0x3fff;

/// A UDP endpoint on the link: where a frame comes from or goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Station {
    pub mac: [u8; 6],
    pub addr: SocketAddrV4,
}

/// The headers of frames from one station to another, with the per-frame fields (lengths,
/// identification, checksum) filled in by [`HeaderTemplate::write`].
#[derive(Debug, Clone, Copy)]
pub struct HeaderTemplate {
    bytes: [u8; HEADERS_LEN],
    /// One's-complement sum of the IPv4 header's constant words, so each frame's checksum costs
    /// two additions.
    constant_sum: u32,
}

impl HeaderTemplate {
    pub fn new(from: &Station, to: &Station) -> Self {
        let mut bytes = [0u8; HEADERS_LEN];
        bytes[0..6].copy_from_slice(&to.mac);
        bytes[6..12].copy_from_slice(&from.mac);
        bytes[12..14].copy_from_slice(&ETHER_TYPE_IPV4);
        let ip = &mut bytes[ETHER_LEN..ETHER_LEN + IP_LEN];
        ip[0] = 0x45;
        ip[6..8].copy_from_slice(&FLAGS_DONT_FRAGMENT.to_be_bytes());
        ip[8] = TTL;
        ip[9] = PROTOCOL_UDP;
        ip[12..16].copy_from_slice(&from.addr.ip().octets());
        ip[16..20].copy_from_slice(&to.addr.ip().octets());
        let constant_sum = ones_complement_sum(ip);
        let udp = &mut bytes[ETHER_LEN + IP_LEN..];
        udp[0..2].copy_from_slice(&from.addr.port().to_be_bytes());
        udp[2..4].copy_from_slice(&to.addr.port().to_be_bytes());
        Self {
            bytes,
            constant_sum,
        }
    }

    /// Writes the headers of a frame carrying `payload_len` bytes of UDP payload into `out`.
    /// The UDP checksum is left 0 (none, as IPv4 allows): the protocol's own CRC32C covers
    /// every byte of the payload.
    pub fn write(&self, out: &mut [u8], payload_len: usize, identification: u16) {
        let out = &mut out[..HEADERS_LEN];
        out.copy_from_slice(&self.bytes);
        let total = (IP_LEN + UDP_LEN + payload_len) as u16;
        let ip = &mut out[ETHER_LEN..ETHER_LEN + IP_LEN];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&identification.to_be_bytes());
        let sum = self.constant_sum + u32::from(total) + u32::from(identification);
        ip[10..12].copy_from_slice(&fold(sum).to_be_bytes());
        let udp = &mut out[ETHER_LEN + IP_LEN..];
        udp[4..6].copy_from_slice(&((UDP_LEN + payload_len) as u16).to_be_bytes());
    }
}

/// Sum of big-endian 16-bit words, not yet folded.
fn ones_complement_sum(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum()
}

/// Folds a sum into the 16-bit one's complement checksum.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Why a received frame is not a datagram for us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOurs {
    /// Shorter than its headers say, or its headers are inconsistent.
    Malformed,
    /// Not IPv4/UDP without options and fragments (the steering program passes those to the
    /// kernel, so here it means the program and this parser disagree).
    OtherProtocol,
    BadChecksum,
}

/// A received UDP datagram: its source and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub source: SocketAddrV4,
    pub payload: &'a [u8],
}

/// Checks a received Ethernet frame and finds the UDP payload in it. Link padding after the IP
/// packet (short frames are padded to 60 bytes) is cut off.
pub fn parse(frame: &[u8]) -> Result<Datagram<'_>, NotOurs> {
    if frame.len() < HEADERS_LEN {
        return Err(NotOurs::Malformed);
    }
    let ip = &frame[ETHER_LEN..ETHER_LEN + IP_LEN];
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & FRAGMENT_BITS;
    if frame[12..14] != ETHER_TYPE_IPV4 || ip[0] != 0x45 || ip[9] != PROTOCOL_UDP || fragment != 0 {
        return Err(NotOurs::OtherProtocol);
    }
    if fold(ones_complement_sum(ip)) != 0 {
        return Err(NotOurs::BadChecksum);
    }
    let ip_total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let udp = &frame[ETHER_LEN + IP_LEN..HEADERS_LEN];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if ip_total != IP_LEN + udp_len || udp_len < UDP_LEN || ETHER_LEN + ip_total > frame.len() {
        return Err(NotOurs::Malformed);
    }
    let source = SocketAddrV4::new(
        Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        u16::from_be_bytes([udp[0], udp[1]]),
    );
    Ok(Datagram {
        source,
        payload: &frame[HEADERS_LEN..ETHER_LEN + ip_total],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn station(last: u8, port: u16) -> Station {
        Station {
            mac: [0x02, 0, 0, 0, 0, last],
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 213, 7, last), port),
        }
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        let template = HeaderTemplate::new(&station(1, 40000), &station(2, 40001));
        let mut out = vec![0u8; HEADERS_LEN + payload.len()];
        template.write(&mut out, payload.len(), 0x1234);
        out[HEADERS_LEN..].copy_from_slice(payload);
        out
    }

    #[test]
    fn headers_are_the_kernels() {
        // The header checksum worked out by hand: the words sum to 0xfb13, so it is 0x04ec.
        let out = frame(b"hello");
        assert_eq!(&out[0..6], &[0x02, 0, 0, 0, 0, 2]);
        assert_eq!(&out[6..12], &[0x02, 0, 0, 0, 0, 1]);
        assert_eq!(
            &out[14..34],
            &[
                0x45, 0, 0, 33, 0x12, 0x34, 0x40, 0, 64, 17, 0x04, 0xec, 10, 213, 7, 1, 10, 213, 7,
                2
            ]
        );
        assert_eq!(&out[34..42], &[0x9c, 0x40, 0x9c, 0x41, 0, 13, 0, 0]);
        assert_eq!(fold(ones_complement_sum(&out[14..34])), 0);
    }

    #[test]
    fn parse_reads_what_write_wrote() {
        let out = frame(b"payload bytes");
        let datagram = parse(&out).expect("ours");
        assert_eq!(datagram.source, station(1, 40000).addr);
        assert_eq!(datagram.payload, b"payload bytes");
    }

    #[test]
    fn padding_after_the_packet_is_cut_off() {
        let mut out = frame(b"x");
        out.resize(60, 0);
        assert_eq!(parse(&out).expect("ours").payload, b"x");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused_without_panicking(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)
        ) {
            if let Ok(datagram) = parse(&bytes) {
                proptest::prop_assert!(datagram.payload.len() + HEADERS_LEN <= bytes.len());
            }
        }

        #[test]
        fn any_written_frame_parses_back(
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..1500),
            identification: u16,
        ) {
            let template = HeaderTemplate::new(&station(3, 1), &station(4, 65535));
            let mut out = vec![0u8; HEADERS_LEN + payload.len()];
            template.write(&mut out, payload.len(), identification);
            out[HEADERS_LEN..].copy_from_slice(&payload);
            let datagram = parse(&out).expect("a frame this module wrote");
            proptest::prop_assert_eq!(datagram.payload, &payload[..]);
            proptest::prop_assert_eq!(datagram.source, station(3, 1).addr);
        }
    }

    #[test]
    fn bad_frames_are_refused() {
        let good = frame(b"data");
        for cut in 0..good.len() {
            assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = good.clone();
        bad[14 + 10] ^= 1;
        assert_eq!(parse(&bad), Err(NotOurs::BadChecksum));
        let mut tcp = good.clone();
        tcp[14 + 9] = 6;
        assert_eq!(parse(&tcp), Err(NotOurs::OtherProtocol));
        let mut fragment = good.clone();
        fragment[14 + 6] |= 0x20;
        assert_eq!(parse(&fragment), Err(NotOurs::OtherProtocol));
        let mut long_udp = good.clone();
        long_udp[34 + 5] += 1;
        assert_eq!(parse(&long_udp), Err(NotOurs::Malformed));
    }
}

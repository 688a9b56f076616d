//! What each rank publishes through PMIx, as text (PMIx strings; readable in a PMIx server's
//! debug output too), and how it is read back.
//!
//! ```text
//! host record (key nicmsg.host.1), one line each:
//!   nicmsg-host 1                         version
//!   host vm                               the host's name, for messages
//!   net 02287d3d-...-38449751f738/4026531833   the network namespace: kernel boot id/netns inode
//!   if eth0 192.0.2.2/24                  every IPv4 address but loopback, interface order
//! address record (key nicmsg.addr.1), one line:
//!   nicmsg-addr 2 192.0.2.2:40001 02:42:ac:11:00:02 checked
//!                 data address, Ethernet address or -, whether the rank's link checks payloads
//! ```
//!
//! Two ranks with the same `net` share a network namespace on one running kernel, so they reach
//! each other over loopback; `net -` means unknown (never taken as shared).

use std::net::{Ipv4Addr, SocketAddr};

use crate::RankAddress;

/// First line of a host record.
const HOST_MAGIC: &str = "nicmsg-host 1";
/// First word and version of an address record.
const ADDR_MAGIC: &str = "nicmsg-addr 2";

/// Most IPv4 addresses a rank publishes: its first 32 besides loopback. Hosts with more (a
/// router, a container host with many bridges) rarely need the later ones, and each costs
/// about 40 bytes of every rank's memory for every rank of the job (PMIx keeps all records
/// on every node after the collecting fence).
pub const MAX_ADDRESSES: usize = 32;
/// Longest host record accepted: a 255-byte name, a 100-byte namespace identity and 32
/// addresses of at most 42 bytes fit in it. Bounds what a foreign or corrupt record makes a
/// rank parse and keep: at [`super::MAX_RANKS`] ranks, 32 MiB.
pub const MAX_HOST_RECORD: usize = 2048;
/// Longest address record: an IPv6 address with scope, a port and an Ethernet address fit in
/// 128 bytes.
pub const MAX_ADDR_RECORD: usize = 128;
/// Longest host name (DNS names are at most 253 bytes; Linux's are at most 64).
const MAX_HOST_NAME: usize = 255;
/// Longest network namespace identity (a 36-byte boot id, a slash, a 20-digit inode).
const MAX_NET_ID: usize = 100;
/// Longest interface name (Linux: IFNAMSIZ - 1).
const MAX_INTERFACE_NAME: usize = 15;

/// One IPv4 address of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub interface: String,
    pub ip: Ipv4Addr,
    /// Length of the network prefix, 0..=32.
    pub prefix: u8,
}

impl InterfaceAddress {
    /// The network this address is on, with `prefix` bits of network part.
    pub fn network_with(&self, prefix: u8) -> Ipv4Addr {
        network(self.ip, prefix)
    }
}

/// `ip` with all but the first `prefix` bits cleared.
pub fn network(ip: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0);
    Ipv4Addr::from(u32::from(ip) & mask)
}

/// Where a rank runs: published before the bind address is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRecord {
    /// The host's name, for messages only.
    pub host: String,
    /// Its network namespace (kernel boot id and namespace inode); `None`: unknown.
    pub net: Option<String>,
    /// IPv4 addresses but loopback, in the order the system lists them.
    pub addresses: Vec<InterfaceAddress>,
}

impl HostRecord {
    /// The record as published.
    pub fn encode(&self) -> String {
        let mut text = format!("{HOST_MAGIC}\nhost {}\n", self.host);
        text.push_str(&format!("net {}\n", self.net.as_deref().unwrap_or("-")));
        for a in self.addresses.iter().take(MAX_ADDRESSES) {
            text.push_str(&format!("if {} {}/{}\n", a.interface, a.ip, a.prefix));
        }
        text
    }

    /// Reads a published record; the error says what is wrong with it.
    pub fn decode(text: &str) -> Result<HostRecord, String> {
        if text.len() > MAX_HOST_RECORD {
            return Err(format!(
                "{} bytes, over the {MAX_HOST_RECORD}-byte limit",
                text.len()
            ));
        }
        let mut lines = text.lines();
        if lines.next() != Some(HOST_MAGIC) {
            return Err(format!("it does not start with {HOST_MAGIC:?}"));
        }
        let mut host = None;
        let mut net = None;
        let mut addresses = Vec::new();
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["host", name] if !name.is_empty() && name.len() <= MAX_HOST_NAME => {
                    host = Some(name.to_owned())
                }
                ["net", id] if !id.is_empty() && id.len() <= MAX_NET_ID => {
                    net = Some((id != "-").then(|| id.to_owned()))
                }
                ["if", interface, address]
                    if !interface.is_empty() && interface.len() <= MAX_INTERFACE_NAME =>
                {
                    if addresses.len() == MAX_ADDRESSES {
                        return Err(format!("more than {MAX_ADDRESSES} addresses"));
                    }
                    let (ip, prefix) = parse_cidr(address)
                        .ok_or_else(|| format!("{address:?} is not an IPv4 address/prefix"))?;
                    addresses.push(InterfaceAddress {
                        interface: interface.to_owned(),
                        ip,
                        prefix,
                    });
                }
                _ => return Err(format!("unexpected line {line:?}")),
            }
        }
        Ok(HostRecord {
            host: host.ok_or("no host line")?,
            net: net.ok_or("no net line")?,
            addresses,
        })
    }
}

fn parse_cidr(text: &str) -> Option<(Ipv4Addr, u8)> {
    let (ip, prefix) = text.split_once('/')?;
    let prefix: u8 = prefix.parse().ok().filter(|&p| p <= 32)?;
    Some((ip.parse().ok()?, prefix))
}

/// A host name fit for a record: whitespace and control characters replaced, at most
/// [`MAX_HOST_NAME`] bytes, never empty.
pub fn clean_host_name(name: &str) -> String {
    let mut clean: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    while clean.len() > MAX_HOST_NAME {
        clean.pop();
    }
    if clean.is_empty() {
        clean.push('?');
    }
    clean
}

/// An interface name fit for a record (Linux's have no whitespace and at most 15 bytes; the
/// name is only shown in messages).
pub fn clean_interface_name(name: &str) -> String {
    let mut clean = clean_host_name(name);
    while clean.len() > MAX_INTERFACE_NAME {
        clean.pop();
    }
    clean
}

/// A namespace identity fit for a record, or `None`.
pub fn clean_net_id(id: &str) -> Option<String> {
    let id = id.trim();
    (!id.is_empty()
        && id != "-"
        && id.len() <= MAX_NET_ID
        && !id.chars().any(|c| c.is_whitespace() || c.is_control()))
    .then(|| id.to_owned())
}

/// The address record: where this rank's data socket is.
pub fn encode_address(address: RankAddress) -> String {
    let link = match address.link {
        Some(mac) => mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        None => "-".into(),
    };
    let checked = if address.checks_payload {
        CHECKED
    } else {
        UNCHECKED
    };
    format!("{ADDR_MAGIC} {} {link} {checked}", address.data)
}

/// The last word of an address record: whether the rank's link checks payloads
/// (`RankAddress::checks_payload`).
const CHECKED: &str = "checked";
const UNCHECKED: &str = "unchecked";

/// Reads an address record; the error says what is wrong with it.
pub fn decode_address(text: &str) -> Result<RankAddress, String> {
    if text.len() > MAX_ADDR_RECORD {
        return Err(format!(
            "{} bytes, over the {MAX_ADDR_RECORD}-byte limit",
            text.len()
        ));
    }
    let rest = text
        .strip_prefix(ADDR_MAGIC)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| format!("it does not start with {ADDR_MAGIC:?}"))?;
    let [data, link, checked] = rest.split(' ').collect::<Vec<_>>()[..] else {
        return Err(format!(
            "{text:?} is not \"{ADDR_MAGIC} ADDRESS LINK {CHECKED}|{UNCHECKED}\""
        ));
    };
    let data: SocketAddr = data
        .parse()
        .map_err(|_| format!("{data:?} is not an IP address and port"))?;
    if data.port() == 0 || data.ip().is_unspecified() {
        return Err(format!("{data} is not an address a peer can send to"));
    }
    let link = match link {
        "-" => None,
        mac => Some(parse_mac(mac).ok_or_else(|| format!("{mac:?} is not an Ethernet address"))?),
    };
    let checks_payload = match checked {
        CHECKED => true,
        UNCHECKED => false,
        other => return Err(format!("{other:?} is not {CHECKED} or {UNCHECKED}")),
    };
    Ok(RankAddress {
        data,
        link,
        checks_payload,
    })
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| {
            (b.len() == 2)
                .then(|| u8::from_str_radix(b, 16).ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(interface: &str, cidr: &str) -> InterfaceAddress {
        let (ip, prefix) = parse_cidr(cidr).unwrap();
        InterfaceAddress {
            interface: interface.into(),
            ip,
            prefix,
        }
    }

    #[test]
    fn host_records_round_trip() {
        let record = HostRecord {
            host: "node-1.cluster".into(),
            net: Some("02287d3d-be4f-4edc-998a-38449751f738/4026531833".into()),
            addresses: vec![
                address("eth0", "192.0.2.2/24"),
                address("ib0", "10.1.0.7/16"),
            ],
        };
        let text = record.encode();
        assert_eq!(
            text,
            "nicmsg-host 1\nhost node-1.cluster\nnet 02287d3d-be4f-4edc-998a-38449751f738/\
             4026531833\nif eth0 192.0.2.2/24\nif ib0 10.1.0.7/16\n"
        );
        assert_eq!(HostRecord::decode(&text).unwrap(), record);
        let unknown = HostRecord {
            host: "h".into(),
            net: None,
            addresses: vec![],
        };
        assert_eq!(HostRecord::decode(&unknown.encode()).unwrap(), unknown);
    }

    #[test]
    fn the_largest_host_record_fits_its_limit() {
        let record = HostRecord {
            host: "h".repeat(MAX_HOST_NAME),
            net: Some("n".repeat(MAX_NET_ID)),
            addresses: (0..MAX_ADDRESSES + 5)
                .map(|i| address(&"i".repeat(15), &format!("255.255.255.{i}/32")))
                .collect(),
        };
        let text = record.encode();
        assert!(text.len() <= MAX_HOST_RECORD, "{} bytes", text.len());
        let decoded = HostRecord::decode(&text).unwrap();
        assert_eq!(
            decoded.addresses.len(),
            MAX_ADDRESSES,
            "published: the first 32"
        );
    }

    #[test]
    fn bad_host_records_are_refused_saying_why() {
        let good = "nicmsg-host 1\nhost a\nnet x/1\nif eth0 10.0.0.1/8\n";
        assert!(HostRecord::decode(good).is_ok());
        for (text, why) in [
            ("", "does not start"),
            ("nicmsg-host 2\nhost a\nnet -\n", "does not start"),
            ("nicmsg-host 1\nnet -\n", "no host line"),
            ("nicmsg-host 1\nhost a\n", "no net line"),
            ("nicmsg-host 1\nhost a b\nnet -\n", "unexpected line"),
            (
                "nicmsg-host 1\nhost a\nnet -\nif eth0 10.0.0.1/33\n",
                "not an IPv4",
            ),
            (
                "nicmsg-host 1\nhost a\nnet -\nif eth0 ::1/64\n",
                "not an IPv4",
            ),
            (
                "nicmsg-host 1\nhost a\nnet -\nif eth0 10.0.0.1\n",
                "not an IPv4",
            ),
            ("nicmsg-host 1\nhost a\nnet -\nextra\n", "unexpected line"),
        ] {
            let error = HostRecord::decode(text).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
        let too_many = format!(
            "nicmsg-host 1\nhost a\nnet -\n{}",
            "if e 10.0.0.1/8\n".repeat(MAX_ADDRESSES + 1)
        );
        assert!(HostRecord::decode(&too_many)
            .unwrap_err()
            .contains("more than 32"));
        let too_long = format!("{good}{}", "x".repeat(MAX_HOST_RECORD));
        assert!(HostRecord::decode(&too_long).unwrap_err().contains("limit"));
    }

    #[test]
    fn address_records_round_trip() {
        for address in [
            RankAddress::new("192.0.2.2:40001".parse().unwrap()),
            RankAddress {
                data: "10.213.3.2:9".parse().unwrap(),
                link: Some([0x02, 0x42, 0xac, 0x11, 0x00, 0xff]),
                checks_payload: false,
            },
            RankAddress {
                checks_payload: true,
                ..RankAddress::new("10.213.3.3:9".parse().unwrap())
            },
            RankAddress::new("[fe80::1%7]:65535".parse().unwrap()),
        ] {
            let text = encode_address(address);
            assert!(text.len() <= MAX_ADDR_RECORD);
            assert_eq!(decode_address(&text).unwrap(), address, "{text}");
        }
        assert_eq!(
            encode_address(RankAddress {
                data: "10.0.0.1:5".parse().unwrap(),
                link: Some([0, 1, 2, 3, 4, 0xab]),
                checks_payload: true,
            }),
            "nicmsg-addr 2 10.0.0.1:5 00:01:02:03:04:ab checked"
        );
    }

    #[test]
    fn bad_address_records_are_refused() {
        for text in [
            "",
            "nicmsg-addr 1 10.0.0.1:5 -",
            "nicmsg-addr 3 10.0.0.1:5 - checked",
            "nicmsg-addr 2 10.0.0.1:5 -",
            "nicmsg-addr 2 10.0.0.1:5 - yes",
            "nicmsg-addr 2 10.0.0.1 - checked",
            "nicmsg-addr 2 10.0.0.1:0 - checked",
            "nicmsg-addr 2 0.0.0.0:5 - unchecked",
            "nicmsg-addr 2 10.0.0.1:5 00:01:02:03:04 checked",
            "nicmsg-addr 2 10.0.0.1:5 00:01:02:03:04:zz checked",
            "nicmsg-addr 2 10.0.0.1:5 - checked extra",
        ] {
            assert!(decode_address(text).is_err(), "{text:?} accepted");
        }
    }

    #[test]
    fn names_are_cleaned() {
        assert_eq!(clean_host_name(" my host\n"), "my_host");
        assert_eq!(clean_host_name(""), "?");
        assert_eq!(clean_host_name(&"a".repeat(300)).len(), MAX_HOST_NAME);
        assert_eq!(
            clean_interface_name("a-very-long-interface-name"),
            "a-very-long-int"
        );
        assert_eq!(clean_net_id(" abc/12\n").as_deref(), Some("abc/12"));
        assert_eq!(clean_net_id(""), None);
        assert_eq!(clean_net_id("a b"), None);
    }

    #[test]
    fn networks() {
        let ip = Ipv4Addr::new(192, 0, 2, 77);
        assert_eq!(network(ip, 24), Ipv4Addr::new(192, 0, 2, 0));
        assert_eq!(network(ip, 32), ip);
        assert_eq!(network(ip, 0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(network(ip, 1), Ipv4Addr::new(128, 0, 0, 0));
    }
}

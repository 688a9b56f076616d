//! Choosing the address a rank binds its data socket to, from every rank's host record.
//!
//! * Every rank of the job in this rank's network namespace (one machine, the usual
//!   `mpirun -n 4` on a laptop): **loopback**, 127.0.0.1.
//! * Otherwise the job runs on several hosts (or namespaces) and needs a network that reaches
//!   all of them: the first network of rank 0's addresses, in the order its system lists them,
//!   in which **every rank has an address** and no two ranks on different hosts have the
//!   **same** address (the same address on two hosts means a network local to each, such as
//!   every Docker host's 172.17.0.1/16 bridge). Each rank binds its own address in that
//!   network. Rank 0's list is the one every rank walks, so all ranks pick the same network.
//! * No such network: an error listing rank 0's networks and why each does not do, with the
//!   way out (`NICMSG_BIND_IP` on every rank).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use super::record::HostRecord;

/// The bind address and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// `NICMSG_BIND_IP` set on this rank.
    Explicit(IpAddr),
    /// Every rank shares this rank's network namespace.
    Loopback { ranks: usize },
    /// This rank's address on the job's network.
    Network {
        ip: Ipv4Addr,
        interface: String,
        network: Ipv4Addr,
        prefix: u8,
        hosts: usize,
    },
}

impl Choice {
    pub fn ip(&self) -> IpAddr {
        match self {
            Choice::Explicit(ip) => *ip,
            Choice::Loopback { .. } => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Choice::Network { ip, .. } => IpAddr::V4(*ip),
        }
    }
}

impl fmt::Display for Choice {
    /// The reason, as the log shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::Explicit(ip) => write!(f, "{ip}: set by NICMSG_BIND_IP"),
            Choice::Loopback { ranks } => write!(
                f,
                "127.0.0.1 (loopback): all {ranks} ranks share this host's network namespace"
            ),
            Choice::Network {
                ip,
                interface,
                network,
                prefix,
                hosts,
            } => write!(
                f,
                "{ip} on {interface}: {network}/{prefix} is the first network of rank 0's that \
                 reaches all {hosts} hosts of the job"
            ),
        }
    }
}

/// Most of rank 0's networks an error lists, with why each did not do.
const LISTED_NETWORKS: usize = 8;

/// The bind address of rank `me`, from every rank's host record (index = rank).
pub fn choose(me: usize, records: &[HostRecord]) -> Result<Choice, String> {
    let mine = &records[me];
    if let Some(net) = &mine.net {
        if records.iter().all(|r| r.net.as_ref() == Some(net)) {
            return Ok(Choice::Loopback {
                ranks: records.len(),
            });
        }
    }
    // A rank whose namespace is unknown counts as a host of its own.
    let host_of = |rank: usize| -> (Option<&str>, usize) {
        match &records[rank].net {
            Some(net) => (Some(net.as_str()), 0),
            None => (None, rank),
        }
    };
    let hosts = {
        let mut all: Vec<_> = (0..records.len()).map(host_of).collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    };

    let mut refusals = Vec::new();
    for candidate in &records[0].addresses {
        if candidate.prefix == 0 || candidate.ip.is_loopback() {
            continue;
        }
        let prefix = candidate.prefix;
        let net = candidate.network_with(prefix);
        match check_network(records, net, prefix, &host_of) {
            Ok(()) => {
                let own = mine
                    .addresses
                    .iter()
                    .find(|a| a.network_with(prefix) == net)
                    .expect("checked: every rank has an address in the network");
                return Ok(Choice::Network {
                    ip: own.ip,
                    interface: own.interface.clone(),
                    network: net,
                    prefix,
                    hosts,
                });
            }
            Err(why) => refusals.push(format!("{net}/{prefix} ({}): {why}", candidate.interface)),
        }
    }
    let host0 = &records[0].host;
    let networks = if refusals.is_empty() {
        format!("rank 0 (host {host0}) has no IPv4 address besides loopback")
    } else {
        let shown = refusals.len().min(LISTED_NETWORKS);
        let more = refusals.len() - shown;
        format!(
            "rank 0's networks (host {host0}): {}{}",
            refusals[..shown].join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        )
    };
    Err(format!(
        "no IPv4 network reaches all {hosts} hosts of the job: {networks}. Set NICMSG_BIND_IP on \
         every rank to its address on the network the job should use"
    ))
}

/// Whether every rank has an address in `net/prefix`, and ranks on different hosts have
/// different ones.
fn check_network<'a>(
    records: &'a [HostRecord],
    net: Ipv4Addr,
    prefix: u8,
    host_of: &dyn Fn(usize) -> (Option<&'a str>, usize),
) -> Result<(), String> {
    let mut owners: HashMap<Ipv4Addr, usize> = HashMap::new();
    for (rank, record) in records.iter().enumerate() {
        let Some(address) = record
            .addresses
            .iter()
            .find(|a| a.network_with(prefix) == net)
        else {
            return Err(format!(
                "rank {rank} (host {}) has no address in it",
                record.host
            ));
        };
        if let Some(&other) = owners.get(&address.ip) {
            if host_of(other) != host_of(rank) {
                return Err(format!(
                    "ranks {other} (host {}) and {rank} (host {}) both have {}, so it is a \
                     network local to each host",
                    records[other].host, record.host, address.ip
                ));
            }
        } else {
            owners.insert(address.ip, rank);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::record::InterfaceAddress;
    use super::*;

    fn host(name: &str, net: Option<&str>, addresses: &[(&str, &str)]) -> HostRecord {
        HostRecord {
            host: name.into(),
            net: net.map(Into::into),
            addresses: addresses
                .iter()
                .map(|(interface, cidr)| {
                    let (ip, prefix) = cidr.split_once('/').unwrap();
                    InterfaceAddress {
                        interface: (*interface).into(),
                        ip: ip.parse().unwrap(),
                        prefix: prefix.parse().unwrap(),
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn one_namespace_is_loopback() {
        let a = host("vm", Some("boot/1"), &[("eth0", "192.0.2.2/24")]);
        let records = vec![a.clone(), a.clone(), a.clone(), a];
        for me in 0..4 {
            let choice = choose(me, &records).unwrap();
            assert_eq!(choice, Choice::Loopback { ranks: 4 });
            assert_eq!(choice.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        assert_eq!(
            choose(0, &records).unwrap().to_string(),
            "127.0.0.1 (loopback): all 4 ranks share this host's network namespace"
        );
    }

    #[test]
    fn unknown_namespaces_are_never_shared() {
        let a = host("vm", None, &[("eth0", "192.0.2.2/24")]);
        let error = choose(0, &[a.clone(), a]).unwrap_err();
        assert!(error.contains("both have 192.0.2.2"), "{error}");
    }

    #[test]
    fn two_hosts_take_the_network_they_share() {
        let a = host(
            "a",
            Some("boot-a/1"),
            &[
                ("docker0", "172.17.0.1/16"),
                ("eth1", "10.1.0.1/24"),
                ("eth0", "192.0.2.1/24"),
            ],
        );
        let b = host(
            "b",
            Some("boot-b/1"),
            &[
                ("eth0", "192.0.2.7/24"),
                ("eth1", "10.1.0.2/24"),
                ("docker0", "172.17.0.1/16"),
            ],
        );
        let records = vec![a.clone(), a, b.clone(), b];
        let choices: Vec<Choice> = (0..4).map(|me| choose(me, &records).unwrap()).collect();
        // docker0 is the same address on both hosts; eth1 is the first shared one of rank 0's.
        assert_eq!(choices[0].ip(), "10.1.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(choices[1].ip(), "10.1.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(choices[2].ip(), "10.1.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(choices[3].ip(), "10.1.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(
            choices[2].to_string(),
            "10.1.0.2 on eth1: 10.1.0.0/24 is the first network of rank 0's that reaches all 2 \
             hosts of the job"
        );
    }

    #[test]
    fn rank_0s_prefix_decides_membership() {
        let a = host("a", Some("a/1"), &[("eth0", "10.1.2.3/24")]);
        // Host b sees the same wire as a /16; its address is inside a's /24.
        let b = host("b", Some("b/1"), &[("eth0", "10.1.2.9/16")]);
        assert_eq!(
            choose(1, &[a, b]).unwrap().ip(),
            "10.1.2.9".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn namespaces_on_one_machine_count_as_hosts() {
        let rank = |i: u8| {
            host(
                "vm",
                Some(&format!("boot/{i}")),
                &[("eth0", &format!("10.213.7.{}/24", i + 1))],
            )
        };
        let records: Vec<HostRecord> = (0..3).map(rank).collect();
        let choice = choose(2, &records).unwrap();
        assert_eq!(choice.ip(), "10.213.7.3".parse::<IpAddr>().unwrap());
        assert!(matches!(choice, Choice::Network { hosts: 3, .. }));
    }

    #[test]
    fn no_shared_network_is_an_error_saying_why() {
        let a = host(
            "a",
            Some("a/1"),
            &[("docker0", "172.17.0.1/16"), ("eth0", "192.0.2.1/24")],
        );
        let b = host(
            "b",
            Some("b/1"),
            &[("docker0", "172.17.0.1/16"), ("eth0", "198.51.100.1/24")],
        );
        let error = choose(1, &[a, b]).unwrap_err();
        assert_eq!(
            error,
            "no IPv4 network reaches all 2 hosts of the job: rank 0's networks (host a): \
             172.17.0.0/16 (docker0): ranks 0 (host a) and 1 (host b) both have 172.17.0.1, so \
             it is a network local to each host; 192.0.2.0/24 (eth0): rank 1 (host b) has no \
             address in it. Set NICMSG_BIND_IP on every rank to its address on the network the \
             job should use"
        );
        let bare = host("a", Some("a/1"), &[]);
        let other = host("b", Some("b/1"), &[("eth0", "192.0.2.2/24")]);
        let error = choose(1, &[bare, other]).unwrap_err();
        assert!(
            error.contains("rank 0 (host a) has no IPv4 address besides loopback"),
            "{error}"
        );
    }

    #[test]
    fn long_refusal_lists_are_cut() {
        let many: Vec<(String, String)> = (0..20)
            .map(|i| (format!("e{i}"), format!("10.{i}.0.1/16")))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let a = host("a", Some("a/1"), &many);
        let b = host("b", Some("b/1"), &[]);
        let error = choose(0, &[a, b]).unwrap_err();
        assert!(error.contains("; and 12 more."), "{error}");
    }
}

//! Two network namespaces joined by a veth pair, or by a bridge in a third namespace (where
//! nftables can drop frames whatever sent them, AF_XDP's transmit ring included), for the
//! tests that need real interfaces.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Two namespaces `<prefix>-0` and `<prefix>-1` with a veth pair between them, or each with a
/// veth to a bridge in `<prefix>-br`; removed on drop.
pub struct Pair {
    pub names: [String; 2],
    bridge: Option<String>,
}

impl Pair {
    pub fn create(prefix: &str) -> Option<Pair> {
        let pair = Self::empty(prefix, None)?;
        let names = &pair.names;
        let ok = ip(&["netns", "add", &names[0]])
            && ip(&["netns", "add", &names[1]])
            && ip(&[
                "-n", &names[0], "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
                "netns", &names[1],
            ]);
        if !ok {
            eprintln!("skipped: `ip` cannot make namespaces and veth pairs here");
            return None;
        }
        pair.address_both();
        Some(pair)
    }

    /// The two namespaces joined through a bridge in a third one.
    pub fn create_bridged(prefix: &str) -> Option<Pair> {
        let bridge = format!("{prefix}-br");
        let pair = Self::empty(prefix, Some(bridge.clone()))?;
        let mut ok = ip(&["netns", "add", &bridge])
            && ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])
            && ip(&["-n", &bridge, "link", "set", "br0", "up"]);
        for (rank, name) in pair.names.iter().enumerate() {
            let port = format!("port{rank}");
            ok = ok
                && ip(&["netns", "add", name])
                && ip(&[
                    "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", &port,
                    "netns", &bridge,
                ])
                && ip(&["-n", &bridge, "link", "set", &port, "master", "br0"])
                && ip(&["-n", &bridge, "link", "set", &port, "up"]);
        }
        if !ok {
            eprintln!("skipped: `ip` cannot make namespaces, bridges and veth pairs here");
            return None;
        }
        pair.address_both();
        Some(pair)
    }

    /// Sets the MTU of every link of the pair (each `eth0`, and the bridge and its ports).
    /// False if a link refuses it.
    pub fn set_mtu(&self, mtu: u32) -> bool {
        let mtu = mtu.to_string();
        let mut ok = true;
        if let Some(bridge) = &self.bridge {
            for link in ["port0", "port1", "br0"] {
                ok = ok && ip(&["-n", bridge, "link", "set", link, "mtu", &mtu]);
            }
        }
        for name in &self.names {
            ok = ok && ip(&["-n", name, "link", "set", "eth0", "mtu", &mtu]);
        }
        ok
    }

    /// Drops `percent` of the IPv4 frames crossing the bridge (either way), with nftables in
    /// the bridge's namespace. False if the pair has no bridge or `nft` cannot load the rule.
    pub fn drop_on_bridge(&self, percent: u32) -> bool {
        let Some(bridge) = &self.bridge else {
            return false;
        };
        let rules = format!(
            "table bridge nmloss {{\n  chain forward {{\n    type filter hook forward priority 0; \
             policy accept;\n    ether type ip numgen random mod 100 < {percent} drop\n  }}\n}}\n"
        );
        let child = Command::new("ip")
            .args(["netns", "exec", bridge, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            return false;
        };
        use std::io::Write;
        let wrote = child
            .stdin
            .take()
            .is_some_and(|mut stdin| stdin.write_all(rules.as_bytes()).is_ok());
        wrote && child.wait().is_ok_and(|status| status.success())
    }

    /// A pair not made yet (left-overs of an earlier run removed), if this runs as root.
    fn empty(prefix: &str, bridge: Option<String>) -> Option<Pair> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (network namespaces, BPF)");
            return None;
        }
        let pair = Pair {
            names: [format!("{prefix}-0"), format!("{prefix}-1")],
            bridge,
        };
        pair.remove();
        Some(pair)
    }

    /// Brings both `eth0` up with their addresses.
    fn address_both(&self) {
        for (rank, name) in self.names.iter().enumerate() {
            let address = format!("{}/24", address_of(rank));
            assert!(ip(&["-n", name, "link", "set", "eth0", "up"]));
            assert!(ip(&["-n", name, "addr", "add", &address, "dev", "eth0"]));
        }
    }

    fn remove(&self) {
        for name in self.names.iter().chain(&self.bridge) {
            Command::new("ip")
                .args(["netns", "delete", name])
                .output()
                .ok();
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.remove();
    }
}

pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

pub fn address_of(rank: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 214, 9, rank as u8 + 1)
}

/// Moves the calling thread into namespace `name`.
pub fn enter(name: &str) {
    let file = std::fs::File::open(format!("/var/run/netns/{name}")).expect("namespace file");
    // SAFETY: setns on an open namespace descriptor; only this thread changes namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}

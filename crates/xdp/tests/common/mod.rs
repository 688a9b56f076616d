//! Two network namespaces joined by a veth pair, for the tests that need real interfaces.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Two namespaces `<prefix>-0` and `<prefix>-1` with a veth pair between them; removed on drop.
pub struct Pair {
    pub names: [String; 2],
}

impl Pair {
    pub fn create(prefix: &str) -> Option<Pair> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (network namespaces, BPF)");
            return None;
        }
        let names = [format!("{prefix}-0"), format!("{prefix}-1")];
        let pair = Pair {
            names: names.clone(),
        };
        pair.remove();
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
        for (rank, name) in names.iter().enumerate() {
            let address = format!("{}/24", address_of(rank));
            assert!(ip(&["-n", name, "link", "set", "eth0", "up"]));
            assert!(ip(&["-n", name, "addr", "add", &address, "dev", "eth0"]));
        }
        Some(pair)
    }

    fn remove(&self) {
        for name in &self.names {
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

//! The kernel's IPv4 neighbour table: a peer's Ethernet address, once the kernel has resolved
//! it. Frames sent through an AF_XDP socket skip the kernel's routing and ARP, so their
//! Ethernet headers need the address from here; until the kernel has it (no datagram has gone
//! to the peer yet), the caller sends through the kernel's socket, which resolves it.

use std::io;
use std::net::Ipv4Addr;

/// The table as the kernel shows it to the calling thread's network namespace (a thread may
/// have entered another namespace than its process's, which `/proc/net` shows).
const TABLE: &str = "/proc/thread-self/net/arp";
/// `ATF_COM`: the entry is complete (its hardware address is known).
const FLAG_COMPLETE: u32 = 0x2;

/// The Ethernet address of `ip` on interface `interface`, if the kernel has resolved it.
pub fn ethernet_address(ip: Ipv4Addr, interface: &str) -> io::Result<Option<[u8; 6]>> {
    let table = std::fs::read_to_string(TABLE)?;
    Ok(lookup(&table, ip, interface))
}

/// Finds `ip` on `interface` in the text of the table (a header line, then
/// `address type flags hardware-address mask device` per entry).
fn lookup(table: &str, ip: Ipv4Addr, interface: &str) -> Option<[u8; 6]> {
    table.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let address: Ipv4Addr = fields.next()?.parse().ok()?;
        let _hardware_type = fields.next()?;
        let flags = u32::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
        let mac = parse_mac(fields.next()?)?;
        let device = fields.nth(1)?;
        (address == ip && device == interface && flags & FLAG_COMPLETE != 0).then_some(mac)
    })
}

/// `aa:bb:cc:dd:ee:ff`.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE_TEXT: &str = "\
IP address       HW type     Flags       HW address            Mask     Device
10.77.0.2        0x1         0x2         aa:bb:cc:00:11:22     *        veth0
10.77.0.3        0x1         0x0         00:00:00:00:00:00     *        veth0
10.77.0.4        0x1         0x2         aa:bb:cc:00:11:44     *        other
";

    #[test]
    fn complete_entries_on_the_interface_are_found() {
        let ip = |last| Ipv4Addr::new(10, 77, 0, last);
        assert_eq!(
            lookup(TABLE_TEXT, ip(2), "veth0"),
            Some([0xaa, 0xbb, 0xcc, 0x00, 0x11, 0x22])
        );
        assert_eq!(lookup(TABLE_TEXT, ip(3), "veth0"), None, "incomplete");
        assert_eq!(lookup(TABLE_TEXT, ip(4), "veth0"), None, "another device");
        assert_eq!(lookup(TABLE_TEXT, ip(9), "veth0"), None, "absent");
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let text = "header\n10.0.0.1 0x1 0x2 zz:bb:cc:dd:ee:ff * eth0\n10.0.0.1 0x1\n";
        assert_eq!(lookup(text, Ipv4Addr::new(10, 0, 0, 1), "eth0"), None);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
    }
}

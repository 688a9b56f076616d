//! The network interface that holds an IPv4 address: its index, hardware address, subnet and
//! MTU, which the transport needs to attach its program and frame its datagrams.

use std::ffi::CStr;
use std::io;
use std::net::Ipv4Addr;

/// An Ethernet interface with an IPv4 address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    pub addr: Ipv4Addr,
    pub netmask: Ipv4Addr,
    pub mtu: u32,
}

impl Interface {
    /// The interface `addr` is assigned to; `None` if no interface has it, or the one that has
    /// it has no Ethernet address (loopback, tunnels).
    pub fn with_address(addr: Ipv4Addr) -> io::Result<Option<Self>> {
        let addresses = InterfaceAddresses::read()?;
        let Some((name, netmask)) = addresses
            .ipv4()
            .find(|(_, a, _)| *a == addr)
            .map(|(n, _, m)| (n, m))
        else {
            return Ok(None);
        };
        let Some(mac) = addresses.mac_of(&name) else {
            return Ok(None);
        };
        let c_name = std::ffi::CString::new(name.clone()).map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        let mtu = read_mtu(&name)?;
        Ok(Some(Self {
            name,
            index,
            mac,
            addr,
            netmask,
            mtu,
        }))
    }

    /// True if `peer` is on this interface's subnet (reached without a router).
    pub fn on_link(&self, peer: Ipv4Addr) -> bool {
        let mask = u32::from(self.netmask);
        u32::from(peer) & mask == u32::from(self.addr) & mask
    }
}

/// The MTU, through `SIOCGIFMTU` (sysfs shows the interfaces of the namespace that mounted it,
/// which need not be ours).
fn read_mtu(name: &str) -> io::Result<u32> {
    // SAFETY: plain system call; closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a plain C struct, valid when zeroed.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *slot = byte as libc::c_char;
    }
    // SAFETY: `request` is an `ifreq` with the name set; the kernel writes the MTU into it.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut request) };
    let error = io::Error::last_os_error();
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(error);
    }
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member.
    Ok(unsafe { request.ifr_ifru.ifru_mtu } as u32)
}

/// The list `getifaddrs` returns, freed on drop.
struct InterfaceAddresses {
    head: *mut libc::ifaddrs,
}

impl InterfaceAddresses {
    fn read() -> io::Result<Self> {
        let mut head = std::ptr::null_mut();
        // SAFETY: plain call; the list is freed in drop.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { head })
    }

    fn entries(&self) -> impl Iterator<Item = &libc::ifaddrs> {
        // SAFETY: a list built by getifaddrs, alive as long as `self`.
        std::iter::successors(unsafe { self.head.as_ref() }, |entry| unsafe {
            entry.ifa_next.as_ref()
        })
    }

    /// (interface name, address, netmask) of every IPv4 address.
    fn ipv4(&self) -> impl Iterator<Item = (String, Ipv4Addr, Ipv4Addr)> + '_ {
        self.entries().filter_map(|entry| {
            let addr = ipv4_of(entry.ifa_addr)?;
            let netmask = ipv4_of(entry.ifa_netmask).unwrap_or(Ipv4Addr::BROADCAST);
            Some((name_of(entry), addr, netmask))
        })
    }

    /// The Ethernet address of interface `name` (its `AF_PACKET` entry).
    fn mac_of(&self, name: &str) -> Option<[u8; 6]> {
        self.entries().find_map(|entry| {
            let addr = entry.ifa_addr;
            // SAFETY: a non-null address of the entry, read only for its family first.
            if addr.is_null() || i32::from(unsafe { (*addr).sa_family }) != libc::AF_PACKET {
                return None;
            }
            if name_of(entry) != name {
                return None;
            }
            // SAFETY: an AF_PACKET address is a `sockaddr_ll`.
            let link = unsafe { &*addr.cast::<libc::sockaddr_ll>() };
            (link.sll_halen == 6 && link.sll_hatype == libc::ARPHRD_ETHER)
                .then(|| link.sll_addr[..6].try_into().expect("6 bytes"))
        })
    }
}

impl Drop for InterfaceAddresses {
    fn drop(&mut self) {
        // SAFETY: the list from getifaddrs, freed once.
        unsafe { libc::freeifaddrs(self.head) };
    }
}

fn name_of(entry: &libc::ifaddrs) -> String {
    // SAFETY: getifaddrs gives every entry a NUL-terminated name.
    unsafe { CStr::from_ptr(entry.ifa_name) }
        .to_string_lossy()
        .into_owned()
}

fn ipv4_of(addr: *const libc::sockaddr) -> Option<Ipv4Addr> {
    // SAFETY: read only when non-null, for its family first.
    if addr.is_null() || i32::from(unsafe { (*addr).sa_family }) != libc::AF_INET {
        return None;
    }
    // SAFETY: an AF_INET address is a `sockaddr_in`.
    let v4 = unsafe { &*addr.cast::<libc::sockaddr_in>() };
    Some(Ipv4Addr::from(v4.sin_addr.s_addr.to_ne_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_no_ethernet_address() {
        assert_eq!(Interface::with_address(Ipv4Addr::LOCALHOST).unwrap(), None);
    }

    #[test]
    fn an_address_nobody_has_is_on_no_interface() {
        // TEST-NET-3, never assigned.
        let addr = Ipv4Addr::new(203, 0, 113, 77);
        assert_eq!(Interface::with_address(addr).unwrap(), None);
    }

    #[test]
    fn subnet_membership() {
        let interface = Interface {
            name: "eth0".into(),
            index: 2,
            mac: [2, 0, 0, 0, 0, 1],
            addr: Ipv4Addr::new(10, 213, 7, 1),
            netmask: Ipv4Addr::new(255, 255, 255, 0),
            mtu: 1500,
        };
        assert!(interface.on_link(Ipv4Addr::new(10, 213, 7, 200)));
        assert!(!interface.on_link(Ipv4Addr::new(10, 213, 8, 1)));
    }
}

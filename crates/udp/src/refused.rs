//! Frames a peer's host refused: the ICMP "port unreachable" a kernel answers for a UDP port no
//! socket listens on, which is what a peer's host says once the peer's process has ended. With
//! `IP_RECVERR` (`IPV6_RECVERR`) the kernel keeps each such error, with the address the refused
//! datagram was sent to, on the socket's error queue; the socket then reports `EPOLLERR` and its
//! next receive call fails once with `ECONNREFUSED`. [`drain`] reads the queue.
//!
//! This is the fastest evidence of a dead peer there is (a round trip, instead of a timeout),
//! and it is evidence only: the protocol core decides (`Endpoint::handle_refused`).

use crate::addr::{RawAddr, RAW_ADDR_LEN};
use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

/// Errors read from the queue per [`drain`]: bounds the work one call does when a burst of
/// frames to a dead peer was refused (the kernel also bounds the queue by the socket's receive
/// buffer).
pub const MAX_REFUSALS_PER_DRAIN: usize = 64;

/// `SO_EE_ORIGIN_ICMP` and `SO_EE_ORIGIN_ICMP6` from `linux/errqueue.h`.
const ORIGIN_ICMP: u8 = 2;
const ORIGIN_ICMP6: u8 = 3;

/// `struct sock_extended_err` from `linux/errqueue.h`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ExtendedError {
    errno: u32,
    origin: u8,
    kind: u8,
    code: u8,
    pad: u8,
    info: u32,
    data: u32,
}

/// Asks the kernel to queue ICMP errors on the socket (off by default for unconnected sockets,
/// which then never hear of them).
pub(crate) fn enable(fd: RawFd, ipv6: bool) -> io::Result<()> {
    let (level, name) = if ipv6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR)
    };
    let on: libc::c_int = 1;
    // SAFETY: passes a pointer to a live `c_int` and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            ptr::from_ref(&on).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads the socket's error queue (without blocking) and calls `refused` with the destination
/// of every datagram refused as "port unreachable". Other errors (a network unreachable, an
/// MTU too small) are read and ignored: they say nothing about the peer's process. Returns how
/// many errors were read.
pub(crate) fn drain(fd: RawFd, refused: &mut dyn FnMut(SocketAddr)) -> usize {
    let mut read = 0;
    while read < MAX_REFUSALS_PER_DRAIN {
        let Some((addr, error)) = read_one(fd) else {
            break;
        };
        read += 1;
        let icmp = matches!(error.origin, ORIGIN_ICMP | ORIGIN_ICMP6);
        if icmp && error.errno == libc::ECONNREFUSED as u32 {
            if let Some(addr) = addr {
                refused(addr);
            }
        }
    }
    read
}

/// One entry of the error queue: the address its datagram was sent to, and the error.
fn read_one(fd: RawFd) -> Option<(Option<SocketAddr>, ExtendedError)> {
    let mut name = RawAddr::zeroed();
    // Room for the extended error and the offender's address the kernel appends to it.
    let mut control = [0u64; 16];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: byte.len(),
    };
    // SAFETY: all-zero is a valid msghdr; the pointers are set below.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_name = ptr::from_mut(&mut name).cast();
    msg.msg_namelen = RAW_ADDR_LEN;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control);
    // SAFETY: every pointer in `msg` points at a live buffer of the length given.
    let rc = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if rc < 0 {
        return None;
    }
    let error = extended_error(&msg)?;
    Some((name.socket_addr(msg.msg_namelen), error))
}

/// The `IP_RECVERR`/`IPV6_RECVERR` control message of a `recvmsg` on the error queue.
fn extended_error(msg: &libc::msghdr) -> Option<ExtendedError> {
    // SAFETY: `msg` was filled by `recvmsg`; CMSG_FIRSTHDR/CMSG_NXTHDR stay inside
    // `msg_control` as the kernel's `msg_controllen` bounds them.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: non-null, inside the control buffer (above).
        let header = unsafe { &*cmsg };
        let ours = (header.cmsg_level == libc::SOL_IP && header.cmsg_type == libc::IP_RECVERR)
            || (header.cmsg_level == libc::SOL_IPV6 && header.cmsg_type == libc::IPV6_RECVERR);
        let long_enough = header.cmsg_len as usize
            // SAFETY: CMSG_LEN is arithmetic on its argument.
            >= unsafe { libc::CMSG_LEN(mem::size_of::<ExtendedError>() as u32) } as usize;
        if ours && long_enough {
            // SAFETY: the kernel wrote a `sock_extended_err` there (checked length); it may be
            // unaligned in the buffer.
            let data = unsafe { libc::CMSG_DATA(cmsg) };
            // SAFETY: `data` points to that `sock_extended_err`, whole inside the control
            // buffer (length checked above); `read_unaligned`, as the buffer aligns nothing.
            return Some(unsafe { ptr::read_unaligned(data.cast::<ExtendedError>()) });
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    None
}

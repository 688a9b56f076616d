//! The control messages of UDP segmentation offload (linux/udp.h): `UDP_SEGMENT` asks the kernel
//! to cut a sent datagram into segments; `UDP_GRO` hands over a coalesced run of received
//! datagrams with their segment size.

use std::mem;
use std::ptr;

/// `UDP_SEGMENT`: the socket option and control message type of GSO.
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO`: the socket option, and the control message giving the segment size of a
/// coalesced datagram.
pub(crate) const UDP_GRO: libc::c_int = 104;

/// Room for one control message carrying one `int` (`CMSG_SPACE(4)` = 24 on 64-bit Linux),
/// aligned as a `cmsghdr` must be.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct ControlBuffer([u8; 32]);

impl ControlBuffer {
    pub const EMPTY: ControlBuffer = ControlBuffer([0; 32]);
}

/// Points `hdr` at `control` for the kernel to write received control messages into.
pub(crate) fn receive_control_into(hdr: &mut libc::msghdr, control: &mut ControlBuffer) {
    hdr.msg_control = control.0.as_mut_ptr().cast();
    hdr.msg_controllen = mem::size_of::<ControlBuffer>() as _;
}

/// Points `hdr` at `control`, filled with a `UDP_SEGMENT` message: the kernel cuts the
/// datagram into segments of `segment` bytes (the last may be shorter).
pub(crate) fn set_segment_size(hdr: &mut libc::msghdr, control: &mut ControlBuffer, segment: u16) {
    // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic.
    let (space, len) = unsafe {
        (
            libc::CMSG_SPACE(mem::size_of::<u16>() as u32) as usize,
            libc::CMSG_LEN(mem::size_of::<u16>() as u32) as usize,
        )
    };
    debug_assert!(space <= mem::size_of::<ControlBuffer>());
    hdr.msg_control = control.0.as_mut_ptr().cast();
    hdr.msg_controllen = space as _;
    // SAFETY: `msg_control` points at `space` writable, suitably aligned bytes, so the first
    // header is inside them and its data has room for the `u16`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(hdr);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = UDP_SEGMENT;
        (*cmsg).cmsg_len = len as _;
        ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
    }
}

/// The segment size the kernel gave a received datagram it coalesced (`UDP_GRO`), if any.
///
/// # Safety
/// `hdr` must come from a completed receive into a buffer set by [`receive_control_into`]: its
/// `msg_control` holds `msg_controllen` bytes of control messages written by the kernel.
pub(crate) unsafe fn gro_segment_size(hdr: &libc::msghdr) -> Option<usize> {
    // SAFETY: the control messages are well formed (contract).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == UDP_GRO {
                let size = ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                return usize::try_from(size).ok().filter(|&s| s > 0);
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    None
}

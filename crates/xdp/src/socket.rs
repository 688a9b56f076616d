//! An AF_XDP socket in copy mode with its own UMEM: the memory area frames are received into and
//! sent from, cut into fixed chunks, and the four rings that pass chunks between us and the
//! kernel. Half of the chunks circulate between the fill and rx rings (receiving), the other
//! half between a free list, the tx ring and the completion ring (sending).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::ring::Ring;

/// Bytes per chunk: one page, the size copy mode and every driver accept.
pub const CHUNK_BYTES: usize = 4096;
/// Headroom the kernel leaves before a received frame in its chunk (`XDP_PACKET_HEADROOM`):
/// a frame lands this many bytes after its fill address.
pub const KERNEL_HEADROOM: usize = 256;
/// Largest frame (Ethernet header included) a chunk holds after the kernel's headroom.
pub const MAX_FRAME_BYTES: usize = CHUNK_BYTES - KERNEL_HEADROOM;
/// Largest frame sent as a chain of descriptors on a socket bound with scatter-gather: a
/// 9000-byte MTU's with its Ethernet header (three chunks).
pub const MAX_CHAIN_BYTES: usize = 9000 + crate::packet::ETHER_LEN;
/// Chunks for receiving and entries of the fill and rx rings (16 MiB): a rank that does not
/// poll for a while (an inline engine while the application computes) keeps a 256-frame window
/// from each of 16 senders before the kernel must drop, about what a UDP socket's 4 MiB buffer
/// holds (the protocol recovers from drops, at the price of a timeout).
pub const RX_CHUNKS: u32 = 4096;
/// Chunks for sending and entries of the tx and completion rings: a full send batch of every
/// turn (8 x 64 frames) twice over.
pub const TX_CHUNKS: u32 = 1024;

/// `struct xdp_desc`: a frame in the UMEM.
pub type Desc = libc::xdp_desc;

/// The UMEM: an anonymous, page-aligned mapping registered with the socket. Shared (`Arc`)
/// with the parts lent out of it ([`UmemPart`]), so it stays mapped while any is alive.
struct Umem {
    area: NonNull<u8>,
    len: usize,
}

// SAFETY: a plain memory mapping; who may touch which bytes is tracked by its users (the
// rings, and `UmemPart`'s owners).
unsafe impl Send for Umem {}
// SAFETY: as above; `Umem` itself hands out no references.
unsafe impl Sync for Umem {}

impl Umem {
    fn map(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping; unmapped in drop.
        let area = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if area == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            area: NonNull::new(area.cast()).expect("mmap returned a mapping"),
            len,
        })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, dropped with its last user: the socket (closed
        // first, field order in `XskSocket`) and every part lent out of it.
        unsafe { libc::munmap(self.area.as_ptr().cast(), self.len) };
    }
}

/// How a socket is bound to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// Copy mode: the kernel copies each frame between its own buffers and the UMEM. Every
    /// driver has it (veth has only it), and it is the one mode a program attached in generic
    /// mode can feed.
    Copy,
    /// Zero-copy mode where the interface's driver has it (the NIC reads and writes the UMEM
    /// itself), else copy mode. For programs attached in native mode;
    /// [`XskSocket::is_zero_copy`] says which mode runs.
    ZeroCopyElseCopy,
}

/// How the receiving part of the UMEM is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode {
    /// Fixed chunks, every one in the fill ring, each given back as soon as its frame was
    /// delivered (the transport's mode).
    Chunks,
    /// LM's in-place placement: the UMEM in unaligned-chunk mode with `bytes` of it for
    /// receiving, and the caller posts fill addresses itself, anywhere in those bytes
    /// ([`XskSocket::post_fill`]), so each frame lands where the caller chose. Then
    /// `sending_bytes` the caller lays send buffers out in ([`XskSocket::sending_memory`]) and
    /// sends frames from where they are ([`XskSocket::queue_frame`]). With `scatter_gather`
    /// the socket is bound with `XDP_USE_SG` (kernel 6.6 and later): a frame longer than a
    /// chunk's [`MAX_FRAME_BYTES`] is received across consecutive fill addresses, each filled to
    /// [`MAX_FRAME_BYTES`], and sent as a chain of descriptors of at most a chunk.
    Placing {
        bytes: usize,
        sending_bytes: usize,
        scatter_gather: bool,
    },
}

/// A part of a UMEM lent out: send buffers whose frames leave by transmit descriptors
/// pointing at them. Keeps the UMEM mapped while it lives.
pub(crate) struct UmemPart {
    umem: Arc<Umem>,
    start: usize,
    len: usize,
}

impl UmemPart {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes `at..at + len` of this part, as a part of their own.
    pub(crate) fn part(&self, at: usize, len: usize) -> UmemPart {
        assert!(at + len <= self.len, "a part inside its parent");
        UmemPart {
            umem: Arc::clone(&self.umem),
            start: self.start + at,
            len,
        }
    }

    /// The part's first byte. Who may touch the bytes, and when, is the owner's to track:
    /// the kernel reads them while a transmit descriptor pointing here is outstanding.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `start` is inside the mapping (checked when parts are cut), which
        // `self.umem` keeps alive.
        unsafe { self.umem.area.as_ptr().add(self.start) }
    }
}

/// A bound AF_XDP socket on one receive queue of one interface.
pub struct XskSocket {
    // Field order is drop order: rings, then the socket, then the memory it used.
    fill: Ring<u64>,
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    completion: Ring<u64>,
    fd: OwnedFd,
    umem: Arc<Umem>,
    /// Send chunks not in the tx or completion ring.
    free_tx: Vec<u64>,
    /// Frames queued from the caller's sending memory that the kernel has not finished.
    frames_in_flight: u32,
    mode: ReceiveMode,
}

// SAFETY: every raw pointer is into mappings the socket owns; one thread drives it at a time.
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// Opens a socket in copy mode on `queue` of interface `ifindex`, with its UMEM and rings,
    /// and gives the kernel every receive chunk.
    pub fn open(ifindex: u32, queue: u32) -> io::Result<Self> {
        Self::open_with(ifindex, queue, ReceiveMode::Chunks, Binding::Copy)
    }

    /// Opens a socket whose receive memory is used as `mode` says, bound as `binding` says.
    pub fn open_with(
        ifindex: u32,
        queue: u32,
        mode: ReceiveMode,
        binding: Binding,
    ) -> io::Result<Self> {
        // SAFETY: plain system call; the descriptor is owned right after.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let (rx_bytes, sending_bytes, flags) = match mode {
            ReceiveMode::Chunks => (RX_CHUNKS as usize * CHUNK_BYTES, 0, 0),
            ReceiveMode::Placing {
                bytes,
                sending_bytes,
                ..
            } => (
                bytes.next_multiple_of(CHUNK_BYTES),
                sending_bytes.next_multiple_of(CHUNK_BYTES),
                libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG,
            ),
        };
        let tx_start = (rx_bytes + sending_bytes) as u64;
        let umem = Arc::new(Umem::map(
            rx_bytes + sending_bytes + TX_CHUNKS as usize * CHUNK_BYTES,
        )?);
        let registration = libc::xdp_umem_reg {
            addr: umem.area.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: CHUNK_BYTES as u32,
            headroom: 0,
            flags,
            tx_metadata_len: 0,
        };
        set_option(raw, libc::XDP_UMEM_REG, &registration)?;
        set_option(raw, libc::XDP_UMEM_FILL_RING, &RX_CHUNKS)?;
        set_option(raw, libc::XDP_UMEM_COMPLETION_RING, &TX_CHUNKS)?;
        set_option(raw, libc::XDP_RX_RING, &RX_CHUNKS)?;
        set_option(raw, libc::XDP_TX_RING, &TX_CHUNKS)?;
        let offsets = mmap_offsets(raw)?;
        let fill = Ring::map(
            raw,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            RX_CHUNKS,
            &offsets.fr,
            true,
        )?;
        let completion = Ring::map(
            raw,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            TX_CHUNKS,
            &offsets.cr,
            false,
        )?;
        let rx = Ring::map(
            raw,
            libc::XDP_PGOFF_RX_RING as u64,
            RX_CHUNKS,
            &offsets.rx,
            false,
        )?;
        let tx = Ring::map(
            raw,
            libc::XDP_PGOFF_TX_RING as u64,
            TX_CHUNKS,
            &offsets.tx,
            true,
        )?;
        let mut socket = Self {
            fill,
            rx,
            tx,
            completion,
            fd,
            umem,
            free_tx: (0..TX_CHUNKS)
                .rev()
                .map(|chunk| tx_start + u64::from(chunk) * CHUNK_BYTES as u64)
                .collect(),
            frames_in_flight: 0,
            mode,
        };
        if mode == ReceiveMode::Chunks {
            for chunk in 0..RX_CHUNKS {
                socket.fill.push(u64::from(chunk) * CHUNK_BYTES as u64);
            }
            socket.fill.publish();
        }
        socket.bind(ifindex, queue, binding)?;
        Ok(socket)
    }

    fn bind(&self, ifindex: u32, queue: u32, binding: Binding) -> io::Result<()> {
        // Without a mode flag the kernel binds in zero-copy mode where the driver has it and
        // falls back to copy mode itself.
        let mode = match binding {
            Binding::Copy => libc::XDP_COPY,
            Binding::ZeroCopyElseCopy => 0,
        };
        let scatter_gather = if self.scatter_gather() {
            libc::XDP_USE_SG
        } else {
            0
        };
        let address = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: mode | libc::XDP_USE_NEED_WAKEUP | scatter_gather,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: a valid `sockaddr_xdp` of the size passed.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                ptr::from_ref(&address).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The bytes of a frame described by `desc`.
    fn frame(&self, desc: &Desc) -> &[u8] {
        let start = desc.addr as usize;
        let len = desc.len as usize;
        assert!(start + len <= self.umem.len, "descriptor outside the UMEM");
        // SAFETY: inside the UMEM (checked); the chunk is ours until given back to the kernel.
        unsafe { std::slice::from_raw_parts(self.umem.area.as_ptr().add(start), len) }
    }

    /// Calls `deliver` with up to `limit` received frames, then gives their chunks back to the
    /// kernel. Returns how many there were.
    pub fn receive(&mut self, limit: u32, mut deliver: impl FnMut(&[u8])) -> u32 {
        assert_eq!(
            self.mode,
            ReceiveMode::Chunks,
            "placing sockets take what landed"
        );
        let count = self.rx.ready(limit);
        if count == 0 {
            return 0;
        }
        for i in 0..count {
            let desc = self.rx.peek(i);
            deliver(self.frame(&desc));
        }
        // The fill ring has room for every receive chunk, so this never waits.
        let room = self.fill.free(count);
        debug_assert_eq!(room, count);
        for i in 0..count {
            let chunk = self.rx.peek(i).addr & !(CHUNK_BYTES as u64 - 1);
            self.fill.push(chunk);
        }
        self.rx.release(count);
        self.fill.publish();
        count
    }

    /// Placing mode: gives the kernel `address` (an offset in the receiving part of the UMEM);
    /// the next frame steered to this socket lands [`KERNEL_HEADROOM`] bytes after it. False if
    /// the fill ring is full. Takes effect at [`publish_fill`](Self::publish_fill).
    pub fn post_fill(&mut self, address: u64) -> bool {
        assert!(
            matches!(self.mode, ReceiveMode::Placing { .. }),
            "chunk sockets fill themselves"
        );
        assert!(
            address as usize + CHUNK_BYTES <= self.receiving_len(),
            "fill address {address} leaves no chunk's room in the receiving memory"
        );
        if self.fill.free(1) == 0 {
            return false;
        }
        self.fill.push(address);
        true
    }

    pub fn publish_fill(&self) {
        self.fill.publish();
    }

    /// Placing mode: calls `landed(position, len, continues)` for up to `limit` buffers that
    /// landed, in the order the kernel took their fill addresses (`position` is where the
    /// buffer's first byte is in the UMEM; `continues`: the frame goes on in the next buffer, on
    /// a socket bound with scatter-gather), and releases their receive entries. Returns how
    /// many there were.
    pub fn take_landed(&mut self, limit: u32, mut landed: impl FnMut(usize, usize, bool)) -> u32 {
        let count = self.rx.ready(limit);
        for i in 0..count {
            let desc = self.rx.peek(i);
            // Unaligned mode: the base address in the low 48 bits, the data's offset above.
            let base = desc.addr & libc::XSK_UNALIGNED_BUF_ADDR_MASK;
            let offset = desc.addr >> libc::XSK_UNALIGNED_BUF_OFFSET_SHIFT;
            let continues = desc.options & libc::XDP_PKT_CONTD != 0;
            landed((base + offset) as usize, desc.len as usize, continues);
        }
        self.rx.release(count);
        count
    }

    /// Placing mode: the receiving part of the UMEM. Bytes that a posted fill address covers
    /// may change under the caller (the kernel writes them when a frame lands); read only
    /// bytes no posted address covers, or that landed and are known to stay.
    pub fn receiving_memory(&mut self) -> &mut [u8] {
        let len = self.receiving_len();
        // SAFETY: inside the UMEM, which lives as long as `self`; the kernel writes only where
        // a posted fill address points, which the caller tracks (see above), and the caller
        // holds `&mut self`, so no other slice of it exists.
        unsafe { std::slice::from_raw_parts_mut(self.umem.area.as_ptr(), len) }
    }

    /// Where the send chunks begin: after the receiving and sending memory.
    fn free_tx_start(&self) -> usize {
        self.umem.len - TX_CHUNKS as usize * CHUNK_BYTES
    }

    /// Bytes of the UMEM for receiving (from its start).
    fn receiving_len(&self) -> usize {
        match self.mode {
            ReceiveMode::Chunks => self.free_tx_start(),
            ReceiveMode::Placing { bytes, .. } => bytes.next_multiple_of(CHUNK_BYTES),
        }
    }

    /// Placing mode: the sending memory, between the receiving memory and the send chunks,
    /// for the caller to lay send buffers out in. Lent out once: the caller cuts it up.
    pub(crate) fn sending_memory(&self) -> UmemPart {
        let start = self.receiving_len();
        UmemPart {
            umem: Arc::clone(&self.umem),
            start,
            len: self.free_tx_start() - start,
        }
    }

    /// Placing mode: queues the frame at `address..address + len` of the sending memory (a
    /// send buffer's frame, its headers written) for sending, as it is: one descriptor, or on a
    /// socket bound with scatter-gather a chain of descriptors of a chunk each for a longer
    /// frame. False if the tx ring has no room for them. Until the kernel is done with it
    /// ([`frames_in_flight`](Self::frames_in_flight) counts its descriptors till then) its
    /// bytes must not change.
    pub fn queue_frame(&mut self, address: u64, len: usize) -> bool {
        let end = address as usize + len;
        assert!(
            address as usize >= self.receiving_len() && end <= self.free_tx_start(),
            "a frame at {address} of {len} B is outside the sending memory"
        );
        let pieces = len.div_ceil(CHUNK_BYTES).max(1) as u32;
        assert!(
            pieces == 1 || (self.scatter_gather() && len <= MAX_CHAIN_BYTES),
            "a frame of {len} B on a socket {} scatter-gather",
            if self.scatter_gather() {
                "with"
            } else {
                "without"
            }
        );
        if self.tx.free(pieces) < pieces {
            return false;
        }
        for piece in 0..pieces {
            let start = piece as usize * CHUNK_BYTES;
            let piece_len = (len - start).min(CHUNK_BYTES);
            let last = piece + 1 == pieces;
            self.tx.push(Desc {
                addr: address + start as u64,
                len: piece_len as u32,
                options: if last { 0 } else { libc::XDP_PKT_CONTD },
            });
        }
        self.frames_in_flight += pieces;
        true
    }

    fn scatter_gather(&self) -> bool {
        matches!(
            self.mode,
            ReceiveMode::Placing {
                scatter_gather: true,
                ..
            }
        )
    }

    /// Frames queued with [`queue_frame`](Self::queue_frame) the kernel has not finished, as
    /// of the last [`reclaim_sent`](Self::reclaim_sent).
    pub fn frames_in_flight(&self) -> u32 {
        self.frames_in_flight
    }

    /// Where `bytes` are in the UMEM, if they are in its sending memory.
    pub fn sending_address(&self, bytes: &[u8]) -> Option<u64> {
        let at = (bytes.as_ptr() as usize).checked_sub(self.umem.area.as_ptr() as usize)?;
        (at >= self.receiving_len() && at + bytes.len() <= self.free_tx_start())
            .then_some(at as u64)
    }

    /// True if frames wait in the rx ring.
    pub fn has_received(&mut self) -> bool {
        self.rx.ready(1) > 0
    }

    /// A free send chunk to write a frame of up to [`MAX_FRAME_BYTES`] into, or `None` while
    /// every chunk is in flight or the tx ring is full (frames from the sending memory share
    /// it). Finished sends are reclaimed first. Queue it at once with
    /// [`queue_send`](Self::queue_send), which then has room.
    pub fn tx_chunk(&mut self) -> Option<(u64, &mut [u8])> {
        if self.free_tx.is_empty() {
            self.reclaim_sent();
        }
        if self.tx.free(1) == 0 {
            return None;
        }
        let chunk = self.free_tx.pop()?;
        // SAFETY: a send chunk inside the UMEM, in none of the rings: ours alone.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(self.umem.area.as_ptr().add(chunk as usize), CHUNK_BYTES)
        };
        Some((chunk, bytes))
    }

    /// Whether one more frame can be queued now, a frame of the sending memory
    /// ([`queue_frame`](Self::queue_frame)) or one copied into a send chunk
    /// ([`tx_chunk`](Self::tx_chunk)): the tx ring has room for the longest frame's
    /// descriptors (three on a socket bound with scatter-gather, one otherwise) and a send chunk
    /// is free. Finished sends are reclaimed first. Less room would make a long frame look
    /// unfit for the ring, and its caller send it another way, ahead of frames on the ring.
    pub fn can_queue(&mut self) -> bool {
        let wanted = self.max_frame_descriptors();
        if self.free_tx.is_empty() || self.tx.free(wanted) < wanted {
            self.reclaim_sent();
        }
        !self.free_tx.is_empty() && self.tx.free(wanted) >= wanted
    }

    /// Descriptors the longest frame takes on the tx ring: a jumbo frame's, at most
    /// [`MAX_CHAIN_BYTES`], in chunks, where the socket is bound with scatter-gather.
    fn max_frame_descriptors(&self) -> u32 {
        if self.scatter_gather() {
            MAX_CHAIN_BYTES.div_ceil(CHUNK_BYTES) as u32
        } else {
            1
        }
    }

    /// Send chunks ([`tx_chunk`](Self::tx_chunk)) the kernel has not finished with, after
    /// reclaiming the finished ones. In copy mode the kernel finishes a frame when the device
    /// has taken it (on a veth: when the peer's receive path has), so this bounds what waits
    /// in the device's queue.
    pub fn send_chunks_in_flight(&mut self) -> u32 {
        self.reclaim_sent();
        TX_CHUNKS - self.free_tx.len() as u32
    }

    /// Gives an unused chunk from [`tx_chunk`](Self::tx_chunk) back.
    pub fn return_chunk(&mut self, chunk: u64) {
        self.free_tx.push(chunk);
    }

    /// Queues the frame written in `chunk` (`len` bytes) for sending. Has room:
    /// [`tx_chunk`](Self::tx_chunk) hands a chunk out only while the ring has.
    pub fn queue_send(&mut self, chunk: u64, len: usize) {
        let room = self.tx.free(1);
        debug_assert_eq!(room, 1);
        self.tx.push(Desc {
            addr: chunk,
            len: len as u32,
            options: 0,
        });
    }

    /// Publishes the queued frames and wakes the kernel to send them. In copy mode the kernel
    /// sends a bounded batch per wake-up (32 frames) and answers EAGAIN while more wait, so this
    /// repeats while the kernel takes frames; what it does not take now (its queue to the device
    /// is full) waits in the ring for the next call, which every receive poll makes
    /// ([`has_unsent`](Self::has_unsent)). Returns `Err` only for a socket that cannot send.
    pub fn flush(&mut self) -> io::Result<()> {
        self.tx.publish();
        // Enough calls for a full ring at 32 frames each, and a bound on a kernel that keeps
        // taking a frame at a time.
        const MAX_WAKEUPS: u32 = TX_CHUNKS / 16;
        let mut waiting = self.tx.in_flight();
        for _ in 0..MAX_WAKEUPS {
            if waiting == 0 || !self.tx.needs_wakeup() {
                break;
            }
            // SAFETY: a zero-length send on our socket: the wake-up call of AF_XDP.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                let error = io::Error::last_os_error();
                match error.raw_os_error() {
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => {}
                    _ => return Err(error),
                }
            }
            let still_waiting = self.tx.in_flight();
            if still_waiting >= waiting {
                break;
            }
            waiting = still_waiting;
        }
        Ok(())
    }

    /// True if frames wait in the tx ring for the kernel.
    pub fn has_unsent(&mut self) -> bool {
        self.tx.in_flight() > 0
    }

    /// Moves chunks the kernel has finished sending back to the free list, and counts the
    /// frames from the sending memory it finished.
    pub fn reclaim_sent(&mut self) {
        let done = self.completion.ready(TX_CHUNKS);
        let chunks_start = self.free_tx_start() as u64;
        for i in 0..done {
            let address = self.completion.peek(i);
            if address >= chunks_start {
                self.free_tx.push(address);
            } else {
                self.frames_in_flight -= 1;
            }
        }
        self.completion.release(done);
    }

    /// The kernel's counters for this socket (drops for a full rx ring, invalid descriptors).
    pub fn statistics(&self) -> io::Result<libc::xdp_statistics> {
        // SAFETY: `xdp_statistics` is a plain C struct of integers.
        unsafe { get_option(self.fd.as_raw_fd(), libc::XDP_STATISTICS) }
    }

    /// Whether the kernel bound the socket in zero-copy mode (the NIC writes into the UMEM)
    /// rather than copy mode (the kernel copies each frame); false if it cannot say.
    pub fn is_zero_copy(&self) -> bool {
        // SAFETY: `xdp_options` is a plain C struct of integers.
        let options: io::Result<libc::xdp_options> =
            unsafe { get_option(self.fd.as_raw_fd(), libc::XDP_OPTIONS) };
        options.is_ok_and(|options| options.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }
}

fn set_option<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a plain C value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            name,
            ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn mmap_offsets(fd: RawFd) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: `xdp_mmap_offsets` is a plain C struct of integers.
    unsafe { get_option(fd, libc::XDP_MMAP_OFFSETS) }
}

/// Reads socket option `name` of level `SOL_XDP`.
///
/// # Safety
/// `T` must be the plain C struct the kernel writes for `name`, valid when zeroed.
unsafe fn get_option<T>(fd: RawFd, name: libc::c_int) -> io::Result<T> {
    // SAFETY: valid when zeroed (contract).
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the buffer is `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            name,
            ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

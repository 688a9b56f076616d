//! Receive slots: preallocated `recvmmsg` arguments and buffers, the speculative placement of
//! guessed frames straight into user memory, and the split of GRO datagrams into the frames
//! they carry.
//!
//! Every slot mirrors the datagram it receives: byte `p` of the datagram lands at `p` in the
//! slot's buffer, except the payload parts of planned frames, which land at their destination
//! while the buffer keeps a hole of the same size for them. So putting a wrong guess back
//! together is one copy from the destination into its hole, and the frames of a GRO datagram are
//! plain offsets into the buffer.

use std::mem;
use std::ptr;

use crate::addr::{RawAddr, RAW_ADDR_LEN};
use crate::mode::{Mode, ReceiveMode};
use crate::offload::{gro_segment_size, receive_control_into, ControlBuffer};

/// Receive slots start on cache-line boundaries, so a frame's header and payload copies out of
/// a slot are aligned.
const RECV_SLOT_ALIGN: usize = 64;

/// Bytes a slot receives with GRO on: a coalesced datagram is at most one IP packet's worth
/// (64 KiB less the headers).
pub(crate) const GRO_SLOT_BYTES: usize = 65536;

/// Where the payload of a frame expected in a receive should go: the engine's placement target
/// (the frame's first `header_len` bytes stay in the transport's buffer, the next `len` bytes
/// go to `dest`), so the engine's plan is handed to `recvmmsg` as it is.
pub use nicmsg_engine::PlacementTarget as Placement;

/// A plan entry as laid out in a slot.
#[derive(Clone, Copy)]
struct PlacedEntry {
    /// Index in the plan.
    plan_index: usize,
    slot: usize,
    /// Where the frame starts in the slot's datagram.
    offset: usize,
    placement: Placement,
    /// Its bytes were copied back into the slot's buffer.
    gathered: bool,
}

impl PlacedEntry {
    fn end(&self) -> usize {
        self.offset + self.placement.header_len + self.placement.len
    }
}

/// One frame of the last receive: a whole datagram, or one segment of a GRO datagram.
#[derive(Clone, Copy)]
pub(crate) struct Datagram {
    pub slot: usize,
    pub offset: usize,
    pub len: usize,
    /// Index in `RecvSlots::entries` of the plan entry it exactly fills, if any.
    entry: Option<usize>,
}

/// A plan that guesses one frame per slot is positional: slot *i* gets whatever datagram the
/// kernel queued *i*-th. Any other datagram between the guessed frames (an acknowledgement or
/// CTS of the other direction, another peer's frame) lands in a slot meant for a data frame
/// and shifts every later slot off its guess, and each of those is then gathered back and
/// copied. So while such a plan's frames are at least this large, a receive offers the kernel
/// one slot and the next receive guesses again from what arrived: a system call (about 1 us)
/// per frame whose copy (5 us or more at this size) it can save. Below it batching is worth
/// more (and small frames on a link with GRO are guessed as one coalesced slot anyway).
/// Measured with Open MPI's overlap pattern on loopback (5 messages of 1 MiB each way at
/// once, 64 KiB frames): 6-8 % of the received bytes placed with whole batches, 61 % one
/// datagram a call; an iteration took 14-24 % less time.
///
/// A plan laid over one coalesced datagram reaches only slot 0, so it too offers one slot
/// while its frames are this large: the datagrams behind it would land in slots without a
/// plan and be copied. Open MPI's 256 KiB messages on the provider (eager, nine frames of
/// 29 KB, two to a coalesced datagram): 25-33 % of the received bytes copied with whole
/// batches, 12 % one datagram a call (the rest: `nicmsg_proto`'s `first_frame.rs`).
pub(crate) const ONE_PLANNED_DATAGRAM_MIN_BYTES: usize = 16 << 10;

pub(crate) struct RecvSlots {
    msgs: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
    names: Vec<RawAddr>,
    controls: Vec<ControlBuffer>,
    buf: Vec<u8>,
    stride: usize,
    /// Bytes one slot receives: `max_frame`, or [`GRO_SLOT_BYTES`] with GRO.
    capacity: usize,
    /// Longest frame accepted; longer ones (or longer segments of a GRO datagram) are counted
    /// as truncated and skipped, as they would be without GRO.
    max_frame: usize,
    /// The socket can coalesce: slots are GRO-sized and offer a control buffer.
    gro: bool,
    /// In batches, or one datagram at a time (`mode.rs`): then one slot is offered and
    /// `UDP_GRO` is off, so plans do not chain frames in slot 0.
    pub(crate) mode: ReceiveMode,
    /// Plan entries of the last receive, by slot and offset.
    entries: Vec<PlacedEntry>,
    /// Slots `0..planned_slots` point into the plan's iovecs instead of their home one.
    planned_slots: usize,
    /// The next receive offers one slot (see [`ONE_PLANNED_DATAGRAM_MIN_BYTES`]), for a plan
    /// laid one frame per slot or over one coalesced datagram alike.
    one_slot: bool,
    /// The next receive offers one slot whatever its plan (`Transport::receive_one_next`).
    pub(crate) one_datagram_next: bool,
    /// Frames of the last receive, in arrival order.
    pub ready: Vec<Datagram>,
    /// Slots the kernel wrote in the last `recvmmsg`; their value-result fields are reset
    /// before the next one.
    dirty: usize,
}

// SAFETY: `msgs` points into `iovecs`, `names`, `controls` and `buf`, heap storage owned by the
// same struct that never grows or moves, and into plan destinations only during a receive; the
// pointers are used only by the kernel inside `recvmmsg` while the transport is mutably
// borrowed. Rust code reads the buffers only through `&self`.
unsafe impl Send for RecvSlots {}
// SAFETY: as above; `&RecvSlots` only allows reading the buffers.
unsafe impl Sync for RecvSlots {}

impl RecvSlots {
    pub fn new(batch: usize, max_frame: usize, gro: bool) -> Self {
        let capacity = if gro {
            GRO_SLOT_BYTES.max(max_frame)
        } else {
            max_frame
        };
        let stride = capacity.next_multiple_of(RECV_SLOT_ALIGN);
        // Each slot's home iovec (its whole buffer), then the plan's: at most `batch` entries of
        // two iovecs, and a tail per planned slot. See `apply_plan`.
        let iovecs = batch + 3 * batch;
        let mut slots = Self {
            msgs: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            iovecs: vec![empty_iovec(); iovecs],
            names: vec![RawAddr::zeroed(); batch],
            controls: vec![ControlBuffer::EMPTY; batch],
            buf: vec![0u8; batch * stride],
            stride,
            capacity,
            max_frame,
            gro,
            mode: ReceiveMode::new(),
            entries: Vec::with_capacity(batch),
            planned_slots: 0,
            one_slot: false,
            one_datagram_next: false,
            ready: Vec::with_capacity(batch),
            dirty: 0,
        };
        let names = slots.names.as_mut_ptr();
        let buf = slots.buf.as_mut_ptr();
        let iovecs = slots.iovecs.as_mut_ptr();
        for (slot, msg) in slots.msgs.iter_mut().enumerate() {
            slots.iovecs[slot] = iovec(buf.wrapping_add(slot * stride), capacity);
            msg.msg_hdr.msg_iov = iovecs.wrapping_add(slot);
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_name = names.wrapping_add(slot).cast();
            msg.msg_hdr.msg_namelen = RAW_ADDR_LEN;
        }
        // Every slot needs its control buffer before the first receive.
        slots.dirty = batch;
        slots.reset();
        slots
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Whether the socket can coalesce received runs at all (slots are GRO-sized).
    pub fn can_coalesce(&self) -> bool {
        self.gro
    }

    /// Whether the socket coalesces received runs now.
    pub fn coalescing(&self) -> bool {
        self.gro && !self.single_frames()
    }

    fn single_frames(&self) -> bool {
        self.mode.mode() == Mode::SingleFrames
    }

    /// Lays the plan out over the slots: entry `i` in slot `i` without GRO; with GRO all
    /// entries chained in slot 0, as consecutive frames of one coalesced datagram, unless a
    /// frame is so large that no datagram can carry two (loopback's 64 KiB frames): then
    /// one per slot, as without GRO, or only the first frame of a batch could be placed.
    /// Entries that do not fit are left out (those frames are received the ordinary way). Slots
    /// without an entry keep their home iovec; only the slots the last plan changed are reset,
    /// so an empty plan (every turn of an idle engine) costs nothing.
    pub fn apply_plan(&mut self, plan: &[Placement]) {
        for slot in 0..self.planned_slots {
            let hdr = &mut self.msgs[slot].msg_hdr;
            hdr.msg_iov = self.iovecs.as_mut_ptr().wrapping_add(slot);
            hdr.msg_iovlen = 1;
        }
        self.planned_slots = 0;
        self.entries.clear();
        let coalesced = self.coalesces(plan);
        self.one_slot = plan
            .iter()
            .any(|placement| placement.len >= ONE_PLANNED_DATAGRAM_MIN_BYTES);
        let slots = if coalesced {
            1
        } else {
            plan.len().min(self.msgs.len())
        };
        let buf = self.buf.as_mut_ptr();
        let mut cursor = self.msgs.len();
        for slot in 0..slots.min(plan.len()) {
            let candidates = if coalesced {
                0..plan.len().min(self.msgs.len())
            } else {
                slot..slot + 1
            };
            let base = buf.wrapping_add(slot * self.stride);
            let (first, entries_before) = (cursor, self.entries.len());
            let mut offset = 0;
            for plan_index in candidates {
                let placement = plan[plan_index];
                if offset + placement.header_len + placement.len > self.capacity {
                    break;
                }
                self.iovecs[cursor] = iovec(base.wrapping_add(offset), placement.header_len);
                self.iovecs[cursor + 1] = iovec(placement.dest, placement.len);
                cursor += 2;
                self.entries.push(PlacedEntry {
                    plan_index,
                    slot,
                    offset,
                    placement,
                    gathered: false,
                });
                offset += placement.header_len + placement.len;
            }
            if self.entries.len() == entries_before {
                continue;
            }
            if offset < self.capacity {
                self.iovecs[cursor] = iovec(base.wrapping_add(offset), self.capacity - offset);
                cursor += 1;
            }
            let hdr = &mut self.msgs[slot].msg_hdr;
            hdr.msg_iov = self.iovecs.as_mut_ptr().wrapping_add(first);
            hdr.msg_iovlen = (cursor - first) as _;
            self.planned_slots = slot + 1;
        }
    }

    /// How many slots the next `recvmmsg` offers the kernel: all of them, but one while any
    /// frame a plan guesses is large (see
    /// [`ONE_PLANNED_DATAGRAM_MIN_BYTES`]; the last frame of a message is usually short), and
    /// one while the socket receives single frames (`mode.rs`).
    pub fn slots_to_offer(&self) -> usize {
        if self.plan_takes_one_slot() || self.single_frames() {
            1
        } else {
            self.msgs.len()
        }
    }

    /// Whether the last plan made the receive offer one slot for its large frames, or the
    /// engine asked for one datagram.
    pub fn plan_takes_one_slot(&self) -> bool {
        self.one_slot || self.one_datagram_next
    }

    /// Whether `plan` is laid out as one coalesced datagram in slot 0 (see `apply_plan`): with
    /// GRO, when every frame it guesses could share a datagram with another. A plan that mixes
    /// a message's short last frame with large frames goes one per slot: laid out from the short
    /// one, slot 0 would hold it alone and every large frame of the batch would be copied.
    fn coalesces(&self, plan: &[Placement]) -> bool {
        self.coalescing()
            && !plan.is_empty()
            && plan.iter().all(|placement| self.two_fit(placement))
    }

    /// Whether one coalesced datagram can hold two frames of `placement`'s length (the frames
    /// of a GRO run are of one length, but for a shorter last one).
    fn two_fit(&self, placement: &Placement) -> bool {
        2 * (placement.header_len + placement.len) <= self.capacity
    }

    /// Readies the slots for the next `recvmmsg`: the kernel wrote back into the value-result
    /// fields of the slots it filled last time.
    pub fn reset(&mut self) {
        for (msg, control) in self.msgs[..self.dirty].iter_mut().zip(&mut self.controls) {
            msg.msg_hdr.msg_namelen = RAW_ADDR_LEN;
            msg.msg_hdr.msg_flags = 0;
            msg.msg_len = 0;
            if self.gro {
                receive_control_into(&mut msg.msg_hdr, control);
            }
        }
        self.dirty = 0;
        self.ready.clear();
    }

    pub fn msgs_mut(&mut self) -> &mut [libc::mmsghdr] {
        &mut self.msgs
    }

    /// Splits the `filled` slots of the last `recvmmsg` into frames. Returns
    /// `(frames, bytes, truncated datagrams, GRO datagrams)`.
    pub fn split(&mut self, filled: usize) -> (usize, usize, usize, usize) {
        self.dirty = filled;
        let (mut frames, mut bytes, mut truncated, mut coalesced) = (0, 0, 0, 0);
        for slot in 0..filled {
            let msg = &self.msgs[slot];
            let total = msg.msg_len as usize;
            if msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || total > self.capacity {
                truncated += 1;
                continue;
            }
            let segment = self.segment_size(slot).filter(|&s| s < total);
            coalesced += usize::from(segment.is_some());
            let segment = segment.unwrap_or(total.max(1));
            let mut offset = 0;
            loop {
                let len = segment.min(total - offset);
                if len > self.max_frame {
                    truncated += 1;
                } else {
                    self.push_frame(slot, offset, len, total);
                    frames += 1;
                    bytes += len;
                }
                offset += len;
                if offset >= total {
                    break;
                }
            }
        }
        (frames, bytes, truncated, coalesced)
    }

    /// The GRO segment size of the datagram in `slot`, if the kernel coalesced it.
    fn segment_size(&self, slot: usize) -> Option<usize> {
        // SAFETY: with GRO on, `reset` pointed the slot at its control buffer before the
        // receive that filled it.
        self.gro
            .then(|| unsafe { gro_segment_size(&self.msgs[slot].msg_hdr) })
            .flatten()
    }

    /// Records one frame; a frame that does not exactly fill a plan entry has the entries it
    /// overlaps put back together first, so its bytes read whole from the buffer.
    fn push_frame(&mut self, slot: usize, offset: usize, len: usize, total: usize) {
        let end = offset + len;
        let mut exact = None;
        // Entries are laid out in slot and offset order: start at the first one of this slot
        // that ends after the frame starts, stop at the first that starts after it ends.
        let first = self
            .entries
            .partition_point(|e| (e.slot, e.end()) <= (slot, offset));
        for index in first..self.entries.len() {
            let entry = self.entries[index];
            if entry.slot != slot || entry.offset >= end {
                break;
            }
            if entry.offset == offset && entry.end() == end {
                exact = Some(index);
            } else {
                self.gather(index, total);
            }
        }
        self.ready.push(Datagram {
            slot,
            offset,
            len,
            entry: exact,
        });
    }

    /// Copies the payload part of entry `index` back into its hole in the slot's buffer.
    fn gather(&mut self, index: usize, total: usize) {
        let entry = &mut self.entries[index];
        if entry.gathered {
            return;
        }
        entry.gathered = true;
        let hole = entry.offset + entry.placement.header_len;
        let scattered = total.saturating_sub(hole).min(entry.placement.len);
        let start = entry.slot * self.stride + hole;
        // SAFETY: the destination stays valid for reads during the receive that filled it
        // (contract of `recv_batch_placed` / `gather_placed`) and does not overlap our buffer.
        let part = unsafe { std::slice::from_raw_parts(entry.placement.dest, scattered) };
        nicmsg_proto::copy_bytes(&mut self.buf[start..start + scattered], part);
    }

    fn slot_total(&self, slot: usize) -> usize {
        self.msgs[slot].msg_len as usize
    }

    /// Bytes of frame `i` as they lie in the buffer (whole unless it is placed).
    pub fn bytes(&self, i: usize) -> &[u8] {
        let frame = self.ready[i];
        let start = frame.slot * self.stride + frame.offset;
        &self.buf[start..start + frame.len]
    }

    /// The header part of frame `i` if placed, else all of it.
    pub fn head(&self, i: usize) -> &[u8] {
        let frame = self.ready[i];
        let kept = match self.placed_entry(i) {
            Some(entry) => entry.placement.header_len.min(frame.len),
            None => frame.len,
        };
        &self.bytes(i)[..kept]
    }

    fn placed_entry(&self, i: usize) -> Option<&PlacedEntry> {
        let index = self.ready[i].entry?;
        let entry = &self.entries[index];
        (!entry.gathered).then_some(entry)
    }

    /// For a placed frame: its plan index, payload bytes at the destination, and its length.
    pub fn placed(&self, i: usize) -> Option<(usize, usize, usize)> {
        let entry = self.placed_entry(i)?;
        Some((entry.plan_index, entry.placement.len, self.ready[i].len))
    }

    /// Puts a placed frame back together in the buffer.
    pub fn gather_frame(&mut self, i: usize) {
        let frame = self.ready[i];
        if let Some(index) = frame.entry {
            self.gather(index, self.slot_total(frame.slot));
        }
    }

    pub fn name(&self, slot: usize) -> (&RawAddr, libc::socklen_t) {
        (&self.names[slot], self.msgs[slot].msg_hdr.msg_namelen)
    }
}

fn iovec(base: *mut u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base.cast(),
        iov_len: len,
    }
}

pub(crate) fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: `mmsghdr` is a C struct of integers and raw pointers; all-zero (null pointers,
    // zero lengths) is valid.
    unsafe { mem::zeroed() }
}

pub(crate) fn empty_iovec() -> libc::iovec {
    iovec(ptr::null_mut(), 0)
}

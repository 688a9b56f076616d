//! LM's steering rule on the packet path: the XDP program that lets a frame take the next
//! address of a placing socket's fill ring only if that address is meant for it, and the table
//! it reads the rule from (`nicmsg_lm::fill` says why and what the rule is).
//!
//! The kernel hands a socket's fill addresses out first in, first out, to whatever frame is
//! redirected to the socket. So the engine writes, for every address it posts, a *record* of
//! who may take it into a table shared with the program (an mmapable array map), and the program
//! keeps a *cursor*: the number of addresses taken so far, i.e. the position of the next one.
//! For every frame to the rank's address and port:
//!
//! ```text
//! record at the cursor             frame                                   action
//! none (nothing posted there yet)  any                                     pass to the kernel
//! ordinary chunk / void place      at most `capacity` bytes                take it
//! place of frame i of transfer k   exactly `len` bytes, LM-DATA, aux = k,  take it
//!                                  frame index = i
//! anything else                                                            pass to the kernel
//! ```
//!
//! Taking an address clears its record, keeps a copy of the frame's headers by position in the
//! table (the next frame to land overwrites a placed frame's headers: LM's whole point), advances
//! the cursor by the addresses the frame fills and redirects the frame to the socket; passing
//! counts the frame and leaves it to the kernel's UDP socket (the ordinary path, one copy).
//!
//! A socket bound with scatter-gather (frames longer than a chunk: MTU 9000) receives a frame
//! across consecutive fill addresses, [`BUFFER_BYTES`] each, so the engine posts a frame's place
//! as a run of addresses one buffer apart, with the record at the first; the cursor moves past
//! the run at once. A void place keeps a record at every address of its run, each for the rest
//! of the run, so a shorter frame that takes its start leaves the rest drainable
//! (`nicmsg_lm::fill` says why).
//!
//! What keeps the cursor equal to the kernel's own count of addresses taken:
//!
//! * The cursor is plain memory the program reads and writes, so frames of the socket's queue
//!   must reach the program one at a time: they do when it is attached in native (driver)
//!   mode, where each queue is served by its own NAPI poll (generic mode on veth may run one
//!   queue's frames on two CPUs at once). Frames of other queues never touch the table.
//! * Every frame the program redirects must be taken: the engine publishes an address in the
//!   fill ring *before* writing its record, so a record the program sees has its address (its
//!   whole run) behind it; a socket bound without scatter-gather takes only frames in one buffer
//!   (it drops a longer one); the receive ring is as large as the fill ring, and the engine
//!   posts an address only while fewer than the fill ring's size are posted and not yet seen,
//!   so the receive ring has room for every landing. A redirect that fails anyway (the socket taken
//!   out of the map) leaves the cursor one ahead; the engine sees it as a landing at another
//!   address than its slot's, which it checks for every frame.
//! * The program reads a record's words with plain loads after its kind: on x86-64 (stores are
//!   seen in order) the kind, stored last with release ordering, guarantees the rest. A weakly
//!   ordered machine needs BPF's load-acquire, which older kernels lack.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nicmsg_lm::fill::Slot;
use nicmsg_wire::{filter_fields as field, FrameKind};

use crate::assembly::Assembly;
use crate::bpf::MappedArray;
use crate::packet::HEADERS_LEN;
use crate::program::*;

/// Records in the table: AF_XDP's fill ring in the placing socket holds at most this many
/// addresses (`nicmsg_lm::fill::MAX_FILL_SLOTS`), so positions modulo it never collide.
pub const PLACING_POSITIONS: usize = nicmsg_lm::fill::MAX_FILL_SLOTS;
/// Bytes of a frame's headers the program keeps: Ethernet, IPv4, UDP and the frame header.
pub const KEPT_HEADERS_LEN: usize = HEADERS_LEN + nicmsg_wire::FRAME_HEADER_LEN;
/// Bytes of a frame the kernel writes at one fill address (a chunk less its headroom): a longer
/// frame, on a socket bound with scatter-gather, fills the next addresses too.
pub const BUFFER_BYTES: usize = crate::socket::MAX_FRAME_BYTES;

const _: () = assert!(PLACING_POSITIONS.is_power_of_two());
// The fill and receive rings are this size: positions never wrap onto an address in flight,
// and the receive ring has room for every address the fill ring can hold.
const _: () = assert!(PLACING_POSITIONS == crate::socket::RX_CHUNKS as usize);

/// Table layout: the cursor, then the records, then the kept headers.
const CURSOR_AT: usize = 0;
const RECORDS_AT: usize = 8;
const RECORD_LEN: usize = 16;
const KEPT_AT: usize = RECORDS_AT + PLACING_POSITIONS * RECORD_LEN;
/// A kept header's room: its 90 bytes rounded up to whole 8-byte words.
const KEPT_STRIDE: usize = KEPT_HEADERS_LEN.next_multiple_of(8);
const TABLE_LEN: usize = KEPT_AT + PLACING_POSITIONS * KEPT_STRIDE;

// A record: kind, transfer, frame index, length (or capacity), each a u32.
const RECORD_KIND: i16 = 0;
const RECORD_TRANSFER: i16 = 4;
const RECORD_INDEX: i16 = 8;
const RECORD_LEN_FIELD: i16 = 12;
const KIND_NONE: u32 = 0;
/// Helper `bpf_xdp_get_buff_len(ctx)`: a frame's length over all its buffers.
const HELPER_XDP_GET_BUFF_LEN: i32 = 188;
/// Longest frame looked at: larger than any Ethernet frame, and a bound the verifier needs
/// before the length is added to a packet pointer.
const MAX_FRAME_LEN: i32 = 0xffff;
const KIND_CHUNK: u32 = 1;
const KIND_PLACE: u32 = 2;

/// The table the engine and the filter share.
pub struct PlacingTable {
    map: MappedArray,
}

impl PlacingTable {
    pub fn create() -> io::Result<Self> {
        Ok(Self {
            map: MappedArray::create(TABLE_LEN, "nicmsg_placing")?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.map.fd()
    }

    /// How many addresses the device has taken (the position of the next one).
    pub fn cursor(&self) -> u64 {
        self.atomic_u64(CURSOR_AT).load(Ordering::Acquire)
    }

    /// Records who may take the address posted at `position` (the number of addresses posted
    /// before it). Call after the address is published in the fill ring.
    pub fn record(&self, position: u64, slot: &Slot) {
        let (kind, transfer, index, len) = match *slot {
            Slot::Ordinary { capacity, .. } | Slot::Void { capacity, .. } => {
                (KIND_CHUNK, 0, 0, capacity)
            }
            Slot::Placement {
                transfer,
                index,
                len,
            } => (KIND_PLACE, transfer.0, index, len),
        };
        let at = record_at(position);
        for (field, value) in [
            (RECORD_TRANSFER, transfer),
            (RECORD_INDEX, index),
            (RECORD_LEN_FIELD, len),
        ] {
            self.atomic_u32(at + field as usize)
                .store(value, Ordering::Relaxed);
        }
        // The kind last, released: the program sees a whole record or none.
        self.atomic_u32(at + RECORD_KIND as usize)
            .store(kind, Ordering::Release);
    }

    /// Takes back the record of `position`: no frame may take it (any more).
    pub fn clear(&self, position: u64) {
        self.atomic_u32(record_at(position) + RECORD_KIND as usize)
            .store(KIND_NONE, Ordering::Release);
    }

    /// The headers of the frame that took the address at `position`, as it arrived (valid once
    /// its landing is seen in the receive ring, until the position is posted again).
    pub fn kept_headers(&self, position: u64) -> [u8; KEPT_HEADERS_LEN] {
        let at = KEPT_AT + (position as usize % PLACING_POSITIONS) * KEPT_STRIDE;
        let mut out = [0u8; KEPT_HEADERS_LEN];
        // SAFETY: inside the mapping (TABLE_LEN bytes); the program wrote these bytes before
        // it advanced the cursor past this position and writes them again only once the
        // position is posted again.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(at),
                out.as_mut_ptr(),
                KEPT_HEADERS_LEN,
            );
        }
        out
    }

    fn atomic_u32(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at.is_multiple_of(4) && at + 4 <= TABLE_LEN);
        // SAFETY: inside the mapping, 4-byte aligned (the mapping is page-aligned); the program
        // writes these words only with single aligned stores.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU32>() }
    }

    fn atomic_u64(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= TABLE_LEN);
        // SAFETY: as `atomic_u32`, 8-byte aligned.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU64>() }
    }
}

fn record_at(position: u64) -> usize {
    RECORDS_AT + (position as usize % PLACING_POSITIONS) * RECORD_LEN
}

/// What the placing filter is built from.
#[derive(Debug, Clone, Copy)]
pub struct PlacingSteering {
    /// The rank's address and port: only frames to them are looked at.
    pub ip: Ipv4Addr,
    pub port: u16,
    /// The `XSKMAP` holding the placing socket at its receive queue.
    pub sockets_map_fd: i32,
    /// That queue: the cursor counts its frames only.
    pub queue: u32,
    /// The [`PlacingTable`].
    pub table_fd: i32,
    /// Counts the rank's frames passed to the kernel (not allowed the head address).
    pub passed_counter_fd: i32,
    /// The socket is bound with scatter-gather: a frame longer than a buffer may be taken.
    pub scatter_gather: bool,
}

/// Labels of the placing program's jumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    /// Not the rank's: pass, uncounted.
    Pass,
    /// The rank's, but not for the head address: count, pass.
    Kernel,
    /// The head is a frame's place: check the frame is that one.
    Place,
    /// Take the head address.
    Take,
}

/// The placing filter (see the module documentation).
pub fn placing_program(steering: &PlacingSteering) -> Vec<Insn> {
    use Label::*;
    let mut program = Assembly::new();
    for (insn, jumps) in frame_is_ours(steering.ip, steering.port) {
        program.emit(insn, jumps.then_some(Pass));
    }
    emit_length_and_record(&mut program, steering);
    program.place(Place);
    emit_place_checks(&mut program);
    program.place(Take);
    emit_keep_headers(&mut program);
    emit_take(&mut program, steering.sockets_map_fd);
    program.end_with_kernel_and_pass(Kernel, Pass, steering.passed_counter_fd);
    program.finish()
}

/// Leaves `R4` = the frame's length, `R7` = the table, `R8` = the cursor, `R9` = the record
/// at the cursor, `R0` = its length field, `R2`, `R3` = the frame's first buffer's bounds, with
/// the headers to keep inside it; goes to `Kernel` for a frame of another queue, too short, in
/// several buffers on a socket without scatter-gather, or with no record at the cursor, to
/// `Take` for a chunk it fits, to `Place` for a place.
fn emit_length_and_record(program: &mut Assembly<Label>, steering: &PlacingSteering) {
    use Label::*;
    use Reg::*;
    // Only the placing socket's queue has a cursor here: frames of other queues are ordinary.
    program.emit(Insn::load(SIZE_W, R5, R6, MD_RX_QUEUE_INDEX), None);
    program.emit(Insn::jump_ne32_imm(R5, steering.queue, 0), Some(Kernel));
    // The frame's whole length (all its buffers).
    program.emit(Insn::mov_reg(R1, R6), None);
    program.emit(Insn::call(HELPER_XDP_GET_BUFF_LEN), None);
    program.emit(Insn::mov_reg(R4, R0), None);
    program.emit(Insn::load(SIZE_W, R2, R6, MD_DATA), None);
    program.emit(Insn::load(SIZE_W, R3, R6, MD_DATA_END), None);
    program.emit(Insn::jump_gt_imm(R4, MAX_FRAME_LEN, 0), Some(Kernel));
    if !steering.scatter_gather {
        // Only a frame in one buffer (its length all before `data_end`) may be taken: a socket
        // bound without scatter-gather would drop a longer one after the cursor counted it.
        program.emit(Insn::mov_reg(R5, R2), None);
        program.emit(Insn::add_reg(R5, R4), None);
        program.emit(Insn::jump_gt_reg(R5, R3, 0), Some(Kernel));
    }
    // The headers to keep must be in the first buffer.
    program.emit(Insn::mov_reg(R5, R2), None);
    program.emit(Insn::add_imm(R5, KEPT_HEADERS_LEN as i32), None);
    program.emit(Insn::jump_gt_reg(R5, R3, 0), Some(Kernel));
    program.emit_all(Insn::load_map_value(R7, steering.table_fd));
    program.emit(Insn::load(SIZE_DW, R8, R7, CURSOR_AT as i16), None);
    program.emit(Insn::mov_reg(R9, R8), None);
    program.emit(Insn::and_imm(R9, PLACING_POSITIONS as i32 - 1), None);
    program.emit(Insn::lsh_imm(R9, RECORD_LEN.trailing_zeros() as i32), None);
    program.emit(Insn::add_reg(R9, R7), None);
    program.emit(Insn::add_imm(R9, RECORDS_AT as i32), None);
    program.emit(Insn::load(SIZE_W, R5, R9, RECORD_KIND), None);
    program.emit(Insn::load(SIZE_W, R0, R9, RECORD_LEN_FIELD), None);
    program.emit(Insn::jump_eq_imm(R5, KIND_NONE as i32, 0), Some(Kernel));
    program.emit(Insn::jump_eq_imm(R5, KIND_PLACE as i32, 0), Some(Place));
    // An ordinary chunk or a void place: any frame that fits.
    program.emit(Insn::jump_gt_reg(R4, R0, 0), Some(Kernel));
    program.emit(Insn::jump(0), Some(Take));
}

/// The head is a frame's place: the frame must be exactly that one (length, kind, transfer,
/// index), else `Kernel`.
fn emit_place_checks(program: &mut Assembly<Label>) {
    use Label::*;
    use Reg::*;
    let at_header = |offset: usize| (HEADERS_LEN + offset) as i16;
    program.emit(Insn::jump_ne_reg(R4, R0, 0), Some(Kernel));
    program.emit(Insn::load(SIZE_B, R5, R2, at_header(field::KIND)), None);
    program.emit(
        Insn::jump_ne32_imm(R5, FrameKind::LmData as u32, 0),
        Some(Kernel),
    );
    for (frame_field, record_field) in [
        (field::AUX, RECORD_TRANSFER),
        (field::FRAME_INDEX, RECORD_INDEX),
    ] {
        program.emit(Insn::load(SIZE_W, R5, R2, at_header(frame_field)), None);
        program.emit(Insn::load(SIZE_W, R0, R9, record_field), None);
        program.emit(Insn::jump_ne_reg(R5, R0, 0), Some(Kernel));
    }
}

/// Keeps the frame's headers at the cursor's position (every frame taken: a void place's
/// landing is read back with them too).
fn emit_keep_headers(program: &mut Assembly<Label>) {
    use Reg::*;
    program.emit(Insn::mov_reg(R1, R8), None);
    program.emit(Insn::and_imm(R1, PLACING_POSITIONS as i32 - 1), None);
    program.emit(Insn::mul_imm(R1, KEPT_STRIDE as i32), None);
    program.emit(Insn::add_reg(R1, R7), None);
    program.emit(Insn::add_imm(R1, KEPT_AT as i32), None);
    const WORDS: usize = KEPT_HEADERS_LEN / 8;
    const _: () = assert!(KEPT_HEADERS_LEN - WORDS * 8 == 2, "a half-word tail");
    for word in 0..WORDS as i16 {
        program.emit(Insn::load(SIZE_DW, R5, R2, word * 8), None);
        program.emit(Insn::store(SIZE_DW, R1, word * 8, R5), None);
    }
    let tail = (WORDS * 8) as i16;
    program.emit(Insn::load(SIZE_H, R5, R2, tail), None);
    program.emit(Insn::store(SIZE_H, R1, tail, R5), None);
}

/// Clears the record, advances the cursor past the addresses the frame fills and redirects
/// the frame to the socket.
fn emit_take(program: &mut Assembly<Label>, sockets_map_fd: i32) {
    use Reg::*;
    program.emit(
        Insn::store_imm(SIZE_W, R9, RECORD_KIND, KIND_NONE as i32),
        None,
    );
    // The kernel fills `ceil(len / BUFFER_BYTES)` addresses (one for every frame of a socket
    // without scatter-gather, which takes only frames in one buffer).
    program.emit(Insn::add_imm(R4, BUFFER_BYTES as i32 - 1), None);
    program.emit(Insn::div_imm(R4, BUFFER_BYTES as i32), None);
    program.emit(Insn::add_reg(R8, R4), None);
    program.emit(Insn::store(SIZE_DW, R7, CURSOR_AT as i16, R8), None);
    program.emit_all(Insn::load_map_fd(R1, sockets_map_fd));
    program.emit(Insn::load(SIZE_W, R2, R6, MD_RX_QUEUE_INDEX), None);
    // No socket at the queue: drop (XDP_ABORTED), since its address counts as taken.
    program.emit(Insn::mov_imm(R3, 0), None);
    program.emit(Insn::call(HELPER_REDIRECT_MAP), None);
    program.emit(Insn::exit(), None);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steering() -> PlacingSteering {
        PlacingSteering {
            ip: Ipv4Addr::new(10, 0, 0, 1),
            port: 7000,
            sockets_map_fd: 3,
            queue: 0,
            table_fd: 4,
            passed_counter_fd: 5,
            scatter_gather: true,
        }
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_forward() {
        let program = placing_program(&steering());
        for (at, insn) in program.iter().enumerate() {
            let class = insn.code & 0x07;
            let op = insn.code & 0xf0;
            let jumps =
                (class == CLASS_JMP || class == CLASS_JMP32) && op != JUMP_CALL && op != JUMP_EXIT;
            if jumps {
                let to = at as i64 + 1 + i64::from(insn.off);
                assert!(insn.off >= 0, "jump at {at} goes back");
                assert!((to as usize) < program.len(), "jump at {at} leaves");
            }
        }
        assert!(program.len() < 128, "{} instructions", program.len());
    }

    #[test]
    fn the_table_fits_one_map_value() {
        // Array map values are allocated in one piece; keep well under the kernel's limit.
        const _: () = assert!(TABLE_LEN < 1 << 20);
        assert_eq!(record_at(PLACING_POSITIONS as u64 + 3), record_at(3));
    }
}

//! Host memory of one simulated rank: an arena of regions (one per buffer), lent to the endpoint
//! through [`HostMemory`], and the buffer layouts the workloads post (contiguous or scattered
//! segments with gaps, guard bytes around every buffer).
//!
//! A region is released when its operation completes. An endpoint that writes a released region
//! afterwards (a receive writing after completing) is counted, and the run reports it as a
//! violation; a send reading its buffer after completing shows up when the frame cannot be
//! gathered. Reads of released regions are counted separately (informational: a lookup that
//! reads nothing is harmless).

use crate::content::Pattern;
use crate::rng::SimRng;
use nicmsg_proto::{HostMemory, Rank, RegionId, Segment, SgList, MAX_SEGMENTS};
use std::cell::Cell;

/// The memory of one rank.
#[derive(Debug, Default)]
pub struct Arena {
    rank: Rank,
    regions: Vec<Option<Vec<u8>>>,
    live_bytes: u64,
    bad_reads: Cell<u64>,
    bad_writes: u64,
    first_bad_write: Option<u32>,
}

impl Arena {
    pub fn new(rank: Rank) -> Self {
        Self {
            rank,
            ..Self::default()
        }
    }

    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Registers a new region holding `bytes`. Region ids are never reused.
    pub fn alloc(&mut self, bytes: Vec<u8>) -> RegionId {
        let id = RegionId(self.regions.len() as u32);
        self.live_bytes += bytes.len() as u64;
        self.regions.push(Some(bytes));
        id
    }

    /// The simulator's own view of a live region (not counted as an endpoint access).
    pub fn bytes(&self, id: RegionId) -> Option<&[u8]> {
        self.regions.get(id.0 as usize).and_then(|r| r.as_deref())
    }

    /// Unregisters a region; later endpoint accesses to it are counted as bad.
    pub fn release(&mut self, id: RegionId) {
        if let Some(slot) = self.regions.get_mut(id.0 as usize) {
            if let Some(bytes) = slot.take() {
                self.live_bytes -= bytes.len() as u64;
            }
        }
    }

    /// The (address, length) ranges of a buffer's segments, for registering with an engine's
    /// memory registry. The addresses stay valid until the region is released (a region's
    /// bytes never move: growing the arena moves only their owners).
    pub fn ranges(&mut self, sg: &SgList) -> Vec<(*mut u8, usize)> {
        sg.segments()
            .iter()
            .map(|segment| {
                let bytes = self.regions[segment.region.0 as usize]
                    .as_mut()
                    .expect("a live region");
                let start = segment.offset as usize;
                let piece = &mut bytes[start..start + segment.len as usize];
                (piece.as_mut_ptr(), piece.len())
            })
            .collect()
    }

    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Endpoint write accesses to released or never-registered regions, and the first such
    /// region.
    pub fn bad_writes(&self) -> (u64, Option<u32>) {
        (self.bad_writes, self.first_bad_write)
    }

    /// Endpoint read lookups of released or never-registered regions.
    pub fn bad_reads(&self) -> u64 {
        self.bad_reads.get()
    }
}

impl HostMemory for Arena {
    fn region(&self, id: RegionId) -> Option<&[u8]> {
        let found = self.regions.get(id.0 as usize).and_then(|r| r.as_deref());
        if found.is_none() {
            self.bad_reads.set(self.bad_reads.get() + 1);
        }
        found
    }

    fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        if self.bytes(id).is_none() {
            self.bad_writes += 1;
            self.first_bad_write.get_or_insert(id.0);
            return None;
        }
        self.regions[id.0 as usize].as_deref_mut()
    }
}

/// How a buffer is laid out in its region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One segment with guard bytes before and after it.
    Contiguous,
    /// Up to `segments` segments (at most [`MAX_SEGMENTS`]) with gaps between them; with
    /// `shuffle`, the segment list is not in address order.
    Scattered { segments: u8, shuffle: bool },
}

impl Layout {
    /// A random layout: scattered with probability `scatter`.
    pub fn draw(rng: &mut SimRng, scatter: f64) -> Self {
        if rng.chance(scatter) {
            Layout::Scattered {
                segments: rng.range(2, MAX_SEGMENTS as u64) as u8,
                shuffle: rng.chance(0.3),
            }
        } else {
            Layout::Contiguous
        }
    }
}

/// A buffer posted to an endpoint: its region and its segment list.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    pub region: RegionId,
    pub sg: SgList,
    pub region_len: u64,
}

/// Places a buffer of `len` bytes: returns the region length and the segments (offset, len) in
/// message order.
fn place(rng: &mut SimRng, layout: Layout, len: u64, min_guard: u64) -> (u64, Vec<(u64, u64)>) {
    let parts: Vec<u64> = match layout {
        Layout::Contiguous => {
            if len == 0 && rng.chance(0.5) {
                Vec::new() // an empty segment list
            } else {
                vec![len]
            }
        }
        Layout::Scattered { segments, .. } => {
            let count = (segments as usize).clamp(1, MAX_SEGMENTS);
            let mut cuts: Vec<u64> = (0..count - 1).map(|_| rng.range(0, len)).collect();
            cuts.sort_unstable();
            let mut parts = Vec::with_capacity(count);
            let mut last = 0;
            for cut in cuts {
                parts.push(cut - last);
                last = cut;
            }
            parts.push(len - last);
            parts
        }
    };
    let mut at = rng.range(min_guard, 64);
    let mut placed = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            at += rng.range(1, 48);
        }
        placed.push((at, *part));
        at += part;
    }
    let region_len = at + rng.range(min_guard, 64);
    if let Layout::Scattered { shuffle: true, .. } = layout {
        rng.shuffle(&mut placed);
    }
    (region_len, placed)
}

fn sg_list(region: RegionId, placed: &[(u64, u64)]) -> SgList {
    let segments: Vec<Segment> = placed
        .iter()
        .map(|&(offset, len)| Segment {
            region,
            offset,
            len,
        })
        .collect();
    SgList::new(&segments).expect("layouts never exceed MAX_SEGMENTS")
}

/// Allocates a send buffer holding message `pattern` of `len` bytes; everything outside the
/// segments is poison.
pub fn send_buffer(
    arena: &mut Arena,
    rng: &mut SimRng,
    layout: Layout,
    pattern: Pattern,
    len: u64,
) -> Buffer {
    let (region_len, placed) = place(rng, layout, len, 0);
    let region_number = arena.regions.len() as u32;
    let mut bytes = vec![0u8; region_len as usize];
    Pattern::poison(arena.rank(), region_number).fill_into(0, &mut bytes);
    let mut msg_offset = 0u64;
    for &(offset, seg_len) in &placed {
        let range = offset as usize..(offset + seg_len) as usize;
        pattern.fill_into(msg_offset, &mut bytes[range]);
        msg_offset += seg_len;
    }
    store(arena, bytes, region_number, &placed)
}

/// Allocates a send buffer holding `message` (bytes the workload chose, such as a PANIC request:
/// a header and a module); everything outside the segments is poison.
pub fn send_buffer_bytes(
    arena: &mut Arena,
    rng: &mut SimRng,
    layout: Layout,
    message: &[u8],
) -> Buffer {
    let (region_len, placed) = place(rng, layout, message.len() as u64, 0);
    let region_number = arena.regions.len() as u32;
    let mut bytes = vec![0u8; region_len as usize];
    Pattern::poison(arena.rank(), region_number).fill_into(0, &mut bytes);
    let mut at = 0usize;
    for &(offset, seg_len) in &placed {
        let (offset, seg_len) = (offset as usize, seg_len as usize);
        bytes[offset..offset + seg_len].copy_from_slice(&message[at..at + seg_len]);
        at += seg_len;
    }
    store(arena, bytes, region_number, &placed)
}

/// The first `len` bytes of a buffer, in segment order (what a receive delivered).
pub fn read_message(arena: &Arena, buffer: &Buffer, len: u64) -> Option<Vec<u8>> {
    let bytes = arena.bytes(buffer.region)?;
    let mut out = Vec::with_capacity(len as usize);
    for segment in buffer.sg.segments() {
        let take = segment.len.min(len - out.len() as u64) as usize;
        let start = segment.offset as usize;
        out.extend_from_slice(&bytes[start..start + take]);
    }
    (out.len() as u64 == len).then_some(out)
}

/// Stores `bytes` as region `region_number` of `arena` (the next one) and describes the
/// buffer placed in it.
fn store(arena: &mut Arena, bytes: Vec<u8>, region_number: u32, placed: &[(u64, u64)]) -> Buffer {
    let region_len = bytes.len() as u64;
    let region = arena.alloc(bytes);
    debug_assert_eq!(region.0, region_number);
    Buffer {
        region,
        sg: sg_list(region, placed),
        region_len,
    }
}

/// Allocates a receive buffer of `capacity` bytes in a region pre-filled with its fill pattern,
/// with at least 16 guard bytes on each side.
pub fn recv_buffer(arena: &mut Arena, rng: &mut SimRng, layout: Layout, capacity: u64) -> Buffer {
    let (region_len, placed) = place(rng, layout, capacity, 16);
    let region_number = arena.regions.len() as u32;
    let mut bytes = vec![0u8; region_len as usize];
    Pattern::fill(arena.rank(), region_number).fill_into(0, &mut bytes);
    store(arena, bytes, region_number, &placed)
}

/// What a receive buffer must hold after its operation completed.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Nothing written anywhere (truncated or cancelled receive).
    Untouched,
    /// The first `len` bytes of the buffer (in segment order) hold `pattern`; everything else is
    /// untouched.
    Delivered { pattern: Pattern, len: u64 },
    /// Segments may hold anything (a receive that failed part way); guards and gaps untouched.
    OutsideOnly,
    /// The first `len` bytes (in segment order) may hold anything (a message whose bytes the
    /// workload checks); everything else is untouched.
    Opaque { len: u64 },
}

/// Checks a receive buffer against `expect`; describes the first discrepancy.
pub fn check_recv(arena: &Arena, buffer: &Buffer, expect: Expect) -> Result<(), String> {
    let Some(bytes) = arena.bytes(buffer.region) else {
        return Err(format!("receive region {} is gone", buffer.region.0));
    };
    let fill = Pattern::fill(arena.rank(), buffer.region.0);
    // Segments in address order, with the message offset each starts at.
    let mut segments: Vec<(u64, u64, u64)> = Vec::with_capacity(buffer.sg.segments().len());
    let mut msg_offset = 0u64;
    for segment in buffer.sg.segments() {
        segments.push((segment.offset, segment.len, msg_offset));
        msg_offset += segment.len;
    }
    segments.sort_unstable();
    let untouched = |from: u64, to: u64, what: &str| -> Result<(), String> {
        match fill.first_mismatch(from, &bytes[from as usize..to as usize]) {
            None => Ok(()),
            Some(i) => Err(format!(
                "byte {} of the receive region ({what}) was overwritten (region of {} bytes)",
                from + i as u64,
                bytes.len()
            )),
        }
    };
    let mut at = 0u64;
    for &(offset, len, msg_start) in &segments {
        untouched(at, offset, "guard or gap outside the segment list")?;
        let end = offset + len;
        match expect {
            Expect::Untouched => {
                untouched(offset, end, "buffer of a receive that must write nothing")?
            }
            Expect::OutsideOnly => {}
            Expect::Opaque { len: delivered } => {
                let data_len = delivered.clamp(msg_start, msg_start + len) - msg_start;
                untouched(offset + data_len, end, "buffer beyond the message length")?;
            }
            Expect::Delivered {
                pattern,
                len: delivered,
            } => {
                let data_end_msg = delivered.clamp(msg_start, msg_start + len);
                let data_len = data_end_msg - msg_start;
                let data = &bytes[offset as usize..(offset + data_len) as usize];
                if let Some(i) = pattern.first_mismatch(msg_start, data) {
                    return Err(format!(
                        "message byte {} (region byte {}) differs from what was sent",
                        msg_start + i as u64,
                        offset + i as u64
                    ));
                }
                untouched(offset + data_len, end, "buffer beyond the message length")?;
            }
        }
        at = end;
    }
    untouched(at, bytes.len() as u64, "trailing guard")
}

/// True when the first `len` bytes of the buffer (in segment order) hold `pattern`; used to tell
/// which of several candidate messages a receive got.
pub fn holds_message(arena: &Arena, buffer: &Buffer, pattern: Pattern, len: u64) -> bool {
    let Some(bytes) = arena.bytes(buffer.region) else {
        return false;
    };
    let mut msg_offset = 0u64;
    for segment in buffer.sg.segments() {
        if msg_offset >= len {
            break;
        }
        let take = segment.len.min(len - msg_offset);
        let data = &bytes[segment.offset as usize..(segment.offset + take) as usize];
        if pattern.first_mismatch(msg_offset, data).is_some() {
            return false;
        }
        msg_offset += take;
    }
    msg_offset >= len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    #[test]
    fn layouts_fit_and_round_trip() {
        let mut rng = SimRng::new(1, stream::LAYOUT);
        for len in [0u64, 1, 7, 100, 5000] {
            for layout in [
                Layout::Contiguous,
                Layout::Scattered {
                    segments: 3,
                    shuffle: false,
                },
                Layout::Scattered {
                    segments: 16,
                    shuffle: true,
                },
            ] {
                let mut arena = Arena::new(3);
                let msg = Pattern::message(0, 3, 9);
                let send = send_buffer(&mut arena, &mut rng, layout, msg, len);
                assert_eq!(send.sg.total_len(), len);
                send.sg.validate(&arena).unwrap();
                let recv = recv_buffer(&mut arena, &mut rng, layout, len + 10);
                recv.sg.validate(&arena).unwrap();
                check_recv(&arena, &recv, Expect::Untouched).unwrap();
                // Copy the message the way an endpoint would.
                let mut payload = vec![0u8; len as usize];
                let mut at = 0usize;
                for s in send.sg.segments() {
                    let r = arena.bytes(s.region).unwrap();
                    payload[at..at + s.len as usize]
                        .copy_from_slice(&r[s.offset as usize..(s.offset + s.len) as usize]);
                    at += s.len as usize;
                }
                assert!(recv.sg.write_at(&mut arena, 0, &payload));
                check_recv(&arena, &recv, Expect::Delivered { pattern: msg, len }).unwrap();
                assert!(holds_message(&arena, &recv, msg, len));
                if len > 0 {
                    assert!(check_recv(&arena, &recv, Expect::Untouched).is_err());
                }
                // A write into the guard is caught.
                let last = recv.region_len as usize - 1;
                arena.region_mut(recv.region).unwrap()[last] ^= 1;
                assert!(check_recv(&arena, &recv, Expect::OutsideOnly).is_err());
                arena.release(recv.region);
                assert!(arena.region(recv.region).is_none());
                assert!(arena.region_mut(recv.region).is_none());
                assert_eq!(arena.bad_reads(), 1);
                assert_eq!(arena.bad_writes(), (1, Some(recv.region.0)));
            }
        }
    }
}

//! One admitted transfer at its receiver: in-place defragmentation (the paper's section 3.2).
//!
//! The receiver owns a region of `header_len + len` bytes in the transport's memory
//! ([`Geometry::receive_region_len`]). It posts to the device's fill queue the landing address
//! of each frame it still needs, highest index first, a window at a time
//! ([`Placement::post_slots`]); the admitted sender sends last first, so each frame finds its
//! own address at the head of the queue and lands with its payload in its final place and its
//! headers on the tail of the previous frame's payload, which that frame, arriving next,
//! overwrites.
//!
//! Loss, duplication and reordering must never corrupt placed bytes. The rules that ensure it:
//!
//! 1. A frame lands only in its own slot ([`crate::fill::FillQueue::steer`]); any other frame
//!    comes the ordinary way and is copied into place ([`Placement::arrived_by_copy`]).
//! 2. No slot is ever posted for a frame already received, and a frame whose slot waits in the
//!    queue is not taken the ordinary way (it is dropped, counted, and retransmitted by its
//!    sender into its slot): so a frame is written in place at most once, and a duplicate can
//!    never land on bytes already placed.
//! 3. When a frame's headers will cover (or have covered) the tail of a previous frame that is
//!    already in place, that tail is kept aside (a *shadow*) and written back once the
//!    covering frame has landed ([`Placement::landed`]).
//!
//! So when every frame is in, no slot of the transfer is left in the queue, and the region
//! holds exactly the message. A transfer given up before that ([`Placement::abort`]) turns its
//! waiting slots void, so ordinary frames drain them; its region is not reused until
//! [`crate::fill::FillQueue::slots_of`] is 0.

use crate::bits::{Bits, FrameSet};
use crate::fill::{FillError, FillQueue, Slot, TransferKey};
use crate::geometry::{Geometry, GeometryError, MAX_HEADER_LEN};

/// The most slots one transfer keeps waiting in the fill queue: enough to cover the frames in
/// flight of a 64 KiB window at MTU 1500 twice, few enough that the shadows (one per waiting
/// slot) stay small and a stalled head slot blocks little.
pub const MAX_WINDOW: u32 = 128;

/// Why a transfer cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error("window of {0} slots is outside 1..={MAX_WINDOW}")]
    Window(u32),
}

/// What a frame that landed in its slot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// Its payload is in place (first arrival of the frame).
    Placed,
    /// It failed its checks (the caller's: header, checksum): the frame is still missing, and
    /// the bytes it wrote will be overwritten by the copy that replaces it.
    Damaged,
}

/// What a frame that came the ordinary way did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    /// Copied into place (first arrival).
    Copied,
    /// The frame was in already: nothing written.
    Duplicate,
    /// Its own slot waits in the fill queue: nothing written; its sender sends it again, and
    /// the copy that lands in the slot is the one kept.
    HeldForSlot,
}

/// The receive state of one admitted transfer.
#[derive(Debug)]
pub struct Placement {
    key: TransferKey,
    geometry: Geometry,
    len: usize,
    frames: u32,
    /// Slots kept waiting at most now ([`Placement::set_window`]); never above `max_window`,
    /// the window the bookkeeping was allocated for.
    window: u32,
    max_window: u32,
    received: FrameSet,
    /// Frames whose placement slot waits in the fill queue or was taken by the device and not
    /// yet seen by the engine.
    in_queue: Bits,
    in_queue_count: u32,
    /// The highest frame index not yet considered for a slot (posting goes downwards).
    next_to_post: Option<u32>,
    /// The lowest frame a slot was posted for (`frames` before the first): every frame from
    /// here up is in or has its slot, since slots are posted strictly downwards.
    lowest_posted: u32,
    /// Tails of placed payloads that a waiting slot's frame will cover: (covering frame, bytes).
    shadows: Vec<(u32, [u8; MAX_HEADER_LEN])>,
    stats: PlacementStats,
}

/// What one transfer's placement did, in bytes and frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlacementStats {
    /// Payload bytes that landed in place (no copy).
    pub placed_bytes: u64,
    /// Payload bytes copied into place (frames that came the ordinary way).
    pub copied_bytes: u64,
    /// Bytes written back from shadows (a header covered a tail already in place).
    pub restored_bytes: u64,
    pub duplicates: u64,
    pub held_for_slot: u64,
    pub damaged: u64,
    pub slots_posted: u64,
}

impl Placement {
    /// The placement of a `len`-byte transfer `key`, keeping at most `window` slots waiting.
    /// Allocates its bookkeeping (two bits a frame, the shadows) here, none later.
    pub fn new(
        key: TransferKey,
        geometry: Geometry,
        len: u64,
        window: u32,
    ) -> Result<Self, PlacementError> {
        let len = geometry.check_len(len)?;
        if window == 0 || window > MAX_WINDOW {
            return Err(PlacementError::Window(window));
        }
        let frames = geometry.frames(len);
        Ok(Self {
            key,
            geometry,
            len,
            frames,
            window,
            max_window: window,
            received: FrameSet::new(frames),
            in_queue: Bits::new(frames),
            in_queue_count: 0,
            next_to_post: Some(frames - 1),
            lowest_posted: frames,
            shadows: Vec::with_capacity(window as usize),
            stats: PlacementStats::default(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn frames(&self) -> u32 {
        self.frames
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn stats(&self) -> &PlacementStats {
        &self.stats
    }

    /// Bytes of the receive region (the hole for frame 0's headers, then the message).
    pub fn region_len(&self) -> usize {
        self.geometry.receive_region_len(self.len)
    }

    /// Every frame is in: the region's message bytes are the message, and no slot of this
    /// transfer is left in the fill queue.
    pub fn is_complete(&self) -> bool {
        self.received.is_full()
    }

    pub fn is_received(&self, index: u32) -> bool {
        self.received.contains(index)
    }

    /// The highest frame not in yet (0 once all are): the one a receiver asks for after a
    /// hole.
    pub fn highest_missing(&self) -> u32 {
        self.received.top_missing()
    }

    /// The frames to ask for after a hole: from the highest missing one down to the next
    /// frame in, within the frames that have slots (`None` if the highest missing has none:
    /// nothing sent is missing), at most `longest`.
    pub fn missing_run(&self, longest: u32) -> Option<(u32, u32)> {
        let top = self.highest_missing();
        (top >= self.lowest_posted && !self.is_complete()).then(|| {
            (
                top,
                self.received
                    .missing_run_bottom(self.lowest_posted, longest),
            )
        })
    }

    /// The lowest frame the sender may send now, last first from the top: every frame from
    /// here up is in or has a slot posted (what a grant tells the sender).
    pub fn grant_floor(&self) -> u32 {
        self.lowest_posted
    }

    /// Slots kept waiting at most now.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// The window the placement was made with: the largest [`Placement::set_window`] takes.
    pub fn max_window(&self) -> u32 {
        self.max_window
    }

    /// Keeps at most `window` slots waiting from now on (clamped to 1 ..= the window the
    /// placement was made with). Slots already posted stay: a smaller window takes effect as
    /// they land.
    pub fn set_window(&mut self, window: u32) {
        self.window = window.clamp(1, self.max_window);
    }

    /// Slots of this transfer in the fill queue, waiting or taken and not yet seen.
    pub fn slots_in_queue(&self) -> u32 {
        self.in_queue_count
    }

    /// Posts slots for the highest frames still missing until `window` wait in the queue (or
    /// the queue is full), to the mirror and, through `device`, to the device (which must take
    /// them in the order given). `region` is read for the shadows of tails already in place,
    /// always before the slot that covers them reaches the device. Returns how many were posted.
    pub fn post_slots(
        &mut self,
        fill: &mut FillQueue,
        region: &[u8],
        device: &mut dyn FnMut(Slot),
    ) -> Result<u32, FillError> {
        assert_eq!(region.len(), self.region_len(), "the transfer's region");
        fill.open(self.key)?;
        let mut posted = 0;
        while self.in_queue_count < self.window && fill.free() > 0 {
            let Some(index) = self.next_missing_to_post() else {
                break;
            };
            let slot = Slot::Placement {
                transfer: self.key,
                index,
                len: self.landing_len(index),
            };
            fill.post(slot)?;
            if index > 0 && self.received.contains(index - 1) {
                // The previous frame is in already: this one's headers will cover its tail.
                let shadow = self.geometry.header_shadow_range(index);
                self.keep_shadow(index, &region[shadow]);
            }
            self.in_queue.set(index);
            self.in_queue_count += 1;
            self.lowest_posted = index;
            self.stats.slots_posted += 1;
            device(slot);
            posted += 1;
        }
        debug_assert!(self.in_queue_count <= self.max_window);
        Ok(posted)
    }

    /// The engine saw, on the receive ring, the frame that took the placement slot of frame
    /// `index` (the caller checked what it could: `intact` is false if the frame's headers or
    /// checksum were wrong). The frame is at its landing offset in `region`.
    pub fn landed(&mut self, index: u32, intact: bool, region: &mut [u8]) -> Landed {
        assert!(
            self.in_queue.get(index),
            "frame {index} had no slot in the queue"
        );
        assert!(
            !self.received.contains(index),
            "a slot is never posted for a frame in already"
        );
        self.in_queue.clear(index);
        self.in_queue_count -= 1;
        self.restore_shadow(index, region);
        if !intact {
            // Still missing, and it comes the ordinary way: a second slot for it would sit
            // behind the slots of lower frames, and its headers would then cover a lower
            // frame's tail after that frame landed, where no shadow can be taken (rule 4).
            self.stats.damaged += 1;
            return Landed::Damaged;
        }
        self.mark_received(index);
        self.stats.placed_bytes += self.geometry.payload_len(self.len, index) as u64;
        Landed::Placed
    }

    /// Frame `index` came the ordinary way with `payload` (already checked by the caller):
    /// copies it into place unless it is in already or its own slot waits in the queue.
    pub fn arrived_by_copy(&mut self, index: u32, payload: &[u8], region: &mut [u8]) -> Copied {
        assert!(index < self.frames, "frame {index} of {}", self.frames);
        assert_eq!(payload.len(), self.geometry.payload_len(self.len, index));
        if self.received.contains(index) {
            self.stats.duplicates += 1;
            return Copied::Duplicate;
        }
        if self.in_queue.get(index) {
            self.stats.held_for_slot += 1;
            return Copied::HeldForSlot;
        }
        region[self.geometry.receive_frame_range(self.len, index)].copy_from_slice(payload);
        let next = index + 1;
        if next < self.frames && self.in_queue.get(next) {
            // The next frame's slot waits: when it lands, its headers cover this tail. Keep
            // the tail from the frame itself, not from the region, which that landing may be
            // writing already.
            let tail = payload.len() - self.geometry.header_len();
            self.keep_shadow(next, &payload[tail..]);
        }
        self.mark_received(index);
        self.stats.copied_bytes += payload.len() as u64;
        Copied::Copied
    }

    /// Gives the transfer up (its sender is gone, or ended it before every frame came): closes
    /// it and turns its waiting slots void. Returns how many were voided; the region is free
    /// again once [`FillQueue::slots_of`] counts none.
    pub fn abort(&mut self, fill: &mut FillQueue) -> u32 {
        fill.close(self.key);
        let geometry = self.geometry;
        let len = self.len;
        fill.void(self.key, |index| {
            (geometry.header_len() + geometry.payload_len(len, index)) as u32
        })
    }

    /// Closes a complete transfer in the fill queue (its frames go the ordinary way from now,
    /// so a late duplicate is copied and dropped instead of landing anywhere).
    pub fn finish(&mut self, fill: &mut FillQueue) {
        assert!(
            self.is_complete(),
            "finishing a transfer with frames missing"
        );
        assert_eq!(
            self.in_queue_count, 0,
            "a complete transfer has no slot in the queue"
        );
        fill.close(self.key);
    }

    fn landing_len(&self, index: u32) -> u32 {
        (self.geometry.header_len() + self.geometry.payload_len(self.len, index)) as u32
    }

    /// The highest frame below the posting cursor that is neither in nor already in the queue.
    fn next_missing_to_post(&mut self) -> Option<u32> {
        while let Some(index) = self.next_to_post {
            self.next_to_post = index.checked_sub(1);
            if !self.received.contains(index) && !self.in_queue.get(index) {
                return Some(index);
            }
        }
        None
    }

    fn mark_received(&mut self, index: u32) {
        let new = self.received.insert(index);
        debug_assert!(new, "frame {index} received twice");
    }

    fn keep_shadow(&mut self, covering: u32, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), self.geometry.header_len());
        debug_assert!(self.shadows.iter().all(|(index, _)| *index != covering));
        let mut kept = [0u8; MAX_HEADER_LEN];
        kept[..bytes.len()].copy_from_slice(bytes);
        self.shadows.push((covering, kept));
    }

    fn restore_shadow(&mut self, covering: u32, region: &mut [u8]) {
        let Some(at) = self
            .shadows
            .iter()
            .position(|(index, _)| *index == covering)
        else {
            return;
        };
        let (_, kept) = self.shadows.swap_remove(at);
        let range = self.geometry.header_shadow_range(covering);
        let len = range.len();
        region[range].copy_from_slice(&kept[..len]);
        self.stats.restored_bytes += len as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fill::{Arrival, Steer, WHOLE_FRAME_BUFFERS};

    const H: usize = 8;
    const P: usize = 32;
    const KEY: TransferKey = TransferKey(1);

    /// A frame as it leaves: `H` header bytes (filled with 0xee) and its payload.
    fn wire_frame(message: &[u8], g: &Geometry, index: u32) -> Vec<u8> {
        let mut frame = vec![0xee; H];
        frame.extend_from_slice(&message[g.payload_range(message.len(), index)]);
        frame
    }

    /// Delivers frame `index` as the device and the engine would: into its slot if the
    /// steering rule lets it, else by copy.
    fn deliver(
        placement: &mut Placement,
        fill: &mut FillQueue,
        region: &mut [u8],
        message: &[u8],
        index: u32,
    ) {
        let g = *placement.geometry();
        let frame = wire_frame(message, &g, index);
        let arrival = Arrival::Transfer {
            transfer: KEY,
            index,
            len: frame.len() as u32,
        };
        match fill.steer(arrival) {
            Steer::Ring => {
                let Slot::Placement { index: at, .. } = fill.device_take(frame.len() as u32) else {
                    panic!("a transfer's frame took another slot");
                };
                let start = g.landing_offset(at);
                region[start..start + frame.len()].copy_from_slice(&frame);
                assert!(matches!(fill.engine_take(), Some(Slot::Placement { .. })));
                placement.landed(at, true, region);
            }
            Steer::Kernel => {
                placement.arrived_by_copy(index, &frame[H..], region);
            }
        }
        placement.post_slots(fill, region, &mut |_| {}).unwrap();
    }

    fn message(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn frames_sent_last_first_land_in_place_with_no_copy() {
        let g = Geometry::new(H, P).unwrap();
        let data = message(200);
        let mut placement = Placement::new(KEY, g, 200, 4).unwrap();
        let mut fill = FillQueue::new(16, WHOLE_FRAME_BUFFERS);
        let mut region = vec![0u8; placement.region_len()];
        assert_eq!(
            placement.grant_floor(),
            placement.frames(),
            "nothing granted yet"
        );
        placement
            .post_slots(&mut fill, &region, &mut |_| {})
            .unwrap();
        assert_eq!(
            placement.grant_floor(),
            placement.frames() - 4,
            "a window of 4"
        );
        for index in g.send_order(200) {
            deliver(&mut placement, &mut fill, &mut region, &data, index);
        }
        assert!(placement.is_complete());
        assert_eq!(&region[H..], &data[..]);
        assert_eq!(placement.stats().copied_bytes, 0);
        assert_eq!(placement.stats().placed_bytes, 200);
        assert_eq!(fill.slots_of(KEY), 0);
        placement.finish(&mut fill);
    }

    #[test]
    fn frames_in_sending_order_are_held_or_copied_and_never_corrupt() {
        let g = Geometry::new(H, P).unwrap();
        let data = message(300);
        let mut placement = Placement::new(KEY, g, 300, 3).unwrap();
        let mut fill = FillQueue::new(16, WHOLE_FRAME_BUFFERS);
        let mut region = vec![0u8; placement.region_len()];
        placement
            .post_slots(&mut fill, &region, &mut |_| {})
            .unwrap();
        // First first: the low frames are copied; the high ones wait for their slots, so the
        // sender sends them again (last first this time).
        let mut rounds = 0;
        while !placement.is_complete() {
            for index in 0..g.frames(300) {
                deliver(&mut placement, &mut fill, &mut region, &data, index);
            }
            for index in g.send_order(300) {
                if !placement.is_received(index) {
                    deliver(&mut placement, &mut fill, &mut region, &data, index);
                }
            }
            rounds += 1;
            assert!(rounds < 10);
        }
        assert_eq!(&region[H..], &data[..]);
        assert!(placement.stats().copied_bytes > 0);
        assert!(
            placement.stats().restored_bytes > 0,
            "a landing covered a copied tail"
        );
    }

    #[test]
    fn a_damaged_landing_is_missing_again_and_its_neighbour_is_restored() {
        let g = Geometry::new(H, P).unwrap();
        let data = message(96);
        let mut placement = Placement::new(KEY, g, 96, 1).unwrap();
        let mut fill = FillQueue::new(4, WHOLE_FRAME_BUFFERS);
        let mut region = vec![0u8; placement.region_len()];
        // Frame 1 first by copy (its slot is not posted: window 1 holds frame 2's).
        placement
            .post_slots(&mut fill, &region, &mut |_| {})
            .unwrap();
        assert_eq!(
            placement.arrived_by_copy(1, &data[32..64], &mut region),
            Copied::Copied
        );
        // Frame 2 lands damaged: its headers covered frame 1's tail, which comes back.
        fill.device_take((H + 32) as u32);
        let start = g.landing_offset(2);
        region[start..start + H + 32].fill(0xaa);
        fill.engine_take();
        assert_eq!(placement.landed(2, false, &mut region), Landed::Damaged);
        assert_eq!(&region[H + 32..H + 64], &data[32..64]);
        assert!(!placement.is_received(2));
        placement
            .post_slots(&mut fill, &region, &mut |_| {})
            .unwrap();
        for index in [2, 0] {
            deliver(&mut placement, &mut fill, &mut region, &data, index);
        }
        assert!(placement.is_complete());
        assert_eq!(&region[H..], &data[..]);
    }

    #[test]
    fn an_aborted_transfer_voids_its_waiting_slots() {
        let g = Geometry::new(H, P).unwrap();
        let mut placement = Placement::new(KEY, g, 1024, 8).unwrap();
        let mut fill = FillQueue::new(16, WHOLE_FRAME_BUFFERS);
        let region = vec![0u8; placement.region_len()];
        assert_eq!(
            placement
                .post_slots(&mut fill, &region, &mut |_| {})
                .unwrap(),
            8
        );
        assert_eq!(placement.abort(&mut fill), 8);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 40 }), Steer::Ring);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 41 }), Steer::Kernel);
    }

    #[test]
    fn a_smaller_window_posts_fewer_slots_and_never_grows_past_the_first() {
        let g = Geometry::new(H, P).unwrap();
        let mut placement = Placement::new(KEY, g, 200, 4).unwrap();
        let mut fill = FillQueue::new(16, WHOLE_FRAME_BUFFERS);
        let region = vec![0u8; placement.region_len()];
        placement.set_window(2);
        let posted = placement
            .post_slots(&mut fill, &region, &mut |_| {})
            .unwrap();
        assert_eq!(posted, 2);
        placement.set_window(100);
        assert_eq!(
            placement.window(),
            4,
            "clamped to the window it was made with"
        );
        placement.set_window(0);
        assert_eq!(placement.window(), 1);
    }

    #[test]
    fn windows_out_of_range_are_refused() {
        let g = Geometry::new(H, P).unwrap();
        assert!(Placement::new(KEY, g, 10, 0).is_err());
        assert!(Placement::new(KEY, g, 10, MAX_WINDOW + 1).is_err());
    }
}

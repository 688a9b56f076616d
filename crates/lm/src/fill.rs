//! The receiving device's fill queue, as the engine mirrors it, and the steering rule.
//!
//! A NIC that cannot split headers writes each frame it hands to user space at the next
//! address of a queue the receiver filled beforehand (AF_XDP's fill ring; LM's driver kept the
//! same kind of list). The device takes addresses first in, first out, whatever frame arrives:
//! so a frame lands at the address meant for it only if the receiver knows, for every address
//! at the head, which frame may take it. LM's admission control is the paper's answer (only
//! the admitted sender's frames reach the device while its transfer is placed); on a packet
//! path that can run a filter (XDP), the filter can go further and let a frame take the head
//! address only if that address is the frame's own. [`FillQueue::steer`] is that rule.
//!
//! Each posted address is a [`Slot`]: an ordinary chunk (any frame that fits lands there and is
//! copied out, as today's ring frames are), the place of one frame of an admitted transfer
//! (only that frame, with exactly its length, may land there), or a void place (a transfer's
//! place given up: any frame that fits may land there, so the queue drains; the region it
//! points into is not reused until it has). A frame that may not take the head address goes
//! the ordinary way (the kernel's socket, one copy), so nothing waits for a slot.
//!
//! A device whose buffers are smaller than a frame (AF_XDP with scatter-gather: a 9000-byte
//! frame fills three 3840-byte buffers) writes the frame across as many consecutive addresses
//! as it needs. So each slot stands for the run of addresses its frame fills
//! ([`Slot::addresses`]), posted one buffer apart so the frame lands in one piece. A placement
//! run is taken whole (only its frame, of exactly its length, may take it). A void run may be
//! taken by a shorter frame, which fills only the first addresses: the rest of the run stays
//! at the head as a void run of its own ([`FillQueue::device_take`] splits it), so any frame
//! that fits still drains it. Ordinary chunks are one buffer each.
//!
//! The queue has two cursors: the device's (addresses it has taken; on AF_XDP the filter counts
//! them in a map) and the engine's (taken addresses whose frames the engine has seen, in the
//! same order, from the receive ring). The engine changes only slots the device has not taken.

use std::collections::VecDeque;

/// An admitted transfer at its receiver: the receiver's number for it, carried by every frame
/// of the transfer so that the steering rule can compare it with the head slot's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransferKey(pub u32);

/// The most slots a fill queue holds: AF_XDP's fill ring of 4096 entries (the transport's
/// size), so the mirror can never hold an address the device's ring could not.
pub const MAX_FILL_SLOTS: usize = 4096;

/// The device buffer of a device that writes every frame at one address, whatever its length
/// (a frame never spans buffers).
pub const WHOLE_FRAME_BUFFERS: u32 = u32::MAX;

/// How many consecutive device buffers of `buffer_bytes` a frame of `len` bytes fills (an empty
/// frame still takes one).
pub fn buffers_for(len: u32, buffer_bytes: u32) -> u32 {
    len.div_ceil(buffer_bytes).max(1)
}

/// The most transfers open at once at one receiver: the paper admits one; a few more let an
/// aborted transfer's voided slots drain while the next is placed.
pub const MAX_OPEN_TRANSFERS: usize = 4;

/// One address posted to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// An ordinary chunk of the transport's memory, `capacity` bytes.
    Ordinary { chunk: u32, capacity: u32 },
    /// The place of frame `index` of `transfer`, which is `len` bytes with its headers.
    Placement {
        transfer: TransferKey,
        index: u32,
        len: u32,
    },
    /// A place of `transfer`'s frame `index` given up: any frame of at most `capacity` bytes,
    /// landing `skip` bytes past where frame `index` would have (not 0 only for the rest of a
    /// run a shorter frame took the start of).
    Void {
        transfer: TransferKey,
        index: u32,
        capacity: u32,
        skip: u32,
    },
}

impl Slot {
    /// The transfer whose receive region this slot points into, if any.
    pub fn transfer(&self) -> Option<TransferKey> {
        match *self {
            Slot::Ordinary { .. } => None,
            Slot::Placement { transfer, .. } | Slot::Void { transfer, .. } => Some(transfer),
        }
    }

    /// The longest frame the slot takes: a placement's exact length, else its capacity.
    pub fn max_len(&self) -> u32 {
        match *self {
            Slot::Placement { len, .. } => len,
            Slot::Ordinary { capacity, .. } | Slot::Void { capacity, .. } => capacity,
        }
    }

    /// How many consecutive device buffers of `buffer_bytes` the slot is posted as: as many as
    /// its longest frame fills. A void slot keeps its placement's run (its capacity is the
    /// placed frame's length).
    pub fn addresses(&self, buffer_bytes: u32) -> u32 {
        buffers_for(self.max_len(), buffer_bytes)
    }
}

/// What the steering rule knows of an arriving frame (read from its headers on the packet
/// path: the frame header's kind, transfer and index, and the frame's length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A frame of no admitted transfer, `len` bytes.
    Ordinary { len: u32 },
    /// Frame `index` of `transfer`, `len` bytes with its headers.
    Transfer {
        transfer: TransferKey,
        index: u32,
        len: u32,
    },
}

impl Arrival {
    /// What a packet filter reads of a frame as the device writes it, `link_len` bytes of
    /// link headers (Ethernet, IP, UDP) first, without checking it: LM-DATA with a transfer
    /// key is a frame of that transfer, anything else ordinary.
    pub fn of_frame(bytes: &[u8], link_len: usize) -> Self {
        let len = bytes.len() as u32;
        let view = bytes
            .get(link_len..)
            .and_then(|frame| nicmsg_wire::FrameView::new_checked(frame).ok());
        match view {
            Some(view)
                if view.kind_code() == nicmsg_wire::FrameKind::LmData as u8 && view.aux() != 0 =>
            {
                Self::Transfer {
                    transfer: TransferKey(view.aux()),
                    index: view.frame_index(),
                    len,
                }
            }
            _ => Self::Ordinary { len },
        }
    }
}

/// Where an arriving frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// To the device's queue: it takes the head slot.
    Ring,
    /// The ordinary way (the kernel's socket), and is copied once.
    Kernel,
}

/// Why a slot could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    #[error("the fill queue is full ({MAX_FILL_SLOTS} slots)")]
    Full,
    #[error("{MAX_OPEN_TRANSFERS} transfers are open already")]
    TooManyOpen,
}

/// The mirror of the device's fill queue.
#[derive(Debug)]
pub struct FillQueue {
    /// Slots in the order posted: the first `taken` of them the device has taken.
    slots: VecDeque<Slot>,
    /// How many of `slots` (from the front) the device has taken.
    taken: usize,
    capacity: usize,
    /// The device's buffer size ([`WHOLE_FRAME_BUFFERS`] if a frame never spans buffers).
    buffer_bytes: u32,
    /// Transfers whose placement slots may be taken by their frames.
    open: Vec<TransferKey>,
}

impl FillQueue {
    /// A queue of at most `capacity` slots (at most [`MAX_FILL_SLOTS`]) on a device whose
    /// buffers hold `buffer_bytes` each.
    pub fn new(capacity: usize, buffer_bytes: u32) -> Self {
        assert!(
            capacity > 0 && capacity <= MAX_FILL_SLOTS,
            "fill queue of {capacity}"
        );
        assert!(buffer_bytes > 0, "device buffers of 0 bytes");
        Self {
            slots: VecDeque::with_capacity(capacity),
            taken: 0,
            capacity,
            buffer_bytes,
            open: Vec::with_capacity(MAX_OPEN_TRANSFERS),
        }
    }

    /// Slots that may still be posted. A void run split by a shorter frame
    /// ([`device_take`](Self::device_take)) counts as two slots but fills no more addresses,
    /// so the queue may hold more slots than its capacity for a while; it takes no new one
    /// until it is below it again (each slot posted is then at most one run of the longest
    /// frame, and the device's addresses never overflow).
    pub fn free(&self) -> usize {
        self.capacity.saturating_sub(self.slots.len())
    }

    /// Posts a slot behind the others. An ordinary chunk must be one device buffer.
    pub fn post(&mut self, slot: Slot) -> Result<(), FillError> {
        debug_assert!(
            !matches!(slot, Slot::Ordinary { .. }) || slot.addresses(self.buffer_bytes) == 1,
            "an ordinary chunk larger than a device buffer"
        );
        if self.slots.len() >= self.capacity {
            return Err(FillError::Full);
        }
        self.slots.push_back(slot);
        Ok(())
    }

    /// Lets `transfer`'s frames take their slots.
    pub fn open(&mut self, transfer: TransferKey) -> Result<(), FillError> {
        if self.open.contains(&transfer) {
            return Ok(());
        }
        if self.open.len() == MAX_OPEN_TRANSFERS {
            return Err(FillError::TooManyOpen);
        }
        self.open.push(transfer);
        Ok(())
    }

    /// Stops `transfer`'s frames from taking their slots (they go the ordinary way).
    pub fn close(&mut self, transfer: TransferKey) {
        self.open.retain(|&open| open != transfer);
    }

    pub fn is_open(&self, transfer: TransferKey) -> bool {
        self.open.contains(&transfer)
    }

    /// The next slot the device will take.
    pub fn head(&self) -> Option<&Slot> {
        self.slots.get(self.taken)
    }

    /// The steering rule: may `arrival` take the head slot? A frame of an open transfer may
    /// take only its own placement slot; any frame that fits may take an ordinary or void one
    /// (a void run's start, if shorter: [`device_take`](Self::device_take)); everything else
    /// goes the ordinary way, so no frame ever lands on bytes not meant for it.
    pub fn steer(&self, arrival: Arrival) -> Steer {
        let Some(head) = self.head() else {
            return Steer::Kernel;
        };
        let fits = match (*head, arrival) {
            (
                Slot::Placement {
                    transfer,
                    index,
                    len,
                },
                Arrival::Transfer {
                    transfer: t,
                    index: i,
                    len: l,
                },
            ) => transfer == t && index == i && len == l && self.is_open(transfer),
            (Slot::Placement { .. }, Arrival::Ordinary { .. }) => false,
            (Slot::Ordinary { capacity, .. } | Slot::Void { capacity, .. }, arrival) => {
                arrival_len(arrival) <= capacity
            }
        };
        if fits {
            Steer::Ring
        } else {
            Steer::Kernel
        }
    }

    /// The device takes the head slot for a frame of `len` bytes that [`steer`](Self::steer)
    /// sent to the ring. A frame that fills fewer buffers than a void run takes the start of
    /// it: that part is the slot taken, and the rest stays at the head.
    pub fn device_take(&mut self, len: u32) -> Slot {
        let head = *self
            .head()
            .expect("the device takes a slot it was steered to");
        let filled = buffers_for(len, self.buffer_bytes);
        let slot = match head {
            Slot::Void {
                transfer,
                index,
                capacity,
                skip,
            } if filled < head.addresses(self.buffer_bytes) => {
                let taken_bytes = filled * self.buffer_bytes;
                let rest = Slot::Void {
                    transfer,
                    index,
                    capacity: capacity - taken_bytes,
                    skip: skip + taken_bytes,
                };
                let taken = Slot::Void {
                    transfer,
                    index,
                    capacity: taken_bytes,
                    skip,
                };
                self.slots[self.taken] = rest;
                self.slots.insert(self.taken, taken);
                taken
            }
            _ => head,
        };
        debug_assert!(
            filled == slot.addresses(self.buffer_bytes),
            "a frame of {len} B took {slot:?}: the steering rule let it"
        );
        self.taken += 1;
        slot
    }

    /// The engine sees the oldest taken slot's frame on the receive ring: the slot leaves the
    /// queue. `None` if the device has taken nothing (a receive ring entry without a taken
    /// slot means the mirror and the device disagree).
    pub fn engine_take(&mut self) -> Option<Slot> {
        if self.taken == 0 {
            return None;
        }
        self.taken -= 1;
        self.slots.pop_front()
    }

    /// Turns every placement slot of `transfer` the device has not taken into a void one, so
    /// that ordinary frames drain them. Returns how many.
    pub fn void(&mut self, transfer: TransferKey, capacity_of: impl Fn(u32) -> u32) -> u32 {
        let mut voided = 0;
        for slot in self.slots.iter_mut().skip(self.taken) {
            if let Slot::Placement {
                transfer: t, index, ..
            } = *slot
            {
                if t == transfer {
                    *slot = Slot::Void {
                        transfer,
                        index,
                        capacity: capacity_of(index),
                        skip: 0,
                    };
                    voided += 1;
                }
            }
        }
        voided
    }

    /// The device's buffer size the queue was made for.
    pub fn buffer_bytes(&self) -> u32 {
        self.buffer_bytes
    }

    /// Every slot in the queue, oldest first, taken by the device or not.
    pub fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter()
    }

    /// Slots in the queue (taken by the device or not) that point into `transfer`'s region.
    pub fn slots_of(&self, transfer: TransferKey) -> usize {
        self.slots
            .iter()
            .filter(|slot| slot.transfer() == Some(transfer))
            .count()
    }
}

fn arrival_len(arrival: Arrival) -> u32 {
    match arrival {
        Arrival::Ordinary { len } | Arrival::Transfer { len, .. } => len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TransferKey = TransferKey(7);

    fn place(index: u32) -> Slot {
        Slot::Placement {
            transfer: T,
            index,
            len: 100,
        }
    }

    fn frame(index: u32) -> Arrival {
        Arrival::Transfer {
            transfer: T,
            index,
            len: 100,
        }
    }

    #[test]
    fn only_the_frame_a_placement_slot_is_for_takes_it() {
        let mut fill = FillQueue::new(8, WHOLE_FRAME_BUFFERS);
        fill.open(T).unwrap();
        fill.post(place(2)).unwrap();
        fill.post(place(1)).unwrap();
        assert_eq!(fill.steer(frame(1)), Steer::Kernel);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 10 }), Steer::Kernel);
        assert_eq!(
            fill.steer(Arrival::Transfer {
                transfer: T,
                index: 2,
                len: 99
            }),
            Steer::Kernel,
            "a frame of another length never lands on a placement slot"
        );
        assert_eq!(fill.steer(frame(2)), Steer::Ring);
        assert_eq!(fill.device_take(100), place(2));
        assert_eq!(fill.steer(frame(1)), Steer::Ring);
        fill.close(T);
        assert_eq!(
            fill.steer(frame(1)),
            Steer::Kernel,
            "closed transfers land nowhere"
        );
    }

    #[test]
    fn ordinary_and_void_slots_take_any_frame_that_fits() {
        let mut fill = FillQueue::new(8, WHOLE_FRAME_BUFFERS);
        fill.post(Slot::Ordinary {
            chunk: 0,
            capacity: 64,
        })
        .unwrap();
        assert_eq!(fill.steer(Arrival::Ordinary { len: 65 }), Steer::Kernel);
        assert_eq!(
            fill.steer(frame(0)),
            Steer::Kernel,
            "too long for the chunk"
        );
        assert_eq!(fill.steer(Arrival::Ordinary { len: 64 }), Steer::Ring);
        fill.device_take(64);
        assert_eq!(
            fill.steer(Arrival::Ordinary { len: 1 }),
            Steer::Kernel,
            "empty"
        );
        fill.open(T).unwrap();
        fill.post(place(3)).unwrap();
        fill.post(place(2)).unwrap();
        assert_eq!(fill.void(T, |_| 50), 2);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 50 }), Steer::Ring);
        assert_eq!(fill.slots_of(T), 2);
    }

    #[test]
    fn a_void_run_is_drained_by_shorter_frames_a_part_at_a_time() {
        // Buffers of 40 bytes: a 100-byte placement is a run of three addresses.
        let mut fill = FillQueue::new(8, 40);
        assert_eq!(place(0).addresses(40), 3);
        fill.open(T).unwrap();
        fill.post(place(1)).unwrap();
        fill.post(place(0)).unwrap();
        assert_eq!(fill.void(T, |_| 100), 2);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 101 }), Steer::Kernel);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 41 }), Steer::Ring);
        let void = |capacity, skip| Slot::Void {
            transfer: T,
            index: 1,
            capacity,
            skip,
        };
        assert_eq!(fill.device_take(41), void(80, 0), "two buffers of the run");
        assert_eq!(
            fill.head(),
            Some(&void(20, 80)),
            "the rest waits at the head"
        );
        assert_eq!(fill.steer(Arrival::Ordinary { len: 21 }), Steer::Kernel);
        assert_eq!(fill.steer(Arrival::Ordinary { len: 20 }), Steer::Ring);
        assert_eq!(fill.device_take(1), void(20, 80));
        assert_eq!(fill.device_take(100).addresses(40), 3, "a whole run");
        assert_eq!(fill.slots_of(T), 3);
        assert_eq!(fill.engine_take(), Some(void(80, 0)));
        assert_eq!(fill.engine_take(), Some(void(20, 80)));
    }

    #[test]
    fn a_split_in_a_full_queue_posts_nothing_more_until_it_drains() {
        let mut fill = FillQueue::new(1, 40);
        fill.open(T).unwrap();
        fill.post(place(0)).unwrap();
        fill.void(T, |_| 100);
        fill.device_take(10);
        assert_eq!(fill.free(), 0, "two slots in a queue of one");
        assert_eq!(fill.post(place(1)), Err(FillError::Full));
        fill.engine_take();
        assert_eq!(
            fill.steer(Arrival::Ordinary { len: 60 }),
            Steer::Ring,
            "the rest"
        );
        fill.device_take(60);
        fill.engine_take();
        assert_eq!(fill.free(), 1);
    }

    #[test]
    fn the_engine_sees_taken_slots_in_order() {
        let mut fill = FillQueue::new(2, WHOLE_FRAME_BUFFERS);
        assert_eq!(fill.engine_take(), None);
        fill.post(place(1)).unwrap();
        fill.post(place(0)).unwrap();
        assert_eq!(fill.post(place(0)), Err(FillError::Full));
        fill.open(T).unwrap();
        fill.device_take(100);
        fill.device_take(100);
        assert_eq!(fill.void(T, |_| 1), 0, "taken slots are the device's");
        assert_eq!(fill.engine_take(), Some(place(1)));
        assert_eq!(fill.engine_take(), Some(place(0)));
        assert_eq!(fill.free(), 2);
    }
}

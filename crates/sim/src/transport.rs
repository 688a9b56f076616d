//! The engine's transport in a simulation: frames the engine sends wait in an outbox for the
//! simulator to hand to the network; frames the network delivers wait in an inbox for the
//! engine's next receive. It behaves as the UDP transport does where the engine can tell:
//! batches of [`RECEIVE_BATCH`], the speculative header/payload split (the payload of the
//! datagram landing in receive slot `i` is written to plan target `i` before anyone looks at
//! it, wrong guesses included, as the kernel scatters it), back-pressure (a send may take only
//! some of the frames offered, drawn from the rank's seeded stream), and refusals (ICMP port
//! unreachable) queued until the engine asks.

use crate::rng::SimRng;
use nicmsg_engine::{Origin, Peeked, PlacementTarget, Received, Transport};
use nicmsg_proto::Rank;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;

/// Datagrams per receive call: the UDP transport's `recvmmsg` batch.
pub const RECEIVE_BATCH: usize = 64;
/// Chance that a send call takes fewer frames than offered (a full socket buffer).
const PARTIAL_SEND_CHANCE: f64 = 0.05;
/// Most bytes and most frames the kernel coalesces into one received datagram (GRO): one IP
/// packet's worth, and `UDP_MAX_SEGMENTS`.
const COALESCED_MAX_BYTES: usize = 65536;
const COALESCED_MAX_FRAMES: usize = 64;

pub struct SimTransport {
    mtu: usize,
    /// Delivered by the network, not yet received: (source rank, datagram).
    inbox: VecDeque<(Rank, Vec<u8>)>,
    /// Sent by the engine, not yet handed to the network: (destination rank, datagram).
    outbox: Vec<(Rank, Vec<u8>)>,
    refused: Vec<Rank>,
    rng: SimRng,
    /// The next receive takes one datagram (`Transport::receive_one_next`).
    one_datagram_next: bool,
    /// Runs of datagrams are coalesced as UDP with GRO does: a look ahead sees a run of one
    /// source's datagrams of one length (the last may be shorter) as one datagram, and the
    /// receive of one datagram after it takes the run.
    coalesces: bool,
    /// Datagrams in the run the last look saw.
    looked_run: usize,
    /// Counters: send calls that took fewer frames than offered, datagrams received placed.
    pub partial_sends: u64,
    pub placed: u64,
    /// Damaged copies of a frame taken placed because the frame's own payload was already
    /// where they landed (see `receive_placed`).
    pub damaged_copies_over_their_frame: u64,
}

impl SimTransport {
    pub fn new(mtu: usize, rng: SimRng) -> Self {
        Self {
            mtu,
            inbox: VecDeque::new(),
            outbox: Vec::new(),
            refused: Vec::new(),
            rng,
            one_datagram_next: false,
            coalesces: false,
            looked_run: 1,
            partial_sends: 0,
            placed: 0,
            damaged_copies_over_their_frame: 0,
        }
    }

    /// The network delivers a datagram from `source`.
    pub fn arrive(&mut self, source: Rank, bytes: Vec<u8>) {
        self.inbox.push_back((source, bytes));
    }

    /// A frame to `peer` was refused by its host.
    pub fn refuse(&mut self, peer: Rank) {
        self.refused.push(peer);
    }

    /// The frames sent since the last call, in order.
    pub fn take_sent(&mut self) -> std::vec::Drain<'_, (Rank, Vec<u8>)> {
        self.outbox.drain(..)
    }

    /// A placed datagram was taken: if it is damaged, it may be only because its frame's real
    /// payload was already at its place, written there by the ordinary handling of an intact
    /// copy earlier in the batch (the core verifies the payload where it lies). It is then a
    /// duplicate, and counted as such rather than as a bad checksum. A damaged payload found
    /// at its place is not counted here, so the run's corruption check reports it.
    fn note_damaged_copy(&mut self, target: &PlacementTarget, bytes: &[u8]) {
        if !damaged(bytes) {
            return;
        }
        // SAFETY: the target is valid for reads of its length during the receive (contract).
        let placed = unsafe { std::slice::from_raw_parts(target.dest, target.len) };
        if bytes.get(target.header_len..) != Some(placed) {
            self.damaged_copies_over_their_frame += 1;
        }
    }

    /// Has looks ahead see runs of datagrams as one, as with GRO (see `coalesces`).
    pub fn coalesce_runs(&mut self) {
        self.coalesces = true;
    }

    /// Datagrams the next receive takes (one datagram asked for: the run looked at), and
    /// forgets a request for one and the run looked at (a later request looks again).
    fn batch_len(&mut self) -> usize {
        let run = std::mem::replace(&mut self.looked_run, 1);
        let limit = if std::mem::take(&mut self.one_datagram_next) {
            run
        } else {
            RECEIVE_BATCH
        };
        self.inbox.len().min(limit)
    }

    /// How many datagrams at the head of the inbox GRO would hand over as one, and their
    /// length: one source's, each as long as the first but the last, which may be shorter.
    fn run_at_head(&self) -> (usize, usize) {
        let Some((source, first)) = self.inbox.front() else {
            return (0, 0);
        };
        let (mut count, mut bytes) = (1, first.len());
        if !self.coalesces {
            return (count, bytes);
        }
        for (from, datagram) in self.inbox.iter().skip(1) {
            let fits = from == source
                && !datagram.is_empty()
                && datagram.len() <= first.len()
                && bytes + datagram.len() <= COALESCED_MAX_BYTES
                && count < COALESCED_MAX_FRAMES;
            if !fits {
                break;
            }
            count += 1;
            bytes += datagram.len();
            if datagram.len() < first.len() {
                break;
            }
        }
        (count, bytes)
    }

    /// The host died: the datagrams in its socket are never read. Returns how many of them
    /// were damaged on the way (they never reached the endpoint, so no drop counts them).
    pub fn discard_unread(&mut self) -> u64 {
        let damaged = self
            .inbox
            .drain(..)
            .filter(|(_, bytes)| damaged(bytes))
            .count();
        damaged as u64
    }

    pub fn has_pending_input(&self) -> bool {
        !self.inbox.is_empty() || !self.refused.is_empty()
    }

    /// Receives one datagram into receive slot `slot` of a batch planned with `plan`: as the
    /// kernel does, the bytes after the header go to the slot's target, whatever the datagram.
    /// Returns whether it was placed (had payload written to a target).
    ///
    /// # Safety
    /// As [`Transport::receive_placed`] for `plan`.
    unsafe fn scatter(plan: &[PlacementTarget], slot: usize, bytes: &[u8]) -> bool {
        let Some(target) = plan.get(slot) else {
            return false;
        };
        if bytes.len() <= target.header_len {
            return false;
        }
        let payload = &bytes[target.header_len..];
        let written = payload.len().min(target.len);
        // SAFETY: the target is valid for writes of `target.len` bytes and nobody else
        // accesses it during the call (the caller's contract); `payload` is our own buffer.
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), target.dest, written) };
        true
    }
}

impl Transport for SimTransport {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn send(&mut self, frames: &[(u32, &[&[u8]])]) -> io::Result<usize> {
        let mut taken = frames.len();
        if taken > 0 && self.rng.chance(PARTIAL_SEND_CHANCE) {
            taken = self.rng.below(taken as u64) as usize;
            self.partial_sends += 1;
        }
        for &(dst, pieces) in &frames[..taken] {
            self.outbox.push((dst, pieces.concat()));
        }
        Ok(taken)
    }

    fn receive(&mut self, deliver: &mut dyn FnMut(Origin, &[u8])) -> io::Result<usize> {
        let count = self.batch_len();
        for (source, bytes) in self.inbox.drain(..count) {
            deliver(Origin::rank(Some(source)), &bytes);
        }
        Ok(count)
    }

    unsafe fn receive_placed(
        &mut self,
        plan: &[PlacementTarget],
        looks_expected: &dyn Fn(usize, &[u8], usize) -> bool,
        deliver: &mut dyn FnMut(Origin, Received<'_>) -> bool,
    ) -> io::Result<usize> {
        let count = self.batch_len();
        let batch: Vec<(Rank, Vec<u8>)> = self.inbox.drain(..count).collect();
        // The kernel writes every datagram of the batch before the engine looks at any.
        let placed: Vec<bool> = batch
            .iter()
            .enumerate()
            // SAFETY: forwarded from this function's contract.
            .map(|(slot, (_, bytes))| unsafe { Self::scatter(plan, slot, bytes) })
            .collect();
        for (slot, (source, bytes)) in batch.iter().enumerate() {
            // A placed datagram is longer than its slot's headers, which stayed here.
            let header = placed[slot].then(|| &bytes[..plan[slot].header_len]);
            if let Some(header) = header.filter(|h| looks_expected(slot, h, bytes.len())) {
                self.placed += 1;
                let offered = Received::Placed {
                    slot,
                    header,
                    len: bytes.len(),
                };
                if deliver(Origin::rank(Some(*source)), offered) {
                    self.note_damaged_copy(&plan[slot], bytes);
                    continue;
                }
            }
            // A wrong guess, or refused: the datagram put back together (here: never apart).
            deliver(Origin::rank(Some(*source)), Received::Bytes(bytes));
        }
        Ok(count)
    }

    fn peek(&mut self, head: &mut [u8]) -> Peeked {
        let (run, run_len) = self.run_at_head();
        let Some((source, bytes)) = self.inbox.front() else {
            return Peeked::Nothing;
        };
        self.looked_run = run;
        Peeked::held_run(Origin::rank(Some(*source)), bytes, run_len, head)
    }

    fn receive_one_next(&mut self) {
        self.one_datagram_next = true;
    }

    fn readable_fds(&self) -> Vec<RawFd> {
        Vec::new()
    }

    fn max_frame(&self) -> usize {
        self.mtu
    }

    fn refusals_may_be_queued(&self) -> bool {
        !self.refused.is_empty()
    }

    fn take_refused(&mut self, refused: &mut dyn FnMut(u32)) -> usize {
        let count = self.refused.len();
        for peer in self.refused.drain(..) {
            refused(peer);
        }
        count
    }
}

/// Whether a datagram was damaged on the way: it no longer parses as a frame. The network's
/// damage always shows so (a changed header or payload byte fails the checksum, or the frame's
/// structure); a link that checks payloads drops payload damage before any endpoint sees it.
fn damaged(bytes: &[u8]) -> bool {
    nicmsg_wire::Frame::parse(bytes).is_err()
}

//! The host half of the descriptor-table protocol (EMP section 3.3), beside the engine half
//! (`driver.rs`): which slots and memory regions are free, posting an operation (register its
//! buffer, fill a slot, push it on the ring), asking for a cancel, and taking a result back
//! (unregister, free). One host thread owns a `HostTable`: the API's communicator (and the C
//! ABI through it) in a process, each rank of the simulator in a simulation.

use crate::registry::Registry;
use crate::table::{state, Descriptor, Envelope, OpCode, Outcome, ResultCode, Table};
use nicmsg_proto::{RegionId, Segment, MAX_SEGMENTS};
use std::sync::Arc;
use thiserror::Error;

/// An operation handed to the engine: its slot and the regions its buffer is registered in,
/// needed to take it back.
/// Not `Copy`: taking it back consumes it, so an operation cannot be taken twice.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a posted operation holds its slot and regions until it is taken back"]
pub struct Posted {
    pub slot: u32,
    regions: [u32; MAX_SEGMENTS],
    region_count: u8,
}

impl Posted {
    pub fn regions(&self) -> &[u32] {
        &self.regions[..usize::from(self.region_count)]
    }
}

/// Why the host could not post an operation; nothing was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HostError {
    #[error("the {table} table is full ({limit} entries); complete some operations first")]
    TableFull { table: &'static str, limit: usize },
    #[error("too many buffer segments: {count} (limit {limit})")]
    TooManySegments { count: usize, limit: usize },
}

/// The host's side of one descriptor table and its memory registry.
pub struct HostTable {
    table: Arc<Table>,
    registry: Arc<Registry>,
    /// Free slots and regions, used as stacks (the most recently freed, cache-warm, first).
    free_slots: Vec<u32>,
    free_regions: Vec<u32>,
    /// A cancel was pushed for the slot's current operation: the ring has room for one cancel
    /// per slot, so asking again must not push another.
    cancel_pushed: Box<[bool]>,
    /// Operations given up because the engine stopped: their slots and regions are never
    /// reused (the engine may still hold them), and they no longer count as outstanding.
    abandoned: usize,
}

impl HostTable {
    pub fn new(table: Arc<Table>, registry: Arc<Registry>) -> Self {
        Self {
            free_slots: (0..table.len() as u32).rev().collect(),
            free_regions: (0..registry.capacity() as u32).rev().collect(),
            cancel_pushed: vec![false; table.len()].into_boxed_slice(),
            abandoned: 0,
            table,
            registry,
        }
    }

    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Operations posted and neither taken back nor abandoned.
    pub fn outstanding(&self) -> usize {
        self.table.len() - self.free_slots.len() - self.abandoned
    }

    /// The engine stopped before `posted` completed: its slot and memory can never be handed
    /// back (the engine may still hold them), so they stay out of the free lists for good, and
    /// the operation no longer counts as outstanding.
    pub fn abandon(&mut self, posted: Posted) {
        drop(posted);
        self.abandoned += 1;
    }

    /// The engine declared `rank` unreachable: operations naming it can only fail.
    pub fn is_unreachable(&self, rank: u32) -> bool {
        self.table.is_unreachable(rank)
    }

    /// Registers `ranges` (one region each), fills a free slot and hands it to the engine.
    ///
    /// # Safety
    /// Every range must stay valid until the operation is taken back ([`Self::take`]): not
    /// written by anyone else for a receive or probe (the engine writes it), not written at all
    /// for a send (the engine reads it).
    pub unsafe fn post(
        &mut self,
        op: OpCode,
        peer: u32,
        envelope: Envelope,
        ranges: &[(*mut u8, usize)],
    ) -> Result<Posted, HostError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.post_to(op, (peer, None), envelope, ranges) }
    }

    /// [`post`](Self::post) with, for a send on an open endpoint, the address it goes to
    /// (the engine finds or makes the peer slot for it).
    ///
    /// # Safety
    /// As for [`post`](Self::post).
    pub unsafe fn post_to(
        &mut self,
        op: OpCode,
        (peer, address): (u32, Option<std::net::SocketAddr>),
        envelope: Envelope,
        ranges: &[(*mut u8, usize)],
    ) -> Result<Posted, HostError> {
        if ranges.len() > MAX_SEGMENTS {
            return Err(HostError::TooManySegments {
                count: ranges.len(),
                limit: MAX_SEGMENTS,
            });
        }
        if self.free_regions.len() < ranges.len() {
            return Err(HostError::TableFull {
                table: "memory region",
                limit: self.registry.capacity(),
            });
        }
        let slot = self.free_slots.pop().ok_or(HostError::TableFull {
            table: "descriptor",
            limit: self.table.len(),
        })?;
        let mut posted = Posted {
            slot,
            regions: [0; MAX_SEGMENTS],
            region_count: ranges.len() as u8,
        };
        for (region, &(base, len)) in posted.regions.iter_mut().zip(ranges) {
            *region = self.free_regions.pop().expect("counted above");
            // SAFETY: the caller's contract; a zero-length range is registered as one byte so
            // the region is in use (the engine never touches bytes past a segment's length).
            unsafe { self.registry.register(RegionId(*region), base, len.max(1)) };
        }
        let fill = |d: &mut Descriptor| {
            d.op = op;
            d.peer = peer;
            d.address = address;
            d.envelope = envelope;
            d.result = ResultCode::Success;
            // Only a claim writes it: a claim's answer must not outlive its slot's reuse.
            d.status_claim = None;
            d.buffer.clear();
            for (&region, &(_, len)) in posted.regions().iter().zip(ranges) {
                let segment = Segment {
                    region: RegionId(region),
                    offset: 0,
                    len: len as u64,
                };
                d.buffer.push(segment).expect("at most MAX_SEGMENTS");
            }
        };
        self.cancel_pushed[slot as usize] = false;
        // SAFETY: the slot came from the free list, so the host owns it (FREE).
        unsafe { self.table.post_with(slot, fill) };
        Ok(posted)
    }

    /// The engine has finished the operation (its result can be taken).
    pub fn is_done(&self, posted: &Posted) -> bool {
        self.table.state(posted.slot) == state::DONE
    }

    /// Asks the engine to cancel the operation (it may be too late: it then completes
    /// normally). Asking again is harmless.
    pub fn request_cancel(&mut self, posted: &Posted) {
        let pushed = &mut self.cancel_pushed[posted.slot as usize];
        if !std::mem::replace(pushed, true) {
            // SAFETY: this is the single host thread of the table.
            unsafe { self.table.request_cancel(posted.slot) };
        }
    }

    /// Takes back a finished operation: its result; its memory is unregistered (the engine
    /// will not touch it again) and its slot and regions are free. While the engine still has
    /// it, nothing changes and it is handed back as the error.
    pub fn take(&mut self, posted: Posted) -> Result<Outcome, Posted> {
        if !self.is_done(&posted) {
            return Err(posted);
        }
        // SAFETY: DONE, so the host owns the slot again; single host thread.
        let outcome = unsafe { self.table.take_result(posted.slot) };
        for &region in posted.regions() {
            self.registry.unregister(RegionId(region));
            self.free_regions.push(region);
        }
        self.free_slots.push(posted.slot);
        Ok(outcome)
    }
}

// Not under loom: its atomics work only inside a model (`tests/loom_table.rs` covers the host
// half there).
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::table::CANCEL_BIT;
    use nicmsg_proto::{Context, TagMatch};

    fn host(slots: usize, regions: usize) -> HostTable {
        HostTable::new(
            Arc::new(Table::new(slots, 2)),
            Arc::new(Registry::new(regions)),
        )
    }

    /// Plays the engine: takes the next command and completes its slot.
    fn engine_completes(table: &Table) -> u32 {
        let slot = table.pop().expect("a command");
        // SAFETY: the slot was just posted to this (test) engine.
        unsafe { table.complete(slot, |d| d.status_len = 7) };
        slot
    }

    #[test]
    fn an_operation_goes_to_the_engine_and_comes_back_once() {
        let mut host = host(2, 4);
        let mut buffer = [0u8; 8];
        let range = [(buffer.as_mut_ptr(), buffer.len())];
        // SAFETY: `buffer` outlives the operation, which is taken back below.
        let posted = unsafe {
            host.post(
                OpCode::Recv,
                1,
                Envelope::matching(Context::USER, TagMatch::Tag(5)),
                &range,
            )
        }
        .unwrap();
        assert_eq!(host.outstanding(), 1);
        let registry = Arc::clone(host.registry());
        let region = RegionId(posted.regions()[0]);
        assert!(registry.address(region, 0, 8).is_some());
        let posted = host.take(posted).expect_err("still the engine's");
        engine_completes(host.table());
        let outcome = host.take(posted).expect("done");
        assert_eq!(outcome.status_len, 7);
        assert_eq!(host.outstanding(), 0);
        assert!(registry.address(region, 0, 1).is_none(), "unregistered");
    }

    #[test]
    fn a_full_table_or_registry_refuses_without_posting() {
        let mut host = host(1, 2);
        let mut buffer = [0u8; 4];
        let three = [(buffer.as_mut_ptr(), 1); 3];
        // SAFETY: nothing is registered on failure; below, `buffer` outlives the operation.
        let refused =
            unsafe { host.post(OpCode::Send, 1, Envelope::send(Context::USER, 0), &three) };
        assert!(matches!(
            refused,
            Err(HostError::TableFull {
                table: "memory region",
                ..
            })
        ));
        let one = &three[..1];
        // SAFETY: `buffer` outlives the operation, taken back at the end of the test.
        let posted =
            unsafe { host.post(OpCode::Send, 1, Envelope::send(Context::USER, 0), one) }.unwrap();
        // SAFETY: refused (the table is full), so nothing is registered.
        let refused = unsafe { host.post(OpCode::Send, 1, Envelope::send(Context::USER, 0), one) };
        assert!(matches!(
            refused,
            Err(HostError::TableFull {
                table: "descriptor",
                ..
            })
        ));
        assert_eq!(host.table().pop(), Some(posted.slot));
        assert_eq!(host.table().pop(), None, "the refused posts pushed nothing");
    }

    #[test]
    fn asking_twice_to_cancel_pushes_one_command() {
        let mut host = host(1, 1);
        // SAFETY: no memory is lent.
        let posted = unsafe {
            host.post(
                OpCode::Probe,
                1,
                Envelope::matching(Context::USER, TagMatch::Tag(0)),
                &[],
            )
        }
        .unwrap();
        assert_eq!(host.table().pop(), Some(posted.slot));
        host.request_cancel(&posted);
        host.request_cancel(&posted);
        assert_eq!(host.table().pop(), Some(posted.slot | CANCEL_BIT));
        assert_eq!(host.table().pop(), None);
    }
}

//! Claims: MPI's matched probe (`MPI_Mprobe`, `MPI_Improbe`, then `MPI_Mrecv`) and libfabric's
//! `FI_PEEK | FI_CLAIM`, then `FI_CLAIM` (or `FI_CLAIM | FI_DISCARD`).
//!
//! A claim is a probe that takes the message it finds: the message leaves the unexpected queue,
//! so no later receive or probe can see it, and only a receive naming the claim gets it. For
//! MPI ordering the message is matched when it is claimed (a receive posted after the claim
//! takes the next message of that source and tag); for the protocol it is not matched until
//! the claim is received: its data goes on arriving where an unexpected message's does (an
//! eager buffer, or nowhere for a rendezvous message, whose grant waits for the receive). Its
//! sender can no longer withdraw it (a cancel finds it matched, as MPI says).
//!
//! Claimed messages are bounded by the incoming table like every unexpected message; a claim
//! never received holds its entry (and eager buffer) until its sender fails, as an unexpected
//! message never received would.

use crate::slab::IncomingKey;
use crate::state::Core;
use crate::*;

/// Names a claimed message until it is received or discarded. Stale after that: its
/// generation no longer matches the message table's slot, so it names nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Claim {
    index: u32,
    generation: u32,
}

impl Claim {
    /// The claim as one word (a descriptor field, or libfabric's `fi_context`).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The claim a word from [`to_bits`](Self::to_bits) names; any word is accepted (a wrong
    /// one names no claimed message, which receiving it reports).
    pub fn from_bits(bits: u64) -> Self {
        Self {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

impl Core {
    /// Takes the first message a receive with these criteria would take now, if one is here,
    /// and reports its status (as a non-blocking probe) with the claim that names it.
    pub(crate) fn claim(
        &mut self,
        source: Source,
        context: Context,
        tag: TagMatch,
    ) -> Option<(Status, Claim)> {
        let incoming = self.rx.find_unexpected(source, context, tag)?;
        self.rx.remove_unexpected(incoming);
        self.rx[incoming].claimed = true;
        let claim = Claim {
            index: incoming.slot(),
            generation: self.rx.incoming_generation(incoming),
        };
        Some((self.rx.status_of(incoming), claim))
    }

    /// Receives the claimed message into `buffer` (truncated if it does not fit, as any
    /// receive); the receive completes as one posted by [`post_recv`](Core::post_recv).
    pub(crate) fn post_recv_claimed(
        &mut self,
        now: Nanos,
        claim: Claim,
        buffer: &SgList,
        memory: &mut impl HostMemory,
    ) -> Result<OpId, PostError> {
        buffer.validate(memory)?;
        let incoming = self.claimed_message(claim)?;
        let entry = &self.rx[incoming];
        let pattern = (entry.context, TagMatch::Tag(entry.tag));
        let source = Source::Rank(entry.peer);
        let (recv, id) = self.insert_recv_op(OpKind::Recv, source, pattern, buffer)?;
        self.rx[incoming].claimed = false;
        self.bind(now, recv, incoming, memory);
        Ok(id)
    }

    /// Drops the claimed message unread; its sender completes normally (as for a message a
    /// short receive truncated, which is consumed without data).
    pub(crate) fn discard_claimed(
        &mut self,
        now: Nanos,
        claim: Claim,
        memory: &mut impl HostMemory,
    ) -> Result<(), PostError> {
        let incoming = self.claimed_message(claim)?;
        let entry = &mut self.rx[incoming];
        entry.claimed = false;
        entry.matched = true;
        self.counters
            .record(entry.peer, |s| s.messages_discarded += 1);
        match self.rx[incoming].local_send {
            Some(send) => self.finish_local(incoming, send),
            None => self.truncate_incoming(now, incoming, memory),
        }
        Ok(())
    }

    /// The message `claim` names, if it is still claimed.
    fn claimed_message(&self, claim: Claim) -> Result<IncomingKey, PostError> {
        self.rx
            .incoming_key_checked(claim.index, claim.generation)
            .filter(|&key| self.rx[key].claimed)
            .ok_or(PostError::UnknownClaim)
    }
}

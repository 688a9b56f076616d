//! The tagged interface of an open endpoint, as libfabric's reliable datagram endpoints offer
//! it (the provider in `crates/fabric` stands on it): 64-bit tags matched with an ignore mask,
//! four bytes of immediate data delivered with a receive's completion, receives from any
//! sender or from one address, and two matching spaces that never meet (libfabric's tagged and
//! untagged messages). Peers are addresses, added as they are sent to or heard from, as for
//! the datagram socket ([`crate::dgram`]); the engine makes every message reliable and
//! ordered per sender and tag, and progresses on its own thread where it has one.

use crate::comm::Comm;
use crate::request::Request;
use crate::{Error, Options};
use nicmsg_engine::{Envelope, OpCode, Outcome, ANY};
use nicmsg_proto::{Claim, Context};
/// What a send asks for, and which tags a receive takes (64-bit tags with an ignore mask):
/// re-exported so that users of this interface need no other crate.
pub use nicmsg_proto::{SendOptions, TagMatch};
use std::net::SocketAddr;

/// Which of an endpoint's matching spaces a message travels in: a receive of one space never
/// takes a message of the other (libfabric's `FI_TAGGED` and `FI_MSG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Tagged,
    /// Messages without tags: every receive takes the next one (in the protocol, tag 0 of its
    /// own context).
    Untagged,
}

impl Space {
    fn context(self) -> Context {
        match self {
            Self::Tagged => Context::USER,
            Self::Untagged => Context::UNTAGGED,
        }
    }
}

/// What a completed operation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// A receive's or probe's sender; a send's destination.
    pub address: Option<SocketAddr>,
    pub tag: u64,
    /// The message's length (for a truncated receive too: the bytes it would have needed).
    pub len: u64,
    /// The receive buffer's length (a truncated receive: what fitted).
    pub buffer_len: u64,
    pub immediate: Option<u32>,
}

impl Delivery {
    fn of(outcome: &Outcome) -> Self {
        Self {
            address: outcome.address,
            tag: outcome.status_tag,
            len: outcome.status_len,
            buffer_len: outcome.buffer_len,
            immediate: outcome.status_immediate,
        }
    }
}

/// An open endpoint with 64-bit tags (see the module documentation). Not shareable between
/// threads, like [`Comm`]; it may be moved to another thread.
pub struct TaggedEndpoint {
    comm: Comm,
}

impl TaggedEndpoint {
    /// Binds to `address` (port 0: any free port), keeping state for at most `capacity` peers
    /// at once.
    pub fn bind(address: SocketAddr, capacity: u32, options: Options) -> Result<Self, Error> {
        Ok(Self {
            comm: Comm::open(options, address, capacity)?,
        })
    }

    /// The address peers send to.
    pub fn local_addr(&self) -> SocketAddr {
        self.comm
            .local_address()
            .expect("an open communicator is bound")
    }

    /// Starts sending the concatenation of `pieces` to `to`, with `tag` (ignored in
    /// [`Space::Untagged`]) and `options` (immediate data; whether the request may complete
    /// once the engine has copied the message, or only once `to` holds it). The pieces stay
    /// borrowed until the request completes.
    pub fn isend<'a>(
        &'a self,
        pieces: &[&'a [u8]],
        to: SocketAddr,
        (space, tag): (Space, u64),
        options: SendOptions,
    ) -> Result<Request<'a>, Error> {
        let envelope = Envelope {
            immediate: options.immediate,
            confirmed: options.confirmed,
            unwaited: options.unwaited,
            ..Envelope::send(space.context(), space_tag(space, tag))
        };
        self.comm.isend_enveloped(pieces, to, envelope)
    }

    /// Starts a receive into `pieces` of the next message of `space` whose tag `tag` accepts,
    /// from `from` or from anyone.
    pub fn irecv<'a>(
        &'a self,
        pieces: impl IntoIterator<Item = &'a mut [u8]>,
        from: Option<SocketAddr>,
        (space, tag): (Space, TagMatch),
    ) -> Result<Request<'a>, Error> {
        let envelope = Envelope::matching(space.context(), space_match(space, tag));
        self.comm.irecv_enveloped(pieces, from, envelope)
    }

    /// The message a receive with this pattern would take, if one is there (it stays).
    pub fn iprobe(
        &self,
        from: Option<SocketAddr>,
        (space, tag): (Space, TagMatch),
    ) -> Result<Option<Delivery>, Error> {
        let envelope = Envelope::matching(space.context(), space_match(space, tag));
        let found = self
            .comm
            .immediate_outcome(OpCode::IProbe, (ANY, from), envelope)?;
        Ok(found.map(|outcome| Delivery::of(&outcome)))
    }

    /// Matched probe (`MPI_Improbe`, `FI_PEEK | FI_CLAIM`): takes the message a receive with
    /// this pattern would take, if one is there, so that only [`irecv_claimed`] or
    /// [`discard`] naming the returned claim get it.
    ///
    /// [`irecv_claimed`]: Self::irecv_claimed
    /// [`discard`]: Self::discard
    pub fn claim(
        &self,
        from: Option<SocketAddr>,
        (space, tag): (Space, TagMatch),
    ) -> Result<Option<(Delivery, Claim)>, Error> {
        let envelope = Envelope::matching(space.context(), space_match(space, tag));
        let found = self
            .comm
            .immediate_outcome(OpCode::Claim, (ANY, from), envelope)?;
        Ok(found.and_then(|outcome| Some((Delivery::of(&outcome), outcome.status_claim?))))
    }

    /// Starts the receive of a claimed message into `pieces` (`MPI_Mrecv`); it completes as
    /// [`irecv`](Self::irecv)'s would.
    pub fn irecv_claimed<'a>(
        &'a self,
        pieces: impl IntoIterator<Item = &'a mut [u8]>,
        claim: Claim,
    ) -> Result<Request<'a>, Error> {
        self.comm.irecv_claimed(pieces, claim)
    }

    /// Drops a claimed message unread (`FI_CLAIM | FI_DISCARD`); its sender completes
    /// normally.
    pub fn discard(&self, claim: Claim) -> Result<(), Error> {
        self.comm
            .immediate_outcome(
                OpCode::DiscardClaimed,
                (ANY, None),
                Envelope::claimed(claim),
            )
            .map(drop)
    }

    /// One turn of the engine's progress where it runs inline (nothing in thread mode), for
    /// a caller that then looks at many requests with [`Request::delivery_if_done`].
    pub fn progress(&self) {
        self.comm.progress_once();
    }

    /// [`progress`](Self::progress) with the monotonic clock
    /// ([`nicmsg_engine::clock::monotonic_ns`]) already read, for a polling loop that reads it
    /// anyway: a clock read is a good part of an idle turn's cost.
    pub fn progress_at(&self, monotonic_ns: u64) {
        self.comm.progress_at(monotonic_ns);
    }

    /// The engine's counters (as `NICMSG_STATS` prints them).
    pub fn stats(&self) -> Result<crate::Snapshot, Error> {
        self.comm.stats()
    }

    /// A descriptor readable after the engine completes one of this endpoint's operations,
    /// for a caller sleeping in its own poll loop (libfabric's `FI_WAIT_FD`). Before each
    /// sleep: read [`completion_count`](Self::completion_count), look at the requests,
    /// [`arm_completion_fd`](Self::arm_completion_fd), and sleep only if the count has not
    /// changed since. Inline, the completions that wake the caller are the standby thread's,
    /// once the caller has been away from the library.
    pub fn completion_fd(&self) -> Result<std::os::fd::RawFd, Error> {
        self.comm.completion_fd()
    }

    /// Where the engine runs: on a thread of its own (completions come while the caller
    /// sleeps), or inline (only inside calls, and the standby's turns once the caller has been
    /// away).
    pub fn engine_mode(&self) -> crate::EngineMode {
        self.comm.engine_mode()
    }

    /// How many completions the engine has made (wrapping).
    /// Inline: every poll of the libfabric provider asks.
    #[inline]
    pub fn completion_count(&self) -> u32 {
        self.comm.completion_count()
    }

    /// The slot ([`Request::slot`]) of the next operation the engine completed, in the order
    /// it did: a caller with thousands of operations in flight asks these instead of every
    /// request. The slot may have been taken back or reused since, so ask the request itself
    /// before believing it. For one reader: the slots a reader takes, another never sees.
    pub fn next_finished_slot(&self) -> Option<u32> {
        self.comm.next_finished_slot()
    }

    /// True if [`next_finished_slot`](Self::next_finished_slot) may have missed operations
    /// that finished (the engine's record of them filled while nobody read it, or its thread
    /// failed): the reader then asks every request of its own once.
    pub fn finished_slots_incomplete(&self) -> bool {
        self.comm.finished_slots_incomplete()
    }

    /// Arms the completion descriptor: the next completion makes it readable.
    pub fn arm_completion_fd(&self) {
        self.comm.arm_completion_fd();
    }

    /// Makes the completion descriptor readable if it is armed, as a completion by the engine
    /// would: for a caller that completes an operation itself (libfabric's provider, a send it
    /// finished by copying the bytes) while another thread may sleep on the descriptor.
    pub fn wake_completion_fd(&self) {
        self.comm.wake_completion_fd();
    }
}

impl Request<'_> {
    /// For the tagged interface, after [`TaggedEndpoint::progress`] (one turn for many
    /// requests): `None` while in flight; then the result and what the completion reports
    /// (for a truncated receive too, so its lengths, tag and immediate data can be told).
    pub fn delivery_if_done(&mut self) -> Option<(Result<(), Error>, Delivery)> {
        self.outcome_if_done()
            .map(|(result, outcome)| (result, Delivery::of(&outcome)))
    }
}

/// Untagged messages all carry tag 0.
fn space_tag(space: Space, tag: u64) -> u64 {
    match space {
        Space::Tagged => tag,
        Space::Untagged => 0,
    }
}

/// Every untagged receive takes the next untagged message.
fn space_match(space: Space, tag: TagMatch) -> TagMatch {
    match space {
        Space::Tagged => tag,
        Space::Untagged => TagMatch::Any,
    }
}

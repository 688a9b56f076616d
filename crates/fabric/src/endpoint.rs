//! The Rust half of the provider: one [`FabricEndpoint`] per libfabric endpoint, driven by
//! `provider/` through the `nf_*` functions (called under the provider's lock, one at a
//! time). Each posted operation is a nicmsg request kept with the libfabric context it
//! completes; [`nf_poll`] hands back the finished ones as [`NfCompletion`]s, which the C half
//! writes into completion queues.
//!
//! Errors cross as negative libfabric codes (`-FI_E*`), completion errors as positive ones,
//! as libfabric has them. Nothing here panics across the C boundary: a panic is caught and
//! reported as `-FI_EOTHER`.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use nicmsg::tagged::{Delivery, SendOptions, Space, TaggedEndpoint};
use nicmsg::{Error, Options, Request};
use nicmsg_proto::{Claim, TagMatch, MAX_SEGMENTS};
use nicmsg_udp::{RawAddr, RAW_ADDR_LEN};

use crate::held::{
    is_buffered, HeldRecv, HeldRecvs, HeldWatch, Kind, Owner, RecvOf, Room, SendTarget,
    MAX_UNREAD_REPORTS,
};
use crate::held_sends::{HeldBytes, HeldSend, HeldSends, SendShares};
use crate::in_engine::{InEngine, Pending, Retired};

/// libfabric's error codes used here (`rdma/fi_errno.h`; the first ones are errno's).
mod fi_errno {
    pub const EIO: i32 = 5;
    pub const ENOENT: i32 = 2;
    pub const EAGAIN: i32 = 11;
    pub const EINVAL: i32 = 22;
    pub const EMSGSIZE: i32 = 90;
    pub const EHOSTUNREACH: i32 = 113;
    pub const ECANCELED: i32 = 125;
    pub const EOTHER: i32 = 256;
    pub const ETRUNC: i32 = 265;
}

/// libfabric's "no address" (`FI_ADDR_NOTAVAIL`).
const FI_ADDR_NOTAVAIL: u64 = u64::MAX;

/// Copy buffers of injected sends kept for reuse: a burst of small sends (Open MPI injects
/// every short `MPI_Send`) allocates none once warm; more in flight are allocated and freed.
const COPY_POOL: usize = 64;

/// The eager limit of every provider endpoint unless `NICMSG_EAGER_LIMIT` sets one: 256 KiB,
/// so messages up to it go without the rendezvous round trips. Open MPI streams a message with
/// blocking sends, each of which waits for its message to be acknowledged; a rendezvous
/// message also waits for the receiver's CTS first, and the stream stands still for that round
/// trip every message. `NPopenmpi -s` on loopback, the eager limit at 64 KiB and at 256 KiB:
/// 128 KiB 35.4 -> 27.0 us a message, 256 KiB 56.6 -> 41.5 us, 128 KiB ping-pong 35.2 ->
/// 27.4 us; 1 MiB (rendezvous either way) unchanged. Above it messages go by rendezvous and
/// are received straight into the posted buffer.
/// Every provider endpoint takes the same, as the protocol requires of endpoints that talk.
/// Its eager pool (peers x [`PROVIDER_EAGER_CREDITS`] x 256 KiB: 260 MiB at the default 64
/// peers) is address space whose pages are touched only as unexpected messages fill them; with
/// so many peers (`NICMSG_DGRAM_PEERS`) that it would pass the library's bound, the protocol's
/// defaults stay.
const PROVIDER_EAGER_LIMIT: u64 = 256 << 10;

/// Eager credits (of messages above 4 KiB) per peer of every provider endpoint with the
/// provider's eager limit: 16, not the protocol's 8. MPI programs post a batch of sends to a
/// peer and then compute (a halo exchange; the overlap pattern's five a rank): a rank whose
/// computation ends first leaves its wait before the peer has taken and acknowledged its last
/// batch, so its next batch finds only 8 - 5 credits, and the rest wait out the computation
/// unsent (or go by rendezvous), the peer waiting for them in turn. Open MPI's overlap pattern
/// at 10 KiB, both ranks bound, on a quiet machine: 932 messages a run by rendezvous for
/// want of credits with 8, none with 16; an iteration with 400, 1,600 and 3,200 us of
/// computation 450.9, 1,714 and 3,352 us against 443.7, 1,703 and 3,325 (medians of six
/// alternations). `NPopenmpi -s` level: 64 KiB 17.0 against 17.2 us a message, 256 KiB 47.7
/// against 46.4 (four).
const PROVIDER_EAGER_CREDITS: u32 = 16;

/// The largest message: the protocol's largest (`nicmsg::dgram::MAX_DATAGRAM_BYTES`).
const MAX_MESSAGE_BYTES: usize = nicmsg::dgram::MAX_DATAGRAM_BYTES;

/// A socket address as `union nf_addr` in `provider/provider.h`: IPv4 or IPv6 by its family
/// (the UDP transport's own layout of it).
pub type NfAddr = RawAddr;

/// A finished operation, laid out as `struct nf_completion` in `provider/provider.h`.
#[repr(C)]
pub struct NfCompletion {
    pub context: *mut c_void,
    pub buf: *mut c_void,
    pub len: u64,
    pub olen: u64,
    pub tag: u64,
    pub data: u64,
    /// Positive libfabric error code; 0 for success.
    pub err: i32,
    pub is_send: u8,
    pub tagged: u8,
    pub has_data: u8,
    /// Whether a successful completion goes to the queue (errors of operations with a
    /// context always do).
    pub wanted: u8,
    pub source: NfAddr,
    /// Written by the C half when the entry is queued (`FI_SOURCE`).
    pub source_fi_addr: u64,
}

/// What a peek found past the held receives (`FabricEndpoint::peek_past_held`).
enum PastHeld {
    /// No receive is held: the peek looks as usual.
    NoneHeld,
    /// Nothing the held receives leave free.
    Nothing,
    /// This message, which no held receive takes.
    Found(Delivery),
}

/// A send's bytes as it is posted: the provider's copy, or the caller's iovecs (valid until
/// the send completes).
enum Bytes<'a> {
    Copy(Vec<u8>),
    Caller(&'a [libc::iovec]),
}

impl Bytes<'_> {
    /// The same bytes, kept while the send is held.
    fn into_held(self) -> HeldBytes {
        match self {
            Bytes::Copy(copy) => HeldBytes::Copy(copy),
            Bytes::Caller(iovecs) => HeldBytes::Borrowed(iovecs.to_vec()),
        }
    }
}

/// One libfabric endpoint on a nicmsg engine.
pub struct FabricEndpoint {
    // Field order is drop order: every request goes before the endpoint it borrows.
    /// Operations in the engine, and which of them finished (`in_engine.rs`).
    in_engine: InEngine,
    /// Copies of injected sends given back, for the next injects.
    copies: Vec<Vec<u8>>,
    /// Sends waiting for room in the engine (`held.rs`), a queue per destination
    /// (`held_sends.rs`).
    held: HeldSends,
    /// The sends in the engine by destination, while their shares matter (`held_sends.rs`).
    shares: SendShares,
    /// Receives waiting for room in the engine (`held.rs`).
    held_recvs: HeldRecvs,
    /// Completions the provider made itself (buffered sends, held operations cancelled or
    /// refused), reported before the engine's.
    reports: VecDeque<NfCompletion>,
    /// Sends among those in the engine.
    sends_in_flight: usize,
    /// How many operations the engine may hold, of each kind and in all
    /// (`held.rs`); past it they wait in `held` and `held_recvs`.
    room: Room,
    /// Since when polls have found nothing while operations are in flight.
    idle_since: Option<u64>,
    /// A send, and a receive, was refused for want of room to hold it, and standard error was
    /// told (once for each kind: the kind that fills second hangs a program as surely).
    told_full: (bool, bool),
    /// A send nobody reads the completion of failed, and standard error was told.
    told_lost: bool,
    /// `NICMSG_WATCHDOG`'s threshold, and its look at the held operations (`held.rs`).
    watchdog_ns: Option<u64>,
    held_watch: HeldWatch,
    endpoint: Box<TaggedEndpoint>,
}

/// [`PROVIDER_EAGER_LIMIT`] and [`PROVIDER_EAGER_CREDITS`] unless the user set a limit, or
/// they would not fit (see there).
fn choose_eager_pool(options: &mut Options, capacity: u32) {
    if !options.eager_limit_auto {
        return;
    }
    let mut provider = options.clone();
    provider.protocol.eager_limit = PROVIDER_EAGER_LIMIT;
    provider.protocol.eager_credits_per_peer = PROVIDER_EAGER_CREDITS;
    provider.eager_limit_auto = false;
    if provider.check_for_job(capacity + 1).is_ok() {
        *options = provider;
    }
}

/// The descriptor table of every provider endpoint unless `NICMSG_SLOTS` sets one: 16,384
/// slots (the most `NICMSG_SLOTS` allows), not the library's 640. MPI lets a program keep any
/// number of nonblocking operations outstanding, and Open MPI posts each `MPI_Isend` and
/// `MPI_Irecv` at once. Operations past the engine's room wait in the provider (`held.rs`),
/// each behind those of its kind held before it, and an operation in the engine may wait for
/// one held:
/// - with 640 slots, the randomized MPI check's flood (300 messages a pair of 4 ranks, all
///   posted before any receive, then a barrier) filled the room with sends that wait for
///   their receives, and the barrier's own messages waited behind the rest (`mpi_random 1 8
///   -f 300`);
/// - with 4,096, a rank that posted 1,000 receives from each of three ranks, then entered a
///   barrier before they sent (the usual way to have receives posted before their messages
///   come) hung: 2,976 receives took the room, the barrier's receive waited behind 24 held.
///
/// The table costs about 540 bytes a slot when the endpoint opens (`nicmsg::options::
/// SLOTS_MAX`), 8.4 MiB; the protocol core's tables grow only as a program fills them: an
/// Open MPI rank on the provider holds 29 MB resident after `MPI_Init` (21 MB with 4,096).
const PROVIDER_SLOTS: usize = 16_384;

/// Sends nobody reads (injects, buffered sends) in flight past which every send first runs a
/// turn of the engine. A sender of short messages does nothing but inject them (Open MPI's
/// `MPI_Send` loop), and an inline engine turns only inside calls: with the room of
/// [`PROVIDER_SLOTS`] and no turn in the injects, the engine's queue ran far ahead of the
/// acknowledgements and credits coming back, and more messages were kept and sent again.
/// `NPopenmpi -s` at 8 bytes, against the build before the provider held sends (where sends
/// past 384 waited, each wait running a turn): no pace 3.3-3.8 us a message against 2.2-2.4;
/// a pace from 384 in flight 2.31-2.58, from 128 2.40-2.43, from 32 2.28-2.42 (five rounds:
/// median 2.35 against 2.24).
const PACED_UNREPORTED: usize = 32;

/// Unmatched messages a provider endpoint keeps from all its peers (the protocol core's
/// `max_incoming`), not the library's 1,024. Open MPI ranks post sends long before the
/// receives that take them, and a rank may take them in any order: 3 ranks posting 600 sends
/// each to a rank that received them one sender at a time, the last rank first, filled the
/// 1,024 entries with the other senders' messages, and the 480th message of the first never
/// came in. An entry is about 200 bytes, allocated only when the table first holds that many
/// (`nicmsg_proto`'s tables grow to their limits): 3.2 MiB for these, and as much again for
/// the entries the table keeps beside them for messages a rank sends itself (one a send).
const PROVIDER_UNMATCHED: usize = 16_384;

/// Memory regions a provider endpoint registers per descriptor slot: Open MPI's operations
/// have one buffer each, and two a slot leave room for vector sends. Each operation in the
/// engine registers its buffers, so the regions bound the operations in flight as the slots
/// do: with the library's 4,096 regions and 16,384 slots, a rank took 4,094 receives into
/// its engine and held the rest. A region costs 16 bytes.
const PROVIDER_REGIONS_PER_SLOT: usize = 2;

/// [`PROVIDER_SLOTS`] unless the user set `NICMSG_SLOTS`, regions for them, and
/// [`PROVIDER_UNMATCHED`].
fn choose_tables(options: &mut Options) {
    if std::env::var_os("NICMSG_SLOTS").is_none() {
        options.slots = PROVIDER_SLOTS;
    }
    options.regions = options
        .regions
        .max(options.slots * PROVIDER_REGIONS_PER_SLOT);
    options.protocol.max_incoming = PROVIDER_UNMATCHED;
}

impl FabricEndpoint {
    fn open(bind: SocketAddr) -> Result<Self, Error> {
        let mut options = Options::from_env()?;
        let capacity = options.dgram_peers;
        choose_eager_pool(&mut options, capacity);
        choose_tables(&mut options);
        let room = Room::for_slots(options.slots);
        Ok(Self {
            in_engine: InEngine::default(),
            copies: Vec::with_capacity(COPY_POOL),
            held: HeldSends::default(),
            shares: SendShares::new(room.sends),
            held_recvs: HeldRecvs::default(),
            reports: VecDeque::new(),
            sends_in_flight: 0,
            room,
            idle_since: None,
            told_full: (false, false),
            told_lost: false,
            watchdog_ns: options.idle.watchdog_ns,
            held_watch: HeldWatch::default(),
            endpoint: Box::new(TaggedEndpoint::bind(bind, capacity, options)?),
        })
    }

    /// The endpoint, for requests that live as long as this value.
    fn endpoint(&self) -> &'static TaggedEndpoint {
        // SAFETY: the endpoint is boxed (its address never changes) and dropped after every
        // request in `in_engine` (field order), and requests never leave it
        // but to be dropped: nothing holding this reference outlives it.
        unsafe { &*(self.endpoint.as_ref() as *const TaggedEndpoint) }
    }

    /// Operations in the engine, reported or not.
    fn in_flight(&self) -> usize {
        self.in_engine.len()
    }

    fn has_send_room(&self) -> bool {
        self.sends_in_flight < self.room.sends && self.in_flight() < self.room.in_flight
    }

    /// Room for one more send to `to`: room for a send, within `to`'s share of it
    /// (`held_sends.rs`; counted from three quarters of the room taken).
    fn has_send_room_for(&mut self, to: SocketAddr) -> bool {
        if !self.has_send_room() {
            return false;
        }
        self.count_shares_if_due();
        self.shares.fits(to, self.free_for_sends())
    }

    /// Of the room for sends, what is free.
    fn free_for_sends(&self) -> usize {
        self.room.sends - self.sends_in_flight
    }

    /// Counts the sends in the engine by destination while no more than a quarter of the
    /// room for sends is free, and stops once half of it is (`held_sends.rs`).
    fn count_shares_if_due(&mut self) {
        let free = self.free_for_sends();
        let in_engine = &self.in_engine;
        self.shares.count_if_due(self.room.sends, free, || {
            in_engine.iter().filter_map(|pending| pending.to)
        });
    }

    fn has_recv_room(&self) -> bool {
        let recvs_in_flight = self.in_flight() - self.sends_in_flight;
        recvs_in_flight < self.room.recvs && self.in_flight() < self.room.in_flight
    }

    /// A send to `to` now waits: sends to `to` are held (none overtakes them), or the engine
    /// has no room for it.
    fn sends_wait_for(&mut self, to: SocketAddr) -> bool {
        self.held.holds_for(to) || !self.has_send_room_for(to)
    }

    /// A receive now waits: receives are held (MPI matches them in posting order), or the
    /// engine has no room.
    fn recvs_wait(&self) -> bool {
        !self.held_recvs.is_empty() || !self.has_recv_room()
    }

    /// Sends `bytes` to `target` for `owner`: posted now, or held behind earlier held sends or
    /// while the engine has no room (`held.rs`). 0, a post's error code, or `-FI_EAGAIN` past
    /// the held bounds.
    fn send(&mut self, bytes: Bytes<'_>, target: SendTarget, owner: Owner) -> c_int {
        if self.sends_wait_for(target.to) {
            self.progress_unreported();
        } else if self.in_engine.unreported_len() >= PACED_UNREPORTED {
            self.pace_unreported();
        }
        let bytes = if self.sends_wait_for(target.to) {
            bytes
        } else {
            match self.post_send(bytes, &target, owner) {
                Ok(code) => return code,
                Err(no_room) => no_room,
            }
        };
        let send = HeldSend {
            bytes: bytes.into_held(),
            target,
            owner,
        };
        match self.held.hold(send) {
            Ok(()) => 0,
            Err(refused) => {
                if let HeldBytes::Copy(copy) = refused.bytes {
                    self.give_back(copy);
                }
                self.tell_sends_full();
                -fi_errno::EAGAIN
            }
        }
    }

    /// An injected send (`how` with [`NF_SEND_INJECT`]): copies the bytes, so the caller may
    /// reuse them at once, and sends or holds the copy. Nobody reads its completion.
    fn inject(&mut self, iovecs: &[libc::iovec], target: SendTarget) -> c_int {
        // SAFETY: the caller's contract (valid during this call for an inject).
        let copy = unsafe { self.copy_of(iovecs) };
        self.send(Bytes::Copy(copy), target, Owner::NOBODY_READS)
    }

    /// A buffered send (`held.rs`): sent or held from a copy as an inject is, its completion
    /// `report` queued at once (if wanted). `None` if too many reports are unread: the caller
    /// posts the send as any other.
    fn buffer(
        &mut self,
        iovecs: &[libc::iovec],
        target: SendTarget,
        report: NfCompletion,
    ) -> Option<c_int> {
        if self.reports.len() >= MAX_UNREAD_REPORTS {
            return None;
        }
        // The provider's copy is the only one: the engine reads it until the message is
        // acknowledged rather than copy it again, and nobody waits for that completion, so
        // the receiver may hold the acknowledgement back (a stream of such sends told to
        // confirm each had an acknowledgement datagram back per message).
        let target = SendTarget {
            options: SendOptions {
                unwaited: true,
                ..target.options
            },
            ..target
        };
        let code = self.inject(iovecs, target);
        if code == 0 && report.wanted != 0 {
            self.report(report);
        }
        Some(code)
    }

    /// Posts a send to the engine: 0 or a post's error code, or the bytes back if the
    /// engine's table had no room for it.
    fn post_send<'a>(
        &mut self,
        bytes: Bytes<'a>,
        target: &SendTarget,
        owner: Owner,
    ) -> Result<c_int, Bytes<'a>> {
        let mut pieces: [&'static [u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
        let used = match &bytes {
            Bytes::Copy(copy) => {
                // SAFETY: the copy goes into the same `Pending` as the request (`track`).
                pieces[0] = unsafe { lent(copy) };
                1
            }
            Bytes::Caller(iovecs) => {
                for (slot, iov) in pieces.iter_mut().zip(iovecs.iter()) {
                    // SAFETY: the caller's contract (valid until the send completes).
                    *slot = unsafe { piece(iov) };
                }
                iovecs.len()
            }
        };
        let posted =
            self.endpoint()
                .isend(&pieces[..used], target.to, target.space_tag, target.options);
        if let Err(Error::TableFull { .. }) = posted {
            return Err(bytes);
        }
        let copy = match bytes {
            Bytes::Copy(copy) => Some(copy),
            Bytes::Caller(_) => None,
        };
        Ok(self.track(posted, copy, owner, Some(target.to)))
    }

    /// Receives into `pieces` the message `of` names, for `owner`: posted now, or held behind
    /// earlier held receives or while the engine has no room (`held.rs`). 0, a post's error
    /// code, or `-FI_EAGAIN` past the held bound.
    fn recv(&mut self, pieces: &[libc::iovec], of: RecvOf, owner: Owner) -> c_int {
        if !self.recvs_wait() {
            if let Some(code) = self.post_recv(pieces, of, owner) {
                return code;
            }
        }
        let recv = HeldRecv {
            pieces: pieces.to_vec(),
            of,
            owner,
        };
        match self.held_recvs.hold(recv) {
            Ok(()) => 0,
            Err(_) => {
                self.tell_recvs_full();
                -fi_errno::EAGAIN
            }
        }
    }

    /// Posts a receive to the engine: 0 or a post's error code, or `None` if the engine's
    /// table had no room for it.
    fn post_recv(&mut self, pieces: &[libc::iovec], of: RecvOf, owner: Owner) -> Option<c_int> {
        // SAFETY: the caller's contract (valid for writing until the receive completes).
        let mut slices = pieces.iter().map(|iov| unsafe { piece(iov) });
        let posted = match of {
            RecvOf::Pattern { from, space, tag } => {
                self.endpoint().irecv(&mut slices, from, (space, tag))
            }
            RecvOf::Claimed(claim) => self.endpoint().irecv_claimed(&mut slices, claim),
        };
        if let Err(Error::TableFull { .. }) = posted {
            return None;
        }
        Some(self.track(posted, None, owner, None))
    }

    /// Sends held sends while the engine has room for sends, the oldest first whose
    /// destination is within its share (`held_sends.rs`). One the engine refuses (its peer
    /// failed) completes with the error, if anybody reads its completion.
    fn post_held(&mut self) {
        while !self.held.is_empty() && self.has_send_room() {
            self.count_shares_if_due();
            let (shares, free) = (&self.shares, self.free_for_sends());
            let Some((place, send)) = self.held.take_fitting(|to| shares.fits(to, free)) else {
                return;
            };
            let HeldSend {
                bytes,
                target,
                owner,
            } = send;
            let posted = match bytes {
                HeldBytes::Copy(copy) => self
                    .post_send(Bytes::Copy(copy), &target, owner)
                    .map_err(Bytes::into_held),
                HeldBytes::Borrowed(iovecs) => {
                    let posted = self.post_send(Bytes::Caller(&iovecs), &target, owner).ok();
                    posted.ok_or(HeldBytes::Borrowed(iovecs))
                }
            };
            match posted {
                Ok(code) => {
                    self.held_watch.entered();
                    self.report_refused(owner, code);
                }
                Err(bytes) => {
                    let send = HeldSend {
                        bytes,
                        target,
                        owner,
                    };
                    self.held.put_back(place, send);
                    return;
                }
            }
        }
    }

    /// Posts held receives, oldest first, while the engine has room for receives.
    fn post_held_recvs(&mut self) {
        while self.has_recv_room() {
            let Some(recv) = self.held_recvs.take_oldest() else {
                return;
            };
            match self.post_recv(&recv.pieces, recv.of, recv.owner) {
                Some(code) => {
                    self.held_watch.entered();
                    self.report_refused(recv.owner, code);
                }
                None => {
                    self.held_recvs.put_back(recv);
                    return;
                }
            }
        }
    }

    /// Posts what is held, as far as there is room. Every poll asks, and nearly always nothing
    /// is held: that is answered here, inline, without the room and share checks.
    #[inline]
    fn post_all_held(&mut self) {
        if !self.held.is_empty() {
            self.post_held();
        }
        if !self.held_recvs.is_empty() {
            self.post_held_recvs();
        }
    }

    /// Whether operations wait in the provider for room in the engine.
    fn holds_anything(&self) -> bool {
        !self.held.is_empty() || !self.held_recvs.is_empty()
    }

    /// A held operation the engine refused when it was posted (`code` < 0) completes with the
    /// error, where an application waits for it.
    fn report_refused(&mut self, owner: Owner, code: c_int) {
        if code < 0 && !owner.context.is_null() {
            self.report(provider_report(owner, -code));
        }
    }

    /// Queues a completion the provider made, and wakes a thread sleeping on the queue's
    /// descriptor (FI_THREAD_SAFE), as an engine completion would.
    fn report(&mut self, report: NfCompletion) {
        self.reports.push_back(report);
        self.endpoint.wake_completion_fd();
    }

    /// Cancels the held operation posted with `context`, if one is: it completes with
    /// `FI_ECANCELED`, except a claimed receive, which is found but completes as received
    /// (`HeldRecvs::withdraw`).
    fn cancel_held(&mut self, context: *mut c_void) -> bool {
        if let Some(send) = self.held.withdraw(context) {
            if let HeldBytes::Copy(copy) = send.bytes {
                self.give_back(copy);
            }
            self.report(provider_report(send.owner, fi_errno::ECANCELED));
            return true;
        }
        if let Some(recv) = self.held_recvs.withdraw(context) {
            self.report(provider_report(recv.owner, fi_errno::ECANCELED));
            return true;
        }
        self.held_recvs.holds(context)
    }

    /// Says once on standard error that a send was refused for want of room to hold it: a
    /// program that waits for its peers past that many operations hangs, and should not hang
    /// silently.
    fn tell_sends_full(&mut self) {
        if !std::mem::replace(&mut self.told_full.0, true) {
            eprintln!("{}", self.held.full_notice());
        }
    }

    /// As [`tell_sends_full`](Self::tell_sends_full), for a receive.
    fn tell_recvs_full(&mut self) {
        if !std::mem::replace(&mut self.told_full.1, true) {
            eprintln!("{}", self.held_recvs.full_notice());
        }
    }

    /// Runs the engine once, lets go of the finished operations no completion reports (the
    /// injects), and posts what is held. A run of inject calls is all a sender of short
    /// messages does (Open MPI polls its queue only when told `-FI_EAGAIN`): without this, the
    /// sends held would wait for the application's next poll, and the held queue would only
    /// grow.
    fn progress_unreported(&mut self) {
        self.endpoint
            .progress_at(nicmsg_engine::clock::monotonic_ns());
        self.let_go_finished_unreported();
        self.post_all_held();
    }

    /// One turn of the engine before a send, while many sends nobody reads are in flight:
    /// their acknowledgements and credits are taken in as fast as the sends go out (see
    /// [`PACED_UNREPORTED`]), and the finished ones at the front let go.
    fn pace_unreported(&mut self) {
        self.endpoint
            .progress_at(nicmsg_engine::clock::monotonic_ns());
        self.let_go_finished_unreported();
    }

    /// Lets go of the unreported operations that finished (the engine named them); those
    /// the application reads stay for its next poll.
    fn let_go_finished_unreported(&mut self) {
        self.in_engine.collect(self.endpoint());
        while let Some(done) = self.in_engine.next_finished(false) {
            let pending = self.in_engine.take(&done);
            self.let_go_unreported(pending, &done.result);
        }
    }

    /// An unreported operation that finished: out of those in flight, its copy kept for the
    /// next, its loss told if it failed.
    fn let_go_unreported(&mut self, done: Retired, result: &Result<(), Error>) {
        self.out_of_engine(&done);
        self.tell_if_lost(&done.owner, result);
        self.recycle(done);
    }

    /// Says once on standard error that a send nobody reads the completion of failed: an
    /// inject, or a buffered send whose completion the provider reported, is a message the
    /// application was told went, and its receiver became unreachable before it got it. The
    /// engine counts such a loss of the sends it completes early (`NICMSG_STATS`, unconfirmed),
    /// but it completes a buffered send only once its receiver holds it (the provider's copy
    /// is the only one), so a failed buffered send was lost without a word anywhere.
    fn tell_if_lost(&mut self, owner: &Owner, result: &Result<(), Error>) {
        let Err(error) = result else {
            return;
        };
        if owner.kind.is_send && owner.reads_nothing() && !self.told_lost {
            self.told_lost = true;
            eprintln!(
                "nicmsg: a libfabric endpoint lost a message it had reported sent (an injected \
                 or buffered send: {error}); further losses are not told"
            );
        }
    }

    /// An operation left the engine: a send no longer takes room, nor its destination's
    /// share.
    fn out_of_engine(&mut self, done: &Retired) {
        if let Some(to) = done.to {
            self.sends_in_flight -= 1;
            self.shares.done(to);
        }
    }

    /// Keeps a retired operation's copy for the next inject: the request is finished, so
    /// the engine no longer reads it.
    fn recycle(&mut self, done: Retired) {
        if let Some(copy) = done.copy {
            self.give_back(copy);
        }
    }

    /// A copy no longer read, kept for the next inject while the pool has room.
    fn give_back(&mut self, copy: Vec<u8>) {
        if self.copies.len() < COPY_POOL {
            self.copies.push(copy);
        }
    }

    /// Keeps a posted operation until it completes; a refused post is answered at once.
    fn track(
        &mut self,
        posted: Result<Request<'static>, Error>,
        copy: Option<Vec<u8>>,
        owner: Owner,
        to: Option<SocketAddr>,
    ) -> c_int {
        match posted {
            Ok(request) => {
                if let Some(to) = to {
                    self.sends_in_flight += 1;
                    self.shares.sent(to);
                }
                let pending = Pending {
                    request,
                    copy,
                    owner,
                    to,
                };
                self.in_engine.push(pending);
                0
            }
            Err(error) => post_error(&error),
        }
    }

    /// An inject's copy of the bytes `iovecs` describe, in a buffer given back or a new one.
    ///
    /// # Safety
    /// `iovecs` describe memory valid for reading during this call.
    unsafe fn copy_of(&mut self, iovecs: &[libc::iovec]) -> Vec<u8> {
        let mut copy = self.copies.pop().unwrap_or_default();
        copy.clear();
        // Room for all the pieces at once: growing piece by piece would copy the buffer again.
        copy.reserve(iovecs.iter().map(|iov| iov.iov_len).sum());
        for iov in iovecs {
            // SAFETY: the caller's contract.
            nicmsg_proto::extend_bytes(&mut copy, unsafe { piece(iov) });
        }
        copy
    }

    /// A poll that found nothing: an application polls its completion queue in a loop, and on
    /// a machine with fewer cores than busy threads that loop must give the core to the engine
    /// thread that makes the progress it waits for (the library's own waits do the same).
    fn relax(&mut self, found: usize, now: u64) {
        if found > 0 || self.in_flight() == 0 {
            self.idle_since = None;
            return;
        }
        let since = *self.idle_since.get_or_insert(now);
        nicmsg_engine::sharing::relax(now - since);
    }

    /// One turn of the engine where `turn` is set, then the operations that finished, up to
    /// `out.len()`: the provider's own completions first, then the engine's.
    fn finished(&mut self, out: &mut [MaybeUninit<NfCompletion>], now: u64, turn: bool) -> usize {
        if turn {
            self.endpoint.progress_at(now);
        }
        let mut written = 0;
        while written < out.len() {
            let Some(report) = self.reports.pop_front() else {
                break;
            };
            out[written].write(report);
            written += 1;
        }
        let room = out.len() - written;
        let taken = self.finished_pending(&mut out[written..]);
        written += taken;
        // Short of room, it left finished operations behind: those nobody reads go now (the
        // others at the next poll); else it let go of every one on its way.
        if taken == room {
            self.let_go_finished_unreported();
        }
        self.post_all_held();
        self.watch_held(now);
        written
    }

    /// `NICMSG_WATCHDOG`: says on standard error when held operations have not moved into the
    /// engine for the threshold ([`HeldWatch`]).
    fn watch_held(&mut self, now: u64) {
        let Some(threshold) = self.watchdog_ns else {
            return;
        };
        let held = (self.held.len(), self.held_recvs.len());
        if let Some(line) = self.held_watch.look(now, held, threshold) {
            // One write, as the engine's report (`nicmsg_engine::runner::report_hangs`).
            let line = format!(
                "nicmsg watchdog: endpoint {}: {line}\n",
                self.endpoint.local_addr()
            );
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
    }

    /// The operations that finished, up to `out.len()` of those the application reads; those
    /// nobody reads are let go on the way.
    fn finished_pending(&mut self, out: &mut [MaybeUninit<NfCompletion>]) -> usize {
        self.in_engine.collect(self.endpoint());
        let mut written = 0;
        while written < out.len() {
            let Some(done) = self.in_engine.next_finished(true) else {
                break;
            };
            let pending = self.in_engine.take(&done);
            if pending.owner.reads_nothing() {
                self.let_go_unreported(pending, &done.result);
                continue;
            }
            self.out_of_engine(&pending);
            out[written].write(completion(&pending.owner, done.result, &done.delivery));
            written += 1;
            self.recycle(pending);
        }
        written
    }

    /// `FI_PEEK` while receives are held: a message the first held receive that matches it
    /// would take is not free for the peek (it answers none, [`PastHeld::Nothing`]), and a
    /// peek that finds none now must not claim one that arrives the next moment. Held
    /// receives that fit in the engine now are posted first.
    fn peek_past_held(
        &mut self,
        from: Option<SocketAddr>,
        pattern: (Space, TagMatch),
    ) -> Result<PastHeld, Error> {
        self.post_held_recvs();
        if self.held_recvs.is_empty() {
            return Ok(PastHeld::NoneHeld);
        }
        Ok(match self.endpoint.iprobe(from, pattern)? {
            Some(found) if !self.held_recvs.would_take(pattern.0, &found) => PastHeld::Found(found),
            _ => PastHeld::Nothing,
        })
    }
}

/// An inject's copy, lent to the request that sends it.
///
/// # Safety
/// The copy is kept, unchanged, in the same `Pending` as the request until the request has
/// finished: its heap memory does not move when the `Vec` itself moves.
unsafe fn lent(copy: &[u8]) -> &'static [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(copy.as_ptr(), copy.len()) }
}

/// The completion of a buffered send, reported when the provider has copied it: what the
/// engine's completion of the send would say.
fn buffered_report(owner: Owner, (tag, len): (u64, usize), options: SendOptions) -> NfCompletion {
    NfCompletion {
        len: len as u64,
        tag,
        data: u64::from(options.immediate.unwrap_or(0)),
        has_data: u8::from(options.immediate.is_some()),
        ..provider_report(owner, 0)
    }
}

/// A completion the provider makes itself for `owner`'s operation, with error `err` (0 for
/// success; a held operation cancelled, or refused when it reached the engine), describing
/// no message.
fn provider_report(owner: Owner, err: i32) -> NfCompletion {
    NfCompletion {
        context: owner.context,
        buf: owner.buf,
        len: 0,
        olen: 0,
        tag: 0,
        data: 0,
        err,
        is_send: u8::from(owner.kind.is_send),
        tagged: u8::from(owner.kind.tagged),
        has_data: 0,
        wanted: u8::from(owner.kind.wanted),
        source: socket_address(None),
        source_fi_addr: FI_ADDR_NOTAVAIL,
    }
}

/// What a finished operation's completion says.
fn completion(owner: &Owner, result: Result<(), Error>, delivery: &Delivery) -> NfCompletion {
    // Only an operation that completed, or a receive that matched a message too long for it,
    // has a message to describe. The engine writes nothing else of a cancelled or failed one,
    // so its delivery still holds what the slot's previous operation left: a cancelled receive
    // reported that operation's tag and remote CQ data (FI_REMOTE_CQ_DATA set).
    let delivery = match result {
        Ok(()) | Err(Error::Truncated { .. }) => *delivery,
        Err(_) => Delivery {
            address: None,
            tag: 0,
            len: 0,
            buffer_len: 0,
            immediate: None,
        },
    };
    let (err, len, olen) = match result {
        Ok(()) => (0, delivery.len, 0),
        Err(Error::Truncated { .. }) => (
            fi_errno::ETRUNC,
            0,
            delivery.len.saturating_sub(delivery.buffer_len),
        ),
        Err(Error::Cancelled) => (fi_errno::ECANCELED, 0, 0),
        Err(Error::PeerUnreachable { .. }) => (fi_errno::EHOSTUNREACH, 0, 0),
        Err(_) => (fi_errno::EIO, 0, 0),
    };
    NfCompletion {
        context: owner.context,
        buf: owner.buf,
        len,
        olen,
        tag: delivery.tag,
        data: u64::from(delivery.immediate.unwrap_or(0)),
        err,
        is_send: u8::from(owner.kind.is_send),
        tagged: u8::from(owner.kind.tagged),
        has_data: u8::from(delivery.immediate.is_some()),
        wanted: u8::from(owner.kind.wanted),
        source: socket_address(delivery.address),
        source_fi_addr: FI_ADDR_NOTAVAIL,
    }
}

/// `address` as the C half holds it, as is (no family mapping); all zeroes for none.
fn socket_address(address: Option<SocketAddr>) -> NfAddr {
    address.map_or_else(RawAddr::zeroed, |address| {
        RawAddr::from_socket_addr(address, address.is_ipv6()).0
    })
}

/// The address in a `union nf_addr`, or `None` for a null pointer or a family other than
/// IPv4 and IPv6.
///
/// # Safety
/// `address` is null or points to a `union nf_addr`.
unsafe fn address_of(address: *const NfAddr) -> Option<SocketAddr> {
    // SAFETY: the caller's contract.
    unsafe { address.as_ref() }?.socket_addr(RAW_ADDR_LEN)
}

/// The iovecs of an operation, checked: at most [`MAX_SEGMENTS`] pieces (the engine's
/// descriptor holds no more) of at most [`MAX_MESSAGE_BYTES`] in all, none of them a null
/// address with a length (which [`piece`] would take as empty: a send of nothing, or a
/// receive that truncates, where the caller asked for bytes).
///
/// # Safety
/// `iov` points to `count` iovecs that stay valid until the operation is posted.
unsafe fn iovecs<'a>(iov: *const libc::iovec, count: usize) -> Result<&'a [libc::iovec], i32> {
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() || count > MAX_SEGMENTS {
        return Err(fi_errno::EINVAL);
    }
    // SAFETY: the caller's contract.
    let iov = unsafe { std::slice::from_raw_parts(iov, count) };
    if iov
        .iter()
        .any(|piece| piece.iov_base.is_null() && piece.iov_len > 0)
    {
        return Err(fi_errno::EINVAL);
    }
    let total = iov
        .iter()
        .fold(0usize, |sum, piece| sum.saturating_add(piece.iov_len));
    if total > MAX_MESSAGE_BYTES {
        return Err(fi_errno::EMSGSIZE);
    }
    Ok(iov)
}

/// The bytes an iovec describes, borrowed for as long as libfabric's contract keeps them
/// valid (until the operation completes).
///
/// # Safety
/// The iovec's memory is valid for reading and writing its length until then (for a send,
/// it is only read).
unsafe fn piece(iov: &libc::iovec) -> &'static mut [u8] {
    if iov.iov_len == 0 || iov.iov_base.is_null() {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(iov.iov_base.cast(), iov.iov_len) }
}

/// The first piece's address, which a completion reports as `buf`.
///
/// # Safety
/// `iov` is null or holds `count` iovecs.
unsafe fn first_base(iov: *const libc::iovec, count: usize) -> *mut c_void {
    if iov.is_null() || count == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `iov` holds at least one iovec (the caller's contract and the check above).
    unsafe { (*iov).iov_base }
}

fn space(tagged: c_int) -> Space {
    if tagged != 0 {
        Space::Tagged
    } else {
        Space::Untagged
    }
}

/// A nicmsg error at posting, as a negative libfabric code.
fn post_error(error: &Error) -> c_int {
    -match error {
        Error::TableFull { .. } => fi_errno::EAGAIN,
        Error::PeerUnreachable { .. } => fi_errno::EHOSTUNREACH,
        Error::BadBuffer(_) | Error::UnknownClaim => fi_errno::EINVAL,
        _ => fi_errno::EIO,
    }
}

/// Runs `body`, turning a panic into `-FI_EOTHER` (a panic must not unwind into C).
fn guarded(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(-fi_errno::EOTHER)
}

/// Runs `body` on the endpoint behind `ep` (`-FI_EINVAL` for a null handle), a panic turned
/// into `-FI_EOTHER`: the frame of every `nf_*` call on an endpoint.
///
/// # Safety
/// As [`endpoint_mut`].
unsafe fn on_endpoint(ep: *mut c_void, body: impl FnOnce(&mut FabricEndpoint) -> c_int) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        match unsafe { endpoint_mut(ep) } {
            Some(endpoint) => body(endpoint),
            None => -fi_errno::EINVAL,
        }
    })
}

/// The endpoint behind a handle.
///
/// # Safety
/// `ep` is a live handle from [`nf_open`], used by one thread at a time.
unsafe fn endpoint_mut<'a>(ep: *mut c_void) -> Option<&'a mut FabricEndpoint> {
    // SAFETY: the caller's contract.
    unsafe { ep.cast::<FabricEndpoint>().as_mut() }
}

/// Opens an endpoint bound to `bind`'s address (any free port if its port is 0). On failure,
/// null, with the reason written to `reason` (NUL-terminated, cut to `reason_len`).
///
/// # Safety
/// `bind` points to a `union nf_addr`; `reason` is valid for `reason_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nf_open(
    bind: *const NfAddr,
    reason: *mut c_char,
    reason_len: usize,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    let bind = unsafe { address_of(bind) }.unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    let opened = catch_unwind(|| FabricEndpoint::open(bind));
    let error = match opened {
        Ok(Ok(endpoint)) => return Box::into_raw(Box::new(endpoint)).cast(),
        Ok(Err(error)) => error.to_string(),
        Err(_) => "the endpoint panicked while opening".to_string(),
    };
    if !reason.is_null() && reason_len > 0 {
        let len = error.len().min(reason_len - 1);
        // SAFETY: `reason` is valid for `reason_len` bytes and `len + 1 <= reason_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(error.as_ptr(), reason.cast(), len);
            *reason.add(len) = 0;
        }
    }
    std::ptr::null_mut()
}

/// Closes an endpoint: operations still in flight are cancelled and waited for.
///
/// # Safety
/// `ep` is null or a live handle from [`nf_open`], not used again.
#[no_mangle]
pub unsafe extern "C" fn nf_close(ep: *mut c_void) {
    if ep.is_null() {
        return;
    }
    // SAFETY: the caller's contract: the handle came from Box::into_raw and is not used again.
    let endpoint = unsafe { Box::from_raw(ep.cast::<FabricEndpoint>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(endpoint)));
}

/// The endpoint's address (what `fi_getname` gives).
///
/// # Safety
/// `ep` is a live handle; `out` is valid for writing a `union nf_addr`.
#[no_mangle]
pub unsafe extern "C" fn nf_name(ep: *mut c_void, out: *mut NfAddr) -> c_int {
    // SAFETY: the caller's contract.
    let Some(endpoint) = (unsafe { endpoint_mut(ep) }) else {
        return -fi_errno::EINVAL;
    };
    let name = socket_address(Some(endpoint.endpoint.local_addr()));
    // SAFETY: the caller's contract.
    unsafe { out.write(name) };
    0
}

/// `nf_send`'s `how`: the bytes are copied first, so the caller may reuse them at once
/// (`fi_inject`, `FI_INJECT`).
pub const NF_SEND_INJECT: c_int = 1;
/// `nf_send`'s `how`: the send completes only once the receiver holds the message, never as
/// soon as the engine has copied it (`FI_TRANSMIT_COMPLETE`, `FI_DELIVERY_COMPLETE`).
pub const NF_SEND_CONFIRMED: c_int = 2;

/// Posts a send of the concatenation of `iov` to `to`, as `how` says ([`NF_SEND_INJECT`],
/// [`NF_SEND_CONFIRMED`]).
///
/// # Safety
/// `ep` is a live handle; `iov` holds `count` iovecs valid until the send completes (or
/// during this call with [`NF_SEND_INJECT`]); `to` points to a `union nf_addr`.
#[no_mangle]
pub unsafe extern "C" fn nf_send(
    ep: *mut c_void,
    iov: *const libc::iovec,
    count: usize,
    to: *const NfAddr,
    tagged: c_int,
    tag: u64,
    has_data: c_int,
    data: u64,
    context: *mut c_void,
    wanted: c_int,
    how: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(to) = (unsafe { address_of(to) }) else {
        return -fi_errno::EINVAL;
    };
    let kind = Kind {
        is_send: true,
        tagged: tagged != 0,
        wanted: wanted != 0,
    };
    let target = SendTarget {
        to,
        space_tag: (space(tagged), tag),
        options: SendOptions {
            immediate: (has_data != 0).then_some(data as u32),
            confirmed: how & NF_SEND_CONFIRMED != 0,
            unwaited: false,
        },
    };
    let body = |endpoint: &mut FabricEndpoint| {
        // SAFETY: the caller's contract.
        let iovecs = match unsafe { iovecs(iov, count) } {
            Ok(iovecs) => iovecs,
            Err(code) => return -code,
        };
        // An inject call reports nothing: its copy is the provider's own send.
        if how & NF_SEND_INJECT != 0 && !kind.wanted && context.is_null() {
            return endpoint.inject(iovecs, target);
        }
        // SAFETY: the caller's contract.
        let buf = unsafe { first_base(iov, count) };
        let owner = Owner { context, buf, kind };
        let len: usize = iovecs.iter().map(|piece| piece.iov_len).sum();
        // A send that asks for no completion semantics and is longer than an inject may be
        // buffered: copied and reported done at once (`held.rs`).
        if how & (NF_SEND_INJECT | NF_SEND_CONFIRMED) == 0 && is_buffered(len) {
            let report = buffered_report(owner, (tag, len), target.options);
            if let Some(code) = endpoint.buffer(iovecs, target, report) {
                return code;
            }
        }
        let bytes = if how & NF_SEND_INJECT != 0 {
            // sendmsg with FI_INJECT reports its completion, but its bytes are copied here.
            // SAFETY: the caller's contract (valid during this call for an inject).
            Bytes::Copy(unsafe { endpoint.copy_of(iovecs) })
        } else {
            Bytes::Caller(iovecs)
        };
        endpoint.send(bytes, target, owner)
    };
    // SAFETY: the caller's contract.
    unsafe { on_endpoint(ep, body) }
}

/// Posts a receive into `iov` of the next message of its space that `tag` and `ignore`
/// accept, from `from` (null: anyone).
///
/// # Safety
/// `ep` is a live handle; `iov` holds `count` iovecs valid for writing until the receive
/// completes; `from` is null or points to a `union nf_addr`.
#[no_mangle]
pub unsafe extern "C" fn nf_recv(
    ep: *mut c_void,
    iov: *const libc::iovec,
    count: usize,
    from: *const NfAddr,
    tagged: c_int,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    wanted: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    let from = unsafe { address_of(from) };
    let of = RecvOf::Pattern {
        from,
        space: space(tagged),
        tag: TagMatch::from_masked(tag, ignore),
    };
    let kind = Kind {
        is_send: false,
        tagged: tagged != 0,
        wanted: wanted != 0,
    };
    // SAFETY: the caller's contract.
    unsafe { post_receive(ep, (iov, count), context, kind, of) }
}

/// `FI_CLAIM`: posts the receive into `iov` of the message `claim` names (from
/// [`nf_peek`]); it completes as [`nf_recv`]'s would. `-FI_EINVAL` if the claim names no
/// claimed message (received or discarded already, or its sender failed).
///
/// # Safety
/// As [`nf_recv`].
#[no_mangle]
pub unsafe extern "C" fn nf_recv_claimed(
    ep: *mut c_void,
    iov: *const libc::iovec,
    count: usize,
    claim: u64,
    context: *mut c_void,
    wanted: c_int,
) -> c_int {
    let kind = Kind {
        is_send: false,
        tagged: true,
        wanted: wanted != 0,
    };
    let of = RecvOf::Claimed(Claim::from_bits(claim));
    // SAFETY: the caller's contract.
    unsafe { post_receive(ep, (iov, count), context, kind, of) }
}

/// Posts (or holds, `held.rs`) a receive into `iov` of the message `of` names.
///
/// # Safety
/// As [`nf_recv`].
unsafe fn post_receive(
    ep: *mut c_void,
    (iov, count): (*const libc::iovec, usize),
    context: *mut c_void,
    kind: Kind,
    of: RecvOf,
) -> c_int {
    let body = |endpoint: &mut FabricEndpoint| {
        // SAFETY: the caller's contract.
        let iovecs = match unsafe { iovecs(iov, count) } {
            Ok(iovecs) => iovecs,
            Err(code) => return -code,
        };
        // SAFETY: the caller's contract.
        let buf = unsafe { first_base(iov, count) };
        endpoint.recv(iovecs, of, Owner { context, buf, kind })
    };
    // SAFETY: the caller's contract.
    unsafe { on_endpoint(ep, body) }
}

/// `FI_PEEK`: 1 and the message's description in `out` if a receive with this pattern would
/// find one now, 0 if none, or a negative error. The message stays queued, unless `claim` is
/// not null (`FI_PEEK | FI_CLAIM`): then it is taken, and only [`nf_recv_claimed`] or
/// [`nf_discard`] naming the claim written to `*claim` get it.
///
/// # Safety
/// `ep` is a live handle; `from` is null or points to a `union nf_addr`; `out` is valid for
/// writing an [`NfCompletion`]; `claim` is null or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn nf_peek(
    ep: *mut c_void,
    from: *const NfAddr,
    tagged: c_int,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    out: *mut NfCompletion,
    claim: *mut u64,
) -> c_int {
    let body = |endpoint: &mut FabricEndpoint| {
        // SAFETY: the caller's contract.
        let from = unsafe { address_of(from) };
        let pattern = (space(tagged), TagMatch::from_masked(tag, ignore));
        let past_held = match endpoint.peek_past_held(from, pattern) {
            Ok(past_held) => past_held,
            Err(error) => return post_error(&error),
        };
        let found = match (past_held, claim.is_null()) {
            (PastHeld::Nothing, _) => Ok(None),
            (PastHeld::Found(delivery), true) => Ok(Some((delivery, None))),
            (_, true) => {
                let found = endpoint.endpoint.iprobe(from, pattern);
                found.map(|found| found.map(|delivery| (delivery, None)))
            }
            (_, false) => {
                let found = endpoint.endpoint.claim(from, pattern);
                found.map(|found| found.map(|(delivery, claimed)| (delivery, Some(claimed))))
            }
        };
        match found {
            Ok(None) => 0,
            Ok(Some((delivery, claimed))) => {
                // SAFETY: the caller's contract.
                unsafe {
                    out.write(peeked(context, tagged != 0, &delivery));
                    if let Some(claimed) = claimed {
                        claim.write(claimed.to_bits());
                    }
                }
                1
            }
            Err(error) => post_error(&error),
        }
    };
    // SAFETY: the caller's contract.
    unsafe { on_endpoint(ep, body) }
}

/// What a peek that found a message reports: the message, as its receive would.
fn peeked(context: *mut c_void, tagged: bool, delivery: &Delivery) -> NfCompletion {
    NfCompletion {
        context,
        buf: std::ptr::null_mut(),
        len: delivery.len,
        olen: 0,
        tag: delivery.tag,
        data: u64::from(delivery.immediate.unwrap_or(0)),
        err: 0,
        is_send: 0,
        tagged: u8::from(tagged),
        has_data: u8::from(delivery.immediate.is_some()),
        wanted: 1,
        source: socket_address(delivery.address),
        source_fi_addr: FI_ADDR_NOTAVAIL,
    }
}

/// `FI_DISCARD`: drops the claimed message `claim` names; its sender completes normally. 0,
/// or `-FI_EINVAL` if the claim names no claimed message.
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_discard(ep: *mut c_void, claim: u64) -> c_int {
    let body =
        |endpoint: &mut FabricEndpoint| match endpoint.endpoint.discard(Claim::from_bits(claim)) {
            Ok(()) => 0,
            Err(error) => post_error(&error),
        };
    // SAFETY: the caller's contract.
    unsafe { on_endpoint(ep, body) }
}

/// Asks to cancel the operation posted with `context`: 0 if it was found (it then completes,
/// with `FI_ECANCELED` if the cancel took effect), `-FI_ENOENT` if no such operation is in
/// flight.
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_cancel(ep: *mut c_void, context: *mut c_void) -> c_int {
    let body = |endpoint: &mut FabricEndpoint| {
        let in_flight = endpoint
            .in_engine
            .iter()
            .find(|p| !p.owner.reads_nothing() && p.owner.context == context);
        if let Some(pending) = in_flight {
            pending.request.cancel();
            return 0;
        }
        if endpoint.cancel_held(context) {
            return 0;
        }
        -fi_errno::ENOENT
    };
    // SAFETY: the caller's contract.
    unsafe { on_endpoint(ep, body) }
}

/// Writes up to `max` finished operations to `out`, after a turn of an inline engine where
/// `turn` is set (a read right after one that found entries skips it); returns how many.
///
/// # Safety
/// `ep` is a live handle; `out` is valid for writing `max` [`NfCompletion`]s.
#[no_mangle]
pub unsafe extern "C" fn nf_poll(
    ep: *mut c_void,
    out: *mut NfCompletion,
    max: usize,
    turn: bool,
) -> usize {
    // SAFETY: the caller's contract.
    let Some(endpoint) = (unsafe { endpoint_mut(ep) }) else {
        return 0;
    };
    if out.is_null() || max == 0 {
        return 0;
    }
    // SAFETY: the caller's contract: `out` is valid for writing `max` entries (as
    // uninitialised memory: `finished` only writes them).
    let out =
        unsafe { std::slice::from_raw_parts_mut(out.cast::<MaybeUninit<NfCompletion>>(), max) };
    catch_unwind(AssertUnwindSafe(|| {
        // One clock read serves the turn and the idle rule.
        let now = nicmsg_engine::clock::monotonic_ns();
        let found = endpoint.finished(out, now, turn);
        if turn {
            endpoint.relax(found, now);
        }
        found
    }))
    .unwrap_or(0)
}

/// Whether the endpoint holds operations waiting for room in its engine (1), which enter it
/// during calls for the endpoint or on the provider's progress thread
/// (`provider/progress.c`); 0 if not, or for a null handle.
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_holds(ep: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { endpoint_mut(ep) }.map_or(0, |endpoint| c_int::from(endpoint.holds_anything()))
}

/// The endpoint's completion descriptor (`FI_WAIT_FD`): readable after a completion once
/// armed with [`nf_arm`]. A negative `FI_E*` code if it cannot be made.
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_completion_fd(ep: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    let Some(endpoint) = (unsafe { endpoint_mut(ep) }) else {
        return -fi_errno::EINVAL;
    };
    endpoint.endpoint.completion_fd().unwrap_or(-fi_errno::EIO)
}

/// Whether the endpoint's engine runs on a thread of its own (1), so completions come while
/// the application sleeps; 0 inline (or for a null handle).
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_progress_is_automatic(ep: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { endpoint_mut(ep) }.map_or(0, |endpoint| {
        c_int::from(endpoint.endpoint.engine_mode() == nicmsg::EngineMode::Thread)
    })
}

/// How many completions the endpoint's engine has made (wrapping): read before looking for
/// completions, compared after [`nf_arm`].
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_completion_count(ep: *mut c_void) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { endpoint_mut(ep) }.map_or(0, |endpoint| endpoint.endpoint.completion_count())
}

/// Arms the completion descriptor: the next completion makes it readable.
///
/// # Safety
/// `ep` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nf_arm(ep: *mut c_void) {
    // SAFETY: the caller's contract.
    if let Some(endpoint) = unsafe { endpoint_mut(ep) } {
        endpoint.endpoint.arm_completion_fd();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_endpoints_take_a_256_kib_eager_pool_of_16_credits_unless_told_or_too_many_peers() {
        let protocol = Options::default().protocol;
        let mut options = Options::default();
        choose_eager_pool(&mut options, 64);
        assert_eq!(options.protocol.eager_limit, PROVIDER_EAGER_LIMIT);
        assert_eq!(
            options.protocol.eager_credits_per_peer,
            PROVIDER_EAGER_CREDITS
        );

        let mut told =
            Options::from_lookup(|name| (name == "NICMSG_EAGER_LIMIT").then(|| "4096".to_string()))
                .unwrap();
        choose_eager_pool(&mut told, 64);
        assert_eq!(told.protocol.eager_limit, 4096);
        assert_eq!(
            told.protocol.eager_credits_per_peer,
            protocol.eager_credits_per_peer
        );

        let mut crowded = Options::default();
        choose_eager_pool(&mut crowded, 4096);
        assert!(crowded.eager_limit_auto, "left to the protocol's defaults");
        assert_eq!(crowded.protocol, protocol);
        assert!(crowded.check_for_job(4097).is_ok());
    }
}

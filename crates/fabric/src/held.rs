//! Operations held by the provider while its endpoint has no room for them in the engine.
//!
//! Open MPI injects every `MPI_Send` of at most 4 KiB (`fi_tinject`): the call returns at once
//! and reports nothing, so the send is done for the program. A message its receiver has not
//! asked for yet waits at the sender once the receiver's buffers for it are full, and each such
//! send keeps one of the endpoint's operations in flight ([`Room::sends`]). Two ranks
//! that each send more such messages than that before receiving (a program that relies on
//! buffering, which MPI calls unsafe but Open MPI on TCP runs) then both got `-FI_EAGAIN` for
//! ever: each spun in `MPI_Send`, and neither posted the receives the other waited for.
//! `mpirun -n 2` of 2,000 8-byte sends each way, then 2,000 receives: Open MPI on TCP 12 ms,
//! on the provider a hang.
//!
//! Now such sends wait here, copied, in posting order, up to [`MAX_HELD_SENDS`] and
//! [`MAX_HELD_BYTES`], and go to the engine as sends in flight complete. Sends posted behind
//! them to the same destination wait too, so nothing overtakes a held send to its destination
//! and MPI's order holds; sends to other destinations pass them (`held_sends.rs`, which also
//! shares the room for sends between destinations).
//! Neither kind of operation takes all of the endpoint's operations ([`Room`]): a rank whose
//! sends all wait for its peer can still post the receives its peer waits for, and the other
//! way round.
//!
//! **Every operation waits, none is refused.** Past the engine's room, other sends and receives
//! were refused with `-FI_EAGAIN`, and Open MPI retries a refused post in a loop. A program MPI
//! calls safe then hung: two ranks that each post a thousand `MPI_Isend`s (or `MPI_Irecv`s)
//! before the matching receives (sends) and wait for all of them both spun on their 385th post,
//! each waiting for the other to post what would complete its own. Open MPI on TCP takes any
//! number of them. Now a send or receive that finds no room (or finds earlier ones held) is
//! held too, in posting order, with the application's buffers (valid until it completes, as
//! libfabric has it): a receive's iovecs, a send's iovecs or, for injects and buffered sends,
//! the provider's copy. It goes to the engine as room frees, during calls for its endpoint (a
//! poll of its queues, a send while sends wait, for receives a peek; not a receive's post) and
//! on the provider's own thread while anything is held (`provider/progress.c`), and completes
//! as if posted then. A held operation can be cancelled, but for a claimed receive
//! ([`HeldRecvs::withdraw`]). Past [`MAX_HELD_SENDS`] or [`MAX_HELD_RECVS`] a
//! post is refused with `-FI_EAGAIN`, and the endpoint says so once on standard error: a hang
//! past that many operations is named.
//!
//! Receives held while messages arrive: a message that a held receive would take arrives
//! unexpected and is taken when the receive reaches the engine (receives reach it in posting
//! order, so matching order is MPI's). A peek (`MPI_Iprobe`) must not report such a message as
//! free: it answers "none" while a held receive would take the message it found, and looks
//! again once the receives have gone (`HeldRecvs::would_take`).
//!
//! **Buffered sends.** Open MPI sends every `MPI_Send` above 4 KiB with `fi_tsend` and waits
//! for its completion. The engine completes such a send (up to 64 KiB) as soon as it has
//! copied it, but into one of its 32 send copies, and past the receiver's 16 credits the copies
//! stay taken until the receiver takes the messages. Two ranks that each sent about fifty
//! 8 KiB messages before receiving then both waited in `MPI_Send` for ever, where Open MPI on
//! TCP finishes (it buffers every message up to its 64 KiB eager limit): `mpirun -n 2` of 200
//! 8 KiB sends each way, then 200 receives, hung. Now the provider copies such a send
//! ([`BUFFERED_SEND_ABOVE`] < length <= [`BUFFERED_SEND_MAX`], completion semantics not asked
//! for) as it copies an inject, reports its completion at once, and holds or sends the copy
//! like an inject's. The copy replaces the engine's (the engine is told not to copy it again,
//! and that nobody waits for the send: `SendOptions::unwaited`), so such a send is still
//! copied once, and its receiver may gather its acknowledgement with others'. A send that
//! asks for `FI_TRANSMIT_COMPLETE` or `FI_DELIVERY_COMPLETE` is never buffered: it completes
//! once the receiver holds it.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::net::SocketAddr;

use nicmsg::tagged::{Delivery, SendOptions, Space};
use nicmsg_proto::{Claim, TagMatch};

/// How many operations an endpoint keeps in its engine at once, of each kind and in all, for
/// an engine table of `slots` descriptors (`NICMSG_SLOTS`; the provider's 16,384 by default,
/// `endpoint.rs`: 16,256 in flight, up to 12,192 of each kind; the library's 640: 512, 384).
///
/// In all, the table less a fifth (at most 128) for a probe and the engine's own use. Of each
/// kind, three quarters of that: each kind takes the room the other leaves, but never its last
/// quarter, so that neither kind held waits for the other kind to be posted (see the module
/// documentation). Taken from the table the endpoint has: with fixed bounds (512 in flight,
/// 384 sends) a table of 256 (`NICMSG_SLOTS=256`) was filled by sends before any receive, every
/// receive was held behind them, and two ranks that each post 1,500 sends and then 1,500
/// receives both hung.
///
/// Receives may take as much as sends, not only the quarter sends always leave: receives wait
/// in posting order, so one whose message is already there waits behind those held before it,
/// and these wait for room that only the completion of the receives in the engine frees. With
/// receives held past 128, a rank that posted 200 `MPI_Irecv`s for results its workers send
/// once answered, then `MPI_Recv` of a worker's request, hung: the request's receive waited
/// behind 72 held receives whose messages were never to come. Before operations were held,
/// receives took any room sends left (up to 512) and that program ran; so does it now, up to
/// 384 receives in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub in_flight: usize,
    pub sends: usize,
    pub recvs: usize,
}

impl Room {
    pub fn for_slots(slots: usize) -> Room {
        let in_flight = slots - (slots / 5).min(128);
        let share = in_flight * 3 / 4;
        Room {
            in_flight,
            sends: share,
            recvs: share,
        }
    }
}

/// Most sends held at once. Past it a send answers `-FI_EAGAIN`.
pub const MAX_HELD_SENDS: usize = 65_536;

/// Most receives held at once. Past it a receive answers `-FI_EAGAIN`.
pub const MAX_HELD_RECVS: usize = 65_536;

/// Most bytes of the provider's own copies held at once (injects of at most 4 KiB, buffered
/// sends of at most 64 KiB): as much as a TCP connection's largest socket buffers, per
/// endpoint.
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// Sends longer than this are buffered (shorter ones are Open MPI's injects, held above, or
/// complete from the engine's own short copies or on their acknowledgement): the provider's
/// inject size (`NICMSG_INJECT_SIZE` in `provider/provider.h`).
pub const BUFFERED_SEND_ABOVE: usize = 4096;

/// The longest send buffered: Open MPI's eager limit on TCP (64 KiB), above which its TCP
/// transport waits for the receiver too, and the engine's longest send copy.
pub const BUFFERED_SEND_MAX: usize = 64 << 10;

/// Most completions the provider made itself (of buffered sends, and of held operations
/// cancelled or refused) not yet read by the application: past it a send is not buffered but
/// posted as any other (completed by the engine's copy, or when its receiver takes it), so an
/// application that sends without reading its queue does not grow this list.
pub const MAX_UNREAD_REPORTS: usize = 4096;

/// Whether a send of `len` bytes that asks for no completion semantics is buffered.
pub fn is_buffered(len: usize) -> bool {
    len > BUFFERED_SEND_ABOVE && len <= BUFFERED_SEND_MAX
}

/// What kind of operation a completion reports.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    pub is_send: bool,
    pub tagged: bool,
    /// A successful completion goes to the queue (libfabric's selective completion).
    pub wanted: bool,
}

/// Where an operation's completion goes: the application's context (null for the provider's
/// own sends, whose completion nobody reads), the buffer it reports, and its kind.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub context: *mut c_void,
    pub buf: *mut c_void,
    pub kind: Kind,
}

impl Owner {
    /// Nobody reads the operation's completion, success or error: no context and none wanted
    /// (the provider's own sends, and operations posted so).
    pub fn reads_nothing(&self) -> bool {
        !self.kind.wanted && self.context.is_null()
    }

    /// The owner of the provider's own sends (injects, and buffered sends whose completion
    /// the provider reported itself): no context, no completion.
    pub const NOBODY_READS: Owner = Owner {
        context: std::ptr::null_mut(),
        buf: std::ptr::null_mut(),
        kind: Kind {
            is_send: true,
            tagged: false,
            wanted: false,
        },
    };
}

/// Where a send goes and what it carries besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct SendTarget {
    pub to: SocketAddr,
    pub space_tag: (Space, u64),
    pub options: SendOptions,
}

/// Which message a held receive takes.
#[derive(Debug, Clone, Copy)]
pub enum RecvOf {
    /// The next one from `from` (anyone if `None`) of `space` whose tag `tag` accepts.
    Pattern {
        from: Option<SocketAddr>,
        space: Space,
        tag: TagMatch,
    },
    /// The one a peek claimed (`FI_CLAIM`).
    Claimed(Claim),
}

/// `NICMSG_WATCHDOG` for held operations: the engine's watchdog sees only what is in the
/// engine, and a program hung past the room (sends that wait for receives posted only later,
/// while a send or receive its peer needs waits here behind them) would show the operations
/// holding the room but not the ones waiting for it. This says, at most once a threshold, how
/// many wait here and how long since one last entered the engine.
#[derive(Debug, Default)]
pub struct HeldWatch {
    /// Operations that went from here into the engine, ever.
    entered: u64,
    /// `entered` when last looked at, and since when it has not moved while some were held.
    seen: u64,
    stuck_since: Option<u64>,
    told_at: Option<u64>,
}

impl HeldWatch {
    /// A held operation went into the engine.
    pub fn entered(&mut self) {
        self.entered += 1;
    }

    /// At `now` (ns, any monotonic clock), with `held` (sends, receives) waiting: the line to
    /// print if none has entered the engine for `threshold_ns`, and none was printed for as
    /// long.
    #[inline]
    pub fn look(&mut self, now: u64, held: (usize, usize), threshold_ns: u64) -> Option<String> {
        // Every poll looks, and nearly always nothing is held: answered inline.
        if held == (0, 0) {
            self.seen = self.entered;
            self.stuck_since = None;
            return None;
        }
        self.look_at_held(now, held, threshold_ns)
    }

    /// [`look`](Self::look) with operations held.
    fn look_at_held(
        &mut self,
        now: u64,
        held: (usize, usize),
        threshold_ns: u64,
    ) -> Option<String> {
        if self.entered != self.seen {
            self.seen = self.entered;
            self.stuck_since = Some(now);
            return None;
        }
        let since = *self.stuck_since.get_or_insert(now);
        let stuck = now.saturating_sub(since);
        // Told again once the wait has doubled since the last line, as the engine's watchdog
        // repeats its lines (`nicmsg_engine::runner::is_due_again`).
        let told_recently = self
            .told_at
            .is_some_and(|at| !nicmsg_engine::runner::is_due_again(now, (since, at), threshold_ns));
        if stuck < threshold_ns || told_recently {
            return None;
        }
        self.told_at = Some(now);
        Some(format!(
            "{} sends and {} receives wait in the provider for room in the engine; none has \
             entered it for {:.1} s (the watchdog's lines on this endpoint's operations in the \
             engine say what holds the room)",
            held.0,
            held.1,
            stuck as f64 / 1e9
        ))
    }
}

/// A receive waiting for room: the application's buffers, valid until it completes.
pub struct HeldRecv {
    pub pieces: Vec<libc::iovec>,
    pub of: RecvOf,
    pub owner: Owner,
}

/// The held receives of one endpoint, oldest first.
#[derive(Default)]
pub struct HeldRecvs {
    queue: VecDeque<HeldRecv>,
}

impl HeldRecvs {
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Holds `recv` behind the others; gives it back if the bound is reached.
    pub fn hold(&mut self, recv: HeldRecv) -> Result<(), HeldRecv> {
        if self.queue.len() >= MAX_HELD_RECVS {
            return Err(recv);
        }
        self.queue.push_back(recv);
        Ok(())
    }

    pub fn take_oldest(&mut self) -> Option<HeldRecv> {
        self.queue.pop_front()
    }

    /// Puts back, as the oldest, a receive the engine had no room for after all.
    pub fn put_back(&mut self, recv: HeldRecv) {
        self.queue.push_front(recv);
    }

    /// What standard error is told when a receive is refused for want of room to hold it.
    pub fn full_notice(&self) -> String {
        format!(
            "nicmsg: a libfabric endpoint holds {} receives waiting for room in its engine, at \
             most {MAX_HELD_RECVS}; further receives are refused with -FI_EAGAIN until some \
             complete",
            self.queue.len()
        )
    }

    /// Takes out the held receive posted with `context`, for a cancel; never a claimed one
    /// ([`RecvOf::Claimed`]), which stays and completes as received: its message was matched
    /// when the peek claimed it, and the engine does not cancel a claimed receive either.
    /// Withdrawn, it completed as cancelled and left its message claimed for ever, never
    /// delivered nor freed (the sender of a long one waiting for ever to send it).
    pub fn withdraw(&mut self, context: *mut c_void) -> Option<HeldRecv> {
        let at = self.position(context)?;
        if let RecvOf::Claimed(_) = self.queue[at].of {
            return None;
        }
        self.queue.remove(at)
    }

    /// Whether a receive posted with `context` is held (one [`withdraw`](Self::withdraw)
    /// leaves is, for a cancel that finds it but cannot take it).
    pub fn holds(&self, context: *mut c_void) -> bool {
        self.position(context).is_some()
    }

    fn position(&self, context: *mut c_void) -> Option<usize> {
        self.queue
            .iter()
            .position(|recv| !context.is_null() && recv.owner.context == context)
    }

    /// Whether a held receive would take the message `found` (of `space`) describes: it was
    /// posted before any receive or peek the application makes now, so that message is not
    /// free for them.
    pub fn would_take(&self, space: Space, found: &Delivery) -> bool {
        self.queue.iter().any(|recv| match recv.of {
            RecvOf::Pattern {
                from,
                space: held_space,
                tag,
            } => {
                held_space == space
                    && from.is_none_or(|from| Some(from) == found.address)
                    && (space == Space::Untagged || tag.matches(found.tag))
            }
            RecvOf::Claimed(_) => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_speaks_only_when_nothing_entered_for_the_threshold_and_again_as_the_wait_doubles()
    {
        let mut watch = HeldWatch::default();
        let second = 1_000_000_000;
        assert_eq!(watch.look(0, (0, 0), second), None, "nothing held");
        assert_eq!(watch.look(1, (3, 1), second), None, "held from now on");
        assert_eq!(
            watch.look(second / 2, (3, 1), second),
            None,
            "not for long yet"
        );
        watch.entered();
        assert_eq!(
            watch.look(second, (2, 1), second),
            None,
            "one entered: the clock restarts"
        );
        assert_eq!(watch.look(second + second / 2, (2, 1), second), None);
        let line = watch
            .look(2 * second, (2, 1), second)
            .expect("stuck for 1 s");
        assert!(
            line.starts_with("2 sends and 1 receives wait in the provider")
                && line.contains("for 1.0 s"),
            "{line}"
        );
        assert_eq!(
            watch.look(2 * second + 1, (2, 1), second),
            None,
            "told a moment ago"
        );
        assert!(
            watch.look(3 * second, (2, 1), second).is_some(),
            "told again when stuck twice as long, 2 s"
        );
        assert_eq!(
            watch.look(4 * second, (2, 1), second),
            None,
            "stuck 3 s: not yet twice the 2 s of the last line"
        );
        assert!(
            watch.look(5 * second, (2, 1), second).is_some(),
            "stuck 4 s"
        );
        assert_eq!(
            watch.look(6 * second, (0, 0), second),
            None,
            "nothing held any more"
        );
    }

    #[test]
    fn each_kind_of_operation_leaves_room_for_the_other_in_any_table() {
        let default = Room::for_slots(640);
        assert_eq!(
            (default.in_flight, default.sends, default.recvs),
            (512, 384, 384)
        );
        for slots in [16, 100, 256, 640, 4096, 16384] {
            let room = Room::for_slots(slots);
            assert!(
                room.in_flight < slots,
                "{room:?}: room for a probe in {slots}"
            );
            assert!(
                room.sends < room.in_flight,
                "{room:?}: sends leave receives room"
            );
            assert!(
                room.recvs < room.in_flight,
                "{room:?}: receives leave sends room"
            );
        }
    }
}

//! The inline engine: protocol work runs on the application's thread inside its library calls
//! (no engine thread spinning beside it, the choice when ranks outnumber cores), and a standby
//! thread takes over while the application is away from the library.
//!
//! Without the standby, a rank that computes for a minute between calls answers nothing for a
//! minute: its peers' retransmissions and liveness probes go unanswered and a live process
//! would look dead. The standby sleeps in the kernel (epoll on the transport's descriptors,
//! with the protocol's next deadline as timeout), so it costs nothing while the application is
//! inside the library; when a datagram or a timer comes while the application is away, it runs
//! the engine's turns itself, exactly as the engine thread of `thread` mode does.
//!
//! Who runs the driver is one atomic word (`owner`): the host takes it on entering the
//! library ([`InlineEngine::enter`]) and gives it back on leaving; the standby takes it only
//! when it is free and the application has been away for [`HOST_AWAY_NS`] (or
//! [`HOST_AWAY_SHARED_CPU_NS`] where it shares the application's CPU), for a bounded
//! burst of turns. The host never waits longer than one such burst (microseconds); the standby
//! never waits on the host (it parks, backing off, and looks again). Entering and leaving cost
//! an atomic exchange and two stores: no system call, no lock.

use crate::clock::EngineClock;
use crate::driver::Driver;
use crate::poller::Poller;
use crate::runner::IdleConfig;
use crate::transport::Transport;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Values of the ownership word.
mod owner {
    /// Nobody runs the driver.
    pub const FREE: u32 = 0;
    /// The application is inside the library.
    pub const HOST: u32 = 1;
    /// The standby thread runs turns.
    pub const STANDBY: u32 = 2;
}

/// Pauses the application spins for the driver while the standby holds it, before it yields
/// its CPU between looks (a pause is tens of nanoseconds; the standby's burst of turns,
/// microseconds). A standby descheduled in the middle of a burst (more threads than cores: 4
/// ranks on 2 cores, each with its standby) kept the driver until the scheduler ran it again:
/// a rank that posted 12,000 receives spent 40 % of its time spinning here.
const ENTER_SPINS_BEFORE_YIELD: u32 = 256;

/// How long the standby parks, at first, when it finds the application inside the library;
/// the park doubles while the application stays inside, up to [`STANDBY_PARK_MAX_NS`]. An
/// application busy in the library handles its own traffic, so the standby looks rarely then:
/// about 60 wake-ups a second once backed off, none of them on a datagram's path.
pub const STANDBY_PARK_MIN_NS: u64 = 1_000_000;
/// Longest park: how late the standby may notice that the application left the library. The
/// protocol's liveness needs answers within `keepalive_ns` (200 ms) and `peer_timeout_ns` (at
/// least 1 s); a retransmission or an acknowledgement due while the application computes is
/// at most this late.
pub const STANDBY_PARK_MAX_NS: u64 = 16_000_000;
/// Longest sleep of the standby in `epoll` when nothing is due: it wakes for datagrams anyway,
/// and a timer the application armed before leaving is at most this late.
pub const STANDBY_MAX_SLEEP_NS: u64 = 10_000_000;
/// The application counts as away only after this long outside the library: between two calls
/// of a communication loop (a few hundred nanoseconds) the standby must not take the driver,
/// or the next call would wait for its burst of turns. For a standby with a CPU of its own.
pub const HOST_AWAY_NS: u64 = 50_000;
/// The same for a standby that shares the application's CPU (each rank bound to one core, as
/// under `mpirun`): taking over, it takes the CPU from the application's computation, and
/// the context switches and the exchanges it starts cost more than the overlap gains. Open
/// MPI's overlap pattern (10 KiB, 5 messages each way, both ranks bound): an iteration with
/// 400 us of computation took 468-523 us taking over after 50 us, 432-434 us after 5 ms, and
/// 1,723-1,779 against 1,655-1,664 us with 1,600 us of computation. Liveness needs answers
/// within seconds (`peer_timeout_ns`), so 5 ms costs it nothing; a peer waiting for this rank
/// meanwhile waits as it would for any rank whose progress is inside its calls.
pub const HOST_AWAY_SHARED_CPU_NS: u64 = 5_000_000;

/// Whether the standby thread has a CPU of its own or shares the application's: how soon it
/// takes over when the application is away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandbyCpu {
    Own,
    Shared,
}

impl StandbyCpu {
    /// How long the application must have been away before the standby takes the driver.
    pub fn away_ns(self) -> u64 {
        match self {
            Self::Own => HOST_AWAY_NS,
            Self::Shared => HOST_AWAY_SHARED_CPU_NS,
        }
    }
}

/// Turns the standby runs before giving the driver back: bounds how long an application
/// returning to the library waits for it.
const STANDBY_TURNS: usize = 16;
/// A post within this long of a previous post that sent frames is part of a burst (a window
/// of sends, a stream): it is left in the submission ring for the next turn, the
/// application's next wait or test, which starts the rest of the burst and sends it in one
/// batch (one `sendmmsg`, GSO runs) instead of a system call per message. A lone post (a
/// request, a reply: a ping-pong's sends are a round trip apart, several microseconds) is
/// started, and its frames sent, at once. Should the application compute right after a burst
/// instead of waiting, the rest leaves at its next call, or when the standby next looks
/// (within [`STANDBY_PARK_MAX_NS`], once the application has been away for the standby's
/// `away_ns`). Sending the posts of such bursts at once instead (an application that computed
/// after its last burst had each post of the next ones started as it came) made Open MPI's
/// overlap pattern slower at every computation measured (10 KiB messages, three
/// alternations, one computation rate for all): availability 0.315 against 0.457 at 25 us,
/// 0.788 against 0.860 at 200 us, 0.92 against 0.94 at 800 us. With each rank bound to one
/// core there is no core for the data to move on meanwhile, and five system calls while
/// posting cost the computation more than one batch at the wait.
pub const POST_BURST_GAP_NS: u64 = 2_000;

struct Shared<T: Transport> {
    owner: AtomicU32,
    driver: UnsafeCell<Driver<T>>,
    clock: EngineClock,
    /// The poller on the transport's descriptors, shared: the application waits in it while
    /// inside the library, the standby while the application is away. One epoll instance, not
    /// one each: every datagram queued on a socket calls back into each epoll instance that
    /// watches it, on the sender's path (loopback, veth), and a second instance cost every
    /// datagram of a ping-pong 0.2 us. The transport is in it only while one of them sleeps
    /// (see [`Poller::watch`]): spinning costs the datagrams nothing.
    poller: Poller,
    /// What the standby parks on while the application is inside: a doorbell only, so the
    /// datagrams the application is handling do not wake it.
    park: Poller,
    /// When the application last left the library, on the engine clock.
    host_left_at: AtomicU64,
    /// How long it must have been away before the standby takes over ([`StandbyCpu`]).
    away_ns: u64,
    /// When a post of the application last sent frames at once.
    posted_sent_at: AtomicU64,
    shutdown: AtomicBool,
    /// Turns run by the standby, for the counters.
    standby_turns: AtomicU64,
}

// SAFETY: the driver is reached only by the holder of `owner` (HOST or STANDBY), taken with
// acquire and given back with release ordering, so its accesses never overlap and each one
// sees the last one's writes. The driver itself is `Send` (it moves to an engine thread in
// thread mode).
unsafe impl<T: Transport> Sync for Shared<T> {}

/// The inline engine and its standby thread.
pub struct InlineEngine<T: Transport + 'static> {
    shared: Arc<Shared<T>>,
    standby: Option<JoinHandle<()>>,
}

impl<T: Transport + 'static> InlineEngine<T> {
    pub fn start(driver: Driver<T>, standby_cpu: StandbyCpu) -> std::io::Result<Self> {
        let fds = driver.transport().readable_fds();
        let shared = Arc::new(Shared {
            owner: AtomicU32::new(owner::FREE),
            driver: UnsafeCell::new(driver),
            clock: EngineClock::start(),
            poller: Poller::new(&fds)?,
            park: Poller::new(&[])?,
            host_left_at: AtomicU64::new(0),
            away_ns: standby_cpu.away_ns(),
            posted_sent_at: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            standby_turns: AtomicU64::new(0),
        });
        let standby_shared = Arc::clone(&shared);
        let standby = std::thread::Builder::new()
            .name("nicmsg-standby".into())
            .spawn(move || stand_by(&standby_shared))?;
        Ok(Self {
            shared,
            standby: Some(standby),
        })
    }

    fn shared(&self) -> &Shared<T> {
        &self.shared
    }

    /// The application enters the library: it runs the driver until the guard is dropped.
    pub fn enter(&self) -> HostTurns<'_, T> {
        let owner = &self.shared().owner;
        let mut spins = 0;
        while owner
            .compare_exchange_weak(
                owner::FREE,
                owner::HOST,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // The standby is in a bounded burst of turns, unless the scheduler took its CPU
            // in the middle of one: then it runs again only if this thread lets it.
            if spins < ENTER_SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        HostTurns {
            engine: self,
            seen_ns: std::cell::Cell::new(0),
        }
    }

    pub fn clock(&self) -> EngineClock {
        self.shared().clock
    }

    /// Turns the standby thread ran while the application was away.
    pub fn standby_turns(&self) -> u64 {
        self.shared().standby_turns.load(Ordering::Relaxed)
    }
}

impl<T: Transport + 'static> Drop for InlineEngine<T> {
    /// Stops the standby thread (the application lingers through `enter` first if it wants
    /// its last acknowledgements out).
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.poller.ring();
        self.shared.park.ring();
        if let Some(standby) = self.standby.take() {
            let _ = standby.join();
        }
    }
}

/// The driver, held by the application while it is inside the library.
pub struct HostTurns<'a, T: Transport + 'static> {
    engine: &'a InlineEngine<T>,
    /// The latest time the application read through [`now`](Self::now), which is when it left
    /// as far as the standby cares (its turns are microseconds): leaving needs no clock read.
    seen_ns: std::cell::Cell<u64>,
}

impl<T: Transport + 'static> HostTurns<'_, T> {
    pub fn now(&self) -> u64 {
        let now = self.engine.shared().clock.now();
        self.seen_ns.set(now);
        now
    }

    /// One turn at `now`, a time the caller read on the monotonic clock's engine scale; it
    /// also counts as when the application left, so leaving reads no clock.
    pub fn turn_at(&mut self, now: u64) -> bool {
        self.seen_ns.set(now);
        self.turn(now)
    }

    /// Starts the operation just posted and sends its frames; in a burst of sends (see
    /// [`POST_BURST_GAP_NS`]) leaves it for the next turn instead.
    pub fn start_posted(&mut self) {
        let now = self.now();
        let previous = self
            .engine
            .shared()
            .posted_sent_at
            .swap(now, Ordering::Relaxed);
        if now.saturating_sub(previous) >= POST_BURST_GAP_NS {
            Driver::start_posted(self, now);
        }
    }

    /// Sleeps in the kernel until a datagram arrives or `timeout_ns` passes (the driver stays
    /// the application's: it is still inside the library, waiting).
    pub fn wait(&mut self, timeout_ns: u64) {
        if self.engine.shared().poller.watch().wait(timeout_ns) {
            self.socket_error();
        }
    }

    /// One step of a wait with nothing to do: sleeps until a datagram, the next protocol
    /// deadline or `idle_poll_ns` (the engine's one idle rule, [`IdleConfig::sleep_ns`]).
    pub fn idle(&mut self, idle: &IdleConfig) {
        let now = self.now();
        let sleep_ns = idle.sleep_ns(self, now);
        self.wait(sleep_ns);
    }

    /// The rank is stopping: keep answering peers until the linger rule says enough
    /// ([`IdleConfig::linger_done`]), so this rank's last acknowledgements are not lost with it.
    pub fn linger(&mut self, idle: &IdleConfig) {
        let began = self.now();
        let mut last_work = began;
        loop {
            let now = self.now();
            if self.turn(now) {
                last_work = now;
                continue;
            }
            if idle.linger_done(self, now, began, last_work) {
                return;
            }
            self.idle(idle);
        }
    }
}

impl<T: Transport + 'static> Deref for HostTurns<'_, T> {
    type Target = Driver<T>;
    fn deref(&self) -> &Driver<T> {
        // SAFETY: this guard holds `owner` as HOST (see `Shared`).
        unsafe { &*self.engine.shared().driver.get() }
    }
}

impl<T: Transport + 'static> DerefMut for HostTurns<'_, T> {
    fn deref_mut(&mut self) -> &mut Driver<T> {
        // SAFETY: as above, and `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.engine.shared().driver.get() }
    }
}

impl<T: Transport + 'static> Drop for HostTurns<'_, T> {
    /// The application leaves: the standby takes over when it next looks (at most
    /// [`STANDBY_PARK_MAX_NS`] or [`STANDBY_MAX_SLEEP_NS`] later, at once for a datagram).
    /// Leaving costs two stores (and a clock read if the application read none inside), no
    /// system call.
    fn drop(&mut self) {
        let shared = self.engine.shared();
        let left_at = match self.seen_ns.get() {
            0 => shared.clock.now(),
            seen => seen,
        };
        shared.host_left_at.store(left_at, Ordering::Relaxed);
        shared.owner.store(owner::FREE, Ordering::Release);
    }
}

/// The standby thread: sleeps in `epoll` until a datagram, the next deadline or a ring, and
/// runs turns when the application is away; parks, backing off, while it is inside. It asks
/// for no short scheduler slice: it must not preempt an application spinning in the library.
fn stand_by<T: Transport>(shared: &Shared<T>) {
    let mut sleep_ns = 0;
    let mut park_ns = STANDBY_PARK_MIN_NS;
    // Kept while the application is away, so sleeping between the standby's bursts of turns
    // costs no system calls beyond the sleep.
    let mut watching = None;
    loop {
        let watch = watching.get_or_insert_with(|| shared.poller.watch());
        let socket_error = watch.wait(sleep_ns);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        match take_over(shared, socket_error) {
            Some(next_ns) => {
                sleep_ns = next_ns;
                park_ns = STANDBY_PARK_MIN_NS;
            }
            // The application is inside: it handles whatever woke us. Look again later,
            // without watching the descriptors (they stay readable until it reads them).
            None => {
                watching = None;
                shared.park.wait_for_ring(park_ns);
                if shared.shutdown.load(Ordering::Acquire) {
                    return;
                }
                park_ns = (park_ns * 2).min(STANDBY_PARK_MAX_NS);
                sleep_ns = 0;
            }
        }
    }
}

/// Runs a burst of turns if the application is away; returns how long to sleep next, or
/// `None` if the application holds the driver or left it only a moment ago.
fn take_over<T: Transport>(shared: &Shared<T>, socket_error: bool) -> Option<u64> {
    let away_since = shared.host_left_at.load(Ordering::Relaxed);
    if shared.clock.now().saturating_sub(away_since) < shared.away_ns {
        return None;
    }
    shared
        .owner
        .compare_exchange(
            owner::FREE,
            owner::STANDBY,
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .ok()?;
    // SAFETY: `owner` is STANDBY: the driver is this thread's until it is set FREE below.
    let driver = unsafe { &mut *shared.driver.get() };
    if socket_error {
        driver.socket_error();
    }
    let mut turns = 0;
    while turns < STANDBY_TURNS {
        turns += 1;
        if !driver.turn(shared.clock.now()) {
            break;
        }
    }
    let now = shared.clock.now();
    let sleep_ns = driver
        .next_deadline()
        .map_or(STANDBY_MAX_SLEEP_NS, |d| d.saturating_sub(now))
        .min(STANDBY_MAX_SLEEP_NS);
    // Work left over (a full burst): come back at once.
    let sleep_ns = if turns == STANDBY_TURNS { 0 } else { sleep_ns };
    shared
        .standby_turns
        .fetch_add(turns as u64, Ordering::Relaxed);
    shared.owner.store(owner::FREE, Ordering::Release);
    Some(sleep_ns)
}

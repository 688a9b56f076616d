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
//! Who runs the driver is one atomic word ([`owner`]): the host takes it on entering the
//! library ([`InlineEngine::enter`]) and gives it back on leaving; the standby takes it only
//! when it is free, for a bounded number of turns. The host never waits longer than one such
//! burst of turns (microseconds); the standby never waits on the host at all (it sleeps a tick
//! and looks again).

use crate::clock::EngineClock;
use crate::driver::Driver;
use crate::poller::Poller;
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

/// How long the standby sleeps before looking again when the application holds the driver, and
/// how late it may be on a deadline the application set while leaving (below it, leaving costs
/// no system call). A millisecond: far below any protocol timeout that matters for liveness
/// (`keepalive_ns`, `peer_timeout_ns`), and 1000 wake-ups a second at most while the
/// application is busy in the library.
pub const STANDBY_TICK_NS: u64 = 1_000_000;
/// Longest sleep of the standby when nothing is due: it wakes for datagrams anyway.
pub const STANDBY_MAX_SLEEP_NS: u64 = 100_000_000;
/// Turns the standby runs before giving the driver back: bounds how long an application
/// returning to the library waits for it.
const STANDBY_TURNS: usize = 16;

struct Shared<T: Transport> {
    owner: AtomicU32,
    driver: UnsafeCell<Driver<T>>,
    clock: EngineClock,
    /// The application's poller, used only by the owner of the driver as host.
    host_poller: Poller,
    /// The standby's own poller (also rung to wake it).
    standby_poller: Poller,
    /// When the standby will look at the driver next, on the engine clock.
    standby_wakes_at: AtomicU64,
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
    pub fn start(driver: Driver<T>) -> std::io::Result<Self> {
        let fds = driver.transport().readable_fds();
        let shared = Arc::new(Shared {
            owner: AtomicU32::new(owner::FREE),
            driver: UnsafeCell::new(driver),
            clock: EngineClock::start(),
            host_poller: Poller::new(&fds)?,
            standby_poller: Poller::new(&fds)?,
            standby_wakes_at: AtomicU64::new(0),
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
        while owner
            .compare_exchange_weak(
                owner::FREE,
                owner::HOST,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // The standby is in a bounded burst of turns.
            std::hint::spin_loop();
        }
        HostTurns { engine: self }
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
        self.shared.standby_poller.ring();
        if let Some(standby) = self.standby.take() {
            let _ = standby.join();
        }
    }
}

/// The driver, held by the application while it is inside the library.
pub struct HostTurns<'a, T: Transport + 'static> {
    engine: &'a InlineEngine<T>,
}

impl<T: Transport + 'static> HostTurns<'_, T> {
    pub fn now(&self) -> u64 {
        self.engine.shared().clock.now()
    }

    /// Sleeps in the kernel until a datagram arrives or `timeout_ns` passes (the driver stays
    /// the application's: it is still inside the library, waiting).
    pub fn wait(&mut self, timeout_ns: u64) {
        if self.engine.shared().host_poller.wait(timeout_ns) {
            self.socket_error();
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
    /// The application leaves: the standby takes over, woken now if it would otherwise be
    /// more than a tick late for work the application left behind (a command not taken yet,
    /// a timer it armed) — the first time after a quiet spell, not on every call.
    fn drop(&mut self) {
        let shared = self.engine.shared();
        let now = shared.clock.now();
        let pending = self.table().has_commands();
        let due = self.next_deadline().unwrap_or(u64::MAX);
        shared.owner.store(owner::FREE, Ordering::Release);
        let wakes_at = shared.standby_wakes_at.load(Ordering::Acquire);
        let late = |at: u64| at.saturating_add(STANDBY_TICK_NS) < wakes_at;
        if (pending && late(now)) || late(due) {
            shared.standby_poller.ring();
        }
    }
}

/// The standby thread: sleeps until a datagram, the next deadline or a ring; runs turns when
/// the application is away.
fn stand_by<T: Transport>(shared: &Shared<T>) {
    crate::sharing::request_short_slice(crate::sharing::ENGINE_SLICE_NS);
    let mut sleep_ns = 0;
    loop {
        let now = shared.clock.now();
        shared
            .standby_wakes_at
            .store(now.saturating_add(sleep_ns), Ordering::Release);
        let socket_error = shared.standby_poller.wait(sleep_ns);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        sleep_ns = match take_over(shared, socket_error) {
            Some(next_ns) => next_ns,
            // The application is inside: it handles whatever woke us. Look again in a tick,
            // without watching the descriptors (they stay readable until it reads them).
            None => {
                let wake = shared.clock.now().saturating_add(STANDBY_TICK_NS);
                shared.standby_wakes_at.store(wake, Ordering::Release);
                std::thread::sleep(std::time::Duration::from_nanos(STANDBY_TICK_NS));
                0
            }
        };
    }
}

/// Runs a burst of turns if the application is away; returns how long to sleep next, or
/// `None` if the application holds the driver.
fn take_over<T: Transport>(shared: &Shared<T>, socket_error: bool) -> Option<u64> {
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

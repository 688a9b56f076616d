//! Running the engine: on a dedicated thread (`thread` mode) or on the host's thread inside
//! test/wait (`inline` mode), with the same driver and the same idle strategy: spin for
//! `spin_ns` after the last work, then sleep in the poller until a datagram, the doorbell, the
//! next protocol deadline, or `idle_poll_ns` (so descriptors posted without a system call are
//! still picked up while the engine sleeps).

use crate::driver::Driver;
use crate::poller::Poller;
use crate::transport::Transport;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Idle behaviour of the engine and of waiting hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleConfig {
    /// Busy-polling time after the last work before sleeping.
    pub spin_ns: u64,
    /// Longest sleep of an idle engine: the latency of a descriptor posted while it sleeps.
    pub idle_poll_ns: u64,
    /// After shutdown, keep answering the peers until nothing arrived for this long, so the
    /// last acknowledgements of this rank are not lost with it.
    pub linger_quiet_ns: u64,
    /// Upper bound of that lingering.
    pub linger_max_ns: u64,
    /// Report operations pending longer than this (`NICMSG_WATCHDOG`), if set.
    pub watchdog_ns: Option<u64>,
}

impl Default for IdleConfig {
    fn default() -> Self {
        Self {
            spin_ns: 50_000,
            idle_poll_ns: 200_000,
            linger_quiet_ns: 50_000_000,
            linger_max_ns: 2_000_000_000,
            watchdog_ns: None,
        }
    }
}

/// State shared by the host and the engine thread.
pub struct Shared {
    pub shutdown: AtomicBool,
    pub engine_sleeping: AtomicBool,
    /// Hosts blocked in a futex wait on the table's completion counter.
    pub hosts_waiting: AtomicU32,
    pub stats_requested: AtomicBool,
    pub stats: Mutex<Option<Snapshot>>,
    /// The engine thread died (a bug): waiting hosts must give up instead of hanging.
    pub engine_failed: AtomicBool,
    poller: Poller,
}

/// Counters copied out of the engine on request.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub protocol: nicmsg_proto::Stats,
    pub engine: crate::driver::EngineStats,
    /// Per peer, indexed by rank.
    pub peers: Vec<nicmsg_proto::Stats>,
    /// The transport's own line (`Transport::summary`).
    pub transport: String,
}

impl Snapshot {
    pub fn of<T: Transport>(driver: &Driver<T>) -> Self {
        Self {
            protocol: *driver.protocol_stats(),
            engine: *driver.stats(),
            peers: driver.peer_stats(),
            transport: driver.transport().summary(),
        }
    }
}

impl Shared {
    pub fn failed(&self) -> bool {
        self.engine_failed.load(Ordering::SeqCst)
    }

    /// Host side, only from a blocking wait: make a sleeping engine look at the table now.
    pub fn wake_engine(&self) {
        if self.engine_sleeping.load(Ordering::SeqCst) {
            self.poller.ring();
        }
    }
}

/// The engine on its own thread.
pub struct ThreadEngine<T: Transport + 'static> {
    pub shared: Arc<Shared>,
    handle: Option<JoinHandle<Option<Driver<T>>>>,
}

impl<T: Transport + 'static> ThreadEngine<T> {
    pub fn spawn(driver: Driver<T>, idle: IdleConfig) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            shutdown: AtomicBool::new(false),
            engine_sleeping: AtomicBool::new(false),
            hosts_waiting: AtomicU32::new(0),
            stats_requested: AtomicBool::new(false),
            stats: Mutex::new(None),
            engine_failed: AtomicBool::new(false),
            poller: Poller::new(&driver.transport().readable_fds())?,
        });
        let engine_shared = Arc::clone(&shared);
        let table = Arc::clone(driver.table_arc());
        let handle = std::thread::Builder::new()
            .name("nicmsg-engine".into())
            .spawn(move || {
                let short_slice =
                    crate::sharing::request_short_slice(crate::sharing::ENGINE_SLICE_NS);
                tracing::debug!(short_slice, "engine thread scheduler slice");
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(driver, &engine_shared, idle)
                }));
                ran.map_err(|_| {
                    // Wake every waiting host so it reports the failure instead of hanging.
                    engine_shared.engine_failed.store(true, Ordering::SeqCst);
                    table.completions.fetch_add(1, Ordering::SeqCst);
                    atomic_wait::wake_all(&table.completions);
                })
                .ok()
            })?;
        Ok(Self {
            shared,
            handle: Some(handle),
        })
    }

    /// Stops the engine after lingering, and returns the driver (for final counters).
    pub fn stop(&mut self) -> Option<Driver<T>> {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.poller.ring();
        self.handle.take()?.join().ok().flatten()
    }
}

impl<T: Transport + 'static> Drop for ThreadEngine<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run<T: Transport>(mut driver: Driver<T>, shared: &Shared, idle: IdleConfig) -> Driver<T> {
    let clock = crate::EngineClock::start();
    let mut last_work = 0u64;
    let mut shutdown_at: Option<u64> = None;
    let mut last_watchdog = 0u64;
    loop {
        // Asked for counters: answered at every turn, busy or not (a host asking while
        // messages stream would otherwise wait until the stream ends).
        if shared.stats_requested.load(Ordering::Relaxed)
            && shared.stats_requested.swap(false, Ordering::AcqRel)
        {
            *shared.stats.lock().expect("stats lock") = Some(Snapshot::of(&driver));
        }
        let now = clock.now();
        if driver.turn(now) {
            last_work = now;
            wake_hosts(driver.table(), shared);
            continue;
        }
        if let Some(threshold) = idle.watchdog_ns {
            if now - last_watchdog >= WATCHDOG_PERIOD_NS {
                last_watchdog = now;
                report_hangs(&mut driver, now, threshold);
            }
        }
        if shared.shutdown.load(Ordering::Acquire) {
            let since = *shutdown_at.get_or_insert(now);
            let quiet =
                now - last_work >= idle.linger_quiet_ns && driver.endpoint().usage().is_empty();
            if quiet || now - since >= idle.linger_max_ns {
                return driver;
            }
        }
        if now - last_work < idle.spin_ns {
            crate::sharing::relax(now - last_work);
            continue;
        }
        sleep(&mut driver, shared, idle, now);
    }
}

fn sleep<T: Transport>(driver: &mut Driver<T>, shared: &Shared, idle: IdleConfig, now: u64) {
    shared.engine_sleeping.store(true, Ordering::SeqCst);
    // A command pushed just before the flag was set would otherwise wait a whole idle poll.
    if !driver.table().has_commands() {
        let until_deadline = driver
            .next_deadline()
            .map_or(u64::MAX, |d| d.saturating_sub(now));
        if shared.poller.wait(until_deadline.min(idle.idle_poll_ns)) {
            driver.socket_error();
        }
    }
    shared.engine_sleeping.store(false, Ordering::SeqCst);
}

/// How often the watchdog looks at pending operations.
pub const WATCHDOG_PERIOD_NS: u64 = 1_000_000_000;

/// Prints the watchdog's findings on stderr (the place a user looks when a job hangs).
pub fn report_hangs<T: Transport>(driver: &mut Driver<T>, now: u64, threshold_ns: u64) {
    let rank = driver.endpoint().rank();
    for line in driver.watchdog(now, threshold_ns) {
        tracing::warn!(rank, "watchdog: {line}");
        eprintln!("nicmsg watchdog: rank {rank}: {line}");
    }
}

fn wake_hosts(table: &crate::table::Table, shared: &Shared) {
    if shared.hosts_waiting.load(Ordering::SeqCst) > 0 {
        atomic_wait::wake_all(&table.completions);
    }
}

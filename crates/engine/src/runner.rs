//! Running the engine: on a dedicated thread (`thread` mode) or on the host's thread inside
//! test/wait (`inline` mode), with the same driver and the same idle strategy: spin for
//! `spin_ns` after the last work, then sleep in the poller until a datagram, the doorbell, the
//! next protocol deadline, or `idle_poll_ns` (so descriptors posted without a system call are
//! still picked up while the engine sleeps).

use crate::driver::Driver;
use crate::poller::Poller;
use crate::table::Table;
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

/// The idle rules every engine loop follows (the engine thread, the inline engine inside a
/// wait, a stopping rank lingering): written once, here.
impl IdleConfig {
    /// How long an engine with nothing to do may sleep at `now`: until its next protocol
    /// deadline, and never longer than `idle_poll_ns` (descriptors posted without a system
    /// call are picked up at that rate).
    pub fn sleep_ns<T: Transport>(&self, driver: &Driver<T>, now: u64) -> u64 {
        driver
            .next_deadline()
            .map_or(u64::MAX, |deadline| deadline.saturating_sub(now))
            .min(self.idle_poll_ns)
    }

    /// Whether a stopping rank has lingered enough: nothing arrived for `linger_quiet_ns` and
    /// the protocol owes no peer anything (every peer has its acknowledgements; receives still
    /// posted do not count), or `linger_max_ns` passed since it began (logged with what was
    /// still held).
    pub fn linger_done<T: Transport>(
        &self,
        driver: &Driver<T>,
        now: u64,
        began: u64,
        last_work: u64,
    ) -> bool {
        let usage = driver.endpoint().usage();
        let done = self.lingered_enough(now - began, now - last_work, usage.owes_peers_nothing());
        if done && !usage.owes_peers_nothing() {
            tracing::debug!(
                ?usage,
                "stopped lingering after the longest linger, state still held"
            );
        }
        done
    }

    /// The lingering rule on its own, for any stack that lingers (the engine's, and LM's
    /// datagram sockets): quiet for `linger_quiet_ns` with nothing owed to a peer, or
    /// `linger_max_ns` since the lingering began.
    pub fn lingered_enough(&self, lingering_ns: u64, quiet_ns: u64, owes_nothing: bool) -> bool {
        (quiet_ns >= self.linger_quiet_ns && owes_nothing) || lingering_ns >= self.linger_max_ns
    }
}

/// State shared by the host and the engine thread: private, so the handshakes on it (asking
/// for counters, sleeping until a completion, stopping) are written once, here, as methods of
/// [`ThreadEngine`].
struct Shared {
    shutdown: AtomicBool,
    engine_sleeping: AtomicBool,
    /// Hosts blocked in a futex wait on the table's completion count.
    hosts_waiting: AtomicU32,
    stats_requested: AtomicBool,
    stats: Mutex<Option<Snapshot>>,
    /// The engine thread died (a bug): waiting hosts must give up instead of hanging.
    engine_failed: AtomicBool,
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
    /// PANIC: the engine's counts of programs' traffic and the VM's, if it hosts programs.
    pub programs: Option<(crate::programs::ProgramsStats, nicmsg_vm::Stats)>,
}

impl Snapshot {
    pub fn of<T: Transport>(driver: &Driver<T>) -> Self {
        Self {
            protocol: *driver.protocol_stats(),
            engine: *driver.stats(),
            peers: driver.peer_stats(),
            transport: driver.transport().summary(),
            programs: driver.programs().map(|programs| {
                let vm = programs.vm().map(nicmsg_vm::Vm::stats).unwrap_or_default();
                (*programs.stats(), vm)
            }),
        }
    }
}

impl Shared {
    fn failed(&self) -> bool {
        self.engine_failed.load(Ordering::SeqCst)
    }

    /// Host side: make a sleeping engine look at the table now.
    fn wake_engine(&self) {
        if self.engine_sleeping.load(Ordering::SeqCst) {
            self.poller.ring();
        }
    }

    /// The engine is gone: say so, and wake every host waiting for a completion so it
    /// reports the failure instead of hanging.
    fn declare_failed(&self, table: &Table) {
        self.engine_failed.store(true, Ordering::SeqCst);
        table.wake_all_for_failure();
    }
}

/// How often a host asking for counters looks for the answer: by yielding for the first
/// rounds (the engine answers within a turn), then by sleeping this long (a busy engine).
const STATS_YIELD_ROUNDS: u32 = 1000;
const STATS_SLEEP: std::time::Duration = std::time::Duration::from_micros(100);

/// The engine on its own thread.
pub struct ThreadEngine<T: Transport + 'static> {
    shared: Arc<Shared>,
    table: Arc<Table>,
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
        let engine_table = Arc::clone(&table);
        let handle = std::thread::Builder::new()
            .name("nicmsg-engine".into())
            .spawn(move || {
                let short_slice =
                    crate::sharing::request_short_slice(crate::sharing::ENGINE_SLICE_NS);
                tracing::debug!(short_slice, "engine thread scheduler slice");
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(driver, &engine_shared, idle)
                }));
                ran.map_err(|_| engine_shared.declare_failed(&engine_table))
                    .ok()
            })?;
        Ok(Self {
            shared,
            table,
            handle: Some(handle),
        })
    }

    /// The engine thread died (a bug in the engine): nothing will complete any more.
    pub fn failed(&self) -> bool {
        self.shared.failed()
    }

    /// Tests of the host's failure paths: behave as if the engine thread had died (it keeps
    /// running, but every wait, test and request for counters now sees it failed).
    #[doc(hidden)]
    pub fn declare_failed_for_test(&self) {
        self.shared.declare_failed(&self.table);
    }

    /// The engine's counters, copied at its next turn (within a turn's work or an idle poll),
    /// or `None` if the engine thread is gone: its counters went with it.
    pub fn stats(&self) -> Option<Snapshot> {
        let shared = &self.shared;
        shared.stats_requested.store(true, Ordering::Release);
        shared.wake_engine();
        let mut round = 0u32;
        loop {
            if shared.failed() {
                return None;
            }
            if let Some(snapshot) = shared.stats.lock().ok()?.take() {
                return Some(snapshot);
            }
            if round < STATS_YIELD_ROUNDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(STATS_SLEEP);
            }
            round = round.saturating_add(1);
        }
    }

    /// Host side: sleeps until the engine completes something, unless `done` already holds
    /// or the engine is gone. One round: the caller checks its own condition again after, as
    /// a futex wait may also end spuriously.
    pub fn block_until(&self, done: impl Fn() -> bool) {
        let shared = &self.shared;
        // Announce the sleeper before reading the count: the engine wakes hosts only when it
        // sees one, so a completion after this read is either seen by `done` or wakes us.
        shared.hosts_waiting.fetch_add(1, Ordering::SeqCst);
        let seen = self.table.completion_count();
        if !done() && !shared.failed() {
            shared.wake_engine();
            self.table.wait_for_completion_after(seen);
        }
        shared.hosts_waiting.fetch_sub(1, Ordering::SeqCst);
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
            let began = *shutdown_at.get_or_insert(now);
            if idle.linger_done(&driver, now, began, last_work) {
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
    if !driver.table().has_commands() && shared.poller.watch().wait(idle.sleep_ns(driver, now)) {
        driver.socket_error();
    }
    shared.engine_sleeping.store(false, Ordering::SeqCst);
}

/// How often the watchdog looks at pending operations.
pub const WATCHDOG_PERIOD_NS: u64 = 1_000_000_000;

/// Whether an operation posted at `posted` and last reported at `reported` (its posting, if
/// never) is due for a report at `now`: a threshold after its posting, then each time its age
/// has doubled (1, 2, 4, 8 ... thresholds).
pub fn is_due_again(now: u64, (posted, reported): (u64, u64), threshold_ns: u64) -> bool {
    let age_at_report = reported.saturating_sub(posted);
    now.saturating_sub(reported) >= threshold_ns.max(age_at_report)
}

/// Whether this process's watchdog said how to tune it: once, with its first report (the
/// watchdog is on unless turned off, so its first lines may surprise).
static HOW_TO_TUNE_TOLD: AtomicBool = AtomicBool::new(false);

/// Operations the watchdog names in one look, the oldest first; the rest are counted. A job
/// hung with thousands of operations in flight (a flood of sends waiting for receives) printed
/// a line for each, every period, and buried the lines that explain it.
pub const WATCHDOG_LINES_MAX: usize = 8;

/// Prints the watchdog's findings on stderr (the place a user looks when a job hangs), in one
/// write, so that the ranks' reports, merged by a launcher, do not cut into each other's
/// lines. Each line names who reports: the rank in a job, the bound address on an open
/// endpoint (its rank is the library's own slot number, which tells a user nothing).
pub fn report_hangs<T: Transport>(driver: &mut Driver<T>, now: u64, threshold_ns: u64) {
    let endpoint = driver.endpoint();
    let who = match endpoint.own_address() {
        Some(address) => format!("endpoint {address}"),
        None => format!("rank {}", endpoint.rank()),
    };
    let (lines, unnamed) = driver.watchdog(now, threshold_ns, WATCHDOG_LINES_MAX);
    if lines.is_empty() {
        return;
    }
    let mut report = String::new();
    for line in &lines {
        tracing::warn!(who, "watchdog: {line}");
        report.push_str(&format!("nicmsg watchdog: {who}: {line}\n"));
    }
    if unnamed > 0 {
        report.push_str(&format!(
            "nicmsg watchdog: {who}: and {unnamed} more operations pending longer than {:.1} \
             s, not named (at most {WATCHDOG_LINES_MAX} a look, the oldest)\n",
            threshold_ns as f64 / 1e9
        ));
    }
    if !HOW_TO_TUNE_TOLD.swap(true, Ordering::Relaxed) {
        report.push_str(&format!(
            "nicmsg watchdog: {who}: (operations pending longer than {:.1} s are reported, \
             again as their wait doubles; NICMSG_WATCHDOG=SECONDS sets when, =off stops it)\n",
            threshold_ns as f64 / 1e9
        ));
    }
    // Nothing to do if standard error is gone: the report is a courtesy.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
}

fn wake_hosts(table: &Table, shared: &Shared) {
    if shared.hosts_waiting.load(Ordering::SeqCst) > 0 {
        table.wake_waiting_hosts();
    }
}

#[cfg(test)]
mod tests {
    use super::is_due_again;

    const S: u64 = 1_000_000_000;

    /// The ages at which one operation posted at 0 is reported, looked at once a second.
    fn report_ages(threshold: u64, until: u64) -> Vec<u64> {
        let (posted, mut reported, mut ages) = (0, 0, Vec::new());
        for now in (0..=until).step_by(S as usize) {
            if now - posted >= threshold && is_due_again(now, (posted, reported), threshold) {
                reported = now;
                ages.push(now / S);
            }
        }
        ages
    }

    #[test]
    fn an_operation_is_reported_again_each_time_its_age_doubles() {
        assert_eq!(
            report_ages(60 * S, 3_600 * S),
            [60, 120, 240, 480, 960, 1920]
        );
        assert_eq!(report_ages(S, 20 * S), [1, 2, 4, 8, 16]);
    }

    #[test]
    fn nothing_is_reported_before_the_threshold() {
        assert_eq!(report_ages(60 * S, 59 * S), Vec::<u64>::new());
        assert!(!is_due_again(59 * S, (0, 0), 60 * S));
        assert!(is_due_again(60 * S, (0, 0), 60 * S));
    }
}

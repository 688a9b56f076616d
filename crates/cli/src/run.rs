//! `nicmsg run`: start the ranks, forward their output, watch them, stop them, clean up.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use thiserror::Error;

use crate::limits;
use crate::netns::{self, NetnsError, Tools, Topology};
use crate::output::{self, Stream};
use crate::signals;
use crate::units::{parse_loss, parse_rate, parse_seconds, Loss, Rate};

/// How long ranks get between SIGTERM and SIGKILL when the job is stopped.
pub const GRACE: Duration = Duration::from_secs(2);
/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(10);
/// Exit status of the launcher when the job hits `--timeout` (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status of the launcher for its own errors (bad arguments, setup failures).
pub const EXIT_LAUNCHER_ERROR: i32 = 2;

/// The data-path engine the ranks should use (`NICMSG_ENGINE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// Protocol work runs in the calling thread, inside the library calls.
    Inline,
    /// Protocol work runs in a dedicated engine thread.
    Thread,
}

impl Engine {
    fn as_env(self) -> &'static str {
        match self {
            Engine::Inline => "inline",
            Engine::Thread => "thread",
        }
    }
}

/// Arguments of `nicmsg run`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    nicmsg run -n 4 -- ./my_program --size 1M\n  \
    sudo nicmsg run -n 4 --netns --mtu 9000 --rate 10gbit --loss 1% -- ./my_program\n  \
    nicmsg run -n 4 -- nicmsg check\n\n\
    See docs/launcher.md for the environment given to the ranks.")]
pub struct RunArgs {
    /// Number of ranks to start.
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: u32,

    /// Run each rank in its own network namespace (needs root), connected by a bridge.
    #[arg(long)]
    pub netns: bool,

    /// Link MTU in bytes (576..=65535, what the library takes as NICMSG_MTU): set on the
    /// namespace links with --netns, and passed to the ranks as NICMSG_MTU. Default with
    /// --netns: 1500.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(576..=65535))]
    pub mtu: Option<u32>,

    /// Egress rate limit of each rank's link, e.g. 1gbit, 100mbit (needs --netns).
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub rate: Option<Rate>,

    /// Random loss of the frames each rank receives, e.g. 5% (needs --netns and nftables).
    #[arg(long, value_name = "PERCENT", value_parser = parse_loss)]
    pub loss: Option<Loss>,

    /// Stop the job after this many seconds and exit with status 124.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,

    /// The job's id (NICMSG_JOB; default: random): `nicmsg pdl ... --job ID` reaches its ranks'
    /// engines.
    #[arg(long = "job", value_name = "ID", value_parser = clap::value_parser!(u32).range(1..))]
    pub job: Option<u32>,

    /// Engine the ranks should use (passed as NICMSG_ENGINE). Default: the library's (thread),
    /// or inline when 2 x ranks exceeds the cores of this machine.
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,

    /// The program to run and its arguments: after `--`, or from the first word that is not an
    /// option of `nicmsg run` on (as with mpirun). Everything after the program's name is its
    /// own, options included.
    // No `allow_hyphen_values`: with it an unknown option before the program (`--frobnicate`)
    // was taken as the program's name. `trailing_var_arg` alone still hands every word after
    // the first one to the program, hyphens or not.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

/// How a rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankStatus {
    Exited(i32),
    Signaled { signal: i32, core_dumped: bool },
}

impl RankStatus {
    pub fn success(self) -> bool {
        self == RankStatus::Exited(0)
    }
    /// The shell's convention: the exit status, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            RankStatus::Exited(code) => code,
            RankStatus::Signaled { signal, .. } => 128 + signal,
        }
    }
}

impl fmt::Display for RankStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RankStatus::Exited(code) => write!(f, "exited with status {code}"),
            RankStatus::Signaled {
                signal,
                core_dumped,
            } => write!(
                f,
                "killed by signal {signal} ({}{})",
                signals::name(signal),
                if core_dumped { ", core dumped" } else { "" }
            ),
        }
    }
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// The first rank that failed.
    RankFailed { rank: u32, status: RankStatus },
    /// `--timeout` expired.
    TimedOut(Duration),
    /// The launcher got this signal.
    Interrupted(i32),
}

impl Outcome {
    /// The launcher's exit status: 0; the failed rank's status (128 + signal when killed); 124
    /// on timeout; 128 + signal when interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::RankFailed { status, .. } => match status.code() {
                // Never 0, and within what exit(3) keeps.
                c if (1..=255).contains(&c) => c,
                _ => 1,
            },
            Outcome::TimedOut(_) => EXIT_TIMEOUT,
            Outcome::Interrupted(sig) => 128 + sig,
        }
    }
}

/// Errors of the launcher itself (as opposed to failures of the ranks).
#[derive(Debug, Error)]
pub enum LaunchError {
    #[error("--netns needs root (it creates network namespaces); run as root or drop --netns")]
    NotRoot,
    #[error("{0} needs --netns (it shapes the links between the ranks' namespaces)")]
    NeedsNetns(&'static str),
    #[error("--netns supports at most {max} ranks (one /24 subnet); -n {0} asked for more", max = netns::MAX_RANKS)]
    TooManyRanks(u32),
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0} is a directory")]
    IsDirectory(String),
    #[error("{0} is not executable (chmod +x?)")]
    NotExecutable(String),
    #[error("-n {ranks}: {why}")]
    MachineLimit { ranks: u32, why: String },
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("cannot find a free loopback port for the bootstrap service: {0}")]
    Port(#[source] io::Error),
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        rank: u32,
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot watch rank {rank}: {source}")]
    Wait {
        rank: u32,
        #[source]
        source: io::Error,
    },
}

/// The engine to choose when neither `--engine` nor `NICMSG_ENGINE` says: `thread` gives every
/// rank two busy threads (application and engine), so when the ranks on this machine would need
/// more cores than it has, the threads steal each other's time and every message waits for a
/// context switch (measured: 8-byte ping-pong ~120 us instead of ~12 us on 2 cores). Then the
/// `inline` engine is picked (silently: the launcher's stderr belongs to the ranks; the choice is
/// documented in `docs/launcher.md` and each program can ask `Comm::engine_mode`).
fn oversubscribed_default(ranks: u32) -> Option<Engine> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    default_engine(ranks, cores, std::env::var_os("NICMSG_ENGINE").is_some())
}

/// Whether each rank will run an engine thread: `--engine`, else the launcher's choice, else
/// `NICMSG_ENGINE` from its environment, else the library's default (`auto`: the thread, for
/// ranks the launcher did not find oversubscribed).
fn engine_thread_per_rank(engine: Option<Engine>) -> bool {
    match engine {
        Some(engine) => engine == Engine::Thread,
        None => !std::env::var("NICMSG_ENGINE")
            .is_ok_and(|mode| mode.trim().eq_ignore_ascii_case("inline")),
    }
}

fn default_engine(ranks: u32, cores: usize, chosen_by_environment: bool) -> Option<Engine> {
    let oversubscribed = 2 * u64::from(ranks) > cores as u64;
    (oversubscribed && !chosen_by_environment).then_some(Engine::Inline)
}

#[cfg(test)]
mod default_engine_tests {
    use super::*;

    #[test]
    fn inline_only_when_threads_outnumber_cores_and_nobody_chose() {
        assert_eq!(default_engine(2, 2, false), Some(Engine::Inline));
        assert_eq!(default_engine(2, 4, false), None);
        assert_eq!(default_engine(8, 16, false), None);
        assert_eq!(default_engine(9, 16, false), Some(Engine::Inline));
        assert_eq!(
            default_engine(2, 2, true),
            None,
            "NICMSG_ENGINE in the environment wins"
        );
    }
}

/// Runs a job to its end. Prints the launcher's own messages on stderr prefixed with
/// `nicmsg run: `. Signal handlers for SIGINT/SIGTERM/SIGHUP must have been installed with
/// [`crate::signals::install`] for Ctrl-C to stop the job cleanly (the `nicmsg` binary does).
pub fn run(args: &RunArgs) -> Result<Outcome, LaunchError> {
    if !args.netns {
        if args.rate.is_some() {
            return Err(LaunchError::NeedsNetns("--rate"));
        }
        if args.loss.is_some() {
            return Err(LaunchError::NeedsNetns("--loss"));
        }
    }
    let engine = args.engine.or_else(|| oversubscribed_default(args.ranks));
    let program = args.command[0].clone();
    resolve_program(Path::new(&program))?;
    if args.netns && args.ranks > netns::MAX_RANKS {
        return Err(LaunchError::TooManyRanks(args.ranks));
    }
    let threads_per_rank = 1 + u64::from(engine_thread_per_rank(engine));
    limits::check(args.ranks, threads_per_rank, &limits::Machine::measure()).map_err(|why| {
        LaunchError::MachineLimit {
            ranks: args.ranks,
            why,
        }
    })?;

    // With --netns: check, clean up after crashed launchers, build.
    let mut topology = if args.netns {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(LaunchError::NotRoot);
        }
        let lossy = args.loss.is_some_and(|l| l.basis_points > 0);
        let tools = Tools::find(args.rate.is_some(), lossy)?;
        for ns in netns::remove_stale(&tools.ip)? {
            eprintln!("nicmsg run: removed stale namespace {ns} (its launcher is gone)");
        }
        let opts = netns::Options {
            ranks: args.ranks,
            mtu: args.mtu.unwrap_or(1500),
            rate: args.rate,
            loss: args.loss,
        };
        match Topology::create(tools, std::process::id(), &opts) {
            Ok(t) => Some(t),
            // Ctrl-C during set-up also hits the `ip` commands (same process group).
            Err(e) => {
                return match signals::take() {
                    Some(sig) => {
                        eprintln!(
                            "nicmsg run: got {} while setting up the namespaces; removed them",
                            signals::name(sig)
                        );
                        Ok(Outcome::Interrupted(sig))
                    }
                    None => Err(e.into()),
                }
            }
        }
    } else {
        None
    };

    let bootstrap: SocketAddr = match &topology {
        Some(t) => t.bootstrap_addr(),
        None => free_loopback_port().map_err(LaunchError::Port)?,
    };
    let job = args.job.unwrap_or_else(random_job_id);

    let mut job_state = Job::new(args.ranks);
    for rank in 0..args.ranks {
        let bind_ip = match &topology {
            Some(t) => t.rank_ip(rank).to_string(),
            None => "127.0.0.1".to_owned(),
        };
        let mut cmd = match &topology {
            Some(t) => {
                let mut c = Command::new(t.ip());
                c.args(["netns", "exec", &t.rank_ns(rank)]);
                c.arg(&program);
                c
            }
            None => Command::new(&program),
        };
        cmd.args(&args.command[1..])
            .env("NICMSG_RANK", rank.to_string())
            .env("NICMSG_SIZE", args.ranks.to_string())
            // Every rank of the job runs on this machine (with `--netns` too).
            .env("NICMSG_LOCAL_RANKS", args.ranks.to_string())
            .env("NICMSG_JOB", job.to_string())
            .env("NICMSG_BOOTSTRAP", bootstrap.to_string())
            .env("NICMSG_BIND_IP", bind_ip);
        if let Some(engine) = engine {
            cmd.env("NICMSG_ENGINE", engine.as_env());
        }
        if let Some(mtu) = args.mtu {
            cmd.env("NICMSG_MTU", mtu.to_string());
        }
        match job_state.spawn(rank, cmd) {
            Ok(()) => {}
            Err(source) => {
                job_state.kill_everything();
                job_state.reap();
                if let Some(t) = topology.as_mut() {
                    report_cleanup(t);
                }
                return Err(LaunchError::Spawn {
                    rank,
                    program: program.to_string_lossy().into_owned(),
                    source,
                });
            }
        }
    }

    let outcome = job_state.supervise(args.timeout);
    job_state.kill_everything();
    job_state.reap();
    job_state.drain_output(Duration::from_secs(2));
    if let Some(t) = topology.as_mut() {
        report_cleanup(t);
    }
    let _ = io::stdout().flush();
    outcome
}

fn report_cleanup(t: &mut Topology) {
    for problem in t.cleanup() {
        eprintln!("nicmsg run: warning: cleanup: {problem}");
    }
}

/// The running ranks.
struct Job {
    size: u32,
    children: Vec<Child>,
    /// Exit status per rank, once it has ended.
    status: Vec<Option<RankStatus>>,
    /// Number of output streams (0..=2) of each rank that reached their end.
    streams_done: Vec<u8>,
    done_tx: mpsc::Sender<u32>,
    done_rx: Receiver<u32>,
}

impl Job {
    fn new(size: u32) -> Job {
        let (done_tx, done_rx) = mpsc::channel();
        Job {
            size,
            children: Vec::with_capacity(size as usize),
            status: Vec::with_capacity(size as usize),
            streams_done: Vec::with_capacity(size as usize),
            done_tx,
            done_rx,
        }
    }

    fn spawn(&mut self, rank: u32, mut cmd: Command) -> io::Result<()> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Each rank leads its own process group, so that stopping a rank also stops what it
            // started (a shell's children), and a terminal's Ctrl-C reaches only the launcher,
            // which then stops the ranks in order.
            .process_group(0);
        // SAFETY: getpid has no preconditions.
        let launcher = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the child between fork and exec, where a multi-threaded
        // parent allows only async-signal-safe calls: prctl and getppid are, and it allocates
        // nothing (an OS error is a number; a message would be a heap allocation).
        unsafe {
            cmd.pre_exec(move || {
                // If the launcher dies without cleaning up (SIGKILL), its ranks die too.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != launcher {
                    // The launcher is gone: nobody reads this error.
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let prefix = format!("[rank {rank}] ");
        let (tx_out, tx_err) = (self.done_tx.clone(), self.done_tx.clone());
        output::forward(
            child.stdout.take().expect("piped"),
            Stream::Stdout,
            prefix.clone(),
            move || {
                let _ = tx_out.send(rank);
            },
        );
        output::forward(
            child.stderr.take().expect("piped"),
            Stream::Stderr,
            prefix,
            move || {
                let _ = tx_err.send(rank);
            },
        );
        self.children.push(child);
        self.status.push(None);
        self.streams_done.push(0);
        Ok(())
    }

    fn running(&self) -> Vec<u32> {
        (0..self.children.len() as u32)
            .filter(|&r| self.status[r as usize].is_none())
            .collect()
    }

    /// Sends `sig` to the process groups of the ranks still running.
    fn signal_running(&self, sig: i32) {
        for r in self.running() {
            signal_group(&self.children[r as usize], sig);
        }
    }

    /// SIGKILL to every rank's process group, also of ranks that ended (what they left
    /// behind). The ranks are not reaped yet, so their process group ids are still theirs.
    fn kill_everything(&self) {
        for c in &self.children {
            signal_group(c, libc::SIGKILL);
        }
    }

    fn reap(&mut self) {
        for c in &mut self.children {
            let _ = c.wait();
        }
    }

    fn collect_done_streams(&mut self) {
        while let Ok(rank) = self.done_rx.try_recv() {
            self.streams_done[rank as usize] += 1;
        }
    }

    /// Waits (at most `limit`) for the output of every rank to be forwarded.
    fn drain_output(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            self.collect_done_streams();
            if self.streams_done.iter().all(|&d| d >= 2) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            if let Ok(rank) = self.done_rx.recv_timeout(left) {
                self.streams_done[rank as usize] += 1;
            }
        }
    }

    /// Waits (at most `limit`) for rank `rank`'s output to be forwarded, so that a report about
    /// the rank comes after its last words.
    fn drain_rank(&mut self, rank: u32, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.streams_done[rank as usize] < 2 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.done_rx.recv_timeout(left) {
                Ok(r) => self.streams_done[r as usize] += 1,
                Err(_) => return,
            }
        }
    }

    /// The main loop: until every rank has ended.
    fn supervise(&mut self, timeout: Option<Duration>) -> Result<Outcome, LaunchError> {
        let start = Instant::now();
        let mut outcome: Option<Outcome> = None;
        // When SIGTERM went to the remaining ranks.
        let mut stopping_since: Option<Instant> = None;
        let mut killed = false;

        loop {
            // Collect endings.
            for rank in 0..self.size {
                if self.status[rank as usize].is_some() {
                    continue;
                }
                let status = poll_exit(&self.children[rank as usize])
                    .map_err(|source| LaunchError::Wait { rank, source })?;
                let Some(status) = status else { continue };
                self.status[rank as usize] = Some(status);
                if !status.success() && outcome.is_none() {
                    self.collect_done_streams();
                    self.drain_rank(rank, Duration::from_millis(200));
                    let others = self.running();
                    if others.is_empty() {
                        eprintln!("nicmsg run: rank {rank} {status}");
                    } else {
                        eprintln!("nicmsg run: rank {rank} {status}; stopping the other ranks");
                    }
                    outcome = Some(Outcome::RankFailed { rank, status });
                }
            }
            self.collect_done_streams();
            let running = self.running();
            if running.is_empty() {
                break;
            }

            // Start stopping: a failure above, a signal, or the timeout.
            if let Some(sig) = signals::take() {
                if stopping_since.is_some() {
                    if !killed {
                        eprintln!(
                            "nicmsg run: got {} while stopping; killing the ranks",
                            signals::name(sig)
                        );
                        self.signal_running(libc::SIGKILL);
                        killed = true;
                    }
                } else {
                    eprintln!("nicmsg run: got {}; stopping all ranks", signals::name(sig));
                    if outcome.is_none() {
                        outcome = Some(Outcome::Interrupted(sig));
                    }
                }
            }
            if let Some(t) = timeout {
                if outcome.is_none() && start.elapsed() >= t {
                    eprintln!(
                        "nicmsg run: timed out after {}; stopping all ranks ({} still running)",
                        fmt_duration(t),
                        rank_list(&running)
                    );
                    outcome = Some(Outcome::TimedOut(t));
                }
            }
            if outcome.is_some() && stopping_since.is_none() {
                self.signal_running(libc::SIGTERM);
                stopping_since = Some(Instant::now());
            }
            if let Some(since) = stopping_since {
                if !killed && since.elapsed() >= GRACE {
                    eprintln!(
                        "nicmsg run: {} did not stop within {}s of SIGTERM; sending SIGKILL",
                        rank_list(&running),
                        GRACE.as_secs()
                    );
                    self.signal_running(libc::SIGKILL);
                    killed = true;
                }
            }
            thread::sleep(POLL);
        }
        Ok(outcome.unwrap_or(Outcome::Success))
    }
}

/// "rank 3" or "ranks 0, 2, 5".
fn rank_list(ranks: &[u32]) -> String {
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match list.len() {
        1 => format!("rank {}", list[0]),
        n if n <= 10 => format!("ranks {}", list.join(", ")),
        n => format!("{n} ranks"),
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

fn signal_group(child: &Child, sig: i32) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: plain kill(2) on the rank's process group (pgid = its pid, set at spawn).
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

/// Whether `child` has ended, without reaping it (`WNOWAIT`): an unreaped rank keeps its pid and
/// so its process group id, which the launcher still signals afterwards.
fn poll_exit(child: &Child) -> io::Result<Option<RankStatus>> {
    // SAFETY: siginfo_t is plain C data, for which all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into `info`, a valid siginfo_t of ours; WNOWAIT leaves the
    // rank unreaped, as this function promises.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(e);
    }
    // SAFETY: waitid filled in a SIGCHLD siginfo (or left it zeroed: no child ended).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(match info.si_code {
        libc::CLD_EXITED => Some(RankStatus::Exited(status)),
        libc::CLD_KILLED => Some(RankStatus::Signaled {
            signal: status,
            core_dumped: false,
        }),
        libc::CLD_DUMPED => Some(RankStatus::Signaled {
            signal: status,
            core_dumped: true,
        }),
        _ => None,
    })
}

/// A loopback port free right now, for rank 0's bootstrap service.
fn free_loopback_port() -> io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// A random non-zero job id.
fn random_job_id() -> u32 {
    let mut bytes = [0u8; 4];
    let from_urandom = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    let id = if from_urandom {
        u32::from_ne_bytes(bytes)
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
            .unwrap_or(0);
        nanos ^ std::process::id().rotate_left(16)
    };
    id.max(1)
}

/// Where `program` would be run from: itself when it contains a `/`, else the first executable
/// file of that name in a directory of `PATH` (as execvp and the shell look). Otherwise says
/// why it cannot run: nothing of that name, a directory, or a file without execute permission
/// (for a name looked up in `PATH`: the first such match, if no executable one follows).
fn resolve_program(program: &Path) -> Result<PathBuf, LaunchError> {
    let shown = |p: &Path| p.to_string_lossy().into_owned();
    let unusable = |p: &Path| -> Option<LaunchError> {
        let metadata = p.metadata().ok()?;
        Some(if metadata.is_dir() {
            LaunchError::IsDirectory(shown(p))
        } else if !metadata.is_file() || !may_execute(p) {
            LaunchError::NotExecutable(shown(p))
        } else {
            return None;
        })
    };
    let not_found = || LaunchError::NotFound(shown(program));
    if program.as_os_str().is_empty() {
        return Err(not_found());
    }
    if program.to_string_lossy().contains('/') {
        if !program.exists() {
            return Err(not_found());
        }
        return match unusable(program) {
            Some(problem) => Err(problem),
            None => Ok(program.to_path_buf()),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut first_problem = None;
    for candidate in std::env::split_paths(&path).map(|d| d.join(program)) {
        if !candidate.exists() {
            continue;
        }
        match unusable(&candidate) {
            None => return Ok(candidate),
            Some(problem) => {
                first_problem.get_or_insert(problem);
            }
        }
    }
    Err(first_problem.unwrap_or_else(not_found))
}

/// Whether this process may execute `path` (`access(X_OK)`: the permission bits for this
/// user; root needs one execute bit).
fn may_execute(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads the NUL-terminated path we pass.
    unsafe { libc::access(c_path.as_ptr(), libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(RankStatus::Exited(3).to_string(), "exited with status 3");
        assert_eq!(
            RankStatus::Signaled {
                signal: 9,
                core_dumped: false
            }
            .to_string(),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            RankStatus::Signaled {
                signal: 11,
                core_dumped: true
            }
            .to_string(),
            "killed by signal 11 (SIGSEGV, core dumped)"
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Outcome::Success.exit_code(), 0);
        let failed = |status| Outcome::RankFailed { rank: 1, status };
        assert_eq!(failed(RankStatus::Exited(3)).exit_code(), 3);
        assert_eq!(failed(RankStatus::Exited(-1)).exit_code(), 1);
        assert_eq!(
            failed(RankStatus::Signaled {
                signal: 9,
                core_dumped: false
            })
            .exit_code(),
            137
        );
        assert_eq!(Outcome::TimedOut(Duration::from_secs(1)).exit_code(), 124);
        assert_eq!(Outcome::Interrupted(libc::SIGINT).exit_code(), 130);
    }

    #[test]
    fn lists() {
        assert_eq!(rank_list(&[3]), "rank 3");
        assert_eq!(rank_list(&[0, 2]), "ranks 0, 2");
        assert_eq!(rank_list(&(0..20).collect::<Vec<_>>()), "20 ranks");
        assert_eq!(fmt_duration(Duration::from_secs(5)), "5s");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.500s");
    }

    #[test]
    fn programs_resolve() {
        assert!(resolve_program(Path::new("sh")).is_ok());
        assert!(resolve_program(Path::new("/bin/sh")).is_ok());
        let message = |p: &str| resolve_program(Path::new(p)).unwrap_err().to_string();
        assert_eq!(
            message("no-such-program-nicmsg"),
            "no-such-program-nicmsg: command not found"
        );
        assert_eq!(message("./no/such"), "./no/such: command not found");
        assert_eq!(message(""), ": command not found");
        assert_eq!(message("/"), "/ is a directory");
        let plain = std::env::temp_dir().join(format!("nicmsg-plain-{}", std::process::id()));
        std::fs::write(&plain, "echo hi\n").unwrap();
        let shown = plain.to_string_lossy().into_owned();
        let result = message(&shown);
        std::fs::remove_file(&plain).unwrap();
        assert_eq!(result, format!("{shown} is not executable (chmod +x?)"));
    }

    #[test]
    fn the_engine_thread_counts_where_it_runs() {
        assert!(engine_thread_per_rank(Some(Engine::Thread)));
        assert!(!engine_thread_per_rank(Some(Engine::Inline)));
    }
}

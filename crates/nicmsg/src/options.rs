//! Options of a communicator, with defaults and `NICMSG_*` environment overrides: one table of
//! settings ([`SETTINGS`]) parses them and renders their documentation.

use crate::Error;
use nicmsg_engine::{IdleConfig, StandbyCpu, Transport};
use nicmsg_proto::{Config, UnexpectedPolicy, MAX_ACK_UNIT, RX_TRACKED_FRAMES};

/// Which transport carries the frames (`NICMSG_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChoice {
    /// AF_XDP where the rank's address is on an Ethernet interface the library may attach its
    /// program to (root, one rank per address), UDP otherwise.
    Auto,
    /// The kernel's UDP sockets.
    Udp,
    /// AF_XDP, or fail to start.
    Xdp,
}

/// Where protocol work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineMode {
    /// Inside the application's test/wait/progress calls.
    Inline,
    /// On a dedicated engine thread: messages progress while the application computes.
    Thread,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub engine: EngineMode,
    /// Choose `engine` from the CPUs this process may run on when the communicator starts (see
    /// [`Options::engine_to_run`]): true in options read from the environment while
    /// `NICMSG_ENGINE` is unset or `auto`; false in `Options::default()`, whose caller names
    /// the engine.
    pub engine_auto: bool,
    pub transport: TransportChoice,
    pub protocol: Config,
    /// Choose `protocol.eager_limit` from the job's size when the communicator starts (see
    /// [`eager_limit_for`]); false once `NICMSG_EAGER_LIMIT` sets it.
    pub eager_limit_auto: bool,
    /// The watchdog as it is when `NICMSG_WATCHDOG` is not given: on at
    /// [`DEFAULT_WATCHDOG_S`] for a job's communicators and the provider's endpoints, off for
    /// datagram sockets (a server's receive waits for ever by design); false once it is given.
    pub watchdog_auto: bool,
    /// Size frames to loopback's MTU when an open endpoint binds a loopback address (see
    /// [`Options::size_frames_for`]); false once `NICMSG_MTU` sets it.
    pub mtu_auto: bool,
    /// Descriptor table slots (EMP: 640).
    pub slots: usize,
    /// Datagram sockets: peers kept at once (`crate::dgram::DEFAULT_PEERS`).
    pub dgram_peers: u32,
    /// Registered memory regions.
    pub regions: usize,
    pub idle: IdleConfig,
    /// Host-side spinning in a wait before blocking.
    pub wait_spin_ns: u64,
    /// How long to wait for the bootstrap exchange.
    pub bootstrap_timeout: std::time::Duration,
    /// Print counters per peer when the communicator ends (`NICMSG_STATS=1`).
    pub print_stats: bool,
    /// Speculative header/payload split on receive (`NICMSG_PLACEMENT=0` turns it off).
    pub placement: bool,
    /// Every frame's checksum covers its payload, also where the link checks it
    /// (`NICMSG_PAYLOAD_CRC=1`): an end-to-end check that costs a CRC32C of every byte.
    pub payload_crc: bool,
    /// PANIC: whether the engine runs programs (`NICMSG_PROGRAMS`).
    pub programs: bool,
    /// PANIC: whether other ranks may load, unload and start programs here
    /// (`NICMSG_PROGRAMS_REMOTE`).
    pub programs_remote: bool,
    /// PANIC: instructions one activation of a program may execute (`NICMSG_PROGRAM_BUDGET`).
    pub program_budget: u32,
    /// UDP segmentation offload for runs of frames to one peer (`NICMSG_GSO=0` turns it off).
    pub gso: bool,
    /// UDP receive coalescing (`NICMSG_GRO=0` turns it off).
    pub gro: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            engine: EngineMode::Thread,
            engine_auto: false,
            transport: TransportChoice::Auto,
            protocol: Config::default(),
            eager_limit_auto: true,
            mtu_auto: true,
            slots: nicmsg_engine::DEFAULT_SLOTS,
            dgram_peers: crate::dgram::DEFAULT_PEERS,
            regions: nicmsg_engine::DEFAULT_REGIONS,
            idle: IdleConfig {
                watchdog_ns: Some((DEFAULT_WATCHDOG_S * 1e9) as u64),
                ..IdleConfig::default()
            },
            watchdog_auto: true,
            wait_spin_ns: 50_000,
            bootstrap_timeout: std::time::Duration::from_secs(60),
            print_stats: false,
            placement: true,
            payload_crc: false,
            programs: true,
            programs_remote: true,
            program_budget: nicmsg_vm::limits::DEFAULT_BUDGET,
            gso: true,
            gro: true,
        }
    }
}

/// Variables in which launchers give the number of the job's ranks on this host: `nicmsg
/// run`'s, Open MPI's and MPICH's (Hydra).
const LOCAL_RANKS_VARIABLES: [&str; 3] = [
    "NICMSG_LOCAL_RANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
];

/// The ranks taken to share the host when no launcher says how many do: the smallest job that
/// exchanges messages on one host is two processes (a ping-pong, a client and its server:
/// `fi_pingpong`, the datagram examples). Counting such a process alone put an engine thread
/// beside each of two applications on a two-CPU host, four busy threads on two CPUs:
/// `fi_pingpong -p nicmsg` took 18.9 us a message against 3.2-3.7 us inline. Where the guess is
/// wrong (one process on the host), inline costs little: its standby answers while the
/// application computes.
pub const UNLAUNCHED_LOCAL_RANKS: usize = 2;

/// The CPUs the process may run on and how many ranks of the job share them, as the
/// automatic engine choice sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuShare {
    /// CPUs in this process's affinity mask.
    pub usable: usize,
    /// CPUs online on the host.
    pub online: usize,
    /// The job's ranks on this host ([`UNLAUNCHED_LOCAL_RANKS`] if no launcher said).
    pub local_ranks: usize,
}

impl CpuShare {
    /// This process, as the kernel and the launcher describe it.
    pub fn of_this_process() -> Self {
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: sysconf reads a system value and has no other effect.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let local_ranks = LOCAL_RANKS_VARIABLES
            .iter()
            .find_map(|name| std::env::var(name).ok()?.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(UNLAUNCHED_LOCAL_RANKS);
        Self {
            usable,
            online: usize::try_from(online).unwrap_or(usable).max(usable),
            local_ranks,
        }
    }

    /// Whether an engine thread gets a CPU beside the application thread: a process bound to
    /// fewer CPUs than the host has keeps them to itself; an unbound one shares them with the
    /// job's other ranks on the host.
    pub fn has_room_for_engine_threads(&self) -> bool {
        let sharing = if self.usable < self.online {
            1
        } else {
            self.local_ranks
        };
        self.usable >= 2 * sharing
    }

    /// Where the inline engine's standby thread runs: on the application's own core where a
    /// launcher bound the process to one CPU of several (`mpirun` binds each rank to a core),
    /// so it takes over late; elsewhere the scheduler may run it on any CPU, and where ranks
    /// outnumber cores without being bound (`nicmsg run -n 8` on 2 cores) its quick answers
    /// for a rank the scheduler set aside are what keep that rank's peers going: there a
    /// standby that waited 5 ms left peers unanswered until they declared the rank unreachable
    /// (the stress test's probe phase, 8 ranks). A host of one CPU keeps the 50 us for the same
    /// reason: its ranks, if several, share it unbound. `usable` counts a container's CPU
    /// quota too (`available_parallelism`), so an unbound rank held to one CPU by its quota
    /// gets the late standby, as a bound one.
    pub fn standby_cpu(&self) -> StandbyCpu {
        if self.usable == 1 && self.usable < self.online {
            StandbyCpu::Shared
        } else {
            StandbyCpu::Own
        }
    }
}

impl Options {
    /// The engine mode to start: `engine` as `NICMSG_ENGINE` set it, or, left to choose, the
    /// thread only where it has a CPU of its own (an engine thread sharing its application's
    /// CPU costs every message a scheduler hand-over: 18 us a half round trip under Open MPI
    /// with each rank bound to a core, against 3.3 us inline).
    /// `cpus` is asked only when the choice is left to the library.
    pub fn engine_to_run(&self, cpus: impl FnOnce() -> CpuShare) -> EngineMode {
        if !self.engine_auto || cpus().has_room_for_engine_threads() {
            self.engine
        } else {
            EngineMode::Inline
        }
    }

    /// Defaults overridden by the `NICMSG_*` variables of the environment: see [`SETTINGS`]
    /// (and the table in `docs/runtime.md`, rendered from it).
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Defaults overridden by the settings `lookup` gives (a variable's name to its value,
    /// `None` when unset). Every row of [`SETTINGS`] is read; a value outside what the row
    /// accepts is refused with [`Error::Config`] naming the variable, the value and what is
    /// accepted. An empty value (or only whitespace) counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        // Unset, `NICMSG_ENGINE` means `auto`; options built in code name their engine.
        let mut options = Self {
            engine_auto: true,
            ..Self::default()
        };
        for setting in SETTINGS {
            let Some(raw) = lookup(setting.name) else {
                continue;
            };
            let text = raw.trim();
            if text.is_empty() {
                continue;
            }
            let value = setting.values.parse(text).ok_or_else(|| {
                Error::Config(format!(
                    "{}={raw}: expected {}",
                    setting.name,
                    setting.values.expected()
                ))
            })?;
            (setting.apply)(&mut options, value);
        }
        let (window, pre) = (
            options.protocol.cts_window_frames,
            options.protocol.rsm_pre_frames,
        );
        if pre >= window {
            return Err(Error::Config(format!(
                "NICMSG_RSM_PRE={pre} must be below NICMSG_CTS_WINDOW={window} (the RSM flag \
                 goes on a frame of the window{})",
                if lookup_set(&lookup, "NICMSG_CTS_WINDOW") {
                    ""
                } else {
                    "; NICMSG_CTS_WINDOW is unset: that is its default"
                }
            )));
        }
        options
            .protocol
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(options)
    }

    /// Sizes frames for an open endpoint bound at `bind`, unless `NICMSG_MTU` did: on a
    /// loopback address every peer is on this host and loopback's MTU is 64 KiB, so frames are
    /// as large as one IPv4 UDP datagram (65507 bytes) instead of an Ethernet MTU's 1472. A 4 KiB
    /// message is then one frame, not three; TCP and UCX use loopback's large segments the same
    /// way. All endpoints on loopback choose alike, so each takes the others' frames. A job's
    /// ranks (launched by nicmsg) keep 1500, the MTU the papers' measurements use.
    pub fn size_frames_for(&mut self, bind: std::net::SocketAddr) {
        if self.mtu_auto && bind.ip().is_loopback() {
            self.protocol.mtu = frame_for_mtu(MTU_MAX);
        }
    }

    /// Checks what depends on the job's size, once it is known (the communicator does this
    /// before it allocates anything): the eager pool, `size` x credits per peer x eager limit
    /// bytes, must stay within [`EAGER_POOL_MAX_BYTES`].
    pub fn check_for_job(&self, size: u32) -> Result<(), Error> {
        let credits = u64::from(self.protocol.eager_credits_per_peer.max(1));
        let limit = self.protocol.eager_limit;
        let ranks = u64::from(size.max(1));
        let pool = u128::from(ranks) * u128::from(credits) * u128::from(limit);
        if pool <= u128::from(EAGER_POOL_MAX_BYTES) {
            return Ok(());
        }
        let fitting = EAGER_POOL_MAX_BYTES / (ranks * credits);
        let pool_text = format!(
            "{ranks} ranks x {credits} credits x {limit} bytes = {}",
            bytes_text(pool)
        );
        let budget = bytes_text(u128::from(EAGER_POOL_MAX_BYTES));
        Err(Error::Config(if self.eager_limit_auto {
            format!(
                "the eager pool of a job of {ranks} ranks at the smallest default eager limit \
                 ({pool_text}) exceeds the {budget} a rank may set aside for unexpected eager \
                 messages; set NICMSG_EAGER_LIMIT to at most {fitting}"
            )
        } else {
            format!(
                "NICMSG_EAGER_LIMIT={limit}: the eager pool (one buffer of the eager limit per \
                 credit per peer: {pool_text}) exceeds the {budget} a rank may set aside for \
                 unexpected eager messages; with {ranks} ranks NICMSG_EAGER_LIMIT may be at \
                 most {fitting}"
            )
        }))
    }
}

fn lookup_set(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> bool {
    lookup(name).is_some_and(|value| !value.trim().is_empty())
}

/// `1536 bytes`, `16 MiB`, `2.5 GiB`.
fn bytes_text(bytes: u128) -> String {
    const UNITS: [(&str, u128); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return if bytes.is_multiple_of(size) {
                format!("{} {unit}", bytes / size)
            } else {
                format!("{value:.2} {unit}")
            };
        }
    }
    format!("{bytes} bytes")
}

impl Options {
    /// Sizes the protocol's operation tables from the descriptor table: every operation the
    /// descriptor table accepts then finds room in the protocol core, so an operation is never
    /// accepted and failed later for want of room (`TABLE_FULL` comes from the post itself).
    /// Sends also keep room for the short sends completed early, which the host no longer sees.
    pub fn size_protocol_tables(&mut self) {
        self.protocol.max_recvs = self.slots;
        self.protocol.max_sends = self.slots + self.protocol.max_early_sends;
    }

    /// The protocol configuration for an endpoint on `transport`: frames leave their payload
    /// out of their checksum where the transport's link verifies it, unless
    /// `NICMSG_PAYLOAD_CRC` asks for the end-to-end check.
    pub fn protocol_for(&self, transport: &dyn Transport) -> Config {
        Config {
            link_checks_payload: transport.checks_payload() && !self.payload_crc,
            ..self.protocol.clone()
        }
    }
}

/// Memory every rank sets aside for unexpected eager messages (its eager pool: one buffer of
/// the eager limit per credit per peer), which the default eager limit is chosen to fit.
pub const EAGER_POOL_BUDGET_BYTES: u64 = 16 << 20;
/// Memory every rank sets aside for unexpected messages of at most 256 bytes (one buffer of
/// 256 bytes per small credit per peer, `nicmsg_proto::SMALL_MESSAGE_MAX`): the protocol's 32
/// credits up to 2,048 ranks, fewer in larger jobs ([`small_credits_for`]).
pub const SMALL_POOL_BUDGET_BYTES: u64 = 16 << 20;
/// Memory every rank sets aside for unexpected messages of 257 bytes to 4 KiB (one buffer of
/// 4 KiB per medium credit per peer, `nicmsg_proto::MEDIUM_MESSAGE_MAX`): the protocol's 32
/// credits up to 256 ranks, fewer in larger jobs ([`medium_credits_for`]). Pages are touched
/// only as messages fill them.
pub const MEDIUM_POOL_BUDGET_BYTES: u64 = 32 << 20;
/// Largest default eager limit: messages up to 64 KiB go out at once, without the rendezvous
/// handshake's round trip (16 KiB ping-pong over netns: about 100 -> 50 us), in jobs small
/// enough that the pool stays within [`EAGER_POOL_BUDGET_BYTES`] (32 ranks at 8 credits).
pub const MAX_DEFAULT_EAGER_LIMIT: u64 = 64 << 10;

/// The eager limit for a job of `size` ranks giving `credits` buffers per peer: the largest
/// power of two whose pool fits the budget, between the protocol's default (8 KiB) and
/// [`MAX_DEFAULT_EAGER_LIMIT`]. Every rank of a job computes the same limit, as the protocol
/// requires (a receiver refuses eager messages above its own limit).
pub fn eager_limit_for(size: u32, credits: u32) -> u64 {
    let floor = Config::default().eager_limit;
    let per_buffer = EAGER_POOL_BUDGET_BYTES / (u64::from(size.max(1)) * u64::from(credits.max(1)));
    let fitting = if per_buffer == 0 {
        0
    } else {
        1 << per_buffer.ilog2()
    };
    fitting.clamp(floor, MAX_DEFAULT_EAGER_LIMIT)
}

/// The small credits per peer for a job of `size` ranks: `wanted`, or as many as fit
/// [`SMALL_POOL_BUDGET_BYTES`], at least one. Every rank of a job computes the same, as the
/// protocol requires.
pub fn small_credits_for(size: u32, wanted: u32) -> u32 {
    credits_within(
        size,
        wanted,
        nicmsg_proto::SMALL_MESSAGE_MAX,
        SMALL_POOL_BUDGET_BYTES,
    )
}

/// The medium credits per peer for a job of `size` ranks: `wanted`, or as many as fit
/// [`MEDIUM_POOL_BUDGET_BYTES`], at least one. Every rank of a job computes the same.
pub fn medium_credits_for(size: u32, wanted: u32) -> u32 {
    credits_within(
        size,
        wanted,
        nicmsg_proto::MEDIUM_MESSAGE_MAX,
        MEDIUM_POOL_BUDGET_BYTES,
    )
}

/// `wanted` buffers of `buffer_len` bytes per rank of a job of `size`, or as many as fit
/// `budget`, at least one.
fn credits_within(size: u32, wanted: u32, buffer_len: u64, budget: u64) -> u32 {
    let per_rank = u64::from(size.max(1)) * buffer_len;
    let fitting = budget / per_rank;
    fitting.min(u64::from(wanted)).max(1) as u32
}

// ---------------------------------------------------------------------------------------------
// The settings: one row each, read by `Options::from_lookup` and rendered into the table of
// `docs/runtime.md` (`settings_markdown`; a test keeps the two equal). A new setting is a new
// row: its name, what it accepts (with the reason for each bound next to the constant), its
// default and meaning as the docs say them, and what it changes.

/// `NICMSG_MTU` at least 576 bytes: the smallest datagram every IPv4 host must accept (RFC 791);
/// below it a frame (80 bytes of headers) would carry under 468 bytes of data and every message
/// would cost more frames than headers are worth. Frames must also hold the protocol's headers
/// and 8 bytes (`Config::validate`, `MtuTooSmall`), which any MTU from 116 up does.
pub const MTU_MIN: u64 = 576;
/// `NICMSG_MTU` at most 65535 bytes: the largest IPv4 packet (its total length is 16 bits). The
/// UDP transport takes datagrams up to 65507 bytes (`nicmsg_udp::MAX_UDP_PAYLOAD_V4`), which is
/// what 65535 gives; AF_XDP is used only for frames of at most 3840 bytes and falls back to UDP
/// above that. Loopback's MTU of 65536 gives nothing more than 65535.
pub const MTU_MAX: u64 = 65535;

/// The largest frame on a link of MTU `mtu`: one IPv4 UDP datagram.
fn frame_for_mtu(mtu: u64) -> u32 {
    nicmsg_udp::max_datagram_for_mtu(mtu as usize, false) as u32
}
/// `NICMSG_EAGER_LIMIT` at most 1 MiB: above it the rendezvous handshake's round trip (tens of
/// microseconds) is a few percent of the transfer at most, while every credit of every peer
/// reserves a buffer of the eager limit in each receiving rank (see [`EAGER_POOL_MAX_BYTES`]).
/// 0 is allowed: every message with data then takes the rendezvous handshake.
pub const EAGER_LIMIT_MAX: u64 = 1 << 20;
/// Most memory a rank may set aside for unexpected eager messages: job size x credits per peer
/// (8) x eager limit, allocated when the communicator starts. Checked once the job's size is
/// known ([`Options::check_for_job`]): 1 GiB is 128 ranks at the largest eager limit, 16384
/// at the smallest default one; a larger pool would be refused by the allocator (an abort) or
/// take the memory the application needs.
pub const EAGER_POOL_MAX_BYTES: u64 = 1 << 30;
/// `NICMSG_SLOTS` at least 16: the library's own barrier holds 2 slots, and a program needs a
/// few more for the operations it keeps outstanding (0 made every operation fail with
/// TABLE_FULL).
pub const SLOTS_MIN: u64 = 16;
/// `NICMSG_SLOTS` at most 16384: each slot costs about 540 bytes allocated when the
/// communicator starts (a 512-byte descriptor, its submission ring entries, the engine's
/// record of its operation, the free list), 8.4 MiB at the maximum, and every outstanding
/// operation also needs an entry in the protocol core's tables (256 sends and 256 receives by
/// default), so more slots than that only fail later. 100,000,000 slots was an abort.
pub const SLOTS_MAX: u64 = 16384;
/// `NICMSG_CTS_WINDOW` at most what a receiver tracks beyond its first missing frame
/// (`RX_TRACKED_FRAMES`, 512): a larger grant is cut to that anyway.
pub const CTS_WINDOW_MAX: u64 = RX_TRACKED_FRAMES as u64;
/// `NICMSG_SPIN_US` and `NICMSG_IDLE_POLL_US` at most 1 s: spinning longer only burns the core,
/// and an idle engine sleeping longer leaves an operation posted meanwhile waiting that long.
pub const IDLE_US_MAX: u64 = 1_000_000;
/// A program's budget: at least enough for a loop over a 4 KiB message word by word, at most
/// about a second of interpretation (a longer activation would stall the engine's messaging).
pub const PROGRAM_BUDGET_MIN: u64 = 1_000;
pub const PROGRAM_BUDGET_MAX: u64 = 100_000_000;
/// `NICMSG_WATCHDOG` at least 1 s: the engine looks at pending operations once a second, so a
/// shorter threshold reports no sooner, and reports operations that are merely in flight.
pub const WATCHDOG_MIN_S: f64 = 1.0;
/// `NICMSG_WATCHDOG` at most a day: longer is the same as off.
pub const WATCHDOG_MAX_S: f64 = 86_400.0;
/// The watchdog's threshold unless `NICMSG_WATCHDOG` says otherwise: a hang explains itself
/// without being asked (a job that hangs with nothing on its terminal is what users of other
/// libraries complain of), and an operation of a healthy program rarely waits a minute. Each
/// operation is reported again at twice its age at the last report, so one that waits an hour
/// for a good reason is named six times.
pub const DEFAULT_WATCHDOG_S: f64 = 60.0;
/// `NICMSG_PEER_TIMEOUT` at least 1 s: a live peer's engine answers within milliseconds, but a
/// loaded machine may deschedule it for a good part of a second.
pub const PEER_TIMEOUT_MIN_S: f64 = 1.0;
/// `NICMSG_PEER_TIMEOUT` at most a day: a job whose peers may be silent longer has no use for
/// failure detection.
pub const PEER_TIMEOUT_MAX_S: f64 = 86_400.0;

/// `NICMSG_BOOTSTRAP_TIMEOUT` at least 1 s: ranks of a job start within milliseconds to seconds
/// of each other, and rank 0 may start last.
pub const BOOTSTRAP_TIMEOUT_MIN_S: f64 = 1.0;
/// `NICMSG_BOOTSTRAP_TIMEOUT` at most a day: a batch system that starts ranks further apart
/// than that has lost one.
pub const BOOTSTRAP_TIMEOUT_MAX_S: f64 = 86_400.0;

/// One `NICMSG_*` setting.
pub struct Setting {
    pub name: &'static str,
    pub values: Values,
    /// The value when unset, as the docs say it.
    pub default: &'static str,
    /// What it changes, as the docs say it.
    pub meaning: &'static str,
    apply: fn(&mut Options, Value),
}

/// What a setting accepts. Surrounding whitespace is ignored; an empty value counts as unset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Values {
    /// On or off: `0`, `1`, `true`, `false`, `yes`, `no`, `on`, `off`, in any case.
    Switch,
    /// One of these words, in any case.
    Choice(&'static [&'static str]),
    /// A whole number in `min..=max`, counted in `unit`.
    Whole {
        min: u64,
        max: u64,
        unit: &'static str,
    },
    /// A number of seconds (decimals allowed) in `min..=max`.
    Seconds { min: f64, max: f64 },
    /// The same, or `off` (in any case): the value is then `Switch(false)`.
    SecondsOrOff { min: f64, max: f64 },
    /// A `tracing` filter: `info`, `debug`, `nicmsg_engine=debug`, `warn,nicmsg=info`.
    LogFilter,
}

/// A value as its setting accepted it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Switch(bool),
    /// The word as the setting spells it.
    Choice(&'static str),
    Whole(u64),
    Seconds(f64),
    /// Checked; read again where it is used (`NICMSG_LOG`, by the logging).
    Checked,
}

impl Values {
    /// The value `text` (trimmed, not empty) stands for, if accepted.
    pub fn parse(&self, text: &str) -> Option<Value> {
        let word_of = |words: &[&'static str]| {
            words
                .iter()
                .copied()
                .find(|word| word.eq_ignore_ascii_case(text))
        };
        match *self {
            Values::Switch => nicmsg_engine::switch::parse(text).map(Value::Switch),
            Values::Choice(words) => word_of(words).map(Value::Choice),
            Values::Whole { min, max, .. } => text
                .parse::<u64>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .map(Value::Whole),
            Values::Seconds { min, max } => text
                .parse::<f64>()
                .ok()
                .filter(|s| (min..=max).contains(s))
                .map(Value::Seconds),
            Values::SecondsOrOff { .. } if text.eq_ignore_ascii_case("off") => {
                Some(Value::Switch(false))
            }
            Values::SecondsOrOff { min, max } => Values::Seconds { min, max }.parse(text),
            Values::LogFilter => tracing_subscriber::EnvFilter::try_new(text)
                .ok()
                .map(|_| Value::Checked),
        }
    }

    /// What is accepted, as an error says it.
    pub fn expected(&self) -> String {
        match *self {
            Values::Switch => "0, 1, true, false, yes, no, on or off (in any case)".into(),
            Values::Choice(words) => {
                let (last, first) = words.split_last().expect("a choice has words");
                if first.is_empty() {
                    format!("{last} (in any case)")
                } else {
                    format!("{} or {last} (in any case)", first.join(", "))
                }
            }
            Values::Whole { min, max, unit } => {
                format!("a whole number of {unit} in {min}..={max}")
            }
            Values::Seconds { min, max } => format!("a number of seconds in {min}..={max}"),
            Values::SecondsOrOff { min, max } => {
                format!("a number of seconds in {min}..={max}, or off")
            }
            Values::LogFilter => "a log filter such as info, debug or nicmsg_engine=debug".into(),
        }
    }

    /// What is accepted, as the docs' table says it.
    fn documented(&self) -> String {
        match *self {
            Values::Switch => "switch".into(),
            Values::Choice(words) => words
                .iter()
                .map(|word| format!("`{word}`"))
                .collect::<Vec<_>>()
                .join(", "),
            Values::Whole { min, max, unit } => format!("{min}..={max} {unit}"),
            Values::Seconds { min, max } => format!("{min}..={max} seconds"),
            Values::SecondsOrOff { min, max } => format!("{min}..={max} seconds, `off`"),
            Values::LogFilter => "filter".into(),
        }
    }
}

impl Value {
    fn on(self) -> bool {
        match self {
            Value::Switch(on) => on,
            other => unreachable!("{other:?} is not a switch"),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Value::Choice(word) => word,
            other => unreachable!("{other:?} is not a word"),
        }
    }

    fn whole(self) -> u64 {
        match self {
            Value::Whole(n) => n,
            other => unreachable!("{other:?} is not a number"),
        }
    }

    fn seconds(self) -> f64 {
        match self {
            Value::Seconds(s) => s,
            other => unreachable!("{other:?} is not a number of seconds"),
        }
    }
}

/// Every `NICMSG_*` setting the library reads (the job's own variables, `NICMSG_RANK`,
/// `NICMSG_SIZE`, `NICMSG_JOB`, `NICMSG_BOOTSTRAP`, `NICMSG_BIND_IP`, are read by
/// `nicmsg_bootstrap`: `docs/launcher.md`).
pub static SETTINGS: &[Setting] = &[
    Setting {
        name: "NICMSG_ENGINE",
        values: Values::Choice(&["auto", "inline", "thread"]),
        default: "`auto`",
        meaning: "where protocol work runs: inside the application's calls (test, wait, ...) or \
                  on an engine thread of its own; `auto`: the thread where it gets a CPU of its \
                  own beside the application (the process may run on at least twice as many \
                  CPUs as the job's ranks on this host that share them), else inline (a rank \
                  that Open MPI bound to one core); `nicmsg run` passes `inline` when the ranks \
                  would need more cores than the machine has",
        apply: |o, v| {
            o.engine_auto = v.word() == "auto";
            o.engine = match v.word() {
                "inline" => EngineMode::Inline,
                _ => EngineMode::Thread,
            }
        },
    },
    Setting {
        name: "NICMSG_TRANSPORT",
        values: Values::Choice(&["auto", "udp", "xdp"]),
        default: "`auto`",
        meaning: "`auto`: AF_XDP where the rank's address is on an Ethernet interface of its own \
                  and the library may attach its program, UDP otherwise; `udp`: always UDP; \
                  `xdp`: AF_XDP or fail to start, saying why",
        apply: |o, v| {
            o.transport = match v.word() {
                "udp" => TransportChoice::Udp,
                "xdp" => TransportChoice::Xdp,
                _ => TransportChoice::Auto,
            }
        },
    },
    Setting {
        name: "NICMSG_MTU",
        values: Values::Whole {
            min: MTU_MIN,
            max: MTU_MAX,
            unit: "bytes",
        },
        default: "1500; 65535 for an open endpoint (libfabric provider, datagram socket) bound to a loopback address",
        meaning: "the link's MTU: a frame is at most one IPv4 UDP datagram of it, the MTU less \
                  28 bytes (1472 for 1500, 8972 for 9000, 65507 for 65535)",
        apply: |o, v| {
            o.protocol.mtu = frame_for_mtu(v.whole());
            o.mtu_auto = false;
        },
    },
    Setting {
        name: "NICMSG_EAGER_LIMIT",
        values: Values::Whole {
            min: 0,
            max: EAGER_LIMIT_MAX,
            unit: "bytes",
        },
        default: "by job size: 65536 up to 32 ranks, halving as the job grows, at least 8192; 8192 for an open endpoint, 262144 for the libfabric provider's",
        meaning: "messages up to this length go at once (eager), longer ones after the \
                  receiver's grant (rendezvous); the same on every rank. Each rank keeps 8 \
                  buffers of it per peer for unexpected messages, at most 1 GiB in all (checked \
                  when the job's size is known)",
        apply: |o, v| {
            o.protocol.eager_limit = v.whole();
            o.eager_limit_auto = false;
        },
    },
    Setting {
        name: "NICMSG_UNEXPECTED",
        values: Values::Choice(&["buffer", "drop"]),
        default: "`buffer`",
        meaning: "a message that arrives before its receive is posted: kept (short ones in the \
                  eager buffers, long ones as their header), or dropped and retransmitted once \
                  the receive is posted (EMP's no-buffering mode); the same on every rank",
        apply: |o, v| {
            o.protocol.unexpected = match v.word() {
                "drop" => UnexpectedPolicy::Drop,
                _ => UnexpectedPolicy::Buffer,
            }
        },
    },
    Setting {
        name: "NICMSG_CTS_WINDOW",
        values: Values::Whole {
            min: 1,
            max: CTS_WINDOW_MAX,
            unit: "frames",
        },
        default: "256",
        meaning: "frames of a long message one grant (CTS) lets the sender send; at most the \
                  512 frames a receiver tracks",
        apply: |o, v| o.protocol.cts_window_frames = v.whole() as u32,
    },
    Setting {
        name: "NICMSG_RSM_PRE",
        values: Values::Whole {
            min: 0,
            max: CTS_WINDOW_MAX - 1,
            unit: "frames",
        },
        default: "128",
        meaning: "frames before the end of a window at which the sender asks for the next \
                  grant (RMPP's Pre-k); below `NICMSG_CTS_WINDOW`",
        apply: |o, v| o.protocol.rsm_pre_frames = v.whole() as u32,
    },
    Setting {
        name: "NICMSG_ACK_UNIT",
        values: Values::Whole {
            min: 1,
            max: MAX_ACK_UNIT as u64,
            unit: "frames",
        },
        default: "3",
        meaning: "frames per acknowledged collection (EMP: 3); at most 8, which with 64 \
                  collections in flight is what a receiver tracks",
        apply: |o, v| o.protocol.ack_unit = v.whole() as u8,
    },
    Setting {
        name: "NICMSG_DGRAM_PEERS",
        values: Values::Whole {
            min: 1,
            max: nicmsg_proto::MAX_OPEN_PEERS as u64,
            unit: "peers",
        },
        default: "64",
        meaning: "datagram sockets: peers a socket keeps state for at once (each costs a few \
                  hundred bytes and a share of the eager pool); a quiet peer's slot is reused",
        apply: |o, v| o.dgram_peers = v.whole() as u32,
    },
    Setting {
        name: "NICMSG_SLOTS",
        values: Values::Whole {
            min: SLOTS_MIN,
            max: SLOTS_MAX,
            unit: "slots",
        },
        default: "640",
        meaning: "descriptor table slots: operations (sends, receives, probes) outstanding at \
                  once, the library's barrier included; about 540 bytes each",
        apply: |o, v| o.slots = v.whole() as usize,
    },
    Setting {
        name: "NICMSG_SPIN_US",
        values: Values::Whole {
            min: 0,
            max: IDLE_US_MAX,
            unit: "microseconds",
        },
        default: "50",
        meaning: "busy polling after the last work before the engine, and a waiting \
                  application, sleep",
        apply: |o, v| {
            o.idle.spin_ns = v.whole() * 1000;
            o.wait_spin_ns = v.whole() * 1000;
        },
    },
    Setting {
        name: "NICMSG_IDLE_POLL_US",
        values: Values::Whole {
            min: 1,
            max: IDLE_US_MAX,
            unit: "microseconds",
        },
        default: "200",
        meaning: "longest sleep of an idle engine: how late it may see an operation posted \
                  while it sleeps",
        apply: |o, v| o.idle.idle_poll_ns = v.whole() * 1000,
    },
    Setting {
        name: "NICMSG_PLACEMENT",
        values: Values::Switch,
        default: "on",
        meaning: "receive the payload of expected frames straight into the receive buffer \
                  (speculative header/payload split)",
        apply: |o, v| o.placement = v.on(),
    },
    Setting {
        name: "NICMSG_PAYLOAD_CRC",
        values: Values::Switch,
        default: "off",
        meaning: "every frame carries a CRC32C of its payload too; off, frames over UDP check \
                  only their headers and leave the payload to the UDP checksum the kernel \
                  verifies (AF_XDP, which checks nothing, always covers the payload)",
        apply: |o, v| o.payload_crc = v.on(),
    },
    Setting {
        name: "NICMSG_PROGRAMS",
        values: Values::Switch,
        default: "on",
        meaning: "the engine runs PANIC programs (`docs/pdl.md`); off: requests to load them \
                  are answered with a refusal",
        apply: |o, v| o.programs = v.on(),
    },
    Setting {
        name: "NICMSG_PROGRAMS_REMOTE",
        values: Values::Switch,
        default: "on",
        meaning: "other ranks of the job may load, unload and start programs on this engine \
                  (its own host always may)",
        apply: |o, v| o.programs_remote = v.on(),
    },
    Setting {
        name: "NICMSG_PROGRAM_BUDGET",
        values: Values::Whole {
            min: PROGRAM_BUDGET_MIN,
            max: PROGRAM_BUDGET_MAX,
            unit: "instructions",
        },
        default: "100000",
        meaning: "instructions one activation of a program may execute before it is stopped \
                  and the program disabled (a runaway loop cannot stall the engine)",
        apply: |o, v| o.program_budget = v.whole() as u32,
    },
    Setting {
        name: "NICMSG_GSO",
        values: Values::Switch,
        default: "on",
        meaning: "UDP segmentation offload: a run of frames to one peer goes to the kernel as \
                  one datagram",
        apply: |o, v| o.gso = v.on(),
    },
    Setting {
        name: "NICMSG_GRO",
        values: Values::Switch,
        default: "on",
        meaning: "UDP receive coalescing: the kernel hands over a run of a peer's frames at \
                  once (asked for only while runs arrive)",
        apply: |o, v| o.gro = v.on(),
    },
    Setting {
        name: "NICMSG_ADAPTIVE_FRAMES",
        values: Values::Switch,
        default: "on",
        meaning: "frame size chosen per message (long messages in at least 8 frames, eager \
                  messages in frames of one size); off: every frame full-sized",
        apply: |o, v| o.protocol.adaptive_frames = v.on(),
    },
    Setting {
        name: "NICMSG_STATS",
        values: Values::Switch,
        default: "off",
        meaning: "print counters per peer and the totals on stderr when the communicator ends",
        apply: |o, v| o.print_stats = v.on(),
    },
    Setting {
        name: "NICMSG_WATCHDOG",
        values: Values::SecondsOrOff {
            min: WATCHDOG_MIN_S,
            max: WATCHDOG_MAX_S,
        },
        default: "60 (off on datagram sockets)",
        meaning: "report every operation pending longer than this on stderr, with what it \
                  waits for, again at twice its age at each report (looked at once a second)",
        apply: |o, v| {
            o.watchdog_auto = false;
            o.idle.watchdog_ns = match v {
                Value::Switch(false) => None,
                seconds => Some((seconds.seconds() * 1e9) as u64),
            };
        },
    },
    Setting {
        name: "NICMSG_PEER_TIMEOUT",
        values: Values::Seconds {
            min: PEER_TIMEOUT_MIN_S,
            max: PEER_TIMEOUT_MAX_S,
        },
        default: "10",
        meaning: "a peer that answers nothing for this long while something is awaited from \
                  it is declared unreachable (its engine answers even while its application \
                  computes; a closed port is detected at once)",
        apply: |o, v| o.protocol.peer_timeout_ns = (v.seconds() * 1e9) as u64,
    },
    Setting {
        name: "NICMSG_BOOTSTRAP_TIMEOUT",
        values: Values::Seconds {
            min: BOOTSTRAP_TIMEOUT_MIN_S,
            max: BOOTSTRAP_TIMEOUT_MAX_S,
        },
        default: "60",
        meaning: "how long the ranks of a job wait for each other to join (rank 0's exchange, \
                  or the PMIx fence); a rank missing then is named in every rank's error",
        apply: |o, v| o.bootstrap_timeout = std::time::Duration::from_secs_f64(v.seconds()),
    },
    Setting {
        name: "NICMSG_LOG",
        values: Values::LogFilter,
        default: "off",
        meaning: "log through `tracing` on stderr, filtered: `warn` (transport errors with \
                  their errno: the first, then every 1000th), `info` (also the bootstrap: \
                  through PMIx or rank 0, the bind address chosen; joining the job, peers \
                  declared unreachable), `debug`, `nicmsg_engine=debug`",
        apply: |_, _| {},
    },
];

/// The settings as the table in `docs/runtime.md` shows them.
pub fn settings_markdown() -> String {
    let mut out = String::from("| variable | accepts | default | meaning |\n|---|---|---|---|\n");
    for setting in SETTINGS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            setting.name,
            setting.values.documented(),
            setting.default,
            setting.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_endpoints_on_loopback_take_loopback_frames_unless_told() {
        let sized = |options: &mut Options, bind: &str| {
            options.size_frames_for(bind.parse().unwrap());
            options.protocol.mtu
        };
        assert_eq!(sized(&mut Options::default(), "127.0.0.1:0"), 65507);
        assert_eq!(sized(&mut Options::default(), "10.0.0.1:0"), 1472);
        let mut told = parse(&[("NICMSG_MTU", "1500")]).expect("valid");
        assert_eq!(sized(&mut told, "127.0.0.1:0"), 1472, "NICMSG_MTU wins");
    }

    /// A transport whose only answer that matters is whether its link checks payloads.
    struct Link(bool);

    impl Transport for Link {
        fn name(&self) -> &'static str {
            "link"
        }
        fn send(&mut self, _: &[(u32, &[&[u8]])]) -> std::io::Result<usize> {
            Ok(0)
        }
        fn receive(
            &mut self,
            _: &mut dyn FnMut(nicmsg_engine::Origin, &[u8]),
        ) -> std::io::Result<usize> {
            Ok(0)
        }
        fn readable_fds(&self) -> Vec<std::os::fd::RawFd> {
            Vec::new()
        }
        fn max_frame(&self) -> usize {
            1472
        }
        fn checks_payload(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn payloads_leave_the_checksum_only_where_the_link_checks_them_and_not_when_told() {
        let options = Options::default();
        assert!(options.protocol_for(&Link(true)).link_checks_payload);
        assert!(!options.protocol_for(&Link(false)).link_checks_payload);
        let told = parse(&[("NICMSG_PAYLOAD_CRC", "1")]).expect("valid");
        assert!(!told.protocol_for(&Link(true)).link_checks_payload);
        assert_eq!(
            Config {
                link_checks_payload: false,
                ..told.protocol_for(&Link(true))
            },
            told.protocol,
            "nothing else changes"
        );
    }

    #[test]
    fn small_and_medium_credits_shrink_only_in_large_jobs_and_never_to_none() {
        assert_eq!(small_credits_for(64, 32), 32);
        assert_eq!(small_credits_for(2048, 32), 32);
        assert_eq!(small_credits_for(4096, 32), 16);
        assert_eq!(small_credits_for(65536, 32), 1);
        assert_eq!(small_credits_for(8, 4), 4, "never more than asked");
        assert_eq!(medium_credits_for(256, 32), 32);
        assert_eq!(medium_credits_for(1024, 32), 8);
        assert_eq!(medium_credits_for(65536, 32), 1);
        // Up to the largest job at least one credit of each fits (then one, past the budget).
        for size in [1, 300, 3000, 8192] {
            let pool = u64::from(size) * u64::from(small_credits_for(size, 32)) * 256;
            assert!(pool <= SMALL_POOL_BUDGET_BYTES, "size {size}");
            let pool = u64::from(size) * u64::from(medium_credits_for(size, 32)) * 4096;
            assert!(pool <= MEDIUM_POOL_BUDGET_BYTES, "size {size}");
        }
    }

    #[test]
    fn the_default_eager_limit_shrinks_with_the_job() {
        assert_eq!(eager_limit_for(1, 8), MAX_DEFAULT_EAGER_LIMIT);
        assert_eq!(eager_limit_for(2, 8), MAX_DEFAULT_EAGER_LIMIT);
        assert_eq!(eager_limit_for(32, 8), 64 << 10);
        assert_eq!(eager_limit_for(33, 8), 32 << 10);
        assert_eq!(eager_limit_for(64, 8), 32 << 10);
        assert_eq!(eager_limit_for(256, 8), 8 << 10);
        assert_eq!(
            eager_limit_for(65536, 64),
            8 << 10,
            "never below the protocol's default"
        );
        for size in [1, 7, 100, 1000] {
            let limit = eager_limit_for(size, 8);
            assert!(limit.is_power_of_two());
            let pool = u64::from(size) * 8 * limit;
            assert!(
                pool <= EAGER_POOL_BUDGET_BYTES || limit == 8 << 10,
                "size {size}"
            );
        }
    }

    #[test]
    fn an_explicit_eager_limit_is_kept() {
        let lookup = |name: &str| (name == "NICMSG_EAGER_LIMIT").then(|| "4096".to_string());
        let options = Options::from_lookup(lookup).expect("valid");
        assert_eq!(options.protocol.eager_limit, 4096);
        assert!(!options.eager_limit_auto);
        assert!(
            Options::from_lookup(|_| None)
                .expect("valid")
                .eager_limit_auto
        );
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<Options, Error> {
        Options::from_lookup(|name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    fn refusal(pairs: &[(&str, &str)]) -> String {
        match parse(pairs) {
            Err(Error::Config(message)) => message,
            Err(other) => panic!("{pairs:?}: not a config error: {other}"),
            Ok(options) => panic!("{pairs:?} accepted: {options:?}"),
        }
    }

    #[test]
    fn the_values_of_the_issue_are_refused_naming_the_variable_and_the_range() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "NICMSG_SLOTS",
                "100000000",
                "a whole number of slots in 16..=16384",
            ),
            ("NICMSG_SLOTS", "0", "a whole number of slots in 16..=16384"),
            (
                "NICMSG_EAGER_LIMIT",
                "99999999999",
                "a whole number of bytes in 0..=1048576",
            ),
            ("NICMSG_GSO", "2", "0, 1, true, false, yes, no, on or off"),
            ("NICMSG_GRO", "abc", "0, 1, true, false, yes, no, on or off"),
            (
                "NICMSG_ADAPTIVE_FRAMES",
                "7",
                "0, 1, true, false, yes, no, on or off",
            ),
            (
                "NICMSG_STATS",
                "maybe",
                "0, 1, true, false, yes, no, on or off",
            ),
            ("NICMSG_MTU", "10", "a whole number of bytes in 576..=65535"),
        ];
        for &(name, value, accepted) in cases {
            let message = refusal(&[(name, value)]);
            assert!(
                message.starts_with(&format!("{name}={value}: expected ")),
                "{message}"
            );
            assert!(message.contains(accepted), "{message}");
        }
        assert!(
            !refusal(&[("NICMSG_MTU", "10")]).contains("mtu 0"),
            "the value given, not one derived from it"
        );
    }

    #[test]
    fn the_watchdog_is_on_unless_turned_off() {
        let default = parse(&[]).expect("no settings");
        assert_eq!(default.idle.watchdog_ns, Some(60_000_000_000));
        assert!(
            default.watchdog_auto,
            "datagram sockets turn the default off"
        );
        for off in ["off", "Off", "OFF"] {
            let options = parse(&[("NICMSG_WATCHDOG", off)]).expect("off is a value");
            assert_eq!(options.idle.watchdog_ns, None, "{off}");
            assert!(!options.watchdog_auto, "{off}");
        }
        let refusal = parse(&[("NICMSG_WATCHDOG", "0")]).expect_err("0 is refused");
        assert!(refusal.to_string().contains("or off"), "{refusal}");
    }

    #[test]
    fn other_bad_values_are_refused_too() {
        for (name, value) in [
            ("NICMSG_ENGINE", "fast"),
            ("NICMSG_TRANSPORT", "tcp"),
            ("NICMSG_UNEXPECTED", "keep"),
            ("NICMSG_MTU", "575"),
            ("NICMSG_MTU", "65536"),
            ("NICMSG_MTU", "1500 bytes"),
            ("NICMSG_EAGER_LIMIT", "-1"),
            ("NICMSG_EAGER_LIMIT", "1048577"),
            ("NICMSG_CTS_WINDOW", "0"),
            ("NICMSG_CTS_WINDOW", "513"),
            ("NICMSG_RSM_PRE", "512"),
            ("NICMSG_ACK_UNIT", "0"),
            ("NICMSG_ACK_UNIT", "9"),
            ("NICMSG_ACK_UNIT", "300"),
            ("NICMSG_SLOTS", "15"),
            ("NICMSG_SLOTS", "16385"),
            ("NICMSG_SPIN_US", "99999999999999999999"),
            ("NICMSG_SPIN_US", "1000001"),
            ("NICMSG_IDLE_POLL_US", "0"),
            ("NICMSG_PLACEMENT", "enabled"),
            ("NICMSG_WATCHDOG", "0"),
            ("NICMSG_WATCHDOG", "-5"),
            ("NICMSG_WATCHDOG", "0.5"),
            ("NICMSG_WATCHDOG", "inf"),
            ("NICMSG_WATCHDOG", "NaN"),
            ("NICMSG_WATCHDOG", "86401"),
            ("NICMSG_LOG", "nicmsg=loud"),
        ] {
            let message = refusal(&[(name, value)]);
            assert!(
                message.starts_with(&format!("{name}={value}: expected ")),
                "{message}"
            );
        }
    }

    #[test]
    fn the_rsm_position_must_lie_inside_the_window() {
        let message = refusal(&[("NICMSG_CTS_WINDOW", "16"), ("NICMSG_RSM_PRE", "16")]);
        assert!(
            message.contains("NICMSG_RSM_PRE=16 must be below NICMSG_CTS_WINDOW=16"),
            "{message}"
        );
        let message = refusal(&[("NICMSG_RSM_PRE", "300")]);
        assert!(
            message.contains("NICMSG_CTS_WINDOW=256") && message.contains("default"),
            "{message}"
        );
        let options = parse(&[("NICMSG_CTS_WINDOW", "16"), ("NICMSG_RSM_PRE", "15")]).unwrap();
        assert_eq!(options.protocol.cts_window_frames, 16);
        assert_eq!(options.protocol.rsm_pre_frames, 15);
    }

    #[test]
    fn good_values_are_taken() {
        let options = parse(&[
            ("NICMSG_ENGINE", "Inline"),
            ("NICMSG_TRANSPORT", " udp "),
            ("NICMSG_MTU", "9000"),
            ("NICMSG_EAGER_LIMIT", "0"),
            ("NICMSG_UNEXPECTED", "DROP"),
            ("NICMSG_CTS_WINDOW", "512"),
            ("NICMSG_RSM_PRE", "511"),
            ("NICMSG_ACK_UNIT", "8"),
            ("NICMSG_SLOTS", "16384"),
            ("NICMSG_SPIN_US", "0"),
            ("NICMSG_IDLE_POLL_US", "1000000"),
            ("NICMSG_PLACEMENT", "yes"),
            ("NICMSG_GSO", "OFF"),
            ("NICMSG_GRO", "false"),
            ("NICMSG_ADAPTIVE_FRAMES", "0"),
            ("NICMSG_STATS", "On"),
            ("NICMSG_WATCHDOG", "2.5"),
            ("NICMSG_LOG", "nicmsg_engine=debug,info"),
        ])
        .expect("all valid");
        assert_eq!(options.engine, EngineMode::Inline);
        assert_eq!(options.transport, TransportChoice::Udp);
        assert_eq!(options.protocol.mtu, 8972);
        assert_eq!(options.protocol.eager_limit, 0);
        assert!(!options.eager_limit_auto);
        assert_eq!(options.protocol.unexpected, UnexpectedPolicy::Drop);
        assert_eq!(options.protocol.cts_window_frames, 512);
        assert_eq!(options.protocol.rsm_pre_frames, 511);
        assert_eq!(options.protocol.ack_unit, 8);
        assert_eq!(options.slots, 16384);
        assert_eq!((options.idle.spin_ns, options.wait_spin_ns), (0, 0));
        assert_eq!(options.idle.idle_poll_ns, 1_000_000_000);
        assert!(options.placement && !options.gso && !options.gro);
        assert!(!options.protocol.adaptive_frames && options.print_stats);
        assert_eq!(options.idle.watchdog_ns, Some(2_500_000_000));
        assert!(!options.watchdog_auto);
        assert_eq!(parse(&[("NICMSG_MTU", "576")]).unwrap().protocol.mtu, 548);
        assert_eq!(
            parse(&[("NICMSG_MTU", "65535")]).unwrap().protocol.mtu,
            65507
        );
    }

    #[test]
    fn the_defaults_pass_and_empty_values_count_as_unset() {
        // From the environment, an unset engine is chosen (`auto`): the one difference.
        let defaults = format!(
            "{:?}",
            Options {
                engine_auto: true,
                ..Options::default()
            }
        );
        assert_eq!(format!("{:?}", parse(&[]).expect("defaults")), defaults);
        let empty: Vec<(&str, &str)> = SETTINGS.iter().map(|s| (s.name, "  ")).collect();
        assert_eq!(format!("{:?}", parse(&empty).expect("empty")), defaults);
    }

    /// Every row: its bounds and words are taken (and applied without a kind mismatch), what
    /// lies beyond is refused with the row's name.
    #[test]
    fn every_setting_takes_its_bounds_and_refuses_what_lies_beyond() {
        for setting in SETTINGS {
            let (good, bad): (Vec<String>, Vec<String>) = match setting.values {
                Values::Switch => (
                    nicmsg_engine::switch::ON
                        .iter()
                        .chain(&nicmsg_engine::switch::OFF)
                        .flat_map(|w| [w.to_string(), w.to_uppercase()])
                        .collect(),
                    vec!["2".into(), "onn".into(), "y".into()],
                ),
                Values::Choice(words) => (
                    words.iter().map(|w| w.to_string()).collect(),
                    vec!["none-of-these".into()],
                ),
                Values::Whole { min, max, .. } => {
                    let mut bad = vec![(max + 1).to_string(), "1.5".into(), "x".into()];
                    if min > 0 {
                        bad.push((min - 1).to_string());
                    }
                    (vec![min.to_string(), max.to_string()], bad)
                }
                Values::Seconds { min, max } => (
                    vec![min.to_string(), max.to_string()],
                    vec![(min / 2.0).to_string(), (max + 1.0).to_string(), "x".into()],
                ),
                Values::SecondsOrOff { min, max } => (
                    vec![min.to_string(), max.to_string(), "off".into(), "OFF".into()],
                    vec![
                        (min / 2.0).to_string(),
                        (max + 1.0).to_string(),
                        "on".into(),
                    ],
                ),
                Values::LogFilter => (vec!["info".into()], vec!["a=b=c".into()]),
            };
            for text in good {
                let value = setting.values.parse(&text);
                let value = value.unwrap_or_else(|| panic!("{}={text} refused", setting.name));
                (setting.apply)(&mut Options::default(), value);
            }
            for text in bad {
                assert_eq!(setting.values.parse(&text), None, "{}={text}", setting.name);
                if setting.name == "NICMSG_RSM_PRE" {
                    continue;
                }
                let message = refusal(&[(setting.name, &text)]);
                assert!(message.starts_with(&format!("{}={text}: ", setting.name)));
            }
        }
    }

    #[test]
    fn the_engine_left_to_choose_runs_inline_where_its_thread_would_share_the_application_cpu() {
        let auto = Options::from_lookup(|_| None).unwrap();
        assert!(auto.engine_auto, "unset means auto");
        let share = |usable, online, local_ranks| CpuShare {
            usable,
            online,
            local_ranks,
        };
        // Open MPI's default binding with as many ranks as cores: one core each.
        assert_eq!(auto.engine_to_run(|| share(1, 2, 2)), EngineMode::Inline);
        // Unbound, two ranks on two cores: four busy threads.
        assert_eq!(auto.engine_to_run(|| share(2, 2, 2)), EngineMode::Inline);
        assert_eq!(auto.engine_to_run(|| share(8, 8, 2)), EngineMode::Thread);
        // Bound to two CPUs of its own.
        assert_eq!(auto.engine_to_run(|| share(2, 8, 4)), EngineMode::Thread);
        // No launcher: taken as one of two processes on the host (`fi_pingpong`).
        let unlaunched = |usable| share(usable, usable, UNLAUNCHED_LOCAL_RANKS);
        assert_eq!(auto.engine_to_run(|| unlaunched(2)), EngineMode::Inline);
        assert_eq!(auto.engine_to_run(|| unlaunched(4)), EngineMode::Thread);
        // A program started alone on a machine of one CPU.
        assert_eq!(auto.engine_to_run(|| share(1, 1, 1)), EngineMode::Inline);

        let named = parse(&[("NICMSG_ENGINE", "auto")]).unwrap();
        assert!(named.engine_auto);
        let told = parse(&[("NICMSG_ENGINE", "thread")]).unwrap();
        assert!(!told.engine_auto);
        assert_eq!(
            told.engine_to_run(|| share(1, 2, 2)),
            EngineMode::Thread,
            "as told"
        );
        assert!(!Options::default().engine_auto, "code names its engine");
        assert_eq!(
            Options::default().engine_to_run(|| share(1, 1, 1)),
            EngineMode::Thread
        );
    }

    #[test]
    fn the_standby_takes_over_late_only_on_a_core_bound_to_its_rank() {
        let share = |usable, online, local_ranks| CpuShare {
            usable,
            online,
            local_ranks,
        };
        // Open MPI's binding, one core a rank: the standby would take it from the computation.
        assert_eq!(share(1, 2, 2).standby_cpu(), StandbyCpu::Shared);
        assert_eq!(share(1, 8, 8).standby_cpu(), StandbyCpu::Shared);
        // Unbound ranks outnumbering the cores: the standby answers for a rank set aside.
        assert_eq!(share(2, 2, 8).standby_cpu(), StandbyCpu::Own);
        // Inline by choice on a machine with cores to spare.
        assert_eq!(share(8, 8, 2).standby_cpu(), StandbyCpu::Own);
        assert!(StandbyCpu::Shared.away_ns() > 10 * StandbyCpu::Own.away_ns());
    }

    /// The start-up review found the 60 s wait for the other ranks fixed: a test, or a batch
    /// system that starts ranks minutes apart, could not change it.
    #[test]
    fn the_bootstrap_timeout_is_a_setting() {
        let options = parse(&[("NICMSG_BOOTSTRAP_TIMEOUT", "5")]).unwrap();
        assert_eq!(options.bootstrap_timeout, std::time::Duration::from_secs(5));
        assert!(parse(&[("NICMSG_BOOTSTRAP_TIMEOUT", "0.5")]).is_err());
        let default = parse(&[]).unwrap();
        assert_eq!(
            default.bootstrap_timeout,
            std::time::Duration::from_secs(60)
        );
    }

    #[test]
    fn the_docs_show_the_settings_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/runtime.md");
        let docs = std::fs::read_to_string(path).expect("docs/runtime.md");
        let table = settings_markdown();
        assert!(
            docs.contains(&table),
            "the settings table of docs/runtime.md differs from SETTINGS; it should read:\n{table}"
        );
        let names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a setting appears twice");
    }

    #[test]
    fn the_eager_pool_must_fit_its_budget() {
        let explicit = parse(&[("NICMSG_EAGER_LIMIT", "1048576")]).unwrap();
        assert!(explicit.check_for_job(128).is_ok());
        let Err(Error::Config(message)) = explicit.check_for_job(129) else {
            panic!("a 1032 MiB pool accepted");
        };
        assert!(
            message.starts_with("NICMSG_EAGER_LIMIT=1048576: the eager pool")
                && message.contains("129 ranks x 8 credits x 1048576 bytes = 1.01 GiB")
                && message.contains("exceeds the 1 GiB")
                && message.contains("may be at most 1040447"),
            "{message}"
        );
        let mut auto = Options::default();
        for (size, fits) in [(2, true), (16384, true), (16385, false), (65536, false)] {
            auto.protocol.eager_limit = eager_limit_for(size, 8);
            match auto.check_for_job(size) {
                Ok(()) => assert!(fits, "{size} ranks"),
                Err(Error::Config(message)) => {
                    assert!(!fits, "{size} ranks: {message}");
                    assert!(message.contains("set NICMSG_EAGER_LIMIT to at most"));
                }
                Err(other) => panic!("{other}"),
            }
        }
    }
}

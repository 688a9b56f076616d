//! Options of a communicator, with defaults and `NICMSG_*` environment overrides.

use crate::Error;
use nicmsg_engine::IdleConfig;
use nicmsg_proto::{Config, UnexpectedPolicy};

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
    pub transport: TransportChoice,
    pub protocol: Config,
    /// Choose `protocol.eager_limit` from the job's size when the communicator starts (see
    /// [`eager_limit_for`]); false once `NICMSG_EAGER_LIMIT` sets it.
    pub eager_limit_auto: bool,
    /// Descriptor table slots (EMP: 640).
    pub slots: usize,
    /// Registered memory regions.
    pub regions: usize,
    pub idle: IdleConfig,
    /// Host-side spinning in a wait before blocking.
    pub wait_spin_ns: u64,
    /// Pages kept pinned by the registration cache.
    pub pin_cache_pages: usize,
    /// How long to wait for the bootstrap exchange.
    pub bootstrap_timeout: std::time::Duration,
    /// Print counters per peer when the communicator ends (`NICMSG_STATS=1`).
    pub print_stats: bool,
    /// Speculative header/payload split on receive (`NICMSG_PLACEMENT=0` turns it off).
    pub placement: bool,
    /// UDP segmentation offload for runs of frames to one peer (`NICMSG_GSO=0` turns it off).
    pub gso: bool,
    /// UDP receive coalescing (`NICMSG_GRO=0` turns it off).
    pub gro: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            engine: EngineMode::Thread,
            transport: TransportChoice::Auto,
            protocol: Config::default(),
            eager_limit_auto: true,
            slots: nicmsg_engine::DEFAULT_SLOTS,
            regions: nicmsg_engine::DEFAULT_REGIONS,
            idle: IdleConfig::default(),
            wait_spin_ns: 50_000,
            pin_cache_pages: 65_536,
            bootstrap_timeout: std::time::Duration::from_secs(60),
            print_stats: false,
            placement: true,
            gso: true,
            gro: true,
        }
    }
}

impl Options {
    /// Defaults overridden by the environment: `NICMSG_ENGINE=inline|thread`,
    /// `NICMSG_TRANSPORT=auto|udp|xdp`,
    /// `NICMSG_MTU` (link MTU; frames are sized to fit a UDP datagram), `NICMSG_EAGER_LIMIT`,
    /// `NICMSG_UNEXPECTED=buffer|drop`, `NICMSG_CTS_WINDOW`, `NICMSG_RSM_PRE`, `NICMSG_ACK_UNIT`,
    /// `NICMSG_SLOTS`, `NICMSG_SPIN_US`, `NICMSG_IDLE_POLL_US`,
    /// `NICMSG_ADAPTIVE_FRAMES=0` (always full frames), `NICMSG_PLACEMENT=0` (no speculative
    /// receive placement), `NICMSG_GSO=0` (no UDP segmentation offload), `NICMSG_GRO=0` (no
    /// receive coalescing), `NICMSG_STATS=1` (counters at exit), `NICMSG_WATCHDOG=SECONDS`
    /// (hang diagnosis). Switches are off for an empty value, `0`, `false` or `no`.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let mut options = Self::default();
        if let Some(mode) = lookup("NICMSG_ENGINE") {
            options.engine = match mode.as_str() {
                "inline" => EngineMode::Inline,
                "thread" => EngineMode::Thread,
                other => {
                    return Err(Error::Config(format!(
                        "NICMSG_ENGINE={other}: expected inline or thread"
                    )))
                }
            };
        }
        if let Some(choice) = lookup("NICMSG_TRANSPORT") {
            options.transport = match choice.as_str() {
                "auto" => TransportChoice::Auto,
                "udp" => TransportChoice::Udp,
                "xdp" => TransportChoice::Xdp,
                other => {
                    return Err(Error::Config(format!(
                        "NICMSG_TRANSPORT={other}: expected auto, udp or xdp"
                    )))
                }
            };
        }
        if let Some(mtu) = number(&lookup, "NICMSG_MTU")? {
            let datagram = nicmsg_udp::max_datagram_for_mtu(mtu as usize, false);
            options.protocol.mtu = datagram as u32;
        }
        if let Some(limit) = number(&lookup, "NICMSG_EAGER_LIMIT")? {
            options.protocol.eager_limit = limit;
            options.eager_limit_auto = false;
        }
        if let Some(policy) = lookup("NICMSG_UNEXPECTED") {
            options.protocol.unexpected = match policy.as_str() {
                "buffer" => UnexpectedPolicy::Buffer,
                "drop" => UnexpectedPolicy::Drop,
                other => {
                    return Err(Error::Config(format!(
                        "NICMSG_UNEXPECTED={other}: expected buffer or drop"
                    )))
                }
            };
        }
        if let Some(window) = number(&lookup, "NICMSG_CTS_WINDOW")? {
            options.protocol.cts_window_frames = window as u32;
        }
        if let Some(pre) = number(&lookup, "NICMSG_RSM_PRE")? {
            options.protocol.rsm_pre_frames = pre as u32;
        }
        if let Some(unit) = number(&lookup, "NICMSG_ACK_UNIT")? {
            options.protocol.ack_unit = unit.min(255) as u8;
        }
        if let Some(slots) = number(&lookup, "NICMSG_SLOTS")? {
            options.slots = slots as usize;
        }
        if let Some(spin) = number(&lookup, "NICMSG_SPIN_US")? {
            options.idle.spin_ns = spin * 1000;
            options.wait_spin_ns = spin * 1000;
        }
        if let Some(poll) = number(&lookup, "NICMSG_IDLE_POLL_US")? {
            options.idle.idle_poll_ns = poll.max(1) * 1000;
        }
        if let Some(on) = switch(&lookup, "NICMSG_PLACEMENT") {
            options.placement = on;
        }
        if let Some(on) = switch(&lookup, "NICMSG_GSO") {
            options.gso = on;
        }
        if let Some(on) = switch(&lookup, "NICMSG_GRO") {
            options.gro = on;
        }
        if let Some(on) = switch(&lookup, "NICMSG_ADAPTIVE_FRAMES") {
            options.protocol.adaptive_frames = on;
        }
        if let Some(on) = switch(&lookup, "NICMSG_STATS") {
            options.print_stats = on;
        }
        if let Some(text) = lookup("NICMSG_WATCHDOG") {
            let seconds = text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "NICMSG_WATCHDOG={text}: expected a positive number of seconds"
                    ))
                })?;
            options.idle.watchdog_ns = Some((seconds * 1e9) as u64);
        }
        options
            .protocol
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(options)
    }
}

/// Memory every rank sets aside for unexpected eager messages (its eager pool: one buffer of
/// the eager limit per credit per peer), which the default eager limit is chosen to fit.
pub const EAGER_POOL_BUDGET_BYTES: u64 = 16 << 20;
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

/// An on/off variable: empty, `0`, `false` or `no` is off, anything else on.
fn switch(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<bool> {
    lookup(name).map(|value| !matches!(value.trim(), "" | "0" | "false" | "no"))
}

fn number(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, Error> {
    match lookup(name) {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::Config(format!("{name}={text}: expected a whole number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

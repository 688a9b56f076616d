//! Which series a pattern runs: the baselines first (so nicmsg's rows can show ratios), then
//! nicmsg in each engine mode; for `offload`, RMPP's steps and the RSM position sweep.

use nicmsg_cli::run::Engine;

use super::args::BenchArgs;
use crate::external::{self, ExternalPeer};
use crate::messenger::LARGEST_DATAGRAM;
use crate::model::{Outcome, Pattern, Series};
use crate::mpi::{self, MpiSystem};
use crate::sizes::{default_sweep, MAX_DEFAULT_SIZE, QUICK_SIZES};
use crate::system::System;

/// RMPP figure 8's positions of the RSM before the end of a window of cleared frames, plus the
/// defaults' neighbourhood; the window is RMPP's 16 frames.
pub const RSM_POSITIONS: [u32; 9] = [0, 1, 2, 4, 5, 8, 11, 14, 15];
/// PANIC figure 3's sizes: 0 B to 4 KiB, a program's largest transfer.
pub const PANIC_RTT_SIZES: [u64; 8] = [0, 64, 256, 512, 1024, 1500, 2048, 4096];
/// PANIC figure 3's mechanisms, the plain API first (the others' reference).
pub const PANIC_RTT_VARIANTS: [&str; 4] = ["api", "mcp2mcp", "getdeliver", "app2app"];
/// Collectives: each host-driven one before its engine-resident counterpart.
pub const PANIC_COLLECTIVE_VARIANTS: [&str; 4] = [
    "host-barrier",
    "engine-barrier",
    "host-allreduce",
    "engine-allreduce",
];
/// Key-value look-up: answered by the host, then by the engine.
pub const PANIC_KV_VARIANTS: [&str; 2] = ["host", "engine"];
/// The one series of `panic-cost`: the engine's handling, in-process (no engine mode).
pub const PANIC_COST_SERIES: &str = "nicmsg-engine-handling";

/// RMPP's CTS window: one RSM/CTS pair per 16 data frames.
pub const RMPP_WINDOW: u32 = 16;
/// EMP's overhead and overlap message size ("10 kB").
pub const EMP_MESSAGE: u64 = 10 * 1024;

/// One system's run of one pattern.
#[derive(Debug, Clone)]
pub struct SeriesPlan {
    pub pattern: Pattern,
    pub system: System,
    /// Stable name in the JSON (`nicmsg-inline`, `nicmsg-inline-pre5`, `tcp-busy`, ...).
    pub name: String,
    pub label: String,
    pub engine: Option<Engine>,
    /// nicmsg settings, `NAME=VALUE`.
    pub env: Vec<String>,
    pub sizes: Vec<u64>,
    /// PANIC patterns: which mechanism the series measures (`mcp2mcp`, `engine-barrier`, ...).
    pub variant: Option<&'static str>,
    /// Set when the series cannot run here (not installed, unsupported): recorded as is.
    pub skip: Option<Outcome>,
}

/// The series of `pattern`, in running order.
pub fn series_for(pattern: Pattern, args: &BenchArgs) -> Result<Vec<SeriesPlan>, String> {
    let sizes = sizes_for(pattern, args);
    let mut plans = Vec::new();
    if pattern == Pattern::Offload {
        return Ok(offload_series(args, &sizes));
    }
    if pattern.is_panic() {
        return Ok(panic_series(pattern, args, &sizes));
    }
    if pattern.is_mpi() {
        return mpi_series(pattern, args, &sizes);
    }
    let mut systems = match (pattern, &args.baselines) {
        // LM's figure 4 is against standard UDP: fragments, not the other baselines.
        (Pattern::Lm, None) => vec![System::UdpFrag],
        _ => baselines(args)?
            .into_iter()
            .filter(|system| !matches!(system, System::Mpi(_)))
            .collect(),
    };
    if pattern == Pattern::Lm {
        // The LM socket by copy, its two sending paths with placement and the floor under
        // them always run, once each, whatever was named.
        let lm_systems = [
            System::XdpFloor,
            System::LmCopy,
            System::LmSendto,
            System::Lm,
        ];
        systems.retain(|system| !lm_systems.contains(system));
        systems.extend(lm_systems);
    }
    for system in systems {
        let mut plan = baseline(pattern, system, &sizes);
        if system == System::XdpFloor && !args.netns() {
            plan.skip = Some(Outcome::Unsupported {
                reason: "AF_XDP needs an Ethernet interface: run with --netns".into(),
            });
        }
        plans.push(plan);
    }
    for &engine in &args.engines {
        plans.push(nicmsg(pattern, engine, &sizes, Vec::new(), None));
    }
    Ok(plans)
}

/// LM's sizes: one frame (1,424 B of payload at MTU 1500), the largest UDP datagram (65,507 B,
/// standard UDP's one datagram) and 64 KiB (the goal), then multi-megabyte transfers.
pub const LM_SIZES: [u64; 14] = [
    1,
    64,
    256,
    1024,
    1424,
    4096,
    8192,
    16384,
    32768,
    LARGEST_DATAGRAM as u64,
    65_536,
    256 << 10,
    1 << 20,
    4 << 20,
];

/// Default sizes: the full sweep for latency and bandwidth, small messages for msgrate, EMP's
/// 10 kB for overhead and overlap, rendezvous sizes for offload.
///
/// `--sizes` replaces them, but in a suite overhead and overlap keep EMP's 10 kB: the suite's
/// sweep sizes are for the size-sweeping patterns, and the papers' overhead and overlap figures
/// (and the targets judged on them) are at 10 kB only.
pub fn sizes_for(pattern: Pattern, args: &BenchArgs) -> Vec<u64> {
    let emp_only = matches!(pattern, Pattern::Overhead | Pattern::Overlap);
    if emp_only && args.suite.is_some() {
        return vec![EMP_MESSAGE];
    }
    if pattern == Pattern::MpiOverlap && args.suite.is_some() {
        return mpi_overlap_sizes(args.quick);
    }
    if let Some(sizes) = &args.sizes {
        return sizes.0.clone();
    }
    let quick = args.quick;
    match pattern {
        Pattern::Latency | Pattern::Bw | Pattern::Bibw if quick => QUICK_SIZES.to_vec(),
        Pattern::Latency | Pattern::Bw | Pattern::Bibw => default_sweep(MAX_DEFAULT_SIZE),
        Pattern::Msgrate if quick => vec![8, 1024],
        Pattern::Msgrate => default_sweep(4096),
        Pattern::Overhead | Pattern::Overlap => vec![EMP_MESSAGE],
        Pattern::Offload if quick => vec![64 << 10, 1 << 20],
        Pattern::Offload => default_sweep(MAX_DEFAULT_SIZE)
            .into_iter()
            .filter(|&s| s >= 16 << 10)
            .collect(),
        Pattern::Lm if quick => vec![1, LARGEST_DATAGRAM as u64],
        Pattern::Lm => LM_SIZES.to_vec(),
        Pattern::PanicRtt if quick => vec![0, 1024],
        Pattern::PanicRtt => PANIC_RTT_SIZES.to_vec(),
        // Figure 4's DELIVER of 64 bytes; the statements are swept inside the point.
        Pattern::PanicCost => vec![64],
        Pattern::PanicCollectives => vec![8],
        Pattern::PanicKv => vec![8],
        Pattern::MpiLatency | Pattern::MpiBw if quick => MPI_QUICK_SIZES.to_vec(),
        Pattern::MpiLatency | Pattern::MpiBw => MPI_SIZES.to_vec(),
        Pattern::MpiOverlap => mpi_overlap_sizes(quick),
    }
}

/// The MPI patterns' sweep: the 8 B, 4 KiB, 64 KiB and 1 MiB, the sizes between
/// (where Open MPI's and nicmsg's eager limits lie, 4 KiB to 64 KiB), and 4 MiB.
pub const MPI_SIZES: [u64; 13] = [
    8,
    64,
    512,
    1024,
    4096,
    8192,
    16384,
    32768,
    65536,
    128 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
];
/// `--quick`: the four sizes.
pub const MPI_QUICK_SIZES: [u64; 4] = [8, 4096, 65536, 1 << 20];

/// `mpi-overlap`'s sizes: EMP's 10 kB (eager everywhere) and 1 MiB (rendezvous everywhere:
/// what moves while the host computes depends on who makes progress); `--quick`: 10 kB.
fn mpi_overlap_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![EMP_MESSAGE]
    } else {
        vec![EMP_MESSAGE, 1 << 20]
    }
}

/// `--baselines`: all by default; `none`; or a list of names.
fn baselines(args: &BenchArgs) -> Result<Vec<System>, String> {
    let Some(names) = &args.baselines else {
        return Ok(System::all_baselines());
    };
    if names.iter().any(|n| n == "all") {
        return Ok(System::all_baselines());
    }
    names
        .iter()
        .filter(|n| n.as_str() != "none" && !n.is_empty())
        .map(|n| match n.parse::<System>()? {
            System::Nicmsg => Err("nicmsg is always measured; --baselines names the others".into()),
            system => Ok(system),
        })
        .collect()
}

fn baseline(pattern: Pattern, system: System, sizes: &[u64]) -> SeriesPlan {
    let skip = match system {
        System::External(peer) => external_skip(peer, pattern),
        _ => None,
    };
    SeriesPlan {
        pattern,
        system,
        name: system.name().to_owned(),
        label: system.label().to_owned(),
        engine: None,
        env: Vec::new(),
        sizes: sizes.to_vec(),
        variant: None,
        skip,
    }
}

fn external_skip(peer: ExternalPeer, pattern: Pattern) -> Option<Outcome> {
    if let Err(reason) = external::supports(peer, pattern) {
        return Some(Outcome::Unsupported { reason });
    }
    (!peer.is_installed()).then(|| Outcome::NotInstalled {
        install: peer.install_hint().to_owned(),
    })
}

fn nicmsg(
    pattern: Pattern,
    engine: Engine,
    sizes: &[u64],
    env: Vec<String>,
    suffix: Option<String>,
) -> SeriesPlan {
    let mode = engine_name(engine);
    let mut name = format!("nicmsg-{mode}");
    let mut label = format!("nicmsg ({mode} engine)");
    if let Some(suffix) = suffix {
        name = format!("{name}-{suffix}");
        label = format!("{label}, {suffix}");
    }
    SeriesPlan {
        pattern,
        system: System::Nicmsg,
        name,
        label,
        engine: Some(engine),
        env,
        sizes: sizes.to_vec(),
        variant: None,
        skip: None,
    }
}

/// The MPI patterns' series: Open MPI over TCP and over UCX (those of `--baselines` that are
/// MPI systems, both by default), then Open MPI on nicmsg in each of `--engines`' modes.
fn mpi_series(
    pattern: Pattern,
    args: &BenchArgs,
    sizes: &[u64],
) -> Result<Vec<SeriesPlan>, String> {
    let named = baselines(args)?;
    let by_default = (args.baselines.as_ref()).is_none_or(|names| names.iter().any(|n| n == "all"));
    let mut systems: Vec<MpiSystem> = MpiSystem::ALL
        .into_iter()
        .filter(|system| system.engine().is_none())
        .filter(|system| by_default || named.contains(&System::Mpi(*system)))
        .collect();
    systems.extend(
        MpiSystem::ALL
            .into_iter()
            .filter(|system| system.engine().is_some_and(|e| args.engines.contains(&e))),
    );
    let unsupported = args.netns().then(|| Outcome::Unsupported {
        reason: "the MPI patterns run mpirun on this host's loopback, not over --netns".into(),
    });
    Ok(systems
        .into_iter()
        .map(|system| SeriesPlan {
            pattern,
            system: System::Mpi(system),
            name: system.name().to_owned(),
            label: system.label().to_owned(),
            engine: system.engine(),
            env: Vec::new(),
            sizes: sizes.to_vec(),
            variant: None,
            skip: unsupported.clone().or_else(|| mpi::skip(system, pattern)),
        })
        .collect())
}

/// PANIC's series: in each engine mode, one per mechanism (named `nicmsg-MODE-VARIANT`);
/// `panic-cost` measures the engine's code in-process, the same in both modes, so it has one.
fn panic_series(pattern: Pattern, args: &BenchArgs, sizes: &[u64]) -> Vec<SeriesPlan> {
    if pattern == Pattern::PanicCost {
        let mut plan = nicmsg(pattern, Engine::Inline, sizes, Vec::new(), None);
        plan.name = PANIC_COST_SERIES.to_owned();
        plan.label = "engine handling a program message (in-process)".to_owned();
        plan.variant = Some("cost");
        return vec![plan];
    }
    let variants: &[&'static str] = match pattern {
        Pattern::PanicRtt => &PANIC_RTT_VARIANTS,
        Pattern::PanicCollectives => &PANIC_COLLECTIVE_VARIANTS,
        _ => &PANIC_KV_VARIANTS,
    };
    let mut plans = Vec::new();
    for &engine in &args.engines {
        for &variant in variants {
            let mut plan = nicmsg(pattern, engine, sizes, Vec::new(), Some(variant.to_owned()));
            plan.variant = Some(variant);
            plans.push(plan);
        }
    }
    plans
}

/// RMPP's steps: protocol on the host's thread (inline) against an offload engine (thread), then
/// the RSM moved earlier in each 16-frame window (Pre-0 .. Pre-15).
fn offload_series(args: &BenchArgs, sizes: &[u64]) -> Vec<SeriesPlan> {
    let mut plans: Vec<SeriesPlan> = [Engine::Inline, Engine::Thread]
        .into_iter()
        .map(|engine| nicmsg(Pattern::Offload, engine, sizes, Vec::new(), None))
        .collect();
    let positions: &[u32] = if args.quick { &[0, 15] } else { &RSM_POSITIONS };
    for &pre in positions {
        let env = vec![
            format!("NICMSG_CTS_WINDOW={RMPP_WINDOW}"),
            format!("NICMSG_RSM_PRE={pre}"),
        ];
        plans.push(nicmsg(
            Pattern::Offload,
            args.offload_engine,
            sizes,
            env,
            Some(format!("pre{pre}")),
        ));
    }
    plans
}

pub fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Inline => "inline",
        Engine::Thread => "thread",
    }
}

/// A series that did not run, with its reason.
pub fn skipped(plan: &SeriesPlan, outcome: Outcome) -> Series {
    Series {
        pattern: plan.pattern,
        system: plan.name.clone(),
        label: plan.label.clone(),
        command: String::new(),
        outcome,
        points: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn args(line: &[&str]) -> BenchArgs {
        let words = std::iter::once("bench").chain(line.iter().copied());
        Command::try_parse_from(words).expect("valid").args
    }

    #[test]
    fn a_suite_keeps_emps_10_kb_for_overhead_and_overlap() {
        let suite = args(&["--suite", "papers", "--sizes", "8,1K"]);
        assert_eq!(sizes_for(Pattern::Latency, &suite), vec![8, 1024]);
        assert_eq!(sizes_for(Pattern::Overhead, &suite), vec![EMP_MESSAGE]);
        assert_eq!(sizes_for(Pattern::Overlap, &suite), vec![EMP_MESSAGE]);
        let alone = args(&["overhead", "--sizes", "8,1K"]);
        assert_eq!(sizes_for(Pattern::Overhead, &alone), vec![8, 1024]);
    }
}

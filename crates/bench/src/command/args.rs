//! Command line of `nicmsg bench`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use nicmsg_cli::run::Engine;
use nicmsg_cli::units::{parse_loss, parse_seconds, Loss};

use crate::model::Pattern;
use crate::sizes::{parse_sizes, Sizes};
use crate::worker::parse_pattern;

/// Sets of patterns that reproduce a paper's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Suite {
    /// Every pattern: the measurements of EMP, RMPP, BIP, LM and PANIC; writes bench-report.md.
    Papers,
    /// MPI: Open MPI on nicmsg's provider (both engine modes) against Open MPI over TCP (ob1)
    /// and over UCX (tcp): NPopenmpi latency and bandwidth, and the overlap of MPI_Isend/Irecv
    /// with computation.
    Mpi,
}

/// Link shapes like the papers'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Link {
    /// Gigabit Ethernet: 1 Gbit/s (tc tbf) and MTU 1500 on every namespace link.
    Gige,
}

#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    nicmsg bench latency --sizes 8,1K,64K\n  \
    nicmsg bench --suite papers --quick --out bench-quick\n  \
    sudo nicmsg bench --suite papers --netns --out bench-netns\n  \
    sudo nicmsg bench bw --link gige --baselines tcp-busy,netpipe\n  \
    nicmsg bench --suite mpi --out bench-mpi\n\n\
    Patterns: latency bw bibw msgrate overhead overlap offload lm\n\
    \x20         panic-rtt panic-cost panic-collectives panic-kv\n\
    \x20         mpi-latency mpi-bw mpi-overlap (under mpirun; --suite mpi runs the three).\n\
    Baselines: udp-busy tcp-busy tcp-blocking netpipe fi-udp-rxd fi-tcp-rxm ucx-tcp (or all, none);\n\
    \x20          lm runs udp-frag (standard UDP) and nicmsg-lm (the LM socket);\n\
    \x20          the MPI patterns run ompi-ob1-tcp ompi-ucx-tcp beside ompi-nicmsg-inline/-thread.\n\
    See docs/benchmarks.md for what each pattern measures.")]
pub struct BenchArgs {
    /// Patterns to run (default: latency and bw; with --suite papers: all of them).
    #[arg(value_parser = parse_pattern, value_name = "PATTERN")]
    pub patterns: Vec<Pattern>,

    /// Run a predefined set of patterns and write bench-report.md.
    #[arg(long, value_enum)]
    pub suite: Option<Suite>,

    /// Message sizes, e.g. 0,8,1K,64K,1M (default: per pattern, see docs/benchmarks.md; with
    /// --suite, overhead and overlap stay at EMP's 10 kB).
    #[arg(long, value_parser = parse_sizes, value_name = "LIST")]
    pub sizes: Option<Sizes>,

    /// Systems to run beside nicmsg, comma-separated; `all` (default) or `none`.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub baselines: Option<Vec<String>>,

    /// nicmsg engine modes to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Engine::Inline, Engine::Thread])]
    pub engines: Vec<Engine>,

    /// Engine of the RSM position sweep of `offload`.
    #[arg(long, value_enum, default_value_t = Engine::Inline)]
    pub offload_engine: Engine,

    /// Run the two ranks in network namespaces joined by veth (needs root).
    #[arg(long)]
    pub netns: bool,

    /// Shape the namespace links like the papers' (implies --netns).
    #[arg(long, value_enum)]
    pub link: Option<Link>,

    /// Link MTU (namespace links; nicmsg's frame size on loopback). Default 1500.
    #[arg(long, value_parser = clap::value_parser!(u32).range(576..=65535))]
    pub mtu: Option<u32>,

    /// Random loss of received frames, e.g. 1% (needs --netns).
    #[arg(long, value_parser = parse_loss)]
    pub loss: Option<Loss>,

    /// Few sizes and repetitions: checks that every pattern and baseline runs (CI).
    #[arg(long)]
    pub quick: bool,

    /// Timed repetitions at small sizes (default 10,000; --quick 200).
    #[arg(long)]
    pub reps: Option<u64>,

    /// Where results.json, the plots and bench-report.md go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,

    /// Measure nothing: redraw the plots, the report and the summary from the results.json
    /// already in --out (after a change to how they are drawn).
    #[arg(long)]
    pub replot: bool,

    /// Stop one system's run of one pattern after this long (default 20 minutes; --quick 2).
    #[arg(long, value_parser = parse_seconds, value_name = "SECONDS")]
    pub job_timeout: Option<Duration>,
}

impl BenchArgs {
    /// The patterns to run, in the papers' order.
    pub fn patterns(&self) -> Vec<Pattern> {
        match self.suite {
            Some(Suite::Papers) => return Pattern::PAPERS.to_vec(),
            Some(Suite::Mpi) => return Pattern::MPI.to_vec(),
            None => {}
        }
        if self.patterns.is_empty() {
            return vec![Pattern::Latency, Pattern::Bw];
        }
        let mut patterns = self.patterns.clone();
        patterns.dedup();
        patterns
    }

    pub fn netns(&self) -> bool {
        self.netns || self.link.is_some()
    }

    /// `--mtu`, else 1500 (also with `--link gige`, whose MTU `--mtu 9000` can raise for jumbo
    /// frames).
    pub fn mtu(&self) -> u32 {
        self.mtu.unwrap_or(1500)
    }

    pub fn job_timeout(&self) -> Duration {
        self.job_timeout.unwrap_or(if self.quick {
            Duration::from_secs(120)
        } else {
            Duration::from_secs(1200)
        })
    }
}

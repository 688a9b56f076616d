//! # nicmsg simulator
//!
//! Runs the real engine of every rank (descriptor table, driver, protocol endpoint; or the
//! protocol endpoint alone, `--mode core`) over a simulated network in virtual time, driven by
//! workloads that play the application side of every rank, and checks after every run
//! that every message was delivered exactly once, intact, in MPI order, or failed cleanly; that
//! every operation completed exactly once; and that no state, memory access or table overflow is
//! left behind. A run is a pure function of its seed and parameters, so any failure replays.
//!
//! * [`net`]: the network model (delay, jitter, bandwidth, loss, duplication, reordering,
//!   corruption, MTU, partitions) and the event queue;
//! * [`world`]: the ranks' machines ([`node`], over the simulated [`transport`]), host memory,
//!   and the host commands workloads use;
//! * [`workload`] and [`workloads`]: the applications;
//! * [`ledger`] and [`invariants`]: what was posted and sent, and the checks;
//! * [`run`]: the event loop of one run; [`sweep`]: many runs over threads; [`report`]: summaries.
//!
//! See `docs/simulator.md`.

// Unsafe code only where the simulated transport stands in for the kernel (placing bytes
// into planned receive buffers) and the host half posts buffers: each block says why.

pub mod content;
pub mod invariants;
pub mod ledger;
pub mod lm;
pub mod memory;
pub mod net;
pub mod node;
pub mod open;
pub mod report;
pub mod rng;
pub mod run;
pub mod sweep;
pub mod trace;
pub mod transport;
pub mod workload;
pub mod workloads;
pub mod world;

pub use invariants::Violation;
pub use net::{NetConfig, NetStats, Partition};
pub use node::{ProgramsSetup, SimMode};
pub use report::Summary;
pub use run::{run, Limits, MessageCounts, ProtoParams, RunResult, RunSpec};
pub use sweep::{run_catching, sweep, SweepOptions, SweepPlan};
pub use workload::WorkloadKind;

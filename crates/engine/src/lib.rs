//! # nicmsg offload engine
//!
//! The engine is "the NIC": it owns a protocol endpoint and a wire backend, takes operations
//! from the host's descriptor table, and hands results back through the same table. It runs on
//! a dedicated thread (`thread` mode: the application only writes descriptors and polls their
//! state, as in EMP) or inside the application's test/wait calls (`inline` mode).
//!
//! Built with `--cfg loom`, the crate is only the descriptor table, its host half and the memory
//! registry, over loom's atomics and cells (`sync`), for the model-checking test
//! `tests/loom_table.rs`: the rest needs threads, futexes, sockets and clocks loom does not model.

#[cfg(not(loom))]
pub mod clock;
#[cfg(not(loom))]
pub mod driver;
#[cfg(not(loom))]
pub mod errors;
mod finished_ring;
pub mod host;
pub mod incarnation;
#[cfg(not(loom))]
pub mod inline;
#[cfg(not(loom))]
mod outbox;
#[cfg(not(loom))]
pub mod poller;
#[cfg(not(loom))]
pub mod programs;
#[cfg(not(loom))]
pub mod raw_copy;
pub mod registry;
#[cfg(not(loom))]
pub mod runner;
#[cfg(not(loom))]
mod send_copies;
#[cfg(not(loom))]
pub mod sharing;
pub mod signal;
pub mod switch;
mod sync;
pub mod table;
#[cfg(not(loom))]
pub mod transport;

#[cfg(not(loom))]
pub use clock::EngineClock;
#[cfg(not(loom))]
pub use driver::{Driver, EngineStats};
pub use host::{HostError, HostTable, Posted};
#[cfg(not(loom))]
pub use inline::{HostTurns, InlineEngine, StandbyCpu};
#[cfg(not(loom))]
pub use poller::Poller;
#[cfg(not(loom))]
pub use raw_copy::copy_raw;
pub use registry::{Registry, RegistryMemory, DEFAULT_REGIONS};
#[cfg(not(loom))]
pub use runner::{IdleConfig, Snapshot, ThreadEngine};
#[cfg(not(loom))]
pub use send_copies::{SEND_COPIES, SEND_COPY_MAX_BYTES, SEND_COPY_REGIONS};
pub use signal::CompletionSignal;
pub use table::{Descriptor, Envelope, OpCode, Outcome, ResultCode, Table, ANY, DEFAULT_SLOTS};
#[cfg(not(loom))]
pub use transport::{Origin, Peeked, PlacementTarget, Received, Transport};

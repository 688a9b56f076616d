//! # nicmsg offload engine
//!
//! The engine is "the NIC": it owns a protocol endpoint and a wire backend, takes operations
//! from the host's descriptor table, and hands results back through the same table. It runs on
//! a dedicated thread (`thread` mode: the application only writes descriptors and polls their
//! state, as in EMP) or inside the application's test/wait calls (`inline` mode).

pub mod clock;
pub mod driver;
pub mod errors;
pub mod inline;
mod outbox;
pub mod poller;
pub mod registry;
pub mod runner;
pub mod sharing;
pub mod table;
pub mod transport;

pub use clock::EngineClock;
pub use driver::{Driver, EngineStats};
pub use inline::{HostTurns, InlineEngine};
pub use poller::Poller;
pub use registry::{Registry, RegistryMemory, DEFAULT_REGIONS};
pub use runner::{IdleConfig, Shared, Snapshot, ThreadEngine};
pub use table::{Descriptor, OpCode, Outcome, ResultCode, Table, ANY, DEFAULT_SLOTS};
pub use transport::{PlacementTarget, Received, Transport, PLACED_HEADER_LEN};

//! LM over real sockets: a station (`nicmsg_lm::station`, or an open one whose peers are
//! addresses, `nicmsg_lm::open`) driven by a kernel UDP socket and, to place admitted
//! transfers, an AF_XDP socket with LM's placing filter.

mod core;
mod memory;
mod report;
mod runs;
mod socket;

pub use memory::MAX_REGIONS;
pub use socket::{LmOpenConfig, LmSocket, LmSocketConfig, LmSocketStats};

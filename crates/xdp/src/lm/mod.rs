//! LM over real sockets: a station (`nicmsg_lm::station`) driven by a kernel UDP socket and,
//! to place admitted transfers, an AF_XDP socket with LM's placing filter.

mod memory;
mod report;
mod runs;
mod socket;

pub use memory::MAX_REGIONS;
pub use socket::{LmSocket, LmSocketConfig, LmSocketStats};

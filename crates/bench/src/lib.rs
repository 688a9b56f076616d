//! # nicmsg benchmarks
//!
//! The measurements of the five papers nicmsg descends from (EMP, RMPP, BIP, LM, PANIC), run
//! for nicmsg and, in the same run, for the baselines: TCP and raw UDP written here, and
//! NetPIPE, libfabric and UCX when installed. `nicmsg bench` (crate `nicmsg-cli`) drives this
//! crate; see `docs/benchmarks.md`.

pub mod model;
pub mod plot;
pub mod report;
pub mod targets;
mod view;

#[cfg(test)]
mod fixture;

//! # nicmsg benchmarks
//!
//! The measurements of the five papers nicmsg descends from (EMP, RMPP, BIP, LM, PANIC), run
//! for nicmsg and, in the same run, for the baselines: TCP and raw UDP written here, and
//! NetPIPE, libfabric and UCX when installed. `nicmsg bench` (crate `nicmsg-cli`) drives this
//! crate; see `docs/benchmarks.md`.

pub mod external;
pub mod model;

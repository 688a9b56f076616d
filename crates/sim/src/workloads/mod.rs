//! One file per workload; see [`crate::workload::WorkloadKind`] for the list.

pub mod alltoall;
pub mod anysource;
pub mod cancel;
pub mod credits;
pub mod library;
pub mod pingpong;
pub mod probe;
pub mod programs;
pub mod programs_host;
pub mod streams;
pub mod trickle;
pub mod unsafe_sends;

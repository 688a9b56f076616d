//! # nicmsg benchmarks
//!
//! The measurements of the papers nicmsg descends from (EMP, RMPP, BIP, PANIC, LM), run for
//! nicmsg and, in the same run, for the baselines: TCP and raw UDP written here, and
//! NetPIPE, libfabric and UCX when installed; see `docs/benchmarks.md`. The crate's program,
//! `nicmsg-bench`, is `nicmsg bench` ([`command`]): the `nicmsg` launcher runs it from its own
//! directory, so that the launcher links none of this.
//!
//! * [`command`]: `nicmsg bench` itself: the series to run, each as a job under the launcher's
//!   library (`nicmsg-cli`), the live table, the files written;
//! * [`model`]: the results, as written to JSON;
//! * [`patterns`]: the papers' loops, written once against [`messenger::Messenger`];
//! * [`panic`]: PANIC's figures 3 and 5, and the engine's collectives and look-up against the
//!   hosts', through `Comm::programs`;
//! * [`messenger`]: nicmsg, its LM socket, TCP (blocking, busy-polling) and raw UDP (one frame
//!   or one fragmented datagram per send) behind that interface;
//! * [`looper`]: LM's CPU measurement, by what is left over for threads of the lowest class;
//! * [`external`]: NetPIPE, libfabric `fi_pingpong` and `ucx_perftest`, run as installed;
//! * [`mpi`]: Open MPI on nicmsg's libfabric provider against Open MPI over TCP and UCX, under
//!   `mpirun` (`NPopenmpi` and an overlap program compiled at run time);
//! * [`worker`]: what each rank of a benchmark job runs (`nicmsg-bench bench-worker`);
//! * [`plot`], [`report`], [`targets`]: charts, `bench-report.md`, and the targets judged.

pub mod affinity;
pub mod command;
pub mod compute;
mod error;
pub mod external;
pub mod looper;
pub mod messenger;
pub mod model;
pub mod mpi;
pub mod panic;
pub mod patterns;
pub mod plot;
pub mod report;
pub mod sizes;
pub mod stats;
pub mod system;
pub mod targets;
mod view;
pub mod worker;

#[cfg(test)]
mod fixture;

pub use error::BenchError;

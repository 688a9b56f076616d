//! # nicmsg bootstrap
//!
//! Everything a rank needs before its data plane can start:
//!
//! 1. **Who am I?** [`job_from_env`] reads the rank, the job size, a job id, rank 0's bootstrap
//!    address and the local address to bind from the environment set by `nicmsg run`, Open MPI's
//!    `mpirun`, PMIx launchers, MPICH/Hydra (PMI) or Slurm's `srun` (see [`job_from_env`] for the
//!    order). [`job_from_lookup`] does the same from any lookup function (used by tests).
//! 2. **Where is everybody?** [`exchange()`] gives every rank the data addresses of all ranks: rank 0
//!    runs a tiny TCP service at the bootstrap address, collects one hello per rank and answers
//!    everyone with the full table. [`exchange_addresses`] also carries each rank's Ethernet
//!    address, for transports that frame their own datagrams. The wire format is documented in
//!    the [`mod@exchange`] module.
//! 3. **Under a PMIx launcher** (Open MPI's `mpirun`, `srun --mpi=pmix`) [`Bootstrap`] does both
//!    through PMIx instead: rank and size from PMIx, the bind address chosen from the interfaces
//!    that reach the other ranks, the addresses exchanged with PMIx put/commit/fence/get. The
//!    PMIx library is loaded at run time (`nicmsg-pmix`), so nothing here needs it installed.
//!    [`Bootstrap`] falls back to 1 and 2 without a PMIx launcher, or when `NICMSG_BOOTSTRAP`
//!    is set.
//!
//! The environment contract is described for users in `docs/launcher.md`.

// No unsafe code here: the compiler holds it to that (the PMIx calls are in `nicmsg-pmix`).
#![forbid(unsafe_code)]

mod env;
mod error;
pub mod exchange;
mod launch;
mod pmix;

pub use env::{job_from_env, job_from_lookup, JobEnv};
pub use error::BootstrapError;
pub use exchange::{exchange, exchange_addresses, RankAddress};
pub use launch::Bootstrap;
pub use pmix::MAX_RANKS as PMIX_MAX_RANKS;

//! [`Bootstrap`]: how a rank joins its job, whichever way its launcher supports: PMIx under a
//! PMIx launcher, else the environment and rank 0's TCP service.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::env::{bind_ip, job_from_lookup, job_id, pmix_launcher, trimmed};
use crate::pmix::{Session, StartError};
use crate::{exchange_addresses, BootstrapError, JobEnv, RankAddress};

/// A rank's way into its job, from the environment to the table of every rank's address.
///
/// ```no_run
/// # use std::net::{IpAddr, Ipv4Addr, UdpSocket};
/// # use std::time::Duration;
/// let mut bootstrap = nicmsg_bootstrap::Bootstrap::from_env(Duration::from_secs(60))?;
/// let ip = bootstrap.bind_ip()?.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
/// let socket = UdpSocket::bind((ip, 0)).unwrap();
/// let table = bootstrap.exchange(socket.local_addr().unwrap())?;
/// # Ok::<(), nicmsg_bootstrap::BootstrapError>(())
/// ```
///
/// * Under a PMIx launcher (`PMIX_NAMESPACE` and `PMIX_RANK` set: Open MPI's `mpirun`,
///   `prterun`, `srun --mpi=pmix`), unless `NICMSG_BOOTSTRAP` or `NICMSG_RANK` is set: rank and
///   size from PMIx, the bind address chosen from the interfaces that reach the other ranks,
///   and the addresses exchanged with PMIx put/commit/fence/get (the `pmix` module). When the
///   PMIx library cannot be loaded or `PMIx_Init` fails, a job of one rank goes on without it
///   (a warning says so); a larger one fails with an error that says what to do.
/// * Otherwise: [`crate::job_from_env`] and [`crate::exchange_addresses`] through rank 0.
pub struct Bootstrap {
    job: JobEnv,
    timeout: Duration,
    pmix: Option<Session>,
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("job", &self.job)
            .field("via", &self.via())
            .finish()
    }
}

impl Bootstrap {
    /// Reads the job from the process's environment (see the type's description); `timeout`
    /// bounds every wait of the bootstrap for the other ranks.
    pub fn from_env(timeout: Duration) -> Result<Bootstrap, BootstrapError> {
        let get = trimmed(|name: &str| std::env::var(name).ok());
        if let Some(launcher) = pmix_launcher(&get) {
            return Self::through_pmix(&get, launcher, timeout);
        }
        let job = job_from_lookup(&get)?;
        if job.size > 1 {
            match job.bootstrap {
                Some(service) => tracing::info!(
                    "bootstrap via rank 0's TCP service at {service}: rank {} of {}",
                    job.rank,
                    job.size
                ),
                None => tracing::debug!("no bootstrap service set"),
            }
        }
        Ok(Bootstrap {
            job,
            timeout,
            pmix: None,
        })
    }

    /// Joins through PMIx the job of the `(namespace, rank)` a PMIx launcher named.
    fn through_pmix(
        get: &dyn Fn(&str) -> Option<String>,
        (namespace, rank): (String, String),
        timeout: Duration,
    ) -> Result<Bootstrap, BootstrapError> {
        let reason = match Session::start(job_id(get)?, bind_ip(get)?, timeout) {
            Ok((session, job)) => {
                let pmix = Some(session);
                return Ok(Bootstrap { job, timeout, pmix });
            }
            Err(StartError::Failed(error)) => return Err(error),
            Err(StartError::Unavailable(reason)) => reason,
        };
        // nicmsg's own bootstrap can stand in only where it needs nobody: a job of one rank.
        match job_from_lookup(get) {
            Ok(job) if job.size == 1 => {
                tracing::warn!(
                    "PMIx is not usable ({reason}); a job of one rank goes on without it"
                );
                Ok(Bootstrap {
                    job,
                    timeout,
                    pmix: None,
                })
            }
            _ => Err(BootstrapError::PmixUnavailable {
                namespace,
                rank,
                reason,
            }),
        }
    }

    /// Who this rank is.
    pub fn job(&self) -> &JobEnv {
        &self.job
    }

    /// How the addresses are exchanged: `"PMIx"` or `"rank 0"`.
    pub fn via(&self) -> &'static str {
        if self.pmix.is_some() {
            "PMIx"
        } else {
            "rank 0"
        }
    }

    /// The address to bind the data socket to. Through PMIx: chosen after a first fence (every
    /// rank must call this, or [`Bootstrap::exchange_addresses`], which calls it). Otherwise
    /// `NICMSG_BIND_IP`, or `None`: the caller chooses.
    pub fn bind_ip(&mut self) -> Result<Option<IpAddr>, BootstrapError> {
        match &mut self.pmix {
            Some(session) => session.bind_ip(&self.job).map(Some),
            None => Ok(self.job.bind_ip),
        }
    }

    /// Every rank's address (index = rank), given this rank's (bound where
    /// [`Bootstrap::bind_ip`] says); see [`crate::exchange_addresses`].
    pub fn exchange_addresses(self, mine: RankAddress) -> Result<Vec<RankAddress>, BootstrapError> {
        match self.pmix {
            Some(session) => session.exchange(&self.job, mine),
            None => exchange_addresses(&self.job, mine, self.timeout),
        }
    }

    /// [`Bootstrap::exchange_addresses`] for ranks with no Ethernet address to give.
    pub fn exchange(self, mine: SocketAddr) -> Result<Vec<SocketAddr>, BootstrapError> {
        let table = self.exchange_addresses(RankAddress::new(mine))?;
        Ok(table.into_iter().map(|a| a.data).collect())
    }
}

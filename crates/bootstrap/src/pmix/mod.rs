//! The address exchange through PMIx, for ranks started by a PMIx launcher (Open MPI's
//! `mpirun`, `prterun`, `srun --mpi=pmix`).
//!
//! 1. `PMIx_Init` names the rank and its job (the namespace); the job's size is PMIx's
//!    `pmix.job.size`.
//! 2. Every rank publishes its **host record** (its host's name, its network namespace and its
//!    IPv4 addresses; [`record`]) and meets the others in a collecting fence. Each rank then
//!    reads every rank's record and chooses its bind address ([`choose`]): loopback when the
//!    whole job shares its network namespace, else its address on the first network of rank
//!    0's that reaches every host.
//! 3. The caller binds its data socket there; every rank publishes its **address record** (data
//!    address and Ethernet address), meets the others in a second fence and reads every rank's
//!    record: the table [`crate::exchange_addresses`] gives through rank 0 otherwise.
//! 4. `PMIx_Finalize`.
//!
//! Every fence and get carries `PMIX_TIMEOUT` (the bootstrap timeout), so a rank that never
//! comes makes the others fail with an error instead of waiting for ever.

pub(crate) mod choose;
pub(crate) mod record;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use nicmsg_pmix::Client;

use crate::{BootstrapError, JobEnv, RankAddress};
use choose::Choice;
use record::{HostRecord, InterfaceAddress};

/// Most ranks a job bootstrapped through PMIx may have. Every rank reads every rank's two
/// records (2 x 16384 `PMIx_Get`s, answered from the node's store after the collecting fence)
/// and keeps the host records while it chooses (at most 32 MiB at this bound, see
/// [`record::MAX_HOST_RECORD`]); nicmsg's default eager pool admits no larger job anyway
/// (`EAGER_POOL_MAX_BYTES` of the library's options).
pub const MAX_RANKS: u32 = 16384;

/// The PMIx keys of the two records; the number is the records' version, so that ranks of
/// different versions fail on a missing key (after the timeout) instead of misreading.
const HOST_KEY: &str = "nicmsg.host.1";
const ADDR_KEY: &str = "nicmsg.addr.1";

/// Why PMIx could not start.
pub(crate) enum StartError {
    /// The library is missing or `PMIx_Init` refused: nicmsg's own bootstrap may stand in.
    Unavailable(String),
    /// PMIx runs but the job it describes cannot be bootstrapped.
    Failed(BootstrapError),
}

/// A rank's PMIx session, from `PMIx_Init` to `PMIx_Finalize` (when dropped at the latest).
pub(crate) struct Session {
    client: Client,
    timeout: Duration,
    /// The bind address, once chosen (after the first fence).
    choice: Option<Choice>,
}

impl Session {
    /// Connects to the launcher's PMIx server and reads the job; `explicit_bind` is
    /// `NICMSG_BIND_IP`, `job_id` the job id nicmsg derives from the environment.
    pub(crate) fn start(
        job_id: u32,
        explicit_bind: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<(Session, JobEnv), StartError> {
        let client = Client::init().map_err(|e| StartError::Unavailable(e.to_string()))?;
        let rank = client.rank();
        let failed = |during: &'static str, reason: String| {
            StartError::Failed(BootstrapError::Pmix {
                rank,
                during,
                reason,
            })
        };
        let size = client
            .job_size(timeout)
            .map_err(|e| failed("reading the job's size", e.to_string()))?;
        if size == 0 || rank >= size {
            return Err(failed(
                "reading the job's size",
                format!("PMIx gives rank {rank} in a job of {size} ranks"),
            ));
        }
        if size > MAX_RANKS {
            return Err(StartError::Failed(BootstrapError::TooManyRanks {
                size,
                max: MAX_RANKS,
            }));
        }
        tracing::info!(
            "bootstrap via PMIx: rank {rank} of {size} in namespace {} (job id {job_id})",
            client.namespace()
        );
        let job = JobEnv {
            rank,
            size,
            job: job_id,
            bootstrap: None,
            bind_ip: explicit_bind,
        };
        // A job of one rank has nobody to exchange with: no fences at all.
        let choice = (size == 1)
            .then(|| explicit_bind.map_or(Choice::Loopback { ranks: 1 }, Choice::Explicit));
        Ok((
            Session {
                client,
                timeout,
                choice,
            },
            job,
        ))
    }

    /// The address to bind the data socket to: after the first fence, every rank's host record
    /// read and the choice made (or `NICMSG_BIND_IP`, which every rank still publishes and
    /// fences for, so that the fences of all ranks match).
    pub(crate) fn bind_ip(&mut self, job: &JobEnv) -> Result<IpAddr, BootstrapError> {
        if let Some(choice) = &self.choice {
            return Ok(choice.ip());
        }
        let started = Instant::now();
        let mine = local_host_record();
        tracing::debug!(
            host = %mine.host,
            net = ?mine.net,
            addresses = mine.addresses.len(),
            "publishing this rank's host record"
        );
        self.publish(job, HOST_KEY, &mine.encode())?;
        let records = self.read_all(job, HOST_KEY, &mine, HostRecord::decode)?;
        let choice = match job.bind_ip {
            Some(ip) => Choice::Explicit(ip),
            None => choose::choose(job.rank as usize, &records).map_err(|reason| {
                BootstrapError::NoNetwork {
                    rank: job.rank,
                    reason,
                }
            })?,
        };
        tracing::info!(
            "rank {}: bind address chosen after the PMIx fence of host records ({} ms): \
             {choice}",
            job.rank,
            started.elapsed().as_millis()
        );
        let ip = choice.ip();
        self.choice = Some(choice);
        Ok(ip)
    }

    /// Every rank's address (index = rank), through the second fence; then `PMIx_Finalize`.
    pub(crate) fn exchange(
        mut self,
        job: &JobEnv,
        mut mine: RankAddress,
    ) -> Result<Vec<RankAddress>, BootstrapError> {
        let bind = self.bind_ip(job)?;
        if mine.data.ip().is_unspecified() {
            mine.data = SocketAddr::new(bind, mine.data.port());
        }
        let table = if job.size == 1 {
            vec![mine]
        } else {
            let started = Instant::now();
            self.publish(job, ADDR_KEY, &record::encode_address(mine))?;
            let table = self.read_all(job, ADDR_KEY, &mine, record::decode_address)?;
            tracing::info!(
                "rank {}: addresses of all {} ranks exchanged via PMIx fence ({} ms); data \
                 address {}",
                job.rank,
                job.size,
                started.elapsed().as_millis(),
                mine.data
            );
            table
        };
        self.client.finalize().map_err(|e| BootstrapError::Pmix {
            rank: job.rank,
            during: "finalizing",
            reason: e.to_string(),
        })?;
        Ok(table)
    }

    /// Put, commit and the collecting fence.
    fn publish(&self, job: &JobEnv, key: &'static str, text: &str) -> Result<(), BootstrapError> {
        let failed = |during: &'static str| {
            let rank = job.rank;
            let timeout = self.timeout;
            move |e: nicmsg_pmix::Error| BootstrapError::Pmix {
                rank,
                during,
                reason: if e.is_timeout() {
                    format!(
                        "{e}: not every rank of the job reached the bootstrap within {timeout:?} \
                         (did one fail to start, or is it not a nicmsg program?)"
                    )
                } else {
                    e.to_string()
                },
            }
        };
        self.client
            .put(key, text)
            .map_err(failed("publishing its record"))?;
        self.client
            .commit()
            .map_err(failed("committing its record"))?;
        self.client
            .fence(self.timeout)
            .map_err(failed("waiting in the fence for every rank"))
    }

    /// Every rank's record under `key`, decoded; this rank's own is `mine`.
    fn read_all<T: Clone>(
        &self,
        job: &JobEnv,
        key: &'static str,
        mine: &T,
        decode: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Vec<T>, BootstrapError> {
        (0..job.size)
            .map(|rank| {
                if rank == job.rank {
                    return Ok(mine.clone());
                }
                let text =
                    self.client
                        .get(rank, key, self.timeout)
                        .map_err(|e| BootstrapError::Pmix {
                            rank: job.rank,
                            during: "reading the records of the other ranks",
                            reason: e.to_string(),
                        })?;
                decode(&text).map_err(|why| BootstrapError::Pmix {
                    rank: job.rank,
                    during: "reading the records of the other ranks",
                    reason: format!(
                        "rank {rank}'s {key} is unusable ({why}); do all ranks run the same \
                         nicmsg?"
                    ),
                })
            })
            .collect()
    }
}

/// This rank's host record: its host's name, its network namespace and its IPv4 addresses.
fn local_host_record() -> HostRecord {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let host = read("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    // The kernel's boot id and the inode of this process's network namespace ("net:[N]")
    // name the namespace uniquely on every machine.
    let namespace = std::fs::read_link("/proc/self/ns/net")
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
        .and_then(|link| {
            let inode = link.strip_prefix("net:[")?.strip_suffix(']')?;
            inode.parse::<u64>().ok()
        });
    let boot = read("/proc/sys/kernel/random/boot_id");
    let net = match (boot, namespace) {
        (Some(boot), Some(inode)) => record::clean_net_id(&format!("{}/{inode}", boot.trim())),
        _ => None,
    };
    let mut addresses: Vec<InterfaceAddress> = match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces
            .into_iter()
            .filter(|i| i.oper_status != if_addrs::IfOperStatus::Down)
            .filter_map(|i| match i.addr {
                if_addrs::IfAddr::V4(a) if !a.ip.is_loopback() => Some(InterfaceAddress {
                    interface: record::clean_interface_name(&i.name),
                    ip: a.ip,
                    prefix: u32::from(a.netmask).leading_ones() as u8,
                }),
                _ => None,
            })
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "cannot list this host's network interfaces");
            Vec::new()
        }
    };
    if addresses.len() > record::MAX_ADDRESSES {
        tracing::warn!(
            "this host has {} IPv4 addresses; only the first {} are published",
            addresses.len(),
            record::MAX_ADDRESSES
        );
        addresses.truncate(record::MAX_ADDRESSES);
    }
    HostRecord {
        host: record::clean_host_name(&host),
        net,
        addresses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_a_publishable_record() {
        let mine = local_host_record();
        assert!(mine.net.is_some(), "no namespace identity: {mine:?}");
        assert_eq!(HostRecord::decode(&mine.encode()).unwrap(), mine);
        assert!(mine.addresses.iter().all(|a| !a.ip.is_loopback()));
    }
}

//! Rank, size and job identity from the launcher's environment variables.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::BootstrapError;

/// What a rank knows about its job before any communication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    /// This process's rank, `0..size`.
    pub rank: u32,
    /// Number of ranks in the job (at least 1).
    pub size: u32,
    /// Job id: every rank of one job has the same one; frames and bootstrap hellos of other jobs
    /// are rejected. From `NICMSG_JOB`, else a hash of the launcher's job id, else 1.
    pub job: u32,
    /// Rank 0's bootstrap service (`NICMSG_BOOTSTRAP=host:port`); needed when `size > 1`.
    pub bootstrap: Option<SocketAddr>,
    /// Local address to bind the data socket to (`NICMSG_BIND_IP`); `None`: the library chooses.
    pub bind_ip: Option<IpAddr>,
}

/// One launcher convention: the variable with the rank and the ones that may hold the size.
struct Source {
    rank_var: &'static str,
    size_vars: &'static [&'static str],
}

/// The order in which launcher conventions are tried; the first whose rank variable is set wins.
const SOURCES: &[Source] = &[
    // nicmsg run, or set by hand.
    Source {
        rank_var: "NICMSG_RANK",
        size_vars: &["NICMSG_SIZE"],
    },
    // PMIx launchers (Open MPI 5 prterun/mpirun, srun --mpi=pmix).
    Source {
        rank_var: "PMIX_RANK",
        size_vars: &["OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS"],
    },
    // Open MPI's mpirun (ORTE/PRRTE).
    Source {
        rank_var: "OMPI_COMM_WORLD_RANK",
        size_vars: &["OMPI_COMM_WORLD_SIZE"],
    },
    // MPICH/Intel MPI Hydra (PMI-1/PMI-2).
    Source {
        rank_var: "PMI_RANK",
        size_vars: &["PMI_SIZE"],
    },
    // Slurm's srun.
    Source {
        rank_var: "SLURM_PROCID",
        size_vars: &["SLURM_NTASKS"],
    },
];

/// Variables whose value identifies a launcher job; the first one set is hashed into the job id
/// when `NICMSG_JOB` is not set.
const JOB_ID_VARS: &[&str] = &[
    "SLURM_JOB_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "LSB_JOBID",
    "PBS_JOBID",
];

/// Reads the job from the process environment. See [`job_from_lookup`].
pub fn job_from_env() -> Result<JobEnv, BootstrapError> {
    job_from_lookup(|name| std::env::var(name).ok())
}

/// Reads the job from `lookup` (a variable name to its value; `None` when unset).
///
/// Empty values count as unset; surrounding whitespace is ignored.
///
/// * rank and size, from the first of these whose rank variable is set:
///   `NICMSG_RANK`/`NICMSG_SIZE`; `PMIX_RANK` with the size from `OMPI_COMM_WORLD_SIZE`,
///   `PMIX_SIZE` or `SLURM_NTASKS`; `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`;
///   `PMI_RANK`/`PMI_SIZE`; `SLURM_PROCID`/`SLURM_NTASKS`;
/// * job: `NICMSG_JOB` (a `u32`), else a hash of the first of `SLURM_JOB_ID` (with
///   `SLURM_STEP_ID`), `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`, `LSB_JOBID`, `PBS_JOBID`,
///   else 1;
/// * bootstrap: `NICMSG_BOOTSTRAP=host:port` (a name is resolved now; the first address wins);
/// * bind ip: `NICMSG_BIND_IP`.
pub fn job_from_lookup<F>(lookup: F) -> Result<JobEnv, BootstrapError>
where
    F: Fn(&str) -> Option<String>,
{
    let get = trimmed(lookup);
    let (rank, size) = rank_and_size(&get)?;
    let job = job_id(&get)?;
    let bootstrap = match get("NICMSG_BOOTSTRAP") {
        None => None,
        Some(value) => Some(resolve_bootstrap(&value)?),
    };
    let bind_ip = bind_ip(&get)?;
    Ok(JobEnv {
        rank,
        size,
        job,
        bootstrap,
        bind_ip,
    })
}

/// `lookup` with values trimmed, and empty ones counted as unset.
pub(crate) fn trimmed<F>(lookup: F) -> impl Fn(&str) -> Option<String>
where
    F: Fn(&str) -> Option<String>,
{
    move |name: &str| {
        lookup(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }
}

/// The PMIx launcher's namespace and rank (`PMIX_NAMESPACE`, `PMIX_RANK`) when this process
/// should bootstrap through PMIx: both are set, and neither `NICMSG_BOOTSTRAP` nor
/// `NICMSG_RANK` is (nicmsg's own settings win, so setting them forces the bootstrap through
/// rank 0's TCP service).
pub(crate) fn pmix_launcher(get: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    if get("NICMSG_BOOTSTRAP").is_some() || get("NICMSG_RANK").is_some() {
        return None;
    }
    Some((get("PMIX_NAMESPACE")?, get("PMIX_RANK")?))
}

/// `NICMSG_BIND_IP`.
pub(crate) fn bind_ip(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<IpAddr>, BootstrapError> {
    get("NICMSG_BIND_IP")
        .map(|value| {
            value
                .parse::<IpAddr>()
                .map_err(|_| BootstrapError::InvalidVar {
                    var: "NICMSG_BIND_IP",
                    value,
                    expected: "an IP address",
                })
        })
        .transpose()
}

fn rank_and_size(get: &dyn Fn(&str) -> Option<String>) -> Result<(u32, u32), BootstrapError> {
    let source = SOURCES
        .iter()
        .find(|s| get(s.rank_var).is_some())
        .ok_or(BootstrapError::NoRank)?;
    let rank_text = get(source.rank_var).expect("checked above");
    let rank = parse_u32(source.rank_var, &rank_text)?;
    let (size_var, size_text) = source
        .size_vars
        .iter()
        .find_map(|&v| get(v).map(|text| (v, text)))
        .ok_or_else(|| BootstrapError::MissingSize {
            rank_var: source.rank_var,
            rank: rank_text.clone(),
            size_vars: source.size_vars.join(" or "),
        })?;
    let size = parse_u32(size_var, &size_text)?;
    if size == 0 {
        return Err(BootstrapError::ZeroSize { size_var });
    }
    if rank >= size {
        return Err(BootstrapError::RankOutOfRange {
            rank_var: source.rank_var,
            rank,
            size_var,
            size,
        });
    }
    Ok((rank, size))
}

pub(crate) fn job_id(get: &dyn Fn(&str) -> Option<String>) -> Result<u32, BootstrapError> {
    if let Some(text) = get("NICMSG_JOB") {
        return parse_u32("NICMSG_JOB", &text);
    }
    for &var in JOB_ID_VARS {
        if let Some(mut value) = get(var) {
            if var == "SLURM_JOB_ID" {
                if let Some(step) = get("SLURM_STEP_ID") {
                    value = format!("{value}.{step}");
                }
            }
            // Never 0, so that 0 can mean "no job" to whoever wants it.
            return Ok(fnv1a(format!("{var}={value}").as_bytes()).max(1));
        }
    }
    Ok(1)
}

fn parse_u32(var: &'static str, text: &str) -> Result<u32, BootstrapError> {
    text.parse::<u32>().map_err(|_| BootstrapError::InvalidVar {
        var,
        value: text.to_owned(),
        expected: "a non-negative integer below 2^32",
    })
}

fn resolve_bootstrap(value: &str) -> Result<SocketAddr, BootstrapError> {
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bad = |reason: String| BootstrapError::BadBootstrap {
        value: value.to_owned(),
        reason,
    };
    if !value.contains(':') {
        return Err(bad("expected host:port (the port is missing)".into()));
    }
    let addrs: Vec<SocketAddr> = value
        .to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .collect();
    // Prefer IPv4: a name that resolves to both usually means the IPv4 one is routable.
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| bad("the name resolves to no address".into()))
}

/// 32-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job(vars: &[(&str, &str)]) -> Result<JobEnv, BootstrapError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        job_from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn nicmsg_vars() {
        let j = job(&[
            ("NICMSG_RANK", "2"),
            ("NICMSG_SIZE", "4"),
            ("NICMSG_JOB", "77"),
            ("NICMSG_BOOTSTRAP", "127.0.0.1:4000"),
            ("NICMSG_BIND_IP", "10.213.3.3"),
        ])
        .unwrap();
        assert_eq!(
            j,
            JobEnv {
                rank: 2,
                size: 4,
                job: 77,
                bootstrap: Some("127.0.0.1:4000".parse().unwrap()),
                bind_ip: Some("10.213.3.3".parse().unwrap()),
            }
        );
    }

    #[test]
    fn nicmsg_wins_over_launchers() {
        let j = job(&[
            ("NICMSG_RANK", "1"),
            ("NICMSG_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size), (1, 2));
    }

    #[test]
    fn pmix() {
        let j = job(&[
            ("PMIX_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "6"),
            ("PMIX_NAMESPACE", "prterun-host-1234@1"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size), (3, 6));
        assert_ne!(j.job, 1, "job id hashed from PMIX_NAMESPACE");
        let j = job(&[("PMIX_RANK", "0"), ("PMIX_SIZE", "2")]).unwrap();
        assert_eq!((j.rank, j.size, j.job), (0, 2, 1));
        // srun --mpi=pmix: the size comes from Slurm.
        let j = job(&[("PMIX_RANK", "1"), ("SLURM_NTASKS", "2")]).unwrap();
        assert_eq!((j.rank, j.size), (1, 2));
        // PMIX_RANK wins over the Slurm rank.
        let j = job(&[
            ("PMIX_RANK", "1"),
            ("PMIX_SIZE", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
        ])
        .unwrap();
        assert_eq!(j.rank, 1);
        let e = job(&[("PMIX_RANK", "1")]).unwrap_err().to_string();
        assert_eq!(
            e,
            "PMIX_RANK=1 is set but the job size is not: set OMPI_COMM_WORLD_SIZE or PMIX_SIZE or \
             SLURM_NTASKS"
        );
    }

    #[test]
    fn open_mpi() {
        let j = job(&[
            ("OMPI_COMM_WORLD_RANK", "7"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_MCA_ess_base_jobid", "123456"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size), (7, 8));
        assert_ne!(j.job, 1);
    }

    #[test]
    fn pmi_hydra() {
        let j = job(&[("PMI_RANK", "0"), ("PMI_SIZE", "3")]).unwrap();
        assert_eq!((j.rank, j.size, j.job), (0, 3, 1));
        assert_eq!(j.bootstrap, None);
        assert_eq!(j.bind_ip, None);
    }

    #[test]
    fn slurm() {
        let a = job(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap();
        assert_eq!((a.rank, a.size), (5, 16));
        let b = job(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap();
        let other_step = job(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "1"),
        ])
        .unwrap();
        assert_eq!(a.job, b.job, "same job, same id on every rank");
        assert_ne!(a.job, other_step.job, "job steps differ");
        assert_ne!(a.job, 1);
    }

    #[test]
    fn nicmsg_job_overrides_launcher_job() {
        let j = job(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_ID", "4242"),
            ("NICMSG_JOB", "9"),
        ])
        .unwrap();
        assert_eq!(j.job, 9);
    }

    #[test]
    fn errors_name_the_variables() {
        let e = |vars: &[(&str, &str)]| job(vars).unwrap_err().to_string();
        assert_eq!(
            e(&[]),
            "no rank in the environment: run under `nicmsg run`, mpirun, srun, or set \
             NICMSG_RANK/NICMSG_SIZE/NICMSG_BOOTSTRAP"
        );
        assert_eq!(
            e(&[("NICMSG_RANK", "7"), ("NICMSG_SIZE", "4")]),
            "NICMSG_RANK=7 is not below NICMSG_SIZE=4"
        );
        assert_eq!(
            e(&[("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")]),
            "SLURM_PROCID=4 is not below SLURM_NTASKS=4"
        );
        assert_eq!(
            e(&[("NICMSG_RANK", "0")]),
            "NICMSG_RANK=0 is set but the job size is not: set NICMSG_SIZE"
        );
        assert_eq!(
            e(&[("NICMSG_RANK", "x1"), ("NICMSG_SIZE", "4")]),
            "NICMSG_RANK=\"x1\" is not a non-negative integer below 2^32"
        );
        assert_eq!(
            e(&[("NICMSG_RANK", "0"), ("NICMSG_SIZE", "-2")]),
            "NICMSG_SIZE=\"-2\" is not a non-negative integer below 2^32"
        );
        assert_eq!(
            e(&[("PMI_RANK", "0"), ("PMI_SIZE", "0")]),
            "PMI_SIZE=0: a job needs at least one rank"
        );
        assert_eq!(
            e(&[
                ("NICMSG_RANK", "0"),
                ("NICMSG_SIZE", "1"),
                ("NICMSG_JOB", "big")
            ]),
            "NICMSG_JOB=\"big\" is not a non-negative integer below 2^32"
        );
        assert_eq!(
            e(&[
                ("NICMSG_RANK", "0"),
                ("NICMSG_SIZE", "1"),
                ("NICMSG_BIND_IP", "10.0.0")
            ]),
            "NICMSG_BIND_IP=\"10.0.0\" is not an IP address"
        );
        assert!(e(&[
            ("NICMSG_RANK", "0"),
            ("NICMSG_SIZE", "1"),
            ("NICMSG_BOOTSTRAP", "127.0.0.1")
        ])
        .starts_with("NICMSG_BOOTSTRAP=\"127.0.0.1\" is not a usable host:port"));
    }

    #[test]
    fn empty_and_blank_values_count_as_unset() {
        let j = job(&[
            ("NICMSG_RANK", ""),
            ("NICMSG_SIZE", ""),
            ("SLURM_PROCID", " 1 "),
            ("SLURM_NTASKS", "2\n"),
            ("NICMSG_BOOTSTRAP", ""),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size, j.bootstrap), (1, 2, None));
    }

    #[test]
    fn pmix_is_used_only_under_a_pmix_launcher_without_nicmsg_settings() {
        let launcher = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            pmix_launcher(&trimmed(move |k: &str| map.get(k).cloned()))
        };
        let pmix = [("PMIX_NAMESPACE", "1062666241"), ("PMIX_RANK", "3")];
        assert_eq!(
            launcher(&pmix),
            Some(("1062666241".to_string(), "3".to_string()))
        );
        assert_eq!(launcher(&pmix[..1]), None, "no rank");
        assert_eq!(launcher(&pmix[1..]), None, "no namespace");
        assert_eq!(launcher(&[("OMPI_COMM_WORLD_RANK", "0")]), None);
        for nicmsg in ["NICMSG_BOOTSTRAP", "NICMSG_RANK"] {
            let mut vars = pmix.to_vec();
            vars.push((nicmsg, "1"));
            assert_eq!(launcher(&vars), None, "{nicmsg} wins");
            vars.pop();
            vars.push((nicmsg, " "));
            assert!(
                launcher(&vars).is_some(),
                "an empty {nicmsg} counts as unset"
            );
        }
    }

    #[test]
    fn bootstrap_by_name_and_ipv6() {
        let j = job(&[
            ("NICMSG_RANK", "0"),
            ("NICMSG_SIZE", "2"),
            ("NICMSG_BOOTSTRAP", "localhost:5000"),
        ])
        .unwrap();
        let addr = j.bootstrap.unwrap();
        assert!(addr.ip().is_loopback());
        assert_eq!(addr.port(), 5000);
        let j = job(&[
            ("NICMSG_RANK", "0"),
            ("NICMSG_SIZE", "2"),
            ("NICMSG_BOOTSTRAP", "[::1]:5000"),
            ("NICMSG_BIND_IP", "::1"),
        ])
        .unwrap();
        assert_eq!(j.bootstrap, Some("[::1]:5000".parse().unwrap()));
        assert_eq!(j.bind_ip, Some("::1".parse().unwrap()));
    }
}

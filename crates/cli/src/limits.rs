//! Whether this machine can start a job of `N` ranks, checked before the first rank starts: a
//! limit hit half-way used to show only after the launcher had started thousands of ranks
//! (`-n 100000`: 28 s, then "Resource temporarily unavailable (os error 11)").
//!
//! What a rank costs, counted here:
//!
//! * tasks (processes and threads, what the kernel's limits count): the rank's process, its
//!   engine thread in thread mode, and the launcher's two threads forwarding its stdout and
//!   stderr ([`crate::output::forward`]);
//! * file descriptors of the launcher: the read ends of the rank's stdout and stderr pipes
//!   (the write ends, `/dev/null` for stdin and the exec-error pipe of the rank being started
//!   are closed once it runs).
//!
//! The limits: a fixed cap of [`MAX_LOCAL_RANKS`], `RLIMIT_NOFILE` of the launcher,
//! `RLIMIT_NPROC` of the user (counting the tasks the user already runs; not enforced for root or
//! with `CAP_SYS_ADMIN`/`CAP_SYS_RESOURCE`), the control group's `pids.max`, and the kernel's
//! `threads-max` and `pid_max` against every task already running. Programs that start more
//! threads or processes of their own need more than counted.

use std::fs;
use std::path::{Path, PathBuf};

/// Most ranks `nicmsg run` starts on one machine (without `--netns`, whose subnet allows 254).
/// Each rank is a process with one or two busy threads and the launcher forwards its output
/// with two more: 4096 ranks oversubscribe even a 256-core machine 16 times over, and are
/// 12,000 to 16,000 tasks. Larger jobs belong on a cluster (mpirun, srun; `docs/launcher.md`).
pub const MAX_LOCAL_RANKS: u32 = 4096;
/// Threads the launcher runs per rank: one forwarding each of its output streams.
pub const LAUNCHER_THREADS_PER_RANK: u64 = 2;
/// File descriptors the launcher keeps open per running rank: its stdout and stderr pipes.
pub const FDS_PER_RANK: u64 = 2;
/// File descriptors of the launcher besides: its stdin/stdout/stderr, those of the rank being
/// started (two pipe write ends, `/dev/null`, the exec-error pipe), the bootstrap port probe,
/// and slack for the allocator, the terminal and the netns tools.
pub const FDS_BESIDES_RANKS: u64 = 16;
/// Pids below this are not handed out again once the kernel wraps around (`RESERVED_PIDS`).
const RESERVED_PIDS: u64 = 300;

/// What was measured on this machine; `None` where a limit does not apply or is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    /// `RLIMIT_NOFILE` of the launcher: soft, and hard (`None`: unlimited).
    pub nofile: Option<(u64, Option<u64>)>,
    /// `RLIMIT_NPROC` (soft) when the kernel enforces it for this user.
    pub nproc: Option<u64>,
    /// Tasks (processes and threads) the user runs now, the launcher included.
    pub user_tasks: u64,
    /// The user's id, for the message.
    pub uid: u32,
    /// Tasks running on the machine now (`/proc/loadavg`).
    pub system_tasks: Option<u64>,
    /// `kernel.threads-max`.
    pub threads_max: Option<u64>,
    /// `kernel.pid_max`.
    pub pid_max: Option<u64>,
    /// The tightest `pids.max` of this process's control group and its ancestors, with the
    /// tasks counted there now (`pids.current`).
    pub cgroup_pids: Option<(u64, u64)>,
}

impl Machine {
    /// Reads the limits and counts of this machine (a scan of `/proc` for the user's tasks).
    pub fn measure() -> Machine {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let nofile = rlimit(libc::RLIMIT_NOFILE).and_then(|(soft, hard)| soft.map(|s| (s, hard)));
        let nproc = rlimit(libc::RLIMIT_NPROC)
            .and_then(|(soft, _)| soft)
            .filter(|_| nproc_enforced(uid));
        Machine {
            nofile,
            nproc,
            user_tasks: user_tasks(uid),
            uid,
            system_tasks: system_tasks(),
            threads_max: read_number("/proc/sys/kernel/threads-max"),
            pid_max: read_number("/proc/sys/kernel/pid_max"),
            cgroup_pids: cgroup_pids(),
        }
    }
}

/// Refuses `ranks` ranks, each of `threads_per_rank` threads (1, or 2 with an engine thread),
/// if `machine` cannot start them; the message says which limit and how many ranks would fit.
pub fn check(ranks: u32, threads_per_rank: u64, machine: &Machine) -> Result<(), String> {
    if ranks > MAX_LOCAL_RANKS {
        return Err(format!(
            "at most {MAX_LOCAL_RANKS} ranks run on one machine (each is a process of one or \
             two busy threads, and the launcher forwards its output with two more); start \
             larger jobs across machines with mpirun or srun (docs/launcher.md)"
        ));
    }
    let n = u64::from(ranks);
    if let Some((soft, hard)) = machine.nofile {
        let needed = n * FDS_PER_RANK + FDS_BESIDES_RANKS;
        if needed > soft {
            let fit = soft.saturating_sub(FDS_BESIDES_RANKS) / FDS_PER_RANK;
            let raise = match hard {
                Some(hard) if hard == soft => " (ulimit -n, also the hard limit)".to_owned(),
                Some(hard) if hard < needed => format!(
                    " (ulimit -n); the hard limit of {hard} allows at most {} ranks",
                    hard.saturating_sub(FDS_BESIDES_RANKS) / FDS_PER_RANK
                ),
                _ => format!("; raise it with `ulimit -n {needed}`"),
            };
            return Err(format!(
                "the launcher needs {needed} file descriptors ({FDS_PER_RANK} output pipes per \
                 rank), above its limit of {soft}, enough for {fit} ranks{raise}"
            ));
        }
    }
    let per_rank = threads_per_rank + LAUNCHER_THREADS_PER_RANK;
    let needed = n * per_rank;
    let what = format!(
        "{needed} more processes and threads ({per_rank} per rank: the rank{}, and the \
         launcher's {LAUNCHER_THREADS_PER_RANK} threads forwarding its output)",
        if threads_per_rank > 1 {
            " and its engine thread"
        } else {
            ""
        }
    );
    let fit = |allowed: u64, used: u64| allowed.saturating_sub(used) / per_rank;
    if let Some(limit) = machine.nproc {
        if machine.user_tasks + needed > limit {
            return Err(format!(
                "the job needs {what}, but user {} already runs {} of the {limit} that \
                 RLIMIT_NPROC allows (ulimit -u), enough for {} ranks",
                machine.uid,
                machine.user_tasks,
                fit(limit, machine.user_tasks)
            ));
        }
    }
    if let Some((max, current)) = machine.cgroup_pids {
        if current + needed > max {
            return Err(format!(
                "the job needs {what}, but the launcher's control group allows {max} (pids.max) \
                 and {current} run there already, enough for {} ranks",
                fit(max, current)
            ));
        }
    }
    if let Some(running) = machine.system_tasks {
        if let Some(max) = machine.threads_max {
            if running + needed > max {
                return Err(format!(
                    "the job needs {what}, but the kernel allows {max} in all \
                     (kernel.threads-max) and {running} run already, enough for {} ranks",
                    fit(max, running)
                ));
            }
        }
        if let Some(pid_max) = machine.pid_max {
            let pids = pid_max.saturating_sub(RESERVED_PIDS);
            if running + needed > pids {
                return Err(format!(
                    "the job needs {what}, but the kernel has {pids} process ids to give \
                     (kernel.pid_max {pid_max}) and {running} are taken, enough for {} ranks",
                    fit(pids, running)
                ));
            }
        }
    }
    Ok(())
}

/// `(soft, hard)`, `None` meaning unlimited; `None` if it cannot be read.
fn rlimit(resource: libc::__rlimit_resource_t) -> Option<(Option<u64>, Option<u64>)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills in the struct we pass.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return None;
    }
    // rlim_t is u64 here, u32 on some targets.
    #[allow(clippy::unnecessary_cast)]
    let finite = |value: libc::rlim_t| (value != libc::RLIM_INFINITY).then_some(value as u64);
    Some((finite(limit.rlim_cur), finite(limit.rlim_max)))
}

/// Whether the kernel holds this user's new tasks to `RLIMIT_NPROC`: not for root, nor with
/// `CAP_SYS_ADMIN` or `CAP_SYS_RESOURCE` in effect (`copy_process`).
fn nproc_enforced(uid: u32) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_SYS_RESOURCE: u32 = 24;
    if uid == 0 {
        return false;
    }
    let effective = fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    });
    match effective {
        Some(caps) => caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) == 0,
        None => true,
    }
}

/// Tasks of processes whose real user is `uid` (`Uid:` and `Threads:` of `/proc/PID/status`).
fn user_tasks(uid: u32) -> u64 {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut tasks = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may end while we look: skip it.
        let Ok(status) = fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            tasks += field("Threads:").unwrap_or(1);
        }
    }
    tasks
}

/// Tasks running on the machine: the number after the `/` in `/proc/loadavg`.
fn system_tasks() -> Option<u64> {
    let text = fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace()
        .nth(3)?
        .split('/')
        .nth(1)?
        .parse()
        .ok()
}

fn read_number(path: impl AsRef<Path>) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The tightest `(pids.max, pids.current)` of this process's control group and its ancestors,
/// cgroup v2 (`0::PATH`) or the v1 pids controller (`N:pids:PATH`).
fn cgroup_pids() -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut dirs = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let root = if controllers.is_empty() {
            PathBuf::from("/sys/fs/cgroup")
        } else if controllers.split(',').any(|c| c == "pids") {
            PathBuf::from("/sys/fs/cgroup/pids")
        } else {
            continue;
        };
        let mut dir = root.join(path.trim_start_matches('/'));
        loop {
            dirs.push(dir.clone());
            if dir == root || !dir.pop() {
                break;
            }
        }
    }
    dirs.iter()
        .filter_map(|dir| {
            let max = read_number(dir.join("pids.max"))?;
            let current = read_number(dir.join("pids.current")).unwrap_or(0);
            Some((max, current))
        })
        .min_by_key(|&(max, current)| max.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roomy() -> Machine {
        Machine {
            nofile: Some((1024, Some(524288))),
            nproc: Some(60000),
            user_tasks: 100,
            uid: 1000,
            system_tasks: Some(500),
            threads_max: Some(120000),
            pid_max: Some(4194304),
            cgroup_pids: Some((20000, 300)),
        }
    }

    #[test]
    fn a_job_that_fits_passes() {
        assert_eq!(check(4, 2, &roomy()), Ok(()));
        assert_eq!(check(500, 2, &roomy()), Ok(()));
        assert_eq!(check(1, 1, &Machine::default()), Ok(()));
    }

    #[test]
    fn more_than_the_cap_is_refused() {
        let why = check(MAX_LOCAL_RANKS + 1, 1, &Machine::default()).unwrap_err();
        assert!(
            why.starts_with("at most 4096 ranks run on one machine"),
            "{why}"
        );
        assert!(check(100_000, 1, &roomy()).is_err());
    }

    #[test]
    fn each_limit_is_named_with_the_ranks_that_fit() {
        let m = roomy();
        // 1024 descriptors: (1024 - 16) / 2 = 504 ranks.
        let why = check(505, 1, &m).unwrap_err();
        assert!(
            why.contains("needs 1026 file descriptors")
                && why.contains("limit of 1024, enough for 504 ranks")
                && why.ends_with("; raise it with `ulimit -n 1026`"),
            "{why}"
        );
        let low_hard = Machine {
            nofile: Some((256, Some(512))),
            ..roomy()
        };
        let why = check(400, 1, &low_hard).unwrap_err();
        assert!(
            why.contains("(ulimit -n); the hard limit of 512 allows at most 248 ranks"),
            "{why}"
        );
        let fixed = Machine {
            nofile: Some((256, Some(256))),
            ..roomy()
        };
        let why = check(400, 1, &fixed).unwrap_err();
        assert!(
            why.ends_with("enough for 120 ranks (ulimit -n, also the hard limit)"),
            "{why}"
        );

        let nproc = Machine {
            nproc: Some(400),
            ..roomy()
        };
        // 400 - 100 running = 300 tasks, 4 per rank with an engine thread.
        let why = check(76, 2, &nproc).unwrap_err();
        assert!(
            why.contains(
                "needs 304 more processes and threads (4 per rank: the rank and its engine thread"
            ) && why.contains("user 1000 already runs 100 of the 400 that RLIMIT_NPROC allows")
                && why.contains("enough for 75 ranks"),
            "{why}"
        );
        assert_eq!(check(75, 2, &nproc), Ok(()));
        assert_eq!(
            check(100, 1, &nproc),
            Ok(()),
            "3 per rank without an engine thread"
        );

        let cgroup = Machine {
            cgroup_pids: Some((1000, 700)),
            ..roomy()
        };
        let why = check(101, 2, &cgroup).unwrap_err();
        assert!(
            why.contains("control group allows 1000 (pids.max) and 700 run there already, enough for 75 ranks"),
            "{why}"
        );
        let threads = Machine {
            threads_max: Some(1500),
            ..roomy()
        };
        let why = check(300, 2, &threads).unwrap_err();
        assert!(why.contains("kernel.threads-max"), "{why}");
        let pids = Machine {
            pid_max: Some(1800),
            ..roomy()
        };
        let why = check(300, 2, &pids).unwrap_err();
        assert!(
            why.contains("1500 process ids to give (kernel.pid_max 1800) and 500 are taken, enough for 250 ranks"),
            "{why}"
        );
    }

    #[test]
    fn this_machine_can_be_measured() {
        let m = Machine::measure();
        assert!(m.user_tasks >= 1, "this test runs as the user: {m:?}");
        assert!(m.nofile.is_some(), "{m:?}");
    }
}

//! `--netns`: one network namespace per rank, joined by a bridge in a namespace of its own.
//!
//! ```text
//!   namespace nicmsg-<pid>-br          namespace nicmsg-<pid>-<r>
//!   +--------------------------+       +----------------------------------+
//!   | bridge nmb<pid>          |       | eth0  10.213.<pid % 250>.<r+1>/24 |
//!   |   nft forward drop       |       |       mtu, tbf (--rate)          |
//!   |     (--loss)             |       |                                  |
//!   |   port v<r>  <-----------+ veth -+->                                |
//!   |     tbf (--rate)         |       | lo    127.0.0.1                  |
//!   |   ...                    |       |                                  |
//!   +--------------------------+       +----------------------------------+
//! ```
//!
//! Loss and the rate limit act where every frame passes whatever sent it: a rank using AF_XDP
//! takes frames from the wire before its own namespace's netfilter hooks and sends them past
//! its own qdisc, so those would miss its traffic. The bridge forwards every frame between two
//! ranks once, and each port's egress carries everything bound for its rank (a switch port). The
//! rank's own egress is limited too, so that a kernel sender is held back at its own queue as
//! on a real link, rather than only losing frames at the bridge.
//!
//! Nothing is created in the namespace the launcher runs in (the host's), so a job can neither
//! disturb the host's networking nor collide with another job: two jobs may even use the same
//! subnet. Everything is made with the `ip`, `tc` and `nft` commands. Deleting the namespaces
//! deletes the interfaces, qdiscs and nftables tables in them.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use thiserror::Error;

use crate::units::{Loss, Rate};

/// All namespaces of this launcher start with this.
pub const NS_PREFIX: &str = "nicmsg-";
/// The first two octets of every job's subnet; the third is the launcher's pid modulo 250.
pub const SUBNET_BASE: [u8; 2] = [10, 213];
/// Port of rank 0's bootstrap service inside its namespace (free: the namespace is private).
pub const BOOTSTRAP_PORT: u16 = 7470;
/// Ranks get .1 ..= .254 of the /24.
pub const MAX_RANKS: u32 = 254;
/// Name of each rank's interface to the bridge, inside the rank's namespace.
pub const RANK_IFACE: &str = "eth0";
/// `tbf latency`: how long a frame may wait in the rate limiter's queue before it is dropped.
pub const TBF_LATENCY_MS: u32 = 50;

/// A failure of one of the commands that build or remove the topology.
#[derive(Debug, Error)]
pub enum NetnsError {
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    MissingTool(String),
    #[error("cannot remove namespaces left behind by an earlier launcher: {0}")]
    Stale(String),
    /// The launcher got this signal while setting up; what was made is removed.
    #[error("interrupted by {} while setting up the namespaces", crate::signals::name(*.0))]
    Interrupted(i32),
}

/// The paths of the tools, found up front so that a missing one is reported before anything is
/// created.
#[derive(Debug, Clone)]
pub struct Tools {
    pub ip: PathBuf,
    pub tc: Option<PathBuf>,
    pub nft: Option<PathBuf>,
}

impl Tools {
    /// Finds `ip`, and `tc` when `need_tc`, and `nft` when `need_nft`.
    pub fn find(need_tc: bool, need_nft: bool) -> Result<Tools, NetnsError> {
        let ip = find_tool("ip").ok_or_else(|| {
            NetnsError::MissingTool(
                "--netns needs the `ip` command, which is not installed \
                 (apt-get install iproute2)"
                    .into(),
            )
        })?;
        let tc = if need_tc {
            Some(find_tool("tc").ok_or_else(|| {
                NetnsError::MissingTool(
                    "--rate needs the `tc` command, which is not installed \
                     (apt-get install iproute2)"
                        .into(),
                )
            })?)
        } else {
            None
        };
        let nft = if need_nft {
            Some(find_tool("nft").ok_or_else(|| {
                NetnsError::MissingTool(
                    "--loss needs the `nft` command (nftables), which is not installed: \
                     apt-get install nftables"
                        .into(),
                )
            })?)
        } else {
            None
        };
        Ok(Tools { ip, tc, nft })
    }
}

/// Looks for an executable in `PATH` and then in the sbin directories (which a non-login root
/// shell may lack in its `PATH`).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// What the topology should look like.
#[derive(Debug, Clone)]
pub struct Options {
    pub ranks: u32,
    pub mtu: u32,
    pub rate: Option<Rate>,
    pub loss: Option<Loss>,
}

/// A job's namespaces. Removed by [`Topology::cleanup`] or on drop.
#[derive(Debug)]
pub struct Topology {
    tools: Tools,
    pid: u32,
    ranks: u32,
    /// Namespaces created so far, in order of creation.
    created: Vec<String>,
}

impl Topology {
    /// Builds the topology for launcher `pid`. On failure everything created so far is removed
    /// again before the error is returned.
    pub fn create(tools: Tools, pid: u32, opts: &Options) -> Result<Topology, NetnsError> {
        assert!(opts.ranks >= 1 && opts.ranks <= MAX_RANKS);
        let mut topo = Topology {
            tools,
            pid,
            ranks: opts.ranks,
            created: Vec::new(),
        };
        match topo.build(opts) {
            Ok(()) => Ok(topo),
            Err(e) => {
                for problem in topo.cleanup() {
                    eprintln!("nicmsg run: warning: {problem}");
                }
                Err(e)
            }
        }
    }

    /// Name of the namespace holding the bridge.
    pub fn bridge_ns(&self) -> String {
        format!("{NS_PREFIX}{}-br", self.pid)
    }

    /// Name of the bridge (inside [`Self::bridge_ns`]).
    pub fn bridge(&self) -> String {
        format!("nmb{}", self.pid)
    }

    /// Name of rank `rank`'s namespace.
    pub fn rank_ns(&self, rank: u32) -> String {
        format!("{NS_PREFIX}{}-{rank}", self.pid)
    }

    /// The job's subnet, `10.213.<pid % 250>.0/24`.
    pub fn subnet(&self) -> (Ipv4Addr, u8) {
        (
            Ipv4Addr::new(SUBNET_BASE[0], SUBNET_BASE[1], third_octet(self.pid), 0),
            24,
        )
    }

    /// Rank `rank`'s address: host `rank + 1` of the subnet.
    pub fn rank_ip(&self, rank: u32) -> Ipv4Addr {
        let [a, b, c, _] = self.subnet().0.octets();
        Ipv4Addr::new(a, b, c, u8::try_from(rank + 1).expect("rank < 254"))
    }

    /// Rank 0's bootstrap service.
    pub fn bootstrap_addr(&self) -> SocketAddr {
        SocketAddrV4::new(self.rank_ip(0), BOOTSTRAP_PORT).into()
    }

    /// A launch agent for Open MPI's `mpirun --mca plm_rsh_agent` (tests run Open MPI across
    /// the namespaces with it): its "hosts" are the ranks' addresses; it starts Open MPI's
    /// daemon in the namespace holding the address, as ssh would on the host of that address.
    /// With `bind_nicmsg` the daemon's environment (which its ranks inherit) sets
    /// `NICMSG_BIND_IP` to that address; without, the ranks find their addresses themselves.
    /// Each daemon keeps its session files in a directory of its namespace's own: the
    /// namespaces share one file system and host name, and daemons creating the same session
    /// directory at once now and then failed (`mkdir ... File exists`, `orte_init failed`).
    pub fn launch_agent(&self, bind_nicmsg: bool) -> String {
        let mut script = String::from("#!/bin/sh\nhost=$1\nshift\ncase $host in\n");
        for rank in 0..self.ranks {
            let (ip, ns) = (self.rank_ip(rank), self.rank_ns(rank));
            script += &format!("  {ip}) ns={ns} ;;\n");
        }
        script += "  *) echo \"launch agent: no namespace has $host\" >&2; exit 1 ;;\nesac\n";
        let bind = if bind_nicmsg {
            "NICMSG_BIND_IP=\"$host\" "
        } else {
            ""
        };
        // Single-quoted for the shell, whatever the temporary directory's name holds.
        let sessions = self
            .daemon_session_base()
            .display()
            .to_string()
            .replace('\'', "'\\''");
        script += &format!(
            "exec {} netns exec \"$ns\" env OMPI_MCA_orte_tmpdir_base='{sessions}'-\"$ns\" \
             {bind}sh -c \"$*\"\n",
            self.ip().display(),
        );
        script
    }

    /// Where the launch agent's daemons keep their session files: this path, then `-` and the
    /// namespace's name. Removed with the namespaces.
    fn daemon_session_base(&self) -> PathBuf {
        std::env::temp_dir().join("ompi-sessions")
    }

    /// Path of the `ip` command (ranks are started with `ip netns exec`).
    pub fn ip(&self) -> &Path {
        &self.tools.ip
    }

    fn add_ns(&mut self, name: String) -> Result<(), NetnsError> {
        run(&self.tools.ip, ["netns", "add", &name], None)?;
        self.created.push(name);
        Ok(())
    }

    fn build(&mut self, opts: &Options) -> Result<(), NetnsError> {
        let ip = self.tools.ip.clone();
        let br_ns = self.bridge_ns();
        let bridge = self.bridge();
        let mtu = opts.mtu.to_string();
        let prefix_len = self.subnet().1;

        self.add_ns(br_ns.clone())?;
        run(
            &ip,
            ["-n", &br_ns, "link", "add", &bridge, "type", "bridge"],
            None,
        )?;
        for rank in 0..self.ranks {
            // A SIGTERM sent to the launcher alone (a batch system, `kill`) reaches none of the
            // `ip` commands, so without this look the set-up of up to 254 namespaces (~10 s)
            // ran to its end and every rank was started before the signal was seen.
            if let Some(sig) = crate::signals::pending() {
                return Err(NetnsError::Interrupted(sig));
            }
            let ns = self.rank_ns(rank);
            let port = format!("v{rank}");
            self.add_ns(ns.clone())?;
            // Both ends are created directly in their namespaces.
            run(
                &ip,
                [
                    "-n", &br_ns, "link", "add", &port, "type", "veth", "peer", "name", RANK_IFACE,
                    "netns", &ns,
                ],
                None,
            )?;
            run(
                &ip,
                [
                    "-n", &br_ns, "link", "set", &port, "mtu", &mtu, "master", &bridge, "up",
                ],
                None,
            )?;
            run(&ip, ["-n", &ns, "link", "set", "lo", "up"], None)?;
            run(
                &ip,
                ["-n", &ns, "link", "set", RANK_IFACE, "mtu", &mtu, "up"],
                None,
            )?;
            let addr = format!("{}/{prefix_len}", self.rank_ip(rank));
            run(
                &ip,
                ["-n", &ns, "addr", "add", &addr, "dev", RANK_IFACE],
                None,
            )?;
            if let Some(rate) = opts.rate {
                self.limit_rate(&ns, RANK_IFACE, rate, opts.mtu)?;
                self.limit_rate(&br_ns, &port, rate, opts.mtu)?;
            }
        }
        if let Some(loss) = opts.loss.filter(|l| l.basis_points > 0) {
            let nft = self.tools.nft.clone().expect("found when --loss is given");
            run(
                &ip,
                [
                    OsStr::new("netns"),
                    OsStr::new("exec"),
                    OsStr::new(&br_ns),
                    nft.as_os_str(),
                    OsStr::new("-f"),
                    OsStr::new("-"),
                ],
                Some(&loss_ruleset(loss)),
            )?;
        }
        // The bridge takes the smallest MTU of its ports; set it explicitly all the same.
        run(
            &ip,
            ["-n", &br_ns, "link", "set", &bridge, "mtu", &mtu, "up"],
            None,
        )?;
        Ok(())
    }

    /// A tbf of `rate` on the egress of `device` in namespace `ns`.
    fn limit_rate(&self, ns: &str, device: &str, rate: Rate, mtu: u32) -> Result<(), NetnsError> {
        let tc = self.tools.tc.clone().expect("found when --rate is given");
        let rate_arg = format!("{}bit", rate.bits_per_sec);
        let burst = tbf_burst(rate, mtu).to_string();
        let latency = format!("{TBF_LATENCY_MS}ms");
        run(
            &self.tools.ip,
            [
                OsStr::new("netns"),
                OsStr::new("exec"),
                OsStr::new(ns),
                tc.as_os_str(),
                OsStr::new("qdisc"),
                OsStr::new("replace"),
                OsStr::new("dev"),
                OsStr::new(device),
                OsStr::new("root"),
                OsStr::new("tbf"),
                OsStr::new("rate"),
                OsStr::new(&rate_arg),
                OsStr::new("burst"),
                OsStr::new(&burst),
                OsStr::new("latency"),
                OsStr::new(&latency),
            ],
            None,
        )?;
        Ok(())
    }

    /// Kills whatever still runs in the namespaces and deletes them. Returns the problems met
    /// (empty when all went well); safe to call more than once.
    pub fn cleanup(&mut self) -> Vec<String> {
        let names: Vec<String> = self.created.drain(..).rev().collect();
        let problems = delete_all(&self.tools.ip, &names);
        // After the namespaces (and the daemons in them) are gone. Only a launch agent's
        // daemons made these (Open MPI 4's `orte_tmpdir_base`); most topologies have none.
        let base = self.daemon_session_base().display().to_string();
        for name in &names {
            let _ = std::fs::remove_dir_all(format!("{base}-{name}"));
        }
        problems
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for problem in self.cleanup() {
            eprintln!("nicmsg run: warning: {problem}");
        }
    }
}

fn third_octet(pid: u32) -> u8 {
    (pid % 250) as u8
}

/// tbf bucket size: 4 ms of traffic (one jiffy at HZ=250), and never less than two full frames,
/// which tbf would otherwise drop.
pub fn tbf_burst(rate: Rate, mtu: u32) -> u64 {
    (rate.bytes_per_sec() / 250).max(2 * (u64::from(mtu) + 64))
}

/// The nftables ruleset, loaded in the bridge's namespace, that drops `loss` of the IPv4
/// frames between ranks: each crosses the bridge once, so each rank loses that share of what it
/// receives. ARP is spared, as on a link that loses data frames at random rather than
/// addresses.
pub fn loss_ruleset(loss: Loss) -> String {
    format!(
        "table bridge nicmsg {{\n  chain forward {{\n    type filter hook forward priority 0; \
         policy accept;\n    ether type ip numgen random mod 10000 < {} drop\n  }}\n}}\n",
        loss.basis_points
    )
}

/// Kills the processes in the namespaces `names`, then deletes the namespaces, all at once
/// (unmounting a namespace may wait for an RCU grace period; doing them in parallel waits for
/// about one). Returns the problems met.
fn delete_all(ip: &Path, names: &[String]) -> Vec<String> {
    for ns in names {
        kill_pids(ip, ns);
    }
    std::thread::scope(|scope| {
        let deletions: Vec<_> = names
            .iter()
            .map(|ns| scope.spawn(move || delete_ns(ip, ns)))
            .collect();
        deletions
            .into_iter()
            .filter_map(|d| match d.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("a namespace deletion thread panicked".to_owned()),
            })
            .collect()
    })
}

/// SIGKILL to every process in namespace `ns` (whatever escaped the ranks' process groups).
fn kill_pids(ip: &Path, ns: &str) {
    if let Ok(pids) = run(ip, ["netns", "pids", ns], None) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: plain kill(2).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Deletes namespace `ns`; one that is already gone is fine.
fn delete_ns(ip: &Path, ns: &str) -> Result<(), NetnsError> {
    match run(ip, ["netns", "delete", ns], None) {
        Ok(_) => Ok(()),
        // Removed by another launcher's stale cleanup, or by hand.
        Err(NetnsError::Command { stderr, .. }) if stderr.contains("No such file") => Ok(()),
        Err(e) => Err(e),
    }
}

/// The launcher pid in a namespace name of ours: `nicmsg-<pid>-<rank>` or `nicmsg-<pid>-br`.
pub fn launcher_pid(ns: &str) -> Option<u32> {
    let rest = ns.strip_prefix(NS_PREFIX)?;
    let (pid, what) = rest.split_once('-')?;
    let pid_ok = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    let what_ok = what == "br" || (!what.is_empty() && what.bytes().all(|b| b.is_ascii_digit()));
    if pid_ok && what_ok {
        pid.parse().ok()
    } else {
        None
    }
}

/// Whether a process `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Lists the namespaces named like ours.
pub fn list_ours(ip: &Path) -> Result<Vec<String>, NetnsError> {
    let out = run(ip, ["netns", "list"], None)?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| launcher_pid(n).is_some())
        .map(str::to_owned)
        .collect())
}

/// Deletes the namespaces left behind by launchers that are no longer running (killed with
/// SIGKILL, or a crash). Returns the names removed.
pub fn remove_stale(ip: &Path) -> Result<Vec<String>, NetnsError> {
    let me = std::process::id();
    let stale: Vec<String> = list_ours(ip)?
        .into_iter()
        .filter(|ns| {
            let pid = launcher_pid(ns).expect("filtered");
            pid != me && !pid_alive(pid)
        })
        .collect();
    let problems = delete_all(ip, &stale);
    if !problems.is_empty() {
        return Err(NetnsError::Stale(problems.join("; ")));
    }
    Ok(stale)
}

/// Runs a command to completion; its stdout on success, an error with the command line and its
/// stderr otherwise.
fn run<I, S>(program: &Path, args: I, stdin: Option<&str>) -> Result<String, NetnsError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<S> = args.into_iter().collect();
    let command_line = || {
        std::iter::once(program.as_os_str())
            .chain(args.iter().map(AsRef::as_ref))
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut cmd = Command::new(program);
    cmd.args(&args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawned = cmd.spawn().and_then(|mut child| {
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().expect("piped");
            pipe.write_all(text.as_bytes())?;
        }
        child.wait_with_output()
    });
    let out = spawned.map_err(|source| NetnsError::Spawn {
        command: command_line(),
        source,
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetnsError::Command {
            command: command_line(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(launcher_pid("nicmsg-1234-0"), Some(1234));
        assert_eq!(launcher_pid("nicmsg-1234-17"), Some(1234));
        assert_eq!(launcher_pid("nicmsg-1234-br"), Some(1234));
        assert_eq!(launcher_pid("nicmsg-1234"), None);
        assert_eq!(launcher_pid("nicmsg-abc-0"), None);
        assert_eq!(launcher_pid("nicmsg-12-x"), None);
        assert_eq!(launcher_pid("nicmsg--0"), None);
        assert_eq!(launcher_pid("other-1234-0"), None);
    }

    #[test]
    fn burst_covers_frames_and_a_jiffy() {
        let r = |bits| Rate { bits_per_sec: bits };
        assert_eq!(tbf_burst(r(1_000_000_000), 1500), 500_000);
        assert_eq!(tbf_burst(r(1_000_000), 1500), 3128);
        assert_eq!(tbf_burst(r(1_000_000), 65535), 131_198);
    }

    #[test]
    fn ruleset() {
        let rules = loss_ruleset(Loss { basis_points: 500 });
        assert!(rules.contains("ether type ip numgen random mod 10000 < 500 drop"));
        assert!(rules.contains("table bridge"));
        assert!(rules.contains("hook forward"));
    }

    #[test]
    fn addresses() {
        let topo = Topology {
            tools: Tools {
                ip: "ip".into(),
                tc: None,
                nft: None,
            },
            pid: 4321,
            ranks: 3,
            created: Vec::new(),
        };
        assert_eq!(topo.rank_ns(2), "nicmsg-4321-2");
        assert_eq!(topo.bridge_ns(), "nicmsg-4321-br");
        assert_eq!(topo.bridge(), "nmb4321");
        assert_eq!(topo.rank_ip(0), Ipv4Addr::new(10, 213, 71, 1));
        assert_eq!(topo.rank_ip(253), Ipv4Addr::new(10, 213, 71, 254));
        assert_eq!(
            topo.bootstrap_addr(),
            "10.213.71.1:7470".parse::<SocketAddr>().unwrap()
        );
        let agent = topo.launch_agent(true);
        assert!(agent.contains("  10.213.71.2) ns=nicmsg-4321-1 ;;"));
        assert!(agent.contains("ompi-sessions'-\"$ns\" NICMSG_BIND_IP=\"$host\" sh -c"));
        assert!(!topo.launch_agent(false).contains("NICMSG_BIND_IP"));
    }
}

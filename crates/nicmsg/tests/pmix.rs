//! A nicmsg program under a PMIx launcher: Open MPI's `mpirun` starts the `alltoall` example
//! with no `NICMSG_*` variable but `NICMSG_LOG=info`, and the ranks must find each other
//! through PMIx (the log says so, rank by rank) and verify every byte of the all-to-all: four
//! ranks on this machine (loopback), and three ranks in three network namespaces, as on three
//! hosts (each binds its address on the network that joins them). Each test skips itself,
//! saying why, where Open MPI's `mpirun` (openmpi-bin) or the PMIx client library (libpmix2) is
//! not installed, or, for the namespaces, without root or `ip`, `tc` and `nft`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nicmsg_cli::netns::{self, Tools, Topology, RANK_IFACE};

/// How long the job may run before it counts as hung (it takes a few seconds).
const RUN_LIMIT: Duration = Duration::from_secs(180);
const RANKS: u32 = 4;

fn pmix_library_installed() -> bool {
    Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libpmix\\.so\\.2 '"])
        .status()
        .is_ok_and(|status| status.success())
}

/// Why the PMIx tests cannot run here, or None.
fn mpirun_missing() -> Option<&'static str> {
    if !common::installed("mpirun") {
        return Some("Open MPI's mpirun is not installed (openmpi-bin)");
    }
    if !pmix_library_installed() {
        return Some("the PMIx client library libpmix.so.2 is not installed (libpmix2)");
    }
    None
}

/// Runs `command` (mpirun and its options) on `program` with `NICMSG_LOG=info` and no other
/// `NICMSG_*` variable, and checks that the job succeeded; gives its stderr, and both streams
/// for messages.
fn run_without_nicmsg_settings(
    mut command: Command,
    program: &Path,
    what: &str,
) -> (String, String) {
    command
        .args(["-x", "NICMSG_LOG"])
        .arg(program)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Nothing of nicmsg's own bootstrap (nor any other setting) reaches the ranks.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NICMSG_") {
            command.env_remove(&name);
        }
    }
    command.env("NICMSG_LOG", "info");
    let output = common::finish(command.spawn().expect("mpirun starts"), RUN_LIMIT, what);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{context}",
        output.status
    );
    assert!(
        stdout.contains("alltoall: 6 rounds verified"),
        "{what}: no success line:\n{context}"
    );
    (stderr, context)
}

/// Every rank logged the PMIx bootstrap, its choice of address and the exchange, and none used
/// rank 0's TCP service.
fn assert_pmix_log(stderr: &str, ranks: u32, context: &str) {
    for rank in 0..ranks {
        for line in [
            format!("bootstrap via PMIx: rank {rank} of {ranks} in namespace "),
            format!("rank {rank}: bind address chosen after the PMIx fence of host records"),
            format!("rank {rank}: addresses of all {ranks} ranks exchanged via PMIx fence"),
        ] {
            assert!(
                stderr.contains(&line),
                "rank {rank} did not log {line:?}:\n{context}"
            );
        }
    }
    assert!(
        !stderr.contains("TCP service"),
        "rank 0's TCP service was used:\n{context}"
    );
}

#[test]
fn mpirun_bootstraps_through_pmix_without_nicmsg_variables() {
    if let Some(why) = mpirun_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let program = common::example("alltoall");
    let mut command = Command::new("mpirun");
    command
        .args(["--allow-run-as-root", "--oversubscribe", "-n"])
        .arg(RANKS.to_string());
    let (stderr, context) = run_without_nicmsg_settings(command, &program, "mpirun -n 4 alltoall");
    assert_pmix_log(&stderr, RANKS, &context);
    assert_eq!(
        stderr
            .matches("all 4 ranks share this host's network namespace")
            .count(),
        RANKS as usize,
        "every rank binds loopback on one machine:\n{context}"
    );
}

/// Three ranks in three network namespaces on one bridge (`nicmsg run --netns`'s topology), as
/// on three hosts: `mpirun` runs in rank 0's namespace and starts a daemon in each other one
/// through a launch agent. Each rank must bind its own address on the bridge's subnet (the one
/// network that reaches every "host"), chosen from the PMIx host records.
#[test]
fn mpirun_across_namespaces_binds_the_network_that_reaches_every_rank() {
    if let Some(why) = mpirun_missing().or_else(common::netns_available) {
        eprintln!("skipped: {why}");
        return;
    }
    let tools = match Tools::find(false, false) {
        Ok(tools) => tools,
        Err(missing) => {
            eprintln!("skipped: {missing}");
            return;
        }
    };
    const HOSTS: u32 = 3;
    let program = common::example("alltoall");
    let options = netns::Options {
        ranks: HOSTS,
        mtu: 1500,
        rate: None,
        loss: None,
    };
    // Removed on drop, also when an assertion below fails.
    let topology = Topology::create(tools, std::process::id(), &options).expect("namespaces");
    let dir = std::env::temp_dir().join(format!("nicmsg-pmix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("agent directory");
    let agent = dir.join("launch-agent");
    std::fs::write(&agent, topology.launch_agent(false)).expect("launch agent");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("launch agent mode");
    let hosts: Vec<String> = (0..HOSTS)
        .map(|r| topology.rank_ip(r).to_string())
        .collect();
    let mut command = Command::new(topology.ip());
    command
        .args(["netns", "exec", &topology.rank_ns(0), "mpirun"])
        .args(["--allow-run-as-root", "-n"])
        .arg(HOSTS.to_string())
        .args(["--host", &hosts.join(",")])
        .arg("--mca")
        .arg("plm_rsh_agent")
        .arg(&agent)
        .args(["--mca", "oob_tcp_if_include", RANK_IFACE])
        // Several daemons on one machine: without this, one now and then crashed writing the
        // machine's topology to shared memory (hwloc_shmem_topology_write, SIGSEGV).
        .args(["--mca", "rtc_hwloc_vmhole", "none"])
        // PMIx's shared-memory store is per host name, which the namespaces share.
        .env("PMIX_MCA_gds", "hash");
    let (stderr, context) =
        run_without_nicmsg_settings(command, &program, "mpirun across 3 namespaces");
    assert_pmix_log(&stderr, HOSTS, &context);
    let [a, b, c, _] = topology.rank_ip(0).octets();
    for rank in 0..HOSTS {
        let ip = topology.rank_ip(rank);
        let chosen = format!(
            "{ip} on {RANK_IFACE}: {a}.{b}.{c}.0/24 is the first network of rank 0's that \
             reaches all {HOSTS} hosts of the job"
        );
        assert!(
            stderr.contains(&chosen),
            "rank {rank} did not bind {ip} on the bridge's network:\n{context}"
        );
        assert!(
            stderr.contains(&format!("rank={rank} size={HOSTS} address={ip}:")),
            "rank {rank} did not join the job at {ip}:\n{context}"
        );
    }
    drop(topology);
    let _ = std::fs::remove_dir_all(dir);
}

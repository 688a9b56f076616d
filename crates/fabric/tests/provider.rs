//! The provider with the real thing: libfabric's `fi_info` lists it, `fi_pingpong` runs on it
//! (untagged and tagged, every byte checked), and Open MPI's `ofi` MTL runs the project's MPI
//! check program on 4 ranks over it. Each test skips itself, saying why, where the tools it
//! needs are not installed (`libfabric-bin`, `openmpi-bin`, `libopenmpi-dev`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one program of a test may run before it counts as hung.
const RUN_LIMIT: Duration = Duration::from_secs(180);

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A directory holding the provider under the name libfabric looks for, or `None` (said why)
/// where the library was built without libfabric's headers.
fn provider_dir(test: &str) -> Option<PathBuf> {
    if !cfg!(nicmsg_libfabric) {
        eprintln!(
            "{test}: skipped: the provider was built without libfabric's headers (libfabric-dev)"
        );
        return None;
    }
    // Built beside this test binary (target/<profile>/deps), as a dependency of the tests.
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let built = [deps.to_path_buf(), deps.join("..")]
        .into_iter()
        .map(|dir| dir.join("libnicmsg_fi.so"))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("libnicmsg_fi.so is not built beside {}", deps.display()));
    let dir = std::env::temp_dir().join(format!("nicmsg-fi-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("provider directory");
    std::fs::copy(&built, dir.join("libnicmsg-fi.so")).expect("copy the provider");
    let listed = Command::new("fi_info")
        .args(["-p", "nicmsg"])
        .env("FI_PROVIDER_PATH", &dir)
        .output()
        .expect("fi_info runs");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("provider: nicmsg"),
        "{test}: libfabric does not load the provider from {}: {}",
        dir.display(),
        String::from_utf8_lossy(&listed.stderr)
    );
    Some(dir)
}

/// Waits for `child` at most `limit`; kills it past that.
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().expect("output");
            panic!(
                "{what} hung for {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn fi_info_lists_the_provider_with_its_capabilities() {
    if !installed("fi_info") {
        eprintln!("skipped: fi_info is not installed (libfabric-bin)");
        return;
    }
    let Some(dir) = provider_dir("fi_info") else {
        return;
    };
    let output = Command::new("fi_info")
        .args(["-p", "nicmsg", "-v"])
        .env("FI_PROVIDER_PATH", &dir)
        .output()
        .expect("fi_info runs");
    assert_success(&output, "fi_info -p nicmsg -v");
    let text = String::from_utf8_lossy(&output.stdout);
    for wanted in [
        "FI_EP_RDM",
        "FI_TAGGED",
        "FI_DIRECTED_RECV",
        "FI_REMOTE_CQ_DATA",
        "FI_SOCKADDR_IN",
    ] {
        assert!(
            text.contains(wanted),
            "fi_info does not show {wanted}:\n{text}"
        );
    }
    // Endpoint types nicmsg does not offer are refused, not faked.
    let refused = Command::new("fi_info")
        .args(["-p", "nicmsg", "-e", "msg"])
        .env("FI_PROVIDER_PATH", &dir)
        .output()
        .expect("fi_info runs");
    assert!(
        !refused.status.success()
            || !String::from_utf8_lossy(&refused.stdout).contains("provider: nicmsg")
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// One fi_pingpong run: a server, then a client on loopback, on a port of their own.
fn pingpong(dir: &Path, port: u16, extra: &[&str]) {
    let mut args = vec!["-p", "nicmsg", "-e", "rdm", "-c", "-I", "200"];
    args.extend_from_slice(extra);
    let port = port.to_string();
    let server = Command::new("fi_pingpong")
        .args(&args)
        .args(["-B", &port])
        .env("FI_PROVIDER_PATH", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fi_pingpong server starts");
    std::thread::sleep(Duration::from_millis(500));
    let client = Command::new("fi_pingpong")
        .args(&args)
        .args(["-P", &port, "127.0.0.1"])
        .env("FI_PROVIDER_PATH", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fi_pingpong client starts");
    let client = finish(client, RUN_LIMIT, "fi_pingpong client");
    let server = finish(server, RUN_LIMIT, "fi_pingpong server");
    assert_success(&client, "fi_pingpong client");
    assert_success(&server, "fi_pingpong server");
    let text = String::from_utf8_lossy(&client.stdout);
    eprintln!("fi_pingpong {extra:?}:\n{text}");
    // The default sizes run to 1 MiB, each with every byte checked (-c).
    assert!(
        text.contains("1m"),
        "fi_pingpong did not reach 1 MiB:\n{text}"
    );
}

#[test]
fn fi_pingpong_runs_untagged_and_tagged() {
    if !installed("fi_pingpong") {
        eprintln!("skipped: fi_pingpong is not installed (libfabric-bin)");
        return;
    }
    let Some(dir) = provider_dir("pingpong") else {
        return;
    };
    // Ports of this test's own (fi_pingpong's default, 47592, may be taken).
    let base = 47600 + (std::process::id() % 200) as u16 * 2;
    pingpong(&dir, base, &[]);
    pingpong(&dir, base + 1, &["-m", "tagged"]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn open_mpi_runs_the_mpi_check_on_four_ranks() {
    if !installed("mpicc") || !installed("mpirun") {
        eprintln!("skipped: Open MPI is not installed (openmpi-bin, libopenmpi-dev)");
        return;
    }
    let Some(dir) = provider_dir("mpi") else {
        return;
    };
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mpi_check.c");
    let program = dir.join("mpi_check");
    let compiled = Command::new("mpicc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .expect("mpicc runs");
    assert_success(&compiled, "mpicc mpi_check.c");
    let run = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "4"])
        .args(["-x", "FI_PROVIDER_PATH", "-x", "NICMSG_STATS"])
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "nicmsg"])
        .arg(&program)
        .env("FI_PROVIDER_PATH", &dir)
        .env("NICMSG_STATS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let output = finish(run, RUN_LIMIT, "mpirun mpi_check");
    assert_success(&output, "mpirun -n 4 mpi_check on nicmsg");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("mpi_check: all checks passed on 4 ranks"),
        "no success line:\n{text}"
    );
    // The messages went through nicmsg: every rank printed its engine's counters.
    let stats = String::from_utf8_lossy(&output.stderr);
    assert!(
        stats.matches("nicmsg stats").count() >= 4,
        "the ranks' nicmsg counters are missing; was the provider used?\n{stats}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

//! Real multi-process jobs: the examples (Rust and C) under the launcher, over loopback (UDP)
//! and over network namespaces (AF_XDP) with 5% real packet loss (nftables), in both engine
//! modes; ranks on AF_XDP and on UDP in one job; and a job whose rank is killed mid-run. Every
//! example checks every byte it receives, and `programs` runs every PANIC example program.

mod common;

use common::{
    assert_job_ok, build_job_programs, compile_c, example, launch, launcher, netns_available,
    target_dir,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Launcher arguments: 4 ranks, one network namespace each, 5% of received packets dropped.
fn lossy_netns_args(engine: &str) -> [&str; 10] {
    [
        "run",
        "-n",
        "4",
        "--netns",
        "--loss",
        "5%",
        "--timeout",
        "300",
        "--engine",
        engine,
    ]
}

const EXAMPLES: [(&str, &str); 4] = [
    ("pingpong", "pingpong: all sizes verified"),
    ("ring", "ring: 10 laps verified"),
    ("alltoall", "alltoall: 6 rounds verified"),
    // PANIC: figure 2's ping (remote load of its pong), figure 4, the key-value look-up, the
    // filter, the engine-resident barrier and all-reduce.
    ("programs", "programs: all examples verified"),
];

#[test]
fn examples_over_loopback_in_both_engine_modes() {
    for engine in ["thread", "inline"] {
        for (name, expect) in EXAMPLES {
            let output = launch(
                &["run", "-n", "4", "--timeout", "120", "--engine", engine],
                &example(name),
                &[],
            );
            assert_job_ok(&output, &format!("{name} ({engine})"), expect);
        }
    }
}

#[test]
fn examples_over_namespaces_with_five_percent_loss() {
    if let Some(reason) = netns_available() {
        eprintln!("skipped: {reason}");
        return;
    }
    for engine in ["thread", "inline"] {
        for (name, expect) in EXAMPLES {
            let args = lossy_netns_args(engine);
            let output = launch(&args, &example(name), &[("NICMSG_STATS", "1")]);
            assert_job_ok(
                &output,
                &format!("{name} ({engine}, netns, 5% loss)"),
                expect,
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains("nicmsg stats"),
                "NICMSG_STATS printed nothing"
            );
            // Each rank has an interface of its own: the default transport is AF_XDP there.
            assert_eq!(
                stderr.matches("transport xdp on eth0").count(),
                4,
                "{name} ({engine}): not every rank used AF_XDP:\n{stderr}"
            );
        }
    }
}

#[test]
fn ranks_on_af_xdp_and_on_udp_share_a_job() {
    if let Some(reason) = netns_available() {
        eprintln!("skipped: {reason}");
        return;
    }
    // Ranks 2 and 3 use the kernel's UDP sockets; 0 and 1 AF_XDP. The frames on the wire are
    // the same datagrams, so every pair talks, through 5% loss.
    let mut args: Vec<&str> = lossy_netns_args("inline").to_vec();
    args.extend(["--", "sh", "-c"]);
    args.push(
        "if [ \"$NICMSG_RANK\" -ge 2 ]; then export NICMSG_TRANSPORT=udp; \
         else export NICMSG_TRANSPORT=xdp; fi; exec \"$0\"",
    );
    let program = example("alltoall");
    let output = Command::new(launcher())
        .args(&args)
        .arg(&program)
        .env("NICMSG_STATS", "1")
        .output()
        .expect("run the launcher");
    assert_job_ok(
        &output,
        "alltoall (xdp and udp)",
        "alltoall: 6 rounds verified",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.matches("transport xdp on eth0").count(),
        2,
        "{stderr}"
    );
    assert_eq!(stderr.matches("transport udp").count(), 2, "{stderr}");
}

/// A setting outside its range stops every rank with the library's config error, naming the
/// variable and what it accepts, before anything is allocated from it: 100,000,000 slots and a
/// 93 GiB eager limit were aborts (a failed allocation, status 134).
#[test]
fn an_out_of_range_setting_is_a_config_error_not_a_crash() {
    for (name, value, accepted) in [
        (
            "NICMSG_SLOTS",
            "100000000",
            "a whole number of slots in 16..=16384",
        ),
        (
            "NICMSG_EAGER_LIMIT",
            "99999999999",
            "a whole number of bytes in 0..=1048576",
        ),
    ] {
        let output = launch(
            &["run", "-n", "2", "--timeout", "60"],
            &example("pingpong"),
            &[(name, value)],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{name}={value}: pingpong returns the error from main (status 1):\n{stderr}"
        );
        assert!(
            stderr.contains(&format!("{name}={value}: expected {accepted}")),
            "{name}={value}:\n{stderr}"
        );
        assert!(!stderr.contains("SIGABRT"), "{stderr}");
    }
}

/// A rank told to bind an address this host does not have (`NICMSG_BIND_IP` of another
/// machine, a typo) fails at once naming the address and the variable: the bare
/// "I/O error: Cannot assign requested address (os error 99)" it gave said neither.
#[test]
fn a_bind_address_not_on_this_host_is_named() {
    let mut rank = Command::new(example("alltoall"));
    rank.env("NICMSG_RANK", "0")
        .env("NICMSG_SIZE", "1")
        // TEST-NET-1 (RFC 5737): assigned to no host.
        .env("NICMSG_BIND_IP", "192.0.2.77")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = wait_with_deadline(rank.spawn().expect("start a rank"), Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("192.0.2.77") && stderr.contains("NICMSG_BIND_IP"),
        "{stderr}"
    );
}

/// A program whose `main` returns `Result<(), nicmsg::Error>` (every example, and what the
/// examples teach) prints its error with `Debug`: that must be the message, which says what to
/// do, not the derived form (`Error: Bootstrap(NoRank)`, `Error: Io(Os { code: 99, ... })`).
#[test]
fn an_error_returned_from_main_prints_its_message() {
    let mut rank = Command::new(example("ring"));
    for launcher_variable in [
        "NICMSG_RANK",
        "PMIX_RANK",
        "PMIX_NAMESPACE",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ] {
        rank.env_remove(launcher_variable);
    }
    rank.stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = wait_with_deadline(rank.spawn().expect("start a rank"), Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no rank in the environment: run under `nicmsg run`"),
        "{stderr}"
    );
}

/// Builds the C example against the header and the library.
fn c_example() -> PathBuf {
    compile_c("examples/c/ring.c", "c-ring")
}

#[test]
fn c_example_over_loopback_and_namespaces() {
    let binary = c_example();
    for engine in ["thread", "inline"] {
        let output = launch(
            &["run", "-n", "4", "--timeout", "120", "--engine", engine],
            &binary,
            &[],
        );
        assert_job_ok(
            &output,
            &format!("C ring ({engine})"),
            "c ring: all sizes verified",
        );
    }
    if let Some(reason) = netns_available() {
        eprintln!("namespace part skipped: {reason}");
        return;
    }
    for engine in ["thread", "inline"] {
        let args = lossy_netns_args(engine);
        let output = launch(&args, &binary, &[]);
        let what = format!("C ring ({engine}, netns, 5% loss)");
        assert_job_ok(&output, &what, "c ring: all sizes verified");
    }
}

/// Scatter/gather through the C ABI (`examples/c/scatter.c`): messages of 0 bytes to 1 MiB sent
/// from up to 16 pieces and received into pieces cut differently, every byte and guard byte
/// checked, with the argument checks, empty messages and a truncated gathered receive; over
/// loopback in both engine modes, and over namespaces with 5% loss.
#[test]
fn c_scatter_gather_over_loopback_and_namespaces() {
    let binary = compile_c("examples/c/scatter.c", "c-scatter");
    let expect = "layouts verified on";
    for engine in ["thread", "inline"] {
        let output = launch(
            &["run", "-n", "3", "--timeout", "120", "--engine", engine],
            &binary,
            &[],
        );
        assert_job_ok(&output, &format!("C scatter ({engine})"), expect);
    }
    if let Some(reason) = netns_available() {
        eprintln!("namespace part skipped: {reason}");
        return;
    }
    let output = launch(&lossy_netns_args("thread"), &binary, &[]);
    assert_job_ok(&output, "C scatter (thread, netns, 5% loss)", expect);
}

/// How the docs (`docs/runtime.md`, `include/nicmsg.h`, `examples/c/ring.c`,
/// `pkgconfig/nicmsg.pc`) say to build a C program against nicmsg, in the repository's root.
const PKG_CONFIG_FLAGS: &str =
    "$(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg)";

/// The C example built as the docs say, through `pkgconfig/nicmsg.pc`, runs from another
/// directory: the run path baked into it is absolute. With the relative `PKG_CONFIG_PATH` the
/// docs gave before, the program found `libnicmsg.so` only when started from the root.
///
/// The build runs in a copy of the repository's layout in a temporary directory (the `.pc`
/// file, the header and the example, and `target/release` standing for this test run's
/// library), so it works in any profile without building a release.
#[test]
fn a_c_program_built_through_pkg_config_runs_from_any_directory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for doc in [
        "docs/runtime.md",
        "include/nicmsg.h",
        "examples/c/ring.c",
        "pkgconfig/nicmsg.pc",
    ] {
        let text = std::fs::read_to_string(root.join(doc)).expect("read the docs");
        assert!(
            text.contains(PKG_CONFIG_FLAGS),
            "{doc} does not give the build command with {PKG_CONFIG_FLAGS}"
        );
    }
    let has = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has("pkg-config") || !has("cc") {
        eprintln!("skipped: pkg-config or cc missing (apt-get install pkg-config gcc)");
        return;
    }
    build_job_programs();
    let scratch = std::env::temp_dir().join(format!("nicmsg-pkgconfig-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let checkout = scratch.join("checkout");
    let elsewhere = scratch.join("elsewhere");
    for dir in ["pkgconfig", "examples/c", "target"] {
        std::fs::create_dir_all(checkout.join(dir)).unwrap();
    }
    std::fs::create_dir_all(&elsewhere).unwrap();
    for file in ["pkgconfig/nicmsg.pc", "examples/c/ring.c"] {
        std::fs::copy(root.join(file), checkout.join(file)).unwrap();
    }
    let canonical_root = root.canonicalize().unwrap();
    std::os::unix::fs::symlink(canonical_root.join("include"), checkout.join("include")).unwrap();
    std::os::unix::fs::symlink(target_dir(), checkout.join("target/release")).unwrap();

    let build = Command::new("sh")
        .args([
            "-c",
            &format!("cc examples/c/ring.c {PKG_CONFIG_FLAGS} -o ring"),
        ])
        .current_dir(&checkout)
        .output()
        .expect("run sh");
    let program = checkout.join("ring");
    let runpath = Command::new("readelf")
        .arg("-d")
        .arg(&program)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let output = Command::new(launcher())
        .args(["run", "-n", "2", "--timeout", "120", "--"])
        .arg(&program)
        .current_dir(&elsewhere)
        .output()
        .expect("run the launcher");
    let _ = std::fs::remove_dir_all(&scratch);

    assert!(
        build.status.success(),
        "the documented build failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    if let Some(dynamic) = runpath {
        let line = dynamic
            .lines()
            .find(|l| l.contains("(RUNPATH)") || l.contains("(RPATH)"))
            .unwrap_or_else(|| panic!("no run path in the program:\n{dynamic}"));
        assert!(
            line.contains(": [/"),
            "the run path is not absolute: {line}"
        );
    }
    assert_job_ok(
        &output,
        "C ring built through pkg-config, started from another directory",
        "c ring: all sizes verified",
    );
}

/// Starts the ranks directly (the launcher would stop the whole job when one dies), kills rank 1
/// once it is ready, and checks the others report "peer unreachable" and finish.
#[test]
fn killed_rank_gives_peer_unreachable_not_a_hang() {
    for engine in ["thread", "inline"] {
        let port = free_port();
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                Command::new(example("peer_death"))
                    .env("NICMSG_RANK", rank.to_string())
                    .env("NICMSG_SIZE", "3")
                    .env("NICMSG_JOB", "4242")
                    .env("NICMSG_BOOTSTRAP", format!("127.0.0.1:{port}"))
                    .env("NICMSG_ENGINE", engine)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start a rank")
            })
            .collect();
        let mut ranks: Vec<_> = ranks.into_iter().map(Some).collect();
        let mut victim = ranks[1].take().unwrap();
        wait_for_line(&mut victim, "rank 1 ready");
        victim.kill().expect("kill rank 1");
        victim.wait().ok();
        let started = Instant::now();
        for (rank, child) in ranks
            .into_iter()
            .enumerate()
            .filter_map(|(r, c)| c.map(|c| (r, c)))
        {
            let output = wait_with_deadline(child, Duration::from_secs(60));
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "rank {rank} ({engine}) failed: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                stdout.contains("survivors verified"),
                "rank {rank}: {stdout}"
            );
            if rank == 0 {
                assert!(
                    stdout.matches("peer unreachable, as expected").count() == 2,
                    "{stdout}"
                );
            }
        }
        eprintln!(
            "{engine}: survivors finished {:.1} s after the kill",
            started.elapsed().as_secs_f64()
        );
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_line(child: &mut std::process::Child, line: &str) {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(stdout);
    let mut text = String::new();
    loop {
        text.clear();
        let read = reader.read_line(&mut text).expect("read rank output");
        assert!(read > 0, "rank exited before printing {line:?}");
        if text.contains(line) {
            return;
        }
    }
}

fn wait_with_deadline(mut child: std::process::Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("poll a rank").is_some() {
            return child.wait_with_output().expect("collect a rank's output");
        }
        if Instant::now() > deadline {
            child.kill().ok();
            let output = child.wait_with_output().expect("collect a rank's output");
            panic!(
                "rank hung (killed after {limit:?}): {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `nicmsg pdl` from a shell acts on a running job's engines: load a program (from its source)
/// into both ranks, start it, list it, read its output, unload a second program, and send the
/// trigger that lets both ranks finish. Over namespaces when available (the control sockets
/// are files, reached from outside the job's namespaces), else over loopback.
#[test]
fn nicmsg_pdl_manages_the_programs_of_a_running_job() {
    let netns = netns_available().is_none();
    let job = (std::process::id() % 1_000_000 + 1000).to_string();
    let control_dir = std::env::temp_dir().join(format!("nicmsg-pdl-test-{job}"));
    std::fs::create_dir_all(&control_dir).unwrap();
    let hello = control_dir.join("hello.pdl");
    std::fs::write(
        &hello,
        "PROGRAM hello: TRIGGERS 1;\nBEGIN DISPLAY 42 END;\nMESSAGE 1: BEGIN SETFLAG 0 END;\nEND.\n",
    )
    .unwrap();
    let idle = control_dir.join("idle.pdl");
    std::fs::write(&idle, "PROGRAM idle: BEGIN END; END.\n").unwrap();
    let mut args = vec!["run", "-n", "2", "--timeout", "150", "--job", &job];
    if netns {
        args.push("--netns");
    }
    let job_process = Command::new(launcher())
        .args(&args)
        .arg("--")
        .arg(example("program_host"))
        .env("NICMSG_CONTROL_DIR", &control_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the job");
    let pdl = |words: &[&str]| -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let output = Command::new(launcher())
                .arg("pdl")
                .args(words)
                .env("NICMSG_CONTROL_DIR", &control_dir)
                .output()
                .expect("run nicmsg pdl");
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            if output.status.success() {
                return text;
            }
            let error = String::from_utf8_lossy(&output.stderr);
            // The ranks may not have started yet: their sockets appear when they join.
            assert!(
                Instant::now() < deadline && error.contains("no engine"),
                "nicmsg pdl {words:?}: {error}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let (hello, idle) = (hello.to_str().unwrap(), idle.to_str().unwrap());
    for rank in ["0", "1"] {
        let at = ["--job", job.as_str(), "--rank", rank];
        let loaded = pdl(&[&["load"][..], &at, &[hello]].concat());
        assert!(loaded.contains("loaded hello"), "{loaded}");
        pdl(&[&["run"][..], &at, &["hello"]].concat());
        pdl(&[&["load"][..], &at, &[idle, "--as", "77"]].concat());
        let listing = pdl(&[&["list"][..], &at].concat());
        assert!(
            listing.contains("hello running") && listing.contains("77 idle loaded"),
            "{listing}"
        );
        pdl(&[&["unload"][..], &at, &["77"]].concat());
        let output = pdl(&[&["output"][..], &at, &["hello"]].concat());
        assert!(output.trim_end().ends_with(" 42"), "{output}");
        pdl(&[&["send"][..], &at, &["hello", "1"]].concat());
    }
    let output = wait_with_deadline(job_process, Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&control_dir);
    assert_job_ok(&output, "program_host", "saw hello's flag");
    // A rank that is not running says so, without a hang.
    let refused = Command::new(launcher())
        .args(["pdl", "list", "--job", &job, "--rank", "5"])
        .env("NICMSG_CONTROL_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no engine"));
}

//! `nicmsg run` end to end, through the real binary.
//!
//! The `--netns` tests need root and the `ip` command; without them they print why and pass.
//! The `--loss` test also needs `nft`.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nicmsg_cli::netns::{find_tool, launcher_pid, pid_alive};

const NICMSG: &str = env!("CARGO_BIN_EXE_nicmsg");

struct Finished {
    code: i32,
    stdout: String,
    stderr: String,
    /// The launcher's pid (names its namespaces).
    pid: u32,
    took: Duration,
}

fn nicmsg(args: &[&str]) -> Finished {
    let mut command = Command::new(NICMSG);
    command.args(args);
    finish(command, &args.join(" "))
}

/// Runs `command` (a launcher, perhaps wrapped) to its end; `label` names it in the log.
fn finish(mut command: Command, label: &str) -> Finished {
    let start = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nicmsg");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for nicmsg");
    let f = Finished {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        pid,
        took: start.elapsed(),
    };
    eprintln!(
        "$ nicmsg {}\n-> {} in {:?}\n--- stdout\n{}--- stderr\n{}---",
        label, f.code, f.took, f.stdout, f.stderr
    );
    f
}

/// `nicmsg run OPTIONS -- sh -c SCRIPT`; `options` are separated by spaces.
fn run_sh(options: &str, script: &str) -> Finished {
    let mut args = vec!["run"];
    args.extend(options.split_whitespace());
    args.extend(["--", "sh", "-c", script]);
    nicmsg(&args)
}

fn sorted_lines(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort();
    v
}

/// Whether the `--netns` tests can run here; prints why not.
fn netns_available(test: &str) -> bool {
    match netns_unavailable_because() {
        None => true,
        Some(why) => {
            eprintln!("skipping {test}: {why}");
            false
        }
    }
}

/// Why namespaces cannot be made here (checked once: root, `ip`, and a trial namespace, which
/// fails in containers without CAP_SYS_ADMIN).
fn netns_unavailable_because() -> Option<&'static str> {
    static WHY: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *WHY.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("--netns needs root");
        }
        let Some(ip) = find_tool("ip") else {
            return Some("the `ip` command is not installed");
        };
        // Not a name of the launcher's form, so no launcher's stale cleanup touches it.
        let probe = format!("nicmsg-probe-{}", std::process::id());
        let ok = |args: &[&str]| {
            Command::new(&ip)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let made = ok(&["netns", "add", &probe]);
        let usable = made && ok(&["netns", "exec", &probe, "true"]);
        if made {
            ok(&["netns", "delete", &probe]);
        }
        if usable {
            None
        } else {
            Some("cannot create and enter a network namespace here (no CAP_SYS_ADMIN?)")
        }
    })
}

/// The namespaces named after launcher `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    let ip = find_tool("ip").expect("ip");
    let out = Command::new(ip).args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| launcher_pid(n) == Some(pid))
        .map(str::to_owned)
        .collect()
}

// -------------------------------------------------------------------------------------------
// without namespaces

#[test]
fn every_line_is_prefixed_with_its_rank() {
    let f = run_sh(
        "-n 3 --timeout 20",
        "echo hello $NICMSG_RANK of $NICMSG_SIZE",
    );
    assert_eq!(f.code, 0);
    assert_eq!(
        sorted_lines(&f.stdout),
        [
            "[rank 0] hello 0 of 3",
            "[rank 1] hello 1 of 3",
            "[rank 2] hello 2 of 3"
        ]
    );
    assert_eq!(f.stderr, "");
}

#[test]
fn stdout_and_stderr_stay_apart_and_partial_lines_are_flushed() {
    let f = run_sh(
        "-n 2",
        "echo out $NICMSG_RANK; echo err $NICMSG_RANK >&2; printf 'tail %s' $NICMSG_RANK",
    );
    assert_eq!(f.code, 0);
    assert_eq!(
        sorted_lines(&f.stdout),
        [
            "[rank 0] out 0",
            "[rank 0] tail 0",
            "[rank 1] out 1",
            "[rank 1] tail 1"
        ]
    );
    assert_eq!(
        sorted_lines(&f.stderr),
        ["[rank 0] err 0", "[rank 1] err 1"]
    );
}

#[test]
fn the_environment_contract() {
    let f = run_sh(
        "-n 2 --engine thread --mtu 9000",
        "echo $NICMSG_JOB $NICMSG_BOOTSTRAP $NICMSG_BIND_IP $NICMSG_ENGINE $NICMSG_MTU",
    );
    assert_eq!(f.code, 0);
    let lines = sorted_lines(&f.stdout);
    assert_eq!(lines.len(), 2);
    let fields: Vec<Vec<&str>> = lines
        .iter()
        .map(|l| l.split_whitespace().skip(2).collect())
        .collect();
    assert_eq!(
        fields[0], fields[1],
        "every rank gets the same job and bootstrap"
    );
    let job: u32 = fields[0][0].parse().unwrap();
    assert_ne!(job, 0);
    assert!(fields[0][1].starts_with("127.0.0.1:"), "{:?}", fields[0]);
    assert_eq!(&fields[0][2..], ["127.0.0.1", "thread", "9000"]);

    // A fresh job id per run.
    let g = run_sh("-n 1", "echo $NICMSG_JOB");
    assert_ne!(g.stdout.split_whitespace().nth(2), Some(fields[0][0]));
}

#[test]
fn a_failing_rank_stops_the_job() {
    let f = run_sh("-n 3", "if [ $NICMSG_RANK = 1 ]; then exit 3; fi; sleep 30");
    assert_eq!(f.code, 3);
    assert!(
        f.stderr
            .contains("nicmsg run: rank 1 exited with status 3; stopping the other ranks"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(10), "took {:?}", f.took);
}

#[test]
fn a_killed_rank_is_reported_with_its_signal() {
    let f = run_sh(
        "-n 2",
        "if [ $NICMSG_RANK = 0 ]; then kill -9 $$; fi; sleep 30",
    );
    assert_eq!(f.code, 128 + 9);
    assert!(
        f.stderr
            .contains("nicmsg run: rank 0 killed by signal 9 (SIGKILL)"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(10), "took {:?}", f.took);
}

#[test]
fn a_rank_ignoring_sigterm_is_killed_after_the_grace_period() {
    // Rank 0 fails once rank 1 ignores SIGTERM (it says so by creating `marker`).
    let marker = std::env::temp_dir().join(format!("nicmsg-test-trap-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "if [ $NICMSG_RANK = 0 ]; then while [ ! -e '{m}' ]; do sleep 0.02; done; exit 1; fi; \
         trap '' TERM; touch '{m}'; while :; do sleep 0.1; done",
        m = marker.display()
    );
    let f = run_sh("-n 2", &script);
    let _ = std::fs::remove_file(&marker);
    assert_eq!(f.code, 1);
    assert!(
        f.stderr
            .contains("rank 1 did not stop within 2s of SIGTERM; sending SIGKILL"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(10), "took {:?}", f.took);
}

#[test]
fn timeout_stops_the_job() {
    let f = nicmsg(&["run", "-n", "2", "--timeout", "0.5", "--", "sleep", "30"]);
    assert_eq!(f.code, 124);
    assert!(
        f.stderr.contains(
            "nicmsg run: timed out after 0.500s; stopping all ranks (ranks 0, 1 still running)"
        ),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(10), "took {:?}", f.took);
}

#[test]
fn launcher_errors_are_clear() {
    let f = nicmsg(&["run", "-n", "2", "--rate", "1gbit", "--", "true"]);
    assert_eq!(f.code, 2);
    assert!(f.stderr.contains("--rate needs --netns"), "{}", f.stderr);

    let f = nicmsg(&["run", "-n", "2", "--", "no-such-program-for-nicmsg"]);
    assert_eq!(f.code, 2);
    assert!(
        f.stderr
            .contains("nicmsg run: no-such-program-for-nicmsg: command not found"),
        "{}",
        f.stderr
    );

    let f = nicmsg(&["run", "-n", "0", "--", "true"]);
    assert_eq!(f.code, 2);
    let f = nicmsg(&["run", "-n", "2", "--loss", "120%", "--", "true"]);
    assert_eq!(f.code, 2);
    assert!(f.stderr.contains("between 0% and 100%"), "{}", f.stderr);
}

#[test]
fn an_unknown_option_is_refused_with_the_usage() {
    for args in [
        &["run", "--frobnicate"][..],
        &["run", "-n", "2", "--frobnicate", "--", "true"],
    ] {
        let f = nicmsg(args);
        assert_eq!(f.code, 2);
        assert!(
            f.stderr
                .contains("error: unexpected argument '--frobnicate' found"),
            "{}",
            f.stderr
        );
        assert!(f.stderr.contains("Usage: nicmsg run"), "{}", f.stderr);
        assert!(!f.stderr.contains("command not found"), "{}", f.stderr);
    }
}

#[test]
fn options_after_the_program_are_the_programs() {
    let program = [
        "sh",
        "-c",
        "echo \"$@\"",
        "sh",
        "-x",
        "--frobnicate",
        "-n",
        "3",
        "--",
    ];
    let with_dashes: Vec<&str> = ["run", "-n", "1", "--"]
        .iter()
        .chain(&program)
        .copied()
        .collect();
    let without: Vec<&str> = ["run", "-n", "1"].iter().chain(&program).copied().collect();
    for args in [with_dashes, without] {
        let f = nicmsg(&args);
        assert_eq!(f.code, 0);
        assert_eq!(f.stdout, "[rank 0] -x --frobnicate -n 3 --\n");
    }
}

#[test]
fn a_directory_or_a_file_without_execute_permission_is_named_as_such() {
    let dir = std::env::temp_dir().join(format!("nicmsg-test-programs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("plain-file");
    std::fs::write(&plain, "#!/bin/sh\necho should not run\n").unwrap();
    let (dir_text, plain_text) = (dir.to_str().unwrap(), plain.to_str().unwrap());

    let f = nicmsg(&["run", "-n", "2", "--", dir_text]);
    let g = nicmsg(&["run", "-n", "2", "--", plain_text]);
    // Looked up in PATH: the file found is named.
    let mut command = Command::new(NICMSG);
    command
        .args(["run", "-n", "2", "--", "plain-file"])
        .env("PATH", &dir);
    let h = finish(
        command,
        "run -n 2 -- plain-file (PATH has it without execute permission)",
    );
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(f.code, 2);
    assert_eq!(f.stderr, format!("nicmsg run: {dir_text} is a directory\n"));
    for finished in [g, h] {
        assert_eq!(finished.code, 2);
        assert_eq!(
            finished.stderr,
            format!("nicmsg run: {plain_text} is not executable (chmod +x?)\n")
        );
        assert_eq!(finished.stdout, "");
    }
}

#[test]
fn more_ranks_than_one_machine_should_run_are_refused_at_once() {
    let f = nicmsg(&["run", "-n", "100000", "--", "true"]);
    assert_eq!(f.code, 2);
    assert!(
        f.stderr
            .starts_with("nicmsg run: -n 100000: at most 4096 ranks run on one machine"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(5), "took {:?}", f.took);
}

/// `nicmsg args` with resource limit `resource` set to `value` (soft and hard), optionally as
/// user nobody (through `setpriv`, which drops root's capabilities).
fn nicmsg_limited(
    resource: libc::__rlimit_resource_t,
    value: u64,
    as_nobody: bool,
    args: &[&str],
) -> Finished {
    use std::os::unix::process::CommandExt;
    let mut command = if as_nobody {
        let setpriv = find_tool("setpriv").expect("setpriv");
        let mut c = Command::new(setpriv);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(NICMSG);
        c
    } else {
        Command::new(NICMSG)
    };
    command.args(args).current_dir("/");
    // SAFETY: only setrlimit between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: value as libc::rlim_t,
                rlim_max: value as libc::rlim_t,
            };
            if libc::setrlimit(resource, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    finish(command, &format!("{} (limit {value})", args.join(" ")))
}

#[test]
fn the_launchers_descriptor_limit_is_checked_before_any_rank_starts() {
    // 64 descriptors: 16 for the launcher itself, then 2 per rank: 24 ranks.
    let f = nicmsg_limited(
        libc::RLIMIT_NOFILE,
        64,
        false,
        &["run", "-n", "100", "--", "true"],
    );
    assert_eq!(f.code, 2);
    assert!(
        f.stderr.eq(
            "nicmsg run: -n 100: the launcher needs 216 file descriptors (2 output pipes per \
             rank), above its limit of 64, enough for 24 ranks (ulimit -n, also the hard \
             limit)\n"
        ),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(5), "took {:?}", f.took);
    let g = nicmsg_limited(
        libc::RLIMIT_NOFILE,
        64,
        false,
        &["run", "-n", "20", "--", "true"],
    );
    assert_eq!(g.code, 0, "{}", g.stderr);
}

#[test]
fn the_users_process_limit_is_checked_before_any_rank_starts() {
    // RLIMIT_NPROC binds neither root nor holders of CAP_SYS_ADMIN or CAP_SYS_RESOURCE: as root,
    // the launcher runs as nobody, without capabilities.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root && find_tool("setpriv").is_none() {
        eprintln!("skipping: running as root and no `setpriv` to drop to nobody");
        return;
    }
    let before = if root {
        0
    } else {
        nicmsg_cli::limits::Machine::measure().user_tasks
    };
    if !root && nicmsg_cli::limits::Machine::measure().nproc.is_none() {
        eprintln!("skipping: RLIMIT_NPROC does not bind this user (capabilities)");
        return;
    }
    // Room for the launcher and 20 more tasks: 10 ranks take 3 each (inline engine on a
    // machine of fewer than 20 cores) or 4 (engine thread), 30 or more.
    let limit = before + 21;
    let f = nicmsg_limited(
        libc::RLIMIT_NPROC,
        limit,
        root,
        &["run", "-n", "10", "--engine", "thread", "--", "true"],
    );
    assert_eq!(f.code, 2, "{}", f.stderr);
    assert!(
        f.stderr.starts_with(
            "nicmsg run: -n 10: the job needs 40 more processes and threads (4 per rank: the \
             rank and its engine thread, and the launcher's 2 threads forwarding its output)"
        ) && f.stderr.contains("RLIMIT_NPROC allows (ulimit -u)"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(5), "took {:?}", f.took);
    let g = nicmsg_limited(
        libc::RLIMIT_NPROC,
        limit,
        root,
        &["run", "-n", "2", "--engine", "inline", "--", "true"],
    );
    assert_eq!(g.code, 0, "{}", g.stderr);
}

#[test]
fn check_exchanges_addresses_and_reaches_every_rank() {
    let f = nicmsg(&["run", "-n", "3", "--timeout", "25", "--", NICMSG, "check"]);
    assert_eq!(f.code, 0);
    assert_eq!(f.stdout.matches("address exchange ok").count(), 3);
    assert_eq!(
        f.stdout
            .matches("reached all 2 other ranks over UDP")
            .count(),
        3
    );
}

#[test]
fn check_of_one_rank_passes_at_once() {
    // It waited for answers from nobody until its timeout, and failed.
    let started = std::time::Instant::now();
    let f = nicmsg(&["run", "-n", "1", "--", NICMSG, "check", "--timeout", "10"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(
        f.stdout.contains("reached all 0 other ranks"),
        "{}",
        f.stdout
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Starts `nicmsg args` with its output piped to the test and no input.
fn spawn_piped(args: &[&str]) -> Child {
    Command::new(NICMSG)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts `nicmsg args`, waits for `ready` lines on its stdout, sends `sig` to it, and returns
/// what happened plus the pids the ranks printed (`ready <pid>`).
fn interrupt(args: &[&str], ready: usize, sig: i32) -> (Finished, Vec<i32>) {
    let start = Instant::now();
    let mut child = spawn_piped(args);
    let pid = child.id();
    let mut err = child.stderr.take().unwrap();
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut stdout = String::new();
    let mut pids = Vec::new();
    while pids.len() < ready {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(p) = line.split_whitespace().nth(3) {
            pids.push(p.parse().unwrap());
        }
        stdout.push_str(&line);
    }
    // SAFETY: plain kill(2) of our own child.
    unsafe {
        libc::kill(pid as i32, sig);
    }
    out.read_to_string(&mut stdout).unwrap();
    let status = child.wait().unwrap();
    let f = Finished {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr: err_reader.join().unwrap(),
        pid,
        took: start.elapsed(),
    };
    eprintln!(
        "$ nicmsg {} (signal {sig})\n-> {} in {:?}\n--- stdout\n{}--- stderr\n{}---",
        args.join(" "),
        f.code,
        f.took,
        f.stdout,
        f.stderr
    );
    (f, pids)
}

#[test]
fn sigint_to_the_launcher_stops_every_rank() {
    let (f, pids) = interrupt(
        &[
            "run",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "echo ready $$; exec sleep 30",
        ],
        2,
        libc::SIGINT,
    );
    assert_eq!(pids.len(), 2, "{}", f.stdout);
    assert_eq!(f.code, 130);
    assert!(
        f.stderr
            .contains("nicmsg run: got SIGINT; stopping all ranks"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(10), "took {:?}", f.took);
    for p in pids {
        assert!(!pid_alive(p as u32), "rank process {p} still runs");
    }
}

// -------------------------------------------------------------------------------------------
// with namespaces

#[test]
fn netns_gives_each_rank_its_namespace_address_and_mtu() {
    if !netns_available("netns_gives_each_rank_its_namespace_address_and_mtu") {
        return;
    }
    let f = run_sh(
        "-n 2 --netns --mtu 9000 --timeout 25",
        "echo ns $(ip netns identify); echo mtu $(cat /sys/class/net/eth0/mtu); \
         echo addr $(ip -o -4 addr show dev eth0 | awk '{print $4}'); \
         echo env $NICMSG_BIND_IP $NICMSG_BOOTSTRAP $NICMSG_MTU",
    );
    assert_eq!(f.code, 0);
    let pid = f.pid;
    let third = pid % 250;
    for rank in 0..2 {
        let p = format!("[rank {rank}] ");
        let ip = format!("10.213.{third}.{}", rank + 1);
        let expect = [
            format!("{p}ns nicmsg-{pid}-{rank}"),
            format!("{p}mtu 9000"),
            format!("{p}addr {ip}/24"),
            format!("{p}env {ip} 10.213.{third}.1:7470 9000"),
        ];
        for line in expect {
            assert!(f.stdout.lines().any(|l| l == line), "missing {line:?}");
        }
    }
    assert_eq!(namespaces_of(pid), Vec::<String>::new());
}

#[test]
fn netns_check_runs_across_namespaces() {
    if !netns_available("netns_check_runs_across_namespaces") {
        return;
    }
    let f = nicmsg(&[
        "run",
        "-n",
        "3",
        "--netns",
        "--timeout",
        "25",
        "--",
        NICMSG,
        "check",
    ]);
    assert_eq!(f.code, 0);
    assert_eq!(
        f.stdout
            .matches("reached all 2 other ranks over UDP")
            .count(),
        3
    );
    assert!(
        f.stdout
            .contains(&format!("data address 10.213.{}.3:", f.pid % 250)),
        "{}",
        f.stdout
    );
    assert_eq!(namespaces_of(f.pid), Vec::<String>::new());
}

#[test]
fn netns_are_removed_after_a_failed_run() {
    if !netns_available("netns_are_removed_after_a_failed_run") {
        return;
    }
    let f = run_sh(
        "-n 2 --netns",
        "if [ $NICMSG_RANK = 1 ]; then exit 3; fi; sleep 30",
    );
    assert_eq!(f.code, 3);
    assert!(
        f.stderr.contains("rank 1 exited with status 3"),
        "{}",
        f.stderr
    );
    assert!(f.took < Duration::from_secs(20), "took {:?}", f.took);
    assert_eq!(namespaces_of(f.pid), Vec::<String>::new());
}

#[test]
fn netns_are_removed_after_sigterm() {
    if !netns_available("netns_are_removed_after_sigterm") {
        return;
    }
    let (f, pids) = interrupt(
        &[
            "run",
            "-n",
            "2",
            "--netns",
            "--",
            "sh",
            "-c",
            "echo ready $$; exec sleep 30",
        ],
        2,
        libc::SIGTERM,
    );
    assert_eq!(pids.len(), 2, "{}", f.stdout);
    assert_eq!(f.code, 128 + libc::SIGTERM);
    assert!(f.stderr.contains("got SIGTERM"), "{}", f.stderr);
    assert_eq!(namespaces_of(f.pid), Vec::<String>::new());
}

/// SIGTERM while the namespaces are still being made (254 ranks take ~10 s here), sent to the
/// launcher alone as a batch system or `kill` does (a terminal's Ctrl-C also hits the `ip`
/// commands): the launcher stops setting up at once, removes what it made and starts no rank.
/// It used to finish every namespace, start all 254 ranks, and only then see the signal.
#[test]
fn netns_sigterm_during_setup_stops_it_and_starts_no_rank() {
    if !netns_available("netns_sigterm_during_setup_stops_it_and_starts_no_rank") {
        return;
    }
    let start = Instant::now();
    let child = spawn_piped(&["run", "-n", "254", "--netns", "--", "echo", "started"]);
    let pid = child.id();
    // Signal once the set-up is under way: the bridge's and rank 0's namespaces exist.
    while namespaces_of(pid).len() < 2 && start.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_millis(20));
    }
    let signalled = Instant::now();
    // SAFETY: plain kill(2) of our own child.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let out = child.wait_with_output().unwrap();
    let took = signalled.elapsed();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!(
        "-> {:?} {took:?} after SIGTERM\n{stdout}\n{stderr}",
        out.status
    );
    let left = namespaces_of(pid);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(
        stderr.contains("got SIGTERM while setting up the namespaces"),
        "{stderr}"
    );
    assert!(!stdout.contains("started"), "ranks were started: {stdout}");
    assert!(took < Duration::from_secs(4), "took {took:?} after SIGTERM");
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn netns_stale_namespaces_of_dead_launchers_are_removed() {
    if !netns_available("netns_stale_namespaces_of_dead_launchers_are_removed") {
        return;
    }
    // A pid no process has: high pids are handed out last.
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    let dead = (pid_max - 1000..pid_max)
        .rev()
        .find(|&p| !pid_alive(p))
        .unwrap();
    let ip = find_tool("ip").unwrap();
    let stale = [format!("nicmsg-{dead}-0"), format!("nicmsg-{dead}-br")];
    for ns in &stale {
        let st = Command::new(&ip)
            .args(["netns", "add", ns])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let f = nicmsg(&["run", "-n", "1", "--netns", "--", "true"]);
    let left = namespaces_of(dead);
    for ns in &left {
        let _ = Command::new(&ip).args(["netns", "delete", ns]).status();
    }
    assert_eq!(f.code, 0);
    assert_eq!(left, Vec::<String>::new(), "stale namespaces not removed");
}

#[test]
fn netns_rate_and_loss_are_applied() {
    if !netns_available("netns_rate_and_loss_are_applied") {
        return;
    }
    if find_tool("nft").is_none() || find_tool("tc").is_none() {
        eprintln!("skipping netns_rate_and_loss_are_applied: `nft` or `tc` is not installed");
        return;
    }
    let f = nicmsg(&[
        "run",
        "-n",
        "2",
        "--netns",
        "--rate",
        "100mbit",
        "--loss",
        "5%",
        "--timeout",
        "25",
        "--",
        "sh",
        "-c",
        // The rank's parent is the launcher: its pid names the bridge's namespace.
        "tc qdisc show dev eth0; ip netns exec nicmsg-$PPID-br nft list ruleset | grep numgen; \
         ip netns exec nicmsg-$PPID-br tc qdisc show | sed 's/^/bridge: /'; exec \"$0\" check",
        NICMSG,
    ]);
    assert_eq!(f.code, 0);
    for rank in 0..2 {
        let p = format!("[rank {rank}] ");
        assert!(
            f.stdout
                .lines()
                .any(|l| l.starts_with(&p) && l.contains("tbf") && l.contains("rate 100Mbit")),
            "no tbf for rank {rank}"
        );
        assert!(
            f.stdout.lines().any(|l| l.starts_with(&p)
                && l.contains("ether type ip numgen random mod 10000 < 500 drop")),
            "no loss rule on the bridge"
        );
        let port = format!("dev v{rank} ");
        assert!(
            f.stdout.lines().any(|l| l.contains("bridge: ")
                && l.contains(&port)
                && l.contains("tbf")
                && l.contains("rate 100Mbit")),
            "no tbf on the bridge port towards rank {rank}"
        );
        assert!(f.stdout.contains(&format!(
            "{p}rank {rank}: reached all 1 other ranks over UDP"
        )));
    }
    assert_eq!(namespaces_of(f.pid), Vec::<String>::new());
}

#[test]
fn netns_needs_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let f = if root {
        // Run the launcher as nobody.
        let Some(setpriv) = find_tool("setpriv") else {
            eprintln!("skipping netns_needs_root: running as root and no `setpriv`");
            return;
        };
        let out = Command::new(setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(PathBuf::from(NICMSG))
            .args(["run", "-n", "1", "--netns", "--", "true"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    } else {
        let f = nicmsg(&["run", "-n", "1", "--netns", "--", "true"]);
        (Some(f.code), f.stderr)
    };
    assert_eq!(f.0, Some(2), "{}", f.1);
    assert!(
        f.1.contains(
            "--netns needs root (it creates network namespaces); run as root or drop --netns"
        ),
        "{}",
        f.1
    );
}

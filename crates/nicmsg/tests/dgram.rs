//! Datagram sockets: in one process over loopback, and the example programs (Rust and C,
//! `dgram_echo` and `dgram_copy`) across network namespaces under 5% real loss, with two
//! clients of one server at the same time and each language on either side.

mod common;

use common::{assert_job_ok, compile_c, example, launcher, netns_available};
use nicmsg::dgram::DgramSocket;
use nicmsg::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::thread;

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 131) >> 1) as u8)
        .collect()
}

const SIZES: [usize; 9] = [0, 1, 100, 1472, 8192, 8193, 65_536, 200_000, 1 << 20];

#[test]
fn clients_and_a_server_by_address_over_loopback() {
    let server = DgramSocket::bind("127.0.0.1:0").expect("bind the server");
    let address = server.local_addr();
    let clients: Vec<_> = (0..3)
        .map(|client| {
            thread::spawn(move || -> Result<(), Error> {
                let socket = DgramSocket::bind("127.0.0.1:0")?;
                let mut reply = vec![0u8; 1 << 20];
                for (index, &len) in SIZES.iter().enumerate() {
                    let data = pattern(len, client * 100 + index);
                    socket.send_to(&data, address)?;
                    let (got, from) = socket.recv_from(&mut reply)?;
                    assert_eq!(from, address);
                    assert_eq!(&reply[..got], &data[..], "client {client}, {len} B");
                }
                Ok(())
            })
        })
        .collect();
    for _ in 0..3 * SIZES.len() {
        let (len, from) = server.peek_from().expect("peek");
        let datagram = server.recv_lent().expect("receive");
        assert_eq!((datagram.len(), datagram.from()), (len, from));
        server.send_to(&datagram, from).expect("echo");
    }
    for client in clients {
        client.join().expect("client thread").expect("client");
    }
    assert!(server.try_peek_from().expect("peek").is_none());
}

/// `client` sends `rounds` datagrams of `len` bytes to `server`, each once the server has
/// posted the receive for it and said so: every datagram meets its receive already posted.
/// Each arrives whole, in order.
fn send_into_posted_receives(server: &DgramSocket, client: DgramSocket, len: usize, rounds: usize) {
    let (server_address, client_address) = (server.local_addr(), client.local_addr());
    let sender = thread::spawn(move || {
        let mut ready = [0u8; 1];
        for round in 0..rounds {
            let (_, from) = client.recv_from(&mut ready).expect("the server is ready");
            assert_eq!(from, server_address);
            client.send_to(&pattern(len, round), from).expect("send");
        }
    });
    let mut buffer = vec![0u8; len];
    for round in 0..rounds {
        let receive = server.irecv_from(&mut buffer).expect("post the receive");
        server.send_to(&[1], client_address).expect("say ready");
        assert_eq!(receive.wait().expect("receive").len, len as u64);
        assert!(buffer == pattern(len, round), "round {round}: bytes differ");
    }
    sender.join().expect("the client");
}

/// Long datagrams into a receive posted before they leave land with no copy at all: the data
/// frames by the engine's prediction, and the first frame of each (its RTS, which matches it)
/// by reading its headers ahead of it (`first_frame.rs` in the protocol core). The first such
/// datagram is copied (nothing has been looked ahead at yet), the ones after it are not.
#[test]
fn long_datagrams_into_a_posted_receive_are_placed_from_their_first_frame() {
    const ROUNDS: usize = 4;
    let len = 1 << 20;
    let server = DgramSocket::bind("127.0.0.1:0").expect("bind the server");
    let client = DgramSocket::bind("127.0.0.1:0").expect("bind the client");
    send_into_posted_receives(&server, client, len, ROUNDS);
    let stats = server.stats().expect("stats");
    assert!(
        stats.engine.first_frames_predicted >= (ROUNDS - 1) as u64,
        "{:?}",
        stats.engine
    );
    let received = (ROUNDS * len) as u64;
    assert!(
        stats.protocol.bytes_placed_direct >= received - received / ROUNDS as u64,
        "all but the first datagram placed: {:?}",
        stats.protocol
    );
}

/// Eager messages whose frames the kernel coalesces two to a datagram (GRO; 200,000 B with a
/// 256 KiB eager limit: eight frames of 25 KB) into a receive posted before they leave: the
/// first frame, and the frame coalesced behind it, are placed from a look at the headers
/// (`first_frame.rs`), the rest by prediction, so only the first message (before anything
/// was looked at) is copied.
#[test]
fn eager_frames_coalesced_behind_a_first_frame_are_placed_with_it() {
    const ROUNDS: usize = 8;
    let len = 200_000;
    let probe = nicmsg_udp::UdpTransport::bind(nicmsg_udp::UdpOptions {
        bind: "127.0.0.1:0".parse().expect("address"),
        ..nicmsg_udp::UdpOptions::default()
    })
    .expect("bind a probe");
    if !probe.gro() {
        eprintln!("skipped: this kernel does not coalesce UDP (UDP_GRO)");
        return;
    }
    let bind = || {
        let mut options = nicmsg::Options::from_env().expect("options");
        options.protocol.eager_limit = 256 << 10;
        DgramSocket::bind_with("127.0.0.1:0", options).expect("bind")
    };
    let server = bind();
    send_into_posted_receives(&server, bind(), len, ROUNDS);
    let stats = server.stats().expect("stats");
    assert!(
        stats.engine.frames_behind_first >= (ROUNDS - 1) as u64,
        "{:?}",
        stats.engine
    );
    let received = (ROUNDS * len) as u64;
    let copied = stats.protocol.bytes_placed + stats.protocol.bytes_copied;
    assert!(
        copied <= received / ROUNDS as u64 + received / 50,
        "all but the first message placed: {copied} of {received} bytes copied, {:?}",
        stats.protocol
    );
}

/// A peer whose frames are longer than this socket's (here 64 KiB against 20,000 B) has them
/// dropped by the transport. Its RTS, looked at ahead, must not be planned into the receive
/// posted for it: that receive never binds the message, and after it is cancelled its buffer
/// must be as it was.
#[test]
fn a_receive_for_frames_too_long_for_the_socket_is_left_untouched() {
    let mut options = nicmsg::Options::from_env().expect("options");
    options.protocol.mtu = 20_000;
    options.mtu_auto = false;
    let server = DgramSocket::bind_with("127.0.0.1:0", options).expect("bind the server");
    let client = DgramSocket::bind("127.0.0.1:0").expect("bind the client");
    let server_address = server.local_addr();
    server.send_to(&[1], client.local_addr()).expect("hello");
    let sender = thread::spawn(move || {
        let (_, from) = client.recv_from(&mut [0u8; 1]).expect("hello");
        assert_eq!(from, server_address);
        client
            .send_to(&pattern(18_000, 1), server_address)
            .expect("a datagram in frames the server takes");
        // Never delivered: it ends when the server is given up on.
        let _ = client.send_to(&pattern(1 << 20, 2), server_address);
    });
    let mut first = vec![0u8; 20_000];
    let (len, _) = server.recv_from(&mut first).expect("receive it");
    assert_eq!(len, 18_000, "copied: the server looks ahead from now on");
    let mut buffer = vec![0xEEu8; 1 << 20];
    {
        let receive = server.irecv_from(&mut buffer).expect("post the receive");
        thread::sleep(std::time::Duration::from_millis(300));
        receive.cancel();
        assert!(matches!(receive.wait(), Err(Error::Cancelled)));
    }
    assert!(
        buffer.iter().all(|&byte| byte == 0xEE),
        "a cancelled receive was written"
    );
    drop(server);
    drop(sender);
}

#[test]
fn a_long_datagram_for_a_short_buffer_is_reported_not_cut() {
    let server = DgramSocket::bind("127.0.0.1:0").expect("bind");
    let client = DgramSocket::bind("127.0.0.1:0").expect("bind");
    client
        .send_to(&pattern(5000, 1), server.local_addr())
        .expect("send");
    client
        .send_to(&pattern(10, 2), server.local_addr())
        .expect("send");
    let mut short = [0u8; 100];
    match server.recv_from(&mut short) {
        Err(Error::Truncated {
            message_len: 5000,
            buffer_len: 100,
            ..
        }) => {}
        other => panic!("expected truncation, got {other:?}"),
    }
    // The next datagram is the next one sent.
    let (len, from) = server.recv_from(&mut short).expect("receive");
    assert_eq!((len, from), (10, client.local_addr()));
    assert_eq!(&short[..10], &pattern(10, 2)[..]);
}

#[test]
fn a_datagram_to_a_closed_socket_fails_instead_of_hanging() {
    let gone: SocketAddr = {
        let socket = DgramSocket::bind("127.0.0.1:0").expect("bind");
        socket.local_addr()
    };
    let client = DgramSocket::bind("127.0.0.1:0").expect("bind");
    // Long enough to need the peer's answer (a short one completes from the engine's copy).
    let result = client.send_to(&pattern(100_000, 3), gone);
    assert!(
        matches!(result, Err(Error::PeerUnreachable { .. })),
        "{result:?}"
    );
    // A socket at that address again is a new peer: reached.
    let back = DgramSocket::bind(gone);
    if let Ok(back) = back {
        let data = pattern(100_000, 4);
        // A long datagram completes when the receiver takes it: start it, then receive.
        let sending = client.isend_to(&data, gone).expect("send");
        let datagram = back.recv_lent().expect("receive");
        assert_eq!(&datagram[..], &data[..]);
        sending.wait().expect("the new socket took it");
    }
}

#[test]
fn bad_addresses_and_sizes_are_refused_clearly() {
    assert!(DgramSocket::bind("no-such-host.invalid:1").is_err());
    let socket = DgramSocket::bind("127.0.0.1:0").expect("bind");
    assert!(socket.send_to(b"x", "not an address").is_err());
}

/// A job of `ranks` ranks over namespaces with 5% loss where rank 0 runs `server` with
/// `server_args` at port 7000 of its address and every other rank runs `client` with
/// `client_args` against it. Returns the job's output.
fn server_and_clients(
    ranks: u32,
    (server, server_args): (&Path, &str),
    (client, client_args): (&Path, &str),
) -> std::process::Output {
    let script = format!(
        "server=\"${{NICMSG_BIND_IP%.*}}.1:7000\"; \
         if [ \"$NICMSG_RANK\" = 0 ]; then exec {} server \"$NICMSG_BIND_IP:7000\" {server_args}; fi; \
         sleep 0.5; exec {} client \"$server\" {client_args}",
        server.display(),
        client.display()
    );
    let ranks = ranks.to_string();
    Command::new(launcher())
        .args([
            "run",
            "-n",
            &ranks,
            "--netns",
            "--loss",
            "5%",
            "--timeout",
            "300",
        ])
        .args(["--", "sh", "-c", &script])
        .output()
        .expect("run the launcher")
}

/// The example programs, built: Rust and C, echo and copy.
struct Examples {
    rust_echo: std::path::PathBuf,
    rust_copy: std::path::PathBuf,
    c_echo: std::path::PathBuf,
    c_copy: std::path::PathBuf,
}

/// The examples, or `None` (saying why) where jobs over namespaces cannot run.
fn examples() -> Option<Examples> {
    if let Some(reason) = netns_available() {
        eprintln!("skipped: {reason}");
        return None;
    }
    Some(Examples {
        rust_echo: example("dgram_echo"),
        rust_copy: example("dgram_copy"),
        c_echo: compile_c("examples/c/dgram_echo.c", "c-dgram-echo"),
        c_copy: compile_c("examples/c/dgram_copy.c", "c-dgram-copy"),
    })
}

#[test]
fn echo_and_copy_examples_across_namespaces_under_loss_in_rust_and_c() {
    let Some(programs) = examples() else {
        return;
    };
    let Examples {
        rust_echo,
        rust_copy,
        c_echo,
        c_copy,
    } = programs;
    // Rust sizes 0 B..1 MiB: 41 per round; C: 22.
    let output = server_and_clients(
        3,
        (&rust_echo, "--count 82"),
        (&rust_echo, "--rounds 1 --max 1048576"),
    );
    assert_job_ok(&output, "Rust echo, two clients", "echoed whole and equal");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.matches("echoed whole and equal").count(),
        2,
        "{stdout}"
    );

    let output = server_and_clients(
        2,
        (&c_echo, "--count 41"),
        (&rust_echo, "--rounds 1 --max 1048576"),
    );
    assert_job_ok(&output, "C echo server, Rust client", "echoed 41 datagrams");
    let output = server_and_clients(2, (&rust_echo, "--count 44"), (&c_echo, "--rounds 2"));
    assert_job_ok(
        &output,
        "Rust echo server, C client",
        "(C): 44 datagrams echoed",
    );

    // Files: a Rust server takes two clients at once (one Rust, one C); a C server one.
    let dir = tempdir();
    let input = dir.join("in");
    let output_dir = dir.join("out");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&output_dir).unwrap();
    let file = input.join("data.bin");
    std::fs::write(&file, pattern(3_000_001, 9)).unwrap();
    let output = server_and_clients(
        3,
        (&rust_copy, &format!("{} --files 2", output_dir.display())),
        (&rust_copy, &format!("{} --chunk 250000", file.display())),
    );
    assert_job_ok(&output, "Rust copy, two clients", "server says OK");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.matches("server says OK").count(), 2, "{stdout}");
    assert_eq!(
        std::fs::read(output_dir.join("data.bin")).unwrap(),
        pattern(3_000_001, 9)
    );
    let output = server_and_clients(
        2,
        (&c_copy, &format!("{} --files 1", output_dir.display())),
        (&rust_copy, &file.display().to_string()),
    );
    assert_job_ok(&output, "C copy server, Rust client", "server says OK");
    let output = server_and_clients(
        2,
        (&rust_copy, &format!("{} --files 1", output_dir.display())),
        (&c_copy, &format!("{} --chunk 70000", file.display())),
    );
    assert_job_ok(&output, "Rust copy server, C client", "server says OK");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same examples over LM's zero-copy path (`--lm`), each process in its own namespace so
/// each can attach its placing filter: Rust and C on either side, two clients of one server at
/// once, and file copies whose chunks the server writes from where they were placed.
#[test]
fn lm_echo_and_copy_examples_across_namespaces_under_loss_in_rust_and_c() {
    let Some(programs) = examples() else {
        return;
    };
    let (rust_echo, rust_copy) = (programs.rust_echo, programs.rust_copy);
    let (c_echo, c_copy) = (programs.c_echo, programs.c_copy);
    // Clients bind their namespace's address (the script's), to place what they receive.
    let lm_client = |args: &str| format!("{args} --lm --bind $NICMSG_BIND_IP");
    let output = server_and_clients(
        3,
        (&rust_echo, "--count 82 --lm"),
        (&rust_echo, &lm_client("--rounds 1 --max 1048576")),
    );
    assert_job_ok(&output, "LM: Rust echo, two clients", "(LM, placing)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.matches("echoed whole and equal").count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("server at") && stdout.contains("(LM, placing)"),
        "{stdout}"
    );
    let output = server_and_clients(
        2,
        (&c_echo, "--count 41 --lm"),
        (&rust_echo, &lm_client("--rounds 1 --max 1048576")),
    );
    assert_job_ok(
        &output,
        "LM: C echo server, Rust client",
        "echoed 41 datagrams",
    );
    let output = server_and_clients(
        2,
        (&rust_echo, "--count 44 --lm"),
        (&c_echo, &lm_client("--rounds 2")),
    );
    assert_job_ok(
        &output,
        "LM: Rust echo server, C client",
        "(C): 44 datagrams echoed whole and equal (LM, placing)",
    );
    // A directory of its own: the engine's test, running beside, removes its own at its end.
    let dir = std::env::temp_dir().join(format!("nicmsg-dgram-lm-{}", std::process::id()));
    let (input, output_dir) = (dir.join("in"), dir.join("out"));
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&output_dir).unwrap();
    let file = input.join("data.bin");
    std::fs::write(&file, pattern(3_000_001, 11)).unwrap();
    let output = server_and_clients(
        2,
        (
            &rust_copy,
            &format!("{} --files 1 --lm", output_dir.display()),
        ),
        (
            &c_copy,
            &lm_client(&format!("{} --chunk 70000", file.display())),
        ),
    );
    assert_job_ok(&output, "LM: Rust copy server, C client", "server says OK");
    let output = server_and_clients(
        2,
        (&c_copy, &format!("{} --files 1 --lm", output_dir.display())),
        (
            &rust_copy,
            &lm_client(&format!("{} --chunk 250000", file.display())),
        ),
    );
    assert_job_ok(&output, "LM: C copy server, Rust client", "server says OK");
    assert_eq!(
        std::fs::read(output_dir.join("data.bin")).unwrap(),
        pattern(3_000_001, 11)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nicmsg-dgram-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

//! Datagram sockets over LM (`nicmsg::lm_dgram`) across two network namespaces joined by a
//! bridge: a server in one echoes what clients in the other send it, datagrams of 1 B to
//! 16 MiB, every byte checked. One client places the echoes it receives (an AF_XDP socket with
//! the placing filter), the other, beside it on the same interface, receives by copy (one
//! filter per interface); the placing client restarts halfway, and the server takes its new
//! life for a new peer. The server and the placing client must place what they admit with no
//! byte copied in user space. Run clean and under 5 % loss (nftables on the bridge). Needs
//! root, `ip` and `nft`; skips itself, saying why, otherwise.

#[path = "../../xdp/tests/common/mod.rs"]
mod common;

use std::net::{SocketAddr, SocketAddrV4};
use std::thread;
use std::time::{Duration, Instant};

use common::{address_of, enter, Pair};
use nicmsg::lm_dgram::{LmDgramOptions, LmDgramSocket};
use nicmsg_lm::open::OpenStats;
use nicmsg_xdp::LmSocketStats;

const PORT: u16 = 7000;
/// The placing client's datagrams, sent twice (once per life).
const PLACING_SIZES: [usize; 7] = [1, 1_000, 1_500, 65_536, 1 << 20, 5_000_003, 16 << 20];
/// The client that receives by copy.
const COPYING_SIZES: [usize; 3] = [3_000, 65_536, 1 << 20];
const DEADLINE: Duration = Duration::from_secs(120);

fn byte(client: u16, life: u32, size: usize, at: usize) -> u8 {
    ((at * 131 + usize::from(client) * 7 + life as usize * 29 + size * 13) % 251) as u8
}

fn server_address() -> SocketAddrV4 {
    SocketAddrV4::new(address_of(0), PORT)
}

#[test]
fn datagrams_are_echoed_and_placed_clean() {
    run("nmlmdg", 0);
}

#[test]
fn datagrams_are_echoed_and_placed_under_5_percent_loss() {
    run("nmlmdl", 5);
}

fn run(prefix: &str, loss_percent: u32) {
    let Some(pair) = Pair::create_bridged(prefix) else {
        return;
    };
    if loss_percent > 0 && !pair.drop_on_bridge(loss_percent) {
        eprintln!("skipped: `nft` cannot add the loss rules here");
        return;
    }
    let expected = 2 * PLACING_SIZES.len() + COPYING_SIZES.len();
    let server = {
        let ns = pair.names[0].clone();
        thread::spawn(move || {
            enter(&ns);
            serve(expected)
        })
    };
    // The server's filter must be attached before anything is sent.
    thread::sleep(Duration::from_millis(300));
    let placing = {
        let ns = pair.names[1].clone();
        thread::spawn(move || {
            enter(&ns);
            let first = client(PORT + 1, 1, &PLACING_SIZES, true);
            // A new life at the same address: a new conversation for the server.
            let second = client(PORT + 1, 2, &PLACING_SIZES, true);
            (first, second)
        })
    };
    let copying = {
        let ns = pair.names[1].clone();
        thread::spawn(move || {
            enter(&ns);
            // Let the placing client attach its filter first: one per interface.
            thread::sleep(Duration::from_millis(300));
            client(PORT + 2, 1, &COPYING_SIZES, false)
        })
    };
    let ((first, second), copied) = (
        placing.join().expect("placing client"),
        copying.join().expect("copying client"),
    );
    let (server_stats, peers) = server.join().expect("server");
    eprintln!(
        "server: {} placed ({} B), {} by copy, {} B copied into placed regions, {} frames \
         sent again, {} restart(s) seen, {} RESET(s) taken, zero-copy AF_XDP: {}",
        server_stats.station.placed_transfers,
        server_stats.station.placed_bytes,
        server_stats.station.one_copy_transfers,
        server_stats.station.copied_bytes_placed,
        server_stats.station.frames_resent,
        peers.restarts,
        peers.resets_taken,
        server_stats.zero_copy
    );
    for (who, (stats, placed)) in [("first life", first), ("second life", second)] {
        eprintln!(
            "placing client, {who}: {placed} echoes placed, {} B copied into placed regions",
            stats.station.copied_bytes_placed
        );
        assert_eq!(stats.station.copied_bytes_placed, 0, "{who}: {stats:?}");
        assert!(placed > 0, "{who}: some echoes were placed: {stats:?}");
    }
    assert_eq!(copied.1, 0, "the copying client places nothing");
    assert_eq!(
        server_stats.station.copied_bytes_placed, 0,
        "{server_stats:?}"
    );
    assert!(
        server_stats.station.placed_transfers > 0,
        "the server placed: {server_stats:?}"
    );
    // The client's new life is a new conversation to the server: seen as a restart of the
    // address, or, when the new life answered the old conversation's last frames with RESET
    // first (an acknowledgement lost), as a new peer after that RESET.
    assert!(
        peers.restarts + peers.resets_taken >= 1,
        "the server saw the client's new life: {peers:?}"
    );
    drop(pair);
}

/// Echoes `expected` datagrams; returns the socket's counters.
fn serve(expected: usize) -> (LmSocketStats, OpenStats) {
    let options = LmDgramOptions {
        required: true,
        ..LmDgramOptions::default()
    };
    let mut socket = LmDgramSocket::bind_with(server_address(), options).expect("server binds");
    let started = Instant::now();
    let mut received = 0;
    while received < expected {
        assert!(
            started.elapsed() < DEADLINE,
            "the server got only {received}"
        );
        let wait = Duration::from_millis(100);
        let Some(datagram) = socket.recv_lent_timeout(wait).expect("receive") else {
            continue;
        };
        received += 1;
        let (from, bytes) = (datagram.from(), datagram.to_vec());
        drop(datagram);
        if let Err(error) = socket.send_to(&bytes, from) {
            // The client took the echo and its life ended before the acknowledgement came
            // (lost): its new life answers the old conversation's frames with RESET.
            eprintln!("server: echo to {from}: {error}");
        }
    }
    // The last echo's acknowledgements.
    let _ = socket
        .recv_lent_timeout(Duration::from_millis(200))
        .expect("receive");
    (socket.stats(), socket.peer_stats())
}

/// Sends each size to the server and checks the echo; returns the client's counters and how
/// many echoes were placed.
fn client(port: u16, life: u32, sizes: &[usize], place: bool) -> (LmSocketStats, usize) {
    let local = SocketAddrV4::new(address_of(1), port);
    let options = LmDgramOptions {
        place,
        required: place,
        ..LmDgramOptions::default()
    };
    let mut socket = LmDgramSocket::bind_with(local, options).expect("client binds");
    let mut placed = 0;
    for &size in sizes {
        let mut buffer = socket.send_buffer(size).expect("a send buffer");
        let bytes: Vec<u8> = (0..size).map(|at| byte(port, life, size, at)).collect();
        buffer.write_at(0, &bytes).expect("fits");
        let (_, sent) = socket.send_buffer_to(buffer, server_address());
        sent.expect("delivered to the server");
        let echo = socket.recv_lent().expect("the echo");
        assert_eq!(echo.from(), SocketAddr::V4(server_address()));
        assert_eq!(echo.len(), size, "echo of {size} B (life {life})");
        let wrong = echo.iter().zip(&bytes).position(|(a, b)| a != b);
        assert_eq!(
            wrong, None,
            "echo of {size} B (life {life}): first wrong byte"
        );
        placed += usize::from(echo.was_placed());
    }
    (socket.stats(), placed)
}

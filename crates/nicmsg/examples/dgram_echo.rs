//! An echo server and client over nicmsg's datagram sockets: no launcher, no ranks, addresses
//! only. The client sends datagrams of growing sizes (0 B to `--max`, 4 MiB by default), each
//! with its own byte pattern, and checks that every echo comes back whole and equal. With
//! `--lm` both sides use LM's zero-copy path (`nicmsg::lm_dgram`); a client binds `--bind`
//! (the address of its interface toward the server, to place the echoes it receives).
//!
//! ```text
//! dgram_echo server 0.0.0.0:7000 [--count N] [--lm]   # echoes; exits after N datagrams
//! dgram_echo client 10.0.0.1:7000 [--rounds R] [--max BYTES] [--lm] [--bind IP]
//! ```

#[path = "support/any_dgram.rs"]
mod any_dgram;

use any_dgram::AnyDgram;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Instant;

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed * 97) >> 3) as u8)
        .collect()
}

/// 0, 1, then powers of two and one past each, up to `max`.
fn sizes(max: usize) -> Vec<usize> {
    let mut sizes = vec![0, 1];
    let mut size = 2;
    while size <= max {
        sizes.push(size);
        if size < max {
            sizes.push(size + 1);
        }
        size *= 2;
    }
    sizes
}

fn serve(bind: &str, count: Option<u64>, lm: bool) -> Result<(), nicmsg::Error> {
    let mut socket = AnyDgram::bind(bind, lm)?;
    println!(
        "dgram_echo server at {} ({})",
        socket.local_addr(),
        socket.path()
    );
    let mut served = 0u64;
    while count.is_none_or(|n| served < n) {
        socket.echo_next()?;
        served += 1;
    }
    println!("dgram_echo server: echoed {served} datagrams");
    Ok(())
}

fn client(
    server: SocketAddr,
    (rounds, max): (usize, usize),
    (lm, bind): (bool, Option<std::net::IpAddr>),
) -> Result<bool, nicmsg::Error> {
    let bind = SocketAddr::new(bind.unwrap_or_else(|| unspecified_like(server)), 0);
    let mut socket = AnyDgram::bind(&bind.to_string(), lm)?;
    let mut reply = vec![0u8; max];
    let (mut datagrams, mut bytes) = (0u64, 0u64);
    let mut small_rtts = Vec::new();
    for round in 0..rounds {
        for (index, &len) in sizes(max).iter().enumerate() {
            let data = pattern(len, round * 1000 + index);
            let started = Instant::now();
            socket.send_to(&data, server)?;
            let (got, from) = socket.recv_from(&mut reply)?;
            if len <= 64 {
                small_rtts.push(started.elapsed().as_secs_f64() * 1e6);
            }
            if from != server || got != len || reply[..got] != data[..] {
                eprintln!("dgram_echo client: echo of {len} B from {from} differs ({got} B)");
                return Ok(false);
            }
            datagrams += 1;
            bytes += len as u64;
        }
    }
    small_rtts.sort_by(f64::total_cmp);
    let median = small_rtts.get(small_rtts.len() / 2).copied().unwrap_or(0.0);
    println!(
        "dgram_echo client: {datagrams} datagrams ({bytes} bytes) echoed whole and equal; \
         round trip of up to 64 B: median {median:.1} us ({})",
        socket.path()
    );
    Ok(true)
}

/// The wildcard address of the server's family, to bind the client to.
fn unspecified_like(server: SocketAddr) -> std::net::IpAddr {
    match server {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    }
}

fn option(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1).cloned())
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: dgram_echo server ADDRESS [--count N] [--lm]\n       \
         dgram_echo client SERVER [--rounds R] [--max BYTES] [--lm] [--bind IP]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(role), Some(address)) = (args.first(), args.get(1)) else {
        return usage();
    };
    let number = |name: &str, default: usize| -> Option<usize> {
        match option(&args, name) {
            None => Some(default),
            Some(text) => text.parse().ok(),
        }
    };
    let lm = args.iter().any(|a| a == "--lm");
    let outcome = match role.as_str() {
        "server" => {
            let count = option(&args, "--count").and_then(|c| c.parse().ok());
            serve(address, count, lm).map(|()| true)
        }
        "client" => {
            let bind = option(&args, "--bind").map(|ip| ip.parse());
            let (Some(rounds), Some(max), Ok(server), Ok(bind)) = (
                number("--rounds", 3),
                number("--max", 4 << 20),
                address.parse::<SocketAddr>(),
                bind.transpose(),
            ) else {
                return usage();
            };
            client(server, (rounds, max), (lm, bind))
        }
        _ => return usage(),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("dgram_echo: {error}");
            ExitCode::FAILURE
        }
    }
}

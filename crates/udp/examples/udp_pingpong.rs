//! Raw UDP floor: two threads ping-pong 8-byte datagrams over loopback with busy polling and print
//! the median half round trip. Everything nicmsg adds on top is measured against this.
//!
//! `cargo run --release -p nicmsg-udp --example udp_pingpong [iterations]`

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nicmsg_udp::{UdpOptions, UdpTransport};

const ITERATIONS: usize = 20_000;
/// Round trips run first and not measured: caches, branch predictors, CPU frequency.
const WARMUP: usize = 1_000;
/// A ping without an answer after this long is sent again, so the benchmark cannot hang on a lost
/// datagram. On loopback that is nearly always a thread descheduled on a busy machine; the late
/// answer to the first copy then ends the round trip, and the second is ignored by sequence.
const RESEND_AFTER: Duration = Duration::from_millis(100);

fn main() {
    let iterations = std::env::args()
        .nth(1)
        .map(|arg| arg.parse().expect("iterations: a number"))
        .unwrap_or(ITERATIONS);
    let options = UdpOptions {
        bind: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
        ..UdpOptions::default()
    };
    let mut ping = UdpTransport::bind(options.clone()).expect("bind");
    let mut pong = UdpTransport::bind(options).expect("bind");
    let peers = [ping.local_addr(), pong.local_addr()];
    ping.set_peers(&peers);
    pong.set_peers(&peers);

    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut reply = [0u8; 8];
            while !stop.load(Ordering::Relaxed) {
                let n = pong.recv_batch().expect("recv");
                for i in 0..n {
                    reply.copy_from_slice(&pong.received(i).1[..8]);
                    pong.send_batch(&[(0, &[&reply])]).expect("send");
                }
            }
            pong
        })
    };

    let mut samples = Vec::with_capacity(iterations);
    let mut resent = 0u64;
    for seq in 0..(WARMUP + iterations) as u64 {
        let ping_bytes = seq.to_le_bytes();
        let start = Instant::now();
        let mut sent_at = start;
        ping.send_batch(&[(1, &[&ping_bytes])]).expect("send");
        'wait: loop {
            let n = ping.recv_batch().expect("recv");
            for i in 0..n {
                if ping.received(i).1 == ping_bytes {
                    break 'wait;
                }
            }
            if n == 0 && sent_at.elapsed() > RESEND_AFTER {
                resent += 1;
                sent_at = Instant::now();
                ping.send_batch(&[(1, &[&ping_bytes])]).expect("send");
            }
        }
        if seq as usize >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    stop.store(true, Ordering::Relaxed);
    let pong = echo.join().expect("echo thread");

    samples.sort_unstable();
    let half_us = |q: f64| {
        let at = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[at].as_secs_f64() * 1e6 / 2.0
    };
    println!(
        "udp_pingpong: {iterations} round trips of 8-byte datagrams over loopback, busy polling"
    );
    println!(
        "half round trip (us): median {:.2}  min {:.2}  p10 {:.2}  p90 {:.2}  p99 {:.2}",
        half_us(0.5),
        half_us(0.0),
        half_us(0.1),
        half_us(0.9),
        half_us(0.99)
    );
    let (a, b) = (ping.stats(), pong.stats());
    println!(
        "resent after {RESEND_AFTER:?}: {resent}; ping: {} sendmmsg, {} recvmmsg ({} empty); \
         pong: {} sendmmsg, {} recvmmsg",
        a.send_syscalls, a.recv_syscalls, a.recv_would_block, b.send_syscalls, b.recv_syscalls
    );
}

//! `nicmsg check`: a rank program that tests the launch environment end to end. It reads the job
//! from the environment, binds a UDP socket to `NICMSG_BIND_IP`, exchanges addresses through rank
//! 0 and then pings every other rank over UDP (retrying, so it also passes under `--loss`).
//! Under a PMIx launcher it bootstraps as the library does: through PMIx, bound where the
//! PMIx bootstrap chooses (`nicmsg_bootstrap::Bootstrap`).
//!
//! `nicmsg run -n 4 --netns --loss 5% -- nicmsg check`, `mpirun -n 4 nicmsg check`

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use clap::Args;
use nicmsg_bootstrap::{Bootstrap, JobEnv};

use crate::units::parse_seconds;

/// Arguments of `nicmsg check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_seconds)]
    pub timeout: Duration,
}

const MAGIC: &[u8; 4] = b"NMCK";
const PING: u8 = 1;
const PONG: u8 = 2;
/// Pings to peers that have not answered are resent this often.
const RESEND: Duration = Duration::from_millis(20);
/// After every peer answered, keep answering pings until none came for this long.
const LINGER: Duration = Duration::from_millis(300);

/// Runs the check; `Err` has the message to print.
pub fn check(args: &CheckArgs) -> Result<(), String> {
    let start = Instant::now();
    let mut bootstrap = Bootstrap::from_env(args.timeout).map_err(|e| e.to_string())?;
    let env = bootstrap.job().clone();
    let via = bootstrap.via();
    let bind_ip = bootstrap
        .bind_ip()
        .map_err(|e| e.to_string())?
        .unwrap_or(match env.bootstrap {
            Some(SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        });
    let sock = UdpSocket::bind((bind_ip, 0))
        .map_err(|e| format!("cannot bind a UDP socket to {bind_ip} (NICMSG_BIND_IP): {e}"))?;
    let me = sock.local_addr().map_err(|e| e.to_string())?;
    let table = bootstrap.exchange(me).map_err(|e| e.to_string())?;
    println!(
        "rank {} of {} (job {}): address exchange ok in {} ms (via {via}); data address {}",
        env.rank,
        env.size,
        env.job,
        start.elapsed().as_millis(),
        table[env.rank as usize]
    );
    if env.rank == 0 {
        let entries: Vec<String> = table
            .iter()
            .enumerate()
            .map(|(r, a)| format!("{r}={a}"))
            .collect();
        println!("address table: {}", entries.join(" "));
    }
    let deadline = start + args.timeout;
    let rtt_start = Instant::now();
    ping_all(&env, &sock, &table, deadline)?;
    println!(
        "rank {}: reached all {} other ranks over UDP in {} ms",
        env.rank,
        env.size - 1,
        rtt_start.elapsed().as_millis()
    );
    Ok(())
}

fn packet(kind: u8, env: &JobEnv) -> [u8; 13] {
    let mut p = [0u8; 13];
    p[..4].copy_from_slice(MAGIC);
    p[4] = kind;
    p[5..9].copy_from_slice(&env.job.to_be_bytes());
    p[9..13].copy_from_slice(&env.rank.to_be_bytes());
    p
}

fn ping_all(
    env: &JobEnv,
    sock: &UdpSocket,
    table: &[SocketAddr],
    deadline: Instant,
) -> Result<(), String> {
    sock.set_read_timeout(Some(Duration::from_millis(5)))
        .map_err(|e| e.to_string())?;
    let mut answered = vec![false; table.len()];
    answered[env.rank as usize] = true;
    let ping = packet(PING, env);
    let pong = packet(PONG, env);
    let mut last_send: Option<Instant> = None;
    let mut last_ping_seen = Instant::now();
    // A job of one rank has nobody to hear from: done at once.
    let mut all_since: Option<Instant> = answered.iter().all(|&a| a).then(Instant::now);
    let mut buf = [0u8; 64];
    loop {
        let now = Instant::now();
        if let Some(since) = all_since {
            if now.duration_since(since.max(last_ping_seen)) >= LINGER {
                return Ok(());
            }
        } else if now >= deadline {
            let missing: Vec<String> = answered
                .iter()
                .enumerate()
                .filter(|(_, a)| !**a)
                .map(|(r, _)| format!("{r} ({})", table[r]))
                .collect();
            return Err(format!(
                "rank {}: no UDP answer from {} before the timeout",
                env.rank,
                missing.join(", ")
            ));
        } else if last_send.is_none_or(|t| now.duration_since(t) >= RESEND) {
            for (r, addr) in table.iter().enumerate() {
                if !answered[r] {
                    let _ = sock.send_to(&ping, addr);
                }
            }
            last_send = Some(now);
        }

        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let p = &buf[..n];
        if n != 13 || &p[..4] != MAGIC || p[5..9] != env.job.to_be_bytes() {
            continue;
        }
        let rank = u32::from_be_bytes(p[9..13].try_into().expect("4 bytes")) as usize;
        if rank >= table.len() {
            continue;
        }
        match p[4] {
            PING => {
                last_ping_seen = Instant::now();
                let _ = sock.send_to(&pong, from);
            }
            PONG => {
                answered[rank] = true;
                if all_since.is_none() && answered.iter().all(|&a| a) {
                    all_since = Some(Instant::now());
                }
            }
            _ => {}
        }
    }
}

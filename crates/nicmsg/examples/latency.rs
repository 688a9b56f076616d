//! Ping-pong latency between ranks 0 and 1 with the papers' method: warm-up, then N timed round
//! trips per size; prints the median, min, max and 99th percentile of half the round trip.
//! Usage: `nicmsg run -n 2 -- target/release/examples/latency [ITERATIONS] [SIZE...]`
//! (defaults: 10000 iterations; 8 64 1024 4096 65536 bytes).

use nicmsg::{Comm, Source, TagMatch};
use std::time::Instant;

const WARM_UP: usize = 1000;

fn main() -> Result<(), nicmsg::Error> {
    let comm = Comm::init()?;
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let iterations = args.first().copied().unwrap_or(10_000).max(1);
    let sizes = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        vec![8, 64, 1024, 4096, 65536]
    };
    let rank = comm.rank();
    if rank == 0 {
        println!(
            "{:>9} {:>10} {:>10} {:>10} {:>10}   ({iterations} round trips, {:?} engine)",
            "bytes",
            "median_us",
            "min_us",
            "p99_us",
            "max_us",
            comm.engine_mode()
        );
    }
    for len in sizes {
        let out = vec![rank as u8; len];
        let mut inbox = vec![0u8; len];
        let mut half_round_trips = Vec::with_capacity(iterations);
        for iteration in 0..WARM_UP + iterations {
            let start = Instant::now();
            match rank {
                0 => {
                    comm.send(&out, 1, 1)?;
                    comm.recv(&mut inbox, Source::Rank(1), TagMatch::Tag(2))?;
                }
                1 => {
                    comm.recv(&mut inbox, Source::Rank(0), TagMatch::Tag(1))?;
                    comm.send(&out, 0, 2)?;
                }
                _ => break,
            }
            if iteration >= WARM_UP {
                half_round_trips.push(start.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        if rank == 0 {
            half_round_trips.sort_by(f64::total_cmp);
            let at = |q: f64| {
                half_round_trips[((half_round_trips.len() - 1) as f64 * q).round() as usize]
            };
            println!(
                "{len:>9} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                at(0.5),
                at(0.0),
                at(0.99),
                at(1.0)
            );
        }
    }
    comm.barrier()
}

//! Ping-pong between rank 0 and rank 1 over a range of sizes; every byte is checked.
//! Run: `nicmsg run -n 2 -- target/release/examples/pingpong`

use nicmsg::{Comm, Source, TagMatch};

fn fill(buffer: &mut [u8], seed: u64) {
    for (i, byte) in buffer.iter_mut().enumerate() {
        *byte = (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8;
    }
}

fn main() -> Result<(), nicmsg::Error> {
    let comm = Comm::init()?;
    let (rank, size) = (comm.rank(), comm.size());
    if size < 2 {
        eprintln!("pingpong needs at least 2 ranks");
        std::process::exit(2);
    }
    let iterations = 20;
    for &len in &[
        0usize,
        1,
        8,
        1000,
        1472,
        4096,
        8192,
        8193,
        65536,
        1 << 20,
        4 << 20,
    ] {
        let mut out = vec![0u8; len];
        let mut inbox = vec![0u8; len];
        let mut expected = vec![0u8; len];
        let start = std::time::Instant::now();
        for iteration in 0..iterations {
            let seed = (len as u64) << 8 | iteration;
            if rank == 0 {
                fill(&mut out, seed);
                comm.send(&out, 1, 1)?;
                let status = comm.recv(&mut inbox, Source::Rank(1), TagMatch::Tag(2))?;
                fill(&mut expected, seed + 1);
                assert_eq!(status.len as usize, len);
                assert!(inbox == expected, "rank 0: corrupt pong of {len} bytes");
            } else if rank == 1 {
                let status = comm.recv(&mut inbox, Source::Rank(0), TagMatch::Tag(1))?;
                fill(&mut expected, seed);
                assert_eq!(status.len as usize, len);
                assert!(inbox == expected, "rank 1: corrupt ping of {len} bytes");
                fill(&mut out, seed + 1);
                comm.send(&out, 0, 2)?;
            }
        }
        if rank == 0 {
            let half_rtt = start.elapsed().as_secs_f64() * 1e6 / (2.0 * iterations as f64);
            println!("{len:>9} bytes: {half_rtt:10.1} us half round trip, verified");
        }
    }
    comm.barrier()?;
    if rank == 0 {
        println!(
            "pingpong: all sizes verified ({:?} engine)",
            comm.engine_mode()
        );
    }
    Ok(())
}

//! A token travels around the ring of ranks several times, growing at every hop; each rank checks
//! every byte it receives. Run: `nicmsg run -n 4 -- target/release/examples/ring`

use nicmsg::{Comm, Source, TagMatch};

const LAPS: u32 = 10;

fn token(lap: u32, hop: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(lap * 977 + hop * 13) as u8
        })
        .collect()
}

fn main() -> Result<(), nicmsg::Error> {
    let comm = Comm::init()?;
    let (rank, size) = (comm.rank(), comm.size());
    if size < 2 {
        eprintln!("ring needs at least 2 ranks");
        std::process::exit(2);
    }
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    for lap in 0..LAPS {
        // The token grows with the lap so that eager and rendezvous both go around.
        let len = 1usize << (lap * 2).min(22);
        let mut inbox = vec![0u8; len];
        if rank == 0 {
            comm.send(&token(lap, 0, len), next, lap)?;
            let status = comm.recv(&mut inbox, Source::Rank(prev), TagMatch::Tag(lap))?;
            assert_eq!(status.len as usize, len);
            assert!(
                inbox == token(lap, size - 1, len),
                "rank 0: corrupt token on lap {lap}"
            );
            println!("lap {lap}: {len} bytes around {size} ranks, verified");
        } else {
            let status = comm.recv(&mut inbox, Source::Rank(prev), TagMatch::Tag(lap))?;
            assert_eq!(status.len as usize, len);
            assert!(
                inbox == token(lap, rank - 1, len),
                "rank {rank}: corrupt token on lap {lap}"
            );
            comm.send(&token(lap, rank, len), next, lap)?;
        }
    }
    comm.barrier()?;
    if rank == 0 {
        println!(
            "ring: {LAPS} laps verified ({:?} engine)",
            comm.engine_mode()
        );
    }
    Ok(())
}

//! Survives the death of a peer: rank 1 prints "ready" and waits to be killed (the test sends
//! SIGKILL); rank 0 has a receive from rank 1 and a large send to it pending, and must see both
//! fail with "peer unreachable" (not hang), then keeps exchanging with the other ranks.

use nicmsg::{Comm, Error, Source, TagMatch};
use std::io::Write;

fn main() -> Result<(), Error> {
    let comm = Comm::init()?;
    let (rank, size) = (comm.rank(), comm.size());
    assert!(size >= 3, "peer_death needs at least 3 ranks");
    comm.barrier()?;
    if rank == 1 {
        println!("rank 1 ready");
        std::io::stdout().flush().ok();
        std::thread::sleep(std::time::Duration::from_secs(600));
        return Ok(());
    }
    if rank == 0 {
        let mut inbox = vec![0u8; 64];
        let big = vec![7u8; 4 << 20];
        let receive = comm.irecv(&mut inbox, Source::Rank(1), TagMatch::Any)?;
        // Refused at once if rank 1 is already known dead, else failed when it is found dead.
        let send = comm.isend(&big, 1, 5);
        let started = std::time::Instant::now();
        let sent = send.and_then(|send| send.wait());
        for (what, result) in [("receive", receive.wait()), ("send", sent)] {
            match result {
                Err(Error::PeerUnreachable { peer: 1 }) => {
                    println!("{what} from/to rank 1: peer unreachable, as expected")
                }
                other => panic!("{what} with dead rank 1 ended with {other:?}"),
            }
        }
        println!(
            "dead peer detected after {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    // The survivors still talk: rank 0 and every rank from 2 up exchange a checked message.
    let survivors: Vec<u32> = (0..size).filter(|&r| r != 1).collect();
    for &peer in survivors.iter().filter(|&&p| p != rank) {
        let out = vec![(rank * 16 + peer) as u8; 10_000];
        let mut inbox = vec![0u8; 10_000];
        let receive = comm.irecv(&mut inbox, Source::Rank(peer), TagMatch::Tag(9))?;
        comm.send(&out, peer, 9)?;
        receive.wait()?;
        assert!(
            inbox.iter().all(|&b| b == (peer * 16 + rank) as u8),
            "rank {rank}: corrupt message from {peer}"
        );
    }
    println!("rank {rank}: survivors verified");
    Ok(())
}

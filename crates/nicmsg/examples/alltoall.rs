//! Every rank sends a distinct message to every rank, itself included, at once (non-blocking),
//! receives with ANY source, and checks every byte and that each rank was heard exactly once
//! per round.
//! Run: `nicmsg run -n 4 -- target/release/examples/alltoall`

use nicmsg::{Comm, Source, TagMatch};

const ROUNDS: u32 = 6;

fn payload(from: u32, to: u32, round: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ (from * 7919 + to * 104_729 + round * 31)) as u8)
        .collect()
}

fn main() -> Result<(), nicmsg::Error> {
    let comm = Comm::init()?;
    let (rank, size) = (comm.rank(), comm.size());
    for round in 0..ROUNDS {
        let len = [0usize, 100, 1500, 9000, 70_000, 1 << 20][round as usize % 6];
        let peers: Vec<u32> = (0..size).collect();
        let outgoing: Vec<Vec<u8>> = peers
            .iter()
            .map(|&p| payload(rank, p, round, len))
            .collect();
        let mut inboxes: Vec<Vec<u8>> = peers.iter().map(|_| vec![0u8; len]).collect();
        let receives: Vec<_> = inboxes
            .iter_mut()
            .map(|inbox| comm.irecv(inbox, Source::Any, TagMatch::Tag(round)))
            .collect::<Result<_, _>>()?;
        let sends: Vec<_> = peers
            .iter()
            .zip(&outgoing)
            .map(|(&peer, data)| comm.isend(data, peer, round))
            .collect::<Result<_, _>>()?;
        let mut heard = vec![false; size as usize];
        let statuses: Vec<_> = comm
            .waitall(receives)
            .into_iter()
            .collect::<Result<_, _>>()?;
        for result in comm.waitall(sends) {
            result?;
        }
        for (status, inbox) in statuses.iter().zip(&inboxes) {
            assert!(
                !heard[status.source as usize],
                "rank {rank}: two messages from {} in round {round}",
                status.source
            );
            heard[status.source as usize] = true;
            assert_eq!(status.len as usize, len);
            assert!(
                *inbox == payload(status.source, rank, round, len),
                "rank {rank}: corrupt message from {}",
                status.source
            );
        }
        comm.barrier()?;
        if rank == 0 {
            println!("round {round}: {len}-byte all-to-all among {size} ranks verified");
        }
    }
    if rank == 0 {
        println!(
            "alltoall: {ROUNDS} rounds verified ({:?} engine)",
            comm.engine_mode()
        );
    }
    Ok(())
}

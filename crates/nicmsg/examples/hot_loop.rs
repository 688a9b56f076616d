//! The application's hot loop in thread mode: isend, irecv and test-polling only. Between two
//! marker system calls (getrusage) rank 0's own thread should make no system call at all: the
//! engine thread does all the I/O. `scripts/syscalls-in-hot-loop.sh` counts them with strace.

use nicmsg::{Comm, Source, TagMatch};

const ITERATIONS: usize = 10_000;

fn marker() {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes into the buffer we own; it only marks the trace.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
}

fn exchange(comm: &Comm, out: &[u8], inbox: &mut [u8]) -> Result<(), nicmsg::Error> {
    let peer = 1 - comm.rank();
    let mut receive = comm.irecv(inbox, Source::Rank(peer), TagMatch::Tag(1))?;
    let mut send = comm.isend(out, peer, 1)?;
    let (mut received, mut sent) = (false, false);
    while !(received && sent) {
        if !received {
            received = receive.test().transpose()?.is_some();
        }
        if !sent {
            sent = send.test().transpose()?.is_some();
        }
        std::hint::spin_loop();
    }
    Ok(())
}

fn main() -> Result<(), nicmsg::Error> {
    let comm = Comm::init()?;
    assert_eq!(comm.size(), 2, "hot_loop runs on 2 ranks");
    let out = vec![comm.rank() as u8; 64];
    let mut inbox = vec![0u8; 64];
    for _ in 0..100 {
        exchange(&comm, &out, &mut inbox)?; // warm up: pins the buffers, fills the caches
    }
    marker();
    for _ in 0..ITERATIONS {
        exchange(&comm, &out, &mut inbox)?;
    }
    marker();
    assert!(inbox.iter().all(|&b| b == 1 - comm.rank() as u8));
    comm.barrier()?;
    if comm.rank() == 0 {
        println!(
            "hot loop: {ITERATIONS} exchanges done ({:?} engine)",
            comm.engine_mode()
        );
    }
    Ok(())
}

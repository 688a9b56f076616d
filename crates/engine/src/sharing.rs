//! Sharing a core between the engine thread and the application: how soon the engine runs
//! when a datagram wakes it on a core the application computes on, and how polling loops give
//! the core away when they have nothing to do.
//!
//! The Linux fair scheduler (EEVDF, 6.6 and later) lets the running thread finish its slice
//! before a woken one of equal weight takes the core; the default slice is a few milliseconds
//! of computation. On a machine with fewer cores than busy threads, a thread engine woken by a
//! packet would then wait out the application's computation, and "asynchronous" progress
//! would happen only in the application's wait: exactly the complaint about other libraries.
//! A thread that asks for a short slice (`sched_setattr` with `sched_runtime` under
//! `SCHED_OTHER`, kernels 6.12 and later) gets an earlier virtual deadline and preempts on
//! wake-up, like the interrupt of a NIC. It needs no privilege and takes no more CPU than its
//! fair share: a short slice runs sooner, not longer.

/// The slice the engine thread asks for. The kernel clamps requests to 0.1 .. 100 ms; the
/// shortest one lets a woken engine preempt a computation within about a tenth of a
/// millisecond, far below the default slice.
pub const ENGINE_SLICE_NS: u64 = 100_000;

/// Asks the scheduler for a slice of `slice_ns` for the calling thread, keeping its policy
/// (`SCHED_OTHER`) and nice value. Returns false where the kernel refuses or predates custom
/// slices (it then ignores the request): the engine still works, it only waits longer for a
/// busy core.
pub fn request_short_slice(slice_ns: u64) -> bool {
    // SAFETY: sched_attr is plain integers; all zeroes is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_policy = libc::SCHED_OTHER as u32;
    // SAFETY: getpriority reads this thread's nice value. Its error value (-1) is not told
    // apart from nice -1: asking an unprivileged thread's nice down is refused, and a refusal
    // leaves the thread as it was.
    attr.sched_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    attr.sched_runtime = slice_ns;
    // SAFETY: sched_setattr reads a fully initialised attribute of the size it is told;
    // pid 0 is the calling thread.
    let result = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const _, 0) };
    result == 0
}

/// How long a polling loop spins on the CPU before it starts offering the core to other
/// threads between polls: short waits (a ping-pong's reply) stay at spinning latency, long ones
/// stop taking the core from an application or engine thread that shares it.
pub const YIELD_AFTER_NS: u64 = 5_000;

/// One round of a polling loop that has found nothing for `idle_for_ns`: a CPU pause at first,
/// then `sched_yield`, which returns at once on a core of its own and otherwise lets the thread
/// that shares the core (the engine that must make progress, or the computation it overlaps
/// with) run first.
pub fn relax(idle_for_ns: u64) {
    if idle_for_ns < YIELD_AFTER_NS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's scheduling attributes.
    fn current_attr() -> libc::sched_attr {
        // SAFETY: as above; sched_getattr writes at most `size` bytes into the attribute.
        let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::sched_attr>() as u32;
        // SAFETY: sched_getattr of this thread (pid 0) writes at most `size` bytes, the size
        // of `attr`, into it.
        let result =
            unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut _, size, 0) };
        assert_eq!(result, 0, "sched_getattr");
        attr
    }

    #[test]
    fn a_granted_slice_is_the_one_asked_for_and_the_policy_stays_fair() {
        std::thread::spawn(|| {
            let before = current_attr();
            let granted = request_short_slice(ENGINE_SLICE_NS);
            let after = current_attr();
            assert_eq!(after.sched_policy, libc::SCHED_OTHER as u32);
            assert_eq!(after.sched_nice, before.sched_nice);
            if granted {
                assert_eq!(after.sched_runtime, ENGINE_SLICE_NS);
            }
        })
        .join()
        .expect("the thread's assertions hold");
    }
}

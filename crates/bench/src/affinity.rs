//! CPU affinity of benchmark processes: two busy-polling processes that share one CPU hand it
//! over only at scheduler ticks, so each rank (and each external tool) gets a CPU of its own.

/// Pins the calling thread to `cpu` (also usable in a child between fork and exec: one system
/// call on a local set). A failure leaves it unpinned: a slower measurement beats none.
pub fn pin_current_thread(cpu: usize) {
    // SAFETY: cpu_set_t is a plain bit set; CPU_SET ignores CPUs beyond its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The CPUs the process could run on when it first asked, before any of its threads was
/// pinned (the looper runs on all of them whatever the measuring thread was pinned to).
pub fn process_cpus() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(allowed_cpus)
}

/// The CPUs this thread may run on (empty if they cannot be read).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the plain bit set it is given.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        set
    };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: reads a bit of a valid set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

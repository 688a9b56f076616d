//! The few `bpf(2)` commands the transport needs: create an `XSKMAP`, put a socket in it, load
//! the steering program, and attach it to an interface through a BPF link. A link detaches the
//! program when its last descriptor closes, so a rank that dies (even by SIGKILL) leaves no
//! program behind on the interface.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::program::Insn;

// Commands, map, program and attach types (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// An array map user space may map into its memory.
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
/// Verifier log of a refused program: enough for the whole log of a program this size.
const VERIFIER_LOG_BYTES: usize = 64 * 1024;
/// Log level 1: the verifier explains a refusal.
const LOG_LEVEL_ON_ERROR: u32 = 1;

/// How the program is attached (`XDP_FLAGS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// The driver runs the program on its own receive path (veth and most NICs).
    Native,
    /// The kernel runs it on socket buffers, for drivers without XDP support (slower, any
    /// device).
    Generic,
}

impl AttachMode {
    fn flags(self) -> u32 {
        const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
        const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
        match self {
            AttachMode::Native => XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `bpf(cmd, attr, sizeof attr)`; a new descriptor for the commands that return one.
fn bpf<T>(command: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a plain C struct of the size passed, laid out as the kernel's union
    // member for `command`; the kernel reads and may write only those bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            std::ptr::from_mut(attr).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `fd` is a descriptor the kernel just returned to us and nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

fn name16(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let len = name.len().min(15);
    out[..len].copy_from_slice(&name.as_bytes()[..len]);
    out
}

/// An `XSKMAP`: receive queue index → AF_XDP socket.
#[derive(Debug)]
pub struct SocketMap {
    fd: OwnedFd,
}

impl SocketMap {
    /// A map with room for queues `0..queues`.
    pub fn create(queues: u32) -> io::Result<Self> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queues,
            map_name: name16("nicmsg_xsks"),
            ..MapCreateAttr::default()
        };
        Ok(Self {
            fd: owned(bpf(BPF_MAP_CREATE, &mut attr)?),
        })
    }

    /// Frames received on `queue` go to `socket` from now on.
    pub fn insert(&self, queue: u32, socket: RawFd) -> io::Result<()> {
        let key = queue;
        let value = socket as u32;
        let mut attr = MapUpdateAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: std::ptr::from_ref(&key) as u64,
            value: std::ptr::from_ref(&value) as u64,
            ..MapUpdateAttr::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One value of `len` bytes that a program and user space share: an mmapable array map of one
/// entry, mapped read-write, so neither side needs a system call to read or write it.
#[derive(Debug)]
pub struct MappedArray {
    fd: OwnedFd,
    bytes: std::ptr::NonNull<u8>,
    map_len: usize,
}

// SAFETY: the mapping is process-wide; callers access it only through atomics or copies.
unsafe impl Send for MappedArray {}

impl MappedArray {
    pub fn create(len: usize, name: &str) -> io::Result<Self> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: len as u32,
            max_entries: 1,
            map_flags: BPF_F_MMAPABLE,
            map_name: name16(name),
            ..MapCreateAttr::default()
        };
        let fd = owned(bpf(BPF_MAP_CREATE, &mut attr)?);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let map_len = len.next_multiple_of(page);
        // SAFETY: a shared mapping of the map's value area, `len` bytes rounded to pages.
        let mapped = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            bytes: std::ptr::NonNull::new(mapped.cast()).expect("mmap returned a mapping"),
            map_len,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The value's first byte (page-aligned; the program may write any byte at any time).
    pub fn as_ptr(&self) -> *mut u8 {
        self.bytes.as_ptr()
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`.
        unsafe { libc::munmap(self.bytes.as_ptr().cast(), self.map_len) };
    }
}

/// A 64-bit counter the program increments and user space reads from mapped memory, with no
/// system call: a shared array value of one `u64`.
#[derive(Debug)]
pub struct Counter {
    value: MappedArray,
}

impl Counter {
    pub fn create() -> io::Result<Self> {
        Ok(Self {
            value: MappedArray::create(8, "nicmsg_passed")?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.value.fd()
    }

    /// The current count.
    pub fn read(&self) -> u64 {
        // SAFETY: the value's first 8 bytes, 8-byte aligned (page start); the program changes
        // them only with atomic adds.
        unsafe { &*self.value.as_ptr().cast::<std::sync::atomic::AtomicU64>() }
            .load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A loaded XDP program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads `insns` as an XDP program. A refusal carries the verifier's explanation.
    pub fn load(insns: &[Insn], name: &str) -> io::Result<Self> {
        let license = c"Dual MIT/GPL";
        // The program reads only the first 42 bytes of a frame: it may see frames of several
        // buffers (a GSO datagram in generic mode), which the kernel then need not linearise.
        const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
        let mut log = vec![0u8; VERIFIER_LOG_BYTES];
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: LOG_LEVEL_ON_ERROR,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            prog_name: name16(name),
            prog_flags: BPF_F_XDP_HAS_FRAGS,
            expected_attach_type: BPF_XDP,
            ..ProgLoadAttr::default()
        };
        match bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(fd) => Ok(Self { fd: owned(fd) }),
            Err(error) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let explanation = String::from_utf8_lossy(&log[..end]);
                Err(io::Error::new(
                    error.kind(),
                    format!(
                        "the kernel refused the XDP program ({error}): {}",
                        explanation.trim()
                    ),
                ))
            }
        }
    }

    /// Attaches the program to interface `ifindex`. It stays attached while the returned link
    /// is open.
    pub fn attach(&self, ifindex: u32, mode: AttachMode) -> io::Result<Link> {
        let mut attr = LinkCreateAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: mode.flags(),
        };
        Ok(Link {
            _fd: owned(bpf(BPF_LINK_CREATE, &mut attr)?),
        })
    }
}

/// An attached program; dropping it detaches the program.
#[derive(Debug)]
pub struct Link {
    _fd: OwnedFd,
}

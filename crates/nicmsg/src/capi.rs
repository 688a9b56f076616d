//! The C ABI (`include/nicmsg.h`): the same operations with MPI-like names and error codes.
//!
//! Contract (as in MPI): a buffer passed to a non-blocking call must stay valid and untouched
//! until its request completes; every request must be completed (wait/test) or cancelled and
//! completed before `nicmsg_finalize`. Null pointers and bad arguments return
//! `NICMSG_ERR_ARG`; nothing here panics across the boundary.

use crate::{Comm, Error, Request, Source, Status, TagMatch};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub const NICMSG_SUCCESS: c_int = 0;
pub const NICMSG_ERR_ARG: c_int = 14;
pub const NICMSG_ERR_PENDING: c_int = 15;
pub const NICMSG_ERR_INTERNAL: c_int = 16;
const ANY: u32 = u32::MAX;

/// Opaque communicator handle.
pub struct NicmsgComm {
    comm: Comm,
}

/// Opaque request handle; freed (and the caller's pointer set to NULL) when it completes.
pub struct NicmsgRequest {
    request: Request<'static>,
    /// What the operation was posted with, for the status of a failed one: the destination
    /// of a send, the source of a receive (`ANY` for any), and the tag (`ANY` for any).
    peer: u32,
    tag: u32,
}

impl NicmsgRequest {
    fn boxed(request: Request<'static>, peer: u32, tag: u32) -> *mut Self {
        Box::into_raw(Box::new(Self { request, peer, tag }))
    }
}

/// `*index` of `nicmsg_waitany` when no request was active (MPI's `MPI_UNDEFINED`).
pub const NICMSG_UNDEFINED: usize = usize::MAX;

/// Completion status, filled by wait/test/probe.
#[repr(C)]
pub struct NicmsgStatus {
    pub source: u32,
    pub tag: u32,
    pub len: u64,
    pub error: c_int,
}

fn guard(body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NICMSG_SUCCESS,
        Ok(Err(error)) => error.code(),
        Err(_) => NICMSG_ERR_INTERNAL,
    }
}

/// Fills `out` (if not null) with the outcome of an operation posted to `peer` with `tag`.
/// A failed operation names the peer it failed with: the unreachable rank, or else the peer
/// it was posted with (the destination of a send; the source of a receive, `ANY` if any).
fn write_status(out: *mut NicmsgStatus, result: &Result<Status, Error>, peer: u32, tag: u32) {
    if out.is_null() {
        return;
    }
    let status = match result {
        Ok(s) => NicmsgStatus {
            source: s.source,
            tag: s.tag,
            len: s.len,
            error: NICMSG_SUCCESS,
        },
        Err(Error::Truncated {
            source_rank,
            tag,
            message_len,
            ..
        }) => NicmsgStatus {
            source: *source_rank,
            tag: *tag,
            len: *message_len,
            error: 1,
        },
        Err(Error::PeerUnreachable { peer }) => NicmsgStatus {
            source: *peer,
            tag,
            len: 0,
            error: Error::PeerUnreachable { peer: *peer }.code(),
        },
        Err(error) => NicmsgStatus {
            source: peer,
            tag,
            len: 0,
            error: error.code(),
        },
    };
    // SAFETY: non-null pointer to a caller-owned status.
    unsafe { out.write(status) };
}

fn source(word: u32) -> Source {
    if word == ANY {
        Source::Any
    } else {
        Source::Rank(word)
    }
}

fn tag(word: u32) -> TagMatch {
    if word == ANY {
        TagMatch::Any
    } else {
        TagMatch::Tag(word)
    }
}

/// # Safety
/// `comm` must be a valid pointer to a handle from `nicmsg_init`.
unsafe fn comm_ref(comm: *const NicmsgComm) -> Option<&'static Comm> {
    // SAFETY: caller contract; the C side keeps the communicator alive while it uses it.
    unsafe { comm.as_ref().map(|c| &*(&c.comm as *const Comm)) }
}

/// # Safety
/// `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_init(out: *mut *mut NicmsgComm) -> c_int {
    if out.is_null() {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let comm = Comm::init().inspect_err(|error| eprintln!("nicmsg_init: {error}"))?;
        // SAFETY: checked non-null above.
        unsafe { *out = Box::into_raw(Box::new(NicmsgComm { comm })) };
        Ok(())
    })
}

/// Stops the engine (after answering peers briefly) and frees the communicator.
///
/// # Safety
/// `comm` comes from `nicmsg_init` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_finalize(comm: *mut NicmsgComm) -> c_int {
    if comm.is_null() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: caller contract.
    if unsafe { &*comm }.comm.outstanding() > 0 {
        return NICMSG_ERR_PENDING;
    }
    // SAFETY: caller contract: the box came from nicmsg_init.
    let boxed = unsafe { Box::from_raw(comm) };
    guard(move || {
        drop(boxed);
        Ok(())
    })
}

/// # Safety
/// Valid handle and output pointers.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_comm_rank(comm: *const NicmsgComm, rank: *mut u32) -> c_int {
    unsafe { write_comm_value(comm, rank, Comm::rank) }
}

/// # Safety
/// Valid handle and output pointers.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_comm_size(comm: *const NicmsgComm, size: *mut u32) -> c_int {
    unsafe { write_comm_value(comm, size, Comm::size) }
}

/// # Safety
/// Valid handle and output pointers.
unsafe fn write_comm_value(
    comm: *const NicmsgComm,
    out: *mut u32,
    value: fn(&Comm) -> u32,
) -> c_int {
    match (unsafe { comm_ref(comm) }, out.is_null()) {
        (Some(c), false) => {
            unsafe { *out = value(c) };
            NICMSG_SUCCESS
        }
        _ => NICMSG_ERR_ARG,
    }
}

/// # Safety
/// `buffer` is valid for `len` bytes until the request completes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_isend(
    comm: *mut NicmsgComm,
    buffer: *const c_void,
    len: usize,
    dest: u32,
    tag: u32,
    request: *mut *mut NicmsgRequest,
) -> c_int {
    let Some(comm) = (unsafe { comm_ref(comm) }) else {
        return NICMSG_ERR_ARG;
    };
    if request.is_null() || (buffer.is_null() && len > 0) {
        return NICMSG_ERR_ARG;
    }
    let data: &'static [u8] = if len == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(buffer.cast(), len) }
    };
    guard(|| {
        let posted = comm.isend(data, dest, tag)?;
        unsafe { *request = NicmsgRequest::boxed(posted, dest, tag) };
        Ok(())
    })
}

/// # Safety
/// `buffer` is valid for `len` bytes, and not touched, until the request completes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_irecv(
    comm: *mut NicmsgComm,
    buffer: *mut c_void,
    len: usize,
    source_rank: u32,
    tag_value: u32,
    request: *mut *mut NicmsgRequest,
) -> c_int {
    let Some(comm) = (unsafe { comm_ref(comm) }) else {
        return NICMSG_ERR_ARG;
    };
    if request.is_null() || (buffer.is_null() && len > 0) {
        return NICMSG_ERR_ARG;
    }
    let data: &'static mut [u8] = if len == 0 {
        &mut []
    } else {
        unsafe { std::slice::from_raw_parts_mut(buffer.cast(), len) }
    };
    guard(|| {
        let posted = comm.irecv(data, source(source_rank), tag(tag_value))?;
        unsafe { *request = NicmsgRequest::boxed(posted, source_rank, tag_value) };
        Ok(())
    })
}

/// Completes the request: fills `status`, frees the request and sets `*request` to NULL.
/// Returns the operation's result code.
///
/// # Safety
/// `request` points to a handle from isend/irecv (or NULL, which completes at once).
#[no_mangle]
pub unsafe extern "C" fn nicmsg_wait(
    request: *mut *mut NicmsgRequest,
    status: *mut NicmsgStatus,
) -> c_int {
    if request.is_null() {
        return NICMSG_ERR_ARG;
    }
    let handle = unsafe { *request };
    if handle.is_null() {
        return NICMSG_SUCCESS;
    }
    unsafe { *request = std::ptr::null_mut() };
    let boxed = unsafe { Box::from_raw(handle) };
    let (peer, tag) = (boxed.peer, boxed.tag);
    let mut code = NICMSG_SUCCESS;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let result = boxed.request.wait();
        write_status(status, &result, peer, tag);
        if let Err(error) = &result {
            code = error.code();
        }
    }));
    if outcome.is_err() {
        return NICMSG_ERR_INTERNAL;
    }
    code
}

/// Sets `*flag` to 1 and completes the request like `nicmsg_wait` if it has finished; else 0.
///
/// # Safety
/// As `nicmsg_wait`; `flag` valid.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_test(
    request: *mut *mut NicmsgRequest,
    flag: *mut c_int,
    status: *mut NicmsgStatus,
) -> c_int {
    if request.is_null() || flag.is_null() {
        return NICMSG_ERR_ARG;
    }
    let handle = unsafe { *request };
    if handle.is_null() {
        unsafe { *flag = 1 };
        return NICMSG_SUCCESS;
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { &mut *handle }.request.test()));
    match outcome {
        Err(_) => NICMSG_ERR_INTERNAL,
        Ok(None) => {
            unsafe { *flag = 0 };
            NICMSG_SUCCESS
        }
        Ok(Some(result)) => {
            let (peer, tag) = unsafe { ((*handle).peer, (*handle).tag) };
            unsafe {
                *flag = 1;
                *request = std::ptr::null_mut();
                drop(Box::from_raw(handle));
            }
            write_status(status, &result, peer, tag);
            result.err().map_or(NICMSG_SUCCESS, |e| e.code())
        }
    }
}

/// Waits for every request; `statuses` (may be NULL) receives one status each. Returns the
/// first error code, or success.
///
/// # Safety
/// `requests` points to `count` request pointers; `statuses` to `count` statuses or NULL.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_waitall(
    count: usize,
    requests: *mut *mut NicmsgRequest,
    statuses: *mut NicmsgStatus,
) -> c_int {
    if requests.is_null() && count > 0 {
        return NICMSG_ERR_ARG;
    }
    let mut first_error = NICMSG_SUCCESS;
    for index in 0..count {
        let status = if statuses.is_null() {
            std::ptr::null_mut()
        } else {
            unsafe { statuses.add(index) }
        };
        let code = unsafe { nicmsg_wait(requests.add(index), status) };
        if first_error == NICMSG_SUCCESS {
            first_error = code;
        }
    }
    first_error
}

/// Waits until one of the non-NULL requests completes; sets `*index` to it and returns its
/// result code. With no non-NULL request (or `count` 0) it returns success at once with
/// `*index` = `NICMSG_UNDEFINED` and an empty status (as MPI). Spins briefly, then sleeps
/// until a completion (no core burnt on a long wait).
///
/// # Safety
/// As `nicmsg_waitall`; `index` valid.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_waitany(
    count: usize,
    requests: *mut *mut NicmsgRequest,
    index: *mut usize,
    status: *mut NicmsgStatus,
) -> c_int {
    if (requests.is_null() && count > 0) || index.is_null() {
        return NICMSG_ERR_ARG;
    }
    let Some(first) = (0..count).find(|&i| !unsafe { *requests.add(i) }.is_null()) else {
        unsafe { *index = NICMSG_UNDEFINED };
        let empty = Status {
            source: ANY,
            tag: ANY,
            len: 0,
        };
        write_status(status, &Ok(empty), ANY, ANY);
        return NICMSG_SUCCESS;
    };
    // Every request of one call belongs to one communicator (as in MPI).
    let comm = unsafe { &*(*requests.add(first)) }.request.comm();
    let started = comm.start_waiting();
    loop {
        for i in first..count {
            if unsafe { *requests.add(i) }.is_null() {
                continue;
            }
            let mut flag = 0;
            let code = unsafe { nicmsg_test(requests.add(i), &mut flag, status) };
            if flag == 1 {
                unsafe { *index = i };
                return code;
            }
        }
        let slot = unsafe { &*(*requests.add(first)) }.request.slot();
        if let Err(error) = comm.wait_a_little(started, slot) {
            return error.code();
        }
    }
}

/// Asks for the request to be cancelled; complete it with wait/test afterwards: its status
/// then says `NICMSG_ERR_CANCELLED` (it did not happen: a cancelled send's message is never
/// delivered), or success if it was too late (a send whose message a receive had matched, or
/// that had completed; a matched receive). `nicmsg_test_cancelled` reads it like MPI.
///
/// # Safety
/// `request` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_cancel(request: *mut NicmsgRequest) -> c_int {
    match unsafe { request.as_ref() } {
        Some(r) => {
            r.request.cancel();
            NICMSG_SUCCESS
        }
        None => NICMSG_ERR_ARG,
    }
}

/// Sets `*flag` to 1 if `status` is that of a cancelled operation (MPI's
/// `MPI_Test_cancelled`), else 0.
///
/// # Safety
/// `status` and `flag` valid.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_test_cancelled(
    status: *const NicmsgStatus,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: caller contract; checked for null.
    match unsafe { (status.as_ref(), flag.as_mut()) } {
        (Some(status), Some(flag)) => {
            *flag = c_int::from(status.error == Error::Cancelled.code());
            NICMSG_SUCCESS
        }
        _ => NICMSG_ERR_ARG,
    }
}

/// # Safety
/// As `nicmsg_isend`.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_send(
    comm: *mut NicmsgComm,
    buffer: *const c_void,
    len: usize,
    dest: u32,
    tag: u32,
) -> c_int {
    let mut request = std::ptr::null_mut();
    let code = unsafe { nicmsg_isend(comm, buffer, len, dest, tag, &mut request) };
    if code != NICMSG_SUCCESS {
        return code;
    }
    unsafe { nicmsg_wait(&mut request, std::ptr::null_mut()) }
}

/// # Safety
/// As `nicmsg_irecv`.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_recv(
    comm: *mut NicmsgComm,
    buffer: *mut c_void,
    len: usize,
    source_rank: u32,
    tag_value: u32,
    status: *mut NicmsgStatus,
) -> c_int {
    let mut request = std::ptr::null_mut();
    let code = unsafe { nicmsg_irecv(comm, buffer, len, source_rank, tag_value, &mut request) };
    if code != NICMSG_SUCCESS {
        return code;
    }
    unsafe { nicmsg_wait(&mut request, status) }
}

/// # Safety
/// Valid handle; `flag` valid; `status` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_iprobe(
    comm: *mut NicmsgComm,
    source_rank: u32,
    tag_value: u32,
    flag: *mut c_int,
    status: *mut NicmsgStatus,
) -> c_int {
    let Some(comm) = (unsafe { comm_ref(comm) }) else {
        return NICMSG_ERR_ARG;
    };
    if flag.is_null() {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let found = comm.iprobe(source(source_rank), tag(tag_value))?;
        unsafe { *flag = c_int::from(found.is_some()) };
        if let Some(s) = found {
            write_status(status, &Ok(s), source_rank, tag_value);
        }
        Ok(())
    })
}

/// # Safety
/// Valid handle; `status` valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_probe(
    comm: *mut NicmsgComm,
    source_rank: u32,
    tag_value: u32,
    status: *mut NicmsgStatus,
) -> c_int {
    let Some(comm) = (unsafe { comm_ref(comm) }) else {
        return NICMSG_ERR_ARG;
    };
    guard(|| {
        let found = comm.probe(source(source_rank), tag(tag_value))?;
        write_status(status, &Ok(found), source_rank, tag_value);
        Ok(())
    })
}

/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_barrier(comm: *mut NicmsgComm) -> c_int {
    let Some(comm) = (unsafe { comm_ref(comm) }) else {
        return NICMSG_ERR_ARG;
    };
    guard(|| comm.barrier())
}

/// A static, NUL-terminated description of a result code.
#[no_mangle]
pub extern "C" fn nicmsg_error_string(code: c_int) -> *const c_char {
    let text: &'static [u8] = match code {
        0 => b"success\0",
        1 => b"message truncated: the receive buffer is too short\0",
        2 => b"peer unreachable\0",
        3 => b"operation cancelled\0",
        4 => b"invalid rank\0",
        5 => b"table full: complete some operations first\0",
        6 => b"invalid buffer\0",
        9 => b"invalid tag\0",
        10 => b"not initialised\0",
        11 => b"bootstrap failed (see stderr)\0",
        12 => b"invalid configuration\0",
        13 => b"I/O error\0",
        14 => b"invalid argument\0",
        15 => b"requests still pending\0",
        _ => b"internal error\0",
    };
    text.as_ptr().cast()
}

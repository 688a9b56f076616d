//! The C ABI (`include/nicmsg.h`): the same operations with MPI-like names and error codes.
//!
//! Contract (as in MPI): a buffer passed to a non-blocking call must stay valid and untouched
//! until its request completes; every request must be completed (wait/test) or cancelled and
//! completed before `nicmsg_finalize`. Null pointers and bad arguments return
//! `NICMSG_ERR_ARG`; nothing here panics across the boundary: a panic inside the library is
//! caught and returned as `NICMSG_ERR_PANIC`.
//!
//! The result codes come from one table ([`crate::Code`]); `tests/header.rs` checks that the
//! header declares exactly the constants, structures and functions defined here, with the same
//! values and parameter types.

use crate::{Code, Comm, Error, Request, Source, Status, TagMatch};
use nicmsg_proto::MAX_SEGMENTS;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::capi_handle::{from_pointer, Handle};

pub use crate::capi_dgram::*;
pub use crate::capi_programs::*;
pub use crate::code::c::*;

/// `NICMSG_ANY_SOURCE`: a receive or probe from any rank.
pub const NICMSG_ANY_SOURCE: u32 = u32::MAX;
/// `NICMSG_ANY_TAG`: a receive or probe with any tag of the application's.
pub const NICMSG_ANY_TAG: u32 = u32::MAX;
/// `NICMSG_TAG_UB`: the largest tag.
pub const NICMSG_TAG_UB: u32 = crate::MAX_TAG;
/// `NICMSG_IOV_MAX`: the most pieces a scatter/gather message may have.
pub const NICMSG_IOV_MAX: usize = MAX_SEGMENTS;
/// `*index` of `nicmsg_waitany` when no request was active (MPI's `MPI_UNDEFINED`).
pub const NICMSG_UNDEFINED: usize = usize::MAX;
const ANY: u32 = u32::MAX;

/// The value of a step of a C ABI call, or its `NICMSG_ERR_*` code returned from the calling
/// function.
macro_rules! or_return {
    ($step:expr) => {
        match $step {
            Ok(value) => value,
            Err(code) => return code,
        }
    };
}
pub(crate) use or_return;

/// Opaque communicator handle. Its requests take its turn ([`Turn`]); finalized, it stays
/// allocated and turns calls away (`capi_handle.rs`).
pub struct NicmsgComm {
    handle: Handle<Comm>,
    /// Rank and size, which never change: read without a turn (any thread, any time).
    rank: u32,
    size: u32,
}

impl NicmsgComm {
    pub(crate) fn boxed(comm: Comm) -> *mut Self {
        let (rank, size) = (comm.rank(), comm.size());
        Box::into_raw(Box::new(Self {
            handle: Handle::new(comm),
            rank,
            size,
        }))
    }
}

/// Opaque request handle; freed (and the caller's pointer set to NULL) when it completes.
pub struct NicmsgRequest {
    request: Request<'static>,
    /// What the operation was posted with, for the status of a failed one: the destination
    /// of a send, the source of a receive (`ANY` for any), and the tag (`ANY` for any).
    peer: u32,
    tag: u32,
    /// Its communicator's turn flag (which outlives it: finalize refuses while a request is
    /// outstanding, and the flag is never freed).
    busy: &'static AtomicBool,
}

impl NicmsgRequest {
    fn boxed(request: Request<'static>, peer: u32, tag: u32, turn: &Turn) -> *mut Self {
        let busy = turn.0;
        Box::into_raw(Box::new(Self {
            request,
            peer,
            tag,
            busy,
        }))
    }
}

/// One thread's turn inside a call on a communicator (or its requests) or a socket. Their state
/// is not synchronised (`Comm` is not `Sync`: one host thread drives the descriptor table), so
/// a second thread calling in meanwhile gets `NICMSG_ERR_BUSY` instead of racing the first.
pub(crate) struct Turn(&'static AtomicBool);

impl Turn {
    /// The calling thread's turn, or `NICMSG_ERR_BUSY` while another thread has it.
    pub(crate) fn take(busy: &'static AtomicBool) -> Result<Self, c_int> {
        if busy.swap(true, Ordering::Acquire) {
            return Err(NICMSG_ERR_BUSY);
        }
        Ok(Self(busy))
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Completion status, filled by wait/test/probe.
#[repr(C)]
pub struct NicmsgStatus {
    pub source: u32,
    pub tag: u32,
    pub len: u64,
    pub error: c_int,
}

/// Runs `body`, turning its error into its code and a panic into `NICMSG_ERR_PANIC`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NICMSG_SUCCESS,
        Ok(Err(error)) => error.code().into(),
        Err(_) => NICMSG_ERR_PANIC,
    }
}

/// Fills `out` (if not null) with the outcome of an operation posted to `peer` with `tag`.
/// A failed operation names the peer it failed with: the unreachable rank, or else the peer
/// it was posted with (the destination of a send; the source of a receive, `ANY` if any).
///
/// # Safety
/// `out` is null or valid for writing a status.
unsafe fn write_status(
    out: *mut NicmsgStatus,
    result: &Result<Status, Error>,
    peer: u32,
    tag: u32,
) {
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
        Err(
            error @ Error::Truncated {
                source_rank,
                tag,
                message_len,
                ..
            },
        ) => NicmsgStatus {
            source: *source_rank,
            tag: *tag,
            len: *message_len,
            error: error.code().into(),
        },
        Err(error @ Error::PeerUnreachable { peer }) => NicmsgStatus {
            source: *peer,
            tag,
            len: 0,
            error: error.code().into(),
        },
        Err(error) => NicmsgStatus {
            source: peer,
            tag,
            len: 0,
            error: error.code().into(),
        },
    };
    // SAFETY: `out` is not null (checked above) and, by this function's contract, valid for
    // writing a status; `write` does not read (or drop) what was there.
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

/// The communicator behind a handle with the calling thread's turn on it: `NICMSG_ERR_ARG`
/// for NULL or a finalized one, `NICMSG_ERR_BUSY` while another thread is inside a call on it.
///
/// # Safety
/// `comm` is null or a handle from `nicmsg_init` (finalized or not: the handle itself is never
/// freed).
pub(crate) unsafe fn enter(comm: *const NicmsgComm) -> Result<(&'static Comm, Turn), c_int> {
    // SAFETY: this function's contract.
    unsafe { from_pointer(comm) }?.handle.enter()
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
        // SAFETY: `out` is not null (checked above) and valid for writing a pointer (caller
        // contract).
        unsafe { *out = NicmsgComm::boxed(comm) };
        Ok(())
    })
}

/// Stops the engine (after answering peers briefly) and frees the communicator; the handle
/// stays allocated, and every later call with it (a second finalize too) is `NICMSG_ERR_ARG`.
///
/// # Safety
/// `comm` is null or comes from `nicmsg_init`.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_finalize(comm: *mut NicmsgComm) -> c_int {
    // SAFETY: null or a handle from `nicmsg_init` (caller contract).
    let (live, turn) = or_return!(unsafe { enter(comm) });
    match catch_unwind(AssertUnwindSafe(|| live.outstanding())) {
        Err(_) => return NICMSG_ERR_PANIC,
        Ok(pending) if pending > 0 => return NICMSG_ERR_PENDING,
        Ok(_) => {}
    }
    // SAFETY: `enter` succeeded, so the pointer is a live handle; `live` is not used again,
    // and no request borrows the communicator (none is outstanding, checked above).
    let handle = unsafe { &(*comm).handle };
    guard(move || {
        // SAFETY: as above.
        unsafe { handle.retire(turn) };
        Ok(())
    })
}

/// # Safety
/// Valid handle and output pointers.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_comm_rank(comm: *const NicmsgComm, rank: *mut u32) -> c_int {
    // SAFETY: the caller's contract is `write_comm_value`'s.
    unsafe { write_comm_value(comm, rank, |c| c.rank) }
}

/// # Safety
/// Valid handle and output pointers.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_comm_size(comm: *const NicmsgComm, size: *mut u32) -> c_int {
    // SAFETY: the caller's contract is `write_comm_value`'s.
    unsafe { write_comm_value(comm, size, |c| c.size) }
}

/// # Safety
/// `comm` is null or a handle from `nicmsg_init`; `out` is null or valid for writing a `u32`.
unsafe fn write_comm_value(
    comm: *const NicmsgComm,
    out: *mut u32,
    value: fn(&NicmsgComm) -> u32,
) -> c_int {
    // Rank and size never change: reading them needs no turn.
    // SAFETY: `comm` is null or a handle (this function's contract).
    let handle = or_return!(unsafe { from_pointer(comm) });
    if out.is_null() || handle.handle.is_gone() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `out` is not null (checked above) and valid for writing (contract).
    unsafe { *out = value(handle) };
    NICMSG_SUCCESS
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
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, turn) = or_return!(unsafe { enter(comm) });
    if request.is_null() || (buffer.is_null() && len > 0) {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `buffer` is valid for reading `len` bytes until the request completes (caller
    // contract), and the request, which holds the slice, is freed when it completes.
    let data: &'static [u8] = unsafe { send_piece(buffer, len) };
    guard(|| {
        let posted = comm.isend(data, dest, tag)?;
        // SAFETY: `request` is not null (checked above) and valid for writing (contract).
        unsafe { *request = NicmsgRequest::boxed(posted, dest, tag, &turn) };
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
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, turn) = or_return!(unsafe { enter(comm) });
    if request.is_null() || (buffer.is_null() && len > 0) {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `buffer` is valid for writing `len` bytes and touched by nobody else until the
    // request completes (caller contract); the request holds the slice until then.
    let data: &'static mut [u8] = unsafe { receive_piece(buffer, len) };
    guard(|| {
        let posted = comm.irecv(data, source(source_rank), tag(tag_value))?;
        // SAFETY: `request` is not null (checked above) and valid for writing (contract).
        unsafe { *request = NicmsgRequest::boxed(posted, source_rank, tag_value, &turn) };
        Ok(())
    })
}

/// A piece of a message to send as a slice (empty for a length of 0, whatever the address).
///
/// # Safety
/// `base` is valid for reading `len` bytes, unchanged, for as long as the slice is used.
unsafe fn send_piece(base: *const c_void, len: usize) -> &'static [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: `len > 0`, so by this function's contract `base` is a valid, unchanging range
    // of `len` bytes for the slice's life.
    unsafe { std::slice::from_raw_parts(base.cast(), len) }
}

/// A piece of a receive buffer as a slice (empty for a length of 0, whatever the address).
///
/// # Safety
/// `base` is valid for writing `len` bytes, which nothing else reads or writes (no other piece
/// of the same receive included), for as long as the slice is used.
unsafe fn receive_piece(base: *mut c_void, len: usize) -> &'static mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: `len > 0`, so by this function's contract `base` is a valid range of `len`
    // bytes, exclusively the slice's for its life.
    unsafe { std::slice::from_raw_parts_mut(base.cast(), len) }
}

/// The pieces of a scatter/gather call, after its checks: NULL with a count is an argument
/// error, more than `NICMSG_IOV_MAX` pieces a buffer error, and so is a piece of non-zero
/// length at NULL (an argument error).
///
/// # Safety
/// `iov` is null or valid for reading `count` `struct iovec`s.
unsafe fn iovecs<'a>(iov: *const libc::iovec, count: usize) -> Result<&'a [libc::iovec], c_int> {
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(NICMSG_ERR_ARG);
    }
    if count > NICMSG_IOV_MAX {
        return Err(NICMSG_ERR_BUFFER);
    }
    // SAFETY: `iov` is not null and `count > 0`; by this function's contract it points to
    // `count` initialised `struct iovec`s, which the C side does not change during the call.
    let pieces = unsafe { std::slice::from_raw_parts(iov, count) };
    if pieces.iter().any(|p| p.iov_base.is_null() && p.iov_len > 0) {
        return Err(NICMSG_ERR_ARG);
    }
    Ok(pieces)
}

/// Scatter/gather send: the message is the concatenation of the `count` pieces of `iov`.
///
/// # Safety
/// `iov` is valid for reading `count` `struct iovec`s (during the call only); each piece is
/// valid for reading `iov_len` bytes, unchanged, until the request completes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_isendv(
    comm: *mut NicmsgComm,
    iov: *const libc::iovec,
    count: usize,
    dest: u32,
    tag: u32,
    request: *mut *mut NicmsgRequest,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, turn) = or_return!(unsafe { enter(comm) });
    if request.is_null() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `iov` is null or valid for `count` iovecs (caller contract).
    let pieces = or_return!(unsafe { iovecs(iov, count) });
    let mut data: [&'static [u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
    for (slice, piece) in data.iter_mut().zip(pieces) {
        // SAFETY: every piece is valid for reading its length, unchanged, until the request
        // completes (caller contract; a NULL base comes only with a length of 0, checked).
        *slice = unsafe { send_piece(piece.iov_base, piece.iov_len) };
    }
    guard(|| {
        let posted = comm.isend_vectored(&data[..pieces.len()], dest, tag)?;
        // SAFETY: `request` is not null (checked above) and valid for writing (contract).
        unsafe { *request = NicmsgRequest::boxed(posted, dest, tag, &turn) };
        Ok(())
    })
}

/// Scatter/gather receive: the message fills the `count` pieces of `iov` in order.
///
/// # Safety
/// `iov` is valid for reading `count` `struct iovec`s (during the call only); the pieces do
/// not overlap, and each is valid for writing `iov_len` bytes and not touched until the
/// request completes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_irecvv(
    comm: *mut NicmsgComm,
    iov: *const libc::iovec,
    count: usize,
    source_rank: u32,
    tag_value: u32,
    request: *mut *mut NicmsgRequest,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, turn) = or_return!(unsafe { enter(comm) });
    if request.is_null() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `iov` is null or valid for `count` iovecs (caller contract).
    let pieces = or_return!(unsafe { iovecs(iov, count) });
    let data = pieces.iter().map(|piece| {
        // SAFETY: the pieces do not overlap, and each is valid for writing its length and left
        // alone until the request completes (caller contract; a NULL base comes only with a
        // length of 0, checked).
        unsafe { receive_piece(piece.iov_base, piece.iov_len) }
    });
    guard(|| {
        let posted = comm.irecv_vectored(data, source(source_rank), tag(tag_value))?;
        // SAFETY: `request` is not null (checked above) and valid for writing (contract).
        unsafe { *request = NicmsgRequest::boxed(posted, source_rank, tag_value, &turn) };
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
    // SAFETY: `request` is not null and valid for reading and writing a pointer (contract).
    let handle = unsafe { *request };
    if handle.is_null() {
        return NICMSG_SUCCESS;
    }
    // SAFETY: a non-null handle is a live request from isend/irecv (caller contract).
    let _turn = or_return!(Turn::take(unsafe { &*handle }.busy));
    // SAFETY: the handle was made by `Box::into_raw` (isend/irecv) and is live; the caller's
    // pointer to it is cleared first, so the box is taken back exactly once.
    let boxed = unsafe {
        *request = std::ptr::null_mut();
        Box::from_raw(handle)
    };
    let (peer, tag) = (boxed.peer, boxed.tag);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let result = boxed.request.wait();
        // SAFETY: `status` is null or valid for writing a status (caller contract).
        unsafe { write_status(status, &result, peer, tag) };
        result
            .err()
            .map_or(NICMSG_SUCCESS, |error| error.code().into())
    }));
    outcome.unwrap_or(NICMSG_ERR_PANIC)
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
    // SAFETY: `request` is not null and valid for reading a pointer (caller contract).
    let handle = unsafe { *request };
    if handle.is_null() {
        // SAFETY: `flag` is not null (checked above) and valid for writing (contract).
        unsafe { *flag = 1 };
        return NICMSG_SUCCESS;
    }
    // SAFETY: a non-null handle is a live request from isend/irecv (caller contract).
    let _turn = or_return!(Turn::take(unsafe { &*handle }.busy));
    // SAFETY: the caller's contract is ours; `*request` is a live handle (not null, checked),
    // and this thread has its communicator's turn.
    unsafe { test_in_turn(request, flag, status) }
}

/// `nicmsg_test` of a live request by the thread whose turn it is on its communicator.
///
/// # Safety
/// As `nicmsg_test`, with `*request` a live handle (not null) and `flag` not null.
unsafe fn test_in_turn(
    request: *mut *mut NicmsgRequest,
    flag: *mut c_int,
    status: *mut NicmsgStatus,
) -> c_int {
    // SAFETY: `request` is valid for reading (contract).
    let handle = unsafe { *request };
    // SAFETY: a live request (contract), used by this thread only (its turn) for the duration
    // of this call.
    let live = unsafe { &mut *handle };
    let outcome = catch_unwind(AssertUnwindSafe(|| live.request.test()));
    match outcome {
        Err(_) => NICMSG_ERR_PANIC,
        Ok(None) => {
            // SAFETY: `flag` is not null (checked above) and valid for writing (contract).
            unsafe { *flag = 0 };
            NICMSG_SUCCESS
        }
        Ok(Some(result)) => {
            let (peer, tag) = (live.peer, live.tag);
            // SAFETY: `flag` and `request` are valid for writing (checked not null above;
            // contract). The handle came from `Box::into_raw`; the caller's pointer to it is
            // cleared first, so the box is freed exactly once, and `live` is not used after.
            unsafe {
                *flag = 1;
                *request = std::ptr::null_mut();
                drop(Box::from_raw(handle));
            }
            // SAFETY: `status` is null or valid for writing a status (caller contract).
            unsafe { write_status(status, &result, peer, tag) };
            result
                .err()
                .map_or(NICMSG_SUCCESS, |error| error.code().into())
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
            // SAFETY: `statuses` points to `count` statuses (caller contract) and
            // `index < count`: the offset stays inside that array.
            unsafe { statuses.add(index) }
        };
        // SAFETY: `requests` points to `count` request pointers (caller contract), each null
        // or a live handle, and `index < count`; `status` is null or one of the statuses.
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
/// until a completion (no core burnt on a long wait). Should the engine fail, a request
/// completes with `NICMSG_ERR_INTERNAL` (and `*index` names it), as wait would. A panic caught
/// inside returns `NICMSG_ERR_PANIC`, `*index` naming the request whose test panicked (still
/// live), else `NICMSG_UNDEFINED`.
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
    // The wait runs the engine (inline) and looks at it: a panic must not unwind into C.
    let waited = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract is `wait_for_any`'s; `index` is not null (checked).
        unsafe { wait_for_any(count, requests, index, status) }
    }));
    waited.unwrap_or_else(|_| {
        // SAFETY: `index` is not null (checked above) and valid for writing (contract).
        unsafe { *index = NICMSG_UNDEFINED };
        NICMSG_ERR_PANIC
    })
}

/// `nicmsg_waitany` after its argument checks.
///
/// # Safety
/// As `nicmsg_waitany`, with `requests` not null if `count > 0` and `index` not null.
unsafe fn wait_for_any(
    count: usize,
    requests: *mut *mut NicmsgRequest,
    index: *mut usize,
    status: *mut NicmsgStatus,
) -> c_int {
    // SAFETY: `requests` points to `count` request pointers (caller contract; not null when
    // `count > 0`, checked above): every `i < count` reads inside that array.
    let live = |i: usize| unsafe { *requests.add(i) };
    let Some(first) = (0..count).find(|&i| !live(i).is_null()) else {
        // SAFETY: `index` is not null (checked above) and valid for writing (contract).
        unsafe { *index = NICMSG_UNDEFINED };
        let empty = Status {
            source: ANY,
            tag: ANY,
            len: 0,
            address: None,
        };
        // SAFETY: `status` is null or valid for writing a status (caller contract).
        unsafe { write_status(status, &Ok(empty), ANY, ANY) };
        return NICMSG_SUCCESS;
    };
    // Every request of one call belongs to one communicator (as in MPI).
    // SAFETY: `live(first)` is not null, so it is a live handle (caller contract); the
    // communicator it borrows lives at least as long as the request (until finalize).
    let first_request = unsafe { &*live(first) };
    let _turn = match Turn::take(first_request.busy) {
        Ok(turn) => turn,
        Err(code) => {
            // SAFETY: `index` is not null (checked by the caller) and valid for writing.
            unsafe { *index = NICMSG_UNDEFINED };
            return code;
        }
    };
    let comm = first_request.request.comm();
    let started = comm.start_waiting();
    loop {
        for i in first..count {
            if live(i).is_null() {
                continue;
            }
            let mut flag = 0;
            // SAFETY: `i < count`, so `requests.add(i)` is one of the caller's request
            // pointers (a live handle, not null) of the communicator whose turn this thread
            // has; `status` is null or valid (contract).
            let code = unsafe { test_in_turn(requests.add(i), &mut flag, status) };
            // A panic caught in the test ends the wait too: the next round would meet it again.
            if flag == 1 || code == NICMSG_ERR_PANIC {
                // SAFETY: `index` is not null (checked above) and valid for writing.
                unsafe { *index = i };
                return code;
            }
        }
        // Nothing completed, so the first request is still live: sleep until a completion.
        // Should the engine have failed, this returns at once, and the next round's test
        // reports the failure as that request's result (as wait would).
        // SAFETY: `live(first)` is not null (no request completed): a live handle.
        let slot = unsafe { &*live(first) }.request.slot();
        let _ = comm.wait_a_little(started, slot);
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
    // SAFETY: `request` is null (`as_ref` gives None) or a live handle (caller contract).
    match unsafe { request.as_ref() } {
        Some(r) => {
            let _turn = or_return!(Turn::take(r.busy));
            guard(|| {
                r.request.cancel();
                Ok(())
            })
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
    // SAFETY: each pointer is null (giving None) or valid, `status` for reading and `flag` for
    // writing (caller contract); the two are different objects.
    match unsafe { (status.as_ref(), flag.as_mut()) } {
        (Some(status), Some(flag)) => {
            *flag = c_int::from(status.error == NICMSG_ERR_CANCELLED);
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
    // SAFETY: the caller's contract is `nicmsg_isend`'s; `request` is a local.
    let code = unsafe { nicmsg_isend(comm, buffer, len, dest, tag, &mut request) };
    if code != NICMSG_SUCCESS {
        return code;
    }
    // SAFETY: `request` holds the handle isend just made; the buffer stays valid throughout
    // this call, which completes the request before returning.
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
    // SAFETY: the caller's contract is `nicmsg_irecv`'s; `request` is a local.
    let code = unsafe { nicmsg_irecv(comm, buffer, len, source_rank, tag_value, &mut request) };
    if code != NICMSG_SUCCESS {
        return code;
    }
    // SAFETY: `request` holds the handle irecv just made, completed before this call returns;
    // `status` is null or valid (caller contract).
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
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, _turn) = or_return!(unsafe { enter(comm) });
    if flag.is_null() {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let found = comm.iprobe(source(source_rank), tag(tag_value))?;
        // SAFETY: `flag` is not null (checked above) and valid for writing (contract).
        unsafe { *flag = c_int::from(found.is_some()) };
        if let Some(s) = found {
            // SAFETY: `status` is null or valid for writing a status (caller contract).
            unsafe { write_status(status, &Ok(s), source_rank, tag_value) };
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
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, _turn) = or_return!(unsafe { enter(comm) });
    guard(|| {
        let found = comm.probe(source(source_rank), tag(tag_value))?;
        // SAFETY: `status` is null or valid for writing a status (caller contract).
        unsafe { write_status(status, &Ok(found), source_rank, tag_value) };
        Ok(())
    })
}

/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_barrier(comm: *mut NicmsgComm) -> c_int {
    // SAFETY: `comm` is null or a live handle (caller contract).
    let (comm, _turn) = or_return!(unsafe { enter(comm) });
    guard(|| comm.barrier())
}

/// A static, NUL-terminated description of a result code (of an unknown value, too).
#[no_mangle]
pub extern "C" fn nicmsg_error_string(code: c_int) -> *const c_char {
    Code::from_value(code)
        .map_or(crate::code::UNKNOWN, Code::description)
        .as_ptr()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::ffi::CStr;

    /// A handle on a one-rank job with an engine thread, for tests of the C ABI.
    pub(crate) fn solo_handle() -> *mut NicmsgComm {
        NicmsgComm::boxed(crate::comm::tests::solo_thread())
    }

    #[test]
    fn a_caught_panic_has_a_code_of_its_own() {
        let code = guard(|| panic!("a bug"));
        assert_eq!(code, NICMSG_ERR_PANIC);
        assert_ne!(code, NICMSG_ERR_INTERNAL, "engine failure has its own code");
        assert_eq!(guard(|| Err(Error::EngineFailed)), NICMSG_ERR_INTERNAL);
        assert_eq!(guard(|| Ok(())), NICMSG_SUCCESS);
    }

    #[test]
    fn every_code_has_its_string_and_unknown_values_say_so() {
        for &code in Code::ALL {
            // SAFETY: nicmsg_error_string returns a static, NUL-terminated string.
            let text = unsafe { CStr::from_ptr(nicmsg_error_string(code.into())) };
            assert_eq!(text, code.description());
        }
        for value in [-1, 7, 8, 20, c_int::MAX] {
            // SAFETY: as above.
            let text = unsafe { CStr::from_ptr(nicmsg_error_string(value)) };
            assert_eq!(text, c"unknown result code", "{value}");
        }
    }

    #[test]
    fn scatter_gather_arguments_are_checked_before_anything_is_posted() {
        let mut request = std::ptr::null_mut();
        let piece = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 4,
        };
        // A NULL communicator; NULL iov with a count, a NULL piece with a length, too many
        // pieces: refused before anything is read or posted.
        // SAFETY: the pointers given are null, or valid for the count given.
        unsafe {
            assert_eq!(
                nicmsg_isendv(std::ptr::null_mut(), &piece, 1, 0, 0, &mut request),
                NICMSG_ERR_ARG
            );
            assert_eq!(
                nicmsg_irecvv(std::ptr::null_mut(), &piece, 1, 0, 0, &mut request),
                NICMSG_ERR_ARG
            );
            assert_eq!(iovecs(std::ptr::null(), 1).unwrap_err(), NICMSG_ERR_ARG);
            assert_eq!(iovecs(&piece, 1).unwrap_err(), NICMSG_ERR_ARG);
            assert!(iovecs(std::ptr::null(), 0).unwrap().is_empty());
            let many = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; NICMSG_IOV_MAX + 1];
            assert_eq!(
                iovecs(many.as_ptr(), many.len()).unwrap_err(),
                NICMSG_ERR_BUFFER
            );
            assert_eq!(iovecs(many.as_ptr(), NICMSG_IOV_MAX).unwrap().len(), 16);
        }
    }

    /// A communicator is not shareable between threads (`Comm` is not `Sync`), yet a second
    /// thread's call went straight in, racing the first on the descriptor table. Now every call
    /// on a communicator or its requests made while another thread is inside one (its turn
    /// held here) returns NICMSG_ERR_BUSY and does nothing; rank and size stay readable.
    #[test]
    fn a_communicator_busy_in_another_thread_turns_calls_away() {
        let comm = solo_handle();
        let mut inbox = [0u8; 8];
        let mut request = std::ptr::null_mut();
        let (mut flag, mut index, mut rank) = (0, 0usize, 9u32);
        // SAFETY: `comm` is a live handle until finalized at the end; the buffer outlives the
        // request, completed before that; every pointer is a local valid for its use.
        unsafe {
            let (buffer, len) = (inbox.as_mut_ptr().cast(), inbox.len());
            let code = nicmsg_irecv(comm, buffer, len, ANY, 5, &mut request);
            assert_eq!(code, NICMSG_SUCCESS);
            let other_thread = Turn::take((*comm).handle.busy_flag()).unwrap();
            let busy = NICMSG_ERR_BUSY;
            let mut second = std::ptr::null_mut();
            assert_eq!(nicmsg_isend(comm, buffer, 0, 0, 5, &mut second), busy);
            assert_eq!(nicmsg_irecv(comm, buffer, len, 0, 5, &mut second), busy);
            assert!(second.is_null(), "nothing was posted");
            assert_eq!(
                nicmsg_iprobe(comm, ANY, ANY, &mut flag, std::ptr::null_mut()),
                busy
            );
            assert_eq!(nicmsg_barrier(comm), busy);
            assert_eq!(nicmsg_cancel(request), busy);
            assert_eq!(
                nicmsg_test(&mut request, &mut flag, std::ptr::null_mut()),
                busy
            );
            assert_eq!(nicmsg_wait(&mut request, std::ptr::null_mut()), busy);
            assert!(
                !request.is_null(),
                "a request turned away is left as it was"
            );
            let code = nicmsg_waitany(1, &mut request, &mut index, std::ptr::null_mut());
            assert_eq!((code, index), (busy, NICMSG_UNDEFINED));
            assert_eq!(nicmsg_program_run(comm, 0, 1), busy);
            assert_eq!(nicmsg_finalize(comm), busy);
            assert_eq!(nicmsg_comm_rank(comm, &mut rank), NICMSG_SUCCESS);
            assert_eq!(rank, 0);
            drop(other_thread);
            assert_eq!(nicmsg_cancel(request), NICMSG_SUCCESS);
            let code = nicmsg_wait(&mut request, std::ptr::null_mut());
            assert_eq!(code, NICMSG_ERR_CANCELLED);
            assert_eq!(nicmsg_finalize(comm), NICMSG_SUCCESS);
        }
    }

    /// A second finalize, or any call after finalize, read the freed communicator (use after
    /// free). The handle now stays allocated and every such call returns NICMSG_ERR_ARG.
    #[test]
    fn calls_on_a_finalized_communicator_are_refused() {
        let comm = solo_handle();
        let mut request = std::ptr::null_mut();
        let (mut flag, mut rank) = (0, 9u32);
        // SAFETY: `comm` comes from `solo_handle`; handles are never freed.
        unsafe {
            assert_eq!(nicmsg_finalize(comm), NICMSG_SUCCESS);
            assert_eq!(nicmsg_finalize(comm), NICMSG_ERR_ARG);
            let code = nicmsg_isend(comm, std::ptr::null(), 0, 0, 5, &mut request);
            assert_eq!(code, NICMSG_ERR_ARG);
            assert!(request.is_null());
            assert_eq!(
                nicmsg_iprobe(comm, ANY, ANY, &mut flag, std::ptr::null_mut()),
                NICMSG_ERR_ARG
            );
            assert_eq!(nicmsg_barrier(comm), NICMSG_ERR_ARG);
            assert_eq!(nicmsg_comm_rank(comm, &mut rank), NICMSG_ERR_ARG);
            assert_eq!(rank, 9, "nothing written");
            assert_eq!(nicmsg_program_run(comm, 0, 1), NICMSG_ERR_ARG);
        }
    }

    /// waitany ran the engine outside any `catch_unwind`: a panic there unwound into C (Rust
    /// aborts the process) instead of returning `NICMSG_ERR_PANIC` as the header promises.
    #[test]
    fn a_panic_in_waitany_is_returned_not_unwound_into_c() {
        let comm = solo_handle();
        let mut inbox = [0u8; 8];
        let mut requests = [std::ptr::null_mut(); 1];
        let mut index = 0;
        // SAFETY: `comm` is a live handle; the buffer outlives the request, which is completed
        // before the communicator is finalized.
        unsafe {
            let (buffer, len) = (inbox.as_mut_ptr().cast(), inbox.len());
            let code = nicmsg_irecv(comm, buffer, len, ANY, 5, &mut requests[0]);
            assert_eq!(code, NICMSG_SUCCESS);
            let held = enter(comm).unwrap().0.hold_engine_for_test();
            let code = nicmsg_waitany(1, requests.as_mut_ptr(), &mut index, std::ptr::null_mut());
            assert_eq!((code, index), (NICMSG_ERR_PANIC, 0));
            assert!(
                !requests[0].is_null(),
                "a request whose wait failed stays live"
            );
            drop(held);
            assert_eq!(nicmsg_cancel(requests[0]), NICMSG_SUCCESS);
            let code = nicmsg_wait(&mut requests[0], std::ptr::null_mut());
            assert_eq!(code, NICMSG_ERR_CANCELLED);
            assert_eq!(nicmsg_finalize(comm), NICMSG_SUCCESS);
        }
    }

    #[test]
    fn waitany_names_the_request_a_dead_engine_failed_and_finalize_still_frees() {
        let comm = solo_handle();
        let mut inbox = [[0u8; 8]; 2];
        let mut requests = [std::ptr::null_mut(); 3];
        let mut status = NicmsgStatus {
            source: 0,
            tag: 0,
            len: 0,
            error: 0,
        };
        let mut index = 0;
        // SAFETY: `comm` is a live handle; the buffers outlive the requests, which all complete
        // before the communicator is finalized; every pointer is valid for what it is used for.
        unsafe {
            for (i, buffer) in inbox.iter_mut().enumerate() {
                let code = nicmsg_irecv(
                    comm,
                    buffer.as_mut_ptr().cast(),
                    8,
                    ANY,
                    5,
                    &mut requests[i + 1],
                );
                assert_eq!(code, NICMSG_SUCCESS);
            }
            enter(comm).unwrap().0.fail_engine_for_test();
            // Live handles keep the communicator, the engine dead or not: each is freed only
            // by the wait or test that reports its failure.
            assert_eq!(nicmsg_finalize(comm), NICMSG_ERR_PENDING);
            for expected in [1, 2] {
                let code = nicmsg_waitany(3, requests.as_mut_ptr(), &mut index, &mut status);
                assert_eq!(code, NICMSG_ERR_INTERNAL);
                assert_eq!(index, expected);
                assert!(requests[expected].is_null(), "the request named was freed");
                assert_eq!(
                    (status.error, status.source, status.tag),
                    (NICMSG_ERR_INTERNAL, ANY, 5)
                );
            }
            assert_eq!(
                nicmsg_waitany(3, requests.as_mut_ptr(), &mut index, &mut status),
                NICMSG_SUCCESS
            );
            assert_eq!(index, NICMSG_UNDEFINED);
            assert_eq!(nicmsg_finalize(comm), NICMSG_SUCCESS);
        }
    }
}

//! The C ABI of PANIC (`include/nicmsg.h`, "Programs"): the operations of
//! [`crate::Programs`] with C types. Same contract as the rest of the C ABI (`capi.rs`): null
//! pointers and bad arguments return `NICMSG_ERR_ARG`, nothing panics across the boundary,
//! and a refusal of an engine returns `NICMSG_ERR_PROGRAM` with its reason on stderr.

use crate::capi::{enter, guard, or_return, NicmsgComm, Turn, NICMSG_ERR_ARG};
use crate::programs::{ProgramId, Programs};
use crate::{Comm, Error};
use std::ffi::{c_char, c_int, c_void};

/// `program` of `nicmsg_program_output`: every program's values.
pub const NICMSG_ALL_PROGRAMS: u32 = u32::MAX;

/// Runs `body` with the programs of a live communicator, in this thread's turn on it (else
/// the code `enter` gave); prints an engine's refusal, or what was wrong with an argument.
fn with_programs(
    entered: Result<(&Comm, Turn), c_int>,
    body: impl FnOnce(&Programs<'_>) -> Result<(), Error>,
) -> c_int {
    let (comm, _turn) = or_return!(entered);
    guard(|| {
        let result = body(&comm.programs());
        if let Err(error @ (Error::Program { .. } | Error::InvalidArgument(_))) = &result {
            eprintln!("nicmsg: {error}");
        }
        result
    })
}

/// A byte slice from C, or `None` for a null pointer with a length.
///
/// # Safety
/// `data` is null or valid for reading `len` bytes for the call.
pub(crate) unsafe fn bytes<'a>(data: *const c_void, len: usize) -> Option<&'a [u8]> {
    match (data.is_null(), len) {
        (_, 0) => Some(&[]),
        (true, _) => None,
        // SAFETY: not null, and valid for `len` bytes (the caller's contract).
        (false, _) => Some(unsafe { std::slice::from_raw_parts(data.cast(), len) }),
    }
}

/// Loads a module into the engine of `rank`; `*program` receives its id.
///
/// # Safety
/// Valid handle; `module` valid for `len` bytes; `program` valid for writing or NULL.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_load(
    comm: *mut NicmsgComm,
    rank: u32,
    module: *const c_void,
    len: usize,
    program: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(module) = (unsafe { bytes(module, len) }) else {
        return NICMSG_ERR_ARG;
    };
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        let id = programs.load(rank, module)?;
        // SAFETY: `program` is null or valid for writing (the caller's contract).
        unsafe { write(program, id.0) };
        Ok(())
    })
}

/// Loads a module into the engine of `rank` as program `id` (below 2^31).
///
/// # Safety
/// Valid handle; `module` valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_load_as(
    comm: *mut NicmsgComm,
    rank: u32,
    id: u32,
    module: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(module) = (unsafe { bytes(module, len) }) else {
        return NICMSG_ERR_ARG;
    };
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        programs.load_as(rank, ProgramId(id), module).map(drop)
    })
}

/// Starts `program` on the engine of `rank` (its initialisation block).
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_run(
    comm: *mut NicmsgComm,
    rank: u32,
    program: u32,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| programs.run(rank, ProgramId(program)))
}

/// Unloads `program` from the engine of `rank`.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_unload(
    comm: *mut NicmsgComm,
    rank: u32,
    program: u32,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| programs.unload(rank, ProgramId(program)))
}

/// Sends `len` bytes to `program` on the engine of `rank` as `trigger`.
///
/// # Safety
/// Valid handle; `payload` valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_send(
    comm: *mut NicmsgComm,
    rank: u32,
    program: u32,
    trigger: u16,
    payload: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(payload) = (unsafe { bytes(payload, len) }) else {
        return NICMSG_ERR_ARG;
    };
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        programs.send(rank, ProgramId(program), trigger, payload)
    })
}

/// Waits for a program's `REPLY` (or `PASS`) with `trigger` into `buffer`; fills `*origin`
/// (the rank it came from), `*program` (the program that sent it) and `*received` (bytes
/// written), each if not NULL.
///
/// # Safety
/// Valid handle; `buffer` valid for writing `len` bytes; the out-pointers valid or NULL.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_receive(
    comm: *mut NicmsgComm,
    trigger: u16,
    buffer: *mut c_void,
    len: usize,
    origin: *mut u32,
    program: *mut u32,
    received: *mut usize,
) -> c_int {
    if buffer.is_null() && len > 0 {
        return NICMSG_ERR_ARG;
    }
    let buffer: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: not null, valid for writing `len` bytes (the caller's contract).
        unsafe { std::slice::from_raw_parts_mut(buffer.cast(), len) }
    };
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        let reply = programs.receive(trigger, buffer)?;
        // SAFETY: each pointer is null or valid for writing (the caller's contract).
        unsafe {
            write(origin, reply.origin);
            write(program, reply.program.0);
            write(received, reply.len);
        }
        Ok(())
    })
}

/// Writes `value` through `out` unless it is null.
///
/// # Safety
/// `out` is null or valid for writing a `T`.
unsafe fn write<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: not null, and valid for writing (the caller's contract).
        unsafe { *out = value };
    }
}

/// Writes the list of programs loaded on the engine of `rank` into `text` (NUL-terminated,
/// cut to `capacity`).
///
/// # Safety
/// Valid handle; `text` valid for writing `capacity` bytes (at least 1).
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_list(
    comm: *mut NicmsgComm,
    rank: u32,
    text: *mut c_char,
    capacity: usize,
) -> c_int {
    if text.is_null() || capacity == 0 {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        let listing = programs.list(rank)?;
        let len = listing.len().min(capacity - 1);
        // SAFETY: `text` is valid for `capacity` bytes and `len < capacity`.
        unsafe {
            std::ptr::copy_nonoverlapping(listing.as_ptr(), text.cast(), len);
            *text.add(len) = 0;
        }
        Ok(())
    })
}

/// Takes up to `capacity` values programs displayed on the engine of `rank` (only
/// `program`'s, or every program's with `NICMSG_ALL_PROGRAMS`), oldest first: `values[i]`
/// and `programs[i]` (if not NULL) for `i < *count`. This rank's engine keeps the others for
/// the next call; another rank's sends one answer's worth (about 120), and those beyond
/// `capacity` are lost.
///
/// # Safety
/// Valid handle; `values` and `programs` (if not NULL) valid for `capacity` elements; `count`
/// valid.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_output(
    comm: *mut NicmsgComm,
    rank: u32,
    program: u32,
    values: *mut i64,
    programs: *mut u32,
    capacity: usize,
    count: *mut usize,
) -> c_int {
    if count.is_null() || (values.is_null() && capacity > 0) {
        return NICMSG_ERR_ARG;
    }
    let only = (program != NICMSG_ALL_PROGRAMS).then_some(ProgramId(program));
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |handle| {
        let shown = handle.output_at_most(rank, only, capacity)?;
        let taken = shown.len().min(capacity);
        for (i, displayed) in shown.iter().take(taken).enumerate() {
            // SAFETY: `i < capacity`; `values` is valid for `capacity` elements, and
            // `programs` too if not null (the caller's contract).
            unsafe {
                *values.add(i) = displayed.value;
                if !programs.is_null() {
                    *programs.add(i) = displayed.program.0;
                }
            }
        }
        // SAFETY: not null, valid (the caller's contract).
        unsafe { *count = taken };
        Ok(())
    })
}

/// Shares `len` bytes (at least 1) at `memory` with this rank's programs as segment `id`, until
/// `nicmsg_segment_unshare`. Programs write it at any time (`DELIVER`): read it when their
/// flags say so.
///
/// # Safety
/// Valid handle; `memory` valid for reading and writing `len` bytes until unshared.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_segment_share(
    comm: *mut NicmsgComm,
    id: u16,
    memory: *mut c_void,
    len: usize,
) -> c_int {
    // An empty segment is refused: the engine registers at least one byte, which a program
    // could then write past what was shared.
    if memory.is_null() || len == 0 {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: the caller's contract.
    let (comm, _turn) = or_return!(unsafe { enter(comm) });
    guard(|| {
        // SAFETY: the caller keeps the memory valid until it unshares it (contract).
        let shared = unsafe { comm.programs_shared().share(id, memory.cast(), len) };
        shared.map_err(|refused| {
            eprintln!("nicmsg: segment {id}: {refused}");
            Error::InvalidArgument(refused.to_string())
        })
    })
}

/// Programs no longer reach segment `id` once this returns.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_segment_unshare(comm: *mut NicmsgComm, id: u16) -> c_int {
    // SAFETY: the caller's contract.
    let (comm, _turn) = or_return!(unsafe { enter(comm) });
    guard(|| {
        comm.programs_shared().unshare(id);
        Ok(())
    })
}

/// Takes lock `lock` (0 to 63) of `program`.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_set_lock(
    comm: *mut NicmsgComm,
    program: u32,
    lock: u8,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| programs.set_lock(ProgramId(program), lock))
}

/// `*set` = whether flag `flag` (0 to 63) of `program` is set.
///
/// # Safety
/// Valid handle; `set` valid.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_flag(
    comm: *mut NicmsgComm,
    program: u32,
    flag: u8,
    set: *mut c_int,
) -> c_int {
    if set.is_null() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        let value = programs.flag(ProgramId(program), flag)?;
        // SAFETY: not null, valid (the caller's contract).
        unsafe { *set = c_int::from(value) };
        Ok(())
    })
}

/// Clears flag `flag` of `program`.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_clear_flag(
    comm: *mut NicmsgComm,
    program: u32,
    flag: u8,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        programs.clear_flag(ProgramId(program), flag)
    })
}

/// Waits until flag `flag` of `program` is set.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_program_wait_flag(
    comm: *mut NicmsgComm,
    program: u32,
    flag: u8,
) -> c_int {
    // SAFETY: `comm` is null or a live handle (the caller's contract).
    let comm = unsafe { enter(comm) };
    with_programs(comm, |programs| {
        programs.wait_flag(ProgramId(program), flag)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::{nicmsg_finalize, NICMSG_ERR_PROGRAM, NICMSG_SUCCESS};

    #[test]
    fn a_program_is_loaded_run_messaged_and_listed_through_the_c_abi() {
        let comm = crate::capi::tests::solo_handle();
        let source = "PROGRAM echo: VAR n, buf[16]; TRIGGERS 1;
            BEGIN AWAIT END;
            MESSAGE 1: BEGIN
              n = n + 1; DISPLAY n;
              RECEIVE buf LEN MSGLEN;
              DELIVER buf OFFSET 0 INTO 3 LEN MSGLEN;
              REPLY buf LEN MSGLEN AS 2;
              SETFLAG 1
            END; END.";
        let module = nicmsg_pdl::compile(source).unwrap().encode().unwrap();
        let mut segment = [0u8; 32];
        let mut id = 0u32;
        let mut reply = [0u8; 16];
        let (mut origin, mut from, mut received) = (9u32, 0u32, 0usize);
        let mut text = [0 as c_char; 512];
        let mut values = [0i64; 4];
        let mut count = 0usize;
        let mut set: c_int = 0;
        // SAFETY: `comm` is a live handle until finalized at the end; every buffer and
        // out-pointer is a local valid for what it is used for, and the segment is unshared
        // before it goes out of scope.
        unsafe {
            let ok = NICMSG_SUCCESS;
            assert_eq!(
                nicmsg_segment_share(comm, 3, segment.as_mut_ptr().cast(), 32),
                ok
            );
            // A segment id in use, or beyond the engine's segments, is a bad argument.
            let in_use = nicmsg_segment_share(comm, 3, segment.as_mut_ptr().cast(), 32);
            assert_eq!(in_use, NICMSG_ERR_ARG);
            let beyond = nicmsg_segment_share(comm, u16::MAX, segment.as_mut_ptr().cast(), 32);
            assert_eq!(beyond, NICMSG_ERR_ARG);
            assert_eq!(
                nicmsg_program_load(comm, 0, module.as_ptr().cast(), module.len(), &mut id),
                ok
            );
            assert_eq!(nicmsg_program_run(comm, 0, id), ok);
            assert_eq!(
                nicmsg_program_send(comm, 0, id, 1, b"hello".as_ptr().cast(), 5),
                ok
            );
            assert_eq!(nicmsg_program_wait_flag(comm, id, 1), ok);
            assert_eq!(nicmsg_program_flag(comm, id, 1, &mut set), ok);
            assert_eq!(set, 1);
            assert_eq!(nicmsg_program_clear_flag(comm, id, 1), ok);
            assert_eq!(
                nicmsg_program_receive(
                    comm,
                    2,
                    reply.as_mut_ptr().cast(),
                    16,
                    &mut origin,
                    &mut from,
                    &mut received
                ),
                ok
            );
            assert_eq!((&reply[..received], origin, from), (&b"hello"[..], 0, id));
            assert_eq!(nicmsg_segment_unshare(comm, 3), ok);
            assert_eq!(&segment[..5], b"hello");
            assert_eq!(
                nicmsg_program_output(
                    comm,
                    0,
                    NICMSG_ALL_PROGRAMS,
                    values.as_mut_ptr(),
                    std::ptr::null_mut(),
                    4,
                    &mut count
                ),
                ok
            );
            assert_eq!(&values[..count], &[1]);
            assert_eq!(
                nicmsg_program_list(comm, 0, text.as_mut_ptr(), text.len()),
                ok
            );
            let listing = std::ffi::CStr::from_ptr(text.as_ptr()).to_string_lossy();
            assert!(listing.contains("echo running"), "{listing}");
            assert_eq!(nicmsg_program_set_lock(comm, id, 64), NICMSG_ERR_ARG);
            assert_eq!(nicmsg_program_unload(comm, 0, id), ok);
            assert_eq!(nicmsg_program_unload(comm, 0, id), NICMSG_ERR_PROGRAM);
            assert_eq!(
                nicmsg_program_load(comm, 0, b"junk".as_ptr().cast(), 4, &mut id),
                NICMSG_ERR_PROGRAM
            );
            assert_eq!(
                nicmsg_program_load(comm, 0, std::ptr::null(), 4, &mut id),
                NICMSG_ERR_ARG
            );
            assert_eq!(
                nicmsg_program_run(std::ptr::null_mut(), 0, id),
                NICMSG_ERR_ARG
            );
            assert_eq!(nicmsg_finalize(comm), ok);
        }
    }

    /// Values beyond `capacity` were taken from the engine's log and dropped: a caller reading
    /// them a few at a time lost all but the first few.
    #[test]
    fn output_takes_no_more_values_than_there_is_room_for() {
        let comm = crate::capi::tests::solo_handle();
        let source = "PROGRAM show: VAR n; TRIGGERS 1;
            BEGIN AWAIT END;
            MESSAGE 1: BEGIN
              n = 1; DISPLAY n; n = 2; DISPLAY n; n = 3; DISPLAY n;
              SETFLAG 1
            END; END.";
        let module = nicmsg_pdl::compile(source).unwrap().encode().unwrap();
        let (mut id, mut count) = (0u32, 0usize);
        let mut values = [0i64; 4];
        let mut taken = Vec::new();
        // SAFETY: `comm` is live until finalized; every pointer is a local valid for the
        // length or capacity given.
        unsafe {
            let ok = NICMSG_SUCCESS;
            let (bytes, len) = (module.as_ptr().cast(), module.len());
            assert_eq!(nicmsg_program_load(comm, 0, bytes, len, &mut id), ok);
            assert_eq!(nicmsg_program_run(comm, 0, id), ok);
            assert_eq!(nicmsg_program_send(comm, 0, id, 1, std::ptr::null(), 0), ok);
            assert_eq!(nicmsg_program_wait_flag(comm, id, 1), ok);
            for capacity in [1, 0, 4] {
                let (values, programs) = (values.as_mut_ptr(), std::ptr::null_mut());
                let code =
                    nicmsg_program_output(comm, 0, id, values, programs, capacity, &mut count);
                assert_eq!(code, ok);
                taken.extend_from_slice(std::slice::from_raw_parts(values, count));
            }
            assert_eq!(taken, [1, 2, 3], "every value displayed, once");
            assert_eq!(nicmsg_finalize(comm), ok);
        }
    }

    /// Sharing 0 bytes must not give programs a byte: the engine registers a segment of at
    /// least one byte, so a `DELIVER` of one byte wrote past the memory the host shared.
    #[test]
    fn an_empty_segment_is_refused_so_no_program_writes_past_it() {
        let comm = crate::capi::tests::solo_handle();
        let source = "PROGRAM poke: VAR buf[8]; TRIGGERS 1;
            BEGIN AWAIT END;
            MESSAGE 1: BEGIN
              RECEIVE buf LEN MSGLEN;
              DELIVER buf OFFSET 0 INTO 4 LEN MSGLEN;
              SETFLAG 1
            END; END.";
        let module = nicmsg_pdl::compile(source).unwrap().encode().unwrap();
        let mut memory = [0u8; 4];
        let mut id = 0u32;
        // SAFETY: `comm` is live until finalized; `memory` outlives the segment, which is
        // unshared before it goes out of scope; the module is valid for its length.
        unsafe {
            let shared = nicmsg_segment_share(comm, 4, memory.as_mut_ptr().cast(), 0);
            if shared == NICMSG_SUCCESS {
                // Show what an accepted empty segment lets a program do.
                let ok = NICMSG_SUCCESS;
                let (bytes, len) = (module.as_ptr().cast(), module.len());
                assert_eq!(nicmsg_program_load(comm, 0, bytes, len, &mut id), ok);
                assert_eq!(nicmsg_program_run(comm, 0, id), ok);
                assert_eq!(
                    nicmsg_program_send(comm, 0, id, 1, b"x".as_ptr().cast(), 1),
                    ok
                );
                assert_eq!(nicmsg_program_wait_flag(comm, id, 1), ok);
                assert_eq!(nicmsg_segment_unshare(comm, 4), ok);
            }
            assert_eq!(memory[0], 0, "a program wrote into 0 shared bytes");
            assert_eq!(shared, NICMSG_ERR_ARG);
            assert_eq!(nicmsg_finalize(comm), NICMSG_SUCCESS);
        }
    }
}

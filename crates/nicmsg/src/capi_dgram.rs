//! The C ABI of the datagram socket (`include/nicmsg.h`, "Datagram sockets"): the operations
//! of [`crate::dgram::DgramSocket`] with C types. Addresses travel as text ("10.0.0.2:7000",
//! "[fd00::2]:7000"), which C programs print, parse and pass on the command line as they are.
//! Same contract as the rest of the C ABI (`capi.rs`): null pointers and bad arguments return
//! `NICMSG_ERR_ARG`, and nothing panics across the boundary.

use crate::capi::{guard, or_return, Turn, NICMSG_ERR_ARG, NICMSG_SUCCESS};
use crate::capi_programs::bytes;
use crate::dgram::DgramSocket;
use crate::Error;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

/// Room for an address as text with its terminating NUL: "[" + 45 characters of IPv6 (IPv4
/// mapped) + "%" + scope + "]:65535" fits in 64.
pub const NICMSG_ADDRESS_MAX: usize = 64;

/// A datagram socket handle.
pub struct NicmsgDgram {
    socket: DgramSocket,
    /// Set while a thread is inside a call on the socket (see [`Turn`]).
    busy: AtomicBool,
}

/// The address text at `text`, or `None` (null, not UTF-8, not an address).
///
/// # Safety
/// `text` is null or a NUL-terminated string.
unsafe fn address(text: *const c_char) -> Option<SocketAddr> {
    if text.is_null() {
        return None;
    }
    // SAFETY: not null, NUL-terminated (the caller's contract).
    let text = unsafe { CStr::from_ptr(text) }.to_str().ok()?;
    text.parse().ok()
}

/// Writes `address` as NUL-terminated text to `out` (of `capacity` bytes) if `out` is not
/// null; an error if it does not fit.
///
/// # Safety
/// `out` is null or valid for writing `capacity` bytes.
unsafe fn write_address(
    address: SocketAddr,
    out: *mut c_char,
    capacity: usize,
) -> Result<(), Error> {
    if out.is_null() {
        return Ok(());
    }
    let text = address.to_string();
    if text.len() + 1 > capacity {
        return Err(Error::BadBuffer("the address does not fit its buffer"));
    }
    // SAFETY: `out` is valid for `capacity` bytes (contract), and text + NUL fits (checked).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast(), text.len());
        *out.add(text.len()) = 0;
    }
    Ok(())
}

/// Whether `from` (of `capacity` bytes) can take any sender's address: checked before a
/// datagram is taken, since one taken and then not reported would be lost.
fn sender_room(from: *const c_char, capacity: usize) -> bool {
    from.is_null() || capacity >= NICMSG_ADDRESS_MAX
}

/// The socket behind a handle with the calling thread's turn on it: `NICMSG_ERR_ARG` for
/// null, `NICMSG_ERR_BUSY` while another thread is inside a call on it.
///
/// # Safety
/// `socket` is null or a live handle from `nicmsg_dgram_bind`, not closed while the returned
/// reference is used.
unsafe fn enter(socket: *const NicmsgDgram) -> Result<(&'static DgramSocket, Turn), c_int> {
    // SAFETY: the caller's contract.
    let Some(handle) = (unsafe { socket.as_ref::<'static>() }) else {
        return Err(NICMSG_ERR_ARG);
    };
    Ok((&handle.socket, Turn::take(&handle.busy)?))
}

/// Binds a datagram socket to `address` ("ip:port"; port 0 for any free port), with options
/// from `NICMSG_*`.
///
/// # Safety
/// `address` is a NUL-terminated string; `socket` is valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_bind(
    address_text: *const c_char,
    socket: *mut *mut NicmsgDgram,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(bind) = (unsafe { address(address_text) }) else {
        return NICMSG_ERR_ARG;
    };
    if socket.is_null() {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let handle = Box::new(NicmsgDgram {
            socket: DgramSocket::bind(bind)?,
            busy: AtomicBool::new(false),
        });
        // SAFETY: not null (checked above), valid for writing (contract).
        unsafe { socket.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Closes the socket (its engine stops) and frees the handle.
///
/// # Safety
/// `socket` comes from `nicmsg_dgram_bind` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_close(socket: *mut NicmsgDgram) -> c_int {
    // SAFETY: null or a live handle (contract).
    match unsafe { enter(socket) } {
        // The flag is freed with the socket.
        Ok((_, turn)) => turn.keep(),
        Err(code) => return code,
    }
    // SAFETY: made by `Box::into_raw` in `nicmsg_dgram_bind`, not used after (contract), and
    // no other thread is inside a call on it (its turn was taken).
    let boxed = unsafe { Box::from_raw(socket) };
    guard(move || {
        drop(boxed);
        Ok(())
    })
}

/// Writes the socket's own address as text (at most `capacity` bytes with the NUL;
/// `NICMSG_ADDRESS_MAX` always suffices).
///
/// # Safety
/// Valid handle; `text` valid for writing `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_local_address(
    socket: *const NicmsgDgram,
    text: *mut c_char,
    capacity: usize,
) -> c_int {
    // The bound address never changes: reading it needs no turn (any thread, any time).
    // SAFETY: the caller's contract.
    let Some(socket) = (unsafe { socket.as_ref() }).map(|handle| &handle.socket) else {
        return NICMSG_ERR_ARG;
    };
    // SAFETY: the caller's contract.
    if text.is_null() || unsafe { write_address(socket.local_addr(), text, capacity) }.is_err() {
        return NICMSG_ERR_ARG;
    }
    NICMSG_SUCCESS
}

/// Sends `len` bytes at `buf` as one datagram to `address` and waits until it is delivered
/// (or, for a short one, until the engine holds a copy of it).
///
/// # Safety
/// Valid handle; `buf` valid for reading `len` bytes; `address` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_send_to(
    socket: *mut NicmsgDgram,
    buf: *const c_void,
    len: usize,
    address_text: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let found = unsafe { (address(address_text), bytes(buf, len)) };
    let (Some(to), Some(data)) = found else {
        return NICMSG_ERR_ARG;
    };
    // SAFETY: the caller's contract.
    let (socket, _turn) = or_return!(unsafe { enter(socket) });
    guard(|| socket.send_to(data, to))
}

/// Waits for the next datagram and copies it to `buf` (of `capacity` bytes); `*len` receives
/// its length and `from` (if not null, `from_capacity` bytes, at least `NICMSG_ADDRESS_MAX`)
/// its sender's address. A longer datagram is consumed and reported as `NICMSG_ERR_TRUNCATE`
/// with `*len` its length.
///
/// # Safety
/// Valid handle; `buf` valid for writing `capacity` bytes; `len` valid for writing; `from`
/// null or valid for writing `from_capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_recv_from(
    socket: *mut NicmsgDgram,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
    from: *mut c_char,
    from_capacity: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let (socket, _turn) = or_return!(unsafe { enter(socket) });
    if len.is_null() || (buf.is_null() && capacity > 0) || !sender_room(from, from_capacity) {
        return NICMSG_ERR_ARG;
    }
    let buffer: &mut [u8] = if capacity == 0 {
        &mut []
    } else {
        // SAFETY: not null, valid for `capacity` bytes (contract).
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), capacity) }
    };
    guard(|| match socket.recv_from(buffer) {
        Ok((received, sender)) => {
            // SAFETY: `len` not null (checked), valid for writing; `from` per contract.
            unsafe { len.write(received) };
            // SAFETY: `from` is null or valid for `from_capacity` bytes (contract).
            unsafe { write_address(sender, from, from_capacity) }
        }
        Err(error @ Error::Truncated { message_len, .. }) => {
            // SAFETY: as above.
            unsafe { len.write(message_len as usize) };
            Err(error)
        }
        Err(error) => Err(error),
    })
}

/// Waits until a datagram is there; `*len` receives its length and `from` (if not null, at
/// least `NICMSG_ADDRESS_MAX` bytes) its sender, without taking it: the next
/// `nicmsg_dgram_recv_from` gets it.
///
/// # Safety
/// Valid handle; `len` valid for writing; `from` null or valid for `from_capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_peek_from(
    socket: *mut NicmsgDgram,
    len: *mut usize,
    from: *mut c_char,
    from_capacity: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let (socket, _turn) = or_return!(unsafe { enter(socket) });
    if len.is_null() || !sender_room(from, from_capacity) {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let (waiting, sender) = socket.peek_from()?;
        // SAFETY: `len` not null (checked), valid for writing; `from` per contract.
        unsafe { len.write(waiting) };
        // SAFETY: `from` is null or valid for `from_capacity` bytes (contract).
        unsafe { write_address(sender, from, from_capacity) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::NICMSG_ERR_TRUNCATE;

    /// A socket on loopback, any free port, and its address as C text.
    fn bound() -> (*mut NicmsgDgram, [c_char; NICMSG_ADDRESS_MAX]) {
        let mut socket = std::ptr::null_mut();
        let mut text = [0 as c_char; NICMSG_ADDRESS_MAX];
        // SAFETY: the address is NUL-terminated; `socket` and `text` are locals of the sizes
        // given.
        unsafe {
            assert_eq!(
                nicmsg_dgram_bind(c"127.0.0.1:0".as_ptr(), &mut socket),
                NICMSG_SUCCESS
            );
            assert_eq!(
                nicmsg_dgram_local_address(socket, text.as_mut_ptr(), text.len()),
                NICMSG_SUCCESS
            );
        }
        (socket, text)
    }

    /// A socket is not shareable between threads (`DgramSocket` is not `Sync`): a second
    /// thread's call raced the first, and a close while another thread waited in recv_from
    /// freed the socket under it. Now the second thread is turned away with NICMSG_ERR_BUSY.
    #[test]
    fn a_second_thread_is_turned_away_while_one_waits_in_recv_from() {
        let (server, address) = bound();
        let (client, _) = bound();
        let shared = server as usize;
        let waiter = std::thread::spawn(move || {
            let mut buffer = [0u8; 8];
            let mut len = 0usize;
            let server = shared as *mut NicmsgDgram;
            // SAFETY: the socket stays open until this thread has returned (joined below).
            let code = unsafe {
                let data = buffer.as_mut_ptr().cast();
                nicmsg_dgram_recv_from(server, data, 8, &mut len, std::ptr::null_mut(), 0)
            };
            (code, buffer[..len].to_vec())
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        // SAFETY: both handles are live until closed at the end; the address is
        // NUL-terminated; the buffers are locals of the sizes given.
        unsafe {
            let hello = b"hello".as_ptr().cast();
            let (mut len, mut text) = (0usize, [0 as c_char; NICMSG_ADDRESS_MAX]);
            let busy = crate::capi::NICMSG_ERR_BUSY;
            assert_eq!(nicmsg_dgram_close(server), busy);
            assert_eq!(
                nicmsg_dgram_send_to(server, hello, 5, address.as_ptr()),
                busy
            );
            let peek = nicmsg_dgram_peek_from(server, &mut len, std::ptr::null_mut(), 0);
            assert_eq!(peek, busy);
            let (own, room) = (text.as_mut_ptr(), text.len());
            assert_eq!(
                nicmsg_dgram_local_address(server, own, room),
                NICMSG_SUCCESS
            );
            assert_eq!(
                nicmsg_dgram_send_to(client, hello, 5, address.as_ptr()),
                NICMSG_SUCCESS
            );
            let (code, received) = waiter.join().unwrap();
            assert_eq!((code, &received[..]), (NICMSG_SUCCESS, &b"hello"[..]));
            assert_eq!(nicmsg_dgram_close(client), NICMSG_SUCCESS);
            assert_eq!(nicmsg_dgram_close(server), NICMSG_SUCCESS);
        }
    }

    /// A `from` buffer too short for the sender's address was found out only after the
    /// datagram had been taken: the call failed, and the datagram, already consumed, was lost.
    #[test]
    fn a_short_sender_buffer_is_refused_before_a_datagram_is_taken() {
        let (server, address) = bound();
        let (client, _) = bound();
        let mut buffer = [0u8; 16];
        let mut len = 0usize;
        let mut short = [0 as c_char; 4];
        let mut from = [0 as c_char; NICMSG_ADDRESS_MAX];
        // SAFETY: both handles are live until closed at the end; every buffer is a local of the
        // capacity given; the address is NUL-terminated.
        unsafe {
            let hello = b"hello".as_ptr().cast();
            assert_eq!(
                nicmsg_dgram_send_to(client, hello, 5, address.as_ptr()),
                NICMSG_SUCCESS
            );
            let (data, capacity) = (buffer.as_mut_ptr().cast(), buffer.len());
            let refused = nicmsg_dgram_peek_from(server, &mut len, short.as_mut_ptr(), 4);
            assert_eq!(refused, NICMSG_ERR_ARG);
            let refused =
                nicmsg_dgram_recv_from(server, data, capacity, &mut len, short.as_mut_ptr(), 4);
            assert_eq!(refused, NICMSG_ERR_ARG);
            let received =
                nicmsg_dgram_recv_from(server, data, capacity, &mut len, from.as_mut_ptr(), 64);
            assert_eq!(received, NICMSG_SUCCESS, "the datagram is still there");
            assert_eq!(&buffer[..len], b"hello");
            // A datagram longer than the buffer is still consumed (as documented).
            assert_eq!(
                nicmsg_dgram_send_to(client, hello, 5, address.as_ptr()),
                NICMSG_SUCCESS
            );
            let cut = nicmsg_dgram_recv_from(server, data, 2, &mut len, std::ptr::null_mut(), 0);
            assert_eq!((cut, len), (NICMSG_ERR_TRUNCATE, 5));
            assert_eq!(nicmsg_dgram_close(client), NICMSG_SUCCESS);
            assert_eq!(nicmsg_dgram_close(server), NICMSG_SUCCESS);
        }
    }
}

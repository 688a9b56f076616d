//! The C ABI of the datagram socket (`include/nicmsg.h`, "Datagram sockets"): the operations
//! of [`crate::dgram::DgramSocket`] with C types. Addresses travel as text ("10.0.0.2:7000",
//! "[fd00::2]:7000"), which C programs print, parse and pass on the command line as they are.
//! Same contract as the rest of the C ABI (`capi.rs`): null pointers and bad arguments return
//! `NICMSG_ERR_ARG`, and nothing panics across the boundary.

use crate::capi::{guard, or_return, Turn, NICMSG_ERR_ARG, NICMSG_SUCCESS};
use crate::capi_handle::{from_pointer, Handle};
use crate::capi_programs::bytes;
use crate::dgram::DgramSocket;
use crate::Error;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::SocketAddr;

/// Room for an address as text with its terminating NUL: "[" + 45 characters of IPv6 (IPv4
/// mapped) + "%" + scope + "]:65535" fits in 64.
pub const NICMSG_ADDRESS_MAX: usize = 64;

/// A datagram socket's handle, of either kind (this file's, and LM's in `capi_lm_dgram.rs`).
pub struct DgramHandle<T> {
    /// The socket and its turn flag ([`Turn`]); closed, the handle stays allocated and turns
    /// calls away (`capi_handle.rs`).
    handle: Handle<T>,
    /// The bound address, which never changes: read without a turn.
    local: SocketAddr,
}

/// A datagram socket handle.
pub type NicmsgDgram = DgramHandle<DgramSocket>;

/// The address text at `text`, or `None` (null, not UTF-8, not an address).
///
/// # Safety
/// `text` is null or a NUL-terminated string.
pub(crate) unsafe fn address(text: *const c_char) -> Option<SocketAddr> {
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
pub(crate) unsafe fn write_address(
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
pub(crate) fn sender_room(from: *const c_char, capacity: usize) -> bool {
    from.is_null() || capacity >= NICMSG_ADDRESS_MAX
}

/// The socket behind a handle with the calling thread's turn on it: `NICMSG_ERR_ARG` for
/// null or a closed one, `NICMSG_ERR_BUSY` while another thread is inside a call on it.
///
/// # Safety
/// `socket` is null or a handle from a bind of its kind (closed or not: the handle itself is
/// never freed).
pub(crate) unsafe fn enter<T: 'static>(
    socket: *const DgramHandle<T>,
) -> Result<(&'static T, Turn), c_int> {
    // SAFETY: the caller's contract.
    unsafe { from_pointer(socket) }?.handle.enter()
}

/// Binds a socket of either kind to the address at `address_text` with `bind`, and writes
/// its handle to `socket`.
///
/// # Safety
/// `address_text` is a NUL-terminated string; `socket` is valid for writing a handle.
pub(crate) unsafe fn bind_handle<T>(
    address_text: *const c_char,
    socket: *mut *mut DgramHandle<T>,
    bind: impl FnOnce(SocketAddr) -> Result<(T, SocketAddr), Error>,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(address) = (unsafe { address(address_text) }) else {
        return NICMSG_ERR_ARG;
    };
    if socket.is_null() {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let (bound, local) = bind(address)?;
        let handle = Box::new(DgramHandle {
            local,
            handle: Handle::new(bound),
        });
        // SAFETY: not null (checked above), valid for writing (contract).
        unsafe { socket.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Closes a socket of either kind; the handle stays allocated, and every later call with it
/// (a second close too) is `NICMSG_ERR_ARG`.
///
/// # Safety
/// `socket` is null or a handle from a bind of its kind.
pub(crate) unsafe fn close_handle<T: 'static>(socket: *mut DgramHandle<T>) -> c_int {
    // SAFETY: null or a handle (contract).
    let (_, turn) = or_return!(unsafe { enter(socket) });
    // SAFETY: `enter` succeeded, so the pointer is a live handle; the socket reference it
    // gave is dropped unused.
    let handle = unsafe { &(*socket).handle };
    guard(move || {
        // SAFETY: as above.
        unsafe { handle.retire(turn) };
        Ok(())
    })
}

/// Writes a socket's own address as text (at most `capacity` bytes with the NUL). The bound
/// address never changes: reading it needs no turn (any thread, any time).
///
/// # Safety
/// `socket` is null or a handle; `text` valid for writing `capacity` bytes.
pub(crate) unsafe fn local_address_of<T: 'static>(
    socket: *const DgramHandle<T>,
    text: *mut c_char,
    capacity: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let socket = or_return!(unsafe { from_pointer(socket) });
    if text.is_null() || socket.handle.is_gone() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: `text` is not null (checked above) and valid for `capacity` bytes (contract).
    match unsafe { write_address(socket.local, text, capacity) } {
        Ok(()) => NICMSG_SUCCESS,
        Err(_) => NICMSG_ERR_ARG,
    }
}

/// A send's arguments: the destination and the bytes, or `None` (`NICMSG_ERR_ARG`).
///
/// # Safety
/// `buf` valid for reading `len` bytes; `address_text` null or NUL-terminated.
pub(crate) unsafe fn send_arguments<'a>(
    buf: *const c_void,
    len: usize,
    address_text: *const c_char,
) -> Option<(SocketAddr, &'a [u8])> {
    // SAFETY: the caller's contract.
    let found = unsafe { (address(address_text), bytes(buf, len)) };
    match found {
        (Some(to), Some(data)) => Some((to, data)),
        _ => None,
    }
}

/// A receive into `buf` (of `capacity` bytes) with `receive`, for either kind of socket:
/// `*len` gets the datagram's length and `from` (if not null, at least `NICMSG_ADDRESS_MAX`
/// bytes, checked before anything is taken) its sender; a longer datagram is consumed and
/// reported as `NICMSG_ERR_TRUNCATE` with `*len` its length.
///
/// # Safety
/// `buf` valid for writing `capacity` bytes; `len` valid for writing; `from` null or valid
/// for writing `from_capacity` bytes.
pub(crate) unsafe fn receive_into(
    (buf, capacity): (*mut c_void, usize),
    len: *mut usize,
    (from, from_capacity): (*mut c_char, usize),
    receive: impl FnOnce(&mut [u8]) -> Result<(usize, SocketAddr), Error>,
) -> c_int {
    if len.is_null() || (buf.is_null() && capacity > 0) || !sender_room(from, from_capacity) {
        return NICMSG_ERR_ARG;
    }
    let buffer: &mut [u8] = if capacity == 0 {
        &mut []
    } else {
        // SAFETY: not null, valid for `capacity` bytes (contract).
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), capacity) }
    };
    guard(|| match receive(buffer) {
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
    unsafe {
        bind_handle(address_text, socket, |address| {
            let bound = DgramSocket::bind(address)?;
            let local = bound.local_addr();
            Ok((bound, local))
        })
    }
}

/// Closes the socket (its engine stops); the handle stays allocated, and every later call
/// with it (a second close too) is `NICMSG_ERR_ARG`.
///
/// # Safety
/// `socket` is null or comes from `nicmsg_dgram_bind`.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_dgram_close(socket: *mut NicmsgDgram) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { close_handle(socket) }
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
    // SAFETY: the caller's contract.
    unsafe { local_address_of(socket, text, capacity) }
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
    let Some((to, data)) = (unsafe { send_arguments(buf, len, address_text) }) else {
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
    // SAFETY: the caller's contract.
    unsafe {
        receive_into((buf, capacity), len, (from, from_capacity), |buffer| {
            socket.recv_from(buffer)
        })
    }
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
pub(crate) mod tests {
    use super::*;
    use crate::capi::NICMSG_ERR_TRUNCATE;

    /// A socket of either kind bound by `bind` on loopback, any free port, and its address
    /// as C text.
    pub(crate) fn bound_with<T: 'static>(
        bind: unsafe extern "C" fn(*const c_char, *mut *mut DgramHandle<T>) -> c_int,
    ) -> (*mut DgramHandle<T>, [c_char; NICMSG_ADDRESS_MAX]) {
        let mut socket = std::ptr::null_mut();
        let mut text = [0 as c_char; NICMSG_ADDRESS_MAX];
        // SAFETY: the address is NUL-terminated; `socket` and `text` are locals of the sizes
        // given.
        unsafe {
            assert_eq!(bind(c"127.0.0.1:0".as_ptr(), &mut socket), NICMSG_SUCCESS);
            assert_eq!(
                local_address_of(socket, text.as_mut_ptr(), text.len()),
                NICMSG_SUCCESS
            );
        }
        (socket, text)
    }

    /// A socket on loopback, any free port, and its address as C text.
    fn bound() -> (*mut NicmsgDgram, [c_char; NICMSG_ADDRESS_MAX]) {
        bound_with(nicmsg_dgram_bind)
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

    /// A second close, or any call after close, read the freed socket (use after free). The
    /// handle now stays allocated and every such call returns NICMSG_ERR_ARG.
    #[test]
    fn calls_on_a_closed_socket_are_refused() {
        let (socket, address) = bound();
        let mut len = 0usize;
        let mut text = [0 as c_char; NICMSG_ADDRESS_MAX];
        // SAFETY: `socket` comes from `bound`; handles are never freed; the buffers are locals
        // of the sizes given.
        unsafe {
            assert_eq!(nicmsg_dgram_close(socket), NICMSG_SUCCESS);
            assert_eq!(nicmsg_dgram_close(socket), NICMSG_ERR_ARG);
            let hello = b"hello".as_ptr().cast();
            let code = nicmsg_dgram_send_to(socket, hello, 5, address.as_ptr());
            assert_eq!(code, NICMSG_ERR_ARG);
            let peek = nicmsg_dgram_peek_from(socket, &mut len, std::ptr::null_mut(), 0);
            assert_eq!(peek, NICMSG_ERR_ARG);
            let (own, room) = (text.as_mut_ptr(), text.len());
            assert_eq!(
                nicmsg_dgram_local_address(socket, own, room),
                NICMSG_ERR_ARG
            );
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

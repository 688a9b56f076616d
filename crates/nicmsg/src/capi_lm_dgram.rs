//! The C ABI of the datagram socket over LM (`include/nicmsg.h`, "Datagram sockets over LM"):
//! the operations of [`crate::lm_dgram::LmDgramSocket`] with C types, addresses as text like
//! the engine's datagram sockets (`capi_dgram.rs`). A datagram lent by
//! `nicmsg_lm_dgram_recv_lent` stays lent until the next call on the socket (or
//! `nicmsg_lm_dgram_give_back`). Same contract as the rest of the C ABI: null pointers and bad
//! arguments return `NICMSG_ERR_ARG`, a second thread inside a call on the same socket
//! `NICMSG_ERR_BUSY`, and nothing panics across the boundary.

use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use crate::capi::{guard, or_return, Turn, NICMSG_ERR_ARG, NICMSG_SUCCESS};
use crate::capi_dgram::{address, sender_room, write_address};
use crate::capi_handle::{from_pointer, Handle};
use crate::capi_programs::bytes;
use crate::lm_dgram::{LmDatagram, LmDgramSocket};
use crate::Error;

/// An LM datagram socket and the datagram it lends, if any.
pub struct LmState {
    socket: LmDgramSocket,
    lent: Option<LmDatagram>,
}

impl LmState {
    /// The socket, with the datagram lent by the last call given back.
    fn socket(&mut self) -> &mut LmDgramSocket {
        if let Some(datagram) = self.lent.take() {
            self.socket.give_back(datagram);
        }
        &mut self.socket
    }
}

/// An LM datagram socket handle.
pub struct NicmsgLmDgram {
    /// The socket behind its turn flag; the turn makes each call exclusive, so the lock is
    /// never contended (it makes the state's mutation plain safe Rust).
    handle: Handle<Mutex<LmState>>,
    local: SocketAddr,
}

/// The socket's state with the calling thread's turn on it.
///
/// # Safety
/// `socket` is null or a handle from `nicmsg_lm_dgram_bind`.
unsafe fn enter(socket: *const NicmsgLmDgram) -> Result<(&'static Mutex<LmState>, Turn), c_int> {
    // SAFETY: the caller's contract.
    unsafe { from_pointer(socket) }?.handle.enter()
}

fn state(lock: &Mutex<LmState>) -> std::sync::MutexGuard<'_, LmState> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Binds an LM datagram socket to `address` ("ip:port", IPv4; port 0 for any free port). It
/// places datagrams where the address is an Ethernet interface's and the process may attach
/// XDP programs, and receives by copy otherwise (`nicmsg_lm_dgram_places` says which).
///
/// # Safety
/// `address` is a NUL-terminated string; `socket` is valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_bind(
    address_text: *const c_char,
    socket: *mut *mut NicmsgLmDgram,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(bind) = (unsafe { address(address_text) }) else {
        return NICMSG_ERR_ARG;
    };
    if socket.is_null() {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let bound = LmDgramSocket::bind(bind)?;
        let handle = Box::new(NicmsgLmDgram {
            local: bound.local_addr(),
            handle: Handle::new(Mutex::new(LmState {
                socket: bound,
                lent: None,
            })),
        });
        // SAFETY: not null (checked above), valid for writing (contract).
        unsafe { socket.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Closes the socket; the handle stays allocated, and every later call with it is
/// `NICMSG_ERR_ARG`.
///
/// # Safety
/// `socket` is null or comes from `nicmsg_lm_dgram_bind`.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_close(socket: *mut NicmsgLmDgram) -> c_int {
    // SAFETY: null or a handle (contract).
    let (_, turn) = or_return!(unsafe { enter(socket) });
    // SAFETY: `enter` succeeded, so the pointer is a live handle.
    let handle = unsafe { &(*socket).handle };
    guard(move || {
        // SAFETY: the reference `enter` gave is dropped unused.
        unsafe { handle.retire(turn) };
        Ok(())
    })
}

/// Writes the socket's own address as text (at most `capacity` bytes with the NUL).
///
/// # Safety
/// Valid handle; `text` valid for writing `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_local_address(
    socket: *const NicmsgLmDgram,
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

/// 1 if datagrams to the socket are placed (zero-copy receive), 0 if all come by copy.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_places(socket: *mut NicmsgLmDgram) -> c_int {
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    c_int::from(state(lock).socket.places())
}

/// Sends `len` bytes at `buf` as one datagram to `address` and waits until it is delivered.
///
/// # Safety
/// Valid handle; `buf` valid for reading `len` bytes; `address` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_send_to(
    socket: *mut NicmsgLmDgram,
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
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    guard(|| state(lock).socket().send_to(data, to))
}

/// Waits for the next datagram and copies it to `buf` (of `capacity` bytes); `*len` receives
/// its length and `from` (if not null, at least `NICMSG_ADDRESS_MAX` bytes) its sender. A
/// longer datagram is consumed and reported as `NICMSG_ERR_TRUNCATE` with `*len` its length.
///
/// # Safety
/// Valid handle; `buf` valid for writing `capacity` bytes; `len` valid for writing; `from`
/// null or valid for writing `from_capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_recv_from(
    socket: *mut NicmsgLmDgram,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
    from: *mut c_char,
    from_capacity: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    if len.is_null() || (buf.is_null() && capacity > 0) || !sender_room(from, from_capacity) {
        return NICMSG_ERR_ARG;
    }
    let buffer: &mut [u8] = if capacity == 0 {
        &mut []
    } else {
        // SAFETY: not null, valid for `capacity` bytes (contract).
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), capacity) }
    };
    guard(|| match state(lock).socket().recv_from(buffer) {
        Ok((received, sender)) => {
            // SAFETY: `len` not null (checked), valid for writing.
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

/// Waits for the next datagram and lends it where it was received: `*data` and `*len` are its
/// bytes (a placed datagram in the region it landed in, no byte copied in user space), `from`
/// (if not null, at least `NICMSG_ADDRESS_MAX` bytes) its sender. The bytes stay valid until
/// the next call on the socket, which gives them back, or `nicmsg_lm_dgram_give_back`.
///
/// # Safety
/// Valid handle; `data` and `len` valid for writing; `from` null or valid for writing
/// `from_capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_recv_lent(
    socket: *mut NicmsgLmDgram,
    data: *mut *const c_void,
    len: *mut usize,
    from: *mut c_char,
    from_capacity: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    if data.is_null() || len.is_null() || !sender_room(from, from_capacity) {
        return NICMSG_ERR_ARG;
    }
    guard(|| {
        let mut state = state(lock);
        let datagram = state.socket().take_next()?;
        let sender = datagram.from();
        let state = &mut *state;
        let lent = state.lent.insert(datagram);
        let bytes = state.socket.bytes_of(lent);
        // SAFETY: `data` and `len` not null (checked), valid for writing (contract). The
        // bytes stay where they are until the socket's next call gives the datagram back.
        unsafe {
            data.write(bytes.as_ptr().cast());
            len.write(bytes.len());
        }
        // SAFETY: `from` is null or valid for `from_capacity` bytes (contract).
        unsafe { write_address(sender, from, from_capacity) }
    })
}

/// Gives back the datagram `nicmsg_lm_dgram_recv_lent` lent (the next call would anyway).
///
/// # Safety
/// Valid handle; the bytes lent are not read afterwards.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_give_back(socket: *mut NicmsgLmDgram) -> c_int {
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    state(lock).socket();
    NICMSG_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::NICMSG_ERR_TRUNCATE;
    use crate::capi_dgram::NICMSG_ADDRESS_MAX;

    /// A socket on loopback (by copy: no Ethernet interface there), any free port, and its
    /// address as C text.
    fn bound() -> (*mut NicmsgLmDgram, [c_char; NICMSG_ADDRESS_MAX]) {
        let mut socket = std::ptr::null_mut();
        let mut text = [0 as c_char; NICMSG_ADDRESS_MAX];
        // SAFETY: the address is NUL-terminated; `socket` and `text` are locals.
        unsafe {
            assert_eq!(
                nicmsg_lm_dgram_bind(c"127.0.0.1:0".as_ptr(), &mut socket),
                NICMSG_SUCCESS
            );
            assert_eq!(
                nicmsg_lm_dgram_local_address(socket, text.as_mut_ptr(), text.len()),
                NICMSG_SUCCESS
            );
            assert_eq!(nicmsg_lm_dgram_places(socket), 0, "loopback: by copy");
        }
        (socket, text)
    }

    #[test]
    fn datagrams_are_lent_copied_and_truncated_as_documented() {
        let (server, address) = bound();
        let (client, client_address) = bound();
        let shared = client as usize;
        let sender = std::thread::spawn(move || {
            let client = shared as *mut NicmsgLmDgram;
            let to = address;
            // SAFETY: the client stays open until this thread is joined; the buffers are
            // locals.
            unsafe {
                for datagram in [&b"hello"[..], &[7u8; 5000][..], b"tail"] {
                    let code = nicmsg_lm_dgram_send_to(
                        client,
                        datagram.as_ptr().cast(),
                        datagram.len(),
                        to.as_ptr(),
                    );
                    assert_eq!(code, NICMSG_SUCCESS);
                }
            }
        });
        let (mut data, mut len) = (std::ptr::null(), 0usize);
        let mut from = [0 as c_char; NICMSG_ADDRESS_MAX];
        let mut buffer = [0u8; 16];
        // SAFETY: the handles are live until closed; the buffers are locals of the sizes
        // given.
        unsafe {
            let lent =
                nicmsg_lm_dgram_recv_lent(server, &mut data, &mut len, from.as_mut_ptr(), 64);
            assert_eq!(lent, NICMSG_SUCCESS);
            assert_eq!(std::slice::from_raw_parts(data.cast::<u8>(), len), b"hello");
            let sender_text = std::ffi::CStr::from_ptr(from.as_ptr());
            let client_text = std::ffi::CStr::from_ptr(client_address.as_ptr());
            assert_eq!(sender_text, client_text);
            let (out, room) = (buffer.as_mut_ptr().cast(), buffer.len());
            let cut =
                nicmsg_lm_dgram_recv_from(server, out, room, &mut len, std::ptr::null_mut(), 0);
            assert_eq!(
                (cut, len),
                (NICMSG_ERR_TRUNCATE, 5000),
                "consumed, reported"
            );
            let got =
                nicmsg_lm_dgram_recv_from(server, out, room, &mut len, std::ptr::null_mut(), 0);
            assert_eq!((got, &buffer[..len]), (NICMSG_SUCCESS, &b"tail"[..]));
            sender.join().unwrap();
            assert_eq!(nicmsg_lm_dgram_give_back(server), NICMSG_SUCCESS);
            assert_eq!(nicmsg_lm_dgram_close(client), NICMSG_SUCCESS);
            assert_eq!(nicmsg_lm_dgram_close(server), NICMSG_SUCCESS);
            assert_eq!(nicmsg_lm_dgram_close(server), NICMSG_ERR_ARG, "closed once");
            assert_eq!(nicmsg_lm_dgram_places(server), NICMSG_ERR_ARG);
        }
    }
}

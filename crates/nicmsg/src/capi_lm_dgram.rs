//! The C ABI of the datagram socket over LM (`include/nicmsg.h`, "Datagram sockets over LM"):
//! the operations of [`crate::lm_dgram::LmDgramSocket`] with C types, addresses as text like
//! the engine's datagram sockets (`capi_dgram.rs`). A datagram lent by
//! `nicmsg_lm_dgram_recv_lent` stays lent until the next call on the socket (or
//! `nicmsg_lm_dgram_give_back`). Same contract as the rest of the C ABI: null pointers and bad
//! arguments return `NICMSG_ERR_ARG`, a second thread inside a call on the same socket
//! `NICMSG_ERR_BUSY`, and nothing panics across the boundary.

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, PoisonError};

use crate::capi::{guard, or_return, NICMSG_ERR_ARG, NICMSG_SUCCESS};
use crate::capi_dgram::{
    bind_handle, close_handle, enter, local_address_of, receive_into, send_arguments, sender_room,
    write_address, DgramHandle,
};
use crate::lm_dgram::{LmDatagram, LmDgramSocket};

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

/// An LM datagram socket handle. The state sits behind a lock as well as the turn flag: the
/// turn makes each call exclusive, so the lock is never contended (it makes the state's
/// mutation plain safe Rust).
pub type NicmsgLmDgram = DgramHandle<Mutex<LmState>>;

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
    unsafe {
        bind_handle(address_text, socket, |address| {
            let bound = LmDgramSocket::bind(address)?;
            let local = bound.local_addr();
            let state = LmState {
                socket: bound,
                lent: None,
            };
            Ok((Mutex::new(state), local))
        })
    }
}

/// Closes the socket; the handle stays allocated, and every later call with it is
/// `NICMSG_ERR_ARG`.
///
/// # Safety
/// `socket` is null or comes from `nicmsg_lm_dgram_bind`.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_close(socket: *mut NicmsgLmDgram) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { close_handle(socket) }
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
    unsafe { local_address_of(socket, text, capacity) }
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
    let Some((to, data)) = (unsafe { send_arguments(buf, len, address_text) }) else {
        return NICMSG_ERR_ARG;
    };
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    guard(|| state(lock).socket().send_to(data, to))
}

/// Starts sending `len` bytes at `buf` (copied) as one datagram to `address` and returns at
/// once with `*id`, for `nicmsg_lm_dgram_wait_sent`; while the socket has 64 sends in flight
/// (32 to one receiver) it first makes progress until one finishes. Datagrams in flight at
/// once may arrive in any order.
///
/// # Safety
/// Valid handle; `buf` valid for reading `len` bytes; `address` NUL-terminated; `id` valid
/// for writing.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_isend_to(
    socket: *mut NicmsgLmDgram,
    buf: *const c_void,
    len: usize,
    address_text: *const c_char,
    id: *mut u64,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some((to, data)) = (unsafe { send_arguments(buf, len, address_text) }) else {
        return NICMSG_ERR_ARG;
    };
    if id.is_null() {
        return NICMSG_ERR_ARG;
    }
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    guard(|| {
        let started = state(lock).socket().isend_to(data, to)?;
        // SAFETY: checked not null above; valid for writing by the caller's contract.
        unsafe { id.write(started.as_raw()) };
        Ok(())
    })
}

/// Waits until the send `id` (`nicmsg_lm_dgram_isend_to`) is delivered (0) or has failed
/// (`NICMSG_ERR_PEER_UNREACHABLE`); an id whose outcome was taken already, or never handed
/// out, is `NICMSG_ERR_BUFFER`.
///
/// # Safety
/// Valid handle.
#[no_mangle]
pub unsafe extern "C" fn nicmsg_lm_dgram_wait_sent(socket: *mut NicmsgLmDgram, id: u64) -> c_int {
    // SAFETY: the caller's contract.
    let (lock, _turn) = or_return!(unsafe { enter(socket) });
    guard(|| {
        state(lock)
            .socket()
            .wait_sent(crate::lm_dgram::LmSendId::from_raw(id))
            .1
    })
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
    // SAFETY: the caller's contract.
    unsafe {
        receive_into((buf, capacity), len, (from, from_capacity), |buffer| {
            state(lock).socket().recv_from(buffer)
        })
    }
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
        let (socket, text) = crate::capi_dgram::tests::bound_with(nicmsg_lm_dgram_bind);
        // SAFETY: a live handle.
        let places = unsafe { nicmsg_lm_dgram_places(socket) };
        assert_eq!(places, 0, "loopback: by copy");
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

    /// Sends that return at once: each is waited for once, delivered; the datagrams arrive,
    /// each once (in any order); an id waited for already, and a missing id, are refused.
    #[test]
    fn sends_that_do_not_wait_are_waited_for_by_id() {
        let (server, address) = bound();
        let (client, _) = bound();
        let shared = client as usize;
        let sender = std::thread::spawn(move || {
            let client = shared as *mut NicmsgLmDgram;
            let to = address;
            let datagrams: [&[u8]; 3] = [b"one", &[9u8; 3000], b"three"];
            // SAFETY: the client stays open until this thread is joined; the buffers are
            // locals, and copied by the calls.
            unsafe {
                let mut ids = [0u64; 3];
                for (datagram, id) in datagrams.iter().zip(&mut ids) {
                    let code = nicmsg_lm_dgram_isend_to(
                        client,
                        datagram.as_ptr().cast(),
                        datagram.len(),
                        to.as_ptr(),
                        id,
                    );
                    assert_eq!(code, NICMSG_SUCCESS);
                }
                let missing_id = nicmsg_lm_dgram_isend_to(
                    client,
                    datagrams[0].as_ptr().cast(),
                    1,
                    to.as_ptr(),
                    std::ptr::null_mut(),
                );
                assert_eq!(missing_id, NICMSG_ERR_ARG);
                for id in ids {
                    assert_eq!(nicmsg_lm_dgram_wait_sent(client, id), NICMSG_SUCCESS);
                }
                let again = nicmsg_lm_dgram_wait_sent(client, ids[0]);
                assert_eq!(again, crate::capi::NICMSG_ERR_BUFFER, "waited for once");
            }
        });
        let mut lengths = Vec::new();
        let mut buffer = [0u8; 4096];
        // SAFETY: the handles are live until closed; the buffer is a local of the size given.
        unsafe {
            for _ in 0..3 {
                let mut len = 0usize;
                let (out, room) = (buffer.as_mut_ptr().cast(), buffer.len());
                let got =
                    nicmsg_lm_dgram_recv_from(server, out, room, &mut len, std::ptr::null_mut(), 0);
                assert_eq!(got, NICMSG_SUCCESS);
                lengths.push(len);
            }
            sender.join().unwrap();
            assert_eq!(nicmsg_lm_dgram_close(client), NICMSG_SUCCESS);
            assert_eq!(nicmsg_lm_dgram_close(server), NICMSG_SUCCESS);
        }
        lengths.sort_unstable();
        assert_eq!(lengths, [3, 5, 3000]);
    }
}

/*
 * nicmsg: reliable zero-copy messaging with MPI-style semantics over Ethernet.
 *
 * Contract (as in MPI): a buffer passed to a non-blocking call stays valid and untouched until
 * its request completes; every request is completed (wait/test) before nicmsg_finalize. All
 * functions return a result code (NICMSG_SUCCESS or an error below); nicmsg_error_string()
 * describes it. Build: `cargo build --release -p nicmsg`, then, in the repository's root,
 * `cc prog.c $(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg) -o prog`
 * (an absolute PKG_CONFIG_PATH, so the program finds libnicmsg.so from any directory).
 */
#ifndef NICMSG_H
#define NICMSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h> /* struct iovec, for nicmsg_isendv and nicmsg_irecvv */

#ifdef __cplusplus
extern "C" {
#endif

#define NICMSG_ANY_SOURCE UINT32_MAX
/* Any tag of the application's. The library's own messages (a barrier's) travel in a matching
 * context of their own: no receive or probe, whatever its source and tag, ever sees them. */
#define NICMSG_ANY_TAG UINT32_MAX
/* Largest tag. */
#define NICMSG_TAG_UB 2147483647u
/* *index of nicmsg_waitany when no request was active (MPI_UNDEFINED). */
#define NICMSG_UNDEFINED SIZE_MAX
/* `program` of nicmsg_program_output: every program's values. */
#define NICMSG_ALL_PROGRAMS UINT32_MAX
/* Most pieces of a scatter/gather message (nicmsg_isendv, nicmsg_irecvv). */
#define NICMSG_IOV_MAX 16
/* Room for a socket address as text with its NUL ("10.0.0.2:7000", "[fd00::2]:7000"). */
#define NICMSG_ADDRESS_MAX 64

enum nicmsg_result {
    NICMSG_SUCCESS = 0,
    NICMSG_ERR_TRUNCATE = 1,          /* receive buffer shorter than the message; nothing written */
    NICMSG_ERR_PEER_UNREACHABLE = 2,  /* the peer is gone: its process ended (its host refused
                                         frames to it) or it answered nothing for
                                         NICMSG_PEER_TIMEOUT (10 s) while awaited; never
                                         because it computes without calling the library */
    NICMSG_ERR_CANCELLED = 3,         /* cancelled: the operation did not happen */
    NICMSG_ERR_RANK = 4,              /* rank outside the job */
    NICMSG_ERR_TABLE_FULL = 5,        /* too many outstanding operations (NICMSG_SLOTS): refused
                                         when posted, never after; complete some and retry */
    NICMSG_ERR_BUFFER = 6,            /* more than NICMSG_IOV_MAX pieces, a request that
                                         completed already, memory outside a shared segment,
                                         or an address longer than the caller's buffer */
    NICMSG_ERR_TAG = 9,               /* tag above NICMSG_TAG_UB */
    NICMSG_ERR_NOT_INITIALISED = 10,
    NICMSG_ERR_BOOTSTRAP = 11,        /* could not join the job (details on stderr) */
    NICMSG_ERR_CONFIG = 12,           /* invalid NICMSG_* setting (the variable, the value and
                                         what it accepts on stderr) */
    NICMSG_ERR_IO = 13,               /* a system call failed */
    NICMSG_ERR_ARG = 14,              /* null pointer or invalid argument (for the programs'
                                         segments, locks and flags, what was wrong is on
                                         stderr) */
    NICMSG_ERR_PENDING = 15,          /* nicmsg_finalize with requests outstanding */
    NICMSG_ERR_INTERNAL = 16,         /* the engine stopped (a bug in nicmsg): pending
                                         operations cannot complete */
    NICMSG_ERR_PANIC = 17,            /* a panic inside the library was caught at this
                                         boundary (a bug in nicmsg; its message is on
                                         stderr): the call did not complete, and the
                                         communicator may be unusable */
    NICMSG_ERR_PROGRAM = 18,          /* an engine refused a request about its PANIC programs
                                         (module rejected, no such program, turned off, a
                                         trap): the reason is on stderr */
    NICMSG_ERR_BUSY = 19              /* another thread is inside a call on the same
                                         communicator (or one of its requests) or socket:
                                         nothing was done (see "Threads" below) */
};

/* Threads: a communicator, with its requests, is used by one thread at a time (any thread;
 * MPI_THREAD_SERIALIZED), and so is a datagram socket; different communicators and sockets are
 * independent. A call made while another thread is inside a call on the same one returns
 * NICMSG_ERR_BUSY at once and does nothing (so a thread blocked in nicmsg_wait or
 * nicmsg_dgram_recv_from keeps the others out until it returns). nicmsg_comm_rank and
 * nicmsg_comm_size may be called from any thread at any time. */
typedef struct NicmsgComm nicmsg_comm;
typedef struct NicmsgRequest nicmsg_request;

/* What a completed operation reports. A failed one names the peer it failed with: the
 * unreachable rank, else the destination of a send or the source a receive was posted with
 * (NICMSG_ANY_SOURCE if any); its tag is the one it was posted with. */
typedef struct nicmsg_status {
    uint32_t source; /* sender of a received message (destination for a send) */
    uint32_t tag;
    uint64_t len;    /* message length in bytes (also on truncation) */
    int error;       /* the operation's result code */
} nicmsg_status;

/* Joins the job described by the environment (nicmsg run, mpirun, srun). */
int nicmsg_init(nicmsg_comm **comm);
/* Stops the engine and frees the communicator (NICMSG_ERR_PENDING while a request is
 * outstanding). The handle itself stays allocated: a later call with it, a second finalize
 * too, returns NICMSG_ERR_ARG. */
int nicmsg_finalize(nicmsg_comm *comm);
int nicmsg_comm_rank(const nicmsg_comm *comm, uint32_t *rank);
int nicmsg_comm_size(const nicmsg_comm *comm, uint32_t *size);

/* A send of at most 256 bytes completes once the engine has copied it and started it (MPI's
 * eager send), before the peer acknowledges it; a longer one when the peer holds it all. A
 * send completes with success also when the receive that took it was too short: the receiver
 * alone gets NICMSG_ERR_TRUNCATE (as MPI). A send to a peer already declared unreachable is
 * refused at once with NICMSG_ERR_PEER_UNREACHABLE; a receive naming such a peer still gets
 * the messages it sent before, then fails with it. */
int nicmsg_isend(nicmsg_comm *comm, const void *buf, size_t len, uint32_t dest, uint32_t tag,
                 nicmsg_request **request);
int nicmsg_irecv(nicmsg_comm *comm, void *buf, size_t len, uint32_t source, uint32_t tag,
                 nicmsg_request **request);
/* Scatter/gather: the message sent is the concatenation of the count pieces of iov, in order;
 * a received message fills the pieces in order (its length is the pieces' total; a longer
 * message is NICMSG_ERR_TRUNCATE). Messages are the same on the wire, so a scattered send may
 * be received into one buffer and the other way round. count may be 0 (an empty message; iov
 * may then be NULL); more than NICMSG_IOV_MAX pieces is NICMSG_ERR_BUFFER; iov NULL with a
 * count, or a piece of non-zero length at NULL, is NICMSG_ERR_ARG. The iov array itself is read
 * during the call only; the pieces are buffers as for isend/irecv (valid and untouched until
 * the request completes), and a receive's pieces must not overlap.
 * The pieces are POSIX's struct iovec (<sys/uio.h>) rather than a type of nicmsg's: programs
 * already hold their scattered data in them for readv/writev/sendmsg, and libfabric's
 * fi_sendv/fi_recvv take them too, so an array passes through unconverted. As for writev, a
 * send's iov_base is not const; the library never writes through it. */
int nicmsg_isendv(nicmsg_comm *comm, const struct iovec *iov, size_t count, uint32_t dest,
                  uint32_t tag, nicmsg_request **request);
int nicmsg_irecvv(nicmsg_comm *comm, const struct iovec *iov, size_t count, uint32_t source,
                  uint32_t tag, nicmsg_request **request);
/* Completing calls free the request and set *request to NULL. */
int nicmsg_wait(nicmsg_request **request, nicmsg_status *status);
int nicmsg_test(nicmsg_request **request, int *flag, nicmsg_status *status);
int nicmsg_waitall(size_t count, nicmsg_request **requests, nicmsg_status *statuses);
/* Returns once one of the non-NULL requests completed, with *index set to it; with none (or
 * count 0), returns NICMSG_SUCCESS at once with *index = NICMSG_UNDEFINED (as MPI). Waits
 * spin briefly, then sleep: a long wait burns no core. waitall on all-NULL succeeds. Should
 * the engine stop, a request completes with NICMSG_ERR_INTERNAL, *index naming it. */
int nicmsg_waitany(size_t count, nicmsg_request **requests, size_t *index, nicmsg_status *status);
/* Asks for the operation to be cancelled (MPI_Cancel); complete the request with wait or test
 * as usual. Two outcomes, which the status tells (nicmsg_test_cancelled):
 *  - cancelled: wait returns NICMSG_ERR_CANCELLED and status.error says so. The operation did
 *    not happen: a receive or probe got nothing; a send's message is withdrawn from its
 *    receiver and will never be delivered, whatever receives are posted later.
 *  - too late: the operation completes normally (a receive that had matched a message, a
 *    send whose message a receive had matched or that had completed, a short send already
 *    reported complete). Cancelling a send on the wire asks its receiver: wait may then take a
 *    round trip, never longer than the peer's liveness. */
int nicmsg_cancel(nicmsg_request *request);
/* *flag = 1 if status is that of a cancelled operation, else 0 (MPI_Test_cancelled). */
int nicmsg_test_cancelled(const nicmsg_status *status, int *flag);

int nicmsg_send(nicmsg_comm *comm, const void *buf, size_t len, uint32_t dest, uint32_t tag);
int nicmsg_recv(nicmsg_comm *comm, void *buf, size_t len, uint32_t source, uint32_t tag,
                nicmsg_status *status);
int nicmsg_iprobe(nicmsg_comm *comm, uint32_t source, uint32_t tag, int *flag, nicmsg_status *status);
int nicmsg_probe(nicmsg_comm *comm, uint32_t source, uint32_t tag, nicmsg_status *status);
int nicmsg_barrier(nicmsg_comm *comm);

/* --- Programs (PANIC): user programs in the engines, written in PDL (docs/pdl.md) and
 *     compiled with `nicmsg pdl compile`. Requests name a rank (this one included) and are
 *     answered by that rank's engine; a refusal returns NICMSG_ERR_PROGRAM, its reason on
 *     stderr. See docs/vm.md. */

/* Loads a module into the engine of `rank` (replacing a program of the same id); *program
 * (if not NULL) receives its id, that of its name. Not started: see nicmsg_program_run. */
int nicmsg_program_load(nicmsg_comm *comm, uint32_t rank, const void *module, size_t len,
                        uint32_t *program);
/* The same under an explicit id (below 2^31), the number other programs send to. */
int nicmsg_program_load_as(nicmsg_comm *comm, uint32_t rank, uint32_t id, const void *module,
                           size_t len);
/* Starts a program (its initialisation block); unloads one. */
int nicmsg_program_run(nicmsg_comm *comm, uint32_t rank, uint32_t program);
int nicmsg_program_unload(nicmsg_comm *comm, uint32_t rank, uint32_t program);
/* Sends `len` bytes (at most 4096) to `program` on the engine of `rank` as `trigger`. */
int nicmsg_program_send(nicmsg_comm *comm, uint32_t rank, uint32_t program, uint16_t trigger,
                        const void *payload, size_t len);
/* Waits for a program's REPLY (or PASS) with `trigger`: its bytes into buf; *origin (the rank
 * it came from), *program (the sender), *received (bytes written), each if not NULL. */
int nicmsg_program_receive(nicmsg_comm *comm, uint16_t trigger, void *buf, size_t len,
                           uint32_t *origin, uint32_t *program, size_t *received);
/* The programs loaded on the engine of `rank`, one line each, NUL-terminated, cut to
 * `capacity` bytes. */
int nicmsg_program_list(nicmsg_comm *comm, uint32_t rank, char *text, size_t capacity);
/* Takes up to `capacity` values programs DISPLAYed on the engine of `rank` (`program`'s, or
 * every program's with NICMSG_ALL_PROGRAMS), oldest first, into values[] and (if not NULL)
 * programs[]; *count says how many. This rank's engine keeps the others for the next call;
 * another rank's engine sends what one answer holds (about 120 values) and those beyond
 * `capacity` are lost: give it room for 128. */
int nicmsg_program_output(nicmsg_comm *comm, uint32_t rank, uint32_t program, int64_t *values,
                          uint32_t *programs, size_t capacity, size_t *count);
/* Shares `len` bytes (at least 1; 0 is NICMSG_ERR_ARG) with this rank's programs as segment
 * `id` (0 to 255) until unshared: DELIVER writes it, GET reads it. unshare returns once no copy
 * of the engine is under way. */
int nicmsg_segment_share(nicmsg_comm *comm, uint16_t id, void *memory, size_t len);
int nicmsg_segment_unshare(nicmsg_comm *comm, uint16_t id);
/* The paper's locks and flags (0 to 63 per program): the host sets locks and clears flags,
 * programs clear locks (CLEARLOCK) and set flags (SETFLAG). wait_flag runs an inline engine
 * while it waits and fails if the engine stops. */
int nicmsg_program_set_lock(nicmsg_comm *comm, uint32_t program, uint8_t lock);
int nicmsg_program_flag(nicmsg_comm *comm, uint32_t program, uint8_t flag, int *set);
int nicmsg_program_clear_flag(nicmsg_comm *comm, uint32_t program, uint8_t flag);
int nicmsg_program_wait_flag(nicmsg_comm *comm, uint32_t program, uint8_t flag);

/* --- Datagram sockets: reliable datagrams addressed by IP address and port, with no job, no
 *     launcher and no ranks (a server binds, any client sends). Every datagram arrives once,
 *     whole, in order per sender, or its send fails (NICMSG_ERR_PEER_UNREACHABLE: the peer
 *     stopped answering or restarted). Up to 2^30 bytes each. The engine runs on its own
 *     thread (NICMSG_ENGINE), keeps state for NICMSG_DGRAM_PEERS peers at once and reuses a
 *     quiet peer's. Addresses are text: "ip:port". See docs/dgram.md. */
typedef struct NicmsgDgram nicmsg_dgram;

/* Binds to `address` ("0.0.0.0:7000"; port 0: any free port). */
int nicmsg_dgram_bind(const char *address, nicmsg_dgram **socket);
/* Stops the socket's engine and frees it; a later call with the handle, a second close too,
 * returns NICMSG_ERR_ARG. */
int nicmsg_dgram_close(nicmsg_dgram *socket);
/* The socket's own address as text (NICMSG_ADDRESS_MAX bytes always suffice). */
int nicmsg_dgram_local_address(const nicmsg_dgram *socket, char *text, size_t capacity);
/* Sends `len` bytes as one datagram to `address`; returns once delivered (a short datagram:
 * once the engine holds a copy). */
int nicmsg_dgram_send_to(nicmsg_dgram *socket, const void *buf, size_t len, const char *address);
/* Waits for the next datagram from anyone: its bytes into buf, *len its length, `from` (if not
 * NULL) its sender as text. A datagram longer than `capacity` is consumed and reported as
 * NICMSG_ERR_TRUNCATE with *len its length (size buffers with nicmsg_dgram_peek_from). A
 * `from` of fewer than NICMSG_ADDRESS_MAX bytes is NICMSG_ERR_ARG, refused before any datagram
 * is taken (here and in nicmsg_dgram_peek_from). */
int nicmsg_dgram_recv_from(nicmsg_dgram *socket, void *buf, size_t capacity, size_t *len,
                           char *from, size_t from_capacity);
/* Waits until a datagram is there: *len its length, `from` (if not NULL) its sender; the next
 * nicmsg_dgram_recv_from takes it. */
int nicmsg_dgram_peek_from(nicmsg_dgram *socket, size_t *len, char *from, size_t from_capacity);

/* --- Datagram sockets over LM: the same kind of socket on LM's zero-copy path (docs/lm.md,
 *     docs/dgram.md). A datagram of two frames or more is placed when its receiver admits it:
 *     the NIC (the kernel, on AF_XDP's copy mode) writes it where the application reads it,
 *     and no byte is copied in user space. Placing needs an IPv4 address of an Ethernet
 *     interface and the right to attach XDP programs (root, or CAP_BPF and CAP_NET_ADMIN);
 *     elsewhere every datagram comes by copy. Up to 64 MiB each. Progress is made inside the
 *     socket's calls, on the calling thread. Both ends must be LM sockets: they do not talk to
 *     nicmsg_dgram sockets. Unreachable, restarted or forgetful peers fail a send with
 *     NICMSG_ERR_PEER_UNREACHABLE. */
typedef struct NicmsgLmDgram nicmsg_lm_dgram;

/* Binds to `address` ("10.0.0.1:7000", IPv4; port 0: any free port). */
int nicmsg_lm_dgram_bind(const char *address, nicmsg_lm_dgram **socket);
/* Closes the socket; a later call with the handle, a second close too, is NICMSG_ERR_ARG. */
int nicmsg_lm_dgram_close(nicmsg_lm_dgram *socket);
int nicmsg_lm_dgram_local_address(const nicmsg_lm_dgram *socket, char *text, size_t capacity);
/* 1 if datagrams to this socket are placed, 0 if they all come by copy. */
int nicmsg_lm_dgram_places(nicmsg_lm_dgram *socket);
/* Sends `len` bytes as one datagram to `address`; returns once delivered. */
int nicmsg_lm_dgram_send_to(nicmsg_lm_dgram *socket, const void *buf, size_t len,
                            const char *address);
/* Starts sending `len` bytes (copied) as one datagram to `address` and returns at once with
 * *id; while 64 sends are in flight (32 to one receiver) it first waits for one to finish.
 * Datagrams in flight at once may arrive in any order. */
int nicmsg_lm_dgram_isend_to(nicmsg_lm_dgram *socket, const void *buf, size_t len,
                             const char *address, uint64_t *id);
/* Waits until the send `id` is delivered (0) or failed (NICMSG_ERR_PEER_UNREACHABLE); an id
 * already waited for, or never handed out, is NICMSG_ERR_BUFFER. */
int nicmsg_lm_dgram_wait_sent(nicmsg_lm_dgram *socket, uint64_t id);
/* As nicmsg_dgram_recv_from: the next datagram copied into buf; a longer one is consumed and
 * reported as NICMSG_ERR_TRUNCATE with *len its length. */
int nicmsg_lm_dgram_recv_from(nicmsg_lm_dgram *socket, void *buf, size_t capacity, size_t *len,
                              char *from, size_t from_capacity);
/* The next datagram, lent where it was received: *data and *len its bytes (a placed one in the
 * region it landed in), `from` (if not NULL) its sender. Valid until the next call on the
 * socket, which gives it back, or nicmsg_lm_dgram_give_back. */
int nicmsg_lm_dgram_recv_lent(nicmsg_lm_dgram *socket, const void **data, size_t *len,
                              char *from, size_t from_capacity);
int nicmsg_lm_dgram_give_back(nicmsg_lm_dgram *socket);

/* A static description of a result code ("unknown result code" for a value no code has). */
const char *nicmsg_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif /* NICMSG_H */

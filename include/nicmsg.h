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

#ifdef __cplusplus
extern "C" {
#endif

#define NICMSG_ANY_SOURCE UINT32_MAX
#define NICMSG_ANY_TAG UINT32_MAX
/* Largest user tag; higher tags are reserved for the library. */
#define NICMSG_TAG_UB 2147483647u

enum nicmsg_result {
    NICMSG_SUCCESS = 0,
    NICMSG_ERR_TRUNCATE = 1,          /* receive buffer shorter than the message; nothing written */
    NICMSG_ERR_PEER_UNREACHABLE = 2,  /* the peer stopped answering after the retry limit */
    NICMSG_ERR_CANCELLED = 3,
    NICMSG_ERR_RANK = 4,              /* rank outside the job */
    NICMSG_ERR_TABLE_FULL = 5,        /* too many outstanding operations */
    NICMSG_ERR_BUFFER = 6,
    NICMSG_ERR_TAG = 9,               /* tag above NICMSG_TAG_UB */
    NICMSG_ERR_NOT_INITIALISED = 10,
    NICMSG_ERR_BOOTSTRAP = 11,        /* could not join the job (details on stderr) */
    NICMSG_ERR_CONFIG = 12,           /* invalid NICMSG_* setting */
    NICMSG_ERR_IO = 13,
    NICMSG_ERR_ARG = 14,              /* null pointer or invalid argument */
    NICMSG_ERR_PENDING = 15,          /* nicmsg_finalize with requests outstanding */
    NICMSG_ERR_INTERNAL = 16
};

typedef struct NicmsgComm nicmsg_comm;
typedef struct NicmsgRequest nicmsg_request;

typedef struct nicmsg_status {
    uint32_t source; /* sender of a received message (destination for a send) */
    uint32_t tag;
    uint64_t len;    /* message length in bytes (also on truncation) */
    int error;       /* the operation's result code */
} nicmsg_status;

/* Joins the job described by the environment (nicmsg run, mpirun, srun). */
int nicmsg_init(nicmsg_comm **comm);
int nicmsg_finalize(nicmsg_comm *comm);
int nicmsg_comm_rank(const nicmsg_comm *comm, uint32_t *rank);
int nicmsg_comm_size(const nicmsg_comm *comm, uint32_t *size);

/* A send of at most 256 bytes completes once the engine has copied it and started it (MPI's
 * eager send), before the peer acknowledges it; a longer one when the peer holds it all. */
int nicmsg_isend(nicmsg_comm *comm, const void *buf, size_t len, uint32_t dest, uint32_t tag,
                 nicmsg_request **request);
int nicmsg_irecv(nicmsg_comm *comm, void *buf, size_t len, uint32_t source, uint32_t tag,
                 nicmsg_request **request);
/* Completing calls free the request and set *request to NULL. */
int nicmsg_wait(nicmsg_request **request, nicmsg_status *status);
int nicmsg_test(nicmsg_request **request, int *flag, nicmsg_status *status);
int nicmsg_waitall(size_t count, nicmsg_request **requests, nicmsg_status *statuses);
int nicmsg_waitany(size_t count, nicmsg_request **requests, size_t *index, nicmsg_status *status);
int nicmsg_cancel(nicmsg_request *request);

int nicmsg_send(nicmsg_comm *comm, const void *buf, size_t len, uint32_t dest, uint32_t tag);
int nicmsg_recv(nicmsg_comm *comm, void *buf, size_t len, uint32_t source, uint32_t tag,
                nicmsg_status *status);
int nicmsg_iprobe(nicmsg_comm *comm, uint32_t source, uint32_t tag, int *flag, nicmsg_status *status);
int nicmsg_probe(nicmsg_comm *comm, uint32_t source, uint32_t tag, nicmsg_status *status);
int nicmsg_barrier(nicmsg_comm *comm);

const char *nicmsg_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif /* NICMSG_H */

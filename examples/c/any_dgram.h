/* The C datagram examples' socket: nicmsg's datagram socket over the engine (the default), or
 * over LM's zero-copy path (--lm: nicmsg_lm_dgram, placed where the address is an Ethernet
 * interface's and the process may attach XDP programs). The two speak different frames: both
 * sides of a transfer choose alike. Same choice as the Rust examples'
 * (crates/nicmsg/examples/support/any_dgram.rs). */
#ifndef ANY_DGRAM_H
#define ANY_DGRAM_H

#include <nicmsg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    nicmsg_dgram *engine;
    nicmsg_lm_dgram *lm;
    /* The engine's datagrams are copied here by any_recv_next (grown to fit). */
    unsigned char *scratch;
    size_t scratch_capacity;
} any_dgram;

static int any_bind(any_dgram *s, int lm, const char *address) {
    memset(s, 0, sizeof *s);
    return lm ? nicmsg_lm_dgram_bind(address, &s->lm) : nicmsg_dgram_bind(address, &s->engine);
}

static int any_close(any_dgram *s) {
    free(s->scratch);
    return s->lm ? nicmsg_lm_dgram_close(s->lm) : nicmsg_dgram_close(s->engine);
}

/* Which path runs, for the examples' first line. */
static const char *any_path(any_dgram *s) {
    if (!s->lm) return "engine";
    return nicmsg_lm_dgram_places(s->lm) == 1 ? "LM, placing" : "LM, by copy";
}

static int any_local_address(any_dgram *s, char *text, size_t capacity) {
    return s->lm ? nicmsg_lm_dgram_local_address(s->lm, text, capacity)
                 : nicmsg_dgram_local_address(s->engine, text, capacity);
}

static int any_send_to(any_dgram *s, const void *buf, size_t len, const char *to) {
    return s->lm ? nicmsg_lm_dgram_send_to(s->lm, buf, len, to)
                 : nicmsg_dgram_send_to(s->engine, buf, len, to);
}

static int any_recv_from(any_dgram *s, void *buf, size_t capacity, size_t *len, char *from,
                         size_t from_capacity) {
    return s->lm ? nicmsg_lm_dgram_recv_from(s->lm, buf, capacity, len, from, from_capacity)
                 : nicmsg_dgram_recv_from(s->engine, buf, capacity, len, from, from_capacity);
}

/* The next datagram's bytes: over LM lent where it landed (no copy), on the engine copied into
 * the socket's scratch buffer, sized by a peek. Valid until the next call on the socket. */
static int any_recv_next(any_dgram *s, const void **data, size_t *len, char *from,
                         size_t from_capacity) {
    if (s->lm) return nicmsg_lm_dgram_recv_lent(s->lm, data, len, from, from_capacity);
    size_t waiting;
    int rc = nicmsg_dgram_peek_from(s->engine, &waiting, NULL, 0);
    if (rc != NICMSG_SUCCESS) return rc;
    if (waiting > s->scratch_capacity || !s->scratch) {
        free(s->scratch);
        s->scratch_capacity = waiting ? waiting : 1;
        s->scratch = malloc(s->scratch_capacity);
        if (!s->scratch) return NICMSG_ERR_BUFFER;
    }
    *data = s->scratch;
    return nicmsg_dgram_recv_from(s->engine, s->scratch, s->scratch_capacity, len, from,
                                  from_capacity);
}

/* Whether `name` (a flag without a value) is among the arguments from `first` on. */
static int any_flag(int argc, char **argv, int first, const char *name) {
    for (int i = first; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

#endif

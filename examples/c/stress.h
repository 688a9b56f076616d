/* The machinery of the stress test (stress.c, its only user): options and where each rank is,
 * failure reports and the watchdog, the seeded plans, message content, requests in batches and
 * the checks of every completion, the completion styles, and the traffic plans several phases
 * share. Definitions, not just declarations: the test is one translation unit, split in two to
 * keep the phases readable. */
#ifndef NICMSG_STRESS_H
#define NICMSG_STRESS_H

#define _POSIX_C_SOURCE 200809L
#include <nicmsg.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What nicmsg_waitany reports when no request is active (MPI_UNDEFINED); the header will
 * define it. */
#ifndef NICMSG_UNDEFINED
#define NICMSG_UNDEFINED SIZE_MAX
#endif

#define ANY_SRC NICMSG_ANY_SOURCE
#define ANY_TAG NICMSG_ANY_TAG
#define KiB     ((size_t)1024)
#define MiB     (KiB * KiB)
/* The library's eager limit for jobs up to 32 ranks, and the credits a receiver gives each
 * sender (docs/protocol.md); the phases that test them use these sizes and counts. */
#define EAGER_LIMIT   (64 * KiB)
#define EAGER_CREDITS 8
#define SMALL_SEND    256 /* sends up to this size complete when started (nicmsg.h) */
#define HEADER        32  /* a message of at least this size starts with its identity */
#define GUARD         64  /* guard bytes on each side of every receive buffer */
#define GUARD_BYTE    0xA5
#define POISON_BYTE   0x5A        /* receive buffers are filled with this before posting */
#define MAGIC         0x5453524eu /* "NRST" */

/* ------------------------------------------------------------------------------------------
 * Options and global state
 * ------------------------------------------------------------------------------------------ */

static struct {
    uint64_t seed;
    unsigned rounds;
    size_t max_size;
    int verbose;
    unsigned timeout;
    double compute_seconds;
    unsigned progress;
    int keep_going;
    uint32_t phases; /* bit per phase */
} opt = {1, 40, 4 * MiB, 0, 300, 60.0, 10, 0, 0};

static nicmsg_comm *comm;
static uint32_t me = UINT32_MAX, np; /* me: unknown until nicmsg_init */
static unsigned failures;

/* Where this rank is, for failure messages and the watchdog (read in a signal handler). */
static const char *volatile where_phase = "init";
static volatile unsigned where_round;
static const char *volatile where_step = "starting";
static volatile long where_peer = -1;
static volatile unsigned where_timeout;

static struct {
    uint64_t messages, bytes, rounds, send_cancelled, send_cancel_delivered, recv_cancelled,
        recv_cancel_delivered, truncated, probes;
} count;

static void step(const char *what, long peer) {
    where_step = what;
    where_peer = peer;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* With --keep-going, each distinct check (its format) is printed this many times; how often it
 * failed in all is printed at the end. */
#define PRINTED_PER_CHECK 3
static struct {
    const char *fmt;
    unsigned times;
} failed_checks[64];

/* A check failed: say where, and stop (or go on with --keep-going, to see every kind of
 * failure of a phase; the exit status is non-zero either way). */
static void fail(const char *fmt, ...) {
    unsigned k = 0;
    while (k < 64 && failed_checks[k].fmt && failed_checks[k].fmt != fmt) k++;
    if (k < 64) {
        failed_checks[k].fmt = fmt;
        failed_checks[k].times++;
    }
    failures++;
    if (k < 64 && failed_checks[k].times > PRINTED_PER_CHECK && opt.keep_going) return;
    char text[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    char who[16] = "?";
    if (me != UINT32_MAX) snprintf(who, sizeof who, "%u", me);
    fprintf(stderr, "stress: FAIL rank %s, phase %s, round %u: %s (seed %llu)\n", who, where_phase,
            where_round, text, (unsigned long long)opt.seed);
    fflush(stderr);
    if (!opt.keep_going) exit(1);
}

/* With --keep-going: how often each kind of failure happened. */
static void print_failure_counts(void) {
    for (unsigned k = 0; k < 64 && failed_checks[k].fmt; k++)
        if (failed_checks[k].times > PRINTED_PER_CHECK)
            fprintf(stderr, "stress: rank %u: the check \"%.60s...\" failed %u times\n", me,
                    failed_checks[k].fmt, failed_checks[k].times);
}

/* A library call that must succeed for the test to go on at all. */
static void must(int rc, const char *call) {
    if (rc == NICMSG_SUCCESS) return;
    fail("%s returned %d (%s)", call, rc, nicmsg_error_string(rc));
    exit(1);
}
#define MUST(call) must((call), #call)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "stress: rank %u: out of memory (%zu bytes)\n", me, n);
        exit(1);
    }
    return p;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = xmalloc(n * size);
    memset(p, 0, n * size);
    return p;
}

/* ------------------------------------------------------------------------------------------
 * Watchdog: alarm() per phase; the handler uses only async-signal-safe calls.
 * ------------------------------------------------------------------------------------------ */

static void put_text(const char *s) {
    ssize_t ignored = write(2, s, strlen(s));
    (void)ignored;
}

static void put_number(unsigned long long v) {
    char digits[24];
    int i = sizeof digits;
    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    ssize_t ignored = write(2, digits + i, sizeof digits - (size_t)i);
    (void)ignored;
}

static void print_pending(void);

static void put_hex(uint32_t v) {
    char digits[10] = "0x";
    for (int i = 0; i < 8; i++) digits[2 + i] = "0123456789abcdef"[(v >> (28 - 4 * i)) & 15];
    ssize_t ignored = write(2, digits, sizeof digits);
    (void)ignored;
}

static void on_alarm(int signal_number) {
    (void)signal_number;
    put_text("stress: FAIL rank ");
    put_number(me);
    put_text(", phase ");
    put_text(where_phase);
    put_text(", round ");
    put_number(where_round);
    put_text(": WATCHDOG: no progress for ");
    put_number(where_timeout);
    put_text(" s; stuck in: ");
    put_text(where_step);
    if (where_peer >= 0) {
        put_text(" (peer rank ");
        put_number((unsigned long long)where_peer);
        put_text(")");
    }
    print_pending();
    put_text("\n");
    _exit(3);
}

static void arm_watchdog(unsigned seconds) {
    where_timeout = seconds;
    alarm(seconds);
}

/* ------------------------------------------------------------------------------------------
 * Seeded plans: splitmix64. plan_rng is the same on every rank (the job's plan); local_rng
 * differs per rank (this rank's own choices: posting order, completion style).
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    uint64_t state;
} rng_t;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t next(rng_t *r) {
    r->state += 0x9E3779B97F4A7C15ull;
    return mix64(r->state);
}

static uint32_t below(rng_t *r, uint32_t n) {
    return n ? (uint32_t)(next(r) % n) : 0;
}

static rng_t plan_rng(unsigned phase, unsigned round) {
    rng_t r = {mix64(opt.seed) ^ mix64(((uint64_t)phase << 32) | round)};
    return r;
}

static rng_t local_rng(unsigned phase, unsigned round) {
    rng_t r = plan_rng(phase, round);
    r.state ^= mix64(0x5EED0000ull + me);
    return r;
}

/* Tags: phase, round and a small number; all below NICMSG_TAG_UB. */
static uint32_t tag_of(unsigned phase, unsigned round, unsigned k) {
    return ((uint32_t)(phase + 1) << 26) | ((uint32_t)(round & 0x3FFFF) << 8) | (k & 0xFF);
}

static uint32_t tag_k(uint32_t tag) {
    return tag & 0xFF;
}

/* Sizes that sit on the library's boundaries: one frame, short-send limit, a 1500-byte MTU's
 * payload, eager limit, rendezvous; filled in by main() up to --max-size. */
static size_t sizes[16];
static unsigned nsizes;

static size_t clamp_size(size_t s) {
    return s > opt.max_size ? opt.max_size : s;
}

/* A size for a message: a boundary size, or log-uniform up to --max-size. */
static size_t pick_size(rng_t *r, size_t min) {
    size_t s;
    if (below(r, 10) < 4) {
        s = sizes[below(r, nsizes)];
    } else {
        unsigned bits = 0;
        while (bits < 63 && ((size_t)1 << (bits + 1)) <= opt.max_size) bits++;
        unsigned b = below(r, bits + 2);
        s = b == 0 ? 0 : ((size_t)1 << (b - 1)) + below(r, (uint32_t)((size_t)1 << (b - 1)));
    }
    s = clamp_size(s);
    return s < min ? min : s;
}

static size_t pick_between(rng_t *r, size_t lo, size_t hi) {
    hi = clamp_size(hi);
    return hi <= lo ? hi : lo + below(r, (uint32_t)(hi - lo + 1));
}

/* ------------------------------------------------------------------------------------------
 * Messages: content is a function of (source, destination, phase, round, seq); a message of
 * at least HEADER bytes starts with its identity, so a wildcard receive can tell which one it
 * got and the receiver can check the order of one sender's messages.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    uint32_t src, dst, phase, round, seq, tag;
    uint64_t len;
    int taken; /* receiver: received already */
} msg_t;

static uint64_t msg_key(const msg_t *m) {
    uint64_t k = mix64(opt.seed ^ 0xC0FFEEull);
    k = mix64(k ^ (((uint64_t)m->src << 32) | m->dst));
    k = mix64(k ^ (((uint64_t)m->phase << 32) | m->round));
    return mix64(k ^ m->seq);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void make_header(unsigned char h[HEADER], const msg_t *m) {
    put32(h, MAGIC);
    put32(h + 4, m->src);
    put32(h + 8, m->dst);
    put32(h + 12, m->seq);
    put32(h + 16, m->tag);
    put32(h + 20, (m->phase << 24) | (m->round & 0xFFFFFF));
    put32(h + 24, (uint32_t)m->len);
    put32(h + 28, (uint32_t)(m->len >> 32));
}

/* Byte i of the message: its header, then a word pattern keyed by the identity and position
 * (so a misplaced frame or another message's bytes show). */
static unsigned char expected_byte(const msg_t *m, uint64_t key, const unsigned char *h, size_t i) {
    if (m->len >= HEADER && i < HEADER) return h[i];
    uint64_t w = mix64(key + i / 8);
    return (unsigned char)(w >> (8 * (i % 8)));
}

static void fill_message(unsigned char *buf, const msg_t *m) {
    uint64_t key = msg_key(m);
    for (size_t i = 0; i < m->len; i += 8) {
        uint64_t w = mix64(key + i / 8);
        size_t n = m->len - i < 8 ? m->len - i : 8;
        for (size_t j = 0; j < n; j++) buf[i + j] = (unsigned char)(w >> (8 * j));
    }
    if (m->len >= HEADER) make_header(buf, m);
}

/* The first byte of buf[0..n) that differs from message m, or SIZE_MAX. Compared a pattern
 * word at a time: a 4 MiB message is checked in a few milliseconds. */
static size_t first_difference(const unsigned char *buf, size_t n, const msg_t *m) {
    uint64_t key = msg_key(m);
    unsigned char h[HEADER], word[8];
    make_header(h, m);
    size_t start = m->len >= HEADER ? HEADER : 0;
    for (size_t i = 0; i < start && i < n; i++)
        if (buf[i] != h[i]) return i;
    for (size_t i = start; i < n; i += 8) {
        uint64_t w = mix64(key + i / 8);
        size_t len = n - i < 8 ? n - i : 8;
        for (size_t j = 0; j < len; j++) word[j] = (unsigned char)(w >> (8 * j));
        if (memcmp(buf + i, word, len) != 0)
            for (size_t j = 0; j < len; j++)
                if (buf[i + j] != word[j]) return i + j;
    }
    return SIZE_MAX;
}

static const char *tag_text(uint32_t tag, char out[24]) {
    if (tag == ANY_TAG) return "ANY_TAG";
    snprintf(out, 24, "%#x", tag);
    return out;
}

static const char *rank_text(uint32_t rank, char out[24]) {
    if (rank == ANY_SRC) return "ANY_SOURCE";
    snprintf(out, 24, "%u", rank);
    return out;
}

static const char *describe_msg(const msg_t *m, char out[160]) {
    snprintf(out, 160, "message seq %u from rank %u to rank %u (tag %#x, %llu bytes)", m->seq,
             m->src, m->dst, m->tag, (unsigned long long)m->len);
    return out;
}

/* ------------------------------------------------------------------------------------------
 * Operations: a batch holds requests in one array (for waitall/waitany) and what each one
 * expects.
 * ------------------------------------------------------------------------------------------ */

enum kind { SEND, RECV };
enum expect {
    EXPECT_SUCCESS,
    EXPECT_TRUNCATE,
    EXPECT_CANCELLED,
    EXPECT_CANCELLED_OR_SUCCESS /* a cancelled operation: MPI allows either outcome */
};

typedef struct {
    int kind, expect;
    uint32_t peer, tag; /* as posted: destination, or the source and tag a receive accepts */
    size_t cap;         /* receive: buffer capacity; send: message length */
    unsigned char *mem, *buf;
    msg_t *msg;   /* the message sent, or the one a receive must get (NULL: any of cands) */
    msg_t *cands; /* receive identified by its header: the messages it may get */
    size_t ncands;
    msg_t *got; /* after completion: the message received */
    int done, rc;
    nicmsg_status st;
} op_t;

typedef struct {
    op_t *ops;
    nicmsg_request **reqs; /* reqs[i] is ops[i]'s request; NULL once completed */
    size_t n, cap;
} batch_t;

static const char *describe_op(const op_t *op, char out[200]) {
    char a[24], t[24];
    if (op->kind == SEND)
        snprintf(out, 200, "send to rank %u (tag %s, %zu bytes)", op->peer, tag_text(op->tag, t),
                 op->cap);
    else
        snprintf(out, 200, "receive from %s (tag %s, %zu-byte buffer)", rank_text(op->peer, a),
                 tag_text(op->tag, t), op->cap);
    return out;
}

/* The batch this rank is completing (or holds pending during a barrier), for the watchdog. */
static batch_t *volatile where_batch;

static void batch_init(batch_t *b, size_t cap) {
    b->ops = xcalloc(cap, sizeof *b->ops);
    b->reqs = xcalloc(cap, sizeof *b->reqs);
    b->n = 0;
    b->cap = cap;
}

static void batch_free(batch_t *b) {
    if (where_batch == b) where_batch = NULL;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->reqs[i]) {
            free(b->ops[i].mem);
            continue;
        }
        /* Only after an earlier failure (--keep-going): the library may still use the buffer,
         * so it is left allocated. */
        char d[200];
        fail("%s was never completed", describe_op(&b->ops[i], d));
    }
    free(b->ops);
    free(b->reqs);
    b->n = 0;
}

static size_t batch_add(batch_t *b) {
    if (b->n == b->cap) {
        fprintf(stderr, "stress: rank %u: internal: batch of %zu is full\n", me, b->cap);
        exit(1);
    }
    memset(&b->ops[b->n], 0, sizeof b->ops[0]);
    b->reqs[b->n] = NULL;
    return b->n++;
}

static size_t live_count(const batch_t *b) {
    size_t live = 0;
    for (size_t i = 0; i < b->n; i++) live += b->reqs[i] != NULL;
    return live;
}

static size_t post_send(batch_t *b, msg_t *m, int expect) {
    size_t i = batch_add(b);
    op_t *op = &b->ops[i];
    op->kind = SEND;
    op->expect = expect;
    op->peer = m->dst;
    op->tag = m->tag;
    op->cap = (size_t)m->len;
    op->msg = m;
    op->mem = op->buf = xmalloc(op->cap);
    fill_message(op->buf, m);
    step("nicmsg_isend", m->dst);
    MUST(nicmsg_isend(comm, op->buf, op->cap, m->dst, m->tag, &b->reqs[i]));
    return i;
}

/* A receive of `msg` (known in advance) or of one of `cands` (identified by its header). */
static size_t post_recv(batch_t *b, uint32_t src, uint32_t tag, size_t cap, msg_t *msg,
                        msg_t *cands, size_t ncands, int expect) {
    size_t i = batch_add(b);
    op_t *op = &b->ops[i];
    op->kind = RECV;
    op->expect = expect;
    op->peer = src;
    op->tag = tag;
    op->cap = cap;
    op->msg = msg;
    op->cands = cands;
    op->ncands = ncands;
    op->mem = xmalloc(cap + 2 * GUARD);
    op->buf = op->mem + GUARD;
    memset(op->mem, GUARD_BYTE, GUARD);
    memset(op->buf, POISON_BYTE, cap);
    memset(op->buf + cap, GUARD_BYTE, GUARD);
    step("nicmsg_irecv", src == ANY_SRC ? -1 : (long)src);
    MUST(nicmsg_irecv(comm, op->buf, cap, src, tag, &b->reqs[i]));
    return i;
}

static void waiting_on(batch_t *b, const char *what, long peer) {
    where_batch = b;
    step(what, peer);
}

static void put_pattern(uint32_t value, int is_tag) {
    if (value == UINT32_MAX) {
        put_text(is_tag ? "ANY_TAG" : "ANY_SOURCE");
        return;
    }
    if (is_tag)
        put_hex(value);
    else
        put_number(value);
}

/* For the watchdog (async-signal-safe): the requests of the batch still pending. */
static void print_pending(void) {
    batch_t *b = where_batch;
    if (!b) return;
    size_t shown = 0, live = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->reqs[i]) continue;
        if (++live > 6) continue;
        const op_t *op = &b->ops[i];
        put_text(shown++ ? "; " : "; pending: ");
        put_text(op->kind == SEND ? "send to " : "receive from ");
        put_pattern(op->peer, 0);
        put_text(" tag ");
        put_pattern(op->tag, 1);
        put_text(op->expect == EXPECT_CANCELLED_OR_SUCCESS ? ", cancelled, " : ", ");
        put_number(op->cap);
        put_text(" bytes");
    }
    if (live > shown) {
        put_text("; ");
        put_number(live - shown);
        put_text(" more");
    }
}

static void cancel_op(batch_t *b, size_t i) {
    step("nicmsg_cancel", b->ops[i].peer == ANY_SRC ? -1 : (long)b->ops[i].peer);
    MUST(nicmsg_cancel(b->reqs[i]));
}

/* ------------------------------------------------------------------------------------------
 * Checks of a completed operation.
 * ------------------------------------------------------------------------------------------ */

static void check_guards(const op_t *op) {
    char d[200];
    for (size_t i = 0; i < GUARD; i++) {
        if (op->mem[i] != GUARD_BYTE) {
            fail("%s: guard byte %zu before the buffer was overwritten (0x%02x)",
                 describe_op(op, d), GUARD - i, op->mem[i]);
            return;
        }
        if (op->buf[op->cap + i] != GUARD_BYTE) {
            fail("%s: guard byte %zu after the buffer was overwritten (0x%02x)", describe_op(op, d),
                 i, op->buf[op->cap + i]);
            return;
        }
    }
}

/* Bytes from `from` to the end of a receive buffer must still hold the poison it was filled
 * with. */
static void check_untouched(const op_t *op, size_t from, const char *why) {
    char d[200];
    for (size_t i = from; i < op->cap; i++)
        if (op->buf[i] != POISON_BYTE) {
            fail("%s: byte %zu of the buffer was written (0x%02x) although %s", describe_op(op, d),
                 i, op->buf[i], why);
            return;
        }
}

static int matches(uint32_t src_pattern, uint32_t tag_pattern, const msg_t *m) {
    return (src_pattern == ANY_SRC || src_pattern == m->src) &&
           (tag_pattern == ANY_TAG || tag_pattern == m->tag);
}

/* The message a receive identified by its header got, or NULL (after saying why). */
static msg_t *identify(const op_t *op) {
    char d[200];
    const nicmsg_status *st = &op->st;
    if (st->len < HEADER || st->len > op->cap) {
        fail("%s got a %llu-byte message with tag %#x from rank %u, which no rank of this test "
             "sent (library-internal traffic?)",
             describe_op(op, d), (unsigned long long)st->len, st->tag, st->source);
        return NULL;
    }
    const unsigned char *h = op->buf;
    uint32_t src = get32(h + 4), seq = get32(h + 12), phase_round = get32(h + 20);
    if (get32(h) != MAGIC || get32(h + 8) != me) {
        fail("%s: the data is not a message of this test to this rank (magic %#x, destination "
             "%u; status: rank %u, tag %#x, %llu bytes)",
             describe_op(op, d), get32(h), get32(h + 8), st->source, st->tag,
             (unsigned long long)st->len);
        return NULL;
    }
    for (size_t c = 0; c < op->ncands; c++) {
        msg_t *m = &op->cands[c];
        if (m->src == src && m->dst == me && m->seq == seq &&
            ((m->phase << 24) | m->round) == phase_round)
            return m;
    }
    fail("%s got seq %u from rank %u (phase/round %#x), which was not sent to this receive's "
         "message set",
         describe_op(op, d), seq, src, phase_round);
    return NULL;
}

/* A receive that got a message: which one, its status, its bytes, the bytes around it. */
static void check_received(op_t *op) {
    char d[200], e[160], t[24];
    const nicmsg_status *st = &op->st;
    if (st->tag > NICMSG_TAG_UB) {
        fail("%s completed with tag %#x above NICMSG_TAG_UB (length %llu, from rank %u): "
             "library-internal traffic reached the application",
             describe_op(op, d), st->tag, (unsigned long long)st->len, st->source);
        return;
    }
    msg_t *m = op->msg;
    if (!m) {
        m = identify(op);
        if (!m) return;
    } else if (st->len >= HEADER && st->len <= op->cap && m->len >= HEADER) {
        /* Read the identity first, so a message out of order is named as such. */
        uint32_t seq = get32(op->buf + 12), src = get32(op->buf + 4);
        if (get32(op->buf) == MAGIC && (seq != m->seq || src != m->src)) {
            fail("%s got seq %u from rank %u, expected %s: messages overtook each other or "
                 "matched the wrong receive",
                 describe_op(op, d), seq, src, describe_msg(m, e));
            return;
        }
    }
    if (m->taken) {
        fail("%s: %s was received twice", describe_op(op, d), describe_msg(m, e));
        return;
    }
    m->taken = 1;
    op->got = m;
    if (!matches(op->peer, op->tag, m))
        fail("%s matched %s, which its pattern does not accept", describe_op(op, d),
             describe_msg(m, e));
    if (st->source != m->src || st->tag != m->tag || st->len != m->len)
        fail("%s of %s: status says rank %u, tag %s, %llu bytes", describe_op(op, d),
             describe_msg(m, e), st->source, tag_text(st->tag, t), (unsigned long long)st->len);
    size_t n = m->len < op->cap ? (size_t)m->len : op->cap;
    size_t at = first_difference(op->buf, n, m);
    if (at != SIZE_MAX) {
        uint64_t key = msg_key(m);
        unsigned char h[HEADER];
        make_header(h, m);
        fail("%s: %s: byte %zu is 0x%02x, expected 0x%02x", describe_op(op, d), describe_msg(m, e),
             at, op->buf[at], expected_byte(m, key, h, at));
    }
    check_untouched(op, n, "the message ended before it");
    check_guards(op);
    count.messages++;
    count.bytes += m->len;
}

static void check_truncated(op_t *op) {
    char d[200], e[160];
    const nicmsg_status *st = &op->st;
    msg_t *m = op->msg;
    if (op->rc != NICMSG_ERR_TRUNCATE) {
        fail("%s of %s (longer than the buffer) returned %s, expected NICMSG_ERR_TRUNCATE",
             describe_op(op, d), describe_msg(m, e), nicmsg_error_string(op->rc));
        return;
    }
    if (st->source != m->src || st->tag != m->tag || st->len != m->len)
        fail("%s truncated %s: status says rank %u, tag %#x, %llu bytes (expected the "
             "message's source, tag and full length)",
             describe_op(op, d), describe_msg(m, e), st->source, st->tag,
             (unsigned long long)st->len);
    check_untouched(op, 0, "the message was truncated (nothing may be written)");
    check_guards(op);
    m->taken = 1;
    op->got = m;
    count.truncated++;
}

static void check_cancelled(op_t *op) {
    char d[200], a[24];
    if (op->st.source != op->peer && op->peer != ANY_SRC)
        fail("%s was cancelled: status.source is %s, expected the peer %u (a failed operation's "
             "status names its peer)",
             describe_op(op, d), rank_text(op->st.source, a), op->peer);
    if (op->kind == RECV) {
        check_untouched(op, 0, "the receive was cancelled");
        check_guards(op);
        count.recv_cancelled++;
    } else {
        count.send_cancelled++;
    }
}

static void check_sent(const op_t *op) {
    char d[200], t[24];
    const msg_t *m = op->msg;
    if (op->st.source != m->dst || op->st.tag != m->tag || op->st.len != m->len)
        fail("%s completed with status rank %u, tag %s, %llu bytes (expected destination, tag "
             "and length)",
             describe_op(op, d), op->st.source, tag_text(op->st.tag, t),
             (unsigned long long)op->st.len);
    size_t at = first_difference(op->buf, op->cap, m);
    if (at != SIZE_MAX)
        fail("%s: the library changed byte %zu of the send buffer", describe_op(op, d), at);
}

/* An operation ended with an error it does not allow. */
static void fail_result(const op_t *op, int rc, const nicmsg_status *st) {
    char d[200], e[160];
    fail("%s%s%s returned %s, expected %s (status: rank %u, tag %#x, %llu bytes)",
         describe_op(op, d), op->msg && op->kind == RECV ? " of " : "",
         op->msg && op->kind == RECV ? describe_msg(op->msg, e) : "", nicmsg_error_string(rc),
         op->expect == EXPECT_CANCELLED ? "NICMSG_ERR_CANCELLED" : "success", st->source, st->tag,
         (unsigned long long)st->len);
}

/* Every completion of the test goes through here: the status's error field is the returned
 * code, and the result is one the operation allows. */
static void finish(batch_t *b, size_t i, int rc, const nicmsg_status *st) {
    char d[200];
    op_t *op = &b->ops[i];
    if (op->done) {
        fail("internal: %s completed twice", describe_op(op, d));
        return;
    }
    op->done = 1;
    op->rc = rc;
    op->st = *st;
    if (st->error != rc)
        fail("%s returned %s but its status.error is %d", describe_op(op, d),
             nicmsg_error_string(rc), st->error);
    if (opt.verbose)
        printf("stress: rank %u %s: %s (source %u tag %#x len %llu)\n", me, describe_op(op, d),
               nicmsg_error_string(rc), st->source, st->tag, (unsigned long long)st->len);
    int cancelled_ok = op->expect == EXPECT_CANCELLED || op->expect == EXPECT_CANCELLED_OR_SUCCESS;
    if (rc == NICMSG_ERR_CANCELLED && cancelled_ok)
        check_cancelled(op);
    else if (op->expect == EXPECT_TRUNCATE)
        check_truncated(op);
    else if (rc != NICMSG_SUCCESS || op->expect == EXPECT_CANCELLED)
        fail_result(op, rc, st);
    else if (op->kind == SEND)
        check_sent(op);
    else
        check_received(op);
    if (rc == NICMSG_SUCCESS && op->expect == EXPECT_CANCELLED_OR_SUCCESS) {
        if (op->kind == SEND)
            count.send_cancel_delivered++;
        else
            count.recv_cancel_delivered++;
    }
}

/* ------------------------------------------------------------------------------------------
 * Completing a batch: waitall, waitany, test loops, wait one by one, or a mix.
 * ------------------------------------------------------------------------------------------ */

static void complete_waitall(batch_t *b) {
    nicmsg_status *sts = xmalloc(b->n * sizeof *sts);
    int *live = xmalloc(b->n * sizeof *live);
    for (size_t i = 0; i < b->n; i++) {
        memset(&sts[i], 0xCC, sizeof sts[i]);
        live[i] = b->reqs[i] != NULL;
    }
    waiting_on(b, "nicmsg_waitall", -1);
    int rc = nicmsg_waitall(b->n, b->reqs, sts);
    int first = NICMSG_SUCCESS;
    for (size_t i = 0; i < b->n; i++) {
        if (!live[i]) continue;
        if (b->reqs[i]) fail("nicmsg_waitall left request %zu of %zu non-NULL", i, b->n);
        if (first == NICMSG_SUCCESS) first = sts[i].error;
        finish(b, i, sts[i].error, &sts[i]);
    }
    if (rc != first)
        fail("nicmsg_waitall returned %s; the first failed request's status says %s",
             nicmsg_error_string(rc), nicmsg_error_string(first));
    free(sts);
    free(live);
}

static void complete_waitany(batch_t *b, size_t how_many) {
    while (how_many-- > 0 && live_count(b) > 0) {
        size_t index = 12345;
        nicmsg_status st;
        memset(&st, 0xCC, sizeof st);
        waiting_on(b, "nicmsg_waitany", -1);
        int rc = nicmsg_waitany(b->n, b->reqs, &index, &st);
        if (index == NICMSG_UNDEFINED || index >= b->n) {
            fail("nicmsg_waitany with %zu active requests set index %zu (returned %s)",
                 live_count(b), index, nicmsg_error_string(rc));
            return;
        }
        if (b->reqs[index]) {
            fail("nicmsg_waitany reported request %zu but left it non-NULL", index);
            return;
        }
        finish(b, index, rc, &st);
    }
}

static void complete_tests(batch_t *b, unsigned max_sweeps) {
    for (unsigned sweep = 0; sweep < max_sweeps && live_count(b) > 0; sweep++) {
        waiting_on(b, "nicmsg_test loop", -1);
        int progressed = 0;
        for (size_t i = 0; i < b->n; i++) {
            if (!b->reqs[i]) continue;
            int flag = -1;
            nicmsg_status st;
            memset(&st, 0xCC, sizeof st);
            int rc = nicmsg_test(&b->reqs[i], &flag, &st);
            if (flag == 1) {
                if (b->reqs[i]) fail("nicmsg_test set flag but left request %zu non-NULL", i);
                finish(b, i, rc, &st);
                progressed = 1;
            } else if (flag != 0 || rc != NICMSG_SUCCESS) {
                fail("nicmsg_test on an active request returned %s with flag %d",
                     nicmsg_error_string(rc), flag);
                return;
            }
        }
        /* Thread mode on a small machine: let the engine thread run. */
        if (!progressed) sched_yield();
    }
}

static void complete_each(batch_t *b, rng_t *r) {
    while (live_count(b) > 0) {
        size_t pick = below(r, (uint32_t)live_count(b));
        for (size_t i = 0; i < b->n; i++) {
            if (!b->reqs[i] || pick-- > 0) continue;
            nicmsg_status st;
            memset(&st, 0xCC, sizeof st);
            waiting_on(b, "nicmsg_wait", b->ops[i].peer == ANY_SRC ? -1 : (long)b->ops[i].peer);
            int rc = nicmsg_wait(&b->reqs[i], &st);
            if (b->reqs[i]) fail("nicmsg_wait left request %zu non-NULL", i);
            finish(b, i, rc, &st);
            break;
        }
    }
}

static const char *const STYLE_NAMES[] = {"waitall", "waitany", "test", "wait", "mixed"};

/* Completes every request of the batch in a style chosen by this rank. */
static void complete_all(batch_t *b, rng_t *r) {
    unsigned style = below(r, 5);
    if (opt.verbose)
        printf("stress: rank %u completes %zu requests by %s\n", me, live_count(b),
               STYLE_NAMES[style]);
    switch (style) {
    case 0: complete_waitall(b); break;
    case 1: complete_waitany(b, SIZE_MAX); break;
    case 2: complete_tests(b, UINT32_MAX); break;
    case 3: complete_each(b, r); break;
    default:
        complete_tests(b, 1 + below(r, 50));
        complete_waitany(b, below(r, (uint32_t)live_count(b) + 1));
        complete_waitall(b);
    }
}

/* Non-overtaking, checked on what arrived: if receive A was posted before receive B, both got
 * messages of one sender, and B's message was sent first, then A must not accept B's message
 * (MPI: the earlier receive would have matched it). */
static void check_order(const batch_t *b) {
    char e[160], f[160], da[200], db[200];
    for (size_t a = 0; a < b->n; a++) {
        const op_t *oa = &b->ops[a];
        if (oa->kind != RECV || !oa->got || oa->rc != NICMSG_SUCCESS) continue;
        for (size_t c = a + 1; c < b->n; c++) {
            const op_t *oc = &b->ops[c];
            if (oc->kind != RECV || !oc->got || oc->rc != NICMSG_SUCCESS) continue;
            if (oc->got->src != oa->got->src || oc->got->seq >= oa->got->seq) continue;
            if (matches(oa->peer, oa->tag, oc->got))
                fail("non-overtaking order violated: %s (posted earlier) got %s, but the later "
                     "%s got the earlier %s",
                     describe_op(oa, da), describe_msg(oa->got, e), describe_op(oc, db),
                     describe_msg(oc->got, f));
        }
    }
}

static void barrier(const char *what) {
    step(what, -1);
    MUST(nicmsg_barrier(comm));
}

/* Busy work without library calls, for `seconds` (inline engine: nothing progresses). */
static void compute(double seconds) {
    volatile uint64_t sink = 0;
    double until = now_s() + seconds;
    while (now_s() < until)
        for (int i = 0; i < 100000; i++) sink += (uint64_t)i * 2654435761u;
}

static void shuffle(size_t *items, size_t n, rng_t *r) {
    for (size_t i = n; i > 1; i--) {
        size_t j = below(r, (uint32_t)i);
        size_t t = items[i - 1];
        items[i - 1] = items[j];
        items[j] = t;
    }
}

/* ------------------------------------------------------------------------------------------
 * Traffic plans: every message of a round, for every pair of ranks, and how its receiver
 * matches it. The receive classes are chosen so that every message finds its receive whatever
 * the timing:
 *   EXACT     (source, tag)       identity known: the k-th such receive gets the k-th message
 *   SOURCE    (source, ANY_TAG)   for all of that source's messages of the round
 *   TAGGROUP  (ANY_SOURCE, tag)   for all messages with that tag (tags no other class uses)
 *   ANYANY    (ANY_SOURCE, ANY_TAG) for every message to that rank in the round
 * ------------------------------------------------------------------------------------------ */

enum class { EXACT, SOURCE, TAGGROUP, ANYANY };

typedef struct {
    msg_t *msgs;
    uint8_t *cls; /* per message */
    size_t n, cap;
} plan_t;

static void plan_init(plan_t *p, size_t cap) {
    p->msgs = xcalloc(cap, sizeof *p->msgs);
    p->cls = xcalloc(cap, 1);
    p->n = 0;
    p->cap = cap;
}

static void plan_free(plan_t *p) {
    free(p->msgs);
    free(p->cls);
}

/* Adds a message; seq counts the pair's messages in this plan (the send order). */
static msg_t *plan_add(plan_t *p, uint32_t src, uint32_t dst, unsigned phase, unsigned round,
                       uint32_t tag, size_t len, int cls) {
    if (p->n == p->cap) {
        fprintf(stderr, "stress: internal: plan of %zu is full\n", p->cap);
        exit(1);
    }
    uint32_t seq = 0;
    for (size_t i = 0; i < p->n; i++) seq += p->msgs[i].src == src && p->msgs[i].dst == dst;
    msg_t *m = &p->msgs[p->n];
    *m = (msg_t){src, dst, phase, round, seq, tag, len, 0};
    p->cls[p->n++] = (uint8_t)cls;
    return m;
}

/* The pattern a message's receive uses, by its class. */
static void pattern_of(const plan_t *p, size_t i, uint32_t *src, uint32_t *tag) {
    const msg_t *m = &p->msgs[i];
    switch (p->cls[i]) {
    case EXACT:
        *src = m->src;
        *tag = m->tag;
        break;
    case SOURCE:
        *src = m->src;
        *tag = ANY_TAG;
        break;
    case TAGGROUP:
        *src = ANY_SRC;
        *tag = m->tag;
        break;
    default: *src = ANY_SRC; *tag = ANY_TAG;
    }
}

/* Posts this rank's sends in a random order across destinations (each destination's messages
 * in seq order, which defines their order for non-overtaking). */
static void post_sends_of(batch_t *b, plan_t *p, rng_t *r, int expect) {
    size_t *order = xmalloc(p->n * sizeof *order), n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->msgs[i].src == me) order[n++] = i;
    shuffle(order, n, r);
    /* The k-th slot for destination d sends d's k-th message. */
    for (size_t k = 0; k < n; k++) {
        uint32_t dst = p->msgs[order[k]].dst;
        for (size_t i = 0; i < p->n; i++) {
            msg_t *m = &p->msgs[i];
            if (m->src != me || m->dst != dst || m->taken) continue;
            m->taken = 1; /* sender side: posted (reset below for self-messages: none) */
            post_send(b, m, expect);
            break;
        }
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->msgs[i].src == me) p->msgs[i].taken = 0;
    free(order);
}

/* Posts this rank's receives for the plan, in a random order across patterns (receives of one
 * pattern in the order of the messages they get). Receives identified by their header get a
 * buffer for the longest message they may get. */
static void post_receives_of(batch_t *b, plan_t *p, rng_t *r) {
    size_t *order = xmalloc(p->n * sizeof *order), n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->msgs[i].dst == me) order[n++] = i;
    shuffle(order, n, r);
    uint8_t *used = xcalloc(p->n, 1);
    for (size_t k = 0; k < n; k++) {
        uint32_t src, tag;
        pattern_of(p, order[k], &src, &tag);
        size_t extra = below(r, 3) == 0 ? 0 : below(r, 100);
        if (src != ANY_SRC) {
            /* The first message of this pattern not yet given to a receive. */
            for (size_t i = 0; i < p->n; i++) {
                uint32_t s2, t2;
                if (p->msgs[i].dst != me || used[i]) continue;
                pattern_of(p, i, &s2, &t2);
                if (s2 != src || t2 != tag) continue;
                used[i] = 1;
                post_recv(b, src, tag, (size_t)p->msgs[i].len + extra, &p->msgs[i], NULL, 0,
                          EXPECT_SUCCESS);
                break;
            }
            continue;
        }
        size_t longest = 0;
        for (size_t i = 0; i < p->n; i++) {
            uint32_t s2, t2;
            pattern_of(p, i, &s2, &t2);
            if (p->msgs[i].dst == me && s2 == src && t2 == tag && p->msgs[i].len > longest)
                longest = (size_t)p->msgs[i].len;
        }
        post_recv(b, src, tag, longest + extra, NULL, p->msgs, p->n, EXPECT_SUCCESS);
    }
    free(used);
    free(order);
}

static void check_all_received(const plan_t *p) {
    char e[160];
    for (size_t i = 0; i < p->n; i++)
        if (p->msgs[i].dst == me && !p->msgs[i].taken)
            fail("%s was never received", describe_msg(&p->msgs[i], e));
}

/* One round of a traffic plan: receives posted first (then a barrier, then the sends: every
 * message arrives at a posted receive) or sends first (messages arrive unexpected). */
static void run_traffic(plan_t *p, unsigned phase, unsigned round, int prepost) {
    rng_t r = local_rng(phase, round);
    batch_t b;
    batch_init(&b, p->n);
    if (prepost) {
        post_receives_of(&b, p, &r);
        where_batch = &b;
        barrier("barrier after posting the receives of the round");
        post_sends_of(&b, p, &r, EXPECT_SUCCESS);
    } else {
        post_sends_of(&b, p, &r, EXPECT_SUCCESS);
        if (below(&r, 2)) compute(below(&r, 1000) * 1e-6);
        post_receives_of(&b, p, &r);
    }
    complete_all(&b, &r);
    check_order(&b);
    check_all_received(p);
    batch_free(&b);
}

#endif /* NICMSG_STRESS_H */

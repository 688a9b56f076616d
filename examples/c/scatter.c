/* Scatter/gather through the C ABI (nicmsg_isendv, nicmsg_irecvv): every rank sends its
 * successor messages of many lengths scattered over up to 16 pieces (some empty, some of those
 * at NULL) and receives its predecessor's gathered into pieces cut differently; every byte of
 * every piece is checked against where it lies in the message, and the guard bytes after each
 * piece must be untouched. Also: the argument checks, an empty message of no pieces, and a
 * scattered receive too short for its message (truncation, nothing written).
 * Run: nicmsg run -n 3 -- ./scatter   (built by the tests, or in the repository's root:
 *   cc examples/c/scatter.c $(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg) -o scatter) */
#include <nicmsg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != NICMSG_SUCCESS) {                                                   \
            fprintf(stderr, "%s failed: %s\n", #call, nicmsg_error_string(rc_));       \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define EXPECT(call, code)                                                             \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != (code)) {                                                           \
            fprintf(stderr, "%s returned %d (%s), expected %s\n", #call, rc_,          \
                    nicmsg_error_string(rc_), #code);                                  \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

enum { GUARD = 16, GUARD_BYTE = 0xA5, UNWRITTEN = 0x5A };

/* Byte `offset` of the message `sender` sends for case `c`. */
static unsigned char byte_at(size_t offset, uint32_t sender, unsigned c) {
    return (unsigned char)((offset * 131u) ^ (offset >> 8) ^ (sender * 7u + c * 13u));
}

static uint32_t next_random(uint32_t *state) {
    *state = *state * 1103515245u + 12345u;
    return *state >> 8;
}

/* Cuts `len` bytes into `count` pieces at random points (equal points make empty pieces), each
 * in an allocation of its own followed by GUARD guard bytes; an empty piece at an odd index
 * has a NULL base. */
static void cut(struct iovec *pieces, size_t count, size_t len, uint32_t seed) {
    size_t cuts[NICMSG_IOV_MAX + 1];
    cuts[0] = 0;
    cuts[count] = len;
    uint32_t state = seed;
    for (size_t i = 1; i < count; i++) cuts[i] = len == 0 ? 0 : next_random(&state) % (len + 1);
    for (size_t i = 1; i < count; i++) /* insertion sort of the inner cuts */
        for (size_t j = i; j > 1 && cuts[j - 1] > cuts[j]; j--) {
            size_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    for (size_t i = 0; i < count; i++) {
        size_t piece = cuts[i + 1] - cuts[i];
        if (piece == 0 && i % 2 == 1) {
            pieces[i].iov_base = NULL;
        } else {
            unsigned char *memory = malloc(piece + GUARD);
            if (!memory) exit(3);
            memset(memory + piece, GUARD_BYTE, GUARD);
            pieces[i].iov_base = memory;
        }
        pieces[i].iov_len = piece;
    }
}

static void release(struct iovec *pieces, size_t count) {
    for (size_t i = 0; i < count; i++) free(pieces[i].iov_base);
}

/* Every byte of the pieces is `expect(offset)` (or UNWRITTEN if `written` is 0), and every
 * guard byte intact. Returns the number of bytes wrong. */
static size_t check(const struct iovec *pieces, size_t count, int written, uint32_t sender,
                    unsigned c) {
    size_t wrong = 0, offset = 0;
    for (size_t i = 0; i < count; i++) {
        const unsigned char *bytes = pieces[i].iov_base;
        for (size_t k = 0; k < pieces[i].iov_len; k++, offset++) {
            unsigned char want = written ? byte_at(offset, sender, c) : UNWRITTEN;
            wrong += bytes[k] != want;
        }
        for (size_t k = 0; bytes && k < GUARD; k++) wrong += bytes[pieces[i].iov_len + k] != GUARD_BYTE;
    }
    return wrong;
}

int main(void) {
    nicmsg_comm *comm;
    uint32_t rank, size;
    CHECK(nicmsg_init(&comm));
    CHECK(nicmsg_comm_rank(comm, &rank));
    CHECK(nicmsg_comm_size(comm, &size));
    if (size < 2) {
        fprintf(stderr, "needs at least 2 ranks\n");
        return 2;
    }
    uint32_t next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* The arguments are checked before anything is posted. */
    nicmsg_request *request = NULL;
    struct iovec many[NICMSG_IOV_MAX + 1];
    for (size_t i = 0; i <= NICMSG_IOV_MAX; i++) {
        many[i].iov_base = NULL;
        many[i].iov_len = 0;
    }
    unsigned char four[4];
    struct iovec at_null = {NULL, 4};
    EXPECT(nicmsg_isendv(comm, many, NICMSG_IOV_MAX + 1, next, 1, &request), NICMSG_ERR_BUFFER);
    EXPECT(nicmsg_irecvv(comm, many, NICMSG_IOV_MAX + 1, prev, 1, &request), NICMSG_ERR_BUFFER);
    EXPECT(nicmsg_isendv(comm, NULL, 2, next, 1, &request), NICMSG_ERR_ARG);
    EXPECT(nicmsg_irecvv(comm, NULL, 2, prev, 1, &request), NICMSG_ERR_ARG);
    EXPECT(nicmsg_isendv(comm, &at_null, 1, next, 1, &request), NICMSG_ERR_ARG);
    EXPECT(nicmsg_irecvv(comm, &at_null, 1, prev, 1, &request), NICMSG_ERR_ARG);
    struct iovec some = {four, sizeof four};
    EXPECT(nicmsg_isendv(comm, &some, 1, next, 1, NULL), NICMSG_ERR_ARG);
    EXPECT(nicmsg_isendv(NULL, &some, 1, next, 1, &request), NICMSG_ERR_ARG);
    EXPECT(nicmsg_isendv(comm, &some, 1, size, 1, &request), NICMSG_ERR_RANK);
    EXPECT(nicmsg_irecvv(comm, &some, 1, prev, NICMSG_TAG_UB + 1u, &request), NICMSG_ERR_TAG);
    if (request != NULL) {
        fprintf(stderr, "rank %u: a refused call set its request\n", rank);
        return 1;
    }

    /* No pieces at all: an empty message (iov may be NULL). Sixteen empty pieces too. */
    nicmsg_request *empty[4];
    nicmsg_status empty_status[4];
    CHECK(nicmsg_irecvv(comm, NULL, 0, prev, 2, &empty[0]));
    CHECK(nicmsg_irecvv(comm, many, NICMSG_IOV_MAX, prev, 3, &empty[1]));
    CHECK(nicmsg_isendv(comm, NULL, 0, next, 2, &empty[2]));
    CHECK(nicmsg_isendv(comm, many, NICMSG_IOV_MAX, next, 3, &empty[3]));
    CHECK(nicmsg_waitall(4, empty, empty_status));
    for (int i = 0; i < 2; i++)
        if (empty_status[i].len != 0 || empty_status[i].source != prev) {
            fprintf(stderr, "rank %u: empty message %d: len %llu from %u\n", rank, i,
                    (unsigned long long)empty_status[i].len, empty_status[i].source);
            return 1;
        }

    /* Scattered sends, gathered receives, cut differently on each side: one piece against
     * several, several against one, sixteen against sixteen, and others. */
    static const size_t lengths[] = {0, 1, 200, 1472, 8192, 70000, 300000, 1 << 20};
    static const size_t layouts[][2] = {{1, 5}, {3, 1}, {16, 16}, {7, 2}, {2, 16}};
    const size_t n_lengths = sizeof lengths / sizeof lengths[0];
    const size_t n_layouts = sizeof layouts / sizeof layouts[0];
    size_t messages = 0;
    for (size_t l = 0; l < n_lengths; l++) {
        for (size_t k = 0; k < n_layouts; k++) {
            unsigned c = (unsigned)(l * n_layouts + k);
            size_t len = lengths[l], send_count = layouts[k][0], recv_count = layouts[k][1];
            struct iovec out[NICMSG_IOV_MAX], in[NICMSG_IOV_MAX];
            cut(out, send_count, len, rank * 7919u + c);
            cut(in, recv_count, len, prev * 104729u + c + 1);
            size_t offset = 0;
            for (size_t i = 0; i < send_count; i++)
                for (size_t b = 0; b < out[i].iov_len; b++, offset++)
                    ((unsigned char *)out[i].iov_base)[b] = byte_at(offset, rank, c);
            for (size_t i = 0; i < recv_count; i++)
                if (in[i].iov_len) memset(in[i].iov_base, UNWRITTEN, in[i].iov_len);
            nicmsg_request *reqs[2];
            nicmsg_status statuses[2];
            CHECK(nicmsg_irecvv(comm, in, recv_count, prev, 100 + c, &reqs[0]));
            CHECK(nicmsg_isendv(comm, out, send_count, next, 100 + c, &reqs[1]));
            CHECK(nicmsg_waitall(2, reqs, statuses));
            size_t wrong = check(in, recv_count, 1, prev, c);
            size_t sent_wrong = check(out, send_count, 1, rank, c);
            if (statuses[0].len != len || statuses[0].source != prev ||
                statuses[0].tag != 100 + c || wrong || sent_wrong) {
                fprintf(stderr,
                        "rank %u: %zu bytes in %zu pieces from %u into %zu pieces: len %llu, "
                        "%zu bytes or guards wrong (%zu in the send buffer)\n",
                        rank, len, send_count, prev, recv_count,
                        (unsigned long long)statuses[0].len, wrong, sent_wrong);
                return 1;
            }
            release(out, send_count);
            release(in, recv_count);
            messages++;
        }
    }

    /* A gathered receive shorter than its message: truncation, and not a byte written. */
    {
        unsigned c = 999;
        struct iovec out[3], in[4];
        cut(out, 3, 5000, rank + 1);
        cut(in, 4, 4999, prev + 2);
        size_t offset = 0;
        for (size_t i = 0; i < 3; i++)
            for (size_t b = 0; b < out[i].iov_len; b++, offset++)
                ((unsigned char *)out[i].iov_base)[b] = byte_at(offset, rank, c);
        for (size_t i = 0; i < 4; i++)
            if (in[i].iov_len) memset(in[i].iov_base, UNWRITTEN, in[i].iov_len);
        nicmsg_request *reqs[2];
        nicmsg_status statuses[2];
        CHECK(nicmsg_irecvv(comm, in, 4, prev, 50, &reqs[0]));
        CHECK(nicmsg_isendv(comm, out, 3, next, 50, &reqs[1]));
        int rc = nicmsg_waitall(2, reqs, statuses);
        if (rc != NICMSG_ERR_TRUNCATE || statuses[0].error != NICMSG_ERR_TRUNCATE ||
            statuses[0].len != 5000 || statuses[1].error != NICMSG_SUCCESS ||
            check(in, 4, 0, prev, c) != 0) {
            fprintf(stderr, "rank %u: truncation: %s, len %llu\n", rank,
                    nicmsg_error_string(rc), (unsigned long long)statuses[0].len);
            return 1;
        }
        release(out, 3);
        release(in, 4);
    }

    CHECK(nicmsg_barrier(comm));
    if (rank == 0)
        printf("c scatter: %zu layouts verified on %u ranks\n", messages, size);
    CHECK(nicmsg_finalize(comm));
    return 0;
}

/* Ring and ping-pong through the C ABI; every byte is checked with a checksum.
 * Run: nicmsg run -n 4 -- ./ring   (built by the tests, or in the repository's root:
 *   cc examples/c/ring.c $(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg) -o ring) */
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

static void fill(unsigned char *buf, size_t len, uint32_t seed) {
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 131u + seed * 7u);
}

static uint64_t checksum(const unsigned char *buf, size_t len) {
    uint64_t sum = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) sum = (sum ^ buf[i]) * 1099511628211ull;
    return sum;
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
    size_t sizes[] = {0, 8, 1500, 8192, 70000, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t len = sizes[s];
        unsigned char *out = malloc(len + 1), *in = malloc(len + 1), *expect = malloc(len + 1);
        fill(out, len, rank * 100 + (uint32_t)s);
        fill(expect, len, prev * 100 + (uint32_t)s);
        nicmsg_request *reqs[2];
        nicmsg_status statuses[2];
        CHECK(nicmsg_irecv(comm, in, len, prev, (uint32_t)s, &reqs[0]));
        CHECK(nicmsg_isend(comm, out, len, next, (uint32_t)s, &reqs[1]));
        CHECK(nicmsg_waitall(2, reqs, statuses));
        if (statuses[0].len != len || statuses[0].source != prev || checksum(in, len) != checksum(expect, len)) {
            fprintf(stderr, "rank %u: corrupt message of %zu bytes from %u\n", rank, len, prev);
            return 1;
        }
        free(out);
        free(in);
        free(expect);
    }
    /* Truncation is reported, not written past. */
    if (rank == 0) {
        unsigned char big[64] = {0};
        CHECK(nicmsg_send(comm, big, sizeof big, 1, 77));
    } else if (rank == 1) {
        unsigned char small[16];
        nicmsg_status status;
        int rc = nicmsg_recv(comm, small, sizeof small, 0, 77, &status);
        if (rc != NICMSG_ERR_TRUNCATE || status.len != 64) {
            fprintf(stderr, "rank 1: expected truncation, got %s\n", nicmsg_error_string(rc));
            return 1;
        }
    }
    CHECK(nicmsg_barrier(comm));
    if (rank == 0) printf("c ring: all sizes verified on %u ranks\n", size);
    CHECK(nicmsg_finalize(comm));
    return 0;
}

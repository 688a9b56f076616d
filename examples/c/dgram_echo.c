/* An echo server and client over nicmsg's datagram sockets, in C: no launcher, no ranks,
 * addresses only. The client sends datagrams of 0 B to 1 MiB, each with its own pattern, and
 * checks every echo byte for byte. Same command line and wire behaviour as the Rust example
 * (crates/nicmsg/examples/dgram_echo.rs), so either side may be either language.
 *   dgram_echo server 0.0.0.0:7000 [--count N]
 *   dgram_echo client 10.0.0.1:7000 [--rounds R]
 * Build, in the repository's root:
 *   cc examples/c/dgram_echo.c $(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg) -o dgram_echo */
#include <nicmsg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEN (1u << 20)

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != NICMSG_SUCCESS) {                                                   \
            fprintf(stderr, "%s failed: %s\n", #call, nicmsg_error_string(rc_));       \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static void fill(unsigned char *buf, size_t len, size_t seed) {
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 131u + seed * 7u);
}

static const char *option(int argc, char **argv, const char *name) {
    for (int i = 3; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
}

static int serve(const char *address, long count) {
    nicmsg_dgram *socket;
    char self[NICMSG_ADDRESS_MAX], from[NICMSG_ADDRESS_MAX];
    CHECK(nicmsg_dgram_bind(address, &socket));
    CHECK(nicmsg_dgram_local_address(socket, self, sizeof self));
    printf("dgram_echo server (C) at %s\n", self);
    fflush(stdout);
    unsigned char *buf = malloc(MAX_LEN);
    long served = 0;
    for (; count < 0 || served < count; served++) {
        size_t len;
        /* Size the buffer to the datagram, then take it. */
        CHECK(nicmsg_dgram_peek_from(socket, &len, NULL, 0));
        if (len > MAX_LEN) {
            fprintf(stderr, "a datagram of %zu bytes is beyond this server's %u\n", len, MAX_LEN);
            return 1;
        }
        CHECK(nicmsg_dgram_recv_from(socket, buf, MAX_LEN, &len, from, sizeof from));
        CHECK(nicmsg_dgram_send_to(socket, buf, len, from));
    }
    printf("dgram_echo server (C): echoed %ld datagrams\n", served);
    free(buf);
    CHECK(nicmsg_dgram_close(socket));
    return 0;
}

static int client(const char *server, long rounds) {
    nicmsg_dgram *socket;
    char from[NICMSG_ADDRESS_MAX];
    CHECK(nicmsg_dgram_bind(strchr(server, '[') ? "[::]:0" : "0.0.0.0:0", &socket));
    unsigned char *out = malloc(MAX_LEN), *in = malloc(MAX_LEN);
    long datagrams = 0;
    for (long round = 0; round < rounds; round++) {
        size_t index = 0;
        for (size_t len = 0; len <= MAX_LEN; len = len < 2 ? len + 1 : len * 2, index++) {
            size_t got;
            fill(out, len, (size_t)round * 1000 + index);
            CHECK(nicmsg_dgram_send_to(socket, out, len, server));
            CHECK(nicmsg_dgram_recv_from(socket, in, MAX_LEN, &got, from, sizeof from));
            if (got != len || memcmp(in, out, len) != 0) {
                fprintf(stderr, "echo of %zu B from %s differs (%zu B)\n", len, from, got);
                return 1;
            }
            datagrams++;
        }
    }
    printf("dgram_echo client (C): %ld datagrams echoed whole and equal\n", datagrams);
    free(out);
    free(in);
    CHECK(nicmsg_dgram_close(socket));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: dgram_echo server ADDRESS [--count N] | client SERVER [--rounds R]\n");
        return 2;
    }
    if (strcmp(argv[1], "server") == 0) {
        const char *count = option(argc, argv, "--count");
        return serve(argv[2], count ? atol(count) : -1);
    }
    if (strcmp(argv[1], "client") == 0) {
        const char *rounds = option(argc, argv, "--rounds");
        return client(argv[2], rounds ? atol(rounds) : 3);
    }
    fprintf(stderr, "unknown role %s\n", argv[1]);
    return 2;
}

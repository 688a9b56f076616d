/* An echo server and client over nicmsg's datagram sockets, in C: no launcher, no ranks,
 * addresses only. The client sends datagrams of 0 B to 1 MiB, each with its own pattern, and
 * checks every echo byte for byte. Same command line and wire behaviour as the Rust example
 * (crates/nicmsg/examples/dgram_echo.rs), so either side may be either language.
 * With --lm both sides use LM's zero-copy path (any_dgram.h); a client binds --bind IP (its
 * interface's address toward the server, to place the echoes it receives).
 *   dgram_echo server 0.0.0.0:7000 [--count N] [--lm]
 *   dgram_echo client 10.0.0.1:7000 [--rounds R] [--lm] [--bind IP]
 * Build, in the repository's root:
 *   cc examples/c/dgram_echo.c $(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg) -o dgram_echo */
#include "any_dgram.h"
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

static int serve(const char *address, long count, int lm) {
    any_dgram socket;
    char self[NICMSG_ADDRESS_MAX], from[NICMSG_ADDRESS_MAX];
    CHECK(any_bind(&socket, lm, address));
    CHECK(any_local_address(&socket, self, sizeof self));
    printf("dgram_echo server (C) at %s (%s)\n", self, any_path(&socket));
    fflush(stdout);
    unsigned char *buf = malloc(MAX_LEN);
    long served = 0;
    for (; count < 0 || served < count; served++) {
        size_t len;
        const void *data;
        CHECK(any_recv_next(&socket, &data, &len, from, sizeof from));
        if (len > MAX_LEN) {
            fprintf(stderr, "a datagram of %zu bytes is beyond this server's %u\n", len, MAX_LEN);
            return 1;
        }
        /* The bytes are the socket's until its next call: the echo is sent from a copy. */
        memcpy(buf, data, len);
        CHECK(any_send_to(&socket, buf, len, from));
    }
    printf("dgram_echo server (C): echoed %ld datagrams\n", served);
    free(buf);
    CHECK(any_close(&socket));
    return 0;
}

static int client(const char *server, long rounds, int lm, const char *bind_ip) {
    any_dgram socket;
    char from[NICMSG_ADDRESS_MAX], bind[NICMSG_ADDRESS_MAX];
    if (bind_ip)
        snprintf(bind, sizeof bind, "%s:0", bind_ip);
    else
        snprintf(bind, sizeof bind, "%s", strchr(server, '[') ? "[::]:0" : "0.0.0.0:0");
    CHECK(any_bind(&socket, lm, bind));
    unsigned char *out = malloc(MAX_LEN), *in = malloc(MAX_LEN);
    long datagrams = 0;
    for (long round = 0; round < rounds; round++) {
        size_t index = 0;
        for (size_t len = 0; len <= MAX_LEN; len = len < 2 ? len + 1 : len * 2, index++) {
            size_t got;
            fill(out, len, (size_t)round * 1000 + index);
            CHECK(any_send_to(&socket, out, len, server));
            CHECK(any_recv_from(&socket, in, MAX_LEN, &got, from, sizeof from));
            if (got != len || memcmp(in, out, len) != 0) {
                fprintf(stderr, "echo of %zu B from %s differs (%zu B)\n", len, from, got);
                return 1;
            }
            datagrams++;
        }
    }
    printf("dgram_echo client (C): %ld datagrams echoed whole and equal (%s)\n", datagrams,
           any_path(&socket));
    free(out);
    free(in);
    CHECK(any_close(&socket));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: dgram_echo server ADDRESS [--count N] [--lm] | "
                        "client SERVER [--rounds R] [--lm] [--bind IP]\n");
        return 2;
    }
    int lm = any_flag(argc, argv, 3, "--lm");
    if (strcmp(argv[1], "server") == 0) {
        const char *count = option(argc, argv, "--count");
        return serve(argv[2], count ? atol(count) : -1, lm);
    }
    if (strcmp(argv[1], "client") == 0) {
        const char *rounds = option(argc, argv, "--rounds");
        return client(argv[2], rounds ? atol(rounds) : 3, lm, option(argc, argv, "--bind"));
    }
    fprintf(stderr, "unknown role %s\n", argv[1]);
    return 2;
}

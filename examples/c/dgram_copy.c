/* File transfer over nicmsg's datagram sockets, in C, verified by a CRC32C checksum end to end.
 * Wire behaviour of the Rust example (crates/nicmsg/examples/dgram_copy.rs): a datagram
 * "NICMSG-COPY <length> <crc32c> <name>", then the file in datagrams of --chunk bytes; the
 * server answers "OK <crc32c>" or "BAD <crc32c>". Either side may be either language.
 * With --lm both sides use LM's zero-copy path (any_dgram.h): the server writes each chunk to
 * the file from where it was placed; a client binds --bind IP.
 *   dgram_copy server 0.0.0.0:7001 OUT_DIR [--files N] [--lm]   (one client at a time)
 *   dgram_copy client 10.0.0.1:7001 FILE [--chunk BYTES] [--lm] [--bind IP]
 * Build, in the repository's root:
 *   cc examples/c/dgram_copy.c $(PKG_CONFIG_PATH=$PWD/pkgconfig pkg-config --cflags --libs nicmsg) -o dgram_copy */
#include "any_dgram.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADER 512

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != NICMSG_SUCCESS) {                                                   \
            fprintf(stderr, "%s failed: %s\n", #call, nicmsg_error_string(rc_));       \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* CRC32C (Castagnoli), reflected, bit by bit: slow but short, and the same as the crc32c
 * crate's, so a C client and a Rust server agree. */
static uint32_t crc32c_append(uint32_t crc, const unsigned char *data, size_t len) {
    crc = ~crc;
    for (size_t i = 0; i < len; i++) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static const char *option(int argc, char **argv, const char *name) {
    for (int i = 4; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
}

static int serve(const char *address, const char *dir, long files, int lm) {
    any_dgram socket;
    char from[NICMSG_ADDRESS_MAX], self[NICMSG_ADDRESS_MAX];
    CHECK(any_bind(&socket, lm, address));
    CHECK(any_local_address(&socket, self, sizeof self));
    printf("dgram_copy server (C) at %s (%s), into %s\n", self, any_path(&socket), dir);
    fflush(stdout);
    int all_good = 1;
    for (long done = 0; files < 0 || done < files; done++) {
        char header[MAX_HEADER + 1], name[MAX_HEADER], path[2 * MAX_HEADER];
        size_t len;
        unsigned long long expected;
        unsigned int expected_crc;
        CHECK(any_recv_from(&socket, header, MAX_HEADER, &len, from, sizeof from));
        header[len] = 0;
        if (sscanf(header, "NICMSG-COPY %llu %x %511s", &expected, &expected_crc, name) != 3 ||
            strchr(name, '/')) {
            fprintf(stderr, "%s sent no valid header\n", from);
            return 1;
        }
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *file = fopen(path, "wb");
        if (!file) {
            perror(path);
            return 1;
        }
        uint32_t crc = 0;
        unsigned long long received = 0;
        while (received < expected) {
            char sender[NICMSG_ADDRESS_MAX];
            const void *chunk;
            /* Written to the file from where the socket received it (over LM: placed). */
            CHECK(any_recv_next(&socket, &chunk, &len, sender, sizeof sender));
            if (strcmp(sender, from) != 0) {
                fprintf(stderr, "a datagram from %s during %s's transfer\n", sender, from);
                return 1;
            }
            fwrite(chunk, 1, len, file);
            crc = crc32c_append(crc, chunk, len);
            received += len;
        }
        fclose(file);
        int good = received == expected && crc == expected_crc;
        all_good &= good;
        printf("dgram_copy server (C): %s from %s: %llu bytes, crc32c %08x: %s\n", path, from,
               received, crc, good ? "OK" : "BAD");
        fflush(stdout);
        char answer[32];
        snprintf(answer, sizeof answer, "%s %08x", good ? "OK" : "BAD", crc);
        CHECK(any_send_to(&socket, answer, strlen(answer), from));
    }
    CHECK(any_close(&socket));
    return all_good ? 0 : 1;
}

static int send_file(const char *server, const char *path, size_t chunk, int lm,
                     const char *bind_ip) {
    FILE *file = fopen(path, "rb");
    if (!file) {
        perror(path);
        return 1;
    }
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *content = malloc(size ? (size_t)size : 1);
    if (fread(content, 1, (size_t)size, file) != (size_t)size) {
        perror(path);
        return 1;
    }
    fclose(file);
    uint32_t crc = crc32c_append(0, content, (size_t)size);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    any_dgram socket;
    char bind[NICMSG_ADDRESS_MAX];
    if (bind_ip)
        snprintf(bind, sizeof bind, "%s:0", bind_ip);
    else
        snprintf(bind, sizeof bind, "%s", strchr(server, '[') ? "[::]:0" : "0.0.0.0:0");
    CHECK(any_bind(&socket, lm, bind));
    char header[MAX_HEADER];
    snprintf(header, sizeof header, "NICMSG-COPY %ld %08x %s", size, crc, name);
    CHECK(any_send_to(&socket, header, strlen(header), server));
    for (long at = 0; at < size; at += (long)chunk) {
        size_t len = (size_t)(size - at) < chunk ? (size_t)(size - at) : chunk;
        CHECK(any_send_to(&socket, content + at, len, server));
    }
    char answer[64], expected[32];
    size_t len;
    CHECK(any_recv_from(&socket, answer, sizeof answer - 1, &len, NULL, 0));
    answer[len] = 0;
    snprintf(expected, sizeof expected, "OK %08x", crc);
    printf("dgram_copy client (C): %s (%ld bytes, crc32c %08x, %s): server says %s\n", path,
           size, crc, any_path(&socket), answer);
    free(content);
    CHECK(any_close(&socket));
    return strcmp(answer, expected) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: dgram_copy server ADDRESS OUT_DIR [--files N] [--lm] | "
                        "client SERVER FILE [--chunk BYTES] [--lm] [--bind IP]\n");
        return 2;
    }
    int lm = any_flag(argc, argv, 4, "--lm");
    if (strcmp(argv[1], "server") == 0) {
        const char *files = option(argc, argv, "--files");
        return serve(argv[2], argv[3], files ? atol(files) : -1, lm);
    }
    if (strcmp(argv[1], "client") == 0) {
        const char *chunk = option(argc, argv, "--chunk");
        return send_file(argv[2], argv[3], chunk ? (size_t)atol(chunk) : (size_t)1 << 20, lm,
                         option(argc, argv, "--bind"));
    }
    fprintf(stderr, "unknown role %s\n", argv[1]);
    return 2;
}

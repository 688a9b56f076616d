/*
 * Arguments libfabric's API allows but that make no sense, given to nicmsg's provider: each
 * call answers a negative FI_E* code and leaves the object working, instead of crashing,
 * corrupting memory or doing something other than what was asked. Prints "bad_args: ok" and
 * exits 0, or says what failed.
 *
 *   cc -o bad_args bad_args.c -lfabric && FI_PROVIDER_PATH=DIR ./bad_args
 */
#define CHECK_NAME "bad_args"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, "bad_args: " __VA_ARGS__);                                 \
		fputc('\n', stderr);                                                       \
		exit(1);                                                                   \
	} while (0)

/* `got` must be the error `wanted`. */
static void expect(const char *what, long got, int wanted)
{
	if (got != wanted)
		FAIL("%s gave %ld, not %d (%s)", what, got, wanted, fi_strerror(-wanted));
}

/* An insert of more addresses than a vector holds, so many that the count added to the
 * vector's size wraps around, is refused before any address is read; the vector still
 * holds what it held. */
static void check_vector_count(struct node *n, struct node *peer)
{
	fi_addr_t at;
	CHECK(fi_av_insert(n->av, peer->name, 1, &at, 0, NULL) - 1);
	expect("fi_av_insert of SIZE_MAX addresses",
	       fi_av_insert(n->av, peer->name, SIZE_MAX, NULL, 0, NULL), -FI_ENOSPC);
	expect("fi_av_insert of SIZE_MAX - 1 addresses",
	       fi_av_insert(n->av, peer->name, SIZE_MAX - 1, NULL, 0, NULL), -FI_ENOSPC);
	char found[64];
	size_t len = sizeof(found);
	CHECK(fi_av_lookup(n->av, at, found, &len));
	if (len != peer->name_len || memcmp(found, peer->name, len))
		FAIL("the vector lost its address after a refused insert");
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	open_domain(FI_TAGGED | FI_MSG, &info, &fabric, &domain);
	struct node a, b;
	open_node(info, domain, &a, FI_WAIT_NONE);
	open_node(info, domain, &b, FI_WAIT_NONE);
	check_vector_count(&a, &b);
	struct node *nodes[] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		CHECK(fi_close(&nodes[i]->ep->fid));
		CHECK(fi_close(&nodes[i]->cq->fid));
		CHECK(fi_close(&nodes[i]->av->fid));
	}
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	printf("bad_args: ok\n");
	return 0;
}

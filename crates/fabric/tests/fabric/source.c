/*
 * FI_SOURCE on nicmsg's provider: a receive's completion read with fi_cq_readfrom names its
 * sender by the sender's address in the receiver's address vector, or FI_ADDR_NOTAVAIL for a
 * sender the vector does not hold. Three endpoints in one process on loopback: the receiver's
 * vector holds the first sender only. Prints "source: ok" and exits 0, or says what failed.
 *
 *   cc -o source source.c -lfabric && FI_PROVIDER_PATH=DIR ./source
 */
#define CHECK_NAME "source"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads one completion of `n`'s queue, with its source; progresses every node meanwhile. */
static void read_one(struct node *nodes, int count, struct node *n,
		     struct fi_cq_tagged_entry *entry, fi_addr_t *source)
{
	for (long spins = 0; spins < 100000000; spins++) {
		ssize_t got = fi_cq_readfrom(n->cq, entry, 1, source);
		if (got == 1)
			return;
		if (got != -FI_EAGAIN) {
			fprintf(stderr, "source: fi_cq_readfrom: %s\n", fi_strerror((int)-got));
			exit(1);
		}
		for (int i = 0; i < count; i++) {
			struct fi_cq_tagged_entry other;
			if (&nodes[i] != n && fi_cq_read(nodes[i].cq, &other, 1) < 0)
				continue;
		}
	}
	fprintf(stderr, "source: no completion\n");
	exit(1);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	open_domain(FI_TAGGED | FI_SOURCE, &info, &fabric, &domain);
	struct node nodes[3]; /* receiver, known sender, unknown sender */
	for (int i = 0; i < 3; i++)
		open_node(info, domain, &nodes[i], FI_WAIT_NONE);
	struct node *receiver = &nodes[0], *known = &nodes[1], *stranger = &nodes[2];
	fi_addr_t known_at, receiver_at_known, receiver_at_stranger;
	CHECK(fi_av_insert(receiver->av, stranger->name, 1, NULL, 0, NULL) - 1); /* index 0 */
	CHECK(fi_av_remove(receiver->av, (fi_addr_t[]){0}, 1, 0)); /* removed: not a source */
	CHECK(fi_av_insert(receiver->av, known->name, 1, &known_at, 0, NULL) - 1);
	CHECK(fi_av_insert(known->av, receiver->name, 1, &receiver_at_known, 0, NULL) - 1);
	CHECK(fi_av_insert(stranger->av, receiver->name, 1, &receiver_at_stranger, 0, NULL) - 1);
	char in[2][16], out[2][16] = {"known", "stranger"};
	for (int i = 0; i < 2; i++)
		CHECK(fi_trecv(receiver->ep, in[i], sizeof(in[i]), NULL, FI_ADDR_UNSPEC, 7, 0,
			       NULL));
	CHECK(fi_tsend(known->ep, out[0], sizeof(out[0]), NULL, receiver_at_known, 7, NULL));
	struct fi_cq_tagged_entry entry;
	fi_addr_t source;
	read_one(nodes, 3, receiver, &entry, &source);
	if (source != known_at || strcmp(in[0], "known")) {
		fprintf(stderr, "source: the known sender's message came from %llu, not %llu\n",
			(unsigned long long)source, (unsigned long long)known_at);
		return 1;
	}
	CHECK(fi_tsend(stranger->ep, out[1], sizeof(out[1]), NULL, receiver_at_stranger, 7, NULL));
	read_one(nodes, 3, receiver, &entry, &source);
	if (source != FI_ADDR_NOTAVAIL || strcmp(in[1], "stranger")) {
		fprintf(stderr, "source: a sender the vector does not hold came from %llu\n",
			(unsigned long long)source);
		return 1;
	}
	for (int i = 0; i < 3; i++) {
		fi_close(&nodes[i].ep->fid);
		fi_close(&nodes[i].cq->fid);
		fi_close(&nodes[i].av->fid);
	}
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	printf("source: ok\n");
	return 0;
}

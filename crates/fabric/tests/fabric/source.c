/*
 * FI_SOURCE on nicmsg's provider: a receive's completion read with fi_cq_readfrom names its
 * sender by the sender's address in the receiver's address vector, or FI_ADDR_NOTAVAIL for a
 * sender the vector does not hold. Three endpoints in one process on loopback: the receiver's
 * vector holds the first sender only. Prints "source: ok" and exits 0, or says what failed.
 *
 *   cc -o source source.c -lfabric && FI_PROVIDER_PATH=DIR ./source
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                        \
	do {                                                                               \
		int check_ret_ = (int)(call);                                              \
		if (check_ret_ < 0) {                                                      \
			fprintf(stderr, "source: %s failed: %s\n", #call,                   \
				fi_strerror(-check_ret_));                                 \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

struct node {
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	char name[64];
	size_t name_len;
};

static void open_node(struct fi_info *info, struct fid_domain *domain, struct node *n)
{
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
	CHECK(fi_av_open(domain, &av_attr, &n->av, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &n->cq, NULL));
	CHECK(fi_endpoint(domain, info, &n->ep, NULL));
	CHECK(fi_ep_bind(n->ep, &n->av->fid, 0));
	CHECK(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(n->ep));
	n->name_len = sizeof(n->name);
	CHECK(fi_getname(&n->ep->fid, n->name, &n->name_len));
}

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
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_SOURCE;
	hints->fabric_attr->prov_name = strdup("nicmsg");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct node nodes[3]; /* receiver, known sender, unknown sender */
	for (int i = 0; i < 3; i++)
		open_node(info, domain, &nodes[i]);
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
	fi_freeinfo(hints);
	printf("source: ok\n");
	return 0;
}

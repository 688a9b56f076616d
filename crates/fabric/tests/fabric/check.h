/*
 * What the provider's C checks share: CHECK, which names the call that failed and exits, and
 * an endpoint on nicmsg with an address vector and a completion queue of its own. Define
 * CHECK_NAME (the program's name, for messages) before including.
 */
#ifndef NICMSG_FABRIC_CHECK_H
#define NICMSG_FABRIC_CHECK_H

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
			fprintf(stderr, CHECK_NAME ": %s failed: %s\n", #call,              \
				fi_strerror(-check_ret_));                                 \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* Says what failed (a printf format and its arguments), naming the program, and exits. */
#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, CHECK_NAME ": " __VA_ARGS__);                              \
		fputc('\n', stderr);                                                       \
		exit(1);                                                                   \
	} while (0)

/* The nicmsg provider's fabric and domain, for endpoints with `caps`; `*info` is freed by the
 * caller. */
static void open_domain(uint64_t caps, struct fi_info **info, struct fid_fabric **fabric,
			struct fid_domain **domain)
{
	struct fi_info *hints = fi_allocinfo();
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = caps;
	hints->fabric_attr->prov_name = strdup("nicmsg");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, info));
	fi_freeinfo(hints);
	CHECK(fi_fabric((*info)->fabric_attr, fabric, NULL));
	CHECK(fi_domain(*fabric, *info, domain, NULL));
}

struct node {
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	char name[64];
	size_t name_len;
};

/* An enabled endpoint whose tagged completion queue waits with `wait_obj`; its address in
 * `name`. */
static void open_node(struct fi_info *info, struct fid_domain *domain, struct node *n,
		      enum fi_wait_obj wait_obj)
{
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = wait_obj};
	CHECK(fi_av_open(domain, &av_attr, &n->av, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &n->cq, NULL));
	CHECK(fi_endpoint(domain, info, &n->ep, NULL));
	CHECK(fi_ep_bind(n->ep, &n->av->fid, 0));
	CHECK(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(n->ep));
	n->name_len = sizeof(n->name);
	CHECK(fi_getname(&n->ep->fid, n->name, &n->name_len));
}

/* The provider's domain with `caps` and two endpoints on it, `a` and `b`, whose queues wait
 * with `a_wait` and `b_wait`: what most checks start from. */
static void open_two(uint64_t caps, struct fi_info **info, struct fid_fabric **fabric,
		     struct fid_domain **domain, struct node *a, enum fi_wait_obj a_wait,
		     struct node *b, enum fi_wait_obj b_wait)
{
	open_domain(caps, info, fabric, domain);
	open_node(*info, *domain, a, a_wait);
	open_node(*info, *domain, b, b_wait);
}

/* Puts `peer`'s address into `n`'s vector; where `n` now sends to reach it. */
static fi_addr_t insert_peer(struct node *n, const struct node *peer)
{
	fi_addr_t at;
	CHECK(fi_av_insert(n->av, peer->name, 1, &at, 0, NULL) - 1);
	return at;
}

/* Closes `count` nodes (endpoint, queue, vector), then `domain` and `fabric`, checking each
 * close, and frees `info`. */
static void close_all(struct node **nodes, int count, struct fid_domain *domain,
		      struct fid_fabric *fabric, struct fi_info *info)
{
	for (int i = 0; i < count; i++) {
		CHECK(fi_close(&nodes[i]->ep->fid));
		CHECK(fi_close(&nodes[i]->cq->fid));
		CHECK(fi_close(&nodes[i]->av->fid));
	}
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
}

/* Reads one entry of `n`'s queue, or its error entry into `error` (-FI_EAVAIL), progressing
 * `other` meanwhile (whose entries are left alone: a read of none only progresses it). */
static inline ssize_t read_entry(struct node *n, struct node *other,
				 struct fi_cq_tagged_entry *entry, struct fi_cq_err_entry *error)
{
	for (long spins = 0; spins < 100000000; spins++) {
		ssize_t got = fi_cq_read(n->cq, entry, 1);
		if (got == -FI_EAVAIL) {
			memset(error, 0, sizeof(*error));
			CHECK(fi_cq_readerr(n->cq, error, 0));
			return got;
		}
		if (got != -FI_EAGAIN)
			return got;
		fi_cq_read(other->cq, NULL, 0);
	}
	FAIL("no completion");
}

#endif

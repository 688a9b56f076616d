/*
 * Objects closed in the wrong order on nicmsg's provider: each refuses with -FI_EBUSY while
 * another object still uses it, and goes on working, instead of being freed under its user.
 * An address vector bound to an endpoint (which looks addresses up in it on every send)
 * stays open, and a send through it still arrives; a second vector for the endpoint is
 * refused. A domain with endpoints, queues or vectors open, and a fabric with a domain or an
 * event queue open, refuse too (nothing of theirs was freed under a child, but the closes
 * answered 0 to a misuse). Once the children are closed, everything closes. Prints
 * "lifetime: ok" and exits 0, or says what failed.
 *
 *   cc -o lifetime lifetime.c -lfabric && FI_PROVIDER_PATH=DIR ./lifetime
 */
#define CHECK_NAME "lifetime"
#include "check.h"
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads one completion of `n`'s queue, progressing `other` meanwhile. */
static void read_one(struct node *n, struct node *other, struct fi_cq_tagged_entry *entry)
{
	for (long spins = 0; spins < 100000000; spins++) {
		ssize_t got = fi_cq_read(n->cq, entry, 1);
		if (got == 1)
			return;
		if (got != -FI_EAGAIN)
			FAIL("fi_cq_read: %s", fi_strerror((int)-got));
		struct fi_cq_tagged_entry ignored;
		fi_cq_read(other->cq, &ignored, 1);
	}
	FAIL("no completion");
}

/* The sender's vector, bound to its endpoint, is not freed by fi_close: the endpoint's next
 * send looks its destination up there. */
static void check_bound_vector(struct fid_domain *domain, struct node *sender,
			       struct node *receiver, fi_addr_t to)
{
	int closed = fi_close(&sender->av->fid);
	if (closed != -FI_EBUSY)
		FAIL("closing a vector an endpoint is bound to gave %d, not -FI_EBUSY", closed);
	struct fid_av *second;
	struct fi_av_attr attr = {.type = FI_AV_TABLE};
	CHECK(fi_av_open(domain, &attr, &second, NULL));
	int bound = fi_ep_bind(sender->ep, &second->fid, 0);
	if (bound != -FI_EINVAL)
		FAIL("binding a second vector to an endpoint gave %d, not -FI_EINVAL", bound);
	CHECK(fi_close(&second->fid));
	char in[16] = {0};
	static char message[] = "still here";
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 3, 0, in));
	CHECK(fi_tsend(sender->ep, message, sizeof(message), NULL, to, 3, message));
	struct fi_cq_tagged_entry entry;
	read_one(sender, receiver, &entry);
	read_one(receiver, sender, &entry);
	if (entry.op_context != in || strcmp(in, message))
		FAIL("the send through the vector fi_close refused did not arrive");
}

/* `fid` refuses to close while a child is open. */
static void expect_busy(const char *what, struct fid *fid)
{
	int closed = fi_close(fid);
	if (closed != -FI_EBUSY)
		FAIL("closing a %s with children open gave %d, not -FI_EBUSY", what, closed);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, receiver;
	open_two(FI_TAGGED, &info, &fabric, &domain,
		 &sender, FI_WAIT_NONE, &receiver, FI_WAIT_NONE);
	fi_addr_t to = insert_peer(&sender, &receiver);
	check_bound_vector(domain, &sender, &receiver, to);
	struct fid_eq *eq;
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_NONE};
	CHECK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	struct node *nodes[] = {&sender, &receiver};
	for (int i = 0; i < 2; i++) {
		expect_busy("domain", &domain->fid);
		CHECK(fi_close(&nodes[i]->ep->fid));
		expect_busy("domain", &domain->fid);
		CHECK(fi_close(&nodes[i]->cq->fid));
		expect_busy("domain", &domain->fid);
		CHECK(fi_close(&nodes[i]->av->fid));
	}
	expect_busy("fabric", &fabric->fid);
	CHECK(fi_close(&domain->fid));
	expect_busy("fabric", &fabric->fid);
	CHECK(fi_close(&eq->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	printf("lifetime: ok\n");
	return 0;
}

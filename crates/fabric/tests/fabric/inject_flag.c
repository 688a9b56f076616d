/*
 * FI_INJECT among an endpoint's default transmit flags (tx_attr->op_flags) on nicmsg's
 * provider: fi_tsend and fi_send return the buffer to the application at once (fi_endpoint(3)),
 * so bytes written into it right after the call are not what arrives, and the send still
 * completes; a send longer than inject_size is refused with -FI_EMSGSIZE, as FI_INJECT on
 * fi_tsendmsg is. The provider dropped the flag for these calls, so the engine (on its own
 * thread) sent whatever the buffer held by the time it read it. Prints "inject_flag: ok" and
 * exits 0, or says what failed.
 *
 *   cc -o inject_flag inject_flag.c -lfabric && FI_PROVIDER_PATH=DIR ./inject_flag
 */
#define CHECK_NAME "inject_flag"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <stdbool.h>

/* Sends of each kind: with the engine on its own thread, every one of them carried the
 * overwritten bytes. */
#define ROUNDS 20
/* Past the engine's short-message copy (256 B), which would hide the defect. */
#define MESSAGE_BYTES 1000

/* Reads one completion of `n`'s queue, progressing `other` (whose entries are left alone);
 * its context. */
static void *read_one(struct node *n, struct node *other)
{
	for (long spins = 0; spins < 100000000; spins++) {
		struct fi_cq_tagged_entry entry;
		ssize_t got = fi_cq_read(n->cq, &entry, 1);
		if (got == 1)
			return entry.op_context;
		if (got != -FI_EAGAIN)
			FAIL("fi_cq_read gave %zd", got);
		fi_cq_read(other->cq, NULL, 0); /* progress only: its entries stay */
	}
	FAIL("no completion");
}

/* A send (tagged or not) of a buffer overwritten as soon as the call returns: the receiver
 * gets the bytes of the call, and the send completes. */
static void check_send(struct node *sender, struct node *receiver, fi_addr_t to, bool tagged)
{
	static char out[MESSAGE_BYTES], in[MESSAGE_BYTES];
	static struct fi_context send, receive;
	memset(out, 'A', sizeof(out));
	memset(in, 0, sizeof(in));
	if (tagged) {
		CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 1, 0, &receive));
		CHECK(fi_tsend(sender->ep, out, sizeof(out), NULL, to, 1, &send));
	} else {
		CHECK(fi_recv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &receive));
		CHECK(fi_send(sender->ep, out, sizeof(out), NULL, to, &send));
	}
	memset(out, 'Z', sizeof(out)); /* FI_INJECT: the buffer is the application's again */
	if (read_one(receiver, sender) != &receive)
		FAIL("the receive did not complete");
	if (read_one(sender, receiver) != &send)
		FAIL("the send did not complete");
	for (size_t i = 0; i < sizeof(in); i++)
		if (in[i] != 'A')
			FAIL("%s byte %zu arrived as '%c': the buffer was read after the call returned",
			     tagged ? "fi_tsend" : "fi_send", i, in[i]);
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_MSG;
	hints->tx_attr->op_flags = FI_INJECT;
	hints->fabric_attr->prov_name = strdup("nicmsg");
	CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info));
	fi_freeinfo(hints);
	if (!(info->tx_attr->op_flags & FI_INJECT))
		FAIL("the provider dropped FI_INJECT from tx_attr->op_flags");
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct node sender, receiver;
	open_node(info, domain, &sender, FI_WAIT_NONE);
	open_node(info, domain, &receiver, FI_WAIT_NONE);
	fi_addr_t to = insert_peer(&sender, &receiver);
	for (int round = 0; round < ROUNDS; round++) {
		check_send(&sender, &receiver, to, true);
		check_send(&sender, &receiver, to, false);
	}
	size_t limit = info->tx_attr->inject_size;
	char *long_message = calloc(1, limit + 1);
	ssize_t refused = fi_tsend(sender.ep, long_message, limit + 1, NULL, to, 2, long_message);
	if (refused != -FI_EMSGSIZE)
		FAIL("fi_tsend of inject_size + 1 bytes under FI_INJECT gave %zd, not -FI_EMSGSIZE",
		     refused);
	free(long_message);
	close_all((struct node *[]){&sender, &receiver}, 2, domain, fabric, info);
	printf("inject_flag: ok\n");
	return 0;
}

/*
 * The error entry of a cancelled receive on nicmsg's provider describes no message: no
 * FI_REMOTE_CQ_DATA flag, data, tag or length. The engine leaves the rest of a cancelled
 * operation's outcome as the previous operation on its slot wrote it, so a receive cancelled
 * after one that carried remote CQ data said it had received that data (flags with
 * FI_REMOTE_CQ_DATA, the old data and tag). Cancelled twice, a receive still completes once.
 * Prints "cancel_entry: ok" and exits 0, or says what failed.
 *
 *   cc -o cancel_entry cancel_entry.c -lfabric && FI_PROVIDER_PATH=DIR ./cancel_entry
 */
#define CHECK_NAME "cancel_entry"
#include "check.h"
#include <rdma/fi_tagged.h>

#define DATA_TAG 3
#define CANCELLED_TAG 4
#define REMOTE_DATA 0x5a5a
/* Cancelled receives in a row: each may take the slot the one before it used. */
#define ROUNDS 4

/* A receive of a message with remote CQ data: what a later operation on its slot inherits. */
static void receive_with_data(struct node *sender, struct node *receiver, fi_addr_t to)
{
	static char message[8] = "data", in[8];
	static struct fi_context send, receive;
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, DATA_TAG, 0, &receive));
	CHECK(fi_tsenddata(sender->ep, message, sizeof(message), NULL, REMOTE_DATA, to, DATA_TAG,
			   &send));
	struct fi_cq_tagged_entry entry;
	struct fi_cq_err_entry error;
	if (read_entry(receiver, sender, &entry, &error) != 1 || entry.data != REMOTE_DATA ||
	    !(entry.flags & FI_REMOTE_CQ_DATA))
		FAIL("the message with remote CQ data did not arrive with it");
	if (read_entry(sender, receiver, &entry, &error) != 1 || entry.op_context != &send)
		FAIL("the send with remote CQ data did not complete");
}

/* A receive cancelled (twice) completes once, with FI_ECANCELED and nothing of a message. */
static void check_cancelled(struct node *sender, struct node *receiver)
{
	char in[8];
	struct fi_context receive;
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, CANCELLED_TAG, 0,
		       &receive));
	CHECK(fi_cancel(&receiver->ep->fid, &receive));
	ssize_t again = fi_cancel(&receiver->ep->fid, &receive);
	if (again != 0 && again != -FI_ENOENT)
		FAIL("a second fi_cancel gave %zd", again);
	struct fi_cq_tagged_entry entry;
	struct fi_cq_err_entry error;
	if (read_entry(receiver, sender, &entry, &error) != -FI_EAVAIL)
		FAIL("the cancelled receive completed without an error");
	if (error.err != FI_ECANCELED || error.op_context != &receive)
		FAIL("the cancelled receive's entry has err %d", error.err);
	if (error.flags != (FI_RECV | FI_TAGGED))
		FAIL("the cancelled receive's flags are %#llx, not FI_RECV | FI_TAGGED",
		     (unsigned long long)error.flags);
	if (error.data || error.tag || error.len || error.olen)
		FAIL("the cancelled receive reports data %#llx, tag %#llx, len %zu, olen %zu",
		     (unsigned long long)error.data, (unsigned long long)error.tag, error.len,
		     error.olen);
	if (fi_cq_read(receiver->cq, &entry, 1) != -FI_EAGAIN)
		FAIL("the receive cancelled twice completed twice");
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, receiver;
	open_two(FI_TAGGED, &info, &fabric, &domain, &sender, FI_WAIT_NONE, &receiver,
		 FI_WAIT_NONE);
	fi_addr_t to = insert_peer(&sender, &receiver);
	for (int round = 0; round < ROUNDS; round++) {
		receive_with_data(&sender, &receiver, to);
		check_cancelled(&sender, &receiver);
	}
	close_all((struct node *[]){&sender, &receiver}, 2, domain, fabric, info);
	printf("cancel_entry: ok\n");
	return 0;
}

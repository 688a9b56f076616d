/*
 * Completion semantics on nicmsg's provider. A short send completes as soon as the engine has
 * copied it (as an MPI eager send does); one sent with FI_DELIVERY_COMPLETE (or
 * FI_TRANSMIT_COMPLETE) completes only once the receiver holds the message, so a receiver
 * that is gone fails it with FI_EHOSTUNREACH instead of a success for a message that never
 * arrived. Run with NICMSG_PEER_TIMEOUT=1 so the dead receiver is given up within seconds.
 * Prints "confirmed: ok" and exits 0, or says what failed.
 *
 *   cc -o confirmed confirmed.c -lfabric && FI_PROVIDER_PATH=DIR NICMSG_PEER_TIMEOUT=1 ./confirmed
 */
#define CHECK_NAME "confirmed"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <time.h>

/* Longest wait for the two completions: the peer timeout and then some. */
#define WAIT_SECONDS 60

/* The outcome of each of the two sends: 0 until its completion, then 1 (success) or the
 * completion's error code, negated. */
static int outcome[2];

static void take(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry entry;
	ssize_t got = fi_cq_read(cq, &entry, 1);
	if (got == 1) {
		outcome[(int *)entry.op_context - outcome] = 1;
		return;
	}
	if (got == -FI_EAVAIL) {
		struct fi_cq_err_entry error = {0};
		CHECK(fi_cq_readerr(cq, &error, 0));
		outcome[(int *)error.op_context - outcome] = -error.err;
		return;
	}
	if (got != -FI_EAGAIN)
		FAIL("fi_cq_read: %s", fi_strerror((int)-got));
}

/* An outcome as words. */
static const char *describe(int outcome)
{
	if (outcome == 1)
		return "success";
	return outcome ? fi_strerror(-outcome) : "no completion";
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, gone;
	open_two(FI_TAGGED, &info, &fabric, &domain,
		 &sender, FI_WAIT_NONE, &gone, FI_WAIT_NONE);
	fi_addr_t to = insert_peer(&sender, &gone);
	/* The receiver goes away before anything reaches it: nothing answers at its address. */
	CHECK(fi_close(&gone.ep->fid));
	char bytes[100] = "a message nobody will receive";
	CHECK(fi_tsend(sender.ep, bytes, sizeof(bytes), NULL, to, 1, &outcome[0]));
	struct iovec iov = {.iov_base = bytes, .iov_len = sizeof(bytes)};
	struct fi_msg_tagged msg = {
		.msg_iov = &iov, .iov_count = 1, .addr = to, .tag = 2, .context = &outcome[1]};
	CHECK(fi_tsendmsg(sender.ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION));
	time_t start = time(NULL);
	while ((!outcome[0] || !outcome[1]) && time(NULL) - start < WAIT_SECONDS)
		take(sender.cq);
	if (outcome[0] != 1)
		FAIL("the ordinary send: %s", describe(outcome[0]));
	if (outcome[1] != -FI_EHOSTUNREACH)
		FAIL("the FI_DELIVERY_COMPLETE send: %s, not %s", describe(outcome[1]),
		     fi_strerror(FI_EHOSTUNREACH));
	CHECK(fi_close(&sender.ep->fid));
	printf("confirmed: ok\n");
	return 0;
}

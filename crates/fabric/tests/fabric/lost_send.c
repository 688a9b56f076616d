/*
 * A lost buffered send on nicmsg's provider is told. A send of 4 KiB to 64 KiB completes as
 * soon as the provider has copied it (as an MPI eager send does), so a receiver that is gone
 * cannot fail it: the message is lost after the application was told it went. The engine
 * counts such losses of the sends it completes early (NICMSG_STATS, "unconfirmed"), but it
 * holds a buffered send until its receiver has it, and its failure reached nobody: no
 * completion, no count, no word. Now the endpoint says so once on standard error, which this
 * check reads back. Prints "lost_send: ok" and exits 0, or says what failed.
 *
 *   cc -o lost_send lost_send.c -lfabric && FI_PROVIDER_PATH=DIR ./lost_send
 */
#define CHECK_NAME "lost_send"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <time.h>
#include <unistd.h>

/* Longest wait for the loss to be told: a closed port is refused at once on loopback. */
#define TOLD_WITHIN_SECONDS 20

/* What the provider writes to standard error, kept in a file of its own; the check's own
 * messages go to the standard error it had. */
static FILE *told;
static int real_stderr;

static void capture_stderr(void)
{
	told = tmpfile();
	real_stderr = dup(2);
	if (!told || real_stderr < 0 || dup2(fileno(told), 2) < 0)
		FAIL("cannot capture standard error");
}

/* Whether the provider has told of a lost send so far. */
static int loss_told(void)
{
	static char text[1 << 16];
	ssize_t len = pread(fileno(told), text, sizeof(text) - 1, 0);
	text[len > 0 ? len : 0] = 0;
	return strstr(text, "lost a message it had reported sent") != NULL;
}

static void fail_on_real_stderr(const char *what)
{
	dup2(real_stderr, 2);
	FAIL("%s", what);
}

int main(void)
{
	capture_stderr();
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, gone;
	open_two(FI_TAGGED, &info, &fabric, &domain, &sender, FI_WAIT_NONE, &gone, FI_WAIT_NONE);
	fi_addr_t to = insert_peer(&sender, &gone);
	/* The receiver goes away before anything reaches it: nothing answers at its address. */
	CHECK(fi_close(&gone.ep->fid));
	static char bytes[8192] = "a buffered message nobody will receive";
	CHECK(fi_tsend(sender.ep, bytes, sizeof(bytes), NULL, to, 1, bytes));
	int completed = 0;
	for (time_t start = time(NULL); !completed || !loss_told();) {
		struct fi_cq_tagged_entry entry;
		ssize_t got = fi_cq_read(sender.cq, &entry, 1);
		if (got == 1)
			completed = 1;
		else if (got != -FI_EAGAIN)
			fail_on_real_stderr("the buffered send did not complete as sent");
		if (time(NULL) - start > TOLD_WITHIN_SECONDS)
			fail_on_real_stderr(completed ? "the lost buffered send was not told"
						      : "the buffered send did not complete");
		usleep(1000);
	}
	CHECK(fi_close(&sender.ep->fid));
	dup2(real_stderr, 2);
	printf("lost_send: ok\n");
	return 0;
}

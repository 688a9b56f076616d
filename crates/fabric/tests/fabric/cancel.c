/*
 * fi_cancel on nicmsg's provider names an operation by its context, so a context of NULL
 * names none: fi_inject's sends have no context, and a cancel of NULL must not reach one
 * (it was withdrawn from its receiver, and no completion told the application: the message
 * silently lost). The receiver is a child process, stopped (SIGSTOP) while the parent injects
 * a message to it, so the message waits unacknowledged; the parent's fi_cancel(NULL) is
 * refused, and the child, continued, receives the message. Then a cancel of a context that
 * names no operation, and of one whose operation completed, answer -FI_ENOENT. Prints
 * "cancel: ok" and exits 0, or says what failed.
 *
 *   cc -o cancel cancel.c -lfabric && FI_PROVIDER_PATH=DIR ./cancel
 */
#define CHECK_NAME "cancel"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAG 9
/* How long the continued receiver waits for the message (it comes at the sender's next
 * retransmission, milliseconds away). */
#define RECEIVE_WITHIN_MS 3000
/* Longer than the engine's short-message copy (256 B), whose sends complete at once: this
 * one waits for the receiver's acknowledgement. */
#define MESSAGE_BYTES 1024
static char message[MESSAGE_BYTES] = "not lost";

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The child: an endpoint whose name goes to `out`, stopped until the parent continues it,
 * then a receive of the message. Exits 0 if it arrived. */
static void receive_after_stop(int out)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	open_domain(FI_TAGGED, &info, &fabric, &domain);
	struct node receiver;
	open_node(info, domain, &receiver, FI_WAIT_NONE);
	if (write(out, receiver.name, receiver.name_len) != (ssize_t)receiver.name_len)
		exit(2);
	raise(SIGSTOP);
	static char in[MESSAGE_BYTES];
	CHECK(fi_trecv(receiver.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, TAG, 0, in));
	for (double until = now_ms() + RECEIVE_WITHIN_MS; now_ms() < until;) {
		struct fi_cq_tagged_entry entry;
		ssize_t got = fi_cq_read(receiver.cq, &entry, 1);
		if (got == 1)
			exit(memcmp(in, message, sizeof(in)) ? 3 : 0);
		if (got != -FI_EAGAIN)
			exit(4);
	}
	fprintf(stderr, "cancel: the injected message never arrived\n");
	exit(5);
}

/* Reads the parent's queue for `ms` (its engine's progress, inline). */
static void poll_for(struct node *n, double ms)
{
	for (double until = now_ms() + ms; now_ms() < until;) {
		struct fi_cq_tagged_entry entry;
		fi_cq_read(n->cq, &entry, 1);
	}
}

/* An inject to a stopped receiver is not reached by fi_cancel(NULL), and arrives. */
static void check_null_cancel(struct node *sender)
{
	int pipe_fds[2];
	if (pipe(pipe_fds))
		FAIL("pipe");
	pid_t child = fork();
	if (child < 0)
		FAIL("fork");
	if (child == 0) {
		/* Not left stopped if the parent fails before it continues the child. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pipe_fds[0]);
		receive_after_stop(pipe_fds[1]);
	}
	close(pipe_fds[1]);
	char name[64];
	ssize_t len = read(pipe_fds[0], name, sizeof(name));
	int status;
	if (len <= 0 || waitpid(child, &status, WUNTRACED) != child || !WIFSTOPPED(status))
		FAIL("the receiver did not start and stop");
	fi_addr_t to;
	CHECK(fi_av_insert(sender->av, name, 1, &to, 0, NULL) - 1);
	CHECK(fi_tinject(sender->ep, message, sizeof(message), to, TAG));
	poll_for(sender, 5);
	ssize_t cancelled = fi_cancel(&sender->ep->fid, NULL);
	poll_for(sender, 20);
	kill(child, SIGCONT);
	/* The sender's engine answers the receiver while it waits for it. */
	while (waitpid(child, &status, WNOHANG) == 0)
		poll_for(sender, 1);
	if (cancelled != -FI_EINVAL)
		FAIL("fi_cancel of a NULL context gave %zd, not -FI_EINVAL", cancelled);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		FAIL("the receiver did not get the injected message (status %d)", status);
}

/* A context no operation has, and one whose receive completed, name nothing. */
static void check_unknown_cancel(struct node *sender, struct node *receiver)
{
	fi_addr_t to = insert_peer(sender, receiver);
	static char in[MESSAGE_BYTES];
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, TAG, 0, in));
	CHECK(fi_tinject(sender->ep, message, sizeof(message), to, TAG));
	struct fi_cq_tagged_entry entry;
	for (long spins = 0; fi_cq_read(receiver->cq, &entry, 1) != 1; spins++) {
		if (spins > 100000000)
			FAIL("the receive never completed");
		poll_for(sender, 0);
	}
	int unknown;
	ssize_t cancelled = fi_cancel(&receiver->ep->fid, &unknown);
	if (cancelled != -FI_ENOENT)
		FAIL("fi_cancel of an unknown context gave %zd, not -FI_ENOENT", cancelled);
	cancelled = fi_cancel(&receiver->ep->fid, in);
	if (cancelled != -FI_ENOENT)
		FAIL("fi_cancel of a completed receive gave %zd, not -FI_ENOENT", cancelled);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, receiver;
	open_two(FI_TAGGED, &info, &fabric, &domain,
		 &sender, FI_WAIT_NONE, &receiver, FI_WAIT_NONE);
	check_null_cancel(&sender);
	check_unknown_cancel(&sender, &receiver);
	close_all((struct node *[]){&sender, &receiver}, 2, domain, fabric, info);
	printf("cancel: ok\n");
	return 0;
}

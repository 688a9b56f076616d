/*
 * FI_WAIT_FD on nicmsg's provider: an application sleeps in poll(2) on its completion queue's
 * descriptor (FI_GETWAIT), after fi_trywait says it may, and wakes when a message arrives.
 * Two endpoints in one process on loopback: the receiver posts a tagged receive and sleeps;
 * a second thread sends to it 200 ms later. Checks that the descriptor stays quiet while
 * nothing completes, that the sleeper wakes within a second of the send, and that the
 * completion is there to read. Then an endpoint whose sends and receives complete to two
 * queues of their own: its send completion, moved into the send queue by the receive queue's
 * fi_trywait (which drains the engine's descriptor the two share), still makes the send
 * queue's descriptor readable. Then a receive completion behind hundreds of unreported inject
 * completions is not slept over. Last, fi_cq_sread: it times out with nothing to read, returns
 * a completion that comes while it sleeps, and returns when another thread calls
 * fi_cq_signal; and a second queue bound for the same direction is refused. Prints
 * "wait_fd: ok" and exits 0, or says what failed.
 *
 *   cc -o wait_fd wait_fd.c -lfabric -lpthread && FI_PROVIDER_PATH=DIR ./wait_fd
 */
#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#define CHECK_NAME "wait_fd"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The sender's delay, and how long the sleeper may take to wake after it. */
#define SEND_AFTER_MS 200
#define WAKE_WITHIN_MS 1000

struct sender {
	struct node *node;
	fi_addr_t to;
};

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Sends "wake up" after SEND_AFTER_MS, then reads its queue until the send completes. */
static void *send_later(void *arg)
{
	struct sender *s = arg;
	static char message[] = "wake up";
	usleep(SEND_AFTER_MS * 1000);
	CHECK(fi_tsend(s->node->ep, message, sizeof(message), NULL, s->to, 5, message));
	struct fi_cq_tagged_entry entry;
	for (long spins = 0; spins < 100000000; spins++) {
		ssize_t got = fi_cq_read(s->node->cq, &entry, 1);
		if (got == 1)
			return NULL;
		if (got != -FI_EAGAIN)
			FAIL("the sender's fi_cq_read: %s", fi_strerror((int)-got));
	}
	FAIL("the send never completed");
	return NULL;
}

/* fi_trywait, reading what it says is there; 0 once the caller may sleep. */
static void settle(struct fid_fabric *fabric, struct node *n)
{
	struct fid *fids[] = {&n->cq->fid};
	for (int tries = 0; tries < 1000; tries++) {
		int ready = fi_trywait(fabric, fids, 1);
		if (ready == 0)
			return;
		if (ready != -FI_EAGAIN)
			FAIL("fi_trywait: %s", fi_strerror(-ready));
		struct fi_cq_tagged_entry entry;
		if (fi_cq_read(n->cq, &entry, 1) == 1)
			FAIL("a completion before anything was sent");
	}
	FAIL("fi_trywait never let the application sleep");
}

/* The split endpoint's check: a send completion that the receive queue's fi_trywait moves
 * into the send queue wakes the send queue's descriptor. */
static void check_split_queues(struct fi_info *info, struct fid_fabric *fabric,
			       struct fid_domain *domain, struct node *receiver)
{
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
	struct fid_av *av;
	struct fid_cq *tx, *rx;
	struct fid_ep *ep;
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &tx, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &rx, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &tx->fid, FI_TRANSMIT));
	CHECK(fi_ep_bind(ep, &rx->fid, FI_RECV));
	CHECK(fi_enable(ep));
	int tx_fd = -1;
	CHECK(fi_control(&tx->fid, FI_GETWAIT, &tx_fd));
	fi_addr_t to;
	CHECK(fi_av_insert(av, receiver->name, 1, &to, 0, NULL) - 1);
	char in[16] = {0};
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 6, 0, in));
	struct fid *tx_only[] = {&tx->fid}, *rx_only[] = {&rx->fid};
	if (fi_trywait(fabric, tx_only, 1))
		FAIL("the idle send queue may not sleep");
	static char message[] = "split";
	CHECK(fi_tsend(ep, message, sizeof(message), NULL, to, 6, message));
	bool received = false;
	for (long round = 0; round < 2000000; round++) {
		/* The receive queue's look moves the send's completion into the send queue and
		 * drains the engine's descriptor: only the send queue's own signal is left. */
		int ready = fi_trywait(fabric, rx_only, 1);
		if (ready && ready != -FI_EAGAIN)
			FAIL("fi_trywait of the receive queue: %s", fi_strerror(-ready));
		struct fi_cq_tagged_entry other;
		if (fi_cq_read(receiver->cq, &other, 1) == 1) /* the receiver's progress */
			received = true;
		struct pollfd wake = {.fd = tx_fd, .events = POLLIN};
		if (poll(&wake, 1, 0) != 1)
			continue;
		struct fi_cq_tagged_entry entry;
		ssize_t got = fi_cq_read(tx, &entry, 1);
		if (got != 1 || entry.op_context != message)
			FAIL("the send queue woke without the send's completion (%zd)", got);
		/* The receiver's completion, unless the loop above read it already. */
		while (!received)
			received = fi_cq_read(receiver->cq, &other, 1) == 1;
		fi_close(&ep->fid);
		fi_close(&tx->fid);
		fi_close(&rx->fid);
		fi_close(&av->fid);
		return;
	}
	FAIL("the send queue's descriptor never woke for its completion");
}

/* A receive completion behind many unreported ones (injects, reported by nothing): fi_trywait
 * must not let the application sleep while the engine still holds it. */
static void check_behind_injects(struct fid_fabric *fabric, struct node *sender,
				 fi_addr_t to_receiver, struct node *receiver, fi_addr_t to_sender)
{
	enum { INJECTS = 300 };
	char in[16] = {0};
	static char ping[] = "ping", reply[] = "after";
	CHECK(fi_trecv(sender->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 8, 0, in));
	for (int i = 0; i < INJECTS; i++) {
		ssize_t sent;
		while ((sent = fi_tinject(sender->ep, ping, sizeof(ping), to_receiver, 9)) ==
		       -FI_EAGAIN) {
			struct fi_cq_tagged_entry none;
			fi_cq_read(sender->cq, &none, 1);
		}
		CHECK(sent);
	}
	char drop[16];
	for (int i = 0; i < INJECTS; i++) {
		CHECK(fi_trecv(receiver->ep, drop, sizeof(drop), NULL, FI_ADDR_UNSPEC, 9, 0, NULL));
		struct fi_cq_tagged_entry got;
		while (fi_cq_read(receiver->cq, &got, 1) != 1)
			;
	}
	CHECK(fi_tsend(receiver->ep, reply, sizeof(reply), NULL, to_sender, 8, reply));
	usleep(200 * 1000); /* every engine has finished */
	int fd = -1;
	CHECK(fi_control(&sender->cq->fid, FI_GETWAIT, &fd));
	struct fid *fids[] = {&sender->cq->fid};
	for (int round = 0; round < 10000; round++) {
		struct fi_cq_tagged_entry entry;
		struct fi_cq_tagged_entry other;
		fi_cq_read(receiver->cq, &other, 1); /* the reply's completion */
		if (fi_cq_read(sender->cq, &entry, 1) == 1) {
			if (entry.op_context != in || strcmp(in, "after"))
				FAIL("the wrong completion behind the injects");
			return;
		}
		if (fi_trywait(fabric, fids, 1) != 0)
			continue;
		struct pollfd wake = {.fd = fd, .events = POLLIN};
		if (poll(&wake, 1, 2000) != 0)
			continue;
		/* Slept the whole time: the completion must not have been there all along (each
		 * read takes a batch of what the engine holds). */
		for (int read = 0; read < 2 * INJECTS; read++)
			if (fi_cq_read(sender->cq, &entry, 1) == 1)
				FAIL("fi_trywait let the application sleep over a completion in the "
				     "engine");
	}
	FAIL("the receive behind the injects never completed");
}

/* fi_cq_sread returns when another thread calls fi_cq_signal. */
static void *signal_later(void *arg)
{
	usleep(100 * 1000);
	CHECK(fi_cq_signal((struct fid_cq *)arg));
	return NULL;
}

/* fi_cq_sread times out with nothing coming, and returns the completion of a message sent
 * while it sleeps. */
static void check_sread(struct node *receiver, struct node *sender, fi_addr_t to_receiver)
{
	struct fi_cq_tagged_entry entry;
	ssize_t got = fi_cq_sread(receiver->cq, &entry, 1, NULL, 50);
	if (got != -FI_EAGAIN)
		FAIL("fi_cq_sread with nothing to read gave %zd, not -FI_EAGAIN", got);
	char in[16] = {0};
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 5, 0, in));
	struct sender s = {.node = sender, .to = to_receiver};
	pthread_t thread;
	pthread_create(&thread, NULL, send_later, &s);
	got = fi_cq_sread(receiver->cq, &entry, 1, NULL, SEND_AFTER_MS + 10 * WAKE_WITHIN_MS);
	pthread_join(thread, NULL);
	if (got != 1 || entry.op_context != in || strcmp(in, "wake up"))
		FAIL("fi_cq_sread gave %zd for a message sent while it slept", got);
	pthread_create(&thread, NULL, signal_later, receiver->cq);
	got = fi_cq_sread(receiver->cq, &entry, 1, NULL, -1);
	pthread_join(thread, NULL);
	if (got != -FI_EAGAIN)
		FAIL("fi_cq_sread gave %zd after fi_cq_signal, not -FI_EAGAIN", got);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node receiver, sender;
	open_two(FI_TAGGED, &info, &fabric, &domain,
		 &receiver, FI_WAIT_FD, &sender, FI_WAIT_NONE);

	enum fi_wait_obj kind;
	CHECK(fi_control(&receiver.cq->fid, FI_GETWAITOBJ, &kind));
	if (kind != FI_WAIT_FD)
		FAIL("FI_GETWAITOBJ says %d, not FI_WAIT_FD", (int)kind);
	int fd = -1;
	CHECK(fi_control(&receiver.cq->fid, FI_GETWAIT, &fd));
	struct fid *plain[] = {&sender.cq->fid};
	if (fi_trywait(fabric, plain, 1) != -FI_EINVAL)
		FAIL("fi_trywait on a queue without a descriptor is not refused");

	fi_addr_t to_receiver = insert_peer(&sender, &receiver);
	char in[16] = {0};
	CHECK(fi_trecv(receiver.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 5, 0, in));

	/* Nothing sent yet: the descriptor stays quiet. */
	settle(fabric, &receiver);
	struct pollfd quiet = {.fd = fd, .events = POLLIN};
	if (poll(&quiet, 1, 100) != 0)
		FAIL("the descriptor is readable with nothing completed");

	struct sender s = {.node = &sender, .to = to_receiver};
	pthread_t thread;
	double sent_from = now_ms();
	pthread_create(&thread, NULL, send_later, &s);
	struct fi_cq_tagged_entry entry;
	for (;;) {
		settle(fabric, &receiver);
		struct pollfd wake = {.fd = fd, .events = POLLIN};
		int woke = poll(&wake, 1, SEND_AFTER_MS + 10 * WAKE_WITHIN_MS);
		if (woke <= 0)
			FAIL("asleep %.0f ms: the message never woke the descriptor",
			     now_ms() - sent_from);
		ssize_t got = fi_cq_read(receiver.cq, &entry, 1);
		if (got == 1)
			break;
		if (got != -FI_EAGAIN)
			FAIL("fi_cq_read: %s", fi_strerror((int)-got));
	}
	double waited = now_ms() - sent_from;
	pthread_join(thread, NULL);
	if (entry.op_context != in || entry.tag != 5 || strcmp(in, "wake up"))
		FAIL("the wrong completion: context %p, tag %llu, \"%s\"", entry.op_context,
		     (unsigned long long)entry.tag, in);
	if (waited > SEND_AFTER_MS + WAKE_WITHIN_MS)
		FAIL("woke %.0f ms after the send", waited - SEND_AFTER_MS);

	check_split_queues(info, fabric, domain, &receiver);
	insert_peer(&receiver, &sender);
	struct node fd_sender;
	open_node(info, domain, &fd_sender, FI_WAIT_FD);
	fi_addr_t fd_to_receiver = insert_peer(&fd_sender, &receiver);
	fi_addr_t receiver_to_fd = insert_peer(&receiver, &fd_sender);
	check_behind_injects(fabric, &fd_sender, fd_to_receiver, &receiver, receiver_to_fd);
	check_sread(&receiver, &sender, to_receiver);
	struct fid_cq *second;
	struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_TAGGED};
	CHECK(fi_cq_open(domain, &attr, &second, NULL));
	if (fi_ep_bind(receiver.ep, &second->fid, FI_TRANSMIT) != -FI_EINVAL)
		FAIL("a second send queue for one endpoint is not refused");
	fi_close(&second->fid);
	fi_close(&fd_sender.ep->fid);
	fi_close(&fd_sender.cq->fid);
	fi_close(&fd_sender.av->fid);

	fi_close(&receiver.ep->fid);
	fi_close(&sender.ep->fid);
	fi_close(&receiver.cq->fid);
	fi_close(&sender.cq->fid);
	fi_close(&receiver.av->fid);
	fi_close(&sender.av->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	printf("wait_fd: ok, woke %.1f ms after the send\n", waited - SEND_AFTER_MS);
	return 0;
}

/*
 * Buffered sends on nicmsg's provider. A send longer than the inject size and up to 64 KiB
 * that asks for no completion semantics completes as soon as the provider has copied it, also
 * while its receiver posts no receive at all: Open MPI's MPI_Send of such a message waits for
 * that completion, and two ranks that send many before receiving (MPI calls it unsafe; Open
 * MPI on TCP runs it) used to wait for ever once the engine's 32 send copies were taken. Each
 * send's buffer is overwritten as soon as its completion is read, and the receiver, which
 * posts its receives only after all the sends completed, checks every byte and the order.
 * Prints "buffered: ok" and exits 0, or says what failed.
 *
 *   cc -o buffered buffered.c -lfabric && FI_PROVIDER_PATH=DIR ./buffered
 */
#define CHECK_NAME "buffered"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <time.h>

/* Sends before any receive: several times the engine's send copies and the receiver's
 * credits, each size once. */
#define SENDS 200
/* Longest wait for one send's completion: a buffered send needs none at all. */
#define COMPLETION_WAIT_MS 2000
/* Longest wait for one receive (the message may need retransmissions on a loaded machine). */
#define RECEIVE_WAIT_SECONDS 20

static const size_t sizes[] = {4097, 8192, 65536};

static unsigned char pattern(size_t size_index, int seq, size_t i)
{
	return (unsigned char)(size_index * 61 + seq * 7 + i * 13 + (i >> 8));
}

/* Sends SENDS messages of `len` bytes tagged `tag`, each waited for before the next, and
 * overwrites the buffer once its completion is read. */
static void send_all(struct node *sender, fi_addr_t to, size_t size_index, uint64_t tag,
		     unsigned char *buf)
{
	size_t len = sizes[size_index];
	for (int seq = 0; seq < SENDS; seq++) {
		for (size_t i = 0; i < len; i++)
			buf[i] = pattern(size_index, seq, i);
		ssize_t ret;
		do
			ret = fi_tsend(sender->ep, buf, len, NULL, to, tag, &buf[0]);
		while (ret == -FI_EAGAIN && fi_cq_read(sender->cq, NULL, 0) >= -FI_EAGAIN);
		CHECK(ret);
		struct fi_cq_tagged_entry entry;
		ssize_t got = fi_cq_sread(sender->cq, &entry, 1, NULL, COMPLETION_WAIT_MS);
		if (got != 1)
			FAIL("send %d of %zu bytes, its receiver posting nothing: %s after %d ms",
			     seq, len, got < 0 ? fi_strerror((int)-got) : "no completion",
			     COMPLETION_WAIT_MS);
		if (entry.op_context != &buf[0] || !(entry.flags & FI_SEND))
			FAIL("send %d of %zu bytes: a completion not of this send", seq, len);
		memset(buf, 0xEE, len);
	}
}

/* The next completion of `receiver`'s queue, polling `sender`'s meanwhile: the sends held
 * in the provider beyond the engine's room go to the engine in the sender endpoint's calls,
 * as a program that sends and receives on one endpoint (an MPI rank) makes them. */
static ssize_t next_receive(struct node *receiver, struct node *sender,
			    struct fi_cq_tagged_entry *entry)
{
	time_t start = time(NULL);
	while (time(NULL) - start < RECEIVE_WAIT_SECONDS) {
		ssize_t got = fi_cq_read(receiver->cq, entry, 1);
		if (got != -FI_EAGAIN)
			return got;
		got = fi_cq_read(sender->cq, NULL, 0);
		if (got < 0 && got != -FI_EAGAIN)
			return got;
	}
	return -FI_ETIMEDOUT;
}

/* Receives the SENDS messages of `tag` in order and checks every byte. */
static void receive_all(struct node *receiver, struct node *sender, size_t size_index,
			uint64_t tag, unsigned char *buf)
{
	size_t len = sizes[size_index];
	for (int seq = 0; seq < SENDS; seq++) {
		CHECK(fi_trecv(receiver->ep, buf, len, NULL, FI_ADDR_UNSPEC, tag, 0, &buf[0]));
		struct fi_cq_tagged_entry entry;
		ssize_t got = next_receive(receiver, sender, &entry);
		if (got != 1)
			FAIL("receive %d of %zu bytes: %s", seq, len,
			     got < 0 ? fi_strerror((int)-got) : "no completion");
		if (entry.len != len)
			FAIL("receive %d: %zu bytes, want %zu", seq, (size_t)entry.len, len);
		for (size_t i = 0; i < len; i++)
			if (buf[i] != pattern(size_index, seq, i))
				FAIL("receive %d of %zu bytes: byte %zu is %u, want %u (lost, "
				     "reordered or overwritten)",
				     seq, len, i, buf[i], pattern(size_index, seq, i));
	}
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, receiver;
	open_two(FI_TAGGED, &info, &fabric, &domain, &sender, FI_WAIT_FD, &receiver,
		 FI_WAIT_FD);
	fi_addr_t to = insert_peer(&sender, &receiver);
	unsigned char *buf = malloc(65536);
	if (!buf)
		FAIL("out of memory");
	size_t kinds = sizeof(sizes) / sizeof(sizes[0]);
	for (size_t s = 0; s < kinds; s++)
		send_all(&sender, to, s, 100 + s, buf);
	for (size_t s = 0; s < kinds; s++)
		receive_all(&receiver, &sender, s, 100 + s, buf);
	free(buf);
	struct node *nodes[] = {&sender, &receiver};
	close_all(nodes, 2, domain, fabric, info);
	printf("buffered: ok\n");
	return 0;
}

/*
 * An MPI program that checks what Open MPI needs from nicmsg's libfabric provider, every byte
 * verified: point-to-point of sizes 0 B to 4 MiB (eager and rendezvous), MPI_ANY_SOURCE and
 * MPI_ANY_TAG, MPI_Probe and MPI_Iprobe, MPI_Mprobe and MPI_Improbe (matched probes, received
 * with MPI_Mrecv and MPI_Imrecv), MPI_Cancel of a receive, MPI_ERR_TRUNCATE, several
 * communicators, MPI_Ssend, sends of 16 B to 64 KiB both ways before any receive (buffering),
 * a thousand nonblocking sends and receives each way posted before any wait, a receive
 * posted behind 300 pending ones that takes the message already there for it, and the
 * collectives Open MPI builds on point-to-point (barrier, bcast, allreduce, alltoall). Any failure prints what and where and exits non-zero; rank 0
 * prints "mpi_check: all checks passed" at the end.
 *
 *   mpirun -n 4 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include nicmsg ./mpi_check
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "mpi_check rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                                      \
			fprintf(stderr, "\n");                                             \
			MPI_Abort(MPI_COMM_WORLD, 1);                                      \
		}                                                                          \
	} while (0)

/* The byte at `i` of the message `seq` from `src`: every message distinct. */
static unsigned char pattern(int src, int seq, size_t i)
{
	return (unsigned char)(src * 31 + seq * 7 + i * 13 + (i >> 8));
}

static void fill(unsigned char *buf, size_t len, int src, int seq)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(src, seq, i);
}

static void verify(const unsigned char *buf, size_t len, int src, int seq, const char *what)
{
	for (size_t i = 0; i < len; i++)
		CHECK(buf[i] == pattern(src, seq, i), "%s: byte %zu of %zu from %d seq %d is %u",
		      what, i, len, src, seq, buf[i]);
}

/* Every size from 0 B to 4 MiB, each rank to the next one around the ring. */
static void point_to_point_sizes(void)
{
	static const size_t sizes[] = {0, 1, 7, 64, 255, 1024, 1400, 4096, 8192, 8193,
				       65536, 100000, 1 << 20, 4 << 20};
	size_t count = sizeof(sizes) / sizeof(sizes[0]);
	unsigned char *out = malloc(4 << 20), *in = malloc(4 << 20);
	int to = (rank + 1) % size, from = (rank + size - 1) % size;
	for (size_t s = 0; s < count; s++) {
		size_t len = sizes[s];
		fill(out, len, rank, (int)s);
		memset(in, 0xEE, len);
		MPI_Status status;
		MPI_Sendrecv(out, (int)len, MPI_BYTE, to, (int)s, in, (int)len, MPI_BYTE, from,
			     (int)s, MPI_COMM_WORLD, &status);
		int got;
		MPI_Get_count(&status, MPI_BYTE, &got);
		CHECK((size_t)got == len && status.MPI_SOURCE == from && status.MPI_TAG == (int)s,
		      "size %zu: got %d bytes from %d tag %d", len, got, status.MPI_SOURCE,
		      status.MPI_TAG);
		verify(in, len, from, (int)s, "point-to-point");
	}
	free(out);
	free(in);
}

/* Rank 0 takes one message from every other rank with wildcards, in any order, and each
 * sender's messages in the order sent (MPI's non-overtaking rule). */
static void wildcards(void)
{
	const int per_rank = 5;
	if (rank == 0) {
		int next[64] = {0};
		for (int n = 0; n < per_rank * (size - 1); n++) {
			unsigned char buf[300];
			MPI_Status status;
			MPI_Recv(buf, sizeof(buf), MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
				 MPI_COMM_WORLD, &status);
			int src = status.MPI_SOURCE, seq = status.MPI_TAG - 100;
			CHECK(src > 0 && src < size, "any source gave %d", src);
			CHECK(seq == next[src], "from %d: message %d before %d (overtaken)", src,
			      seq, next[src]);
			verify(buf, 100 + seq, src, seq, "wildcard");
			next[src]++;
		}
	} else {
		for (int seq = 0; seq < per_rank; seq++) {
			unsigned char buf[300];
			fill(buf, 100 + seq, rank, seq);
			MPI_Send(buf, 100 + seq, MPI_BYTE, 0, 100 + seq, MPI_COMM_WORLD);
		}
	}
}

/* MPI_Probe and MPI_Iprobe report a message's source, tag and size without taking it. */
static void probes(void)
{
	if (rank == 1) {
		unsigned char buf[5000];
		fill(buf, sizeof(buf), rank, 42);
		MPI_Send(buf, sizeof(buf), MPI_BYTE, 0, 42, MPI_COMM_WORLD);
	} else if (rank == 0) {
		MPI_Status status;
		MPI_Probe(MPI_ANY_SOURCE, 42, MPI_COMM_WORLD, &status);
		int len;
		MPI_Get_count(&status, MPI_BYTE, &len);
		CHECK(status.MPI_SOURCE == 1 && len == 5000, "probe: %d bytes from %d", len,
		      status.MPI_SOURCE);
		int flag = 0;
		MPI_Iprobe(1, 42, MPI_COMM_WORLD, &flag, &status);
		CHECK(flag, "iprobe does not see the message probe saw");
		MPI_Iprobe(1, 43, MPI_COMM_WORLD, &flag, &status);
		CHECK(!flag, "iprobe of a tag nobody sent found something");
		unsigned char *buf = malloc(len);
		MPI_Recv(buf, len, MPI_BYTE, 1, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		verify(buf, len, 1, 42, "probed");
		free(buf);
	}
}

/* MPI_Mprobe and MPI_Improbe claim a message: only the MPI_Mrecv or MPI_Imrecv of it gets
 * it, a receive posted after the claim takes the sender's next message, and a sender's
 * messages are claimed in its order. Every rank but 0 sends rank 0 a short (eager) and a long
 * (rendezvous) message. */
static void matched_probes(void)
{
	enum { SHORT = 100, LONG = 300000, TAG = 50 };
	unsigned char *buf = malloc(LONG), *first = malloc(SHORT);
	if (rank != 0) {
		fill(buf, SHORT, rank, 1);
		MPI_Send(buf, SHORT, MPI_BYTE, 0, TAG, MPI_COMM_WORLD);
		fill(buf, LONG, rank, 2);
		MPI_Send(buf, LONG, MPI_BYTE, 0, TAG, MPI_COMM_WORLD);
		free(buf);
		free(first);
		return;
	}
	MPI_Message message;
	MPI_Status status;
	int len;
	MPI_Mprobe(1, TAG, MPI_COMM_WORLD, &message, &status);
	MPI_Get_count(&status, MPI_BYTE, &len);
	CHECK(status.MPI_SOURCE == 1 && status.MPI_TAG == TAG && len == SHORT,
	      "mprobe: %d bytes from %d tag %d", len, status.MPI_SOURCE, status.MPI_TAG);
	MPI_Request later;
	MPI_Irecv(buf, LONG, MPI_BYTE, 1, TAG, MPI_COMM_WORLD, &later);
	MPI_Mrecv(first, SHORT, MPI_BYTE, &message, &status);
	CHECK(message == MPI_MESSAGE_NULL, "mrecv left its message handle set");
	verify(first, SHORT, 1, 1, "mrecv");
	MPI_Wait(&later, &status);
	MPI_Get_count(&status, MPI_BYTE, &len);
	CHECK(len == LONG, "the receive posted after a claim got %d bytes", len);
	verify(buf, LONG, 1, 2, "receive posted after a claim");
	int claimed[64] = {0};
	for (int left = 2 * (size - 2); left > 0; left--) {
		int flag = 0;
		while (!flag)
			MPI_Improbe(MPI_ANY_SOURCE, TAG, MPI_COMM_WORLD, &flag, &message, &status);
		int src = status.MPI_SOURCE;
		CHECK(src >= 2 && src < size, "improbe: a message from %d", src);
		int seq = ++claimed[src];
		MPI_Get_count(&status, MPI_BYTE, &len);
		CHECK(len == (seq == 1 ? SHORT : LONG), "improbe: message %d of %d has %d bytes", seq,
		      src, len);
		MPI_Request request;
		MPI_Imrecv(buf, len, MPI_BYTE, &message, &request);
		MPI_Wait(&request, &status);
		verify(buf, len, src, seq, "imrecv");
	}
	free(buf);
	free(first);
}

/* A receive nothing will match is cancelled. */
static void cancel(void)
{
	unsigned char buf[16];
	MPI_Request request;
	MPI_Irecv(buf, sizeof(buf), MPI_BYTE, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &request);
	MPI_Cancel(&request);
	MPI_Status status;
	MPI_Wait(&request, &status);
	int cancelled = 0;
	MPI_Test_cancelled(&status, &cancelled);
	CHECK(cancelled, "a receive nothing matches was not cancelled");
}

/* A message longer than its receive buffer gives MPI_ERR_TRUNCATE, and the next message is
 * received normally. */
static void truncation(void)
{
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == 1) {
		unsigned char buf[2000];
		fill(buf, sizeof(buf), rank, 7);
		MPI_Send(buf, sizeof(buf), MPI_BYTE, 0, 7, MPI_COMM_WORLD);
		MPI_Send(buf, 10, MPI_BYTE, 0, 8, MPI_COMM_WORLD);
	} else if (rank == 0) {
		unsigned char small[100];
		MPI_Status status;
		int rc = MPI_Recv(small, sizeof(small), MPI_BYTE, 1, 7, MPI_COMM_WORLD, &status);
		int class;
		MPI_Error_class(rc, &class);
		CHECK(class == MPI_ERR_TRUNCATE, "a 2000-byte message into 100 bytes gave %d", class);
		CHECK(status.MPI_SOURCE == 1 && status.MPI_TAG == 7,
		      "the truncated receive names source %d tag %d", status.MPI_SOURCE,
		      status.MPI_TAG);
		rc = MPI_Recv(small, sizeof(small), MPI_BYTE, 1, 8, MPI_COMM_WORLD, &status);
		CHECK(rc == MPI_SUCCESS, "the message after a truncated one failed: %d", rc);
		verify(small, 10, 1, 7, "after truncation");
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Messages of one communicator never match receives of another, wildcards or not. */
static void communicators(void)
{
	MPI_Comm dup, half;
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
	int to = (rank + 1) % size, from = (rank + size - 1) % size;
	int world_value = 1000 + rank, dup_value = 2000 + rank, got_world, got_dup;
	MPI_Request requests[4];
	/* Posted so that the dup's receive could take the world's message if contexts mixed. */
	MPI_Irecv(&got_dup, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &requests[0]);
	MPI_Irecv(&got_world, 1, MPI_INT, from, 5, MPI_COMM_WORLD, &requests[1]);
	MPI_Isend(&world_value, 1, MPI_INT, to, 5, MPI_COMM_WORLD, &requests[2]);
	MPI_Isend(&dup_value, 1, MPI_INT, to, 5, dup, &requests[3]);
	MPI_Waitall(4, requests, MPI_STATUSES_IGNORE);
	CHECK(got_world == 1000 + from && got_dup == 2000 + from,
	      "communicators mixed: world got %d, dup got %d", got_world, got_dup);
	int half_rank, half_sum, half_size;
	MPI_Comm_rank(half, &half_rank);
	MPI_Comm_size(half, &half_size);
	MPI_Allreduce(&rank, &half_sum, 1, MPI_INT, MPI_SUM, half);
	int want = 0;
	for (int r = rank % 2; r < size; r += 2)
		want += r;
	CHECK(half_sum == want, "allreduce over a split communicator: %d, want %d", half_sum,
	      want);
	MPI_Comm_free(&dup);
	MPI_Comm_free(&half);
}

/* MPI_Ssend completes only once the receive has matched. */
static void synchronous(void)
{
	if (rank == 0) {
		unsigned char buf[64];
		fill(buf, sizeof(buf), rank, 3);
		MPI_Ssend(buf, sizeof(buf), MPI_BYTE, 1, 3, MPI_COMM_WORLD);
	} else if (rank == 1) {
		unsigned char buf[64];
		MPI_Recv(buf, sizeof(buf), MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		verify(buf, sizeof(buf), 0, 3, "ssend");
	}
}

/* Pairs of ranks (0 and 1, 2 and 3, ...) each send many messages to the other before
 * receiving any: a program that relies on buffering (MPI calls it unsafe; Open MPI on TCP runs
 * it up to its 64 KiB eager limit). The provider holds the injected sends (up to 4 KiB) its
 * engine has no room for, and buffers longer ones up to 64 KiB; both used to wait for ever,
 * the ranks spinning in MPI_Send: the short ones always, 8 KiB ones past about fifty. */
static const struct {
	size_t len;
	int count;
} buffered[] = {{16, 1500}, {8192, 300}, {65536, 100}};

static void buffered_sends_both_ways(void)
{
	int peer = rank ^ 1;
	if (peer >= size)
		return;
	unsigned char *buf = malloc(65536);
	CHECK(buf, "out of memory");
	for (size_t b = 0; b < sizeof(buffered) / sizeof(buffered[0]); b++) {
		size_t len = buffered[b].len;
		int tag = 4 + (int)b;
		for (int seq = 0; seq < buffered[b].count; seq++) {
			fill(buf, len, rank, seq);
			MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
		}
		for (int seq = 0; seq < buffered[b].count; seq++) {
			MPI_Recv(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			verify(buf, len, peer, seq, "buffered send");
		}
	}
	free(buf);
}

/* Pairs of ranks each post NONBLOCKING sends to the other and as many receives (sends first,
 * then receives first), then wait for all: a program MPI calls safe. Past the engine's room
 * (512 operations in the library's table of 640 slots) the provider used to refuse the posts
 * with -FI_EAGAIN, which Open MPI retries for ever: both ranks spun in their 385th MPI_Isend,
 * each waiting for the other's posts. (The provider's table now has 16,384 slots, and holds
 * what does not fit: tests/fabric/held.c.) Every hundredth message is long (rendezvous). */
#define NONBLOCKING 1000
static size_t nonblocking_len(int seq)
{
	return seq % 100 == 99 ? 100000 : 16;
}

static void many_nonblocking_both_ways(void)
{
	int peer = rank ^ 1;
	if (peer >= size)
		return;
	unsigned char **out = malloc(NONBLOCKING * sizeof(*out));
	unsigned char **in = malloc(NONBLOCKING * sizeof(*in));
	MPI_Request *requests = malloc(2 * NONBLOCKING * sizeof(*requests));
	CHECK(out && in && requests, "out of memory");
	for (int seq = 0; seq < NONBLOCKING; seq++) {
		out[seq] = malloc(nonblocking_len(seq));
		in[seq] = malloc(nonblocking_len(seq));
		CHECK(out[seq] && in[seq], "out of memory");
		fill(out[seq], nonblocking_len(seq), rank, seq);
	}
	for (int receives_first = 0; receives_first < 2; receives_first++) {
		for (int part = 0; part < 2; part++) {
			bool sends = part != receives_first;
			for (int seq = 0; seq < NONBLOCKING; seq++) {
				int len = (int)nonblocking_len(seq);
				if (sends)
					MPI_Isend(out[seq], len, MPI_BYTE, peer, 8, MPI_COMM_WORLD,
						  &requests[seq]);
				else
					MPI_Irecv(in[seq], len, MPI_BYTE, peer, 8, MPI_COMM_WORLD,
						  &requests[NONBLOCKING + seq]);
			}
		}
		MPI_Waitall(2 * NONBLOCKING, requests, MPI_STATUSES_IGNORE);
		for (int seq = 0; seq < NONBLOCKING; seq++)
			verify(in[seq], nonblocking_len(seq), peer, seq, "nonblocking");
	}
	for (int seq = 0; seq < NONBLOCKING; seq++) {
		free(out[seq]);
		free(in[seq]);
	}
	free(out);
	free(in);
	free(requests);
}

/* Each pair's lower rank posts PENDING receives for results its peer sends only once
 * answered, then receives the peer's request, answers, and waits for the results: a program
 * MPI calls safe (a master posts MPI_Irecv for its workers' results, then serves requests).
 * The request's receive waited behind the receives held past a share of 128 in the engine,
 * whose messages were never to come, and both ranks hung. */
#define PENDING 300
static void a_request_behind_pending_receives(void)
{
	int peer = rank ^ 1;
	if (peer >= size)
		return;
	int results[PENDING], request = 0, answer = 0;
	if (rank < peer) {
		MPI_Request pending[PENDING];
		for (int i = 0; i < PENDING; i++)
			MPI_Irecv(&results[i], 1, MPI_INT, peer, 20, MPI_COMM_WORLD, &pending[i]);
		MPI_Recv(&request, 1, MPI_INT, peer, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		answer = request + 1;
		MPI_Send(&answer, 1, MPI_INT, peer, 22, MPI_COMM_WORLD);
		MPI_Waitall(PENDING, pending, MPI_STATUSES_IGNORE);
		for (int i = 0; i < PENDING; i++)
			CHECK(results[i] == i, "result %d is %d", i, results[i]);
	} else {
		request = 41;
		MPI_Send(&request, 1, MPI_INT, peer, 21, MPI_COMM_WORLD);
		MPI_Recv(&answer, 1, MPI_INT, peer, 22, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		CHECK(answer == 42, "the answer is %d", answer);
		for (int i = 0; i < PENDING; i++)
			MPI_Send(&i, 1, MPI_INT, peer, 20, MPI_COMM_WORLD);
	}
}

static void collectives(void)
{
	MPI_Barrier(MPI_COMM_WORLD);
	size_t len = 1 << 20;
	unsigned char *buf = malloc(len);
	if (rank == 0)
		fill(buf, len, 0, 77);
	MPI_Bcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
	verify(buf, len, 0, 77, "bcast");
	free(buf);
	long mine[1000], sum[1000];
	for (int i = 0; i < 1000; i++)
		mine[i] = (long)rank * i;
	MPI_Allreduce(mine, sum, 1000, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	long ranks = (long)size * (size - 1) / 2;
	for (int i = 0; i < 1000; i++)
		CHECK(sum[i] == ranks * i, "allreduce[%d] = %ld, want %ld", i, sum[i], ranks * i);
	int block = 3000;
	unsigned char *out = malloc((size_t)block * size), *in = malloc((size_t)block * size);
	for (int r = 0; r < size; r++)
		fill(out + (size_t)r * block, block, rank, r);
	MPI_Alltoall(out, block, MPI_BYTE, in, block, MPI_BYTE, MPI_COMM_WORLD);
	for (int r = 0; r < size; r++)
		verify(in + (size_t)r * block, block, r, rank, "alltoall");
	free(out);
	free(in);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	CHECK(size >= 2 && size <= 64, "run with 2 to 64 ranks, not %d", size);
	/* A barrier after each check: the wildcard receives of one must not take another's
	 * messages. */
	void (*checks[])(void) = {point_to_point_sizes, wildcards,     probes,
				  matched_probes,       cancel,        truncation,
				  communicators,        synchronous,   buffered_sends_both_ways,
				  many_nonblocking_both_ways, a_request_behind_pending_receives,
				  collectives};
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		checks[i]();
		MPI_Barrier(MPI_COMM_WORLD);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: all checks passed on %d ranks\n", size);
	MPI_Finalize();
	return 0;
}

/*
 * A rank may leave thousands of messages unmatched and take them in any order. Three phases:
 *
 *   gather:  every rank but 0 posts 600 sends of 8 bytes to rank 0 before any receive; rank 0
 *            takes them one sender at a time, the last rank first. With 4 ranks and room for
 *            1,024 unmatched messages in all, the other two senders' 1,200 filled it and the
 *            first sender's 480th message never came in.
 *   reverse: rank 1 posts 8,000 sends to rank 0 (every third of 20,000 bytes, the others of
 *            8), and rank 0 takes them in reverse order of tags, the last one first. With a
 *            window of 1,024 unfinished messages a pair (later 4,096, with 2,000 and then
 *            5,000 sends), rank 1 waited for the first ones to be taken before it sent the
 *            rest, and rank 0 waited for the last. 8,000 is near the 9,144 sends one
 *            destination may have in the provider's engine.
 *
 *   prepost: rank 0 posts 1,000 receives from every other rank (the last rank's first), then
 *            all ranks enter a barrier, then the others send: the usual way to have every
 *            receive posted before its message comes. With an engine of 4,096 slots, 2,976
 *            receives took its room, the barrier's receive waited in the provider behind the
 *            rest, and the other ranks waited in the barrier for rank 0.
 *
 * Every byte is checked. Rank 0 gives up after `seconds` (argument 1, default 20) and aborts
 * the job, naming the message it waited for.
 *
 *   mpirun -n 4 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include nicmsg \
 *       ./unmatched_many
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define GATHERED 600
#define REVERSED 8000
#define LONG_LEN 20000
#define PREPOSTED 1000

static char fill(int sender, int message, size_t at)
{
	return (char)(sender * 31 + message * 7 + at);
}

static size_t reversed_len(int message)
{
	return message % 3 == 0 ? LONG_LEN : 8;
}

/* Where message `message` of a phase sits in `buffers`: each run of three messages takes one
 * long message's bytes and two short ones'. */
static char *slot(char *buffers, int message)
{
	size_t run = (size_t)(message / 3) * (LONG_LEN + 16);
	return buffers + run + (message % 3 == 0 ? 0 : LONG_LEN + (size_t)(message % 3 - 1) * 8);
}

/* Posts `count` sends to rank 0, message i of `len(i)` bytes with tag i, and waits for all. */
static void send_all(int rank, int count, size_t (*len)(int), char *buffers)
{
	MPI_Request *requests = malloc(sizeof(MPI_Request) * count);
	for (int i = 0; i < count; i++) {
		char *buffer = slot(buffers, i);
		for (size_t at = 0; at < len(i); at++)
			buffer[at] = fill(rank, i, at);
		MPI_Isend(buffer, (int)len(i), MPI_CHAR, 0, i, MPI_COMM_WORLD, &requests[i]);
	}
	MPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
	free(requests);
}

/* Receives message `tag` of `len` bytes from `sender`, or aborts the job after `until`. */
static int receive_one(int sender, int tag, size_t len, char *buffer, double until,
		       const char *phase)
{
	MPI_Request request;
	int done = 0, failed = 0;
	MPI_Irecv(buffer, (int)len, MPI_CHAR, sender, tag, MPI_COMM_WORLD, &request);
	while (!done && MPI_Wtime() < until)
		MPI_Test(&request, &done, MPI_STATUS_IGNORE);
	if (!done) {
		fprintf(stderr, "unmatched_many: %s: message %d of rank %d never came\n", phase,
			tag, sender);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (size_t at = 0; at < len; at++)
		failed |= buffer[at] != fill(sender, tag, at);
	return failed;
}

static size_t gathered_len(int message)
{
	(void)message;
	return 8;
}

/* The prepost phase; rank 0 returns whether a byte differed. */
static int prepost(int rank, int size, double seconds)
{
	long *values = malloc(sizeof(long) * PREPOSTED * size);
	MPI_Request *requests = malloc(sizeof(MPI_Request) * PREPOSTED * size);
	int posted = 0, failed = 0;
	if (rank == 0)
		for (int sender = size - 1; sender > 0; sender--)
			for (int i = 0; i < PREPOSTED; i++)
				MPI_Irecv(&values[sender * PREPOSTED + i], 1, MPI_LONG, sender, i,
					  MPI_COMM_WORLD, &requests[posted++]);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank != 0)
		for (int i = 0; i < PREPOSTED; i++) {
			values[i] = rank * 1000000L + i;
			MPI_Isend(&values[i], 1, MPI_LONG, 0, i, MPI_COMM_WORLD, &requests[posted++]);
		}
	double until = MPI_Wtime() + seconds;
	int done = 0;
	while (!done && MPI_Wtime() < until)
		MPI_Testall(posted, requests, &done, MPI_STATUSES_IGNORE);
	if (!done) {
		fprintf(stderr, "unmatched_many: prepost: rank %d's operations never finished\n",
			rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (rank == 0)
		for (int sender = 1; sender < size; sender++)
			for (int i = 0; i < PREPOSTED; i++)
				failed |= values[sender * PREPOSTED + i] != sender * 1000000L + i;
	free(values);
	free(requests);
	return failed;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size, failed = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	double seconds = argc > 1 ? atof(argv[1]) : 20.0;
	char *buffers = malloc((size_t)(REVERSED / 3 + 1) * (LONG_LEN + 16));

	if (rank != 0) {
		send_all(rank, GATHERED, gathered_len, buffers);
	} else {
		double until = MPI_Wtime() + seconds;
		for (int sender = size - 1; sender > 0; sender--)
			for (int i = 0; i < GATHERED; i++)
				failed |= receive_one(sender, i, 8, buffers, until, "gather");
	}
	MPI_Barrier(MPI_COMM_WORLD);

	if (rank == 1) {
		send_all(rank, REVERSED, reversed_len, buffers);
	} else if (rank == 0) {
		double until = MPI_Wtime() + seconds;
		for (int i = REVERSED - 1; i >= 0; i--)
			failed |= receive_one(1, i, reversed_len(i), slot(buffers, i), until,
					      "reverse");
	}
	MPI_Barrier(MPI_COMM_WORLD);

	failed |= prepost(rank, size, seconds);
	if (rank == 0)
		printf("unmatched_many: %s\n", failed ? "FAILED" : "every byte arrived");
	free(buffers);
	MPI_Finalize();
	return failed;
}

/*
 * A send to a destination with nothing in the engine finds room however many destinations
 * flood. Rank 0 posts SENDS rendezvous-sized sends (100 KiB) to each of ranks 1 .. size-2,
 * one destination after another, far more than an engine of 256 slots takes
 * (NICMSG_SLOTS=256: room for 153 sends), then a short send to the last rank, which passes
 * the word on to every flooded rank. The flooded ranks post their receives only once the word
 * came, or after `seconds` (argument 1, default 5) without it. When each flooding destination
 * took half of the room the ones before it left, 9 flooded ranks (mpirun -n 11) left the word
 * no room at all: it waited in the provider behind a full engine, and ranks waiting for it
 * before posting their receives would have hung the job. The test floods 10 (mpirun -n 12).
 * Then every byte is checked.
 *
 *   NICMSG_SLOTS=256 mpirun -n 12 -x NICMSG_SLOTS \
 *       --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include nicmsg ./held_many
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SENDS 120
#define LEN (100 * 1024)
#define WORD_TAG 2
#define FLOOD_TAG 1

static char fill(int message, size_t at)
{
	return (char)(message * 7 + at);
}

/* Probes for the word every millisecond, not in a busy loop: nine ranks share two cores
 * here, and the ones that send must run. */
static int wait_for_word(int from, double seconds)
{
	int told = 0;
	double until = MPI_Wtime() + seconds;
	struct timespec nap = {0, 1000000};
	while (!told && MPI_Wtime() < until) {
		MPI_Iprobe(from, WORD_TAG, MPI_COMM_WORLD, &told, MPI_STATUS_IGNORE);
		if (!told)
			nanosleep(&nap, NULL);
	}
	return told;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size, word = 1, failed = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	double seconds = argc > 1 ? atof(argv[1]) : 5.0;
	int last = size - 1;
	if (size < 3) {
		if (rank == 0)
			fprintf(stderr, "held_many: needs 3 ranks or more\n");
		MPI_Finalize();
		return 1;
	}
	char *buffers = malloc((size_t)SENDS * LEN);
	if (rank == 0) {
		int flooded = size - 2;
		MPI_Request *requests = malloc(sizeof(MPI_Request) * (size_t)SENDS * flooded);
		for (int i = 0; i < SENDS; i++)
			for (size_t at = 0; at < LEN; at++)
				buffers[(size_t)i * LEN + at] = fill(i, at);
		for (int to = 1; to <= flooded; to++)
			for (int i = 0; i < SENDS; i++)
				MPI_Isend(buffers + (size_t)i * LEN, LEN, MPI_CHAR, to, FLOOD_TAG,
					  MPI_COMM_WORLD, &requests[(to - 1) * SENDS + i]);
		MPI_Send(&word, 1, MPI_INT, last, WORD_TAG, MPI_COMM_WORLD);
		MPI_Waitall(SENDS * flooded, requests, MPI_STATUSES_IGNORE);
		free(requests);
	} else if (rank == last) {
		MPI_Recv(&word, 1, MPI_INT, 0, WORD_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (int to = 1; to < last; to++)
			MPI_Send(&word, 1, MPI_INT, to, WORD_TAG, MPI_COMM_WORLD);
	} else {
		MPI_Request requests[SENDS];
		if (!wait_for_word(last, seconds)) {
			fprintf(stderr, "held_many: rank %d: rank 0's word to rank %d found no room\n",
				rank, last);
			failed = 1;
		}
		for (int i = 0; i < SENDS; i++)
			MPI_Irecv(buffers + (size_t)i * LEN, LEN, MPI_CHAR, 0, FLOOD_TAG,
				  MPI_COMM_WORLD, &requests[i]);
		MPI_Waitall(SENDS, requests, MPI_STATUSES_IGNORE);
		MPI_Recv(&word, 1, MPI_INT, last, WORD_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (int i = 0; i < SENDS; i++)
			for (size_t at = 0; at < LEN; at++)
				failed |= buffers[(size_t)i * LEN + at] != fill(i, at);
	}
	int any_failed = 0;
	MPI_Reduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("held_many: %s\n", any_failed ? "FAILED" : "every byte arrived");
	free(buffers);
	MPI_Finalize();
	return failed;
}

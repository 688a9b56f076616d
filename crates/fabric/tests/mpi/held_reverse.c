/*
 * One destination may keep most of the engine's room for sends, not only half of it. Rank 0
 * posts 100 sends of 100 KiB to rank 1 (tags 0 to 99; past the eager credits, rendezvous
 * sends that complete only when received), within the room of an engine of 256 slots
 * (NICMSG_SLOTS=256: 153 sends), and waits for all of them; rank 1 receives them in reverse
 * order, the last one first. MPI lets a receiver take nonblocking sends in any order of tags,
 * and every one of them must reach it. When a destination with sends held for no other
 * destination could take only half the room (77 sends), the last 23 waited in the provider
 * for the first 77 to complete, which waited for rank 1, which waited for the last: the job
 * hung. Rank 1 gives up after `seconds` (argument 1, default 20) and aborts the job.
 *
 *   NICMSG_SLOTS=256 mpirun -n 2 -x NICMSG_SLOTS --mca pml cm --mca mtl ofi \
 *       --mca mtl_ofi_provider_include nicmsg ./held_reverse
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define SENDS 100
#define LEN (100 * 1024)

static char fill(int message, size_t at)
{
	return (char)(message * 7 + at);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, failed = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	double seconds = argc > 1 ? atof(argv[1]) : 20.0;
	static MPI_Request requests[SENDS];
	char *buffers = malloc((size_t)SENDS * LEN);
	if (rank == 0) {
		for (int i = 0; i < SENDS; i++) {
			for (size_t at = 0; at < LEN; at++)
				buffers[(size_t)i * LEN + at] = fill(i, at);
			MPI_Isend(buffers + (size_t)i * LEN, LEN, MPI_CHAR, 1, i, MPI_COMM_WORLD,
				  &requests[i]);
		}
		MPI_Waitall(SENDS, requests, MPI_STATUSES_IGNORE);
	} else if (rank == 1) {
		double until = MPI_Wtime() + seconds;
		for (int i = SENDS - 1; i >= 0; i--) {
			MPI_Request request;
			int done = 0;
			MPI_Irecv(buffers + (size_t)i * LEN, LEN, MPI_CHAR, 0, i, MPI_COMM_WORLD,
				  &request);
			while (!done && MPI_Wtime() < until)
				MPI_Test(&request, &done, MPI_STATUS_IGNORE);
			if (!done) {
				fprintf(stderr,
					"held_reverse: the send of tag %d never came (%.0f s): it waited "
					"in the provider behind sends that wait for their receives\n",
					i, seconds);
				MPI_Abort(MPI_COMM_WORLD, 2);
			}
		}
		for (int i = 0; i < SENDS; i++)
			for (size_t at = 0; at < LEN; at++)
				failed |= buffers[(size_t)i * LEN + at] != fill(i, at);
		printf("held_reverse: %s\n", failed ? "FAILED" : "every byte arrived");
	}
	free(buffers);
	MPI_Finalize();
	return failed;
}

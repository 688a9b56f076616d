/*
 * A send must not wait behind sends held for another destination. Rank 0 posts 300
 * rendezvous sends (100 KiB) to rank 1, more than an engine of 256 slots (NICMSG_SLOTS=256)
 * takes, then a short send to rank 2; rank 2 passes the word on to rank 1, and rank 1 posts
 * its receives only after `seconds` (argument 1, default 4). The word must reach rank 1
 * within that time, while rank 0's sends to it wait in the provider: when every held send
 * waited behind those held before it, whatever their destination, the short send waited
 * behind the 300, and a rank 1 that waits for the word before posting its receives hung the
 * job. Then every byte is checked. Run with NICMSG_WATCHDOG=1, the watchdog must meanwhile
 * say how many sends wait in the provider, and name no more than its share of the operations
 * in the engine.
 *
 *   NICMSG_SLOTS=256 NICMSG_WATCHDOG=1 mpirun -n 3 -x NICMSG_SLOTS -x NICMSG_WATCHDOG \
 *       --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include nicmsg ./held_behind
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define SENDS 300
#define LEN (100 * 1024)

static char fill(int message, size_t at)
{
	return (char)(message * 7 + at);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, word = 1, failed = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	double seconds = argc > 1 ? atof(argv[1]) : 4.0;
	static MPI_Request requests[SENDS];
	char *buffers = malloc((size_t)SENDS * LEN);
	if (rank == 0) {
		for (int i = 0; i < SENDS; i++) {
			for (size_t at = 0; at < LEN; at++)
				buffers[(size_t)i * LEN + at] = fill(i, at);
			MPI_Isend(buffers + (size_t)i * LEN, LEN, MPI_CHAR, 1, 1, MPI_COMM_WORLD,
				  &requests[i]);
		}
		MPI_Send(&word, 1, MPI_INT, 2, 2, MPI_COMM_WORLD);
		MPI_Waitall(SENDS, requests, MPI_STATUSES_IGNORE);
	} else if (rank == 2) {
		MPI_Recv(&word, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Send(&word, 1, MPI_INT, 1, 3, MPI_COMM_WORLD);
	} else if (rank == 1) {
		int told = 0;
		double until = MPI_Wtime() + seconds;
		while (MPI_Wtime() < until)
			if (!told)
				MPI_Iprobe(2, 3, MPI_COMM_WORLD, &told, MPI_STATUS_IGNORE);
		if (!told) {
			fprintf(stderr, "held_behind: rank 2's word waited behind rank 0's held sends\n");
			failed = 1;
		}
		for (int i = 0; i < SENDS; i++)
			MPI_Irecv(buffers + (size_t)i * LEN, LEN, MPI_CHAR, 0, 1, MPI_COMM_WORLD,
				  &requests[i]);
		MPI_Waitall(SENDS, requests, MPI_STATUSES_IGNORE);
		MPI_Recv(&word, 1, MPI_INT, 2, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (int i = 0; i < SENDS; i++)
			for (size_t at = 0; at < LEN; at++)
				failed |= buffers[(size_t)i * LEN + at] != fill(i, at);
		printf("held_behind: %s\n", failed ? "FAILED" : "every byte arrived");
	}
	free(buffers);
	MPI_Finalize();
	return failed;
}

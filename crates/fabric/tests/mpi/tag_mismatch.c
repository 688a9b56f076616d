/*
 * The commonest hang of an MPI program, on purpose: rank 1 sends with tag 41 while rank 0
 * waits for tag 42. Run with NICMSG_WATCHDOG=1, the watchdog must say so on standard error
 * while rank 0 waits: its receive, and the message with the other tag that waits unmatched.
 * Rank 0 gives up after `seconds` (argument 1, default 3), cancels its receive and takes the
 * message with the right tag, so the job ends by itself; it exits non-zero if the receive
 * completed (tag 42 must not match 41) or the cancel did not take.
 *
 *   NICMSG_WATCHDOG=1 mpirun -n 2 -x NICMSG_WATCHDOG --mca pml cm --mca mtl ofi \
 *       --mca mtl_ofi_provider_include nicmsg ./tag_mismatch
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, value = 7, failed = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	if (rank == 1) {
		MPI_Send(&value, 1, MPI_INT, 0, 41, MPI_COMM_WORLD);
	} else if (rank == 0) {
		MPI_Request request;
		MPI_Irecv(&value, 1, MPI_INT, 1, 42, MPI_COMM_WORLD, &request);
		int done = 0;
		double until = MPI_Wtime() + seconds;
		while (!done && MPI_Wtime() < until)
			MPI_Test(&request, &done, MPI_STATUS_IGNORE);
		if (done) {
			fprintf(stderr, "tag_mismatch: a receive of tag 42 took a message of tag 41\n");
			failed = 1;
		} else {
			MPI_Status status;
			int cancelled = 0;
			MPI_Cancel(&request);
			MPI_Wait(&request, &status);
			MPI_Test_cancelled(&status, &cancelled);
			failed |= !cancelled;
			MPI_Recv(&value, 1, MPI_INT, 1, 41, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			failed |= value != 7;
		}
		printf("tag_mismatch: %s\n", failed ? "FAILED" : "gave up as planned");
	}
	MPI_Finalize();
	return failed;
}

/*
 * The MPI overlap pattern of `nicmsg bench mpi-overlap` (EMP figure 6, RMPP figures 9-11 over
 * MPI): each iteration posts BATCH MPI_Irecv and BATCH MPI_Isend of SIZE bytes to the other
 * rank, computes for C microseconds, then waits for all of them with MPI_Waitall. Both ranks
 * run the same loop; rank 0 prints one line per amount of computation.
 *
 *   mpirun -n 2 ... ./overlap SIZE BATCH BUDGET_US MIN_ITERATIONS MAX_ITERATIONS WARMUP C1,C2,...
 *   ./overlap calibrate
 *
 * The timed loop runs BUDGET_US / (an iteration's time in the warm-up) iterations, between
 * MIN_ITERATIONS and MAX_ITERATIONS, after WARMUP untimed ones; rank 0 decides, both run it.
 * The computation is a busy loop calibrated before MPI_Init, on a quiet core without any
 * communication library loaded, so C microseconds of it take C microseconds alone; or, where
 * OVERLAP_UNITS_PER_US is set, at that rate (what `./overlap calibrate` printed once for all
 * the systems compared, so that each does the same work for a given C). RMPP's
 * processor availability (the same work without communication over with communication) is then
 * C / an iteration's time; `nicmsg bench` computes it from the numbers printed here:
 *
 *   calibration units_per_us=...
 *   point size=... batch=... compute_us=... iterations=... loop_us=... computing_us=...
 *         computing_median_us=... median_us=... min_us=... max_us=... p99_us=... mean_us=...
 *
 * (one line per point: the loop's time and the computation's total time inside it, the median
 * of the computation's time per iteration, and the iteration's time summarised). The received bytes are checked after each point's loop
 * (cleared before it); a wrong byte aborts the job.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Calibration runs until one measurement takes this long. */
#define CALIBRATION_US 20000.0
/* Calibrations taken; the fastest counts (the one least disturbed). */
#define CALIBRATIONS 5
/* Overhead per iteration assumed when sizing the loop without a warm-up. */
#define ITERATION_SLACK_US 50.0

static int rank;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* `units` rounds of integer arithmetic the compiler cannot remove (the loop of
 * crates/bench/src/compute.rs). */
static uint64_t spin(uint64_t units)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	for (uint64_t i = 0; i < units; i++) {
		x = ((x << 5) | (x >> 59)) ^ 0x5851f42d4c957f2dULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

static double calibrate(void)
{
	double best = 0.0;
	for (int c = 0; c < CALIBRATIONS; c++) {
		uint64_t units = 1024;
		for (;;) {
			double start = now_us();
			spin(units);
			double took = now_us() - start;
			if (took >= CALIBRATION_US) {
				double rate = units / took;
				if (rate > best)
					best = rate;
				break;
			}
			units *= 2;
		}
	}
	return best;
}

static int compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of `n` sorted values. */
static double median(const double *sorted, long n)
{
	return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

static unsigned char pattern(int src, int slot, size_t i)
{
	return (unsigned char)(src * 31 + slot * 7 + i * 13);
}

static unsigned char *out, *in;

/* One iteration: post the receives and the sends, compute, wait for all of them. Returns the
 * time the computation took. */
static double iteration(int batch, size_t size, size_t alloc, int peer, uint64_t units,
			MPI_Request *requests)
{
	for (int s = 0; s < batch; s++)
		MPI_Irecv(in + s * alloc, (int)size, MPI_BYTE, peer, s, MPI_COMM_WORLD, &requests[s]);
	for (int s = 0; s < batch; s++)
		MPI_Isend(out + s * alloc, (int)size, MPI_BYTE, peer, s, MPI_COMM_WORLD,
			  &requests[batch + s]);
	double work_start = now_us();
	if (units)
		spin(units);
	double worked = now_us() - work_start;
	MPI_Waitall(2 * batch, requests, MPI_STATUSES_IGNORE);
	return worked;
}

static void usage(void)
{
	fprintf(stderr, "usage: overlap SIZE BATCH BUDGET_US MIN_ITERATIONS MAX_ITERATIONS "
			"WARMUP C1,C2,...\n       overlap calibrate\n");
	exit(2);
}

/* The computation's rate: the one the comparison shares (OVERLAP_UNITS_PER_US), or measured. */
static double units_per_us_to_use(void)
{
	const char *shared = getenv("OVERLAP_UNITS_PER_US");
	double rate = shared ? atof(shared) : 0.0;
	return rate > 0.0 ? rate : calibrate();
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "calibrate") == 0) {
		printf("calibration units_per_us=%.6f\n", calibrate());
		return 0;
	}
	if (argc != 8)
		usage();
	size_t size = strtoull(argv[1], NULL, 10);
	int batch = atoi(argv[2]);
	double budget = atof(argv[3]);
	long min_iterations = atol(argv[4]), max_iterations = atol(argv[5]);
	long warmup = atol(argv[6]);
	if (batch < 1 || budget <= 0 || min_iterations < 1 || max_iterations < min_iterations)
		usage();

	double units_per_us = units_per_us_to_use();

	MPI_Init(&argc, &argv);
	int ranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &ranks);
	if (ranks != 2) {
		if (rank == 0)
			fprintf(stderr, "overlap: runs on 2 ranks, not %d\n", ranks);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int peer = 1 - rank;
	size_t alloc = size ? size : 1;
	out = malloc(alloc * batch);
	in = malloc(alloc * batch);
	MPI_Request *requests = malloc(sizeof(MPI_Request) * 2 * batch);
	double *samples = malloc(sizeof(double) * max_iterations);
	double *computed = malloc(sizeof(double) * max_iterations);
	if (!out || !in || !requests || !samples || !computed) {
		fprintf(stderr, "overlap: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (int s = 0; s < batch; s++)
		for (size_t i = 0; i < size; i++)
			out[s * alloc + i] = pattern(rank, s, i);
	if (rank == 0)
		printf("calibration units_per_us=%.6f\n", units_per_us);

	for (char *item = strtok(argv[7], ","); item; item = strtok(NULL, ",")) {
		double compute = atof(item);
		uint64_t units = (uint64_t)(compute * units_per_us);
		double computing = 0.0;
		memset(in, 0, alloc * batch);
		MPI_Barrier(MPI_COMM_WORLD);
		/* Warm-up: untimed, but it sizes the timed loop to the budget. */
		double warm_start = now_us();
		for (long it = 0; it < warmup; it++)
			iteration(batch, size, alloc, peer, units, requests);
		double per_iteration = warmup ? (now_us() - warm_start) / warmup
					      : compute + ITERATION_SLACK_US;
		long iterations = (long)(budget / per_iteration);
		if (iterations < min_iterations)
			iterations = min_iterations;
		if (iterations > max_iterations)
			iterations = max_iterations;
		/* Both ranks run rank 0's count. */
		MPI_Bcast(&iterations, 1, MPI_LONG, 0, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double loop_start = now_us();
		for (long it = 0; it < iterations; it++) {
			double start = now_us();
			computed[it] = iteration(batch, size, alloc, peer, units, requests);
			samples[it] = now_us() - start;
			computing += computed[it];
		}
		double loop = now_us() - loop_start;
		for (int s = 0; s < batch; s++)
			for (size_t i = 0; i < size; i++)
				if (in[s * alloc + i] != pattern(peer, s, i)) {
					fprintf(stderr, "overlap rank %d: byte %zu of message %d is %u\n",
						rank, i, s, in[s * alloc + i]);
					MPI_Abort(MPI_COMM_WORLD, 1);
				}
		if (rank == 0) {
			double sum = 0.0;
			for (long i = 0; i < iterations; i++)
				sum += samples[i];
			qsort(samples, iterations, sizeof(double), compare);
			qsort(computed, iterations, sizeof(double), compare);
			long p99 = (long)(0.99 * (iterations - 1) + 0.5);
			printf("point size=%zu batch=%d compute_us=%.3f iterations=%ld loop_us=%.3f "
			       "computing_us=%.3f computing_median_us=%.3f median_us=%.3f min_us=%.3f "
			       "max_us=%.3f p99_us=%.3f mean_us=%.3f\n",
			       size, batch, compute, iterations, loop, computing,
			       median(computed, iterations), median(samples, iterations), samples[0],
			       samples[iterations - 1], samples[p99], sum / iterations);
			fflush(stdout);
		}
	}
	free(out);
	free(in);
	free(requests);
	free(samples);
	free(computed);
	MPI_Finalize();
	return 0;
}

/*
 * A seeded, randomized MPI stress program that hunts for lost, duplicated, corrupted and
 * reordered messages, and for hangs, checking every result against what MPI guarantees.
 *
 *   mpirun -n 4 ./mpi_random SEED ROUNDS [-m MAX_BYTES] [-f FLOOD] [-w WATCHDOG_S]
 *                              [-M] [-S reorder|corrupt] [-v] [-t]
 *
 * -m: largest message (4 MiB); -f: most messages a pair of ranks sends in a flood round (40);
 * -w: a rank still running after that many seconds prints what it waits for and exits 3;
 * -M: let MPI_Mprobe take MPI_Issend messages also on Open MPI 4 (see mprobe_ssend below);
 * -S: break the program's own messages (sent out of order, or a byte flipped on receipt), to
 * show that the checks catch it; -v: a line a round; -t: every operation traced.
 *
 * Every rank derives the same plan from SEED: each round, messages from random senders to
 * random receivers (themselves included) on five communicators (MPI_COMM_WORLD, a dup, two
 * splits, a dup of a split), with random tags and sizes (0 B, 1 B, around 256 B, 4 KiB,
 * 8 KiB, 64 KiB, 256 KiB and up to MAX_BYTES, 4 MiB by default), sent with MPI_Isend,
 * MPI_Issend, MPI_Send and MPI_Rsend. Each receiver takes them with exact receives and with
 * MPI_ANY_SOURCE and/or MPI_ANY_TAG receives, some posted before the sends (MPI_Irecv), the
 * rest after them in random order: MPI_Recv, MPI_Irecv, MPI_Probe or MPI_Iprobe then a
 * receive, MPI_Mprobe or MPI_Improbe then MPI_Mrecv or MPI_Imrecv. Requests complete through
 * MPI_Test, MPI_Testsome, MPI_Testany, MPI_Waitany, MPI_Waitsome and MPI_Waitall, at random.
 * Receives of a tag nobody sends are cancelled (MPI_Test_cancelled must say so), an
 * MPI_Issend must not complete before its receive is posted, and every few rounds is a flood
 * (many sends before any receive is posted).
 *
 * The plan is deadlock-free under MPI's rules alone (no buffering assumed): a blocking send
 * (MPI_Send, MPI_Rsend) goes only to a receive its receiver posted before sending anything
 * itself; on each communicator a receiver posts its exact receives before its wildcard ones,
 * and its wildcard receives of one communicator have disjoint filters (one wildcard style a
 * communicator and round), so every message has a receive whatever the order of arrival.
 *
 * Checked, for every message: received exactly once, with every byte right (each message's
 * content is derived from the seed, round and its number; a 16-byte header names it), no
 * byte written past the received count, MPI_SOURCE, MPI_TAG and the count right, a probe's
 * status equal to its receive's, and MPI's non-overtaking rule: of two messages from one
 * sender on one communicator that a receive matches, it cannot get the later one while the
 * earlier is unmatched, so ordered by posting, receives get each sender's messages in sending
 * order. A send buffer is overwritten as soon as its send completes (the receiver must still
 * get what was sent), and a round's receive buffers are checked again one round later (no
 * late writes). Each round ends with an MPI_Allreduce of counts, bytes and content checksums
 * that every rank checks against the plan; the last is a collective round (MPI_Bcast,
 * MPI_Alltoallv of random sizes, MPI_Allreduce of the totals).
 *
 * Each rank prints a one-line summary; rank 0 then prints "mpi_random: all checks passed".
 * Any violation prints "mpi_random VIOLATION rank R round N (phase): ..." (peer, communicator,
 * tag, expected against got), and the job stops non-zero at the end of that round.
 */
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- randomness ---- */

static uint64_t splitmix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

typedef struct {
	uint64_t s;
} rng_t;

static rng_t rng_new(uint64_t a, uint64_t b, uint64_t c)
{
	rng_t r = {splitmix(splitmix(splitmix(a) ^ b) ^ c)};
	return r;
}

static uint64_t rng_next(rng_t *r)
{
	r->s += 0x9E3779B97F4A7C15ull;
	return splitmix(r->s);
}

/* Uniform in [0, n). */
static size_t below(rng_t *r, size_t n)
{
	return n ? (size_t)(rng_next(r) % n) : 0;
}

/* True with probability percent/100. */
static int chance(rng_t *r, int percent)
{
	return (int)below(r, 100) < percent;
}

/* ---- the job ---- */

static int rank, size, round_no = -1, verbose, trace;
static uint64_t seed;
static size_t max_bytes = 4u << 20;
static int flood_max = 40, tag_ub;
static const char *phase = "start";
static char waiting[256] = "nothing";
static long violations;
/* Open MPI 4's ofi MTL (cm PML) never acknowledges a synchronous send taken by MPI_Mrecv or
 * MPI_Imrecv (ompi_mtl_ofi_mrecv_callback sends no ack), so the MPI_Issend never completes, on
 * any libfabric provider; fixed in Open MPI 5 ("MTL/OFI: ... allow MRecv to process SSend's").
 * There, receives that may get a synchronous send probe without claiming instead; -M lifts
 * that. */
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
static int mprobe_ssend = 0;
#else
static int mprobe_ssend = 1;
#endif
/* -S: the program breaks its own messages, to show that the checks catch it. */
static enum { SABOTAGE_NONE, SABOTAGE_REORDER, SABOTAGE_CORRUPT } sabotage;

#define NCOMMS 5
static MPI_Comm comms[NCOMMS], sync_comm;
static const char *comm_names[NCOMMS] = {"world", "dup", "split-parity", "split-reversed",
					 "dup-of-split"};
/* For each communicator and world rank: its colour (which split) and its rank there. */
static int color_of[NCOMMS][64], crank_of[NCOMMS][64];

static int world_of(int c, int color, int crank)
{
	for (int w = 0; w < size; w++)
		if (color_of[c][w] == color && crank_of[c][w] == crank)
			return w;
	return -1;
}

static void report(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char line[1024];
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (violations < 20)
		fprintf(stderr, "mpi_random VIOLATION rank %d round %d (%s): %s\n", rank, round_no,
			phase, line);
	violations++;
}

/* Stops the job: the program itself cannot go on (an MPI call failed, ...). */
static void fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "mpi_random FAILURE rank %d round %d (%s): ", rank, round_no, phase);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 2);
}

#define MPI_CHECK(call)                                                                    \
	do {                                                                               \
		int rc_ = (call);                                                          \
		if (rc_ != MPI_SUCCESS) {                                                  \
			char text_[MPI_MAX_ERROR_STRING];                                  \
			int len_ = 0;                                                      \
			MPI_Error_string(rc_, text_, &len_);                               \
			fatal("%s failed: %s (line %d)", #call, text_, __LINE__);          \
		}                                                                          \
	} while (0)

#define WAITING(...) snprintf(waiting, sizeof(waiting), __VA_ARGS__)

/* ---- message content ---- */

#define MAGIC 0x6d70726eu /* "mprn" */
#define HEADER 16

typedef struct {
	int id, src, dst, comm, tag;
	size_t len;
	int kind;   /* how it is sent */
	int seq;    /* its place among its stream's (sender, receiver, communicator, tag) */
	int order;  /* its place among its sender's messages to its receiver on its communicator */
	int stream; /* index of its stream at the receiver */
	int prematched; /* the receiver posts its receive before sending anything */
} msg_t;

enum { K_ISEND, K_ISSEND, K_SEND, K_RSEND, K_KINDS };
static const char *kind_names[K_KINDS] = {"isend", "issend", "send", "rsend"};

static uint64_t content_key(int round, int id)
{
	return splitmix(seed ^ splitmix(((uint64_t)(uint32_t)round << 32) | (uint32_t)id));
}

static uint64_t word_at(uint64_t key, size_t i)
{
	return splitmix(key + (i >> 3) * 0xD1B54A32D192ED03ull);
}

/* The message's bytes: a header naming it (when it has room for one), then words derived from
 * the seed, round and message number. */
static void fill(unsigned char *buf, const msg_t *m)
{
	size_t start = 0;
	if (m->len >= HEADER) {
		uint32_t h[4] = {MAGIC ^ (uint32_t)round_no, (uint32_t)m->id, (uint32_t)m->src,
				 (uint32_t)m->len};
		memcpy(buf, h, HEADER);
		start = HEADER;
	}
	uint64_t key = content_key(round_no, m->id);
	for (size_t i = start; i < m->len; i += 8) {
		uint64_t w = word_at(key, i);
		size_t n = m->len - i < 8 ? m->len - i : 8;
		memcpy(buf + i, &w, n);
	}
}

/* The first byte of buf (len bytes) that is not m's, or len if all are. */
static size_t first_wrong(const unsigned char *buf, size_t len, const msg_t *m, int round)
{
	size_t start = 0;
	if (len >= HEADER) {
		uint32_t h[4] = {MAGIC ^ (uint32_t)round, (uint32_t)m->id, (uint32_t)m->src,
				 (uint32_t)m->len};
		for (size_t i = 0; i < HEADER; i++)
			if (buf[i] != ((unsigned char *)h)[i])
				return i;
		start = HEADER;
	}
	uint64_t key = content_key(round, m->id);
	for (size_t i = start; i < len; i += 8) {
		uint64_t w = word_at(key, i);
		size_t n = len - i < 8 ? len - i : 8;
		if (memcmp(buf + i, &w, n) != 0) {
			for (size_t k = 0; k < n; k++)
				if (buf[i + k] != ((unsigned char *)&w)[k])
					return i + k;
		}
	}
	return len;
}

static uint64_t checksum(const unsigned char *buf, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull ^ len;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, buf + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < len; i++)
		h = (h ^ buf[i]) * 0x100000001b3ull;
	return h;
}

#define CANARY 0xC3

/* ---- a round's plan ---- */

enum { W_EXACT, W_ANY_SOURCE, W_ANY_TAG, W_ANY_BOTH };

/* A stream: the messages from one sender to one receiver on one communicator with one tag. */
typedef struct {
	int src, comm, tag;
	int n, *msgs;  /* message ids in sending order */
	int exact;     /* the first `exact` go to exact receives */
	int preposted; /* of which the first `preposted` are posted before any send */
	int next_exact; /* exact receives posted so far */
	int group;     /* wildcard group of its later messages */
	int racy;      /* some of its receives are cancelled while its messages arrive */
	size_t max_len;
} stream_t;

/* The wildcard receives of one filter on one communicator: they take the messages of their
 * streams past the exact ones. */
typedef struct {
	int comm, src, tag; /* world rank or MPI_ANY_SOURCE; tag or MPI_ANY_TAG */
	int n;              /* messages, and so receives */
	size_t max_len;
	int preposted;      /* receives posted before any send */
} group_t;

/* What one receiver does in a round. */
typedef struct {
	int nstreams, ngroups;
	stream_t *streams;
	group_t *groups;
	int style[NCOMMS];
} rplan_t;

typedef struct {
	int flood, barrier_after_prepost, sync_check, sync_a, sync_b;
	size_t sync_len;
	int nmsgs;
	msg_t *msgs;
	rplan_t *r; /* one per world rank */
	uint64_t bytes;
} plan_t;

static size_t random_size(rng_t *r, int flood)
{
	static const size_t edges[] = {255,   256,   257,   1472,  4095,  4096,  4097,  8191,
				       8192,  8193,  65507, 65535, 65536, 65537, 262143, 262144,
				       262145};
	size_t n_edges = sizeof(edges) / sizeof(edges[0]);
	int p = (int)below(r, 1000);
	if (flood) {
		if (p < 100)
			return 0;
		if (p < 700)
			return 1 + below(r, 256);
		if (p < 950)
			return 257 + below(r, 4096 - 256);
		if (p < 995)
			return 4097 + below(r, 65536);
		return 65537 + below(r, 262144);
	}
	size_t s;
	if (p < 80)
		s = 0;
	else if (p < 130)
		s = 1;
	else if (p < 330)
		s = 2 + below(r, 255);
	else if (p < 530)
		s = edges[below(r, n_edges)];
	else if (p < 700)
		s = 257 + below(r, 8192 - 256);
	else if (p < 850)
		s = 8193 + below(r, 65536);
	else if (p < 950)
		s = 65537 + below(r, 262144 - 65536 + 2);
	else
		s = 262145 + below(r, max_bytes > 262145 ? max_bytes - 262145 : 1);
	return s > max_bytes ? max_bytes : s;
}

static int random_tag(rng_t *r)
{
	int p = (int)below(r, 100);
	if (p < 70)
		return (int)below(r, 4);
	if (p < 85)
		return 4 + (int)below(r, 60);
	if (p < 95)
		return 1000 + (int)below(r, 30000);
	return tag_ub - 3; /* the largest tag the plan uses */
}
#define TAG_NEVER (tag_ub - 1) /* cancelled receives: nobody sends it */

static int members(int c, int w)
{
	int n = 0;
	for (int v = 0; v < size; v++)
		n += color_of[c][v] == color_of[c][w];
	return n;
}

static int find_stream(rplan_t *rp, int src, int comm, int tag)
{
	for (int i = 0; i < rp->nstreams; i++)
		if (rp->streams[i].src == src && rp->streams[i].comm == comm &&
		    rp->streams[i].tag == tag)
			return i;
	return -1;
}

/* Every rank computes the same plan from the seed and the round. */
static void make_plan(plan_t *p, int round)
{
	rng_t r = rng_new(seed, (uint64_t)round, 1);
	memset(p, 0, sizeof(*p));
	p->flood = round % 4 == 3;
	p->barrier_after_prepost = !p->flood && chance(&r, 30);
	int n;
	if (p->flood) {
		/* Every rank to every rank: up to flood_max messages a pair. */
		n = 0;
		int *pair = malloc(sizeof(int) * size * size);
		for (int i = 0; i < size * size; i++) {
			pair[i] = (int)below(&r, (size_t)flood_max + 1);
			n += pair[i];
		}
		p->msgs = calloc((size_t)n + 1, sizeof(msg_t));
		int k = 0;
		for (int i = 0; i < size * size; i++)
			for (int j = 0; j < pair[i]; j++) {
				p->msgs[k].src = i / size;
				p->msgs[k].dst = i % size;
				k++;
			}
		free(pair);
		/* Sending order: random across pairs. */
		for (int i = n - 1; i > 0; i--) {
			int j = (int)below(&r, (size_t)i + 1);
			msg_t t = p->msgs[i];
			p->msgs[i] = p->msgs[j];
			p->msgs[j] = t;
		}
		for (int i = 0; i < n; i++) {
			msg_t *m = &p->msgs[i];
			/* world or its dup: every pair is in both */
			m->comm = (int)below(&r, 2);
			m->tag = random_tag(&r);
			m->len = random_size(&r, 1);
		}
	} else {
		n = 1 + (int)below(&r, (size_t)(chance(&r, 20) ? 32 : 12) * size);
		p->msgs = calloc((size_t)n + 1, sizeof(msg_t));
		uint64_t budget = 24u << 20;
		/* A few rounds put many messages on one stream (ordering under pressure). */
		int hot = chance(&r, 20);
		for (int i = 0; i < n; i++) {
			msg_t *m = &p->msgs[i];
			if (hot && i > 0 && chance(&r, 60)) {
				*m = p->msgs[i - 1];
			} else {
				m->src = (int)below(&r, (size_t)size);
				m->comm = (int)below(&r, NCOMMS);
				int pick = (int)below(&r, (size_t)members(m->comm, m->src));
				for (int w = 0; w < size; w++)
					if (color_of[m->comm][w] == color_of[m->comm][m->src] &&
					    pick-- == 0)
						m->dst = w;
				m->tag = random_tag(&r);
			}
			m->len = random_size(&r, 0);
			if (m->len > budget)
				m->len = below(&r, 300);
			budget -= m->len;
		}
	}
	p->nmsgs = n;
	for (int i = 0; i < n; i++) {
		msg_t *m = &p->msgs[i];
		m->id = i;
		m->seq = m->order = 0;
		for (int j = 0; j < i; j++) {
			msg_t *e = &p->msgs[j];
			if (e->src == m->src && e->dst == m->dst && e->comm == m->comm) {
				m->order++;
				m->seq += e->tag == m->tag;
			}
		}
		p->bytes += m->len;
	}

	/* Each receiver's plan. */
	p->r = calloc((size_t)size, sizeof(rplan_t));
	for (int d = 0; d < size; d++) {
		rplan_t *rp = &p->r[d];
		rp->streams = calloc((size_t)n + 1, sizeof(stream_t));
		rp->groups = calloc((size_t)n + 1, sizeof(group_t));
		for (int c = 0; c < NCOMMS; c++) {
			int q = (int)below(&r, 100);
			rp->style[c] = q < 40 ? W_EXACT : q < 60 ? W_ANY_SOURCE
						  : q < 80 ? W_ANY_TAG
							   : W_ANY_BOTH;
		}
		for (int i = 0; i < n; i++) {
			msg_t *m = &p->msgs[i];
			if (m->dst != d)
				continue;
			int s = find_stream(rp, m->src, m->comm, m->tag);
			if (s < 0) {
				s = rp->nstreams++;
				rp->streams[s].src = m->src;
				rp->streams[s].comm = m->comm;
				rp->streams[s].tag = m->tag;
				rp->streams[s].msgs = calloc((size_t)n, sizeof(int));
			}
			rp->streams[s].msgs[rp->streams[s].n++] = i;
			m->stream = s;
		}
		/* Per receiver: everything posted before the sends, nothing, or some. */
		int prepost_mode = p->flood ? 1 : (int)below(&r, 3);
		int all_exact_preposted[NCOMMS];
		for (int c = 0; c < NCOMMS; c++)
			all_exact_preposted[c] = 1;
		for (int s = 0; s < rp->nstreams; s++) {
			stream_t *st = &rp->streams[s];
			int style = rp->style[st->comm];
			st->exact = style == W_EXACT ? st->n : (int)below(&r, (size_t)st->n + 1);
			if (prepost_mode == 0)
				st->preposted = st->exact;
			else if (prepost_mode == 1)
				st->preposted = 0;
			else
				st->preposted = chance(&r, 50) ? st->exact
							       : (int)below(&r, (size_t)st->exact + 1);
			if (st->preposted < st->exact)
				all_exact_preposted[st->comm] = 0;
			st->group = -1;
			if (st->exact == st->n)
				continue;
			int gsrc = style == W_ANY_TAG ? st->src : MPI_ANY_SOURCE;
			int gtag = style == W_ANY_SOURCE ? st->tag : MPI_ANY_TAG;
			int g;
			for (g = 0; g < rp->ngroups; g++)
				if (rp->groups[g].comm == st->comm && rp->groups[g].src == gsrc &&
				    rp->groups[g].tag == gtag)
					break;
			if (g == rp->ngroups) {
				rp->ngroups++;
				rp->groups[g].comm = st->comm;
				rp->groups[g].src = gsrc;
				rp->groups[g].tag = gtag;
			}
			st->group = g;
			group_t *gr = &rp->groups[g];
			for (int k = st->exact; k < st->n; k++) {
				gr->n++;
				size_t len = p->msgs[st->msgs[k]].len;
				if (len > gr->max_len)
					gr->max_len = len;
			}
		}
		/* A communicator's wildcard receives may be posted early only where all its
		 * exact ones are (exact receives come first). */
		for (int g = 0; g < rp->ngroups; g++) {
			group_t *gr = &rp->groups[g];
			if (prepost_mode == 0)
				gr->preposted = gr->n;
			else if (prepost_mode == 2 && all_exact_preposted[gr->comm] && chance(&r, 50))
				gr->preposted = chance(&r, 60) ? gr->n : (int)below(&r, (size_t)gr->n);
		}
		/* Which messages meet a receive posted before their sender sends anything. */
		for (int s = 0; s < rp->nstreams; s++) {
			stream_t *st = &rp->streams[s];
			for (int k = 0; k < st->n; k++)
				p->msgs[st->msgs[k]].prematched =
					k < st->preposted ||
					(k >= st->exact && rp->groups[st->group].preposted ==
								   rp->groups[st->group].n);
		}
	}
	for (int i = 0; i < n; i++) {
		msg_t *m = &p->msgs[i];
		int q = (int)below(&r, 100);
		if (m->prematched)
			m->kind = q < 35 ? K_ISEND
				  : q < 50 ? K_ISSEND
				  : q < 85 || !p->barrier_after_prepost ? K_SEND
									 : K_RSEND;
		else
			m->kind = q < 70 ? K_ISEND : K_ISSEND;
	}
	p->sync_check = chance(&r, 30);
	p->sync_a = (int)below(&r, (size_t)size);
	p->sync_b = (int)below(&r, (size_t)size);
	p->sync_len = random_size(&r, 0);
}

static void free_plan(plan_t *p)
{
	for (int d = 0; d < size; d++) {
		for (int s = 0; s < p->r[d].nstreams; s++)
			free(p->r[d].streams[s].msgs);
		free(p->r[d].streams);
		free(p->r[d].groups);
	}
	free(p->r);
	free(p->msgs);
}

/* ---- this rank's receives and requests ---- */

enum { M_IRECV, M_RECV, M_PROBE, M_IPROBE, M_MPROBE, M_IMPROBE, M_METHODS };
static const char *method_names[M_METHODS] = {"irecv",  "recv",   "probe+recv",
					      "iprobe+recv", "mprobe+mrecv", "improbe+mrecv"};

typedef struct {
	int comm, src, tag; /* the filter: world rank or MPI_ANY_SOURCE; tag or MPI_ANY_TAG */
	int stream, group;  /* exact: its stream; wildcard: its group */
	int expect;         /* exact: the message it must get (sending order) */
	int method, nonblocking, post, done;
	int cancel; /* cancelled: never matched (a tag nobody sends), or a race the cancel won */
	int race;   /* cancelled while a message may match it: either outcome is right */
	unsigned char *buf;
	size_t bufsize;
	MPI_Status status;
	int count;
	int probed, probe_src, probe_tag, probe_count;
} recv_t;

typedef struct {
	MPI_Request *reqs;
	int *is_send, *index; /* what each request is: a receive or a send, and which */
	int n, cap;
} requests_t;

static plan_t plan;
static recv_t *recvs;
static int nrecvs, posts;
static requests_t rq;
static unsigned char **send_bufs;
static rng_t local; /* this rank's own choices: no other rank needs them */

/* What a round did, for the checks and the summary. */
enum { T_SENT, T_SENT_BYTES, T_SENT_SUM, T_RECV, T_RECV_BYTES, T_RECV_SUM, T_VIOLATIONS, T_N };
static uint64_t totals[T_N], run_totals[T_N];
static long kinds_used[K_KINDS], methods_used[M_METHODS], wildcards_used, cancels_done,
	sync_checks, flood_msgs, tests_called, races_cancelled, races_received;

/* The previous round's receive buffers, checked again at the end of this one. */
static recv_t *old_recvs;
static int old_nrecvs;
static plan_t old_plan;
static int have_old;

static int add_request(MPI_Request req, int is_send, int index)
{
	if (rq.n >= rq.cap)
		fatal("more requests than the %d planned", rq.cap);
	rq.reqs[rq.n] = req;
	rq.is_send[rq.n] = is_send;
	rq.index[rq.n] = index;
	return rq.n++;
}

static int comm_rank_of(int c, int w)
{
	return w == MPI_ANY_SOURCE ? MPI_ANY_SOURCE : crank_of[c][w];
}

static void describe_filter(const recv_t *rv, char *out, size_t n)
{
	char s[32], t[32];
	if (rv->src == MPI_ANY_SOURCE)
		snprintf(s, sizeof(s), "ANY_SOURCE");
	else
		snprintf(s, sizeof(s), "rank %d", rv->src);
	if (rv->tag == MPI_ANY_TAG)
		snprintf(t, sizeof(t), "ANY_TAG");
	else
		snprintf(t, sizeof(t), "tag %d", rv->tag);
	snprintf(out, n, "%s receive (%s, %s) on %s, posted %d", method_names[rv->method], s, t,
		 comm_names[rv->comm], rv->post);
}

/* Checks a message's bytes where it was received; says what is wrong. */
static int check_payload(const plan_t *p, int round, const recv_t *rv, const msg_t *m,
			 const char *when)
{
	char f[160];
	describe_filter(rv, f, sizeof(f));
	size_t got = (size_t)rv->count;
	size_t len = got < m->len ? got : m->len;
	size_t bad = first_wrong(rv->buf, len, m, round);
	if (bad < len) {
		char named[200] = "";
		if (got >= HEADER) {
			uint32_t h[4];
			memcpy(h, rv->buf, HEADER);
			if ((h[0] ^ MAGIC) == (uint32_t)round && h[1] < (uint32_t)p->nmsgs) {
				const msg_t *o = &p->msgs[h[1]];
				snprintf(named, sizeof(named),
					 "; its header names message %u (from %d, %s tag %d, seq %d, "
					 "%zu B)",
					 h[1], o->src, comm_names[o->comm], o->tag, o->seq, o->len);
			} else {
				snprintf(named, sizeof(named),
					 "; its header is %08x %08x %08x %08x (no message of this "
					 "round)",
					 h[0], h[1], h[2], h[3]);
			}
		}
		report("%s: from peer %d on %s tag %d: expected message %d (seq %d, %zu B), "
		       "got byte %zu of %zu = 0x%02x%s; %s",
		       when, m->src, comm_names[m->comm], m->tag, m->id, m->seq, m->len, bad, got,
		       rv->buf[bad], named, f);
		return 0;
	}
	for (size_t i = got; i < rv->bufsize; i++)
		if (rv->buf[i] != CANARY) {
			report("%s: from peer %d on %s tag %d: message %d (%zu B) wrote byte %zu "
			       "of its %zu-byte buffer, past its count; %s",
			       when, m->src, comm_names[m->comm], m->tag, m->id, m->len, i,
			       rv->bufsize, f);
			return 0;
		}
	return 1;
}

static void repost(int i);

static void on_recv_done(int i, const MPI_Status *status, int trunc)
{
	recv_t *rv = &recvs[i];
	if (rv->done)
		fatal("receive %d completed twice", i);
	rv->done = 1;
	rv->status = *status;
	if (trace) {
		char f[160];
		describe_filter(rv, f, sizeof(f));
		int count = -1;
		MPI_Get_count(status, MPI_BYTE, &count);
		fprintf(stderr, "trace rank %d: done %s: source %d tag %d count %d\n", rank, f,
			status->MPI_SOURCE, status->MPI_TAG, count);
	}
	if (rv->race) {
		int cancelled = 0;
		MPI_CHECK(MPI_Test_cancelled(status, &cancelled));
		if (trace)
			fprintf(stderr, "trace rank %d: racing cancel of receive %d %s\n", rank, i,
				cancelled ? "won" : "lost");
		if (cancelled) {
			/* Not received: the message it would have got goes to the next receive. */
			rv->cancel = 1;
			races_cancelled++;
			repost(i);
			return;
		}
		races_received++;
	}
	if (rv->cancel) {
		int cancelled = 0;
		MPI_CHECK(MPI_Test_cancelled(status, &cancelled));
		if (!cancelled)
			report("a receive of tag %d (never sent) on %s was not cancelled: source %d "
			       "tag %d",
			       rv->tag, comm_names[rv->comm], status->MPI_SOURCE, status->MPI_TAG);
		for (size_t k = 0; k < rv->bufsize; k++)
			if (rv->buf[k] != CANARY) {
				report("a cancelled receive wrote byte %zu of its buffer", k);
				break;
			}
		cancels_done++;
		return;
	}
	MPI_CHECK(MPI_Get_count(status, MPI_BYTE, &rv->count));
	if (trunc) {
		char f[160];
		describe_filter(rv, f, sizeof(f));
		report("MPI_ERR_TRUNCATE: a message from rank %d tag %d did not fit the %zu-byte "
		       "buffer of %s (exact receives' buffers fit their message, wildcard ones the "
		       "largest they may get)",
		       status->MPI_SOURCE, status->MPI_TAG, rv->bufsize, f);
		if (rv->count < 0 || (size_t)rv->count > rv->bufsize)
			rv->count = (int)rv->bufsize;
	}
	static int corrupted;
	if (sabotage == SABOTAGE_CORRUPT && !corrupted && rank == 0 && rv->count > 0 &&
	    (size_t)rv->count <= rv->bufsize) {
		rv->buf[rv->count / 2] ^= 0x10;
		corrupted = 1;
	}
	if (rv->count < 0 || (size_t)rv->count > rv->bufsize) {
		report("receive count %d outside its %zu-byte buffer", rv->count, rv->bufsize);
		rv->count = 0;
	}
	/* An exact receive knows its message at once: check it now, so that a violation is
	 * reported even if a hang follows. */
	if (rv->expect >= 0) {
		const msg_t *m = &plan.msgs[rv->expect];
		if (status->MPI_SOURCE != crank_of[m->comm][m->src] || status->MPI_TAG != m->tag ||
		    (size_t)rv->count != m->len) {
			char f[160];
			describe_filter(rv, f, sizeof(f));
			report("on completion: expected message %d from peer %d (rank %d on %s) tag "
			       "%d seq %d, %zu B; got source %d tag %d count %d; %s",
			       m->id, m->src, crank_of[m->comm][m->src], comm_names[m->comm],
			       m->tag, m->seq, m->len, status->MPI_SOURCE, status->MPI_TAG,
			       rv->count, f);
		} else {
			check_payload(&plan, round_no, rv, m, "on completion");
		}
	}
	if (rv->probed && (rv->probe_src != status->MPI_SOURCE ||
			   rv->probe_tag != status->MPI_TAG || rv->probe_count != rv->count))
		report("probe said source %d tag %d count %d, its receive got source %d tag %d "
		       "count %d (%s on %s)",
		       rv->probe_src, rv->probe_tag, rv->probe_count, status->MPI_SOURCE,
		       status->MPI_TAG, rv->count, method_names[rv->method],
		       comm_names[rv->comm]);
	totals[T_RECV]++;
	totals[T_RECV_BYTES] += (uint64_t)rv->count;
	totals[T_RECV_SUM] += checksum(rv->buf, (size_t)rv->count);
}

static void on_send_done(int id)
{
	if (trace)
		fprintf(stderr, "trace rank %d: send of message %d done\n", rank, id);
	/* The send is complete: its buffer is the application's again, and what the receiver
	 * gets must not change when it is overwritten. */
	memset(send_bufs[id], 0x5A, plan.msgs[id].len);
}

/* A completion's own error: none, or a receive's MPI_ERR_TRUNCATE (true: a violation, as every
 * buffer holds what MPI lets its receive get); any other stops the program. */
static int truncated(int rc, const char *call)
{
	if (rc == MPI_SUCCESS)
		return 0;
	int cls = 0, len = 0;
	MPI_Error_class(rc, &cls);
	if (cls == MPI_ERR_TRUNCATE)
		return 1;
	char text[MPI_MAX_ERROR_STRING];
	MPI_Error_string(rc, text, &len);
	fatal("%s failed: %s", call, text);
	return 0;
}

static void on_done(int k, const MPI_Status *status, int rc, const char *call)
{
	int trunc = truncated(rc, call);
	if (!rq.is_send[k])
		on_recv_done(rq.index[k], status, trunc);
	else if (trunc)
		fatal("%s: a send completed with MPI_ERR_TRUNCATE", call);
	else
		on_send_done(rq.index[k]);
}

/* The completions of MPI_Testsome, MPI_Waitsome (out of them, at idx) or MPI_Waitall (all
 * that were active, idx NULL). */
static void on_some(int out, const int *idx, const int *was, MPI_Status *st, int rc,
		    const char *call)
{
	if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
		truncated(rc, call);
	for (int j = 0; j < out; j++) {
		int k = idx ? idx[j] : j;
		if (!idx && !was[k])
			continue;
		int e = rc == MPI_ERR_IN_STATUS ? st[j].MPI_ERROR : MPI_SUCCESS;
		if (e == MPI_ERR_PENDING)
			continue;
		on_done(k, &st[j], e, call);
	}
}

/* Now and then, a look at outstanding requests: MPI_Test, MPI_Testany or MPI_Testsome. */
static void poke(void)
{
	if (rq.n == 0)
		return;
	int q = (int)below(&local, 100);
	if (q < 10) {
		int k = (int)below(&local, (size_t)rq.n), flag = 0;
		if (rq.reqs[k] == MPI_REQUEST_NULL)
			return;
		MPI_Status st;
		int rc = MPI_Test(&rq.reqs[k], &flag, &st);
		tests_called++;
		if (flag || rc != MPI_SUCCESS)
			on_done(k, &st, rc, "MPI_Test");
	} else if (q < 14) {
		int k = MPI_UNDEFINED, flag = 0;
		MPI_Status st;
		int rc = MPI_Testany(rq.n, rq.reqs, &k, &flag, &st);
		tests_called++;
		if ((flag || rc != MPI_SUCCESS) && k != MPI_UNDEFINED)
			on_done(k, &st, rc, "MPI_Testany");
		else
			truncated(rc, "MPI_Testany");
	} else if (q < 18) {
		int *idx = malloc(sizeof(int) * (size_t)rq.n), out = 0;
		MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)rq.n);
		int rc = MPI_Testsome(rq.n, rq.reqs, &out, idx, st);
		tests_called++;
		if (out != MPI_UNDEFINED)
			on_some(out, idx, NULL, st, rc, "MPI_Testsome");
		free(idx);
		free(st);
	}
}

static int active(void)
{
	int n = 0;
	for (int k = 0; k < rq.n; k++)
		n += rq.reqs[k] != MPI_REQUEST_NULL;
	return n;
}

/* Completes every outstanding request, one of several ways. */
static void complete_all(void)
{
	int way = (int)below(&local, 5);
	/* rq.n grows as receives whose cancel won are posted again, within rq.cap. */
	int *idx = malloc(sizeof(int) * (size_t)rq.cap);
	int *was = malloc(sizeof(int) * (size_t)rq.cap);
	MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)rq.cap);
	static const char *ways[] = {"MPI_Waitall", "MPI_Waitany", "MPI_Waitsome",
				     "MPI_Testsome", "MPI_Test"};
	while (active() > 0) {
		WAITING("%d requests (%s)", active(), ways[way]);
		int rc, out;
		if (way == 0) {
			for (int k = 0; k < rq.n; k++)
				was[k] = rq.reqs[k] != MPI_REQUEST_NULL;
			rc = MPI_Waitall(rq.n, rq.reqs, st);
			on_some(rq.n, NULL, was, st, rc, ways[way]);
		} else if (way == 1) {
			int k;
			rc = MPI_Waitany(rq.n, rq.reqs, &k, &st[0]);
			if (k != MPI_UNDEFINED)
				on_done(k, &st[0], rc, ways[way]);
			else
				truncated(rc, ways[way]);
		} else if (way == 2 || way == 3) {
			rc = way == 2 ? MPI_Waitsome(rq.n, rq.reqs, &out, idx, st)
				      : MPI_Testsome(rq.n, rq.reqs, &out, idx, st);
			if (out != MPI_UNDEFINED)
				on_some(out, idx, NULL, st, rc, ways[way]);
		} else {
			for (int k = 0; k < rq.n; k++) {
				if (rq.reqs[k] == MPI_REQUEST_NULL)
					continue;
				int flag;
				rc = MPI_Test(&rq.reqs[k], &flag, &st[0]);
				if (flag || rc != MPI_SUCCESS)
					on_done(k, &st[0], rc, ways[way]);
			}
		}
	}
	free(idx);
	free(was);
	free(st);
}

static unsigned char *receive_buffer(recv_t *rv, size_t needed)
{
	int q = (int)below(&local, 100);
	size_t slack = q < 50 ? 0 : q < 90 ? below(&local, 64) + 1 : below(&local, 4096) + 1;
	rv->bufsize = needed + slack;
	rv->buf = malloc(rv->bufsize + 1);
	memset(rv->buf, CANARY, rv->bufsize);
	return rv->buf;
}

static void do_receive(int i, int early);
static void on_done(int k, const MPI_Status *status, int rc, const char *call);

/* Cancels the racing receive of request k and waits for it (a cancelled request completes
 * whatever other ranks do), so that a cancelled receive is posted again at once: a blocking
 * send may wait for it. */
static void cancel_race(int k)
{
	recvs[rq.index[k]].race = 2;
	MPI_CHECK(MPI_Cancel(&rq.reqs[k]));
	MPI_Status st;
	WAITING("a cancelled receive's completion");
	int rc = MPI_Wait(&rq.reqs[k], &st);
	on_done(k, &st, rc, "MPI_Wait after MPI_Cancel");
}

/* Cancels the racing receives still outstanding. */
static void cancel_races(void)
{
	int n = rq.n; /* not the receives posted again meanwhile */
	for (int k = 0; k < n; k++)
		if (!rq.is_send[k] && recvs[rq.index[k]].race == 1 &&
		    rq.reqs[k] != MPI_REQUEST_NULL && chance(&local, 50))
			cancel_race(k);
}

/* A receive whose cancel won, posted again (last, so it takes its stream's next message). */
static void repost(int i)
{
	int k = nrecvs++;
	recv_t *rv = &recvs[k];
	memset(rv, 0, sizeof(*rv));
	rv->comm = recvs[i].comm;
	rv->src = recvs[i].src;
	rv->tag = recvs[i].tag;
	rv->stream = recvs[i].stream;
	rv->group = recvs[i].group;
	do_receive(k, 1);
}

/* Whether a receive may get a message sent with MPI_Issend. */
static int may_get_synchronous(const recv_t *rv)
{
	const rplan_t *me = &plan.r[rank];
	if (rv->expect >= 0)
		return plan.msgs[rv->expect].kind == K_ISSEND;
	if (rv->stream >= 0) { /* a racing stream's: any of its messages */
		const stream_t *st = &me->streams[rv->stream];
		for (int k = 0; k < st->n; k++)
			if (plan.msgs[st->msgs[k]].kind == K_ISSEND)
				return 1;
		return 0;
	}
	for (int s = 0; s < me->nstreams; s++) {
		const stream_t *st = &me->streams[s];
		if (st->group != rv->group)
			continue;
		for (int k = st->exact; k < st->n; k++)
			if (plan.msgs[st->msgs[k]].kind == K_ISSEND)
				return 1;
	}
	return 0;
}

/* Posts (or carries out) receive i with its method. */
static void do_receive(int i, int early)
{
	recv_t *rv = &recvs[i];
	const rplan_t *me = &plan.r[rank];
	MPI_Comm comm = comms[rv->comm];
	int src = comm_rank_of(rv->comm, rv->src);
	size_t needed;
	if (rv->stream >= 0 && me->streams[rv->stream].racy) {
		/* Which of its stream's messages it gets depends on which cancels win. */
		rv->expect = -1;
		needed = me->streams[rv->stream].max_len;
	} else if (rv->stream >= 0) {
		stream_t *st = &me->streams[rv->stream];
		rv->expect = st->msgs[st->next_exact++];
		needed = plan.msgs[rv->expect].len;
	} else {
		rv->expect = -1;
		needed = me->groups[rv->group].max_len;
	}
	if (rv->src == MPI_ANY_SOURCE || rv->tag == MPI_ANY_TAG)
		wildcards_used++;
	rv->method = early || rv->race ? M_IRECV : (int)below(&local, M_METHODS);
	if (!mprobe_ssend && (rv->method == M_MPROBE || rv->method == M_IMPROBE) &&
	    may_get_synchronous(rv))
		rv->method = rv->method == M_MPROBE ? M_PROBE : M_IPROBE;
	if (trace)
		fprintf(stderr, "trace rank %d: %s receive %d: %s from %d tag %d on %s\n", rank,
			early ? "early" : "later", i, method_names[rv->method], src, rv->tag,
			comm_names[rv->comm]);
	methods_used[rv->method]++;
	MPI_Request req;
	MPI_Status st;
	WAITING("%s from %d tag %d on %s", method_names[rv->method], src, rv->tag,
		comm_names[rv->comm]);
	switch (rv->method) {
	case M_IRECV:
		receive_buffer(rv, needed);
		rv->post = posts++;
		MPI_CHECK(MPI_Irecv(rv->buf, (int)rv->bufsize, MPI_BYTE, src, rv->tag, comm, &req));
		int k = add_request(req, 0, i);
		/* Posted before the sends, its message is likely still to come: cancelled at
		 * once, the cancel usually wins. */
		if (rv->race && chance(&local, early ? 70 : 30))
			cancel_race(k);
		break;
	case M_RECV:
		receive_buffer(rv, needed);
		rv->post = posts++;
		on_recv_done(i, &st,
			     truncated(MPI_Recv(rv->buf, (int)rv->bufsize, MPI_BYTE, src, rv->tag,
						comm, &st),
				       "MPI_Recv"));
		break;
	case M_PROBE:
	case M_IPROBE: {
		if (rv->method == M_PROBE) {
			MPI_CHECK(MPI_Probe(src, rv->tag, comm, &st));
		} else {
			int flag = 0;
			while (!flag) {
				MPI_CHECK(MPI_Iprobe(src, rv->tag, comm, &flag, &st));
				if (!flag)
					poke();
			}
		}
		rv->probed = 1;
		rv->probe_src = st.MPI_SOURCE;
		rv->probe_tag = st.MPI_TAG;
		MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &rv->probe_count));
		/* Sized by what the probe said (an exact receive's must be its message's). */
		if (rv->expect >= 0 && (size_t)rv->probe_count != needed)
			report("probe (%s, tag %d on %s) said %d bytes, message %d has %zu",
			       rv->src == MPI_ANY_SOURCE ? "ANY_SOURCE" : "exact", rv->tag,
			       comm_names[rv->comm], rv->probe_count, rv->expect, needed);
		receive_buffer(rv, rv->probe_count > 0 ? (size_t)rv->probe_count : 0);
		rv->post = posts++;
		if (chance(&local, 50)) {
			int rc = MPI_Recv(rv->buf, (int)rv->bufsize, MPI_BYTE, st.MPI_SOURCE,
					  st.MPI_TAG, comm, &st);
			on_recv_done(i, &st, truncated(rc, "MPI_Recv after a probe"));
		} else {
			MPI_CHECK(MPI_Irecv(rv->buf, (int)rv->bufsize, MPI_BYTE, st.MPI_SOURCE,
					    st.MPI_TAG, comm, &req));
			add_request(req, 0, i);
		}
		break;
	}
	case M_MPROBE:
	case M_IMPROBE: {
		MPI_Message msg;
		if (rv->method == M_MPROBE) {
			MPI_CHECK(MPI_Mprobe(src, rv->tag, comm, &msg, &st));
		} else {
			int flag = 0;
			while (!flag) {
				MPI_CHECK(MPI_Improbe(src, rv->tag, comm, &flag, &msg, &st));
				if (!flag)
					poke();
			}
		}
		rv->post = posts++;
		rv->probed = 1;
		rv->probe_src = st.MPI_SOURCE;
		rv->probe_tag = st.MPI_TAG;
		MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &rv->probe_count));
		if (rv->expect >= 0 && (size_t)rv->probe_count != needed)
			report("mprobe (%s, tag %d on %s) said %d bytes, message %d has %zu",
			       rv->src == MPI_ANY_SOURCE ? "ANY_SOURCE" : "exact", rv->tag,
			       comm_names[rv->comm], rv->probe_count, rv->expect, needed);
		receive_buffer(rv, rv->probe_count > 0 ? (size_t)rv->probe_count : 0);
		/* Between the claim and its receive, other requests may complete. */
		if (chance(&local, 30))
			poke();
		if (chance(&local, 50)) {
			int rc = MPI_Mrecv(rv->buf, (int)rv->bufsize, MPI_BYTE, &msg, &st);
			if (msg != MPI_MESSAGE_NULL)
				report("MPI_Mrecv left its message handle set");
			on_recv_done(i, &st, truncated(rc, "MPI_Mrecv"));
		} else {
			MPI_CHECK(MPI_Imrecv(rv->buf, (int)rv->bufsize, MPI_BYTE, &msg, &req));
			add_request(req, 0, i);
		}
		break;
	}
	}
}

/* Orders receives: a random interleaving in which, on each communicator, every exact
 * receive comes before every wildcard one. Each gets a random key in [0, 1); a wildcard's is
 * moved into the range after the last exact key of its communicator. */
static double *order_key;

static int cmp_key(const void *a, const void *b)
{
	double x = order_key[*(const int *)a], y = order_key[*(const int *)b];
	return (x > y) - (x < y);
}

static void order_receives(int *list, int n)
{
	double last_exact[NCOMMS];
	for (int c = 0; c < NCOMMS; c++)
		last_exact[c] = 0;
	order_key = malloc(sizeof(double) * ((size_t)nrecvs + 1));
	for (int i = 0; i < n; i++) {
		recv_t *rv = &recvs[list[i]];
		double k = (double)(rng_next(&local) >> 11) / 9007199254740992.0;
		order_key[list[i]] = k;
		if (rv->stream >= 0 && k > last_exact[rv->comm])
			last_exact[rv->comm] = k;
	}
	for (int i = 0; i < n; i++) {
		recv_t *rv = &recvs[list[i]];
		if (rv->stream < 0) {
			double low = last_exact[rv->comm];
			order_key[list[i]] = low + (1.0 - low) * order_key[list[i]] + 1e-12;
		}
	}
	qsort(list, (size_t)n, sizeof(int), cmp_key);
	free(order_key);
}

/* ---- the checks at the end of a round ---- */

static int cmp_post(const void *a, const void *b)
{
	const recv_t *x = &recvs[*(const int *)a], *y = &recvs[*(const int *)b];
	return (x->post > y->post) - (x->post < y->post);
}

static int matches(const recv_t *rv, const msg_t *m)
{
	return (rv->src == MPI_ANY_SOURCE || rv->src == m->src) &&
	       (rv->tag == MPI_ANY_TAG || rv->tag == m->tag);
}

/* Which message each receive got, by MPI's rules: of one stream's messages, receives ordered
 * by posting get them in sending order. Checks every message got, once, right. */
static void check_round(void)
{
	rplan_t *me = &plan.r[rank];
	int *got = malloc(sizeof(int) * ((size_t)nrecvs + 1)); /* receive -> message */
	int *by = malloc(sizeof(int) * ((size_t)plan.nmsgs + 1)); /* message -> receive */
	for (int i = 0; i < nrecvs; i++)
		got[i] = -1;
	for (int i = 0; i < plan.nmsgs; i++)
		by[i] = -1;
	int *list = malloc(sizeof(int) * ((size_t)nrecvs + 1));
	for (int s = 0; s < me->nstreams; s++) {
		stream_t *st = &me->streams[s];
		int n = 0;
		for (int i = 0; i < nrecvs; i++) {
			recv_t *rv = &recvs[i];
			if (rv->cancel || rv->comm != st->comm)
				continue;
			int w = world_of(rv->comm, color_of[rv->comm][rank], rv->status.MPI_SOURCE);
			if (w == st->src && rv->status.MPI_TAG == st->tag)
				list[n++] = i;
		}
		qsort(list, (size_t)n, sizeof(int), cmp_post);
		if (n != st->n)
			report("from peer %d on %s tag %d: %d messages sent, %d received (%s)",
			       st->src, comm_names[st->comm], st->tag, st->n, n,
			       n < st->n ? "lost" : "duplicated");
		for (int k = 0; k < n && k < st->n; k++) {
			recv_t *rv = &recvs[list[k]];
			const msg_t *m = &plan.msgs[st->msgs[k]];
			got[list[k]] = m->id;
			by[m->id] = list[k];
			char f[160];
			describe_filter(rv, f, sizeof(f));
			if (!matches(rv, m))
				report("from peer %d on %s tag %d: message %d went to a receive that "
				       "does not match it: %s",
				       m->src, comm_names[m->comm], m->tag, m->id, f);
			if ((size_t)rv->count != m->len)
				report("from peer %d on %s tag %d: in posting order, message seq %d "
				       "(%zu B) is next, but the %d-th receive got %d B; %s",
				       m->src, comm_names[m->comm], m->tag, m->seq, m->len, k,
				       rv->count, f);
			else
				check_payload(&plan, round_no, rv, m, "non-overtaking");
			if (rv->expect >= 0 && rv->expect != m->id)
				report("from peer %d on %s tag %d: exact receive expected message %d, "
				       "got %d by posting order; %s",
				       m->src, comm_names[m->comm], m->tag, rv->expect, m->id, f);
		}
	}
	/* Receives whose status names no stream of this round. */
	for (int i = 0; i < nrecvs; i++) {
		recv_t *rv = &recvs[i];
		if (!rv->cancel && got[i] < 0) {
			char f[160];
			describe_filter(rv, f, sizeof(f));
			report("a receive got source %d tag %d count %d, which no message of the "
			       "plan has; %s",
			       rv->status.MPI_SOURCE, rv->status.MPI_TAG, rv->count, f);
		}
	}
	/* Across tags: a receive matching two messages of one sender cannot take the later
	 * one while the earlier is unmatched, so the earlier's receive was posted first. */
	for (int i = 0; i < nrecvs; i++) {
		recv_t *rv = &recvs[i];
		if (rv->cancel || got[i] < 0 || rv->tag != MPI_ANY_TAG)
			continue;
		const msg_t *later = &plan.msgs[got[i]];
		for (int j = 0; j < plan.nmsgs; j++) {
			const msg_t *earlier = &plan.msgs[j];
			if (earlier->dst != rank || earlier->src != later->src ||
			    earlier->comm != later->comm || earlier->order >= later->order ||
			    !matches(rv, earlier) || by[j] < 0)
				continue;
			if (recvs[by[j]].post > rv->post) {
				char f[160];
				describe_filter(rv, f, sizeof(f));
				report("from peer %d on %s: message %d (tag %d, sent %d-th) overtook "
				       "message %d (tag %d, sent %d-th), which it also matches: %s; the "
				       "earlier went to a receive posted %d",
				       later->src, comm_names[later->comm], later->id, later->tag,
				       later->order, earlier->id, earlier->tag, earlier->order, f,
				       recvs[by[j]].post);
			}
		}
	}
	free(list);
	free(got);
	free(by);
}

/* The previous round's buffers: nothing may have written them since. */
static void check_old_buffers(void)
{
	if (!have_old)
		return;
	for (int i = 0; i < old_nrecvs; i++) {
		recv_t *rv = &old_recvs[i];
		if (rv->cancel && rv->race)
			continue; /* a message may have been on its way into it */
		if (rv->cancel) {
			for (size_t k = 0; k < rv->bufsize; k++)
				if (rv->buf[k] != CANARY) {
					report("late write: byte %zu of a receive cancelled last round",
					       k);
					break;
				}
			continue;
		}
		/* Find the message by its header or its stream (its content was checked). */
		int w = world_of(rv->comm, color_of[rv->comm][rank], rv->status.MPI_SOURCE);
		for (int j = 0; j < old_plan.nmsgs; j++) {
			const msg_t *m = &old_plan.msgs[j];
			if (m->dst != rank || m->src != w || m->comm != rv->comm ||
			    m->tag != rv->status.MPI_TAG || m->len != (size_t)rv->count)
				continue;
			if (first_wrong(rv->buf, (size_t)rv->count, m, round_no - 1) ==
			    (size_t)rv->count) {
				w = -2;
				break;
			}
		}
		if (w != -2)
			report("late write: last round's receive of %d B from rank %d tag %d on %s "
			       "changed after it completed",
			       rv->count, rv->status.MPI_SOURCE, rv->status.MPI_TAG,
			       comm_names[rv->comm]);
		else
			for (size_t k = (size_t)rv->count; k < rv->bufsize; k++)
				if (rv->buf[k] != CANARY) {
					report("late write: byte %zu past the count of last round's "
					       "receive from rank %d tag %d on %s",
					       k, rv->status.MPI_SOURCE, rv->status.MPI_TAG,
					       comm_names[rv->comm]);
					break;
				}
	}
}

static void free_old(void)
{
	if (!have_old)
		return;
	for (int i = 0; i < old_nrecvs; i++)
		free(old_recvs[i].buf);
	free(old_recvs);
	free_plan(&old_plan);
	have_old = 0;
}

/* An MPI_Issend must not complete before its receive is posted: the receiver posts it only
 * after the sender's next message, which the sender sends after looking. */
static void sync_check(void)
{
	int a = plan.sync_a, b = plan.sync_b;
	if (rank != a && rank != b)
		return;
	phase = "issend check";
	msg_t m = {.id = plan.nmsgs, .src = a, .dst = b, .comm = 0, .tag = 1,
		   .len = plan.sync_len};
	unsigned char *out = malloc(m.len + 1), *in = malloc(m.len + 1);
	MPI_Request req;
	if (rank == a) {
		fill(out, &m);
		MPI_CHECK(MPI_Issend(out, (int)m.len, MPI_BYTE, b, 1, sync_comm, &req));
		for (int i = 0; i < 20; i++) {
			int flag = 0;
			MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
			if (flag) {
				report("MPI_Issend of %zu B to %d completed before its receive was "
				       "posted",
				       m.len, b);
				break;
			}
			usleep(200);
		}
		if (a != b)
			MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, b, 2, sync_comm));
	}
	if (rank == b) {
		if (a != b)
			MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, a, 2, sync_comm, MPI_STATUS_IGNORE));
		MPI_Status st;
		WAITING("the issend check's message from %d", a);
		MPI_CHECK(MPI_Recv(in, (int)m.len, MPI_BYTE, a, 1, sync_comm, &st));
		int count;
		MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count));
		if ((size_t)count != m.len || first_wrong(in, m.len, &m, round_no) != m.len)
			report("issend check: %d B from %d, expected %zu B intact", count, a, m.len);
	}
	if (rank == a) {
		WAITING("the issend check's MPI_Issend to %d", b);
		MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
	}
	sync_checks++;
	free(out);
	free(in);
}

/* The watchdog: what this rank still waits for, each outstanding request named (not
 * async-signal-safe, but the program is stuck and exits next). */
static void on_watchdog(int sig)
{
	(void)sig;
	fprintf(stderr, "mpi_random HANG rank %d round %d (%s): still waiting for %s\n", rank,
		round_no, phase, waiting);
	for (int k = 0; k < rq.n && k < 200; k++) {
		if (rq.reqs[k] == MPI_REQUEST_NULL)
			continue;
		if (rq.is_send[k]) {
			const msg_t *m = &plan.msgs[rq.index[k]];
			fprintf(stderr,
				"mpi_random HANG rank %d:   %s of message %d (%zu B, seq %d) to %d "
				"tag %d on %s\n",
				rank, kind_names[m->kind], m->id, m->len, m->seq, m->dst, m->tag,
				comm_names[m->comm]);
		} else {
			char f[160];
			const recv_t *rv = &recvs[rq.index[k]];
			describe_filter(rv, f, sizeof(f));
			fprintf(stderr, "mpi_random HANG rank %d:   %s%s, %zu-byte buffer\n", rank,
				rv->cancel ? "cancelled " : "", f, rv->bufsize);
		}
	}
	fflush(stderr);
	_exit(3);
}

/* ---- a round ---- */

/* Sabotage: sends two messages of one stream in the wrong order (once a run), every send of
 * this rank an MPI_Isend so that nothing blocks on the order. */
static void reorder_two(int *order)
{
	static int done;
	for (int i = 0; i < plan.nmsgs; i++)
		if (plan.msgs[i].src == rank)
			plan.msgs[i].kind = K_ISEND;
	for (int i = 0; i < plan.nmsgs && !done; i++) {
		const msg_t *a = &plan.msgs[i];
		for (int j = i + 1; j < plan.nmsgs && a->src == rank && a->len > 0 && !done; j++) {
			const msg_t *b = &plan.msgs[j];
			if (b->src == rank && b->dst == a->dst && b->comm == a->comm &&
			    b->tag == a->tag && b->len > 0) {
				order[i] = j;
				order[j] = i;
				done = 1;
			}
		}
	}
}

static void run_round(int round)
{
	round_no = round;
	phase = "plan";
	make_plan(&plan, round);
	local = rng_new(seed, (uint64_t)round, 1000 + (uint64_t)rank);
	memset(totals, 0, sizeof(totals));
	rplan_t *me = &plan.r[rank];

	/* This rank's receives: for each stream its exact ones, for each group its wildcard
	 * ones, and a few that nothing matches, to cancel. */
	int ncancel = (int)below(&local, 3);
	int max = ncancel + 1;
	for (int s = 0; s < me->nstreams; s++)
		max += me->streams[s].n;
	/* Room for every receive twice: a racing receive whose cancel wins is posted again. */
	recvs = calloc(2 * (size_t)max, sizeof(recv_t));
	nrecvs = 0;
	posts = 0;
	int *early = malloc(sizeof(int) * (size_t)max), *later = malloc(sizeof(int) * (size_t)max);
	int nearly = 0, nlater = 0;
	for (int s = 0; s < me->nstreams; s++) {
		stream_t *st = &me->streams[s];
		for (int k = 0; k < st->exact; k++) {
			recv_t *rv = &recvs[nrecvs];
			rv->comm = st->comm;
			rv->src = st->src;
			rv->tag = st->tag;
			rv->stream = s;
			rv->group = -1;
			if (k < st->preposted)
				early[nearly++] = nrecvs;
			else
				later[nlater++] = nrecvs;
			nrecvs++;
		}
	}
	for (int g = 0; g < me->ngroups; g++) {
		group_t *gr = &me->groups[g];
		for (int k = 0; k < gr->n; k++) {
			recv_t *rv = &recvs[nrecvs];
			rv->comm = gr->comm;
			rv->src = gr->src;
			rv->tag = gr->tag;
			rv->stream = -1;
			rv->group = g;
			if (k < gr->preposted)
				early[nearly++] = nrecvs;
			else
				later[nlater++] = nrecvs;
			nrecvs++;
		}
	}
	/* Streams on communicators without wildcard receives (so that a receive posted again
	 * cannot lose its message to one) and without ready sends (which need their receive
	 * posted all along) may race: some of their receives are cancelled while their messages
	 * arrive, and posted again if the cancel wins. */
	for (int s = 0; s < me->nstreams; s++) {
		stream_t *st = &me->streams[s];
		st->racy = me->style[st->comm] == W_EXACT && chance(&local, 25);
		for (int k = 0; k < st->n; k++) {
			const msg_t *m = &plan.msgs[st->msgs[k]];
			st->racy &= m->kind != K_RSEND;
			if (m->len > st->max_len)
				st->max_len = m->len;
		}
	}
	for (int i = 0; i < nrecvs; i++)
		recvs[i].race = recvs[i].stream >= 0 && me->streams[recvs[i].stream].racy &&
				chance(&local, 40);
	int first_cancel = nrecvs;
	for (int k = 0; k < ncancel; k++) {
		recv_t *rv = &recvs[nrecvs++];
		rv->comm = (int)below(&local, NCOMMS);
		rv->src = chance(&local, 50) ? MPI_ANY_SOURCE : (int)below(&local, (size_t)size);
		if (rv->src != MPI_ANY_SOURCE && color_of[rv->comm][rv->src] != color_of[rv->comm][rank])
			rv->src = rank;
		rv->tag = TAG_NEVER;
		rv->stream = rv->group = -1;
		rv->cancel = 1;
	}
	int nmine = 0;
	for (int i = 0; i < plan.nmsgs; i++)
		nmine += plan.msgs[i].src == rank;
	rq.cap = 2 * nrecvs + nmine + 1;
	rq.reqs = malloc(sizeof(MPI_Request) * (size_t)rq.cap);
	rq.is_send = malloc(sizeof(int) * (size_t)rq.cap);
	rq.index = malloc(sizeof(int) * (size_t)rq.cap);
	rq.n = 0;
	send_bufs = calloc((size_t)plan.nmsgs + 1, sizeof(unsigned char *));
	if (verbose && rank == 0)
		fprintf(stderr, "round %d: %d messages, %llu bytes%s%s%s\n", round, plan.nmsgs,
			(unsigned long long)plan.bytes, plan.flood ? ", flood" : "",
			plan.barrier_after_prepost ? ", barrier after pre-posting" : "",
			plan.sync_check ? ", issend check" : "");

	/* 1. Receives posted before any send, and the ones to cancel. */
	phase = "pre-posting";
	order_receives(early, nearly);
	int cancel_when = (int)below(&local, 3);
	for (int k = first_cancel; k < nrecvs; k++) {
		recv_t *rv = &recvs[k];
		rv->method = M_IRECV;
		receive_buffer(rv, 64);
		MPI_Request req;
		MPI_CHECK(MPI_Irecv(rv->buf, (int)rv->bufsize, MPI_BYTE,
				    comm_rank_of(rv->comm, rv->src), rv->tag, comms[rv->comm], &req));
		int j = add_request(req, 0, k);
		if (cancel_when == 0)
			MPI_CHECK(MPI_Cancel(&rq.reqs[j]));
	}
	for (int i = 0; i < nearly; i++) {
		do_receive(early[i], 1);
		poke();
	}
	if (plan.barrier_after_prepost)
		MPI_CHECK(MPI_Barrier(comms[1]));

	/* 2. Sends, in the plan's order. */
	phase = "sending";
	int *order = malloc(sizeof(int) * ((size_t)plan.nmsgs + 1));
	for (int i = 0; i < plan.nmsgs; i++)
		order[i] = i;
	if (sabotage == SABOTAGE_REORDER)
		reorder_two(order);
	for (int o = 0; o < plan.nmsgs; o++) {
		int i = order[o];
		msg_t *m = &plan.msgs[i];
		if (m->src != rank)
			continue;
		send_bufs[i] = malloc(m->len + 1);
		fill(send_bufs[i], m);
		totals[T_SENT]++;
		totals[T_SENT_BYTES] += m->len;
		totals[T_SENT_SUM] += checksum(send_bufs[i], m->len);
		kinds_used[m->kind]++;
		if (trace)
			fprintf(stderr, "trace rank %d: %s of message %d (%zu B, seq %d) to %d tag %d on %s\n",
				rank, kind_names[m->kind], m->id, m->len, m->seq, m->dst, m->tag,
				comm_names[m->comm]);
		if (plan.flood)
			flood_msgs++;
		int dst = crank_of[m->comm][m->dst];
		MPI_Comm comm = comms[m->comm];
		MPI_Request req;
		WAITING("%s of message %d (%zu B) to %d tag %d on %s", kind_names[m->kind], i, m->len,
			m->dst, m->tag, comm_names[m->comm]);
		switch (m->kind) {
		case K_ISEND:
			MPI_CHECK(MPI_Isend(send_bufs[i], (int)m->len, MPI_BYTE, dst, m->tag, comm,
					    &req));
			add_request(req, 1, i);
			break;
		case K_ISSEND:
			MPI_CHECK(MPI_Issend(send_bufs[i], (int)m->len, MPI_BYTE, dst, m->tag, comm,
					     &req));
			add_request(req, 1, i);
			break;
		case K_SEND:
			MPI_CHECK(MPI_Send(send_bufs[i], (int)m->len, MPI_BYTE, dst, m->tag, comm));
			on_send_done(i);
			break;
		case K_RSEND:
			MPI_CHECK(MPI_Rsend(send_bufs[i], (int)m->len, MPI_BYTE, dst, m->tag, comm));
			on_send_done(i);
			break;
		}
		poke();
	}
	cancel_races();
	if (cancel_when == 1)
		for (int j = 0; j < rq.n; j++)
			if (!rq.is_send[j] && recvs[rq.index[j]].cancel &&
			    rq.reqs[j] != MPI_REQUEST_NULL)
				MPI_CHECK(MPI_Cancel(&rq.reqs[j]));
	if (plan.flood) {
		/* Every send posted before any receive: they all arrive unexpected. */
		phase = "flood barrier";
		WAITING("the flood's barrier");
		MPI_CHECK(MPI_Barrier(comms[1]));
	}

	/* 3. The other receives, in random order and ways. */
	phase = "receiving";
	order_receives(later, nlater);
	for (int i = 0; i < nlater; i++) {
		do_receive(later[i], 0);
		poke();
	}
	if (cancel_when == 2)
		for (int j = 0; j < rq.n; j++)
			if (!rq.is_send[j] && recvs[rq.index[j]].cancel &&
			    rq.reqs[j] != MPI_REQUEST_NULL)
				MPI_CHECK(MPI_Cancel(&rq.reqs[j]));
	/* A look for what nobody sends finds nothing. */
	if (chance(&local, 30)) {
		int flag = 1, c = (int)below(&local, NCOMMS);
		MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_NEVER, comms[c], &flag, MPI_STATUS_IGNORE));
		if (flag)
			report("MPI_Iprobe found a message of tag %d, which nobody sends, on %s",
			       TAG_NEVER, comm_names[c]);
		MPI_Message msg = MPI_MESSAGE_NULL;
		MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, TAG_NEVER, comms[c], &flag, &msg,
				      MPI_STATUS_IGNORE));
		if (flag || msg != MPI_MESSAGE_NULL)
			report("MPI_Improbe claimed a message of tag %d, which nobody sends, on %s",
			       TAG_NEVER, comm_names[c]);
	}

	/* 4. Everything outstanding. */
	phase = "completing";
	cancel_races();
	complete_all();
	for (int k = first_cancel; k < nrecvs; k++)
		if (!recvs[k].done)
			fatal("cancelled receive %d never completed", k);
	for (int i = 0; i < nrecvs; i++)
		if (!recvs[i].done)
			fatal("receive %d never completed", i);

	/* 5. Checks: every message, MPI's order, no late writes. */
	phase = "checking";
	check_round();
	if (plan.sync_check)
		sync_check();
	phase = "allreduce";
	totals[T_VIOLATIONS] = (uint64_t)violations;
	uint64_t sum[T_N];
	WAITING("the round's MPI_Allreduce");
	MPI_CHECK(MPI_Allreduce(totals, sum, T_N, MPI_UINT64_T, MPI_SUM,
				comms[round % 2 ? 1 : 0]));
	if (sum[T_SENT] != (uint64_t)plan.nmsgs || sum[T_RECV] != (uint64_t)plan.nmsgs ||
	    sum[T_SENT_BYTES] != plan.bytes || sum[T_RECV_BYTES] != plan.bytes ||
	    sum[T_SENT_SUM] != sum[T_RECV_SUM])
		report("global counts: planned %d messages and %llu bytes; sent %llu messages, %llu "
		       "bytes, checksum %016llx; received %llu messages, %llu bytes, checksum %016llx",
		       plan.nmsgs, (unsigned long long)plan.bytes,
		       (unsigned long long)sum[T_SENT], (unsigned long long)sum[T_SENT_BYTES],
		       (unsigned long long)sum[T_SENT_SUM], (unsigned long long)sum[T_RECV],
		       (unsigned long long)sum[T_RECV_BYTES], (unsigned long long)sum[T_RECV_SUM]);
	phase = "late writes";
	check_old_buffers();
	free_old();
	if (violations || sum[T_VIOLATIONS]) {
		fprintf(stderr, "mpi_random rank %d: %ld violations in round %d (seed %llu)\n", rank,
			violations, round, (unsigned long long)seed);
		fflush(stderr);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (int t = 0; t < T_N; t++)
		run_totals[t] += totals[t];

	for (int i = 0; i < plan.nmsgs; i++)
		free(send_bufs[i]);
	free(send_bufs);
	free(rq.reqs);
	free(rq.is_send);
	free(rq.index);
	free(early);
	free(later);
	free(order);
	old_recvs = recvs;
	old_nrecvs = nrecvs;
	old_plan = plan;
	have_old = 1;
}

/* ---- the collective round ---- */

static void collective_round(int round)
{
	round_no = round;
	phase = "collectives";
	rng_t r = rng_new(seed, (uint64_t)round, 2);
	/* MPI_Bcast of a random size from a random root on a random communicator. */
	int c = (int)below(&r, NCOMMS), csize;
	MPI_CHECK(MPI_Comm_size(comms[c], &csize));
	int root = (int)below(&r, (size_t)csize);
	msg_t m = {.id = 1 << 20, .src = root, .len = random_size(&r, 0)};
	unsigned char *buf = malloc(m.len + 1);
	int croot_world = world_of(c, color_of[c][rank], root);
	if (crank_of[c][rank] == root)
		fill(buf, &m);
	else
		memset(buf, CANARY, m.len);
	WAITING("MPI_Bcast of %zu B from %d on %s", m.len, root, comm_names[c]);
	MPI_CHECK(MPI_Bcast(buf, (int)m.len, MPI_BYTE, root, comms[c]));
	size_t bad = first_wrong(buf, m.len, &m, round);
	if (bad < m.len)
		report("MPI_Bcast of %zu B from rank %d (world %d) on %s: byte %zu wrong", m.len,
		       root, croot_world, comm_names[c], bad);
	free(buf);

	/* MPI_Alltoallv of random sizes on MPI_COMM_WORLD: the pair (i, j)'s block is message
	 * i * size + j of this round. */
	size_t *len = malloc(sizeof(size_t) * (size_t)size * size);
	for (int i = 0; i < size * size; i++)
		len[i] = below(&r, 5) == 0 ? 0 : below(&r, 70000);
	int *scount = malloc(sizeof(int) * size), *sdispl = malloc(sizeof(int) * size),
	    *rcount = malloc(sizeof(int) * size), *rdispl = malloc(sizeof(int) * size);
	size_t so = 0, ro = 0;
	for (int j = 0; j < size; j++) {
		scount[j] = (int)len[rank * size + j];
		sdispl[j] = (int)so;
		so += len[rank * size + j];
		rcount[j] = (int)len[j * size + rank];
		rdispl[j] = (int)ro;
		ro += len[j * size + rank];
	}
	unsigned char *out = malloc(so + 1), *in = malloc(ro + 1);
	for (int j = 0; j < size; j++) {
		msg_t b = {.id = rank * size + j, .src = rank, .len = len[rank * size + j]};
		fill(out + sdispl[j], &b);
	}
	memset(in, CANARY, ro);
	WAITING("MPI_Alltoallv");
	MPI_CHECK(MPI_Alltoallv(out, scount, sdispl, MPI_BYTE, in, rcount, rdispl, MPI_BYTE,
				MPI_COMM_WORLD));
	for (int j = 0; j < size; j++) {
		msg_t b = {.id = j * size + rank, .src = j, .len = len[j * size + rank]};
		size_t bad = first_wrong(in + rdispl[j], b.len, &b, round);
		if (bad < b.len)
			report("MPI_Alltoallv: block from %d (%zu B): byte %zu wrong", j, b.len, bad);
	}
	free(out);
	free(in);
	free(len);
	free(scount);
	free(sdispl);
	free(rcount);
	free(rdispl);

	/* The totals of all rounds: every message sent was received, byte for byte. */
	uint64_t sum[T_N];
	run_totals[T_VIOLATIONS] = (uint64_t)violations;
	WAITING("the final MPI_Allreduce");
	MPI_CHECK(MPI_Allreduce(run_totals, sum, T_N, MPI_UINT64_T, MPI_SUM, comms[3]));
	if (sum[T_SENT] != sum[T_RECV] || sum[T_SENT_BYTES] != sum[T_RECV_BYTES] ||
	    sum[T_SENT_SUM] != sum[T_RECV_SUM])
		report("all rounds: sent %llu messages (%llu B, checksum %016llx), received %llu "
		       "(%llu B, checksum %016llx)",
		       (unsigned long long)sum[T_SENT], (unsigned long long)sum[T_SENT_BYTES],
		       (unsigned long long)sum[T_SENT_SUM], (unsigned long long)sum[T_RECV],
		       (unsigned long long)sum[T_RECV_BYTES], (unsigned long long)sum[T_RECV_SUM]);
	if (violations || sum[T_VIOLATIONS]) {
		fprintf(stderr, "mpi_random rank %d: %ld violations in the collective round\n",
			rank, violations);
		fflush(stderr);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

static void make_comms(void)
{
	comms[0] = MPI_COMM_WORLD;
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[1]));
	MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comms[2]));
	MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &comms[3]));
	MPI_CHECK(MPI_Comm_dup(comms[2], &comms[4]));
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &sync_comm));
	int colors[NCOMMS] = {0, 0, rank % 2, 0, rank % 2};
	for (int c = 0; c < NCOMMS; c++) {
		MPI_CHECK(MPI_Comm_set_errhandler(comms[c], MPI_ERRORS_RETURN));
		int mine[2] = {colors[c], 0}, all[128];
		MPI_CHECK(MPI_Comm_rank(comms[c], &mine[1]));
		MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD));
		for (int w = 0; w < size; w++) {
			color_of[c][w] = all[2 * w];
			crank_of[c][w] = all[2 * w + 1];
		}
	}
	MPI_CHECK(MPI_Comm_set_errhandler(sync_comm, MPI_ERRORS_RETURN));
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	int rounds = -1, watchdog = 0, pos = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-m") && i + 1 < argc)
			max_bytes = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "-f") && i + 1 < argc)
			flood_max = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-w") && i + 1 < argc)
			watchdog = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-S") && i + 1 < argc && !strcmp(argv[i + 1], "reorder"))
			sabotage = SABOTAGE_REORDER, i++;
		else if (!strcmp(argv[i], "-S") && i + 1 < argc && !strcmp(argv[i + 1], "corrupt"))
			sabotage = SABOTAGE_CORRUPT, i++;
		else if (!strcmp(argv[i], "-M"))
			mprobe_ssend = 1;
		else if (!strcmp(argv[i], "-t"))
			trace = verbose = 1;
		else if (!strcmp(argv[i], "-v"))
			verbose = 1;
		else if (pos == 0 && ++pos)
			seed = strtoull(argv[i], NULL, 0);
		else if (pos == 1 && ++pos)
			rounds = atoi(argv[i]);
		else
			rounds = -1, pos = 99;
	}
	if (pos != 2 || rounds < 0 || size < 2 || size > 64 || max_bytes < 1 ||
	    max_bytes > (64u << 20) || flood_max < 0) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -n 2..64 %s SEED ROUNDS [-m MAX_BYTES] [-f "
					"FLOOD] [-w WATCHDOG_S] [-M] [-S reorder|corrupt] [-v] [-t]\n",
				argv[0]);
		MPI_Finalize();
		return 2;
	}
	if (watchdog > 0) {
		signal(SIGALRM, on_watchdog);
		alarm((unsigned)watchdog);
	}
	int *ub, flag;
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
	tag_ub = flag && *ub < (1 << 30) ? *ub : 1 << 30;
	if (tag_ub < 32767)
		fatal("MPI_TAG_UB is %d, below MPI's minimum of 32767", tag_ub);
	make_comms();
	for (int round = 0; round < rounds; round++)
		run_round(round);
	collective_round(rounds);
	free_old();
	printf("mpi_random rank %d/%d: seed %llu, %d rounds: sent %llu messages (%llu B; isend "
	       "%ld, issend %ld, send %ld, rsend %ld; flood %ld), received %llu (%llu B; "
	       "irecv %ld, recv %ld, probe %ld, iprobe %ld, mprobe %ld, improbe %ld; wildcard "
	       "%ld), %ld cancelled, racing cancels %ld won %ld lost, %ld issend checks, %ld "
	       "tests: ok\n",
	       rank, size, (unsigned long long)seed, rounds,
	       (unsigned long long)run_totals[T_SENT], (unsigned long long)run_totals[T_SENT_BYTES],
	       kinds_used[K_ISEND], kinds_used[K_ISSEND], kinds_used[K_SEND], kinds_used[K_RSEND],
	       flood_msgs, (unsigned long long)run_totals[T_RECV],
	       (unsigned long long)run_totals[T_RECV_BYTES], methods_used[M_IRECV],
	       methods_used[M_RECV], methods_used[M_PROBE], methods_used[M_IPROBE],
	       methods_used[M_MPROBE], methods_used[M_IMPROBE], wildcards_used, cancels_done,
	       races_cancelled, races_received, sync_checks, tests_called);
	fflush(stdout);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		printf("mpi_random: all checks passed on %d ranks, seed %llu, %d rounds\n", size,
		       (unsigned long long)seed, rounds);
		fflush(stdout);
	}
	for (int c = 1; c < NCOMMS; c++)
		MPI_Comm_free(&comms[c]);
	MPI_Comm_free(&sync_comm);
	MPI_Finalize();
	return 0;
}

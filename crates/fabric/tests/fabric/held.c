/*
 * Operations held by nicmsg's provider past its engine's room. Two endpoints each post
 * OPERATIONS sends to the other, then OPERATIONS receives, and only then read their queues:
 * a pattern MPI calls safe (MPI_Isend, MPI_Irecv, MPI_Waitall). The provider used to refuse
 * the 385th send with -FI_EAGAIN for as long as the peer had not received, and the peer,
 * refused too, never did: both programs spun for ever. Now every post is taken; each message
 * arrives once, whole, in order. Then the same with the receives posted first. Then a
 * receive held behind others is cancelled (it completes with FI_ECANCELED), and a peek does
 * not report a message that a receive held earlier will take; that receive gets it, and a
 * held FI_CLAIM receive is not cancelled (its message is matched already), and one
 * endpoint's held sends enter its engine while only the other endpoint is read, or while the
 * program calls nothing. Last, a
 * receive posted behind a few hundred others whose messages are not sent yet still takes the
 * message that is there for it. With a small engine table (NICMSG_SLOTS=640 or 256) the
 * checks of held operations run; with the default table, where FILLING operations are not
 * held, the last check runs instead (it needs FITTING receives in the engine). Prints
 * "held: ok" and exits 0, or says what failed.
 *
 *   cc -o held held.c -lfabric && FI_PROVIDER_PATH=DIR ./held
 */
#define CHECK_NAME "held"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <time.h>

/* Operations each endpoint posts before reading its queue: several times its engine's room
 * in the library's table of 640 slots, which the test sets (NICMSG_SLOTS; 512 operations,
 * 384 of them sends; the provider's own table of 16,384 holds none of them). */
#define OPERATIONS 1500
/* Every hundredth message is long (rendezvous), the others short. */
#define SHORT_BYTES 16
#define LONG_BYTES 100000
#define LONG_EVERY 100
/* Longest wait for all the completions. */
#define WAIT_SECONDS 30
/* Receives of the cancel and peek checks: more than the engine's room for receives (384),
 * so the last ones are held. */
#define FILLING 500
/* Receives that fit in the engine, as they did before the provider held any (512 operations
 * in flight, sends or receives), but are more than a share of 128 receives. */
#define FITTING 300
/* How long a receive whose message is there may take. */
#define TAKEN_WITHIN_SECONDS 3

/* How long the peek looks: the message arrives within microseconds on loopback. */
#define PEEK_FOR_MS 300

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static size_t message_len(int seq)
{
	return seq % LONG_EVERY == LONG_EVERY - 1 ? LONG_BYTES : SHORT_BYTES;
}

static unsigned char pattern(int from, int seq, size_t i)
{
	return (unsigned char)(from * 101 + seq * 7 + i * 13 + (i >> 8));
}

/* Posts `op` until it is taken, failing if it is refused for more than a second: a refusal
 * that lasts means the provider waits for something only the peer's posts would bring. */
#define POST(op)                                                                           \
	do {                                                                               \
		time_t post_start_ = time(NULL);                                           \
		ssize_t post_ret_;                                                         \
		while ((post_ret_ = (op)) == -FI_EAGAIN) {                                 \
			if (time(NULL) - post_start_ > 1)                                  \
				FAIL("%s refused with -FI_EAGAIN for over a second", #op); \
		}                                                                          \
		CHECK(post_ret_);                                                          \
	} while (0)

struct side {
	struct node *node;
	fi_addr_t peer;
	int id;
	unsigned char **out, **in;
	int completions;
};

static void post_sends(struct side *s)
{
	for (int seq = 0; seq < OPERATIONS; seq++) {
		size_t len = message_len(seq);
		for (size_t i = 0; i < len; i++)
			s->out[seq][i] = pattern(s->id, seq, i);
		POST(fi_tsend(s->node->ep, s->out[seq], len, NULL, s->peer, 1, s->out[seq]));
	}
}

static void post_receives(struct side *s)
{
	for (int seq = 0; seq < OPERATIONS; seq++)
		POST(fi_trecv(s->node->ep, s->in[seq], message_len(seq), NULL, FI_ADDR_UNSPEC, 1,
			      0, s->in[seq]));
}

/* Reads both queues until each side has all its 2 * OPERATIONS completions. */
static void complete_all(struct side *sides)
{
	time_t start = time(NULL);
	while (sides[0].completions < 2 * OPERATIONS || sides[1].completions < 2 * OPERATIONS) {
		if (time(NULL) - start > WAIT_SECONDS)
			FAIL("after %d s: %d and %d of %d completions", WAIT_SECONDS,
			     sides[0].completions, sides[1].completions, 2 * OPERATIONS);
		for (int k = 0; k < 2; k++) {
			struct fi_cq_tagged_entry entries[16];
			ssize_t got = fi_cq_read(sides[k].node->cq, entries, 16);
			if (got == -FI_EAVAIL) {
				struct fi_cq_err_entry error = {0};
				CHECK(fi_cq_readerr(sides[k].node->cq, &error, 0));
				FAIL("an operation failed: %s", fi_strerror(error.err));
			}
			if (got > 0)
				sides[k].completions += (int)got;
			else if (got != -FI_EAGAIN)
				CHECK(got);
		}
	}
}

static void verify(struct side *s, int from)
{
	for (int seq = 0; seq < OPERATIONS; seq++)
		for (size_t i = 0; i < message_len(seq); i++)
			if (s->in[seq][i] != pattern(from, seq, i))
				FAIL("message %d from %d: byte %zu is %u, want %u (lost, doubled "
				     "or out of order)",
				     seq, from, i, s->in[seq][i], pattern(from, seq, i));
}

static void many_operations_before_any_read(struct side *sides, int receives_first)
{
	for (int k = 0; k < 2; k++) {
		sides[k].completions = 0;
		for (int seq = 0; seq < OPERATIONS; seq++)
			memset(sides[k].in[seq], 0, message_len(seq));
	}
	for (int k = 0; k < 2; k++) {
		if (receives_first)
			post_receives(&sides[k]);
		post_sends(&sides[k]);
		if (!receives_first)
			post_receives(&sides[k]);
	}
	complete_all(sides);
	verify(&sides[0], 1);
	verify(&sides[1], 0);
}

/* The next entry of `n`'s queue, or its error entry; fails after WAIT_SECONDS. */
static void next_entry(struct node *n, struct fi_cq_tagged_entry *entry, int *err)
{
	time_t start = time(NULL);
	for (;;) {
		ssize_t got = fi_cq_read(n->cq, entry, 1);
		if (got == 1) {
			*err = 0;
			return;
		}
		if (got == -FI_EAVAIL) {
			struct fi_cq_err_entry error = {0};
			CHECK(fi_cq_readerr(n->cq, &error, 0));
			entry->op_context = error.op_context;
			*err = error.err;
			return;
		}
		if (got != -FI_EAGAIN)
			CHECK(got);
		if (time(NULL) - start > WAIT_SECONDS)
			FAIL("no completion in %d s", WAIT_SECONDS);
	}
}

/* Reads `n`'s queue until it is empty. */
static void drain(struct node *n)
{
	struct fi_cq_tagged_entry entry;
	while (fi_cq_read(n->cq, &entry, 1) == 1)
		;
}

/* Takes `count` receive completions from `a`'s queue, failing at an error; after each, reads
 * `sender`'s queue empty if one is given. */
static void take_receives(struct node *a, int count, struct node *sender)
{
	for (int received = 0; received < count; received++) {
		struct fi_cq_tagged_entry entry;
		int err;
		next_entry(a, &entry, &err);
		if (err)
			FAIL("a receive failed: %s", fi_strerror(err));
		if (sender)
			drain(sender);
	}
}

/* A receive held behind FILLING others is cancelled: it completes with FI_ECANCELED, and the
 * others are still there to take what comes. */
static void a_held_receive_is_cancelled(struct node *a, struct node *b, fi_addr_t to_a)
{
	static char fill[FILLING][SHORT_BYTES], last[SHORT_BYTES];
	for (int i = 0; i < FILLING; i++)
		POST(fi_trecv(a->ep, fill[i], SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 2, 0, fill[i]));
	POST(fi_trecv(a->ep, last, SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 3, 0, last));
	CHECK(fi_cancel(&a->ep->fid, last));
	struct fi_cq_tagged_entry entry;
	int err;
	next_entry(a, &entry, &err);
	if (entry.op_context != last || err != FI_ECANCELED)
		FAIL("the cancelled receive completed with %s", err ? fi_strerror(err) : "success");
	static char out[SHORT_BYTES] = "filler";
	for (int i = 0; i < FILLING; i++)
		POST(fi_tsend(b->ep, out, SHORT_BYTES, NULL, to_a, 2, NULL));
	for (int received = 0; received < FILLING;) {
		next_entry(a, &entry, &err);
		if (err)
			FAIL("a filling receive failed: %s", fi_strerror(err));
		received++;
		struct fi_cq_tagged_entry sent;
		while (fi_cq_read(b->cq, &sent, 1) == 1)
			;
	}
}

/* An FI_CLAIM receive held behind FILLING others is not cancelled: its message was matched
 * when the peek claimed it, and the engine does not cancel a claimed receive either (it
 * completes as received). Withdrawn, it completed with FI_ECANCELED and left its message
 * claimed for ever: never delivered, its buffer never freed, and a sender waiting for a long
 * message's clear-to-send waited for ever. */
static void a_held_claimed_receive_is_not_cancelled(struct node *a, struct node *b,
						    fi_addr_t to_a)
{
	static char fill[FILLING][SHORT_BYTES], claimed[SHORT_BYTES];
	for (int i = 0; i < FILLING; i++)
		POST(fi_trecv(a->ep, fill[i], SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 10, 0, fill[i]));
	static char out[SHORT_BYTES] = "claimed one";
	POST(fi_tsend(b->ep, out, SHORT_BYTES, NULL, to_a, 11, NULL));
	struct fi_context claimer;
	struct fi_msg_tagged peek = {.addr = FI_ADDR_UNSPEC, .tag = 11, .context = &claimer};
	for (time_t start = time(NULL);;) {
		struct fi_cq_tagged_entry sent;
		fi_cq_read(b->cq, &sent, 1);
		CHECK(fi_trecvmsg(a->ep, &peek, FI_PEEK | FI_CLAIM));
		struct fi_cq_tagged_entry entry;
		int err;
		next_entry(a, &entry, &err);
		if (!err)
			break;
		if (err != FI_ENOMSG)
			FAIL("the claiming peek failed: %s", fi_strerror(err));
		if (time(NULL) - start > WAIT_SECONDS)
			FAIL("the message to claim did not arrive in %d s", WAIT_SECONDS);
	}
	struct iovec iov = {.iov_base = claimed, .iov_len = SHORT_BYTES};
	struct fi_msg_tagged msg = {
		.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 11, .context = &claimer};
	POST(fi_trecvmsg(a->ep, &msg, FI_CLAIM));
	ssize_t cancelled = fi_cancel(&a->ep->fid, &claimer);
	if (cancelled != 0 && cancelled != -FI_ENOENT)
		FAIL("fi_cancel of the claimed receive: %s", fi_strerror((int)-cancelled));
	static char filler[SHORT_BYTES] = "filler";
	for (int i = 0; i < FILLING; i++)
		POST(fi_tsend(b->ep, filler, SHORT_BYTES, NULL, to_a, 10, NULL));
	for (int received = 0; received < FILLING + 1; received++) {
		struct fi_cq_tagged_entry entry;
		int err;
		next_entry(a, &entry, &err);
		if (entry.op_context == &claimer && err)
			FAIL("the claimed receive completed with %s, its message lost", fi_strerror(err));
		if (err)
			FAIL("a filling receive failed: %s", fi_strerror(err));
		if (entry.op_context == &claimer && memcmp(claimed, out, SHORT_BYTES))
			FAIL("the claimed receive got another message than the one claimed");
		struct fi_cq_tagged_entry sent;
		while (fi_cq_read(b->cq, &sent, 1) == 1)
			;
	}
}

/* A peek does not report a message a receive held before it will take; that receive gets
 * it once the receives ahead of it have completed. */
static void a_peek_leaves_a_held_receive_its_message(struct node *a, struct node *b,
						     fi_addr_t to_a)
{
	static char fill[FILLING][SHORT_BYTES], held[SHORT_BYTES];
	for (int i = 0; i < FILLING; i++)
		POST(fi_trecv(a->ep, fill[i], SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 4, 0, fill[i]));
	POST(fi_trecv(a->ep, held, SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 5, 0, held));
	static char out[SHORT_BYTES] = "for held one";
	POST(fi_tsend(b->ep, out, SHORT_BYTES, NULL, to_a, 5, NULL));
	struct fi_context peek_context;
	struct fi_msg_tagged peek = {.addr = FI_ADDR_UNSPEC, .tag = 5, .context = &peek_context};
	/* Long enough for the message to arrive (it would be found by then). */
	for (double until = now_ms() + PEEK_FOR_MS; now_ms() < until;) {
		struct fi_cq_tagged_entry sent;
		fi_cq_read(b->cq, &sent, 1);
		CHECK(fi_trecvmsg(a->ep, &peek, FI_PEEK));
		struct fi_cq_tagged_entry entry;
		int err;
		next_entry(a, &entry, &err);
		if (entry.op_context != &peek_context)
			FAIL("a receive completed before its message was sent");
		if (err != FI_ENOMSG)
			FAIL("the peek found the message a held receive takes (%s)", err ? fi_strerror(err) : "found");
	}
	static char filler[SHORT_BYTES] = "filler";
	for (int i = 0; i < FILLING; i++)
		POST(fi_tsend(b->ep, filler, SHORT_BYTES, NULL, to_a, 4, NULL));
	for (int received = 0; received < FILLING + 1;) {
		struct fi_cq_tagged_entry entry;
		int err;
		next_entry(a, &entry, &err);
		if (err)
			FAIL("a receive failed: %s", fi_strerror(err));
		if (entry.op_context == held && memcmp(held, out, SHORT_BYTES))
			FAIL("the held receive got another message than the one sent for it");
		received++;
		struct fi_cq_tagged_entry sent;
		while (fi_cq_read(b->cq, &sent, 1) == 1)
			;
	}
}

/* A receive posted behind FITTING others whose messages are not sent yet takes the message
 * already there for it: a program waits for it before it sends what the others wait for (a
 * rank posts MPI_Irecv for its workers' results, then MPI_Recv of a request, and the workers
 * send their results once answered). Receives held past a share of 128 in the engine kept it
 * behind the others, and that program hung where it ran before receives were held. */
static void a_receive_is_not_held_behind_receives_that_fit(struct node *a, struct node *b,
							   fi_addr_t to_a)
{
	static char later[FITTING][SHORT_BYTES], request[SHORT_BYTES];
	for (int i = 0; i < FITTING; i++)
		POST(fi_trecv(a->ep, later[i], SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 6, 0, later[i]));
	static char out[SHORT_BYTES] = "request";
	POST(fi_tsend(b->ep, out, SHORT_BYTES, NULL, to_a, 7, NULL));
	POST(fi_trecv(a->ep, request, SHORT_BYTES, NULL, FI_ADDR_UNSPEC, 7, 0, request));
	time_t start = time(NULL);
	for (;;) {
		struct fi_cq_tagged_entry entry;
		ssize_t got = fi_cq_read(a->cq, &entry, 1);
		if (got == 1 && entry.op_context == request)
			break;
		if (got == 1)
			FAIL("a receive completed before its message was sent");
		if (got != -FI_EAGAIN)
			CHECK(got);
		struct fi_cq_tagged_entry sent;
		fi_cq_read(b->cq, &sent, 1);
		if (time(NULL) - start > TAKEN_WITHIN_SECONDS)
			FAIL("a receive whose message is there waits behind %d receives whose "
			     "messages are not sent yet",
			     FITTING);
	}
	static char result[SHORT_BYTES] = "result";
	for (int i = 0; i < FITTING; i++)
		POST(fi_tsend(b->ep, result, SHORT_BYTES, NULL, to_a, 6, NULL));
	take_receives(a, FITTING, b);
}

/* a posts FILLING receives with `tag`, then b FILLING sends to a with it: more than either
 * engine takes, so both endpoints hold some. */
static void post_filling_pair(struct node *a, struct node *b, fi_addr_t to_a, uint64_t tag)
{
	static char in[FILLING][SHORT_BYTES];
	for (int i = 0; i < FILLING; i++)
		POST(fi_trecv(a->ep, in[i], SHORT_BYTES, NULL, FI_ADDR_UNSPEC, tag, 0, in[i]));
	static char out[SHORT_BYTES] = "from b";
	for (int i = 0; i < FILLING; i++)
		POST(fi_tsend(b->ep, out, SHORT_BYTES, NULL, to_a, tag, NULL));
}

/* Sends one endpoint holds past its engine's room enter it while the program reads only the
 * other endpoint's queue: b posts FILLING sends (more than its engine takes) and is not
 * called again until all of a's receives completed. Held sends entered only during calls for
 * their own endpoint, so they waited for ever there (and, in the checks above, whenever b's
 * queue was last read before its thread engine had freed room: three runs in 240 under
 * load); the provider's progress thread now lets every endpoint take in what it holds. */
static void held_sends_enter_while_another_endpoint_is_read(struct node *a, struct node *b,
							     fi_addr_t to_a)
{
	post_filling_pair(a, b, to_a, 12);
	take_receives(a, FILLING, NULL);
	drain(b);
}

/* Held operations move while the application calls nothing (FI_PROGRESS_AUTO with engine
 * threads; inline, the engines' standby threads do their part): a posts FILLING receives and
 * b FILLING sends, both more than their engines take; after a second of sleep every receive
 * has completed, so one read of a's queue until -FI_EAGAIN takes them all. They entered the
 * engine only during calls into the provider, and the read found the first engine-full only
 * (provider/progress.c). */
static void held_operations_move_while_the_application_sleeps(struct node *a, struct node *b,
							      fi_addr_t to_a)
{
	post_filling_pair(a, b, to_a, 13);
	struct timespec second = {1, 0};
	nanosleep(&second, NULL);
	int completed = 0;
	struct fi_cq_tagged_entry entries[16];
	ssize_t got;
	while ((got = fi_cq_read(a->cq, entries, 16)) > 0)
		completed += (int)got;
	if (got != -FI_EAGAIN)
		CHECK(got);
	if (completed != FILLING)
		FAIL("%d of %d receives completed while the program slept: held operations did "
		     "not move",
		     completed, FILLING);
	drain(b);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node a, b;
	open_two(FI_TAGGED, &info, &fabric, &domain, &a, FI_WAIT_NONE, &b, FI_WAIT_NONE);
	struct side sides[2] = {{.node = &a, .peer = insert_peer(&a, &b), .id = 0},
				{.node = &b, .peer = insert_peer(&b, &a), .id = 1}};
	for (int k = 0; k < 2; k++) {
		sides[k].out = calloc(OPERATIONS, sizeof(unsigned char *));
		sides[k].in = calloc(OPERATIONS, sizeof(unsigned char *));
		if (!sides[k].out || !sides[k].in)
			FAIL("out of memory");
		for (int seq = 0; seq < OPERATIONS; seq++) {
			sides[k].out[seq] = malloc(message_len(seq));
			sides[k].in[seq] = malloc(message_len(seq));
			if (!sides[k].out[seq] || !sides[k].in[seq])
				FAIL("out of memory");
		}
	}
	many_operations_before_any_read(sides, 0);
	many_operations_before_any_read(sides, 1);
	if (getenv("NICMSG_SLOTS")) {
		/* FILLING operations are held only past a small table's room. */
		a_held_receive_is_cancelled(&a, &b, sides[1].peer);
		a_peek_leaves_a_held_receive_its_message(&a, &b, sides[1].peer);
		a_held_claimed_receive_is_not_cancelled(&a, &b, sides[1].peer);
		held_sends_enter_while_another_endpoint_is_read(&a, &b, sides[1].peer);
		held_operations_move_while_the_application_sleeps(&a, &b, sides[1].peer);
	} else {
		/* FITTING receives fit in the default table, not in a small one. */
		a_receive_is_not_held_behind_receives_that_fit(&a, &b, sides[1].peer);
	}
	struct node *nodes[] = {&a, &b};
	close_all(nodes, 2, domain, fabric, info);
	printf("held: ok\n");
	return 0;
}

/* Background progress of operations held past an engine's room.
 *
 * Operations the provider holds past an engine's room (src/held.rs) enter the engine as room
 * frees. Calls into the provider for their endpoint let them in (a post, a read of its
 * queues), but an application may make none for that endpoint while it waits for them:
 *   - an endpoint whose engine runs on its own thread reports FI_PROGRESS_AUTO, and its
 *     application may wait outside libfabric (a pipe, a timer, another library): two
 *     endpoints that posted 500 receives and 500 sends at 640 slots, then slept a second,
 *     found 288 receives completed (tests/fabric/held.c);
 *   - a program with several endpoints may read the queue of one while another's held sends
 *     are what it waits for: those never entered, and the program hung (held.c, three times
 *     in 240 runs under load, and every time in its check that reads only the receiver).
 * So while any endpoint holds operations, the provider's own thread lets it take in what
 * room freed, looking every PROGRESS_PERIOD_NS while operations finish and backing off to
 * PROGRESS_PERIOD_MAX_NS while none do; it sleeps on a condition variable otherwise, and
 * costs nothing where nothing is held. An inline engine's own work goes on as before, in the
 * application's calls and on its standby thread.
 *
 * The thread is started by the first post that leaves something held, and stopped when the
 * provider is unloaded (a destructor), so no thread runs code of an unmapped library. It
 * takes `provider_lock` as every call does. */
#include "provider.h"

#include <time.h>

/* How soon the thread looks again while something is held, after a look that found
 * operations finished (or its first): an engine frees room as messages complete,
 * microseconds to milliseconds apart; a look is one call an endpoint. */
#define PROGRESS_PERIOD_NS 200000L
/* Each look that found nothing finished waits twice as long, up to this: held operations
 * whose receivers take nothing for minutes cost a look every 10 ms, not 5,000 a second. */
#define PROGRESS_PERIOD_MAX_NS 10000000L

static pthread_t progress_thread;
static bool progress_started;
static bool progress_stopping;
/* The thread sleeps until a post wakes it (nothing was held at its last look); while it looks
 * on its own, posts leave it alone. */
static bool progress_asleep;
/* Waited on with provider_lock; its clock is CLOCK_MONOTONIC (progress_start). */
static pthread_cond_t progress_wake;

/* What a look at the endpoints found. */
struct progress_look {
	bool holding;	/* an endpoint still holds operations */
	bool moved;	/* an operation finished, so room freed and held ones entered */
};

/* Lets every endpoint take in what it holds. */
static struct progress_look progress_held(void)
{
	struct progress_look look = {false, false};
	for (struct nicmsg_ep *ep = open_endpoints; ep; ep = ep->next_open) {
		if (!ep->engine || !nf_holds(ep->engine))
			continue;
		look.moved |= ep_progress(ep, NULL, false, NULL) > 0;
		look.holding |= nf_holds(ep->engine) != 0;
	}
	return look;
}

/* Waits on progress_wake (with provider_lock) for at most `period_ns` (a signal then means
 * the provider is being unloaded). */
static void progress_wait(long period_ns)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += period_ns;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&progress_wake, &provider_lock, &until);
}

static void *progress_loop(void *unused)
{
	(void)unused;
	long period_ns = PROGRESS_PERIOD_NS;
	pthread_mutex_lock(&provider_lock);
	while (!progress_stopping) {
		struct progress_look look = progress_held();
		if (!look.holding) {
			progress_asleep = true;
			while (progress_asleep && !progress_stopping)
				pthread_cond_wait(&progress_wake, &provider_lock);
			period_ns = PROGRESS_PERIOD_NS;
			continue;
		}
		if (look.moved)
			period_ns = PROGRESS_PERIOD_NS;
		else if (period_ns < PROGRESS_PERIOD_MAX_NS)
			period_ns *= 2;
		progress_wait(period_ns);
	}
	pthread_mutex_unlock(&provider_lock);
	return NULL;
}

/* Starts the thread; false if it cannot be (the held operations then move in calls only). */
static bool progress_start(void)
{
	pthread_condattr_t attr;
	if (pthread_condattr_init(&attr))
		return false;
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	bool made = pthread_cond_init(&progress_wake, &attr) == 0;
	pthread_condattr_destroy(&attr);
	if (!made)
		return false;
	if (pthread_create(&progress_thread, NULL, progress_loop, NULL)) {
		pthread_cond_destroy(&progress_wake);
		return false;
	}
	return true;
}

void progress_if_held(struct nicmsg_ep *ep)
{
	if ((progress_started && !progress_asleep) || !nf_holds(ep->engine))
		return;
	if (!progress_started) {
		progress_started = progress_start();
		if (!progress_started)
			return;
	}
	progress_asleep = false;
	pthread_cond_signal(&progress_wake);
}

__attribute__((destructor)) static void progress_stop(void)
{
	pthread_mutex_lock(&provider_lock);
	bool started = progress_started;
	progress_stopping = true;
	if (started)
		pthread_cond_signal(&progress_wake);
	pthread_mutex_unlock(&provider_lock);
	if (started)
		pthread_join(progress_thread, NULL);
}

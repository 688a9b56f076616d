/* Background progress of operations held past an engine's room (FI_PROGRESS_AUTO).
 *
 * An endpoint whose engine runs on a thread of its own reports FI_PROGRESS_AUTO: its
 * operations complete while the application computes or sleeps. Operations the provider holds
 * past the engine's room (src/held.rs) enter the engine only when something calls into the
 * provider: a post, or a read of a completion queue. An application that posted more than the
 * room and then waited outside libfabric (for a pipe, a timer, another library) saw the held
 * ones stall until its next call. So while an endpoint with an engine thread holds anything,
 * the provider's own thread lets it take in what room freed, every PROGRESS_PERIOD_NS; it
 * sleeps on a condition variable otherwise, and costs nothing where nothing is held or every
 * engine is inline (whose held operations move in the application's calls anyway, as the
 * engine does).
 *
 * The thread is started by the first endpoint with an engine thread that holds something, and
 * stopped when the provider is unloaded (a destructor), so no thread runs code of an unmapped
 * library. It takes `provider_lock` as every call does. */
#include "provider.h"

#include <time.h>

/* How often the thread looks while something is held: an engine frees room as messages
 * complete, microseconds to milliseconds apart; a look is one call an endpoint. */
#define PROGRESS_PERIOD_NS 200000L

static pthread_t progress_thread;
static bool progress_started;
static bool progress_stopping;
/* Waited on with provider_lock; its clock is CLOCK_MONOTONIC (progress_start). */
static pthread_cond_t progress_wake;

/* Lets every endpoint with an engine thread take in what it holds; whether any still holds. */
static bool progress_held_of_automatic_endpoints(void)
{
	bool holding = false;
	for (struct nicmsg_ep *ep = open_endpoints; ep; ep = ep->next_open) {
		if (!ep->automatic || !ep->engine || !nf_holds(ep->engine))
			continue;
		ep_progress(ep, NULL, false);
		holding |= nf_holds(ep->engine) != 0;
	}
	return holding;
}

static void *progress_loop(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&provider_lock);
	while (!progress_stopping) {
		if (progress_held_of_automatic_endpoints()) {
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_nsec += PROGRESS_PERIOD_NS;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&progress_wake, &provider_lock, &until);
		} else {
			pthread_cond_wait(&progress_wake, &provider_lock);
		}
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
	if (!ep->automatic || !nf_holds(ep->engine))
		return;
	if (!progress_started) {
		progress_started = progress_start();
		if (!progress_started)
			return;
	}
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

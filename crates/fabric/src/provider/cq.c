/* Completion queues: the entries of finished operations in the format each queue was opened
 * with, reads that progress the queue's endpoints, error entries, and the waits (FI_WAIT_FD,
 * fi_cq_sread, fi_trywait, fi_cq_signal). Endpoints attach here to be progressed. */
#include "provider.h"

/* Makes room for `more` entries; false past NICMSG_CQ_MAX or when memory is short. */
static bool cq_reserve(struct nicmsg_cq *cq, size_t more)
{
	size_t needed = cq->count + more;
	if (needed <= cq->capacity)
		return true;
	if (needed > NICMSG_CQ_MAX)
		return false;
	size_t capacity = cq->capacity ? cq->capacity : 256;
	while (capacity < needed)
		capacity *= 2;
	struct nf_completion *entries = malloc(capacity * sizeof(*entries));
	if (!entries)
		return false;
	for (size_t i = 0; i < cq->count; i++)
		entries[i] = cq->entries[(cq->head + i) % cq->capacity];
	free(cq->entries);
	cq->entries = entries;
	cq->head = 0;
	cq->capacity = capacity;
	return true;
}

/* cq_room's slow path (provider.h): room for `wanted` more entries than the queue holds
 * memory for, up to NICMSG_CQ_MAX, reserved. */
size_t cq_make_room(struct nicmsg_cq *cq, size_t wanted)
{
	size_t room = NICMSG_CQ_MAX - cq->count;
	if (room > wanted)
		room = wanted;
	return cq_reserve(cq, room) ? room : 0;
}

/* Appends an entry of `ep` to a queue with room reserved (cq_room); a receive's source is
 * looked up in the endpoint's address vector where FI_SOURCE was asked for. */
void cq_push(struct nicmsg_cq *cq, const struct nicmsg_ep *ep, const struct nf_completion *entry)
{
	struct nf_completion *queued = &cq->entries[(cq->head + cq->count) % cq->capacity];
	*queued = *entry;
	bool sourced = ep->source && !entry->is_send && address_port(&entry->source);
	queued->source_fi_addr = sourced ? av_source(ep->av, &entry->source) : FI_ADDR_NOTAVAIL;
	cq->count++;
}

static void cq_pop(struct nicmsg_cq *cq)
{
	cq->head = (cq->head + 1) % cq->capacity;
	cq->count--;
}

/* Wakes an application sleeping on `cq`'s descriptor (progress of another queue moved an
 * entry into it, or fi_cq_signal). */
static void cq_ring(struct nicmsg_cq *cq)
{
	if (cq->signal_fd < 0)
		return;
	uint64_t one = 1;
	ssize_t written = write(cq->signal_fd, &one, sizeof(one));
	(void)written; /* a full counter is readable anyway */
}

/* Takes what an endpoint's engine finished into the queues it is bound to (it may send to one
 * queue and receive to another), after a turn of an inline engine where `turn` is set, and
 * lets what it holds enter the engine as far as room freed; rings the bound queues other
 * than `reading`. Returns how many operations finished; `cut_short` (if not NULL) is set where
 * the engine may hold more: a poll that filled the room it was given (a batch, or what the
 * queues had left) stopped before the engine ran out. */
size_t ep_progress(struct nicmsg_ep *ep, const struct nicmsg_cq *reading, bool turn,
		   bool *cut_short)
{
	struct nf_completion batch[NICMSG_POLL_BATCH];
	/* Only as many as both queues can take: the rest wait in the engine until the
	 * application reads, so no completion is ever dropped. */
	size_t room = cq_room(ep->rx_cq, cq_room(ep->tx_cq, NICMSG_POLL_BATCH));
	size_t n = nf_poll(ep->engine, batch, room, turn);
	for (size_t i = 0; i < n; i++) {
		struct nicmsg_cq *to = batch[i].is_send ? ep->tx_cq : ep->rx_cq;
		/* Successes only where wanted; errors of operations with a context always (an
		 * inject has none, and libfabric reports nothing of it). */
		bool reported = batch[i].wanted || (batch[i].err && batch[i].context);
		if (to && reported) {
			cq_push(to, ep, &batch[i]);
			if (to != reading)
				cq_ring(to);
		}
	}
	if (cut_short)
		*cut_short |= n == room;
	return n;
}

/* ep_progress for each endpoint of the queue. */
static bool cq_progress(struct nicmsg_cq *cq, bool turn)
{
	bool cut_short = false;
	for (size_t e = 0; e < cq->ep_count; e++)
		if (cq->eps[e]->engine)
			ep_progress(cq->eps[e], cq, turn, &cut_short);
	return cut_short;
}

static uint64_t completion_flags(const struct nf_completion *c)
{
	uint64_t flags = c->is_send ? FI_SEND : FI_RECV;
	flags |= c->tagged ? FI_TAGGED : FI_MSG;
	if (c->has_data && !c->is_send)
		flags |= FI_REMOTE_CQ_DATA;
	return flags;
}

static size_t entry_size(enum fi_cq_format format)
{
	switch (format) {
	case FI_CQ_FORMAT_CONTEXT:
		return sizeof(struct fi_cq_entry);
	case FI_CQ_FORMAT_MSG:
		return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA:
		return sizeof(struct fi_cq_data_entry);
	default:
		return sizeof(struct fi_cq_tagged_entry);
	}
}

static void write_entry(enum fi_cq_format format, const struct nf_completion *c, void *to)
{
	struct fi_cq_tagged_entry full = {
		.op_context = c->context,
		.flags = completion_flags(c),
		.len = c->len,
		.buf = c->buf,
		.data = c->data,
		.tag = c->tag,
	};
	memcpy(to, &full, entry_size(format));
}

/* How soon after a read that returned entries the next read skips the engines' turn: the
 * read that follows in the same loop comes within a microsecond or two. A read after a longer
 * pause (a consumer that reads once a progress call and computes between) turns. */
#define NICMSG_REREAD_NS 5000u

static uint64_t monotonic_ns(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* A read right after one that returned entries takes what the engines finished but runs no
 * turn of theirs: consumers read until -FI_EAGAIN (Open MPI's MTL after every completion),
 * and that last read's turn, a receive poll that finds nothing, stood between a message and
 * the application's answer to it (a ping-pong's reply). The read after it turns again, so a
 * loop of reads still progresses the engines. */
static ssize_t cq_read_locked(struct nicmsg_cq *cq, void *buf, size_t count,
			      fi_addr_t *src_addr)
{
	/* The clock is read only after an answered read: the empty polls of a wait read none. */
	bool reread = cq->answered_at_ns &&
		      monotonic_ns() - cq->answered_at_ns < NICMSG_REREAD_NS;
	cq_progress(cq, !reread);
	cq->answered_at_ns = 0;
	if (!cq->count)
		return -FI_EAGAIN;
	size_t size = entry_size(cq->format);
	size_t done = 0;
	while (done < count && cq->count) {
		const struct nf_completion *c = &cq->entries[cq->head];
		if (c->err)
			break;
		write_entry(cq->format, c, (char *)buf + done * size);
		if (src_addr)
			src_addr[done] = c->source_fi_addr;
		cq_pop(cq);
		done++;
	}
	/* Timed at the end: the read's own turn, which took the entries in, is no pause. */
	cq->answered_at_ns = done > 0 ? monotonic_ns() : 0;
	/* Nothing read of a count of 0 is no sign of an error (fi_cq_readerr would find none). */
	return done || !count ? (ssize_t)done : -FI_EAVAIL;
}

static ssize_t cq_read(struct fid_cq *fid, void *buf, size_t count)
{
	if (!buf && count)
		return -FI_EINVAL;
	return LOCKED(cq_read_locked((struct nicmsg_cq *)fid, buf, count, NULL));
}

static ssize_t cq_readfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src_addr)
{
	if (!buf && count)
		return -FI_EINVAL;
	return LOCKED(cq_read_locked((struct nicmsg_cq *)fid, buf, count, src_addr));
}

/* An error entry begins with the fields of a tagged one, so write_entry fills them as it does
 * for a queue of FI_CQ_FORMAT_TAGGED. */
#define SAME_PLACE(field)                                                                   \
	(offsetof(struct fi_cq_err_entry, field) == offsetof(struct fi_cq_tagged_entry, field))
_Static_assert(SAME_PLACE(op_context) && SAME_PLACE(flags) && SAME_PLACE(len) &&
		       SAME_PLACE(buf) && SAME_PLACE(data) && SAME_PLACE(tag) &&
		       sizeof(struct fi_cq_tagged_entry) <= offsetof(struct fi_cq_err_entry, olen),
	       "an error entry begins with a tagged entry");

static ssize_t cq_readerr_locked(struct nicmsg_cq *cq, struct fi_cq_err_entry *out)
{
	if (!cq->count || !cq->entries[cq->head].err)
		return -FI_EAGAIN;
	const struct nf_completion *c = &cq->entries[cq->head];
	/* The caller's err_data buffer (libfabric 1.5 and later) is left alone: nicmsg has no
	 * provider data to give. */
	struct fi_cq_err_entry entry = {
		.olen = c->olen,
		.err = c->err,
		.prov_errno = c->err,
		.err_data = out->err_data,
		.err_data_size = 0,
	};
	write_entry(FI_CQ_FORMAT_TAGGED, c, &entry);
	*out = entry;
	cq_pop(cq);
	return 1;
}

static ssize_t cq_readerr(struct fid_cq *fid, struct fi_cq_err_entry *buf, uint64_t flags)
{
	(void)flags;
	if (!buf)
		return -FI_EINVAL;
	return LOCKED(cq_readerr_locked((struct nicmsg_cq *)fid, buf));
}

/* Takes a pending fi_cq_signal: true once per signal. */
static bool cq_take_signal(struct nicmsg_cq *cq)
{
	bool signaled = cq->signaled;
	cq->signaled = false;
	return signaled;
}

/* How long fi_cq_sread polls before it sleeps: a reply a few microseconds away (a ping-pong)
 * is taken at polling latency; sleeping at once cost an inline ping-pong 157 us a round trip
 * (a 20 us nap is 70 us on this kernel's timer slack). */
#define NICMSG_SREAD_SPIN_NS 50000L
/* The longest single sleep on a queue's descriptor: a bound on a wake-up that never came. */
#define NICMSG_SREAD_SLICE_MS 100

/* Whether fi_cq_sread may sleep on the queue's descriptor: every endpoint's engine runs on a
 * thread of its own, whose completions make the descriptor readable. An inline engine moves
 * only inside calls (and on its standby thread, 50 us to 5 ms after the application left), so
 * sread keeps polling it. */
static bool cq_completions_come_by_themselves(const struct nicmsg_cq *cq)
{
	if (cq->wait_fd < 0 || cq->ep_count == 0)
		return false;
	for (size_t e = 0; e < cq->ep_count; e++)
		if (!cq->eps[e]->engine || !cq->eps[e]->automatic)
			return false;
	return true;
}

/* fi_cq_sread: polls for NICMSG_SREAD_SPIN_NS, then sleeps on the queue's descriptor where the
 * engines run on threads of their own (after fi_trywait's check), else naps between polls. A
 * negative timeout waits for ever. */
static ssize_t cq_wait_read(struct nicmsg_cq *cq, void *buf, size_t count, fi_addr_t *src_addr,
			    int timeout)
{
	if (!buf && count)
		return -FI_EINVAL;
	uint64_t start = monotonic_ns();
	for (;;) {
		ssize_t got = LOCKED(cq_read_locked(cq, buf, count, src_addr));
		if (got != -FI_EAGAIN)
			return got;
		if (LOCKED(cq_take_signal(cq)))
			return -FI_EAGAIN; /* fi_cq_signal */
		long waited = (long)(monotonic_ns() - start);
		if (timeout >= 0 && waited >= timeout * 1000000L)
			return -FI_EAGAIN;
		if (waited < NICMSG_SREAD_SPIN_NS)
			continue;
		if (LOCKED(cq_completions_come_by_themselves(cq))) {
			int ready = LOCKED(cq_trywait_locked(cq));
			/* Entries to read: read them. Otherwise (another queue of an endpoint
			 * must be read first) nap below rather than spin on the lock. */
			if (ready == -FI_EAGAIN && LOCKED(cq->count) > 0)
				continue;
			if (ready == 0) {
				long left_ms = timeout >= 0 ? timeout - waited / 1000000L : NICMSG_SREAD_SLICE_MS;
				int slice = left_ms < NICMSG_SREAD_SLICE_MS ? (int)left_ms + 1
									    : NICMSG_SREAD_SLICE_MS;
				struct pollfd wake = {.fd = cq->wait_fd, .events = POLLIN};
				poll(&wake, 1, slice);
				continue;
			}
		}
		struct timespec nap = {.tv_sec = 0, .tv_nsec = 20000};
		nanosleep(&nap, NULL);
	}
}

static ssize_t cq_sread(struct fid_cq *fid, void *buf, size_t count, const void *cond,
			int timeout)
{
	(void)cond;
	return cq_wait_read((struct nicmsg_cq *)fid, buf, count, NULL, timeout);
}

static ssize_t cq_sreadfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src_addr,
			    const void *cond, int timeout)
{
	(void)cond;
	return cq_wait_read((struct nicmsg_cq *)fid, buf, count, src_addr, timeout);
}

/* fi_cq_signal: a thread waiting in fi_cq_sread returns (-FI_EAGAIN), the next to call it if
 * none waits. */
static int cq_signal_locked(struct nicmsg_cq *cq)
{
	cq->signaled = true;
	cq_ring(cq);
	return 0;
}

static int cq_signal(struct fid_cq *fid)
{
	return LOCKED(cq_signal_locked((struct nicmsg_cq *)fid));
}

static const char *cq_strerror(struct fid_cq *fid, int prov_errno, const void *err_data,
			       char *buf, size_t len)
{
	(void)err_data;
	return error_text(prov_errno, buf, len);
}

static int cq_close(struct fid *fid)
{
	struct nicmsg_cq *cq = (struct nicmsg_cq *)fid;
	pthread_mutex_lock(&provider_lock);
	bool in_use = cq->ep_count > 0;
	pthread_mutex_unlock(&provider_lock);
	if (in_use)
		return -FI_EBUSY;
	release(cq->parent);
	if (cq->wait_fd >= 0)
		close(cq->wait_fd);
	if (cq->signal_fd >= 0)
		close(cq->signal_fd);
	free(cq->entries);
	free(cq);
	return 0;
}

/* FI_GETWAIT gives the descriptor of an FI_WAIT_FD queue; FI_GETWAITOBJ the kind of wait
 * (sread polls, yielding the CPU between looks, where no descriptor was asked for). */
static int cq_control(struct fid *fid, int command, void *arg)
{
	struct nicmsg_cq *cq = (struct nicmsg_cq *)fid;
	switch (command) {
	case FI_GETWAIT:
		if (cq->wait_obj != FI_WAIT_FD)
			return -FI_ENODATA;
		*(int *)arg = cq->wait_fd;
		return 0;
	case FI_GETWAITOBJ:
		*(enum fi_wait_obj *)arg = cq->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_YIELD : cq->wait_obj;
		return 0;
	default:
		return -FI_ENOSYS;
	}
}

FID_OPS(cq_fid_ops, cq_close, no_bind, cq_control);

/* fi_trywait for one FI_WAIT_FD queue: 0 if the application may sleep on its descriptor,
 * -FI_EAGAIN if completions are there to read. The descriptors are armed before the engines'
 * completion counts are read again, so a completion after the look either changes a count or
 * finds its descriptor armed and makes it readable (engine/src/signal.rs). */
int cq_trywait_locked(struct nicmsg_cq *cq)
{
	if (cq->wait_fd < 0)
		return -FI_EINVAL;
	uint64_t rung;
	ssize_t drained = read(cq->signal_fd, &rung, sizeof(rung));
	(void)drained; /* empty: EAGAIN */
	uint32_t seen[NICMSG_CQ_EPS];
	for (size_t e = 0; e < cq->ep_count; e++)
		seen[e] = cq->eps[e]->engine ? nf_completion_count(cq->eps[e]->engine) : 0;
	/* A poll cut short (a full batch, or queues with little room left) may have left this
	 * queue's completions in the engine, counted before `seen`: look again first. */
	if (cq_progress(cq, true) || cq->count > 0)
		return -FI_EAGAIN;
	for (size_t e = 0; e < cq->ep_count; e++)
		if (cq->eps[e]->engine)
			nf_arm(cq->eps[e]->engine);
	for (size_t e = 0; e < cq->ep_count; e++)
		if (cq->eps[e]->engine && nf_completion_count(cq->eps[e]->engine) != seen[e])
			return -FI_EAGAIN;
	return 0;
}

static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

int domain_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out,
		   void *context)
{
	enum fi_cq_format format = attr ? attr->format : FI_CQ_FORMAT_UNSPEC;
	if (format == FI_CQ_FORMAT_UNSPEC)
		format = FI_CQ_FORMAT_TAGGED;
	if (format != FI_CQ_FORMAT_CONTEXT && format != FI_CQ_FORMAT_MSG &&
	    format != FI_CQ_FORMAT_DATA && format != FI_CQ_FORMAT_TAGGED)
		return -FI_ENOSYS;
	enum fi_wait_obj wait_obj = attr ? attr->wait_obj : FI_WAIT_NONE;
	if (wait_obj != FI_WAIT_NONE && wait_obj != FI_WAIT_UNSPEC && wait_obj != FI_WAIT_YIELD &&
	    wait_obj != FI_WAIT_FD)
		return -FI_ENOSYS;
	struct nicmsg_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -FI_ENOMEM;
	cq->wait_obj = wait_obj;
	cq->wait_fd = -1;
	cq->signal_fd = -1;
	/* Every queue with a wait object has the descriptor, sread sleeps on it too; only
	 * FI_WAIT_FD hands it out (FI_GETWAIT). */
	if (wait_obj != FI_WAIT_NONE) {
		cq->wait_fd = epoll_create1(EPOLL_CLOEXEC);
		cq->signal_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		struct epoll_event event = {.events = EPOLLIN};
		if (cq->wait_fd < 0 || cq->signal_fd < 0 ||
		    epoll_ctl(cq->wait_fd, EPOLL_CTL_ADD, cq->signal_fd, &event)) {
			if (cq->wait_fd >= 0)
				close(cq->wait_fd);
			if (cq->signal_fd >= 0)
				close(cq->signal_fd);
			free(cq);
			return -FI_EMFILE;
		}
	}
	cq->format = format;
	cq->parent = adopt(&((struct nicmsg_domain *)domain)->children);
	cq->cq.fid.fclass = FI_CLASS_CQ;
	cq->cq.fid.context = context;
	cq->cq.fid.ops = &cq_fid_ops;
	cq->cq.ops = &cq_ops;
	*out = &cq->cq;
	return 0;
}

/* Attaches `ep` to the queue, whose reads then progress it; with FI_WAIT_FD its completion
 * descriptor joins the queue's epoll set. -FI_ENOSPC past NICMSG_CQ_EPS endpoints. */
int cq_attach(struct nicmsg_cq *cq, struct nicmsg_ep *ep)
{
	for (size_t i = 0; i < cq->ep_count; i++)
		if (cq->eps[i] == ep)
			return 0;
	if (cq->ep_count == NICMSG_CQ_EPS)
		return -FI_ENOSPC;
	if (cq->wait_fd >= 0) {
		int fd = ep->engine ? nf_completion_fd(ep->engine) : -FI_EINVAL;
		if (fd < 0)
			return fd;
		struct epoll_event event = {.events = EPOLLIN};
		if (epoll_ctl(cq->wait_fd, EPOLL_CTL_ADD, fd, &event) && errno != EEXIST)
			return -FI_EIO;
	}
	cq->eps[cq->ep_count++] = ep;
	return 0;
}

/* Undoes cq_attach (nothing for a NULL queue or an endpoint not attached). */
void cq_detach(struct nicmsg_cq *cq, struct nicmsg_ep *ep)
{
	if (!cq)
		return;
	for (size_t i = 0; i < cq->ep_count; i++) {
		if (cq->eps[i] == ep) {
			cq->eps[i] = cq->eps[--cq->ep_count];
			if (cq->wait_fd >= 0 && ep->engine) {
				int fd = nf_completion_fd(ep->engine);
				if (fd >= 0)
					epoll_ctl(cq->wait_fd, EPOLL_CTL_DEL, fd, NULL);
			}
			return;
		}
	}
}

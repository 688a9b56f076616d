/*
 * nicmsg as a libfabric provider: the objects libfabric's API works on (fabric, domain,
 * endpoint, completion queue, address vector, event queue) and their operation tables, laid
 * out by libfabric's own headers. Every operation that moves a message calls the Rust side
 * (`src/endpoint.rs`, the `nf_*` functions), which runs it on a nicmsg engine; this file only
 * translates: addresses in the address vector to socket addresses, libfabric's flags to
 * whether a completion is wanted, and finished operations to completion queue entries in the
 * format each queue was opened with.
 *
 * One lock (`provider_lock`) serialises every call into the provider, so it is FI_THREAD_SAFE;
 * the engine does its protocol work on its own thread (or inline, inside these calls).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#define NICMSG_PROVIDER_VERSION FI_VERSION(0, 1)
#define NICMSG_FABRIC_NAME "nicmsg"
#define NICMSG_DOMAIN_NAME "udp"
/* Scatter/gather pieces of one message: the engine's descriptor holds 16 segments. */
#define NICMSG_IOV_LIMIT 16
/* Bytes `fi_inject` copies (the engine's short-message copy is 256 B; larger injects are
 * copied by the provider into a buffer the send owns). */
#define NICMSG_INJECT_SIZE 4096
/* The largest message: one engine message (the protocol's 1 GiB datagram bound). */
#define NICMSG_MAX_MSG_SIZE (1ULL << 30)
/* Operations outstanding per endpoint: the engine's descriptor table (640 slots) less room
 * for its own use. */
#define NICMSG_QUEUE_SIZE 512
/* Completion queue entries kept before `fi_cq_read` takes them: every entry belongs to an
 * operation the application posted (bounded by NICMSG_QUEUE_SIZE per endpoint) or to a peek,
 * so this is never reached by a well-formed program; past it, new completions wait in the
 * engine until the application reads (`cq_room`). */
#define NICMSG_CQ_MAX 65536
/* Endpoints one completion queue serves (one with separate transmit and receive queues,
 * several sharing one). */
#define NICMSG_CQ_EPS 8
/* Peers one address vector holds. */
#define NICMSG_AV_MAX (1u << 20)
/* Completions taken from the engine per poll. */
#define NICMSG_POLL_BATCH 64

/* ---- The Rust side (src/endpoint.rs) ---- */

/* A socket address, IPv4 or IPv6 by its family: what the address vector holds, what
 * fi_getname gives (as long as the family's own sockaddr), and what crosses to Rust. */
union nf_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

struct nf_completion {
	void *context;
	void *buf;
	uint64_t len;
	uint64_t olen;
	uint64_t tag;
	uint64_t data;
	int32_t err; /* positive FI_E* code, 0 for success */
	uint8_t is_send;
	uint8_t tagged;
	uint8_t has_data;
	uint8_t wanted;
	union nf_addr source;
	/* FI_SOURCE: the source's address in the endpoint's vector, written when the entry is
	 * queued (the Rust side leaves FI_ADDR_NOTAVAIL). */
	uint64_t source_fi_addr;
};

void *nf_open(const union nf_addr *bind, char *reason, size_t reason_len);
void nf_close(void *ep);
int nf_name(void *ep, union nf_addr *out);
/* nf_send's `how`, as endpoint.rs has them. */
#define NF_SEND_INJECT 1
#define NF_SEND_CONFIRMED 2
int nf_send(void *ep, const struct iovec *iov, size_t count, const union nf_addr *to,
	    int tagged, uint64_t tag, int has_data, uint64_t data, void *context, int wanted,
	    int how);
int nf_recv(void *ep, const struct iovec *iov, size_t count, const union nf_addr *from,
	    int tagged, uint64_t tag, uint64_t ignore, void *context, int wanted);
int nf_recv_claimed(void *ep, const struct iovec *iov, size_t count, uint64_t claim,
		    void *context, int wanted);
int nf_peek(void *ep, const union nf_addr *from, int tagged, uint64_t tag, uint64_t ignore,
	    void *context, struct nf_completion *out, uint64_t *claim);
int nf_discard(void *ep, uint64_t claim);
int nf_cancel(void *ep, void *context);
size_t nf_poll(void *ep, struct nf_completion *out, size_t max, bool turn);
int nf_completion_fd(void *ep);
uint32_t nf_completion_count(void *ep);
void nf_arm(void *ep);
int nf_progress_is_automatic(void *ep);

static uint32_t address_format(void);

static pthread_mutex_t provider_lock = PTHREAD_MUTEX_INITIALIZER;

#define LOCKED(expr)                                                                        \
	({                                                                                  \
		pthread_mutex_lock(&provider_lock);                                         \
		__typeof__(expr) locked_result_ = (expr);                                   \
		pthread_mutex_unlock(&provider_lock);                                       \
		locked_result_;                                                             \
	})

/* An operation nicmsg does not offer: it answers `value` (-FI_ENOSYS, or what libfabric
 * expects from an empty or optionless object), whatever it is given. */
#define STUB(type, name, value, ...)                                                        \
	static type name(__VA_ARGS__)                                                       \
	{                                                                                   \
		return value;                                                               \
	}

/* ---- Objects ---- */

/* Objects opened from a fabric (domains, event queues) or a domain (endpoints, completion
 * queues, address vectors) are counted in their parent, which closes only after them
 * (-FI_EBUSY before), as libfabric has it; each child keeps a pointer to the count. */
struct nicmsg_fabric {
	struct fid_fabric fabric;
	size_t children;
};

struct nicmsg_domain {
	struct fid_domain domain;
	struct fi_info *info;
	size_t children;
	size_t *parent;
};

struct nicmsg_eq {
	struct fid_eq eq;
	size_t *parent;
};

struct nicmsg_av {
	struct fid_av av;
	enum fi_av_type type;
	union nf_addr *addrs;
	bool *live;
	size_t count;
	size_t capacity;
	/* FI_SOURCE: fi_addr by socket address, open addressing over `slots` (a power of two,
	 * at most half full), so a completion's source is found in constant time. */
	fi_addr_t *by_address;
	size_t slots;
	/* Endpoints bound to the vector: they look addresses up in it on every operation, so it
	 * is closed only after them (-FI_EBUSY before). */
	size_t bound;
	size_t *parent;
};

struct nicmsg_ep;

struct nicmsg_cq {
	struct fid_cq cq;
	enum fi_cq_format format;
	struct nf_completion *entries;
	size_t head;
	size_t count;
	size_t capacity;
	struct nicmsg_ep *eps[NICMSG_CQ_EPS];
	size_t ep_count;
	struct fi_cq_err_entry last_error;
	enum fi_wait_obj wait_obj;
	/* FI_WAIT_FD: an epoll instance over the completion descriptors of the queue's
	 * endpoints (readable when any is) and over `signal_fd`, what FI_GETWAIT gives; -1
	 * otherwise. */
	int wait_fd;
	/* FI_WAIT_FD: an eventfd rung when another queue's progress moves an entry into this one
	 * (an endpoint's send and receive queues may differ, and share its engine's descriptor,
	 * which that progress may already have drained), and by fi_cq_signal; -1 otherwise. */
	int signal_fd;
	/* fi_cq_signal was called: the next fi_cq_sread that finds nothing returns. */
	bool signaled;
	/* When the last read ended if it returned entries, else 0: a read soon after takes what
	 * the engines finished without a turn of theirs (cq_read_locked). */
	uint64_t answered_at_ns;
	size_t *parent;
};

struct nicmsg_ep {
	struct fid_ep ep;
	void *engine;
	struct nicmsg_av *av;
	struct nicmsg_cq *tx_cq;
	struct nicmsg_cq *rx_cq;
	bool tx_selective;
	bool rx_selective;
	uint64_t tx_op_flags;
	uint64_t rx_op_flags;
	bool directed;
	/* FI_SOURCE asked for: receive completions name their source in the vector. */
	bool source;
	bool enabled;
	/* The engine runs on a thread of its own (fixed when it opens): completions come while
	 * the application sleeps. */
	bool automatic;
	size_t *parent;
};

/* ---- Stubs for what nicmsg does not offer ---- */

STUB(int, no_bind, -FI_ENOSYS, struct fid *fid, struct fid *bfid, uint64_t flags)

STUB(int, no_control, -FI_ENOSYS, struct fid *fid, int command, void *arg)

STUB(int, no_ops_open, -FI_ENOSYS, struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)

/* A stub for the tables of operations nicmsg does not offer at all (RMA, atomics,
 * collectives): it returns -FI_ENOSYS whatever it is called with, which the x86-64 and
 * AArch64 calling conventions make safe for functions that only return. */
STUB(ssize_t, no_operation, -FI_ENOSYS, void)
#define NO_OP ((void *)no_operation)

/* The operations every object has: its own close, bind and control; no extra interfaces. */
#define FID_OPS(name, close_fn, bind_fn, control_fn)                                        \
	static struct fi_ops name = {                                                       \
		.size = sizeof(struct fi_ops),                                              \
		.close = close_fn,                                                          \
		.bind = bind_fn,                                                            \
		.control = control_fn,                                                      \
		.ops_open = no_ops_open,                                                    \
	}

/* Counts a child opened from the parent whose count is `children`; the child keeps the
 * result, to give back with `release` when it closes. */
static size_t *adopt(size_t *children)
{
	pthread_mutex_lock(&provider_lock);
	++*children;
	pthread_mutex_unlock(&provider_lock);
	return children;
}

static void release(size_t *children)
{
	pthread_mutex_lock(&provider_lock);
	--*children;
	pthread_mutex_unlock(&provider_lock);
}

/* libfabric's text for an error code, in `buf` if the caller gave one. */
static const char *error_text(int prov_errno, char *buf, size_t len)
{
	const char *text = fi_strerror(prov_errno);
	if (buf && len) {
		snprintf(buf, len, "%s", text);
		return buf;
	}
	return text;
}

static struct fi_ops_rma no_rma = {
	.size = sizeof(struct fi_ops_rma),
	.read = NO_OP, .readv = NO_OP, .readmsg = NO_OP, .write = NO_OP, .writev = NO_OP,
	.writemsg = NO_OP, .inject = NO_OP, .writedata = NO_OP, .injectdata = NO_OP,
};

static struct fi_ops_atomic no_atomic = {
	.size = sizeof(struct fi_ops_atomic),
	.write = NO_OP, .writev = NO_OP, .writemsg = NO_OP, .inject = NO_OP,
	.readwrite = NO_OP, .readwritev = NO_OP, .readwritemsg = NO_OP, .compwrite = NO_OP,
	.compwritev = NO_OP, .compwritemsg = NO_OP, .writevalid = NO_OP,
	.readwritevalid = NO_OP, .compwritevalid = NO_OP,
};

static struct fi_ops_collective no_collective = {
	.size = sizeof(struct fi_ops_collective),
	.barrier = NO_OP, .broadcast = NO_OP, .alltoall = NO_OP, .allreduce = NO_OP,
	.allgather = NO_OP, .reduce_scatter = NO_OP, .reduce = NO_OP, .scatter = NO_OP,
	.gather = NO_OP, .msg = NO_OP,
};

/* ---- getinfo ---- */

static const uint64_t nicmsg_caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV |
				    FI_REMOTE_CQ_DATA | FI_LOCAL_COMM | FI_REMOTE_COMM |
				    FI_SOURCE;
static const uint64_t nicmsg_primary_caps = FI_MSG | FI_TAGGED;
static const uint64_t nicmsg_msg_order = FI_ORDER_SAS | FI_ORDER_RAR | FI_ORDER_WAW |
					 FI_ORDER_RAW | FI_ORDER_WAR;

static char *duplicate(const char *text)
{
	return text ? strdup(text) : NULL;
}

/* Whether the hints leave room for what nicmsg offers (libfabric's core checks none of it). */
static bool hints_allow(const struct fi_info *hints)
{
	if (!hints)
		return true;
	if (hints->caps & ~nicmsg_caps)
		return false;
	if (hints->ep_attr) {
		if (hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM)
			return false;
		if (hints->ep_attr->max_msg_size > NICMSG_MAX_MSG_SIZE)
			return false;
		if (hints->ep_attr->tx_ctx_cnt > 1 || hints->ep_attr->rx_ctx_cnt > 1)
			return false;
	}
	if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_SOCKADDR &&
	    hints->addr_format != address_format())
		return false;
	if (hints->fabric_attr && hints->fabric_attr->name &&
	    strcmp(hints->fabric_attr->name, NICMSG_FABRIC_NAME))
		return false;
	if (hints->domain_attr) {
		const struct fi_domain_attr *d = hints->domain_attr;
		if (d->name && strcmp(d->name, NICMSG_DOMAIN_NAME))
			return false;
		if (d->cq_data_size > 4)
			return false;
		/* Any mr_mode is fine: nicmsg needs no memory registration. */
	}
	if (hints->tx_attr) {
		if (hints->tx_attr->inject_size > NICMSG_INJECT_SIZE)
			return false;
		if (hints->tx_attr->iov_limit > NICMSG_IOV_LIMIT)
			return false;
		if (hints->tx_attr->msg_order & ~nicmsg_msg_order)
			return false;
	}
	if (hints->rx_attr) {
		if (hints->rx_attr->iov_limit > NICMSG_IOV_LIMIT)
			return false;
		if (hints->rx_attr->msg_order & ~nicmsg_msg_order)
			return false;
	}
	return true;
}

static uint64_t granted_caps(const struct fi_info *hints)
{
	uint64_t asked = hints ? hints->caps : 0;
	if (!(asked & nicmsg_primary_caps))
		return nicmsg_caps;
	/* The primary capabilities asked for (fi_pingpong takes FI_TAGGED, if offered, as a
	 * request to use it), with sending and receiving, and every secondary one but FI_SOURCE,
	 * which costs a lookup per receive and is given only to those who ask. */
	uint64_t caps = asked & nicmsg_caps;
	if (!(asked & (FI_SEND | FI_RECV)))
		caps |= FI_SEND | FI_RECV;
	return caps | (nicmsg_caps & ~(nicmsg_primary_caps | FI_SEND | FI_RECV | FI_SOURCE));
}

static struct fi_info *describe(const struct fi_info *hints)
{
	struct fi_info *info = fi_dupinfo(NULL);
	if (!info)
		return NULL;
	info->caps = granted_caps(hints);
	info->mode = 0;
	info->addr_format = address_format();

	info->tx_attr->caps = info->caps;
	info->tx_attr->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags : 0;
	info->tx_attr->msg_order = nicmsg_msg_order;
	info->tx_attr->comp_order = FI_ORDER_NONE;
	info->tx_attr->inject_size = NICMSG_INJECT_SIZE;
	info->tx_attr->size = NICMSG_QUEUE_SIZE;
	info->tx_attr->iov_limit = NICMSG_IOV_LIMIT;
	info->tx_attr->rma_iov_limit = 0;

	info->rx_attr->caps = info->caps;
	info->rx_attr->op_flags = hints && hints->rx_attr ? hints->rx_attr->op_flags : 0;
	info->rx_attr->msg_order = nicmsg_msg_order;
	info->rx_attr->comp_order = FI_ORDER_NONE;
	info->rx_attr->total_buffered_recv = 0;
	info->rx_attr->size = NICMSG_QUEUE_SIZE;
	info->rx_attr->iov_limit = NICMSG_IOV_LIMIT;

	info->ep_attr->type = FI_EP_RDM;
	info->ep_attr->protocol = FI_PROTO_UNSPEC;
	info->ep_attr->max_msg_size = NICMSG_MAX_MSG_SIZE;
	info->ep_attr->mem_tag_format = ~0ULL;
	info->ep_attr->tx_ctx_cnt = 1;
	info->ep_attr->rx_ctx_cnt = 1;

	struct fi_domain_attr *d = info->domain_attr;
	const struct fi_domain_attr *hd = hints ? hints->domain_attr : NULL;
	d->name = duplicate(NICMSG_DOMAIN_NAME);
	d->threading = hd && hd->threading ? hd->threading : FI_THREAD_SAFE;
	d->control_progress = FI_PROGRESS_AUTO;
	/* The engine progresses on its own thread, or on its standby thread while the
	 * application is away: data moves without the application's calls either way. */
	d->data_progress = FI_PROGRESS_AUTO;
	d->resource_mgmt = FI_RM_ENABLED;
	d->av_type = hd && hd->av_type ? hd->av_type : FI_AV_UNSPEC;
	d->mr_mode = 0;
	d->cq_data_size = 4;
	d->cq_cnt = 64;
	d->ep_cnt = 64;
	d->tx_ctx_cnt = 64;
	d->rx_ctx_cnt = 64;
	d->max_ep_tx_ctx = 1;
	d->max_ep_rx_ctx = 1;
	d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
	d->mr_iov_limit = 1;

	info->fabric_attr->name = duplicate(NICMSG_FABRIC_NAME);
	info->fabric_attr->prov_name = NULL; /* libfabric's core fills it in */
	info->fabric_attr->prov_version = NICMSG_PROVIDER_VERSION;
	info->nic = NULL;
	return info;
}

static int nicmsg_getinfo(uint32_t version, const char *node, const char *service,
			  uint64_t flags, const struct fi_info *hints, struct fi_info **out)
{
	(void)version, (void)node, (void)service, (void)flags;
	if (!hints_allow(hints))
		return -FI_ENODATA;
	struct fi_info *info = describe(hints);
	if (!info)
		return -FI_ENOMEM;
	*out = info;
	return 0;
}

/* ---- Address vector ---- */

static int av_close(struct fid *fid)
{
	struct nicmsg_av *av = (struct nicmsg_av *)fid;
	if (LOCKED(av->bound > 0))
		return -FI_EBUSY;
	release(av->parent);
	free(av->addrs);
	free(av->live);
	free(av->by_address);
	free(av);
	return 0;
}

static bool av_grow(struct nicmsg_av *av, size_t needed)
{
	if (needed <= av->capacity)
		return true;
	if (needed > NICMSG_AV_MAX)
		return false;
	size_t capacity = av->capacity ? av->capacity : 64;
	while (capacity < needed)
		capacity *= 2;
	union nf_addr *addrs = realloc(av->addrs, capacity * sizeof(*addrs));
	if (!addrs)
		return false;
	av->addrs = addrs;
	bool *live = realloc(av->live, capacity * sizeof(*live));
	if (!live)
		return false;
	av->live = live;
	av->capacity = capacity;
	return true;
}

/* The size of an address of `family`'s own sockaddr (0 for a family nicmsg does not take). */
static size_t address_len(sa_family_t family)
{
	switch (family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

/* The address's port (network order), and its IP's bytes. */
static uint16_t address_port(const union nf_addr *a)
{
	return a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port;
}

static const uint8_t *address_ip(const union nf_addr *a, size_t *len)
{
	if (a->sa.sa_family == AF_INET6) {
		*len = sizeof(a->in6.sin6_addr);
		return a->in6.sin6_addr.s6_addr;
	}
	*len = sizeof(a->in.sin_addr);
	return (const uint8_t *)&a->in.sin_addr;
}

static size_t address_hash(const union nf_addr *address)
{
	size_t len;
	const uint8_t *ip = address_ip(address, &len);
	uint64_t key = address_port(address);
	for (size_t i = 0; i < len; i++)
		key = (key << 8 | key >> 56) ^ ip[i];
	return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32);
}

static bool same_address(const union nf_addr *a, const union nf_addr *b)
{
	size_t a_len, b_len;
	const uint8_t *a_ip = address_ip(a, &a_len), *b_ip = address_ip(b, &b_len);
	return a->sa.sa_family == b->sa.sa_family && address_port(a) == address_port(b) &&
	       a_len == b_len && !memcmp(a_ip, b_ip, a_len);
}

static void index_address(struct nicmsg_av *av, fi_addr_t at)
{
	size_t mask = av->slots - 1;
	size_t i = address_hash(&av->addrs[at]) & mask;
	while (av->by_address[i] != FI_ADDR_NOTAVAIL)
		i = (i + 1) & mask;
	av->by_address[i] = at;
}

/* Room in the index for `needed` addresses: rebuilt twice as large when it would be more
 * than half full. */
static bool av_index_grow(struct nicmsg_av *av, size_t needed)
{
	if (needed * 2 <= av->slots)
		return true;
	size_t slots = 64;
	while (slots < needed * 2)
		slots *= 2;
	fi_addr_t *table = malloc(slots * sizeof(*table));
	if (!table)
		return false;
	for (size_t i = 0; i < slots; i++)
		table[i] = FI_ADDR_NOTAVAIL;
	free(av->by_address);
	av->by_address = table;
	av->slots = slots;
	for (fi_addr_t at = 0; at < av->count; at++)
		index_address(av, at);
	return true;
}

/* FI_SOURCE: where `from` is in the vector (the first live entry, if inserted twice), or
 * FI_ADDR_NOTAVAIL. */
static fi_addr_t av_source(const struct nicmsg_av *av, const union nf_addr *from)
{
	if (!av || !av->slots)
		return FI_ADDR_NOTAVAIL;
	size_t mask = av->slots - 1;
	for (size_t i = address_hash(from) & mask; av->by_address[i] != FI_ADDR_NOTAVAIL;
	     i = (i + 1) & mask) {
		fi_addr_t at = av->by_address[i];
		if (av->live[at] && same_address(&av->addrs[at], from))
			return at;
	}
	return FI_ADDR_NOTAVAIL;
}

/* Inserts `count` addresses; with `errors` (FI_SYNC_ERR), each address's outcome goes there
 * too: 0, or the positive fabric errno of an address refused. */
static int av_insert_locked(struct nicmsg_av *av, const void *addr, size_t count,
			    fi_addr_t *fi_addr, int *errors)
{
	/* Checked before any sum with av->count: a huge count would wrap it to a small size,
	 * and the loop below write past the table. */
	if (count > NICMSG_AV_MAX - av->count)
		return -FI_ENOSPC;
	if (!av_grow(av, av->count + count) || !av_index_grow(av, av->count + count))
		return -FI_ENOMEM;
	/* The addresses are of the domain's format, all of one family: the first says which,
	 * and so how far apart they lie (sockaddr_in or sockaddr_in6). */
	const char *given = addr;
	size_t stride = count ? address_len(((const struct sockaddr *)given)->sa_family) : 0;
	if (count && !stride)
		return -FI_EINVAL;
	int inserted = 0;
	for (size_t i = 0; i < count; i++) {
		union nf_addr entry = {0};
		memcpy(&entry, given + i * stride, stride);
		bool valid = address_len(entry.sa.sa_family) == stride && address_port(&entry) != 0;
		if (fi_addr)
			fi_addr[i] = valid ? av->count : FI_ADDR_NOTAVAIL;
		if (errors)
			errors[i] = valid ? 0 : FI_EINVAL;
		if (!valid)
			continue;
		av->addrs[av->count] = entry;
		av->live[av->count] = true;
		index_address(av, av->count);
		av->count++;
		inserted++;
	}
	return inserted;
}

/* The flags fi_av_insert takes: FI_MORE, a hint nicmsg has no use for, and FI_SYNC_ERR. */
#define AV_INSERT_FLAGS (FI_MORE | FI_SYNC_ERR)

/* FI_SYNC_ERR makes `context` an array of ints, one per address, for each one's outcome
 * (fi_av(3)): left unwritten, an application read its own initial values as outcomes. Other
 * flags (FI_AV_USER_ID, ...) ask for what nicmsg does not do, and are refused. */
static int av_insert(struct fid_av *fid, const void *addr, size_t count, fi_addr_t *fi_addr,
		     uint64_t flags, void *context)
{
	if (flags & ~AV_INSERT_FLAGS)
		return -FI_EBADFLAGS;
	int *errors = flags & FI_SYNC_ERR ? context : NULL;
	if ((flags & FI_SYNC_ERR) && !errors)
		return -FI_EINVAL;
	if (!addr && count)
		return -FI_EINVAL;
	return LOCKED(av_insert_locked((struct nicmsg_av *)fid, addr, count, fi_addr, errors));
}

static int av_remove_locked(struct nicmsg_av *av, fi_addr_t *fi_addr, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		if (fi_addr[i] >= av->count)
			return -FI_EINVAL;
		av->live[fi_addr[i]] = false;
	}
	return 0;
}

static int av_remove(struct fid_av *fid, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	(void)flags;
	return LOCKED(av_remove_locked((struct nicmsg_av *)fid, fi_addr, count));
}

/* The socket address of `fi_addr`, or NULL if the vector holds none there. */
static const union nf_addr *av_address(struct nicmsg_av *av, fi_addr_t fi_addr)
{
	if (!av || fi_addr >= av->count || !av->live[fi_addr])
		return NULL;
	return &av->addrs[fi_addr];
}

/* fi_av_lookup: the address, cut to the `*addrlen` bytes the caller has, and in `*addrlen`
 * the size it needs. A short buffer is no error (fi_av(3), and libfabric's own vectors answer
 * 0): -FI_ETOOSMALL failed programs that ask for the size with an addrlen of 0. */
static int av_lookup_locked(struct nicmsg_av *av, fi_addr_t fi_addr, void *addr,
			    size_t *addrlen)
{
	const union nf_addr *found = av_address(av, fi_addr);
	if (!found)
		return -FI_ENOENT;
	size_t room = *addrlen, len = address_len(found->sa.sa_family);
	*addrlen = len;
	if (addr && room)
		memcpy(addr, found, room < len ? room : len);
	return 0;
}

static int av_lookup(struct fid_av *fid, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
	return LOCKED(av_lookup_locked((struct nicmsg_av *)fid, fi_addr, addr, addrlen));
}

static const char *av_straddr(struct fid_av *fid, const void *addr, char *buf, size_t *len)
{
	(void)fid;
	const union nf_addr *a = addr;
	char ip[INET6_ADDRSTRLEN] = "?";
	int written;
	if (a->sa.sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof(ip));
		written = snprintf(buf, *len, "[%s]:%u", ip, ntohs(a->in6.sin6_port));
	} else {
		inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof(ip));
		written = snprintf(buf, *len, "%s:%u", ip, ntohs(a->in.sin_port));
	}
	*len = (size_t)written + 1;
	return buf;
}

STUB(int, av_insertsvc, -FI_ENOSYS, struct fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr, uint64_t flags, void *context)

STUB(int, av_insertsym, -FI_ENOSYS, struct fid_av *av, const char *node, size_t nodecnt, const char *service, size_t svccnt, fi_addr_t *fi_addr, uint64_t flags, void *context)

STUB(int, av_set, -FI_ENOSYS, struct fid_av *av, struct fi_av_set_attr *attr, struct fid_av_set **av_set, void *context)

FID_OPS(av_fid_ops, av_close, no_bind, no_control);

static struct fi_ops_av av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = av_insert,
	.insertsvc = av_insertsvc,
	.insertsym = av_insertsym,
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
	.av_set = av_set,
};

static int domain_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
			  struct fid_av **out, void *context)
{
	if (attr && attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP &&
	    attr->type != FI_AV_TABLE)
		return -FI_EINVAL;
	if (attr && (attr->flags & FI_EVENT))
		return -FI_ENOSYS; /* only synchronous inserts */
	struct nicmsg_av *av = calloc(1, sizeof(*av));
	if (!av)
		return -FI_ENOMEM;
	av->type = attr && attr->type ? attr->type : FI_AV_TABLE;
	av->parent = adopt(&((struct nicmsg_domain *)domain)->children);
	av->av.fid.fclass = FI_CLASS_AV;
	av->av.fid.context = context;
	av->av.fid.ops = &av_fid_ops;
	av->av.ops = &av_ops;
	*out = &av->av;
	return 0;
}

/* ---- Completion queue ---- */

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

/* How many of `wanted` entries the queue (if any) has room for now, reserved. */
static size_t cq_room(struct nicmsg_cq *cq, size_t wanted)
{
	if (!cq)
		return wanted;
	size_t room = NICMSG_CQ_MAX - cq->count;
	if (room > wanted)
		room = wanted;
	return cq_reserve(cq, room) ? room : 0;
}

/* Appends an entry of `ep` to a queue with room reserved (cq_room); a receive's source is
 * looked up in the endpoint's address vector where FI_SOURCE was asked for. */
static void cq_push(struct nicmsg_cq *cq, const struct nicmsg_ep *ep,
		    const struct nf_completion *entry)
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

/* Takes what the engines of the queue's endpoints finished, into the queues they are bound
 * to (an endpoint may send to one queue and receive to another), after a turn of each inline
 * engine where `turn` is set. Returns whether an engine may hold more: a poll that filled the
 * room it was given (a batch, or what the queues had left) stopped before the engine ran
 * out. */
static bool cq_progress(struct nicmsg_cq *cq, bool turn)
{
	struct nf_completion batch[NICMSG_POLL_BATCH];
	bool cut_short = false;
	for (size_t e = 0; e < cq->ep_count; e++) {
		struct nicmsg_ep *ep = cq->eps[e];
		if (!ep->engine)
			continue;
		/* Only as many as both queues can take: the rest wait in the engine until the
		 * application reads, so no completion is ever dropped. */
		size_t room = cq_room(ep->rx_cq, cq_room(ep->tx_cq, NICMSG_POLL_BATCH));
		size_t n = nf_poll(ep->engine, batch, room, turn);
		cut_short |= n == room;
		for (size_t i = 0; i < n; i++) {
			struct nicmsg_cq *to = batch[i].is_send ? ep->tx_cq : ep->rx_cq;
			/* Successes only where wanted; errors of operations with a context always
			 * (an inject has none, and libfabric reports nothing of it). */
			bool reported = batch[i].wanted || (batch[i].err && batch[i].context);
			if (to && reported) {
				cq_push(to, ep, &batch[i]);
				if (to != cq)
					cq_ring(to);
			}
		}
	}
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

static ssize_t cq_readerr_locked(struct nicmsg_cq *cq, struct fi_cq_err_entry *out)
{
	if (!cq->count || !cq->entries[cq->head].err)
		return -FI_EAGAIN;
	const struct nf_completion *c = &cq->entries[cq->head];
	struct fi_cq_err_entry entry = {
		.op_context = c->context,
		.flags = completion_flags(c),
		.len = c->len,
		.buf = c->buf,
		.data = c->data,
		.tag = c->tag,
		.olen = c->olen,
		.err = c->err,
		.prov_errno = c->err,
		.err_data = NULL,
		.err_data_size = 0,
	};
	/* The caller's err_data buffer (libfabric 1.5 and later) is left alone: nicmsg has no
	 * provider data to give. */
	entry.err_data = out->err_data;
	entry.err_data_size = 0;
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

static int cq_trywait_locked(struct nicmsg_cq *cq);

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
static int cq_trywait_locked(struct nicmsg_cq *cq)
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

static int domain_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
			  struct fid_cq **out, void *context)
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

/* ---- Endpoint ---- */

static int cq_attach(struct nicmsg_cq *cq, struct nicmsg_ep *ep)
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

static void cq_detach(struct nicmsg_cq *cq, struct nicmsg_ep *ep)
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

static int ep_bind_locked(struct nicmsg_ep *ep, struct fid *bfid, uint64_t flags)
{
	switch (bfid->fclass) {
	case FI_CLASS_AV: {
		struct nicmsg_av *av = (struct nicmsg_av *)bfid;
		if (ep->av == av)
			return 0;
		/* One vector an endpoint: its fi_addr values name entries of that vector only. */
		if (ep->av)
			return -FI_EINVAL;
		ep->av = av;
		av->bound++;
		return 0;
	}
	case FI_CLASS_CQ: {
		struct nicmsg_cq *cq = (struct nicmsg_cq *)bfid;
		if (!(flags & (FI_TRANSMIT | FI_RECV)))
			return -FI_EINVAL;
		/* One queue a direction: rebinding would leave the old queue holding the endpoint. */
		if (((flags & FI_TRANSMIT) && ep->tx_cq && ep->tx_cq != cq) ||
		    ((flags & FI_RECV) && ep->rx_cq && ep->rx_cq != cq))
			return -FI_EINVAL;
		int attached = cq_attach(cq, ep);
		if (attached)
			return attached;
		if (flags & FI_TRANSMIT) {
			ep->tx_cq = cq;
			ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
		}
		if (flags & FI_RECV) {
			ep->rx_cq = cq;
			ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
		}
		return 0;
	}
	case FI_CLASS_EQ:
		return 0; /* nothing of an RDM endpoint reports there */
	default:
		return -FI_ENOSYS;
	}
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	return LOCKED(ep_bind_locked((struct nicmsg_ep *)fid, bfid, flags));
}

static int ep_control(struct fid *fid, int command, void *arg)
{
	(void)arg;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	if (command != FI_ENABLE)
		return -FI_ENOSYS;
	if (!ep->tx_cq && !ep->rx_cq)
		return -FI_ENOCQ;
	ep->enabled = true;
	return 0;
}

static int ep_close(struct fid *fid)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	pthread_mutex_lock(&provider_lock);
	cq_detach(ep->tx_cq, ep);
	if (ep->rx_cq != ep->tx_cq)
		cq_detach(ep->rx_cq, ep);
	if (ep->av)
		ep->av->bound--;
	void *engine = ep->engine;
	ep->engine = NULL;
	pthread_mutex_unlock(&provider_lock);
	nf_close(engine);
	release(ep->parent);
	free(ep);
	return 0;
}

/* fi_cancel: the operation posted with `context`. NULL names none: injects have no context,
 * and cancelling one would withdraw its message with no completion to say so. */
static ssize_t ep_cancel(fid_t fid, void *context)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	if (!context)
		return -FI_EINVAL;
	return LOCKED(nf_cancel(ep->engine, context));
}

STUB(int, ep_getopt, -FI_ENOPROTOOPT, fid_t fid, int level, int optname, void *optval, size_t *optlen)

STUB(int, ep_setopt, -FI_ENOPROTOOPT, fid_t fid, int level, int optname, const void *optval, size_t optlen)

STUB(int, ep_ctx, -FI_ENOSYS, struct fid_ep *sep, int index, struct fi_tx_attr *attr, struct fid_ep **tx_ep, void *context)

STUB(int, ep_rx_ctx, -FI_ENOSYS, struct fid_ep *sep, int index, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)

STUB(ssize_t, ep_size_left, -FI_ENOSYS, struct fid_ep *ep)

static int cm_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	union nf_addr name;
	int got = LOCKED(nf_name(ep->engine, &name));
	if (got)
		return got;
	size_t room = *addrlen, len = address_len(name.sa.sa_family);
	*addrlen = len;
	if (!addr || room < len)
		return -FI_ETOOSMALL;
	memcpy(addr, &name, len);
	return 0;
}

STUB(int, cm_setname, -FI_ENOSYS, fid_t fid, void *addr, size_t addrlen)

STUB(int, cm_getpeer, -FI_ENOSYS, struct fid_ep *ep, void *addr, size_t *addrlen)

STUB(int, cm_connect, -FI_ENOSYS, struct fid_ep *ep, const void *addr, const void *param, size_t paramlen)

STUB(int, cm_listen, -FI_ENOSYS, struct fid_pep *pep)

STUB(int, cm_accept, -FI_ENOSYS, struct fid_ep *ep, const void *param, size_t paramlen)

STUB(int, cm_reject, -FI_ENOSYS, struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)

STUB(int, cm_shutdown, -FI_ENOSYS, struct fid_ep *ep, uint64_t flags)

STUB(int, cm_join, -FI_ENOSYS, struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context)

/* -- moving messages -- */

/* The destination's socket address, or NULL (an address the vector does not hold). */
static const union nf_addr *destination(struct nicmsg_ep *ep, fi_addr_t addr)
{
	return av_address(ep->av, addr);
}

/* A directed receive's source, or NULL for any (FI_ADDR_UNSPEC, or an endpoint that was not
 * given FI_DIRECTED_RECV, whose receives ignore the address). `*unknown` is set for an
 * address the vector does not hold. */
static const union nf_addr *source(struct nicmsg_ep *ep, fi_addr_t addr, bool *unknown)
{
	*unknown = false;
	if (!ep->directed || addr == FI_ADDR_UNSPEC)
		return NULL;
	const union nf_addr *found = av_address(ep->av, addr);
	*unknown = !found;
	return found;
}

static bool tx_wanted(struct nicmsg_ep *ep, uint64_t flags)
{
	return !ep->tx_selective || (flags & FI_COMPLETION);
}

static bool rx_wanted(struct nicmsg_ep *ep, uint64_t flags)
{
	return !ep->rx_selective || (flags & FI_COMPLETION);
}

/* The bytes `count` iovecs describe, saturating (NULL iovecs are refused later). */
static size_t iov_bytes(const struct iovec *iov, size_t count)
{
	size_t total = 0;
	for (size_t i = 0; iov && i < count; i++)
		total = iov[i].iov_len > SIZE_MAX - total ? SIZE_MAX : total + iov[i].iov_len;
	return total;
}

/* nf_send's `how` for a send with these operation flags. FI_TRANSMIT_COMPLETE and
 * FI_DELIVERY_COMPLETE ask for a completion only once the peer holds the message: the engine
 * otherwise completes short sends (and sends of 4 KiB to 64 KiB) as soon as it has copied
 * them, and a peer that died before taking one would lose a message its sender was told went. */
static int send_how(uint64_t flags)
{
	int how = 0;
	if (flags & FI_INJECT)
		how |= NF_SEND_INJECT;
	if (flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE))
		how |= NF_SEND_CONFIRMED;
	return how;
}

/* A send with operation flags `flags`: the call's for the msg forms, the endpoint's
 * (tx_attr->op_flags) otherwise. The inject calls (`inject_call`) pass FI_INJECT and report
 * no completion; sendmsg with FI_INJECT reports one as any send does, and so does fi_send
 * (or fi_tsend, ...) of an endpoint whose default flags hold FI_INJECT: fi_endpoint(3) gives
 * the buffer back when the call returns, so its bytes are copied here too (they were not, and
 * an engine on its own thread sent what the application wrote into the buffer afterwards). */
static ssize_t send_locked(struct nicmsg_ep *ep, const struct iovec *iov, size_t count,
			   fi_addr_t dest, bool tagged, uint64_t tag, bool has_data, uint64_t data,
			   void *context, uint64_t flags, bool inject_call)
{
	bool inject = flags & FI_INJECT;
	bool wanted = !inject_call && tx_wanted(ep, flags);
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (count > NICMSG_IOV_LIMIT)
		return -FI_EINVAL;
	/* Without a send queue, no completion could say when the buffer is free or that the
	 * peer failed (an inject's bytes are copied, and it reports nothing anyway). */
	if (!ep->tx_cq && !inject)
		return -FI_ENOCQ;
	/* The inject bound, for the inject calls and sendmsg's FI_INJECT alike: those bytes are
	 * copied here. */
	if (inject && iov_bytes(iov, count) > NICMSG_INJECT_SIZE)
		return -FI_EMSGSIZE;
	const union nf_addr *to = destination(ep, dest);
	if (!to)
		return -FI_EADDRNOTAVAIL;
	return nf_send(ep->engine, iov, count, to, tagged, tag, has_data, data, context, wanted,
		       send_how(flags));
}

static ssize_t recv_locked(struct nicmsg_ep *ep, const struct iovec *iov, size_t count,
			   fi_addr_t src, bool tagged, uint64_t tag, uint64_t ignore,
			   void *context, bool wanted)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (count > NICMSG_IOV_LIMIT)
		return -FI_EINVAL;
	/* Without a receive queue the message would be taken and its completion dropped. */
	if (!ep->rx_cq)
		return -FI_ENOCQ;
	bool unknown;
	const union nf_addr *from = source(ep, src, &unknown);
	if (unknown)
		return -FI_EADDRNOTAVAIL;
	return nf_recv(ep->engine, iov, count, from, tagged, tag, ignore, context, wanted);
}

/* What FI_PEEK | FI_CLAIM writes beside the claim, in fi_context.internal[1]: a FI_CLAIM
 * receive whose context lacks it was given a context no peek claimed with (fresh memory, as
 * often zeroed, would otherwise name the claim numbered 0: another context's message). */
static const char claim_mark;
#define CLAIM_MARK ((void *)&claim_mark)

/* FI_PEEK: answers at once, with the message's description or FI_ENOMSG, in the receive
 * completion queue. With FI_CLAIM the message found is also taken: the claim that names it
 * is kept in the operation's fi_context (libfabric requires one for FI_CLAIM), where the
 * FI_CLAIM receive with the same context finds it. With FI_DISCARD (and no FI_CLAIM), the
 * message found is dropped at once. */
static ssize_t peek_locked(struct nicmsg_ep *ep, const struct fi_msg_tagged *msg,
			   uint64_t flags)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (!ep->rx_cq)
		return -FI_ENOCQ;
	/* A discard claims the message too, but keeps nothing in the context: only FI_CLAIM
	 * needs one (fi_tagged(3)); FI_PEEK | FI_DISCARD with none was refused. */
	bool claiming = flags & (FI_CLAIM | FI_DISCARD);
	if ((flags & FI_CLAIM) && !msg->context)
		return -FI_EINVAL;
	if (!cq_room(ep->rx_cq, 1))
		return -FI_EAGAIN;
	bool unknown;
	const union nf_addr *from = source(ep, msg->addr, &unknown);
	if (unknown)
		return -FI_EADDRNOTAVAIL;
	struct nf_completion found;
	uint64_t claim = 0;
	int got = nf_peek(ep->engine, from, 1, msg->tag, msg->ignore, msg->context, &found,
			  claiming ? &claim : NULL);
	if (got < 0)
		return got;
	if (!got) {
		memset(&found, 0, sizeof(found));
		found.context = msg->context;
		found.tagged = 1;
		found.err = FI_ENOMSG;
	} else if (flags & FI_CLAIM) {
		((struct fi_context *)msg->context)->internal[0] = (void *)(uintptr_t)claim;
		((struct fi_context *)msg->context)->internal[1] = CLAIM_MARK;
	} else if (flags & FI_DISCARD) {
		int dropped = nf_discard(ep->engine, claim);
		if (dropped < 0)
			return dropped;
	}
	cq_push(ep->rx_cq, ep, &found);
	return 0;
}

/* FI_CLAIM without FI_PEEK: receives (or with FI_DISCARD drops) the message an earlier
 * FI_PEEK | FI_CLAIM with the same context claimed. */
static ssize_t claimed_locked(struct nicmsg_ep *ep, const struct fi_msg_tagged *msg,
			      uint64_t flags)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (!msg->context)
		return -FI_EINVAL;
	if (msg->iov_count > NICMSG_IOV_LIMIT)
		return -FI_EINVAL;
	if (!ep->rx_cq)
		return -FI_ENOCQ;
	const struct fi_context *claimed = msg->context;
	if (claimed->internal[1] != CLAIM_MARK)
		return -FI_EINVAL; /* no FI_PEEK | FI_CLAIM with this context */
	uint64_t claim = (uintptr_t)claimed->internal[0];
	if (!(flags & FI_DISCARD))
		return nf_recv_claimed(ep->engine, msg->msg_iov, msg->iov_count, claim,
				       msg->context, rx_wanted(ep, flags));
	if (!cq_room(ep->rx_cq, 1))
		return -FI_EAGAIN;
	int dropped = nf_discard(ep->engine, claim);
	if (dropped < 0)
		return dropped;
	struct nf_completion done;
	memset(&done, 0, sizeof(done));
	done.context = msg->context;
	done.tagged = 1;
	done.wanted = 1;
	if (rx_wanted(ep, flags))
		cq_push(ep->rx_cq, ep, &done);
	return 0;
}

static ssize_t msg_recv(struct fid_ep *fid, void *buf, size_t len, void *desc,
			fi_addr_t src_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	return LOCKED(recv_locked(ep, &iov, 1, src_addr, false, 0, 0, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t msg_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			 size_t count, fi_addr_t src_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(recv_locked(ep, iov, count, src_addr, false, 0, 0, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t msg_recvmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(recv_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, false, 0, 0,
				  msg->context, rx_wanted(ep, flags)));
}

static ssize_t msg_send(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			fi_addr_t dest_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t msg_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			 size_t count, fi_addr_t dest_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(send_locked(ep, iov, count, dest_addr, false, 0, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t msg_sendmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(send_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, false, 0,
				  flags & FI_REMOTE_CQ_DATA, msg->data, msg->context, flags,
				  false));
}

static ssize_t msg_inject(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest_addr)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, false, 0, NULL, FI_INJECT,
				  true));
}

static ssize_t msg_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			    uint64_t data, fi_addr_t dest_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, true, data, context,
				  ep->tx_op_flags, false));
}

static ssize_t msg_injectdata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data,
			      fi_addr_t dest_addr)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, true, data, NULL, FI_INJECT,
				  true));
}

static ssize_t tagged_recv(struct fid_ep *fid, void *buf, size_t len, void *desc,
			   fi_addr_t src_addr, uint64_t tag, uint64_t ignore, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	return LOCKED(recv_locked(ep, &iov, 1, src_addr, true, tag, ignore, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t tagged_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			    size_t count, fi_addr_t src_addr, uint64_t tag, uint64_t ignore,
			    void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(recv_locked(ep, iov, count, src_addr, true, tag, ignore, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t tagged_recvmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg,
			      uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	if (flags & FI_PEEK)
		return LOCKED(peek_locked(ep, msg, flags));
	if (flags & FI_CLAIM)
		return LOCKED(claimed_locked(ep, msg, flags));
	if (flags & FI_DISCARD)
		return -FI_EINVAL; /* FI_DISCARD goes with FI_PEEK or FI_CLAIM */
	return LOCKED(recv_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, true, msg->tag,
				  msg->ignore, msg->context, rx_wanted(ep, flags)));
}

static ssize_t tagged_send(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			   fi_addr_t dest_addr, uint64_t tag, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t tagged_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			    size_t count, fi_addr_t dest_addr, uint64_t tag, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(send_locked(ep, iov, count, dest_addr, true, tag, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t tagged_sendmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg,
			      uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	/* `msg->ignore` is not read: it means nothing on a send (Open MPI leaves it unset). */
	return LOCKED(send_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, true, msg->tag,
				  flags & FI_REMOTE_CQ_DATA, msg->data, msg->context, flags,
				  false));
}

static ssize_t tagged_inject(struct fid_ep *fid, const void *buf, size_t len,
			     fi_addr_t dest_addr, uint64_t tag)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, false, 0, NULL, FI_INJECT,
				  true));
}

static ssize_t tagged_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			       uint64_t data, fi_addr_t dest_addr, uint64_t tag, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, true, data, context,
				  ep->tx_op_flags, false));
}

static ssize_t tagged_injectdata(struct fid_ep *fid, const void *buf, size_t len,
				 uint64_t data, fi_addr_t dest_addr, uint64_t tag)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, true, data, NULL, FI_INJECT,
				  true));
}

FID_OPS(ep_fid_ops, ep_close, ep_bind, ep_control);

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = ep_ctx,
	.rx_ctx = ep_rx_ctx,
	.rx_size_left = ep_size_left,
	.tx_size_left = ep_size_left,
};

static struct fi_ops_cm cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = cm_setname,
	.getname = cm_getname,
	.getpeer = cm_getpeer,
	.connect = cm_connect,
	.listen = cm_listen,
	.accept = cm_accept,
	.reject = cm_reject,
	.shutdown = cm_shutdown,
	.join = cm_join,
};

static struct fi_ops_msg msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = msg_recv,
	.recvv = msg_recvv,
	.recvmsg = msg_recvmsg,
	.send = msg_send,
	.sendv = msg_sendv,
	.sendmsg = msg_sendmsg,
	.inject = msg_inject,
	.senddata = msg_senddata,
	.injectdata = msg_injectdata,
};

static struct fi_ops_tagged tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = tagged_recv,
	.recvv = tagged_recvv,
	.recvmsg = tagged_recvmsg,
	.send = tagged_send,
	.sendv = tagged_sendv,
	.sendmsg = tagged_sendmsg,
	.inject = tagged_inject,
	.senddata = tagged_senddata,
	.injectdata = tagged_injectdata,
};

/* The address the endpoint binds: NICMSG_BIND_IP if set (IPv4 or IPv6), else IPv4
 * loopback; any free port. Its family is the provider's address format. */
static void bind_address(union nf_addr *bind)
{
	memset(bind, 0, sizeof(*bind));
	const char *ip = getenv("NICMSG_BIND_IP");
	if (ip && *ip) {
		if (inet_pton(AF_INET, ip, &bind->in.sin_addr) == 1) {
			bind->in.sin_family = AF_INET;
			return;
		}
		if (inet_pton(AF_INET6, ip, &bind->in6.sin6_addr) == 1) {
			bind->in6.sin6_family = AF_INET6;
			return;
		}
		fprintf(stderr, "nicmsg provider: NICMSG_BIND_IP=%s is not an IPv4 or IPv6 address; "
				"binding loopback\n", ip);
	}
	memset(bind, 0, sizeof(*bind));
	bind->in.sin_family = AF_INET;
	bind->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* The address format of the endpoints this process opens (their bind address's family). */
static uint32_t address_format(void)
{
	union nf_addr bind;
	bind_address(&bind);
	return bind.sa.sa_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
}

static int domain_endpoint(struct fid_domain *domain, struct fi_info *info,
			   struct fid_ep **out, void *context)
{
	if (info && info->ep_attr && info->ep_attr->type != FI_EP_RDM &&
	    info->ep_attr->type != FI_EP_UNSPEC)
		return -FI_EINVAL;
	struct nicmsg_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -FI_ENOMEM;
	union nf_addr bind;
	bind_address(&bind);
	char reason[256] = "";
	ep->engine = LOCKED(nf_open(&bind, reason, sizeof(reason)));
	if (!ep->engine) {
		fprintf(stderr, "nicmsg provider: cannot open an endpoint: %s\n", reason);
		free(ep);
		return -FI_EOTHER;
	}
	ep->automatic = LOCKED(nf_progress_is_automatic(ep->engine));
	uint64_t caps = info ? info->caps : nicmsg_caps;
	ep->directed = caps & FI_DIRECTED_RECV;
	ep->source = caps & FI_SOURCE;
	ep->tx_op_flags = info && info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rx_op_flags = info && info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->parent = adopt(&((struct nicmsg_domain *)domain)->children);
	ep->ep.fid.fclass = FI_CLASS_EP;
	ep->ep.fid.context = context;
	ep->ep.fid.ops = &ep_fid_ops;
	ep->ep.ops = &ep_ops;
	ep->ep.cm = &cm_ops;
	ep->ep.msg = &msg_ops;
	ep->ep.tagged = &tagged_ops;
	ep->ep.rma = &no_rma;
	ep->ep.atomic = &no_atomic;
	ep->ep.collective = &no_collective;
	*out = &ep->ep;
	return 0;
}

/* ---- Domain ---- */

static int domain_close(struct fid *fid)
{
	struct nicmsg_domain *domain = (struct nicmsg_domain *)fid;
	if (LOCKED(domain->children > 0))
		return -FI_EBUSY;
	release(domain->parent);
	fi_freeinfo(domain->info);
	free(domain);
	return 0;
}

STUB(int, domain_scalable_ep, -FI_ENOSYS, struct fid_domain *domain, struct fi_info *info, struct fid_ep **sep, void *context)

STUB(int, domain_cntr_open, -FI_ENOSYS, struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context)

STUB(int, domain_poll_open, -FI_ENOSYS, struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset)

STUB(int, domain_stx_ctx, -FI_ENOSYS, struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx, void *context)

STUB(int, domain_srx_ctx, -FI_ENOSYS, struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)

STUB(int, domain_query_atomic, -FI_ENOSYS, struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op, struct fi_atomic_attr *attr, uint64_t flags)

STUB(int, domain_query_collective, -FI_ENOSYS, struct fid_domain *domain, enum fi_collective_op coll, struct fi_collective_attr *attr, uint64_t flags)

static int domain_endpoint2(struct fid_domain *domain, struct fi_info *info,
			    struct fid_ep **ep, uint64_t flags, void *context)
{
	if (flags)
		return -FI_ENOSYS;
	return domain_endpoint(domain, info, ep, context);
}

STUB(int, mr_reg, -FI_ENOSYS, struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)

STUB(int, mr_regv, -FI_ENOSYS, struct fid *fid, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)

STUB(int, mr_regattr, -FI_ENOSYS, struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)

FID_OPS(domain_fid_ops, domain_close, no_bind, no_control);

static struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = domain_av_open,
	.cq_open = domain_cq_open,
	.endpoint = domain_endpoint,
	.scalable_ep = domain_scalable_ep,
	.cntr_open = domain_cntr_open,
	.poll_open = domain_poll_open,
	.stx_ctx = domain_stx_ctx,
	.srx_ctx = domain_srx_ctx,
	.query_atomic = domain_query_atomic,
	.query_collective = domain_query_collective,
	.endpoint2 = domain_endpoint2,
};

static struct fi_ops_mr mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

static int fabric_domain(struct fid_fabric *fabric, struct fi_info *info,
			 struct fid_domain **out, void *context)
{
	if (info && info->domain_attr && info->domain_attr->name &&
	    strcmp(info->domain_attr->name, NICMSG_DOMAIN_NAME))
		return -FI_EINVAL;
	struct nicmsg_domain *domain = calloc(1, sizeof(*domain));
	if (!domain)
		return -FI_ENOMEM;
	domain->info = info ? fi_dupinfo(info) : NULL;
	domain->parent = adopt(&((struct nicmsg_fabric *)fabric)->children);
	domain->domain.fid.fclass = FI_CLASS_DOMAIN;
	domain->domain.fid.context = context;
	domain->domain.fid.ops = &domain_fid_ops;
	domain->domain.ops = &domain_ops;
	domain->domain.mr = &mr_ops;
	*out = &domain->domain;
	return 0;
}

/* ---- Event queue (fi_pingpong opens one; nothing of an RDM endpoint reports there) ---- */

STUB(ssize_t, eq_read, -FI_EAGAIN, struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)

STUB(ssize_t, eq_readerr, -FI_EAGAIN, struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)

STUB(ssize_t, eq_write, -FI_ENOSYS, struct fid_eq *eq, uint32_t event, const void *buf, size_t len, uint64_t flags)

STUB(ssize_t, eq_sread, -FI_EAGAIN, struct fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags)

static const char *eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data,
			       char *buf, size_t len)
{
	(void)err_data;
	return error_text(prov_errno, buf, len);
}

static int eq_close(struct fid *fid)
{
	struct nicmsg_eq *eq = (struct nicmsg_eq *)fid;
	release(eq->parent);
	free(eq);
	return 0;
}

FID_OPS(eq_fid_ops, eq_close, no_bind, no_control);

static struct fi_ops_eq eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

static int fabric_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
			  struct fid_eq **out, void *context)
{
	(void)attr;
	struct nicmsg_eq *eq = calloc(1, sizeof(*eq));
	if (!eq)
		return -FI_ENOMEM;
	eq->parent = adopt(&((struct nicmsg_fabric *)fabric)->children);
	eq->eq.fid.fclass = FI_CLASS_EQ;
	eq->eq.fid.context = context;
	eq->eq.fid.ops = &eq_fid_ops;
	eq->eq.ops = &eq_ops;
	*out = &eq->eq;
	return 0;
}

/* ---- Fabric ---- */

STUB(int, fabric_passive_ep, -FI_ENOSYS, struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep, void *context)

STUB(int, fabric_wait_open, -FI_ENOSYS, struct fid_fabric *fabric, struct fi_wait_attr *attr, struct fid_wait **waitset)

/* fi_trywait: 0 if the application may sleep on the descriptors of the FI_WAIT_FD queues
 * `fids`, -FI_EAGAIN if one has completions to read first. */
static int fabric_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	(void)fabric;
	for (int i = 0; i < count; i++) {
		if (!fids[i] || fids[i]->fclass != FI_CLASS_CQ)
			return -FI_EINVAL;
		int ready = LOCKED(cq_trywait_locked((struct nicmsg_cq *)fids[i]));
		if (ready)
			return ready;
	}
	return 0;
}

static int fabric_domain2(struct fid_fabric *fabric, struct fi_info *info,
			  struct fid_domain **domain, uint64_t flags, void *context)
{
	if (flags)
		return -FI_ENOSYS;
	return fabric_domain(fabric, info, domain, context);
}

static int fabric_close(struct fid *fid)
{
	struct nicmsg_fabric *fabric = (struct nicmsg_fabric *)fid;
	if (LOCKED(fabric->children > 0))
		return -FI_EBUSY;
	free(fabric);
	return 0;
}

FID_OPS(fabric_fid_ops, fabric_close, no_bind, no_control);

static struct fi_ops_fabric fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = fabric_domain,
	.passive_ep = fabric_passive_ep,
	.eq_open = fabric_eq_open,
	.wait_open = fabric_wait_open,
	.trywait = fabric_trywait,
	.domain2 = fabric_domain2,
};

static int nicmsg_fabric(struct fi_fabric_attr *attr, struct fid_fabric **out, void *context)
{
	if (attr && attr->name && strcmp(attr->name, NICMSG_FABRIC_NAME))
		return -FI_ENODATA;
	struct nicmsg_fabric *fabric = calloc(1, sizeof(*fabric));
	if (!fabric)
		return -FI_ENOMEM;
	fabric->fabric.fid.fclass = FI_CLASS_FABRIC;
	fabric->fabric.fid.context = context;
	fabric->fabric.fid.ops = &fabric_fid_ops;
	fabric->fabric.ops = &fabric_ops;
	*out = &fabric->fabric;
	return 0;
}

static struct fi_provider nicmsg_provider = {
	.version = NICMSG_PROVIDER_VERSION,
	.fi_version = FI_VERSION(1, 17),
	.name = "nicmsg",
	.getinfo = nicmsg_getinfo,
	.fabric = nicmsg_fabric,
	.cleanup = NULL,
};

/* libfabric's entry point, `fi_prov_ini`, is exported by the Rust half (src/lib.rs): a Rust
 * library exports only its own symbols, and this call keeps this file in it. */
struct fi_provider *nicmsg_provider_ini(void)
{
	return &nicmsg_provider;
}

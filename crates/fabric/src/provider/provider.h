/*
 * nicmsg as a libfabric provider: the objects libfabric's API works on and their operation
 * tables, laid out by libfabric's own headers, a file each as libfabric's own providers have
 * them:
 *
 *   info.c      fi_getinfo: what the provider offers, matched against the caller's hints
 *   fabric.c    the fabric, its event queue, and the provider's description
 *   domain.c    the domain, which opens endpoints, completion queues and address vectors
 *   av.c        address vectors: fi_addr_t to socket addresses and back
 *   cq.c        completion queues: entries in each queue's format, reads, waits, signals
 *   ep.c        endpoints: binding, enabling, closing, cancelling, their name
 *   messages.c  the operations that move messages (msg and tagged, peek and claim)
 *   progress.c  the thread that moves operations held past an engine's room along
 *   common.c    the lock, child counts, and the stubs for what nicmsg does not offer
 *
 * Every operation that moves a message calls the Rust side (`src/endpoint.rs`, the `nf_*`
 * functions), which runs it on a nicmsg engine; this half only translates: addresses in the
 * address vector to socket addresses, libfabric's flags to whether a completion is wanted,
 * and finished operations to completion queue entries in the format each queue was opened
 * with.
 *
 * One lock (`provider_lock`) serialises every call into the provider, so it is FI_THREAD_SAFE;
 * the engine does its protocol work on its own thread (or inline, inside these calls).
 */
#ifndef NICMSG_PROVIDER_H
#define NICMSG_PROVIDER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
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
int nf_holds(void *ep);



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
	/* The provider's list of open endpoints (`open_endpoints`, ep.c), under the lock. */
	struct nicmsg_ep *prev_open;
	struct nicmsg_ep *next_open;
	size_t *parent;
};

/* Every open endpoint, newest first, under `provider_lock`: the progress thread looks at
 * those holding operations (progress.c). */
extern struct nicmsg_ep *open_endpoints;
void endpoints_add(struct nicmsg_ep *ep);
void endpoints_remove(struct nicmsg_ep *ep);


/* ---- Shared by every object (common.c) ---- */

extern pthread_mutex_t provider_lock;

int no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int no_control(struct fid *fid, int command, void *arg);
int no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context);

/* A stub for the tables of operations nicmsg does not offer at all (RMA, atomics,
 * collectives): it returns -FI_ENOSYS whatever it is called with, which the x86-64 and
 * AArch64 calling conventions make safe for functions that only return. */
ssize_t no_operation(void);
#define NO_OP ((void *)no_operation)

extern struct fi_ops_rma no_rma;
extern struct fi_ops_atomic no_atomic;
extern struct fi_ops_collective no_collective;

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
size_t *adopt(size_t *children);
void release(size_t *children);

/* libfabric's text for an error code, in `buf` if the caller gave one. */
const char *error_text(int prov_errno, char *buf, size_t len);

/* ---- Between the objects ---- */

/* info.c */
extern const uint64_t nicmsg_caps;
int nicmsg_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **out);

/* domain.c */
int fabric_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **out,
		  void *context);

/* av.c */
int domain_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out,
		   void *context);
size_t address_len(sa_family_t family);
uint16_t address_port(const union nf_addr *a);
fi_addr_t av_source(const struct nicmsg_av *av, const union nf_addr *from);

/* The socket address of `fi_addr`, or NULL if the vector holds none there (here, to be
 * inlined: every send and directed receive asks). */
static inline const union nf_addr *av_address(struct nicmsg_av *av, fi_addr_t fi_addr)
{
	if (!av || fi_addr >= av->count || !av->live[fi_addr])
		return NULL;
	return &av->addrs[fi_addr];
}

/* cq.c */
int domain_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out,
		   void *context);
int cq_attach(struct nicmsg_cq *cq, struct nicmsg_ep *ep);
void cq_detach(struct nicmsg_cq *cq, struct nicmsg_ep *ep);
size_t cq_make_room(struct nicmsg_cq *cq, size_t wanted);
/* How many of `wanted` entries the queue (if any) has room for now, reserved. Every poll asks
 * it twice (both queues of an endpoint), and the queue nearly always has the memory already:
 * that case is answered here, inline (the capacity never exceeds NICMSG_CQ_MAX, so room
 * within it is within the bound too). */
static inline size_t cq_room(struct nicmsg_cq *cq, size_t wanted)
{
	if (!cq)
		return wanted;
	if (wanted <= cq->capacity - cq->count)
		return wanted;
	return cq_make_room(cq, wanted);
}
void cq_push(struct nicmsg_cq *cq, const struct nicmsg_ep *ep, const struct nf_completion *entry);
int cq_trywait_locked(struct nicmsg_cq *cq);
size_t ep_progress(struct nicmsg_ep *ep, const struct nicmsg_cq *reading, bool turn,
		   bool *cut_short);

/* progress.c: after a post on `ep` (under the lock), wakes the provider's thread (started on
 * first need) if `ep` holds operations. */
void progress_if_held(struct nicmsg_ep *ep);

/* ep.c */
int domain_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
		    void *context);
/* The address format of the endpoints this process opens (their bind address's family). */
uint32_t address_format(void);

/* messages.c */
extern struct fi_ops_msg msg_ops;
extern struct fi_ops_tagged tagged_ops;

#endif

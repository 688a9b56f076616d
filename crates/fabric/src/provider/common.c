/* What every object shares: the provider's lock, the counts of children, and the stubs for
 * what nicmsg does not offer. */
#include "provider.h"

pthread_mutex_t provider_lock = PTHREAD_MUTEX_INITIALIZER;

int no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	return -FI_ENOSYS;
}

int no_control(struct fid *fid, int command, void *arg)
{
	return -FI_ENOSYS;
}

int no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
	return -FI_ENOSYS;
}

ssize_t no_operation(void)
{
	return -FI_ENOSYS;
}

/* Counts a child opened from the parent whose count is `children`; the child keeps the
 * result, to give back with `release` when it closes. */
size_t *adopt(size_t *children)
{
	pthread_mutex_lock(&provider_lock);
	++*children;
	pthread_mutex_unlock(&provider_lock);
	return children;
}

void release(size_t *children)
{
	pthread_mutex_lock(&provider_lock);
	--*children;
	pthread_mutex_unlock(&provider_lock);
}

/* libfabric's text for an error code, in `buf` if the caller gave one. */
const char *error_text(int prov_errno, char *buf, size_t len)
{
	const char *text = fi_strerror(prov_errno);
	if (buf && len) {
		snprintf(buf, len, "%s", text);
		return buf;
	}
	return text;
}

struct fi_ops_rma no_rma = {
	.size = sizeof(struct fi_ops_rma),
	.read = NO_OP, .readv = NO_OP, .readmsg = NO_OP, .write = NO_OP, .writev = NO_OP,
	.writemsg = NO_OP, .inject = NO_OP, .writedata = NO_OP, .injectdata = NO_OP,
};

struct fi_ops_atomic no_atomic = {
	.size = sizeof(struct fi_ops_atomic),
	.write = NO_OP, .writev = NO_OP, .writemsg = NO_OP, .inject = NO_OP,
	.readwrite = NO_OP, .readwritev = NO_OP, .readwritemsg = NO_OP, .compwrite = NO_OP,
	.compwritev = NO_OP, .compwritemsg = NO_OP, .writevalid = NO_OP,
	.readwritevalid = NO_OP, .compwritevalid = NO_OP,
};

struct fi_ops_collective no_collective = {
	.size = sizeof(struct fi_ops_collective),
	.barrier = NO_OP, .broadcast = NO_OP, .alltoall = NO_OP, .allreduce = NO_OP,
	.allgather = NO_OP, .reduce_scatter = NO_OP, .reduce = NO_OP, .scatter = NO_OP,
	.gather = NO_OP, .msg = NO_OP,
};

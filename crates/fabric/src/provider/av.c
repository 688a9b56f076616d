/* Address vectors (map and table alike): the socket address of each fi_addr_t the application
 * inserted, and, for FI_SOURCE, the fi_addr_t of a socket address a message came from. */
#include "provider.h"

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
size_t address_len(sa_family_t family)
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
uint16_t address_port(const union nf_addr *a)
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
fi_addr_t av_source(const struct nicmsg_av *av, const union nf_addr *from)
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

int domain_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out,
		   void *context)
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

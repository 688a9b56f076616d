/*
 * fi_av_lookup into a buffer too small on nicmsg's provider: the address is truncated to the
 * buffer, addrlen says the size it needs, and the call succeeds (fi_av(3): only insertions
 * answer anything but 0 on success; libfabric's own address vectors do the same). The
 * provider answered -FI_ETOOSMALL, so a program asking for the size with addrlen 0, or
 * checking the call, failed. Nothing past the buffer is written. Prints "av_lookup: ok" and
 * exits 0, or says what failed.
 *
 *   cc -o av_lookup av_lookup.c -lfabric && FI_PROVIDER_PATH=DIR ./av_lookup
 */
#define CHECK_NAME "av_lookup"
#include "check.h"

/* Bytes of the address a short buffer has room for. */
#define SHORT_ROOM 4

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	open_domain(FI_TAGGED, &info, &fabric, &domain);
	struct node n;
	open_node(info, domain, &n, FI_WAIT_NONE);
	fi_addr_t at = insert_peer(&n, &n);
	size_t len = 0;
	int got = fi_av_lookup(n.av, at, NULL, &len);
	if (got != 0 || len != n.name_len)
		FAIL("a lookup of the size gave %d and addrlen %zu, not 0 and %zu", got, len,
		     n.name_len);
	char found[64];
	memset(found, 0x77, sizeof(found));
	len = SHORT_ROOM;
	got = fi_av_lookup(n.av, at, found, &len);
	if (got != 0 || len != n.name_len)
		FAIL("a lookup into %d bytes gave %d and addrlen %zu, not 0 and %zu", SHORT_ROOM,
		     got, len, n.name_len);
	if (memcmp(found, n.name, SHORT_ROOM))
		FAIL("the truncated address is not the address's first bytes");
	for (size_t i = SHORT_ROOM; i < sizeof(found); i++)
		if (found[i] != 0x77)
			FAIL("the lookup wrote byte %zu, past the %d bytes it was given", i,
			     SHORT_ROOM);
	len = sizeof(found);
	CHECK(fi_av_lookup(n.av, at, found, &len));
	if (len != n.name_len || memcmp(found, n.name, len))
		FAIL("a lookup with room did not give the address");
	close_all((struct node *[]){&n}, 1, domain, fabric, info);
	printf("av_lookup: ok\n");
	return 0;
}

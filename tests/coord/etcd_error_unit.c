/*
 * The etcd gateway's error answers as -errno (src/coord/etcd_http.c, etcd_error), no etcd
 * needed: unary calls answer {"code": n, ...}; the streaming ones (lease keepalive, watch)
 * {"error": {"grpc_code": n, ...}}, which read as a protocol error before the fix, so a
 * member without a leader stopped the failover to the next endpoint.
 */
#include "common/test_util.h"
#include "coord/etcd_int.h"

#include <errno.h>
#include <stdio.h>

static void expect(const char *json, int want)
{
	json_object *o = json_tokener_parse(json);
	int r = o ? etcd_error(o) : -EBADMSG;

	TEST_CHECK(0, r == want, "%s: %d, not %d", json, r, want);
	json_object_put(o);
}

int main(void)
{
	expect("{\"error\":\"etcdserver: no leader\",\"code\":14,\"message\":\"no leader\"}",
	       -EAGAIN);
	expect("{\"code\":5,\"message\":\"etcdserver: requested lease not found\"}", -ENOENT);
	expect("{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"etcdserver: no "
	       "leader\",\"http_status\":\"Service Unavailable\"}}", -EAGAIN);
	expect("{\"error\":{\"grpc_code\":11,\"http_code\":400,\"message\":\"mvcc: required "
	       "revision has been compacted\"}}", -ERANGE);
	expect("{\"grpc_code\":16,\"message\":\"etcdserver: invalid auth token\"}", -EACCES);
	expect("{\"error\":{\"message\":\"no code\"}}", -EPROTO);
	expect("{\"code\":\"14\"}", -EPROTO); /* not a number */
	expect("{}", -EPROTO);
	printf("%s\n", test_failures ? "FAILED" : "passed");
	return test_failures ? 1 : 0;
}

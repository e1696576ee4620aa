#include <ddss/ddss.h>

#include <errno.h>
#include <limits.h>
#include <string.h>

#define DDSS_STR_(x) #x
#define DDSS_STR(x) DDSS_STR_(x)

/*
 * Messages for the errno values DDSS returns, worded for what they mean here; anything
 * else falls back to the C library's text.
 */
const char *ddss_strerror(int err)
{
	static _Thread_local char buf[96];
	/* -INT_MIN overflows: no errno is that large anyway. */
	int e = err == INT_MIN ? INT_MAX : err < 0 ? -err : err;

	switch (e) {
	case 0: return "success";
	case EINVAL: return "invalid argument";
	case ERANGE: return "access outside the target's registered memory";
	case ESTALE: return "stale key: the segment was released";
	case ETIMEDOUT: return "operation timed out";
	case ECONNRESET: return "connection to the peer was lost";
	case ECONNREFUSED: return "peer refused the connection (not running or not a member)";
	case EHOSTDOWN: return "peer is down";
	case EPROTO: return "protocol error: malformed message from a peer";
	case EOPNOTSUPP: return "operation not supported by this transport";
	case ECANCELED: return "operation canceled (transport closing)";
	case ENOMEM: return "out of memory";
	case EBUSY: return "resource busy";
	case EDQUOT: return "quota exceeded: this rank holds its limit at that home";
	case EACCES: return "peer rejected the handshake";
	case ENOTCONN: return "not connected: the node's daemon is gone (daemon mode)";
	default: break;
	}
	/* The build defines _GNU_SOURCE: this is the GNU strerror_r, returning the text. */
	return strerror_r(e, buf, sizeof(buf));
}

const char *ddss_version_string(void)
{
	return DDSS_STR(DDSS_VERSION_MAJOR) "." DDSS_STR(DDSS_VERSION_MINOR) "." DDSS_STR(DDSS_VERSION_PATCH);
}

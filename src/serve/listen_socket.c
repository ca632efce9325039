/* Listening sockets bound by the server itself: SO_REUSEADDR, never SO_REUSEPORT, a port in use named as such
 * (listen_socket.h says why). */
#include "listen_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int listen_socket_in_use(const char *host, int port, const char *what, serve_error *e) {
    return serve_fail(e, SERVE_UNAVAILABLE, "port %d is in use (%s): another process listens on %s:%d; stop it or "
                                            "choose another port", port, what, host, port);
}

int listen_socket_open(const char *host, int port, const char *what, int *fd, serve_error *e) {
    *fd = -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    const int v6 = strchr(host, ':') != NULL;
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
            return serve_fail(e, SERVE_BAD_REQUEST, "--host '%s' is not an IPv6 address", host);
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
            return serve_fail(e, SERVE_BAD_REQUEST, "--host '%s' is not an IPv4 address", host);
        len = sizeof *a;
    }
    /* non-blocking: every worker of the HTTP thread pool polls this socket, and only one wins each connection */
    int s = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return serve_fail(e, SERVE_INTERNAL, "cannot create the %s socket: %s", what, strerror(errno));
    const int on = 1;
    int rc = setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (!rc && v6) rc = setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on); /* no dual stack, as MHD had it */
    if (rc != 0) {
        serve_fail(e, SERVE_INTERNAL, "cannot set up the %s socket: %s", what, strerror(errno));
        close(s);
        return -1;
    }
    if (bind(s, (struct sockaddr *)&ss, len) != 0) {
        const int err = errno;
        close(s);
        if (err == EADDRINUSE) return listen_socket_in_use(host, port, what, e);
        return serve_fail(e, SERVE_INTERNAL, "cannot listen on %s:%d (%s): %s", host, port, what, strerror(err));
    }
    if (listen(s, SOMAXCONN) != 0) {
        const int err = errno;
        close(s);
        if (err == EADDRINUSE) return listen_socket_in_use(host, port, what, e);
        return serve_fail(e, SERVE_INTERNAL, "cannot listen on %s:%d (%s): %s", host, port, what, strerror(err));
    }
    *fd = s;
    return 0;
}

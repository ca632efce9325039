/* The listening sockets of the server's front ends (HTTP, metrics, and the gRPC port to come), bound here rather
 * than by the libraries that serve them, so that every port gets the same rule and the same error.
 *
 * The rule: a port another socket listens on is an error, "port 8000 is in use (HTTP)", and the server does not
 * start (exit 1). The socket gets SO_REUSEADDR, so a restarted server binds at once while the old connections sit
 * in TIME_WAIT, and never SO_REUSEPORT: with it a second server bound the same port and the kernel split the
 * connections between the two. Nothing in one server needs SO_REUSEPORT: the HTTP thread pool (libmicrohttpd)
 * shares the one listening socket, each worker adding it to its own epoll set.
 *
 * A front end whose library binds by itself must still follow the rule: gRPC's C core sets SO_REUSEPORT unless the
 * channel argument GRPC_ARG_ALLOW_REUSEPORT is 0, so the gRPC front end sets it to 0 and reports a failed bind
 * with listen_socket_in_use below. */
#ifndef SERVE_LISTEN_SOCKET_H
#define SERVE_LISTEN_SOCKET_H

#include "serve_error.h"

/* Binds `host` (an IPv4 or IPv6 literal) and `port` and listens. `what` names the front end in errors ("HTTP",
 * "metrics", "gRPC"). Returns 0 with the socket in *fd (close-on-exec, owned by the caller until handed on), or
 * -1: 400 for a host that is not an address literal, 503 (listen_socket_in_use) for a port in use, 500 otherwise. */
int listen_socket_open(const char *host, int port, const char *what, int *fd, serve_error *e);

/* The error for a port another process holds: "port N is in use (WHAT): ...". Returns -1. */
int listen_socket_in_use(const char *host, int port, const char *what, serve_error *e);

#endif

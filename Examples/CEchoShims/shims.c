#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>

#include "CEchoShims.h"

int echo_accept_nonblocking(int listener) {
    int fd;
    do {
        fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

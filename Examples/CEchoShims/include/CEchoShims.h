#ifndef CECHOSHIMS_H
#define CECHOSHIMS_H

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC, retried on EINTR (Swift's Glibc module does
/// not export accept4): the new descriptor, or -errno.
int echo_accept_nonblocking(int listener);

#endif

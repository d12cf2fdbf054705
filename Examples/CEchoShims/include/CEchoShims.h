#ifndef CECHOSHIMS_H
#define CECHOSHIMS_H

#include <stddef.h>

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC, retried on EINTR (Swift's Glibc module does
/// not export accept4): the new descriptor, or -errno.
int echo_accept_nonblocking(int listener);

/// Scratch space of at least `capacity` bytes owned by the calling thread (allocated on its
/// first use, grown when asked for more, freed when the thread exits), or NULL when it cannot
/// be allocated. An echo reads into it and writes straight back, so that a connection needs
/// no buffer of its own while the socket takes its echoes whole.
void *echo_thread_scratch(size_t capacity);

#endif

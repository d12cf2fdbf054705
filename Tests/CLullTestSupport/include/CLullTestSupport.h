#ifndef LULL_TEST_SUPPORT_H
#define LULL_TEST_SUPPORT_H

#include <CLullShims.h>
#include <stddef.h>
#include <stdint.h>

// C the tests need and the library does not: arming the fault table the library's shims
// consult, and probes of what the runtime did. Same convention as CLullShims.h (0 or a
// non-negative result, or -errno; EINTR retried), except where a function says otherwise.

// MARK: Fault injection

/// Makes the next `count` calls of `call` (-1: every call until disarmed) fail with
/// `errno_value`, as the system call would: the shim returns -errno_value. Process-wide; for
/// tests, which arm and disarm from one thread at a time.
void lull_fault_arm(lull_call call, int errno_value, int count);
/// Disarms every fault and resets the hit counts.
void lull_fault_disarm_all(void);
/// How many calls of `call` failed by injection since the last lull_fault_disarm_all.
int lull_fault_hits(lull_call call);

// MARK: Probes

/// The usable size of a block from malloc (malloc_usable_size): what an object really costs,
/// for the tests that keep the runtime's per-object memory in check.
size_t lull_malloc_usable_size(const void *block);

/// The bytes malloc has handed out and not taken back, over every arena (mallinfo2's
/// uordblks plus its mmapped blocks): what a structure costs in all, slack and headers
/// included.
size_t lull_heap_bytes_in_use(void);

/// Reads the I/O priority of one thread into *value (class << 13 | data): 0 or -errno.
int lull_get_thread_ioprio(int32_t tid, int *value);

/// Reads a timerfd's expirations since the last read: the count, 0 when there are none
/// (EAGAIN), or -errno.
long long lull_timerfd_take(int fd);

/// The size of struct inotify_event before its name (16 on Linux).
unsigned long lull_inotify_event_header_size(void);

/// Moves the calling process, which must be single-threaded (a child just forked), into a
/// new user namespace (unshare CLONE_NEWUSER): 0 or -errno. The inotify limits are per user
/// namespace, so a child can lower them for itself (tests of the limit errors).
int lull_unshare_user_namespace(void);

/// Directory listing: opens a directory for reading (O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
/// O_CLOEXEC) relative to dirfd and returns an opaque stream, or NULL when it cannot.
void *lull_directory_open(int dirfd, const char *path);
/// The next entry's name (not "." or ".."), or NULL at the end or on error. *is_directory
/// is 1 for a directory, 0 otherwise, -1 when the type is unknown.
const char *lull_directory_next(void *stream, int *is_directory);
/// Closes a stream from lull_directory_open (its descriptor exactly once).
void lull_directory_close(void *stream);

#endif

#ifndef LULL_SHIMS_H
#define LULL_SHIMS_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <time.h>

// Thin wrappers over Linux system calls that Swift cannot call directly
// (variadic `syscall`/`prctl`, glibc enums, flags Swift's Glibc module does not declare).
//
// The convention, for every shim here that can fail:
// - success returns 0, or a non-negative result (a descriptor, a count, a value);
// - failure returns the negative errno (-EBADF, -ENOSPC...), never -1;
// - errno means nothing after the call: no shim reports through it;
// - a call the kernel may interrupt (EINTR) and that is safe to repeat is repeated inside
//   the shim, so -EINTR reaches the caller only where repeating would be wrong (none today).
// Shims that cannot fail return their value directly (lull_gettid, lull_signal_take...).
// Swift calls them through `Syscall.shim`, which turns the negative errno into a
// `SystemError` (Sources/Lull/Support/).

/// The kernel thread id of the calling thread.
int32_t lull_gettid(void);

/// The calling thread's last timer creation site and its number in the runtime's table of
/// sites (a thread-local one-entry cache: a loop creating timers looks it up once).
/// `lull_site_cache_get` returns 0 when the cache holds another site.
uint32_t lull_site_cache_get(const void *file, uint32_t line);
void lull_site_cache_put(const void *file, uint32_t line, uint32_t number);

/// The symbolic name of an errno value ("ENOSPC"), or NULL when it has none.
const char *lull_errno_name(int code);

/// Names the calling thread (at most 15 bytes are kept), as shown by ps and /proc: 0 or -errno.
int lull_set_thread_name(const char *name);

/// Sets the nice value of one thread (Linux nice values are per thread): 0 or -errno.
int lull_set_thread_nice(int32_t tid, int nice);

/// Reads the nice value of one thread into *nice: 0 or -errno.
int lull_get_thread_nice(int32_t tid, int *nice);

/// The soft RLIMIT_NICE of the process (RLIM_INFINITY as UINT64_MAX) into *limit: 0 or -errno.
int lull_get_rlimit_nice(uint64_t *limit);

/// Puts one thread in the idle I/O scheduling class (IOPRIO_CLASS_IDLE): 0 or -errno.
int lull_set_thread_io_idle(int32_t tid);

/// Puts one thread under SCHED_IDLE (idle != 0) or SCHED_OTHER (sched_setscheduler, which
/// keeps its nice value): 0 or -errno.
int lull_set_thread_sched_idle(int32_t tid, int idle);

/// The scheduling policy of one thread (sched_getscheduler: LULL_SCHED_OTHER,
/// LULL_SCHED_IDLE...), or -errno.
int lull_get_thread_policy(int32_t tid);
/// Linux's policy numbers (sched.h declares them only under _GNU_SOURCE).
#define LULL_SCHED_OTHER 0
#define LULL_SCHED_IDLE 5

/// Sets one thread's utilization clamps (sched_setattr with SCHED_FLAG_KEEP_ALL and
/// SCHED_FLAG_UTIL_CLAMP_MIN | _MAX: policy and nice value unchanged), 0...1024 each: 0 or
/// -errno (-EOPNOTSUPP on a kernel without CONFIG_UCLAMP_TASK).
int lull_set_thread_util_clamp(int32_t tid, uint32_t util_min, uint32_t util_max);

/// Reads one thread's requested utilization clamps (sched_getattr): 0 or -errno (-E2BIG or
/// -EINVAL on a kernel whose sched_attr has no clamps).
int lull_get_thread_util_clamp(int32_t tid, uint32_t *util_min, uint32_t *util_max);

/// Whether the calling thread has CAP_SYS_NICE in its effective set (capget): 1, 0, or -errno.
int lull_has_cap_sys_nice(void);

/// Whether a Swift task runs on the calling thread (swift_task_getCurrent() != NULL): a few
/// nanoseconds, where the public `withUnsafeCurrentTask` costs tens.
int lull_in_swift_task(void);

/// The CPU time (ns) thread `tid` of this process has used; -1 if it cannot be read (the
/// thread has exited).
int64_t lull_thread_cpu_nanoseconds(int32_t tid);

/// The address of the task running on the calling thread (0: none). A task's job, when an
/// executor receives it, has the same address (a task is its own job).
uintptr_t lull_current_swift_task(void);

/// 1 when the calling thread runs a callout of Dispatch's main queue (the queue an async
/// main's run loop drains on Linux), 0 otherwise or where no libdispatch is loaded.
int lull_dispatch_main_queue_is_current(void);
/// Submits work(context) to Dispatch's main queue (dispatch_async_f): 0, or -ENOSYS where no
/// libdispatch is loaded.
int lull_dispatch_main_async(void *context, void (*work)(void *));
/// The eventfd Dispatch's main queue signals when it has work for a run loop on the main
/// thread (_dispatch_get_main_queue_handle_4CF), or -errno where no libdispatch offers it.
int lull_dispatch_main_queue_handle(void);
/// Clears that eventfd and runs Dispatch's main queue's blocks (_dispatch_main_queue_callback_4CF),
/// as CoreFoundation's RunLoop does: only on the main thread, while the eventfd is readable.
void lull_dispatch_main_queue_drain(int descriptor);

/// Sets the calling thread's timer slack in nanoseconds (prctl PR_SET_TIMERSLACK); 0 puts
/// back the thread's default slack (the one it inherited when it was created). 0 or -errno.
int lull_set_timer_slack(unsigned long nanoseconds);
/// The calling thread's current timer slack in nanoseconds (prctl PR_GET_TIMERSLACK), or -errno.
long lull_get_timer_slack(void);

/// A one-permit parking word (0 empty, 1 permit available, 2 a thread parked).
/// lull_park consumes the permit or sleeps until lull_unpark gives one or the absolute
/// CLOCK_MONOTONIC deadline passes (NULL: none). Returns 0 when a permit was consumed,
/// -ETIMEDOUT otherwise (an interrupted sleep sleeps again).
int lull_park(uint32_t *word, const struct timespec *deadline);
/// Gives the permit; wakes the parked thread if there is one (a system call only then).
void lull_unpark(uint32_t *word);

// MARK: Locks

/// A mutex word (0 unlocked, 1 locked, 2 locked with waiters): an uncontended lock or
/// unlock is one atomic instruction; a contended lock spins briefly before sleeping on the
/// futex, which is what short critical sections between two cores want.
void lull_lock(uint32_t *word);
void lull_unlock(uint32_t *word);

/// Tell ThreadSanitizer about synchronisation it cannot see (futex sleeps, locks whose slow
/// path lives in uninstrumented code). No-ops unless built with -fsanitize=thread.
void lull_tsan_acquire(const void *address);
void lull_tsan_release(const void *address);

/// One spin-wait hint to the CPU (pause / yield).
static inline void lull_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// MARK: Signals

/// How Lull observes a signal without taking its disposition away from the program.
enum {
    /// The disposition kills, stops or dumps the process: Lull leaves it alone (as on
    /// Darwin, the default action happens).
    LULL_SIGNAL_DEFAULT_ACTION = 0,
    /// Lull installed its forwarder, which counts the signal and then does what the
    /// previous disposition did (nothing for SIG_IGN or a default-ignored signal, or call
    /// the program's handler).
    LULL_SIGNAL_FORWARDED = 1,
};

/// Starts counting deliveries of signo; each one also writes to `notify_fd` (an eventfd).
/// Returns LULL_SIGNAL_* (>= 0) or -errno.
int lull_signal_watch(int signo, int notify_fd);
/// Stops forwarding signo: puts back the disposition lull_signal_watch found, unless the
/// program replaced the forwarder since. Returns 1 when Lull stopped forwarding, 0 when it
/// was not forwarding signo, or -errno (the forwarder stays).
int lull_signal_unwatch(int signo);
/// Takes the number of deliveries of signo counted since the last call.
uint64_t lull_signal_take(int signo);
/// The real-time signals a program may use (SIGRTMIN, SIGRTMAX): glibc keeps the first
/// kernel real-time signals (32 and 33) for its threads (NPTL).
int lull_signal_realtime_min(void);
int lull_signal_realtime_max(void);

// MARK: fork

/// Registers, once, the pthread_atfork child handler: it marks the child (see
/// lull_in_forked_child) and puts back the program's disposition of every signal Lull
/// forwards. Exec'd children started without fork handlers (posix_spawn, vfork) are not
/// concerned.
void lull_fork_guard_install(void);
/// Set by the child handler; read through lull_in_forked_child.
extern volatile sig_atomic_t lull_forked_child_flag;
/// 1 in the child of a fork made after lull_fork_guard_install, 0 otherwise (one load,
/// inlined: it guards the path every job takes).
static inline int lull_in_forked_child(void) { return lull_forked_child_flag; }

// MARK: Clock changes

/// A CLOCK_REALTIME timerfd armed far in the future with TFD_TIMER_CANCEL_ON_SET: it becomes
/// readable when the system clock is set. Returns the fd or -errno.
int lull_clock_watch_create(void);
/// After readiness: returns 1 if the clock was set (and re-arms the watch), 0 if not, -errno.
/// An interrupted read is repeated.
int lull_clock_watch_check(int fd);

// MARK: The reactor's precise timer

/// A CLOCK_MONOTONIC timerfd, non-blocking and close-on-exec. Returns the fd or -errno.
int lull_timerfd_create(void);
/// Arms it once for the absolute CLOCK_MONOTONIC instant `deadline` (ns; 0 is taken as 1,
/// since an all-zero time would disarm it). A past instant makes it readable at once.
/// Returns 0 or -errno.
int lull_timerfd_arm(int fd, uint64_t deadline);
/// Disarms it (and discards an expiration not yet read). Returns 0 or -errno.
int lull_timerfd_disarm(int fd);

// MARK: The poll watch's alarm

/// A CLOCK_MONOTONIC timerfd for the poll watch's alarm, blocking and close-on-exec (no
/// fault injection: the reactor's timer tests count their own calls). Returns the fd or -errno.
int lull_watch_alarm_create(void);
/// Arms the alarm `delay` ns from now (relative), or disarms it for 0 (discarding an
/// expiration not yet read). Returns 0 or -errno.
int lull_watch_alarm_set(int fd, uint64_t delay);
/// Sleeps until the alarm expires and takes its expirations. Returns 0 or -errno (EINTR
/// included: the caller decides whether to sleep again).
int lull_watch_alarm_wait(int fd);

// MARK: Descriptors

/// Opens a pidfd for pid (pidfd_open, O_CLOEXEC is implied). Returns the fd or -errno.
int lull_pidfd_open(int32_t pid);
/// Accepts a connection on a listening socket as a non-blocking, close-on-exec socket
/// (accept4, which Swift's Glibc module does not declare; retried on EINTR). Returns the fd
/// or -errno.
int lull_accept_nonblocking(int listener);
/// Creates a non-blocking, close-on-exec eventfd. Returns the fd or -errno.
int lull_eventfd(void);
/// Reads and discards an eventfd's counter (retried on EINTR).
void lull_eventfd_drain(int fd);

/// Bytes readable now (FIONREAD), or -errno.
long lull_bytes_readable(int fd);
/// An estimate of the bytes that can be written now without blocking (> 0), or -errno.
long lull_write_space(int fd);
/// poll(2) with a zero timeout (retried on EINTR): the revents for `events`, or -errno.
int lull_poll_now(int fd, short events);
/// Identity of the open file behind fd: device and inode. Returns 0 or -errno.
int lull_fd_identity(int fd, uint64_t *device, uint64_t *inode, int *is_regular);
/// For a regular file: size minus the current offset (>= 0), or -errno.
long long lull_file_bytes_after_offset(int fd);

// MARK: File-system objects (inotify)

/// Creates a non-blocking, close-on-exec inotify instance. Returns the fd or -errno.
int lull_inotify_init(void);
/// inotify_add_watch: the watch descriptor (>= 0) or -errno.
int lull_inotify_add_watch(int fd, const char *path, uint32_t mask);
/// inotify_rm_watch: 0 or -errno.
int lull_inotify_rm_watch(int fd, int wd);
/// One read(2) of queued inotify events into buffer (retried on EINTR): the byte count,
/// or -errno (-EAGAIN once the queue is empty).
long lull_inotify_read(int fd, void *buffer, unsigned long size);

/// Opens path with O_PATH | O_CLOEXEC (following symbolic links when follow != 0): a handle
/// to the object for fstat that neither reads nor writes it. Returns the fd or -errno.
int lull_open_object(const char *path, int follow);
/// Opens the parent directory of the directory fd refers to ("..", O_PATH | O_CLOEXEC |
/// O_DIRECTORY). Returns the fd or -errno.
int lull_open_parent_directory(int fd);
/// Opens a file read-only and close-on-exec (O_NONBLOCK when nonblocking != 0). Returns the
/// fd or -errno.
int lull_open_read_only(const char *path, int nonblocking);

/// What Lull reads about a watched object.
typedef struct {
    uint64_t device;
    uint64_t inode;
    uint64_t link_count;
    int64_t size;
    /// The mount the descriptor was opened through (statx STATX_MNT_ID), 0 when unknown.
    uint64_t mount_id;
    /// Permission bits and owner, to tell a metadata change that came with a link change.
    uint32_t mode;
    uint32_t owner;
    uint32_t group;
    int is_directory;
    int is_symbolic_link;
} lull_object_status;

/// fstat through statx(fd, "", AT_EMPTY_PATH): 0 or -errno.
int lull_object_status_of(int fd, lull_object_status *status);
/// lstat-like status of path relative to dirfd (AT_FDCWD for the current directory), not
/// following a final symbolic link: 0 or -errno.
int lull_object_status_at(int dirfd, const char *path, lull_object_status *status);

/// Whether fd is an open descriptor: 0, or -errno (-EBADF).
int lull_fd_check(int fd);
/// Reads one of the small /proc/sys integer files: its value (>= 0), or -errno (-EINVAL
/// when the file does not start with a non-negative integer).
long long lull_read_proc_integer(const char *path);
/// Reads the whole of a small (proc) file into a malloc'd buffer: 0 with *contents and
/// *length set (the caller frees *contents with lull_free), or -errno with *contents NULL.
int lull_read_small_file(const char *path, char **contents, unsigned long *length);
/// free(3), for buffers the shims handed out.
void lull_free(void *pointer);

/// Directory listing without a stream allocation, for walks of many directories: opens the
/// directory at path relative to dirfd (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
/// retried on EINTR). Returns the fd or -errno.
int lull_open_directory(int dirfd, const char *path);
/// One getdents64(2) into the caller's buffer: the byte count (0 at the end) or -errno.
long lull_read_directory_entries(int fd, void *buffer, unsigned long size);
/// The next entry of a buffer filled by lull_read_directory_entries, from *offset (which it
/// advances), skipping "." and ".."; NULL when the buffer is used up. *is_directory is 1 for
/// a directory, 0 otherwise, -1 when the file system did not say (DT_UNKNOWN).
const char *lull_next_directory_entry(const void *buffer, long length, long *offset, int *is_directory);

// MARK: Diagnostics control socket

/// The user id of a unix socket's peer (SO_PEERCRED) into *uid: 0 or -errno.
int lull_peer_uid(int fd, uint32_t *uid);

// MARK: Fault injection seam

#include <pthread.h>
#include <sys/time.h>

/// The system calls of the runtime that a test can make fail (docs/Failures.md says what
/// a program sees for each). Each shim named here checks the fault table first; the tests'
/// support target (Tests/CLullTestSupport) arms it.
typedef enum lull_call {
    /// lull_event_add for a source's descriptor: libevent's event_add, which makes its
    /// epoll_ctl call, so this is the seam for them. The runtime's own events have seams of
    /// their own (below), so that a fault armed for a source's registration is never taken
    /// by a timer that another thread arms meanwhile.
    LULL_CALL_EVENT_ADD = 0,
    /// lull_event_add for the reactor's timer: the timerfd's event (epoll_ctl) and
    /// libevent's timeout (a heap insert).
    LULL_CALL_EVENT_ADD_TIMER,
    /// lull_event_add for the diagnostics socket's listener.
    LULL_CALL_EVENT_ADD_DIAGNOSTICS,
    /// lull_eventfd.
    LULL_CALL_EVENTFD,
    /// Each read(2) of lull_eventfd_drain.
    LULL_CALL_EVENTFD_READ,
    /// lull_timerfd_create (the reactor's timer) and lull_clock_watch_create.
    LULL_CALL_TIMERFD_CREATE,
    /// lull_timerfd_arm and lull_timerfd_disarm (timerfd_settime).
    LULL_CALL_TIMERFD_SETTIME,
    /// lull_pidfd_open.
    LULL_CALL_PIDFD_OPEN,
    /// lull_inotify_init.
    LULL_CALL_INOTIFY_INIT,
    /// lull_inotify_add_watch.
    LULL_CALL_INOTIFY_ADD_WATCH,
    /// Each read(2) of lull_inotify_read.
    LULL_CALL_INOTIFY_READ,
    /// lull_pthread_create.
    LULL_CALL_PTHREAD_CREATE,
    /// lull_socket.
    LULL_CALL_SOCKET,
    LULL_CALL_COUNT
} lull_call;

/// One entry of the fault table: the errno to inject, the calls still to fail (0 none,
/// > 0 that many, -1 every call until disarmed), and the failures injected so far.
typedef struct {
    int errno_value;
    int remaining;
    int hits;
} lull_fault_entry;

/// The fault table, process-wide, accessed with __atomic operations only. The library's
/// shims read and consume it (faults.c); only the tests' support target writes it
/// (lull_fault_arm there), so the library ships the check and not the arming.
/// `lull_faults_armed` is 0 unless a test armed a fault: the check costs a shim one
/// relaxed load while it is.
extern lull_fault_entry lull_fault_table[LULL_CALL_COUNT];
extern int lull_faults_armed;

struct event;
/// event_add(3) through the fault table's entry `seam` (one of the LULL_CALL_EVENT_ADD
/// kinds): 0 or -errno (-EINVAL when libevent failed without a system error).
int lull_event_add(lull_call seam, struct event *event, const struct timeval *timeout);
/// pthread_create(3) through the fault table: 0 or -(the error number).
int lull_pthread_create(pthread_t *thread, const pthread_attr_t *attributes,
                        void *(*start)(void *), void *argument);
/// socket(2) through the fault table: the descriptor, or -errno.
int lull_socket(int domain, int type, int protocol);

// MARK: Open-file witness (a private epoll set that is never waited on)

/// A new epoll instance, close-on-exec: the fd or -errno.
int lull_witness_create(void);
/// Adds `fd` to the witness set (no events): 0 when added, -EEXIST when the open file
/// behind `fd` is in it already, another -errno when it cannot be added.
int lull_witness_enroll(int witness, int fd);
/// Removes `fd` from the witness set: 0 or -errno (ENOENT, EBADF: it was not there).
int lull_witness_withdraw(int witness, int fd);

#endif

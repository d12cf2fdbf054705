#define _GNU_SOURCE
#include "CLullTestSupport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LULL_IOPRIO_WHO_PROCESS 1

size_t lull_malloc_usable_size(const void *block) {
    return malloc_usable_size((void *)block);
}

size_t lull_heap_bytes_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
}

int lull_get_thread_ioprio(int32_t tid, int *value) {
    long result = syscall(SYS_ioprio_get, LULL_IOPRIO_WHO_PROCESS, (int)tid);
    if (result < 0) return -errno;
    *value = (int)result;
    return 0;
}

long long lull_timerfd_take(int fd) {
    uint64_t expirations = 0;
    for (;;) {
        ssize_t result = read(fd, &expirations, sizeof expirations);
        if (result == (ssize_t)sizeof expirations) return (long long)expirations;
        if (result < 0 && errno == EINTR) continue;
        if (result < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        return result < 0 ? -errno : -EIO;
    }
}

unsigned long lull_inotify_event_header_size(void) { return sizeof(struct inotify_event); }

int lull_unshare_user_namespace(void) {
    return unshare(CLONE_NEWUSER) == 0 ? 0 : -errno;
}

void *lull_directory_open(int dirfd, const char *path) {
    int fd;
    do {
        fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return NULL;
    DIR *stream = fdopendir(fd);
    if (stream == NULL) close(fd);
    return stream;
}

const char *lull_directory_next(void *stream, int *is_directory) {
    for (;;) {
        struct dirent *entry = readdir((DIR *)stream);
        if (entry == NULL) return NULL;
        const char *name = entry->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        *is_directory = entry->d_type == DT_DIR ? 1 : (entry->d_type == DT_UNKNOWN ? -1 : 0);
        return name;
    }
}

void lull_directory_close(void *stream) {
    if (stream != NULL) closedir((DIR *)stream);
}

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
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

struct scratch {
    size_t capacity;
    unsigned char bytes[];
};

static pthread_key_t scratch_key;
static int scratch_key_created;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void create_scratch_key(void) {
    scratch_key_created = pthread_key_create(&scratch_key, free) == 0;
}

void *echo_thread_scratch(size_t capacity) {
    pthread_once(&scratch_once, create_scratch_key);
    if (!scratch_key_created) return NULL;
    struct scratch *current = pthread_getspecific(scratch_key);
    if (current && current->capacity >= capacity) return current->bytes;
    struct scratch *grown = malloc(sizeof *grown + capacity);
    if (!grown) return NULL;
    grown->capacity = capacity;
    if (pthread_setspecific(scratch_key, grown) != 0) {
        free(grown);
        return NULL;
    }
    free(current);
    return grown->bytes;
}

#ifndef LULL_CLIBEVENT_SHIM_H
#define LULL_CLIBEVENT_SHIM_H
// The system headers come first, before libevent's event-config.h defines _GNU_SOURCE:
// otherwise this module would see glibc's structures (fd_set) with other field names than
// the Glibc module Swift code imports, and the two would clash.
#include <sys/types.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <errno.h>
#include <netdb.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <event2/util.h>
#endif

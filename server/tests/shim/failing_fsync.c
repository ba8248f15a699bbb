/* LD_PRELOAD shim for server/tests/it/faults.rs: once the file named by
 * AMBERDB_SHIM_FAIL_FSYNC_WHEN exists, every fsync and fdatasync fails with EIO, as a dying
 * disk's would. Before that they pass through to the C library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *trigger = getenv("AMBERDB_SHIM_FAIL_FSYNC_WHEN");
    return trigger != NULL && access(trigger, F_OK) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing()) {
        errno = EIO;
        return -1;
    }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing()) {
        errno = EIO;
        return -1;
    }
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}

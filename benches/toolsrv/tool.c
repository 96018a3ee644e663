/* The trivial tools of the toolsrv benchmark, one per MODE:
 *   MODE_ECHO:  copy stdin to stdout (the "compiled" trivial tool)
 *   MODE_STAMP: drain stdin, sleep 20 ms, write CLOCK_REALTIME ns to ./stamp, exit
 *   MODE_FLOOD: drain stdin, write 1 GiB to stdout */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char buf[65536];

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(void) {
    ssize_t n;
#if defined(MODE_ECHO)
    while ((n = read(0, buf, sizeof buf)) > 0)
        if (write_all(1, buf, (size_t)n)) return 1;
    return 0;
#elif defined(MODE_STAMP)
    while ((n = read(0, buf, sizeof buf)) > 0) {}
    struct timespec d = {0, 20 * 1000 * 1000};
    nanosleep(&d, 0);
    int fd = open("stamp", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 1;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    char s[32];
    int l = snprintf(s, sizeof s, "%lld\n", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
    write_all(fd, s, (size_t)l);
    _exit(0);
#elif defined(MODE_FLOOD)
    while ((n = read(0, buf, sizeof buf)) > 0) {}
    memset(buf, 'x', sizeof buf);
    for (long i = 0; i < (1L << 30) / (long)sizeof buf; i++)
        if (write_all(1, buf, sizeof buf)) return 1;
    return 0;
#else
#error "define MODE_ECHO, MODE_STAMP or MODE_FLOOD"
#endif
}

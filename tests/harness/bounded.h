/* Run a piece of a test in a child process under a memory and time bound, the
 * way a hostile input must be handled: the child gets RLIMIT_AS (skipped in
 * ASan builds, whose shadow mapping needs terabytes of address space) and an
 * alarm; the parent checks its exit, its time and its peak resident memory.
 * Header only, so any test program can use it. */
#ifndef S2C_TEST_BOUNDED_H
#define S2C_TEST_BOUNDED_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define S2T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define S2T_ASAN 1
#endif
#endif
#ifndef S2T_ASAN
#define S2T_ASAN 0
#endif

typedef struct s2t_bounded {
    int exit_code;     /* the child's exit status, or -signal when killed */
    double seconds;    /* wall time of the child */
    int64_t peak_kib;  /* its peak resident set (ru_maxrss) */
} s2t_bounded;

/* Runs fn(arg) in a child limited to mem_bytes of address space and secs of
 * wall time; fn's return value is the child's exit status.  Returns 0 when the
 * child could be run and waited for. */
static inline int s2t_run_bounded(int (*fn)(void *), void *arg, int64_t mem_bytes, int secs, s2t_bounded *out)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (!S2T_ASAN) {
            struct rlimit rl = {(rlim_t)mem_bytes, (rlim_t)mem_bytes};
            setrlimit(RLIMIT_AS, &rl);
        }
        alarm((unsigned)secs);
        _exit(fn(arg) & 0xff);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    out->peak_kib = ru.ru_maxrss;
    return 0;
}

/* The resident-memory bound a test asserts: mem_bytes, plus ASan's own
 * overhead (shadow and quarantine) in sanitizer builds. */
static inline int64_t s2t_rss_bound_kib(int64_t mem_bytes)
{
    return mem_bytes / 1024 + (S2T_ASAN ? 512 * 1024 : 0);
}

#endif

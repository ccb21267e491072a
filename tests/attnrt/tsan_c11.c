/* Linked into test_concurrency in ThreadSanitizer builds only: the runtime
 * locks with C11 <threads.h>, whose glibc functions call the pthread ones
 * internally, past the sanitizer's interceptors (GCC 12's and clang 14's
 * libtsan intercept no C11 thread calls), so every lock would look like none
 * and report false races.  These definitions take the place of libc's in the
 * test program and go through the intercepted pthread calls; glibc's mtx_t
 * and once_flag are its pthread_mutex_t and pthread_once_t. */
#include <pthread.h>
#include <threads.h>

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "glibc's mtx_t is a pthread_mutex_t");
_Static_assert(sizeof(once_flag) == sizeof(pthread_once_t), "glibc's once_flag is a pthread_once_t");

int mtx_init(mtx_t *m, int type)
{
    pthread_mutexattr_t at;
    pthread_mutexattr_init(&at);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&at, PTHREAD_MUTEX_RECURSIVE);
    int r = pthread_mutex_init((pthread_mutex_t *)m, &at);
    pthread_mutexattr_destroy(&at);
    return r == 0 ? thrd_success : thrd_error;
}

int mtx_lock(mtx_t *m) { return pthread_mutex_lock((pthread_mutex_t *)m) == 0 ? thrd_success : thrd_error; }
int mtx_unlock(mtx_t *m) { return pthread_mutex_unlock((pthread_mutex_t *)m) == 0 ? thrd_success : thrd_error; }
void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }
void call_once(once_flag *flag, void (*fn)(void)) { pthread_once((pthread_once_t *)flag, fn); }

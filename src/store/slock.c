/* slock: the contended paths (see slock.h). */
#include "store/slock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* About what glibc's adaptive mutex spins before it sleeps. */
#define SPINS 100

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void
slock_lock_slow(struct slock *l)
{
    for (int i = 0; i < SPINS; i++) {
        cpu_relax();
        int free = 0;
        if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->v, &free, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
    }
    /* Marked 2 before each sleep, so the holder's unlock wakes someone;
     * taken when the exchange finds it free (then held as 2: one
     * wake-up call too many at worst, never one too few).  The wait's
     * result is not needed: EAGAIN (the value changed first), EINTR and
     * a wake-up all mean "look again". */
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        (void)syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void
slock_wake(struct slock *l)
{
    /* One sleeper: it takes the lock as 2, and its unlock wakes the next. */
    (void)syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

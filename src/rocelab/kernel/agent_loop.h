/* What the agents' C loops share: switchd's (rocelab.switch._fastpath, fastpath_core.c) and the
loop around a Python core (rocelab.kernel._loop, nicd's). What they count, as
rocelab.kernel.loop.LoopStats and Lateness do, so that both judge lateness alike; how early they
run an event and how long they sleep for the next (Loop._run_early); and how a downed port's
error is cleared. Header-only: the two are separate extensions. The part that
builds Python objects is compiled only where Python.h came first. */
#ifndef ROCELAB_AGENT_LOOP_H
#define ROCELAB_AGENT_LOOP_H

#include <errno.h>
#include <limits.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define LATE_BUCKETS 32  /* at least len(rocelab.kernel.loop.LATENESS_BOUNDS_S) + 1 */
#define ERRNO_SLOTS 160

typedef struct {
    long long rx, tx, wakeups, late[LATE_BUCKETS], tx_errors[ERRNO_SLOTS];
    double late_total, late_max;
    long long wakes[LATE_BUCKETS];  /* each wake-up's latest event (Lateness.end_wake) */
    double wake_max;  /* this wake-up's latest event so far, where wake_any */
    int wake_any;
} LoopCounts;

static inline double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int late_bucket(const double *bounds, int nbounds, double late)
{
    int i = 0;
    while (i < nbounds && bounds[i] < late) i++;  /* bisect_left, as Lateness.record */
    return i;
}

/* Wait for the descriptors of `epfd` (a wait costs what is ready, not every descriptor: a lab's
   switches have dozens of ports, a nicd three descriptors a host) until `ts`. epoll_pwait2
   (Linux 5.11) waits to the nanosecond; where the kernel or a container's seccomp profile
   refuses it, epoll_wait's milliseconds, rounded up. */
static inline int epoll_until(int epfd, struct epoll_event *ev, int nev, const struct timespec *ts)
{
    static int whole_ms;
    if (!whole_ms) {
        int r = epoll_pwait2(epfd, ev, nev, ts, NULL);
        if (r >= 0 || (errno != ENOSYS && errno != EPERM)) return r;
        whole_ms = 1;
    }
    long long ms = (long long)ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000;
    return epoll_wait(epfd, ev, nev, ms > INT_MAX ? INT_MAX : (int)ms);
}

/* Loop.run_early: the loop's clock at real time `clock` (or *ahead, where later); an event due
   within early_s of `clock` runs now, the loop's clock moved ahead to its time (never back).
   Measured from the real clock: from a clock already ahead, events each within early_s of the
   last would run ahead of the real one without end. */
static inline double run_early(double due, double clock, double *ahead, double early_s)
{
    double now = clock > *ahead ? clock : *ahead;
    if (due > now && due - clock <= early_s) *ahead = now = due;
    return now;
}

/* Loop.sleep_s: how long to sleep from real time `clock` (the loop's clock `now`, run_early's)
   for the next event `due` (INFINITY: none): until early_s before it, where run_early takes it,
   never longer than idle_s. A timed sleep here ends 13-30 µs after it was asked to (the
   timer's interrupt and the switch back, rocelab.kernel.loop's docstring): woken at the event's
   time it would run that late every time. */
static inline double sleep_s(double due, double now, double clock, double early_s, double idle_s)
{
    double wait = due > now ? due - early_s - clock : 0;
    return wait > idle_s ? idle_s : wait < 0 ? 0 : wait;
}

/* A port taken down (config interface shutdown) leaves ENETDOWN on its packet socket, and
   epoll reports EPOLLERR until someone reads it: reading SO_ERROR clears it, or the loop spins. */
static inline void clear_error(int fd)
{
    int err;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
}

/* Lateness.record */
static inline void record_late(LoopCounts *lc, const double *bounds, int nbounds, double late)
{
    lc->late[late_bucket(bounds, nbounds, late)]++;
    lc->late_total += late;
    if (late > lc->late_max) lc->late_max = late;
    if (!lc->wake_any || late > lc->wake_max) {
        lc->wake_max = late;
        lc->wake_any = 1;
    }
}

/* Lateness.end_wake: the wake-up that began at `woke` is over, its latest event into its own
   histogram, no later than the time since the one before it ended (*ended, then now). */
static inline void end_wake(LoopCounts *lc, double *ended, const double *bounds, int nbounds, double woke)
{
    if (lc->wake_any) {
        double since_last = woke - *ended;
        lc->wakes[late_bucket(bounds, nbounds, lc->wake_max < since_last ? lc->wake_max : since_last)]++;
        lc->wake_any = 0;
    }
    *ended = clock_s(CLOCK_MONOTONIC);
}

#ifdef PY_VERSION
/* (rx_frames, tx_frames, wakeups, lateness counts, total_s, max_s, {errno: n}, each wake-up's
   latest event by lateness bucket), or NULL with the exception set. */
static inline PyObject *loop_counts_tuple(const LoopCounts *lc)
{
    PyObject *late = PyList_New(LATE_BUCKETS), *wakes = PyList_New(LATE_BUCKETS), *errors = PyDict_New();
    if (!late || !wakes || !errors) goto fail;
    for (int i = 0; i < LATE_BUCKETS; i++) {
        PyObject *v = PyLong_FromLongLong(lc->late[i]), *w = v ? PyLong_FromLongLong(lc->wakes[i]) : NULL;
        if (!w) {
            Py_XDECREF(v);
            goto fail;
        }
        PyList_SET_ITEM(late, i, v);
        PyList_SET_ITEM(wakes, i, w);
    }
    for (int e = 0; e < ERRNO_SLOTS; e++) {
        if (!lc->tx_errors[e]) continue;
        PyObject *k = PyLong_FromLong(e), *v = PyLong_FromLongLong(lc->tx_errors[e]);
        int bad = !k || !v || PyDict_SetItem(errors, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) goto fail;
    }
    return Py_BuildValue("(LLLNddNN)", lc->rx, lc->tx, lc->wakeups, late, lc->late_total, lc->late_max, errors,
                         wakes);
fail:
    Py_XDECREF(late);
    Py_XDECREF(wakes);
    Py_XDECREF(errors);
    return NULL;
}
#endif

#endif

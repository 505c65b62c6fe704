/* rocelab.kernel._loop: the agents' loop (rocelab.kernel.loop.Loop) in C, around a core written
in Python (nicd's NicGroup).

Loop._wait_and_serve, _drain and _transmit, for as long as frames and timers are all there is to
do: the wait on an epoll set of the ports and the other descriptors (Loop keeps it from call to
call), the core's next event, the ring reads (TPACKET_V2, rocelab.kernel.ring), the lateness
bookkeeping and the sends, with Python entered only for the core's own calls (next_event once
per wake-up and round, receive per frame, poll per round). On this project's machines the Python
shell around a wake-up cost more than the NIC's work for a frame (README, "What a frame costs").
It hands the loop back when another descriptor (a control socket, a watcher) is readable, a
signal came, or nothing happened for idle_s; Loop.run then does what the Python loop does with
them. The Python loop stays the reference: tests/unit/test_loop.py runs both on the same rings
and compares what the core saw, what was sent and what was counted.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <linux/if_packet.h>  /* struct tpacket2_hdr, TP_STATUS_* */
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "agent_loop.h"

#define MAX_FDS 512

typedef struct { long block_bytes, per_block, slot_bytes, slots; } Geometry;

typedef struct {
    PyObject *name;  /* borrowed: the port's name, as the core knows it */
    int fd;
    Py_buffer ring;
    long head;
} RingPort;

typedef struct {
    PyObject *receive, *poll, *next_event;  /* the core's bound methods */
    int arrival;  /* the core's takes_arrival_time: receive(name, frame, now, arrival_s) */
    RingPort *ports;
    int nports;
    PyObject *fd_of;  /* {port name: fd} for the sends */
    Geometry g;
    double early_s, idle_s, ahead;
    double bounds[LATE_BUCKETS];
    int nbounds;
    long round_frames, round_bytes, drain_rounds;
    LoopCounts lc;
    double ended;  /* the monotonic clock when the last wake-up ended (Loop.ended) */
} Shell;

/* Loop.now: the monotonic clock, or the time of the last event served early if that is later. */
static double shell_now(const Shell *s)
{
    double t = clock_s(CLOCK_MONOTONIC);
    return t > s->ahead ? t : s->ahead;
}

/* core.next_event(now): 0 and *due (INFINITY for None), or -1 with the exception set. */
static int next_due(Shell *s, double now, double *due)
{
    PyObject *t = PyFloat_FromDouble(now);
    PyObject *r = t ? PyObject_CallOneArg(s->next_event, t) : NULL;
    Py_XDECREF(t);
    if (!r) return -1;
    *due = r == Py_None ? INFINITY : PyFloat_AsDouble(r);
    Py_DECREF(r);
    return *due == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* Loop._transmit: the lateness of the event that was due, then core.poll(now) and a send per
   frame; a failed send is counted by errno, never stops the loop. */
static int transmit(Shell *s, double due)
{
    double now = shell_now(s);
    if (due <= now) record_late(&s->lc, s->bounds, s->nbounds, now - due);
    PyObject *t = PyFloat_FromDouble(now);
    PyObject *out = t ? PyObject_CallOneArg(s->poll, t) : NULL;
    Py_XDECREF(t);
    PyObject *it = out ? PyObject_GetIter(out) : NULL;
    Py_XDECREF(out);
    if (!it) return -1;
    PyObject *item;
    while ((item = PyIter_Next(it))) {
        PyObject *name, *frame, *fd_obj;
        Py_buffer b;
        if (!PyArg_ParseTuple(item, "OO", &name, &frame) || !(fd_obj = PyDict_GetItemWithError(s->fd_of, name))
            || PyObject_GetBuffer(frame, &b, PyBUF_SIMPLE) < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "poll named no port of this loop: %R", name);
            Py_DECREF(item);
            Py_DECREF(it);
            return -1;
        }
        if (send((int)PyLong_AsLong(fd_obj), b.buf, (size_t)b.len, 0) < 0)
            s->lc.tx_errors[errno < ERRNO_SLOTS ? errno : 0]++;
        else
            s->lc.tx++;
        PyBuffer_Release(&b);
        Py_DECREF(item);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* RxRing.read: hand the frames from the port's head on to core.receive(name, frame, now), each
   slot given back as soon as it returns, until `round_frames` frames or at least `round_bytes`
   bytes or an empty slot; to a core that takes it, with the frame's arrival (`now` less how long
   it waited in the ring, `wall` being the epoch time at `now`). The frames read (-1: an
   exception, the slot given back all the same); *first_s is the first one's receive time (epoch
   seconds). A frame is a bytes copy: the slot is the kernel's again once receive returns. */
static long read_ring(Shell *s, RingPort *p, double now, double wall, double *first_s, int *empty)
{
    const Geometry *g = &s->g;
    unsigned char *base = p->ring.buf;
    long n = 0, nbytes = 0, h = p->head;
    *empty = 0;
    *first_s = 0.0;
    PyObject *t = PyFloat_FromDouble(now);
    if (!t) return -1;
    for (;;) {
        struct tpacket2_hdr *slot
            = (struct tpacket2_hdr *)(base + h / g->per_block * g->block_bytes + h % g->per_block * g->slot_bytes);
        if (!(__atomic_load_n(&slot->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
            *empty = 1;
            break;
        }
        if (n == s->round_frames || nbytes >= s->round_bytes) break;
        uint32_t snaplen = slot->tp_snaplen;
        double received = slot->tp_sec + slot->tp_nsec * 1e-9;
        if (!n) *first_s = received;
        if ((long)slot->tp_mac + (long)snaplen > g->slot_bytes) snaplen = 0;  /* never read past the slot */
        PyObject *frame = PyBytes_FromStringAndSize((const char *)slot + slot->tp_mac, snaplen);
        PyObject *arrival = s->arrival && frame ? PyFloat_FromDouble(wall > received ? now - (wall - received) : now)
                                                : NULL;
        PyObject *args[4] = {p->name, frame, t, arrival};
        PyObject *r = frame && (arrival || !s->arrival) ? PyObject_Vectorcall(s->receive, args, 3 + s->arrival, NULL)
                                                        : NULL;
        Py_XDECREF(frame);
        Py_XDECREF(arrival);
        Py_XDECREF(r);
        __atomic_store_n(&slot->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);  /* the kernel's again */
        n++;
        nbytes += snaplen;
        if (++h == g->slots) h = 0;
        if (!r) {
            p->head = h;
            Py_DECREF(t);
            return -1;
        }
    }
    p->head = h;
    Py_DECREF(t);
    return n;
}

/* Loop._drain: a round from each readable port in turn, the core run after every round. */
static int drain(Shell *s, int *ready, int nready, double due)
{
    int unmeasured[MAX_FDS];
    for (int j = 0; j < nready; j++) unmeasured[j] = 1;
    for (long rnd = 0; nready && rnd < s->drain_rounds; rnd++) {
        double now = shell_now(s);  /* one timestamp per round: these frames arrived together */
        double wall = s->arrival ? clock_s(CLOCK_REALTIME) : 0.0;  /* the epoch time at `now` */
        if (rnd && next_due(s, now, &due) < 0) return -1;
        for (int j = 0; j < nready;) {
            int empty;
            double first_s;
            long got = read_ring(s, &s->ports[ready[j]], now, wall, &first_s, &empty);
            if (got < 0) return -1;
            s->lc.rx += got;
            if (got && unmeasured[j]) {  /* the port's oldest frame: how long it waited to be read */
                double waited = clock_s(CLOCK_REALTIME) - first_s;
                record_late(&s->lc, s->bounds, s->nbounds, waited > 0 ? waited : 0.0);
                unmeasured[j] = 0;
            }
            if (empty) {  /* out of the round, the others keeping their order (list.remove) */
                nready--;
                memmove(&ready[j], &ready[j + 1], (size_t)(nready - j) * sizeof ready[0]);
                memmove(&unmeasured[j], &unmeasured[j + 1], (size_t)(nready - j) * sizeof unmeasured[0]);
            } else {
                j++;
            }
        }
        if (transmit(s, due) < 0) return -1;
    }
    return 0;
}

/* The ports epoll reported readable, in the ports' order (as the Python loop lists them) into
   `ready`, a socket's error cleared; the others into `others_revents`. The number of ports. */
static int ready_ports(const Shell *s, const struct epoll_event *ev, int r, const int *slot_of, int max_fd,
                       char *others_revents, int *handed_back, int *ready)
{
    int nready = 0;
    for (int e = 0; e < r; e++) {
        int fd = ev[e].data.fd, i = fd >= 0 && fd <= max_fd ? slot_of[fd] : -1;
        if (i < 0) continue;  /* not this turn's: none should be */
        if (i >= s->nports) {
            others_revents[i - s->nports] = 1;
            *handed_back = 1;
            continue;
        }
        if (ev[e].events & EPOLLERR) clear_error(s->ports[i].fd);
        if (!(ev[e].events & EPOLLIN)) continue;
        int j = nready++;
        for (; j && ready[j - 1] > i; j--) ready[j] = ready[j - 1];
        ready[j] = i;
    }
    return nready;
}

/* Wake-ups until another descriptor is readable (1), a signal's handlers ran or the loop was
   idle for idle_s (0), or an exception (-1). */
static int run(Shell *s, int epfd, const int *slot_of, int max_fd, char *others_revents)
{
    int ready[MAX_FDS];
    struct epoll_event ev[MAX_FDS];
    for (;;) {
        double clock = clock_s(CLOCK_MONOTONIC), now = clock > s->ahead ? clock : s->ahead, due;
        if (next_due(s, now, &due) < 0) return -1;
        now = run_early(due, clock, &s->ahead, s->early_s);
        double wait = sleep_s(due, now, clock, s->early_s, s->idle_s);
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        int r, err;
        Py_BEGIN_ALLOW_THREADS
        r = epoll_until(epfd, ev, MAX_FDS, &ts);
        err = errno;
        Py_END_ALLOW_THREADS
        if (r < 0) {
            if (err != EINTR) {
                errno = err;
                PyErr_SetFromErrno(PyExc_OSError);
                return -1;
            }
            return PyErr_CheckSignals() < 0 ? -1 : 0;  /* the handlers (Loop.stop) ran */
        }
        double woke = clock_s(CLOCK_MONOTONIC);
        run_early(due, woke, &s->ahead, s->early_s);  /* woken early_s before it, as asked */
        if (wait > 0) s->lc.wakeups++;  /* a sleep, and what woke it: the costly part */
        int handed_back = 0, nready = ready_ports(s, ev, r, slot_of, max_fd, others_revents, &handed_back, ready);
        if (nready ? drain(s, ready, nready, due) < 0 : transmit(s, due) < 0) return -1;
        end_wake(&s->lc, &s->ended, s->bounds, s->nbounds, woke);
        if (handed_back) return 1;
        if (!r && due == INFINITY) return 0;  /* idle: let Loop.run look at the world */
    }
}

static int parse_ports(Shell *s, PyObject *seq)
{
    s->nports = (int)PySequence_Fast_GET_SIZE(seq);
    s->ports = PyMem_Calloc((size_t)s->nports + 1, sizeof(RingPort));
    if (!s->ports) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < s->nports; i++) {
        RingPort *p = &s->ports[i];
        PyObject *ring;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "OiOl", &p->name, &p->fd, &ring, &p->head))
            return -1;
        if (PyObject_GetBuffer(ring, &p->ring, PyBUF_WRITABLE) < 0) {
            p->ring.obj = NULL;
            return -1;
        }
        const Geometry *g = &s->g;
        long last = g->slots - 1;
        if (g->slots <= 0 || g->per_block <= 0 || g->slot_bytes < (long)sizeof(struct tpacket2_hdr)
            || last / g->per_block * g->block_bytes + last % g->per_block * g->slot_bytes + g->slot_bytes
                   > (long)p->ring.len
            || p->head < 0 || p->head >= g->slots) {
            PyErr_SetString(PyExc_ValueError, "serve: the geometry does not fit a port's ring");
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(serve_doc,
"serve(core, ports, others, epoll_fd, geometry, early_s, idle_s, ahead, ended, bounds, round_frames, round_bytes,\n"
"drain_rounds)\n"
"-> (readable others, ring heads, ahead, ended, (rx, tx, wakeups, lateness counts, total_s, max_s, {errno: n},\n"
"each wake-up's latest event by lateness bucket))\n\n"
"Loop._wait_and_serve's wake-ups around `core` (receive, poll, next_event), `ports` a sequence of\n"
"(name, fd, ring mmap, head), until one of `others` is readable, a signal's handlers ran or the\n"
"loop was idle for idle_s. `epoll_fd`: an epoll set holding the ports' and the others' descriptors\n"
"for EPOLLIN, each under its own number (select.epoll's register), kept by the caller from call to call.");

static PyObject *serve(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *core, *ports, *others, *bounds;
    Shell s = {0};
    int epfd;
    if (!PyArg_ParseTuple(args, "OOOi(llll)ddddOlll", &core, &ports, &others, &epfd, &s.g.block_bytes,
                          &s.g.per_block, &s.g.slot_bytes, &s.g.slots, &s.early_s, &s.idle_s, &s.ahead, &s.ended,
                          &bounds, &s.round_frames, &s.round_bytes, &s.drain_rounds))
        return NULL;
    PyObject *pseq = NULL, *oseq = NULL, *bseq = NULL, *result = NULL;
    int *other_fds = NULL, *slot_of = NULL, max_fd = -1;
    char *others_revents = NULL;
    s.receive = PyObject_GetAttrString(core, "receive");
    if (s.receive) {
        PyObject *takes = PyObject_GetAttrString(core, "takes_arrival_time");
        if (takes) {
            s.arrival = PyObject_IsTrue(takes);
            Py_DECREF(takes);
            if (s.arrival < 0) goto out;
        } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();  /* a core without it (nicd's) takes (name, frame, now) */
        } else {
            goto out;
        }
    }
    s.poll = s.receive ? PyObject_GetAttrString(core, "poll") : NULL;
    s.next_event = s.poll ? PyObject_GetAttrString(core, "next_event") : NULL;
    s.fd_of = PyDict_New();
    if (!s.next_event || !s.fd_of) goto out;
    if (!(pseq = PySequence_Fast(ports, "serve: ports must be a sequence"))
        || !(oseq = PySequence_Fast(others, "serve: others must be a sequence"))
        || !(bseq = PySequence_Fast(bounds, "serve: bounds must be a sequence")))
        goto out;
    int nothers = (int)PySequence_Fast_GET_SIZE(oseq);
    s.nbounds = (int)PySequence_Fast_GET_SIZE(bseq);
    if (PySequence_Fast_GET_SIZE(pseq) + nothers > MAX_FDS || s.nbounds >= LATE_BUCKETS) {
        PyErr_Format(PyExc_ValueError, "serve: at most %d descriptors and %d lateness bounds", MAX_FDS,
                     LATE_BUCKETS - 1);
        goto out;
    }
    for (int i = 0; i < s.nbounds; i++) {
        s.bounds[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(bseq, i));
        if (s.bounds[i] == -1.0 && PyErr_Occurred()) goto out;
    }
    if (parse_ports(&s, pseq) < 0) goto out;
    other_fds = PyMem_Calloc((size_t)nothers + 1, sizeof(int));
    others_revents = PyMem_Calloc((size_t)nothers + 1, 1);
    if (!other_fds || !others_revents) {
        PyErr_NoMemory();
        goto out;
    }
    for (int i = 0; i < nothers; i++) {
        other_fds[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(oseq, i));
        if (other_fds[i] == -1 && PyErr_Occurred()) goto out;
        if (other_fds[i] > max_fd) max_fd = other_fds[i];
    }
    for (int i = 0; i < s.nports; i++)
        if (s.ports[i].fd > max_fd) max_fd = s.ports[i].fd;
    /* what epoll reports is a descriptor's number: its port, or nports + its place among the others */
    if (!(slot_of = PyMem_Malloc(((size_t)max_fd + 2) * sizeof(int)))) {
        PyErr_NoMemory();
        goto out;
    }
    for (int fd = 0; fd <= max_fd; fd++) slot_of[fd] = -1;
    for (int i = 0; i < s.nports + nothers; i++) {
        int fd = i < s.nports ? s.ports[i].fd : other_fds[i - s.nports];
        if (fd < 0) {
            PyErr_SetString(PyExc_ValueError, "serve: a descriptor below 0");
            goto out;
        }
        slot_of[fd] = i;
    }
    for (int i = 0; i < s.nports; i++) {
        PyObject *fd = PyLong_FromLong(s.ports[i].fd);
        int bad = !fd || PyDict_SetItem(s.fd_of, s.ports[i].name, fd) < 0;
        Py_XDECREF(fd);
        if (bad) goto out;
    }
    if (run(&s, epfd, slot_of, max_fd, others_revents) < 0) goto out;
    PyObject *readable = PyList_New(0), *heads = PyList_New(s.nports), *counted = loop_counts_tuple(&s.lc);
    for (int i = 0; readable && heads && i < s.nports; i++) {
        PyObject *h = PyLong_FromLong(s.ports[i].head);
        if (!h) Py_CLEAR(heads);
        else PyList_SET_ITEM(heads, i, h);
    }
    for (int i = 0; readable && i < nothers; i++) {
        if (!others_revents[i]) continue;
        PyObject *fd = PyLong_FromLong(other_fds[i]);
        if (!fd || PyList_Append(readable, fd) < 0) Py_CLEAR(readable);
        Py_XDECREF(fd);
    }
    if (readable && heads && counted) {
        result = Py_BuildValue("NNddN", readable, heads, s.ahead, s.ended, counted);
    } else {
        Py_XDECREF(readable);
        Py_XDECREF(heads);
        Py_XDECREF(counted);
    }
out:
    for (int i = 0; s.ports && i < s.nports; i++)
        if (s.ports[i].ring.obj) PyBuffer_Release(&s.ports[i].ring);
    PyMem_Free(s.ports);
    PyMem_Free(other_fds);
    PyMem_Free(slot_of);
    PyMem_Free(others_revents);
    Py_XDECREF(s.receive);
    Py_XDECREF(s.poll);
    Py_XDECREF(s.next_event);
    Py_XDECREF(s.fd_of);
    Py_XDECREF(pseq);
    Py_XDECREF(oseq);
    Py_XDECREF(bseq);
    return result;
}

static PyMethodDef methods[] = {
    {"serve", serve, METH_VARARGS, serve_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef loop_module = {
    PyModuleDef_HEAD_INIT, "rocelab.kernel._loop",
    "The agents' loop around a Python core, in C: rocelab.kernel.loop's fast path, held to it by tests.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__loop(void)
{
    return PyModule_Create(&loop_module);
}

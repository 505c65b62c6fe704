/* rocelab.switch._fastpath: the CPython binding of the C switch core (fastpath_core.c).

What stays in Python (rocelab.switch.fastpath.FastSwitch): building the switch from a QoS
profile (the reference Switch's own objects are read here once, through the attribute tables
below), routing a flow the cache has not seen, and the counters' JSON (this binding writes the
core's state back into those objects and the reference formats it). This file holds no
pipeline logic: it fills the core's structs, hands the core its Host (frames are bytes objects,
the random draws and routes are the reference's) and turns the core's errors into exceptions.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "fastpath_core.h"

typedef struct {
    PyObject_HEAD
    Core core;
    PyObject *ports, *pools, *trapped, *rng_random, *rng_uniform;  /* the reference's (the switch and rng tables) */
    PyObject *reference;  /* its _groups are read at each load: set_fib replaces them */
    PyObject *port_index, *reasons;
    long long trap_max;
} Asic;

static PyTypeObject AsicType;

/* ---- the attribute tables: one per kind of object --------------------------------------
Every attribute of the reference's objects this binding reads, in one table per kind: its path
(dotted into a sub-object), how it maps to the core's struct, and its role: structure (read
once, when the switch is built), config (read then and after every control call that changes
the reference) or state (read then, and written back by _store). An entry with a guard is read
only where the guard's flag is set (a queue's WRED and watchdog, when it has them). A missing
attribute or a value of the wrong kind fails the construction, naming the kind and the path. */

enum { STATE, CONFIG, STRUCTURE };
enum {
    F_LL, F_D, F_OPT_D, F_BOOL, F_LL8, F_D8, F_DROPS,  /* numbers and the drops: config or state */
    F_OBJECT,      /* kept as a reference (PyObject *) */
    F_MAC,         /* 6 bytes */
    F_FRAME,       /* bytes: a Frame the core sends as it is */
    F_PRIORITIES,  /* a sequence of at most PRIO priorities 0..PRIO-1: pri[] and its count */
    F_PRIORITY_SET,  /* a container of priorities: a bitmask */
    F_QUEUE_MAP,   /* priority -> queue index 0..PRIO-1, for every priority */
    F_POOL,        /* a pool of the switch's, or None */
    F_PRESENT,     /* a sub-object, or None: a flag */
    F_SCHEDULER,   /* a SCHEDULER type this core serves */
    F_WD_ACTION,   /* a PFC watchdog action */
    F_CHILDREN,    /* a sequence of PRIO objects: the host of each PG or queue of a port */
    F_BALANCE_MODE,  /* a load-balancing mode this core serves */
};
#define NO_GUARD ((size_t)-1)

typedef struct {
    const char *path;
    int type, role;
    size_t offset, aux /* F_PRIORITIES: the count; F_CHILDREN: the stride */, guard;
} Field;

#define ENTRY(T, path, type, member, role) {path, type, role, offsetof(T, member), 0, NO_GUARD}
#define GUARDED(T, path, type, member, role, flag) {path, type, role, offsetof(T, member), 0, offsetof(T, flag)}
#define SHARED_FIELDS(T) \
    ENTRY(T, "pool", F_POOL, s.pool, STRUCTURE), \
    ENTRY(T, "reserved_bytes", F_LL, s.reserved, CONFIG), \
    ENTRY(T, "alpha", F_OPT_D, s.alpha, CONFIG), \
    ENTRY(T, "static_th_bytes", F_LL, s.static_th, CONFIG), \
    ENTRY(T, "reserved_used_bytes", F_LL, s.reserved_used, STATE), \
    ENTRY(T, "shared_used_bytes", F_LL, s.shared_used, STATE), \
    ENTRY(T, "shared_watermark_bytes", F_LL, s.shared_wm, STATE)
#define END {NULL, 0, 0, 0, 0, NO_GUARD}

static const Field SWITCH_FIELDS[] = {  /* rocelab.switch.pipeline.Switch */
    ENTRY(Asic, "_ports", F_OBJECT, ports, STRUCTURE),
    ENTRY(Asic, "_pools", F_OBJECT, pools, STRUCTURE),
    ENTRY(Asic, "trapped", F_OBJECT, trapped, STRUCTURE),
    END,
};

static const Field RNG_FIELDS[] = {  /* random.Random: the reference's draws, in its order */
    ENTRY(Asic, "random", F_OBJECT, rng_random, STRUCTURE),
    ENTRY(Asic, "uniform", F_OBJECT, rng_uniform, STRUCTURE),
    END,
};

static const Field POOL_FIELDS[] = {  /* rocelab.switch.mmu.Pool */
    ENTRY(Pool, "size_bytes", F_LL, size, CONFIG),
    ENTRY(Pool, "headroom_size_bytes", F_LL, headroom_size, CONFIG),  /* None: no shared headroom */
    ENTRY(Pool, "shared_used_bytes", F_LL, shared_used, STATE),
    ENTRY(Pool, "headroom_used_bytes", F_LL, headroom_used, STATE),
    END,
};

static const Field PG_FIELDS[] = {  /* rocelab.switch.pipeline._Pg */
    SHARED_FIELDS(Pg),
    {"priorities", F_PRIORITIES, STRUCTURE, offsetof(Pg, pri), offsetof(Pg, npri), NO_GUARD},
    ENTRY(Pg, "xoff_frame", F_FRAME, xoff_frame, STRUCTURE),
    ENTRY(Pg, "xon_frame", F_FRAME, xon_frame, STRUCTURE),
    ENTRY(Pg, "headroom_bytes", F_LL, headroom, CONFIG),
    ENTRY(Pg, "xon_bytes", F_LL, xon, CONFIG),
    ENTRY(Pg, "xon_offset_bytes", F_LL, xon_offset, CONFIG),
    ENTRY(Pg, "lossless", F_BOOL, lossless, CONFIG),
    ENTRY(Pg, "headroom_used_bytes", F_LL, headroom_used, STATE),
    ENTRY(Pg, "headroom_watermark_bytes", F_LL, headroom_wm, STATE),
    ENTRY(Pg, "held_used_bytes", F_LL, held_used, STATE),
    ENTRY(Pg, "xoff_active", F_BOOL, xoff_active, STATE),
    ENTRY(Pg, "refresh_at_s", F_D, refresh_at, STATE),
    ENTRY(Pg, "xoff_due_s", F_D, xoff_due, STATE),
    ENTRY(Pg, "xoff_left_s", F_D, xoff_left, STATE),
    ENTRY(Pg, "rx_packets", F_LL, rx_packets, STATE),
    ENTRY(Pg, "rx_bytes", F_LL, rx_bytes, STATE),
    ENTRY(Pg, "held_packets", F_LL, held_packets, STATE),
    ENTRY(Pg, "held_bytes", F_LL, held_bytes, STATE),
    ENTRY(Pg, "drops", F_DROPS, drops, STATE),
    END,
};

static const Field QUEUE_FIELDS[] = {  /* rocelab.switch.pipeline._Queue, its Wred and QueueWatchdog */
    SHARED_FIELDS(Queue),
    {"priorities", F_PRIORITIES, STRUCTURE, offsetof(Queue, pri), offsetof(Queue, npri), NO_GUARD},
    ENTRY(Queue, "scheduler_type", F_SCHEDULER, scheduler, STRUCTURE),
    ENTRY(Queue, "wred", F_PRESENT, has_wred, STRUCTURE),
    ENTRY(Queue, "watchdog", F_PRESENT, has_wd, STRUCTURE),
    GUARDED(Queue, "watchdog.action", F_WD_ACTION, wd_action, STRUCTURE, has_wd),
    ENTRY(Queue, "quantum_bytes", F_LL, quantum, CONFIG),
    ENTRY(Queue, "depth_bytes", F_LL, depth, STATE),
    ENTRY(Queue, "watermark_bytes", F_LL, wm, STATE),
    ENTRY(Queue, "paused_until_s", F_D, paused_until, STATE),
    ENTRY(Queue, "deficit_bytes", F_LL, deficit, STATE),
    ENTRY(Queue, "dropping", F_BOOL, dropping, STATE),
    ENTRY(Queue, "tx_packets", F_LL, tx_packets, STATE),
    ENTRY(Queue, "tx_bytes", F_LL, tx_bytes, STATE),
    ENTRY(Queue, "ecn_marked_packets", F_LL, ecn_packets, STATE),
    ENTRY(Queue, "ecn_marked_bytes", F_LL, ecn_bytes, STATE),
    ENTRY(Queue, "drops", F_DROPS, drops, STATE),
    GUARDED(Queue, "wred.min_bytes", F_LL, wred_min, CONFIG, has_wred),
    GUARDED(Queue, "wred.max_bytes", F_LL, wred_max, CONFIG, has_wred),
    GUARDED(Queue, "wred.slope_per_byte", F_D, wred_slope, CONFIG, has_wred),
    GUARDED(Queue, "wred.marks", F_BOOL, wred_marks, CONFIG, has_wred),
    GUARDED(Queue, "wred.drops", F_BOOL, wred_drops, CONFIG, has_wred),
    GUARDED(Queue, "watchdog.detection_s", F_D, wd_detect, CONFIG, has_wd),
    GUARDED(Queue, "watchdog.restoration_s", F_D, wd_restore, CONFIG, has_wd),
    GUARDED(Queue, "watchdog.paused_since_s", F_OPT_D, wd_since, STATE, has_wd),
    GUARDED(Queue, "watchdog.last_pause_s", F_D, wd_last_pause, STATE, has_wd),
    GUARDED(Queue, "watchdog.stormed", F_BOOL, wd_stormed, STATE, has_wd),
    GUARDED(Queue, "watchdog.storms_detected", F_LL, wd_detected, STATE, has_wd),
    GUARDED(Queue, "watchdog.storms_restored", F_LL, wd_restored, STATE, has_wd),
    END,
};

static const Field PORT_FIELDS[] = {  /* rocelab.switch.pipeline._Port */
    ENTRY(Port, "name", F_OBJECT, host_name, STRUCTURE),
    ENTRY(Port, "mac", F_MAC, mac, STRUCTURE),
    ENTRY(Port, "pfc_enable", F_PRIORITY_SET, pfc_enable, STRUCTURE),
    ENTRY(Port, "qos.pfc_priority_to_queue", F_QUEUE_MAP, pfc_to_queue, STRUCTURE),
    {"pgs", F_CHILDREN, STRUCTURE, offsetof(Port, pgs[0].host), sizeof(Pg), NO_GUARD},
    {"queues", F_CHILDREN, STRUCTURE, offsetof(Port, queues[0].host), sizeof(Queue), NO_GUARD},
    ENTRY(Port, "rate_bps", F_D, rate, CONFIG),
    ENTRY(Port, "global_flow_control_rx", F_BOOL, flow_control_rx, CONFIG),
    ENTRY(Port, "pfc_refresh_s", F_D, pfc_refresh_s, CONFIG),
    ENTRY(Port, "bucket.s_per_byte", F_D, s_per_byte, CONFIG),
    ENTRY(Port, "bucket.burst_s", F_D, burst_s, CONFIG),
    ENTRY(Port, "link.delay_s", F_D, delay, CONFIG),
    ENTRY(Port, "link.jitter_s", F_D, jitter, CONFIG),
    ENTRY(Port, "link.loss_probability", F_D, loss, CONFIG),
    ENTRY(Port, "bucket.busy_until_s", F_D, busy_until, STATE),
    ENTRY(Port, "link.last_release_s", F_D, last_release, STATE),
    ENTRY(Port, "backlog_packets", F_LL, backlog, STATE),
    ENTRY(Port, "next_tx_s", F_D, next_tx, STATE),
    ENTRY(Port, "link_paused_until_s", F_D, link_paused_until, STATE),
    ENTRY(Port, "pause_rx_frames", F_LL, pause_rx, STATE),
    ENTRY(Port, "rx_packets", F_LL, rx_packets, STATE),
    ENTRY(Port, "rx_bytes", F_LL, rx_bytes, STATE),
    ENTRY(Port, "pfc_rx_frames", F_LL8, pfc_rx, STATE),
    ENTRY(Port, "pfc_tx_frames", F_LL8, pfc_tx, STATE),
    ENTRY(Port, "pause.until_s", F_D8, until, STATE),
    ENTRY(Port, "pause.started_s", F_D8, started, STATE),
    ENTRY(Port, "pause.closed_s", F_D8, closed, STATE),
    ENTRY(Port, "drops", F_DROPS, drops, STATE),
    END,
};

/* An ECMP group under a mode other than hash: its flowset table (_last_s, _member, _flow, max_flows entries each),
   its members' ports and MACs (from the group's key in the reference's _groups) and each
   member's TC → queue map are read and written by load_group and store_group. */
static const Field GROUP_FIELDS[] = {  /* rocelab.switch.balance.EcmpGroup and its Balance */
    ENTRY(Group, "balance.mode", F_BALANCE_MODE, mode, STRUCTURE),
    ENTRY(Group, "balance.max_flows", F_LL, max_flows, STRUCTURE),
    ENTRY(Group, "balance.flowlet_idle_time_s", F_D, idle_s, CONFIG),
    ENTRY(Group, "balance.sampling_interval_s", F_D, sampling_s, CONFIG),
    ENTRY(Group, "balance.load_weight", F_LL, load_weight, CONFIG),
    ENTRY(Group, "balance.queue_weight", F_LL, queue_weight, CONFIG),
    ENTRY(Group, "reassignments", F_LL, reassignments, STATE),
    ENTRY(Group, "collisions", F_LL, collisions, STATE),
    END,
};

static const Field MEMBER_FIELDS[] = {  /* rocelab.switch.balance.Member */
    ENTRY(GroupMember, "frames", F_LL, frames, STATE),
    ENTRY(GroupMember, "bytes", F_LL, bytes, STATE),
    ENTRY(GroupMember, "load", F_D, load, STATE),
    ENTRY(GroupMember, "sampled_s", F_OPT_D, sampled_s, STATE),
    ENTRY(GroupMember, "sampled_tx_bytes", F_LL, sampled_tx, STATE),
    END,
};

static const struct { const char *kind; const Field *fields; } TABLES[] = {
    {"switch", SWITCH_FIELDS}, {"rng", RNG_FIELDS}, {"pool", POOL_FIELDS}, {"port", PORT_FIELDS},
    {"pg", PG_FIELDS}, {"queue", QUEUE_FIELDS}, {"group", GROUP_FIELDS}, {"member", MEMBER_FIELDS},
};

/* The error being raised, its message prefixed with the kind and path the core reads. */
static void name_field(const char *kind, const Field *f)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyErr_Format(type ? type : PyExc_SystemError, "rocelab.switch._fastpath reads %s.%s: %S", kind, f->path,
                 value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* obj.<path>, dotted: a new reference. */
static PyObject *get_path(PyObject *obj, const char *path)
{
    Py_INCREF(obj);
    for (const char *at = path, *dot;; at = dot + 1) {
        dot = strchr(at, '.');
        PyObject *name = dot ? PyUnicode_FromStringAndSize(at, dot - at) : PyUnicode_FromString(at);
        if (!name) {
            Py_DECREF(obj);
            return NULL;
        }
        Py_SETREF(obj, PyObject_GetAttr(obj, name));
        Py_DECREF(name);
        if (!obj || !dot) return obj;
    }
}

static int reason_index(Asic *self, PyObject *name)
{
    Py_ssize_t n = PyTuple_GET_SIZE(self->reasons);
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(self->reasons, i), name, Py_EQ);
        if (eq < 0) return -1;
        if (eq) return (int)i;
    }
    PyErr_Format(PyExc_ValueError, "unknown drop reason %R (this core's: rocelab.switch._fastpath.REASONS)", name);
    return -1;
}

static int load_drops(Asic *self, PyObject *drops, Drops *d)
{
    if (!PyDict_Check(drops)) {
        PyErr_SetString(PyExc_TypeError, "{reason: [packets, bytes]} expected");
        return -1;
    }
    memset(d, 0, sizeof *d);
    PyObject *reason, *entry;
    Py_ssize_t pos = 0;
    while (PyDict_Next(drops, &pos, &reason, &entry)) {
        int i = reason_index(self, reason);
        if (i < 0) return -1;
        if (!PyList_Check(entry) || PyList_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "[packets, bytes] expected");
            return -1;
        }
        d->n[i] = PyLong_AsLongLong(PyList_GET_ITEM(entry, 0));
        d->b[i] = PyLong_AsLongLong(PyList_GET_ITEM(entry, 1));
        if (PyErr_Occurred()) return -1;
    }
    return 0;
}

static PyObject *drops_dict(Asic *self, const Drops *d)
{
    PyObject *drops = PyDict_New();
    for (int i = 0; drops && i < NREASONS; i++) {
        if (!d->n[i]) continue;
        PyObject *entry = Py_BuildValue("[LL]", d->n[i], d->b[i]);
        if (!entry || PyDict_SetItem(drops, PyTuple_GET_ITEM(self->reasons, i), entry) < 0) Py_CLEAR(drops);
        Py_XDECREF(entry);
    }
    return drops;
}

static int priority(PyObject *item, const char *what)
{
    long v = PyLong_AsLong(item);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v >= PRIO) {
        PyErr_Format(PyExc_ValueError, "%s %ld is not one of 0..%d", what, v, PRIO - 1);
        return -1;
    }
    return (int)v;
}

static int find_name(PyObject *v, const char *const *names, const char *what)
{
    for (int i = 0; names[i]; i++)
        if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, names[i]) == 0) return i;
    PyErr_Format(PyExc_NotImplementedError, "%s %R", what, v);
    return -1;
}

/* One attribute's value into the struct at `base`. */
static int read_value(Asic *self, Core *c, const Field *f, PyObject *v, char *at, char *base)
{
    switch (f->type) {
    case F_LL: *(long long *)at = v == Py_None ? 0 : PyLong_AsLongLong(v); break;
    case F_D: *(double *)at = PyFloat_AsDouble(v); break;
    case F_OPT_D: *(double *)at = v == Py_None ? NAN : PyFloat_AsDouble(v); break;
    case F_BOOL: {
        int b = PyObject_IsTrue(v);
        if (b < 0) return -1;
        *(int *)at = b;
        break;
    }
    case F_LL8:
    case F_D8:
        if (!PyList_Check(v) || PyList_GET_SIZE(v) != PRIO) {
            PyErr_Format(PyExc_TypeError, "a list of %d expected", PRIO);
            return -1;
        }
        for (int i = 0; i < PRIO; i++) {
            PyObject *item = PyList_GET_ITEM(v, i);
            if (f->type == F_LL8) ((long long *)at)[i] = PyLong_AsLongLong(item);
            else ((double *)at)[i] = PyFloat_AsDouble(item);
        }
        break;
    case F_DROPS: return load_drops(self, v, (Drops *)at);
    case F_OBJECT: Py_XSETREF(*(PyObject **)at, Py_NewRef(v)); break;
    case F_MAC:
        if (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) != 6) {
            PyErr_SetString(PyExc_TypeError, "6 bytes expected");
            return -1;
        }
        memcpy(at, PyBytes_AS_STRING(v), 6);
        break;
    case F_FRAME: {
        if (!PyBytes_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "bytes expected");
            return -1;
        }
        Frame *frame = (Frame *)at;
        Py_XDECREF((PyObject *)frame->ref);
        frame->ref = (FpFrameRef *)Py_NewRef(v);
        frame->data = (const unsigned char *)PyBytes_AS_STRING(v);
        frame->size = PyBytes_GET_SIZE(v);
        break;
    }
    case F_PRIORITIES: {  /* never more than PRIO copied, never one outside 0..PRIO-1 */
        PyObject *fast = PySequence_Fast(v, "a sequence of priorities expected");
        if (!fast) return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
        int bad = n > PRIO;
        if (bad) PyErr_Format(PyExc_ValueError, "%zd priorities: at most %d expected", n, PRIO);
        for (Py_ssize_t i = 0; !bad && i < n; i++) {
            int p = priority(PySequence_Fast_GET_ITEM(fast, i), "priority");
            bad = p < 0;
            ((int *)at)[i] = p;
        }
        Py_DECREF(fast);
        if (bad) return -1;
        *(int *)(base + f->aux) = (int)n;
        break;
    }
    case F_PRIORITY_SET:
        *(int *)at = 0;
        for (int p = 0; p < PRIO; p++) {
            PyObject *key = PyLong_FromLong(p);
            int in = key ? PySequence_Contains(v, key) : -1;
            Py_XDECREF(key);
            if (in < 0) return -1;
            if (in) *(int *)at |= 1 << p;
        }
        break;
    case F_QUEUE_MAP:
        for (int p = 0; p < PRIO; p++) {
            PyObject *key = PyLong_FromLong(p);
            PyObject *q = key ? PyObject_GetItem(v, key) : NULL;
            Py_XDECREF(key);
            int index = q ? priority(q, "queue") : -1;
            Py_XDECREF(q);
            if (index < 0) return -1;
            ((int *)at)[p] = index;
        }
        break;
    case F_POOL: {
        Pool *pool = NULL;
        for (int i = 0; i < c->npools; i++)
            if (c->pools[i].host == (void *)v) pool = &c->pools[i];
        if (v != Py_None && !pool) {
            PyErr_SetString(PyExc_ValueError, "a buffer pool outside the switch's pools");
            return -1;
        }
        *(Pool **)at = pool;
        break;
    }
    case F_PRESENT: *(int *)at = v != Py_None; break;
    case F_SCHEDULER: {
        int i = find_name(v, SCHEDULER_NAMES, "scheduler type");
        if (i < 0) return -1;
        *(int *)at = i;
        break;
    }
    case F_WD_ACTION: {
        int i = find_name(v, WD_ACTION_NAMES, "PFC watchdog action");
        if (i < 0) return -1;
        *(int *)at = i;
        break;
    }
    case F_BALANCE_MODE: {
        int i = find_name(v, BALANCE_MODE_NAMES, "load-balancing mode");
        if (i < 0) return -1;
        *(int *)at = i;
        break;
    }
    case F_CHILDREN: {
        if (PySequence_Size(v) != PRIO) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%d expected", PRIO);
            return -1;
        }
        for (int k = 0; k < PRIO; k++) {
            PyObject *child = PySequence_GetItem(v, k);
            if (!child) return -1;
            Py_XSETREF(*(PyObject **)(at + (size_t)k * f->aux), child);
        }
        break;
    }
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* The fields of `table` whose role is at least `from` (STATE: all; CONFIG: config and
   structure; ...), read from `obj` into `base`. */
static int read_fields(Asic *self, PyObject *obj, const char *kind, const Field *table, void *base, int roles)
{
    for (const Field *f = table; f->path; f++) {
        if (!(roles >> f->role & 1)) continue;
        if (f->guard != NO_GUARD && !*(int *)((char *)base + f->guard)) continue;
        PyObject *v = get_path(obj, f->path);
        int r = v ? read_value(self, &self->core, f, v, (char *)base + f->offset, base) : -1;
        Py_XDECREF(v);
        if (r < 0) {
            name_field(kind, f);
            return -1;
        }
    }
    return 0;
}

/* The state fields of `table`, from `base` into `obj`. */
static int store_fields(Asic *self, PyObject *obj, const char *kind, const Field *table, const void *base)
{
    for (const Field *f = table; f->path; f++) {
        if (f->role != STATE || (f->guard != NO_GUARD && !*(const int *)((const char *)base + f->guard))) continue;
        const char *at = (const char *)base + f->offset;
        PyObject *v = NULL;
        switch (f->type) {
        case F_LL: v = PyLong_FromLongLong(*(const long long *)at); break;
        case F_D: v = PyFloat_FromDouble(*(const double *)at); break;
        case F_OPT_D: {
            double d = *(const double *)at;
            v = isnan(d) ? Py_NewRef(Py_None) : PyFloat_FromDouble(d);
            break;
        }
        case F_BOOL: v = PyBool_FromLong(*(const int *)at); break;
        case F_DROPS: v = drops_dict(self, (const Drops *)at); break;
        case F_LL8:
        case F_D8:
            v = PyList_New(PRIO);
            for (int i = 0; v && i < PRIO; i++) {
                PyObject *item = f->type == F_LL8 ? PyLong_FromLongLong(((const long long *)at)[i])
                                                  : PyFloat_FromDouble(((const double *)at)[i]);
                if (!item) Py_CLEAR(v);
                else PyList_SET_ITEM(v, i, item);
            }
            break;
        default:
            PyErr_Format(PyExc_SystemError, "%s.%s: state of a kind _store cannot write", kind, f->path);
        }
        if (!v) return -1;
        const char *dot = strrchr(f->path, '.');
        PyObject *holder = obj;
        if (dot) {  /* "bucket.busy_until_s": set on obj.bucket */
            char *parent = PyMem_Malloc((size_t)(dot - f->path) + 1);
            if (!parent) {
                Py_DECREF(v);
                PyErr_NoMemory();
                return -1;
            }
            memcpy(parent, f->path, (size_t)(dot - f->path));
            parent[dot - f->path] = 0;
            holder = get_path(obj, parent);
            PyMem_Free(parent);
        } else {
            Py_INCREF(holder);
        }
        int r = holder ? PyObject_SetAttrString(holder, dot ? dot + 1 : f->path, v) : -1;
        Py_XDECREF(holder);
        Py_DECREF(v);
        if (r < 0) {
            name_field(kind, f);
            return -1;
        }
    }
    return 0;
}

#define BUILD (1 << STRUCTURE | 1 << CONFIG | 1 << STATE)
#define RELOAD (1 << CONFIG | 1 << STATE)

static int port_of(Asic *self, PyObject *name);
static void *core_error(Core *c);

/* A list of `n` numbers into doubles, ints or long longs. */
static int read_list(PyObject *v, Py_ssize_t n, char kind, void *out)
{
    if (!PyList_Check(v) || PyList_GET_SIZE(v) != n) {
        PyErr_Format(PyExc_TypeError, "a list of %zd expected", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(v, i);
        if (kind == 'd') ((double *)out)[i] = PyFloat_AsDouble(item);
        else if (kind == 'i') ((int *)out)[i] = (int)PyLong_AsLong(item);
        else ((long long *)out)[i] = PyLong_AsLongLong(item);
    }
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *list_of(Py_ssize_t n, char kind, const void *in)
{
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) {
        PyObject *item = kind == 'd' ? PyFloat_FromDouble(((const double *)in)[i])
                         : kind == 'i' ? PyLong_FromLong(((const int *)in)[i])
                                       : PyLong_FromLongLong(((const long long *)in)[i]);
        if (!item) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static const char *const FLOWSET[] = {"_last_s", "_member", "_flow"};
static const char FLOWSET_KIND[] = "dil";

/* One group of the reference's _groups: `hops` its key ((port name, next-hop MAC), ...), `obj`
   the EcmpGroup. */
static int load_group(Asic *self, Group *g, PyObject *hops, PyObject *obj)
{
    Core *c = &self->core;
    g->host = Py_NewRef(obj);
    PyObject *members = PyObject_GetAttrString(obj, "members");
    Py_ssize_t n = members ? PySequence_Size(members) : -1;
    int r = n >= 1 && PyTuple_Check(hops) && PyTuple_GET_SIZE(hops) == n ? 0 : -1;
    if (r < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an ECMP group's members and next hops differ");
    if (r == 0) r = read_fields(self, obj, "group", GROUP_FIELDS, g, BUILD);
    if (r == 0 && g->max_flows < 1) {
        PyErr_SetString(PyExc_ValueError, "an ECMP group's max_flows must be at least 1");
        r = -1;
    }
    if (r == 0 && fp_alloc_group(c, g, (int)n, g->max_flows) < 0) {
        core_error(c);
        r = -1;
    }
    void *tables[] = {g->last_s, g->member, g->flow};
    for (int t = 0; r == 0 && t < 3; t++) {
        PyObject *v = PyObject_GetAttrString(obj, FLOWSET[t]);
        r = v ? read_list(v, (Py_ssize_t)g->max_flows, FLOWSET_KIND[t], tables[t]) : -1;
        Py_XDECREF(v);
    }
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
        GroupMember *m = &g->members[i];
        PyObject *member = PySequence_GetItem(members, i);
        PyObject *hop = PyTuple_GET_ITEM(hops, i), *mac = NULL;
        r = member ? read_fields(self, member, "member", MEMBER_FIELDS, m, BUILD) : -1;
        if (r == 0 && !(PyTuple_Check(hop) && PyTuple_GET_SIZE(hop) == 2 && PyBytes_Check(mac = PyTuple_GET_ITEM(hop, 1))
                        && PyBytes_GET_SIZE(mac) == 6)) {
            PyErr_SetString(PyExc_ValueError, "an ECMP group's next hop: (port name, 6 bytes of MAC) expected");
            r = -1;
        }
        if (r == 0 && (m->port = port_of(self, PyTuple_GET_ITEM(hop, 0))) < 0) r = -1;
        if (r == 0) {
            memcpy(m->macs, PyBytes_AS_STRING(mac), 6);
            memcpy(m->macs + 6, c->ports[m->port].mac, 6);
        }
        PyObject *map = r == 0 ? get_path(member, "port.qos.tc_to_queue") : NULL;
        for (int tc = 0; r == 0 && tc < NTC; tc++) {
            PyObject *q = map ? PySequence_GetItem(map, tc) : NULL;
            m->queue_of_tc[tc] = q ? priority(q, "queue") : -1;
            Py_XDECREF(q);
            if (m->queue_of_tc[tc] < 0) r = -1;
        }
        Py_XDECREF(map);
        Py_XDECREF(member);
    }
    Py_XDECREF(members);
    return r;
}

/* No groups: what a failed load leaves, so a flow routed to a group is refused (host_resolve)
   rather than steered to one half built. */
static void drop_groups(Core *c)
{
    for (int i = 0; c->groups && i < c->ngroups; i++) Py_CLEAR(c->groups[i].host);
    if (c->groups) fp_alloc_groups(c, 0);
}

/* The reference's ECMP groups (modes other than hash), configuration and state, anew: set_fib
   replaces them. */
static int load_groups(Asic *self)
{
    Core *c = &self->core;
    drop_groups(c);
    PyObject *groups = PyObject_GetAttrString(self->reference, "_groups");
    PyObject *items = groups ? PyMapping_Items(groups) : NULL;
    Py_XDECREF(groups);
    if (!items) return -1;
    int r = fp_alloc_groups(c, (int)PyList_GET_SIZE(items));
    if (r < 0) core_error(c);
    for (int i = 0; r == 0 && i < c->ngroups; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        r = load_group(self, &c->groups[i], PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1));
    }
    Py_DECREF(items);
    if (r < 0) drop_groups(c);
    return r;
}

/* The groups' state into the reference's: their counters and members always, their flowset
   tables only where `tables` (what _load reads back; group_counters does not need them). */
static int store_groups(Asic *self, int tables)
{
    Core *c = &self->core;
    for (int i = 0; i < c->ngroups; i++) {
        Group *g = &c->groups[i];
        PyObject *obj = g->host;
        if (store_fields(self, obj, "group", GROUP_FIELDS, g) < 0) return -1;
        const void *flowset[] = {g->last_s, g->member, g->flow};
        for (int t = 0; tables && t < 3; t++) {
            PyObject *v = list_of((Py_ssize_t)g->max_flows, FLOWSET_KIND[t], flowset[t]);
            int r = v ? PyObject_SetAttrString(obj, FLOWSET[t], v) : -1;
            Py_XDECREF(v);
            if (r < 0) return -1;
        }
        PyObject *members = PyObject_GetAttrString(obj, "members");
        for (int k = 0; members && k < g->nmembers; k++) {
            PyObject *member = PySequence_GetItem(members, k);
            int r = member ? store_fields(self, member, "member", MEMBER_FIELDS, &g->members[k]) : -1;
            Py_XDECREF(member);
            if (r < 0) Py_CLEAR(members);
        }
        if (!members) return -1;
        Py_DECREF(members);
    }
    return 0;
}

/* Every object's fields with these roles, from the reference's objects into the core. */
static int load(Asic *self, int roles)
{
    Core *c = &self->core;
    for (int i = 0; i < c->npools; i++)
        if (read_fields(self, c->pools[i].host, "pool", POOL_FIELDS, &c->pools[i], roles) < 0) return -1;
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        if (read_fields(self, p->host, "port", PORT_FIELDS, p, roles) < 0) return -1;
        for (int k = 0; k < PRIO; k++)
            if (read_fields(self, p->pgs[k].host, "pg", PG_FIELDS, &p->pgs[k], roles) < 0
                || read_fields(self, p->queues[k].host, "queue", QUEUE_FIELDS, &p->queues[k], roles) < 0)
                return -1;
    }
    return 0;
}

static int store(Asic *self)
{
    Core *c = &self->core;
    for (int i = 0; i < c->npools; i++)
        if (store_fields(self, c->pools[i].host, "pool", POOL_FIELDS, &c->pools[i]) < 0) return -1;
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        if (store_fields(self, p->host, "port", PORT_FIELDS, p) < 0) return -1;
        for (int k = 0; k < PRIO; k++)
            if (store_fields(self, p->pgs[k].host, "pg", PG_FIELDS, &p->pgs[k]) < 0
                || store_fields(self, p->queues[k].host, "queue", QUEUE_FIELDS, &p->queues[k]) < 0)
                return -1;
    }
    return store_groups(self, 1);
}

/* ---- the core's Host: frames are bytes, draws and routes the reference's ------------------ */

static int host_frame_new(void *ctx, long long size, Frame *out, unsigned char **writable)
{
    (void)ctx;
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!b) return -1;
    out->ref = (FpFrameRef *)b;
    out->data = *writable = (unsigned char *)PyBytes_AS_STRING(b);
    out->size = size;
    return 0;
}

static void host_frame_retain(void *ctx, FpFrameRef *ref)
{
    (void)ctx;
    Py_INCREF((PyObject *)ref);
}

static void host_frame_release(void *ctx, FpFrameRef *ref)
{
    (void)ctx;
    Py_DECREF((PyObject *)ref);
}

static double draw(PyObject *r, int *error)
{
    if (!r) {
        *error = 1;
        return 0.0;
    }
    double v = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (v == -1.0 && PyErr_Occurred()) *error = 1;
    return v;
}

static double host_random(void *ctx, int *error)
{
    return draw(PyObject_CallNoArgs(((Asic *)ctx)->rng_random), error);
}

static double host_uniform(void *ctx, double a, double b, int *error)
{
    return draw(PyObject_CallFunction(((Asic *)ctx)->rng_uniform, "dd", a, b), error);
}

/* FastSwitch._resolve: (egress, queue, PG, MACs, lossless), (-1, drop reason), or through an
   adaptive ECMP group (-1, group, ECMP hash, TC, PG, lossless). */
static int host_resolve(void *ctx, int port, const FlowKey *k, Flow *out)
{
    Asic *self = ctx;
    PyObject *r = PyObject_CallMethod((PyObject *)self, "_resolve", "iiikkii", port, k->tos, k->proto,
                                      (unsigned long)k->src, (unsigned long)k->dst, k->sport, k->dport);
    if (!r) return -1;
    PyObject *reason = NULL, *macs = NULL;
    int ok;
    out->group = -1;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 6) {
        unsigned long long hash;
        ok = PyArg_ParseTuple(r, "iiKiip", &out->egress, &out->group, &hash, &out->tc, &out->pg, &out->lossless);
        out->hash = (uint32_t)hash;
        if (ok && (out->egress != -1 || out->group < 0 || out->group >= self->core.ngroups || hash > UINT32_MAX
                   || out->tc < 0 || out->tc >= NTC || out->pg < 0 || out->pg >= PRIO)) {
            PyErr_SetString(PyExc_ValueError, "_resolve: bad steering decision");
            ok = 0;
        }
    } else if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        ok = PyArg_ParseTuple(r, "iU", &out->egress, &reason) && (out->queue = reason_index(self, reason)) >= 0;
        out->egress = -1;
    } else {
        ok = PyArg_ParseTuple(r, "iiiSp", &out->egress, &out->queue, &out->pg, &macs, &out->lossless);
        if (ok && (PyBytes_GET_SIZE(macs) != 12 || out->egress < 0 || out->egress >= self->core.nports
                   || out->queue < 0 || out->queue >= PRIO || out->pg < 0 || out->pg >= PRIO)) {
            PyErr_SetString(PyExc_ValueError, "_resolve: bad forwarding decision");
            ok = 0;
        }
        if (ok) memcpy(out->macs, PyBytes_AS_STRING(macs), 12);
    }
    Py_DECREF(r);
    return ok ? 0 : -1;
}

static int host_trap(void *ctx, int port, const unsigned char *frame, long long size)
{
    Asic *self = ctx;
    Py_ssize_t trapped = PyObject_Length(self->trapped);
    if (trapped < 0) return -1;
    if (trapped >= self->trap_max) return 0;
    PyObject *r = PyObject_CallMethod(self->trapped, "append", "((Oy#))", (PyObject *)self->core.ports[port].host_name,
                                      frame, (Py_ssize_t)size);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static int host_spray(void *ctx, int group, int nmembers)
{
    PyObject *rng = PyObject_GetAttrString((PyObject *)((Asic *)ctx)->core.groups[group].host, "_rng");
    PyObject *r = rng ? PyObject_CallMethod(rng, "randrange", "i", nmembers) : NULL;
    Py_XDECREF(rng);
    long m = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    if (m < 0 || m >= nmembers) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "spray: a member outside the group");
        return -1;
    }
    return (int)m;
}

static long host_trapped_waiting(void *ctx) { return (long)PyObject_Length(((Asic *)ctx)->trapped); }

static void *host_sleep_begin(void *ctx)
{
    (void)ctx;
    return PyEval_SaveThread();
}

static void host_sleep_end(void *ctx, void *token)
{
    (void)ctx;
    PyEval_RestoreThread(token);
}

static int host_signalled(void *ctx)
{
    (void)ctx;
    return PyErr_CheckSignals();
}

static const Host HOST = {
    NULL, host_frame_new, host_frame_retain, host_frame_release, host_random, host_uniform, host_resolve,
    host_trap, host_trapped_waiting, host_sleep_begin, host_sleep_end, host_signalled, host_spray,
};

/* The exception for the core's last error (the host's own is already set). */
static void *core_error(Core *c)
{
    if (c->error == FP_ENOMEM) {
        PyErr_NoMemory();
    } else if (c->error == FP_EOS) {
        errno = c->error_errno;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_SystemError, "the switch core failed without saying why");
    }
    return NULL;
}

/* ---- the Python type --------------------------------------------------------------------- */

static int port_of(Asic *self, PyObject *name)
{
    PyObject *index = PyDict_GetItemWithError(self->port_index, name);
    if (!index) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, name);
        return -1;
    }
    return (int)PyLong_AsLong(index);
}

static PyObject *Asic_receive(Asic *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "receive(port, frame, now, arrival_s=None)");
        return NULL;
    }
    int port_index = port_of(self, args[0]);
    if (port_index < 0) return NULL;
    double now = PyFloat_AsDouble(args[2]);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    double arrival = nargs == 4 && args[3] != Py_None ? PyFloat_AsDouble(args[3]) : now;
    if (arrival == -1.0 && PyErr_Occurred()) return NULL;
    int r;
    if (PyBytes_Check(args[1])) {
        r = fp_receive(&self->core, port_index, (const unsigned char *)PyBytes_AS_STRING(args[1]),
                       PyBytes_GET_SIZE(args[1]), now, arrival);
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
        r = fp_receive(&self->core, port_index, view.buf, view.len, now, arrival);
        PyBuffer_Release(&view);
    }
    if (r < 0) return core_error(&self->core);
    Py_RETURN_NONE;
}

/* fp_poll's emit for Python callers: (port name, frame) appended to the list `out`. */
static int append_pair(Core *c, void *out, int port, Frame frame)
{
    PyObject *pair = PyTuple_New(2);
    if (!pair) {
        Py_DECREF((PyObject *)frame.ref);
        return -1;
    }
    PyTuple_SET_ITEM(pair, 0, Py_NewRef((PyObject *)c->ports[port].host_name));
    PyTuple_SET_ITEM(pair, 1, (PyObject *)frame.ref);
    int r = PyList_Append(out, pair);
    Py_DECREF(pair);
    if (r < 0) c->error = FP_EHOST;
    return r;
}

static PyObject *Asic_poll(Asic *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    if (fp_poll(&self->core, now, append_pair, out) < 0) {
        Py_DECREF(out);
        return core_error(&self->core);
    }
    return out;
}

static PyObject *Asic_next_event(Asic *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    double t = fp_next_due(&self->core);
    if (t == INFINITY) Py_RETURN_NONE;
    return PyFloat_FromDouble(t > now ? t : now);
}

static PyObject *Asic_flush_flows(Asic *self, PyObject *Py_UNUSED(ignored))
{
    fp_flush_flows(&self->core);
    Py_RETURN_NONE;
}

#define MAX_WATCHED 256

#define MAX_SERVED 64

/* serve(ports, others, geometry, early_s, idle_s, bounds, round_frames, round_bytes, drain_rounds,
         also=()) -> (readable others, ring heads)
   ports: (fd, ring, head) of every port in this core's port order, then those of each core in
   `also` (other Asics served in the same loop, fp_serve); others: descriptors to watch and hand
   back when readable. What the loop counts is this core's (take_loop_counts). */
static PyObject *Asic_serve(Asic *self, PyObject *args)
{
    PyObject *ports, *others, *bounds_obj, *also = NULL;
    Serve s = {0};
    if (!PyArg_ParseTuple(args, "OO(llll)ddOlll|O", &ports, &others, &s.geometry.block_bytes, &s.geometry.per_block,
                          &s.geometry.slot_bytes, &s.geometry.slots, &s.early_s, &s.idle_s, &bounds_obj,
                          &s.round_frames, &s.round_bytes, &s.drain_rounds, &also))
        return NULL;
    PyObject *pseq = PySequence_Fast(ports, "serve: ports must be a sequence");
    PyObject *oseq = pseq ? PySequence_Fast(others, "serve: others must be a sequence") : NULL;
    PyObject *bseq = oseq ? PySequence_Fast(bounds_obj, "serve: bounds must be a sequence") : NULL;
    PyObject *none = also ? NULL : PyTuple_New(0);
    PyObject *aseq = bseq && (also || none) ? PySequence_Fast(also ? also : none, "serve: also must be a sequence")
                                            : NULL;
    Py_XDECREF(none);
    if (!aseq) {
        Py_XDECREF(pseq);
        Py_XDECREF(oseq);
        Py_XDECREF(bseq);
        return NULL;
    }
    Core *cores[MAX_SERVED];
    int ncores = 1 + (int)PySequence_Fast_GET_SIZE(aseq), n = self->core.nports, nviews = 0;
    cores[0] = &self->core;
    PyObject *result = NULL;
    if (ncores > MAX_SERVED) {
        PyErr_Format(PyExc_ValueError, "serve: at most %d cores in one loop", MAX_SERVED);
        goto cleanup;
    }
    for (int k = 1; k < ncores; k++) {
        PyObject *other = PySequence_Fast_GET_ITEM(aseq, k - 1);
        if (!PyObject_TypeCheck(other, &AsicType)) {
            PyErr_SetString(PyExc_TypeError, "serve: also must hold Asics");
            goto cleanup;
        }
        cores[k] = &((Asic *)other)->core;
        n += cores[k]->nports;
    }
    s.nothers = (int)PySequence_Fast_GET_SIZE(oseq);
    s.nbounds = (int)PySequence_Fast_GET_SIZE(bseq);
    size_t slots = (size_t)(n ? n : 1);
    Py_buffer *views = PyMem_Calloc(slots, sizeof(Py_buffer));
    unsigned char **rings = PyMem_Calloc(slots, sizeof(unsigned char *));
    long *heads = PyMem_Calloc(slots, sizeof(long));
    int *fds = PyMem_Calloc(slots, sizeof(int));
    int *watched = PyMem_Calloc((size_t)s.nothers + 1, sizeof(int));
    short *revents = PyMem_Calloc((size_t)s.nothers + 1, sizeof(short));
    double bounds[LATE_BUCKETS];
    if (!views || !rings || !heads || !fds || !watched || !revents) {
        PyErr_NoMemory();
        goto out;
    }
    if (PySequence_Fast_GET_SIZE(pseq) != n || s.nothers > MAX_WATCHED || s.nbounds >= LATE_BUCKETS) {
        PyErr_Format(PyExc_ValueError, "serve: one (fd, ring, head) per port of every core, at most %d others, "
                     "at most %d lateness bounds", MAX_WATCHED, LATE_BUCKETS - 1);
        goto out;
    }
    for (int i = 0; i < s.nbounds; i++) {
        bounds[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(bseq, i));
        if (bounds[i] == -1.0 && PyErr_Occurred()) goto out;
    }
    for (int i = 0; i < n; i++) {
        PyObject *ring;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(pseq, i), "iOl", &fds[i], &ring, &heads[i])) goto out;
        if (PyObject_GetBuffer(ring, &views[i], PyBUF_WRITABLE) < 0) goto out;
        nviews++;
        if (heads[i] < 0 || heads[i] >= s.geometry.slots || !fp_geometry_fits(&s.geometry, (long)views[i].len)) {
            PyErr_SetString(PyExc_ValueError, "serve: the geometry does not fit a port's ring");
            goto out;
        }
        rings[i] = views[i].buf;
    }
    for (int i = 0; i < s.nothers; i++) {
        watched[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(oseq, i));
        if (watched[i] == -1 && PyErr_Occurred()) goto out;
    }
    s.fds = fds;
    s.rings = rings;
    s.heads = heads;
    s.others = watched;
    s.others_revents = revents;
    s.bounds = bounds;
    if (fp_serve(cores, ncores, &s) < 0) {
        core_error(&self->core);
        goto out;
    }
    PyObject *readable = PyList_New(0), *head_list = PyList_New(n);
    for (int i = 0; readable && head_list && i < n; i++) {
        PyObject *head = PyLong_FromLong(heads[i]);
        if (!head) Py_CLEAR(head_list);
        else PyList_SET_ITEM(head_list, i, head);
    }
    for (int i = 0; readable && head_list && i < s.nothers; i++) {
        if (!revents[i]) continue;
        PyObject *fd = PyLong_FromLong(watched[i]);
        if (!fd || PyList_Append(readable, fd) < 0) Py_CLEAR(readable);
        Py_XDECREF(fd);
    }
    if (readable && head_list) {
        result = Py_BuildValue("NN", readable, head_list);
    } else {
        Py_XDECREF(readable);
        Py_XDECREF(head_list);
    }
out:
    for (int i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(rings);
    PyMem_Free(heads);
    PyMem_Free(fds);
    PyMem_Free(watched);
    PyMem_Free(revents);
cleanup:
    Py_DECREF(pseq);
    Py_DECREF(oseq);
    Py_DECREF(bseq);
    Py_DECREF(aseq);
    return result;
}

/* take_loop_counts() -> (rx_frames, tx_frames, wakeups, lateness counts, total_s, max_s, {errno: n},
   each wake-up's latest event by lateness bucket): what serve counted since the last call, zeroed. */
static PyObject *Asic_take_loop_counts(Asic *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *r = loop_counts_tuple(&self->core.loop);
    if (r) memset(&self->core.loop, 0, sizeof self->core.loop);
    return r;
}

/* Every reference the core's structs hold, for the collector and for clearing. */
#define FOR_EACH_REFERENCE(c, DO) \
    for (int i_ = 0; (c)->pools && i_ < (c)->npools; i_++) DO((PyObject *)(c)->pools[i_].host); \
    for (int i_ = 0; (c)->ports && i_ < (c)->nports; i_++) { \
        Port *p_ = &(c)->ports[i_]; \
        DO((PyObject *)p_->host); \
        DO((PyObject *)p_->host_name); \
        for (int k_ = 0; k_ < PRIO; k_++) { \
            DO((PyObject *)p_->pgs[k_].host); \
            DO((PyObject *)p_->queues[k_].host); \
        } \
    } \
    for (int i_ = 0; (c)->groups && i_ < (c)->ngroups; i_++) DO((PyObject *)(c)->groups[i_].host);

static void clear_core(Asic *self)
{
    Core *c = &self->core;
#define DROP(o) Py_XDECREF(o)
    FOR_EACH_REFERENCE(c, DROP)
#undef DROP
    fp_free(c);  /* and the frames it holds, through the Host */
}

/* A tuple of the names up to the NULL (or `n` of them). */
static PyObject *names_tuple(const char *const *names, Py_ssize_t n)
{
    if (n < 0)
        for (n = 0; names[n]; n++) {}
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

/* The switch's ports and pools, their count, from the reference's _ports and _pools. */
static int build(Asic *self)
{
    Core *c = &self->core;
    PyObject *pools = PyMapping_Values(self->pools);
    if (!pools) {
        name_field("switch", &SWITCH_FIELDS[1]);
        return -1;
    }
    Py_ssize_t nports = PySequence_Size(self->ports);
    if (nports < 0 || fp_alloc(c, (int)nports, (int)PyList_GET_SIZE(pools)) < 0) {
        Py_DECREF(pools);
        if (nports < 0) name_field("switch", &SWITCH_FIELDS[0]);
        else core_error(c);
        return -1;
    }
    for (int i = 0; i < c->npools; i++) c->pools[i].host = Py_NewRef(PyList_GET_ITEM(pools, i));
    Py_DECREF(pools);
    for (int i = 0; i < c->nports; i++) {
        c->ports[i].host = PySequence_GetItem(self->ports, i);
        if (!c->ports[i].host) return -1;
    }
    if (load(self, BUILD) < 0) return -1;
    for (int i = 0; i < c->nports; i++) {
        PyObject *index = PyLong_FromLong(i);
        int r = index ? PyDict_SetItem(self->port_index, c->ports[i].host_name, index) : -1;
        Py_XDECREF(index);
        if (r < 0) return -1;
    }
    if (load_groups(self) < 0) return -1;
    fp_ready(c);
    return 0;
}

/* Asic(reference, rng, max_frame_bytes, flow_cache_max, trap_queue_max) */
static int Asic_init(Asic *self, PyObject *args, PyObject *kwds)
{
    PyObject *ref, *rng;
    long long max_frame, flow_cache_max, trap_max;
    static char *kwlist[] = {"reference", "rng", "max_frame_bytes", "flow_cache_max", "trap_queue_max", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOLLL", kwlist, &ref, &rng, &max_frame, &flow_cache_max,
                                     &trap_max))
        return -1;
    clear_core(self);
    memset(&self->core, 0, sizeof self->core);
    self->core.host = HOST;
    self->core.host.ctx = self;
    self->core.max_frame = max_frame;
    self->core.flow_cache_max = flow_cache_max;
    self->trap_max = trap_max;
    Py_XSETREF(self->reasons, names_tuple(REASON_NAMES, NREASONS));
    Py_XSETREF(self->port_index, PyDict_New());
    Py_XSETREF(self->reference, Py_NewRef(ref));
    if (!self->reasons || !self->port_index || read_fields(self, ref, "switch", SWITCH_FIELDS, self, BUILD) < 0
        || read_fields(self, rng, "rng", RNG_FIELDS, self, BUILD) < 0 || build(self) < 0) {
        clear_core(self);
        return -1;
    }
    return 0;
}

/* ---- counters, packed (rocelab.switch.counters.pack: the order of PORT_VALUES, QUEUE_VALUES,
   PG_VALUES there) ---------------------------------------------------------------------- */

static int append_ll(PyObject *list, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    int rc = o ? PyList_Append(list, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static int append_d(PyObject *list, double v)
{
    PyObject *o = PyFloat_FromDouble(v);
    int rc = o ? PyList_Append(list, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static int append_drops(Asic *self, PyObject *drops, long holder, const Drops *d)
{
    for (int r = 0; r < NREASONS; r++) {
        if (!d->n[r]) continue;
        PyObject *entry = Py_BuildValue("[lOLL]", holder, PyTuple_GET_ITEM(self->reasons, r), d->n[r], d->b[r]);
        if (!entry || PyList_Append(drops, entry) < 0) { Py_XDECREF(entry); return -1; }
        Py_DECREF(entry);
    }
    return 0;
}

/* counter_values(now) -> (values, drops): every counter as one flat list and the drops as
   [holder, reason, packets, bytes], read straight from the core's state (no store into the
   reference's objects), so a counters request costs the loop microseconds, not milliseconds. */
static PyObject *Asic_counter_values(Asic *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *values = PyList_New(0), *drops = PyList_New(0);
    if (!values || !drops) goto fail;
    for (int i = 0; i < self->core.nports; i++) {
        const Port *p = &self->core.ports[i];
        long long txp = 0, txb = 0;
        for (int k = 0; k < PRIO; k++) { txp += p->queues[k].tx_packets; txb += p->queues[k].tx_bytes; }
        if (append_ll(values, p->rx_packets) < 0 || append_ll(values, p->rx_bytes) < 0
            || append_ll(values, txp) < 0 || append_ll(values, txb) < 0 || append_ll(values, p->pause_rx) < 0)
            goto fail;
        for (int k = 0; k < PRIO; k++) if (append_ll(values, p->pfc_rx[k]) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) if (append_ll(values, p->pfc_tx[k]) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) if (append_d(values, fp_paused_time_s(p, k, now)) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) {
            const Queue *q = &p->queues[k];
            long long v[] = {q->tx_packets, q->tx_bytes, q->ecn_packets, q->ecn_bytes, q->depth, q->wm,
                             q->s.shared_wm, q->has_wd, q->wd_stormed, q->wd_detected, q->wd_restored};
            for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) if (append_ll(values, v[j]) < 0) goto fail;
        }
        for (int g = 0; g < PRIO; g++) {
            const Pg *pg = &p->pgs[g];
            long long v[] = {pg->rx_packets, pg->rx_bytes, pg->lossless, pg->xoff_active, pg->s.reserved_used,
                             pg->s.shared_used, pg->headroom_used, pg->s.shared_wm, pg->headroom_wm,
                             pg->held_packets, pg->held_bytes};
            for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) if (append_ll(values, v[j]) < 0) goto fail;
        }
        long base = (long)i * (1 + 2 * PRIO);  /* holders: the port, its queues, its PGs */
        if (append_drops(self, drops, base, &p->drops) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) if (append_drops(self, drops, base + 1 + k, &p->queues[k].drops) < 0) goto fail;
        for (int g = 0; g < PRIO; g++)
            if (append_drops(self, drops, base + 1 + PRIO + g, &p->pgs[g].drops) < 0) goto fail;
    }
    PyObject *out = PyTuple_Pack(2, values, drops);
    Py_DECREF(values);
    Py_DECREF(drops);
    return out;
fail:
    Py_XDECREF(values);
    Py_XDECREF(drops);
    return NULL;
}

static PyObject *Asic_store(Asic *self, PyObject *Py_UNUSED(ignored))
{
    if (store(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Asic_store_group_counters(Asic *self, PyObject *Py_UNUSED(ignored))
{
    if (store_groups(self, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Asic_load(Asic *self, PyObject *Py_UNUSED(ignored))
{
    if (load(self, RELOAD) < 0 || load_groups(self) < 0) return NULL;
    fp_reschedule_timers(&self->core);
    Py_RETURN_NONE;
}

static int Asic_traverse(Asic *self, visitproc visit, void *arg)
{
    Core *c = &self->core;
    FOR_EACH_REFERENCE(c, Py_VISIT)
    Py_VISIT(self->ports);
    Py_VISIT(self->pools);
    Py_VISIT(self->trapped);
    Py_VISIT(self->rng_random);
    Py_VISIT(self->rng_uniform);
    Py_VISIT(self->port_index);
    Py_VISIT(self->reasons);
    Py_VISIT(self->reference);
    return 0;
}

static int Asic_clear(Asic *self)
{
    clear_core(self);
    Py_CLEAR(self->ports);
    Py_CLEAR(self->pools);
    Py_CLEAR(self->trapped);
    Py_CLEAR(self->rng_random);
    Py_CLEAR(self->rng_uniform);
    Py_CLEAR(self->port_index);
    Py_CLEAR(self->reasons);
    Py_CLEAR(self->reference);
    return 0;
}

static void Asic_dealloc(Asic *self)
{
    PyObject_GC_UnTrack(self);
    Asic_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Asic_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Asic *self = (Asic *)PyType_GenericNew(type, args, kwds);
    if (self) {
        self->core.host = HOST;
        self->core.host.ctx = self;
    }
    return (PyObject *)self;
}

static PyMethodDef Asic_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))Asic_receive, METH_FASTCALL,
     "receive(port, frame, now, arrival_s=None): take one received frame (Switch.receive)"},
    {"poll", (PyCFunction)Asic_poll, METH_O, "poll(now) -> [(port, frame)] due now (Switch.poll)"},
    {"next_event", (PyCFunction)Asic_next_event, METH_O,
     "next_event(now) -> the time poll next has work, or None (Switch.next_event)"},
    {"serve", (PyCFunction)Asic_serve, METH_VARARGS,
     "serve(ports, others, geometry, early_s, idle_s, bounds, round_frames, round_bytes, drain_rounds, also=()) "
     "-> (readable others, ring heads): the agent loop in C, for this core and the Asics in `also` (their "
     "ports after this one's), counted in this one"},
    {"take_loop_counts", (PyCFunction)Asic_take_loop_counts, METH_NOARGS,
     "what serve counted since the last call: (rx, tx, wakeups, lateness counts, total_s, max_s, {errno: n}, "
     "each wake-up's latest event by lateness bucket)"},
    {"_flush_flows", (PyCFunction)Asic_flush_flows, METH_NOARGS, "forget every cached forwarding decision"},
    {"counter_values", (PyCFunction)Asic_counter_values, METH_O,
     "counter_values(now) -> (values, drops): the counters packed (rocelab.switch.counters.pack)"},
    {"_store", (PyCFunction)Asic_store, METH_NOARGS, "write the state into the reference's objects"},
    {"_store_group_counters", (PyCFunction)Asic_store_group_counters, METH_NOARGS,
     "write the ECMP groups' counters and members' state (not their flowset tables) into the reference's"},
    {"_load", (PyCFunction)Asic_load, METH_NOARGS, "read the configuration and state from the reference's objects (its ECMP groups anew)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AsicType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocelab.switch._fastpath.Asic",
    .tp_doc = "The switch pipeline in C, built from a reference rocelab.switch.pipeline.Switch.",
    .tp_basicsize = sizeof(Asic),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = Asic_new,
    .tp_init = (initproc)Asic_init,
    .tp_dealloc = (destructor)Asic_dealloc,
    .tp_traverse = (traverseproc)Asic_traverse,
    .tp_clear = (inquiry)Asic_clear,
    .tp_methods = Asic_methods,
};

static const char *const ROLE_NAMES[] = {[STATE] = "state", [CONFIG] = "config", [STRUCTURE] = "structure"};

/* {kind: ((attribute path, "structure" | "config" | "state"), ...)}: the tables, as declared. */
static PyObject *field_names(void)
{
    PyObject *d = PyDict_New();
    for (size_t t = 0; d && t < sizeof TABLES / sizeof TABLES[0]; t++) {
        PyObject *list = PyList_New(0);
        for (const Field *f = TABLES[t].fields; list && f->path; f++) {
            PyObject *pair = Py_BuildValue("(ss)", f->path, ROLE_NAMES[f->role]);
            if (!pair || PyList_Append(list, pair) < 0) Py_CLEAR(list);
            Py_XDECREF(pair);
        }
        PyObject *tuple = list ? PyList_AsTuple(list) : NULL;
        Py_XDECREF(list);
        if (!tuple || PyDict_SetItemString(d, TABLES[t].kind, tuple) < 0) Py_CLEAR(d);
        Py_XDECREF(tuple);
    }
    return d;
}

static PyObject *wire_names(void)
{
    PyObject *d = PyDict_New();
    for (const WireConstant *w = WIRE_CONSTANTS; d && w->name; w++) {
        PyObject *v = PyLong_FromLong(w->value);
        if (!v || PyDict_SetItemString(d, w->name, v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* PyModule_AddObjectRef for a new reference (NULL: an error already set). */
static int add_new(PyObject *m, const char *name, PyObject *value)
{
    if (!value) return -1;
    int r = PyModule_AddObjectRef(m, name, value);
    Py_DECREF(value);
    return r;
}

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT, "rocelab.switch._fastpath",
    "The switch pipeline in C: switchd's fast path, held to rocelab.switch.pipeline by tests.", -1, NULL,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    if (PyType_Ready(&AsicType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (!m) return NULL;
    /* The names tests match with the Python side's, and what choose_pipeline reads. */
    PyObject *features = names_tuple(FEATURE_NAMES, -1);
    int bad = add_new(m, "FEATURES", features ? PyFrozenSet_New(features) : NULL);
    Py_XDECREF(features);
    if (bad || PyModule_AddObjectRef(m, "Asic", (PyObject *)&AsicType) < 0
        || add_new(m, "REASONS", names_tuple(REASON_NAMES, NREASONS)) < 0
        || add_new(m, "SCHEDULERS", names_tuple(SCHEDULER_NAMES, NSCHEDULERS)) < 0
        || add_new(m, "FIELDS", field_names()) < 0 || add_new(m, "WIRE", wire_names()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

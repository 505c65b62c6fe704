/* rocelab.switch._fastpath: the switch pipeline of rocelab.switch.pipeline, in C.

The Python pipeline is the reference: this is its fast path for switchd, held to it by
tests/unit/test_switch_fastpath.py (a recorded trace through both gives the same frames out,
in the same order and at the same times, and the same counters) and by every switch test,
which runs on both. Each function here names the Python one it follows; read that for why.

What stays in Python (rocelab.switch.fastpath.FastSwitch): building the switch from a QoS
profile (the reference Switch's own objects are read here once), routing a flow the cache
has not seen, and the counters' JSON (this core writes its state back into those objects
and the reference formats it). Random draws (WRED, link loss and jitter) call the injected
random.Random, in the reference's order, so a seeded run is the reference's run.

It also runs switchd's loop (serve, at the end): rocelab.kernel.loop.Loop's Python loop, which
nicd and the Python pipeline run, is its reference; tests/live/test_ring_live.py holds the two
to the same frames out and counters on a real veth.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PRIO 8
#define ETH_HEADER 14
#define IP_AT ETH_HEADER
#define MIN_IPV4_FRAME (ETH_HEADER + 20)
#define ETH_P_IPV4 0x0800
#define ETH_P_8021Q 0x8100
#define ETH_P_MAC_CONTROL 0x8808
#define MAC_CONTROL_PAUSE 0x0001
#define MAC_CONTROL_PFC 0x0101
#define MIN_FRAME_BYTES 60
#define PFC_QUANTUM_BITS 512.0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPV4_FRAGMENT_MASK 0x3FFF
#define ECN_MASK 3
#define ECN_CE 3
#define TTL_DECREMENT_DELTA 0xFEFF

/* The drop reasons. Each is named here, by its enum value, in rocelab.switch.counters' words;
   the module exports the names (REASONS) and tests/unit/test_switch_fastpath.py matches them
   with the Python side's by name. */
enum {
    R_TRUNCATED, R_OVERSIZED, R_NOT_IPV4, R_NOT_FOR_US, R_BAD_IPV4_HEADER, R_BAD_IPV4_CHECKSUM,
    R_MAC_CONTROL_UNSUPPORTED, R_FLOW_CONTROL_DISABLED, R_TTL_EXPIRED, R_NO_ROUTE, R_TO_SELF,
    R_IMPAIRMENT_LOSS, R_HEADROOM_EXCEEDED, R_TAIL_DROP, R_WRED_DROP, R_PFCWD_DROP, NREASONS
};
static const char *const REASON_NAMES[NREASONS] = {
    [R_TRUNCATED] = "truncated", [R_OVERSIZED] = "oversized", [R_NOT_IPV4] = "not_ipv4",
    [R_NOT_FOR_US] = "not_for_us", [R_BAD_IPV4_HEADER] = "bad_ipv4_header",
    [R_BAD_IPV4_CHECKSUM] = "bad_ipv4_checksum", [R_MAC_CONTROL_UNSUPPORTED] = "mac_control_unsupported",
    [R_FLOW_CONTROL_DISABLED] = "flow_control_disabled", [R_TTL_EXPIRED] = "ttl_expired",
    [R_NO_ROUTE] = "no_route", [R_TO_SELF] = "to_self", [R_IMPAIRMENT_LOSS] = "impairment_loss",
    [R_HEADROOM_EXCEEDED] = "headroom_exceeded", [R_TAIL_DROP] = "tail_drop", [R_WRED_DROP] = "wred_drop",
    [R_PFCWD_DROP] = "pfcwd_drop",
};

/* The SCHEDULER types this core serves (pick: STRICT, then DWRR and WRR alike, byte-fair). */
static const char *const SCHEDULER_NAMES[] = {"STRICT", "DWRR", "WRR", NULL};

/* What this core implements, in the names of rocelab.switch.pipeline.FEATURES: a switch runs on
   it only where its profile and ports need nothing else (rocelab.switch.fastpath.choose_pipeline). */
static const char *const FEATURE_NAMES[] = {
    "scheduler:STRICT", "scheduler:DWRR", "scheduler:WRR", "wred", "pfc", "pfcwd:drop", "pfcwd:forward",
    "pfcwd:alert", "dynamic_threshold", "shared_headroom", "pause_802_3x", "link_delay", "link_jitter",
    "link_loss", "ecmp:hash", NULL,
};
#define ADMITTED (-1)

typedef struct { long long n[NREASONS], b[NREASONS]; } Drops;

static inline void count_drop(Drops *d, int reason, long long size) { d->n[reason]++; d->b[reason] += size; }

/* ---- the MMU (rocelab.switch.mmu) ------------------------------------------------------ */

typedef struct {
    PyObject *ref;
    long long size, headroom_size, shared_used, headroom_used;
} Pool;

typedef struct {  /* _SharedUser */
    Pool *pool;
    long long reserved, static_th, reserved_used, shared_used, shared_wm;
    double alpha;  /* NAN: a static threshold */
} Shared;

typedef struct Pg {
    Shared s;
    PyObject *ref, *xoff_frame, *xon_frame;
    long long headroom, xon, xon_offset, headroom_used, headroom_wm, rx_packets, rx_bytes;
    int xoff_active, lossless, port, npri, pri[PRIO];
    double refresh_at;
    Drops drops;
} Pg;

typedef struct { PyObject *frame; long long size; Pg *pg; } Item;

enum { WD_DROP, WD_FORWARD, WD_ALERT };

typedef struct {
    Shared s;
    PyObject *ref;
    long long depth, wm, quantum, deficit, tx_packets, tx_bytes, ecn_packets, ecn_bytes;
    Item *items;
    int cap, head, count, index, npri, pri[PRIO], drr, dropping;
    double paused_until;
    int has_wred, wred_marks, wred_drops;
    long long wred_min, wred_max;
    double wred_slope;
    int has_wd, wd_action, wd_stormed, watched;
    double wd_detect, wd_restore, wd_since /* NAN: None */, wd_last_pause;
    long long wd_detected, wd_restored;
    Drops drops;
} Queue;

static inline double threshold_bytes(const Shared *s)
{
    const Pool *p = s->pool;
    if (isnan(s->alpha) || !p) return (double)s->static_th;
    long long free = p->size - p->shared_used;
    return free > 0 ? s->alpha * (double)free : 0.0;
}

static inline int fits_shared(const Shared *s, long long extra)
{
    const Pool *p = s->pool;
    if (!p) return s->shared_used + extra <= s->static_th;
    if (p->shared_used + extra > p->size) return 0;
    if (isnan(s->alpha)) return s->shared_used + extra <= s->static_th;
    return (double)(s->shared_used + extra) <= s->alpha * (double)(p->size - p->shared_used);
}

static inline void take(Shared *s, long long n)
{
    long long room = s->reserved - s->reserved_used;
    if (n <= room) {
        s->reserved_used += n;
        return;
    }
    long long extra = n - room;
    s->reserved_used += room;
    s->shared_used += extra;
    if (s->pool) s->pool->shared_used += extra;
    if (s->shared_used > s->shared_wm) s->shared_wm = s->shared_used;
}

static inline void give_back(Shared *s, long long n)
{
    long long from_shared = n <= s->shared_used ? n : s->shared_used;
    s->shared_used -= from_shared;
    if (s->pool) s->pool->shared_used -= from_shared;
    s->reserved_used -= n - from_shared;
}

static inline int pg_admit(Pg *pg, long long n, int lossless)  /* PgBuffer.admit */
{
    Shared *s = &pg->s;
    long long room = s->reserved - s->reserved_used;
    long long extra = n - room;
    if (extra <= 0 || fits_shared(s, extra)) {
        take(s, n);
        return ADMITTED;
    }
    if (!lossless) return R_TAIL_DROP;
    if (pg->headroom_used + extra > pg->headroom) return R_HEADROOM_EXCEEDED;
    Pool *pool = s->pool;
    if (pool && pool->headroom_size) {
        if (pool->headroom_used + extra > pool->headroom_size) return R_HEADROOM_EXCEEDED;
        pool->headroom_used += extra;
    }
    s->reserved_used += room;
    pg->headroom_used += extra;
    if (pg->headroom_used > pg->headroom_wm) pg->headroom_wm = pg->headroom_used;
    return ADMITTED;
}

static inline void pg_release(Pg *pg, long long n)  /* PgBuffer.release */
{
    Pool *pool = pg->s.pool;
    if (pg->headroom_used) {
        long long from_headroom = n < pg->headroom_used ? n : pg->headroom_used;
        pg->headroom_used -= from_headroom;
        if (pool && pool->headroom_size) pool->headroom_used -= from_headroom;
        n -= from_headroom;
    }
    give_back(&pg->s, n);
}

static inline int pg_should_resume(const Pg *pg)
{
    if (!pg->xoff_active || pg->headroom_used) return 0;
    double resume = threshold_bytes(&pg->s) - (double)pg->xon_offset;
    if ((double)pg->xon > resume) resume = (double)pg->xon;
    return (double)pg->s.shared_used <= resume;
}

static inline int queue_fits(const Queue *q, long long n)  /* QueueBuffer.fits */
{
    long long room = q->s.reserved - q->s.reserved_used;
    return n <= room || fits_shared(&q->s, n - room);
}

/* ---- the PFC watchdog (rocelab.switch.pfc.QueueWatchdog) ------------------------------- */

enum { NO_TRANSITION, STORM_DETECTED, STORM_RESTORED };

static inline int wd_ignores_pause(const Queue *q) { return q->wd_stormed && q->wd_action != WD_ALERT; }

static double wd_due(const Queue *q)  /* NAN: None */
{
    if (q->wd_stormed) return q->wd_last_pause + q->wd_restore;
    if (isnan(q->wd_since)) return NAN;
    return q->wd_since + q->wd_detect;
}

static int wd_evaluate(Queue *q, double now)
{
    if (q->wd_stormed) {
        if (now >= q->wd_last_pause + q->wd_restore) {
            q->wd_stormed = 0;
            q->wd_restored++;
            q->wd_since = NAN;
            return STORM_RESTORED;
        }
        return NO_TRANSITION;
    }
    if (isnan(q->wd_since) || now < q->wd_since + q->wd_detect) return NO_TRANSITION;
    if (q->paused_until >= q->wd_since + q->wd_detect) {
        q->wd_stormed = 1;
        q->wd_detected++;
        return STORM_DETECTED;
    }
    q->wd_since = NAN;
    return NO_TRANSITION;
}

/* ---- ports: the flow cache, the link, pause timers ------------------------------------ */

typedef struct {  /* a forwarding decision, as pipeline._resolve caches it */
    uint64_t k1, k2;
    int used, egress /* -1: dropped for `queue` (a reason) */, queue, pg, lossless;
    unsigned char macs[12];
} Flow;

typedef struct { double release; PyObject *frame; } OnLink;

#define LATE_BUCKETS 32  /* at least len(rocelab.kernel.loop.LATENESS_BOUNDS_S) + 1 */
#define ERRNO_SLOTS 160

/* What serve's loop counts, as rocelab.kernel.loop.LoopStats does; taken (and zeroed) by
   take_loop_counts. */
typedef struct {
    long long rx, tx, wakeups, late[LATE_BUCKETS], tx_errors[ERRNO_SLOTS];
    double late_total, late_max;
} LoopCounts;

typedef struct {
    PyObject *ref, *name;
    unsigned char mac[6];
    double rate;
    Pg pgs[PRIO];
    Queue queues[PRIO];
    int nstrict, strict[PRIO];  /* STRICT queues, highest index first */
    int has_drr, active[PRIO], nactive, credited;  /* DWRR/WRR: the round's queues in order */
    double s_per_byte, burst_s, busy_until;  /* TokenBucket */
    double delay, jitter, loss, last_release;  /* Link */
    OnLink *link;
    int link_cap, link_head, link_count;
    long long backlog, pause_rx, rx_packets, rx_bytes, pfc_rx[PRIO], pfc_tx[PRIO];
    double next_tx, link_paused_until, pfc_refresh_s;
    Flow *flows;
    size_t flow_mask, nflows;
    double until[PRIO], started[PRIO], closed[PRIO];  /* PauseTimers */
    int flow_control_rx, pfc_enable, pfc_to_queue[PRIO];
    Drops drops;
} Port;

typedef struct {
    PyObject_HEAD
    Port *ports;
    Pool *pools;
    int nports, npools, pfc_sent;
    PyObject *port_index, *rng_random, *rng_uniform, *trapped, *reasons;
    long long max_frame, flow_cache_max, trap_max;
    double next_timer;
    LoopCounts loop;
    double ahead;  /* serve's clock: may run up to early_s ahead of the monotonic clock */
} Asic;

static int queue_push(Queue *q, PyObject *frame, long long size, Pg *pg)
{
    if (q->count == q->cap) {  /* unroll the ring into the grown array */
        Item *items = PyMem_Malloc((size_t)(q->cap ? q->cap * 2 : 16) * sizeof(Item));
        if (!items) {
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < q->count; i++) items[i] = q->items[(q->head + i) % q->cap];
        PyMem_Free(q->items);
        q->items = items;
        q->cap = q->cap ? q->cap * 2 : 16;
        q->head = 0;
    }
    Item *it = &q->items[(q->head + q->count) % q->cap];
    it->frame = frame;
    it->size = size;
    it->pg = pg;
    q->count++;
    return 0;
}

static inline Item queue_pop(Queue *q)
{
    Item it = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    return it;
}

static int link_push(Port *p, double release, PyObject *frame)
{
    if (p->link_count == p->link_cap) {  /* unroll the ring into the grown array */
        int cap = p->link_cap ? p->link_cap * 2 : 16;
        OnLink *fresh = PyMem_Malloc((size_t)cap * sizeof(OnLink));
        if (!fresh) {
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < p->link_count; i++) fresh[i] = p->link[(p->link_head + i) % p->link_cap];
        PyMem_Free(p->link);
        p->link = fresh;
        p->link_cap = cap;
        p->link_head = 0;
    }
    OnLink *slot = &p->link[(p->link_head + p->link_count) % p->link_cap];
    slot->release = release;
    slot->frame = frame;
    p->link_count++;
    return 0;
}

static double rng_call(PyObject *method, double a, double b, int with_args, int *error)
{
    PyObject *r = with_args ? PyObject_CallFunction(method, "dd", a, b) : PyObject_CallNoArgs(method);
    if (!r) {
        *error = 1;
        return 0.0;
    }
    double v = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (v == -1.0 && PyErr_Occurred()) *error = 1;
    return v;
}

/* Link.send: 1 sent (the link owns `frame`), 0 lost (the caller still owns it), -1 error. */
static int link_send(Asic *self, Port *p, PyObject *frame, double now)
{
    int error = 0;
    if (p->loss && rng_call(self->rng_random, 0, 0, 0, &error) < p->loss) return error ? -1 : 0;
    if (error) return -1;
    double release = now + p->delay;
    if (p->jitter) {
        release += rng_call(self->rng_uniform, -p->jitter, p->jitter, 1, &error);
        if (error) return -1;
    }
    if (release < p->last_release) release = p->last_release;
    p->last_release = release;
    return link_push(p, release, frame) < 0 ? -1 : 1;
}

static int link_deliver(Port *p, double now, PyObject *out)
{
    while (p->link_count && p->link[p->link_head].release <= now) {
        PyObject *frame = p->link[p->link_head].frame;
        p->link_head = (p->link_head + 1) % p->link_cap;
        p->link_count--;
        PyObject *pair = PyTuple_Pack(2, p->name, frame);
        Py_DECREF(frame);
        if (!pair || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            return -1;
        }
        Py_DECREF(pair);
    }
    return 0;
}

static inline int link_impaired(const Port *p) { return p->delay || p->jitter || p->loss; }

static void pause_priority(Port *p, int priority, double now, double duration)  /* PauseTimers.pause */
{
    double until = p->until[priority];
    double elapsed_end = now < until ? now : until;
    if (elapsed_end > p->started[priority]) p->closed[priority] += elapsed_end - p->started[priority];
    p->started[priority] = now;
    p->until[priority] = now + duration;
}

/* ---- PFC generation and timers (Switch._send_pfc … _run_timers) ----------------------- */

static void reschedule_timers(Asic *self)
{
    double t = INFINITY;
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        for (int g = 0; g < PRIO; g++)
            if (p->pgs[g].xoff_active && p->pgs[g].refresh_at < t) t = p->pgs[g].refresh_at;
        for (int q = 0; q < PRIO; q++) {
            if (!p->queues[q].watched) continue;
            double due = wd_due(&p->queues[q]);
            if (!isnan(due) && due < t) t = due;
        }
    }
    self->next_timer = t;
}

static int send_pfc(Asic *self, Pg *pg, PyObject *frame, double now)
{
    Port *p = &self->ports[pg->port];
    for (int i = 0; i < pg->npri; i++) p->pfc_tx[pg->pri[i]]++;
    self->pfc_sent = 1;
    Py_INCREF(frame);
    int sent = link_send(self, p, frame, now);
    if (sent != 1) Py_DECREF(frame);
    if (sent == 0) count_drop(&p->drops, R_IMPAIRMENT_LOSS, PyBytes_GET_SIZE(frame));
    return sent < 0 ? -1 : 0;
}

static int send_xoff(Asic *self, Pg *pg, double now)
{
    pg->xoff_active = 1;
    pg->refresh_at = now + self->ports[pg->port].pfc_refresh_s;
    if (send_pfc(self, pg, pg->xoff_frame, now) < 0) return -1;
    reschedule_timers(self);
    return 0;
}

static int send_xon(Asic *self, Pg *pg, double now)
{
    pg->xoff_active = 0;
    pg->refresh_at = INFINITY;
    if (send_pfc(self, pg, pg->xon_frame, now) < 0) return -1;
    reschedule_timers(self);
    return 0;
}

static inline int release_item(Asic *self, Queue *q, long long size, Pg *pg, double now)  /* Switch._release */
{
    q->depth -= size;
    give_back(&q->s, size);
    pg_release(pg, size);
    if (pg->xoff_active && pg_should_resume(pg)) return send_xon(self, pg, now);
    return 0;
}

static int ignore_pause(Asic *self, Port *p, Queue *q, double now)  /* Switch._ignore_pause */
{
    for (int i = 0; i < q->npri; i++) pause_priority(p, q->pri[i], now, 0.0);
    q->paused_until = now;
    if (q->wd_stormed && q->wd_action == WD_DROP) {
        q->dropping = 1;
        while (q->count) {
            Item it = queue_pop(q);
            p->backlog--;
            Py_DECREF(it.frame);
            if (release_item(self, q, it.size, it.pg, now) < 0) return -1;
            count_drop(&q->drops, R_PFCWD_DROP, it.size);
        }
    }
    if (p->backlog) p->next_tx = now;
    return 0;
}

static int run_timers(Asic *self, double now)
{
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        for (int g = 0; g < PRIO; g++) {
            Pg *pg = &p->pgs[g];
            if (!pg->xoff_active || pg->refresh_at > now) continue;
            if (pg_should_resume(pg)) {
                if (send_xon(self, pg, now) < 0) return -1;
            } else {
                pg->refresh_at = now + p->pfc_refresh_s;
                if (send_pfc(self, pg, pg->xoff_frame, now) < 0) return -1;
            }
        }
    }
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        for (int k = 0; k < PRIO; k++) {
            Queue *q = &p->queues[k];
            if (!q->watched) continue;
            double due = wd_due(q);
            if (isnan(due)) {
                q->watched = 0;
            } else if (due <= now) {
                int transition = wd_evaluate(q, now);
                if (transition == STORM_DETECTED && wd_ignores_pause(q)) {
                    if (ignore_pause(self, p, q, now) < 0) return -1;
                } else if (transition == STORM_RESTORED) {
                    q->dropping = 0;
                }
                if (isnan(wd_due(q))) q->watched = 0;
            }
        }
    }
    reschedule_timers(self);
    return 0;
}

/* ---- MAC Control in (Switch._receive_mac_control, _receive_pfc) ------------------------ */

static void receive_pfc(Asic *self, Port *p, const unsigned char *f, double now)
{
    int enable = f[16] << 8 | f[17], watch = 0;
    for (int priority = 0; priority < PRIO; priority++) {
        if (!(enable >> priority & 1)) continue;
        int quanta = f[18 + 2 * priority] << 8 | f[19 + 2 * priority];
        p->pfc_rx[priority]++;
        if (!(p->pfc_enable >> priority & 1)) continue;
        Queue *q = &p->queues[p->pfc_to_queue[priority]];
        if (q->has_wd) {
            if (quanta) {  /* QueueWatchdog.on_pause */
                int was_paused = q->paused_until > now;
                q->wd_last_pause = now;
                if (!was_paused && !q->wd_stormed) q->wd_since = now;
            } else if (!q->wd_stormed) {  /* on_resume */
                q->wd_since = NAN;
            }
            q->watched = 1;
            watch = 1;
            if (wd_ignores_pause(q)) continue;
        }
        pause_priority(p, priority, now, quanta * PFC_QUANTUM_BITS / p->rate);
        double until = -INFINITY;
        for (int i = 0; i < q->npri; i++)
            if (p->until[q->pri[i]] > until) until = p->until[q->pri[i]];
        q->paused_until = until;
    }
    if (p->backlog) p->next_tx = now;
    if (watch) reschedule_timers(self);
}

static void receive_mac_control(Asic *self, Port *p, const unsigned char *frame, Py_ssize_t size, double now)
{
    unsigned char f[MIN_FRAME_BYTES];  /* read padded, as rocelab.ethernet.padded does */
    memset(f, 0, sizeof f);
    memcpy(f, frame, size < MIN_FRAME_BYTES ? (size_t)size : MIN_FRAME_BYTES);
    int opcode = f[14] << 8 | f[15];
    if (opcode == MAC_CONTROL_PFC) {
        receive_pfc(self, p, f, now);
        return;
    }
    if (opcode != MAC_CONTROL_PAUSE) {
        count_drop(&p->drops, R_MAC_CONTROL_UNSUPPORTED, size);
        return;
    }
    p->pause_rx++;
    if (!p->flow_control_rx) {
        count_drop(&p->drops, R_FLOW_CONTROL_DISABLED, size);
        return;
    }
    p->link_paused_until = now + (f[16] << 8 | f[17]) * PFC_QUANTUM_BITS / p->rate;
    if (p->backlog) p->next_tx = now;
}

/* ---- ingress (Switch._ipv4, _resolve) ------------------------------------------------- */

static inline size_t flow_hash(uint64_t k1, uint64_t k2)
{
    uint64_t h = k1 * 0x9E3779B97F4A7C15ULL ^ (k2 + 0x632BE59BD9B4E019ULL) * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h ^ h >> 29);
}

static Flow *flow_find(Port *p, uint64_t k1, uint64_t k2)
{
    if (!p->flows) return NULL;
    for (size_t i = flow_hash(k1, k2) & p->flow_mask;; i = (i + 1) & p->flow_mask) {
        Flow *f = &p->flows[i];
        if (!f->used) return NULL;
        if (f->k1 == k1 && f->k2 == k2) return f;
    }
}

static Flow *flow_insert(Asic *self, Port *p, uint64_t k1, uint64_t k2)
{
    if ((long long)p->nflows >= self->flow_cache_max) {  /* flushed rather than grown, as _resolve does */
        memset(p->flows, 0, (p->flow_mask + 1) * sizeof(Flow));
        p->nflows = 0;
    }
    if (!p->flows || (p->nflows + 1) * 2 > p->flow_mask + 1) {
        size_t n = p->flows ? (p->flow_mask + 1) * 2 : 64;
        Flow *fresh = PyMem_Calloc(n, sizeof(Flow));
        if (!fresh) {
            PyErr_NoMemory();
            return NULL;
        }
        Flow *old = p->flows;
        size_t old_n = old ? p->flow_mask + 1 : 0;
        p->flows = fresh;
        p->flow_mask = n - 1;
        for (size_t j = 0; j < old_n; j++) {
            if (!old[j].used) continue;
            size_t i = flow_hash(old[j].k1, old[j].k2) & p->flow_mask;
            while (fresh[i].used) i = (i + 1) & p->flow_mask;
            fresh[i] = old[j];
        }
        PyMem_Free(old);
    }
    size_t i = flow_hash(k1, k2) & p->flow_mask;
    while (p->flows[i].used) i = (i + 1) & p->flow_mask;
    Flow *f = &p->flows[i];
    f->used = 1;
    f->k1 = k1;
    f->k2 = k2;
    p->nflows++;
    return f;
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

/* A flow the cache has not seen: FastSwitch._resolve routes it (the reference's _route). */
static Flow *resolve(Asic *self, int port_index, Port *p, uint64_t k1, uint64_t k2,
                     int tos, int proto, uint32_t src, uint32_t dst, int sport, int dport)
{
    PyObject *r = PyObject_CallMethod((PyObject *)self, "_resolve", "iiikkii", port_index, tos, proto,
                                      (unsigned long)src, (unsigned long)dst, sport, dport);
    if (!r) return NULL;
    int egress, queue = 0, pg = 0, lossless = 0;
    PyObject *reason = NULL, *macs = NULL;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        if (!PyArg_ParseTuple(r, "iU", &egress, &reason)) goto fail;
    } else if (!PyArg_ParseTuple(r, "iiiSp", &egress, &queue, &pg, &macs, &lossless)) {
        goto fail;
    }
    if (reason) {
        queue = reason_index(self, reason);
        if (queue < 0) goto fail;
    } else if (PyBytes_GET_SIZE(macs) != 12 || egress < 0 || egress >= self->nports || queue < 0
               || queue >= PRIO || pg < 0 || pg >= PRIO) {
        PyErr_SetString(PyExc_ValueError, "_resolve: bad forwarding decision");
        goto fail;
    }
    Flow *f = flow_insert(self, p, k1, k2);
    if (!f) goto fail;
    f->egress = reason ? -1 : egress;
    f->queue = queue;
    f->pg = pg;
    f->lossless = lossless;
    if (macs) memcpy(f->macs, PyBytes_AS_STRING(macs), 12);
    Py_DECREF(r);
    return f;
fail:
    Py_DECREF(r);
    return NULL;
}

static int wred_decide(Asic *self, Queue *q, int ecn, int *verdict)  /* Wred.decide: 0 pass, 1 mark, 2 drop */
{
    long long depth = q->depth;
    *verdict = 0;
    if (depth <= q->wred_min) return 0;
    if (depth <= q->wred_max) {
        int error = 0;
        double r = rng_call(self->rng_random, 0, 0, 0, &error);
        if (error) return -1;
        if (r >= (double)(depth - q->wred_min) * q->wred_slope) return 0;
    }
    if (q->wred_marks && ecn) *verdict = ecn == ECN_CE ? 0 : 1;
    else *verdict = q->wred_drops ? 2 : 0;
    return 0;
}

static int ipv4(Asic *self, int port_index, const unsigned char *f, Py_ssize_t size, double now)
{
    Port *p = &self->ports[port_index];
    if (memcmp(f, p->mac, 6) && !(f[0] & 1)) {
        count_drop(&p->drops, R_NOT_FOR_US, size);
        return 0;
    }
    int ihl, tos, total_len, frag, ttl, proto, sport = 0, dport = 0;
    uint32_t src, dst;
    const unsigned char *ip = f + IP_AT;
    if (ip[0] == 0x45 && size >= MIN_IPV4_FRAME + 4) {
        ihl = 20;
    } else {  /* _unusual_ipv4 */
        ihl = (ip[0] & 0x0F) * 4;
        if (ip[0] >> 4 != 4 || ihl < 20) {
            count_drop(&p->drops, R_BAD_IPV4_HEADER, size);
            return 0;
        }
        if (size < IP_AT + ihl) {
            count_drop(&p->drops, R_TRUNCATED, size);
            return 0;
        }
    }
    tos = ip[1];
    total_len = ip[2] << 8 | ip[3];
    frag = ip[6] << 8 | ip[7];
    ttl = ip[8];
    proto = ip[9];
    src = (uint32_t)ip[12] << 24 | ip[13] << 16 | ip[14] << 8 | ip[15];
    dst = (uint32_t)ip[16] << 24 | ip[17] << 16 | ip[18] << 8 | ip[19];
    if (size >= IP_AT + ihl + 4) {
        sport = ip[ihl] << 8 | ip[ihl + 1];
        dport = ip[ihl + 2] << 8 | ip[ihl + 3];
    }
    if (total_len > size - ETH_HEADER) {
        count_drop(&p->drops, R_TRUNCATED, size);
        return 0;
    }
    if (total_len < ihl) {
        count_drop(&p->drops, R_BAD_IPV4_HEADER, size);
        return 0;
    }
    uint64_t sum = 0;  /* the header as one integer mod 0xFFFF: the sum of its words mod 0xFFFF */
    for (int i = 0; i < ihl; i += 2) sum += (uint64_t)(ip[i] << 8 | ip[i + 1]);
    if (sum % 0xFFFF) {
        count_drop(&p->drops, R_BAD_IPV4_CHECKSUM, size);
        return 0;
    }
    if ((proto != IPPROTO_UDP && proto != IPPROTO_TCP) || frag & IPV4_FRAGMENT_MASK || total_len < ihl + 4)
        sport = dport = 0;

    uint64_t k1 = (uint64_t)src << 32 | dst;
    uint64_t k2 = (uint64_t)tos << 40 | (uint64_t)proto << 32 | (uint64_t)sport << 16 | (uint64_t)dport;
    Flow *flow = flow_find(p, k1, k2);
    if (!flow) {
        flow = resolve(self, port_index, p, k1, k2, tos, proto, src, dst, sport, dport);
        if (!flow) return -1;
    }
    if (flow->egress < 0) {
        count_drop(&p->drops, flow->queue, size);
        return 0;
    }
    Port *egress = &self->ports[flow->egress];
    Queue *queue = &egress->queues[flow->queue];
    Pg *pg = &p->pgs[flow->pg];
    int lossless = flow->lossless;
    if (ttl <= 1) {
        Py_ssize_t trapped = PyObject_Length(self->trapped);
        if (trapped < 0) return -1;
        if (trapped < self->trap_max) {
            PyObject *r = PyObject_CallMethod(self->trapped, "append", "((Oy#))", p->name, f, size);
            if (!r) return -1;
            Py_DECREF(r);
        }
        count_drop(&p->drops, R_TTL_EXPIRED, size);
        return 0;
    }
    if (queue->dropping) {
        count_drop(&queue->drops, R_PFCWD_DROP, size);
        return 0;
    }
    int verdict = 0;
    if (queue->has_wred && queue->depth >= queue->wred_min) {
        if (wred_decide(self, queue, tos & ECN_MASK, &verdict) < 0) return -1;
        if (verdict == 2) {
            count_drop(&queue->drops, R_WRED_DROP, size);
            return 0;
        }
    }
    if (!lossless && !queue_fits(queue, size)) {
        count_drop(&queue->drops, R_TAIL_DROP, size);
        return 0;
    }
    int reason = pg_admit(pg, size, lossless);
    if (reason != ADMITTED) {
        count_drop(&pg->drops, reason, size);
        return 0;
    }
    take(&queue->s, size);  /* QueueBuffer.add */
    queue->depth += size;
    if (queue->depth > queue->wm) queue->wm = queue->depth;
    pg->rx_packets++;
    pg->rx_bytes += size;

    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) return -1;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(o, f, size);
    memcpy(o, flow->macs, 12);
    o[IP_AT + 8] = (unsigned char)(ttl - 1);
    long delta = TTL_DECREMENT_DELTA;
    if (verdict == 1) {
        o[IP_AT + 1] = (unsigned char)(tos | ECN_CE);
        delta += ECN_CE - (tos & ECN_MASK);
        queue->ecn_packets++;
        queue->ecn_bytes += size;
    }
    long x = (~(o[IP_AT + 10] << 8 | o[IP_AT + 11]) & 0xFFFF) + delta;  /* RFC 1624 eqn. 3 */
    x = (x & 0xFFFF) + (x >> 16);
    x = ~((x & 0xFFFF) + (x >> 16)) & 0xFFFF;
    o[IP_AT + 10] = (unsigned char)(x >> 8);
    o[IP_AT + 11] = (unsigned char)(x & 0xFF);
    if (!queue->count && queue->drr) {  /* DeficitRoundRobin.activate */
        int listed = 0;
        for (int i = 0; i < egress->nactive; i++) listed |= egress->active[i] == queue->index;
        if (!listed) {
            queue->deficit = 0;
            egress->active[egress->nactive++] = queue->index;
        }
    }
    if (queue_push(queue, out, size, pg) < 0) {
        Py_DECREF(out);
        return -1;
    }
    egress->backlog++;
    if (lossless && !pg->xoff_active && pg->headroom_used > 0 && send_xoff(self, pg, now) < 0) return -1;
    if (egress->next_tx > now) {
        double start = egress->busy_until < now ? now : egress->busy_until;
        if (start < egress->next_tx) egress->next_tx = start;
    }
    return 0;
}

static int receive_frame(Asic *self, int port_index, const unsigned char *f, Py_ssize_t size, double now)
{
    Port *p = &self->ports[port_index];
    p->rx_packets++;
    p->rx_bytes += size;
    if (size >= MIN_IPV4_FRAME && size <= self->max_frame && f[12] == 8 && f[13] == 0)
        return ipv4(self, port_index, f, size, now);
    /* Switch._not_plain_ipv4 */
    if (size > self->max_frame) {
        count_drop(&p->drops, R_OVERSIZED, size);
        return 0;
    }
    if (size < ETH_HEADER) {
        count_drop(&p->drops, R_TRUNCATED, size);
        return 0;
    }
    int ethertype = f[12] << 8 | f[13];
    if (ethertype == ETH_P_MAC_CONTROL) {
        receive_mac_control(self, p, f, size, now);
        return 0;
    }
    if (ethertype == ETH_P_8021Q) {
        if (size < ETH_HEADER + 4) {
            count_drop(&p->drops, R_TRUNCATED, size);
            return 0;
        }
        if ((f[16] << 8 | f[17]) != ETH_P_IPV4) {
            count_drop(&p->drops, R_NOT_IPV4, size);
            return 0;
        }
        if (size - 4 < MIN_IPV4_FRAME) {
            count_drop(&p->drops, R_TRUNCATED, size);
            return 0;
        }
        unsigned char *untagged = PyMem_Malloc((size_t)size - 4);
        if (!untagged) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(untagged, f, 12);
        memcpy(untagged + 12, f + 16, (size_t)size - 16);
        int r = ipv4(self, port_index, untagged, size - 4, now);
        PyMem_Free(untagged);
        return r;
    }
    count_drop(&p->drops, ethertype == ETH_P_IPV4 ? R_TRUNCATED : R_NOT_IPV4, size);
    return 0;
}

/* ---- egress (Switch.poll, _transmit; the schedulers of rocelab.switch.scheduler) ------- */

static Queue *pick(Port *p, double now)
{
    for (int i = 0; i < p->nstrict; i++) {  /* StrictPriority: served before any DWRR queue */
        Queue *q = &p->queues[p->strict[i]];
        if (q->count && q->paused_until <= now) return q;
    }
    if (!p->has_drr) return NULL;
    int visits = p->nactive + 1;  /* DeficitRoundRobin.pick */
    for (int v = 0; v < visits; v++) {
        if (!p->nactive) return NULL;
        Queue *q = &p->queues[p->active[0]];
        if (!q->count) {
            memmove(p->active, p->active + 1, (size_t)(--p->nactive) * sizeof(int));
            p->credited = 0;
            continue;
        }
        if (q->paused_until <= now) {
            if (!p->credited) {
                q->deficit += q->quantum;
                p->credited = 1;
            }
            long long size = q->items[q->head].size;
            if (size <= q->deficit) {
                if (q->count == 1) {
                    memmove(p->active, p->active + 1, (size_t)(--p->nactive) * sizeof(int));
                    p->credited = 0;
                } else {
                    q->deficit -= size;
                }
                return q;
            }
        }
        int head = p->active[0];
        memmove(p->active, p->active + 1, (size_t)(p->nactive - 1) * sizeof(int));
        p->active[p->nactive - 1] = head;
        p->credited = 0;
    }
    return NULL;
}

static int transmit(Asic *self, Port *p, double now, PyObject *out)
{
    if (p->link_paused_until > now) {
        p->next_tx = p->link_paused_until;
        return 0;
    }
    double start = p->busy_until > p->next_tx ? p->busy_until : p->next_tx;  /* TokenBucket.start_s */
    double floor = now - p->burst_s;
    if (start < floor) start = floor;
    int impaired = link_impaired(p);
    while (start <= now && p->backlog) {
        Queue *q = pick(p, now);
        if (!q) break;
        Item it = queue_pop(q);
        p->backlog--;
        if (release_item(self, q, it.size, it.pg, now) < 0) {
            Py_DECREF(it.frame);
            return -1;
        }
        q->tx_packets++;
        q->tx_bytes += it.size;
        start += it.size * p->s_per_byte;
        if (!impaired) {
            PyObject *pair = PyTuple_Pack(2, p->name, it.frame);
            Py_DECREF(it.frame);
            if (!pair || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                return -1;
            }
            Py_DECREF(pair);
        } else {
            int sent = link_send(self, p, it.frame, now);
            if (sent != 1) Py_DECREF(it.frame);
            if (sent < 0) return -1;
            if (sent == 0) count_drop(&p->drops, R_IMPAIRMENT_LOSS, it.size);
        }
    }
    p->busy_until = start;
    if (!p->backlog) {
        p->next_tx = INFINITY;
    } else if (start > now) {
        p->next_tx = start;
    } else {  /* every queue with packets is paused: wake when the first pause runs out */
        double t = INFINITY;
        for (int k = 0; k < PRIO; k++)
            if (p->queues[k].count && p->queues[k].paused_until < t) t = p->queues[k].paused_until;
        p->next_tx = t;
    }
    return 0;
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
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "receive(port, frame, now)");
        return NULL;
    }
    int port_index = port_of(self, args[0]);
    if (port_index < 0) return NULL;
    double now = PyFloat_AsDouble(args[2]);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    int r;
    if (PyBytes_Check(args[1])) {
        r = receive_frame(self, port_index, (const unsigned char *)PyBytes_AS_STRING(args[1]),
                          PyBytes_GET_SIZE(args[1]), now);
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
        r = receive_frame(self, port_index, view.buf, view.len, now);
        PyBuffer_Release(&view);
    }
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* A TPACKET_V2 receive ring's layout (rocelab.kernel.ring.RxRing.geometry). */
typedef struct { long block_bytes, per_block, slot_bytes, slots; } Geometry;

static int geometry_fits(const Geometry *g, Py_ssize_t len)
{
    return g->slots > 0 && g->per_block > 0 && g->slot_bytes > 0
        && (g->slots - 1) / g->per_block * g->block_bytes + (g->slots - 1) % g->per_block * g->slot_bytes
           + g->slot_bytes <= len;
}

/* RxRing.read with this core's receive (for serve): the frames from slot *head on, each handed to the
   pipeline and its slot given back to the kernel, until `max_frames` frames or at least
   `max_bytes` bytes or an empty slot. Returns the frames read (-1: a Python error, the slot
   given back all the same); *first_s is the first one's receive time (epoch seconds). */
static long read_ring(Asic *self, int port_index, unsigned char *base, const Geometry *g, long *head,
                      long max_frames, long max_bytes, double now, double *first_s, int *empty)
{
    long n = 0, nbytes = 0, h = *head;
    *empty = 0;
    *first_s = 0.0;
    for (;;) {
        unsigned char *slot = base + h / g->per_block * g->block_bytes + h % g->per_block * g->slot_bytes;
        uint32_t status = __atomic_load_n((uint32_t *)slot, __ATOMIC_ACQUIRE);
        if (!(status & 1)) {  /* TP_STATUS_USER: the kernel has filled the slot */
            *empty = 1;
            break;
        }
        if (n == max_frames || nbytes >= max_bytes) break;
        uint32_t snaplen, sec, nsec;
        uint16_t mac;
        memcpy(&snaplen, slot + 8, 4);  /* struct tpacket2_hdr */
        memcpy(&mac, slot + 12, 2);
        if (!n) {
            memcpy(&sec, slot + 16, 4);
            memcpy(&nsec, slot + 20, 4);
            *first_s = sec + nsec * 1e-9;
        }
        if ((long)mac + (long)snaplen > g->slot_bytes) snaplen = 0;  /* never read past the slot */
        int error = receive_frame(self, port_index, slot + mac, snaplen, now) < 0;
        __atomic_store_n((uint32_t *)slot, 0, __ATOMIC_RELEASE);  /* TP_STATUS_KERNEL: the kernel's again */
        n++;
        nbytes += snaplen;
        if (++h == g->slots) h = 0;
        if (error) {
            *head = h;
            return -1;
        }
    }
    *head = h;
    return n;
}

/* Switch.poll: the (port, frame) pairs due by `now`. */
static PyObject *poll_due(Asic *self, double now)
{
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    self->pfc_sent = 0;
    if (self->next_timer <= now && run_timers(self, now) < 0) goto fail;
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        if (p->link_count && p->link[p->link_head].release <= now && link_deliver(p, now, out) < 0) goto fail;
        if (p->next_tx <= now) {
            if (transmit(self, p, now, out) < 0) goto fail;
            if (p->link_count && p->link[p->link_head].release <= now && link_deliver(p, now, out) < 0) goto fail;
        }
    }
    if (self->pfc_sent) {
        for (int i = 0; i < self->nports; i++) {
            Port *p = &self->ports[i];
            if (p->link_count && p->link[p->link_head].release <= now && link_deliver(p, now, out) < 0)
                goto fail;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *Asic_poll(Asic *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    return poll_due(self, now);
}

/* Switch.next_event: when poll next has work (INFINITY: nothing pending). */
static double next_due(const Asic *self)
{
    double t = self->next_timer;
    for (int i = 0; i < self->nports; i++) {
        const Port *p = &self->ports[i];
        if (p->next_tx < t) t = p->next_tx;
        if (p->link_count && p->link[p->link_head].release < t) t = p->link[p->link_head].release;
    }
    return t;
}

static PyObject *Asic_next_event(Asic *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    double t = next_due(self);
    if (t == INFINITY) Py_RETURN_NONE;
    return PyFloat_FromDouble(t > now ? t : now);
}

static PyObject *Asic_flush_flows(Asic *self, PyObject *Py_UNUSED(ignored))
{
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        if (p->flows) memset(p->flows, 0, (p->flow_mask + 1) * sizeof(Flow));
        p->nflows = 0;
    }
    Py_RETURN_NONE;
}


/* ---- the event loop (serve) ----------------------------------------------------------------
rocelab.kernel.loop.Loop.run, in C, for as long as frames and timers are all there is to do:
switchd calls it and gets back control only when a control socket or a netlink watcher is
readable, a trapped frame waits for the CPU's answer, a signal arrived, or nothing happened
for idle_s. What the Python loop does per wake-up (the select list, next_event, the ring read,
the lateness bookkeeping, poll, the sends) costs here a few microseconds instead of tens.

Events due within `early_s` run at once: the loop's clock moves ahead to their time (never
back), so they run in the same wake-up as what woke it. A sleep of this machine's kernel costs
more CPU than the wait it saves when the wait is that short, and comes back later than asked. */

#define MAX_WATCHED 256

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void record_late(LoopCounts *c, const double *bounds, int nbounds, double late)
{
    int i = 0;
    while (i < nbounds && bounds[i] < late) i++;  /* bisect_left, as Lateness.record */
    c->late[i]++;
    c->late_total += late;
    if (late > c->late_max) c->late_max = late;
}

/* Loop._transmit: run the core's due events at `now` and send what leaves. */
static int send_due(Asic *self, const int *fds, double due, double now, const double *bounds, int nbounds)
{
    LoopCounts *c = &self->loop;
    if (due <= now) record_late(c, bounds, nbounds, now - due);
    PyObject *out = poll_due(self, now);
    if (!out) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++) {
        PyObject *pair = PyList_GET_ITEM(out, i);
        int k = port_of(self, PyTuple_GET_ITEM(pair, 0));
        if (k < 0) {
            Py_DECREF(out);
            return -1;
        }
        PyObject *frame = PyTuple_GET_ITEM(pair, 1);
        /* a full peer backlog or a downed link: count, never stop */
        if (send(fds[k], PyBytes_AS_STRING(frame), (size_t)PyBytes_GET_SIZE(frame), 0) < 0)
            c->tx_errors[errno < ERRNO_SLOTS ? errno : 0]++;
        else
            c->tx++;
    }
    Py_DECREF(out);
    return 0;
}

/* serve(ports, others, geometry, early_s, idle_s, bounds, round_frames, round_bytes, drain_rounds)
   -> (readable others, ring heads)
   ports: (fd, ring, head) of every port in this core's port order; others: descriptors to
   watch and hand back when readable. */
static PyObject *Asic_serve(Asic *self, PyObject *args)
{
    PyObject *ports, *others, *bounds_obj;
    Geometry g;
    double early, idle;
    long round_frames, round_bytes, drain_rounds;
    if (!PyArg_ParseTuple(args, "OO(llll)ddOlll", &ports, &others, &g.block_bytes, &g.per_block, &g.slot_bytes,
                          &g.slots, &early, &idle, &bounds_obj, &round_frames, &round_bytes, &drain_rounds))
        return NULL;
    PyObject *pseq = PySequence_Fast(ports, "serve: ports must be a sequence");
    PyObject *oseq = pseq ? PySequence_Fast(others, "serve: others must be a sequence") : NULL;
    PyObject *bseq = oseq ? PySequence_Fast(bounds_obj, "serve: bounds must be a sequence") : NULL;
    if (!bseq) {
        Py_XDECREF(pseq);
        Py_XDECREF(oseq);
        return NULL;
    }
    int n = self->nports, nothers = (int)PySequence_Fast_GET_SIZE(oseq);
    int nbounds = (int)PySequence_Fast_GET_SIZE(bseq);
    PyObject *result = NULL;
    Py_buffer *views = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    struct pollfd *pfd = PyMem_Calloc((size_t)(n + nothers + 1), sizeof(struct pollfd));
    long *heads = PyMem_Calloc((size_t)(n ? n : 1), sizeof(long));
    int *fds = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    int *ready = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    int *unmeasured = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    double bounds[LATE_BUCKETS];
    int nviews = 0;
    if (!views || !pfd || !heads || !fds || !ready || !unmeasured) {
        PyErr_NoMemory();
        goto out;
    }
    if (PySequence_Fast_GET_SIZE(pseq) != n || nothers > MAX_WATCHED || nbounds >= LATE_BUCKETS) {
        PyErr_SetString(PyExc_ValueError, "serve: one (fd, ring, head) per port, at most 256 others, "
                        "at most 31 lateness bounds");
        goto out;
    }
    for (int i = 0; i < nbounds; i++) {
        bounds[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(bseq, i));
        if (bounds[i] == -1.0 && PyErr_Occurred()) goto out;
    }
    for (int i = 0; i < n; i++) {
        PyObject *ring;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(pseq, i), "iOl", &fds[i], &ring, &heads[i])) goto out;
        if (PyObject_GetBuffer(ring, &views[i], PyBUF_WRITABLE) < 0) goto out;
        nviews++;
        if (heads[i] < 0 || heads[i] >= g.slots || !geometry_fits(&g, views[i].len)) {
            PyErr_SetString(PyExc_ValueError, "serve: the geometry does not fit a port's ring");
            goto out;
        }
        pfd[i].fd = fds[i];
        pfd[i].events = POLLIN;
    }
    for (int i = 0; i < nothers; i++) {
        int fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(oseq, i));
        if (fd == -1 && PyErr_Occurred()) goto out;
        pfd[n + i].fd = fd;
        pfd[n + i].events = POLLIN;
    }
    LoopCounts *c = &self->loop;
    int handed_back = 0, trapped = 0;
    while (!handed_back) {
        double now = clock_s(CLOCK_MONOTONIC);
        if (now < self->ahead) now = self->ahead;
        double due = next_due(self);
        if (due > now && due - now <= early) {
            self->ahead = due;
            now = due;
        }
        double wait = due - now;
        if (wait > idle) wait = idle;
        if (wait < 0) wait = 0;
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        int r, err;
        Py_BEGIN_ALLOW_THREADS  /* asleep: any thread of the agent's may run */
        r = ppoll(pfd, (nfds_t)(n + nothers), &ts, NULL);
        err = errno;
        Py_END_ALLOW_THREADS
        if (r < 0) {
            if (err != EINTR) {
                errno = err;
                PyErr_SetFromErrno(PyExc_OSError);
                goto out;
            }
            if (PyErr_CheckSignals() < 0) goto out;  /* runs the Python handlers (Loop.stop) */
            break;
        }
        if (wait > 0) c->wakeups++;  /* a sleep, and what woke it: the costly part */
        int nready = 0;
        for (int i = 0; i < n; i++)
            if (pfd[i].revents & POLLIN) unmeasured[nready] = 1, ready[nready++] = i;
        for (int i = 0; i < nothers; i++)
            if (pfd[n + i].revents) handed_back = 1;
        if (!r && due == INFINITY) break;  /* idle: let Python look at the world */
        if (!nready) {
            if (send_due(self, fds, due, now, bounds, nbounds) < 0) goto out;
        }
        /* Loop._drain: a round from each readable port in turn, the core run after every round */
        for (long rnd = 0; nready && rnd < drain_rounds; rnd++) {
            now = clock_s(CLOCK_MONOTONIC);
            if (now < self->ahead) now = self->ahead;
            if (rnd) due = next_due(self);
            for (int j = 0; j < nready;) {
                int i = ready[j], empty;
                double first_s;
                long got = read_ring(self, i, views[i].buf, &g, &heads[i], round_frames, round_bytes, now,
                                     &first_s, &empty);
                if (got < 0) goto out;
                c->rx += got;
                if (got && unmeasured[j]) {  /* the port's oldest frame: how long it waited to be read */
                    double waited = clock_s(CLOCK_REALTIME) - first_s;
                    record_late(c, bounds, nbounds, waited > 0 ? waited : 0.0);
                    unmeasured[j] = 0;
                }
                if (empty) {
                    ready[j] = ready[--nready];
                    unmeasured[j] = unmeasured[nready];
                } else {
                    j++;
                }
            }
            if (send_due(self, fds, due, now, bounds, nbounds) < 0) goto out;
        }
        trapped = (int)PyObject_Length(self->trapped);
        if (trapped < 0) goto out;
        if (trapped) break;
    }
    PyObject *readable = PyList_New(0), *head_list = PyList_New(n);
    if (!readable || !head_list) {
        Py_XDECREF(readable);
        Py_XDECREF(head_list);
        goto out;
    }
    for (int i = 0; i < n; i++) PyList_SET_ITEM(head_list, i, PyLong_FromLong(heads[i]));
    for (int i = 0; i < nothers; i++) {
        if (!pfd[n + i].revents) continue;
        PyObject *fd = PyLong_FromLong(pfd[n + i].fd);
        if (!fd || PyList_Append(readable, fd) < 0) {
            Py_XDECREF(fd);
            Py_DECREF(readable);
            Py_DECREF(head_list);
            goto out;
        }
        Py_DECREF(fd);
    }
    result = Py_BuildValue("NN", readable, head_list);
out:
    for (int i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(pfd);
    PyMem_Free(heads);
    PyMem_Free(fds);
    PyMem_Free(ready);
    PyMem_Free(unmeasured);
    Py_DECREF(pseq);
    Py_DECREF(oseq);
    Py_DECREF(bseq);
    return result;
}

/* take_loop_counts() -> (rx_frames, tx_frames, wakeups, lateness counts, total_s, max_s, {errno: n}):
   what serve counted since the last call, zeroed. */
static PyObject *Asic_take_loop_counts(Asic *self, PyObject *Py_UNUSED(ignored))
{
    LoopCounts *c = &self->loop;
    PyObject *late = PyList_New(LATE_BUCKETS), *errors = PyDict_New();
    if (!late || !errors) goto fail;
    for (int i = 0; i < LATE_BUCKETS; i++) PyList_SET_ITEM(late, i, PyLong_FromLongLong(c->late[i]));
    for (int e = 0; e < ERRNO_SLOTS; e++) {
        if (!c->tx_errors[e]) continue;
        PyObject *k = PyLong_FromLong(e), *v = PyLong_FromLongLong(c->tx_errors[e]);
        int bad = !k || !v || PyDict_SetItem(errors, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) goto fail;
    }
    PyObject *r = Py_BuildValue("LLLNddN", c->rx, c->tx, c->wakeups, late, c->late_total, c->late_max, errors);
    memset(c, 0, sizeof *c);
    return r;
fail:
    Py_XDECREF(late);
    Py_XDECREF(errors);
    return NULL;
}

/* ---- state in and out of the reference's objects ---------------------------------------
One table per kind of object: the attribute (a dotted path into a sub-object), its C type,
and whether it is configuration (read at load, never written back) or state (read at load,
written back at store). Optional sub-objects (a queue's wred and watchdog) are skipped when None. */

enum { F_LL, F_D, F_OPT_D, F_BOOL, F_LL8, F_D8 };
enum { STATE = 0, CONFIG = 1 };

typedef struct { const char *path; int type; size_t offset; int config; } Field;

#define POOL_FIELD(path, type, member, config) {path, type, offsetof(Pool, member), config}
static const Field POOL_FIELDS[] = {
    POOL_FIELD("size_bytes", F_LL, size, CONFIG),
    POOL_FIELD("headroom_size_bytes", F_LL, headroom_size, CONFIG),  /* None: no shared headroom */
    POOL_FIELD("shared_used_bytes", F_LL, shared_used, STATE),
    POOL_FIELD("headroom_used_bytes", F_LL, headroom_used, STATE),
    {NULL, 0, 0, 0},
};

#define SHARED_FIELDS(T) \
    {"reserved_bytes", F_LL, offsetof(T, s.reserved), CONFIG}, \
    {"alpha", F_OPT_D, offsetof(T, s.alpha), CONFIG}, \
    {"static_th_bytes", F_LL, offsetof(T, s.static_th), CONFIG}, \
    {"reserved_used_bytes", F_LL, offsetof(T, s.reserved_used), STATE}, \
    {"shared_used_bytes", F_LL, offsetof(T, s.shared_used), STATE}, \
    {"shared_watermark_bytes", F_LL, offsetof(T, s.shared_wm), STATE}

#define PG_FIELD(path, type, member, config) {path, type, offsetof(Pg, member), config}
static const Field PG_FIELDS[] = {
    SHARED_FIELDS(Pg),
    PG_FIELD("headroom_bytes", F_LL, headroom, CONFIG),
    PG_FIELD("xon_bytes", F_LL, xon, CONFIG),
    PG_FIELD("xon_offset_bytes", F_LL, xon_offset, CONFIG),
    PG_FIELD("lossless", F_BOOL, lossless, CONFIG),
    PG_FIELD("headroom_used_bytes", F_LL, headroom_used, STATE),
    PG_FIELD("headroom_watermark_bytes", F_LL, headroom_wm, STATE),
    PG_FIELD("xoff_active", F_BOOL, xoff_active, STATE),
    PG_FIELD("refresh_at_s", F_D, refresh_at, STATE),
    PG_FIELD("rx_packets", F_LL, rx_packets, STATE),
    PG_FIELD("rx_bytes", F_LL, rx_bytes, STATE),
    {NULL, 0, 0, 0},
};

#define Q_FIELD(path, type, member, config) {path, type, offsetof(Queue, member), config}
static const Field QUEUE_FIELDS[] = {
    SHARED_FIELDS(Queue),
    Q_FIELD("quantum_bytes", F_LL, quantum, CONFIG),
    Q_FIELD("depth_bytes", F_LL, depth, STATE),
    Q_FIELD("watermark_bytes", F_LL, wm, STATE),
    Q_FIELD("paused_until_s", F_D, paused_until, STATE),
    Q_FIELD("deficit_bytes", F_LL, deficit, STATE),
    Q_FIELD("dropping", F_BOOL, dropping, STATE),
    Q_FIELD("tx_packets", F_LL, tx_packets, STATE),
    Q_FIELD("tx_bytes", F_LL, tx_bytes, STATE),
    Q_FIELD("ecn_marked_packets", F_LL, ecn_packets, STATE),
    Q_FIELD("ecn_marked_bytes", F_LL, ecn_bytes, STATE),
    {NULL, 0, 0, 0},
};
static const Field WRED_FIELDS[] = {
    Q_FIELD("wred.min_bytes", F_LL, wred_min, CONFIG),
    Q_FIELD("wred.max_bytes", F_LL, wred_max, CONFIG),
    Q_FIELD("wred.slope_per_byte", F_D, wred_slope, CONFIG),
    Q_FIELD("wred.marks", F_BOOL, wred_marks, CONFIG),
    Q_FIELD("wred.drops", F_BOOL, wred_drops, CONFIG),
    {NULL, 0, 0, 0},
};
static const Field WATCHDOG_FIELDS[] = {
    Q_FIELD("watchdog.detection_s", F_D, wd_detect, CONFIG),
    Q_FIELD("watchdog.restoration_s", F_D, wd_restore, CONFIG),
    Q_FIELD("watchdog.paused_since_s", F_OPT_D, wd_since, STATE),
    Q_FIELD("watchdog.last_pause_s", F_D, wd_last_pause, STATE),
    Q_FIELD("watchdog.stormed", F_BOOL, wd_stormed, STATE),
    Q_FIELD("watchdog.storms_detected", F_LL, wd_detected, STATE),
    Q_FIELD("watchdog.storms_restored", F_LL, wd_restored, STATE),
    {NULL, 0, 0, 0},
};

#define PORT_FIELD(path, type, member, config) {path, type, offsetof(Port, member), config}
static const Field PORT_FIELDS[] = {
    PORT_FIELD("rate_bps", F_D, rate, CONFIG),
    PORT_FIELD("global_flow_control_rx", F_BOOL, flow_control_rx, CONFIG),
    PORT_FIELD("pfc_refresh_s", F_D, pfc_refresh_s, CONFIG),
    PORT_FIELD("bucket.s_per_byte", F_D, s_per_byte, CONFIG),
    PORT_FIELD("bucket.burst_s", F_D, burst_s, CONFIG),
    PORT_FIELD("link.delay_s", F_D, delay, CONFIG),
    PORT_FIELD("link.jitter_s", F_D, jitter, CONFIG),
    PORT_FIELD("link.loss_probability", F_D, loss, CONFIG),
    PORT_FIELD("bucket.busy_until_s", F_D, busy_until, STATE),
    PORT_FIELD("link.last_release_s", F_D, last_release, STATE),
    PORT_FIELD("backlog_packets", F_LL, backlog, STATE),
    PORT_FIELD("next_tx_s", F_D, next_tx, STATE),
    PORT_FIELD("link_paused_until_s", F_D, link_paused_until, STATE),
    PORT_FIELD("pause_rx_frames", F_LL, pause_rx, STATE),
    PORT_FIELD("rx_packets", F_LL, rx_packets, STATE),
    PORT_FIELD("rx_bytes", F_LL, rx_bytes, STATE),
    PORT_FIELD("pfc_rx_frames", F_LL8, pfc_rx, STATE),
    PORT_FIELD("pfc_tx_frames", F_LL8, pfc_tx, STATE),
    PORT_FIELD("pause.until_s", F_D8, until, STATE),
    PORT_FIELD("pause.started_s", F_D8, started, STATE),
    PORT_FIELD("pause.closed_s", F_D8, closed, STATE),
    {NULL, 0, 0, 0},
};

/* The object that holds a dotted path's last name ("bucket.busy_until_s": obj.bucket), a new
   reference, with `last` set to that name. */
static PyObject *holder(PyObject *obj, const char *path, const char **last)
{
    char name[64];
    Py_INCREF(obj);
    for (const char *dot; (dot = strchr(path, '.'));) {
        size_t n = (size_t)(dot - path);
        memcpy(name, path, n);
        name[n] = 0;
        Py_SETREF(obj, PyObject_GetAttrString(obj, name));
        if (!obj) return NULL;
        path = dot + 1;
    }
    *last = path;
    return obj;
}

static int load_fields(PyObject *ref, void *base, const Field *fields)
{
    for (const Field *f = fields; f->path; f++) {
        const char *last;
        PyObject *h = holder(ref, f->path, &last);
        PyObject *v = h ? PyObject_GetAttrString(h, last) : NULL;
        Py_XDECREF(h);
        if (!v) return -1;
        char *at = (char *)base + f->offset;
        int bad = 0;
        if (f->type == F_LL) {
            *(long long *)at = v == Py_None ? 0 : PyLong_AsLongLong(v);
        } else if (f->type == F_D) {
            *(double *)at = PyFloat_AsDouble(v);
        } else if (f->type == F_OPT_D) {
            *(double *)at = v == Py_None ? NAN : PyFloat_AsDouble(v);
        } else if (f->type == F_BOOL) {
            int b = PyObject_IsTrue(v);
            bad = b < 0;
            *(int *)at = b;
        } else {
            if (!PyList_Check(v) || PyList_GET_SIZE(v) != PRIO) {
                PyErr_Format(PyExc_TypeError, "%s: a list of %d expected", f->path, PRIO);
                bad = 1;
            }
            for (int i = 0; !bad && i < PRIO; i++) {
                PyObject *item = PyList_GET_ITEM(v, i);
                if (f->type == F_LL8) ((long long *)at)[i] = PyLong_AsLongLong(item);
                else ((double *)at)[i] = PyFloat_AsDouble(item);
            }
        }
        Py_DECREF(v);
        if (bad || PyErr_Occurred()) return -1;
    }
    return 0;
}

static int store_fields(PyObject *ref, const void *base, const Field *fields)
{
    for (const Field *f = fields; f->path; f++) {
        if (f->config) continue;
        const char *at = (const char *)base + f->offset;
        PyObject *v;
        if (f->type == F_LL) {
            v = PyLong_FromLongLong(*(const long long *)at);
        } else if (f->type == F_D) {
            v = PyFloat_FromDouble(*(const double *)at);
        } else if (f->type == F_OPT_D) {
            double d = *(const double *)at;
            v = isnan(d) ? Py_NewRef(Py_None) : PyFloat_FromDouble(d);
        } else if (f->type == F_BOOL) {
            v = PyBool_FromLong(*(const int *)at);
        } else {
            v = PyList_New(PRIO);
            for (int i = 0; v && i < PRIO; i++) {
                PyObject *item = f->type == F_LL8 ? PyLong_FromLongLong(((const long long *)at)[i])
                                                  : PyFloat_FromDouble(((const double *)at)[i]);
                if (!item) Py_CLEAR(v);
                else PyList_SET_ITEM(v, i, item);
            }
        }
        if (!v) return -1;
        const char *last;
        PyObject *h = holder(ref, f->path, &last);
        int r = h ? PyObject_SetAttrString(h, last, v) : -1;
        Py_XDECREF(h);
        Py_DECREF(v);
        if (r < 0) return -1;
    }
    return 0;
}

static int load_drops(Asic *self, PyObject *ref, Drops *d)
{
    memset(d, 0, sizeof *d);
    PyObject *drops = PyObject_GetAttrString(ref, "drops");
    if (!drops) return -1;
    PyObject *reason, *entry;
    Py_ssize_t pos = 0;
    int r = 0;
    while (r == 0 && PyDict_Next(drops, &pos, &reason, &entry)) {
        int i = reason_index(self, reason);
        if (i < 0) {
            r = -1;
        } else if (!PyList_Check(entry) || PyList_GET_SIZE(entry) != 2) {  /* [packets, bytes] */
            PyErr_SetString(PyExc_TypeError, "drops: [packets, bytes] expected");
            r = -1;
        } else {
            d->n[i] = PyLong_AsLongLong(PyList_GET_ITEM(entry, 0));
            d->b[i] = PyLong_AsLongLong(PyList_GET_ITEM(entry, 1));
            if (PyErr_Occurred()) r = -1;
        }
    }
    Py_DECREF(drops);
    return r;
}

static int store_drops(Asic *self, PyObject *ref, const Drops *d)
{
    PyObject *drops = PyDict_New();
    if (!drops) return -1;
    for (int i = 0; i < NREASONS; i++) {
        if (!d->n[i]) continue;
        PyObject *entry = Py_BuildValue("[LL]", d->n[i], d->b[i]);
        if (!entry || PyDict_SetItem(drops, PyTuple_GET_ITEM(self->reasons, i), entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(drops);
            return -1;
        }
        Py_DECREF(entry);
    }
    int r = PyObject_SetAttrString(ref, "drops", drops);
    Py_DECREF(drops);
    return r;
}

static int int_list(PyObject *seq, int *out, int *n)  /* a PG's or queue's PFC priorities */
{
    PyObject *fast = PySequence_Fast(seq, "priorities: a sequence expected");
    if (!fast) return -1;
    *n = (int)PySequence_Fast_GET_SIZE(fast);
    for (int i = 0; i < *n && i < PRIO; i++) out[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    return PyErr_Occurred() ? -1 : 0;
}

static int pool_of(Asic *self, PyObject *ref, Shared *s)
{
    PyObject *pool = PyObject_GetAttrString(ref, "pool");
    if (!pool) return -1;
    s->pool = NULL;
    for (int i = 0; i < self->npools; i++)
        if (self->pools[i].ref == pool) s->pool = &self->pools[i];
    int missing = pool != Py_None && !s->pool;
    Py_DECREF(pool);
    if (missing) PyErr_SetString(PyExc_ValueError, "a buffer pool outside the switch's pools");
    return missing ? -1 : 0;
}

static int attr_object(PyObject *ref, const char *name, PyObject **slot)
{
    PyObject *v = PyObject_GetAttrString(ref, name);
    if (!v) return -1;
    Py_XSETREF(*slot, v);
    return 0;
}

/* Every object's configuration and state from the reference's (at the start, and after the
   reference has cleared counters or changed a link's impairments). */
static int load(Asic *self)
{
    for (int i = 0; i < self->npools; i++)
        if (load_fields(self->pools[i].ref, &self->pools[i], POOL_FIELDS) < 0) return -1;
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        if (load_fields(p->ref, p, PORT_FIELDS) < 0 || load_drops(self, p->ref, &p->drops) < 0)
            return -1;
        for (int g = 0; g < PRIO; g++) {
            Pg *pg = &p->pgs[g];
            if (load_fields(pg->ref, pg, PG_FIELDS) < 0 || load_drops(self, pg->ref, &pg->drops) < 0)
                return -1;
        }
        for (int k = 0; k < PRIO; k++) {
            Queue *q = &p->queues[k];
            if (load_fields(q->ref, q, QUEUE_FIELDS) < 0 || load_drops(self, q->ref, &q->drops) < 0
                || (q->has_wred && load_fields(q->ref, q, WRED_FIELDS) < 0)
                || (q->has_wd && load_fields(q->ref, q, WATCHDOG_FIELDS) < 0))
                return -1;
        }
    }
    return 0;
}

static int store(Asic *self)
{
    for (int i = 0; i < self->npools; i++)
        if (store_fields(self->pools[i].ref, &self->pools[i], POOL_FIELDS) < 0) return -1;
    for (int i = 0; i < self->nports; i++) {
        Port *p = &self->ports[i];
        if (store_fields(p->ref, p, PORT_FIELDS) < 0 || store_drops(self, p->ref, &p->drops) < 0) return -1;
        for (int g = 0; g < PRIO; g++)
            if (store_fields(p->pgs[g].ref, &p->pgs[g], PG_FIELDS) < 0
                || store_drops(self, p->pgs[g].ref, &p->pgs[g].drops) < 0)
                return -1;
        for (int k = 0; k < PRIO; k++) {
            Queue *q = &p->queues[k];
            if (store_fields(q->ref, q, QUEUE_FIELDS) < 0 || store_drops(self, q->ref, &q->drops) < 0
                || (q->has_wd && store_fields(q->ref, q, WATCHDOG_FIELDS) < 0))
                return -1;
        }
    }
    return 0;
}

/* The parts of a port the tables do not hold: name, MAC, PFC maps, queues' schedulers,
   PGs' PFC frames, which sub-objects exist. */
static int setup_port(Asic *self, Port *p, PyObject *ref)
{
    p->ref = Py_NewRef(ref);
    if (attr_object(ref, "name", &p->name) < 0) return -1;
    PyObject *mac = PyObject_GetAttrString(ref, "mac");
    if (!mac) return -1;
    if (!PyBytes_Check(mac) || PyBytes_GET_SIZE(mac) != 6) {
        Py_DECREF(mac);
        PyErr_SetString(PyExc_TypeError, "port.mac: 6 bytes expected");
        return -1;
    }
    memcpy(p->mac, PyBytes_AS_STRING(mac), 6);
    Py_DECREF(mac);
    p->next_tx = INFINITY;
    PyObject *enable = PyObject_GetAttrString(ref, "pfc_enable");
    PyObject *to_queue = PyObject_GetAttrString(ref, "qos");
    if (to_queue) Py_SETREF(to_queue, PyObject_GetAttrString(to_queue, "pfc_priority_to_queue"));
    int bad = !enable || !to_queue;
    for (int prio = 0; !bad && prio < PRIO; prio++) {
        PyObject *key = PyLong_FromLong(prio);
        int in = key ? PySequence_Contains(enable, key) : -1;
        PyObject *q = key ? PyObject_GetItem(to_queue, key) : NULL;
        Py_XDECREF(key);
        if (in < 0 || !q) {
            bad = 1;
            break;
        }
        if (in) p->pfc_enable |= 1 << prio;
        p->pfc_to_queue[prio] = (int)PyLong_AsLong(q);
        Py_DECREF(q);
    }
    Py_XDECREF(enable);
    Py_XDECREF(to_queue);
    if (bad || PyErr_Occurred()) return -1;

    PyObject *pgs = PyObject_GetAttrString(ref, "pgs"), *queues = PyObject_GetAttrString(ref, "queues");
    bad = !pgs || !queues || PySequence_Size(pgs) != PRIO || PySequence_Size(queues) != PRIO;
    for (int k = 0; !bad && k < PRIO; k++) {
        Pg *pg = &p->pgs[k];
        pg->ref = PySequence_GetItem(pgs, k);
        pg->port = (int)(p - self->ports);
        PyObject *priorities = pg->ref ? PyObject_GetAttrString(pg->ref, "priorities") : NULL;
        bad = !priorities || int_list(priorities, pg->pri, &pg->npri) < 0
              || attr_object(pg->ref, "xoff_frame", &pg->xoff_frame) < 0
              || attr_object(pg->ref, "xon_frame", &pg->xon_frame) < 0 || pool_of(self, pg->ref, &pg->s) < 0;
        Py_XDECREF(priorities);
        if (bad) break;

        Queue *q = &p->queues[k];
        q->ref = PySequence_GetItem(queues, k);
        q->index = k;
        q->wd_since = NAN;
        PyObject *wred = q->ref ? PyObject_GetAttrString(q->ref, "wred") : NULL;
        PyObject *wd = wred ? PyObject_GetAttrString(q->ref, "watchdog") : NULL;
        PyObject *type = wd ? PyObject_GetAttrString(q->ref, "scheduler_type") : NULL;
        priorities = type ? PyObject_GetAttrString(q->ref, "priorities") : NULL;
        bad = !priorities || int_list(priorities, q->pri, &q->npri) < 0 || pool_of(self, q->ref, &q->s) < 0;
        if (!bad) {
            q->has_wred = wred != Py_None;
            q->has_wd = wd != Py_None;
            if (q->has_wd) {
                PyObject *action = PyObject_GetAttrString(wd, "action");
                bad = !action;
                if (action) {
                    q->wd_action = PyUnicode_CompareWithASCIIString(action, "drop") == 0 ? WD_DROP
                                   : PyUnicode_CompareWithASCIIString(action, "forward") == 0 ? WD_FORWARD
                                   : WD_ALERT;
                    Py_DECREF(action);
                }
            }
            if (PyUnicode_CompareWithASCIIString(type, SCHEDULER_NAMES[0]) == 0) {
                p->strict[p->nstrict++] = k;
            } else if (PyUnicode_CompareWithASCIIString(type, SCHEDULER_NAMES[1]) == 0
                       || PyUnicode_CompareWithASCIIString(type, SCHEDULER_NAMES[2]) == 0) {
                q->drr = 1;
                p->has_drr = 1;
            } else {
                PyErr_Format(PyExc_NotImplementedError, "scheduler type %R", type);
                bad = 1;
            }
        }
        Py_XDECREF(wred);
        Py_XDECREF(wd);
        Py_XDECREF(type);
        Py_XDECREF(priorities);
    }
    Py_XDECREF(pgs);
    Py_XDECREF(queues);
    if (bad) return -1;
    for (int i = 0; i < p->nstrict / 2; i++) {  /* highest index first */
        int t = p->strict[i];
        p->strict[i] = p->strict[p->nstrict - 1 - i];
        p->strict[p->nstrict - 1 - i] = t;
    }
    return 0;
}

static void clear_ports(Asic *self)
{
    for (int i = 0; self->ports && i < self->nports; i++) {
        Port *p = &self->ports[i];
        for (int k = 0; k < PRIO; k++) {
            Queue *q = &p->queues[k];
            while (q->count) Py_DECREF(queue_pop(q).frame);
            PyMem_Free(q->items);
            Py_XDECREF(q->ref);
            Py_XDECREF(p->pgs[k].ref);
            Py_XDECREF(p->pgs[k].xoff_frame);
            Py_XDECREF(p->pgs[k].xon_frame);
        }
        for (int j = 0; j < p->link_count; j++) Py_DECREF(p->link[(p->link_head + j) % p->link_cap].frame);
        PyMem_Free(p->link);
        PyMem_Free(p->flows);
        Py_XDECREF(p->ref);
        Py_XDECREF(p->name);
    }
    PyMem_Free(self->ports);
    self->ports = NULL;
    self->nports = 0;
    for (int i = 0; self->pools && i < self->npools; i++) Py_XDECREF(self->pools[i].ref);
    PyMem_Free(self->pools);
    self->pools = NULL;
    self->npools = 0;
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

/* Asic(reference, rng, max_frame_bytes, flow_cache_max, trap_queue_max) */
static int Asic_init(Asic *self, PyObject *args, PyObject *kwds)
{
    PyObject *ref, *rng, *reasons;
    long long max_frame, flow_cache_max, trap_max;
    static char *kwlist[] = {"reference", "rng", "max_frame_bytes", "flow_cache_max", "trap_queue_max", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOLLL", kwlist, &ref, &rng, &max_frame, &flow_cache_max,
                                     &trap_max))
        return -1;
    reasons = names_tuple(REASON_NAMES, NREASONS);
    if (!reasons) return -1;
    clear_ports(self);
    self->max_frame = max_frame;
    self->flow_cache_max = flow_cache_max;
    self->trap_max = trap_max;
    self->next_timer = INFINITY;
    Py_XSETREF(self->reasons, reasons);
    if (attr_object(rng, "random", &self->rng_random) < 0 || attr_object(rng, "uniform", &self->rng_uniform) < 0
        || attr_object(ref, "trapped", &self->trapped) < 0)
        return -1;
    Py_XSETREF(self->port_index, PyDict_New());
    if (!self->port_index) return -1;

    PyObject *ports = PyObject_GetAttrString(ref, "_ports");
    PyObject *pools = ports ? PyObject_GetAttrString(ref, "_pools") : NULL;
    PyObject *pool_list = pools ? PyMapping_Values(pools) : NULL;
    int bad = !pool_list;
    if (!bad) {
        self->npools = (int)PyList_GET_SIZE(pool_list);
        self->pools = PyMem_Calloc((size_t)self->npools + 1, sizeof(Pool));
        bad = !self->pools;
        for (int i = 0; !bad && i < self->npools; i++) self->pools[i].ref = Py_NewRef(PyList_GET_ITEM(pool_list, i));
    }
    if (!bad) {
        self->nports = (int)PySequence_Size(ports);
        self->ports = PyMem_Calloc((size_t)self->nports + 1, sizeof(Port));
        bad = self->nports < 0 || !self->ports;
        for (int i = 0; !bad && i < self->nports; i++) {
            PyObject *port = PySequence_GetItem(ports, i);
            PyObject *index = PyLong_FromLong(i);
            bad = !port || !index || setup_port(self, &self->ports[i], port) < 0
                  || PyDict_SetItem(self->port_index, self->ports[i].name, index) < 0;
            Py_XDECREF(port);
            Py_XDECREF(index);
        }
    }
    Py_XDECREF(ports);
    Py_XDECREF(pools);
    Py_XDECREF(pool_list);
    if (bad) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        clear_ports(self);
        return -1;
    }
    if (load(self) < 0) {
        clear_ports(self);
        return -1;
    }
    reschedule_timers(self);
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
   [holder, reason, packets, bytes], read straight from the C state (no store into the
   reference's objects), so a counters request costs the loop microseconds, not milliseconds. */
static PyObject *Asic_counter_values(Asic *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *values = PyList_New(0), *drops = PyList_New(0);
    if (!values || !drops) goto fail;
    for (int i = 0; i < self->nports; i++) {
        const Port *p = &self->ports[i];
        long long txp = 0, txb = 0;
        for (int k = 0; k < PRIO; k++) { txp += p->queues[k].tx_packets; txb += p->queues[k].tx_bytes; }
        if (append_ll(values, p->rx_packets) < 0 || append_ll(values, p->rx_bytes) < 0
            || append_ll(values, txp) < 0 || append_ll(values, txb) < 0 || append_ll(values, p->pause_rx) < 0)
            goto fail;
        for (int k = 0; k < PRIO; k++) if (append_ll(values, p->pfc_rx[k]) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) if (append_ll(values, p->pfc_tx[k]) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) {  /* PauseTimers.paused_time_s */
            double open_end = now < p->until[k] ? now : p->until[k], open = open_end - p->started[k];
            if (append_d(values, p->closed[k] + (open > 0 ? open : 0.0)) < 0) goto fail;
        }
        for (int k = 0; k < PRIO; k++) {
            const Queue *q = &p->queues[k];
            long long v[] = {q->tx_packets, q->tx_bytes, q->ecn_packets, q->ecn_bytes, q->depth, q->wm,
                             q->s.shared_wm, q->has_wd, q->wd_stormed, q->wd_detected, q->wd_restored};
            for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) if (append_ll(values, v[j]) < 0) goto fail;
        }
        for (int g = 0; g < PRIO; g++) {
            const Pg *pg = &p->pgs[g];
            long long v[] = {pg->rx_packets, pg->rx_bytes, pg->lossless, pg->xoff_active, pg->s.reserved_used,
                             pg->s.shared_used, pg->headroom_used, pg->s.shared_wm, pg->headroom_wm};
            for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) if (append_ll(values, v[j]) < 0) goto fail;
        }
        long base = (long)i * (1 + 2 * PRIO);  /* holders: the port, its queues, its PGs */
        if (append_drops(self, drops, base, &p->drops) < 0) goto fail;
        for (int k = 0; k < PRIO; k++) if (append_drops(self, drops, base + 1 + k, &p->queues[k].drops) < 0) goto fail;
        for (int g = 0; g < PRIO; g++) if (append_drops(self, drops, base + 1 + PRIO + g, &p->pgs[g].drops) < 0) goto fail;
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

static PyObject *Asic_load(Asic *self, PyObject *Py_UNUSED(ignored))
{
    if (load(self) < 0) return NULL;
    reschedule_timers(self);
    Py_RETURN_NONE;
}

static int Asic_traverse(Asic *self, visitproc visit, void *arg)
{
    Py_VISIT(self->port_index);
    Py_VISIT(self->rng_random);
    Py_VISIT(self->rng_uniform);
    Py_VISIT(self->trapped);
    Py_VISIT(self->reasons);
    return 0;
}

static int Asic_clear(Asic *self)
{
    clear_ports(self);
    Py_CLEAR(self->port_index);
    Py_CLEAR(self->rng_random);
    Py_CLEAR(self->rng_uniform);
    Py_CLEAR(self->trapped);
    Py_CLEAR(self->reasons);
    return 0;
}

static void Asic_dealloc(Asic *self)
{
    PyObject_GC_UnTrack(self);
    Asic_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Asic_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))Asic_receive, METH_FASTCALL,
     "receive(port, frame, now): take one received frame (Switch.receive)"},
    {"poll", (PyCFunction)Asic_poll, METH_O, "poll(now) -> [(port, frame)] due now (Switch.poll)"},
    {"next_event", (PyCFunction)Asic_next_event, METH_O,
     "next_event(now) -> the time poll next has work, or None (Switch.next_event)"},
    {"serve", (PyCFunction)Asic_serve, METH_VARARGS,
     "serve(ports, others, geometry, early_s, idle_s, bounds, round_frames, round_bytes, drain_rounds) -> "
     "(readable others, ring heads): the agent loop in C"},
    {"take_loop_counts", (PyCFunction)Asic_take_loop_counts, METH_NOARGS,
     "what serve counted since the last call: (rx, tx, wakeups, lateness counts, total_s, max_s, {errno: n})"},
    {"_flush_flows", (PyCFunction)Asic_flush_flows, METH_NOARGS, "forget every cached forwarding decision"},
    {"counter_values", (PyCFunction)Asic_counter_values, METH_O,
     "counter_values(now) -> (values, drops): the counters packed (rocelab.switch.counters.pack)"},
    {"_store", (PyCFunction)Asic_store, METH_NOARGS, "write the state into the reference's objects"},
    {"_load", (PyCFunction)Asic_load, METH_NOARGS, "read the state from the reference's objects"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AsicType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocelab.switch._fastpath.Asic",
    .tp_doc = "The switch pipeline in C, built from a reference rocelab.switch.pipeline.Switch.",
    .tp_basicsize = sizeof(Asic),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Asic_init,
    .tp_dealloc = (destructor)Asic_dealloc,
    .tp_traverse = (traverseproc)Asic_traverse,
    .tp_clear = (inquiry)Asic_clear,
    .tp_methods = Asic_methods,
};

/* {kind: ((attribute path, "config" | "state"), ...)}: every attribute of the reference's
   objects this core reads (config) or also writes back (state), table by table. */
static PyObject *field_names(void)
{
    static const struct { const char *kind; const Field *fields; } TABLES[] = {
        {"pool", POOL_FIELDS}, {"pg", PG_FIELDS}, {"queue", QUEUE_FIELDS}, {"wred", WRED_FIELDS},
        {"watchdog", WATCHDOG_FIELDS}, {"port", PORT_FIELDS},
    };
    PyObject *d = PyDict_New();
    for (size_t t = 0; d && t < sizeof TABLES / sizeof TABLES[0]; t++) {
        PyObject *list = PyList_New(0);
        for (const Field *f = TABLES[t].fields; list && f->path; f++) {
            PyObject *pair = Py_BuildValue("(ss)", f->path, f->config ? "config" : "state");
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
    /* The names a test matches with the Python side's, and what choose_pipeline reads. */
    PyObject *features = names_tuple(FEATURE_NAMES, -1);
    int bad = add_new(m, "FEATURES", features ? PyFrozenSet_New(features) : NULL);
    Py_XDECREF(features);
    if (bad || PyModule_AddObjectRef(m, "Asic", (PyObject *)&AsicType) < 0
        || add_new(m, "REASONS", names_tuple(REASON_NAMES, NREASONS)) < 0
        || add_new(m, "SCHEDULERS", names_tuple(SCHEDULER_NAMES, -1)) < 0
        || add_new(m, "FIELDS", field_names()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

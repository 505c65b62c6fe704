/* The switch pipeline of rocelab.switch.pipeline and switchd's loop, in plain C (see
fastpath_core.h; the CPython binding is _fastpath.c).

The Python pipeline is the reference: this is its fast path for switchd, held to it by
tests/unit/test_switch_traces.py and test_switch_fastpath.py (traces through both give the same
frames out, in the same order and at the same times, and the same counters) and by every
switch test, which runs on both. Each function here names the Python one it follows; read that
for why. Random draws (WRED, link loss and jitter) go to the host's random.Random, in the
reference's order, so a seeded run is the reference's run.

fp_serve is rocelab.kernel.loop.Loop's loop, which nicd and the Python pipeline run;
tests/live/test_ring_live.py holds the two to the same frames out and counters on a real veth.
*/
#define _GNU_SOURCE  /* epoll_pwait2 */
#include "fastpath_core.h"

#include <errno.h>
#include <limits.h>
#include <linux/if_packet.h>  /* struct tpacket2_hdr, TP_STATUS_* */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

const char *const REASON_NAMES[NREASONS] = {
    [R_TRUNCATED] = "truncated", [R_OVERSIZED] = "oversized", [R_NOT_IPV4] = "not_ipv4",
    [R_NOT_FOR_US] = "not_for_us", [R_BAD_IPV4_HEADER] = "bad_ipv4_header",
    [R_BAD_IPV4_CHECKSUM] = "bad_ipv4_checksum", [R_MAC_CONTROL_UNSUPPORTED] = "mac_control_unsupported",
    [R_FLOW_CONTROL_DISABLED] = "flow_control_disabled", [R_TTL_EXPIRED] = "ttl_expired",
    [R_NO_ROUTE] = "no_route", [R_TO_SELF] = "to_self", [R_IMPAIRMENT_LOSS] = "impairment_loss",
    [R_HEADROOM_EXCEEDED] = "headroom_exceeded", [R_TAIL_DROP] = "tail_drop", [R_WRED_DROP] = "wred_drop",
    [R_PFCWD_DROP] = "pfcwd_drop",
};
const char *const SCHEDULER_NAMES[NSCHEDULERS + 1] = {
    [SCHED_STRICT] = "STRICT", [SCHED_DWRR] = "DWRR", [SCHED_WRR] = "WRR", [NSCHEDULERS] = NULL,
};
const char *const WD_ACTION_NAMES[NWD_ACTIONS + 1] = {
    [WD_DROP] = "drop", [WD_FORWARD] = "forward", [WD_ALERT] = "alert", [NWD_ACTIONS] = NULL,
};
/* A switch runs on this core only where its profile and ports need nothing else
   (rocelab.switch.fastpath.choose_pipeline). */
const char *const FEATURE_NAMES[] = {
    "scheduler:STRICT", "scheduler:DWRR", "scheduler:WRR", "wred", "pfc", "pfcwd:drop", "pfcwd:forward",
    "pfcwd:alert", "dynamic_threshold", "shared_headroom", "pause_802_3x", "link_delay", "link_jitter",
    "link_loss", "ecmp:hash", "ecmp:flowlet", "ecmp:packet", "ecmp:spray", NULL,
};
const char *const BALANCE_MODE_NAMES[NBALANCE_MODES + 1] = {
    [BALANCE_FLOWLET] = "flowlet", [BALANCE_PACKET] = "packet", [BALANCE_SPRAY] = "spray",
};

#define ADMITTED (-1)

static inline void count_drop(Drops *d, int reason, long long size) { d->n[reason]++; d->b[reason] += size; }

static int failed(Core *c, int error)
{
    c->error = error;
    return -1;
}

static inline void release(Core *c, Frame f) { c->host.frame_release(c->host.ctx, f.ref); }

/* ---- the MMU (rocelab.switch.mmu) ------------------------------------------------------ */

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

static inline void pg_hold(Pg *pg, long long n)  /* PgBuffer.hold */
{
    long long room = pg->s.reserved - pg->s.reserved_used;
    pg->s.reserved_used += room;
    pg->headroom_used += n - room;
    pg->held_used += n - room;
}

static inline void pg_release(Pg *pg, long long n)  /* PgBuffer.release */
{
    Pool *pool = pg->s.pool;
    if (pg->headroom_used) {
        long long from_headroom = n < pg->headroom_used ? n : pg->headroom_used;
        long long from_held = from_headroom < pg->held_used ? from_headroom : pg->held_used;
        pg->headroom_used -= from_headroom;
        pg->held_used -= from_held;
        if (pool && pool->headroom_size) pool->headroom_used -= from_headroom - from_held;
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

/* ---- ports: the link's frames, queues, pause timers ----------------------------------- */

/* A full ring of `size`-byte slots (a queue's items, a link's frames) unrolled into an array
   twice as large, its head at 0. */
static int grow_ring(Core *c, void **slots, int *cap, int *head, int count, size_t size)
{
    int grown = *cap ? *cap * 2 : 16;
    char *fresh = malloc((size_t)grown * size);
    if (!fresh) return failed(c, FP_ENOMEM);
    for (int i = 0; i < count; i++)
        memcpy(fresh + (size_t)i * size, (char *)*slots + (size_t)((*head + i) % *cap) * size, size);
    free(*slots);
    *slots = fresh;
    *cap = grown;
    *head = 0;
    return 0;
}

static int queue_push(Core *c, Queue *q, Frame frame, Pg *pg)
{
    if (q->count == q->cap && grow_ring(c, (void **)&q->items, &q->cap, &q->head, q->count, sizeof(Item)) < 0)
        return -1;
    Item *it = &q->items[(q->head + q->count) % q->cap];
    it->frame = frame;
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

static int link_push(Core *c, Port *p, double release_s, Frame frame)
{
    if (p->link_count == p->link_cap
        && grow_ring(c, (void **)&p->link, &p->link_cap, &p->link_head, p->link_count, sizeof(OnLink)) < 0)
        return -1;
    OnLink *slot = &p->link[(p->link_head + p->link_count) % p->link_cap];
    slot->release = release_s;
    slot->frame = frame;
    p->link_count++;
    return 0;
}

/* Link.send: 1 sent (the link owns `frame`), 0 lost (the caller still owns it), -1 error. */
static int link_send(Core *c, Port *p, Frame frame, double now)
{
    int error = 0;
    if (p->loss && c->host.random(c->host.ctx, &error) < p->loss) return error ? failed(c, FP_EHOST) : 0;
    if (error) return failed(c, FP_EHOST);
    double release_s = now + p->delay;
    if (p->jitter) {
        release_s += c->host.uniform(c->host.ctx, -p->jitter, p->jitter, &error);
        if (error) return failed(c, FP_EHOST);
    }
    if (release_s < p->last_release) release_s = p->last_release;
    p->last_release = release_s;
    return link_push(c, p, release_s, frame) < 0 ? -1 : 1;
}

static int link_deliver(Core *c, Port *p, double now, FpEmit emit, void *arg)
{
    while (p->link_count && p->link[p->link_head].release <= now) {
        Frame frame = p->link[p->link_head].frame;
        p->link_head = (p->link_head + 1) % p->link_cap;
        p->link_count--;
        if (emit(c, arg, (int)(p - c->ports), frame) < 0) return -1;
    }
    return 0;
}

static inline int link_due(const Port *p, double now)
{
    return p->link_count && p->link[p->link_head].release <= now;
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

double fp_paused_time_s(const Port *p, int priority, double now)  /* PauseTimers.paused_time_s */
{
    double open_end = now < p->until[priority] ? now : p->until[priority];
    double open = open_end - p->started[priority];
    return p->closed[priority] + (open > 0 ? open : 0.0);
}

/* ---- PFC generation and timers (Switch._send_pfc … _run_timers) ----------------------- */

void fp_reschedule_timers(Core *c)
{
    double t = INFINITY;
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        for (int g = 0; g < PRIO; g++)
            if (p->pgs[g].xoff_active && p->pgs[g].refresh_at < t) t = p->pgs[g].refresh_at;
        for (int q = 0; q < PRIO; q++) {
            if (!p->queues[q].watched) continue;
            double due = wd_due(&p->queues[q]);
            if (!isnan(due) && due < t) t = due;
        }
    }
    c->next_timer = t;
}

static int send_pfc(Core *c, Pg *pg, Frame frame, double now)
{
    Port *p = &c->ports[pg->port];
    for (int i = 0; i < pg->npri; i++) p->pfc_tx[pg->pri[i]]++;
    c->pfc_sent = 1;
    c->host.frame_retain(c->host.ctx, frame.ref);
    int sent = link_send(c, p, frame, now);
    if (sent != 1) release(c, frame);
    if (sent == 0) count_drop(&p->drops, R_IMPAIRMENT_LOSS, frame.size);
    return sent < 0 ? -1 : 0;
}

static int send_xoff(Core *c, Pg *pg, double now, double due)  /* Switch._send_xoff */
{
    pg->xoff_active = 1;
    pg->xoff_due = due;
    pg->xoff_left = now;
    pg->refresh_at = now + c->ports[pg->port].pfc_refresh_s;
    if (send_pfc(c, pg, pg->xoff_frame, now) < 0) return -1;
    fp_reschedule_timers(c);
    return 0;
}

static int send_xon(Core *c, Pg *pg, double now)
{
    pg->xoff_active = 0;
    pg->refresh_at = INFINITY;
    if (send_pfc(c, pg, pg->xon_frame, now) < 0) return -1;
    fp_reschedule_timers(c);
    return 0;
}

static inline int release_item(Core *c, Queue *q, long long size, Pg *pg, double now)  /* Switch._release */
{
    q->depth -= size;
    give_back(&q->s, size);
    pg_release(pg, size);
    if (pg->xoff_active && pg_should_resume(pg)) return send_xon(c, pg, now);
    return 0;
}

static int ignore_pause(Core *c, Port *p, Queue *q, double now)  /* Switch._ignore_pause */
{
    for (int i = 0; i < q->npri; i++) pause_priority(p, q->pri[i], now, 0.0);
    q->paused_until = now;
    if (q->wd_stormed && q->wd_action == WD_DROP) {
        q->dropping = 1;
        while (q->count) {
            Item it = queue_pop(q);
            p->backlog--;
            release(c, it.frame);
            if (release_item(c, q, it.frame.size, it.pg, now) < 0) return -1;
            count_drop(&q->drops, R_PFCWD_DROP, it.frame.size);
        }
    }
    if (p->backlog) p->next_tx = now;
    return 0;
}

static int run_timers(Core *c, double now)
{
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        for (int g = 0; g < PRIO; g++) {
            Pg *pg = &p->pgs[g];
            if (!pg->xoff_active || pg->refresh_at > now) continue;
            if (pg_should_resume(pg)) {
                if (send_xon(c, pg, now) < 0) return -1;
            } else {
                pg->refresh_at = now + p->pfc_refresh_s;
                if (send_pfc(c, pg, pg->xoff_frame, now) < 0) return -1;
            }
        }
    }
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        for (int k = 0; k < PRIO; k++) {
            Queue *q = &p->queues[k];
            if (!q->watched) continue;
            double due = wd_due(q);
            if (isnan(due)) {
                q->watched = 0;
            } else if (due <= now) {
                int transition = wd_evaluate(q, now);
                if (transition == STORM_DETECTED && wd_ignores_pause(q)) {
                    if (ignore_pause(c, p, q, now) < 0) return -1;
                } else if (transition == STORM_RESTORED) {
                    q->dropping = 0;
                }
                if (isnan(wd_due(q))) q->watched = 0;
            }
        }
    }
    fp_reschedule_timers(c);
    return 0;
}

/* ---- MAC Control in (Switch._receive_mac_control, _receive_pfc) ------------------------ */

static void receive_pfc(Core *c, Port *p, const unsigned char *f, double now)
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
        pause_priority(p, priority, now, quanta * (double)PFC_QUANTUM_BITS / p->rate);
        double until = -INFINITY;
        for (int i = 0; i < q->npri; i++)
            if (p->until[q->pri[i]] > until) until = p->until[q->pri[i]];
        q->paused_until = until;
    }
    if (p->backlog) p->next_tx = now;
    if (watch) fp_reschedule_timers(c);
}

static void receive_mac_control(Core *c, Port *p, const unsigned char *frame, long long size, double now)
{
    unsigned char f[ETH_ZLEN];  /* read padded, as rocelab.ethernet.padded does */
    memset(f, 0, sizeof f);
    memcpy(f, frame, size < ETH_ZLEN ? (size_t)size : ETH_ZLEN);
    int opcode = f[14] << 8 | f[15];
    if (opcode == MAC_CONTROL_PFC) {
        receive_pfc(c, p, f, now);
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
    p->link_paused_until = now + (f[16] << 8 | f[17]) * (double)PFC_QUANTUM_BITS / p->rate;
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

static Flow *flow_insert(Core *c, Port *p, uint64_t k1, uint64_t k2)
{
    if ((long long)p->nflows >= c->flow_cache_max) {  /* flushed rather than grown, as _resolve does */
        memset(p->flows, 0, (p->flow_mask + 1) * sizeof(Flow));
        p->nflows = 0;
    }
    if (!p->flows || (p->nflows + 1) * 2 > p->flow_mask + 1) {
        size_t n = p->flows ? (p->flow_mask + 1) * 2 : 64;
        Flow *fresh = calloc(n, sizeof(Flow));
        if (!fresh) {
            failed(c, FP_ENOMEM);
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
        free(old);
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

/* A flow the cache has not seen: the host routes it (the reference's _route). */
static Flow *resolve(Core *c, int port_index, Port *p, uint64_t k1, uint64_t k2, const FlowKey *key)
{
    Flow decision = {0};
    if (c->host.resolve(c->host.ctx, port_index, key, &decision) < 0) {
        failed(c, FP_EHOST);
        return NULL;
    }
    Flow *f = flow_insert(c, p, k1, k2);
    if (!f) return NULL;
    f->egress = decision.egress;
    f->queue = decision.queue;
    f->pg = decision.pg;
    f->lossless = decision.lossless;
    f->group = decision.group;
    f->tc = decision.tc;
    f->hash = decision.hash;
    memcpy(f->macs, decision.macs, sizeof f->macs);
    return f;
}

/* ---- adaptive ECMP (balance.EcmpGroup) ------------------------------------------------- */

/* Member.quality: lower is better, the weighted load band plus the weighted queue band. */
static int member_quality(Core *c, const Group *g, GroupMember *m, double now)
{
    const Port *port = &c->ports[m->port];
    long long tx = 0, depth = 0;
    for (int k = 0; k < PRIO; k++) {
        tx += port->queues[k].tx_bytes;
        depth += port->queues[k].depth;
    }
    if (isnan(m->sampled_s) || tx < m->sampled_tx) {  /* first look, or counters cleared */
        m->sampled_s = now;
        m->sampled_tx = tx;
    } else if (now - m->sampled_s >= g->sampling_s) {
        double sample = (double)((tx - m->sampled_tx) * 8) / ((now - m->sampled_s) * port->rate);
        m->load += ((sample < 1.0 ? sample : 1.0) - m->load) * EWMA_WEIGHT;
        m->sampled_s = now;
        m->sampled_tx = tx;
    }
    int load_band = (int)(m->load * QUALITY_BANDS), queue_band = (int)(depth / QUEUE_BAND_BYTES);
    if (load_band > QUALITY_BANDS - 1) load_band = QUALITY_BANDS - 1;
    if (queue_band > QUALITY_BANDS - 1) queue_band = QUALITY_BANDS - 1;
    return (int)(g->load_weight * load_band + g->queue_weight * queue_band);
}

/* The member whose score is least, ties broken by the flow's hash (EcmpGroup._best, _packet). */
static int least(const long long *score, int n, uint32_t hash)
{
    long long low = score[0];
    int ties = 0;
    for (int i = 1; i < n; i++)
        if (score[i] < low) low = score[i];
    for (int i = 0; i < n; i++) ties += score[i] == low;
    int nth = (int)(hash % (uint32_t)ties);
    for (int i = 0;; i++)
        if (score[i] == low && nth-- == 0) return i;
}

/* EcmpGroup.pick: the member's index, or -1 on the host's error. */
static int group_pick(Core *c, Group *g, const Flow *flow, double now)
{
    if (g->mode == BALANCE_SPRAY) {
        int m = c->host.spray(c->host.ctx, (int)(g - c->groups), g->nmembers);
        return m < 0 ? failed(c, FP_EHOST) : m;
    }
    long long score[g->nmembers];
    if (g->mode == BALANCE_PACKET) {
        /* how long the frame would wait at each member, in grades of QUEUE_BAND_BYTES at the
           fastest member's rate */
        double wait[g->nmembers], fastest = INFINITY;
        for (int i = 0; i < g->nmembers; i++) {
            const Port *port = &c->ports[g->members[i].port];
            double line = port->busy_until - now;
            wait[i] = (double)port->queues[g->members[i].queue_of_tc[flow->tc]].depth * port->s_per_byte
                      + (line > 0 ? line : 0.0);
            if (port->s_per_byte < fastest) fastest = port->s_per_byte;
        }
        double grade = QUEUE_BAND_BYTES * fastest;
        for (int i = 0; i < g->nmembers; i++) score[i] = (long long)(wait[i] / grade);
        return least(score, g->nmembers, flow->hash);
    }
    long long slot = (long long)(flow->hash % (uint64_t)g->max_flows);
    int active = now - g->last_s[slot] < g->idle_s;
    g->last_s[slot] = now;
    if (active) {
        if (g->flow[slot] != flow->hash) {
            g->collisions++;
            g->flow[slot] = flow->hash;
        }
        return g->member[slot];
    }
    for (int i = 0; i < g->nmembers; i++) score[i] = member_quality(c, g, &g->members[i], now);
    int best = least(score, g->nmembers, flow->hash);
    if (g->flow[slot] != -1 && best != g->member[slot]) g->reassignments++;
    g->member[slot] = best;
    g->flow[slot] = flow->hash;
    return best;
}

static int wred_decide(Core *c, Queue *q, int ecn, int *verdict)  /* Wred.decide: 0 pass, 1 mark, 2 drop */
{
    long long depth = q->depth;
    *verdict = 0;
    if (depth <= q->wred_min) return 0;
    if (depth <= q->wred_max) {
        int error = 0;
        double r = c->host.random(c->host.ctx, &error);
        if (error) return failed(c, FP_EHOST);
        if (r >= (double)(depth - q->wred_min) * q->wred_slope) return 0;
    }
    if (q->wred_marks && ecn) *verdict = ecn == ECN_CE ? 0 : 1;
    else *verdict = q->wred_drops ? 2 : 0;
    return 0;
}

/* pipeline._owed_to_late_xoff: a frame refused for headroom that reached a paused PG only because
   its XOFF left late */
static int owed_to_late_xoff(const Core *c, const Port *p, const Pg *pg, double arrival)
{
    if (!pg->xoff_active) return 0;
    double reach = 2 * (p->delay + p->jitter) + (double)((c->max_frame + ETH_ZLEN) * 8) / p->rate;
    return pg->xoff_due + reach < arrival && arrival < pg->xoff_left + reach;
}

static int ipv4(Core *c, int port_index, const unsigned char *f, long long size, double now, double arrival)
{
    Port *p = &c->ports[port_index];
    if (memcmp(f, p->mac, 6) && !(f[0] & 1)) {
        count_drop(&p->drops, R_NOT_FOR_US, size);
        return 0;
    }
    int ihl, total_len, frag, ttl;
    FlowKey key = {0};
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
    key.tos = ip[1];
    total_len = ip[2] << 8 | ip[3];
    frag = ip[6] << 8 | ip[7];
    ttl = ip[8];
    key.proto = ip[9];
    key.src = (uint32_t)ip[12] << 24 | ip[13] << 16 | ip[14] << 8 | ip[15];
    key.dst = (uint32_t)ip[16] << 24 | ip[17] << 16 | ip[18] << 8 | ip[19];
    if (size >= IP_AT + ihl + 4) {
        key.sport = ip[ihl] << 8 | ip[ihl + 1];
        key.dport = ip[ihl + 2] << 8 | ip[ihl + 3];
    }
    if (total_len > size - ETH_HLEN) {
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
    if ((key.proto != IPPROTO_UDP && key.proto != IPPROTO_TCP) || frag & IPV4_FRAGMENT_MASK || total_len < ihl + 4)
        key.sport = key.dport = 0;

    uint64_t k1 = (uint64_t)key.src << 32 | key.dst;
    uint64_t k2 = (uint64_t)key.tos << 40 | (uint64_t)key.proto << 32 | (uint64_t)key.sport << 16
                  | (uint64_t)key.dport;
    Flow *flow = flow_find(p, k1, k2);
    if (!flow) {
        flow = resolve(c, port_index, p, k1, k2, &key);
        if (!flow) return -1;
    }
    if (flow->egress < 0 && flow->group < 0) {
        count_drop(&p->drops, flow->queue, size);
        return 0;
    }
    Pg *pg = &p->pgs[flow->pg];
    int lossless = flow->lossless;
    if (ttl <= 1) {
        if (c->host.trap(c->host.ctx, port_index, f, size) < 0) return failed(c, FP_EHOST);
        count_drop(&p->drops, R_TTL_EXPIRED, size);
        return 0;
    }
    const unsigned char *macs = flow->macs;
    Port *egress;
    Queue *queue;
    if (flow->group >= 0) {  /* _Steer.pick */
        Group *g = &c->groups[flow->group];
        int member = group_pick(c, g, flow, now);
        if (member < 0) return -1;
        GroupMember *m = &g->members[member];
        m->frames++;
        m->bytes += size;
        egress = &c->ports[m->port];
        queue = &egress->queues[m->queue_of_tc[flow->tc]];
        macs = m->macs;
    } else {
        egress = &c->ports[flow->egress];
        queue = &egress->queues[flow->queue];
    }
    if (queue->dropping) {
        count_drop(&queue->drops, R_PFCWD_DROP, size);
        return 0;
    }
    int verdict = 0;
    if (queue->has_wred && queue->depth >= queue->wred_min) {
        if (wred_decide(c, queue, key.tos & ECN_MASK, &verdict) < 0) return -1;
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
        if (reason != R_HEADROOM_EXCEEDED || !owed_to_late_xoff(c, p, pg, arrival)) {
            count_drop(&pg->drops, reason, size);
            return 0;
        }
        pg_hold(pg, size);
        pg->held_packets++;
        pg->held_bytes += size;
    }
    take(&queue->s, size);  /* QueueBuffer.add */
    queue->depth += size;
    if (queue->depth > queue->wm) queue->wm = queue->depth;
    pg->rx_packets++;
    pg->rx_bytes += size;

    Frame out;
    unsigned char *o;
    if (c->host.frame_new(c->host.ctx, size, &out, &o) < 0) return failed(c, FP_EHOST);
    memcpy(o, f, (size_t)size);
    memcpy(o, macs, 12);
    o[IP_AT + 8] = (unsigned char)(ttl - 1);
    long delta = TTL_DECREMENT_DELTA;
    if (verdict == 1) {
        o[IP_AT + 1] = (unsigned char)(key.tos | ECN_CE);
        delta += ECN_CE - (key.tos & ECN_MASK);
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
    if (queue_push(c, queue, out, pg) < 0) {
        release(c, out);
        return -1;
    }
    egress->backlog++;
    if (lossless && !pg->xoff_active && pg->headroom_used > 0 && send_xoff(c, pg, now, arrival) < 0) return -1;
    if (egress->next_tx > now) {
        double start = egress->busy_until < now ? now : egress->busy_until;
        if (start < egress->next_tx) egress->next_tx = start;
    }
    return 0;
}

/* Switch.receive: one frame in at port `port_index`. */
int fp_receive(Core *c, int port_index, const unsigned char *f, long long size, double now, double arrival)
{
    Port *p = &c->ports[port_index];
    p->rx_packets++;
    p->rx_bytes += size;
    if (size >= MIN_IPV4_FRAME && size <= c->max_frame && f[12] == ETH_P_IP >> 8 && f[13] == (ETH_P_IP & 0xFF))
        return ipv4(c, port_index, f, size, now, arrival);
    /* Switch._not_plain_ipv4 */
    if (size > c->max_frame) {
        count_drop(&p->drops, R_OVERSIZED, size);
        return 0;
    }
    if (size < ETH_HLEN) {
        count_drop(&p->drops, R_TRUNCATED, size);
        return 0;
    }
    int ethertype = f[12] << 8 | f[13];
    if (ethertype == ETH_P_PAUSE) {  /* MAC Control: PAUSE or PFC */
        receive_mac_control(c, p, f, size, now);
        return 0;
    }
    if (ethertype == ETH_P_8021Q) {
        if (size < ETH_HLEN + 4) {
            count_drop(&p->drops, R_TRUNCATED, size);
            return 0;
        }
        if ((f[16] << 8 | f[17]) != ETH_P_IP) {
            count_drop(&p->drops, R_NOT_IPV4, size);
            return 0;
        }
        if (size - 4 < MIN_IPV4_FRAME) {
            count_drop(&p->drops, R_TRUNCATED, size);
            return 0;
        }
        unsigned char *untagged = malloc((size_t)size - 4);
        if (!untagged) return failed(c, FP_ENOMEM);
        memcpy(untagged, f, 12);
        memcpy(untagged + 12, f + 16, (size_t)size - 16);
        int r = ipv4(c, port_index, untagged, size - 4, now, arrival);
        free(untagged);
        return r;
    }
    count_drop(&p->drops, ethertype == ETH_P_IP ? R_TRUNCATED : R_NOT_IPV4, size);
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
            long long size = q->items[q->head].frame.size;
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

static int transmit(Core *c, Port *p, double now, FpEmit emit, void *arg)
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
        if (release_item(c, q, it.frame.size, it.pg, now) < 0) {
            release(c, it.frame);
            return -1;
        }
        q->tx_packets++;
        q->tx_bytes += it.frame.size;
        start += it.frame.size * p->s_per_byte;
        if (!impaired) {
            if (emit(c, arg, (int)(p - c->ports), it.frame) < 0) return -1;
        } else {
            int sent = link_send(c, p, it.frame, now);
            if (sent != 1) release(c, it.frame);
            if (sent < 0) return -1;
            if (sent == 0) count_drop(&p->drops, R_IMPAIRMENT_LOSS, it.frame.size);
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

/* Switch.poll: emit every frame due by `now`. */
int fp_poll(Core *c, double now, FpEmit emit, void *arg)
{
    c->pfc_sent = 0;
    if (c->next_timer <= now && run_timers(c, now) < 0) return -1;
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        if (link_due(p, now) && link_deliver(c, p, now, emit, arg) < 0) return -1;
        if (p->next_tx <= now) {
            if (transmit(c, p, now, emit, arg) < 0) return -1;
            if (link_due(p, now) && link_deliver(c, p, now, emit, arg) < 0) return -1;
        }
    }
    if (c->pfc_sent) {
        for (int i = 0; i < c->nports; i++) {
            Port *p = &c->ports[i];
            if (link_due(p, now) && link_deliver(c, p, now, emit, arg) < 0) return -1;
        }
    }
    return 0;
}

/* Switch.next_event: when poll next has work (INFINITY: nothing pending). */
double fp_next_due(const Core *c)
{
    double t = c->next_timer;
    for (int i = 0; i < c->nports; i++) {
        const Port *p = &c->ports[i];
        if (p->next_tx < t) t = p->next_tx;
        if (p->link_count && p->link[p->link_head].release < t) t = p->link[p->link_head].release;
    }
    return t;
}

void fp_flush_flows(Core *c)
{
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        if (p->flows) memset(p->flows, 0, (p->flow_mask + 1) * sizeof(Flow));
        p->nflows = 0;
    }
}

/* ---- building and freeing ---------------------------------------------------------------- */

static void free_groups(Core *c)
{
    for (int i = 0; c->groups && i < c->ngroups; i++) {
        free(c->groups[i].members);
        free(c->groups[i].last_s);
        free(c->groups[i].member);
        free(c->groups[i].flow);
    }
    free(c->groups);
    c->groups = NULL;
    c->ngroups = 0;
}

int fp_alloc_groups(Core *c, int ngroups)
{
    free_groups(c);
    c->groups = calloc((size_t)ngroups + 1, sizeof(Group));
    if (!c->groups) return failed(c, FP_ENOMEM);
    c->ngroups = ngroups;
    return 0;
}

int fp_alloc_group(Core *c, Group *g, int nmembers, long long max_flows)
{
    g->members = calloc((size_t)nmembers, sizeof(GroupMember));
    g->last_s = calloc((size_t)max_flows, sizeof(double));
    g->member = calloc((size_t)max_flows, sizeof(int));
    g->flow = calloc((size_t)max_flows, sizeof(long long));
    if (!g->members || !g->last_s || !g->member || !g->flow) return failed(c, FP_ENOMEM);
    g->nmembers = nmembers;
    return 0;
}

int fp_alloc(Core *c, int nports, int npools)
{
    c->ports = calloc((size_t)nports + 1, sizeof(Port));
    c->pools = calloc((size_t)npools + 1, sizeof(Pool));
    if (!c->ports || !c->pools) {
        free(c->ports);
        free(c->pools);
        c->ports = NULL;
        c->pools = NULL;
        return failed(c, FP_ENOMEM);
    }
    c->nports = nports;
    c->npools = npools;
    c->next_timer = INFINITY;
    for (int i = 0; i < nports; i++) {
        Port *p = &c->ports[i];
        p->next_tx = INFINITY;
        for (int k = 0; k < PRIO; k++) {
            p->pgs[k].port = i;
            p->queues[k].index = k;
            p->queues[k].wd_since = NAN;
        }
    }
    return 0;
}

void fp_ready(Core *c)
{
    for (int i = 0; i < c->nports; i++) {
        Port *p = &c->ports[i];
        p->nstrict = 0;
        for (int k = PRIO - 1; k >= 0; k--) {  /* STRICT: highest index first */
            Queue *q = &p->queues[k];
            q->drr = q->scheduler != SCHED_STRICT;
            if (q->drr) p->has_drr = 1;
            else p->strict[p->nstrict++] = k;
        }
    }
    fp_reschedule_timers(c);
}

void fp_free(Core *c)
{
    for (int i = 0; c->ports && i < c->nports; i++) {
        Port *p = &c->ports[i];
        for (int k = 0; k < PRIO; k++) {
            Queue *q = &p->queues[k];
            while (q->count) release(c, queue_pop(q).frame);
            free(q->items);
            if (p->pgs[k].xoff_frame.ref) release(c, p->pgs[k].xoff_frame);
            if (p->pgs[k].xon_frame.ref) release(c, p->pgs[k].xon_frame);
        }
        for (int j = 0; j < p->link_count; j++) release(c, p->link[(p->link_head + j) % p->link_cap].frame);
        free(p->link);
        free(p->flows);
    }
    free(c->ports);
    free(c->pools);
    free_groups(c);
    c->ports = NULL;
    c->pools = NULL;
    c->nports = c->npools = 0;
}

/* ---- the receive ring (rocelab.kernel.ring.RxRing) -------------------------------------- */

int fp_geometry_fits(const Geometry *g, long ring_bytes)
{
    return g->slots > 0 && g->per_block > 0 && g->slot_bytes >= (long)sizeof(struct tpacket2_hdr)
        && (g->slots - 1) / g->per_block * g->block_bytes + (g->slots - 1) % g->per_block * g->slot_bytes
           + g->slot_bytes <= ring_bytes;
}

/* RxRing.read with this core's receive: the frames from slot *head on, each handed to the
   pipeline and its slot given back to the kernel, until `max_frames` frames or at least
   `max_bytes` bytes or an empty slot, each taken at `now` having arrived as long before as it
   waited in the ring (`wall`: the epoch time of `now`). Returns the frames read (-1: an error,
   the slot given back all the same); *first_s is the first one's receive time (epoch seconds). */
static long read_ring(Core *c, int port_index, unsigned char *base, const Geometry *g, long *head,
                      long max_frames, long max_bytes, double now, double wall, double *first_s, int *empty)
{
    long n = 0, nbytes = 0, h = *head;
    *empty = 0;
    *first_s = 0.0;
    for (;;) {
        struct tpacket2_hdr *slot
            = (struct tpacket2_hdr *)(base + h / g->per_block * g->block_bytes + h % g->per_block * g->slot_bytes);
        if (!(__atomic_load_n(&slot->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {  /* not filled yet */
            *empty = 1;
            break;
        }
        if (n == max_frames || nbytes >= max_bytes) break;
        uint32_t snaplen = slot->tp_snaplen;
        double received = slot->tp_sec + slot->tp_nsec * 1e-9;
        if (!n) *first_s = received;
        if ((long)slot->tp_mac + (long)snaplen > g->slot_bytes) snaplen = 0;  /* never read past the slot */
        double arrival = wall > received ? now - (wall - received) : now;
        int error = fp_receive(c, port_index, (unsigned char *)slot + slot->tp_mac, snaplen, now, arrival) < 0;
        __atomic_store_n(&slot->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);  /* the kernel's again */
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

/* ---- the event loop (fp_serve) -------------------------------------------------------------
rocelab.kernel.loop.Loop.run, in C, for as long as frames and timers are all there is to do:
switchd calls it and gets back control only when a control socket or a netlink watcher is
readable, a trapped frame waits for the CPU's answer, a signal arrived, or nothing happened
for idle_s. What the Python loop does per wake-up (the select list, next_event, the ring read,
the lateness bookkeeping, poll, the sends) costs here a few microseconds instead of tens.

It serves one core or several: every switch of a lab in one process (the netns engine's
switchd) sleeps once for all of them, and a frame one of them sends to another is in the
other's ring when send() returns (a veth delivers in the sender's system call), read in the
same wake-up instead of waking a second process. The loop's clock, its counts and its last
wake-up's end are the first core's: the process's, as the Python loop's are.

Events due within `early_s` of the real clock run at once: the loop's clock moves ahead to
their time (never back), so they run in the same wake-up as what woke it. A sleep of this
machine's kernel costs more CPU than the wait it saves when the wait is that short, and comes
back later than asked: so a sleep for a later event ends early_s before it (sleep_s). */

typedef struct { const int *fds; LoopCounts *lc; } Sending;  /* one core's sockets, the loop's counts */

static int send_frame(Core *c, void *arg, int port, Frame frame)
{
    const Sending *out = arg;
    /* a full peer backlog or a downed link: count, never stop */
    if (send(out->fds[port], frame.data, (size_t)frame.size, 0) < 0)
        out->lc->tx_errors[errno < ERRNO_SLOTS ? errno : 0]++;
    else
        out->lc->tx++;
    release(c, frame);
    return 0;
}

/* The loop reports what failed in its first core, whichever core it was. */
static void raise_in_first(Core *const *cores, int k)
{
    if (k) cores[0]->error = cores[k]->error, cores[0]->error_errno = cores[k]->error_errno;
}

/* Loop._transmit: run the due events at `now` of every core that has some or received frames
   (`touched`), and send what leaves. How late the earliest of them ran is one event, as the
   Python loop records its core's next event once per transmit. -1: an error, in the first core. */
static int send_due(Core *const *cores, int ncores, const int *first, const double *due, const char *touched,
                    LoopCounts *lc, const Serve *s, double now)
{
    double earliest = INFINITY;
    for (int k = 0; k < ncores; k++)
        if (due[k] < earliest) earliest = due[k];
    if (earliest <= now) record_late(lc, s->bounds, s->nbounds, now - earliest);
    for (int k = 0; k < ncores; k++) {
        if (!touched[k] && due[k] > now) continue;
        Sending out = {s->fds + first[k], lc};
        if (fp_poll(cores[k], now, send_frame, &out) < 0) {
            raise_in_first(cores, k);
            return -1;
        }
    }
    return 0;
}

/* The ports and other descriptors epoll reported: ports into `ready` (where not listed
   already; a port whose socket holds an error has it cleared), the others into `revents`
   (1 where one was). Returns the new length of `ready`, or -1 where epoll failed. */
static int waited(int epfd, struct epoll_event *ev, int nev, const struct timespec *ts, const Serve *s, int n,
                  char *listed, int *ready, int *unmeasured, int nready, int *others_ready)
{
    int r = epoll_until(epfd, ev, nev, ts);
    for (int e = 0; e < r; e++) {
        int i = (int)ev[e].data.u32;
        if (i >= n) {
            s->others_revents[i - n] = 1;
            *others_ready = 1;
            continue;
        }
        if (ev[e].events & EPOLLERR) clear_error(s->fds[i]);
        if (ev[e].events & EPOLLIN && !listed[i]) unmeasured[nready] = 1, listed[i] = 1, ready[nready++] = i;
    }
    return r < 0 ? -1 : nready;
}

int fp_serve(Core *const *cores, int ncores, const Serve *s)
{
    Core *c0 = cores[0];
    int n = 0, nothers = s->nothers, handed_back = 0, result = -1, epfd = epoll_create1(EPOLL_CLOEXEC);
    for (int k = 0; k < ncores; k++) n += cores[k]->nports;
    struct epoll_event *ev = calloc((size_t)(n + nothers + 1), sizeof(struct epoll_event));
    int *ready = calloc((size_t)n + 1, sizeof(int));
    int *unmeasured = calloc((size_t)n + 1, sizeof(int));
    int *core_of = calloc((size_t)n + 1, sizeof(int));    /* a port (in Serve's order): its core */
    int *first = calloc((size_t)ncores + 1, sizeof(int));  /* a core: its first port in Serve's order */
    double *due = calloc((size_t)ncores + 1, sizeof(double));
    char *touched = calloc((size_t)ncores + 1, 1);
    char *listed = calloc((size_t)n + 1, 1);  /* a port: in `ready` */
    if (!ev || !ready || !unmeasured || !core_of || !first || !due || !touched || !listed) {
        failed(c0, FP_ENOMEM);
        goto out;
    }
    for (int k = 0, i = 0; k < ncores; k++) {
        first[k] = i;
        for (int j = 0; j < cores[k]->nports; j++) core_of[i++] = k;
    }
    /* epoll: a wait costs what is ready, not every port (a lab's switches have dozens) */
    for (int i = 0; epfd >= 0 && i < n + nothers; i++) {
        struct epoll_event add = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, i < n ? s->fds[i] : s->others[i - n], &add) < 0) {
            close(epfd);
            epfd = -1;
        }
    }
    if (epfd < 0) {
        c0->error_errno = errno;
        failed(c0, FP_EOS);
        goto out;
    }
    for (int i = 0; i < nothers; i++) s->others_revents[i] = 0;
    LoopCounts *lc = &c0->loop;
    static const struct timespec at_once = {0, 0};
    while (!handed_back) {
        double clock = clock_s(CLOCK_MONOTONIC), next = INFINITY;
        for (int k = 0; k < ncores; k++) {
            due[k] = fp_next_due(cores[k]);
            if (due[k] < next) next = due[k];
        }
        double now = run_early(next, clock, &c0->ahead, s->early_s);
        double wait = sleep_s(next, now, clock, s->early_s, s->idle_s);
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        void *token = c0->host.sleep_begin(c0->host.ctx);
        int nready = waited(epfd, ev, n + nothers, &ts, s, n, listed, ready, unmeasured, 0, &handed_back);
        int err = errno;
        c0->host.sleep_end(c0->host.ctx, token);
        if (nready < 0) {
            if (err != EINTR) {
                c0->error_errno = err;
                failed(c0, FP_EOS);
                goto out;
            }
            if (c0->host.signalled(c0->host.ctx) < 0) {  /* the host's handlers (Loop.stop) */
                failed(c0, FP_EHOST);
                goto out;
            }
            break;
        }
        double woke = clock_s(CLOCK_MONOTONIC);
        now = run_early(next, woke, &c0->ahead, s->early_s);  /* woken early_s before it, as asked */
        if (wait > 0) lc->wakeups++;  /* a sleep, and what woke it: the costly part */
        if (!nready && !handed_back && next == INFINITY) break;  /* idle: let the host look at the world */
        if (!nready) {
            long sent = lc->tx;
            memset(touched, 0, (size_t)ncores);
            if (send_due(cores, ncores, first, due, touched, lc, s, now) < 0) goto out;
            /* what the cores sent each other is in their rings now (a veth delivers in the
               sender's send()): read in this wake-up */
            if (ncores > 1 && lc->tx != sent)
                nready = waited(epfd, ev, n + nothers, &at_once, s, n, listed, ready, unmeasured, 0, &handed_back);
            if (nready < 0) nready = 0;
            for (int k = 0; nready && k < ncores; k++) due[k] = fp_next_due(cores[k]);  /* those ran */
        }
        /* Loop._drain: a round from each readable port in turn, a core run after every round it
           received in, or had something due */
        for (long rnd = 0; nready && rnd < s->drain_rounds; rnd++) {
            now = clock_s(CLOCK_MONOTONIC);
            if (now < c0->ahead) now = c0->ahead;
            if (rnd)
                for (int k = 0; k < ncores; k++) due[k] = fp_next_due(cores[k]);
            memset(touched, 0, (size_t)ncores);
            double wall = clock_s(CLOCK_REALTIME);
            for (int j = 0; j < nready;) {
                int i = ready[j], k = core_of[i], empty;
                double first_s;
                long got = read_ring(cores[k], i - first[k], s->rings[i], &s->geometry, &s->heads[i],
                                     s->round_frames, s->round_bytes, now, wall, &first_s, &empty);
                if (got < 0) {
                    raise_in_first(cores, k);
                    goto out;
                }
                lc->rx += got;
                touched[k] |= got > 0;
                if (got && unmeasured[j]) {  /* the port's oldest frame: how long it waited to be read */
                    double waited_s = clock_s(CLOCK_REALTIME) - first_s;
                    record_late(lc, s->bounds, s->nbounds, waited_s > 0 ? waited_s : 0.0);
                    unmeasured[j] = 0;
                }
                if (empty) {
                    listed[i] = 0;
                    ready[j] = ready[--nready];
                    unmeasured[j] = unmeasured[nready];
                } else {
                    j++;
                }
            }
            long sent = lc->tx;
            if (send_due(cores, ncores, first, due, touched, lc, s, now) < 0) goto out;
            if (ncores > 1 && lc->tx != sent) {
                int more = waited(epfd, ev, n + nothers, &at_once, s, n, listed, ready, unmeasured, nready,
                                  &handed_back);
                if (more > 0) nready = more;
            }
        }
        for (int j = 0; j < nready; j++) listed[ready[j]] = 0;  /* left for the next wake-up: epoll says again */
        end_wake(&c0->loop, &c0->wake_ended, s->bounds, s->nbounds, woke);
        int trapped = 0;
        for (int k = 0; k < ncores; k++) {
            long waiting = cores[k]->host.trapped_waiting(cores[k]->host.ctx);
            if (waiting < 0) {
                failed(c0, FP_EHOST);
                goto out;
            }
            trapped |= waiting > 0;
        }
        if (trapped) break;
    }
    result = handed_back;
out:
    if (epfd >= 0) close(epfd);
    free(ev);
    free(ready);
    free(unmeasured);
    free(core_of);
    free(first);
    free(due);
    free(touched);
    free(listed);
    return result;
}

/* ---- the wire constants this core uses, in rocelab.ethernet's and rocelab.kernel.ring's words -- */

const WireConstant WIRE_CONSTANTS[] = {
    {"ethernet.PRIORITIES", PRIO}, {"ethernet.ETH_P_IPV4", ETH_P_IP}, {"ethernet.ETH_P_8021Q", ETH_P_8021Q},
    {"ethernet.ETH_P_MAC_CONTROL", ETH_P_PAUSE}, {"ethernet.MAC_CONTROL_PAUSE", MAC_CONTROL_PAUSE},
    {"ethernet.MAC_CONTROL_PFC", MAC_CONTROL_PFC}, {"ethernet.PFC_QUANTUM_BITS", PFC_QUANTUM_BITS},
    {"ethernet.MIN_FRAME_BYTES", ETH_ZLEN}, {"ethernet.IPPROTO_TCP", IPPROTO_TCP},
    {"ethernet.IPPROTO_UDP", IPPROTO_UDP}, {"ethernet.ECN_MASK", ECN_MASK}, {"ethernet.ECN_CE", ECN_CE},
    {"ring.TP_STATUS_USER", TP_STATUS_USER},
    {"tpacket2_hdr.tp_snaplen", offsetof(struct tpacket2_hdr, tp_snaplen)},
    {"tpacket2_hdr.tp_mac", offsetof(struct tpacket2_hdr, tp_mac)},
    {"tpacket2_hdr.tp_sec", offsetof(struct tpacket2_hdr, tp_sec)},
    {"tpacket2_hdr.tp_nsec", offsetof(struct tpacket2_hdr, tp_nsec)},
    {NULL, 0},
};

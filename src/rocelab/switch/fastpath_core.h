/* The switch pipeline of rocelab.switch.pipeline and switchd's loop, in plain C, without the CPython API.

fastpath_core.c holds the pipeline's stages (ingress, the MMU, PFC and its watchdog, the
schedulers, the shaper, the link), the TPACKET_V2 ring reader and the loop (fp_serve);
_fastpath.c is the CPython binding, which fills these structs from the reference's objects
through its attribute tables and hands the core a Host: how frames are held, the random draws,
a flow's route, a trap. Wire constants come from the kernel's headers where it has them; the
rest are named once here, and the binding exports them (WIRE) for a test to match with
rocelab.ethernet and rocelab.kernel.ring by name.
*/
#ifndef ROCELAB_FASTPATH_CORE_H
#define ROCELAB_FASTPATH_CORE_H

#include <linux/if_ether.h>  /* ETH_HLEN, ETH_ZLEN, ETH_P_IP, ETH_P_8021Q, ETH_P_PAUSE (MAC Control) */
#include <netinet/in.h>       /* IPPROTO_TCP, IPPROTO_UDP */
#include <stddef.h>
#include <stdint.h>

#include "../kernel/agent_loop.h"  /* LoopCounts: what fp_serve counts */

#define PRIO 8
#define IP_AT ETH_HLEN
#define MIN_IPV4_FRAME (ETH_HLEN + 20)
#define MAC_CONTROL_PAUSE 0x0001  /* 802.3x */
#define MAC_CONTROL_PFC 0x0101    /* 802.1Qbb */
#define PFC_QUANTUM_BITS 512
#define IPV4_FRAGMENT_MASK 0x3FFF
#define ECN_MASK 3
#define ECN_CE 3
#define TTL_DECREMENT_DELTA 0xFEFF

/* The drop reasons, in rocelab.switch.counters' words (REASON_NAMES, by enum value). */
enum {
    R_TRUNCATED, R_OVERSIZED, R_NOT_IPV4, R_NOT_FOR_US, R_BAD_IPV4_HEADER, R_BAD_IPV4_CHECKSUM,
    R_MAC_CONTROL_UNSUPPORTED, R_FLOW_CONTROL_DISABLED, R_TTL_EXPIRED, R_NO_ROUTE, R_TO_SELF,
    R_IMPAIRMENT_LOSS, R_HEADROOM_EXCEEDED, R_TAIL_DROP, R_WRED_DROP, R_PFCWD_DROP, NREASONS
};
extern const char *const REASON_NAMES[NREASONS];

/* The SCHEDULER types this core serves, by enum value (pick: STRICT, then DWRR and WRR alike,
   byte-fair), and the features it implements in rocelab.switch.features' names (NULL-ended). */
enum { SCHED_STRICT, SCHED_DWRR, SCHED_WRR, NSCHEDULERS };
extern const char *const SCHEDULER_NAMES[NSCHEDULERS + 1];
extern const char *const FEATURE_NAMES[];
enum { WD_DROP, WD_FORWARD, WD_ALERT, NWD_ACTIONS };
extern const char *const WD_ACTION_NAMES[NWD_ACTIONS + 1];

/* Every wire constant and ring offset this core uses, by the name rocelab.ethernet or
   rocelab.kernel.ring gives it (NULL-ended); the binding exports them as WIRE. */
typedef struct { const char *name; long value; } WireConstant;
extern const WireConstant WIRE_CONSTANTS[];

typedef struct { long long n[NREASONS], b[NREASONS]; } Drops;

/* A frame the host holds (a Python bytes object in the binding): the core keeps `ref` and
   hands it back to the host to retain, release or emit. */
typedef struct FpFrameRef FpFrameRef;
typedef struct { FpFrameRef *ref; const unsigned char *data; long long size; } Frame;

/* ---- the switch's state: one struct per object of the reference ------------------------- */

typedef struct {
    void *host;  /* the host's object this mirrors */
    long long size, headroom_size, shared_used, headroom_used;
} Pool;

typedef struct {  /* mmu._SharedUser */
    Pool *pool;
    long long reserved, static_th, reserved_used, shared_used, shared_wm;
    double alpha;  /* NAN: a static threshold */
} Shared;

typedef struct Pg {
    Shared s;
    void *host;
    Frame xoff_frame, xon_frame;
    long long headroom, xon, xon_offset, headroom_used, headroom_wm, rx_packets, rx_bytes;
    long long held_packets, held_bytes, held_used;  /* past the headroom, owed to a late XOFF: PgBuffer.hold */
    int xoff_active, lossless, port, npri, pri[PRIO];
    double refresh_at, xoff_due, xoff_left;
    Drops drops;
} Pg;

typedef struct { Frame frame; Pg *pg; } Item;

typedef struct {
    Shared s;
    void *host;
    long long depth, wm, quantum, deficit, tx_packets, tx_bytes, ecn_packets, ecn_bytes;
    Item *items;
    int cap, head, count, index, npri, pri[PRIO], scheduler, drr, dropping;
    double paused_until;
    int has_wred, wred_marks, wred_drops;
    long long wred_min, wred_max;
    double wred_slope;
    int has_wd, wd_action, wd_stormed, watched;
    double wd_detect, wd_restore, wd_since /* NAN: None */, wd_last_pause;
    long long wd_detected, wd_restored;
    Drops drops;
} Queue;

typedef struct {  /* a forwarding decision, as pipeline._resolve caches it */
    uint64_t k1, k2;
    int used, egress /* -1: dropped for `queue` (a reason), or steered by `group` */, queue, pg, lossless;
    int group /* -1: none; else an adaptive ECMP group's index, the member picked per frame */, tc;
    uint32_t hash;  /* fib.ecmp_hash of the 5-tuple (a steered flow's) */
    unsigned char macs[12];
} Flow;

/* An ECMP group under a mode other than hash (rocelab.switch.balance.EcmpGroup; hash needs no
   group) and its members (balance.Member). */
enum { BALANCE_FLOWLET, BALANCE_PACKET, BALANCE_SPRAY, NBALANCE_MODES };
extern const char *const BALANCE_MODE_NAMES[NBALANCE_MODES + 1];
#define NTC 16  /* traffic classes (SONiC's tc 0..15) */
#define QUALITY_BANDS 8
#define QUEUE_BAND_BYTES 8192
#define EWMA_WEIGHT 0.25

typedef struct {
    int port, queue_of_tc[NTC];  /* its egress port; the queue each TC waits in there */
    unsigned char macs[12];       /* next-hop and egress MACs */
    long long frames, bytes, sampled_tx;
    double load, sampled_s;  /* NAN: not sampled yet */
} GroupMember;

typedef struct {
    void *host;
    int mode, nmembers;
    long long max_flows, load_weight, queue_weight;
    double idle_s, sampling_s;
    GroupMember *members;
    double *last_s;       /* the flowset table, max_flows entries: when each last saw a frame, */
    int *member;          /* its member, */
    long long *flow;      /* and the flow that last used it (-1: none) */
    long long reassignments, collisions;
} Group;

typedef struct { double release; Frame frame; } OnLink;

typedef struct {
    void *host, *host_name;
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

/* A flow's key, as the reference's _route takes it. */
typedef struct { int tos, proto, sport, dport; uint32_t src, dst; } FlowKey;

/* What the core asks of whoever runs it. Every call returning int returns -1 on an error the
   host has recorded (FP_EHOST). */
typedef struct {
    void *ctx;
    int (*frame_new)(void *ctx, long long size, Frame *out, unsigned char **writable);
    void (*frame_retain)(void *ctx, FpFrameRef *ref);
    void (*frame_release)(void *ctx, FpFrameRef *ref);
    double (*random)(void *ctx, int *error);  /* random.Random.random */
    double (*uniform)(void *ctx, double a, double b, int *error);
    /* a flow the cache has not seen: egress port, queue, PG, the MACs and lossless, or egress -1
       and `queue` a drop reason */
    int (*resolve)(void *ctx, int port, const FlowKey *key, Flow *decision);
    int (*trap)(void *ctx, int port, const unsigned char *frame, long long size);  /* TTL expired */
    long (*trapped_waiting)(void *ctx);  /* serve hands the loop back while this is > 0 */
    void *(*sleep_begin)(void *ctx);     /* around serve's wait: the host's other threads may run */
    void (*sleep_end)(void *ctx, void *token);
    int (*signalled)(void *ctx);         /* serve's wait was interrupted: run the host's handlers */
    /* spray: a member of group `group` drawn from its own seeded generator (EcmpGroup._spray), -1 on error */
    int (*spray)(void *ctx, int group, int nmembers);
} Host;

enum { FP_OK, FP_EHOST, FP_ENOMEM, FP_EOS };

typedef struct {
    Host host;
    Port *ports;
    Pool *pools;
    Group *groups;
    int nports, npools, ngroups, pfc_sent;
    long long max_frame, flow_cache_max;
    double next_timer;
    LoopCounts loop;
    double ahead;  /* serve's clock: may run up to early_s ahead of the monotonic clock */
    double wake_ended;  /* the monotonic clock when serve's last wake-up ended (Loop.ended) */
    int error, error_errno;  /* why the last call returned -1 */
} Core;

/* Called with each frame due out: takes ownership of `frame`. */
typedef int (*FpEmit)(Core *core, void *arg, int port, Frame frame);

/* A TPACKET_V2 receive ring's layout (rocelab.kernel.ring.RxRing.geometry). */
typedef struct { long block_bytes, per_block, slot_bytes, slots; } Geometry;

/* fp_serve's ports (every core's, in the cores' order) and what else it watches. */
typedef struct {
    Geometry geometry;
    const int *fds;           /* a packet socket per port, in the cores' port order */
    unsigned char *const *rings;
    long *heads;              /* each ring's next slot; updated */
    const int *others;        /* descriptors handed back when readable */
    short *others_revents;    /* out: which were */
    int nothers;
    double early_s, idle_s;
    const double *bounds;     /* lateness bucket bounds, ascending (< LATE_BUCKETS of them) */
    int nbounds;
    long round_frames, round_bytes, drain_rounds;
} Serve;

int fp_alloc(Core *c, int nports, int npools);  /* zeroed ports and pools, their defaults set */
void fp_ready(Core *c);                         /* after the host has filled the structs */
void fp_free(Core *c);                          /* releases every frame held */
/* a frame read at `now` that the kernel received at `arrival` (<= now): Switch.receive */
int fp_receive(Core *c, int port, const unsigned char *frame, long long size, double now, double arrival);
int fp_poll(Core *c, double now, FpEmit emit, void *arg);
double fp_next_due(const Core *c);  /* INFINITY: nothing pending */
void fp_reschedule_timers(Core *c);
void fp_flush_flows(Core *c);
int fp_alloc_groups(Core *c, int ngroups);  /* the previous groups freed; each zeroed */
int fp_alloc_group(Core *c, Group *g, int nmembers, long long max_flows);  /* its members and flowset table */
double fp_paused_time_s(const Port *p, int priority, double now);
int fp_geometry_fits(const Geometry *g, long ring_bytes);
/* 1: handed back, 0 idle or signalled, -1 error (in the first core) */
int fp_serve(Core *const *cores, int ncores, const Serve *s);

#endif

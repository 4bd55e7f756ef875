/* server.c - cursor-oai: an OpenAI-compatible HTTP/1.1 server that talks to Cursor's Agent
 * backend over HTTPS (BearSSL), over HTTP/2 or HTTP/1.1.
 *
 * This file only moves bytes: client sockets <-> cursor_oai.h <-> TLS sockets. Every parser
 * (HTTP heads, chunked bodies, envelopes, protobuf, JSON, OpenAI logic, HTTP/2 frames and
 * HPACK) lives in the header, where it is tested and fuzzed. Threads: one detached thread per
 * client connection, one I/O thread per HTTP/2 connection to Cursor, a heartbeat thread per
 * long run, a holder thread per held run; shared state is grouped by concern (section
 * "State": conf, file_paths, listener, up_pool, creds, models_cache, quotas, hosts), each
 * concern behind a lock of its own; no two of them are ever held at once.
 *
 * MAP, in the order a request travels (each name is a section heading below: search for it)
 *
 *   First what all of it uses: Limits and defaults, State, Declarations, Time, randomness, small
 *   helpers. Then:
 *
 *   Listener                       accept, the connection slots, 503 when full, shutdown
 *   Client sockets                 send what it takes (fd_send_some), write all, read until: the
 *                                  client socket's loops
 *   Client connections: requests   read the head and body, route (serve_request), access log
 *   Models                         GET /v1/models; the host and transport facts a run needs
 *                                  (GetServerConfig)
 *   Usage                          GET /usage: the plan and current-period usage (unary calls to
 *                                  Cursor)
 *   Status page                    GET /, /status.json, /status.js, /status.css
 *   Chat requests                  POST /v1/chat/completions, /v1/messages, /v1/responses, Gemini's
 *                                  generateContent: handle_chat, whose steps are listed there in
 *                                  order (parse and model, a held run to continue, a checkpoint to
 *                                  resume, the run request, the run and its fallbacks, the answer)
 *   Run engine                     struct run and its parts (in, up, fb, out, hb, held), and what
 *                                  runs it: run_flush, heartbeats, the watchdog; the transport seam
 *                                  tr_open / tr_send / tr_body / tr_close, the only way the engine
 *                                  reaches Cursor (tr_pick picks HTTP/2 or HTTP/1.1; a failure
 *                                  before the first byte falls back to HTTP/1.1: tr_fall_back);
 *                                  run_stream / run_frame: Cursor's messages -> coai_reply (the
 *                                  dialect's writer); over a shared HTTP/2 connection its I/O
 *                                  thread writes text deltas itself (run_il_consume)
 *   Held runs                      a response with tool calls parks its run (run_finish, held_park,
 *                                  held_thread); the request with the results takes it over
 *                                  (held_claim, held_continue) or falls back
 *   Conversation memory            Cursor's checkpoint per conversation (mem_store), resumed by the
 *                                  next turn (mem_find, chat_memory)
 *   Client connections: responses  send_response, stream_begin / stream_write: the bytes run_flush
 *                                  hands over go to the client
 *   Upstream TLS connections       HTTP/1.1: BearSSL sockets, the pool, spares, unary calls; the
 *                                  run's HTTP/1.1 transport (run_start: RunSSE, run_append:
 *                                  BidiAppend)
 *   Trust anchors                  the CA bundle both transports verify Cursor with
 *   HTTP/2 connections             one multiplexed connection per host, its I/O thread, its streams
 *                                  (a parked reader's DATA to its consumer: h2s_body_il,
 *                                  h2c_il_run); TLS records leave the lock to be sent
 *                                  (h2c_flush_locked -> hc->wq -> h2c_send); the run's HTTP/2
 *                                  transport (h2_run_start, h2_run_send: one Run stream)
 *   Credentials                    the token: memory, files, renewal (every upstream call)
 *   Metrics                        GET /metrics (Prometheus text)
 *   What Cursor sent that this version does not know
 *                                  unknown fields and messages counted, the wire capture
 *   Logging                        the log writer
 *   Configuration and command line serve's settings
 *   Commands                       login, logout, status, models, usage, doctor; main
 */
#define _GNU_SOURCE
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"

#include <bearssl.h>
#include <cJSON.h>
#include <pb.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================== */
/* Limits and defaults                                                      */
/* ======================================================================== */

#define SRV_DEFAULT_LISTEN "127.0.0.1:18741"
#define SRV_DEFAULT_API_URL "https://api2.cursor.sh"
#define SRV_DEFAULT_CLIENT_VERSION "cli-2026.10.01-e373342"  /* newest build seen (Oct 2026) */
#define SRV_DEFAULT_MAX_CONNS 1024
#define SRV_DEFAULT_IDLE_TIMEOUT_S 300  /* CURSOR_OAI_IDLE_TIMEOUT: no upstream progress */
/* Run watchdog (issue 24 item 7; one peer's live-tested bounds): no inbound frame at all for
 * this long, or nothing but heartbeats and checkpoints for this long, fails the turn. */
#define SRV_DEFAULT_SILENCE_S 30        /* CURSOR_OAI_SILENCE_TIMEOUT */
#define SRV_DEFAULT_HB_ONLY_S 90        /* CURSOR_OAI_HEARTBEAT_TIMEOUT */
#define SRV_DEFAULT_KEEPALIVE_S 15      /* CURSOR_OAI_KEEPALIVE: ": keepalive" period */
#define SRV_DEFAULT_QUOTA_LATCH_S 60    /* CURSOR_OAI_QUOTA_LATCH: usage-limit error remembered */
#define SRV_QUOTA_MODELS 8              /* models whose usage-limit error is remembered at once */
/* CURSOR_OAI_MAX_PROMPT_BYTES: a peer measured a live cap near 1 MiB on one UserMessage
 * (~1.06 MB rejected with invalid_argument, ~850 KB accepted; cursor-upstream-extras.md 1.5). */
#define SRV_DEFAULT_MAX_PROMPT ((size_t)1024 * 1024)

#define SRV_HEAD_MAX (32 * 1024)                  /* request head bytes -> 431 */
#define SRV_BODY_MAX ((size_t)32 * 1024 * 1024)   /* request body bytes -> 413 */
#define SRV_HEAD_TIMEOUT_MS 15000                 /* whole request head -> 408 */
#define SRV_BODY_IDLE_MS 30000                    /* gap between body reads -> 408 */
#define SRV_BODY_STEP (256 * 1024)                /* body buffer growth per read */
#define SRV_KEEPALIVE_IDLE_MS 75000               /* idle keep-alive connection */
#define SRV_KEEPALIVE_PRESSURE_MS 2000            /* the same when slots run short */
#define SRV_REJECT_THREADS 256                    /* 503 answers with their own thread */
#define SRV_LINGER_MAX 1024                       /* more 503 answers, lingered by the loop */
#define SRV_BODY_TIMEOUT_S 120                    /* CURSOR_OAI_BODY_TIMEOUT: whole body */
#define SRV_MODELS_WAIT_S 15                      /* CURSOR_OAI_MODELS_WAIT: first list */
#define SRV_REPLY_MAX_MB 32                       /* CURSOR_OAI_MAX_RESPONSE_MB */
#define SRV_INFLIGHT_MAX_MB 256                   /* CURSOR_OAI_MAX_INFLIGHT_MB */
#define SRV_SEND_TIMEOUT_MS 60000                 /* no write progress to a client */
#define SRV_THREAD_STACK (512 * 1024)             /* cJSON recursion needs >= 256 KiB */
#define SRV_EMFILE_PAUSE_MS 500                   /* accept() out of descriptors */
#define SRV_SHUTDOWN_GRACE_MS 10000               /* SIGTERM: wait for in-flight requests */
#define SRV_MAX_ALLOW 16                          /* --allow-host entries */
#define SRV_H2ONLY_MAX 8                          /* hosts remembered as HTTP/2-only */
#define SRV_TOKEN_MAX 8192                        /* access token bytes */
#define SRV_LOG_LINE 2048                         /* one log message, before escaping */
#define SRV_LOG_ROOM (SRV_LOG_LINE * 5 / 4 + 16)  /* room for it after redaction (8 -> 10) */

#define UP_CONNECT_TIMEOUT_MS 10000               /* DNS excluded; TCP connect + TLS handshake */
#define UP_IO_TIMEOUT_MS 60000                    /* unary calls: no byte for this long -> 504 */
#define UP_HEAD_MAX (16 * 1024)                   /* upstream response head */
#define UP_INTERIM_MAX 8                          /* 1xx heads before the real one */
#define UP_CALL_TIMEOUT_S 60                      /* CURSOR_OAI_UPSTREAM_TIMEOUT: whole unary call */
#define UP_RBUF 16384                             /* upstream raw read buffer */
#define UP_RA (16384 + 325 + 4096)                /* TLS bytes read ahead: > one whole record */
#define UP_ERR_BODY_MAX (64 * 1024)               /* error bodies kept for the message */
#define UP_MODELS_MAX ((size_t)4 * 1024 * 1024)   /* GetUsableModels JSON */
#define UP_POOL_MAX 128                           /* idle TLS connections kept */
#define UP_SPARE_MIN 1                            /* idle connections kept ready (spares) */
#define UP_SPARE_PAR 4                            /* background connects under way at most */
#define UP_SPARE_WAIT_MS 1000                     /* empty pool: wait this long at most for a
                                                     spare already being opened */
#define UP_SESS_MAX 4                             /* TLS sessions kept for resumption */
#define RUNSSE_DRAIN_MS 250                       /* reading a finished RunSSE to its end */
#define UP_POOL_IDLE_MS 55000                     /* drop pooled connections older than this */
#define UP_MODELS_TTL_MS 300000                   /* model list cache */

#define CA_BUNDLE_MAX ((size_t)16 * 1024 * 1024)  /* PEM file size */

/* ======================================================================== */
/* State                                                                    */
/* ======================================================================== */

enum { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

struct upconn;

/* The account's model list as GetUsableModels last gave it, parsed once when it arrived. The
 * cache (models_cache.list) holds one reference and each reader one more, taken and dropped
 * under models_cache.lock (models_get, models_put), so a renewal never frees a list a request
 * still reads. */
struct models_list {
    int refs;                       /* under models_cache.lock */
    coai_models m;
};

/* Identity of a file: a change means someone else wrote it (a login while serving). */
struct file_id {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
};

/* Configuration: written by main() before the first thread starts, read-only after (no lock). */
static struct conf {
    char listen_host[256];          /* --listen host part */
    char listen_port[8];            /* --listen port part */
    char up_host[256];              /* CURSOR_API_URL host (SNI + name check) */
    char up_port[8];                /* CURSOR_API_URL port, default 443 */
    char up_authority[300];         /* Host header value */
    char up_prefix[256];            /* CURSOR_API_URL path prefix without trailing '/' */
    coai_url base;                  /* the same URL parsed: auth, models, server config */
    coai_url agent_forced;          /* CURSOR_OAI_AGENT_URL (host[0] == 0: not set) */
    int profile_forced;             /* CURSOR_OAI_PROFILE: PROF_*, or -1 (fallback allowed) */
    int connect_json;               /* CURSOR_OAI_CONNECT_APPEND=json: BidiAppend as JSON */
    char client_version[160];       /* x-cursor-client-version (client_version_resolve) */
    char client_version_src[PATH_MAX + 64]; /* where it came from, for status and the log */
    const char *api_key;            /* CURSOR_OAI_API_KEY or NULL */
    const char *ca_file;            /* PEM bundle path */
    char workspace[PATH_MAX];       /* --workspace, default cwd */
    char timezone[128];             /* IANA zone for x-cursor-timezone */
    int log_level;                  /* --log-level */
    char allow[SRV_MAX_ALLOW][260]; /* --allow-host and CURSOR_OAI_ALLOW_HOSTS: NAME[:PORT] */
    size_t allow_n;
    int allow_unauth;               /* --allow-unauthenticated: no key off loopback */
    int max_conns;                  /* --max-conns */
    int idle_timeout_s;             /* CURSOR_OAI_IDLE_TIMEOUT */
    int silence_s;                  /* CURSOR_OAI_SILENCE_TIMEOUT: no frame at all */
    int hb_only_s;                  /* CURSOR_OAI_HEARTBEAT_TIMEOUT: heartbeats/checkpoints only */
    int keepalive_s;                /* CURSOR_OAI_KEEPALIVE */
    int64_t up_call_ms;             /* CURSOR_OAI_UPSTREAM_TIMEOUT: whole unary upstream call */
    int64_t models_wait_ms;         /* CURSOR_OAI_MODELS_WAIT: cold-start wait for the list */
    int64_t body_timeout_ms;        /* CURSOR_OAI_BODY_TIMEOUT: whole request body */
    size_t reply_max;               /* CURSOR_OAI_MAX_RESPONSE_MB: non-streaming answer */
    size_t inflight_max;            /* CURSOR_OAI_MAX_INFLIGHT_MB: request bytes in flight */
    size_t max_prompt;              /* CURSOR_OAI_MAX_PROMPT_BYTES: UserMessage text cap */
    br_x509_trust_anchor *tas;      /* trust anchors, kept for the process */
    size_t tas_n;
    int64_t models_ttl_ms;          /* CURSOR_OAI_MODELS_TTL */
    int quota_latch_s;              /* CURSOR_OAI_QUOTA_LATCH, 0 = off */
    int cli;                        /* a one-shot command: plain messages, no timestamps */
} conf;

/* The credential files' paths: set once before any thread starts (no lock). */
static struct file_paths {
    char ours_dir[PATH_MAX];        /* $XDG_CONFIG_HOME/cursor-oai */
    char ours_path[PATH_MAX];       /* .../cursor-oai/auth.json (ours, read-write) */
    char agent_path[PATH_MAX];      /* cursor-agent's auth.json (read-only) */
} file_paths;

/* The listening socket, shutdown, and the client connections being served. */
static struct listener {
    pthread_mutex_t lock;           /* guards idle, conns, rejecting, inflight, parse_over */
    int fd;
    int loopback;                   /* bound to a loopback address */
    volatile sig_atomic_t stop;     /* SIGTERM/SIGINT seen */
    int64_t stop_at;                /* mono ms when the accept loop saw stop */
    pthread_cond_t idle;            /* signalled when conns drops */
    int conns;                      /* client connections being served */
    int rejecting;                  /* 503 answers in flight */
    size_t inflight;                /* request body bytes reserved by requests being served */
    int parse_over;                 /* requests whose parse was admitted over the budget */
} listener;

/* Idle upstream TLS connections. */
static struct up_pool {
    pthread_mutex_t lock;
    struct upconn *idle;            /* idle TLS connections */
    int n;
} up_pool;

/* The upstream credentials and their renewal. log_msg takes the lock to redact the secrets:
 * never log while holding it. */
static struct creds {
    pthread_mutex_t lock;
    char token[SRV_TOKEN_MAX];      /* upstream access token ("" = none) */
    char refresh[SRV_TOKEN_MAX];    /* refresh token ("" = none) */
    char key[SRV_TOKEN_MAX];        /* stored Cursor API key: renewal by exchange ("" = none) */
    int src;                        /* CRED_* where the token came from */
    uint64_t gen;                   /* bumped whenever the access token changes */
    uint64_t bad_gen;               /* generation the upstream rejected after streaming */
    int refreshing;                 /* a renewal is in flight (single flight) */
    uint64_t refresh_seq;           /* renewals finished */
    int refresh_failed;             /* the last renewal failed: refresh_err says how */
    coai_error refresh_err;
    int64_t refresh_block_until;    /* mono ms: no renewal before this after a rejection */
    int persist_failed;             /* the newest tokens live only in memory */
    int64_t persist_retry_at;       /* mono ms: try saving them again from then on */
    struct file_id ours_id, agent_id; /* the credential files as last loaded or written */
    int64_t checked_at;             /* mono ms of the last look at the files */
    pthread_cond_t renewed;         /* signalled when a renewal ends */
} creds;

/* The account's model list, GetUsableModels. */
static struct models_cache {
    pthread_mutex_t lock;           /* also guards the lists' refs */
    struct models_list *list;       /* last good GetUsableModels list, NULL = none yet */
    int64_t at;                     /* mono ms of the last good fetch, 0 = never */
    int64_t fail_at;                /* mono ms of the last failed fetch, 0 = none since */
    coai_error err;                 /* why it failed */
    int fetching;                   /* a fetch is in flight (single flight) */
    uint64_t seq;                   /* fetches finished */
    pthread_cond_t fetched;         /* signalled when a fetch ends */
} models_cache;

/* Usage-limit errors Cursor gave, per model. */
struct quota_latch {
    char model[128];
    int64_t until;                  /* mono ms; 0 = free slot */
    coai_error err;
};
static struct quotas {
    pthread_mutex_t lock;
    struct quota_latch latch[SRV_QUOTA_MODELS];
} quotas;

/* Where runs go and how. GetServerConfig's agentUrlConfig host is for an
 * HTTP/2 transport only (agent_h2_get); HTTP/1.1 runs go to the base URL (run_host_get). */
static struct hosts {
    pthread_mutex_t lock;
    coai_url agent_h2;              /* the host GetServerConfig names (agent_h2_get) */
    char agent_h2_src[600];         /* where it came from */
    int64_t agent_h2_at;            /* mono ms it was decided, 0 = not yet */
    int agent_h2_failed;            /* it is the base URL because GetServerConfig failed */
    int agent_h2_fetching;          /* a GetServerConfig call is in flight */
    pthread_cond_t agent_h2_done;   /* signalled when it ends */
    struct h2only {                 /* hosts that refused HTTP/1.1 at the connection level */
        coai_url host;
        char why[160];              /* how: "a 400 \"illegal request line\"", ... */
        int64_t at;                 /* mono ms of the last refusal (H2ONLY_REPROBE_MS) */
    } h2only[SRV_H2ONLY_MAX];
    int h2only_n;
    int profile;                    /* PROF_* that worked last (the default first) */
} hosts;

/* listener.stop is set by the signal handler and read by every thread; listener.stop_at by
 * the accept loop after it and read by runs. Both through atomics (ThreadSanitizer reported
 * the plain accesses). */
static int stopping(void)
{
    return __atomic_load_n(&listener.stop, __ATOMIC_RELAXED) != 0;
}

enum { CRED_NONE, CRED_ENV, CRED_OURS, CRED_AGENT };

/* ======================================================================== */
/* Declarations: types used above their section, prototypes (generated)     */
/* ======================================================================== */

/* Generated by tests/reorder.py (run it again after adding a function or moving one): the struct
 * tags, then the types, macros and variables used above their own section, then a prototype
 * for each function used above its definition. The sections below are in the order of the
 * MAP at the top; this is what lets them be. */

struct upconn;
struct run;
struct route_def;
struct mem_entry;
struct h2c;

/* The API, for every part of the server. All calls are thread-safe, take one short lock of
 * their own (never a state lock: they may be called with one held) and never do I/O:
 *
 *   metric_add(M_X, labels, n)       counter: add n (>= 0) to the series `labels`
 *   metric_gauge_add(M_X, labels, d) gauge: add d (may be negative: +1/-1 around something)
 *   metric_set(M_X, labels, v)       gauge: set the series to v
 *   metric_observe(M_X, labels, s)   histogram: one observation of s seconds
 *
 * M_X is a row of the enum below with its name, type and help text in METRIC_FAMILIES: to
 * add a family, add both (same order). `labels` is the label set exactly as it goes between
 * the braces, e.g. "route=\"/v1/models\",status=\"200\"", or "" for none; a value that comes
 * from a client or the upstream (a model name) must go through metric_label(), which
 * escapes it and cuts it to METRIC_VALUE_MAX bytes. A family keeps at most
 * METRIC_SERIES_MAX series; anything beyond lands in one series labelled overflow="true",
 * so no client can grow memory by inventing model names. Values that already live
 * elsewhere (pooled connections, client connections, dropped log lines) are read at scrape
 * time in metrics_write() instead of being mirrored. */
enum {
    M_REQUESTS,             /* counter {route, dialect, status} */
    M_DURATION,             /* histogram {route}: request head to the last response byte */
    M_FIRST_TOKEN,          /* histogram {dialect}: request head to the first answer byte */
    M_UPSTREAM_RUNS,        /* counter {outcome}: ok, client_gone, or the error code */
    M_FALLBACKS,            /* counter {kind}: a fallback taken instead of the normal path */
    M_OPEN_STREAMS,         /* gauge: streaming responses in progress */
    M_HELD_RUNS,            /* gauge: upstream runs held open for a later request */
    M_SPARE_CONNS,          /* gauge: pre-opened upstream connections waiting for a run */
    M_HANDSHAKES,           /* counter {result}: upstream TLS handshakes */
    M_TOKENS,               /* counter {model, kind}: kind in, out, cached */
    M_CRED_RENEWALS,        /* counter {result}: ok, failed */
    M_QUOTA_LATCHED,        /* counter: answers given by the quota latch, without a run */
    M_TRANSPORT_RUNS,       /* counter {transport}: upstream runs by transport (h2, http1) */
    M_WIRE_UNKNOWN,         /* counter {message, field}: what Cursor sent that we do not know */
    M_NATIVE_DESPITE,       /* counter: native execs on runs that sent the tools header */
    M__COUNT
};

#define METRIC_SERIES_MAX 256       /* series per family; more land in overflow="true" */
#define METRIC_LABELS_MAX 256       /* one series' label text */
#define METRIC_VALUE_MAX 96         /* one label value from a client, before escaping */
#define METRIC_BUCKETS 12

struct metric_series {
    char labels[METRIC_LABELS_MAX];
    double value;                   /* counter/gauge value; histogram sum */
    uint64_t count;                 /* histogram observations */
    uint64_t buckets[METRIC_BUCKETS];   /* histogram: observations <= METRIC_BOUNDS[i] */
};

enum { UPX_OK, UPX_CANCELLED, UPX_TIMEOUT, UPX_EOF, UPX_IO };
enum { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_EOF };

struct upconn {
    struct upconn *next;            /* pool link */
    coai_url host;                  /* the host it is connected to (the pool's key) */
    int fd;
    int reused;                     /* taken from the pool */
    int spare;                      /* opened ahead by spare_thread, not taken yet (metrics) */
    int64_t idle_since;             /* mono ms when parked in the pool */
    int client_fd;                  /* watched while waiting: a client disconnect cancels */
    short client_events;            /* POLLIN until pipelined bytes are seen, then 0 */
    int64_t deadline;               /* mono ms: a wait past this fails with UPX_TIMEOUT */
    int io_timeout_ms;              /* > 0: each byte received pushes the deadline this far */
    int64_t end;                    /* mono ms, 0 = none: overall deadline of a unary call; no
                                     * byte pushes `deadline` past it */
    int why;                        /* UPX_* reason of the last failed I/O */
    int64_t last_tick;              /* mono ms of the last tick() call */
    int (*tick)(void *);            /* called about once a second while waiting; -1 cancels */
    void *tick_ctx;
    /* the response being read */
    int status;                     /* HTTP status, 0 before the head */
    int body_mode;                  /* BODY_* */
    uint64_t body_left;             /* BODY_LENGTH: bytes still to come */
    int body_done;                  /* the body was read to its framed end */
    int got_bytes;                  /* any response byte arrived on this exchange */
    int must_close;                 /* Connection: close, or a body delimited by EOF */
    coai_chunked_decoder cd;        /* BODY_CHUNKED state */
    size_t rlen, roff;              /* raw bytes in rbuf, and how many are consumed */
    unsigned char rbuf[UP_RBUF];    /* raw response bytes (TLS plaintext) */
    /* Read-ahead under the TLS engine: BearSSL asks for a record's 5-byte header, then its
     * body; both (and any records behind them) come from one recv() into ra. */
    size_t ra_len, ra_off;          /* TLS bytes in ra, and how many the engine has taken */
    int ra_more;                    /* the last recv() filled ra: read again before polling */
    unsigned char ra[UP_RA];
    br_ssl_client_context sc;
    br_x509_minimal_context xc;
    br_sslio_context io;
    unsigned char iobuf[BR_SSL_BUFSIZE_BIDI];
};

/* Transport profiles of RunSSE + BidiAppend (issue 10 item 6). */
enum { PROF_GRPCWEB, PROF_CONNECT };

/* Kinds of request heads. */
enum {
    UPH_AGENT,          /* 0: RunSSE/BidiAppend, gRPC-web profile (spec 2.1; vectors) */
    UPH_JSON,           /* 1: Connect unary JSON: GetUsableModels, GetServerConfig (spec 2.2) */
    UPH_CONNECT_STREAM, /* RunSSE, Connect profile: application/connect+proto */
    UPH_CONNECT_UNARY,  /* BidiAppend, Connect profile: application/proto */
    UPH_CONNECT_JSON    /* BidiAppend, Connect profile, CURSOR_OAI_CONNECT_APPEND=json */
};

struct h2s {
    struct h2s *next;               /* hc->streams */
    struct h2c *hc;
    uint32_t id;
    int counted;                    /* holds one of hc->open */
    int status;                     /* :status of the response head, 0 before it */
    int ended;                      /* the server ended its side */
    int reset;                      /* RST_STREAM (rst_code), refused, or a dead connection */
    uint32_t rst_code;
    int refused;                    /* the server never processed it (GOAWAY, REFUSED_STREAM) */
    int local_reset;                /* the reset was ours (rst_code): the server broke HTTP/2
                                     * on the stream, or we ran out of memory for it */
    int local_end;                  /* we ended our side */
    int blocked;                    /* its writer waits for window */
    coai_buf in;                    /* DATA received, not yet handed out */
    coai_buf taken;                 /* the bytes handed to the reader last */
    pthread_cond_t cv;              /* the reader's: sig set (something arrived) */
    pthread_cond_t wcv;             /* a writer's: wsig set (window opened, the stream failed) */
    int sig, wsig;                  /* set by the I/O thread, cleared by the waiter */
    int notify;                     /* -1, or a held run's pipe: a byte when sig is set */
    int body_done;                  /* the reader saw the end */
    int got_bytes;
    int pend;                       /* DATA arrived in this pass of the I/O thread: signal */
    struct h2s *pend_next;          /* pend: the next on hc->pend_list */
    unsigned long sig_gen;          /* the last signal batch that named it (h2s_close) */
    int waiting;                    /* its reader sleeps on cv (h2_wait), not leading */
    /* waits, as struct upconn's (up_wait) */
    int64_t deadline;
    int64_t progress_ms;            /* > 0: window coming back pushes deadline this far */
    int why;                        /* UPX_* of the last failure */
    int client_fd;
    short client_events;
    int64_t last_tick;
    int (*tick)(void *);
    void *tick_ctx;
    /* DATA consumed on the I/O thread while the reader sleeps (h2s_body_il, h2c_il_run) */
    int (*il_fn)(void *, const unsigned char *, size_t);   /* 1: wake the reader after */
    void *il_ctx;
    int il_park;                    /* H2S_IL_*: who may consume the stream's DATA now */
    int il_wake;                    /* the consumer left something for the reader */
    int il_waiter;                  /* the reader waits for H2S_IL_BUSY to end */
    struct h2s *il_next;            /* hc->il_list */
};

/* s->il_park: the reader owns the stream (OFF); it sleeps in h2s_body_il and lets the I/O
 * thread consume what arrives (PARKED); the I/O thread's consumer runs now (BUSY: the reader
 * waits for it before it touches its run again). */
enum { H2S_IL_OFF, H2S_IL_PARKED, H2S_IL_BUSY };

enum { RENEW_OK = 0, RENEW_FAILED = -1, RENEW_NONE = -2 };

enum { ROUTE_NONE, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_MESSAGES, ROUTE_COUNT_TOKENS,
       ROUTE_RESPONSES, ROUTE_RESPONSE_GET, ROUTE_METRICS, ROUTE_USAGE, ROUTE_STATUS_PAGE,
       ROUTE_STATUS_JSON, ROUTE_STATUS_JS, ROUTE_STATUS_CSS, ROUTE_GEMINI, ROUTE_GEMINI_COUNT,
       ROUTE_GEMINI_MODELS, ROUTE_RESPONSES_COMPACT, ROUTE_MODEL_GET };

/* Who may call a route when CURSOR_OAI_API_KEY is set. */
enum { AUTH_KEY,          /* the API key, in any dialect's header (key_ok) */
       AUTH_NONE,         /* anyone (/health) */
       AUTH_COOKIE,       /* the key, or the status page's cookie (status_access) */
       AUTH_BROWSER };    /* the same, and a 401 that tells a browser user what to do */

/* A route's flags. */
#define RT_QUIET 1        /* not in the status page's recent requests (pollers) */
#define RT_URL_MODEL 2    /* the path's last segment is a model: .../models/{model} */
#define RT_URL_METHOD 4   /* ... followed by ':method' (Gemini: {model}:generateContent) */

#define ROUTE_ROWS (sizeof ROUTE_TABLE / sizeof ROUTE_TABLE[0])

struct conn {
    int fd;
    int64_t t0;                     /* request start, mono ms */
    coai_http_request rq;           /* current request head (views into in[]) */
    char method[16];                /* copies for the access log */
    char path[128];
    char model[128];                /* resolved model, for the access log */
    int route;                      /* ROUTE_* of the current request */
    char run_id[37];                /* upstream run (request id) of this request, "" = none */
    const char *fallback;           /* static name of a fallback this request took, or NULL:
                                     * set it where one is taken (access log "fallback"), and
                                     * count it: metric_add(M_FALLBACKS, "kind=\"...\"", 1) */
    const char *transport;          /* "h2" / "http1": the transport of its upstream run */
    int first_seen;                 /* the first answer byte went out (first-token metric) */
    int status;                     /* status sent */
    size_t bytes;                   /* body bytes sent */
    int keep;                       /* keep the connection open after this response */
    int http10;                     /* HTTP/1.0 client: no chunked encoding */
    int streaming;                  /* a 200 stream head was sent */
    int counted;                    /* request_count done for this request */
    int dead;                       /* a write failed: the client is gone */
    coai_dialect dialect;           /* the API of this request: error shapes, parser, writer */
    char convkey[128];              /* x-claude-code-session-id (conversation key), or "" */
    int64_t tok_in, tok_out;        /* the run's token counts (status page) */
    char errmsg[200];               /* the error's message sent to the client (status page) */
    coai_error err;                 /* the error sent to the client: `doctor` decides on its
                                     * code, kind and upstream_status, not on its words */
    char gm_model[256];             /* the model named in the URL (RT_URL_MODEL), or "" */
    int gm_stream;                  /* 0 generateContent, 1 SSE (alt=sse), 2 the JSON-array
                                     * stream (streamGenerateContent without alt) */
    int key_q;                      /* the status page's ?key=: status_key_query */
    coai_buf body;                  /* request body */
    coai_buf wbuf;                  /* one response chunk (size line + data + CRLF), reused */
    coai_buf wpend;                 /* bytes the I/O thread could not send without blocking
                                     * (run_flush_nb): they go out first (conn_write) */
    size_t reserved;                /* request bytes in listener.inflight for this request */
    int parse_over;                 /* this request's parse was admitted over the budget */
    size_t in_len;                  /* bytes in in[] */
    char in[SRV_HEAD_MAX];          /* request head (and pipelined bytes) */
};

/* One upstream run and the responses it produces. A run has one owner at a time: the client
 * connection's thread while it serves a request (handle_chat, held_continue), the holder thread
 * while the run is parked (held_thread), then the request that claims it (held_claim joins the
 * holder first). Besides the owner only the heartbeat thread touches it (run_hb_thread: r->hb,
 * and tr_send), and other requests look at r->held's table links under held_runs.lock. */

/* The request the run answers. The reply's views point into it, so the run owns it (a held
 * run outlives the request that started it); each follow-up replaces it. Owner only. */
struct run_in {
    coai_chat_request req;
    coai_responses_request rr;      /* Responses: store flag, items, echo (req moved out) */
    int resp;                       /* the request is a Responses one */
    char completion_id[48];         /* of the current response (Responses: its store id) */
    coai_run_params params;
    char model[128];
    char session[33];               /* tool-call id session part = the run handle */
    /* conversation memory (issue 11) */
    char conv_id[37];               /* AgentRunRequest.conversation_id, kept across steps */
    int resumed;                    /* started from a remembered checkpoint */
    unsigned char hist[32];         /* digest of the request's history (conversation memory) */
    int hist_ok;                    /* hist is set (the messages themselves may be gone) */
    size_t prompt_units;            /* the prompt's size for usage, once the prompt is gone */
};

/* The upstream side: the transport of the current attempt and what reads from it. Owner only,
 * through the tr_* calls; the heartbeat thread only sends (tr_send), and send_mu orders the
 * seqnos of all senders (it guards the seqno only, never a call in flight). */
struct run_up {
    int tr;                         /* TR_HTTP1 / TR_H2: the transport of this attempt */
    struct upconn *sse;             /* TR_HTTP1: the RunSSE connection */
    struct h2s *h2;                 /* TR_H2: the Run stream */
    coai_url host;                  /* host of the run (run_host_get) */
    int profile;                    /* PROF_* of this attempt */
    char request_id[37];            /* x-request-id and BidiRequestId of the run */
    char orig_id[37];               /* x-original-request-id: the first run's request_id */
    coai_str tools_hdr[2];          /* allowed-tools header name, value (coai_run_tools_header;
                                     * empty name: none): set with the run request, sent on
                                     * every call of the run */
    coai_buf run_msg;               /* AgentClientMessage{run_request} (seqno 0) */
    uint64_t auth_gen;              /* generation of the token the run started with */
    pthread_mutex_t send_mu;
    int64_t seqno;                  /* next BidiAppend append_seqno (under send_mu) */
    coai_frame_decoder frames;
    coai_msg msg;
    int data_frames;                /* data frames received */
    int64_t t_start, t_head;        /* mono ms: the attempt started; its response head came */
    /* the watchdog (run_deadline) */
    int64_t idle_ms;                /* CURSOR_OAI_IDLE_TIMEOUT in ms */
    int64_t last_frame;             /* mono ms: the last inbound frame */
    int64_t last_progress;          /* mono ms: the last frame not a heartbeat/checkpoint */
    /* what the HTTP/2 I/O thread left for the run's thread (run_il_consume) */
    int il_state;                   /* RUN_IL_*: nothing, or what run_il_resume takes */
    int il_flags;                   /* RUN_IL_FRAME: its flags, il_frame its payload */
    int il_rc;                      /* RUN_IL_RC: the reply's answer; RUN_IL_FRAME_ERR: the
                                     * decoder's error */
    coai_buf il_frame, il_rest, il_cur;     /* the frame; the bytes after it; them, taken */
};

enum { RUN_IL_NONE, RUN_IL_FRAME, RUN_IL_FRAME_ERR, RUN_IL_RC, RUN_IL_BYTES };

/* The fallbacks a request has taken: one bit each in run_fb.tries (each at most once). */
enum {
    TRIED_PROFILE = 1,              /* the other client profile (RETRY_PROFILE) */
    TRIED_HOST = 2,                 /* the base URL after an HTTP/2-only host (RETRY_HOST) */
    TRIED_CONV_RESET = 4,           /* a new conversation, replayed whole (RETRY_CONV) */
    TRIED_HTTP1 = 8,                /* HTTP/1.1 after HTTP/2 failed (RETRY_TRANSPORT) */
    TRIED_STATE_AGENT = 16          /* sent again with the state's mode AGENT (RETRY_STATE) */
};

/* How attempts failed and which fallbacks were taken (handle_chat's retry loop). Owner only;
 * upstream_401 is also set by a heartbeat's append (atomic). */
struct run_fb {
    int tr_fail;                    /* the attempt failed in the transport, before any answer */
    int upstream_401;               /* the upstream rejected the token (HTTP 401) */
    char h1_refused[160];           /* the host refused HTTP/1.1: how (run_start), else "" */
    int http_status;                /* HTTP status of a failed RunSSE/BidiAppend, else 0 */
    int retry;                      /* RETRY_*: stop and start over, nothing reached the client */
    int tries;                      /* TRIED_*: the fallbacks taken so far */
};

/* The client side: what went out to the client of the current response (run_flush). The
 * thread serving the request only. */
struct run_out {
    int stream;                     /* the client asked for SSE */
    int sent_all;                   /* the whole response was written */
    int in_feed;                    /* inside a coai_reply_feed_* call (no keepalive) */
    int cancelled;                  /* the client went away */
    int stopping;                   /* ended by shutdown */
    int hold_errors;                /* an error before the first byte is not sent (a
                                     * resumed run falls back to a replay instead) */
    int64_t last_write;             /* mono ms of the last byte sent to the client */
    size_t answer_bytes;            /* non-streaming: upstream message bytes buffered so far */
    int stored;                     /* Responses: this answer is in the response store */
    int remembered;                 /* this answer is in conversation memory (mem_store) */
    int counted;                    /* this response is in the run metrics (run_count) */
};

/* Heartbeats (issue 10 item 4): their own thread, never waited on by the reader. last,
 * exec_last, ids, n and resume under mu; stop and streak atomic (the holder reads streak);
 * open, started and thread belong to the owner; the counters to the heartbeat thread. */
struct run_hb {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, stop, open;
    int64_t last, exec_last;        /* mono ms of the last client / exec heartbeat */
    uint32_t ids[64];               /* execs whose results the client is producing */
    size_t n;
    unsigned sent, exec_sent, failed;
    unsigned streak;                /* heartbeats failed in a row */
    int64_t resume;                 /* mono ms: after a failure, no heartbeat before this */
};

/* Holding (issue 11): parked between a response with tool calls and the follow-up that
 * carries their results. in_table, release_req, next, live and live_next under held_runs.lock; the
 * rest belongs to the holder thread while parked, to the owner otherwise. */
struct run_held {
    int64_t tools_at;               /* mono ms the tool calls went to the client */
    int64_t at;                     /* mono ms the run was parked */
    unsigned char park_hist[32];    /* digest of the history that parked the run; a
                                     * follow-up must carry it before its tool calls */
    int dead;                       /* the held run cannot continue: why says why */
    char why[160];
    coai_buf leftover;              /* body bytes read past the end of the response */
    coai_buf backlog;               /* frames (flags byte + u32 length + payload) kept for
                                     * the next response while held */
    int replaying;                  /* run_frame is fed the backlog: counted and captured
                                     * already (held_frame) */
    int wake[2];                    /* the holder polls wake[0]; a byte = stop holding */
    pthread_t holder;
    int holder_started, in_table, release_req;
    struct run *next;               /* held_runs.list */
    int live;                       /* in held_runs.live (has a handle; may park) */
    struct run *live_next;
    /* the follow-up */
    int64_t hollow_until;           /* no visible progress by then -> fall back */
    int hollow_hit;
    int ended_empty;                /* Cursor ended the run cleanly, nothing shown */
    int continuing;                 /* the response continues a held run (run_continued) */
    int counted;                    /* run_held taken for this response, not parked yet */
    coai_str cids[64];              /* the follow-up's id for each pending call, as the
                                     * client rewrote it (views into in.req); ncids 0: the
                                     * ids came back as given */
    size_t ncids;
};

struct run {
    struct conn *c;                 /* the client (NULL while the run is held) */
    coai_reply reply;               /* Cursor's messages -> the client's dialect */
    coai_error err;                 /* failure of tr_open / a tr_send */
    int mu_init;                    /* up.send_mu, hb.mu and hb.cv exist */
    struct run_in in;
    struct run_up up;
    struct run_fb fb;
    struct run_out out;
    struct run_hb hb;
    struct run_held held;
};

enum { RETRY_NONE, RETRY_PROFILE, RETRY_HOST, RETRY_CONV, RETRY_TRANSPORT, RETRY_STATE };

/* A remembered conversation the request extends by new user messages only: a copy of its
 * state in *hit and the number of messages it covers; 0 when there is none. */
struct mem_hit {
    coai_buf state, blobs;
    size_t nblobs, k;
    char conv_id[37];
    coai_str *ids, *vals;
};

static int handle_health(struct conn *c);
static int handle_metrics(struct conn *c);
static void *conn_thread(void *arg);
static int reject_answer(char *out, size_t cap);
static void *reject_thread(void *arg);
static int handle_models(struct conn *c);
static int handle_usage(struct conn *c);
static void status_note_request(const struct conn *c, int64_t ms);
static int status_access(const coai_http_request *rq, int route);
static int status_key_query(const coai_http_request *rq, int route);
static int handle_status(struct conn *c);
static int handle_response_get(struct conn *c);
static int handle_chat(struct conn *c);
static int handle_count_tokens(struct conn *c);
static int run_failed_unsent(const struct run *r);
static void run_flush_rest(struct run *r);
static int profile_wrong(int http_status, const coai_error *e);
static void run_hb_start(struct run *r);
static void run_hb_stop(struct run *r);
static struct run *run_new(void);
static void run_free(struct run *r);
static int run_may_switch(struct run *r);
static void tr_describe(char *out, size_t cap);
static void tr_pick(struct run *r);
static int tr_may_fall_back(const struct run *r);
static void tr_fall_back(struct run *r);
static int64_t *tr_deadline(struct run *r);
static void tr_close(struct run *r, int clean);
static int tr_send(struct run *r, const unsigned char *msg, size_t n, int client_fd,
                   int (*tick)(void *), void *tick_ctx, coai_error *err, int *cancelled);
static int tr_open(struct run *r, int fresh);
static void run_h1_refused(struct run *r);
static int run_new_conversation(struct run *r);
static void run_stream(struct run *r);
static void conv_digest(const coai_message *msgs, size_t n, unsigned char out[32]);
static void held_count(struct run *r);
static void held_uncount(struct run *r);
static void held_live_add(struct run *r);
static void held_live_del(struct run *r);
static struct run *held_claim(const coai_chat_request *req, const char *model, char *why,
                              size_t wcap);
static int held_enabled(void);
static void run_reply_opts(struct run *r, coai_reply_opts *o, const char *completion_id);
static void fallback_note(struct conn *c, const char *kind);
static void run_count(struct run *r);
static void run_finish(struct run *r);
static int held_continue(struct conn *c, struct run *r, const char *completion_id);
static void mem_store(struct run *r);
static void mem_hit_free(struct mem_hit *h);
static int mem_find(const coai_request *req, const char *model, struct mem_hit *hit);
static const struct route_def *route_row(int route);
static const char *route_label(int route);
static const char *route_dialect(int route);
static int conn_write(struct conn *c, const void *p, size_t n);
static int send_response(struct conn *c, int status, const char *ctype, const char *extra,
                         const void *body, size_t n);
static int send_error_ex(struct conn *c, const coai_error *e, const char *extra);
static int send_coai_error(struct conn *c, const coai_error *e);
static int send_error(struct conn *c, int status, const char *type, const char *code,
                      const char *param, const char *msg, const char *extra);
static int stream_begin(struct conn *c, const char *lines);
static int stream_write(struct conn *c, const void *p, size_t n);
static int stream_piece(struct conn *c, const void *p, size_t n);
static int stream_end(struct conn *c);
static void up_err(coai_error *e, int status, const char *code, const char *fmt, ...);
static int up_buffered(struct upconn *c);
static void up_free(struct upconn *c);
static int up_same_host(const coai_url *a, const coai_url *b);
static void pool_prune(int everything);
static void up_release(struct upconn *c);
static void up_io_error(struct upconn *c, coai_error *e, const char *stage);
static long up_body(struct upconn *c, const unsigned char **p);
static int up_call_host(const coai_url *hp, const char *path, int kind, const void *req,
                        size_t req_len, const char *request_id, int client_fd, uint64_t *gen,
                        int *status, coai_buf *body, coai_error *e);
static int up_call(const char *path, int json, const void *req, size_t req_len,
                   const char *request_id, int client_fd, uint64_t *gen, int *status,
                   coai_buf *body, coai_error *e);
static int run_append(struct run *r, const unsigned char *msg, size_t n, int client_fd,
                      int (*tick)(void *), void *tick_ctx, coai_error *err, int *cancelled);
static int run_start(struct run *r, int fresh, const char *token, size_t tl);
static int up_readable(struct upconn *c, int ms);
static void h2c_fail_locked(struct h2c *hc, const char *fmt, ...);
static void h2c_fault_locked(struct h2c *hc, int fault, const char *fmt, ...);
static long h2s_body(struct h2s *s, const unsigned char **p);
static long h2s_body_il(struct h2s *s, const unsigned char **p,
                        int (*fn)(void *, const unsigned char *, size_t), void *ctx);
static int h2s_readable(struct h2s *s, int ms);
static void h2s_notify(struct h2s *s, int fd);
static void h2s_failure(struct h2s *s, char *out, size_t cap);
static int h2s_protocol_fault(struct h2s *s);
static void h2s_close(struct h2s *s);
static int h2_run_send(struct run *r, const unsigned char *msg, size_t n, int client_fd,
                       int (*tick)(void *), void *tick_ctx, coai_error *err, int *cancelled);
static int h2_run_start(struct run *r, int fresh, const char *token, size_t tl);
static size_t cred_token(char *out, size_t cap, uint64_t *gen);
static int cred_have(void);
static void cred_mark_rejected(uint64_t gen);
static int cred_refresh(uint64_t seen_gen, coai_error *e);
static int cred_ensure(coai_error *e);
static int cred_missing(coai_error *e);
static int cred_require(coai_error *e);
static const char *cred_renewal_locked(void);
static const char *cred_health(void);
static void metric_gauge_add(int f, const char *labels, double d);
static void metric_add(int f, const char *labels, double n);
static void metric_observe(int f, const char *labels, double secs);
static char *metric_label(char *out, size_t cap, const char *name, const char *v, size_t n);
static void metric_number(coai_buf *b, double v);
static void metric_gauge_now(coai_buf *b, const char *name, const char *type,
                             const char *help, double v);
static void metrics_write(coai_buf *b);
static void wn_msg(const void *p, size_t n);
static void wn_status(const coai_status *st);
static void wn_describe(coai_buf *b);
static void th_note_run(void);
static void th_note_native(int kind, const char *request_id);
static int th_describe(char *out, size_t cap);
static int cap_on(void);
static void cap_line(const char *fmt, ...);
static void cap_head_http1(const coai_buf *head);
static void cap_head_h2(const coai_h2_header *hs, size_t nh);
static void cap_client(const unsigned char *msg, size_t n);
static void cap_frame(const coai_frame *f);
static uint64_t log_dropped(void);
static size_t log_line_format(char *out, size_t cap, int level, const char *msg, size_t n,
                              int obj);
static void log_msg(int level, char *msg, size_t n, int obj);
static void srv_log(int level, const char *fmt, ...);
static void describe_expiry(char *out, size_t cap, const char *token);
static void describe_identity(char *out, size_t cap, const char *token);
static void doctor_step(const char *verdict, const char *step, const char *fmt, ...);
static void doctor_advice(const char *fmt, ...);

static int log_json;                /* --log-format json: every line is one JSON object */
static const double METRIC_BOUNDS[METRIC_BUCKETS] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                                                      60, 120, 300 };

static struct {
    pthread_mutex_t mu;
    struct metric_series *s[M__COUNT];
    size_t n[M__COUNT], cap[M__COUNT];
} metric_store = { PTHREAD_MUTEX_INITIALIZER, { 0 }, { 0 }, { 0 } };
static struct {
    pthread_mutex_t mu;
    uint64_t runs;                  /* runs whose calls carried the header */
    uint64_t native;                /* native execs on such runs */
} tools_header = { PTHREAD_MUTEX_INITIALIZER, 0, 0 };
static const char *const PROFILE_NAME[] = { "grpc-web", "connect" };

/* Every route the server answers, one row each: route_of() matches only these, serve_route
 * takes the dialect, key_ok and serve_check_head the auth rule, serve_dispatch the handler,
 * `serve --help` lists them all, the access log, /metrics and the status page take a route's
 * label (the path of its first row) and dialect from here (tests/status_test.py reads this
 * table and asks the server each path). Dialect -1: not a model API (errors then take the
 * shape of the client's dialect, see serve_route). A placeholder ("{id}", "{model}") matches
 * one non-empty segment, up to the text after it ("{model}:countTokens": the segment is what
 * comes before ":countTokens", so a model name may hold a ':'); the first row that matches
 * wins. Rows of one route share its dialect, handler, auth and flags. A new route is a line
 * here (and its ROUTE_* name when it is new). */
static const struct route_def {
    int route;
    const char *method;
    const char *path;
    int dialect;                    /* COAI_DIALECT_*, or -1 */
    int (*handler)(struct conn *c);
    int auth;                       /* AUTH_* */
    int flags;                      /* RT_* */
    const char *what;               /* its line in `serve --help` */
} ROUTE_TABLE[] = {
    { ROUTE_CHAT, "POST", "/v1/chat/completions", COAI_DIALECT_OPENAI_CHAT, handle_chat,
      AUTH_KEY, 0, "OpenAI Chat Completions" },
    { ROUTE_CHAT, "POST", "/chat/completions", COAI_DIALECT_OPENAI_CHAT, handle_chat,
      AUTH_KEY, 0, "the same, without /v1" },
    { ROUTE_RESPONSES, "POST", "/v1/responses", COAI_DIALECT_RESPONSES, handle_chat,
      AUTH_KEY, 0, "OpenAI Responses" },
    { ROUTE_RESPONSES, "POST", "/responses", COAI_DIALECT_RESPONSES, handle_chat,
      AUTH_KEY, 0, "the same, without /v1" },
    { ROUTE_RESPONSES_COMPACT, "POST", "/v1/responses/compact", COAI_DIALECT_RESPONSES,
      handle_chat, AUTH_KEY, 0, "Responses compaction: the conversation summarised by one run" },
    { ROUTE_RESPONSES_COMPACT, "POST", "/responses/compact", COAI_DIALECT_RESPONSES,
      handle_chat, AUTH_KEY, 0, "the same, without /v1" },
    { ROUTE_RESPONSE_GET, "GET", "/v1/responses/{id}", COAI_DIALECT_RESPONSES,
      handle_response_get, AUTH_KEY, 0, "a stored Responses answer" },
    { ROUTE_RESPONSE_GET, "GET", "/responses/{id}", COAI_DIALECT_RESPONSES,
      handle_response_get, AUTH_KEY, 0, "the same, without /v1" },
    { ROUTE_MESSAGES, "POST", "/v1/messages", COAI_DIALECT_ANTHROPIC, handle_chat,
      AUTH_KEY, 0, "Anthropic Messages" },
    { ROUTE_COUNT_TOKENS, "POST", "/v1/messages/count_tokens", COAI_DIALECT_ANTHROPIC,
      handle_count_tokens, AUTH_KEY, 0, "Anthropic token count" },
    { ROUTE_GEMINI, "POST", "/v1beta/models/{model}:generateContent", COAI_DIALECT_GEMINI,
      handle_chat, AUTH_KEY, RT_URL_MODEL | RT_URL_METHOD, "Gemini API" },
    { ROUTE_GEMINI, "POST", "/v1beta/models/{model}:streamGenerateContent",
      COAI_DIALECT_GEMINI, handle_chat, AUTH_KEY, RT_URL_MODEL | RT_URL_METHOD,
      "Gemini API, streamed (?alt=sse: SSE, else a JSON array)" },
    { ROUTE_GEMINI_COUNT, "POST", "/v1beta/models/{model}:countTokens", COAI_DIALECT_GEMINI,
      handle_count_tokens, AUTH_KEY, RT_URL_MODEL | RT_URL_METHOD, "Gemini token count" },
    { ROUTE_GEMINI_MODELS, "GET", "/v1beta/models", COAI_DIALECT_GEMINI, handle_models,
      AUTH_KEY, RT_URL_MODEL, "the account's models (Gemini shape)" },
    { ROUTE_GEMINI_MODELS, "GET", "/v1beta/models/{model}", COAI_DIALECT_GEMINI, handle_models,
      AUTH_KEY, RT_URL_MODEL, "one model (Gemini shape)" },
    { ROUTE_GEMINI, "POST", "/v1/models/{model}:generateContent", COAI_DIALECT_GEMINI,
      handle_chat, AUTH_KEY, RT_URL_MODEL | RT_URL_METHOD,
      "Gemini API on its stable path (the same as /v1beta)" },
    { ROUTE_GEMINI, "POST", "/v1/models/{model}:streamGenerateContent", COAI_DIALECT_GEMINI,
      handle_chat, AUTH_KEY, RT_URL_MODEL | RT_URL_METHOD, "the same, streamed" },
    { ROUTE_GEMINI_COUNT, "POST", "/v1/models/{model}:countTokens", COAI_DIALECT_GEMINI,
      handle_count_tokens, AUTH_KEY, RT_URL_MODEL | RT_URL_METHOD,
      "Gemini token count, stable path" },
    { ROUTE_MODEL_GET, "GET", "/v1/models/{model}", -1, handle_models, AUTH_KEY, RT_URL_MODEL,
      "one model: Gemini shape with a Google key (x-goog-api-key, ?key=), else OpenAI's" },
    { ROUTE_MODELS, "GET", "/v1/models", -1, handle_models, AUTH_KEY, 0,
      "the account's models (OpenAI, Anthropic or, with a Google key, Gemini shape)" },
    { ROUTE_MODELS, "GET", "/models", -1, handle_models, AUTH_KEY, 0, "the same, without /v1" },
    { ROUTE_USAGE, "GET", "/v1/usage", -1, handle_usage, AUTH_KEY, 0,
      "plan and usage this billing period (JSON)" },
    { ROUTE_HEALTH, "GET", "/health", -1, handle_health, AUTH_NONE, RT_QUIET,
      "liveness and credential state (no API key needed)" },
    { ROUTE_METRICS, "GET", "/metrics", -1, handle_metrics, AUTH_KEY, RT_QUIET,
      "Prometheus metrics" },
    { ROUTE_STATUS_PAGE, "GET", "/", -1, handle_status, AUTH_BROWSER, RT_QUIET,
      "the status page (HTML, for a browser)" },
    { ROUTE_STATUS_JSON, "GET", "/status.json", -1, handle_status, AUTH_BROWSER, RT_QUIET,
      "the status page's figures (JSON)" },
    { ROUTE_STATUS_JS, "GET", "/status.js", -1, handle_status, AUTH_COOKIE, RT_QUIET,
      "the status page's script" },
    { ROUTE_STATUS_CSS, "GET", "/status.css", -1, handle_status, AUTH_COOKIE, RT_QUIET,
      "the status page's style sheet" },
};

static struct mem_state {
    pthread_mutex_t lock;
    struct mem_entry *list;         /* newest first */
    int n, max, ttl_s;
    size_t bytes, max_bytes;
    unsigned long stored, resumed, resume_failed;  /* on /metrics: continuation_write */
} conv_memory = { .lock = PTHREAD_MUTEX_INITIALIZER, .max = 256, .ttl_s = 1800,
        .max_bytes = (size_t)256 * 1024 * 1024 };

/* Held runs (issue 11): the table of parked runs, the switches and the circuit breaker. */
static struct held_state {
    int on;                         /* CURSOR_OAI_CONTINUATION (default on) */
    int ttl_s;                      /* CURSOR_OAI_HELD_RUN_TTL */
    int hollow_s;                   /* CURSOR_OAI_HOLLOW_TIMEOUT */
    int max;                        /* CURSOR_OAI_HELD_RUNS_MAX */
    int window_ms;                  /* CURSOR_OAI_TOOL_WINDOW_MS: parallel exec quiet window */
    pthread_mutex_t lock;
    struct run *list;               /* parked runs, newest first */
    int n;
    struct run *live;               /* every run with a handle, parked or not */
    pthread_cond_t cond;            /* broadcast when a run parks or a live run ends
                                     * (monotonic: sync_init) */
    int hollow_streak;              /* hollow continuations in a row */
    int64_t breaker_until;          /* mono ms: no holding before this */
    /* counters (on /metrics: continuation_write) */
    unsigned long held, continued, fallback_gone, fallback_hollow, fallback_mismatch,
        expired, evicted, runs_started;
    unsigned long long prompt_bytes;
} held_runs = { .on = 1, .ttl_s = 1800, .hollow_s = 90, .max = 64, .window_ms = 40,
        .lock = PTHREAD_MUTEX_INITIALIZER };

static const char *const TR_NAME[2] = { "http1", "h2" };

/* ======================================================================== */
/* Time, randomness, small helpers                                          */
/* ======================================================================== */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The moment `ms` milliseconds after t (ms < 0: t itself), tv_nsec kept below a second. */
static struct timespec ts_after_ms(struct timespec t, int64_t ms)
{
    int64_t ns;
    if (ms < 0) ms = 0;
    ns = (int64_t)t.tv_nsec + (ms % 1000) * 1000000;
    t.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    t.tv_nsec = (long)(ns % 1000000000);
    return t;
}

/* Every condition variable waited on with a deadline counts it on CLOCK_MONOTONIC, so that a
 * step of the wall clock (NTP, a date set by hand) neither ends the wait early nor stretches
 * it. Such a variable is made here, never with PTHREAD_COND_INITIALIZER: 0 or an errno. */
static int cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int r = pthread_condattr_init(&a);
    if (r) return r;
    r = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (!r) r = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return r;
}

/* Wait on cv (made by cond_init_mono; mu held) at most ms milliseconds from now:
 * pthread_cond_timedwait's result, ETIMEDOUT at once when ms <= 0. */
static int cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec ts;
    if (ms <= 0) return ETIMEDOUT;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts = ts_after_ms(ts, ms);
    return pthread_cond_timedwait(cv, mu, &ts);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int random_fill(void *p, size_t n)
{
    unsigned char *b = p;
    while (n > 0) {
        ssize_t r = getrandom(b, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) goto fallback;
        b += r;
        n -= (size_t)r;
    }
    return 0;
fallback:
    {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        while (n > 0) {
            ssize_t r = read(fd, b, n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { close(fd); return -1; }
            b += r;
            n -= (size_t)r;
        }
        close(fd);
    }
    return 0;
}

static int uuid_new(char out[37])
{
    unsigned char rnd[16];
    if (random_fill(rnd, sizeof rnd)) return -1;
    coai_uuid_format(out, rnd);
    return 0;
}

/* x-blob-encryption-key: 32 random bytes as lowercase hex, one per process, as the CLI sends
 * it on RunSSE and BidiAppend (cursor-2026-autumn.md 5.2). "" when no randomness. */
static char blob_key_hex[65];
static pthread_once_t blob_key_once = PTHREAD_ONCE_INIT;

static void blob_key_init(void)
{
    static const char hx[] = "0123456789abcdef";
    unsigned char k[32];
    size_t i;
    if (random_fill(k, sizeof k)) return;
    for (i = 0; i < sizeof k; i++) {
        blob_key_hex[2 * i] = hx[k[i] >> 4];
        blob_key_hex[2 * i + 1] = hx[k[i] & 15];
    }
    blob_key_hex[64] = 0;
    memset(k, 0, sizeof k);
}

static const char *blob_key(void)
{
    pthread_once(&blob_key_once, blob_key_init);
    return blob_key_hex;
}

/* x-original-request-id of the client request whose RunSSE/BidiAppend this thread is
 * writing: the id of its first run, kept across retries (a new profile or host gets a new
 * x-request-id). Set around those calls by run_start and run_append; NULL elsewhere. */
static __thread const char *up_orig_rid;

/* CURSOR_OAI_TOOL_MODE (issue 31 item 1): client (default) or cursor; set once by configure. */
static coai_tool_mode tool_mode;

/* The allowed-tools header (name, value; empty name: none) of the run whose RunSSE/BidiAppend
 * this thread is writing: the run's own (struct run_up.tools_hdr), set around those calls by
 * run_start and run_append like up_orig_rid; NULL elsewhere. */
static __thread const coai_str *up_tools_hdr;

static void copy_str(char *dst, size_t cap, const char *src, size_t n)
{
    if (cap == 0) return;
    if (n >= cap) {
        /* cut before a UTF-8 continuation byte, never inside a character */
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, src, n);
    dst[n] = 0;
}

static const char *status_text(int st)
{
    switch (st) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    }
    return st < 300 ? "OK" : st < 500 ? "Client Error" : "Server Error";
}

/* ======================================================================== */
/* Listener                                                                 */
/* ======================================================================== */

static void on_signal(int sig)
{
    (void)sig;
    __atomic_store_n(&listener.stop, 1, __ATOMIC_RELAXED);
}

static void *reject_thread_counted(void *arg)
{
    reject_thread(arg);
    pthread_mutex_lock(&listener.lock);
    listener.rejecting--;
    pthread_mutex_unlock(&listener.lock);
    return NULL;
}

static int sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        static const unsigned char v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) return 1;
        return memcmp(a->sin6_addr.s6_addr, v4mapped, 12) == 0 && a->sin6_addr.s6_addr[12] == 127;
    }
    return 0;
}

/* Bind and listen. 0 ok, -1 runtime failure, -2 refused by configuration. */
static int listen_open(void)
{
    struct addrinfo hints, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = -1, one = 1, r, err = 0;
    char host[256], port[8];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    r = getaddrinfo(conf.listen_host[0] ? conf.listen_host : NULL, conf.listen_port, &hints, &res);
    if (r != 0) {
        fprintf(stderr, "cursor-oai: cannot resolve listen address %s: %s\n", conf.listen_host,
                gai_strerror(r));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "cursor-oai: cannot listen on %s:%s: %s\n", conf.listen_host,
                conf.listen_port, strerror(err));
        return -1;
    }
    /* Port 0 picks a free port: record the real one (the Host check compares it). */
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0
        && getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                       NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        copy_str(conf.listen_port, sizeof conf.listen_port, port, strlen(port));
    /* Anyone who reaches a non-loopback socket spends the user's Cursor account: require
     * the client key there. */
    listener.loopback = sockaddr_is_loopback(&ss);
    if (!conf.api_key && !listener.loopback && !conf.allow_unauth) {
        fprintf(stderr, "cursor-oai: refusing to listen on %s:%s (not a loopback address) "
                "without CURSOR_OAI_API_KEY; set a client key, listen on 127.0.0.1, or pass "
                "--allow-unauthenticated\n", conf.listen_host, conf.listen_port);
        close(fd);
        return -2;
    }
    /* listen() only now: a refused configuration never accepts a connection. */
    if (listen(fd, 511) != 0) {
        fprintf(stderr, "cursor-oai: cannot listen on %s:%s: %s\n", conf.listen_host,
                conf.listen_port, strerror(errno));
        close(fd);
        return -1;
    }
    if (!conf.api_key && !listener.loopback)
        srv_log(LOG_WARN, "listening on %s:%s without a client key: anyone who can reach this "
             "port uses your Cursor account", conf.listen_host, conf.listen_port);
    listener.fd = fd;
    return 0;
}

/* Rejected connections past SRV_REJECT_THREADS concurrent ones: the accept loop itself
 * writes their 503 (a fresh socket's buffer always takes it) and lingers on them like
 * reject_thread does, so they too read a 503 rather than a reset. pf[0] is the listener. */
struct linger_set {
    int n;
    struct pollfd pf[1 + SRV_LINGER_MAX];
    int64_t end[1 + SRV_LINGER_MAX];
};

static void linger_add(struct linger_set *lg, int fd)
{
    char a[512];
    int n = reject_answer(a, sizeof a);
    ssize_t w;
    do w = send(fd, a, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT); while (w < 0 && errno == EINTR);
    if (w != n || lg->n >= SRV_LINGER_MAX) { close(fd); return; }
    shutdown(fd, SHUT_WR);
    lg->n++;
    lg->pf[lg->n].fd = fd;
    lg->pf[lg->n].events = POLLIN;
    lg->pf[lg->n].revents = 0;
    lg->end[lg->n] = mono_ms() + 1000;
}

/* Drain what the lingering clients sent; close those that closed or whose second is up. */
static void linger_service(struct linger_set *lg, int polled)
{
    int64_t now = mono_ms();
    int i = 1;
    while (i <= lg->n) {
        int done = now >= lg->end[i];
        if (!done && polled && lg->pf[i].revents) {
            char sink[4096];
            ssize_t r = recv(lg->pf[i].fd, sink, sizeof sink, MSG_DONTWAIT);
            done = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (done) {
            close(lg->pf[i].fd);
            lg->pf[i] = lg->pf[lg->n];
            lg->end[i] = lg->end[lg->n];
            lg->n--;
            continue;
        }
        lg->pf[i].revents = 0;
        i++;
    }
}

static void serve_loop(void)
{
    static struct linger_set lg;
    pthread_attr_t attr, rattr;
    int64_t last_emfile_log = 0;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, SRV_THREAD_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_init(&rattr);
    pthread_attr_setstacksize(&rattr, 64 * 1024);
    pthread_attr_setdetachstate(&rattr, PTHREAD_CREATE_DETACHED);
    memset(&lg, 0, sizeof lg);
    while (!stopping()) {
        struct pollfd *pf = lg.pf;
        struct conn *c;
        pthread_t t;
        int fd, one = 1, over, reject_ok, r;
        pf[0].fd = listener.fd;
        pf[0].events = POLLIN;
        pf[0].revents = 0;
        r = poll(pf, (nfds_t)(1 + lg.n), lg.n ? 100 : 500);
        if (lg.n) linger_service(&lg, r > 0);
        if (r <= 0 || !(pf[0].revents & POLLIN)) {
            pool_prune(0);
            continue;
        }
        fd = accept4(listener.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: pause instead of spinning on a ready listen socket. */
                if (mono_ms() - last_emfile_log > 10000) {
                    srv_log(LOG_ERROR, "accept: %s; pausing %d ms", strerror(errno),
                            SRV_EMFILE_PAUSE_MS);
                    last_emfile_log = mono_ms();
                }
                poll(NULL, 0, SRV_EMFILE_PAUSE_MS);
            }
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_mutex_lock(&listener.lock);
        over = listener.conns >= conf.max_conns;
        reject_ok = listener.rejecting < SRV_REJECT_THREADS;
        if (!over) listener.conns++;
        else if (reject_ok) listener.rejecting++;
        pthread_mutex_unlock(&listener.lock);
        if (over) {
            if (!reject_ok || pthread_create(&t, &rattr, reject_thread_counted,
                                             (void *)(intptr_t)fd) != 0) {
                if (reject_ok) {
                    pthread_mutex_lock(&listener.lock);
                    listener.rejecting--;
                    pthread_mutex_unlock(&listener.lock);
                }
                linger_add(&lg, fd);
            }
            continue;
        }
        c = calloc(1, sizeof *c);
        if (c) c->fd = fd;
        if (!c || pthread_create(&t, &attr, conn_thread, c) != 0) {
            free(c);
            close(fd);
            pthread_mutex_lock(&listener.lock);
            listener.conns--;
            pthread_mutex_unlock(&listener.lock);
            srv_log(LOG_ERROR, "cannot start a connection thread");
        }
    }
    while (lg.n > 0) close(lg.pf[lg.n--].fd);
    pthread_attr_destroy(&attr);
    pthread_attr_destroy(&rattr);
}

/* After SIGTERM: stop accepting, give in-flight requests a grace period. */
static void serve_drain(void)
{
    int64_t end = mono_ms() + SRV_SHUTDOWN_GRACE_MS;
    int left;
    close(listener.fd);
    pool_prune(1);
    pthread_mutex_lock(&listener.lock);
    while (listener.conns > 0
           && cond_wait_ms(&listener.idle, &listener.lock, end - mono_ms()) == 0) {}
    left = listener.conns;
    pthread_mutex_unlock(&listener.lock);
    if (left > 0) srv_log(LOG_WARN, "exiting with %d connection(s) still open", left);
}

/* ======================================================================== */
/* Client sockets                                                           */
/* ======================================================================== */

/* Send what a non-blocking socket takes now, without waiting: the bytes sent (n when all
 * went), -1 when it failed (errno). fd_write_all, run_flush_nb and h2c_send build on it. */
static ssize_t fd_send_some(int fd, const void *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, (const char *)p + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) { off += (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        return -1;
    }
    return (ssize_t)off;
}

/* Write all of p to a client socket. Gives up after SRV_SEND_TIMEOUT_MS without progress.
 * 0 ok, -1 the client is gone or stuck. */
static int fd_write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = fd_send_some(fd, b, n);
        if (w < 0) return -1;
        b += w;
        n -= (size_t)w;
        while (n > 0) {                     /* full: wait until it takes more */
            struct pollfd pf = { fd, POLLOUT, 0 };
            int r = poll(&pf, 1, SRV_SEND_TIMEOUT_MS);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || (pf.revents & (POLLERR | POLLHUP | POLLNVAL))) return -1;
            break;
        }
    }
    return 0;
}

/* Read what is available from a client socket, waiting at most until deadline (mono ms).
 * Returns bytes read, 0 on EOF, -1 on error, -2 on timeout. */
static ssize_t fd_read_until(int fd, void *p, size_t n, int64_t deadline)
{
    for (;;) {
        struct pollfd pf = { fd, POLLIN, 0 };
        int64_t left = deadline - mono_ms();
        ssize_t r;
        int pr;
        if (left <= 0) return -2;
        pr = poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) return -2;
        r = recv(fd, p, n, 0);
        if (r >= 0) return r;
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return -1;
    }
}

/* ======================================================================== */
/* Client connections: requests                                             */
/* ======================================================================== */


/* Image caps per request (README: Images); set by configure() from the environment. */
static coai_image_limits IMG_LIMITS;

/* The Origin port that is always same-origin: the listen port on loopback. Behind a
 * non-loopback bind (a container with a published port) clients may use another port
 * number, so any port is accepted there. The Host check itself accepts any port for an
 * allowed name: tunnels and forwarders (ssh -L 9000:127.0.0.1:18741) bring their own. */
static int listen_port_num(void)
{
    return listener.loopback ? atoi(conf.listen_port) : 0;
}

/* The port of a Host header value ("name:port", "[v6]:port"), 0 when it has none. */
static int host_port_of(coai_str host)
{
    size_t i = host.len;
    int p = 0, mul = 1;
    while (i > 0 && host.ptr[i - 1] >= '0' && host.ptr[i - 1] <= '9' && mul <= 10000) {
        p += (host.ptr[i - 1] - '0') * mul;
        mul *= 10;
        i--;
    }
    return i > 0 && i < host.len && host.ptr[i - 1] == ':' ? p : 0;
}

/* Origin check: the browser page must come from an allowed name on the listen port, or on
 * the port the request itself came in on (the same origin seen through a tunnel). */
static int origin_ok(const coai_http_request *rq, const coai_str *names, size_t nn)
{
    int hp = host_port_of(rq->host);
    return coai_http_origin_allowed(rq->origin, listen_port_num(), names, nn)
        || (hp > 0 && coai_http_origin_allowed(rq->origin, hp, names, nn));
}

/* Names the Host/Origin checks accept besides localhost, 127.0.0.1 and [::1]: --allow-host
 * entries, plus the listen address when it is a specific one. */
static size_t allowed_names(coai_str *out, size_t cap)
{
    size_t n = 0, i;
    for (i = 0; i < conf.allow_n && n < cap; i++) out[n++] = coai_str_c(conf.allow[i]);
    if (n < cap && conf.listen_host[0] && strcmp(conf.listen_host, "0.0.0.0") != 0
        && strcmp(conf.listen_host, "::") != 0)
        out[n++] = coai_str_c(conf.listen_host);
    return n;
}

static int route_is_post(int route)
{
    const struct route_def *rd = route_row(route);
    return rd && strcmp(rd->method, "POST") == 0;
}

/* The last ':' of p[0..n) (a model name may hold one: "scenario:x:generateContent"). */
static const char *last_colon(const char *p, size_t n)
{
    while (n > 0) if (p[--n] == ':') return p + n;
    return NULL;
}

/* The route of a request path, from ROUTE_TABLE only. */
static int route_of(coai_str path)
{
    size_t i;
    for (i = 0; i < ROUTE_ROWS; i++) {
        const char *p = ROUTE_TABLE[i].path, *lb = strchr(p, '{');
        const char *suf = lb ? strchr(lb, '}') : NULL;
        size_t n = lb ? (size_t)(lb - p) : strlen(p), sl;
        if (!lb || !suf) {
            if (coai_str_eq(path, p)) return ROUTE_TABLE[i].route;
            continue;
        }
        sl = strlen(++suf);
        if (path.len > n + sl && memcmp(path.ptr, p, n) == 0
            && memcmp(path.ptr + path.len - sl, suf, sl) == 0
            && !memchr(path.ptr + n, '/', path.len - n - sl))
            return ROUTE_TABLE[i].route;
    }
    return ROUTE_NONE;
}

/* Deadline of the next body read: the gap limit, but never past the whole-body deadline. */
static int64_t body_deadline(int64_t body_end)
{
    int64_t d = mono_ms() + SRV_BODY_IDLE_MS;
    return d < body_end ? d : body_end;
}

/* Count n request bytes of this connection against the process-wide budget
 * (CURSOR_OAI_MAX_INFLIGHT_MB). A request is always admitted when nothing else is in flight,
 * so one body up to the body cap never waits for itself. 0 ok, -1 over the budget. */
static int body_reserve(struct conn *c, size_t n)
{
    int ok;
    if (n <= c->reserved) return 0;
    pthread_mutex_lock(&listener.lock);
    ok = listener.inflight == c->reserved
         || listener.inflight - c->reserved + n <= conf.inflight_max;
    if (ok) {
        listener.inflight += n - c->reserved;
        c->reserved = n;
    }
    pthread_mutex_unlock(&listener.lock);
    return ok ? 0 : -1;
}

/* Raise this request's reservation to n, its body plus what parsing it takes. Within the
 * budget, or over it for one request at a time (each body already read would otherwise wait
 * for the others' and all be refused): the budget is exceeded by at most one parse
 * (COAI_MAX_JSON_VALUES * COAI_JSON_VALUE_COST). 0 ok, -1 over the budget. */
static int parse_reserve(struct conn *c, size_t n)
{
    int ok;
    if (n <= c->reserved) return 0;
    pthread_mutex_lock(&listener.lock);
    ok = listener.inflight == c->reserved
         || listener.inflight - c->reserved + n <= conf.inflight_max;
    if (!ok && !listener.parse_over) {
        ok = 1;
        listener.parse_over = c->parse_over = 1;
    }
    if (ok) {
        listener.inflight += n - c->reserved;
        c->reserved = n;
    }
    pthread_mutex_unlock(&listener.lock);
    return ok ? 0 : -1;
}

static void body_release(struct conn *c)
{
    if (!c->reserved) return;
    pthread_mutex_lock(&listener.lock);
    listener.inflight -= c->reserved;
    if (c->parse_over) listener.parse_over = 0;
    pthread_mutex_unlock(&listener.lock);
    c->reserved = 0;
    c->parse_over = 0;
}

/* Read the request body into c->body. The head is in[0..hl); body bytes already received
 * follow it. On return in[] holds only the bytes after the body (the next request), so the
 * views in c->rq are dead from here on. 0 ok, else the HTTP status to answer (the connection
 * then closes). */
static int read_body(struct conn *c, size_t hl)
{
    coai_http_request *rq = &c->rq;
    size_t have = c->in_len - hl;
    /* The whole body has one deadline as well as the gap between reads: a body that
     * trickles a byte at a time must not hold a slot forever. */
    int64_t body_end = mono_ms() + conf.body_timeout_ms;
    coai_buf_reset(&c->body);
    c->body.max = SRV_BODY_MAX;
    if (rq->chunked) {
        coai_chunked_decoder d;
        memset(&d, 0, sizeof d);
        d.max_body = SRV_BODY_MAX;
        memmove(c->in, c->in + hl, have);
        c->in_len = have;
        for (;;) {
            size_t used = 0, out = 0;
            coai_result r = c->in_len ? coai_chunked_feed(&d, c->in, c->in_len, &used, &out)
                                      : COAI_MORE;
            ssize_t k;
            if (r < 0) return r == COAI_ERR_TOO_BIG ? 413 : 400;
            if (out && coai_buf_append(&c->body, c->in, out)) return 413;
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
            if (r == COAI_DONE) return 0;
            if (body_reserve(c, c->body.len + sizeof c->in) < 0) return 503;
            k = fd_read_until(c->fd, c->in + c->in_len, sizeof c->in - c->in_len,
                              body_deadline(body_end));
            if (k == -2) return 408;
            if (k <= 0) { c->dead = 1; return 400; }
            c->in_len += (size_t)k;
        }
    } else if (rq->content_length > 0) {
        size_t want = (size_t)rq->content_length, take = have < want ? have : want;
        if (body_reserve(c, want) < 0) return 503;
        if (coai_buf_append(&c->body, c->in + hl, take)) return 413;
        memmove(c->in, c->in + hl + take, have - take);
        c->in_len = have - take;
        while (c->body.len < want) {
            /* grow with the bytes that arrive, not with what the header promised */
            size_t step = want - c->body.len < SRV_BODY_STEP ? want - c->body.len : SRV_BODY_STEP;
            ssize_t k;
            if (coai_buf_reserve(&c->body, step)) return 413;
            k = fd_read_until(c->fd, c->body.data + c->body.len, step, body_deadline(body_end));
            if (k == -2) return 408;
            if (k <= 0) { c->dead = 1; return 400; }
            c->body.len += (size_t)k;
            c->body.data[c->body.len] = 0;
        }
    } else {
        memmove(c->in, c->in + hl, have);
        c->in_len = have;
    }
    return 0;
}

/* One request in the metrics and the status page's list: once, as its response's last
 * bytes are about to go out (send_response, stream_end), so that a client that reads
 * /metrics or /status.json the moment it has the answer finds it there; access_log counts
 * one that ended otherwise (an error mid-stream, a client gone). */
static void request_count(struct conn *c)
{
    int64_t ms = mono_ms() - c->t0;
    char labels[METRIC_LABELS_MAX];
    const char *route = route_label(c->route), *dialect = route_dialect(c->route);
    if (c->counted) return;
    c->counted = 1;
    snprintf(labels, sizeof labels, "route=\"%s\",dialect=\"%s\",status=\"%d\"", route, dialect,
             c->status);
    metric_add(M_REQUESTS, labels, 1);
    snprintf(labels, sizeof labels, "route=\"%s\"", route);
    metric_observe(M_DURATION, labels, (double)ms / 1000.0);
    if (c->streaming) metric_gauge_add(M_OPEN_STREAMS, "", -1);
    c->streaming = 0;
    status_note_request(c, ms);
}

/* The end of one request: its access-log line (text, or one JSON object with --log-format
 * json), and its metrics if request_count has not taken them yet. Client-supplied values
 * (method, path, model) are escaped by the logger in text mode and by JSON string escaping
 * here. */
static void access_log(struct conn *c)
{
    int64_t ms = mono_ms() - c->t0;
    const char *route = route_label(c->route), *dialect = route_dialect(c->route);
    request_count(c);
    c->counted = 0;                 /* the next request on this connection */
    c->tok_in = c->tok_out = 0;
    c->errmsg[0] = 0;
    memset(&c->err, 0, sizeof c->err);
    if (conf.log_level < LOG_INFO) return;
    if (log_json) {
        coai_buf b = { 0 };
        char msg[SRV_LOG_ROOM];
        coai_buf_puts(&b, "{\"msg\":\"request\",\"method\":");
        coai_json_str_append(&b, c->method, strlen(c->method));
        coai_buf_puts(&b, ",\"path\":");
        coai_json_str_append(&b, c->path, strlen(c->path));
        coai_buf_printf(&b, ",\"route\":\"%s\",\"dialect\":\"%s\",\"status\":%d,\"model\":", route,
                        dialect, c->status);
        if (c->model[0]) coai_json_str_append(&b, c->model, strlen(c->model));
        else coai_buf_puts(&b, "null");
        coai_buf_printf(&b, ",\"duration_ms\":%lld,\"bytes\":%zu,\"run_id\":", (long long)ms,
                        c->bytes);
        if (c->run_id[0]) coai_json_str_append(&b, c->run_id, strlen(c->run_id));
        else coai_buf_puts(&b, "null");
        coai_buf_puts(&b, ",\"transport\":");
        if (c->transport) coai_json_str_append(&b, c->transport, strlen(c->transport));
        else coai_buf_puts(&b, "null");
        coai_buf_puts(&b, ",\"fallback\":");
        if (c->fallback) coai_json_str_append(&b, c->fallback, strlen(c->fallback));
        else coai_buf_puts(&b, "null");
        coai_buf_putc(&b, '}');
        if (!b.err && b.len < SRV_LOG_LINE) {
            memcpy(msg, b.data, b.len);
            log_msg(LOG_INFO, msg, b.len, 1);
        }
        coai_buf_free(&b);
        return;
    }
    srv_log(LOG_INFO, "%s %s %d model=%s %lldms %zub%s%s%s%s%s%s", c->method, c->path,
            c->status, c->model[0] ? c->model : "-", (long long)ms, c->bytes,
            c->run_id[0] ? " run=" : "", c->run_id, c->transport ? " transport=" : "",
            c->transport ? c->transport : "", c->fallback ? " fallback=" : "",
            c->fallback ? c->fallback : "");
}

/* The API key of a request, as any dialect's clients send it: "Authorization: Bearer", or
 * a dialect's own header (coai_dialect_info.key_header) on any route, or the query parameter
 * of the route's dialect (key_query) on its routes (the status page has its own ?key= rule:
 * status_access). */
static int key_ok(const coai_http_request *rq, int route)
{
    coai_str want = coai_str_c(conf.api_key);
    const struct route_def *rd = route_row(route);
    const coai_dialect_info *di;
    int d;
    if (coai_http_token_equal(coai_http_bearer(rq->authorization), want)) return 1;
    for (d = 0; (di = coai_dialect_get((coai_dialect)d)) != NULL; d++)
        if (di->key_header && coai_http_token_equal(coai_http_header_get(rq->headers,
                                                    rq->header_count, di->key_header), want))
            return 1;
    di = rd ? coai_dialect_get((coai_dialect)rd->dialect) : NULL;
    return di && di->key_query
           && coai_http_token_equal(coai_http_query_param(rq->target, di->key_query), want);
}

/* A request from a Google client: its key as Google's SDKs send it (x-goog-api-key, ?key=) or
 * their x-goog-api-client header, and no anthropic-version. */
static int google_client(const coai_http_request *rq)
{
    return !coai_http_header_get(rq->headers, rq->header_count, "anthropic-version").ptr
           && (coai_http_header_get(rq->headers, rq->header_count, "x-goog-api-key").ptr
               || coai_http_header_get(rq->headers, rq->header_count, "x-goog-api-client").ptr
               || coai_http_query_param(rq->target, "key").ptr);
}

/* The length of "/v1beta/models/" or "/v1/models/" at the start of path, else 0. */
static size_t models_prefix(coai_str path)
{
    if (path.len >= 15 && memcmp(path.ptr, "/v1beta/models/", 15) == 0) return 15;
    if (path.len >= 11 && memcmp(path.ptr, "/v1/models/", 11) == 0) return 11;
    return 0;
}

/* A path outside the table that is Google's: anything under /v1beta/, a model method under
 * /v1/models/ ("x:embedContent"), or anything under /v1/ from a Google client. */
static int google_path(const coai_http_request *rq)
{
    coai_str p = rq->path;
    size_t k = models_prefix(p);
    if (p.len >= 8 && memcmp(p.ptr, "/v1beta/", 8) == 0) return 1;
    if (k == 11 && p.len > k && memchr(p.ptr + k, ':', p.len - k)) return 1;
    return p.len >= 4 && memcmp(p.ptr, "/v1/", 4) == 0 && google_client(rq);
}

/* serve_request's first step: the request line copied, the per-request fields reset. */
static void serve_begin(struct conn *c)
{
    coai_http_request *rq = &c->rq;
    copy_str(c->method, sizeof c->method, rq->method.ptr, rq->method.len);
    copy_str(c->path, sizeof c->path, rq->path.ptr, rq->path.len);
    c->model[0] = 0;
    c->run_id[0] = 0;
    c->fallback = NULL;
    c->transport = NULL;
    c->first_seen = 0;
    c->route = route_of(rq->path);
    c->status = 0;
    c->bytes = 0;
    c->streaming = 0;
    c->http10 = rq->minor_version == 0;
    c->keep = rq->keep_alive && !stopping();
}

/* The route, and the dialect whose shape errors take. */
static int serve_route(struct conn *c)
{
    coai_http_request *rq = &c->rq;
    const struct route_def *rd;
    const coai_dialect_info *di;
    int route, d;
    route = route_of(rq->path);
    /* /v1/models is both OpenAI's (and Anthropic's) model list and, on Google's stable path,
     * Gemini's: a request with a Google key (x-goog-api-key, ?key=, or a Google SDK's
     * x-goog-api-client) and no anthropic-version gets Gemini's; so does GET
     * /v1/models/{model}, which is OpenAI's one-model answer otherwise. */
    if ((route == ROUTE_MODELS || route == ROUTE_MODEL_GET) && google_client(rq))
        route = ROUTE_GEMINI_MODELS;
    c->route = route;
    rd = route_row(route);
    /* Errors take the shape of the route's dialect; any request of a client that names its
     * dialect by a header (coai_dialect_info.client_header: anthropic-version) gets that
     * dialect's shape on any route. A path outside the table that is Google's (any other
     * path under /v1beta/, or under /v1/ from a Google client or naming a model method:
     * /v1/models/x:embedContent) gets Google's, like GET /v1/models/{model} with another
     * method; the rest OpenAI's. */
    for (d = 0; (di = coai_dialect_get((coai_dialect)d)) != NULL; d++)
        if (di->client_header
            && coai_http_header_get(rq->headers, rq->header_count, di->client_header).ptr)
            break;
    c->dialect = di ? (coai_dialect)d
                 : rd && rd->dialect >= 0 ? (coai_dialect)rd->dialect
                 : (!rd || ((rd->flags & RT_URL_MODEL) && !coai_str_eq(rq->method, rd->method)))
                   && google_path(rq)
                 ? COAI_DIALECT_GEMINI
                 : COAI_DIALECT_OPENAI_CHAT;
    return route;
}

/* The model and stream mode a URL names (the route's RT_URL_MODEL, RT_URL_METHOD). 1: the
 * name is not acceptable (a 400 once the head checks pass), 0 ok. */
static int serve_url_model(struct conn *c, int route)
{
    coai_http_request *rq = &c->rq;
    const struct route_def *rd = route_row(route);
    size_t pfx;
    int gm_bad = 0;
    c->gm_model[0] = 0;
    c->gm_stream = 0;
    /* (a route of another dialect than the request's: anthropic-version on a Gemini path) */
    if (rd && (rd->flags & RT_URL_MODEL) && (rd->dialect < 0 || rd->dialect == (int)c->dialect)
        && (pfx = models_prefix(rq->path)) > 0 && rq->path.len > pfx) {
        /* copied now (the head's views die when the body is read): the model of the URL
         * (percent-decoded) and the stream mode */
        const char *p = rq->path.ptr + pfx, *end = rq->path.ptr + rq->path.len;
        const char *colon = rd->flags & RT_URL_METHOD
                            ? last_colon(p, (size_t)(end - p)) : NULL;
        coai_str mt = { p, (size_t)((colon ? colon : end) - p) };
        /* a control byte in the name, or one too long: a 400 below, never a shorter name */
        gm_bad = coai_gemini_url_model(mt, c->gm_model, sizeof c->gm_model) < 0;
        if (colon && (size_t)(end - colon - 1) == 21 && memcmp(colon + 1, "streamGenerateContent",
                                                               21) == 0)
            c->gm_stream = coai_str_eq(coai_http_query_param(rq->target, "alt"), "sse") ? 1 : 2;
    }
    return gm_bad;
}

/* The Claude Code session id, copied now: the head's views die when the body is read. */
static void serve_session_key(struct conn *c)
{
    coai_http_request *rq = &c->rq;
    coai_str k = coai_http_header_get(rq->headers, rq->header_count,
                                      "x-claude-code-session-id");
    copy_str(c->convkey, sizeof c->convkey, k.ptr ? k.ptr : "", k.len);
}

/* The checks on the head alone: host, origin, route and method, content type, API key,
 * the URL's model, size; then 100 Continue if asked. 0 go on, -1 answered (or the write
 * failed). */
static int serve_check_head(struct conn *c, size_t hl, int route, int gm_bad)
{
    coai_http_request *rq = &c->rq;
    coai_str names[SRV_MAX_ALLOW + 1];
    size_t nn = allowed_names(names, sizeof names / sizeof names[0]);
    int is_post = coai_str_eq(rq->method, "POST"), is_get = coai_str_eq(rq->method, "GET");
    int auth = route_row(route) ? route_row(route)->auth : AUTH_KEY;
    /* Errors before the body is read close the connection: the unread body would otherwise
     * be taken for the next request. */
    if (!coai_http_host_allowed(rq->host, names, nn, 0)) {
        c->keep = 0;
        send_error(c, 403, "invalid_request_error", "forbidden_host", NULL,
                   "Host header not allowed (use localhost, 127.0.0.1 or [::1], or start the "
                   "server with --allow-host NAME)", NULL);
        return -1;
    }
    if (rq->origin.ptr && !origin_ok(rq, names, nn)) {
        c->keep = 0;
        send_error(c, 403, "invalid_request_error", "forbidden_origin", NULL,
                   "cross-origin requests are not allowed", NULL);
        return -1;
    }
    if (route == ROUTE_NONE || (coai_dialect_get(c->dialect)->method_404
                                && ((route_is_post(route) && !is_post)
                                    || (!route_is_post(route) && !is_get)))) {
        /* (Google answers a method its path does not have, /v1/models/x:embedContent, with
         * 404 NOT_FOUND, not 405) */
        char msg[200];
        c->keep = 0;
        snprintf(msg, sizeof msg, "Unknown request URL: %s %s", c->method, c->path);
        send_error(c, 404, "invalid_request_error", "unknown_url", NULL, msg, NULL);
        return -1;
    }
    if ((route_is_post(route) && !is_post) || (!route_is_post(route) && !is_get)) {
        char msg[200];
        c->keep = 0;
        snprintf(msg, sizeof msg, "Method %s not allowed for %s", c->method, c->path);
        send_error(c, 405, "invalid_request_error", "method_not_allowed", NULL, msg,
                   route_is_post(route) ? "Allow: POST\r\n" : "Allow: GET\r\n");
        return -1;
    }
    if (is_post && !coai_http_is_json(rq->content_type)) {
        c->keep = 0;
        send_error(c, 415, "invalid_request_error", "unsupported_media_type", NULL,
                   "Content-Type must be application/json", NULL);
        return -1;
    }
    if (conf.api_key && auth != AUTH_NONE && !key_ok(rq, route)
        /* the status page: its cookie, or /?key= once (a browser cannot send a header) */
        && !(auth >= AUTH_COOKIE && status_access(rq, route))) {
        c->keep = 0;
        send_error(c, 401, "invalid_request_error", "invalid_api_key", NULL,
                   auth == AUTH_BROWSER
                   ? "This server needs its API key: open /?key=<CURSOR_OAI_API_KEY> once in "
                     "this browser (the key is then kept in a cookie), or send "
                     "'Authorization: Bearer <key>'."
                   : "Incorrect API key provided. Send it as 'Authorization: Bearer <key>', "
                     "'x-api-key: <key>', 'x-goog-api-key: <key>' or '?key=<key>'.",
                   "WWW-Authenticate: Bearer\r\n");
        return -1;
    }
    if (gm_bad) {
        c->keep = 0;
        send_error(c, 400, "invalid_request_error", "invalid_model", NULL,
                   "the model name in the URL holds a control character or is longer than 255 "
                   "bytes", NULL);
        return -1;
    }
    if (rq->content_length > (int64_t)SRV_BODY_MAX) {
        c->keep = 0;
        send_error(c, 413, "invalid_request_error", "request_too_large", NULL,
                   "request body too large", NULL);
        return -1;
    }
    if (rq->expect_continue && (rq->chunked || rq->content_length > 0) && c->in_len == hl
        && conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0)
        return -1;
    return 0;
}

/* The body read, and what parsing it will take reserved. 0 go on, -1 answered. */
static int serve_read_body(struct conn *c, size_t hl)
{
    int st = read_body(c, hl);
    if (st) {
        c->keep = 0;
        if (st == 503 && !c->dead)
            send_error(c, 503, "server_error", "server_is_overloaded", NULL,
                       "too many request bytes in flight (CURSOR_OAI_MAX_INFLIGHT_MB); retry "
                       "later", NULL);
        else if (!c->dead)
            send_error(c, st, "invalid_request_error", NULL, NULL,
                       st == 408 ? "timed out reading the request body"
                       : st == 413 ? "request body too large" : "malformed request body", NULL);
        else
            c->status = st;
        return -1;
    }
    if (c->body.len) {
        /* What parsing will take, not only the body's bytes, counts against the in-flight
         * budget: a body of tiny JSON values costs many times its size (issue 22 item 6). */
        size_t nv = coai_json_values((const char *)c->body.data, c->body.len);
        if (nv > COAI_MAX_JSON_VALUES) {
            char msg[160];
            snprintf(msg, sizeof msg, "the request body has %zu JSON values; at most %d are "
                     "accepted in one request", nv, COAI_MAX_JSON_VALUES);
            c->keep = 0;
            send_error(c, 400, "invalid_request_error", "too_many_json_values", NULL, msg,
                       NULL);
            return -1;
        }
        if (parse_reserve(c, c->body.len + nv * COAI_JSON_VALUE_COST) < 0) {
            c->keep = 0;
            send_error(c, 503, "server_error", "server_is_overloaded", NULL,
                       "too many request bytes in flight, counting what parsing them takes "
                       "(CURSOR_OAI_MAX_INFLIGHT_MB); retry later", NULL);
            return -1;
        }
    }
    return 0;
}

/* GET /health: liveness and the credentials' state. */
static int handle_health(struct conn *c)
{
    char hb[160];
    int k = snprintf(hb, sizeof hb, "{\"status\":\"ok\",\"credentials\":\"%s\"}",
                     cred_health());
    return send_response(c, 200, "application/json", NULL, hb, (size_t)k);
}

/* GET /metrics. */
static int handle_metrics(struct conn *c)
{
    coai_buf mb = { 0 };
    int r;
    metrics_write(&mb);
    if (mb.err) r = send_error(c, 500, "server_error", NULL, NULL, "out of memory", NULL);
    else r = send_response(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, mb.data,
                           mb.len);
    coai_buf_free(&mb);
    return r;
}

/* The route's handler, from its row of ROUTE_TABLE. */
static void serve_dispatch(struct conn *c, int route)
{
    const struct route_def *rd = route_row(route);
    if (rd) rd->handler(c);
}

/* The request is done: its body released, logged; 0 keep the connection, -1 close. */
static int serve_end(struct conn *c)
{
    body_release(c);
    access_log(c);
    c->dialect = COAI_DIALECT_OPENAI_CHAT;      /* errors before the next head is parsed */
    if (c->body.cap > 1024 * 1024) coai_buf_free(&c->body);   /* do not hoard big bodies */
    return c->keep && !c->dead ? 0 : -1;
}

/* Serve one parsed request whose head is in[0..hl). 0: keep the connection, -1: close. */
static int serve_request(struct conn *c, size_t hl)
{
    int route, gm_bad;
    serve_begin(c);
    route = serve_route(c);
    gm_bad = serve_url_model(c, route);
    serve_session_key(c);
    if (serve_check_head(c, hl, route, gm_bad) < 0) return serve_end(c);
    c->key_q = status_key_query(&c->rq, route);   /* the head's views end with read_body */
    if (serve_read_body(c, hl) < 0) return serve_end(c);
    serve_dispatch(c, route);
    return serve_end(c);
}

/* 1 when fewer than an eighth of the --max-conns slots (at least one) are free: idle
 * keep-alive connections then close after SRV_KEEPALIVE_PRESSURE_MS instead of
 * SRV_KEEPALIVE_IDLE_MS. */
static int slots_short(void)
{
    int r, spare;
    pthread_mutex_lock(&listener.lock);
    spare = conf.max_conns / 8 > 1 ? conf.max_conns / 8 : 1;
    r = conf.max_conns - listener.conns < spare;
    pthread_mutex_unlock(&listener.lock);
    return r;
}

/* The connection loop: read a head, serve it, repeat while keep-alive. */
static void conn_serve(struct conn *c)
{
    int first = 1;
    for (;;) {
        int64_t head_deadline;
        int status = 0;
        long hl;
        if (c->in_len == 0) {
            int64_t idle_start = mono_ms();
            int64_t idle_end = idle_start + (first ? SRV_HEAD_TIMEOUT_MS : SRV_KEEPALIVE_IDLE_MS);
            ssize_t k = -2;
            /* wait in short slices so that an idle connection notices a shutdown, and an idle
             * keep-alive connection gives its slot up early when slots run short */
            while (k == -2 && !stopping() && mono_ms() < idle_end) {
                int64_t slice = mono_ms() + 1000;
                if (!first && slots_short()) {
                    int64_t short_end = idle_start + SRV_KEEPALIVE_PRESSURE_MS;
                    if (short_end < idle_end) idle_end = short_end;
                    if (mono_ms() >= idle_end) break;
                }
                k = fd_read_until(c->fd, c->in, sizeof c->in, slice < idle_end ? slice : idle_end);
            }
            if (k <= 0) return;          /* idle timeout or the client left: close quietly */
            c->in_len = (size_t)k;
        }
        head_deadline = mono_ms() + SRV_HEAD_TIMEOUT_MS;
        c->t0 = mono_ms();
        for (;;) {
            ssize_t k;
            hl = coai_http_parse_request(c->in, c->in_len, &c->rq, &status);
            if (hl != COAI_MORE) break;
            if (c->in_len == sizeof c->in) { hl = COAI_ERR_TOO_BIG; status = 431; break; }
            k = fd_read_until(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, head_deadline);
            if (k == -2) { hl = COAI_ERR_HTTP; status = 408; break; }
            if (k <= 0) return;
            c->in_len += (size_t)k;
        }
        if (hl < 0) {
            c->keep = 0;
            copy_str(c->method, sizeof c->method, "-", 1);
            copy_str(c->path, sizeof c->path, "-", 1);
            c->bytes = 0;
            c->model[0] = 0;
            c->run_id[0] = 0;
            c->fallback = NULL;
            c->transport = NULL;
            c->route = ROUTE_NONE;
            send_error(c, status ? status : 400, "invalid_request_error", NULL, NULL,
                       status == 408 ? "timed out reading the request head"
                       : status == 431 ? "request head too large" : "malformed request", NULL);
            access_log(c);
            return;
        }
        if (serve_request(c, (size_t)hl) < 0) return;
        first = 0;
    }
}

#define SRV_LINGER_MS 1000          /* lingering close: the longest drain */

/* Closing with bytes of the client unread makes the close a reset, and a reset can cost the
 * client the answer just written (its send fails first, or its stack drops what it had not
 * read). So: stop sending, then read and drop whatever still comes until the client closes,
 * for SRV_LINGER_MS at most. */
static void linger_drain(int fd)
{
    char sink[4096];
    int64_t end = mono_ms() + SRV_LINGER_MS;
    shutdown(fd, SHUT_WR);
    while (fd_read_until(fd, sink, sizeof sink, end) > 0) {}
}

static void *conn_thread(void *arg)
{
    struct conn *c = arg;
    conn_serve(c);
    /* closed by an error answer (head or body errors, refusals before the body): the
     * request may be partly unread */
    if (!c->keep && c->status >= 400 && !c->dead) linger_drain(c->fd);
    close(c->fd);
    coai_buf_free(&c->body);
    coai_buf_free(&c->wbuf);
    coai_buf_free(&c->wpend);
    free(c);
    pthread_mutex_lock(&listener.lock);
    listener.conns--;
    pthread_cond_signal(&listener.idle);
    pthread_mutex_unlock(&listener.lock);
    return NULL;
}

/* Over --max-conns: answer 503 at once, then a short lingering close so the unread request
 * does not turn our answer into a reset. */
static const char REJECT_BODY[] =
    "{\"error\":{\"message\":\"server is at its connection limit, retry later\","
    "\"type\":\"server_error\",\"param\":null,\"code\":\"server_is_overloaded\"}}";

/* The whole 503 answer of a rejected connection into out; its length. */
static int reject_answer(char *out, size_t cap)
{
    return snprintf(out, cap,
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    "Retry-After: 1\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                    sizeof REJECT_BODY - 1, REJECT_BODY);
}

static void *reject_thread(void *arg)
{
    int fd = (int)(intptr_t)arg, n;
    char head[512];
    n = reject_answer(head, sizeof head);
    fd_write_all(fd, head, (size_t)n);
    linger_drain(fd);
    close(fd);
    return NULL;
}

/* ======================================================================== */
/* Models                                                                   */
/* ======================================================================== */

#define PATH_MODELS "/aiserver.v1.AiService/GetUsableModels"
#define PATH_RUNSSE "/agent.v1.AgentService/RunSSE"
#define PATH_APPEND "/aiserver.v1.BidiService/BidiAppend"
#define PATH_SERVER_CONFIG "/aiserver.v1.ServerConfigService/GetServerConfig"
#define AGENT_FAIL_TTL_MS 30000     /* a failed GetServerConfig is asked again after this */
#define MODELS_FAIL_TTL_MS 30000    /* after a failed fetch the upstream is asked again */

/* One Connect unary JSON call on the base URL with body "{}" and the agent's token (model
 * list, dashboard): once more after a 401, with the token renewed. 0 with the 2xx answer in
 * body (at most max bytes; larger is a 502 saying too_big), -1 with *err filled. */
static int up_unary_json(const char *path, size_t max, const char *too_big, coai_buf *body,
                         coai_error *err)
{
    char rid[37];
    int status = 0, attempt;
    uint64_t gen = 0;
    for (attempt = 0; attempt < 2; attempt++) {
        coai_error re;
        int fr;
        coai_buf_reset(body);
        body->max = max;
        if (uuid_new(rid) < 0) {
            coai_error_set(err, 500, "server_error", NULL, NULL, "no randomness available");
            return -1;
        }
        if (up_call(path, 1, "{}", 2, rid, -1, &gen, &status, body, err) < 0) return -1;
        if (status >= 200 && status <= 299) break;
        coai_error_from_http_call(status, (const char *)body->data, body->len, path, err);
        if (err->status != 401 || attempt > 0) return -1;
        memset(&re, 0, sizeof re);
        fr = cred_refresh(gen, &re);
        if (fr == RENEW_NONE) return -1;
        if (fr == RENEW_FAILED) { *err = re; return -1; }
    }
    if (body->err) {
        coai_error_set(err, 502, "upstream_error", "upstream_protocol_error", NULL, "%s",
                       too_big);
        return -1;
    }
    return 0;
}

/* One GetUsableModels call (no cache): renews an expiring token first, and once more after a
 * 401. The one place the list is parsed: 0 with it in *m (the caller frees it), -1 with *err
 * filled (m is then empty, still freeable). */
static int models_fetch(coai_models *m, coai_error *err)
{
    coai_buf body = { 0 };
    int rc = -1;
    memset(m, 0, sizeof *m);
    if (cred_require(err) < 0) return -1;
    if (up_unary_json(PATH_MODELS, UP_MODELS_MAX, "upstream model list too large", &body,
                      err) < 0)
        goto out;
    if (coai_models_parse(m, (const char *)body.data, body.len) < 0) {
        coai_error_set(err, 502, "upstream_error", "upstream_protocol_error", NULL,
                       "the upstream model list is not valid JSON");
        goto out;
    }
    rc = 0;
out:
    coai_buf_free(&body);
    return rc;
}

/* One fetch whose result becomes the cached list (or the remembered failure). The caller set
 * models_cache.fetching; this clears it and wakes the waiters. */
/* Drops a reference to a list; called with models_cache.lock held. The last one frees it. */
static void models_put_locked(struct models_list *l)
{
    if (l && --l->refs == 0) {
        coai_models_free(&l->m);
        free(l);
    }
}

/* Drops the reference models_get handed out (NULL: none). */
static void models_put(struct models_list *l)
{
    if (!l) return;
    pthread_mutex_lock(&models_cache.lock);
    models_put_locked(l);
    pthread_mutex_unlock(&models_cache.lock);
}

static void models_refresh(void)
{
    struct models_list *l = NULL;
    coai_models m;
    coai_error fe;
    int rc;
    memset(&fe, 0, sizeof fe);
    rc = models_fetch(&m, &fe);
    if (rc < 0 && fe.status >= 500)
        srv_log(LOG_WARN, "GetUsableModels failed: %s", fe.message);
    if (rc == 0) {
        l = malloc(sizeof *l);
        if (l) {
            l->refs = 1;                /* the cache's */
            l->m = m;
        } else {
            coai_models_free(&m);
        }
    }
    pthread_mutex_lock(&models_cache.lock);
    if (rc == 0) {
        /* the old list goes when its last reader lets go of it */
        models_put_locked(models_cache.list);
        models_cache.list = l;
        models_cache.at = l ? mono_ms() : 0;
        models_cache.fail_at = 0;
    } else {
        models_cache.fail_at = mono_ms();
        models_cache.err = fe;
    }
    models_cache.fetching = 0;
    models_cache.seq++;
    pthread_cond_broadcast(&models_cache.fetched);
    pthread_mutex_unlock(&models_cache.lock);
}

static void *models_refresh_thread(void *arg)
{
    (void)arg;
    models_refresh();
    return NULL;
}

/* 1 when the client on fd has left (closed, reset or half-closed); pipelined request bytes are
 * not a departure. Never blocks. */
static int fd_client_gone(int fd)
{
    struct pollfd pf = { fd, POLLIN, 0 };
    char b;
    ssize_t r;
    if (fd < 0) return 0;
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLERR | POLLHUP | POLLNVAL)) return 1;
    r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    return r < 0 && !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* The account's model list: a reference into *list (when list is not NULL; drop it with
 * models_put) and `want` resolved into resolved. The list is cached for CURSOR_OAI_MODELS_TTL;
 * a stale list is served at once while one background thread fetches a new one
 * (stale-while-revalidate), so a slow upstream never holds a request here. Only with no good
 * list yet does a request wait for the fetch, and then at most CURSOR_OAI_MODELS_WAIT and only
 * while its client (client_fd, -1 = none) is still there. When a fetch fails, the last good
 * list is served (stale-while-error) and the upstream is asked again after MODELS_FAIL_TTL_MS;
 * with no good list ever, -1 with the reason in *err (499: the client left; 504
 * models_wait_timeout: the first fetch is still running). */
static int models_get(struct models_list **list, coai_error *err, coai_str want,
                      char *resolved, size_t cap, int *fetched, int client_fd)
{
    int64_t fail_ttl = conf.models_ttl_ms < MODELS_FAIL_TTL_MS ? conf.models_ttl_ms
                                                               : MODELS_FAIL_TTL_MS;
    int64_t wait_end = mono_ms() + conf.models_wait_ms;
    uint64_t seq0;                      /* a fetch that ends after this is news to this call */
    int rc;
    if (list) *list = NULL;
    pthread_mutex_lock(&models_cache.lock);
    seq0 = models_cache.seq;
    for (;;) {
        int64_t now = mono_ms(), left;
        if (models_cache.at && now - models_cache.at < conf.models_ttl_ms) goto serve;
        if (models_cache.fail_at && now - models_cache.fail_at < fail_ttl) goto serve;
        if (!models_cache.fetching) {
            pthread_attr_t attr;
            pthread_t t;
            int started;
            models_cache.fetching = 1;
            pthread_attr_init(&attr);
            pthread_attr_setstacksize(&attr, SRV_THREAD_STACK);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            started = pthread_create(&t, &attr, models_refresh_thread, NULL) == 0;
            pthread_attr_destroy(&attr);
            if (!started) {             /* no thread: fetch here */
                pthread_mutex_unlock(&models_cache.lock);
                models_refresh();
                pthread_mutex_lock(&models_cache.lock);
                continue;
            }
        }
        if (models_cache.at) goto serve;    /* stale, being revalidated */
        if (now >= wait_end) {
            pthread_mutex_unlock(&models_cache.lock);
            coai_error_set(err, 504, "server_error", "models_wait_timeout", NULL,
                           "the model list has not arrived within %lld s (GetUsableModels is "
                           "slow or silent); try again", (long long)(conf.models_wait_ms / 1000));
            err->retry_after = 1;
            if (fetched) *fetched = 0;
            return -1;
        }
        /* wait in slices of at most a second to notice a client that left */
        left = wait_end - now < 1000 ? wait_end - now : 1000;
        cond_wait_ms(&models_cache.fetched, &models_cache.lock, left);
        if (fd_client_gone(client_fd)) {
            pthread_mutex_unlock(&models_cache.lock);
            coai_error_set(err, 499, "server_error", "client_closed", NULL,
                           "client went away while waiting for the model list");
            if (fetched) *fetched = 0;
            return -1;
        }
    }
serve:
    /* a good list, fresh or stale; else the reason of the last failure */
    if (models_cache.at && models_cache.list) {
        rc = 0;
        if (list) {
            models_cache.list->refs++;
            *list = models_cache.list;
        }
        if (resolved) {
            coai_str m = coai_models_resolve(&models_cache.list->m, want);
            copy_str(resolved, cap, m.ptr, m.len);
        }
    } else {
        rc = -1;
        /* fresh: this call's own fetch, or one it waited for, failed just now */
        if (fetched) *fetched = models_cache.seq != seq0;
        *err = models_cache.err;
        if (!err->status)
            coai_error_set(err, 502, "upstream_error", "upstream_error", NULL,
                           "the model list is unavailable");
    }
    pthread_mutex_unlock(&models_cache.lock);
    return rc;
}

/* ---- Hosts per HTTP version (issue 10 item 2, issue 24 item 1) ------------------------
 * HTTP/1.1 runs (RunSSE + BidiAppend) go to the base URL (CURSOR_API_URL: api2 serves
 * agent.v1.AgentService over HTTP/1.1), or to CURSOR_OAI_AGENT_URL when it is set:
 * run_host_get(). The host GetServerConfig names (agentUrlConfig.agentUrl, the privacy
 * backend, since we always send x-ghost-mode: true; *.api5.cursor.sh live) serves HTTP/2
 * only (cursor-2026-autumn.md 5.1): agent_h2_get() resolves and caches it for an HTTP/2
 * transport, and `doctor` shows it. A host that refuses HTTP/1.1 at the connection level
 * (a 400 "illegal request line", a close before any byte, HTTP/2 frames in answer, a 464
 * from a host that is not the base URL) is
 * remembered as HTTP/2-only (h2only_add) and skipped by run_host_get() for
 * CURSOR_OAI_H2ONLY_REPROBE seconds, then tried again. */

/* How long a host that refused HTTP/1.1 is skipped before a run tries it again (10 minutes,
 * CURSOR_OAI_H2ONLY_REPROBE). The live HTTP/2-only hosts stay so, and a try costs a run one
 * refused connection before it goes to the base URL (the client never sees it), so a
 * re-probe is cheap but pointless often; a refusal that was a moment's trouble (a close
 * before any byte while a proxy or load balancer restarted) or a host that now serves
 * HTTP/1.1 gets its runs back within the same 10 minutes, not at the next restart, as
 * HTTP/2 does after it failed (CURSOR_OAI_H2_REPROBE). */
#define H2ONLY_REPROBE_MS (10 * 60 * 1000)
static int h2only_reprobe_ms = H2ONLY_REPROBE_MS;

/* GetServerConfig's http2_config (COAI_H2CFG_*), -1 while no answer has been read (never
 * with CURSOR_OAI_AGENT_URL: GetServerConfig is then not asked). tr_choose() obeys it unless
 * CURSOR_OAI_TRANSPORT is set. Atomic: written by agent_h2_get, read by every run. */
static int srv_h2cfg = -1;

/* One GetServerConfig call. 0 with *out set, 1 the answer names no agent URL, -1 *e. When
 * the answer was read (0, 1), *h2cfg is its http2_config. */
static int server_config_fetch(coai_url *out, int *h2cfg, coai_error *e)
{
    static const char body[] = "{\"telem_enabled\":false}";
    coai_buf resp = { 0 };
    char rid[37];
    int status = 0, rc = -1;
    resp.max = UP_ERR_BODY_MAX;
    if (!cred_have()) return cred_missing(e);
    if (uuid_new(rid) < 0) {
        coai_error_set(e, 500, "server_error", NULL, NULL, "no randomness available");
        return -1;
    }
    if (up_call_host(NULL, PATH_SERVER_CONFIG, UPH_JSON, body, sizeof body - 1, rid, -1, NULL,
                     &status, &resp, e) < 0)
        goto done;
    if (status < 200 || status > 299) {
        coai_error_from_http_call(status, (const char *)resp.data, resp.len, PATH_SERVER_CONFIG,
                                  e);
        goto done;
    }
    rc = coai_server_config_agent_url((const char *)resp.data, resp.len, 1, out);
    *h2cfg = coai_server_config_http2((const char *)resp.data, resp.len);
    if (rc < 0)
        coai_error_set(e, 502, "upstream_error", "upstream_protocol_error", NULL,
                       "GetServerConfig answered something that is not a JSON object");
done:
    coai_buf_free(&resp);
    return rc;
}

/* The agentUrlConfig host (the HTTP/2 transport's) into *out, and where it came from into
 * src when not NULL. CURSOR_OAI_AGENT_URL forces it. When GetServerConfig fails or names
 * nothing it is the base URL (asked again after AGENT_FAIL_TTL_MS). Single flight: other
 * threads wait for a call in progress. */
static void agent_h2_get(coai_url *out, char *src, size_t cap)
{
    coai_url u;
    coai_error e;
    int rc, h2cfg = -1, was;
    if (conf.agent_forced.host[0]) {
        *out = conf.agent_forced;
        if (src) snprintf(src, cap, "CURSOR_OAI_AGENT_URL");
        return;
    }
    pthread_mutex_lock(&hosts.lock);
    for (;;) {
        if (hosts.agent_h2_at
            && (!hosts.agent_h2_failed || mono_ms() - hosts.agent_h2_at < AGENT_FAIL_TTL_MS))
            goto have;
        if (!hosts.agent_h2_fetching) break;
        pthread_cond_wait(&hosts.agent_h2_done, &hosts.lock);
    }
    hosts.agent_h2_fetching = 1;
    pthread_mutex_unlock(&hosts.lock);
    memset(&e, 0, sizeof e);
    rc = server_config_fetch(&u, &h2cfg, &e);
    was = __atomic_load_n(&srv_h2cfg, __ATOMIC_RELAXED);
    if (rc >= 0 && h2cfg != was) {
        __atomic_store_n(&srv_h2cfg, h2cfg, __ATOMIC_RELAXED);
        if (h2cfg > 0 || was > 0)
            srv_log(LOG_INFO, "GetServerConfig: http2_config=%s%s",
                    coai_http2_config_name(h2cfg), coai_http2_config_transport(h2cfg) == 1
                    ? ": runs use HTTP/1.1 (RunSSE + BidiAppend), as Cursor's SDK does"
                    : coai_http2_config_transport(h2cfg) == 2
                    ? ": runs use HTTP/2 without the HTTP/1.1 fallback, as Cursor's SDK does"
                    : ": runs use HTTP/2 with the HTTP/1.1 fallback");
    }
    pthread_mutex_lock(&hosts.lock);
    if (rc == 0) {
        hosts.agent_h2 = u;
        hosts.agent_h2_failed = 0;
        snprintf(hosts.agent_h2_src, sizeof hosts.agent_h2_src, "named by GetServerConfig");
    } else {
        hosts.agent_h2 = conf.base;
        hosts.agent_h2_failed = 1;
        if (rc == 1)
            snprintf(hosts.agent_h2_src, sizeof hosts.agent_h2_src,
                     "the base URL: GetServerConfig named no agent URL");
        else
            snprintf(hosts.agent_h2_src, sizeof hosts.agent_h2_src,
                     "the base URL: GetServerConfig failed: %s", e.message);
    }
    hosts.agent_h2_at = mono_ms();
    hosts.agent_h2_fetching = 0;
    pthread_cond_broadcast(&hosts.agent_h2_done);
    *out = hosts.agent_h2;
    if (src) snprintf(src, cap, "%s", hosts.agent_h2_src);
    {
        char what[sizeof hosts.agent_h2_src];
        snprintf(what, sizeof what, "%s", hosts.agent_h2_src);
        pthread_mutex_unlock(&hosts.lock);      /* not held while logging */
        srv_log(rc == 0 ? LOG_INFO : LOG_WARN, "HTTP/2 agent host https://%s%s (%s)",
                out->authority, out->prefix, what);
    }
    return;
have:
    *out = hosts.agent_h2;
    if (src) snprintf(src, cap, "%s", hosts.agent_h2_src);
    pthread_mutex_unlock(&hosts.lock);
}

/* The entry of host h in hosts.h2only, or -1. Under hosts.lock. */
static int h2only_find(const coai_url *h)
{
    int i;
    for (i = 0; i < hosts.h2only_n; i++)
        if (up_same_host(&hosts.h2only[i].host, h)) return i;
    return -1;
}

/* 1 when host h refused HTTP/1.1 less than h2only_reprobe_ms ago (how, into why when not
 * NULL); after that it is tried again. */
static int h2only_has(const coai_url *h, char *why, size_t cap)
{
    int i, hit;
    pthread_mutex_lock(&hosts.lock);
    i = h2only_find(h);
    hit = i >= 0 && mono_ms() - hosts.h2only[i].at < h2only_reprobe_ms;
    if (hit && why) snprintf(why, cap, "%s", hosts.h2only[i].why);
    pthread_mutex_unlock(&hosts.lock);
    return hit;
}

/* Remember host h as HTTP/2-only for h2only_reprobe_ms (logged once per refusal that is not
 * already remembered: the first, and each re-probe refused again). */
static void h2only_add(const coai_url *h, const char *why)
{
    int i, again = 0;
    int64_t now = mono_ms();
    pthread_mutex_lock(&hosts.lock);
    i = h2only_find(h);
    if (i >= 0 && now - hosts.h2only[i].at < h2only_reprobe_ms) {
        pthread_mutex_unlock(&hosts.lock);      /* a concurrent run said it already */
        return;
    }
    if (i >= 0) again = 1;
    else if (hosts.h2only_n < SRV_H2ONLY_MAX) i = hosts.h2only_n++;
    if (i >= 0) {
        hosts.h2only[i].host = *h;
        snprintf(hosts.h2only[i].why, sizeof hosts.h2only[0].why, "%s", why);
        hosts.h2only[i].at = now;
    }
    pthread_mutex_unlock(&hosts.lock);
    srv_log(LOG_WARN, "https://%s%s serves HTTP/2 only (it answered an HTTP/1.1 request with "
            "%s%s); HTTP/1.1 runs go to the base URL https://%s%s instead for the next %d s, "
            "then it is tried again", h->authority, h->prefix, why,
            again ? ", again after a re-probe" : "", conf.base.authority, conf.base.prefix,
            h2only_reprobe_ms / 1000);
}

/* The host of a new HTTP/1.1 run into *out (where it came from into src when not NULL):
 * CURSOR_OAI_AGENT_URL unless that host refused HTTP/1.1, else the base URL. */
static void run_host_get(coai_url *out, char *src, size_t cap)
{
    if (conf.agent_forced.host[0] && !h2only_has(&conf.agent_forced, NULL, 0)) {
        *out = conf.agent_forced;
        if (src) snprintf(src, cap, "CURSOR_OAI_AGENT_URL");
        return;
    }
    *out = conf.base;
    if (!src) return;
    if (conf.agent_forced.host[0])
        snprintf(src, cap, "the base URL: CURSOR_OAI_AGENT_URL https://%s%s serves HTTP/2 only",
                 conf.agent_forced.authority, conf.agent_forced.prefix);
    else
        snprintf(src, cap, "the base URL, CURSOR_API_URL");
}

static int handle_models(struct conn *c)
{
    coai_buf out = { 0 };
    struct models_list *l = NULL;
    const coai_model *hit = NULL;
    coai_error e;
    memset(&e, 0, sizeof e);
    if (models_get(&l, &e, coai_str_c(NULL), NULL, 0, NULL, c->fd) < 0) {
        send_coai_error(c, &e);
        goto done;
    }
    if (c->gm_model[0]) {
        /* GET /v1beta/models/{model}, /v1/models/{model}: one of the account's models
         * (modelId, display id or an alias), in the shape of the request's dialect (Gemini's,
         * Anthropic's with an anthropic-version header, as for the list, or OpenAI's), else
         * that dialect's 404 */
        hit = coai_dialect_model_find(c->dialect, &l->m, c->gm_model, c->path, &e);
        if (!hit) {
            send_error_ex(c, &e, NULL);
            goto done;
        }
    }
    if (coai_dialect_models_write(&out, c->dialect, &l->m, hit, (int64_t)time(NULL)) < 0
        || out.err) {
        send_error(c, 500, "server_error", NULL, NULL, "out of memory", NULL);
        goto done;
    }
    send_response(c, 200, "application/json", NULL, out.data, out.len);
done:
    models_put(l);
    coai_buf_free(&out);
    return 0;
}

/* ======================================================================== */
/* Usage: the plan and current-period usage (Cursor's dashboard service)    */
/* ======================================================================== */

#define PATH_USAGE "/aiserver.v1.DashboardService/GetCurrentPeriodUsage"
#define PATH_PLAN "/aiserver.v1.DashboardService/GetPlanInfo"
#define UP_USAGE_MAX (1024 * 1024)   /* largest dashboard answer read */

/* One dashboard call: Connect unary JSON, body "{}", the agent's token; renews an expiring
 * token first and once more after a 401. 0 with the 2xx body, -1 with *err filled. */
static int dash_call(const char *path, coai_buf *body, coai_error *err)
{
    return up_unary_json(path, UP_USAGE_MAX, "Cursor's usage answer is too large", body, err);
}

/* GetCurrentPeriodUsage (required) + GetPlanInfo (optional: newer accounts only; its
 * failure only leaves the plan unknown). 0 with *u filled, -1 with *err. */
static int usage_fetch(coai_quota *u, coai_error *err)
{
    coai_buf period = { 0 }, plan = { 0 };
    coai_error pe;
    int rc = -1, have_plan;
    memset(err, 0, sizeof *err);
    if (cred_require(err) < 0) return -1;
    if (dash_call(PATH_USAGE, &period, err) < 0) {
        srv_log(LOG_WARN, "GetCurrentPeriodUsage failed: %s", err->message);
        goto done;
    }
    memset(&pe, 0, sizeof pe);
    have_plan = dash_call(PATH_PLAN, &plan, &pe) == 0;
    if (!have_plan) srv_log(LOG_DEBUG, "GetPlanInfo failed (plan left unknown): %s", pe.message);
    if (coai_quota_parse(u, (const char *)period.data, period.len,
                         have_plan ? (const char *)plan.data : NULL, have_plan ? plan.len : 0)
        < 0) {
        coai_error_set(err, 502, "upstream_error", "upstream_protocol_error", NULL,
                       "Cursor's usage answer is not a JSON object");
        goto done;
    }
    rc = 0;
done:
    coai_buf_free(&period);
    coai_buf_free(&plan);
    return rc;
}

/* The usage answer the server keeps, shared by GET /v1/usage and the status page: one
 * upstream fetch at a time (single flight). A caller takes the kept answer when it is young
 * enough for it, else waits for the fetch under way or starts one; callers that waited get
 * that fetch's answer, error included. GET /v1/usage reuses an answer for
 * CURSOR_OAI_USAGE_TTL seconds (10; 0: only callers at the same moment share one fetch)
 * and an error for USAGE_ERR_TTL_MS (3 s; never longer than the TTL): a burst of requests
 * against a failing dashboard makes one upstream call, not one per request that arrives
 * after the last failure (issue 29); the status page reuses an answer for 60 s, an error
 * for 10 s. The fetch itself is bounded by the unary call's deadline
 * (CURSOR_OAI_UPSTREAM_TIMEOUT). */
#define USAGE_TTL_DEFAULT_S 10
#define USAGE_TTL_MAX_S 3600
#define USAGE_ERR_TTL_MS 3000

static struct {
    pthread_mutex_t mu;
    pthread_cond_t done;            /* broadcast when a fetch ends (gen changes) */
    int64_t ttl_ms;                 /* CURSOR_OAI_USAGE_TTL, for GET /v1/usage */
    int state;                      /* 0 never asked, 1 ok, 2 failed */
    int fetching;
    uint64_t gen;                   /* fetches ended */
    int64_t at;                     /* mono ms of the last answer */
    int64_t wall;                   /* wall ms of the last answer */
    coai_quota u;
    coai_error err;
} usage_cache = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                  USAGE_TTL_DEFAULT_S * 1000, 0, 0, 0, 0, 0, { 0 }, { 0 } };

/* The usage answer no older than max_ms (an error: err_max_ms). wait = 0: never block (the
 * status page): a missing or old answer starts a fetch when none runs, and what is kept is
 * returned meanwhile. Returns the state (0 nothing yet, 1 ok with *u, 2 failed with *e);
 * *wall = when it was fetched. */
static int usage_get(int64_t max_ms, int64_t err_max_ms, int wait, coai_quota *u,
                     coai_error *e, int64_t *wall)
{
    int fetch = 0, state;
    uint64_t gen;
    pthread_mutex_lock(&usage_cache.mu);
    gen = usage_cache.gen;
    for (;;) {
        int64_t age = mono_ms() - usage_cache.at;
        if (usage_cache.state && age < (usage_cache.state == 2 ? err_max_ms : max_ms))
            break;                      /* young */
        if (usage_cache.gen != gen) break;          /* the fetch this caller waited for has ended */
        if (!usage_cache.fetching) {
            usage_cache.fetching = 1;
            fetch = 1;
            break;
        }
        if (!wait) break;
        pthread_cond_wait(&usage_cache.done, &usage_cache.mu);
    }
    pthread_mutex_unlock(&usage_cache.mu);
    if (fetch) {
        coai_quota nu;
        coai_error ne;
        int rc;
        memset(&nu, 0, sizeof nu);
        rc = usage_fetch(&nu, &ne);
        pthread_mutex_lock(&usage_cache.mu);
        usage_cache.fetching = 0;
        usage_cache.gen++;
        usage_cache.at = mono_ms();
        usage_cache.wall = wall_ms();
        if (rc == 0) { usage_cache.u = nu; usage_cache.state = 1; }
        else { usage_cache.err = ne; usage_cache.state = 2; }
        pthread_cond_broadcast(&usage_cache.done);
        pthread_mutex_unlock(&usage_cache.mu);
    }
    pthread_mutex_lock(&usage_cache.mu);
    state = usage_cache.state;
    if (state == 1) *u = usage_cache.u;
    if (state == 2) *e = usage_cache.err;
    *wall = usage_cache.wall;
    pthread_mutex_unlock(&usage_cache.mu);
    return state;
}

/* GET /v1/usage: the same JSON as `cursor-oai usage --json`. */
static int handle_usage(struct conn *c)
{
    coai_quota u;
    coai_error e;
    coai_buf out = { 0 };
    int64_t wall;
    if (usage_get(usage_cache.ttl_ms,
                  usage_cache.ttl_ms < USAGE_ERR_TTL_MS ? usage_cache.ttl_ms : USAGE_ERR_TTL_MS,
                  1, &u, &e, &wall) != 1) {
        send_coai_error(c, &e);
    } else if (coai_quota_write_json(&out, &u) < 0) {
        send_error(c, 500, "server_error", NULL, NULL, "out of memory", NULL);
    } else {
        send_response(c, 200, "application/json", NULL, out.data, out.len);
    }
    coai_buf_free(&out);
    return 0;
}

/* ======================================================================== */
/* Status page: GET /, /status.json, /status.js, /status.css                */
/* ======================================================================== */

/* One small page for a person: who is logged in, what the upstream side uses, this period's
 * usage, the models, live figures (the same counters as /metrics) and the last requests. The
 * page is static; its script polls /status.json. Nothing a client sent reaches the page
 * unescaped: the JSON escapes <, > and & as well, and the script inserts text only with
 * textContent. No token, prompt or tool content is ever part of it. The page loads nothing
 * but these routes (Content-Security-Policy default-src 'self', no inline script).
 * Access: the same as the API routes. With CURSOR_OAI_API_KEY set, a browser opens /?key=KEY
 * once: the answer is a redirect to / that sets an HttpOnly, SameSite=Strict cookie
 * "EXPIRY.MAC": EXPIRY the Unix time 12 hours on (STATUS_COOKIE_TTL_S, also its Max-Age),
 * MAC hex HMAC-SHA256(key, "cursor-oai status page\n" EXPIRY) (never the key; any instance
 * sharing the key accepts it), which then stands for the key on these four routes only,
 * until EXPIRY: the server checks it, whatever the browser keeps. */

#define STATUS_RING 50                  /* requests kept for the page */
#define STATUS_USAGE_TTL_MS 60000       /* the usage call at most this often */
#define STATUS_COOKIE "cursor_oai_status"
#define STATUS_COOKIE_TTL_S 43200       /* 12 h: then /?key= again */

static const char STATUS_HTML[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width\">"
    "<meta name=\"referrer\" content=\"no-referrer\">"
    "<title>cursor-oai</title><link rel=\"icon\" href=\"data:,\">"
    "<link rel=\"stylesheet\" href=\"/status.css\"></head>\n<body>\n"
    "<header><h1>cursor-oai <span id=\"version\"></span></h1>"
    "<span id=\"updated\">loading</span></header>\n<main>\n"
    "<section id=\"login\"><h2>Login</h2><dl id=\"login-dl\"></dl></section>\n"
    "<section id=\"upstream\"><h2>Upstream</h2><dl id=\"upstream-dl\"></dl></section>\n"
    "<section id=\"usage\"><h2>Usage this billing period</h2>"
    "<progress id=\"usage-bar\" max=\"100\" value=\"0\"></progress>"
    "<p id=\"usage-text\"></p></section>\n"
    "<section id=\"live\"><h2>Live</h2><dl id=\"live-dl\"></dl>"
    "<h3>Errors by kind</h3><ul id=\"errors\"></ul>"
    "<h3>Fallbacks</h3><ul id=\"fallbacks\"></ul></section>\n"
    "<section id=\"models\"><h2>Models</h2><p id=\"models-list\"></p></section>\n"
    "<section id=\"wire\"><h2>Cursor's protocol</h2><p id=\"wire-text\"></p>"
    "<p id=\"tools-text\"></p></section>\n"
    "<section id=\"requests\"><h2>Last requests</h2><table><thead><tr><th>time (UTC)</th>"
    "<th>API</th><th>model</th><th>status</th><th>ms</th><th>tokens in/out</th>"
    "<th>fallback</th><th>error</th></tr></thead><tbody id=\"req-body\"></tbody></table>"
    "</section>\n</main>\n"
    "<noscript>This page needs JavaScript; /status.json has the same figures.</noscript>\n"
    "<script src=\"/status.js\"></script>\n</body></html>\n";

static const char STATUS_JS[] =
    "\"use strict\";\n"
    "(function () {\n"
    "  function $(id) { return document.getElementById(id); }\n"
    "  function el(tag, text, cls) {\n"
    "    var e = document.createElement(tag);\n"
    "    if (text !== undefined && text !== null) e.textContent = String(text);\n"
    "    if (cls) e.className = cls;\n"
    "    return e;\n"
    "  }\n"
    "  function dl(id, rows) {\n"
    "    var d = $(id);\n"
    "    d.replaceChildren();\n"
    "    rows.forEach(function (r) {\n"
    "      d.appendChild(el(\"dt\", r[0]));\n"
    "      d.appendChild(el(\"dd\", r[1] === null || r[1] === undefined ? \"-\" : r[1], r[2]));\n"
    "    });\n"
    "  }\n"
    "  function list(id, items, empty) {\n"
    "    var u = $(id);\n"
    "    u.replaceChildren();\n"
    "    if (!items.length) u.appendChild(el(\"li\", empty, \"dim\"));\n"
    "    items.forEach(function (i) { u.appendChild(el(\"li\", i.kind + \": \" + i.count)); });\n"
    "  }\n"
    "  function secs(v) { return v === null ? \"-\" : v.toFixed(2) + \" s\"; }\n"
    "  function render(s) {\n"
    "    var l = s.login, u = s.upstream, g = s.usage, v = s.live;\n"
    "    $(\"version\").textContent = s.version;\n"
    "    $(\"updated\").textContent = \"updated \" + new Date(s.now_ms).toISOString().slice(11, 19)"
    " + \" UTC\";\n"
    "    dl(\"login-dl\", [[\"state\", l.state, l.state === \"ok\" ? \"good\" : \"bad\"],\n"
    "      [\"who\", l.who], [\"credentials\", l.source], [\"token\", l.expires],\n"
    "      [\"renewal\", l.renewal]]);\n"
    "    dl(\"upstream-dl\", [[\"base URL\", u.base], [\"client version\", u.client_version +"
    " \" (\" + u.client_version_src + \")\"],\n"
    "      [\"transport\", u.transport],\n"
    "      [\"profile\", u.profile + \" (\" + u.profile_note + \")\"],\n"
    "      [\"HTTP/1.1 run host\", u.agent_host + \" (\" + u.agent_src + \")\"],\n"
    "      [\"HTTP/2 agent host\", u.agent_h2]]);\n"
    "    $(\"usage-bar\").value = g.percent === null ? 0 : Math.min(100, g.percent);\n"
    "    $(\"usage-text\").textContent = g.state === \"ok\" ? (g.percent === null ? \"\" :"
    " g.percent.toFixed(1) + \"% used. \") + g.summary\n"
    "      : g.state === \"loading\" ? \"asking Cursor...\" : \"unavailable: \" + g.error;\n"
    "    dl(\"live-dl\", [[\"model API requests\", v.requests], [\"answered with an error\","
    " v.errors],\n"
    "      [\"open streams\", v.open_streams], [\"held runs\", v.held_runs],\n"
    "      [\"first token p50\", secs(v.first_token_p50_s)], [\"first token p95\","
    " secs(v.first_token_p95_s)]]);\n"
    "    list(\"errors\", v.errors_by_kind, \"none\");\n"
    "    list(\"fallbacks\", v.fallbacks, \"none\");\n"
    "    $(\"models-list\").textContent = s.models.length ? s.models.join(\", \") :"
    " \"(not fetched yet)\";\n"
    "    $(\"wire-text\").textContent = s.wire_unknown ? \"Cursor sent things this version"
    " does not know: \" + s.wire_unknown + \". Please report them (cursor-oai doctor"
    " --capture FILE writes a transcript that is safe to attach).\" : \"Nothing Cursor sent"
    " was unknown to this version.\";\n"
    "    $(\"tools-text\").textContent = s.tools.text;\n"
    "    var tb = $(\"req-body\");\n"
    "    tb.replaceChildren();\n"
    "    s.requests.forEach(function (r) {\n"
    "      var tr = el(\"tr\", null, r.status >= 400 || r.error ? \"failed\" : \"\");\n"
    "      [new Date(r.time_ms).toISOString().slice(11, 19), r.api, r.model || \"-\", r.status,\n"
    "       r.duration_ms, r.tokens_in + \" / \" + r.tokens_out, r.fallback || \"\","
    " r.error || \"\"]\n"
    "        .forEach(function (x) { tr.appendChild(el(\"td\", x)); });\n"
    "      tb.appendChild(tr);\n"
    "    });\n"
    "    document.body.setAttribute(\"data-loaded\", \"1\");\n"
    "  }\n"
    "  function tick() {\n"
    "    fetch(\"/status.json\", { cache: \"no-store\", credentials: \"same-origin\" })\n"
    "      .then(function (r) { if (!r.ok) throw new Error(\"HTTP \" + r.status);"
    " return r.json(); })\n"
    "      .then(render)\n"
    "      .catch(function (e) { $(\"updated\").textContent = \"not updated: \" + e.message; })\n"
    "      .then(function () { setTimeout(tick, 2000); });\n"
    "  }\n"
    "  tick();\n"
    "})();\n";

static const char STATUS_CSS[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\n"
    "header{display:flex;justify-content:space-between;align-items:baseline;"
    "padding:8px 16px;background:#1b1f24;color:#fff}\n"
    "h1{font-size:18px;margin:0}h2{font-size:15px;margin:0 0 6px}h3{font-size:13px;"
    "margin:8px 0 2px}\n"
    "main{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:10px;"
    "padding:10px}\n"
    "section{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:8px 12px;"
    "overflow:auto}\n"
    "#requests{grid-column:1/-1}\n"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;margin:0}"
    "dt{color:#57606a}dd{margin:0;word-break:break-word}\n"
    "progress{width:100%;height:14px}ul{margin:0;padding-left:18px}\n"
    "table{border-collapse:collapse;width:100%;font-size:12px}"
    "th,td{text-align:left;padding:2px 6px;border-bottom:1px solid #eee;"
    "overflow-wrap:anywhere}\n"
    "th,td:nth-child(1),td:nth-child(2),td:nth-child(4),td:nth-child(5),td:nth-child(6)"
    "{white-space:nowrap}\n"
    "tr.failed td{background:#fff0f0}.good{color:#1a7f37}.bad{color:#cf222e}.dim{color:#888}\n";

/* What the upstream side uses now: one accessor, so a new transport or host logic only has
 * to fill it in (the status page shows whatever this says). */
struct upstream_view {
    char base[600];
    char client_version[160];
    char client_version_src[PATH_MAX + 64];
    char transport[320];            /* tr_describe */
    char profile[32];
    char profile_note[96];
    char agent_host[600];           /* where runs go now */
    char agent_src[700];
    char agent_h2[1300];            /* GetServerConfig's host (the HTTP/2 transport's) */
};


static void upstream_view_get(struct upstream_view *v)
{
    coai_url run;
    memset(v, 0, sizeof *v);
    run_host_get(&run, v->agent_src, sizeof v->agent_src);     /* takes hosts.lock itself */
    snprintf(v->agent_host, sizeof v->agent_host, "https://%s%s", run.authority, run.prefix);
    tr_describe(v->transport, sizeof v->transport);                 /* takes transport_state.lock */
    pthread_mutex_lock(&hosts.lock);
    snprintf(v->base, sizeof v->base, "https://%s%s", conf.up_authority, conf.up_prefix);
    snprintf(v->client_version, sizeof v->client_version, "%s", conf.client_version);
    snprintf(v->client_version_src, sizeof v->client_version_src, "%s", conf.client_version_src);
    snprintf(v->profile, sizeof v->profile, "%s", PROFILE_NAME[hosts.profile]);
    snprintf(v->profile_note, sizeof v->profile_note, "%s",
             conf.profile_forced >= 0 ? "CURSOR_OAI_PROFILE, no fallback"
                                   : "the one that worked last; the other is the fallback");
    if (hosts.agent_h2_at)
        snprintf(v->agent_h2, sizeof v->agent_h2, "https://%s%s (%s)", hosts.agent_h2.authority,
                 hosts.agent_h2.prefix, hosts.agent_h2_src);
    else
        snprintf(v->agent_h2, sizeof v->agent_h2, "not asked yet");
    pthread_mutex_unlock(&hosts.lock);
}

/* The last STATUS_RING requests, written where the access log is. */
struct status_req {
    int64_t time_ms;
    int status;
    int64_t duration_ms;
    int64_t tok_in, tok_out;
    const char *api;                /* static */
    const char *fallback;           /* static or NULL */
    char model[128];
    char error[200];
};

static struct {
    pthread_mutex_t mu;
    struct status_req r[STATUS_RING];
    unsigned next, count;
} recent_reqs = { PTHREAD_MUTEX_INITIALIZER, { { 0, 0, 0, 0, 0, NULL, NULL, { 0 }, { 0 } } },
                  0, 0 };

/* Called by access_log for every request but the status page's own, /health and /metrics
 * (pollers would push everything else out). */
static void status_note_request(const struct conn *c, int64_t ms)
{
    struct status_req *q;
    const struct route_def *rd = route_row(c->route);
    if (rd && (rd->flags & RT_QUIET)) return;
    pthread_mutex_lock(&recent_reqs.mu);
    q = &recent_reqs.r[recent_reqs.next];
    recent_reqs.next = (recent_reqs.next + 1) % STATUS_RING;
    if (recent_reqs.count < STATUS_RING) recent_reqs.count++;
    q->time_ms = wall_ms();
    q->status = c->status;
    q->duration_ms = ms;
    q->tok_in = c->tok_in;
    q->tok_out = c->tok_out;
    q->api = c->route == ROUTE_NONE ? "-" : route_dialect(c->route);
    if (strcmp(q->api, "none") == 0) q->api = route_label(c->route);
    q->fallback = c->fallback;
    copy_str(q->model, sizeof q->model, c->model, strlen(c->model));
    copy_str(q->error, sizeof q->error, c->errmsg, strlen(c->errmsg));
    pthread_mutex_unlock(&recent_reqs.mu);
}

/* A JSON string for the page: JSON escaping, and <, > and & as \u00XX as well, so that the
 * text is inert even where something took it for HTML. */
static void status_json_str(coai_buf *b, const char *s)
{
    coai_buf t = { 0 };
    size_t i;
    if (!s) { coai_buf_puts(b, "null"); return; }
    coai_json_str_append(&t, s, strlen(s));
    if (t.err) { b->err = 1; coai_buf_free(&t); return; }
    for (i = 0; i < t.len; i++) {
        unsigned char ch = t.data[i];
        if (ch == '<' || ch == '>' || ch == '&') coai_buf_printf(b, "\\u%04x", ch);
        else coai_buf_putc(b, (char)ch);
    }
    coai_buf_free(&t);
}

/* The value of label `name` in a series' label text into out ("" when absent). */
static void status_label(const char *labels, const char *name, char *out, size_t cap)
{
    char key[40];
    const char *p, *e;
    snprintf(key, sizeof key, "%s=\"", name);
    out[0] = 0;
    p = strstr(labels, key);
    if (!p || (p != labels && p[-1] != ',')) return;
    p += strlen(key);
    e = strchr(p, '"');
    if (e) copy_str(out, cap, p, (size_t)(e - p));
}

/* Quantile q of the merged histogram (linear inside a bucket, as Prometheus estimates it);
 * -1 without observations. Under metric_store.mu. */
static double status_quantile(const uint64_t *buckets, uint64_t count, double q)
{
    double rank = q * (double)count, lo = 0, prev = 0;
    int i;
    if (!count) return -1;
    for (i = 0; i < METRIC_BUCKETS; i++) {
        if ((double)buckets[i] >= rank) {
            double inb = (double)buckets[i] - prev;
            return lo + (METRIC_BOUNDS[i] - lo) * (inb > 0 ? (rank - prev) / inb : 1);
        }
        lo = METRIC_BOUNDS[i];
        prev = (double)buckets[i];
    }
    return METRIC_BOUNDS[METRIC_BUCKETS - 1];
}

/* A {"kind","count"} list entry, merged by kind (n entries in use, at most cap). */
struct status_kind { char kind[120]; double count; };

static void status_kind_add(struct status_kind *k, size_t *n, size_t cap, const char *kind,
                            double v)
{
    size_t i;
    for (i = 0; i < *n; i++)
        if (strcmp(k[i].kind, kind) == 0) { k[i].count += v; return; }
    if (*n == cap) return;
    copy_str(k[*n].kind, sizeof k[*n].kind, kind, strlen(kind));
    k[*n].count = v;
    (*n)++;
}

static void status_kinds_json(coai_buf *b, const struct status_kind *k, size_t n)
{
    size_t i;
    coai_buf_putc(b, '[');
    for (i = 0; i < n; i++) {
        coai_buf_puts(b, i ? ",{\"kind\":" : "{\"kind\":");
        status_json_str(b, k[i].kind);
        coai_buf_puts(b, ",\"count\":");
        metric_number(b, k[i].count);
        coai_buf_putc(b, '}');
    }
    coai_buf_putc(b, ']');
}

/* "live": read from the /metrics families. */
static void status_live_json(coai_buf *b)
{
    struct status_kind errs[32], fbs[32];
    size_t ne = 0, nf = 0, i;
    uint64_t buckets[METRIC_BUCKETS], count = 0;
    double requests = 0, errors = 0, streams = 0, held = 0, p50, p95;
    char v[100], d[40];
    int j;
    memset(buckets, 0, sizeof buckets);
    pthread_mutex_lock(&metric_store.mu);
    for (i = 0; i < metric_store.n[M_REQUESTS]; i++) {
        const struct metric_series *s = &metric_store.s[M_REQUESTS][i];
        status_label(s->labels, "dialect", d, sizeof d);
        status_label(s->labels, "status", v, sizeof v);
        if (!d[0] || strcmp(d, "none") == 0) continue;      /* model APIs only */
        requests += s->value;
        if (atoi(v) >= 400) {
            char kind[120];
            errors += s->value;
            snprintf(kind, sizeof kind, "HTTP %s", v);
            status_kind_add(errs, &ne, 32, kind, s->value);
        }
    }
    for (i = 0; i < metric_store.n[M_UPSTREAM_RUNS]; i++) {
        const struct metric_series *s = &metric_store.s[M_UPSTREAM_RUNS][i];
        char kind[120];
        status_label(s->labels, "outcome", v, sizeof v);
        if (!v[0] || strcmp(v, "ok") == 0) continue;
        snprintf(kind, sizeof kind, "run %s", v);
        status_kind_add(errs, &ne, 32, kind, s->value);
    }
    for (i = 0; i < metric_store.n[M_FALLBACKS]; i++) {
        status_label(metric_store.s[M_FALLBACKS][i].labels, "kind", v, sizeof v);
        status_kind_add(fbs, &nf, 32, v[0] ? v : "other", metric_store.s[M_FALLBACKS][i].value);
    }
    for (i = 0; i < metric_store.n[M_OPEN_STREAMS]; i++)
        streams += metric_store.s[M_OPEN_STREAMS][i].value;
    for (i = 0; i < metric_store.n[M_HELD_RUNS]; i++) held += metric_store.s[M_HELD_RUNS][i].value;
    for (i = 0; i < metric_store.n[M_FIRST_TOKEN]; i++) {
        count += metric_store.s[M_FIRST_TOKEN][i].count;
        for (j = 0; j < METRIC_BUCKETS; j++)
            buckets[j] += metric_store.s[M_FIRST_TOKEN][i].buckets[j];
    }
    p50 = status_quantile(buckets, count, 0.5);
    p95 = status_quantile(buckets, count, 0.95);
    pthread_mutex_unlock(&metric_store.mu);
    coai_buf_puts(b, "{\"requests\":");
    metric_number(b, requests);
    coai_buf_puts(b, ",\"errors\":");
    metric_number(b, errors);
    coai_buf_puts(b, ",\"open_streams\":");
    metric_number(b, streams);
    coai_buf_puts(b, ",\"held_runs\":");
    metric_number(b, held);
    coai_buf_printf(b, ",\"first_token_count\":%llu,\"first_token_p50_s\":",
                    (unsigned long long)count);
    if (p50 < 0) coai_buf_puts(b, "null"); else coai_buf_printf(b, "%.3f", p50);
    coai_buf_puts(b, ",\"first_token_p95_s\":");
    if (p95 < 0) coai_buf_puts(b, "null"); else coai_buf_printf(b, "%.3f", p95);
    coai_buf_puts(b, ",\"errors_by_kind\":");
    status_kinds_json(b, errs, ne);
    coai_buf_puts(b, ",\"fallbacks\":");
    status_kinds_json(b, fbs, nf);
    coai_buf_putc(b, '}');
}

/* "usage": the answer the server keeps (usage_get); a stale or missing one is fetched by
 * this request when no other fetch runs (others answer with what is kept), so page refreshes
 * never multiply the upstream calls: at most one per STATUS_USAGE_TTL_MS (and per failure),
 * and none while GET /v1/usage has fetched more recently. */
static void status_usage_json(coai_buf *b)
{
    int state;
    coai_quota u;
    coai_error e;
    coai_buf line = { 0 };
    double pct = -1;
    int64_t wall = 0;
    memset(&u, 0, sizeof u);
    memset(&e, 0, sizeof e);
    /* a failure is asked again sooner (a login may have arrived meanwhile) */
    state = usage_get(STATUS_USAGE_TTL_MS, STATUS_USAGE_TTL_MS / 6, 0, &u, &e, &wall);
    coai_buf_puts(b, "{\"state\":");
    coai_buf_puts(b, state == 1 ? "\"ok\"" : state == 2 ? "\"error\"" : "\"loading\"");
    coai_buf_printf(b, ",\"fetched_ms\":%lld,\"error\":", (long long)wall);
    status_json_str(b, state == 2 ? e.message : NULL);
    if (state == 1) {
        pct = u.percent_used;
        if (pct < 0 && u.limit_cents > 0) pct = 100.0 * (double)u.used_cents
                                                / (double)u.limit_cents;
        coai_quota_summary(&line, &u, wall_ms());
    }
    coai_buf_puts(b, ",\"percent\":");
    if (pct < 0) coai_buf_puts(b, "null"); else coai_buf_printf(b, "%.1f", pct);
    coai_buf_puts(b, ",\"summary\":");
    status_json_str(b, line.data && !line.err ? (const char *)line.data : state == 1 ? "" : NULL);
    coai_buf_putc(b, '}');
    coai_buf_free(&line);
}


static void status_json(struct conn *c, coai_buf *b)
{
    char tok[SRV_TOKEN_MAX], who[400], exp[200], src[PATH_MAX + 64], renewal[200];
    const char *health;
    struct upstream_view v;
    struct models_list *l = NULL;
    coai_error e;
    unsigned i, n, at;
    int have;
    /* login: the token itself never leaves this function */
    have = cred_token(tok, sizeof tok, NULL) > 0;
    if (have) {
        describe_identity(who, sizeof who, tok);
        describe_expiry(exp, sizeof exp, tok);
    }
    memset(tok, 0, sizeof tok);
    health = cred_health();
    pthread_mutex_lock(&creds.lock);
    snprintf(src, sizeof src, "%s", creds.src == CRED_ENV ? "CURSOR_ACCESS_TOKEN (environment)"
             : creds.src == CRED_OURS ? file_paths.ours_path
             : creds.src == CRED_AGENT ? file_paths.agent_path : "none");
    if (creds.src == CRED_AGENT) snprintf(src + strlen(src), sizeof src - strlen(src),
                                           " (cursor-agent's, read only)");
    snprintf(renewal, sizeof renewal, "%s", cred_renewal_locked());
    pthread_mutex_unlock(&creds.lock);
    coai_buf_puts(b, "{\"version\":");
    status_json_str(b, COAI_VERSION);
    coai_buf_printf(b, ",\"now_ms\":%lld,\"login\":{\"state\":", (long long)wall_ms());
    status_json_str(b, have ? health : "missing");
    coai_buf_puts(b, ",\"who\":");
    status_json_str(b, have ? who : NULL);
    coai_buf_puts(b, ",\"source\":");
    status_json_str(b, src);
    coai_buf_puts(b, ",\"expires\":");
    status_json_str(b, have ? exp : NULL);
    coai_buf_puts(b, ",\"renewal\":");
    status_json_str(b, renewal);
    upstream_view_get(&v);
    coai_buf_puts(b, "},\"upstream\":{\"base\":");
    status_json_str(b, v.base);
    coai_buf_puts(b, ",\"client_version\":");
    status_json_str(b, v.client_version);
    coai_buf_puts(b, ",\"client_version_src\":");
    status_json_str(b, v.client_version_src);
    coai_buf_puts(b, ",\"transport\":");
    status_json_str(b, v.transport);
    coai_buf_puts(b, ",\"profile\":");
    status_json_str(b, v.profile);
    coai_buf_puts(b, ",\"profile_note\":");
    status_json_str(b, v.profile_note);
    coai_buf_puts(b, ",\"agent_host\":");
    status_json_str(b, v.agent_host);
    coai_buf_puts(b, ",\"agent_src\":");
    status_json_str(b, v.agent_src);
    coai_buf_puts(b, ",\"agent_h2\":");
    status_json_str(b, v.agent_h2);
    coai_buf_puts(b, "},\"usage\":");
    status_usage_json(b);
    /* models: the cached list (a stale one is renewed in the background by models_get) */
    coai_buf_puts(b, ",\"models\":[");
    memset(&e, 0, sizeof e);
    if (have && models_get(&l, &e, coai_str_c(NULL), NULL, 0, NULL, c->fd) == 0) {
        const coai_models *m = &l->m;
        for (i = 0; i < m->count; i++) {
            char id[160];
            copy_str(id, sizeof id, m->items[i].id.ptr, m->items[i].id.len);
            if (i) coai_buf_putc(b, ',');
            status_json_str(b, id);
        }
    }
    models_put(l);
    coai_buf_puts(b, "],\"live\":");
    status_live_json(b);
    {
        coai_buf w = { 0 };
        wn_describe(&w);
        coai_buf_putc(&w, 0);
        coai_buf_puts(b, ",\"wire_unknown\":");
        status_json_str(b, w.err || w.len < 2 ? NULL : (const char *)w.data);
        coai_buf_free(&w);
    }
    {
        char th[300];
        uint64_t native, runs;
        int no = th_describe(th, sizeof th);
        pthread_mutex_lock(&tools_header.mu);
        native = tools_header.native;
        runs = tools_header.runs;
        pthread_mutex_unlock(&tools_header.mu);
        coai_buf_printf(b, ",\"tools\":{\"mode\":\"%s\",\"honoured\":%s,"
                        "\"native_despite_header\":%llu,\"text\":",
                        tool_mode == COAI_TOOLS_CURSOR ? "cursor" : "client",
                        tool_mode == COAI_TOOLS_CURSOR ? "null" : no ? "false"
                        : runs ? "true" : "null",
                        (unsigned long long)native);
        status_json_str(b, th);
        coai_buf_putc(b, '}');
    }
    /* the last requests, newest first */
    coai_buf_puts(b, ",\"requests\":[");
    pthread_mutex_lock(&recent_reqs.mu);
    n = recent_reqs.count;
    for (i = 0; i < n; i++) {
        const struct status_req *q;
        at = (recent_reqs.next + STATUS_RING - 1 - i) % STATUS_RING;
        q = &recent_reqs.r[at];
        coai_buf_printf(b, "%s{\"time_ms\":%lld,\"api\":", i ? "," : "", (long long)q->time_ms);
        status_json_str(b, q->api);
        coai_buf_puts(b, ",\"model\":");
        status_json_str(b, q->model[0] ? q->model : NULL);
        coai_buf_printf(b, ",\"status\":%d,\"duration_ms\":%lld,\"tokens_in\":%lld,"
                        "\"tokens_out\":%lld,\"fallback\":", q->status,
                        (long long)q->duration_ms, (long long)q->tok_in, (long long)q->tok_out);
        status_json_str(b, q->fallback);
        coai_buf_puts(b, ",\"error\":");
        status_json_str(b, q->error[0] ? q->error : NULL);
        coai_buf_putc(b, '}');
    }
    pthread_mutex_unlock(&recent_reqs.mu);
    coai_buf_puts(b, "]}\n");
}

/* The cookie's MAC for an expiry (Unix seconds): hex HMAC-SHA256(key, fixed text "\n" exp). */
static void status_cookie_value(long long exp, char out[65])
{
    static const char msg[] = "cursor-oai status page\n";
    char es[24];
    br_hmac_key_context kc;
    br_hmac_context hc;
    unsigned char mac[32];
    int i, en = snprintf(es, sizeof es, "%lld", exp);
    br_hmac_key_init(&kc, &br_sha256_vtable, conf.api_key, strlen(conf.api_key));
    br_hmac_init(&hc, &kc, 0);
    br_hmac_update(&hc, msg, sizeof msg - 1);
    br_hmac_update(&hc, es, (size_t)en);
    br_hmac_out(&hc, mac);
    for (i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
    memset(&kc, 0, sizeof kc);
    memset(&hc, 0, sizeof hc);
}

/* With CURSOR_OAI_API_KEY set: 1 when a request of a status route (auth AUTH_COOKIE or
 * AUTH_BROWSER) carries the page's cookie, or (the page itself) a ?key= that is the key. */
static int status_access(const coai_http_request *rq, int route)
{
    char want[65];
    coai_str v, mac;
    long long exp = 0, now;
    size_t i;
    int ok;
    if (route == ROUTE_STATUS_PAGE
        && coai_http_token_equal(coai_http_query_param(rq->target, "key"),
                                 coai_str_c(conf.api_key)))
        return 1;
    v = coai_http_cookie(coai_http_header_get(rq->headers, rq->header_count, "cookie"),
                         STATUS_COOKIE);
    if (!v.ptr) return 0;
    /* "EXPIRY.MAC": the MAC of that expiry, and the expiry still ahead (and no further
     * ahead than one cookie's life: a clock set back cannot stretch it) */
    for (i = 0; i < v.len && i < 18 && v.ptr[i] >= '0' && v.ptr[i] <= '9'; i++)
        exp = exp * 10 + (v.ptr[i] - '0');
    now = wall_ms() / 1000;
    if (i == 0 || i >= v.len || v.ptr[i] != '.' || exp <= now
        || exp > now + STATUS_COOKIE_TTL_S + 300)
        return 0;
    mac.ptr = v.ptr + i + 1;
    mac.len = v.len - i - 1;
    status_cookie_value(exp, want);
    ok = coai_http_token_equal(mac, coai_str_c(want));
    memset(want, 0, sizeof want);
    return ok;
}

#define STATUS_HEADERS \
    "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'; " \
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; " \
    "frame-ancestors 'none'\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: " \
    "no-referrer\r\nX-Frame-Options: DENY\r\nCache-Control: no-store\r\n"

/* With ?key= on the page's address: 2 it is the API key, 1 it is not (or no key is set), 0
 * none. Read before the body is, while the head's views are valid. */
static int status_key_query(const coai_http_request *rq, int route)
{
    coai_str k;
    if (route != ROUTE_STATUS_PAGE) return 0;
    k = coai_http_query_param(rq->target, "key");
    if (!k.ptr) return 0;
    return conf.api_key && coai_http_token_equal(k, coai_str_c(conf.api_key)) ? 2 : 1;
}

/* GET /, /status.json, /status.js, /status.css (access already checked). c->key_q: what
 * status_key_query said. */
static int handle_status(struct conn *c)
{
    coai_buf b = { 0 };
    int route = c->route, key_q = c->key_q;
    if (key_q) {
        /* drop the key from the address bar and the history; the cookie stands for it */
        char cookie[65], h[400];
        h[0] = 0;
        if (key_q == 2) {
            long long exp = wall_ms() / 1000 + STATUS_COOKIE_TTL_S;
            status_cookie_value(exp, cookie);
            snprintf(h, sizeof h, "Set-Cookie: " STATUS_COOKIE "=%lld.%s; Path=/; Max-Age=%d; "
                     "HttpOnly; SameSite=Strict\r\n", exp, cookie, STATUS_COOKIE_TTL_S);
            memset(cookie, 0, sizeof cookie);
        }
        copy_str(h + strlen(h), sizeof h - strlen(h), "Location: /\r\n" STATUS_HEADERS,
                 strlen("Location: /\r\n" STATUS_HEADERS));
        send_response(c, 303, "text/plain; charset=utf-8", h, "see /\n", 6);
        memset(h, 0, sizeof h);
        return 0;
    }
    switch (route) {
    case ROUTE_STATUS_PAGE:
        return send_response(c, 200, "text/html; charset=utf-8", STATUS_HEADERS, STATUS_HTML,
                             sizeof STATUS_HTML - 1);
    case ROUTE_STATUS_JS:
        return send_response(c, 200, "text/javascript; charset=utf-8", STATUS_HEADERS,
                             STATUS_JS, sizeof STATUS_JS - 1);
    case ROUTE_STATUS_CSS:
        return send_response(c, 200, "text/css; charset=utf-8", STATUS_HEADERS, STATUS_CSS,
                             sizeof STATUS_CSS - 1);
    default:
        break;
    }
    status_json(c, &b);
    if (b.err) send_error(c, 500, "server_error", NULL, NULL, "out of memory", NULL);
    else send_response(c, 200, "application/json", STATUS_HEADERS, b.data, b.len);
    coai_buf_free(&b);
    return 0;
}

/* ======================================================================== */
/* Chat requests: handle_chat, from the request to the run and back         */
/* ======================================================================== */

/* Quota latch. AI SDK and OpenCode retry a 429 insufficient_quota whatever x-should-retry
 * says (OpenCode: 9 upstream runs and 73 s before the user saw the error), and a Cursor usage
 * limit does not lift within seconds: after Cursor reported one for a model, the same error
 * is answered at once, without a new upstream run, for CURSOR_OAI_QUOTA_LATCH seconds. */
static int quota_is_limit(const coai_error *e)
{
    return e->status == 429 && e->code && strcmp(e->code, "insufficient_quota") == 0;
}

static void quota_remember(const char *model, const coai_error *e)
{
    int i, slot = 0;
    int64_t now = mono_ms();
    if (conf.quota_latch_s <= 0 || !quota_is_limit(e)) return;
    pthread_mutex_lock(&quotas.lock);
    for (i = 0; i < SRV_QUOTA_MODELS; i++) {
        if (strcmp(quotas.latch[i].model, model) == 0) { slot = i; break; }
        if (quotas.latch[i].until < quotas.latch[slot].until)
            slot = i;                   /* free, expired or oldest */
    }
    copy_str(quotas.latch[slot].model, sizeof quotas.latch[slot].model, model, strlen(model));
    quotas.latch[slot].until = now + (int64_t)conf.quota_latch_s * 1000;
    quotas.latch[slot].err = *e;
    pthread_mutex_unlock(&quotas.lock);
}

/* 1 with *e filled when model's usage-limit error is still remembered. */
static int quota_latched(const char *model, coai_error *e)
{
    int i, hit = 0;
    int64_t now = mono_ms();
    pthread_mutex_lock(&quotas.lock);
    for (i = 0; i < SRV_QUOTA_MODELS && !hit; i++) {
        if (quotas.latch[i].until > now && strcmp(quotas.latch[i].model, model) == 0) {
            *e = quotas.latch[i].err;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&quotas.lock);
    return hit;
}

/* The prompt-size cap (CURSOR_OAI_MAX_PROMPT_BYTES) on the final UserMessage text.
 * 0 ok, -1 with a 400 context_length_exceeded in *e naming the size and the cap. */
static int prompt_cap_check(size_t len, coai_error *e)
{
    if (!conf.max_prompt || len <= conf.max_prompt) return 0;
    coai_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                   "The conversation flattens to a %zu-byte prompt; Cursor accepts about %zu "
                   "bytes in one message (CURSOR_OAI_MAX_PROMPT_BYTES). Shorten or compact "
                   "the conversation.", len, conf.max_prompt);
    e->no_retry = 1;
    return -1;
}

/* CURSOR_OAI_MODEL_MAP="from=to,...": an Anthropic model name (exact, any case) or a family
 * word (opus, sonnet, haiku: every Claude name of that family) -> the model to use. Exact
 * entries win over family ones. 1 and out filled when an entry applies. */
static int model_map(coai_str want, char *out, size_t cap)
{
    const char *env = getenv("CURSOR_OAI_MODEL_MAP");
    int pass;
    if (!env || !*env) return 0;
    for (pass = 0; pass < 2; pass++) {
        const char *p = env;
        while (*p) {
            const char *e = strchr(p, ','), *eq;
            size_t n = e ? (size_t)(e - p) : strlen(p), kl;
            eq = memchr(p, '=', n);
            if (eq) {
                kl = (size_t)(eq - p);
                if (pass == 0 ? kl == want.len && strncasecmp(p, want.ptr, kl) == 0
                    : (kl == 4 && strncasecmp(p, "opus", 4) == 0)
                      || (kl == 6 && strncasecmp(p, "sonnet", 6) == 0)
                      || (kl == 5 && strncasecmp(p, "haiku", 5) == 0)) {
                    int fam_hit = pass == 0;
                    size_t j;
                    for (j = 0; !fam_hit && j + kl <= want.len; j++)
                        fam_hit = strncasecmp(want.ptr + j, p, kl) == 0;
                    if (fam_hit && (pass == 0 || (want.len > 6
                                                  && strncasecmp(want.ptr, "claude", 6) == 0))) {
                        copy_str(out, cap, eq + 1, n - kl - 1);
                        return out[0] != 0;
                    }
                }
            }
            p += n;
            if (*p == ',') p++;
        }
    }
    return 0;
}

/* ---- Responses: the bounded store behind previous_response_id and GET /v1/responses/{id}.
 * Responses created with store: true (OpenAI's default) are kept in memory, newest
 * RSTORE_MAX entries within RSTORE_BYTES; the oldest go first. Nothing is written to disk. */

#define RSTORE_MAX 256
#define RSTORE_BYTES (64u * 1024u * 1024u)

struct rentry {
    char id[48];
    char *obj, *items;         /* the response object; the conversation items ("[...]") */
    size_t obj_len, items_len;
    uint64_t seq;              /* 0 = free */
};

static struct {
    pthread_mutex_t lock;
    struct rentry e[RSTORE_MAX];
    size_t bytes;
    uint64_t seq;
} resp_store = { PTHREAD_MUTEX_INITIALIZER, { { { 0 }, NULL, NULL, 0, 0, 0 } }, 0, 0 };

static void rstore_drop(struct rentry *e)
{
    resp_store.bytes -= e->obj_len + e->items_len;
    free(e->obj);
    free(e->items);
    memset(e, 0, sizeof *e);
}

/* Keep response `id`: its object and its conversation = input items + output items. */
static void rstore_put(const char *id, coai_str obj, const coai_buf *in, coai_str out)
{
    struct rentry *slot = NULL;
    size_t i, il = in->len + out.len + 3, need = obj.len + il;
    char *o, *it;
    if (!obj.len || need > RSTORE_BYTES || strlen(id) >= sizeof slot->id) return;
    o = malloc(obj.len);
    it = malloc(il);
    if (!o || !it) { free(o); free(it); return; }
    memcpy(o, obj.ptr, obj.len);
    il = 0;
    it[il++] = '[';
    if (in->len) { memcpy(it + il, in->data, in->len); il += in->len; }
    if (in->len && out.len) it[il++] = ',';
    if (out.len) { memcpy(it + il, out.ptr, out.len); il += out.len; }
    it[il++] = ']';
    pthread_mutex_lock(&resp_store.lock);
    for (;;) {
        struct rentry *old = NULL;
        slot = NULL;
        for (i = 0; i < RSTORE_MAX; i++) {
            if (!resp_store.e[i].seq) { if (!slot) slot = &resp_store.e[i]; continue; }
            if (!old || resp_store.e[i].seq < old->seq) old = &resp_store.e[i];
        }
        if (slot && resp_store.bytes + obj.len + il <= RSTORE_BYTES) break;
        if (!old) break;
        rstore_drop(old);
    }
    if (slot) {
        copy_str(slot->id, sizeof slot->id, id, strlen(id));
        slot->obj = o;
        slot->obj_len = obj.len;
        slot->items = it;
        slot->items_len = il;
        slot->seq = ++resp_store.seq;
        resp_store.bytes += obj.len + il;
        o = it = NULL;
    }
    pthread_mutex_unlock(&resp_store.lock);
    free(o);
    free(it);
}

/* Copy the stored object (which 0) or items (1) of id into out: 1 found, 0 not. */
static int rstore_get(const char *id, int which, coai_buf *out)
{
    size_t i;
    int found = 0;
    pthread_mutex_lock(&resp_store.lock);
    for (i = 0; i < RSTORE_MAX; i++) {
        struct rentry *e = &resp_store.e[i];
        if (!e->seq || strcmp(e->id, id) != 0) continue;
        if (which) coai_buf_append(out, e->items, e->items_len);
        else coai_buf_append(out, e->obj, e->obj_len);
        found = !out->err;
        break;
    }
    pthread_mutex_unlock(&resp_store.lock);
    return found;
}

/* Parse a /v1/responses body, with the stored conversation of previous_response_id. */
static int responses_parse(struct conn *c, coai_responses_request *rr, coai_error *e)
{
    char prev[48];
    coai_buf hist = { 0 };
    coai_str h = { "", 0 };
    int k = coai_responses_previous_id((const char *)c->body.data, c->body.len, prev,
                                       sizeof prev), rc;
    memset(e, 0, sizeof *e);
    if (k == -2) {
        coai_error_set(e, 400, "invalid_request_error", "duplicate_key", "previous_response_id",
                       "The request body has the key 'previous_response_id' twice in one "
                       "object; duplicate keys are refused (JSON parsers disagree about which "
                       "one counts)");
        e->no_retry = 1;
        return -1;
    }
    if (k < 0) {
        coai_error_set(e, 400, "invalid_request_error", NULL, "previous_response_id",
                       "previous_response_id must be a string of at most %d characters",
                       (int)sizeof prev - 1);
        return -1;
    }
    if (k > 0) {
        if (!rstore_get(prev, 1, &hist)) {
            coai_error_set(e, 400, "invalid_request_error", "previous_response_not_found",
                           "previous_response_id", "Previous response with id '%s' not found: "
                           "this cursor-oai instance keeps only responses it produced with "
                           "store: true, the newest %d (at most %u MiB), until it restarts; "
                           "send the whole conversation in input instead", prev, RSTORE_MAX,
                           RSTORE_BYTES >> 20);
            e->no_retry = 1;
            coai_buf_free(&hist);
            return -1;
        }
        h.ptr = (const char *)hist.data;
        h.len = hist.len;
    }
    rc = c->route == ROUTE_RESPONSES_COMPACT
         ? coai_responses_compact_parse(rr, (const char *)c->body.data, c->body.len, h, e)
         : coai_responses_request_parse(rr, (const char *)c->body.data, c->body.len, h, e);
    coai_buf_free(&hist);
    return rc < 0 ? -1 : 0;
}

/* GET /v1/responses/{id}: a stored response, else 404 in OpenAI's shape. */
static int handle_response_get(struct conn *c)
{
    const char *id = strrchr(c->path, '/') + 1;
    char idb[48];
    coai_buf b = { 0 };
    int r;
    copy_str(idb, sizeof idb, id, strcspn(id, "?"));
    if (!rstore_get(idb, 0, &b)) {
        char msg[200];
        coai_buf_free(&b);
        snprintf(msg, sizeof msg, "Response with id '%s' not found (this instance keeps "
                 "responses created with store: true, the newest %d, until it restarts)",
                 idb, RSTORE_MAX);
        return send_error(c, 404, "invalid_request_error", "not_found", NULL, msg, NULL);
    }
    r = send_response(c, 200, "application/json", NULL, b.data, b.len);
    coai_buf_free(&b);
    return r;
}

/* Parse the request body into r->in.req (and r->in.rr for Responses). 0 ok, -1 with *e. */
static int run_parse(struct conn *c, struct run *r, coai_error *e)
{
    r->in.resp = coai_dialect_get(c->dialect)->stored;
    if (r->in.resp) {
        /* a dialect whose replies are stored: its parse reads what is stored for the request
         * (previous_response_id); the same body rules as coai_dialect_parse: lone
         * surrogates -> U+FFFD before the parse, duplicate keys and images after it */
        if (coai_request_body_fix((char *)c->body.data, c->body.len, e) < 0) return -1;
        if (responses_parse(c, &r->in.rr, e) < 0) return -1;
        r->in.req = r->in.rr.req;                /* moved: freed as req */
        memset(&r->in.rr.req, 0, sizeof r->in.rr.req);
        if (coai_request_check(&r->in.req, &IMG_LIMITS, e) < 0) return -1;
    } else if (coai_dialect_parse(&r->in.req, c->dialect, (char *)c->body.data, c->body.len,
                                  coai_str_c(c->gm_model), c->gm_stream, &IMG_LIMITS, e) < 0) {
        return -1;
    }
    /* A model name is sent upstream whole or not at all: a cut one would name another model
     * (or end inside a UTF-8 character). */
    if (r->in.req.model.len >= sizeof c->model) {
        coai_error_set(e, 400, "invalid_request_error", "invalid_value", "model",
                       "model: the model name is longer than %zu bytes", sizeof c->model - 1);
        return -1;
    }
    /* (Responses: the parser took prompt_cache_key when no header names a session) */
    if (c->convkey[0] || !r->in.resp) r->in.req.conversation_key = coai_str_c(c->convkey);
    return 0;
}

/* ---- handle_chat: one chat request, in the order it is served ----
 *   chat_model     the body parsed into the run, the model resolved, a usage limit latched
 *   chat_ids       the completion id (its last 12 hex digits: the run's handle), the message
 *                  and conversation ids
 *   chat_held      tool results for a run this instance holds: held_continue serves them
 *   chat_memory    a remembered checkpoint the request extends (conversation memory)
 *   then one pass (0: resume the checkpoint; 1: the whole conversation, or a replay of a
 *   resume that failed before the client saw a byte: chat_replay):
 *   chat_request   the run's handle and parameters, the prompt cap, the AgentRunRequest
 *   chat_reply     the dialect's writer, the profile, the transport and its host
 *   chat_run       run_open + run_stream; a fallback that starts over (chat_fallback)
 *   chat_answer    what is left goes out
 *   run_finish     park the run (tool calls) or close it; metrics, memory, the log */

/* What one request keeps while handle_chat serves it. */
struct chat {
    struct conn *c;
    struct run *r;                  /* the run serving it (a replay replaces it) */
    coai_reply_opts o;
    struct mem_hit hit;             /* the remembered checkpoint pass 0 resumes */
    coai_buf delta;                 /* the new user messages that go with it */
    char completion_id[40], msg_id[37], conv_id[37];
    int pass;                       /* 0: resume the checkpoint, 1: the whole conversation */
    int rc;                         /* the last run_open: 0 opened, -1 r->err says why */
};

/* The body parsed into r->in, the model resolved through the account's list into c->model
 * and r->in.model (CURSOR_OAI_MODEL_MAP, Claude and Gemini names). 0 go on, -1 answered. */
static int chat_model(struct conn *c, struct run *r)
{
    coai_error e;
    coai_str want;
    struct models_list *l = NULL;
    char mapped[128];
    int rc = -1, fetched = 0;
    coai_model_names names = coai_dialect_get(c->dialect)->model_names;
    memset(&e, 0, sizeof e);
    if (run_parse(c, r, &e) < 0) {
        send_coai_error(c, &e);
        return -1;
    }
    want = r->in.req.model;
    if (names != COAI_MODEL_NAMES_CURSOR && model_map(want, mapped, sizeof mapped))
        want = coai_str_c(mapped);
    /* Renew an expiring token first (a failure here is the answer: nothing was sent yet). */
    if (cred_ensure(&e) < 0) {
        send_coai_error(c, &e);
        return -1;
    }
    /* Resolve the model through the (cached) list; any failure passes the name through. */
    if (models_get(names != COAI_MODEL_NAMES_CURSOR ? &l : NULL, &e, want, c->model,
                   sizeof c->model, &fetched,
                   c->fd) < 0) {
        if (e.status == 499) goto out;                  /* the client left meanwhile */
        int unreachable = e.status == 504
                          || (e.code && (strcmp(e.code, "upstream_unreachable") == 0
                                         || strncmp(e.code, "upstream_tls", 12) == 0));
        if (fetched && unreachable) {
            /* This request's own fetch just found the upstream unreachable (connect, TLS or
             * timeout): the run would fail the same way after another connect timeout. A
             * remembered failure is not reused here: the upstream may be back. */
            send_coai_error(c, &e);
            goto out;
        }
        srv_log(LOG_DEBUG, "model list unavailable (%s); using '%.*s' as is", e.message,
                (int)want.len, want.ptr);
        copy_str(c->model, sizeof c->model, want.ptr, want.len);
    } else if (names != COAI_MODEL_NAMES_CURSOR) {
        /* a client's own model names (Claude's, Gemini's): the dialect's rule */
        coai_str pick;
        int k = coai_dialect_model_pick(c->dialect, &l->m, want, c->model,
                                        r->in.req.thinking == 1, &pick, &e);
        if (k < 0) {
            send_coai_error(c, &e);                     /* not_found_error */
            goto out;
        }
        if (k > 0) {
            srv_log(LOG_DEBUG, "model '%.*s' is not one of the account's: using '%.*s'",
                    (int)want.len, want.ptr, (int)pick.len, pick.ptr);
            copy_str(c->model, sizeof c->model, pick.ptr, pick.len);
        }
    }
    copy_str(r->in.model, sizeof r->in.model, c->model, strlen(c->model));
    r->out.stream = r->in.req.stream;
    rc = 0;
out:
    models_put(l);
    return rc;
}

/* A usage limit Cursor reported for the model lately is the answer, without a run
 * (quota_latched). 0 go on, -1 answered. */
static int chat_quota(struct conn *c)
{
    coai_error e;
    memset(&e, 0, sizeof e);
    if (!quota_latched(c->model, &e)) return 0;
    c->fallback = "quota_latch";
    metric_add(M_QUOTA_LATCHED, "", 1);
    srv_log(LOG_DEBUG, "usage limit of %s remembered: answered without an upstream run",
            c->model);
    send_error_ex(c, &e, NULL);
    return -1;
}

/* The ids of the response: the dialect's id prefix and hex digits (chatcmpl-<24 hex>,
 * Anthropic msg_<24 hex>, Responses resp_<32 hex>: coai_dialect_info), whose last 12 hex are
 * the session id; the message and conversation ids of the run request. 0 ok, -1 answered. */
static int chat_ids(struct chat *x)
{
    struct conn *c = x->c;
    char u[37];
    int i, k;
    const coai_dialect_info *di = coai_dialect_get(c->dialect);
    const char *pre = di->id_prefix;
    size_t pl = strlen(pre);
    if (uuid_new(u) < 0 || uuid_new(x->msg_id) < 0 || uuid_new(x->conv_id) < 0) {
        send_error(c, 500, "server_error", NULL, NULL, "no randomness available", NULL);
        return -1;
    }
    memcpy(x->completion_id, pre, pl);
    for (i = 0, k = (int)pl; u[i] && k < (int)pl + di->id_hex; i++)
        if (u[i] != '-') x->completion_id[k++] = u[i];
    x->completion_id[k] = 0;
    return 0;
}

/* Tool results for a run this instance holds: continue that run (issue 11). Not for a
 * compaction request: its summary needs a run of its own, with the summary request.
 * 0 answered (by the held run, or an error), 1 go on with a fresh run. */
static int chat_held(struct chat *x)
{
    struct conn *c = x->c;
    struct run *r = x->r, *h;
    char why[200];
    coai_error e;
    if (!held_runs.on || !r->in.req.has_tool_messages || r->in.rr.compact) return 1;
    h = held_claim(&r->in.req, r->in.model, why, sizeof why);
    if (h) {
        coai_chat_request_free(&h->in.req);
        h->in.req = r->in.req;              /* the follow-up's request moves over */
        memset(&r->in.req, 0, sizeof r->in.req);
        coai_responses_request_free(&h->in.rr);
        h->in.rr = r->in.rr;
        memset(&r->in.rr, 0, sizeof r->in.rr);
        h->in.resp = r->in.resp;
        h->in.params.tools = h->in.req.tools;     /* the client's tools as sent this time */
        h->in.params.tool_count = h->in.req.tool_count;
        if (h->in.req.message_count) {
            /* its history is this request's now: a next follow-up that comes before the
             * run is parked again waits for it by this (held_live_unparked_locked) */
            unsigned char d[32];
            conv_digest(h->in.req.messages, h->in.req.message_count, d);
            pthread_mutex_lock(&held_runs.lock);
            memcpy(h->in.hist, d, 32);
            h->in.hist_ok = 1;
            pthread_mutex_unlock(&held_runs.lock);
        }
        if (held_continue(c, h, x->completion_id) == 0) return 0;
        /* fallen back: held_continue freed h, and with it the request; parse again */
        memset(&e, 0, sizeof e);
        if (run_parse(c, r, &e) < 0) {
            send_coai_error(c, &e);
            return 0;
        }
    } else if (why[0] && r->in.req.session_id.len) {
        pthread_mutex_lock(&held_runs.lock);
        held_runs.fallback_mismatch++;
        pthread_mutex_unlock(&held_runs.lock);
        fallback_note(c, "no_held_run");
        srv_log(LOG_INFO, "tool results: %s; replaying the conversation in a fresh run", why);
    }
    return 1;
}

/* A fresh run: from a remembered checkpoint when the request only adds user messages to a
 * conversation this instance remembers (x->hit, x->delta), else (or when that fails before
 * anything reached the client) with the whole conversation flattened. */
static void chat_memory(struct chat *x)
{
    struct run *r = x->r;
    size_t j;
    /* The tree owns everything now (a held-run fallback parsed the body again): the body
     * goes. */
    coai_buf_free(&x->c->body);
    if (!mem_find(&r->in.req, r->in.model, &x->hit)) return;
    for (j = x->hit.k; j < r->in.req.message_count; j++) {
        const coai_message *m = &r->in.req.messages[j];
        size_t q;
        for (q = 0; q < m->part_count; q++) {
            if (m->parts[q].kind != COAI_PART_TEXT) continue;
            if (x->delta.len) coai_buf_puts(&x->delta, "\n\n");
            coai_buf_append(&x->delta, m->parts[q].text.ptr, m->parts[q].text.len);
        }
    }
    if (!x->delta.len || x->delta.err) mem_hit_free(&x->hit);
}

/* The resumed run failed before the client saw a byte: the request moves to a new run that
 * replays the whole conversation. 0 ok, -1 answered. */
static int chat_replay(struct chat *x)
{
    struct run *r = x->r, *n2 = run_new();
    if (!n2) {
        send_error(x->c, 500, "server_error", NULL, NULL, "out of memory", NULL);
        return -1;
    }
    srv_log(LOG_INFO, "checkpoint resume of conversation %s failed (%s); replaying "
            "the conversation in a fresh run", x->hit.conv_id,
            r->reply.error.status ? r->reply.error.message : "no answer");
    pthread_mutex_lock(&conv_memory.lock);
    conv_memory.resume_failed++;
    pthread_mutex_unlock(&conv_memory.lock);
    n2->c = x->c;
    n2->up.idle_ms = r->up.idle_ms;
    n2->out.last_write = mono_ms();
    n2->in.req = r->in.req;
    memset(&r->in.req, 0, sizeof r->in.req);
    n2->in.rr = r->in.rr;
    memset(&r->in.rr, 0, sizeof r->in.rr);
    n2->in.resp = r->in.resp;
    fallback_note(x->c, "checkpoint_resume_failed");
    copy_str(n2->in.model, sizeof n2->in.model, r->in.model, strlen(r->in.model));
    run_free(r);
    x->r = r = n2;
    r->out.stream = r->in.req.stream;
    return 0;
}

/* The run request of this pass into r->up.run_msg: the run's handle, its parameters (pass
 * 0: only the new messages, on the remembered checkpoint), the prompt cap. 0 ok, -1
 * answered. */
static int chat_request(struct chat *x)
{
    struct run *r = x->r;
    coai_run_params *p = &r->in.params;
    coai_error e;
    /* With continuation the tool-call ids carry a new handle for the run (the last 12
     * hex digits of the completion id); without it the session id of the history is
     * kept, as before. */
    if (held_runs.on || !r->in.req.session_id.len)
        memcpy(r->in.session, x->completion_id + strlen(x->completion_id) - 12, 12),
            r->in.session[12] = 0;
    else
        copy_str(r->in.session, sizeof r->in.session, r->in.req.session_id.ptr,
                 r->in.req.session_id.len);
    if (held_runs.on) held_live_add(r);
    coai_chat_request_params(&r->in.req, p);
    p->model_id = coai_str_c(r->in.model);      /* r may be a new run (pass 1) */
    p->message_id = coai_str_c(x->msg_id);
    copy_str(r->in.conv_id, sizeof r->in.conv_id, x->conv_id, strlen(x->conv_id));
    if (x->pass == 0) {
        /* only the new part goes upstream; Cursor has the rest in its checkpoint */
        r->in.resumed = r->out.hold_errors = 1;
        copy_str(r->in.conv_id, sizeof r->in.conv_id, x->hit.conv_id, strlen(x->hit.conv_id));
        p->prompt.ptr = (const char *)x->delta.data;
        p->prompt.len = x->delta.len;
        p->conversation_state.ptr = (const char *)x->hit.state.data;
        p->conversation_state.len = x->hit.state.len;
        p->blob_ids = x->hit.ids;
        p->blob_values = x->hit.vals;
        p->blob_count = x->hit.nblobs;
        srv_log(LOG_INFO, "conversation %s resumed from its checkpoint (%zu bytes, %zu "
                "blobs): %zu bytes of new message instead of %zu of history", r->in.conv_id,
                x->hit.state.len, x->hit.nblobs, x->delta.len, r->in.req.prompt.len);
    }
    /* The UserMessage text is final here: over the cap it is refused, never sent blindly
     * (the upstream would fail it with a bare invalid_argument); a resumed conversation
     * sends only its new part. */
    if (prompt_cap_check(p->prompt.len, &e) < 0) {
        send_coai_error(x->c, &e);
        return -1;
    }
    p->conversation_id = coai_str_c(r->in.conv_id);
    p->workspace = coai_str_c(conf.workspace);
    p->time_zone = coai_str_c(conf.timezone);
    coai_buf_reset(&r->up.run_msg);
    /* the run's tool ownership goes with its run request: every call of the run says it */
    if (coai_run_tools_header(tool_mode, p->tool_count, &r->up.tools_hdr[0],
                              &r->up.tools_hdr[1]))
        th_note_run();
    if (coai_encode_run_request(&r->up.run_msg, p) < 0 || r->up.run_msg.err) {
        send_error(x->c, 500, "server_error", NULL, NULL, "cannot encode the run request",
                   NULL);
        return -1;
    }
    /* stack strings and the hit's copies: nothing reads them after the run request */
    p->message_id = coai_str_c("");
    p->conversation_state = coai_str_c("");
    p->blob_ids = p->blob_values = NULL;
    p->blob_count = 0;
    if (x->pass == 0) coai_chat_request_params(&r->in.req, p);     /* usage: whole prompt */
    srv_log(LOG_DEBUG, "chat: model %s, %zu tools, prompt %zu bytes: %.*s", x->c->model,
            p->tool_count, p->prompt.len, (int)(p->prompt.len > 500 ? 500 : p->prompt.len),
            p->prompt.ptr);
    pthread_mutex_lock(&held_runs.lock);
    held_runs.runs_started++;
    held_runs.prompt_bytes += x->pass == 0 ? x->delta.len : p->prompt.len;
    pthread_mutex_unlock(&held_runs.lock);
    return 0;
}

/* Pass 0: the checkpoint's blobs, served on get_blob. */
static void chat_blobs(struct chat *x)
{
    size_t j;
    if (x->pass != 0) return;
    for (j = 0; j < x->hit.nblobs; j++)
        coai_reply_kv_put(&x->r->reply, x->hit.ids[j], x->hit.vals[j]);
}

/* The dialect's writer for the response, then where the run goes: the transport profile,
 * the transport (tr_choose) and its host. 0 ok, -1 answered. */
static int chat_reply(struct chat *x)
{
    struct run *r = x->r;
    run_reply_opts(r, &x->o, x->completion_id);
    if (coai_reply_init(&r->reply, &x->o) < 0) {
        send_error(x->c, 500, "server_error", NULL, NULL, "out of memory", NULL);
        return -1;
    }
    if (x->pass == 1 && r->in.req.message_count) {
        /* The conversation lives on in run_msg: the prompt and the messages of the tree
         * go now (robust: a big request costs little more than its size), after the
         * history digest conversation memory needs is taken. The tool definitions stay:
         * the reply's views point into them. */
        unsigned char (*dg)[32] = malloc(r->in.req.message_count * sizeof *dg);
        if (dg && held_runs.on) {
            coai_conversation_digests(r->in.req.messages, r->in.req.message_count, dg);
            pthread_mutex_lock(&held_runs.lock);        /* held_claim reads it for a live run */
            memcpy(r->in.hist, dg[r->in.req.message_count - 1], 32);
            r->in.hist_ok = 1;
            pthread_mutex_unlock(&held_runs.lock);
        }
        free(dg);
        r->in.prompt_units = r->reply.prompt_units_;
        r->reply.o_.prompt = x->o.prompt = coai_str_c("");
        coai_buf_free(&r->in.req.prompt);
        r->in.params.prompt = coai_str_c("");
        r->in.req.messages = NULL;
        r->in.req.message_count = 0;
        cJSON_DeleteItemFromObjectCaseSensitive(r->in.req.root_, "messages");
    }
    if (x->pass == 0) {
        chat_blobs(x);
        pthread_mutex_lock(&conv_memory.lock);
        conv_memory.resumed++;
        pthread_mutex_unlock(&conv_memory.lock);
    }
    pthread_mutex_lock(&hosts.lock);
    r->up.profile = conf.profile_forced >= 0 ? conf.profile_forced : hosts.profile;
    pthread_mutex_unlock(&hosts.lock);
    tr_pick(r);
    return 0;
}

/* Open the run (tr_open), once more on a new connection when a pooled one was dead or going
 * away, and once more when the upstream rejected the token before anything reached the
 * client (renewed once, single flight). 0 open, -1 r->err says why. */
static int run_open(struct run *r)
{
    int attempt, rc = -1;
    for (attempt = 0; attempt < 2; attempt++) {
        coai_error re;
        int fr;
        rc = tr_open(r, 0);
        if (rc == 1) {
            srv_log(LOG_DEBUG, "the upstream connection was dead or going away before "
                    "the run answered; retrying on a new one");
            memset(&r->err, 0, sizeof r->err);
            rc = tr_open(r, 1);
        }
        /* A 401 before anything reached the client: renew once (single flight) and
         * run again with the new token. */
        if (rc == 0 || r->out.cancelled || !r->fb.upstream_401 || attempt > 0) break;
        memset(&re, 0, sizeof re);
        fr = cred_refresh(r->up.auth_gen, &re);
        if (fr == RENEW_NONE) break;
        if (fr == RENEW_FAILED) { r->err = re; break; }
        srv_log(LOG_INFO, "upstream rejected the access token; retrying with the "
                "renewed one");
        memset(&r->err, 0, sizeof r->err);
        r->fb.upstream_401 = 0;
    }
    return rc;
}

/* The open failed (rc != 0) before anything reached the client: which fallback may start
 * over (r->fb.retry; run_stream sets it too, for what it finds in the answer). */
static void run_open_failed(struct run *r, int rc)
{
    if (rc == 0 || r->out.cancelled) return;
    if (r->fb.h1_refused[0])
        run_h1_refused(r);
    else if (run_may_switch(r) && profile_wrong(r->fb.http_status, &r->err))
        r->fb.retry = RETRY_PROFILE;
    else if (!r->in.resumed && !(r->fb.tries & TRIED_CONV_RESET) && r->err.code
             && strcmp(r->err.code, "conversation_lost") == 0)
        r->fb.retry = RETRY_CONV;
    else if (!(r->fb.tries & TRIED_STATE_AGENT) && r->err.code
             && strcmp(r->err.code, "conversation_state_required") == 0)
        r->fb.retry = RETRY_STATE;
    if (r->fb.tr_fail && tr_may_fall_back(r)) r->fb.retry = RETRY_TRANSPORT;
}

/* Feed an error to the reply (no keepalive meanwhile). */
static void run_feed_error(struct run *r, const coai_error *e)
{
    r->out.in_feed = 1;
    coai_reply_feed_error(&r->reply, e);
    r->out.in_feed = 0;
}

/* Nothing reached the client and r->fb.retry names a fallback: take it (each at most once
 * per request: r->fb.tries). 0 start over, -1 the conversation could not be reset (its
 * error is fed to the reply). */
static int chat_fallback(struct chat *x)
{
    struct run *r = x->r;
    if (r->fb.retry == RETRY_TRANSPORT) {
        tr_fall_back(r);
        fallback_note(x->c, "http1");
    } else if (r->fb.retry == RETRY_PROFILE) {
        r->fb.tries |= TRIED_PROFILE;
        srv_log(LOG_WARN, "run %s: the %s profile was refused (%s); retrying with %s",
                r->up.request_id, PROFILE_NAME[r->up.profile], r->err.message,
                PROFILE_NAME[!r->up.profile]);
        r->up.profile = !r->up.profile;
        fallback_note(x->c, "profile");
    } else if (r->fb.retry == RETRY_CONV) {
        char old[37];
        r->fb.tries |= TRIED_CONV_RESET;
        copy_str(old, sizeof old, r->in.conv_id, strlen(r->in.conv_id));
        if (run_new_conversation(r) < 0) {
            run_feed_error(r, &r->err);
            return -1;
        }
        srv_log(LOG_WARN, "run %s: Cursor lost conversation %s (%s); replaying the "
                "whole conversation once as %s", r->up.request_id, old, r->err.message,
                r->in.conv_id);
        fallback_note(x->c, "conversation_reset");
    } else if (r->fb.retry == RETRY_STATE) {
        coai_buf nb = { 0 };
        r->fb.tries |= TRIED_STATE_AGENT;
        if (coai_encode_run_request_state_mode(&nb, r->up.run_msg.data, r->up.run_msg.len,
                                               1) != COAI_OK) {
            coai_buf_free(&nb);
            run_feed_error(r, &r->err);
            return -1;
        }
        coai_buf_free(&r->up.run_msg);
        r->up.run_msg = nb;
        srv_log(LOG_WARN, "run %s: Cursor wants the conversation state (%s); sending the run "
                "once more with its mode AGENT", r->up.request_id, r->err.message);
        fallback_note(x->c, "conversation_state");
    } else {
        r->fb.tries |= TRIED_HOST;
        run_host_get(&r->up.host, NULL, 0);
        fallback_note(x->c, "http2_only_host");
    }
    return 0;
}

/* Start over: the attempt's upstream side and reply go, a new reply begins. 0 ok, -1
 * answered. */
static int chat_restart(struct chat *x)
{
    struct run *r = x->r;
    run_hb_stop(r);
    tr_close(r, 0);
    coai_reply_free(&r->reply);
    coai_frame_decoder_free(&r->up.frames);
    memset(&r->err, 0, sizeof r->err);
    r->fb.upstream_401 = 0;
    if (coai_reply_init(&r->reply, &x->o) < 0) {
        send_error(x->c, 500, "server_error", NULL, NULL, "out of memory", NULL);
        return -1;
    }
    if (r->in.prompt_units) r->reply.prompt_units_ = r->in.prompt_units;   /* prompt gone */
    chat_blobs(x);
    return 0;
}

/* Run it: open, stream Cursor's answer to the client, and while nothing has reached the
 * client, start over on a fallback. 0 done (x->rc: the last open), -1 answered. */
static int chat_run(struct chat *x)
{
    struct run *r = x->r;
    for (;;) {
        r->fb.retry = RETRY_NONE;
        x->c->transport = TR_NAME[r->up.tr];
        x->rc = run_open(r);
        run_open_failed(r, x->rc);
        if (x->rc == 0) {
            run_hb_start(r);
            run_stream(r);
        }
        if (!(r->fb.retry && !r->out.cancelled && !coai_reply_started(&r->reply))) return 0;
        /* Nothing reached the client: start over once with the other profile, or on
         * the host GetServerConfig names now. */
        if (chat_fallback(x) < 0) return 0;
        if (chat_restart(x) < 0) return -1;
    }
}

/* The end of a pass: a failed open answers with its error; a resumed run that failed before
 * the client saw a byte is replayed (1); else what is left goes out (0). */
static int chat_answer(struct chat *x)
{
    struct run *r = x->r;
    if (x->rc != 0 && !r->out.cancelled) run_feed_error(r, &r->err);
    if (x->pass == 0 && run_failed_unsent(r)) return 1;    /* nothing was sent: replay */
    run_flush_rest(r);
    return 0;
}

static int handle_chat(struct conn *c)
{
    struct chat x;
    int served = 0;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.r = run_new();
    if (!x.r) {
        send_error(c, 500, "server_error", NULL, NULL, "out of memory", NULL);
        return -1;
    }
    x.r->c = c;
    x.r->out.stream = 0;
    x.r->up.idle_ms = (int64_t)conf.idle_timeout_s * 1000;
    x.r->out.last_write = mono_ms();
    if (chat_model(c, x.r) == 0 && chat_quota(c) == 0 && chat_ids(&x) == 0
        && chat_held(&x) == 1) {
        chat_memory(&x);
        for (x.pass = x.hit.state.len ? 0 : 1; x.pass < 2; x.pass++) {
            if ((x.pass == 1 && x.hit.state.len && chat_replay(&x) < 0)
                || chat_request(&x) < 0 || chat_reply(&x) < 0 || chat_run(&x) < 0)
                break;
            if (chat_answer(&x) == 0) { served = 1; break; }
        }
    }
    mem_hit_free(&x.hit);
    coai_buf_free(&x.delta);
    if (served) run_finish(x.r);
    else run_free(x.r);
    return 0;
}

/* POST /v1/messages/count_tokens, .../{model}:countTokens: the input estimate a reply would
 * report, in the shape of the route's dialect. */
static int handle_count_tokens(struct conn *c)
{
    coai_buf out = { 0 };
    coai_error e;
    int r;
    if (coai_dialect_count_tokens(&out, c->dialect, (char *)c->body.data, c->body.len,
                                  coai_str_c(c->gm_model), &IMG_LIMITS, &e) < 0)
        r = send_coai_error(c, &e);
    else
        r = send_response(c, 200, "application/json", NULL, out.data, out.len);
    coai_buf_free(&out);
    return r;
}

/* ======================================================================== */
/* Run engine: struct run, its transports, run_stream, heartbeats           */
/* ======================================================================== */

enum { TR_HTTP1, TR_H2 };           /* transports (see tr_open) */

/* The held-run and conversation-memory counters, read at scrape time (/metrics). */
static void continuation_write(coai_buf *b)
{
    static const char *const name = "cursor_oai_continuation_events_total";
    unsigned long v[7];
    static const char *const ev[7] = { "run_held", "run_continued", "held_run_expired",
                                       "held_run_evicted", "conversation_stored",
                                       "conversation_resumed", "conversation_resume_failed" };
    int i;
    pthread_mutex_lock(&held_runs.lock);
    v[0] = held_runs.held;
    v[1] = held_runs.continued;
    v[2] = held_runs.expired;
    v[3] = held_runs.evicted;
    pthread_mutex_unlock(&held_runs.lock);
    pthread_mutex_lock(&conv_memory.lock);
    v[4] = conv_memory.stored;
    v[5] = conv_memory.resumed;
    v[6] = conv_memory.resume_failed;
    pthread_mutex_unlock(&conv_memory.lock);
    coai_buf_printf(b, "# HELP %s Held runs (parked, continued, expired, evicted) and "
                    "conversation memory (checkpoints stored, resumed, resumes that fell back)"
                    "\n# TYPE %s counter\n", name, name);
    for (i = 0; i < 7; i++)
        coai_buf_printf(b, "%s{event=\"%s\"} %lu\n", name, ev[i], v[i]);
}

#define HB_CLIENT_MS 5000           /* client_heartbeat period (first one 5 s after start) */
#define HB_EXEC_MS 3000             /* exec heartbeat period per pending exec */
#define HELD_BACKLOG_MAX (4u * 1024 * 1024)
#define HELD_BREAKER_STREAK 3       /* hollow continuations in a row that open the breaker */
#define HELD_BREAKER_MS (10 * 60 * 1000)

/* Send what the reply produced. A streaming 200 goes out as it comes (head once, then one
 * chunk per drain); anything else (non-streaming, or an error status) is one Content-Length
 * response once the reply is done. 0 ok, -1 the client is gone. */
/* x-cursor-model: the Cursor model id that served the request (the response's "model" is
 * the name the client asked for). Only when it is a safe header value. */
static void model_header(struct conn *c, coai_buf *h)
{
    if (c->model[0] && coai_header_value_ok(coai_str_c(c->model)))
        coai_buf_printf(h, "x-cursor-model: %s\r\n", c->model);
}


/* Responses with store: the answer goes into the store before its last byte goes out, so
 * a client that chains previous_response_id the moment it has read it finds it. */
static void run_store(struct run *r)
{
    if (r->out.stored || !r->in.resp || !r->in.rr.store || !coai_reply_done(&r->reply)
        || r->reply.error.status)
        return;
    r->out.stored = 1;
    rstore_put(r->in.completion_id, coai_reply_response(&r->reply), &r->in.rr.items,
               coai_reply_output_items(&r->reply));
}


static int run_flush(struct run *r)
{
    struct conn *c = r->c;
    coai_reply *rp = &r->reply;
    coai_buf h = { 0 };
    int st, done, rc = 0;
    if (!c) return 0;
    if (c->dead) return -1;
    if (c->wpend.len && conn_write(c, NULL, 0) < 0) return -1;
    if (r->out.sent_all || !coai_reply_started(rp)) return 0;
    st = coai_reply_status(rp);
    done = coai_reply_done(rp);
    if (r->out.hold_errors && st != 200) return 0;  /* the caller falls back and answers */
    if (st == 200 && !c->first_seen) {
        char lb[64];
        c->first_seen = 1;
        snprintf(lb, sizeof lb, "dialect=\"%s\"", route_dialect(c->route));
        metric_observe(M_FIRST_TOKEN, lb, (double)(mono_ms() - c->t0) / 1000.0);
    }
    /* Stored, remembered and counted before the last byte goes out: a client that sends
     * its next turn (or reads /metrics) the moment it has read this answer finds it
     * (previous_response_id, memory, the run's metrics). */
    if (done) run_store(r);
    if (done) run_count(r);
    if (done && st == 200) held_count(r);
    if (done && st == 200 && !r->reply.error.status && !coai_reply_tool_called(rp)
        && !r->out.remembered) {
        r->out.remembered = 1;
        mem_store(r);
    }
    if (st == 200 && r->out.stream) {
        if (!c->streaming) {
            coai_reply_head(rp, &h);
            model_header(c, &h);
            rc = h.err ? -1 : stream_begin(c, (const char *)h.data);
        }
        if (rc == 0 && done) request_count(c);     /* before the end event goes out */
        if (rc == 0 && rp->out.len) {
            rc = stream_write(c, rp->out.data, rp->out.len);
            coai_buf_reset(&rp->out);
            r->out.last_write = mono_ms();
        }
        if (rc == 0 && done) {
            r->out.sent_all = 1;
            rc = stream_end(c);
        }
    } else if (done) {
        coai_reply_head(rp, &h);
        model_header(c, &h);
        rc = h.err ? -1 : send_response(c, st, NULL, (const char *)h.data, rp->out.data,
                                        rp->out.len);
        coai_buf_reset(&rp->out);
        r->out.sent_all = 1;
    }
    coai_buf_free(&h);
    return rc;
}

/* The response failed and nothing of it reached the client (out.hold_errors held the error
 * back): the caller falls back (a replay, or a fresh run for a held run's follow-up). */
static int run_failed_unsent(const struct run *r)
{
    return !r->out.cancelled && !r->c->dead && coai_reply_done(&r->reply)
           && coai_reply_status(&r->reply) != 200;
}

/* No fallback any more: errors go out too, and whatever is left of the response. */
static void run_flush_rest(struct run *r)
{
    r->out.hold_errors = 0;
    if (!r->out.cancelled && run_flush(r) < 0) r->out.cancelled = 1;
}

/* Called about once a second while waiting on the upstream: keepalive comments for a
 * committed stream that has been quiet, and a client check. -1 cancels the wait. */
static void run_hb_need(struct run *r, int now_too);

static int run_tick(void *ctx)
{
    struct run *r = ctx;
    int64_t stop_at = __atomic_load_n(&listener.stop_at, __ATOMIC_RELAXED);
    if (r->c->dead) return -1;
    if (stopping() && stop_at && mono_ms() - stop_at > SRV_SHUTDOWN_GRACE_MS - 2000
        && !r->out.in_feed && !r->out.stopping) {
        /* Shutting down: end the run in-band before the process exits under it. */
        coai_error e;
        coai_error_set(&e, 503, "server_error", "server_shutting_down", NULL,
                       "the proxy is shutting down");
        e.retry_after = 1;
        r->out.stopping = 1;
        r->out.in_feed = 1;
        coai_reply_feed_error(&r->reply, &e);
        r->out.in_feed = 0;
        run_flush(r);
        return -1;
    }
    run_hb_need(r, 0);
    if (r->held.hollow_until) {
        /* A continued run that has shown nothing yet: the client sees nothing either (no
         * keepalive commits it), so a hollow run can still fall back to a fresh one. */
        if (mono_ms() < r->held.hollow_until) return 0;
        r->held.hollow_hit = 1;
        return -1;
    }
    if (r->out.in_feed || !r->c->streaming || coai_reply_done(&r->reply)) return 0;
    if (mono_ms() - r->out.last_write < (int64_t)conf.keepalive_s * 1000) return 0;
    if (coai_reply_keepalive(&r->reply) < 0) return -1;
    return run_flush(r);
}

/* Case-insensitive search for the NUL-free needle in n bytes of p. */
static int ci_contains(const void *p, size_t n, const char *needle)
{
    const char *s = p;
    size_t k = strlen(needle), i;
    if (!s || k == 0 || n < k) return 0;
    for (i = 0; i + k <= n; i++)
        if (strncasecmp(s + i, needle, k) == 0) return 1;
    return 0;
}

/* An answer that means "this transport profile is not the one the server speaks": 415
 * (content type), 464 (the load balancer's incompatible-protocol status), or an
 * outdated-client answer that names the profile (its content type or protocol). Never an
 * ordinary upstream error: a model error (ERROR_DEPRECATED, grpc-status 3/5), a quota
 * error, a 5xx, or an "Update Required" about the version alone (issue 24 item 2). */
static int profile_wrong(int http_status, const coai_error *e)
{
    static const char *const names[] = { "grpc-web", "connect+proto", "application/proto",
                                         "content-type", "content type", "protocol" };
    size_t i;
    if (http_status == 415 || http_status == 464) return 1;
    if (!e->code || strcmp(e->code, "outdated_client") != 0) return 0;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (ci_contains(e->message, strlen(e->message), names[i])) return 1;
    return 0;
}

/* The tick of a reply the reader sends while a client waits: the bounds of the request go
 * on while the append waits for Cursor. A follow-up's hollow deadline cancels it (the
 * caller falls back); a committed stream that has been quiet gets its keepalive, between
 * events only (nothing half-written in the reply's buffer). */
static int run_send_tick(void *ctx)
{
    struct run *r = ctx;
    struct conn *c = r->c;
    if (!c || c->dead) return -1;
    if (r->held.hollow_until) {
        if (mono_ms() < r->held.hollow_until) return 0;
        r->held.hollow_hit = 1;
        return -1;
    }
    if (!c->streaming || r->reply.out.len || coai_reply_done(&r->reply)) return 0;
    if (mono_ms() - r->out.last_write < (int64_t)conf.keepalive_s * 1000) return 0;
    if (coai_reply_keepalive(&r->reply) < 0) return -1;
    return run_flush(r);
}

/* coai_reply's upstream sink (the reader's replies), sent inline before the next frame is
 * read. */
static int run_send(void *user, const unsigned char *msg, size_t n)
{
    struct run *r = user;
    if (!r->c) return tr_send(r, msg, n, -1, NULL, NULL, &r->err, &r->out.cancelled);
    return tr_send(r, msg, n, r->c->fd, run_send_tick, r, &r->err, &r->out.cancelled);
}

/* ---- heartbeats ---- */

/* A heartbeat in flight gives up as soon as the run stops wanting heartbeats (run_hb_stop
 * waits for this thread). */
static int run_hb_tick(void *ctx)
{
    struct run *r = ctx;
    return __atomic_load_n(&r->hb.stop, __ATOMIC_RELAXED) ? -1 : 0;
}

/* One heartbeat append; 0 sent, -1 failed. */
static int run_hb_send(struct run *r, coai_buf *m)
{
    coai_error e;
    memset(&e, 0, sizeof e);
    if (m->err || !m->len || tr_send(r, m->data, m->len, -1, run_hb_tick, r, &e, NULL) < 0) {
        srv_log(LOG_DEBUG, "run %s: heartbeat failed: %s", r->up.request_id, e.message);
        return -1;
    }
    return 0;
}

static void *run_hb_thread(void *arg)
{
    struct run *r = arg;
    pthread_mutex_lock(&r->hb.mu);
    while (!r->hb.stop) {
        int64_t now = mono_ms(), next = r->hb.last + HB_CLIENT_MS;
        if (r->hb.n && r->hb.exec_last + HB_EXEC_MS < next) next = r->hb.exec_last + HB_EXEC_MS;
        if (next < r->hb.resume) next = r->hb.resume;
        if (now >= next) {
            int failed = 0;
            int client = now >= r->hb.last + HB_CLIENT_MS;
            uint32_t ids[64];
            size_t i, n = 0;
            if (r->hb.n && now >= r->hb.exec_last + HB_EXEC_MS) {
                n = r->hb.n;
                memcpy(ids, r->hb.ids, n * sizeof ids[0]);
                r->hb.exec_last = now;
            }
            if (client) r->hb.last = now;
            pthread_mutex_unlock(&r->hb.mu);
            if (client) {
                coai_buf m = { 0 };
                if (coai_encode_client_heartbeat(&m) != COAI_OK) m.err = 1;
                if (run_hb_send(r, &m) < 0) failed = 1;
                else r->hb.sent++;
                coai_buf_free(&m);
            }
            /* after a failure the rest waits for the back-off too */
            for (i = 0; i < n && !failed && !run_hb_tick(r); i++) {
                coai_buf m = { 0 };
                if (coai_encode_exec_heartbeat(&m, ids[i]) != COAI_OK) m.err = 1;
                if (run_hb_send(r, &m) < 0) failed = 1;
                else r->hb.exec_sent++;
                coai_buf_free(&m);
            }
            pthread_mutex_lock(&r->hb.mu);
            if (failed) {
                /* Back off (5, 10, 20, then 40 s after the failure), never back to back:
                 * a stalled append endpoint gets a heartbeat now and then, not a queue of
                 * them, and the next one is due a whole period after this one gave up. */
                unsigned k = __atomic_add_fetch(&r->hb.streak, 1, __ATOMIC_RELAXED);
                r->hb.failed++;
                now = mono_ms();
                r->hb.resume = now + ((int64_t)HB_CLIENT_MS << (k < 4 ? k - 1 : 3));
                r->hb.last = r->hb.exec_last = now;
            } else {
                __atomic_store_n(&r->hb.streak, 0, __ATOMIC_RELAXED);
            }
            continue;
        }
        cond_wait_ms(&r->hb.cv, &r->hb.mu, next - now);
    }
    pthread_mutex_unlock(&r->hb.mu);
    return NULL;
}

/* The run is open: heartbeats are due from HB_CLIENT_MS on. Most runs end before that, so
 * the thread that sends them starts only when the first one comes near (run_hb_need). */
static void run_hb_start(struct run *r)
{
    r->hb.last = r->hb.exec_last = mono_ms();
    r->hb.open = 1;
}

static void run_hb_thread_start(struct run *r)
{
    pthread_attr_t at;
    if (r->hb.started || !r->hb.open) return;
    __atomic_store_n(&r->hb.stop, 0, __ATOMIC_RELAXED);
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    if (pthread_create(&r->hb.thread, &at, run_hb_thread, r) == 0) r->hb.started = 1;
    else srv_log(LOG_WARN, "run %s: no heartbeat thread: %s", r->up.request_id, strerror(errno));
    pthread_attr_destroy(&at);
}

/* Called about once a second by the reader (and when a run is parked): start the heartbeat
 * thread a second before the first heartbeat is due. */
static void run_hb_need(struct run *r, int now_too)
{
    if (!r->hb.open || r->hb.started) return;
    if (now_too || mono_ms() - r->hb.last >= HB_CLIENT_MS - 1500) run_hb_thread_start(r);
}

static void run_hb_stop(struct run *r)
{
    r->hb.open = 0;
    if (!r->hb.started) return;
    pthread_mutex_lock(&r->hb.mu);
    __atomic_store_n(&r->hb.stop, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&r->hb.cv);
    pthread_mutex_unlock(&r->hb.mu);
    pthread_join(r->hb.thread, NULL);
    r->hb.started = 0;
}

/* Exec heartbeats for the tool calls the client now runs (n = 0: none pending). */
static void run_hb_execs(struct run *r, const coai_reply_call *calls, size_t n)
{
    size_t i;
    if (!r->mu_init) return;
    pthread_mutex_lock(&r->hb.mu);
    r->hb.n = 0;
    for (i = 0; i < n && r->hb.n < sizeof r->hb.ids / sizeof r->hb.ids[0]; i++)
        if (calls[i].ref.part == 0)             /* a split write's calls: one exec */
            r->hb.ids[r->hb.n++] = calls[i].ref.id;
    r->hb.exec_last = mono_ms();
    pthread_cond_signal(&r->hb.cv);
    pthread_mutex_unlock(&r->hb.mu);
}

static struct run *run_new(void)
{
    struct run *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->held.wake[0] = r->held.wake[1] = -1;
    if (pthread_mutex_init(&r->up.send_mu, NULL) == 0) {
        if (pthread_mutex_init(&r->hb.mu, NULL) == 0) {
            if (cond_init_mono(&r->hb.cv) == 0) {
                r->mu_init = 1;
                return r;
            }
            pthread_mutex_destroy(&r->hb.mu);
        }
        pthread_mutex_destroy(&r->up.send_mu);
    }
    free(r);
    return NULL;
}

/* Close the upstream run (if any) and free everything. */
static void run_free(struct run *r)
{
    if (!r) return;
    held_uncount(r);                /* counted, then never parked (run_finish not reached) */
    held_live_del(r);
    run_hb_stop(r);
    tr_close(r, 0);
    coai_reply_free(&r->reply);
    coai_msg_free(&r->up.msg);
    coai_frame_decoder_free(&r->up.frames);
    coai_buf_free(&r->up.il_frame);
    coai_buf_free(&r->up.il_rest);
    coai_buf_free(&r->up.il_cur);
    coai_buf_free(&r->up.run_msg);
    coai_buf_free(&r->held.leftover);
    coai_buf_free(&r->held.backlog);
    coai_chat_request_free(&r->in.req);
    coai_responses_request_free(&r->in.rr);
    if (r->held.wake[0] >= 0) close(r->held.wake[0]);
    if (r->held.wake[1] >= 0) close(r->held.wake[1]);
    if (r->mu_init) {
        pthread_cond_destroy(&r->hb.cv);
        pthread_mutex_destroy(&r->hb.mu);
        pthread_mutex_destroy(&r->up.send_mu);
    }
    free(r);
}

/* ---- run watchdog (issue 24 item 7) ----
 * While a response waits for Cursor, its transport's deadline is the earliest of: the last inbound
 * frame + CURSOR_OAI_SILENCE_TIMEOUT, and the last frame that was neither a heartbeat nor a
 * checkpoint + CURSOR_OAI_HEARTBEAT_TIMEOUT (or CURSOR_OAI_IDLE_TIMEOUT when shorter). A held
 * run's follow-up starts the clock again (run_watch_start) and its hollow check comes first. */
static void run_deadline(struct run *r)
{
    int64_t hb = (int64_t)conf.hb_only_s * 1000, d;
    if (r->up.idle_ms < hb) hb = r->up.idle_ms;
    d = r->up.last_frame + (int64_t)conf.silence_s * 1000;
    if (r->up.last_progress + hb < d) d = r->up.last_progress + hb;
    if (r->held.hollow_until && d < r->held.hollow_until + 2000)
        d = r->held.hollow_until + 2000;                /* the hollow check comes first */
    *tr_deadline(r) = d;
}

static void run_watch_start(struct run *r)
{
    r->up.last_frame = r->up.last_progress = mono_ms();
    run_deadline(r);
}

/* The watchdog fired: the error that says which bound, fed to the reply. */
static int run_watch_fail(struct run *r)
{
    coai_error e;
    int64_t now = mono_ms();
    if (now - r->up.last_frame >= (int64_t)conf.silence_s * 1000)
        coai_error_set(&e, 504, "server_error", "upstream_timeout", NULL,
                       "Cursor sent nothing for %lld s, not even a heartbeat "
                       "(CURSOR_OAI_SILENCE_TIMEOUT is %d s): the connection to Cursor is "
                       "stuck; try again", (long long)((now - r->up.last_frame) / 1000),
                       conf.silence_s);
    else if ((int64_t)conf.hb_only_s * 1000 <= r->up.idle_ms)
        coai_error_set(&e, 504, "server_error", "upstream_timeout", NULL,
                       "Cursor sent nothing but heartbeats and checkpoints for %lld s "
                       "(CURSOR_OAI_HEARTBEAT_TIMEOUT is %d s): the turn is stuck on Cursor's "
                       "side; try again", (long long)((now - r->up.last_progress) / 1000),
                       conf.hb_only_s);
    else
        return coai_reply_fail_timeout(&r->reply);      /* CURSOR_OAI_IDLE_TIMEOUT */
    srv_log(LOG_WARN, "run %s: %s", r->up.request_id, e.message);
    return coai_reply_feed_error(&r->reply, &e);
}
static pthread_mutex_t run_head_lock = PTHREAD_MUTEX_INITIALIZER;  /* guards run_head_names */

/* The other profile may still be tried for this request: none forced, not tried yet. */
static int run_may_switch(struct run *r)
{
    return conf.profile_forced < 0 && !r->out.cancelled && !(r->fb.tries & TRIED_PROFILE)
           && r->up.tr == TR_HTTP1;
}

/* ---- Transports (issue 23): how a run reaches Cursor ------------------------------------
 * The run engine (run_stream, the holder, heartbeats, tool results, fallbacks) talks to the
 * upstream run through these calls only, whatever carries it:
 *
 *   tr_open(r, fresh)      start: the run request goes out, the response head comes back
 *   tr_send(r, msg, n,..)  one AgentClientMessage to the run (tool results, KV and query
 *                          replies, heartbeats; serialised by r->up.send_mu)
 *   tr_body(r, &p)         the next bytes of Cursor's messages (Connect / gRPC-web frames)
 *   tr_readable(r, ms), tr_buffered(r), tr_notify(r, fd)   would tr_body answer without
 *                          waiting; a descriptor the holder polls for it
 *   tr_watch(r, fd, tick)  the client socket and the tick a wait watches; tr_deadline(r)
 *   tr_close(r, clean)     end our side (clean: the body was read to its end)
 *   tr_pick(r)             the transport of a new run and its host; tr_may_fall_back(r),
 *                          tr_fall_back(r): HTTP/1.1 after HTTP/2 failed before an answer;
 *                          tr_answered(r): the first message came, what carried it works
 *   tr_io_error, tr_read_error, tr_why, tr_body_done, tr_is_open   how a read ended
 *
 * TR_HTTP1: RunSSE (one long response) + one BidiAppend request per message, on the
 *           pooled HTTP/1.1 connections (run_start, run_append).
 * TR_H2:    one agent.v1.AgentService/Run stream, Connect bidi: the messages are the
 *           request body, Cursor's the response, on a shared HTTP/2 connection
 *           (h2_run_start, h2_run_send).
 * Which one a run uses: tr_choose() (CURSOR_OAI_TRANSPORT, else HTTP/2 unless it failed
 * lately: transport_state.h1_until). Nothing outside these calls asks which transport a run
 * has, except to name it (c->transport, metrics, the HTTP/1.1-only profile switch:
 * run_may_switch). */

/* After an HTTP/2 failure, HTTP/1.1 for this long (CURSOR_OAI_H2_REPROBE seconds), then
 * HTTP/2 again. 10 minutes: what fails HTTP/2 (a proxy or middlebox without it, an
 * h2-less host) rarely changes within minutes, and each failed try costs a run one more
 * connection attempt before its first byte; a server that only had a bad moment (GOAWAY,
 * a reset at the start) gets HTTP/2 back within the same 10 minutes, as the breaker of held
 * runs does (HELD_BREAKER_MS). */
#define TR_REPROBE_MS (10 * 60 * 1000)
#define PATH_RUN "/agent.v1.AgentService/Run"

static struct tr_state {
    pthread_mutex_t lock;
    int forced;                     /* CURSOR_OAI_TRANSPORT: TR_*, or -1 (choose) */
    int reprobe_ms;                 /* CURSOR_OAI_H2_REPROBE */
    int64_t h1_until;               /* mono ms: HTTP/2 failed before a first byte; until then
                                     * runs use HTTP/1.1 (0: HTTP/2) */
    char why[200];                  /* that failure */
    unsigned long fallbacks;
} transport_state = { .lock = PTHREAD_MUTEX_INITIALIZER, .forced = -1,
                      .reprobe_ms = TR_REPROBE_MS };

/* What GetServerConfig's http2_config asks of runs (coai_http2_config_transport: 1 HTTP/1.1,
 * 2 HTTP/2 only, 0 HTTP/2 with the fallback); 0 while not known. */
static int tr_h2cfg_wants(void)
{
    return coai_http2_config_transport(__atomic_load_n(&srv_h2cfg, __ATOMIC_RELAXED));
}

/* The transport for a new run: CURSOR_OAI_TRANSPORT, else GetServerConfig's http2_config
 * (as Cursor's SDK obeys it), else HTTP/2 unless it failed lately. */
static int tr_choose(void)
{
    int t, cfg = tr_h2cfg_wants();
    pthread_mutex_lock(&transport_state.lock);
    t = transport_state.forced >= 0 ? transport_state.forced
      : cfg == 1 ? TR_HTTP1 : cfg == 2 ? TR_H2
      : transport_state.h1_until && mono_ms() < transport_state.h1_until ? TR_HTTP1 : TR_H2;
    pthread_mutex_unlock(&transport_state.lock);
    return t;
}

/* Which setting decided the transport of new runs, in words: "(CURSOR_OAI_TRANSPORT)",
 * "(server config http2_config=NAME)" or "(default)"; with the transport itself before it
 * (`doctor`). */
static void tr_decision(char *out, size_t cap)
{
    int cfg = __atomic_load_n(&srv_h2cfg, __ATOMIC_RELAXED);
    int w = coai_http2_config_transport(cfg);
    if (transport_state.forced >= 0)
        snprintf(out, cap, "%s (CURSOR_OAI_TRANSPORT)", transport_state.forced == TR_H2
                 ? "HTTP/2 Run, no fallback" : "HTTP/1.1 RunSSE + BidiAppend");
    else if (w)
        snprintf(out, cap, "%s (server config http2_config=%s)", w == 1
                 ? "HTTP/1.1 RunSSE + BidiAppend" : "HTTP/2 Run, no fallback",
                 coai_http2_config_name(cfg));
    else
        snprintf(out, cap, "HTTP/2 Run with the HTTP/1.1 fallback (default%s)",
                 cfg == 0 ? ": server config http2_config=UNSPECIFIED"
                 : conf.agent_forced.host[0] ? "; GetServerConfig is not asked with "
                   "CURSOR_OAI_AGENT_URL" : "");
}

/* What new runs use now, in words (the status page): HTTP/2 with its fallback, HTTP/1.1
 * while HTTP/2 is out after a failure (why, and for how long), or the forced one. */
static void tr_describe(char *out, size_t cap)
{
    int64_t left;
    int cfg = __atomic_load_n(&srv_h2cfg, __ATOMIC_RELAXED);
    pthread_mutex_lock(&transport_state.lock);
    left = transport_state.h1_until ? transport_state.h1_until - mono_ms() : 0;
    if (transport_state.forced == TR_H2)
        snprintf(out, cap, "HTTP/2 (CURSOR_OAI_TRANSPORT=h2, no fallback)");
    else if (transport_state.forced == TR_HTTP1)
        snprintf(out, cap, "HTTP/1.1: RunSSE + BidiAppend (CURSOR_OAI_TRANSPORT=http1)");
    else if (coai_http2_config_transport(cfg) == 1)
        snprintf(out, cap, "HTTP/1.1: RunSSE + BidiAppend (server config http2_config=%s)",
                 coai_http2_config_name(cfg));
    else if (coai_http2_config_transport(cfg) == 2)
        snprintf(out, cap, "HTTP/2 (server config http2_config=%s, no fallback)",
                 coai_http2_config_name(cfg));
    else if (left > 0)
        snprintf(out, cap, "HTTP/1.1: RunSSE + BidiAppend for %lld s more, then HTTP/2 again "
                 "(HTTP/2 failed: %s)", (long long)(left + 999) / 1000, transport_state.why);
    else
        snprintf(out, cap, "HTTP/2 (HTTP/1.1 as the fallback)");
    pthread_mutex_unlock(&transport_state.lock);
}

/* HTTP/2 failed before anything reached a client: HTTP/1.1 for TR_REPROBE_MS. */
static void tr_h2_failed(const char *why)
{
    pthread_mutex_lock(&transport_state.lock);
    transport_state.h1_until = mono_ms() + transport_state.reprobe_ms;
    transport_state.fallbacks++;
    copy_str(transport_state.why, sizeof transport_state.why, why, strlen(why));
    pthread_mutex_unlock(&transport_state.lock);
    srv_log(LOG_WARN, "HTTP/2 to Cursor failed (%s): runs use HTTP/1.1 (RunSSE + BidiAppend) "
            "for the next %d s, then HTTP/2 is tried again", why,
            transport_state.reprobe_ms / 1000);
}

/* An HTTP/2 run answered: HTTP/2 works (again). */
static void tr_h2_worked(void)
{
    int was;
    pthread_mutex_lock(&transport_state.lock);
    was = transport_state.h1_until != 0;
    transport_state.h1_until = 0;
    pthread_mutex_unlock(&transport_state.lock);
    if (was) srv_log(LOG_INFO, "HTTP/2 to Cursor works again");
}

/* The transport of a new run (tr_choose) and its host. Unless CURSOR_OAI_TRANSPORT decides,
 * GetServerConfig is asked first (agent_h2_get, cached): its http2_config may decide. */
static void tr_pick(struct run *r)
{
    int asked = transport_state.forced < 0;
    if (asked) agent_h2_get(&r->up.host, NULL, 0);
    r->up.tr = tr_choose();
    if (r->up.tr == TR_H2) { if (!asked) agent_h2_get(&r->up.host, NULL, 0); }
    else run_host_get(&r->up.host, NULL, 0);
}

/* HTTP/1.1 may still be tried for this request: an HTTP/2 run, the transport not forced
 * (CURSOR_OAI_TRANSPORT, or GetServerConfig's http2_config FORCE_*_ENABLED), no fallback to
 * HTTP/1.1 yet. */
static int tr_may_fall_back(const struct run *r)
{
    return r->up.tr == TR_H2 && transport_state.forced < 0 && tr_h2cfg_wants() != 2
           && !(r->fb.tries & TRIED_HTTP1);
}

/* HTTP/2 failed before Cursor answered: the same request over HTTP/1.1, and HTTP/1.1 for
 * the next runs too (tr_h2_failed). */
static void tr_fall_back(struct run *r)
{
    r->fb.tries |= TRIED_HTTP1;
    tr_h2_failed(r->err.message);
    r->up.tr = TR_HTTP1;
    run_host_get(&r->up.host, NULL, 0);
}

/* The run's first message came: what carried it works (HTTP/1.1: its profile is the one for
 * the next runs; HTTP/2: tr_h2_worked). */
static void tr_answered(struct run *r)
{
    int changed;
    pthread_mutex_lock(&hosts.lock);
    changed = hosts.profile != r->up.profile;
    if (r->up.tr == TR_HTTP1)
        hosts.profile = r->up.profile;      /* the profile that worked, for the next runs */
    pthread_mutex_unlock(&hosts.lock);
    if (r->up.tr == TR_H2) tr_h2_worked();
    if (changed)
        srv_log(LOG_INFO, "transport profile %s works; using it from now on",
                PROFILE_NAME[r->up.profile]);
}

static int tr_is_open(const struct run *r)
{
    return r->up.tr == TR_H2 ? r->up.h2 != NULL : r->up.sse != NULL;
}

static int64_t *tr_deadline(struct run *r)
{
    return r->up.h2 ? &r->up.h2->deadline : &r->up.sse->deadline;
}

static int tr_why(const struct run *r)
{
    return r->up.h2 ? r->up.h2->why : r->up.sse->why;
}

/* What a wait on the run watches: the client socket (-1: none) and the tick. */
static void tr_watch(struct run *r, int client_fd, int (*tick)(void *))
{
    if (r->up.h2) {
        r->up.h2->client_fd = client_fd;
        r->up.h2->client_events = POLLIN;
        r->up.h2->tick = tick;
        r->up.h2->tick_ctx = tick ? r : NULL;
    } else {
        r->up.sse->client_fd = client_fd;
        r->up.sse->client_events = POLLIN;
        r->up.sse->tick = tick;
        r->up.sse->tick_ctx = tick ? r : NULL;
        r->up.sse->io_timeout_ms = 0;
    }
}

static long tr_body(struct run *r, const unsigned char **p)
{
    return r->up.h2 ? h2s_body(r->up.h2, p) : up_body(r->up.sse, p);
}

static int tr_readable(struct run *r, int ms)
{
    return r->up.h2 ? h2s_readable(r->up.h2, ms) : up_readable(r->up.sse, ms);
}

static int tr_buffered(struct run *r)
{
    return r->up.h2 ? 0 : up_buffered(r->up.sse);
}

/* A descriptor that becomes readable when tr_body may have something (the holder polls
 * it): HTTP/1.1's socket; over HTTP/2, where a stream has no descriptor of its own, pipe
 * (the holder's, write end wfd) gets a byte then (wfd -1: no more). -1 when pipe is the
 * one to poll. */
static int tr_notify(struct run *r, int wfd)
{
    if (!r->up.h2) return r->up.sse->fd;
    h2s_notify(r->up.h2, wfd);
    return -1;
}

/* The read failure of the run as an error. */
static void tr_io_error(struct run *r, coai_error *e, const char *stage)
{
    char why[200];
    if (!r->up.h2) {
        up_io_error(r->up.sse, e, stage);
        return;
    }
    h2s_failure(r->up.h2, why, sizeof why);
    if (h2s_protocol_fault(r->up.h2))    /* not unreachable: it answered, breaking HTTP/2 */
        up_err(e, 502, "upstream_protocol_error", "upstream broke HTTP/2 while %s: %s", stage,
               why);
    else if (r->up.h2->got_bytes)   /* cut in the middle of the answer, as an EOF on HTTP/1.1 */
        up_err(e, 502, "upstream_truncated", "upstream ended the stream while %s: %s", stage,
               why);
    else
        up_err(e, 502, "upstream_unreachable", "upstream failed while %s: %s", stage, why);
}

/* A read of the run's answer failed: the error, naming the stream. */
static void tr_read_error(struct run *r, coai_error *e)
{
    tr_io_error(r, e, r->up.tr == TR_H2 ? "reading the Run stream" : "reading the RunSSE stream");
}

/* The read side ended cleanly and completely. */
static int tr_body_done(const struct run *r)
{
    return r->up.h2 ? r->up.h2->body_done : r->up.sse->body_done;
}

/* End the upstream side of the run. clean: its response was read to the end (an HTTP/1.1
 * connection may go back to the pool). */
static void tr_close(struct run *r, int clean)
{
    r->up.il_state = RUN_IL_NONE;   /* what the I/O thread left was this attempt's */
    if (r->up.h2) {
        h2s_close(r->up.h2);
        r->up.h2 = NULL;
    }
    if (r->up.sse) {
        if (clean && r->up.sse->body_done) up_release(r->up.sse);
        else up_free(r->up.sse);
        r->up.sse = NULL;
    }
}

static int tr_send(struct run *r, const unsigned char *msg, size_t n, int client_fd,
                   int (*tick)(void *), void *tick_ctx, coai_error *err, int *cancelled)
{
    if (r->up.tr == TR_H2) return h2_run_send(r, msg, n, client_fd, tick, tick_ctx, err, cancelled);
    return run_append(r, msg, n, client_fd, tick, tick_ctx, err, cancelled);
}

/* Start the attempt on its transport: the token, a new request id, the attempt's counters
 * again and the client checked once more, then run_start (HTTP/1.1) or h2_run_start
 * (HTTP/2). 0 ok, 1 retry on a fresh connection, -1 r->err filled. */
static int tr_open(struct run *r, int fresh)
{
    /* on the heap, as h2_run_start's header: stack pages a run's thread touches once stay
     * resident while it streams (10,000 held streams: 10,000 stacks) */
    char *token = malloc(SRV_TOKEN_MAX);
    size_t tl;
    int rc = -1, h2 = r->up.tr == TR_H2;
    if (h2) r->fb.tr_fail = 0;
    if (!token) {
        coai_error_set(&r->err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    tl = cred_token(token, SRV_TOKEN_MAX, &r->up.auth_gen);
    if (tl == 0) {
        cred_missing(&r->err);
        goto done;
    }
    if (uuid_new(r->up.request_id) < 0) {
        coai_error_set(&r->err, 500, "server_error", NULL, NULL, "no randomness available");
        goto done;
    }
    memcpy(r->c->run_id, r->up.request_id, sizeof r->c->run_id);
    /* x-original-request-id: the first run's id, on both transports */
    if (!r->up.orig_id[0]) memcpy(r->up.orig_id, r->up.request_id, sizeof r->up.orig_id);
    r->up.seqno = 0;
    r->fb.http_status = 0;
    if (!h2) r->fb.h1_refused[0] = 0;
    r->up.data_frames = 0;
    r->up.t_start = mono_ms();
    /* Checked right before the run starts: a client that left while this request waited
     * (for the model list, a renewal, a slot) must not cost a run and its prompt. */
    if (r->c->dead || fd_client_gone(r->c->fd)) {
        up_err(&r->err, 499, "client_closed", "client went away before the run started");
        r->out.cancelled = 1;
        goto done;
    }
    rc = h2 ? h2_run_start(r, fresh, token, tl) : run_start(r, fresh, token, tl);
done:
    memset(token, 0, SRV_TOKEN_MAX);
    free(token);
    return rc;
}

/* The run's host refused HTTP/1.1 at the connection level (r->fb.h1_refused says how; nothing
 * reached the client): remember it as HTTP/2-only, and start over on the base URL
 * (RETRY_HOST), or, when the base URL itself refused, fail with an error that says so. */
static void run_h1_refused(struct run *r)
{
    int base = up_same_host(&r->up.host, &conf.base);
    h2only_add(&r->up.host, r->fb.h1_refused);
    if (!base && !(r->fb.tries & TRIED_HOST)) {
        r->fb.retry = RETRY_HOST;
        return;
    }
    coai_error_set(&r->err, 502, "upstream_error", "upstream_http2_only", NULL,
                   "https://%s%s serves HTTP/2 only: it refused cursor-oai's HTTP/1.1 request at "
                   "the connection level (%s). %s", r->up.host.authority, r->up.host.prefix,
                   r->fb.h1_refused, base ? "Set CURSOR_API_URL to a host that serves HTTP/1.1 "
                   "(the default, https://api2.cursor.sh, does)."
                   : "Unset CURSOR_OAI_AGENT_URL: runs then go to CURSOR_API_URL.");
}

/* The region failure as a 502 naming it. An HTTP/1.1 run's host is the base URL or
 * CURSOR_OAI_AGENT_URL, never GetServerConfig's, so there is no other host to try. */
static void run_region_error(struct run *r, const char *said, coai_error *e)
{
    coai_error_set(e, 502, "upstream_error", "upstream_wrong_region", NULL,
                   "Cursor's agent host https://%s%s accepted the run and closed it at once "
                   "without an answer%s%s%s: this host does not serve your account's region. "
                   "CURSOR_OAI_AGENT_URL forces a host; unset, runs go to CURSOR_API_URL "
                   "(see `cursor-oai doctor`).", r->up.host.authority,
                   r->up.host.prefix, said && said[0] ? " (\"" : "", said ? said : "",
                   said && said[0] ? "\")" : "");
}

/* Keep a frame for the next response of a held run: flags, u32 length, payload. */
static int run_backlog_add(struct run *r, const coai_frame *f)
{
    unsigned char h[5];
    if (r->held.backlog.len + f->len + 5 > HELD_BACKLOG_MAX) return -1;
    h[0] = (unsigned char)f->flags;
    h[1] = (unsigned char)(f->len >> 24); h[2] = (unsigned char)(f->len >> 16);
    h[3] = (unsigned char)(f->len >> 8); h[4] = (unsigned char)f->len;
    coai_buf_append(&r->held.backlog, h, 5);
    coai_buf_append(&r->held.backlog, f->data, f->len);
    return r->held.backlog.err ? -1 : 0;
}

/* Cursor lost the conversation ("Conversation data missing", "blob missing"): before anything
 * reached the client, a fresh run that is not a checkpoint resume (that one falls back to a
 * replay of its own) starts over once as a new conversation with the whole history
 * (r->fb.retry = RETRY_CONV, 1). 0: let the error through. */
static int run_conv_lost(struct run *r, const coai_status *st)
{
    coai_error e;
    if (coai_reply_started(&r->reply)) return 0;
    coai_error_from_status(st, &e);
    if (e.code && strcmp(e.code, "conversation_state_required") == 0
        && !(r->fb.tries & TRIED_STATE_AGENT)) {
        r->err = e;                     /* as the SDK: once more with mode AGENT */
        r->fb.retry = RETRY_STATE;
        return 1;
    }
    if (r->in.resumed || (r->fb.tries & TRIED_CONV_RESET)) return 0;
    if (!e.code || strcmp(e.code, "conversation_lost") != 0) return 0;
    r->err = e;
    r->fb.retry = RETRY_CONV;
    return 1;
}

/* A new conversation id for the run request in run_msg: the header encodes it again with the
 * new AgentRunRequest.conversation_id (its inputs, the prompt above all, are gone by now).
 * 0 ok, -1 when that fails (run_msg is kept as it was). */
static int run_new_conversation(struct run *r)
{
    coai_buf nb = { 0 };
    char nid[37];
    if (uuid_new(nid) < 0
        || coai_encode_run_request_conversation(&nb, r->up.run_msg.data, r->up.run_msg.len,
                                                coai_str_c(nid)) < 0) {
        coai_buf_free(&nb);
        return -1;
    }
    coai_buf_free(&r->up.run_msg);
    r->up.run_msg = nb;
    memcpy(r->in.conv_id, nid, 37);
    return 0;
}

/* A message frame arrived (counted, noted, captured), before it is decoded. */
static void run_frame_seen(struct run *r, const coai_frame *f)
{
    if (r->up.data_frames++ == 0) tr_answered(r);
    if (!r->held.replaying) wn_msg(f->data, f->len);
    if (cap_on() && !r->held.replaying) cap_frame(f);
}

/* The message decoded from f (r->up.msg) goes to the reply. */
static int run_message(struct run *r, const coai_frame *f)
{
    int rc;
    size_t pending;
    if (r->up.msg.kind == COAI_MSG_EXEC && r->up.tools_hdr[0].len && !r->held.replaying
        && coai_exec_is_native_tool(r->up.msg.exec.kind))
        th_note_native(r->up.msg.exec.kind, r->up.request_id);
    r->up.last_frame = mono_ms();
    if (r->up.msg.kind != COAI_MSG_HEARTBEAT && r->up.msg.kind != COAI_MSG_NONE
        && r->up.msg.kind != COAI_MSG_CHECKPOINT)
        r->up.last_progress = r->up.last_frame;         /* progress */
    run_deadline(r);
    /* A non-streaming answer is held in memory until its end: cap it (streaming sends each
     * piece on and keeps nothing). */
    if (!r->out.stream && r->up.msg.kind != COAI_MSG_HEARTBEAT) {
        r->out.answer_bytes += f->len;
        if (r->out.answer_bytes > conf.reply_max) {
            coai_error e;
            coai_error_set(&e, 502, "upstream_error", "response_too_large", NULL,
                           "the answer is larger than %zu MiB, the limit for non-streaming "
                           "responses (CURSOR_OAI_MAX_RESPONSE_MB); send \"stream\": true to "
                           "receive it", conf.reply_max >> 20);
            return coai_reply_feed_error(&r->reply, &e);
        }
    }
    if (r->up.msg.kind == COAI_MSG_TEXT || r->up.msg.kind == COAI_MSG_THINKING)
        srv_log(LOG_DEBUG, "run %s: %s %.*s", r->up.request_id,
                r->up.msg.kind == COAI_MSG_TEXT ? "text" : "thinking",
                (int)(r->up.msg.text.len > 200 ? 200 : r->up.msg.text.len), r->up.msg.text.ptr);
    pending = coai_reply_tools_pending(&r->reply);
    rc = coai_reply_feed_msg(&r->reply, &r->up.msg);
    if (pending && rc == COAI_DONE
        && (r->up.msg.kind == COAI_MSG_TEXT || r->up.msg.kind == COAI_MSG_THINKING
            || r->up.msg.kind == COAI_MSG_TURN_ENDED)) {
        /* It ended the tool batch without being consumed: it belongs to the next response
         * of the held run. */
        if (run_backlog_add(r, f) < 0) r->held.dead = 1;
    }
    if (r->held.hollow_until && (coai_reply_started(&r->reply)
                                 || coai_reply_tools_pending(&r->reply)
                                 || coai_reply_done(&r->reply))) {
        r->held.hollow_until = 0;               /* visible progress: not hollow */
        run_deadline(r);                        /* the watchdog alone from now on */
    }
    return rc;
}

/* Feed one envelope to the reply. Returns the coai_reply_feed_* result. */
static int run_frame(struct run *r, const coai_frame *f)
{
    coai_status st;
    int rc;
    if (f->flags == COAI_FRAME_TRAILER || f->flags == COAI_FRAME_END_STREAM) {
        if (f->flags == COAI_FRAME_TRAILER) coai_trailer_parse(f->data, f->len, &st);
        else coai_end_stream_parse(f->data, f->len, &st);
        if (!r->held.replaying) wn_status(&st);
        if (cap_on() && !r->held.replaying) cap_frame(f);
        if (st.code == 16) cred_mark_rejected(r->up.auth_gen);  /* UNAUTHENTICATED */
        srv_log(LOG_DEBUG, "run %s: %s status %d", r->up.request_id,
                f->flags == COAI_FRAME_TRAILER ? "trailer" : "end-stream", st.code);
        if (coai_reply_tools_pending(&r->reply)) {
            /* The run ended right after asking for tools: answer the client with the tool
             * calls; the run cannot be held (run_stream sees the end). */
            return coai_reply_end_tools(&r->reply);
        }
        if (st.code == 0 && st.error == 0 && r->up.data_frames == 0) {
            /* HTTP 200, then an immediate clean end without a single message: what the
             * wrong regional agent host answers (cursor-2026-clients.md 6). */
            coai_error e;
            run_region_error(r, st.message, &e);
            if (r->fb.retry) return COAI_DONE;
            return coai_reply_feed_error(&r->reply, &e);
        }
        if (st.code == 0 && r->held.hollow_until && !coai_reply_started(&r->reply)
            && !coai_reply_tools_pending(&r->reply)) {
            /* A continued run that Cursor ends cleanly right after the tool results, with
             * no text, no tool call and no turn end: not an answer (an empty stop reads as
             * "done" to an agent). Nothing has reached the client: fall back, as a hollow
             * run does (issue 22 item 3). */
            r->held.hollow_hit = 1;
            r->held.ended_empty = 1;
            return COAI_DONE;
        }
        if (st.code != 0 && !coai_reply_started(&r->reply) && run_may_switch(r)) {
            coai_error e;
            coai_error_from_status(&st, &e);
            if (profile_wrong(0, &e)) {
                r->err = e;
                r->fb.retry = RETRY_PROFILE;
                return COAI_DONE;
            }
        }
        if (st.code != 0 && run_conv_lost(r, &st)) return COAI_DONE;
        return coai_reply_feed_status(&r->reply, &st);
    }
    run_frame_seen(r, f);
    rc = coai_msg_decode(&r->up.msg, f->data, f->len);
    if (rc < 0) {
        coai_error e;
        coai_error_set(&e, 502, "upstream_error", "upstream_protocol_error", NULL,
                       "undecodable upstream message (%s)", coai_result_str(rc));
        return coai_reply_feed_error(&r->reply, &e);
    }
    return run_message(r, f);
}

/* ---- HTTP/2: deltas written to the client by the connection's I/O thread ----
 * While a streaming answer waits for Cursor on a shared HTTP/2 connection, its thread
 * sleeps (h2s_body_il) and the connection's I/O thread, which read the DATA, does for a
 * text or thinking delta what the run's thread would do (run_il_consume: decode, the
 * reply, one chunk to the client without blocking). Anything else (a tool call, a KV
 * request, the end, a client whose socket is full) goes back to the run's thread with the
 * frame it stopped at (r->up.il_*, run_il_resume). One thread per delta instead of two: a
 * stream's thread is woken when there is something only it can do. */

/* The answer is one whose deltas the I/O thread may write: streaming, its 200 head out,
 * nothing pending or left over. (out.hold_errors, set for a held run's follow-up, holds back
 * only an error before the first byte: with the 200 head out there is none to hold.) */
static int run_il_ok(const struct run *r)
{
    return r->c && r->c->streaming && !r->c->dead && !r->c->wpend.len && r->out.stream
           && !r->out.cancelled && !r->out.sent_all
           && !r->held.replaying && !r->held.hollow_until && r->up.data_frames > 0
           && !r->up.il_state && !coai_reply_tools_pending(&r->reply)
           && !coai_reply_done(&r->reply) && coai_reply_status(&r->reply) == 200;
}

/* run_flush on the I/O thread: the reply's new events as one chunk (stream_piece), sent
 * without blocking; what the socket does not take waits in c->wpend for the run's thread
 * (conn_write sends it first). 0 all out, 1 the run's thread must send the rest, -1 the
 * client is gone. */
static int run_flush_nb(struct run *r)
{
    struct conn *c = r->c;
    coai_buf *o = &r->reply.out;
    const unsigned char *b;
    size_t n;
    ssize_t w;
    if (c->dead) return -1;
    if (!o->len) return 0;
    if (coai_reply_done(&r->reply)) return 1;   /* run_flush's: stored, counted first */
    if (stream_piece(c, o->data, o->len) < 0) return -1;
    coai_buf_reset(o);
    r->out.last_write = mono_ms();
    b = c->wbuf.data;
    n = c->wbuf.len;
    w = fd_send_some(c->fd, b, n);
    if (w < 0) {
        c->dead = 1;
        return -1;
    }
    b += w;
    n -= (size_t)w;
    if (!n) return 0;
    coai_buf_append(&c->wpend, b, n);
    if (c->wpend.err) { c->dead = 1; return -1; }
    return 1;
}

/* Keep for the run's thread: frame f (NULL: none; state says what, rc its code) and the n
 * bytes at p after it. 1 (wake the run's thread). */
static int run_il_leave(struct run *r, int state, int rc, const coai_frame *f,
                        const unsigned char *p, size_t n)
{
    coai_buf_reset(&r->up.il_frame);
    coai_buf_reset(&r->up.il_rest);
    if (f) {
        r->up.il_flags = f->flags;
        coai_buf_append(&r->up.il_frame, f->data, f->len);
    }
    coai_buf_append(&r->up.il_rest, p, n);
    if (r->up.il_frame.err || r->up.il_rest.err) {
        r->up.il_state = RUN_IL_RC;
        r->up.il_rc = COAI_ERR_NOMEM;
    } else {
        r->up.il_state = state;
        r->up.il_rc = rc;
    }
    return 1;
}

/* The I/O thread's consumer of the Run stream (h2s_body_il): n bytes at p, while the run's
 * thread sleeps. 0: all taken and written, the run's thread sleeps on; 1: wake it. */
static int run_il_consume(void *ctx, const unsigned char *p, size_t n)
{
    struct run *r = ctx;
    int w;
    if (!run_il_ok(r)) return run_il_leave(r, RUN_IL_BYTES, 0, NULL, p, n);
    while (n > 0) {
        size_t used = 0;
        coai_frame f;
        int fr = coai_frame_feed(&r->up.frames, p, n, &used, &f), rc;
        p += used;
        n -= used;
        if (fr == COAI_MORE) break;
        if (fr < 0) {
            run_il_leave(r, RUN_IL_FRAME_ERR, fr, NULL, p, n);
            break;
        }
        if (f.flags != COAI_FRAME_DATA || coai_msg_decode(&r->up.msg, f.data, f.len) < 0
            || (r->up.msg.kind != COAI_MSG_TEXT && r->up.msg.kind != COAI_MSG_THINKING)) {
            run_il_leave(r, RUN_IL_FRAME, 0, &f, p, n);   /* decoded again there */
            break;
        }
        run_frame_seen(r, &f);
        r->out.in_feed = 1;
        rc = run_message(r, &f);
        r->out.in_feed = 0;
        if (rc != COAI_OK) {
            run_il_leave(r, RUN_IL_RC, rc, NULL, p, n);
            break;
        }
    }
    /* Handing back: the run's thread writes it all (run_flush: an answer that ended is
     * stored and counted before its last byte goes out) */
    if (r->up.il_state != RUN_IL_NONE) return 1;
    w = run_flush_nb(r);
    return w != 0;
}

/* The run's thread takes back what run_il_consume left: the frame it stopped at is fed as
 * run_stream would have (or the framing error, or the reply's answer); *p, *n the bytes
 * after it (valid until the next call). The reply's result. */
static int run_il_resume(struct run *r, const unsigned char **p, long *n)
{
    coai_buf t = r->up.il_cur;
    int rc = COAI_OK, st = r->up.il_state;
    r->up.il_cur = r->up.il_rest;
    r->up.il_rest = t;
    coai_buf_reset(&r->up.il_rest);
    r->up.il_state = RUN_IL_NONE;
    *p = r->up.il_cur.data;
    *n = (long)r->up.il_cur.len;
    r->out.in_feed = 1;
    if (st == RUN_IL_FRAME) {
        coai_frame f;
        f.flags = (uint8_t)r->up.il_flags;
        f.data = r->up.il_frame.len ? r->up.il_frame.data : (const unsigned char *)"";
        f.len = r->up.il_frame.len;
        rc = run_frame(r, &f);
    } else if (st == RUN_IL_FRAME_ERR) {
        coai_error e;
        coai_error_set(&e, 502, "upstream_error", "upstream_protocol_error", NULL,
                       "bad upstream framing: %s", coai_result_str(r->up.il_rc));
        rc = coai_reply_feed_error(&r->reply, &e);
    } else if (st == RUN_IL_RC) {
        rc = r->up.il_rc;
    }
    r->out.in_feed = 0;
    return rc;
}

/* Read RunSSE frames until the reply is done, the upstream ends or fails, or the client
 * leaves. Tool calls (batch_tools) are collected until held_runs.window_ms pass without another
 * frame. Bytes read past the end of a tool-call response are kept in r->held.leftover. */
static void run_stream(struct run *r)
{
    int rc = COAI_OK;
    int64_t next_check = mono_ms();     /* first check at once: nothing goes to a client
                                         * that left while the run was starting */
    while (rc == COAI_OK) {
        const unsigned char *p;
        long n;
        int resumed;
        /* The idle deadline, the client and the tick are checked at least once a second even
         * while the upstream floods frames that produce no output (up_wait, which checks them
         * too, only runs when a read would block). */
        if (mono_ms() >= next_check) {
            int64_t now = mono_ms();
            next_check = now + 1000;
            if (fd_client_gone(r->c->fd) || run_tick(r) < 0) {
                if (!r->held.hollow_hit) r->out.cancelled = 1;   /* hollow: the caller falls back */
                return;
            }
            if (now >= *tr_deadline(r)) {
                r->out.in_feed = 1;
                rc = run_watch_fail(r);
                r->out.in_feed = 0;
                break;
            }
        }
        if (coai_reply_tools_pending(&r->reply) && !tr_readable(r, held_runs.window_ms)) {
            rc = coai_reply_end_tools(&r->reply);       /* the quiet window is over */
            break;
        }
        resumed = r->up.il_state != RUN_IL_NONE;
        if (resumed) {
            /* what the HTTP/2 I/O thread left: the frame it stopped at, then the rest */
            rc = run_il_resume(r, &p, &n);
            if (r->out.cancelled) return;
        } else if (r->up.h2 && run_il_ok(r)) {
            n = h2s_body_il(r->up.h2, &p, run_il_consume, r);
            if (n == -2) {                          /* its client, or run_il_resume */
                if (run_flush(r) < 0) { r->out.cancelled = 1; return; }
                continue;
            }
        } else {
            n = tr_body(r, &p);
        }
        if (n <= 0 && !resumed) {
            coai_error e;
            memset(&e, 0, sizeof e);
            r->out.in_feed = 1;
            if (coai_reply_tools_pending(&r->reply)) {
                rc = coai_reply_end_tools(&r->reply);   /* the run is over: no holding */
                r->held.dead = 1;
            } else if (n == 0) {
                rc = coai_frame_finish(&r->up.frames);
                if (rc < 0)
                    up_err(&e, 502, "upstream_truncated",
                           "upstream body ended inside a frame");
                if (rc >= 0 && r->up.data_frames == 0) {
                    /* an empty 200 body: the wrong-region answer without even a trailer */
                    run_region_error(r, NULL, &e);
                    rc = r->fb.retry ? COAI_DONE : coai_reply_feed_error(&r->reply, &e);
                } else {
                    rc = rc < 0 ? coai_reply_feed_error(&r->reply, &e)
                                : coai_reply_feed_eof(&r->reply);
                }
            } else if (tr_why(r) == UPX_CANCELLED) {
                if (!r->held.hollow_hit) r->out.cancelled = 1;
            } else if (tr_why(r) == UPX_TIMEOUT) {
                rc = run_watch_fail(r);
            } else {
                tr_read_error(r, &e);
                if (tr_may_fall_back(r) && r->up.data_frames == 0
                    && !coai_reply_started(&r->reply)) {
                    /* reset or refused before Cursor said anything: HTTP/1.1 instead */
                    r->err = e;
                    r->fb.tr_fail = 1;
                    r->fb.retry = RETRY_TRANSPORT;
                    rc = COAI_DONE;
                } else {
                    rc = coai_reply_feed_error(&r->reply, &e);
                }
            }
            r->out.in_feed = 0;
            break;
        }
        while (n > 0 && rc == COAI_OK) {
            size_t used = 0;
            coai_frame f;
            int fr = coai_frame_feed(&r->up.frames, p, (size_t)n, &used, &f);
            /* (run_il_consume does what this loop does for text and thinking deltas) */
            p += used;
            n -= (long)used;
            if (fr == COAI_MORE) break;
            r->out.in_feed = 1;
            if (fr < 0) {
                coai_error e;
                coai_error_set(&e, 502, "upstream_error", "upstream_protocol_error", NULL,
                               "bad upstream framing: %s", coai_result_str(fr));
                rc = coai_reply_feed_error(&r->reply, &e);
            } else {
                rc = run_frame(r, &f);
            }
            r->out.in_feed = 0;
            if (r->out.cancelled) return;
        }
        if (n > 0 && coai_reply_tool_called(&r->reply)) {
            coai_buf_reset(&r->held.leftover);
            coai_buf_append(&r->held.leftover, p, (size_t)n);   /* for the holder */
        }
        /* What has arrived leaves now, in one write: every delta is still its own SSE
         * event, and nothing waits for upstream input that is not already here (records
         * already read ahead are decoded first, then written together). */
        if (tr_buffered(r))
            continue;
        if (run_flush(r) < 0) { r->out.cancelled = 1; return; }
    }
    if (!r->out.cancelled && run_flush(r) < 0) r->out.cancelled = 1;
}

/* ======================================================================== */
/* Held runs (issue 11): one upstream run for a whole tool loop             */
/* ======================================================================== */
/* A response that ends with tool calls parks its run here instead of closing it: a holder
 * thread keeps reading it (answering KV, queries, request_context and execs no tool
 * matches; anything the client must see waits in the backlog), the heartbeat thread keeps
 * it alive, and the follow-up request whose trailing tool messages answer exactly its
 * pending tool calls takes it over, sends the results as the CLI does and streams what
 * the run says next. Anything that goes wrong falls back to a fresh run. */

/* A frame while held: answered, kept for later, or the end of holding (-1, held.why). */
static int held_frame(struct run *r, const coai_frame *f)
{
    int a;
    if (f->flags == COAI_FRAME_TRAILER || f->flags == COAI_FRAME_END_STREAM) {
        snprintf(r->held.why, sizeof r->held.why, "Cursor ended the run while it was held");
        return -1;
    }
    wn_msg(f->data, f->len);
    if (cap_on()) cap_frame(f);
    if (coai_msg_decode(&r->up.msg, f->data, f->len) < 0) {
        snprintf(r->held.why, sizeof r->held.why, "undecodable message while held");
        return -1;
    }
    if (r->up.msg.kind == COAI_MSG_EXEC && r->up.tools_hdr[0].len
        && coai_exec_is_native_tool(r->up.msg.exec.kind))
        th_note_native(r->up.msg.exec.kind, r->up.request_id);
    a = coai_reply_answer(&r->reply, &r->up.msg);
    if (a < 0) {
        snprintf(r->held.why, sizeof r->held.why, "a reply could not be delivered while held");
        return -1;
    }
    if (a == 0 && run_backlog_add(r, f) < 0) {
        snprintf(r->held.why, sizeof r->held.why, "too much output while held");
        return -1;
    }
    return 0;
}

static int held_bytes(struct run *r, const unsigned char *p, size_t n)
{
    while (n > 0) {
        size_t used = 0;
        coai_frame f;
        int fr = coai_frame_feed(&r->up.frames, p, n, &used, &f);
        p += used;
        n -= used;
        if (fr == COAI_MORE) break;
        if (fr < 0) {
            snprintf(r->held.why, sizeof r->held.why, "bad framing while held");
            return -1;
        }
        if (held_frame(r, &f) < 0) return -1;
    }
    return 0;
}

static void held_unlink_locked(struct run *r)
{
    struct run **pp;
    for (pp = &held_runs.list; *pp; pp = &(*pp)->held.next)
        if (*pp == r) {
            *pp = r->held.next;
            held_runs.n--;
            metric_gauge_add(M_HELD_RUNS, "", -1);
            break;
        }
    r->held.in_table = 0;
    r->held.next = NULL;
}

static void *held_thread(void *arg)
{
    struct run *r = arg;
    int64_t ttl_end = r->held.at + (int64_t)held_runs.ttl_s * 1000;
    char why[160] = "";
    int up_fd = -1;
    if (r->held.leftover.len
        && held_bytes(r, r->held.leftover.data, r->held.leftover.len) < 0)
        goto dead;
    coai_buf_free(&r->held.leftover);
    up_fd = tr_notify(r, r->held.wake[1]);
    for (;;) {
        struct pollfd pf[2];
        int64_t now = mono_ms();
        int pr, stop, np = 0;
        if (up_fd < 0) {                    /* HTTP/2: the stream's wake-ups come in the pipe */
            char junk[64];
            while (read(r->held.wake[0], junk, sizeof junk) > 0) {}
        }
        pthread_mutex_lock(&held_runs.lock);
        stop = r->held.release_req;
        pthread_mutex_unlock(&held_runs.lock);
        if (stop) break;
        if (now >= ttl_end) {
            snprintf(why, sizeof why, "no follow-up within CURSOR_OAI_HELD_RUN_TTL (%d s)",
                     held_runs.ttl_s);
            goto dead;
        }
        if (__atomic_load_n(&r->hb.streak, __ATOMIC_RELAXED) > 2) {
            snprintf(why, sizeof why, "heartbeats to Cursor fail (3 in a row)");
            goto dead;
        }
        if (!tr_readable(r, 0)) {
            if (up_fd >= 0) {
                pf[np].fd = up_fd; pf[np].events = POLLIN; pf[np].revents = 0; np++;
            }
            pf[np].fd = r->held.wake[0]; pf[np].events = POLLIN; pf[np].revents = 0; np++;
            pr = poll(pf, (nfds_t)np, (int)(ttl_end - now > 1000 ? 1000 : ttl_end - now));
            if (pr < 0 && errno != EINTR) { snprintf(why, sizeof why, "poll failed"); goto dead; }
            continue;       /* the top looks again: a claim, the TTL, something to read */
        }
        {
            const unsigned char *p;
            long n;
            *tr_deadline(r) = ttl_end + 1000;
            n = tr_body(r, &p);
            if (n <= 0) {
                snprintf(why, sizeof why, "Cursor closed the held run (%s)",
                         n == 0 ? "end of body" : "connection lost");
                goto dead;
            }
            if (held_bytes(r, p, (size_t)n) < 0) goto dead;
        }
    }
    goto out;
dead:
    r->held.dead = 1;
    if (why[0]) snprintf(r->held.why, sizeof r->held.why, "%s", why);
out:
    if (r->up.h2) h2s_notify(r->up.h2, -1);     /* the pipe may close after the claim */
    pthread_mutex_lock(&held_runs.lock);
    if (r->held.in_table) {
        /* Nobody claimed it: it leaves the table and ends here. */
        held_unlink_locked(r);
        pthread_mutex_unlock(&held_runs.lock);
        if (r->held.release_req) {
            srv_log(LOG_INFO, "held run %s released (more than %d held runs)", r->up.request_id,
                    held_runs.max);
        } else {
            srv_log(LOG_INFO, "held run %s released: %s", r->up.request_id, r->held.why);
            if (strstr(r->held.why, "HELD_RUN_TTL")) {
                pthread_mutex_lock(&held_runs.lock);
                held_runs.expired++;
                pthread_mutex_unlock(&held_runs.lock);
            }
        }
        pthread_detach(pthread_self());
        run_free(r);
        return NULL;
    }
    pthread_mutex_unlock(&held_runs.lock);
    return NULL;           /* claimed: the claimer joins this thread and owns the run */
}

/* Park a run that ended its response with tool calls. 0 parked (the table owns r now),
 * -1 not parked (the caller closes it). */
/* The digest (coai_conversation_digests) of msgs[0..n-1], in place. */
static void conv_digest(const coai_message *msgs, size_t n, unsigned char out[32])
{
    unsigned char d[32];
    size_t i;
    memset(out, 0, 32);
    for (i = 0; i < n; i++) {
        coai_conversation_digest_next(out, &msgs[i], d);
        memcpy(out, d, 32);
    }
}

/* The holder's wake-up pipe, made once per run: 0, -1 no pipe. */
static int held_pipe(struct run *r)
{
    if (r->held.wake[0] >= 0) return 0;
    if (pipe(r->held.wake) < 0) { r->held.wake[0] = r->held.wake[1] = -1; return -1; }
    fcntl(r->held.wake[0], F_SETFL, O_NONBLOCK);
    fcntl(r->held.wake[1], F_SETFL, O_NONBLOCK);
    return 0;
}


/* Whether r's response asks for tools and its run is one to park: the one rule run_finish
 * parks by and held_count counts by. */
static int held_wanted(struct run *r)
{
    return r->c && !r->c->dead && !r->out.cancelled && tr_is_open(r)
        && coai_reply_tool_called(&r->reply) && !r->reply.error.status && held_enabled();
}

/* Whether run_finish will park r, made as sure as can be before the response's last byte
 * goes out: held_park's own conditions checked and what can fail (the wake-up pipe) done
 * here. Left to fail after it: that last write, and starting the holder thread. 0 ready. */
static int held_ready(struct run *r)
{
    if (!held_wanted(r) || r->held.dead || !coai_reply_calls(&r->reply, NULL)
        || (!r->in.req.message_count && !r->in.hist_ok))
        return -1;
    return held_pipe(r);
}

/* run_held is counted before the response's last byte goes out (run_flush), like the
 * run's other metrics, so that a client that reads /metrics the moment it has the tool
 * calls finds the run held; held_park then does not count it again. A run counted here
 * that is not parked after all (the client left during that write, no holder thread) is
 * taken off again by held_uncount. */
static void held_count(struct run *r)
{
    if (r->held.counted || held_ready(r) < 0) return;
    pthread_mutex_lock(&held_runs.lock);
    held_runs.held++;
    pthread_mutex_unlock(&held_runs.lock);
    r->held.counted = 1;
}

static void held_uncount(struct run *r)
{
    if (!r->held.counted) return;
    r->held.counted = 0;
    pthread_mutex_lock(&held_runs.lock);
    held_runs.held--;
    pthread_mutex_unlock(&held_runs.lock);
}

/* A client can send its tool results the moment it has read the response that asked for
 * them, which is a little before that response's run is parked: a follow-up whose handle
 * names a run that still lives waits this long at most for it to park. */
#define HELD_PARK_WAIT_MS 5000
#define HELD_RUNS_CAP 1024          /* largest CURSOR_OAI_HELD_RUNS_MAX */

/* Runs with a handle (r->in.session) are "live" until freed, parked or not. */
static void held_live_add(struct run *r)
{
    pthread_mutex_lock(&held_runs.lock);
    if (!r->held.live) {
        r->held.live = 1;
        r->held.live_next = held_runs.live;
        held_runs.live = r;
    }
    pthread_mutex_unlock(&held_runs.lock);
}

static void held_live_del(struct run *r)
{
    struct run **pp;
    if (!r->held.live) return;
    pthread_mutex_lock(&held_runs.lock);
    for (pp = &held_runs.live; *pp; pp = &(*pp)->held.live_next)
        if (*pp == r) { *pp = r->held.live_next; break; }
    r->held.live = 0;
    pthread_cond_broadcast(&held_runs.cond);
    pthread_mutex_unlock(&held_runs.lock);
}

/* Under held_runs.lock: a live run, not parked, with this handle; with no handle (a client that
 * re-numbers the ids), one asked with this history (hist: what it will park on). */
static int held_live_unparked_locked(coai_str session, const unsigned char *hist)
{
    const struct run *x;
    for (x = held_runs.live; x; x = x->held.live_next)
        if (!x->held.in_table
            && (session.len ? session.len == strlen(x->in.session)
                                  && memcmp(session.ptr, x->in.session, session.len) == 0
                            : x->in.hist_ok && memcmp(x->in.hist, hist, 32) == 0))
            return 1;
    return 0;
}

static int held_park(struct run *r)
{
    pthread_attr_t at;
    const coai_reply_call *calls;
    size_t n = coai_reply_calls(&r->reply, &calls);
    struct run *evict = NULL, *x;
    char junk[16];
    if (!n || !tr_is_open(r) || r->held.dead) return -1;
    /* The run belongs to this conversation: a follow-up continues it only with this history
     * before the assistant's tool calls (issue 22 item 4). */
    if (r->in.req.message_count)
        conv_digest(r->in.req.messages, r->in.req.message_count, r->held.park_hist);
    else if (r->in.hist_ok) memcpy(r->held.park_hist, r->in.hist, 32);
    else return -1;
    if (held_pipe(r) < 0) return -1;
    while (read(r->held.wake[0], junk, sizeof junk) > 0) {}      /* a claim's wake-up byte */
    r->held.release_req = 0;
    r->held.why[0] = 0;
    r->c = NULL;
    tr_watch(r, -1, NULL);
    r->held.at = mono_ms();
    run_hb_need(r, 1);
    run_hb_execs(r, calls, n);
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, SRV_THREAD_STACK);
    /* The holder is started under held_runs.lock, together with the insertion: a follow-up that
     * claims the run (under held_runs.lock) must find r->holder set, or its join would use an
     * unset thread id (seen: a client that answers within microseconds crashed the
     * process). The holder takes held_runs.lock only when it ends, so it waits for this. */
    pthread_mutex_lock(&held_runs.lock);
    r->held.in_table = 1;
    r->held.next = held_runs.list;
    held_runs.list = r;
    held_runs.n++;
    metric_gauge_add(M_HELD_RUNS, "", 1);
    if (pthread_create(&r->held.holder, &at, held_thread, r) != 0) {
        held_unlink_locked(r);
        pthread_mutex_unlock(&held_runs.lock);
        pthread_attr_destroy(&at);
        return -1;
    }
    r->held.holder_started = 1;
    if (!r->held.counted) held_runs.held++;     /* it could not be told before (held_count) */
    r->held.counted = 0;
    pthread_cond_broadcast(&held_runs.cond);            /* a follow-up may be waiting for it */
    if (held_runs.n > held_runs.max) {
        for (x = held_runs.list; x; x = x->held.next)
            if (!x->held.release_req) evict = x;     /* the oldest not yet asked */
        if (evict && evict != r) {
            evict->held.release_req = 1;
            held_runs.evicted++;
            if (write(evict->held.wake[1], "x", 1) < 0) {}
        }
    }
    pthread_mutex_unlock(&held_runs.lock);
    pthread_attr_destroy(&at);
    srv_log(LOG_INFO, "run %s held for %zu tool call%s (handle %s)", r->up.request_id, n,
            n == 1 ? "" : "s", r->in.session);
    return 0;
}

/* The held run whose pending tool calls the request's trailing tool messages answer
 * exactly, parked by the history the request carries before them (everything up to the
 * assistant message(s) that made the calls). Taken out of the table and stopped; NULL with
 * *why filled when there is none. */
/* id holds the call id c: equal, or c inside it (a client that prefixes or wraps ids) */
static int id_holds(coai_str id, coai_str c)
{
    size_t i;
    if (!c.len || id.len < c.len) return 0;
    for (i = 0; i + c.len <= id.len; i++)
        if (memcmp(id.ptr + i, c.ptr, c.len) == 0) return 1;
    return 0;
}

/* The follow-up's id for each of the n pending calls of a held run, into cid: the same id, an
 * id that holds it (prefixed, wrapped), or else, when the client re-numbered them all, the
 * assistant message's calls in the order they were given (acalls, na of them), each answered
 * by a result. 0, or -1 when they do not pair one to one. */
static int held_pair_ids(const coai_reply_call *calls, size_t n, const coai_str *ids,
                         const coai_call *acalls, size_t na, coai_str *cid)
{
    size_t i, j, k;
    int exact = 1;
    for (i = 0; i < n && exact; i++) {
        for (j = 0, k = n; j < n; j++) {
            if (ids[j].len == calls[i].call_id.len
                && memcmp(ids[j].ptr, calls[i].call_id.ptr, ids[j].len) == 0) { k = j; break; }
            if (k == n && id_holds(ids[j], calls[i].call_id)) k = j;
        }
        if (k == n) exact = 0;
        else cid[i] = ids[k];
    }
    if (!exact) {
        /* re-numbered: by position in the assistant message that carried them */
        if (na != n) return -1;
        for (i = 0; i < n; i++) {
            for (j = 0; j < n; j++)
                if (ids[j].len == acalls[i].id.len
                    && memcmp(ids[j].ptr, acalls[i].id.ptr, ids[j].len) == 0)
                    break;
            if (j == n) return -1;
            cid[i] = acalls[i].id;
        }
    }
    for (i = 0; i < n; i++)              /* one result for each call */
        for (j = i + 1; j < n; j++)
            if (cid[i].len == cid[j].len && memcmp(cid[i].ptr, cid[j].ptr, cid[i].len) == 0)
                return -1;
    return 0;
}

static struct run *held_claim(const coai_chat_request *req, const char *model, char *why,
                              size_t wcap)
{
    coai_str ids[64], cid[64];
    size_t n = coai_request_trailing_tool_ids(req, ids, 64), i, p, na = 0, a0;
    struct run *r, *q;
    const coai_reply_call *calls;
    const coai_call *acalls = NULL;
    int64_t end;
    unsigned char hist[32];
    why[0] = 0;
    if (!n) return NULL;
    for (p = req->message_count; p > 0 && req->messages[p - 1].role == COAI_ROLE_TOOL; p--) {}
    /* the assistant message that carried the calls (the last one with calls) */
    for (a0 = p; a0 > 0 && req->messages[a0 - 1].role == COAI_ROLE_ASSISTANT; a0--)
        if (!acalls && req->messages[a0 - 1].call_count) {
            acalls = req->messages[a0 - 1].calls;
            na = req->messages[a0 - 1].call_count;
        }
    p = a0;
    conv_digest(req->messages, p, hist);
    end = mono_ms() + HELD_PARK_WAIT_MS;
    pthread_mutex_lock(&held_runs.lock);
    for (;;) {
        r = NULL;
        if (req->session_id.len) {
            for (r = held_runs.list; r; r = r->held.next)
                if (!r->held.release_req && req->session_id.len == strlen(r->in.session)
                    && memcmp(req->session_id.ptr, r->in.session, req->session_id.len) == 0)
                    break;
        } else {
            /* ids without any run's handle (a client that re-numbers them): the one run held
             * on this very history. Not when the ids name a run: one this instance does not
             * hold is another instance's (or gone), and replaying is right there. */
            for (q = held_runs.list; q; q = q->held.next)
                if (!q->held.release_req && memcmp(hist, q->held.park_hist, 32) == 0) {
                    if (r) { r = NULL; break; }      /* two: neither is surely this one */
                    r = q;
                }
        }
        /* the run is still finishing the response that asked for these results */
        if (r || !held_live_unparked_locked(req->session_id, hist)
            || cond_wait_ms(&held_runs.cond, &held_runs.lock, end - mono_ms()) != 0)
            break;
    }
    if (!r) {
        pthread_mutex_unlock(&held_runs.lock);
        snprintf(why, wcap, "no held run for these tool results on this instance");
        return NULL;
    }
    if (coai_reply_calls(&r->reply, &calls) != n) {
        pthread_mutex_unlock(&held_runs.lock);
        snprintf(why, wcap, "the tool results do not answer every pending tool call");
        return NULL;
    }
    if (held_pair_ids(calls, n, ids, acalls, na, cid) < 0) {
        pthread_mutex_unlock(&held_runs.lock);
        snprintf(why, wcap, "the tool results do not answer the pending tool calls");
        return NULL;
    }
    if (strcmp(model, r->in.model) != 0) {
        pthread_mutex_unlock(&held_runs.lock);
        snprintf(why, wcap, "another model (%.60s, the held run has %.60s)", model, r->in.model);
        return NULL;
    }
    if (memcmp(hist, r->held.park_hist, 32) != 0) {
        /* another conversation's results, or an edited history: the run stays held for
         * the request that carries its own history */
        pthread_mutex_unlock(&held_runs.lock);
        snprintf(why, wcap, "the history before the tool calls is not the one that asked "
                 "for them (edited, or another conversation)");
        return NULL;
    }
    held_unlink_locked(r);
    r->held.release_req = 1;                /* the holder stops; not in the table: claimed */
    pthread_mutex_unlock(&held_runs.lock);
    if (write(r->held.wake[1], "x", 1) < 0) {}
    pthread_join(r->held.holder, NULL);
    r->held.holder_started = 0;
    if (r->held.dead) {
        snprintf(why, wcap, "%s", r->held.why[0] ? r->held.why : "the held run ended");
        run_free(r);
        return NULL;
    }
    /* the client's ids for the results (views into req, which moves to r->in.req) */
    for (i = 0; i < n; i++) r->held.cids[i] = cid[i];
    r->held.ncids = n;
    return r;
}

static void held_breaker(int hollow)
{
    pthread_mutex_lock(&held_runs.lock);
    if (!hollow) {
        held_runs.hollow_streak = 0;
    } else if (++held_runs.hollow_streak >= HELD_BREAKER_STREAK) {
        held_runs.breaker_until = mono_ms() + HELD_BREAKER_MS;
        held_runs.hollow_streak = 0;
        srv_log(LOG_WARN, "%d hollow continuations in a row: runs are not held for the next "
                "%d minutes (one fresh run per request, as with CURSOR_OAI_CONTINUATION=off)",
                HELD_BREAKER_STREAK, HELD_BREAKER_MS / 60000);
    }
    pthread_mutex_unlock(&held_runs.lock);
}

static int held_enabled(void)
{
    int on;
    pthread_mutex_lock(&held_runs.lock);
    on = held_runs.on && mono_ms() >= held_runs.breaker_until;
    pthread_mutex_unlock(&held_runs.lock);
    return on;
}

/* Reply options for the current request of r. */
static void run_reply_opts(struct run *r, coai_reply_opts *o, const char *completion_id)
{
    memset(o, 0, sizeof *o);
    coai_reply_opts_from_request(o, &r->in.req);
    o->completion_id = coai_str_c(completion_id);
    o->created = (int64_t)time(NULL);
    /* names a split write's staging directory (coai_tool_call.salt): nobody can name it
     * before the calls run; without randomness it stays 0 (named by the exec alone) */
    if (random_fill(&o->write_salt, sizeof o->write_salt) < 0) o->write_salt = 0;
    o->model = r->in.req.model;   /* the name the client asked for (Cursor's id: x-cursor-model) */
    o->session_id = coai_str_c(r->in.session);
    o->env = &r->in.params;
    o->send = run_send;
    o->send_user = r;
    /* parallel tool calls only when the client allows them (parallel_tool_calls: false) */
    o->batch_tools = held_runs.on
        && !(r->in.req.root_ && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
                 r->in.req.root_, "parallel_tool_calls")));
    if (r->in.resp) {
        o->echo.ptr = r->in.rr.echo.data ? (const char *)r->in.rr.echo.data : "";
        o->echo.len = r->in.rr.echo.len;
        o->rs_compact = r->in.rr.compact;
    }
    copy_str(r->in.completion_id, sizeof r->in.completion_id, completion_id, strlen(completion_id));
}


static void fallback_note(struct conn *c, const char *kind)
{
    char lb[64];
    c->fallback = kind;
    snprintf(lb, sizeof lb, "kind=\"%s\"", kind);
    metric_add(M_FALLBACKS, lb, 1);
}


/* The run's metrics: upstream runs by outcome and by transport, tokens, run_continued, and
 * the figures the access log and the status page take from the connection. Once per
 * response, before its last byte goes out (run_flush), so that a client that reads /metrics
 * the moment it has the answer finds it counted; run_finish counts a response that never
 * got that far (the client went away first). */
static void run_count(struct run *r)
{
    struct conn *c = r->c;
    char lb[METRIC_LABELS_MAX], ml[METRIC_VALUE_MAX * 2 + 16];
    coai_usage u;
    const char *outcome;
    if (r->out.counted || !r->up.request_id[0]) return;
    /* one upstream run (or more, after a retry: counted once, by how it ended) */
    r->out.counted = 1;
    outcome = r->out.cancelled || c->dead ? "client_gone"
            : r->reply.error.status ? (r->reply.error.code ? r->reply.error.code : "error")
            : "ok";
    snprintf(lb, sizeof lb, "outcome=\"%s\"", outcome);
    metric_add(M_UPSTREAM_RUNS, lb, 1);
    snprintf(lb, sizeof lb, "transport=\"%s\"", TR_NAME[r->up.tr]);
    metric_add(M_TRANSPORT_RUNS, lb, 1);
    memset(&u, 0, sizeof u);
    coai_reply_usage(&r->reply, &u);
    if (u.reported && u.cache_over_input) {
        static int said;        /* once per process: it is how the server counts, not a run */
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            srv_log(LOG_WARN, "Cursor reported a cache read (%lld tokens) larger than the "
                    "turn's input (%lld): it seems to count cached tokens apart from input; "
                    "usage shows the raw figures (logged once)", (long long)u.cache_read_tokens,
                    (long long)u.input_tokens);
    }
    c->tok_in = (int64_t)u.input_tokens;
    c->tok_out = (int64_t)u.output_tokens;
    if (r->reply.error.status && !c->errmsg[0])
        copy_str(c->errmsg, sizeof c->errmsg, r->reply.error.message,
                 strlen(r->reply.error.message));
    if (r->reply.error.status && !c->err.status) c->err = r->reply.error;
    metric_label(ml, sizeof ml, "model", c->model, strlen(c->model));
    snprintf(lb, sizeof lb, "%s,kind=\"in\"", ml);
    metric_add(M_TOKENS, lb, (double)u.input_tokens);
    snprintf(lb, sizeof lb, "%s,kind=\"out\"", ml);
    metric_add(M_TOKENS, lb, (double)u.output_tokens);
    snprintf(lb, sizeof lb, "%s,kind=\"cached\"", ml);
    metric_add(M_TOKENS, lb, (double)u.cache_read_tokens);
    quota_remember(c->model, &r->reply.error);
    if (r->held.continuing) {
        pthread_mutex_lock(&held_runs.lock);
        held_runs.continued++;
        pthread_mutex_unlock(&held_runs.lock);
    }
}

/* The end of a response: hold the run (it asked for tools), or drain and close it. */
static void run_finish(struct run *r)
{
    struct conn *c = r->c;
    if (r->out.cancelled || c->dead) {
        c->dead = 1;
        if (!c->status) c->status = 499;
        if (!r->out.stopping)
            srv_log(LOG_INFO, "client went away; upstream run %s closed", r->up.request_id);
    } else if (!coai_reply_done(&r->reply)) {
        /* Should not happen: the reply always ends on eof/error. Close rather than hang. */
        c->keep = 0;
    }
    run_count(r);
    run_store(r);
    if (r->reply.error.status)
        srv_log(LOG_WARN, "run %s failed: %d %s: %s",
                r->up.request_id[0] ? r->up.request_id : "(not started)", r->reply.error.status,
                r->reply.error.code ? r->reply.error.code : "-", r->reply.error.message);
    if (!r->out.cancelled && !c->dead && coai_reply_done(&r->reply) && !r->reply.error.status
        && !coai_reply_tool_called(&r->reply) && !r->out.remembered) {
        r->out.remembered = 1;
        mem_store(r);
    }
    if (held_wanted(r)) {
        r->held.tools_at = mono_ms();
        if (held_park(r) == 0) return;
        srv_log(LOG_INFO, "run %s not held: %s", r->up.request_id,
                r->held.dead ? "Cursor ended it with the tool calls" : "cannot park it");
    }
    held_uncount(r);                            /* not parked: not held */
    /* After a normal end only the trailer and the chunked terminator are left: read them
     * (for at most RUNSSE_DRAIN_MS, so a slow upstream never delays this client's next
     * request) and the RunSSE connection can go back to the pool. Not after a tool call:
     * that upstream run is still open, waiting for a result it will never get. */
    run_hb_stop(r);
    if (tr_is_open(r) && !r->out.cancelled && !tr_body_done(r) && coai_reply_done(&r->reply)
        && !r->reply.error.status && !coai_reply_tool_called(&r->reply)) {
        const unsigned char *p;
        tr_watch(r, -1, NULL);
        *tr_deadline(r) = mono_ms() + RUNSSE_DRAIN_MS;
        while (tr_body(r, &p) > 0) {}
    }
    /* A RunSSE connection is reused only when its body was read to the framed end. */
    tr_close(r, !r->out.cancelled);
    run_free(r);
}

/* The tool output the request carries for a call id, into out (is_error: never set by
 * OpenAI chat; kept for the dialects that have it). */
/* The follow-up's id of pending call i (the client may have rewritten it: held_claim). */
#define HELD_CID(r, calls, i) ((i) < (r)->held.ncids ? (r)->held.cids[i] : (calls)[i].call_id)

static int held_results(struct run *r, char *why, size_t wcap)
{
    const coai_reply_call *calls;
    size_t n = coai_reply_calls(&r->reply, &calls), i;
    uint32_t ms = (uint32_t)(mono_ms() - r->held.tools_at);
    coai_buf text = { 0 }, m = { 0 };
    coai_exec_outcome oc;
    int rc = 0, is_error = 0, part_failed = 0;
    const coai_image *imgs;
    memset(&oc, 0, sizeof oc);
    /* Images in a result only an MCP result can carry (McpImageContent); for any other
     * kind the turn goes to a fresh run, where they travel as selected images. Checked
     * before anything is sent. */
    for (i = 0; i < n; i++) {
        if (calls[i].ref.kind != COAI_EXEC_MCP
            && coai_request_tool_result_images(&r->in.req, HELD_CID(r, calls, i), &imgs)) {
            snprintf(why, wcap, "the result for %.*s has images, which only an MCP exec's "
                     "result can carry", (int)calls[i].call_id.len, calls[i].call_id.ptr);
            return -1;
        }
    }
    for (i = 0; i < n && rc == 0; i++) {
        unsigned step;
        size_t nimg = coai_request_tool_result_images(&r->in.req, HELD_CID(r, calls, i), &imgs);
        coai_str t;
        coai_buf_reset(&text);
        if (coai_request_tool_result(&r->in.req, HELD_CID(r, calls, i), &text, &is_error) < 0) {
            snprintf(why, wcap, "no result for %.*s", (int)calls[i].call_id.len,
                     calls[i].call_id.ptr);
            rc = -1;
            break;
        }
        /* the result as Cursor's CLI reports it: each client's own layout read out */
        t.ptr = text.data ? (const char *)text.data : "";
        t.len = text.len;
        if (coai_exec_outcome_parse(&oc, &calls[i].ref, calls[i].tool, t, is_error) < 0) {
            snprintf(why, wcap, "out of memory reading a tool result");
            rc = -1;
            break;
        }
        srv_log(LOG_DEBUG, "result for %.*s (%.*s): %s%s, exit %s%d", (int)calls[i].call_id.len,
                calls[i].call_id.ptr, (int)calls[i].tool.len, calls[i].tool.ptr, oc.shape,
                oc.is_error ? " error" : "", oc.has_exit ? "" : "unknown/", oc.has_exit
                ? oc.exit_code : oc.is_error);
        /* a write split over several calls answers Cursor once */
        if (!coai_exec_part_answers(&calls[i].ref, oc.is_error, &part_failed)) continue;
        for (step = 0; rc == 0; step++) {
            int er;
            coai_buf_reset(&m);
            er = coai_encode_exec_outcome(&m, &calls[i].ref, &oc, imgs, nimg, ms, step);
            if (er == COAI_DONE) break;
            if (er != COAI_OK || m.err) { snprintf(why, wcap, "cannot encode a result"); rc = -1; }
            else if (run_send(r, m.data, m.len) < 0) {
                /* the hollow bound cancels the send as a departed client would: say which */
                if (r->held.hollow_hit)
                    snprintf(why, wcap, "Cursor took no tool result within "
                             "CURSOR_OAI_HOLLOW_TIMEOUT (%d s)", held_runs.hollow_s);
                else
                    snprintf(why, wcap, "sending a tool result failed: %.120s",
                             r->err.message);
                rc = -1;
            }
        }
    }
    coai_buf_free(&text);
    coai_buf_free(&m);
    coai_exec_outcome_free(&oc);
    r->held.ncids = 0;                      /* the next park has calls of its own */
    return rc;
}

/* The follow-up falls back to a fresh run (nothing reached the client): counted, noted, the
 * held run closed. 1 (held_continue's "fall back"). */
static int held_fall_back(struct run *r, unsigned long *counter, const char *kind)
{
    pthread_mutex_lock(&held_runs.lock);
    (*counter)++;
    pthread_mutex_unlock(&held_runs.lock);
    fallback_note(r->c, kind);
    run_free(r);
    return 1;
}

/* The frames that arrived while the run was held, fed to the new response and flushed.
 * The coai_reply_feed_* result of the last one (COAI_OK: none ended it). */
static int held_backlog(struct run *r)
{
    coai_buf bl = r->held.backlog;
    int rc = COAI_OK;
    size_t i;
    memset(&r->held.backlog, 0, sizeof r->held.backlog);
    for (i = 0; i + 5 <= bl.len && rc == COAI_OK;) {
        coai_frame f;
        size_t n = (size_t)bl.data[i + 1] << 24 | (size_t)bl.data[i + 2] << 16
                   | (size_t)bl.data[i + 3] << 8 | bl.data[i + 4];
        memset(&f, 0, sizeof f);
        f.flags = bl.data[i];
        f.data = bl.data + i + 5;
        f.len = n;
        r->out.in_feed = 1;
        r->held.replaying = 1;
        rc = run_frame(r, &f);
        r->held.replaying = 0;
        r->out.in_feed = 0;
        i += 5 + n;
    }
    coai_buf_free(&bl);
    if (run_flush(r) < 0) r->out.cancelled = 1;
    return rc;
}

/* Serve the request on the held run r. 0 served (r is parked again or closed), 1 fall back
 * to a fresh run (nothing reached the client; r is closed). */
static int held_continue(struct conn *c, struct run *r, const char *completion_id)
{
    coai_reply_opts o;
    char why[200] = "";
    size_t ncalls;
    run_reply_opts(r, &o, completion_id);
    r->c = c;
    c->transport = TR_NAME[r->up.tr];
    r->out.stream = r->in.req.stream;
    /* a follow-up never resets the conversation: its failure falls back */
    r->fb.tries |= TRIED_CONV_RESET;
    r->out.answer_bytes = 0;
    r->out.sent_all = 0;
    r->out.cancelled = 0;
    r->held.hollow_hit = 0;
    r->held.ended_empty = 0;
    r->out.stored = 0;
    r->out.counted = 0;
    r->held.continuing = 1;         /* run_count: run_continued */
    r->out.last_write = mono_ms();
    memset(&r->err, 0, sizeof r->err);
    tr_watch(r, c->fd, run_tick);
    ncalls = coai_reply_calls(&r->reply, NULL);
    /* The hollow bound counts from here: sending the results is part of it (an append
     * endpoint that stalls ends in a fallback within it, not after one upstream timeout
     * per result). */
    r->held.hollow_until = mono_ms() + (int64_t)held_runs.hollow_s * 1000;
    if (held_results(r, why, sizeof why) == 0 && coai_reply_continue(&r->reply, &o) < 0)
        snprintf(why, sizeof why, "out of memory");
    if (why[0]) {
        srv_log(LOG_INFO, "held run %s: %s; falling back to a fresh run", r->up.request_id, why);
        if (r->held.hollow_hit) {       /* a hollow continuation, as one that shows nothing */
            held_breaker(1);
            return held_fall_back(r, &held_runs.fallback_hollow, "held_run_hollow");
        }
        return held_fall_back(r, &held_runs.fallback_gone, "held_run_failed");
    }
    run_hb_execs(r, NULL, 0);
    r->out.hold_errors = 1;         /* a failure before the first byte falls back instead */
    /* the watchdog starts again for this response; the hollow check comes first */
    run_watch_start(r);
    srv_log(LOG_INFO, "run %s continued with %zu tool result%s after %lld ms", r->up.request_id,
            ncalls, ncalls == 1 ? "" : "s", (long long)(mono_ms() - r->held.tools_at));
    /* What arrived while the run was held comes first. */
    if (held_backlog(r) == COAI_OK && !r->out.cancelled) run_stream(r);
    if (r->held.hollow_hit && !coai_reply_started(&r->reply)) {
        if (r->held.ended_empty)
            srv_log(LOG_INFO, "held run %s ended right after the tool results without an "
                    "answer; falling back to a fresh run", r->up.request_id);
        else
            srv_log(LOG_INFO, "held run %s showed no progress within CURSOR_OAI_HOLLOW_TIMEOUT "
                    "(%d s) after the tool results; falling back to a fresh run", r->up.request_id,
                    held_runs.hollow_s);
        held_breaker(1);
        return held_fall_back(r, &held_runs.fallback_hollow,
                              r->held.ended_empty ? "held_run_empty" : "held_run_hollow");
    }
    if (run_failed_unsent(r)) {
        srv_log(LOG_INFO, "held run %s failed after the tool results (%s); falling back to a "
                "fresh run", r->up.request_id, r->reply.error.message);
        return held_fall_back(r, &held_runs.fallback_gone, "held_run_failed");
    }
    run_flush_rest(r);
    r->held.hollow_until = 0;
    held_breaker(0);
    run_finish(r);
    return 0;
}

/* ======================================================================== */
/* Conversation memory (issue 11): checkpoints the next turn resumes        */
/* ======================================================================== */

/* Conversation memory: Cursor's latest checkpoint per conversation, keyed by the digest of
 * the history (coai_conversation_digests) the client will send back with its next turn. */
struct mem_entry {
    unsigned char key[32];
    char model[128];
    char conv_id[37];
    coai_buf state;                 /* ConversationStateStructure bytes */
    coai_buf blobs;                 /* [u32 id len][id][u32 len][data] ... */
    size_t nblobs, bytes;
    int64_t at;                     /* mono ms stored */
    struct mem_entry *next;
};

static void mem_entry_free(struct mem_entry *e)
{
    coai_buf_free(&e->state);
    coai_buf_free(&e->blobs);
    free(e);
}

static void mem_put_u32(coai_buf *b, size_t n)
{
    unsigned char h[4];
    h[0] = (unsigned char)(n >> 24); h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8); h[3] = (unsigned char)n;
    coai_buf_append(b, h, 4);
}

/* Remember where the conversation stands after a final answer: the key is the history the
 * client will send next time (this request's messages + the answer it got). */
static void mem_store(struct run *r)
{
    coai_str cp = coai_reply_checkpoint(&r->reply), text;
    unsigned char (*dg)[32] = NULL;
    coai_message am;
    coai_part ap;
    struct mem_entry *e, **pp, *old = NULL;
    size_t i, n = r->in.req.message_count;
    int cut = 0;
    if (!held_runs.on || !cp.len || (!n && !r->in.hist_ok) || !r->in.conv_id[0]) return;
    text = coai_reply_text(&r->reply, &cut);
    if (cut) return;
    e = calloc(1, sizeof *e);
    dg = malloc((n ? n : 1) * sizeof *dg);
    if (!e || !dg) { free(e); free(dg); return; }
    if (n) coai_conversation_digests(r->in.req.messages, n, dg);
    else memcpy(dg[0], r->in.hist, 32), n = 1;
    memset(&am, 0, sizeof am);
    memset(&ap, 0, sizeof ap);
    am.role = COAI_ROLE_ASSISTANT;
    ap.kind = COAI_PART_TEXT;
    ap.text = text;
    am.parts = &ap;
    am.part_count = 1;
    coai_conversation_digest_next(dg[n - 1], &am, e->key);
    free(dg);
    copy_str(e->model, sizeof e->model, r->in.model, strlen(r->in.model));
    copy_str(e->conv_id, sizeof e->conv_id, r->in.conv_id, strlen(r->in.conv_id));
    coai_buf_append(&e->state, cp.ptr, cp.len);
    for (i = 0; i < coai_reply_kv_count(&r->reply); i++) {
        coai_str id, data;
        coai_reply_kv_at(&r->reply, i, &id, &data);
        mem_put_u32(&e->blobs, id.len);
        coai_buf_append(&e->blobs, id.ptr, id.len);
        mem_put_u32(&e->blobs, data.len);
        coai_buf_append(&e->blobs, data.ptr, data.len);
        e->nblobs++;
    }
    e->bytes = e->state.len + e->blobs.len + sizeof *e;
    if (e->state.err || e->blobs.err || e->bytes > conv_memory.max_bytes) {
        mem_entry_free(e);
        return;
    }
    e->at = mono_ms();
    pthread_mutex_lock(&conv_memory.lock);
    e->next = conv_memory.list;
    conv_memory.list = e;
    conv_memory.n++;
    conv_memory.bytes += e->bytes;
    conv_memory.stored++;
    /* bounded in count, bytes and age: drop from the oldest end */
    while (conv_memory.n > conv_memory.max || conv_memory.bytes > conv_memory.max_bytes) {
        for (pp = &conv_memory.list; (*pp)->next; pp = &(*pp)->next) {}
        old = *pp;
        *pp = NULL;
        conv_memory.n--;
        conv_memory.bytes -= old->bytes;
        mem_entry_free(old);
    }
    pthread_mutex_unlock(&conv_memory.lock);
    srv_log(LOG_DEBUG, "conversation %s remembered (%zu checkpoint bytes, %zu blobs)",
            e->conv_id, cp.len, e->nblobs);
}

static void mem_hit_free(struct mem_hit *h)
{
    coai_buf_free(&h->state);
    coai_buf_free(&h->blobs);
    free(h->ids);
    free(h->vals);
    memset(h, 0, sizeof *h);
}

static size_t mem_u32(const unsigned char *p)
{
    return (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
}

static int mem_find(const coai_request *req, const char *model, struct mem_hit *hit)
{
    size_t n = req->message_count, k, j, at;
    unsigned char key[32];
    struct mem_entry *e = NULL, **pp;
    int64_t now = mono_ms();
    memset(hit, 0, sizeof *hit);
    if (!held_runs.on || n < 2) return 0;
    pthread_mutex_lock(&conv_memory.lock);
    for (pp = &conv_memory.list; *pp;) {                     /* age limit */
        if (now - (*pp)->at > (int64_t)conv_memory.ttl_s * 1000) {
            struct mem_entry *old = *pp;
            *pp = old->next;
            conv_memory.n--;
            conv_memory.bytes -= old->bytes;
            mem_entry_free(old);
        } else {
            pp = &(*pp)->next;
        }
    }
    if (!conv_memory.list) { pthread_mutex_unlock(&conv_memory.lock); return 0; }
    pthread_mutex_unlock(&conv_memory.lock);
    /* A key names a history that ends with the answer it remembers, and only new user
     * messages may follow it: the one candidate is the history up to the last message that
     * is not a user's, which must be an answer. Found in one pass, digested outside the
     * lock; under it only the (at most conv_memory.max) keys are compared (issue 22 item 1: this
     * was a digest per message and a scan of every key per message, under conv_memory.lock). */
    for (k = n; k > 0 && req->messages[k - 1].role == COAI_ROLE_USER; k--) {}
    if (k == 0 || k == n || req->messages[k - 1].role != COAI_ROLE_ASSISTANT) return 0;
    conv_digest(req->messages, k, key);
    pthread_mutex_lock(&conv_memory.lock);
    for (e = conv_memory.list; e; e = e->next)
        if (memcmp(e->key, key, 32) == 0 && strcmp(e->model, model) == 0) break;
    if (e) {
        hit->k = k;
        coai_buf_append(&hit->state, e->state.data, e->state.len);
        coai_buf_append(&hit->blobs, e->blobs.data, e->blobs.len);
        hit->nblobs = e->nblobs;
        memcpy(hit->conv_id, e->conv_id, sizeof hit->conv_id);
    }
    pthread_mutex_unlock(&conv_memory.lock);
    if (!e) return 0;
    hit->ids = calloc(hit->nblobs + 1, sizeof *hit->ids);
    hit->vals = calloc(hit->nblobs + 1, sizeof *hit->vals);
    if (!hit->ids || !hit->vals || hit->state.err || hit->blobs.err) { mem_hit_free(hit); return 0; }
    for (j = 0, at = 0; j < hit->nblobs; j++) {
        size_t l = mem_u32(hit->blobs.data + at);
        hit->ids[j].ptr = (const char *)hit->blobs.data + at + 4;
        hit->ids[j].len = l;
        at += 4 + l;
        l = mem_u32(hit->blobs.data + at);
        hit->vals[j].ptr = (const char *)hit->blobs.data + at + 4;
        hit->vals[j].len = l;
        at += 4 + l;
    }
    return 1;
}

/* ======================================================================== */
/* Client connections: responses                                            */
/* ======================================================================== */

struct conn;

/* The first row of a route (its facts), or NULL for ROUTE_NONE. */
static const struct route_def *route_row(int route)
{
    size_t i;
    for (i = 0; i < ROUTE_ROWS; i++)
        if (ROUTE_TABLE[i].route == route) return &ROUTE_TABLE[i];
    return NULL;
}

/* The route's label in /metrics and the access log: the path of its first row (never the
 * client's path, so that label sets stay few). */
static const char *route_label(int route)
{
    const struct route_def *rd = route_row(route);
    return rd ? rd->path : "other";
}

/* The client API dialect a route speaks ("none" for routes that are not a model API). */
static const char *route_dialect(int route)
{
    const struct route_def *rd = route_row(route);
    const coai_dialect_info *di = rd ? coai_dialect_get((coai_dialect)rd->dialect) : NULL;
    return di ? di->name : "none";
}

static int conn_write(struct conn *c, const void *p, size_t n)
{
    if (c->dead) return -1;
    if (c->wpend.len) {             /* what the I/O thread could not send (run_flush_nb) */
        if (fd_write_all(c->fd, c->wpend.data, c->wpend.len) < 0) { c->dead = 1; return -1; }
        coai_buf_reset(&c->wpend);
    }
    if (n && fd_write_all(c->fd, p, n) < 0) { c->dead = 1; return -1; }
    return 0;
}


/* A complete response with a Content-Length body. extra: more header lines, each ending in
 * CRLF (or NULL). The request is counted before it goes out (request_count). */
static int send_response(struct conn *c, int status, const char *ctype, const char *extra,
                         const void *body, size_t n)
{
    coai_buf h = { 0 };
    int r;
    coai_buf_printf(&h, "HTTP/1.1 %d %s\r\n", status, status_text(status));
    if (ctype) coai_buf_printf(&h, "Content-Type: %s\r\n", ctype);
    coai_buf_printf(&h, "Content-Length: %zu\r\n%sConnection: %s\r\n\r\n", n, extra ? extra : "",
                    c->keep ? "keep-alive" : "close");
    if (n) coai_buf_append(&h, body, n);
    c->status = status;
    c->bytes += n;
    request_count(c);
    r = h.err ? -1 : conn_write(c, h.data, h.len);
    coai_buf_free(&h);
    return r;
}

/* An OpenAI error body {"error":{"message","type","param","code"}} with a real status,
 * its Retry-After / x-should-retry hints, and `extra` header lines (or NULL). */
static int send_error_ex(struct conn *c, const coai_error *e, const char *extra)
{
    coai_buf b = { 0 }, h = { 0 };
    int r;
    if (e->status == 499) { c->status = 499; c->dead = 1; return -1; }
    copy_str(c->errmsg, sizeof c->errmsg, e->message, strlen(e->message));
    c->err = *e;
    if (extra) coai_buf_puts(&h, extra);
    if (e->no_retry) coai_buf_puts(&h, "x-should-retry: false\r\n");
    if (e->retry_after > 0) coai_buf_printf(&h, "Retry-After: %d\r\n", e->retry_after);
    coai_error_write_as(&b, e, c->dialect);
    r = b.err || h.err ? -1
      : send_response(c, coai_error_status_as(e, c->dialect), "application/json",
                      h.data ? (char *)h.data : NULL, b.data, b.len);
    coai_buf_free(&b);
    coai_buf_free(&h);
    return r;
}

static int send_coai_error(struct conn *c, const coai_error *e)
{
    if (e->status >= 500) srv_log(LOG_WARN, "%d %s: %s", e->status, e->code ? e->code : "-",
                                  e->message);
    return send_error_ex(c, e, NULL);
}

static int send_error(struct conn *c, int status, const char *type, const char *code,
                      const char *param, const char *msg, const char *extra)
{
    coai_error e;
    coai_error_set(&e, status, type, code, param, "%s", msg);
    if (status == 503) e.retry_after = 1;
    return send_error_ex(c, &e, extra);
}

/* Start a 200 streaming response. `lines`: header lines from coai_reply_head (content type,
 * cache control). HTTP/1.0 clients get a close-delimited body instead of chunks. */
static int stream_begin(struct conn *c, const char *lines)
{
    coai_buf h = { 0 };
    int r;
    if (c->http10) c->keep = 0;
    coai_buf_printf(&h, "HTTP/1.1 200 OK\r\n%s%sConnection: %s\r\n\r\n", lines ? lines : "",
                    c->http10 ? "" : "Transfer-Encoding: chunked\r\n",
                    c->keep ? "keep-alive" : "close");
    c->status = 200;
    if (!c->streaming) metric_gauge_add(M_OPEN_STREAMS, "", 1);
    c->streaming = 1;
    r = h.err ? -1 : conn_write(c, h.data, h.len);
    coai_buf_free(&h);
    return r;
}

/* One piece of a stream body (one HTTP chunk). */
static int stream_write(struct conn *c, const void *p, size_t n)
{
    if (n == 0) return 0;
    if (stream_piece(c, p, n) < 0) return -1;
    return conn_write(c, c->wbuf.data, c->wbuf.len);
}

/* n bytes of a stream body as they go out, into c->wbuf: one HTTP chunk (size line, data,
 * CRLF: one send() for all, as with TCP_NODELAY three writes would be three segments), or the
 * bytes alone to an HTTP/1.0 client; counted in c->bytes. 0, -1 out of memory (c->dead). */
static int stream_piece(struct conn *c, const void *p, size_t n)
{
    char sz[24];
    size_t k = sizeof sz, v = n;
    c->bytes += n;
    coai_buf_reset(&c->wbuf);
    sz[--k] = '\n';                         /* the size line, "%zx\r\n" without printf's cost */
    sz[--k] = '\r';
    do sz[--k] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
    if (!c->http10) coai_buf_append(&c->wbuf, sz + k, sizeof sz - k);
    coai_buf_append(&c->wbuf, p, n);
    if (!c->http10) coai_buf_append(&c->wbuf, "\r\n", 2);
    if (c->wbuf.err) { c->dead = 1; return -1; }
    return 0;
}

/* The end of a stream body, counted before it goes out (request_count). */
static int stream_end(struct conn *c)
{
    request_count(c);
    if (c->http10) { c->keep = 0; return 0; }
    return conn_write(c, "0\r\n\r\n", 5);
}

/* ======================================================================== */
/* Upstream TLS connections (BearSSL over non-blocking sockets)             */
/* ======================================================================== */

static void up_err(coai_error *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fill an OpenAI error for a transport-level upstream failure. */
static void up_err(coai_error *e, int status, const char *code, const char *fmt, ...)
{
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    coai_error_set(e, status, status == 502 ? "upstream_error" : "server_error", code, NULL,
                   "%s", msg);
}

static const char *tls_alert_name(int a)
{
    switch (a) {
    case 0: return "close_notify";
    case 10: return "unexpected_message";
    case 20: return "bad_record_mac";
    case 22: return "record_overflow";
    case 40: return "handshake_failure";
    case 42: return "bad_certificate";
    case 43: return "unsupported_certificate";
    case 44: return "certificate_revoked";
    case 45: return "certificate_expired";
    case 46: return "certificate_unknown";
    case 47: return "illegal_parameter";
    case 48: return "unknown_ca";
    case 50: return "decode_error";
    case 51: return "decrypt_error";
    case 70: return "protocol_version";
    case 71: return "insufficient_security";
    case 80: return "internal_error";
    case 90: return "user_canceled";
    case 109: return "missing_extension";
    case 112: return "unrecognized_name";
    case 120: return "no_application_protocol";
    }
    return "unknown alert";
}

/* BearSSL error code -> words. *verify is set for certificate verification failures. */
static void tls_err_text(int err, char *out, size_t cap, int *verify)
{
    static const struct { int code; const char *text; } T[] = {
        { BR_ERR_BAD_PARAM, "BR_ERR_BAD_PARAM (bad parameter)" },
        { BR_ERR_BAD_STATE, "BR_ERR_BAD_STATE (bad engine state)" },
        { BR_ERR_UNSUPPORTED_VERSION,
          "BR_ERR_UNSUPPORTED_VERSION (no TLS 1.2 from the server; is it TLS at all?)" },
        { BR_ERR_BAD_VERSION, "BR_ERR_BAD_VERSION (unexpected TLS version)" },
        { BR_ERR_BAD_LENGTH, "BR_ERR_BAD_LENGTH (bad record length)" },
        { BR_ERR_TOO_LARGE, "BR_ERR_TOO_LARGE (record too large)" },
        { BR_ERR_BAD_MAC, "BR_ERR_BAD_MAC (record MAC check failed)" },
        { BR_ERR_NO_RANDOM, "BR_ERR_NO_RANDOM (no entropy source)" },
        { BR_ERR_UNKNOWN_TYPE, "BR_ERR_UNKNOWN_TYPE (not TLS: plain HTTP on a TLS port?)" },
        { BR_ERR_UNEXPECTED, "BR_ERR_UNEXPECTED (unexpected handshake message)" },
        { BR_ERR_BAD_HANDSHAKE, "BR_ERR_BAD_HANDSHAKE (malformed handshake message)" },
        { BR_ERR_BAD_CIPHER_SUITE, "BR_ERR_BAD_CIPHER_SUITE (no common cipher suite)" },
        { BR_ERR_BAD_SNI, "BR_ERR_BAD_SNI (bad server name extension)" },
        { BR_ERR_BAD_SIGNATURE, "BR_ERR_BAD_SIGNATURE (bad handshake signature)" },
        { BR_ERR_WRONG_KEY_USAGE, "BR_ERR_WRONG_KEY_USAGE (server key usage mismatch)" },
        { BR_ERR_IO, "BR_ERR_IO (I/O error or connection closed during TLS)" },
        { BR_ERR_X509_INVALID_VALUE, "BR_ERR_X509_INVALID_VALUE (malformed certificate)" },
        { BR_ERR_X509_TRUNCATED, "BR_ERR_X509_TRUNCATED (truncated certificate)" },
        { BR_ERR_X509_EMPTY_CHAIN, "BR_ERR_X509_EMPTY_CHAIN (server sent no certificate)" },
        { BR_ERR_X509_BAD_SIGNATURE, "BR_ERR_X509_BAD_SIGNATURE (certificate signature invalid)" },
        { BR_ERR_X509_TIME_UNKNOWN, "BR_ERR_X509_TIME_UNKNOWN (no usable clock)" },
        { BR_ERR_X509_EXPIRED, "BR_ERR_X509_EXPIRED (certificate expired or not yet valid)" },
        { BR_ERR_X509_DN_MISMATCH, "BR_ERR_X509_DN_MISMATCH (broken certificate chain)" },
        { BR_ERR_X509_BAD_SERVER_NAME,
          "BR_ERR_X509_BAD_SERVER_NAME (certificate does not match the host name)" },
        { BR_ERR_X509_CRITICAL_EXTENSION,
          "BR_ERR_X509_CRITICAL_EXTENSION (unsupported critical extension)" },
        { BR_ERR_X509_NOT_CA, "BR_ERR_X509_NOT_CA (chain certificate is not a CA)" },
        { BR_ERR_X509_FORBIDDEN_KEY_USAGE, "BR_ERR_X509_FORBIDDEN_KEY_USAGE (key usage)" },
        { BR_ERR_X509_WEAK_PUBLIC_KEY, "BR_ERR_X509_WEAK_PUBLIC_KEY (key too small)" },
        { BR_ERR_X509_NOT_TRUSTED, "BR_ERR_X509_NOT_TRUSTED (certificate chain not trusted)" },
    };
    size_t i;
    *verify = err >= BR_ERR_X509_OK && err < BR_ERR_RECV_FATAL_ALERT;
    for (i = 0; i < sizeof T / sizeof T[0]; i++) {
        if (T[i].code == err) {
            snprintf(out, cap, "TLS error %d: %s", err, T[i].text);
            return;
        }
    }
    if (err >= BR_ERR_SEND_FATAL_ALERT)
        snprintf(out, cap, "TLS error %d: sent fatal alert %d (%s)", err,
                 err - BR_ERR_SEND_FATAL_ALERT, tls_alert_name(err - BR_ERR_SEND_FATAL_ALERT));
    else if (err >= BR_ERR_RECV_FATAL_ALERT)
        snprintf(out, cap, "TLS error %d: server sent fatal alert %d (%s)%s", err,
                 err - BR_ERR_RECV_FATAL_ALERT, tls_alert_name(err - BR_ERR_RECV_FATAL_ALERT),
                 err == BR_ERR_RECV_FATAL_ALERT + 70 ? "; the server may require TLS 1.3" : "");
    else if (*verify)
        snprintf(out, cap, "TLS error %d: certificate verification failed", err);
    else
        snprintf(out, cap, "TLS error %d", err);
}

/* 1 when the client connection is gone. Pipelined request bytes are not a disconnect.
 * A client that half-closes its sending side counts as gone (as nginx does by default). */
static int client_gone(struct upconn *c, short revents)
{
    char b;
    ssize_t r;
    if (revents & (POLLERR | POLLHUP | POLLNVAL)) return 1;
    r = recv(c->client_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    if (r < 0) return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    c->client_events = 0;
    return 0;
}

/* Wait until the upstream socket is ready for `ev`. Also watches the client socket, the
 * deadline, and calls tick() about once a second. 0 ready, -1 failed (c->why says why). */
static int up_wait(struct upconn *c, short ev)
{
    for (;;) {
        struct pollfd pf[2];
        int64_t now = mono_ms(), left = c->deadline - now;
        int n = 1, r;
        if (c->tick && now - c->last_tick >= 1000) {
            c->last_tick = now;
            if (c->tick(c->tick_ctx) < 0) { c->why = UPX_CANCELLED; return -1; }
        }
        if (left <= 0) { c->why = UPX_TIMEOUT; return -1; }
        pf[0].fd = c->fd;
        pf[0].events = ev;
        pf[0].revents = 0;
        if (c->client_fd >= 0) {
            pf[1].fd = c->client_fd;
            pf[1].events = c->client_events;
            pf[1].revents = 0;
            n = 2;
        }
        r = poll(pf, (nfds_t)n, left > 1000 ? 1000 : (int)left);
        if (r < 0 && errno == EINTR) { c->last_tick = 0; continue; }   /* a signal: tick now */
        if (r < 0) { c->why = UPX_IO; return -1; }
        if (n == 2 && pf[1].revents && client_gone(c, pf[1].revents)) {
            c->why = UPX_CANCELLED;
            return -1;
        }
        if (pf[0].revents) return 0;
    }
}

/* BearSSL's read callback, served from the read-ahead buffer. When it is empty: wait for
 * the socket first, then read once (a read that would only fail with EAGAIN is a wasted
 * system call per wake-up), unless the previous read filled the buffer. */
static int up_low_read(void *ctx, unsigned char *buf, size_t len)
{
    struct upconn *c = ctx;
    size_t n;
    if (c->ra_off == c->ra_len) {
        c->ra_off = c->ra_len = 0;
        for (;;) {
            ssize_t r;
            if (!c->ra_more && up_wait(c, POLLIN) < 0) return -1;
            r = recv(c->fd, c->ra, sizeof c->ra, 0);
            if (r > 0) {
                c->ra_len = (size_t)r;
                c->ra_more = (size_t)r == sizeof c->ra;
                if (c->io_timeout_ms > 0) c->deadline = mono_ms() + c->io_timeout_ms;
                if (c->end && c->deadline > c->end) c->deadline = c->end;
                break;
            }
            c->ra_more = 0;
            if (r == 0) { c->why = UPX_EOF; return -1; }
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            c->why = UPX_IO;
            return -1;
        }
    }
    n = c->ra_len - c->ra_off;
    if (n > len) n = len;
    memcpy(buf, c->ra + c->ra_off, n);
    c->ra_off += n;
    return (int)n;
}

/* 1 when the next read of c's plaintext needs no system call: the engine holds decrypted
 * data, or a whole TLS record is already in the read-ahead buffer. */
static int up_buffered(struct upconn *c)
{
    const unsigned char *h = c->ra + c->ra_off;
    size_t n = c->ra_len - c->ra_off;
    if (br_ssl_engine_current_state(&c->sc.eng) & BR_SSL_RECVAPP) return 1;
    return n >= 5 && n - 5 >= ((size_t)h[3] << 8 | h[4]);
}

static int up_low_write(void *ctx, const unsigned char *buf, size_t len)
{
    struct upconn *c = ctx;
    for (;;) {
        ssize_t w = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (w > 0) return (int)w;
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { c->why = UPX_IO; return -1; }
        if (up_wait(c, POLLOUT) < 0) return -1;
    }
}

/* Close a connection. A healthy one first says so with a TLS close_notify, sent without
 * waiting (one non-blocking send): servers keep the TLS session of a cleanly closed
 * connection resumable (OpenSSL drops it after an unclean end). */
static void up_free(struct upconn *c)
{
    if (!c) return;
    if (c->fd >= 0 && c->why == UPX_OK && br_ssl_engine_last_error(&c->sc.eng) == BR_ERR_OK
        && br_ssl_engine_current_state(&c->sc.eng) != BR_SSL_CLOSED) {
        unsigned char *b;
        size_t n;
        br_ssl_engine_close(&c->sc.eng);
        b = br_ssl_engine_sendrec_buf(&c->sc.eng, &n);
        if (b && n > 0) (void)!send(c->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (c->fd >= 0) close(c->fd);
    free(c);
}

/* TCP connect to one address with a deadline. Returns the fd or -1 (errno set). */
static int tcp_connect(const struct addrinfo *ai, int64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
    int one = 1, err = 0;
    socklen_t el = sizeof err;
    if (fd < 0) return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS && errno != EINTR) goto fail;
        for (;;) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            int64_t left = deadline - mono_ms();
            int r;
            if (left <= 0) { errno = ETIMEDOUT; goto fail; }
            r = poll(&pf, 1, (int)left);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) goto fail;
            if (r == 0) { errno = ETIMEDOUT; goto fail; }
            break;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0) goto fail;
        if (err) { errno = err; goto fail; }
    }
    return fd;
fail:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

/* TLS session resumption and spare connections. A session is saved after each full
 * handshake, per host:port (the name the certificate was verified for), and offered on the
 * next connection to the same place: the server may then skip the key exchange and the
 * certificate (BearSSL falls back to a full, verified handshake when it does not). */
static struct {
    pthread_mutex_t lock;
    struct { char key[300]; br_ssl_session_parameters sp; } sess[UP_SESS_MAX];
    int sess_next;                  /* round-robin slot for a new key */
    int spare_busy;                 /* background connects under way */
    int spare_want;                 /* more spares wanted once a thread is free ... */
    coai_url want_host;             /* ... to this host */
    uint64_t spare_done;            /* background connects finished (either way) */
    pthread_cond_t spare_cond;      /* signalled when one finishes (monotonic: sync_init) */
    uint64_t handshakes, resumed;   /* counters (debug log) */
    int spares;                     /* spare connections wanted (serve mode only) */
} tls_reuse = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void up_sess_key(const coai_url *h, char *out, size_t cap)
{
    snprintf(out, cap, "%s:%s", h->host, h->port);
}

/* Copy the saved session for host h into *sp. 1 found, 0 none. */
static int up_sess_get(const coai_url *h, br_ssl_session_parameters *sp)
{
    char key[300];
    int i, found = 0;
    up_sess_key(h, key, sizeof key);
    pthread_mutex_lock(&tls_reuse.lock);
    for (i = 0; i < UP_SESS_MAX && !found; i++) {
        if (tls_reuse.sess[i].sp.session_id_len && !strcmp(tls_reuse.sess[i].key, key)) {
            *sp = tls_reuse.sess[i].sp;
            found = 1;
        }
    }
    pthread_mutex_unlock(&tls_reuse.lock);
    return found;
}

/* Save (sp != NULL) or forget (sp == NULL) host h's session. */
static void up_sess_put(const coai_url *h, const br_ssl_session_parameters *sp)
{
    char key[300];
    int i, slot = -1;
    up_sess_key(h, key, sizeof key);
    pthread_mutex_lock(&tls_reuse.lock);
    for (i = 0; i < UP_SESS_MAX && slot < 0; i++)
        if (!strcmp(tls_reuse.sess[i].key, key)) slot = i;
    if (slot < 0 && sp) {
        slot = tls_reuse.sess_next;
        tls_reuse.sess_next = (tls_reuse.sess_next + 1) % UP_SESS_MAX;
    }
    if (slot >= 0) {
        copy_str(tls_reuse.sess[slot].key, sizeof tls_reuse.sess[slot].key, key, strlen(key));
        if (sp) tls_reuse.sess[slot].sp = *sp;
        else memset(&tls_reuse.sess[slot].sp, 0, sizeof tls_reuse.sess[slot].sp);
    }
    pthread_mutex_unlock(&tls_reuse.lock);
}

/* ALPN offers for an HTTP/2 connection: h2 first; http/1.1 so a server without h2 says so
 * by choosing it (BearSSL keeps the pointer: static). */
static const char *UP_ALPN_H2[] = { "h2", "http/1.1" };

/* Open a new verified TLS 1.2 connection to host h (h2: offering ALPN h2, for the HTTP/2
 * transport). NULL with *e filled on failure. */
static struct upconn *up_connect_alpn(const coai_url *h, int h2, coai_error *e)
{
    struct addrinfo hints, *res = NULL, *ai;
    struct upconn *c = NULL;
    br_ssl_session_parameters sp;
    int64_t deadline;
    int r, fd = -1, err = 0, verify = 0, resume = 0;
    char what[256];
    memset(&sp, 0, sizeof sp);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    r = getaddrinfo(h->host, h->port, &hints, &res);
    if (r != 0) {
        up_err(e, 502, "upstream_unreachable", "cannot resolve upstream host %s: %s",
                  h->host, r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
        return NULL;
    }
    deadline = mono_ms() + UP_CONNECT_TIMEOUT_MS;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = tcp_connect(ai, deadline);
        if (fd < 0) err = errno;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        up_err(e, err == ETIMEDOUT ? 504 : 502,
                  err == ETIMEDOUT ? "upstream_timeout" : "upstream_unreachable",
                  "cannot connect to upstream %s:%s: %s", h->host, h->port, strerror(err));
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        up_err(e, 500, "server_error", "out of memory");
        return NULL;
    }
    c->fd = fd;
    c->host = *h;
    c->client_fd = -1;
    c->deadline = deadline;
    br_ssl_client_init_full(&c->sc, &c->xc, conf.tas, conf.tas_n);
    br_ssl_engine_set_versions(&c->sc.eng, BR_TLS12, BR_TLS12);
    br_ssl_engine_set_buffer(&c->sc.eng, c->iobuf, sizeof c->iobuf, 1);
    if (h2) br_ssl_engine_set_protocol_names(&c->sc.eng, UP_ALPN_H2, 2);
    resume = up_sess_get(h, &sp);
    if (resume) br_ssl_engine_set_session_parameters(&c->sc.eng, &sp);
    /* The real host name, always: it is both the SNI and the name the certificate must match
     * (a NULL here would silently switch off name verification). */
    if (!br_ssl_client_reset(&c->sc, h->host, resume)) goto tls_fail;
    br_sslio_init(&c->io, &c->sc.eng, up_low_read, c, up_low_write, c);
    if (br_sslio_flush(&c->io) < 0) goto tls_fail;     /* runs the whole handshake */
    {
        br_ssl_session_parameters now;
        int same;
        br_ssl_engine_get_session_parameters(&c->sc.eng, &now);
        same = resume && now.session_id_len == sp.session_id_len
            && memcmp(now.session_id, sp.session_id, sp.session_id_len) == 0;
        if (!same) up_sess_put(h, now.session_id_len ? &now : NULL);
        pthread_mutex_lock(&tls_reuse.lock);
        tls_reuse.handshakes++;
        tls_reuse.resumed += same;
        pthread_mutex_unlock(&tls_reuse.lock);
        memset(&now, 0, sizeof now);
        srv_log(LOG_DEBUG, "upstream TLS handshake with %s: %s", h->host,
                same ? "session resumed" : "full");
        metric_add(M_HANDSHAKES, same ? "result=\"resumed\"" : "result=\"full\"", 1);
    }
    memset(&sp, 0, sizeof sp);
    return c;
tls_fail:
    metric_add(M_HANDSHAKES, "result=\"failed\"", 1);
    memset(&sp, 0, sizeof sp);
    if (resume) up_sess_put(h, NULL);   /* the next attempt starts from a full handshake */
    err = br_ssl_engine_last_error(&c->sc.eng);
    if (c->why == UPX_TIMEOUT) {
        up_err(e, 504, "upstream_timeout", "TLS handshake with %s timed out", h->host);
    } else {
        tls_err_text(err, what, sizeof what, &verify);
        up_err(e, 502, verify ? "upstream_tls_verification_failed" : "upstream_tls_error",
                  "TLS handshake with %s failed: %s", h->host, what);
        e->no_retry = verify;
    }
    up_free(c);
    return NULL;
}

static struct upconn *up_connect(const coai_url *h, coai_error *e)
{
    return up_connect_alpn(h, 0, e);
}

/* A pooled connection is usable only if the server has sent nothing since (no EOF, no
 * close_notify, no stray bytes). */
static int up_alive(struct upconn *c)
{
    struct pollfd pf = { c->fd, POLLIN, 0 };
    int r;
    if (br_ssl_engine_current_state(&c->sc.eng) == BR_SSL_CLOSED) return 0;
    do r = poll(&pf, 1, 0); while (r < 0 && errno == EINTR);
    return r == 0;
}

/* Park an idle connection in the pool (or close it when the pool is full). */
static void pool_park(struct upconn *c)
{
    c->idle_since = mono_ms();
    c->client_fd = -1;
    c->tick = NULL;
    pthread_mutex_lock(&up_pool.lock);
    if (up_pool.n < UP_POOL_MAX && !stopping()) {
        c->next = up_pool.idle;
        up_pool.idle = c;
        up_pool.n++;
        c = NULL;
    }
    pthread_mutex_unlock(&up_pool.lock);
    up_free(c);
}

static int up_same_host(const coai_url *a, const coai_url *b)
{
    return strcmp(a->host, b->host) == 0 && strcmp(a->port, b->port) == 0;
}

/* Spare connections waiting in the pool (for /metrics). Under up_pool.lock. */
static int pool_spares_locked(void)
{
    const struct upconn *u;
    int n = 0;
    for (u = up_pool.idle; u; u = u->next) n += u->spare;
    return n;
}

/* Background connects: each thread opens spares for its host while more are wanted there. */
static void *spare_thread(void *arg)
{
    coai_url *h = arg;              /* the host it is for (malloc'd by spare_kick) */
    for (;;) {
        coai_error e;
        struct upconn *c;
        int more;
        memset(&e, 0, sizeof e);
        c = up_connect(h, &e);
        if (c) {
            c->body_done = 1;
            c->spare = 1;
            pool_park(c);
        } else {
            srv_log(LOG_DEBUG, "spare upstream connection failed: %s", e.message);
        }
        pthread_mutex_lock(&tls_reuse.lock);
        tls_reuse.spare_done++;
        pthread_cond_broadcast(&tls_reuse.spare_cond);
        if (!c || stopping()) tls_reuse.spare_want = 0;             /* a failure ends the batch */
        more = tls_reuse.spare_want > 0 && up_same_host(&tls_reuse.want_host, h);
        if (more) tls_reuse.spare_want--;
        else tls_reuse.spare_busy--;
        pthread_mutex_unlock(&tls_reuse.lock);
        if (!more) break;
    }
    free(h);
    return NULL;
}

/* The pool is empty: if a spare is being opened, wait (UP_SPARE_WAIT_MS at most) until one
 * finishes, since it started earlier than a connect begun now would. 1 one finished. */
static int spare_wait(void)
{
    int64_t end = mono_ms() + UP_SPARE_WAIT_MS;
    uint64_t seen;
    int done = 0;
    pthread_mutex_lock(&tls_reuse.lock);
    seen = tls_reuse.spare_done;
    while (tls_reuse.spare_busy > 0 && tls_reuse.spare_done == seen)
        if (cond_wait_ms(&tls_reuse.spare_cond, &tls_reuse.lock, end - mono_ms()) != 0) break;
    done = tls_reuse.spare_done != seen;
    pthread_mutex_unlock(&tls_reuse.lock);
    return done;
}

/* Open a spare connection to host h in the background (at most UP_SPARE_PAR connects at a
 * time; more wanted for the same host are queued), so that the next run does not wait for a
 * handshake:
 *   replace = 0: a connection was just taken and fewer than UP_SPARE_MIN idle ones to h are
 *                left;
 *   replace = 1: the server closed a connection after a complete response (an upstream that
 *                closes each RunSSE): one for one, up to the pool's cap.
 * A spare nobody takes is closed after UP_POOL_IDLE_MS like any pooled connection. */
static void spare_kick(const coai_url *h, int replace)
{
    pthread_attr_t a;
    pthread_t t;
    struct upconn *p;
    coai_url *arg;
    int go, n = 0;
    pthread_mutex_lock(&up_pool.lock);
    for (p = up_pool.idle; p; p = p->next) n += up_same_host(&p->host, h);   /* per host */
    go = !stopping() && tls_reuse.spares;
    pthread_mutex_unlock(&up_pool.lock);
    if (!go) return;
    pthread_mutex_lock(&tls_reuse.lock);
    go = n + tls_reuse.spare_busy + tls_reuse.spare_want < (replace ? UP_POOL_MAX : UP_SPARE_MIN);
    if (go && tls_reuse.spare_busy >= UP_SPARE_PAR) {
        if (!tls_reuse.spare_want || up_same_host(&tls_reuse.want_host, h)) {
            tls_reuse.want_host = *h;     /* a busy thread for this host opens it next */
            tls_reuse.spare_want++;
        }
        go = 0;
    } else if (go) {
        tls_reuse.spare_busy++;
    }
    pthread_mutex_unlock(&tls_reuse.lock);
    if (!go) return;
    arg = malloc(sizeof *arg);
    if (arg) *arg = *h;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (!arg || pthread_create(&t, &a, spare_thread, arg) != 0) {
        free(arg);
        pthread_mutex_lock(&tls_reuse.lock);
        tls_reuse.spare_busy--;
        pthread_mutex_unlock(&tls_reuse.lock);
    }
    pthread_attr_destroy(&a);
}

/* A connection to host h for one request: an idle pooled one to that host, else a new one
 * (fresh = 1 forces new). The pool is shared; each entry remembers its host. */
static struct upconn *up_get_host(const coai_url *h, int fresh, int client_fd, coai_error *e)
{
    struct upconn *c = NULL;
    int64_t now = mono_ms();
    int waited = 0;
    while (!fresh) {
        struct upconn **pp;
        pthread_mutex_lock(&up_pool.lock);
        for (pp = &up_pool.idle; *pp && !up_same_host(&(*pp)->host, h); pp = &(*pp)->next) {}
        c = *pp;
        if (c) { *pp = c->next; up_pool.n--; }
        pthread_mutex_unlock(&up_pool.lock);
        if (!c && !waited++ && spare_wait()) continue;
        if (!c) break;
        if (now - c->idle_since < UP_POOL_IDLE_MS && up_alive(c)) {
            c->reused = 1;
            c->spare = 0;
            break;
        }
        up_free(c);
        c = NULL;
    }
    if (!c) c = up_connect(h, e);
    if (!c) return NULL;
    spare_kick(h, 0);               /* after a success only: never doubles a failing connect */
    c->next = NULL;
    c->client_fd = client_fd;
    c->client_events = POLLIN;
    c->tick = NULL;
    c->tick_ctx = NULL;
    c->why = UPX_OK;
    c->status = 0;
    c->body_mode = BODY_NONE;
    c->body_done = 0;
    c->got_bytes = 0;
    c->must_close = 0;
    c->end = 0;
    c->rlen = c->roff = 0;
    return c;
}

/* Close pooled connections idle for longer than UP_POOL_IDLE_MS (all of them when
 * everything = 1). Called from the accept loop about twice a second. */
static void pool_prune(int everything)
{
    struct upconn *dead = NULL, **pp, *c;
    int64_t now = mono_ms();
    pthread_mutex_lock(&up_pool.lock);
    for (pp = &up_pool.idle; *pp;) {
        c = *pp;
        if (everything || now - c->idle_since >= UP_POOL_IDLE_MS) {
            *pp = c->next;
            up_pool.n--;
            c->next = dead;
            dead = c;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&up_pool.lock);
    while (dead) {
        c = dead;
        dead = c->next;
        up_free(c);
    }
}

/* Done with a connection: park it if its last response was read to the end, else close it. */
static void up_release(struct upconn *c)
{
    coai_url host;
    int replace;
    if (!c) return;
    if (c->body_done && !c->must_close && c->why == UPX_OK && c->rlen == c->roff
        && c->ra_len == c->ra_off && !stopping()) {
        pool_park(c);
        return;
    }
    replace = c->body_done && c->must_close && c->why == UPX_OK;
    host = c->host;
    up_free(c);
    if (replace) spare_kick(&host, 1);
}

/* Describe an I/O failure on c into e. `stage` names what was being done. */
static void up_io_error(struct upconn *c, coai_error *e, const char *stage)
{
    char what[256];
    int verify = 0, err = br_ssl_engine_last_error(&c->sc.eng);
    /* a stage is a phrase ("reading a response body") or a path: "while calling /a/b" */
    const char *call = stage[0] == '/' ? "calling " : "";
    switch (c->why) {
    case UPX_CANCELLED:
        up_err(e, 499, "client_closed", "client went away while %s%s", call, stage);
        return;
    case UPX_TIMEOUT:
        up_err(e, 504, "upstream_timeout", "upstream timed out while %s%s", call, stage);
        return;
    case UPX_EOF:
        up_err(e, 502, "upstream_truncated", "upstream closed the connection while %s%s",
               call, stage);
        return;
    default:
        break;
    }
    if (err != BR_ERR_OK && err != BR_ERR_IO) {
        tls_err_text(err, what, sizeof what, &verify);
        up_err(e, 502, "upstream_tls_error", "%s while %s%s", what, call, stage);
    } else {
        up_err(e, 502, "upstream_unreachable", "upstream I/O error while %s%s", call, stage);
    }
}

/* Send a request: head (already complete, ending in the blank line) then body. */
static int up_send(struct upconn *c, const coai_buf *head, const void *body, size_t blen)
{
    c->deadline = mono_ms() + UP_IO_TIMEOUT_MS;
    if (c->end && c->deadline > c->end) c->deadline = c->end;
    c->io_timeout_ms = 0;
    if (cap_on()) cap_head_http1(head);
    if (br_sslio_write_all(&c->io, head->data, head->len) < 0) return -1;
    if (blen && br_sslio_write_all(&c->io, body, blen) < 0) return -1;
    return br_sslio_flush(&c->io);
}

/* Read more raw response bytes into rbuf (compacting first). 1 got bytes, 0 EOF, -1 error. */
static int up_fill(struct upconn *c)
{
    int n;
    if (c->roff > 0) {
        memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
        c->rlen -= c->roff;
        c->roff = 0;
    }
    if (c->rlen == sizeof c->rbuf) { c->why = UPX_IO; return -1; }
    n = br_sslio_read(&c->io, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen);
    if (n < 0) {
        int err = br_ssl_engine_last_error(&c->sc.eng);
        /* close_notify (err 0), or a TCP EOF without it: the HTTP framing decides whether
         * that was a clean end. */
        if (err == BR_ERR_OK || (err == BR_ERR_IO && c->why == UPX_EOF)) return 0;
        return -1;
    }
    c->rlen += (size_t)n;
    c->got_bytes = 1;
    return 1;
}

/* 1 when the unread response bytes start with an HTTP/2 frame header on stream 0 (SETTINGS
 * or GOAWAY): what an HTTP/2-only server sends in answer to an HTTP/1.1 request; 2 when
 * they might still become one (fewer than 9 bytes, the first one 0: never HTTP/1.x). */
static int up_h2_frame(const struct upconn *c)
{
    const unsigned char *b = c->rbuf + c->roff;
    size_t n = c->rlen - c->roff;
    uint32_t len;
    if (n == 0 || b[0] != 0) return 0;
    if (n < 9) return 2;
    len = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2];
    if ((b[5] & 0x7f) | b[6] | b[7] | b[8]) return 0;
    if (b[3] == 4) return len % 6 == 0;         /* SETTINGS */
    if (b[3] == 7) return len >= 8;             /* GOAWAY */
    return 0;
}

/* Read the response head. 0 ok (c->status and the body framing set), -1 with *e filled
 * (code upstream_http2_only when the answer is HTTP/2 frames). Interim 1xx heads are
 * skipped. */
static int up_read_head(struct upconn *c, coai_error *e, const char *stage)
{
    int interim = 0;
    for (;;) {
        coai_http_response rs;
        int h2 = up_h2_frame(c);
        long hl = h2 == 2 ? COAI_MORE : h2 ? 0 : c->rlen > c->roff
                ? coai_http_parse_response((const char *)c->rbuf + c->roff, c->rlen - c->roff, &rs)
                : COAI_MORE;
        if (h2 == 1) {
            c->must_close = 1;
            up_err(e, 502, "upstream_http2_only", "https://%s%s answered with HTTP/2 frames "
                   "instead of an HTTP/1.1 response while %s", c->host.authority,
                   c->host.prefix, stage);
            return -1;
        }
        if (hl == COAI_MORE) {
            int r;
            if (c->rlen - c->roff >= UP_HEAD_MAX) {
                up_err(e, 502, "upstream_protocol_error",
                          "upstream response head too large while %s", stage);
                return -1;
            }
            r = up_fill(c);
            if (r == 0) {
                c->why = UPX_EOF;
                up_io_error(c, e, stage);
                return -1;
            }
            if (r < 0) { up_io_error(c, e, stage); return -1; }
            continue;
        }
        if (hl <= 0) {
            up_err(e, 502, "upstream_protocol_error",
                      "malformed upstream response head while %s", stage);
            return -1;
        }
        c->roff += (size_t)hl;
        if (rs.status >= 100 && rs.status < 200) {
            /* a server that sends nothing but interim heads never answers */
            if (++interim > UP_INTERIM_MAX) {
                c->must_close = 1;
                up_err(e, 502, "upstream_protocol_error",
                       "upstream sent more than %d interim (1xx) responses while %s",
                       UP_INTERIM_MAX, stage);
                return -1;
            }
            continue;
        }
        c->status = rs.status;
        c->must_close = !rs.keep_alive;
        memset(&c->cd, 0, sizeof c->cd);
        if (rs.status == 204 || rs.status == 304) {
            c->body_mode = BODY_NONE;
        } else if (rs.chunked) {
            c->body_mode = BODY_CHUNKED;
        } else if (rs.content_length >= 0) {
            c->body_mode = BODY_LENGTH;
            c->body_left = (uint64_t)rs.content_length;
        } else {
            c->body_mode = BODY_EOF;
            c->must_close = 1;
        }
        c->body_done = c->body_mode == BODY_NONE
                    || (c->body_mode == BODY_LENGTH && c->body_left == 0);
        return 0;
    }
}

/* Next piece of the response body. Returns its length (> 0) with *p pointing into rbuf
 * (valid until the next call), 0 at the framed end of the body, -1 on error (c->why, and a
 * truncated body reads as UPX_EOF). */
static long up_body(struct upconn *c, const unsigned char **p)
{
    for (;;) {
        size_t avail = c->rlen - c->roff;
        int r;
        if (c->body_done) return 0;
        if (avail > 0) {
            if (c->body_mode == BODY_LENGTH) {
                size_t n = avail < c->body_left ? avail : (size_t)c->body_left;
                *p = c->rbuf + c->roff;
                c->roff += n;
                c->body_left -= n;
                if (c->body_left == 0) c->body_done = 1;
                return (long)n;
            }
            if (c->body_mode == BODY_EOF) {
                *p = c->rbuf + c->roff;
                c->roff = c->rlen;
                return (long)avail;
            }
            if (c->body_mode == BODY_CHUNKED) {
                size_t used = 0, out = 0;
                unsigned char *base = c->rbuf + c->roff;
                coai_result cr = coai_chunked_feed(&c->cd, (char *)base, avail, &used, &out);
                if (cr < 0) { c->why = UPX_IO; return -1; }
                c->roff += used;
                if (cr == COAI_DONE) c->body_done = 1;
                if (out > 0) { *p = base; return (long)out; }
                if (c->body_done) return 0;
                if (used > 0) continue;
            }
        }
        r = up_fill(c);
        if (r < 0) return -1;
        if (r == 0) {
            if (c->body_mode == BODY_EOF) { c->body_done = 1; return 0; }
            c->why = UPX_EOF;      /* the framing promised more: truncated */
            return -1;
        }
    }
}

/* Read the whole body into out. Past out->max the reading stops (a body that never ends
 * must not keep the caller reading): out->err is set, the connection is not reused, and the
 * result is still 0 so the caller can report the status it got. 0 ok, -1 I/O error. */
static int up_body_all(struct upconn *c, coai_buf *out)
{
    for (;;) {
        const unsigned char *p;
        long n = up_body(c, &p);
        if (n < 0) return -1;
        if (n == 0) return 0;
        if (out->err) return 0;
        if (out->max && out->len + (size_t)n > out->max) {
            size_t room = out->max - out->len;
            if (room) coai_buf_append(out, p, room);
            out->err = 1;
            c->must_close = 1;
            return 0;
        }
        coai_buf_append(out, p, (size_t)n);
    }
}

/* Build a request head for host hp (NULL: the base URL). kind: UPH_*. The gRPC-web set is
 * the original's, byte for byte. The Connect set is what the current CLI sends: no
 * x-cursor-checksum or x-cursor-timezone (its interceptor has neither, and the live server
 * accepts requests without the checksum; cursor-upstream-extras.md 3.2/3.4),
 * connect-protocol-version: 1, connect-es/1.6.1, and since autumn 2026 (cursor-2026-autumn.md
 * 5.2) x-original-request-id (up_orig_rid) and x-blob-encryption-key (blob_key). The token
 * goes into `h` and nowhere else. */
static int up_head_host(coai_buf *h, const coai_url *hp, const char *path, int kind,
                        const char *request_id, const char *token, size_t token_len,
                        size_t body_len)
{
    char cs[COAI_CHECKSUM_SIZE];
    coai_str tok;
    int json = kind == UPH_JSON;
    if (!hp) hp = &conf.base;
    if (kind == UPH_CONNECT_STREAM || kind == UPH_CONNECT_UNARY || kind == UPH_CONNECT_JSON) {
        coai_buf_printf(h, "POST %s%s HTTP/1.1\r\nhost: %s\r\nauthorization: Bearer ",
                        hp->prefix, path, hp->authority);
        coai_buf_append(h, token, token_len);
        coai_buf_printf(h,
                        "\r\ncontent-type: %s\r\n"
                        "user-agent: connect-es/1.6.1\r\n"
                        "connect-protocol-version: 1\r\n"
                        "x-cursor-client-version: %s\r\n"
                        "x-cursor-client-type: cli\r\n"
                        "x-ghost-mode: true\r\n"
                        "%s"
                        "x-request-id: %s\r\n"
                        "x-original-request-id: %s\r\n",
                        kind == UPH_CONNECT_STREAM ? "application/connect+proto"
                        : kind == UPH_CONNECT_JSON ? "application/json" : "application/proto",
                        conf.client_version,
                        /* RunSSE only, as the CLI and the SDK send it */
                        kind == UPH_CONNECT_STREAM ? "x-cursor-streaming: true\r\n" : "",
                        request_id, up_orig_rid ? up_orig_rid : request_id);
        if (blob_key()[0]) coai_buf_printf(h, "x-blob-encryption-key: %s\r\n", blob_key());
        if (up_tools_hdr && up_tools_hdr[0].len)
            coai_buf_printf(h, "%.*s: %.*s\r\n", (int)up_tools_hdr[0].len, up_tools_hdr[0].ptr,
                            (int)up_tools_hdr[1].len, up_tools_hdr[1].ptr);
        coai_buf_printf(h, "content-length: %zu\r\n\r\n", body_len);
        return h->err ? -1 : 0;
    }
    tok.ptr = token;
    tok.len = token_len;
    coai_checksum(cs, tok, wall_ms());
    coai_buf_printf(h, "POST %s%s HTTP/1.1\r\nhost: %s\r\nauthorization: Bearer ",
                    hp->prefix, path, hp->authority);
    coai_buf_append(h, token, token_len);
    coai_buf_printf(h,
                    "\r\ncontent-type: %s\r\n"
                    "user-agent: connect-es/1.4.0\r\n"
                    "x-cursor-checksum: %s\r\n"
                    "x-cursor-client-version: %s\r\n"
                    "x-cursor-client-type: cli\r\n"
                    "x-cursor-timezone: %s\r\n"
                    "x-ghost-mode: true\r\n",
                    json ? "application/json" : "application/grpc-web+proto", cs,
                    conf.client_version, conf.timezone);
    if (json)
        coai_buf_printf(h, "x-request-id: %s\r\naccept: application/json\r\n"
                        "connect-protocol-version: 1\r\n", request_id);
    else
        coai_buf_printf(h, "x-cursor-streaming: true\r\nx-request-id: %s\r\n", request_id);
    if (!json && up_tools_hdr && up_tools_hdr[0].len)
        coai_buf_printf(h, "%.*s: %.*s\r\n", (int)up_tools_hdr[0].len, up_tools_hdr[0].ptr,
                        (int)up_tools_hdr[1].len, up_tools_hdr[1].ptr);
    coai_buf_printf(h, "content-length: %zu\r\n\r\n", body_len);
    return h->err ? -1 : 0;
}

/* One request on a pooled (else new) connection: send head and body, read the response head
 * and the whole body (capped by body->max). Retries once on a fresh connection when a pooled
 * one turns out dead before any response byte. `what` names the call in error messages (never
 * a secret). 0 with *status set (any HTTP status), -1 with *e filled. */
static int up_exchange_host(const coai_url *hp, const coai_buf *head, const void *req,
                            size_t req_len, const char *what, int client_fd,
                            int (*tick)(void *), void *tick_ctx, int *status, coai_buf *body,
                            coai_error *e)
{
    struct upconn *c = NULL;
    int attempt, rc = -1;
    /* One overall deadline for the whole call, retry included: bytes that trickle in, interim
     * heads or a long body never postpone it. */
    int64_t end = mono_ms() + (conf.up_call_ms > 0 ? conf.up_call_ms : UP_CALL_TIMEOUT_S * 1000);
    for (attempt = 0; attempt < 2; attempt++) {
        c = up_get_host(hp ? hp : &conf.base, attempt > 0, client_fd, e);
        if (!c) goto done;
        c->tick = tick;
        c->tick_ctx = tick_ctx;
        c->end = end;
        if (up_send(c, head, req, req_len) == 0) {
            c->deadline = mono_ms() + UP_IO_TIMEOUT_MS;
            if (c->deadline > end) c->deadline = end;
            c->io_timeout_ms = UP_IO_TIMEOUT_MS;
            if (up_read_head(c, e, what) == 0) break;
        } else {
            up_io_error(c, e, "sending a request");
        }
        /* A timeout is not a dead pooled connection: the upstream is slow, and asking again
         * would only double the wait. */
        if (!(c->reused && !c->got_bytes && c->why != UPX_CANCELLED && c->why != UPX_TIMEOUT))
            goto done;
        srv_log(LOG_DEBUG, "pooled upstream connection was dead; retrying on a new one");
        up_free(c);
        c = NULL;
    }
    if (!c) goto done;
    if (up_body_all(c, body) < 0) {
        up_io_error(c, e, "reading a response body");
        goto done;
    }
    *status = c->status;
    rc = 0;
done:
    if (rc == 0) up_release(c);
    else up_free(c);
    return rc;
}

static int up_exchange(const coai_buf *head, const void *req, size_t req_len, const char *what,
                       int client_fd, int (*tick)(void *), void *tick_ctx, int *status,
                       coai_buf *body, coai_error *e)
{
    return up_exchange_host(NULL, head, req, req_len, what, client_fd, tick, tick_ctx, status,
                            body, e);
}

/* One unary call with the current access token (spec 2.1/2.2 headers). *gen (may be NULL)
 * gets the generation of the token used. tick (may be NULL) is called about once a second
 * while waiting; -1 from it cancels the call. 0 with *status set, -1 with *e filled. */
static int up_call_host_tick(const coai_url *hp, const char *path, int kind, const void *req,
                             size_t req_len, const char *request_id, int client_fd,
                             int (*tick)(void *), void *tick_ctx, uint64_t *gen, int *status,
                             coai_buf *body, coai_error *e)
{
    char token[SRV_TOKEN_MAX];
    size_t tl = cred_token(token, sizeof token, gen);
    coai_buf head = { 0 };
    int rc = -1;
    if (up_head_host(&head, hp, path, kind, request_id, token, tl, req_len)) {
        up_err(e, 500, "server_error", "out of memory");
    } else {
        rc = up_exchange_host(hp, &head, req, req_len, path, client_fd, tick, tick_ctx,
                              status, body, e);
    }
    memset(token, 0, sizeof token);
    if (head.data) memset(head.data, 0, head.len);
    coai_buf_free(&head);
    return rc;
}

static int up_call_host(const coai_url *hp, const char *path, int kind, const void *req,
                        size_t req_len, const char *request_id, int client_fd, uint64_t *gen,
                        int *status, coai_buf *body, coai_error *e)
{
    return up_call_host_tick(hp, path, kind, req, req_len, request_id, client_fd, NULL, NULL,
                             gen, status, body, e);
}

/* On the base URL: json = 1 Connect unary JSON, else the gRPC-web agent set. */
static int up_call(const char *path, int json, const void *req, size_t req_len,
                   const char *request_id, int client_fd, uint64_t *gen, int *status,
                   coai_buf *body, coai_error *e)
{
    return up_call_host(NULL, path, json ? UPH_JSON : UPH_AGENT, req, req_len, request_id,
                        client_fd, gen, status, body, e);
}

/* One call to an /auth endpoint (spec 14): GET without a body (poll) or POST "{}" (refresh,
 * exchange), Content-Type: application/json, the bearer (refresh token or API key) when not
 * NULL. Never on a client's behalf: no client socket is watched. 0 with *status, -1 *e. */
static int auth_call(const char *method, const char *target, const char *what,
                     const char *bearer, int (*tick)(void *), void *tick_ctx, int *status,
                     coai_buf *body, coai_error *e)
{
    coai_buf head = { 0 };
    int post = strcmp(method, "POST") == 0, rc = -1;
    coai_buf_printf(&head, "%s %s%s HTTP/1.1\r\nhost: %s\r\n", method, conf.up_prefix, target,
                    conf.up_authority);
    if (bearer) {
        coai_buf_puts(&head, "authorization: Bearer ");
        coai_buf_puts(&head, bearer);
        coai_buf_puts(&head, "\r\n");
    }
    coai_buf_printf(&head, "content-type: application/json\r\naccept: application/json\r\n"
                    "user-agent: connect-es/1.4.0\r\n%s\r\n",
                    post ? "content-length: 2\r\n" : "");
    if (head.err) up_err(e, 500, "server_error", "out of memory");
    else rc = up_exchange(&head, post ? "{}" : NULL, post ? 2 : 0, what, -1, tick, tick_ctx,
                          status, body, e);
    if (head.data) memset(head.data, 0, head.len);
    coai_buf_free(&head);
    return rc;
}

/* ---- the run over HTTP/1.1: RunSSE + BidiAppend (TR_HTTP1) ---- */

/* One AgentClientMessage -> one BidiAppend with the next seqno on the run's agent host, in
 * the run's profile (gRPC-web: an envelope; Connect: the bare BidiAppendRequest as
 * application/proto). Every message the proxy
 * sends upstream goes through here (reader replies, tool results, heartbeats). The seqno is
 * taken and the body encoded under send_mu, so seqnos stay 0, 1, 2 ... without gaps whatever
 * the mix; the call itself runs without the lock, so an append that stalls (a heartbeat on
 * a stuck connection) never holds up the next one (issue 22 item 2). Appends are
 * independent unary calls that carry their seqno, as a peer's fire-and-forget heartbeats
 * are (cursor-2026-clients.md 2). client_fd (or -1) is watched for a disconnect; tick (may
 * be NULL) is called about once a second and cancels with -1; failures go to *err. */
static int run_append(struct run *r, const unsigned char *msg, size_t n, int client_fd,
                      int (*tick)(void *), void *tick_ctx, coai_error *err, int *cancelled)
{
    coai_buf body = { 0 }, resp = { 0 };
    int status = 0, rc = -1, connect = r->up.profile == PROF_CONNECT, locked = 0;
    uint64_t gen = 0;
    int64_t seqno;
    resp.max = UP_ERR_BODY_MAX;
    if (cap_on()) cap_client(msg, n);
    if (r->mu_init) { pthread_mutex_lock(&r->up.send_mu); locked = 1; }
    if (coai_encode_bidi_append(&body, msg, n, coai_str_c(r->up.request_id), r->up.seqno) < 0
        || body.err) {
        coai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    if (connect && conf.connect_json) {
        /* Connect JSON, as one peer sends it over HTTP/1.1: proto3 JSON of the same
         * BidiAppendRequest (data is already hex text; int64 as a string) */
        coai_buf_reset(&body);
        coai_buf_puts(&body, "{\"data\":\"");
        coai_hex_append(&body, msg, n);
        coai_buf_printf(&body, "\",\"requestId\":{\"requestId\":\"%s\"},\"appendSeqno\":\"%lld\"}",
                        r->up.request_id, (long long)r->up.seqno);
        if (body.err) {
            coai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            goto done;
        }
    } else if (connect) {      /* Connect unary binary: no envelope */
        memmove(body.data, body.data + 5, body.len - 5);
        body.len -= 5;
    }
    seqno = r->up.seqno++;
    if (locked) { pthread_mutex_unlock(&r->up.send_mu); locked = 0; }
    srv_log(LOG_DEBUG, "run %s: BidiAppend seqno %lld (%zu bytes)", r->up.request_id,
            (long long)seqno, n);
    up_orig_rid = r->up.orig_id[0] ? r->up.orig_id : NULL;
    up_tools_hdr = r->up.tools_hdr;
    rc = up_call_host_tick(&r->up.host, PATH_APPEND, !connect ? UPH_AGENT
                           : conf.connect_json ? UPH_CONNECT_JSON : UPH_CONNECT_UNARY, body.data,
                           body.len, r->up.request_id, client_fd, tick, tick_ctx, &gen, &status,
                           &resp, err);
    up_orig_rid = NULL;
    up_tools_hdr = NULL;
    if (rc < 0) {
        if (err->status == 499 && cancelled && !r->held.hollow_hit) *cancelled = 1;
        goto done;
    }
    rc = -1;
    if (status < 200 || status > 299) {
        if (err == &r->err) r->fb.http_status = status;
        coai_error_from_http(status, (const char *)resp.data, resp.len, err);
        if (err->status == 401) {
            /* seqno 0: handle_chat renews and retries; later: the next request renews */
            __atomic_store_n(&r->fb.upstream_401, 1, __ATOMIC_RELAXED);
            cred_mark_rejected(gen);
        }
        goto done;
    }
    rc = 0;
done:
    if (locked) pthread_mutex_unlock(&r->up.send_mu);
    coai_buf_free(&body);
    coai_buf_free(&resp);
    return rc;
}

/* RunSSE request, its response head, then BidiAppend seqno 0 (awaited). The append waits
 * for the head: the server registers the run when it answers the RunSSE, and an append
 * that races ahead of that is lost (cursor-2026-clients.md 7.1; issue 10 item 3).
 * 0 ok, 1 retry on a fresh connection (a pooled one was dead before any byte came back),
 * -1 r->err filled. */
/* The header names the last run head carried, per transport (TR_HTTP1: RunSSE, TR_H2: Run),
 * for `doctor`; never a value. Under run_head_lock. */
static char run_head_names[2][400];

/* Remember the names of an HTTP/1.1 head (after its request line, up to the empty line). */
static void run_head_note_h1(const coai_buf *head)
{
    const char *p = head->data ? memchr(head->data, '\n', head->len) : NULL;
    const char *end = head->data ? (const char *)head->data + head->len : NULL;
    char out[sizeof run_head_names[0]];
    size_t n = 0;
    while (p && ++p < end && *p != '\r' && *p != '\n') {
        const char *c = memchr(p, ':', (size_t)(end - p)), *nl = memchr(p, '\n', (size_t)(end - p));
        if (!c || !nl || c > nl) break;
        if (n + (size_t)(c - p) + 3 < sizeof out) {
            if (n) { out[n++] = ','; out[n++] = ' '; }
            memcpy(out + n, p, (size_t)(c - p));
            n += (size_t)(c - p);
        }
        p = nl;
    }
    out[n] = 0;
    pthread_mutex_lock(&run_head_lock);
    memcpy(run_head_names[TR_HTTP1], out, n + 1);
    pthread_mutex_unlock(&run_head_lock);
}

static int run_start(struct run *r, int fresh, const char *token, size_t tl)
{
    coai_buf head = { 0 }, body = { 0 };
    int rc;
    up_orig_rid = r->up.orig_id;
    up_tools_hdr = r->up.tools_hdr;
    rc = coai_encode_run_body(&body, coai_str_c(r->up.request_id)) < 0
         || up_head_host(&head, &r->up.host, PATH_RUNSSE,
                         r->up.profile == PROF_CONNECT ? UPH_CONNECT_STREAM : UPH_AGENT,
                         r->up.request_id, token, tl, body.len) < 0 ? -1 : 0;
    up_orig_rid = NULL;
    up_tools_hdr = NULL;
    if (rc < 0) {
        coai_error_set(&r->err, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    run_head_note_h1(&head);
    rc = -1;
    r->up.sse = up_get_host(&r->up.host, fresh, r->c->fd, &r->err);
    if (!r->up.sse) goto done;
    srv_log(LOG_DEBUG, "run %s: RunSSE to %s (%s) on a %s connection", r->up.request_id,
            r->up.host.authority, PROFILE_NAME[r->up.profile],
            r->up.sse->reused ? "pooled" : "new");
    if (up_send(r->up.sse, &head, body.data, body.len) < 0) {
        up_io_error(r->up.sse, &r->err, "sending RunSSE");
        goto retry;
    }
    r->up.sse->tick = run_tick;
    r->up.sse->tick_ctx = r;
    r->up.sse->io_timeout_ms = 0;
    run_watch_start(r);
    if (up_read_head(r->up.sse, &r->err, "waiting for the RunSSE response") < 0) goto retry;
    r->up.t_head = mono_ms();
    if (r->up.sse->status < 200 || r->up.sse->status > 299) {
        coai_buf eb = { 0 };
        eb.max = UP_ERR_BODY_MAX;
        r->fb.http_status = r->up.sse->status;
        r->up.sse->io_timeout_ms = UP_IO_TIMEOUT_MS;
        r->up.sse->deadline = mono_ms() + UP_IO_TIMEOUT_MS;
        r->up.sse->end = mono_ms() + conf.up_call_ms;
        if (r->up.sse->deadline > r->up.sse->end) r->up.sse->deadline = r->up.sse->end;
        up_body_all(r->up.sse, &eb);
        coai_error_from_http(r->up.sse->status, (const char *)eb.data, eb.len, &r->err);
        if ((r->up.sse->status == 400 && ci_contains(eb.data, eb.len, "illegal request line"))
            || r->up.sse->status == 505)
            snprintf(r->fb.h1_refused, sizeof r->fb.h1_refused, r->up.sse->status == 505
                     ? "a 505 \"HTTP Version Not Supported\"" : "a 400 \"illegal request line\"");
        /* 464 is what Cursor's load balancer answers HTTP/1.1 on an HTTP/2-only route
         * (cursor-2026-autumn.md 4): from a host other than the base URL it means that host is
         * HTTP/2-only, so the run moves to the base URL. From the base URL itself it stays the
         * wrong-profile answer of issue 24 (profile_wrong), the tested fallback. */
        else if (r->up.sse->status == 464 && !up_same_host(&r->up.host, &conf.base))
            snprintf(r->fb.h1_refused, sizeof r->fb.h1_refused,
                     "a 464, the load balancer's answer to HTTP/1.1 on an HTTP/2-only route");
        coai_buf_free(&eb);
        if (r->err.status == 401) r->fb.upstream_401 = 1;
        goto done;
    }
    srv_log(LOG_DEBUG, "run %s: RunSSE head after %lld ms; BidiAppend seqno 0", r->up.request_id,
            (long long)(r->up.t_head - r->up.t_start));
    if (run_send(r, r->up.run_msg.data, r->up.run_msg.len) < 0) goto done;
    rc = 0;
    goto done;
retry:
    if (r->err.status == 499) r->out.cancelled = 1;
    else if (!fresh && r->up.sse->reused && !r->up.sse->got_bytes) rc = 1;
    else if (r->err.code && strcmp(r->err.code, "upstream_http2_only") == 0)
        snprintf(r->fb.h1_refused, sizeof r->fb.h1_refused, "HTTP/2 frames");
    else if (!r->up.sse->reused && !r->up.sse->got_bytes && r->up.sse->why == UPX_EOF)
        snprintf(r->fb.h1_refused, sizeof r->fb.h1_refused, "a close before any byte");
done:
    if (rc != 0) { up_free(r->up.sse); r->up.sse = NULL; }
    if (head.data) memset(head.data, 0, head.len);
    coai_buf_free(&head);
    coai_buf_free(&body);
    return rc;
}

/* 1 when the next up_body() has body bytes without waiting: decoded bytes already
 * buffered (chunk framing alone does not count: a copy of the decoder looks), TLS
 * application data inside the engine, or the socket becomes readable within ms. */
static int up_readable(struct upconn *c, int ms)
{
    struct pollfd pf;
    int r;
    size_t avail = c->rlen - c->roff;
    if (c->body_done) return 1;
    if (avail > 0) {
        if (c->body_mode != BODY_CHUNKED) return 1;
        {
            unsigned char tmp[UP_RBUF];
            coai_chunked_decoder cd = c->cd;
            size_t used = 0, out = 0;
            coai_result cr;
            memcpy(tmp, c->rbuf + c->roff, avail);
            cr = coai_chunked_feed(&cd, (char *)tmp, avail, &used, &out);
            if (cr < 0 || cr == COAI_DONE || out > 0) return 1;
        }
    }
    if (up_buffered(c)) return 1;                   /* a whole TLS record read ahead */
    pf.fd = c->fd;
    pf.events = POLLIN;
    pf.revents = 0;
    do r = poll(&pf, 1, ms); while (r < 0 && errno == EINTR);
    return r > 0;
}

/* ======================================================================== */
/* Trust anchors (PEM bundle -> br_x509_trust_anchor array)                 */
/* ======================================================================== */

struct ta_build {
    coai_buf der;           /* current certificate DER */
    coai_buf dn;            /* current certificate subject DN */
    int err;
};

static void ta_der_append(void *ctx, const void *p, size_t n)
{
    struct ta_build *b = ctx;
    if (coai_buf_append(&b->der, p, n)) b->err = 1;
}

static void ta_dn_append(void *ctx, const void *p, size_t n)
{
    struct ta_build *b = ctx;
    if (coai_buf_append(&b->dn, p, n)) b->err = 1;
}

static void *memdup(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (d && n) memcpy(d, p, n);
    return d;
}

/* Decode one DER certificate into a trust anchor. 0 added, 1 skipped, -1 out of memory. */
static int ta_add(struct ta_build *b, br_x509_trust_anchor **tas, size_t *n, size_t *cap)
{
    br_x509_decoder_context dc;
    const br_x509_pkey *pk;
    br_x509_trust_anchor ta;
    memset(&ta, 0, sizeof ta);
    coai_buf_reset(&b->dn);
    br_x509_decoder_init(&dc, ta_dn_append, b);
    br_x509_decoder_push(&dc, b->der.data, b->der.len);
    pk = br_x509_decoder_get_pkey(&dc);
    if (!pk || b->err) return b->err ? -1 : 1;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        br_x509_trust_anchor *t = realloc(*tas, nc * sizeof *t);
        if (!t) return -1;
        *tas = t;
        *cap = nc;
    }
    ta.dn.data = memdup(b->dn.data, b->dn.len);
    ta.dn.len = b->dn.len;
    ta.flags = br_x509_decoder_isCA(&dc) ? BR_X509_TA_CA : 0;
    ta.pkey.key_type = pk->key_type;
    if (pk->key_type == BR_KEYTYPE_RSA) {
        ta.pkey.key.rsa.n = memdup(pk->key.rsa.n, pk->key.rsa.nlen);
        ta.pkey.key.rsa.nlen = pk->key.rsa.nlen;
        ta.pkey.key.rsa.e = memdup(pk->key.rsa.e, pk->key.rsa.elen);
        ta.pkey.key.rsa.elen = pk->key.rsa.elen;
        if (!ta.pkey.key.rsa.n || !ta.pkey.key.rsa.e) return -1;
    } else if (pk->key_type == BR_KEYTYPE_EC) {
        ta.pkey.key.ec.curve = pk->key.ec.curve;
        ta.pkey.key.ec.q = memdup(pk->key.ec.q, pk->key.ec.qlen);
        ta.pkey.key.ec.qlen = pk->key.ec.qlen;
        if (!ta.pkey.key.ec.q) return -1;
    } else {
        free(ta.dn.data);
        return 1;
    }
    if (!ta.dn.data) return -1;
    (*tas)[(*n)++] = ta;
    return 0;
}

/* Load every CERTIFICATE of a PEM file. Returns the number of anchors, -1 on failure. */
static long ta_load(const char *path, br_x509_trust_anchor **out)
{
    br_pem_decoder_context pc;
    struct ta_build b;
    br_x509_trust_anchor *tas = NULL;
    size_t n = 0, cap = 0, off = 0, len = 0;
    unsigned char *file = NULL;
    int fd = -1, in_cert = 0;
    struct stat st;
    memset(&b, 0, sizeof b);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) goto fail;
    if (st.st_size <= 0 || (size_t)st.st_size > CA_BUNDLE_MAX) { errno = EFBIG; goto fail; }
    file = malloc((size_t)st.st_size);
    if (!file) goto fail;
    while (len < (size_t)st.st_size) {
        ssize_t r = read(fd, file + len, (size_t)st.st_size - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    br_pem_decoder_init(&pc);
    while (off < len) {
        off += br_pem_decoder_push(&pc, file + off, len - off);
        switch (br_pem_decoder_event(&pc)) {
        case BR_PEM_BEGIN_OBJ:
            in_cert = strcmp(br_pem_decoder_name(&pc), "CERTIFICATE") == 0
                   || strcmp(br_pem_decoder_name(&pc), "X509 CERTIFICATE") == 0;
            coai_buf_reset(&b.der);
            br_pem_decoder_setdest(&pc, in_cert ? ta_der_append : NULL, &b);
            break;
        case BR_PEM_END_OBJ:
            if (in_cert && ta_add(&b, &tas, &n, &cap) < 0) { errno = ENOMEM; goto fail; }
            in_cert = 0;
            break;
        case BR_PEM_ERROR:
            errno = EINVAL;
            goto fail;
        default:
            break;
        }
    }
    free(file);
    close(fd);
    coai_buf_free(&b.der);
    coai_buf_free(&b.dn);
    *out = tas;
    return (long)n;
fail:
    /* start-up failure: the process exits, anchors already built are left to it */
    free(file);
    if (fd >= 0) close(fd);
    coai_buf_free(&b.der);
    coai_buf_free(&b.dn);
    free(tas);
    return -1;
}

static const char *ca_bundle_path(void)
{
    static const char *const paths[] = {
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    };
    const char *env = getenv("SSL_CERT_FILE");
    size_t i;
    if (env && *env) return env;
    for (i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], R_OK) == 0) return paths[i];
    return NULL;
}

/* ======================================================================== */
/* HTTP/2 connections (issue 23): one multiplexed TLS connection per host   */
/* ======================================================================== */
/* The HTTP/2 transport's sockets and threads; frames, flow control and HPACK are the
 * header's (PART:H2, coai_h2_conn). Two objects:
 *
 *   h2c (connection)  one per host while it has room. Its I/O thread alone drives the
 *                     BearSSL engine on a non-blocking socket: it writes what coai_h2_conn
 *                     queued, feeds what arrives and hands the events to the streams
 *                     (SETTINGS and PING acks go out by themselves), PINGs after
 *                     H2_PING_IDLE_MS of silence and gives up when the ack does not come.
 *                     Others only call coai_h2_* under hc->mu and wake the thread.
 *   h2s (stream)      one run. Its thread writes messages (waiting for window without
 *                     holding anything the I/O thread needs: a big tool result never stops
 *                     the reading of the connection) and reads what arrived. A stream owns
 *                     no descriptor (10,000 held runs fit in 20,000): the I/O thread sets a
 *                     flag and signals the stream's condition variable under hc->mu (cv
 *                     for the reader, wcv for a writer waiting for window). A waiter sleeps
 *                     on it in slices (20 ms doubling up to a second) and between them looks
 *                     at its client socket without blocking (a disconnect is seen within a
 *                     slice), the deadline and the tick, as an HTTP/1.1 read does. A held
 *                     run's holder, which also waits for its claim, names a pipe the I/O
 *                     thread writes a byte to as well (h2s_notify).
 *
 * Concurrent runs share a connection up to the server's SETTINGS_MAX_CONCURRENT_STREAMS;
 * beyond that a second connection opens (one connect per host at a time: the others wait
 * and share it). After GOAWAY a connection takes no new streams; those below its last id
 * finish. Our receive windows: H2_STREAM_WINDOW per stream, returned as its reader
 * consumes, so a stalled run holds back only itself; the connection's is larger than all
 * stream windows together, so it never binds first. */

#define H2_STREAM_WINDOW (256u * 1024u)   /* our SETTINGS_INITIAL_WINDOW_SIZE */
#define H2_PING_IDLE_MS 20000             /* PING after this long without a frame (as the CLI) */
#define H2_PING_DEAD_MS 20000             /* ... and give the connection up when unanswered */
#define H2_IDLE_CLOSE_MS 300000           /* close a connection without streams after this */
#define H2_SETTINGS_WAIT_MS 10000         /* the server's SETTINGS after our preface */
#define H2_CONNECT_PAR 4                  /* connections being opened at once, at most ... */
#define H2_CONNECT_SHARE 100              /* ... one more per this many runs waiting for one */
#define H2_SLICE_MS 20                    /* a stream's first wait before a look at its client */
#define H2_OUT_MAX (64u * 1024u)          /* no reading while the core has more to write */
#define H2_WQ_MAX (64u * 1024u)           /* TLS records waiting for the socket, at most */
#define H2_ONE_FRAME 8192                 /* a message up to this goes in one DATA frame */
#define H2_LEAD_LAPSE_MS 20               /* the read role free this long: the I/O thread's */

/* Who reads the connection's socket (hc->lead; see h2s_lead) */
enum { H2_LEAD_IO, H2_LEAD_STREAM, H2_LEAD_FREE };

struct h2s;

struct h2c {
    struct h2c *next;               /* H2C.list */
    struct upconn *up;              /* fd + BearSSL engine: the I/O thread's alone */
    coai_url host;
    pthread_mutex_t mu;             /* core and everything below */
    pthread_cond_t cv;              /* SETTINGS arrived, the connection failed */
    pthread_t th;
    int wake[2];                    /* a byte: the core has something to write */
    coai_h2_conn *core;
    int open;                       /* streams counted against the server's limit */
    int got_settings;
    int goaway;                     /* no new streams */
    uint32_t goaway_code;           /* its error code (COAI_H2_HTTP_1_1_REQUIRED: see
                                     * h2_run_start) */
    int dead;                       /* failed or closed: every stream fails */
    char why[160];
    int fault;                      /* H2C_FAULT_*: whose failure it was (set with why) */
    int refs;                       /* streams + the list; atomic (no lock: closing a
                                     * stream takes hc->mu once, not twice) */
    int64_t last_rx, last_use, ping_at;
    unsigned char ping_data[8];
    int ping_out;
    struct h2s *streams;            /* ours, for failing them all at once */
    struct h2s *pend_list;          /* the streams with s->pend set (a turn looks at these
                                     * only, not at every stream of the connection) */
    int lead;                       /* H2_LEAD_*: who reads the socket (h2s_lead) */
    struct h2s *leader;             /* H2_LEAD_STREAM: the stream whose reader does */
    int64_t lead_at;                /* H2_LEAD_FREE: since when (mono ms) */
    int sleepers;                   /* streams whose reader sleeps on its cv (s->waiting) */
    struct h2s *il_list;            /* streams whose DATA the I/O thread consumes next */
    /* The socket's sending side, outside hc->mu (h2c_send): TLS records leave the engine
     * into wq under hc->mu; one thread at a time (smu) takes them and sends them. A send
     * under hc->mu let the woken server preempt the sender while every other stream of the
     * connection waited for the lock. */
    coai_buf wq;                    /* under hc->mu: records to send, in order */
    int wq_n;                       /* atomic: wq holds bytes (read without hc->mu) */
    pthread_mutex_t smu;            /* the sender's; never waited for (trylock) */
    coai_buf ws;                    /* under smu: the records being sent, ahead of wq */
    size_t ws_off;                  /* under smu: how much of ws is out */
    /* The I/O thread wakes the readers of a turn after it let hc->mu go (h2c_signal_out): a
     * reader woken under the lock ran at once, found it taken and slept again. A stream
     * is freed only once the batch that may name it is done (h2s_close). */
    unsigned long sig_gen;          /* under hc->mu: batches begun */
    unsigned long sig_done;         /* atomic: batches done (the I/O thread's, in order) */
};

static struct h2c_state {
    pthread_mutex_t lock;           /* the list; taken before an hc->mu, never after */
    pthread_cond_t cond;            /* a connect ended, a slot freed */
    struct h2c *list;
    int connecting;                 /* connections being opened */
    int waiting;                    /* runs waiting in h2c_get for one of them */
    unsigned long opened, streams, goaways, pings, ping_timeouts;   /* atomics */
    unsigned long il_runs, il_wakes;    /* atomics: h2c_il_run's consumers, and how many woke
                                         * their stream's thread */
} H2C = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* hc->fault: why the connection failed, decided where it fails (h2c_fault_locked). */
enum {
    H2C_FAULT_NONE,                 /* not the server's HTTP/2: I/O, a close, TLS, a timeout */
    H2C_FAULT_PROTOCOL,             /* the server broke HTTP/2: a connection error */
    H2C_FAULT_FLOOD                 /* the server flooded the core past a bound: GOAWAY
                                     * ENHANCE_YOUR_CALM (acks unread, empty DATA, HPACK) */
};

static void h2c_wake(struct h2c *hc)
{
    if (write(hc->wake[1], "w", 1) < 0) {}
}

/* Under hc->mu: wake s's writer (window). */
static void h2s_wsignal(struct h2s *s)
{
    s->wsig = 1;
    pthread_cond_signal(&s->wcv);
}

/* Under hc->mu: wake s's reader; and its writer, which also needs to hear of a failure. */
static void h2s_signal(struct h2s *s)
{
    s->sig = 1;
    pthread_cond_signal(&s->cv);
    if (s->notify >= 0 && write(s->notify, "s", 1) < 0) {}     /* full: a byte is there */
    if (s->blocked) h2s_wsignal(s);
}

/* What a writer's wait for window watches (its own client socket and tick: a heartbeat's
 * are not the reader's). */
struct h2w {
    int client_fd;                  /* -1: none */
    int (*tick)(void *);            /* NULL: none; -1 cancels */
    void *tick_ctx;
    int64_t last_tick;
    int why;                        /* UPX_* of a failed wait */
    int64_t end;                    /* 0, or the whole write's deadline (mono ms) */
};

/* Under hc->mu: the connection is finished, for reason fault (H2C_FAULT_*); every stream
 * fails. The first failure stands. */
static void h2c_vfail_locked(struct h2c *hc, int fault, const char *fmt, va_list ap)
{
    struct h2s *s;
    if (hc->dead) return;
    hc->dead = 1;
    hc->fault = fault;
    vsnprintf(hc->why, sizeof hc->why, fmt, ap);
    for (s = hc->streams; s; s = s->next) {
        if (!s->ended) {
            s->reset = 1;
            if (!s->status && !s->got_bytes) s->refused = 1;
        }
        h2s_signal(s);
    }
    /* a stream's reader polling the socket (h2s_lead) hears it now, not after its slice */
    if (hc->lead == H2_LEAD_STREAM && hc->up) shutdown(hc->up->fd, SHUT_RD);
    pthread_cond_broadcast(&hc->cv);
}

static void h2c_fail_locked(struct h2c *hc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void h2c_fail_locked(struct h2c *hc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    h2c_vfail_locked(hc, H2C_FAULT_NONE, fmt, ap);
    va_end(ap);
}

/* h2c_fail_locked for a failure that is the server's HTTP/2 (fault H2C_FAULT_PROTOCOL or
 * _FLOOD). */
static void h2c_fault_locked(struct h2c *hc, int fault, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void h2c_fault_locked(struct h2c *hc, int fault, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    h2c_vfail_locked(hc, fault, fmt, ap);
    va_end(ap);
}

static void h2c_unref(struct h2c *hc)
{
    if (__atomic_sub_fetch(&hc->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    /* the I/O thread may drop the last reference itself, on its way out */
    if (pthread_equal(pthread_self(), hc->th)) pthread_detach(hc->th);
    else pthread_join(hc->th, NULL);
    up_free(hc->up);
    close(hc->wake[0]);
    close(hc->wake[1]);
    coai_h2_free(hc->core);
    free(hc->core);
    pthread_cond_destroy(&hc->cv);
    pthread_mutex_destroy(&hc->mu);
    pthread_mutex_destroy(&hc->smu);
    coai_buf_free(&hc->wq);
    coai_buf_free(&hc->ws);
    free(hc);
}

/* Under hc->mu: s's reader is to be woken at the end of this read (s->pend). */
static void h2s_pend(struct h2c *hc, struct h2s *s)
{
    if (s->pend) return;
    s->pend = 1;
    s->pend_next = hc->pend_list;
    hc->pend_list = s;
}

/* Under hc->mu: one event of the core. */
static void h2c_event(struct h2c *hc, const coai_h2_event *ev)
{
    struct h2s *s = ev->user, *x;
    switch (ev->type) {
    case COAI_H2_EV_SETTINGS:
        hc->got_settings = 1;
        pthread_cond_broadcast(&hc->cv);
        break;
    case COAI_H2_EV_HEADERS:
        if (!s) break;
        if (!ev->trailers && !s->status) s->status = ev->status;
        if (ev->end_stream) s->ended = 1;
        /* woken with the DATA that came in the same read (h2c_signal_pending): one wake-up
         * for the head and the first bytes, not two (the second found the lock busy) */
        h2s_pend(hc, s);
        break;
    case COAI_H2_EV_DATA:
        if (!s) { coai_h2_consumed(hc->core, ev->stream, ev->data.len); break; }
        s->got_bytes = 1;
        coai_buf_append(&s->in, ev->data.ptr, ev->data.len);
        if (s->in.err) {
            coai_h2_reset(hc->core, ev->stream, COAI_H2_INTERNAL_ERROR);
            s->reset = 1;
            s->local_reset = 1;
            s->rst_code = COAI_H2_INTERNAL_ERROR;
        }
        if (ev->end_stream) s->ended = 1;
        /* one wake-up per stream for all the DATA of one read (h2c_signal_pending) */
        h2s_pend(hc, s);
        break;
    case COAI_H2_EV_RESET:
    case COAI_H2_EV_REFUSED:
        if (!s) break;
        s->reset = 1;
        s->rst_code = ev->code;
        /* a reset of ours (the server broke HTTP/2 on the stream) is not a refusal */
        s->local_reset = ev->type == COAI_H2_EV_RESET && ev->local;
        if (ev->type == COAI_H2_EV_REFUSED || (!s->local_reset && !s->status && !s->got_bytes))
            s->refused = 1;
        h2s_signal(s);
        break;
    case COAI_H2_EV_WINDOW:
        for (x = hc->streams; x; x = x->next)
            if (x->blocked && (ev->stream == 0 || x->id == ev->stream)) h2s_wsignal(x);
        break;
    case COAI_H2_EV_GOAWAY:
        if (!hc->goaway)
            srv_log(LOG_INFO, "HTTP/2 %s: GOAWAY (last stream %u, %s): new runs go to a new "
                    "connection", hc->host.authority, ev->last_stream,
                    coai_h2_error_str(ev->code));
        hc->goaway = 1;
        if (ev->code) hc->goaway_code = ev->code;
        __atomic_add_fetch(&H2C.goaways, 1, __ATOMIC_RELAXED);
        break;
    case COAI_H2_EV_PING_ACK:
        if (hc->ping_out && ev->data.len == 8 && memcmp(ev->data.ptr, hc->ping_data, 8) == 0)
            hc->ping_out = 0;
        break;
    default:
        break;
    }
}

/* Under hc->mu, on the I/O thread: of the streams that got DATA since the last call, the
 * ones whose reader sleeps parked (h2s_body_il) go to their consumer (hc->il_list,
 * h2c_il_run) instead of waking it. */
static void h2c_claim_pending(struct h2c *hc)
{
    struct h2s **pp = &hc->pend_list, *s;
    while ((s = *pp) != NULL)
        /* not while the reader has yet to take what its consumer left (s->il_wake): that
         * is ahead of these bytes, and the consumer would write over it */
        if (s->il_park == H2S_IL_PARKED && s->waiting && !s->il_wake && !s->ended
            && !s->reset && !hc->dead && s->in.len) {
            *pp = s->pend_next;
            s->pend = 0;
            s->il_park = H2S_IL_BUSY;
            s->il_next = hc->il_list;
            hc->il_list = s;
        } else {
            pp = &s->pend_next;
        }
}

/* Under hc->mu, on the I/O thread, the lock let go next: wake the readers of the streams
 * that got DATA or headers since the last call (one wake-up per stream for a whole read),
 * the condition signals (what wakes a thread) left to h2c_signal_out, after the unlock:
 * their streams in out[] (up to cap; beyond, signalled here). The count; *gen the batch's
 * number when there is one. */
static int h2c_signal_batch(struct h2c *hc, struct h2s **out, int cap, unsigned long *gen)
{
    struct h2s *s;
    int n = 0;
    while ((s = hc->pend_list) != NULL) {
        hc->pend_list = s->pend_next;
        s->pend = 0;
        if (n == cap) { h2s_signal(s); continue; }
        s->sig = 1;                         /* h2s_signal's, but the cv's signal */
        if (s->notify >= 0 && write(s->notify, "s", 1) < 0) {}
        if (s->blocked) h2s_wsignal(s);
        s->sig_gen = hc->sig_gen + 1;
        out[n++] = s;
    }
    if (n) *gen = ++hc->sig_gen;
    return n;
}

/* Under hc->mu: wake the readers of the streams that got DATA or headers since the last
 * call: one wake-up per stream for a whole read, done last before the lock is let go (a
 * reader woken earlier waited for it while the reading thread dispatched and wrote). A
 * leading stream's thread (h2s_lead) does it so; the I/O thread signals after the unlock. */
static void h2c_signal_pending(struct h2c *hc)
{
    unsigned long gen;
    (void)h2c_signal_batch(hc, NULL, 0, &gen);     /* no room: each one signalled here */
}

/* Without hc->mu: the signals of a batch (h2c_signal_batch); then it is done. */
static void h2c_signal_out(struct h2c *hc, struct h2s **b, int n, unsigned long gen)
{
    int i;
    for (i = 0; i < n; i++) pthread_cond_signal(&b[i]->cv);
    if (n) __atomic_store_n(&hc->sig_done, gen, __ATOMIC_RELEASE);
}

/* Under hc->mu, on the I/O thread (released while a consumer runs): the DATA of each stream
 * h2c_signal_pending claimed goes to its consumer, as h2s_body hands it to a reader (the
 * window goes back); the reader is woken only when the consumer asks (s->il_wake), or when
 * the stream ended, failed or got more meanwhile. No wake-up of a thread per delta. */
static void h2c_il_run(struct h2c *hc)
{
    while (hc->il_list) {
        struct h2s *s = hc->il_list;
        coai_buf t = s->taken;
        int wake;
        hc->il_list = s->il_next;
        s->il_next = NULL;
        s->taken = s->in;
        s->in = t;
        coai_buf_reset(&s->in);
        coai_h2_consumed(hc->core, s->id, s->taken.len);
        pthread_mutex_unlock(&hc->mu);
        wake = s->il_fn(s->il_ctx, s->taken.data, s->taken.len);
        pthread_mutex_lock(&hc->mu);
        __atomic_add_fetch(&H2C.il_runs, 1, __ATOMIC_RELAXED);
        if (wake) __atomic_add_fetch(&H2C.il_wakes, 1, __ATOMIC_RELAXED);
        s->il_park = H2S_IL_PARKED;
        if (wake) s->il_wake = 1;
        if (wake || s->in.len || s->ended || s->reset || hc->dead) h2s_signal(s);
        else if (s->il_waiter) pthread_cond_signal(&s->cv);
        s->il_waiter = 0;
    }
}

/* Under hc->mu: TLS bytes read ahead (by the handshake, then by h2c_recv_locked: BearSSL
 * asks for a record's 5-byte header, then its body) go into the engine record by record,
 * each record's plaintext to the core, its events to the streams (the readers of the
 * streams that got DATA or a head are woken by the caller: h2c_signal_pending). The I/O
 * thread and a leading stream's thread (h2s_lead) both call it. */
static void h2c_feed_locked(struct h2c *hc, int64_t now)
{
    br_ssl_engine_context *eng = &hc->up->sc.eng;
    unsigned st;
    for (;;) {
        while (hc->up->ra_off < hc->up->ra_len
               && (br_ssl_engine_current_state(eng) & BR_SSL_RECVREC)) {
            size_t n, k = hc->up->ra_len - hc->up->ra_off;
            unsigned char *b = br_ssl_engine_recvrec_buf(eng, &n);
            if (k > n) k = n;
            memcpy(b, hc->up->ra + hc->up->ra_off, k);
            hc->up->ra_off += k;
            br_ssl_engine_recvrec_ack(eng, k);
        }
        if (hc->dead || !(br_ssl_engine_current_state(eng) & BR_SSL_RECVAPP)) break;
        /* decrypted bytes -> the core -> events */
        while (!hc->dead && ((st = br_ssl_engine_current_state(eng)) & BR_SSL_RECVAPP)) {
            size_t n;
            coai_h2_event ev;
            coai_result r;
            unsigned char *b = br_ssl_engine_recvapp_buf(eng, &n);
            if (coai_h2_feed(hc->core, b, n) < 0) {
                h2c_fail_locked(hc, "out of memory");
                break;
            }
            br_ssl_engine_recvapp_ack(eng, n);
            hc->last_rx = now;
            while ((r = coai_h2_next(hc->core, &ev)) == COAI_OK) h2c_event(hc, &ev);
            if (r == COAI_ERR_H2 && hc->core->error_why) {
                /* a flood: the core's bound, not a broken server */
                srv_log(LOG_WARN, "HTTP/2 %s: the server %s: GOAWAY %s",
                        hc->host.authority, hc->core->error_why,
                        coai_h2_error_str((uint32_t)hc->core->error));
                h2c_fault_locked(hc, H2C_FAULT_FLOOD, "the server %s (GOAWAY %s)",
                                 hc->core->error_why,
                                 coai_h2_error_str((uint32_t)hc->core->error));
            } else if (r == COAI_ERR_H2)
                h2c_fault_locked(hc, H2C_FAULT_PROTOCOL,
                                 "HTTP/2 protocol error by the server (%s)",
                                 coai_h2_error_str((uint32_t)hc->core->error));
            else if (r < 0 && r != COAI_MORE)
                h2c_fail_locked(hc, "%s", coai_result_str(r));
        }
    }
    if (br_ssl_engine_current_state(eng) == BR_SSL_CLOSED) {
        int err = br_ssl_engine_last_error(eng);
        if (err == BR_ERR_OK) {
            h2c_fail_locked(hc, "the server closed the connection");
        } else {
            char what[128];
            int v = 0;
            tls_err_text(err, what, sizeof what, &v);
            h2c_fail_locked(hc, "TLS error: %s", what);
        }
    }
}

/* Under hc->mu, once the engine took all bytes read ahead: whatever has arrived, in one
 * recv() (h2c_feed_locked feeds it to the engine). */
static void h2c_recv_locked(struct h2c *hc)
{
    ssize_t r;
    hc->up->ra_off = hc->up->ra_len = 0;
    hc->up->ra_more = 0;
    do r = recv(hc->up->fd, hc->up->ra, sizeof hc->up->ra, MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        hc->up->ra_len = (size_t)r;
        hc->up->ra_more = (size_t)r == sizeof hc->up->ra;
    } else if (!(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
        hc->up->why = UPX_EOF;
        if (r == 0) h2c_fail_locked(hc, "the server closed the connection");
        else h2c_fail_locked(hc, "recv failed: %s", strerror(errno));
    }
}

/* Under hc->mu: the core's bytes -> engine -> TLS records in hc->wq, until all are there
 * or wq holds H2_WQ_MAX (then they wait in the engine and the core: h2c_thread stops
 * reading when the core holds too much, the backpressure of a server that does not read).
 * The engine takes about one record at a time: loop. The socket is written by h2c_send,
 * without hc->mu. 1 when wq holds bytes to send. */
static int h2c_flush_locked(struct h2c *hc)
{
    br_ssl_engine_context *eng = &hc->up->sc.eng;
    for (;;) {
        int moved = 0;
        for (;;) {
            const unsigned char *p;
            size_t k = coai_h2_want_write(hc->core, &p), room;
            unsigned char *b;
            if (!k || !(br_ssl_engine_current_state(eng) & BR_SSL_SENDAPP)) {
                if (!k) br_ssl_engine_flush(eng, 0);
                break;
            }
            b = br_ssl_engine_sendapp_buf(eng, &room);
            if (k > room) k = room;
            memcpy(b, p, k);
            br_ssl_engine_sendapp_ack(eng, k);
            coai_h2_wrote(hc->core, k);
            moved = 1;
        }
        while ((br_ssl_engine_current_state(eng) & BR_SSL_SENDREC) && hc->wq.len < H2_WQ_MAX) {
            size_t n;
            unsigned char *b = br_ssl_engine_sendrec_buf(eng, &n);
            if (coai_buf_append(&hc->wq, b, n) < 0) {
                coai_buf_reset(&hc->wq);
                hc->up->why = UPX_IO;
                h2c_fail_locked(hc, "out of memory");
                break;
            }
            br_ssl_engine_sendrec_ack(eng, n);
            moved = 1;
        }
        if (!moved || hc->wq.len >= H2_WQ_MAX || hc->up->why != UPX_OK
            || br_ssl_engine_current_state(eng) == BR_SSL_CLOSED)
            break;
    }
    __atomic_store_n(&hc->wq_n, hc->wq.len > 0, __ATOMIC_SEQ_CST);
    return hc->wq.len > 0;
}

/* Without hc->mu: send what h2c_flush_locked queued (hc->wq), on this thread, until all is
 * out or the socket is full; 1 when it is full (the I/O thread waits for POLLOUT: a caller
 * other than the I/O thread wakes it). One thread sends at a time: when another does, it
 * sends ours too (it takes wq until wq is empty, and looks again once it let smu go). */
static int h2c_send(struct h2c *hc)
{
    int full, err;
again:
    full = err = 0;
    if (pthread_mutex_trylock(&hc->smu) != 0) return 0;
    for (;;) {
        ssize_t w;
        if (hc->ws_off == hc->ws.len) {
            coai_buf t;
            /* nothing queued: no lock to take (the I/O thread looks on every turn) */
            if (!__atomic_load_n(&hc->wq_n, __ATOMIC_SEQ_CST)) break;
            pthread_mutex_lock(&hc->mu);
            t = hc->ws;
            hc->ws = hc->wq;
            hc->wq = t;
            coai_buf_reset(&hc->wq);
            hc->ws_off = 0;
            if (!hc->dead || hc->up->why == UPX_OK)
                h2c_flush_locked(hc);       /* what waited in the engine for room in wq */
            else
                __atomic_store_n(&hc->wq_n, 0, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&hc->mu);
            if (!hc->ws.len) break;
        }
        w = fd_send_some(hc->up->fd, hc->ws.data + hc->ws_off, hc->ws.len - hc->ws_off);
        if (w < 0) {
            err = errno;
            hc->ws_off = hc->ws.len;        /* the connection is gone: nothing more goes */
            break;
        }
        hc->ws_off += (size_t)w;
        if (hc->ws_off < hc->ws.len) { full = 1; break; }
    }
    pthread_mutex_unlock(&hc->smu);
    if (err) {
        pthread_mutex_lock(&hc->mu);
        hc->up->why = UPX_IO;
        coai_buf_reset(&hc->wq);
        __atomic_store_n(&hc->wq_n, 0, __ATOMIC_SEQ_CST);
        h2c_fail_locked(hc, "send failed: %s", strerror(err));
        pthread_mutex_unlock(&hc->mu);
        return 1;
    }
    /* queued after this thread's last look by one whose trylock failed: ours to send */
    if (!full && __atomic_load_n(&hc->wq_n, __ATOMIC_SEQ_CST)) goto again;
    return full;
}

/* Under hc->mu, on a stream's thread: what the core queued, as TLS records for the socket;
 * what h2c_pushed must do once hc->mu is let go (H2_OUT_*): send them on this thread (no
 * wake-up of the I/O thread on the way to the server), wake the I/O thread (the
 * connection failed: it ends). */
enum { H2_OUT_SEND = 1, H2_OUT_WAKE = 2 };
static int h2c_push_locked(struct h2c *hc)
{
    int r = 0;
    if (hc->dead) return H2_OUT_WAKE;
    if (h2c_flush_locked(hc)) r |= H2_OUT_SEND;
    if (hc->dead) r |= H2_OUT_WAKE;
    return r;
}

/* Without hc->mu: what h2c_push_locked asked for (out). A full socket wakes the I/O
 * thread, which waits for POLLOUT and sends the rest. */
static void h2c_pushed(struct h2c *hc, int out)
{
    if ((out & H2_OUT_SEND) && h2c_send(hc)) out |= H2_OUT_WAKE;
    if (out & H2_OUT_WAKE) h2c_wake(hc);
}

/* The I/O thread: the writer of hc->up's socket when a stream's thread could not write all
 * it queued itself (h2c_push_locked); its reader unless a stream's thread leads (hc->lead,
 * h2s_lead). */
static void *h2c_thread(void *arg)
{
    struct h2c *hc = arg;
    int fd = hc->up->fd, want_out = 0, rd, more, tmo, dead, io_ok, nsig;
    struct h2s *sig[64];
    unsigned long gen = 0;
    pthread_mutex_lock(&hc->mu);
    for (;;) {
        struct pollfd pf[2];
        int64_t now = mono_ms();
        int pr;
        h2c_feed_locked(hc, now);
        h2c_claim_pending(hc);
        h2c_il_run(hc);
        /* timers */
        if (!hc->dead) {
            if (hc->ping_out && now - hc->ping_at > H2_PING_DEAD_MS) {
                h2c_fail_locked(hc, "PING unanswered for %d s", H2_PING_DEAD_MS / 1000);
                __atomic_add_fetch(&H2C.ping_timeouts, 1, __ATOMIC_RELAXED);
            } else if (!hc->ping_out && now - hc->last_rx >= H2_PING_IDLE_MS) {
                if (random_fill(hc->ping_data, 8) < 0) memset(hc->ping_data, 0x5a, 8);
                coai_h2_ping(hc->core, hc->ping_data);
                hc->ping_out = 1;
                hc->ping_at = now;
                __atomic_add_fetch(&H2C.pings, 1, __ATOMIC_RELAXED);
            }
            if (!hc->streams && !hc->open && now - hc->last_use > H2_IDLE_CLOSE_MS) {
                coai_h2_goaway(hc->core, COAI_H2_NO_ERROR);
                hc->goaway = 1;
                h2c_fail_locked(hc, "idle for %d s", H2_IDLE_CLOSE_MS / 1000);
            }
        }
        /* the read role, left free by a stream's reader that went back to its run and has
         * not come back to wait (h2s_lead): ours again */
        if (hc->lead == H2_LEAD_FREE && now - hc->lead_at >= H2_LEAD_LAPSE_MS)
            hc->lead = H2_LEAD_IO;
        h2c_flush_locked(hc);
        nsig = h2c_signal_batch(hc, sig, (int)(sizeof sig / sizeof sig[0]), &gen);
        dead = hc->dead;
        io_ok = hc->up->why == UPX_OK;
        /* read again without a poll when the last recv() filled the buffer. Backpressure:
         * no reading while the core holds more than H2_OUT_MAX to write (acks, window
         * updates: what reading makes it queue), so a server that does not read what we
         * send cannot make us buffer it; POLLOUT brings us back once it drains. */
        {
            const unsigned char *q;
            rd = hc->lead == H2_LEAD_IO && hc->up->ra_off == hc->up->ra_len;
            if (coai_h2_want_write(hc->core, &q) > H2_OUT_MAX) rd = 0;
        }
        more = rd && hc->up->ra_more;
        tmo = more ? 0 : hc->dead ? 200 : hc->lead == H2_LEAD_FREE ? H2_LEAD_LAPSE_MS : 1000;
        pthread_mutex_unlock(&hc->mu);
        h2c_signal_out(hc, sig, nsig, gen);
        /* what this turn and the streams' threads queued, sent without the lock; a socket
         * that is full: POLLOUT (a stream's thread that finds it full wakes this one) */
        want_out = h2c_send(hc);
        if (dead && (!want_out || !io_ok)) {
            pthread_mutex_lock(&hc->mu);
            break;
        }
        pf[0].events = (short)((rd ? POLLIN : 0) | (want_out ? POLLOUT : 0));
        pf[0].fd = pf[0].events ? fd : -1;  /* not its POLLHUP either: a leader reads */
        pf[0].revents = 0;
        pf[1].fd = hc->wake[0];
        pf[1].events = POLLIN;
        pf[1].revents = 0;
        pr = poll(pf, 2, tmo);
        if (more && pr == 0) {
            pr = 1;
            pf[0].revents = POLLIN;
        }
        pthread_mutex_lock(&hc->mu);
        if (pr < 0 && errno != EINTR) { h2c_fail_locked(hc, "poll failed"); break; }
        if (pr > 0 && pf[1].revents) {
            char junk[64];
            while (read(hc->wake[0], junk, sizeof junk) > 0) {}
        }
        if (hc->dead && pr == 0) break;     /* the last bytes (a GOAWAY) could not go out */
        if (pr > 0 && (pf[0].revents & (POLLIN | POLLERR | POLLHUP))
            && hc->up->ra_off == hc->up->ra_len && hc->lead == H2_LEAD_IO)
            h2c_recv_locked(hc);
    }
    if (!hc->dead) h2c_fail_locked(hc, "closed");
    hc->up->why = UPX_IO;                   /* no close_notify attempt on the way out */
    pthread_mutex_unlock(&hc->mu);
    pthread_mutex_lock(&H2C.lock);
    {
        struct h2c **pp;
        for (pp = &H2C.list; *pp; pp = &(*pp)->next)
            if (*pp == hc) { *pp = hc->next; break; }
    }
    pthread_cond_broadcast(&H2C.cond);
    pthread_mutex_unlock(&H2C.lock);
    srv_log(LOG_DEBUG, "HTTP/2 connection to %s ended: %s", hc->host.authority, hc->why);
    h2c_unref(hc);                          /* the list's reference */
    return NULL;
}

/* A new connection to h: TLS with ALPN h2, the preface, the server's SETTINGS. NULL with
 * *e filled; e->code "upstream_no_h2" when the server did not choose h2 in ALPN. */
static struct h2c *h2c_open(const coai_url *h, coai_error *e)
{
    struct h2c *hc;
    const char *alpn;
    pthread_attr_t at;
    coai_h2_opts o;
    int64_t end;
    struct upconn *up = up_connect_alpn(h, 1, e);
    if (!up) return NULL;
    alpn = br_ssl_engine_get_selected_protocol(&up->sc.eng);
    if (!alpn || strcmp(alpn, "h2") != 0) {
        coai_error_set(e, 502, "upstream_error", "upstream_no_h2", NULL,
                       "https://%s%s did not choose HTTP/2 in ALPN (%s)", h->authority,
                       h->prefix, alpn ? alpn : "no protocol chosen");
        up_free(up);
        return NULL;
    }
    memset(&o, 0, sizeof o);
    o.stream_window = H2_STREAM_WINDOW;
    o.conn_window = H2_STREAM_WINDOW * COAI_H2_MAX_STREAMS;   /* never binds before them */
    hc = calloc(1, sizeof *hc);
    if (hc) hc->core = calloc(1, sizeof *hc->core);
    if (!hc || !hc->core || pipe(hc->wake) < 0) {
        if (hc) free(hc->core);
        free(hc);
        up_free(up);
        coai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    fcntl(hc->wake[0], F_SETFL, O_NONBLOCK);
    fcntl(hc->wake[1], F_SETFL, O_NONBLOCK);
    pthread_mutex_init(&hc->mu, NULL);
    pthread_mutex_init(&hc->smu, NULL);
    if (cond_init_mono(&hc->cv) != 0) {
        close(hc->wake[0]);
        close(hc->wake[1]);
        free(hc->core);
        up_free(up);
        pthread_mutex_destroy(&hc->mu);
        pthread_mutex_destroy(&hc->smu);
        free(hc);
        coai_error_set(e, 500, "server_error", NULL, NULL, "cannot start an HTTP/2 connection");
        return NULL;
    }
    hc->up = up;
    hc->host = *h;
    hc->last_rx = hc->last_use = mono_ms();
    hc->refs = 2;                           /* the thread/list + the caller */
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    if (coai_h2_init(hc->core, &o) < 0 || pthread_create(&hc->th, &at, h2c_thread, hc) != 0) {
        pthread_attr_destroy(&at);
        close(hc->wake[0]);
        close(hc->wake[1]);
        coai_h2_free(hc->core);
        free(hc->core);
        up_free(up);
        pthread_cond_destroy(&hc->cv);
        pthread_mutex_destroy(&hc->mu);
        pthread_mutex_destroy(&hc->smu);
        free(hc);
        coai_error_set(e, 500, "server_error", NULL, NULL, "cannot start an HTTP/2 connection");
        return NULL;
    }
    pthread_attr_destroy(&at);
    pthread_mutex_lock(&H2C.lock);
    hc->next = H2C.list;                    /* listed now: the thread unlists it at its end */
    H2C.list = hc;
    pthread_mutex_unlock(&H2C.lock);
    h2c_wake(hc);
    end = mono_ms() + H2_SETTINGS_WAIT_MS;
    pthread_mutex_lock(&hc->mu);
    while (!hc->got_settings && !hc->dead && mono_ms() < end)
        cond_wait_ms(&hc->cv, &hc->mu, 1000);
    if (!hc->got_settings || hc->dead || hc->goaway) {
        coai_error_set(e, 502, "upstream_error", "upstream_h2_failed", NULL,
                       "the HTTP/2 connection to %s failed before its first stream: %s",
                       h->authority, hc->dead ? hc->why : hc->goaway ? "GOAWAY at once"
                       : "no SETTINGS from the server");
        h2c_fail_locked(hc, "unusable");
        pthread_mutex_unlock(&hc->mu);
        h2c_wake(hc);
        h2c_unref(hc);
        return NULL;
    }
    pthread_mutex_unlock(&hc->mu);
    __atomic_add_fetch(&H2C.opened, 1, __ATOMIC_RELAXED);
    srv_log(LOG_DEBUG, "HTTP/2 connection to %s up (the server allows %u streams)",
            h->authority, hc->core->peer.max_concurrent_streams);
    return hc;                              /* with the caller's reference */
}

/* Under hc->mu: room for one more stream on hc. */
static int h2c_room_locked(const struct h2c *hc)
{
    uint32_t max = hc->core->peer.max_concurrent_streams;
    if (max > COAI_H2_MAX_STREAMS) max = COAI_H2_MAX_STREAMS;
    return !hc->dead && !hc->goaway && hc->got_settings && (uint32_t)hc->open < max
           && hc->core->next_id < 0x7ffffff0u;
}

/* A connection to h with room for a stream, returned with hc->mu held (its first user, the
 * new stream, needs it: no second wait for the lock that 64 starting runs contend for):
 * its slot taken (hc->open) and a reference held. An existing one, else a new one; while
 * one is being opened, the others wait for it and share it, unless more are waiting than
 * the connections being opened will take (H2_CONNECT_SHARE each, the usual
 * SETTINGS_MAX_CONCURRENT_STREAMS; at most H2_CONNECT_PAR at once): 10,000 runs starting
 * together do not wait for 100 handshakes one after the other. fresh: a new one in any
 * case. NULL with *e filled. */
static struct h2c *h2c_get(const coai_url *h, int fresh, coai_error *e)
{
    struct h2c *hc;
    pthread_mutex_lock(&H2C.lock);
    for (;;) {
        for (hc = fresh ? NULL : H2C.list; hc; hc = hc->next) {
            int ok;
            if (!up_same_host(&hc->host, h)) continue;
            pthread_mutex_lock(&hc->mu);
            ok = h2c_room_locked(hc);
            if (ok) {
                hc->open++;
                __atomic_add_fetch(&hc->refs, 1, __ATOMIC_RELAXED);
                hc->last_use = mono_ms();
                pthread_mutex_unlock(&H2C.lock);
                return hc;                  /* hc->mu held */
            }
            pthread_mutex_unlock(&hc->mu);
        }
        if (fresh || !H2C.connecting) break;
        if (H2C.connecting < H2_CONNECT_PAR
            && H2C.waiting >= H2C.connecting * H2_CONNECT_SHARE)
            break;
        __atomic_add_fetch(&H2C.waiting, 1, __ATOMIC_RELAXED);
        pthread_cond_wait(&H2C.cond, &H2C.lock);
        __atomic_sub_fetch(&H2C.waiting, 1, __ATOMIC_RELAXED);
    }
    H2C.connecting++;
    pthread_mutex_unlock(&H2C.lock);
    hc = h2c_open(h, e);
    if (hc) {
        pthread_mutex_lock(&hc->mu);
        hc->open++;                         /* the caller's reference is the stream's */
        pthread_mutex_unlock(&hc->mu);
    }
    pthread_mutex_lock(&H2C.lock);
    H2C.connecting--;
    pthread_cond_broadcast(&H2C.cond);
    pthread_mutex_unlock(&H2C.lock);
    if (hc) pthread_mutex_lock(&hc->mu);    /* a new connection: rare, locked again */
    return hc;                              /* hc->mu held */
}

/* Leader/follower reading. The I/O thread writes the connection and reads it unless a
 * stream's reader leads: a reader that waits (h2s_wait) while no other stream's reader
 * leads or sleeps on the connection takes the read role (hc->lead, hc->leader) and polls
 * the socket together with its client, reading and dispatching whatever arrives itself
 * (h2c_feed_locked): a frame for its own stream costs one wake-up, as on HTTP/1.1, instead
 * of the I/O thread's and then the reader's; frames for other streams wake their readers
 * as the I/O thread would. It gives the role up whenever its wait ends
 * (h2s_lead_drop_locked), before its run does anything that may block (a stalled client):
 * free, for whichever reader waits next, or straight back to the I/O thread when other
 * readers sleep (many streams: the I/O thread, which never gives it up, reads for them
 * all; a role handed from reader to reader cost more wake-ups than it saved) or a stream
 * needs the reading without waiting as a reader (a writer without window, a held run's
 * holder: h2c_read_io_locked). The I/O thread takes a free role back after
 * H2_LEAD_LAPSE_MS. Reading and writing the engine is under hc->mu, as before.
 * Only the only stream of its connection leads: with 64 paced streams on one connection a
 * leading reader measured 30-40 % more proxy CPU per delta than the I/O thread reading
 * for all (its own frames are 1 in 64; the role moved between threads). */

/* Under hc->mu: the I/O thread reads from now on, if the role is free (it is woken to). */
static int h2c_read_io_locked(struct h2c *hc)
{
    if (hc->lead != H2_LEAD_FREE) return 0;
    hc->lead = H2_LEAD_IO;
    return 1;
}

/* Under hc->mu: s's reader stops leading. */
static void h2s_lead_drop_locked(struct h2s *s)
{
    struct h2c *hc = s->hc;
    struct h2s *x;
    int io = hc->sleepers > 0 || hc->dead;
    if (hc->lead != H2_LEAD_STREAM || hc->leader != s) return;
    hc->leader = NULL;
    hc->lead = H2_LEAD_FREE;
    hc->lead_at = mono_ms();
    for (x = hc->streams; x && !io; x = x->next)
        if (x != s && (x->notify >= 0 || x->blocked)) io = 1;
    if (io) {
        hc->lead = H2_LEAD_IO;
        h2c_wake(hc);
    }
}

/* Under hc->mu (released while polling): s's reader takes the read role when it is free or
 * the I/O thread's and no more is queued to write than H2_OUT_MAX (the backpressure of
 * h2c_thread). 0: not taken. */
static int h2s_lead_can_locked(const struct h2s *s)
{
    struct h2c *hc = s->hc;
    const unsigned char *q;
    return !hc->dead && hc->lead != H2_LEAD_STREAM && hc->sleepers == 0
           && hc->streams == s && !s->next && coai_h2_want_write(hc->core, &q) <= H2_OUT_MAX;
}

static int h2s_lead_take_locked(struct h2s *s)
{
    struct h2c *hc = s->hc;
    if (!h2s_lead_can_locked(s)) return 0;
    hc->lead = H2_LEAD_STREAM;
    hc->leader = s;
    return 1;
}

/* Under hc->mu, leading (h2s_lead_take_locked): poll the socket and the client (events:
 * *client_events, -1 none) up to ms, reading and dispatching what arrives, until s is
 * signalled, the time is up, or the connection fails; keeps the role (the caller drops it).
 * 0, or -1 the client went away (*why). */
static int h2s_lead(struct h2s *s, int64_t ms, int client_fd, short *client_events, int *why)
{
    struct h2c *hc = s->hc;
    int64_t end = mono_ms() + ms;
    for (;;) {
        struct pollfd pf[2];
        const unsigned char *q;
        int pr, n = 1;
        int64_t left;
        /* another stream's reader sleeps (it came after this one took the role): the I/O
         * thread reads for both from now on, so that it writes that one's deltas itself */
        if (s->sig || hc->dead || hc->sleepers > 0
            || coai_h2_want_write(hc->core, &q) > H2_OUT_MAX)
            return 0;
        if (hc->up->ra_off == hc->up->ra_len && !hc->up->ra_more) {
            left = end - mono_ms();
            if (left <= 0) return 0;
            pf[0].fd = hc->up->fd;
            pf[0].events = POLLIN;
            pf[0].revents = 0;
            if (client_fd >= 0 && *client_events) {
                pf[1].fd = client_fd;
                pf[1].events = *client_events;
                pf[1].revents = 0;
                n = 2;
            }
            pthread_mutex_unlock(&hc->mu);
            pr = poll(pf, (nfds_t)n, (int)left);
            pthread_mutex_lock(&hc->mu);
            if (pr < 0 && errno != EINTR) { h2c_fail_locked(hc, "poll failed"); return 0; }
            if (pr <= 0) continue;
            if (n == 2 && pf[1].revents) {
                char b;
                ssize_t k;
                if (pf[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
                    *why = UPX_CANCELLED;
                    return -1;
                }
                k = recv(client_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                if (k == 0
                    || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                    *why = UPX_CANCELLED;
                    return -1;
                }
                *client_events = 0;         /* pipelined bytes: stop watching for them */
            }
            if (!(pf[0].revents & (POLLIN | POLLERR | POLLHUP | POLLNVAL))) continue;
            if (hc->dead || hc->lead != H2_LEAD_STREAM || hc->leader != s) return 0;
        }
        if (hc->up->ra_off == hc->up->ra_len) h2c_recv_locked(hc);
        h2c_feed_locked(hc, mono_ms());
        /* what reading made the core queue (acks, window updates; rare) goes out now, or
         * the I/O thread writes it */
        h2c_signal_pending(hc);
        if (coai_h2_want_write(hc->core, &q) > 0
            || (br_ssl_engine_current_state(&hc->up->sc.eng) & BR_SSL_SENDREC)) {
            int out = h2c_push_locked(hc);
            pthread_mutex_unlock(&hc->mu);
            h2c_pushed(hc, out);
            pthread_mutex_lock(&hc->mu);
        }
    }
}

/* 1 when the client on fd (watched for *events) has gone: a hang-up, an error, or its end
 * of stream; pipelined bytes clear *events (they are the next request's, not a close). */
static int client_left(int fd, short *events)
{
    struct pollfd pf;
    char b;
    ssize_t k;
    pf.fd = fd;
    pf.events = *events;
    pf.revents = 0;
    if (poll(&pf, 1, 0) <= 0 || !pf.revents) return 0;
    if (pf.revents & (POLLERR | POLLHUP | POLLNVAL)) return 1;
    k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return 1;
    *events = 0;                    /* pipelined bytes: stop watching for them */
    return 0;
}

/* Wait, under nothing, until *flag (hc->mu's, signalled on cv) is set, watching a client
 * socket (-1: none), the deadline and a tick (called about once a second; -1 cancels), as
 * up_wait does. The client socket is looked at between slices of the wait: H2_SLICE_MS
 * first, doubling up to a second (a client that leaves just after a byte, as most do, is
 * seen as soon as on HTTP/1.1; one quiet for long is looked at once a second, so 10,000
 * held streams cost 10,000 wake-ups a second). 0 woken (*flag cleared), -1 *why set. */
static int h2_wait(struct h2c *hc, pthread_cond_t *cv, int *flag, int64_t deadline,
                   int client_fd, short *client_events, int (*tick)(void *), void *tick_ctx,
                   int64_t *last_tick, int *why, struct h2s *rs)
{
    int64_t slice = H2_SLICE_MS;
    int led = 0;                    /* the last slice led: its poll watched the client */
    for (;;) {
        int64_t now = mono_ms(), left = deadline - now;
        int got;
        pthread_mutex_lock(&hc->mu);
        got = *flag;
        *flag = 0;
        if (rs && h2s_lead_can_locked(rs))
            led = 1;                /* this slice will lead: its poll watches the client */
        pthread_mutex_unlock(&hc->mu);
        if (got) return 0;
        if (tick && now - *last_tick >= 1000) {
            *last_tick = now;
            if (tick(tick_ctx) < 0) { *why = UPX_CANCELLED; return -1; }
        }
        if (left <= 0) { *why = UPX_TIMEOUT; return -1; }
        if (client_fd >= 0 && *client_events && !led && client_left(client_fd, client_events)) {
            *why = UPX_CANCELLED;
            return -1;
        }
        led = 0;
        pthread_mutex_lock(&hc->mu);
        if (!*flag) {
            int64_t ms = left > slice ? slice : left;
            if (slice < 1000) slice = slice * 2 > 1000 ? 1000 : slice * 2;
            if (rs && h2s_lead_take_locked(rs)) {   /* a reader: it reads the socket itself */
                int lr = h2s_lead(rs, ms, client_fd, client_events, why);
                h2s_lead_drop_locked(rs);
                led = 1;
                if (lr < 0) {
                    pthread_mutex_unlock(&hc->mu);
                    return -1;
                }
            } else {
                if (rs) { rs->waiting = 1; hc->sleepers++; }
                /* the role left free by a reader that stopped leading: the I/O thread may
                 * sleep in a poll that does not read (up to a second); it reads from now */
                if (rs && h2c_read_io_locked(hc)) h2c_wake(hc);
                cond_wait_ms(cv, &hc->mu, ms);
                if (rs) { rs->waiting = 0; hc->sleepers--; }
            }
        }
        got = *flag;
        *flag = 0;
        pthread_mutex_unlock(&hc->mu);
        if (got) return 0;
    }
}

/* The reader's wait on s: its condition variable, client, deadline and tick. */
static int h2s_wait(struct h2s *s)
{
    return h2_wait(s->hc, &s->cv, &s->sig, s->deadline, s->client_fd, &s->client_events,
                   s->tick, s->tick_ctx, &s->last_tick, &s->why, s);
}

/* A new stream to h with its request head queued (no END_STREAM: the body follows).
 * NULL with *e filled (e->code upstream_no_h2 / upstream_h2_failed / up_connect's). */
static struct h2s *h2s_open(const coai_url *h, const coai_h2_header *hs, size_t nh, int fresh,
                            coai_error *e)
{
    struct h2c *hc;
    struct h2s *s;
    long id = -1, enc;
    coai_buf blk = { 0 };
    size_t lsz = coai_h2_header_list_size(hs, nh);
    if (cap_on()) cap_head_h2(hs, nh);
    /* the header block needs no connection (no dynamic table): encoded before the lock */
    enc = coai_hpack_encode(&blk, hs, nh);
    s = calloc(1, sizeof *s);               /* before the lock h2c_get returns with */
    if (s && cond_init_mono(&s->cv) != 0) { free(s); s = NULL; }
    if (s && cond_init_mono(&s->wcv) != 0) {
        pthread_cond_destroy(&s->cv);
        free(s);
        s = NULL;
    }
    if (s) s->notify = -1;
    hc = h2c_get(h, fresh, e);
    if (!hc) {
        if (s) {
            pthread_cond_destroy(&s->cv);
            pthread_cond_destroy(&s->wcv);
            free(s);
        }
        coai_buf_free(&blk);
        return NULL;
    }
    if (s && !hc->dead)
        id = enc < 0 ? enc : coai_h2_open_block(hc->core, blk.data, blk.len, lsz, 0, s);
    if (id == COAI_ERR_INVALID && lsz > hc->core->peer.max_header_list_size) {
        coai_error_set(e, 502, "upstream_error", "upstream_h2_failed", NULL,
                       "no HTTP/2 stream to %s: the request head (%zu bytes) is over the "
                       "server's SETTINGS_MAX_HEADER_LIST_SIZE (%u bytes); not sent",
                       h->authority, lsz, (unsigned)hc->core->peer.max_header_list_size);
    } else if (id <= 0) {
        coai_error_set(e, 502, "upstream_error", "upstream_h2_failed", NULL,
                       "no HTTP/2 stream to %s: %s", h->authority,
                       !s ? "out of memory" : hc->dead ? hc->why
                       : id == 0 ? "the server's stream limit" : "the connection is going away");
    }
    coai_buf_free(&blk);
    if (id <= 0) {
        hc->open--;
        pthread_mutex_unlock(&hc->mu);
        if (s) {
            pthread_cond_destroy(&s->cv);
            pthread_cond_destroy(&s->wcv);
            free(s);
        }
        h2c_unref(hc);
        return NULL;
    }
    s->hc = hc;
    s->id = (uint32_t)id;
    s->counted = 1;
    s->client_fd = -1;
    s->deadline = mono_ms() + UP_IO_TIMEOUT_MS;
    s->next = hc->streams;
    hc->streams = s;
    pthread_mutex_unlock(&hc->mu);
    /* no wake-up: the HEADERS go out with the first message (h2s_write), or at h2s_close */
    __atomic_add_fetch(&H2C.streams, 1, __ATOMIC_RELAXED);
    return s;
}

/* Send n bytes on s as DATA (end: with END_STREAM), within the windows: waits for window
 * (the connection's reading goes on meanwhile). 0 ok, -1 s->why. */
static int h2s_write(struct h2s *s, struct h2w *w, const void *p, size_t n, int end)
{
    struct h2c *hc = s->hc;
    const unsigned char *b = p;
    size_t off = 0;
    int out;
    pthread_mutex_lock(&hc->mu);
    for (;;) {
        size_t room, sent = 0;
        if (s->reset || hc->dead || s->local_end) {
            pthread_mutex_unlock(&hc->mu);
            w->why = UPX_IO;
            return -1;
        }
        room = coai_h2_send_room(hc->core, s->id);
        if (room == 0 && off < n) {
            short ev = POLLIN;
            int64_t deadline = w->end && w->end < s->deadline ? w->end : s->deadline;
            s->blocked = 1;
            s->wsig = 0;
            h2c_read_io_locked(hc);         /* the window comes in frames someone must read */
            pthread_mutex_unlock(&hc->mu);
            h2c_wake(hc);
            if (h2_wait(hc, &s->wcv, &s->wsig, deadline, w->client_fd, &ev, w->tick,
                        w->tick_ctx, &w->last_tick, &w->why, NULL) < 0) {
                pthread_mutex_lock(&hc->mu);
                s->blocked = 0;
                pthread_mutex_unlock(&hc->mu);
                return -1;
            }
            pthread_mutex_lock(&hc->mu);
            s->blocked = 0;
            /* window came back: the server is reading, which is progress */
            if (s->progress_ms && coai_h2_send_room(hc->core, s->id) > 0
                && s->deadline < mono_ms() + s->progress_ms)
                s->deadline = mono_ms() + s->progress_ms;
            continue;
        }
        if (room > n - off) room = n - off;
        if (coai_h2_send_data(hc->core, s->id, b + off, room, end && off + room == n,
                              &sent) < 0) {
            pthread_mutex_unlock(&hc->mu);
            w->why = UPX_IO;
            return -1;
        }
        off += sent;
        if (off == n) break;
        out = h2c_push_locked(hc);
        pthread_mutex_unlock(&hc->mu);
        h2c_pushed(hc, out);
        pthread_mutex_lock(&hc->mu);
    }
    if (end) s->local_end = 1;
    /* out on this thread: no wake-up of the I/O thread on the way to the server */
    out = h2c_push_locked(hc);
    pthread_mutex_unlock(&hc->mu);
    h2c_pushed(hc, out);
    return 0;
}

/* The response head of s: 0 when :status arrived (s->status), -1 s->why (a reset or a
 * refusal before it: s->reset, s->refused). */
static int h2s_head(struct h2s *s)
{
    for (;;) {
        int st, bad;
        pthread_mutex_lock(&s->hc->mu);
        s->sig = 0;                         /* what wakes the reader is looked at now */
        st = s->status;
        bad = s->reset || (s->ended && !st);
        pthread_mutex_unlock(&s->hc->mu);
        if (st) return 0;
        if (bad) { s->why = UPX_IO; return -1; }
        if (h2s_wait(s) < 0) return -1;
    }
}

/* The next bytes of s's response body: > 0 bytes at *p (valid until the next call), 0 the
 * end, -1 failed (s->why; s->reset for a reset stream or a dead connection). */
static long h2s_body(struct h2s *s, const unsigned char **p)
{
    struct h2c *hc = s->hc;
    for (;;) {
        pthread_mutex_lock(&hc->mu);
        s->sig = 0;                         /* what wakes the reader is looked at now */
        if (s->in.len) {
            coai_buf t = s->taken;
            const unsigned char *q;
            int out;
            s->taken = s->in;
            s->in = t;
            coai_buf_reset(&s->in);
            coai_h2_consumed(hc->core, s->id, s->taken.len);    /* the window goes back */
            out = coai_h2_want_write(hc->core, &q) > 0          /* a WINDOW_UPDATE is due */
                  ? h2c_push_locked(hc) : 0;
            pthread_mutex_unlock(&hc->mu);
            h2c_pushed(hc, out);
            *p = s->taken.data;
            return (long)s->taken.len;
        }
        if (s->ended) {
            pthread_mutex_unlock(&hc->mu);
            s->body_done = 1;
            return 0;
        }
        if (s->reset || hc->dead) {
            pthread_mutex_unlock(&hc->mu);
            s->why = UPX_IO;
            return -1;
        }
        pthread_mutex_unlock(&hc->mu);
        if (h2s_wait(s) < 0) return -1;
    }
}

/* h2s_body for a reader that lets the I/O thread consume its DATA while it sleeps: fn(ctx,
 * bytes, n) runs on that thread, the reader's run its own meanwhile, and returns 1 when the
 * reader must look (what fn left it, its client). A stream alone on its connection reads
 * it itself instead (h2s_body, h2s_lead). As h2s_body, and -2: fn asked for the reader.
 * The client, the tick and s->deadline (which fn may move) are looked at between slices,
 * as h2_wait does. */
static long h2s_body_il(struct h2s *s, const unsigned char **p,
                        int (*fn)(void *, const unsigned char *, size_t), void *ctx)
{
    struct h2c *hc = s->hc;
    int64_t slice = H2_SLICE_MS;
    pthread_mutex_lock(&hc->mu);
    for (;;) {
        int64_t now, left;
        s->sig = 0;
        if (s->il_wake) {
            s->il_wake = 0;
            pthread_mutex_unlock(&hc->mu);
            return -2;
        }
        if (s->in.len || s->ended || s->reset || hc->dead || h2s_lead_can_locked(s)) {
            pthread_mutex_unlock(&hc->mu);
            return h2s_body(s, p);
        }
        now = mono_ms();
        left = s->deadline - now;
        if (left <= 0) {
            pthread_mutex_unlock(&hc->mu);
            s->why = UPX_TIMEOUT;
            return -1;
        }
        pthread_mutex_unlock(&hc->mu);
        if (s->tick && now - s->last_tick >= 1000) {
            s->last_tick = now;
            if (s->tick(s->tick_ctx) < 0) { s->why = UPX_CANCELLED; return -1; }
        }
        if (s->client_fd >= 0 && s->client_events
            && client_left(s->client_fd, &s->client_events)) {
            s->why = UPX_CANCELLED;
            return -1;
        }
        pthread_mutex_lock(&hc->mu);
        if (s->sig || s->il_wake || s->in.len) continue;
        if (h2c_read_io_locked(hc)) h2c_wake(hc);      /* someone must read for it */
        s->il_fn = fn;
        s->il_ctx = ctx;
        s->il_park = H2S_IL_PARKED;
        s->waiting = 1;
        hc->sleepers++;
        cond_wait_ms(&s->cv, &hc->mu, left > slice ? slice : left);
        hc->sleepers--;
        s->waiting = 0;
        while (s->il_park == H2S_IL_BUSY) {     /* its consumer runs: the run is not ours */
            s->il_waiter = 1;
            pthread_cond_wait(&s->cv, &hc->mu);
        }
        s->il_park = H2S_IL_OFF;
        if (slice < 1000) slice = slice * 2 > 1000 ? 1000 : slice * 2;
    }
}

/* 1 when s has body bytes (or its end) without waiting, else waits up to ms for them. */
static int h2s_readable(struct h2s *s, int ms)
{
    struct h2c *hc = s->hc;
    int64_t end = mono_ms() + ms;
    int r;
    pthread_mutex_lock(&hc->mu);
    if (ms > 0 && h2c_read_io_locked(hc)) h2c_wake(hc);
    for (;;) {
        int64_t left;
        s->sig = 0;
        r = s->in.len || s->ended || s->reset || hc->dead;
        left = end - mono_ms();
        if (r || left <= 0) break;
        cond_wait_ms(&s->cv, &hc->mu, left);
    }
    pthread_mutex_unlock(&hc->mu);
    return r;
}

/* A held run's holder: fd (a pipe's write end, non-blocking; -1: none) gets a byte
 * whenever the reader is woken, so the holder polls it with its other wake-ups. */
static void h2s_notify(struct h2s *s, int fd)
{
    pthread_mutex_lock(&s->hc->mu);
    s->notify = fd;
    if (fd >= 0 && h2c_read_io_locked(s->hc)) h2c_wake(s->hc);    /* it does not lead */
    pthread_mutex_unlock(&s->hc->mu);
}

/* Why s failed, for error messages. */
static void h2s_failure(struct h2s *s, char *out, size_t cap)
{
    pthread_mutex_lock(&s->hc->mu);
    if (s->hc->dead)
        snprintf(out, cap, "the HTTP/2 connection to %.60s failed: %.100s", s->hc->host.authority,
                 s->hc->why);
    else if (s->local_reset)
        snprintf(out, cap, "the proxy reset the stream (RST_STREAM %.30s): %s",
                 coai_h2_error_str(s->rst_code), s->rst_code == COAI_H2_INTERNAL_ERROR
                 ? "out of memory for its data" : "the server broke HTTP/2 on it");
    else if (s->refused)
        snprintf(out, cap, "%.60s refused the stream (%.30s)", s->hc->host.authority,
                 s->hc->goaway ? "GOAWAY" : coai_h2_error_str(s->rst_code));
    else if (s->reset)
        snprintf(out, cap, "%.60s reset the stream (RST_STREAM %.30s)", s->hc->host.authority,
                 coai_h2_error_str(s->rst_code));
    else
        snprintf(out, cap, "the HTTP/2 stream ended");
    pthread_mutex_unlock(&s->hc->mu);
}

/* 1 when s failed because the server broke HTTP/2: a stream error we reset it for, or a
 * connection that failed for the server's HTTP/2 (a protocol error or a flood: it answered,
 * so it is not unreachable). */
static int h2s_protocol_fault(struct h2s *s)
{
    int f;
    pthread_mutex_lock(&s->hc->mu);
    f = (s->local_reset && s->rst_code != COAI_H2_INTERNAL_ERROR)
        || (s->hc->dead && s->hc->fault != H2C_FAULT_NONE);
    pthread_mutex_unlock(&s->hc->mu);
    return f;
}

/* Close s: END_STREAM when the server is done and we are not, else RST_STREAM(CANCEL)
 * unless it is over; its slot on the connection is freed. */
static void h2s_close(struct h2s *s)
{
    struct h2c *hc;
    struct h2s **pp;
    int out;
    unsigned long gen;
    if (!s) return;
    hc = s->hc;
    pthread_mutex_lock(&hc->mu);
    if (!s->reset && !hc->dead) {
        size_t sent;
        if (!s->ended) coai_h2_reset(hc->core, s->id, COAI_H2_CANCEL);
        else if (!s->local_end) coai_h2_send_data(hc->core, s->id, NULL, 0, 1, &sent);
    }
    if (s->counted) { s->counted = 0; hc->open--; hc->last_use = mono_ms(); }
    for (pp = &hc->streams; *pp; pp = &(*pp)->next)
        if (*pp == s) { *pp = s->next; break; }
    if (s->pend)
        for (pp = &hc->pend_list; *pp; pp = &(*pp)->pend_next)
            if (*pp == s) { *pp = s->pend_next; break; }
    out = h2c_push_locked(hc);          /* RST_STREAM, END_STREAM out on this thread */
    gen = s->sig_gen;                   /* the batch that named s last may still run */
    pthread_mutex_unlock(&hc->mu);
    h2c_pushed(hc, out);
    while (__atomic_load_n(&hc->sig_done, __ATOMIC_ACQUIRE) < gen) sched_yield();
    /* runs waiting in h2c_get (only while a connection is being opened) may use the slot;
     * none waiting (the rule): no global lock per closed stream. One that starts waiting
     * just now is woken when that connection is up, as it would be anyway. */
    if (__atomic_load_n(&H2C.waiting, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&H2C.lock);
        pthread_cond_broadcast(&H2C.cond);
        pthread_mutex_unlock(&H2C.lock);
    }
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->wcv);
    coai_buf_free(&s->in);
    coai_buf_free(&s->taken);
    free(s);
    h2c_unref(hc);
}

/* HTTP/2 connections open now and the streams on them (/metrics, the bench). */
static void h2c_counts(int *conns, int *streams);

/* The HTTP/2 side of /metrics, read at scrape time. */
static void h2_metrics_write(coai_buf *b)
{
    int conns, streams;
    h2c_counts(&conns, &streams);
    metric_gauge_now(b, "cursor_oai_h2_connections", "gauge",
                     "HTTP/2 connections to Cursor open now", conns);
    metric_gauge_now(b, "cursor_oai_h2_streams", "gauge",
                     "Run streams open on them", streams);
    metric_gauge_now(b, "cursor_oai_h2_connections_opened_total", "counter",
                     "HTTP/2 connections opened (each one TLS handshake)",
                     (double)__atomic_load_n(&H2C.opened, __ATOMIC_RELAXED));
    metric_gauge_now(b, "cursor_oai_h2_streams_opened_total", "counter",
                     "Run streams opened", (double)__atomic_load_n(&H2C.streams,
                                                                   __ATOMIC_RELAXED));
    metric_gauge_now(b, "cursor_oai_h2_goaways_total", "counter",
                     "GOAWAY frames received", (double)__atomic_load_n(&H2C.goaways,
                                                                       __ATOMIC_RELAXED));
    metric_gauge_now(b, "cursor_oai_h2_pings_total", "counter", "PINGs sent on idle "
                     "connections", (double)__atomic_load_n(&H2C.pings, __ATOMIC_RELAXED));
    metric_gauge_now(b, "cursor_oai_h2_io_thread_reads_total", "counter",
                     "Reads of a Run stream's DATA that the connection's I/O thread handled "
                     "itself (text and thinking deltas written to the client), its run's "
                     "thread asleep", (double)__atomic_load_n(&H2C.il_runs, __ATOMIC_RELAXED));
    metric_gauge_now(b, "cursor_oai_h2_io_thread_handbacks_total", "counter",
                     "Of those, the ones that woke the run's thread (a message only it "
                     "handles, the end, a client that reads slowly)",
                     (double)__atomic_load_n(&H2C.il_wakes, __ATOMIC_RELAXED));
}


static void h2c_counts(int *conns, int *streams)
{
    struct h2c *hc;
    *conns = *streams = 0;
    pthread_mutex_lock(&H2C.lock);
    for (hc = H2C.list; hc; hc = hc->next) {
        pthread_mutex_lock(&hc->mu);
        if (!hc->dead) { (*conns)++; *streams += hc->open; }
        pthread_mutex_unlock(&hc->mu);
    }
    pthread_mutex_unlock(&H2C.lock);
}

/* ---- the run over HTTP/2: one Run stream (TR_H2) ---- */

/* One AgentClientMessage on the run's Run stream: a Connect envelope (flags 0, u32 length)
 * of it as request body, under send_mu (a heartbeat never lands inside a tool result). */
static int h2_run_send(struct run *r, const unsigned char *msg, size_t n, int client_fd,
                       int (*tick)(void *), void *tick_ctx, coai_error *err, int *cancelled)
{
    struct h2w w;
    unsigned char h[5], *one;
    int rc;
    if (!r->up.h2) {
        coai_error_set(err, 502, "upstream_error", "upstream_closed", NULL,
                       "the upstream run is closed");
        return -1;
    }
    if (cap_on()) cap_client(msg, n);
    h[0] = 0;
    h[1] = (unsigned char)(n >> 24); h[2] = (unsigned char)(n >> 16);
    h[3] = (unsigned char)(n >> 8); h[4] = (unsigned char)n;
    w.client_fd = client_fd;
    w.tick = tick;
    w.tick_ctx = tick_ctx;
    w.why = UPX_OK;
    w.last_tick = mono_ms();
    /* one message at a time: its bytes must not interleave with another's on the stream
     * (a writer waits here only while the stream has no window, when no other could send) */
    if (r->mu_init) pthread_mutex_lock(&r->up.send_mu);
    /* a message is HTTP/1.1's BidiAppend call: the same whole-call deadline
     * (CURSOR_OAI_UPSTREAM_TIMEOUT), however long the stream's own read deadline is */
    w.end = mono_ms() + (conf.up_call_ms > 0 ? conf.up_call_ms : UP_CALL_TIMEOUT_S * 1000);
    if (n <= H2_ONE_FRAME - 5 && (one = malloc(n + 5)) != NULL) {
        /* envelope and message in one DATA frame, one wake-up of the I/O thread (with the
         * run request: HEADERS and DATA in one TLS record); on the heap: see tr_open */
        memcpy(one, h, 5);
        memcpy(one + 5, msg, n);
        rc = h2s_write(r->up.h2, &w, one, n + 5, 0);
        memset(one, 0, n + 5);
        free(one);
    } else {
        rc = h2s_write(r->up.h2, &w, h, 5, 0);
        if (rc == 0) rc = h2s_write(r->up.h2, &w, msg, n, 0);
    }
    if (r->mu_init) pthread_mutex_unlock(&r->up.send_mu);
    if (rc < 0) {
        if (w.why == UPX_CANCELLED) {
            up_err(err, 499, "client_closed", "client went away");
            if (cancelled) *cancelled = 1;
        } else if (w.why == UPX_TIMEOUT) {
            up_err(err, 504, "upstream_timeout", "the HTTP/2 flow-control window of the run "
                   "stayed closed: Cursor read nothing of the message");
        } else {
            tr_io_error(r, err, "sending to the Run stream");
        }
        return -1;
    }
    srv_log(LOG_DEBUG, "run %s: message (%zu bytes) on the Run stream", r->up.request_id, n);
    return 0;
}

/* HTTP/2: open the Run stream on the run's host, send the run request as its first message,
 * wait for the response head. 0 ok, 1 retry on a fresh connection (the stream was refused
 * on a shared one), -1 r->err filled (r->fb.tr_fail: a transport failure before any answer,
 * which HTTP/1.1 may not have). */
static int h2_run_start(struct run *r, int fresh, const char *token, size_t tl)
{
    char *auth = malloc(tl + 8), path[320];     /* the heap: see tr_open */
    coai_h2_header hs[15];
    size_t nh = 0;
    int rc = -1;
    if (!auth) {
        coai_error_set(&r->err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    snprintf(auth, tl + 8, "Bearer %.*s", (int)tl, token);
    snprintf(path, sizeof path, "%.256s%s", r->up.host.prefix, PATH_RUN);
#define H2H(n, v) (hs[nh].name = coai_str_c(n), hs[nh].value = coai_str_c(v), nh++)
    H2H(":method", "POST");
    H2H(":scheme", "https");
    H2H(":path", path);
    H2H(":authority", r->up.host.authority);
    H2H("authorization", auth);
    H2H("content-type", "application/connect+proto");
    H2H("user-agent", "connect-es/1.6.1");
    H2H("connect-protocol-version", "1");
    H2H("x-cursor-client-version", conf.client_version);
    H2H("x-cursor-client-type", "cli");
    H2H("x-ghost-mode", "true");
    /* as the CLI's Run: the run's first id and the blob key
     * as on HTTP/1.1; no x-cursor-streaming (RunSSE only); no connect-accept-encoding (a
     * compressed frame from Cursor is not read) */
    H2H("x-request-id", r->up.request_id);
    H2H("x-original-request-id", r->up.orig_id[0] ? r->up.orig_id : r->up.request_id);
    if (blob_key()[0]) H2H("x-blob-encryption-key", blob_key());
#undef H2H
    if (r->up.tools_hdr[0].len) {       /* caller-owned tools (coai_run_tools_header) */
        hs[nh].name = r->up.tools_hdr[0];
        hs[nh].value = r->up.tools_hdr[1];
        nh++;
    }
    {   /* the names, for doctor */
        char names[sizeof run_head_names[0]];
        size_t i, k = 0;
        for (i = 0; i < nh; i++) {
            if (hs[i].name.ptr[0] == ':' || k + hs[i].name.len + 3 >= sizeof names) continue;
            if (k) { names[k++] = ','; names[k++] = ' '; }
            memcpy(names + k, hs[i].name.ptr, hs[i].name.len);
            k += hs[i].name.len;
        }
        names[k] = 0;
        pthread_mutex_lock(&run_head_lock);
        memcpy(run_head_names[TR_H2], names, k + 1);
        pthread_mutex_unlock(&run_head_lock);
    }
    r->up.h2 = h2s_open(&r->up.host, hs, nh, fresh, &r->err);
    memset(auth, 0, tl + 8);
    free(auth);
    if (!r->up.h2) {
        r->fb.tr_fail = r->err.status != 500;
        goto done;
    }
    tr_watch(r, r->c->fd, run_tick);
    run_watch_start(r);
    r->up.h2->progress_ms = (int64_t)conf.silence_s * 1000 < r->up.idle_ms
                            ? (int64_t)conf.silence_s * 1000 : r->up.idle_ms;
    srv_log(LOG_DEBUG, "run %s: Run stream %u to %s", r->up.request_id, r->up.h2->id,
            r->up.host.authority);
    if (h2_run_send(r, r->up.run_msg.data, r->up.run_msg.len, r->c->fd, run_send_tick, r, &r->err,
                    &r->out.cancelled) < 0) {
        if (r->err.status != 499 && r->err.status != 504) r->fb.tr_fail = 1;
        goto done;
    }
    if (h2s_head(r->up.h2) < 0) {
        if (r->up.h2->why == UPX_CANCELLED) {
            up_err(&r->err, 499, "client_closed", "client went away");
            r->out.cancelled = 1;
        } else if (r->up.h2->why == UPX_TIMEOUT) {
            up_err(&r->err, 504, "upstream_timeout", "no answer to the Run stream within the "
                   "idle timeout");
        } else {
            /* a refusal on a shared connection (GOAWAY just now): once more on a new one;
             * not when it said HTTP_1_1_REQUIRED (the 464 path, so HTTP/1.1
             * at once) */
            int h11 = r->up.h2->rst_code == COAI_H2_HTTP_1_1_REQUIRED
                      || r->up.h2->hc->goaway_code == COAI_H2_HTTP_1_1_REQUIRED;
            if (!fresh && r->up.h2->refused && !r->up.h2->hc->dead && !h11) rc = 1;
            tr_io_error(r, &r->err, "starting the Run stream");
            r->fb.tr_fail = 1;
        }
        goto done;
    }
    r->up.t_head = mono_ms();
    if (r->up.h2->status != 200) {
        coai_buf eb = { 0 };
        const unsigned char *p;
        long n;
        r->fb.http_status = r->up.h2->status;
        r->up.h2->deadline = mono_ms() + UP_IO_TIMEOUT_MS;
        while ((n = h2s_body(r->up.h2, &p)) > 0 && eb.len < UP_ERR_BODY_MAX)
            coai_buf_append(&eb, p, (size_t)n);
        coai_error_from_http(r->up.h2->status, (const char *)eb.data, eb.len, &r->err);
        coai_buf_free(&eb);
        if (r->err.status == 401) r->fb.upstream_401 = 1;
        /* the load balancer's "not this protocol" and HTTP-version answers */
        if (r->fb.http_status == 464 || r->fb.http_status == 505 || r->fb.http_status == 426)
            r->fb.tr_fail = 1;
        goto done;
    }
    srv_log(LOG_DEBUG, "run %s: Run head after %lld ms", r->up.request_id,
            (long long)(r->up.t_head - r->up.t_start));
    rc = 0;
done:
    if (rc != 0 && r->up.h2) { h2s_close(r->up.h2); r->up.h2 = NULL; }
    return rc;
}

/* ======================================================================== */
/* Credentials: the token in memory, files, reloading, renewal              */
/* ======================================================================== */

/* The token lives in creds under creds.lock: first the token in memory, then its files, their
 * reloading and renewal (through the upstream client above). Callers never hold creds.lock
 * while logging: srv_log takes it. */

/* Copy the current token into out (cap bytes); *gen (may be NULL) gets its generation, which a
 * caller hands back to cred_refresh() when the upstream rejects it. Returns its length, 0 when
 * there is none. */
static size_t cred_token(char *out, size_t cap, uint64_t *gen)
{
    size_t n;
    pthread_mutex_lock(&creds.lock);
    n = strlen(creds.token);
    copy_str(out, cap, creds.token, n);
    if (gen) *gen = creds.gen;
    pthread_mutex_unlock(&creds.lock);
    return n < cap ? n : 0;
}

/* 1 when there is an access token at all. */
static int cred_have(void)
{
    int r;
    pthread_mutex_lock(&creds.lock);
    r = creds.token[0] != 0;
    pthread_mutex_unlock(&creds.lock);
    return r;
}

/* A model list failure may have been the old token's: forget it when the token changes.
 * Takes models_cache.lock; called after creds.lock is let go (the two are never nested). */
static void models_failure_forget(void)
{
    pthread_mutex_lock(&models_cache.lock);
    models_cache.fail_at = 0;
    pthread_mutex_unlock(&models_cache.lock);
}

/* Install credentials (NULL members = none). Caller holds creds.lock, and calls
 * models_failure_forget after letting it go when this returns 1 (the token changed). */
static int cred_set_locked(const coai_creds *c, int src)
{
    const char *at = c && c->access_token ? c->access_token : "";
    const char *rt = c && c->refresh_token ? c->refresh_token : "";
    const char *key = c && c->api_key ? c->api_key : "";
    int changed = strcmp(creds.token, at) != 0;
    if (changed) creds.gen++;
    copy_str(creds.token, sizeof creds.token, at, strlen(at));
    copy_str(creds.refresh, sizeof creds.refresh, rt, strlen(rt));
    copy_str(creds.key, sizeof creds.key, key, strlen(key));
    creds.src = at[0] ? src : CRED_NONE;
    return changed;
}

/* An upstream call rejected the token after bytes were already streamed (no retry possible
 * then): the next request renews it first. */
static void cred_mark_rejected(uint64_t gen)
{
    pthread_mutex_lock(&creds.lock);
    if (gen == creds.gen) creds.bad_gen = gen;
    pthread_mutex_unlock(&creds.lock);
}


#define CRED_FILE_MAX (64 * 1024)       /* auth.json bytes */
#define CRED_MARGIN_S 300               /* renew when the token expires within this */
#define CRED_STILL_OK_S 10              /* failed early renewal: old token still used if valid */
#define CRED_REJECT_BACKOFF_MS 30000    /* no renewal this long after one was rejected */
#define CRED_CHECK_MS 1000              /* look at the files at most this often */
#define CRED_PERSIST_RETRY_MS 5000      /* a failed save is retried this often (on requests) */
#define CRED_LOCK_WAIT_MS 15000         /* wait for another process's renewal at most this */
#define CRED_AUTH_BODY_MAX (64 * 1024)  /* answers of the /auth endpoints */

/* A browser login is renewed the way Cursor's IDE renews it: POST /oauth/token with this
 * public client id (measured live in 2026: a 60-day access token, and the refresh
 * token does not rotate). /auth/refresh is only tried when /oauth/token answers 404. */
#define CURSOR_OAUTH_CLIENT_ID "KbZUR41cY7W6zRSdpSUJ7I7mLYBKOCmB"

/* Credential file locations. Ours: $XDG_CONFIG_HOME/cursor-oai/auth.json, else
 * ~/.config/cursor-oai/auth.json. cursor-agent's (read-only fallback): the same with "cursor". */
static void cred_paths(void)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    char base[PATH_MAX];
    if (xdg && xdg[0] == '/') {
        snprintf(base, sizeof base, "%s", xdg);
    } else {
        if (!home || home[0] != '/') {
            struct passwd *pw = getpwuid(getuid());
            home = pw && pw->pw_dir ? pw->pw_dir : "/";
        }
        snprintf(base, sizeof base, "%s/.config", strcmp(home, "/") == 0 ? "" : home);
    }
    snprintf(file_paths.ours_dir, sizeof file_paths.ours_dir, "%.*s/cursor-oai", PATH_MAX - 32,
             base);
    snprintf(file_paths.ours_path, sizeof file_paths.ours_path, "%.*s/auth.json", PATH_MAX - 32,
             file_paths.ours_dir);
#ifdef __APPLE__
    if (!(xdg && xdg[0] == '/') && home) {
        snprintf(file_paths.agent_path, sizeof file_paths.agent_path, "%.*s/.cursor/auth.json",
                 PATH_MAX - 32, home);
        return;
    }
#endif
    snprintf(file_paths.agent_path, sizeof file_paths.agent_path, "%.*s/cursor/auth.json",
             PATH_MAX - 32, base);
}

static void file_id_from(const struct stat *st, struct file_id *id)
{
    memset(id, 0, sizeof *id);
    id->exists = 1;
    id->dev = st->st_dev;
    id->ino = st->st_ino;
    id->size = st->st_size;
    id->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static void file_id_of(const char *path, struct file_id *id)
{
    struct stat st;
    if (lstat(path, &st) == 0) file_id_from(&st, id);
    else memset(id, 0, sizeof *id);
}

static int file_id_same(const struct file_id *a, const struct file_id *b)
{
    if (!a->exists || !b->exists) return a->exists == b->exists;
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size
        && a->mtime_ns == b->mtime_ns;
}

/* Read a credentials file. 0 ok (c filled, with an access token), 1 missing, -1 unusable
 * (why says why; never token text). *id gets the identity of what was read (or "missing").
 * A file others can read, or that belongs to someone else, gets a warning. */
static int cred_read_file(const char *path, coai_creds *c, struct file_id *id, char *why,
                          size_t cap)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0;
    int fd, rc = -1, fd_r;
    memset(c, 0, sizeof *c);
    file_id_of(path, id);       /* what cred_poll_files() compares against (lstat) */
    /* O_NOFOLLOW: a symlink planted in place of the file is not followed */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        snprintf(why, cap, "cannot open %s: %s", path,
                 errno == ELOOP ? "it is a symbolic link (refused)" : strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "%s is not a regular file", path);
        goto done;
    }
    if (st.st_size > CRED_FILE_MAX) {
        snprintf(why, cap, "%s is too large to be a credentials file", path);
        goto done;
    }
    if (st.st_mode & 077)
        srv_log(LOG_WARN, "credentials file %s is readable by others (mode %04o); run "
                "'chmod 600 %s'", path, (unsigned)(st.st_mode & 07777), path);
    if (st.st_uid != geteuid())
        srv_log(LOG_WARN, "credentials file %s belongs to another user (uid %u)", path,
                (unsigned)st.st_uid);
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) { snprintf(why, cap, "out of memory"); goto done; }
    while (len < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + len, (size_t)st.st_size - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    if (memchr(buf, 0, len)) {
        /* a raw NUL would cut a token short without a word */
        snprintf(why, cap, "%s contains a NUL byte (refused)", path);
        goto done;
    }
    if ((fd_r = coai_creds_parse(buf, len, c)) < 0) {
        snprintf(why, cap, fd_r == -2 ? "%s has a \\u0000 escape in a string (refused: it "
                 "would cut a token short)" : "%s is not a JSON object", path);
        goto done;
    }
    if (!c->access_token) {
        snprintf(why, cap, "%s has no usable accessToken", path);
        goto done;
    }
    if (strlen(c->access_token) >= SRV_TOKEN_MAX
        || (c->refresh_token && strlen(c->refresh_token) >= SRV_TOKEN_MAX)
        || (c->api_key && strlen(c->api_key) >= SRV_TOKEN_MAX)) {
        snprintf(why, cap, "%s holds a token longer than %d bytes", path, SRV_TOKEN_MAX - 1);
        goto done;
    }
    rc = 0;
done:
    if (rc != 0) coai_creds_free(c);
    if (buf) { memset(buf, 0, len); free(buf); }
    close(fd);
    return rc;
}

/* mkdir -p with mode 0700 for every directory created. 0 ok, -1 errno set. */
static int mkdir_private(const char *dir)
{
    char p[PATH_MAX];
    size_t i, n = strlen(dir);
    if (n == 0 || n >= sizeof p) { errno = ENAMETOOLONG; return -1; }
    memcpy(p, dir, n + 1);
    for (i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        p[i] = 0;
        if (mkdir(p, 0700) < 0 && errno != EEXIST) return -1;
        p[i] = i < n ? '/' : 0;
    }
    return 0;
}

/* Write our credentials file atomically: a new file in the same directory (O_EXCL, 0600,
 * never through a symlink), write, fsync, rename over the old one, fsync the directory. On any
 * failure the temporary file is removed and the old file is left exactly as it was.
 * 0 ok, -1 with why filled (never token text). */
static int cred_write_file(const coai_creds *c, char *why, size_t cap)
{
    char tmp[PATH_MAX + 32];
    unsigned char rnd[6];
    coai_buf b = { 0 };
    struct stat st;
    size_t off = 0;
    int fd = -1, dfd, err = 0;
    const char *step = "";
    if (mkdir_private(file_paths.ours_dir) < 0) {
        snprintf(why, cap, "cannot create %s: %s", file_paths.ours_dir, strerror(errno));
        return -1;
    }
    /* A symlinked config directory is the user's arrangement: followed only into a directory
     * of ours, and its target's mode is left alone (it may be shared). */
    if (lstat(file_paths.ours_dir, &st) == 0 && S_ISLNK(st.st_mode)) {
        if (stat(file_paths.ours_dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
            snprintf(why, cap, "%s is a symbolic link to a directory that is not yours "
                     "(refused); remove the link or point it at a directory of your own",
                     file_paths.ours_dir);
            return -1;
        }
    } else if (stat(file_paths.ours_dir, &st) == 0 && (st.st_mode & 077)
               && st.st_uid == geteuid()) {
        /* our own directory: keep it private even if something loosened it */
        chmod(file_paths.ours_dir, 0700);
    }
    if (coai_creds_format(&b, c) < 0 || random_fill(rnd, sizeof rnd) < 0) {
        snprintf(why, cap, "out of memory");
        coai_buf_free(&b);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/.auth.json.%02x%02x%02x%02x%02x%02x.tmp", file_paths.ours_dir,
             rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    step = "create";
    fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) goto fail_noremove;
    step = "chmod";
    if (fchmod(fd, 0600) < 0) goto fail;    /* exactly 0600 whatever the umask */
    step = "write";
    while (off < b.len) {
        ssize_t w = write(fd, b.data + off, b.len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { if (w == 0) errno = EIO; goto fail; }
        off += (size_t)w;
    }
    step = "fsync";
    if (fsync(fd) < 0) goto fail;
    step = "close";
    err = close(fd);
    fd = -1;
    if (err < 0) goto fail;
    step = "rename";
    if (rename(tmp, file_paths.ours_path) < 0) goto fail;
    /* The rename is done; a failed directory fsync only weakens crash safety. */
    dfd = open(file_paths.ours_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0)
        srv_log(LOG_WARN, "fsync of %s failed: %s", file_paths.ours_dir, strerror(errno));
    if (dfd >= 0) close(dfd);
    memset(b.data, 0, b.len);
    coai_buf_free(&b);
    return 0;
fail:
    err = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    errno = err;
fail_noremove:
    snprintf(why, cap, "cannot save credentials to %s (%s: %s); the old file was left as it "
             "was", file_paths.ours_path, step, strerror(errno));
    if (b.data) memset(b.data, 0, b.len);
    coai_buf_free(&b);
    return -1;
}

/* Load credentials into creds: CURSOR_ACCESS_TOKEN, else our file, else cursor-agent's.
 * Returns the CRED_* source. An unusable file is reported and skipped. */
static int cred_load(void)
{
    const char *env = getenv("CURSOR_ACCESS_TOKEN");
    coai_creds c;
    struct file_id ours, agent;
    char why[PATH_MAX + 128];
    int r, src = CRED_NONE, changed = 0;
    memset(&c, 0, sizeof c);
    memset(&agent, 0, sizeof agent);
    if (env && *env) {
        size_t i, n = strlen(env);
        for (i = 0; i < n && (unsigned char)env[i] > 0x20 && (unsigned char)env[i] < 0x7f; i++) {}
        if (i < n || n >= SRV_TOKEN_MAX) {
            srv_log(LOG_ERROR, "CURSOR_ACCESS_TOKEN is not a token (visible ASCII, < %d "
                    "bytes); ignored", SRV_TOKEN_MAX);
        } else {
            c.access_token = (char *)env;
            pthread_mutex_lock(&creds.lock);
            changed = cred_set_locked(&c, CRED_ENV);
            pthread_mutex_unlock(&creds.lock);
            if (changed) models_failure_forget();
            return CRED_ENV;
        }
        memset(&c, 0, sizeof c);
    }
    r = cred_read_file(file_paths.ours_path, &c, &ours, why, sizeof why);
    if (r < 0) srv_log(LOG_WARN, "%s", why);
    if (r == 0) {
        src = CRED_OURS;
    } else {
        int keep = r < 0;
        r = cred_read_file(file_paths.agent_path, &c, &agent, why, sizeof why);
        if (r < 0) srv_log(LOG_WARN, "%s", why);
        if (r == 0) src = CRED_AGENT;
        pthread_mutex_lock(&creds.lock);
        keep = keep && creds.src == CRED_OURS;
        if (keep) {
            /* our file went bad under us (hand-edited?): keep what we have in memory */
            creds.ours_id = ours;
            creds.agent_id = agent;
            src = creds.src;
        }
        pthread_mutex_unlock(&creds.lock);
        if (keep) { coai_creds_free(&c); return src; }
    }
    pthread_mutex_lock(&creds.lock);
    creds.ours_id = ours;
    creds.agent_id = agent;
    if (src != CRED_NONE || creds.src != CRED_NONE) {
        changed = cred_set_locked(&c, src);
        /* new credentials from a file: forget old failures */
        creds.refresh_block_until = 0;
        creds.refresh_failed = 0;
        creds.persist_failed = 0;
        creds.bad_gen = 0;
    }
    pthread_mutex_unlock(&creds.lock);
    if (changed) models_failure_forget();
    coai_creds_free(&c);
    return src;
}

/* Pick up a login (or logout) done while serving: at most once a second look at the files;
 * one that changed since we loaded or wrote it is loaded again. */
static void cred_poll_files(void)
{
    struct file_id ours, agent;
    int64_t now = mono_ms();
    int changed, src;
    pthread_mutex_lock(&creds.lock);
    src = creds.src;
    if (src == CRED_ENV || now - creds.checked_at < CRED_CHECK_MS) {
        pthread_mutex_unlock(&creds.lock);
        return;
    }
    creds.checked_at = now;
    pthread_mutex_unlock(&creds.lock);
    file_id_of(file_paths.ours_path, &ours);
    memset(&agent, 0, sizeof agent);
    if (!ours.exists) file_id_of(file_paths.agent_path, &agent);
    pthread_mutex_lock(&creds.lock);
    changed = !file_id_same(&ours, &creds.ours_id)
           || (!ours.exists && !file_id_same(&agent, &creds.agent_id));
    pthread_mutex_unlock(&creds.lock);
    if (!changed) return;
    src = cred_load();
    srv_log(LOG_INFO, "credentials changed on disk; now using %s",
            src == CRED_OURS ? file_paths.ours_path
            : src == CRED_AGENT ? file_paths.agent_path : "nothing");
}

/* Take the inter-process renewal lock (a lock file next to our credentials file), waiting at
 * most CRED_LOCK_WAIT_MS. Returns the fd to pass to cred_unlock, or -1 (go on unlocked). */
static int cred_lock(void)
{
    char path[PATH_MAX + 16];
    int64_t end = mono_ms() + CRED_LOCK_WAIT_MS;
    int fd;
    if (mkdir_private(file_paths.ours_dir) < 0) return -1;
    snprintf(path, sizeof path, "%s/auth.json.lock", file_paths.ours_dir);
    fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || mono_ms() > end) {
            srv_log(LOG_WARN, "could not lock %s; renewing without it", path);
            close(fd);
            return -1;
        }
        poll(NULL, 0, 50);
    }
    return fd;
}

static void cred_unlock(int fd)
{
    if (fd >= 0) close(fd);     /* closing drops the flock */
}

/* The 401 a client gets when the login cannot be renewed. */
static void cred_err_login(coai_error *e, const char *what)
{
    coai_error_set(e, 401, "authentication_error", "upstream_auth_expired", NULL,
                   "The Cursor login has expired and could not be renewed (%s). Run "
                   "`cursor-oai login` to log in again.", what);
    e->no_retry = 1;
}

/* POST /oauth/token {grant_type: "refresh_token", client_id, refresh_token}: the refresh token
 * travels in the JSON body, no bearer. Answer {access_token, id_token, shouldLogout}; the
 * refresh token stays the one sent (it is taken from the answer only if one is ever sent).
 * RENEW_OK with *out filled; RENEW_NONE when the route answered 404 (the caller may fall back
 * to /auth/refresh); RENEW_FAILED with *e: 401 refused or revoked (log in again), 503 when
 * the upstream could not be asked. */
static int cred_renew_oauth(const char *refresh, coai_creds *out, coai_error *e)
{
    coai_buf head = { 0 }, req = { 0 }, body = { 0 };
    coai_error te;
    char what[160];
    int status = 0, logout = 0, rc = RENEW_FAILED, prc = 0;
    memset(out, 0, sizeof *out);
    memset(&te, 0, sizeof te);
    body.max = CRED_AUTH_BODY_MAX;
    coai_buf_puts(&req, "{\"grant_type\":\"refresh_token\",\"client_id\":\""
                  CURSOR_OAUTH_CLIENT_ID "\",\"refresh_token\":");
    coai_json_str_append(&req, refresh, strlen(refresh));
    coai_buf_puts(&req, "}");
    coai_buf_printf(&head, "POST %s/oauth/token HTTP/1.1\r\nhost: %s\r\n"
                    "content-type: application/json\r\naccept: application/json\r\n"
                    "user-agent: connect-es/1.4.0\r\ncontent-length: %zu\r\n\r\n",
                    conf.up_prefix, conf.up_authority, req.len);
    if (head.err || req.err) {
        coai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    if (up_exchange(&head, req.data, req.len, "renewing the login through /oauth/token", -1,
                    NULL, NULL, &status, &body,
                    &te) < 0) {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Could not renew the Cursor login: %s. The current credentials are "
                       "kept; try again.", te.message);
        e->retry_after = 5;
        goto done;
    }
    if (status == 404) { rc = RENEW_NONE; goto done; }
    if (status >= 200 && status <= 299 && !body.err
        && (prc = coai_oauth_token_parse((const char *)body.data, body.len, out,
                                         &logout)) == 0) {
        if (logout) {
            coai_creds_free(out);
            coai_error_set(e, 401, "authentication_error", "upstream_auth_expired", NULL,
                           "Cursor revoked this login (/oauth/token answered shouldLogout). "
                           "Log in again: run `cursor-oai login`.");
            e->no_retry = 1;
            goto done;
        }
        if (out->access_token && strlen(out->access_token) < SRV_TOKEN_MAX
            && (!out->refresh_token || strlen(out->refresh_token) < SRV_TOKEN_MAX)) {
            if (!out->refresh_token && !(out->refresh_token = strdup(refresh))) {
                coai_creds_free(out);
                coai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
                goto done;
            }
            rc = RENEW_OK;
            goto done;
        }
    }
    coai_creds_free(out);
    snprintf(what, sizeof what, "/oauth/token answered HTTP %d%s", status,
             prc == -2 ? " with a \\u0000 escape in a string (refused: it would cut the token "
                         "short)"
             : status >= 200 && status <= 299 ? " without an access token" : "");
    if ((status >= 200 && status <= 299) || status == 400 || status == 401 || status == 403) {
        cred_err_login(e, what);
    } else {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Could not renew the Cursor login (%s). The current credentials are "
                       "kept; try again.", what);
        e->retry_after = 5;
    }
done:
    if (head.data) memset(head.data, 0, head.len);
    if (req.data) memset(req.data, 0, req.len);
    if (body.data) memset(body.data, 0, body.len);
    coai_buf_free(&head);
    coai_buf_free(&req);
    coai_buf_free(&body);
    return rc;
}

/* One renewal call: /auth/exchange_user_api_key when an API key is stored (spec 14.2), else
 * /oauth/token, and /auth/refresh (spec 14.3) only when /oauth/token answers 404 and the login
 * is our own (agent = 1: cursor-agent's login, renewed only by the non-rotating /oauth/token).
 * RENEW_OK with *out filled, else RENEW_FAILED with *e: a 401 when the upstream refused (the
 * user must log in again), a retryable 503 when it could not be asked. */
static int cred_renew_http(const char *refresh, const char *key, int agent, coai_creds *out,
                           coai_error *e)
{
    const char *target = key[0] ? "/auth/exchange_user_api_key" : "/auth/refresh";
    coai_buf body = { 0 };
    coai_error te;
    char what[96];
    int status = 0, rc = RENEW_FAILED;
    if (!key[0]) {
        rc = cred_renew_oauth(refresh, out, e);
        if (rc != RENEW_NONE) return rc;
        rc = RENEW_FAILED;
        if (agent) {
            /* /auth/refresh may rotate the refresh token (spec 14.3): that would log
             * cursor-agent out, so its login is never renewed there. */
            coai_error_set(e, 401, "authentication_error", "upstream_auth_expired", NULL,
                           "The Cursor login comes from cursor-agent's %s and has expired; "
                           "it can be renewed only through /oauth/token, which answered 404 "
                           "(the other route could use up cursor-agent's refresh token). Run "
                           "`cursor-agent login` again, or `cursor-oai login` to give "
                           "cursor-oai its own login.", file_paths.agent_path);
            e->no_retry = 1;
            return rc;
        }
        srv_log(LOG_INFO, "/oauth/token answered 404; renewing through /auth/refresh");
    }
    memset(out, 0, sizeof *out);
    memset(&te, 0, sizeof te);
    body.max = CRED_AUTH_BODY_MAX;
    if (auth_call("POST", target, target, key[0] ? key : refresh, NULL, NULL, &status, &body,
                  &te) < 0) {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Could not renew the Cursor login: %s. The current credentials are "
                       "kept; try again.", te.message);
        e->retry_after = 5;
        goto done;
    }
    if (status >= 200 && status <= 299 && !body.err
        && coai_creds_parse((const char *)body.data, body.len, out) == 0
        && out->access_token && out->refresh_token
        && strlen(out->access_token) < SRV_TOKEN_MAX
        && strlen(out->refresh_token) < SRV_TOKEN_MAX) {
        free(out->api_key);
        out->api_key = key[0] ? strdup(key) : NULL;
        if (key[0] && !out->api_key) { coai_creds_free(out); goto nomem; }
        rc = RENEW_OK;
        goto done;
    }
    coai_creds_free(out);
    snprintf(what, sizeof what, "%s answered HTTP %d%s", target, status,
             status >= 200 && status <= 299 ? " without both tokens" : "");
    if ((status >= 200 && status <= 299) || status == 400 || status == 401 || status == 403) {
        cred_err_login(e, what);
    } else {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Could not renew the Cursor login (%s). The current credentials are "
                       "kept; try again.", what);
        e->retry_after = 5;
    }
    goto done;
nomem:
    coai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
done:
    if (body.data) memset(body.data, 0, body.len);
    coai_buf_free(&body);
    return rc;
}

/* The renewal itself, under the inter-process lock: another process may have renewed while we
 * waited (its tokens are then in our file and are taken instead of spending the refresh token
 * a second time); else one HTTP call, and the new tokens are saved. *saved: 1 written (or
 * taken from the file), 0 the save failed (the tokens then live only in memory).
 * agent = 1 (cursor-agent's login, no API key): one /oauth/token call, nothing is read or
 * written, no lock: the new token lives in this process's memory only. */
static int cred_renew(const char *old_token, const char *refresh, const char *key, int agent,
                      coai_creds *out, int *saved, struct file_id *id, coai_error *e)
{
    coai_creds fc;
    char why[PATH_MAX + 160];
    int lk, rc;
    *saved = 0;
    if (agent) {
        rc = cred_renew_http(refresh, key, 1, out, e);
        metric_add(M_CRED_RENEWALS, rc == RENEW_OK ? "result=\"ok\"" : "result=\"failed\"", 1);
        if (rc == RENEW_OK && strcmp(out->refresh_token, refresh) != 0)
            srv_log(LOG_WARN, "/oauth/token answered a new refresh token for cursor-agent's "
                    "login: if Cursor now rotates them, cursor-agent's own login in %s may no "
                    "longer renew (then run `cursor-agent login`)", file_paths.agent_path);
        return rc;
    }
    lk = cred_lock();
    if (cred_read_file(file_paths.ours_path, &fc, id, why, sizeof why) == 0) {
        if (strcmp(fc.access_token, old_token) != 0
            && !coai_token_expiring(coai_str_c(fc.access_token), (int64_t)time(NULL),
                                    CRED_MARGIN_S)) {
            *out = fc;
            *saved = 1;
            cred_unlock(lk);
            srv_log(LOG_INFO, "credentials were renewed by another process; using those");
            return RENEW_OK;
        }
        coai_creds_free(&fc);
    }
    rc = cred_renew_http(refresh, key, 0, out, e);
    metric_add(M_CRED_RENEWALS, rc == RENEW_OK ? "result=\"ok\"" : "result=\"failed\"", 1);
    if (rc == RENEW_OK) {
        if (cred_write_file(out, why, sizeof why) == 0) {
            *saved = 1;
            file_id_of(file_paths.ours_path, id);
        } else {
            srv_log(LOG_ERROR, "%s. The renewed login is kept in memory only: it is lost when "
                    "the server stops (then run `cursor-oai login`)", why);
        }
    }
    cred_unlock(lk);
    return rc;
}

/* Renew the access token once for everyone (single flight). seen_gen: the generation of the
 * token the caller found expiring or rejected. A caller whose generation is already old just
 * takes the new token; callers arriving during a renewal wait for its outcome.
 * RENEW_OK: use the (new) token. RENEW_FAILED: *e says why (401 log in again / 503 retry).
 * RENEW_NONE: there is nothing to renew with (no refresh token, no API key). */
static int cred_refresh(uint64_t seen_gen, coai_error *e)
{
    char *old = NULL, *rt = NULL, *key = NULL;
    coai_creds nc;
    struct file_id id;
    int rc, saved = 0, agent, changed = 0;
    pthread_mutex_lock(&creds.lock);
    if (creds.gen != seen_gen) { pthread_mutex_unlock(&creds.lock); return RENEW_OK; }
    if (creds.refreshing) {
        uint64_t seq = creds.refresh_seq;
        while (creds.refreshing && creds.refresh_seq == seq)
            pthread_cond_wait(&creds.renewed, &creds.lock);
        rc = creds.gen != seen_gen ? RENEW_OK : RENEW_FAILED;
        if (rc != RENEW_OK) {
            if (creds.refresh_failed) *e = creds.refresh_err;
            else cred_err_login(e, "the renewal did not produce a new token");
        }
        pthread_mutex_unlock(&creds.lock);
        return rc;
    }
    if (creds.src == CRED_ENV || (!creds.refresh[0] && !creds.key[0])) {
        pthread_mutex_unlock(&creds.lock);
        return RENEW_NONE;
    }
    /* cursor-agent's browser login is renewed in memory only, through /oauth/token, whose
     * refresh token does not rotate (measured live in 2026): cursor-agent's own token is
     * not used up, and its file is never written (README, Credentials). */
    agent = creds.src == CRED_AGENT && !creds.key[0];
    if (creds.refresh_block_until && mono_ms() < creds.refresh_block_until) {
        *e = creds.refresh_err;
        pthread_mutex_unlock(&creds.lock);
        return RENEW_FAILED;
    }
    creds.refreshing = 1;
    old = strdup(creds.token);
    rt = strdup(creds.refresh);
    key = strdup(creds.key);
    pthread_mutex_unlock(&creds.lock);

    memset(&nc, 0, sizeof nc);
    memset(&id, 0, sizeof id);
    if (!old || !rt || !key) {
        coai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        rc = RENEW_FAILED;
    } else {
        srv_log(LOG_INFO, "renewing the Cursor access token (%s)",
                key[0] ? "API key exchange" : agent ? "cursor-agent's refresh token, in memory"
                : "refresh token");
        rc = cred_renew(old, rt, key, agent, &nc, &saved, &id, e);
    }

    pthread_mutex_lock(&creds.lock);
    if (rc == RENEW_OK && agent) {
        /* still cursor-agent's login: its file changing on disk replaces this token */
        changed = cred_set_locked(&nc, CRED_AGENT);
        creds.persist_failed = 0;
        creds.refresh_failed = 0;
        creds.refresh_block_until = 0;
        creds.bad_gen = 0;
    } else if (rc == RENEW_OK) {
        changed = cred_set_locked(&nc, CRED_OURS);
        if (saved) creds.ours_id = id;
        creds.persist_failed = !saved;
        creds.persist_retry_at = mono_ms() + CRED_PERSIST_RETRY_MS;
        creds.refresh_failed = 0;
        creds.refresh_block_until = 0;
        creds.bad_gen = 0;
    } else {
        creds.refresh_failed = 1;
        creds.refresh_err = *e;
        if (e->status == 401) creds.refresh_block_until = mono_ms() + CRED_REJECT_BACKOFF_MS;
    }
    creds.refreshing = 0;
    creds.refresh_seq++;
    pthread_cond_broadcast(&creds.renewed);
    pthread_mutex_unlock(&creds.lock);
    if (changed) models_failure_forget();
    if (rc == RENEW_OK) srv_log(LOG_INFO, "Cursor access token renewed%s",
                                agent ? " (in memory only; cursor-agent's file left as it is)"
                                : saved ? "" : " (in memory only)");
    else srv_log(LOG_WARN, "renewing the Cursor access token failed: %s", e->message);
    if (old) { memset(old, 0, strlen(old)); free(old); }
    if (rt) { memset(rt, 0, strlen(rt)); free(rt); }
    if (key) { memset(key, 0, strlen(key)); free(key); }
    coai_creds_free(&nc);
    return rc;
}

/* Renewed tokens that could not be saved (disk full...) are saved again now and then, so that
 * the rotated refresh token is not lost with the process. Only while no renewal runs and only
 * if the tokens are still the newest: an older pair must never overwrite a newer one. */
static void cred_persist_retry(void)
{
    coai_creds c;
    struct file_id id;
    char why[PATH_MAX + 160];
    uint64_t gen;
    int lk, ok = 0, stale;
    memset(&c, 0, sizeof c);
    pthread_mutex_lock(&creds.lock);
    if (!creds.persist_failed || creds.refreshing || mono_ms() < creds.persist_retry_at) {
        pthread_mutex_unlock(&creds.lock);
        return;
    }
    creds.persist_retry_at = mono_ms() + CRED_PERSIST_RETRY_MS;
    gen = creds.gen;
    c.access_token = strdup(creds.token);
    c.refresh_token = creds.refresh[0] ? strdup(creds.refresh) : NULL;
    c.api_key = creds.key[0] ? strdup(creds.key) : NULL;
    pthread_mutex_unlock(&creds.lock);
    if (!c.access_token) goto done;
    lk = cred_lock();
    pthread_mutex_lock(&creds.lock);
    stale = creds.refreshing || creds.gen != gen;
    pthread_mutex_unlock(&creds.lock);
    if (!stale) {
        ok = cred_write_file(&c, why, sizeof why) == 0;
        if (ok) file_id_of(file_paths.ours_path, &id);
    }
    cred_unlock(lk);
    if (stale) goto done;
    pthread_mutex_lock(&creds.lock);
    if (ok && creds.gen == gen) {
        creds.persist_failed = 0;
        creds.ours_id = id;
    }
    pthread_mutex_unlock(&creds.lock);
    if (ok) srv_log(LOG_INFO, "renewed credentials saved to %s after all", file_paths.ours_path);
    else srv_log(LOG_WARN, "still %s", why);
done:
    if (c.access_token) memset(c.access_token, 0, strlen(c.access_token));
    if (c.refresh_token) memset(c.refresh_token, 0, strlen(c.refresh_token));
    if (c.api_key) memset(c.api_key, 0, strlen(c.api_key));
    coai_creds_free(&c);
}

/* Before an upstream call: pick up file changes, and renew a token that expires within
 * CRED_MARGIN_S (or that the upstream rejected mid-stream). A failed proactive renewal still
 * lets a token that has not expired yet be used. 0 go ahead (the token may be ""), -1 *e. */
static int cred_ensure(coai_error *e)
{
    char tok[SRV_TOKEN_MAX];
    uint64_t gen;
    int renewable, bad, expiring, rc;
    coai_jwt j;
    int64_t now = (int64_t)time(NULL);
    cred_poll_files();
    cred_persist_retry();
    pthread_mutex_lock(&creds.lock);
    renewable = creds.src != CRED_ENV && (creds.key[0] || creds.refresh[0]);
    bad = creds.bad_gen != 0 && creds.bad_gen == creds.gen;
    pthread_mutex_unlock(&creds.lock);
    if (!renewable || !cred_token(tok, sizeof tok, &gen)) return 0;
    /* Only a JWT with an exp says when it expires; anything else is renewed on a 401. */
    expiring = coai_jwt_decode(coai_str_c(tok), &j) == 0 && j.exp != 0
            && coai_token_expiring(coai_str_c(tok), now, CRED_MARGIN_S);
    if (!expiring && !bad) { memset(tok, 0, sizeof tok); return 0; }
    rc = cred_refresh(gen, e);
    if (rc != RENEW_FAILED || (!bad && j.exp - now >= CRED_STILL_OK_S)) rc = 0;
    else rc = -1;
    memset(tok, 0, sizeof tok);
    return rc;
}

/* The error for "no credentials at all" (401, not worth a retry). Returns -1. */
static int cred_missing(coai_error *e)
{
    coai_error_set(e, 401, "authentication_error", "upstream_auth_failed", NULL,
                   "No Cursor credentials: run `cursor-oai login` (or set "
                   "CURSOR_ACCESS_TOKEN)");
    e->no_retry = 1;
    return -1;
}

/* cred_ensure, then a token must exist. 0 go ahead, -1 *e. */
static int cred_require(coai_error *e)
{
    if (cred_ensure(e) < 0) return -1;
    return cred_have() ? 0 : cred_missing(e);
}

/* How the current login is renewed, in words (status command, status page). Caller holds
 * creds.lock. */
static const char *cred_renewal_locked(void)
{
    return creds.src == CRED_ENV ? "none (CURSOR_ACCESS_TOKEN is used as is)"
         : creds.key[0] ? "by API key exchange (key stored)"
         : creds.refresh[0] && creds.src == CRED_AGENT
           ? "by refresh token through /oauth/token, in memory only (cursor-agent's file is "
             "never written)"
         : creds.refresh[0] ? "by refresh token through /oauth/token"
         : "none (log in again when it expires)";
}

/* "credentials" member of /health. */
static const char *cred_health(void)
{
    const char *s;
    pthread_mutex_lock(&creds.lock);
    s = !creds.token[0] ? "missing"
      : creds.refresh_failed && creds.refresh_err.status == 401
        ? "renewal rejected: run cursor-oai login"
      : creds.persist_failed ? "not persisted"
      : creds.refresh_failed ? "renewal failed"
      : "ok";
    pthread_mutex_unlock(&creds.lock);
    return s;
}

/* ======================================================================== */
/* Metrics: GET /metrics (Prometheus text format 0.0.4)                     */
/* ======================================================================== */

enum { MT_COUNTER, MT_GAUGE, MT_HISTOGRAM };

static const struct metric_family {
    const char *name;
    int type;
    const char *help;
} METRIC_FAMILIES[M__COUNT] = {
    { "cursor_oai_requests_total", MT_COUNTER, "HTTP requests answered, by route, dialect "
      "and status" },
    { "cursor_oai_request_duration_seconds", MT_HISTOGRAM, "Time from the request head to "
      "the end of the response" },
    { "cursor_oai_first_token_seconds", MT_HISTOGRAM, "Time from the request head to the "
      "first byte of a successful answer" },
    { "cursor_oai_upstream_runs_total", MT_COUNTER, "Upstream agent runs, by outcome (ok, "
      "client_gone, or the error code)" },
    { "cursor_oai_fallbacks_total", MT_COUNTER, "Fallbacks taken, by kind" },
    { "cursor_oai_open_streams", MT_GAUGE, "Streaming responses in progress" },
    { "cursor_oai_held_runs", MT_GAUGE, "Upstream runs held open for a later request" },
    { "cursor_oai_spare_connections", MT_GAUGE, "Pre-opened upstream connections waiting "
      "for a run" },
    { "cursor_oai_upstream_handshakes_total", MT_COUNTER, "TLS handshakes with the upstream, "
      "by result" },
    { "cursor_oai_tokens_total", MT_COUNTER, "Tokens by model and kind (in, out, cached)" },
    { "cursor_oai_credential_renewals_total", MT_COUNTER, "Access token renewals, by result" },
    { "cursor_oai_quota_latched_total", MT_COUNTER, "Requests answered with a remembered "
      "usage-limit error, without an upstream run" },
    { "cursor_oai_transport_runs_total", MT_COUNTER, "Upstream runs by the transport that "
      "carried them (h2: one HTTP/2 Run stream; http1: RunSSE + BidiAppend)" },
    { "cursor_oai_wire_unknown_total", MT_COUNTER, "Things Cursor sent that this version does "
      "not know, by message and field (field number, or the error code or detail type)" },
    { "cursor_oai_native_exec_despite_tools_header_total", MT_COUNTER, "Cursor's own tool "
      "calls (native execs) on runs that asked for the client's tools only "
      "(x-cursor-agent-allowed-tools); mapped to the client's tools all the same" },
};

/* The series `labels` of family f (created on first use), or NULL without memory. Under
 * metric_store.mu. */
static struct metric_series *metric_series(int f, const char *labels)
{
    static const char over[] = "overflow=\"true\"";
    size_t i;
    int is_over;
    struct metric_series *s;
    if (strlen(labels) >= METRIC_LABELS_MAX) labels = over;
    is_over = strcmp(labels, over) == 0;
    for (i = 0; i < metric_store.n[f]; i++)
        if (strcmp(metric_store.s[f][i].labels, labels) == 0) return &metric_store.s[f][i];
    /* the overflow series may be the one past the cap */
    if (metric_store.n[f] >= METRIC_SERIES_MAX + (size_t)is_over) return is_over ? NULL
                                                                       : metric_series(f, over);
    if (metric_store.n[f] == metric_store.cap[f]) {
        size_t nc = metric_store.cap[f] ? metric_store.cap[f] * 2 : 8;
        struct metric_series *ns = realloc(metric_store.s[f], nc * sizeof *ns);
        if (!ns) return NULL;
        metric_store.s[f] = ns;
        metric_store.cap[f] = nc;
    }
    s = &metric_store.s[f][metric_store.n[f]++];
    memset(s, 0, sizeof *s);
    memcpy(s->labels, labels, strlen(labels) + 1);
    return s;
}

static void metric_gauge_add(int f, const char *labels, double d)
{
    struct metric_series *s;
    pthread_mutex_lock(&metric_store.mu);
    s = metric_series(f, labels ? labels : "");
    if (s) s->value += d;
    pthread_mutex_unlock(&metric_store.mu);
}

static void metric_add(int f, const char *labels, double n)
{
    if (n > 0) metric_gauge_add(f, labels, n);
}

static void metric_set(int f, const char *labels, double v)
{
    struct metric_series *s;
    pthread_mutex_lock(&metric_store.mu);
    s = metric_series(f, labels ? labels : "");
    if (s) s->value = v;
    pthread_mutex_unlock(&metric_store.mu);
}

static void metric_observe(int f, const char *labels, double secs)
{
    struct metric_series *s;
    int i;
    pthread_mutex_lock(&metric_store.mu);
    s = metric_series(f, labels ? labels : "");
    if (s) {
        s->value += secs;
        s->count++;
        for (i = 0; i < METRIC_BUCKETS; i++)
            if (secs <= METRIC_BOUNDS[i]) s->buckets[i]++;
    }
    pthread_mutex_unlock(&metric_store.mu);
}

/* `name="value"` into out (cap bytes), the value escaped as the text format wants (\\, \",
 * \n) and control bytes dropped; cut to METRIC_VALUE_MAX bytes of input at a UTF-8
 * boundary. Returns out. */
static char *metric_label(char *out, size_t cap, const char *name, const char *v, size_t n)
{
    size_t o, i;
    int k = snprintf(out, cap, "%s=\"", name);
    if (k < 0 || (size_t)k >= cap) { if (cap) out[0] = 0; return out; }
    o = (size_t)k;
    if (n > METRIC_VALUE_MAX) {
        n = METRIC_VALUE_MAX;
        while (n > 0 && ((unsigned char)v[n] & 0xc0) == 0x80) n--;
    }
    for (i = 0; i < n && o + 3 < cap; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '\\' || c == '"') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c == '\n') { out[o++] = '\\'; out[o++] = 'n'; }
        else if (c >= 0x20 && c != 0x7f) out[o++] = (char)c;
    }
    out[o++] = '"';
    out[o] = 0;
    return out;
}

static void metric_number(coai_buf *b, double v)
{
    if (v == (double)(int64_t)v && v < 9e15 && v > -9e15)
        coai_buf_printf(b, "%lld", (long long)v);
    else
        coai_buf_printf(b, "%.9g", v);
}

/* One histogram series: _bucket lines with le added to its labels, _sum and _count. */
static void metric_write_hist(coai_buf *b, const char *name, const struct metric_series *s)
{
    int i;
    const char *sep = s->labels[0] ? "," : "";
    for (i = 0; i < METRIC_BUCKETS; i++)
        coai_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, s->labels, sep,
                        METRIC_BOUNDS[i], (unsigned long long)s->buckets[i]);
    coai_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, s->labels, sep,
                    (unsigned long long)s->count);
    coai_buf_printf(b, "%s_sum%s%s%s ", name, s->labels[0] ? "{" : "", s->labels,
                    s->labels[0] ? "}" : "");
    metric_number(b, s->value);
    coai_buf_printf(b, "\n%s_count%s%s%s %llu\n", name, s->labels[0] ? "{" : "", s->labels,
                    s->labels[0] ? "}" : "", (unsigned long long)s->count);
}

static void metric_gauge_now(coai_buf *b, const char *name, const char *type,
                             const char *help, double v)
{
    coai_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s ", name, help, name, type, name);
    metric_number(b, v);
    coai_buf_putc(b, '\n');
}


/* The whole exposition. Families without a series yet show a zero series when they have
 * no labels, else only their HELP/TYPE lines. */
static void metrics_write(coai_buf *b)
{
    static const char *const tn[] = { "counter", "gauge", "histogram" };
    int f, pool, conns, spares;
    size_t i;
    pthread_mutex_lock(&up_pool.lock);
    pool = up_pool.n;
    spares = pool_spares_locked();
    pthread_mutex_unlock(&up_pool.lock);
    pthread_mutex_lock(&listener.lock);
    conns = listener.conns;
    pthread_mutex_unlock(&listener.lock);
    metric_set(M_SPARE_CONNS, "", spares);      /* the pool knows them: read now */
    pthread_mutex_lock(&metric_store.mu);
    for (f = 0; f < M__COUNT; f++) {
        const struct metric_family *mf = &METRIC_FAMILIES[f];
        coai_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", mf->name, mf->help, mf->name,
                        tn[mf->type]);
        for (i = 0; i < metric_store.n[f]; i++) {
            const struct metric_series *s = &metric_store.s[f][i];
            if (mf->type == MT_HISTOGRAM) {
                metric_write_hist(b, mf->name, s);
                continue;
            }
            coai_buf_printf(b, "%s%s%s%s ", mf->name, s->labels[0] ? "{" : "", s->labels,
                            s->labels[0] ? "}" : "");
            metric_number(b, s->value);
            coai_buf_putc(b, '\n');
        }
        if (metric_store.n[f] == 0 && mf->type != MT_HISTOGRAM
            && (f == M_OPEN_STREAMS || f == M_HELD_RUNS || f == M_SPARE_CONNS
                || f == M_QUOTA_LATCHED || f == M_NATIVE_DESPITE))
            coai_buf_printf(b, "%s 0\n", mf->name);
    }
    pthread_mutex_unlock(&metric_store.mu);
    metric_gauge_now(b, "cursor_oai_pooled_connections", "gauge",
                     "Idle upstream TLS connections kept for reuse", pool);
    metric_gauge_now(b, "cursor_oai_client_connections", "gauge",
                     "Client connections being served", conns);
    metric_gauge_now(b, "cursor_oai_log_lines_dropped_total", "counter",
                     "Log lines dropped because stderr was not being read",
                     (double)log_dropped());
    continuation_write(b);
    h2_metrics_write(b);
}

/* ======================================================================== */
/* What Cursor sent that this version does not know (issue 30 item 3)       */
/* ======================================================================== */
/* The header finds them (coai_msg_unknowns, coai_status_unknowns); here they are counted in
 * a fixed table (WN_MAX kinds, then one "others" count), each kind logged once, the first
 * time, and shown on /metrics, the status page and by doctor. */

#define WN_MAX 64

struct wn_entry {
    char what[200];                 /* the words a user pastes into a report */
    uint64_t count;
};

static struct {
    pthread_mutex_t mu;
    struct wn_entry e[WN_MAX];
    size_t n;
    uint64_t others;
} wire_unknowns = { PTHREAD_MUTEX_INITIALIZER, { { { 0 }, 0 } }, 0, 0 };

static void wn_note(const coai_unknown *u)
{
    char what[200], ml[METRIC_LABELS_MAX], fl[160], fv[120];
    size_t i;
    int first = 0, other = 0;
    if (u->wire >= 0) {
        snprintf(fv, sizeof fv, "%lu", (unsigned long)u->field);
        if (u->expected_wire >= 0)
            snprintf(what, sizeof what, "%s %s %lu (wire type %d, this version expects %d)",
                     u->message, u->what, (unsigned long)u->field, u->wire, u->expected_wire);
        else
            snprintf(what, sizeof what, "%s %s %lu (wire type %d)", u->message, u->what,
                     (unsigned long)u->field, u->wire);
    } else if (u->name[0]) {
        snprintf(fv, sizeof fv, "%s %s", u->what, u->name);
        snprintf(what, sizeof what, "%s %s \"%s\"", u->message, u->what, u->name);
    } else {
        snprintf(fv, sizeof fv, "%s %lu", u->what, (unsigned long)u->field);
        snprintf(what, sizeof what, "%s %s %lu", u->message, u->what, (unsigned long)u->field);
    }
    pthread_mutex_lock(&wire_unknowns.mu);
    for (i = 0; i < wire_unknowns.n && strcmp(wire_unknowns.e[i].what, what) != 0; i++) {}
    if (i < wire_unknowns.n) {
        wire_unknowns.e[i].count++;
    } else if (wire_unknowns.n < WN_MAX) {
        copy_str(wire_unknowns.e[wire_unknowns.n].what, sizeof wire_unknowns.e[0].what, what,
                 strlen(what));
        wire_unknowns.e[wire_unknowns.n++].count = 1;
        first = 1;
    } else {
        other = wire_unknowns.others++ == 0;
    }
    pthread_mutex_unlock(&wire_unknowns.mu);
    if (first)
        srv_log(LOG_WARN, "cursor sent something this version does not know: %s; please "
                "report it with 'cursor-oai doctor'", what);
    else if (other)
        srv_log(LOG_WARN, "cursor sent more kinds of things this version does not know than "
                "it keeps apart (%d): the rest are counted together", WN_MAX);
    if (i < WN_MAX) {
        metric_label(ml, sizeof ml, "message", u->message, strlen(u->message));
        metric_label(fl, sizeof fl, "field", fv, strlen(fv));
        snprintf(ml + strlen(ml), sizeof ml - strlen(ml), ",%s", fl);
    } else {
        snprintf(ml, sizeof ml, "message=\"others\",field=\"others\"");
    }
    metric_add(M_WIRE_UNKNOWN, ml, 1);
}

/* One server message (a data frame's payload): note what it holds that we do not know. */
static void wn_msg(const void *p, size_t n)
{
    coai_unknown u[8];
    size_t k = coai_msg_unknowns(p, n, u, 8), i;
    for (i = 0; i < k && i < 8; i++) wn_note(&u[i]);
}

static void wn_status(const coai_status *st)
{
    coai_unknown u[4];
    size_t k = coai_status_unknowns(st, u, 4), i;
    for (i = 0; i < k && i < 4; i++) wn_note(&u[i]);
}

/* The list for people: "what (count)" joined by "; ", with the others; "" when none. */
static void wn_describe(coai_buf *b)
{
    size_t i;
    pthread_mutex_lock(&wire_unknowns.mu);
    for (i = 0; i < wire_unknowns.n; i++)
        coai_buf_printf(b, "%s%s (%llu)", i ? "; " : "", wire_unknowns.e[i].what,
                        (unsigned long long)wire_unknowns.e[i].count);
    if (wire_unknowns.others)
        coai_buf_printf(b, "%sother kinds (%llu)", wire_unknowns.n ? "; " : "",
                        (unsigned long long)wire_unknowns.others);
    pthread_mutex_unlock(&wire_unknowns.mu);
}

/* ---- Caller-owned tools (issue 31 item 1): did Cursor honour the tools header? ----
 * Runs that sent x-cursor-agent-allowed-tools, and Cursor's own tool calls (native execs)
 * that came on them all the same: those go through the native mapping as in cursor mode,
 * and are counted here (/metrics, the status page, doctor), the first one logged. */


static void th_note_run(void)
{
    pthread_mutex_lock(&tools_header.mu);
    tools_header.runs++;
    pthread_mutex_unlock(&tools_header.mu);
}

static void th_note_native(int kind, const char *request_id)
{
    const char *name = coai_exec_kind_name(kind);
    uint64_t n;
    pthread_mutex_lock(&tools_header.mu);
    n = ++tools_header.native;
    pthread_mutex_unlock(&tools_header.mu);
    metric_add(M_NATIVE_DESPITE, "", 1);
    if (n == 1)
        srv_log(LOG_WARN, "run %s: Cursor sent its own tool call %s (exec %d) although the run "
                "asked for the client's tools only (x-cursor-agent-allowed-tools); it is "
                "mapped to the client's tools as in CURSOR_OAI_TOOL_MODE=cursor. Further ones "
                "are counted on /metrics (cursor_oai_native_exec_despite_tools_header_total), "
                "not logged", request_id, name ? name : "?", kind);
}

/* "Cursor honoured the tools header: ..." for people (status page, doctor). 1 when the
 * answer is no (a native exec came despite the header), else 0. */
static int th_describe(char *out, size_t cap)
{
    uint64_t runs, native;
    pthread_mutex_lock(&tools_header.mu);
    runs = tools_header.runs;
    native = tools_header.native;
    pthread_mutex_unlock(&tools_header.mu);
    if (tool_mode == COAI_TOOLS_CURSOR)
        snprintf(out, cap, "Cursor honoured the tools header: not sent "
                 "(CURSOR_OAI_TOOL_MODE=cursor: Cursor's own tool calls are mapped to the "
                 "client's tools)");
    else if (native)
        snprintf(out, cap, "Cursor honoured the tools header: no (%llu native exec%s came on "
                 "%llu run%s that sent it; mapped to the client's tools)",
                 (unsigned long long)native, native == 1 ? "" : "s", (unsigned long long)runs,
                 runs == 1 ? "" : "s");
    else if (runs)
        snprintf(out, cap, "Cursor honoured the tools header: yes (0 native execs on %llu "
                 "run%s that sent it)", (unsigned long long)runs, runs == 1 ? "" : "s");
    else
        snprintf(out, cap, "Cursor honoured the tools header: not known yet (no run with "
                 "tools so far; 0 native execs)");
    return native != 0;
}

/* ---- doctor --capture: a redacted transcript of one run ----
 * Every request head (values only for the headers on the allowlist below), every message
 * each way as its redacted shape (coai_pb_shape: field numbers, wire types, lengths), every
 * frame's size and the time since the capture began. No prompt, answer, token or key. */

static struct {
    pthread_mutex_t mu;
    FILE *f;
    int64_t t0;
} capture_log = { PTHREAD_MUTEX_INITIALIZER, NULL, 0 };

static int cap_on(void)
{
    return __atomic_load_n(&capture_log.f, __ATOMIC_ACQUIRE) != NULL;
}

static void cap_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void cap_line(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&capture_log.mu);
    if (capture_log.f) {
        fprintf(capture_log.f, "%7lld ms  ", (long long)(mono_ms() - capture_log.t0));
        va_start(ap, fmt);
        vfprintf(capture_log.f, fmt, ap);
        va_end(ap);
        fputc('\n', capture_log.f);
    }
    pthread_mutex_unlock(&capture_log.mu);
}

/* A header's value is written only when its name is one of these; any other value becomes
 * its length (authorization, cookies, keys, checksums, ids). */
static void cap_header(const char *name, size_t nl, const char *value, size_t vl)
{
    static const char *const shown[] = {
        ":method", ":scheme", ":path", ":authority", "host", "content-type", "user-agent",
        "connect-protocol-version", "connect-accept-encoding", "connect-content-encoding",
        "accept", "accept-encoding", "te", "x-cursor-client-version", "x-cursor-client-type",
        "x-ghost-mode", "x-cursor-streaming", "content-length", "connect-timeout-ms",
        "x-cursor-agent-allowed-tools"
    };
    size_t i;
    for (i = 0; i < sizeof shown / sizeof *shown; i++)
        if (strlen(shown[i]) == nl && strncasecmp(shown[i], name, nl) == 0) {
            cap_line("    %.*s: %.*s", (int)nl, name, (int)(vl > 300 ? 300 : vl), value);
            return;
        }
    cap_line("    %.*s: <redacted, %zu bytes>", (int)nl, name, vl);
}

/* An HTTP/1.1 request head as up_send writes it. */
static void cap_head_http1(const coai_buf *head)
{
    const char *p = (const char *)head->data, *end = p + head->len, *nl, *c;
    int first = 1;
    while (p && p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        size_t n = (size_t)(nl - p);
        if (n && p[n - 1] == '\r') n--;
        if (!n) break;
        if (first) {
            const char *sp = memchr(p, ' ', n), *sp2 = sp ? memchr(sp + 1, ' ',
                                                                   n - (size_t)(sp + 1 - p)) : NULL;
            cap_line("request  HTTP/1.1 %.*s", sp2 ? (int)(sp2 - p) : 0, p);
            first = 0;
        } else if ((c = memchr(p, ':', n)) != NULL) {
            const char *v = c + 1;
            while (v < p + n && *v == ' ') v++;
            cap_header(p, (size_t)(c - p), v, (size_t)(p + n - v));
        }
        p = nl + 1;
    }
}

static void cap_head_h2(const coai_h2_header *hs, size_t nh)
{
    size_t i;
    cap_line("request  HTTP/2 stream");
    for (i = 0; i < nh; i++)
        cap_header(hs[i].name.ptr, hs[i].name.len, hs[i].value.ptr, hs[i].value.len);
}

/* One message we send (an AgentClientMessage), before any envelope. */
static void cap_client(const unsigned char *msg, size_t n)
{
    coai_buf b = { 0 };
    coai_pb_shape(&b, "AgentClientMessage", msg, n, 4096);
    coai_buf_putc(&b, 0);
    cap_line("C>S  %6zu bytes  %s", n, b.err ? "(no memory)" : (const char *)b.data);
    coai_buf_free(&b);
}

/* One frame Cursor sent: a message's shape, or the status a trailer carries (its code and
 * error name: the message text stays out). */
static void cap_frame(const coai_frame *f)
{
    coai_buf b = { 0 };
    coai_status st;
    if (f->flags == COAI_FRAME_TRAILER || f->flags == COAI_FRAME_END_STREAM) {
        if (f->flags == COAI_FRAME_TRAILER) coai_trailer_parse(f->data, f->len, &st);
        else coai_end_stream_parse(f->data, f->len, &st);
        cap_line("S>C  %6zu bytes  %s: status %d (%s)%s%s", f->len,
                 f->flags == COAI_FRAME_TRAILER ? "trailer" : "end-stream", st.code,
                 coai_grpc_status_name(st.code), st.error_name ? ", " : "",
                 st.error_name ? st.error_name : "");
        return;
    }
    coai_pb_shape(&b, "AgentServerMessage", f->data, f->len, 4096);
    coai_buf_putc(&b, 0);
    cap_line("S>C  %6zu bytes  flags %u  %s", f->len, (unsigned)f->flags,
             b.err ? "(no memory)" : (const char *)b.data);
    coai_buf_free(&b);
}

/* ======================================================================== */
/* Logging                                                                  */
/* ======================================================================== */

static const char *const LOG_NAMES[] = { "error", "warn", "info", "debug" };

/* Output: lines pass through a bounded in-memory queue that one writer thread empties into
 * stderr (log_start, once serving). A stderr nobody reads (a paused pager, a stalled log
 * shipper, a blocking container log driver) then only fills the queue: further lines are
 * dropped and counted, the writer says how many as soon as stderr moves again, and no client
 * thread ever waits on it (it used to: with a full pipe every connection blocked in write()
 * holding its slot, and SIGTERM could not end the process). Before log_start (start-up
 * messages, one-shot commands) lines are written directly. */
#define LOG_QUEUE_BYTES (256 * 1024)    /* queued log bytes (~2,500 lines); more are dropped */
#define LOG_WRITE_CHUNK (64 * 1024)     /* the writer takes at most this much per write */
#define LOG_FLUSH_MS 1000               /* exit waits at most this long for queued lines */

static struct logq {
    pthread_mutex_t mu;
    pthread_cond_t more;            /* lines queued */
    pthread_cond_t empty;           /* the writer has nothing left (monotonic: sync_init) */
    char *ring;                     /* LOG_QUEUE_BYTES bytes once started */
    size_t head, len;               /* queued bytes: ring[head..head+len) modulo the size */
    int started;                    /* the writer thread runs */
    int busy;                       /* the writer is inside write() */
    uint64_t dropped;               /* lines dropped because the queue was full */
    uint64_t reported;              /* of those, how many the log has mentioned */
} log_queue = { .mu = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER };

static void log_write_fd(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(2, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) {         /* stderr was handed to us non-blocking */
            struct pollfd pf = { 2, POLLOUT, 0 };
            poll(&pf, 1, 1000);
            continue;
        }
        if (k <= 0) return;                     /* stderr is gone: nothing else to do */
        p += k;
        n -= (size_t)k;
    }
}


static void *log_writer(void *arg)
{
    static char chunk[LOG_WRITE_CHUNK];
    (void)arg;
    pthread_mutex_lock(&log_queue.mu);
    for (;;) {
        size_t n = 0, first;
        uint64_t drop;
        while (log_queue.len == 0 && log_queue.dropped == log_queue.reported) {
            pthread_cond_broadcast(&log_queue.empty);
            pthread_cond_wait(&log_queue.more, &log_queue.mu);
        }
        if (log_queue.len > 0) {
            n = log_queue.len < LOG_WRITE_CHUNK ? log_queue.len : LOG_WRITE_CHUNK;
            first = LOG_QUEUE_BYTES - log_queue.head < n ? LOG_QUEUE_BYTES - log_queue.head : n;
            memcpy(chunk, log_queue.ring + log_queue.head, first);
            memcpy(chunk + first, log_queue.ring, n - first);
            log_queue.head = (log_queue.head + n) % LOG_QUEUE_BYTES;
            log_queue.len -= n;
        }
        /* Lines were dropped: say so once the queue has drained, in order. */
        drop = log_queue.len == 0 ? log_queue.dropped - log_queue.reported : 0;
        log_queue.reported += drop;
        log_queue.busy = 1;
        pthread_mutex_unlock(&log_queue.mu);
        log_write_fd(chunk, n);
        if (drop) {
            char m[160], line[400];
            int k = snprintf(m, sizeof m, "%llu log line(s) dropped: stderr was not being read",
                             (unsigned long long)drop);
            size_t ln = log_line_format(line, sizeof line, LOG_WARN, m, (size_t)k, 0);
            log_write_fd(line, ln);
        }
        pthread_mutex_lock(&log_queue.mu);
        log_queue.busy = 0;
    }
    return NULL;
}

/* Start the writer thread (serve only). Without it lines keep going out directly. */
static void log_start(void)
{
    pthread_t t;
    pthread_attr_t a;
    char *ring = malloc(LOG_QUEUE_BYTES);
    if (!ring) return;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 128 * 1024);
    pthread_mutex_lock(&log_queue.mu);
    log_queue.ring = ring;
    log_queue.started = pthread_create(&t, &a, log_writer, NULL) == 0;
    if (!log_queue.started) log_queue.ring = NULL;
    pthread_mutex_unlock(&log_queue.mu);
    pthread_attr_destroy(&a);
    if (!log_queue.ring) free(ring);
}

/* Before exit: give the writer up to LOG_FLUSH_MS to write what is queued. */
static void log_flush(void)
{
    int64_t end = mono_ms() + LOG_FLUSH_MS;
    pthread_mutex_lock(&log_queue.mu);
    while (log_queue.started
           && (log_queue.len > 0 || log_queue.busy || log_queue.dropped != log_queue.reported)
           && cond_wait_ms(&log_queue.empty, &log_queue.mu, end - mono_ms()) == 0) {}
    pthread_mutex_unlock(&log_queue.mu);
}

/* Lines dropped so far (for /metrics). */
static uint64_t log_dropped(void)
{
    uint64_t d;
    pthread_mutex_lock(&log_queue.mu);
    d = log_queue.dropped;
    pthread_mutex_unlock(&log_queue.mu);
    return d;
}

/* One finished line (with its newline) to stderr: queued when the writer runs, else
 * written here. */
static void log_emit(const char *line, size_t n)
{
    pthread_mutex_lock(&log_queue.mu);
    if (!log_queue.started) {
        pthread_mutex_unlock(&log_queue.mu);
        log_write_fd(line, n);
        return;
    }
    if (LOG_QUEUE_BYTES - log_queue.len < n) {
        log_queue.dropped++;
    } else {
        size_t tail = (log_queue.head + log_queue.len) % LOG_QUEUE_BYTES;
        size_t first = LOG_QUEUE_BYTES - tail < n ? LOG_QUEUE_BYTES - tail : n;
        memcpy(log_queue.ring + tail, line, first);
        memcpy(log_queue.ring, line + first, n - first);
        log_queue.len += n;
        pthread_cond_signal(&log_queue.more);
    }
    pthread_mutex_unlock(&log_queue.mu);
}

/* Cut every occurrence of `secret` out of line[0..*n). Callers never pass secrets to the
 * logger; this is the backstop that keeps one from reaching stderr if a format slips. */
static void log_redact(char *line, size_t *n, const char *secret)
{
    size_t sl = secret ? strlen(secret) : 0, i = 0;
    static const char mark[] = "[redacted]";
    if (sl < 8) return;      /* short strings would redact ordinary words */
    while (i + sl <= *n) {
        if (memcmp(line + i, secret, sl) == 0) {
            size_t ml = sizeof mark - 1;
            memmove(line + i + ml, line + i + sl, *n - i - sl);
            memcpy(line + i, mark, ml);
            *n = *n - sl + ml;
            i += ml;
        } else {
            i++;
        }
    }
}

/* Append msg[0..n) to out[*o..cap-1) with every control character escaped (\r, \n, \t,
 * else \xNN; C1 controls U+0080..U+009F as \u00NN), so that nothing a client sends (a model
 * name, a path, a header, a prompt at debug level) can end a log line early, forge another
 * one or drive a terminal. Stops at a whole escape before the end. */
static void log_escape_text(char *out, size_t cap, size_t *o, const char *msg, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)msg[i];
        char e[8];
        size_t el = 0;
        if (c == '\n') { e[0] = '\\'; e[1] = 'n'; el = 2; }
        else if (c == '\r') { e[0] = '\\'; e[1] = 'r'; el = 2; }
        else if (c == '\t') { e[0] = '\\'; e[1] = 't'; el = 2; }
        else if (c < 0x20 || c == 0x7f) {
            e[0] = '\\'; e[1] = 'x'; e[2] = hex[c >> 4]; e[3] = hex[c & 15]; el = 4;
        } else if (c == 0xc2 && i + 1 < n && (unsigned char)msg[i + 1] >= 0x80
                   && (unsigned char)msg[i + 1] <= 0x9f) {
            unsigned char d = (unsigned char)msg[++i];
            memcpy(e, "\\u00", 4); e[4] = hex[d >> 4]; e[5] = hex[d & 15]; el = 6;
        } else if (c == 0xe2 && i + 2 < n && (unsigned char)msg[i + 1] == 0x80
                   && ((unsigned char)msg[i + 2] == 0xa8 || (unsigned char)msg[i + 2] == 0xa9)) {
            /* U+2028 / U+2029: line ends to many readers (JavaScript, editors) */
            memcpy(e, (unsigned char)msg[i + 2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
            el = 6;
            i += 2;
        } else {
            e[0] = (char)c; el = 1;
        }
        if (*o + el >= cap) break;
        memcpy(out + *o, e, el);
        *o += el;
    }
}

/* The whole line for one message: "TIME LEVEL message\n", or with --log-format json
 * {"time":"...","level":"...","msg":"..."}\n. obj: msg is a JSON object made with
 * coai_json_str_append (no raw control bytes; the JSON access log), written as it is with
 * "time" and "level" put in front. Returns the length (at most cap - 1; cap >= 64). */
static size_t log_line_format(char *out, size_t cap, int level, const char *msg, size_t n,
                              int obj)
{
    static const char *const cli_prefix[] = { "error: ", "warning: ", "", "" };
    struct timespec ts;
    struct tm tm;
    size_t o = 0;
    int k;
    if (conf.cli) {
        k = snprintf(out, cap, "cursor-oai: %s", cli_prefix[level]);
        o = k > 0 ? (size_t)k : 0;
        log_escape_text(out, cap - 1, &o, msg, n);
    } else if (!log_json) {
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        o = strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ ", &tm);
        k = snprintf(out + o, 16, "%s ", LOG_NAMES[level]);
        o += k > 0 ? (size_t)k : 0;
        log_escape_text(out, cap - 1, &o, msg, n);
    } else {
        coai_buf b = { 0 };
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        o = strftime(out, 40, "{\"time\":\"%Y-%m-%dT%H:%M:%S", &tm);
        k = snprintf(out + o, 40, ".%03ldZ\",\"level\":\"%s\",", ts.tv_nsec / 1000000L,
                     LOG_NAMES[level]);
        o += k > 0 ? (size_t)k : 0;
        if (obj && n >= 2) {
            if (n - 1 < cap - 1 - o) { memcpy(out + o, msg + 1, n - 1); o += n - 1; }
            else { memcpy(out + o, "\"msg\":\"(line too long)\"}", 25); o += 25; }
        } else {
            coai_buf_puts(&b, "\"msg\":");
            coai_json_str_append(&b, msg, n);
            coai_buf_putc(&b, '}');
            if (!b.err && b.len < cap - 1 - o) { memcpy(out + o, b.data, b.len); o += b.len; }
            else { memcpy(out + o, "\"msg\":\"(line too long)\"}", 25); o += 25; }
            coai_buf_free(&b);
        }
    }
    if (log_json) {
        /* U+2028 / U+2029 and the C1 controls U+0080..U+009F (U+0085 NEL among them) inside
         * the JSON strings: escaped as the text log escapes them (valid JSON either way, and
         * a line end to JavaScript and to many log tools). 0xc2 is never a continuation
         * byte, so c2 80..9f is always one of those characters. With no room left for the
         * escape, the character becomes spaces: never raw. */
        static const char hex[] = "0123456789abcdef";
        size_t i;
        char tmp[8];
        for (i = 0; i < o; i++) {
            unsigned char c0 = (unsigned char)out[i];
            size_t from = 0;
            if (i + 2 < o && c0 == 0xe2 && (unsigned char)out[i + 1] == 0x80
                && ((unsigned char)out[i + 2] == 0xa8 || (unsigned char)out[i + 2] == 0xa9)) {
                memcpy(tmp, (unsigned char)out[i + 2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
                from = 3;
            } else if (i + 1 < o && c0 == 0xc2 && (unsigned char)out[i + 1] >= 0x80
                       && (unsigned char)out[i + 1] <= 0x9f) {
                unsigned char d = (unsigned char)out[i + 1];
                memcpy(tmp, "\\u00", 4);
                tmp[4] = hex[d >> 4];
                tmp[5] = hex[d & 15];
                from = 2;
            }
            if (!from) continue;
            if (o + 6 - from >= cap - 1) {
                memset(out + i, ' ', from);
                i += from - 1;
                continue;
            }
            memmove(out + i + 6, out + i + from, o - i - from);
            memcpy(out + i, tmp, 6);
            o += 6 - from;
            i += 5;
        }
    }
    out[o++] = '\n';
    return o;
}

/* Redact, format and emit msg[0..n) (n < SRV_LOG_LINE; msg has SRV_LOG_ROOM bytes: a
 * redaction mark is at most 2 bytes longer than the >= 8-byte secret it replaces). */
static void log_msg(int level, char *msg, size_t n, int obj)
{
    char line[SRV_LOG_ROOM * 6 + 256];
    pthread_mutex_lock(&creds.lock);
    log_redact(msg, &n, creds.token);
    log_redact(msg, &n, creds.refresh);
    log_redact(msg, &n, creds.key);
    pthread_mutex_unlock(&creds.lock);
    log_redact(msg, &n, conf.api_key);
    n = log_line_format(line, sizeof line, level, msg, n, obj);
    log_emit(line, n);
}

static void srv_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void srv_log(int level, const char *fmt, ...)
{
    char msg[SRV_LOG_ROOM];
    int k;
    va_list ap;
    if (level > conf.log_level) return;
    va_start(ap, fmt);
    k = vsnprintf(msg, SRV_LOG_LINE, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    log_msg(level, msg, (size_t)k < SRV_LOG_LINE ? (size_t)k : SRV_LOG_LINE - 1, 0);
}

/* ======================================================================== */
/* Configuration and command line                                           */
/* ======================================================================== */

static const char USAGE[] =
    "Usage: cursor-oai serve [options]      run the API server\n"
    "       cursor-oai login [options]      log in to Cursor (browser, or --api-key)\n"
    "       cursor-oai logout               remove the saved login\n"
    "       cursor-oai status               who is logged in, and does Cursor accept it\n"
    "       cursor-oai models               the models this account can use\n"
    "       cursor-oai usage [--json]       plan, usage this billing period, when it resets\n"
    "       cursor-oai doctor               check the whole path to Cursor, step by step\n"
    "       cursor-oai --version | --help   ('cursor-oai COMMAND --help' for each command)\n"
    "\n"
    "An API for the clients of OpenAI, Anthropic and Gemini, served from your own Cursor\n"
    "subscription: every route is listed under 'Routes' below.\n";

static const char SERVE_HELP[] =
    "Usage: cursor-oai serve [options]\n"
    "\n"
    "Options:\n"
    "  --listen HOST:PORT   address to serve on (default 127.0.0.1:18741; env CURSOR_OAI_LISTEN;\n"
    "                       port 0 picks a free port, printed at start-up)\n"
    "  --workspace DIR      workspace path sent to Cursor (default: current directory)\n"
    "  --log-level LEVEL    error | warn | info | debug (default info)\n"
    "  --log-format FORMAT  text | json (one JSON object per line; default text)\n"
    "  --allow-host NAME    also accept this Host/Origin name, with any port (repeatable);\n"
    "                       NAME:PORT accepts it only with that port. localhost, 127.0.0.1\n"
    "                       and [::1] are always accepted, with any port (tunnels)\n"
    "  --max-conns N        concurrent client connections; 503 beyond (default 1024)\n"
    "  --allow-unauthenticated\n"
    "                       allow a non-loopback --listen without CURSOR_OAI_API_KEY (anyone\n"
    "                       who reaches the port then uses your Cursor account)\n"
    "  -h, --help           this help\n"
    "\n"
    "Credentials (first found wins):\n"
    "  1. CURSOR_ACCESS_TOKEN (used as is, never renewed)\n"
    "  2. $XDG_CONFIG_HOME/cursor-oai/auth.json (default ~/.config/cursor-oai/auth.json),\n"
    "     written by 'cursor-oai login'; a login done while serving is picked up within 1 s\n"
    "  3. cursor-agent's own ~/.config/cursor/auth.json, read only: its browser login is\n"
    "     renewed in memory only, through /oauth/token (that refresh token does not rotate)\n"
    "  A token that expires within 5 minutes, or that Cursor rejects before anything was\n"
    "  streamed, is renewed once (refresh token, or API key exchange) and the request retried;\n"
    "  renewed tokens are saved to file 2 (never to cursor-agent's file).\n"
    "\n"
    "Environment:\n"
    "  CURSOR_ACCESS_TOKEN      Cursor access token used upstream (overrides the files)\n"
    "  CURSOR_API_URL           upstream base URL, https only (default https://api2.cursor.sh)\n"
    "  CURSOR_CLIENT_VERSION    x-cursor-client-version (default: the newest of the built-in\n"
    "                           " SRV_DEFAULT_CLIENT_VERSION " and an installed cursor-agent's)\n"
    "  CURSOR_OAI_API_KEY       if set, clients must send 'Authorization: Bearer <key>'\n"
    "  CURSOR_OAI_LISTEN        same as --listen\n"
    "  CURSOR_OAI_LOG_FORMAT    same as --log-format\n"
    "  CURSOR_OAI_ALLOW_HOSTS   comma-separated names, the same as repeating --allow-host\n"
    "  CURSOR_OAI_IDLE_TIMEOUT  seconds without upstream progress before a run fails (300)\n"
    "  CURSOR_OAI_SILENCE_TIMEOUT  seconds without any frame from Cursor, not even a\n"
    "                           heartbeat, before a run fails (30)\n"
    "  CURSOR_OAI_HEARTBEAT_TIMEOUT  seconds of nothing but heartbeats and checkpoints before\n"
    "                           a run fails (90)\n"
    "  CURSOR_OAI_KEEPALIVE     seconds between ': keepalive' SSE comments (15)\n"
    "  CURSOR_OAI_MAX_IMAGE_BYTES   largest image in decoded bytes, 413 beyond (5242880)\n"
    "  CURSOR_OAI_MAX_IMAGES        images per request, 400 beyond (12)\n"
    "  CURSOR_OAI_MAX_IMAGES_BYTES  all images of a request in bytes, 413 beyond (20971520)\n"
    "  CURSOR_OAI_MODELS_TTL    seconds the model list is cached (300); then served stale\n"
    "                           while one background fetch renews it\n"
    "  CURSOR_OAI_MODELS_WAIT   seconds a request waits for the first model list (15)\n"
    "  CURSOR_OAI_UPSTREAM_TIMEOUT  overall seconds of one unary upstream call (60)\n"
    "  CURSOR_OAI_BODY_TIMEOUT  seconds to receive a whole request body (120)\n"
    "  CURSOR_OAI_MAX_RESPONSE_MB  MiB of a non-streaming answer held in memory (32)\n"
    "  CURSOR_OAI_MAX_INFLIGHT_MB  MiB of request bodies handled at once (256)\n"
    "  CURSOR_OAI_MODEL_MAP     name=model,...: Anthropic model names (or opus, sonnet, haiku)\n"
    "                           and Gemini names to models of the Cursor account\n"
    "  CURSOR_OAI_QUOTA_LATCH   seconds a usage-limit error from Cursor is answered again at\n"
    "                           once, without a new upstream run (60; 0 = off)\n"
    "  CURSOR_OAI_USAGE_TTL     seconds GET /v1/usage reuses Cursor's usage answer (10; 0 =\n"
    "                           only requests at the same moment share one call); an\n"
    "                           error is reused for 3 s (at most this TTL)\n"
    "  CURSOR_OAI_MAX_PROMPT_BYTES  largest flattened prompt sent upstream (1048576); longer\n"
    "                           conversations get a 400 context_length_exceeded\n"
    "  CURSOR_OAI_AGENT_URL     host for runs (default: CURSOR_API_URL; a host that refuses\n"
    "                           HTTP/1.1 is skipped for the base URL)\n"
    "  CURSOR_OAI_H2ONLY_REPROBE  seconds before such a host is tried again (600)\n"
    "  CURSOR_OAI_PROFILE       grpc-web or connect: use only this transport profile (default:\n"
    "                           connect, with grpc-web as the fallback)\n"
    "  CURSOR_OAI_CONNECT_APPEND  proto (default) or json: BidiAppend body in the Connect profile\n"
    "  CURSOR_OAI_TRANSPORT     h2 or http1: use only this transport to Cursor (default auto:\n"
    "                           HTTP/2, with HTTP/1.1 RunSSE + BidiAppend as the fallback)\n"
    "  CURSOR_OAI_H2_REPROBE    seconds HTTP/1.1 is used after HTTP/2 failed (600)\n"
    "  CURSOR_OAI_TOOL_MODE     client (default): a request's tools are the only tools\n"
    "                           Cursor's model gets (x-cursor-agent-allowed-tools); cursor:\n"
    "                           it also has Cursor's own, mapped to the client's tools\n"
    "  CURSOR_OAI_CONTINUATION  on: hold a run across tool calls and resume conversations\n"
    "                           from Cursor's checkpoint; off: one fresh run per request (on)\n"
    "  CURSOR_OAI_HELD_RUN_TTL  seconds a held run waits for its tool results (1800)\n"
    "  CURSOR_OAI_HOLLOW_TIMEOUT  seconds a continued run may show nothing before the\n"
    "                           request falls back to a fresh run (90)\n"
    "  CURSOR_OAI_HELD_RUNS_MAX held runs kept at once, oldest released first (64)\n"
    "  CURSOR_OAI_TOOL_WINDOW_MS  quiet window for parallel tool calls, ms (40)\n"
    "  XDG_CONFIG_HOME, HOME    where the credential files are\n"
    "  SSL_CERT_FILE            PEM CA bundle for the upstream (default: the system bundle)\n"
    "  TZ                       time zone reported upstream (else /etc/timezone, /etc/localtime)\n"
    "\n"
    "SIGTERM, SIGINT, SIGHUP and SIGQUIT stop the server gracefully (streams end with an\n"
    "error event and [DONE]; at most 10 s).\n"
    "Exit status: 0 ok, 1 runtime failure, 2 usage error.\n";

/* The version (as --version's first line), SERVE_HELP, then every route of ROUTE_TABLE (so
 * the help cannot miss one). */
static void serve_help(FILE *f)
{
    size_t i, w = 0;
    fprintf(f, "cursor-oai %s\n\n", COAI_VERSION);
    fputs(SERVE_HELP, f);
    for (i = 0; i < ROUTE_ROWS; i++)
        if (strlen(ROUTE_TABLE[i].path) > w) w = strlen(ROUTE_TABLE[i].path);
    fputs("\nRoutes (with CURSOR_OAI_API_KEY set, all but /health need the key; the status "
          "page\nat / takes it once as /?key=KEY and keeps it in a cookie):\n", f);
    for (i = 0; i < ROUTE_ROWS; i++)
        fprintf(f, "  %-4s %-*s  %s\n", ROUTE_TABLE[i].method, (int)w, ROUTE_TABLE[i].path,
                ROUTE_TABLE[i].what);
}

static const char LOGIN_HELP[] =
    "Usage: cursor-oai login [--no-browser]\n"
    "       cursor-oai login --api-key KEY | --api-key -\n"
    "\n"
    "Browser login: prints a login URL and its QR code (scan it with a phone when this is a\n"
    "headless server), then waits until the login is completed in a browser (up to about 24\n"
    "minutes; Ctrl-C cancels and saves nothing). When a display is available (DISPLAY or\n"
    "WAYLAND_DISPLAY set, or macOS) the URL is also opened with xdg-open (macOS: open); this\n"
    "is the only program cursor-oai ever starts, and only here.\n"
    "\n"
    "API key login: exchanges a Cursor API key for tokens. The key is saved too, so that\n"
    "tokens can be renewed with it. '--api-key -' reads the key from standard input; the\n"
    "environment variable CURSOR_API_KEY is used when --api-key is not given. (A key given\n"
    "on the command line is visible to other local users in the process list.)\n"
    "\n"
    "The login is saved to $XDG_CONFIG_HOME/cursor-oai/auth.json (default\n"
    "~/.config/cursor-oai/auth.json), mode 0600 in a 0700 directory, replaced atomically.\n"
    "\n"
    "Options:\n"
    "  --no-browser   never open a browser, just print the URL and the QR code\n"
    "  --api-key KEY  log in with a Cursor API key instead of the browser\n"
    "  -h, --help     this help\n"
    "\n"
    "Environment: CURSOR_API_URL, SSL_CERT_FILE, XDG_CONFIG_HOME, HOME, CURSOR_API_KEY;\n"
    "CURSOR_OAI_LOGIN_DELAY_SCALE (a factor in (0, 1] for the waits between polls; for tests).\n"
    "\n"
    "Exit status: 0 logged in, 1 failed, 2 usage error, 130 cancelled (Ctrl-C).\n";

static const char LOGOUT_HELP[] =
    "Usage: cursor-oai logout\n"
    "\n"
    "Removes cursor-oai's saved login ($XDG_CONFIG_HOME/cursor-oai/auth.json). cursor-agent's\n"
    "own file is never touched; if it exists, cursor-oai goes on using it (log out of\n"
    "cursor-agent to stop that). Exit status: 0 ok (also when there was nothing to remove),\n"
    "1 the file could not be removed.\n";

static const char STATUS_HELP[] =
    "Usage: cursor-oai status\n"
    "\n"
    "Shows who is logged in (from the token), when the access token expires, which\n"
    "credentials are used (CURSOR_ACCESS_TOKEN, cursor-oai's file or cursor-agent's), and\n"
    "whether Cursor accepts the token (one GetUsableModels call). A token about to expire is\n"
    "renewed first, as the server would do. Then one line of usage (as 'cursor-oai usage';\n"
    "not counted in the exit status). Exit status: 0 logged in and accepted, 1 not\n"
    "logged in, rejected, or the check failed.\n";

static const char DOCTOR_HELP[] =
    "Usage: cursor-oai doctor [--model NAME] [--capture FILE] [--verbose]\n"
    "\n"
    "Checks the whole path to Cursor, one step at a time, and says what to do when a step\n"
    "fails: the credentials (expiry, renewal), GetServerConfig (the HTTP/2 agent host),\n"
    "GetUsableModels, and one tiny real run (\"Reply with the word OK.\", model auto or\n"
    "--model) under each transport profile until one works (connect first). Prints the\n"
    "client version, the HTTP version, hosts and profile used and each step's time; names a\n"
    "host that serves HTTP/2 only, a refused profile and an outdated client version; never\n"
    "prints a token. --verbose adds the log lines. Lists anything Cursor sent that this\n"
    "version does not know.\n"
    "--capture FILE: then one more turn, with one tool call (a harmless tool the model is\n"
    "asked to call), written to FILE as a redacted transcript: each request's headers (the\n"
    "values of authorization, cookies, keys and ids left out), each message's field numbers,\n"
    "wire types and sizes each way, and timings; no prompt, answer, token or key. Safe to\n"
    "attach to a bug report.\n"
    "Uses the same environment as `serve`. Exit status: 0 a run worked, 1 otherwise.\n";

static const char MODELS_HELP[] =
    "Usage: cursor-oai models\n"
    "\n"
    "Lists the models of this Cursor account: the id to use in requests (as in GET\n"
    "/v1/models), the display name, other accepted names (aliases) and the context window.\n"
    "Exit status: 0 ok, 1 not logged in or the list could not be fetched.\n";

static const char USAGE_HELP[] =
    "Usage: cursor-oai usage [--json]\n"
    "\n"
    "Shows the account's plan, how much of the included usage this billing period is used\n"
    "and left, on-demand spending, and when the period resets (Cursor's dashboard service:\n"
    "GetCurrentPeriodUsage and GetPlanInfo). --json prints the object GET /v1/usage returns.\n"
    "Exit status: 0 ok, 1 not logged in or Cursor did not answer.\n";

static void print_version(void)
{
    printf("cursor-oai %s\nBearSSL 0.6\ncJSON %s\n%s\n", COAI_VERSION, cJSON_Version(),
           NANOPB_VERSION);
}

/* Split "HOST:PORT", "[V6]:PORT" or ":PORT" into parts. 0 ok, -1 malformed. */
/* CURSOR_API_URL: https://host[:port][/prefix] (checked by coai_url_parse_https). */
static int parse_api_url(const char *url)
{
    coai_url u;
    if (coai_url_parse_https(coai_str_c(url), &u) < 0) return -1;
    copy_str(conf.up_host, sizeof conf.up_host, u.host, strlen(u.host));
    copy_str(conf.up_port, sizeof conf.up_port, u.port, strlen(u.port));
    copy_str(conf.up_authority, sizeof conf.up_authority, u.authority, strlen(u.authority));
    copy_str(conf.up_prefix, sizeof conf.up_prefix, u.prefix, strlen(u.prefix));
    conf.base = u;
    return 0;
}

/* IANA zone name: TZ, else /etc/timezone, else the /etc/localtime link target, else UTC. */
static void detect_timezone(char *out, size_t cap)
{
    const char *tz = getenv("TZ");
    char buf[PATH_MAX];
    const char *p;
    ssize_t n;
    FILE *f;
    /* Every candidate goes into the x-cursor-timezone header: only a well-formed zone
     * name is taken (coai_tz_name_ok), anything else falls through to the next source. */
    if (tz && *tz) {
        if (*tz == ':') tz++;
        p = strstr(tz, "zoneinfo/");
        if (p) tz = p + 9;
        if (coai_tz_name_ok(coai_str_c(tz))) { copy_str(out, cap, tz, strlen(tz)); return; }
        fprintf(stderr, "cursor-oai: warning: TZ is not a time-zone name; ignored\n");
    }
    f = fopen("/etc/timezone", "re");
    if (f) {
        if (fgets(buf, sizeof buf, f)) {
            coai_str z;
            z.ptr = buf;
            z.len = strcspn(buf, " \t\r\n");
            if (coai_tz_name_ok(z)) { copy_str(out, cap, buf, z.len); fclose(f); return; }
        }
        fclose(f);
    }
    n = readlink("/etc/localtime", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = 0;
        p = strstr(buf, "zoneinfo/");
        if (p && coai_tz_name_ok(coai_str_c(p + 9))) {
            copy_str(out, cap, p + 9, strlen(p + 9));
            return;
        }
    }
    copy_str(out, cap, "UTC", 3);
}

static int env_seconds(const char *name, int def, int *out)
{
    const char *v = getenv(name);
    char *end;
    long n;
    if (!v || !*v) { *out = def; return 0; }
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || *end || n <= 0 || n > 86400 * 7) {
        fprintf(stderr, "cursor-oai: %s must be a whole number from 1 to 604800 (seconds, or "
                "MiB for the _MB limits)\n", name);
        return -1;
    }
    *out = (int)n;
    return 0;
}

/* A positive whole number <= max from the environment (def when unset). */
static int env_count(const char *name, size_t def, size_t max, size_t *out)
{
    const char *v = getenv(name);
    char *end;
    unsigned long long n;
    if (!v || !*v) { *out = def; return 0; }
    errno = 0;
    n = strtoull(v, &end, 10);
    if (errno || *end || *v == '-' || n == 0 || n > max) {
        fprintf(stderr, "cursor-oai: %s must be a whole number from 1 to %zu\n", name, max);
        return -1;
    }
    *out = (size_t)n;
    return 0;
}

/* A byte count from the environment (1..1 GiB), default def when unset. */
static int env_bytes(const char *name, size_t def, size_t *out)
{
    const char *v = getenv(name);
    char *end;
    long long n;
    if (!v || !*v) { *out = def; return 0; }
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno || *end || n <= 0 || n > 1024LL * 1024 * 1024) {
        fprintf(stderr, "cursor-oai: %s must be a number of bytes (1..1073741824)\n", name);
        return -1;
    }
    *out = (size_t)n;
    return 0;
}

/* Parse `serve` options into conf. Returns -1 to continue, else an exit status. */
/* One more accepted Host/Origin name: a bare host name or address (an IPv6 literal in
 * brackets), no path, no userinfo, no blanks; compared case-insensitively. Any port is
 * accepted with it, unless it is given as NAME:PORT, which pins the name to that port
 * (repeat it for more ports). */
static int allow_host_add(const char *name, size_t n, const char *src)
{
    coai_str v;
    size_t nl = n;
    int port_ok = 1;
    const char *colon = NULL;
    if (n > 0 && name[0] == '[') {
        const char *rb = memchr(name, ']', n);
        if (rb && (size_t)(rb - name) + 1 < n) colon = rb + 1;
    } else {
        colon = memchr(name, ':', n);
    }
    if (colon) {
        size_t i, pl = n - (size_t)(colon - name) - 1;
        long port = 0;
        nl = (size_t)(colon - name);
        port_ok = *colon == ':' && pl >= 1 && pl <= 5;
        for (i = 0; port_ok && i < pl; i++) {
            if (colon[1 + i] < '0' || colon[1 + i] > '9') port_ok = 0;
            else port = port * 10 + (colon[1 + i] - '0');
        }
        if (port < 1 || port > 65535) port_ok = 0;
    }
    v.ptr = name;
    v.len = nl;
    if (conf.allow_n == SRV_MAX_ALLOW || !port_ok || !coai_host_name_ok(v)
        || n >= sizeof conf.allow[0]) {
        fprintf(stderr, "cursor-oai: %s: '%.*s' is not a host name (at most %d names of <= 253 "
                "bytes, without path or blanks, optionally :PORT)\n", src,
                (int)(n > 253 ? 253 : n), name, SRV_MAX_ALLOW);
        return -1;
    }
    memcpy(conf.allow[conf.allow_n], name, n);
    conf.allow[conf.allow_n][n] = 0;
    conf.allow_n++;
    return 0;
}

/* CURSOR_OAI_ALLOW_HOSTS=name1,name2: the same as repeating --allow-host. */
static int allow_hosts_env(const char *v)
{
    while (v && *v) {
        const char *end = strchr(v, ','), *a = v, *b;
        if (!end) end = v + strlen(v);
        b = end;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        if (b > a && allow_host_add(a, (size_t)(b - a), "CURSOR_OAI_ALLOW_HOSTS") != 0) return -1;
        v = *end ? end + 1 : end;
    }
    return 0;
}

static int parse_serve_args(int argc, char **argv)
{
    const char *listen = getenv("CURSOR_OAI_LISTEN");
    const char *workspace = NULL, *level = "info", *format = getenv("CURSOR_OAI_LOG_FORMAT");
    int i;
    conf.max_conns = SRV_DEFAULT_MAX_CONNS;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL, *eq;
        char name[32];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            serve_help(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) goto usage;
        if (strcmp(a, "--allow-unauthenticated") == 0) {   /* the one option without a value */
            conf.allow_unauth = 1;
            continue;
        }
        eq = strchr(a, '=');
        copy_str(name, sizeof name, a, eq ? (size_t)(eq - a) : strlen(a));
        if (strcmp(name, "--listen") && strcmp(name, "--workspace") && strcmp(name, "--log-level")
            && strcmp(name, "--allow-host") && strcmp(name, "--max-conns")
            && strcmp(name, "--log-format"))
            goto usage;
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "cursor-oai: option %s needs a value\n", name);
            return 2;
        }
        if (strcmp(name, "--listen") == 0) {
            listen = v;
        } else if (strcmp(name, "--workspace") == 0) {
            workspace = v;
        } else if (strcmp(name, "--log-level") == 0) {
            level = v;
        } else if (strcmp(name, "--log-format") == 0) {
            format = v;
        } else if (strcmp(name, "--allow-host") == 0) {
            if (allow_host_add(v, strlen(v), "--allow-host") != 0) return 2;
        } else if (strcmp(name, "--max-conns") == 0) {
            char *end;
            long n;
            errno = 0;
            n = strtol(v, &end, 10);
            if (errno || *end || n < 1 || n > 1000000) {
                fprintf(stderr, "cursor-oai: --max-conns must be 1..1000000\n");
                return 2;
            }
            conf.max_conns = (int)n;
        } else {
            goto usage;
        }
    }
    if (allow_hosts_env(getenv("CURSOR_OAI_ALLOW_HOSTS")) != 0) return 2;
    if (!listen || !*listen) listen = SRV_DEFAULT_LISTEN;
    if (coai_hostport_split(coai_str_c(listen), conf.listen_host, sizeof conf.listen_host,
                            conf.listen_port, sizeof conf.listen_port, NULL) < 0) {
        fprintf(stderr, "cursor-oai: bad listen address '%s' (want HOST:PORT)\n", listen);
        return 2;
    }
    for (i = 0; i < 4 && strcmp(level, LOG_NAMES[i]) != 0; i++) {}
    if (i == 4) {
        fprintf(stderr, "cursor-oai: --log-level must be error, warn, info or debug\n");
        return 2;
    }
    conf.log_level = i;
    if (format && *format && strcmp(format, "json") != 0 && strcmp(format, "text") != 0) {
        fprintf(stderr, "cursor-oai: --log-format (CURSOR_OAI_LOG_FORMAT) must be text or "
                "json\n");
        return 2;
    }
    log_json = format && strcmp(format, "json") == 0;
    if (workspace) {
        if (!realpath(workspace, conf.workspace)) {
            fprintf(stderr, "cursor-oai: --workspace %s: %s\n", workspace, strerror(errno));
            return 2;
        }
    } else if (!getcwd(conf.workspace, sizeof conf.workspace)) {
        copy_str(conf.workspace, sizeof conf.workspace, "/", 1);
    }
    return -1;
usage:
    fprintf(stderr, "cursor-oai: unknown argument '%s'\n\n", argv[i]);
    serve_help(stderr);
    return 2;
}

/* x-cursor-client-version, decided once (spec 2.1, issue 10 item 1):
 *   1. CURSOR_CLIENT_VERSION as given ("cli-" is added to a bare build id such as
 *      2026.08.11-e8db854: the live server requires the prefix);
 *   2. else "cli-" + the newest build directory under ~/.local/share/cursor-agent/versions
 *      (an installed cursor-agent), when it is newer than the built-in one;
 *   3. else SRV_DEFAULT_CLIENT_VERSION.
 * The same value goes on every upstream call (RunSSE, BidiAppend, GetUsableModels,
 * GetServerConfig). 0 ok, -1 the env value cannot be a header value. */
static int client_version_resolve(const char *env)
{
    coai_cli_version best, v;
    char dir[PATH_MAX], bestname[128] = "";
    const char *home = getenv("HOME");
    DIR *d;
    struct dirent *de;
    if (env && *env) {
        if (!coai_header_value_ok(coai_str_c(env)) || strlen(env) + 4 >= sizeof conf.client_version)
            return -1;
        snprintf(conf.client_version, sizeof conf.client_version, "%s%s",
                 strncmp(env, "cli-", 4) != 0 && coai_cli_version_parse(coai_str_c(env), &v) == 0
                 ? "cli-" : "", env);
        snprintf(conf.client_version_src, sizeof conf.client_version_src, "CURSOR_CLIENT_VERSION%s",
                 coai_cli_version_parse(coai_str_c(env), &v) == 0 ? ""
                 : " (not a known cursor-agent build id form; sent as is)");
        return 0;
    }
    snprintf(conf.client_version, sizeof conf.client_version, "%s", SRV_DEFAULT_CLIENT_VERSION);
    snprintf(conf.client_version_src, sizeof conf.client_version_src, "built-in default");
    coai_cli_version_parse(coai_str_c(SRV_DEFAULT_CLIENT_VERSION), &best);
    if (!home || !*home) return 0;
    snprintf(dir, sizeof dir, "%s/.local/share/cursor-agent/versions", home);
    d = opendir(dir);
    if (!d) return 0;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n >= sizeof bestname || coai_cli_version_parse(coai_str_c(de->d_name), &v) < 0)
            continue;
        if (coai_cli_version_cmp(&v, &best) > 0) {
            best = v;
            memcpy(bestname, de->d_name, n + 1);
        }
    }
    closedir(d);
    if (bestname[0]) {
        snprintf(conf.client_version, sizeof conf.client_version, "cli-%s", bestname);
        /* a long HOME shortens this description, never the version itself */
        if (snprintf(conf.client_version_src, sizeof conf.client_version_src,
                     "installed cursor-agent (%s/%s), newer than the built-in %s", dir, bestname,
                     SRV_DEFAULT_CLIENT_VERSION) >= (int)sizeof conf.client_version_src)
            memcpy(conf.client_version_src + sizeof conf.client_version_src - 4, "...", 4);
    }
    return 0;
}

/* Everything from the environment and the file system. 0 ok, -1 (message printed). */
/* The held-run switches (issue 11). */
static int held_configure(void)
{
    const char *v = getenv("CURSOR_OAI_CONTINUATION");
    size_t cap = 0, win = 0;
    if (v && *v) {
        if (!strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "false")) held_runs.on = 0;
        else if (!strcmp(v, "on") || !strcmp(v, "1") || !strcmp(v, "true")) held_runs.on = 1;
        else {
            fprintf(stderr, "cursor-oai: CURSOR_OAI_CONTINUATION must be on or off\n");
            return -1;
        }
    }
    if (env_seconds("CURSOR_OAI_HELD_RUN_TTL", 1800, &held_runs.ttl_s)
        || env_seconds("CURSOR_OAI_HOLLOW_TIMEOUT", 90, &held_runs.hollow_s)
        /* counts and milliseconds, not seconds: each held run keeps two threads and an
         * upstream connection, and a window is a pause before every tool-call answer */
        || env_count("CURSOR_OAI_HELD_RUNS_MAX", 64, HELD_RUNS_CAP, &cap)
        || env_count("CURSOR_OAI_TOOL_WINDOW_MS", 40, 5000, &win))
        return -1;
    held_runs.max = (int)cap;
    held_runs.window_ms = (int)win;
    return 0;
}

static int configure(void)
{
    const char *url = getenv("CURSOR_API_URL"), *key = getenv("CURSOR_OAI_API_KEY");
    const char *cv = getenv("CURSOR_CLIENT_VERSION");
    long n;
    int ttl, up_call, models_wait, body_to, reply_mb, inflight_mb;
    struct rlimit rl;
    if (!url || !*url) url = SRV_DEFAULT_API_URL;
    if (parse_api_url(url) < 0) {
        fprintf(stderr, "cursor-oai: CURSOR_API_URL must look like https://host[:port][/path] "
                "(https only)\n");
        return -1;
    }
    {
        const char *au = getenv("CURSOR_OAI_AGENT_URL"), *pr = getenv("CURSOR_OAI_PROFILE");
        memset(&conf.agent_forced, 0, sizeof conf.agent_forced);
        if (au && *au && coai_url_parse_https(coai_str_c(au), &conf.agent_forced) < 0) {
            fprintf(stderr, "cursor-oai: CURSOR_OAI_AGENT_URL must look like "
                    "https://host[:port][/path] (https only)\n");
            return -1;
        }
        const char *ca = getenv("CURSOR_OAI_CONNECT_APPEND");
        conf.connect_json = 0;
        if (ca && *ca) {
            if (strcmp(ca, "json") == 0) conf.connect_json = 1;
            else if (strcmp(ca, "proto") != 0) {
                fprintf(stderr, "cursor-oai: CURSOR_OAI_CONNECT_APPEND must be proto or json\n");
                return -1;
            }
        }
        conf.profile_forced = -1;
        if (pr && *pr) {
            if (strcmp(pr, "grpc-web") == 0) conf.profile_forced = PROF_GRPCWEB;
            else if (strcmp(pr, "connect") == 0) conf.profile_forced = PROF_CONNECT;
            else {
                fprintf(stderr, "cursor-oai: CURSOR_OAI_PROFILE must be grpc-web or connect\n");
                return -1;
            }
            hosts.profile = conf.profile_forced;
        }
        {
            const char *tv = getenv("CURSOR_OAI_TRANSPORT");
            int rp;
            transport_state.forced = -1;
            if (env_seconds("CURSOR_OAI_H2_REPROBE", TR_REPROBE_MS / 1000, &rp) < 0) return -1;
            transport_state.reprobe_ms = rp * 1000;
            if (env_seconds("CURSOR_OAI_H2ONLY_REPROBE", H2ONLY_REPROBE_MS / 1000, &rp) < 0)
                return -1;
            h2only_reprobe_ms = rp * 1000;
            if (tv && *tv && strcmp(tv, "auto") != 0) {
                if (strcmp(tv, "h2") == 0) transport_state.forced = TR_H2;
                else if (strcmp(tv, "http1") == 0) transport_state.forced = TR_HTTP1;
                else {
                    fprintf(stderr, "cursor-oai: CURSOR_OAI_TRANSPORT must be h2, http1 or "
                            "auto\n");
                    return -1;
                }
            }
        }
    }
    {
        const char *tm = getenv("CURSOR_OAI_TOOL_MODE");
        if (coai_tool_mode_parse(coai_str_c(tm), &tool_mode) < 0) {
            fprintf(stderr, "cursor-oai: CURSOR_OAI_TOOL_MODE must be client or cursor (got "
                    "\"%.40s\")\n", tm);
            return -1;
        }
    }
    if (client_version_resolve(cv) < 0) {
        fprintf(stderr, "cursor-oai: CURSOR_CLIENT_VERSION must be printable ASCII (e.g. "
                "%s)\n", SRV_DEFAULT_CLIENT_VERSION);
        return -1;
    }
    if (key && !conf.cli) {
        /* set but blank: almost surely a mistake (an empty variable in a compose file); it
         * must not silently leave the API open */
        const char *k = key;
        while (*k == ' ' || *k == '\t' || *k == '\r' || *k == '\n') k++;
        if (!*k) {
            fprintf(stderr, "cursor-oai: CURSOR_OAI_API_KEY is set but blank; set it to the "
                    "key clients must send, or unset it to serve without a client key\n");
            return -1;
        }
    }
    conf.api_key = key && *key ? key : NULL;
    if (env_seconds("CURSOR_OAI_IDLE_TIMEOUT", SRV_DEFAULT_IDLE_TIMEOUT_S, &conf.idle_timeout_s)
        || env_seconds("CURSOR_OAI_SILENCE_TIMEOUT", SRV_DEFAULT_SILENCE_S, &conf.silence_s)
        || env_seconds("CURSOR_OAI_HEARTBEAT_TIMEOUT", SRV_DEFAULT_HB_ONLY_S, &conf.hb_only_s)
        || env_seconds("CURSOR_OAI_KEEPALIVE", SRV_DEFAULT_KEEPALIVE_S, &conf.keepalive_s)
        || env_seconds("CURSOR_OAI_MODELS_TTL", UP_MODELS_TTL_MS / 1000, &ttl)
        || env_seconds("CURSOR_OAI_UPSTREAM_TIMEOUT", UP_CALL_TIMEOUT_S, &up_call)
        || env_seconds("CURSOR_OAI_MODELS_WAIT", SRV_MODELS_WAIT_S, &models_wait)
        || env_seconds("CURSOR_OAI_BODY_TIMEOUT", SRV_BODY_TIMEOUT_S, &body_to)
        || env_seconds("CURSOR_OAI_MAX_RESPONSE_MB", SRV_REPLY_MAX_MB, &reply_mb)
        || env_seconds("CURSOR_OAI_MAX_INFLIGHT_MB", SRV_INFLIGHT_MAX_MB, &inflight_mb)
        || env_bytes("CURSOR_OAI_MAX_PROMPT_BYTES", SRV_DEFAULT_MAX_PROMPT, &conf.max_prompt))
        return -1;
    if (env_count("CURSOR_OAI_MAX_IMAGE_BYTES", COAI_MAX_IMAGE_BYTES, SRV_BODY_MAX,
                  &IMG_LIMITS.max_bytes)
        || env_count("CURSOR_OAI_MAX_IMAGES", COAI_MAX_IMAGES, 1000, &IMG_LIMITS.max_count)
        || env_count("CURSOR_OAI_MAX_IMAGES_BYTES", COAI_MAX_IMAGES_BYTES, SRV_BODY_MAX,
                     &IMG_LIMITS.max_total))
        return -1;
    if (reply_mb > 4096 || inflight_mb > 1048576) {
        fprintf(stderr, "cursor-oai: CURSOR_OAI_MAX_RESPONSE_MB is at most 4096 and "
                "CURSOR_OAI_MAX_INFLIGHT_MB at most 1048576\n");
        return -1;
    }
    conf.up_call_ms = (int64_t)up_call * 1000;
    conf.models_wait_ms = (int64_t)models_wait * 1000;
    conf.body_timeout_ms = (int64_t)body_to * 1000;
    conf.reply_max = (size_t)reply_mb << 20;
    conf.inflight_max = (size_t)inflight_mb << 20;
    conf.models_ttl_ms = (int64_t)ttl * 1000;
    {
        const char *ql = getenv("CURSOR_OAI_QUOTA_LATCH");
        char *end;
        long q = SRV_DEFAULT_QUOTA_LATCH_S;
        if (ql && *ql) {
            errno = 0;
            q = strtol(ql, &end, 10);
            if (errno || *end || q < 0 || q > 86400) {
                fprintf(stderr, "cursor-oai: CURSOR_OAI_QUOTA_LATCH must be a number of seconds "
                        "(0..86400; 0 turns it off)\n");
                return -1;
            }
        }
        conf.quota_latch_s = (int)q;
        ql = getenv("CURSOR_OAI_USAGE_TTL");
        q = USAGE_TTL_DEFAULT_S;
        if (ql && *ql) {
            errno = 0;
            q = strtol(ql, &end, 10);
            if (errno || *end || q < 0 || q > USAGE_TTL_MAX_S) {
                fprintf(stderr, "cursor-oai: CURSOR_OAI_USAGE_TTL must be a number of seconds "
                        "(0..%d; 0: only requests at the same moment share one call)\n",
                        USAGE_TTL_MAX_S);
                return -1;
            }
        }
        usage_cache.ttl_ms = (int64_t)q * 1000;
    }
    if (held_configure() < 0) return -1;
    conf.ca_file = ca_bundle_path();
    if (!conf.ca_file) {
        fprintf(stderr, "cursor-oai: no CA bundle found: set SSL_CERT_FILE to a PEM file "
                "(looked for /etc/ssl/certs/ca-certificates.crt, "
                "/etc/pki/tls/certs/ca-bundle.crt, /etc/ssl/cert.pem)\n");
        return -1;
    }
    n = ta_load(conf.ca_file, &conf.tas);
    if (n <= 0) {
        fprintf(stderr, "cursor-oai: cannot load trust anchors from %s: %s\n", conf.ca_file,
                n == 0 ? "no certificates in the file" : strerror(errno));
        return -1;
    }
    conf.tas_n = (size_t)n;
    detect_timezone(conf.timezone, sizeof conf.timezone);
    tzset();
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    return 0;
}

/* Install sa for sig, except where the parent chose to ignore it (nohup ignores SIGHUP:
 * that choice stands). */
static void signal_unless_ignored(int sig, const struct sigaction *sa)
{
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN) return;
    sigaction(sig, sa, NULL);
}

static int run_serve(int argc, char **argv)
{
    struct sigaction sa;
    int rc = parse_serve_args(argc, argv);
    if (rc >= 0) return rc;
    if (configure() < 0) return 1;
    signal(SIGPIPE, SIG_IGN);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A closed terminal (SIGHUP) and SIGQUIT stop the server the same graceful way: streams
     * end with an error event and [DONE] instead of a cut connection. (SIGQUIT's core dump
     * is of no use to a user; nginx also treats it as a graceful stop.) */
    signal_unless_ignored(SIGHUP, &sa);
    signal_unless_ignored(SIGQUIT, &sa);
    cred_paths();
    switch (cred_load()) {
    case CRED_ENV:
        srv_log(LOG_INFO, "credentials: CURSOR_ACCESS_TOKEN (not renewed)");
        break;
    case CRED_OURS:
        srv_log(LOG_INFO, "credentials: %s", file_paths.ours_path);
        break;
    case CRED_AGENT:
        srv_log(LOG_INFO, "credentials: %s (cursor-agent's, read only)", file_paths.agent_path);
        break;
    default:
        srv_log(LOG_WARN, "no upstream credentials: run `cursor-oai login` (or set "
                "CURSOR_ACCESS_TOKEN); chat requests fail with 401 until then");
        break;
    }
    rc = listen_open();
    if (rc < 0) return rc == -2 ? 2 : 1;
    log_start();        /* from here on no thread waits for stderr */
    srv_log(LOG_INFO, "cursor-oai %s listening on http://%s%s%s:%s (upstream https://%s%s, "
            "%zu trust anchors from %s, time zone %s)", COAI_VERSION,
            strchr(conf.listen_host, ':') ? "[" : "", conf.listen_host,
            strchr(conf.listen_host, ':') ? "]" : "", conf.listen_port, conf.up_authority,
            conf.up_prefix,
            conf.tas_n, conf.ca_file, conf.timezone);
    srv_log(LOG_INFO, "client version %s (%s); transport %s; profile %s%s; HTTP/1.1 runs to %s",
            conf.client_version, conf.client_version_src,
            transport_state.forced >= 0
            ? (transport_state.forced == TR_H2 ? "HTTP/2 (CURSOR_OAI_TRANSPORT, no fallback)"
                                               : "HTTP/1.1 (CURSOR_OAI_TRANSPORT)")
                           : "HTTP/2 (HTTP/1.1 as the fallback)", PROFILE_NAME[hosts.profile],
            conf.profile_forced >= 0 ? " (CURSOR_OAI_PROFILE, no fallback)"
                                  : " (grpc-web as the fallback)",
            conf.agent_forced.host[0] ? "CURSOR_OAI_AGENT_URL" : "the base URL");
    tls_reuse.spares = 1;                 /* a CLI command never wants a background connection */
    serve_loop();
    __atomic_store_n(&listener.stop_at, mono_ms(), __ATOMIC_RELAXED);
    srv_log(LOG_INFO, "shutting down: waiting up to %d s for in-flight requests",
            SRV_SHUTDOWN_GRACE_MS / 1000);
    serve_drain();
    log_flush();
    return 0;
}

/* ======================================================================== */
/* Commands: login, logout, status, models                                  */
/* ======================================================================== */

#ifdef __APPLE__
#define BROWSER_PROG "open"
#else
#define BROWSER_PROG "xdg-open"
#endif

/* "3 days", "1 hour", "45 seconds" (rounded down) */
static void human_span(char *out, size_t cap, int64_t s)
{
    const char *unit = "second";
    int64_t n = s;
    if (s >= 86400) { n = s / 86400; unit = "day"; }
    else if (s >= 3600) { n = s / 3600; unit = "hour"; }
    else if (s >= 60) { n = s / 60; unit = "minute"; }
    snprintf(out, cap, "%lld %s%s", (long long)n, unit, n == 1 ? "" : "s");
}

/* "expires in 3 days (2025-12-01 10:00 UTC)" / "expired 2 hours ago (...)" */
static void describe_expiry(char *out, size_t cap, const char *token)
{
    coai_jwt j;
    char span[64], when[64];
    int64_t now = (int64_t)time(NULL);
    time_t t;
    struct tm tm;
    if (coai_jwt_decode(coai_str_c(token), &j) != 0 || j.exp == 0) {
        snprintf(out, cap, "no expiry time in the token");
        return;
    }
    t = (time_t)j.exp;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    human_span(span, sizeof span, j.exp >= now ? j.exp - now : now - j.exp);
    if (j.exp >= now) snprintf(out, cap, "expires in %s (%s)", span, when);
    else snprintf(out, cap, "expired %s ago (%s)", span, when);
}

/* "user@example.com (auth0|123)", or whichever of the two the token has. */
static void describe_identity(char *out, size_t cap, const char *token)
{
    coai_jwt j;
    if (coai_jwt_decode(coai_str_c(token), &j) != 0 || (!j.email[0] && !j.sub[0]))
        snprintf(out, cap, "an unknown user (the token names nobody)");
    else if (j.email[0] && j.sub[0])
        snprintf(out, cap, "%s (%s)", j.email, j.sub);
    else
        snprintf(out, cap, "%s", j.email[0] ? j.email : j.sub);
}

/* Common set-up of the one-shot commands. need_upstream: CURSOR_API_URL and the CA bundle. */
static int cli_setup(int need_upstream)
{
    conf.cli = 1;
    conf.log_level = LOG_WARN;
    cred_paths();
    signal(SIGPIPE, SIG_IGN);
    if (need_upstream && configure() < 0) return -1;
    return 0;
}

/* Visible ASCII, non-empty, bounded: the only strings that may go into a header. */
static int token_text_ok(const char *s)
{
    size_t i, n = strlen(s);
    if (n == 0 || n >= SRV_TOKEN_MAX) return 0;
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e) return 0;
    return 1;
}

/* Save a fresh login and say so. Exit status. */
static int login_save(const coai_creds *c)
{
    char why[PATH_MAX + 160], who[400], exp[160];
    const char *env = getenv("CURSOR_ACCESS_TOKEN");
    if (cred_write_file(c, why, sizeof why) < 0) {
        fprintf(stderr, "cursor-oai: %s\n", why);
        return 1;
    }
    describe_identity(who, sizeof who, c->access_token);
    describe_expiry(exp, sizeof exp, c->access_token);
    printf("Logged in as %s.\nSaved to %s (mode 0600).\nAccess token %s; it is renewed "
           "automatically with the %s.\n", who, file_paths.ours_path, exp,
           c->api_key ? "API key" : "refresh token");
    printf("A running 'cursor-oai serve' picks this login up within a second.\n");
    if (env && *env)
        printf("Note: CURSOR_ACCESS_TOKEN is set in this environment; it takes precedence "
               "over the saved login.\n");
    return 0;
}

/* login --api-key: POST /auth/exchange_user_api_key (spec 14.2); the key is stored with the
 * tokens so that they can be renewed the same way. */
static int login_api_key(const char *key)
{
    coai_buf body = { 0 };
    coai_creds c;
    coai_error e;
    int status = 0, rc = 1;
    memset(&c, 0, sizeof c);
    memset(&e, 0, sizeof e);
    if (!token_text_ok(key)) {
        fprintf(stderr, "cursor-oai: the API key must be visible ASCII without spaces "
                "(1..%d bytes)\n", SRV_TOKEN_MAX - 1);
        return 2;
    }
    body.max = CRED_AUTH_BODY_MAX;
    if (auth_call("POST", "/auth/exchange_user_api_key", "exchanging the API key", key, NULL,
                  NULL, &status, &body, &e) < 0) {
        fprintf(stderr, "cursor-oai: cannot reach Cursor: %s\n", e.message);
        goto done;
    }
    if (status >= 200 && status <= 299 && !body.err
        && coai_creds_parse((const char *)body.data, body.len, &c) == 0
        && c.access_token && c.refresh_token && strlen(c.access_token) < SRV_TOKEN_MAX
        && strlen(c.refresh_token) < SRV_TOKEN_MAX) {
        free(c.api_key);
        c.api_key = strdup(key);
        if (!c.api_key) { fprintf(stderr, "cursor-oai: out of memory\n"); goto done; }
        rc = login_save(&c);
    } else if (status == 401 || status == 403) {
        fprintf(stderr, "cursor-oai: Cursor rejected the API key (HTTP %d); nothing was "
                "saved\n", status);
    } else {
        fprintf(stderr, "cursor-oai: unexpected answer to the API key exchange (HTTP %d%s); "
                "nothing was saved\n", status, status >= 200 && status <= 299
                ? ", without both tokens" : "");
    }
done:
    if (body.data) memset(body.data, 0, body.len);
    coai_buf_free(&body);
    coai_creds_free(&c);
    return rc;
}

struct login_progress {
    int64_t t0;                     /* mono ms when polling started */
    int tty;                        /* stderr is a terminal: one live line */
    int shown;                      /* the live line is on screen */
    int64_t last_line;              /* elapsed s of the last plain line, -1 none yet */
};

static void login_progress_show(struct login_progress *p, int at_poll)
{
    long long el = (long long)((mono_ms() - p->t0) / 1000);
    if (p->tty) {
        fprintf(stderr, "\rWaiting for the login in the browser... %llds (Ctrl-C cancels) ", el);
        p->shown = 1;
    } else if (at_poll && (p->last_line < 0 || el - p->last_line >= 10)) {
        fprintf(stderr, "waiting for the login in the browser (%llds elapsed)\n", el);
        p->last_line = el;
    }
    fflush(stderr);
}

static void login_progress_end(struct login_progress *p)
{
    if (p->shown) fputc('\n', stderr);
    p->shown = 0;
}

static int login_tick(void *ctx)
{
    if (stopping()) return -1;
    login_progress_show(ctx, 0);
    return 0;
}

/* Sleep ms, updating the live line; -1 when Ctrl-C came. */
static int login_sleep(unsigned ms, struct login_progress *p)
{
    int64_t end = mono_ms() + ms, last = 0;
    while (!stopping()) {
        int64_t now = mono_ms(), left = end - now;
        if (left <= 0) return 0;
        if (now - last >= 1000) { login_progress_show(p, 0); last = now; }
        poll(NULL, 0, left > 250 ? 250 : (int)left);   /* a signal cuts it short */
    }
    return -1;
}

/* Open the login URL in the user's browser: fork + exec of xdg-open (macOS: open) with the URL
 * as its only argument, never through a shell. The one program cursor-oai ever starts, and
 * only on an explicit `login` with a display. Returns the child's pid, 0 when not opened. */
static pid_t open_browser(const char *url)
{
    pid_t pid;
#ifndef __APPLE__
    const char *d = getenv("DISPLAY"), *w = getenv("WAYLAND_DISPLAY");
    if (!(d && *d) && !(w && *w)) return 0;
#endif
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0);
            dup2(fd, 1);
            dup2(fd, 2);
            if (fd > 2) close(fd);
        }
        setsid();               /* our Ctrl-C is not the browser's */
        execlp(BROWSER_PROG, BROWSER_PROG, url, (char *)NULL);
        _exit(127);
    }
    return pid > 0 ? pid : 0;
}

static void browser_reap(pid_t *pid, int wait_too)
{
    int st;
    if (*pid <= 0 || waitpid(*pid, &st, wait_too ? 0 : WNOHANG) != *pid) return;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "cursor-oai: could not open a browser (%s failed); open the URL "
                "yourself\n", BROWSER_PROG);
    *pid = 0;
}

/* The browser login of spec 14.1: PKCE, print URL + QR, poll /auth/poll with backoff. */
static int login_browser(int no_browser)
{
    const char *sc = getenv("CURSOR_OAI_LOGIN_DELAY_SCALE");
    unsigned char rnd[48];
    coai_pkce pk;
    coai_buf url = { 0 }, target = { 0 }, qr_txt = { 0 }, body = { 0 };
    coai_qr qr;
    coai_creds c;
    struct login_progress pr;
    struct sigaction sa;
    double scale = 1.0;
    unsigned attempt;
    int errors = 0, rc = 1, got = 0;
    pid_t bpid = 0;
    memset(&c, 0, sizeof c);
    if (sc && *sc) {
        char *end;
        scale = strtod(sc, &end);
        if (*end || !(scale > 0.0 && scale <= 1.0)) {
            fprintf(stderr, "cursor-oai: CURSOR_OAI_LOGIN_DELAY_SCALE must be a number in "
                    "(0, 1]\n");
            return 2;
        }
    }
    /* Ctrl-C: stop polling, save nothing (no SA_RESTART: waits return early) */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (random_fill(rnd, sizeof rnd) < 0) {
        fprintf(stderr, "cursor-oai: no randomness available\n");
        return 1;
    }
    coai_pkce_init(&pk, rnd);
    memset(rnd, 0, sizeof rnd);
    if (coai_login_url(&url, &pk) < 0 || coai_login_poll_target(&target, &pk) < 0) {
        fprintf(stderr, "cursor-oai: out of memory\n");
        goto done;
    }
    printf("To log in to Cursor, open this URL in a browser:\n\n  %s\n\n", (char *)url.data);
    if (coai_qr_encode(&qr, url.data, url.len) == 0 && coai_qr_render_utf8(&qr, &qr_txt) == 0)
        printf("or scan this QR code with a phone:\n\n%s\n", (char *)qr_txt.data);
    if (!no_browser) {
        bpid = open_browser((const char *)url.data);
        if (bpid) printf("Opening the URL with %s.\n", BROWSER_PROG);
    }
    fflush(stdout);
    pr.t0 = mono_ms();
    pr.tty = isatty(2);
    pr.shown = 0;
    pr.last_line = -1;
    body.max = CRED_AUTH_BODY_MAX;
    for (attempt = 0; attempt < COAI_LOGIN_MAX_ATTEMPTS && !stopping(); attempt++) {
        coai_error e;
        int status = 0, r;
        memset(&e, 0, sizeof e);
        coai_buf_reset(&body);
        login_progress_show(&pr, 1);
        r = auth_call("GET", (const char *)target.data, "polling /auth/poll", NULL, login_tick,
                      &pr, &status, &body, &e);
        if (stopping()) break;
        if (r == 0 && status == 404) {
            errors = 0;             /* pending: the user has not finished yet */
        } else if (r == 0 && status >= 200 && status <= 299 && !body.err
                   && coai_creds_parse((const char *)body.data, body.len, &c) == 0
                   && c.access_token && c.refresh_token
                   && strlen(c.access_token) < SRV_TOKEN_MAX
                   && strlen(c.refresh_token) < SRV_TOKEN_MAX) {
            got = 1;
            break;
        } else {
            coai_creds_free(&c);
            errors++;
            login_progress_end(&pr);
            if (r < 0)
                fprintf(stderr, "cursor-oai: login poll failed: %s (%d of %d)\n", e.message,
                        errors, COAI_LOGIN_MAX_ERRORS);
            else
                fprintf(stderr, "cursor-oai: login poll failed: HTTP %d%s (%d of %d)\n", status,
                        status >= 200 && status <= 299 ? " without both tokens" : "", errors,
                        COAI_LOGIN_MAX_ERRORS);
            if (errors >= COAI_LOGIN_MAX_ERRORS) break;
        }
        browser_reap(&bpid, 0);
        if (login_sleep((unsigned)(coai_login_poll_delay_ms(attempt) * scale), &pr) < 0) break;
    }
    login_progress_end(&pr);
    if (stopping()) {
        fprintf(stderr, "cursor-oai: login cancelled; nothing was saved\n");
        rc = 130;
    } else if (got) {
        rc = login_save(&c);
    } else if (errors >= COAI_LOGIN_MAX_ERRORS) {
        fprintf(stderr, "cursor-oai: giving up after %d failed polls in a row; nothing was "
                "saved\n", errors);
    } else {
        fprintf(stderr, "cursor-oai: the login was not completed in time; run "
                "'cursor-oai login' again\n");
    }
done:
    browser_reap(&bpid, 0);
    if (target.data) memset(target.data, 0, target.len);     /* holds the verifier */
    if (body.data) memset(body.data, 0, body.len);
    coai_buf_free(&url);
    coai_buf_free(&target);
    coai_buf_free(&qr_txt);
    coai_buf_free(&body);
    coai_creds_free(&c);
    memset(&pk, 0, sizeof pk);
    return rc;
}

static int run_login(int argc, char **argv)
{
    const char *key = NULL;
    char line[SRV_TOKEN_MAX + 2];
    int i, no_browser = 0, rc;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(LOGIN_HELP, stdout);
            return 0;
        } else if (strcmp(a, "--no-browser") == 0) {
            no_browser = 1;
        } else if (strncmp(a, "--api-key=", 10) == 0) {
            key = a + 10;
        } else if (strcmp(a, "--api-key") == 0 && i + 1 < argc) {
            key = argv[++i];
        } else {
            fprintf(stderr, "cursor-oai: login: unknown or incomplete argument '%s'\n\n%s", a,
                    LOGIN_HELP);
            return 2;
        }
    }
    if (!key) {
        const char *env = getenv("CURSOR_API_KEY");
        if (env && *env) key = env;
    }
    if (cli_setup(1) < 0) return 1;
    if (!key) return login_browser(no_browser);
    if (strcmp(key, "-") == 0) {
        size_t n;
        if (!fgets(line, sizeof line, stdin)) {
            fprintf(stderr, "cursor-oai: no API key on standard input\n");
            return 2;
        }
        n = strcspn(line, "\r\n");
        line[n] = 0;
        key = line;
    }
    rc = login_api_key(key);
    memset(line, 0, sizeof line);
    return rc;
}

static int run_logout(int argc, char **argv)
{
    struct stat st;
    const char *env = getenv("CURSOR_ACCESS_TOKEN");
    int rc = 0;
    if (argc > 0) {
        int help = strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0;
        fputs(LOGOUT_HELP, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    cli_setup(0);
    if (unlink(file_paths.ours_path) == 0) {
        printf("Removed %s.\n", file_paths.ours_path);
    } else if (errno == ENOENT) {
        printf("No cursor-oai login to remove (%s does not exist).\n", file_paths.ours_path);
    } else {
        fprintf(stderr, "cursor-oai: cannot remove %s: %s\n", file_paths.ours_path,
                strerror(errno));
        rc = 1;
    }
    if (stat(file_paths.agent_path, &st) == 0)
        printf("cursor-agent's own login (%s) was left alone; cursor-oai uses it while it "
               "exists (log out of cursor-agent to end that).\n", file_paths.agent_path);
    if (env && *env)
        printf("CURSOR_ACCESS_TOKEN is still set in this environment and is used when set.\n");
    return rc;
}

/* The upstream check shared by status and models: one GetUsableModels call, the list parsed
 * into *m (freeable either way). */
static int cli_models(coai_models *m, coai_error *e)
{
    memset(e, 0, sizeof *e);
    return models_fetch(m, e);
}

static int run_status(int argc, char **argv)
{
    char tok[SRV_TOKEN_MAX], buf[400];
    coai_models m;
    coai_error e;
    uint64_t gen0, gen1;
    int src, rc = 1;
    if (argc > 0) {
        int help = strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0;
        fputs(STATUS_HELP, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    if (cli_setup(1) < 0) return 1;
    src = cred_load();
    if (src == CRED_NONE) {
        printf("Not logged in: CURSOR_ACCESS_TOKEN is not set and neither %s nor %s holds a "
               "login.\nRun 'cursor-oai login'.\n", file_paths.ours_path, file_paths.agent_path);
        return 1;
    }
    cred_token(tok, sizeof tok, &gen0);
    describe_identity(buf, sizeof buf, tok);
    printf("Logged in as %s\n", buf);
    printf("Credentials: %s\n", src == CRED_ENV ? "CURSOR_ACCESS_TOKEN (environment)"
           : src == CRED_OURS ? file_paths.ours_path : file_paths.agent_path);
    if (src == CRED_AGENT) printf("             (cursor-agent's file, read only)\n");
    printf("Client version: %s (%s)\n", conf.client_version, conf.client_version_src);
    describe_expiry(buf, sizeof buf, tok);
    printf("Access token: %s\n", buf);
    pthread_mutex_lock(&creds.lock);
    printf("Renewal: %s\n", cred_renewal_locked());
    pthread_mutex_unlock(&creds.lock);
    fflush(stdout);
    memset(&m, 0, sizeof m);
    if (cli_models(&m, &e) == 0) {
        cred_token(tok, sizeof tok, &gen1);
        if (gen1 != gen0) {
            describe_expiry(buf, sizeof buf, tok);
            printf("Access token renewed: the new one %s%s\n", buf,
                   creds.persist_failed ? " (NOT saved; see the error above)" : "");
        }
        printf("Upstream: https://%s%s accepts the token (%zu models)\n", conf.up_authority,
               conf.up_prefix, m.count);
        fflush(stdout);
        {
            /* one line; a failure here does not change the exit status */
            coai_quota u;
            coai_error ue;
            coai_buf line = { 0 };
            if (usage_fetch(&u, &ue) == 0 && coai_quota_summary(&line, &u, wall_ms()) == 0)
                printf("Usage: %s\n", (char *)line.data);
            else
                printf("Usage: unavailable (%s)\n", ue.status ? ue.message : "out of memory");
            coai_buf_free(&line);
        }
        rc = 0;
    } else if (e.status == 401 || e.status == 403) {
        printf("Upstream: https://%s%s rejected the credentials: %s\nRun 'cursor-oai login'.\n",
               conf.up_authority, conf.up_prefix, e.message);
    } else {
        printf("Upstream: could not check with https://%s%s: %s\n", conf.up_authority,
               conf.up_prefix, e.message);
    }
    memset(tok, 0, sizeof tok);
    coai_models_free(&m);
    return rc;
}

static int run_models(int argc, char **argv)
{
    coai_buf *cells = NULL;
    coai_models m;
    coai_error e;
    size_t i, k, w[3] = { 2, 4, 7 };    /* "ID", "NAME", "ALIASES" */
    int rc = 1;
    if (argc > 0) {
        int help = strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0;
        fputs(MODELS_HELP, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    if (cli_setup(1) < 0) return 1;
    memset(&m, 0, sizeof m);
    if (cred_load() == CRED_NONE) {
        fprintf(stderr, "cursor-oai: not logged in; run 'cursor-oai login'\n");
        return 1;
    }
    if (cli_models(&m, &e) < 0) {
        fprintf(stderr, "cursor-oai: cannot list the models: %s\n", e.message);
        goto done;
    }
    cells = calloc(m.count * 3 + 1, sizeof *cells);
    if (!cells) { fprintf(stderr, "cursor-oai: out of memory\n"); goto done; }
    for (i = 0; i < m.count; i++) {
        const coai_model *it = &m.items[i];
        coai_str id = it->display_id.len ? it->display_id : it->id, a;
        coai_buf *c = &cells[i * 3];
        coai_buf_append(&c[0], id.ptr, id.len);
        coai_buf_append(&c[1], it->display_name.ptr, it->display_name.len);
        /* every other name a request may use for this model */
        if (!coai_str_eq(it->id, "") && (it->id.len != id.len
                                         || memcmp(it->id.ptr, id.ptr, id.len) != 0))
            coai_buf_append(&c[2], it->id.ptr, it->id.len);
        for (k = 0; coai_model_alias(it, k, &a) == 0; k++) {
            if (a.len == id.len && memcmp(a.ptr, id.ptr, id.len) == 0) continue;
            if (a.len == it->id.len && memcmp(a.ptr, it->id.ptr, a.len) == 0) continue;
            if (c[2].len) coai_buf_puts(&c[2], ", ");
            coai_buf_append(&c[2], a.ptr, a.len);
        }
        if (!c[1].len) coai_buf_puts(&c[1], "-");
        if (!c[2].len) coai_buf_puts(&c[2], "-");
        for (k = 0; k < 3; k++) {
            if (c[k].err) { fprintf(stderr, "cursor-oai: out of memory\n"); goto done; }
            if (c[k].len > w[k]) w[k] = c[k].len < 60 ? c[k].len : 60;
        }
    }
    printf("%-*s  %-*s  %-*s  %s\n", (int)w[0], "ID", (int)w[1], "NAME", (int)w[2], "ALIASES",
           "CONTEXT");
    for (i = 0; i < m.count; i++) {
        const coai_model *it = &m.items[i];
        uint32_t ctx, outp;
        coai_model_limits(it->display_id.len ? it->display_id : it->id, &ctx, &outp);
        printf("%-*s  %-*s  %-*s  %lu\n", (int)w[0], (char *)cells[i * 3].data, (int)w[1],
               (char *)cells[i * 3 + 1].data, (int)w[2], (char *)cells[i * 3 + 2].data,
               (unsigned long)ctx);
    }
    rc = 0;
done:
    for (i = 0; cells && i < m.count * 3; i++) coai_buf_free(&cells[i]);
    free(cells);
    coai_models_free(&m);
    return rc;
}


/* ---- doctor (issue 10 item 9) ------------------------------------------------------------
 * Each step prints "<verdict> <step> (<ms> ms): <what>" and, when it failed, "  -> advice".
 * The run goes through handle_chat itself (a socket pair stands in for the client), so it
 * takes exactly the path a client's request takes. */

static int64_t doctor_t0;

static void doctor_step(const char *verdict, const char *step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void doctor_step(const char *verdict, const char *step, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%-4s %-16s (%5lld ms) %s\n", verdict, step, (long long)(mono_ms() - doctor_t0), msg);
    fflush(stdout);
    doctor_t0 = mono_ms();      /* each step's own time */
}

static void doctor_advice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void doctor_advice(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("     -> ", stdout);
    vprintf(fmt, ap);
    fputs("\n", stdout);
    va_end(ap);
    fflush(stdout);
}

/* What to do about an error a step got, by its code and kind (never by its message). */
static void doctor_advise(const coai_error *e, const coai_url *agent)
{
    const char *code = e->code ? e->code : "";
    if (strcmp(code, "outdated_client") == 0)
        doctor_advice("Cursor refuses the client version %s as outdated: set "
                      "CURSOR_CLIENT_VERSION to a current cursor-agent build (e.g. "
                      SRV_DEFAULT_CLIENT_VERSION " or newer), or update cursor-agent "
                      "(its newest build is used automatically).", conf.client_version);
    else if (strcmp(code, "unsupported_region") == 0)
        doctor_advice("Cursor does not serve this model in your country or region: try "
                      "another model (doctor --model NAME; see `cursor-oai models`).");
    else if (strcmp(code, "model_overloaded") == 0)
        doctor_advice("Cursor is shedding load for this model (High Load): try another model "
                      "(doctor --model NAME) or try again later.");
    else if (strcmp(code, "conversation_lost") == 0)
        doctor_advice("Cursor lost the conversation and the replay as a new one failed too: "
                      "run doctor again; if it repeats, attach its --verbose output to a bug "
                      "report.");
    else if (e->kind == COAI_ERRK_CONTEXT_UNANSWERED)
        doctor_advice("Cursor never got cursor-oai's answer to its first question (a lost "
                      "BidiAppend): run doctor again; if it repeats, attach its --verbose "
                      "output to a bug report.");
    else if (e->kind == COAI_ERRK_UNPAID_INVOICE)
        doctor_advice("Cursor holds requests until an open invoice is paid: pay it in "
                      "Cursor's dashboard.");
    else if (strcmp(code, "upstream_wrong_region") == 0)
        doctor_advice("the agent host https://%s%s does not serve your account's region. "
                      "Set CURSOR_OAI_AGENT_URL to the right one, or unset it (runs then go "
                      "to CURSOR_API_URL).", agent->authority, agent->prefix);
    else if (strcmp(code, "upstream_http2_only") == 0 || e->kind == COAI_ERRK_HTTP1_REFUSED)
        doctor_advice("https://%s%s serves HTTP/2 only and cursor-oai speaks HTTP/1.1: %s",
                      agent->authority, agent->prefix, conf.agent_forced.host[0]
                      ? "unset CURSOR_OAI_AGENT_URL (runs then go to CURSOR_API_URL)."
                      : "set CURSOR_API_URL to a host that serves HTTP/1.1 (the default, "
                      "https://api2.cursor.sh, does).");
    else if (strcmp(code, "upstream_unreachable") == 0 || strcmp(code, "upstream_timeout") == 0
             || strncmp(code, "upstream_tls", 12) == 0)
        doctor_advice("cannot reach https://%s%s: check the network, a proxy or firewall, "
                      "SSL_CERT_FILE%s.", agent->authority, agent->prefix,
                      conf.agent_forced.host[0] && up_same_host(agent, &conf.agent_forced)
                      ? ", and CURSOR_OAI_AGENT_URL (unset, runs go to CURSOR_API_URL)" : "");
    else if (e->status == 401 || e->status == 403)
        doctor_advice("run `cursor-oai login` again.");
    else if (strcmp(code, "insufficient_quota") == 0)
        doctor_advice("your Cursor plan's usage is used up; check it in Cursor.");
    else if (strcmp(code, "rate_limit_exceeded") == 0)
        doctor_advice("rate limited: try again in a minute.");
    else if (strcmp(code, "upstream_resource_exhausted") == 0
             || strcmp(code, "model_not_available") == 0 || e->status == 404)
        doctor_advice("try another model: doctor --model NAME (see `cursor-oai models`).");
    else
        doctor_advice("run with --verbose and attach the output to a bug report.");
}

/* One chat through handle_chat. *status = HTTP status, body = the response body, *err = the
 * error it sent (status 0: none, or it sent no error of its own). json: the request body
 * (NULL: the plain "Reply with the word OK." to model). */
static void doctor_post(const char *model, const char *json, int *status, coai_buf *body,
                        coai_error *err)
{
    struct conn *c = calloc(1, sizeof *c);
    int sv[2];
    char buf[16384];
    coai_buf raw = { 0 };
    ssize_t n;
    *status = 0;
    memset(err, 0, sizeof *err);
    if (!c || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) { free(c); return; }
    c->fd = sv[0];
    c->t0 = mono_ms();
    if (json) {
        coai_buf_puts(&c->body, json);
    } else {
        coai_buf_printf(&c->body, "{\"model\":");
        coai_json_str_append(&c->body, model, strlen(model));
        /* in client mode the probe carries one harmless tool, so that its run sends the
         * tools header as a client's run does (and doctor sees whether Cursor honours it) */
        if (tool_mode == COAI_TOOLS_CLIENT)
            coai_buf_puts(&c->body, ",\"tools\":[{\"type\":\"function\",\"function\":{"
                          "\"name\":\"doctor_probe\",\"description\":\"A harmless probe of "
                          "cursor-oai doctor: returns the word ready.\",\"parameters\":{"
                          "\"type\":\"object\",\"properties\":{}}}}]");
        coai_buf_puts(&c->body, ",\"stream\":false,\"messages\":[{\"role\":\"user\","
                      "\"content\":\"Reply with the word OK.\"}]}");
    }
    handle_chat(c);
    *err = c->err;
    close(sv[0]);
    while ((n = read(sv[1], buf, sizeof buf)) > 0) coai_buf_append(&raw, buf, (size_t)n);
    close(sv[1]);
    if (raw.data && raw.len > 12 && memcmp(raw.data, "HTTP/1.1 ", 9) == 0) {
        const char *b = strstr((const char *)raw.data, "\r\n\r\n");
        *status = atoi((const char *)raw.data + 9);
        if (b) coai_buf_append(body, b + 4, raw.len - (size_t)(b + 4 - (const char *)raw.data));
    }
    coai_buf_free(&raw);
    coai_buf_free(&c->body);
    coai_buf_free(&c->wbuf);
    coai_buf_free(&c->wpend);
    free(c);
}

/* doctor --capture FILE: one tiny turn with one tool call (a harmless tool the model is asked
 * to call once, answered with a canned result), every frame of it written to FILE in its
 * redacted form (see CAP). 0 written, -1 not (said on stdout). */
static int doctor_capture(const char *model, const char *path)
{
    static const char tool[] = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"doctor_probe\",\"description\":\"A harmless probe of cursor-oai doctor: returns "
        "the word ready.\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";
    static const char ask[] = "Call the doctor_probe tool once, with no arguments, then "
        "reply with the word OK.";
    coai_buf req = { 0 }, body = { 0 };
    coai_error e;
    int st = 0, fd, calls = 0, st2 = 0;
    char id[128] = "";
    cJSON *j = NULL;
    const cJSON *tc;
    FILE *f;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        doctor_step("FAIL", "capture", "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "# cursor-oai %s doctor --capture: one turn with one tool call, redacted.\n"
            "# No prompt, answer, tool argument, token or key is in this file: request headers\n"
            "# show their values only for a fixed list of harmless names, and each message is\n"
            "# its shape: NAME{FIELD/WIRE[LENGTH]{...} ...}, '!' = a field this version does\n"
            "# not know. C>S: sent to Cursor, S>C: received; times since the capture began.\n"
            "# transport: ", COAI_VERSION);
    {
        char tb[400];
        tr_describe(tb, sizeof tb);
        fprintf(f, "%s\n", tb);
    }
    pthread_mutex_lock(&capture_log.mu);
    capture_log.t0 = mono_ms();
    __atomic_store_n(&capture_log.f, f, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&capture_log.mu);
    cap_line("turn 1: the model is asked to call doctor_probe");
    coai_buf_puts(&req, "{\"model\":");
    coai_json_str_append(&req, model, strlen(model));
    coai_buf_printf(&req, ",\"stream\":false,%s,\"messages\":[{\"role\":\"user\",\"content\":"
                    "\"%s\"}]}", tool, ask);
    coai_buf_putc(&req, 0);
    doctor_post(model, req.err ? "" : (const char *)req.data, &st, &body, &e);
    j = body.data ? cJSON_ParseWithLength((const char *)body.data, body.len) : NULL;
    tc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "message"), "tool_calls");
    calls = cJSON_GetArraySize(tc);
    if (st == 200 && calls > 0) {
        const cJSON *cid = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tc, 0), "id");
        if (cJSON_IsString(cid)) copy_str(id, sizeof id, cid->valuestring,
                                          strlen(cid->valuestring));
    }
    if (id[0]) {
        /* turn 2: the tool's canned result, as a client sends it back */
        char *calls_json = cJSON_PrintUnformatted(tc);
        cap_line("turn 2: the tool result goes back");
        coai_buf_reset(&req);
        coai_buf_puts(&req, "{\"model\":");
        coai_json_str_append(&req, model, strlen(model));
        coai_buf_printf(&req, ",\"stream\":false,%s,\"messages\":[{\"role\":\"user\","
                        "\"content\":\"%s\"},{\"role\":\"assistant\",\"content\":null,"
                        "\"tool_calls\":%s},{\"role\":\"tool\",\"tool_call_id\":", tool, ask,
                        calls_json ? calls_json : "[]");
        coai_json_str_append(&req, id, strlen(id));
        coai_buf_puts(&req, ",\"content\":\"ready\"}]}");
        coai_buf_putc(&req, 0);
        free(calls_json);
        coai_buf_free(&body);
        doctor_post(model, req.err ? "" : (const char *)req.data, &st2, &body, &e);
    }
    cap_line("end");
    pthread_mutex_lock(&capture_log.mu);
    __atomic_store_n(&capture_log.f, (FILE *)NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&capture_log.mu);
    cJSON_Delete(j);
    coai_buf_free(&req);
    coai_buf_free(&body);
    if (fclose(f) != 0) {
        doctor_step("FAIL", "capture", "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    if (st != 200)
        doctor_step("WARN", "capture", "written to %s, but the turn failed (HTTP %d)", path, st);
    else if (!id[0])
        doctor_step("WARN", "capture", "written to %s; the model answered without calling the "
                    "tool", path);
    else
        doctor_step("OK", "capture", "written to %s: one tool call (HTTP %d), then its result "
                    "(HTTP %d)", path, st, st2);
    printf("     -> %s holds no prompt, answer, token or key: attach it to a bug report.\n",
           path);
    return 0;
}

/* doctor's options: -1 go on, else the exit code (help or a usage error printed). */
static int doctor_args(int argc, char **argv, const char **model, const char **capture)
{
    int i;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            *model = argv[++i];
        } else if (strcmp(argv[i], "--capture") == 0 && i + 1 < argc) {
            *capture = argv[++i];
        } else if (strcmp(argv[i], "--verbose") == 0) {
            continue;
        } else {
            int help = strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0;
            fputs(DOCTOR_HELP, help ? stdout : stderr);
            return help ? 0 : 2;
        }
    }
    return -1;
}

/* Configuration, log level and workspace, then the settings doctor runs with. 0 ok, -1 the
 * set-up failed (said). */
static int doctor_setup(int argc, char **argv)
{
    char buf[400];
    int i;
    if (cli_setup(1) < 0) return -1;
    conf.log_level = LOG_ERROR;
    for (i = 0; i < argc; i++)
        if (strcmp(argv[i], "--verbose") == 0) conf.log_level = LOG_INFO;
    if (!getcwd(conf.workspace, sizeof conf.workspace))
        copy_str(conf.workspace, sizeof conf.workspace, "/", 1);
    doctor_t0 = mono_ms();
    printf("cursor-oai %s doctor\n", COAI_VERSION);
    printf("Client version: %s (%s)\n", conf.client_version, conf.client_version_src);
    printf("Base URL:       https://%s%s (CURSOR_API_URL%s)\n", conf.up_authority, conf.up_prefix,
           getenv("CURSOR_API_URL") && *getenv("CURSOR_API_URL") ? "" : " default");
    printf("Profiles:       %s\n", conf.profile_forced >= 0
           ? (conf.profile_forced == PROF_CONNECT ? "connect only (CURSOR_OAI_PROFILE)"
                                               : "grpc-web only (CURSOR_OAI_PROFILE)")
           : "connect, then grpc-web");
    tr_describe(buf, sizeof buf);
    printf("Transport:      %s\n", buf);
    printf("HTTP/1.1 runs:  https://%s%s (%s)\n",
           conf.agent_forced.host[0] ? conf.agent_forced.authority : conf.base.authority,
           conf.agent_forced.host[0] ? conf.agent_forced.prefix : conf.base.prefix,
           conf.agent_forced.host[0] ? "CURSOR_OAI_AGENT_URL" : "the base URL");
    fflush(stdout);
    return 0;
}

/* Step 1: a token, renewed if it must be. 0 ok, -1 none (said, with advice). */
static int doctor_credentials(void)
{
    char tok[SRV_TOKEN_MAX], buf[400];
    coai_error e;
    int srcw = cred_load();
    if (srcw == CRED_NONE) {
        doctor_step("FAIL", "credentials", "not logged in (no CURSOR_ACCESS_TOKEN, %s or %s)",
                    file_paths.ours_path, file_paths.agent_path);
        doctor_advice("run `cursor-oai login`.");
        return -1;
    }
    memset(&e, 0, sizeof e);
    if (cred_ensure(&e) < 0) {
        doctor_step("FAIL", "credentials", "the token could not be renewed: %s", e.message);
        doctor_advise(&e, &conf.base);
        return -1;
    }
    cred_token(tok, sizeof tok, NULL);
    describe_identity(buf, sizeof buf, tok);
    {
        char exp[200];
        describe_expiry(exp, sizeof exp, tok);
        pthread_mutex_lock(&creds.lock);
        doctor_step("OK", "credentials", "%s, from %s; token %s; renewal %s", buf,
                    srcw == CRED_ENV ? "CURSOR_ACCESS_TOKEN"
                    : srcw == CRED_OURS ? file_paths.ours_path
                    : file_paths.agent_path, exp, cred_renewal_locked());
        pthread_mutex_unlock(&creds.lock);
    }
    memset(tok, 0, sizeof tok);
    return 0;
}

/* Step 2: GetServerConfig, and where runs go for each transport. */
static void doctor_server_config(void)
{
    char src[700];
    coai_error e;
    coai_url agent;
    int i, failed_cfg;
    if (conf.agent_forced.host[0]) {
        coai_url named;
        int h2cfg_unused;
        memset(&e, 0, sizeof e);
        i = server_config_fetch(&named, &h2cfg_unused, &e);
        doctor_step(i < 0 ? "WARN" : "OK", "GetServerConfig",
                    "runs use https://%s%s (CURSOR_OAI_AGENT_URL); GetServerConfig %s%s%s "
                    "(its host is for HTTP/2)",
                    conf.agent_forced.authority, conf.agent_forced.prefix,
                    i == 0 ? "names https://" : i == 1 ? "names no agent URL" : "failed: ",
                    i == 0 ? named.authority : i == 1 ? "" : e.message,
                    i == 0 ? named.prefix : "");
        if (i < 0) doctor_advise(&e, &conf.base);
    } else {
        agent_h2_get(&agent, src, sizeof src);
        pthread_mutex_lock(&hosts.lock);
        failed_cfg = hosts.agent_h2_failed;
        pthread_mutex_unlock(&hosts.lock);
        doctor_step(failed_cfg ? "WARN" : "OK", "GetServerConfig", "HTTP/2 agent host "
                    "https://%s%s (%s); HTTP/1.1 runs go to the base URL https://%s%s",
                    agent.authority, agent.prefix, src, conf.base.authority, conf.base.prefix);
        if (failed_cfg && strstr(src, "outdated"))
            doctor_advice("Cursor refuses the client version %s as outdated: set "
                          "CURSOR_CLIENT_VERSION to a current cursor-agent build.",
                          conf.client_version);
    }
}

/* Step 2b: which transport runs take, and what decided it. */
static void doctor_transport(void)
{
    char dec[300];
    tr_decision(dec, sizeof dec);
    doctor_step("OK", "transport", "%s", dec);
}

/* Step 3: GetUsableModels. */
static void doctor_models(void)
{
    coai_models m;
    coai_error e;
    memset(&m, 0, sizeof m);
    if (cli_models(&m, &e) == 0) {
        doctor_step("OK", "GetUsableModels", "%zu models", m.count);
    } else {
        doctor_step("FAIL", "GetUsableModels", "%s", e.message);
        doctor_advise(&e, &conf.base);
    }
    coai_models_free(&m);
}

/* Step 4a: one tiny run over HTTP/2 (exactly: no fallback inside). 1 it worked. */
static int doctor_run_h2(const char *model)
{
    coai_buf body = { 0 };
    int st, saved = transport_state.forced, ok_h2 = 0;
    coai_url h2host;
    coai_error he;
    cJSON *j;
    transport_state.forced = TR_H2;
    doctor_post(model, NULL, &st, &body, &he);
    transport_state.forced = saved;
    agent_h2_get(&h2host, NULL, 0);
    j = body.data ? cJSON_ParseWithLength((const char *)body.data, body.len) : NULL;
    if (st == 200) {
        ok_h2 = 1;
        doctor_step("OK", "run (HTTP/2)", "model %s, one Run stream to https://%s%s",
                    model, h2host.authority, h2host.prefix);
    } else {
        const cJSON *em = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
        doctor_step(transport_state.forced == TR_H2 ? "FAIL" : "WARN", "run (HTTP/2)", "HTTP %d, "
                    "HTTP/2 to https://%s%s: %s", st, h2host.authority, h2host.prefix,
                    cJSON_IsString(em) ? em->valuestring : "no answer");
        if (transport_state.forced == TR_H2)
            doctor_advice("CURSOR_OAI_TRANSPORT=h2 forbids the HTTP/1.1 fallback: unset "
                          "it, or fix what blocks HTTP/2 (a proxy or middlebox without it)");
        else
            doctor_advice("runs fall back to HTTP/1.1 RunSSE + BidiAppend (tried next); "
                          "a proxy or middlebox without HTTP/2 is the usual cause");
    }
    cJSON_Delete(j);
    coai_buf_free(&body);
    return ok_h2;
}

/* Step 4b: one tiny run per profile over HTTP/1.1 until one works. 1 one worked. */
static int doctor_run_h1(const char *model)
{
    coai_error e;
    coai_url agent;
    int i, ok_run = 0, order[2], norder, refused_said = 0, saved_tr = transport_state.forced;
    char why[160];
    transport_state.forced = TR_HTTP1;
    norder = 0;
    if (conf.profile_forced >= 0) {
        order[norder++] = conf.profile_forced;
    } else {
        order[norder++] = PROF_CONNECT;
        order[norder++] = PROF_GRPCWEB;
    }
    for (i = 0; i < norder && !ok_run; i++) {
        coai_buf body = { 0 };
        coai_error ce;
        int st, saved = conf.profile_forced;
        char step[32];
        cJSON *j;
        snprintf(step, sizeof step, "run (%s)", PROFILE_NAME[order[i]]);
        conf.profile_forced = order[i];    /* exactly this profile, no switching inside */
        hosts.profile = order[i];
        doctor_post(model, NULL, &st, &body, &ce);
        conf.profile_forced = saved;
        run_host_get(&agent, NULL, 0);  /* where it ended up (a refusing host is skipped) */
        if (conf.agent_forced.host[0] && !refused_said
            && h2only_has(&conf.agent_forced, why, sizeof why)) {
            refused_said = 1;
            doctor_step("WARN", "agent host", "https://%s%s serves HTTP/2 only: it answered "
                        "cursor-oai's HTTP/1.1 request with %s; runs went to the base URL "
                        "https://%s%s instead", conf.agent_forced.authority,
                        conf.agent_forced.prefix,
                        why, conf.base.authority, conf.base.prefix);
            doctor_advice("unset CURSOR_OAI_AGENT_URL: cursor-oai speaks HTTP/1.1, and its runs "
                          "belong on the base URL (CURSOR_API_URL).");
        }
        j = body.data ? cJSON_ParseWithLength((const char *)body.data, body.len) : NULL;
        if (st == 200) {
            const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"),
                                                 0);
            const cJSON *msg = cJSON_GetObjectItemCaseSensitive(ch, "message");
            const cJSON *ct = cJSON_GetObjectItemCaseSensitive(msg, "content");
            const char *text = cJSON_IsString(ct) ? ct->valuestring : "";
            doctor_step("OK", step, "model %s, HTTP/1.1 to https://%s%s, answered \"%.80s%s\"",
                        model, agent.authority, agent.prefix, text,
                        strlen(text) > 80 ? "..." : "");
            ok_run = 1;
        } else {
            const cJSON *eo = cJSON_GetObjectItemCaseSensitive(j, "error");
            const cJSON *em = cJSON_GetObjectItemCaseSensitive(eo, "message");
            const cJSON *ec = cJSON_GetObjectItemCaseSensitive(eo, "code");
            memset(&e, 0, sizeof e);
            if (ce.status)      /* the error itself: its fields decide, its words are shown */
                e = ce;
            else
                coai_error_set(&e, st, "x", cJSON_IsString(ec) ? ec->valuestring : "", NULL,
                               "%s", cJSON_IsString(em) ? em->valuestring : "no answer");
            doctor_step("FAIL", step, "HTTP %d, HTTP/1.1 to https://%s%s: %s [%s]", st,
                        agent.authority, agent.prefix, e.message,
                        e.code && e.code[0] ? e.code : "-");
            if (!profile_wrong(e.upstream_status, &e))
                doctor_advise(&e, &agent);
            else
                doctor_advice("Cursor refused the %s profile (%s): %s", PROFILE_NAME[order[i]],
                              order[i] == PROF_CONNECT ? "application/connect+proto"
                              : "application/grpc-web+proto",
                              conf.profile_forced >= 0 ? "unset CURSOR_OAI_PROFILE to let "
                              "cursor-oai try the other one" : "the other profile is tried "
                              "next");
        }
        cJSON_Delete(j);
        coai_buf_free(&body);
    }
    transport_state.forced = saved_tr;
    return ok_run;
}

/* Wire: what Cursor sent on doctor's runs that this version does not know. */
static void doctor_wire(void)
{
    coai_buf w = { 0 };
    wn_describe(&w);
    coai_buf_putc(&w, 0);
    if (w.len > 1 && !w.err) {
        doctor_step("WARN", "wire", "Cursor sent things this version does not know: %s",
                    (const char *)w.data);
        doctor_advice("please report them: open an issue with this output and the file "
                      "`cursor-oai doctor --capture FILE` writes (it is redacted).");
    } else {
        doctor_step("OK", "wire", "nothing Cursor sent was unknown to this version");
    }
    coai_buf_free(&w);
}

/* Tools: did Cursor keep to the client's tools on doctor's runs (caller-owned tools)? */
static void doctor_tools(void)
{
    char th[300];
    if (th_describe(th, sizeof th)) {
        doctor_step("WARN", "tools", "%s", th);
        doctor_advice("Cursor's own tool calls still work (mapped to the client's tools, "
                      "as with CURSOR_OAI_TOOL_MODE=cursor); please report it with this "
                      "output.");
    } else {
        doctor_step("OK", "tools", "%s", th);
    }
}

/* The header names each transport's run carried (values are never shown). */
static void doctor_run_headers(void)
{
    int t;
    for (t = TR_H2; t >= TR_HTTP1; t--) {
        char names[sizeof run_head_names[0]];
        pthread_mutex_lock(&run_head_lock);
        memcpy(names, run_head_names[t], sizeof names);
        pthread_mutex_unlock(&run_head_lock);
        if (names[0])
            doctor_step("OK", t == TR_H2 ? "Run headers" : "RunSSE headers", "%s", names);
    }
}

/* The verdict line(s). The exit code: 0 a run worked, 1 none did. */
static int doctor_verdict(int ok_run, int ok_h2, int ok_h1)
{
    if (ok_run) {
        if (transport_state.forced == TR_H2)
            printf("Verdict: OK, Cursor answers through cursor-oai over HTTP/2 "
                   "(CURSOR_OAI_TRANSPORT=h2).\n");
        else
            printf("Verdict: OK, Cursor answers through cursor-oai: HTTP/2 %s, HTTP/1.1 %s "
                   "(transport profile %s); runs use %s.\n",
                   transport_state.forced == TR_HTTP1 ? "not tried" : ok_h2 ? "works" : "FAILED",
                   ok_h1 ? "works" : "FAILED", PROFILE_NAME[hosts.profile],
                   ok_h2 && transport_state.forced != TR_HTTP1 && tr_h2cfg_wants() != 1
                   ? "HTTP/2" : "HTTP/1.1");
        if (conf.profile_forced < 0 && hosts.profile == PROF_GRPCWEB && ok_h1)
            printf("         Only the grpc-web profile worked: CURSOR_OAI_PROFILE=grpc-web "
                   "skips the failing first try.\n");
    } else {
        printf("Verdict: FAILED, no run worked (see the advice above).\n");
    }
    return ok_run ? 0 : 1;
}

/* `cursor-oai doctor`: each step prints one OK/WARN/FAIL line, advice under a failure. */
static int run_doctor(int argc, char **argv)
{
    const char *model = "auto", *capture = NULL;
    int rc, ok_run, ok_h2 = 0, ok_h1 = 0;
    rc = doctor_args(argc, argv, &model, &capture);
    if (rc >= 0) return rc;
    if (doctor_setup(argc, argv) < 0) return 1;
    if (doctor_credentials() < 0) return 1;
    doctor_server_config();
    doctor_transport();
    doctor_models();
    if (transport_state.forced != TR_HTTP1) ok_h2 = doctor_run_h2(model);
    if (transport_state.forced == TR_H2) {
        ok_run = ok_h2;
    } else {
        ok_h1 = doctor_run_h1(model);
        ok_run = ok_h1 || ok_h2;
    }
    if (capture) doctor_capture(model, capture);
    doctor_wire();
    doctor_tools();
    doctor_run_headers();
    return doctor_verdict(ok_run, ok_h2, ok_h1);
}

static int run_usage(int argc, char **argv)
{
    coai_quota u;
    coai_error e;
    coai_buf out = { 0 };
    int json = 0, i, rc = 1;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) { json = 1; continue; }
        {
            int help = strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0;
            fputs(USAGE_HELP, help ? stdout : stderr);
            return help ? 0 : 2;
        }
    }
    if (cli_setup(1) < 0) return 1;
    if (cred_load() == CRED_NONE) {
        fprintf(stderr, "cursor-oai: not logged in; run 'cursor-oai login'\n");
        return 1;
    }
    if (usage_fetch(&u, &e) < 0) {
        fprintf(stderr, "cursor-oai: cannot read the usage: %s\n", e.message);
        return 1;
    }
    if (json ? coai_quota_write_json(&out, &u) : coai_quota_write_text(&out, &u, wall_ms())) {
        fprintf(stderr, "cursor-oai: out of memory\n");
    } else {
        fwrite(out.data, 1, out.len, stdout);
        if (json) putchar('\n');
        rc = 0;
    }
    coai_buf_free(&out);
    return rc;
}

/* The process-wide locks and condition variables; those waited on with a deadline on
 * CLOCK_MONOTONIC (cond_init_mono). Before anything else runs: 0 or -1. */
static int sync_init(void)
{
    pthread_mutex_init(&listener.lock, NULL);
    pthread_mutex_init(&up_pool.lock, NULL);
    pthread_mutex_init(&creds.lock, NULL);
    pthread_mutex_init(&models_cache.lock, NULL);
    pthread_mutex_init(&quotas.lock, NULL);
    pthread_mutex_init(&hosts.lock, NULL);
    pthread_cond_init(&creds.renewed, NULL);
    pthread_cond_init(&hosts.agent_h2_done, NULL);
    return cond_init_mono(&listener.idle) || cond_init_mono(&models_cache.fetched)
        || cond_init_mono(&log_queue.empty)
        || cond_init_mono(&tls_reuse.spare_cond) || cond_init_mono(&held_runs.cond) ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (sync_init() < 0) {
        fputs("cursor-oai: cannot set up a condition variable on the monotonic clock\n", stderr);
        return 1;
    }
    conf.profile_forced = -1;
    hosts.profile = PROF_CONNECT;       /* Connect first; grpc-web the fallback (issue 24 item 2) */
    listener.fd = -1;
    conf.log_level = LOG_INFO;
    creds.gen = 1;
    conf.models_ttl_ms = UP_MODELS_TTL_MS;
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) { print_version(); return 0; }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(USAGE, stdout);
        fputs("\n", stdout);
        serve_help(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return run_serve(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "login") == 0) return run_login(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "logout") == 0) return run_logout(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "status") == 0) return run_status(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "models") == 0) return run_models(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "doctor") == 0) return run_doctor(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "usage") == 0) return run_usage(argc - 2, argv + 2);
    fputs(USAGE, stderr);
    return 2;
}

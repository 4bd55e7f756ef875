/* cursor_oai.h - OpenAI Chat + Responses, Anthropic Messages, Gemini <-> Cursor's Agent backend. v0.3.0-dev
 *
 * Unofficial. Speaks Cursor's Agent protocol (Connect/gRPC-web framed protobuf, over
 * HTTP/1.1 as RunSSE + BidiAppend or over HTTP/2 as one Run stream) on one side and four
 * client APIs on the other: OpenAI Chat Completions (/v1/chat/completions), OpenAI
 * Responses (/v1/responses), Anthropic Messages (/v1/messages) and Gemini
 * (/v1beta/models/{model}:generateContent). No sockets in here: bytes in, bytes out.
 * server.c in the same repository is one program built on it.
 *
 * PARTS (in this order in the API half; search for "PART:NAME api" and "PART:NAME impl";
 * tests/header_test.py keeps this table true)
 *   COMMON     results, strings, coai_buf, JSON text, UUIDs, the version
 *   AUTH       access-token claims, browser login (PKCE), the credentials file's JSON
 *   QR         a QR code of the login URL, for logging in on a headless machine
 *   CONFIG     checks of values from flags, env and files (addresses, header values)
 *   FRAMING    Connect envelopes, trailers, the Connect end-stream, gRPC status text
 *   CHECKSUM   x-cursor-checksum, base64, hex, UUID and SHA-256 helpers
 *   ENCODE     what the client sends: the run request, BidiAppend, KV and exec replies
 *   DECODE     AgentServerMessage -> plain C events (coai_msg)
 *   HTTP       HTTP/1.1 request parser, chunked decoder, response parser, Host check
 *   H2         HTTP/2 client: frames, HPACK, one connection, sans-IO
 *   CORE       the dialect-neutral core: request, prompt, errors, models, the exec
 *              mapping every dialect shares, tool results, the reply engine (coai_reply)
 *   OPENAI     the OpenAI Chat Completions dialect: parser, writer, exec mapping
 *   QUOTA      Cursor's plan and current-period usage
 *   IMAGE      data: URLs, image type and size from the image's own header
 *   ANTHROPIC  the Anthropic Messages dialect: parser, writer, model names
 *   RESPONSES  the OpenAI Responses dialect: parser, exec mapping, writer
 *   GEMINI     the Gemini API dialect: parser, exec mapping, writer
 *   DIALECTS   the dialect table: one row per dialect holds every fact of its client API
 *   The implementation half has them in this order: COMMON AUTH QR CONFIG FRAMING CHECKSUM
 *   ENCODE DECODE HTTP H2 CORE OPENAI ANTHROPIC RESPONSES GEMINI DIALECTS QUOTA IMAGE.
 *
 * ENABLING THE IMPLEMENTATION
 *   In exactly one .c file:
 *       #define CURSOR_OAI_IMPLEMENTATION
 *       #include "cursor_oai.h"
 *   Everywhere else include it plainly. The API half needs only <stddef.h> and
 *   <stdint.h>. The implementation needs, on the include path and linked in:
 *     - cJSON 1.7.19+ (cJSON.c), compiled with -DCJSON_NESTING_LIMIT=64;
 *     - nanopb 0.4.9.1+ (pb_common.c, pb_encode.c, pb_decode.c) with -DPB_ENABLE_MALLOC
 *       -DPB_FIELD_32BIT (KV blobs and file contents exceed 64 KiB);
 *     - the generated proto/ files (agent.pb.c, aiserver.pb.c, google/rpc/status.pb.c,
 *       google/protobuf/struct.pb.c, google/protobuf/any.pb.c; put proto/ on the path),
 *       built with the same two -D flags;
 *     - BearSSL (bearssl.h; only its SHA-256 is used).
 *   Build line used by the tests:  cc -std=c99 -DPB_ENABLE_MALLOC -DPB_FIELD_32BIT
 *     -DCJSON_NESTING_LIMIT=64 -Iproto -I<nanopb> -I<cjson> -I<bearssl>/inc ...
 *
 * OPTIONS (define before the implementation; defaults shown)
 *   COAI_MAX_FRAME          16 MiB   largest envelope payload; checked before allocating
 *   COAI_FRAME_KEEP         64 KiB   frame buffer kept between frames (larger is freed)
 *   COAI_MAX_STATUS_DETAILS 16 KiB   decoded grpc-status-details-bin accepted
 *   COAI_MAX_VALUE_DEPTH    64       JSON/Value nesting, both directions
 *   COAI_MAX_PB_FIELDS      65536    fields in one decoded message
 *   COAI_MAX_KV_BYTES       64 MiB   per-run KV blob store
 *   COAI_MAX_TOOLS          512      tools per request
 *   COAI_MAX_MESSAGES       10000    messages per request, every dialect (-> 400)
 *   COAI_MAX_JSON_VALUES    500000   JSON values in a request body (-> 400; the caller
 *                                    checks coai_json_values before parsing)
 *   COAI_JSON_VALUE_COST    200      bytes a parsed JSON value costs at most (for budgets)
 *   COAI_MAX_IMAGE_BYTES    5 MiB    decoded bytes per image (-> 413; coai_image_limits)
 *   COAI_MAX_IMAGES         12       images per request (-> 400)
 *   COAI_MAX_IMAGES_BYTES   20 MiB   decoded image bytes per request (-> 413)
 *   COAI_HTTP_MAX_HEADERS   100      header lines (-> 431)
 *   COAI_HTTP_MAX_LINE      8 KiB    request line (-> 414) / header line (-> 431)
 *   COAI_HTTP_MAX_HEAD      32 KiB   whole request head (-> 431)
 *   COAI_HTTP_MAX_BODY      32 MiB   request body (-> 413; enforced by the caller)
 *   COAI_HPACK_TABLE        4096     HPACK dynamic table we allow (SETTINGS_HEADER_TABLE_SIZE)
 *   COAI_H2_MAX_HEADER_LIST 64 KiB   decoded response head (SETTINGS_MAX_HEADER_LIST_SIZE)
 *   COAI_H2_MAX_HEADER_BLOCK 256 KiB HEADERS + CONTINUATION bytes (-> ENHANCE_YOUR_CALM)
 *   COAI_H2_MAX_HEADER_WORK 1 MiB    bytes one header block may decode to, kept or not
 *   COAI_H2_MAX_OUTBOUND_ACK 1000    PING/SETTINGS acks queued and not yet written
 *   COAI_H2_MAX_EMPTY_FRAMES 1000    DATA frames in a row with no byte (these three: the
 *                                    connection ends with GOAWAY ENHANCE_YOUR_CALM)
 *   COAI_H2_MAX_STREAMS     256      streams one HTTP/2 connection tracks
 *   COAI_H2_STREAM_WINDOW   256 KiB  HTTP/2 receive window per stream
 *   (the HTTP/2 connection window defaults to streams x stream window: no stream's
 *   unread data ever holds back another's)
 *   Tests rebuild with small values to reach the edges.
 *
 * QUICK START 1: an OpenAI request body -> the BidiAppend body that starts a run
 *       coai_chat_request req; coai_error err; coai_run_params rp;
 *       coai_buf msg = {0}, body = {0};
 *       if (coai_chat_request_parse(&req, json, json_len, &err) != 0)
 *           return reply_json(err.status, &err);           // coai_error_write() it
 *       coai_chat_request_params(&req, &rp);                // prompt + tools
 *       rp.model_id = model; rp.message_id = uuid1; rp.conversation_id = uuid2;
 *       rp.workspace = cwd; rp.time_zone = tz;
 *       coai_encode_run_request(&msg, &rp);                 // AgentClientMessage
 *       coai_encode_bidi_append(&body, msg.data, msg.len, request_id, 0);
 *       // POST body to /aiserver.v1.BidiService/BidiAppend (seqno 0), after starting
 *       // POST coai_encode_run_body(request_id) to /agent.v1.AgentService/RunSSE.
 *
 * QUICK START 2: RunSSE response bytes -> OpenAI SSE
 *       coai_frame_decoder fd = {0}; coai_frame f; coai_msg m = {0}; coai_status st;
 *       coai_reply r; coai_reply_opts o = {0};
 *       coai_reply_opts_from_request(&o, &req);
 *       o.completion_id = id; o.created = now; o.model = model;
 *       o.send = send_append; o.send_user = ctx;           // KV/exec replies upstream
 *       coai_reply_init(&r, &o);
 *       while (n = read(...)) {                              // any split works
 *           while (n && coai_frame_feed(&fd, p, n, &used, &f) == COAI_OK) {
 *               p += used; n -= used;
 *               if (f.flags == COAI_FRAME_DATA && coai_msg_decode(&m, f.data, f.len) == 0)
 *                   rc = coai_reply_feed_msg(&r, &m);
 *               else if (f.flags == COAI_FRAME_TRAILER)
 *                   coai_trailer_parse(f.data, f.len, &st),
 *                   rc = coai_reply_feed_status(&r, &st);
 *               write(client, r.out.data, r.out.len); coai_buf_reset(&r.out);
 *           }
 *       }
 *   (examples/translate.c is a complete, compiled and tested version of 1 and 2.)
 *
 * QUICK START 3: the request headers
 *       char cs[COAI_CHECKSUM_SIZE];
 *       coai_checksum(cs, token, now_ms);                   // x-cursor-checksum
 *       coai_http_parse_request(buf, len, &rq, &status);    // strict HTTP/1.1 heads
 *       coai_http_host_allowed(rq.host, extra, n, port);    // DNS-rebinding guard
 *
 * DIALECTS (one core, several client APIs)
 *   A client API ("dialect": OpenAI Chat Completions, Anthropic Messages, ...) is three
 *   things: a parser (body -> coai_request, the dialect-neutral request: a conversation
 *   of coai_message with roles SYSTEM / USER / ASSISTANT / TOOL, text / image / thinking
 *   parts, earlier tool calls (coai_call) and tool results with is_error; tools with
 *   their schemas; model, stream flag, tool_choice, limits), a writer (the reply's event
 *   sequence - begin, text and reasoning deltas, a tool call, the end with a coai_finish
 *   and coai_usage, an error, keepalives - spelled the dialect's way), and a route in
 *   server.c. Everything in between is the core and is written once: the prompt,
 *   the run request, the KV store, exec -> tool mapping, the commit rule, the error
 *   classification and usage.
 *       coai_request_parse(&req, COAI_DIALECT_ANTHROPIC, body, n, &err);  // parser
 *       coai_request_params(&req, &rp);                                  // core
 *       coai_reply_opts_from_request(&o, &req);     // o.dialect selects the writer
 *       coai_reply_init(&r, &o); ... feed it as in QUICK START 2 ...
 *       // errors before any reply: status coai_error_status_as(&err, req.dialect),
 *       // body coai_error_write_as(&b, &err, req.dialect)
 *   The dialect table (PART:DIALECTS) holds every fact of a dialect, one row each: its
 *   name (logs, metrics), the reply id's prefix and length, the header and query parameter
 *   its clients send the API key in, a header only its clients send (its error shape then
 *   holds on any route), whether the model and stream mode are in the URL, whether a wrong
 *   method is a 404, whether replies are stored, which model names its clients use; and
 *   its functions: parser, writer, exec mapping, URL parser, count-tokens parser, models
 *   writer and 404, error body and status. coai_dialect_get() gives the data;
 *   coai_dialect_parse, coai_dialect_count_tokens, coai_dialect_models_write,
 *   coai_dialect_model_find, coai_error_write_as and coai_error_status_as use the
 *   functions (NULL: as OpenAI Chat Completions, or "none"). A server routes requests to
 *   dialects by path (server.c: ROUTE_TABLE, one row per route: method, path, dialect,
 *   handler, auth rule, help text) and asks the table the rest.
 *   Adding a dialect is a COAI_DIALECT_* value, one row, and the dialect's own part (a
 *   parser that validates the body, fills the neutral fields and ends with
 *   coai__request_finish(), and a coai__writer: init, begin, delta, tool_call, end, body,
 *   error, keepalive); then, in a server, one ROUTE_TABLE row per path. A complete toy
 *   fifth dialect, as it goes at the three "ADD-DIALECT" marks of this header
 *   (tests/header_test.py puts it there in a copy, compiles it and runs a request through
 *   it): {"model": "...", "prompt": "..."} asks, the reply is the answer's text.
 *   [ADD-DIALECT enum]
 *       COAI_DIALECT_PLAIN = 4,
 *   [ADD-DIALECT row]
 *       { { "plain", "txt-", 24, NULL, NULL, NULL, 0, 0, 0, COAI_MODEL_NAMES_CURSOR },
 *         coai__pl_parse, &coai__pl_writer, NULL, NULL, NULL, NULL, "prompt", NULL,
 *         NULL, NULL, NULL, NULL },
 *   [ADD-DIALECT part]
 *       static int coai__pl_parse(coai_request *req, const char *body, size_t n,
 *                                 coai_error *err)
 *       {
 *           cJSON *root;
 *           const cJSON *p, *m;
 *           coai_message *msg;
 *           coai_part *part;
 *           int rc;
 *           memset(req, 0, sizeof *req);
 *           if ((rc = coai__json_body(body, n, &root, err)) != 0) return rc;
 *           req->root_ = root;
 *           req->thinking = -1;                         // not given
 *           p = coai__core_get(root, "prompt");
 *           m = coai__core_get(root, "model");
 *           if (!cJSON_IsString(p) || !p->valuestring[0]) {
 *               coai_error_set(err, 400, "invalid_request_error", NULL, "prompt",
 *                              "prompt: required (a non-empty string)");
 *               coai_request_free(req);
 *               return COAI_ERR_INVALID;
 *           }
 *           req->model = cJSON_IsString(m) && m->valuestring[0] ? coai__core_jstr(m)
 *                                                               : coai_str_c("auto");
 *           msg = (coai_message *)coai__req_alloc(req, sizeof *msg);
 *           part = (coai_part *)coai__req_alloc(req, sizeof *part);
 *           if (msg && part) {
 *               part->kind = COAI_PART_TEXT;
 *               part->text = coai__core_jstr(p);
 *               msg->role = COAI_ROLE_USER;
 *               msg->parts = part;
 *               msg->part_count = 1;
 *               req->messages = msg;
 *               req->message_count = 1;
 *               if (coai__request_finish(req) == 0) return 0;
 *           }
 *           coai_request_free(req);
 *           coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
 *           return COAI_ERR_NOMEM;
 *       }
 *       static void coai__pl_w_none(coai_reply *r) { (void)r; }
 *       static void coai__pl_w_delta(coai_reply *r, int ch, const char *s, size_t n)
 *       {
 *           if (!ch) coai_buf_append(&r->out, s, n);    // the reasoning is not shown
 *       }
 *       static void coai__pl_w_end(coai_reply *r, coai_finish f)
 *       {
 *           (void)f;
 *           coai_buf_putc(&r->out, '\n');
 *       }
 *       static void coai__pl_w_body(coai_reply *r, coai_finish f)
 *       {
 *           (void)f;
 *           if (r->content_.len) coai_buf_append(&r->out, r->content_.data, r->content_.len);
 *           coai_buf_putc(&r->out, '\n');
 *       }
 *       static void coai__pl_w_error(coai_reply *r)
 *       {
 *           coai_buf_printf(&r->out, "\nerror: %s\n", r->error.message);
 *       }
 *       static const coai__writer coai__pl_writer = {
 *           coai__pl_w_none, coai__pl_w_none, coai__pl_w_delta, coai__pl_w_none,
 *           coai__pl_w_end, coai__pl_w_body, coai__pl_w_error, coai__pl_w_none
 *       };
 *   [ADD-DIALECT end]
 *   The OpenAI Chat Completions names (coai_chat_request_*, coai_error_write,
 *   coai_prompt_build) are that dialect's parser and wrappers, kept as they were.
 *   The OpenAI Responses dialect (PART:RESPONSES) has two extras around that pattern:
 *   coai_responses_request_parse() takes the stored items of previous_response_id and
 *   returns the items and echoed fields the caller keeps for store:true, and
 *   coai_responses_exec_map() maps execs onto Codex's tools (exec_command, apply_patch)
 *   before falling back to coai_exec_map(); coai_reply_response() and
 *   coai_reply_output_items() give the caller the finished response to store.
 *   Worked example, the fourth dialect: the Gemini API (PART:GEMINI, what Gemini CLI
 *   speaks). 1. COAI_DIALECT_GEMINI. 2. The parser coai_gemini_parse(): contents/parts ->
 *   coai_message (text, thought -> THINKING, inlineData -> IMAGE, functionCall -> coai_call,
 *   functionResponse -> a TOOL message), systemInstruction -> SYSTEM, functionDeclarations
 *   -> coai_tool, toolConfig -> tool_choice, generationConfig -> max_tokens / stop /
 *   thinking / response_json, then coai__request_finish(). 3. The writer coai__gm_writer:
 *   each delta one GenerateContentResponse chunk, the function calls and finishReason in
 *   the last one, usageMetadata from coai_reply_usage(). 4. The exec mapping
 *   coai_gemini_exec_map() (run_shell_command's dir_path, grep_search's include_pattern,
 *   then coai_anthropic_exec_map's shell fallbacks). 5. The table row (url_model: the
 *   URL parser coai_gemini_parse takes the model and stream mode; key_header
 *   x-goog-api-key and key_query "key"; the count-tokens parser; models writer and 404;
 *   Google's error shape) and the routes (server.c ROUTE_TABLE:
 *   /v1beta/models/{model}:generateContent ...). What the core gained for it: a third
 *   stream framing (coai_reply_opts.stream = 2: a JSON array; coai_reply_head). Gemini CLI's own result
 *   layout (its shell result: output and exit code) is one more entry of the client
 *   layouts coai_exec_outcome_parse reads, as for every client. The commit rule, KV store,
 *   held runs, prompt and usage were reused untouched.
 *
 * HTTP/2 (PART:H2)
 *   A client connection (RFC 9113) with HPACK (RFC 7541), sans-IO like the rest: the caller
 *   owns the socket and TLS (ALPN "h2"), this part owns the protocol.
 *       coai_h2_init(c, &opts);                  // preface + SETTINGS queued
 *       id = coai_h2_open(c, hdrs, n, 0, run);   // a stream: HEADERS queued
 *       coai_h2_send_data(c, id, p, n, end, &sent);  // as much as the windows allow
 *       write(coai_h2_want_write(c, &p) bytes at p); coai_h2_wrote(c, written);
 *       coai_h2_feed(c, received, n);
 *       while (coai_h2_next(c, &ev) == COAI_OK)  // HEADERS (status, trailers), DATA,
 *           ...;                                 // RESET, REFUSED, WINDOW, GOAWAY, PING_ACK
 *       coai_h2_consumed(c, id, n);              // window back once DATA was used
 *   Flow control both ways, SETTINGS, PING answers, RST_STREAM, GOAWAY (higher streams
 *   reported as refused, to retry elsewhere) and every protocol check are inside; a
 *   connection error queues its GOAWAY and returns COAI_ERR_H2. The PART's opening comment
 *   has the whole loop. coai_hpack_decode / coai_hpack_encode work on their own too. The
 *   connection never allocates except its byte buffers (input, output, one header block,
 *   one decoded list): the stream table and the HPACK table are fixed arrays inside it.
 *
 * CONVENTIONS
 *   - coai_result: 0 is success, COAI_MORE (1) "feed me more", COAI_DONE (2) "finished";
 *     errors are negative; coai_result_str() names each. Functions documented as
 *     returning int use 0 / -1 unless they say otherwise.
 *   - Lengths are size_t. Strings are coai_str {ptr,len} views, never NUL-reliant;
 *     a view's comment says which buffer it points into and how long it lives.
 *   - Zero-initialised structs are valid empty states (decoders, buffers, options).
 *   - Public names coai_noun_verb, macros COAI_*, private helpers coai__* (static).
 *
 * MEMORY
 *   Output goes into coai_buf (a growable heap buffer with an optional cap, `max`;
 *   on failure it remembers the error and ignores later appends). Objects that own
 *   memory have a _free: coai_buf_free, coai_frame_decoder_free, coai_msg_free,
 *   coai_request_free (= coai_chat_request_free), coai_models_free, coai_reply_free,
 *   coai_creds_free, coai_h2_free, coai_hpack_list_free.
 *   Decoders never allocate a length read from the wire before checking it.
 *
 * ERRORS
 *   Parsers return a negative coai_result and never assert on input. Stateful
 *   decoders (coai_frame_decoder, coai_chunked_decoder, coai_hpack_decoder, coai_h2_conn)
 *   keep their first error until reset (an HTTP/2 connection: until it is freed).
 *   Upstream failures become coai_status (trailers, end-stream) and then a coai_error
 *   (see the ERROR MAPPING table in the CORE section), which each dialect
 *   writes in its own shape and status (coai_error_write_as, coai_error_status_as).
 *
 * TRUST MODEL
 *   Untrusted: every byte from the network, both from clients (HTTP heads, bodies,
 *   JSON) and from the upstream (HTTP/2 frames and HPACK, envelopes, protobuf,
 *   trailers, JSON). For those we promise: no out-of-bounds access, no unbounded
 *   allocation (caps above), no recursion deeper than COAI_MAX_VALUE_DEPTH (nanopb is
 *   never handed a recursive type), valid UTF-8 in everything we emit (invalid input
 *   bytes become U+FFFD), and a result code instead of a crash. Every parser has a
 *   libFuzzer target in tests/fuzz/. Trusted: the caller's arguments (NULL where not
 *   allowed is a bug).
 *   Nothing in here executes anything: exec requests become tool calls or refusals.
 *   What a hostile upstream can make the client do through them: what its exec asks, with
 *   the client's own tools, under the client's own permissions. Where we write a command
 *   for a client's shell tool ourselves (ls, grep, rg, find, cat, wc + rm, mkdir/printf/
 *   base64, the split write's script), Cursor's paths, patterns, globs and contents reach
 *   it only through one quoting layer (coai__sh_arg, coai__sh_opt, coai__sh_path): one
 *   single-quoted word each, exactly its bytes; a path one literal path (-- where the
 *   program takes it, ./ before a relative path starting with - ( ) ! , so find too reads
 *   it as a path), a pattern only as an option's argument, a NUL refused (tc->refusal). So
 *   a generated command does the one operation it names on that one path, nothing else;
 *   each stays under 128 KiB (a bigger write: 64 KiB parts). apply_patch never gets a path
 *   or content its grammar could read as more (line breaks, control bytes, white space at
 *   either end, a directive's start; CR in content): the shell, or a refusal. A split
 *   write's staging directory is named with the caller's random salt, refused when it is
 *   a symlink, no directory or not the user's own; parts are written with noclobber and
 *   the joined file must be a regular file with the content's cksum before it replaces the
 *   target. Paths are not confined to the workspace (../x is honoured): the client runs
 *   its tools in its own permission model, and the proxy runs nothing on its own host.
 *
 *   HTTP/2 bounds against a hostile server (PART:H2, FLOODS): more than 1000 PING/SETTINGS
 *   acks it has not read, 1000 empty DATA frames in a row, or a header block decoding to
 *   over 1 MiB ends the connection with GOAWAY ENHANCE_YOUR_CALM, and past the header list
 *   limit no field is copied; the caller stops reading while a connection has more than
 *   64 KiB to write (server.c), so a flood that is never read costs about that much.
 *
 * THREADS
 *   No global mutable state of ours: separate objects may be used from separate
 *   threads. Caveats from dependencies: cJSON records its last parse error in a
 *   global (harmless, never read here); coai_checksum_bucket() follows TZ via
 *   localtime_r, so change TZ only before starting threads.
 *
 * WIRE AND DIALECT NOTES (what server.c and this header send Cursor, and why)
 *   These notes were the README's protocol sections; a user of the proxy does not need them,
 *   a developer changing the wire does. Field and kind numbers are agent.proto's.
 *
 *   Client version. x-cursor-client-version is the same on every call: CURSOR_CLIENT_VERSION
 *   when set; else cli-<newest build> of an installed cursor-agent
 *   (~/.local/share/cursor-agent/versions/<build>) when it is newer than the built-in
 *   cli-2026.10.01-e373342; else the built-in one. Build ids of every form cursor-agent has
 *   used are read (2026.10.01-e373342, 2026.06.12-01-15-52-7244546, either with -lab); a bare
 *   build id gets the cli- prefix. Cursor answers a build it thinks too old with "Update
 *   Required" (also as resource_exhausted, or permission_denied naming the version): the
 *   outdated_client error, never a rate limit.
 *
 *   Two transports. HTTP/2 (the default, as cursor-agent): a run is one
 *   agent.v1.AgentService/Run stream (Connect bidi, application/connect+proto) to the agent
 *   host GetServerConfig names (*.api5.cursor.sh live, HTTP/2 only). The run request, tool
 *   results, KV answers and heartbeats are messages on the request body; Cursor's messages
 *   come back on the response body. Runs to one host share one TLS connection (ALPN h2) up to
 *   the server's SETTINGS_MAX_CONCURRENT_STREAMS, then a second one opens; after a GOAWAY new
 *   runs take a new connection while the old one finishes its streams; an idle connection is
 *   PINGed every 20 s and dropped when no answer comes. HTTP/1.1 (cursor-agent's
 *   useHttp1ForAgent): RunSSE plus one BidiAppend request per message, to CURSOR_API_URL
 *   (api2.cursor.sh serves the agent service over HTTP/1.1), never to the HTTP/2-only host.
 *   Which one: CURSOR_OAI_TRANSPORT when set; else GetServerConfig's http2_config (field 7),
 *   as Cursor's own SDK obeys it: FORCE_ALL_DISABLED and FORCE_BIDI_DISABLED -> HTTP/1.1;
 *   FORCE_ALL_ENABLED and FORCE_BIDI_ENABLED -> HTTP/2 with no fallback; anything else
 *   (unspecified, absent, unknown, or CURSOR_OAI_AGENT_URL set so GetServerConfig is not
 *   asked) -> HTTP/2 with the fallback. The log says when the value changes; doctor's
 *   transport line and the status page say what decided ("(server config
 *   http2_config=FORCE_ALL_DISABLED)", "(CURSOR_OAI_TRANSPORT)", "(default)").
 *   Fallback: an HTTP/2 failure before a byte reached the client (no h2 in ALPN, GOAWAY or
 *   RST_STREAM at the start, HTTP 464, a connection error) retries the request over HTTP/1.1.
 *   RST_STREAM or GOAWAY with HTTP_1_1_REQUIRED (met from Cursor by another client, treated
 *   like a 464) goes there at once, without the second HTTP/2 try on a new connection that a
 *   refused stream gets. Runs then stay on HTTP/1.1 for CURSOR_OAI_H2_REPROBE seconds (600:
 *   what breaks HTTP/2, a proxy or a middlebox, rarely changes sooner, and each try costs a
 *   failing run one more connect). After the first byte nothing is retried.
 *
 *   HTTP/1.1 hosts. CURSOR_OAI_AGENT_URL forces the run host. A host that refuses HTTP/1.1 at
 *   the connection level (400 "illegal request line", a close before any byte, HTTP/2 frames
 *   in answer, or a 464 from a host other than CURSOR_API_URL: Cursor's load balancer answers
 *   HTTP/1.1 on an HTTP/2-only route so) has the run retried on CURSOR_API_URL before the
 *   client saw a byte, and is remembered as HTTP/2-only for CURSOR_OAI_H2ONLY_REPROBE seconds
 *   (600; the fallback kind http2_only_host). The live HTTP/2-only hosts stay so, and each try
 *   costs one refused connect; a refusal that was a moment's trouble gets its runs back
 *   without a restart. When CURSOR_API_URL itself refuses: 502 upstream_http2_only. A host
 *   that accepts a run and closes it at once with no answer (a wrong region's) is a 502
 *   upstream_wrong_region, never an empty answer.
 *
 *   Start order (HTTP/1.1). The run request (BidiAppend seqno 0) goes out only after the
 *   RunSSE response head has arrived: Cursor loses an append that comes before its run is
 *   registered.
 *
 *   Transport profiles (HTTP/1.1). connect, what every 2026 client and cursor-agent send, is
 *   the default: RunSSE as application/connect+proto with connect-protocol-version: 1,
 *   BidiAppend as application/proto, no x-cursor-checksum (the CLI sends none; the live server
 *   accepts that). grpc-web (application/grpc-web+proto on both calls, with
 *   x-cursor-checksum; what the protocol vectors fix byte for byte) is the fallback. Outgoing
 *   frames are never compressed (Cursor ignores a compressed one and the turn parks). Only an
 *   answer that means "wrong profile" switches: HTTP 415, 464 from CURSOR_API_URL, or an
 *   outdated-client answer naming the content type or protocol, before the client saw a
 *   byte; the run is retried once with the other profile, which is then used from then on.
 *   An ordinary error (retired model, usage limit, 5xx, outdated version) is answered from
 *   the one run. CURSOR_OAI_PROFILE forces one profile with no fallback.
 *   CURSOR_OAI_CONNECT_APPEND=json sends the Connect BidiAppend as Connect JSON,
 *   {"data":hex,"requestId":{...},"appendSeqno":"N"} with application/json, as one peer does.
 *
 *   Run headers, as cursor-agent sends them (names captured from CLI 2026.08.11):
 *   x-blob-encryption-key (32 random bytes as hex, one per process) and x-original-request-id
 *   (the first attempt's id, kept when a run is retried with another profile, host or
 *   transport) on Run, RunSSE and BidiAppend; x-cursor-streaming: true on RunSSE only; no
 *   connect-accept-encoding (compressed frames are not read); no te. The HTTP/2 Run set is
 *   authorization, content-type, user-agent, connect-protocol-version,
 *   x-cursor-client-version, x-cursor-client-type, x-ghost-mode, x-request-id,
 *   x-original-request-id, x-blob-encryption-key. The grpc-web profile keeps the original
 *   client's set.
 *
 *   Heartbeats and seqnos. While a run is open: client_heartbeat every 5 s (the first 5 s after
 *   the start) and, while the client runs a tool, an exec heartbeat per pending call every 3 s,
 *   as the current CLI does. They go out from their own thread and never hold up an answer.
 *   Every message to Cursor (replies, results, heartbeats) takes the next append_seqno, so the
 *   sequence is 0, 1, 2, ... whatever the mix. On a held run a heartbeat is its own append: one
 *   that hangs holds up neither results nor answers; a failed one is retried after 5, 10, 20,
 *   then every 40 s; three failures in a row release the run.
 *
 *   Turn end and silence. turn_ended ends the client's response even when Cursor keeps the
 *   stream open. Cursor sends a heartbeat about every 10 s. No frame at all for
 *   CURSOR_OAI_SILENCE_TIMEOUT, or only heartbeats and checkpoints for
 *   CURSOR_OAI_HEARTBEAT_TIMEOUT, fails the run with 504 upstream_timeout naming the bound.
 *
 *   What Cursor asks, answered in kind (nothing runs on the proxy's host). An exec no client
 *   tool matches gets what the CLI sends for one it cannot run: throw{id, error} then
 *   stream_close{id} (Cursor reads the error and goes on; an unanswered exec leaves the turn
 *   waiting on heartbeats); the throw names the exec kind where known (pi_read_args ...
 *   mini_swe_agent_bash_args, 44-54). request_context gets the workspace, OS, shell and time
 *   zone, then stream_close. The MCP-state question (exec 36, asked by Grok models since
 *   September 2026 before a tool call) gets the client's tools as one MCP server,
 *   "cursor-tools", status ready (a refusal leaves the tools "unavailable"). Precheck execs
 *   carry allowlisted (an empty result means no): MCP (42) and web fetch (43) yes, shell (41)
 *   no. A subagent request (exec 28) gets a typed SubagentError (a throw broke other clients'
 *   turns). Interaction queries get a response of their own kind, typed where the schema has
 *   an outcome: hosted web fetch (9) approved (Cursor fetches on its own servers), PR
 *   management (10), MCP authorisation (11) and SCM connection (14) rejected, environment
 *   replacement (13) failure, each with a reason a model can read, VM set-up (8) success, the
 *   others (web search, ask-question, mode switch, Exa search and fetch, create-plan, image
 *   generation) an empty response at once. KV requests are answered as the CLI answers them:
 *   a set_blob without data is acknowledged; a get_blob whose key is not a 32-byte digest gets
 *   the key back as its data; a blob this process does not have is "not found", not empty.
 *
 *   Errors seen live that need more than a status. "parse binary: invalid end group tag"
 *   (Cursor could not read a tool schema) is a 400 invalid_tool_schema naming the tool when
 *   the request tells which (its only tool, or the only one using $ref, anyOf and the like),
 *   else "one of the N tool schemas". "Conversation state is required" gets the run sent once
 *   more with ConversationStateStructure.mode (field 10) = AGENT, then a 502
 *   conversation_state_required. "Conversation data missing" / "blob missing": replayed once
 *   as a new conversation, then 502 conversation_lost. A bare resource_exhausted is judged by
 *   the request's size at 4 characters a token: under 16k model_not_available, 100k and over
 *   context_length_exceeded, between upstream_resource_exhausted. grpc-status 3 with
 *   ERROR_DEPRECATED is a retired model: 404 model_not_found at once, not retried.
 *
 *   Conversation state and memory. A run request carries an empty state and the flattened
 *   conversation (mode AGENT after the error above), or, when the conversation resumes, Cursor's
 *   own checkpoint; structured turns are never built here (Cursor resets a large structured
 *   history sent without a checkpoint, and peers disagree on how to build one). After a final
 *   answer server.c keeps the latest conversation_checkpoint_update, the conversation_id and
 *   the KV blobs the run stored, keyed by the digest of the history the client will send next
 *   (its messages plus the answer; thinking left out, since clients differ in echoing it). A
 *   request that extends it by user messages only starts with that checkpoint as
 *   conversation_state, the same conversation_id, the blobs as pre_fetched_blobs (and served on
 *   get_blob), and only the new messages as the user message. The lookup digests the history
 *   up to its last message that is not a user's, once, and compares only the remembered keys
 *   under the lock. Bounds: 256 conversations, 256 MiB, 30 minutes each, memory only. A
 *   resumed run that fails before the client saw a byte (checkpoint rejected, a blob asked for
 *   that is not here) is replayed flattened.
 *
 *   Held runs on the wire. Each tool result goes back the way the CLI sends it: a shell as a
 *   stream (start, output, exit, stream_close); shell, read, write, ls and grep as their typed
 *   results; an MCP tool as mcp_result; each followed by stream_close, with Cursor's own exec
 *   ids. A result with images goes as McpImageContent items after its text (MCP tools only;
 *   Cursor's read/shell/ls/grep results have no place for an image, so such a turn starts a
 *   fresh run). No peer has recorded the model seeing an McpImageContent image live.
 *
 *   Images on the wire. Raw bytes in UserMessage.selected_context.selected_images, the type read
 *   from the bytes, width and height from the header when cheap, an id derived from the bytes
 *   (the same image, the same id, every time). A run request with images sets
 *   client_supports_inline_images: Cursor ignores inline image data without it. Only the
 *   current turn's images are sent: re-sending old ones made Cursor answer "Image not found".
 *   Cursor seems to cap one user message near 1 MiB (a peer's live observation). Tool results
 *   sent with no user message at all (a Responses client may) are all current turn: their
 *   images are checked too, and stay text markers in the prompt.
 *
 *   Request-field emulation (the core, every dialect). response_format / text.format JSON: the
 *   prompt asks for one JSON object (with the schema); without streaming the answer is checked
 *   (``` fences removed; an object with the schema's top-level required members), else 502
 *   invalid_json_output; streams are not checked; a text.format whose type is not text,
 *   json_object or json_schema is 400 invalid_value, as OpenAI answers. Stop sequences: text
 *   that could still become a match is held back across deltas. Token limits: output (text and
 *   reasoning) is cut when Cursor's count, else 4 UTF-16 units a token, reaches the limit;
 *   usage reports the limit; of max_tokens and max_completion_tokens the smaller counts.
 *   Prompt size: a conversation flattening to more than CURSOR_OAI_MAX_PROMPT_BYTES is a 400
 *   context_length_exceeded naming both sizes, on which Codex and OpenCode compact their
 *   history.
 *
 *   Token counts. Cursor ends a turn with input, output, cache read, cache write and reasoning
 *   counts; its input already contains the cache read, as OpenAI counts it (the two live
 *   TurnEndedUpdates published as test data: input 11,490 with cache read 11,392; input
 *   24,034 with cache read 20,014). So OpenAI chat prompt_tokens, Responses input_tokens and
 *   Gemini promptTokenCount are Cursor's input, the cached_tokens / cachedContentTokenCount
 *   its cache read; Anthropic input_tokens is input - cache read - cache write (never below 0),
 *   with cache_read_input_tokens and cache_creation_input_tokens beside it (for the first frame:
 *   11,490 and 11,392 against Anthropic 98). Adding the cache on top of the input, as an earlier
 *   version did, doubled what Claude Code and Codex thought their context held, and they
 *   compacted far too early. Reasoning counts as output. A cache read larger than the input is
 *   passed on as it came, logged once. A turn without counts (one ending in a tool call, an
 *   older server) is estimated: Cursor's running count or the checkpoint's, else 4 characters
 *   a token, with no *_details in OpenAI chat usage.
 *
 *   Client result layouts (coai_exec_outcome_parse). A result goes to Cursor in the fields its
 *   CLI fills: a read as the file's bytes with total_lines and file_size; a shell as stdout,
 *   stderr and the exit code. Each layout is read only for the tool that writes it and only
 *   when all of it matches.
 *     Codex exec_command: "Chunk ID / Wall time / Process exited with code N / Original token
 *       count / Output:" -> exit N, output as stdout (stderr merged by Codex); a read, ls or
 *       grep run as cat / ls / rg: the output as content, non-zero an error (grep's 1 with no
 *       output: no matches); "Process running with session ID": output, no code; a write whose
 *       result is not in this layout ("exec_command failed: ...") is a failed write, its text
 *       (cut to 4 KiB) the error. Codex shell and apply_patch: "Exit code: N / Wall time /
 *       Output:", the same (a failed patch is a failed write). The calls of one split write: one
 *       write result once all have answered: lines_created / file_size of Cursor's content
 *       when every call exited 0, else the first failing call's output (no exit 0 - refused,
 *       still running - is a failure).
 *     Claude Code Read: "1<TAB>line" (older "     1<TAB>line", "1->line" with an arrow) -> the
 *       lines without numbers; the empty-file notice -> empty content; lines it cut at 2000
 *       characters stay cut. Bash: success is the output without its trailing newline; is_error
 *       "Exit code N\n..." -> exit N; stdout and stderr merged; an error without that line (a
 *       timeout) -> exit 1, the text as stderr.
 *     Qwen Code run_shell_command: "Command / Directory / Output / Error / Exit Code / Signal /
 *       Process Group PGID" -> exit N (none when signalled), output as stdout, a spawn Error as
 *       stderr. read_file: as it is; "File not found: <path>" is a read error.
 *     Gemini CLI run_shell_command: "<untrusted_context> Output / [Error] / [Exit Code: N] /
 *       [Signal] / [Background PIDs] / Process Group PGID </untrusted_context>" (the code line
 *       only when non-zero) -> exit N or 0, output as stdout (its pseudo-terminal merges
 *       stderr); Error, Signal or "Command was (automatically) cancelled" -> failure, exit 1,
 *       the text as stderr. read_file: as it is, with its truncation notice.
 *     OpenCode and Kilo Code read: "<path> <type>file</type> <content> 1: ... (End of file -
 *       total N lines)" -> the lines, each ending in a newline, total_lines N; "Showing lines"
 *       footers mark it truncated. bash: the output has no exit code, so Cursor's command goes
 *       to that bash (known by its workdir parameter) after
 *       exec 2>&1; trap 'printf "\n[exit code: %d]\n" "$?"' EXIT
 *       and the last line gives the code; without it (output cut, the command's own trap):
 *       success with the text.
 *     Any client, Cursor's delete through its shell: wc -c < PATH && rm -- PATH -> a
 *       delete_result with the size wc printed, or the shell's failure. Cursor's turn stalls on
 *       a success whose file_size is 0 (on the wire the same as a success without one), so an
 *       empty file, or a result with no size (Qwen Code once lost a command's output), goes as
 *       the delete's error with a sentence saying the file was deleted (empty, or its size not
 *       reported) or, for an empty result, that the delete is not confirmed.
 *     Any client, write / Write / write_file: lines_created / file_size of Cursor's content;
 *       errors only where the client marks them (is_error).
 *     Any other shell tool (the generic rule): a first or last line that is only an exit-code
 *       phrase - Exit code: 3, Exit code 3, [exit code: 3], <exit_code>3</exit_code>, Process
 *       exited with code 3, exited with status 3, return code: 3, returncode=3, (exit 3),
 *       {"exit_code": 3}, The exit code is 3; any case, _ - or camelCase spellings - is the
 *       code, and the line (with the newline before it) is removed; the last line is tried
 *       first. So is a whole result that is one JSON object with an integer exit_code (exitCode,
 *       exit_status, returncode, return_code) and string output / stdout (and stderr). Never a
 *       middle line, a line with other words ("exited with code 0 in CI", "exit code: 3
 *       (SIGQUIT)"), or a bare "exit 3" / "rc 3" outside brackets. Output whose own last line
 *       is such a phrase (cat build.log) is taken as the code. Anything else: the text as it
 *       is, exit 0 (stderr when is_error).
 *
 *   Codex writes (coai_responses_exec_map). Codex offers apply_patch only for model names it
 *   knows; writes then go as "*** Add File:" with the whole content, deletes as "*** Delete
 *   File:". A path apply_patch could read as more than one path (a line break or other control
 *   character, white space at either end, a start like *** or @@) or content with a CR or
 *   another line separator never goes into a patch: the shell instead, else a refusal saying
 *   why. Through the shell: printf '%s' '<content>' > '<path>' (content with a NUL as base64
 *   through base64 -d). Linux takes at most 128 KiB in one argument: the array-form shell tool
 *   gets a bigger file as several arguments of at most 96 KiB after the script
 *   (printf '%s' "$@" > '<path>'); exec_command and shell_command take one string, so a write
 *   over about 96 KiB becomes several calls in one response, each carrying 64 KiB of content
 *   as base64 (a command of about 86 KiB with bash -lc around it) decoded into a staging
 *   directory beside the target, .cursor-oai-write-<salt><hash>-<n>, the salt 8 random bytes
 *   drawn per response. The call that finds every part joins them, renames the file onto the
 *   target and removes the directory, so the target is never half-written. A failing call
 *   marks the set failed; later calls fail without writing, and the last removes the
 *   directory (a call Codex never runs leaves the others' parts). A staging path that is a
 *   symlink, not a directory or not the user's is refused before anything is written; parts
 *   are written with noclobber (set -C); the joined file must be a regular file with the POSIX
 *   cksum and size of the whole content before the rename. Codex refuses rm -f / rm -r, so the
 *   scripts remove parts one by one with rm -- and rmdir. A delete of a missing file is an
 *   error, as Cursor's own delete reports it; a delete Codex refused to run is a failed
 *   delete, never a success. Tested with the real Codex writing
 *   249 KiB through four exec_command calls (agents_test task big) and a delete (task del).
 *   Codex shell mapping: exec_command {cmd, workdir} (current), shell_command {command} or
 *   shell {command: ["bash", "-lc", cmd]} (older); reads, listings and searches use a
 *   dedicated tool when offered, else cat -- '<path>', ls -la -- '<path>',
 *   rg -n -e '<pattern>' [--glob='<glob>'] -- '<path>', rg --files --glob='<glob>'. A workdir
 *   is passed only when Cursor names a directory other than the proxy's workspace.
 *   Remote compaction (Codex with model_provider "openai" pointed at the proxy): a request
 *   whose input ends in a compaction_trigger item is run with a summary request appended as
 *   the last user message and no tools; the answer's text is the one compaction item's
 *   encrypted_content, plain text after the line "cursor-oai compaction summary v1" (Cursor
 *   has nothing to encrypt it with). Sent back, it reaches Cursor as a user message "Summary of
 *   the conversation so far ...". A compaction item written by another server is a 400. POST
 *   /v1/responses/compact does the same run and answers {"object": "response.compaction",
 *   "output": [the item], "usage": ...} (OpenAI also keeps the user messages in output; the
 *   summary covers them).
 *
 *   Responses dialect (PART:RESPONSES). Read: instructions; input as a string or items
 *   (message with input_text / output_text / refusal / input_image parts; function_call,
 *   function_call_output, custom_tool_call, custom_tool_call_output, reasoning items sent back,
 *   which stay reasoning and are not prompt); tools (function and custom tools: a custom tool
 *   goes to Cursor as a function with one string "input", its calls come back as
 *   custom_tool_call items); tool_choice; parallel_tool_calls (a boolean, not used);
 *   reasoning; include; store; max_output_tokens; metadata (echoed); prompt_cache_key;
 *   sampling fields accepted, unused. The response echoes tools, tool_choice and
 *   parallel_tool_calls as sent (OpenAI's defaults [], "auto", true otherwise). Stream:
 *   event:/data: pairs with sequence_number - response.created, response.in_progress,
 *   response.output_item.added/.done, response.content_part.added/.done,
 *   response.output_text.delta/.done, thinking as a reasoning item with
 *   response.reasoning_summary_part.* and response.reasoning_summary_text.delta/.done,
 *   response.function_call_arguments.delta/.done or response.custom_tool_call_input.delta/
 *   .done, then response.completed or response.incomplete with usage (reasoning tokens
 *   estimated from the thinking text); a failure after the first byte ends it with
 *   response.failed (the error in response.error). Stored responses: the newest 256, at most
 *   64 MiB together, stored before the answer's last byte goes out (a client may chain on it
 *   the moment it has read it). previous_response_id puts the stored input and output items
 *   before the new input; instructions are not carried over, as at OpenAI. Tool-call ids are
 *   the function_call items' call_id, in the chat format, and come back in
 *   function_call_output.
 *
 *   Anthropic dialect (PART:ANTHROPIC). Query strings (?beta=true) are ignored;
 *   anthropic-version and anthropic-beta are accepted; x-claude-code-session-id is kept as the
 *   conversation key. Read: system (string or text blocks; cache_control
 *   ignored); messages (user, assistant, and system entries as Claude Code sends them; text,
 *   image, tool_use, tool_result with is_error, thinking / redacted_thinking sent back,
 *   document with a text source, search_result as its title, source and texts); tools
 *   (input_schema; tools with a type such as web_search_* and defer_loading tools are not
 *   offered to Cursor); tool_choice auto / any / tool / none; thinking; stop_sequences;
 *   max_tokens (required, as Anthropic requires it); metadata; context_management,
 *   output_config, temperature and other members ignored. An unknown block type is a 400.
 *   Stream: message_start, content_block_* for text, thinking (closed with a signature_delta)
 *   and tool_use (its input in one input_json_delta), message_delta with stop_reason and
 *   usage, message_stop, ping while Cursor is silent, event: error after the first byte.
 *   count_tokens returns the estimate a reply reports when Cursor sends no count.
 *
 *   Gemini dialect (PART:GEMINI). Read: contents (user / model; text, thought, inlineData,
 *   functionCall / functionResponse with or without id), systemInstruction,
 *   tools[].functionDeclarations (parametersJsonSchema or parameters; googleSearch and other
 *   built-in tools not offered), toolConfig.functionCallingConfig (AUTO, ANY, NONE,
 *   allowedFunctionNames), generationConfig (maxOutputTokens, stopSequences at most 5,
 *   responseMimeType application/json with responseSchema emulated, thinkingConfig.
 *   thinkingBudget 0 = thinking off, sampling ignored). Answers carry usageMetadata
 *   (promptTokenCount, candidatesTokenCount, thoughtsTokenCount, cachedContentTokenCount,
 *   totalTokenCount), finishReason, modelVersion (Cursor's model) and responseId. Refused
 *   with 400 INVALID_ARGUMENT before any run, as Google refuses them: fileData parts,
 *   cachedContent, candidateCount > 1, an allowedFunctionNames entry naming no declaration, a
 *   name declared twice, a functionResponse.response that is not an object, a
 *   functionResponse turn not right after a functionCall turn, a responseSchema /
 *   responseJsonSchema that is not an object, a responseMimeType outside text/plain,
 *   application/json, application/xml, application/yaml, text/x.enum (all but json answered as
 *   text), a model name in the URL with a control character or over 255 bytes. Gemini CLI's
 *   shell tool gets dir_path (relative to the workspace, only for a directory under it),
 *   grep_search include_pattern for a file glob; its replace is never used (edits arrive as
 *   whole-file writes); its web_fetch and google_web_search are not Cursor tools. Google's
 *   stable path (/v1/models/{model}:...) is served too; /v1/models answers Gemini's list to a
 *   request with a Google key (x-goog-api-key, ?key=, or x-goog-api-client) and no
 *   anthropic-version. Unknown URLs under /v1beta/, a model method under /v1/models/
 *   (:embedContent) and unknown /v1/ URLs from a Google client get Google's 404 NOT_FOUND.
 *   A usage limit is 429 RESOURCE_EXHAUSTED whose message ends in "(Cursor usage quota, limit:
 *   0 remaining in this period)" with ErrorInfo and QuotaFailure details: Gemini CLI treats a
 *   429 saying "limit: 0" as a quota waiting will not restore and shows it at once (0.61.0:
 *   the message after 3.5-5.4 s, one run; without those words it retried past a 120 s timeout).
 *
 *   Login renewal. A browser login is renewed as Cursor's IDE does: POST /oauth/token
 *   {grant_type: "refresh_token", client_id, refresh_token}; the answer is a new access token
 *   (about 60 days) and the same refresh token, which does not rotate. shouldLogout: true means
 *   revoked: requests get a 401 saying to log in again. /auth/refresh is tried only when
 *   /oauth/token answers 404. An API-key login is renewed by exchanging the key again (tokens
 *   last about an hour). cursor-agent's browser login is renewed too, in memory only, through
 *   /oauth/token and never /auth/refresh (which may rotate and would log cursor-agent out);
 *   neither file is written. That is safe because the /oauth/token refresh token was measured
 *   live (2026-09-02) as durable and non-rotating, and other clients renew the same way;
 *   should /oauth/token ever send back a different refresh token, the log warns that
 *   cursor-agent may need "cursor-agent login". A cursor-agent file holding an API key has the
 *   key exchanged and the new tokens saved to cursor-oai's own file. Renewals of several
 *   instances on one host run under a file lock.
 *
 * LICENSE AND SOURCES: written for cursor-oai. The protocol facts are what Cursor's own
 * client sends and receives; the tests check the encoders, the checksum and the prompt
 * against vectors recorded from it, byte for byte (COAI_VECTORS; see the README).
 */
#ifndef CURSOR_OAI_H
#define CURSOR_OAI_H

#include <stddef.h>
#include <stdint.h>

/* The one version string: --version, the start-up line, doctor and the status page. */
#define COAI_VERSION "0.3.0-dev"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* PART:COMMON api (results, strings, buffers, JSON text, UUIDs)            */
/* ======================================================================== */

typedef enum coai_result {
    COAI_OK = 0,
    COAI_MORE = 1,             /* need more input */
    COAI_DONE = 2,             /* finished; nothing more will come */
    COAI_ERR_NOMEM = -1,       /* allocation failed or a cap was hit */
    COAI_ERR_TOO_BIG = -2,     /* a length exceeds its limit */
    COAI_ERR_FRAME = -3,       /* bad envelope flags or framing */
    COAI_ERR_COMPRESSED = -4,  /* compressed envelope (flag 0x01): not supported */
    COAI_ERR_PROTO = -5,       /* malformed protobuf */
    COAI_ERR_JSON = -6,        /* malformed JSON */
    COAI_ERR_INVALID = -7,     /* well-formed but invalid input (see coai_error) */
    COAI_ERR_UTF8 = -8,        /* invalid UTF-8 where it is not allowed */
    COAI_ERR_HTTP = -9,        /* malformed HTTP */
    COAI_ERR_TRUNCATED = -10,  /* input ended inside a unit */
    COAI_ERR_STATE = -11,      /* API used in the wrong state (programmer error) */
    COAI_ERR_UPSTREAM = -12,   /* the upstream reported an error (see coai_status) */
    COAI_ERR_H2 = -13          /* HTTP/2 connection error (coai_h2_conn.error has the code) */
} coai_result;

const char *coai_result_str(int r);

typedef struct coai_str {
    const char *ptr;
    size_t len;
} coai_str;

#define COAI_STR_LIT(s) { (s), sizeof(s) - 1 }
coai_str coai_str_c(const char *s);       /* view of a NUL-terminated string (NULL -> empty) */
int coai_str_eq(coai_str a, const char *lit);

/* Growable byte buffer. Zero-init is an empty buffer; max = 0 means no cap.
 * On failure the buffer remembers it (err = 1) and later appends are no-ops. */
typedef struct coai_buf {
    unsigned char *data;   /* heap, owned; NUL-terminated after every append when cap allows */
    size_t len;            /* bytes used */
    size_t cap;            /* bytes allocated */
    size_t max;            /* 0 = unlimited, else appends that would exceed it fail */
    int err;               /* sticky: an append failed */
} coai_buf;

int coai_buf_reserve(coai_buf *b, size_t extra);              /* 0 ok, -1 fail */
int coai_buf_append(coai_buf *b, const void *p, size_t n);    /* 0 ok, -1 fail */
int coai_buf_puts(coai_buf *b, const char *s);
int coai_buf_putc(coai_buf *b, int c);
int coai_buf_printf(coai_buf *b, const char *fmt, ...);
void coai_buf_reset(coai_buf *b);                              /* len = 0, err = 0, keep memory */
void coai_buf_free(coai_buf *b);

/* Small encoders shared by every part. Each appends to `out`; 0 ok, -1 fail. */
int coai_hex_append(coai_buf *out, const void *p, size_t n);          /* lowercase */
/* url = 1: base64url without '=' padding; url = 0: standard base64 with padding */
int coai_base64_append(coai_buf *out, const void *p, size_t n, int url);
/* Decode standard or url-safe base64, padding optional, whitespace rejected.
 * Returns the decoded length, or -1 on bad input or when out_cap is too small. */
long coai_base64_decode(const char *in, size_t n, unsigned char *out, size_t out_cap);
/* Format 16 random bytes as a lowercase RFC 4122 v4 UUID (sets version/variant bits). */
void coai_uuid_format(char out[37], const unsigned char rnd[16]);

/* JSON writing, byte-compatible with JavaScript's JSON.stringify:
 * coai_json_str_append writes a quoted string; escapes '"', '\\', \b \f \n \r \t and
 * other control bytes as \u00xx (lowercase); non-ASCII stays raw UTF-8; '/' is not
 * escaped. Invalid UTF-8 (bad, overlong, surrogate or truncated sequences) becomes
 * U+FFFD, so the output is always valid UTF-8 and valid JSON.
 * coai_json_num_append writes the shortest text that reads back as the same double
 * (integers without ".0", 1e+21 style exponents as JavaScript does); NaN/Inf -> null.
 * Each maximal invalid UTF-8 subpart becomes one U+FFFD, as Node's TextDecoder does. */
int coai_json_str_append(coai_buf *out, const char *s, size_t n);
int coai_json_num_append(coai_buf *out, double v);
/* Length of the longest prefix of s that is valid UTF-8 and does not end inside a
 * character. Used to hold back a split character until the next fragment. */
size_t coai_utf8_valid_prefix(const char *s, size_t n);

/* PART:COMMON api end */

/* ======================================================================== */
/* PART:AUTH api (token claims, browser login (PKCE), credential JSON)      */
/* ======================================================================== */

/* Claims read from a JWT access token (payload segment, base64url, lenient).
 * Nothing is verified: the upstream does that. Used for expiry and display. */
typedef struct coai_jwt {
    int64_t exp;                /* "exp", Unix seconds; 0 when absent */
    char sub[160];              /* "sub", "" when absent (cut to fit) */
    char email[160];            /* "email", "" when absent (cut to fit) */
} coai_jwt;

/* 0 when the payload decoded as a JSON object, -1 otherwise (out is zeroed). */
int coai_jwt_decode(coai_str token, coai_jwt *out);
/* 1 when the token should be renewed: exp - now_s < margin_s, no numeric exp, or
 * not a JWT at all. 0 when it stays valid for at least margin_s seconds. */
int coai_token_expiring(coai_str token, int64_t now_s, int64_t margin_s);

/* Browser login state: verifier = base64url(32 random bytes), challenge =
 * base64url(SHA-256(verifier)), uuid = v4 from 16 more random bytes. */
typedef struct coai_pkce {
    char verifier[44];
    char challenge[44];
    char uuid[37];
} coai_pkce;

#define COAI_LOGIN_MAX_ATTEMPTS 150     /* polls before giving up (about 24 minutes) */
#define COAI_LOGIN_MAX_ERRORS 3         /* consecutive poll errors before giving up */

void coai_pkce_init(coai_pkce *p, const unsigned char rnd[48]);
/* https://cursor.com/loginDeepControl?challenge=..&uuid=..&mode=login&redirectTarget=cli */
int coai_login_url(coai_buf *out, const coai_pkce *p);
/* "/auth/poll?uuid=..&verifier=.." (path and query only; the caller adds the base URL) */
int coai_login_poll_target(coai_buf *out, const coai_pkce *p);
/* Wait before poll number `attempt` (0-based): min(1000 * 1.2^attempt, 10000) ms. */
unsigned coai_login_poll_delay_ms(unsigned attempt);

/* Credentials: the auth.json file ({"accessToken","refreshToken","apiKey"}) and the
 * answers of /auth/poll, /auth/refresh and /auth/exchange_user_api_key share this
 * shape. Strings are malloc'd and NUL-terminated; absent members are NULL. A
 * member that is not a non-empty string of visible ASCII (0x21-0x7e) counts as
 * absent: tokens go into HTTP headers, where CR/LF would split a header. */
typedef struct coai_creds {
    char *access_token;
    char *refresh_token;
    char *api_key;
} coai_creds;

/* 0 when the JSON is an object (members may still be absent), -1 otherwise, -2 when a
 * string holds a \u0000 escape (it would cut a token short without a word).
 * Only non-empty string members are taken; c is cleared first. */
int coai_creds_parse(const char *json, size_t n, coai_creds *c);
/* Pretty-printed (2-space) JSON of the non-NULL members, ending in a newline. */
int coai_creds_format(coai_buf *out, const coai_creds *c);
void coai_creds_free(coai_creds *c);
/* The answer of POST /oauth/token (a browser login's renewal):
 * {"access_token", "id_token", "shouldLogout"}, snake_case. c gets access_token (and
 * refresh_token if one is ever sent: Cursor's does not rotate, so it is normally absent);
 * *should_logout is 1 when "shouldLogout" is true (Cursor revoked the login).
 * 0 when the JSON is an object, -1 otherwise (c cleared, *should_logout 0), -2 (c cleared)
 * when a string holds a \u0000 escape, as coai_creds_parse: a token cut short there would
 * be taken as a renewed login. */
int coai_oauth_token_parse(const char *json, size_t n, coai_creds *c, int *should_logout);

/* PART:AUTH api end */

/* ======================================================================== */
/* PART:QR api (a QR code of the login URL, for a headless login)           */
/* ======================================================================== */

#define COAI_QR_MAX_SIZE 57     /* modules per side at the largest version kept (10) */

/* A QR code (byte mode, error correction level M, versions 1-10: up to 213 bytes).
 * Module (x, y) is dark when modules[y * size + x] is 1. */
typedef struct coai_qr {
    int size;                   /* 21 + 4 * (version - 1) */
    int version;                /* 1..10 */
    int mask;                   /* 0..7, chosen by the standard penalty rules */
    unsigned char modules[COAI_QR_MAX_SIZE * COAI_QR_MAX_SIZE];
} coai_qr;

/* 0 on success, -1 when the text does not fit in version 10. */
int coai_qr_encode(coai_qr *qr, const void *text, size_t n);
/* Terminal rendering with Unicode half blocks, two module rows per line, light
 * modules drawn as ink (so it scans on dark terminals), a 2-module quiet zone. */
int coai_qr_render_utf8(const coai_qr *qr, coai_buf *out);

/* PART:QR api end */

/* ======================================================================== */
/* PART:CONFIG api (checks of values from flags, env and files)             */
/* ======================================================================== */
/* Every one of these values ends up in a socket address or an HTTP header, so each is
 * checked here (tested and fuzzed) rather than trusted: a CR or LF in TZ or in
 * CURSOR_CLIENT_VERSION would otherwise split an upstream header. */

/* "host:port", "[v6]:port", or "host" / "[v6]" when defport is given. Copies the host
 * (brackets removed) and the port (decimal, 0..65535) as NUL-terminated strings.
 * 0 ok, -1 malformed or too long. A bare IPv6 address without brackets is refused. */
int coai_hostport_split(coai_str s, char *host, size_t hcap, char *port, size_t pcap,
                        const char *defport);

/* https://host[:port][/prefix] (scheme case-insensitive; no userinfo, query or
 * fragment; trailing slashes of the prefix dropped; port 1..65535, default 443). */
typedef struct coai_url {
    char host[256];             /* for DNS, SNI and certificate name checks */
    char port[8];
    char authority[300];        /* the Host header value, as written in the URL */
    char prefix[256];           /* path prefix without trailing '/', "" for none */
} coai_url;
int coai_url_parse_https(coai_str url, coai_url *u);   /* 0 ok, -1 invalid */

/* 1 when v can be an HTTP header value as is: 1..1024 bytes of visible ASCII and
 * inner spaces (no CTL, no DEL, no non-ASCII, no leading or trailing blank). */
int coai_header_value_ok(coai_str v);
/* 1 for an IANA time-zone name: 1..128 bytes of [A-Za-z0-9/_+-], not starting with '/'
 * and without "..". */
int coai_tz_name_ok(coai_str v);
/* 1 for a name --allow-host accepts: 1..253 bytes of visible ASCII without '/', '@',
 * '?', '#', or ':' (an IPv6 literal must be bracketed: "[::1]"). */
int coai_host_name_ok(coai_str v);

/* A cursor-agent build id as x-cursor-client-version carries it ("cli-" + build) and as
 * ~/.local/share/cursor-agent/versions names its directories (build alone). Forms seen
 * (in cursor-agent releases): YYYY.MM.DD-<hash>, YYYY.MM.DD-HH-MM-SS-<hash> (June
 * 2026), each optionally followed by "-lab" (non-production channel); <hash> is 4..40
 * characters of [0-9a-f]. The "cli-" prefix is optional on input. */
typedef struct coai_cli_version {
    int year, month, day;
    int hour, minute, second;   /* -1 when the id has no time part */
    int lab;                    /* 1: "-lab" suffix */
    char hash[41];
} coai_cli_version;
int coai_cli_version_parse(coai_str s, coai_cli_version *v);   /* 0 ok, -1 not a build id */
/* Release order: date, then time of day (an id without one counts as 00:00:00). Ids of the
 * same instant compare equal whatever their hash. Returns <0, 0 or >0. */
int coai_cli_version_cmp(const coai_cli_version *a, const coai_cli_version *b);

/* The agent host named by an aiserver.v1.ServerConfigService/GetServerConfig answer
 * (Connect JSON): agentUrlConfig.agentUrl, the privacy backend, when ghost_mode is 1,
 * else agentUrlConfig.agentnUrl. A bare host name gets "https://". Returns 0 with *out
 * filled, 1 when the answer names no usable URL for that mode (absent, empty, not https),
 * -1 when it is not a JSON object. */
int coai_server_config_agent_url(const char *json, size_t n, int ghost_mode, coai_url *out);

/* GetServerConfigResponse.http2_config (field 7; Connect JSON "http2Config", the enum's name
 * or its number), as seen in 2026. The official SDK obeys it: FORCE_ALL_DISABLED and
 * FORCE_BIDI_DISABLED -> HTTP/1.1 RunSSE + BidiAppend; FORCE_ALL_ENABLED and
 * FORCE_BIDI_ENABLED -> HTTP/2 Run; otherwise HTTP/2 with the HTTP/1.1 fallback. */
enum {
    COAI_H2CFG_UNSPECIFIED = 0,
    COAI_H2CFG_FORCE_ALL_DISABLED = 1,
    COAI_H2CFG_FORCE_ALL_ENABLED = 2,
    COAI_H2CFG_FORCE_BIDI_DISABLED = 3,
    COAI_H2CFG_FORCE_BIDI_ENABLED = 4
};
/* The answer's http2_config: 1-4, or 0 when it is absent, UNSPECIFIED, a value this version
 * does not know, or the answer is not a JSON object. Names are matched with or without the
 * enum's "HTTP2_CONFIG_" prefix. */
int coai_server_config_http2(const char *json, size_t n);
/* "FORCE_ALL_DISABLED" ... for 1-4, "UNSPECIFIED" otherwise. */
const char *coai_http2_config_name(int v);
/* What the value asks of runs: 1 HTTP/1.1 only (1, 3), 2 HTTP/2 only (2, 4), 0 HTTP/2 with
 * the HTTP/1.1 fallback (anything else). */
int coai_http2_config_transport(int v);

/* PART:CONFIG api end */

/* ======================================================================== */
/* PART:FRAMING api (envelopes, trailers, Connect end-stream)               */
/* ======================================================================== */

#ifndef COAI_MAX_FRAME
#define COAI_MAX_FRAME (16u * 1024u * 1024u)   /* largest envelope payload accepted */
#endif

enum {
    COAI_FRAME_DATA = 0x00,        /* protobuf message */
    COAI_FRAME_COMPRESSED = 0x01,  /* flag bit: compressed payload */
    COAI_FRAME_END_STREAM = 0x02,  /* Connect end-stream: JSON payload */
    COAI_FRAME_TRAILER = 0x80      /* gRPC-web trailer: header-block text */
};

/* Outcome of a trailer frame, a Connect end-stream frame or a google.rpc.Status.
 * Fixed-size fields: no allocation; text longer than a field is cut at a UTF-8
 * boundary. All text is valid UTF-8 without control characters. */
typedef struct coai_status {
    int code;                  /* gRPC status (0 OK, 8 RESOURCE_EXHAUSTED, 16 UNAUTHENTICATED..) */
    int error;                 /* aiserver.v1.ErrorDetails.Error value, 0 when none */
    const char *error_name;    /* static name such as "ERROR_OUTDATED_CLIENT", or NULL */
    int retryable;             /* CustomErrorDetails.is_retryable: -1 unknown, 0, 1 */
    char message[512];         /* grpc-message, percent-decoded (or Status.message) */
    char title[256];           /* CustomErrorDetails.title */
    char detail[1024];         /* CustomErrorDetails.detail (+ "key: value" additional info) */
    int expected;              /* ErrorDetails.is_expected: -1 unknown, 0, 1 */
    char action_required[64];  /* CustomErrorDetails.analytics_metadata(10).action_required */
    char unknown_code[40];     /* a Connect code string this build does not know, or "" */
    char unknown_detail[96];   /* the first detail type other than aiserver.v1.ErrorDetails */
} coai_status;

/* ---- Envelopes ----
 * flags (1 byte) | payload length (u32 big-endian) | payload. */

/* Write the 5-byte envelope header. Returns 0, or -1 when flags > 0xff or len > 0xffffffff. */
int coai_frame_header(unsigned char out[5], unsigned flags, size_t len);
/* Append header + payload to `out`. COAI_ERR_TOO_BIG when n does not fit in u32,
 * COAI_ERR_NOMEM when the buffer fails. */
coai_result coai_frame_encode(coai_buf *out, unsigned flags, const void *p, size_t n);

/* One decoded envelope. */
typedef struct coai_frame {
    unsigned flags;               /* COAI_FRAME_DATA, COAI_FRAME_TRAILER or COAI_FRAME_END_STREAM */
    const unsigned char *data;    /* payload, never NULL; valid until the next feed/reset/free */
    size_t len;                   /* payload bytes (0 is a valid, empty message) */
} coai_frame;

/* Incremental envelope decoder. Zero-init is ready to use; only max_frame is public. */
typedef struct coai_frame_decoder {
    size_t max_frame;             /* largest payload accepted; 0 = COAI_MAX_FRAME */
    unsigned char hdr_[5];        /* private: header bytes gathered so far */
    unsigned hdr_len_;            /* private: 0..5; 5 = reading the payload */
    size_t want_;                 /* private: payload length of the current frame */
    coai_buf buf_;                /* private: payload split across feeds */
    int ended_;                   /* private: a trailer or end-stream frame was returned */
    int err_;                     /* private: sticky error */
} coai_frame_decoder;

/* Consume input up to the end of the next frame. *used (may not be NULL) = bytes consumed.
 *   COAI_OK    one frame in *out. The view points into `p` when the whole payload was inside
 *              this input (zero-copy), else into the decoder's buffer, which grows as bytes
 *              arrive (a header's length is never allocated up front).
 *   COAI_MORE  all n bytes consumed, no frame completed yet.
 *   < 0        COAI_ERR_TOO_BIG (length over the cap, seen in the header before any
 *              allocation), COAI_ERR_COMPRESSED (flag 0x01), COAI_ERR_FRAME (unknown flag bits,
 *              or any byte after a trailer/end-stream frame, which must be the last one),
 *              COAI_ERR_NOMEM. Errors are sticky until coai_frame_decoder_reset().
 * Call again with the rest (p + *used) until COAI_MORE: one input can hold several frames.
 * Splitting the input differently never changes the frames returned. */
coai_result coai_frame_feed(coai_frame_decoder *d, const void *p, size_t n, size_t *used,
                            coai_frame *out);
/* At end of input: COAI_OK at a frame boundary, COAI_ERR_TRUNCATED inside a frame (header or
 * payload), or the sticky error. Whether a trailer/end-stream frame came is the caller's check. */
coai_result coai_frame_finish(coai_frame_decoder *d);
void coai_frame_decoder_reset(coai_frame_decoder *d);   /* ready again; keeps max_frame */
void coai_frame_decoder_free(coai_frame_decoder *d);    /* frees the buffer; also resets */

/* ---- Trailers and errors ----
 * Both parsers fill *st completely in every case (it is reset first: code 0, error 0,
 * error_name NULL, retryable -1, empty text). A negative result says part of the input was
 * malformed; *st then still holds the best reading of the rest, and never reads as success
 * when the input was an error. */

#ifndef COAI_MAX_STATUS_DETAILS
#define COAI_MAX_STATUS_DETAILS (16u * 1024u)   /* decoded google.rpc.Status bytes accepted */
#endif

/* gRPC-web trailer block (payload of a 0x80 frame, or HTTP header lines of a trailers-only
 * response): "key: value" lines split on \n (optional \r), keys case-insensitive, later
 * duplicates win. grpc-status (decimal; missing = 0, or Status.code from the details;
 * unparsable = 2 UNKNOWN), grpc-message (percent-decoded; malformed % kept literally),
 * grpc-status-details-bin (base64 google.rpc.Status; its aiserver.v1.ErrorDetails fill
 * error/error_name/title/detail/retryable; Status.message is used when grpc-message is absent).
 * Returns COAI_OK, or COAI_ERR_PROTO / COAI_ERR_TOO_BIG when the details could not be used. */
coai_result coai_trailer_parse(const void *p, size_t n, coai_status *st);

/* Connect end-stream JSON (payload of a 0x02 frame): {} or {"metadata":{..}} is OK (code 0);
 * {"error":{"code":"resource_exhausted","message":..,"details":[{"type":..,"value":b64}]}}
 * maps the Connect code name to the gRPC number and decodes aiserver.v1.ErrorDetails details.
 * Not JSON -> COAI_ERR_JSON; an "error" that is not an object with a code string (null, {},
 * unknown code) -> COAI_ERR_INVALID. Both leave st->code = 2 (UNKNOWN). */
coai_result coai_end_stream_parse(const void *p, size_t n, coai_status *st);

/* "OK", "CANCELLED", .. "UNAUTHENTICATED"; "UNRECOGNIZED" outside 0..16. */
const char *coai_grpc_status_name(int code);
/* Static "ERROR_OUTDATED_CLIENT"-style name of an aiserver.v1.ErrorDetails.Error, or NULL. */
const char *coai_error_details_name(int error);
/* Append one human sentence for logs and clients, e.g.
 * "Outdated client: Update required: Please update Cursor to continue. (grpc-status 9,
 * ERROR_OUTDATED_CLIENT)". Parts equal to an earlier part are skipped; with no text at all the
 * message is "Unknown gRPC error". Contains no control characters. */
void coai_status_describe(const coai_status *st, coai_buf *out);
/* PART:FRAMING api end */

/* ======================================================================== */
/* PART:CHECKSUM api (x-cursor-checksum, base64, hex, uuid, sha256 helpers) */
/* ======================================================================== */
/* x-cursor-checksum (what the original client sends): 25 characters + NUL,
 * "<8 base64url time chars><8 hex of sha256(JWT payload segment)>/<8 hex of sha256(token)>".
 * The token is a secret: these functions neither keep nor log it. */
#define COAI_CHECKSUM_SIZE 26

/* Start of now_ms's half hour in the host's LOCAL time zone, in epoch ms: local minutes
 * floored to 0 or 30, seconds and ms zeroed (differs from UTC bucketing in :15/:45 zones such
 * as Asia/Kathmandu). Uses localtime_r + mktime, so it follows TZ as of the last tzset(). */
int64_t coai_checksum_bucket(int64_t now_ms);
/* Checksum for a given bucket start (exact, no clock): out is NUL-terminated. */
void coai_checksum_at(char out[COAI_CHECKSUM_SIZE], coai_str token, int64_t bucket_ms);
/* coai_checksum_at(out, token, coai_checksum_bucket(now_ms)). */
void coai_checksum(char out[COAI_CHECKSUM_SIZE], coai_str token, int64_t now_ms);
/* PART:CHECKSUM api end */

/* ======================================================================== */
/* PART:ENCODE api (client messages: run request, BidiAppend, KV, exec)     */
/* ======================================================================== */

struct cJSON;
struct coai_image;          /* IMAGE part */
struct coai_image_limits;   /* IMAGE part */

/* One OpenAI function tool, as it goes into a McpToolDefinition. */
typedef struct coai_tool {
    coai_str name;                      /* function.name (validated by the CORE part) */
    coai_str description;               /* empty = omitted */
    const struct cJSON *parameters;     /* JSON schema; NULL = {"type":"object","properties":{}} */
    int freeform;                       /* Responses custom tool: called with one string,
                                         * parameters = {"input": string} for Cursor */
} coai_tool;

/* Everything that varies in a run request. Empty strings get the documented defaults. */
typedef struct coai_run_params {
    coai_str prompt;            /* UserMessage.text (flattened conversation) */
    coai_str model_id;          /* resolved model id -> ModelDetails.model_id */
    coai_str message_id;        /* UUID string for UserMessage.message_id */
    coai_str conversation_id;   /* UUID string for AgentRunRequest.conversation_id */
    coai_str workspace;         /* workspace path (workspace_paths, project_folder, MCP dirs) */
    coai_str time_zone;         /* IANA zone name, e.g. "UTC" */
    coai_str os_version;        /* default "darwin 24.0.0" (what the original sends) */
    coai_str shell;             /* default "/bin/zsh" (what the original sends) */
    const coai_tool *tools;     /* may be NULL when tool_count == 0 */
    size_t tool_count;
    /* Checkpoint resume (all empty for a fresh conversation, the byte layout of the
     * vectors): conversation_state = Cursor's own ConversationStateStructure bytes
     * (an empty view still writes the required empty field); pre_fetched_blobs
     * (field 17) = the KV blobs stored for it, blob_ids[i] -> blob_values[i]. */
    coai_str conversation_state;
    const coai_str *blob_ids, *blob_values;
    size_t blob_count;
    const struct coai_image *images; /* UserMessage.selected_context images (IMAGE part) */
    size_t image_count;         /* 0: no selected_context at all (the original's bytes) */
} coai_run_params;

/* Client -> server messages. Every encoder APPENDS exactly one serialized message
 * (or one complete HTTP body, for the two *_body / bidi_append functions) to `out`
 * and returns COAI_OK, or a negative coai_result; on failure `out->len` is restored
 * to what it was (a failed allocation also leaves out->err set, see coai_buf).
 * Byte layout follows the original client exactly (the protocol vectors): strings
 * are omitted when empty, uint32/int32 omitted when 0, nested messages always
 * written, field order as in the vectors. Text is written as given: callers pass
 * valid UTF-8 (the CORE part validates client input). */

#ifndef COAI_MAX_VALUE_DEPTH
#define COAI_MAX_VALUE_DEPTH 64   /* deepest JSON array/object nesting coai_encode_value takes */
#endif

/* AgentClientMessage{run_request}, the original client's layout. Empty os_version/shell become
 * "darwin 24.0.0" and "/bin/zsh". With tools, each tool goes into both
 * RequestContext.tools and AgentRunRequest.mcp_tools, plus McpInstructions and
 * McpFileSystemOptions. p->tools may be NULL only when tool_count is 0.
 * Errors: COAI_ERR_INVALID (NULL p, NULL tools with a count, bad JSON type in a
 * schema), COAI_ERR_TOO_BIG (schema deeper than COAI_MAX_VALUE_DEPTH), COAI_ERR_NOMEM. */
int coai_encode_run_request(coai_buf *out, const coai_run_params *p);

/* The run request msg[0..n) (an AgentClientMessage{run_request}, as coai_encode_run_request
 * wrote it) again, with AgentRunRequest.conversation_id = conversation_id: what a caller
 * needs to start a lost conversation over once its inputs are gone. The message is walked
 * field by field, never searched for bytes: every other field is copied as it is, the new
 * id goes where the encoder puts it (before the first field above 5), and the enclosing
 * length is written again, so an id of any length and a prompt that holds the old id's
 * bytes both come out right. For an encoded p: the result equals coai_encode_run_request
 * of p with the new id. Errors: COAI_ERR_INVALID (an empty id, NULL msg with n > 0),
 * COAI_ERR_PROTO (msg is not exactly one well-formed run_request: bad tags or lengths, a
 * second run_request, a conversation_id that is not length-delimited), COAI_ERR_NOMEM. */
int coai_encode_run_request_conversation(coai_buf *out, const void *msg, size_t n,
                                         coai_str conversation_id);
/* The run request msg[0..n) again with AgentRunRequest.conversation_state (field 1) carrying
 * ConversationStateStructure.mode (10) = mode (1: AGENT): what Cursor wants after "Conversation
 * state is required" (the SDK's first turn sets mode AGENT). The
 * state's other fields are kept (a checkpoint's too), an old mode goes; a missing state field
 * is added first. Walked field by field as coai_encode_run_request_conversation; the same
 * errors (COAI_ERR_INVALID for mode <= 0). */
int coai_encode_run_request_state_mode(coai_buf *out, const void *msg, size_t n, int mode);

/* google.protobuf.Value of a cJSON tree, with the original's quirks:
 * object members in JavaScript order (canonical array-index keys "0".."4294967294"
 * ascending first, then the others in document order; a duplicated key keeps its
 * first position and its last value, as JSON.parse does); numbers as doubles; "" and
 * null give an empty Value; false is written. Arrays/objects nested deeper than
 * COAI_MAX_VALUE_DEPTH -> COAI_ERR_TOO_BIG; NULL or cJSON_Raw/invalid items ->
 * COAI_ERR_INVALID. Appends the Value's bytes only (no tag, no length). */
int coai_encode_value(coai_buf *out, const struct cJSON *json);

/* Complete BidiAppend HTTP body: envelope(0x00, BidiAppendRequest{data = lowercase hex
 * of msg[0..n), request_id{request_id}, append_seqno}). append_seqno is always written
 * (also 0); seqno < 0 -> COAI_ERR_INVALID; a payload over 4 GiB -> COAI_ERR_TOO_BIG. */
int coai_encode_bidi_append(coai_buf *out, const void *msg, size_t n, coai_str request_id,
                            int64_t seqno);

/* Complete RunSSE HTTP body: envelope(0x00, BidiRequestId{request_id}). */
int coai_encode_run_body(coai_buf *out, coai_str request_id);

/* KV replies (the blob store, QUICK START 2): AgentClientMessage{kv_client_message{id, ...}}.
 * get: found != 0 writes blob_data (even when n == 0); found == 0 leaves it absent. */
int coai_encode_kv_set_result(coai_buf *out, uint32_t id);
int coai_encode_kv_get_result(coai_buf *out, uint32_t id, const void *data, size_t n, int found);

/* ExecClientControlMessage.stream_close{id}: send after every exec result (not after
 * a throw). */
int coai_encode_exec_stream_close(coai_buf *out, uint32_t id);
/* ExecClientControlMessage.throw{id, error}. */
int coai_encode_exec_throw(coai_buf *out, uint32_t id, coai_str reason);
/* ConversationAction{resume_action{}} = 22 02 12 00. */
int coai_encode_resume(coai_buf *out);
/* AgentClientMessage.client_heartbeat{} = 3a 00: sent every 5 s while a run is open
 * (the 2026 CLI does). */
int coai_encode_client_heartbeat(coai_buf *out);
/* ExecClientControlMessage.heartbeat{id}: every 3 s for each exec whose result the
 * client is still producing. */
int coai_encode_exec_heartbeat(coai_buf *out, uint32_t id);
/* The KV replies above plus KvClientMessage.metadata (field 4) = the KvServerMessage's
 * opaque field 4 echoed byte for byte when has_meta (coai_msg.raw / has_raw). */
int coai_encode_kv_set_result_meta(coai_buf *out, uint32_t id, coai_str meta, int has_meta);
int coai_encode_kv_get_result_meta(coai_buf *out, uint32_t id, const void *data, size_t n,
                                   int found, coai_str meta, int has_meta);

/* What an exec result needs from its request; views the caller keeps alive. */
typedef struct coai_exec_ref {
    int kind;                   /* coai_exec_kind */
    uint32_t id;
    coai_str exec_id, command, cwd, path;
    int64_t write_lines, write_size; /* write: lines and bytes of the file_text asked for */
    int exit_trap;              /* shell: the command carries COAI_EXIT_TRAP (its result ends
                                 * with the exit code line) */
    int via_shell;              /* a file exec (read, ls, ...) done through the client's shell
                                 * tool: its result may carry the shell's exit code line */
    unsigned part, parts;       /* a write split over several tool calls (parts > 1): this
                                 * call is part `part` (0-based); Cursor gets one result for
                                 * all of them (coai_exec_part_answers) */
} coai_exec_ref;
/* What an OpenAI-chat client's `bash` tool with a `workdir` parameter (OpenCode, Kilo Code:
 * results without an exit code) runs before Cursor's command: stderr joins stdout (those
 * clients merge the two anyway; one pipe keeps the order) and at the shell's exit it prints
 * "\n[exit code: N]\n", which coai_exec_outcome_parse takes back out of the result. */
#define COAI_EXIT_TRAP "exec 2>&1; trap 'printf \"\\n[exit code: %d]\\n\" \"$?\"' EXIT"
/* The CLI's answer to an exec the client ran as a tool, one AgentClientMessage per
 * step (0, 1, 2 ...): appends step `step` and returns COAI_OK, or COAI_DONE (nothing
 * appended) after the last one. `text` is the client's tool output; is_error marks a
 * failed tool; ms goes into local_execution_time_ms (field 39 and the shell exit).
 * Sequences (each frame with id and exec_id, as the 2026 CLI sends them):
 *   SHELL_STREAM  shell_stream{start{}}, shell_stream{stdout{text}} (stderr when
 *                 is_error), shell_stream{exit{code 0|1, cwd, local_execution_time_ms}},
 *                 stream_close
 *   SHELL         shell_result{success|failure{command, cwd, exit 0|1, stdout|stderr}},
 *                 stream_close
 *   READ          read_result{success{path, content, total_lines, file_size} | error},
 *                 stream_close
 *   WRITE         write_result{success{path, lines_created, file_size} | error}, close
 *   LS            ls_result{success{directory_tree_root{abs_path, one child file per
 *                 non-empty output line, num_files}} | error}, stream_close
 *   GREP          grep_result{success{pattern "", path, "files_with_matches",
 *                 workspace_results{path: files{lines}}} | error}, stream_close
 *   MCP and any other kind
 *                 mcp_result{success{content[text{text}], is_error}}, stream_close
 * A kind with no result a tool could give (request_context) -> COAI_ERR_INVALID. */
int coai_encode_exec_answer(coai_buf *out, const coai_exec_ref *x, coai_str text,
                            int is_error, uint32_t ms, unsigned step);
/* The same with the images of the tool result (IMAGE part): an MCP exec's success gets
 * one McpImageContent item per image after its text item (as Cursor's peers send it);
 * any other kind with n > 0 -> COAI_ERR_INVALID (its result has no place for an image:
 * send the turn to a fresh run, where the images travel as selected images). n = 0 is
 * exactly coai_encode_exec_answer. */
int coai_encode_exec_answer_images(coai_buf *out, const coai_exec_ref *x, coai_str text,
                                   const struct coai_image *images, size_t n, int is_error,
                                   uint32_t ms, unsigned step);
/* A client tool's result in the fields Cursor's CLI reports (what coai_exec_outcome_parse
 * reads out of each client's result text; zero-init + out = text is the raw result).
 * Views point into the text given to the parser or into own_. */
typedef struct coai_exec_outcome {
    int is_error;              /* the tool failed: error result / shell failure */
    int has_exit;              /* shells: the client reported the exit code */
    int exit_code;             /* valid when has_exit */
    coai_str out;              /* read: the file's bytes; shell: stdout (stdout and stderr
                                * together where the client merges them); else the text */
    coai_str err;              /* shell: stderr where the client reports it apart; the error
                                * text of an error result */
    int has_total;             /* read: the client said how many lines the file has */
    int64_t total_lines;
    int truncated;             /* read: the client showed only part of the file */
    int has_size;              /* delete: the output was the file's size (wc -c) */
    int64_t file_size;         /* valid when has_size */
    const char *shape;         /* the layout recognised ("codex-exec", "claude-read", ...) or
                                * "raw" */
    coai_buf own_;             /* rebuilt text (line numbers removed) */
    coai_buf unwrap_;          /* the text inside a one-element JSON array result */
} coai_exec_outcome;
/* coai_encode_exec_answer_images with the result's fields given apart:
 *   SHELL_STREAM  start, stdout{out} (when out is non-empty or err is empty), stderr{err}
 *                 (when non-empty), exit{code = exit_code when has_exit, else is_error ? 1
 *                 : 0}, stream_close
 *   SHELL         success (exit 0) | failure{exit_code, stdout out, stderr err}
 *   READ          success{path, content out, total_lines (the client's count when
 *                 has_total, else out's lines), file_size = out's bytes, truncated} |
 *                 error{path, err or out}
 *   WRITE         success{path, lines_created/file_size of x->write_lines/write_size} |
 *                 error{path, err or out}
 *   DELETE        success{path, deleted_file = path, file_size} when has_size and
 *                 file_size > 0 | error{path, err or out} when is_error | else (no size, or
 *                 0: Cursor's turn stalls on a success without a size) error{path, a
 *                 sentence saying the file was deleted (empty, or its size not reported), or
 *                 that an empty result does not confirm the delete}
 *   others        as coai_encode_exec_answer_images with out (err or out when is_error). */
int coai_encode_exec_outcome(coai_buf *out, const coai_exec_ref *x, const coai_exec_outcome *o,
                             const struct coai_image *images, size_t n, uint32_t ms,
                             unsigned step);
/* The reason given with a refused interaction query or exec (a model reads it). */
#ifndef COAI_QUERY_REFUSAL
#define COAI_QUERY_REFUSAL "Not available through this API client (cursor-oai): there is no " \
    "user here to approve it and no access to the user's accounts or environment. Carry on " \
    "without it."
#endif
/* Answer to an InteractionQuery: AgentClientMessage{6: InteractionResponse{1 id,
 * <query>: {...}}} with the result member matching the query's oneof field: 2 web search,
 * 3 ask-question, 4 mode switch, 5 Exa search, 6 Exa fetch, 7 create plan, 12 generate
 * image: {}; 8 setup VM environment: {success {}} (seen live in 2026). Where the
 * response has a typed outcome (Cursor's SDK, 2026) it is set, since an empty one
 * is neither yes nor no: 9 web_fetch_request: approved {} (Cursor fetches the page on its
 * own servers, nothing runs here; the autumn answer approved it too, untyped);
 * 10 pr_management: rejected(3){reason}; 11 mcp_auth: rejected(2){reason};
 * 13 replace_env_args: failure(2){error_message}; 14 connect_scm: rejected(2){reason};
 * reasons in words a model can read (COAI_QUERY_REFUSAL). Other kinds up to 63 get the
 * empty response: an unanswered query hangs the turn. Kinds outside 2..63 give
 * COAI_ERR_INVALID. */
int coai_encode_interaction_response(coai_buf *out, uint32_t id, int query);
/* McpStateExecResult.success{servers} for mcp_state_exec_args (exec 36), then the caller
 * sends stream_close: one server {1 server_name "Cursor Tools", 2 server_identifier
 * "cursor-tools", 5 tools = the run request's McpToolDefinitions, 7 status "ready"} when
 * there are tools and server_ids is empty or names "cursor-tools"; else no server. */
int coai_encode_exec_mcp_state(coai_buf *out, uint32_t id, coai_str exec_id,
                               const coai_tool *tools, size_t tool_count,
                               char *const *server_ids, size_t server_id_count);
/* An empty result of an exec kind (the precheck variants 41-43), in the result field
 * coai_exec_result_field(kind); then stream_close. Kinds outside 2-54 -> COAI_ERR_INVALID. */
int coai_encode_exec_empty_result(coai_buf *out, uint32_t id, coai_str exec_id, int kind);
/* A precheck result (41 shell, 42 MCP, 43 web fetch allowlist): {1 allowlisted} (false is
 * the empty result: "not allowlisted"); then stream_close. Other kinds -> COAI_ERR_INVALID. */
int coai_encode_exec_precheck(coai_buf *out, uint32_t id, coai_str exec_id, int kind,
                              int allowlisted);
/* subagent_result(28).error(2){2 error = reason} for subagent_args (exec 28, a Task /
 * subagent request the proxy cannot run); then stream_close. */
int coai_encode_exec_subagent_error(coai_buf *out, uint32_t id, coai_str exec_id,
                                    coai_str reason);

/* Exec results: AgentClientMessage{exec_client_message{1 id, 15 exec_id (when
 * non-empty), <result>}}. */
/* RequestContextResult.success{RequestContext{env}}: env from os_version (default
 * "darwin 24.0.0"), workspace (workspace_paths and project_folder), shell (default
 * "/bin/zsh") and time_zone; the other fields of *env are not used. */
int coai_encode_exec_request_context(coai_buf *out, uint32_t id, coai_str exec_id,
                                     const coai_run_params *env);
/* ShellResult: success when exit_code == 0, else failure; signal is never written. */
int coai_encode_exec_shell_result(coai_buf *out, uint32_t id, coai_str exec_id,
                                  coai_str command, coai_str cwd, int exit_code,
                                  coai_str out_text, coai_str err_text, int32_t ms);
/* McpResult.success{content = [text{text}], is_error (written only when true)}. */
int coai_encode_exec_mcp_result(coai_buf *out, uint32_t id, coai_str exec_id, coai_str text,
                                int is_error);

/* Refuse an exec request (the proxy never runs anything locally). Writes, for ex->kind:
 *   SHELL, SHELL_STREAM  shell_result.failure{command, working_directory, exit_code 1,
 *                        stderr = reason}
 *   WRITE                write_result.error{path, error = reason}
 *   DELETE               delete_result.error{path, error}
 *   GREP                 grep_result.error{error}
 *   READ                 read_result.error{path, error}
 *   LS                   ls_result.error{path, error}
 *   DIAGNOSTICS          diagnostics_result.error{path, error}
 *   REQUEST_CONTEXT      request_context_result.error{error}
 *   MCP                  mcp_result.error{error}
 *   FETCH                fetch_result.error{url, error}
 * each with id and exec_id; the caller then sends coai_encode_exec_stream_close().
 * Every other kind (background shell, MCP resources, screen recording, computer use,
 * unknown) has no error variant in the schema and gets ExecClientControlMessage.throw
 * {id, error = reason} (no stream_close after it): coai_exec_reject_is_result(kind)
 * tells which of the two a kind gets. */
struct coai_exec;
int coai_encode_exec_reject(coai_buf *out, const struct coai_exec *ex, coai_str reason);
/* 1 if coai_encode_exec_reject writes a result for this coai_exec_kind (so a
 * stream_close must follow), 0 if it writes a throw. */
int coai_exec_reject_is_result(int kind);
/* PART:ENCODE api end */

/* ======================================================================== */
/* PART:DECODE api (AgentServerMessage -> plain C events)                   */
/* ======================================================================== */

/* Which ExecServerMessage args member arrived (values = protobuf field numbers). */
typedef enum coai_exec_kind {
    COAI_EXEC_NONE = 0,
    COAI_EXEC_SHELL = 2,
    COAI_EXEC_WRITE = 3,
    COAI_EXEC_DELETE = 4,
    COAI_EXEC_GREP = 5,
    COAI_EXEC_READ = 7,
    COAI_EXEC_LS = 8,
    COAI_EXEC_DIAGNOSTICS = 9,
    COAI_EXEC_REQUEST_CONTEXT = 10,
    COAI_EXEC_MCP = 11,
    COAI_EXEC_SHELL_STREAM = 14,
    COAI_EXEC_BACKGROUND_SHELL = 16,
    COAI_EXEC_LIST_MCP_RESOURCES = 17,
    COAI_EXEC_READ_MCP_RESOURCE = 18,
    COAI_EXEC_FETCH = 20,
    COAI_EXEC_RECORD_SCREEN = 21,
    COAI_EXEC_COMPUTER_USE = 22,
    COAI_EXEC_SUBAGENT = 28,    /* subagent_args: answered with a typed SubagentError */
    COAI_EXEC_MCP_STATE = 36,   /* mcp_state_exec_args: answered with McpStateExecResult */
    COAI_EXEC_PRECHECK_FIRST = 41, /* 41-43: precheck variants, answered with an empty */
    COAI_EXEC_PRECHECK_LAST = 43   /* result of the same number */
    /* Any other args member arrives with kind = its field number (answered with a throw).
     * The envelope fields 1, 15, 19 (span_context) and 55 are never a kind. */
} coai_exec_kind;

/* The ExecClientMessage field number that carries the result of an exec kind: the same
 * number for 2-44 and 53-54, 45-51 -> 46-52, 52 -> 55 (seen live in 2026); 0 for
 * kinds outside 2-54. */
unsigned coai_exec_result_field(int kind);
/* The ExecServerMessage args member name of an exec kind where the schema (proto/agent.proto)
 * or Cursor's 2026 clients give one, e.g. 28 "subagent_args", 45 "pi_read_args";
 * NULL otherwise. */
const char *coai_exec_kind_name(int kind);
/* 1 when an exec of this kind is one of Cursor's own tool calls, the model's work that a
 * client's tool does (shell, shell_stream, background shell, read, write, delete, ls, grep,
 * diagnostics, fetch, record_screen, computer_use, subagent, the Pi tools 45-51, the
 * mini-SWE-agent shell 52); 0 for MCP (11), the CLI's own plumbing (request_context,
 * mcp_state, MCP resources, prechecks, the classifier ...) and any kind not listed. These
 * are what x-cursor-agent-allowed-tools hides (coai_run_tools_header). */
int coai_exec_is_native_tool(int kind);

/* Who owns the tools of a run (issue 31 item 1).
 *   COAI_TOOLS_CLIENT (default): a run whose request carries tools tells Cursor, with the
 *     request header x-cursor-agent-allowed-tools: mcp_tool_call,get_mcp_tools_tool_call on
 *     every call of the run (RunSSE, each BidiAppend, the HTTP/2 Run), that its model may
 *     use only MCP tools: the client's tools, sent as AgentRunRequest.mcp_tools. The model
 *     calls them by their own names with their own arguments (an mcp exec), and none of
 *     Cursor's own tools.
 *   COAI_TOOLS_CURSOR: no such header; Cursor's model also has its own tools (native execs),
 *     which are mapped onto the client's tools (coai_exec_map). */
typedef enum coai_tool_mode { COAI_TOOLS_CLIENT = 0, COAI_TOOLS_CURSOR = 1 } coai_tool_mode;
/* "client" or "cursor" (exactly) -> *mode and 0; a NULL/empty view -> COAI_TOOLS_CLIENT and
 * 0; anything else -1 (*mode untouched). */
int coai_tool_mode_parse(coai_str s, coai_tool_mode *mode);
/* The allowed-tools header of a run in `mode` whose request carries tool_count tools (the
 * count after tool_choice "none", coai_request.tool_count): 1 with *name and *value set
 * (static text, lower-case name, no CR/LF) when the run carries it, i.e. in client mode with
 * at least one tool; else 0 with both set to empty views. The one place that decides it:
 * every transport's head takes it from here. NULL name/value are allowed. */
int coai_run_tools_header(coai_tool_mode mode, size_t tool_count, coai_str *name,
                          coai_str *value);

/* An exec request. Views point into storage owned by the coai_msg that holds it. */
typedef struct coai_exec {
    coai_exec_kind kind;
    uint32_t id;                /* echoed in results and stream_close */
    coai_str exec_id;           /* echoed when non-empty */
    coai_str command;           /* shell: command */
    coai_str cwd;               /* shell: working_directory */
    coai_str path;              /* read/write/ls/delete/grep: path */
    int has_path;               /* grep path / ls path present */
    coai_str content;           /* write: file_text */
    coai_str pattern;           /* grep: pattern */
    coai_str glob;              /* grep: glob (non-empty -> the "glob" tool) */
    coai_str url;               /* fetch: url */
    coai_str mcp_name;          /* mcp: name ("cursor-tools-<tool>") */
    coai_str tool_name;         /* mcp: tool_name */
    coai_str provider;          /* mcp: provider_identifier */
    coai_str tool_call_id;      /* shell/read/write/ls/grep/mcp tool_call_id when sent */
    coai_str args_json;         /* mcp: args as compact JSON, members in wire order */
    int32_t timeout;            /* shell: ShellArgs.timeout (3), as sent */
    int timeout_behavior;       /* shell: 13 (2 = put the command in the background) */
    uint64_t hard_timeout_ms;   /* shell: 14, 0 = none */
    coai_str description;       /* shell: 15, the model's description of the command */
    int close_stdin;            /* shell: 17 */
    coai_str run_conversation_id, run_request_id;   /* shell: 21, 23 */
    int accept_hook_contexts;   /* envelope field 55 (a bool on every 2026-10 exec) */
    char *const *server_ids;    /* mcp_state: server_identifiers (NUL-terminated copies) */
    size_t server_id_count;     /* 0: every server */
} coai_exec;

/* TurnEndedUpdate's token counts (fields 1-5; all 0 and present 0 when it had none). */
typedef struct coai_turn_usage {
    int64_t input, output, cache_read, cache_write, reasoning;
    int present;                /* at least one of the five fields arrived */
} coai_turn_usage;

typedef enum coai_msg_kind {
    COAI_MSG_NONE = 0,          /* nothing we act on (unknown or empty message) */
    COAI_MSG_TEXT,              /* text: assistant text delta */
    COAI_MSG_THINKING,          /* text: reasoning delta */
    COAI_MSG_THINKING_DONE,     /* value: thinking_duration_ms */
    COAI_MSG_TOKENS,            /* value: token_delta count */
    COAI_MSG_TOOL_STARTED,      /* tool, call_id */
    COAI_MSG_TOOL_COMPLETED,    /* tool, call_id */
    COAI_MSG_TOOL_PARTIAL,      /* tool, call_id, text = args_text_delta */
    COAI_MSG_HEARTBEAT,
    COAI_MSG_TURN_ENDED,        /* turn: the token counts when Cursor sent them */
    COAI_MSG_STEP,              /* step_started / summaries / other informational updates */
    COAI_MSG_CHECKPOINT,        /* value = used_tokens, value2 = max_tokens (0 if absent) */
    COAI_MSG_EXEC,              /* exec */
    COAI_MSG_EXEC_ABORT,        /* id */
    COAI_MSG_KV_GET,            /* id, blob_id */
    COAI_MSG_KV_SET,            /* id, blob_id, blob_data */
    COAI_MSG_QUERY              /* id, query (InteractionQuery oneof field number, 2-63) */
} coai_msg_kind;

/* One decoded AgentServerMessage. Zero-init before first use; views stay valid
 * until the next coai_msg_decode() on the same object or coai_msg_free(). */
typedef struct coai_msg {
    coai_msg_kind kind;
    coai_str text;              /* TEXT, THINKING, TOOL_PARTIAL */
    int64_t value;              /* TOKENS, THINKING_DONE, CHECKPOINT used_tokens */
    int64_t value2;             /* CHECKPOINT max_tokens */
    int tool;                   /* TOOL_*: ToolCall oneof field number (1 shell, 12 edit, ...) */
    coai_str call_id;           /* TOOL_* */
    uint32_t id;                /* KV id, EXEC_ABORT id, QUERY id */
    int query;                  /* QUERY: 2 web_search, 3 ask_question, 4 switch_mode, ... */
    coai_str blob_id;           /* KV_GET, KV_SET (raw bytes) */
    coai_str blob_data;         /* KV_SET (raw bytes) */
    coai_exec exec;             /* EXEC */
    coai_str raw;               /* CHECKPOINT: the ConversationStateStructure bytes;
                                 * KV_GET/KV_SET: KvServerMessage.metadata (field 4) */
    int has_raw;                /* KV: metadata was present (even empty) */
    int no_blob_data;           /* KV_SET: the set_blob had no blob_data field at all */
    int64_t value3;             /* STEP 17 (step_completed): step_duration_ms */
    coai_turn_usage turn;       /* TURN_ENDED */
    void *priv_;                /* private decode storage */
    coai_buf scratch_;          /* private */
} coai_msg;
#ifndef COAI_MAX_VALUE_DEPTH
#define COAI_MAX_VALUE_DEPTH 64   /* JSON containers in McpArgs.args, the args object included */
#endif
#ifndef COAI_MAX_PB_FIELDS
#define COAI_MAX_PB_FIELDS 65536  /* fields in one decoded leaf message / members of one object */
#endif

/* Decode one AgentServerMessage (the payload of a 0x00 data envelope) into *m.
 * m must be zero-initialised before first use; it can be reused for every frame.
 * All views in *m point into storage owned by m (never into p) and stay valid until
 * the next coai_msg_decode() on m or coai_msg_free(m). Empty views are "" (never NULL).
 * Returns COAI_OK (m->kind says what arrived; COAI_MSG_NONE for an empty payload or
 * anything we do not act on), COAI_ERR_PROTO for malformed protobuf (never reads
 * outside [p, p+n)), COAI_ERR_TOO_BIG over COAI_MAX_PB_FIELDS, COAI_ERR_NOMEM.
 * After an error m->kind is COAI_MSG_NONE.
 *
 * Per kind:
 *   TEXT / THINKING      text (strlen of nanopb's copy: cut at an embedded NUL byte)
 *   THINKING_DONE        value = thinking_duration_ms
 *   TOKENS               value = token_delta.tokens
 *   TOOL_STARTED/_COMPLETED/_PARTIAL  call_id, tool (0 if absent), PARTIAL: text = args_text_delta
 *   STEP                 value = InteractionUpdate field number: 6 user_message_appended,
 *                        9 summary, 10 summary_started, 11 summary_completed,
 *                        12 shell_output_delta, 15 tool_call_delta, 16 step_started
 *                        (then value2 = step_id), 17 step_completed (value2 = step_id,
 *                        value3 = step_duration_ms). Informational only.
 *   TURN_ENDED           turn = TurnEndedUpdate's input, output, cache-read, cache-write
 *                        and reasoning token counts (present = any of them arrived)
 *   CHECKPOINT           value = used_tokens, value2 = max_tokens (0 when absent)
 *   EXEC                 exec.kind/id/exec_id plus the kind's fields (see coai_exec);
 *                        has_path: grep path / ls path present on the wire (even if "").
 *                        mcp: args_json = JSON.stringify of the args map as the original
 *                        builds it (JS object semantics: array-index keys first in numeric
 *                        order, a repeated key keeps its first place and its last value,
 *                        "" and "__proto__" keys dropped, empty Value -> member dropped /
 *                        null in a list, a leading UTF-8 BOM of a string is dropped like
 *                        TextDecoder does). Kinds without fields (request_context,
 *                        diagnostics, ...) only set kind/id/exec_id. shell: also timeout,
 *                        timeout_behavior, hard_timeout_ms, description, close_stdin.
 *                        mcp_state: server_ids. An args member we do not know (any
 *                        length-delimited field but 1, 15, 19, 55) gives kind = its number.
 *                        accept_hook_contexts = envelope field 55.
 *   EXEC_ABORT           id
 *   KV_GET / KV_SET      id, blob_id, KV_SET: blob_data (raw bytes, exact length) and
 *                        no_blob_data (a set_blob may come without data: ack it);
 *                        raw/has_raw = the opaque metadata (field 4) to echo back
 *   CHECKPOINT (also)    raw = the whole ConversationStateStructure, for a later
 *                        AgentRunRequest.conversation_state (checkpoint resume)
 *   QUERY                id, query = InteractionQuery oneof field number (0 if none)
 * When a oneof member is repeated (never seen in practice) the last one wins. String
 * fields other than exec_id, blob_id, blob_data and args_json come from nanopb's
 * NUL-terminated copies, so they end at an embedded NUL byte. */
coai_result coai_msg_decode(coai_msg *m, const void *p, size_t n);
/* Free everything m owns; m is zero again afterwards (reusable). */
void coai_msg_free(coai_msg *m);

/* ---- What this version does not know ----
 * Cursor changes its protocol every few weeks. These report what a message or an error
 * carried that this build's schema (the .proto files, plus the exec kinds and interaction
 * queries the product answers or names without a declaration: coai_exec_kind_name, queries
 * 10, 11, 13, 14) does not declare, so the caller can count it and say so.
 * Nothing here changes what coai_msg_decode does with the same bytes. */
typedef struct coai_unknown {
    const char *message;        /* static: the message it came in ("AgentServerMessage",
                                 * "ExecServerMessage", ...), or "error" for an error's
                                 * code or detail */
    const char *what;           /* static: "field", or for a oneof: "message kind", "update
                                 * kind", "exec kind", "query kind", "tool call kind", ...;
                                 * for errors: "code", "ErrorDetails.error", "detail type" */
    uint32_t field;             /* field number (protobuf), or the numeric code (errors) */
    int wire;                   /* its wire type 0-5; -1 for errors */
    int expected_wire;          /* a declared field that came with another wire type: the
                                 * one this build expects; else -1 */
    char name[72];              /* errors: the code or type as sent (printable ASCII, cut);
                                 * else "" */
} coai_unknown;

/* Walk one AgentServerMessage (a 0x00 envelope's payload) through every message
 * coai_msg_decode reads and note each field whose number the schema does not declare, or
 * that came with a wire type the schema does not allow for it. Fills up to max records
 * (a (message, field, wire) seen twice in one message is reported once) and returns how
 * many it found (can exceed max: past max, a repeat may be counted again). Never reads outside [p, p+n);
 * malformed bytes end the walk quietly (coai_msg_decode reports them). No allocation. */
size_t coai_msg_unknowns(const void *p, size_t n, coai_unknown *out, size_t max);

/* The same for a parsed trailer or end-stream: a status or Connect code outside the ones
 * this build names, an ErrorDetails.error value past coai_error_details_name's table, and
 * a detail type other than aiserver.v1.ErrorDetails (st->unknown_code/_detail). */
size_t coai_status_unknowns(const coai_status *st, coai_unknown *out, size_t max);

/* The redacted shape of a protobuf message, for a transcript that is safe to publish:
 * field numbers, wire types and lengths, never a byte of a string, never a value.
 * message: the type's name ("AgentServerMessage", "AgentClientMessage", or NULL when
 * not known; then every length-delimited field is guessed). Grammar:
 *   shape  := NAME? "{" (field (" " field)*)? "}"
 *   field  := "!"? NUM "/" WIRE ("[" LEN "]" shape?)?
 * "!" marks a field the schema does not declare; a length-delimited field is followed by
 * its shape when the schema says it is a message, or, when the schema does not know it,
 * when it parses as a message and does not read as text. Declared strings and bytes are
 * never opened. Output stops at max_out bytes with "..." (0: no limit); depth 24.
 * Returns COAI_OK, COAI_ERR_PROTO (the shape of what parsed, then "?"), COAI_ERR_NOMEM. */
coai_result coai_pb_shape(coai_buf *out, const char *message, const void *p, size_t n,
                          size_t max_out);
/* PART:DECODE api end */

/* ======================================================================== */
/* PART:HTTP api (request parser, chunked decoder, response parser, Host)   */
/* ======================================================================== */
/* HTTP/1.1 for server.c: a strict request-head parser, an in-place chunked body
 * decoder, a bounded response-head parser for the upstream side, and the
 * security checks done before auth (Host allow-list against DNS rebinding,
 * Origin, JSON content type, constant-time key compare).
 *
 * Head parsers are stateless like picohttpparser: pass the whole data received
 * so far each time. They return the head length (> COAI_MORE) when the head is
 * complete, COAI_MORE when more bytes are needed, or a negative coai_result.
 * Every coai_str they fill points into the caller's buffer and stays valid while
 * that buffer does. A header that is absent has ptr == NULL; present but empty
 * has ptr != NULL and len 0.
 *
 * Request strictness (each error sets *status to the HTTP status to answer):
 *   400  bad request-line syntax; NUL/CTL/DEL in method, target, names or values;
 *        whitespace before a colon; empty name; obs-fold (a line starting with
 *        SP/HTAB); bare LF or CR without LF anywhere in the head (we do not accept
 *        bare LF line endings: no real client needs them and accepting them is a
 *        smuggling lever); no Host on HTTP/1.1; Host, Content-Length,
 *        Transfer-Encoding, Origin, Content-Type or Authorization sent twice;
 *        Content-Length not 1*DIGIT or over INT64_MAX ("-1", "1e3", "5, 5");
 *        Transfer-Encoding with Content-Length, on HTTP/1.0, or empty; a target
 *        that is not origin-form ("/...") or "*" with OPTIONS (absolute-form too)
 *   501  Transfer-Encoding other than exactly "chunked" (case-insensitive)
 *   414  request line over COAI_HTTP_MAX_LINE bytes (without CRLF)
 *   431  a header line over COAI_HTTP_MAX_LINE, more than COAI_HTTP_MAX_HEADERS
 *        headers, or a head (with its blank line) over COAI_HTTP_MAX_HEAD
 *   505  a well-formed version other than HTTP/1.0 or HTTP/1.1
 * Errors are returned as soon as the bytes that prove them have arrived, so a
 * prefix of the input gives COAI_MORE or the same error as the whole input.
 * Empty lines (CRLF) before the request line are skipped (RFC 9112 2.2). */

#ifndef COAI_HTTP_MAX_HEADERS
#define COAI_HTTP_MAX_HEADERS 100              /* header lines in one head; more -> 431 */
#endif
#ifndef COAI_HTTP_MAX_LINE
#define COAI_HTTP_MAX_LINE (8u * 1024u)        /* request line (-> 414) or a header line (-> 431) */
#endif
#ifndef COAI_HTTP_MAX_HEAD
#define COAI_HTTP_MAX_HEAD (32u * 1024u)       /* head incl. blank line (-> 431); <= INT_MAX */
#endif
#ifndef COAI_HTTP_MAX_BODY
#define COAI_HTTP_MAX_BODY (32u * 1024u * 1024u) /* request body cap server.c enforces (-> 413) */
#endif
#ifndef COAI_HTTP_MAX_CHUNK_LINE
#define COAI_HTTP_MAX_CHUNK_LINE 1024u         /* chunk-size line incl. extensions, without CRLF */
#endif
#ifndef COAI_HTTP_CHUNK_OVERHEAD_MIN
#define COAI_HTTP_CHUNK_OVERHEAD_MIN (100u * 1024u) /* framing bytes before the 80% flood rule */
#endif

typedef struct coai_http_header {
    coai_str name;              /* as sent (case kept); a token */
    coai_str value;             /* leading and trailing SP/HTAB removed */
} coai_http_header;

typedef struct coai_http_request {
    coai_str method;            /* token, case-sensitive ("POST") */
    coai_str target;            /* origin-form "/path?query", or "*" (OPTIONS only) */
    coai_str path;              /* target up to the first '?' */
    int minor_version;          /* 0 or 1 */
    coai_http_header headers[COAI_HTTP_MAX_HEADERS];
    size_t header_count;
    int64_t content_length;     /* -1 = no Content-Length */
    int chunked;                /* Transfer-Encoding: chunked (use coai_chunked_feed) */
    int keep_alive;             /* 1.1: unless "Connection: close"; 1.0: only with keep-alive */
    int expect_continue;        /* HTTP/1.1 with "Expect: 100-continue" */
    coai_str host;              /* Host value (ptr NULL when absent) */
    int host_count;             /* 0 or 1 after success (two Host lines -> 400) */
    coai_str origin;            /* Origin value (ptr NULL when absent) */
    coai_str content_type;      /* Content-Type value (ptr NULL when absent) */
    coai_str authorization;     /* Authorization value (ptr NULL when absent) */
} coai_http_request;

/* Parse a request head from buf[0..len) (all bytes received so far). Returns the
 * head length (> COAI_MORE; the body or the next pipelined request starts there),
 * COAI_MORE, or COAI_ERR_HTTP / COAI_ERR_TOO_BIG with *status = 400, 414, 431, 501
 * or 505 (*status = 0 otherwise). The body cap (413) is the caller's to apply. */
int coai_http_parse_request(const char *buf, size_t len, coai_http_request *rq, int *status);

/* First header named `name` (case-insensitive); {NULL, 0} when there is none. */
coai_str coai_http_header_get(const coai_http_header *h, size_t n, const char *name);

/* Chunked body decoder. Zero-init; set max_body (0 = unlimited) before the first
 * feed. Each call decodes buf[0..len) in place: the payload bytes are moved to
 * buf[0..*out_len). *consumed is len on COAI_MORE; on COAI_DONE (last chunk and
 * trailers read) it is where the body ended, and buf[*consumed..len) belongs to
 * the next request. Trailers are checked and dropped. Errors (sticky):
 * COAI_ERR_HTTP (400) for bad or over-16-digit hex, bare LF, a missing CRLF after
 * the data, a chunk-size line over COAI_HTTP_MAX_CHUNK_LINE, trailers over
 * COAI_HTTP_MAX_HEAD, or framing overhead over COAI_HTTP_CHUNK_OVERHEAD_MIN and
 * above 80% of the bytes (a 1-byte-chunk flood); COAI_ERR_TOO_BIG (413) as soon as
 * a chunk size takes the declared total over max_body. On an error *consumed and
 * *out_len say how far decoding got. Splitting the input differently never
 * changes the result. */
typedef struct coai_chunked_decoder {
    size_t max_body;            /* 0 = unlimited; else payload bytes allowed */
    uint64_t total;             /* payload bytes declared by chunk sizes so far */
    uint64_t overhead;          /* framing bytes so far (sizes, CRLFs, extensions) */
    uint64_t remaining;         /* private: data bytes left in this chunk */
    size_t line_len;            /* private: bytes in the current size or trailer line */
    size_t trailer_len;         /* private: trailer bytes so far */
    int state;                  /* private */
    int digits;                 /* private: hex digits in this size line */
    int err;                    /* sticky error, 0 when none */
} coai_chunked_decoder;

coai_result coai_chunked_feed(coai_chunked_decoder *d, char *buf, size_t len,
                              size_t *consumed, size_t *out_len);

/* An upstream response head. Lenient where real servers vary (bare LF line
 * endings, a missing reason phrase, repeated identical Content-Length, control
 * bytes other than NUL in values) but bounded by the same limits. */
typedef struct coai_http_response {
    int status;                 /* 100..599 */
    int minor_version;          /* 0 or 1 */
    coai_str reason;            /* reason phrase, may be empty */
    coai_http_header headers[COAI_HTTP_MAX_HEADERS];
    size_t header_count;
    int64_t content_length;     /* -1 = none (or overridden by chunked); 0 when no_body */
    int chunked;                /* Transfer-Encoding: chunked */
    int keep_alive;             /* 0 when the connection must close after this response */
    int no_body;                /* 1xx, 204, 304: no body whatever the headers say */
    coai_str content_type;      /* Content-Type value (ptr NULL when absent) */
} coai_http_response;

/* Body framing: no_body (or a HEAD request) -> none; chunked -> coai_chunked_feed;
 * content_length >= 0 -> that many bytes; else read until close (keep_alive = 0).
 * Returns the head length (> COAI_MORE), COAI_MORE, COAI_ERR_HTTP (malformed, or a
 * Transfer-Encoding we cannot decode) or COAI_ERR_TOO_BIG (a limit). A 1xx head is
 * followed by another head. Chunked with Content-Length: chunked wins, keep_alive 0. */
int coai_http_parse_response(const char *buf, size_t len, coai_http_response *rs);

/* Host allow-list: 1 when host is exactly localhost, 127.0.0.1, [::1] or the name of one
 * of extra[0..n_extra) (case-insensitive), followed by nothing or ":<port>" (1-5 digits).
 * The port: port > 0 must equal it, port <= 0 accepts any (the DNS-rebinding guard needs
 * the name; a tunnel or forwarder in front of the server brings its own port). An extra
 * entry "name:port" pins that name, a built-in one too: it is then accepted only with one
 * of the ports its entries list (no port in the header counts as 80), whatever `port`
 * says. Rejects an empty host, ":1234", "localhost.evil.com", "localhost." and
 * "user@localhost". */
int coai_http_host_allowed(coai_str host, const coai_str *extra, size_t n_extra, int port);

/* Origin allow-list: 1 for "http://" or "https://" + a host accepted by
 * coai_http_host_allowed (same port rule) with no path. "null", empty and
 * anything else -> 0. An absent Origin header is the caller's to allow. */
int coai_http_origin_allowed(coai_str origin, int port, const coai_str *extra, size_t n_extra);

/* 1 when a Content-Type is application/json (case-insensitive) with optional
 * parameters; a charset parameter must be utf-8. */
int coai_http_is_json(coai_str content_type);

/* Constant-time equality of two secrets: compares SHA-256 digests, so neither the
 * content nor the length of the expected key leaks through timing. 0 when either
 * is empty, so an empty configured key never matches. */
int coai_http_token_equal(coai_str a, coai_str b);

/* The token of "Bearer <token>" (scheme case-insensitive, spaces trimmed);
 * {NULL, 0} when the scheme is not Bearer or the token is empty. */
coai_str coai_http_bearer(coai_str authorization);

/* The value of query parameter `name` in a request target ("/p?a=1&key=v"): a view into
 * target, not percent-decoded; an empty value has ptr set and len 0. {NULL, 0} when the
 * target has no such parameter (or no query). The first one wins. */
coai_str coai_http_query_param(coai_str target, const char *name);

/* The value of cookie `name` in a Cookie header value ("a=1; name=v"): a view, spaces
 * around the pair trimmed; {NULL, 0} when absent. The first one wins. */
coai_str coai_http_cookie(coai_str header, const char *name);
/* PART:HTTP api end */

/* ======================================================================== */
/* PART:H2 api (HTTP/2 client: frames, HPACK, one connection, sans-IO)      */
/* ======================================================================== */
/* An HTTP/2 client connection (RFC 9113) and its header compression, HPACK (RFC 7541),
 * without sockets: the caller moves bytes, this part says what they mean and what to
 * send back. One coai_h2_conn is one connection (after TLS with ALPN "h2"); it carries
 * many streams, each one request and its response.
 *
 * HOW server.c DRIVES A CONNECTION
 *     coai_h2_conn *c = calloc(1, sizeof *c);     // about 18 KB (stream table, HPACK)
 *     coai_h2_opts o = {0};                        // all zero: the defaults below
 *     coai_h2_init(c, &o);                         // queues the preface + our SETTINGS
 *     for (;;) {
 *         // 1. Write what the connection has queued: preface, SETTINGS and their acks,
 *         //    PING acks, WINDOW_UPDATEs, HEADERS, DATA, RST_STREAM, GOAWAY. Partial
 *         //    writes are fine: say how much went out.
 *         while ((n = coai_h2_want_write(c, &p)) > 0)
 *             coai_h2_wrote(c, tls_write(p, n));
 *         // 2. Read, feed, and take the events those bytes carried.
 *         n = tls_read(buf, sizeof buf);             // 0 / error: the connection is gone
 *         coai_h2_feed(c, buf, n);                   // copies; any split of the bytes works
 *         while ((r = coai_h2_next(c, &ev)) == COAI_OK) switch (ev.type) {
 *             case COAI_H2_EV_HEADERS:   // ev.status (the response) or ev.trailers;
 *                                        // ev.headers[0..ev.n_headers), ev.end_stream
 *             case COAI_H2_EV_DATA:      // ev.data; once the application has *used* the
 *                 // bytes (written them on), return the window, so a slow consumer
 *                 // holds the server back instead of growing a buffer:
 *                 coai_h2_consumed(c, ev.stream, ev.data.len);
 *             case COAI_H2_EV_RESET:     // the stream is gone (ev.code; ev.local: we reset it)
 *             case COAI_H2_EV_REFUSED:   // not processed by the server (GOAWAY with a lower
 *                                        // last id, or REFUSED_STREAM): retry it elsewhere
 *             case COAI_H2_EV_WINDOW:    // send room grew (ev.stream, 0 = every stream):
 *                                        // send what was waiting
 *             case COAI_H2_EV_GOAWAY:    // no new streams here; lower ones still finish
 *             case COAI_H2_EV_PING_ACK:  // ev.data = the 8 bytes we sent
 *             case COAI_H2_EV_SETTINGS:  // the server's settings arrived (c->peer)
 *         }
 *         if (r < 0) { ... }  // connection error: a GOAWAY is queued (c->error says
 *                             // which code); write it and close. COAI_MORE: read more.
 *     }
 *   A stream (request):
 *     coai_h2_header h[] = { {COAI_STR_LIT(":method"), COAI_STR_LIT("POST")},
 *         {COAI_STR_LIT(":scheme"), COAI_STR_LIT("https")}, {":path"...}, {":authority"...},
 *         {COAI_STR_LIT("content-type"), COAI_STR_LIT("application/connect+proto")} };
 *     id = coai_h2_open(c, h, 5, 0, my_run);    // > 0: the stream id; 0: the server's
 *         // concurrent-stream limit is reached (wait for a stream to end, or use another
 *         // connection); < 0: this connection takes no new streams (GOAWAY, error)
 *     coai_h2_send_data(c, id, p, n, end, &sent);  // sends what the windows allow now
 *     room = coai_h2_send_room(c, id);             // what send_data would accept now
 *         // The rest waits for COAI_H2_EV_WINDOW; reading goes on meanwhile, so a big
 *         // upload never stops the responses on the same connection.
 *     coai_h2_send_data(c, id, NULL, 0, 1, &sent); // END_STREAM alone (needs no window)
 *     coai_h2_reset(c, id, COAI_H2_CANCEL);        // abandon a stream (RST_STREAM)
 *   A stream is forgotten once both sides ended (or on a reset): after the server's
 *   end_stream, end ours too (send_data with end_stream) or reset it, or its slot stays
 *   taken. A gRPC/Connect "trailers-only" answer is one HEADERS event with a status and
 *   end_stream (trailers = 0); trailers after a body come as trailers = 1.
 *   The connection:
 *     coai_h2_ping(c, opaque8);      // every 20 s when idle; the ack comes as an event
 *     coai_h2_goaway(c, COAI_H2_NO_ERROR);   // polite close: no new streams either way
 *     coai_h2_active(c)              // open streams (0 and a GOAWAY: time to close)
 *     c->settings_acked              // 0 long after init: the server ignores us
 *                                    // (coai_h2_goaway(c, COAI_H2_SETTINGS_TIMEOUT))
 *     coai_h2_free(c);
 *
 * EVENT LIFETIMES: ev.headers and ev.data point into the connection and stay valid until
 *   the next coai_h2_next or coai_h2_feed call. ev.user is the pointer given to
 *   coai_h2_open. After an event that ends a stream (RESET, REFUSED, or the second side's
 *   end_stream) the stream id is forgotten; coai_h2_consumed on it still returns the
 *   connection window.
 *
 * WHAT IS CHECKED (server bytes are untrusted): frame sizes against SETTINGS_MAX_FRAME_SIZE,
 *   frame lengths per type, stream ids (even or idle ids, stream 0 where a stream is
 *   needed), the first frame being SETTINGS, CONTINUATION sequences (nothing may come
 *   between; their total is capped by COAI_H2_MAX_HEADER_BLOCK), flow control (a server
 *   overrunning a window -> FLOW_CONTROL_ERROR; WINDOW_UPDATE past 2^31-1 or of 0), setting
 *   values, PUSH_PROMISE (we send ENABLE_PUSH=0: PROTOCOL_ERROR), HPACK (any malformed
 *   block -> COMPRESSION_ERROR), response heads (:status first and alone among
 *   pseudo-headers, lowercase names, no connection-specific fields, DATA before a head,
 *   trailers without END_STREAM -> the stream is reset with PROTOCOL_ERROR). Connection
 *   errors queue a GOAWAY and make coai_h2_next return COAI_ERR_H2 from then on; stream
 *   errors queue an RST_STREAM and report COAI_H2_EV_RESET with local = 1. PRIORITY and
 *   frames of unknown types are ignored. 1xx heads are skipped.
 *
 * FLOODS (CVE-2019-9512/9515/9518, as nghttp2 bounds them): every PING and SETTINGS queues
 *   an ack. A server that sends them faster than it reads the acks, so that more than
 *   COAI_H2_MAX_OUTBOUND_ACK of them wait in the output at once (queued and not all reported
 *   by coai_h2_wrote), gets GOAWAY ENHANCE_YOUR_CALM, as do more than
 *   COAI_H2_MAX_EMPTY_FRAMES empty DATA frames in a row (no bytes but padding, no
 *   END_STREAM) and a header block that decodes to over COAI_H2_MAX_HEADER_WORK bytes;
 *   c->error_why says which. What else the output holds is bounded by the caller: stop reading while
 *   coai_h2_want_write reports more than a few dozen KB, so a server that does not read
 *   cannot make the connection buffer what it sends us.
 *
 * HPACK on its own: coai_hpack_decode (complete: Huffman, dynamic table, size updates,
 *   header list limit) and coai_hpack_encode (static table + literals without indexing,
 *   no Huffman: nothing for the server's decoder to remember).
 */

#ifndef COAI_HPACK_TABLE
#define COAI_HPACK_TABLE 4096u                 /* our SETTINGS_HEADER_TABLE_SIZE, the most */
#endif                                         /* a size update may ask (RFC 7541 4.2) */
#ifndef COAI_H2_MAX_HEADER_LIST
#define COAI_H2_MAX_HEADER_LIST (64u * 1024u)  /* SETTINGS_MAX_HEADER_LIST_SIZE we send */
#endif
#ifndef COAI_H2_MAX_HEADER_BLOCK
#define COAI_H2_MAX_HEADER_BLOCK (256u * 1024u) /* HEADERS + CONTINUATION bytes (-> GOAWAY) */
#endif
#ifndef COAI_H2_MAX_HEADER_WORK
#define COAI_H2_MAX_HEADER_WORK (1024u * 1024u) /* decoded bytes per header block (-> GOAWAY) */
#endif
#ifndef COAI_H2_MAX_OUTBOUND_ACK
#define COAI_H2_MAX_OUTBOUND_ACK 1000          /* acks queued, not yet written (-> GOAWAY) */
#endif
#ifndef COAI_H2_MAX_EMPTY_FRAMES
#define COAI_H2_MAX_EMPTY_FRAMES 1000          /* empty DATA frames in a row (-> GOAWAY) */
#endif
#ifndef COAI_H2_MAX_STREAMS
#define COAI_H2_MAX_STREAMS 256                /* streams one connection tracks at once */
#endif
#ifndef COAI_H2_STREAM_WINDOW
#define COAI_H2_STREAM_WINDOW (256u * 1024u)   /* our SETTINGS_INITIAL_WINDOW_SIZE */
#endif

#define COAI_H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"   /* 24 bytes */

/* Frame types (RFC 9113 6) and flags. */
enum {
    COAI_H2_DATA = 0, COAI_H2_HEADERS = 1, COAI_H2_PRIORITY = 2, COAI_H2_RST_STREAM = 3,
    COAI_H2_SETTINGS = 4, COAI_H2_PUSH_PROMISE = 5, COAI_H2_PING = 6, COAI_H2_GOAWAY = 7,
    COAI_H2_WINDOW_UPDATE = 8, COAI_H2_CONTINUATION = 9
};
enum {
    COAI_H2_FLAG_END_STREAM = 0x1, COAI_H2_FLAG_ACK = 0x1, COAI_H2_FLAG_END_HEADERS = 0x4,
    COAI_H2_FLAG_PADDED = 0x8, COAI_H2_FLAG_PRIORITY = 0x20
};
/* Settings identifiers (RFC 9113 6.5.2). */
enum {
    COAI_H2_SET_HEADER_TABLE_SIZE = 1, COAI_H2_SET_ENABLE_PUSH = 2,
    COAI_H2_SET_MAX_CONCURRENT_STREAMS = 3, COAI_H2_SET_INITIAL_WINDOW_SIZE = 4,
    COAI_H2_SET_MAX_FRAME_SIZE = 5, COAI_H2_SET_MAX_HEADER_LIST_SIZE = 6
};
/* Error codes (RFC 9113 7), in RST_STREAM and GOAWAY. */
enum {
    COAI_H2_NO_ERROR = 0, COAI_H2_PROTOCOL_ERROR = 1, COAI_H2_INTERNAL_ERROR = 2,
    COAI_H2_FLOW_CONTROL_ERROR = 3, COAI_H2_SETTINGS_TIMEOUT = 4, COAI_H2_STREAM_CLOSED = 5,
    COAI_H2_FRAME_SIZE_ERROR = 6, COAI_H2_REFUSED_STREAM = 7, COAI_H2_CANCEL = 8,
    COAI_H2_COMPRESSION_ERROR = 9, COAI_H2_CONNECT_ERROR = 10, COAI_H2_ENHANCE_YOUR_CALM = 11,
    COAI_H2_INADEQUATE_SECURITY = 12, COAI_H2_HTTP_1_1_REQUIRED = 13
};
const char *coai_h2_error_str(uint32_t code);   /* "PROTOCOL_ERROR", ...; "unknown" */

/* One header field. Names are lowercase (HTTP/2 requires it). */
typedef struct coai_h2_header {
    coai_str name;
    coai_str value;
} coai_h2_header;

/* First field named `name` (exact, lowercase); {NULL, 0} when there is none. */
coai_str coai_h2_header_find(const coai_h2_header *h, size_t n, const char *name);

/* ---- HPACK ---- */

/* A decoded header list. Zero-init; reused by each decode (memory kept); _free at the end. */
typedef struct coai_hpack_list {
    const coai_h2_header *v;    /* v[0..n): views into this list's memory, valid until the
                                   next decode into it or _free */
    size_t n;
    size_t size;                /* RFC 7541 4.1 size: sum of name + value + 32 */
    coai_buf text;              /* private: the decoded strings */
    coai_buf offs;              /* private: their offsets while decoding */
    coai_buf arr;               /* private: v */
} coai_hpack_list;
void coai_hpack_list_free(coai_hpack_list *l);

/* The decoder's dynamic table (RFC 7541 2.3.2), in fixed storage. Zero-init is a decoder
 * for max_size = COAI_HPACK_TABLE; set max_size / max_list before the first decode. */
typedef struct coai_hpack_entry {
    uint32_t off;               /* into mem */
    uint32_t name_len;
    uint32_t value_len;
} coai_hpack_entry;
typedef struct coai_hpack_decoder {
    size_t max_size;            /* the SETTINGS_HEADER_TABLE_SIZE we sent: size updates above
                                   it are errors; 0 -> COAI_HPACK_TABLE (also the cap) */
    size_t max_list;            /* header list size limit; 0 -> COAI_H2_MAX_HEADER_LIST */
    size_t max_work;            /* bytes one block may decode to (names and values, kept or
                                   not); 0 -> COAI_H2_MAX_HEADER_WORK */
    size_t cap;                 /* current table capacity (the last size update) */
    size_t size;                /* current table size in RFC octets (entries + 32 each) */
    size_t count;               /* entries */
    size_t head;                /* private: ring index of the oldest entry */
    size_t start, end;          /* private: live bytes of mem */
    int ready;                  /* private: cap set */
    int err;                    /* sticky: 1 a COMPRESSION_ERROR happened, 2 a block decoded
                                   to over max_work bytes (ENHANCE_YOUR_CALM) */
    coai_hpack_entry ent[COAI_HPACK_TABLE / 32 + 1];
    unsigned char mem[COAI_HPACK_TABLE];
} coai_hpack_decoder;

/* Decode one complete header block (all of HEADERS + CONTINUATION fragments) into `out`.
 *   COAI_OK            out->v[0..n) holds the fields, in order.
 *   COAI_ERR_TOO_BIG   the list is over max_list. The whole block was still decoded, so the
 *                      table stays in step with the server's; out is empty. Reset the
 *                      stream; the connection goes on. Past the limit a field costs no copy
 *                      (an indexed one is only looked up); literals are still decoded, and
 *                      those with incremental indexing enter the table.
 *   COAI_ERR_H2        COMPRESSION_ERROR (d->err 1): bad integer, index 0 or out of range,
 *                      string past the end, bad Huffman (EOS, padding over 7 bits or not all
 *                      ones), a size update over max_size or after a field, a block ending
 *                      inside a field. Or (d->err 2) the block decoded to over max_work
 *                      bytes, kept or not: a server making us copy a 4 KB table entry per
 *                      2 bytes it sends (ENHANCE_YOUR_CALM). Sticky: the connection must end.
 *   COAI_ERR_NOMEM     out of memory. */
coai_result coai_hpack_decode(coai_hpack_decoder *d, const unsigned char *p, size_t n,
                              coai_hpack_list *out);

/* Append the block for h[0..n): an indexed field when the static table has name and value,
 * else a literal without indexing (name indexed when the static table has it), no Huffman.
 * Names must be non-empty and free of uppercase, and values free of NUL, CR and LF
 * (-> COAI_ERR_INVALID, nothing appended). 0 ok, or a negative coai_result. */
int coai_hpack_encode(coai_buf *out, const coai_h2_header *h, size_t n);

/* ---- frames ---- */

typedef struct coai_h2_frame {
    uint32_t length;            /* payload bytes */
    uint8_t type;               /* COAI_H2_* */
    uint8_t flags;
    uint32_t stream;            /* reserved bit cleared */
    const unsigned char *payload;  /* into the parsed input */
} coai_h2_frame;

/* Parse the frame at p[0..n): COAI_OK with *f and *used (9 + length), COAI_MORE when the
 * frame is not all there, COAI_ERR_TOO_BIG when its length is over max_frame (a
 * FRAME_SIZE_ERROR), known before the payload arrives. */
coai_result coai_h2_frame_parse(const unsigned char *p, size_t n, uint32_t max_frame,
                                coai_h2_frame *f, size_t *used);
/* Append a frame header and payload (len < 2^24). 0 ok, -1 fail. */
int coai_h2_frame_append(coai_buf *out, int type, int flags, uint32_t stream,
                         const void *payload, size_t len);

/* ---- the connection ---- */

typedef struct coai_h2_settings {
    uint32_t header_table_size;      /* 4096 */
    uint32_t enable_push;            /* 1 (a server must not send 1) */
    uint32_t max_concurrent_streams; /* unlimited: 0xffffffff */
    uint32_t initial_window_size;    /* 65535 */
    uint32_t max_frame_size;         /* 16384 */
    uint32_t max_header_list_size;   /* unlimited: 0xffffffff */
} coai_h2_settings;

typedef struct coai_h2_opts {
    uint32_t stream_window;     /* receive window per stream; 0 -> COAI_H2_STREAM_WINDOW */
    uint32_t conn_window;       /* receive window of the connection; 0 -> max_streams *
                                   stream_window (at most 2^31 - 1), so that a stream whose
                                   reader stalls never stalls the others */
    uint32_t max_frame;         /* largest frame we accept, 16384..16777215; 0 -> 16384 */
    uint32_t max_header_list;   /* 0 -> COAI_H2_MAX_HEADER_LIST */
    uint32_t max_streams;       /* cap on our open streams, <= COAI_H2_MAX_STREAMS; 0 -> that */
} coai_h2_opts;

enum {
    COAI_H2_EV_SETTINGS = 1,    /* the server's SETTINGS were applied (and acked) */
    COAI_H2_EV_HEADERS,         /* a response head (status) or trailers (trailers = 1) */
    COAI_H2_EV_DATA,            /* response body bytes (padding removed) */
    COAI_H2_EV_RESET,           /* the stream was reset: code; local = 1 when by us */
    COAI_H2_EV_REFUSED,         /* the server did not process the stream: safe to retry */
    COAI_H2_EV_WINDOW,          /* send room grew on stream (0: the connection's) */
    COAI_H2_EV_GOAWAY,          /* last_stream, code, data = debug data */
    COAI_H2_EV_PING_ACK         /* data = the 8 opaque bytes */
};

typedef struct coai_h2_event {
    int type;                   /* COAI_H2_EV_* */
    uint32_t stream;            /* 0 for connection events */
    void *user;                 /* the stream's pointer from coai_h2_open */
    int end_stream;             /* HEADERS/DATA: the server finished this stream */
    int trailers;               /* HEADERS: a trailer block after the response head */
    int status;                 /* HEADERS: :status (0 for trailers) */
    const coai_h2_header *headers;  /* HEADERS: the fields, pseudo-header included */
    size_t n_headers;
    coai_str data;              /* DATA payload; GOAWAY debug data; PING_ACK opaque */
    uint32_t code;              /* RESET, REFUSED, GOAWAY: the error code */
    uint32_t last_stream;       /* GOAWAY */
    int local;                  /* RESET: 1 when we reset it (the server broke the rules) */
} coai_h2_event;

enum {
    COAI_H2_ST_IDLE = 0,        /* free slot */
    COAI_H2_ST_OPEN,
    COAI_H2_ST_HALF_CLOSED_LOCAL,   /* we sent END_STREAM */
    COAI_H2_ST_HALF_CLOSED_REMOTE,  /* the server sent END_STREAM */
    COAI_H2_ST_CLOSED           /* reported by coai_h2_stream_state for a forgotten id */
};

typedef struct coai_h2_stream {
    uint32_t id;                /* 0: free slot */
    int state;                  /* COAI_H2_ST_* */
    int head_done;              /* a final (non-1xx) response head arrived */
    int refused;                /* private: GOAWAY refused it, event pending */
    int64_t send_window;        /* bytes we may send (may go negative: RFC 9113 6.9.2) */
    int64_t recv_window;        /* bytes the server may still send */
    uint32_t unacked;           /* consumed bytes not yet returned by WINDOW_UPDATE */
    void *user;
} coai_h2_stream;

typedef struct coai_h2_conn {
    coai_h2_settings peer;      /* the server's settings (defaults until they arrive) */
    coai_h2_opts opts;          /* ours, defaults filled in */
    int error;                  /* the connection error code we sent in GOAWAY; -1 none */
    const char *error_why;      /* static text when the code alone does not say what the
                                   server did (a flood: ENHANCE_YOUR_CALM); else NULL */
    int got_settings;           /* the server's first SETTINGS arrived */
    int settings_acked;         /* the server acked ours */
    int goaway_in;              /* a GOAWAY arrived: no new streams */
    int goaway_out;             /* we sent one */
    uint32_t goaway_last;       /* the lowest last-stream-id the server announced */
    uint32_t next_id;           /* the id the next stream gets (odd) */
    uint32_t max_id;            /* the highest id we opened */
    int64_t send_window;        /* connection window for our DATA */
    int64_t recv_window;        /* connection window the server may still use */
    uint32_t unacked;           /* consumed connection bytes not yet returned */
    uint32_t active;            /* streams in use */
    coai_h2_stream streams[COAI_H2_MAX_STREAMS];
    coai_hpack_decoder hpack;
    coai_hpack_list fields;     /* the last decoded header list */
    coai_buf in;                /* private: received bytes not parsed yet (from in_off) */
    size_t in_off;
    coai_buf out;               /* private: bytes to write (from out_off) */
    size_t out_off;
    coai_buf block;             /* private: a header block being assembled */
    uint32_t block_stream;      /* private: its stream; 0 when none */
    int block_end_stream;       /* private */
    int window_event;           /* private: a connection WINDOW event is pending */
    uint32_t acks_out;          /* private: PING/SETTINGS acks queued, not all written */
    uint64_t out_done;          /* private: bytes written so far (coai_h2_wrote) */
    uint64_t ack_end;           /* private: where the newest ack ends, counted as out_done */
    uint32_t empty_in;          /* private: empty DATA frames in a row */
} coai_h2_conn;

/* Set up c (any memory; it is cleared) and queue the preface, our SETTINGS (ENABLE_PUSH
 * 0, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE) and the WINDOW_UPDATE that
 * raises the connection window. o may be NULL. 0 ok, COAI_ERR_NOMEM. */
int coai_h2_init(coai_h2_conn *c, const coai_h2_opts *o);
void coai_h2_free(coai_h2_conn *c);

/* Bytes waiting to be written: *p = where they are; returns how many (0: nothing). */
size_t coai_h2_want_write(coai_h2_conn *c, const unsigned char **p);
/* n of them went out (n <= what want_write returned). */
void coai_h2_wrote(coai_h2_conn *c, size_t n);

/* Received bytes, any amount, split anywhere. 0 ok, COAI_ERR_NOMEM. */
int coai_h2_feed(coai_h2_conn *c, const void *p, size_t n);
/* The next event: COAI_OK (*ev filled), COAI_MORE (feed more), COAI_ERR_H2 (a connection
 * error, sticky: GOAWAY with c->error is queued) or COAI_ERR_NOMEM. */
coai_result coai_h2_next(coai_h2_conn *c, coai_h2_event *ev);

/* Open a stream with request headers h[0..n) (pseudo-headers first, lowercase names).
 * end_stream 1: no body. Returns the id (> 0), 0 when the server's (or our) limit on open
 * streams is reached, COAI_ERR_STATE when the connection takes no new streams (GOAWAY either
 * way, ids used up, an error), COAI_ERR_INVALID for a bad header or a list over the server's
 * SETTINGS_MAX_HEADER_LIST_SIZE (nothing is sent then: a server may refuse the whole
 * connection for it). */
long coai_h2_open(coai_h2_conn *c, const coai_h2_header *h, size_t n, int end_stream,
                  void *user);
/* coai_h2_open with the headers already encoded (coai_hpack_encode needs no connection: a
 * program with threads encodes before it takes the connection's lock); list_size is
 * coai_h2_header_list_size of the headers. The same returns. */
long coai_h2_open_block(coai_h2_conn *c, const unsigned char *block, size_t len,
                        size_t list_size, int end_stream, void *user);
/* The size of a header list as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 6.5.2:
 * each field's name and value lengths plus 32). */
size_t coai_h2_header_list_size(const coai_h2_header *h, size_t n);
/* How many body bytes stream id may send now (both windows). 0 for an unknown stream. */
size_t coai_h2_send_room(const coai_h2_conn *c, uint32_t id);
/* Queue up to n bytes as DATA frames within the windows and the server's frame size;
 * *sent says how many. end_stream takes effect only when all n were sent. 0 ok,
 * COAI_ERR_STATE (unknown stream, or its side already ended), COAI_ERR_NOMEM. */
int coai_h2_send_data(coai_h2_conn *c, uint32_t id, const void *p, size_t n, int end_stream,
                      size_t *sent);
/* The application has used n bytes of DATA of stream id: WINDOW_UPDATEs go out once half
 * a window is due. The connection window is returned even for a forgotten stream. */
void coai_h2_consumed(coai_h2_conn *c, uint32_t id, size_t n);
/* RST_STREAM with code; the stream is forgotten (no event). 0 ok, COAI_ERR_STATE. */
int coai_h2_reset(coai_h2_conn *c, uint32_t id, uint32_t code);
/* PING with 8 opaque bytes. 0 ok, COAI_ERR_NOMEM. */
int coai_h2_ping(coai_h2_conn *c, const unsigned char opaque[8]);
/* GOAWAY (last stream id 0: we accept no server streams) with code; no new streams. */
int coai_h2_goaway(coai_h2_conn *c, uint32_t code);
/* Open streams; COAI_H2_ST_* of one (COAI_H2_ST_CLOSED when forgotten or never opened). */
size_t coai_h2_active(const coai_h2_conn *c);
int coai_h2_stream_state(const coai_h2_conn *c, uint32_t id);
/* PART:H2 api end */

/* ======================================================================== */
/* PART:CORE api (request parse/validate, prompt, tool mapping, SSE)        */
/* ======================================================================== */
/* The OpenAI side: everything between an HTTP request body and the bytes of the
 * HTTP response, with no sockets.
 *
 * REQUEST
 *   coai_chat_request_parse() validates a /v1/chat/completions body and keeps the
 *   parsed cJSON tree; every view in coai_chat_request points into it and lives until
 *   coai_chat_request_free(). The raw body must be valid UTF-8 with no NUL byte and no
 *   "\u0000" escape (400 instead of silent truncation); the JSON must be one object
 *   (nesting limited by CJSON_NESTING_LIMIT). Read: model, messages (roles system,
 *   developer (= system), user, assistant, tool; content string, null, missing (= ""),
 *   or an array of parts whose "text" parts are joined with "\n"), assistant
 *   tool_calls, tool_call_id, tools (function name/description/parameters),
 *   tool_choice ("none" = the run gets no tools), stream, stream_options.include_usage,
 *   n (only 1); the fields Cursor has no equivalent for are emulated in the core
 *   (stop, max_tokens / max_completion_tokens, response_format, tool_choice: see
 *   coai_reply_opts and README "Request fields"), refused (logprobs, top_logprobs,
 *   audio output, content parts other than text / image_url / refusal) or accepted and
 *   ignored (sampling fields, user, metadata ...). A bad request fills
 *   coai_error with 400 invalid_request_error and a param naming the culprit, e.g.
 *   "messages[2].content" or "tools[0].function.name" (names: ^[a-zA-Z0-9_-]{1,64}$).
 *   The prompt is flattened as the original client did (byte-exact with the original, except that
 *   developer messages count as system). coai_chat_request_params() copies prompt and
 *   tools into a coai_run_params; the caller fills ids, model, workspace, zone.
 *
 * MODELS
 *   coai_models_parse() reads a GetUsableModels Connect-JSON answer ({"models":[...]});
 *   coai_models_resolve() maps a requested name to a modelId (exact match on modelId,
 *   displayModelId or an alias, later entries win; unknown names pass through; empty
 *   -> "auto", itself resolved); coai_models_write_list() renders GET /v1/models
 *   (id = displayModelId || modelId, owned_by from the display name, and the
 *   context_length / max_output_tokens of coai_model_limits()).
 *
 * RESPONSE: coai_reply
 *   One coai_reply per chat request. server.c feeds it what the upstream produced and
 *   sends what it wrote:
 *
 *       coai_reply_init(&r, &opts);                 // opts: see coai_reply_opts
 *       for each upstream event:
 *           rc = coai_reply_feed_msg(&r, &msg);     // or _feed_status / _feed_eof /
 *                                                   //    _feed_error / _fail_timeout
 *           if (coai_reply_started(&r) && !head_sent)
 *               send "HTTP/1.1 <coai_reply_status(&r)>" + coai_reply_head() lines;
 *           send r.out.data[0..r.out.len); coai_buf_reset(&r.out);
 *           if (rc != COAI_OK) break;               // COAI_DONE: response complete,
 *                                                   // close the upstream run
 *       every ~15 s without client output: coai_reply_keepalive(&r) and send r.out
 *
 *   Replies the upstream must get (KV results, exec rejections, request-context
 *   results, stream_close) are handed, one serialized AgentClientMessage at a time, to
 *   opts.send (server.c wraps each in a BidiAppend with the next seqno); a non-zero
 *   return from send fails the run with a 502.
 *
 *   Commit rule: nothing reaches the client until the first visible event (text,
 *   reasoning, tool call, normal end) or a keepalive. Before that, any error becomes a
 *   real HTTP status with a JSON error body (coai_reply_started() turns 1 together
 *   with the final status); after it, errors are in-band:
 *   data: {"error":{"message","type","code"}} then data: [DONE]. Non-streaming
 *   requests commit only at the end (keepalive writes nothing for them).
 *
 *   Streaming output (OpenAI's chunk shapes): a role chunk, one content chunk per text delta
 *   (never merged), reasoning_content chunks for thinking deltas (never mixed into
 *   content), at most one tool call (index, id, type, name and the whole arguments in
 *   its first and only delta) followed by a finish_reason "tool_calls" chunk, or a
 *   finish_reason "stop" chunk carrying usage; with include_usage every chunk carries
 *   "usage":null and a final chunk with "choices":[] carries the usage; then
 *   data: [DONE]. A UTF-8 character split across deltas is reassembled; invalid bytes
 *   become U+FFFD; every JSON text written is valid UTF-8.
 *   Non-streaming: one chat.completion with message.content (null when there is only
 *   a tool call), message.reasoning_content (when any), message.tool_calls, usage.
 *
 *   Events: KV set/get are answered from a per-run blob store capped at
 *   COAI_MAX_KV_BYTES (over the cap the run fails with a clear 502, it is never
 *   silently truncated). When the turn ends cleanly and no text was streamed, assistant
 *   text found in stored blobs is emitted as content (the blob fallback). Exec requests
 *   map to the client's tools by role (coai_exec_map(); the original's argument order, in
 *   the client's own parameter names, e.g. OpenCode's read{filePath} or
 *   grep{pattern,path,include}), else to its shell tool (cat, printf, ls, grep, find,
 *   rm); an exec nothing serves gets coai_exec_refusal's sentence; the first mapped
 *   exec becomes the response's tool call and ends the run. An exec no client tool
 *   matches is refused upstream (exec reject, plus stream_close when the reject is a
 *   result) and nothing is ever executed locally. request_context execs get a
 *   request_context result + stream_close; mcp_state_exec_args (36) McpStateExecResult.
 *   success with the request's tools as one server (coai_encode_exec_mcp_state), the
 *   precheck execs 41-43 their result with allowlisted (41 no, 42 and 43 yes), subagent_args
 *   (28) a typed SubagentError, each + stream_close; an exec kind we do not know a throw
 *   (naming the kind where coai_exec_kind_name knows it) + stream_close. KV: a set_blob without data is acked and stores
 *   nothing; a get_blob whose key is not stored and is not a 32-byte digest gets the key
 *   as its data (what the CLI does). Heartbeats, checkpoints, tool-call
 *   announcements, step updates and exec aborts never end a turn and write nothing.
 *   interaction_query messages (web search, ask-question, mode switch, Exa, create-plan,
 *   VM set-up, hosted web fetch, image generation, PR management, MCP auth, env
 *   replacement, SCM connect, any other kind) are answered at once with an
 *   InteractionResponse of the matching kind, typed where the schema has an outcome
 *   (coai_encode_interaction_response; the original never answered, and a turn could
 *   wait on them); they are counted in coai_reply.queries. Should the upstream still
 *   stall, the caller's idle timeout ends the run (coai_reply_fail_timeout).
 *   A turn ends normally on turn_ended, or at end of body after an OK trailer /
 *   end-stream; end of body without either is an upstream_truncated error.
 *
 *   Tool-call ids: "sess_" + session id + "__call_" + B (the original's form): B = McpArgs
 *   tool_call_id for MCP, else exec_id, else the decimal exec id, reduced to
 *   [A-Za-z0-9], at most 32 characters. The session id is the one found in the
 *   request's history (coai_chat_request.session_id) or one the caller makes up (12 hex).
 *
 *   Usage: Cursor's own counts when turn_ended carried them (TurnEndedUpdate 1-5:
 *   input, output, cache-read, cache-write, reasoning): prompt_tokens = input (Cursor's
 *   input already counts the cached tokens, as OpenAI does), cached = cache-read,
 *   completion_tokens = output, reasoning = min(reasoning, output). Else
 *   estimates: completion_tokens = sum of token_delta when any arrived, else
 *   ceil(UTF-16 units of the emitted content + reasoning + tool call / 4);
 *   prompt_tokens = checkpoint used_tokens - completion_tokens when a checkpoint
 *   reported more than that, else ceil(UTF-16 units of the prompt / 4).
 *
 * ERROR MAPPING (coai_error_from_status / coai_error_from_http)
 *   ERROR_* details (aiserver ErrorDetails) take precedence over the status code, and
 *   Cursor's own words of 2026-08..10 over both:
 *   "not available in your country or region", "... in your region", unsupported_region
 *                                                          -> 403 permission_error /
 *                                                              unsupported_region, no retry
 *   "High Load" / "high demand"                            -> 429 requests / model_overloaded,
 *                                          no retry (try another model; never a usage limit)
 *   "unpaid invoice"                                       -> 429 insufficient_quota, no retry
 *   "model channel not available"                          -> 503 upstream_unavailable,
 *                                                              Retry-After 5
 *   "Conversation data missing", "blob missing", "Blob not found"
 *                                          -> 502 upstream_error / conversation_lost (the
 *                                          caller replays once as a new conversation)
 *   deadline_exceeded "Timeout waiting for next item."     -> 504 upstream_timeout, saying the
 *                                          request_context answer never arrived
 *   permission_denied naming the client version            -> the outdated_client row below
 *   A bare resource_exhausted that reaches a coai_reply is decided by the prompt's size:
 *   under COAI_EXHAUSTED_SMALL_TOKENS (16000) 400 model_not_available (param "model"),
 *   from COAI_EXHAUSTED_LARGE_TOKENS (100000) 400 context_length_exceeded.
 *   coai_error_from_http_call(): a not_found of a unary call names the call (502
 *   upstream_not_found).
 *   "no retry" sets coai_error.no_retry: send "x-should-retry: false".
 *   coai_error.kind names the rows a program acts on apart from their code: "unpaid
 *   invoice" (COAI_ERRK_UNPAID_INVOICE), the "Timeout waiting for next item." row
 *   (COAI_ERRK_CONTEXT_UNANSWERED), and in coai_error_from_http an HTTP 400 "illegal request
 *   line" or an HTTP 505 (COAI_ERRK_HTTP1_REFUSED); coai_error.upstream_status is the HTTP
 *   status coai_error_from_http*() mapped.
 *
 *   upstream signal                                  -> HTTP type / code
 *   ERROR_FREE/PRO_USER_USAGE_LIMIT (9, 10),
 *   ERROR_RESOURCE_EXHAUSTED (41), _USAGE_PRICING_REQUIRED (44),
 *   grpc 8 without a rate-limit detail; HTTP 429 or Connect
 *   resource_exhausted whose message says usage/quota/billing -> 429 insufficient_quota /
 *                                                              insufficient_quota, no retry
 *   ERROR_*_RATE_LIMIT_EXCEEDED (7, 8, 22), _RATE_LIMITED (50),
 *   other HTTP 429 / resource_exhausted                    -> 429 requests /
 *                                                              rate_limit_exceeded, Retry-After 10
 *   grpc 16, HTTP 401, Connect unauthenticated, ERROR_BAD_API_KEY (1), _NOT_LOGGED_IN (2),
 *   _AUTH_TOKEN_NOT_FOUND (11), _AUTH_TOKEN_EXPIRED (12), _UNAUTHORIZED (38)
 *                                                          -> 401 authentication_error /
 *                                                              upstream_auth_failed, no retry
 *   grpc 7, HTTP 403, Connect permission_denied            -> 403 permission_error /
 *                                                              upstream_permission_denied, no retry
 *   ERROR_OUTDATED_CLIENT (30); error 28 or any status titled "Update Required"; a title
 *   "update to the latest version" (checked first: never a quota or rate message)
 *                                                          -> 502 upstream_error / outdated_client,
 *                                          no retry; the message says to set CURSOR_CLIENT_VERSION
 *   grpc 8 / Connect resource_exhausted with no ErrorDetails and no usage, quota, limit or
 *   rate words (ambiguous: conversation too large, or a model the plan does not allow)
 *                                                          -> 400 invalid_request_error /
 *                                          upstream_resource_exhausted, no retry, no Retry-After
 *   Connect error bodies of non-2xx answers carry "details" like end-stream frames: when they
 *   hold an ErrorDetails, the trailer rows above decide.
 *   ERROR_BAD_MODEL_NAME (5), ERROR_DEPRECATED (40), grpc 5, Connect not_found
 *                                                          -> 404 invalid_request_error /
 *                                                              model_not_found (param "model")
 *   ERROR_CONVERSATION_TOO_LONG (43), ERROR_MAX_TOKENS (20)-> 400 invalid_request_error /
 *                                                              context_length_exceeded
 *   grpc 4, ERROR_TIMEOUT (25); coai_reply_fail_timeout()  -> 504 server_error / upstream_timeout
 *   grpc 14, HTTP 503, Connect unavailable                 -> 503 server_error /
 *                                                              upstream_unavailable, Retry-After 5
 *   end of body with neither turn end nor trailer          -> 502 upstream_error /
 *                                                              upstream_truncated
 *   anything else (other codes, 5xx, HTML pages)           -> 502 upstream_error / upstream_error
 *   The message carries the upstream's own words (grpc-message, title, detail, the
 *   Connect message or <= 200 cleaned bytes of a non-JSON body). */

#ifndef COAI_MAX_KEEP_TEXT
#define COAI_MAX_KEEP_TEXT (4u * 1024u * 1024u)   /* reply text kept for coai_reply_text */
#endif
#ifndef COAI_MAX_KV_BYTES
#define COAI_MAX_KV_BYTES (64u * 1024u * 1024u)   /* per-run KV blob store (ids + data) */
#endif
#ifndef COAI_MAX_TOOLS
#define COAI_MAX_TOOLS 512                        /* tools[] entries accepted per request */
#endif
#ifndef COAI_MAX_MESSAGES
#define COAI_MAX_MESSAGES 10000                   /* messages per request (coai_request_check) */
#endif
#ifndef COAI_MAX_JSON_VALUES
#define COAI_MAX_JSON_VALUES 500000               /* JSON values per request body */
#endif
#ifndef COAI_JSON_VALUE_COST
#define COAI_JSON_VALUE_COST 200                  /* heap bytes one parsed value may take
                                                   * (measured: 168 for empty messages) */
#endif
/* The number of JSON values in s[0..n) (objects, arrays, strings, numbers, literals; keys
 * are not values), exact for valid JSON nested up to 256 deep, counted without allocating.
 * What parsing a body costs is about n + coai_json_values() * COAI_JSON_VALUE_COST bytes:
 * a caller budgets with that and refuses over COAI_MAX_JSON_VALUES before parsing. */
size_t coai_json_values(const char *s, size_t n);

/* What an error is when its code alone does not say (coai_error.kind). Programs decide on
 * these and on coai_error.upstream_status, never on the message: its words are for people
 * and may change. */
typedef enum coai_error_kind {
    COAI_ERRK_NONE = 0,
    COAI_ERRK_UNPAID_INVOICE = 1,     /* insufficient_quota: an open invoice, not a used-up plan */
    COAI_ERRK_CONTEXT_UNANSWERED = 2, /* upstream_timeout: Cursor's request_context question
                                       * got no answer ("Timeout waiting for next item.") */
    COAI_ERRK_HTTP1_REFUSED = 3       /* the host refused HTTP/1.1 (HTTP 400 "illegal request
                                       * line", HTTP 505): it serves HTTP/2 only */
} coai_error_kind;

/* An OpenAI-shaped error. Zero-init is "no error" (status 0). */
typedef struct coai_error {
    int status;                /* HTTP status (400, 401, 404, 429, 502 ...); 0 = no error */
    const char *type;          /* static, e.g. "invalid_request_error" */
    const char *code;          /* static or NULL (JSON null) */
    char param[128];           /* "" = JSON null */
    char message[512];         /* valid UTF-8, no control characters */
    int no_retry;              /* 1: send "x-should-retry: false" */
    int retry_after;           /* seconds for "Retry-After", 0 = none */
    int upstream_status;       /* the upstream answer's HTTP status coai_error_from_http*()
                                * mapped (e.g. 415, 464), 0 = none (not an HTTP answer) */
    coai_error_kind kind;      /* COAI_ERRK_*, set by the mapping below */
} coai_error;

/* Fill every field (message printf-style; cut at a UTF-8 boundary, control bytes
 * dropped; upstream_status and kind 0). param/code may be NULL. */
void coai_error_set(coai_error *e, int status, const char *type, const char *code,
                    const char *param, const char *fmt, ...);
/* Append {"error":{"message":..,"type":..,"param":..,"code":..}}. 0 ok, -1 fail. */
int coai_error_write(coai_buf *out, const coai_error *e);
/* Map a non-OK trailer / end-stream / google.rpc.Status (table above). A status with
 * code 0 and no error detail sets e->status = 0 (not an error). */
void coai_error_from_status(const coai_status *st, coai_error *e);
/* Map a non-2xx HTTP answer of RunSSE/BidiAppend; body may be Connect JSON
 * {"code","message"} or anything else (at most 200 sanitized characters are quoted).
 * e->upstream_status = upstream_status. */
void coai_error_from_http(int upstream_status, const char *body, size_t n, coai_error *e);
/* The same for a unary call that is not a run (GetUsableModels, GetCurrentPeriodUsage,
 * GetServerConfig ...): a not_found (HTTP 404, Connect not_found) names the call, `call` (its
 * path), as 502 upstream_error / upstream_not_found instead of blaming a model. */
void coai_error_from_http_call(int upstream_status, const char *body, size_t n,
                               const char *call, coai_error *e);

/* ---- The dialect-neutral request ------------------------------------------------
 * Every client API ("dialect") is parsed into one coai_request: the conversation
 * (messages with roles, text / image / thinking parts, earlier tool calls, tool
 * results), the tools with their schemas, the model, the stream flag and the limits.
 * The core turns it into a Cursor run (coai_request_params: the flattened prompt and the
 * tools) and a coai_reply turns Cursor's events back into the same dialect. A dialect
 * is a parser (body -> coai_request), a writer (reply events -> bytes, inside
 * coai_reply) and a route in server.c; see DIALECTS in the header comment. */

typedef enum coai_dialect {
    COAI_DIALECT_OPENAI_CHAT = 0,   /* POST /v1/chat/completions (zero-init default) */
    COAI_DIALECT_ANTHROPIC = 1,     /* POST /v1/messages */
    COAI_DIALECT_RESPONSES = 2,     /* POST /v1/responses (OpenAI Responses) */
    COAI_DIALECT_GEMINI = 3,        /* POST /v1beta/models/{model}:generateContent (Gemini) */
    /* ADD-DIALECT: enum */
    COAI_DIALECT_COUNT_             /* private: number of dialects */
} coai_dialect;

typedef enum coai_role {
    COAI_ROLE_SYSTEM = 0,      /* system / developer instructions */
    COAI_ROLE_USER,
    COAI_ROLE_ASSISTANT,
    COAI_ROLE_TOOL             /* one tool result (tool_call_id, is_error, parts) */
} coai_role;

typedef enum coai_part_kind {
    COAI_PART_TEXT = 0,        /* text */
    COAI_PART_IMAGE,           /* media_type + data (base64) or url (as the client sent it) */
    COAI_PART_THINKING         /* text: earlier reasoning sent back (not part of the prompt) */
} coai_part_kind;

typedef struct coai_part {
    coai_part_kind kind;
    coai_str text;             /* TEXT, THINKING */
    coai_str media_type;       /* IMAGE: e.g. "image/png"; may be empty */
    coai_str data;             /* IMAGE: base64 bytes; empty when url is used */
    coai_str url;              /* IMAGE: URL as given (data: URLs included); may be empty */
    const char *path;          /* IMAGE: the client's own field path for error messages
                                * ("contents[0].parts[1].inlineData"); NULL = the neutral
                                * "messages[i].content[k]" */
} coai_part;

/* A tool call the assistant made earlier in the conversation. */
typedef struct coai_call {
    coai_str id;               /* the call id the client keeps */
    coai_str name;             /* tool name */
    coai_str args;             /* arguments as JSON text, as the client sent them */
} coai_call;

typedef struct coai_message {
    coai_role role;
    const coai_part *parts;    /* in order; NULL when part_count is 0 */
    size_t part_count;
    const coai_call *calls;    /* ASSISTANT: tool calls, NULL when call_count is 0 */
    size_t call_count;
    coai_str tool_call_id;     /* TOOL: the call this result answers */
    int is_error;              /* TOOL: the tool failed */
} coai_message;

typedef enum coai_tool_choice {
    COAI_TOOL_CHOICE_AUTO = 0, /* the model decides (also: not given) */
    COAI_TOOL_CHOICE_NONE,     /* no tools: the run gets none (tools_disabled) */
    COAI_TOOL_CHOICE_ANY,      /* OpenAI "required", Anthropic "any" */
    COAI_TOOL_CHOICE_TOOL      /* one named tool (tool_choice_name) */
} coai_tool_choice;

/* A validated request of any dialect. Zero-init before parse; free with
 * coai_request_free. Views point into the parsed body or into memory the request
 * owns, and live until coai_request_free(). */
typedef struct coai_request {
    coai_dialect dialect;      /* which parser filled it (which writer answers it) */
    coai_str model;            /* as requested; "auto" when missing, null or "" */
    int stream;                /* stream: true (Gemini: 2 = the JSON-array stream) */
    int include_usage;         /* OpenAI stream_options.include_usage (only when streaming) */
    int tools_disabled;        /* tool_choice "none": tools parsed but not used */
    coai_tool *tools;          /* heap array, views into the tree; NULL when none used */
    size_t tool_count;         /* 0 when tools_disabled */
    coai_buf prompt;           /* flattened conversation (coai_conversation_prompt), NUL */
    coai_str session_id;       /* <S> of the newest "sess_<S>__call_" id in the history */
    int has_tool_messages;     /* some message has role "tool" (a tool result) */
    /* the conversation and the options, dialect-neutral */
    const coai_message *messages;  /* in order, system messages included */
    size_t message_count;
    coai_tool_choice tool_choice;
    coai_str tool_choice_name; /* COAI_TOOL_CHOICE_TOOL: the tool's name */
    int64_t max_tokens;        /* output limit asked for; 0 = none given */
    const coai_str *stop;      /* stop sequences; NULL when stop_count is 0 */
    size_t stop_count;
    int thinking;              /* -1 not given, 0 disabled, 1 enabled (or adaptive) */
    int64_t thinking_budget;   /* budget_tokens when given, else 0 */
    coai_str conversation_key; /* set by the caller: a client session id (e.g. Claude
                                * Code's x-claude-code-session-id); empty = none */
    int response_json;         /* 1: answer must be one JSON object (OpenAI response_format
                                * json_object / json_schema): asked for in the prompt, and
                                * a non-streaming answer is checked (coai_reply_opts) */
    const struct cJSON *response_schema; /* json_schema.schema (a view), or NULL */
    struct coai_image *images; /* decoded images of the newest user message (IMAGE part) */
    size_t image_count;
    struct cJSON *root_;       /* private: the parsed body, owns most views */
    coai_buf mem_;             /* private: pointers to heap blocks the request owns */
} coai_request;

/* The OpenAI Chat Completions request is the neutral request (same type, old name). */
typedef coai_request coai_chat_request;

/* Parse and validate a body of the given dialect. 0 on success; on failure a negative
 * coai_result (COAI_ERR_UTF8, COAI_ERR_JSON, COAI_ERR_INVALID, COAI_ERR_NOMEM) and *err
 * filled (400, or 500 for memory; write it with coai_error_write_as). The request is
 * left empty on failure (free is still safe). */
int coai_request_parse(coai_request *req, coai_dialect d, const char *body, size_t n,
                       coai_error *err);
/* The same with image caps (NULL or 0 members: the COAI_MAX_IMAGE* defaults). Every parse
 * decodes the images of the newest user message into req->images (IMAGE part): a bad or
 * oversized image is a 400 / 413 naming the part. */
int coai_request_parse_ex(coai_request *req, coai_dialect d, const char *body, size_t n,
                          const struct coai_image_limits *lim, coai_error *err);
/* The steps coai_request_parse_ex adds around a dialect's parser, for callers that run a
 * parser themselves (server.c's Responses path): coai_json_fix_surrogates rewrites each
 * lone UTF-16 surrogate escape ("\ud800" without its pair) to "\ufffd" in place (same
 * length) and returns how many, or -1 for a "\u" without four hex digits (a 400: cJSON
 * would read U+0000); coai_request_check refuses duplicate keys (400 duplicate_key) and
 * decodes the images (req is freed on failure). 0 ok, else a negative coai_result. */
long coai_json_fix_surrogates(char *body, size_t n);
int coai_request_check(coai_request *req, const struct coai_image_limits *lim,
                       coai_error *err);
void coai_request_free(coai_request *req);
/* Set p->prompt, p->tools, p->tool_count and p->images from req (views into req). */
void coai_request_params(const coai_request *req, coai_run_params *p);
/* The tool_call_id of each trailing tool result (the TOOL messages after the last
 * message of any other role), in order, at most cap of them; views into the request.
 * Returns the count (0: the request does not end with tool results). */
size_t coai_request_trailing_tool_ids(const coai_request *req, coai_str *ids, size_t cap);
/* Append the text of the newest tool result answering call_id (its text parts joined by
 * "\n") to out; *is_error (may be NULL) = the client marked it failed. 0 found, -1 none. */
int coai_request_tool_result(const coai_request *req, coai_str call_id, coai_buf *out,
                             int *is_error);
/* The decoded images (req->images) of the newest tool result answering call_id, in
 * order: *out points into req->images. Returns their count; 0 when it has none or is not
 * part of the current turn (older images are not decoded: IMAGE part). */
size_t coai_request_tool_result_images(const coai_request *req, coai_str call_id,
                                       const struct coai_image **out);
/* Conversation memory (checkpoint resume): a digest chain over the conversation.
 * out[i] = SHA-256(out[i-1] || canonical(msgs[i])), out[-1] = 32 zero bytes, so out[i]
 * names the history msgs[0..i] exactly. canonical() covers the role, text and image
 * parts, tool calls (id, name, arguments), tool_call_id and is_error; thinking parts
 * are left out (clients differ in echoing them). 0 ok, -1 no memory. */
int coai_conversation_digests(const coai_message *msgs, size_t n, unsigned char (*out)[32]);
/* One step of the chain: next = SHA-256(prev || canonical(m)). */
void coai_conversation_digest_next(const unsigned char prev[32], const coai_message *m,
                                   unsigned char next[32]);
/* Flatten a neutral conversation as the original client did into out: system texts first
 * (joined by "\n"), then "User: ", "Assistant: " (with "[Called tool: name(args)]" lines) and
 * "[Tool result for id]: " turns separated by a blank line, and the continuation line
 * when any tool result is present. Text parts of one message are joined by "\n";
 * images and thinking are not part of the text. 0 ok, -1 fail. */
int coai_conversation_prompt(coai_buf *out, const coai_message *msgs, size_t count);

/* The error in a dialect's shape: OpenAI {"error":{"message","type","param","code"}};
 * Anthropic {"type":"error","error":{"type","message"}} with Anthropic's type names
 * (invalid_request_error, authentication_error, permission_error, not_found_error,
 * request_too_large, rate_limit_error, api_error, overloaded_error). 0 ok, -1 fail. */
int coai_error_write_as(coai_buf *out, const coai_error *e, coai_dialect d);
/* The HTTP status a dialect answers e with: e->status, except Anthropic, which has
 * 529 for an overloaded or unavailable upstream (503) and 500 for other 5xx. */
int coai_error_status_as(const coai_error *e, coai_dialect d);

/* Models from GetUsableModels. Views point into the parsed tree (root_). */
typedef struct coai_model {
    coai_str id;               /* modelId (displayModelId when modelId is missing) */
    coai_str display_id;       /* displayModelId, may be empty */
    coai_str display_name;     /* displayName, may be empty */
    const struct cJSON *aliases_; /* private: the aliases array or NULL */
} coai_model;

typedef struct coai_models {
    coai_model *items;         /* heap array */
    size_t count;
    struct cJSON *root_;       /* private */
} coai_models;

/* Parse {"models":[...]}; entries with neither modelId nor displayModelId are skipped.
 * Returns 0, or COAI_ERR_JSON / COAI_ERR_NOMEM (m is then empty, still freeable). */
int coai_models_parse(coai_models *m, const char *json, size_t n);
void coai_models_free(coai_models *m);
/* The modelId for a requested name (views into m, requested, or a static "auto"). */
coai_str coai_models_resolve(const coai_models *m, coai_str requested);
/* {"object":"list","data":[{"id","object":"model","created","owned_by",
 *  "context_length","max_output_tokens"}...]}. 0 ok, -1 fail. */
int coai_models_write_list(coai_buf *out, const coai_models *m, int64_t created);
/* One model as GET /v1/models/{model} answers it (an item of that list). 0, -1 no memory. */
int coai_models_write_model(coai_buf *out, const coai_model *one, int64_t created);
/* Context window and output limit of a Cursor model id (a table kept from the original). */
void coai_model_limits(coai_str id, uint32_t *context_tokens, uint32_t *output_tokens);
/* The i-th string alias of a model (a view into the parsed tree). 0 ok, -1 no such alias. */
int coai_model_alias(const coai_model *m, size_t i, coai_str *out);

/* Result of mapping one exec request to a client tool. */
typedef struct coai_tool_call {
    size_t tool;               /* index into the client's tools */
    coai_buf args;             /* arguments JSON text (compact) */
    unsigned part;             /* in: which call of a split exec to map (0 = the first) */
    unsigned parts;            /* out: how many calls the exec takes (0 or 1: one). A write
                                * too big for one argument of a one-string shell tool
                                * (Linux: 128 KiB) takes several: map it again with part
                                * 1, 2 ... parts-1 for the others' arguments */
    uint64_t salt;             /* in: random bytes, the same for every call of one exec:
                                * names a split write's staging directory (0: named by
                                * the exec id and path alone, which anyone can predict) */
    const char *refusal;       /* out, when the map returns 0: why the exec cannot go to
                                * the client's tools (a sentence for Cursor; a static
                                * string), NULL when no tool matches it */
    int via_shell;             /* out, when the map returns 1: a file exec (read, ls, write
                                * ...) went to the client's shell tool as a command
                                * (coai_exec_ref.via_shell), 0 otherwise */
} coai_tool_call;

/* Map an exec to one of the client's tools: the tool whose role (coai_tool_role: read from
 * its schema first, its name only breaking ties) fits the exec, with the arguments in its
 * own parameter names (the original's shapes otherwise): read, write (or an editor's view /
 * create), ls, grep, glob, delete, fetch, shell (a command string, argv array or list of
 * commands), MCP by name. No shell fallback here: the dialects' maps add it (a shell-only
 * client does every file exec through its shell: coai_anthropic_exec_map).
 * Returns 1 and fills tc (tc->args is reset first; the caller frees it) when a tool matches,
 * 0 when none does, -1 on memory failure. workspace is used as "path" for an ls
 * without path (may be empty). */
int coai_exec_map(const coai_exec *ex, const coai_tool *tools, size_t tool_count,
                  coai_str workspace, coai_tool_call *tc);
/* The role coai_exec_map reads from a tool's schema, description and name (see "what a
 * client tool does" in the implementation): "read", "write", "edit", "editor" (an
 * operation enum: view / create / str_replace), "shell", "list", "grep", "glob",
 * "delete", "fetch", or NULL for none of them. */
const char *coai_tool_role(const coai_tool *t);
/* The sentence Cursor gets for an exec no client tool can serve (its kind, what the
 * client's tools can do instead, what to do): appended to out, NUL-terminated. 0 ok, -1
 * no memory. */
int coai_exec_refusal(coai_buf *out, const coai_exec *ex, const coai_tool *tools,
                      size_t tool_count);

/* Read a client tool's result the way that client writes it, into the fields Cursor's CLI
 * reports (coai_encode_exec_outcome sends them). tool: the client's tool the exec was
 * mapped to (names compare ignoring case and separators); text, is_error: the result as
 * the client sent it. Each layout is recognised whole, only for the tools that write it,
 * and otherwise the text stays as it is (o->shape "raw", out = text, or err = text when
 * is_error); README "Tool results" lists what is taken from where:
 *   shell layer (any exec kind mapped onto a shell tool):
 *     exec_command  Codex: [Chunk ID: h\n]Wall time: s seconds\n(Process exited with code
 *                   N | Process running with session ID N)\n[Original token count: n\n]
 *                   Output:\n<stdout+stderr>
 *     shell, shell_command, local_shell, apply_patch   Codex: Exit code: N\nWall time: s
 *                   seconds\n[Total output lines: n\n]Output:\n<output>
 *     run_shell_command   Qwen Code: Command: c\nDirectory: d\nOutput: o\nError: e\n
 *                   Exit Code: N\nSignal: s\nProcess Group PGID: p[\n...] ("(empty)" = no
 *                   output, "(none)" = no code)
 *                 or Gemini CLI: [<untrusted_context>\n]Output: o\n[Error: e\n][Exit Code: N\n]
 *                   [Signal: s\n][Background PIDs: ...\n][Process Group PGID: p][\n
 *                   </untrusted_context>] (no Exit Code line = 0; Error / Signal, or
 *                   "Command was cancelled ..." / "... automatically cancelled ...": a
 *                   failure, text as stderr)
 *     bash with is_error   Claude Code: Exit code N[\n<stdout+stderr>]
 *     then: SHELL kinds take exit code and output; READ / LS / GREP / WRITE mapped onto the
 *     shell fail when the code is not 0 (grep's 1 with no output: no matches).
 *   read tools:
 *     read (Claude Code's Read)   "N\t" line numbers from 1 ("     N\t" and "→" spellings
 *                   too) removed; its empty-file notice -> empty content
 *     read (OpenCode, Kilo Code)  <path>p</path>\n<type>file</type>\n<content>\n1: ...
 *                   \n\n(End of file - total N lines)\n</content> (and its "Showing lines"
 *                   footers: truncated) -> the lines, each ended with \n
 *     any read tool   exactly "File not found: <the path asked for>" -> a read error
 *   delete (any tool, after the shell layer): a success whose output is a number alone on
 *     its first line (what `wc -c < PATH` prints; blanks before it too; at most 2^53) ->
 *     has_size, file_size
 * Returns 0, or -1 on memory failure (o is then the raw result). Free with
 * coai_exec_outcome_free (frees own_ only). */
int coai_exec_outcome_parse(coai_exec_outcome *o, const coai_exec_ref *x, coai_str tool,
                            coai_str text, int is_error);
void coai_exec_outcome_free(coai_exec_outcome *o);
/* Whether a call's outcome is what Cursor gets for its exec. One exec split over several
 * calls (x->parts > 1, a big write: coai_tool_call.parts) gets one result: the first
 * failing part's outcome, else the last part's. Ask for each call in order with the
 * outcome's is_error; *failed is the caller's state for the group (part 0 resets it).
 * Returns 1 (send this outcome) or 0 (leave it out); 1 for every call that is not split. */
int coai_exec_part_answers(const coai_exec_ref *x, int is_error, int *failed);

/* Called with one serialized AgentClientMessage for the upstream; non-zero = failure. */
typedef int (*coai_upstream_fn)(void *user, const unsigned char *msg, size_t n);

typedef struct coai_reply_opts {
    coai_dialect dialect;      /* the writer: OpenAI chat (0, default), Anthropic, ... */
    int stream;                /* SSE (1) or one JSON object (0); 2: a streamed JSON array
                                * (Gemini's streamGenerateContent without alt=sse) */
    int include_usage;         /* stream_options.include_usage */
    coai_str completion_id;    /* "chatcmpl-<hex>" (OpenAI), "msg_<..>" (Anthropic) */
    int64_t created;           /* unix seconds */
    coai_str model;            /* resolved model id shown in every chunk */
    const coai_tool *tools;    /* the client's tools (after tool_choice); may be NULL */
    size_t tool_count;
    coai_str session_id;       /* tool-call id session part ([A-Za-z0-9], <= 32) */
    coai_str prompt;           /* for the usage estimate */
    const coai_run_params *env; /* answers request_context execs; NULL = defaults */
    coai_upstream_fn send;     /* required when the upstream can ask for replies */
    void *send_user;
    size_t max_kv_bytes;       /* 0 = COAI_MAX_KV_BYTES */
    int batch_tools;           /* 1: a mapped exec does not end the response at once: more
                                * execs are collected (parallel tool calls) until the
                                * caller's quiet window ends with coai_reply_end_tools() */
    coai_str echo;             /* Responses: ,"k":v members added to the response object */
    int rs_compact;            /* Responses compaction (coai_responses_request.compact): 1 the
                                * answer is one "compaction" output item, 2 and the body is
                                * a response.compaction object (POST /responses/compact) */
    /* Emulated request fields (Cursor has none of them); zero = off. */
    const coai_str *stop;      /* stop sequences: the text is cut before the first match,
                                * across deltas; finish STOP_SEQUENCE */
    size_t stop_count;
    int64_t max_tokens;        /* output limit: text + reasoning cut once the estimate
                                * (UTF-16 units / 4) or Cursor's token count reaches it;
                                * finish LENGTH */
    int json_check;            /* non-streaming: the answer must be a JSON object (```json
                                * fences are removed), else a 502 invalid_json_output */
    const struct cJSON *json_schema; /* its top-level "required" members are checked */
    uint64_t write_salt;       /* random bytes for this response (coai_tool_call.salt): the
                                * staging directory of a split write is named with them */
} coai_reply_opts;

/* Copy dialect, stream, include_usage, tools, session_id and prompt from a parsed
 * request. */
void coai_reply_opts_from_request(coai_reply_opts *o, const coai_request *req);

typedef struct coai_reply_kv coai_reply_kv;

/* One tool call this response handed to the client: what its result must be sent
 * upstream as (coai_encode_exec_answer) and the id the client will answer with.
 * Views point into mem_ and live until coai_reply_continue() or coai_reply_free(). */
typedef struct coai_reply_call {
    coai_exec_ref ref;
    coai_str call_id;          /* the tool call id the client sees */
    coai_str tool;             /* the client's tool name */
    coai_str args;             /* arguments JSON text */
    char *mem_;
} coai_reply_call;

/* Why a reply ended; each writer spells it (OpenAI finish_reason, Anthropic stop_reason). */
typedef enum coai_finish {
    COAI_FINISH_STOP = 0,      /* the turn ended: "stop" / "end_turn" */
    COAI_FINISH_TOOL_CALLS,    /* a tool call ends the reply: "tool_calls" / "tool_use" */
    COAI_FINISH_LENGTH,        /* output limit reached: "length" / "max_tokens" */
    COAI_FINISH_STOP_SEQUENCE  /* a stop sequence matched: "stop" / "stop_sequence" */
} coai_finish;

/* Token counts of a reply. input_tokens counts the whole prompt, cached parts included;
 * cache_* are the parts of it Cursor reported as read from / written to its cache (0 when
 * unknown). Cursor's TurnEndedUpdate input already contains them, as OpenAI counts (two
 * live frames: input 11,490 with cache read 11,392; 24,034 with 20,014), so input_tokens is
 * that input as sent. Writers that list them separately (Anthropic) subtract them from input
 * (never below 0). reasoning_tokens is the part of output_tokens Cursor reported as reasoning
 * (0 when unknown); reported = 1 when the counts are Cursor's own (TurnEndedUpdate), 0 when
 * they are estimates. cache_over_input = 1 when Cursor's cache read exceeds its input (a
 * server that counts the other way): the raw figures are kept, and the caller may log it. */
typedef struct coai_usage {
    int64_t input_tokens, output_tokens, cache_read_tokens, cache_write_tokens;
    int64_t reasoning_tokens;
    int reported;
    int cache_over_input;
} coai_usage;

typedef struct coai_reply {
    coai_buf out;              /* client body bytes to send; the caller drains it */
    unsigned queries;          /* interaction_query messages seen (each answered) */
    unsigned rejected;         /* exec requests refused upstream */
    coai_error error;          /* the error that ended the run, status 0 if none */
    /* private */
    coai_reply_opts o_;
    int committed_, done_, status_;
    int text_streamed_;
    char session_[33];
    coai_buf prefix_;          /* {"id":..,"object":..,"created":..,"model":.. */
    coai_buf content_, reasoning_, scratch_, tmp_;
    coai_buf tc_id_, tc_name_, tc_args_;
    int has_tool_call_;
    unsigned char carry_[2][4];
    size_t carry_len_[2];
    size_t prompt_units_, completion_units_;
    int64_t token_sum_, used_tokens_;
    int have_token_delta_, status_ok_;
    coai_reply_kv *kv_;
    size_t kv_count_, kv_cap_, kv_bytes_;
    coai_buf fallback_;        /* kept assistant texts: [u32 length][bytes]... */
    /* the dialect writer and its state */
    const struct coai__writer *w_;
    coai_finish finish_;       /* how the reply ended (valid once done without error) */
    int64_t cache_read_, cache_write_;  /* cache token counts when Cursor sends them */
    int block_, block_open_;   /* Anthropic: next content block index, open block kind */
    /* tool calls of this response (tc_* above hold the newest one) and held-run state */
    coai_reply_call *calls_;
    size_t ncalls_;
    int tools_open_;           /* batch_tools: calls collected, finish not yet written */
    coai_buf checkpoint_;      /* latest conversation_checkpoint_update bytes */
    int have_checkpoint_;
    coai_buf said_;            /* content text given to the client (conversation memory) */
    int said_cut_;
    unsigned kv_misses_;
    int64_t rs_seq_;           /* Responses: next sequence_number */
    int rs_index_, rs_open_;   /* Responses: output_index of the open/next item, its kind */
    size_t rs_reason_units_;   /* Responses, Gemini: reasoning text length (reasoning tokens) */
    coai_buf rs_items_;        /* Responses: finished output items, joined by ',' */
    coai_buf rs_final_;        /* Responses: the final response object */
    coai_buf hold_;            /* text held back while it may start a stop sequence */
    int stop_hit_;             /* index of the stop sequence that ended the reply, or -1 */
    int limit_hit_;            /* the reply was cut at max_tokens */
    coai_turn_usage turn_;     /* TurnEndedUpdate's token counts, when it had them */
} coai_reply;

/* 0 ok; COAI_ERR_INVALID (missing ids), COAI_ERR_NOMEM. Free with coai_reply_free. */
int coai_reply_init(coai_reply *r, const coai_reply_opts *o);
void coai_reply_free(coai_reply *r);
/* Each returns COAI_OK (go on), COAI_DONE (response complete: send r->out, end the
 * response, close the upstream) or COAI_ERR_NOMEM (no memory for the output; drop
 * the connection). After COAI_DONE every call returns COAI_DONE and writes nothing. */
int coai_reply_feed_msg(coai_reply *r, const coai_msg *m);
int coai_reply_feed_status(coai_reply *r, const coai_status *st);  /* trailer/end-stream */
int coai_reply_feed_eof(coai_reply *r);                            /* upstream body ended */
int coai_reply_feed_error(coai_reply *r, const coai_error *e);     /* transport/HTTP error */
int coai_reply_fail_timeout(coai_reply *r);                        /* caller's idle timer */
/* Streaming: commit if needed and write ": keepalive\n\n". Non-streaming: nothing. */
int coai_reply_keepalive(coai_reply *r);
int coai_reply_started(const coai_reply *r);  /* 1 once status and headers are final */
int coai_reply_done(const coai_reply *r);
/* 1 when the response ended with a tool call: the upstream run is then still waiting
 * for a result it will not get, so close it rather than read it to its end. */
int coai_reply_tool_called(const coai_reply *r);
int coai_reply_status(const coai_reply *r);   /* HTTP status to send (200 or error) */
/* Usage as the reply reports it (Cursor's counts when it sent them, else estimates). */
void coai_reply_usage(const coai_reply *r, coai_usage *u);
/* batch_tools: number of tool calls collected and not yet ended (0 = none pending). */
size_t coai_reply_tools_pending(const coai_reply *r);
/* batch_tools: the quiet window is over: write the finish (tool calls). Returns as
 * coai_reply_feed_msg (COAI_DONE when it ended the response). With batch_tools, a text,
 * thinking or turn-end message after collected tool calls also ends the response, and
 * is not consumed (coai_reply_feed_msg returns COAI_DONE; keep it for the next one). */
int coai_reply_end_tools(coai_reply *r);
/* The tool calls of the response, in order (also after it ended); *calls may be NULL. */
size_t coai_reply_calls(const coai_reply *r, const coai_reply_call **calls);
/* The latest checkpoint bytes seen on this run (empty view when none). */
coai_str coai_reply_checkpoint(const coai_reply *r);
/* The assistant text this response gave the client (content, not reasoning); the
 * caller checks `text_cut` (1 when it passed COAI_MAX_KEEP_TEXT and was not kept). */
coai_str coai_reply_text(const coai_reply *r, int *text_cut);
/* The run's KV store: blob i (0 <= i < count) as id and data views (valid until the
 * next feed or free), and a way to seed it (a resumed conversation's blobs, served on
 * get_blob). put: 0 ok, -1 over max_kv_bytes or no memory. */
size_t coai_reply_kv_count(const coai_reply *r);
void coai_reply_kv_at(const coai_reply *r, size_t i, coai_str *id, coai_str *data);
int coai_reply_kv_put(coai_reply *r, coai_str id, coai_str data);
/* get_blob requests the store could not answer (a resumed conversation missing one). */
unsigned coai_reply_kv_misses(const coai_reply *r);
/* A held run between two HTTP requests: answer what needs an answer and write nothing
 * for the client (KV, interaction queries, request_context, execs no tool matches,
 * checkpoints, token counts, heartbeats and announcements): returns 1. Returns 0 for a
 * message the client must see (text, thinking, a mapped exec, turn end): the caller
 * keeps it for the next response. -1 when a reply could not be delivered upstream. */
int coai_reply_answer(coai_reply *r, const coai_msg *m);
/* Continue the same upstream run in a new response (the follow-up request of a held
 * run): output state, usage and tool calls start over with the new options; the KV
 * store, the checkpoint and the tool-call id session are kept. 0 ok, COAI_ERR_INVALID,
 * COAI_ERR_NOMEM. */
int coai_reply_continue(coai_reply *r, const coai_reply_opts *o);
/* Append the response header lines this reply needs ("Content-Type: ..\r\n",
 * "Cache-Control: no-cache\r\n" for SSE, "x-should-retry: false\r\n",
 * "Retry-After: N\r\n"); the caller adds status line, framing and connection headers. */
int coai_reply_head(const coai_reply *r, coai_buf *out);
/* PART:CORE api end */

/* ======================================================================== */
/* PART:OPENAI api (the OpenAI Chat Completions dialect)                    */
/* ======================================================================== */

/* OpenAI Chat Completions: coai_request_parse(req, COAI_DIALECT_OPENAI_CHAT, ...). */
int coai_chat_request_parse(coai_chat_request *req, const char *body, size_t n,
                            coai_error *err);
void coai_chat_request_free(coai_chat_request *req);
void coai_chat_request_params(const coai_chat_request *req, coai_run_params *p);
/* Flatten an OpenAI messages array as the original client did into out, without validating
 * it (values of the wrong type count as empty text). 0 ok, -1 fail. */
int coai_prompt_build(coai_buf *out, const struct cJSON *messages);

/* PART:OPENAI api end */

/* ======================================================================== */
/* PART:QUOTA api (Cursor plan and current-period usage)                    */
/* ======================================================================== */
/* Reads the two Connect-JSON answers of Cursor's dashboard service
 * (aiserver.v1.DashboardService/GetCurrentPeriodUsage and, optionally, GetPlanInfo; both
 * POST "{}" with the agent's bearer token) and renders them three ways: a JSON object for
 * GET /v1/usage and `cursor-oai usage --json`, a few human lines, and one summary line.
 * Every upstream member is optional: int64s may come as JSON numbers or decimal strings
 * (proto3 JSON writes int64 as strings), amounts are integer cents, times are Unix
 * milliseconds. Unknown or malformed members read as unknown (COAI_QUOTA_NONE), never as 0.
 *
 * Output JSON (every member always present; null when Cursor did not say):
 *   {"object":"cursor.usage",
 *    "plan":{"name","price","included_cents"} | null,
 *    "billing_cycle":{"start","end","start_ms","end_ms"} | null,   (ISO-8601 UTC strings)
 *    "resets_at": end of the billing cycle (ISO-8601 UTC) | null,
 *    "included":{"used_cents","limit_cents","remaining_cents","included_spend_cents",
 *                "bonus_cents","percent_used","auto_percent_used","api_percent_used"} | null,
 *    "on_demand":{"used_cents","limit_cents","remaining_cents","total_spend_cents",
 *                 "limit_type"} | null,
 *    "limit_reached": true | false | null,
 *    "message": Cursor's own display message | null}
 * limit_reached: included remaining > 0 -> false; <= 0 -> true unless an on-demand limit
 * with money left exists; unknown remaining -> null (a percentage alone decides nothing). */

#define COAI_QUOTA_NONE INT64_MIN   /* "Cursor did not say" for every int64 member */

typedef struct coai_quota {
    int64_t cycle_start_ms;        /* billingCycleStart */
    int64_t cycle_end_ms;          /* billingCycleEnd (= when the included usage resets) */
    int64_t used_cents;            /* planUsage.totalSpend */
    int64_t included_spend_cents;  /* planUsage.includedSpend */
    int64_t bonus_cents;           /* planUsage.bonusSpend */
    int64_t limit_cents;           /* planUsage.limit */
    int64_t remaining_cents;       /* planUsage.remaining */
    double percent_used;           /* planUsage.totalPercentUsed; < 0 = unknown */
    double auto_percent_used;      /* planUsage.autoPercentUsed; < 0 = unknown */
    double api_percent_used;       /* planUsage.apiPercentUsed; < 0 = unknown */
    int have_plan_usage;           /* planUsage was an object */
    int have_on_demand;            /* spendLimitUsage was an object */
    int64_t od_total_cents;        /* spendLimitUsage.totalSpend */
    int64_t od_limit_cents;        /* individualLimit, else pooledLimit */
    int64_t od_used_cents;         /* individualUsed, else pooledUsed */
    int64_t od_remaining_cents;    /* individualRemaining, else pooledRemaining */
    char od_limit_type[16];        /* "user" / "team" / "" */
    char message[256];             /* displayMessage (clean UTF-8, no control bytes) */
    char plan_name[64];            /* GetPlanInfo planInfo.planName, "" = unknown */
    char plan_price[32];           /* planInfo.price, e.g. "$20/mo" */
    int64_t plan_included_cents;   /* planInfo.includedAmountCents */
} coai_quota;

/* Fill *u from the GetCurrentPeriodUsage body (required: a JSON object, else
 * COAI_ERR_JSON and *u all unknown) and the GetPlanInfo body (plan may be NULL; a bad plan
 * body is ignored). Returns 0, COAI_ERR_JSON or COAI_ERR_NOMEM. */
int coai_quota_parse(coai_quota *u, const char *period, size_t n, const char *plan, size_t pn);
/* 1 limit reached, 0 not reached, -1 unknown (see above). */
int coai_quota_limit_reached(const coai_quota *u);
/* The JSON object above. 0 ok, -1 fail. */
int coai_quota_write_json(coai_buf *out, const coai_quota *u);
/* Human lines ("Plan: ...\n", "Billing cycle: ...\n", ...), relative times from now_ms. */
int coai_quota_write_text(coai_buf *out, const coai_quota *u, int64_t now_ms);
/* One line without newline, e.g. "$12.34 of $20.00 included usage used (62%), $7.66 left;
 * resets 2026-12-01 (in 6 days)". */
int coai_quota_summary(coai_buf *out, const coai_quota *u, int64_t now_ms);
/* "2026-12-01T00:00:00Z" for Unix ms (any int64; years outside 0..9999 are clamped). */
void coai_iso8601(char out[21], int64_t ms);
/* PART:QUOTA api end */

/* ======================================================================== */
/* PART:IMAGE api (data: URLs, image type and size from the header)          */
/* ======================================================================== */
/* Client images reach Cursor as UserMessage.selected_context.selected_images: SelectedImage
 * {2 uuid, 4 dimension{1 width, 2 height}, 7 mime_type, 8 data = the raw bytes} (what
 * cursor-agent itself sends). Only data: URLs
 * with base64 payloads are taken: the proxy never fetches a URL (that would make it an SSRF
 * tool), so http(s) URLs get a 400 that says so. The type comes from the magic bytes (JPEG,
 * PNG, GIF, WebP, BMP; anything else is a 400), never from the URL's declared type; width
 * and height from the header when it is cheap to read (PNG IHDR, GIF screen, WebP
 * VP8/VP8L/VP8X, JPEG SOFn, BMP DIB header), else left unknown (0, and the dimension field
 * is omitted). A run request with images sets AgentRunRequest.client_supports_inline_images
 * (19): Cursor ignores inline image data without it (seen live). The uuid is derived
 * from SHA-256 of the bytes, so the same image gets the same id in every request. */

#ifndef COAI_MAX_IMAGE_BYTES
#define COAI_MAX_IMAGE_BYTES (5u * 1024u * 1024u)    /* decoded bytes per image (-> 413) */
#endif
#ifndef COAI_MAX_IMAGES
#define COAI_MAX_IMAGES 12                          /* images per request (-> 400) */
#endif
#ifndef COAI_MAX_IMAGES_BYTES
#define COAI_MAX_IMAGES_BYTES (20u * 1024u * 1024u) /* decoded bytes per request (-> 413) */
#endif

typedef struct coai_image {
    unsigned char *data;       /* decoded bytes (heap; coai_image_free) */
    size_t len;
    const char *mime;          /* static: "image/jpeg", "image/png", "image/gif", "image/webp",
                                * "image/bmp" */
    uint32_t width, height;    /* from the header; 0 = unknown */
    char uuid[37];             /* SelectedImage.uuid, from SHA-256 of the bytes */
} coai_image;

/* Caps for one request; 0 members take the COAI_MAX_IMAGE* defaults. */
typedef struct coai_image_limits {
    size_t max_bytes;          /* per image, decoded */
    size_t max_count;          /* images per request */
    size_t max_total;          /* all images of a request, decoded */
} coai_image_limits;

/* "data:[<type>][;<param>]*;base64,<payload>" -> views into url (type may be empty).
 * 0 ok; COAI_ERR_INVALID when url is not a data: URL or its payload is not base64-marked. */
int coai_data_url_parse(coai_str url, coai_str *type, coai_str *payload);
/* The image type of p[0..n) from its magic bytes (static string) or NULL; *w and *h get the
 * dimensions when the header says them cheaply, else 0. w/h may be NULL. */
const char *coai_image_sniff(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h);
/* Decode one image URL into *img (zeroed first). param names the part in errors (e.g.
 * "messages[1].content[0].image_url.url"). Errors fill *err: 400 for remote URLs, non-data
 * URLs, bad base64, unknown image types; 413 beyond max_bytes (0 = COAI_MAX_IMAGE_BYTES),
 * checked before decoding; 500 for memory. Returns 0 or a negative coai_result. */
int coai_image_from_url(coai_image *img, coai_str url, size_t max_bytes, const char *param,
                        coai_error *err);
/* The same for a base64 payload with a declared media type (Anthropic's base64 source;
 * type may be empty). */
int coai_image_from_base64(coai_image *img, coai_str type, coai_str base64, size_t max_bytes,
                           const char *param, coai_error *err);
void coai_image_free(coai_image *img);
/* SelectedContext body bytes for images[0..n) (field 1 per image), appended to out. */
int coai_encode_selected_images(coai_buf *out, const coai_image *images, size_t n);
/* A tool result with images for an MCP exec (as cursor-agent sends it):
 * AgentClientMessage{exec_client_message{1 id, 15 exec_id, 11 mcp_result{1 success{
 * 1 content = [{1 text{1 text}} when text is non-empty, then {2 image{1 data, 2 mime_type}}
 * per image], 2 is_error (only when set)}}}}. For a dialect that hands tool results back to
 * a waiting run (held runs); today's flow puts tool results into the next prompt instead.
 * Same contract as the other exec encoders. */
int coai_encode_exec_mcp_result_images(coai_buf *out, uint32_t id, coai_str exec_id,
                                       coai_str text, const coai_image *images, size_t n,
                                       int is_error);
/* PART:IMAGE api end */

/* ======================================================================== */
/* PART:ANTHROPIC api (Messages API: request parser, writer, model names)   */
/* ======================================================================== */
/* The Anthropic Messages dialect (POST /v1/messages, what Claude Code and the official
 * SDKs speak) on the neutral core.
 *
 * REQUEST (coai_anthropic_parse = coai_request_parse(..., COAI_DIALECT_ANTHROPIC, ...))
 *   Read: model (required), max_tokens (required, integer >= 1; -> req.max_tokens),
 *   stream, system (a string or text blocks), messages (role "user", "assistant", and
 *   "system" as a current Claude Code sends it; content a string or blocks: text, image
 *   (base64 or url source), tool_use (assistant: id, name, input object -> a coai_call
 *   whose args are the input as compact JSON), tool_result (user: tool_use_id, content
 *   a string or text/image blocks, is_error -> a TOOL message; a user message's other
 *   blocks become a USER message around it), thinking (-> a THINKING part),
 *   redacted_thinking / server_tool_use / web_search_tool_result (ignored), document
 *   with a text source (-> text, also in a tool_result; another source is a 400)), tools (name ^[a-zA-Z0-9_-]{1,128}$, description,
 *   input_schema; tools with a "type" other than "custom" are Anthropic-run tools and
 *   are left out, as are defer_loading tools), tool_choice (auto, any, tool + name,
 *   none), stop_sequences, thinking (enabled + budget_tokens, adaptive, disabled ->
 *   req.thinking), metadata (an object). cache_control, citations, temperature, top_p,
 *   top_k, context_management, output_config, service_tier and other members are
 *   accepted and ignored. An unknown content block type is a 400. Errors name the
 *   member the way Anthropic does ("messages.2.content.0.text: Field required").
 *   coai_anthropic_count_parse() reads a /v1/messages/count_tokens body (max_tokens
 *   optional, never streaming); coai_request_input_tokens() is the count, the same
 *   estimate a reply reports as input_tokens when Cursor sends no count.
 *
 * REPLY (coai_reply with opts.dialect = COAI_DIALECT_ANTHROPIC; completion_id "msg_...")
 *   Streaming: event: message_start (usage with the input estimate), then per content
 *   block content_block_start / content_block_delta / content_block_stop: "text"
 *   (text_delta), "thinking" (thinking_delta, closed by a signature_delta), "tool_use"
 *   (the whole input in one input_json_delta); then message_delta (stop_reason
 *   end_turn / tool_use / max_tokens / stop_sequence, usage) and message_stop.
 *   Keepalives are "event: ping". An error after the first byte is "event: error" with
 *   {"type":"error","error":{"type","message"}}; before it, the status and body of
 *   coai_error_status_as / coai_error_write_as (529 overloaded_error for an
 *   unavailable upstream). Non-streaming: one {"type":"message"} object with the same
 *   content blocks. usage: input_tokens without the cached parts,
 *   cache_creation_input_tokens, cache_read_input_tokens, output_tokens.
 *
 * MODELS
 *   coai_models_resolve_claude() maps an Anthropic model name to one of the account's
 *   Cursor models by family (opus / sonnet / haiku) and version, e.g.
 *   claude-sonnet-4-5-20250929 or claude-3-7-sonnet-latest -> the account's
 *   "sonnet-4.5" / "claude-3.7-sonnet" ...: exact family and version first, else the
 *   newest version of the family, else (haiku, usually absent on Cursor) the newest
 *   sonnet. With want_thinking the "-thinking" variant is preferred when it exists.
 *   coai_models_write_anthropic() renders GET /v1/models in Anthropic's list shape. */

int coai_anthropic_parse(coai_request *req, const char *body, size_t n, coai_error *err);
int coai_anthropic_count_parse(coai_request *req, const char *body, size_t n,
                               coai_error *err);
/* Estimated input tokens: ceil(UTF-16 units of the prompt / 4). */
int64_t coai_request_input_tokens(const coai_request *req);
/* 1 and *out (a view into m) when requested is a Claude model name ("claude-..." or a
 * bare family name) and the account has a model of that family (or a sonnet for a
 * missing haiku); 0 when requested is no Claude name or nothing fits. */
int coai_models_resolve_claude(const coai_models *m, coai_str requested, int want_thinking,
                               coai_str *out);
/* Map an exec to a Messages client's tools: coai_exec_map, and when the client has no
 * tool of the exec's role for a read, write, ls, grep (with or without a file glob) or
 * delete exec (a current Claude Code offers no ls or delete; a shell-only client nothing
 * but its shell), the same work as a command for its shell tool: cat, printf '%s' > (a
 * write too big for one argument, or holding a NUL: the split write's parts, tc->parts),
 * ls -la, grep -rnE [--include], find -name, wc -c && rm (every path, pattern, glob and
 * content through the one quoting layer: one literal word each, a path never read as an
 * option; a NUL in a path or pattern: 0 and tc->refusal). The chat, Responses (without a
 * Codex shell) and Gemini maps fall back to the same commands. Same contract as
 * coai_exec_map. */
int coai_anthropic_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                            coai_str workspace, coai_tool_call *tc);
/* {"data":[{"type":"model","id","display_name","created_at"}...],"has_more":false,
 *  "first_id","last_id"}. created_at: RFC 3339 of `created` (unix seconds). */
int coai_models_write_anthropic(coai_buf *out, const coai_models *m, int64_t created);
/* GET /v1/models/{model} for an Anthropic client: that model's object alone,
 * {"type":"model","id","display_name","created_at"}, as in the list. 0 ok, -1 fail. */
int coai_models_write_anthropic_model(coai_buf *out, const coai_model *one, int64_t created);
/* PART:ANTHROPIC api end */

/* ======================================================================== */
/* PART:RESPONSES api (OpenAI Responses: request parser, exec mapping, writer) */
/* ======================================================================== */
/* The OpenAI Responses dialect (POST /v1/responses, what Codex CLI and
 * client.responses.create speak) on the neutral core.
 * The request: instructions (a system message), input (a string = one user message, or
 * items: message with input_text / output_text / input_image / refusal parts,
 * function_call, custom_tool_call, function_call_output, custom_tool_call_output,
 * reasoning (kept as thinking, not prompt text), local_shell_call(+_output); items of
 * hosted tools (web_search_call, ...) are skipped), tools (function tools; custom tools
 * such as Codex's freeform apply_patch, shown to Cursor as a function taking one string
 * "input"; namespace groups and hosted tools (web_search, tool_search, file_search,
 * image_generation, code_interpreter, mcp, computer use, local_shell) are accepted and
 * left out of what Cursor sees), tool_choice, parallel_tool_calls, reasoning, include,
 * store, max_output_tokens, metadata, prompt_cache_key and the sampling fields (accepted,
 * not used). previous_response_id: the caller looks the id up (coai_responses_previous_id)
 * and passes the stored items as `history`.
 * The reply (writer COAI_DIALECT_RESPONSES): the semantic stream events with
 * sequence_number, or one response object; coai_reply_response() gives the final object
 * and coai_reply_output_items() the output items for the caller's store.
 * Compaction (Codex's long sessions): an input ending in a compaction_trigger item, or a
 * POST /responses/compact body (coai_responses_compact_parse), becomes a run asked for a
 * summary with no tools; the writer (coai_reply_opts.rs_compact) answers with one
 * "compaction" item carrying the summary, and a compaction item sent back becomes a user
 * message (COAI_RESPONSES_COMPACT_PROMPT and its neighbours below). */

typedef struct coai_responses_request {
    coai_request req;              /* the neutral request (dialect COAI_DIALECT_RESPONSES) */
    coai_str previous_response_id; /* "" when not given */
    int store;                     /* store: true (OpenAI's default) or false */
    int compact;                   /* 1 the input ended in a compaction_trigger item, 2 a
                                    * /responses/compact body: the run is asked for a summary
                                    * (COAI_RESPONSES_COMPACT_PROMPT) with no tools */
    coai_buf items;                /* history + this input as Responses items, JSON objects
                                    * joined by ',' (what a stored response remembers) */
    coai_buf echo;                 /* ,"k":v members echoed in the response object */
} coai_responses_request;

/* Parse a /v1/responses body. history: a JSON array of earlier items (the stored items of
 * previous_response_id) or an empty view. 0, or a negative coai_result with *err set (400;
 * 500 for memory). rr is empty after a failure (free is still safe). */
int coai_responses_request_parse(coai_responses_request *rr, const char *body, size_t n,
                                 coai_str history, coai_error *err);
void coai_responses_request_free(coai_responses_request *rr);
/* The same for a POST /v1/responses/compact body (model, input, instructions,
 * previous_response_id; tools and the rest accepted): rr->compact = 2, not streamed, not
 * stored. Set coai_reply_opts.rs_compact = rr->compact for the writer. */
int coai_responses_compact_parse(coai_responses_request *rr, const char *body, size_t n,
                                 coai_str history, coai_error *err);
/* Compaction through Cursor: the conversation goes to a run with this request appended as
 * the last user message and no tools; the answer's text is the summary. It comes back as
 * {"type":"compaction","encrypted_content":COAI_RESPONSES_COMPACT_TAG + summary} (plain
 * text: Cursor has nothing to encrypt it with), which a later request's input turns into a
 * user message COAI_RESPONSES_SUMMARY_INTRO + summary. */
#define COAI_RESPONSES_COMPACT_PROMPT \
    "Context compaction: the conversation above is about to be replaced by a summary, and " \
    "whoever continues the work will see only that summary. Write it now: the user's goals " \
    "and requests, what has been done (files read, created or changed, commands run and " \
    "what they showed), decisions and constraints, open problems and the next steps. Keep " \
    "exact names, paths, values and error messages that matter. Do not call any tools; " \
    "answer with the summary only."
#define COAI_RESPONSES_COMPACT_TAG "cursor-oai compaction summary v1\n"
#define COAI_RESPONSES_SUMMARY_INTRO \
    "Summary of the conversation so far (it replaces the earlier messages):\n"
/* previous_response_id of a body, copied NUL-terminated into out: 1 found, 0 not given
 * (or the body is not an object: the parser reports that), -1 not a string or too long. */
int coai_responses_previous_id(const char *body, size_t n, char *out, size_t cap);
/* (-2: the key is in the body twice; the caller answers duplicate_key as for any key) */
/* Map an exec to a Responses client's tools: shell -> exec_command {cmd, workdir} (Codex),
 * shell_command {command, workdir}, shell {command: [bash, -lc, cmd]} when its schema
 * declares an array, else coai_exec_map's names; write -> apply_patch ("*** Add File"),
 * delete -> apply_patch ("*** Delete File"), else a shell command; read / ls / grep ->
 * a dedicated tool via coai_exec_map, else a shell command (cat, ls -la, rg). Custom
 * (freeform) tools get {"input": text}. Same contract as coai_exec_map. A write through
 * exec_command or shell_command (one string: Linux takes 128 KiB in one argument) that
 * does not fit one command is split: tc->parts calls of COAI_WRITE_PART_BYTES each, as
 * base64, into a staging directory beside the target, the whole file renamed into place
 * by the call that completes it (the array-form shell takes the content as several
 * arguments of one call instead); tc->salt names the staging directory. A path or
 * content apply_patch could read as more than it is (a line break, a control byte, white
 * space at either end, a directive's start; CR or another line separator in the content)
 * never goes into a patch: the shell does it, or with no shell tool the map returns 0
 * with tc->refusal. */
int coai_responses_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                            coai_str workspace, coai_tool_call *tc);
/* The final response object (valid once the reply is done without error; empty view
 * otherwise) and its output items joined by ',' (for previous_response_id). */
coai_str coai_reply_response(const coai_reply *r);
coai_str coai_reply_output_items(const coai_reply *r);
/* PART:RESPONSES api end */

/* ======================================================================== */
/* PART:GEMINI api (Gemini API: request parser, exec mapping, writer)       */
/* ======================================================================== */
/* The Gemini API dialect (POST /v1beta/models/{model}:generateContent and
 * :streamGenerateContent, what Gemini CLI and the google-genai SDKs speak) on the neutral
 * core. It is the worked example of DIALECTS in the header comment: a parser, a writer, an
 * exec mapping and a route; what else it needed is listed under "CORE ADDITIONS".
 *
 * REQUEST (coai_gemini_parse; the table's parser, coai_request_parse(COAI_DIALECT_GEMINI),
 *   is the same with model "auto" and no stream): the model and the stream flag come from
 *   the URL, not the body. contents (role "user" / "model" / "function"; parts: text,
 *   text with thought: true (-> THINKING), inlineData {mimeType, data} (-> IMAGE),
 *   functionCall {id, name, args} (model: -> coai_call), functionResponse {id, name,
 *   response, parts} (-> a TOOL message: response.output, else response.error (is_error),
 *   else response.content, else the response as JSON; parts' inlineData -> its images);
 *   thoughtSignature, videoMetadata and
 *   executableCode / codeExecutionResult are accepted, the last two as text),
 *   systemInstruction (parts or a string), tools[].functionDeclarations (name,
 *   description, parametersJsonSchema or parameters - Gemini's OpenAPI types such as
 *   "OBJECT" are lowercased in place; googleSearch, codeExecution and other built-in tools
 *   are left out), toolConfig.functionCallingConfig (mode AUTO / ANY / NONE / VALIDATED,
 *   allowedFunctionNames: only those tools; ANY with one name = that tool),
 *   generationConfig (maxOutputTokens, stopSequences, thinkingConfig: thinkingBudget 0 =
 *   off, includeThoughts, thinkingLevel; responseMimeType application/json with
 *   responseSchema / responseJsonSchema = a JSON answer; candidateCount > 1 is refused;
 *   temperature, topP, topK, seed, penalties ... accepted and not used), safetySettings
 *   and labels (accepted). cachedContent is refused (there is no server-side cache).
 *   Google's own 400s are kept: an allowedFunctionNames entry no declaration has, a second
 *   declaration of a name, a non-object functionResponse.response, a functionResponse
 *   content not right after a model content with a functionCall, a non-object
 *   responseSchema / responseJsonSchema, a responseMimeType outside Google's list. An image
 *   error names the Gemini field (coai_part.path: "contents[i].parts[j].inlineData").
 *   Ids: a functionCall / functionResponse without an id gets its name as id, so that a
 *   call and its result still pair up. Results keep the client's text; what goes to Cursor
 *   is read out of it by coai_exec_outcome_parse, which knows Gemini CLI's
 *   run_shell_command result ("<untrusted_context>\nOutput: ...\nExit Code: N\nProcess
 *   Group PGID: ..." - the exit code line only when non-zero, stdout and stderr merged by
 *   its pty): output and exit code; one that ended without an exit code (a signal, a spawn
 *   error, cancelled by the user or at its timeout) is a failure with the text as stderr.
 *
 * REPLY (writer COAI_DIALECT_GEMINI; opts.stream: 1 = SSE "data: {...}\r\n\r\n" (alt=sse),
 *   2 = one JSON array written element by element (streamGenerateContent without alt))
 *   Each chunk is a GenerateContentResponse: candidates[0].content {role "model", parts},
 *   index 0, usageMetadata (promptTokenCount, candidatesTokenCount, totalTokenCount,
 *   thoughtsTokenCount, cachedContentTokenCount when Cursor reported a cache read),
 *   modelVersion (the resolved model), responseId (opts.completion_id). Text deltas are
 *   {"text"} parts, reasoning {"text","thought":true}; the function calls of a response go
 *   in the last chunk ({"functionCall":{"id","name","args"}}, ids as in coai_reply), which
 *   carries finishReason STOP (MAX_TOKENS for an output limit); an answer that ends
 *   without calls ends with an empty text part carrying the finishReason. Keepalives are a
 *   bare "\r\n" (Gemini's SDK reads "^\s*data: " and would stall on an SSE comment). A
 *   committed error is a chunk {"error":{"code","message","status"}}. Non-streaming: one
 *   GenerateContentResponse with every part.
 *
 * ERRORS (coai_error_write_as / coai_error_status_as with COAI_DIALECT_GEMINI)
 *   {"error":{"code":<HTTP status>,"message","status":"INVALID_ARGUMENT" | "UNAUTHENTICATED"
 *   | "PERMISSION_DENIED" | "NOT_FOUND" | "RESOURCE_EXHAUSTED" | "CANCELLED" | "INTERNAL" |
 *   "UNAVAILABLE" | "DEADLINE_EXCEEDED","details":[...]}}. A usage limit (code
 *   insufficient_quota) is a 429 whose message ends in "(limit: 0 ...)" and whose details
 *   hold an ErrorInfo {reason "USAGE_LIMIT_EXHAUSTED", domain "cursor.com"} and a
 *   QuotaFailure: Gemini CLI treats a 429 message with "limit: 0" as a terminal quota error
 *   and shows it at once instead of retrying (measured: README "Gemini CLI"). A rate limit
 *   carries RetryInfo {retryDelay} from retry_after.
 *
 * CORE ADDITIONS this dialect needed (everything else is the table row and the route):
 *   - Gemini CLI's shell layout in coai_exec_outcome_parse (the per-client result table;
 *     coai__gm_outcome), the same kind of entry every client has there.
 *   - coai_reply_opts.stream = 2 (the JSON-array stream) and coai_reply_head's content type
 *     for it; coai_error_write_as / _status_as learned Google's shape.
 *   - the model and the stream flag come from the URL (coai_gemini_parse's arguments). */

/* model: as in the URL ("models/" prefix allowed; empty -> "auto"); copied. stream: 0, 1
 * SSE, 2 JSON array. Same contract as coai_request_parse. */
int coai_gemini_parse(coai_request *req, const char *body, size_t n, coai_str model,
                      int stream, coai_error *err);
/* The model segment of a Gemini URL (between "/v1beta/models/" and the method's ':'),
 * percent-decoded into out[cap] (NUL-terminated). 0 ok; -1 when a decoded byte is a control
 * byte (a model name never holds one: "%00" or "%0d%0a" would otherwise cut or split it) or
 * the name does not fit: a 400, never a shorter name. */
int coai_gemini_url_model(coai_str seg, char *out, size_t cap);
/* Map an exec to Gemini CLI's tools: shell -> run_shell_command {command, description,
 * dir_path}, read -> read_file {file_path}, write -> write_file {file_path, content}, grep
 * with a file glob -> grep_search {pattern, dir_path, include_pattern}, ls -> list_directory
 * {dir_path}, a glob -> glob {pattern, dir_path}; through coai_exec_map's name and
 * parameter matching, and like coai_anthropic_exec_map a shell command for an exec no
 * dedicated tool takes (delete: rm -f). Same contract as coai_exec_map. */
int coai_gemini_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                         coai_str workspace, coai_tool_call *tc);
/* GET /v1beta/models: {"models":[{"name":"models/<id>","baseModelId","version",
 * "displayName","inputTokenLimit","outputTokenLimit","supportedGenerationMethods",
 * "thinking"}...]}; one = non-NULL: just that model's object. 0 ok, -1 fail. */
int coai_models_write_gemini(coai_buf *out, const coai_models *m, const coai_model *one);
/* PART:GEMINI api end */

/* ======================================================================== */
/* PART:DIALECTS api (the dialect table: every fact of a client API, one row) */
/* ======================================================================== */

/* The names its clients send for a model, resolved against the account's list. */
typedef enum coai_model_names {
    COAI_MODEL_NAMES_CURSOR = 0,   /* Cursor's own ids (and aliases) */
    COAI_MODEL_NAMES_CLAUDE,       /* Claude names too ("claude-sonnet-4-5"), model map first */
    COAI_MODEL_NAMES_GEMINI        /* Gemini names too ("gemini-2.5-pro"), model map first */
} coai_model_names;

/* The data of one row of the dialect table (coai_dialect_get); its functions are reached
 * through coai_dialect_parse, coai_dialect_count_tokens, coai_dialect_models_write,
 * coai_dialect_model_find, coai_error_write_as and coai_error_status_as. */
typedef struct coai_dialect_info {
    const char *name;          /* its label in logs and metrics: "openai-chat", "anthropic",
                                * "openai-responses", "gemini" */
    const char *id_prefix;     /* a reply's id: this prefix and id_hex hex digits */
    int id_hex;                /* ("chatcmpl-" 24, "msg_" 24, "resp_" 32, Gemini "" 24) */
    const char *key_header;    /* a header its clients send the API key in, besides
                                * "Authorization: Bearer" ("x-api-key"), or NULL */
    const char *key_query;     /* a query parameter carrying the key on its routes, or NULL */
    const char *client_header; /* a header only its clients send: any request with it gets
                                * errors in this dialect's shape ("anthropic-version"), or NULL */
    int url_model;             /* 1: the model and the stream mode are in the URL */
    int method_404;            /* 1: a method its route does not have is a 404, not a 405
                                * (Google's servers) */
    int stored;                /* 1: replies are kept for a later request (Responses' store:
                                * the caller parses with coai_responses_request_parse) */
    coai_model_names model_names;
} coai_dialect_info;

/* The row of dialect d, or NULL when d is not a dialect of this build. */
const coai_dialect_info *coai_dialect_get(coai_dialect d);
/* A request body's JSON made parseable in place: lone UTF-16 surrogate escapes become
 * U+FFFD (coai_json_fix_surrogates). 0 ok; -1 a \u escape without four hex digits, with
 * err set (400). Every parse of a client body starts here (coai_request_parse_ex does it
 * on a copy). */
int coai_request_body_fix(char *body, size_t n, coai_error *err);
/* Parse a body of dialect d with what its URL says (url_model, url_stream: 1 SSE, 2 a JSON
 * array; used by dialects with url_model, ignored by the others), then the checks of
 * coai_request_check. A url_model dialect's body is fixed in place (coai_request_body_fix);
 * the others' as in coai_request_parse_ex. 0 ok, <0 with err. */
int coai_dialect_parse(coai_request *req, coai_dialect d, char *body, size_t n,
                       coai_str url_model, int url_stream, const coai_image_limits *lim,
                       coai_error *err);
/* The answer of d's count-tokens route for body ({"input_tokens":N}, Gemini
 * {"totalTokens":N}) into out. 0 ok; <0 with err (404 when d has no such route). */
int coai_dialect_count_tokens(coai_buf *out, coai_dialect d, char *body, size_t n,
                              coai_str url_model, const coai_image_limits *lim,
                              coai_error *err);
/* The model list in d's shape (one = NULL) or one model (GET .../models/{model}).
 * 0 ok, -1 no memory. */
int coai_dialect_models_write(coai_buf *out, coai_dialect d, const coai_models *m,
                              const coai_model *one, int64_t now);
/* The model a GET .../models/{name} names in d's terms (modelId, display id or an alias;
 * Gemini: "models/" may lead), or NULL with err set to d's 404 (path: the request's path,
 * for the message). */
const coai_model *coai_dialect_model_find(coai_dialect d, const coai_models *m,
                                          const char *name, const char *path, coai_error *err);
/* The account's model for a chat request of dialect d that named want (after the caller's
 * own mapping) and that coai_models_resolve turned into current: when current is not one of
 * the account's ids, a Claude name (model_names CLAUDE) resolves by family and version
 * (coai_models_resolve_claude) and a Gemini name ("gemini-...", GEMINI) becomes what "auto"
 * resolves to (Gemini CLI asks for models an account lacks: "gemini-2.5-flash-lite" for its
 * side tasks); a dialect of Cursor's names keeps current. 0 keep current; 1 *out is the
 * model; -1 err set (a 404 naming the account's models: a Claude name nothing matches). */
int coai_dialect_model_pick(coai_dialect d, const coai_models *m, coai_str want,
                            const char *current, int thinking, coai_str *out, coai_error *err);
/* PART:DIALECTS api end */

#ifdef __cplusplus
}
#endif
#endif /* CURSOR_OAI_H */

/* ************************************************************************ */
/*                              IMPLEMENTATION                              */
/* ************************************************************************ */
#if defined(CURSOR_OAI_IMPLEMENTATION) && !defined(COAI_IMPLEMENTATION_DONE)
#define COAI_IMPLEMENTATION_DONE

/* Everything the implementation needs, in one place. cJSON, nanopb, the
 * generated proto headers (proto/ on the include path) and BearSSL. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bearssl.h>
#include <cJSON.h>
#include <pb_common.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include "agent.pb.h"
#include "aiserver.pb.h"
#include "google/rpc/status.pb.h"

/* ======================================================================== */
/* PART:COMMON impl                                                         */
/* ======================================================================== */

const char *coai_result_str(int r)
{
    switch (r) {
    case COAI_OK: return "ok";
    case COAI_MORE: return "more input needed";
    case COAI_DONE: return "done";
    case COAI_ERR_NOMEM: return "out of memory or over a size cap";
    case COAI_ERR_TOO_BIG: return "length over the limit";
    case COAI_ERR_FRAME: return "bad envelope framing";
    case COAI_ERR_COMPRESSED: return "compressed envelope not supported";
    case COAI_ERR_PROTO: return "malformed protobuf";
    case COAI_ERR_JSON: return "malformed JSON";
    case COAI_ERR_INVALID: return "invalid input";
    case COAI_ERR_UTF8: return "invalid UTF-8";
    case COAI_ERR_HTTP: return "malformed HTTP";
    case COAI_ERR_TRUNCATED: return "input ended early";
    case COAI_ERR_STATE: return "API misuse";
    case COAI_ERR_UPSTREAM: return "upstream error";
    case COAI_ERR_H2: return "HTTP/2 connection error";
    }
    return "unknown result";
}

coai_str coai_str_c(const char *s)
{
    coai_str r;
    r.ptr = s ? s : "";
    r.len = s ? strlen(s) : 0;
    return r;
}

int coai_str_eq(coai_str a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len == n && (n == 0 || memcmp(a.ptr, lit, n) == 0);
}

int coai_buf_reserve(coai_buf *b, size_t extra)
{
    size_t need, ncap;
    unsigned char *p;
    if (b->err) return -1;
    if (extra > (size_t)-1 - b->len - 1) { b->err = 1; return -1; }
    need = b->len + extra + 1;                      /* +1 keeps room for a NUL */
    if (b->max && need - 1 > b->max) { b->err = 1; return -1; }
    if (need <= b->cap) return 0;
    ncap = b->cap ? b->cap : 256;
    while (ncap < need) ncap = ncap > ((size_t)-1) / 2 ? need : ncap * 2;
    p = (unsigned char *)realloc(b->data, ncap);
    if (!p) { b->err = 1; return -1; }
    b->data = p;
    b->cap = ncap;
    return 0;
}

int coai_buf_append(coai_buf *b, const void *p, size_t n)
{
    if (coai_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int coai_buf_puts(coai_buf *b, const char *s) { return coai_buf_append(b, s, strlen(s)); }

int coai_buf_putc(coai_buf *b, int c)
{
    unsigned char ch = (unsigned char)c;
    return coai_buf_append(b, &ch, 1);
}

int coai_buf_printf(coai_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    char small[256];
    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->err = 1; return -1; }
    if ((size_t)n < sizeof small) return coai_buf_append(b, small, (size_t)n);
    if (coai_buf_reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void coai_buf_reset(coai_buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->data) b->data[0] = 0;
}

void coai_buf_free(coai_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}

int coai_hex_append(coai_buf *out, const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)p;
    size_t i;
    if (n > ((size_t)-1) / 2 - 1 || coai_buf_reserve(out, n * 2)) return -1;
    for (i = 0; i < n; i++) {
        out->data[out->len++] = (unsigned char)digits[s[i] >> 4];
        out->data[out->len++] = (unsigned char)digits[s[i] & 15];
    }
    out->data[out->len] = 0;
    return 0;
}

int coai_base64_append(coai_buf *out, const void *p, size_t n, int url)
{
    const char *al = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                         : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = (const unsigned char *)p;
    size_t i;
    if (n > ((size_t)-1) / 2 || coai_buf_reserve(out, (n + 2) / 3 * 4)) return -1;
    for (i = 0; i + 2 < n; i += 3) {
        unsigned long v = (unsigned long)s[i] << 16 | (unsigned long)s[i + 1] << 8 | s[i + 2];
        out->data[out->len++] = (unsigned char)al[v >> 18 & 63];
        out->data[out->len++] = (unsigned char)al[v >> 12 & 63];
        out->data[out->len++] = (unsigned char)al[v >> 6 & 63];
        out->data[out->len++] = (unsigned char)al[v & 63];
    }
    if (i < n) {
        unsigned long v = (unsigned long)s[i] << 16;
        if (i + 1 < n) v |= (unsigned long)s[i + 1] << 8;
        out->data[out->len++] = (unsigned char)al[v >> 18 & 63];
        out->data[out->len++] = (unsigned char)al[v >> 12 & 63];
        if (i + 1 < n) out->data[out->len++] = (unsigned char)al[v >> 6 & 63];
        else if (!url) out->data[out->len++] = '=';
        if (!url) out->data[out->len++] = '=';
    }
    out->data[out->len] = 0;
    return 0;
}

static int coai__b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

long coai_base64_decode(const char *in, size_t n, unsigned char *out, size_t out_cap)
{
    unsigned long acc = 0;
    size_t o = 0, i, bits = 0;
    while (n > 0 && in[n - 1] == '=') n--;
    if (n % 4 == 1) return -1;
    for (i = 0; i < n; i++) {
        int v = coai__b64val((unsigned char)in[i]);
        if (v < 0) return -1;
        acc = (acc << 6 | (unsigned long)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= out_cap) return -1;
            out[o++] = (unsigned char)(acc >> bits & 0xff);
        }
    }
    return (long)o;
}

void coai_uuid_format(char out[37], const unsigned char rnd[16])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char b[16];
    int i, o = 0;
    memcpy(b, rnd, 16);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    for (i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = digits[b[i] >> 4];
        out[o++] = digits[b[i] & 15];
    }
    out[o] = 0;
}

/* Length of the UTF-8 sequence at s (1..4) if valid and complete, 0 if invalid,
 * -1 if valid so far but cut off by the end of input. */
static int coai__utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need, i;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c < 0xc2) return 0;
    if (c < 0xe0) need = 1;
    else if (c < 0xf0) { need = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c < 0xf5) { need = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else return 0;
    for (i = 1; i <= need; i++) {
        if (i >= n) return -1;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf)) return 0;
    }
    return (int)need + 1;
}

/* Length of the maximal invalid subpart at s (WHATWG/Unicode "substitution of
 * maximal subparts", as Node's TextDecoder does): the lead byte plus the
 * continuation bytes that were still acceptable before the sequence broke. */
static size_t coai__utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xbf;
    size_t need, i;
    if (c < 0xc2 || c > 0xf4) return 1;
    if (c < 0xe0) need = 1;
    else if (c < 0xf0) { need = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else { need = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    for (i = 1; i <= need && i < n; i++)
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf)) break;
    return i;
}

size_t coai_utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int k = coai__utf8_seq(p + i, n - i);
        if (k <= 0) break;
        i += (size_t)k;
    }
    return i;
}

int coai_json_str_append(coai_buf *out, const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run;
    if (coai_buf_putc(out, '"')) return -1;
    while (i < n) {
        unsigned c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            run = i;
            while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
                run++;
            if (coai_buf_append(out, p + i, run - i)) return -1;
            i = run;
        } else if (c < 0x80) {
            char esc[7] = { '\\', 0, 0, 0, 0, 0, 0 };
            size_t len = 2;
            switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
                esc[4] = digits[c >> 4]; esc[5] = digits[c & 15];
                len = 6;
            }
            if (coai_buf_append(out, esc, len)) return -1;
            i++;
        } else {
            int k = coai__utf8_seq(p + i, n - i);
            if (k > 0) {
                if (coai_buf_append(out, p + i, (size_t)k)) return -1;
                i += (size_t)k;
            } else {
                /* One U+FFFD per maximal invalid subpart: skip the lead byte and any
                 * continuation bytes that cannot start a character. */
                if (coai_buf_append(out, "\xef\xbf\xbd", 3)) return -1;
                i += coai__utf8_bad_len(p + i, n - i);
            }
        }
    }
    return coai_buf_putc(out, '"');
}

int coai_json_num_append(coai_buf *out, double v)
{
    char tmp[40], res[48];
    int prec, exp10 = 0;
    char *e, *d;
    size_t nd = 0, i;
    char mant[24];
    int neg;
    if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
        return coai_buf_puts(out, "null");
    if (v == 0) return coai_buf_puts(out, "0");   /* JS prints -0 as 0 too */
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* tmp = [-]D[.DDD]e[+-]XX: collect digits and the decimal exponent. */
    neg = tmp[0] == '-';
    e = strchr(tmp, 'e');
    if (!e) return coai_buf_puts(out, "null");
    exp10 = atoi(e + 1);
    for (d = tmp + neg; d < e; d++)
        if (*d >= '0' && *d <= '9' && nd < sizeof mant - 1) mant[nd++] = *d;
    while (nd > 1 && mant[nd - 1] == '0') nd--;
    mant[nd] = 0;
    i = 0;
    if (neg) res[i++] = '-';
    if (exp10 >= 21 || exp10 <= -7) {
        /* d[.ddd]e+X like JavaScript's Number.prototype.toString */
        res[i++] = mant[0];
        if (nd > 1) { res[i++] = '.'; memcpy(res + i, mant + 1, nd - 1); i += nd - 1; }
        i += (size_t)snprintf(res + i, sizeof res - i, "e%c%d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 >= 0) {
        size_t intd = (size_t)exp10 + 1, k;
        for (k = 0; k < intd; k++) res[i++] = k < nd ? mant[k] : '0';
        if (nd > intd) { res[i++] = '.'; memcpy(res + i, mant + intd, nd - intd); i += nd - intd; }
    } else {
        int z;
        res[i++] = '0'; res[i++] = '.';
        for (z = 0; z < -exp10 - 1; z++) res[i++] = '0';
        memcpy(res + i, mant, nd); i += nd;
    }
    return coai_buf_append(out, res, i);
}

/* PART:COMMON impl end */

/* ======================================================================== */
/* PART:AUTH impl                                                           */
/* ======================================================================== */

static void coai__copy_cut(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    /* claims are shown to people: keep only the valid UTF-8 prefix that fits */
    n = coai_utf8_valid_prefix(src, n < cap ? n : cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

int coai_jwt_decode(coai_str token, coai_jwt *out)
{
    const char *dot1, *dot2, *end = token.ptr + token.len;
    unsigned char *raw;
    long n;
    cJSON *root, *it;
    memset(out, 0, sizeof *out);
    if (!token.ptr || token.len == 0) return -1;
    dot1 = (const char *)memchr(token.ptr, '.', token.len);
    if (!dot1) return -1;
    dot2 = (const char *)memchr(dot1 + 1, '.', (size_t)(end - dot1 - 1));
    if (!dot2) dot2 = end;
    if (dot2 == dot1 + 1 || dot2 - dot1 > 65536) return -1;
    raw = (unsigned char *)malloc((size_t)(dot2 - dot1));
    if (!raw) return -1;
    n = coai_base64_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), raw, (size_t)(dot2 - dot1));
    root = n > 0 ? cJSON_ParseWithLength((const char *)raw, (size_t)n) : NULL;
    free(raw);
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return -1; }
    it = cJSON_GetObjectItemCaseSensitive(root, "exp");
    if (cJSON_IsNumber(it) && it->valuedouble > 0 && it->valuedouble < 9.2e18)
        out->exp = (int64_t)it->valuedouble;
    it = cJSON_GetObjectItemCaseSensitive(root, "sub");
    if (cJSON_IsString(it)) coai__copy_cut(out->sub, sizeof out->sub, it->valuestring);
    it = cJSON_GetObjectItemCaseSensitive(root, "email");
    if (cJSON_IsString(it)) coai__copy_cut(out->email, sizeof out->email, it->valuestring);
    cJSON_Delete(root);
    return 0;
}

int coai_token_expiring(coai_str token, int64_t now_s, int64_t margin_s)
{
    coai_jwt j;
    if (coai_jwt_decode(token, &j) != 0 || j.exp == 0) return 1;
    return j.exp - now_s < margin_s;
}

void coai_pkce_init(coai_pkce *p, const unsigned char rnd[48])
{
    unsigned char digest[32];
    br_sha256_context h;
    coai_buf b = { 0 };
    memset(p, 0, sizeof *p);
    if (coai_base64_append(&b, rnd, 32, 1) == 0 && b.len == 43) memcpy(p->verifier, b.data, 43);
    br_sha256_init(&h);
    br_sha256_update(&h, p->verifier, 43);
    br_sha256_out(&h, digest);
    coai_buf_reset(&b);
    if (coai_base64_append(&b, digest, 32, 1) == 0 && b.len == 43) memcpy(p->challenge, b.data, 43);
    coai_buf_free(&b);
    coai_uuid_format(p->uuid, rnd + 32);
}

int coai_login_url(coai_buf *out, const coai_pkce *p)
{
    return coai_buf_printf(out, "https://cursor.com/loginDeepControl?challenge=%s&uuid=%s"
                           "&mode=login&redirectTarget=cli", p->challenge, p->uuid);
}

int coai_login_poll_target(coai_buf *out, const coai_pkce *p)
{
    return coai_buf_printf(out, "/auth/poll?uuid=%s&verifier=%s", p->uuid, p->verifier);
}

unsigned coai_login_poll_delay_ms(unsigned attempt)
{
    double d = 1000.0;
    while (attempt-- > 0 && d < 10000.0) d *= 1.2;
    return d > 10000.0 ? 10000u : (unsigned)d;
}

static char *coai__json_strdup(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    size_t n;
    char *s;
    if (!cJSON_IsString(it) || !it->valuestring[0]) return NULL;
    /* Tokens travel in HTTP headers: only visible ASCII is acceptable. Anything
     * else (CR, LF, spaces, non-ASCII) could split a header, so it is refused. */
    for (n = 0; it->valuestring[n]; n++)
        if ((unsigned char)it->valuestring[n] < 0x21 || (unsigned char)it->valuestring[n] > 0x7e)
            return NULL;
    s = (char *)malloc(n + 1);
    if (s) memcpy(s, it->valuestring, n + 1);
    return s;
}

static int coai__core_has_nul_escape(const char *s, size_t n);

int coai_creds_parse(const char *json, size_t n, coai_creds *c)
{
    cJSON *root;
    memset(c, 0, sizeof *c);
    if (json && coai__core_has_nul_escape(json, n)) return -2;
    root = cJSON_ParseWithLength(json, n);
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return -1; }
    c->access_token = coai__json_strdup(root, "accessToken");
    c->refresh_token = coai__json_strdup(root, "refreshToken");
    c->api_key = coai__json_strdup(root, "apiKey");
    cJSON_Delete(root);
    return 0;
}

int coai_oauth_token_parse(const char *json, size_t n, coai_creds *c, int *should_logout)
{
    cJSON *root;
    memset(c, 0, sizeof *c);
    *should_logout = 0;
    if (json && coai__core_has_nul_escape(json, n)) return -2;
    root = cJSON_ParseWithLength(json, n);
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return -1; }
    c->access_token = coai__json_strdup(root, "access_token");
    c->refresh_token = coai__json_strdup(root, "refresh_token");
    *should_logout = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "shouldLogout"));
    cJSON_Delete(root);
    return 0;
}

int coai_creds_format(coai_buf *out, const coai_creds *c)
{
    const char *keys[3] = { "accessToken", "refreshToken", "apiKey" };
    const char *vals[3];
    int i, first = 1;
    vals[0] = c->access_token; vals[1] = c->refresh_token; vals[2] = c->api_key;
    coai_buf_puts(out, "{");
    for (i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        coai_buf_puts(out, first ? "\n  \"" : ",\n  \"");
        coai_buf_puts(out, keys[i]);
        coai_buf_puts(out, "\": ");
        coai_json_str_append(out, vals[i], strlen(vals[i]));
        first = 0;
    }
    coai_buf_puts(out, first ? "}\n" : "\n}\n");
    return out->err ? -1 : 0;
}

void coai_creds_free(coai_creds *c)
{
    free(c->access_token);
    free(c->refresh_token);
    free(c->api_key);
    memset(c, 0, sizeof *c);
}

/* PART:AUTH impl end */

/* ======================================================================== */
/* PART:QR impl                                                             */
/* ======================================================================== */
/* Byte mode, level M only: the login URL is ~150 bytes, so versions 1-10 cover
 * it with room to spare, and one level keeps the tables short. */

static const unsigned char coai__qr_ec_per_block[11] = {
    0, 10, 16, 26, 18, 24, 16, 18, 22, 22, 26
};
static const unsigned char coai__qr_blocks[11] = { 0, 1, 1, 1, 2, 2, 4, 4, 4, 5, 5 };
static const unsigned char coai__qr_align[11][3] = {
    { 0 }, { 0 }, { 6, 18 }, { 6, 22 }, { 6, 26 }, { 6, 30 }, { 6, 34 },
    { 6, 22, 38 }, { 6, 24, 42 }, { 6, 26, 46 }, { 6, 28, 50 }
};

static int coai__qr_total_codewords(int ver)
{
    /* raw data modules of the symbol, in bytes */
    int size = 21 + 4 * (ver - 1);
    int bits = size * size - 3 * 64 - 2 * (size - 16) - 31;  /* finders, timing, format */
    if (ver >= 2) {
        int na = ver / 7 + 2;
        bits -= (na * na - 3) * 25 - 10 * (na - 2);         /* alignment patterns */
    }
    if (ver >= 7) bits -= 36;                               /* version information */
    return bits / 8;
}

static unsigned char coai__gf_mul(unsigned char a, unsigned char b)
{
    unsigned r = 0;
    int i;
    for (i = 7; i >= 0; i--) {
        r = (r << 1) ^ ((r >> 7) * 0x11d);
        r ^= ((b >> i) & 1u) * a;
    }
    return (unsigned char)r;
}

/* Reed-Solomon remainder of data[0..n) for a generator of the given degree. */
static void coai__qr_rs(const unsigned char *data, int n, int degree, unsigned char *ec)
{
    unsigned char gen[32];
    unsigned char root = 1;
    int i, j;
    memset(gen, 0, sizeof gen);
    gen[degree - 1] = 1;
    for (i = 0; i < degree; i++) {
        for (j = 0; j < degree; j++) {
            gen[j] = coai__gf_mul(gen[j], root);
            if (j + 1 < degree) gen[j] ^= gen[j + 1];
        }
        root = coai__gf_mul(root, 2);
    }
    memset(ec, 0, (size_t)degree);
    for (i = 0; i < n; i++) {
        unsigned char f = data[i] ^ ec[0];
        memmove(ec, ec + 1, (size_t)degree - 1);
        ec[degree - 1] = 0;
        for (j = 0; j < degree; j++) ec[j] ^= coai__gf_mul(gen[j], f);
    }
}

/* fn: 1 = function module (not data), stored in a parallel array */
static void coai__qr_set(coai_qr *q, unsigned char *fn, int x, int y, int dark)
{
    q->modules[y * q->size + x] = (unsigned char)(dark != 0);
    fn[y * q->size + x] = 1;
}

static void coai__qr_format(coai_qr *q, unsigned char *fn, int mask)
{
    int data = (0 << 3) | mask;           /* level M = 00 */
    int rem = data, i, bits, sz = q->size;
    for (i = 0; i < 10; i++) rem = (rem << 1) ^ ((rem >> 9) * 0x537);
    bits = ((data << 10) | rem) ^ 0x5412;
    for (i = 0; i <= 5; i++) coai__qr_set(q, fn, 8, i, (bits >> i) & 1);
    coai__qr_set(q, fn, 8, 7, (bits >> 6) & 1);
    coai__qr_set(q, fn, 8, 8, (bits >> 7) & 1);
    coai__qr_set(q, fn, 7, 8, (bits >> 8) & 1);
    for (i = 9; i < 15; i++) coai__qr_set(q, fn, 14 - i, 8, (bits >> i) & 1);
    for (i = 0; i < 8; i++) coai__qr_set(q, fn, sz - 1 - i, 8, (bits >> i) & 1);
    for (i = 8; i < 15; i++) coai__qr_set(q, fn, 8, sz - 15 + i, (bits >> i) & 1);
    coai__qr_set(q, fn, 8, sz - 8, 1);    /* the dark module */
}

static void coai__qr_function_patterns(coai_qr *q, unsigned char *fn)
{
    int sz = q->size, i, j, dx, dy;
    const unsigned char *al = coai__qr_align[q->version];
    int na = q->version == 1 ? 0 : q->version / 7 + 2;
    for (i = 0; i < sz; i++) {
        coai__qr_set(q, fn, 6, i, i % 2 == 0);
        coai__qr_set(q, fn, i, 6, i % 2 == 0);
    }
    for (i = 0; i < 3; i++) {
        int cx = i == 1 ? sz - 4 : 3, cy = i == 2 ? sz - 4 : 3;
        for (dy = -4; dy <= 4; dy++)
            for (dx = -4; dx <= 4; dx++) {
                int d = abs(dx) > abs(dy) ? abs(dx) : abs(dy);
                int x = cx + dx, y = cy + dy;
                if (x >= 0 && x < sz && y >= 0 && y < sz)
                    coai__qr_set(q, fn, x, y, d != 2 && d != 4);
            }
    }
    for (i = 0; i < na; i++)
        for (j = 0; j < na; j++) {
            if ((i == 0 && j == 0) || (i == 0 && j == na - 1) || (i == na - 1 && j == 0)) continue;
            for (dy = -2; dy <= 2; dy++)
                for (dx = -2; dx <= 2; dx++) {
                    int d = abs(dx) > abs(dy) ? abs(dx) : abs(dy);
                    coai__qr_set(q, fn, al[i] + dx, al[j] + dy, d != 1);
                }
        }
    coai__qr_format(q, fn, 0);            /* reserve; rewritten with the real mask */
    if (q->version >= 7) {
        int rem = q->version, bits;
        for (i = 0; i < 12; i++) rem = (rem << 1) ^ ((rem >> 11) * 0x1f25);
        bits = q->version << 12 | rem;
        for (i = 0; i < 18; i++) {
            int a = sz - 11 + i % 3, b = i / 3;
            coai__qr_set(q, fn, a, b, (bits >> i) & 1);
            coai__qr_set(q, fn, b, a, (bits >> i) & 1);
        }
    }
}

static int coai__qr_mask_bit(int mask, int x, int y)
{
    switch (mask) {
    case 0: return (x + y) % 2 == 0;
    case 1: return y % 2 == 0;
    case 2: return x % 3 == 0;
    case 3: return (x + y) % 3 == 0;
    case 4: return (x / 3 + y / 2) % 2 == 0;
    case 5: return x * y % 2 + x * y % 3 == 0;
    case 6: return (x * y % 2 + x * y % 3) % 2 == 0;
    default: return ((x + y) % 2 + x * y % 3) % 2 == 0;
    }
}

static void coai__qr_apply_mask(coai_qr *q, const unsigned char *fn, int mask)
{
    int x, y;
    for (y = 0; y < q->size; y++)
        for (x = 0; x < q->size; x++)
            if (!fn[y * q->size + x] && coai__qr_mask_bit(mask, x, y))
                q->modules[y * q->size + x] ^= 1;
}

static long coai__qr_penalty(const coai_qr *q)
{
    int sz = q->size, x, y, pass, dark = 0, k;
    long p = 0;
    for (pass = 0; pass < 2; pass++)            /* runs of 5+ and finder-like patterns */
        for (y = 0; y < sz; y++) {
            int run = 0, prev = -1;
            unsigned hist = 0;
            for (x = 0; x < sz; x++) {
                int m = pass ? q->modules[x * sz + y] : q->modules[y * sz + x];
                if (m == prev) run++;
                else { if (run >= 5) p += run - 2; run = 1; prev = m; }
                hist = (hist << 1 | (unsigned)m) & 0x7ff;
                if (x >= 10 && (hist == 0x5d0 || hist == 0x05d)) p += 40;
            }
            if (run >= 5) p += run - 2;
        }
    for (y = 0; y + 1 < sz; y++)                /* 2x2 blocks of one colour */
        for (x = 0; x + 1 < sz; x++) {
            int c = q->modules[y * sz + x];
            if (c == q->modules[y * sz + x + 1] && c == q->modules[(y + 1) * sz + x]
                && c == q->modules[(y + 1) * sz + x + 1]) p += 3;
        }
    for (k = 0; k < sz * sz; k++) dark += q->modules[k];
    k = abs(dark * 20 - sz * sz * 10);          /* balance of dark and light */
    p += (long)((k + sz * sz - 1) / (sz * sz) - 1 > 0 ? (k + sz * sz - 1) / (sz * sz) - 1 : 0) * 10;
    return p;
}

int coai_qr_encode(coai_qr *q, const void *text, size_t n)
{
    unsigned char data[400], all[400], fn[COAI_QR_MAX_SIZE * COAI_QR_MAX_SIZE];
    unsigned char best[COAI_QR_MAX_SIZE * COAI_QR_MAX_SIZE];
    int ver, total, ndata = 0, bitlen = 0, cap, i, j, blocks, ec, shortlen, nshort, pos;
    int mask;
    long best_pen = -1;
    const unsigned char *t = (const unsigned char *)text;
    for (ver = 1; ver <= 10; ver++) {
        total = coai__qr_total_codewords(ver);
        cap = (total - coai__qr_ec_per_block[ver] * coai__qr_blocks[ver]) * 8;
        if (4 + (ver < 10 ? 8 : 16) + 8 * (long)n <= cap) break;
    }
    if (ver > 10) return -1;
    memset(q, 0, sizeof *q);
    memset(fn, 0, sizeof fn);
    q->version = ver;
    q->size = 21 + 4 * (ver - 1);
    total = coai__qr_total_codewords(ver);
    blocks = coai__qr_blocks[ver];
    ec = coai__qr_ec_per_block[ver];
    ndata = total - ec * blocks;
    /* bit stream: mode 0100, count, bytes, terminator, pad to a byte, pad bytes */
    memset(data, 0, sizeof data);
#define COAI__QR_PUT(v, nb) do { int b_; for (b_ = (nb) - 1; b_ >= 0; b_--, bitlen++) \
        data[bitlen >> 3] |= (unsigned char)((((unsigned)(v) >> b_) & 1u) \
                                             << (7 - (bitlen & 7))); } while (0)
    COAI__QR_PUT(4, 4);
    COAI__QR_PUT(n, ver < 10 ? 8 : 16);
    for (i = 0; i < (int)n; i++) COAI__QR_PUT(t[i], 8);
    for (i = 0; i < 4 && bitlen < ndata * 8; i++) COAI__QR_PUT(0, 1);
    while (bitlen % 8) COAI__QR_PUT(0, 1);
#undef COAI__QR_PUT
    for (i = bitlen / 8, j = 0; i < ndata; i++, j++) data[i] = j % 2 ? 0x11 : 0xec;
    /* split into blocks, add EC, interleave */
    nshort = blocks - total % blocks;
    shortlen = total / blocks;
    {
        unsigned char ecs[5][32];
        int off = 0, b, maxd = shortlen - ec + 1;
        for (b = 0; b < blocks; b++) {
            int dl = shortlen - ec + (b >= nshort);
            coai__qr_rs(data + off, dl, ec, ecs[b]);
            off += dl;
        }
        pos = 0;
        for (i = 0; i < maxd; i++) {
            off = 0;
            for (b = 0; b < blocks; b++) {
                int dl = shortlen - ec + (b >= nshort);
                if (i < dl) all[pos++] = data[off + i];
                off += dl;
            }
        }
        for (i = 0; i < ec; i++)
            for (b = 0; b < blocks; b++) all[pos++] = ecs[b][i];
    }
    coai__qr_function_patterns(q, fn);
    /* zigzag placement from the bottom-right corner, skipping the timing column */
    {
        int bit = 0, right, vert;
        for (right = q->size - 1; right >= 1; right -= 2) {
            if (right == 6) right = 5;
            for (vert = 0; vert < q->size; vert++)
                for (j = 0; j < 2; j++) {
                    int x = right - j;
                    int upward = ((right + 1) & 2) == 0;
                    int y = upward ? q->size - 1 - vert : vert;
                    if (!fn[y * q->size + x] && bit < pos * 8) {
                        q->modules[y * q->size + x] = (all[bit >> 3] >> (7 - (bit & 7))) & 1;
                        bit++;
                    }
                }
        }
    }
    for (mask = 0; mask < 8; mask++) {
        long pen;
        coai__qr_apply_mask(q, fn, mask);
        coai__qr_format(q, fn, mask);
        pen = coai__qr_penalty(q);
        if (best_pen < 0 || pen < best_pen) {
            best_pen = pen;
            q->mask = mask;
            memcpy(best, q->modules, sizeof best);
        }
        coai__qr_apply_mask(q, fn, mask);       /* XOR again undoes it */
    }
    memcpy(q->modules, best, sizeof best);
    return 0;
}

int coai_qr_render_utf8(const coai_qr *q, coai_buf *out)
{
    static const char *cell[4] = { "\xe2\x96\x88", "\xe2\x96\x80", "\xe2\x96\x84", " " };
    int quiet = 2, x, y, lo = -quiet, hi = q->size + quiet;
    for (y = lo; y < hi; y += 2) {
        for (x = lo; x < hi; x++) {
            int top = x >= 0 && x < q->size && y >= 0 && y < q->size && q->modules[y * q->size + x];
            int bot = x >= 0 && x < q->size && y + 1 >= 0 && y + 1 < q->size
                      && q->modules[(y + 1) * q->size + x];
            coai_buf_puts(out, cell[top * 2 + bot]);
        }
        coai_buf_putc(out, '\n');
    }
    return out->err ? -1 : 0;
}

/* PART:QR impl end */

/* ======================================================================== */
/* PART:CONFIG impl                                                         */
/* ======================================================================== */

static void coai__cfg_copy(char *dst, size_t cap, const char *p, size_t n)
{
    if (n >= cap) n = cap - 1;
    memcpy(dst, p, n);
    dst[n] = 0;
}

int coai_hostport_split(coai_str s, char *host, size_t hcap, char *port, size_t pcap,
                        const char *defport)
{
    const char *p = s.ptr, *end = s.ptr + s.len, *h = p, *he, *colon = NULL, *q;
    unsigned long v = 0;
    if (!p || s.len == 0 || hcap == 0 || pcap < 6 || memchr(p, 0, s.len)) return -1;
    if (p[0] == '[') {
        he = (const char *)memchr(p, ']', s.len);
        if (!he) return -1;
        h = p + 1;
        if (he + 1 < end) {
            if (he[1] != ':') return -1;
            colon = he + 1;
        }
        for (q = h; q < he; q++)
            if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') || (*q >= 'A' && *q <= 'F')
                  || *q == ':' || *q == '.'))
                return -1;
    } else {
        for (q = p; q < end; q++)
            if (*q == ':') {
                if (colon) return -1;                 /* bare IPv6 needs brackets */
                colon = q;
            }
        he = colon ? colon : end;
        for (q = h; q < he; q++)
            if ((unsigned char)*q <= ' ' || (unsigned char)*q >= 0x7f || *q == '/' || *q == '@')
                return -1;
    }
    if ((size_t)(he - h) >= hcap) return -1;
    if (!colon) {
        if (!defport || strlen(defport) >= pcap) return -1;
        coai__cfg_copy(host, hcap, h, (size_t)(he - h));
        coai__cfg_copy(port, pcap, defport, strlen(defport));
        return 0;
    }
    if (colon + 1 == end || end - colon - 1 > 5) return -1;
    for (q = colon + 1; q < end; q++) {
        if (*q < '0' || *q > '9') return -1;
        v = v * 10 + (unsigned long)(*q - '0');
    }
    if (v > 65535) return -1;
    coai__cfg_copy(host, hcap, h, (size_t)(he - h));
    snprintf(port, pcap, "%lu", v);
    return 0;
}

int coai_url_parse_https(coai_str url, coai_url *u)
{
    const char *p = url.ptr, *end, *rest, *slash;
    size_t n;
    coai_str hp;
    memset(u, 0, sizeof *u);
    if (!p || url.len < 9 || memchr(p, 0, url.len)) return -1;
    end = p + url.len;
    for (n = 0; n < 8; n++) {                    /* "https://", scheme case-insensitive */
        char want = "https://"[n], c = p[n];
        if ((want >= 'a' && want <= 'z' ? (char)(c | 0x20) : c) != want) return -1;
    }
    rest = p + 8;
    slash = (const char *)memchr(rest, '/', (size_t)(end - rest));
    n = slash ? (size_t)(slash - rest) : (size_t)(end - rest);
    if (n == 0 || n >= sizeof u->authority) return -1;
    hp.ptr = rest;
    hp.len = n;
    if (memchr(rest, '?', n) || memchr(rest, '#', n) || memchr(rest, '@', n)) return -1;
    if (coai_hostport_split(hp, u->host, sizeof u->host, u->port, sizeof u->port, "443") < 0
        || !u->host[0] || strcmp(u->port, "0") == 0)
        return -1;
    coai__cfg_copy(u->authority, sizeof u->authority, rest, n);
    if (slash) {
        const char *q;
        n = (size_t)(end - slash);
        while (n > 0 && slash[n - 1] == '/') n--;
        if (n >= sizeof u->prefix) return -1;
        for (q = slash; q < slash + n; q++)
            if ((unsigned char)*q <= ' ' || (unsigned char)*q >= 0x7f || *q == '?' || *q == '#')
                return -1;
        coai__cfg_copy(u->prefix, sizeof u->prefix, slash, n);
    }
    return 0;
}

int coai_header_value_ok(coai_str v)
{
    size_t i;
    if (!v.ptr || v.len == 0 || v.len > 1024) return 0;
    if (v.ptr[0] == ' ' || v.ptr[v.len - 1] == ' ') return 0;
    for (i = 0; i < v.len; i++)
        if ((unsigned char)v.ptr[i] < 0x20 || (unsigned char)v.ptr[i] > 0x7e) return 0;
    return 1;
}

int coai_tz_name_ok(coai_str v)
{
    size_t i;
    if (!v.ptr || v.len == 0 || v.len > 128 || v.ptr[0] == '/') return 0;
    for (i = 0; i < v.len; i++) {
        char c = v.ptr[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '/' || c == '_' || c == '+' || c == '-' || c == '.'))
            return 0;
        if (c == '.' && i + 1 < v.len && v.ptr[i + 1] == '.') return 0;
    }
    return 1;
}

int coai_host_name_ok(coai_str v)
{
    size_t i;
    if (!v.ptr || v.len == 0 || v.len > 253) return 0;
    if (v.ptr[0] == '[' && v.ptr[v.len - 1] != ']') return 0;
    for (i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.ptr[i];
        if (c <= ' ' || c >= 0x7f || c == '/' || c == '@' || c == '?' || c == '#'
            || (c == ':' && v.ptr[0] != '['))
            return 0;
    }
    return 1;
}

static int coai__digits(const char *p, const char *end, int n, int *out)
{
    int i, v = 0;
    if (end - p < n) return -1;
    for (i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

int coai_cli_version_parse(coai_str s, coai_cli_version *v)
{
    const char *p = s.ptr, *end = s.ptr + s.len, *h;
    memset(v, 0, sizeof *v);
    v->hour = v->minute = v->second = -1;
    if (!p) return -1;
    if (end - p >= 4 && memcmp(p, "cli-", 4) == 0) p += 4;
    if (coai__digits(p, end, 4, &v->year) || end - p < 11 || p[4] != '.'
        || coai__digits(p + 5, end, 2, &v->month) || p[7] != '.'
        || coai__digits(p + 8, end, 2, &v->day) || p[10] != '-')
        return -1;
    if (v->year < 2000 || v->month < 1 || v->month > 12 || v->day < 1 || v->day > 31)
        return -1;
    p += 11;
    /* "HH-MM-SS-" only when all of it is there: a hash may itself start with digits */
    if (end - p > 9 && p[2] == '-' && p[5] == '-' && p[8] == '-'
        && !coai__digits(p, end, 2, &v->hour) && !coai__digits(p + 3, end, 2, &v->minute)
        && !coai__digits(p + 6, end, 2, &v->second)) {
        if (v->hour > 23 || v->minute > 59 || v->second > 60) return -1;
        p += 9;
    } else {
        v->hour = v->minute = v->second = -1;
    }
    for (h = p; h < end && ((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f')); h++) {}
    if (h - p < 4 || h - p > 40) return -1;
    memcpy(v->hash, p, (size_t)(h - p));
    v->hash[h - p] = 0;
    if (h == end) return 0;
    if (end - h == 4 && memcmp(h, "-lab", 4) == 0) { v->lab = 1; return 0; }
    return -1;
}

int coai_cli_version_cmp(const coai_cli_version *a, const coai_cli_version *b)
{
    long da = (long)a->year * 10000 + a->month * 100 + a->day;
    long db = (long)b->year * 10000 + b->month * 100 + b->day;
    long ta = a->hour < 0 ? 0 : (long)a->hour * 3600 + a->minute * 60 + a->second;
    long tb = b->hour < 0 ? 0 : (long)b->hour * 3600 + b->minute * 60 + b->second;
    if (da != db) return da < db ? -1 : 1;
    if (ta != tb) return ta < tb ? -1 : 1;
    return 0;
}

int coai_server_config_agent_url(const char *json, size_t n, int ghost_mode, coai_url *out)
{
    cJSON *root, *cfg, *url;
    char buf[320];
    int rc = 1;
    memset(out, 0, sizeof *out);
    root = json ? cJSON_ParseWithLength(json, n) : NULL;
    if (!root || !cJSON_IsObject(root)) { cJSON_Delete(root); return -1; }
    cfg = cJSON_GetObjectItemCaseSensitive(root, "agentUrlConfig");
    url = cJSON_IsObject(cfg)
        ? cJSON_GetObjectItemCaseSensitive(cfg, ghost_mode ? "agentUrl" : "agentnUrl") : NULL;
    if (cJSON_IsString(url) && url->valuestring[0]) {
        const char *v = url->valuestring;
        size_t vl = strlen(v);
        int has_scheme = strstr(v, "://") != NULL;
        if (vl + 9 < sizeof buf) {
            coai_str u;
            snprintf(buf, sizeof buf, "%s%s", has_scheme ? "" : "https://", v);
            u = coai_str_c(buf);
            if (coai_url_parse_https(u, out) == 0) rc = 0;
            else memset(out, 0, sizeof *out);
        }
    }
    cJSON_Delete(root);
    return rc;
}

static const char *const coai__h2cfg_names[5] = {
    "UNSPECIFIED", "FORCE_ALL_DISABLED", "FORCE_ALL_ENABLED", "FORCE_BIDI_DISABLED",
    "FORCE_BIDI_ENABLED" };

const char *coai_http2_config_name(int v)
{
    return coai__h2cfg_names[v >= 1 && v <= 4 ? v : 0];
}

int coai_http2_config_transport(int v)
{
    return v == COAI_H2CFG_FORCE_ALL_DISABLED || v == COAI_H2CFG_FORCE_BIDI_DISABLED ? 1
         : v == COAI_H2CFG_FORCE_ALL_ENABLED || v == COAI_H2CFG_FORCE_BIDI_ENABLED ? 2 : 0;
}

int coai_server_config_http2(const char *json, size_t n)
{
    cJSON *root, *v;
    int out = 0, i;
    root = json ? cJSON_ParseWithLength(json, n) : NULL;
    v = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "http2Config") : NULL;
    if (!v && cJSON_IsObject(root))     /* the proto name, as some JSON encoders keep it */
        v = cJSON_GetObjectItemCaseSensitive(root, "http2_config");
    if (cJSON_IsNumber(v)) {
        if (v->valuedouble >= 1 && v->valuedouble <= 4) out = (int)v->valuedouble;
        if ((double)out != v->valuedouble) out = 0;
    } else if (cJSON_IsString(v)) {
        const char *nm = v->valuestring;
        if (strncmp(nm, "HTTP2_CONFIG_", 13) == 0) nm += 13;
        for (i = 1; i <= 4; i++)
            if (strcmp(nm, coai__h2cfg_names[i]) == 0) out = i;
    }
    cJSON_Delete(root);
    return out;
}

/* PART:CONFIG impl end */

/* ======================================================================== */
/* PART:FRAMING impl                                                        */
/* ======================================================================== */

#ifndef COAI_FRAME_KEEP
#define COAI_FRAME_KEEP (64u * 1024u)   /* decoder buffer kept between frames; larger is freed */
#endif

int coai_frame_header(unsigned char out[5], unsigned flags, size_t len)
{
    if (flags > 0xffu || (uint64_t)len > 0xffffffffu) return -1;
    out[0] = (unsigned char)flags;
    out[1] = (unsigned char)(len >> 24 & 0xff);
    out[2] = (unsigned char)(len >> 16 & 0xff);
    out[3] = (unsigned char)(len >> 8 & 0xff);
    out[4] = (unsigned char)(len & 0xff);
    return 0;
}

coai_result coai_frame_encode(coai_buf *out, unsigned flags, const void *p, size_t n)
{
    unsigned char h[5];
    if (coai_frame_header(h, flags, n) || n > (size_t)-1 - 5) return COAI_ERR_TOO_BIG;
    if (coai_buf_reserve(out, 5 + n) || coai_buf_append(out, h, 5) ||
        (n && coai_buf_append(out, p, n)))
        return COAI_ERR_NOMEM;
    return COAI_OK;
}

static coai_result coai__frame_fail(coai_frame_decoder *d, coai_result r)
{
    d->err_ = (int)r;
    return r;
}

coai_result coai_frame_feed(coai_frame_decoder *d, const void *p, size_t n, size_t *used,
                            coai_frame *out)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t off = 0, max = d->max_frame ? d->max_frame : COAI_MAX_FRAME;
    *used = 0;
    if (d->err_) return (coai_result)d->err_;
    if (n && !s) return COAI_ERR_STATE;
    if (d->hdr_len_ < 5) {
        uint32_t len;
        unsigned flags;
        if (d->hdr_len_ == 0) {
            /* At a boundary the previous frame's view is dead: reuse or drop its storage. */
            if (d->buf_.cap > COAI_FRAME_KEEP) coai_buf_free(&d->buf_);
            coai_buf_reset(&d->buf_);
            if (n == 0) return COAI_MORE;
            if (d->ended_) return coai__frame_fail(d, COAI_ERR_FRAME);
        }
        while (d->hdr_len_ < 5 && off < n) d->hdr_[d->hdr_len_++] = s[off++];
        if (d->hdr_len_ < 5) { *used = n; return COAI_MORE; }
        flags = d->hdr_[0];
        /* Casts first: d->hdr_[1] << 24 on a promoted int is undefined once the byte is >= 0x80. */
        len = (uint32_t)d->hdr_[1] << 24 | (uint32_t)d->hdr_[2] << 16 |
              (uint32_t)d->hdr_[3] << 8 | (uint32_t)d->hdr_[4];
        if (flags & COAI_FRAME_COMPRESSED) return coai__frame_fail(d, COAI_ERR_COMPRESSED);
        if (flags != COAI_FRAME_DATA && flags != COAI_FRAME_TRAILER &&
            flags != COAI_FRAME_END_STREAM)
            return coai__frame_fail(d, COAI_ERR_FRAME);
        if ((uint64_t)len > (uint64_t)max) return coai__frame_fail(d, COAI_ERR_TOO_BIG);
        d->want_ = len;
    }
    if (d->buf_.len == 0 && n - off >= d->want_) {
        /* Whole payload inside this input: hand out a view of it, no copy. */
        out->data = d->want_ ? s + off : (const unsigned char *)"";
        off += d->want_;
    } else {
        size_t take = d->want_ - d->buf_.len;
        if (take > n - off) take = n - off;
        if (take && coai_buf_append(&d->buf_, s + off, take))
            return coai__frame_fail(d, COAI_ERR_NOMEM);
        off += take;
        if (d->buf_.len < d->want_) { *used = n; return COAI_MORE; }
        out->data = d->buf_.data;
    }
    out->flags = d->hdr_[0];
    out->len = d->want_;
    if (out->flags != COAI_FRAME_DATA) d->ended_ = 1;
    d->hdr_len_ = 0;
    d->want_ = 0;
    *used = off;
    return COAI_OK;
}

coai_result coai_frame_finish(coai_frame_decoder *d)
{
    if (d->err_) return (coai_result)d->err_;
    return d->hdr_len_ == 0 ? COAI_OK : COAI_ERR_TRUNCATED;
}

void coai_frame_decoder_reset(coai_frame_decoder *d)
{
    coai_buf_reset(&d->buf_);
    d->hdr_len_ = 0;
    d->want_ = 0;
    d->ended_ = 0;
    d->err_ = 0;
}

void coai_frame_decoder_free(coai_frame_decoder *d)
{
    coai_buf_free(&d->buf_);
    coai_frame_decoder_reset(d);
}

/* ---- status text ---- */

/* Printable ASCII of s (at most cap-1 bytes; anything else becomes '?') into dst, once:
 * a dst that already holds something is kept (the first one seen wins). */
static void coai__ascii_note(char *dst, size_t cap, const char *s)
{
    size_t i;
    if (!s || dst[0] || cap == 0) return;
    for (i = 0; s[i] && i + 1 < cap; i++)
        dst[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    dst[i] = 0;
}

static void coai__status_init(coai_status *st)
{
    memset(st, 0, sizeof *st);
    st->retryable = -1;
    st->expected = -1;
}

/* Append untrusted text to a fixed NUL-terminated field: invalid UTF-8 becomes U+FFFD,
 * C0/C1 control characters and DEL become spaces, and the text stops at the last whole
 * character that fits. */
static void coai__field_append(char *dst, size_t cap, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t pos = strlen(dst), i = 0;
    while (i < n) {
        int k = coai__utf8_seq(p + i, n - i);
        const char *emit = (const char *)p + i;
        size_t elen = (size_t)k, adv = (size_t)k;
        if (k <= 0) {
            emit = "\xef\xbf\xbd";
            elen = 3;
            adv = 1;
        } else if ((k == 1 && (p[i] < 0x20 || p[i] == 0x7f)) ||
                   (k == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
            emit = " ";
            elen = 1;
        }
        if (elen >= cap - pos) break;
        memcpy(dst + pos, emit, elen);
        pos += elen;
        i += adv;
    }
    dst[pos] = 0;
}

static void coai__field_set(char *dst, size_t cap, const char *s, size_t n)
{
    dst[0] = 0;
    coai__field_append(dst, cap, s, n);
}

static void coai__field_cstr(char *dst, size_t cap, const char *s)
{
    if (s) coai__field_append(dst, cap, s, strlen(s));
}

static int coai__hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decode at most cap bytes of output; a '%' not followed by two hex digits stays as
 * it is (gRPC says to keep going rather than fail). Returns the output length. */
static size_t coai__pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t i = 0, o = 0;
    while (i < n && o < cap) {
        int hi, lo;
        if (s[i] == '%' && n - i >= 3 && (hi = coai__hexval((unsigned char)s[i + 1])) >= 0 &&
            (lo = coai__hexval((unsigned char)s[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

static int coai__ends_with(const char *s, const char *suffix)
{
    size_t n, m = strlen(suffix);
    if (!s) return 0;
    n = strlen(s);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static const char *const coai__error_names[] = {
    "ERROR_UNSPECIFIED", "ERROR_BAD_API_KEY", "ERROR_NOT_LOGGED_IN", "ERROR_INVALID_AUTH_ID",
    "ERROR_NOT_HIGH_ENOUGH_PERMISSIONS", "ERROR_BAD_MODEL_NAME", "ERROR_USER_NOT_FOUND",
    "ERROR_FREE_USER_RATE_LIMIT_EXCEEDED", "ERROR_PRO_USER_RATE_LIMIT_EXCEEDED",
    "ERROR_FREE_USER_USAGE_LIMIT", "ERROR_PRO_USER_USAGE_LIMIT", "ERROR_AUTH_TOKEN_NOT_FOUND",
    "ERROR_AUTH_TOKEN_EXPIRED", "ERROR_OPENAI", "ERROR_OPENAI_RATE_LIMIT_EXCEEDED",
    "ERROR_OPENAI_ACCOUNT_LIMIT_EXCEEDED", "ERROR_TASK_UUID_NOT_FOUND",
    "ERROR_TASK_NO_PERMISSIONS", "ERROR_AGENT_REQUIRES_LOGIN", "ERROR_AGENT_ENGINE_NOT_FOUND",
    "ERROR_MAX_TOKENS", "ERROR_USER_ABORTED_REQUEST", "ERROR_GENERIC_RATE_LIMIT_EXCEEDED",
    "ERROR_PRO_USER_ONLY", "ERROR_API_KEY_NOT_SUPPORTED", "ERROR_TIMEOUT",
    "ERROR_SLASH_EDIT_FILE_TOO_LONG", "ERROR_FILE_UNSUPPORTED",
    "ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT", "ERROR_CUSTOM_MESSAGE", "ERROR_OUTDATED_CLIENT",
    "ERROR_CLAUDE_IMAGE_TOO_LARGE", "ERROR_GITGRAPH_NOT_FOUND", "ERROR_FILE_NOT_FOUND",
    "ERROR_API_KEY_RATE_LIMIT", "ERROR_DEBOUNCED", "ERROR_BAD_REQUEST",
    "ERROR_REPOSITORY_SERVICE_REPOSITORY_IS_NOT_INITIALIZED", "ERROR_UNAUTHORIZED",
    "ERROR_NOT_FOUND", "ERROR_DEPRECATED", "ERROR_RESOURCE_EXHAUSTED", "ERROR_BAD_USER_API_KEY",
    "ERROR_CONVERSATION_TOO_LONG", "ERROR_USAGE_PRICING_REQUIRED",
    "ERROR_USAGE_PRICING_REQUIRED_CHANGEABLE", "ERROR_GITHUB_NO_USER_CREDENTIALS",
    "ERROR_GITHUB_USER_NO_ACCESS", "ERROR_GITHUB_APP_NO_ACCESS", "ERROR_GITHUB_MULTIPLE_OWNERS",
    "ERROR_RATE_LIMITED", "ERROR_RATE_LIMITED_CHANGEABLE", "ERROR_CUSTOM", "ERROR_HOOKS_BLOCKED",
};

const char *coai_error_details_name(int error)
{
    if (error < 0 || (size_t)error >= sizeof coai__error_names / sizeof coai__error_names[0])
        return NULL;
    return coai__error_names[error];
}

const char *coai_grpc_status_name(int code)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"
    };
    if (code < 0 || code > 16) return "UNRECOGNIZED";
    return names[code];
}

/* aiserver.v1.ErrorDetails -> st. The first ErrorDetails wins; later ones are ignored. */
static coai_result coai__error_details_decode(const unsigned char *b, size_t n, coai_status *st)
{
    aiserver_v1_ErrorDetails ed = aiserver_v1_ErrorDetails_init_zero;
    pb_istream_t is = pb_istream_from_buffer(b, n);
    const aiserver_v1_CustomErrorDetails *c = &ed.details;
    pb_size_t i;
    if (!pb_decode(&is, aiserver_v1_ErrorDetails_fields, &ed)) {
        pb_release(aiserver_v1_ErrorDetails_fields, &ed);
        return COAI_ERR_PROTO;
    }
    if (st->error == 0 && st->title[0] == 0 && st->detail[0] == 0) {
        st->error = (int)ed.error;
        st->error_name = st->error ? coai_error_details_name(st->error) : NULL;
        if (ed.has_is_expected) st->expected = ed.is_expected ? 1 : 0;
        if (ed.has_details && c->has_analytics_metadata)
            coai__field_cstr(st->action_required, sizeof st->action_required,
                             c->analytics_metadata.action_required);
        if (ed.has_details) {
            coai__field_cstr(st->title, sizeof st->title, c->title);
            coai__field_cstr(st->detail, sizeof st->detail, c->detail);
            if (c->has_is_retryable) st->retryable = c->is_retryable ? 1 : 0;
            for (i = 0; i < c->additional_info_count; i++) {
                const aiserver_v1_CustomErrorDetails_AdditionalInfoEntry *e =
                    &c->additional_info[i];
                size_t len = strlen(st->detail);
                /* " (k: v; k2: v2)" keeps the detail one line: no control characters allowed. */
                coai__field_cstr(st->detail, sizeof st->detail,
                                 i == 0 ? (len ? " (" : "(") : "; ");
                coai__field_cstr(st->detail, sizeof st->detail, e->key);
                coai__field_cstr(st->detail, sizeof st->detail, ": ");
                coai__field_cstr(st->detail, sizeof st->detail, e->value);
                if (i + 1 == c->additional_info_count)
                    coai__field_cstr(st->detail, sizeof st->detail, ")");
            }
        }
    }
    pb_release(aiserver_v1_ErrorDetails_fields, &ed);
    return COAI_OK;
}

/* Base64 -> google.rpc.Status -> st. Status.code / Status.message fill only what the text
 * headers left unset (use_code / use_message). */
static coai_result coai__status_details(const char *b64, size_t n, coai_status *st,
                                        int use_code, int use_message)
{
    google_rpc_Status s = google_rpc_Status_init_zero;
    unsigned char *raw;
    pb_istream_t is;
    coai_result r = COAI_OK;
    long len;
    pb_size_t i;
    if (n / 4 > COAI_MAX_STATUS_DETAILS / 3 + 1) return COAI_ERR_TOO_BIG;
    raw = (unsigned char *)malloc(n / 4 * 3 + 3);
    if (!raw) return COAI_ERR_NOMEM;
    len = coai_base64_decode(b64, n, raw, n / 4 * 3 + 3);
    if (len < 0) { free(raw); return COAI_ERR_PROTO; }
    is = pb_istream_from_buffer(raw, (size_t)len);
    if (!pb_decode(&is, google_rpc_Status_fields, &s)) {
        r = COAI_ERR_PROTO;
    } else {
        if (use_code) st->code = (int)s.code;
        if (use_message && s.message)
            coai__field_set(st->message, sizeof st->message, s.message, strlen(s.message));
        for (i = 0; i < s.details_count; i++) {
            const google_protobuf_Any *a = &s.details[i];
            if (!coai__ends_with(a->type_url, "aiserver.v1.ErrorDetails"))
                coai__ascii_note(st->unknown_detail, sizeof st->unknown_detail, a->type_url);
            if (!coai__ends_with(a->type_url, "aiserver.v1.ErrorDetails") || !a->value) continue;
            if (coai__error_details_decode(a->value->bytes, a->value->size, st) < 0)
                r = COAI_ERR_PROTO;
        }
    }
    pb_release(google_rpc_Status_fields, &s);
    free(raw);
    return r;
}

static int coai__is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static int coai__key_is(const char *k, size_t n, const char *lit)
{
    size_t i;
    if (strlen(lit) != n) return 0;
    for (i = 0; i < n; i++) {
        char c = k[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

coai_result coai_trailer_parse(const void *p, size_t n, coai_status *st)
{
    const char *s = (const char *)p, *status = NULL, *msg = NULL, *bin = NULL;
    size_t status_n = 0, msg_n = 0, bin_n = 0, i = 0;
    coai_result r = COAI_OK;
    coai__status_init(st);
    if (!s) n = 0;
    while (i < n) {
        const char *nl = (const char *)memchr(s + i, '\n', n - i);
        size_t a = i, e = nl ? (size_t)(nl - s) : n, c, ka, ke, va;
        i = nl ? e + 1 : n;
        while (a < e && coai__is_space(s[a])) a++;
        while (e > a && coai__is_space(s[e - 1])) e--;
        for (c = a; c < e && s[c] != ':'; c++) {}
        if (c == e) continue;
        ka = a; ke = c;
        while (ke > ka && coai__is_space(s[ke - 1])) ke--;
        va = c + 1;
        while (va < e && coai__is_space(s[va])) va++;
        if (coai__key_is(s + ka, ke - ka, "grpc-status")) {
            status = s + va; status_n = e - va;
        } else if (coai__key_is(s + ka, ke - ka, "grpc-message")) {
            msg = s + va; msg_n = e - va;
        } else if (coai__key_is(s + ka, ke - ka, "grpc-status-details-bin")) {
            bin = s + va; bin_n = e - va;
        }
    }
    if (status) {
        size_t k;
        long v = 0;
        for (k = 0; k < status_n && status[k] >= '0' && status[k] <= '9' && k < 9; k++)
            v = v * 10 + (status[k] - '0');
        st->code = k == status_n && k > 0 ? (int)v : 2;   /* garbage: UNKNOWN, never OK */
    }
    if (msg) {
        char tmp[sizeof st->message + 8];   /* margin: a cut character lands past the field */
        coai__field_set(st->message, sizeof st->message, tmp,
                        coai__pct_decode(msg, msg_n, tmp, sizeof tmp));
    }
    if (bin && bin_n) r = coai__status_details(bin, bin_n, st, !status, !msg);
    return r;
}

static int coai__connect_code(const char *s)
{
    static const char *const names[] = {
        "ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
        "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
        "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
        "unauthenticated"
    };
    int i;
    if (strcmp(s, "cancelled") == 0) return 1;
    for (i = 1; i <= 16; i++)      /* "ok" is no error code in Connect */
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static coai_result coai__connect_error_fill(const cJSON *err, coai_status *st);

coai_result coai_end_stream_parse(const void *p, size_t n, coai_status *st)
{
    cJSON *root, *err;
    const char *end = NULL, *stop = (const char *)p + n;
    coai_result r = COAI_OK;
    coai__status_init(st);
    root = p ? cJSON_ParseWithLengthOpts((const char *)p, n, &end, 0) : NULL;
    while (root && end && end < stop && coai__is_space(*end)) end++;
    if (!root || !cJSON_IsObject(root) || end != stop) {
        cJSON_Delete(root);
        st->code = 2;
        coai__field_cstr(st->message, sizeof st->message, "malformed end-stream message");
        return COAI_ERR_JSON;
    }
    err = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (!err) { cJSON_Delete(root); return COAI_OK; }
    st->code = 2;
    if (!cJSON_IsObject(err)) {
        coai__field_cstr(st->message, sizeof st->message, "malformed end-stream error");
        cJSON_Delete(root);
        return COAI_ERR_INVALID;
    }
    r = coai__connect_error_fill(err, st);
    cJSON_Delete(root);
    return r;
}

/* A Connect error object {"code","message","details":[{"type","value"}]} (the end-stream
 * "error" member, or a unary call's whole error body) -> st. st->code stays as it was
 * when the code is missing or unknown (COAI_ERR_INVALID). */
static coai_result coai__connect_error_fill(const cJSON *err, coai_status *st)
{
    const cJSON *code, *msg, *details, *d;
    coai_result r = COAI_OK;
    code = cJSON_GetObjectItemCaseSensitive(err, "code");
    msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    if (cJSON_IsString(code) && coai__connect_code(code->valuestring) > 0)
        st->code = coai__connect_code(code->valuestring);
    else
        r = COAI_ERR_INVALID;
    if (cJSON_IsString(code) && coai__connect_code(code->valuestring) <= 0)
        coai__ascii_note(st->unknown_code, sizeof st->unknown_code, code->valuestring);
    if (cJSON_IsString(msg)) coai__field_cstr(st->message, sizeof st->message, msg->valuestring);
    details = cJSON_GetObjectItemCaseSensitive(err, "details");
    if (!cJSON_IsArray(details)) details = NULL;
    cJSON_ArrayForEach(d, details) {
        cJSON *type = cJSON_GetObjectItemCaseSensitive(d, "type");
        cJSON *value = cJSON_GetObjectItemCaseSensitive(d, "value");
        unsigned char *raw;
        size_t vn;
        long len;
        if (!cJSON_IsString(type) || !cJSON_IsString(value)) continue;
        if (!coai__ends_with(type->valuestring, "aiserver.v1.ErrorDetails")) {
            coai__ascii_note(st->unknown_detail, sizeof st->unknown_detail, type->valuestring);
            continue;
        }
        vn = strlen(value->valuestring);
        if (vn / 4 > COAI_MAX_STATUS_DETAILS / 3 + 1) { r = COAI_ERR_TOO_BIG; continue; }
        raw = (unsigned char *)malloc(vn / 4 * 3 + 3);
        if (!raw) { r = COAI_ERR_NOMEM; continue; }
        len = coai_base64_decode(value->valuestring, vn, raw, vn / 4 * 3 + 3);
        if (len < 0 || coai__error_details_decode(raw, (size_t)len, st) < 0) r = COAI_ERR_PROTO;
        free(raw);
    }
    return r;
}

void coai_status_describe(const coai_status *st, coai_buf *out)
{
    const char *parts[3];
    size_t np = 0, i, j;
    int any = 0;
    parts[np++] = st->message;
    parts[np++] = st->title;
    parts[np++] = st->detail;
    for (i = 0; i < np; i++) {
        int dup = parts[i][0] == 0;
        for (j = 0; j < i && !dup; j++) dup = strcmp(parts[i], parts[j]) == 0;
        if (dup) continue;
        if (any) coai_buf_puts(out, ": ");
        coai_buf_puts(out, parts[i]);
        any = 1;
    }
    if (!any) coai_buf_puts(out, "Unknown gRPC error");
    coai_buf_printf(out, " (grpc-status %d", st->code);
    if (st->error_name) coai_buf_printf(out, ", %s", st->error_name);
    else if (st->error) coai_buf_printf(out, ", error %d", st->error);
    coai_buf_putc(out, ')');
}
/* PART:FRAMING impl end */

/* ======================================================================== */
/* PART:CHECKSUM impl                                                       */
/* ======================================================================== */

#ifndef _WIN32
/* POSIX, but <time.h> hides it under strict -std=c99 unless the includer asked for POSIX.
 * A compatible redeclaration is harmless when it was declared. */
struct tm *localtime_r(const time_t *t, struct tm *out);
#endif

static int64_t coai__floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t coai_checksum_bucket(int64_t now_ms)
{
    /* Fallback (and the answer for every zone with a whole half-hour offset). */
    int64_t utc = coai__floor_div(now_ms, 1800000) * 1800000;
    time_t t = (time_t)coai__floor_div(now_ms, 1000), b;
    struct tm tm;
    if ((int64_t)t != coai__floor_div(now_ms, 1000) || !localtime_r(&t, &tm)) return utc;
    /* Same local date and hour, minutes floored to the half hour. tm_isdst stays as
     * localtime_r set it, so the instant keeps the offset in force at now_ms. */
    tm.tm_min = tm.tm_min / 30 * 30;
    tm.tm_sec = 0;
    b = mktime(&tm);
    if (b == (time_t)-1) return utc;
    return (int64_t)b * 1000;
}

/* First 4 bytes of SHA-256 as 8 lowercase hex characters (no NUL). */
static void coai__sha256_hex8(char out[8], const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    br_sha256_context c;
    unsigned char h[32];
    int i;
    br_sha256_init(&c);
    br_sha256_update(&c, p, n);
    br_sha256_out(&c, h);
    for (i = 0; i < 4; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
}

void coai_checksum_at(char out[COAI_CHECKSUM_SIZE], coai_str token, int64_t bucket_ms)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint64_t t = (uint64_t)coai__floor_div(bucket_ms, 1000000);
    unsigned char b[6];
    unsigned k = 0xa5;
    const char *tok = token.len ? token.ptr : "";
    const char *dot1, *dot2, *seg;
    size_t seg_n;
    int i;
    for (i = 0; i < 6; i++) b[i] = (unsigned char)(t >> (8 * (5 - i)) & 0xff);
    for (i = 0; i < 6; i++) {
        /* Each byte is XORed with the previous OUTPUT byte, then offset by its index. */
        b[i] = (unsigned char)(((b[i] ^ k) + (unsigned)i) & 0xff);
        k = b[i];
    }
    for (i = 0; i < 2; i++) {   /* 6 bytes = two 24-bit groups = 8 base64url characters */
        unsigned long v = (unsigned long)b[3 * i] << 16 | (unsigned long)b[3 * i + 1] << 8 |
                          b[3 * i + 2];
        out[4 * i] = al[v >> 18 & 63];
        out[4 * i + 1] = al[v >> 12 & 63];
        out[4 * i + 2] = al[v >> 6 & 63];
        out[4 * i + 3] = al[v & 63];
    }
    /* H1 hashes the JWT payload segment as text (between the first and second '.'). */
    dot1 = token.len ? (const char *)memchr(tok, '.', token.len) : NULL;
    seg = dot1 ? dot1 + 1 : NULL;
    seg_n = 0;
    if (seg) {
        dot2 = (const char *)memchr(seg, '.', token.len - (size_t)(seg - tok));
        seg_n = dot2 ? (size_t)(dot2 - seg) : token.len - (size_t)(seg - tok);
    }
    if (seg_n) coai__sha256_hex8(out + 8, seg, seg_n);
    else memcpy(out + 8, "00000000", 8);
    out[16] = '/';
    coai__sha256_hex8(out + 17, tok, token.len);
    out[25] = 0;
}

void coai_checksum(char out[COAI_CHECKSUM_SIZE], coai_str token, int64_t now_ms)
{
    coai_checksum_at(out, token, coai_checksum_bucket(now_ms));
}
/* PART:CHECKSUM impl end */

/* ======================================================================== */
/* PART:ENCODE impl                                                         */
/* ======================================================================== */

/* --- A tiny protobuf writer --------------------------------------------------
 * Everything is written straight into the caller's coai_buf. A nested message is
 * opened with its tag and a one-byte length placeholder; closing it fixes the length
 * and, only when the length needs more than one varint byte, shifts the body right.
 * Append failures are sticky in the coai_buf (out->err), so the helpers return
 * nothing and each public encoder checks out->err once at the end. */

static size_t coai__varint_put(unsigned char t[10], uint64_t v)
{
    size_t n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    return n;
}

static void coai__pb_varint(coai_buf *b, uint64_t v)
{
    unsigned char t[10];
    coai_buf_append(b, t, coai__varint_put(t, v));
}

static void coai__pb_tag(coai_buf *b, unsigned field, unsigned wire)
{
    coai__pb_varint(b, (uint64_t)field << 3 | wire);
}

/* Length-delimited field, written even when empty. */
static void coai__pb_bytes(coai_buf *b, unsigned field, const void *p, size_t n)
{
    coai__pb_tag(b, field, 2);
    coai__pb_varint(b, (uint64_t)n);
    coai_buf_append(b, p, n);
}

/* The original omits empty strings. */
static void coai__pb_str(coai_buf *b, unsigned field, coai_str s)
{
    if (s.len) coai__pb_bytes(b, field, s.ptr, s.len);
}

static void coai__pb_lit(coai_buf *b, unsigned field, const char *s)
{
    coai__pb_bytes(b, field, s, strlen(s));
}

static void coai__pb_u32(coai_buf *b, unsigned field, uint32_t v)
{
    if (v) { coai__pb_tag(b, field, 0); coai__pb_varint(b, v); }
}

/* int32 on the wire: negative values are sign-extended to 10 bytes. */
static void coai__pb_i32(coai_buf *b, unsigned field, int32_t v)
{
    if (v) { coai__pb_tag(b, field, 0); coai__pb_varint(b, (uint64_t)(int64_t)v); }
}

static void coai__pb_bool(coai_buf *b, unsigned field, int v)
{
    coai__pb_tag(b, field, 0);
    coai__pb_varint(b, v ? 1 : 0);
}

/* Start a nested message; returns the offset of its body. */
static size_t coai__pb_open(coai_buf *b, unsigned field)
{
    coai__pb_tag(b, field, 2);
    coai_buf_putc(b, 0);
    return b->len;
}

static void coai__pb_close(coai_buf *b, size_t body)
{
    unsigned char t[10];
    size_t n, k;
    if (b->err || body > b->len || body == 0) return;
    n = b->len - body;
    k = coai__varint_put(t, (uint64_t)n);
    if (k > 1) {
        if (coai_buf_reserve(b, k - 1)) return;
        memmove(b->data + body + k - 1, b->data + body, n);
        b->len += k - 1;
        b->data[b->len] = 0;
    }
    memcpy(b->data + body - 1, t, k);
}

/* Common exit: turn a sticky buffer failure into COAI_ERR_NOMEM and, on any error,
 * drop the partial message. */
static int coai__pb_finish(coai_buf *out, size_t start, int r)
{
    if (r == COAI_OK && out->err) r = COAI_ERR_NOMEM;
    if (r != COAI_OK && out->len > start) {
        out->len = start;
        if (out->data) out->data[start] = 0;
    }
    return r;
}

/* Connect/gRPC-web envelope header: flags + 32-bit big-endian payload length. */
static void coai__env_header(unsigned char h[5], unsigned flags, uint32_t len)
{
    h[0] = (unsigned char)flags;
    h[1] = (unsigned char)(len >> 24);
    h[2] = (unsigned char)(len >> 16);
    h[3] = (unsigned char)(len >> 8);
    h[4] = (unsigned char)len;
}

/* Reserve the 5 header bytes of an envelope at out->len; returns their offset. */
static size_t coai__env_begin(coai_buf *out)
{
    static const unsigned char zero[5] = { 0, 0, 0, 0, 0 };
    size_t at = out->len;
    coai_buf_append(out, zero, 5);
    return at;
}

static int coai__env_end(coai_buf *out, size_t at)
{
    size_t n;
    if (out->err) return COAI_ERR_NOMEM;
    n = out->len - at - 5;
    if (n > 0xffffffffu) return COAI_ERR_TOO_BIG;
    coai__env_header(out->data + at, 0x00, (uint32_t)n);
    return COAI_OK;
}

/* --- google.protobuf.Value ---------------------------------------------------- */

typedef struct coai__member {
    const cJSON *first;     /* first occurrence of the key: its position and name */
    const cJSON *last;      /* last occurrence: its value (JSON.parse semantics) */
    size_t idx;             /* document position of `first` */
    uint32_t num;           /* numeric value when is_index */
    int is_index;
} coai__member;

/* A canonical array index ("0", or no leading zero, at most 4294967294): such keys
 * come first in a JavaScript object's own-key order. */
static int coai__key_index(const char *k, uint32_t *num)
{
    uint64_t v = 0;
    size_t i;
    if (!k || !k[0]) return 0;
    if (k[0] == '0') { *num = 0; return k[1] == 0; }
    for (i = 0; k[i]; i++) {
        if (k[i] < '0' || k[i] > '9' || i >= 10) return 0;
        v = v * 10 + (uint64_t)(k[i] - '0');
    }
    if (v > 4294967294u) return 0;
    *num = (uint32_t)v;
    return 1;
}

static int coai__member_by_key(const void *pa, const void *pb)
{
    const coai__member *a = (const coai__member *)pa, *b = (const coai__member *)pb;
    int c = strcmp(a->first->string ? a->first->string : "",
                   b->first->string ? b->first->string : "");
    if (c) return c;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int coai__member_by_js_order(const void *pa, const void *pb)
{
    const coai__member *a = (const coai__member *)pa, *b = (const coai__member *)pb;
    if (a->is_index != b->is_index) return a->is_index ? -1 : 1;
    if (a->is_index && a->num != b->num) return a->num < b->num ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int coai__pb_value(coai_buf *b, const cJSON *j, int depth);

/* Struct fields of object j, in JavaScript key order. */
static int coai__pb_struct(coai_buf *b, const cJSON *j, int depth)
{
    const cJSON *c;
    coai__member *m;
    size_t n = 0, i, k, u = 0;
    int r = COAI_OK;
    for (c = j->child; c; c = c->next) n++;
    if (n == 0) return COAI_OK;
    if (n > ((size_t)-1) / sizeof *m) return COAI_ERR_NOMEM;
    m = (coai__member *)malloc(n * sizeof *m);
    if (!m) return COAI_ERR_NOMEM;
    for (c = j->child, i = 0; c; c = c->next, i++) {
        m[i].first = m[i].last = c;
        m[i].idx = i;
        m[i].num = 0;
        m[i].is_index = coai__key_index(c->string, &m[i].num);
    }
    if (n > 1) {
        /* Group duplicate keys, keep one entry per key, then order like JS. */
        qsort(m, n, sizeof *m, coai__member_by_key);
        for (i = 0; i < n; i = k) {
            const char *x = m[i].first->string ? m[i].first->string : "";
            for (k = i + 1; k < n; k++)
                if (strcmp(x, m[k].first->string ? m[k].first->string : "") != 0) break;
            m[u] = m[i];
            m[u].last = m[k - 1].first;
            u++;
        }
        qsort(m, u, sizeof *m, coai__member_by_js_order);
    } else {
        u = 1;
    }
    for (i = 0; i < u && r == COAI_OK; i++) {
        size_t e = coai__pb_open(b, 1), v;
        const char *key = m[i].first->string;
        if (key && key[0]) coai__pb_bytes(b, 1, key, strlen(key));
        v = coai__pb_open(b, 2);
        r = coai__pb_value(b, m[i].last, depth);
        coai__pb_close(b, v);
        coai__pb_close(b, e);
    }
    free(m);
    return r;
}

/* The body of one Value (no tag, no length). depth = containers already entered. */
static int coai__pb_value(coai_buf *b, const cJSON *j, int depth)
{
    const cJSON *c;
    size_t mark;
    int r = COAI_OK;
    if (!j) return COAI_ERR_INVALID;
    switch (j->type & 0xff) {
    case cJSON_NULL:
        return COAI_OK;                          /* the original writes nothing */
    case cJSON_False:
    case cJSON_True:
        coai__pb_bool(b, 4, (j->type & 0xff) == cJSON_True);
        return COAI_OK;
    case cJSON_Number: {
        unsigned char d[8];
        uint64_t bits;
        int i;
        memcpy(&bits, &j->valuedouble, 8);
        for (i = 0; i < 8; i++) d[i] = (unsigned char)(bits >> (8 * i));
        coai__pb_tag(b, 2, 1);
        coai_buf_append(b, d, 8);
        return COAI_OK;
    }
    case cJSON_String:
        if (j->valuestring && j->valuestring[0])
            coai__pb_bytes(b, 3, j->valuestring, strlen(j->valuestring));
        return COAI_OK;                          /* "" -> empty Value */
    case cJSON_Array:
        if (depth >= COAI_MAX_VALUE_DEPTH) return COAI_ERR_TOO_BIG;
        mark = coai__pb_open(b, 6);
        for (c = j->child; c && r == COAI_OK; c = c->next) {
            size_t e = coai__pb_open(b, 1);
            r = coai__pb_value(b, c, depth + 1);
            coai__pb_close(b, e);
        }
        coai__pb_close(b, mark);
        return r;
    case cJSON_Object:
        if (depth >= COAI_MAX_VALUE_DEPTH) return COAI_ERR_TOO_BIG;
        mark = coai__pb_open(b, 5);
        r = coai__pb_struct(b, j, depth + 1);
        coai__pb_close(b, mark);
        return r;
    }
    return COAI_ERR_INVALID;                     /* cJSON_Raw, cJSON_Invalid */
}

int coai_encode_value(coai_buf *out, const struct cJSON *json)
{
    size_t start = out->len;
    return coai__pb_finish(out, start, coai__pb_value(out, json, 0));
}

/* --- Run request ---------------------------------------------------------------- */

#define COAI__TOOLS_ID "cursor-tools"

/* RequestContextEnv body. */
static void coai__pb_env(coai_buf *b, const coai_run_params *p)
{
    static const coai_str os = COAI_STR_LIT("darwin 24.0.0"), sh = COAI_STR_LIT("/bin/zsh");
    coai__pb_str(b, 1, p->os_version.len ? p->os_version : os);
    coai__pb_str(b, 2, p->workspace);
    coai__pb_str(b, 3, p->shell.len ? p->shell : sh);
    coai__pb_str(b, 10, p->time_zone);
    coai__pb_str(b, 11, p->workspace);
}

/* McpToolDefinition body: fields 1, 2, 3, 4, 5 in that order (the original's). */
static int coai__pb_tool(coai_buf *b, const coai_tool *t)
{
    static const char prefix[] = COAI__TOOLS_ID "-";
    size_t v, s, e, x;
    int r = COAI_OK;
    coai__pb_tag(b, 1, 2);
    coai__pb_varint(b, (uint64_t)(sizeof prefix - 1) + t->name.len);
    coai_buf_append(b, prefix, sizeof prefix - 1);
    coai_buf_append(b, t->name.ptr, t->name.len);
    coai__pb_str(b, 2, t->description);
    v = coai__pb_open(b, 3);
    if (t->parameters && (t->parameters->type & 0xff) != cJSON_NULL) {
        r = coai__pb_value(b, t->parameters, 0);
    } else {
        /* {"type":"object","properties":{}} */
        s = coai__pb_open(b, 5);
        e = coai__pb_open(b, 1);
        coai__pb_lit(b, 1, "type");
        x = coai__pb_open(b, 2);
        coai__pb_lit(b, 3, "object");
        coai__pb_close(b, x);
        coai__pb_close(b, e);
        e = coai__pb_open(b, 1);
        coai__pb_lit(b, 1, "properties");
        x = coai__pb_open(b, 2);
        coai__pb_close(b, coai__pb_open(b, 5));
        coai__pb_close(b, x);
        coai__pb_close(b, e);
        coai__pb_close(b, s);
    }
    coai__pb_close(b, v);
    coai__pb_lit(b, 4, COAI__TOOLS_ID);
    coai__pb_str(b, 5, t->name);
    return r;
}

int coai_encode_run_request(coai_buf *out, const coai_run_params *p)
{
    size_t start = out->len, top, act, uma, um, rc, m, i;
    int r = COAI_OK;
    if (!p || (p->tool_count && !p->tools)) return COAI_ERR_INVALID;
    top = coai__pb_open(out, 1);                         /* AgentClientMessage.run_request */
    /* conversation_state: required, {} for a new conversation, else Cursor's checkpoint */
    coai__pb_bytes(out, 1, p->conversation_state.ptr, p->conversation_state.len);
    act = coai__pb_open(out, 2);                         /* action */
    uma = coai__pb_open(out, 1);                         /* user_message_action */
    um = coai__pb_open(out, 1);                          /* user_message */
    coai__pb_str(out, 1, p->prompt);
    coai__pb_str(out, 2, p->message_id);
    if (p->image_count && p->images) {                   /* selected_context.selected_images */
        size_t sc = coai__pb_open(out, 3);
        if (r == COAI_OK) r = coai_encode_selected_images(out, p->images, p->image_count);
        coai__pb_close(out, sc);
    }
    coai__pb_tag(out, 4, 0);
    coai__pb_varint(out, 1);                             /* mode = AGENT_MODE_AGENT */
    coai__pb_close(out, um);
    rc = coai__pb_open(out, 2);                          /* request_context */
    m = coai__pb_open(out, 4);
    coai__pb_env(out, p);
    coai__pb_close(out, m);
    for (i = 0; i < p->tool_count && r == COAI_OK; i++) {
        m = coai__pb_open(out, 7);
        r = coai__pb_tool(out, &p->tools[i]);
        coai__pb_close(out, m);
    }
    if (p->tool_count && r == COAI_OK) {
        size_t ins;
        m = coai__pb_open(out, 14);                      /* mcp_instructions */
        coai__pb_lit(out, 1, COAI__TOOLS_ID);
        ins = coai__pb_open(out, 2);
        coai_buf_puts(out, "You have access to the following tools:\n");
        for (i = 0; i < p->tool_count; i++) {
            const coai_tool *t = &p->tools[i];
            if (i) coai_buf_putc(out, '\n');
            coai_buf_puts(out, "- ");
            coai_buf_append(out, t->name.ptr, t->name.len);
            coai_buf_puts(out, ": ");
            if (t->description.len) coai_buf_append(out, t->description.ptr, t->description.len);
            else coai_buf_puts(out, "No description");
        }
        coai_buf_puts(out, "\n\nUse these tools when appropriate to help the user.");
        coai__pb_close(out, ins);
        coai__pb_close(out, m);
    }
    coai__pb_close(out, rc);
    coai__pb_close(out, uma);
    coai__pb_close(out, act);
    m = coai__pb_open(out, 3);                           /* model_details */
    coai__pb_str(out, 1, p->model_id);
    coai__pb_close(out, m);
    if (p->tool_count && r == COAI_OK) {
        size_t list = coai__pb_open(out, 4);             /* mcp_tools */
        for (i = 0; i < p->tool_count && r == COAI_OK; i++) {
            m = coai__pb_open(out, 1);
            r = coai__pb_tool(out, &p->tools[i]);
            coai__pb_close(out, m);
        }
        coai__pb_close(out, list);
    }
    coai__pb_str(out, 5, p->conversation_id);
    if (p->tool_count && r == COAI_OK) {
        size_t fs = coai__pb_open(out, 6), d;            /* mcp_file_system_options */
        coai__pb_bool(out, 1, 1);
        coai__pb_str(out, 2, p->workspace);
        d = coai__pb_open(out, 3);
        coai__pb_lit(out, 1, "Cursor Tools");
        coai__pb_lit(out, 2, COAI__TOOLS_ID);
        coai__pb_str(out, 3, p->workspace);
        coai__pb_lit(out, 4, "Use these tools to assist the user with their coding tasks.");
        coai__pb_close(out, d);
        coai__pb_close(out, fs);
    }
    for (i = 0; i < p->blob_count && r == COAI_OK; i++) {
        m = coai__pb_open(out, 17);                      /* pre_fetched_blobs */
        coai__pb_bytes(out, 1, p->blob_ids[i].ptr, p->blob_ids[i].len);
        coai__pb_bytes(out, 2, p->blob_values[i].ptr, p->blob_values[i].len);
        coai__pb_close(out, m);
    }
    if (p->image_count && p->images)
        coai__pb_bool(out, 19, 1);                       /* client_supports_inline_images */
    coai__pb_close(out, top);
    return coai__pb_finish(out, start, r);
}

/* --- Bodies: BidiAppend and RunSSE ------------------------------------------------ */

int coai_encode_bidi_append(coai_buf *out, const void *msg, size_t n, coai_str request_id,
                            int64_t seqno)
{
    size_t start = out->len, env, m;
    if (seqno < 0 || (n && !msg)) return COAI_ERR_INVALID;
    if (n > 0x7fffffffu) return COAI_ERR_TOO_BIG;      /* hex doubles it: over 4 GiB */
    env = coai__env_begin(out);
    if (n) {
        coai__pb_tag(out, 1, 2);
        coai__pb_varint(out, (uint64_t)n * 2);
        coai_hex_append(out, msg, n);
    }
    m = coai__pb_open(out, 2);
    coai__pb_str(out, 1, request_id);
    coai__pb_close(out, m);
    coai__pb_tag(out, 3, 0);
    coai__pb_varint(out, (uint64_t)seqno);               /* always written, also 0 */
    return coai__pb_finish(out, start, coai__env_end(out, env));
}

int coai_encode_run_body(coai_buf *out, coai_str request_id)
{
    size_t start = out->len, env = coai__env_begin(out);
    coai__pb_str(out, 1, request_id);
    return coai__pb_finish(out, start, coai__env_end(out, env));
}

/* --- KV, control, resume ------------------------------------------------------------ */

int coai_encode_kv_set_result_meta(coai_buf *out, uint32_t id, coai_str meta, int has_meta)
{
    size_t start = out->len, kv = coai__pb_open(out, 3);
    coai__pb_u32(out, 1, id);
    coai__pb_close(out, coai__pb_open(out, 3));          /* set_blob_result {} = success */
    if (has_meta) coai__pb_bytes(out, 4, meta.ptr, meta.len);
    coai__pb_close(out, kv);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_kv_set_result(coai_buf *out, uint32_t id)
{
    return coai_encode_kv_set_result_meta(out, id, coai_str_c(""), 0);
}

int coai_encode_kv_get_result_meta(coai_buf *out, uint32_t id, const void *data, size_t n,
                                   int found, coai_str meta, int has_meta)
{
    size_t start = out->len, kv, res;
    if (found && n && !data) return COAI_ERR_INVALID;
    kv = coai__pb_open(out, 3);
    coai__pb_u32(out, 1, id);
    res = coai__pb_open(out, 2);
    if (found) coai__pb_bytes(out, 1, data, n);          /* optional: presence = found */
    coai__pb_close(out, res);
    if (has_meta) coai__pb_bytes(out, 4, meta.ptr, meta.len);
    coai__pb_close(out, kv);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_kv_get_result(coai_buf *out, uint32_t id, const void *data, size_t n, int found)
{
    return coai_encode_kv_get_result_meta(out, id, data, n, found, coai_str_c(""), 0);
}

int coai_encode_exec_stream_close(coai_buf *out, uint32_t id)
{
    size_t start = out->len, ctl = coai__pb_open(out, 5), sc = coai__pb_open(out, 1);
    coai__pb_u32(out, 1, id);
    coai__pb_close(out, sc);
    coai__pb_close(out, ctl);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_exec_throw(coai_buf *out, uint32_t id, coai_str reason)
{
    size_t start = out->len, ctl = coai__pb_open(out, 5), th = coai__pb_open(out, 2);
    coai__pb_u32(out, 1, id);
    coai__pb_str(out, 2, reason);
    coai__pb_close(out, th);
    coai__pb_close(out, ctl);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_interaction_response(coai_buf *out, uint32_t id, int query)
{
    size_t start = out->len, resp, q, v;
    /* the typed outcome: {9 approved(1)}, {10 rejected(3)}, {11, 14 rejected(2)},
     * {13 failure(2)}, each with the reason as its field 1 (10, 11, 13, 14) */
    unsigned outcome = query == 8 || query == 9 ? 1 : query == 10 ? 3
                     : query == 11 || query == 13 || query == 14 ? 2 : 0;
    if (query < 2 || query > 63) return COAI_ERR_INVALID;
    resp = coai__pb_open(out, 6);
    coai__pb_u32(out, 1, id);
    q = coai__pb_open(out, (unsigned)query);
    if (outcome) {
        v = coai__pb_open(out, outcome);
        if (query >= 10) coai__pb_str(out, 1, coai_str_c(COAI_QUERY_REFUSAL));
        coai__pb_close(out, v);
    }
    coai__pb_close(out, q);
    coai__pb_close(out, resp);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_resume(coai_buf *out)
{
    size_t start = out->len, act = coai__pb_open(out, 4);
    coai__pb_close(out, coai__pb_open(out, 2));
    coai__pb_close(out, act);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_client_heartbeat(coai_buf *out)
{
    size_t start = out->len;
    coai__pb_close(out, coai__pb_open(out, 7));
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_exec_heartbeat(coai_buf *out, uint32_t id)
{
    size_t start = out->len, ctl = coai__pb_open(out, 5), hb = coai__pb_open(out, 3);
    coai__pb_u32(out, 1, id);
    coai__pb_close(out, hb);
    coai__pb_close(out, ctl);
    return coai__pb_finish(out, start, COAI_OK);
}

/* --- Exec results ------------------------------------------------------------------ */

/* Opens AgentClientMessage.exec_client_message{id, exec_id} and its result field
 * `result`; *outer receives the outer body offset. Returns the result body offset. */
static size_t coai__exec_open(coai_buf *b, uint32_t id, coai_str exec_id, unsigned result,
                              size_t *outer)
{
    *outer = coai__pb_open(b, 2);
    coai__pb_u32(b, 1, id);
    coai__pb_str(b, 15, exec_id);
    return coai__pb_open(b, result);
}

static void coai__exec_close(coai_buf *b, size_t res, size_t outer)
{
    coai__pb_close(b, res);
    coai__pb_close(b, outer);
}

int coai_encode_exec_request_context(coai_buf *out, uint32_t id, coai_str exec_id,
                                     const coai_run_params *env)
{
    size_t start = out->len, outer, res, ok, rc, e;
    if (!env) return COAI_ERR_INVALID;
    res = coai__exec_open(out, id, exec_id, 10, &outer);
    ok = coai__pb_open(out, 1);                          /* success */
    rc = coai__pb_open(out, 1);                          /* request_context */
    e = coai__pb_open(out, 4);                           /* env */
    coai__pb_env(out, env);
    coai__pb_close(out, e);
    coai__pb_close(out, rc);
    coai__pb_close(out, ok);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_exec_mcp_state(coai_buf *out, uint32_t id, coai_str exec_id,
                               const coai_tool *tools, size_t tool_count,
                               char *const *server_ids, size_t server_id_count)
{
    size_t start = out->len, outer, res, ok, srv, m, i;
    int r = COAI_OK, ours = server_id_count == 0;
    if (tool_count && !tools) return COAI_ERR_INVALID;
    for (i = 0; i < server_id_count && !ours; i++)
        ours = server_ids && server_ids[i] && strcmp(server_ids[i], COAI__TOOLS_ID) == 0;
    res = coai__exec_open(out, id, exec_id, 36, &outer);
    ok = coai__pb_open(out, 1);                          /* success */
    if (ours && tool_count) {
        srv = coai__pb_open(out, 1);                     /* servers[0] */
        coai__pb_lit(out, 1, "Cursor Tools");            /* as in McpDescriptor */
        coai__pb_lit(out, 2, COAI__TOOLS_ID);
        for (i = 0; i < tool_count && r == COAI_OK; i++) {
            m = coai__pb_open(out, 5);
            r = coai__pb_tool(out, &tools[i]);
            coai__pb_close(out, m);
        }
        coai__pb_lit(out, 7, "ready");
        coai__pb_close(out, srv);
    }
    coai__pb_close(out, ok);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, r);
}

int coai_encode_exec_empty_result(coai_buf *out, uint32_t id, coai_str exec_id, int kind)
{
    size_t start = out->len, outer, res;
    unsigned field = coai_exec_result_field(kind);
    if (!field) return COAI_ERR_INVALID;
    res = coai__exec_open(out, id, exec_id, field, &outer);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_exec_precheck(coai_buf *out, uint32_t id, coai_str exec_id, int kind,
                              int allowlisted)
{
    size_t start = out->len, outer, res;
    if (kind < COAI_EXEC_PRECHECK_FIRST || kind > COAI_EXEC_PRECHECK_LAST)
        return COAI_ERR_INVALID;
    res = coai__exec_open(out, id, exec_id, coai_exec_result_field(kind), &outer);
    if (allowlisted) coai__pb_u32(out, 1, 1);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_exec_subagent_error(coai_buf *out, uint32_t id, coai_str exec_id,
                                    coai_str reason)
{
    size_t start = out->len, outer, res, err;
    res = coai__exec_open(out, id, exec_id, COAI_EXEC_SUBAGENT, &outer);
    err = coai__pb_open(out, 2);                          /* error */
    coai__pb_str(out, 2, reason);                         /* error (agent_id 1: none) */
    coai__pb_close(out, err);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

static void coai__pb_shell_body(coai_buf *b, coai_str command, coai_str cwd, int exit_code,
                                coai_str out_text, coai_str err_text, int32_t ms)
{
    coai__pb_str(b, 1, command);
    coai__pb_str(b, 2, cwd);
    coai__pb_i32(b, 3, (int32_t)exit_code);
    coai__pb_str(b, 5, out_text);
    coai__pb_str(b, 6, err_text);
    coai__pb_i32(b, 7, ms);
}

int coai_encode_exec_shell_result(coai_buf *out, uint32_t id, coai_str exec_id,
                                  coai_str command, coai_str cwd, int exit_code,
                                  coai_str out_text, coai_str err_text, int32_t ms)
{
    size_t start = out->len, outer, res, v;
    res = coai__exec_open(out, id, exec_id, 2, &outer);
    v = coai__pb_open(out, exit_code == 0 ? 1 : 2);      /* success : failure */
    coai__pb_shell_body(out, command, cwd, exit_code, out_text, err_text, ms);
    coai__pb_close(out, v);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

int coai_encode_exec_mcp_result(coai_buf *out, uint32_t id, coai_str exec_id, coai_str text,
                                int is_error)
{
    size_t start = out->len, outer, res, ok, item, tx;
    res = coai__exec_open(out, id, exec_id, 11, &outer);
    ok = coai__pb_open(out, 1);                          /* success */
    item = coai__pb_open(out, 1);                        /* content[0] */
    tx = coai__pb_open(out, 1);                          /* text */
    coai__pb_str(out, 1, text);
    coai__pb_close(out, tx);
    coai__pb_close(out, item);
    if (is_error) coai__pb_bool(out, 2, 1);              /* the original writes it only when set */
    coai__pb_close(out, ok);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

/* Lines of t that are not blank (a trailing line without newline counts). */
static size_t coai__lines(coai_str t, int nonblank_only)
{
    size_t i, n = 0, len = 0;
    for (i = 0; i < t.len; i++) {
        if (t.ptr[i] == '\n') { if (len || !nonblank_only) n++; len = 0; }
        else if (t.ptr[i] != '\r' && t.ptr[i] != ' ' && t.ptr[i] != '\t') len++;
        else if (!nonblank_only) len++;
    }
    return n + (len ? 1 : 0);
}

/* Each non-blank line of t as a string field `field` (trimmed of \r and spaces). */
static void coai__pb_lines(coai_buf *b, unsigned field, coai_str t, int as_file)
{
    size_t i = 0;
    while (i < t.len) {
        size_t e = i, s, z;
        while (e < t.len && t.ptr[e] != '\n') e++;
        s = i; z = e;
        while (s < z && (t.ptr[s] == ' ' || t.ptr[s] == '\t' || t.ptr[s] == '\r')) s++;
        while (z > s && (t.ptr[z - 1] == ' ' || t.ptr[z - 1] == '\t' || t.ptr[z - 1] == '\r'))
            z--;
        if (z > s) {
            if (as_file) {
                size_t f = coai__pb_open(b, field);
                coai__pb_bytes(b, 1, t.ptr + s, z - s);
                coai__pb_close(b, f);
            } else {
                coai__pb_bytes(b, field, t.ptr + s, z - s);
            }
        }
        i = e + 1;
    }
}

int coai_encode_exec_answer(coai_buf *out, const coai_exec_ref *x, coai_str text,
                            int is_error, uint32_t ms, unsigned step)
{
    return coai_encode_exec_answer_images(out, x, text, NULL, 0, is_error, ms, step);
}

int coai_encode_exec_answer_images(coai_buf *out, const coai_exec_ref *x, coai_str text,
                                   const struct coai_image *images, size_t n, int is_error,
                                   uint32_t ms, unsigned step)
{
    coai_exec_outcome o;
    memset(&o, 0, sizeof o);
    o.is_error = is_error != 0;
    if (is_error) o.err = text;
    else o.out = text;
    o.shape = "raw";
    return coai_encode_exec_outcome(out, x, &o, images, n, ms, step);
}

int coai_encode_exec_outcome(coai_buf *out, const coai_exec_ref *x, const coai_exec_outcome *o,
                             const struct coai_image *images, size_t n, uint32_t ms,
                             unsigned step)
{
    size_t start = out->len, outer, res, v, w;
    unsigned last, frame = 0;
    int kind, is_error, code;
    coai_str text;
    if (!x || !o || (n && !images)) return COAI_ERR_INVALID;
    kind = x->kind;
    is_error = o->is_error;
    text = is_error && o->err.len ? o->err : o->out;
    code = o->has_exit ? o->exit_code : is_error ? 1 : 0;
    if (kind == COAI_EXEC_REQUEST_CONTEXT) return COAI_ERR_INVALID;
    if (n && kind != COAI_EXEC_MCP) return COAI_ERR_INVALID;
    if (kind == COAI_EXEC_SHELL_STREAM) {
        /* frames: 0 start, 1 stdout, 2 stderr, 3 exit; the ones with nothing to say are
         * skipped (one of stdout / stderr is always sent, as the CLI does) */
        unsigned frames[5], nf = 0;
        frames[nf++] = 0;
        if (o->out.len || (!o->err.len && !is_error)) frames[nf++] = 1;
        if (o->err.len || (!o->out.len && is_error)) frames[nf++] = 2;
        frames[nf++] = 3;
        last = nf;
        if (step > last) return COAI_DONE;
        if (step == last) return coai_encode_exec_stream_close(out, x->id);
        frame = frames[step];
    } else {
        last = 1;
        if (step > last) return COAI_DONE;
        if (step == last) return coai_encode_exec_stream_close(out, x->id);
    }
    outer = coai__pb_open(out, 2);                       /* exec_client_message */
    coai__pb_u32(out, 1, x->id);
    coai__pb_str(out, 15, x->exec_id);
    switch (kind) {
    case COAI_EXEC_SHELL_STREAM:
        res = coai__pb_open(out, 14);                    /* shell_stream */
        if (frame == 0) {
            coai__pb_close(out, coai__pb_open(out, 4));  /* start{} */
        } else if (frame == 1 || frame == 2) {
            v = coai__pb_open(out, frame);               /* stdout / stderr */
            coai__pb_str(out, 1, frame == 1 ? o->out : o->err);
            coai__pb_close(out, v);
        } else {
            v = coai__pb_open(out, 3);                   /* exit */
            coai__pb_u32(out, 1, (uint32_t)code);
            coai__pb_str(out, 2, x->cwd);
            coai__pb_u32(out, 6, ms);                    /* aborted = false: omitted */
            coai__pb_close(out, v);
        }
        coai__pb_close(out, res);
        break;
    case COAI_EXEC_SHELL:
        res = coai__pb_open(out, 2);
        v = coai__pb_open(out, code == 0 && !is_error ? 1 : 2);
        coai__pb_shell_body(out, x->command, x->cwd, code, o->out, o->err,
                            (int32_t)(ms > 0x7fffffffu ? 0x7fffffffu : ms));
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    case COAI_EXEC_READ:
        res = coai__pb_open(out, 7);
        v = coai__pb_open(out, is_error ? 2 : 1);
        coai__pb_str(out, 1, x->path);
        if (is_error) {
            coai__pb_str(out, 2, text);
        } else {
            int64_t tl = o->has_total ? o->total_lines : (int64_t)coai__lines(o->out, 0);
            coai__pb_str(out, 2, o->out);
            coai__pb_i32(out, 3, (int32_t)(tl > 0x7fffffff ? 0x7fffffff : tl));
            if (o->out.len) { coai__pb_tag(out, 4, 0); coai__pb_varint(out, o->out.len); }
            if (o->truncated) coai__pb_bool(out, 6, 1);
        }
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    case COAI_EXEC_WRITE:
        res = coai__pb_open(out, 3);
        v = coai__pb_open(out, is_error ? 5 : 1);
        coai__pb_str(out, 1, x->path);
        if (is_error) {
            coai__pb_str(out, 2, text);
        } else {
            coai__pb_i32(out, 2, (int32_t)(x->write_lines > 0x7fffffff ? 0x7fffffff
                                                                       : x->write_lines));
            coai__pb_i32(out, 3, (int32_t)(x->write_size > 0x7fffffff ? 0x7fffffff
                                                                      : x->write_size));
        }
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    case COAI_EXEC_LS:
        res = coai__pb_open(out, 8);
        v = coai__pb_open(out, is_error ? 2 : 1);
        if (is_error) {
            coai__pb_str(out, 1, x->path);
            coai__pb_str(out, 2, text);
        } else {
            w = coai__pb_open(out, 1);                   /* directory_tree_root */
            coai__pb_str(out, 1, x->path);
            coai__pb_lines(out, 3, text, 1);             /* children_files[{name}] */
            coai__pb_bool(out, 4, 1);                    /* children_were_processed */
            coai__pb_i32(out, 6, (int32_t)coai__lines(text, 1));
            coai__pb_close(out, w);
        }
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    case COAI_EXEC_GREP:
        res = coai__pb_open(out, 5);
        v = coai__pb_open(out, is_error ? 2 : 1);
        if (is_error) {
            coai__pb_str(out, 1, text);
        } else {
            size_t e, u, f;
            coai__pb_str(out, 2, x->path);
            coai__pb_lit(out, 3, "files_with_matches");
            e = coai__pb_open(out, 4);                   /* workspace_results entry */
            coai__pb_bytes(out, 1, x->path.ptr, x->path.len);
            u = coai__pb_open(out, 2);                   /* GrepUnionResult */
            f = coai__pb_open(out, 2);                   /* files */
            coai__pb_lines(out, 1, text, 0);
            coai__pb_i32(out, 2, (int32_t)coai__lines(text, 1));
            coai__pb_close(out, f);
            coai__pb_close(out, u);
            coai__pb_close(out, e);
        }
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    case COAI_EXEC_DELETE: {
        /* success{path, deleted_file, file_size}: the size the command printed before it
         * removed the file (wc -c; coai_exec_outcome_parse reads it). Cursor's turn stalls
         * on a success whose file_size is 0, which on the wire is also a success without
         * one (seen live in 2026), so a delete the tool reports no size for, or an empty
         * file's, goes as error{path, error} whose text says what happened: the model reads
         * it and the turn goes on. A failure: error{path, error}. */
        int sized = !is_error && o->has_size && o->file_size > 0;
        size_t i = 0;
        while (i < o->out.len && (o->out.ptr[i] == ' ' || o->out.ptr[i] == '\t'
                                  || o->out.ptr[i] == '\r' || o->out.ptr[i] == '\n'))
            i++;                                         /* blanks only: said nothing */
        res = coai__pb_open(out, 4);
        v = coai__pb_open(out, sized ? 1 : 7);
        coai__pb_str(out, 1, x->path);
        if (sized) {
            coai__pb_str(out, 2, x->path);
            coai__pb_tag(out, 3, 0);
            coai__pb_varint(out, (uint64_t)o->file_size);
        } else if (is_error) {
            coai__pb_str(out, 2, text);
        } else {
            w = coai__pb_open(out, 2);
            coai_buf_append(out, x->path.ptr, x->path.len);
            if (o->has_size)
                coai_buf_puts(out, " was deleted (it was empty: 0 bytes).");
            else if (i < o->out.len || (o->has_exit && o->exit_code == 0))
                coai_buf_puts(out, " was deleted; the client's tool did not report its size.");
            else
                coai_buf_puts(out, ": the client's tool returned no output, neither the "
                                   "file's size nor an error, so the delete is not confirmed; "
                                   "check whether the file still exists.");
            coai__pb_close(out, w);
        }
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    }
    default: {                                           /* MCP and the rest */
        size_t item, tx, i;
        res = coai__pb_open(out, 11);
        v = coai__pb_open(out, 1);
        if (text.len || !n) {                            /* no images: always a text item */
            item = coai__pb_open(out, 1);
            tx = coai__pb_open(out, 1);
            coai__pb_str(out, 1, text);
            coai__pb_close(out, tx);
            coai__pb_close(out, item);
        }
        for (i = 0; i < n; i++) {
            item = coai__pb_open(out, 1);                /* content: McpToolResultContentItem */
            tx = coai__pb_open(out, 2);                  /* image: McpImageContent */
            coai__pb_bytes(out, 1, images[i].data, images[i].len);
            coai__pb_str(out, 2, coai_str_c(images[i].mime));
            coai__pb_close(out, tx);
            coai__pb_close(out, item);
        }
        if (is_error) coai__pb_bool(out, 2, 1);
        coai__pb_close(out, v);
        coai__pb_close(out, res);
        break;
    }
    }
    coai__pb_u32(out, 39, ms);                           /* local_execution_time_ms */
    coai__pb_close(out, outer);
    return coai__pb_finish(out, start, COAI_OK);
}

/* Result field number and error-variant field number for each refusable kind;
 * 0 = none (answered with throw). */
static unsigned coai__reject_field(int kind, unsigned *variant)
{
    switch (kind) {
    case COAI_EXEC_SHELL: case COAI_EXEC_SHELL_STREAM: *variant = 2; return 2;
    case COAI_EXEC_WRITE: *variant = 5; return 3;
    case COAI_EXEC_DELETE: *variant = 7; return 4;
    case COAI_EXEC_GREP: *variant = 2; return 5;
    case COAI_EXEC_READ: *variant = 2; return 7;
    case COAI_EXEC_LS: *variant = 2; return 8;
    case COAI_EXEC_DIAGNOSTICS: *variant = 2; return 9;
    case COAI_EXEC_REQUEST_CONTEXT: *variant = 2; return 10;
    case COAI_EXEC_MCP: *variant = 2; return 11;
    case COAI_EXEC_FETCH: *variant = 2; return 20;
    default: *variant = 0; return 0;
    }
}

int coai_exec_reject_is_result(int kind)
{
    unsigned v;
    return coai__reject_field(kind, &v) != 0;
}

int coai_encode_exec_reject(coai_buf *out, const struct coai_exec *ex, coai_str reason)
{
    size_t start = out->len, outer, res, v;
    unsigned variant, field;
    static const coai_str none = { "", 0 };
    if (!ex) return COAI_ERR_INVALID;
    field = coai__reject_field((int)ex->kind, &variant);
    if (!field) return coai_encode_exec_throw(out, ex->id, reason);
    res = coai__exec_open(out, ex->id, ex->exec_id, field, &outer);
    v = coai__pb_open(out, variant);
    switch (ex->kind) {
    case COAI_EXEC_SHELL:
    case COAI_EXEC_SHELL_STREAM:
        coai__pb_shell_body(out, ex->command, ex->cwd, 1, none, reason, 0);
        break;
    case COAI_EXEC_GREP:
    case COAI_EXEC_REQUEST_CONTEXT:
    case COAI_EXEC_MCP:
        coai__pb_str(out, 1, reason);                    /* {1 error} */
        break;
    case COAI_EXEC_FETCH:
        coai__pb_str(out, 1, ex->url);
        coai__pb_str(out, 2, reason);
        break;
    default:                                             /* {1 path, 2 error} */
        coai__pb_str(out, 1, ex->path);
        coai__pb_str(out, 2, reason);
        break;
    }
    coai__pb_close(out, v);
    coai__exec_close(out, res, outer);
    return coai__pb_finish(out, start, COAI_OK);
}
/* PART:ENCODE impl end */

/* ======================================================================== */
/* PART:DECODE impl                                                         */
/* ======================================================================== */

/* One object member of McpArgs.args (or of a nested Struct), as read from the wire. */
typedef struct coai__ent {
    const pb_byte_t *key, *val;   /* raw key bytes; Value bytes (val NULL: no value) */
    size_t klen, vlen;
    size_t seq;                   /* wire position among the object's entries */
    size_t first;                 /* after grouping: seq of the key's first occurrence */
    size_t kofs, kjlen;           /* the key as JSON text in the object's key buffer */
    uint32_t idx;                 /* JS array index value when is_idx */
    int is_idx;
} coai__ent;

/* Private storage behind coai_msg.priv_: the one nanopb leaf struct decoded for the
 * current message (released on the next decode), plus what the callbacks collect. */
typedef struct coai__dec {
    const pb_msgdesc_t *desc;     /* type held in u (for pb_release), NULL if none */
    union {
        agent_v1_TextDeltaUpdate text;
        agent_v1_ThinkingDeltaUpdate thinking;
        agent_v1_ThinkingCompletedUpdate thinking_done;
        agent_v1_TokenDeltaUpdate tokens;
        agent_v1_ToolCallStartedUpdate started;
        agent_v1_ToolCallCompletedUpdate completed;
        agent_v1_PartialToolCallUpdate partial;
        agent_v1_StepStartedUpdate step;
        agent_v1_StepCompletedUpdate step_done;
        agent_v1_TurnEndedUpdate turn;
        agent_v1_McpStateExecArgs mcp_state;
        agent_v1_ShellArgs shell;
        agent_v1_WriteArgs write;
        agent_v1_DeleteArgs del;
        agent_v1_GrepArgs grep;
        agent_v1_ReadArgs read;
        agent_v1_LsArgs ls;
        agent_v1_McpArgs mcp;
        agent_v1_FetchArgs fetch;
        agent_v1_GetBlobArgs get_blob;
        agent_v1_SetBlobArgs set_blob;
        agent_v1_ConversationTokenDetails token_details;
        agent_v1_ExecServerAbort abort;
    } u;
    char *exec_id;                /* heap copy of ExecServerMessage.exec_id */
    size_t exec_id_len;
    unsigned char *raw;           /* heap copy behind coai_msg.raw */
    /* Bounds of the leaf being decoded: a callback whose stream does not point inside
     * them was handed a scalar (wrong wire type) by nanopb. */
    const pb_byte_t *lo, *hi;
    int tool;                     /* ToolCall oneof field number seen by the callback */
    coai__ent *args;              /* McpArgs.args entries in wire order */
    size_t nargs, cargs;
    int cb_err;                   /* coai_result from inside a callback */
} coai__dec;

/* --- a small protobuf field reader on top of nanopb's stream API --- */

typedef struct coai__pbr {
    pb_istream_t s;
    const pb_byte_t *end;
} coai__pbr;

typedef struct coai__pbf {
    uint32_t num;
    pb_wire_type_t wt;
    uint64_t v;                   /* varint value or fixed64/fixed32 bits */
    const pb_byte_t *p;           /* length-delimited payload */
    size_t n;
} coai__pbf;

static void coai__pbr_init(coai__pbr *r, const pb_byte_t *p, size_t n)
{
    r->s = pb_istream_from_buffer(p, n);
    r->end = p + n;
}

/* 1: a field was read into *f; 0: end of message; -1: malformed (bad tag, field 0,
 * group or unknown wire type, varint over 10 bytes, length past the end). */
static int coai__pb_next(coai__pbr *r, coai__pbf *f)
{
    uint32_t tag, len;
    bool eof;
    if (r->s.bytes_left == 0) return 0;
    if (!pb_decode_tag(&r->s, &f->wt, &tag, &eof) || tag == 0) return -1;
    f->num = tag;
    f->v = 0;
    f->p = NULL;
    f->n = 0;
    switch (f->wt) {
    case PB_WT_VARINT:
        return pb_decode_varint(&r->s, &f->v) ? 1 : -1;
    case PB_WT_64BIT:
        return pb_decode_fixed64(&r->s, &f->v) ? 1 : -1;
    case PB_WT_32BIT: {
        uint32_t x;
        if (!pb_decode_fixed32(&r->s, &x)) return -1;
        f->v = x;
        return 1;
    }
    case PB_WT_STRING:
        if (!pb_decode_varint32(&r->s, &len) || len > r->s.bytes_left) return -1;
        f->p = r->end - r->s.bytes_left;
        f->n = len;
        return pb_read(&r->s, NULL, len) ? 1 : -1;
    default:
        return -1;
    }
}

/* Validate one message level and bound its field count before nanopb sees it: nanopb
 * skips over-long varints in unknown fields and grows repeated pointer fields one
 * element at a time, so unbounded repeats would cost quadratic time and much memory. */
static coai_result coai__pb_scan(const pb_byte_t *p, size_t n)
{
    coai__pbr r;
    coai__pbf f;
    size_t count = 0;
    int k;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0)
        if (++count > COAI_MAX_PB_FIELDS) return COAI_ERR_TOO_BIG;
    return k < 0 ? COAI_ERR_PROTO : COAI_OK;
}

/* 1 if the (already validated) message has a field numbered lo..hi. */
static int coai__pb_scan_has(const pb_byte_t *p, size_t n, uint32_t lo, uint32_t hi)
{
    coai__pbr r;
    coai__pbf f;
    coai__pbr_init(&r, p, n);
    while (coai__pb_next(&r, &f) > 0)
        if (f.num >= lo && f.num <= hi) return 1;
    return 0;
}

/* coai_encode_run_request_conversation (PART:ENCODE api; here for the field reader above).
 * Copies the bytes a field took, tag included: [*at, where the reader is now). */
static void coai__pb_copy_field(coai_buf *out, const coai__pbr *r, const pb_byte_t *at)
{
    coai_buf_append(out, at, (size_t)((r->end - r->s.bytes_left) - at));
}

/* Copy a client message with its run request (AgentClientMessage field 1, exactly one)
 * rewritten: body writes the AgentRunRequest's fields from rr into out (-1: malformed);
 * every other field is copied as it is. */
typedef int (*coai__run_body_fn)(coai_buf *out, coai__pbr *rr, const void *ctx);

static int coai__run_request_rewrite(coai_buf *out, const void *msg, size_t n,
                                     coai__run_body_fn body, const void *ctx)
{
    const pb_byte_t *at;
    coai__pbr top, rr;
    coai__pbf f;
    size_t start = out->len, b;
    int k, seen = 0, r = COAI_OK;
    coai__pbr_init(&top, (const pb_byte_t *)msg, n);
    for (;;) {
        at = top.end - top.s.bytes_left;
        if ((k = coai__pb_next(&top, &f)) <= 0) break;
        if (f.num != 1) {                                /* not the run request: as it is */
            coai__pb_copy_field(out, &top, at);
            continue;
        }
        if (f.wt != PB_WT_STRING || seen++) { r = COAI_ERR_PROTO; break; }
        b = coai__pb_open(out, 1);
        coai__pbr_init(&rr, f.p, f.n);
        if (body(out, &rr, ctx) < 0) { r = COAI_ERR_PROTO; break; }
        coai__pb_close(out, b);
    }
    if (r == COAI_OK && (k < 0 || !seen)) r = COAI_ERR_PROTO;
    return coai__pb_finish(out, start, r);
}

/* the conversation id (5) replaced: every old one goes, the new one before field 5's place */
static int coai__run_body_conversation(coai_buf *out, coai__pbr *rr, const void *ctx)
{
    const coai_str *id = (const coai_str *)ctx;
    coai__pbf g;
    int j, put = 0;
    for (;;) {
        const pb_byte_t *gat = rr->end - rr->s.bytes_left;
        if ((j = coai__pb_next(rr, &g)) <= 0) break;
        if (g.num == 5 && g.wt != PB_WT_STRING) return -1;
        if (!put && g.num >= 5) {
            coai__pb_str(out, 5, *id);
            put = 1;
        }
        if (g.num != 5) coai__pb_copy_field(out, rr, gat);
    }
    if (j < 0) return -1;
    if (!put) coai__pb_str(out, 5, *id);
    return 0;
}

int coai_encode_run_request_conversation(coai_buf *out, const void *msg, size_t n,
                                         coai_str conversation_id)
{
    if (!conversation_id.len || !conversation_id.ptr || (!msg && n)) return COAI_ERR_INVALID;
    return coai__run_request_rewrite(out, msg, n, coai__run_body_conversation,
                                     &conversation_id);
}

/* the state (1) with its mode (10) set: an old mode goes; no state field: one first */
static int coai__run_body_state_mode(coai_buf *out, coai__pbr *rr, const void *ctx)
{
    uint32_t mode = *(const uint32_t *)ctx;
    coai__pbr sr;
    coai__pbf g, h;
    size_t st;
    int j, i, put = 0;
    for (;;) {
        const pb_byte_t *gat = rr->end - rr->s.bytes_left;
        if ((j = coai__pb_next(rr, &g)) <= 0) break;
        if (g.num != 1) {
            if (!put) {
                st = coai__pb_open(out, 1);
                coai__pb_u32(out, 10, mode);
                coai__pb_close(out, st);
                put = 1;
            }
            coai__pb_copy_field(out, rr, gat);
            continue;
        }
        if (g.wt != PB_WT_STRING || put) return -1;
        st = coai__pb_open(out, 1);
        coai__pbr_init(&sr, g.p, g.n);
        for (;;) {
            const pb_byte_t *hat = sr.end - sr.s.bytes_left;
            if ((i = coai__pb_next(&sr, &h)) <= 0) break;
            if (h.num != 10) coai__pb_copy_field(out, &sr, hat);   /* an old mode goes */
        }
        if (i < 0) return -1;
        coai__pb_u32(out, 10, mode);
        coai__pb_close(out, st);
        put = 1;
    }
    if (j < 0) return -1;
    if (!put) {
        st = coai__pb_open(out, 1);
        coai__pb_u32(out, 10, mode);
        coai__pb_close(out, st);
    }
    return 0;
}

int coai_encode_run_request_state_mode(coai_buf *out, const void *msg, size_t n, int mode)
{
    uint32_t m = (uint32_t)mode;
    if (mode <= 0 || (!msg && n)) return COAI_ERR_INVALID;
    return coai__run_request_rewrite(out, msg, n, coai__run_body_state_mode, &m);
}

/* Decode a fixed-shape leaf message with nanopb into d->u (already zeroed). */
static coai_result coai__leaf(coai__dec *d, const pb_msgdesc_t *desc, const coai__pbf *f)
{
    pb_istream_t s;
    coai_result r = coai__pb_scan(f->p, f->n);
    if (r) return r;
    d->desc = desc;
    d->lo = f->p;
    d->hi = f->p + f->n;
    d->cb_err = 0;
    s = pb_istream_from_buffer(f->p, f->n);
    if (!pb_decode(&s, desc, &d->u)) return d->cb_err ? (coai_result)d->cb_err : COAI_ERR_PROTO;
    return COAI_OK;
}

/* The bytes a callback's stream covers, if they lie inside the leaf (buffer streams
 * keep their read position in state); NULL when nanopb passed a copied scalar. */
static const pb_byte_t *coai__cb_bytes(const coai__dec *d, const pb_istream_t *s)
{
    uintptr_t at = (uintptr_t)s->state, lo = (uintptr_t)d->lo, hi = (uintptr_t)d->hi;
    if (at < lo || at > hi || s->bytes_left > hi - at) return NULL;
    return (const pb_byte_t *)s->state;
}

/* ToolCall: keep only its oneof field number (the first tag); never decode the
 * member, whose results can hold trees of any depth. */
static bool coai__tool_cb(pb_istream_t *s, const pb_field_t *field, void **arg)
{
    coai__dec *d = (coai__dec *)*arg;
    pb_wire_type_t wt;
    uint32_t tag;
    bool eof;
    (void)field;
    if (coai__cb_bytes(d, s) && s->bytes_left > 0) {
        if (!pb_decode_tag(s, &wt, &tag, &eof)) return false;
        d->tool = (int)tag;
    }
    return pb_read(s, NULL, s->bytes_left);
}

/* McpArgs.args entry {1: key, 2: Value}: record the spans; rendered after pb_decode. */
static bool coai__args_cb(pb_istream_t *s, const pb_field_t *field, void **arg)
{
    coai__dec *d = (coai__dec *)*arg;
    const pb_byte_t *p = coai__cb_bytes(d, s);
    coai__pbr r;
    coai__pbf f;
    coai__ent e;
    int k;
    (void)field;
    if (!p) return pb_read(s, NULL, s->bytes_left);   /* not length-delimited: ignored */
    memset(&e, 0, sizeof e);
    coai__pbr_init(&r, p, s->bytes_left);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1 && f.wt == PB_WT_STRING) { e.key = f.p; e.klen = f.n; }
        if (f.num == 2 && f.wt == PB_WT_STRING) { e.val = f.p; e.vlen = f.n; }
    }
    if (k < 0) return false;
    if (e.klen > 0) {
        if (d->nargs >= COAI_MAX_PB_FIELDS) { d->cb_err = COAI_ERR_TOO_BIG; return false; }
        if (d->nargs == d->cargs) {
            size_t nc = d->cargs ? d->cargs * 2 : 16;
            coai__ent *na = (coai__ent *)realloc(d->args, nc * sizeof *na);
            if (!na) { d->cb_err = COAI_ERR_NOMEM; return false; }
            d->args = na;
            d->cargs = nc;
        }
        e.seq = d->nargs;
        d->args[d->nargs++] = e;
    }
    return pb_read(s, NULL, s->bytes_left);
}

/* --- google.protobuf.Value -> JSON, as the original's JavaScript decoder does it --- */

static coai_result coai__json_object(coai__ent *e, size_t n, int depth, coai_buf *out);

/* TextDecoder drops one leading byte order mark. */
static void coai__strip_bom(const pb_byte_t **p, size_t *n)
{
    if (*n >= 3 && (*p)[0] == 0xef && (*p)[1] == 0xbb && (*p)[2] == 0xbf) { *p += 3; *n -= 3; }
}

/* The first recognised member of a Value: 1 varint null, 2 double, 3 string, 4 varint
 * bool, 5 Struct, 6 ListValue. 1 found, 0 none (undefined), negative coai_result. */
static int coai__value_pick(const pb_byte_t *p, size_t n, coai__pbf *pick)
{
    coai__pbr r;
    coai__pbf f;
    int k, found = 0;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (found) continue;
        if (((f.num == 1 || f.num == 4) && f.wt == PB_WT_VARINT) ||
            (f.num == 2 && f.wt == PB_WT_64BIT) ||
            ((f.num == 3 || f.num == 5 || f.num == 6) && f.wt == PB_WT_STRING)) {
            *pick = f;
            found = 1;
        }
    }
    return k < 0 ? COAI_ERR_PROTO : found;
}

static coai_result coai__json_struct(const pb_byte_t *p, size_t n, int depth, coai_buf *out)
{
    coai__pbr r, er;
    coai__pbf f, ef;
    coai__ent *e = NULL, *ne;
    size_t cnt = 0, cap = 0;
    coai_result res;
    int k, ek;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        coai__ent x;
        if (f.num != 1 || f.wt != PB_WT_STRING) continue;
        memset(&x, 0, sizeof x);
        coai__pbr_init(&er, f.p, f.n);
        while ((ek = coai__pb_next(&er, &ef)) > 0) {
            if (ef.num == 1 && ef.wt == PB_WT_STRING) { x.key = ef.p; x.klen = ef.n; }
            if (ef.num == 2 && ef.wt == PB_WT_STRING) { x.val = ef.p; x.vlen = ef.n; }
        }
        if (ek < 0) { k = -1; break; }
        if (x.klen == 0) continue;
        if (cnt >= COAI_MAX_PB_FIELDS) { free(e); return COAI_ERR_TOO_BIG; }
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            ne = (coai__ent *)realloc(e, cap * sizeof *e);
            if (!ne) { free(e); return COAI_ERR_NOMEM; }
            e = ne;
        }
        x.seq = cnt;
        e[cnt++] = x;
    }
    res = k < 0 ? COAI_ERR_PROTO : coai__json_object(e, cnt, depth, out);
    free(e);
    return res;
}

static coai_result coai__json_value(const coai__pbf *f, int depth, coai_buf *out);

static coai_result coai__json_list(const pb_byte_t *p, size_t n, int depth, coai_buf *out)
{
    coai__pbr r;
    coai__pbf f, pick;
    int k, got, any = 0;
    coai_result res;
    if (coai_buf_putc(out, '[')) return COAI_ERR_NOMEM;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num != 1 || f.wt != PB_WT_STRING) continue;
        if (any && coai_buf_putc(out, ',')) return COAI_ERR_NOMEM;
        any = 1;
        got = coai__value_pick(f.p, f.n, &pick);
        if (got < 0) return (coai_result)got;
        /* JSON.stringify writes an undefined array element as null */
        if (!got) { if (coai_buf_puts(out, "null")) return COAI_ERR_NOMEM; continue; }
        if ((res = coai__json_value(&pick, depth, out)) != COAI_OK) return res;
    }
    if (k < 0) return COAI_ERR_PROTO;
    return coai_buf_putc(out, ']') ? COAI_ERR_NOMEM : COAI_OK;
}

/* depth = number of JSON containers already open around this value. */
static coai_result coai__json_value(const coai__pbf *f, int depth, coai_buf *out)
{
    const pb_byte_t *p = f->p;
    size_t n = f->n;
    double d;
    switch (f->num) {
    case 1: return coai_buf_puts(out, "null") ? COAI_ERR_NOMEM : COAI_OK;
    case 2:
        memcpy(&d, &f->v, sizeof d);
        return coai_json_num_append(out, d) ? COAI_ERR_NOMEM : COAI_OK;
    case 3:
        coai__strip_bom(&p, &n);
        return coai_json_str_append(out, (const char *)p, n) ? COAI_ERR_NOMEM : COAI_OK;
    case 4: return coai_buf_puts(out, f->v == 1 ? "true" : "false") ? COAI_ERR_NOMEM : COAI_OK;
    default:
        if (depth >= COAI_MAX_VALUE_DEPTH) return COAI_ERR_PROTO;
        return f->num == 5 ? coai__json_struct(p, n, depth + 1, out)
                           : coai__json_list(p, n, depth + 1, out);
    }
}

/* Order of a JS object's keys: array indices ascending, then the other keys by the
 * position of their first assignment. Sort 1 groups equal keys by wire position. */
static int coai__ent_cmp_key(const void *a, const void *b)
{
    const coai__ent *x = (const coai__ent *)a, *y = (const coai__ent *)b;
    size_t m;
    int c;
    if (x->is_idx != y->is_idx) return x->is_idx ? -1 : 1;
    if (x->is_idx) {
        if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    } else {
        m = x->kjlen < y->kjlen ? x->kjlen : y->kjlen;
        c = memcmp(x->key, y->key, m);            /* key points at the JSON text here */
        if (c) return c;
        if (x->kjlen != y->kjlen) return x->kjlen < y->kjlen ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int coai__ent_same_key(const coai__ent *x, const coai__ent *y)
{
    return x->kjlen == y->kjlen && memcmp(x->key, y->key, x->kjlen) == 0;
}

static int coai__ent_cmp_pos(const void *a, const void *b)
{
    const coai__ent *x = (const coai__ent *)a, *y = (const coai__ent *)b;
    if (x->is_idx != y->is_idx) return x->is_idx ? -1 : 1;
    if (x->is_idx) return x->idx < y->idx ? -1 : x->idx > y->idx;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Write the object whose entries (non-empty raw keys, wire order) are e[0..n). */
static coai_result coai__json_object(coai__ent *e, size_t n, int depth, coai_buf *out)
{
    coai_buf kb = { 0 };
    coai_result res = COAI_OK;
    size_t i, j, k;
    int any = 0;
    if (depth > COAI_MAX_VALUE_DEPTH) return COAI_ERR_PROTO;
    /* Keys as JSON text (what the decoded JS string serialises to), so keys that decode
     * to the same string (e.g. two different invalid sequences -> U+FFFD) are equal. */
    for (i = 0; i < n; i++) {
        const pb_byte_t *kp = e[i].key;
        size_t kn = e[i].klen;
        coai__strip_bom(&kp, &kn);
        e[i].kofs = kb.len;
        if (coai_json_str_append(&kb, (const char *)kp, kn)) { res = COAI_ERR_NOMEM; goto done; }
        e[i].kjlen = kb.len - e[i].kofs;
    }
    for (i = 0, k = 0; i < n; i++) {
        const char *t = (const char *)kb.data + e[i].kofs + 1;   /* inside the quotes */
        size_t tl = e[i].kjlen - 2, d;
        uint64_t v = 0;
        /* "" (a BOM-only key) is dropped by `if (key)`; "__proto__" sets the prototype
         * instead of creating a member, so JSON.stringify never shows it. */
        if (tl == 0 || (tl == 9 && memcmp(t, "__proto__", 9) == 0)) continue;
        e[i].is_idx = 0;
        if (tl <= 10 && (tl == 1 || t[0] != '0')) {
            for (d = 0; d < tl && t[d] >= '0' && t[d] <= '9'; d++)
                v = v * 10 + (uint64_t)(t[d] - '0');
            if (d == tl && v <= 4294967294u) { e[i].is_idx = 1; e[i].idx = (uint32_t)v; }
        }
        e[i].key = (const pb_byte_t *)kb.data + e[i].kofs;   /* from here: the JSON key */
        e[k++] = e[i];
    }
    n = k;
    if (n > 1) {
        qsort(e, n, sizeof *e, coai__ent_cmp_key);
        /* one entry per key: the last assignment's value at the first one's place */
        for (i = 0, k = 0; i < n; i = j) {
            size_t first = e[i].seq;
            for (j = i + 1; j < n && coai__ent_same_key(&e[i], &e[j]); j++)
                ;
            e[j - 1].first = first;
            e[k++] = e[j - 1];
        }
        n = k;
        qsort(e, n, sizeof *e, coai__ent_cmp_pos);
    }
    if (coai_buf_putc(out, '{')) { res = COAI_ERR_NOMEM; goto done; }
    for (i = 0; i < n; i++) {
        coai__pbf pick;
        int got = e[i].val ? coai__value_pick(e[i].val, e[i].vlen, &pick) : 0;
        if (got < 0) { res = (coai_result)got; goto done; }
        if (!got) continue;                    /* undefined: JSON.stringify skips it */
        if ((any && coai_buf_putc(out, ',')) || coai_buf_append(out, e[i].key, e[i].kjlen) ||
            coai_buf_putc(out, ':')) { res = COAI_ERR_NOMEM; goto done; }
        any = 1;
        if ((res = coai__json_value(&pick, depth, out)) != COAI_OK) goto done;
    }
    if (coai_buf_putc(out, '}')) res = COAI_ERR_NOMEM;
done:
    coai_buf_free(&kb);
    return res;
}

/* --- the message walk --- */

static void coai__dec_release(coai__dec *d)
{
    if (d->desc) pb_release(d->desc, &d->u);
    d->desc = NULL;
    memset(&d->u, 0, sizeof d->u);
    free(d->exec_id);
    d->exec_id = NULL;
    d->exec_id_len = 0;
    free(d->raw);
    d->raw = NULL;
    d->nargs = 0;
    d->tool = 0;
    d->cb_err = 0;
}

static coai_str coai__bytes_view(const pb_bytes_array_t *b)
{
    coai_str r;
    r.ptr = b ? (const char *)b->bytes : "";
    r.len = b ? b->size : 0;
    return r;
}

static void coai__msg_clear(coai_msg *m)
{
    coai_str e = { "", 0 };
    void *priv = m->priv_;
    coai_buf scratch = m->scratch_;
    memset(m, 0, sizeof *m);
    m->priv_ = priv;
    m->scratch_ = scratch;
    m->text = m->call_id = m->blob_id = m->blob_data = m->raw = e;
    m->exec.exec_id = m->exec.command = m->exec.cwd = m->exec.path = e;
    m->exec.content = m->exec.pattern = m->exec.glob = m->exec.url = e;
    m->exec.mcp_name = m->exec.tool_name = m->exec.provider = e;
    m->exec.tool_call_id = m->exec.args_json = e;
    m->exec.description = m->exec.run_conversation_id = m->exec.run_request_id = e;
}

static coai_result coai__interaction(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 };
    int k, have = 0;
    coai_result res;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num < 1 || f.num > 17) continue;
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        mem = f;
        have = 1;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    switch (mem.num) {
    case 1:
        if ((res = coai__leaf(d, agent_v1_TextDeltaUpdate_fields, &mem)) != COAI_OK) return res;
        m->text = coai_str_c(d->u.text.text);
        m->kind = COAI_MSG_TEXT;
        break;
    case 4:
        res = coai__leaf(d, agent_v1_ThinkingDeltaUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->text = coai_str_c(d->u.thinking.text);
        m->kind = COAI_MSG_THINKING;
        break;
    case 5:
        res = coai__leaf(d, agent_v1_ThinkingCompletedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->value = d->u.thinking_done.thinking_duration_ms;
        m->kind = COAI_MSG_THINKING_DONE;
        break;
    case 8:
        if ((res = coai__leaf(d, agent_v1_TokenDeltaUpdate_fields, &mem)) != COAI_OK) return res;
        m->value = d->u.tokens.tokens;
        m->kind = COAI_MSG_TOKENS;
        break;
    case 2:
        d->u.started.tool_call.funcs.decode = coai__tool_cb;
        d->u.started.tool_call.arg = d;
        res = coai__leaf(d, agent_v1_ToolCallStartedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->call_id = coai_str_c(d->u.started.call_id);
        m->kind = COAI_MSG_TOOL_STARTED;
        break;
    case 3:
        d->u.completed.tool_call.funcs.decode = coai__tool_cb;
        d->u.completed.tool_call.arg = d;
        res = coai__leaf(d, agent_v1_ToolCallCompletedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->call_id = coai_str_c(d->u.completed.call_id);
        m->kind = COAI_MSG_TOOL_COMPLETED;
        break;
    case 7:
        d->u.partial.tool_call.funcs.decode = coai__tool_cb;
        d->u.partial.tool_call.arg = d;
        res = coai__leaf(d, agent_v1_PartialToolCallUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->call_id = coai_str_c(d->u.partial.call_id);
        m->text = coai_str_c(d->u.partial.args_text_delta);
        m->kind = COAI_MSG_TOOL_PARTIAL;
        break;
    case 13: m->kind = COAI_MSG_HEARTBEAT; break;
    case 14:
        if ((res = coai__leaf(d, agent_v1_TurnEndedUpdate_fields, &mem)) != COAI_OK) return res;
        m->turn.input = d->u.turn.input_tokens;
        m->turn.output = d->u.turn.output_tokens;
        m->turn.cache_read = d->u.turn.cache_read_tokens;
        m->turn.cache_write = d->u.turn.cache_write_tokens;
        m->turn.reasoning = d->u.turn.reasoning_tokens;
        m->turn.present = coai__pb_scan_has(mem.p, mem.n, 1, 5);
        m->kind = COAI_MSG_TURN_ENDED;
        break;
    case 17:
        res = coai__leaf(d, agent_v1_StepCompletedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->value2 = (int64_t)d->u.step_done.step_id;
        m->value3 = d->u.step_done.step_duration_ms;
        m->value = 17;
        m->kind = COAI_MSG_STEP;
        break;
    case 16:
        if ((res = coai__leaf(d, agent_v1_StepStartedUpdate_fields, &mem)) != COAI_OK) return res;
        m->value2 = (int64_t)d->u.step.step_id;
        m->value = 16;
        m->kind = COAI_MSG_STEP;
        break;
    default:                          /* 6, 9, 10, 11, 12, 15: informational */
        m->value = mem.num;
        m->kind = COAI_MSG_STEP;
        break;
    }
    m->tool = d->tool;
    return COAI_OK;
}

/* Every length-delimited field of ExecServerMessage but the envelope's (15 exec_id,
 * 19 span_context; 1 id and 55 are varints) is an args member of the oneof: 2 for the
 * members we decode (a wrong wire type there is malformed), 1 for the others. */
static int coai__exec_member(uint32_t num)
{
    switch (num) {
    case 2: case 3: case 4: case 5: case 7: case 8: case 9: case 10: case 11: case 14:
    case 16: case 17: case 18: case 20: case 21: case 22: case 36:
        return 2;
    }
    return num >= 2 && num != 15 && num != 19 && num != 55;
}

const char *coai_exec_kind_name(int kind)
{
    static const char *const low[] = {   /* 2..22: proto/agent.proto */
        "shell_args", "write_args", "delete_args", "grep_args", NULL, "read_args", "ls_args",
        "diagnostics_args", "request_context_args", "mcp_args", NULL, NULL,
        "shell_stream_args", NULL, "background_shell_spawn_args",
        "list_mcp_resources_exec_args", "read_mcp_resource_exec_args", NULL, "fetch_args",
        "record_screen_args", "computer_use_args" };
    static const char *const high[] = {  /* 36..54: Cursor's 2026 clients */
        "mcp_state_exec_args", NULL, "smart_mode_classifier_args", NULL,
        "canvas_diagnostics_args", "shell_allowlist_precheck_args",
        "mcp_allowlist_precheck_args", "web_fetch_allowlist_precheck_args",
        "git_diff_request", "pi_read_args", "pi_bash_args", "pi_edit_args", "pi_write_args",
        "pi_grep_args", "pi_find_args", "pi_ls_args", "mini_swe_agent_bash_args",
        "conversation_search", "agent_store_conflict" };
    if (kind >= 2 && kind <= 22) return low[kind - 2];
    if (kind == COAI_EXEC_SUBAGENT) return "subagent_args";
    if (kind >= 36 && kind <= 54) return high[kind - 36];
    return NULL;
}

int coai_exec_is_native_tool(int kind)
{
    switch (kind) {
    case COAI_EXEC_SHELL: case COAI_EXEC_WRITE: case COAI_EXEC_DELETE: case COAI_EXEC_GREP:
    case COAI_EXEC_READ: case COAI_EXEC_LS: case COAI_EXEC_DIAGNOSTICS:
    case COAI_EXEC_SHELL_STREAM: case COAI_EXEC_BACKGROUND_SHELL: case COAI_EXEC_FETCH:
    case COAI_EXEC_RECORD_SCREEN: case COAI_EXEC_COMPUTER_USE: case COAI_EXEC_SUBAGENT:
        return 1;
    default:
        return kind >= 45 && kind <= 52;    /* pi_read .. pi_ls, mini_swe_agent_bash (N5) */
    }
}

int coai_tool_mode_parse(coai_str s, coai_tool_mode *mode)
{
    if (!s.ptr || !s.len) { *mode = COAI_TOOLS_CLIENT; return 0; }
    if (s.len == 6 && memcmp(s.ptr, "client", 6) == 0) { *mode = COAI_TOOLS_CLIENT; return 0; }
    if (s.len == 6 && memcmp(s.ptr, "cursor", 6) == 0) { *mode = COAI_TOOLS_CURSOR; return 0; }
    return -1;
}

int coai_run_tools_header(coai_tool_mode mode, size_t tool_count, coai_str *name,
                          coai_str *value)
{
    /* the caller-owned value a peer sends: MCP calls, and the MCP tool listing the
     * model may use to see them */
    int on = mode == COAI_TOOLS_CLIENT && tool_count > 0;
    if (name) *name = coai_str_c(on ? "x-cursor-agent-allowed-tools" : "");
    if (value) *value = coai_str_c(on ? "mcp_tool_call,get_mcp_tools_tool_call" : "");
    return on;
}

unsigned coai_exec_result_field(int kind)
{
    if (kind < 2 || kind > 54) return 0;
    if (kind >= 45 && kind <= 51) return (unsigned)kind + 1;
    if (kind == 52) return 55;
    return (unsigned)kind;
}

static coai_result coai__exec(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 }, xid = { 0 };
    coai_exec *x = &m->exec;
    int k, have = 0, have_xid = 0;
    coai_result res = COAI_OK;
    uint32_t id = 0;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            id = (uint32_t)f.v;
        } else if (f.num == 15) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            xid = f;
            have_xid = 1;
        } else if (f.num == 55) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            x->accept_hook_contexts = f.v != 0;
        } else if (coai__exec_member(f.num)) {
            if (f.wt != PB_WT_STRING) {
                if (coai__exec_member(f.num) == 2) return COAI_ERR_PROTO;
                continue;
            }
            mem = f;
            have = 1;
        }
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;        /* no exec we know: nothing to act on */
    switch (mem.num) {
    case COAI_EXEC_SHELL:
    case COAI_EXEC_SHELL_STREAM:
        if ((res = coai__leaf(d, agent_v1_ShellArgs_fields, &mem)) != COAI_OK) return res;
        x->command = coai_str_c(d->u.shell.command);
        x->cwd = coai_str_c(d->u.shell.working_directory);
        x->tool_call_id = coai_str_c(d->u.shell.tool_call_id);
        x->timeout = d->u.shell.timeout;
        x->timeout_behavior = d->u.shell.timeout_behavior;
        x->hard_timeout_ms = d->u.shell.hard_timeout;
        x->description = coai_str_c(d->u.shell.description);
        x->close_stdin = d->u.shell.close_stdin;
        x->run_conversation_id = coai_str_c(d->u.shell.conversation_id);
        x->run_request_id = coai_str_c(d->u.shell.request_id);
        break;
    case COAI_EXEC_MCP_STATE:
        if ((res = coai__leaf(d, agent_v1_McpStateExecArgs_fields, &mem)) != COAI_OK) return res;
        x->server_ids = d->u.mcp_state.server_identifiers;
        x->server_id_count = d->u.mcp_state.server_identifiers
                             ? d->u.mcp_state.server_identifiers_count : 0;
        break;
    case COAI_EXEC_WRITE:
        if ((res = coai__leaf(d, agent_v1_WriteArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.write.path);
        x->has_path = d->u.write.path != NULL;
        x->content = coai_str_c(d->u.write.file_text);
        x->tool_call_id = coai_str_c(d->u.write.tool_call_id);
        break;
    case COAI_EXEC_DELETE:
        if ((res = coai__leaf(d, agent_v1_DeleteArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.del.path);
        x->has_path = d->u.del.path != NULL;
        x->tool_call_id = coai_str_c(d->u.del.tool_call_id);
        break;
    case COAI_EXEC_GREP:
        if ((res = coai__leaf(d, agent_v1_GrepArgs_fields, &mem)) != COAI_OK) return res;
        x->pattern = coai_str_c(d->u.grep.pattern);
        x->path = coai_str_c(d->u.grep.path);
        x->has_path = d->u.grep.path != NULL;
        x->glob = coai_str_c(d->u.grep.glob);
        x->tool_call_id = coai_str_c(d->u.grep.tool_call_id);
        break;
    case COAI_EXEC_READ:
        if ((res = coai__leaf(d, agent_v1_ReadArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.read.path);
        x->has_path = d->u.read.path != NULL;
        x->tool_call_id = coai_str_c(d->u.read.tool_call_id);
        break;
    case COAI_EXEC_LS:
        if ((res = coai__leaf(d, agent_v1_LsArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.ls.path);
        x->has_path = d->u.ls.path != NULL;
        x->tool_call_id = coai_str_c(d->u.ls.tool_call_id);
        break;
    case COAI_EXEC_FETCH:
        if ((res = coai__leaf(d, agent_v1_FetchArgs_fields, &mem)) != COAI_OK) return res;
        x->url = coai_str_c(d->u.fetch.url);
        x->tool_call_id = coai_str_c(d->u.fetch.tool_call_id);
        break;
    case COAI_EXEC_MCP:
        d->u.mcp.args.funcs.decode = coai__args_cb;
        d->u.mcp.args.arg = d;
        if ((res = coai__leaf(d, agent_v1_McpArgs_fields, &mem)) != COAI_OK) return res;
        x->mcp_name = coai_str_c(d->u.mcp.name);
        x->tool_call_id = coai_str_c(d->u.mcp.tool_call_id);
        x->provider = coai_str_c(d->u.mcp.provider_identifier);
        x->tool_name = coai_str_c(d->u.mcp.tool_name);
        res = coai__json_object(d->args, d->nargs, 1, &m->scratch_);
        if (res != COAI_OK) return res;
        x->args_json.ptr = (const char *)m->scratch_.data;
        x->args_json.len = m->scratch_.len;
        break;
    default:                          /* request_context, diagnostics, ...: kind only */
        break;
    }
    if (have_xid && xid.n > 0) {
        d->exec_id = (char *)malloc(xid.n + 1);
        if (!d->exec_id) return COAI_ERR_NOMEM;
        memcpy(d->exec_id, xid.p, xid.n);
        d->exec_id[xid.n] = 0;
        d->exec_id_len = xid.n;
        x->exec_id.ptr = d->exec_id;
        x->exec_id.len = xid.n;
    }
    x->kind = (coai_exec_kind)mem.num;
    x->id = id;
    m->kind = COAI_MSG_EXEC;
    return COAI_OK;
}

/* Keep a copy of p[0..n) as m->raw (it must outlive the frame buffer). */
static coai_result coai__raw_copy(coai_msg *m, coai__dec *d, const pb_byte_t *p, size_t n)
{
    d->raw = (unsigned char *)malloc(n ? n : 1);
    if (!d->raw) return COAI_ERR_NOMEM;
    if (n) memcpy(d->raw, p, n);
    m->raw.ptr = (const char *)d->raw;
    m->raw.len = n;
    return COAI_OK;
}

static coai_result coai__kv(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 }, meta = { 0 };
    int k, have = 0;
    coai_result res;
    uint32_t id = 0;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            id = (uint32_t)f.v;
        } else if (f.num == 2 || f.num == 3) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            mem = f;
            have = 1;
        } else if (f.num == 4) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            meta = f;
            m->has_raw = 1;
        }
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    if (m->has_raw && (res = coai__raw_copy(m, d, meta.p, meta.n)) != COAI_OK) return res;
    if (mem.num == 2) {
        if ((res = coai__leaf(d, agent_v1_GetBlobArgs_fields, &mem)) != COAI_OK) return res;
        m->blob_id = coai__bytes_view(d->u.get_blob.blob_id);
        m->kind = COAI_MSG_KV_GET;
    } else {
        if ((res = coai__leaf(d, agent_v1_SetBlobArgs_fields, &mem)) != COAI_OK) return res;
        m->blob_id = coai__bytes_view(d->u.set_blob.blob_id);
        m->blob_data = coai__bytes_view(d->u.set_blob.blob_data);
        m->no_blob_data = d->u.set_blob.blob_data == NULL;
        m->kind = COAI_MSG_KV_SET;
    }
    m->id = id;
    return COAI_OK;
}

static coai_result coai__checkpoint(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f;
    pb_istream_t s;
    coai_result res;
    int k;
    d->desc = agent_v1_ConversationTokenDetails_fields;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num != 5) continue;     /* the rest is conversation state we do not keep */
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        if ((res = coai__pb_scan(f.p, f.n)) != COAI_OK) return res;
        /* a repeated sub-message merges into the previous one */
        s = pb_istream_from_buffer(f.p, f.n);
        if (!pb_decode_ex(&s, agent_v1_ConversationTokenDetails_fields, &d->u.token_details,
                          PB_DECODE_NOINIT))
            return COAI_ERR_PROTO;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if ((res = coai__raw_copy(m, d, top->p, top->n)) != COAI_OK) return res;
    m->value = d->u.token_details.used_tokens;
    m->value2 = d->u.token_details.max_tokens;
    m->kind = COAI_MSG_CHECKPOINT;
    return COAI_OK;
}

static coai_result coai__control(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 };
    int k, have = 0;
    coai_result res;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num != 1) continue;
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        mem = f;
        have = 1;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    if ((res = coai__leaf(d, agent_v1_ExecServerAbort_fields, &mem)) != COAI_OK) return res;
    m->id = d->u.abort.id;
    m->kind = COAI_MSG_EXEC_ABORT;
    return COAI_OK;
}

static coai_result coai__query(coai_msg *m, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f;
    int k;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            m->id = (uint32_t)f.v;
        } else if (f.num >= 2 && f.num <= 63) {
            /* 2-9 and 12 are known; any other kind is answered the same way */
            if (f.wt != PB_WT_STRING) {
                if (f.num <= 12) return COAI_ERR_PROTO;
                continue;
            }
            m->query = (int)f.num;
        }
    }
    if (k < 0) return COAI_ERR_PROTO;
    m->kind = COAI_MSG_QUERY;
    return COAI_OK;
}

/* The common case, a bare text or thinking delta ({1: {1|4: {1: text}}}, one field at
 * each level), decoded without nanopb or malloc: a stream is mostly these. Any other
 * shape returns 0 and takes the general path, which gives the same result for this one.
 * Like the general path (nanopb strings), the text ends at an embedded NUL. */
static int coai__fast_delta(coai_msg *m, const pb_byte_t *p, size_t n)
{
    coai__pbr r;
    coai__pbf f, g;
    int level, which = 0;
    const pb_byte_t *nul;
    for (level = 0; level < 3; level++) {
        coai__pbr_init(&r, p, n);
        if (coai__pb_next(&r, &f) <= 0 || f.wt != PB_WT_STRING) return 0;
        if (f.num != 1 && !(level == 1 && f.num == 4)) return 0;
        if (coai__pb_next(&r, &g) != 0) return 0;       /* a second field, or bad bytes */
        if (level == 1) which = (int)f.num;
        p = f.p;
        n = f.n;
    }
    nul = n ? (const pb_byte_t *)memchr(p, 0, n) : NULL;
    if (nul) n = (size_t)(nul - p);
    if (coai_buf_append(&m->scratch_, p, n)) return 0;
    m->text.ptr = (const char *)m->scratch_.data;
    m->text.len = n;
    m->kind = which == 1 ? COAI_MSG_TEXT : COAI_MSG_THINKING;
    return 1;
}

coai_result coai_msg_decode(coai_msg *m, const void *p, size_t n)
{
    coai__dec *d = (coai__dec *)m->priv_;
    coai__pbr r;
    coai__pbf f, top = { 0 };
    int k, have = 0;
    coai_result res = COAI_OK;
    if (d) coai__dec_release(d);
    coai_buf_reset(&m->scratch_);
    coai__msg_clear(m);
    if (n == 0) return COAI_OK;
    if (!p) return COAI_ERR_STATE;
    if (coai__fast_delta(m, (const pb_byte_t *)p, n)) return COAI_OK;
    if (!d) {
        d = (coai__dec *)calloc(1, sizeof *d);
        if (!d) return COAI_ERR_NOMEM;
        m->priv_ = d;
    }
    coai__pbr_init(&r, (const pb_byte_t *)p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num < 1 || f.num > 7 || f.num == 6) continue;
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        top = f;
        have = 1;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    switch (top.num) {
    case 1: res = coai__interaction(m, d, &top); break;
    case 2: res = coai__exec(m, d, &top); break;
    case 3: res = coai__checkpoint(m, d, &top); break;
    case 4: res = coai__kv(m, d, &top); break;
    case 5: res = coai__control(m, d, &top); break;
    default: res = coai__query(m, &top); break;
    }
    if (res != COAI_OK) {
        coai__dec_release(d);
        coai_buf_reset(&m->scratch_);
        coai__msg_clear(m);
    }
    return res;
}

void coai_msg_free(coai_msg *m)
{
    coai__dec *d = (coai__dec *)m->priv_;
    if (d) {
        coai__dec_release(d);
        free(d->args);
        free(d);
    }
    coai_buf_free(&m->scratch_);
    memset(m, 0, sizeof *m);
}
/* --- what this version does not know (coai_msg_unknowns, coai_pb_shape) --- */

/* The messages coai_msg_decode reads, by descriptor: their names, and what a field the
 * schema does not declare is called in each (a oneof's members are its "kinds"). Only
 * these are walked for coai_msg_unknowns; coai_pb_shape names them. */
typedef struct coai__known {
    const pb_msgdesc_t *desc;
    const char *name;
    const char *oneof;            /* what an undeclared length-delimited field is, or NULL */
    int (*extra)(uint32_t num);   /* undeclared numbers the product handles anyway */
} coai__known;

/* Exec kinds the decoder answers or names without a schema entry (28, 38-54:
 * Cursor's 2026 clients) and the interaction queries answered by hand (10, 11, 13, 14). */
static int coai__exec_extra(uint32_t num) { return coai_exec_kind_name((int)num) != NULL; }
static int coai__query_extra(uint32_t num)
{
    return num == 10 || num == 11 || num == 13 || num == 14;
}

static const coai__known coai__known_msgs[] = {
    { agent_v1_AgentServerMessage_fields, "AgentServerMessage", "message kind", NULL },
    { agent_v1_InteractionUpdate_fields, "InteractionUpdate", "update kind", NULL },
    { agent_v1_TextDeltaUpdate_fields, "TextDeltaUpdate", NULL, NULL },
    { agent_v1_ThinkingDeltaUpdate_fields, "ThinkingDeltaUpdate", NULL, NULL },
    { agent_v1_ThinkingCompletedUpdate_fields, "ThinkingCompletedUpdate", NULL, NULL },
    { agent_v1_TokenDeltaUpdate_fields, "TokenDeltaUpdate", NULL, NULL },
    { agent_v1_ToolCallStartedUpdate_fields, "ToolCallStartedUpdate", NULL, NULL },
    { agent_v1_ToolCallCompletedUpdate_fields, "ToolCallCompletedUpdate", NULL, NULL },
    { agent_v1_PartialToolCallUpdate_fields, "PartialToolCallUpdate", NULL, NULL },
    { agent_v1_ToolCall_fields, "ToolCall", "tool call kind", NULL },
    { agent_v1_TurnEndedUpdate_fields, "TurnEndedUpdate", NULL, NULL },
    { agent_v1_StepStartedUpdate_fields, "StepStartedUpdate", NULL, NULL },
    { agent_v1_StepCompletedUpdate_fields, "StepCompletedUpdate", NULL, NULL },
    { agent_v1_ExecServerMessage_fields, "ExecServerMessage", "exec kind", coai__exec_extra },
    { agent_v1_ShellArgs_fields, "ShellArgs", NULL, NULL },
    { agent_v1_WriteArgs_fields, "WriteArgs", NULL, NULL },
    { agent_v1_DeleteArgs_fields, "DeleteArgs", NULL, NULL },
    { agent_v1_GrepArgs_fields, "GrepArgs", NULL, NULL },
    { agent_v1_ReadArgs_fields, "ReadArgs", NULL, NULL },
    { agent_v1_LsArgs_fields, "LsArgs", NULL, NULL },
    { agent_v1_McpArgs_fields, "McpArgs", NULL, NULL },
    { agent_v1_FetchArgs_fields, "FetchArgs", NULL, NULL },
    { agent_v1_McpStateExecArgs_fields, "McpStateExecArgs", NULL, NULL },
    { agent_v1_ConversationStateStructure_fields, "ConversationStateStructure", NULL, NULL },
    { agent_v1_ConversationTokenDetails_fields, "ConversationTokenDetails", NULL, NULL },
    { agent_v1_KvServerMessage_fields, "KvServerMessage", "kv kind", NULL },
    { agent_v1_GetBlobArgs_fields, "GetBlobArgs", NULL, NULL },
    { agent_v1_SetBlobArgs_fields, "SetBlobArgs", NULL, NULL },
    { agent_v1_ExecServerControlMessage_fields, "ExecServerControlMessage", "control kind",
      NULL },
    { agent_v1_ExecServerAbort_fields, "ExecServerAbort", NULL, NULL },
    { agent_v1_InteractionQuery_fields, "InteractionQuery", "query kind", coai__query_extra },
    /* client messages: named in a capture's shapes only */
    { agent_v1_AgentClientMessage_fields, "AgentClientMessage", NULL, NULL },
    { agent_v1_AgentRunRequest_fields, "AgentRunRequest", NULL, NULL },
    { agent_v1_ConversationAction_fields, "ConversationAction", NULL, NULL },
    { agent_v1_ExecClientMessage_fields, "ExecClientMessage", NULL, NULL },
    { agent_v1_ExecClientControlMessage_fields, "ExecClientControlMessage", NULL, NULL },
    { agent_v1_KvClientMessage_fields, "KvClientMessage", NULL, NULL },
    { agent_v1_InteractionResponse_fields, "InteractionResponse", NULL, NULL },
};
#define COAI__KNOWN_SERVER 31     /* the entries above the client ones */

static const coai__known *coai__known_of(const pb_msgdesc_t *desc, size_t upto)
{
    size_t i;
    for (i = 0; i < upto; i++)
        if (coai__known_msgs[i].desc == desc) return &coai__known_msgs[i];
    return NULL;
}

/* The declared field numbered num in desc: 1 and *it set, or 0. */
static int coai__field_of(const pb_msgdesc_t *desc, uint32_t num, pb_field_iter_t *it)
{
    return pb_field_iter_begin(it, desc, NULL) && pb_field_iter_find(it, num);
}

/* The wire type a declared field takes; a repeated scalar may also come packed (2). */
static int coai__wire_ok(const pb_field_iter_t *it, int wt)
{
    int want;
    switch (PB_LTYPE(it->type)) {
    case PB_LTYPE_FIXED32: want = PB_WT_32BIT; break;
    case PB_LTYPE_FIXED64: want = PB_WT_64BIT; break;
    case PB_LTYPE_BYTES: case PB_LTYPE_STRING: case PB_LTYPE_SUBMESSAGE:
    case PB_LTYPE_SUBMSG_W_CB: case PB_LTYPE_FIXED_LENGTH_BYTES: want = PB_WT_STRING; break;
    default: want = PB_WT_VARINT; break;
    }
    if (wt == want) return -1;
    if (wt == PB_WT_STRING && PB_HTYPE(it->type) == PB_HTYPE_REPEATED) return -1;
    return want;
}

typedef struct coai__unk_ctx {
    coai_unknown *out;
    size_t max, count;
} coai__unk_ctx;

static void coai__unk_add(coai__unk_ctx *c, const char *message, const char *what,
                          uint32_t field, int wire, int expected)
{
    size_t i, k = c->count < c->max ? c->count : c->max;
    for (i = 0; i < k; i++)
        if (c->out[i].message == message && c->out[i].what == what
            && c->out[i].field == field && c->out[i].wire == wire)
            return;
    if (c->count < c->max) {
        coai_unknown *u = &c->out[c->count];
        memset(u, 0, sizeof *u);
        u->message = message;
        u->what = what;
        u->field = field;
        u->wire = wire;
        u->expected_wire = expected;
    }
    c->count++;
}

static void coai__unk_walk(coai__unk_ctx *c, const coai__known *k, const pb_byte_t *p,
                           size_t n, int depth)
{
    coai__pbr r;
    coai__pbf f;
    pb_field_iter_t it;
    /* one iterator per message: pb_field_iter_find goes on from where it stopped, so
     * fields in declaration order cost a step each */
    int any = pb_field_iter_begin(&it, k->desc, NULL);
    coai__pbr_init(&r, p, n);
    while (coai__pb_next(&r, &f) > 0) {
        const coai__known *sub;
        int exp;
        if (!any || !pb_field_iter_find(&it, f.num)) {
            if (k->extra && k->extra(f.num)) continue;
            coai__unk_add(c, k->name, k->oneof && f.wt == PB_WT_STRING ? k->oneof : "field",
                          f.num, (int)f.wt, -1);
            continue;
        }
        if ((exp = coai__wire_ok(&it, (int)f.wt)) >= 0) {
            coai__unk_add(c, k->name, "field", f.num, (int)f.wt, exp);
            continue;
        }
        if (f.wt != PB_WT_STRING || !it.submsg_desc || depth >= 16) continue;
        sub = coai__known_of(it.submsg_desc, COAI__KNOWN_SERVER);
        if (sub) coai__unk_walk(c, sub, f.p, f.n, depth + 1);
    }
}

/* 1 for the message most of a stream is, a text or thinking delta with one field at each
 * level ({1: {1|4: {1: text}}}, what coai__fast_delta takes): all of it is declared. */
static int coai__unk_plain_delta(const pb_byte_t *p, size_t n)
{
    int level;
    for (level = 0; level < 3; level++) {
        size_t i = 1, len = 0;
        unsigned shift = 0;
        if (n < 2 || (p[0] != 0x0a && !(level == 1 && p[0] == 0x22))) return 0;
        do {                                /* the length: it must end exactly at n */
            if (i >= n || shift > 28) return 0;
            len |= (size_t)(p[i] & 0x7f) << shift;
            shift += 7;
        } while (p[i++] & 0x80);
        if (len != n - i) return 0;
        p += i;
        n = len;
    }
    return 1;
}

size_t coai_msg_unknowns(const void *p, size_t n, coai_unknown *out, size_t max)
{
    coai__unk_ctx c;
    c.out = out;
    c.max = out ? max : 0;
    c.count = 0;
    if (!p || !n || coai__unk_plain_delta((const pb_byte_t *)p, n)) return 0;
    coai__unk_walk(&c, &coai__known_msgs[0], (const pb_byte_t *)p, n, 0);
    return c.count;
}

size_t coai_status_unknowns(const coai_status *st, coai_unknown *out, size_t max)
{
    coai__unk_ctx c;
    c.out = out;
    c.max = out ? max : 0;
    c.count = 0;
    if (!st) return 0;
    if (st->code < 0 || st->code > 16)
        coai__unk_add(&c, "error", "code", (uint32_t)st->code, -1, -1);
    if (st->unknown_code[0]) {
        coai__unk_add(&c, "error", "code", 0, -1, -1);
        if (c.count <= c.max)
            coai__ascii_note(c.out[c.count - 1].name, sizeof c.out[0].name, st->unknown_code);
    }
    if (st->error && !coai_error_details_name(st->error))
        coai__unk_add(&c, "error", "ErrorDetails.error", (uint32_t)st->error, -1, -1);
    if (st->unknown_detail[0]) {
        coai__unk_add(&c, "error", "detail type", 0, -1, -1);
        if (c.count <= c.max)
            coai__ascii_note(c.out[c.count - 1].name, sizeof c.out[0].name,
                             st->unknown_detail);
    }
    return c.count;
}

/* Whether an undeclared length-delimited payload reads as text: valid printable UTF-8
 * (tab, LF and CR allowed). Such a payload is never opened, even when it also parses as
 * protobuf ("hi" does: field 13, varint 0x69). */
static int coai__looks_text(const pb_byte_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' && p[i] != '\r') return 0;
    return coai_utf8_valid_prefix((const char *)p, n) == n;
}

typedef struct coai__shape_ctx {
    coai_buf *out;
    size_t start, max;
    int cut;
} coai__shape_ctx;

static int coai__shape_room(coai__shape_ctx *c)
{
    if (c->cut) return 0;
    if (c->max && c->out->len - c->start > c->max) {
        coai_buf_puts(c->out, "...");
        c->cut = 1;
        return 0;
    }
    return 1;
}

/* 1: the bytes are a well-formed message at every level that would be opened. */
static int coai__shape_parses(const pb_byte_t *p, size_t n)
{
    coai__pbr r;
    coai__pbf f;
    int k;
    size_t count = 0;
    if (!n) return 0;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0)
        if (++count > COAI_MAX_PB_FIELDS) return 0;
    return k == 0;
}

static coai_result coai__shape(coai__shape_ctx *c, const pb_msgdesc_t *desc,
                               const pb_byte_t *p, size_t n, int depth)
{
    coai__pbr r;
    coai__pbf f;
    pb_field_iter_t it;
    int k, first = 1;
    const coai__known *kn = desc ? coai__known_of(desc, sizeof coai__known_msgs
                                                   / sizeof coai__known_msgs[0]) : NULL;
    if (kn) coai_buf_puts(c->out, kn->name);
    coai_buf_putc(c->out, '{');
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        int declared = desc && coai__field_of(desc, f.num, &it);
        if (!coai__shape_room(c)) return COAI_OK;
        coai_buf_printf(c->out, "%s%s%lu/%d", first ? "" : " ", declared ? "" : "!",
                        (unsigned long)f.num, (int)f.wt);
        first = 0;
        if (f.wt != PB_WT_STRING) continue;
        coai_buf_printf(c->out, "[%lu]", (unsigned long)f.n);
        if (depth >= 24 || !f.n) continue;
        if (declared) {
            if (it.submsg_desc && coai__wire_ok(&it, (int)f.wt) < 0
                && coai__shape_parses(f.p, f.n))
                coai__shape(c, it.submsg_desc, f.p, f.n, depth + 1);
        } else if (coai__shape_parses(f.p, f.n) && !coai__looks_text(f.p, f.n)) {
            coai__shape(c, NULL, f.p, f.n, depth + 1);
        }
        if (c->cut) return COAI_OK;
    }
    if (k < 0) {
        coai_buf_puts(c->out, first ? "?" : " ?");
        coai_buf_putc(c->out, '}');
        return COAI_ERR_PROTO;
    }
    coai_buf_putc(c->out, '}');
    return COAI_OK;
}

coai_result coai_pb_shape(coai_buf *out, const char *message, const void *p, size_t n,
                          size_t max_out)
{
    coai__shape_ctx c;
    const pb_msgdesc_t *desc = NULL;
    coai_result r;
    size_t i;
    if (!out || (!p && n)) return COAI_ERR_INVALID;
    for (i = 0; message && i < sizeof coai__known_msgs / sizeof coai__known_msgs[0]; i++)
        if (strcmp(coai__known_msgs[i].name, message) == 0) desc = coai__known_msgs[i].desc;
    c.out = out;
    c.start = out->len;
    c.max = max_out;
    c.cut = 0;
    r = coai__shape(&c, desc, (const pb_byte_t *)p, n, 0);
    if (out->err) return COAI_ERR_NOMEM;
    return r;
}
/* PART:DECODE impl end */

/* ======================================================================== */
/* PART:HTTP impl                                                           */
/* ======================================================================== */

static int coai__http_tchar(unsigned char c)
{
    /* RFC 9110 tchar: ALPHA / DIGIT / "!#$%&'*+-.^_`|~" */
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int coai__http_lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Case-insensitive equality of a view and a lowercase literal. */
static int coai__http_ieq(const char *p, size_t n, const char *lit)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!lit[i] || coai__http_lower((unsigned char)p[i]) != (unsigned char)lit[i]) return 0;
    return lit[n] == 0;
}

static coai_str coai__http_str(const char *p, size_t n)
{
    coai_str s;
    s.ptr = p;
    s.len = n;
    return s;
}

static coai_str coai__http_trim(coai_str s)
{
    while (s.len && (s.ptr[0] == ' ' || s.ptr[0] == '\t')) { s.ptr++; s.len--; }
    while (s.len && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t')) s.len--;
    return s;
}

/* One line from buf[*pos..n). 1: content is [*pos, *end), *pos moves past the
 * terminator; 0: need more bytes; -1: bare LF (unless allowed) or CR without LF;
 * -2: the content is longer than max. */
static int coai__http_line(const char *buf, size_t n, size_t *pos, size_t *end, size_t max,
                           int bare_lf)
{
    size_t s = *pos, i;
    for (i = s; i < n; i++) {
        if (buf[i] == '\r' || buf[i] == '\n') break;
        if (i - s >= max) return -2;
    }
    if (i == n) return 0;
    if (buf[i] == '\n') {
        if (!bare_lf) return -1;
        *end = i;
        *pos = i + 1;
        return 1;
    }
    if (i + 1 >= n) return 0;
    if (buf[i + 1] != '\n') return -1;
    *end = i;
    *pos = i + 2;
    return 1;
}

/* Split one header line [s, e) into h. strict: CTL/DEL in the value is an error
 * (else only NUL is). Returns 0 or -1. */
static int coai__http_field(const char *buf, size_t s, size_t e, int strict, coai_http_header *h)
{
    size_t i = s, j;
    coai_str v;
    while (i < e && coai__http_tchar((unsigned char)buf[i])) i++;
    /* Also rejects obs-fold and "name :" (whitespace is not a tchar). */
    if (i == s || i == e || buf[i] != ':') return -1;
    v = coai__http_trim(coai__http_str(buf + i + 1, e - i - 1));
    for (j = 0; j < v.len; j++) {
        unsigned char c = (unsigned char)v.ptr[j];
        if (strict ? ((c < 0x20 && c != '\t') || c == 0x7f) : c == 0) return -1;
    }
    h->name = coai__http_str(buf + s, i - s);
    h->value = v;
    return 0;
}

/* Content-Length value: 1*DIGIT, or with list_ok a list of identical values
 * ("5, 5"). Returns the value or -1. */
static int64_t coai__http_clen(coai_str v, int list_ok)
{
    int64_t val = -1, cur;
    size_t i = 0;
    for (;;) {
        size_t start = i;
        cur = 0;
        while (i < v.len && v.ptr[i] >= '0' && v.ptr[i] <= '9') {
            int d = v.ptr[i] - '0';
            if (cur > (INT64_MAX - d) / 10) return -1;
            cur = cur * 10 + d;
            i++;
        }
        if (i == start || (val >= 0 && cur != val)) return -1;
        val = cur;
        while (i < v.len && (v.ptr[i] == ' ' || v.ptr[i] == '\t')) i++;
        if (i == v.len) return val;
        if (!list_ok || v.ptr[i] != ',') return -1;
        i++;
        while (i < v.len && (v.ptr[i] == ' ' || v.ptr[i] == '\t')) i++;
    }
}

/* Connection header tokens -> bit 1 "close", bit 2 "keep-alive". */
static int coai__http_conn(coai_str v)
{
    int f = 0;
    size_t i = 0;
    while (i <= v.len) {
        size_t s = i;
        coai_str t;
        while (i < v.len && v.ptr[i] != ',') i++;
        t = coai__http_trim(coai__http_str(v.ptr + s, i - s));
        if (coai__http_ieq(t.ptr, t.len, "close")) f |= 1;
        else if (coai__http_ieq(t.ptr, t.len, "keep-alive")) f |= 2;
        i++;
    }
    return f;
}

/* State shared by the two head parsers. */
typedef struct coai__http_head {
    coai_http_header *hdr;
    size_t count;
    coai_str te, cl, host, origin, ctype, auth;
    int n_te, n_cl, n_host, n_origin, n_ctype, n_auth, conn, expect;
} coai__http_head;

static void coai__http_note(coai__http_head *st, const coai_http_header *h)
{
    const char *p = h->name.ptr;
    size_t n = h->name.len;
    if (coai__http_ieq(p, n, "host")) { st->host = h->value; st->n_host++; }
    else if (coai__http_ieq(p, n, "content-length")) {
        /* Identical repeats are folded into a list so one check covers both. */
        if (st->n_cl++ && (h->value.len != st->cl.len ||
                           memcmp(h->value.ptr, st->cl.ptr, st->cl.len) != 0))
            st->cl.len = 0;                 /* different values: make it invalid */
        else
            st->cl = h->value;
    }
    else if (coai__http_ieq(p, n, "transfer-encoding")) { st->te = h->value; st->n_te++; }
    else if (coai__http_ieq(p, n, "connection")) st->conn |= coai__http_conn(h->value);
    else if (coai__http_ieq(p, n, "expect")) {
        if (coai__http_ieq(h->value.ptr, h->value.len, "100-continue")) st->expect = 1;
    }
    else if (coai__http_ieq(p, n, "origin")) { st->origin = h->value; st->n_origin++; }
    else if (coai__http_ieq(p, n, "content-type")) { st->ctype = h->value; st->n_ctype++; }
    else if (coai__http_ieq(p, n, "authorization")) { st->auth = h->value; st->n_auth++; }
}

/* Header lines from *pos to the blank line. 1 done, 0 more, else an HTTP status
 * (400 syntax, 431 limits). */
static int coai__http_fields(const char *buf, size_t n, size_t *pos, int strict,
                             coai__http_head *st)
{
    for (;;) {
        size_t s = *pos, e;
        int r;
        if (s < n && buf[s] != '\r' && buf[s] != '\n' && st->count == COAI_HTTP_MAX_HEADERS)
            return 431;
        r = coai__http_line(buf, n, pos, &e, COAI_HTTP_MAX_LINE, !strict);
        if (r == 0) return 0;
        if (r == -1) return 400;
        if (r == -2) return 431;
        if (e == s) return 1;
        if (coai__http_field(buf, s, e, strict, &st->hdr[st->count])) return 400;
        coai__http_note(st, &st->hdr[st->count]);
        st->count++;
    }
}

static coai_str coai__http_none(void) { return coai__http_str(NULL, 0); }

/* The request line [s, e): 0 ok or an HTTP status. */
static int coai__http_reqline(const char *buf, size_t s, size_t e, coai_http_request *rq)
{
    size_t i = s, t;
    const char *v;
    while (i < e && coai__http_tchar((unsigned char)buf[i])) i++;
    if (i == s || i == e || buf[i] != ' ') return 400;
    rq->method = coai__http_str(buf + s, i - s);
    t = ++i;
    while (i < e && (unsigned char)buf[i] > 0x20 && (unsigned char)buf[i] < 0x7f) i++;
    if (i == t || i == e || buf[i] != ' ') return 400;
    rq->target = coai__http_str(buf + t, i - t);
    i++;
    if (e - i != 8) return 400;
    v = buf + i;
    if (memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9')
        return 400;
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) return 505;
    rq->minor_version = v[7] - '0';
    /* Only origin-form, or "*" for OPTIONS: absolute-form would let a request
     * name another host than the one Host checks. */
    if (rq->target.ptr[0] == '/') {
        for (t = 0; t < rq->target.len && rq->target.ptr[t] != '?'; t++) {}
        rq->path = coai__http_str(rq->target.ptr, t);
    } else if (rq->target.len == 1 && rq->target.ptr[0] == '*' &&
               coai_str_eq(rq->method, "OPTIONS")) {
        rq->path = rq->target;
    } else {
        return 400;
    }
    return 0;
}

int coai_http_parse_request(const char *buf, size_t len, coai_http_request *rq, int *status)
{
    size_t n = len < COAI_HTTP_MAX_HEAD ? len : COAI_HTTP_MAX_HEAD, pos = 0, s, e;
    coai__http_head st;
    int r, code;
    /* Not memset: the header array is large and only [0, header_count) is meaningful. */
    rq->method = rq->target = rq->path = coai__http_none();
    rq->minor_version = 0;
    rq->header_count = 0;
    rq->content_length = -1;
    rq->chunked = rq->keep_alive = rq->expect_continue = rq->host_count = 0;
    rq->host = rq->origin = rq->content_type = rq->authorization = coai__http_none();
    memset(&st, 0, sizeof st);
    st.hdr = rq->headers;
    *status = 0;
    for (;;) {
        s = pos;
        r = coai__http_line(buf, n, &pos, &e, COAI_HTTP_MAX_LINE, 0);
        if (r == 0) goto more;
        if (r == -1) { code = 400; goto fail; }
        if (r == -2) { code = 414; goto fail; }
        if (e > s) break;                   /* skip empty lines before the request line */
    }
    if ((code = coai__http_reqline(buf, s, e, rq)) != 0) goto fail;
    r = coai__http_fields(buf, n, &pos, 1, &st);
    rq->header_count = st.count;
    if (r == 0) goto more;
    if (r != 1) { code = r; goto fail; }

    code = 400;
    if (st.n_host > 1 || st.n_cl > 1 || st.n_te > 1 || st.n_origin > 1 || st.n_ctype > 1 ||
        st.n_auth > 1)
        goto fail;
    if (rq->minor_version == 1 && st.n_host == 0) goto fail;
    if (st.n_cl && (rq->content_length = coai__http_clen(st.cl, 0)) < 0) goto fail;
    if (st.n_te) {
        if (rq->minor_version == 0 || st.te.len == 0) goto fail;
        if (!coai__http_ieq(st.te.ptr, st.te.len, "chunked")) { code = 501; goto fail; }
        if (st.n_cl) goto fail;             /* TE + CL: a request smuggling signal */
        rq->chunked = 1;
    }
    if (st.n_host) rq->host = st.host;
    rq->host_count = st.n_host;
    if (st.n_origin) rq->origin = st.origin;
    if (st.n_ctype) rq->content_type = st.ctype;
    if (st.n_auth) rq->authorization = st.auth;
    rq->keep_alive = rq->minor_version == 1 ? !(st.conn & 1) : st.conn == 2;
    rq->expect_continue = rq->minor_version == 1 && st.expect;
    return (int)pos;
more:
    /* The head did not end within the first COAI_HTTP_MAX_HEAD bytes. */
    if (len >= COAI_HTTP_MAX_HEAD) { code = 431; goto fail; }
    return COAI_MORE;
fail:
    *status = code;
    return code == 414 || code == 431 ? COAI_ERR_TOO_BIG : COAI_ERR_HTTP;
}

coai_str coai_http_header_get(const coai_http_header *h, size_t n, const char *name)
{
    size_t i, k = strlen(name);
    for (i = 0; i < n; i++) {
        size_t j;
        if (h[i].name.len != k) continue;
        for (j = 0; j < k; j++)
            if (coai__http_lower((unsigned char)h[i].name.ptr[j]) !=
                coai__http_lower((unsigned char)name[j]))
                break;
        if (j == k) return h[i].value;
    }
    return coai__http_none();
}

int coai_http_parse_response(const char *buf, size_t len, coai_http_response *rs)
{
    size_t n = len < COAI_HTTP_MAX_HEAD ? len : COAI_HTTP_MAX_HEAD, pos = 0, s, e, i;
    coai__http_head st;
    const char *v;
    int r;
    rs->status = rs->minor_version = 0;
    rs->reason = rs->content_type = coai__http_none();
    rs->header_count = 0;
    rs->content_length = -1;
    rs->chunked = rs->keep_alive = rs->no_body = 0;
    memset(&st, 0, sizeof st);
    st.hdr = rs->headers;
    r = coai__http_line(buf, n, &pos, &e, COAI_HTTP_MAX_LINE, 1);
    if (r == 0) goto more;
    if (r == -1) return COAI_ERR_HTTP;
    if (r == -2) return COAI_ERR_TOO_BIG;
    /* "HTTP/1.x NNN[ reason]" */
    v = buf;
    if (e < 12 || memcmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1') || v[8] != ' ')
        return COAI_ERR_HTTP;
    rs->minor_version = v[7] - '0';
    for (i = 9; i < 12; i++) {
        if (v[i] < '0' || v[i] > '9') return COAI_ERR_HTTP;
        rs->status = rs->status * 10 + (v[i] - '0');
    }
    if (rs->status < 100 || rs->status > 599) return COAI_ERR_HTTP;
    s = 12;
    if (e > 12) {
        if (v[12] != ' ') return COAI_ERR_HTTP;
        s = 13;
    }
    for (i = s; i < e; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t') return COAI_ERR_HTTP;
    rs->reason = coai__http_str(v + s, e - s);
    r = coai__http_fields(buf, n, &pos, 0, &st);
    rs->header_count = st.count;
    if (r == 0) goto more;
    if (r == 431) return COAI_ERR_TOO_BIG;
    if (r != 1) return COAI_ERR_HTTP;

    if (st.n_cl && (rs->content_length = coai__http_clen(st.cl, 1)) < 0) return COAI_ERR_HTTP;
    rs->keep_alive = rs->minor_version == 1 ? !(st.conn & 1) : st.conn == 2;
    if (st.n_te) {
        /* Only plain chunked: any other coding we could not decode anyway. */
        if (st.n_te > 1 || !coai__http_ieq(st.te.ptr, st.te.len, "chunked"))
            return COAI_ERR_HTTP;
        rs->chunked = 1;
        if (st.n_cl) {                      /* RFC 9112 6.3: chunked wins, then close */
            rs->content_length = -1;
            rs->keep_alive = 0;
        }
    }
    rs->no_body = rs->status < 200 || rs->status == 204 || rs->status == 304;
    if (rs->no_body) {
        rs->content_length = 0;
        rs->chunked = 0;
    } else if (!rs->chunked && rs->content_length < 0) {
        rs->keep_alive = 0;                 /* body runs until close */
    }
    if (st.n_ctype) rs->content_type = st.ctype;
    return (int)pos;
more:
    return len >= COAI_HTTP_MAX_HEAD ? COAI_ERR_TOO_BIG : COAI_MORE;
}

enum {
    COAI__CH_SIZE = 0,      /* hex digits of the chunk size */
    COAI__CH_SIZE_WS,       /* BWS after the digits */
    COAI__CH_EXT,           /* chunk extensions after ';' */
    COAI__CH_SIZE_LF,       /* CR seen at the end of the size line */
    COAI__CH_DATA,
    COAI__CH_DATA_CR,
    COAI__CH_DATA_LF,
    COAI__CH_TRAILER,       /* inside a trailer line (line_len bytes so far) */
    COAI__CH_TRAILER_LF,
    COAI__CH_DONE
};

static int coai__http_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = (unsigned char)coai__http_lower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The size line ended: check limits and pick the next state. 0 or an error. */
static coai_result coai__http_chunk_start(coai_chunked_decoder *d)
{
    if (d->overhead >= COAI_HTTP_CHUNK_OVERHEAD_MIN && d->overhead > 4 * d->total)
        return COAI_ERR_HTTP;               /* over 80% framing: a 1-byte chunk flood */
    if (d->remaining == 0) {
        d->state = COAI__CH_TRAILER;
        d->line_len = 0;
        return COAI_OK;
    }
    if (d->remaining > UINT64_MAX - d->total ||
        (d->max_body && d->total + d->remaining > (uint64_t)d->max_body))
        return COAI_ERR_TOO_BIG;
    d->total += d->remaining;
    d->state = COAI__CH_DATA;
    return COAI_OK;
}

coai_result coai_chunked_feed(coai_chunked_decoder *d, char *buf, size_t len,
                              size_t *consumed, size_t *out_len)
{
    size_t i = 0, out = 0;
    coai_result r = COAI_OK;
    *consumed = 0;
    *out_len = 0;
    if (d->err) return (coai_result)d->err;
    if (d->state == COAI__CH_DONE) return COAI_DONE;
    while (i < len && r == COAI_OK) {
        unsigned char c = (unsigned char)buf[i];
        int h;
        if (d->state == COAI__CH_DATA) {
            size_t k = len - i;
            if ((uint64_t)k > d->remaining) k = (size_t)d->remaining;
            memmove(buf + out, buf + i, k);
            out += k;
            i += k;
            d->remaining -= k;
            if (d->remaining == 0) d->state = COAI__CH_DATA_CR;
            continue;
        }
        i++;
        d->overhead++;
        switch (d->state) {
        case COAI__CH_SIZE:
            h = coai__http_hexval(c);
            if (h >= 0) {
                if (d->digits == 16) { r = COAI_ERR_HTTP; break; }
                d->remaining = d->remaining << 4 | (uint64_t)h;
                d->digits++;
                d->line_len++;
                break;
            }
            if (d->digits == 0) { r = COAI_ERR_HTTP; break; }
            d->state = COAI__CH_SIZE_WS;
            /* The first byte after the digits is handled like BWS. */
            /* fall through */
        case COAI__CH_SIZE_WS:
        case COAI__CH_EXT:
            if (c == '\r') { d->state = COAI__CH_SIZE_LF; break; }
            if (d->line_len++ >= COAI_HTTP_MAX_CHUNK_LINE) { r = COAI_ERR_HTTP; break; }
            if (d->state == COAI__CH_EXT) {
                if ((c < 0x20 && c != '\t') || c == 0x7f) r = COAI_ERR_HTTP;
            } else if (c == ';') {
                d->state = COAI__CH_EXT;
            } else if (c != ' ' && c != '\t') {
                r = COAI_ERR_HTTP;          /* includes bare LF */
            }
            break;
        case COAI__CH_SIZE_LF:
            if (c != '\n') { r = COAI_ERR_HTTP; break; }
            d->line_len = 0;
            d->digits = 0;
            r = coai__http_chunk_start(d);
            break;
        case COAI__CH_DATA_CR:
            if (c != '\r') r = COAI_ERR_HTTP;   /* runaway chunk: more data than declared */
            else d->state = COAI__CH_DATA_LF;
            break;
        case COAI__CH_DATA_LF:
            if (c != '\n') { r = COAI_ERR_HTTP; break; }
            d->state = COAI__CH_SIZE;
            d->remaining = 0;
            break;
        case COAI__CH_TRAILER:
            if (++d->trailer_len > COAI_HTTP_MAX_HEAD) { r = COAI_ERR_HTTP; break; }
            if (c == '\r') d->state = COAI__CH_TRAILER_LF;
            else if ((c < 0x20 && c != '\t') || c == 0x7f) r = COAI_ERR_HTTP;
            else d->line_len++;
            break;
        case COAI__CH_TRAILER_LF:
            if (++d->trailer_len > COAI_HTTP_MAX_HEAD || c != '\n') { r = COAI_ERR_HTTP; break; }
            if (d->line_len == 0) { d->state = COAI__CH_DONE; r = COAI_DONE; break; }
            d->line_len = 0;
            d->state = COAI__CH_TRAILER;
            break;
        default:
            r = COAI_ERR_STATE;
        }
    }
    *consumed = i;
    *out_len = out;
    if (r < 0) {
        d->err = r;
        return r;
    }
    return r == COAI_DONE ? COAI_DONE : COAI_MORE;
}

/* Split "name", "name:port", "[v6]" or "[v6]:port" into the name's length and the port
 * (-1 when there is none). 0 ok, -1 malformed (empty name, an empty or > 5-digit port). */
static int coai__http_host_split(coai_str h, size_t *name_len, long *port)
{
    size_t nl, i;
    long p = 0;
    if (!h.ptr || h.len == 0) return -1;
    if (h.ptr[0] == '[') {
        for (nl = 1; nl < h.len && h.ptr[nl] != ']'; nl++) {}
        if (nl == h.len) return -1;
        nl++;
    } else {
        for (nl = 0; nl < h.len && h.ptr[nl] != ':'; nl++) {}
    }
    if (nl == 0) return -1;
    *name_len = nl;
    *port = -1;
    if (nl == h.len) return 0;
    if (h.ptr[nl] != ':' || h.len - nl - 1 == 0 || h.len - nl - 1 > 5) return -1;
    for (i = nl + 1; i < h.len; i++) {
        if (h.ptr[i] < '0' || h.ptr[i] > '9') return -1;
        p = p * 10 + (h.ptr[i] - '0');
    }
    *port = p;
    return 0;
}

static int coai__http_name_eq(const char *a, const char *b, size_t n)
{
    size_t j;
    for (j = 0; j < n; j++)
        if (coai__http_lower((unsigned char)a[j]) != coai__http_lower((unsigned char)b[j]))
            return 0;
    return 1;
}

int coai_http_host_allowed(coai_str host, const coai_str *extra, size_t n_extra, int port)
{
    static const char *const local[] = { "localhost", "127.0.0.1", "[::1]" };
    size_t name_len, i;
    long p;
    int named = 0, pinned = 0, pin_ok = 0;
    if (coai__http_host_split(host, &name_len, &p) < 0) return 0;
    for (i = 0; i < sizeof local / sizeof local[0]; i++)
        if (coai__http_ieq(host.ptr, name_len, local[i])) named = 1;
    for (i = 0; i < n_extra; i++) {
        size_t en;
        long ep;
        if (coai__http_host_split(extra[i], &en, &ep) < 0 || en != name_len
            || !coai__http_name_eq(extra[i].ptr, host.ptr, name_len))
            continue;
        if (ep < 0) {
            named = 1;
        } else {
            pinned = 1;
            if (ep == (p < 0 ? 80 : p)) pin_ok = 1;
        }
    }
    if (pinned) return pin_ok;
    return named && (port <= 0 || p < 0 || p == port);
}

int coai_http_origin_allowed(coai_str origin, int port, const coai_str *extra, size_t n_extra)
{
    size_t k, i;
    if (!origin.ptr) return 0;
    if (origin.len > 7 && coai__http_ieq(origin.ptr, 7, "http://")) k = 7;
    else if (origin.len > 8 && coai__http_ieq(origin.ptr, 8, "https://")) k = 8;
    else return 0;                          /* includes "null" and "" */
    for (i = k; i < origin.len; i++)
        if (origin.ptr[i] == '/' || origin.ptr[i] == '?' || origin.ptr[i] == '#' ||
            origin.ptr[i] == '@')
            return 0;
    return coai_http_host_allowed(coai__http_str(origin.ptr + k, origin.len - k), extra,
                                  n_extra, port);
}

int coai_http_is_json(coai_str ct)
{
    size_t i;
    if (!ct.ptr) return 0;
    ct = coai__http_trim(ct);
    if (ct.len < 16 || !coai__http_ieq(ct.ptr, 16, "application/json")) return 0;
    i = 16;
    for (;;) {
        size_t ns, ne, vs, ve;
        while (i < ct.len && (ct.ptr[i] == ' ' || ct.ptr[i] == '\t')) i++;
        if (i == ct.len) return 1;
        if (ct.ptr[i] != ';') return 0;
        i++;
        while (i < ct.len && (ct.ptr[i] == ' ' || ct.ptr[i] == '\t')) i++;
        if (i == ct.len) return 1;          /* tolerate a trailing ';' */
        ns = i;
        while (i < ct.len && coai__http_tchar((unsigned char)ct.ptr[i])) i++;
        ne = i;
        if (ne == ns || i == ct.len || ct.ptr[i] != '=') return 0;
        vs = ++i;
        if (i < ct.len && ct.ptr[i] == '"') {
            vs = ++i;
            while (i < ct.len && ct.ptr[i] != '"') {
                if ((unsigned char)ct.ptr[i] < 0x20 && ct.ptr[i] != '\t') return 0;
                i += ct.ptr[i] == '\\' ? 2 : 1;
            }
            if (i >= ct.len) return 0;
            ve = i++;
        } else {
            while (i < ct.len && coai__http_tchar((unsigned char)ct.ptr[i])) i++;
            ve = i;
            if (ve == vs) return 0;
        }
        if (coai__http_ieq(ct.ptr + ns, ne - ns, "charset") &&
            !coai__http_ieq(ct.ptr + vs, ve - vs, "utf-8"))
            return 0;
    }
}

int coai_http_token_equal(coai_str a, coai_str b)
{
    unsigned char da[32], db[32];
    unsigned diff = 0;
    br_sha256_context c;
    size_t i;
    if (!a.ptr || !b.ptr || a.len == 0 || b.len == 0) return 0;
    br_sha256_init(&c);
    br_sha256_update(&c, a.ptr, a.len);
    br_sha256_out(&c, da);
    br_sha256_init(&c);
    br_sha256_update(&c, b.ptr, b.len);
    br_sha256_out(&c, db);
    for (i = 0; i < 32; i++) diff |= (unsigned)(da[i] ^ db[i]);
    return diff == 0;
}

coai_str coai_http_bearer(coai_str authorization)
{
    coai_str s;
    if (!authorization.ptr) return coai__http_none();
    s = coai__http_trim(authorization);
    if (s.len < 8 || !coai__http_ieq(s.ptr, 6, "bearer") || (s.ptr[6] != ' ' && s.ptr[6] != '\t'))
        return coai__http_none();
    s = coai__http_trim(coai__http_str(s.ptr + 7, s.len - 7));
    return s.len ? s : coai__http_none();
}

/* One "name=value" list (query: '&', cookies: ';' with spaces trimmed): the value of name. */
static coai_str coai__http_pair_get(const char *p, const char *end, char sep, int trim,
                                    const char *name)
{
    size_t nl = strlen(name);
    while (p < end) {
        const char *e = (const char *)memchr(p, sep, (size_t)(end - p)), *pe = e ? e : end;
        coai_str pair = coai__http_str(p, (size_t)(pe - p));
        if (trim) pair = coai__http_trim(pair);
        if (nl && pair.len > nl && memcmp(pair.ptr, name, nl) == 0 && pair.ptr[nl] == '=')
            return coai__http_str(pair.ptr + nl + 1, pair.len - nl - 1);
        p = e ? e + 1 : end;
    }
    return coai__http_none();
}

coai_str coai_http_query_param(coai_str target, const char *name)
{
    const char *q;
    if (!target.ptr || !(q = (const char *)memchr(target.ptr, '?', target.len)))
        return coai__http_none();
    return coai__http_pair_get(q + 1, target.ptr + target.len, '&', 0, name);
}

coai_str coai_http_cookie(coai_str header, const char *name)
{
    if (!header.ptr) return coai__http_none();
    return coai__http_pair_get(header.ptr, header.ptr + header.len, ';', 1, name);
}
/* PART:HTTP impl end */

/* ======================================================================== */
/* PART:H2 impl                                                             */
/* ======================================================================== */

const char *coai_h2_error_str(uint32_t code)
{
    static const char *const names[] = {
        "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
        "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED"
    };
    return code < sizeof names / sizeof names[0] ? names[code] : "unknown";
}

coai_str coai_h2_header_find(const coai_h2_header *h, size_t n, const char *name)
{
    coai_str none = { NULL, 0 };
    size_t i;
    for (i = 0; i < n; i++)
        if (coai_str_eq(h[i].name, name)) return h[i].value;
    return none;
}

/* RFC 7541 Appendix A: the static table, index 1..61. */
static const char *const coai__hpack_static[61][2] = {
    {":authority", ""}, {":method", "GET"}, {":method", "POST"}, {":path", "/"},
    {":path", "/index.html"}, {":scheme", "http"}, {":scheme", "https"}, {":status", "200"},
    {":status", "204"}, {":status", "206"}, {":status", "304"}, {":status", "400"},
    {":status", "404"}, {":status", "500"}, {"accept-charset", ""},
    {"accept-encoding", "gzip, deflate"}, {"accept-language", ""}, {"accept-ranges", ""},
    {"accept", ""}, {"access-control-allow-origin", ""}, {"age", ""}, {"allow", ""},
    {"authorization", ""}, {"cache-control", ""}, {"content-disposition", ""},
    {"content-encoding", ""}, {"content-language", ""}, {"content-length", ""},
    {"content-location", ""}, {"content-range", ""}, {"content-type", ""}, {"cookie", ""},
    {"date", ""}, {"etag", ""}, {"expect", ""}, {"expires", ""}, {"from", ""}, {"host", ""},
    {"if-match", ""}, {"if-modified-since", ""}, {"if-none-match", ""}, {"if-range", ""},
    {"if-unmodified-since", ""}, {"last-modified", ""}, {"link", ""}, {"location", ""},
    {"max-forwards", ""}, {"proxy-authenticate", ""}, {"proxy-authorization", ""},
    {"range", ""}, {"referer", ""}, {"refresh", ""}, {"retry-after", ""}, {"server", ""},
    {"set-cookie", ""}, {"strict-transport-security", ""}, {"transfer-encoding", ""},
    {"user-agent", ""}, {"vary", ""}, {"via", ""}, {"www-authenticate", ""}
};

/* RFC 7541 Appendix B, as the code lengths in bits of symbols 0..256 (256 = EOS). The code
 * is canonical: sorted by length, then by symbol, each code is the previous one plus one,
 * shifted left by the growth in length (so 48 '0' = 00000, 49 '1' = 00001, ..., and EOS is
 * thirty 1 bits). coai__huff_sym lists the symbols in that order and coai__huff_count
 * how many codes each length has; t_h2.c checks all three agree and that the code is
 * complete (Kraft sum exactly 1). */
static const unsigned char coai__huff_len[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7,
    7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21,
    23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24,
    21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30
};
static const unsigned short coai__huff_count[31] = {
    0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3, 0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19,
    29, 0, 4
};
static const unsigned short coai__huff_sym[257] = {
    48, 49, 50, 97, 99, 101, 105, 111, 115, 116, 32, 37, 45, 46, 47, 51,
    52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104, 108, 109,
    110, 112, 114, 117, 58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76,
    77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106, 107, 113, 118,
    119, 120, 121, 122, 38, 42, 44, 59, 88, 90, 33, 34, 40, 41, 63, 39,
    43, 124, 35, 62, 0, 36, 64, 91, 93, 126, 94, 125, 60, 96, 123, 92,
    195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161, 167, 172, 176, 177,
    179, 209, 216, 217, 227, 229, 230, 129, 132, 133, 134, 136, 146, 154, 156, 160,
    163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232,
    233, 1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157,
    158, 165, 166, 168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239, 9, 142,
    144, 145, 148, 159, 171, 206, 215, 225, 236, 237, 199, 207, 234, 235, 192, 193,
    200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255, 203, 204, 211,
    212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253, 254,
    2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20,
    21, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 220, 249, 10, 13, 22,
    256
};

/* Huffman-decode p[0..n) onto out. Canonical decoding, one bit at a time: within a length,
 * codes are consecutive, so a code of length `len` is valid when code - first < count.
 * The string must end on a symbol boundary or inside a code with at most 7 bits, all 1
 * (a prefix of EOS); EOS itself is an error (RFC 7541 5.2). 0 ok, COAI_ERR_H2, NOMEM. */
static int coai__huff_decode(coai_buf *out, const unsigned char *p, size_t n)
{
    uint32_t code = 0, first = 0;
    size_t index = 0, i;
    int len = 0, ones = 1, bit;
    for (i = 0; i < n; i++) {
        for (bit = 7; bit >= 0; bit--) {
            int b = (p[i] >> bit) & 1;
            uint32_t count;
            code |= (uint32_t)b;
            ones &= b;
            len++;
            count = coai__huff_count[len];
            if (code - first < count) {
                unsigned sym = coai__huff_sym[index + (code - first)];
                if (sym == 256) return COAI_ERR_H2;
                if (coai_buf_putc(out, (int)sym) < 0) return COAI_ERR_NOMEM;
                code = first = 0;
                index = 0;
                len = 0;
                ones = 1;
                continue;
            }
            if (len >= 30) return COAI_ERR_H2;   /* cannot happen with a complete code */
            index += count;
            first = (first + count) << 1;
            code <<= 1;
        }
    }
    if (len > 7 || !ones) return COAI_ERR_H2;
    return 0;
}

/* RFC 7541 5.1 integer with an N-bit prefix. Values over 2^31 - 1 are refused (no field
 * or index of ours comes near; it also bounds the continuation bytes). */
static int coai__hpack_int(const unsigned char *p, size_t n, size_t *pos, int prefix,
                           uint32_t *v)
{
    uint32_t max = (1u << prefix) - 1, val;
    int shift = 0;
    if (*pos >= n) return COAI_ERR_H2;
    val = p[(*pos)++] & max;
    if (val < max) { *v = val; return 0; }
    for (;;) {
        uint32_t b;
        if (*pos >= n || shift > 28) return COAI_ERR_H2;
        b = p[(*pos)++];
        if ((uint64_t)val + ((uint64_t)(b & 0x7f) << shift) > 0x7fffffffu) return COAI_ERR_H2;
        val += (b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    *v = val;
    return 0;
}

static int coai__hpack_int_put(coai_buf *out, int first_bits, int prefix, uint32_t v)
{
    uint32_t max = (1u << prefix) - 1;
    if (v < max) return coai_buf_putc(out, first_bits | (int)v);
    if (coai_buf_putc(out, first_bits | (int)max) < 0) return -1;
    v -= max;
    while (v >= 128) {
        if (coai_buf_putc(out, (int)(v & 0x7f) | 0x80) < 0) return -1;
        v >>= 7;
    }
    return coai_buf_putc(out, (int)v);
}

/* Dynamic table: entries live in d->mem[start..end), oldest first, and in the ring ent[]
 * from head. Index 1 is the newest. */
#define COAI__HPACK_SLOTS (COAI_HPACK_TABLE / 32 + 1)

static void coai__hpack_ready(coai_hpack_decoder *d)
{
    if (d->ready) return;
    if (d->max_size == 0 || d->max_size > COAI_HPACK_TABLE) d->max_size = COAI_HPACK_TABLE;
    if (d->max_list == 0) d->max_list = COAI_H2_MAX_HEADER_LIST;
    if (d->max_work == 0) d->max_work = COAI_H2_MAX_HEADER_WORK;
    d->cap = d->max_size;
    d->ready = 1;
}

static void coai__hpack_evict(coai_hpack_decoder *d, size_t need)
{
    while (d->count && d->size + need > d->cap) {
        coai_hpack_entry *e = &d->ent[d->head];
        d->size -= (size_t)e->name_len + e->value_len + 32;
        d->start = e->off + e->name_len + e->value_len;
        d->head = (d->head + 1) % COAI__HPACK_SLOTS;
        d->count--;
    }
    if (!d->count) d->start = d->end = 0;
}

/* Insert name + value (which must not point into d->mem). Bigger than the table: the table
 * is emptied and nothing is added (RFC 7541 4.4). */
static void coai__hpack_insert(coai_hpack_decoder *d, const char *name, size_t nl,
                               const char *value, size_t vl)
{
    size_t sz = nl + vl + 32, i;
    coai_hpack_entry *e;
    if (sz > d->cap) { coai__hpack_evict(d, d->cap + 1); return; }
    coai__hpack_evict(d, sz);
    if (d->end + nl + vl > sizeof d->mem) {
        /* compact: live bytes + this entry fit, since cap <= sizeof mem */
        memmove(d->mem, d->mem + d->start, d->end - d->start);
        for (i = 0; i < d->count; i++)
            d->ent[(d->head + i) % COAI__HPACK_SLOTS].off -= (uint32_t)d->start;
        d->end -= d->start;
        d->start = 0;
    }
    e = &d->ent[(d->head + d->count) % COAI__HPACK_SLOTS];
    e->off = (uint32_t)d->end;
    e->name_len = (uint32_t)nl;
    e->value_len = (uint32_t)vl;
    if (nl) memcpy(d->mem + d->end, name, nl);
    if (vl) memcpy(d->mem + d->end + nl, value, vl);
    d->end += nl + vl;
    d->size += sz;
    d->count++;
}

/* Name and value of index idx (1-based; static, then dynamic). 0 ok, COAI_ERR_H2. */
static int coai__hpack_get(const coai_hpack_decoder *d, uint32_t idx, coai_str *name,
                           coai_str *value)
{
    if (idx == 0) return COAI_ERR_H2;
    if (idx <= 61) {
        *name = coai_str_c(coai__hpack_static[idx - 1][0]);
        *value = coai_str_c(coai__hpack_static[idx - 1][1]);
        return 0;
    }
    idx -= 62;
    if (idx >= d->count) return COAI_ERR_H2;
    {
        const coai_hpack_entry *e = &d->ent[(d->head + d->count - 1 - idx) % COAI__HPACK_SLOTS];
        name->ptr = (const char *)d->mem + e->off;
        name->len = e->name_len;
        value->ptr = name->ptr + e->name_len;
        value->len = e->value_len;
    }
    return 0;
}

typedef struct coai__hoff {
    size_t name_off, name_len, value_off, value_len;
} coai__hoff;

/* A string literal (RFC 7541 5.2) appended to text at *off, *len bytes. keep 0: the
 * string is not wanted (a list over its limit): a plain one is only stepped over (*len is
 * its length, nothing appended); a Huffman one is still decoded, to be checked. */
static int coai__hpack_str(const unsigned char *p, size_t n, size_t *pos, coai_buf *text,
                           size_t *off, size_t *len, int keep)
{
    uint32_t l;
    int huff, r;
    if (*pos >= n) return COAI_ERR_H2;
    huff = p[*pos] & 0x80;
    if ((r = coai__hpack_int(p, n, pos, 7, &l)) < 0) return r;
    if (l > n - *pos) return COAI_ERR_H2;
    *off = text->len;
    if (!keep && !huff) {
        *pos += l;
        *len = l;
        return 0;
    }
    if (huff) r = coai__huff_decode(text, p + *pos, l);
    else r = coai_buf_append(text, p + *pos, l) < 0 ? COAI_ERR_NOMEM : 0;
    if (r < 0) return r;
    if (text->err) return COAI_ERR_NOMEM;
    *pos += l;
    *len = text->len - *off;
    return 0;
}

static int coai__hpack_copy(coai_buf *text, coai_str s, size_t *off)
{
    *off = text->len;
    return coai_buf_append(text, s.ptr, s.len) < 0 ? COAI_ERR_NOMEM : 0;
}

coai_result coai_hpack_decode(coai_hpack_decoder *d, const unsigned char *p, size_t n,
                              coai_hpack_list *out)
{
    size_t pos = 0, i, size = 0, count = 0, work = 0;
    int fields = 0, over = 0, r = 0;
    coai__hpack_ready(d);
    out->v = NULL;
    out->n = 0;
    out->size = 0;
    coai_buf_reset(&out->text);
    coai_buf_reset(&out->offs);
    coai_buf_reset(&out->arr);
    if (d->err) return COAI_ERR_H2;
    while (pos < n) {
        unsigned b = p[pos];
        coai__hoff h = {0, 0, 0, 0};
        coai_str name, value;
        uint32_t idx;
        size_t keep = out->text.len;
        int add = 0;
        if ((b & 0xe0) == 0x20) {                      /* dynamic table size update */
            if (fields) { r = COAI_ERR_H2; break; }
            if ((r = coai__hpack_int(p, n, &pos, 5, &idx)) < 0) break;
            if (idx > d->max_size) { r = COAI_ERR_H2; break; }
            d->cap = idx;
            coai__hpack_evict(d, 0);
            continue;
        }
        fields = 1;
        if (b & 0x80) {                                /* indexed field */
            if ((r = coai__hpack_int(p, n, &pos, 7, &idx)) < 0) break;
            if ((r = coai__hpack_get(d, idx, &name, &value)) < 0) break;
            h.name_len = name.len;
            h.value_len = value.len;
            /* over the limit: counted, never copied (the table does not change) */
            if (!over && size + name.len + value.len + 32 <= d->max_list) {
                if ((r = coai__hpack_copy(&out->text, name, &h.name_off)) < 0) break;
                if ((r = coai__hpack_copy(&out->text, value, &h.value_off)) < 0) break;
            }
        } else {
            /* literal: 01 with indexing (6-bit index), 0000 without, 0001 never indexed.
             * One with indexing is decoded whole even past the limit: the table needs it. */
            int prefix = (b & 0x40) ? 6 : 4, want;
            add = (b & 0x40) != 0;
            want = add || !over;
            if (!add && (b & 0xf0) != 0x00 && (b & 0xf0) != 0x10) { r = COAI_ERR_H2; break; }
            if ((r = coai__hpack_int(p, n, &pos, prefix, &idx)) < 0) break;
            if (idx) {
                if ((r = coai__hpack_get(d, idx, &name, &value)) < 0) break;
                h.name_len = name.len;
                if (want && (r = coai__hpack_copy(&out->text, name, &h.name_off)) < 0) break;
            } else if ((r = coai__hpack_str(p, n, &pos, &out->text, &h.name_off,
                                            &h.name_len, want)) < 0) {
                break;
            }
            if ((r = coai__hpack_str(p, n, &pos, &out->text, &h.value_off, &h.value_len,
                                     want)) < 0)
                break;
            if (add)
                coai__hpack_insert(d, (const char *)out->text.data + h.name_off, h.name_len,
                                   (const char *)out->text.data + h.value_off, h.value_len);
        }
        /* what this block made us copy or decode, kept or not, is bounded */
        work += out->text.len - keep;
        if (work > d->max_work) { r = COAI_ERR_H2; d->err = 2; break; }
        size += h.name_len + h.value_len + 32;
        if (over || size > d->max_list) {
            /* keep decoding (the table must follow the server's) but store nothing more */
            over = 1;
            out->text.len = keep;
            continue;
        }
        if (coai_buf_append(&out->offs, &h, sizeof h) < 0) { r = COAI_ERR_NOMEM; break; }
        count++;
    }
    if (r == COAI_ERR_H2 && !d->err) d->err = 1;
    if (r < 0 || over) {
        coai_buf_reset(&out->text);
        coai_buf_reset(&out->offs);
        return r < 0 ? (coai_result)r : COAI_ERR_TOO_BIG;
    }
    if (coai_buf_reserve(&out->arr, count * sizeof(coai_h2_header) + 1) < 0)
        return COAI_ERR_NOMEM;
    for (i = 0; i < count; i++) {
        coai__hoff h;
        coai_h2_header f;
        memcpy(&h, out->offs.data + i * sizeof h, sizeof h);
        f.name.ptr = (const char *)out->text.data + h.name_off;
        f.name.len = h.name_len;
        f.value.ptr = (const char *)out->text.data + h.value_off;
        f.value.len = h.value_len;
        coai_buf_append(&out->arr, &f, sizeof f);
    }
    out->v = (const coai_h2_header *)(void *)out->arr.data;
    out->n = count;
    out->size = size;
    return COAI_OK;
}

void coai_hpack_list_free(coai_hpack_list *l)
{
    coai_buf_free(&l->text);
    coai_buf_free(&l->offs);
    coai_buf_free(&l->arr);
    memset(l, 0, sizeof *l);
}

int coai_hpack_encode(coai_buf *out, const coai_h2_header *h, size_t n)
{
    size_t i, j, start = out->len;
    for (i = 0; i < n; i++) {
        const coai_str nm = h[i].name, v = h[i].value;
        if (nm.len == 0) return COAI_ERR_INVALID;
        for (j = 0; j < nm.len; j++) {
            unsigned char ch = (unsigned char)nm.ptr[j];
            if ((ch >= 'A' && ch <= 'Z') || ch <= 0x20 || ch >= 0x7f) return COAI_ERR_INVALID;
        }
        for (j = 0; j < v.len; j++)
            if (v.ptr[j] == 0 || v.ptr[j] == '\r' || v.ptr[j] == '\n') return COAI_ERR_INVALID;
    }
    for (i = 0; i < n; i++) {
        const coai_str nm = h[i].name, v = h[i].value;
        uint32_t name_idx = 0, full_idx = 0, k;
        int rc;
        for (k = 0; k < 61 && !full_idx; k++) {
            if (!coai_str_eq(nm, coai__hpack_static[k][0])) continue;
            if (!name_idx) name_idx = k + 1;
            if (coai_str_eq(v, coai__hpack_static[k][1])) full_idx = k + 1;
        }
        if (full_idx) {
            rc = coai__hpack_int_put(out, 0x80, 7, full_idx);
        } else {
            rc = coai__hpack_int_put(out, 0x00, 4, name_idx);
            if (rc == 0 && !name_idx) {
                rc = coai__hpack_int_put(out, 0x00, 7, (uint32_t)nm.len);
                if (rc == 0) rc = coai_buf_append(out, nm.ptr, nm.len);
            }
            if (rc == 0) rc = coai__hpack_int_put(out, 0x00, 7, (uint32_t)v.len);
            if (rc == 0) rc = coai_buf_append(out, v.ptr, v.len);
        }
        if (rc < 0 || out->err) {
            out->len = start;
            return COAI_ERR_NOMEM;
        }
    }
    return 0;
}

/* ---- frames ---- */

static uint32_t coai__be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void coai__put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

coai_result coai_h2_frame_parse(const unsigned char *p, size_t n, uint32_t max_frame,
                                coai_h2_frame *f, size_t *used)
{
    uint32_t len;
    if (n < 3) return COAI_MORE;
    len = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
    if (len > max_frame) return COAI_ERR_TOO_BIG;
    if (n < 9 || n - 9 < len) return COAI_MORE;
    f->length = len;
    f->type = p[3];
    f->flags = p[4];
    f->stream = coai__be32(p + 5) & 0x7fffffffu;
    f->payload = p + 9;
    *used = 9 + (size_t)len;
    return COAI_OK;
}

int coai_h2_frame_append(coai_buf *out, int type, int flags, uint32_t stream,
                         const void *payload, size_t len)
{
    unsigned char h[9];
    if (len > 0xffffffu) return -1;
    h[0] = (unsigned char)(len >> 16);
    h[1] = (unsigned char)(len >> 8);
    h[2] = (unsigned char)len;
    h[3] = (unsigned char)type;
    h[4] = (unsigned char)flags;
    coai__put32(h + 5, stream & 0x7fffffffu);
    if (coai_buf_append(out, h, 9) < 0) return -1;
    return len ? coai_buf_append(out, payload, len) : 0;
}

/* Strip the pad length and padding (PADDED) and, for HEADERS, the priority fields.
 * -1 when the padding is as long as the payload or longer (PROTOCOL_ERROR). */
static int coai__h2_unpad(const coai_h2_frame *f, const unsigned char **p, size_t *n)
{
    size_t len = f->length, pad = 0;
    const unsigned char *q = f->payload;
    if (f->flags & COAI_H2_FLAG_PADDED) {
        if (len < 1) return -1;
        pad = q[0];
        q++;
        len--;
    }
    if (f->type == COAI_H2_HEADERS && (f->flags & COAI_H2_FLAG_PRIORITY)) {
        if (len < 5) return -1;
        q += 5;
        len -= 5;
    }
    if (pad > len) return -1;
    *p = q;
    *n = len - pad;
    return 0;
}

/* ---- the connection ---- */

static int coai__h2_ctl(coai_h2_conn *c, int type, int flags, uint32_t stream,
                        const void *payload, size_t len)
{
    return coai_h2_frame_append(&c->out, type, flags, stream, payload, len) < 0
        ? COAI_ERR_NOMEM : 0;
}

static int coai__h2_window_update(coai_h2_conn *c, uint32_t stream, uint32_t inc)
{
    unsigned char b[4];
    coai__put32(b, inc & 0x7fffffffu);
    return coai__h2_ctl(c, COAI_H2_WINDOW_UPDATE, 0, stream, b, 4);
}

static int coai__h2_rst(coai_h2_conn *c, uint32_t stream, uint32_t code)
{
    unsigned char b[4];
    coai__put32(b, code);
    return coai__h2_ctl(c, COAI_H2_RST_STREAM, 0, stream, b, 4);
}

static int coai__h2_goaway_send(coai_h2_conn *c, uint32_t code)
{
    unsigned char b[8];
    coai__put32(b, 0);          /* no server-initiated stream was ever accepted */
    coai__put32(b + 4, code);
    c->goaway_out = 1;
    return coai__h2_ctl(c, COAI_H2_GOAWAY, 0, 0, b, 8);
}

/* A connection error: GOAWAY with code, then every coai_h2_next returns COAI_ERR_H2. */
static coai_result coai__h2_fail(coai_h2_conn *c, uint32_t code)
{
    if (c->error < 0) {
        c->error = (int)code;
        (void)coai__h2_goaway_send(c, code);
    }
    return COAI_ERR_H2;
}

/* The server made us work or buffer past a bound: ENHANCE_YOUR_CALM, saying why. */
static coai_result coai__h2_calm(coai_h2_conn *c, const char *why)
{
    if (c->error < 0) c->error_why = why;
    return coai__h2_fail(c, COAI_H2_ENHANCE_YOUR_CALM);
}

/* Queue a PING or SETTINGS ack, unless COAI_H2_MAX_OUTBOUND_ACK of them wait unwritten
 * already: the server sends them faster than it reads the answers (CVE-2019-9512/9515). */
static coai_result coai__h2_ack(coai_h2_conn *c, int type, const void *payload, size_t len)
{
    if (c->acks_out >= COAI_H2_MAX_OUTBOUND_ACK)
        return coai__h2_calm(c, "flooded control frames: PING/SETTINGS acks unread");
    if (coai__h2_ctl(c, type, COAI_H2_FLAG_ACK, 0, payload, len) < 0)
        return coai__h2_fail(c, COAI_H2_INTERNAL_ERROR);
    c->acks_out++;
    c->ack_end = c->out_done + (c->out.len - c->out_off);
    return COAI_MORE;
}

static coai_h2_stream *coai__h2_find(const coai_h2_conn *c, uint32_t id)
{
    size_t i;
    if (id == 0) return NULL;
    for (i = 0; i < COAI_H2_MAX_STREAMS; i++)
        if (c->streams[i].id == id) return (coai_h2_stream *)&c->streams[i];
    return NULL;
}

static void coai__h2_forget(coai_h2_conn *c, coai_h2_stream *s)
{
    memset(s, 0, sizeof *s);
    c->active--;
}

int coai_h2_init(coai_h2_conn *c, const coai_h2_opts *o)
{
    unsigned char set[6 * 6], *q = set;
    coai_h2_opts d;
    memset(c, 0, sizeof *c);
    memset(&d, 0, sizeof d);
    if (o) d = *o;
    if (!d.stream_window || d.stream_window > 0x7fffffffu) d.stream_window = COAI_H2_STREAM_WINDOW;
    if (!d.max_streams || d.max_streams > COAI_H2_MAX_STREAMS) d.max_streams = COAI_H2_MAX_STREAMS;
    if (!d.conn_window || d.conn_window > 0x7fffffffu) {
        uint64_t w = (uint64_t)d.max_streams * d.stream_window;
        d.conn_window = w > 0x7fffffffu ? 0x7fffffffu : (uint32_t)w;
    }
    if (d.conn_window < 65535) d.conn_window = 65535;   /* it can only be raised */
    if (d.max_frame < 16384 || d.max_frame > 0xffffffu) d.max_frame = 16384;
    if (!d.max_header_list) d.max_header_list = COAI_H2_MAX_HEADER_LIST;
    c->opts = d;
    c->error = -1;
    c->peer.header_table_size = 4096;
    c->peer.enable_push = 1;
    c->peer.max_concurrent_streams = 0xffffffffu;
    c->peer.initial_window_size = 65535;
    c->peer.max_frame_size = 16384;
    c->peer.max_header_list_size = 0xffffffffu;
    c->next_id = 1;
    c->send_window = 65535;
    c->recv_window = 65535;
    c->hpack.max_size = COAI_HPACK_TABLE;
    c->hpack.max_list = d.max_header_list;
    c->block.max = COAI_H2_MAX_HEADER_BLOCK;
#define COAI__SET(id, v) (q[0] = 0, q[1] = (unsigned char)(id), coai__put32(q + 2, (v)), q += 6)
    COAI__SET(COAI_H2_SET_HEADER_TABLE_SIZE, COAI_HPACK_TABLE);
    COAI__SET(COAI_H2_SET_ENABLE_PUSH, 0);
    COAI__SET(COAI_H2_SET_INITIAL_WINDOW_SIZE, d.stream_window);
    if (d.max_frame != 16384) COAI__SET(COAI_H2_SET_MAX_FRAME_SIZE, d.max_frame);
    COAI__SET(COAI_H2_SET_MAX_HEADER_LIST_SIZE, d.max_header_list);
#undef COAI__SET
    if (coai_buf_append(&c->out, COAI_H2_PREFACE, 24) < 0
        || coai__h2_ctl(c, COAI_H2_SETTINGS, 0, 0, set, (size_t)(q - set)) < 0)
        return COAI_ERR_NOMEM;
    if (d.conn_window > 65535) {
        if (coai__h2_window_update(c, 0, d.conn_window - 65535) < 0) return COAI_ERR_NOMEM;
        c->recv_window = d.conn_window;
    }
    return 0;
}

void coai_h2_free(coai_h2_conn *c)
{
    coai_hpack_list_free(&c->fields);
    coai_buf_free(&c->in);
    coai_buf_free(&c->out);
    coai_buf_free(&c->block);
}

size_t coai_h2_want_write(coai_h2_conn *c, const unsigned char **p)
{
    *p = c->out.data ? c->out.data + c->out_off : NULL;
    return c->out.len - c->out_off;
}

void coai_h2_wrote(coai_h2_conn *c, size_t n)
{
    if (n > c->out.len - c->out_off) n = c->out.len - c->out_off;
    c->out_off += n;
    c->out_done += n;
    if (c->out_done >= c->ack_end) c->acks_out = 0;     /* the newest ack went: all did */
    if (c->out_off == c->out.len) {
        c->out.len = 0;
        c->out_off = 0;
    } else if (c->out_off > 64 * 1024 && c->out_off > c->out.len / 2) {
        memmove(c->out.data, c->out.data + c->out_off, c->out.len - c->out_off);
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
}

int coai_h2_feed(coai_h2_conn *c, const void *p, size_t n)
{
    if (c->error >= 0) return 0;        /* nothing more is read after a connection error */
    if (c->in_off) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    if (n && coai_buf_append(&c->in, p, n) < 0) return COAI_ERR_NOMEM;
    return 0;
}

static uint32_t coai__h2_take(size_t n, int64_t room)
{
    if (room <= 0) return 0;
    return (uint64_t)n < (uint64_t)room ? (uint32_t)n : (uint32_t)room;
}

/* Return window: the application used n bytes (or they were padding). Never more than
 * was taken, so a wrong count from the caller cannot push a window past what we announced. */
static int coai__h2_credit(coai_h2_conn *c, coai_h2_stream *s, size_t n)
{
    int64_t room;
    uint32_t full;
    room = (int64_t)c->opts.conn_window - c->recv_window - (int64_t)c->unacked;
    c->unacked += coai__h2_take(n, room);
    if (c->unacked && c->unacked >= c->opts.conn_window / 2 && c->error < 0) {
        if (coai__h2_window_update(c, 0, c->unacked) < 0) return COAI_ERR_NOMEM;
        c->recv_window += c->unacked;
        c->unacked = 0;
    }
    if (!s || s->state == COAI_H2_ST_HALF_CLOSED_REMOTE) return 0;
    /* before our SETTINGS are acked the server still counts with the default window */
    full = c->settings_acked ? c->opts.stream_window : 65535;
    room = (int64_t)full - s->recv_window - (int64_t)s->unacked;
    s->unacked += coai__h2_take(n, room);
    if (s->unacked && s->unacked >= full / 2 && c->error < 0) {
        if (coai__h2_window_update(c, s->id, s->unacked) < 0) return COAI_ERR_NOMEM;
        s->recv_window += s->unacked;
        s->unacked = 0;
    }
    return 0;
}

void coai_h2_consumed(coai_h2_conn *c, uint32_t id, size_t n)
{
    (void)coai__h2_credit(c, coai__h2_find(c, id), n);
}

static void coai__h2_ev(coai_h2_event *ev, int type, const coai_h2_stream *s, uint32_t id)
{
    memset(ev, 0, sizeof *ev);
    ev->type = type;
    ev->stream = id;
    ev->user = s ? s->user : NULL;
}

/* A stream error: RST_STREAM, the stream forgotten, COAI_H2_EV_RESET (local). */
static coai_result coai__h2_stream_fail(coai_h2_conn *c, coai_h2_stream *s, uint32_t code,
                                        coai_h2_event *ev)
{
    coai__h2_ev(ev, COAI_H2_EV_RESET, s, s->id);
    ev->code = code;
    ev->local = 1;
    if (coai__h2_rst(c, s->id, code) < 0) return COAI_ERR_NOMEM;
    coai__h2_forget(c, s);
    return COAI_OK;
}

/* The server finished its side of s. Closed on both sides: forgotten. */
static void coai__h2_remote_end(coai_h2_conn *c, coai_h2_stream *s)
{
    if (s->state == COAI_H2_ST_HALF_CLOSED_LOCAL) coai__h2_forget(c, s);
    else s->state = COAI_H2_ST_HALF_CLOSED_REMOTE;
}

static int coai__h2_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'
        || ch == '.' || ch == '!' || ch == '#' || ch == '$' || ch == '%' || ch == '&'
        || ch == '\'' || ch == '*' || ch == '+' || ch == '^' || ch == '`' || ch == '|'
        || ch == '~';
}

/* RFC 9113 8.2 / 8.3.2: 0 for a well-formed response head (want_status) or trailer block;
 * *status gets :status. */
static int coai__h2_head_ok(const coai_h2_header *h, size_t n, int want_status, int *status)
{
    size_t i, j;
    int regular = 0, seen_status = 0;
    *status = 0;
    for (i = 0; i < n; i++) {
        coai_str nm = h[i].name, v = h[i].value;
        if (nm.len == 0) return -1;
        for (j = 0; j < v.len; j++) {
            unsigned char ch = (unsigned char)v.ptr[j];
            if (ch == 0 || ch == '\r' || ch == '\n') return -1;
        }
        if (nm.ptr[0] == ':') {
            if (regular || !want_status || seen_status || !coai_str_eq(nm, ":status")) return -1;
            if (v.len != 3) return -1;
            for (j = 0; j < 3; j++)
                if (v.ptr[j] < '0' || v.ptr[j] > '9') return -1;
            *status = (v.ptr[0] - '0') * 100 + (v.ptr[1] - '0') * 10 + (v.ptr[2] - '0');
            if (*status < 100) return -1;
            seen_status = 1;
            continue;
        }
        regular = 1;
        for (j = 0; j < nm.len; j++)
            if (!coai__h2_tchar((unsigned char)nm.ptr[j])) return -1;
        if (coai_str_eq(nm, "connection") || coai_str_eq(nm, "keep-alive")
            || coai_str_eq(nm, "proxy-connection") || coai_str_eq(nm, "transfer-encoding")
            || coai_str_eq(nm, "upgrade"))
            return -1;
    }
    return want_status && !seen_status ? -1 : 0;
}

/* A complete header block for stream id arrived (c->block). */
static coai_result coai__h2_headers_done(coai_h2_conn *c, uint32_t id, int end_stream,
                                        coai_h2_event *ev)
{
    coai_h2_stream *s;
    coai_result r;
    int status, trailers;
    r = coai_hpack_decode(&c->hpack, c->block.data ? c->block.data : (const unsigned char *)"",
                          c->block.len, &c->fields);
    coai_buf_reset(&c->block);
    c->block_stream = 0;
    if (r == COAI_ERR_H2 && c->hpack.err == 2)
        return coai__h2_calm(c, "sent an HPACK block decoding to far more than it holds");
    if (r == COAI_ERR_H2) return coai__h2_fail(c, COAI_H2_COMPRESSION_ERROR);
    if (r == COAI_ERR_NOMEM) return coai__h2_fail(c, COAI_H2_INTERNAL_ERROR);
    s = coai__h2_find(c, id);
    if (!s) return COAI_MORE;   /* a stream we reset or forgot: decoded, then dropped */
    if (r == COAI_ERR_TOO_BIG) return coai__h2_stream_fail(c, s, COAI_H2_PROTOCOL_ERROR, ev);
    if (s->state == COAI_H2_ST_HALF_CLOSED_REMOTE)
        return coai__h2_stream_fail(c, s, COAI_H2_STREAM_CLOSED, ev);
    trailers = s->head_done;
    if (coai__h2_head_ok(c->fields.v, c->fields.n, !trailers, &status) < 0
        || (trailers && !end_stream) || (status >= 100 && status < 200 && end_stream))
        return coai__h2_stream_fail(c, s, COAI_H2_PROTOCOL_ERROR, ev);
    if (!trailers && status < 200) return COAI_MORE;   /* 1xx: informational, skipped */
    coai__h2_ev(ev, COAI_H2_EV_HEADERS, s, id);
    ev->end_stream = end_stream;
    ev->trailers = trailers;
    ev->status = status;
    ev->headers = c->fields.v;
    ev->n_headers = c->fields.n;
    s->head_done = 1;
    if (end_stream) coai__h2_remote_end(c, s);
    return COAI_OK;
}

static coai_result coai__h2_settings(coai_h2_conn *c, const coai_h2_frame *f,
                                     coai_h2_event *ev)
{
    size_t i;
    coai_h2_settings p = c->peer;
    if (f->stream) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
    if (f->flags & COAI_H2_FLAG_ACK) {
        if (f->length) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        if (!c->settings_acked) {
            /* the server now applies our INITIAL_WINDOW_SIZE to the streams it knows */
            int64_t delta = (int64_t)c->opts.stream_window - 65535;
            for (i = 0; i < COAI_H2_MAX_STREAMS; i++)
                if (c->streams[i].id) c->streams[i].recv_window += delta;
            c->settings_acked = 1;
        }
        return COAI_MORE;
    }
    if (f->length % 6) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
    for (i = 0; i < f->length; i += 6) {
        unsigned id = (unsigned)f->payload[i] << 8 | f->payload[i + 1];
        uint32_t v = coai__be32(f->payload + i + 2);
        switch (id) {
        case COAI_H2_SET_HEADER_TABLE_SIZE: p.header_table_size = v; break;
        case COAI_H2_SET_ENABLE_PUSH:
            if (v != 0) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
            p.enable_push = v;
            break;
        case COAI_H2_SET_MAX_CONCURRENT_STREAMS: p.max_concurrent_streams = v; break;
        case COAI_H2_SET_INITIAL_WINDOW_SIZE:
            if (v > 0x7fffffffu) return coai__h2_fail(c, COAI_H2_FLOW_CONTROL_ERROR);
            p.initial_window_size = v;
            break;
        case COAI_H2_SET_MAX_FRAME_SIZE:
            if (v < 16384 || v > 0xffffffu) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
            p.max_frame_size = v;
            break;
        case COAI_H2_SET_MAX_HEADER_LIST_SIZE: p.max_header_list_size = v; break;
        default: break;   /* unknown settings are ignored */
        }
    }
    if (p.initial_window_size != c->peer.initial_window_size) {
        int64_t delta = (int64_t)p.initial_window_size - c->peer.initial_window_size;
        for (i = 0; i < COAI_H2_MAX_STREAMS; i++) {
            coai_h2_stream *s = &c->streams[i];
            if (!s->id) continue;
            if (s->send_window + delta > 0x7fffffff)
                return coai__h2_fail(c, COAI_H2_FLOW_CONTROL_ERROR);
            s->send_window += delta;
        }
    }
    if (coai__h2_ack(c, COAI_H2_SETTINGS, NULL, 0) < 0) return COAI_ERR_H2;
    c->peer = p;
    c->got_settings = 1;
    coai__h2_ev(ev, COAI_H2_EV_SETTINGS, NULL, 0);
    return COAI_OK;
}

/* One frame. COAI_OK: *ev is an event; COAI_MORE: nothing to report; < 0: connection error. */
static coai_result coai__h2_frame(coai_h2_conn *c, const coai_h2_frame *f, coai_h2_event *ev)
{
    coai_h2_stream *s;
    const unsigned char *p;
    size_t n;
    int idle = f->stream > c->max_id || (f->stream && !(f->stream & 1));
    if (c->block_stream && (f->type != COAI_H2_CONTINUATION || f->stream != c->block_stream))
        return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
    if (!c->got_settings && f->type != COAI_H2_SETTINGS)
        return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
    /* DATA frames without a byte (padding aside) or END_STREAM cost work and carry
     * nothing: many in a row are a flood (CVE-2019-9518) */
    if (f->type != COAI_H2_DATA || (f->flags & COAI_H2_FLAG_END_STREAM)
        || coai__h2_unpad(f, &p, &n) < 0 || n)
        c->empty_in = 0;
    else if (++c->empty_in > COAI_H2_MAX_EMPTY_FRAMES)
        return coai__h2_calm(c, "flooded empty DATA frames");
    switch (f->type) {
    case COAI_H2_DATA:
        if (!f->stream || idle) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if ((int64_t)f->length > c->recv_window)
            return coai__h2_fail(c, COAI_H2_FLOW_CONTROL_ERROR);
        c->recv_window -= f->length;
        s = coai__h2_find(c, f->stream);
        if (!s) {
            /* closed (we reset or forgot it): the bytes still count for the connection */
            if (coai__h2_credit(c, NULL, f->length) < 0)
                return coai__h2_fail(c, COAI_H2_INTERNAL_ERROR);
            return COAI_MORE;
        }
        if ((int64_t)f->length > s->recv_window) {
            (void)coai__h2_credit(c, NULL, f->length);
            return coai__h2_stream_fail(c, s, COAI_H2_FLOW_CONTROL_ERROR, ev);
        }
        s->recv_window -= f->length;
        if (coai__h2_unpad(f, &p, &n) < 0) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (s->state == COAI_H2_ST_HALF_CLOSED_REMOTE) {
            (void)coai__h2_credit(c, NULL, f->length);
            return coai__h2_stream_fail(c, s, COAI_H2_STREAM_CLOSED, ev);
        }
        if (!s->head_done) {
            (void)coai__h2_credit(c, NULL, f->length);
            return coai__h2_stream_fail(c, s, COAI_H2_PROTOCOL_ERROR, ev);
        }
        coai__h2_ev(ev, COAI_H2_EV_DATA, s, f->stream);
        ev->data.ptr = (const char *)p;
        ev->data.len = n;
        ev->end_stream = (f->flags & COAI_H2_FLAG_END_STREAM) != 0;
        /* the pad length byte and the padding are never seen by the application */
        if (coai__h2_credit(c, s, f->length - n) < 0)
            return coai__h2_fail(c, COAI_H2_INTERNAL_ERROR);
        if (ev->end_stream) coai__h2_remote_end(c, s);
        return COAI_OK;
    case COAI_H2_HEADERS:
        if (!f->stream || idle) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (coai__h2_unpad(f, &p, &n) < 0) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        coai_buf_reset(&c->block);
        if (coai_buf_append(&c->block, p, n) < 0)
            return coai__h2_fail(c, COAI_H2_ENHANCE_YOUR_CALM);
        c->block_end_stream = (f->flags & COAI_H2_FLAG_END_STREAM) != 0;
        if (!(f->flags & COAI_H2_FLAG_END_HEADERS)) {
            c->block_stream = f->stream;
            return COAI_MORE;
        }
        return coai__h2_headers_done(c, f->stream, c->block_end_stream, ev);
    case COAI_H2_CONTINUATION:
        if (!c->block_stream) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (coai_buf_append(&c->block, f->payload, f->length) < 0)
            return coai__h2_fail(c, COAI_H2_ENHANCE_YOUR_CALM);
        if (!(f->flags & COAI_H2_FLAG_END_HEADERS)) return COAI_MORE;
        return coai__h2_headers_done(c, c->block_stream, c->block_end_stream, ev);
    case COAI_H2_PRIORITY:
        if (!f->stream) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (f->length != 5) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        return COAI_MORE;
    case COAI_H2_RST_STREAM:
        if (!f->stream || idle) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (f->length != 4) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        s = coai__h2_find(c, f->stream);
        if (!s) return COAI_MORE;
        {
            uint32_t code = coai__be32(f->payload);
            coai__h2_ev(ev, code == COAI_H2_REFUSED_STREAM ? COAI_H2_EV_REFUSED
                        : COAI_H2_EV_RESET, s, f->stream);
            ev->code = code;
        }
        coai__h2_forget(c, s);
        return COAI_OK;
    case COAI_H2_SETTINGS:
        return coai__h2_settings(c, f, ev);
    case COAI_H2_PUSH_PROMISE:
        return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);   /* we sent ENABLE_PUSH = 0 */
    case COAI_H2_PING:
        if (f->stream) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (f->length != 8) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        if (f->flags & COAI_H2_FLAG_ACK) {
            coai__h2_ev(ev, COAI_H2_EV_PING_ACK, NULL, 0);
            ev->data.ptr = (const char *)f->payload;
            ev->data.len = 8;
            return COAI_OK;
        }
        return coai__h2_ack(c, COAI_H2_PING, f->payload, 8);
    case COAI_H2_GOAWAY: {
        uint32_t last, i;
        if (f->stream) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        if (f->length < 8) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        last = coai__be32(f->payload) & 0x7fffffffu;
        if (!c->goaway_in || last < c->goaway_last) c->goaway_last = last;
        c->goaway_in = 1;
        for (i = 0; i < COAI_H2_MAX_STREAMS; i++)
            if (c->streams[i].id > c->goaway_last) c->streams[i].refused = 1;
        coai__h2_ev(ev, COAI_H2_EV_GOAWAY, NULL, 0);
        ev->last_stream = last;
        ev->code = coai__be32(f->payload + 4);
        ev->data.ptr = (const char *)f->payload + 8;
        ev->data.len = f->length - 8;
        return COAI_OK;
    }
    case COAI_H2_WINDOW_UPDATE: {
        uint32_t inc;
        if (f->length != 4) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        inc = coai__be32(f->payload) & 0x7fffffffu;
        if (!f->stream) {
            if (!inc) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
            if (c->send_window + inc > 0x7fffffff)
                return coai__h2_fail(c, COAI_H2_FLOW_CONTROL_ERROR);
            c->send_window += inc;
            coai__h2_ev(ev, COAI_H2_EV_WINDOW, NULL, 0);
            return COAI_OK;
        }
        if (idle) return coai__h2_fail(c, COAI_H2_PROTOCOL_ERROR);
        s = coai__h2_find(c, f->stream);
        if (!s) return COAI_MORE;
        if (!inc) return coai__h2_stream_fail(c, s, COAI_H2_PROTOCOL_ERROR, ev);
        if (s->send_window + inc > 0x7fffffff)
            return coai__h2_stream_fail(c, s, COAI_H2_FLOW_CONTROL_ERROR, ev);
        s->send_window += inc;
        coai__h2_ev(ev, COAI_H2_EV_WINDOW, s, f->stream);
        return COAI_OK;
    }
    default:
        return COAI_MORE;   /* unknown frame types are ignored (RFC 9113 5.5) */
    }
}

coai_result coai_h2_next(coai_h2_conn *c, coai_h2_event *ev)
{
    size_t i;
    memset(ev, 0, sizeof *ev);
    if (c->error >= 0) return COAI_ERR_H2;
    /* streams a GOAWAY refused are reported first, one per call */
    if (c->goaway_in) {
        for (i = 0; i < COAI_H2_MAX_STREAMS; i++) {
            coai_h2_stream *s = &c->streams[i];
            if (s->id && s->refused) {
                coai__h2_ev(ev, COAI_H2_EV_REFUSED, s, s->id);
                ev->code = COAI_H2_REFUSED_STREAM;
                coai__h2_forget(c, s);
                return COAI_OK;
            }
        }
    }
    for (;;) {
        coai_h2_frame f;
        size_t used;
        coai_result r;
        const unsigned char *p = c->in.data ? c->in.data + c->in_off : NULL;
        size_t n = c->in.len - c->in_off;
        r = coai_h2_frame_parse(p, n, c->opts.max_frame, &f, &used);
        if (r == COAI_MORE) return COAI_MORE;
        if (r < 0) return coai__h2_fail(c, COAI_H2_FRAME_SIZE_ERROR);
        c->in_off += used;
        r = coai__h2_frame(c, &f, ev);
        if (r != COAI_MORE) return r;
        if (c->error >= 0) return COAI_ERR_H2;
        memset(ev, 0, sizeof *ev);
    }
}

/* Queue header block bytes as HEADERS + CONTINUATION frames of the server's frame size. */
static int coai__h2_send_block(coai_h2_conn *c, uint32_t id, const unsigned char *p, size_t n,
                               int end_stream)
{
    size_t max = c->peer.max_frame_size, off = 0;
    int type = COAI_H2_HEADERS;
    do {
        size_t k = n - off > max ? max : n - off;
        int flags = (off + k == n ? COAI_H2_FLAG_END_HEADERS : 0);
        if (type == COAI_H2_HEADERS && end_stream) flags |= COAI_H2_FLAG_END_STREAM;
        if (coai_h2_frame_append(&c->out, type, flags, id, p + off, k) < 0) return COAI_ERR_NOMEM;
        off += k;
        type = COAI_H2_CONTINUATION;
    } while (off < n);
    return 0;
}

size_t coai_h2_header_list_size(const coai_h2_header *h, size_t n)
{
    size_t i, sz = 0;
    for (i = 0; i < n; i++) sz += h[i].name.len + h[i].value.len + 32;
    return sz;
}

long coai_h2_open(coai_h2_conn *c, const coai_h2_header *h, size_t n, int end_stream,
                  void *user)
{
    coai_buf blk = {0};
    long r;
    if (c->error >= 0 || c->goaway_in || c->goaway_out || c->next_id > 0x7fffffffu)
        return COAI_ERR_STATE;
    if (coai_h2_header_list_size(h, n) > c->peer.max_header_list_size) return COAI_ERR_INVALID;
    if (c->active >= c->opts.max_streams || c->active >= c->peer.max_concurrent_streams)
        return 0;
    r = coai_hpack_encode(&blk, h, n);
    if (r == 0)
        r = coai_h2_open_block(c, blk.data, blk.len, coai_h2_header_list_size(h, n),
                               end_stream, user);
    coai_buf_free(&blk);
    return r;
}

long coai_h2_open_block(coai_h2_conn *c, const unsigned char *block, size_t len,
                        size_t list_size, int end_stream, void *user)
{
    coai_h2_stream *s = NULL;
    size_t i, start = c->out.len;
    uint32_t id;
    int r;
    if (c->error >= 0 || c->goaway_in || c->goaway_out || c->next_id > 0x7fffffffu)
        return COAI_ERR_STATE;
    if (list_size > c->peer.max_header_list_size) return COAI_ERR_INVALID;
    if (c->active >= c->opts.max_streams || c->active >= c->peer.max_concurrent_streams)
        return 0;
    for (i = 0; i < COAI_H2_MAX_STREAMS; i++)
        if (!c->streams[i].id) { s = &c->streams[i]; break; }
    if (!s) return 0;
    r = coai__h2_send_block(c, c->next_id, block, len, end_stream);
    if (r < 0) {
        c->out.len = start;
        c->out.err = 0;
        return r;
    }
    id = c->next_id;
    c->next_id += 2;
    c->max_id = id;
    memset(s, 0, sizeof *s);
    s->id = id;
    s->state = end_stream ? COAI_H2_ST_HALF_CLOSED_LOCAL : COAI_H2_ST_OPEN;
    s->send_window = c->peer.initial_window_size;
    s->recv_window = c->settings_acked ? c->opts.stream_window : 65535;
    s->user = user;
    c->active++;
    return (long)id;
}

size_t coai_h2_send_room(const coai_h2_conn *c, uint32_t id)
{
    const coai_h2_stream *s = coai__h2_find(c, id);
    int64_t w;
    if (!s || (s->state != COAI_H2_ST_OPEN && s->state != COAI_H2_ST_HALF_CLOSED_REMOTE))
        return 0;
    w = s->send_window < c->send_window ? s->send_window : c->send_window;
    return w > 0 ? (size_t)w : 0;
}

int coai_h2_send_data(coai_h2_conn *c, uint32_t id, const void *p, size_t n, int end_stream,
                      size_t *sent)
{
    coai_h2_stream *s = coai__h2_find(c, id);
    size_t room, off = 0;
    *sent = 0;
    if (c->error >= 0 || !s
        || (s->state != COAI_H2_ST_OPEN && s->state != COAI_H2_ST_HALF_CLOSED_REMOTE))
        return COAI_ERR_STATE;
    room = coai_h2_send_room(c, id);
    if (room > n) room = n;
    while (off < room) {
        size_t k = room - off > c->peer.max_frame_size ? c->peer.max_frame_size : room - off;
        int fl = (end_stream && off + k == n) ? COAI_H2_FLAG_END_STREAM : 0;
        if (coai_h2_frame_append(&c->out, COAI_H2_DATA, fl, id, (const char *)p + off, k) < 0)
            return COAI_ERR_NOMEM;
        off += k;
        s->send_window -= (int64_t)k;
        c->send_window -= (int64_t)k;
    }
    *sent = off;
    if (end_stream && off == n) {
        if (n == 0 && coai_h2_frame_append(&c->out, COAI_H2_DATA, COAI_H2_FLAG_END_STREAM, id,
                                           NULL, 0) < 0)
            return COAI_ERR_NOMEM;
        if (s->state == COAI_H2_ST_HALF_CLOSED_REMOTE) coai__h2_forget(c, s);
        else s->state = COAI_H2_ST_HALF_CLOSED_LOCAL;
    }
    return 0;
}

int coai_h2_reset(coai_h2_conn *c, uint32_t id, uint32_t code)
{
    coai_h2_stream *s = coai__h2_find(c, id);
    if (!s) return COAI_ERR_STATE;
    if (coai__h2_rst(c, id, code) < 0) return COAI_ERR_NOMEM;
    /* what the server had in flight for it still counts against the connection window:
       frames for it are credited back as they arrive */
    coai__h2_forget(c, s);
    return 0;
}

int coai_h2_ping(coai_h2_conn *c, const unsigned char opaque[8])
{
    return coai__h2_ctl(c, COAI_H2_PING, 0, 0, opaque, 8);
}

int coai_h2_goaway(coai_h2_conn *c, uint32_t code)
{
    return coai__h2_goaway_send(c, code);
}

size_t coai_h2_active(const coai_h2_conn *c)
{
    return c->active;
}

int coai_h2_stream_state(const coai_h2_conn *c, uint32_t id)
{
    const coai_h2_stream *s = coai__h2_find(c, id);
    return s ? s->state : COAI_H2_ST_CLOSED;
}
/* PART:H2 impl end */

/* ======================================================================== */
/* PART:CORE impl (the dialect-neutral reply engine and exec mapping)       */
/* ======================================================================== */

/* ---- errors -------------------------------------------------------------- */

/* Copy at most cap-1 bytes of s into dst, dropping control bytes and cutting at a
 * UTF-8 boundary; invalid sequences are dropped too (messages must stay clean). */
static size_t coai__core_clean_copy(char *dst, size_t pos, size_t cap, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && pos + 1 < cap) {
        int k = coai__utf8_seq(p + i, n - i);
        if (k <= 0) { i++; continue; }
        if ((k == 1 && (p[i] < 0x20 || p[i] == 0x7f))
            || (k == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
            /* C0, DEL and C1 controls (U+0080..U+009F) */
            if (pos + 1 < cap && pos > 0 && dst[pos - 1] != ' ') dst[pos++] = ' ';
            i += (size_t)k;
            continue;
        }
        if (pos + (size_t)k >= cap) break;
        memcpy(dst + pos, p + i, (size_t)k);
        pos += (size_t)k;
        i += (size_t)k;
    }
    dst[pos] = 0;
    return pos;
}

static void coai__core_error_vset(coai_error *e, int status, const char *type, const char *code,
                             const char *param, const char *fmt, va_list ap)
{
    char tmp[1024];
    int n;
    e->status = status;
    e->type = type ? type : "server_error";
    e->code = code;
    e->no_retry = 0;
    e->retry_after = 0;
    e->upstream_status = 0;
    e->kind = COAI_ERRK_NONE;
    e->param[0] = 0;
    if (param) coai__core_clean_copy(e->param, 0, sizeof e->param, param, strlen(param));
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof tmp) n = (int)sizeof tmp - 1;
    coai__core_clean_copy(e->message, 0, sizeof e->message, tmp, (size_t)n);
}

void coai_error_set(coai_error *e, int status, const char *type, const char *code,
                    const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    coai__core_error_vset(e, status, type, code, param, fmt, ap);
    va_end(ap);
}

static int coai__core_json_cstr(coai_buf *out, const char *s)
{
    if (!s) return coai_buf_puts(out, "null");
    return coai_json_str_append(out, s, strlen(s));
}

int coai_error_write(coai_buf *out, const coai_error *e)
{
    coai_buf_puts(out, "{\"error\":{\"message\":");
    coai__core_json_cstr(out, e->message);
    coai_buf_puts(out, ",\"type\":");
    coai__core_json_cstr(out, e->type ? e->type : "server_error");
    coai_buf_puts(out, ",\"param\":");
    coai__core_json_cstr(out, e->param[0] ? e->param : NULL);
    coai_buf_puts(out, ",\"code\":");
    coai__core_json_cstr(out, e->code);
    return coai_buf_puts(out, "}}");
}

/* Append text to e->message (already clean); keeps it bounded. */
static void coai__core_error_append(coai_error *e, const char *s, size_t n)
{
    size_t pos = strlen(e->message);
    coai__core_clean_copy(e->message, pos, sizeof e->message, s, n);
}

static int coai__core_is_usage_error(int err)
{
    return err == 9 || err == 10 || err == 41 || err == 44;
}

static int coai__core_is_rate_error(int err)
{
    return err == 7 || err == 8 || err == 22 || err == 50;
}

static int coai__core_is_auth_error(int err)
{
    return err == 1 || err == 2 || err == 11 || err == 12 || err == 38;
}

static int coai__core_ci_contains(const char *hay, size_t n, const char *needle);

/* hay[0..n) contains needle[0..m), ASCII letters compared case-insensitively. */
static int coai__core_ci_has(const char *hay, size_t n, const char *needle, size_t m)
{
    size_t i, j;
    for (i = 0; m <= n && i + m <= n; i++) {
        for (j = 0; j < m; j++) {
            char a = hay[i + j], b = needle[j];
            if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
            if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
            if (a != b) break;
        }
        if (j == m) return 1;
    }
    return 0;
}

/* message, title and detail of a status, each kept only when no other kept part already
 * contains it (case-insensitively), joined with ": ". */
static void coai__core_status_once(const coai_status *st, char *out, size_t cap)
{
    const char *parts[3];
    size_t i, j, pos = 0;
    parts[0] = st->message;
    parts[1] = st->title;
    parts[2] = st->detail;
    out[0] = 0;
    for (i = 0; i < 3; i++) {
        int skip = parts[i][0] == 0;
        for (j = 0; j < 3 && !skip; j++) {
            size_t li = strlen(parts[i]), lj = strlen(parts[j]);
            if (j == i || !parts[j][0]) continue;
            /* contained in a longer part, or equal to an earlier one */
            if (lj > li || (lj == li && j < i))
                skip = coai__core_ci_has(parts[j], lj, parts[i], li);
        }
        if (skip) continue;
        if (pos && pos + 2 < cap) { out[pos++] = ':'; out[pos++] = ' '; out[pos] = 0; }
        pos = coai__core_clean_copy(out, pos, cap, parts[i], strlen(parts[i]));
    }
}

static int coai__core_cs(const char *s, const char *needle)
{
    return coai__core_ci_contains(s, strlen(s), needle);
}

/* An outdated-client answer in any of the forms seen live:
 * ERROR_OUTDATED_CLIENT (30); since 2026 resource_exhausted + error 28
 * (ERROR_GPT_4_VISION_PREVIEW_RATE_LIMIT) titled "Update Required"; in 2025 a
 * resource_exhausted titled "Please update to the latest version of Cursor ...". */
static int coai__core_is_outdated(const coai_status *st)
{
    if (st->error == 30) return 1;
    if (coai__core_cs(st->title, "update required")) return 1;
    if (st->error == 28 && (coai__core_cs(st->title, "update") || coai__core_cs(st->detail, "update")
                            || coai__core_cs(st->message, "update required")))
        return 1;
    return coai__core_cs(st->title, "update to the latest version")
           || coai__core_cs(st->message, "update to the latest version");
}

/* resource_exhausted with no ErrorDetails and no words about usage, quota or rate: live
 * clients saw it for both an oversized conversation and a model the plan does not allow,
 * so neither a quota nor a rate limit may be claimed. */
static int coai__core_is_bare_exhausted(const coai_status *st)
{
    static const char *const cues[] = { "usage", "quota", "limit", "billing", "rate",
                                         "too many", "spend", "invoice", "plan" };
    size_t i;
    if (st->code != 8 || st->error || st->title[0] || st->detail[0]) return 0;
    for (i = 0; i < sizeof cues / sizeof cues[0]; i++)
        if (coai__core_cs(st->message, cues[i])) return 0;
    return 1;
}

/* The errors Cursor sends since 2026-08, recognised by their own words
 * (the strings are the ones users saw live). code: the gRPC code (0 when not
 * known); t[0..n): Cursor's text (message, title, detail), quoted in e's message. Returns 1
 * when it filled *e. Checked before the status-code rows: "blob missing [not_found]" is no
 * unknown model, "High Load" (ERROR_RESOURCE_EXHAUSTED) no usage limit. */
static int coai__core_autumn_error(int code, const char *t, size_t n, coai_error *e)
{
    int q = (int)(n > 300 ? 300 : n);
    /* seen live in 2026: a tool schema Cursor cannot take, on the first
     * turn ("Connect error 502: parse binary: invalid end group tag"); the reply names the
     * tool where it can tell (coai__core_tool_schema) */
    if (coai__core_ci_contains(t, n, "invalid end group tag")) {
        coai_error_set(e, 400, "invalid_request_error", "invalid_tool_schema", "tools",
                       "Cursor could not read one of the tool schemas (Cursor said: %.*s). "
                       "Simplify the tool's parameters schema or leave that tool out.", q, t);
        e->no_retry = 1;
        return 1;
    }
    /* N7, C8: a run request without a conversation state; the caller sends it again once
     * with ConversationStateStructure.mode = AGENT */
    if (coai__core_ci_contains(t, n, "conversation state is required")) {
        coai_error_set(e, 502, "upstream_error", "conversation_state_required", NULL,
                       "Cursor wanted the conversation state (Cursor said: %.*s); cursor-oai "
                       "sent it once more with mode AGENT, and that failed too.", q, t);
        return 1;
    }
    if (coai__core_ci_contains(t, n, "conversation data missing")
        || coai__core_ci_contains(t, n, "blob missing")
        || coai__core_ci_contains(t, n, "blob not found")) {
        coai_error_set(e, 502, "upstream_error", "conversation_lost", NULL,
                       "Cursor lost this conversation's stored state and could not continue it "
                       "(Cursor said: %.*s); cursor-oai replays the whole conversation once as a "
                       "new one, and that failed too. Send the request again.", q, t);
        return 1;
    }
    if (coai__core_ci_contains(t, n, "not available in your country or region")
        || coai__core_ci_contains(t, n, "not available in your region")
        || coai__core_ci_contains(t, n, "unsupported_region")
        || coai__core_ci_contains(t, n, "unsupported region")) {
        coai_error_set(e, 403, "permission_error", "unsupported_region", NULL,
                       "Cursor does not serve this model where your request comes from "
                       "(Cursor said: %.*s). Pick another model; retrying will not help.", q, t);
        e->no_retry = 1;
        return 1;
    }
    if (coai__core_ci_contains(t, n, "high load") || coai__core_ci_contains(t, n, "high demand")) {
        /* capacity shed for one model: another model works now, the same request would add
         * to the flood (not a usage limit: never latched) */
        coai_error_set(e, 429, "requests", "model_overloaded", NULL,
                       "Cursor is overloaded for this model right now; try another model "
                       "(Cursor said: %.*s)", q, t);
        e->no_retry = 1;
        return 1;
    }
    if (coai__core_ci_contains(t, n, "unpaid invoice")) {
        coai_error_set(e, 429, "insufficient_quota", "insufficient_quota", NULL,
                       "Cursor refuses requests until an invoice is paid (Cursor said: %.*s)",
                       q, t);
        e->no_retry = 1;
        e->kind = COAI_ERRK_UNPAID_INVOICE;
        return 1;
    }
    if (coai__core_ci_contains(t, n, "model channel not available")) {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Cursor's provider channel for this model is down for the moment; retry "
                       "shortly or use another model (Cursor said: %.*s)", q, t);
        e->retry_after = 5;
        return 1;
    }
    if (code == 4 && coai__core_ci_contains(t, n, "timeout waiting for next item")) {
        coai_error_set(e, 504, "server_error", "upstream_timeout", NULL,
                       "Cursor waited for this client's answer to its request_context question "
                       "and it never arrived (Cursor said: %.*s); the BidiAppend that carries it "
                       "was lost. Retry; if it keeps happening, run `cursor-oai doctor`.", q, t);
        e->kind = COAI_ERRK_CONTEXT_UNANSWERED;
        return 1;
    }
    return 0;
}

/* permission_denied for the client's identity (a desktop or stale version on Run,
 * seen live in 2026): the outdated-client error, not an access problem of the account. */
static int coai__core_identity_denied(int code, const char *t, size_t n)
{
    return code == 7 && (coai__core_ci_contains(t, n, "client version")
                         || coai__core_ci_contains(t, n, "client-version")
                         || coai__core_ci_contains(t, n, "x-cursor-client")
                         || coai__core_ci_contains(t, n, "client type")
                         || coai__core_ci_contains(t, n, "unsupported client")
                         || coai__core_ci_contains(t, n, "update your client")
                         || coai__core_ci_contains(t, n, "update cursor"));
}

#define COAI__OUTDATED_HINT \
    "Cursor rejected this client version as outdated (x-cursor-client-version): set " \
    "CURSOR_CLIENT_VERSION to a current cursor-agent build such as cli-2026.10.01-e373342, " \
    "or update cursor-agent (its newest build under ~/.local/share/cursor-agent/versions is " \
    "used when newer); `cursor-oai status` shows the value in use."

void coai_error_from_status(const coai_status *st, coai_error *e)
{
    int err = st->error, code = st->code;
    coai_buf desc = { 0 };
    const char *what;
    memset(e, 0, sizeof *e);
    if (code == 0 && err == 0) return;
    /* One description of the status (message, title, detail without repeats, then
     * "(grpc-status N, ERROR_NAME)"), the same text the logs get. */
    coai_status_describe(st, &desc);
    what = desc.err || !desc.data ? "Cursor reported an error" : (const char *)desc.data;
    if (coai__core_autumn_error(code, what, strlen(what), e)) {
        /* recognised by Cursor's words (above) */
    } else if (coai__core_is_outdated(st) || coai__core_identity_denied(code, what, strlen(what))) {
        /* never a rate limit or quota message, whatever the status code says */
        coai_error_set(e, 502, "upstream_error", "outdated_client", NULL,
                       COAI__OUTDATED_HINT " Cursor said: %s", what);
        e->no_retry = 1;
    } else if (coai__core_is_bare_exhausted(st)) {
        coai_error_set(e, 400, "invalid_request_error", "upstream_resource_exhausted", NULL,
                       "Cursor answered resource_exhausted without details. This is ambiguous: "
                       "either the conversation is too large for the model (shorten it), or "
                       "the model is not available on your Cursor plan (try another model). "
                       "Cursor said: %s", what);
        e->no_retry = 1;
    } else if (coai__core_is_usage_error(err) || (code == 8 && !coai__core_is_rate_error(err))) {
        /* Cursor tends to say the same thing in grpc-message, title and detail ("You've hit
         * your usage limit" / "Usage limit" / ...): each distinct statement once, and our own
         * words only when Cursor's do not already say it is a limit. */
        char once[400];
        const char *tag = st->error_name ? st->error_name : "grpc-status 8";
        coai__core_status_once(st, once, sizeof once);
        if (!once[0])
            coai_error_set(e, 429, "insufficient_quota", "insufficient_quota", NULL,
                           "You've hit your Cursor usage limit (%s)", tag);
        else if (coai__core_ci_contains(once, strlen(once), "limit"))
            coai_error_set(e, 429, "insufficient_quota", "insufficient_quota", NULL,
                           "Cursor: %s (%s)", once, tag);
        else
            coai_error_set(e, 429, "insufficient_quota", "insufficient_quota", NULL,
                           "You've hit your Cursor usage limit: %s (%s)", once, tag);
        e->no_retry = 1;
    } else if (coai__core_is_rate_error(err)) {
        coai_error_set(e, 429, "requests", "rate_limit_exceeded", NULL,
                       "Cursor rate limit: %s", what);
        e->retry_after = 10;
    } else if (coai__core_is_auth_error(err) || code == 16) {
        coai_error_set(e, 401, "authentication_error", "upstream_auth_failed", NULL,
                       "Cursor rejected the credentials (%s); log in again", what);
        e->no_retry = 1;
    } else if (err == 5 || err == 40 || code == 5) {
        coai_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                       "The model does not exist or is no longer available on Cursor (%s)",
                       what);
        e->no_retry = 1;
    } else if (err == 43 || err == 20) {
        coai_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                       "messages", "The conversation is too long for the model (%s)", what);
        e->no_retry = 1;
    } else if (code == 7) {
        coai_error_set(e, 403, "permission_error", "upstream_permission_denied", NULL,
                       "Cursor denied the request (%s)", what);
        e->no_retry = 1;
    } else if (code == 4 || err == 25) {
        coai_error_set(e, 504, "server_error", "upstream_timeout", NULL,
                       "Cursor timed out (%s)", what);
    } else if (code == 14) {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Cursor is unavailable (%s)", what);
        e->retry_after = 5;
    } else {
        coai_error_set(e, 502, "upstream_error", "upstream_error", NULL,
                       "Cursor error: %s", what);
    }
    coai_buf_free(&desc);
}

static int coai__core_ci_contains(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle), i, j;
    for (i = 0; m <= n && i + m <= n; i++) {
        for (j = 0; j < m; j++) {
            char a = hay[i + j], b = needle[j];
            if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
            if (a != b) break;
        }
        if (j == m) return 1;
    }
    return 0;
}

/* The text of an HTML page: tags and comments dropped, white space collapsed, at most
 * cap - 1 bytes (the caller cuts at a UTF-8 boundary). Returns the length. */
static size_t coai__core_strip_markup(const char *s, size_t n, char *out, size_t cap)
{
    size_t i, o = 0;
    int tag = 0, sp = 1;
    for (i = 0; i < n && o + 1 < cap; i++) {
        char ch = s[i];
        if (ch == '<') { tag = 1; continue; }
        if (tag) {
            if (ch == '>') tag = 0;
            if (ch == '>' && !sp) { out[o++] = ' '; sp = 1; }
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
            if (!sp) { out[o++] = ' '; sp = 1; }
            continue;
        }
        out[o++] = ch;
        sp = 0;
    }
    while (o && out[o - 1] == ' ') o--;
    return o;
}

static void coai__core_from_http(int upstream_status, const char *body, size_t n,
                               coai_error *e);

void coai_error_from_http(int upstream_status, const char *body, size_t n, coai_error *e)
{
    coai__core_from_http(upstream_status, body, n, e);
    e->upstream_status = upstream_status;
    /* a server that speaks HTTP/2 only, in its own words (as seen live) */
    if (upstream_status == 505
        || (upstream_status == 400 && body
            && coai__core_ci_contains(body, n > 512 ? 512 : n, "illegal request line")))
        e->kind = COAI_ERRK_HTTP1_REFUSED;
}

static void coai__core_from_http(int upstream_status, const char *body, size_t n,
                               coai_error *e)
{
    char text[201];
    const char *ccode = "", *msg = NULL;
    size_t msg_len = 0;
    cJSON *j = NULL;
    int quota;
    memset(e, 0, sizeof *e);
    if (!body) n = 0;
    if (n > 0 && n <= 65536 && coai_utf8_valid_prefix(body, n) == n) {
        j = cJSON_ParseWithLength(body, n);
        if (j && cJSON_IsObject(j)) {
            cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "code");
            cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
            cJSON *eo = cJSON_GetObjectItemCaseSensitive(j, "error");
            if (cJSON_IsObject(eo)) {       /* {"error":{"code","message"}} form */
                c = cJSON_GetObjectItemCaseSensitive(eo, "code");
                m = cJSON_GetObjectItemCaseSensitive(eo, "message");
            }
            if (cJSON_IsString(c)) ccode = c->valuestring;
            if (cJSON_IsString(m)) { msg = m->valuestring; msg_len = strlen(msg); }
            {
                /* Structured ErrorDetails (Connect "details") decide, as in a trailer: an
                 * "Update Required" 429 is an outdated client, not a rate limit. */
                coai_status st;
                coai__status_init(&st);
                coai__connect_error_fill(cJSON_IsObject(eo) ? eo : j, &st);
                if (st.error || st.title[0] || st.detail[0]) {
                    if (st.code == 0) st.code = 2;
                    coai_error_from_status(&st, e);
                    cJSON_Delete(j);
                    return;
                }
            }
        }
    }
    if (!msg) {
        /* Not Connect JSON. An HTML page (a proxy's or CDN's error page) is reduced to its
         * text; anything else is quoted as a short clean excerpt. */
        size_t k = 0;
        while (k < n && (body[k] == ' ' || body[k] == '\t' || body[k] == '\r'
                         || body[k] == '\n'))
            k++;
        if (k < n && body[k] == '<') {
            msg_len = coai__core_strip_markup(body + k, n - k, text, sizeof text);
            msg = text;
        } else {
            msg = body ? body : "";
            msg_len = n > 200 ? 200 : n;
        }
    }
    quota = coai__core_ci_contains(msg, msg_len, "usage")
            || coai__core_ci_contains(msg, msg_len, "quota")
            || coai__core_ci_contains(msg, msg_len, "billing");
    {
        int gc = strcmp(ccode, "permission_denied") == 0 || upstream_status == 403 ? 7
                 : strcmp(ccode, "deadline_exceeded") == 0 ? 4 : 0;
        if (coai__core_autumn_error(gc, msg, msg_len, e)) {
            cJSON_Delete(j);
            return;
        }
        if (coai__core_identity_denied(gc, msg, msg_len)) {
            coai_error_set(e, 502, "upstream_error", "outdated_client", NULL,
                           COAI__OUTDATED_HINT " Cursor said (HTTP %d): %.*s", upstream_status,
                           (int)(msg_len > 200 ? 200 : msg_len), msg);
            e->no_retry = 1;
            cJSON_Delete(j);
            return;
        }
    }
    if (upstream_status == 401 || strcmp(ccode, "unauthenticated") == 0) {
        coai_error_set(e, 401, "authentication_error", "upstream_auth_failed", NULL,
                       "Cursor rejected the credentials (HTTP %d); log in again: ",
                       upstream_status);
        e->no_retry = 1;
    } else if (upstream_status == 403 || strcmp(ccode, "permission_denied") == 0) {
        coai_error_set(e, 403, "permission_error", "upstream_permission_denied", NULL,
                       "Cursor denied the request (HTTP %d): ", upstream_status);
        e->no_retry = 1;
    } else if (strcmp(ccode, "not_found") == 0) {
        coai_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                       "The model does not exist or is not available on Cursor: ");
        e->no_retry = 1;
    } else if (strcmp(ccode, "resource_exhausted") == 0 && !quota
               && !coai__core_ci_contains(msg, msg_len, "rate")
               && !coai__core_ci_contains(msg, msg_len, "too many")
               && !coai__core_ci_contains(msg, msg_len, "limit")) {
        coai_error_set(e, 400, "invalid_request_error", "upstream_resource_exhausted", NULL,
                       "Cursor answered resource_exhausted without details (HTTP %d). This is "
                       "ambiguous: either the conversation is too large for the model, or the "
                       "model is not available on your Cursor plan: ", upstream_status);
        e->no_retry = 1;
    } else if ((upstream_status == 429 || strcmp(ccode, "resource_exhausted") == 0) && quota) {
        /* Cursor's words usually say it already; ours only when they do not */
        if (coai__core_ci_contains(msg, msg_len, "limit"))
            coai_error_set(e, 429, "insufficient_quota", "insufficient_quota", NULL,
                           "Cursor (HTTP %d): ", upstream_status);
        else
            coai_error_set(e, 429, "insufficient_quota", "insufficient_quota", NULL,
                           "You've hit your Cursor usage limit (HTTP %d): ", upstream_status);
        e->no_retry = 1;
    } else if (upstream_status == 429 || strcmp(ccode, "resource_exhausted") == 0) {
        coai_error_set(e, 429, "requests", "rate_limit_exceeded", NULL,
                       "Cursor rate limit (HTTP %d): ", upstream_status);
        e->retry_after = 10;
    } else if (upstream_status == 503 || strcmp(ccode, "unavailable") == 0) {
        coai_error_set(e, 503, "server_error", "upstream_unavailable", NULL,
                       "Cursor is unavailable (HTTP %d): ", upstream_status);
        e->retry_after = 5;
    } else {
        coai_error_set(e, 502, "upstream_error", "upstream_error", NULL,
                       "Cursor answered HTTP %d: ", upstream_status);
    }
    coai__core_error_append(e, msg, msg_len);
    cJSON_Delete(j);
}

void coai_error_from_http_call(int upstream_status, const char *body, size_t n,
                               const char *call, coai_error *e)
{
    static const char prefix[] = "The model does not exist or is not available on Cursor: ";
    char said[sizeof ((coai_error *)0)->message];
    coai_error_from_http(upstream_status, body, n, e);
    if (!(upstream_status == 404 || (e->code && strcmp(e->code, "model_not_found") == 0)))
        return;
    if (strncmp(e->message, prefix, sizeof prefix - 1) == 0)
        snprintf(said, sizeof said, "%s", e->message + sizeof prefix - 1);
    else
        snprintf(said, sizeof said, "%s", e->message);
    coai_error_set(e, 502, "upstream_error", "upstream_not_found", NULL,
                   "Cursor does not serve %s at this address (HTTP %d, not found): %s",
                   call && *call ? call : "this call", upstream_status, said);
    e->no_retry = 1;
    e->upstream_status = upstream_status;
}

/* ---- request parsing ----------------------------------------------------- */

static size_t coai__core_utf16_len(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i, u = 0;
    for (i = 0; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) u++;      /* one unit per lead or ASCII byte */
        if (p[i] >= 0xf0) u++;               /* astral: a surrogate pair */
    }
    return u;
}

static coai_str coai__core_jstr(const cJSON *j)
{
    coai_str s = { "", 0 };
    if (cJSON_IsString(j) && j->valuestring) { s.ptr = j->valuestring; s.len = strlen(s.ptr); }
    return s;
}

static const cJSON *coai__core_get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static int coai__core_put_str(coai_buf *b, coai_str s) { return coai_buf_append(b, s.ptr, s.len); }

/* The description Cursor sees for a custom (freeform) tool, in either OpenAI dialect: the
 * client's own, then how to pass the text ("input"), then the grammar of its format if any. */
static void coai__core_custom_desc(coai_buf *db, coai_str description, const cJSON *def,
                                   const cJSON *syn)
{
    coai__core_put_str(db, description);
    if (db->len) coai_buf_puts(db, "\n\n");
    coai_buf_puts(db, "Pass the raw text as the string argument \"input\" (not JSON).");
    if (cJSON_IsString(def)) {
        coai_buf_puts(db, " It must match this ");
        coai__core_put_str(db, coai__core_jstr(syn));
        coai_buf_puts(db, " grammar:\n");
        coai__core_put_str(db, coai__core_jstr(def));
    }
}

static int coai__core_role_is(const cJSON *m, const char *role)
{
    const cJSON *r = coai__core_get(m, "role");
    return cJSON_IsString(r) && strcmp(r->valuestring, role) == 0;
}

/* Opens one part of a prompt: a blank line after the parts before it, then the label. */
static void coai__prompt_part(coai_buf *out, int *nparts, const char *label)
{
    if ((*nparts)++) coai_buf_puts(out, "\n\n");
    coai_buf_puts(out, label);
}

/* The end of a prompt (coai_prompt_build, coai_conversation_prompt): the request to go on
 * after tool results, then `t` (the scratch buffer for assistant texts) is freed. */
static int coai__prompt_end(coai_buf *out, coai_buf *t, int nparts, int any_tool)
{
    if (any_tool)
        coai__prompt_part(out, &nparts,
                          "\nBased on the tool results above, please continue your response:");
    if (t->err) out->err = 1;
    coai_buf_free(t);
    if (coai_buf_reserve(out, 0)) return -1;   /* make sure data is non-NULL */
    return out->err ? -1 : 0;
}

/* A tool name: [A-Za-z0-9_-]{1,max} (OpenAI: 64, Anthropic: 128). */
static int coai__name_ok(const char *s, size_t max)
{
    size_t i, n = strlen(s);
    if (n < 1 || n > max) return 0;
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* S of "sess_<S>__call_..." (S = [A-Za-z0-9]+, at most 32) wherever it stands in the id (a
 * client may prefix, wrap or extend the ids it was given: "call_sess_S__call_B",
 * "fc-sess_S__call_B-1"), or an empty view. */
static coai_str coai__core_session_of(coai_str id)
{
    coai_str s = { "", 0 };
    size_t at, i;
    for (at = 0; at + 5 <= id.len; at++) {
        if (memcmp(id.ptr + at, "sess_", 5) != 0) continue;
        i = at + 5;
        while (i < id.len) {
            char c = id.ptr[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
                break;
            i++;
        }
        if (i == at + 5 || i - at - 5 > 32 || id.len - i < 7
            || memcmp(id.ptr + i, "__call_", 7) != 0)
            continue;
        s.ptr = id.ptr + at + 5;
        s.len = i - at - 5;
        return s;
    }
    return s;
}

static int coai__core_bad(coai_error *err, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    coai__core_error_vset(err, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    err->no_retry = 1;
    return COAI_ERR_INVALID;
}

/* ---- the neutral request (core) --------------------------------------------- */

/* A zeroed heap block owned by the request (freed by coai_request_free). */
static void *coai__req_alloc(coai_request *req, size_t n)
{
    void *p;
    if (n == 0) n = 1;
    p = calloc(1, n);
    if (!p) return NULL;
    if (coai_buf_append(&req->mem_, &p, sizeof p)) { free(p); return NULL; }
    return p;
}

/* A part's field path for error messages (coai_part.path), printed into request memory;
 * NULL (the neutral path is used) when out of memory, which the parse then reports. */
static const char *coai__req_path(coai_request *req, const char *fmt, ...)
{
    char tmp[160], *p;
    size_t n;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    n = strlen(tmp) + 1;
    p = (char *)coai__req_alloc(req, n);
    if (!p) { req->mem_.err = 1; return NULL; }
    memcpy(p, tmp, n);
    return p;
}

void coai_request_free(coai_request *req)
{
    size_t i, k = req->mem_.len / sizeof(void *);
    for (i = 0; i < req->image_count; i++) coai_image_free(&req->images[i]);
    free(req->images);
    for (i = 0; i < k; i++) {
        void *p;
        memcpy(&p, req->mem_.data + i * sizeof p, sizeof p);
        free(p);
    }
    coai_buf_free(&req->mem_);
    cJSON_Delete(req->root_);
    free(req->tools);
    coai_buf_free(&req->prompt);
    memset(req, 0, sizeof *req);
}

#define COAI__OLD_IMAGE_MARKER "[image omitted: attached to an earlier message]"

/* Text parts joined by "\n". old_images = 1 (a user message or tool result before the
 * newest user message): each image part becomes COAI__OLD_IMAGE_MARKER, since only the
 * current turn's images are sent (IMAGE part); 0: images add no text (they travel as
 * selected images). */
static void coai__conv_text(coai_buf *out, const coai_message *m, int old_images)
{
    size_t i;
    int first = 1;
    for (i = 0; i < m->part_count; i++) {
        if (m->parts[i].kind == COAI_PART_IMAGE && old_images) {
            if (!first) coai_buf_putc(out, '\n');
            coai_buf_puts(out, COAI__OLD_IMAGE_MARKER);
            first = 0;
            continue;
        }
        if (m->parts[i].kind != COAI_PART_TEXT) continue;
        if (!first) coai_buf_putc(out, '\n');
        coai__core_put_str(out, m->parts[i].text);
        first = 0;
    }
}

/* Index of the newest USER message, or count when there is none. */
static size_t coai__last_user(const coai_message *msgs, size_t count)
{
    size_t i, last = count;
    for (i = 0; i < count; i++) if (msgs[i].role == COAI_ROLE_USER) last = i;
    return last;
}

int coai_conversation_prompt(coai_buf *out, const coai_message *msgs, size_t count)
{
    size_t i, j, last_user = coai__last_user(msgs, count);
    int nparts = 0, any_system = 0, any_tool = 0;
    coai_buf t = { 0 };
    for (i = 0; i < count; i++) {
        if (msgs[i].role != COAI_ROLE_SYSTEM) continue;
        if (any_system) coai_buf_putc(out, '\n');
        coai__conv_text(out, &msgs[i], 0);
        any_system = 1;
    }
    if (any_system) nparts = 1;
    for (i = 0; i < count; i++) {
        const coai_message *m = &msgs[i];
        /* user and tool texts go straight into out: a temporary copy of a big message
         * would cost its size once more at the peak */
        if (m->role == COAI_ROLE_USER) {
            coai__prompt_part(out, &nparts, "User: ");
            coai__conv_text(out, m, i != last_user);
            continue;
        }
        if (m->role == COAI_ROLE_TOOL) {
            coai__prompt_part(out, &nparts, "[Tool result for ");
            coai__core_put_str(out, m->tool_call_id);
            /* Only dialects with an error flag set it (Anthropic is_error). */
            coai_buf_puts(out, m->is_error ? " (error)]: " : "]: ");
            coai__conv_text(out, m, i < last_user || last_user == count);
            any_tool = 1;
            continue;
        }
        coai_buf_reset(&t);
        coai__conv_text(&t, m, 0);
        if (m->role == COAI_ROLE_ASSISTANT) {
            if (m->call_count) {
                coai__prompt_part(out, &nparts, "Assistant: ");
                if (t.len) { coai_buf_append(out, t.data, t.len); coai_buf_putc(out, '\n'); }
                for (j = 0; j < m->call_count; j++) {
                    if (j) coai_buf_putc(out, '\n');
                    coai_buf_puts(out, "[Called tool: ");
                    coai__core_put_str(out, m->calls[j].name);
                    coai_buf_putc(out, '(');
                    coai__core_put_str(out, m->calls[j].args);
                    coai_buf_puts(out, ")]");
                }
            } else if (t.len) {
                coai__prompt_part(out, &nparts, "Assistant: ");
                coai_buf_append(out, t.data, t.len);
            }
        }
    }
    return coai__prompt_end(out, &t, nparts, any_tool);
}

/* Requests Cursor has no field for, asked for in words at the end of the prompt (best
 * effort; the reply checks what it can: coai_reply_opts json_check). */
static int coai__request_instructions(coai_request *req)
{
    coai_buf *b = &req->prompt;
    if (req->tool_choice == COAI_TOOL_CHOICE_ANY && req->tool_count)
        coai_buf_puts(b, "\n\n[Instruction: answer by calling one of the available tools; "
                         "do not answer with text only.]");
    else if (req->tool_choice == COAI_TOOL_CHOICE_TOOL && req->tool_count) {
        coai_buf_puts(b, "\n\n[Instruction: answer by calling the tool ");
        coai_buf_append(b, req->tools[0].name.ptr, req->tools[0].name.len);
        coai_buf_puts(b, ".]");
    }
    if (req->response_json) {
        coai_buf_puts(b, "\n\n[Output format: answer with exactly one JSON object and nothing "
                         "else: no text before or after it, no Markdown code fences.");
        if (req->response_schema) {
            char *sch = cJSON_PrintUnformatted(req->response_schema);
            if (!sch) return -1;
            coai_buf_puts(b, " The object must match this JSON schema: ");
            coai_buf_puts(b, sch);
            free(sch);
        }
        coai_buf_puts(b, "]");
    }
    return b->err ? -1 : 0;
}

/* The tool_choice rule of every dialect: a named tool must be one of the request's tools
 * (otherwise the prompt would ask for a tool the client never offered). 0 ok, else
 * COAI_ERR_INVALID with a 400 on `param`. */
static int coai__tool_choice_check(const coai_request *req, const char *param,
                                   coai_error *err)
{
    size_t i;
    if (req->tool_choice != COAI_TOOL_CHOICE_TOOL) return 0;
    for (i = 0; i < req->tool_count; i++)
        if (req->tools[i].name.len == req->tool_choice_name.len
            && (!req->tool_choice_name.len
                || memcmp(req->tools[i].name.ptr, req->tool_choice_name.ptr,
                          req->tool_choice_name.len) == 0))
            return 0;
    coai_error_set(err, 400, "invalid_request_error", "invalid_value", param,
                   "%s names the tool '%.*s', which is not in tools", param,
                   (int)(req->tool_choice_name.len > 64 ? 64 : req->tool_choice_name.len),
                   req->tool_choice_name.ptr ? req->tool_choice_name.ptr : "");
    err->no_retry = 1;
    return COAI_ERR_INVALID;
}

/* The stop-sequence rule of every dialect: at most `max` sequences, each API's documented
 * bound (Chat Completions 4, Gemini 5; Anthropic documents none: COAI_MAX_STOP_SEQUENCES).
 * Every sequence is searched for in the held-back text on each delta, so the count is the
 * cost. count is the array's size before anything is read. 0 ok, else COAI_ERR_INVALID with
 * a 400 on `param` naming the bound. */
#ifndef COAI_MAX_STOP_SEQUENCES
#define COAI_MAX_STOP_SEQUENCES 64
#endif
static int coai__stops_check(size_t count, size_t max, const char *param, coai_error *err)
{
    if (count <= max) return 0;
    coai_error_set(err, 400, "invalid_request_error", "too_many_stop_sequences", param,
                   "%s: %zu stop sequences; at most %zu are accepted", param, count, max);
    err->no_retry = 1;
    return COAI_ERR_INVALID;
}

/* What every parser does last: the session id of the newest "sess_<S>__call_" id in
 * the history (tool-call ids as in REQUEST), tool_choice "none", the prompt. 0 ok, -1 no memory. */
static int coai__request_finish(coai_request *req)
{
    size_t i, j;
    for (i = req->message_count; i-- > 0 && !req->session_id.len;) {
        const coai_message *m = &req->messages[i];
        if (m->role == COAI_ROLE_TOOL) req->session_id = coai__core_session_of(m->tool_call_id);
        for (j = 0; j < m->call_count && !req->session_id.len; j++)
            req->session_id = coai__core_session_of(m->calls[j].id);
    }
    for (i = 0; i < req->message_count; i++)
        if (req->messages[i].role == COAI_ROLE_TOOL) req->has_tool_messages = 1;
    if (req->tool_choice == COAI_TOOL_CHOICE_NONE) {
        req->tools_disabled = 1;
        free(req->tools);
        req->tools = NULL;
        req->tool_count = 0;
    }
    /* A named tool (emulated): the run is offered that tool only, and told to call it. */
    if (req->tool_choice == COAI_TOOL_CHOICE_TOOL && req->tool_count) {
        for (i = 0; i < req->tool_count; i++) {
            coai_str nm = req->tools[i].name;
            if (nm.len == req->tool_choice_name.len
                && memcmp(nm.ptr, req->tool_choice_name.ptr, nm.len) == 0) {
                req->tools[0] = req->tools[i];
                req->tool_count = 1;
                break;
            }
        }
    }
    if (req->mem_.err) return -1;
    if (coai_conversation_prompt(&req->prompt, req->messages, req->message_count)) return -1;
    return coai__request_instructions(req);
}

static void coai__conv_field(br_sha256_context *h, unsigned char tag, coai_str s)
{
    unsigned char b[5];
    b[0] = tag;
    b[1] = (unsigned char)(s.len >> 24); b[2] = (unsigned char)(s.len >> 16);
    b[3] = (unsigned char)(s.len >> 8); b[4] = (unsigned char)s.len;
    br_sha256_update(h, b, 5);
    if (s.len) br_sha256_update(h, s.ptr, s.len);
}

void coai_conversation_digest_next(const unsigned char prev[32], const coai_message *m,
                                   unsigned char next[32])
{
    br_sha256_context h;
    unsigned char role = (unsigned char)('0' + (int)m->role);
    size_t i;
    br_sha256_init(&h);
    br_sha256_update(&h, prev, 32);
    br_sha256_update(&h, &role, 1);
    for (i = 0; i < m->part_count; i++) {
        const coai_part *p = &m->parts[i];
        if (p->kind == COAI_PART_TEXT) coai__conv_field(&h, 'T', p->text);
        else if (p->kind == COAI_PART_IMAGE) {
            coai__conv_field(&h, 'I', p->data);
            coai__conv_field(&h, 'U', p->url);
        }
    }
    for (i = 0; i < m->call_count; i++) {
        coai__conv_field(&h, 'C', m->calls[i].id);
        coai__conv_field(&h, 'N', m->calls[i].name);
        coai__conv_field(&h, 'A', m->calls[i].args);
    }
    if (m->role == COAI_ROLE_TOOL) {
        coai__conv_field(&h, 'R', m->tool_call_id);
        coai__conv_field(&h, m->is_error ? 'E' : 'O', coai_str_c(""));
    }
    br_sha256_out(&h, next);
}

int coai_conversation_digests(const coai_message *msgs, size_t n, unsigned char (*out)[32])
{
    static const unsigned char zero[32];
    size_t i;
    for (i = 0; i < n; i++)
        coai_conversation_digest_next(i ? out[i - 1] : zero, &msgs[i], out[i]);
    return 0;
}

size_t coai_request_trailing_tool_ids(const coai_request *req, coai_str *ids, size_t cap)
{
    size_t i = req->message_count, n = 0;
    while (i > 0 && req->messages[i - 1].role == COAI_ROLE_TOOL) i--;
    for (; i < req->message_count && n < cap; i++) ids[n++] = req->messages[i].tool_call_id;
    return n;
}

int coai_request_tool_result(const coai_request *req, coai_str call_id, coai_buf *out,
                             int *is_error)
{
    const coai_message *hit = NULL;
    size_t i, k;
    int first = 1;
    for (i = 0; i < req->message_count; i++) {
        const coai_message *m = &req->messages[i];
        if (m->role == COAI_ROLE_TOOL && m->tool_call_id.len == call_id.len
            && (!call_id.len || memcmp(m->tool_call_id.ptr, call_id.ptr, call_id.len) == 0))
            hit = m;
    }
    if (!hit) return -1;
    for (k = 0; k < hit->part_count; k++) {
        if (hit->parts[k].kind != COAI_PART_TEXT) continue;
        if (!first) coai_buf_putc(out, '\n');
        coai_buf_append(out, hit->parts[k].text.ptr, hit->parts[k].text.len);
        first = 0;
    }
    if (is_error) *is_error = hit->is_error;
    return out->err ? -1 : 0;
}

size_t coai_request_tool_result_images(const coai_request *req, coai_str call_id,
                                       const struct coai_image **out)
{
    size_t first = coai__last_user(req->messages, req->message_count), hit = SIZE_MAX;
    size_t i, k, off = 0, n = 0;
    *out = NULL;
    for (i = 0; i < req->message_count; i++) {
        const coai_message *m = &req->messages[i];
        if (m->role == COAI_ROLE_TOOL && m->tool_call_id.len == call_id.len
            && (!call_id.len || memcmp(m->tool_call_id.ptr, call_id.ptr, call_id.len) == 0))
            hit = i;
    }
    if (hit == SIZE_MAX || first >= req->message_count || hit < first) return 0;
    /* the same walk as the decoder (coai__request_images): user and tool messages of the
     * current turn, parts in order */
    for (i = first; i <= hit; i++) {
        const coai_message *m = &req->messages[i];
        if (m->role != COAI_ROLE_USER && m->role != COAI_ROLE_TOOL) continue;
        for (k = 0; k < m->part_count; k++) {
            if (m->parts[k].kind != COAI_PART_IMAGE) continue;
            if (i < hit) off++;
            else n++;
        }
    }
    if (!n || off + n > req->image_count) return 0;
    *out = req->images + off;
    return n;
}

void coai_request_params(const coai_request *req, coai_run_params *p)
{
    p->prompt.ptr = req->prompt.data ? (const char *)req->prompt.data : "";
    p->prompt.len = req->prompt.len;
    p->tools = req->tool_count ? req->tools : NULL;
    p->tool_count = req->tool_count;
    p->images = req->image_count ? req->images : NULL;
    p->image_count = req->image_count;
}

/* Reject "\u0000" escapes: cJSON would cut the string there. Backslashes only occur
 * inside strings in valid JSON, so a flat scan over escape pairs is exact. */
static int coai__core_has_nul_escape(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] != '\\') { i++; continue; }
        if (i + 1 < n && s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
            return 1;
        i += 2;
    }
    return 0;
}

/* The checks every dialect's body gets: valid UTF-8 without NUL bytes or "\u0000"
 * escapes, one JSON object and nothing after it. 0 and *root (the caller deletes it), or
 * a negative coai_result with err filled (400). */
static int coai__json_body(const char *body, size_t n, cJSON **root, coai_error *err)
{
    const char *end = NULL;
    cJSON *j;
    *root = NULL;
    memset(err, 0, sizeof *err);
    if (!body) n = 0;
    if (coai_utf8_valid_prefix(body ? body : "", n) != n || (n && memchr(body, 0, n))) {
        coai__core_bad(err, NULL, "The request body is not valid UTF-8 text");
        return COAI_ERR_UTF8;
    }
    if (coai__core_has_nul_escape(body, n)) {
        coai__core_bad(err, NULL, "Strings must not contain \\u0000");
        return COAI_ERR_INVALID;
    }
    j = n ? cJSON_ParseWithLengthOpts(body, n, &end, 0) : NULL;
    if (j && end) {
        while (end < body + n && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
        if (end != body + n) { cJSON_Delete(j); j = NULL; }
    }
    if (!j) {
        coai__core_bad(err, NULL, "We could not parse the JSON body of your request (invalid "
                  "JSON, or nested deeper than the limit)");
        return COAI_ERR_JSON;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        coai__core_bad(err, NULL, "The request body must be a JSON object");
        return COAI_ERR_INVALID;
    }
    *root = j;
    return 0;
}

static int coai__core_str_same(coai_str a, coai_str b);

/* A whole number >= 1 (max_tokens and friends). */
static int coai__core_count(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e15
        || v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* ---- models -------------------------------------------------------------- */

void coai_models_free(coai_models *m)
{
    cJSON_Delete(m->root_);
    free(m->items);
    memset(m, 0, sizeof *m);
}

int coai_models_parse(coai_models *m, const char *json, size_t n)
{
    const cJSON *list, *e;
    int count;
    memset(m, 0, sizeof *m);
    if (!json || coai_utf8_valid_prefix(json, n) != n) return COAI_ERR_JSON;
    m->root_ = cJSON_ParseWithLength(json, n);
    list = coai__core_get(m->root_, "models");
    if (!cJSON_IsArray(list)) { coai_models_free(m); return COAI_ERR_JSON; }
    count = cJSON_GetArraySize(list);
    if (count == 0) return 0;
    m->items = (coai_model *)calloc((size_t)count, sizeof *m->items);
    if (!m->items) { coai_models_free(m); return COAI_ERR_NOMEM; }
    cJSON_ArrayForEach(e, list) {
        coai_model *it = &m->items[m->count];
        const cJSON *al = coai__core_get(e, "aliases");
        it->id = coai__core_jstr(coai__core_get(e, "modelId"));
        it->display_id = coai__core_jstr(coai__core_get(e, "displayModelId"));
        it->display_name = coai__core_jstr(coai__core_get(e, "displayName"));
        it->aliases_ = cJSON_IsArray(al) ? al : NULL;
        if (!it->id.len) it->id = it->display_id;
        if (!it->id.len) continue;
        m->count++;
    }
    return 0;
}

static int coai__core_str_same(coai_str a, coai_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

coai_str coai_models_resolve(const coai_models *m, coai_str requested)
{
    coai_str hit = requested;
    size_t i;
    if (requested.len == 0) hit = requested = coai_str_c("auto");
    for (i = 0; m && i < m->count; i++) {
        const coai_model *it = &m->items[i];
        const cJSON *a;
        int match = coai__core_str_same(it->id, requested)
                    || (it->display_id.len && coai__core_str_same(it->display_id, requested));
        if (!match && it->aliases_) {
            cJSON_ArrayForEach(a, it->aliases_) {
                if (cJSON_IsString(a) && coai__core_str_same(coai__core_jstr(a), requested)) match = 1;
            }
        }
        if (match) hit = it->id;            /* later entries win, as in the original */
    }
    return hit;
}

static int coai__core_str_has(coai_str s, const char *needle)
{
    return coai__core_ci_contains(s.ptr, s.len, needle);
}

void coai_model_limits(coai_str id, uint32_t *ctx, uint32_t *outp)
{
    static const char *const big[] = { "sonnet-4.5", "sonnet-4.5-thinking", "opus-4.5",
                                       "opus-4.5-thinking", NULL };
    static const char *const gpt[] = { "gpt-5.2", "gpt-5.2-high", "gpt-5.1", "gpt-5.1-high",
                                       "gpt-5.1-codex", "gpt-5.1-codex-high",
                                       "gpt-5.1-codex-max", "gpt-5.1-codex-max-high", NULL };
    size_t i;
    *ctx = 128000;
    *outp = 16384;
    for (i = 0; big[i]; i++)
        if (coai_str_eq(id, big[i])) { *ctx = 200000; *outp = 64000; return; }
    if (coai_str_eq(id, "opus-4.1")) { *ctx = 200000; *outp = 32000; return; }
    if (coai_str_eq(id, "gemini-3-pro") || coai_str_eq(id, "gemini-3-flash")) {
        *ctx = 1048576; *outp = 65536; return;
    }
    for (i = 0; gpt[i]; i++)
        if (coai_str_eq(id, gpt[i])) { *ctx = 400000; *outp = 128000; return; }
    if (coai__core_str_has(id, "grok")) { *ctx = 256000; *outp = 32768; }
}

int coai_model_alias(const coai_model *m, size_t i, coai_str *out)
{
    const cJSON *a;
    size_t k = 0;
    if (!m || !m->aliases_) return -1;
    cJSON_ArrayForEach(a, m->aliases_) {
        if (!cJSON_IsString(a)) continue;
        if (k++ == i) { *out = coai__core_jstr(a); return 0; }
    }
    return -1;
}

/* One model in OpenAI's shape (an item of the list, GET /v1/models/{model}). */
static void coai__core_model_obj(coai_buf *out, const coai_model *it, int64_t created)
{
    coai_str id = it->display_id.len ? it->display_id : it->id;
    coai_str who = it->display_name.len ? it->display_name : id;
    const char *owner = "cursor";
    uint32_t ctx, outp;
    if (coai__core_str_has(who, "claude") || coai__core_str_has(who, "opus")
        || coai__core_str_has(who, "sonnet"))
        owner = "anthropic";
    else if (coai__core_str_has(who, "gpt")) owner = "openai";
    else if (coai__core_str_has(who, "gemini")) owner = "google";
    else if (coai__core_str_has(who, "grok")) owner = "xai";
    coai_model_limits(id, &ctx, &outp);
    coai_buf_puts(out, "{\"id\":");
    coai_json_str_append(out, id.ptr, id.len);
    coai_buf_printf(out, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"%s\","
                    "\"context_length\":%lu,\"max_output_tokens\":%lu}",
                    (long long)created, owner, (unsigned long)ctx, (unsigned long)outp);
}

int coai_models_write_list(coai_buf *out, const coai_models *m, int64_t created)
{
    size_t i;
    coai_buf_puts(out, "{\"object\":\"list\",\"data\":[");
    for (i = 0; m && i < m->count; i++) {
        if (i) coai_buf_putc(out, ',');
        coai__core_model_obj(out, &m->items[i], created);
    }
    return coai_buf_puts(out, "]}");
}

int coai_models_write_model(coai_buf *out, const coai_model *one, int64_t created)
{
    coai__core_model_obj(out, one, created);
    return out->err ? -1 : 0;
}

/* ---- exec -> tool call mapping --------------------------------------------- */

/* Tool names compare ignoring case and the separators '_', '-', '.' and ' ' (Claude
 * Code's "Bash", "run-shell-command", "Read_File" ...). */
static int coai__core_name_like(coai_str a, coai_str b)
{
    size_t i = 0, j = 0;
    for (;;) {
        char x = 0, y = 0;
        while (i < a.len && (a.ptr[i] == '_' || a.ptr[i] == '-' || a.ptr[i] == '.'
                             || a.ptr[i] == ' '))
            i++;
        while (j < b.len && (b.ptr[j] == '_' || b.ptr[j] == '-' || b.ptr[j] == '.'
                             || b.ptr[j] == ' '))
            j++;
        if (i == a.len || j == b.len) return i == a.len && j == b.len;
        x = a.ptr[i++];
        y = b.ptr[j++];
        if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
        if (x != y) return 0;
    }
}

/* The schema's own spelling of a parameter named like one of cands: a candidate it declares
 * exactly (in the candidates' order), else a declared name that differs from a candidate
 * only in case and the separators '_', '-', '.', ' ' (filepath, FilePath, file-path for
 * filePath), as tool names match. NULL when none. */
static const char *coai__core_prop(const coai_tool *t, const char *const *cands)
{
    const cJSON *props = coai__core_get(t->parameters, "properties"), *p;
    size_t k;
    if (!cJSON_IsObject(props)) return NULL;
    for (k = 0; cands[k]; k++)
        if (cJSON_GetObjectItemCaseSensitive(props, cands[k])) return cands[k];
    for (k = 0; cands[k]; k++)
        cJSON_ArrayForEach(p, props)
            if (p->string && coai__core_name_like(coai_str_c(p->string), coai_str_c(cands[k])))
                return p->string;
    return NULL;
}

/* The client's parameter name for a logical argument: coai__core_prop, else the first
 * candidate (the original's name). */
static const char *coai__core_param(const coai_tool *t, const char *const *cands)
{
    const char *p = coai__core_prop(t, cands);
    return p ? p : cands[0];
}

/* The same for a tool's one main argument (a read's path, a shell's command): when the
 * schema names none of the candidates but requires exactly one parameter, a string, that
 * is the one (the meaning is not in doubt: the tool takes nothing else it needs). */
static const char *coai__core_param_main(const coai_tool *t, const char *const *cands)
{
    const cJSON *req = coai__core_get(t->parameters, "required"), *props, *r, *pr, *ty;
    const char *only = NULL, *p = coai__core_prop(t, cands);
    int n = 0;
    if (p) return p;
    props = coai__core_get(t->parameters, "properties");
    if (!cJSON_IsArray(req) || !cJSON_IsObject(props)) return cands[0];
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return cands[0];
        pr = cJSON_GetObjectItemCaseSensitive(props, r->valuestring);
        ty = pr ? cJSON_GetObjectItemCaseSensitive(pr, "type") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "string") != 0) return cands[0];
        only = r->valuestring;
        n++;
    }
    return n == 1 ? only : cands[0];
}

static int coai__core_has_param(const coai_tool *t, const char *const *cands)
{
    return coai__core_prop(t, cands) != NULL;
}

/* An optional member (description, cwd, path) the client's schema does not declare goes
 * in only when the schema allows undeclared members: with "additionalProperties": false
 * (Claude Code's tools, OpenAI strict mode) the client would reject the whole call. The
 * the original's shapes (a bash declaring only command still gets description and cwd) stay
 * for schemas that allow them. */
static int coai__core_may(const coai_tool *t, const char *const *cands)
{
    const cJSON *ap = coai__core_get(t->parameters, "additionalProperties");
    return !cJSON_IsFalse(ap) || coai__core_has_param(t, cands);
}

static void coai__core_arg(coai_buf *b, const char *key, coai_str val)
{
    if (b->len > 1) coai_buf_putc(b, ',');     /* b holds "{" before the first member */
    coai_json_str_append(b, key, strlen(key));
    coai_buf_putc(b, ':');
    coai_json_str_append(b, val.ptr, val.len);
}

/* Bash description: "Execute shell command: " + the first 60 UTF-16 units of the
 * command (+ "..." when longer). A surrogate pair is never split. */
static void coai__core_shell_desc(coai_buf *b, coai_str cmd)
{
    const unsigned char *p = (const unsigned char *)cmd.ptr;
    size_t i = 0, units = 0;
    coai_buf_puts(b, "Execute shell command: ");
    while (i < cmd.len) {
        int k = coai__utf8_seq(p + i, cmd.len - i);
        size_t w = k == 4 ? 2 : 1;
        if (k <= 0) k = 1;
        if (units + w > 60) break;
        units += w;
        i += (size_t)k;
    }
    coai_buf_append(b, cmd.ptr, i);
    if (i < cmd.len) coai_buf_puts(b, "...");
}

/* ---- what a client tool does: its role, read from its schema -------------------------
 * Cursor's native execs (read, write, ls, grep, glob, delete, shell, fetch) go to the
 * client's tool whose role fits, whatever the tool is called. A tool's role is scored
 * from what it declares, in this order of weight:
 *   1. its parameters (properties, their JSON types, "required", enums): a command
 *      string (command, cmd, script, command_line) -> shell; a command array of strings
 *      -> shell taking argv; a plural commands array -> shell taking a list of
 *      commands; a string enum holding view / create / str_replace / insert (any
 *      property, e.g. command or action) with a path -> an editor (view = read,
 *      create = write); a path with old and new text -> edit; a path with content ->
 *      write; a url -> fetch; a regex pattern (pattern, regex; query and search
 *      count less) -> grep or glob, grep when it also takes a file filter (include,
 *      glob, include_pattern); a path and nothing else required (line offsets and
 *      ignore lists are fine), or an array of paths -> read, list or delete, a file
 *      path (file_path, filename, absolute_path ...) leaning to read and delete, a
 *      directory (dir_path, directory, folder) to list. Parameter names are matched
 *      ignoring case and separators (filePath = file_path).
 *      A tool that requires a parameter none of these (Cursor's exec has nothing to
 *      give it) takes no role.
 *   2. the first sentence of its description: words such as "reads", "lists",
 *      "deletes", "regex", "glob", "executes", "shell", "fetches". A tool whose name
 *      or description speaks of images, screenshots, notebooks, memory, todos,
 *      workflows, subagents or skills takes none of these roles; one that speaks of the
 *      web only fetch.
 *   3. its name's words (read, list, ls, dir, grep, search, glob, find, write, create,
 *      bash, shell, run, exec, delete, rm, fetch ...): one point, enough only to break
 *      a tie. A tool that declares no parameters at all has nothing else to go by.
 * Among the tools of one role the highest score wins; on a tie, the names Cursor's own
 * tools and the common agents use (coai_exec_map's lists) rank first, then the order
 * the client listed its tools in. No name decides on its own: a tool whose schema
 * says something else is not taken for its name. */
static int coai__core_alnum(char c);

enum {
    COAI__R_NONE = 0, COAI__R_READ, COAI__R_WRITE, COAI__R_EDIT, COAI__R_EDITOR,
    COAI__R_SHELL, COAI__R_LIST, COAI__R_GREP, COAI__R_GLOB, COAI__R_DELETE, COAI__R_FETCH,
    COAI__R_COUNT
};

/* What a tool's schema declares (property names as the schema spells them, or NULL) */
typedef struct coai__tfeat {
    const char *path, *paths, *content, *oldp, *newp, *cmd, *pattern, *include, *url;
    const char *op;                 /* the editor's enum property */
    const char *op_view, *op_create; /* its values for reading and creating a file */
    int cmd_kind;                   /* 1 a string, 2 argv (array), 3 a list of commands */
    int path_kind;                  /* 1 a file, 2 a directory, 0 either */
    int pattern_weak;               /* the pattern is a "query" or "search" */
    int other_required;             /* a required property that is none of the above */
    int has_props;
} coai__tfeat;

static int coai__ro_in(const char *name, const char *const *vocab)
{
    size_t k;
    for (k = 0; vocab[k]; k++)
        if (coai__core_name_like(coai_str_c(name), coai_str_c(vocab[k]))) return 1;
    return 0;
}

/* 1 a property that takes a string (or says no type), 2 an array (of strings when the
 * items say), 0 anything else */
static int coai__ro_type(const cJSON *p)
{
    const cJSON *ty = coai__core_get(p, "type"), *it;
    int s = 0, a = 0;
    if (!ty) return 1;
    if (cJSON_IsString(ty)) {
        s = strcmp(ty->valuestring, "string") == 0;
        a = strcmp(ty->valuestring, "array") == 0;
    } else if (cJSON_IsArray(ty)) {
        cJSON_ArrayForEach(it, ty) {
            if (!cJSON_IsString(it)) continue;
            s |= strcmp(it->valuestring, "string") == 0;
            a |= strcmp(it->valuestring, "array") == 0;
        }
    }
    if (a) {
        const cJSON *items = coai__core_get(p, "items");
        const cJSON *ity = coai__core_get(items, "type");
        if (ity && !(cJSON_IsString(ity) && strcmp(ity->valuestring, "string") == 0)) return 0;
        return 2;
    }
    return s ? 1 : 0;
}

static void coai__ro_feat(const coai_tool *t, coai__tfeat *f)
{
    static const char *const v_file[] = { "file_path", "filename", "file", "absolute_path",
                                          "target_file", "target_path", "relative_path",
                                          "file_name", NULL };
    static const char *const v_dir[] = { "dir_path", "directory", "dir", "folder",
                                         "directory_path", "target_directory", NULL };
    static const char *const v_path[] = { "path", NULL };
    static const char *const v_paths[] = { "paths", "file_paths", "files", "filenames",
                                           "absolute_paths", NULL };
    static const char *const v_content[] = { "content", "contents", "file_text", "text",
                                             "file_content", NULL };
    static const char *const v_old[] = { "old_string", "old_str", "old_text", NULL };
    static const char *const v_new[] = { "new_string", "new_str", "new_text", NULL };
    static const char *const v_cmd[] = { "command", "cmd", "script", "command_line",
                                         "shell_command", NULL };
    static const char *const v_cmds[] = { "commands", "cmds", "scripts", NULL };
    static const char *const v_desc[] = { "description", NULL };
    static const char *const v_argv[] = { "argv", NULL };
    static const char *const v_pat[] = { "pattern", "regex", "regexp", "search_pattern", NULL };
    static const char *const v_query[] = { "query", "search", NULL };
    static const char *const v_inc[] = { "include", "glob", "file_pattern", "include_pattern",
                                         "file_glob", NULL };
    static const char *const v_url[] = { "url", "uri", "href", NULL };
    static const char *const e_view[] = { "view", "read", NULL };
    static const char *const e_create[] = { "create", "write", NULL };
    static const char *const e_edit[] = { "str_replace", "insert", "edit", "replace", NULL };
    const cJSON *props = coai__core_get(t->parameters, "properties"), *p, *req, *r;
    memset(f, 0, sizeof *f);
    if (!cJSON_IsObject(props)) return;
    /* properties declared, even none: such a tool takes no argument, so it serves no exec
     * (Copilot's list_bash {} is no shell); only a tool with no schema goes by its name */
    f->has_props = 1;
    cJSON_ArrayForEach(p, props) {
        const char *n = p->string;
        const cJSON *en = coai__core_get(p, "enum");
        int ty = coai__ro_type(p);
        if (!n) continue;
        if (ty == 1 && cJSON_IsArray(en)) {
            /* an operation enum: view / create / str_replace ... */
            const cJSON *v;
            const char *vv = NULL, *vc = NULL;
            int edit = 0;
            cJSON_ArrayForEach(v, en) {
                if (!cJSON_IsString(v)) continue;
                if (!vv && coai__ro_in(v->valuestring, e_view)) vv = v->valuestring;
                if (!vc && coai__ro_in(v->valuestring, e_create)) vc = v->valuestring;
                if (coai__ro_in(v->valuestring, e_edit)) edit = 1;
            }
            if ((vv || vc) && (edit || (vv && vc)) && !f->op) {
                f->op = n;
                f->op_view = vv;
                f->op_create = vc;
            }
            continue;
        }
        if (ty == 1 && !f->path && coai__ro_in(n, v_file)) { f->path = n; f->path_kind = 1; }
        else if (ty == 1 && !f->path && coai__ro_in(n, v_dir)) { f->path = n; f->path_kind = 2; }
        else if (ty == 1 && coai__ro_in(n, v_path)) { f->path = n; f->path_kind = 0; }
        else if (ty == 2 && !f->paths && coai__ro_in(n, v_paths)) f->paths = n;
        else if (ty == 1 && !f->content && coai__ro_in(n, v_content)) f->content = n;
        else if (ty == 1 && !f->oldp && coai__ro_in(n, v_old)) f->oldp = n;
        else if (ty == 1 && !f->newp && coai__ro_in(n, v_new)) f->newp = n;
        else if (ty == 1 && !f->cmd && coai__ro_in(n, v_cmd)) { f->cmd = n; f->cmd_kind = 1; }
        else if (ty == 2 && !f->cmd && (coai__ro_in(n, v_cmd) || coai__ro_in(n, v_argv))) {
            f->cmd = n;
            f->cmd_kind = 2;
        } else if (ty == 2 && !f->cmd && coai__ro_in(n, v_cmds)) { f->cmd = n; f->cmd_kind = 3; }
        else if (ty == 1 && coai__ro_in(n, v_pat)) { f->pattern = n; f->pattern_weak = 0; }
        else if (ty == 1 && !f->pattern && coai__ro_in(n, v_query)) {
            f->pattern = n;
            f->pattern_weak = 1;
        } else if (ty == 1 && !f->include && coai__ro_in(n, v_inc)) f->include = n;
        else if (ty == 1 && !f->url && coai__ro_in(n, v_url)) f->url = n;
    }
    req = coai__core_get(t->parameters, "required");
    if (!cJSON_IsArray(req)) req = NULL;
    cJSON_ArrayForEach(r, req) {
        const char *n = cJSON_IsString(r) ? r->valuestring : "";
        const char *known[11];
        size_t k, hit = 0;
        known[0] = f->path; known[1] = f->paths; known[2] = f->content; known[3] = f->oldp;
        known[4] = f->newp; known[5] = f->cmd; known[6] = f->pattern; known[7] = f->include;
        known[8] = f->url; known[9] = f->op; known[10] = NULL;
        for (k = 0; k < 10; k++)
            if (known[k] && strcmp(known[k], n) == 0) hit = 1;
        /* a shell's description is written by the mapping (OpenCode's bash requires one) */
        if (f->cmd && coai__ro_in(n, v_desc)) hit = 1;
        if (!hit) f->other_required = 1;
    }
}

/* The words of s (a name split at separators and case changes, or a sentence),
 * lower-cased, each checked against vocab: 1 when one is there. */
static int coai__ro_words(coai_str s, const char *const *vocab)
{
    size_t i = 0;
    while (i < s.len) {
        char w[24];
        size_t k = 0, j;
        while (i < s.len && !coai__core_alnum(s.ptr[i])) i++;
        while (i < s.len && coai__core_alnum(s.ptr[i])) {
            char ch = s.ptr[i];
            if (k && ch >= 'A' && ch <= 'Z' && s.ptr[i - 1] >= 'a' && s.ptr[i - 1] <= 'z')
                break;                                      /* readFile: read, file */
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
            if (k + 1 < sizeof w) w[k++] = ch;
            i++;
        }
        w[k] = 0;
        for (j = 0; k && vocab[j]; j++)
            if (strcmp(w, vocab[j]) == 0) return 1;
    }
    return 0;
}

/* The first sentence of a description (what the tool does; the rest is usage advice that
 * names other tools), at most 200 bytes */
static coai_str coai__ro_first(coai_str d)
{
    size_t i;
    while (d.len && (d.ptr[0] == ' ' || d.ptr[0] == '-' || d.ptr[0] == '\n' || d.ptr[0] == '*'))
        d.ptr++, d.len--;
    for (i = 0; i < d.len && i < 200; i++)
        if (d.ptr[i] == '\n' || (d.ptr[i] == '.' && (i + 1 == d.len || d.ptr[i + 1] == ' ')))
            break;
    d.len = i;
    return d;
}

/* Score of tool t for each role (sc[COAI__R_COUNT], 0 = not that role) */
static void coai__ro_scores(const coai_tool *t, const coai__tfeat *f, int *sc)
{
    static const char *const d_read[] = { "read", "reads", "view", "views", "displays",
                                          "show", "shows", NULL };
    static const char *const d_write[] = { "write", "writes", "create", "creates", "save",
                                           "saves", "overwrite", "overwrites", NULL };
    static const char *const d_list[] = { "list", "lists", "listing", "ls", NULL };
    static const char *const d_grep[] = { "grep", "ripgrep", "regex", "regular", "search",
                                          "searches", NULL };
    static const char *const d_glob[] = { "glob", "globs", "find", "finds", NULL };
    static const char *const d_shell[] = { "shell", "bash", "terminal", "execute", "executes",
                                           "run", "runs", "command", "commands", NULL };
    static const char *const d_delete[] = { "delete", "deletes", "remove", "removes",
                                            "unlink", NULL };
    static const char *const d_fetch[] = { "fetch", "fetches", "url", "http", "https",
                                           "download", "downloads", NULL };
    static const char *const n_read[] = { "read", "view", "cat", "open", NULL };
    static const char *const n_write[] = { "write", "create", "save", NULL };
    static const char *const n_list[] = { "list", "ls", "dir", "directory", NULL };
    static const char *const n_grep[] = { "grep", "search", "rg", "ripgrep", NULL };
    static const char *const n_glob[] = { "glob", "find", NULL };
    static const char *const n_shell[] = { "bash", "shell", "sh", "exec", "execute", "run",
                                           "command", "terminal", "cmd", NULL };
    static const char *const n_delete[] = { "delete", "remove", "rm", "unlink", NULL };
    static const char *const n_fetch[] = { "fetch", "url", "http", "curl", NULL };
    static const char *const n_edit[] = { "edit", "replace", "patch", NULL };
    static const char *const no_role[] = { "image", "images", "screenshot", "notebook",
                                           "memory", "todo", "todos", "workflow",
                                           "workflows", "subagent", "subagents", "skill",
                                           "skills", NULL };
    static const char *const web[] = { "web", "internet", "google", "online", NULL };
    coai_str d = coai__ro_first(t->description);
    int path_only, any = !f->has_props, r;
    memset(sc, 0, sizeof(int) * COAI__R_COUNT);
    if (coai__ro_words(t->name, no_role) || coai__ro_words(d, no_role)) return;
    /* a required parameter Cursor's exec gives nothing for: the tool cannot be called */
    if (f->other_required) return;
    /* 1. the parameters */
    if (f->cmd) sc[COAI__R_SHELL] = 10;
    if (f->op && (f->path || f->paths)) sc[COAI__R_EDITOR] = 10;
    if (!f->op && f->path && f->oldp && f->newp) sc[COAI__R_EDIT] = 10;
    if (!f->op && f->path && f->content && !f->oldp && !f->newp && !f->cmd)
        sc[COAI__R_WRITE] = 10;
    if (f->url && !f->cmd && !f->content) sc[COAI__R_FETCH] = 8;
    if (f->pattern && !f->cmd && !f->content && !f->url && !f->op) {
        int base = f->pattern_weak ? 3 : 6;
        sc[COAI__R_GREP] = base + (f->include ? 2 : 0);
        if (!f->include) sc[COAI__R_GLOB] = base;
    }
    path_only = (f->path || f->paths) && !f->content && !f->oldp && !f->newp && !f->cmd
                && !f->pattern && !f->url && !f->op;
    if (path_only) {
        sc[COAI__R_READ] = 4 + (f->paths ? 0 : f->path_kind == 1 ? 2 : 0);
        sc[COAI__R_DELETE] = 4 + (f->path_kind == 1 ? 2 : 0);
        if (!f->paths) sc[COAI__R_LIST] = 4 + (f->path_kind == 2 ? 2 : 0);
    }
    /* 2. the description's first sentence, 3. the name's words; both only for roles the
     * parameters allow (any role for a tool that declares none: what its name says then
     * counts as much as parameters would, nothing contradicting it) */
    for (r = 1; r < COAI__R_COUNT; r++) {
        static const int base[COAI__R_COUNT] = { 0, 4, 10, 10, 10, 10, 4, 6, 6, 4, 8 };
        static const char *const *const dv[COAI__R_COUNT] = {
            NULL, d_read, d_write, NULL, NULL, d_shell, d_list, d_grep, d_glob, d_delete,
            d_fetch };
        static const char *const *const nv[COAI__R_COUNT] = {
            NULL, n_read, n_write, n_edit, NULL, n_shell, n_list, n_grep, n_glob, n_delete,
            n_fetch };
        if (!sc[r] && !any) continue;
        if (dv[r] && coai__ro_words(d, dv[r])) sc[r] += 3;
        if (nv[r] && coai__ro_words(t->name, nv[r])) sc[r] += 1 + (any ? base[r] : 0);
    }
    if (coai__ro_words(t->name, web) || coai__ro_words(d, web))
        for (r = 1; r < COAI__R_COUNT; r++)
            if (r != COAI__R_FETCH) sc[r] = 0;
}

/* The role a tool plays: the best-scoring one (ties: the earlier in the enum), NONE when
 * nothing points anywhere. *score gets its score. */
static int coai__ro_role(const coai_tool *t, coai__tfeat *f, int *score)
{
    int sc[COAI__R_COUNT], r, best = COAI__R_NONE, bs = 0;
    coai__ro_feat(t, f);
    coai__ro_scores(t, f, sc);
    for (r = 1; r < COAI__R_COUNT; r++)
        if (sc[r] > bs) { bs = sc[r]; best = r; }
    if (score) *score = bs;
    return best;
}

/* The client's best tool for a role: the highest score among tools whose role it is
 * (want2: a second role that serves too, e.g. the editor for reads, taken only when no
 * tool has the role itself; 0 none); a tie goes to the earliest name of names (exact,
 * then ignoring case and separators), then to the client's order. 1 found (*idx, *f its features), 0 none. */
static int coai__ro_find(const coai_tool *tools, size_t count, int want, int want2,
                         const char *const *names, size_t *idx, coai__tfeat *fout)
{
    size_t i, k;
    int found = 0, best = 0, best_own = 0;
    long best_rank = -1;
    for (i = 0; i < count; i++) {
        coai__tfeat f;
        int s, role = coai__ro_role(&tools[i], &f, &s), own = role == want;
        long rank = 0;
        if (!own && !(want2 && role == want2)) continue;
        for (k = 0; names && names[k] && !rank; k++) {
            if (coai_str_eq(tools[i].name, names[k])) rank = 2000 - (long)k;
            else if (coai__core_name_like(tools[i].name, coai_str_c(names[k])))
                rank = 1000 - (long)k;
        }
        /* a tool of the role itself before one that also serves it (an editor's view) */
        if (!found || own > best_own || (own == best_own && (s > best
                                                             || (s == best && rank > best_rank)))) {
            found = 1;
            best_own = own;
            best = s;
            best_rank = rank;
            *idx = i;
            if (fout) *fout = f;
        }
    }
    return found;
}

const char *coai_tool_role(const coai_tool *t)
{
    static const char *const names[COAI__R_COUNT] = {
        NULL, "read", "write", "edit", "editor", "shell", "list", "grep", "glob", "delete",
        "fetch" };
    coai__tfeat f;
    return t ? names[coai__ro_role(t, &f, NULL)] : NULL;
}

int coai_exec_refusal(coai_buf *out, const coai_exec *ex, const coai_tool *tools, size_t count)
{
    static const char *const can[COAI__R_COUNT] = {
        NULL, "read files", "write files", "edit files (old and new text)",
        "view, create and edit files", "run shell commands", "list directories",
        "search file contents", "find files by name", "delete files", "fetch URLs" };
    const char *name = coai_exec_kind_name((int)ex->kind), *need = NULL;
    int seen[COAI__R_COUNT], r, n = 0, other = 0;
    size_t i;
    switch (ex->kind) {
    case COAI_EXEC_READ: need = "read a file"; break;
    case COAI_EXEC_WRITE: need = "write a file"; break;
    case COAI_EXEC_DELETE: need = "delete a file"; break;
    case COAI_EXEC_LS: need = "list a directory"; break;
    case COAI_EXEC_GREP: need = ex->pattern.len ? "search file contents" : "find files by name";
        break;
    case COAI_EXEC_SHELL: case COAI_EXEC_SHELL_STREAM: need = "run a shell command"; break;
    case COAI_EXEC_FETCH: need = "fetch a URL"; break;
    default: break;
    }
    coai_buf_printf(out, "This tool%s%s%s is not available here: ", name ? " (" : "",
                    name ? name : "", name ? ")" : "");
    if (!need) {
        coai_buf_puts(out, "the client has no matching tool. Use one of the provided tools "
                      "instead.");
        coai_buf_putc(out, 0);
        return out->err ? -1 : 0;
    }
    memset(seen, 0, sizeof seen);
    for (i = 0; tools && i < count; i++) {
        coai__tfeat f;
        r = coai__ro_role(&tools[i], &f, NULL);
        if (r == COAI__R_NONE) other++;
        else if (!seen[r]) { seen[r] = 1; n++; }
    }
    coai_buf_printf(out, "none of the client's tools can %s", need);
    if (!n && !other) {
        coai_buf_puts(out, ", and it gave none. Answer from what you already know, or tell "
                      "the user that this client cannot do it.");
    } else {
        int k = 0;
        coai_buf_puts(out, " (its tools can: ");
        for (r = 1; r < COAI__R_COUNT; r++)
            if (seen[r]) coai_buf_printf(out, "%s%s", k++ ? ", " : "", can[r]);
        if (other)
            coai_buf_printf(out, "%s%d other tool%s of its own", k ? "; and " : "", other,
                            other == 1 ? "" : "s");
        coai_buf_puts(out, "). Do this step with one of those tools if one can, else do "
                      "without it or tell the user that this client cannot do it.");
    }
    coai_buf_putc(out, 0);
    return out->err ? -1 : 0;
}

/* A read's or a delete's path argument to tool t (f: its schema's features): `[path]`
 * when the tool takes several paths (an array) and no single one, else the path
 * parameter (f's, or the first of p_file the tool has). */
static void coai__core_path_arg(coai_buf *b, const coai__tfeat *f, const coai_tool *t,
                                const char *const *p_file, coai_str path)
{
    if (f->paths && !f->path) {
        if (b->len > 1) coai_buf_putc(b, ',');
        coai_json_str_append(b, f->paths, strlen(f->paths));
        coai_buf_puts(b, ":[");
        coai_json_str_append(b, path.ptr, path.len);
        coai_buf_putc(b, ']');
    } else {
        coai__core_arg(b, f->path ? f->path : coai__core_param_main(t, p_file), path);
    }
}

int coai_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                  coai_str workspace, coai_tool_call *tc)
{
    /* names that only break ties between tools of one role (coai__ro_find) */
    static const char *const n_shell[] = { "bash", "shell", "run_shell_command",
                                           "execute_command", "run_terminal_cmd", "terminal",
                                           NULL };
    static const char *const n_read[] = { "read", "read_file", "view", NULL };
    static const char *const n_list[] = { "list", "ls", "list_dir", "list_directory",
                                          "list_files", NULL };
    static const char *const n_grep[] = { "grep", "search", "grep_search", "search_files",
                                          "ripgrep", NULL };
    static const char *const n_glob[] = { "glob", "find_files", "file_search", NULL };
    static const char *const n_write[] = { "write", "write_file", "create_file", NULL };
    static const char *const n_delete[] = { "delete", "delete_file", "remove", NULL };
    static const char *const n_fetch[] = { "fetch", "web_fetch", "webfetch", NULL };
    static const char *const p_url[] = { "url", "uri", "href", NULL };
    static const char *const p_command[] = { "command", "cmd", NULL };
    static const char *const p_desc[] = { "description", NULL };
    static const char *const p_timeout[] = { "timeout", "timeout_ms", NULL };
    static const char *const p_cwd[] = { "cwd", "workdir", "working_directory", "directory",
                                         NULL };
    static const char *const p_file[] = { "filePath", "file_path", "path", "filename",
                                          "file", NULL };
    static const char *const p_path[] = { "path", "dir", "directory", "dir_path", NULL };
    static const char *const p_pattern[] = { "pattern", "query", "regex", NULL };
    static const char *const p_include[] = { "include", "glob", "file_pattern", NULL };
    static const char *const p_gpattern[] = { "pattern", "glob", NULL };
    static const char *const p_content[] = { "content", "contents", "text", "file_text",
                                             NULL };
    coai_buf *b = &tc->args;
    const coai_tool *t;
    size_t idx = 0;
    coai_buf d = { 0 };
    coai__tfeat f;
    if (!tools) count = 0;
    coai_buf_reset(&tc->args);
    tc->refusal = NULL;
    tc->via_shell = 0;
    switch (ex->kind) {
    case COAI_EXEC_SHELL:
    case COAI_EXEC_SHELL_STREAM:
        if (!coai__ro_find(tools, count, COAI__R_SHELL, 0, n_shell, &idx, &f)) return 0;
        t = &tools[idx];
        coai_buf_putc(b, '{');
        if (f.cmd_kind == 2) {              /* argv: ["bash", "-lc", command] */
            coai_json_str_append(b, f.cmd, strlen(f.cmd));
            coai_buf_puts(b, ":[\"bash\",\"-lc\",");
            coai_json_str_append(b, ex->command.ptr, ex->command.len);
            coai_buf_putc(b, ']');
        } else if (f.cmd_kind == 3) {       /* a list of commands: this one */
            coai_json_str_append(b, f.cmd, strlen(f.cmd));
            coai_buf_puts(b, ":[");
            coai_json_str_append(b, ex->command.ptr, ex->command.len);
            coai_buf_putc(b, ']');
        } else {
            coai__core_arg(b, f.cmd ? f.cmd : coai__core_param_main(t, p_command), ex->command);
        }
        /* Cursor's own description of the command (ShellArgs 15) when it sent one */
        if (ex->description.len) coai_buf_append(&d, ex->description.ptr, ex->description.len);
        else coai__core_shell_desc(&d, ex->command);
        if (coai__core_may(t, p_desc)) {
            coai_str ds;
            ds.ptr = d.data ? (const char *)d.data : "";
            ds.len = d.len;
            coai__core_arg(b, coai__core_param(t, p_desc), ds);
        }
        if (d.err) b->err = 1;
        coai_buf_free(&d);
        if (ex->cwd.len && coai__core_may(t, p_cwd))
            coai__core_arg(b, coai__core_param(t, p_cwd), ex->cwd);
        /* ShellArgs.hard_timeout (ms) to a tool that declares a timeout in ms (Claude Code's
         * Bash and OpenCode's bash: timeout; Codex: timeout_ms) */
        if (ex->hard_timeout_ms > 0 && ex->hard_timeout_ms < 100000000000ULL
            && coai__core_has_param(t, p_timeout))
            coai_buf_printf(b, ",\"%s\":%llu", coai__core_param(t, p_timeout),
                            (unsigned long long)ex->hard_timeout_ms);
        break;
    case COAI_EXEC_READ:
        if (!coai__ro_find(tools, count, COAI__R_READ, COAI__R_EDITOR, n_read, &idx, &f)) {
            /* no reader: a path tool scored for listings whose name says it views or
             * reads ("view: files and directories", Copilot's) reads too */
            static const char *const readish[] = { "read", "view", "cat", "open", NULL };
            int sc;
            for (idx = 0; idx < count; idx++)
                if (coai__ro_role(&tools[idx], &f, &sc) == COAI__R_LIST
                    && coai__ro_words(tools[idx].name, readish))
                    break;
            if (idx == count) return 0;
        }
        if (f.op && !f.op_view) return 0;
        coai_buf_putc(b, '{');
        if (f.op) coai__core_arg(b, f.op, coai_str_c(f.op_view));      /* an editor's view */
        coai__core_path_arg(b, &f, &tools[idx], p_file, ex->path);
        break;
    case COAI_EXEC_LS:
        if (!coai__ro_find(tools, count, COAI__R_LIST, 0, n_list, &idx, NULL)) return 0;
        coai_buf_putc(b, '{');
        if (ex->has_path || ex->path.len)
            coai__core_arg(b, coai__core_param(&tools[idx], p_path), ex->path);
        else if (workspace.len) coai__core_arg(b, coai__core_param(&tools[idx], p_path), workspace);
        break;
    case COAI_EXEC_GREP:
        /* A regex search restricted by a file glob stays a grep when the client's grep
         * takes a file filter (OpenCode: include); a pure glob becomes the glob tool. */
        if (ex->glob.len && ex->pattern.len
            && coai__ro_find(tools, count, COAI__R_GREP, 0, n_grep, &idx, NULL)
            && coai__core_has_param(&tools[idx], p_include)) {
            t = &tools[idx];
            coai_buf_putc(b, '{');
            coai__core_arg(b, coai__core_param(t, p_pattern), ex->pattern);
            if ((ex->has_path || ex->path.len) && coai__core_may(t, p_path))
                coai__core_arg(b, coai__core_param(t, p_path), ex->path);
            coai__core_arg(b, coai__core_param(t, p_include), ex->glob);
        } else if (ex->glob.len) {
            if (!coai__ro_find(tools, count, COAI__R_GLOB, 0, n_glob, &idx, NULL)) return 0;
            t = &tools[idx];
            coai_buf_putc(b, '{');
            coai__core_arg(b, coai__core_param(t, p_gpattern), ex->glob);
            if ((ex->has_path || ex->path.len) && coai__core_may(t, p_path))
                coai__core_arg(b, coai__core_param(t, p_path), ex->path);
        } else {
            if (!coai__ro_find(tools, count, COAI__R_GREP, 0, n_grep, &idx, NULL)) return 0;
            t = &tools[idx];
            coai_buf_putc(b, '{');
            coai__core_arg(b, coai__core_param(t, p_pattern), ex->pattern);
            if ((ex->has_path || ex->path.len) && coai__core_may(t, p_path))
                coai__core_arg(b, coai__core_param(t, p_path), ex->path);
        }
        break;
    case COAI_EXEC_WRITE:
        if (!coai__ro_find(tools, count, COAI__R_WRITE, COAI__R_EDITOR, n_write, &idx, &f)
            || (f.op && (!f.op_create || !f.path)))
            return 0;
        t = &tools[idx];
        coai_buf_putc(b, '{');
        if (f.op) coai__core_arg(b, f.op, coai_str_c(f.op_create));  /* an editor's create */
        coai__core_arg(b, f.path ? f.path : coai__core_param(t, p_file), ex->path);
        coai__core_arg(b, f.content ? f.content : f.op ? "file_text" : coai__core_param(t, p_content),
                     ex->content);
        break;
    case COAI_EXEC_DELETE:
        if (!ex->path.len
            || !coai__ro_find(tools, count, COAI__R_DELETE, 0, n_delete, &idx, &f))
            return 0;
        coai_buf_putc(b, '{');
        coai__core_path_arg(b, &f, &tools[idx], p_file, ex->path);
        break;
    case COAI_EXEC_FETCH:
        if (!ex->url.len || !coai__ro_find(tools, count, COAI__R_FETCH, 0, n_fetch, &idx, &f))
            return 0;
        coai_buf_putc(b, '{');
        coai__core_arg(b, f.url ? f.url : coai__core_param_main(&tools[idx], p_url), ex->url);
        break;
    case COAI_EXEC_MCP: {
        size_t i, k;
        for (i = 0; i < count; i++)
            if (coai__core_str_same(tools[i].name, ex->tool_name)) break;
        for (k = 0; i == count && k < count; k++)      /* then ignoring case/separators */
            if (coai__core_name_like(tools[k].name, ex->tool_name)) i = k;
        if (i == count || ex->tool_name.len == 0) return 0;
        idx = i;
        if (ex->args_json.len) coai_buf_append(b, ex->args_json.ptr, ex->args_json.len);
        else coai_buf_puts(b, "{}");
        tc->tool = idx;
        return b->err ? -1 : 1;
    }
    default:
        return 0;
    }
    coai_buf_putc(b, '}');
    tc->tool = idx;
    return b->err ? -1 : 1;
}

/* A shell exec that a chat client's `bash` tool runs under COAI_EXIT_TRAP: OpenCode's bash
 * (Kilo Code's is the same), known by its `workdir` parameter. */
static int coai__core_traps_exit(coai_dialect d, int kind, const coai_tool *t)
{
    static const char *const p_workdir[] = { "workdir", NULL };
    return d == COAI_DIALECT_OPENAI_CHAT
        && (kind == COAI_EXEC_SHELL || kind == COAI_EXEC_SHELL_STREAM || kind == COAI_EXEC_DELETE)
        && coai__core_name_like(t->name, coai_str_c("bash")) && coai__core_has_param(t, p_workdir);
}

/* The OpenAI chat dialect's exec mapping: coai_exec_map, then a shell command for
 * OpenCode's `bash` tool gets COAI_EXIT_TRAP in front (a line of its own), so that the exit code, which
 * OpenCode's and Kilo Code's results leave out, comes back with the output. */
static int coai__sh_fallback(const coai_exec *ex, coai_buf *cmd, coai_tool_call *tc);
                                                              /* PART:ANTHROPIC */
/* What Cursor is told when a path or pattern cannot go into a command (the quoting layer,
 * PART:ANTHROPIC: coai__sh_arg) */
#define COAI__SH_REFUSAL "This tool call cannot be run here: its path or pattern holds a " \
    "NUL byte, which no file name or command argument can contain. Use a path without one."

/* sh: a shell exec running cmd in ex's place (same id, exec id, tool call id); cmd stays the
 * caller's */
static void coai__exec_as_shell(coai_exec *sh, const coai_exec *ex, const coai_buf *cmd)
{
    memset(sh, 0, sizeof *sh);
    sh->kind = COAI_EXEC_SHELL;
    sh->id = ex->id;
    sh->exec_id = ex->exec_id;
    sh->tool_call_id = ex->tool_call_id;
    sh->command.ptr = (const char *)cmd->data;
    sh->command.len = cmd->len;
}

/* ---- tool results as Cursor's CLI reports them ------------------------------ */

/* s[*at..] starts with lit: advance past it. */
static int coai__rl_lit(coai_str s, size_t *at, const char *lit)
{
    size_t n = strlen(lit);
    if (s.len - *at < n || memcmp(s.ptr + *at, lit, n) != 0) return 0;
    *at += n;
    return 1;
}

/* A decimal integer (with '-' when neg) at s[*at]: advance past it. */
static int coai__rl_int(coai_str s, size_t *at, int neg, int64_t *v)
{
    size_t i = *at;
    int minus = 0, digits = 0;
    int64_t x = 0;
    if (neg && i < s.len && s.ptr[i] == '-') { minus = 1; i++; }
    while (i < s.len && s.ptr[i] >= '0' && s.ptr[i] <= '9' && digits < 12) {
        x = x * 10 + (s.ptr[i++] - '0');
        digits++;
    }
    if (!digits || (i < s.len && s.ptr[i] >= '0' && s.ptr[i] <= '9')) return 0;
    *v = minus ? -x : x;
    *at = i;
    return 1;
}

/* One or more characters of set (a NUL-terminated list) at s[*at]: advance past them. */
static int coai__rl_span(coai_str s, size_t *at, const char *set)
{
    size_t i = *at;
    while (i < s.len && s.ptr[i] && strchr(set, s.ptr[i])) i++;
    if (i == *at) return 0;
    *at = i;
    return 1;
}

static coai_str coai__rl_tail(coai_str s, size_t at)
{
    coai_str t;
    t.ptr = s.ptr + at;
    t.len = s.len - at;
    return t;
}

static int coai__rl_exit(coai_exec_outcome *o, int64_t code)
{
    if (code < -2147483647 || code > 2147483647) return 0;
    o->has_exit = 1;
    o->exit_code = (int)code;
    return 1;
}

/* Codex exec_command: [Chunk ID: h\n]Wall time: s seconds\n(Process exited with code N |
 * Process running with session ID N)\n[Original token count: n\n]Output:\n */
static int coai__rl_codex_exec(coai_exec_outcome *o, coai_str t)
{
    size_t at = 0;
    int64_t v = 0, code = 0;
    int has = 0;
    if (coai__rl_lit(t, &at, "Chunk ID: ")
        && !(coai__rl_span(t, &at, "0123456789abcdefABCDEF-") && coai__rl_lit(t, &at, "\n")))
        return 0;
    if (!coai__rl_lit(t, &at, "Wall time: ") || !coai__rl_span(t, &at, "0123456789.")
        || !coai__rl_lit(t, &at, " seconds\n"))
        return 0;
    if (coai__rl_lit(t, &at, "Process exited with code ")) {
        if (!coai__rl_int(t, &at, 1, &code)) return 0;
        has = 1;
    } else if (!coai__rl_lit(t, &at, "Process running with session ID ")
               || !coai__rl_int(t, &at, 0, &v)) {
        return 0;
    }
    if (!coai__rl_lit(t, &at, "\n")) return 0;
    if (coai__rl_lit(t, &at, "Original token count: ")
        && !(coai__rl_int(t, &at, 0, &v) && coai__rl_lit(t, &at, "\n")))
        return 0;
    if (!coai__rl_lit(t, &at, "Output:\n")) return 0;
    if (has && !coai__rl_exit(o, code)) return 0;
    o->out = coai__rl_tail(t, at);
    o->shape = "codex-exec";
    return 1;
}

/* Codex shell / apply_patch: Exit code: N\nWall time: s seconds\n[Total output lines: n\n]
 * Output:\n */
static int coai__rl_codex_shell(coai_exec_outcome *o, coai_str t)
{
    size_t at = 0;
    int64_t code = 0, v = 0;
    if (!coai__rl_lit(t, &at, "Exit code: ") || !coai__rl_int(t, &at, 1, &code)
        || !coai__rl_lit(t, &at, "\nWall time: ") || !coai__rl_span(t, &at, "0123456789.")
        || !coai__rl_lit(t, &at, " seconds\n"))
        return 0;
    if (coai__rl_lit(t, &at, "Total output lines: ")
        && !(coai__rl_int(t, &at, 0, &v) && coai__rl_lit(t, &at, "\n")))
        return 0;
    if (!coai__rl_lit(t, &at, "Output:\n") || !coai__rl_exit(o, code)) return 0;
    o->out = coai__rl_tail(t, at);
    o->shape = "codex-shell";
    return 1;
}

/* The last occurrence of "\n" lit in t[0..end) whose line is whole; (size_t)-1 if none. */
static size_t coai__rl_rfind(coai_str t, size_t end, const char *lit)
{
    size_t n = strlen(lit), i;
    if (end > t.len) end = t.len;
    for (i = end; i-- > 0;)
        if (t.ptr[i] == '\n' && end - i - 1 >= n && memcmp(t.ptr + i + 1, lit, n) == 0)
            return i;
    return (size_t)-1;
}

/* Qwen Code run_shell_command: [Command: c\n]Directory: d\nOutput: o\nError: e\n
 * Exit Code: N|(none)\nSignal: s\nProcess Group PGID: p[\n<appended notes>] */
static int coai__rl_qwen(coai_exec_outcome *o, coai_str t)
{
    size_t at = 0, d, ob, eb, xb, sb, pb_, i;
    int64_t code = 0;
    int has = 0;
    coai_str rest;
    if (coai__rl_lit(t, &at, "Command: ")) {
        /* the command may span lines: its end is the first "\nDirectory: " line */
        d = (size_t)-1;
        for (i = at; i < t.len; i++)
            if (t.ptr[i] == '\n' && t.len - i - 1 >= 11
                && memcmp(t.ptr + i + 1, "Directory: ", 11) == 0) { d = i + 1; break; }
        if (d == (size_t)-1) return 0;
        at = d;
    }
    if (!coai__rl_lit(t, &at, "Directory: ")) return 0;
    while (at < t.len && t.ptr[at] != '\n') at++;
    if (!coai__rl_lit(t, &at, "\nOutput: ")) return 0;
    ob = at;
    /* the footer, searched from the end: PGID, Signal, Exit Code, Error lines in order */
    pb_ = coai__rl_rfind(t, t.len, "Process Group PGID: ");
    if (pb_ == (size_t)-1 || pb_ < ob) return 0;
    sb = coai__rl_rfind(t, pb_, "Signal: ");
    if (sb == (size_t)-1 || sb < ob) return 0;
    for (i = sb + 1; i < pb_; i++) if (t.ptr[i] == '\n') return 0;
    xb = coai__rl_rfind(t, sb, "Exit Code: ");
    if (xb == (size_t)-1 || xb < ob) return 0;
    at = xb + 12;
    if (coai__rl_int(t, &at, 1, &code)) has = 1;
    else if (!coai__rl_lit(t, &at, "(none)")) return 0;
    if (at != sb) return 0;
    eb = coai__rl_rfind(t, xb, "Error: ");
    if (eb == (size_t)-1 || eb + 1 < ob) return 0;
    if (has && !coai__rl_exit(o, code)) return 0;
    rest.ptr = t.ptr + ob;
    rest.len = eb - ob;
    if (coai_str_eq(rest, "(empty)")) rest.len = 0;
    o->out = rest;
    /* "Error: " is a spawn failure (not stderr, which is merged into the output) */
    rest.ptr = t.ptr + eb + 8;
    rest.len = xb - (eb + 8);
    if (!coai_str_eq(rest, "(none)") && rest.len) {
        o->err = rest;
        if (!has) o->is_error = 1;
    }
    o->shape = "qwen-shell";
    return 1;
}

static size_t coai__rl_reminder(coai_str t);

/* Where t's text ends before a system reminder Claude Code appends to a tool result
 * ("\n\n<system-reminder>\n...\n</system-reminder>", trailing blanks allowed): t.len when
 * there is none. */
static size_t coai__rl_reminder(coai_str t)
{
    size_t r = coai__rl_rfind(t, t.len, "<system-reminder>"), e = t.len;
    if (r == (size_t)-1 || r == 0 || t.ptr[r - 1] != '\n') return t.len;
    while (e > r && (t.ptr[e - 1] == '\n' || t.ptr[e - 1] == ' ')) e--;
    if (e - r < 18 || memcmp(t.ptr + e - 18, "</system-reminder>", 18) != 0) return t.len;
    return r - 1;
}

/* A bash result ending with the line COAI_EXIT_TRAP prints: ...\n[exit code: N]\n */
static int coai__rl_trap(coai_exec_outcome *o, coai_str t)
{
    size_t i, at;
    int64_t code = 0;
    if (t.len < 16 || t.ptr[t.len - 1] != '\n' || t.ptr[t.len - 2] != ']') return 0;
    for (i = t.len - 2; i > 0 && t.ptr[i - 1] != '\n'; i--) {}
    if (i == 0) return 0;
    at = i;
    if (!coai__rl_lit(t, &at, "[exit code: ") || !coai__rl_int(t, &at, 1, &code)
        || !coai__rl_lit(t, &at, "]\n") || at != t.len || !coai__rl_exit(o, code))
        return 0;
    o->out.ptr = t.ptr;
    o->out.len = i - 1;                         /* the "\n" the trap prints first */
    o->shape = "exit-trap";
    return 1;
}

/* ---- any client's exit code: one generic recogniser ---------------------------------
 * A shell result of any client whose first or last line names the exit code in one of the
 * common phrasings is split into output and code; the line (and the newline that parts it
 * from the output) is removed. The line must be the phrase alone, at most 96 bytes:
 *   [optional words: process command cmd shell program the a an exited finished completed
 *   failed ended terminated returned with non zero nonzero error] KEY [: | = | is] N
 *   [the KEY again, as a closing tag]
 * KEY is "exit code", "exit status", "exit value", "return code", "returncode", "exitcode",
 * "rc", "exit", or "code" / "status" right after "with"; words split at '_', '-' and
 * camelCase, any case; around it only blanks and [ ] ( ) { } < > / : = " ' * ` , . ; # | .
 * "rc" and a bare "exit" count only in brackets or with ':' / '=' ("(exit 3)", "rc=3"; a
 * script's last line "exit 3" is content). So "Exit code: 3", "[exit code: 3]",
 * "<exit_code>3</exit_code>", "Process exited with code 3", "exited with status 3",
 * "return code: 3", "(exit 3)", "{\"exit_code\": 3}" are codes, also after the number of a
 * session, process or job ("<shellId: 0 completed with exit code 3>", "[pid 7] exited with
 * code 1": the words id, pid, session, job and their number); a line in the middle, or a
 * last line with any other word ("the tests exited with code 0 in CI"), is output. The
 * last line is tried first, then the first. A whole result that is one JSON object with an
 * integer exit_code / exitCode / exit_status / returncode / return_code member and string
 * output / stdout (and stderr) members is read the same way. Anything else: no code. */

/* A word naming a session, process or job whose number may stand before the code phrase
 * ("shellId: 0 completed with exit code 3", "[pid 4711] exited with status 1"): the word and
 * its number are skipped. */
static int coai__rl_id_word(const char *w)
{
    return !strcmp(w, "id") || !strcmp(w, "pid") || !strcmp(w, "session") || !strcmp(w, "job");
}

/* t (one line, no '\n') is a code line: *code set. */
static int coai__rl_code_line(coai_str t, int64_t *code)
{
    static const char *const fill[] = { "process", "command", "cmd", "shell", "program",
                                        "the", "a", "an", "exited", "finished", "completed",
                                        "failed", "ended", "terminated", "returned", "with",
                                        "non", "zero", "nonzero", "error", NULL };
    static const char *const keys[][2] = { { "exit", "code" }, { "exit", "status" },
                                           { "exit", "value" }, { "return", "code" },
                                           { "returncode", NULL }, { "exitcode", NULL },
                                           { "rc", NULL }, { "exit", NULL }, { "code", NULL },
                                           { "status", NULL } };
    char w[12][16];
    size_t nw = 0, before = (size_t)-1, i = 0, k, kn = 0, j;
    int num = 0, sep = 0, wrap = 0, ki = -1, idn = 0;
    int64_t v = 0;
    while (t.len && (t.ptr[t.len - 1] == ' ' || t.ptr[t.len - 1] == '\t'
                     || t.ptr[t.len - 1] == '\r'))
        t.len--;
    if (!t.len || t.len > 96) return 0;
    while (i < t.len) {
        unsigned char ch = (unsigned char)t.ptr[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            size_t n = 0;
            if (nw == 12) return 0;
            do {
                char lc = (char)(t.ptr[i] | 0x20);
                if (n == 15) return 0;
                w[nw][n++] = lc;
                i++;
            } while (i < t.len && ((t.ptr[i] >= 'a' && t.ptr[i] <= 'z')
                                   || (t.ptr[i] >= 'A' && t.ptr[i] <= 'Z' && n
                                       && !(t.ptr[i - 1] >= 'a' && t.ptr[i - 1] <= 'z'))));
            w[nw++][n] = 0;
        } else if (ch >= '0' && ch <= '9' && !num && !idn++ && nw
                   && coai__rl_id_word(w[nw - 1])) {
            /* the number of a session / process / job before the code: "shellId: 0" */
            while (i < t.len && t.ptr[i] >= '0' && t.ptr[i] <= '9') i++;
            if (i < t.len && ((t.ptr[i] | 0x20) >= 'a' && (t.ptr[i] | 0x20) <= 'z')) return 0;
            nw--;
        } else if ((ch >= '0' && ch <= '9') || (ch == '-' && i + 1 < t.len
                                                 && t.ptr[i + 1] >= '0' && t.ptr[i + 1] <= '9')) {
            if (num++) return 0;
            if (!coai__rl_int(t, &i, 1, &v)) return 0;
            if (i < t.len && ((t.ptr[i] | 0x20) >= 'a' && (t.ptr[i] | 0x20) <= 'z')) return 0;
            before = nw;
        } else if (ch == ' ' || ch == '\t' || ch == '_' || ch == '-' || ch == '/' || ch == '"'
                   || ch == '\'' || ch == '*' || ch == '`' || ch == ',' || ch == '.'
                   || ch == ';' || ch == '#' || ch == '|' || ch == '}' || ch == ')'
                   || ch == ']' || ch == '>') {
            i++;
        } else if (ch == '[' || ch == '(' || ch == '{' || ch == '<') {
            wrap = 1;
            i++;
        } else if (ch == ':' || ch == '=') {
            sep = 1;
            i++;
        } else {
            return 0;
        }
    }
    if (!num || !before) return 0;
    /* "is" as the separator: "exit code is 3" */
    if (before >= 2 && !strcmp(w[before - 1], "is")) {
        for (j = before - 1; j + 1 < nw; j++) memcpy(w[j], w[j + 1], sizeof w[j]);
        nw--;
        before--;
        sep = 1;
    }
    for (k = 0; k < sizeof keys / sizeof keys[0] && ki < 0; k++) {
        kn = keys[k][1] ? 2 : 1;
        if (before < kn || strcmp(w[before - kn], keys[k][0])
            || (kn == 2 && strcmp(w[before - 1], keys[k][1])))
            continue;
        ki = (int)k;
    }
    if (ki < 0) return 0;
    if ((ki == 6 || ki == 7) && !wrap && !sep) return 0;             /* rc, exit */
    if ((ki == 8 || ki == 9) && (before < 2 || strcmp(w[before - 2], "with"))) return 0;
    for (j = 0; j + kn < before; j++) {
        for (k = 0; fill[k] && strcmp(w[j], fill[k]); k++) {}
        if (!fill[k]) return 0;
    }
    /* after the number: nothing, or the key again (a closing tag) */
    if (nw != before && (nw - before != kn || strcmp(w[before], w[before - kn])
                         || (kn == 2 && strcmp(w[before + 1], w[before - 1]))))
        return 0;
    *code = v;
    return 1;
}

/* A whole result that is one JSON object with an exit code and output members. */
static int coai__rl_json_exit(coai_exec_outcome *o, coai_str t)
{
    static const char *const kc[] = { "exit_code", "exitCode", "exit_status", "exitStatus",
                                      "returncode", "return_code", "returnCode", NULL };
    static const char *const ko[] = { "output", "stdout", NULL };
    const cJSON *c = NULL, *out = NULL, *err;
    cJSON *j;
    size_t k;
    int ok = 0;
    while (t.len && (t.ptr[t.len - 1] == '\n' || t.ptr[t.len - 1] == ' '
                     || t.ptr[t.len - 1] == '\r'))
        t.len--;
    if (t.len < 2 || t.ptr[0] != '{' || t.ptr[t.len - 1] != '}') return 0;
    j = cJSON_ParseWithLength(t.ptr, t.len);
    if (!j) return 0;
    for (k = 0; kc[k] && !c; k++) c = cJSON_GetObjectItemCaseSensitive(j, kc[k]);
    for (k = 0; ko[k] && !out; k++) out = cJSON_GetObjectItemCaseSensitive(j, ko[k]);
    err = cJSON_GetObjectItemCaseSensitive(j, "stderr");
    if (cJSON_IsNumber(c) && c->valuedouble == (double)(int64_t)c->valuedouble
        && (!out || cJSON_IsString(out)) && (!err || cJSON_IsString(err)) && (out || err)
        && coai__rl_exit(o, (int64_t)c->valuedouble)) {
        coai_buf *b = &o->own_;
        size_t no = out ? strlen(out->valuestring) : 0, ne = err ? strlen(err->valuestring) : 0;
        coai_buf_reset(b);
        if (no) coai_buf_append(b, out->valuestring, no);
        if (ne) coai_buf_append(b, err->valuestring, ne);
        if (b->err) { cJSON_Delete(j); return -1; }
        o->out.ptr = b->data ? (const char *)b->data : "";
        o->out.len = no;
        o->err.ptr = o->out.ptr + no;
        o->err.len = ne;
        o->shape = "json-exit";
        ok = 1;
    }
    cJSON_Delete(j);
    return ok;
}

/* The generic recogniser over t[0..end) (a Claude Code system reminder after end is never
 * output): 1 with o's code and output, 0 when no line names a code. */
static int coai__rl_exit_line(coai_exec_outcome *o, coai_str t, size_t end)
{
    size_t e = end, b, f;
    int64_t code = 0;
    coai_str line;
    int r = coai__rl_json_exit(o, t);
    if (r) return r;
    /* the last line: trailing blank lines skipped */
    while (e && (t.ptr[e - 1] == '\n' || t.ptr[e - 1] == '\r' || t.ptr[e - 1] == ' '))
        e--;
    for (b = e; b && t.ptr[b - 1] != '\n'; b--) {}
    line.ptr = t.ptr + b;
    line.len = e - b;
    if (coai__rl_code_line(line, &code) && coai__rl_exit(o, code)) {
        o->out.ptr = t.ptr;
        o->out.len = b ? b - 1 : 0;                 /* the newline before the line */
        if (o->out.len && t.ptr[o->out.len - 1] == '\r') o->out.len--;
        o->shape = "exit-line";
        return 1;
    }
    /* the first line */
    for (f = 0; f < end && t.ptr[f] != '\n'; f++) {}
    line.ptr = t.ptr;
    line.len = f;
    if (coai__rl_code_line(line, &code) && coai__rl_exit(o, code)) {
        o->out.ptr = t.ptr + (f < end ? f + 1 : end);
        o->out.len = end - (size_t)(o->out.ptr - t.ptr);
        o->shape = "exit-line";
        return 1;
    }
    return 0;
}

/* Claude Code Read: "N\t" (or "     N\t", or "N→") before every line, numbered from 1.
 * The lines are copied into own_ without the numbers; a last line that is empty is
 * where the file's final newline was. */
static int coai__rl_claude_read(coai_exec_outcome *o, coai_str t)
{
    static const char empty[] = "<system-reminder>Warning: the file exists but the contents "
                                "are empty.</system-reminder>";
    size_t at = 0, end;
    int64_t want = 1, n = 0;
    int sep = 0;            /* 1 tab, 2 arrow */
    coai_buf *b = &o->own_;
    if (coai_str_eq(t, empty)) {
        o->out.ptr = "";
        o->out.len = 0;
        o->has_total = 1;
        o->total_lines = 0;
        o->shape = "claude-read";
        return 1;
    }
    /* a system reminder Claude Code may append after a blank line */
    end = coai__rl_reminder(t);
    if (!end) return 0;
    coai_buf_reset(b);
    while (at < end) {
        size_t s0;
        while (at < end && t.ptr[at] == ' ') at++;
        if (!coai__rl_int(t, &at, 0, &n) || n != want) return 0;
        if (at == end && want > 1) break;       /* "N" alone last: an empty last line whose
                                                 * tab went with the text's trailing blanks */
        if (at < end && t.ptr[at] == '\t' && sep != 2) { sep = 1; at++; }
        else if (end - at >= 3 && memcmp(t.ptr + at, "\xe2\x86\x92", 3) == 0 && sep != 1) {
            sep = 2;
            at += 3;
        } else {
            return 0;
        }
        s0 = at;
        while (at < end && t.ptr[at] != '\n') at++;
        coai_buf_append(b, t.ptr + s0, at - s0);
        if (at < end) { coai_buf_putc(b, '\n'); at++; }
        want++;
    }
    if (b->err) return -1;
    o->out.ptr = b->data ? (const char *)b->data : "";
    o->out.len = b->len;
    o->shape = "claude-read";
    return 1;
}

/* OpenCode / Kilo Code read: <path>p</path>\n<type>file</type>\n<content>\n[1: l\n2: l\n...
 * \n]\n(footer)\n</content> */
static int coai__rl_oc_read(coai_exec_outcome *o, coai_str t)
{
    size_t at = 0, fb, fe, le, hdr;
    int64_t want = 1, n = 0, total = 0, v = 0;
    coai_buf *b = &o->own_;
    coai_str foot;
    if (!coai__rl_lit(t, &at, "<path>")) return 0;
    while (at < t.len && t.ptr[at] != '\n') at++;
    if (at < 13 || memcmp(t.ptr + at - 7, "</path>", 7) != 0) return 0;
    if (!coai__rl_lit(t, &at, "\n<type>file</type>\n<content>\n")) return 0;
    hdr = at;
    if (t.len - at < 11 || memcmp(t.ptr + t.len - 11, "\n</content>", 11) != 0) return 0;
    fe = t.len - 11;
    /* the footer: the text after the last blank line before </content> */
    fb = (size_t)-1;
    for (le = fe; le-- > at;)
        if (t.ptr[le] == '\n' && (le == at || t.ptr[le - 1] == '\n')) { fb = le + 1; break; }
    if (fb == (size_t)-1 && fe > at && t.ptr[at] == '(') fb = at;   /* no lines at all */
    if (fb == (size_t)-1) return 0;
    foot.ptr = t.ptr + fb;
    foot.len = fe - fb;
    at = 0;
    if (coai__rl_lit(foot, &at, "(End of file - total ")) {
        if (!coai__rl_int(foot, &at, 0, &total) || !coai__rl_lit(foot, &at, " lines)")
            || at != foot.len)
            return 0;
        o->has_total = 1;
        o->total_lines = total;
    } else if (coai__rl_lit(foot, &at, "(Showing lines ")) {
        if (!coai__rl_int(foot, &at, 0, &v) || !coai__rl_lit(foot, &at, "-")
            || !coai__rl_int(foot, &at, 0, &v))
            return 0;
        if (coai__rl_lit(foot, &at, " of ")) {
            if (!coai__rl_int(foot, &at, 0, &total)) return 0;
            o->has_total = 1;
            o->total_lines = total;
        }
        if (!coai__rl_lit(foot, &at, ". Use offset=") || !coai__rl_int(foot, &at, 0, &v)
            || !coai__rl_lit(foot, &at, " to continue.)") || at != foot.len)
            return 0;
        o->truncated = 1;
    } else if (coai__rl_lit(foot, &at, "(Output capped at ")) {
        o->truncated = 1;           /* its size label and range: not needed */
    } else {
        return 0;
    }
    /* the numbered lines: t[hdr .. fb - 2), the "\n\n" before the footer excluded */
    at = hdr;
    le = fb >= hdr + 2 ? fb - 2 : hdr;
    coai_buf_reset(b);
    while (at < le) {
        size_t s0;
        if (!coai__rl_int(t, &at, 0, &n) || n != want || !coai__rl_lit(t, &at, ": ")) return 0;
        s0 = at;
        while (at < le && t.ptr[at] != '\n') at++;
        coai_buf_append(b, t.ptr + s0, at - s0);
        coai_buf_putc(b, '\n');
        if (at < le) at++;
        want++;
    }
    if (b->err) return -1;
    o->out.ptr = b->data ? (const char *)b->data : "";
    o->out.len = b->len;
    o->shape = "opencode-read";
    return 1;
}

static int coai__rl_tool_is(coai_str tool, const char *const *names)
{
    size_t k;
    for (k = 0; names[k]; k++)
        if (coai__core_name_like(tool, coai_str_c(names[k]))) return 1;
    return 0;
}

/* o back to the raw result r, keeping the rebuilt-text buffer for reuse */
static void coai__rl_back(coai_exec_outcome *o, const coai_exec_outcome *r)
{
    coai_buf keep = o->own_;
    *o = *r;
    o->own_ = keep;
}

void coai_exec_outcome_free(coai_exec_outcome *o)
{
    if (!o) return;
    coai_buf_free(&o->own_);
    coai_buf_free(&o->unwrap_);
}

/* A whole result that is a JSON array of one object with a string "result" (Cline's
 * run_commands and read_files: [{"query": ..., "result": ..., "success": true}]): its
 * result is the text to read, a failure when "success" is false. 1 unwrapped (*text
 * points into o->unwrap_), 0 not that layout, -1 out of memory. */
static int coai__rl_unwrap(coai_exec_outcome *o, coai_str *text, int *is_error)
{
    cJSON *j, *it, *res, *ok;
    size_t i = 0;
    int rc = 0;
    while (i < text->len && (text->ptr[i] == ' ' || text->ptr[i] == '\n'
                             || text->ptr[i] == '\t' || text->ptr[i] == '\r'))
        i++;
    if (i == text->len || text->ptr[i] != '[') return 0;
    j = cJSON_ParseWithLength(text->ptr, text->len);
    it = cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1 ? cJSON_GetArrayItem(j, 0) : NULL;
    res = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "result") : NULL;
    ok = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "success") : NULL;
    if (cJSON_IsString(res) && (!ok || cJSON_IsBool(ok))) {
        coai_buf_reset(&o->unwrap_);
        rc = coai_buf_append(&o->unwrap_, res->valuestring, strlen(res->valuestring)) < 0
             ? -1 : 1;
        if (rc == 1) {
            text->ptr = o->unwrap_.data ? (const char *)o->unwrap_.data : "";
            text->len = o->unwrap_.len;
            if (cJSON_IsFalse(ok)) *is_error = 1;
        }
    }
    cJSON_Delete(j);
    return rc;
}

int coai_exec_part_answers(const coai_exec_ref *x, int is_error, int *failed)
{
    if (!x || x->parts <= 1) return 1;
    if (x->part == 0) *failed = 0;
    if (*failed) return 0;
    if (is_error) { *failed = 1; return 1; }
    return x->part + 1 >= x->parts;
}

static int coai__gm_outcome(coai_exec_outcome *o, coai_str t);   /* PART:GEMINI */

/* A delete's success: the size `wc -c < PATH` printed before the rm (blanks first on some
 * systems), a number alone on its line. Anything else (no output, text, a number past
 * 2^53) sets no size. */
static void coai__rl_delete_size(coai_exec_outcome *o)
{
    const char *p = o->out.ptr;
    size_t i = 0, n = o->out.len, d = 0;
    int64_t v = 0;
    if (o->is_error) return;
    while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, d++) {
        if (v > ((int64_t)1 << 53) / 10) return;
        v = v * 10 + (p[i] - '0');
    }
    if (!d || v > ((int64_t)1 << 53)) return;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r')) i++;
    if (i < n && p[i] != '\n') return;
    o->has_size = 1;
    o->file_size = v;
}

/* o is a failure whose error is e, cut to 4 KiB on a UTF-8 boundary (a refused command's
 * text can quote the whole command, base64 and all) */
static int coai__rl_failed(coai_exec_outcome *o, coai_str e)
{
    if (e.len > 4096) {
        e.len = 4096;
        while (e.len && ((unsigned char)e.ptr[e.len] & 0xc0) == 0x80) e.len--;
    }
    o->is_error = 1;
    o->err = e;
    o->out.len = 0;
    return 0;
}

int coai_exec_outcome_parse(coai_exec_outcome *o, const coai_exec_ref *x, coai_str tool,
                            coai_str text, int is_error)
{
    static const char *const n_codex_exec[] = { "exec_command", NULL };
    static const char *const n_codex_shell[] = { "shell", "shell_command", "local_shell",
                                                 "apply_patch", NULL };
    static const char *const n_qwen[] = { "run_shell_command", NULL };
    static const char *const n_bash[] = { "bash", NULL };
    static const char *const n_read[] = { "read", NULL };
    static const char *const n_patch[] = { "apply_patch", NULL };
    coai_exec_outcome raw;
    coai_str body;
    int kind = x ? x->kind : 0, shell = 0, rc = 0;
    coai_buf keep = o->own_, keep2 = o->unwrap_;
    memset(o, 0, sizeof *o);
    o->own_ = keep;
    o->unwrap_ = keep2;
    coai_buf_reset(&o->own_);
    /* a result in a one-element JSON array is read as the text inside (not an MCP one) */
    if (kind != COAI_EXEC_MCP && coai__rl_unwrap(o, &text, &is_error) < 0) return -1;
    o->is_error = is_error != 0;
    if (is_error) o->err = text;
    else o->out = text;
    o->shape = "raw";
    raw = *o;
#define COAI__RS_IS(list) (coai__rl_tool_is(tool, list))
    /* the shell layer; not for an MCP exec: Cursor's model called the client's tool by its
     * own name and gets its text as it is (an exit code line included) */
    o->err.len = 0;
    if (kind == COAI_EXEC_MCP) shell = 0;
    else if (COAI__RS_IS(n_codex_exec)) shell = coai__rl_codex_exec(o, text);
    else if (COAI__RS_IS(n_codex_shell)) shell = coai__rl_codex_shell(o, text);
    else if (COAI__RS_IS(n_qwen)) {
        shell = coai__rl_qwen(o, text);
        if (!shell) { coai__rl_back(o, &raw); o->err.len = 0; shell = coai__gm_outcome(o, text); }
    }
    else if (x && x->exit_trap && COAI__RS_IS(n_bash)) shell = coai__rl_trap(o, text);
    if (!shell && (kind != COAI_EXEC_READ || (x && x->via_shell)) && kind != COAI_EXEC_MCP
        && !(x && x->exit_trap)
        && !COAI__RS_IS(n_codex_exec) && !COAI__RS_IS(n_codex_shell)) {
        /* any other client (Codex's tools have a whole layout of their own, and a text
         * outside it is not a result of theirs): a first or last line naming the exit
         * code, in any phrasing */
        coai__rl_back(o, &raw);
        o->err.len = 0;
        shell = coai__rl_exit_line(o, text, coai__rl_reminder(text));
        if (shell < 0) { coai__rl_back(o, &raw); return -1; }
        /* a file read through a shell: the newline before a trailing code line is the
         * file's own last byte (Copilot writes its trailer right after the output) */
        if (shell > 0 && kind == COAI_EXEC_READ && o->out.ptr == text.ptr
            && o->out.len < text.len && text.ptr[o->out.len] == '\n')
            o->out.len++;
    }
    if (!shell && !is_error && COAI__RS_IS(n_bash) && coai__rl_reminder(text) < text.len) {
        /* Claude Code's Bash success: the output, its system reminder removed; no code */
        coai__rl_back(o, &raw);
        o->err.len = 0;
        o->out.len = coai__rl_reminder(text);
        o->shape = "claude-bash";
        shell = 1;
    }
    if (!shell) coai__rl_back(o, &raw);
    if (x && x->parts > 1 && (!shell || !o->has_exit || o->exit_code != 0 || o->is_error)) {
        /* a part of a split write counts as done only with exit code 0: a refused command
         * or one still running says nothing good about the file. Its text (which can
         * quote the whole command, base64 and all) is cut to 4 KiB. */
        return coai__rl_failed(o, shell && o->out.len ? o->out : text);
    }
    if (!shell && (kind == COAI_EXEC_WRITE || kind == COAI_EXEC_DELETE)
        && (COAI__RS_IS(n_codex_exec) || (COAI__RS_IS(n_codex_shell) && !COAI__RS_IS(n_patch)))) {
        /* a write or delete Codex's shell ran comes back in its layout; any other text (Codex
         * refused the command or could not start it: "exec_command failed: ...") did
         * nothing */
        return coai__rl_failed(o, text);
    }
    if (shell) {
        o->is_error = o->is_error || (o->has_exit && o->exit_code != 0);
        body = o->out;
        if (kind == COAI_EXEC_SHELL || kind == COAI_EXEC_SHELL_STREAM) return 0;
        if (kind == COAI_EXEC_GREP && o->has_exit && o->exit_code == 1 && !body.len)
            o->is_error = 0;                    /* grep / rg: no matches */
        if (o->is_error) {
            o->err = body.len ? body : o->err;
            if (!o->err.len) o->err = text;
            o->out.len = 0;
        }
        if (kind == COAI_EXEC_DELETE) coai__rl_delete_size(o);
        return 0;
    }
    if (kind == COAI_EXEC_DELETE) coai__rl_delete_size(o);
    if (is_error || kind != COAI_EXEC_READ) return 0;
    /* read tools */
    if (text.len > 16 && memcmp(text.ptr, "File not found: ", 16) == 0 && x
        && text.len - 16 == x->path.len && memcmp(text.ptr + 16, x->path.ptr, x->path.len) == 0) {
        o->is_error = 1;
        o->err = text;
        o->out.len = 0;
        o->shape = "not-found";
        return 0;
    }
    if (COAI__RS_IS(n_read)) {
        rc = coai__rl_oc_read(o, text);
        if (rc == 0) { coai__rl_back(o, &raw); rc = coai__rl_claude_read(o, text); }
        if (rc <= 0) coai__rl_back(o, &raw);
    }
#undef COAI__RS_IS
    return rc < 0 ? -1 : 0;
}

/* ---- coai_reply ---------------------------------------------------------- */

struct coai_reply_kv {
    unsigned char *mem;        /* id bytes followed by data bytes */
    size_t id_len, n;
};

#define COAI__OA_KV_OVERHEAD 64   /* bytes charged per blob on top of id + data */

/* A dialect's writer: how the reply's event sequence is spelled. The core (coai_reply)
 * decides when each event happens (commit rule, one tool call, errors, usage); a writer
 * only appends bytes to r->out. Streaming: begin once (the commit), then delta /
 * tool_call, then end or error. Non-streaming: body once, or the error body (written by
 * coai_error_write_as). keepalive while the upstream is silent (after begin). */
typedef struct coai__writer {
    void (*init)(coai_reply *r);                                   /* at coai_reply_init */
    void (*begin)(coai_reply *r);                                  /* stream: first bytes */
    void (*delta)(coai_reply *r, int ch, const char *s, size_t n); /* 0 text, 1 reasoning */
    void (*tool_call)(coai_reply *r);                     /* r->tc_id_/tc_name_/tc_args_ */
    void (*end)(coai_reply *r, coai_finish f);                     /* stream: last events */
    void (*body)(coai_reply *r, coai_finish f);                    /* non-stream: object */
    void (*error)(coai_reply *r);                        /* stream, committed: r->error */
    void (*keepalive)(coai_reply *r);
} coai__writer;

static const coai__writer *coai__writer_of(coai_dialect d);
typedef int (*coai__exec_map_fn)(const coai_exec *ex, const coai_tool *tools, size_t count,
                                 coai_str workspace, coai_tool_call *tc);
static coai__exec_map_fn coai__exec_map_of(coai_dialect d);
static int coai__reply_end(coai_reply *r, coai_finish f);

void coai_reply_opts_from_request(coai_reply_opts *o, const coai_request *req)
{
    o->dialect = req->dialect;
    o->stream = req->stream;
    o->include_usage = req->include_usage;
    o->tools = req->tool_count ? req->tools : NULL;
    o->tool_count = req->tool_count;
    o->session_id = req->session_id;
    o->prompt.ptr = req->prompt.data ? (const char *)req->prompt.data : "";
    o->prompt.len = req->prompt.len;
    o->stop = req->stop_count ? req->stop : NULL;
    o->stop_count = req->stop_count;
    o->max_tokens = req->max_tokens > 0 ? req->max_tokens : 0;
    o->json_check = req->response_json;
    o->json_schema = req->response_schema;
}

static int coai__core_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Append the [A-Za-z0-9] characters of s, at most max of them; returns the count. */
static size_t coai__core_alnum_append(coai_buf *b, coai_str s, size_t max)
{
    size_t i, k = 0;
    for (i = 0; i < s.len && k < max; i++)
        if (coai__core_alnum(s.ptr[i])) { coai_buf_putc(b, s.ptr[i]); k++; }
    return k;
}

int coai_reply_init(coai_reply *r, const coai_reply_opts *o)
{
    size_t i, k = 0;
    memset(r, 0, sizeof *r);
    if (!o || !o->send || !o->completion_id.len || !o->model.len) return COAI_ERR_INVALID;
    r->o_ = *o;
    if (!r->o_.max_kv_bytes) r->o_.max_kv_bytes = COAI_MAX_KV_BYTES;
    if (!r->o_.tools) r->o_.tool_count = 0;
    for (i = 0; i < o->session_id.len && k < 32; i++)
        if (coai__core_alnum(o->session_id.ptr[i])) r->session_[k++] = o->session_id.ptr[i];
    if (!k) {
        /* No session id given: the completion id's hex is unique per response too. */
        coai_str c = o->completion_id;
        if (c.len > 9 && memcmp(c.ptr, "chatcmpl-", 9) == 0) { c.ptr += 9; c.len -= 9; }
        for (i = 0; i < c.len && k < 12; i++)
            if (coai__core_alnum(c.ptr[i])) r->session_[k++] = c.ptr[i];
        if (!k) r->session_[k++] = '0';
    }
    r->session_[k] = 0;
    r->stop_hit_ = -1;
    if (!r->o_.stop) r->o_.stop_count = 0;
    r->prompt_units_ = coai__core_utf16_len(o->prompt.ptr ? o->prompt.ptr : "", o->prompt.len);
    if ((unsigned)o->dialect >= COAI_DIALECT_COUNT_) r->o_.dialect = COAI_DIALECT_OPENAI_CHAT;
    r->w_ = coai__writer_of(r->o_.dialect);
    if (r->w_->init) r->w_->init(r);
    if (r->prefix_.err || coai_buf_reserve(&r->out, 0)) {
        coai_reply_free(r);
        return COAI_ERR_NOMEM;
    }
    return 0;
}

static void coai__core_calls_clear(coai_reply *r)
{
    size_t i;
    for (i = 0; i < r->ncalls_; i++) free(r->calls_[i].mem_);
    free(r->calls_);
    r->calls_ = NULL;
    r->ncalls_ = 0;
}

int coai_reply_continue(coai_reply *r, const coai_reply_opts *o)
{
    if (!o || !o->send || !o->completion_id.len || !o->model.len) return COAI_ERR_INVALID;
    coai__core_calls_clear(r);
    coai_buf_free(&r->out);
    coai_buf_reset(&r->content_);
    coai_buf_reset(&r->reasoning_);
    coai_buf_reset(&r->fallback_);
    coai_buf_reset(&r->prefix_);
    coai_buf_reset(&r->said_);
    r->said_cut_ = 0;
    r->o_ = *o;
    if (!r->o_.max_kv_bytes) r->o_.max_kv_bytes = COAI_MAX_KV_BYTES;
    if (!r->o_.tools) r->o_.tool_count = 0;
    if ((unsigned)r->o_.dialect >= COAI_DIALECT_COUNT_) r->o_.dialect = COAI_DIALECT_OPENAI_CHAT;
    r->committed_ = r->done_ = r->status_ = r->text_streamed_ = r->tools_open_ = 0;
    r->has_tool_call_ = 0;
    r->carry_len_[0] = r->carry_len_[1] = 0;
    r->completion_units_ = 0;
    r->token_sum_ = 0;
    r->have_token_delta_ = r->status_ok_ = 0;
    memset(&r->turn_, 0, sizeof r->turn_);
    r->queries = r->rejected = 0;
    r->finish_ = COAI_FINISH_STOP;
    r->block_ = r->block_open_ = 0;
    r->rs_seq_ = 0;
    r->rs_index_ = r->rs_open_ = 0;
    r->rs_reason_units_ = 0;
    coai_buf_reset(&r->rs_items_);
    coai_buf_reset(&r->rs_final_);
    memset(&r->error, 0, sizeof r->error);
    r->prompt_units_ = coai__core_utf16_len(o->prompt.ptr ? o->prompt.ptr : "", o->prompt.len);
    r->w_ = coai__writer_of(r->o_.dialect);
    if (r->w_->init) r->w_->init(r);
    return r->prefix_.err || coai_buf_reserve(&r->out, 0) ? COAI_ERR_NOMEM : 0;
}

void coai_reply_free(coai_reply *r)
{
    size_t i;
    for (i = 0; i < r->kv_count_; i++) free(r->kv_[i].mem);
    free(r->kv_);
    coai_buf_free(&r->out);
    coai_buf_free(&r->prefix_);
    coai_buf_free(&r->content_);
    coai_buf_free(&r->reasoning_);
    coai_buf_free(&r->scratch_);
    coai_buf_free(&r->tmp_);
    coai_buf_free(&r->tc_id_);
    coai_buf_free(&r->tc_name_);
    coai_buf_free(&r->tc_args_);
    coai_buf_free(&r->fallback_);
    coai_buf_free(&r->checkpoint_);
    coai_buf_free(&r->said_);
    coai__core_calls_clear(r);
    coai_buf_free(&r->rs_items_);
    coai_buf_free(&r->rs_final_);
    coai_buf_free(&r->hold_);
    memset(r, 0, sizeof *r);
}

int coai_reply_started(const coai_reply *r) { return r->committed_; }
int coai_reply_done(const coai_reply *r) { return r->done_; }
int coai_reply_tool_called(const coai_reply *r) { return r->done_ && r->has_tool_call_; }
size_t coai_reply_tools_pending(const coai_reply *r) { return r->tools_open_ ? r->ncalls_ : 0; }

size_t coai_reply_calls(const coai_reply *r, const coai_reply_call **calls)
{
    if (calls) *calls = r->calls_;
    return r->ncalls_;
}

coai_str coai_reply_text(const coai_reply *r, int *text_cut)
{
    coai_str s;
    s.ptr = r->said_.data ? (const char *)r->said_.data : "";
    s.len = r->said_.len;
    if (text_cut) *text_cut = r->said_cut_;
    return s;
}

size_t coai_reply_kv_count(const coai_reply *r) { return r->kv_count_; }
unsigned coai_reply_kv_misses(const coai_reply *r) { return r->kv_misses_; }

void coai_reply_kv_at(const coai_reply *r, size_t i, coai_str *id, coai_str *data)
{
    const coai_reply_kv *e = &r->kv_[i];
    id->ptr = (const char *)e->mem;
    id->len = e->id_len;
    data->ptr = (const char *)e->mem + e->id_len;
    data->len = e->n;
}

coai_str coai_reply_checkpoint(const coai_reply *r)
{
    coai_str s = { "", 0 };
    if (r->have_checkpoint_) {
        s.ptr = r->checkpoint_.data ? (const char *)r->checkpoint_.data : "";
        s.len = r->checkpoint_.len;
    }
    return s;
}
int coai_reply_status(const coai_reply *r) { return r->status_ ? r->status_ : 200; }

int coai_reply_head(const coai_reply *r, coai_buf *out)
{
    /* stream 2: Gemini's JSON-array stream (streamGenerateContent without alt=sse) */
    int sse = r->o_.stream && r->o_.stream != 2 && coai_reply_status(r) == 200;
    coai_buf_puts(out, sse ? "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           : "Content-Type: application/json\r\n");
    if (r->error.status && r->error.no_retry) coai_buf_puts(out, "x-should-retry: false\r\n");
    if (r->error.status && r->error.retry_after > 0)
        coai_buf_printf(out, "Retry-After: %d\r\n", r->error.retry_after);
    return out->err ? -1 : 0;
}

static int coai__core_out_result(coai_reply *r)
{
    return r->out.err ? COAI_ERR_NOMEM : (r->done_ ? COAI_DONE : COAI_OK);
}

/* ---- the reply's output, shared by every writer: usage, commit, errors ---- */

static int64_t coai__core_tokn(int64_t v)
{
    return v > 0 && v < 1000000000000LL ? v : 0;
}

void coai_reply_usage(const coai_reply *r, coai_usage *u)
{
    int64_t c, p;
    const coai_turn_usage *t = &r->turn_;
    if (t->present && (coai__core_tokn(t->input) || coai__core_tokn(t->output))) {
        c = coai__core_tokn(t->output);
        if (r->limit_hit_ && c > r->o_.max_tokens) c = r->o_.max_tokens;
        u->cache_read_tokens = coai__core_tokn(t->cache_read);
        u->cache_write_tokens = coai__core_tokn(t->cache_write);
        u->input_tokens = coai__core_tokn(t->input);       /* the cached parts included */
        u->cache_over_input = u->cache_read_tokens > u->input_tokens;
        u->output_tokens = c;
        u->reasoning_tokens = coai__core_tokn(t->reasoning) < c ? coai__core_tokn(t->reasoning) : c;
        u->reported = 1;
        return;
    }
    u->reasoning_tokens = 0;
    u->reported = 0;
    u->cache_over_input = 0;
    c = r->have_token_delta_ ? r->token_sum_ : (int64_t)((r->completion_units_ + 3) / 4);
    if (r->limit_hit_ && c > r->o_.max_tokens) c = r->o_.max_tokens;   /* what was sent */
    p = r->used_tokens_ > c ? r->used_tokens_ - c : (int64_t)((r->prompt_units_ + 3) / 4);
    u->input_tokens = p;
    u->output_tokens = c;
    u->cache_read_tokens = r->cache_read_ >= 0 && r->cache_read_ <= p ? r->cache_read_ : 0;
    u->cache_write_tokens = r->cache_write_ >= 0
                            && r->cache_write_ <= p - u->cache_read_tokens ? r->cache_write_ : 0;
}

/* The first client byte: from here on errors are in-band. */
static void coai__core_commit(coai_reply *r)
{
    if (r->committed_) return;
    r->committed_ = 1;
    r->status_ = 200;
    if (r->o_.stream) r->w_->begin(r);
}

#ifndef COAI_EXHAUSTED_SMALL_TOKENS
#define COAI_EXHAUSTED_SMALL_TOKENS 16000     /* a bare resource_exhausted below: plan-gated */
#endif
#ifndef COAI_EXHAUSTED_LARGE_TOKENS
#define COAI_EXHAUSTED_LARGE_TOKENS 100000    /* ... at or above: the conversation is too big */
#endif

/* A bare resource_exhausted (no details, no tokens) is context overflow unless the request
 * was small, and then a model the plan does not allow (seen live in 2026, a ~20-token
 * prompt got it live): classified by the prompt's estimated size; in between it stays the
 * ambiguous error. */
static void coai__core_exhausted_by_size(const coai_reply *r, coai_error *e)
{
    int64_t tok = (int64_t)((r->prompt_units_ + 3) / 4);
    char said[sizeof ((coai_error *)0)->message];
    const char *w = strstr(e->message, "Cursor said: ");
    snprintf(said, sizeof said, "%s", w ? w + 13 : "resource_exhausted");
    if (tok < COAI_EXHAUSTED_SMALL_TOKENS) {
        coai_error_set(e, 400, "invalid_request_error", "model_not_available", "model",
                       "Cursor answered resource_exhausted without details to a small request "
                       "(about %lld tokens): the model is most likely not available on your "
                       "Cursor plan (e.g. a fast or max variant). Try another model. Cursor "
                       "said: %s", (long long)tok, said);
        e->no_retry = 1;
    } else if (tok >= COAI_EXHAUSTED_LARGE_TOKENS) {
        coai_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                       "Cursor answered resource_exhausted without details to a conversation "
                       "of about %lld tokens: it is too large for the model. Shorten or compact "
                       "it. Cursor said: %s", (long long)tok, said);
        e->no_retry = 1;
    }
}

/* 1 when a JSON schema has more than plain typed properties: a reference, a combinator or
 * conditional, pattern properties, or nesting past 8 levels (what Cursor's tool-schema reader
 * is likeliest to choke on). *why: the first such keyword. */
static int coai__schema_unusual(const cJSON *s, int depth, const char **why)
{
    static const char *const kw[] = { "$ref", "$defs", "definitions", "anyOf", "oneOf",
                                      "allOf", "not", "if", "patternProperties",
                                      "dependentSchemas", "$dynamicRef" };
    const cJSON *c;
    size_t i;
    if (depth > 8) { *why = "nesting deeper than 8 levels"; return 1; }
    if (cJSON_IsObject(s))
        for (i = 0; i < sizeof kw / sizeof kw[0]; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, kw[i])) { *why = kw[i]; return 1; }
    if (cJSON_IsObject(s) || cJSON_IsArray(s))
        for (c = s->child; c; c = c->next)
            if (coai__schema_unusual(c, depth + 1, why)) return 1;
    return 0;
}

/* invalid_tool_schema: name the tool when the request tells which: its only tool, or the
 * only one whose schema is unusual (coai__schema_unusual); else "one of the N". A request
 * without tools: Cursor could not parse the request itself, a 502. */
static void coai__core_tool_schema(const coai_reply *r, coai_error *e)
{
    size_t i, n = r->o_.tools ? r->o_.tool_count : 0, odd = 0, which = 0;
    const char *why = NULL, *w;
    char said[300];
    const char *p = strstr(e->message, "(Cursor said: ");
    size_t sl = 0;
    if (p) {                   /* up to the mapper's own words after Cursor's */
        const char *q;
        p += 14;
        q = strstr(p, "). Simplify the tool's parameters schema");
        sl = q ? (size_t)(q - p) : strlen(p);
    }
    snprintf(said, sizeof said, "%.*s", (int)(sl < sizeof said ? sl : sizeof said - 1),
             p ? p : "");
    for (i = 0; i < n; i++) {
        w = NULL;
        if (r->o_.tools[i].parameters
            && coai__schema_unusual(r->o_.tools[i].parameters, 0, &w)) {
            if (!odd++) { which = i; why = w; }
        }
    }
    if (!n) {
        coai_error_set(e, 502, "upstream_error", "upstream_error", NULL,
                       "Cursor could not parse cursor-oai's run request (Cursor said: %s)",
                       said);
    } else if (n == 1) {
        coai_error_set(e, 400, "invalid_request_error", "invalid_tool_schema", "tools",
                       "Cursor could not read the parameters schema of the tool \"%.*s\" "
                       "(Cursor said: %s). Simplify that schema%s%s%s or leave the tool out.",
                       (int)(r->o_.tools[0].name.len > 64 ? 64 : r->o_.tools[0].name.len),
                       r->o_.tools[0].name.ptr, said, why ? " (it uses " : "",
                       why ? why : "", why ? ")" : "");
    } else if (odd == 1) {
        coai_error_set(e, 400, "invalid_request_error", "invalid_tool_schema", "tools",
                       "Cursor could not read one of the %zu tool schemas (Cursor said: %s); "
                       "the likeliest is the tool \"%.*s\", the only one whose parameters "
                       "schema uses %s. Simplify that schema or leave the tool out.", n, said,
                       (int)(r->o_.tools[which].name.len > 64 ? 64
                             : r->o_.tools[which].name.len),
                       r->o_.tools[which].name.ptr, why);
    } else {
        coai_error_set(e, 400, "invalid_request_error", "invalid_tool_schema", "tools",
                       "Cursor could not read one of the %zu tool schemas (Cursor said: %s). "
                       "Simplify the tools' parameters schemas (references, anyOf/oneOf, deep "
                       "nesting) or send fewer tools.", n, said);
    }
    e->no_retry = 1;
}

static int coai__core_fail(coai_reply *r, const coai_error *e)
{
    if (r->done_) return COAI_DONE;
    r->error = *e;
    if (r->error.code && strcmp(r->error.code, "upstream_resource_exhausted") == 0)
        coai__core_exhausted_by_size(r, &r->error);
    if (r->error.code && strcmp(r->error.code, "invalid_tool_schema") == 0)
        coai__core_tool_schema(r, &r->error);
    if (!r->error.status) r->error.status = 502;
    if (!r->error.type) r->error.type = "upstream_error";
    if (!r->committed_) {
        r->committed_ = 1;
        r->status_ = coai_error_status_as(&r->error, r->o_.dialect);
        coai_buf_reset(&r->out);
        coai_error_write_as(&r->out, &r->error, r->o_.dialect);
    } else if (r->o_.stream) {
        r->w_->error(r);
    }
    r->done_ = 1;
    return coai__core_out_result(r);
}

static int coai__core_fail_nomem(coai_reply *r)
{
    coai_error e;
    coai_error_set(&e, 500, "server_error", NULL, NULL, "Out of memory in the proxy");
    coai__core_fail(r, &e);
    return COAI_ERR_NOMEM;
}

/* Emit text that is already cut at a character boundary (ch 0 content, 1 reasoning). */
static void coai__core_emit(coai_reply *r, int ch, const char *s, size_t n)
{
    if (!n) return;
    r->completion_units_ += coai__core_utf16_len(s, n);
    if (ch == 0) {
        r->text_streamed_ = 1;
        if (!r->said_cut_ && r->said_.len + n <= COAI_MAX_KEEP_TEXT)
            coai_buf_append(&r->said_, s, n);
        else
            r->said_cut_ = 1;
        if (r->said_.err) r->said_cut_ = 1;
    }
    if (r->o_.stream) {
        coai__core_commit(r);
        r->w_->delta(r, ch, s, n);
    } else {
        coai_buf_append(ch ? &r->reasoning_ : &r->content_, s, n);
    }
}

/* ---- emulated request fields: stop sequences, max_tokens, a JSON answer ---- */

/* Longest prefix of s[0..n), ending at a character start, of at most `units` UTF-16 units
 * (the same count as coai__core_utf16_len). */
static size_t coai__utf16_prefix(const char *s, size_t n, size_t units)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, u = 0;
    while (i < n) {
        size_t k = 1, cu = 1;
        if (p[i] >= 0xf0) { k = 4; cu = 2; }
        else if (p[i] >= 0xe0) k = 3;
        else if (p[i] >= 0xc0) k = 2;
        if (k > n - i) k = n - i;
        if (u + cu > units) break;
        u += cu;
        i += k;
    }
    return i;
}

/* First offset of needle in hay, or (size_t)-1. */
static size_t coai__find(const unsigned char *hay, size_t n, coai_str needle)
{
    size_t i;
    if (!needle.len || needle.len > n) return (size_t)-1;
    for (i = 0; i + needle.len <= n; i++)
        if (hay[i] == (unsigned char)needle.ptr[0] && memcmp(hay + i, needle.ptr, needle.len) == 0)
            return i;
    return (size_t)-1;
}

/* Every piece of client-visible text goes through here (ch 0 content, 1 reasoning).
 * max_tokens: the text is cut where the estimate (UTF-16 units / 4, the usage estimate) or
 * Cursor's own token count reaches the limit, and the reply ends with LENGTH. stop: content
 * is held back while its tail could still become a stop sequence, so a sequence split
 * across deltas is caught; on a match the text before it goes out and the reply ends with
 * STOP_SEQUENCE (the rest of Cursor's run is dropped). */
static int coai__emit_filtered(coai_reply *r, int ch, const char *s, size_t n)
{
    int cut = 0;
    if (r->done_) return COAI_DONE;
    if (r->o_.max_tokens > 0) {
        uint64_t budget = (uint64_t)r->o_.max_tokens * 4;
        uint64_t used = (uint64_t)r->completion_units_
                        + coai__core_utf16_len((const char *)r->hold_.data, r->hold_.len);
        size_t left = budget > used ? (size_t)(budget - used) : 0;
        if (r->have_token_delta_ && r->token_sum_ >= r->o_.max_tokens) left = 0;
        if (coai__core_utf16_len(s, n) > left) {
            n = coai__utf16_prefix(s, n, left);
            cut = 1;
        }
    }
    if (ch == 0 && r->o_.stop_count) {
        size_t i, best = (size_t)-1, maxlen = 0, keep, out;
        int which = -1;
        coai_buf_append(&r->hold_, s, n);
        if (r->hold_.err) return coai__core_fail_nomem(r);
        for (i = 0; i < r->o_.stop_count; i++) {
            size_t at = coai__find(r->hold_.data, r->hold_.len, r->o_.stop[i]);
            if (r->o_.stop[i].len > maxlen) maxlen = r->o_.stop[i].len;
            if (at < best) { best = at; which = (int)i; }
        }
        if (which >= 0) {
            coai__core_emit(r, 0, (const char *)r->hold_.data, best);
            coai_buf_reset(&r->hold_);
            if (r->out.err || r->content_.err) return coai__core_fail_nomem(r);
            r->stop_hit_ = which;
            return coai__reply_end(r, COAI_FINISH_STOP_SEQUENCE);
        }
        keep = cut ? 0 : maxlen ? maxlen - 1 : 0;
        if (keep > r->hold_.len) keep = r->hold_.len;
        out = r->hold_.len - keep;
        while (out > 0 && out < r->hold_.len && (r->hold_.data[out] & 0xc0) == 0x80) out--;
        coai__core_emit(r, 0, (const char *)r->hold_.data, out);
        memmove(r->hold_.data, r->hold_.data + out, r->hold_.len - out);
        r->hold_.len -= out;
    } else {
        coai__core_emit(r, ch, s, n);
    }
    if (r->out.err || r->content_.err || r->reasoning_.err) return coai__core_fail_nomem(r);
    if (cut) {
        r->limit_hit_ = 1;
        return coai__reply_end(r, COAI_FINISH_LENGTH);
    }
    return COAI_OK;
}

/* The stop sequence that ended the reply as a JSON string, or null (Anthropic reports it). */
static void coai__stop_matched(const coai_reply *r, coai_buf *b)
{
    if (r->stop_hit_ < 0 || (size_t)r->stop_hit_ >= r->o_.stop_count) coai_buf_puts(b, "null");
    else coai_json_str_append(b, r->o_.stop[r->stop_hit_].ptr, r->o_.stop[r->stop_hit_].len);
}

/* The non-streaming JSON check of response_format: the answer (without surrounding white
 * space and ``` fences, which are removed from the reply) must be one JSON object holding
 * the schema's top-level "required" members. 0 ok, else -1 and *e (a 502: the model did
 * not deliver what was asked; a retry may). */
static int coai__json_answer_check(coai_reply *r, coai_error *e)
{
    const char *p = r->content_.data ? (const char *)r->content_.data : "", *end = NULL;
    size_t n = r->content_.len;
    cJSON *j;
    const cJSON *req, *it;
    const char *why = NULL;
    char missing[80];
    while (n && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) { p++; n--; }
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == '\t'))
        n--;
    if (n >= 6 && memcmp(p, "```", 3) == 0 && memcmp(p + n - 3, "```", 3) == 0) {
        const char *nl = (const char *)memchr(p, '\n', n - 3);
        if (nl) {
            n -= (size_t)(nl + 1 - p) + 3;
            p = nl + 1;
            while (n && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\r')) n--;
        }
    }
    j = n ? cJSON_ParseWithLengthOpts(p, n, &end, 0) : NULL;
    if (!j || end != p + n) why = "is not valid JSON";
    else if (!cJSON_IsObject(j)) why = "is JSON but not an object";
    req = r->o_.json_schema ? cJSON_GetObjectItemCaseSensitive(r->o_.json_schema, "required")
                            : NULL;
    if (!why && cJSON_IsArray(req)) {
        cJSON_ArrayForEach(it, req) {
            if (cJSON_IsString(it) && !cJSON_GetObjectItemCaseSensitive(j, it->valuestring)) {
                snprintf(missing, sizeof missing, "lacks the required member '%.40s'",
                         it->valuestring);
                why = missing;
                break;
            }
        }
    }
    cJSON_Delete(j);
    if (why) {
        coai_error_set(e, 502, "upstream_error", "invalid_json_output", "response_format",
                       "The model's answer %s, as response_format asked (emulated: Cursor "
                       "has no JSON mode). It began: %.120s", why,
                       r->content_.len ? (const char *)r->content_.data : "(empty)");
        return -1;
    }
    if (p != (const char *)r->content_.data || n != r->content_.len) {
        memmove(r->content_.data, p, n);
        r->content_.len = n;
        r->content_.data[n] = 0;
    }
    return 0;
}

/* Bytes at the end of p[0..n) that start a character the next delta completes. */
static size_t coai__core_utf8_tail(const unsigned char *p, size_t n)
{
    size_t i;
    for (i = n > 3 ? n - 3 : 0; i < n; i++)
        if (p[i] >= 0xc2 && coai__utf8_seq(p + i, n - i) == -1) return n - i;
    return 0;
}

static int coai__core_text(coai_reply *r, int ch, coai_str t)
{
    size_t hold, total;
    if (!t.len) return COAI_OK;
    coai_buf_reset(&r->tmp_);
    coai_buf_append(&r->tmp_, r->carry_[ch], r->carry_len_[ch]);
    coai_buf_append(&r->tmp_, t.ptr, t.len);
    if (r->tmp_.err) return coai__core_fail_nomem(r);
    total = r->tmp_.len;
    hold = coai__core_utf8_tail(r->tmp_.data, total);
    memcpy(r->carry_[ch], r->tmp_.data + total - hold, hold);
    r->carry_len_[ch] = hold;
    return coai__emit_filtered(r, ch, (const char *)r->tmp_.data, total - hold);
}

/* A character still cut off when the text ends is emitted as is (U+FFFD); text held for
 * a possible stop sequence goes out too (nothing can complete it any more). Returns
 * COAI_OK, or COAI_DONE when the emulated stop / max_tokens ended the reply. */
static int coai__core_flush_carry(coai_reply *r)
{
    int ch, rc = COAI_OK;
    for (ch = 1; ch >= 0 && rc == COAI_OK; ch--) {
        size_t n = r->carry_len_[ch];
        if (!n) continue;
        r->carry_len_[ch] = 0;
        rc = coai__emit_filtered(r, ch, (const char *)r->carry_[ch], n);
    }
    if (rc == COAI_OK && r->hold_.len) {
        coai__core_emit(r, 0, (const char *)r->hold_.data, r->hold_.len);
        coai_buf_reset(&r->hold_);
    }
    return rc;
}

/* Normal end of the turn. */
static int coai__core_finish(coai_reply *r)
{
    if (r->done_) return COAI_DONE;
    if (coai__core_flush_carry(r) != COAI_OK || r->done_) return coai__core_out_result(r);
    if (!r->text_streamed_ && r->fallback_.len) {
        size_t i = 0;
        while (i + 4 <= r->fallback_.len) {
            const unsigned char *p = r->fallback_.data + i;
            size_t n = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
            if (n > r->fallback_.len - i - 4) break;
            if (coai__emit_filtered(r, 0, (const char *)p + 4, n) != COAI_OK || r->done_)
                return coai__core_out_result(r);
            i += 4 + n;
        }
        if (coai__core_flush_carry(r) != COAI_OK || r->done_) return coai__core_out_result(r);
    }
    return coai__reply_end(r, COAI_FINISH_STOP);
}

/* The last events of a normal end (stream) or the whole object (non-streaming). */
static int coai__reply_end(coai_reply *r, coai_finish f)
{
    r->finish_ = f;
    if (r->o_.stream) {
        coai__core_commit(r);
        r->w_->end(r, f);
    } else {
        if (r->content_.err || r->reasoning_.err) return coai__core_fail_nomem(r);
        if (r->o_.json_check && f != COAI_FINISH_TOOL_CALLS) {
            coai_error je;
            if (coai__json_answer_check(r, &je) != 0) return coai__core_fail(r, &je);
        }
        r->committed_ = 1;
        r->status_ = 200;
        r->w_->body(r, f);
    }
    r->done_ = 1;
    return coai__core_out_result(r);
}

static int coai__core_send(coai_reply *r)
{
    coai_error e;
    if (r->scratch_.err) return coai__core_fail_nomem(r);
    if (r->o_.send(r->o_.send_user, r->scratch_.data, r->scratch_.len) == 0) return COAI_OK;
    coai_error_set(&e, 502, "upstream_error", "upstream_error", NULL,
                   "Could not deliver a reply to Cursor (BidiAppend failed)");
    return coai__core_fail(r, &e);
}

static coai_str coai__core_bufstr(const coai_buf *b)
{
    coai_str s;
    s.ptr = b->data ? (const char *)b->data : "";
    s.len = b->len;
    return s;
}

/* Remember the tool call now in tc_id_/tc_name_/tc_args_: the id, tool and arguments for
 * the writers, and what its result must be sent upstream as. */
static int coai__core_call_add(coai_reply *r, const coai_exec *ex)
{
    coai_reply_call *nc, *c;
    coai_str parts[7];
    coai_str *dst[7];
    size_t i, total = 0, at = 0;
    parts[0] = ex->exec_id; parts[1] = ex->command; parts[2] = ex->cwd; parts[3] = ex->path;
    parts[4] = coai__core_bufstr(&r->tc_id_); parts[5] = coai__core_bufstr(&r->tc_name_);
    parts[6] = coai__core_bufstr(&r->tc_args_);
    nc = (coai_reply_call *)realloc(r->calls_, (r->ncalls_ + 1) * sizeof *nc);
    if (!nc) return -1;
    r->calls_ = nc;
    c = &nc[r->ncalls_];
    memset(c, 0, sizeof *c);
    for (i = 0; i < 7; i++) total += parts[i].len + 1;
    c->mem_ = (char *)malloc(total);
    if (!c->mem_) return -1;
    dst[0] = &c->ref.exec_id; dst[1] = &c->ref.command; dst[2] = &c->ref.cwd;
    dst[3] = &c->ref.path; dst[4] = &c->call_id; dst[5] = &c->tool; dst[6] = &c->args;
    for (i = 0; i < 7; i++) {
        if (parts[i].len) memcpy(c->mem_ + at, parts[i].ptr, parts[i].len);
        c->mem_[at + parts[i].len] = 0;
        dst[i]->ptr = c->mem_ + at;
        dst[i]->len = parts[i].len;
        at += parts[i].len + 1;
    }
    c->ref.kind = (int)ex->kind;
    c->ref.id = ex->id;
    if (ex->kind == COAI_EXEC_WRITE) {
        c->ref.write_lines = (int64_t)coai__lines(ex->content, 0);
        c->ref.write_size = (int64_t)ex->content.len;
    }
    r->ncalls_++;
    return 0;
}

static int coai__core_tool_call(coai_reply *r, const coai_exec *ex, const coai_tool_call *tc)
{
    coai_str b;
    coai_buf *id = &r->tc_id_;
    const coai_tool *t = &r->o_.tools[tc->tool];
    if (coai__core_flush_carry(r) != COAI_OK || r->done_) return coai__core_out_result(r);
    coai_buf_reset(id);
    coai_buf_puts(id, "sess_");
    coai_buf_puts(id, r->session_);
    coai_buf_puts(id, "__call_");
    b = ex->kind == COAI_EXEC_MCP ? ex->tool_call_id : ex->exec_id;
    if (!coai__core_alnum_append(id, b, 32) && !coai__core_alnum_append(id, ex->exec_id, 32))
        coai_buf_printf(id, "%lu", (unsigned long)ex->id);
    if (tc->parts > 1) coai_buf_printf(id, "_part%u", tc->part + 1);
    coai_buf_reset(&r->tc_name_);
    coai_buf_append(&r->tc_name_, t->name.ptr, t->name.len);
    coai_buf_reset(&r->tc_args_);
    coai_buf_append(&r->tc_args_, tc->args.data, tc->args.len);
    if (id->err || r->tc_name_.err || r->tc_args_.err) return coai__core_fail_nomem(r);
    if (coai__core_call_add(r, ex) < 0) return coai__core_fail_nomem(r);
    r->calls_[r->ncalls_ - 1].ref.exit_trap = coai__core_traps_exit(r->o_.dialect, (int)ex->kind,
                                                                  t);
    r->calls_[r->ncalls_ - 1].ref.via_shell = tc->via_shell;
    if (tc->parts > 1) {
        r->calls_[r->ncalls_ - 1].ref.part = tc->part;
        r->calls_[r->ncalls_ - 1].ref.parts = tc->parts;
    }
    r->has_tool_call_ = 1;
    r->completion_units_ += coai__core_utf16_len(t->name.ptr, t->name.len)
                            + coai__core_utf16_len((const char *)tc->args.data, tc->args.len);
    if (r->o_.stream) {
        coai__core_commit(r);
        r->w_->tool_call(r);
    }
    r->tools_open_ = 1;
    /* a split exec's calls go out together, whatever batch_tools says */
    if (r->o_.batch_tools || tc->part + 1 < tc->parts) return coai__core_out_result(r);
    return coai_reply_end_tools(r);
}

int coai_reply_end_tools(coai_reply *r)
{
    if (r->done_) return COAI_DONE;
    if (!r->tools_open_) return COAI_OK;
    r->tools_open_ = 0;
    return coai__reply_end(r, COAI_FINISH_TOOL_CALLS);
}

/* Nothing is ever run on the proxy host: an exec no client tool matches gets what the
 * CLI sends for an exec it cannot run, throw{id, error} then stream_close{id} (as the
 * 2026 CLI and its peers do); the model reads the error and carries on. */
/* why: the sentence Cursor gets (NULL: no matching tool) */
static int coai__core_throw(coai_reply *r, const coai_exec *ex, const char *why)
{
    int rc;
    coai_buf wb = { 0 };
    r->rejected++;
    coai_buf_reset(&r->scratch_);
    if (!why) {
        /* which of Cursor's tools this was, what the client's tools can do instead */
        if (coai_exec_refusal(&wb, ex, r->o_.tools, r->o_.tools ? r->o_.tool_count : 0) < 0) {
            coai_buf_free(&wb);
            return coai__core_fail_nomem(r);
        }
        why = (const char *)wb.data;
    }
    coai_encode_exec_throw(&r->scratch_, ex->id, coai_str_c(why));
    coai_buf_free(&wb);
    if ((rc = coai__core_send(r)) != COAI_OK) return rc;
    coai_buf_reset(&r->scratch_);
    coai_encode_exec_stream_close(&r->scratch_, ex->id);
    return coai__core_send(r);
}

static int coai__core_exec(coai_reply *r, const coai_exec *ex)
{
    coai_tool_call tc;
    coai_str ws = r->o_.env ? r->o_.env->workspace : coai_str_c("");
    int m, rc;
    if (ex->kind == COAI_EXEC_REQUEST_CONTEXT) {
        coai_run_params dflt;
        memset(&dflt, 0, sizeof dflt);
        coai_buf_reset(&r->scratch_);
        coai_encode_exec_request_context(&r->scratch_, ex->id, ex->exec_id,
                                         r->o_.env ? r->o_.env : &dflt);
        if ((rc = coai__core_send(r)) != COAI_OK) return rc;
        coai_buf_reset(&r->scratch_);
        coai_encode_exec_stream_close(&r->scratch_, ex->id);
        return coai__core_send(r);
    }
    if (ex->kind == COAI_EXEC_MCP_STATE || ex->kind == COAI_EXEC_SUBAGENT
        || (ex->kind >= COAI_EXEC_PRECHECK_FIRST && ex->kind <= COAI_EXEC_PRECHECK_LAST)) {
        /* Since 2026-09 Grok asks for the MCP server state before it calls a tool: a throw
         * leaves the tools "unavailable". Prechecks carry allowlisted (an empty result is
         * "no", as Cursor's SDK reads it): the MCP one (42) yes, the tools are the client's
         * own; the web fetch one (43) yes, as the SDK answers (Cursor fetches, not this
         * host); the shell one (41) no. A subagent request (28) gets a typed SubagentError,
         * not a throw (N5: the throw broke PIC's turns, its #42). */
        coai_buf_reset(&r->scratch_);
        if (ex->kind == COAI_EXEC_MCP_STATE)
            rc = coai_encode_exec_mcp_state(&r->scratch_, ex->id, ex->exec_id, r->o_.tools,
                                            r->o_.tools ? r->o_.tool_count : 0,
                                            ex->server_ids, ex->server_id_count);
        else if (ex->kind == COAI_EXEC_SUBAGENT) {
            r->rejected++;
            rc = coai_encode_exec_subagent_error(&r->scratch_, ex->id, ex->exec_id, coai_str_c(
                "Subagents are not available through this API client (cursor-oai). Do the "
                "task yourself with the provided tools."));
        } else
            rc = coai_encode_exec_precheck(&r->scratch_, ex->id, ex->exec_id, (int)ex->kind,
                                           ex->kind != 41);
        if (rc != COAI_OK) return rc == COAI_ERR_NOMEM ? coai__core_fail_nomem(r)
                                                      : coai__core_throw(r, ex, NULL);
        if ((rc = coai__core_send(r)) != COAI_OK) return rc;
        coai_buf_reset(&r->scratch_);
        coai_encode_exec_stream_close(&r->scratch_, ex->id);
        return coai__core_send(r);
    }
    memset(&tc, 0, sizeof tc);
    tc.salt = r->o_.write_salt;
    m = coai__exec_map_of(r->o_.dialect)(ex, r->o_.tools, r->o_.tool_count, ws, &tc);
    if (m < 0) { coai_buf_free(&tc.args); return coai__core_fail_nomem(r); }
    if (m > 0) {
        rc = coai__core_tool_call(r, ex, &tc);
        /* an exec split over several calls (a big write): the others, in order */
        while (rc == COAI_OK && tc.part + 1 < tc.parts) {
            tc.part++;
            m = coai__exec_map_of(r->o_.dialect)(ex, r->o_.tools, r->o_.tool_count, ws, &tc);
            if (m <= 0) { coai_buf_free(&tc.args); return coai__core_fail_nomem(r); }
            rc = coai__core_tool_call(r, ex, &tc);
        }
        coai_buf_free(&tc.args);
        return rc;
    }
    coai_buf_free(&tc.args);
    return coai__core_throw(r, ex, tc.refusal);
}

/* ---- KV store and the blob assistant-text fallback ---- */

static int coai__core_keep_text(coai_reply *r, const char *s, size_t n)
{
    unsigned char len[4];
    if (!n || n > 0xffffffffu) return 0;
    if (n + 4 > r->o_.max_kv_bytes - r->kv_bytes_) return -1;
    len[0] = (unsigned char)(n >> 24); len[1] = (unsigned char)(n >> 16);
    len[2] = (unsigned char)(n >> 8); len[3] = (unsigned char)n;
    coai_buf_append(&r->fallback_, len, 4);
    coai_buf_append(&r->fallback_, s, n);
    r->kv_bytes_ += n + 4;
    return r->fallback_.err ? -1 : 0;
}

static int coai__core_kv_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
    int shift = 0;
    *v = 0;
    while (*i < n && shift < 64) {
        unsigned char c = p[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 0;
        shift += 7;
    }
    return -1;
}

/* Walk top-level protobuf fields; keep=0 only validates. Returns the field count or -1. */
static int coai__core_kv_pbscan(coai_reply *r, const unsigned char *p, size_t n, int keep)
{
    size_t i = 0;
    int count = 0;
    while (i < n) {
        uint64_t key, v;
        if (coai__core_kv_varint(p, n, &i, &key) || (key >> 3) == 0 || ++count > 99) return -1;
        switch (key & 7) {
        case 0: if (coai__core_kv_varint(p, n, &i, &v)) return -1; break;
        case 1: if (n - i < 8) return -1; i += 8; break;
        case 5: if (n - i < 4) return -1; i += 4; break;
        case 2:
            if (coai__core_kv_varint(p, n, &i, &v) || v > n - i) return -1;
            if (keep && v > 0 && coai_utf8_valid_prefix((const char *)p + i, (size_t)v) == v
                && coai__core_utf16_len((const char *)p + i, (size_t)v) > 50
                && p[i] != '{' && p[i] != '[')
                if (coai__core_keep_text(r, (const char *)p + i, (size_t)v)) return -2;
            i += (size_t)v;
            break;
        default: return -1;
        }
    }
    return count;
}

static int coai__core_keep_json(coai_reply *r, const cJSON *s)
{
    coai_str t = coai__core_jstr(s);
    return coai__core_keep_text(r, t.ptr, t.len);
}

/* Remember assistant text a blob carries (the blob fallback). -1 = over the store budget. */
static int coai__core_kv_analyze(coai_reply *r, const unsigned char *p, size_t n)
{
    size_t i = 0;
    int rc = 0;
    if (coai_utf8_valid_prefix((const char *)p, n) == n) {
        cJSON *j;
        const cJSON *c, *e, *msgs;
        while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
        if (i == n || p[i] != '{') return 0;
        j = cJSON_ParseWithLength((const char *)p, n);
        if (!j) return 0;
        if (coai__core_role_is(j, "assistant")) {
            c = coai__core_get(j, "content");
            if (cJSON_IsString(c)) rc |= coai__core_keep_json(r, c);
            else if (cJSON_IsArray(c)) {
                cJSON_ArrayForEach(e, c) {
                    const cJSON *ty = coai__core_get(e, "type");
                    if (cJSON_IsString(e)) rc |= coai__core_keep_json(r, e);
                    else if (cJSON_IsString(ty) && strcmp(ty->valuestring, "text") == 0)
                        rc |= coai__core_keep_json(r, coai__core_get(e, "text"));
                }
            }
        }
        msgs = coai__core_get(j, "messages");
        if (cJSON_IsArray(msgs)) {
            cJSON_ArrayForEach(e, msgs) {
                if (coai__core_role_is(e, "assistant"))
                    rc |= coai__core_keep_json(r, coai__core_get(e, "content"));
            }
        }
        cJSON_Delete(j);
        return rc ? -1 : 0;
    }
    rc = coai__core_kv_pbscan(r, p, n, 0);
    if (rc < 1) return 0;
    return coai__core_kv_pbscan(r, p, n, 1) == -2 ? -1 : 0;
}

static int coai__core_kv_limit(coai_reply *r)
{
    coai_error e;
    coai_error_set(&e, 502, "upstream_error", "kv_store_limit", NULL,
                   "Cursor stored more than %lu bytes of conversation state in one run "
                   "(the COAI_MAX_KV_BYTES limit)", (unsigned long)r->o_.max_kv_bytes);
    return coai__core_fail(r, &e);
}

static coai_reply_kv *coai__core_kv_find(coai_reply *r, coai_str id)
{
    size_t i;
    for (i = 0; i < r->kv_count_; i++)
        if (r->kv_[i].id_len == id.len && memcmp(r->kv_[i].mem, id.ptr, id.len) == 0)
            return &r->kv_[i];
    return NULL;
}

static int coai__core_kv_set(coai_reply *r, const coai_msg *m)
{
    coai_reply_kv *e;
    if (m->no_blob_data) {
        /* set_blob with a blob_id and no blob_data (seen live in 2026):
         * acked; nothing to store, and a blob already stored under that id stays. */
        coai_buf_reset(&r->scratch_);
        coai_encode_kv_set_result_meta(&r->scratch_, m->id, m->raw, m->has_raw);
        return coai__core_send(r);
    }
    e = coai__core_kv_find(r, m->blob_id);
    size_t need = m->blob_id.len + m->blob_data.len + COAI__OA_KV_OVERHEAD;
    size_t freed = e ? e->id_len + e->n + COAI__OA_KV_OVERHEAD : 0;
    unsigned char *mem;
    int changed = 1;
    size_t base = r->kv_bytes_ - freed;
    if (need < m->blob_data.len || need > r->o_.max_kv_bytes
        || base > r->o_.max_kv_bytes - need)
        return coai__core_kv_limit(r);
    if (e && e->n == m->blob_data.len
        && (e->n == 0 || memcmp(e->mem + e->id_len, m->blob_data.ptr, e->n) == 0)) {
        changed = 0;
    } else {
        mem = (unsigned char *)malloc(need - COAI__OA_KV_OVERHEAD + 1);
        if (!mem) return coai__core_fail_nomem(r);
        if (m->blob_id.len) memcpy(mem, m->blob_id.ptr, m->blob_id.len);
        if (m->blob_data.len) memcpy(mem + m->blob_id.len, m->blob_data.ptr, m->blob_data.len);
        if (!e) {
            if (r->kv_count_ == r->kv_cap_) {
                size_t nc = r->kv_cap_ ? r->kv_cap_ * 2 : 8;
                coai_reply_kv *nk = (coai_reply_kv *)realloc(r->kv_, nc * sizeof *nk);
                if (!nk) { free(mem); return coai__core_fail_nomem(r); }
                r->kv_ = nk;
                r->kv_cap_ = nc;
            }
            e = &r->kv_[r->kv_count_++];
        } else {
            free(e->mem);
        }
        e->mem = mem;
        e->id_len = m->blob_id.len;
        e->n = m->blob_data.len;
        r->kv_bytes_ = r->kv_bytes_ - freed + need;
    }
    if (changed && coai__core_kv_analyze(r, e->mem + e->id_len, e->n)) return coai__core_kv_limit(r);
    coai_buf_reset(&r->scratch_);
    coai_encode_kv_set_result_meta(&r->scratch_, m->id, m->raw, m->has_raw);
    return coai__core_send(r);
}

int coai_reply_kv_put(coai_reply *r, coai_str id, coai_str data)
{
    coai_reply_kv *e;
    size_t need = id.len + data.len + COAI__OA_KV_OVERHEAD;
    unsigned char *mem;
    if (coai__core_kv_find(r, id)) return 0;          /* the run's own copy wins */
    if (need < data.len || need > r->o_.max_kv_bytes || r->kv_bytes_ > r->o_.max_kv_bytes - need)
        return -1;
    mem = (unsigned char *)malloc(id.len + data.len + 1);
    if (!mem) return -1;
    if (id.len) memcpy(mem, id.ptr, id.len);
    if (data.len) memcpy(mem + id.len, data.ptr, data.len);
    if (r->kv_count_ == r->kv_cap_) {
        size_t nc = r->kv_cap_ ? r->kv_cap_ * 2 : 8;
        coai_reply_kv *nk = (coai_reply_kv *)realloc(r->kv_, nc * sizeof *nk);
        if (!nk) { free(mem); return -1; }
        r->kv_ = nk;
        r->kv_cap_ = nc;
    }
    e = &r->kv_[r->kv_count_++];
    e->mem = mem;
    e->id_len = id.len;
    e->n = data.len;
    r->kv_bytes_ += need;       /* seeded blobs are not scanned for assistant text */
    return 0;
}

static int coai__core_kv_get(coai_reply *r, const coai_msg *m)
{
    const coai_reply_kv *e = coai__core_kv_find(r, m->blob_id);
    if (!e && m->blob_id.len != 32) {
        /* A key that is not a 32-byte digest names no stored blob: the CLI answers with
         * the key itself as the data; an empty answer fails the run (seen
         * live in 2026). */
        coai_buf_reset(&r->scratch_);
        coai_encode_kv_get_result_meta(&r->scratch_, m->id, m->blob_id.ptr, m->blob_id.len, 1,
                                       m->raw, m->has_raw);
        return coai__core_send(r);
    }
    if (!e) r->kv_misses_++;
    coai_buf_reset(&r->scratch_);
    coai_encode_kv_get_result_meta(&r->scratch_, m->id, e ? e->mem + e->id_len : NULL,
                                   e ? e->n : 0, e != NULL, m->raw, m->has_raw);
    return coai__core_send(r);
}

/* Keep the latest checkpoint (conversation memory) and its token count (usage). */
static int coai__core_checkpoint(coai_reply *r, const coai_msg *m)
{
    if (m->value > 0 && m->value < 1000000000000LL) r->used_tokens_ = m->value;
    coai_buf_reset(&r->checkpoint_);
    coai_buf_append(&r->checkpoint_, m->raw.ptr, m->raw.len);
    r->have_checkpoint_ = !r->checkpoint_.err;
    return COAI_OK;
}

int coai_reply_answer(coai_reply *r, const coai_msg *m)
{
    int saved_done = r->done_, rc;
    coai_tool_call tc;
    if (!m) return 1;
    switch (m->kind) {
    case COAI_MSG_TEXT: case COAI_MSG_THINKING: case COAI_MSG_TURN_ENDED:
        return 0;
    case COAI_MSG_EXEC:
        if (m->exec.kind != COAI_EXEC_REQUEST_CONTEXT) {
            int mapped;
            memset(&tc, 0, sizeof tc);
            mapped = coai__exec_map_of(r->o_.dialect)(&m->exec, r->o_.tools, r->o_.tool_count,
                                   r->o_.env ? r->o_.env->workspace : coai_str_c(""), &tc);
            coai_buf_free(&tc.args);
            if (mapped != 0) return 0;           /* a tool call (or no memory): next response */
        }
        break;
    case COAI_MSG_CHECKPOINT: coai__core_checkpoint(r, m); return 1;
    case COAI_MSG_TOKENS: case COAI_MSG_KV_SET: case COAI_MSG_KV_GET: case COAI_MSG_QUERY:
        break;
    default:
        return 1;
    }
    /* Answer with the response machinery, whatever state the response is in; its output
     * (none for these kinds unless a reply fails) is dropped. */
    r->done_ = 0;
    memset(&r->error, 0, sizeof r->error);
    rc = coai_reply_feed_msg(r, m);
    if (rc != COAI_OK || r->error.status) rc = -1;
    r->done_ = saved_done;
    return rc < 0 ? -1 : 1;
}

int coai_reply_feed_msg(coai_reply *r, const coai_msg *m)
{
    if (r->done_) return COAI_DONE;
    if (!m) return COAI_OK;
    if (r->tools_open_ && (m->kind == COAI_MSG_TEXT || m->kind == COAI_MSG_THINKING
                           || m->kind == COAI_MSG_TURN_ENDED))
        return coai_reply_end_tools(r);          /* not consumed: see batch_tools */
    switch (m->kind) {
    case COAI_MSG_TEXT: return coai__core_text(r, 0, m->text);
    case COAI_MSG_THINKING: return coai__core_text(r, 1, m->text);
    case COAI_MSG_TOKENS:
        if (m->value > 0 && m->value < 1000000000) {
            r->token_sum_ += m->value;
            r->have_token_delta_ = 1;
        }
        return COAI_OK;
    case COAI_MSG_CHECKPOINT: return coai__core_checkpoint(r, m);
    case COAI_MSG_TURN_ENDED:
        if (m->turn.present) r->turn_ = m->turn;
        return coai__core_finish(r);
    case COAI_MSG_EXEC: return coai__core_exec(r, &m->exec);
    case COAI_MSG_KV_SET: return coai__core_kv_set(r, m);
    case COAI_MSG_KV_GET: return coai__core_kv_get(r, m);
    case COAI_MSG_QUERY:
        /* Nobody on the OpenAI side can answer these: reply with an empty response of
         * the matching kind so the turn goes on (see coai_encode_interaction_response). */
        r->queries++;
        coai_buf_reset(&r->scratch_);
        if (coai_encode_interaction_response(&r->scratch_, m->id, m->query) != COAI_OK)
            return COAI_OK;         /* a kind we do not know: nothing we could say */
        return coai__core_send(r);
    default: return COAI_OK;   /* heartbeats, announcements, steps, aborts */
    }
}

int coai_reply_feed_status(coai_reply *r, const coai_status *st)
{
    coai_error e;
    if (r->done_) return COAI_DONE;
    coai_error_from_status(st, &e);
    if (!e.status) { r->status_ok_ = 1; return COAI_OK; }
    return coai__core_fail(r, &e);
}

int coai_reply_feed_eof(coai_reply *r)
{
    coai_error e;
    if (r->done_) return COAI_DONE;
    if (r->status_ok_) return coai__core_finish(r);
    coai_error_set(&e, 502, "upstream_error", "upstream_truncated", NULL,
                   "The Cursor stream ended before the end of the turn");
    return coai__core_fail(r, &e);
}

int coai_reply_feed_error(coai_reply *r, const coai_error *e)
{
    coai_error d;
    if (!e) {
        coai_error_set(&d, 502, "upstream_error", "upstream_error", NULL,
                       "Connection to Cursor failed");
        e = &d;
    }
    return coai__core_fail(r, e);
}

int coai_reply_fail_timeout(coai_reply *r)
{
    coai_error e;
    coai_error_set(&e, 504, "server_error", "upstream_timeout", NULL,
                   "Cursor sent nothing for too long (upstream idle timeout)");
    return coai__core_fail(r, &e);
}

int coai_reply_keepalive(coai_reply *r)
{
    if (r->done_) return COAI_DONE;
    if (!r->o_.stream) return COAI_OK;
    coai__core_commit(r);
    r->w_->keepalive(r);
    return coai__core_out_result(r);
}

/* PART:CORE impl end */

/* ======================================================================== */
/* PART:OPENAI impl (OpenAI Chat Completions: parser, exec mapping, writer)  */
/* ======================================================================== */

/* ---- the Chat Completions parser ---- */

/* text(content), as the original client flattened it: string, null/missing/other -> "",
 * parts joined by "\n". An assistant's "refusal" part counts as text; old_images: see
 * coai__conv_text. */
static void coai__oa_content_text(coai_buf *out, const cJSON *content, int old_images)
{
    if (cJSON_IsString(content)) {
        coai__core_put_str(out, coai__core_jstr(content));
    } else if (cJSON_IsArray(content)) {
        const cJSON *part;
        int first = 1;
        cJSON_ArrayForEach(part, content) {
            const cJSON *t = coai__core_get(part, "type");
            const char *ty = cJSON_IsString(t) ? t->valuestring : "";
            if (strcmp(ty, "text") == 0 || strcmp(ty, "refusal") == 0) {
                if (!first) coai_buf_putc(out, '\n');
                coai__core_put_str(out, coai__core_jstr(coai__core_get(part, ty)));
                first = 0;
            } else if (old_images && strcmp(ty, "image_url") == 0) {
                if (!first) coai_buf_putc(out, '\n');
                coai_buf_puts(out, "[image omitted: attached to an earlier message]");
                first = 0;
            }
        }
    }
}

/* The newest message with role "user", or NULL. */
static const cJSON *coai__oa_last_user(const cJSON *messages)
{
    const cJSON *m, *last = NULL;
    cJSON_ArrayForEach(m, messages) if (coai__core_role_is(m, "user")) last = m;
    return last;
}

/* A Chat Completions tool call of the history: a function call ({"type":"function",
 * "function":{name, arguments}}) or a custom tool's ({"type":"custom","custom":{name,
 * input}}, its input the raw text). */
static int coai__oa_call_custom(const cJSON *c)
{
    const cJSON *t = coai__core_get(c, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, "custom") == 0;
}

static coai_str coai__oa_call_name(const cJSON *c)
{
    return coai__core_jstr(coai__core_get(coai__core_get(c, coai__oa_call_custom(c) ? "custom"
                                                                             : "function"),
                                      "name"));
}

static coai_str coai__oa_call_args(const cJSON *c)
{
    int cu = coai__oa_call_custom(c);
    return coai__core_jstr(coai__core_get(coai__core_get(c, cu ? "custom" : "function"),
                                      cu ? "input" : "arguments"));
}

/* OpenAI messages (already validated) -> neutral messages. 0 ok, -1 no memory. */
static int coai__oa_chat_messages(coai_request *req, const cJSON *messages)
{
    const cJSON *m;
    size_t n = (size_t)cJSON_GetArraySize(messages), i = 0;
    coai_message *out = (coai_message *)coai__req_alloc(req, n * sizeof *out);
    if (!out) return -1;
    cJSON_ArrayForEach(m, messages) {
        coai_message *o = &out[i++];
        const cJSON *content = coai__core_get(m, "content"), *calls = coai__core_get(m, "tool_calls");
        if (coai__core_role_is(m, "user")) o->role = COAI_ROLE_USER;
        else if (coai__core_role_is(m, "assistant")) o->role = COAI_ROLE_ASSISTANT;
        else if (coai__core_role_is(m, "tool")) o->role = COAI_ROLE_TOOL;
        else o->role = COAI_ROLE_SYSTEM;                     /* system, developer */
        if (cJSON_IsString(content)) {
            coai_part *p = (coai_part *)coai__req_alloc(req, sizeof *p);
            if (!p) return -1;
            p->text = coai__core_jstr(content);
            o->parts = p;
            o->part_count = 1;
        } else if (cJSON_IsArray(content)) {
            const cJSON *part;
            size_t k = 0;
            coai_part *p = (coai_part *)coai__req_alloc(
                req, (size_t)cJSON_GetArraySize(content) * sizeof *p);
            if (!p) return -1;
            cJSON_ArrayForEach(part, content) {
                const cJSON *t = coai__core_get(part, "type");
                if (!cJSON_IsString(t)) continue;
                if (strcmp(t->valuestring, "text") == 0
                    || strcmp(t->valuestring, "refusal") == 0) {
                    p[k].kind = COAI_PART_TEXT;
                    p[k++].text = coai__core_jstr(coai__core_get(part, t->valuestring));
                } else if (strcmp(t->valuestring, "image_url") == 0) {
                    const cJSON *u = coai__core_get(part, "image_url");
                    p[k].kind = COAI_PART_IMAGE;
                    p[k++].url = coai__core_jstr(cJSON_IsString(u) ? u : coai__core_get(u, "url"));
                }
            }
            o->parts = p;
            o->part_count = k;
        }
        if (o->role == COAI_ROLE_TOOL)
            o->tool_call_id = coai__core_jstr(coai__core_get(m, "tool_call_id"));
        if (o->role == COAI_ROLE_ASSISTANT && cJSON_IsArray(calls)
            && cJSON_GetArraySize(calls) > 0) {
            const cJSON *c;
            size_t k = 0;
            coai_call *cs = (coai_call *)coai__req_alloc(
                req, (size_t)cJSON_GetArraySize(calls) * sizeof *cs);
            if (!cs) return -1;
            cJSON_ArrayForEach(c, calls) {
                cs[k].id = coai__core_jstr(coai__core_get(c, "id"));
                cs[k].name = coai__oa_call_name(c);
                cs[k++].args = coai__oa_call_args(c);
            }
            o->calls = cs;
            o->call_count = k;
        }
    }
    req->messages = out;
    req->message_count = n;
    return 0;
}

/* A custom (freeform) tool of Chat Completions, as the Responses dialect takes one: Cursor
 * sees a function with one string "input" (the schema kept in root), the grammar of its
 * format, if any, in the description. 0, COAI_ERR_INVALID (err set), COAI_ERR_NOMEM. */
static int coai__oa_custom_tool(coai_request *req, cJSON *root, coai_tool *o, const cJSON *f,
                                const char *path, coai_error *err)
{
    const cJSON *def = coai__core_get(f, "definition"), *syn = coai__core_get(f, "syntax");
    const cJSON *gr = coai__core_get(f, "grammar");
    cJSON *keep, *schema, *props, *in, *rq;
    coai_buf db = { 0 };
    char *p;
    if (f && !cJSON_IsNull(f) && !cJSON_IsObject(f))
        return coai__core_bad(err, path, "%s must be an object", path);
    if (cJSON_IsObject(gr)) {           /* Chat's {"type":"grammar","grammar":{definition, syntax}} */
        def = coai__core_get(gr, "definition");
        syn = coai__core_get(gr, "syntax");
    }
    coai__core_custom_desc(&db, o->description, def, syn);
    p = db.err ? NULL : (char *)coai__req_alloc(req, db.len + 1);
    if (!p) { coai_buf_free(&db); return COAI_ERR_NOMEM; }
    if (db.len) memcpy(p, db.data, db.len);
    o->description.ptr = p;
    o->description.len = db.len;
    coai_buf_free(&db);
    o->freeform = 1;
    keep = cJSON_GetObjectItemCaseSensitive(root, "\x01coai_custom_schemas");
    if (!keep) {
        keep = cJSON_CreateArray();
        if (!keep || !cJSON_AddItemToObject(root, "\x01coai_custom_schemas", keep)) {
            cJSON_Delete(keep);
            return COAI_ERR_NOMEM;
        }
    }
    schema = cJSON_CreateObject();
    if (!schema || !cJSON_AddItemToArray(keep, schema)) { cJSON_Delete(schema); return COAI_ERR_NOMEM; }
    rq = cJSON_CreateArray();
    if (!rq || !cJSON_AddItemToObject(schema, "required", rq)) { cJSON_Delete(rq); return COAI_ERR_NOMEM; }
    if (!cJSON_AddStringToObject(schema, "type", "object")
        || !(props = cJSON_AddObjectToObject(schema, "properties"))
        || !(in = cJSON_AddObjectToObject(props, "input"))
        || !cJSON_AddStringToObject(in, "type", "string")
        || !cJSON_AddItemToArray(rq, cJSON_CreateString("input")))
        return COAI_ERR_NOMEM;
    o->parameters = schema;
    return 0;
}

/* Validate message i; path buffers sized for "messages[<i>].tool_calls[<j>]...". */
static int coai__oa_check_message(const cJSON *m, int i, coai_error *err)
{
    char p[128];
    const cJSON *role = coai__core_get(m, "role"), *content, *calls;
    const char *r;
    snprintf(p, sizeof p, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return coai__core_bad(err, p, "%s must be an object", p);
    snprintf(p, sizeof p, "messages[%d].role", i);
    if (!cJSON_IsString(role)) return coai__core_bad(err, p, "%s must be a string", p);
    r = role->valuestring;
    if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user")
        && strcmp(r, "assistant") && strcmp(r, "tool"))
        return coai__core_bad(err, p, "Invalid value for %s: expected one of 'system', "
                         "'developer', 'user', 'assistant', 'tool'", p);
    content = coai__core_get(m, "content");
    snprintf(p, sizeof p, "messages[%d].content", i);
    if (content && !cJSON_IsNull(content) && !cJSON_IsString(content)) {
        const cJSON *part;
        int j = 0;
        if (!cJSON_IsArray(content))
            return coai__core_bad(err, p, "%s must be a string, an array of parts or null", p);
        cJSON_ArrayForEach(part, content) {
            const cJSON *t = coai__core_get(part, "type");
            const char *ty;
            snprintf(p, sizeof p, "messages[%d].content[%d]", i, j);
            if (!cJSON_IsObject(part) || !cJSON_IsString(t))
                return coai__core_bad(err, p, "%s must be an object with a string 'type'", p);
            ty = t->valuestring;
            if (strcmp(ty, "text") == 0 || (strcmp(ty, "refusal") == 0
                                            && strcmp(r, "assistant") == 0)) {
                if (!cJSON_IsString(coai__core_get(part, ty))) {
                    snprintf(p, sizeof p, "messages[%d].content[%d].%s", i, j, ty);
                    return coai__core_bad(err, p, "%s must be a string", p);
                }
            } else if (strcmp(ty, "image_url") == 0 && strcmp(r, "user") == 0) {
                const cJSON *iu = coai__core_get(part, "image_url");
                if (!cJSON_IsString(iu) && !cJSON_IsString(coai__core_get(iu, "url"))) {
                    snprintf(p, sizeof p, "messages[%d].content[%d].image_url.url", i, j);
                    return coai__core_bad(err, p, "%s must be a string", p);
                }
            } else {
                /* never drop what the client sent without saying so (audio, files, ...) */
                snprintf(p, sizeof p, "messages[%d].content[%d].type", i, j);
                return coai__core_bad(err, p, "%s: content part type '%.40s' is not supported "
                                    "in a '%s' message (supported: 'text'%s)", p, ty, r,
                                    strcmp(r, "user") == 0 ? " and 'image_url'"
                                    : strcmp(r, "assistant") == 0 ? " and 'refusal'" : "");
            }
            j++;
        }
    }
    if (strcmp(r, "tool") == 0) {
        snprintf(p, sizeof p, "messages[%d].tool_call_id", i);
        if (!cJSON_IsString(coai__core_get(m, "tool_call_id")))
            return coai__core_bad(err, p, "%s must be a string", p);
    }
    calls = coai__core_get(m, "tool_calls");
    if (strcmp(r, "assistant") == 0 && calls && !cJSON_IsNull(calls)) {
        const cJSON *c;
        int j = 0;
        snprintf(p, sizeof p, "messages[%d].tool_calls", i);
        if (!cJSON_IsArray(calls)) return coai__core_bad(err, p, "%s must be an array", p);
        cJSON_ArrayForEach(c, calls) {
            int cu = coai__oa_call_custom(c);
            const cJSON *f = coai__core_get(c, cu ? "custom" : "function");
            const cJSON *a = coai__core_get(f, cu ? "input" : "arguments");
            const cJSON *id = coai__core_get(c, "id");
            const char *fn = cu ? "custom" : "function";
            snprintf(p, sizeof p, "messages[%d].tool_calls[%d]", i, j);
            if (!cJSON_IsObject(c)) return coai__core_bad(err, p, "%s must be an object", p);
            snprintf(p, sizeof p, "messages[%d].tool_calls[%d].id", i, j);
            if (id && !cJSON_IsString(id)) return coai__core_bad(err, p, "%s must be a string", p);
            snprintf(p, sizeof p, "messages[%d].tool_calls[%d].%s.name", i, j, fn);
            if (!cJSON_IsString(coai__core_get(f, "name")))
                return coai__core_bad(err, p, "%s must be a string", p);
            snprintf(p, sizeof p, "messages[%d].tool_calls[%d].%s.%s", i, j, fn,
                     cu ? "input" : "arguments");
            if (a && !cJSON_IsString(a) && !cJSON_IsNull(a))
                return coai__core_bad(err, p, "%s must be a string", p);
            j++;
        }
    }
    return 0;
}

/* The Chat Completions fields Cursor has no equivalent for (README: request fields):
 * emulated (max_tokens, max_completion_tokens, stop, response_format), refused with a 400
 * naming them (logprobs, top_logprobs, audio output), or accepted and ignored (the rest). */
static int coai__oa_fields(coai_request *req, const cJSON *root, coai_error *err)
{
    static const char *const lim[2] = { "max_tokens", "max_completion_tokens" };
    const cJSON *v;
    int i;
    for (i = 0; i < 2; i++) {
        int64_t n;
        v = coai__core_get(root, lim[i]);
        if (!v || cJSON_IsNull(v)) continue;
        if (coai__core_count(v, &n) < 0)
            return coai__core_bad(err, lim[i], "%s must be an integer >= 1", lim[i]);
        if (!req->max_tokens || n < req->max_tokens) req->max_tokens = n;
    }
    v = coai__core_get(root, "stop");
    if (cJSON_IsString(v) || cJSON_IsArray(v)) {
        int count = cJSON_IsString(v) ? 1 : cJSON_GetArraySize(v), k = 0;
        coai_str *st;
        const cJSON *it;
        if (coai__stops_check((size_t)count, 4, "stop", err)) return COAI_ERR_INVALID;
        st = (coai_str *)coai__req_alloc(req, (size_t)(count ? count : 1) * sizeof *st);
        if (!st) return COAI_ERR_NOMEM;
        for (it = cJSON_IsString(v) ? v : v->child; it; it = cJSON_IsString(v) ? NULL : it->next) {
            char p[16];
            snprintf(p, sizeof p, cJSON_IsString(v) ? "stop" : "stop[%d]", k);
            if (!cJSON_IsString(it) || !it->valuestring[0])
                return coai__core_bad(err, p, "%s must be a non-empty string", p);
            st[k++] = coai__core_jstr(it);
        }
        req->stop = k ? st : NULL;
        req->stop_count = (size_t)k;
    } else if (v && !cJSON_IsNull(v)) {
        return coai__core_bad(err, "stop", "stop must be a string or an array of strings");
    }
    v = coai__core_get(root, "logprobs");
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
        return coai__core_bad(err, "logprobs", "logprobs are not available: Cursor does not report "
                            "token probabilities");
    v = coai__core_get(root, "top_logprobs");
    if (v && !cJSON_IsNull(v))
        return coai__core_bad(err, "top_logprobs", "top_logprobs are not available: Cursor does "
                            "not report token probabilities");
    v = coai__core_get(root, "modalities");
    if (cJSON_IsArray(v)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            if (!(cJSON_IsString(it) && strcmp(it->valuestring, "text") == 0))
                return coai__core_bad(err, "modalities", "Only the 'text' output modality is "
                                    "available");
        }
    }
    v = coai__core_get(root, "audio");
    if (v && !cJSON_IsNull(v))
        return coai__core_bad(err, "audio", "Audio output is not available");
    v = coai__core_get(root, "parallel_tool_calls");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
        return coai__core_bad(err, "parallel_tool_calls", "parallel_tool_calls must be a boolean");
    v = coai__core_get(root, "response_format");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *t = coai__core_get(v, "type");
        const char *ty = cJSON_IsString(t) ? t->valuestring : "";
        if (strcmp(ty, "json_object") == 0) {
            req->response_json = 1;
        } else if (strcmp(ty, "json_schema") == 0) {
            const cJSON *js = coai__core_get(v, "json_schema"), *sch = coai__core_get(js, "schema");
            if (!cJSON_IsObject(js))
                return coai__core_bad(err, "response_format.json_schema",
                                    "response_format.json_schema must be an object");
            if (sch && !cJSON_IsObject(sch))
                return coai__core_bad(err, "response_format.json_schema.schema",
                                    "response_format.json_schema.schema must be an object");
            req->response_json = 1;
            req->response_schema = sch;
        } else if (strcmp(ty, "text") != 0) {
            return coai__core_bad(err, "response_format.type", "response_format.type must be "
                                "'text', 'json_object' or 'json_schema'");
        }
    }
    return 0;
}

/* The OpenAI Chat Completions parser (coai__dialects row). */
static int coai__oa_chat_parse(coai_chat_request *req, const char *body, size_t n,
                               coai_error *err)
{
    cJSON *root;
    const cJSON *messages, *m, *v, *tools;
    int i, rc;
    memset(req, 0, sizeof *req);
    if ((rc = coai__json_body(body, n, &root, err)) != 0) return rc;
    req->root_ = root;
    rc = COAI_ERR_INVALID;
    v = coai__core_get(root, "model");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v)) {
        coai__core_bad(err, "model", "model must be a string");
        goto fail;
    }
    req->model = coai__core_jstr(v);
    if (req->model.len == 0) req->model = coai_str_c("auto");
    v = coai__core_get(root, "stream");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
        coai__core_bad(err, "stream", "stream must be a boolean");
        goto fail;
    }
    req->stream = cJSON_IsTrue(v);
    v = coai__core_get(root, "stream_options");
    if (v && !cJSON_IsNull(v) && !cJSON_IsObject(v)) {
        coai__core_bad(err, "stream_options", "stream_options must be an object");
        goto fail;
    }
    v = coai__core_get(v, "include_usage");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
        coai__core_bad(err, "stream_options.include_usage", "include_usage must be a boolean");
        goto fail;
    }
    req->include_usage = req->stream && cJSON_IsTrue(v);
    v = coai__core_get(root, "n");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1)) {
        coai__core_bad(err, "n", "Only n = 1 is supported");
        goto fail;
    }
    messages = coai__core_get(root, "messages");
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0) {
        coai__core_bad(err, "messages", "messages is required and must be a non-empty array");
        goto fail;
    }
    i = 0;
    cJSON_ArrayForEach(m, messages) {
        if ((rc = coai__oa_check_message(m, i, err)) < 0) goto fail;
        if (coai__core_role_is(m, "tool")) req->has_tool_messages = 1;
        i++;
    }
    rc = COAI_ERR_INVALID;
    tools = coai__core_get(root, "tools");
    if (tools && !cJSON_IsNull(tools)) {
        const cJSON *t;
        int count;
        char p[64];
        if (!cJSON_IsArray(tools)) {
            coai__core_bad(err, "tools", "tools must be an array");
            goto fail;
        }
        count = cJSON_GetArraySize(tools);
        if (count > COAI_MAX_TOOLS) {
            coai__core_bad(err, "tools", "At most %d tools are supported", COAI_MAX_TOOLS);
            goto fail;
        }
        if (count > 0) {
            req->tools = (coai_tool *)calloc((size_t)count, sizeof *req->tools);
            if (!req->tools) { rc = COAI_ERR_NOMEM; goto nomem; }
        }
        i = 0;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *ty = coai__core_get(t, "type");
            int cu = cJSON_IsString(ty) && strcmp(ty->valuestring, "custom") == 0;
            const char *fn = cu ? "custom" : "function";
            const cJSON *f = coai__core_get(t, fn);
            const cJSON *name = coai__core_get(f, "name"), *d = coai__core_get(f, "description");
            const cJSON *params = coai__core_get(f, "parameters");
            snprintf(p, sizeof p, "tools[%d]", i);
            if (!cJSON_IsObject(t)) { coai__core_bad(err, p, "%s must be an object", p); goto fail; }
            snprintf(p, sizeof p, "tools[%d].type", i);
            if (ty && !cu && !(cJSON_IsString(ty) && strcmp(ty->valuestring, "function") == 0)) {
                coai__core_bad(err, p, "%s must be 'function' or 'custom'", p);
                goto fail;
            }
            snprintf(p, sizeof p, "tools[%d].%s", i, fn);
            if (!cJSON_IsObject(f)) { coai__core_bad(err, p, "%s must be an object", p); goto fail; }
            snprintf(p, sizeof p, "tools[%d].%s.name", i, fn);
            if (!cJSON_IsString(name)) { coai__core_bad(err, p, "%s is required", p); goto fail; }
            if (!coai__name_ok(name->valuestring, 64)) {
                coai__core_bad(err, p, "%s must match ^[a-zA-Z0-9_-]{1,64}$", p);
                goto fail;
            }
            snprintf(p, sizeof p, "tools[%d].%s.description", i, fn);
            if (d && !cJSON_IsNull(d) && !cJSON_IsString(d)) {
                coai__core_bad(err, p, "%s must be a string", p);
                goto fail;
            }
            snprintf(p, sizeof p, "tools[%d].%s.parameters", i, fn);
            if (!cu && params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
                coai__core_bad(err, p, "%s must be an object", p);
                goto fail;
            }
            req->tools[i].name = coai__core_jstr(name);
            req->tools[i].description = coai__core_jstr(d);
            req->tools[i].parameters = cJSON_IsObject(params) ? params : NULL;
            if (cu) {
                snprintf(p, sizeof p, "tools[%d].custom.format", i);
                rc = coai__oa_custom_tool(req, root, &req->tools[i], coai__core_get(f, "format"),
                                          p, err);
                if (rc == COAI_ERR_NOMEM) goto nomem;
                if (rc) goto fail;
                rc = COAI_ERR_INVALID;
            }
            i++;
        }
        req->tool_count = (size_t)count;
    }
    v = coai__core_get(root, "tool_choice");
    if (cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0)
        req->tool_choice = COAI_TOOL_CHOICE_NONE;
    else if (cJSON_IsString(v) && strcmp(v->valuestring, "required") == 0)
        req->tool_choice = COAI_TOOL_CHOICE_ANY;
    else if (cJSON_IsObject(v)) {
        req->tool_choice = COAI_TOOL_CHOICE_TOOL;
        req->tool_choice_name = coai__core_jstr(coai__core_get(
            coai__core_get(v, coai__oa_call_custom(v) ? "custom" : "function"), "name"));
    } else if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v)
                                          && strcmp(v->valuestring, "auto") == 0)) {
        coai__core_bad(err, "tool_choice", "tool_choice must be 'none', 'auto', 'required' or "
                     "{\"type\":\"function\",\"function\":{\"name\":...}}");
        goto fail;
    }
    if ((rc = coai__oa_fields(req, root, err)) < 0) goto fail;
    rc = COAI_ERR_INVALID;
    req->thinking = -1;
    if (coai__tool_choice_check(req, "tool_choice", err)) goto fail;
    if (coai__oa_chat_messages(req, messages) || coai__request_finish(req)) {
        rc = COAI_ERR_NOMEM;
        goto nomem;
    }
    return 0;
nomem:
    coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
fail:
    coai_chat_request_free(req);
    return rc;
}

static int coai__oa_chat_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                                  coai_str workspace, coai_tool_call *tc)
{
    int m = coai_exec_map(ex, tools, count, workspace, tc);
    cJSON *a, *it;
    coai_buf cmd = { 0 };
    char *txt;
    if (m == 0 && ex->kind != COAI_EXEC_SHELL && ex->kind != COAI_EXEC_SHELL_STREAM) {
        /* no tool of the exec's role (Qwen Code, Kilo Code, OpenCode have no delete; a
         * shell-only client has nothing else): the client's shell tool, as over the
         * Messages API (a delete prints the file's size first for the result) */
        coai_exec sh;
        int f = coai__sh_fallback(ex, &cmd, tc);
        if (f == 0) { coai_buf_free(&cmd); return 0; }
        if (f == -1) {
            coai_buf_free(&cmd);
            tc->refusal = COAI__SH_REFUSAL;
            return 0;
        }
        if (f < 0) { coai_buf_free(&cmd); return -1; }
        coai__exec_as_shell(&sh, ex, &cmd);
        m = coai__oa_chat_exec_map(&sh, tools, count, workspace, tc);
        coai_buf_free(&cmd);
        tc->via_shell = m == 1;
        return m;
    }
    if (m != 1 || !coai__core_traps_exit(COAI_DIALECT_OPENAI_CHAT, (int)ex->kind,
                                       &tools[tc->tool]))
        return m;
    a = cJSON_ParseWithLength((const char *)tc->args.data, tc->args.len);
    if (!a) return -1;
    cJSON_ArrayForEach(it, a) {               /* the member holding the command */
        if (cJSON_IsString(it) && strlen(it->valuestring) == ex->command.len
            && memcmp(it->valuestring, ex->command.ptr, ex->command.len) == 0)
            break;
    }
    if (!it) { cJSON_Delete(a); return m; }
    coai_buf_puts(&cmd, COAI_EXIT_TRAP "\n");
    coai_buf_append(&cmd, ex->command.ptr, ex->command.len);
    coai_buf_putc(&cmd, 0);
    txt = NULL;
    if (!cmd.err && cJSON_SetValuestring(it, (const char *)cmd.data))
        txt = cJSON_PrintUnformatted(a);
    coai_buf_free(&cmd);
    cJSON_Delete(a);
    if (!txt) return -1;
    coai_buf_reset(&tc->args);
    coai_buf_puts(&tc->args, txt);
    cJSON_free(txt);
    return tc->args.err ? -1 : 1;
}

int coai_prompt_build(coai_buf *out, const cJSON *messages)
{
    const cJSON *m, *last_user;
    int nparts = 0, any_system = 0, any_tool = 0;
    coai_buf t = { 0 };
    if (!cJSON_IsArray(messages)) return out->err ? -1 : 0;
    last_user = coai__oa_last_user(messages);
    cJSON_ArrayForEach(m, messages) {
        if (coai__core_role_is(m, "system") || coai__core_role_is(m, "developer")) {
            if (any_system) coai_buf_putc(out, '\n');
            coai__oa_content_text(out, coai__core_get(m, "content"), 0);
            any_system = 1;
        }
    }
    if (any_system) nparts = 1;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *calls = coai__core_get(m, "tool_calls");
        /* user and tool texts go straight into out: a temporary copy of a big message
         * would cost its size once more at the peak */
        if (coai__core_role_is(m, "user")) {
            coai__prompt_part(out, &nparts, "User: ");
            coai__oa_content_text(out, coai__core_get(m, "content"), m != last_user);
            continue;
        }
        if (coai__core_role_is(m, "tool")) {
            coai__prompt_part(out, &nparts, "[Tool result for ");
            coai__core_put_str(out, coai__core_jstr(coai__core_get(m, "tool_call_id")));
            coai_buf_puts(out, "]: ");
            coai__oa_content_text(out, coai__core_get(m, "content"), 0);
            any_tool = 1;
            continue;
        }
        coai_buf_reset(&t);
        coai__oa_content_text(&t, coai__core_get(m, "content"), 0);
        if (coai__core_role_is(m, "assistant")) {
            if (cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) {
                const cJSON *c;
                int first = 1;
                coai__prompt_part(out, &nparts, "Assistant: ");
                if (t.len) { coai_buf_append(out, t.data, t.len); coai_buf_putc(out, '\n'); }
                cJSON_ArrayForEach(c, calls) {
                    if (!first) coai_buf_putc(out, '\n');
                    coai_buf_puts(out, "[Called tool: ");
                    coai__core_put_str(out, coai__oa_call_name(c));
                    coai_buf_putc(out, '(');
                    coai__core_put_str(out, coai__oa_call_args(c));
                    coai_buf_puts(out, ")]");
                    first = 0;
                }
            } else if (t.len) {
                coai__prompt_part(out, &nparts, "Assistant: ");
                coai_buf_append(out, t.data, t.len);
            }
        }
    }
    return coai__prompt_end(out, &t, nparts, any_tool);
}

void coai_chat_request_free(coai_chat_request *req) { coai_request_free(req); }

void coai_chat_request_params(const coai_chat_request *req, coai_run_params *p)
{
    coai_request_params(req, p);
}

int coai_chat_request_parse(coai_chat_request *req, const char *body, size_t n,
                            coai_error *err)
{
    return coai_request_parse_ex(req, COAI_DIALECT_OPENAI_CHAT, body, n, NULL, err);
}

/* ---- the Chat Completions writer ---- */

static void coai__oa_w_init(coai_reply *r)
{
    const coai_reply_opts *o = &r->o_;
    coai_buf_puts(&r->prefix_, "{\"id\":");
    coai_json_str_append(&r->prefix_, o->completion_id.ptr, o->completion_id.len);
    coai_buf_printf(&r->prefix_, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
                    o->stream ? "chat.completion.chunk" : "chat.completion",
                    (long long)o->created);
    coai_json_str_append(&r->prefix_, o->model.ptr, o->model.len);
}

static void coai__oa_chunk_begin(coai_reply *r)
{
    coai_buf_puts(&r->out, "data: ");
    coai_buf_append(&r->out, r->prefix_.data, r->prefix_.len);
    coai_buf_puts(&r->out, ",\"choices\":[{\"index\":0,\"delta\":");
}

static void coai__oa_chunk_end(coai_reply *r, const char *finish)
{
    coai_buf_puts(&r->out, ",\"finish_reason\":");
    coai_buf_puts(&r->out, finish ? finish : "null");
    coai_buf_puts(&r->out, "}]");
    if (r->o_.include_usage) coai_buf_puts(&r->out, ",\"usage\":null");
    coai_buf_puts(&r->out, "}\n\n");
}

static void coai__oa_usage(const coai_reply *r, coai_buf *b)
{
    coai_usage u;
    coai_reply_usage(r, &u);
    coai_buf_printf(b, "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,"
                    "\"total_tokens\":%lld", (long long)u.input_tokens,
                    (long long)u.output_tokens, (long long)(u.input_tokens + u.output_tokens));
    if (u.reported)   /* Cursor's own counts: the cached and reasoning parts too */
        coai_buf_printf(b, ",\"prompt_tokens_details\":{\"cached_tokens\":%lld},"
                        "\"completion_tokens_details\":{\"reasoning_tokens\":%lld}",
                        (long long)u.cache_read_tokens, (long long)u.reasoning_tokens);
    coai_buf_putc(b, '}');
}

static void coai__oa_w_begin(coai_reply *r)
{
    coai__oa_chunk_begin(r);
    coai_buf_puts(&r->out, "{\"role\":\"assistant\"}");
    coai__oa_chunk_end(r, NULL);
}

static void coai__oa_w_error(coai_reply *r)
{
    coai_buf_puts(&r->out, "data: {\"error\":{\"message\":");
    coai__core_json_cstr(&r->out, r->error.message);
    coai_buf_puts(&r->out, ",\"type\":");
    coai__core_json_cstr(&r->out, r->error.type);
    coai_buf_puts(&r->out, ",\"code\":");
    coai__core_json_cstr(&r->out, r->error.code);
    coai_buf_puts(&r->out, "}}\n\ndata: [DONE]\n\n");
}

static void coai__oa_w_delta(coai_reply *r, int ch, const char *s, size_t n)
{
    coai__oa_chunk_begin(r);
    coai_buf_puts(&r->out, ch ? "{\"reasoning_content\":" : "{\"content\":");
    coai_json_str_append(&r->out, s, n);
    coai_buf_putc(&r->out, '}');
    coai__oa_chunk_end(r, NULL);
}

static const char *coai__oa_finish_name(coai_finish f)
{
    switch (f) {
    case COAI_FINISH_TOOL_CALLS: return "tool_calls";
    case COAI_FINISH_LENGTH: return "length";
    default: return "stop";
    }
}

/* A tool call's type and body in a Chat Completions message or chunk: ,"type":"function",
 * "function":{name, arguments}, or for a custom (freeform) tool of the request ,"type":
 * "custom","custom":{name, input} with the input as the raw text (the "input" string of
 * the arguments Cursor's model gave). */
static void coai__oa_call_out(coai_reply *r, coai_buf *o, coai_str name, coai_str args)
{
    size_t i;
    int cu = 0;
    for (i = 0; r->o_.tools && i < r->o_.tool_count && !cu; i++)
        cu = r->o_.tools[i].freeform && r->o_.tools[i].name.len == name.len
             && memcmp(r->o_.tools[i].name.ptr, name.ptr, name.len) == 0;
    coai_buf_puts(o, cu ? ",\"type\":\"custom\",\"custom\":{\"name\":"
                        : ",\"type\":\"function\",\"function\":{\"name\":");
    coai_json_str_append(o, name.ptr, name.len);
    coai_buf_puts(o, cu ? ",\"input\":" : ",\"arguments\":");
    if (cu) {
        cJSON *j = cJSON_ParseWithLength(args.ptr, args.len);
        const cJSON *in = coai__core_get(j, "input");
        if (cJSON_IsString(in)) coai_json_str_append(o, in->valuestring, strlen(in->valuestring));
        else coai_json_str_append(o, args.ptr, args.len);
        cJSON_Delete(j);
    } else {
        coai_json_str_append(o, args.ptr, args.len);
    }
    coai_buf_putc(o, '}');
}

static void coai__oa_w_body(coai_reply *r, coai_finish f)
{
    coai_buf *o = &r->out;
    const char *finish = coai__oa_finish_name(f);
    coai_buf_append(o, r->prefix_.data, r->prefix_.len);
    coai_buf_puts(o, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    if (r->has_tool_call_ && !r->content_.len) coai_buf_puts(o, "null");
    else coai_json_str_append(o, r->content_.data ? (const char *)r->content_.data : "",
                              r->content_.len);
    if (r->reasoning_.len) {
        coai_buf_puts(o, ",\"reasoning_content\":");
        coai_json_str_append(o, (const char *)r->reasoning_.data, r->reasoning_.len);
    }
    if (r->has_tool_call_) {
        size_t i;
        coai_buf_puts(o, ",\"tool_calls\":[");
        for (i = 0; i < r->ncalls_; i++) {
            const coai_reply_call *c = &r->calls_[i];
            if (i) coai_buf_putc(o, ',');
            coai_buf_puts(o, "{\"id\":");
            coai_json_str_append(o, c->call_id.ptr, c->call_id.len);
            coai__oa_call_out(r, o, c->tool, c->args);
            coai_buf_putc(o, '}');
        }
        coai_buf_putc(o, ']');
    }
    coai_buf_printf(o, "},\"finish_reason\":\"%s\"}],\"usage\":", finish);
    coai__oa_usage(r, o);
    coai_buf_putc(o, '}');
}

static void coai__oa_stream_tail(coai_reply *r)
{
    if (r->o_.include_usage) {
        coai_buf_puts(&r->out, "data: ");
        coai_buf_append(&r->out, r->prefix_.data, r->prefix_.len);
        coai_buf_puts(&r->out, ",\"choices\":[],\"usage\":");
        coai__oa_usage(r, &r->out);
        coai_buf_puts(&r->out, "}\n\n");
    }
    coai_buf_puts(&r->out, "data: [DONE]\n\n");
}

static void coai__oa_w_end(coai_reply *r, coai_finish f)
{
    coai__oa_chunk_begin(r);
    if (f == COAI_FINISH_TOOL_CALLS) {
        coai_buf_puts(&r->out, "{}");
        coai__oa_chunk_end(r, "\"tool_calls\"");
    } else {
        coai_buf_printf(&r->out, "{},\"finish_reason\":\"%s\"}]", coai__oa_finish_name(f));
        if (r->o_.include_usage) {
            coai_buf_puts(&r->out, ",\"usage\":null");
        } else {
            coai_buf_puts(&r->out, ",\"usage\":");
            coai__oa_usage(r, &r->out);
        }
        coai_buf_puts(&r->out, "}\n\n");
    }
    coai__oa_stream_tail(r);
}

static void coai__oa_w_keepalive(coai_reply *r)
{
    coai_buf_puts(&r->out, ": keepalive\n\n");
}

static void coai__oa_w_tool_call(coai_reply *r)
{
    coai__oa_chunk_begin(r);
    coai_buf_printf(&r->out, "{\"tool_calls\":[{\"index\":%lu,\"id\":",
                    (unsigned long)(r->ncalls_ ? r->ncalls_ - 1 : 0));
    coai_json_str_append(&r->out, (const char *)r->tc_id_.data, r->tc_id_.len);
    {
        coai_str name, args;
        name.ptr = (const char *)r->tc_name_.data;
        name.len = r->tc_name_.len;
        args.ptr = (const char *)r->tc_args_.data;
        args.len = r->tc_args_.len;
        coai__oa_call_out(r, &r->out, name, args);
    }
    coai_buf_puts(&r->out, "}]}");
    coai__oa_chunk_end(r, NULL);
}

/* PART:OPENAI impl end */

/* ======================================================================== */
/* PART:ANTHROPIC impl                                                      */
/* ======================================================================== */

/* ---- request ---------------------------------------------------------------- */

/* A heap string (from cJSON_Print*) handed over to the request. */
static coai_str coai__req_own(coai_request *req, char *p)
{
    coai_str r = { "", 0 };
    if (!p) { req->mem_.err = 1; return r; }
    if (coai_buf_append(&req->mem_, &p, sizeof p)) { free(p); return r; }
    r.ptr = p;
    r.len = strlen(p);
    return r;
}

static int coai__an_bad(coai_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    coai__core_error_vset(err, 400, "invalid_request_error", NULL, NULL, fmt, ap);
    va_end(ap);
    err->no_retry = 1;
    return COAI_ERR_INVALID;
}

static int coai__an_type_is(const cJSON *b, const char *type)
{
    const cJSON *t = coai__core_get(b, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

/* A document block -> a TEXT part: only a text source can reach Cursor (its agent takes a
 * prompt and images; a base64 PDF, a url or a file id would be lost), so every other source
 * is a 400 naming the block, in a message and in a tool_result alike. */
static int coai__an_document(const cJSON *b, coai_part *p, const char *path, coai_error *err)
{
    const cJSON *src = coai__core_get(b, "source");
    if (!coai__an_type_is(src, "text") || !cJSON_IsString(coai__core_get(src, "data")))
        return coai__an_bad(err, "%s: only documents with a text source "
                            "({\"type\":\"text\",\"data\"}) are supported; a PDF, url or "
                            "file source cannot be sent to Cursor", path);
    p->kind = COAI_PART_TEXT;
    p->text = coai__core_jstr(coai__core_get(src, "data"));
    return 0;
}

/* A search_result block ({source, title, content: [text blocks]}, as a tool's result or a
 * user's block) -> one TEXT part: "title (source)" and the texts, a line each. */
static int coai__an_search_result(coai_request *req, const cJSON *b, coai_part *p,
                                  const char *path, coai_error *err)
{
    const cJSON *src = coai__core_get(b, "source"), *title = coai__core_get(b, "title");
    const cJSON *content = coai__core_get(b, "content"), *e;
    size_t n, at;
    char *t;
    if (!cJSON_IsString(src) || !cJSON_IsString(title) || !cJSON_IsArray(content))
        return coai__an_bad(err, "%s: a search_result needs string source and title and a "
                            "content list of text blocks", path);
    n = strlen(title->valuestring) + strlen(src->valuestring) + 4;
    cJSON_ArrayForEach(e, content) {
        if (!coai__an_type_is(e, "text") || !cJSON_IsString(coai__core_get(e, "text")))
            return coai__an_bad(err, "%s.content: only text blocks ({\"type\":\"text\","
                                "\"text\"}) are allowed", path);
        n += strlen(coai__core_get(e, "text")->valuestring) + 1;
    }
    t = (char *)malloc(n + 1);
    if (!t) return COAI_ERR_NOMEM;
    at = (size_t)sprintf(t, "%s (%s)", title->valuestring, src->valuestring);
    cJSON_ArrayForEach(e, content)
        at += (size_t)sprintf(t + at, "\n%s", coai__core_get(e, "text")->valuestring);
    p->kind = COAI_PART_TEXT;
    p->text = coai__req_own(req, t);
    return req->mem_.err ? COAI_ERR_NOMEM : 0;
}

/* An image block -> an IMAGE part. path names the block in messages. */
static int coai__an_image(coai_request *req, const cJSON *b, coai_part *p, const char *path,
                          coai_error *err)
{
    const cJSON *src = coai__core_get(b, "source");
    p->kind = COAI_PART_IMAGE;
    p->path = coai__req_path(req, "%s.source", path);
    if (coai__an_type_is(src, "base64")) {
        const cJSON *mt = coai__core_get(src, "media_type"), *d = coai__core_get(src, "data");
        if (!cJSON_IsString(mt) || !cJSON_IsString(d))
            return coai__an_bad(err, "%s.source: a base64 image needs string media_type and "
                                "data", path);
        p->media_type = coai__core_jstr(mt);
        p->data = coai__core_jstr(d);
        return 0;
    }
    if (coai__an_type_is(src, "url") && cJSON_IsString(coai__core_get(src, "url"))) {
        p->url = coai__core_jstr(coai__core_get(src, "url"));
        return 0;
    }
    return coai__an_bad(err, "%s.source: expected {\"type\":\"base64\",\"media_type\",\"data\"} "
                        "or {\"type\":\"url\",\"url\"}", path);
}

/* content: a string or an array of blocks -> a list of messages. Blocks of one message
 * stay one message, except that each tool_result becomes its own TOOL message (in place)
 * and a user message's other blocks gather around them. out has room for
 * 1 + 2 * blocks messages; *k is advanced. */
static int coai__an_message(coai_request *req, const cJSON *m, int i, coai_message *out,
                            size_t *k, coai_error *err)
{
    char path[96];
    const cJSON *role = coai__core_get(m, "role"), *content = coai__core_get(m, "content"), *b;
    coai_role r;
    coai_message *cur = NULL;
    coai_part *parts;
    coai_call *calls = NULL;
    size_t nb, j = 0, pn = 0;
    if (!cJSON_IsObject(m)) return coai__an_bad(err, "messages.%d: must be an object", i);
    if (!cJSON_IsString(role))
        return coai__an_bad(err, "messages.%d.role: Field required (\"user\" or \"assistant\")", i);
    if (strcmp(role->valuestring, "user") == 0) r = COAI_ROLE_USER;
    else if (strcmp(role->valuestring, "assistant") == 0) r = COAI_ROLE_ASSISTANT;
    else if (strcmp(role->valuestring, "system") == 0) r = COAI_ROLE_SYSTEM;   /* Claude Code */
    else
        return coai__an_bad(err, "messages.%d.role: Input should be 'user' or 'assistant'", i);
    if (cJSON_IsString(content)) {
        parts = (coai_part *)coai__req_alloc(req, sizeof *parts);
        if (!parts) return COAI_ERR_NOMEM;
        parts->text = coai__core_jstr(content);
        cur = &out[(*k)++];
        cur->role = r;
        cur->parts = parts;
        cur->part_count = 1;
        return 0;
    }
    if (!cJSON_IsArray(content))
        return coai__an_bad(err, "messages.%d.content: Input should be a string or a list of "
                            "content blocks", i);
    nb = (size_t)cJSON_GetArraySize(content);
    parts = (coai_part *)coai__req_alloc(req, nb * sizeof *parts);
    if (r == COAI_ROLE_ASSISTANT) calls = (coai_call *)coai__req_alloc(req, nb * sizeof *calls);
    if (!parts || (r == COAI_ROLE_ASSISTANT && !calls)) return COAI_ERR_NOMEM;
    cJSON_ArrayForEach(b, content) {
        const cJSON *t = coai__core_get(b, "type");
        const char *ty;
        snprintf(path, sizeof path, "messages.%d.content.%d", i, (int)j++);
        if (!cJSON_IsObject(b) || !cJSON_IsString(t))
            return coai__an_bad(err, "%s: must be an object with a string 'type'", path);
        ty = t->valuestring;
        if (strcmp(ty, "tool_result") == 0) {
            const cJSON *id = coai__core_get(b, "tool_use_id"), *c = coai__core_get(b, "content");
            const cJSON *ie = coai__core_get(b, "is_error"), *e;
            coai_message *tm;
            coai_part *tp;
            if (r != COAI_ROLE_USER)
                return coai__an_bad(err, "%s: tool_result blocks belong in user messages", path);
            if (!cJSON_IsString(id))
                return coai__an_bad(err, "%s.tool_use_id: Field required", path);
            if (ie && !cJSON_IsNull(ie) && !cJSON_IsBool(ie))
                return coai__an_bad(err, "%s.is_error: Input should be a boolean", path);
            tm = &out[(*k)++];
            cur = NULL;            /* text after a tool result starts a new user turn */
            tm->role = COAI_ROLE_TOOL;
            tm->tool_call_id = coai__core_jstr(id);
            tm->is_error = cJSON_IsTrue(ie);
            if (cJSON_IsString(c)) {
                tp = (coai_part *)coai__req_alloc(req, sizeof *tp);
                if (!tp) return COAI_ERR_NOMEM;
                tp->text = coai__core_jstr(c);
                tm->parts = tp;
                tm->part_count = 1;
            } else if (cJSON_IsArray(c)) {
                size_t q = 0, jj = 0;
                char p2[128];
                tp = (coai_part *)coai__req_alloc(req, (size_t)cJSON_GetArraySize(c) * sizeof *tp);
                if (!tp) return COAI_ERR_NOMEM;
                cJSON_ArrayForEach(e, c) {
                    snprintf(p2, sizeof p2, "%s.content.%d", path, (int)jj++);
                    if (coai__an_type_is(e, "text")) {
                        if (!cJSON_IsString(coai__core_get(e, "text")))
                            return coai__an_bad(err, "%s.text: Field required", p2);
                        tp[q++].text = coai__core_jstr(coai__core_get(e, "text"));
                    } else if (coai__an_type_is(e, "image")) {
                        int rc = coai__an_image(req, e, &tp[q++], p2, err);
                        if (rc) return rc;
                    } else if (coai__an_type_is(e, "document")) {
                        int rc = coai__an_document(e, &tp[q++], p2, err);
                        if (rc) return rc;
                    } else if (coai__an_type_is(e, "search_result")) {
                        int rc = coai__an_search_result(req, e, &tp[q++], p2, err);
                        if (rc) return rc;
                    } else if (!cJSON_IsObject(e) || !cJSON_IsString(coai__core_get(e, "type"))) {
                        return coai__an_bad(err, "%s: must be an object with a string 'type'",
                                            p2);
                    }
                    /* other kinds (tool references) carry nothing for Cursor */
                }
                tm->parts = tp;
                tm->part_count = q;
            } else if (c && !cJSON_IsNull(c)) {
                return coai__an_bad(err, "%s.content: Input should be a string or a list of "
                                    "content blocks", path);
            }
            continue;
        }
        if (!cur) {
            cur = &out[(*k)++];
            cur->role = r;
            cur->parts = parts + pn;     /* this message's parts follow the earlier ones */
            cur->part_count = 0;
            if (r == COAI_ROLE_ASSISTANT) cur->calls = calls;
        }
        if (strcmp(ty, "text") == 0) {
            if (!cJSON_IsString(coai__core_get(b, "text")))
                return coai__an_bad(err, "%s.text: Field required", path);
            cur->part_count++;
            parts[pn++].text = coai__core_jstr(coai__core_get(b, "text"));
        } else if (strcmp(ty, "image") == 0) {
            int rc;
            if (r == COAI_ROLE_ASSISTANT)
                return coai__an_bad(err, "%s: image blocks belong in user messages", path);
            cur->part_count++;
            rc = coai__an_image(req, b, &parts[pn++], path, err);
            if (rc) return rc;
        } else if (strcmp(ty, "thinking") == 0) {
            if (!cJSON_IsString(coai__core_get(b, "thinking")))
                return coai__an_bad(err, "%s.thinking: Field required", path);
            cur->part_count++;
            parts[pn].kind = COAI_PART_THINKING;
            parts[pn++].text = coai__core_jstr(coai__core_get(b, "thinking"));
        } else if (strcmp(ty, "tool_use") == 0) {
            const cJSON *id = coai__core_get(b, "id"), *name = coai__core_get(b, "name");
            const cJSON *in = coai__core_get(b, "input");
            coai_call *c;
            if (r != COAI_ROLE_ASSISTANT)
                return coai__an_bad(err, "%s: tool_use blocks belong in assistant messages", path);
            if (!cJSON_IsString(id)) return coai__an_bad(err, "%s.id: Field required", path);
            if (!cJSON_IsString(name)) return coai__an_bad(err, "%s.name: Field required", path);
            if (in && !cJSON_IsNull(in) && !cJSON_IsObject(in))
                return coai__an_bad(err, "%s.input: Input should be an object", path);
            c = &calls[cur->call_count++];
            c->id = coai__core_jstr(id);
            c->name = coai__core_jstr(name);
            c->args = cJSON_IsObject(in) ? coai__req_own(req, cJSON_PrintUnformatted(in))
                                         : coai_str_c("{}");
        } else if (strcmp(ty, "redacted_thinking") == 0 || strcmp(ty, "server_tool_use") == 0
                   || strcmp(ty, "web_search_tool_result") == 0) {
            /* Encrypted or server-side history: nothing Cursor could use. */
        } else if (strcmp(ty, "document") == 0) {
            int rc;
            cur->part_count++;
            if ((rc = coai__an_document(b, &parts[pn++], path, err)) != 0) return rc;
        } else if (strcmp(ty, "search_result") == 0) {
            int rc;
            cur->part_count++;
            if ((rc = coai__an_search_result(req, b, &parts[pn++], path, err)) != 0) return rc;
        } else {
            return coai__an_bad(err, "%s.type: unsupported content block type '%s'", path, ty);
        }
    }
    return 0;
}

static int coai__an_parse(coai_request *req, const char *body, size_t n, coai_error *err,
                          int count_only)
{
    cJSON *root;
    const cJSON *v, *msgs, *m, *tools;
    coai_message *out;
    size_t cap = 1, k = 0;
    int rc, i;
    memset(req, 0, sizeof *req);
    if ((rc = coai__json_body(body, n, &root, err)) != 0) return rc;
    req->root_ = root;
    req->dialect = COAI_DIALECT_ANTHROPIC;
    req->thinking = -1;
    rc = COAI_ERR_INVALID;
    v = coai__core_get(root, "model");
    if (!cJSON_IsString(v) || !v->valuestring[0]) {
        coai__an_bad(err, "model: Field required");
        goto fail;
    }
    req->model = coai__core_jstr(v);
    v = coai__core_get(root, "max_tokens");
    if (v || !count_only) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e12
            || v->valuedouble != (double)(int64_t)v->valuedouble) {
            coai__an_bad(err, "max_tokens: Field required (an integer >= 1)");
            goto fail;
        }
        req->max_tokens = (int64_t)v->valuedouble;
    }
    v = coai__core_get(root, "stream");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
        coai__an_bad(err, "stream: Input should be a valid boolean");
        goto fail;
    }
    req->stream = !count_only && cJSON_IsTrue(v);
    msgs = coai__core_get(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        coai__an_bad(err, "messages: Field required (a non-empty list)");
        goto fail;
    }
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *c = coai__core_get(m, "content");
        cap += 1 + 2 * (size_t)(cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 1);
    }
    out = (coai_message *)coai__req_alloc(req, cap * sizeof *out);
    if (!out) goto nomem;
    /* system: a string or text blocks (cache_control and citations are accepted) */
    v = coai__core_get(root, "system");
    if (cJSON_IsString(v)) {
        coai_part *p = (coai_part *)coai__req_alloc(req, sizeof *p);
        if (!p) goto nomem;
        p->text = coai__core_jstr(v);
        out[k].role = COAI_ROLE_SYSTEM;
        out[k].parts = p;
        out[k++].part_count = 1;
    } else if (cJSON_IsArray(v)) {
        const cJSON *b;
        size_t q = 0;
        coai_part *p = (coai_part *)coai__req_alloc(req, (size_t)cJSON_GetArraySize(v) * sizeof *p);
        if (!p) goto nomem;
        i = 0;
        cJSON_ArrayForEach(b, v) {
            if (!coai__an_type_is(b, "text") || !cJSON_IsString(coai__core_get(b, "text"))) {
                coai__an_bad(err, "system.%d: system blocks must be text blocks", i);
                goto fail;
            }
            p[q++].text = coai__core_jstr(coai__core_get(b, "text"));
            i++;
        }
        out[k].role = COAI_ROLE_SYSTEM;
        out[k].parts = p;
        out[k++].part_count = q;
    } else if (v && !cJSON_IsNull(v)) {
        coai__an_bad(err, "system: Input should be a string or a list of text blocks");
        goto fail;
    }
    i = 0;
    cJSON_ArrayForEach(m, msgs) {
        if ((rc = coai__an_message(req, m, i++, out, &k, err)) != 0) {
            if (rc == COAI_ERR_NOMEM) goto nomem;
            goto fail;
        }
    }
    rc = COAI_ERR_INVALID;
    req->messages = out;
    req->message_count = k;
    /* tools: custom tools (name, description, input_schema). Anthropic-defined tools
     * (a "type" other than "custom": bash_*, text_editor_*, web_search_*) run on
     * Anthropic's side or need a schema we do not have: left out. defer_loading tools
     * are loaded later by the client's tool search: left out until they are. */
    tools = coai__core_get(root, "tools");
    if (tools && !cJSON_IsNull(tools)) {
        const cJSON *t;
        int count;
        size_t q = 0;
        if (!cJSON_IsArray(tools)) { coai__an_bad(err, "tools: Input should be a list"); goto fail; }
        count = cJSON_GetArraySize(tools);
        if (count > COAI_MAX_TOOLS) {
            coai__an_bad(err, "tools: at most %d tools are supported", COAI_MAX_TOOLS);
            goto fail;
        }
        if (count > 0) {
            req->tools = (coai_tool *)calloc((size_t)count, sizeof *req->tools);
            if (!req->tools) goto nomem;
        }
        i = 0;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *name = coai__core_get(t, "name"), *d = coai__core_get(t, "description");
            const cJSON *sch = coai__core_get(t, "input_schema"), *ty = coai__core_get(t, "type");
            if (!cJSON_IsObject(t)) { coai__an_bad(err, "tools.%d: must be an object", i); goto fail; }
            if (!cJSON_IsString(name) || !coai__name_ok(name->valuestring, 128)) {
                coai__an_bad(err, "tools.%d.name: must match ^[a-zA-Z0-9_-]{1,128}$", i);
                goto fail;
            }
            if (d && !cJSON_IsNull(d) && !cJSON_IsString(d)) {
                coai__an_bad(err, "tools.%d.description: Input should be a string", i);
                goto fail;
            }
            i++;
            if (ty && !cJSON_IsNull(ty)
                && !(cJSON_IsString(ty) && strcmp(ty->valuestring, "custom") == 0))
                continue;
            if (!cJSON_IsObject(sch)) {
                coai__an_bad(err, "tools.%d.input_schema: Field required (an object)", i - 1);
                goto fail;
            }
            if (cJSON_IsTrue(coai__core_get(t, "defer_loading"))) continue;
            req->tools[q].name = coai__core_jstr(name);
            req->tools[q].description = coai__core_jstr(d);
            req->tools[q++].parameters = sch;
        }
        req->tool_count = q;
        if (!q) { free(req->tools); req->tools = NULL; }
    }
    v = coai__core_get(root, "tool_choice");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *ty = coai__core_get(v, "type");
        const char *s = cJSON_IsString(ty) ? ty->valuestring : "";
        if (strcmp(s, "auto") == 0) req->tool_choice = COAI_TOOL_CHOICE_AUTO;
        else if (strcmp(s, "any") == 0) req->tool_choice = COAI_TOOL_CHOICE_ANY;
        else if (strcmp(s, "none") == 0) req->tool_choice = COAI_TOOL_CHOICE_NONE;
        else if (strcmp(s, "tool") == 0 && cJSON_IsString(coai__core_get(v, "name"))) {
            req->tool_choice = COAI_TOOL_CHOICE_TOOL;
            req->tool_choice_name = coai__core_jstr(coai__core_get(v, "name"));
        } else {
            coai__an_bad(err, "tool_choice: expected {\"type\": \"auto\" | \"any\" | \"none\"} or "
                         "{\"type\": \"tool\", \"name\": ...}");
            goto fail;
        }
    }
    v = coai__core_get(root, "stop_sequences");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *e;
        size_t q = 0;
        coai_str *st;
        if (!cJSON_IsArray(v)) { coai__an_bad(err, "stop_sequences: Input should be a list"); goto fail; }
        if (coai__stops_check((size_t)cJSON_GetArraySize(v), COAI_MAX_STOP_SEQUENCES,
                              "stop_sequences", err))
            goto fail;
        st = (coai_str *)coai__req_alloc(req, (size_t)cJSON_GetArraySize(v) * sizeof *st);
        if (!st) goto nomem;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsString(e)) {
                coai__an_bad(err, "stop_sequences.%d: Input should be a string", (int)q);
                goto fail;
            }
            st[q++] = coai__core_jstr(e);
        }
        req->stop = st;
        req->stop_count = q;
    }
    v = coai__core_get(root, "thinking");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *ty = coai__core_get(v, "type"), *bt = coai__core_get(v, "budget_tokens");
        if (coai__an_type_is(v, "enabled") || coai__an_type_is(v, "adaptive")) req->thinking = 1;
        else if (coai__an_type_is(v, "disabled")) req->thinking = 0;
        else {
            coai__an_bad(err, "thinking.type: expected 'enabled', 'adaptive' or 'disabled' "
                         "(got %s)", cJSON_IsString(ty) ? ty->valuestring : "none");
            goto fail;
        }
        if (cJSON_IsNumber(bt) && bt->valuedouble > 0 && bt->valuedouble < 1e12)
            req->thinking_budget = (int64_t)bt->valuedouble;
    }
    v = coai__core_get(root, "metadata");
    if (v && !cJSON_IsNull(v) && !cJSON_IsObject(v)) {
        coai__an_bad(err, "metadata: Input should be an object");
        goto fail;
    }
    /* temperature, top_p, top_k, context_management, output_config, service_tier,
     * container, mcp_servers ...: accepted, nothing to do on Cursor's side. */
    if ((rc = coai__tool_choice_check(req, "tool_choice", err)) != 0) goto fail;
    if (req->mem_.err || coai__request_finish(req)) goto nomem;
    return 0;
nomem:
    rc = COAI_ERR_NOMEM;
    coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
fail:
    coai_request_free(req);
    return rc;
}

int coai_anthropic_parse(coai_request *req, const char *body, size_t n, coai_error *err)
{
    return coai__an_parse(req, body, n, err, 0);
}

int coai_anthropic_count_parse(coai_request *req, const char *body, size_t n, coai_error *err)
{
    return coai__an_parse(req, body, n, err, 1);
}

/* ---- exec mapping ------------------------------------------------------------- */

/* ---- the one quoting layer ---------------------------------------------------
 * Every command the proxy writes for a client's shell tool (ls, find, grep, rg, cat, wc,
 * rm, mkdir, dirname, printf, the split write's script) takes Cursor's text - paths,
 * patterns, globs, file contents - only through these three functions; nothing else
 * writes such text into a command. Each appends exactly one shell word that stands for
 * exactly the bytes given:
 *   coai__sh_arg   a literal string argument: single-quoted for a POSIX shell (a quote
 *                  as '\''), so $(...), `...`, globs, spaces, newlines and CR are text;
 *   coai__sh_opt   an option and its value in one word (--include='*.c'): the value is
 *                  never read as an option, whatever it starts with;
 *   coai__sh_path  a path operand: coai__sh_arg with ./ in front of a relative path that
 *                  starts with - or with one of find's expression words ( ) ! , - so
 *                  -delete, --help or ! are file names for every program, find (which has
 *                  no --) included; the callers also write -- where the program takes it.
 * A pattern goes after -e / -name (an option's argument), never as an operand.
 * Each returns 0, or -1 with nothing written for text holding a NUL byte, which no
 * argument of a command can carry (the callers refuse the exec: COAI__SH_REFUSAL). */
/* 'prefix + s' (prefix: plain text without a quote) */
static int coai__sh_quote(coai_buf *b, const char *prefix, coai_str s)
{
    size_t i;
    if (s.len && memchr(s.ptr, 0, s.len)) return -1;
    coai_buf_putc(b, '\'');
    coai_buf_puts(b, prefix);
    for (i = 0; i < s.len; i++) {
        if (s.ptr[i] == '\'') coai_buf_puts(b, "'\\''");
        else coai_buf_putc(b, s.ptr[i]);
    }
    coai_buf_putc(b, '\'');
    return 0;
}

static int coai__sh_arg(coai_buf *b, coai_str s)
{
    return coai__sh_quote(b, "", s);
}

static int coai__sh_opt(coai_buf *b, const char *opt, coai_str value)
{
    if (value.len && memchr(value.ptr, 0, value.len)) return -1;
    coai_buf_puts(b, opt);
    return coai__sh_quote(b, "", value);
}

static int coai__sh_path(coai_buf *b, coai_str path)
{
    return coai__sh_quote(b, path.len && strchr("-()!,", path.ptr[0]) ? "./" : "", path);
}

/* Cursor's delete through a shell tool: the file's size first (its delete result carries
 * it), then the removal. Not rm -f: Codex refuses it ("rm -f style commands are not
 * permitted"), and a missing file is an error, as Cursor's own delete reports it.
 * 0, or -1 for a path no command can carry (coai__sh_arg). */
static int coai__delete_cmd(coai_buf *cmd, coai_str path)
{
    coai_buf_puts(cmd, "wc -c < ");
    if (coai__sh_path(cmd, path) < 0) return -1;
    coai_buf_puts(cmd, " && rm -- ");
    return coai__sh_path(cmd, path);
}

static int coai__rs_write_fits(coai_str path, coai_str content);          /* PART:RESPONSES */
static int coai__rs_write_part(coai_buf *cmd, coai_str exec_id, coai_str path,
                               coai_str content, unsigned k, unsigned n, uint64_t salt);
static unsigned coai__write_parts(size_t len);

/* The command that does a file exec through the client's shell tool, when it has no tool
 * for the exec's own role: read (cat), write (printf of the exact bytes, or the split
 * write's parts when one argument cannot carry it or it holds a NUL: tc->parts), ls,
 * grep, glob (find on the last path segment), delete (the size, then rm). Every piece of
 * Cursor's text goes through the quoting layer above. 1 built, 0 not an exec a command
 * does, -1 a path or pattern no command can carry, -2 no memory. */
static int coai__sh_fallback(const coai_exec *ex, coai_buf *cmd, coai_tool_call *tc)
{
    int bad = 0;
    if (ex->kind == COAI_EXEC_READ) {
        if (!ex->path.len) return 0;
        coai_buf_puts(cmd, "cat -- ");
        bad |= coai__sh_path(cmd, ex->path);
    } else if (ex->kind == COAI_EXEC_WRITE) {
        int nul = ex->content.len && memchr(ex->content.ptr, 0, ex->content.len) != NULL;
        if (!ex->path.len) return 0;
        if (!nul && coai__rs_write_fits(ex->path, ex->content)) {
            /* printf '%s' 'text' > 'path': exact bytes, no heredoc delimiter to collide */
            coai_buf_puts(cmd, "mkdir -p -- \"$(dirname -- ");
            bad |= coai__sh_path(cmd, ex->path);
            coai_buf_puts(cmd, ")\" && printf '%s' ");
            bad |= coai__sh_arg(cmd, ex->content);
            coai_buf_puts(cmd, " > ");
            bad |= coai__sh_path(cmd, ex->path);
        } else {
            tc->parts = coai__write_parts(ex->content.len);
            if (tc->part >= tc->parts) return -2;
            bad |= coai__rs_write_part(cmd, ex->exec_id, ex->path, ex->content, tc->part,
                                       tc->parts, tc->salt);
        }
    } else if (ex->kind == COAI_EXEC_LS) {
        coai_buf_puts(cmd, "ls -la -- ");
        /* no path: the client's own directory (the proxy's workspace is not where it runs) */
        bad |= coai__sh_path(cmd, ex->has_path || ex->path.len ? ex->path : coai_str_c("."));
    } else if (ex->kind == COAI_EXEC_DELETE) {
        if (!ex->path.len) return 0;
        bad |= coai__delete_cmd(cmd, ex->path);
    } else if (ex->kind == COAI_EXEC_GREP && ex->pattern.len) {
        coai_buf_puts(cmd, "grep -rnE ");
        if (ex->glob.len) {
            bad |= coai__sh_opt(cmd, "--include=", ex->glob);
            coai_buf_putc(cmd, ' ');
        }
        coai_buf_puts(cmd, "-e ");
        bad |= coai__sh_arg(cmd, ex->pattern);
        coai_buf_puts(cmd, " -- ");
        bad |= coai__sh_path(cmd, ex->path.len ? ex->path : coai_str_c("."));
    } else if (ex->kind == COAI_EXEC_GREP) {
        /* a file glob: find matches its last path segment (src/x/y.ts -> y.ts) */
        coai_str g = ex->glob;
        const char *slash = NULL;
        size_t i;
        for (i = 0; i < g.len; i++)
            if (g.ptr[i] == '/') slash = g.ptr + i;
        if (slash) { g.len -= (size_t)(slash + 1 - g.ptr); g.ptr = slash + 1; }
        coai_buf_puts(cmd, "find ");
        bad |= coai__sh_path(cmd, ex->path.len ? ex->path : coai_str_c("."));
        coai_buf_puts(cmd, " -type f -name ");
        bad |= coai__sh_arg(cmd, g);
    } else {
        return 0;
    }
    if (bad) return -1;
    return cmd->err ? -2 : 1;
}

int coai_anthropic_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                            coai_str workspace, coai_tool_call *tc)
{
    coai_exec sh;
    coai_buf cmd = { 0 };
    int m = coai_exec_map(ex, tools, count, workspace, tc), f;
    if (m != 0) return m;
    f = coai__sh_fallback(ex, &cmd, tc);
    if (f == 0) { coai_buf_free(&cmd); return 0; }
    if (f == -1) { coai_buf_free(&cmd); tc->refusal = COAI__SH_REFUSAL; return 0; }
    if (f < 0) { coai_buf_free(&cmd); return -1; }
    /* the command goes to the client's shell tool like a shell exec would */
    coai__exec_as_shell(&sh, ex, &cmd);
    m = coai_exec_map(&sh, tools, count, workspace, tc);
    coai_buf_free(&cmd);
    tc->via_shell = m == 1;
    return m;
}

/* ---- model names ------------------------------------------------------------- */

int64_t coai_request_input_tokens(const coai_request *req)
{
    size_t u = coai__core_utf16_len(req->prompt.data ? (const char *)req->prompt.data : "",
                                  req->prompt.len);
    return (int64_t)((u + 3) / 4);
}

/* What a model name says: family (1 opus, 2 sonnet, 3 haiku), version numbers (a date
 * such as 20250929 is not one), "thinking", whether it starts like a Claude name, and
 * how many other words it has ("high", "max", "fast" ...). */
typedef struct coai__claude_name {
    int family, claude, thinking, extras;
    long version;              /* major * 10000 + minor * 100 + patch */
    int nver;
} coai__claude_name;

static void coai__claude_parse(coai_str s, coai__claude_name *c)
{
    size_t i = 0;
    memset(c, 0, sizeof *c);
    while (i < s.len) {
        char w[16];
        size_t k = 0, start;
        int digits = 1;
        while (i < s.len && !coai__core_alnum(s.ptr[i])) i++;
        start = i;
        while (i < s.len && coai__core_alnum(s.ptr[i])) {
            char ch = s.ptr[i++];
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
            if (ch < '0' || ch > '9') digits = 0;
            if (k + 1 < sizeof w) w[k++] = ch;
        }
        w[k] = 0;
        if (i == start) break;
        if (digits) {
            if (i - start <= 4 && c->nver < 3) {
                long v = atol(w);
                c->version += v * (c->nver == 0 ? 10000 : c->nver == 1 ? 100 : 1);
                c->nver++;
            }                                   /* longer: a date stamp */
        } else if (strcmp(w, "claude") == 0 && c->claude == 0 && start == 0) c->claude = 1;
        else if (strcmp(w, "opus") == 0) c->family = 1;
        else if (strcmp(w, "sonnet") == 0) c->family = 2;
        else if (strcmp(w, "haiku") == 0) c->family = 3;
        else if (strcmp(w, "thinking") == 0) c->thinking = 1;
        else if (strcmp(w, "latest") != 0 && strcmp(w, "claude") != 0) c->extras++;
    }
}

int coai_models_resolve_claude(const coai_models *m, coai_str requested, int want_thinking,
                               coai_str *out)
{
    coai__claude_name rq;
    int fam;
    coai__claude_parse(requested, &rq);
    if (!rq.family || (!rq.claude && rq.extras)) return 0;
    for (fam = rq.family;; fam = 2) {
        size_t i, best = 0;
        long best_score = -1;
        for (i = 0; m && i < m->count; i++) {
            coai__claude_name c;
            long score;
            int exact;
            const coai_model *it = &m->items[i];
            coai__claude_parse(it->display_id.len ? it->display_id : it->id, &c);
            if (c.family != fam) coai__claude_parse(it->id, &c);
            if (c.family != fam) continue;
            exact = fam == rq.family && rq.nver && c.version == rq.version;
            /* exact version > the wanted thinking variant > newer > fewer extra words */
            score = (long)exact * 100000000L + (long)(c.thinking == (want_thinking != 0)) * 10000000L
                    + (c.version > 999999 ? 999999 : c.version) * 10L
                    + (c.extras > 9 ? 0 : 9 - c.extras);
            if (score > best_score) { best_score = score; best = i; }
        }
        if (best_score >= 0) { *out = m->items[best].id; return 1; }
        if (fam != 3) return 0;            /* only a missing haiku falls back (to sonnet) */
    }
}

/* when: RFC 3339 UTC of unix seconds `created` (clamped to years 1970-9999). */
static void coai__an_when(char when[96], int64_t created)
{
    int64_t t = created < 0 ? 0 : created > 253402300799LL ? 253402300799LL : created;
    int64_t days = coai__floor_div(t, 86400), sec = t - days * 86400;
    int64_t z = days + 719468, era = coai__floor_div(z, 146097), doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1, mo = mp < 10 ? mp + 3 : mp - 9;
    /* civil date of a day count (H. Hinnant's algorithm): no gmtime_r needed */
    snprintf(when, 96, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lldZ",
             (long long)(yoe + era * 400 + (mo <= 2)), (long long)mo, (long long)d,
             (long long)(sec / 3600), (long long)(sec / 60 % 60), (long long)(sec % 60));
}

/* One model object of Anthropic's model list. */
static void coai__an_model(coai_buf *out, const coai_model *it, const char *when)
{
    coai_str id = it->display_id.len ? it->display_id : it->id;
    coai_str name = it->display_name.len ? it->display_name : id;
    coai_buf_puts(out, "{\"type\":\"model\",\"id\":");
    coai_json_str_append(out, id.ptr, id.len);
    coai_buf_puts(out, ",\"display_name\":");
    coai_json_str_append(out, name.ptr, name.len);
    coai_buf_printf(out, ",\"created_at\":\"%s\"}", when);
}

int coai_models_write_anthropic_model(coai_buf *out, const coai_model *one, int64_t created)
{
    char when[96];
    coai__an_when(when, created);
    coai__an_model(out, one, when);
    return out->err ? -1 : 0;
}

int coai_models_write_anthropic(coai_buf *out, const coai_models *m, int64_t created)
{
    char when[96];
    size_t i;
    coai__an_when(when, created);
    coai_buf_puts(out, "{\"data\":[");
    for (i = 0; m && i < m->count; i++) {
        if (i) coai_buf_putc(out, ',');
        coai__an_model(out, &m->items[i], when);
    }
    coai_buf_puts(out, "],\"has_more\":false,\"first_id\":");
    if (m && m->count) {
        const coai_model *f = &m->items[0], *l = &m->items[m->count - 1];
        coai_str a = f->display_id.len ? f->display_id : f->id;
        coai_str b = l->display_id.len ? l->display_id : l->id;
        coai_json_str_append(out, a.ptr, a.len);
        coai_buf_puts(out, ",\"last_id\":");
        coai_json_str_append(out, b.ptr, b.len);
    } else {
        coai_buf_puts(out, "null,\"last_id\":null");
    }
    return coai_buf_puts(out, "}");
}

/* ---- the Messages writer ------------------------------------------------------ */

/* What a thinking block is closed with. Anthropic signs thinking so that it can be
 * sent back; Cursor's thinking has no signature, clients only need a non-empty one,
 * and what comes back is never checked. */
#define COAI__AN_SIGNATURE "Y3Vyc29yLW9haQ=="

static void coai__an_w_init(coai_reply *r)
{
    coai_buf_puts(&r->prefix_, "{\"id\":");
    coai_json_str_append(&r->prefix_, r->o_.completion_id.ptr, r->o_.completion_id.len);
    coai_buf_puts(&r->prefix_, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    coai_json_str_append(&r->prefix_, r->o_.model.ptr, r->o_.model.len);
}

/* Anthropic counts input without the cached parts: input - cache read - cache write, never
 * below 0. at_start: message_start, before any output was counted. */
static void coai__an_usage(const coai_reply *r, coai_buf *b, int at_start)
{
    coai_usage u;
    int64_t in;
    coai_reply_usage(r, &u);
    in = u.input_tokens - u.cache_read_tokens - u.cache_write_tokens;
    coai_buf_printf(b, "{\"input_tokens\":%lld,\"cache_creation_input_tokens\":%lld,"
                    "\"cache_read_input_tokens\":%lld,\"output_tokens\":%lld}",
                    (long long)(in > 0 ? in : 0),
                    (long long)u.cache_write_tokens, (long long)u.cache_read_tokens,
                    (long long)(at_start ? 0 : u.output_tokens));
}

static void coai__an_event(coai_reply *r, const char *name)
{
    coai_buf_printf(&r->out, "event: %s\ndata: {\"type\":\"%s\"", name, name);
}

static void coai__an_w_begin(coai_reply *r)
{
    coai__an_event(r, "message_start");
    coai_buf_puts(&r->out, ",\"message\":");
    coai_buf_append(&r->out, r->prefix_.data, r->prefix_.len);
    coai_buf_puts(&r->out, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
                  "\"usage\":");
    coai__an_usage(r, &r->out, 1);
    coai_buf_puts(&r->out, "}}\n\n");
}

static void coai__an_block_stop(coai_reply *r)
{
    if (!r->block_open_) return;
    if (r->block_open_ == 2) {
        coai__an_event(r, "content_block_delta");
        coai_buf_printf(&r->out, ",\"index\":%d,\"delta\":{\"type\":\"signature_delta\","
                        "\"signature\":\"" COAI__AN_SIGNATURE "\"}}\n\n", r->block_ - 1);
    }
    coai__an_event(r, "content_block_stop");
    coai_buf_printf(&r->out, ",\"index\":%d}\n\n", r->block_ - 1);
    r->block_open_ = 0;
}

/* kind 1 text, 2 thinking */
static void coai__an_block_start(coai_reply *r, int kind)
{
    coai__an_block_stop(r);
    coai__an_event(r, "content_block_start");
    coai_buf_printf(&r->out, ",\"index\":%d,\"content_block\":%s}\n\n", r->block_,
                    kind == 2 ? "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}"
                              : "{\"type\":\"text\",\"text\":\"\"}");
    r->block_++;
    r->block_open_ = kind;
}

static void coai__an_w_delta(coai_reply *r, int ch, const char *s, size_t n)
{
    int kind = ch ? 2 : 1;
    if (r->block_open_ != kind) coai__an_block_start(r, kind);
    coai__an_event(r, "content_block_delta");
    coai_buf_printf(&r->out, ",\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":", r->block_ - 1,
                    ch ? "thinking_delta" : "text_delta", ch ? "thinking" : "text");
    coai_json_str_append(&r->out, s, n);
    coai_buf_puts(&r->out, "}}\n\n");
}

static void coai__an_w_tool_call(coai_reply *r)
{
    coai__an_block_stop(r);
    coai__an_event(r, "content_block_start");
    coai_buf_printf(&r->out, ",\"index\":%d,\"content_block\":{\"type\":\"tool_use\",\"id\":",
                    r->block_);
    coai_json_str_append(&r->out, (const char *)r->tc_id_.data, r->tc_id_.len);
    coai_buf_puts(&r->out, ",\"name\":");
    coai_json_str_append(&r->out, (const char *)r->tc_name_.data, r->tc_name_.len);
    coai_buf_puts(&r->out, ",\"input\":{}}}\n\n");
    coai__an_event(r, "content_block_delta");
    coai_buf_printf(&r->out, ",\"index\":%d,\"delta\":{\"type\":\"input_json_delta\","
                    "\"partial_json\":", r->block_);
    if (r->tc_args_.len)
        coai_json_str_append(&r->out, (const char *)r->tc_args_.data, r->tc_args_.len);
    else
        coai_buf_puts(&r->out, "\"{}\"");
    coai_buf_puts(&r->out, "}}\n\n");
    coai__an_event(r, "content_block_stop");
    coai_buf_printf(&r->out, ",\"index\":%d}\n\n", r->block_);
    r->block_++;
}

static const char *coai__an_stop_reason(coai_finish f)
{
    switch (f) {
    case COAI_FINISH_TOOL_CALLS: return "tool_use";
    case COAI_FINISH_LENGTH: return "max_tokens";
    case COAI_FINISH_STOP_SEQUENCE: return "stop_sequence";
    default: return "end_turn";
    }
}

static void coai__an_w_end(coai_reply *r, coai_finish f)
{
    coai__an_block_stop(r);
    if (r->block_ == 0) {            /* an empty answer is still one (empty) text block */
        coai__an_block_start(r, 1);
        coai__an_block_stop(r);
    }
    coai__an_event(r, "message_delta");
    coai_buf_printf(&r->out, ",\"delta\":{\"stop_reason\":\"%s\",\"stop_sequence\":",
                    coai__an_stop_reason(f));
    coai__stop_matched(r, &r->out);
    coai_buf_puts(&r->out, "},\"usage\":");
    coai__an_usage(r, &r->out, 0);
    coai_buf_puts(&r->out, "}\n\n");
    coai__an_event(r, "message_stop");
    coai_buf_puts(&r->out, "}\n\n");
}

static void coai__an_w_body(coai_reply *r, coai_finish f)
{
    coai_buf *o = &r->out;
    int n = 0;
    coai_buf_append(o, r->prefix_.data, r->prefix_.len);
    coai_buf_puts(o, ",\"content\":[");
    if (r->reasoning_.len) {
        coai_buf_puts(o, "{\"type\":\"thinking\",\"thinking\":");
        coai_json_str_append(o, (const char *)r->reasoning_.data, r->reasoning_.len);
        coai_buf_puts(o, ",\"signature\":\"" COAI__AN_SIGNATURE "\"}");
        n++;
    }
    if (r->content_.len || (!n && !r->has_tool_call_)) {
        if (n++) coai_buf_putc(o, ',');
        coai_buf_puts(o, "{\"type\":\"text\",\"text\":");
        coai_json_str_append(o, r->content_.data ? (const char *)r->content_.data : "",
                             r->content_.len);
        coai_buf_putc(o, '}');
    }
    if (r->has_tool_call_) {
        size_t i;
        for (i = 0; i < r->ncalls_; i++) {       /* every call of the batch (held runs) */
            const coai_reply_call *c = &r->calls_[i];
            if (n++) coai_buf_putc(o, ',');
            coai_buf_puts(o, "{\"type\":\"tool_use\",\"id\":");
            coai_json_str_append(o, c->call_id.ptr, c->call_id.len);
            coai_buf_puts(o, ",\"name\":");
            coai_json_str_append(o, c->tool.ptr, c->tool.len);
            coai_buf_puts(o, ",\"input\":");
            /* the args are JSON objects written by coai_exec_map (or Cursor's MCP args) */
            if (c->args.len) coai_buf_append(o, c->args.ptr, c->args.len);
            else coai_buf_puts(o, "{}");
            coai_buf_putc(o, '}');
        }
    }
    coai_buf_printf(o, "],\"stop_reason\":\"%s\",\"stop_sequence\":", coai__an_stop_reason(f));
    coai__stop_matched(r, o);
    coai_buf_puts(o, ",\"usage\":");
    coai__an_usage(r, o, 0);
    coai_buf_putc(o, '}');
}

static void coai__an_w_error(coai_reply *r)
{
    coai_buf_puts(&r->out, "event: error\ndata: ");
    coai_error_write_as(&r->out, &r->error, COAI_DIALECT_ANTHROPIC);
    coai_buf_puts(&r->out, "\n\n");
}

static void coai__an_w_keepalive(coai_reply *r)
{
    coai__an_event(r, "ping");
    coai_buf_puts(&r->out, "}\n\n");
}

static const coai__writer coai__an_writer = {
    coai__an_w_init, coai__an_w_begin, coai__an_w_delta, coai__an_w_tool_call,
    coai__an_w_end, coai__an_w_body, coai__an_w_error, coai__an_w_keepalive
};
/* PART:ANTHROPIC impl end */

/* ======================================================================== */
/* PART:RESPONSES impl (OpenAI Responses: parser, exec mapping, writer)      */
/* ======================================================================== */

/* ---- request ---- */

static coai_str coai__rs_view(const coai_buf *b)
{
    coai_str s;
    s.ptr = b->data ? (const char *)b->data : "";
    s.len = b->len;
    return s;
}

static int coai__rs_type_is(const cJSON *o, const char *t)
{
    const cJSON *v = coai__core_get(o, "type");
    return cJSON_IsString(v) && strcmp(v->valuestring, t) == 0;
}

static int coai__rs_in(const char *s, const char *const *list)
{
    size_t i;
    for (i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0) return 1;
    return 0;
}

/* Keep a malloc'ed block until coai_request_free (it frees every pointer in mem_). */
static int coai__rs_keep(coai_request *req, void *p)
{
    if (!p) return -1;
    if (coai_buf_append(&req->mem_, &p, sizeof p)) { free(p); return -1; }
    return 0;
}

/* A request-owned copy of b's bytes as a view. */
static int coai__rs_own(coai_request *req, const coai_buf *b, coai_str *out)
{
    char *p = (char *)coai__req_alloc(req, b->len + 1);
    if (!p || b->err) return -1;
    if (b->len) memcpy(p, b->data, b->len);
    out->ptr = p;
    out->len = b->len;
    return 0;
}

typedef struct coai__rs_parse {
    coai_request *req;
    coai_buf msgs;        /* coai_message structs, copied to request memory at the end */
    coai_buf *items;      /* the store's item list */
    coai_error *err;
    int nomem;
    int trigger;          /* a compaction_trigger item was seen */
} coai__rs_parse;

static coai_message *coai__rs_msg(coai__rs_parse *ps, coai_role role)
{
    coai_message m;
    memset(&m, 0, sizeof m);
    m.role = role;
    if (coai_buf_append(&ps->msgs, &m, sizeof m)) { ps->nomem = 1; return NULL; }
    return (coai_message *)(void *)(ps->msgs.data + ps->msgs.len - sizeof m);
}

/* Content (a string or an array of parts) -> parts of m. where = "input[3]" etc. */
static int coai__rs_content(coai__rs_parse *ps, coai_message *m, const cJSON *content,
                            const char *where, const char *field)
{
    static const char *const text_types[] = { "input_text", "output_text", "text",
                                              "summary_text", "reasoning_text", NULL };
    char p[160];
    const cJSON *part;
    size_t k = 0;
    coai_part *parts;
    if (!content || cJSON_IsNull(content)) return 0;
    if (cJSON_IsString(content)) {
        parts = (coai_part *)coai__req_alloc(ps->req, sizeof *parts);
        if (!parts) { ps->nomem = 1; return -1; }
        parts[0].text = coai__core_jstr(content);
        m->parts = parts;
        m->part_count = 1;
        return 0;
    }
    snprintf(p, sizeof p, "%s.%s", where, field);
    if (!cJSON_IsArray(content))
        return coai__core_bad(ps->err, p, "%s must be a string or an array of parts", p);
    parts = (coai_part *)coai__req_alloc(ps->req,
                                         (size_t)cJSON_GetArraySize(content) * sizeof *parts);
    if (!parts) { ps->nomem = 1; return -1; }
    cJSON_ArrayForEach(part, content) {
        const cJSON *t = coai__core_get(part, "type");
        snprintf(p, sizeof p, "%s.%s[%u].type", where, field, (unsigned)k);
        if (!cJSON_IsObject(part) || !cJSON_IsString(t))
            return coai__core_bad(ps->err, p, "%s must be a string", p);
        if (coai__rs_in(t->valuestring, text_types) || strcmp(t->valuestring, "refusal") == 0) {
            const char *key = strcmp(t->valuestring, "refusal") == 0 ? "refusal" : "text";
            const cJSON *x = coai__core_get(part, key);
            if (!cJSON_IsString(x)) {
                snprintf(p, sizeof p, "%s.%s[%u].%s", where, field, (unsigned)k, key);
                return coai__core_bad(ps->err, p, "%s must be a string", p);
            }
            parts[k].kind = COAI_PART_TEXT;
            parts[k].text = coai__core_jstr(x);
        } else if (strcmp(t->valuestring, "input_image") == 0) {
            const cJSON *u = coai__core_get(part, "image_url");
            if (cJSON_IsObject(u)) u = coai__core_get(u, "url");
            if (!cJSON_IsString(u)) {
                snprintf(p, sizeof p, "%s.%s[%u].image_url", where, field, (unsigned)k);
                return coai__core_bad(ps->err, p, "%s must be a string (file_id images are not "
                                    "supported: send the image as a data: URL)", p);
            }
            parts[k].kind = COAI_PART_IMAGE;
            parts[k].path = coai__req_path(ps->req, "%s.%s[%u].image_url", where, field,
                                           (unsigned)k);
            parts[k].url = coai__core_jstr(u);
        } else {
            return coai__core_bad(ps->err, p, "Unsupported content part type '%s' in %s "
                                "(supported: input_text, output_text, refusal, input_image)",
                                t->valuestring, p);
        }
        k++;
    }
    m->parts = parts;
    m->part_count = k;
    return 0;
}

static int coai__rs_req_str(coai__rs_parse *ps, const cJSON *it, const char *key,
                            const char *where, coai_str *out, int optional)
{
    char p[160];
    const cJSON *v = coai__core_get(it, key);
    if (optional && (!v || cJSON_IsNull(v))) { *out = coai_str_c(""); return 0; }
    if (!cJSON_IsString(v)) {
        snprintf(p, sizeof p, "%s.%s", where, key);
        return coai__core_bad(ps->err, p, "%s must be a string", p);
    }
    *out = coai__core_jstr(v);
    return 0;
}

/* One input item -> neutral messages (and its JSON into the store's list). */
static int coai__rs_item(coai__rs_parse *ps, const cJSON *it, const char *where)
{
    static const char *const roles[] = { "user", "system", "developer", "assistant", NULL };
    /* items of hosted tools the client may send back: nothing Cursor can use */
    static const char *const skipped[] = {
        "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call",
        "tool_search_call", "tool_search_output", "mcp_call", "mcp_list_tools",
        "mcp_approval_request", "mcp_approval_response", "computer_call",
        "computer_call_output", NULL };
    char p[160];
    const cJSON *ty = coai__core_get(it, "type"), *role = coai__core_get(it, "role");
    const char *t;
    coai_message *m;
    if (!cJSON_IsObject(it)) return coai__core_bad(ps->err, where, "%s must be an object", where);
    if (ty && !cJSON_IsString(ty)) {
        snprintf(p, sizeof p, "%s.type", where);
        return coai__core_bad(ps->err, p, "%s must be a string", p);
    }
    t = ty ? ty->valuestring : "message";
    if (ps->items) {
        char *s = cJSON_PrintUnformatted(it);
        if (!s) { ps->nomem = 1; return -1; }
        if (ps->items->len) coai_buf_putc(ps->items, ',');
        coai_buf_puts(ps->items, s);
        free(s);
    }
    if (strcmp(t, "message") == 0) {
        snprintf(p, sizeof p, "%s.role", where);
        if (!cJSON_IsString(role) || !coai__rs_in(role->valuestring, roles))
            return coai__core_bad(ps->err, p, "%s must be one of 'user', 'system', 'developer', "
                                "'assistant'", p);
        m = coai__rs_msg(ps, strcmp(role->valuestring, "user") == 0 ? COAI_ROLE_USER
                             : strcmp(role->valuestring, "assistant") == 0 ? COAI_ROLE_ASSISTANT
                             : COAI_ROLE_SYSTEM);
        if (!m) return -1;
        return coai__rs_content(ps, m, coai__core_get(it, "content"), where, "content");
    }
    if (strcmp(t, "function_call") == 0 || strcmp(t, "custom_tool_call") == 0
        || strcmp(t, "local_shell_call") == 0) {
        coai_call *c = (coai_call *)coai__req_alloc(ps->req, sizeof *c);
        if (!c) { ps->nomem = 1; return -1; }
        if (coai__rs_req_str(ps, it, "call_id", where, &c->id, 0)) return COAI_ERR_INVALID;
        if (t[0] == 'l') {
            const cJSON *a = coai__core_get(it, "action");
            char *s = cJSON_IsObject(a) ? cJSON_PrintUnformatted(a) : NULL;
            if (cJSON_IsObject(a) && coai__rs_keep(ps->req, s)) { ps->nomem = 1; return -1; }
            c->name = coai_str_c("local_shell");
            c->args = coai_str_c(s ? s : "{}");
        } else {
            if (coai__rs_req_str(ps, it, "name", where, &c->name, 0)) return COAI_ERR_INVALID;
            if (coai__rs_req_str(ps, it, t[0] == 'f' ? "arguments" : "input", where, &c->args,
                                 t[0] == 'f'))
                return COAI_ERR_INVALID;
            if (t[0] == 'f' && !c->args.len) c->args = coai_str_c("{}");
        }
        m = coai__rs_msg(ps, COAI_ROLE_ASSISTANT);
        if (!m) return -1;
        m->calls = c;
        m->call_count = 1;
        return 0;
    }
    if (strcmp(t, "function_call_output") == 0 || strcmp(t, "custom_tool_call_output") == 0
        || strcmp(t, "local_shell_call_output") == 0) {
        coai_str id;
        if (coai__rs_req_str(ps, it, "call_id", where, &id, 0)) return COAI_ERR_INVALID;
        m = coai__rs_msg(ps, COAI_ROLE_TOOL);
        if (!m) return -1;
        m->tool_call_id = id;
        if (!coai__core_get(it, "output") || cJSON_IsNull(coai__core_get(it, "output"))) {
            snprintf(p, sizeof p, "%s.output", where);
            return coai__core_bad(ps->err, p, "%s is required", p);
        }
        return coai__rs_content(ps, m, coai__core_get(it, "output"), where, "output");
    }
    if (strcmp(t, "reasoning") == 0) {
        /* Reasoning sent back: thinking, never prompt text (the encrypted content is
         * OpenAI's own and means nothing to Cursor). */
        const cJSON *s = coai__core_get(it, "summary"), *x;
        size_t k = 0;
        coai_part *parts;
        if (s && !cJSON_IsNull(s) && !cJSON_IsArray(s)) {
            snprintf(p, sizeof p, "%s.summary", where);
            return coai__core_bad(ps->err, p, "%s must be an array", p);
        }
        m = coai__rs_msg(ps, COAI_ROLE_ASSISTANT);
        if (!m) return -1;
        if (!cJSON_IsArray(s) || !cJSON_GetArraySize(s)) return 0;
        parts = (coai_part *)coai__req_alloc(ps->req, (size_t)cJSON_GetArraySize(s) * sizeof *parts);
        if (!parts) { ps->nomem = 1; return -1; }
        cJSON_ArrayForEach(x, s) {
            const cJSON *tx = coai__core_get(x, "text");
            if (!cJSON_IsString(tx)) continue;
            parts[k].kind = COAI_PART_THINKING;
            parts[k++].text = coai__core_jstr(tx);
        }
        m->parts = parts;
        m->part_count = k;
        return 0;
    }
    if (strcmp(t, "compaction_trigger") == 0) {  /* Codex's remote compaction (v2) */
        ps->trigger = 1;
        return 0;
    }
    if (strcmp(t, "compaction") == 0 || strcmp(t, "compaction_summary") == 0) {
        /* a summary this proxy wrote: a user message; anyone else's is opaque */
        const cJSON *ec = coai__core_get(it, "encrypted_content");
        size_t tl = sizeof COAI_RESPONSES_COMPACT_TAG - 1, il;
        coai_part *pt;
        char *txt;
        snprintf(p, sizeof p, "%s.encrypted_content", where);
        if (!cJSON_IsString(ec) || strncmp(ec->valuestring, COAI_RESPONSES_COMPACT_TAG, tl))
            return coai__core_bad(ps->err, p, "%s is not a summary cursor-oai wrote (another "
                                "server's compaction is encrypted for that server only): "
                                "start a new session, or send the conversation itself", p);
        il = sizeof COAI_RESPONSES_SUMMARY_INTRO - 1;
        m = coai__rs_msg(ps, COAI_ROLE_USER);
        pt = (coai_part *)coai__req_alloc(ps->req, sizeof *pt);
        txt = (char *)coai__req_alloc(ps->req, il + strlen(ec->valuestring + tl) + 1);
        if (!m || !pt || !txt) { ps->nomem = 1; return -1; }
        memcpy(txt, COAI_RESPONSES_SUMMARY_INTRO, il);
        strcpy(txt + il, ec->valuestring + tl);
        pt->text.ptr = txt;
        pt->text.len = strlen(txt);
        m->parts = pt;
        m->part_count = 1;
        return 0;
    }
    if (coai__rs_in(t, skipped)) return 0;
    snprintf(p, sizeof p, "%s.type", where);
    if (strcmp(t, "item_reference") == 0)
        return coai__core_bad(ps->err, p, "item_reference is not supported: send the items "
                            "themselves, or use previous_response_id");
    return coai__core_bad(ps->err, p, "Unsupported input item type '%s' in %s", t, p);
}

/* Tools: function and custom tools become coai_tools; the rest is accepted and left out. */
static int coai__rs_tools(coai__rs_parse *ps, cJSON *root, const cJSON *tools)
{
    static const char *const hosted[] = {
        "namespace", "web_search", "web_search_preview", "web_search_preview_2025_03_11",
        "web_search_2025_08_26", "tool_search", "file_search", "image_generation",
        "code_interpreter", "mcp", "computer_use_preview", "computer_use", "local_shell",
        "shell", "apply_patch", NULL };
    coai_request *req = ps->req;
    const cJSON *t;
    cJSON *keep = NULL;
    char p[96];
    int i = 0, count;
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return coai__core_bad(ps->err, "tools", "tools must be an array");
    count = cJSON_GetArraySize(tools);
    if (count > COAI_MAX_TOOLS)
        return coai__core_bad(ps->err, "tools", "At most %d tools are supported", COAI_MAX_TOOLS);
    if (count > 0) {
        req->tools = (coai_tool *)calloc((size_t)count, sizeof *req->tools);
        if (!req->tools) { ps->nomem = 1; return -1; }
    }
    cJSON_ArrayForEach(t, tools) {
        const cJSON *ty = coai__core_get(t, "type"), *name = coai__core_get(t, "name");
        const cJSON *d = coai__core_get(t, "description");
        coai_tool *o;
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(t) || !cJSON_IsString(ty))
            return coai__core_bad(ps->err, p, "%s must be an object with a string 'type'", p);
        i++;
        if (strcmp(ty->valuestring, "function") && strcmp(ty->valuestring, "custom")) {
            if (coai__rs_in(ty->valuestring, hosted)) continue;
            snprintf(p, sizeof p, "tools[%d].type", i - 1);
            return coai__core_bad(ps->err, p, "Unsupported tool type '%s' in %s",
                                ty->valuestring, p);
        }
        snprintf(p, sizeof p, "tools[%d].name", i - 1);
        if (!cJSON_IsString(name)) return coai__core_bad(ps->err, p, "%s is required", p);
        if (!coai__name_ok(name->valuestring, 64))
            return coai__core_bad(ps->err, p, "%s must match ^[a-zA-Z0-9_-]{1,64}$", p);
        snprintf(p, sizeof p, "tools[%d].description", i - 1);
        if (d && !cJSON_IsNull(d) && !cJSON_IsString(d))
            return coai__core_bad(ps->err, p, "%s must be a string", p);
        o = &req->tools[req->tool_count++];
        o->name = coai__core_jstr(name);
        o->description = coai__core_jstr(d);
        if (ty->valuestring[0] == 'f') {
            const cJSON *params = coai__core_get(t, "parameters");
            snprintf(p, sizeof p, "tools[%d].parameters", i - 1);
            if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
                return coai__core_bad(ps->err, p, "%s must be an object", p);
            o->parameters = cJSON_IsObject(params) ? params : NULL;
        } else {
            /* A custom (freeform) tool: Cursor sees a function with one string "input";
             * its grammar, if any, goes into the description. */
            const cJSON *f = coai__core_get(t, "format");
            const cJSON *def = coai__core_get(f, "definition"), *syn = coai__core_get(f, "syntax");
            coai_buf db = { 0 };
            cJSON *schema, *props, *in;
            coai_str ds;
            snprintf(p, sizeof p, "tools[%d].format", i - 1);
            if (f && !cJSON_IsNull(f) && !cJSON_IsObject(f))
                return coai__core_bad(ps->err, p, "%s must be an object", p);
            coai__core_custom_desc(&db, o->description, def, syn);
            if (coai__rs_own(req, &db, &ds)) { coai_buf_free(&db); ps->nomem = 1; return -1; }
            coai_buf_free(&db);
            o->description = ds;
            o->freeform = 1;
            if (!keep) {
                keep = cJSON_CreateArray();
                if (!keep || !cJSON_AddItemToObject(root, "\x01coai_custom_schemas", keep)) {
                    cJSON_Delete(keep);
                    ps->nomem = 1;
                    return -1;
                }
            }
            schema = cJSON_CreateObject();
            if (!schema || !cJSON_AddItemToArray(keep, schema)) { cJSON_Delete(schema); ps->nomem = 1; return -1; }
            if (!cJSON_AddStringToObject(schema, "type", "object")
                || !(props = cJSON_AddObjectToObject(schema, "properties"))
                || !(in = cJSON_AddObjectToObject(props, "input"))
                || !cJSON_AddStringToObject(in, "type", "string")
                || !cJSON_AddItemToObject(schema, "required", cJSON_CreateStringArray(
                       (const char *const[]){ "input" }, 1))) {
                ps->nomem = 1;
                return -1;
            }
            o->parameters = schema;
        }
    }
    if (!req->tool_count) { free(req->tools); req->tools = NULL; }
    return 0;
}

static int coai__rs_echo(coai_buf *echo, const cJSON *root, const char *key)
{
    const cJSON *v = coai__core_get(root, key);
    char *s;
    if (!v) return 0;
    s = cJSON_PrintUnformatted(v);
    if (!s) return -1;
    coai_buf_putc(echo, ',');
    coai_json_str_append(echo, key, strlen(key));
    coai_buf_putc(echo, ':');
    coai_buf_puts(echo, s);
    free(s);
    return echo->err ? -1 : 0;
}

int coai_responses_previous_id(const char *body, size_t n, char *out, size_t cap)
{
    coai_error e;
    int rc;
    cJSON *root = NULL;
    const cJSON *v;
    int seen = 0;
    coai__json_body(body, n, &root, &e);
    v = coai__core_get(root, "previous_response_id");
    if (cap) out[0] = 0;
    if (root) {
        const cJSON *m;
        for (m = root->child; m; m = m->next)
            if (m->string && strcmp(m->string, "previous_response_id") == 0) seen++;
    }
    if (seen > 1) rc = -2;             /* the key twice: which one counts is ambiguous */
    else if (!root || !v || cJSON_IsNull(v)) rc = 0;
    else if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap) rc = -1;
    else { memcpy(out, v->valuestring, strlen(v->valuestring) + 1); rc = out[0] ? 1 : 0; }
    cJSON_Delete(root);
    return rc;
}

void coai_responses_request_free(coai_responses_request *rr)
{
    coai_request_free(&rr->req);
    coai_buf_free(&rr->items);
    coai_buf_free(&rr->echo);
    memset(rr, 0, sizeof *rr);
}

static int coai__rs_parse_body(coai_responses_request *rr, const char *body, size_t n,
                               coai_str history, int compact, coai_error *err);

int coai_responses_request_parse(coai_responses_request *rr, const char *body, size_t n,
                                 coai_str history, coai_error *err)
{
    return coai__rs_parse_body(rr, body, n, history, 0, err);
}

int coai_responses_compact_parse(coai_responses_request *rr, const char *body, size_t n,
                                 coai_str history, coai_error *err)
{
    return coai__rs_parse_body(rr, body, n, history, 2, err);
}

static int coai__rs_parse_body(coai_responses_request *rr, const char *body, size_t n,
                               coai_str history, int compact, coai_error *err)
{
    static const char *const efforts[] = { "none", "minimal", "low", "medium", "high", "xhigh",
                                           NULL };
    static const char *const echoed[] = { "instructions", "metadata", "previous_response_id",
                                          "store", "tool_choice", "parallel_tool_calls",
                                          "reasoning", "max_output_tokens", "prompt_cache_key",
                                          "temperature", "top_p", "text", "truncation", "user",
                                          "service_tier", "tools", NULL };
    coai_request *req = &rr->req;
    coai__rs_parse ps;
    cJSON *root, *hist = NULL;
    const cJSON *v, *input, *it;
    int rc = COAI_ERR_INVALID, i;
    char p[64];
    memset(rr, 0, sizeof *rr);
    memset(err, 0, sizeof *err);
    memset(&ps, 0, sizeof ps);
    ps.req = req;
    ps.items = &rr->items;
    ps.err = err;
    rc = coai__json_body(body, n, &root, err);   /* one JSON object, or a 400 */
    if (rc < 0) return rc;
    req->root_ = root;
    rc = COAI_ERR_INVALID;
    req->thinking = -1;
    rr->store = 1;
    v = coai__core_get(root, "model");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v)) {
        coai__core_bad(err, "model", "model must be a string");
        goto fail;
    }
    req->model = coai__core_jstr(v);
    if (req->model.len == 0) req->model = coai_str_c("auto");
#define COAI__RS_TYPED(key, test, what)                                                     \
    v = coai__core_get(root, key);                                                          \
    if (v && !cJSON_IsNull(v) && !(test)) {                                               \
        coai__core_bad(err, key, "%s must be %s", key, what);                               \
        goto fail;                                                                        \
    }
    COAI__RS_TYPED("stream", cJSON_IsBool(v), "a boolean")
    req->stream = cJSON_IsTrue(v);
    COAI__RS_TYPED("store", cJSON_IsBool(v), "a boolean")
    if (cJSON_IsFalse(v)) rr->store = 0;
    COAI__RS_TYPED("background", cJSON_IsFalse(v), "false (background responses are not "
                   "supported)")
    COAI__RS_TYPED("instructions", cJSON_IsString(v), "a string")
    COAI__RS_TYPED("parallel_tool_calls", cJSON_IsBool(v), "a boolean")
    COAI__RS_TYPED("prompt_cache_key", cJSON_IsString(v), "a string")
    req->conversation_key = coai__core_jstr(v);
    COAI__RS_TYPED("previous_response_id", cJSON_IsString(v), "a string")
    rr->previous_response_id = coai__core_jstr(v);
    COAI__RS_TYPED("temperature", cJSON_IsNumber(v), "a number")
    COAI__RS_TYPED("top_p", cJSON_IsNumber(v), "a number")
    COAI__RS_TYPED("user", cJSON_IsString(v), "a string")
    COAI__RS_TYPED("text", cJSON_IsObject(v), "an object")
    {
        /* text.format json_object / json_schema: emulated like Chat's response_format */
        const cJSON *fm = coai__core_get(v, "format"), *ft = coai__core_get(fm, "type");
        if (fm && !cJSON_IsNull(fm) && !cJSON_IsObject(fm)) {
            coai__core_bad(err, "text.format", "Invalid type for 'text.format': expected an "
                         "object, but got %s instead.", cJSON_IsString(fm) ? "a string"
                         : cJSON_IsArray(fm) ? "an array" : "a scalar");
            goto fail;
        }
        if (cJSON_IsObject(fm) && !cJSON_IsString(ft)) {
            coai__core_bad(err, "text.format.type", "Missing required parameter: "
                         "'text.format.type' (a string: 'text', 'json_object' or "
                         "'json_schema').");
            goto fail;
        }
        if (cJSON_IsString(ft) && strcmp(ft->valuestring, "text") != 0
            && strcmp(ft->valuestring, "json_object") != 0
            && strcmp(ft->valuestring, "json_schema") != 0) {
            /* OpenAI's answer to any other type (a 400 before the run, not a plain answer) */
            coai__core_bad(err, "text.format.type", "Invalid value: '%.64s'. Supported values "
                         "are: 'text', 'json_object', and 'json_schema'.", ft->valuestring);
            err->code = "invalid_value";
            goto fail;
        }
        if (cJSON_IsString(ft) && strcmp(ft->valuestring, "json_schema") == 0
            && !cJSON_IsObject(coai__core_get(fm, "schema"))) {
            /* OpenAI requires the schema; without it the answer could never be checked */
            coai__core_bad(err, "text.format.schema", "text.format.schema must be an object "
                         "(the JSON schema) when text.format.type is 'json_schema'");
            goto fail;
        }
        if (cJSON_IsString(ft) && (strcmp(ft->valuestring, "json_object") == 0
                                   || strcmp(ft->valuestring, "json_schema") == 0)) {
            const cJSON *sch = coai__core_get(fm, "schema");
            req->response_json = 1;
            req->response_schema = cJSON_IsObject(sch) ? sch : NULL;
        }
    }
    COAI__RS_TYPED("conversation", 0, "absent (the Conversations API is not supported; use "
                   "previous_response_id or send the items)")
    COAI__RS_TYPED("prompt", 0, "absent (stored prompt templates are not supported)")
    COAI__RS_TYPED("max_output_tokens", cJSON_IsNumber(v) && v->valuedouble >= 1
                   && v->valuedouble <= 1e9 && v->valuedouble == (double)(int64_t)v->valuedouble,
                   "a positive integer")
    if (v && cJSON_IsNumber(v)) req->max_tokens = (int64_t)v->valuedouble;
    COAI__RS_TYPED("include", cJSON_IsArray(v), "an array of strings")
    if (cJSON_IsArray(v)) {
        i = 0;
        cJSON_ArrayForEach(it, v) {
            snprintf(p, sizeof p, "include[%d]", i++);
            if (!cJSON_IsString(it)) { coai__core_bad(err, p, "%s must be a string", p); goto fail; }
        }
    }
    COAI__RS_TYPED("metadata", cJSON_IsObject(v), "an object")
    if (cJSON_IsObject(v)) {
        i = 0;
        cJSON_ArrayForEach(it, v) {
            if (++i > 16 || !cJSON_IsString(it) || strlen(it->string) > 64
                || strlen(it->valuestring) > 512) {
                coai__core_bad(err, "metadata", "metadata takes at most 16 string values (keys "
                             "up to 64 characters, values up to 512)");
                goto fail;
            }
        }
    }
    COAI__RS_TYPED("reasoning", cJSON_IsObject(v), "an object")
    if (cJSON_IsObject(v)) {
        const cJSON *ef = coai__core_get(v, "effort"), *su = coai__core_get(v, "summary");
        if (ef && !cJSON_IsNull(ef) && !(cJSON_IsString(ef) && coai__rs_in(ef->valuestring, efforts))) {
            coai__core_bad(err, "reasoning.effort", "reasoning.effort must be one of 'none', "
                         "'minimal', 'low', 'medium', 'high', 'xhigh'");
            goto fail;
        }
        if (su && !cJSON_IsNull(su) && !cJSON_IsString(su)) {
            coai__core_bad(err, "reasoning.summary", "reasoning.summary must be a string");
            goto fail;
        }
        if (cJSON_IsString(ef)) req->thinking = strcmp(ef->valuestring, "none") != 0;
    }
#undef COAI__RS_TYPED
    for (i = 0; echoed[i]; i++)
        if (coai__rs_echo(&rr->echo, root, echoed[i])) { ps.nomem = 1; goto nomem; }
    /* the tool fields a Response object always carries (OpenAI's defaults when not given) */
    if (!coai__core_get(root, "tools")) coai_buf_puts(&rr->echo, ",\"tools\":[]");
    if (!coai__core_get(root, "tool_choice")) coai_buf_puts(&rr->echo, ",\"tool_choice\":\"auto\"");
    if (!coai__core_get(root, "parallel_tool_calls"))
        coai_buf_puts(&rr->echo, ",\"parallel_tool_calls\":true");
    /* instructions: the system message; not carried over by previous_response_id */
    v = coai__core_get(root, "instructions");
    if (cJSON_IsString(v) && v->valuestring[0]) {
        coai_message *m = coai__rs_msg(&ps, COAI_ROLE_SYSTEM);
        coai_part *pt = (coai_part *)coai__req_alloc(req, sizeof *pt);
        if (!m || !pt) { ps.nomem = 1; goto nomem; }
        pt->text = coai__core_jstr(v);
        m->parts = pt;
        m->part_count = 1;
    }
    if (history.len) {
        hist = cJSON_ParseWithLength(history.ptr, history.len);
        if (!cJSON_IsArray(hist)) {
            cJSON_Delete(hist);
            coai__core_bad(err, "previous_response_id", "The stored previous response could not "
                         "be read");
            goto fail;
        }
        /* the history tree must live as long as the views into it */
        if (!cJSON_AddItemToObject(root, "\x01coai_history", hist)) {
            cJSON_Delete(hist);
            ps.nomem = 1;
            goto nomem;
        }
        i = 0;
        cJSON_ArrayForEach(it, hist) {
            snprintf(p, sizeof p, "previous_response_id[%d]", i++);
            if ((rc = coai__rs_item(&ps, it, p)) < 0) goto check;
        }
    }
    input = coai__core_get(root, "input");
    if (cJSON_IsString(input)) {
        coai_message *m = coai__rs_msg(&ps, COAI_ROLE_USER);
        coai_part *pt = (coai_part *)coai__req_alloc(req, sizeof *pt);
        if (!m || !pt) { ps.nomem = 1; goto nomem; }
        pt->text = coai__core_jstr(input);
        m->parts = pt;
        m->part_count = 1;
        if (rr->items.len) coai_buf_putc(&rr->items, ',');
        coai_buf_puts(&rr->items, "{\"type\":\"message\",\"role\":\"user\",\"content\":"
                                  "[{\"type\":\"input_text\",\"text\":");
        coai_json_str_append(&rr->items, input->valuestring, strlen(input->valuestring));
        coai_buf_puts(&rr->items, "}]}");
    } else if (cJSON_IsArray(input)) {
        i = 0;
        cJSON_ArrayForEach(it, input) {
            snprintf(p, sizeof p, "input[%d]", i++);
            if ((rc = coai__rs_item(&ps, it, p)) < 0) goto check;
        }
    } else if (input && !cJSON_IsNull(input)) {
        coai__core_bad(err, "input", "input must be a string or an array of items");
        goto fail;
    }
    if (!ps.msgs.len || !(input && !cJSON_IsNull(input))) {
        if (!(input && !cJSON_IsNull(input)) && !history.len) {
            coai__core_bad(err, "input", "input is required");
            goto fail;
        }
    }
    if ((rc = coai__rs_tools(&ps, root, coai__core_get(root, "tools"))) < 0) goto check;
    rc = COAI_ERR_INVALID;
    v = coai__core_get(root, "tool_choice");
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "none") == 0) req->tool_choice = COAI_TOOL_CHOICE_NONE;
        else if (strcmp(v->valuestring, "required") == 0) req->tool_choice = COAI_TOOL_CHOICE_ANY;
        else if (strcmp(v->valuestring, "auto") != 0) {
            coai__core_bad(err, "tool_choice", "tool_choice must be 'none', 'auto', 'required' "
                         "or an object");
            goto fail;
        }
    } else if (cJSON_IsObject(v)) {
        if (coai__rs_type_is(v, "function") || coai__rs_type_is(v, "custom")) {
            if (!cJSON_IsString(coai__core_get(v, "name"))) {
                coai__core_bad(err, "tool_choice.name", "tool_choice.name must be a string");
                goto fail;
            }
            req->tool_choice = COAI_TOOL_CHOICE_TOOL;
            req->tool_choice_name = coai__core_jstr(coai__core_get(v, "name"));
        } else if (!cJSON_IsString(coai__core_get(v, "type"))) {
            coai__core_bad(err, "tool_choice.type", "tool_choice.type must be a string");
            goto fail;
        }   /* allowed_tools and hosted tool choices: the model decides */
    } else if (v && !cJSON_IsNull(v)) {
        coai__core_bad(err, "tool_choice", "tool_choice must be a string or an object");
        goto fail;
    }
    if (compact || ps.trigger) {
        /* compaction: one more user message asking for the summary */
        coai_message *m = coai__rs_msg(&ps, COAI_ROLE_USER);
        coai_part *pt = (coai_part *)coai__req_alloc(req, sizeof *pt);
        if (!m || !pt) { ps.nomem = 1; goto nomem; }
        pt->text = coai_str_c(COAI_RESPONSES_COMPACT_PROMPT);
        m->parts = pt;
        m->part_count = 1;
        rr->compact = compact ? compact : 1;
    }
    {
        coai_message *ms = (coai_message *)coai__req_alloc(req, ps.msgs.len);
        if (!ms || ps.msgs.err) { ps.nomem = 1; goto nomem; }
        if (ps.msgs.len) memcpy(ms, ps.msgs.data, ps.msgs.len);
        req->messages = ms;
        req->message_count = ps.msgs.len / sizeof *ms;
    }
    coai_buf_free(&ps.msgs);
    if ((rc = coai__tool_choice_check(req, "tool_choice", err)) != 0) goto fail;
    if (rr->compact) {              /* a summary, in one answer: no tools */
        free(req->tools);
        req->tools = NULL;
        req->tool_count = 0;
        req->tools_disabled = 1;
        req->tool_choice = COAI_TOOL_CHOICE_NONE;
        if (rr->compact == 2) { req->stream = 0; rr->store = 0; }
    }
    if (rr->items.err || rr->echo.err || coai__request_finish(req)) goto nomem;
    req->dialect = COAI_DIALECT_RESPONSES;
    return 0;
check:
    if (!ps.nomem) goto fail;
nomem:
    rc = COAI_ERR_NOMEM;
    coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
fail:
    coai_buf_free(&ps.msgs);
    coai_responses_request_free(rr);
    return rc;
}

/* The dialect table's parser: the neutral request alone (no history, nothing echoed). */
static int coai__rs_parse_plain(coai_request *req, const char *body, size_t n, coai_error *err)
{
    coai_responses_request rr;
    coai_str none = { "", 0 };
    int rc = coai_responses_request_parse(&rr, body, n, none, err);
    memset(req, 0, sizeof *req);
    if (rc < 0) return rc;
    *req = rr.req;
    coai_buf_free(&rr.items);
    coai_buf_free(&rr.echo);
    return 0;
}

/* ---- exec mapping ---- */

static const coai_tool *coai__rs_tool(const coai_tool *tools, size_t count, const char *name,
                                      size_t *idx)
{
    size_t i;
    for (i = 0; i < count; i++)
        if (coai_str_eq(tools[i].name, name)) { *idx = i; return &tools[i]; }
    return NULL;
}

/* The shell tool Codex offers, as a tool index and its argument style:
 * 1 exec_command {cmd, workdir}, 2 shell_command {command, workdir},
 * 3 shell {command: ["bash","-lc",cmd], workdir} (array schema), 0 none. */
static int coai__rs_shell(const coai_tool *tools, size_t count, size_t *idx)
{
    const coai_tool *t;
    if (coai__rs_tool(tools, count, "exec_command", idx)) return 1;
    if (coai__rs_tool(tools, count, "shell_command", idx)) return 2;
    if ((t = coai__rs_tool(tools, count, "shell", idx)) != NULL) {
        const cJSON *c = coai__core_get(coai__core_get(t->parameters, "properties"), "command");
        if (coai__rs_type_is(c, "array")) return 3;
    }
    return 0;
}

/* cwd: Cursor's working directory for the command. Its own workspace (the proxy's, which
 * says nothing about where the client runs) is left out so the client uses its own cwd. */
static int coai__rs_shell_args(coai_buf *b, int style, coai_str cmd, coai_str cwd,
                               coai_str workspace)
{
    if (cwd.len == workspace.len && (!cwd.len || memcmp(cwd.ptr, workspace.ptr, cwd.len) == 0))
        cwd.len = 0;
    coai_buf_reset(b);
    if (style == 1) {
        coai_buf_putc(b, '{');
        coai__core_arg(b, "cmd", cmd);
    } else if (style == 2) {
        coai_buf_putc(b, '{');
        coai__core_arg(b, "command", cmd);
    } else {
        coai_buf_puts(b, "{\"command\":[\"bash\",\"-lc\",");
        coai_json_str_append(b, cmd.ptr, cmd.len);
        coai_buf_putc(b, ']');
    }
    if (cwd.len) coai__core_arg(b, "workdir", cwd);
    coai_buf_putc(b, '}');
    return b->err ? -1 : 1;
}

/* The most content one argument of the shell fallback carries (Linux: 128 KiB each). */
#define COAI__RS_ARG_CHUNK (96u * 1024u)
/* The bytes of a write one call of a one-string shell tool carries when the write is
 * split: 64 KiB, 87,384 as base64, so the command stays near 86 KiB, well under Linux's
 * 128 KiB for one argument (MAX_ARG_STRLEN) with the script and the `bash -lc` around it. */
#ifndef COAI_WRITE_PART_BYTES
#define COAI_WRITE_PART_BYTES (64u * 1024u)
#endif

/* How many calls a split write of len bytes takes (one at least) */
static unsigned coai__write_parts(size_t len)
{
    size_t n = (len + COAI_WRITE_PART_BYTES - 1) / COAI_WRITE_PART_BYTES;
    return n ? (unsigned)n : 1u;
}

/* Would `printf '%s' 'content' > 'path'` pass one argument's limit? */
static int coai__rs_write_fits(coai_str path, coai_str content)
{
    size_t i, q = content.len + path.len * 4 + 256;
    for (i = 0; i < content.len; i++)
        if (content.ptr[i] == '\'') q += 3;
    return q <= COAI__RS_ARG_CHUNK;
}

/* POSIX cksum of p: CRC-32 (polynomial 0x04C11DB7, most significant bit first) over the
 * bytes, then over the length (least significant byte first, no more bytes than it
 * needs), complemented: the first number `cksum < FILE` prints, the second being n. */
static uint32_t coai__cksum(const unsigned char *p, size_t n)
{
    uint32_t t[256], c;
    size_t i;
    unsigned j;
    for (i = 0; i < 256; i++) {
        c = (uint32_t)i << 24;
        for (j = 0; j < 8; j++) c = c & 0x80000000u ? (c << 1) ^ 0x04C11DB7u : c << 1;
        t[i] = c;
    }
    c = 0;
    for (i = 0; i < n; i++) c = (c << 8) ^ t[(c >> 24) ^ p[i]];
    for (i = n; i; i >>= 8) c = (c << 8) ^ t[(c >> 24) ^ (i & 0xff)];
    return ~c;
}

/* The command of call k (0-based) of n that a split write makes. Each call decodes its
 * part (base64: any bytes) into a staging directory beside the target and renames it into
 * place there; whichever call finds every part present (the last one when the client runs
 * them in order, any one when it runs them at once) takes the directory's lock, joins the
 * parts and renames the whole file onto the target: the target is never half-written.
 * A call that fails marks the set failed, and each part already there becomes a mark that
 * its call ran; a call that finds the set failed (before or after writing its part) fails
 * too, the same way; the call that fails with every call's mark present removes the marks
 * and the directory. Failing calls take turns (a mkdir mutex; one whose directory is gone
 * has nothing left to do). So a failed set leaves nothing once every call has run, in
 * order, in reverse or at once (a call the client never runs leaves the others' parts or
 * marks). The directory is named by salt (random bytes the caller chose for this exec,
 * the same for all its calls) and a hash of the exec id and path: another write never
 * meets its parts, and nobody can name it before the calls run. What is already there is
 * not trusted: a staging path that is a symlink, not a directory or not the user's own is
 * refused before anything is written into it (nor does the failure path touch it); every
 * file is written with noclobber (set -C: no existing file is overwritten, no symlink
 * followed to a new one); the joined file must be a regular file, not a symlink, with
 * the POSIX cksum and size of the whole content, or it is not renamed onto the target
 * (a planted or changed part fails the write). No rm -f / -r anywhere: Codex refuses
 * such commands ("rm -f style commands are not permitted"). 0, or -1 for a path no
 * command can carry (coai__sh_path). */
static int coai__rs_write_part(coai_buf *cmd, coai_str exec_id, coai_str path,
                               coai_str content, unsigned k, unsigned n, uint64_t salt)
{
    uint64_t h = 1469598103934665603ULL;     /* FNV-1a over exec id and path */
    const coai_str in[2] = { exec_id, path };
    size_t i, at = (size_t)k * COAI_WRITE_PART_BYTES, len = content.len - at;
    unsigned j, x;
    for (x = 0; x < 2; x++) {
        for (i = 0; i < in[x].len; i++) {
            h ^= (unsigned char)in[x].ptr[i];
            h *= 1099511628211ULL;
        }
        h *= 1099511628211ULL;               /* a separator */
    }
    if (len > COAI_WRITE_PART_BYTES) len = COAI_WRITE_PART_BYTES;
    coai_buf_printf(cmd, "# cursor-oai: write part %u of %u\nset -e\np=", k + 1, n);
    if (coai__sh_path(cmd, path) < 0) return -1;
    coai_buf_printf(cmd, "\nd=$(dirname -- \"$p\")\nmkdir -p -- \"$d\"\n"
                    "s=\"$d/.cursor-oai-write-%016llx%016llx-%u\"\nk=%u\nall=\"",
                    (unsigned long long)salt, (unsigned long long)h, n, k + 1);
    for (j = 1; j <= n; j++) coai_buf_printf(cmd, j > 1 ? " %u" : "%u", j);
    /* the staging directory: made here (mode 700) or found, and used only when it is a
     * directory of this user's own and no symlink */
    coai_buf_puts(cmd, "\"\nmkdir -m 700 -- \"$s\" 2>/dev/null || :\n"
                  "if [ -L \"$s\" ] || [ ! -d \"$s\" ] || [ ! -O \"$s\" ]; then "
                  "echo \"cursor-oai: $s is not a directory of this user's own: not used\" >&2; "
                  "exit 1; fi\nset -C\n");
    /* on failure, one call at a time (the mutex mx; none once the directory is gone):
     * the set is failed, parts present become their calls' marks, this call's mark; the
     * call that finds every mark removes the marks and the directory */
    coai_buf_puts(cmd, "trap 'st=$?; if [ \"$st\" -ne 0 ]; then t=0; "
                  "until mkdir -- \"$s/mx\" 2>/dev/null; do "
                  "[ -d \"$s\" ] && [ \"$t\" -lt 30 ] || exit \"$st\"; t=$((t+1)); sleep 1; "
                  "done; { : > \"$s/failed\"; } 2>/dev/null || :; "
                  "for i in $all; do if [ -e \"$s/$i\" ]; then "
                  "{ : > \"$s/ran$i\"; } 2>/dev/null || :; "
                  "rm -- \"$s/$i\" 2>/dev/null || :; fi; done; "
                  "rm -- \"$s/$k.tmp\" \"$s/all\" 2>/dev/null || :; "
                  "rmdir -- \"$s/lock\" 2>/dev/null || :; "
                  "{ : > \"$s/ran$k\"; } 2>/dev/null || :; ok=1; "
                  "for i in $all; do [ -e \"$s/ran$i\" ] || ok=0; done; "
                  "if [ \"$ok\" = 1 ]; then for i in $all; do rm -- \"$s/ran$i\"; done; "
                  "rm -- \"$s/failed\"; rmdir -- \"$s/mx\" \"$s\" 2>/dev/null || :; "
                  "else rmdir -- \"$s/mx\" 2>/dev/null || :; fi; fi; exit \"$st\"' EXIT\n"
                  "failed() { if [ -e \"$s/failed\" ]; then "
                  "echo \"cursor-oai: another part of this write failed\" >&2; exit 1; fi; }\n"
                  "failed\nprintf '%s' '");
    coai_base64_append(cmd, content.ptr + at, len, 0);
    coai_buf_puts(cmd, "' | base64 -d > \"$s/$k.tmp\"\nmv -- \"$s/$k.tmp\" \"$s/$k\"\nfailed\n"
                  "for i in $all; do [ -e \"$s/$i\" ] || exit 0; done\n"
                  "mkdir -- \"$s/lock\" 2>/dev/null || exit 0\n"
                  "for i in $all; do cat -- \"$s/$i\"; done > \"$s/all\"\n"
                  "if [ -L \"$s/all\" ] || [ ! -f \"$s/all\" ]; then "
                  "echo \"cursor-oai: $s/all is not a regular file: not used\" >&2; exit 1; fi\n"
                  "set -- $(cksum < \"$s/all\")\n");
    coai_buf_printf(cmd, "if [ \"$1 $2\" != \"%lu %lu\" ]; then echo \"cursor-oai: the parts "
                    "joined are not this write's bytes: not used\" >&2; exit 1; fi\n",
                    (unsigned long)coai__cksum((const unsigned char *)content.ptr, content.len),
                    (unsigned long)content.len);
    coai_buf_puts(cmd, "if [ -d \"$p\" ]; then echo \"$p: is a directory\" >&2; exit 1; fi\n"
                  "mv -- \"$s/all\" \"$p\"\n"
                  "for i in $all; do rm -- \"$s/$i\"; done\nrmdir -- \"$s/lock\" \"$s\"");
    return 0;
}

/* Can an apply_patch patch carry this exec as it is? apply_patch reads the patch line by
 * line, and Codex's parser trims each line (Unicode white space) before it looks for a
 * directive (*** Add File:, *** Delete File:, *** Update File:, *** Move to:, *** End
 * Patch, @@): so a path with a line break (LF, or CR, VT, FF, FS/GS/RS, NEL, U+2028/9,
 * which other readers split on) could add directives of its own; any other control byte
 * or white space at either end would change the path; one that starts like a directive
 * (*** or @@) is kept out too. The content goes as "+" lines, one per LF: a line
 * separator other than LF (CR above all) or a NUL in it could be read differently. */
static int coai__rs_patch_text_ok(coai_str s, int is_path)
{
    static const char *const ws[] = { "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xaf",
                                       "\xe2\x81\x9f", "\xe3\x80\x80", NULL };
    const unsigned char *p = (const unsigned char *)s.ptr;
    size_t i, k;
    for (i = 0; i < s.len; i++) {
        if (p[i] == '\n' ? is_path
                         : p[i] == '\r' || p[i] == 0 || p[i] == 0x0b || p[i] == 0x0c
                               || (p[i] >= 0x1c && p[i] <= 0x1e)
                               || (is_path && (p[i] < 0x20 || p[i] == 0x7f)))
            return 0;
        if (p[i] == 0xc2 && i + 1 < s.len && p[i + 1] == 0x85) return 0;            /* NEL */
        if (p[i] == 0xe2 && i + 2 < s.len && p[i + 1] == 0x80
            && (p[i + 2] == 0xa8 || p[i + 2] == 0xa9))
            return 0;                                                    /* U+2028, U+2029 */
    }
    if (!is_path) return 1;
    if (!s.len || p[0] == ' ' || p[s.len - 1] == ' ') return 0;
    if ((s.len >= 3 && !memcmp(p, "***", 3)) || (s.len >= 2 && !memcmp(p, "@@", 2))) return 0;
    for (k = 0; ws[k]; k++) {                      /* Unicode white space at either end */
        size_t n = strlen(ws[k]);
        if (s.len >= n && (!memcmp(p, ws[k], n) || !memcmp(p + s.len - n, ws[k], n)))
            return 0;
    }
    /* U+2000..U+200A at either end */
    if (s.len >= 3 && p[0] == 0xe2 && p[1] == 0x80 && p[2] <= 0x8a) return 0;
    if (s.len >= 3 && p[s.len - 3] == 0xe2 && p[s.len - 2] == 0x80 && p[s.len - 1] <= 0x8a)
        return 0;
    return 1;
}

/* What Cursor is told when a write or delete cannot go into a patch and the client has no
 * shell tool to do it with */
#define COAI__RS_PATCH_REFUSAL "This file cannot be written or deleted here: its path (or " \
    "content) holds a line break, a control character, white space at either end or text " \
    "that starts like a patch directive, which the client's apply_patch would read as " \
    "part of the patch, and the client has no shell tool to do it with instead. Use a " \
    "plain path."

/* A patch that writes content to path: every line "+"-prefixed (the last line gets its
 * newline, as apply_patch writes whole lines). path and content passed
 * coai__rs_patch_text_ok. */
static void coai__rs_add_patch(coai_buf *b, coai_str path, coai_str content)
{
    size_t i = 0;
    coai_buf_puts(b, "*** Begin Patch\n*** Add File: ");
    coai_buf_append(b, path.ptr, path.len);
    coai_buf_putc(b, '\n');
    while (i < content.len) {
        const char *nl = (const char *)memchr(content.ptr + i, '\n', content.len - i);
        size_t e = nl ? (size_t)(nl - content.ptr) : content.len;
        coai_buf_putc(b, '+');
        coai_buf_append(b, content.ptr + i, e - i);
        coai_buf_putc(b, '\n');
        i = e + 1;
    }
    coai_buf_puts(b, "*** End Patch\n");
}

int coai_responses_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                            coai_str workspace, coai_tool_call *tc)
{
    coai_buf cmd = { 0 };
    const coai_tool *ap;
    size_t idx = 0, aidx = 0;
    int style, m, bad = 0, nul;
    if (!tools) count = 0;
    coai_buf_reset(&tc->args);
    tc->refusal = NULL;
    tc->via_shell = 0;
    style = coai__rs_shell(tools, count, &idx);
    switch (ex->kind) {
    case COAI_EXEC_SHELL:
    case COAI_EXEC_SHELL_STREAM:
        if (!style) break;
        tc->tool = idx;
        m = coai__rs_shell_args(&tc->args, style, ex->command, ex->cwd, workspace);
        if (m > 0 && ex->hard_timeout_ms > 0 && ex->hard_timeout_ms < 100000000000ULL
            && tc->args.len && coai__core_get(coai__core_get(tools[idx].parameters, "properties"),
                                            "timeout_ms")) {
            /* Cursor's hard timeout (ShellArgs 14, ms) where Codex's tool takes one */
            tc->args.len--;                                  /* the closing brace */
            coai_buf_printf(&tc->args, ",\"timeout_ms\":%llu}",
                            (unsigned long long)ex->hard_timeout_ms);
            if (tc->args.err) m = -1;
        }
        return m;
    case COAI_EXEC_WRITE:
    case COAI_EXEC_DELETE:
        ap = coai__rs_tool(tools, count, "apply_patch", &aidx);
        if (ap && coai__rs_patch_text_ok(ex->path, 1)
            && (ex->kind != COAI_EXEC_WRITE || coai__rs_patch_text_ok(ex->content, 0))) {
            if (ex->kind == COAI_EXEC_WRITE) {
                coai__rs_add_patch(&cmd, ex->path, ex->content);
            } else {
                coai_buf_puts(&cmd, "*** Begin Patch\n*** Delete File: ");
                coai_buf_append(&cmd, ex->path.ptr, ex->path.len);
                coai_buf_puts(&cmd, "\n*** End Patch\n");
            }
            coai_buf_putc(&tc->args, '{');
            coai__core_arg(&tc->args, "input", coai__rs_view(&cmd));
            coai_buf_putc(&tc->args, '}');
            tc->tool = aidx;
            m = cmd.err || tc->args.err ? -1 : 1;
            coai_buf_free(&cmd);
            return m;
        }
        /* a path or content apply_patch cannot carry as it is (coai__rs_patch_text_ok):
         * the shell, or a refusal */
        if (ex->kind == COAI_EXEC_WRITE && (m = coai_exec_map(ex, tools, count, workspace, tc)))
            return m;
        if (!style) {
            /* no Codex shell: a tool of the exec's role, or any other shell tool */
            size_t sh;
            if ((m = coai_anthropic_exec_map(ex, tools, count, workspace, tc)) != 0
                || (tc->refusal
                    && coai__ro_find(tools, count, COAI__R_SHELL, 0, NULL, &sh, NULL)))
                return m;
            if (ap) tc->refusal = COAI__RS_PATCH_REFUSAL;
            return 0;
        }
        nul = ex->kind == COAI_EXEC_WRITE && ex->content.len
              && memchr(ex->content.ptr, 0, ex->content.len) != NULL;
        if (ex->kind == COAI_EXEC_WRITE
            && ((style != 3 && !coai__rs_write_fits(ex->path, ex->content))
                || (nul && ex->content.len > COAI_WRITE_PART_BYTES))) {
            /* one string per call (exec_command, shell_command), or bytes no argument can
             * carry (a NUL): several calls, each part as base64 */
            size_t n = (ex->content.len + COAI_WRITE_PART_BYTES - 1) / COAI_WRITE_PART_BYTES;
            tc->parts = (unsigned)n;
            if (tc->part >= tc->parts) return -1;
            bad |= coai__rs_write_part(&cmd, ex->exec_id, ex->path, ex->content, tc->part,
                                       tc->parts, tc->salt);
        } else if (ex->kind == COAI_EXEC_DELETE) {
            bad |= coai__delete_cmd(&cmd, ex->path);
        } else if (nul) {
            /* a NUL (no argument can carry it): the bytes as base64, decoded into place */
            coai_buf_puts(&cmd, "mkdir -p -- \"$(dirname -- ");
            bad |= coai__sh_path(&cmd, ex->path);
            coai_buf_puts(&cmd, ")\" && printf '%s' '");
            coai_base64_append(&cmd, ex->content.ptr, ex->content.len, 0);
            coai_buf_puts(&cmd, "' | base64 -d > ");
            bad |= coai__sh_path(&cmd, ex->path);
        } else if (style == 3 && ex->content.len > COAI__RS_ARG_CHUNK) {
            /* Linux takes at most 128 KiB in one argument (MAX_ARG_STRLEN): a bigger file
             * goes as several arguments after the script, printed back to back */
            size_t i = 0;
            coai_buf_puts(&cmd, "mkdir -p -- \"$(dirname -- ");
            bad |= coai__sh_path(&cmd, ex->path);
            coai_buf_puts(&cmd, ")\" && printf '%s' \"$@\" > ");
            bad |= coai__sh_path(&cmd, ex->path);
            if (bad) {
                coai_buf_free(&cmd);
                tc->refusal = COAI__SH_REFUSAL;
                return 0;
            }
            coai_buf_puts(&tc->args, "{\"command\":[\"bash\",\"-lc\",");
            coai_json_str_append(&tc->args, (const char *)cmd.data, cmd.len);
            coai_buf_puts(&tc->args, ",\"cursor-oai-write\"");
            while (i < ex->content.len) {
                size_t n = ex->content.len - i;
                if (n > COAI__RS_ARG_CHUNK) {
                    n = COAI__RS_ARG_CHUNK;     /* never inside a UTF-8 sequence */
                    while (n > 1 && ((unsigned char)ex->content.ptr[i + n] & 0xc0) == 0x80) n--;
                }
                coai_buf_putc(&tc->args, ',');
                coai_json_str_append(&tc->args, ex->content.ptr + i, n);
                i += n;
            }
            coai_buf_putc(&tc->args, ']');
            {
                coai_str cwd = ex->cwd;
                if (cwd.len == workspace.len
                    && (!cwd.len || memcmp(cwd.ptr, workspace.ptr, cwd.len) == 0))
                    cwd.len = 0;
                if (cwd.len) coai__core_arg(&tc->args, "workdir", cwd);
            }
            coai_buf_putc(&tc->args, '}');
            tc->tool = idx;
            tc->via_shell = 1;
            m = cmd.err || tc->args.err ? -1 : 1;
            coai_buf_free(&cmd);
            return m;
        } else {
            /* printf '%s' 'text' > 'path': exact bytes, no heredoc delimiter to collide */
            coai_buf_puts(&cmd, "mkdir -p -- \"$(dirname -- ");
            bad |= coai__sh_path(&cmd, ex->path);
            coai_buf_puts(&cmd, ")\" && printf '%s' ");
            bad |= coai__sh_arg(&cmd, ex->content);
            coai_buf_puts(&cmd, " > ");
            bad |= coai__sh_path(&cmd, ex->path);
        }
        break;
    case COAI_EXEC_READ:
    case COAI_EXEC_LS:
    case COAI_EXEC_GREP:
        if ((m = coai_exec_map(ex, tools, count, workspace, tc)) != 0) return m;
        if (!style) return coai_anthropic_exec_map(ex, tools, count, workspace, tc);
        if (ex->kind == COAI_EXEC_READ) {
            coai_buf_puts(&cmd, "cat -- ");
            bad |= coai__sh_path(&cmd, ex->path);
        } else if (ex->kind == COAI_EXEC_LS) {
            coai_buf_puts(&cmd, "ls -la -- ");
            bad |= coai__sh_path(&cmd, ex->has_path || ex->path.len ? ex->path : workspace.len
                                                                           ? workspace
                                                                           : coai_str_c("."));
        } else {
            /* the pattern and the glob as option arguments (-e, --glob=), the path after -- */
            if (ex->pattern.len) {
                coai_buf_puts(&cmd, "rg -n -e ");
                bad |= coai__sh_arg(&cmd, ex->pattern);
            } else {
                coai_buf_puts(&cmd, "rg --files");
            }
            if (ex->glob.len) {
                coai_buf_putc(&cmd, ' ');
                bad |= coai__sh_opt(&cmd, "--glob=", ex->glob);
            }
            if (ex->path.len) {
                coai_buf_puts(&cmd, " -- ");
                bad |= coai__sh_path(&cmd, ex->path);
            }
        }
        break;
    default:
        return coai_exec_map(ex, tools, count, workspace, tc);
    }
    if (bad) { coai_buf_free(&cmd); tc->refusal = COAI__SH_REFUSAL; return 0; }
    if (!cmd.len) { coai_buf_free(&cmd); return coai_exec_map(ex, tools, count, workspace, tc); }
    tc->tool = idx;
    tc->via_shell = 1;          /* only file execs get here: a shell exec returned above */
    m = cmd.err ? -1 : coai__rs_shell_args(&tc->args, style, coai__rs_view(&cmd), ex->cwd,
                                           workspace);
    coai_buf_free(&cmd);
    return m;
}

/* ---- writer ---- */

#define COAI__RS_NONE 0
#define COAI__RS_REASONING 1
#define COAI__RS_MESSAGE 2

/* The hex of the response id ("resp_<hex>"), for item ids. */
static coai_str coai__rs_hex(const coai_reply *r)
{
    coai_str s = r->o_.completion_id;
    if (s.len > 5 && memcmp(s.ptr, "resp_", 5) == 0) { s.ptr += 5; s.len -= 5; }
    return s;
}

static void coai__rs_item_id(coai_reply *r, coai_buf *b, const char *prefix, int idx)
{
    coai_str h = coai__rs_hex(r);
    coai_buf_putc(b, '"');
    coai_buf_puts(b, prefix);
    coai_buf_append(b, h.ptr, h.len);
    coai_buf_printf(b, "_%d\"", idx);
}

static void coai__rs_ev(coai_reply *r, const char *type)
{
    coai_buf_printf(&r->out, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%lld",
                    type, type, (long long)r->rs_seq_++);
}

static void coai__rs_ev_item(coai_reply *r, const char *type, const char *prefix)
{
    coai__rs_ev(r, type);
    coai_buf_puts(&r->out, ",\"item_id\":");
    coai__rs_item_id(r, &r->out, prefix, r->rs_index_);
    coai_buf_printf(&r->out, ",\"output_index\":%d", r->rs_index_);
}

static int64_t coai__rs_reasoning_tokens(const coai_reply *r, const coai_usage *u)
{
    int64_t n = (int64_t)((r->rs_reason_units_ + 3) / 4);
    if (u->reported) return u->reasoning_tokens;
    return n < u->output_tokens ? n : u->output_tokens;
}

static void coai__rs_usage(const coai_reply *r, coai_buf *b)
{
    coai_usage u;
    coai_reply_usage(r, &u);
    coai_buf_printf(b, "{\"input_tokens\":%lld,\"input_tokens_details\":{\"cached_tokens\":%lld},"
                    "\"output_tokens\":%lld,\"output_tokens_details\":{\"reasoning_tokens\":%lld},"
                    "\"total_tokens\":%lld}", (long long)u.input_tokens,
                    (long long)u.cache_read_tokens, (long long)u.output_tokens,
                    (long long)coai__rs_reasoning_tokens(r, &u),
                    (long long)(u.input_tokens + u.output_tokens));
}

/* The response object. state: 0 in progress, 1 ended (f), 2 failed (r->error). */
static void coai__rs_object(coai_reply *r, coai_buf *b, int state, coai_finish f)
{
    const coai_reply_opts *o = &r->o_;
    const char *status = state == 0 ? "in_progress" : state == 2 ? "failed"
                         : f == COAI_FINISH_LENGTH ? "incomplete" : "completed";
    coai_buf_puts(b, "{\"id\":");
    coai_json_str_append(b, o->completion_id.ptr, o->completion_id.len);
    coai_buf_printf(b, ",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\","
                    "\"model\":", (long long)o->created, status);
    coai_json_str_append(b, o->model.ptr, o->model.len);
    coai_buf_puts(b, ",\"output\":[");
    if (state) coai_buf_append(b, r->rs_items_.data, r->rs_items_.len);
    coai_buf_puts(b, "]");
    if (o->echo.len) coai_buf_append(b, o->echo.ptr, o->echo.len);
    coai_buf_puts(b, ",\"error\":");
    if (state == 2) {
        coai_buf_puts(b, "{\"code\":");
        coai__core_json_cstr(b, r->error.code ? r->error.code : r->error.type);
        coai_buf_puts(b, ",\"message\":");
        coai__core_json_cstr(b, r->error.message);
        coai_buf_putc(b, '}');
    } else {
        coai_buf_puts(b, "null");
    }
    coai_buf_puts(b, ",\"incomplete_details\":");
    coai_buf_puts(b, state == 1 && f == COAI_FINISH_LENGTH ? "{\"reason\":\"max_output_tokens\"}"
                                                           : "null");
    coai_buf_puts(b, ",\"usage\":");
    if (state) coai__rs_usage(r, b);
    else coai_buf_puts(b, "null");
    coai_buf_putc(b, '}');
}

static void coai__rs_w_init(coai_reply *r) { (void)r; }

static void coai__rs_w_begin(coai_reply *r)
{
    coai__rs_ev(r, "response.created");
    coai_buf_puts(&r->out, ",\"response\":");
    coai__rs_object(r, &r->out, 0, COAI_FINISH_STOP);
    coai_buf_puts(&r->out, "}\n\n");
    coai__rs_ev(r, "response.in_progress");
    coai_buf_puts(&r->out, ",\"response\":");
    coai__rs_object(r, &r->out, 0, COAI_FINISH_STOP);
    coai_buf_puts(&r->out, "}\n\n");
}

/* The finished reasoning / message item as JSON (into b). */
static void coai__rs_text_item(coai_reply *r, coai_buf *b, int kind, const coai_buf *text,
                               int idx, const char *status)
{
    const char *t = text->data ? (const char *)text->data : "";
    coai_buf_puts(b, "{\"id\":");
    if (kind == COAI__RS_REASONING) {
        coai__rs_item_id(r, b, "rs_", idx);
        coai_buf_puts(b, ",\"type\":\"reasoning\",\"summary\":[");
        if (text->len) {
            coai_buf_puts(b, "{\"type\":\"summary_text\",\"text\":");
            coai_json_str_append(b, t, text->len);
            coai_buf_putc(b, '}');
        }
        coai_buf_puts(b, "]}");
    } else {
        coai__rs_item_id(r, b, "msg_", idx);
        coai_buf_printf(b, ",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\","
                        "\"content\":[", status);
        if (text->len || strcmp(status, "completed") == 0) {
            coai_buf_puts(b, "{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],"
                             "\"text\":");
            coai_json_str_append(b, t, text->len);
            coai_buf_putc(b, '}');
        }
        coai_buf_puts(b, "]}");
    }
}

static void coai__rs_add_item(coai_reply *r, const coai_buf *item)
{
    if (r->rs_items_.len) coai_buf_putc(&r->rs_items_, ',');
    coai_buf_append(&r->rs_items_, item->data, item->len);
}

/* Close the open reasoning or message item (stream). */
static void coai__rs_close(coai_reply *r)
{
    int k = r->rs_open_;
    coai_buf *text = k == COAI__RS_REASONING ? &r->reasoning_ : &r->content_;
    coai_buf item = { 0 };
    const char *t;
    if (!k) return;
    t = text->data ? (const char *)text->data : "";
    if (k == COAI__RS_REASONING) {
        coai__rs_ev_item(r, "response.reasoning_summary_text.done", "rs_");
        coai_buf_puts(&r->out, ",\"summary_index\":0,\"text\":");
        coai_json_str_append(&r->out, t, text->len);
        coai_buf_puts(&r->out, "}\n\n");
        coai__rs_ev_item(r, "response.reasoning_summary_part.done", "rs_");
        coai_buf_puts(&r->out, ",\"summary_index\":0,\"part\":{\"type\":\"summary_text\","
                               "\"text\":");
        coai_json_str_append(&r->out, t, text->len);
        coai_buf_puts(&r->out, "}}\n\n");
    } else {
        coai__rs_ev_item(r, "response.output_text.done", "msg_");
        coai_buf_puts(&r->out, ",\"content_index\":0,\"logprobs\":[],\"text\":");
        coai_json_str_append(&r->out, t, text->len);
        coai_buf_puts(&r->out, "}\n\n");
        coai__rs_ev_item(r, "response.content_part.done", "msg_");
        coai_buf_puts(&r->out, ",\"content_index\":0,\"part\":{\"type\":\"output_text\","
                               "\"annotations\":[],\"logprobs\":[],\"text\":");
        coai_json_str_append(&r->out, t, text->len);
        coai_buf_puts(&r->out, "}}\n\n");
    }
    /* not r->tmp_: the text being emitted may live there */
    coai__rs_text_item(r, &item, k, text, r->rs_index_, "completed");
    coai__rs_ev(r, "response.output_item.done");
    coai_buf_printf(&r->out, ",\"output_index\":%d,\"item\":", r->rs_index_);
    coai_buf_append(&r->out, item.data, item.len);
    coai_buf_puts(&r->out, "}\n\n");
    coai__rs_add_item(r, &item);
    if (item.err) r->out.err = 1;
    coai_buf_free(&item);
    coai_buf_reset(text);
    r->rs_open_ = COAI__RS_NONE;
    r->rs_index_++;
}

/* Compaction: the summary (the answer's text) as one "compaction" output item. */
static void coai__rs_compaction_item(coai_reply *r, coai_buf *b)
{
    coai_buf t = { 0 };
    coai_buf_puts(b, "{\"id\":");
    coai__rs_item_id(r, b, "cmp_", r->rs_index_);
    coai_buf_puts(b, ",\"type\":\"compaction\",\"encrypted_content\":");
    coai_buf_puts(&t, COAI_RESPONSES_COMPACT_TAG);
    coai_buf_append(&t, r->content_.data, r->content_.len);
    coai_json_str_append(b, t.data ? (const char *)t.data : "", t.len);
    coai_buf_putc(b, '}');
    if (t.err) b->err = 1;
    coai_buf_free(&t);
}

static void coai__rs_w_delta(coai_reply *r, int ch, const char *s, size_t n)
{
    int k = ch ? COAI__RS_REASONING : COAI__RS_MESSAGE;
    coai_buf empty = { 0 };
    if (r->o_.rs_compact) {         /* the summary is sent whole, as one item at the end */
        if (ch) r->rs_reason_units_ += coai__core_utf16_len(s, n);
        coai_buf_append(ch ? &r->reasoning_ : &r->content_, s, n);
        return;
    }
    if (r->rs_open_ != k) {
        coai__rs_close(r);
        r->rs_open_ = k;
        coai__rs_ev(r, "response.output_item.added");
        coai_buf_printf(&r->out, ",\"output_index\":%d,\"item\":", r->rs_index_);
        coai__rs_text_item(r, &r->out, k, &empty, r->rs_index_, "in_progress");
        coai_buf_puts(&r->out, "}\n\n");
        if (k == COAI__RS_REASONING) {
            coai__rs_ev_item(r, "response.reasoning_summary_part.added", "rs_");
            coai_buf_puts(&r->out, ",\"summary_index\":0,\"part\":{\"type\":\"summary_text\","
                                   "\"text\":\"\"}}\n\n");
        } else {
            coai__rs_ev_item(r, "response.content_part.added", "msg_");
            coai_buf_puts(&r->out, ",\"content_index\":0,\"part\":{\"type\":\"output_text\","
                                   "\"annotations\":[],\"logprobs\":[],\"text\":\"\"}}\n\n");
        }
    }
    if (ch) {
        r->rs_reason_units_ += coai__core_utf16_len(s, n);
        coai_buf_append(&r->reasoning_, s, n);
        coai__rs_ev_item(r, "response.reasoning_summary_text.delta", "rs_");
        coai_buf_puts(&r->out, ",\"summary_index\":0,\"delta\":");
    } else {
        coai_buf_append(&r->content_, s, n);
        coai__rs_ev_item(r, "response.output_text.delta", "msg_");
        coai_buf_puts(&r->out, ",\"content_index\":0,\"logprobs\":[],\"delta\":");
    }
    coai_json_str_append(&r->out, s, n);
    coai_buf_puts(&r->out, "}\n\n");
}

/* Is the called tool a custom (freeform) one? Then its input is the "input" string. */
static const coai_tool *coai__rs_called(const coai_reply *r)
{
    size_t i;
    for (i = 0; i < r->o_.tool_count; i++)
        if (r->o_.tools[i].name.len == r->tc_name_.len
            && memcmp(r->o_.tools[i].name.ptr, r->tc_name_.data, r->tc_name_.len) == 0)
            return &r->o_.tools[i];
    return NULL;
}

/* The custom tool's input: args {"input": "..."} -> the string; anything else as is. */
static void coai__rs_custom_input(coai_reply *r, coai_buf *out)
{
    cJSON *j = cJSON_ParseWithLength((const char *)r->tc_args_.data, r->tc_args_.len);
    const cJSON *in = coai__core_get(j, "input");
    if (cJSON_IsString(in)) coai_buf_puts(out, in->valuestring);
    else coai_buf_append(out, r->tc_args_.data, r->tc_args_.len);
    cJSON_Delete(j);
}

static void coai__rs_call_item(coai_reply *r, coai_buf *b, int custom, const coai_buf *input,
                               const char *status)
{
    coai_buf_puts(b, "{\"id\":");
    coai__rs_item_id(r, b, custom ? "ctc_" : "fc_", r->rs_index_);
    coai_buf_printf(b, ",\"type\":\"%s\",\"status\":\"%s\",\"call_id\":",
                    custom ? "custom_tool_call" : "function_call", status);
    coai_json_str_append(b, (const char *)r->tc_id_.data, r->tc_id_.len);
    coai_buf_puts(b, ",\"name\":");
    coai_json_str_append(b, (const char *)r->tc_name_.data, r->tc_name_.len);
    coai_buf_puts(b, custom ? ",\"input\":" : ",\"arguments\":");
    coai_json_str_append(b, input && input->data ? (const char *)input->data : "",
                         input ? input->len : 0);
    coai_buf_putc(b, '}');
}

static void coai__rs_w_tool_call(coai_reply *r)
{
    const coai_tool *t = coai__rs_called(r);
    int custom = t && t->freeform;
    const char *pre = custom ? "ctc_" : "fc_";
    coai_buf in = { 0 }, item = { 0 };
    coai__rs_close(r);
    if (custom) coai__rs_custom_input(r, &in);
    else coai_buf_append(&in, r->tc_args_.data, r->tc_args_.len);
    coai__rs_ev(r, "response.output_item.added");
    coai_buf_printf(&r->out, ",\"output_index\":%d,\"item\":", r->rs_index_);
    coai__rs_call_item(r, &r->out, custom, NULL, "in_progress");
    coai_buf_puts(&r->out, "}\n\n");
    coai__rs_ev_item(r, custom ? "response.custom_tool_call_input.delta"
                               : "response.function_call_arguments.delta", pre);
    coai_buf_puts(&r->out, ",\"delta\":");
    coai_json_str_append(&r->out, in.data ? (const char *)in.data : "", in.len);
    coai_buf_puts(&r->out, "}\n\n");
    coai__rs_ev_item(r, custom ? "response.custom_tool_call_input.done"
                               : "response.function_call_arguments.done", pre);
    coai_buf_puts(&r->out, custom ? ",\"input\":" : ",\"name\":");
    if (custom) {
        coai_json_str_append(&r->out, in.data ? (const char *)in.data : "", in.len);
    } else {
        coai_json_str_append(&r->out, (const char *)r->tc_name_.data, r->tc_name_.len);
        coai_buf_puts(&r->out, ",\"arguments\":");
        coai_json_str_append(&r->out, in.data ? (const char *)in.data : "", in.len);
    }
    coai_buf_puts(&r->out, "}\n\n");
    coai__rs_call_item(r, &item, custom, &in, "completed");
    coai__rs_ev(r, "response.output_item.done");
    coai_buf_printf(&r->out, ",\"output_index\":%d,\"item\":", r->rs_index_);
    coai_buf_append(&r->out, item.data, item.len);
    coai_buf_puts(&r->out, "}\n\n");
    coai__rs_add_item(r, &item);
    r->rs_index_++;
    if (in.err || item.err) r->out.err = 1;
    coai_buf_free(&in);
    coai_buf_free(&item);
}

static void coai__rs_w_end(coai_reply *r, coai_finish f)
{
    coai__rs_close(r);
    if (r->o_.rs_compact) {
        coai_buf item = { 0 };
        coai__rs_compaction_item(r, &item);
        coai__rs_ev(r, "response.output_item.added");
        coai_buf_printf(&r->out, ",\"output_index\":%d,\"item\":", r->rs_index_);
        coai_buf_append(&r->out, item.data, item.len);
        coai_buf_puts(&r->out, "}\n\n");
        coai__rs_ev(r, "response.output_item.done");
        coai_buf_printf(&r->out, ",\"output_index\":%d,\"item\":", r->rs_index_++);
        coai_buf_append(&r->out, item.data, item.len);
        coai_buf_puts(&r->out, "}\n\n");
        coai__rs_add_item(r, &item);
        if (item.err) r->out.err = 1;
        coai_buf_free(&item);
    }
    coai_buf_reset(&r->rs_final_);
    coai__rs_object(r, &r->rs_final_, 1, f);
    coai__rs_ev(r, f == COAI_FINISH_LENGTH ? "response.incomplete" : "response.completed");
    coai_buf_puts(&r->out, ",\"response\":");
    coai_buf_append(&r->out, r->rs_final_.data, r->rs_final_.len);
    coai_buf_puts(&r->out, "}\n\n");
    if (r->rs_final_.err || r->rs_items_.err) r->out.err = 1;
}

/* Non-streaming: reasoning, message and call items from the collected text, then the
 * object. */
static void coai__rs_w_body(coai_reply *r, coai_finish f)
{
    coai_buf item = { 0 };
    r->rs_reason_units_ = coai__core_utf16_len(r->reasoning_.data ? (const char *)r->reasoning_.data
                                                                 : "", r->reasoning_.len);
    if (r->o_.rs_compact) {
        coai__rs_compaction_item(r, &item);
        coai__rs_add_item(r, &item);
        r->rs_index_++;
        coai_buf_reset(&r->rs_final_);
        if (r->o_.rs_compact == 2) {        /* POST /responses/compact: its own object */
            coai_buf *b = &r->rs_final_;
            coai_buf_puts(b, "{\"id\":");
            coai_json_str_append(b, r->o_.completion_id.ptr, r->o_.completion_id.len);
            coai_buf_printf(b, ",\"object\":\"response.compaction\",\"created_at\":%lld,"
                            "\"output\":[", (long long)r->o_.created);
            coai_buf_append(b, r->rs_items_.data, r->rs_items_.len);
            coai_buf_puts(b, "],\"usage\":");
            coai__rs_usage(r, b);
            coai_buf_putc(b, '}');
        } else {
            coai__rs_object(r, &r->rs_final_, 1, f);
        }
        coai_buf_append(&r->out, r->rs_final_.data, r->rs_final_.len);
        if (item.err || r->rs_final_.err || r->rs_items_.err) r->out.err = 1;
        coai_buf_free(&item);
        return;
    }
    if (r->reasoning_.len) {
        coai__rs_text_item(r, &item, COAI__RS_REASONING, &r->reasoning_, r->rs_index_++,
                           "completed");
        coai__rs_add_item(r, &item);
    }
    if (r->content_.len || !r->has_tool_call_) {
        coai_buf_reset(&item);
        coai__rs_text_item(r, &item, COAI__RS_MESSAGE, &r->content_, r->rs_index_++,
                           "completed");
        coai__rs_add_item(r, &item);
    }
    if (r->has_tool_call_) {
        size_t i;
        for (i = 0; i < r->ncalls_; i++) {       /* every call of the batch (held runs) */
            const coai_reply_call *c = &r->calls_[i];
            const coai_tool *t;
            int custom;
            coai_buf in = { 0 };
            coai_buf_reset(&r->tc_id_);          /* the item writers read the tc_* buffers */
            coai_buf_append(&r->tc_id_, c->call_id.ptr, c->call_id.len);
            coai_buf_reset(&r->tc_name_);
            coai_buf_append(&r->tc_name_, c->tool.ptr, c->tool.len);
            coai_buf_reset(&r->tc_args_);
            coai_buf_append(&r->tc_args_, c->args.ptr, c->args.len);
            t = coai__rs_called(r);
            custom = t && t->freeform;
            if (custom) coai__rs_custom_input(r, &in);
            else coai_buf_append(&in, r->tc_args_.data, r->tc_args_.len);
            coai_buf_reset(&item);
            coai__rs_call_item(r, &item, custom, &in, "completed");
            coai__rs_add_item(r, &item);
            r->rs_index_++;
            if (in.err || r->tc_args_.err) item.err = 1;
            coai_buf_free(&in);
        }
    }
    coai_buf_reset(&r->rs_final_);
    coai__rs_object(r, &r->rs_final_, 1, f);
    coai_buf_append(&r->out, r->rs_final_.data, r->rs_final_.len);
    if (item.err || r->rs_final_.err || r->rs_items_.err) r->out.err = 1;
    coai_buf_free(&item);
}

/* After the first byte: the open item is left as it is and response.failed ends the
 * stream (OpenAI's shape; clients read response.error). */
static void coai__rs_w_error(coai_reply *r)
{
    coai_buf obj = { 0 };
    coai__rs_object(r, &obj, 2, COAI_FINISH_STOP);
    coai__rs_ev(r, "response.failed");
    coai_buf_puts(&r->out, ",\"response\":");
    coai_buf_append(&r->out, obj.data, obj.len);
    coai_buf_puts(&r->out, "}\n\n");
    if (obj.err) r->out.err = 1;
    coai_buf_free(&obj);
}

static void coai__rs_w_keepalive(coai_reply *r)
{
    coai_buf_puts(&r->out, ": keepalive\n\n");
}

coai_str coai_reply_response(const coai_reply *r)
{
    coai_str s = { "", 0 };
    if (r->done_ && !r->error.status && r->rs_final_.len) {
        s.ptr = (const char *)r->rs_final_.data;
        s.len = r->rs_final_.len;
    }
    return s;
}

coai_str coai_reply_output_items(const coai_reply *r)
{
    coai_str s = { "", 0 };
    if (r->rs_items_.len) {
        s.ptr = (const char *)r->rs_items_.data;
        s.len = r->rs_items_.len;
    }
    return s;
}

static const coai__writer coai__rs_writer = {
    coai__rs_w_init, coai__rs_w_begin, coai__rs_w_delta, coai__rs_w_tool_call,
    coai__rs_w_end, coai__rs_w_body, coai__rs_w_error, coai__rs_w_keepalive
};
/* PART:RESPONSES impl end */

/* ======================================================================== */
/* PART:GEMINI impl (Gemini API: parser, exec mapping, writer)              */
/* ======================================================================== */

/* ---- request ---- */

static int coai__gm_bad(coai_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    coai__core_error_vset(err, 400, "invalid_request_error", NULL, NULL, fmt, ap);
    va_end(ap);
    err->no_retry = 1;
    return COAI_ERR_INVALID;
}

/* Gemini's Schema (OpenAPI subset) spells types "OBJECT", "STRING" ...: JSON schema, which
 * Cursor reads, has them lowercase. Rewritten in place (the tree is the request's). */
static void coai__gm_lower_types(cJSON *j, int depth)
{
    cJSON *c;
    if (!j || depth > COAI_MAX_VALUE_DEPTH) return;
    if (cJSON_IsObject(j)) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (cJSON_IsString(t) && t->valuestring) {
            char *p;
            for (p = t->valuestring; *p; p++)
                if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
        }
    }
    for (c = j->child; c; c = c->next) coai__gm_lower_types(c, depth + 1);
}

static int coai__gm_starts(coai_str s, size_t at, const char *lit)
{
    size_t n = strlen(lit);
    return at + n <= s.len && memcmp(s.ptr + at, lit, n) == 0;
}

/* Gemini CLI's run_shell_command result: "Output: <out>" then, each on its own line and
 * in this order when present, "Error: ", "Exit Code: ", "Signal: ", "Background PIDs: ",
 * "Process Group PGID: " (optionally inside <untrusted_context>). 1 with the output and
 * the exit code (0 when the line is absent: the tool writes it only when non-zero); 0 when
 * the text is not that shape; -1 when it names a spawn error or a signal, or says the
 * command was cancelled (by the user or at its timeout: no exit code to report, the result
 * goes as a failed one, text as it is). */
static int coai__gm_shell_result(coai_str t, coai_str *output, int *exit_code)
{
    static const char *const sect[] = { "Process Group PGID: ", "Background PIDs: ",
                                        "Signal: ", "Exit Code: ", "Error: " };
    size_t end, k;
    long code = 0;
    int have_code = 0;
    if (coai__gm_starts(t, 0, "<untrusted_context>\n")) {
        static const char tail[] = "\n</untrusted_context>";
        size_t tl = sizeof tail - 1;
        if (t.len < 20 + tl || memcmp(t.ptr + t.len - tl, tail, tl) != 0) return 0;
        t.ptr += 20;
        t.len -= 20 + tl;
    }
    if (coai__gm_starts(t, 0, "Command was "))  /* "... cancelled by user ...", "...
                                                 * automatically cancelled ... timeout" */
        return -1;
    if (!coai__gm_starts(t, 0, "Output: ")) return 0;
    end = t.len;
    for (k = 0; k < 5; k++) {
        size_t ls = end;                         /* start of the last line before end */
        while (ls > 0 && t.ptr[ls - 1] != '\n') ls--;
        if (ls == 0 || !coai__gm_starts(t, ls, sect[k])) continue;
        if (k == 2 || k == 4) return -1;         /* a signal or a spawn error */
        if (k == 3) {
            size_t i = ls + strlen(sect[k]);
            int neg = 0, digits = 0;
            if (i < end && t.ptr[i] == '-') { neg = 1; i++; }
            for (; i < end && t.ptr[i] >= '0' && t.ptr[i] <= '9' && code < 100000000; i++) {
                code = code * 10 + (t.ptr[i] - '0');
                digits++;
            }
            if (!digits || i != end) return 0;
            if (neg) code = -code;
            have_code = 1;
        }
        end = ls - 1;                            /* drop the line and its '\n' */
    }
    output->ptr = t.ptr + 8;
    output->len = end > 8 ? end - 8 : 0;
    if (output->len == 7 && memcmp(output->ptr, "(empty)", 7) == 0) output->len = 0;
    *exit_code = have_code ? (int)code : 0;
    return 1;
}

/* Gemini CLI's run_shell_command result as coai_exec_outcome_parse reads it: output and exit
 * code, or (a signal, a spawn error, cancelled) a failure with the text as stderr.
 * 1 when it is Gemini CLI's layout, 0 otherwise (o untouched). */
static int coai__gm_outcome(coai_exec_outcome *o, coai_str t)
{
    coai_str out;
    int code = 0, sr = coai__gm_shell_result(t, &out, &code);
    if (sr == 0) return 0;
    if (sr > 0) {
        o->has_exit = 1;
        o->exit_code = code;
        o->out = out;
    } else {
        o->is_error = 1;
        o->out.len = 0;
        o->err = t;
    }
    o->shape = "gemini-shell";
    return 1;
}

/* The text of a functionResponse.response: output, else error (is_error), else content,
 * else the whole object as JSON. */
static coai_str coai__gm_response_text(coai_request *req, const cJSON *resp, int *is_error)
{
    const cJSON *v;
    *is_error = 0;
    if (cJSON_IsString(v = coai__core_get(resp, "output"))) return coai__core_jstr(v);
    if (cJSON_IsString(v = coai__core_get(resp, "error"))) { *is_error = 1; return coai__core_jstr(v); }
    if (cJSON_IsString(v = coai__core_get(resp, "content"))) return coai__core_jstr(v);
    if (!resp || cJSON_IsNull(resp)) return coai_str_c("");
    return coai__req_own(req, cJSON_PrintUnformatted(resp));
}

/* One content -> messages appended at out[*k] (a user content's functionResponse parts
 * each become a TOOL message; its other parts one USER message after them). */
static int coai__gm_content(coai_request *req, const cJSON *c, int i, coai_message *out,
                            size_t *k, coai_error *err)
{
    const cJSON *role = coai__core_get(c, "role"), *parts = coai__core_get(c, "parts"), *p;
    coai_role r = COAI_ROLE_USER;
    coai_message *cur = NULL;
    coai_part *ps;
    coai_call *calls = NULL;
    size_t np, pn = 0;
    int j = 0;
    if (!cJSON_IsObject(c)) return coai__gm_bad(err, "contents[%d]: must be an object", i);
    if (role && !cJSON_IsNull(role)) {
        if (!cJSON_IsString(role))
            return coai__gm_bad(err, "contents[%d].role: must be a string", i);
        if (strcmp(role->valuestring, "model") == 0) r = COAI_ROLE_ASSISTANT;
        else if (strcmp(role->valuestring, "user") != 0
                 && strcmp(role->valuestring, "function") != 0)
            return coai__gm_bad(err, "contents[%d].role: Please use a valid role: user, model.",
                                i);
    }
    if (!cJSON_IsArray(parts))
        return coai__gm_bad(err, "contents[%d].parts: must be a list of parts", i);
    np = (size_t)cJSON_GetArraySize(parts);
    ps = (coai_part *)coai__req_alloc(req, np * sizeof *ps);
    if (r == COAI_ROLE_ASSISTANT) calls = (coai_call *)coai__req_alloc(req, np * sizeof *calls);
    if (!ps || (r == COAI_ROLE_ASSISTANT && !calls)) return COAI_ERR_NOMEM;
    cJSON_ArrayForEach(p, parts) {
        const cJSON *v;
        if (!cJSON_IsObject(p))
            return coai__gm_bad(err, "contents[%d].parts[%d]: must be an object", i, j);
        if ((v = coai__core_get(p, "functionResponse")) != NULL) {
            const cJSON *id = coai__core_get(v, "id"), *name = coai__core_get(v, "name");
            const cJSON *fps = coai__core_get(v, "parts"), *fp, *rv;
            coai_message *tm;
            coai_part *tp;
            size_t nfp = 1;
            if (r == COAI_ROLE_ASSISTANT)
                return coai__gm_bad(err, "contents[%d].parts[%d].functionResponse: belongs in "
                                    "a user content", i, j);
            if (!cJSON_IsObject(v) || !cJSON_IsString(name))
                return coai__gm_bad(err, "contents[%d].parts[%d].functionResponse.name: "
                                    "required", i, j);
            if (fps && !cJSON_IsNull(fps) && !cJSON_IsArray(fps))
                return coai__gm_bad(err, "contents[%d].parts[%d].functionResponse.parts: must "
                                    "be a list", i, j);
            rv = coai__core_get(v, "response");
            if (rv && !cJSON_IsNull(rv) && !cJSON_IsObject(rv))
                /* Google's Struct: a string, number or list is refused (INVALID_ARGUMENT) */
                return coai__gm_bad(err, "contents[%d].parts[%d].functionResponse.response: "
                                    "must be a JSON object (put a text result in "
                                    "{\"output\": ...})", i, j);
            if (cJSON_IsArray(fps)) nfp += (size_t)cJSON_GetArraySize(fps);
            tp = (coai_part *)coai__req_alloc(req, nfp * sizeof *tp);
            if (!tp) return COAI_ERR_NOMEM;
            tm = &out[(*k)++];
            cur = NULL;
            tm->role = COAI_ROLE_TOOL;
            tm->tool_call_id = cJSON_IsString(id) && id->valuestring[0] ? coai__core_jstr(id)
                                                                        : coai__core_jstr(name);
            tp->text = coai__gm_response_text(req, rv, &tm->is_error);
            tm->parts = tp;
            tm->part_count = 1;
            /* multimodal function responses: inlineData parts are the result's images (the
             * core decodes or checks them like any other image) */
            if (cJSON_IsArray(fps)) {
                int q = 0;
                cJSON_ArrayForEach(fp, fps) {
                    const cJSON *d = coai__core_get(fp, "inlineData");
                    const cJSON *mt = coai__core_get(d, "mimeType"), *dd = coai__core_get(d, "data");
                    if (!cJSON_IsObject(d) || !cJSON_IsString(mt) || !cJSON_IsString(dd))
                        return coai__gm_bad(err, "contents[%d].parts[%d].functionResponse."
                                            "parts[%d]: expected inlineData with string "
                                            "mimeType and data (file URIs are not supported)",
                                            i, j, q);
                    tp[tm->part_count].kind = COAI_PART_IMAGE;
                    tp[tm->part_count].path = coai__req_path(req, "contents[%d].parts[%d]."
                                                             "functionResponse.parts[%d]."
                                                             "inlineData", i, j, q);
                    tp[tm->part_count].media_type = coai__core_jstr(mt);
                    tp[tm->part_count++].data = coai__core_jstr(dd);
                    q++;
                }
            }
            j++;
            continue;
        }
        if (!cur) {
            cur = &out[(*k)++];
            cur->role = r;
            cur->parts = ps + pn;
            if (r == COAI_ROLE_ASSISTANT) cur->calls = calls;
        }
        if (cJSON_IsString(v = coai__core_get(p, "text"))) {
            const cJSON *th = coai__core_get(p, "thought");
            if (th && !cJSON_IsNull(th) && !cJSON_IsBool(th))
                return coai__gm_bad(err, "contents[%d].parts[%d].thought: must be a boolean",
                                    i, j);
            ps[pn].kind = cJSON_IsTrue(th) ? COAI_PART_THINKING : COAI_PART_TEXT;
            ps[pn++].text = coai__core_jstr(v);
            cur->part_count++;
        } else if ((v = coai__core_get(p, "inlineData")) != NULL) {
            const cJSON *mt = coai__core_get(v, "mimeType"), *d = coai__core_get(v, "data");
            if (r == COAI_ROLE_ASSISTANT)
                return coai__gm_bad(err, "contents[%d].parts[%d].inlineData: images belong in "
                                    "a user content", i, j);
            if (!cJSON_IsString(mt) || !cJSON_IsString(d))
                return coai__gm_bad(err, "contents[%d].parts[%d].inlineData: needs string "
                                    "mimeType and data", i, j);
            ps[pn].kind = COAI_PART_IMAGE;
            ps[pn].path = coai__req_path(req, "contents[%d].parts[%d].inlineData", i, j);
            ps[pn].media_type = coai__core_jstr(mt);
            ps[pn++].data = coai__core_jstr(d);
            cur->part_count++;
        } else if ((v = coai__core_get(p, "functionCall")) != NULL) {
            const cJSON *id = coai__core_get(v, "id"), *name = coai__core_get(v, "name");
            const cJSON *args = coai__core_get(v, "args");
            coai_call *cl;
            if (r != COAI_ROLE_ASSISTANT)
                return coai__gm_bad(err, "contents[%d].parts[%d].functionCall: belongs in a "
                                    "model content", i, j);
            if (!cJSON_IsObject(v) || !cJSON_IsString(name))
                return coai__gm_bad(err, "contents[%d].parts[%d].functionCall.name: required",
                                    i, j);
            if (args && !cJSON_IsNull(args) && !cJSON_IsObject(args))
                return coai__gm_bad(err, "contents[%d].parts[%d].functionCall.args: must be an "
                                    "object", i, j);
            cl = &calls[cur->call_count++];
            cl->id = cJSON_IsString(id) && id->valuestring[0] ? coai__core_jstr(id)
                                                             : coai__core_jstr(name);
            cl->name = coai__core_jstr(name);
            cl->args = cJSON_IsObject(args) ? coai__req_own(req, cJSON_PrintUnformatted(args))
                                            : coai_str_c("{}");
        } else if ((v = coai__core_get(p, "executableCode")) != NULL
                   || (v = coai__core_get(p, "codeExecutionResult")) != NULL) {
            const cJSON *t = coai__core_get(v, "code");
            if (!t) t = coai__core_get(v, "output");
            if (cJSON_IsString(t)) {
                ps[pn++].text = coai__core_jstr(t);
                cur->part_count++;
            }
        } else if (coai__core_get(p, "fileData")) {
            return coai__gm_bad(err, "contents[%d].parts[%d].fileData: file URIs are not "
                                "supported (send the bytes as inlineData)", i, j);
        } else if (!coai__core_get(p, "thoughtSignature") && !coai__core_get(p, "videoMetadata")
                   && !coai__core_get(p, "thought")) {
            return coai__gm_bad(err, "contents[%d].parts[%d]: unsupported part (expected text, "
                                "inlineData, functionCall or functionResponse)", i, j);
        }
        j++;
    }
    return 0;
}

/* The index of the first part of content c with the key, or -1 (none, or c is not a
 * content with a parts list). */
static int coai__gm_find_part(const cJSON *c, const char *key)
{
    const cJSON *parts = coai__core_get(c, "parts"), *p;
    int j = 0;
    if (!cJSON_IsArray(parts)) return -1;
    cJSON_ArrayForEach(p, parts) {
        if (coai__core_get(p, key)) return j;
        j++;
    }
    return -1;
}

/* The tools of the request: functionDeclarations only (built-in tools run at Google). */
static int coai__gm_tools(coai_request *req, cJSON *tools, coai_error *err)
{
    cJSON *t, *f;
    size_t count = 0, q = 0;
    int i = 0;
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return coai__gm_bad(err, "tools: must be a list");
    cJSON_ArrayForEach(t, tools) {
        cJSON *fd = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "functionDeclarations")
                                      : NULL;
        if (!cJSON_IsObject(t)) return coai__gm_bad(err, "tools[%d]: must be an object", i);
        if (fd && !cJSON_IsNull(fd) && !cJSON_IsArray(fd))
            return coai__gm_bad(err, "tools[%d].functionDeclarations: must be a list", i);
        if (cJSON_IsArray(fd)) count += (size_t)cJSON_GetArraySize(fd);
        i++;
    }
    if (count > COAI_MAX_TOOLS)
        return coai__gm_bad(err, "tools: at most %d function declarations are supported",
                            COAI_MAX_TOOLS);
    if (!count) return 0;
    req->tools = (coai_tool *)calloc(count, sizeof *req->tools);
    if (!req->tools) return COAI_ERR_NOMEM;
    i = 0;
    cJSON_ArrayForEach(t, tools) {
        cJSON *fd = cJSON_GetObjectItemCaseSensitive(t, "functionDeclarations");
        int j = 0;
        if (!cJSON_IsArray(fd)) { i++; continue; }
        cJSON_ArrayForEach(f, fd) {
            const cJSON *name = coai__core_get(f, "name"), *d = coai__core_get(f, "description");
            cJSON *sch = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f,
                                                                       "parametersJsonSchema")
                                           : NULL;
            if (!cJSON_IsObject(f))
                return coai__gm_bad(err, "tools[%d].functionDeclarations[%d]: must be an "
                                    "object", i, j);
            if (!cJSON_IsString(name) || !coai__name_ok(name->valuestring, 128))
                return coai__gm_bad(err, "tools[%d].functionDeclarations[%d].name: must match "
                                    "^[a-zA-Z0-9_-]{1,128}$", i, j);
            if (d && !cJSON_IsNull(d) && !cJSON_IsString(d))
                return coai__gm_bad(err, "tools[%d].functionDeclarations[%d].description: "
                                    "must be a string", i, j);
            if (!sch || cJSON_IsNull(sch)) {
                sch = cJSON_GetObjectItemCaseSensitive(f, "parameters");
                if (cJSON_IsObject(sch)) coai__gm_lower_types(sch, 0);
            }
            if (sch && !cJSON_IsNull(sch) && !cJSON_IsObject(sch))
                return coai__gm_bad(err, "tools[%d].functionDeclarations[%d].parameters: must "
                                    "be an object", i, j);
            {   /* Google refuses a second declaration of a name (INVALID_ARGUMENT) */
                size_t e;
                for (e = 0; e < q; e++)
                    if (coai_str_eq(req->tools[e].name, name->valuestring))
                        return coai__gm_bad(err, "tools[%d].functionDeclarations[%d].name: "
                                            "Duplicate function declaration found: %.64s", i,
                                            j, name->valuestring);
            }
            req->tools[q].name = coai__core_jstr(name);
            req->tools[q].description = coai__core_jstr(d);
            req->tools[q++].parameters = cJSON_IsObject(sch) ? sch : NULL;
            j++;
        }
        i++;
    }
    req->tool_count = q;
    return 0;
}

/* toolConfig.functionCallingConfig: mode and allowedFunctionNames. */
static int coai__gm_tool_config(coai_request *req, const cJSON *tc, coai_error *err)
{
    const cJSON *fc = coai__core_get(tc, "functionCallingConfig"), *mode, *names, *nm;
    const char *m;
    size_t i, q = 0;
    if (tc && !cJSON_IsNull(tc) && !cJSON_IsObject(tc))
        return coai__gm_bad(err, "toolConfig: must be an object");
    if (!fc || cJSON_IsNull(fc)) return 0;
    if (!cJSON_IsObject(fc))
        return coai__gm_bad(err, "toolConfig.functionCallingConfig: must be an object");
    mode = coai__core_get(fc, "mode");
    m = cJSON_IsString(mode) ? mode->valuestring : "AUTO";
    if (mode && !cJSON_IsNull(mode) && !cJSON_IsString(mode))
        return coai__gm_bad(err, "toolConfig.functionCallingConfig.mode: must be a string");
    if (strcmp(m, "AUTO") == 0 || strcmp(m, "MODE_UNSPECIFIED") == 0
        || strcmp(m, "VALIDATED") == 0)
        req->tool_choice = COAI_TOOL_CHOICE_AUTO;
    else if (strcmp(m, "ANY") == 0) req->tool_choice = COAI_TOOL_CHOICE_ANY;
    else if (strcmp(m, "NONE") == 0) req->tool_choice = COAI_TOOL_CHOICE_NONE;
    else
        return coai__gm_bad(err, "toolConfig.functionCallingConfig.mode: expected AUTO, ANY, "
                            "NONE or VALIDATED");
    names = coai__core_get(fc, "allowedFunctionNames");
    if (!names || cJSON_IsNull(names)) return 0;
    if (!cJSON_IsArray(names))
        return coai__gm_bad(err, "toolConfig.functionCallingConfig.allowedFunctionNames: must "
                            "be a list of names");
    q = 0;
    cJSON_ArrayForEach(nm, names) {
        int found = 0;
        if (!cJSON_IsString(nm))
            return coai__gm_bad(err, "toolConfig.functionCallingConfig.allowedFunctionNames: "
                                "must be a list of names");
        for (i = 0; i < req->tool_count && !found; i++)
            found = coai_str_eq(req->tools[i].name, nm->valuestring);
        /* as Google (and the other dialects for their named tool): a name that no function
         * declaration has is a 400, never a request whose tools silently vanish */
        if (!found)
            return coai__gm_bad(err, "toolConfig.functionCallingConfig.allowedFunctionNames[%d]: "
                                "'%.64s' is not the name of a function declaration in tools",
                                (int)q, nm->valuestring);
        q++;
    }
    q = 0;
    /* only the allowed tools are offered */
    for (i = 0; i < req->tool_count; i++) {
        int ok = 0;
        cJSON_ArrayForEach(nm, names)
            if (coai_str_eq(req->tools[i].name, nm->valuestring)) ok = 1;
        if (ok) req->tools[q++] = req->tools[i];
    }
    req->tool_count = q;
    if (req->tool_choice == COAI_TOOL_CHOICE_ANY && q == 1) {
        req->tool_choice = COAI_TOOL_CHOICE_TOOL;
        req->tool_choice_name = req->tools[0].name;
    }
    return 0;
}

static int coai__gm_mime_known(const char *m)
{
    static const char *const known[] = { "text/plain", "application/json", "application/xml",
                                         "application/yaml", "text/x.enum", NULL };
    size_t i;
    for (i = 0; known[i]; i++)
        if (strcmp(m, known[i]) == 0) return 1;
    return 0;
}

static int coai__gm_gen_config(coai_request *req, cJSON *g, coai_error *err)
{
    const cJSON *v, *tc;
    if (!g || cJSON_IsNull(g)) return 0;
    if (!cJSON_IsObject(g)) return coai__gm_bad(err, "generationConfig: must be an object");
    v = coai__core_get(g, "maxOutputTokens");
    if (v && !cJSON_IsNull(v) && coai__core_count(v, &req->max_tokens) < 0)
        return coai__gm_bad(err, "generationConfig.maxOutputTokens: must be an integer >= 1");
    v = coai__core_get(g, "candidateCount");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return coai__gm_bad(err, "generationConfig.candidateCount: only 1 is supported");
    v = coai__core_get(g, "stopSequences");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *e;
        size_t q = 0;
        coai_str *st;
        if (!cJSON_IsArray(v))
            return coai__gm_bad(err, "generationConfig.stopSequences: must be a list");
        if (coai__stops_check((size_t)cJSON_GetArraySize(v), 5,
                              "generationConfig.stopSequences", err))
            return COAI_ERR_INVALID;
        st = (coai_str *)coai__req_alloc(req, (size_t)cJSON_GetArraySize(v) * sizeof *st);
        if (!st) return COAI_ERR_NOMEM;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsString(e))
                return coai__gm_bad(err, "generationConfig.stopSequences[%d]: must be a string",
                                    (int)q);
            if (e->valuestring[0]) st[q++] = coai__core_jstr(e);
        }
        req->stop = q ? st : NULL;
        req->stop_count = q;
    }
    tc = coai__core_get(g, "thinkingConfig");
    if (tc && !cJSON_IsNull(tc)) {
        const cJSON *b = coai__core_get(tc, "thinkingBudget"), *lv = coai__core_get(tc, "thinkingLevel");
        if (!cJSON_IsObject(tc))
            return coai__gm_bad(err, "generationConfig.thinkingConfig: must be an object");
        if (b && !cJSON_IsNull(b)) {
            if (!cJSON_IsNumber(b) || b->valuedouble < -1 || b->valuedouble > 1e9)
                return coai__gm_bad(err, "generationConfig.thinkingConfig.thinkingBudget: must "
                                    "be an integer >= -1");
            req->thinking = b->valuedouble != 0;
            if (b->valuedouble > 0) req->thinking_budget = (int64_t)b->valuedouble;
        } else if (cJSON_IsString(lv)) {
            req->thinking = 1;
        }
    }
    {   /* a schema that is not an object is Google's 400, before any run */
        static const char *const sk[] = { "responseSchema", "responseJsonSchema" };
        size_t q;
        for (q = 0; q < 2; q++) {
            const cJSON *s = coai__core_get(g, sk[q]);
            if (s && !cJSON_IsNull(s) && !cJSON_IsObject(s))
                return coai__gm_bad(err, "generationConfig.%s: must be an object (a schema)",
                                    sk[q]);
        }
    }
    v = coai__core_get(g, "responseMimeType");
    if (cJSON_IsString(v) && v->valuestring[0]
        && !coai__gm_mime_known(v->valuestring))
        /* Google's list; text/plain is the default, application/json a JSON answer, the
         * others are answered as text */
        return coai__gm_bad(err, "generationConfig.responseMimeType: allowed mimetypes are "
                            "`text/plain`, `application/json`, `application/xml`, "
                            "`application/yaml` and `text/x.enum` (got '%.64s')",
                            v->valuestring);
    if (cJSON_IsString(v) && strcmp(v->valuestring, "application/json") == 0) {
        cJSON *s = cJSON_GetObjectItemCaseSensitive(g, "responseJsonSchema");
        if (!cJSON_IsObject(s)) {
            s = cJSON_GetObjectItemCaseSensitive(g, "responseSchema");
            if (cJSON_IsObject(s)) coai__gm_lower_types(s, 0);
        }
        req->response_json = 1;
        req->response_schema = cJSON_IsObject(s) ? s : NULL;
    } else if (v && !cJSON_IsNull(v) && !cJSON_IsString(v)) {
        return coai__gm_bad(err, "generationConfig.responseMimeType: must be a string");
    }
    return 0;
}

int coai_gemini_parse(coai_request *req, const char *body, size_t n, coai_str model,
                      int stream, coai_error *err)
{
    cJSON *root;
    const cJSON *contents, *c, *v;
    coai_message *out;
    size_t cap = 1, k = 0;
    int rc, i = 0;
    char *mc;
    memset(req, 0, sizeof *req);
    if ((rc = coai__json_body(body, n, &root, err)) != 0) return rc;
    req->root_ = root;
    req->dialect = COAI_DIALECT_GEMINI;
    req->thinking = -1;
    req->stream = stream == 2 ? 2 : stream ? 1 : 0;
    if (model.len > 7 && memcmp(model.ptr, "models/", 7) == 0) { model.ptr += 7; model.len -= 7; }
    if (!model.len) model = coai_str_c("auto");
    mc = (char *)coai__req_alloc(req, model.len + 1);
    if (!mc) goto nomem;
    memcpy(mc, model.ptr, model.len);
    req->model.ptr = mc;
    req->model.len = model.len;
    rc = COAI_ERR_INVALID;
    if (coai__core_get(root, "cachedContent")) {
        coai__gm_bad(err, "cachedContent: cached contents are not supported (send the contents "
                     "themselves)");
        goto fail;
    }
    contents = coai__core_get(root, "contents");
    if (!cJSON_IsArray(contents) || cJSON_GetArraySize(contents) == 0) {
        coai__gm_bad(err, "contents: required (a non-empty list of contents)");
        goto fail;
    }
    cJSON_ArrayForEach(c, contents) {
        const cJSON *p = coai__core_get(c, "parts");
        cap += 1 + (size_t)(cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0);
    }
    out = (coai_message *)coai__req_alloc(req, cap * sizeof *out);
    if (!out) goto nomem;
    v = coai__core_get(root, "systemInstruction");
    if (cJSON_IsString(v)) {
        coai_part *p = (coai_part *)coai__req_alloc(req, sizeof *p);
        if (!p) goto nomem;
        p->text = coai__core_jstr(v);
        out[k].role = COAI_ROLE_SYSTEM;
        out[k].parts = p;
        out[k++].part_count = 1;
    } else if (cJSON_IsObject(v)) {
        const cJSON *parts = coai__core_get(v, "parts"), *b;
        coai_part *p;
        size_t q = 0;
        if (!cJSON_IsArray(parts)) {
            coai__gm_bad(err, "systemInstruction.parts: must be a list of text parts");
            goto fail;
        }
        p = (coai_part *)coai__req_alloc(req, (size_t)cJSON_GetArraySize(parts) * sizeof *p);
        if (!p) goto nomem;
        cJSON_ArrayForEach(b, parts) {
            if (!cJSON_IsString(coai__core_get(b, "text"))) {
                coai__gm_bad(err, "systemInstruction.parts[%d]: only text parts are supported",
                             (int)q);
                goto fail;
            }
            p[q++].text = coai__core_jstr(coai__core_get(b, "text"));
        }
        out[k].role = COAI_ROLE_SYSTEM;
        out[k].parts = p;
        out[k++].part_count = q;
    } else if (v && !cJSON_IsNull(v)) {
        coai__gm_bad(err, "systemInstruction: must be a content with text parts");
        goto fail;
    }
    {   /* Google's turn rule: a content with functionResponse parts comes right after a
         * model content with functionCall parts (else 400 INVALID_ARGUMENT) */
        const cJSON *prev = NULL;
        int fr;
        cJSON_ArrayForEach(c, contents) {
            if ((fr = coai__gm_find_part(c, "functionResponse")) >= 0
                && coai__gm_find_part(prev, "functionCall") < 0) {
                coai__gm_bad(err, "contents[%d].parts[%d].functionResponse: Please ensure that "
                             "function response turn comes immediately after a function call "
                             "turn (%s)", i, fr, i ? "the content before it has no functionCall"
                                                   : "it is the first content");
                goto fail;
            }
            prev = c;
            i++;
        }
        i = 0;
    }
    cJSON_ArrayForEach(c, contents) {
        if ((rc = coai__gm_content(req, c, i++, out, &k, err)) != 0) {
            if (rc == COAI_ERR_NOMEM) goto nomem;
            goto fail;
        }
    }
    rc = COAI_ERR_INVALID;
    req->messages = out;
    req->message_count = k;
    if ((rc = coai__gm_tools(req, cJSON_GetObjectItemCaseSensitive(root, "tools"), err)) != 0
        || (rc = coai__gm_tool_config(req, coai__core_get(root, "toolConfig"), err)) != 0
        || (rc = coai__gm_gen_config(req, cJSON_GetObjectItemCaseSensitive(root,
                                                                         "generationConfig"),
                                     err)) != 0) {
        if (rc == COAI_ERR_NOMEM) goto nomem;
        goto fail;
    }
    if (!req->tool_count) { free(req->tools); req->tools = NULL; }
    /* safetySettings, labels, serviceTier ...: accepted, nothing to do on Cursor's side */
    if ((rc = coai__tool_choice_check(req, "toolConfig", err)) != 0) goto fail;
    if (req->mem_.err || coai__request_finish(req)) goto nomem;
    return 0;
nomem:
    rc = COAI_ERR_NOMEM;
    coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
fail:
    coai_request_free(req);
    return rc;
}

static int coai__gm_hex(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int coai_gemini_url_model(coai_str seg, char *out, size_t cap)
{
    size_t i, k = 0;
    if (!cap) return -1;
    out[0] = 0;
    for (i = 0; i < seg.len; i++) {
        int ch = (unsigned char)seg.ptr[i], hi, lo;
        if (ch == '%' && i + 2 < seg.len && (hi = coai__gm_hex(seg.ptr[i + 1])) >= 0
            && (lo = coai__gm_hex(seg.ptr[i + 2])) >= 0) {
            ch = hi * 16 + lo;
            i += 2;
        }
        if (ch < 0x20 || ch == 0x7f || k + 1 >= cap) { out[0] = 0; return -1; }
        out[k++] = (char)ch;
    }
    out[k] = 0;
    return 0;
}

/* The table's parser: no URL, so the model is "auto" and there is no stream. */
static int coai__gm_parse_plain(coai_request *req, const char *body, size_t n, coai_error *err)
{
    return coai_gemini_parse(req, body, n, coai_str_c(""), 0, err);
}

/* ---- exec mapping ---- */

int coai_gemini_exec_map(const coai_exec *ex, const coai_tool *tools, size_t count,
                         coai_str workspace, coai_tool_call *tc)
{
    static const char *const n_grep[] = { "grep_search", "search_file_content", "grep", NULL };
    static const char *const p_include[] = { "include_pattern", "include", NULL };
    static const char *const p_pattern[] = { "pattern", NULL };
    static const char *const p_dir[] = { "dir_path", "path", NULL };
    static const char *const n_shell[] = { "run_shell_command", "shell", "bash", NULL };
    static const char *const p_command[] = { "command", "cmd", NULL };
    static const char *const p_desc[] = { "description", NULL };
    size_t idx = 0;
    int m;
    coai__tfeat gf;
    if (!tools) count = 0;
    tc->via_shell = 0;
    /* a regex search restricted by a file glob: Gemini CLI's grep takes include_pattern */
    if (ex->kind == COAI_EXEC_GREP && ex->glob.len && ex->pattern.len
        && coai__ro_find(tools, count, COAI__R_GREP, 0, n_grep, &idx, NULL)
        && coai__core_has_param(&tools[idx], p_include)) {
        const coai_tool *t = &tools[idx];
        coai_buf *b = &tc->args;
        coai_buf_reset(b);
        coai_buf_putc(b, '{');
        coai__core_arg(b, coai__core_param(t, p_pattern), ex->pattern);
        if ((ex->has_path || ex->path.len) && coai__core_may(t, p_dir))
            coai__core_arg(b, coai__core_param(t, p_dir), ex->path);
        coai__core_arg(b, coai__core_param(t, p_include), ex->glob);
        coai_buf_putc(b, '}');
        tc->tool = idx;
        return b->err ? -1 : 1;
    }
    if ((ex->kind == COAI_EXEC_SHELL || ex->kind == COAI_EXEC_SHELL_STREAM)
        && coai__ro_find(tools, count, COAI__R_SHELL, 0, n_shell, &idx, &gf)
        && gf.cmd_kind <= 1) {
        /* run_shell_command {command, description, dir_path}: Cursor's cwd is a directory of
         * the proxy's workspace; Gemini CLI refuses a dir_path outside its own, so the
         * workspace itself is left out (Gemini CLI's root) and a directory under it goes as
         * a relative path */
        const coai_tool *t = &tools[idx];
        coai_buf *b = &tc->args, d = { 0 };
        coai_str cwd = ex->cwd, ds;
        coai_buf_reset(b);
        coai_buf_putc(b, '{');
        coai__core_arg(b, gf.cmd ? gf.cmd : coai__core_param(t, p_command), ex->command);
        if (coai__core_has_param(t, p_desc)) {
            /* Cursor's own description of the command (ShellArgs 15) when it sent one */
            if (ex->description.len) coai_buf_append(&d, ex->description.ptr, ex->description.len);
            else coai__core_shell_desc(&d, ex->command);
            ds.ptr = d.data ? (const char *)d.data : "";
            ds.len = d.len;
            coai__core_arg(b, coai__core_param(t, p_desc), ds);
            if (d.err) b->err = 1;
            coai_buf_free(&d);
        }
        while (workspace.len > 1 && workspace.ptr[workspace.len - 1] == '/') workspace.len--;
        while (cwd.len > 1 && cwd.ptr[cwd.len - 1] == '/') cwd.len--;
        if (workspace.len && cwd.len >= workspace.len
            && memcmp(cwd.ptr, workspace.ptr, workspace.len) == 0
            && (cwd.len == workspace.len || cwd.ptr[workspace.len] == '/')) {
            cwd.ptr += workspace.len;
            cwd.len -= workspace.len;
            while (cwd.len && cwd.ptr[0] == '/') { cwd.ptr++; cwd.len--; }
        }
        if (cwd.len && coai__core_has_param(t, p_dir))
            coai__core_arg(b, coai__core_param(t, p_dir), cwd);
        coai_buf_putc(b, '}');
        tc->tool = idx;
        return b->err ? -1 : 1;
    }
    m = coai_anthropic_exec_map(ex, tools, count, workspace, tc);
    return m;
}

/* ---- models ---- */

static void coai__gm_model(coai_buf *out, const coai_model *it)
{
    coai_str id = it->display_id.len ? it->display_id : it->id;
    coai_str name = it->display_name.len ? it->display_name : id;
    uint32_t ctx = 0, outl = 0;
    coai_model_limits(it->id, &ctx, &outl);
    coai_buf nm = { 0 };
    coai_buf_puts(&nm, "models/");
    coai_buf_append(&nm, id.ptr, id.len);
    coai_buf_puts(out, "{\"name\":");
    coai_json_str_append(out, nm.data ? (const char *)nm.data : "", nm.len);
    if (nm.err) out->err = 1;
    coai_buf_free(&nm);
    coai_buf_puts(out, ",\"baseModelId\":");
    coai_json_str_append(out, id.ptr, id.len);
    coai_buf_puts(out, ",\"version\":\"cursor\",\"displayName\":");
    coai_json_str_append(out, name.ptr, name.len);
    coai_buf_printf(out, ",\"description\":\"A Cursor model through cursor-oai\","
                    "\"inputTokenLimit\":%lu,\"outputTokenLimit\":%lu,"
                    "\"supportedGenerationMethods\":[\"generateContent\","
                    "\"streamGenerateContent\",\"countTokens\"],\"thinking\":true}",
                    (unsigned long)ctx, (unsigned long)outl);
}

int coai_models_write_gemini(coai_buf *out, const coai_models *m, const coai_model *one)
{
    size_t i;
    if (one) {
        coai__gm_model(out, one);
        return out->err ? -1 : 0;
    }
    coai_buf_puts(out, "{\"models\":[");
    for (i = 0; m && i < m->count; i++) {
        if (i) coai_buf_putc(out, ',');
        coai__gm_model(out, &m->items[i]);
    }
    coai_buf_puts(out, "]}");
    return out->err ? -1 : 0;
}

/* ---- errors ---- */

static const char *coai__gm_status_name(int st)
{
    switch (st) {
    case 400: case 413: case 415: return "INVALID_ARGUMENT";
    case 401: return "UNAUTHENTICATED";
    case 403: return "PERMISSION_DENIED";
    case 404: case 405: return "NOT_FOUND";
    case 408: case 504: return "DEADLINE_EXCEEDED";
    case 409: return "ABORTED";
    case 429: return "RESOURCE_EXHAUSTED";
    case 499: return "CANCELLED";
    case 501: return "UNIMPLEMENTED";
    case 503: return "UNAVAILABLE";
    default: return st >= 400 && st < 500 ? "FAILED_PRECONDITION" : "INTERNAL";
    }
}

static int coai__gm_error_write(coai_buf *out, const coai_error *e)
{
    int st = e->status ? e->status : 500;
    int quota = e->code && strcmp(e->code, "insufficient_quota") == 0;
    coai_buf_printf(out, "{\"error\":{\"code\":%d,\"message\":", st);
    if (quota) {
        /* "limit: 0" is what Gemini CLI reads as a quota that retrying will not bring back */
        coai_buf m = { 0 };
        coai_buf_puts(&m, e->message);
        coai_buf_puts(&m, " (Cursor usage quota, limit: 0 remaining in this period)");
        coai_json_str_append(out, m.data ? (const char *)m.data : "", m.len);
        if (m.err) out->err = 1;
        coai_buf_free(&m);
    } else {
        coai__core_json_cstr(out, e->message);
    }
    coai_buf_printf(out, ",\"status\":\"%s\"", coai__gm_status_name(st));
    if (quota)
        coai_buf_puts(out, ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.ErrorInfo\","
                      "\"reason\":\"USAGE_LIMIT_EXHAUSTED\",\"domain\":\"cursor.com\","
                      "\"metadata\":{\"quota_limit\":\"CursorUsage\"}},"
                      "{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\","
                      "\"violations\":[{\"subject\":\"cursor-account\",\"description\":"
                      "\"Cursor plan usage limit\",\"quotaId\":\"CursorUsage\"}]}]");
    else if (st == 429 && e->retry_after > 0)
        coai_buf_printf(out, ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc."
                        "RetryInfo\",\"retryDelay\":\"%ds\"}]", e->retry_after);
    return coai_buf_puts(out, "}}");
}

/* ---- the Gemini writer ---- */

static void coai__gm_w_init(coai_reply *r)
{
    (void)r;                   /* every chunk is written whole: nothing to prepare */
}

static void coai__gm_usage(const coai_reply *r, coai_buf *b)
{
    coai_usage u;
    int64_t th, cand;
    coai_reply_usage(r, &u);
    /* Cursor's reasoning count when it sent one, else the estimate from the thought text */
    th = u.reported ? u.reasoning_tokens : (int64_t)((r->rs_reason_units_ + 3) / 4);
    if (th > u.output_tokens) th = u.output_tokens;
    cand = u.output_tokens - th;
    coai_buf_printf(b, "\"usageMetadata\":{\"promptTokenCount\":%lld,"
                    "\"candidatesTokenCount\":%lld,\"totalTokenCount\":%lld",
                    (long long)u.input_tokens, (long long)cand,
                    (long long)(u.input_tokens + u.output_tokens));
    if (th) coai_buf_printf(b, ",\"thoughtsTokenCount\":%lld", (long long)th);
    if (u.cache_read_tokens)
        coai_buf_printf(b, ",\"cachedContentTokenCount\":%lld", (long long)u.cache_read_tokens);
    coai_buf_putc(b, '}');
}

/* The start of one chunk of the stream, up to and including "parts":[ */
static void coai__gm_chunk_begin(coai_reply *r)
{
    if (r->o_.stream == 2) { if (r->block_++) coai_buf_putc(&r->out, ','); }
    else coai_buf_puts(&r->out, "data: ");
    coai_buf_puts(&r->out, "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[");
}

static void coai__gm_tail(coai_reply *r, coai_buf *b, const char *finish)
{
    coai_buf_puts(b, "]},");
    if (finish) coai_buf_printf(b, "\"finishReason\":\"%s\",", finish);
    coai_buf_puts(b, "\"index\":0}],");
    coai__gm_usage(r, b);
    coai_buf_puts(b, ",\"modelVersion\":");
    coai_json_str_append(b, r->o_.model.ptr, r->o_.model.len);
    coai_buf_puts(b, ",\"responseId\":");
    coai_json_str_append(b, r->o_.completion_id.ptr, r->o_.completion_id.len);
    coai_buf_putc(b, '}');
}

static void coai__gm_chunk_end(coai_reply *r, const char *finish)
{
    coai__gm_tail(r, &r->out, finish);
    if (r->o_.stream != 2) coai_buf_puts(&r->out, "\r\n\r\n");
}

static void coai__gm_w_begin(coai_reply *r)
{
    if (r->o_.stream == 2) coai_buf_putc(&r->out, '[');
}

/* A JSON string with U+2028 / U+2029 escaped: Gemini's SDK finds each event with a
 * JavaScript regex whose "." stops at those two characters, so a raw one in a text would
 * leave the event unread (and the stream stalled). */
static void coai__gm_json_str(coai_buf *b, const char *s, size_t n)
{
    size_t i, from = 0;
    coai_buf_putc(b, '"');
    for (i = 0; i + 2 < n; i++) {
        if ((unsigned char)s[i] == 0xe2 && (unsigned char)s[i + 1] == 0x80
            && ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
            coai_buf tmp = { 0 };
            coai_json_str_append(&tmp, s + from, i - from);
            if (tmp.len >= 2) coai_buf_append(b, tmp.data + 1, tmp.len - 2);
            if (tmp.err) b->err = 1;
            coai_buf_free(&tmp);
            coai_buf_puts(b, (unsigned char)s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029");
            from = i + 3;
            i += 2;
        }
    }
    {
        coai_buf tmp = { 0 };
        coai_json_str_append(&tmp, s + from, n - from);
        if (tmp.len >= 2) coai_buf_append(b, tmp.data + 1, tmp.len - 2);
        if (tmp.err) b->err = 1;
        coai_buf_free(&tmp);
    }
    coai_buf_putc(b, '"');
}

static void coai__gm_text_part(coai_buf *b, int thought, const char *s, size_t n)
{
    coai_buf_puts(b, "{\"text\":");
    coai__gm_json_str(b, s, n);
    coai_buf_puts(b, thought ? ",\"thought\":true}" : "}");
}

static void coai__gm_w_delta(coai_reply *r, int ch, const char *s, size_t n)
{
    if (ch) r->rs_reason_units_ += coai__core_utf16_len(s, n);
    coai__gm_chunk_begin(r);
    coai__gm_text_part(&r->out, ch, s, n);
    coai__gm_chunk_end(r, NULL);
}

static void coai__gm_w_tool_call(coai_reply *r)
{
    (void)r;                   /* the calls go out together in the last chunk (w_end) */
}

static void coai__gm_calls(const coai_reply *r, coai_buf *b, int n)
{
    size_t i;
    for (i = 0; i < r->ncalls_; i++) {
        const coai_reply_call *c = &r->calls_[i];
        if (n++) coai_buf_putc(b, ',');
        coai_buf_puts(b, "{\"functionCall\":{\"id\":");
        coai_json_str_append(b, c->call_id.ptr, c->call_id.len);
        coai_buf_puts(b, ",\"name\":");
        coai_json_str_append(b, c->tool.ptr, c->tool.len);
        coai_buf_puts(b, ",\"args\":");
        if (c->args.len) coai_buf_append(b, c->args.ptr, c->args.len);
        else coai_buf_puts(b, "{}");
        coai_buf_puts(b, "}}");
    }
}

static const char *coai__gm_finish(coai_finish f)
{
    return f == COAI_FINISH_LENGTH ? "MAX_TOKENS" : "STOP";
}

static void coai__gm_w_end(coai_reply *r, coai_finish f)
{
    coai__gm_chunk_begin(r);
    if (r->has_tool_call_) coai__gm_calls(r, &r->out, 0);
    else coai_buf_puts(&r->out, "{\"text\":\"\"}");
    coai__gm_chunk_end(r, coai__gm_finish(f));
    if (r->o_.stream == 2) coai_buf_puts(&r->out, "]");
}

static void coai__gm_w_body(coai_reply *r, coai_finish f)
{
    coai_buf *o = &r->out;
    int n = 0;
    coai_buf_puts(o, "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[");
    if (r->reasoning_.len) {
        r->rs_reason_units_ = coai__core_utf16_len((const char *)r->reasoning_.data,
                                                 r->reasoning_.len);
        coai__gm_text_part(o, 1, (const char *)r->reasoning_.data, r->reasoning_.len);
        n++;
    }
    if (r->content_.len || (!n && !r->has_tool_call_)) {
        if (n++) coai_buf_putc(o, ',');
        coai__gm_text_part(o, 0, r->content_.data ? (const char *)r->content_.data : "",
                           r->content_.len);
    }
    if (r->has_tool_call_) coai__gm_calls(r, o, n);
    coai__gm_tail(r, o, coai__gm_finish(f));
}

static void coai__gm_w_error(coai_reply *r)
{
    if (r->o_.stream == 2) {
        if (r->block_++) coai_buf_putc(&r->out, ',');
        coai__gm_error_write(&r->out, &r->error);
        coai_buf_putc(&r->out, ']');
    } else {
        coai_buf_puts(&r->out, "data: ");
        coai__gm_error_write(&r->out, &r->error);
        coai_buf_puts(&r->out, "\r\n\r\n");
    }
}

static void coai__gm_w_keepalive(coai_reply *r)
{
    /* white space between events: Gemini's SDK skips it before "data: " (a ": comment"
     * line would stop its parser for good), and JSON allows it between array elements */
    coai_buf_puts(&r->out, "\r\n");
}

static const coai__writer coai__gm_writer = {
    coai__gm_w_init, coai__gm_w_begin, coai__gm_w_delta, coai__gm_w_tool_call,
    coai__gm_w_end, coai__gm_w_body, coai__gm_w_error, coai__gm_w_keepalive
};
/* PART:GEMINI impl end */

/* ADD-DIALECT: part */

/* ======================================================================== */
/* PART:DIALECTS impl (the dialect table: adding a dialect = one row)         */
/* ======================================================================== */

static const coai__writer coai__oa_writer = {
    coai__oa_w_init, coai__oa_w_begin, coai__oa_w_delta, coai__oa_w_tool_call,
    coai__oa_w_end, coai__oa_w_body, coai__oa_w_error, coai__oa_w_keepalive
};

typedef int (*coai__parse_fn)(coai_request *req, const char *body, size_t n, coai_error *err);
/* a parser that takes what the URL says: the model, and the stream mode (1 SSE, 2 array) */
typedef int (*coai__url_parse_fn)(coai_request *req, const char *body, size_t n,
                                  coai_str model, int stream, coai_error *err);
/* the model list (one = NULL) or one model in the dialect's shape */
typedef int (*coai__models_fn)(coai_buf *out, const coai_models *m, const coai_model *one,
                               int64_t now);
/* the 404 of GET .../models/{name} for a name the account does not have */
typedef void (*coai__model_missing_fn)(coai_error *err, const char *name, const char *path);

static int coai__an_error_write(coai_buf *out, const coai_error *e);
static int coai__an_error_status(const coai_error *e);
static int coai__oa_error_status(const coai_error *e);

static int coai__oa_models(coai_buf *out, const coai_models *m, const coai_model *one,
                           int64_t now)
{
    return one ? coai_models_write_model(out, one, now) : coai_models_write_list(out, m, now);
}

static int coai__an_models(coai_buf *out, const coai_models *m, const coai_model *one,
                           int64_t now)
{
    return one ? coai_models_write_anthropic_model(out, one, now)
               : coai_models_write_anthropic(out, m, now);
}

static int coai__gm_models(coai_buf *out, const coai_models *m, const coai_model *one,
                           int64_t now)
{
    (void)now;
    return coai_models_write_gemini(out, m, one);
}

static int coai__an_count_parse(coai_request *req, const char *body, size_t n, coai_str model,
                                int stream, coai_error *err)
{
    (void)model;
    (void)stream;
    return coai_anthropic_count_parse(req, body, n, err);
}

/* Gemini's countTokens body: {"contents": ...} or {"generateContentRequest": {...}} (the
 * model in the URL). */
static int coai__gm_count_parse(coai_request *req, const char *body, size_t n, coai_str model,
                                int stream, coai_error *err)
{
    cJSON *root = cJSON_ParseWithLength(body, n);
    cJSON *inner = cJSON_GetObjectItemCaseSensitive(root, "generateContentRequest");
    char *txt = cJSON_IsObject(inner) ? cJSON_PrintUnformatted(inner) : NULL;
    int rc = txt ? coai_gemini_parse(req, txt, strlen(txt), model, 0, err)
                 : coai_gemini_parse(req, body, n, model, 0, err);
    (void)stream;
    free(txt);
    cJSON_Delete(root);
    return rc;
}

/* (the message is cut at 359 bytes, as it always was: a long name does not crowd it out) */
static void coai__oa_model_missing(coai_error *err, const char *name, const char *path)
{
    char msg[360];
    (void)path;
    snprintf(msg, sizeof msg, "The model '%s' does not exist (not a model of this Cursor "
             "account; GET /v1/models lists them)", name);
    coai_error_set(err, 404, "invalid_request_error", "model_not_found", NULL, "%s", msg);
}

static void coai__gm_model_missing(coai_error *err, const char *name, const char *path)
{
    char msg[360];
    int v1 = path[0] && path[1] && path[2] == '1' && path[3] == '/';
    snprintf(msg, sizeof msg, "models/%s is not found for API version %s (not a model of this "
             "Cursor account; GET %s lists them)", name, v1 ? "v1" : "v1beta",
             v1 ? "/v1/models" : "/v1beta/models");
    coai_error_set(err, 404, "invalid_request_error", "model_not_found", NULL, "%s", msg);
}

/* One row per dialect: every fact of its client API. A dialect adds its row here (and its
 * value before COAI_DIALECT_COUNT_); a NULL function means "as OpenAI Chat Completions"
 * (writer, exec mapping, models, errors) or "none" (url parser, count-tokens). */
static const struct coai__dialect_row {
    coai_dialect_info info;     /* name, id prefix and hex digits, key header and query,
                                 * client header, model in the URL, stored, model names */
    coai__parse_fn parse;       /* body -> coai_request */
    const coai__writer *writer; /* the reply's events, spelled the dialect's way */
    coai__exec_map_fn exec_map; /* how execs map to its clients' tools */
    coai__url_parse_fn parse_url;     /* info.url_model: the parser taking the URL's part */
    coai__url_parse_fn count_parse;   /* its count-tokens body, or NULL: no such route */
    const char *count_key;            /* the count's member: {"input_tokens":N} */
    const char *messages_param;       /* the member holding the conversation, for errors */
    coai__models_fn models;           /* GET .../models in its shape */
    const char *model_prefix;         /* a prefix GET .../models/{name} may carry */
    coai__model_missing_fn model_missing;
    int (*error_write)(coai_buf *out, const coai_error *e);
    int (*error_status)(const coai_error *e);
} coai__dialects[COAI_DIALECT_COUNT_] = {
    /* COAI_DIALECT_OPENAI_CHAT */
    { { "openai-chat", "chatcmpl-", 24, NULL, NULL, NULL, 0, 0, 0, COAI_MODEL_NAMES_CURSOR },
      coai__oa_chat_parse, &coai__oa_writer, coai__oa_chat_exec_map, NULL, NULL, NULL,
      "messages", coai__oa_models, NULL, coai__oa_model_missing, coai_error_write, coai__oa_error_status },
    /* COAI_DIALECT_ANTHROPIC */
    { { "anthropic", "msg_", 24, "x-api-key", NULL, "anthropic-version", 0, 0, 0,
        COAI_MODEL_NAMES_CLAUDE },
      coai_anthropic_parse, &coai__an_writer, coai_anthropic_exec_map, NULL,
      coai__an_count_parse, "input_tokens", "messages", coai__an_models, NULL, coai__oa_model_missing,
      coai__an_error_write, coai__an_error_status },
    /* COAI_DIALECT_RESPONSES */
    { { "openai-responses", "resp_", 32, NULL, NULL, NULL, 0, 0, 1, COAI_MODEL_NAMES_CURSOR },
      coai__rs_parse_plain, &coai__rs_writer, coai_responses_exec_map, NULL, NULL, NULL,
      "input", coai__oa_models, NULL, coai__oa_model_missing, coai_error_write, NULL },
    /* COAI_DIALECT_GEMINI */
    { { "gemini", "", 24, "x-goog-api-key", "key", NULL, 1, 1, 0, COAI_MODEL_NAMES_GEMINI },
      coai__gm_parse_plain, &coai__gm_writer, coai_gemini_exec_map, coai_gemini_parse,
      coai__gm_count_parse, "totalTokens", "contents", coai__gm_models, "models/", coai__gm_model_missing,
      coai__gm_error_write, NULL },
    /* ADD-DIALECT: row */
};

static const struct coai__dialect_row *coai__dialect_row(coai_dialect d)
{
    return (unsigned)d < COAI_DIALECT_COUNT_ ? &coai__dialects[d] : NULL;
}

const coai_dialect_info *coai_dialect_get(coai_dialect d)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    return row ? &row->info : NULL;
}

static coai__exec_map_fn coai__exec_map_of(coai_dialect d)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    return row && row->exec_map ? row->exec_map : coai_exec_map;
}

static const coai__writer *coai__writer_of(coai_dialect d)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    return row && row->writer ? row->writer : &coai__oa_writer;
}

/* The one home of the sentence for a \u escape without its four hex digits. */
static void coai__bad_escape(coai_error *err)
{
    coai_error_set(err, 400, "invalid_request_error", NULL, NULL,
                   "We could not parse the JSON body of your request: a \\u escape needs "
                   "four hex digits");
}

int coai_request_body_fix(char *body, size_t n, coai_error *err)
{
    if (coai_json_fix_surrogates(body, n) >= 0) return 0;
    coai__bad_escape(err);
    return -1;
}

/* A dialect this build does not have: 404. */
static int coai__no_dialect(coai_error *err)
{
    coai_error_set(err, 404, "invalid_request_error", NULL, NULL,
                   "This API is not supported by this build");
    return COAI_ERR_INVALID;
}

int coai_dialect_parse(coai_request *req, coai_dialect d, char *body, size_t n,
                       coai_str url_model, int url_stream, const coai_image_limits *lim,
                       coai_error *err)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    if (!row || !row->info.url_model || !row->parse_url)
        return coai_request_parse_ex(req, d, body, n, lim, err);
    memset(req, 0, sizeof *req);
    if (coai_request_body_fix(body, n, err) < 0) return COAI_ERR_JSON;
    if (row->parse_url(req, body, n, url_model, url_stream, err) < 0) return COAI_ERR_INVALID;
    return coai_request_check(req, lim, err);
}

int coai_dialect_count_tokens(coai_buf *out, coai_dialect d, char *body, size_t n,
                              coai_str url_model, const coai_image_limits *lim,
                              coai_error *err)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    coai_request req;
    if (coai_request_body_fix(body, n, err) < 0) return COAI_ERR_JSON;
    if (!row || !row->count_parse) return coai__no_dialect(err);
    if (row->count_parse(&req, body, n, url_model, 0, err) < 0) return COAI_ERR_INVALID;
    if (coai_request_check(&req, lim, err) < 0) return COAI_ERR_INVALID;
    coai_buf_printf(out, "{\"%s\":%lld}", row->count_key,
                    (long long)coai_request_input_tokens(&req));
    coai_request_free(&req);
    return out->err ? COAI_ERR_NOMEM : 0;
}

int coai_dialect_models_write(coai_buf *out, coai_dialect d, const coai_models *m,
                              const coai_model *one, int64_t now)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    return (row && row->models ? row->models : coai__oa_models)(out, m, one, now);
}

const coai_model *coai_dialect_model_find(coai_dialect d, const coai_models *m,
                                          const char *name, const char *path, coai_error *err)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    const char *pre = row && row->model_prefix ? row->model_prefix : "";
    coai_str want = coai_str_c(name), a;
    size_t i, j, pl = strlen(pre);
    if (pl && want.len > pl && memcmp(want.ptr, pre, pl) == 0) {
        want.ptr += pl;
        want.len -= pl;
    }
    for (i = 0; m && i < m->count; i++) {
        if (coai_str_eq(m->items[i].id, want.ptr) || coai_str_eq(m->items[i].display_id, want.ptr))
            return &m->items[i];
        for (j = 0; coai_model_alias(&m->items[i], j, &a) == 0; j++)
            if (coai_str_eq(a, want.ptr)) return &m->items[i];
    }
    (row && row->model_missing ? row->model_missing : coai__oa_model_missing)(err, want.ptr,
                                                                               path ? path : "");
    return NULL;
}

int coai_dialect_model_pick(coai_dialect d, const coai_models *m, coai_str want,
                            const char *current, int thinking, coai_str *out, coai_error *err)
{
    const coai_dialect_info *di = coai_dialect_get(d);
    coai_model_names names = di ? di->model_names : COAI_MODEL_NAMES_CURSOR;
    coai_buf b = { 0 };
    size_t i;
    if (names == COAI_MODEL_NAMES_CURSOR) return 0;
    if (names == COAI_MODEL_NAMES_GEMINI) {
        static const char pre[] = "gemini-";
        if (want.len < sizeof pre - 1) return 0;
        for (i = 0; i < sizeof pre - 1; i++) {
            char c = want.ptr[i];
            if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            if (c != pre[i]) return 0;
        }
    }
    for (i = 0; i < m->count; i++)
        if (coai_str_eq(m->items[i].id, current)) return 0;
    if (names == COAI_MODEL_NAMES_GEMINI) {
        *out = coai_models_resolve(m, coai_str_c("auto"));
        return 1;
    }
    if (coai_models_resolve_claude(m, want, thinking, out)) return 1;
    for (i = 0; i < m->count; i++) {
        coai_str id = m->items[i].display_id.len ? m->items[i].display_id : m->items[i].id;
        if (i) coai_buf_puts(&b, ", ");
        coai_buf_append(&b, id.ptr, id.len);
    }
    coai_error_set(err, 404, "not_found_error", "model_not_found", "model",
                   "model: '%.*s' is not a model of this Cursor account (set "
                   "CURSOR_OAI_MODEL_MAP to map it). Available: %s", (int)want.len, want.ptr,
                   b.data && !b.err ? (const char *)b.data : "(none)");
    coai_buf_free(&b);
    return -1;
}

int coai_request_parse(coai_request *req, coai_dialect d, const char *body, size_t n,
                       coai_error *err)
{
    return coai_request_parse_ex(req, d, body, n, NULL, err);
}

static int coai__request_images(coai_request *req, const coai_image_limits *lim,
                                coai_error *err);

static int coai__hex4(const char *s, unsigned *v)
{
    int i;
    *v = 0;
    for (i = 0; i < 4; i++) {
        char c = s[i];
        *v <<= 4;
        if (c >= '0' && c <= '9') *v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') *v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') *v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    return 1;
}

/* Lone UTF-16 surrogate escapes ("\ud800" without its low half, or a lone "\udc00") are
 * valid JSON syntax but stand for no character, and cJSON refuses them. Each becomes
 * "\ufffd" (U+FFFD, what JavaScript-based servers end up with), the same six bytes, in a
 * copy. Backslashes only occur inside strings in valid JSON, so walking escape pairs is
 * exact. Returns the malloc'd copy, or NULL when there was nothing to fix (or no memory:
 * *nomem = 1). *fixed counts the replacements. A "\u" without four hex digits sets *bad:
 * cJSON would read it as U+0000 and cut the string there. */
static char *coai__json_fix_surrogates(const char *s, size_t n, size_t *fixed, int *nomem,
                                       int *bad)
{
    char *out = NULL;
    size_t i = 0;
    *fixed = 0;
    *nomem = 0;
    *bad = 0;
    while (i < n) {
        unsigned v, w;
        int lone;
        if (s[i] != '\\') { i++; continue; }
        if (i + 1 < n && s[i + 1] == 'u' && (i + 5 >= n || !coai__hex4(s + i + 2, &v))) {
            free(out);
            *bad = 1;
            return NULL;
        }
        if (i + 5 >= n || s[i + 1] != 'u' || !coai__hex4(s + i + 2, &v) || v < 0xd800
            || v > 0xdfff) {
            i += 2;
            continue;
        }
        lone = v >= 0xdc00 || !(i + 11 < n && s[i + 6] == '\\' && s[i + 7] == 'u'
                                && coai__hex4(s + i + 8, &w) && w >= 0xdc00 && w <= 0xdfff);
        if (!lone) { i += 12; continue; }
        if (!out) {
            out = (char *)malloc(n + 1);
            if (!out) { *nomem = 1; return NULL; }
            memcpy(out, s, n);
            out[n] = 0;
        }
        memcpy(out + i + 2, "fffd", 4);
        (*fixed)++;
        i += 6;
    }
    return out;
}

static int coai__strcmp_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that occurs twice in one object anywhere in j (depth-first), or NULL;
 * *nomem = 1 when the check could not allocate. Sorting the names keeps a huge object
 * O(n log n). */
static const char *coai__json_dup_key(const cJSON *j, int *nomem)
{
    const cJSON *c;
    const char *dup = NULL;
    if (!j || !(cJSON_IsObject(j) || cJSON_IsArray(j))) return NULL;
    if (cJSON_IsObject(j)) {
        size_t k = 0, count = 0, i;
        const char **names;
        for (c = j->child; c; c = c->next) count++;
        if (count > 1) {
            names = (const char **)malloc(count * sizeof *names);
            if (!names) { *nomem = 1; return NULL; }
            for (c = j->child; c; c = c->next) names[k++] = c->string ? c->string : "";
            qsort(names, count, sizeof *names, coai__strcmp_p);
            for (i = 1; i < count && !dup; i++)
                if (strcmp(names[i - 1], names[i]) == 0) dup = names[i];
            free(names);
            if (dup) return dup;
        }
    }
    for (c = j->child; c && !dup && !*nomem; c = c->next) dup = coai__json_dup_key(c, nomem);
    return dup;
}

long coai_json_fix_surrogates(char *body, size_t n)
{
    size_t fixed = 0;
    int nomem = 0, bad = 0;
    char *copy = body ? coai__json_fix_surrogates(body, n, &fixed, &nomem, &bad) : NULL;
    if (bad) return -1;
    if (copy) memcpy(body, copy, n);
    free(copy);
    /* without memory for the copy the body stays as it is: cJSON then refuses it */
    return (long)fixed;
}

size_t coai_json_values(const char *s, size_t n)
{
    unsigned char arr[256];            /* 1: the container at this depth is an array */
    size_t depth = 0, count = 0, i;
    int in_str = 0, opened = 0;
    for (i = 0; i < n; i++) {
        char ch = s[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') continue;
        if (opened) {                  /* the first element of an array that is not empty */
            opened = 0;
            if (ch != ']') count++;
        }
        switch (ch) {
        case '"': in_str = 1; break;
        case '[': if (depth < sizeof arr) arr[depth] = 1; depth++; opened = 1; break;
        case '{': if (depth < sizeof arr) arr[depth] = 0; depth++; break;
        case ']': case '}': if (depth) depth--; break;
        case ':': count++; break;      /* an object member's value */
        case ',': if (depth && depth <= sizeof arr && arr[depth - 1]) count++; break;
        default: break;
        }
    }
    return n ? count + 1 : 0;          /* + the top-level value */
}

/* The parameter that holds a dialect's messages, for errors. */
static const char *coai__messages_param(coai_dialect d)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    return row && row->messages_param ? row->messages_param : "messages";
}

int coai_request_check(coai_request *req, const coai_image_limits *lim, coai_error *err)
{
    int nomem = 0, rc;
    const char *dup;
    if (req->message_count > COAI_MAX_MESSAGES) {
        /* one bound for every dialect, on the messages as parsed (a system prompt and each
         * tool result count as one) */
        const char *param = coai__messages_param(req->dialect);
        coai_error_set(err, 400, "invalid_request_error", "too_many_messages", param,
                       "%s: the conversation has %zu messages; at most %d are accepted in one "
                       "request", param, req->message_count, COAI_MAX_MESSAGES);
        err->no_retry = 1;
        coai_request_free(req);
        return COAI_ERR_INVALID;
    }
    dup = coai__json_dup_key(req->root_, &nomem);
    if (dup) {
        char key[64];
        coai__core_clean_copy(key, 0, sizeof key, dup, strlen(dup));
        coai_error_set(err, 400, "invalid_request_error", "duplicate_key", NULL,
                       "The request body has the key '%s' twice in one object; duplicate "
                       "keys are refused (JSON parsers disagree about which one counts)", key);
        err->no_retry = 1;
        coai_request_free(req);
        return COAI_ERR_INVALID;
    }
    if (nomem) {
        coai_request_free(req);
        coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
        return COAI_ERR_NOMEM;
    }
    if ((rc = coai__request_images(req, lim, err)) < 0) coai_request_free(req);
    return rc;
}

int coai_request_parse_ex(coai_request *req, coai_dialect d, const char *body, size_t n,
                          const coai_image_limits *lim, coai_error *err)
{
    int rc, nomem = 0, bad = 0;
    size_t fixed = 0;
    char *copy;
    const struct coai__dialect_row *row = coai__dialect_row(d);
    if (!row || !row->parse) {
        memset(req, 0, sizeof *req);
        return coai__no_dialect(err);
    }
    /* The parsers keep views into the cJSON tree only, never into the body, so the fixed
     * copy can go as soon as the parse is done. */
    copy = body ? coai__json_fix_surrogates(body, n, &fixed, &nomem, &bad) : NULL;
    if (bad) {
        memset(req, 0, sizeof *req);
        coai__bad_escape(err);
        err->no_retry = 1;
        return COAI_ERR_JSON;
    }
    if (nomem) {
        memset(req, 0, sizeof *req);
        coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
        return COAI_ERR_NOMEM;
    }
    rc = row->parse(req, copy ? copy : body, n, err);
    free(copy);
    if (rc == 0) req->dialect = d;
    if (rc == 0) rc = coai_request_check(req, lim, err);
    return rc;
}

/* Anthropic's error type for an error's status (their table of statuses). */
static const char *coai__an_error_type(const coai_error *e)
{
    switch (e->status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 402: return "billing_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return e->status >= 400 && e->status < 500 ? "invalid_request_error" : "api_error";
    }
}

/* OpenAI Chat Completions' status for an error. */
static int coai__oa_error_status(const coai_error *e)
{
    int st = e->status ? e->status : 500;
    /* A usage limit to a Chat Completions client: 402. Qwen Code, Kilo Code and OpenCode
     * retry every 429 whatever x-should-retry says (measured: README "How errors look"), a
     * 402 they show at once; the OpenAI SDKs do not retry it either and keep the body's
     * type / code insufficient_quota. */
    if (st == 429 && e->code && strcmp(e->code, "insufficient_quota") == 0) return 402;
    return st;
}

/* Anthropic's: 529 for an overloaded or unavailable upstream, 500 for other 5xx. */
static int coai__an_error_status(const coai_error *e)
{
    int st = e->status ? e->status : 500;
    if (st == 503) return 529;
    if (st >= 500 && st != 529) return 500;
    return st;
}

static int coai__an_error_write(coai_buf *out, const coai_error *e)
{
    coai_buf_puts(out, "{\"type\":\"error\",\"error\":{\"type\":");
    coai__core_json_cstr(out, coai__an_error_type(e));
    coai_buf_puts(out, ",\"message\":");
    coai__core_json_cstr(out, e->message);
    return coai_buf_puts(out, "}}");
}

int coai_error_status_as(const coai_error *e, coai_dialect d)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    if (row && row->error_status) return row->error_status(e);
    return e->status ? e->status : 500;
}

int coai_error_write_as(coai_buf *out, const coai_error *e, coai_dialect d)
{
    const struct coai__dialect_row *row = coai__dialect_row(d);
    return (row && row->error_write ? row->error_write : coai_error_write)(out, e);
}
/* PART:DIALECTS impl end */

/* ======================================================================== */
/* PART:QUOTA impl                                                          */
/* ======================================================================== */

/* An int64 member: a JSON number that is a whole value in range, or a string of an
 * optional '-' and 1..18 digits (proto3 JSON's int64 form). Anything else is unknown. */
static int64_t coai__qu_i64(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d != d || d < -9.0e15 || d > 9.0e15 || d != (double)(int64_t)d) return COAI_QUOTA_NONE;
        return (int64_t)d;
    }
    if (cJSON_IsString(v) && v->valuestring) {
        const char *s = v->valuestring;
        int neg = *s == '-';
        size_t i = (size_t)neg, nd = 0;
        int64_t x = 0;
        for (; s[i]; i++, nd++) {
            if (s[i] < '0' || s[i] > '9' || nd >= 18) return COAI_QUOTA_NONE;
            x = x * 10 + (s[i] - '0');
        }
        return nd ? (neg ? -x : x) : COAI_QUOTA_NONE;
    }
    return COAI_QUOTA_NONE;
}

/* A percentage: a finite number or numeric string in 0..1e6; else -1 (unknown). */
static double coai__qu_pct(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    double d = -1;
    if (cJSON_IsNumber(v)) d = v->valuedouble;
    else if (cJSON_IsString(v) && v->valuestring && v->valuestring[0]) {
        char *end = NULL;
        d = strtod(v->valuestring, &end);
        if (!end || *end) d = -1;
    }
    return (d == d && d >= 0 && d <= 1e6) ? d : -1;
}

/* Copy a string member cleanly (valid UTF-8, control bytes dropped, cut at a boundary). */
static void coai__qu_str(char *dst, size_t cap, const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    const unsigned char *p;
    size_t i = 0, n, pos = 0;
    dst[0] = 0;
    if (!cJSON_IsString(v) || !v->valuestring) return;
    p = (const unsigned char *)v->valuestring;
    n = strlen(v->valuestring);
    while (i < n) {
        int len = coai__utf8_seq(p + i, n - i);
        if (len <= 0) { i++; continue; }
        if (len == 1 && (p[i] < 0x20 || p[i] == 0x7f)) { i++; continue; }
        if (pos + (size_t)len >= cap) break;
        memcpy(dst + pos, p + i, (size_t)len);
        pos += (size_t)len;
        i += (size_t)len;
    }
    dst[pos] = 0;
}

static cJSON *coai__qu_load(const char *s, size_t n)
{
    cJSON *j;
    if (!s || !n || n > (1u << 24) || coai_utf8_valid_prefix(s, n) != n) return NULL;
    j = cJSON_ParseWithLength(s, n);
    if (j && !cJSON_IsObject(j)) { cJSON_Delete(j); j = NULL; }
    return j;
}

int coai_quota_parse(coai_quota *u, const char *period, size_t n, const char *plan, size_t pn)
{
    cJSON *j, *p;
    const cJSON *pu, *sl, *pi;
    memset(u, 0, sizeof *u);
    u->cycle_start_ms = u->cycle_end_ms = COAI_QUOTA_NONE;
    u->used_cents = u->included_spend_cents = u->bonus_cents = COAI_QUOTA_NONE;
    u->limit_cents = u->remaining_cents = COAI_QUOTA_NONE;
    u->od_total_cents = u->od_limit_cents = u->od_used_cents = COAI_QUOTA_NONE;
    u->od_remaining_cents = u->plan_included_cents = COAI_QUOTA_NONE;
    u->percent_used = u->auto_percent_used = u->api_percent_used = -1;
    j = coai__qu_load(period, n);
    if (!j) return COAI_ERR_JSON;
    u->cycle_start_ms = coai__qu_i64(j, "billingCycleStart");
    u->cycle_end_ms = coai__qu_i64(j, "billingCycleEnd");
    coai__qu_str(u->message, sizeof u->message, j, "displayMessage");
    pu = cJSON_GetObjectItemCaseSensitive(j, "planUsage");
    if (cJSON_IsObject(pu)) {
        u->have_plan_usage = 1;
        u->used_cents = coai__qu_i64(pu, "totalSpend");
        u->included_spend_cents = coai__qu_i64(pu, "includedSpend");
        u->bonus_cents = coai__qu_i64(pu, "bonusSpend");
        u->limit_cents = coai__qu_i64(pu, "limit");
        u->remaining_cents = coai__qu_i64(pu, "remaining");
        u->percent_used = coai__qu_pct(pu, "totalPercentUsed");
        u->auto_percent_used = coai__qu_pct(pu, "autoPercentUsed");
        u->api_percent_used = coai__qu_pct(pu, "apiPercentUsed");
    }
    sl = cJSON_GetObjectItemCaseSensitive(j, "spendLimitUsage");
    if (cJSON_IsObject(sl)) {
        int indiv = coai__qu_i64(sl, "individualLimit") != COAI_QUOTA_NONE;
        u->have_on_demand = 1;
        u->od_total_cents = coai__qu_i64(sl, "totalSpend");
        u->od_limit_cents = coai__qu_i64(sl, indiv ? "individualLimit" : "pooledLimit");
        u->od_used_cents = coai__qu_i64(sl, indiv ? "individualUsed" : "pooledUsed");
        u->od_remaining_cents = coai__qu_i64(sl, indiv ? "individualRemaining"
                                                     : "pooledRemaining");
        coai__qu_str(u->od_limit_type, sizeof u->od_limit_type, sl, "limitType");
    }
    cJSON_Delete(j);
    p = coai__qu_load(plan, plan ? pn : 0);
    pi = cJSON_GetObjectItemCaseSensitive(p, "planInfo");
    if (cJSON_IsObject(pi)) {
        int64_t end = coai__qu_i64(pi, "billingCycleEnd");
        coai__qu_str(u->plan_name, sizeof u->plan_name, pi, "planName");
        coai__qu_str(u->plan_price, sizeof u->plan_price, pi, "price");
        u->plan_included_cents = coai__qu_i64(pi, "includedAmountCents");
        if (u->cycle_end_ms == COAI_QUOTA_NONE) u->cycle_end_ms = end;
    }
    cJSON_Delete(p);
    return 0;
}

int coai_quota_limit_reached(const coai_quota *u)
{
    if (u->remaining_cents == COAI_QUOTA_NONE) return -1;
    if (u->remaining_cents > 0) return 0;
    if (u->have_on_demand && u->od_limit_cents != COAI_QUOTA_NONE && u->od_limit_cents > 0
        && u->od_remaining_cents != COAI_QUOTA_NONE)
        return u->od_remaining_cents <= 0;
    return 1;
}

/* Days since 1970-01-01 -> civil date (proleptic Gregorian; H. Hinnant's algorithm). */
static void coai__qu_civil(int64_t days, int64_t *y, int *m, int *d)
{
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

void coai_iso8601(char out[21], int64_t ms)
{
    /* 0000-01-01 .. 9999-12-31 in ms since the epoch */
    const int64_t lo = -62167219200000LL, hi = 253402300799000LL;
    int64_t s, days, sod, y;
    int m, d;
    if (ms < lo) ms = lo;
    if (ms > hi) ms = hi;
    s = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
    days = s >= 0 ? s / 86400 : -((-s + 86399) / 86400);
    sod = s - days * 86400;
    coai__qu_civil(days, &y, &m, &d);
    {
        /* digits by hand: every value is in range here, and no printf width guesswork */
        unsigned v[6];
        static const unsigned w[6] = { 4, 2, 2, 2, 2, 2 };
        static const char sep[6] = { '-', '-', 'T', ':', ':', 'Z' };
        unsigned i, k, pos = 0;
        v[0] = (unsigned)y; v[1] = (unsigned)m; v[2] = (unsigned)d;
        v[3] = (unsigned)(sod / 3600); v[4] = (unsigned)(sod / 60 % 60); v[5] = (unsigned)(sod % 60);
        for (i = 0; i < 6; i++) {
            unsigned x = v[i];
            for (k = w[i]; k-- > 0; x /= 10) out[pos + k] = (char)('0' + x % 10);
            pos += w[i];
            out[pos++] = sep[i];
        }
        out[pos] = 0;
    }
}

static void coai__qu_num(coai_buf *out, const char *key, int64_t v, int comma)
{
    if (comma) coai_buf_putc(out, ',');
    coai_buf_printf(out, "\"%s\":", key);
    if (v == COAI_QUOTA_NONE) coai_buf_puts(out, "null");
    else coai_buf_printf(out, "%lld", (long long)v);
}

static void coai__qu_pctj(coai_buf *out, const char *key, double v)
{
    coai_buf_printf(out, ",\"%s\":", key);
    if (v < 0) coai_buf_puts(out, "null");
    else coai_json_num_append(out, v);
}

static void coai__qu_strj(coai_buf *out, const char *key, const char *s, int comma)
{
    if (comma) coai_buf_putc(out, ',');
    coai_buf_printf(out, "\"%s\":", key);
    if (!s[0]) coai_buf_puts(out, "null");
    else coai_json_str_append(out, s, strlen(s));
}

int coai_quota_write_json(coai_buf *out, const coai_quota *u)
{
    char iso[21];
    int lr = coai_quota_limit_reached(u);
    coai_buf_puts(out, "{\"object\":\"cursor.usage\",\"plan\":");
    if (u->plan_name[0] || u->plan_price[0] || u->plan_included_cents != COAI_QUOTA_NONE) {
        coai_buf_putc(out, '{');
        coai__qu_strj(out, "name", u->plan_name, 0);
        coai__qu_strj(out, "price", u->plan_price, 1);
        coai__qu_num(out, "included_cents", u->plan_included_cents, 1);
        coai_buf_putc(out, '}');
    } else {
        coai_buf_puts(out, "null");
    }
    coai_buf_puts(out, ",\"billing_cycle\":");
    if (u->cycle_start_ms != COAI_QUOTA_NONE || u->cycle_end_ms != COAI_QUOTA_NONE) {
        coai_buf_puts(out, "{\"start\":");
        if (u->cycle_start_ms == COAI_QUOTA_NONE) coai_buf_puts(out, "null");
        else { coai_iso8601(iso, u->cycle_start_ms); coai_buf_printf(out, "\"%s\"", iso); }
        coai_buf_puts(out, ",\"end\":");
        if (u->cycle_end_ms == COAI_QUOTA_NONE) coai_buf_puts(out, "null");
        else { coai_iso8601(iso, u->cycle_end_ms); coai_buf_printf(out, "\"%s\"", iso); }
        coai__qu_num(out, "start_ms", u->cycle_start_ms, 1);
        coai__qu_num(out, "end_ms", u->cycle_end_ms, 1);
        coai_buf_putc(out, '}');
    } else {
        coai_buf_puts(out, "null");
    }
    coai_buf_puts(out, ",\"resets_at\":");
    if (u->cycle_end_ms == COAI_QUOTA_NONE) coai_buf_puts(out, "null");
    else { coai_iso8601(iso, u->cycle_end_ms); coai_buf_printf(out, "\"%s\"", iso); }
    coai_buf_puts(out, ",\"included\":");
    if (u->have_plan_usage) {
        coai_buf_putc(out, '{');
        coai__qu_num(out, "used_cents", u->used_cents, 0);
        coai__qu_num(out, "limit_cents", u->limit_cents, 1);
        coai__qu_num(out, "remaining_cents", u->remaining_cents, 1);
        coai__qu_num(out, "included_spend_cents", u->included_spend_cents, 1);
        coai__qu_num(out, "bonus_cents", u->bonus_cents, 1);
        coai__qu_pctj(out, "percent_used", u->percent_used);
        coai__qu_pctj(out, "auto_percent_used", u->auto_percent_used);
        coai__qu_pctj(out, "api_percent_used", u->api_percent_used);
        coai_buf_putc(out, '}');
    } else {
        coai_buf_puts(out, "null");
    }
    coai_buf_puts(out, ",\"on_demand\":");
    if (u->have_on_demand) {
        coai_buf_putc(out, '{');
        coai__qu_num(out, "used_cents", u->od_used_cents, 0);
        coai__qu_num(out, "limit_cents", u->od_limit_cents, 1);
        coai__qu_num(out, "remaining_cents", u->od_remaining_cents, 1);
        coai__qu_num(out, "total_spend_cents", u->od_total_cents, 1);
        coai__qu_strj(out, "limit_type", u->od_limit_type, 1);
        coai_buf_putc(out, '}');
    } else {
        coai_buf_puts(out, "null");
    }
    coai_buf_printf(out, ",\"limit_reached\":%s", lr < 0 ? "null" : lr ? "true" : "false");
    coai__qu_strj(out, "message", u->message, 1);
    coai_buf_putc(out, '}');
    return out->err ? -1 : 0;
}

static void coai__qu_money(coai_buf *out, int64_t cents)
{
    int64_t a;
    if (cents == COAI_QUOTA_NONE) { coai_buf_puts(out, "?"); return; }
    a = cents < 0 ? -cents : cents;
    coai_buf_printf(out, "%s$%lld.%02lld", cents < 0 ? "-" : "", (long long)(a / 100),
                    (long long)(a % 100));
}

/* "in 6 days" / "in 3 hours" / "in 12 minutes" / "3 days ago" */
static void coai__qu_rel(coai_buf *out, int64_t when_ms, int64_t now_ms)
{
    int64_t d = when_ms - now_ms, a = d < 0 ? -d : d, v;
    const char *unit;
    if (a >= 2 * 86400000LL) { v = a / 86400000LL; unit = "day"; }
    else if (a >= 2 * 3600000LL) { v = a / 3600000LL; unit = "hour"; }
    else { v = a / 60000LL; unit = "minute"; }
    coai_buf_printf(out, "%s%lld %s%s%s", d >= 0 ? "in " : "", (long long)v, unit,
                    v == 1 ? "" : "s", d >= 0 ? "" : " ago");
}

static double coai__qu_percent(const coai_quota *u)
{
    if (u->percent_used >= 0) return u->percent_used;
    if (u->used_cents != COAI_QUOTA_NONE && u->limit_cents != COAI_QUOTA_NONE
        && u->limit_cents > 0)
        return (double)u->used_cents * 100.0 / (double)u->limit_cents;
    return -1;
}

static void coai__qu_date(coai_buf *out, int64_t ms)
{
    char iso[21];
    coai_iso8601(iso, ms);
    coai_buf_append(out, iso, 10);
}

int coai_quota_write_text(coai_buf *out, const coai_quota *u, int64_t now_ms)
{
    double pct = coai__qu_percent(u);
    int lr = coai_quota_limit_reached(u);
    if (u->plan_name[0] || u->plan_price[0]) {
        coai_buf_printf(out, "Plan:           %s", u->plan_name[0] ? u->plan_name : "?");
        if (u->plan_price[0]) coai_buf_printf(out, " (%s)", u->plan_price);
        coai_buf_putc(out, '\n');
    }
    if (u->cycle_start_ms != COAI_QUOTA_NONE || u->cycle_end_ms != COAI_QUOTA_NONE) {
        char iso[21];
        coai_buf_puts(out, "Billing cycle:  ");
        if (u->cycle_start_ms != COAI_QUOTA_NONE) coai__qu_date(out, u->cycle_start_ms);
        else coai_buf_puts(out, "?");
        coai_buf_puts(out, " to ");
        if (u->cycle_end_ms != COAI_QUOTA_NONE) {
            coai_iso8601(iso, u->cycle_end_ms);
            coai_buf_printf(out, "%.10s (resets ", iso);
            coai__qu_rel(out, u->cycle_end_ms, now_ms);
            coai_buf_printf(out, ", %.10s %.5s UTC)", iso, iso + 11);
        } else {
            coai_buf_puts(out, "? (reset time unknown)");
        }
        coai_buf_putc(out, '\n');
    }
    if (u->have_plan_usage) {
        coai_buf_puts(out, "Included usage: ");
        coai__qu_money(out, u->used_cents);
        if (u->limit_cents != COAI_QUOTA_NONE) {
            coai_buf_puts(out, " of ");
            coai__qu_money(out, u->limit_cents);
        }
        coai_buf_puts(out, " used");
        if (pct >= 0) coai_buf_printf(out, " (%.0f%%)", pct);
        if (u->remaining_cents != COAI_QUOTA_NONE) {
            coai_buf_puts(out, ", ");
            coai__qu_money(out, u->remaining_cents);
            coai_buf_puts(out, " left");
        }
        coai_buf_putc(out, '\n');
        if (u->auto_percent_used >= 0 || u->api_percent_used >= 0) {
            coai_buf_puts(out, "  Auto / API:   ");
            if (u->auto_percent_used >= 0) coai_buf_printf(out, "%.0f%%", u->auto_percent_used);
            else coai_buf_puts(out, "?");
            coai_buf_puts(out, " / ");
            if (u->api_percent_used >= 0) coai_buf_printf(out, "%.0f%%", u->api_percent_used);
            else coai_buf_puts(out, "?");
            coai_buf_putc(out, '\n');
        }
    }
    if (u->have_on_demand) {
        coai_buf_puts(out, "On-demand:      ");
        coai__qu_money(out, u->od_used_cents);
        if (u->od_limit_cents != COAI_QUOTA_NONE) {
            coai_buf_puts(out, " of ");
            coai__qu_money(out, u->od_limit_cents);
        }
        coai_buf_puts(out, " used");
        if (u->od_limit_type[0]) coai_buf_printf(out, " (%s limit)", u->od_limit_type);
        if (u->od_remaining_cents != COAI_QUOTA_NONE) {
            coai_buf_puts(out, ", ");
            coai__qu_money(out, u->od_remaining_cents);
            coai_buf_puts(out, " left");
        }
        coai_buf_putc(out, '\n');
    }
    if (u->message[0]) coai_buf_printf(out, "Cursor says:    %s\n", u->message);
    coai_buf_printf(out, "Limit reached:  %s\n", lr < 0 ? "unknown (Cursor did not say)"
                    : lr ? "YES: requests fail until the reset or a higher limit" : "no");
    return out->err ? -1 : 0;
}

int coai_quota_summary(coai_buf *out, const coai_quota *u, int64_t now_ms)
{
    double pct = coai__qu_percent(u);
    int lr = coai_quota_limit_reached(u), any = 0;
    if (u->have_plan_usage && u->used_cents != COAI_QUOTA_NONE) {
        coai__qu_money(out, u->used_cents);
        if (u->limit_cents != COAI_QUOTA_NONE) {
            coai_buf_puts(out, " of ");
            coai__qu_money(out, u->limit_cents);
        }
        coai_buf_puts(out, " included usage used");
        if (pct >= 0) coai_buf_printf(out, " (%.0f%%)", pct);
        if (u->remaining_cents != COAI_QUOTA_NONE) {
            coai_buf_puts(out, ", ");
            coai__qu_money(out, u->remaining_cents);
            coai_buf_puts(out, " left");
        }
        any = 1;
    } else if (u->message[0]) {
        coai_buf_puts(out, u->message);
        any = 1;
    } else {
        coai_buf_puts(out, "no usage figures from Cursor");
        any = 1;
    }
    if (lr == 1) coai_buf_puts(out, any ? " - LIMIT REACHED" : "LIMIT REACHED");
    if (u->cycle_end_ms != COAI_QUOTA_NONE) {
        coai_buf_puts(out, "; resets ");
        coai__qu_date(out, u->cycle_end_ms);
        coai_buf_puts(out, " (");
        coai__qu_rel(out, u->cycle_end_ms, now_ms);
        coai_buf_putc(out, ')');
    }
    return out->err ? -1 : 0;
}
/* PART:QUOTA impl end */

/* ======================================================================== */
/* PART:IMAGE impl                                                          */
/* ======================================================================== */

static int coai__im_ci_prefix(coai_str s, const char *lit)
{
    size_t i, n = strlen(lit);
    if (s.len < n) return 0;
    for (i = 0; i < n; i++) {
        char c = s.ptr[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

int coai_data_url_parse(coai_str url, coai_str *type, coai_str *payload)
{
    size_t i, comma, semi;
    if (!coai__im_ci_prefix(url, "data:")) return COAI_ERR_INVALID;
    for (comma = 5; comma < url.len && url.ptr[comma] != ','; comma++) {}
    if (comma >= url.len) return COAI_ERR_INVALID;
    /* the last parameter before the comma must be ";base64" (case-insensitive) */
    if (comma < 5 + 7) return COAI_ERR_INVALID;
    {
        coai_str tail;
        tail.ptr = url.ptr + comma - 7;
        tail.len = 7;
        if (!coai__im_ci_prefix(tail, ";base64")) return COAI_ERR_INVALID;
    }
    for (semi = 5; semi < comma && url.ptr[semi] != ';'; semi++) {}
    for (i = 5; i < semi; i++) {
        unsigned char c = (unsigned char)url.ptr[i];
        if (c <= ' ' || c >= 0x7f) return COAI_ERR_INVALID;   /* a media type is a token */
    }
    type->ptr = url.ptr + 5;
    type->len = semi - 5;
    payload->ptr = url.ptr + comma + 1;
    payload->len = url.len - comma - 1;
    return 0;
}

static uint32_t coai__im_be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t coai__im_le16(const unsigned char *p) { return (uint32_t)p[1] << 8 | p[0]; }
static uint32_t coai__im_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* JPEG: walk the marker segments up to the first SOFn (not DHT C4, JPG C8, DAC CC). */
static void coai__im_jpeg_dims(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h)
{
    size_t i = 2;
    while (i + 4 <= n) {
        unsigned m;
        size_t len;
        if (p[i] != 0xff) return;
        while (i < n && p[i] == 0xff) i++;   /* fill bytes */
        if (i >= n) return;
        m = p[i++];
        if (m == 0xd8 || m == 0x01 || (m >= 0xd0 && m <= 0xd7)) continue;   /* no length */
        if (m == 0xd9 || m == 0xda || i + 2 > n) return;    /* end of image, start of scan */
        len = coai__im_be16(p + i);
        if (len < 2) return;
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            if (len < 7 || i + 7 > n) return;
            *h = coai__im_be16(p + i + 3);
            *w = coai__im_be16(p + i + 5);
            return;
        }
        i += len;
    }
}

const char *coai_image_sniff(const unsigned char *p, size_t n, uint32_t *w, uint32_t *h)
{
    static const unsigned char png[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    uint32_t dw = 0, dh = 0;
    const char *mime = NULL;
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) {
        mime = "image/jpeg";
        coai__im_jpeg_dims(p, n, &dw, &dh);
    } else if (n >= 8 && memcmp(p, png, 8) == 0) {
        mime = "image/png";
        if (n >= 24 && memcmp(p + 12, "IHDR", 4) == 0) {
            dw = coai__im_be32(p + 16);
            dh = coai__im_be32(p + 20);
        }
    } else if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) {
        mime = "image/gif";
        if (n >= 10) {
            dw = coai__im_le16(p + 6);
            dh = coai__im_le16(p + 8);
        }
    } else if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) {
        mime = "image/webp";
        if (n >= 30 && memcmp(p + 12, "VP8 ", 4) == 0 && p[23] == 0x9d && p[24] == 0x01
            && p[25] == 0x2a) {
            dw = coai__im_le16(p + 26) & 0x3fff;
            dh = coai__im_le16(p + 28) & 0x3fff;
        } else if (n >= 25 && memcmp(p + 12, "VP8L", 4) == 0 && p[20] == 0x2f) {
            uint32_t b = (uint32_t)p[21] | (uint32_t)p[22] << 8 | (uint32_t)p[23] << 16
                         | (uint32_t)p[24] << 24;
            dw = (b & 0x3fff) + 1;
            dh = ((b >> 14) & 0x3fff) + 1;
        } else if (n >= 30 && memcmp(p + 12, "VP8X", 4) == 0) {
            dw = ((uint32_t)p[24] | (uint32_t)p[25] << 8 | (uint32_t)p[26] << 16) + 1;
            dh = ((uint32_t)p[27] | (uint32_t)p[28] << 8 | (uint32_t)p[29] << 16) + 1;
        }
    } else if (n >= 26 && p[0] == 'B' && p[1] == 'M') {
        /* BMP: "BM" is a weak magic, so the DIB header size must be a known one too */
        uint32_t dib = coai__im_le16(p + 14) | (uint32_t)coai__im_le16(p + 16) << 16;
        if (dib == 12) {                             /* BITMAPCOREHEADER: 16-bit sizes */
            mime = "image/bmp";
            dw = coai__im_le16(p + 18);
            dh = coai__im_le16(p + 20);
        } else if (dib == 40 || dib == 52 || dib == 56 || dib == 64 || dib == 108
                   || dib == 124) {
            uint32_t bw = coai__im_le16(p + 18) | (uint32_t)coai__im_le16(p + 20) << 16;
            uint32_t bh = coai__im_le16(p + 22) | (uint32_t)coai__im_le16(p + 24) << 16;
            mime = "image/bmp";
            dw = bw;
            dh = bh & 0x80000000u ? 0u - bh : bh;   /* negative height: top-down rows */
        }
    }
    /* Dimension is int32 on the wire; a value out of range or half known is no value */
    if (!dw || !dh || dw > 0x7fffffffu || dh > 0x7fffffffu) dw = dh = 0;
    if (w) *w = dw;
    if (h) *h = dh;
    return mime;
}

void coai_image_free(coai_image *img)
{
    free(img->data);
    memset(img, 0, sizeof *img);
}

static int coai__im_bad(coai_error *err, int status, const char *code, const char *param,
                        const char *fmt, const char *arg)
{
    coai_error_set(err, status, "invalid_request_error", code, param, fmt, arg);
    err->no_retry = 1;
    return status == 413 ? COAI_ERR_TOO_BIG : COAI_ERR_INVALID;
}

int coai_image_from_url(coai_image *img, coai_str url, size_t max_bytes, const char *param,
                        coai_error *err)
{
    coai_str type, pl;
    const char *p = param ? param : "image";
    memset(img, 0, sizeof *img);
    if (coai__im_ci_prefix(url, "http://") || coai__im_ci_prefix(url, "https://"))
        return coai__im_bad(err, 400, "image_url_not_supported", p,
                            "%s: remote image URLs are not fetched (a proxy that fetches URLs "
                            "can be abused to reach internal hosts); send the image inline as "
                            "a data:image/...;base64 URL", p);
    if (coai_data_url_parse(url, &type, &pl) != 0)
        return coai__im_bad(err, 400, "invalid_image_url", p,
                            "%s must be a data: URL with a base64 payload "
                            "(data:image/png;base64,...)", p);
    return coai_image_from_base64(img, type, pl, max_bytes, param, err);
}

int coai_image_from_base64(coai_image *img, coai_str type, coai_str pl, size_t max_bytes,
                           const char *param, coai_error *err)
{
    const char *p = param ? param : "image";
    char *clean = NULL;
    size_t i, n, cap;
    long got;
    unsigned char h[32];
    br_sha256_context sc;
    memset(img, 0, sizeof *img);
    if (!max_bytes) max_bytes = COAI_MAX_IMAGE_BYTES;
    if (type.len && !coai__im_ci_prefix(type, "image/"))
        return coai__im_bad(err, 400, "invalid_image_format", p,
                            "%s: only images are accepted (JPEG, PNG, GIF, WebP or BMP)", p);
    /* whitespace inside the payload (line-wrapped base64) is skipped */
    for (i = 0, n = 0; i < pl.len; i++)
        if (!(pl.ptr[i] == ' ' || pl.ptr[i] == '\n' || pl.ptr[i] == '\r' || pl.ptr[i] == '\t'))
            n++;
    /* n base64 characters carry at most n / 4 * 3 + 2 bytes: refuse before decoding */
    if (n / 4 > max_bytes / 3 + 1) {
        char lim[64];
        snprintf(lim, sizeof lim, "%zu", max_bytes);
        coai_error_set(err, 413, "invalid_request_error", "image_too_large", p,
                       "%s: the image is larger than the limit of %s bytes", p, lim);
        err->no_retry = 1;
        return COAI_ERR_TOO_BIG;
    }
    if (n != pl.len) {
        clean = (char *)malloc(n + 1);
        if (!clean) goto nomem;
        for (i = 0, n = 0; i < pl.len; i++)
            if (!(pl.ptr[i] == ' ' || pl.ptr[i] == '\n' || pl.ptr[i] == '\r'
                  || pl.ptr[i] == '\t'))
                clean[n++] = pl.ptr[i];
        pl.ptr = clean;
        pl.len = n;
    }
    cap = pl.len / 4 * 3 + 3;
    img->data = (unsigned char *)malloc(cap ? cap : 1);
    if (!img->data) goto nomem;
    got = coai_base64_decode(pl.ptr, pl.len, img->data, cap);
    free(clean);
    clean = NULL;
    if (got <= 0) {
        coai_image_free(img);
        return coai__im_bad(err, 400, "invalid_image_url", p,
                            "%s: the base64 payload does not decode (or is empty)", p);
    }
    img->len = (size_t)got;
    if (img->len > max_bytes) {
        char lim[64];
        coai_image_free(img);
        snprintf(lim, sizeof lim, "%zu", max_bytes);
        coai_error_set(err, 413, "invalid_request_error", "image_too_large", p,
                       "%s: the image is larger than the limit of %s bytes", p, lim);
        err->no_retry = 1;
        return COAI_ERR_TOO_BIG;
    }
    img->mime = coai_image_sniff(img->data, img->len, &img->width, &img->height);
    if (!img->mime) {
        coai_image_free(img);
        return coai__im_bad(err, 400, "invalid_image_format", p,
                            "%s is not a JPEG, PNG, GIF, WebP or BMP image", p);
    }
    br_sha256_init(&sc);
    br_sha256_update(&sc, img->data, img->len);
    br_sha256_out(&sc, h);
    coai_uuid_format(img->uuid, h);
    return 0;
nomem:
    free(clean);
    coai_image_free(img);
    coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
    return COAI_ERR_NOMEM;
}

/* Whether an image that is checked but not sent would decode: the same checks as
 * coai_image_from_url / coai_image_from_base64 (a data: URL, an image/ type when one is
 * declared, base64 that decodes, a known image type by its magic bytes) without decoding it
 * all (its bytes are never sent, so no size cap applies). A remote URL is refused as
 * coai_image_from_url refuses it. 0 ok, else the same 400. */
static int coai__image_check(const coai_part *pt, const char *p, coai_error *err)
{
    coai_str type = pt->media_type, pl = pt->data;
    char head[64];
    unsigned char raw[48];
    size_t i, n = 0, hn = 0, end;
    long got;
    if (pt->url.len || !pt->data.len) {
        if (coai__im_ci_prefix(pt->url, "http://") || coai__im_ci_prefix(pt->url, "https://"))
            return coai__im_bad(err, 400, "image_url_not_supported", p,
                                "%s: remote image URLs are not fetched (a proxy that fetches "
                                "URLs can be abused to reach internal hosts); send the image "
                                "inline as a data:image/...;base64 URL", p);
        if (coai_data_url_parse(pt->url, &type, &pl) != 0)
            return coai__im_bad(err, 400, "invalid_image_url", p,
                                "%s must be a data: URL with a base64 payload "
                                "(data:image/png;base64,...)", p);
    }
    if (type.len && !coai__im_ci_prefix(type, "image/"))
        return coai__im_bad(err, 400, "invalid_image_format", p,
                            "%s: only images are accepted (JPEG, PNG, GIF, WebP or BMP)", p);
    /* what coai_base64_decode accepts: trailing '=' dropped, then only the alphabet, and a
     * length that is not 1 mod 4 (whitespace skipped as coai_image_from_base64 does) */
    for (end = pl.len; end > 0; end--) {
        char c = pl.ptr[end - 1];
        if (!(c == '=' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) break;
    }
    for (i = 0; i < end; i++) {
        unsigned char c = (unsigned char)pl.ptr[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (coai__b64val(c) < 0) { n = 0; break; }
        if (hn < sizeof head) head[hn++] = (char)c;
        n++;
    }
    got = n && n % 4 != 1 ? coai_base64_decode(head, hn - (hn < n ? hn % 4 : 0), raw,
                                                sizeof raw) : -1;
    if (got <= 0)
        return coai__im_bad(err, 400, "invalid_image_url", p,
                            "%s: the base64 payload does not decode (or is empty)", p);
    if (!coai_image_sniff(raw, (size_t)got, NULL, NULL))
        return coai__im_bad(err, 400, "invalid_image_format", p,
                            "%s is not a JPEG, PNG, GIF, WebP or BMP image", p);
    return 0;
}

/* Core, for every dialect: decode the IMAGE parts of the current turn - the newest user
 * message and the tool results after it (a screenshot a tool returned belongs to the turn
 * being answered) - into req->images under the caps. The param names the part: exact for
 * OpenAI Chat ("messages[2].content[1].image_url.url"), the neutral message/part index
 * otherwise. Images of earlier messages are text markers in the prompt (coai__conv_text). */
/* The name of image part pt (message i, part k) in an error: the client's own field path
 * when the dialect's parser recorded one, else the neutral index (exact for OpenAI Chat). */
static void coai__image_path(const coai_request *req, const coai_part *pt, size_t i, size_t k,
                             char *p, size_t cap)
{
    if (pt->path) snprintf(p, cap, "%s", pt->path);
    else snprintf(p, cap, "messages[%zu].content[%zu]%s", i, k,
                  req->dialect == COAI_DIALECT_OPENAI_CHAT ? ".image_url.url" : "");
}

static int coai__request_images(coai_request *req, const coai_image_limits *lim,
                                coai_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : COAI_MAX_IMAGE_BYTES;
    size_t max_count = lim && lim->max_count ? lim->max_count : COAI_MAX_IMAGES;
    size_t max_total = lim && lim->max_total ? lim->max_total : COAI_MAX_IMAGES_BYTES;
    size_t first = coai__last_user(req->messages, req->message_count), i, k, count = 0;
    size_t total = 0;
    char p[160];
    /* One rule for every dialect: an image of the current turn that does not decode is a
     * 400. A request without a user message (tool results sent on their own, as a Responses
     * client may) is all current turn: its images are checked too, though, as in the
     * prompt, they stay text markers (coai_conversation_prompt). Images of earlier turns are
     * never checked: one broken old image must not break every later turn. */
    for (i = 0; first >= req->message_count && i < req->message_count; i++) {
        const coai_message *m = &req->messages[i];
        if (m->role != COAI_ROLE_USER && m->role != COAI_ROLE_TOOL) continue;
        for (k = 0; k < m->part_count; k++) {
            int rc;
            if (m->parts[k].kind != COAI_PART_IMAGE) continue;
            coai__image_path(req, m->parts + k, i, k, p, sizeof p);
            if ((rc = coai__image_check(&m->parts[k], p, err)) != 0) return rc;
        }
    }
    if (first >= req->message_count) return 0;
    for (i = first; i < req->message_count; i++) {
        const coai_message *m = &req->messages[i];
        if (m->role != COAI_ROLE_USER && m->role != COAI_ROLE_TOOL) continue;
        for (k = 0; k < m->part_count; k++) count += m->parts[k].kind == COAI_PART_IMAGE;
    }
    if (!count) return 0;
    if (count > max_count) {
        snprintf(p, sizeof p, "messages[%zu].content", first);
        coai_error_set(err, 400, "invalid_request_error", "too_many_images", p,
                       "%s: %zu images in the current turn; at most %zu are accepted per "
                       "request", p, count, max_count);
        err->no_retry = 1;
        return COAI_ERR_INVALID;
    }
    req->images = (coai_image *)calloc(count, sizeof *req->images);
    if (!req->images) {
        coai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory");
        return COAI_ERR_NOMEM;
    }
    for (i = first; i < req->message_count; i++) {
        const coai_message *m = &req->messages[i];
        if (m->role != COAI_ROLE_USER && m->role != COAI_ROLE_TOOL) continue;
        for (k = 0; k < m->part_count; k++) {
            const coai_part *pt = &m->parts[k];
            coai_image *im = &req->images[req->image_count];
            int rc;
            if (pt->kind != COAI_PART_IMAGE) continue;
            coai__image_path(req, pt, i, k, p, sizeof p);
            if (pt->url.len || !pt->data.len)
                rc = coai_image_from_url(im, pt->url, max_bytes, p, err);
            else
                rc = coai_image_from_base64(im, pt->media_type, pt->data, max_bytes, p, err);
            if (rc < 0) return rc;
            total += req->images[req->image_count++].len;
            if (total > max_total) {
                snprintf(p, sizeof p, "messages[%zu].content", i);
                coai_error_set(err, 413, "invalid_request_error", "images_too_large", p,
                               "%s: the images together are larger than the limit of %zu "
                               "bytes per request", p, max_total);
                err->no_retry = 1;
                return COAI_ERR_TOO_BIG;
            }
        }
    }
    return 0;
}

int coai_encode_exec_mcp_result_images(coai_buf *out, uint32_t id, coai_str exec_id,
                                       coai_str text, const coai_image *images, size_t n,
                                       int is_error)
{
    coai_exec_ref x;
    memset(&x, 0, sizeof x);
    x.kind = COAI_EXEC_MCP;
    x.id = id;
    x.exec_id = exec_id;
    return coai_encode_exec_answer_images(out, &x, text, images, n, is_error, 0, 0);
}

int coai_encode_selected_images(coai_buf *out, const coai_image *images, size_t n)
{
    size_t i, start = out->len;
    for (i = 0; i < n; i++) {
        const coai_image *im = &images[i];
        size_t si = coai__pb_open(out, 1), d;
        coai__pb_str(out, 2, coai_str_c(im->uuid));
        if (im->width && im->height) {
            d = coai__pb_open(out, 4);
            coai__pb_tag(out, 1, 0);
            coai__pb_varint(out, im->width);
            coai__pb_tag(out, 2, 0);
            coai__pb_varint(out, im->height);
            coai__pb_close(out, d);
        }
        coai__pb_str(out, 7, coai_str_c(im->mime));
        coai__pb_bytes(out, 8, im->data, im->len);
        coai__pb_close(out, si);
    }
    return coai__pb_finish(out, start, COAI_OK);
}
/* PART:IMAGE impl end */

#endif /* CURSOR_OAI_IMPLEMENTATION */

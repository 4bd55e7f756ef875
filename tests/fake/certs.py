"""Throwaway test PKI made with the openssl CLI (stdlib + openssl only).

make_certs(dir) creates:
  ca.pem / ca.key                 the test CA the proxy is told to trust (SSL_CERT_FILE)
  server.pem / server.key         cert for DNS:localhost signed by the test CA (the good one)
  wrongca.pem / wrongca.key       a second CA nobody trusts
  server_wrongca.pem / .key       cert for DNS:localhost signed by the untrusted CA
  wronghost.pem / wronghost.key   cert for DNS:wrong.example signed by the trusted CA
"""

import os
import secrets
import subprocess
import sys

OPENSSL = os.environ.get("OPENSSL", "openssl")


def _run(args, cwd):
    r = subprocess.run([OPENSSL] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), r.stderr.decode(
            "utf-8", "replace")))


def _ca(d, name, cn):
    _run(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3",
          "-keyout", name + ".key", "-out", name + ".pem", "-subj", "/CN=" + cn,
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)


def _leaf(d, name, dns, ca):
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:%s\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n" % dns)
    _run(["req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", name + ".key",
          "-out", name + ".csr", "-subj", "/CN=" + dns], d)
    _run(["x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
          "-set_serial", "0x" + secrets.token_hex(8), "-days", "2", "-sha256",
          "-extfile", ext, "-out", name + ".pem"], d)


def make_certs(d):
    os.makedirs(d, exist_ok=True)
    _ca(d, "ca", "cursor-oai test CA")
    _ca(d, "wrongca", "cursor-oai WRONG CA")
    _leaf(d, "server", "localhost", "ca")
    _leaf(d, "server_wrongca", "localhost", "wrongca")
    _leaf(d, "wronghost", "wrong.example", "ca")
    return paths(d)


def paths(d):
    p = lambda n: os.path.join(d, n)  # noqa: E731
    return {"dir": d, "ca": p("ca.pem"), "wrong_ca": p("wrongca.pem"),
            "server_cert": p("server.pem"), "server_key": p("server.key"),
            "wrongca_cert": p("server_wrongca.pem"), "wrongca_key": p("server_wrongca.key"),
            "wronghost_cert": p("wronghost.pem"), "wronghost_key": p("wronghost.key")}


if __name__ == "__main__":
    print(make_certs(sys.argv[1]))

"""privai-admin over TLS: its certificate described, replaced by an upload
(certificates made here with the openssl command), served from the next
handshake and after a restart; every bad upload refused with nothing
changed; and a node joining over HTTPS with the console's key pinned,
a wrong pin refused, a renewal with the same key keeping the member, and
a forced new key cutting it off.

usage: python3 tests/integration/test_admin_tls.py BUILD_DIR"""
import hashlib
import os
import ssl
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
PW = "correct horse battery staple"


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl " + " ".join(args) + ": " + r.stderr)


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 it signed, another key, an
    encrypted copy of the server key; PEM files in d."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=privai test CA", "-days", "30",
            cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    sign("leaf.key", "leaf.pem", d, new_key=True)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other.key", cwd=d)
    openssl("pkcs8", "-topk8", "-v2", "aes256", "-in", "leaf.key", "-out", "leaf-enc.key", "-passout", "pass:x",
            cwd=d)


def sign(key, out, d, new_key=False):
    """A server certificate for key (made when new_key), signed by the CA."""
    if new_key:
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out",
                out + ".csr", "-subj", "/CN=127.0.0.1", cwd=d)
    else:
        openssl("req", "-new", "-key", key, "-out", out + ".csr", "-subj", "/CN=127.0.0.1", cwd=d)
    openssl("x509", "-req", "-in", out + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", out, "-days", "20", "-extfile", "ext", cwd=d)


def read(d, name):
    with open(os.path.join(d, name)) as f:
        return f.read()


def served_der(port):
    return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port)))


def pem_der(pem):
    first = pem[:pem.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
    return ssl.PEM_cert_to_DER_cert(first)


def files(adm):
    return {n: hashlib.sha256(open(os.path.join(adm.state, "tls", n), "rb").read()).hexdigest()
            for n in ("cert.pem", "key.pem")}




def test_refusals(adm, a, o, v, d):
    before_files, before_served = files(adm), served_der(adm.port)
    leaf, key, ca = read(d, "leaf.pem"), read(d, "leaf.key"), read(d, "ca.pem")
    cases = (
        ({"certificate": ca + leaf, "key": key}, "certificate", "out of order"),
        ({"certificate": leaf + ca, "key": read(d, "other.key")}, "key", "does not belong"),
        ({"certificate": leaf + ca, "key": read(d, "ca.key")}, "key", "does not belong"),
        ({"certificate": leaf + ca, "key": read(d, "leaf-enc.key")}, "key", "encrypted"),
        ({"certificate": "'; DROP TABLE users; --", "key": key}, "certificate", "not PEM"),
        ({"certificate": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "key": key},
         "certificate", "cannot be read"),
        ({"certificate": leaf + "x" * (70 << 10), "key": key}, "certificate", "1-65536 characters"),
        ({"certificate": leaf, "key": key + "\x01"}, "key", "control characters"),
        ({"certificate": 42, "key": key}, "certificate", "must be a string"),
        ({"certificate": leaf}, "key", "required"),
        ({"certificate": leaf, "key": key, "force": "yes"}, "force", ""),
        ({"certificate": leaf, "key": key, "chain": ca}, "chain", "unknown field"),
    )
    for body, field, words in cases:
        r = a.request("PUT", "/api/v1/system/tls", body)
        check(r.status == 422 and r.json["error"]["field"] == field and words in r.json["error"]["message"],
              f"bad upload refused on {field} ({words or 'type'})", r)
    r = a.request("PUT", "/api/v1/system/tls", raw=b"{not json", headers={"Content-Type": "application/json"})
    check(r.status == 400, "not JSON: 400", r)
    r = o.request("PUT", "/api/v1/system/tls", {"certificate": leaf + ca, "key": key})
    check(r.status == 403, "an operator may not replace it", r)
    r = a.request("PUT", "/api/v1/system/tls", {"certificate": leaf + ca, "key": key}, csrf=False)
    check(r.status == 403 and r.error_code() == "csrf", "no CSRF token: refused", r)
    check(files(adm) == before_files and served_der(adm.port) == before_served,
          "after every refusal: the same files, the same certificate served")
    r = a.get("/api/v1/audit?action=tls.replace&result=refused")
    refused = [e for e in r.json["data"] if e["result"] == "refused"] if r.status == 200 else []
    check(len(refused) == len(cases) + 3 and {e["detail"]["status"] for e in refused} == {400, 403, 422},
          "every refusal is in the audit log with its status", r)


def test_join_pinned(adm, a, tmp, d):
    """A member joins over HTTPS trusting only the console's key."""
    r = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 10})
    pin = r.json.get("leader_pin", "")
    check(r.status == 201 and pin.startswith("sha256//") and f"--join-pin {pin}" in r.json["command"],
          "the join token shows the console's pin", r)
    r2 = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 10})
    bad_pin = "sha256//" + "A" * 43 + "="
    m2 = Admin(BUILD, os.path.join(tmp, "wrong-pin"), PW, ports="19120-19129",
               extra=["--join", adm.url(), "--join-pin", bad_pin, "--node-name", "mallory", "--heartbeat-s", "1"],
               env_extra={"PRIVAI_JOIN_TOKEN": r2.json["token"]})
    failed = wait_for(lambda: "joining " + adm.url() + " failed" in open(m2.log_path).read(), 15)
    check(failed and "public key" in open(m2.log_path).read().lower(), "a wrong pin: the join fails, naming the key",
          open(m2.log_path).read()[-400:])
    m2.stop()
    tokens = a.get("/api/v1/nodes/join-tokens").json["data"]
    check([t["used_at"] for t in tokens if t["id"] == r2.json["id"]] == [None], "its token was not spent", tokens)
    m = Admin(BUILD, os.path.join(tmp, "member"), PW, ports="19110-19119",
              extra=["--join", adm.url(), "--join-pin", pin, "--node-name", "member", "--heartbeat-s", "1"],
              env_extra={"PRIVAI_JOIN_TOKEN": r.json["token"]})
    node = wait_for(lambda: next((n for n in a.get("/api/v1/nodes").json["data"]
                                  if n["name"] == "member" and n["state"] == "ready"), None), 20)
    check(node is not None, "the member joined over HTTPS with the pin", open(m.log_path).read()[-400:])
    return m, node, pin


def heartbeat_after(a, node_id, t):
    n = a.get(f"/api/v1/nodes/{node_id}").json
    return n if n["last_heartbeat"] and n["last_heartbeat"] > t else None


def main():
    tmp = tempfile.mkdtemp(prefix="privai-tls-")
    d = os.path.join(tmp, "pki")
    os.makedirs(d)
    make_certs(d)
    adm = Admin(BUILD, os.path.join(tmp, "leader"), PW, dev=False, extra=["--heartbeat-s", "1"])
    member = None
    try:
        a, o, v = users(adm, PW)
        r = v.get("/api/v1/system/tls")
        check(r.status == 200 and r.json["tls"] is True and r.json["managed"] is True and r.json["self_signed"] is True
              and r.json["chain_length"] == 1, "a viewer sees the generated self-signed certificate", r)
        first_pin = r.json["pin"]
        test_refusals(adm, a, o, v, d)
        member, node, pin = test_join_pinned(adm, a, tmp, d)
        check(pin == first_pin, "the join pin is the certificate's")

        # a new key while a member counts on the old one
        leaf, ca = read(d, "leaf.pem"), read(d, "ca.pem")
        before = files(adm)
        r = a.request("PUT", "/api/v1/system/tls", {"certificate": leaf + ca, "key": read(d, "leaf.key")})
        check(r.status == 409 and r.error_code() == "pin_in_use" and "1 joined node" in r.json["error"]["message"],
              "a new key with a member joined: 409 naming it", r)
        check(files(adm) == before, "nothing written")

        # renewal with the same key: a CA-signed certificate for the generated key
        with open(os.path.join(d, "current.key"), "w") as f:
            f.write(open(os.path.join(adm.state, "tls", "key.pem")).read())
        sign("current.key", "renewed.pem", d)
        renewed = read(d, "renewed.pem")
        r = a.request("PUT", "/api/v1/system/tls", {"certificate": renewed + ca, "key": read(d, "current.key")})
        check(r.status == 200 and r.json["pin"] == first_pin and r.json["issuer"] == "CN=privai test CA" and
              r.json["self_signed"] is False and r.json["chain_length"] == 2, "renewed with the same key", r)
        check(served_der(adm.port) == pem_der(renewed), "the renewed certificate is served at the next handshake")
        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
        import http.client
        c = http.client.HTTPSConnection("127.0.0.1", adm.port, context=ctx, timeout=10)
        c.request("GET", "/api/v1/health")
        check(c.getresponse().status == 200, "a client trusting only the CA verifies the console")
        t = a.get(f"/api/v1/nodes/{node['id']}").json["last_heartbeat"]
        check(wait_for(lambda: heartbeat_after(a, node["id"], t), 10) is not None,
              "the member's heartbeats go on (same key, same pin)")
        r = a.get("/api/v1/nodes/join-tokens")
        r = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 5})
        check(r.json.get("leader_pin") == first_pin, "join tokens still show the same pin", r)

        # a forced new key: the member can no longer reach the console
        r = a.request("PUT", "/api/v1/system/tls", {"certificate": leaf + ca, "key": read(d, "leaf.key"),
                                                     "force": True})
        check(r.status == 200 and r.json["pin"] != first_pin and r.json["subject"] == "CN=127.0.0.1",
              "forced: a new key", r)
        check(served_der(adm.port) == pem_der(leaf), "the new certificate is served")
        r = a.post("/api/v1/nodes/join-tokens", {"ttl_minutes": 5})
        check(r.json.get("leader_pin") not in (None, first_pin), "join tokens show the new pin", r)
        gone = wait_for(lambda: a.get(f"/api/v1/nodes/{node['id']}").json["state"] == "unreachable", 15)
        check(gone, "the member, pinned to the old key, becomes unreachable")
        mc = member.client()
        mc.login("admin", PW)
        err = mc.get("/api/v1/cluster").json["membership"]["last_error"] or ""
        check("public key" in err.lower() or "pinned" in err.lower(), "and says why", err)

        r = a.get("/api/v1/audit?action=tls.replace")
        ok = [e for e in r.json["data"] if e["result"] == "ok"]
        check(len(ok) == 2 and ok[0]["detail"]["pin"] and ok[0]["actor"] == "admin", "both replacements audited", ok)
        key_mode = os.stat(os.path.join(adm.state, "tls", "key.pem")).st_mode & 0o777
        check(key_mode == 0o600, "the stored key is 0600", oct(key_mode))
        adm.stop()
        adm.start()
        check(served_der(adm.port) == pem_der(leaf), "after a restart the uploaded certificate is served")
    finally:
        if member is not None:
            member.stop()
        adm.stop()

    dev = Admin(BUILD, os.path.join(tmp, "dev"), PW)
    dc = dev.client()
    dc.login("admin", PW)
    r = dc.get("/api/v1/system/tls")
    check(r.status == 200 and r.json == {"tls": False}, "dev mode: no TLS", r)
    r = dc.request("PUT", "/api/v1/system/tls", {"certificate": read(d, "leaf.pem"), "key": read(d, "leaf.key")})
    check(r.status == 409 and r.error_code() == "tls_off", "dev mode: 409 tls_off", r)
    dev.stop()
    ext = Admin(BUILD, os.path.join(tmp, "ext"), PW, dev=False,
                extra=["--tls-cert", os.path.join(d, "leaf.pem"), "--tls-key", os.path.join(d, "leaf.key")])
    ec = ext.client()
    ec.login("admin", PW)
    r = ec.get("/api/v1/system/tls")
    check(r.status == 200 and r.json["managed"] is False and r.json["subject"] == "CN=127.0.0.1", "--tls-cert: "
          "described, not managed", r)
    r = ec.request("PUT", "/api/v1/system/tls", {"certificate": read(d, "renewed.pem"), "key": read(d, "current.key")})
    check(r.status == 409 and r.error_code() == "tls_external" and "leaf.pem" in r.json["error"]["message"],
          "--tls-cert: 409 naming the file to replace", r)
    ext.stop()
    clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

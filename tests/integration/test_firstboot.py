"""privai-firstboot against scratch root trees: the three sources and their
precedence, every key's bad values refused with the reason and nothing of
them applied, DHCP kept when an address is bad, the one-time password kept
when the given one is bad, a second run that writes nothing, a property
taken away taken off the machine, and the record, the issue file and the
journal lines that say what happened.

usage: python3 tests/integration/test_firstboot.py BUILD_DIR"""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import check, summary  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
BIN = os.path.join(BUILD, "privai-firstboot")
PW = "a long enough password"
TOKEN = "join_" + "A" * 43
PIN = "sha256//" + base64.b64encode(bytes(range(32))).decode()


def ssh_key(kind="ssh-ed25519"):
    blob = struct.pack(">I", len(kind)) + kind.encode() + struct.pack(">I", 32) + bytes(range(32))
    return f"{kind} {base64.b64encode(blob).decode()} test@privai"


def tls_pair(tmp):
    key, cert = os.path.join(tmp, "k.pem"), os.path.join(tmp, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=privai.test", "-days", "2", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return open(cert).read(), open(key).read()


def ovf_env(props):
    items = "\n".join(f'    <Property oe:key="privai.{k}" oe:value="{v}"/>' for k, v in props.items())
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:oe="http://schemas.dmtf.org/ovf/environment/1" oe:id="">
  <PlatformSection><Kind>VMware ESXi</Kind></PlatformSection>
  <PropertySection>
{items}
    <Property oe:key="vendor.other" oe:value="x"/>
  </PropertySection>
</Environment>
"""


def yaml_config(keys):
    lines = ["#cloud-config", "users: [default]", "write_files: []", "privai:"]
    for k, v in keys.items():
        if isinstance(v, list):
            lines.append(f"  {k}: [{', '.join(v)}]")
        else:
            lines.append(f"  {k}: {json.dumps(v)}")
    lines.append("ntp: {enabled: true}")
    return "\n".join(lines) + "\n"


class Root:
    def __init__(self, tmp, name, conf=None, cloud=None, ovf=None):
        self.path = os.path.join(tmp, name)
        os.makedirs(os.path.join(self.path, "etc", "privai"))
        if conf is not None:
            self.write("/etc/privai/appliance.conf", conf)
        if cloud is not None:
            self.write("/var/lib/cloud/instance/cloud-config.txt", cloud)
        self.ovf = None
        if ovf is not None:
            self.write("/media/ovf-env.xml", ovf)
            self.ovf = "/media/ovf-env.xml"

    def write(self, rel, text):
        p = self.path + rel
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, "w").write(text)

    def read(self, rel):
        p = self.path + rel
        return open(p).read() if os.path.exists(p) else None

    def mode(self, rel):
        return os.stat(self.path + rel).st_mode & 0o7777

    def run(self, *extra):
        args = [BIN, "--root", self.path, *(["--ovf-env", self.ovf] if self.ovf else []), *extra]
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        check(not any(w in p.stderr for w in ("Sanitizer", "runtime error")), "no sanitizer report", p.stderr[-2000:])
        rec = self.read("/var/lib/privai/firstboot.json")
        self.record = json.loads(rec) if rec else {}
        self.steps = {s["step"]: s for s in self.record.get("steps", [])}
        return p

    def files(self):
        out = {}
        for d, _, fs in os.walk(self.path):
            for f in fs:
                p = os.path.join(d, f)
                if not p.endswith("firstboot.json"):
                    st = os.stat(p)
                    out[p] = (st.st_mtime_ns, st.st_ino)
        return out


def fake_links(r):
    """/sys/class/net as a VM with two NICs shows it, and links that are no NIC."""
    for name, index, kind, device in (("lo", 1, 772, False), ("ens224", 3, 1, True), ("ens192", 2, 1, True),
                                      ("br0", 0, 1, False), ("ib0", 5, 32, True)):
        r.write(f"/sys/class/net/{name}/ifindex", f"{index}\n")
        r.write(f"/sys/class/net/{name}/type", f"{kind}\n")
        if device:
            r.write(f"/sys/class/net/{name}/device/vendor", "0x15ad\n")


def test_precedence(tmp):
    cert, key = tls_pair(tmp)
    r = Root(tmp, "prec",
             conf="# image defaults\nhostname=privai\nntp=0.debian.pool.ntp.org\nrole=leader\n",
             cloud=yaml_config({"hostname": "from-cloud", "ip": "10.1.2.3/24", "gateway": "10.1.2.1",
                                "dns": ["10.1.2.53", "1.1.1.1"], "admin_password": PW, "ssh_key": ssh_key(),
                                "ntp": ["ntp.example.org", "10.0.0.123"]}),
             ovf=ovf_env({"hostname": "from-ovf", "role": "member", "join_url": "https://10.1.2.9",
                          "join_token": TOKEN, "join_pin": PIN,
                          "tls_cert": base64.b64encode(cert.encode()).decode(),
                          "tls_key": base64.b64encode(key.encode()).decode(), "dns": ""}))
    fake_links(r)
    p = r.run("--strict")
    check(p.returncode == 0, "a good configuration: exit 0 under --strict", p.stderr)
    keys = r.record.get("keys", {})
    check(keys.get("hostname", {}).get("value") == "from-ovf" and "ovf" in keys["hostname"]["source"],
          "OVF wins over cloud-init over the image's defaults", keys.get("hostname"))
    check("cloud-init" in keys.get("ip", {}).get("source", "") and
          keys.get("ntp", {}).get("value") == "ntp.example.org,10.0.0.123", "cloud-init's keys, lists joined",
          keys.get("ntp"))
    check(keys.get("dns", {}).get("value") == "10.1.2.53,1.1.1.1", "an empty OVF property is not given", keys.get("dns"))
    check(r.read("/etc/hostname") == "from-ovf\n" and "127.0.1.1\tfrom-ovf" in r.read("/etc/hosts"),
          "hostname and /etc/hosts", r.read("/etc/hosts"))
    net = r.read("/etc/systemd/network/10-privai.network") or ""
    check("Address=10.1.2.3/24" in net and "Gateway=10.1.2.1" in net and "DNS=10.1.2.53\nDNS=1.1.1.1" in net and
          "DHCP" not in net.split("[Network]")[1], "a static networkd file", net)
    check("[Match]\nName=ens192\n" in net and "on ens192" in r.steps.get("network", {}).get("message", ""),
          "the static address goes to the first NIC only (the others keep DHCP)", net)
    check("NTP=ntp.example.org 10.0.0.123" in (r.read("/etc/systemd/timesyncd.conf.d/50-privai.conf") or ""),
          "the timesyncd drop-in")
    env = r.read("/etc/privai/admin.env") or ""
    for line in ("PRIVAI_NODE_NAME=from-ovf", "PRIVAI_ADMIN_PASSWORD_FILE=/etc/privai/admin-password",
                 "PRIVAI_JOIN_URL=https://10.1.2.9", "PRIVAI_JOIN_TOKEN_FILE=/etc/privai/join-token",
                 f"PRIVAI_JOIN_PIN={PIN}", "PRIVAI_TLS_CERT=/etc/privai/tls/cert.pem",
                 "PRIVAI_TLS_KEY=/etc/privai/tls/key.pem", "PRIVAI_ADVERTISE_URL=https://10.1.2.3"):
        check(line in env.splitlines(), f"admin.env: {line.split('=')[0]}", env)
    check(r.read("/etc/privai/admin-password") == PW + "\n" and r.mode("/etc/privai/admin-password") == 0o600 and
          r.read("/etc/privai/join-token") == TOKEN + "\n" and r.mode("/etc/privai/tls/key.pem") == 0o600 and
          r.read("/etc/privai/tls/key.pem") == key and r.mode("/etc/privai/admin.env") == 0o600,
          "secrets in 0600 files, the key decoded from base64")
    check(ssh_key() in (r.read("/root/.ssh/authorized_keys") or "") and r.mode("/root/.ssh/authorized_keys") == 0o600,
          "root's authorized_keys")
    states = {k: v["state"] for k, v in r.steps.items()}
    check(states == {"hostname": "applied", "network": "applied", "ntp": "applied", "admin_password": "applied",
                     "ssh_key": "applied", "cluster": "applied", "tls": "applied", "models": "not given"},
          "every step applied", states)
    record = r.read("/var/lib/privai/firstboot.json")
    check(PW not in record and TOKEN not in record and "PRIVATE KEY" not in record and
          keys["admin_password"]["value"] == "(given)", "the record holds no secret")
    check(PW not in p.stderr + p.stdout and TOKEN not in p.stderr, "nor does the journal")
    issue = r.read("/etc/issue.d/50-privai.issue")
    check(issue == "privai appliance: open https://\\4/ in a browser\n", "the issue file: the console's address only",
          issue)
    # a second boot: nothing written again
    before = r.files()
    p = r.run("--strict")
    states = {k: v["state"] for k, v in r.steps.items()}
    check(p.returncode == 0 and set(states.values()) <= {"unchanged", "not given"}, "a second run applies nothing",
          states)
    check(r.files() == before, "and touches no file", set(r.files().items()) ^ set(before.items()))
    # once the console has its store, a password given later is not applied
    r.write("/var/lib/privai/privai.db", "")
    p = r.run()
    check(r.steps["admin_password"]["state"] == "unchanged" and "already" in r.steps["admin_password"]["message"],
          "a password given after the first start is not applied", r.steps.get("admin_password"))
    # a property taken away is taken off the machine
    r.write("/var/lib/cloud/instance/cloud-config.txt", yaml_config({"hostname": "from-cloud", "ip": "dhcp"}))
    r.write("/etc/privai/appliance.conf", "hostname=privai\n")
    r.write("/media/ovf-env.xml", ovf_env({}))
    p = r.run()
    net = r.read("/etc/systemd/network/10-privai.network") or ""
    check("DHCP=yes" in net and "Address=" not in net and r.steps["network"]["state"] == "applied",
          "back to DHCP when the address is taken away", net)
    check(r.read("/etc/systemd/timesyncd.conf.d/50-privai.conf") is None and r.steps["ntp"]["state"] == "applied",
          "the NTP drop-in removed with its property", r.steps["ntp"])
    env = r.read("/etc/privai/admin.env") or ""
    check("PRIVAI_JOIN_URL" not in env and "PRIVAI_TLS_CERT" not in env and "PRIVAI_NODE_NAME=from-cloud" in env,
          "admin.env follows: no join, no certificate", env)


BAD = [
    ("hostname", "-bad-", "neither starts nor ends"),
    ("hostname", "a" * 64, "1-63"),
    ("hostname", "under_score", "letters, digits"),
    ("ip", "10.0.0.300/24", "not an IPv4"),
    ("ip", "10.0.0.3", "prefix length"),
    ("ip", "10.0.0.3/33", "1-32"),
    ("gateway", "10.0.0", "not an IPv4"),
    ("dns", "10.0.0.1,,10.0.0.2", "empty"),
    ("dns", "dns.example.org", "not an IPv4"),
    ("ntp", "ntp..example", "neither an address nor a host name"),
    ("admin_password", "short", "12"),
    ("admin_password", "Admin1234567", None),  # 12 characters: accepted
    ("admin_password", "admin", "12"),
    ("ssh_key", "ssh-ed25519 AAAA", "decode"),
    ("ssh_key", "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "OpenSSH public key"),
    ("ssh_key", ssh_key().replace("ssh-ed25519 ", "ssh-rsa ", 1), "not a ssh-rsa key"),
    ("role", "boss", "'leader' or 'member'"),
    ("join_url", "ftp://x", "https://"),
    ("join_token", "join_short", "43 characters"),
    ("join_pin", "sha256//AAAA", "sha256//"),
    ("models", "relative/model.gguf", "absolute"),
    ("models", "/m/../etc/passwd.gguf", "absolute"),
]


def test_bad_values(tmp):
    for i, (key, value, words) in enumerate(BAD):
        r = Root(tmp, f"bad{i}", cloud=yaml_config({key: value}))
        p = r.run("--check", "--strict")
        rec = p.stdout
        if words is None:
            check(p.returncode == 0 and "REFUSED" not in rec, f"{key}={value[:20]!r} accepted", rec)
            continue
        check(p.returncode == 3 and "REFUSED" in rec and words in rec, f"{key}={value[:20]!r} refused: {words}", rec)
        if key == "admin_password":
            check(value not in rec.split("): ", 1)[-1], f"{key}: the refusal does not echo the password", rec)


def test_fallbacks(tmp):
    r = Root(tmp, "fallback", cloud=yaml_config({"ip": "10.9.9.9/40", "gateway": "10.9.9.1",
                                                 "admin_password": "too short"}),
             ovf=ovf_env({"tls_cert": "bm90IGEgcGVt", "hostname": "ok-name"}))
    p = r.run("--strict")
    check(p.returncode == 3, "--strict: exit 3 on a refused value", p.returncode)
    net = r.read("/etc/systemd/network/10-privai.network") or ""
    check("DHCP=yes" in net and "10.9.9" not in net and r.steps["network"]["state"] == "fallback" and
          "ip from cloud-init" in r.steps["network"]["message"], "a bad address keeps DHCP, saying why",
          r.steps.get("network"))
    check(r.read("/etc/privai/admin-password") is None and r.steps["admin_password"]["state"] == "refused" and
          "one-time" in r.steps["admin_password"]["message"], "a bad password keeps the one-time password",
          r.steps.get("admin_password"))
    check("PRIVAI_ADMIN_PASSWORD_FILE" not in (r.read("/etc/privai/admin.env") or ""), "and admin.env has none")
    check("PRIVAI_ADVERTISE_URL" not in (r.read("/etc/privai/admin.env") or ""),
          "nor an advertised address from the refused one")
    check(r.steps["tls"]["state"] == "refused" and r.read("/etc/privai/tls/cert.pem") is None,
          "a bad certificate keeps the self-signed one", r.steps.get("tls"))
    check(r.read("/etc/hostname") == "ok-name\n", "the other steps went on")
    issue = r.read("/etc/issue.d/50-privai.issue") or ""
    check("network fallback" in issue and "admin_password refused" in issue and "tls refused" in issue,
          "the issue file names each problem", issue)
    check("privai-firstboot: network: fallback: kept DHCP" in p.stderr, "the journal too", p.stderr[-500:])
    # a certificate without its key, a key that is not the certificate's
    cert, key = tls_pair(tmp)
    cert2, key2 = tls_pair(tmp)
    for name, props, words in (("half", {"tls_cert": cert}, "go together"),
                               ("mismatch", {"tls_cert": cert, "tls_key": key2}, "")):
        r = Root(tmp, f"tls-{name}", ovf=ovf_env({k: base64.b64encode(v.encode()).decode() for k, v in props.items()}))
        r.run()
        check(r.steps["tls"]["state"] == "refused" and words in r.steps["tls"]["message"] and
              r.read("/etc/privai/tls/key.pem") is None, f"TLS {name} refused", r.steps.get("tls"))
    # a member without its leader
    r = Root(tmp, "member", cloud=yaml_config({"role": "member", "join_url": "https://10.0.0.1"}))
    r.run()
    check(r.steps["cluster"]["state"] == "refused" and "join_token" in r.steps["cluster"]["message"],
          "a member needs a join token", r.steps.get("cluster"))
    r = Root(tmp, "gw-dhcp", cloud=yaml_config({"gateway": "10.0.0.1"}))
    r.run()
    check(r.steps["network"]["state"] == "fallback", "a gateway without a static address: DHCP",
          r.steps.get("network"))


def test_broken_sources(tmp):
    r = Root(tmp, "broken", conf="hostname=from-conf\nhostname=twice\nnot a line\nwho=me\n",
             cloud="#cloud-config\nprivai:\n  hostname: from-cloud\n  ip: [unclosed\n",
             ovf="<Environment xmlns='urn:not-ovf'><PropertySection/></Environment>")
    p = r.run()
    warn = " ".join(r.record.get("warnings", []))
    check(r.read("/etc/hostname") == "from-conf\n", "a broken cloud-config gives nothing, not half", r.read("/etc/hostname"))
    check("YAML error" in warn and "not an OVF environment" in warn and "given twice" in warn and
          "not KEY=VALUE" in warn and "unknown key 'who'" in warn, "each problem is a warning with its place", warn)
    r = Root(tmp, "nested", cloud="#cloud-config\nprivai:\n  hostname: {a: b}\n  bogus: 1\n  dns: [1.1.1.1, {x: y}]\n")
    r.run()
    check("mapping" in r.record["keys"]["hostname"]["problem"] and "plain values" in r.record["keys"]["dns"]["problem"],
          "a mapping or a nested list is refused for its key", r.record.get("keys"))
    # cloud-init's local stage leaves the raw user-data: read first when it is a cloud-config
    r = Root(tmp, "rawdata", cloud=yaml_config({"hostname": "from-merged"}))
    r.write("/var/lib/cloud/instance/user-data.txt", yaml_config({"hostname": "from-raw"}))
    r.run()
    check(r.read("/etc/hostname") == "from-raw\n" and "user-data.txt" in r.record["keys"]["hostname"]["source"],
          "the local stage's user-data.txt before last boot's merged cloud-config", r.record["keys"].get("hostname"))
    r.write("/var/lib/cloud/instance/user-data.txt", "Content-Type: multipart/mixed; boundary=x\n")
    r.run()
    check(r.read("/etc/hostname") == "from-merged\n", "a multipart user-data: the merged cloud-config",
          r.read("/etc/hostname"))
    r = Root(tmp, "noprivai", cloud="#cloud-config\nhostname: cloud-init-does-this\n")
    p = r.run("--strict")
    check(p.returncode == 0 and r.steps["hostname"]["state"] == "not given",
          "cloud-init's own keys are cloud-init's business", r.steps.get("hostname"))
    p = subprocess.run([BIN, "--bogus"], capture_output=True, text=True)
    check(p.returncode == 2 and "unknown option" in p.stderr, "an unknown option: exit 2", p.stderr)


def day0_models(adm, c, disk):
    """privai-admin registers the day-0 models it is handed, once each."""
    def listed():
        return {m["name"]: m for m in c.get("/api/v1/models").json["data"]}
    got = listed()
    check(set(got) == {"small-chat", "_odd_name"} and
          got["small-chat"]["path"] == os.path.join(disk, "small-chat.gguf"),
          "good day-0 models are registered under their file names (what a name may not hold made '_'), "
          "once though named twice", sorted(got))
    audit = c.get("/api/v1/audit?action=model.create").json.get("data", [])
    refused = {(e.get("detail") or {}).get("path", ""): e for e in audit if e.get("result") == "refused"}
    check(any(p.endswith("broken.gguf") for p in refused) and any(p.endswith("missing.gguf") for p in refused),
          "the bad ones are audited as refused, with their paths", [e.get("detail") for e in audit])
    adm.stop()
    adm.start()
    c.port = adm.port
    c.login("admin", "correct horse battery staple")
    check(set(listed()) == {"small-chat", "_odd_name"}, "a restart registers nothing twice", sorted(listed()))


def test_admin_shows_it(tmp):
    """privai-admin's GET /api/v1/system/appliance serves the record of the
    state directory it runs on, and says so when there is none."""
    from adminlib import Admin
    disk = os.path.join(tmp, "models-disk")
    os.makedirs(disk)
    shutil.copy(os.path.join(BUILD, "demo", "privai-demo.gguf"), os.path.join(disk, "small chat.gguf"))
    open(os.path.join(disk, "broken.gguf"), "wb").write(b"GGUF\x03\x00\x00\x00 cut short")
    models = ",".join(os.path.join(disk, f) for f in ("small chat.gguf", "broken.gguf", "missing.gguf"))
    r = Root(tmp, "shown", cloud=yaml_config({"hostname": "shown-node", "ip": "10.0.0.300/24",
                                              "admin_password": PW, "models": models}))
    r.run()
    check(r.steps.get("models", {}).get("state") == "refused", "a path with a space is refused at day 0",
          r.steps.get("models"))
    r = Root(tmp, "shown2", cloud=yaml_config({"hostname": "shown-node", "ip": "10.0.0.300/24",
                                               "admin_password": PW, "models": models.replace("small chat",
                                                                                              "small-chat")}))
    os.rename(os.path.join(disk, "small chat.gguf"), os.path.join(disk, "small-chat.gguf"))
    models = models.replace("small chat", "small-chat")
    r.run()
    env = r.read("/etc/privai/admin.env") or ""
    check(r.steps.get("models", {}).get("state") == "applied" and f"PRIVAI_DAY0_MODELS={models}\n" in env,
          "day-0 models are handed to privai-admin", (r.steps.get("models"), env))
    r.run()
    check(r.steps.get("models", {}).get("state") == "unchanged", "and not again at the next boot",
          r.steps.get("models"))
    state = r.path + "/var/lib/privai"
    shutil.copy(os.path.join(disk, "small-chat.gguf"), os.path.join(disk, "-odd&name.gguf"))
    day0 = {"PRIVAI_DAY0_MODELS": models + "," + os.path.join(disk, "small-chat.gguf") + "," +
            os.path.join(disk, "-odd&name.gguf")}
    adm = Admin(BUILD, state, "correct horse battery staple", ports="19400-19409", env_extra=day0)
    try:
        c = adm.client()
        c.login("admin", "correct horse battery staple")
        a = c.get("/api/v1/system/appliance")
        fb = (a.json or {}).get("firstboot") or {}
        steps = {s["step"]: s["state"] for s in fb.get("steps", [])}
        check(a.status == 200 and steps.get("hostname") == "unchanged" and steps.get("network") == "fallback" and
              fb["keys"]["admin_password"]["value"] == "(given)", "the console's API shows the day-0 record", a)
        check(adm.client().get("/api/v1/system/appliance").status == 401, "to signed-in users only")
        day0_models(adm, c, disk)
        os.unlink(state + "/firstboot.json")
        a = c.get("/api/v1/system/appliance")
        check(a.status == 200 and a.json["firstboot"] is None and "not started on a privai image" in a.json["note"],
              "without a record: null and why", a)
        open(state + "/firstboot.json", "w").write("{not json")
        a = c.get("/api/v1/system/appliance")
        check(a.status == 200 and a.json["firstboot"] is None and "not a day-0 record" in a.json["note"],
              "a damaged record: null and why", a)
    finally:
        adm.stop()


def test_docs():
    """docs/cloud-init.md holds the key table the binary prints."""
    out = subprocess.run([BIN, "--keys"], capture_output=True, text=True).stdout
    doc = open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                            "cloud-init.md")).read()
    check(out.count("\n") == 16 and out in doc, "docs/cloud-init.md lists every key as privai-firstboot --keys does")


def main():
    if not os.path.exists(BIN):
        print(f"{BIN} is not built")
        print("0 passed, 1 failed, 0 skipped")
        return 1
    tmp = tempfile.mkdtemp(prefix="privai-firstboot-")
    try:
        test_precedence(tmp)
        test_bad_values(tmp)
        test_fallbacks(tmp)
        test_broken_sources(tmp)
        test_admin_shows_it(tmp)
        test_docs()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())

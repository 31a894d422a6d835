"""A client pod of the deployed control plane: one authenticated request to each API through
its Service name (the catalog's internal endpoints), and Horizon's login. Prints one JSON
line per check; writes a summary to /dev/termination-log; exits 1 when a check failed.

Environment: OS_AUTH_URL (Keystone's internal endpoint), OS_PASSWORD (admin), HORIZON_URL.
Only keystoneauth1 and requests, which every service image has."""
import hashlib
import json
import os
import re
import sys
import time

import requests
from keystoneauth1 import session
from keystoneauth1.identity import v3

results = {}


def check(name):
    def wrap(fn):
        t = time.monotonic()
        try:
            detail = fn()
            results[name] = {"ok": True, "detail": detail}
        except Exception as e:  # every failure is reported, none stops the others
            results[name] = {"ok": False, "detail": f"{type(e).__name__}: {e}"[:300]}
        results[name]["s"] = round(time.monotonic() - t, 2)
        print(json.dumps({name: results[name]}), flush=True)
        return fn
    return wrap


auth = v3.Password(auth_url=os.environ["OS_AUTH_URL"], username="admin",
                   password=os.environ["OS_PASSWORD"], project_name="admin",
                   user_domain_id="default", project_domain_id="default")
sess = session.Session(auth=auth)
internal = {"interface": "internal"}


def ok(r, *codes):
    if r.status_code not in (codes or (200,)):
        raise RuntimeError(f"{r.request.method} {r.url}: {r.status_code} {r.text[:200]}")
    return r


@check("token")
def _():
    tok = sess.get_token()
    return f"{len(tok)}-character token from {os.environ['OS_AUTH_URL']}"


@check("placement")
def _():
    r = ok(sess.get("/resource_providers", endpoint_filter={"service_type": "placement", **internal},
                    headers={"OpenStack-API-Version": "placement 1.10"}, raise_exc=False))
    return f"{sess.get_endpoint(service_type='placement', **internal)}: {len(r.json()['resource_providers'])} resource providers"


@check("image")
def _():
    ef = {"service_type": "image", **internal}
    data = os.urandom(1 << 20)
    img = ok(sess.post("/v2/images", endpoint_filter=ef, raise_exc=False, json={
        "name": "e2e-node-image", "disk_format": "raw", "container_format": "bare"}), 201).json()
    try:
        ok(sess.put(f"/v2/images/{img['id']}/file", endpoint_filter=ef, raise_exc=False, data=data,
                    headers={"Content-Type": "application/octet-stream"}), 204)
        got = ok(sess.get(f"/v2/images/{img['id']}/file", endpoint_filter=ef, raise_exc=False)).content
        if hashlib.sha256(got).hexdigest() != hashlib.sha256(data).hexdigest():
            raise RuntimeError(f"downloaded {len(got)} bytes differ from the {len(data)} uploaded")
        status = ok(sess.get(f"/v2/images/{img['id']}", endpoint_filter=ef, raise_exc=False)).json()["status"]
        return f"{sess.get_endpoint(**ef)}: 1 MiB uploaded and downloaded, sha256 equal, status {status}"
    finally:
        sess.delete(f"/v2/images/{img['id']}", endpoint_filter=ef, raise_exc=False)


@check("network")
def _():
    ef = {"service_type": "network", **internal}
    net = ok(sess.post("/v2.0/networks", endpoint_filter=ef, raise_exc=False,
                       json={"network": {"name": "e2e-node-net"}}), 201).json()["network"]
    ok(sess.delete(f"/v2.0/networks/{net['id']}", endpoint_filter=ef, raise_exc=False), 204)
    return f"{sess.get_endpoint(**ef)}: network {net['id']} created ({net['status']}) and deleted"


@check("compute_services")
def _():
    ef = {"service_type": "compute", **internal}
    svcs = ok(sess.get("/os-services", endpoint_filter=ef, raise_exc=False)).json()["services"]
    names = sorted({f"{s['binary']}:{s['state']}" for s in svcs})
    if not any(s["binary"] == "nova-conductor" and s["state"] == "up" for s in svcs):
        raise RuntimeError(f"no nova-conductor up: {names}")
    return f"{sess.get_endpoint(**ef)}: {names}"


@check("volume_types")
def _():
    ef = {"service_type": "block-storage", **internal}
    pid = sess.get_project_id()
    types = ok(sess.get(f"/types", endpoint_filter=ef, raise_exc=False)).json()["volume_types"]
    return f"{sess.get_endpoint(**ef)} (project {pid[:8]}…): types {[t['name'] for t in types]}"


@check("horizon_login")
def _():
    base = os.environ["HORIZON_URL"].rstrip("/")
    s = requests.Session()
    page = ok(s.get(f"{base}/auth/login/", timeout=60))
    m = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    if not m:
        raise RuntimeError("no CSRF token on the login page")
    form = {"csrfmiddlewaretoken": m.group(1), "username": "admin",
            "password": os.environ["OS_PASSWORD"], "next": "/"}
    region = re.search(r'name="region"[^>]*value="([^"]+)"', page.text)
    if region:
        form["region"] = region.group(1)
    domain = re.search(r'name="domain"', page.text)
    if domain:
        form["domain"] = "Default"
    r = s.post(f"{base}/auth/login/", data=form, headers={"Referer": f"{base}/auth/login/"},
               timeout=120)
    ok(r)
    if "/auth/login" in r.url or "sessionid" not in s.cookies:
        raise RuntimeError(f"still on the login page ({r.url}): {re.findall(r'alert-danger[^<]*<[^<]*', r.text)[:2]}")
    title = re.search(r"<title>([^<]*)</title>", r.text)
    return f"logged in, landed on {r.url} ({title.group(1).strip() if title else 'no title'})"


summary = {k: v["ok"] for k, v in results.items()}
with open("/dev/termination-log", "w") as f:
    f.write(json.dumps({k: (v["ok"], v["detail"][:150]) for k, v in results.items()}))
print(json.dumps({"summary": summary}), flush=True)
sys.exit(0 if all(summary.values()) else 1)

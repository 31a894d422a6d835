"""Idempotent post-start set-up of the test cloud (run by `scripts/test-cloud up` with the venv's Python).

- roles admin, member, reader, service
- project `service`, one service user per API service (roles admin + service on `service`)
- catalog: image, network, compute, placement, block-storage, volumev3 (identity comes from
  keystone-manage bootstrap), region RegionOne, public/internal/admin endpoints
- flat provider network `external` (physnet `external`, router:external, not shared) with
  subnet `external-subnet` 203.0.113.0/24 (no DHCP, allocation pool .10-.250)
- application credential `test-cloud-admin` for admin (fixed secret) and clouds.yaml with the
  clouds `local-admin` (password) and `local-admin-appcred` (v3applicationcredential)
- Octavia: catalog type `load-balancer` (unversioned URL), service user `octavia`
- Zun: catalog type `container`; two tenants: projects `demo` and `demo2`, each with a user of
  the same name (role member, password TC_DEMO_PW), an application credential `test-cloud-NAME`
  (the admin's fixed secret), clouds `local-NAME` and `local-NAME-appcred`, and a tenant network
  (vxlan, owned by the project): `zun-pods` 10.240.0.0/24 and `zun-pods-2` 10.241.0.0/24, subnets
  `<network>-subnet`; "network id" lines are written to TC_NETWORK_ID_FILE

`bootstrap.py wait-zun` waits until zun-compute's host (TC_ZUN_HOST) is up in zun-api.
`bootstrap.py sweep-e2e` deletes what killed end-to-end runs left in the tenant projects (see
sweep_e2e).

Inputs come from the environment (TC_*), set by scripts/test-cloud.
"""

import datetime
import json
import os
import sys
import time

from keystoneauth1 import exceptions, session
from keystoneauth1.identity import v3

KS = os.environ["TC_KS_URL"]  # http://127.0.0.1:5000/v3
ADMIN_PW = os.environ["TC_ADMIN_PW"]
HOST = os.environ.get("TC_HOST", "127.0.0.1")
WAIT_ZUN = sys.argv[1:] == ["wait-zun"]
SWEEP_E2E = sys.argv[1:] == ["sweep-e2e"]
if not (WAIT_ZUN or SWEEP_E2E):
    SVC_PW = os.environ["TC_SVC_PW"]
    APPCRED_SECRET = os.environ["TC_APPCRED_SECRET"]
    CLOUDS = os.environ["TC_CLOUDS"]
    DEMO_PW = os.environ["TC_DEMO_PW"]
    NETWORK_ID_FILE = os.environ["TC_NETWORK_ID_FILE"]
# tenants for Zun: project = user name, its network, the network's subnet
TENANTS = [("demo", "zun-pods", "10.240.0.0/24"), ("demo2", "zun-pods-2", "10.241.0.0/24")]
ZUN = f"http://{HOST}:9517/v1"
# the newest microversion zun 18 (2026.1) knows
ZUN_MICROVERSION = "container 1.40"
REGION = "RegionOne"
APPCRED_NAME = "test-cloud-admin"
# set by scripts/test-cloud when its inputs changed (not on a plain restart)
CHECK_PASSWORDS = os.environ.get("TC_CHECK_PASSWORDS") == "1"

# user, service name, service type, endpoint URL
CATALOG = [
    ("glance", "glance", "image", f"http://{HOST}:9292"),
    ("neutron", "neutron", "network", f"http://{HOST}:9696"),
    ("nova", "nova", "compute", f"http://{HOST}:8774/v2.1"),
    ("placement", "placement", "placement", f"http://{HOST}:8778"),
    ("cinder", "cinder", "block-storage", f"http://{HOST}:8776/v3"),
    ("cinder", "cinderv3", "volumev3", f"http://{HOST}:8776/v3"),
    ("zun", "zun", "container", f"http://{HOST}:9517/v1"),
    # unversioned: clients discover v2 from its version document
    ("octavia", "octavia", "load-balancer", f"http://{HOST}:9876"),
]
NEUTRON = f"http://{HOST}:9696/v2.0"


def log(msg):
    print(time.strftime("%Y-%m-%dT%H:%M:%S"), msg, flush=True)


def admin_session():
    auth = v3.Password(auth_url=KS, username="admin", password=ADMIN_PW, project_name="admin",
                       user_domain_id="default", project_domain_id="default")
    return session.Session(auth=auth)


S = admin_session()


def user_session(user, password, project):
    auth = v3.Password(auth_url=KS, username=user, password=password, project_name=project,
                       user_domain_id="default", project_domain_id="default")
    return session.Session(auth=auth)


def get(url, key):
    return S.get(url).json()[key]


def ensure(url, key, query, body):
    """GET url?query; POST body if nothing matched. Returns the resource."""
    found = get(f"{url}?{query}", key + "s")
    if found:
        return found[0]
    log(f"create {key} {body.get('name', '')}")
    return S.post(url, json={key: body}).json()[key]


def password_works(user, password):
    auth = v3.Password(auth_url=KS, username=user, password=password, user_domain_id="default",
                       project_name="service", project_domain_id="default")
    try:
        session.Session(auth=auth).get_token()
        return True
    except exceptions.Unauthorized:
        return False


def keystone():
    # a few list calls instead of one query per object: each keystone request costs ~0.2 s here
    roles = {r["name"]: r["id"] for r in get(f"{KS}/roles", "roles")}
    for name in ("admin", "member", "reader", "service"):
        if name not in roles:
            log(f"create role {name}")
            roles[name] = S.post(f"{KS}/roles", json={"role": {"name": name}}).json()["role"]["id"]
    proj = ensure(f"{KS}/projects", "project", "name=service&domain_id=default",
                  {"name": "service", "domain_id": "default", "description": "OpenStack services"})
    users = {u["name"]: u for u in get(f"{KS}/users?domain_id=default", "users")}
    assigned = {(a["user"]["id"], a["role"]["id"])
                for a in get(f"{KS}/role_assignments?scope.project.id={proj['id']}", "role_assignments")
                if "user" in a}
    for user in sorted({c[0] for c in CATALOG}):
        u = users.get(user)
        if u is None:
            log(f"create user {user}")
            u = S.post(f"{KS}/users", json={"user": {
                "name": user, "domain_id": "default", "password": SVC_PW}}).json()["user"]
        elif CHECK_PASSWORDS and not password_works(user, SVC_PW):
            # keep the password in step with TEST_CLOUD_SERVICE_PASSWORD
            log(f"reset password of {user}")
            S.patch(f"{KS}/users/{u['id']}", json={"user": {"password": SVC_PW}})
        for r in ("admin", "service"):
            if (u["id"], roles[r]) not in assigned:
                S.put(f"{KS}/projects/{proj['id']}/users/{u['id']}/roles/{roles[r]}")
    services = {(v["type"], v["name"]): v for v in get(f"{KS}/services", "services")}
    endpoints = {}
    for e in get(f"{KS}/endpoints", "endpoints"):
        endpoints.setdefault(e["service_id"], {})[e["interface"]] = e
    for _user, name, stype, url in CATALOG:
        svc = services.get((stype, name))
        if svc is None:
            log(f"create service {name} ({stype})")
            svc = S.post(f"{KS}/services", json={"service": {
                "name": name, "type": stype, "enabled": True}}).json()["service"]
        have = endpoints.get(svc["id"], {})
        for iface in ("public", "internal", "admin"):
            e = have.get(iface)
            if e is None:
                log(f"create endpoint {stype} {iface} {url}")
                S.post(f"{KS}/endpoints", json={"endpoint": {
                    "service_id": svc["id"], "interface": iface, "url": url, "region_id": REGION}})
            elif e["url"] != url or e.get("region_id") != REGION:
                log(f"update endpoint {stype} {iface} {url}")
                S.patch(f"{KS}/endpoints/{e['id']}", json={"endpoint": {"url": url, "region_id": REGION}})


def appcred():
    """Application credential for admin with a fixed secret; (re)created if it does not authenticate."""
    uid = S.get_user_id()
    base = f"{KS}/users/{uid}/application_credentials"
    for ac in get(f"{base}?name={APPCRED_NAME}", "application_credentials"):
        if not CHECK_PASSWORDS:
            return ac["id"]
        try:
            auth = v3.ApplicationCredential(auth_url=KS, application_credential_id=ac["id"],
                                            application_credential_secret=APPCRED_SECRET)
            session.Session(auth=auth).get_token()
            return ac["id"]
        except exceptions.Unauthorized:
            log(f"application credential {ac['id']} does not authenticate: recreating")
            S.delete(f"{base}/{ac['id']}")
    log(f"create application credential {APPCRED_NAME}")
    ac = S.post(base, json={"application_credential": {
        "name": APPCRED_NAME, "secret": APPCRED_SECRET,
        "description": "scripts/test-cloud: admin on project admin"}}).json()["application_credential"]
    return ac["id"]


def network():
    nets = get(f"{NEUTRON}/networks?name=external", "networks")
    if nets:
        net = nets[0]
    else:
        log("create network external")
        net = S.post(f"{NEUTRON}/networks", json={"network": {
            "name": "external", "router:external": True, "shared": False,
            "provider:network_type": "flat", "provider:physical_network": "external",
            "description": "scripts/test-cloud: flat provider network for router gateways"}}).json()["network"]
    if not net["router:external"] or net["shared"]:
        S.put(f"{NEUTRON}/networks/{net['id']}", json={"network": {"router:external": True, "shared": False}})
    if not get(f"{NEUTRON}/subnets?network_id={net['id']}&name=external-subnet", "subnets"):
        log("create subnet external-subnet")
        S.post(f"{NEUTRON}/subnets", json={"subnet": {
            "name": "external-subnet", "network_id": net["id"], "ip_version": 4,
            "cidr": "203.0.113.0/24", "gateway_ip": "203.0.113.1", "enable_dhcp": False,
            "allocation_pools": [{"start": "203.0.113.10", "end": "203.0.113.250"}]}})


def tenant(name, network, cidr):
    """Project and user NAME (role member): a tenant whose pods run on Zun, with its own
    network, subnet and application credential. Returns (appcred id, network id)."""
    roles = {r["name"]: r["id"] for r in get(f"{KS}/roles", "roles")}
    proj = ensure(f"{KS}/projects", "project", f"name={name}&domain_id=default",
                  {"name": name, "domain_id": "default", "description": "scripts/test-cloud: a tenant for Zun"})
    found = get(f"{KS}/users?name={name}&domain_id=default", "users")
    if found:
        u = found[0]
        if CHECK_PASSWORDS and not user_password_works(name, DEMO_PW, name):
            log(f"reset password of {name}")
            S.patch(f"{KS}/users/{u['id']}", json={"user": {"password": DEMO_PW}})
    else:
        log(f"create user {name}")
        u = S.post(f"{KS}/users", json={"user": {
            "name": name, "domain_id": "default", "password": DEMO_PW,
            "default_project_id": proj["id"]}}).json()["user"]
    S.put(f"{KS}/projects/{proj['id']}/users/{u['id']}/roles/{roles['member']}")

    nets = get(f"{NEUTRON}/networks?name={network}&project_id={proj['id']}", "networks")
    if nets:
        net = nets[0]
    else:
        log(f"create network {network}")
        net = S.post(f"{NEUTRON}/networks", json={"network": {
            "name": network, "project_id": proj["id"],
            "description": f"scripts/test-cloud: tenant network for Zun containers (project {name})"}}).json()["network"]
    if not get(f"{NEUTRON}/subnets?network_id={net['id']}&name={network}-subnet", "subnets"):
        log(f"create subnet {network}-subnet")
        gw = cidr.rsplit(".", 2)[0] + ".0.1"
        S.post(f"{NEUTRON}/subnets", json={"subnet": {
            "name": f"{network}-subnet", "network_id": net["id"], "project_id": proj["id"],
            "ip_version": 4, "cidr": cidr, "gateway_ip": gw, "enable_dhcp": False}})

    ds = user_session(name, DEMO_PW, name)
    base = f"{KS}/users/{u['id']}/application_credentials"
    ac_name = f"test-cloud-{name}"
    for ac in ds.get(f"{base}?name={ac_name}").json()["application_credentials"]:
        if not CHECK_PASSWORDS:
            return ac["id"], net["id"]
        try:
            auth = v3.ApplicationCredential(auth_url=KS, application_credential_id=ac["id"],
                                            application_credential_secret=APPCRED_SECRET)
            session.Session(auth=auth).get_token()
            return ac["id"], net["id"]
        except exceptions.Unauthorized:
            log(f"application credential {ac['id']} does not authenticate: recreating")
            ds.delete(f"{base}/{ac['id']}")
    log(f"create application credential {ac_name}")
    ac = ds.post(base, json={"application_credential": {
        "name": ac_name, "secret": APPCRED_SECRET,
        "description": f"scripts/test-cloud: {name} (member) on project {name}"}}).json()["application_credential"]
    return ac["id"], net["id"]


def user_password_works(user, password, project):
    try:
        user_session(user, password, project).get_token()
        return True
    except exceptions.Unauthorized:
        return False


def heartbeat(svc):
    """A Zun service's last report as seconds since the epoch (the database stores UTC)."""
    at = svc.get("last_seen_up") or svc.get("updated_at") or svc.get("created_at") or ""
    try:
        t = datetime.datetime.fromisoformat(at)
    except ValueError:
        return 0.0
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return t.timestamp()


def wait_zun():
    """Wait until zun-api answers and lists zun-compute's host (its resource tracker reported).
    With TC_ZUN_SINCE (when zun-compute was started, seconds since the epoch) its heartbeat must
    be that recent: zun-api calls a service up for minutes after its last report, and a CI run
    once passed this wait on the report of a zun-compute that no longer ran."""
    host = os.environ["TC_ZUN_HOST"]
    # the database keeps whole seconds
    since = float(os.environ.get("TC_ZUN_SINCE") or 0) - 1
    hdr = {"OpenStack-API-Version": ZUN_MICROVERSION}
    deadline = time.time() + 180
    last = "no answer"
    while time.time() < deadline:
        try:
            svcs = S.get(f"{ZUN}/services", headers=hdr).json()["services"]
            hosts = S.get(f"{ZUN}/hosts", headers=hdr).json()["hosts"]
            up = [
                s
                for s in svcs
                if s["binary"] == "zun-compute" and s["host"] == host and s["state"] == "up" and heartbeat(s) >= since
            ]
            if up and any(h["hostname"] == host for h in hosts):
                log(f"zun: compute host {host} is up")
                return
            last = (
                f"services {[(s['host'], s['state'], s.get('last_seen_up')) for s in svcs]}, "
                f"hosts {[h['hostname'] for h in hosts]}"
            )
        except (exceptions.HttpError, exceptions.ConnectFailure, KeyError, ValueError) as e:
            last = repr(e)
        time.sleep(1)
    log(f"zun: compute host {host} not up after 180 s: {last}")
    sys.exit(1)


def sweep_e2e():
    """Delete the Neutron ports not bound to anything and the security groups that test nodes'
    pods left in the tenant projects (names `vk_e2e-...`: the virtual kubelet names a pod's port
    and group `vk_<node>_<pod uid>`, and the e2e tests' nodes are `e2e-...`). A test killed
    before its cleanup leaves them, and ten groups fill a project's default quota, failing every
    later run. Only for before the suite: a running test's group may not be on its port yet."""
    projects = {p["name"]: p["id"] for p in get(f"{KS}/projects", "projects")}
    for name, _, _ in TENANTS:
        pid = projects.get(name)
        if pid is None:
            continue
        for port in get(f"{NEUTRON}/ports?project_id={pid}", "ports"):
            if port["name"].startswith("vk_e2e-") and not port.get("device_id"):
                S.delete(f"{NEUTRON}/ports/{port['id']}", raise_exc=False)
                log(f"sweep: deleted port {port['name']} of {name}")
        for g in get(f"{NEUTRON}/security-groups?project_id={pid}", "security_groups"):
            if g["name"].startswith("vk_e2e-"):
                r = S.delete(f"{NEUTRON}/security-groups/{g['id']}", raise_exc=False)
                log(f"sweep: security group {g['name']} of {name}: HTTP {r.status_code}")


def q(s):
    return json.dumps(s)  # a JSON string is a valid double-quoted YAML scalar


def write_clouds(ac_id, tenant_acs):
    common = f"""    region_name: {REGION}
    identity_api_version: 3
    interface: public
"""
    text = f"""# written by scripts/test-cloud up
clouds:
  local-admin:
    auth_type: password
    auth:
      auth_url: {q(KS)}
      username: admin
      password: {q(ADMIN_PW)}
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
{common}  local-admin-appcred:
    auth_type: v3applicationcredential
    auth:
      auth_url: {q(KS)}
      application_credential_id: {q(ac_id)}
      application_credential_secret: {q(APPCRED_SECRET)}
{common}"""
    for name, ac in tenant_acs.items():
        text += f"""  local-{name}:
    auth_type: password
    auth:
      auth_url: {q(KS)}
      username: {name}
      password: {q(DEMO_PW)}
      project_name: {name}
      user_domain_name: Default
      project_domain_name: Default
{common}  local-{name}-appcred:
    auth_type: v3applicationcredential
    auth:
      auth_url: {q(KS)}
      application_credential_id: {q(ac)}
      application_credential_secret: {q(APPCRED_SECRET)}
{common}"""
    tmp = CLOUDS + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, CLOUDS)


def main():
    if WAIT_ZUN:
        wait_zun()
        return
    if SWEEP_E2E:
        sweep_e2e()
        return
    log("bootstrap start")
    keystone()
    ac_id = appcred()
    network()
    tenants = {name: tenant(name, network, cidr) for name, network, cidr in TENANTS}
    with open(NETWORK_ID_FILE, "w") as f:
        f.writelines(f"{network} {tenants[name][1]}\n" for name, network, _ in TENANTS)
    write_clouds(ac_id, {name: ac for name, (ac, _) in tenants.items()})
    log("bootstrap done")


if __name__ == "__main__":
    try:
        main()
    except exceptions.HttpError as e:
        log(f"HTTP error: {e} {getattr(e, 'response', None) and e.response.text}")
        sys.exit(1)

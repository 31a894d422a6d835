# smoke-zun.sh - sourced by smoke.sh (uses its ok/has/not/api/jget helpers, $TMP, $SFX, $PY):
# Zun as the tenant `demo` on its network `zun-pods`.
# A plain container (CLI: python-zunclient in the zun venv) and a capsule (raw REST with the
# microversion header, as the virtual kubelet does), through zun-api, RabbitMQ, zun-compute,
# Placement, Neutron, kuryr and dockerd, all real.
ZO=$TC_DIR/zun-venv/bin/openstack
ZUN=http://127.0.0.1:9517/v1
ZMV='OpenStack-API-Version: container 1.40'
zosc() { OS_CLOUD=${ZCLOUD:-local-demo} "$ZO" "$@"; }
DEMO_AUTH=$("$PY" -c '
import json, sys, yaml
a = yaml.safe_load(open(sys.argv[1]))["clouds"]["local-demo"]["auth"]
print(json.dumps({"auth": {"identity": {"methods": ["password"], "password": {"user": {
    "name": a["username"], "password": a["password"], "domain": {"name": a["user_domain_name"]}}}},
    "scope": {"project": {"name": a["project_name"], "domain": {"name": a["project_domain_name"]}}}}}))
' "$OS_CLIENT_CONFIG_FILE")
DTOKEN=$(curl -sf -D - -o /dev/null -H 'Content-Type: application/json' -d "$DEMO_AUTH" \
  http://127.0.0.1:5000/v3/auth/tokens | awk 'tolower($1) == "x-subject-token:" {print $2}' | tr -d '\r')
zapi() { curl -sf -H "X-Auth-Token: $DTOKEN" -H "$ZMV" -H 'Content-Type: application/json' "$@"; }
# zwait WHAT ID REGEX [SECONDS]: until `WHAT show ID`'s status matches REGEX (prints the last status)
zwait() {
  local st="" end=$((SECONDS + ${4:-60}))
  [ -n "$2" ] || return 1
  while ((SECONDS < end)); do
    st=$(zosc "$1" show "$2" -f value -c status 2>/dev/null)
    [[ $st =~ $3 ]] && break
    sleep 0.5
  done
  echo "$st"
  [[ $st =~ $3 ]]
}
# zgone WHAT ID: until GET /v1/WHAT/ID fails (404)
zgone() {
  local end=$((SECONDS + 60))
  [ -n "$2" ] || return 1
  while ((SECONDS < end)); do
    zapi -o /dev/null "$ZUN/$1/$2" || return 0
    sleep 0.5
  done
  return 1
}
no_ports_of() { [ "$(api "http://127.0.0.1:9696/v2.0/ports?device_id=$1" | jget 'len(d["ports"])')" = 0 ]; }
ok has '"max_version": "1.40"' curl -sf http://127.0.0.1:9517/
ok has "^container http://127.0.0.1:9517/v1" osc endpoint list --interface public -f value -c 'Service Type' -c URL
ok has 'zun-compute +up ' zosc --os-cloud local-admin appcontainer service list -f value
NET=$(zosc network show zun-pods -f value -c id)
ok test -n "$NET"
ok zosc appcontainer run --name "zhello$SFX" --net "network=$NET" busybox echo hello
ok zwait appcontainer "zhello$SFX" '^(Stopped|Error)$'
ok has '^Stopped$' zosc appcontainer show "zhello$SFX" -f value -c status
ok has '^hello$' zosc appcontainer logs "zhello$SFX"
ok zosc appcontainer run --name "zsleep$SFX" --net "network=$NET" --cpu 0.5 --memory 64 busybox sleep 600
ok zwait appcontainer "zsleep$SFX" '^(Running|Error)$'
ok has '^10\.240\.0\.' zosc appcontainer show "zsleep$SFX" -f value -c addresses
# exec takes one command string (Zun splits it): keep it free of shell quoting
ok has '^in-exec$' zosc appcontainer exec "zsleep$SFX" echo in-exec
ok has '^10\.240\.0\.' zosc appcontainer exec "zsleep$SFX" hostname -i
ZHELLO=$(zosc appcontainer show "zhello$SFX" -f value -c uuid)
ZSLEEP=$(zosc appcontainer show "zsleep$SFX" -f value -c uuid)
cat >"$TMP/capsule.json" <<EOF
{"template": {"kind": "capsule", "capsuleVersion": "beta",
  "metadata": {"name": "zcap$SFX", "labels": {"app": "smoke$SFX"}, "annotations": {"smoke": "yes"}},
  "spec": {"restartPolicy": "Never",
    "initContainers": [{"image": "busybox", "command": ["sh", "-c", "echo init"]}],
    "containers": [
      {"image": "busybox", "command": ["sh", "-c"], "args": ["echo capsule-hello; sleep 600"],
       "env": {"GREETING": "hi"}, "workDir": "/tmp",
       "resources": {"requests": {"cpu": 0.25, "memory": 64}}},
      {"image": "busybox", "command": ["sleep", "600"], "resources": {"requests": {"cpu": 0.25, "memory": 32}}}]}}}
EOF
CAP=$(zapi -X POST "$ZUN/capsules" -d @"$TMP/capsule.json" | jget 'd["uuid"]')
ok test -n "$CAP"
ok zwait capsule "$CAP" '^(Running|Error|Failed)$' 90
ok has '^Running$' zosc capsule show "$CAP" -f value -c status
ok has '10\.240\.0\.' zapi "$ZUN/capsules/$CAP"
ok has "zcap$SFX" zapi "$ZUN/capsules"
# stock Zun 18 refuses `nets` in a capsule template: a capsule gets the project's oldest
# non-shared network (demo has only zun-pods)
ok has "\"$NET\"" zapi "$ZUN/capsules/$CAP"
# stock Zun: capsule members have no logs endpoint (404), plain containers do
MEMBER=$(zapi "$ZUN/capsules/$CAP" | jget '[c["uuid"] for c in d["containers"]][0]')
ok not zapi -o /dev/null "$ZUN/containers/$MEMBER/logs"
# a second tenant: its container lands on its own network; neither tenant sees the other's
NET2=$(OS_CLOUD=local-demo2 "$ZO" network show zun-pods-2 -f value -c id)
ok test -n "$NET2"
ok not zosc network show zun-pods-2
ok zosc --os-cloud local-demo2-appcred appcontainer run --name "zt2$SFX" --net "network=$NET2" busybox true
ZT2=$(OS_CLOUD=local-demo2 "$ZO" appcontainer show "zt2$SFX" -f value -c uuid)
zwait2() { ZCLOUD=local-demo2 zwait "$@"; }
ok zwait2 appcontainer "$ZT2" '^(Stopped|Error)$'
ok has '^Stopped$' zosc --os-cloud local-demo2 appcontainer show "$ZT2" -f value -c status
ok has '^10\.241\.0\.' zosc --os-cloud local-demo2 appcontainer show "$ZT2" -f value -c addresses
ok not zosc appcontainer show "$ZT2"
ok not has "zt2$SFX" zosc appcontainer list -f value -c name
ok zosc appcontainer stop "$ZSLEEP"
ok zwait appcontainer "$ZSLEEP" '^Stopped$'
ok zosc appcontainer delete "$ZSLEEP" "$ZHELLO"
ok zapi -X DELETE "$ZUN/capsules/$CAP"
ok zgone containers "$ZSLEEP"
ok zgone containers "$ZHELLO"
ok zosc --os-cloud local-demo2 appcontainer delete --stop "$ZT2"
ok zgone capsules "$CAP"
ok no_ports_of "$ZSLEEP"
ok no_ports_of "$CAP"

zun_cleanup() { # best effort, after a failed check
  local c
  for c in "${ZSLEEP:-}" "${ZHELLO:-}"; do [ -z "$c" ] || zosc appcontainer delete --stop "$c"; done
  [ -z "${ZT2:-}" ] || zosc --os-cloud local-demo2 appcontainer delete --stop "$ZT2"
  [ -z "${CAP:-}" ] || zapi -X DELETE "$ZUN/capsules/$CAP"
}

#!/usr/bin/env bash
# smoke.sh - run by `scripts/test-cloud smoke`: exercise the API features the operator needs
# against a running test cloud, with the openstack CLI from the test cloud's venv.
# Prints one line per check and "N passed, N failed"; exits non-zero if any check failed.
# Everything it creates carries a random suffix and is deleted at the end.
# With the argument `zun` it runs only the Zun checks (smoke-zun.sh).
set -uo pipefail
TC_DIR=${TEST_CLOUD_DIR:-/var/cache/openstack-operator/test-cloud}
export OS_CLIENT_CONFIG_FILE=$TC_DIR/clouds.yaml OS_CLOUD=local-admin
O=$TC_DIR/venv/bin/openstack
PY=$TC_DIR/venv/bin/python
IMG_BASE=http://127.0.0.1:${TEST_CLOUD_IMAGE_PORT:-18000}
if [ ! -x "$O" ] || [ ! -f "$OS_CLIENT_CONFIG_FILE" ]; then
  echo "smoke: no test cloud under $TC_DIR (scripts/test-cloud up)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
PASS=0 FAIL=0 SFX=$RANDOM
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

ok() {
  if "$@" >"$TMP/out" 2>&1; then
    PASS=$((PASS + 1))
    echo "ok   $*" | cut -c1-160
  else
    FAIL=$((FAIL + 1))
    echo "FAIL $*" | cut -c1-160
    tail -n 5 "$TMP/out" | sed 's/^/     /'
  fi
}
not() { ! "$@"; }
osc() { "$O" "$@"; }
# has REGEX CMD...: CMD succeeds and a line of its output matches REGEX
has() {
  local re=$1
  shift
  "$@" >"$TMP/has" && grep -qE -- "$re" "$TMP/has"
}
jget() { "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
# raw API calls with a token renewed every 20 s (TEST_CLOUD_TOKEN_EXPIRATION may be short)
AUTH_BODY=$("$PY" -c '
import json, sys, yaml
a = yaml.safe_load(open(sys.argv[1]))["clouds"]["local-admin"]["auth"]
print(json.dumps({"auth": {"identity": {"methods": ["password"], "password": {"user": {
    "name": a["username"], "password": a["password"], "domain": {"name": a["user_domain_name"]}}}},
    "scope": {"project": {"name": a["project_name"], "domain": {"name": a["project_domain_name"]}}}}}))
' "$OS_CLIENT_CONFIG_FILE")
TOKEN="" TOKEN_AT=0
token() {
  if [ $(($(date +%s) - TOKEN_AT)) -gt 20 ]; then
    TOKEN=$(curl -sf -D - -o /dev/null -H 'Content-Type: application/json' -d "$AUTH_BODY" \
      http://127.0.0.1:5000/v3/auth/tokens | awk 'tolower($1) == "x-subject-token:" {print $2}' | tr -d '\r')
    TOKEN_AT=$(date +%s)
  fi
}
api() {
  token
  curl -sf -H "X-Auth-Token: $TOKEN" -H 'Content-Type: application/json' "$@"
}
token
if [ -z "$TOKEN" ]; then
  echo "smoke: cannot get a token from keystone"
  echo "0 passed, 1 failed"
  exit 1
fi

if [ "${1:-}" = zun ]; then # `scripts/test-cloud smoke zun`: only the Zun checks
  . "$(dirname "$0")/smoke-zun.sh"
  zun_cleanup >/dev/null 2>&1
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" = 0 ]
  exit
fi

# ---------------------------------------------------------------- keystone
ok osc --os-cloud local-admin-appcred token issue
ok has '^member$' osc role list -f value -c Name
ok has '^reader$' osc role list -f value -c Name
ok osc domain create "dom$SFX"
ok osc project create --domain "dom$SFX" "proj$SFX"
PID=$(osc project show --domain "dom$SFX" "proj$SFX" -f value -c id)
ok osc group create --domain "dom$SFX" "grp$SFX"
ok osc role add --group "grp$SFX" --group-domain "dom$SFX" --project "$PID" member
ok osc role add --group "grp$SFX" --group-domain "dom$SFX" --domain "dom$SFX" reader
echo '[{"local":[{"user":{"name":"{0}"},"group":{"name":"grp'$SFX'","domain":{"name":"dom'$SFX'"}}}],"remote":[{"type":"OIDC-preferred_username"}]}]' >"$TMP/map.json"
ok osc identity provider create --remote-id "https://idp$SFX.example.com" --domain "dom$SFX" "idp$SFX"
ok osc mapping create --rules "$TMP/map.json" "map$SFX"
# openstackclient 9.0.0 'federation protocol create' has a client-side bug: raw API
ok api -X PUT "http://127.0.0.1:5000/v3/OS-FEDERATION/identity_providers/idp$SFX/protocols/openid" \
  -d '{"protocol":{"mapping_id":"map'$SFX'"}}'

# ---------------------------------------------------------------- nova
ok osc flavor create --ram 512 --disk 1 --vcpus 1 --property hw:cpu_policy=dedicated "fl$SFX"
ok osc flavor set --property hw:mem_page_size=large "fl$SFX"
ok osc flavor unset --property hw:cpu_policy "fl$SFX"
ok osc quota set --cores 16 --ram 32768 --instances 8 "$PID"
ok osc quota show "$PID" --compute
ok osc flavor delete "fl$SFX"

# ---------------------------------------------------------------- cinder
ok osc quota set --volumes 11 --gigabytes 222 --snapshots 33 "$PID"
ok has '^gigabytes 222' osc quota show "$PID" --volume -f value

# ---------------------------------------------------------------- neutron
EXT=$(api http://127.0.0.1:9696/v2.0/extensions | jget '" ".join(e["alias"] for e in d["extensions"])')
has_ext() { [[ " $EXT " == *" $1 "* ]]; }
for e in router ext-gw-mode standard-attr-tag external-net provider extraroute; do ok has_ext "$e"; done
ok has '"router:external": true' osc network show external -f json
ok osc network create --provider-network-type flat --provider-physical-network "flat$SFX" "flat$SFX"
ok osc network create --provider-network-type vlan --provider-physical-network physnet1 --provider-segment $((100 + SFX % 100)) "vlan$SFX"
ok not osc network create --provider-network-type vlan --provider-physical-network "nosuch$SFX" --provider-segment 100 "badvlan$SFX"
ok osc network create --project "$PID" --tag smoke --tag "s$SFX" "net$SFX"
ok has "^net$SFX\$" osc network list --tags "s$SFX" -f value -c Name
ok osc subnet create --project "$PID" --network "net$SFX" --subnet-range 10.1.0.0/24 "sub$SFX"
ok osc router create --project "$PID" --external-gateway external --disable-snat "r$SFX"
ok has '"enable_snat": false' osc router show "r$SFX" -f json
ok osc router set --external-gateway external --enable-snat "r$SFX"
ok osc router add subnet "r$SFX" "sub$SFX"
ok osc security group create --project "$PID" "sg$SFX"
ok osc security group rule create --protocol tcp --dst-port 22 --remote-ip 0.0.0.0/0 "sg$SFX"
ok osc quota set --networks 20 --subnets 30 --ports 100 --routers 5 --secgroups 15 --secgroup-rules 200 "$PID"
ok has '^routers 5' osc quota show "$PID" --network -f value
ok osc router remove subnet "r$SFX" "sub$SFX"
ok osc router delete "r$SFX"

# ---------------------------------------------------------------- glance: upload + web-download import
head -c 1048576 /dev/urandom >"$TMP/img.raw"
ok osc image create --disk-format raw --container-format bare --file "$TMP/img.raw" "up$SFX"
webdl() { # NAME DISK_FORMAT FILE -> image id on stdout
  local id
  id=$(api -X POST http://127.0.0.1:9292/v2/images -d '{"name":"'"$1"'","disk_format":"'"$2"'","container_format":"bare"}' | jget 'd["id"]')
  api -X POST "http://127.0.0.1:9292/v2/images/$id/import" -d '{"method":{"name":"web-download","uri":"'"$IMG_BASE/$3"'"}}' >/dev/null
  echo "$id"
}
status_after() { # ID: status once it leaves 'importing' (at most 30 s)
  local i st
  for i in $(seq 1 60); do
    st=$(api "http://127.0.0.1:9292/v2/images/$1" | jget 'd["status"] + ("/failed:" + d["os_glance_failed_import"] if d.get("os_glance_failed_import") else "")')
    case $st in active | killed | */failed:*) break ;; esac
    sleep 0.5
  done
  echo "$st"
}
RAW=$(webdl "webraw$SFX" raw tiny.raw)
QCOW=$(webdl "webqcow$SFX" qcow2 tiny.qcow2)
BAD=$(webdl "webbad$SFX" qcow2 not-an-image.txt)
ok test "$(status_after "$RAW")" = active
ok test "$(status_after "$QCOW")" = active
BADST=$(status_after "$BAD")
ok not test "$BADST" = active
echo "     (not-an-image.txt imported as qcow2 ends as: $BADST)"

# ---------------------------------------------------------------- keystone: tags on a domain (via /v3/projects)
DID=$(osc domain show "dom$SFX" -f value -c id)
ok api -X PUT "http://127.0.0.1:5000/v3/projects/$DID/tags/smoke$SFX"
domain_has_tag() { api "http://127.0.0.1:5000/v3/domains/$1" | grep "\"$2\"" >/dev/null; }
ok domain_has_tag "$DID" "smoke$SFX"

# ---------------------------------------------------------------- zun
. "$(dirname "$0")/smoke-zun.sh"

# ---------------------------------------------------------------- clean up (best effort, not counted)
{
  for i in "$RAW" "$QCOW" "$BAD"; do api -X DELETE "http://127.0.0.1:9292/v2/images/$i"; done
  osc image delete "up$SFX"
  osc security group delete "sg$SFX"
  osc subnet delete "sub$SFX"
  osc network delete "net$SFX" "vlan$SFX" "flat$SFX"
  osc identity provider delete "idp$SFX"
  osc mapping delete "map$SFX"
  osc group delete --domain "dom$SFX" "grp$SFX"
  osc project delete --domain "dom$SFX" "proj$SFX"
  osc domain set --disable "dom$SFX"
  osc domain delete "dom$SFX"
  zun_cleanup
} >/dev/null 2>&1

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]

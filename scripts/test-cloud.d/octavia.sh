# octavia.sh - sourced by scripts/test-cloud: Octavia (load-balancer API) on the test cloud.
#
#   octavia-api     :9876 (catalog type `load-balancer`), uwsgi running octavia.wsgi.api
#   octavia-worker  the controller worker: takes the API's casts over RabbitMQ (the one Zun uses)
#
# No amphorae, no traffic: the `amphora` provider runs with Octavia's noop amphora, compute,
# network, image and volume drivers (as Octavia's own noop tempest jobs do). Load balancers,
# listeners, pools and members are real API objects in Octavia's database and go through the
# worker's real flows to ACTIVE / ONLINE, but nothing forwards a packet, and the VIP is not a
# Neutron port: the noop network driver hands out the requested vip_address, else 198.51.100.1.
# What it proves: the operator's Octavia calls, the objects' shapes and provisioning states.
#
# Own venv ($TC_DIR/octavia-venv, constraints-octavia.txt): octavia 18.0.1 (2026.1).

OCTAVIA_VENV=$TC_DIR/octavia-venv
OB=$OCTAVIA_VENV/bin
OCTAVIA_CONSTRAINTS=$D/constraints-octavia.txt
OCTAVIA_PKGS=(octavia==18.0.1 PyMySQL python-octaviaclient)
OCTAVIA_PORT=9876

# shellcheck disable=SC2034 # used by scripts/test-cloud, which sources this file
OCTAVIA_SERVICES=(octavia-api octavia-worker)
PORT+=([octavia-api]=$OCTAVIA_PORT [octavia-worker]=-)
URL+=([octavia-api]="http://$HOST:$OCTAVIA_PORT" [octavia-worker]="rpc (topic octavia_prov)")

octavia_answers() { # SERVICE: 0 if it answers, 1 if not, 2 if SERVICE is not one of ours
  case $1 in
  octavia-worker) true ;;
  *) return 2 ;;
  esac
}

octavia_install_hash() {
  { echo "${OCTAVIA_PKGS[*]}"; cat "$OCTAVIA_CONSTRAINTS"; readlink -f "$OB/python" 2>/dev/null || true; } | sha256sum | cut -c1-16
}

octavia_ensure_venv() { # run in a subshell by `up`, beside ensure_venv
  local h
  h=$(octavia_install_hash)
  [ -x "$OB/python" ] && [ "$(cat "$OCTAVIA_VENV/.installed" 2>/dev/null)" = "$h" ] && return 0
  if [ -d "$OCTAVIA_VENV" ] && ! "$OB/python" -c '' 2>/dev/null; then
    log "venv $OCTAVIA_VENV is broken (its Python moved?): recreating"
    rm -rf "$OCTAVIA_VENV"
  fi
  [ -x "$OB/python" ] || "$PYTHON" -m venv "$OCTAVIA_VENV" || die "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
  log "pip install ${OCTAVIA_PKGS[*]} -c constraints-octavia.txt into $OCTAVIA_VENV (log: $LOGS/pip-octavia.log)"
  {
    "$OB/pip" install -c "$OCTAVIA_CONSTRAINTS" -U pip setuptools wheel &&
      "$OB/pip" install -c "$OCTAVIA_CONSTRAINTS" "${OCTAVIA_PKGS[@]}"
  } >>"$LOGS/pip-octavia.log" 2>&1 || {
    tail -n 30 "$LOGS/pip-octavia.log" >&2
    die "pip install of Octavia failed (log: $LOGS/pip-octavia.log)"
  }
  octavia_install_hash >"$OCTAVIA_VENV/.installed"
  log "pip install (octavia) done"
}

octavia_lock() { # UPPER_CONSTRAINTS_FILE: resolve OCTAVIA_PKGS, freeze into constraints-octavia.txt
  local uc=$1 tmp
  tmp=$(mktemp -d)
  "$PYTHON" -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q -U pip wheel 'setuptools<81'
  "$tmp/venv/bin/pip" install -q -c "$uc" "${OCTAVIA_PKGS[@]}"
  "$tmp/venv/bin/pip" check
  {
    sed -n '/^#/p' "$OCTAVIA_CONSTRAINTS"
    "$tmp/venv/bin/pip" freeze --all
  } >"$OCTAVIA_CONSTRAINTS.new"
  mv "$OCTAVIA_CONSTRAINTS.new" "$OCTAVIA_CONSTRAINTS"
  rm -rf "$tmp"
  echo "wrote $OCTAVIA_CONSTRAINTS"
}

octavia_write_configs() {
  mkdir -p "$ETC/octavia/certs" "$DATA/octavia/locks"
  # The amphora flows sign an (unused) amphora certificate and read the CA even with the noop
  # drivers: a throw-away CA, made once.
  local certs=$ETC/octavia/certs
  if [ ! -s "$certs/ca.pem" ] || [ ! -s "$certs/ca.key" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$certs/ca.key" -out "$certs/ca.pem" -days 3650 \
      -subj /CN=test-cloud-octavia-ca >"$LOGS/octavia-ca.log" 2>&1 || die "making Octavia's CA failed (log: $LOGS/octavia-ca.log)"
  fi
  put octavia-api "$ETC/octavia/octavia.conf" <<EOF
[DEFAULT]
log_file = $LOGS/octavia.log
debug = $DEBUG
transport_url = rabbit://openstack:$RABBIT_PW@$HOST:5672/
[api_settings]
bind_host = $HOST
bind_port = $OCTAVIA_PORT
auth_strategy = keystone
api_base_uri = http://$HOST:$OCTAVIA_PORT
enabled_provider_drivers = amphora:'Octavia amphora driver (noop drivers here: no amphorae)',noop_driver:'The noop driver'
default_provider_driver = amphora
[database]
connection = $(dburl octavia)
[controller_worker]
amphora_driver = amphora_noop_driver
compute_driver = compute_noop_driver
network_driver = network_noop_driver
image_driver = image_noop_driver
volume_driver = volume_noop_driver
loadbalancer_topology = SINGLE
client_ca = $certs/ca.pem
[task_flow]
jobboard_enabled = False
[oslo_messaging]
topic = octavia_prov
[oslo_messaging_notifications]
driver = noop
[oslo_concurrency]
lock_path = $DATA/octavia/locks
[certificates]
cert_manager = noop_cert_manager
cert_generator = local_cert_generator
ca_certificate = $certs/ca.pem
ca_private_key = $certs/ca.key
[haproxy_amphora]
client_cert = $certs/ca.pem
server_ca = $certs/ca.pem
[service_auth]
auth_url = $KS_URL/v3
auth_type = password
username = octavia
password = $SVC_PW
project_name = service
user_domain_name = Default
project_domain_name = Default
$(authtoken octavia)
EOF
  # the worker shares the API's configuration file
  [ -z "${CHANGED[octavia-api]:-}" ] || CHANGED[octavia-worker]=1
  put octavia-api "$ETC/uwsgi/octavia-api.ini" <<EOF
[uwsgi]
http-socket = $HOST:$OCTAVIA_PORT
home = $OCTAVIA_VENV
master = true
processes = 1
threads = 1
enable-threads = true
lazy-apps = true
need-app = true
die-on-term = true
add-header = Connection: close
buffer-size = 65535
worker-reload-mercy = 2
module = octavia.wsgi.api:application
pyargv = --config-file $ETC/octavia/octavia.conf
EOF
}

octavia_db() {
  mariadb --defaults-file="$ETC/my.cnf" -e "CREATE DATABASE IF NOT EXISTS octavia; GRANT ALL ON octavia.* TO 'openstack'@'$HOST'; FLUSH PRIVILEGES;" ||
    die "creating the octavia database failed"
  local h
  h=$(octavia_install_hash)
  [ "$(cat "$DATA/.synced-octavia" 2>/dev/null)" = "$h" ] && return 0
  "$OB/octavia-db-manage" --config-file "$ETC/octavia/octavia.conf" upgrade head >"$LOGS/octavia-dbsync.log" 2>&1 || {
    tail -n 30 "$LOGS/octavia-dbsync.log" >&2
    die "octavia database migration failed (log: $LOGS/octavia-dbsync.log)"
  }
  echo "$h" >"$DATA/.synced-octavia"
}

octavia_start_services() { # after Keystone and RabbitMQ answer
  local s
  for s in "${OCTAVIA_SERVICES[@]}"; do
    if alive "$s" && [ -n "${CHANGED[$s]:-}" ]; then
      log "$s: configuration changed, restarting"
      stop_svc "$s" >/dev/null
    fi
  done
  if ! alive octavia-api; then
    STARTED+=(octavia-api)
    start_bg octavia-api "$B/uwsgi" --ini "$ETC/uwsgi/octavia-api.ini"
  fi
  if ! alive octavia-worker; then
    STARTED+=(octavia-worker)
    start_bg octavia-worker "$OB/octavia-worker" --config-file "$ETC/octavia/octavia.conf"
  fi
  for s in "${OCTAVIA_SERVICES[@]}"; do wait_up "$s"; done
}

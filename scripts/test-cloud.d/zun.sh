# zun.sh - sourced by scripts/test-cloud: real Zun (OpenStack containers) on the test cloud.
#
#   rabbitmq     RabbitMQ from Debian on 127.0.0.1:5672 (zun-api <-> zun-compute RPC), epmd
#                and Erlang distribution on 127.0.0.1 only
#   docker       Debian's dockerd in a private network namespace ($RUN/netns): containers never
#                touch the host's interfaces; API on the unix socket $RUN/docker.sock
#   registry     Debian's docker-registry on 127.0.0.1:5050 *inside* that namespace, dockerd's
#                mirror for docker.io: `image: busybox` is pulled as in production
#   netns-fwd    socat pairs that make Keystone and Neutron reachable on 127.0.0.1 inside the
#                namespace through unix sockets (the namespace has only its own loopback), and
#                Docker's socket on the host's 127.0.0.1:2375 (zun-wsproxy's attach)
#   kuryr        kuryr-libnetwork (Docker network + IPAM plugin backed by Neutron) inside the
#                namespace (it creates the veth pairs dockerd moves into containers), serving
#                the plugin API on the unix socket $RUN/kuryr.sock named by the plugin spec
#   zun-api      :9517 (catalog type `container`), zun-compute, zun-wsproxy :6784
#
# Everything runs from its own venv ($TC_DIR/zun-venv: Zun 18 needs oslo.versionedobjects>=3.10,
# the 2026.1 set pins 3.9.0) and keeps its state under $TC_DIR.

ZUN_VENV=$TC_DIR/zun-venv
ZB=$ZUN_VENV/bin
ZUN_CONSTRAINTS=$D/constraints-zun.txt
ZUN_PKGS=(zun==18.0.0 kuryr-libnetwork==18.0.0 python-zunclient python-openstackclient PyMySQL)
NETNS=$RUN/netns
DOCKER_SOCK=$RUN/docker.sock
KURYR_SOCK=$RUN/kuryr.sock
ZUN_IMAGES=$TC_DIR/images
# the registry inside the namespace (5000 there is the forwarded Keystone)
REG_PORT=5050
# Debian's docker CLI (a different `docker` may come first on PATH)
DOCKER_CLI=/usr/bin/docker

# shellcheck disable=SC2034 # used by scripts/test-cloud, which sources this file
ZUN_SERVICES=(epmd rabbitmq docker registry netns-fwd kuryr zun-api zun-compute zun-wsproxy)
PORT+=([epmd]=4369 [rabbitmq]=5672 [docker]=- [registry]=- [netns-fwd]=- [kuryr]=-
  [zun-api]=9517 [zun-compute]=- [zun-wsproxy]=6784)
URL+=([epmd]="epmd://$HOST:4369" [rabbitmq]="amqp://$HOST:5672" [docker]="unix://$DOCKER_SOCK"
  [registry]="http://127.0.0.1:$REG_PORT (in $NETNS)" [netns-fwd]="$HOST:5000,9696 (in $NETNS)"
  [kuryr]="unix://$KURYR_SOCK" [zun-api]="http://$HOST:9517/v1" [zun-compute]="rpc (host $(hostname))"
  [zun-wsproxy]="ws://$HOST:6784")

in_ns() { nsenter --net="$NETNS" -- "$@"; }
dk() { "$DOCKER_CLI" -H "unix://$DOCKER_SOCK" "$@"; }

zun_answers() { # SERVICE: 0 if it answers, 1 if not, 2 if SERVICE is not one of ours
  case $1 in
  epmd) epmd -port 4369 -names >/dev/null 2>&1 ;;
  rabbitmq) timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/5672" 2>/dev/null ;;
  docker) [ "$(curl -s -m 2 --unix-socket "$DOCKER_SOCK" http://docker/_ping 2>/dev/null)" = OK ] ;;
  registry) [ -e "$NETNS" ] && in_ns curl -sf -m 2 -o /dev/null http://127.0.0.1:$REG_PORT/v2/ 2>/dev/null ;;
  # the whole chain through Keystone (it answers / in ms; Neutron may take seconds when busy),
  # and that the Neutron forwarder listens
  netns-fwd) [ -e "$NETNS" ] && in_ns curl -s -m 3 -o /dev/null http://127.0.0.1:5000/ 2>/dev/null &&
    in_ns timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/9696' 2>/dev/null ;;
  kuryr) curl -sf -m 2 --unix-socket "$KURYR_SOCK" -X POST http://kuryr/Plugin.Activate 2>/dev/null | grep NetworkDriver >/dev/null ;;
  zun-compute) true ;;
  *) return 2 ;;
  esac
}

zun_need_cmds() { # apt packages for missing commands (added to need_cmds' list)
  command -v dockerd >/dev/null && [ -x "$DOCKER_CLI" ] || pkgs+=(docker.io)
  command -v rabbitmq-server >/dev/null || pkgs+=(rabbitmq-server)
  command -v lspci >/dev/null || pkgs+=(pciutils)
  command -v docker-registry >/dev/null || pkgs+=(docker-registry)
  command -v socat >/dev/null || pkgs+=(socat)
  command -v nsenter >/dev/null || pkgs+=(util-linux)
  command -v ip >/dev/null || pkgs+=(iproute2)
  # the images are built from busybox-static's binary (a dynamic busybox is useless in a rootfs)
  dpkg -s busybox-static >/dev/null 2>&1 || pkgs+=(busybox-static)
}

# What Zun 18 needs against the 2026.1 upper-constraints: oslo.versionedobjects>=3.10.0 (2026.1
# pins 3.9.0), and tenacity with Retrying.call (capsule init containers; gone since tenacity 8)
ZUN_UC_OVERRIDES=(oslo.versionedobjects===3.10.0 tenacity===7.0.0)

zun_lock() { # UPPER_CONSTRAINTS_FILE: resolve ZUN_PKGS with the overrides, freeze into constraints-zun.txt
  local uc=$1 tmp o
  tmp=$(mktemp -d)
  cp "$uc" "$tmp/uc.txt"
  for o in "${ZUN_UC_OVERRIDES[@]}"; do
    sed -i "/^${o%%===*}===/d" "$tmp/uc.txt"
    echo "$o" >>"$tmp/uc.txt"
  done
  "$PYTHON" -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q -U pip wheel 'setuptools<81'
  "$tmp/venv/bin/pip" install -q -c "$tmp/uc.txt" "${ZUN_PKGS[@]}"
  "$tmp/venv/bin/pip" check
  {
    sed -n '/^#/p' "$ZUN_CONSTRAINTS"
    "$tmp/venv/bin/pip" freeze --all
  } >"$ZUN_CONSTRAINTS.new"
  mv "$ZUN_CONSTRAINTS.new" "$ZUN_CONSTRAINTS"
  rm -rf "$tmp"
  echo "wrote $ZUN_CONSTRAINTS"
}

zun_install_hash() {
  { echo "${ZUN_PKGS[*]}"; cat "$ZUN_CONSTRAINTS"; readlink -f "$ZB/python" 2>/dev/null || true; } | sha256sum | cut -c1-16
}

zun_ensure_venv() { # run in a subshell by `up`, beside ensure_venv
  ZUN_HASH=$(zun_install_hash)
  [ -x "$ZB/python" ] && [ "$(cat "$ZUN_VENV/.installed" 2>/dev/null)" = "$ZUN_HASH" ] && return 0
  if [ -d "$ZUN_VENV" ] && ! "$ZB/python" -c '' 2>/dev/null; then
    log "venv $ZUN_VENV is broken (its Python moved?): recreating"
    rm -rf "$ZUN_VENV"
  fi
  [ -x "$ZB/python" ] || "$PYTHON" -m venv "$ZUN_VENV" || die "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
  log "pip install ${ZUN_PKGS[*]} -c constraints-zun.txt into $ZUN_VENV (log: $LOGS/pip-zun.log)"
  {
    "$ZB/pip" install -c "$ZUN_CONSTRAINTS" -U pip setuptools wheel &&
      "$ZB/pip" install -c "$ZUN_CONSTRAINTS" "${ZUN_PKGS[@]}"
  } >>"$LOGS/pip-zun.log" 2>&1 || {
    tail -n 30 "$LOGS/pip-zun.log" >&2
    die "pip install of Zun failed (log: $LOGS/pip-zun.log)"
  }
  ZUN_HASH=$(zun_install_hash)
  echo "$ZUN_HASH" >"$ZUN_VENV/.installed"
  log "pip install (zun) done"
}

zun_write_configs() {
  mkdir -p "$ETC"/{zun,kuryr/bin,rabbitmq,docker,registry} "$DATA"/{zun/locks,rabbitmq,docker,registry}
  local zhost
  zhost=$(hostname)

  put rabbitmq "$ETC/rabbitmq/rabbitmq.conf" <<EOF
listeners.tcp.default = $HOST:5672
default_user = openstack
default_pass = $RABBIT_PW
loopback_users = none
log.console = true
log.console.level = warning
log.file = false
EOF
  put rabbitmq "$ETC/rabbitmq/enabled_plugins" <<<'[].'
  # rabbitmq-server reads this instead of /etc/rabbitmq/rabbitmq-env.conf
  put rabbitmq "$ETC/rabbitmq/rabbitmq-env.conf" <<EOF
NODENAME=rabbit@localhost
CONFIG_FILE=$ETC/rabbitmq/rabbitmq.conf
ENABLED_PLUGINS_FILE=$ETC/rabbitmq/enabled_plugins
MNESIA_BASE=$DATA/rabbitmq/mnesia
LOG_BASE=$LOGS/rabbitmq
PID_FILE=$RUN/rabbitmq-self.pid
DIST_PORT=25672
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
EOF

  put docker "$ETC/docker/daemon.json" <<EOF
{
  "hosts": ["unix://$DOCKER_SOCK"],
  "data-root": "$DATA/docker",
  "pidfile": "$RUN/dockerd-self.pid",
  "storage-driver": "overlay2",
  "iptables": false,
  "ip-forward": false,
  "ip-masq": false,
  "bridge": "none",
  "userland-proxy": false,
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "log-driver": "json-file",
  "registry-mirrors": ["http://127.0.0.1:$REG_PORT"]
}
EOF
  put registry "$ETC/registry/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DATA/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REG_PORT
EOF

  put netns-fwd "$ETC/zun/netns-fwd.sh" <<EOF
#!/bin/bash
# Keystone and Neutron on 127.0.0.1 inside $NETNS, forwarded to the host's through unix sockets.
# Exits (and takes the others down) when any forwarder dies.
# only our own children: 'kill 0' would hit the whole process group of whoever started us
trap 'kill \$(jobs -p) 2>/dev/null' EXIT
for p in 5000 9696; do
  rm -f "$RUN/fwd-\$p.sock"
  socat UNIX-LISTEN:"$RUN/fwd-\$p.sock",fork,unlink-early TCP:$HOST:\$p &
  nsenter --net="$NETNS" -- socat TCP-LISTEN:\$p,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"$RUN/fwd-\$p.sock" &
done
# zun-wsproxy attaches through Docker's TCP API ([docker] docker_remote_api_host:port, i.e.
# ws://127.0.0.1:2375/.../attach/ws): Docker's socket there, on the host's loopback only.
socat TCP-LISTEN:2375,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"$DOCKER_SOCK" &
wait -n
EOF
  chmod +x "$ETC/zun/netns-fwd.sh"

  # Neutron without L2 agents leaves ports binding_failed; kuryr runs the script named after the
  # vif_type. This one just brings the host end of the veth up (no L2 behind it here).
  put kuryr "$ETC/kuryr/bin/binding_failed" <<'EOF'
#!/bin/sh
# kuryr binding script: binding_failed bind|unbind PORT_ID IFNAME ...
case $1 in
bind) exec ip link set dev "$3" up ;;
*) exit 0 ;;
esac
EOF
  chmod +x "$ETC/kuryr/bin/binding_failed"
  put kuryr "$ETC/kuryr/kuryr.conf" <<EOF
[DEFAULT]
log_file = $LOGS/kuryr.log
debug = $DEBUG
bindir = $ETC/kuryr/bin
capability_scope = local
process_external_connectivity = false
[neutron]
auth_url = $KS_URL/v3
auth_type = password
username = zun
password = $SVC_PW
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = RegionOne
endpoint_type = public
[binding]
EOF
  # Three processes: with one, Docker's network-plugin calls (each a few Neutron requests) ran
  # one after another for every container created or deleted, and on a loaded 2-core CI
  # machine a container waited over three minutes for its turn (a CI run's virtual-kubelet
  # tests timed out on pods stuck in ContainerCreating). The plugin keeps its state in
  # Neutron, not in the process, as upstream's image (several processes) shows.
  uwsgi_zun kuryr "processes = 3
module = kuryr_libnetwork.server:app
pyargv = --config-file $ETC/kuryr/kuryr.conf
http-socket = $KURYR_SOCK
chmod-socket = 660"

  put zun-api "$ETC/zun/api-paste.ini" <"$ZUN_VENV/etc/zun/api-paste.ini"
  put zun-api "$ETC/zun/zun.conf" <<EOF
[DEFAULT]
debug = $DEBUG
host = $zhost
my_ip = $HOST
state_path = $DATA/zun
transport_url = rabbit://openstack:$RABBIT_PW@$HOST:5672/
image_driver_list = docker,glance
default_image_driver = docker
sandbox_image = kubernetes/pause:latest
sandbox_image_driver = docker
sandbox_image_pull_policy = ifnotpresent
container_driver = docker
capsule_driver = docker
[api]
api_paste_config = $ETC/zun/api-paste.ini
host_ip = $HOST
port = 9517
workers = 1
enable_image_validation = false
[database]
connection = $(dburl zun)
[docker]
api_url = unix://$DOCKER_SOCK
# Where zun-wsproxy starts interactive execs (zun-compute stores it with each exec; default
# tcp://MY_IP:2375, on which our Docker does not listen): its socket, reachable by path.
docker_remote_api_url = unix://$DOCKER_SOCK
docker_data_root = $DATA/docker
default_timeout = 120
[network]
driver = kuryr
[compute]
host_shared_with_nova = false
# Placement inventory: 2 cores x 64 VCPU and 4 x RAM, so 100+ small containers fit
cpu_allocation_ratio = 64.0
ram_allocation_ratio = 4.0
[quota]
# per-project defaults (Zun's: 40 containers, 20 cpu, 50 GiB): room for 100-pod benches
containers = 200
cpu = 128
memory = 102400
[keystone_auth]
auth_type = password
auth_url = $KS_URL/v3
username = zun
password = $SVC_PW
project_name = service
user_domain_name = Default
project_domain_name = Default
$(authtoken zun)
[websocket_proxy]
wsproxy_host = $HOST
wsproxy_port = 6784
base_url = ws://$HOST:6784/
allowed_origins = $HOST
[oslo_concurrency]
lock_path = $DATA/zun/locks
[oslo_messaging_notifications]
driver = noop
[placement_client]
region_name = RegionOne
[neutron_client]
region_name = RegionOne
[glance_client]
region_name = RegionOne
[cinder_client]
region_name = RegionOne
EOF
  # the other zun services share zun-api's configuration file
  [ -z "${CHANGED[zun-api]:-}" ] || CHANGED[zun-compute]=1 CHANGED[zun-wsproxy]=1
  # Six processes: a request zun-api forwards to zun-compute and waits on (a container's GET,
  # exec, logs, top, an action on a busy engine) holds its process, up to the RPC timeout of
  # 60 s while Docker starts that container, and every other request waits for a free one: on
  # a loaded 2-core CI machine, with one and then three processes, the virtual kubelet's list
  # calls met its 30 s call timeout. An idle process costs memory only.
  uwsgi_zun zun-api "processes = 6
wsgi-file = $ZB/zun-api-wsgi
pyargv = --config-file $ETC/zun/zun.conf --log-file $LOGS/zun-api.log
http-socket = $HOST:9517"
}

uwsgi_zun() { # SERVICE EXTRA: a uwsgi (the main venv's binary) running an app of the zun venv
  put "$1" "$ETC/uwsgi/$1.ini" <<EOF
[uwsgi]
home = $ZUN_VENV
master = true
threads = 1
enable-threads = true
lazy-apps = true
need-app = true
die-on-term = true
add-header = Connection: close
buffer-size = 65535
worker-reload-mercy = 2
$2
EOF
}

zun_db() {
  mariadb --defaults-file="$ETC/my.cnf" -e "CREATE DATABASE IF NOT EXISTS zun; GRANT ALL ON zun.* TO 'openstack'@'$HOST'; FLUSH PRIVILEGES;" ||
    die "creating the zun database failed"
  [ "$(cat "$DATA/.synced-zun" 2>/dev/null)" = "$ZUN_HASH" ] && return 0
  "$ZB/zun-db-manage" --config-file "$ETC/zun/zun.conf" upgrade >"$LOGS/zun-dbsync.log" 2>&1 || {
    tail -n 30 "$LOGS/zun-dbsync.log" >&2
    die "zun database migration failed (log: $LOGS/zun-dbsync.log)"
  }
  echo "$ZUN_HASH" >"$DATA/.synced-zun"
}

ensure_netns() { # a persistent network namespace bound to $NETNS, its loopback up
  if [ -e "$NETNS" ] && nsenter --net="$NETNS" true 2>/dev/null; then return 0; fi
  # a stale bind mount (after a reboot the file stays, the mount does not)
  umount "$NETNS" 2>/dev/null || true
  rm -f "$NETNS"
  touch "$NETNS"
  unshare --net="$NETNS" true || die "cannot create the network namespace $NETNS (unshare --net=FILE; needs root)"
  in_ns ip link set lo up || die "cannot bring up lo in $NETNS"
}

zun_restart_if_changed() { # SERVICE
  if alive "$1" && [ -n "${CHANGED[$1]:-}" ]; then
    log "$1: configuration changed, restarting"
    stop_svc "$1" >/dev/null
  fi
  ! alive "$1"
}

# The kuryr plugin spec: dockerd finds plugins only in fixed places (/etc/docker/plugins,
# /usr/lib/docker/plugins, /run/docker/plugins); this one names our unix socket.
KURYR_SPEC=/etc/docker/plugins/kuryr.spec
ensure_plugin_spec() {
  local want="unix://$KURYR_SOCK"
  [ "$(cat "$KURYR_SPEC" 2>/dev/null)" = "$want" ] && return 0
  if [ -f "$KURYR_SPEC" ] && ! grep -qF "$TC_DIR/" "$KURYR_SPEC"; then
    die "$KURYR_SPEC exists and is not the test cloud's (it says: $(cat "$KURYR_SPEC")); remove it or use that kuryr"
  fi
  mkdir -p "$(dirname "$KURYR_SPEC")"
  echo "$want" >"$KURYR_SPEC"
}

zun_start_infra() { # rabbitmq, the namespace, the registry, forwarders (no waiting)
  if zun_restart_if_changed epmd; then
    STARTED+=(epmd)
    # ERL_EPMD_ADDRESS: epmd listens on all interfaces by default
    ERL_EPMD_ADDRESS=$HOST start_bg epmd epmd -port 4369
  fi
  wait_up epmd
  if zun_restart_if_changed rabbitmq; then
    STARTED+=(rabbitmq)
    mkdir -p "$LOGS/rabbitmq"
    # HOME: the Erlang cookie lives there; the lib script, not /usr/sbin's (that one su's)
    HOME=$DATA/rabbitmq ERL_EPMD_ADDRESS=$HOST RABBITMQ_CONF_ENV_FILE=$ETC/rabbitmq/rabbitmq-env.conf \
      start_bg rabbitmq /usr/lib/rabbitmq/bin/rabbitmq-server
  fi
  ensure_netns
  ensure_plugin_spec
  if zun_restart_if_changed registry; then
    STARTED+=(registry)
    start_bg registry nsenter --net="$NETNS" -- docker-registry serve "$ETC/registry/config.yml"
  fi
  if zun_restart_if_changed netns-fwd; then
    STARTED+=(netns-fwd)
    start_bg netns-fwd "$ETC/zun/netns-fwd.sh"
  fi
}

zun_start_kuryr() { # then dockerd; after Keystone and Neutron answer (kuryr asks Neutron when it loads)
  local s
  for s in registry netns-fwd; do wait_up "$s"; done
  if zun_restart_if_changed kuryr; then
    STARTED+=(kuryr)
    rm -f "$KURYR_SOCK"
    start_bg kuryr nsenter --net="$NETNS" -- "$B/uwsgi" --ini "$ETC/uwsgi/kuryr.ini"
  fi
  # dockerd after kuryr: at start it asks the plugin about its kuryr networks and, with the
  # plugin not answering yet, retries for ~30 s
  wait_up kuryr
  if zun_restart_if_changed docker; then
    # dockerd keeps its default exec-root /var/run/docker: kuryr accepts only sandbox keys
    # under /var/run/docker/netns. So no other dockerd may run on this machine.
    local other
    other=$(pgrep -x dockerd | tr '\n' ' ' || true)
    [ -z "$other" ] || die "another dockerd runs on this machine (pid $other); the test cloud's dockerd needs its exec-root /var/run/docker: stop that one first"
    STARTED+=(docker)
    # dockerd refuses to start while its own PID file names a live process, and after the
    # machine's processes were ended that PID may be anyone's (pidfile.sh)
    rm -f "$DOCKER_SOCK" "$RUN/dockerd-self.pid"
    start_bg docker nsenter --net="$NETNS" -- dockerd --config-file "$ETC/docker/daemon.json"
  fi
  wait_up docker
  # zun-compute's host must be Docker's info.Name, or its resource tracker silently disables itself
  local name
  name=$(dk info -f '{{.Name}}' 2>/dev/null || true)
  [ "$name" = "$(hostname)" ] || die "Docker's info.Name is '$name', not the hostname '$(hostname)' that zun.conf names as zun-compute's host"
}

zun_images() { # busybox and pause, built from busybox-static, pushed to the in-namespace registry
  local bb_ver stamp root
  bb_ver=$(dpkg-query -W -f '${Version}' busybox-static)
  stamp="$bb_ver v1"
  mkdir -p "$ZUN_IMAGES"
  if [ "$(cat "$ZUN_IMAGES/.built" 2>/dev/null)" != "$stamp" ]; then
    log "building the busybox rootfs from busybox-static $bb_ver"
    root=$(mktemp -d)
    mkdir -p "$root"/{bin,etc,tmp,root,proc,sys,dev,var/run}
    cp /bin/busybox "$root/bin/busybox"
    local a
    for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$root/bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    chmod 1777 "$root/tmp"
    tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$ZUN_IMAGES/rootfs.tar.tmp" .
    rm -rf "$root"
    mv "$ZUN_IMAGES/rootfs.tar.tmp" "$ZUN_IMAGES/rootfs.tar"
    echo "$stamp" >"$ZUN_IMAGES/.built"
  fi
  # already in the registry (both tags answer)? nothing to do
  if in_ns curl -sf -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    http://127.0.0.1:$REG_PORT/v2/library/busybox/manifests/latest &&
    in_ns curl -sf -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      http://127.0.0.1:$REG_PORT/v2/kubernetes/pause/manifests/latest &&
    [ "$(cat "$DATA/registry/.pushed" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  log "importing busybox and pause into docker and pushing them to the registry"
  {
    dk import -c 'CMD ["sh"]' "$ZUN_IMAGES/rootfs.tar" 127.0.0.1:$REG_PORT/library/busybox:latest &&
      # a pause that exits on SIGTERM (busybox sleep as PID 1 ignores it: capsule deletes would wait 30 s)
      dk import -c 'CMD ["sh", "-c", "trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait $!; done"]' \
        "$ZUN_IMAGES/rootfs.tar" 127.0.0.1:$REG_PORT/kubernetes/pause:latest &&
      dk push -q 127.0.0.1:$REG_PORT/library/busybox:latest &&
      dk push -q 127.0.0.1:$REG_PORT/kubernetes/pause:latest &&
      dk tag 127.0.0.1:$REG_PORT/kubernetes/pause:latest kubernetes/pause:latest
  } >>"$LOGS/images.log" 2>&1 || {
    tail -n 20 "$LOGS/images.log" >&2
    die "building/pushing the busybox and pause images failed (log: $LOGS/images.log)"
  }
  echo "$stamp" >"$DATA/registry/.pushed"
}

zun_start_services() { # zun-api, zun-wsproxy, the images meanwhile, zun-compute once RabbitMQ answers
  local s
  for s in zun-api zun-compute zun-wsproxy; do zun_restart_if_changed "$s" || true; done
  if ! alive zun-api; then
    STARTED+=(zun-api)
    start_bg zun-api "$B/uwsgi" --ini "$ETC/uwsgi/zun-api.ini"
  fi
  if ! alive zun-wsproxy; then
    STARTED+=(zun-wsproxy)
    start_bg zun-wsproxy "$ZB/zun-wsproxy" --config-file "$ETC/zun/zun.conf" --log-file "$LOGS/zun-wsproxy.log"
  fi
  zun_images
  # RabbitMQ takes the longest to boot (20-30 s on 2 busy cores); zun-compute would only retry
  wait_up rabbitmq
  if ! alive zun-compute; then
    STARTED+=(zun-compute)
    # wait-zun then wants a heartbeat from this process, not one a dead one left in the database
    ZUN_COMPUTE_STARTED_AT=$(date +%s)
    start_bg zun-compute "$ZB/zun-compute" --config-file "$ETC/zun/zun.conf" --log-file "$LOGS/zun-compute.log"
  fi
  for s in kuryr zun-api zun-compute zun-wsproxy; do wait_up "$s"; done
}

ZUN_NETWORK=zun-pods
zun_env() { # exports for Zun users (the virtual kubelet's tests): see docs/test-cloud.md
  local ids=$DATA/zun-networks
  printf 'export ZUN_API_URL=%q\n' "http://$HOST:9517/v1"
  printf 'export ZUN_API_VERSION=1.40\n'  # the newest microversion of zun 18 (header: container 1.40)
  printf 'export ZUN_TENANT_CLOUD=local-demo\n'
  printf 'export ZUN_NETWORK=%q\n' "$ZUN_NETWORK"
  printf 'export ZUN_NETWORK_ID=%q\n' "$(awk '$1 == "zun-pods" {print $2}' "$ids" 2>/dev/null)"
  printf 'export ZUN_TENANT2_CLOUD=local-demo2\n'
  printf 'export ZUN_NETWORK2=zun-pods-2\n'
  printf 'export ZUN_NETWORK2_ID=%q\n' "$(awk '$1 == "zun-pods-2" {print $2}' "$ids" 2>/dev/null)"
  printf 'export ZUN_HOST=%q\n' "$(hostname)"
  printf 'export TEST_CLOUD_DOCKER_HOST=%q\n' "unix://$DOCKER_SOCK"
  printf 'export TEST_CLOUD_NETNS=%q\n' "$NETNS"
}

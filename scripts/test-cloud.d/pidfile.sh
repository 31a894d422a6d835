# PID files that name one process, not a number: sourced by scripts/test-cloud,
# scripts/external-services and scripts/demo.
#
# A PID file holds "PID START", START being the process's start time (field 22 of
# /proc/PID/stat, clock ticks after boot) and the boot's id. A PID alone is not enough: when a
# machine's processes are all ended (a new session, a restarted sandbox) the kernel hands out the
# same PIDs again, and the same start order hands a recorded PID to another of our own services.
# In the CI run of 2026-12-07 zun-compute's stale PID had become a Keystone worker's, so
# zun-compute was never started and every Zun container failed with "There are not enough hosts
# available".

# proc_start PID: the process's start time and boot id; fails when there is no such process
proc_start() {
  local s boot
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  # the command name (field 2) may hold spaces and parentheses: fields are counted after its ')'
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
  printf '%s@%s\n' "${20}" "$boot"
}

# pidfile_write FILE PID: records PID and its start time
pidfile_write() {
  local start
  start=$(proc_start "$2") || start=gone
  printf '%s %s\n' "$2" "$start" >"$1"
}

# pidfile_pid FILE: the recorded PID if that very process still runs; nothing otherwise (no
# file, a file from before start times were recorded, a dead or reused PID)
pidfile_pid() {
  local pid="" start="" now
  [ -f "$1" ] || return 0
  read -r pid start <"$1" || true
  [ -n "$pid" ] && [ -n "$start" ] || return 0
  now=$(proc_start "$pid") || return 0
  [ "$now" = "$start" ] && echo "$pid"
  return 0
}

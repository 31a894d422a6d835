#!/usr/bin/env python3
"""Runs the workspace's test binaries in lanes side by side (scripts/test calls it).

`cargo test --workspace` runs its ~90 test binaries one after another; most of them wait on
services (the test cloud, Zun, booting OpenStack processes), so one core idles while another
waits. Here the binaries are grouped in lanes by what they share: inside a lane they run one
after another, exactly as cargo runs them, and the lanes run side by side. Binaries that touch
what every other test uses (restarting the test cloud) run alone, after the lanes.

Each binary runs as cargo runs it: from its package's directory with cargo's environment
variables, with `--test-threads` and any extra arguments. Its output is printed whole when it
ends (never interleaved), followed by a summary per binary with its wall time, slowest first,
and one closing line `N passed, N failed`. Exit status 1 when a test failed or a binary could
not run.

  scripts/run-tests.py [--list] [--only SUBSTRING] [--serial] [--retries N] [--timeout S]
                       [--deadline EPOCH_SECONDS] [-- ARGS for every binary]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

# Lanes, first match wins: (lane, regex on "package/target"). A binary no pattern names runs in
# the "unit" lane. Lanes must not share a scarce resource with another lane: Zun's per-project
# quotas (security groups, ports) are the one that bit us (docs/ci.md).
LANES = [
    # Restarts the test cloud's Keystone and Neutron under everyone: alone, after the lanes.
    ("exclusive", r"^openstack-operator/e2e_faults_restart$"),
    # Tail lanes start when at most one other lane still runs (TAIL_BESIDE): the last lane
    # (the control-plane lane's boot proofs, one process at a time) left half the machine idle
    # for its last five minutes while these waited for it.
    # The whole control plane as pods on the test node (about 35 containers), from the images
    # the images lane built, deployed by scripts/demo control-plane. Beside all the other lanes
    # (load average 27 on 2 cores) it was not Ready within 1,500 s, and Zun's API missed the zun
    # lane's 30 s call timeouts; alone it is Ready in about 640 s.
    ("tail-node", r"^openstack-operator/e2e_control_plane_node$"),
    # Credential rotation every 20 s against the test cloud's Keystone (160 s alone): beside all
    # the lanes it failed both its runs in two CI runs: on 401s from a credential deleted while a
    # project's deletion pass still used it, and on Keystone answering nothing for two minutes
    # (docs/ci.md).
    ("tail-cloud", r"^openstack-operator/e2e_rotation$"),
    # Real Zun containers in the test cloud's tenant projects.
    ("zun", r"^openstack-operator/(e2e_virtual_kubelet|e2e_kubelet_api|e2e_vk_.*)$"),
    ("zun", r"^openstack/container$"),
    ("zun", r"^vk-zun/emulator$"),
    # Builds every service image (debootstrap, a wheelhouse, seven docker builds): long, and
    # shares nothing with the others but the Docker engine.
    ("images", r"^openstack-operator/service_images$"),
    # Pods as real containers on the same engine (docs/test-node.md).
    ("images", r"^test-node/docker_e2e$"),
    # Booted OpenStack processes from rendered configuration. The TLS, upgrade and whole-cloud
    # proofs run in the control-plane lane, whose own tests end long before the boot lane's:
    # one boot lane was the run's longest (1,450 s of 1,700), the control-plane lane idle after
    # 460 s. Every boot proof takes its own ports and databases, so lanes may share them.
    ("control-plane", r"^controlplane-render/(tls_boot|tls_cloud_boot|upgrade_boot|upgrade_glance_cinder_boot)$"),
    ("control-plane", r"^openstack-operator/examples_on_rendered_cloud$"),
    ("boot", r"^controlplane-render/.*_boot$"),
    # The control plane end to end, and the external-service checks.
    ("control-plane", r"^openstack-operator/(e2e_control_plane.*|e2e_external_services)$"),
    ("control-plane", r"^external-checks/"),
    # The operator killed and restarted mid-pass (its own process, not the cloud's): the
    # resource lane's longest binary (about 370 s of 1,390), run beside it; and the tenant
    # credentials test, which waits out four short credential lifetimes.
    ("faults", r"^openstack-operator/(e2e_faults_crash|e2e_tenant_credentials)$"),
    # The resource operator end to end and the OpenStack port against the test cloud.
    ("resource", r"^openstack-operator/e2e_"),
    ("resource", r"^openstack/"),
    ("resource", r"^fault-proxy/real_cloud$"),
]


# CPU priority of a lane's binaries and everything they start (`nice`; the test cloud's and the
# external services' sessions run at -5, see their start_bg). On 2 cores, the first minutes of the tests ran seven lanes at once
# and Zun's API (a test-cloud service) answered nothing for two minutes, failing the zun lane's
# tests: the boot proofs' own OpenStack processes yield to the test cloud's. The zun and
# resource lanes, the run's longest, keep 0. The kernel shares CPU between sessions first
# (autogroup), so the priority is set on the binary's session (set_autogroup_nice); until
# that, these values ordered nothing between lanes. Each step of nice is about 1.25 times less
# CPU under contention: with a dozen busy sessions (lanes, test-cloud services, containers), 5
# would leave a boot lane a few percent of a core and its services' start timeouts would bite.
LANE_NICE = {"boot": 3, "control-plane": 3, "images": 3, "faults": 2, "unit": 2}


# Lanes that start only when another has ended. The zun lane's containers and the images
# lane's docker builds use one Docker engine: while seven images built (the run's first seven
# minutes), a container of the zun lane waited on the engine past its test's 180 s, and with its
# retry beside the other lanes e2e_virtual_kubelet failed a CI run. After the images lane the zun
# lane (about 800 s) still ends before the control-plane lane (about 1,850 s).
AFTER = {"zun": "images"}


# How many lanes may still run when the tail lanes start.
TAIL_BESIDE = 1


# Binaries allowed longer than --timeout: the whole control plane as pods on the test node
# (Ready in 642 s alone, on a machine busy with the other lanes longer).
TIMEOUTS = {"openstack-operator/e2e_control_plane_node": 1500}


def set_autogroup_nice(pid, niceness):
    """With the kernel's autogroup scheduling on (Debian's default), CPU is shared between
    sessions first and `nice` only orders a session's own processes: every binary runs in a
    session of its own (see run_once), so the lane's priority is given to its session's
    autogroup. Best effort: a kernel without autogroup has no such file, and plain `nice`
    applies."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(niceness))
    except OSError:
        pass


def lane_of(key):
    for lane, pattern in LANES:
        if re.search(pattern, key):
            return lane
    return "unit"


def rank_of(key):
    """The index of the first pattern naming `key`: a lane runs its binaries in LANES' order
    (the images lane builds the images its later binaries run)."""
    for i, (_, pattern) in enumerate(LANES):
        if re.search(pattern, key):
            return i
    return len(LANES)


def build(extra_cargo_args):
    """Builds every test target; returns [(package, target, kind, executable, manifest_dir)]."""
    cmd = ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"]
    cmd += extra_cargo_args
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"run-tests: building the test binaries failed ({' '.join(cmd)})")
    out = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        manifest = msg["manifest_path"]
        package = package_name(msg["package_id"], manifest)
        out.append((package, target["name"], target["kind"][0], msg["executable"], os.path.dirname(manifest)))
    return out


def package_name(package_id, manifest):
    # path+file:///…/crates/resource-operator/resource-api#0.1.0 or path+file:///…/crates/test-tools/kube-emulator#name@0.1.0
    m = re.search(r"#([A-Za-z0-9_-]+)@", package_id)
    if m:
        return m.group(1)
    return os.path.basename(os.path.dirname(manifest))


def split_modules(binaries):
    """A crate's tests/suite/ binary holds one module per former test file: each module becomes a
    job of its own (run with the filter `MODULE::`), so it keeps a process, and its statics, to itself."""
    jobs = []
    for package, target, kind, exe, manifest_dir in binaries:
        if kind != "test" or target != "suite":
            jobs.append((package, target, kind, exe, manifest_dir, None))
            continue
        listing = subprocess.run([exe, "--list"], cwd=manifest_dir, env=cargo_env(manifest_dir, package),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        modules = sorted({line.split("::")[0] for line in listing.stdout.splitlines()
                          if line.endswith(": test") and "::" in line})
        if listing.returncode != 0 or not modules:
            jobs.append((package, target, kind, exe, manifest_dir, None))
            continue
        for m in modules:
            jobs.append((package, m, kind, exe, manifest_dir, module_args(m, modules)))
    return jobs


def module_args(module, modules):
    """The test binary's arguments that select exactly `module`'s tests. libtest's filter is a
    substring match, so `tls_boot::` alone also ran `cache_tls_boot::` and `novnc_tls_boot::`
    (twice over, in two lanes at once); the modules it would also name are skipped."""
    args = [module + "::"]
    for other in modules:
        if other != module and (module + "::") in (other + "::"):
            args += ["--skip", other + "::"]
    return args


def cargo_env(manifest_dir, package):
    env = dict(os.environ)
    env["CARGO_MANIFEST_DIR"] = manifest_dir
    env["CARGO_MANIFEST_PATH"] = os.path.join(manifest_dir, "Cargo.toml")
    env["CARGO_PKG_NAME"] = package
    env["CARGO_CRATE_NAME"] = package.replace("-", "_")
    env.setdefault("CARGO", "cargo")
    env["RUST_BACKTRACE"] = env.get("RUST_BACKTRACE", "1")
    return env


RESULT = re.compile(r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored")
FAILED_TEST = re.compile(r"^test (\S+) \.\.\. FAILED$")


def failed_tests(text):
    """The names of the tests libtest reported FAILED in `text` (empty when the binary failed
    otherwise: crashed, hung, or failed to start)."""
    if "run-tests: TIMED OUT" in text:
        return []
    return sorted({m.group(1) for m in map(FAILED_TEST.match, text.splitlines()) if m})


class Runner:
    def __init__(self, args, log_dir):
        self.args = args
        self.log_dir = log_dir
        self.lock = threading.Lock()
        self.results = []  # (lane, key, seconds, passed, failed, ignored, ok)
        self.flaky = []  # binaries that failed once and passed when run again
        self.t0 = time.monotonic()

    def remaining(self):
        """Seconds left before --deadline (None: no deadline)."""
        if not self.args.deadline:
            return None
        return self.args.deadline - time.time()

    def run_once(self, cmd, manifest_dir, package, log_path, lane, key):
        start = time.monotonic()
        limit = max(self.args.timeout, TIMEOUTS.get(key, 0))
        why = "(--timeout, or TIMEOUTS in run-tests.py)"
        left = self.remaining()
        if left is not None and left < limit:
            limit, why = max(int(left), 1), "(the run's --deadline)"
        niceness = LANE_NICE.get(lane, 0)
        if niceness:
            cmd = ["nice", "-n", str(niceness)] + cmd
        timed_out = False
        with open(log_path, "w") as log:
            # Its own session: when it ends, whatever it started and left behind (a uwsgi worker
            # whose master it killed, holding a database lock the next binary waits on forever)
            # ends with it; and a binary that hangs is stopped instead of holding CI to its limit.
            proc = subprocess.Popen(cmd, cwd=manifest_dir, env=cargo_env(manifest_dir, package),
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            if niceness:
                set_autogroup_nice(proc.pid, niceness)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc.pid, signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    kill_group(proc.pid, signal.SIGKILL)
                    rc = proc.wait()
            if kill_group(proc.pid, signal.SIGTERM):
                time.sleep(0.5)
                kill_group(proc.pid, signal.SIGKILL)
            if timed_out:
                log.write(f"\nrun-tests: TIMED OUT: still running after {limit} s {why}; stopped\n")
        took = time.monotonic() - start
        passed = failed = ignored = 0
        with open(log_path, errors="replace") as log:
            text = log.read()
        for line in text.splitlines():
            m = RESULT.match(line)
            if m:
                passed += int(m.group(2))
                failed += int(m.group(3))
                ignored += int(m.group(4))
        if (rc != 0 or timed_out) and failed == 0:
            failed = 1  # the binary itself failed (crashed, hung, or a harness error)
        if timed_out:
            rc = rc or 1
        return rc == 0, took, passed, failed, ignored, text

    def run_binary(self, lane, package, target, kind, exe, manifest_dir, module_filter):
        key = f"{package}/{target}" if kind != "lib" else f"{package}/lib"
        log_path = os.path.join(self.log_dir, key.replace("/", "--") + ".log")
        base = [exe, f"--test-threads={self.args.test_threads}"] + self.args.rest
        cmd = base + (module_filter or [])
        left = self.remaining()
        if left is not None and left <= 0:
            # Counted failed and named, instead of CI's own limit ending the run before any
            # summary is printed.
            with self.lock:
                self.results.append((lane, key, 0.0, 0, 1, 0, False))
                print(f"\n==== {lane}: {key} NOT RUN: the run's --deadline had passed", flush=True)
            return
        ok, took, passed, failed, ignored, text = self.run_once(cmd, manifest_dir, package, log_path, lane, key)
        retried = ""
        # The end-to-end lanes share 2 cores with real OpenStack services; a binary that fails
        # there runs its failed tests once more, alone in its lane, and is reported as flaky
        # (with its first output) when the second run passes. A failure that repeats fails the
        # suite. Only the failed tests: the whole e2e_virtual_kubelet again took 667 s of a
        # loaded machine for one test that had failed, and failed another.
        left = self.remaining()
        if not ok and lane not in ("unit",) and self.args.retries > 0 and (left is None or left > took):
            first = text
            again = failed_tests(text)
            cmd2 = base + ["--exact"] + again if again else cmd
            ok2, took2, passed2, failed2, ignored2, text2 = self.run_once(
                cmd2, manifest_dir, package, log_path + ".retry", lane, key)
            which = f"{len(again)} failed test(s)" if again else "the whole binary"
            text = first + f"\n==== {key}: {which} run again after the failure above\n" + text2
            took += took2
            if ok2:
                retried = " (FLAKY: failed, then passed on its second run)"
                if again:
                    passed += passed2
                else:
                    passed, ignored = passed2, ignored2
                ok, failed = True, 0
                with self.lock:
                    self.flaky.append(key)
        with self.lock:
            self.results.append((lane, key, took, passed, failed, ignored, ok))
            stamp = time.monotonic() - self.t0
            print(f"\n==== [{stamp:5.0f}s] {lane}: {key} ({os.path.basename(exe)}) "
                  f"{'ok' if ok else 'FAILED'}: {passed} passed, {failed} failed in {took:.0f}s{retried}",
                  flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()

    def run_lane(self, lane, binaries):
        for b in binaries:
            self.run_binary(lane, *b)


def kill_group(pgid, sig):
    """Signals every process still in the session a test binary led; False when none was left."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def cpu_times():
    """(busy, total) jiffies of all CPUs from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class CpuSampler:
    """How busy the machine's CPUs were during the tests, by minute: tells whether more lanes
    could help (idle cores) or only less work can (cores busy throughout)."""

    def __init__(self):
        self.minutes = []
        self.first = cpu_times()
        self.stop = threading.Event()
        threading.Thread(target=self.sample, daemon=True).start()

    def sample(self):
        last = self.first
        while not self.stop.wait(60):
            now = cpu_times()
            if now and last and now[1] > last[1]:
                self.minutes.append((now[0] - last[0]) / (now[1] - last[1]))
            last = now

    def summary(self):
        self.stop.set()
        end = cpu_times()
        if not self.first or not end or end[1] <= self.first[1]:
            return "cpu: not measured (no /proc/stat)"
        mean = (end[0] - self.first[0]) / (end[1] - self.first[1])
        busy = sum(1 for m in self.minutes if m >= 0.95)
        low = sum(1 for m in self.minutes if m < 0.75)
        return (f"cpu: {mean:.0%} busy over the tests ({os.cpu_count()} cores); of {len(self.minutes)} "
                f"minutes, {busy} at 95 % or more, {low} under 75 %")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--test-threads", type=int, default=int(os.environ.get("TEST_THREADS", "4")))
    p.add_argument("--list", action="store_true", help="print the lanes and exit")
    p.add_argument("--only", help="run only binaries whose package/target contains this")
    p.add_argument("--serial", action="store_true", help="one lane at a time (for measuring)")
    p.add_argument("--retries", type=int, default=int(os.environ.get("TEST_RETRIES", "1")),
                   help="runs again of an end-to-end binary that failed (0: none); reported as flaky")
    p.add_argument("--timeout", type=int, default=int(os.environ.get("TEST_TIMEOUT", "900")),
                   help="seconds a test binary may run before it is stopped and counted failed")
    p.add_argument("--deadline", type=float, default=float(os.environ.get("TEST_DEADLINE") or 0),
                   help="seconds since the epoch after which no binary starts or runs again, and a "
                        "running one is stopped (0: none); .ci/run sets it inside CI's own limit")
    p.add_argument("rest", nargs="*", help="arguments for every test binary (after --)")
    args = p.parse_args()

    target_dir = os.environ.get("CARGO_TARGET_DIR", "target")
    log_dir = os.path.join(target_dir, "test-logs")
    os.makedirs(log_dir, exist_ok=True)

    binaries = split_modules(build([]))
    lanes = {}
    for b in binaries:
        package, target, kind = b[0], b[1], b[2]
        key = f"{package}/{target}"
        if args.only and args.only not in key:
            continue
        lanes.setdefault(lane_of(key), []).append(b)
    for bs in lanes.values():
        bs.sort(key=lambda b: rank_of(f"{b[0]}/{b[1]}"))
    if args.list:
        for lane, bs in sorted(lanes.items()):
            print(f"{lane}: " + " ".join(f"{b[0]}/{b[1]}" for b in bs))
        return 0

    runner = Runner(args, log_dir)
    cpu = CpuSampler()
    exclusive = lanes.pop("exclusive", [])
    tails = {n: lanes.pop(n) for n in sorted(lanes) if n.startswith("tail-")}
    # The longest lanes start first; the unit lane is short and CPU-light.
    order = ["images", "boot", "zun", "resource", "control-plane", "faults", "unit"]
    lane_names = sorted(lanes, key=lambda n: order.index(n) if n in order else len(order))
    print(f"run-tests: {len(binaries)} test binaries in lanes "
          + ", ".join(f"{n} ({len(lanes[n])})" for n in lane_names)
          + (f", beside the last lane: {', '.join(b[1] for bs in tails.values() for b in bs)}" if tails else "")
          + (f", then alone: {', '.join(b[1] for b in exclusive)}" if exclusive else ""), flush=True)
    ended = set()
    cond = threading.Condition()

    def lane(n):
        try:
            first = AFTER.get(n)
            if first in lanes and not args.serial:
                with cond:
                    cond.wait_for(lambda: first in ended)
            runner.run_lane(n, lanes[n])
        finally:
            with cond:
                ended.add(n)
                cond.notify_all()

    def tail(n):
        with cond:
            cond.wait_for(lambda: len(lane_names) - len(ended) <= TAIL_BESIDE)
        runner.run_lane(n, tails[n])

    threads = [threading.Thread(target=lane, args=(n,)) for n in lane_names]
    tail_threads = [threading.Thread(target=tail, args=(n,)) for n in tails]
    if args.serial:
        for t in threads + tail_threads:
            t.start()
            t.join()
    else:
        for t in threads + tail_threads:
            t.start()
        for t in threads + tail_threads:
            t.join()
    runner.run_lane("exclusive", exclusive)

    # Doc tests are not test binaries; cargo builds and runs them itself.
    start = time.monotonic()
    doc = subprocess.run(["cargo", "test", "--workspace", "--doc", "--", f"--test-threads={args.test_threads}"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - start
    passed = sum(int(m.group(2)) for m in map(RESULT.match, doc.stdout.splitlines()) if m)
    failed = sum(int(m.group(3)) for m in map(RESULT.match, doc.stdout.splitlines()) if m)
    if doc.returncode != 0 and failed == 0:
        failed = 1
    runner.results.append(("doc", "doc-tests", took, passed, failed, 0, doc.returncode == 0))
    print(f"\n==== doc-tests {'ok' if doc.returncode == 0 else 'FAILED'} in {took:.0f}s", flush=True)
    sys.stdout.write(doc.stdout)

    total = time.monotonic() - runner.t0
    print("\n==== test binaries by wall time (lane, binary, seconds, passed, failed)")
    for lane, key, took, passed, failed, ignored, ok in sorted(runner.results, key=lambda r: -r[2]):
        print(f"{lane:14} {key:60} {took:7.1f} {passed:5} {failed:3}{'' if ok else '  FAILED'}")
    per_lane = {}
    for r in runner.results:
        per_lane[r[0]] = per_lane.get(r[0], 0) + r[2]
    print("lanes: " + ", ".join(f"{k} {v:.0f}s" for k, v in sorted(per_lane.items(), key=lambda kv: -kv[1]))
          + f"; wall {total:.0f}s")
    print(cpu.summary())
    passed = sum(r[3] for r in runner.results)
    failed = sum(r[4] for r in runner.results)
    failing = [r[1] for r in runner.results if not r[6]]
    if runner.flaky:
        print("FLAKY (failed, then passed when run again; see their output above): " + ", ".join(runner.flaky))
    if failing:
        print("failed binaries: " + ", ".join(failing))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

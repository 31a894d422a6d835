"""Writes the oslo.config option schema of every service the control plane configures.

Run by scripts/option-schemas with the test cloud's venv (where the services are installed from
PyPI at the pinned versions). For each service it runs the real `oslo-config-generator --format
json` over the namespaces the service's own config-generator file lists (plus the libraries the
operator's rendered files use) and keeps what override validation needs: per section, per
option, its type, bounds and choices. Deprecated names stay valid (oslo.config still reads
them); dynamic sections (Glance's per-backend store sections) get the options of the group
whose options oslo.config registers under them at run time.

Usage: option-schemas.py <output-dir> [--check]
"""

import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

# Namespaces: each project's etc/**/config-generator conf, plus the libraries the rendered files
# set options of (oslo.cache for [cache], oslo.db for the database sections, ...).
SERVICES = {
    "keystone": {
        "package": "keystone",
        "namespaces": ["keystone", "oslo.cache", "oslo.log", "oslo.messaging",
                       "oslo.policy", "oslo.db", "oslo.middleware", "osprofiler"],
    },
    "placement": {
        "package": "openstack-placement",
        "namespaces": ["placement.conf", "keystonemiddleware.auth_token", "oslo.log",
                       "oslo.middleware.cors", "oslo.middleware.http_proxy_to_wsgi",
                       "oslo.policy", "osprofiler"],
    },
    "glance": {
        "package": "glance",
        "namespaces": ["castellan.config", "glance", "glance.api", "glance.store", "glance.multi_store",
                       "oslo.concurrency", "oslo.messaging", "oslo.db", "oslo.policy",
                       "oslo.limit", "keystonemiddleware.auth_token", "oslo.log",
                       "oslo.cache", "oslo.middleware.cors", "oslo.middleware.healthcheck",
                       "oslo.middleware.http_proxy_to_wsgi", "oslo.reports"],
        # glance_store registers the store options under every enabled backend's section.
        "dynamic": {s: "glance_store" for s in
                    ["file", "s3", "os_glance_staging_store", "os_glance_tasks_store"]},
    },
    "nova": {
        "package": "nova",
        "namespaces": ["nova.conf", "oslo.log", "oslo.messaging", "oslo.policy",
                       "oslo.privsep", "oslo.service.periodic_task", "oslo.service.service",
                       "oslo.middleware", "oslo.concurrency", "keystonemiddleware.auth_token",
                       "osprofiler"],
    },
    "neutron": {
        "package": "neutron",
        # neutron.conf, ml2_conf.ini and the OVN metadata agent's file: overrides of ML2/OVN
        # sections land in ml2_conf.ini, the others in neutron.conf.
        "namespaces": ["neutron", "neutron.agent", "neutron.db", "neutron.extensions",
                       "nova.auth", "placement.auth", "oslo.log", "oslo.db", "oslo.policy",
                       "oslo.concurrency", "oslo.messaging", "oslo.middleware",
                       "oslo.service.wsgi", "keystonemiddleware.auth_token", "neutron.ml2",
                       "neutron.ml2.ovn", "neutron.ovn.metadata.agent"],
    },
    "cinder": {
        "package": "cinder",
        "namespaces": ["castellan.config", "cinder", "keystonemiddleware.auth_token",
                       "osprofiler", "oslo.config", "oslo.concurrency", "oslo.db", "oslo.log",
                       "oslo.messaging", "oslo.middleware", "oslo.policy", "oslo.privsep",
                       "oslo.reports", "oslo.service.periodic_task", "oslo.service.service",
                       "oslo.service.sslutils", "oslo.service.wsgi", "oslo.versionedobjects"],
        # cinder-volume registers `backend_host` (listed under [backend]) in every enabled
        # backend's section, next to the [backend_defaults] options they take.
        "merge": {"backend_defaults": ["backend"]},
    },
}

TYPES = {
    "string value": "string",
    "integer value": "integer",
    "boolean value": "boolean",
    "floating point value": "float",
    "list value": "list",
    "dict value": "dict",
    "port value": "port",
    "uri value": "uri",
    "host address value": "host",
    "host domain value": "hostdomain",
    "multi valued": "multi",
    "ip address value": "ip",
}


def reduce_opt(opt):
    spec = {"type": TYPES.get(opt["type"], "unknown")}
    if opt.get("choices"):
        spec["choices"] = [str(c[0]) if isinstance(c, list) else str(c) for c in opt["choices"]]
    for bound in ("min", "max"):
        if opt.get(bound) is not None:
            spec[bound] = opt[bound]
    return spec


def plugin_options():
    from keystoneauth1 import loading

    kinds = {str: "string", int: "integer", bool: "boolean", float: "float"}
    seen = []
    for plugin in ("password", "v3applicationcredential"):
        for opt in loading.get_auth_plugin_conf_options(plugin):
            reduced = {"type": kinds.get(opt.type, "unknown")}
            seen.append((opt.dest, reduced))
            for dep in opt.deprecated_opts:
                seen.append((dep.name.replace("-", "_"), dict(reduced)))
    return seen


def schema(service, spec, venv_bin):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "opts.json")
        cmd = [os.path.join(venv_bin, "oslo-config-generator"), "--format", "json",
               "--output-file", out]
        for ns in spec["namespaces"]:
            cmd += ["--namespace", ns]
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        with open(out) as f:
            data = json.load(f)
    sections = {}
    for group, g in data["options"].items():
        opts = sections.setdefault(group, {})
        for opt in g["opts"]:
            reduced = reduce_opt(opt)
            # Files use the option's dest (dashes of command-line names become underscores).
            opts[opt["dest"]] = reduced
            for dep in opt.get("deprecated_opts") or []:
                dgroup = dep.get("group") or group
                dname = (dep.get("name") or opt["dest"]).replace("-", "_")
                sections.setdefault(dgroup, {}).setdefault(dname, dict(reduced))
        if "auth_type" in opts:
            # Auth plugins register their options only when loaded: the plugins the operator
            # renders (password) and the ones a user may switch to (application credentials).
            for name, reduced in plugin_options():
                opts.setdefault(name, reduced)
    for target, sources in spec.get("merge", {}).items():
        for source in sources:
            for name, reduced in sections.get(source, {}).items():
                sections.setdefault(target, {}).setdefault(name, reduced)
    for section, template in spec.get("dynamic", {}).items():
        merged = dict(sections.get(template, {}))
        merged.update(sections.get(section, {}))
        sections[section] = merged
    return {
        "service": service,
        "generatedFrom": f"{spec['package']} {version(spec['package'])}",
        "namespaces": spec["namespaces"],
        "sections": {s: dict(sorted(o.items())) for s, o in sorted(sections.items())},
    }


def render(doc):
    """JSON with one line per option, so a new release's changes read as a short diff."""
    lines = ["{"]
    for key in ("service", "generatedFrom", "namespaces"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(doc[key])},")
    lines.append('  "sections": {')
    sections = list(doc["sections"].items())
    for i, (section, opts) in enumerate(sections):
        lines.append(f"    {json.dumps(section)}: {{")
        items = list(opts.items())
        for j, (name, spec) in enumerate(items):
            comma = "," if j + 1 < len(items) else ""
            lines.append(f"      {json.dumps(name)}: {json.dumps(spec, sort_keys=True)}{comma}")
        lines.append("    }" + ("," if i + 1 < len(sections) else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    outdir = sys.argv[1]
    check = "--check" in sys.argv[2:]
    venv_bin = os.path.dirname(sys.executable)
    stale = []
    for service, spec in SERVICES.items():
        text = render(schema(service, spec, venv_bin))
        path = os.path.join(outdir, f"{service}.json")
        if check:
            try:
                with open(path) as f:
                    if f.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
            print(f"{path}: {sum(len(o) for o in json.loads(text)['sections'].values())} options")
    if stale:
        print("stale option schemas (run scripts/option-schemas): " + ", ".join(stale),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

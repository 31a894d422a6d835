//! The service-user step every API service but Keystone runs after its db sync: its user in the
//! `service` project (roles `admin` and `service`, the password reset to the generated one), its
//! catalog service and its public/internal/admin endpoints in the region. One script for all
//! services, run by a Job with the service's own image (keystoneauth1 is in every OpenStack
//! image because keystonemiddleware needs it) and Keystone's admin credentials.

use std::collections::BTreeMap;

use crate::hash::InputHash;

/// The script: idempotent (it creates what is missing and corrects what differs, so a retried
/// or re-run Job converges), and it never deletes anything it did not create. Every input comes
/// from the environment; the passwords never appear on a command line.
pub const SCRIPT: &str = r#"import os, sys
from keystoneauth1 import session
from keystoneauth1.identity import v3
env = os.environ
s = session.Session(auth=v3.Password(
    auth_url=env["OS_AUTH_URL"], username=env["OS_USERNAME"], password=env["OS_PASSWORD"],
    project_name=env["OS_PROJECT_NAME"], user_domain_id="default", project_domain_id="default"))
# Keystone at the URL we were given, not at the catalog's public endpoint (which a pod may not
# reach); keystoneauth raises on any error answer, so the Job fails with Keystone's message.
U = env["OS_AUTH_URL"].rstrip("/")
def get(path, key, **q):
    return s.get(U + path, params=q).json()[key]
def post(path, key, body):
    return s.post(U + path, json={key: body}).json()[key]
def one(items, what):
    if len(items) > 1:
        sys.exit("more than one %s: refusing to guess which is ours" % what)
    return items[0] if items else None
region = env["REGION"]
if not any(r["id"] == region for r in get("/regions", "regions")):
    post("/regions", "region", {"id": region})
project = one(get("/projects", "projects", name=env["SERVICE_PROJECT"], domain_id="default"),
              "project " + env["SERVICE_PROJECT"])
if project is None:
    project = post("/projects", "project", {"name": env["SERVICE_PROJECT"], "domain_id": "default",
                                            "description": "OpenStack service users"})
user = one(get("/users", "users", name=env["SERVICE_USER"], domain_id="default"),
           "user " + env["SERVICE_USER"])
if user is None:
    user = post("/users", "user", {"name": env["SERVICE_USER"], "domain_id": "default",
                                   "password": env["SERVICE_PASSWORD"],
                                   "default_project_id": project["id"]})
else:
    s.patch(U + "/users/" + user["id"], json={"user": {"password": env["SERVICE_PASSWORD"], "enabled": True}})
for name in ("admin", "service"):
    role = one(get("/roles", "roles", name=name), "role " + name)
    if role is None:
        role = post("/roles", "role", {"name": name})
    s.put(U + "/projects/%s/users/%s/roles/%s" % (project["id"], user["id"], role["id"]))
service = one([x for x in get("/services", "services", type=env["SERVICE_TYPE"])
               if x.get("name") == env["SERVICE_NAME"]], "service " + env["SERVICE_NAME"])
if service is None:
    service = post("/services", "service", {"name": env["SERVICE_NAME"],
                                            "type": env["SERVICE_TYPE"], "enabled": True,
                                            "description": env.get("SERVICE_DESCRIPTION", "")})
for interface in ("public", "internal", "admin"):
    url = env["ENDPOINT_" + interface.upper()]
    ep = one([e for e in get("/endpoints", "endpoints", service_id=service["id"],
                             interface=interface) if e.get("region_id") == region],
             "%s endpoint of %s in %s" % (interface, env["SERVICE_NAME"], region))
    if ep is None:
        post("/endpoints", "endpoint", {"service_id": service["id"], "interface": interface,
                                        "region_id": region, "url": url, "enabled": True})
    elif ep["url"] != url or not ep.get("enabled", True):
        s.patch(U + "/endpoints/" + ep["id"], json={"endpoint": {"url": url, "enabled": True}})
print("user %s, service %s (%s) and its endpoints in %s ready"
      % (env["SERVICE_USER"], env["SERVICE_NAME"], env["SERVICE_TYPE"], region))
"#;

/// What the step registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEntry {
    /// Service user name.
    pub user: String,
    /// Project of the service users (`service`).
    pub project: String,
    /// Catalog service name, e.g. `placement`.
    pub service_name: String,
    /// Catalog service type, e.g. `placement`.
    pub service_type: String,
    /// Catalog description.
    pub description: String,
    /// Region of the endpoints.
    pub region: String,
    /// Public endpoint URL.
    pub public_url: String,
    /// Internal endpoint URL (also used as the admin endpoint).
    pub internal_url: String,
}

impl ServiceEntry {
    /// The entry of a service whose user is `keystone`'s service user: service `name` of type
    /// `service_type`, endpoints at `public_url` and `internal_url` (no trailing `/`) in
    /// `region` (normally Keystone's; the boot proofs register in regions of their own).
    pub fn for_service(
        keystone: &crate::authtoken::KeystoneAuth,
        name: &str,
        service_type: &str,
        description: &str,
        region: &str,
        public_url: &str,
        internal_url: &str,
    ) -> Self {
        ServiceEntry {
            user: keystone.username.clone(),
            project: keystone.project.clone(),
            service_name: name.into(),
            service_type: service_type.into(),
            description: description.into(),
            region: region.to_string(),
            public_url: public_url.trim_end_matches('/').to_string(),
            internal_url: internal_url.trim_end_matches('/').to_string(),
        }
    }
}

/// The in-cluster URL of a service's API Service (`<name>-api`, plain HTTP on `port`).
pub fn internal_url(name: &str, namespace: &str, port: u16) -> String {
    format!("http://{name}-api.{namespace}.svc:{port}")
}

/// Environment of the step except the secrets: `OS_PASSWORD` (Keystone's admin password) and
/// `SERVICE_PASSWORD` (the generated service password) come from Secrets.
pub fn env(e: &ServiceEntry, keystone_url: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("OS_AUTH_URL".to_string(), keystone_url.to_string()),
        ("OS_USERNAME".to_string(), "admin".to_string()),
        ("OS_PROJECT_NAME".to_string(), "admin".to_string()),
        ("SERVICE_USER".to_string(), e.user.clone()),
        ("SERVICE_PROJECT".to_string(), e.project.clone()),
        ("SERVICE_NAME".to_string(), e.service_name.clone()),
        ("SERVICE_TYPE".to_string(), e.service_type.clone()),
        ("SERVICE_DESCRIPTION".to_string(), e.description.clone()),
        ("REGION".to_string(), e.region.clone()),
        ("ENDPOINT_PUBLIC".to_string(), e.public_url.clone()),
        ("ENDPOINT_INTERNAL".to_string(), e.internal_url.clone()),
        ("ENDPOINT_ADMIN".to_string(), e.internal_url.clone()),
    ])
}

/// Hash of the step's inputs: a changed URL, region or password runs it again.
pub fn hash(
    image: &str,
    e: &ServiceEntry,
    keystone_url: &str,
    admin_password: &str,
    service_password: &str,
) -> String {
    let mut h = InputHash::new()
        .add("script", SCRIPT)
        .add("image", image)
        .add("admin-password", admin_password)
        .add("service-password", service_password);
    for (k, v) in env(e, keystone_url) {
        h = h.add(&k, v);
    }
    h.short()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> ServiceEntry {
        ServiceEntry {
            user: "placement".into(),
            project: "service".into(),
            service_name: "placement".into(),
            service_type: "placement".into(),
            description: "Placement".into(),
            region: "RegionOne".into(),
            public_url: "https://placement.example.org".into(),
            internal_url: "http://placement-api.os.svc:8778".into(),
        }
    }

    #[test]
    fn every_input_changes_the_hash() {
        let base = hash("img", &entry(), "http://ks/v3", "a", "s");
        assert_eq!(base, hash("img", &entry(), "http://ks/v3", "a", "s"));
        let mut e = entry();
        e.public_url = "https://other.example.org".into();
        assert_ne!(base, hash("img", &e, "http://ks/v3", "a", "s"));
        assert_ne!(base, hash("img", &entry(), "http://ks/v3", "a", "s2"));
        assert_ne!(base, hash("img", &entry(), "http://ks/v3", "a2", "s"));
        assert_ne!(base, hash("img2", &entry(), "http://ks/v3", "a", "s"));
    }

    #[test]
    fn passwords_stay_out_of_the_plain_environment() {
        let env = env(&entry(), "http://ks/v3");
        assert!(!env.contains_key("OS_PASSWORD"));
        assert!(!env.contains_key("SERVICE_PASSWORD"));
        assert_eq!(env["ENDPOINT_ADMIN"], env["ENDPOINT_INTERNAL"]);
    }
}

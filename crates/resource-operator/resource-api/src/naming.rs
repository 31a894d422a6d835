//! OpenStack naming conventions inherited from the seed; existing clouds depend on them.

/// Tag (Keystone projects, Neutron resources) and description marker of objects we manage.
pub const MANAGED_TAG: &str = "managed-by-openstack-operator";
/// Description prefix the seed put on the user groups it created.
pub const GROUP_DESCRIPTION_PREFIX: &str = "[managed-by-openstack-operator] ";
/// Federation protocol id the seed registers.
pub const FEDERATION_PROTOCOL: &str = "openid";

/// The seed's `sanitize_name`: `.` and `_` become `-`, lowercase, only `[a-z0-9-]`, dashes
/// collapsed and trimmed. `My_Project.Example.COM` → `my-project-example-com`.
pub fn sanitize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for ch in name.chars() {
        let ch = match ch {
            '.' | '_' => '-',
            c => c.to_ascii_lowercase(),
        };
        if ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-' {
            if ch == '-' && out.ends_with('-') {
                continue;
            }
            out.push(ch);
        }
    }
    out.trim_matches('-').to_string()
}

/// The user group the seed creates for a project: `<sanitized>-users`.
pub fn project_group_name(project_name: &str) -> String {
    format!("{}-users", sanitize_name(project_name))
}

/// The description the seed gives that group.
pub fn project_group_description(project_name: &str) -> String {
    format!("{GROUP_DESCRIPTION_PREFIX}Users for {project_name}")
}

/// The group federated users bound to `role` (other than `member`, whose group is the project
/// group) are mapped into: `<sanitized project name>-users-<sanitized role>`.
pub fn role_group_name(project_name: &str, role: &str) -> String {
    format!(
        "{}-{}",
        project_group_name(project_name),
        sanitize_name(role)
    )
}

/// The description of a role group: our prefix, the role and the project (the exact text
/// tells it apart from another project's group of the same name).
pub fn role_group_description(project_name: &str, role: &str) -> String {
    format!("{GROUP_DESCRIPTION_PREFIX}Users with role {role} in {project_name}")
}

/// Subnet name of a project network: `<network>-subnet`.
pub fn subnet_name(network: &str) -> String {
    format!("{network}-subnet")
}

/// Router name of a project network: `<network>-router`.
pub fn router_name(network: &str) -> String {
    format!("{network}-router")
}

/// The shared federation mapping of an identity provider: `<idp>_oidc_mapping`.
pub fn mapping_name(idp: &str) -> String {
    format!("{idp}_oidc_mapping")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_matches_seed_examples() {
        assert_eq!(
            sanitize_name("My_Project.Example.COM"),
            "my-project-example-com"
        );
        assert_eq!(
            project_group_name("my-project.example.com"),
            "my-project-example-com-users"
        );
        assert_eq!(sanitize_name("--a__b..c--"), "a-b-c");
        assert_eq!(sanitize_name("ünï côde"), "ncde");
        assert_eq!(mapping_name("satosa"), "satosa_oidc_mapping");
        assert_eq!(subnet_name("internal"), "internal-subnet");
        assert_eq!(router_name("internal"), "internal-router");
    }
}

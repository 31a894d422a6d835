//! Every Identity operation against the real test cloud.

use crate::common;

use common::{Created, DEFAULT_DOMAIN, Janitor, cloud, create_user, skipped, unique};
use openstack::Error;
use openstack::model::*;
use serde_json::json;

#[tokio::test]
async fn domain_lifecycle_tags_and_errors() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let id = cloud.identity.clone();
    let j = Janitor::default();
    j.run(&cloud, async {
        let name = unique("dom");
        let d = id
            .create_domain(&DomainCreate {
                name: name.clone(),
                description: "integration".into(),
                enabled: true,
                tags: vec!["managed-by-openstack-operator".into()],
            })
            .await
            .unwrap();
        j.track(Created::Domain(d.id.clone()));
        assert_eq!(d.name, name);
        assert_eq!(d.tags, vec!["managed-by-openstack-operator".to_string()]);

        assert_eq!(
            id.get_domain(&d.id).await.unwrap().description,
            "integration"
        );
        assert_eq!(
            id.find_domain(&name).await.unwrap().map(|d| d.id),
            Some(d.id.clone())
        );
        assert!(id.find_domain(&unique("nope")).await.unwrap().is_none());
        assert!(
            id.list_domains()
                .await
                .unwrap()
                .iter()
                .any(|x| x.id == d.id)
        );

        let dup = id
            .create_domain(&DomainCreate {
                name: name.clone(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(dup.is_conflict(), "{dup}");
        assert!(
            dup.to_string().contains("identity create_domain: HTTP 409"),
            "{dup}"
        );

        // Tags on a domain via the project tag API (verified: it works).
        id.set_domain_tags(&d.id, &["a".into(), "b".into()])
            .await
            .unwrap();
        assert_eq!(id.get_domain(&d.id).await.unwrap().tags, vec!["a", "b"]);

        // Keystone refuses to delete an enabled domain.
        let e = id.delete_domain(&d.id).await.unwrap_err();
        assert!(matches!(e, Error::Forbidden { .. }), "{e}");

        let upd = id
            .update_domain(
                &d.id,
                &DomainUpdate {
                    description: Some("changed".into()),
                    enabled: Some(false),
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.description, "changed");
        assert!(!upd.enabled);
        id.delete_domain(&d.id).await.unwrap();
        assert!(id.get_domain(&d.id).await.unwrap_err().is_not_found());
        assert!(id.delete_domain(&d.id).await.unwrap_err().is_not_found());
        let e = id
            .update_domain(
                &d.id,
                &DomainUpdate {
                    description: Some("gone".into()),
                    enabled: None,
                },
            )
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
    })
    .await;
}

#[tokio::test]
async fn project_lifecycle_with_tags() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let id = cloud.identity.clone();
    let j = Janitor::default();
    j.run(&cloud, async {
        let name = unique("proj");
        let tag = unique("tag");
        let p = id
            .create_project(&ProjectCreate {
                name: name.clone(),
                domain_id: DEFAULT_DOMAIN.into(),
                description: "d".into(),
                enabled: true,
                tags: vec![tag.clone(), "managed-by-openstack-operator".into()],
            })
            .await
            .unwrap();
        j.track(Created::Project(p.id.clone()));
        assert_eq!(p.domain_id, DEFAULT_DOMAIN);
        assert!(p.tags.contains(&tag));

        assert_eq!(id.get_project(&p.id).await.unwrap().name, name);
        assert_eq!(
            id.find_project(DEFAULT_DOMAIN, &name)
                .await
                .unwrap()
                .map(|p| p.id),
            Some(p.id.clone())
        );
        assert!(
            id.find_project(DEFAULT_DOMAIN, &unique("x"))
                .await
                .unwrap()
                .is_none()
        );
        let by_tag = id
            .list_projects(&ProjectFilter {
                tags: vec![tag.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            by_tag.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
            vec![p.id.clone()]
        );
        let by_both = id
            .list_projects(&ProjectFilter {
                domain_id: Some(DEFAULT_DOMAIN.into()),
                tags: vec![tag.clone(), "managed-by-openstack-operator".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_both.len(), 1);
        let by_domain = id
            .list_projects(&ProjectFilter {
                domain_id: Some(DEFAULT_DOMAIN.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(by_domain.iter().any(|x| x.id == p.id));

        let dup = id
            .create_project(&ProjectCreate {
                name: name.clone(),
                domain_id: DEFAULT_DOMAIN.into(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(dup.is_conflict(), "{dup}");

        let bad = id
            .create_project(&ProjectCreate {
                name: unique("proj"),
                domain_id: "no-such-domain".into(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(
            matches!(bad, Error::NotFound { .. } | Error::BadRequest { .. }),
            "{bad}"
        );

        let new_name = unique("proj2");
        let u = id
            .update_project(
                &p.id,
                &ProjectUpdate {
                    name: Some(new_name.clone()),
                    description: Some("changed".into()),
                    enabled: Some(false),
                    tags: Some(vec![tag.clone()]),
                },
            )
            .await
            .unwrap();
        assert_eq!(u.name, new_name);
        assert_eq!(u.description, "changed");
        assert!(!u.enabled);
        assert_eq!(u.tags, vec![tag.clone()]);

        let bad_tag = id
            .update_project(
                &p.id,
                &ProjectUpdate {
                    tags: Some(vec!["a/b".into()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(bad_tag, Error::BadRequest { .. }), "{bad_tag}");

        id.delete_project(&p.id).await.unwrap();
        assert!(id.get_project(&p.id).await.unwrap_err().is_not_found());
        assert!(id.delete_project(&p.id).await.unwrap_err().is_not_found());
    })
    .await;
}

#[tokio::test]
async fn groups_users_and_membership() {
    if skipped() {
        return;
    }
    let (cloud, core) = cloud().await;
    let id = cloud.identity.clone();
    let j = Janitor::with_core(&core);
    j.run(&cloud, async {
        let name = unique("grp");
        let g = id
            .create_group(&GroupCreate {
                name: name.clone(),
                domain_id: DEFAULT_DOMAIN.into(),
                description: "[managed-by-openstack-operator] Users".into(),
            })
            .await
            .unwrap();
        j.track(Created::Group(g.id.clone()));
        assert_eq!(id.get_group(&g.id).await.unwrap().name, name);
        assert_eq!(
            id.find_group(DEFAULT_DOMAIN, &name)
                .await
                .unwrap()
                .map(|g| g.id),
            Some(g.id.clone())
        );
        assert!(
            id.find_group(DEFAULT_DOMAIN, &unique("x"))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            id.list_groups(Some(DEFAULT_DOMAIN))
                .await
                .unwrap()
                .iter()
                .any(|x| x.id == g.id)
        );
        assert!(
            id.list_groups(None)
                .await
                .unwrap()
                .iter()
                .any(|x| x.id == g.id)
        );
        let dup = id
            .create_group(&GroupCreate {
                name: name.clone(),
                domain_id: DEFAULT_DOMAIN.into(),
                description: String::new(),
            })
            .await
            .unwrap_err();
        assert!(dup.is_conflict(), "{dup}");
        let u = id
            .update_group(
                &g.id,
                &GroupUpdate {
                    description: Some("changed".into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(u.description, "changed");

        let admin = id
            .find_user(DEFAULT_DOMAIN, "admin")
            .await
            .unwrap()
            .expect("admin user");
        assert_eq!(id.get_user(&admin.id).await.unwrap().name, "admin");
        let uname = unique("usr");
        let uid = create_user(&core, &uname).await;
        j.track(Created::User(uid.clone()));
        let user = id
            .find_user(DEFAULT_DOMAIN, &uname)
            .await
            .unwrap()
            .expect("new user");
        assert_eq!(user.id, uid);
        assert!(user.enabled);
        assert!(
            id.find_user(DEFAULT_DOMAIN, &unique("nobody"))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            id.get_user("no-such-user")
                .await
                .unwrap_err()
                .is_not_found()
        );

        id.add_user_to_group(&g.id, &uid).await.unwrap();
        id.add_user_to_group(&g.id, &uid).await.unwrap();
        let members = id.list_group_users(&g.id).await.unwrap();
        assert_eq!(
            members.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
            vec![uid.clone()]
        );
        id.remove_user_from_group(&g.id, &uid).await.unwrap();
        assert!(id.list_group_users(&g.id).await.unwrap().is_empty());
        let e = id.remove_user_from_group(&g.id, &uid).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(
            id.add_user_to_group(&g.id, "no-such-user")
                .await
                .unwrap_err()
                .is_not_found()
        );

        id.delete_group(&g.id).await.unwrap();
        assert!(id.get_group(&g.id).await.unwrap_err().is_not_found());
        assert!(id.delete_group(&g.id).await.unwrap_err().is_not_found());
    })
    .await;
}

#[tokio::test]
async fn roles_and_project_assignments() {
    if skipped() {
        return;
    }
    let (cloud, core) = cloud().await;
    let id = cloud.identity.clone();
    let j = Janitor::with_core(&core);
    j.run(&cloud, async {
        let member = id.find_role("member").await.unwrap().expect("member role");
        assert!(id.find_role(&unique("role")).await.unwrap().is_none());
        assert!(
            id.list_roles()
                .await
                .unwrap()
                .iter()
                .any(|r| r.id == member.id)
        );

        let p = id
            .create_project(&ProjectCreate {
                name: unique("rap"),
                domain_id: DEFAULT_DOMAIN.into(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap();
        j.track(Created::Project(p.id.clone()));
        let g = id
            .create_group(&GroupCreate {
                name: unique("rag"),
                domain_id: DEFAULT_DOMAIN.into(),
                description: String::new(),
            })
            .await
            .unwrap();
        j.track(Created::Group(g.id.clone()));
        let uid = create_user(&core, &unique("usr")).await;
        j.track(Created::User(uid.clone()));

        assert!(
            id.list_project_role_assignments(&p.id)
                .await
                .unwrap()
                .is_empty()
        );
        let ga = Actor::Group(g.id.clone());
        let ua = Actor::User(uid.clone());
        id.grant_project_role(&p.id, &ga, &member.id).await.unwrap();
        id.grant_project_role(&p.id, &ga, &member.id).await.unwrap();
        id.grant_project_role(&p.id, &ua, &member.id).await.unwrap();
        let mut ra = id.list_project_role_assignments(&p.id).await.unwrap();
        ra.sort_by(|a, b| a.actor.cmp(&b.actor));
        assert_eq!(ra.len(), 2, "{ra:?}");
        assert!(
            ra.iter()
                .all(|a| a.role_id == member.id && a.role_name.as_deref() == Some("member"))
        );
        assert!(ra.iter().any(|a| a.actor == ga));
        assert!(ra.iter().any(|a| a.actor == ua));
        // The one-request listing of a whole domain (the drift check's) holds the same two,
        // each with its project.
        let mut in_domain: Vec<RoleAssignment> = id
            .list_domain_role_assignments(DEFAULT_DOMAIN)
            .await
            .unwrap()
            .into_iter()
            .filter(|a| a.project_id == p.id)
            .collect();
        in_domain.sort_by(|a, b| a.actor.cmp(&b.actor));
        assert_eq!(
            in_domain
                .iter()
                .map(|a| (&a.actor, &a.role_id))
                .collect::<Vec<_>>(),
            ra.iter()
                .map(|a| (&a.actor, &a.role_id))
                .collect::<Vec<_>>(),
            "{in_domain:?}"
        );

        let e = id
            .grant_project_role(&p.id, &ga, "no-such-role")
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");

        id.revoke_project_role(&p.id, &ga, &member.id)
            .await
            .unwrap();
        id.revoke_project_role(&p.id, &ua, &member.id)
            .await
            .unwrap();
        assert!(
            id.list_project_role_assignments(&p.id)
                .await
                .unwrap()
                .is_empty()
        );
        let e = id
            .revoke_project_role(&p.id, &ga, &member.id)
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");
    })
    .await;
}

#[tokio::test]
async fn federation_idp_mapping_protocol() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let id = cloud.identity.clone();
    let j = Janitor::default();
    j.run(&cloud, async {
        let idp_id = unique("idp");
        let remote = format!("https://{idp_id}.example.org/realms/x");
        let idp = id
            .create_identity_provider(&IdentityProviderCreate {
                id: idp_id.clone(),
                remote_ids: vec![remote.clone()],
                enabled: true,
                domain_id: Some(DEFAULT_DOMAIN.into()),
                description: Some("integration".into()),
            })
            .await
            .unwrap();
        j.track(Created::Idp(idp_id.clone()));
        assert_eq!(idp.remote_ids, vec![remote.clone()]);
        assert_eq!(idp.domain_id.as_deref(), Some(DEFAULT_DOMAIN));
        assert_eq!(
            id.get_identity_provider(&idp_id).await.unwrap().description,
            "integration"
        );

        let dup = id
            .create_identity_provider(&IdentityProviderCreate {
                id: idp_id.clone(),
                remote_ids: vec![],
                enabled: true,
                domain_id: Some(DEFAULT_DOMAIN.into()),
                description: None,
            })
            .await
            .unwrap_err();
        assert!(dup.is_conflict(), "{dup}");

        let remote2 = format!("https://{idp_id}.example.org/realms/y");
        let upd = id
            .update_identity_provider(
                &idp_id,
                &IdentityProviderUpdate {
                    remote_ids: Some(vec![remote.clone(), remote2.clone()]),
                    enabled: Some(false),
                    description: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(upd.remote_ids.len(), 2);
        assert!(!upd.enabled);

        // An IdP without a domain gets one generated by Keystone.
        let idp2_id = unique("idp");
        let idp2 = id
            .create_identity_provider(&IdentityProviderCreate {
                id: idp2_id.clone(),
                remote_ids: vec![format!("https://{idp2_id}.example.org")],
                enabled: true,
                domain_id: None,
                description: None,
            })
            .await
            .unwrap();
        if let Some(d) = &idp2.domain_id {
            j.track(Created::Domain(d.clone()));
        }
        j.track(Created::Idp(idp2_id.clone()));
        assert!(idp2.domain_id.is_some());
        // Remote ids are unique across IdPs.
        let e = id
            .update_identity_provider(
                &idp2_id,
                &IdentityProviderUpdate {
                    remote_ids: Some(vec![remote.clone()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");

        let mapping_id = format!("{idp_id}_oidc_mapping");
        let rules = json!([{
            "local": [
                {"user": {"name": "{0}", "domain": {"name": "Default"}, "type": "ephemeral"}},
                {"group": {"name": "some-users", "domain": {"name": "Default"}}}
            ],
            "remote": [
                {"type": "HTTP_OIDC_SUB"},
                {"type": "HTTP_OIDC_SUB", "any_one_of": ["alice"]}
            ]
        }]);
        // Held as text: compared as JSON (Keystone re-formats what it stores).
        let as_text =
            |v: &serde_json::Value| MappingRules::from_values(v.as_array().unwrap()).unwrap();
        let m = id
            .create_mapping(&mapping_id, &as_text(&rules))
            .await
            .unwrap();
        j.track(Created::Mapping(mapping_id.clone()));
        assert_eq!(m.rules.to_value().unwrap(), rules);
        let got = id.get_mapping(&mapping_id).await.unwrap().rules;
        assert_eq!(got.to_value().unwrap(), rules);
        assert_eq!(got.len(), 1);
        assert!(
            id.create_mapping(&mapping_id, &as_text(&rules))
                .await
                .unwrap_err()
                .is_conflict()
        );
        let bad = id
            .create_mapping(&unique("map"), &as_text(&json!([{"local": []}])))
            .await
            .unwrap_err();
        assert!(matches!(bad, Error::BadRequest { .. }), "{bad}");

        let mut rules2 = rules.clone();
        rules2[0]["remote"][1]["any_one_of"] = json!(["alice", "bob"]);
        assert_eq!(
            id.update_mapping(&mapping_id, &as_text(&rules2))
                .await
                .unwrap()
                .rules
                .to_value()
                .unwrap(),
            rules2
        );

        let mapping2 = unique("map");
        id.create_mapping(&mapping2, &as_text(&rules))
            .await
            .unwrap();
        j.track(Created::Mapping(mapping2.clone()));

        let proto = id
            .create_federation_protocol(&idp_id, "openid", &mapping_id)
            .await
            .unwrap();
        assert_eq!(proto.mapping_id, mapping_id);
        assert_eq!(proto.idp_id, idp_id);
        let got = id.get_federation_protocol(&idp_id, "openid").await.unwrap();
        assert_eq!(got.id, "openid");
        assert!(
            id.create_federation_protocol(&idp_id, "openid", &mapping_id)
                .await
                .unwrap_err()
                .is_conflict()
        );
        let moved = id
            .update_federation_protocol(&idp_id, "openid", &mapping2)
            .await
            .unwrap();
        assert_eq!(moved.mapping_id, mapping2);
        id.delete_federation_protocol(&idp_id, "openid")
            .await
            .unwrap();
        assert!(
            id.get_federation_protocol(&idp_id, "openid")
                .await
                .unwrap_err()
                .is_not_found()
        );
        assert!(
            id.delete_federation_protocol(&idp_id, "openid")
                .await
                .unwrap_err()
                .is_not_found()
        );

        id.delete_mapping(&mapping2).await.unwrap();
        assert!(id.get_mapping(&mapping2).await.unwrap_err().is_not_found());
        id.delete_identity_provider(&idp_id).await.unwrap();
        assert!(
            id.get_identity_provider(&idp_id)
                .await
                .unwrap_err()
                .is_not_found()
        );
        assert!(
            id.delete_identity_provider(&idp_id)
                .await
                .unwrap_err()
                .is_not_found()
        );
    })
    .await;
}

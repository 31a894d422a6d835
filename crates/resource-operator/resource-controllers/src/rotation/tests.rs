use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn policy() -> Policy {
    Policy {
        lifetime: SignedDuration::from_secs(120),
        lead: SignedDuration::from_secs(90),
        drain: SignedDuration::from_secs(10),
        current_makes_successor: true,
    }
}

const PREFIX: &str = "openstack-operator-east-0123abcd";

fn cred(id: &str, name: &str, expires: Option<i64>) -> Credential {
    Credential {
        id: id.into(),
        name: name.into(),
        expires_at: expires.map(t),
        unrestricted: true,
    }
}

#[test]
fn names_carry_the_cloud_the_uid_and_the_generation() {
    let p = name_prefix("east", "0123abcd-4567-89ab-cdef-0123456789ab");
    assert_eq!(p, PREFIX);
    assert_eq!(generation_of(&p, &format!("{p}-7")), Some(7));
    assert_eq!(generation_of(&p, &format!("{p}-")), None);
    assert_eq!(generation_of(&p, &format!("{p}-7x")), None);
    assert_eq!(
        generation_of(&p, "openstack-operator-east-0123abcd9-1"),
        None
    );
    assert_eq!(generation_of(&p, "mine"), None);
    assert!(name_prefix(&"x".repeat(300), "u").len() < 240);
}

#[test]
fn a_restricted_credential_is_blocked_naming_the_field() {
    let mut c = cred("a", "user-made", None);
    c.unrestricted = false;
    let o = Observed {
        now: t(0),
        prefix: PREFIX,
        current: Some(&c),
        listed: std::slice::from_ref(&c),
        pending: None,
        old_clients_in_use: 0,
    };
    match decide(&o, &policy()) {
        Step::Blocked(m) => {
            assert!(
                m.starts_with("spec.rotation:") && m.contains("unrestricted"),
                "{m}"
            )
        }
        s => panic!("{s:?}"),
    }
}

#[test]
fn a_credential_is_replaced_within_the_lead_time_and_one_that_never_expires_at_once() {
    let c = cred("a", &format!("{PREFIX}-4"), Some(200));
    let o = |now| Observed {
        now: t(now),
        prefix: PREFIX,
        current: Some(&c),
        listed: std::slice::from_ref(&c),
        pending: None,
        old_clients_in_use: 0,
    };
    assert_eq!(decide(&o(0), &policy()), Step::Wait(t(110)));
    assert_eq!(
        decide(&o(110), &policy()),
        Step::Create {
            name: format!("{PREFIX}-5"),
            expires_at: t(230)
        }
    );
    let user = cred("u", "made-by-hand", None);
    let o = Observed {
        now: t(0),
        prefix: PREFIX,
        current: Some(&user),
        listed: std::slice::from_ref(&user),
        pending: None,
        old_clients_in_use: 0,
    };
    assert_eq!(
        decide(&o, &policy()),
        Step::Create {
            name: format!("{PREFIX}-1"),
            expires_at: t(120)
        }
    );
}

#[test]
fn the_old_credential_waits_for_the_drain_and_credentials_not_ours_are_never_touched() {
    let old = cred("a", &format!("{PREFIX}-1"), Some(120));
    let new = cred("b", &format!("{PREFIX}-2"), Some(230));
    let other = cred("z", "someone-elses", None);
    let listed = [old.clone(), new.clone(), other];
    let pending = Pending {
        previous_id: "a".into(),
        switched_at: t(110),
    };
    let o = |now| Observed {
        now: t(now),
        prefix: PREFIX,
        current: Some(&new),
        listed: &listed,
        pending: Some(&pending),
        old_clients_in_use: 0,
    };
    assert_eq!(decide(&o(115), &policy()), Step::Wait(t(120)));
    // A pass still holding a client made with the old credential keeps it, past the drain.
    let busy = Observed {
        old_clients_in_use: 1,
        ..o(125)
    };
    assert_eq!(decide(&busy, &policy()), Step::Wait(t(126)));
    assert_eq!(
        decide(&o(120), &policy()),
        Step::Delete {
            ids: vec!["a".into()],
            finish_switch: true
        }
    );
    // An annotation naming the credential in use only ends the switch.
    let pending = Pending {
        previous_id: "b".into(),
        switched_at: t(0),
    };
    let o = Observed {
        now: t(0),
        prefix: PREFIX,
        current: Some(&new),
        listed: &listed[1..],
        pending: Some(&pending),
        old_clients_in_use: 0,
    };
    assert_eq!(
        decide(&o, &policy()),
        Step::Delete {
            ids: vec![],
            finish_switch: true
        }
    );
}

/// Keystone and the Secret, and a pass that can stop after any of its writes.
struct World {
    now: i64,
    creds: Vec<Credential>,
    /// The credential in the Secret.
    current: String,
    pending: Option<Pending>,
    next_id: u32,
    switches: u32,
    /// Creates Keystone refused because the name was taken.
    duplicates: u32,
    /// Credentials deleted while the Secret named them.
    deleted_in_use: u32,
    policy: Policy,
}

impl World {
    fn new() -> Self {
        World {
            now: 0,
            creds: vec![cred("user", "made-by-hand", None)],
            current: "user".into(),
            pending: None,
            next_id: 0,
            switches: 0,
            duplicates: 0,
            deleted_in_use: 0,
            policy: policy(),
        }
    }

    /// A tenant's: no credential at first, made by the operator's user (restricted is fine).
    fn tenant() -> Self {
        World {
            creds: vec![],
            current: String::new(),
            policy: Policy {
                current_makes_successor: false,
                ..policy()
            },
            ..World::new()
        }
    }

    /// One pass (steps until a wait); `writes` counts down to a crash.
    fn pass(&mut self, writes: &mut Option<u32>) {
        let write = |w: &mut Option<u32>| match w {
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
            None => true,
        };
        for _ in 0..10 {
            let current = self.creds.iter().find(|c| c.id == self.current).cloned();
            assert!(
                current.is_some() || !self.policy.current_makes_successor,
                "the credential in the Secret exists"
            );
            let o = Observed {
                now: t(self.now),
                prefix: PREFIX,
                current: current.as_ref(),
                listed: &self.creds,
                pending: self.pending.as_ref(),
                old_clients_in_use: 0,
            };
            match decide(&o, &self.policy) {
                Step::Blocked(m) => panic!("{m}"),
                Step::Wait(_) => return,
                Step::Delete { ids, finish_switch } => {
                    for id in ids {
                        if !write(writes) {
                            return;
                        }
                        if id == self.current {
                            self.deleted_in_use += 1;
                        }
                        self.creds.retain(|c| c.id != id);
                    }
                    if finish_switch {
                        if !write(writes) {
                            return;
                        }
                        self.pending = None;
                    }
                }
                Step::Create { name, expires_at } => {
                    if !write(writes) {
                        return;
                    }
                    if self.creds.iter().any(|c| c.name == name) {
                        self.duplicates += 1;
                        return;
                    }
                    self.next_id += 1;
                    let id = format!("c{}", self.next_id);
                    self.creds.push(Credential {
                        id: id.clone(),
                        name,
                        expires_at: Some(expires_at),
                        unrestricted: self.policy.current_makes_successor,
                    });
                    // The Secret's update, with the old id in its annotation.
                    if !write(writes) {
                        return;
                    }
                    // A first delivery replaces nothing: no annotation.
                    let previous = std::mem::replace(&mut self.current, id);
                    self.pending = (!previous.is_empty()).then(|| Pending {
                        previous_id: previous,
                        switched_at: t(self.now),
                    });
                    self.switches += 1;
                }
            }
        }
        panic!("a pass took more than 10 steps");
    }

    /// Five minutes of passes every 5 s, the operator stopping after write `crash_after`
    /// (and restarting at the next pass).
    fn run_crashing_after(mut self, crash_after: u32) -> Self {
        let mut crashed = false;
        while self.now < 300 {
            let mut writes = if crashed { None } else { Some(crash_after) };
            self.pass(&mut writes);
            if writes == Some(0) {
                crashed = true;
            }
            self.now += 5;
        }
        self
    }
}

#[test]
fn a_pass_stopped_after_any_write_converges_without_leaks_duplicates_or_lost_credentials() {
    // Every crash point of the first ~40 writes of a run of five minutes, a pass every 5 s.
    for crash_after in 0..40 {
        let w = World::new().run_crashing_after(crash_after);
        assert_eq!(w.duplicates, 0, "crash after write {crash_after}");
        assert_eq!(w.deleted_in_use, 0, "crash after write {crash_after}");
        // One credential in use, at most one draining; the user's first one is gone.
        let ours: Vec<&Credential> = w.creds.iter().collect();
        let draining = w.pending.as_ref().map(|p| p.previous_id.clone());
        assert!(
            ours.iter()
                .all(|c| c.id == w.current || Some(&c.id) == draining.as_ref()),
            "crash after write {crash_after}: {ours:?}"
        );
        assert!(!w.creds.iter().any(|c| c.id == "user"));
        // 300 s at a 30 s rotation period (lifetime 120 - lead 90): at least 8 switches.
        assert!(
            w.switches >= 8,
            "crash after write {crash_after}: {}",
            w.switches
        );
        let current = w.creds.iter().find(|c| c.id == w.current).unwrap();
        assert!(current.expires_at.unwrap() > t(w.now));
    }
}

#[test]
fn the_secret_s_entry_gets_the_new_credential_and_nothing_else_changes() {
    let yaml = "clouds:\n  east:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: https://k/v3\n      application_credential_id: old\n      application_credential_secret: s1\n      application_credential_name: n\n    region_name: R\n  west:\n    auth: {username: u}\n";
    assert_eq!(credential_id(yaml, "east").unwrap(), "old");
    let out = with_credential(yaml, "east", "new", "s2").unwrap();
    let doc = api::manifest::documents(&out).unwrap().remove(0);
    assert_eq!(
        doc["clouds"]["east"]["auth"],
        serde_json::json!({"auth_url": "https://k/v3", "application_credential_id": "new",
            "application_credential_secret": "s2"})
    );
    assert_eq!(doc["clouds"]["east"]["region_name"], "R");
    assert_eq!(doc["clouds"]["west"]["auth"]["username"], "u");
    let e = credential_id(yaml, "west").unwrap_err().to_string();
    assert!(
        e.starts_with("spec.rotation:") && e.contains("\"password\""),
        "{e}"
    );
    let e = credential_id(yaml, "north").unwrap_err().to_string();
    assert!(e.starts_with("spec.cloud:"), "{e}");
    let e = credential_id("a: [", "east").unwrap_err().to_string();
    assert!(!e.contains("a: ["), "{e}");
}

#[test]
fn a_tenant_s_rotation_stopped_after_any_write_converges_the_same_way() {
    for crash_after in 0..40 {
        let w = World::tenant().run_crashing_after(crash_after);
        assert_eq!(w.duplicates, 0, "crash after write {crash_after}");
        assert_eq!(w.deleted_in_use, 0, "crash after write {crash_after}");
        let draining = w.pending.as_ref().map(|p| p.previous_id.clone());
        assert!(
            w.creds
                .iter()
                .all(|c| c.id == w.current || Some(&c.id) == draining.as_ref()),
            "crash after write {crash_after}: {:?}",
            w.creds
        );
        // The first delivery, then one every 30 s.
        assert!(
            w.switches >= 9,
            "crash after write {crash_after}: {}",
            w.switches
        );
        let current = w.creds.iter().find(|c| c.id == w.current).unwrap();
        assert!(current.expires_at.unwrap() > t(w.now));
    }
}

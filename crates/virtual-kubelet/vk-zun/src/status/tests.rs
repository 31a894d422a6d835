use super::*;
use serde_json::json;

fn pod(policy: &str, inits: &[&str], mains: &[&str]) -> Pod {
    let c = |n: &&str| json!({"name": n, "image": "busybox"});
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
        "spec": {"restartPolicy": policy,
                 "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
                 "containers": mains.iter().map(c).collect::<Vec<_>>()},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn zc(id: &str, role: Role, name: &str, status: &str, detail: Option<&str>) -> ZunContainer {
    ZunContainer {
        uuid: id.into(),
        status: status.into(),
        status_detail: detail.map(str::to_string),
        labels: crate::labels::for_container("vk", "ns", "p", "uid-1", name, role),
        addresses: [(
            "net".to_string(),
            vec![openstack::container::ZunAddress {
                addr: "10.0.0.7".into(),
                version: 4,
                ..Default::default()
            }],
        )]
        .into_iter()
        .collect(),
        created_at: Some("2026-12-01T05:00:00.000000".into()),
        ..Default::default()
    }
}

fn t(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

/// Render, then store the status on the pod (what the runtime does).
fn step(p: &mut Pod, observed: &[ZunContainer], pass: &Pass, now: jiff::Timestamp) -> PodStatus {
    let s = render(p, observed, pass, "192.0.2.10", now);
    p.status = Some(s.clone());
    s
}

fn state(s: &PodStatus, i: usize) -> ContainerState {
    s.container_statuses.as_ref().unwrap()[i]
        .state
        .clone()
        .unwrap()
}

#[test]
fn new_pod_is_created_then_running() {
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Always", &[], &["c"]);
    assert_eq!(
        decide(&p, &[], &BTreeMap::new(), now),
        vec![Action::CreateMain(vec!["c".into()])]
    );
    let creating = zc("z1", Role::Main, "c", zs::CREATING, None);
    let s = step(
        &mut p,
        std::slice::from_ref(&creating),
        &Pass::default(),
        now,
    );
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(
        state(&s, 0).waiting.unwrap().reason.as_deref(),
        Some("ContainerCreating")
    );
    assert_eq!(
        s.container_statuses.as_ref().unwrap()[0]
            .container_id
            .as_deref(),
        Some("zun://z1")
    );
    let running = zc("z1", Role::Main, "c", zs::RUNNING, Some("Up 1 second"));
    assert!(decide(&p, std::slice::from_ref(&running), &BTreeMap::new(), now).is_empty());
    let later = t("2026-12-01T05:00:05Z");
    let s = step(
        &mut p,
        std::slice::from_ref(&running),
        &Pass::default(),
        later,
    );
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(s.host_ip.as_deref(), Some("192.0.2.10"));
    assert_eq!(state(&s, 0).running.unwrap().started_at, Some(Time(later)));
    let ready = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    // Same observation later: nothing changes (no write).
    let again = render(
        &p,
        std::slice::from_ref(&running),
        &Pass::default(),
        "192.0.2.10",
        t("2026-12-01T05:09:00Z"),
    );
    assert_eq!(Some(again), p.status);
}

#[test]
fn exits_with_each_restart_policy() {
    let now = t("2026-12-01T05:00:00Z");
    // (policy, exit code) → (phase, restarted?, terminated reason)
    let cases = [
        ("Never", 0, "Succeeded", false, "Completed"),
        ("Never", 3, "Failed", false, "Error"),
        ("OnFailure", 0, "Succeeded", false, "Completed"),
        ("OnFailure", 3, "Running", true, "Error"),
        ("Always", 0, "Running", true, "Completed"),
        ("Always", 3, "Running", true, "Error"),
    ];
    for (policy, code, phase, restarts, reason) in cases {
        let mut p = pod(policy, &[], &["c"]);
        let run = zc("z1", Role::Main, "c", zs::RUNNING, Some("Up"));
        step(&mut p, std::slice::from_ref(&run), &Pass::default(), now);
        let detail = format!("Exited({code}) 1 second ago");
        let exited = zc("z1", Role::Main, "c", zs::STOPPED, Some(&detail));
        let actions = decide(&p, std::slice::from_ref(&exited), &BTreeMap::new(), now);
        let mut pass = Pass::default();
        if restarts {
            assert_eq!(
                actions,
                vec![Action::Restart {
                    id: "z1".into(),
                    key: (Role::Main, "c".into())
                }],
                "{policy} {code}"
            );
            pass.restarted.insert((Role::Main, "c".into()));
        } else {
            assert!(actions.is_empty(), "{policy} {code}: {actions:?}");
        }
        let s = step(&mut p, std::slice::from_ref(&exited), &pass, now);
        assert_eq!(s.phase.as_deref(), Some(phase), "{policy} {code}");
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        let term = if restarts {
            assert_eq!(cs.restart_count, 1);
            assert!(cs.state.as_ref().unwrap().running.is_some());
            cs.last_state.as_ref().unwrap().terminated.clone().unwrap()
        } else {
            assert_eq!(cs.restart_count, 0);
            cs.state.as_ref().unwrap().terminated.clone().unwrap()
        };
        assert_eq!(term.exit_code, code, "{policy} {code}");
        assert_eq!(term.reason.as_deref(), Some(reason));
        assert!(term.finished_at.is_some() && term.started_at.is_some());
    }
}

/// One pass as the provider makes it: the restart memory settled against Zun's view, the
/// actions decided, restarts applied to the memory, the status rendered and stored on the pod.
fn provider_pass(
    p: &mut Pod,
    observed: &[ZunContainer],
    tracks: &mut BTreeMap<Key, Track>,
    now: jiff::Timestamp,
) -> (Vec<Action>, PodStatus) {
    let (by_key, _) = index(observed);
    for (k, t) in tracks.iter_mut() {
        crate::restarts::settle(t, by_key.get(k), now);
    }
    let actions = decide(p, observed, tracks, now);
    let mut pass = Pass::default();
    for a in &actions {
        if let Action::Restart { id, key } = a {
            let c = observed.iter().find(|c| &c.uuid == id).unwrap();
            let finished = ended_at(p, key, id, now);
            let t = crate::restarts::restarted(
                tracks.get(key),
                c,
                finished,
                now,
                shown_restarts(p, key),
            );
            tracks.insert(key.clone(), t);
            pass.restarted.insert(key.clone());
        }
    }
    pass.tracks = tracks.clone();
    let s = step(p, observed, &pass, now);
    (actions, s)
}

fn cond(s: &PodStatus, type_: &str) -> String {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
        .status
        .clone()
}

/// Zun's view of the container: `Stopped` with this run's exit, or running; `updated_at` is
/// what Zun changes whenever zun-compute acts on it.
fn run_state(status: &str, updated: &str) -> ZunContainer {
    let mut c = zc(
        "z1",
        Role::Main,
        "c",
        status,
        Some(if status == zs::STOPPED {
            "Exited(137) 1 second ago"
        } else {
            "Up 1 second"
        }),
    );
    c.updated_at = Some(updated.into());
    c
}

#[test]
fn restarts_follow_the_kubelets_back_off_at_each_moment() {
    let t0 = t("2026-12-01T05:00:00Z");
    let s = |n: i64| t0 + jiff::SignedDuration::from_secs(n);
    let mut p = pod("Always", &[], &["c"]);
    let mut tracks = BTreeMap::new();
    let key = (Role::Main, "c".to_string());
    let (_, st) = provider_pass(&mut p, &[run_state(zs::RUNNING, "u0")], &mut tracks, t0);
    assert_eq!(cond(&st, "Ready"), "True");

    // First crash: restarted in the same pass, shown running with restartCount 1 and Ready.
    let (a, st) = provider_pass(&mut p, &[run_state(zs::STOPPED, "u1")], &mut tracks, s(5));
    assert!(matches!(&a[..], [Action::Restart { .. }]), "{a:?}");
    let cs = &st.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.restart_count, 1);
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert!(cs.ready);
    let last = cs.last_state.as_ref().unwrap().terminated.clone().unwrap();
    assert_eq!(last.exit_code, 137);
    assert_eq!(last.finished_at.unwrap().0, s(5));
    assert_eq!(cond(&st, "Ready"), "True");
    assert_eq!(cond(&st, "ContainersReady"), "True");

    // Zun still lists the ended run (its start is asynchronous): that is no new crash, the
    // container stays running and Ready, and nothing is sent.
    let (a, st) = provider_pass(
        &mut p,
        &[run_state(zs::STOPPED, "u1")],
        &mut tracks,
        s(5) + jiff::SignedDuration::from_millis(200),
    );
    assert!(a.is_empty(), "{a:?}");
    let cs = &st.container_statuses.as_ref().unwrap()[0];
    assert!(cs.state.as_ref().unwrap().running.is_some(), "{cs:?}");
    assert_eq!(cs.restart_count, 1);
    assert_eq!(cond(&st, "Ready"), "True");
    // zun-compute takes the start (its task saves the container, still `Stopped`): the same.
    let mut busy = run_state(zs::STOPPED, "u1b");
    busy.task_state = Some("container_starting".into());
    let (a, st) = provider_pass(
        &mut p,
        &[busy],
        &mut tracks,
        s(5) + jiff::SignedDuration::from_millis(400),
    );
    assert!(a.is_empty(), "{a:?}");
    assert!(
        st.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .running
            .is_some()
    );
    assert_eq!(cond(&st, "Ready"), "True");
    // Zun shows it running.
    let (_, st) = provider_pass(&mut p, &[run_state(zs::RUNNING, "u2")], &mut tracks, s(6));
    let started = st.container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap()
        .running
        .unwrap()
        .started_at
        .unwrap()
        .0;
    assert_eq!(started, s(5), "the run started when the start was sent");

    // Second crash at 20 s: CrashLoopBackOff for 10 s, not Ready, then restarted.
    let crash = |p: &mut Pod, at: i64, wait: i64, n: i32, tracks: &mut BTreeMap<Key, Track>| {
        let stopped = run_state(zs::STOPPED, &format!("crash-{n}"));
        let (a, st) = provider_pass(p, std::slice::from_ref(&stopped), tracks, s(at));
        assert!(a.is_empty(), "restart {n} waits: {a:?}");
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        let w = cs.state.as_ref().unwrap().waiting.clone().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(
            w.message.as_deref(),
            Some(
                format!("back-off {wait}s restarting failed container=c pod=p_ns(uid-1)").as_str()
            )
        );
        assert_eq!(cs.restart_count, n - 1);
        assert!(!cs.ready);
        assert_eq!(cond(&st, "Ready"), "False");
        assert_eq!(cond(&st, "ContainersReady"), "False");
        assert_eq!(st.phase.as_deref(), Some("Running"));
        let fin = cs.last_state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!(fin.finished_at.unwrap().0, s(at));
        // A pass just before the back-off ends changes nothing (same status, same finish).
        let (a, st2) = provider_pass(p, std::slice::from_ref(&stopped), tracks, s(at + wait - 1));
        assert!(a.is_empty());
        assert_eq!(st2.container_statuses, st.container_statuses);
        let (a, st) = provider_pass(p, std::slice::from_ref(&stopped), tracks, s(at + wait));
        assert!(
            matches!(&a[..], [Action::Restart { .. }]),
            "restart {n}: {a:?}"
        );
        let cs = &st.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, n);
        assert!(cs.state.as_ref().unwrap().running.is_some());
        let _ = provider_pass(
            p,
            &[run_state(zs::RUNNING, &format!("up-{n}"))],
            tracks,
            s(at + wait + 1),
        );
    };
    crash(&mut p, 20, 10, 2, &mut tracks);
    crash(&mut p, 40, 20, 3, &mut tracks);
    crash(&mut p, 70, 40, 4, &mut tracks);
    assert_eq!(tracks[&key].backoff.unwrap().delay.as_secs(), 80);

    // A run of more than 10 min after its restart (at 110 s): the next crash restarts at once.
    let (a, st) = provider_pass(
        &mut p,
        &[run_state(zs::STOPPED, "late")],
        &mut tracks,
        s(110 + 601),
    );
    assert!(matches!(&a[..], [Action::Restart { .. }]), "{a:?}");
    assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 5);
    assert_eq!(tracks[&key].backoff.unwrap().delay.as_secs(), 10);
}

#[test]
fn create_back_off_doubles_to_five_minutes() {
    assert_eq!(backoff(0), jiff::SignedDuration::ZERO);
    assert_eq!(backoff(1), jiff::SignedDuration::from_secs(10));
    assert_eq!(backoff(3), jiff::SignedDuration::from_secs(40));
    assert_eq!(backoff(30), jiff::SignedDuration::from_secs(300));
}

#[test]
fn init_containers_run_in_order() {
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Always", &["a", "b"], &["c"]);
    assert_eq!(
        decide(&p, &[], &BTreeMap::new(), now),
        vec![Action::CreateInit(0)]
    );
    let a_run = zc("za", Role::Init, "a", zs::RUNNING, Some("Up"));
    assert!(decide(&p, std::slice::from_ref(&a_run), &BTreeMap::new(), now).is_empty());
    let s = step(&mut p, std::slice::from_ref(&a_run), &Pass::default(), now);
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(
        state(&s, 0).waiting.unwrap().reason.as_deref(),
        Some("PodInitializing")
    );
    let a_done = zc("za", Role::Init, "a", zs::STOPPED, Some("Exited(0) now"));
    assert_eq!(
        decide(&p, std::slice::from_ref(&a_done), &BTreeMap::new(), now),
        vec![Action::CreateInit(1)]
    );
    let b_done = zc("zb", Role::Init, "b", zs::STOPPED, Some("Exited(0) now"));
    let both = vec![a_done.clone(), b_done.clone()];
    assert_eq!(
        decide(&p, &both, &BTreeMap::new(), now),
        vec![Action::CreateMain(vec!["c".into()])]
    );
    let mut all = both.clone();
    all.push(zc("zc", Role::Main, "c", zs::RUNNING, Some("Up")));
    let s = step(&mut p, &all, &Pass::default(), now);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let init = s.init_container_statuses.unwrap();
    assert_eq!(init.len(), 2);
    assert_eq!(
        init[1]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("Completed")
    );
    let initialized = s
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Initialized")
        .unwrap();
    assert_eq!(initialized.status, "True");
}

#[test]
fn failed_init_container_with_never_fails_the_pod() {
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Never", &["a"], &["c"]);
    let a = zc("za", Role::Init, "a", zs::STOPPED, Some("Exited(2) now"));
    assert!(decide(&p, std::slice::from_ref(&a), &BTreeMap::new(), now).is_empty());
    let s = step(&mut p, std::slice::from_ref(&a), &Pass::default(), now);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    // OnFailure restarts it instead.
    let p2 = pod("OnFailure", &["a"], &["c"]);
    assert!(matches!(
        decide(&p2, std::slice::from_ref(&a), &BTreeMap::new(), now)[..],
        [Action::Restart { .. }]
    ));
}

#[test]
fn container_deleted_behind_our_back_fails_the_pod() {
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Always", &[], &["c"]);
    let run = zc("z1", Role::Main, "c", zs::RUNNING, Some("Up"));
    step(&mut p, std::slice::from_ref(&run), &Pass::default(), now);
    let actions = decide(&p, &[], &BTreeMap::new(), now);
    let [Action::Fail(reason, msg)] = &actions[..] else {
        panic!("{actions:?}");
    };
    assert_eq!(reason, PROVIDER_FAILED);
    assert!(
        msg.contains("z1") && msg.contains("deleted outside Kubernetes"),
        "{msg}"
    );
    let pass = Pass {
        failure: Some((reason.clone(), msg.clone())),
        ..Default::default()
    };
    let s = step(&mut p, &[], &pass, now);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some(PROVIDER_FAILED));
    assert_eq!(
        state(&s, 0).terminated.unwrap().reason.as_deref(),
        Some("ContainerStatusUnknown")
    );
    // Terminal: nothing more is done, the status stays.
    assert!(decide(&p, &[], &BTreeMap::new(), now).is_empty());
    assert_eq!(render(&p, &[], &Pass::default(), "x", now), s);
}

#[test]
fn image_errors_wait_with_a_reason() {
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Always", &[], &["c"]);
    let mut bad = zc("z1", Role::Main, "c", zs::ERROR, None);
    bad.status_reason = Some("Image missing:1 could not be found.".into());
    let s = step(&mut p, std::slice::from_ref(&bad), &Pass::default(), now);
    let w = state(&s, 0).waiting.unwrap();
    assert_eq!(w.reason.as_deref(), Some("ErrImagePull"));
    assert!(w.message.unwrap().contains("could not be found"));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let mut pass = Pass::default();
    pass.create_errors.insert(
        (Role::Main, "c".into()),
        ("CreateContainerError".into(), "Quota exceeded".into()),
    );
    let p2 = pod("Always", &[], &["c"]);
    let s = render(&p2, &[], &pass, "x", now);
    assert_eq!(
        s.container_statuses.unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .message
            .as_deref(),
        Some("Quota exceeded")
    );
}

#[test]
fn deletion_stops_then_deletes() {
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Always", &[], &["c", "d"]);
    p.metadata.deletion_timestamp = Some(Time(now));
    p.metadata.deletion_grace_period_seconds = Some(7);
    let run = zc("z1", Role::Main, "c", zs::RUNNING, Some("Up"));
    let stopped = zc("z2", Role::Main, "d", zs::STOPPED, Some("Exited(0) now"));
    let actions = decide(&p, &[run.clone(), stopped], &BTreeMap::new(), now);
    assert_eq!(
        actions,
        vec![
            Action::Stop {
                id: "z1".into(),
                grace_s: 7
            },
            Action::Delete { id: "z2".into() }
        ]
    );
    let mut stopping = run;
    stopping.task_state = Some("container_stopping".into());
    assert!(
        decide(&p, &[stopping], &BTreeMap::new(), now).is_empty(),
        "a stop in progress is not repeated"
    );
}

#[test]
fn duplicates_from_a_lost_create_are_removed() {
    let now = t("2026-12-01T05:00:00Z");
    let p = pod("Always", &[], &["c"]);
    let a = zc("z1", Role::Main, "c", zs::RUNNING, Some("Up"));
    let mut b = zc("z2", Role::Main, "c", zs::CREATED, None);
    b.created_at = Some("2026-12-01T05:00:01.000000".into());
    assert_eq!(
        decide(&p, &[b, a], &BTreeMap::new(), now),
        vec![Action::Delete { id: "z2".into() }]
    );
}

#[test]
fn zun_times_parse() {
    assert_eq!(
        zun_time(Some("2026-12-01T05:00:00.000000")),
        Some(t("2026-12-01T05:00:00Z"))
    );
    assert_eq!(
        zun_time(Some("2026-12-01T05:00:00+00:00")),
        Some(t("2026-12-01T05:00:00Z"))
    );
    assert_eq!(zun_time(Some("garbage")), None);
}

#[test]
fn a_container_in_error_is_replaced_not_reported_deleted() {
    let now = t("2026-12-01T05:00:00Z");
    for policy in ["Always", "Never"] {
        let mut p = pod(policy, &[], &["c"]);
        // Recorded while it was being created.
        let creating = zc("z1", Role::Main, "c", zs::CREATING, None);
        let s = step(
            &mut p,
            std::slice::from_ref(&creating),
            &Pass::default(),
            now,
        );
        assert_eq!(
            s.container_statuses.unwrap()[0].container_id.as_deref(),
            Some("zun://z1")
        );
        let mut failed = zc("z1", Role::Main, "c", zs::ERROR, None);
        failed.status_reason = Some("A network with UUID x already exists.".into());
        assert_eq!(
            decide(&p, std::slice::from_ref(&failed), &BTreeMap::new(), now),
            vec![Action::Replace {
                id: "z1".into(),
                key: (Role::Main, "c".into())
            }],
            "{policy}"
        );
        let s = step(&mut p, std::slice::from_ref(&failed), &Pass::default(), now);
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            cs.container_id, None,
            "an id would make its deletion a failure"
        );
        assert!(
            state(&s, 0)
                .waiting
                .unwrap()
                .message
                .unwrap()
                .contains("already exists"),
            "{s:?}"
        );
        // Going, then gone: made again, and the pod has not failed.
        let mut going = failed.clone();
        going.status = zs::DELETING.into();
        let s = step(&mut p, std::slice::from_ref(&going), &Pass::default(), now);
        assert_eq!(s.container_statuses.unwrap()[0].container_id, None);
        assert!(decide(&p, std::slice::from_ref(&going), &BTreeMap::new(), now).is_empty());
        assert_eq!(
            decide(&p, &[], &BTreeMap::new(), now),
            vec![Action::CreateMain(vec!["c".into()])],
            "{policy}"
        );
    }
    // An init container in Error is replaced before anything after it runs.
    let p = pod("Always", &["a"], &["c"]);
    let failed = zc("za", Role::Init, "a", zs::ERROR, None);
    assert_eq!(
        decide(&p, &[failed], &BTreeMap::new(), now),
        vec![Action::Replace {
            id: "za".into(),
            key: (Role::Init, "a".into())
        }]
    );
}

#[test]
fn a_running_container_deleted_outside_is_still_reported() {
    // The Replace exception is narrow: a running container whose deletion someone else
    // started keeps its recorded id, so its disappearance still fails the pod.
    let now = t("2026-12-01T05:00:00Z");
    let mut p = pod("Always", &[], &["c"]);
    let run = zc("z1", Role::Main, "c", zs::RUNNING, Some("Up"));
    step(&mut p, std::slice::from_ref(&run), &Pass::default(), now);
    let mut going = run.clone();
    going.status = zs::DELETING.into();
    let s = step(&mut p, std::slice::from_ref(&going), &Pass::default(), now);
    assert_eq!(
        s.container_statuses.unwrap()[0].container_id.as_deref(),
        Some("zun://z1")
    );
    assert!(matches!(
        &decide(&p, &[], &BTreeMap::new(), now)[..],
        [Action::Fail(..)]
    ));
}

#[test]
fn only_pods_in_transition_get_the_fast_poll() {
    let now = t("2026-12-01T05:00:00Z");
    let h = jiff::SignedDuration::from_secs(5);
    let none = BTreeMap::new();
    let key = (Role::Main, "c".to_string());
    let p = pod("Always", &[], &["c"]);
    let with = |status: &str, detail: Option<&str>| zc("z1", Role::Main, "c", status, detail);
    // Steady: running, or nothing made yet → the full pass's list only.
    assert!(!in_transition(
        &p,
        &[with(zs::RUNNING, Some("Up"))],
        &none,
        now,
        h
    ));
    assert!(!in_transition(&p, &[], &none, now, h));
    // Being created, created and not started, restarting, deleted to be made again.
    for st in [zs::CREATING, zs::CREATED, zs::RESTARTING, zs::DELETING] {
        assert!(in_transition(&p, &[with(st, None)], &none, now, h), "{st}");
    }
    // Zun busy with it (a stop or start under way).
    let mut stopping = with(zs::RUNNING, Some("Up"));
    stopping.task_state = Some("container_stopping".into());
    assert!(in_transition(&p, &[stopping], &none, now, h));
    // Exited with a restart due now (first crash) → yes.
    let exited = with(zs::STOPPED, Some("Exited(1) 1 second ago"));
    assert!(in_transition(
        &p,
        std::slice::from_ref(&exited),
        &none,
        now,
        h
    ));
    // In back-off: only when it ends within the horizon.
    let mut backing: BTreeMap<Key, Track> = BTreeMap::new();
    backing.insert(
        key.clone(),
        Track {
            backoff: Some(crate::restarts::Entry {
                delay: jiff::SignedDuration::from_secs(40),
                last_update: now,
            }),
            starting: None,
            restarts: 1,
        },
    );
    // The run ended at `now`, as the status recorded it.
    let mut p = p.clone();
    p.status = Some(
        serde_json::from_value(json!({"phase": "Running", "containerStatuses": [{
            "name": "c", "image": "busybox", "ready": false, "restartCount": 1,
            "containerID": "zun://z1",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-12-01T05:00:00Z",
                                         "containerID": "zun://z1"}}}]}))
        .unwrap(),
    );
    assert!(!in_transition(
        &p,
        std::slice::from_ref(&exited),
        &backing,
        now,
        h
    ));
    assert!(in_transition(
        &p,
        std::slice::from_ref(&exited),
        &backing,
        now + jiff::SignedDuration::from_secs(36),
        h
    ));
    // A restart sent that Zun has not shown.
    let mut starting = backing.clone();
    starting.get_mut(&key).unwrap().starting = Some(crate::restarts::Starting {
        since: now,
        seen: (None, None),
    });
    assert!(in_transition(
        &p,
        std::slice::from_ref(&exited),
        &starting,
        now,
        h
    ));
    // Exited for good (Never; or Succeeded, terminal) → no.
    let never = pod("Never", &[], &["c"]);
    assert!(!in_transition(
        &never,
        std::slice::from_ref(&exited),
        &none,
        now,
        h
    ));
    let mut done = pod("Always", &[], &["c"]);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert!(!in_transition(
        &done,
        &[with(zs::CREATING, None)],
        &none,
        now,
        h
    ));
    // Being deleted: while any container is left.
    let mut going = pod("Always", &[], &["c"]);
    going.metadata.deletion_timestamp = Some(Time(now));
    assert!(in_transition(
        &going,
        &[with(zs::RUNNING, Some("Up"))],
        &none,
        now,
        h
    ));
    assert!(!in_transition(&going, &[], &none, now, h));
}

#[test]
fn restart_count_survives_a_stale_pod_read() {
    let t0 = t("2026-12-01T05:00:00Z");
    let s = |n: i64| t0 + jiff::SignedDuration::from_secs(n);
    let mut p = pod("Always", &[], &["c"]);
    let mut tracks = BTreeMap::new();
    provider_pass(&mut p, &[run_state(zs::RUNNING, "u0")], &mut tracks, t0);
    let before_first = p.clone();
    let (a, st) = provider_pass(&mut p, &[run_state(zs::STOPPED, "u1")], &mut tracks, s(5));
    assert!(matches!(&a[..], [Action::Restart { .. }]), "{a:?}");
    assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 1);
    provider_pass(&mut p, &[run_state(zs::RUNNING, "u2")], &mut tracks, s(6));
    // The next passes read the pod as it was before the first restart (the watch lags, or the
    // write with restartCount 1 lost to an older one): the count must not fall back.
    let mut stale = before_first.clone();
    let (_, st) = provider_pass(
        &mut stale,
        &[run_state(zs::RUNNING, "u2")],
        &mut tracks,
        s(7),
    );
    assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 1);
    // The second crash, read on that old pod: the back-off (10 s) is shown with count 1,
    // and the restart after it makes 2.
    let mut stale = before_first;
    let (a, st) = provider_pass(
        &mut stale,
        &[run_state(zs::STOPPED, "u3")],
        &mut tracks,
        s(30),
    );
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 1);
    let (a, st) = provider_pass(
        &mut stale,
        &[run_state(zs::STOPPED, "u3")],
        &mut tracks,
        s(40),
    );
    assert!(matches!(&a[..], [Action::Restart { .. }]), "{a:?}");
    assert_eq!(st.container_statuses.as_ref().unwrap()[0].restart_count, 2);
}

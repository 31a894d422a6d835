use super::*;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn c(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("img".into()),
        ..Default::default()
    }
}

fn pod(policy: &str, inits: &[&str], mains: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!inits.is_empty()).then(|| inits.iter().map(|n| c(n)).collect()),
            containers: mains.iter().map(|n| c(n)).collect(),
            ..Default::default()
        }),
        status: None,
    }
}

fn obs(id: &str, role: Role, name: &str, attempt: i32, run: Run, fin: Option<i64>) -> Observed {
    Observed {
        id: id.into(),
        role,
        name: name.into(),
        attempt,
        run,
        started_at: Some(t(0)),
        finished_at: fin.map(t),
        message: None,
    }
}

fn exited(code: i32) -> Run {
    Run::Exited { code, oom: false }
}

#[test]
fn init_containers_run_one_at_a_time_before_the_others() {
    let p = pod("Always", &["a", "b"], &["main"]);
    assert_eq!(decide(&p, &[], t(0)), vec![Action::StartInit(0, 0)]);
    let a_running = obs("1", Role::Init, "a", 0, Run::Running, None);
    assert_eq!(decide(&p, &[a_running], t(1)), vec![]);
    let a_done = obs("1", Role::Init, "a", 0, exited(0), Some(2));
    assert_eq!(
        decide(&p, std::slice::from_ref(&a_done), t(3)),
        vec![Action::StartInit(1, 0)]
    );
    let b_done = obs("2", Role::Init, "b", 0, exited(0), Some(4));
    assert_eq!(
        decide(&p, &[a_done, b_done], t(5)),
        vec![Action::StartMain("main".into(), 0)]
    );
}

#[test]
fn a_failed_init_container_is_retried_unless_never() {
    let failed = obs("1", Role::Init, "a", 0, exited(3), Some(10));
    let p = pod("Always", &["a"], &["main"]);
    assert_eq!(
        decide(&p, std::slice::from_ref(&failed), t(10)),
        vec![Action::StartInit(0, 1)]
    );
    let never = pod("Never", &["a"], &["main"]);
    assert_eq!(decide(&never, std::slice::from_ref(&failed), t(10)), vec![]);
    let st = render(&never, &[failed], &Extra::default(), "10.0.0.1", t(11));
    assert_eq!(st.phase.as_deref(), Some("Failed"));
}

#[test]
fn restarts_follow_the_kubelet_back_off() {
    let p = pod("Always", &[], &["main"]);
    // First exit: restarted at once.
    let run0 = obs("1", Role::Main, "main", 0, exited(1), Some(100));
    assert_eq!(
        decide(&p, std::slice::from_ref(&run0), t(100)),
        vec![Action::StartMain("main".into(), 1)]
    );
    // Second exit (restart count 1): 10 s later, not before.
    let run1 = obs("2", Role::Main, "main", 1, exited(1), Some(200));
    assert_eq!(decide(&p, &[run0.clone(), run1.clone()], t(209)), vec![]);
    assert_eq!(
        decide(&p, &[run0.clone(), run1.clone()], t(210)),
        vec![Action::StartMain("main".into(), 2)]
    );
    // Then 20, 40, ... capped at 300 s.
    assert_eq!(restart_at(t(0), 2), t(20));
    assert_eq!(restart_at(t(0), 3), t(40));
    assert_eq!(restart_at(t(0), 6), t(300));
    assert_eq!(restart_at(t(0), 30), t(300));
    // While waiting: CrashLoopBackOff, the run that ended as lastState, restartCount 1.
    let st = render(&p, &[run0, run1], &Extra::default(), "10.0.0.1", t(205));
    let cs = &st.container_statuses.unwrap()[0];
    assert_eq!(cs.restart_count, 1);
    let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(w.message.as_deref().unwrap().contains("back-off 10s"));
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 1);
    assert_eq!(last.container_id.as_deref(), Some("docker://2"));
    assert_eq!(st.phase.as_deref(), Some("Running"));
}

#[test]
fn older_runs_are_removed_keeping_the_previous_one() {
    let p = pod("Always", &[], &["main"]);
    let r0 = obs("a", Role::Main, "main", 0, exited(1), Some(1));
    let r1 = obs("b", Role::Main, "main", 1, exited(1), Some(2));
    let r2 = obs("c", Role::Main, "main", 2, Run::Running, None);
    assert_eq!(
        decide(&p, &[r0, r1.clone(), r2.clone()], t(3)),
        vec![Action::Remove("a".into())]
    );
    // The previous run is lastState of the running one.
    let st = render(&p, &[r1, r2], &Extra::default(), "h", t(3));
    let cs = &st.container_statuses.unwrap()[0];
    assert_eq!(cs.restart_count, 2);
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert_eq!(
        cs.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .container_id
            .as_deref(),
        Some("docker://b")
    );
}

#[test]
fn a_job_pod_completes_with_its_exit_code_and_message() {
    let p = pod("Never", &["init"], &["job"]);
    let i = obs("1", Role::Init, "init", 0, exited(0), Some(1));
    let mut j = obs("2", Role::Main, "job", 0, exited(0), Some(5));
    j.message = Some("all done".into());
    assert_eq!(decide(&p, &[i.clone(), j.clone()], t(6)), vec![]);
    let st = render(&p, &[i.clone(), j], &Extra::default(), "h", t(6));
    assert_eq!(st.phase.as_deref(), Some("Succeeded"));
    let term = st.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 0);
    assert_eq!(term.reason.as_deref(), Some("Completed"));
    assert_eq!(term.message.as_deref(), Some("all done"));
    let failed = obs("3", Role::Main, "job", 0, exited(2), Some(5));
    let st = render(&p, &[i, failed], &Extra::default(), "h", t(6));
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    let term = st.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (2, Some("Error")));
    // OnFailure retries a failed run, and the pod stays Running meanwhile.
    let of = pod("OnFailure", &[], &["job"]);
    let f = obs("4", Role::Main, "job", 0, exited(2), Some(5));
    assert_eq!(
        decide(&of, std::slice::from_ref(&f), t(5)),
        vec![Action::StartMain("job".into(), 1)]
    );
}

#[test]
fn conditions_and_readiness_follow_the_probes() {
    let p = pod("Always", &[], &["web"]);
    let r = obs("1", Role::Main, "web", 0, Run::Running, None);
    let mut extra = Extra {
        pod_ip: Some("10.244.0.5".into()),
        ..Default::default()
    };
    extra.probes.insert("web".into(), (true, false));
    let st = render(&p, std::slice::from_ref(&r), &extra, "10.244.0.1", t(1));
    let cond = |st: &PodStatus, ty: &str| {
        st.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == ty)
            .unwrap()
            .status
            .clone()
    };
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&st, "PodScheduled"), "True");
    assert_eq!(cond(&st, "Initialized"), "True");
    assert_eq!(cond(&st, "Ready"), "False");
    assert_eq!(cond(&st, "ContainersReady"), "False");
    assert_eq!(st.pod_ip.as_deref(), Some("10.244.0.5"));
    assert_eq!(st.host_ip.as_deref(), Some("10.244.0.1"));
    assert!(st.start_time.is_some());
    extra.probes.insert("web".into(), (true, true));
    let st = render(&p, &[r], &extra, "10.244.0.1", t(2));
    assert_eq!(cond(&st, "Ready"), "True");
    assert!(st.container_statuses.unwrap()[0].ready);
}

#[test]
fn a_pod_being_deleted_stops_then_removes_everything() {
    let mut p = pod("Always", &[], &["main"]);
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(7);
    let r = obs("1", Role::Main, "main", 0, Run::Running, None);
    let e = obs("2", Role::Main, "main", 0, exited(0), Some(1));
    assert_eq!(
        on_delete(&p, &[r, e]),
        vec![Action::Stop("1".into(), 7), Action::Remove("2".into())]
    );
    assert!(on_delete(&p, &[]).is_empty());
}

#[test]
fn a_main_container_waits_while_init_containers_run() {
    let p = pod("Always", &["a"], &["main"]);
    let a = obs("1", Role::Init, "a", 0, Run::Running, None);
    let st = render(&p, &[a], &Extra::default(), "h", t(1));
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    let w = st.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(w.reason.as_deref(), Some("PodInitializing"));
}

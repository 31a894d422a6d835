use super::*;
use serde_json::json;

fn container(v: serde_json::Value) -> Container {
    serde_json::from_value(v).expect("container")
}

/// A fake clock: `t(n)` is `n` seconds after a fixed start.
fn t(n: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + n).expect("time")
}

fn spec(kind: Kind, initial: i64, period: i64, success: i32, failure: i32) -> ProbeSpec {
    ProbeSpec {
        kind,
        handler: Handler::Exec(vec!["true".into()]),
        initial_delay_s: initial,
        period_s: period,
        timeout_s: 1,
        success_threshold: success,
        failure_threshold: failure,
        grace_s: None,
    }
}

fn fail() -> Outcome {
    Outcome::Failure("boom".into())
}

fn kinds(v: &[ProbeSpec]) -> Vec<Kind> {
    v.iter().map(|s| s.kind).collect()
}

#[test]
fn defaults_and_named_ports_are_resolved() {
    let c = container(json!({"name": "c", "image": "busybox",
        "ports": [{"name": "web", "containerPort": 8080}],
        "livenessProbe": {"httpGet": {"port": "web", "path": "healthz",
            "httpHeaders": [{"name": "X-A", "value": "b"}]}, "successThreshold": 5},
        "readinessProbe": {"tcpSocket": {"port": 8080}, "successThreshold": 2,
            "periodSeconds": 3, "timeoutSeconds": 4, "initialDelaySeconds": 7,
            "failureThreshold": 9}}));
    let p = probes_of(&c).expect("valid");
    assert_eq!(p.len(), 2);
    assert_eq!(
        p[0],
        ProbeSpec {
            kind: Kind::Liveness,
            handler: Handler::Http {
                scheme: "http".into(),
                host: None,
                port: 8080,
                path: "/healthz".into(),
                headers: vec![("X-A".into(), "b".into())],
            },
            initial_delay_s: 0,
            period_s: 10,
            timeout_s: 1,
            // Liveness' success threshold is always 1.
            success_threshold: 1,
            failure_threshold: 3,
            grace_s: None,
        }
    );
    assert_eq!(
        (
            p[1].initial_delay_s,
            p[1].period_s,
            p[1].timeout_s,
            p[1].success_threshold,
            p[1].failure_threshold
        ),
        (7, 3, 4, 2, 9)
    );
    assert_eq!(
        p[1].handler,
        Handler::Tcp {
            host: None,
            port: 8080
        }
    );
}

#[test]
fn unsupported_probe_and_hook_fields_are_named() {
    let bad = |v| validate(&container(v)).expect_err("refused").field;
    assert_eq!(
        bad(json!({"name": "c", "livenessProbe": {"grpc": {"port": 9}}})),
        "livenessProbe.grpc"
    );
    assert_eq!(
        bad(json!({"name": "c", "readinessProbe": {"httpGet": {"port": "nope"}}})),
        "readinessProbe.httpGet.port"
    );
    assert_eq!(
        bad(json!({"name": "c", "lifecycle": {"postStart": {"exec": {"command": ["x"]}}}})),
        "lifecycle.postStart"
    );
    assert_eq!(
        bad(json!({"name": "c", "lifecycle": {"stopSignal": "SIGUSR1"}})),
        "lifecycle.stopSignal"
    );
    let c = container(json!({"name": "c", "lifecycle": {"preStop": {"sleep": {"seconds": 4}}}}));
    assert_eq!(pre_stop(&c), Ok(Some(Handler::Sleep(4))));
}

#[test]
fn commands_run_in_the_container_against_its_own_address() {
    assert_eq!(
        command(
            &Handler::Exec(vec!["cat".into(), "/tmp/x".into()]),
            "10.0.0.5",
            1
        ),
        Some(vec!["cat".to_string(), "/tmp/x".to_string()])
    );
    let http = command(
        &Handler::Http {
            scheme: "http".into(),
            host: None,
            port: 80,
            path: "/it's".into(),
            headers: vec![("A".into(), "b".into())],
        },
        "10.0.0.5",
        3,
    )
    .expect("a command");
    assert_eq!(&http[..2], ["/bin/sh", "-c"]);
    assert!(
        http[2].contains(r"wget -q -O /dev/null -T 3 --no-check-certificate --header 'A: b' 'http://10.0.0.5:80/it'\''s'"),
        "{}",
        http[2]
    );
    assert!(http[2].contains("curl -fsS -k -o /dev/null -m 3 -H 'A: b'"));
    assert!(
        http[2].contains(r"printf '%s\r\n' 'GET /it'\''s HTTP/1.0' 'Host: 10.0.0.5:80' 'A: b' '' | nc -w 3 '10.0.0.5' 80"),
        "{}",
        http[2]
    );
    let tcp = command(
        &Handler::Tcp {
            host: Some("fd00::1".into()),
            port: 5432,
        },
        "10.0.0.5",
        2,
    )
    .expect("a command");
    assert!(tcp[2].contains("nc -z -w 2 'fd00::1' 5432"), "{}", tcp[2]);
    assert_eq!(command(&Handler::Sleep(3), "x", 1), None);
}

#[test]
fn initial_delay_and_period_time_the_checks() {
    let mut p = ContainerProbes::new(&[spec(Kind::Liveness, 5, 10, 1, 3)], t(0));
    assert!(p.start_due(t(4)).is_empty(), "before initialDelaySeconds");
    assert_eq!(p.next_due(), Some(t(5)));
    assert_eq!(kinds(&p.start_due(t(5))), [Kind::Liveness]);
    assert!(p.start_due(t(6)).is_empty(), "one check at a time");
    assert_eq!(p.finish(Kind::Liveness, &Outcome::Success), Verdict::None);
    assert!(
        p.start_due(t(14)).is_empty(),
        "period counts from the check's start"
    );
    assert_eq!(kinds(&p.start_due(t(15))), [Kind::Liveness]);
}

#[test]
fn liveness_kills_after_failure_threshold_consecutive_failures() {
    let mut p = ContainerProbes::new(&[spec(Kind::Liveness, 0, 1, 1, 3)], t(0));
    let mut at = 0;
    let mut step = |p: &mut ContainerProbes, o: Outcome| {
        assert_eq!(p.start_due(t(at)).len(), 1);
        at += 1;
        p.finish(Kind::Liveness, &o)
    };
    assert_eq!(step(&mut p, fail()), Verdict::None);
    assert_eq!(step(&mut p, fail()), Verdict::None);
    // A success resets the count.
    assert_eq!(step(&mut p, Outcome::Success), Verdict::None);
    assert_eq!(step(&mut p, fail()), Verdict::None);
    assert_eq!(step(&mut p, fail()), Verdict::None);
    assert_eq!(
        step(&mut p, fail()),
        Verdict::Kill {
            kind: Kind::Liveness,
            grace_s: None
        }
    );
    assert!(p.killed() && p.started() && !p.ready());
    assert!(p.start_due(t(100)).is_empty(), "no checks after the kill");
}

#[test]
fn readiness_needs_success_threshold_and_drops_after_failure_threshold() {
    let mut p = ContainerProbes::new(&[spec(Kind::Readiness, 0, 1, 2, 2)], t(0));
    assert!(
        p.started() && !p.ready(),
        "not ready before the first success"
    );
    let mut at = 0;
    let mut step = |p: &mut ContainerProbes, o: Outcome| {
        assert_eq!(p.start_due(t(at)).len(), 1);
        at += 1;
        p.finish(Kind::Readiness, &o)
    };
    assert_eq!(step(&mut p, Outcome::Success), Verdict::None);
    assert_eq!(step(&mut p, Outcome::Success), Verdict::Ready(true));
    assert!(p.ready());
    assert_eq!(step(&mut p, Outcome::Success), Verdict::None);
    assert_eq!(step(&mut p, fail()), Verdict::None);
    assert!(p.ready(), "one failure is below the threshold");
    assert_eq!(step(&mut p, fail()), Verdict::Ready(false));
    assert_eq!(step(&mut p, Outcome::Success), Verdict::None);
    assert_eq!(step(&mut p, Outcome::Success), Verdict::Ready(true));
    assert!(!p.killed(), "readiness never kills");
}

#[test]
fn without_probes_the_container_is_started_and_ready() {
    let p = ContainerProbes::new(&[], t(0));
    assert!(p.started() && p.ready());
    assert_eq!(p.next_due(), None);
}

#[test]
fn startup_gates_liveness_and_readiness_and_kills_when_it_fails() {
    let specs = [
        spec(Kind::Startup, 0, 1, 1, 2),
        spec(Kind::Liveness, 0, 1, 1, 1),
        spec(Kind::Readiness, 0, 1, 1, 1),
    ];
    let mut p = ContainerProbes::new(&specs, t(0));
    assert!(!p.started() && !p.ready());
    assert_eq!(kinds(&p.start_due(t(0))), [Kind::Startup]);
    assert_eq!(p.finish(Kind::Startup, &fail()), Verdict::None);
    assert_eq!(kinds(&p.start_due(t(1))), [Kind::Startup]);
    assert_eq!(p.finish(Kind::Startup, &Outcome::Success), Verdict::Started);
    assert!(p.started() && !p.ready());
    assert_eq!(
        kinds(&p.start_due(t(2))),
        [Kind::Liveness, Kind::Readiness],
        "startup stops, the others begin"
    );
    assert_eq!(
        p.finish(Kind::Readiness, &Outcome::Success),
        Verdict::Ready(true)
    );
    assert_eq!(
        p.finish(Kind::Liveness, &fail()),
        Verdict::Kill {
            kind: Kind::Liveness,
            grace_s: None
        }
    );

    let mut q = ContainerProbes::new(&specs, t(0));
    q.start_due(t(0));
    assert_eq!(q.finish(Kind::Startup, &fail()), Verdict::None);
    q.start_due(t(1));
    assert!(matches!(
        q.finish(Kind::Startup, &fail()),
        Verdict::Kill {
            kind: Kind::Startup,
            ..
        }
    ));
    assert!(!q.started());
}

#[test]
fn a_result_arriving_after_the_kill_changes_nothing() {
    let specs = [
        spec(Kind::Liveness, 0, 1, 1, 1),
        spec(Kind::Readiness, 0, 1, 1, 1),
    ];
    let mut p = ContainerProbes::new(&specs, t(0));
    assert_eq!(p.start_due(t(0)).len(), 2);
    assert!(matches!(
        p.finish(Kind::Liveness, &fail()),
        Verdict::Kill { .. }
    ));
    assert_eq!(p.finish(Kind::Readiness, &Outcome::Success), Verdict::None);
    assert!(!p.ready());
}

#[test]
fn the_stop_after_a_hook_gets_the_rest_of_the_grace_period_and_at_least_two_seconds() {
    assert_eq!(remaining_grace(30, 5), 25);
    assert_eq!(remaining_grace(30, 40), 2);
    assert_eq!(remaining_grace(0, 0), 2);
}

#[test]
fn an_errored_check_counts_neither_way() {
    // failureThreshold 1: a single failure would kill; errors (Zun slow or refusing) must not.
    let mut p = ContainerProbes::new(
        &[
            spec(Kind::Liveness, 0, 1, 1, 1),
            spec(Kind::Readiness, 0, 1, 1, 1),
        ],
        t(0),
    );
    assert_eq!(p.start_due(t(0)).len(), 2);
    assert_eq!(
        p.finish(Kind::Readiness, &Outcome::Success),
        Verdict::Ready(true)
    );
    let errored = Outcome::Errored("Zun's exec did not answer within 11s".into());
    assert_eq!(p.finish(Kind::Liveness, &errored), Verdict::None);
    assert_eq!(p.start_due(t(1)).len(), 2, "both checked again next period");
    assert_eq!(p.finish(Kind::Readiness, &errored), Verdict::None);
    assert!(!p.killed() && p.ready(), "an error keeps the last result");
    assert_eq!(
        p.finish(Kind::Liveness, &fail()),
        Verdict::Kill {
            kind: Kind::Liveness,
            grace_s: None
        },
        "a real failure still counts"
    );
}

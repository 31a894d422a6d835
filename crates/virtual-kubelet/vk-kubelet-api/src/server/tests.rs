use super::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerState as K8sState, ContainerStateRunning, ContainerStateWaiting,
    ContainerStatus, PodSpec, PodStatus,
};

fn pod(state: Option<K8sState>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            container_statuses: state.map(|s| {
                vec![ContainerStatus {
                    name: "c".into(),
                    state: Some(s),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn container_states_from_the_pod() {
    assert_eq!(container_state(&pod(None), "x"), ContainerState::NotInSpec);
    assert_eq!(
        container_state(&pod(None), "c"),
        ContainerState::Waiting("ContainerCreating".into())
    );
    let waiting = K8sState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("ErrImagePull".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        container_state(&pod(Some(waiting)), "c"),
        ContainerState::Waiting("ErrImagePull".into())
    );
    let running = K8sState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    };
    assert_eq!(
        container_state(&pod(Some(running)), "c"),
        ContainerState::Running
    );
}

#[test]
fn exit_codes_on_the_error_channel() {
    let cmd = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
    assert_eq!(
        exit_status(Some(0), &cmd),
        json!({"metadata": {}, "status": "Success"})
    );
    let f = exit_status(Some(3), &cmd);
    assert_eq!(f["status"], "Failure");
    assert_eq!(f["reason"], "NonZeroExitCode");
    assert_eq!(
        f["details"]["causes"][0],
        json!({"reason": "ExitCode", "message": "3"})
    );
}

#[test]
fn follow_sends_each_line_once() {
    let mut cursor = None;
    let a = "2026-12-01T05:00:00.1Z one\n2026-12-01T05:00:00.12Z two\n";
    assert_eq!(
        new_lines(a, &mut cursor),
        vec![
            "2026-12-01T05:00:00.1Z one\n",
            "2026-12-01T05:00:00.12Z two\n"
        ]
    );
    // The next read (since a whole second) repeats both and adds one.
    let b = "2026-12-01T05:00:00.1Z one\n2026-12-01T05:00:00.12Z two\n2026-12-01T05:00:01Z three\n";
    assert_eq!(
        new_lines(b, &mut cursor),
        vec!["2026-12-01T05:00:01Z three\n"]
    );
    // Two lines with the same stamp: the second is new only once.
    let c = "2026-12-01T05:00:01Z three\n2026-12-01T05:00:01Z four\n";
    assert_eq!(
        new_lines(c, &mut cursor),
        vec!["2026-12-01T05:00:01Z four\n"]
    );
    assert!(new_lines(c, &mut cursor).is_empty());
}

#[test]
fn protocols_in_server_preference() {
    let mut h = HeaderMap::new();
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        "v4.channel.k8s.io, v5.channel.k8s.io".parse().unwrap(),
    );
    assert_eq!(offered_protocol(&h), Some("v5.channel.k8s.io"));
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        "v4.channel.k8s.io".parse().unwrap(),
    );
    assert_eq!(offered_protocol(&h), Some("v4.channel.k8s.io"));
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        "channel.k8s.io".parse().unwrap(),
    );
    assert_eq!(offered_protocol(&h), None);
}

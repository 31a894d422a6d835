//! End to end: the kubelet API of `openstack-operator virtual-kubelet` (a process) on pods
//! running in the test cloud's real Zun, through kube-rs's kubelet client
//! (`Client::kubelet_node_logs` / `kubelet_node_exec` / `kubelet_node_attach` /
//! `kubelet_node_portforward`: the
//! kubelet's own paths, with kube-rs's `AttachedProcess` speaking the WebSocket
//! `v5.channel.k8s.io` protocol kubectl speaks), as the API server reaches a kubelet.
//!
//! Identities: the node trusts a client CA made here (`--client-ca-file`) and serves a
//! certificate signed by it (`--tls-cert-file`), which the clients verify. The emulator's
//! TokenReview and SubjectAccessReview answer from rules set here: the API server's client
//! certificate (`kube-apiserver-kubelet-client`) may do anything on this node, the token of
//! `viewer` may only read `nodes/stats` and `nodes/metrics` (metrics-server's rights). A real cluster (`E2E_KUBECONFIG`) has no such rules
//! to set, so there these tests say so and do nothing.

use crate::vk_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use e2e::wait::{Check, wait_for};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, LogParams, PostParams};
use kube::core::kubelet_debug::KubeletDebugParams;
use kube::{Client, ResourceExt};
use kube_emulator::review::{AllowRule, AuthConfig, ReviewUser};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vk_common::{Case, LONG, POLL, Vk, case, phase};

/// The user of the API server's kubelet client certificate (kubeadm's name).
const APISERVER_USER: &str = "kube-apiserver-kubelet-client";
const VIEWER_TOKEN: &str = "viewer-token";
/// The token of the API server stand-in (the same user as its client certificate).
const APISERVER_TOKEN: &str = "apiserver-token";
/// How long a stream may take to deliver what the test waits for.
const STREAM: Duration = Duration::from_secs(60);

/// The certificates of one node: a CA, the node's serving certificate for 127.0.0.1 and the
/// API server's client certificate, as PEM files in `dir`.
struct Pki {
    dir: PathBuf,
    ca_der: Vec<u8>,
}

impl Pki {
    fn make(dir: &Path) -> anyhow::Result<Self> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "e2e-kubelet-ca");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let leaf = |cn: &str, sans: Vec<String>, purpose: ExtendedKeyUsagePurpose, name: &str| {
            let key = KeyPair::generate()?;
            let mut p = CertificateParams::new(sans)?;
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![purpose];
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            let cert = p.signed_by(&key, &issuer)?;
            std::fs::write(dir.join(format!("{name}.crt")), cert.pem())?;
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem())?;
            anyhow::Ok(())
        };
        leaf(
            "127.0.0.1",
            vec!["127.0.0.1".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "serving",
        )?;
        leaf(
            APISERVER_USER,
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
            "client",
        )?;
        std::fs::write(dir.join("ca.crt"), ca.pem())?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            ca_der: ca.der().to_vec(),
        })
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// The node's flags.
    fn flags(&self) -> Vec<String> {
        vec![
            "--client-ca-file".into(),
            self.path("ca.crt"),
            "--tls-cert-file".into(),
            self.path("serving.crt"),
            "--tls-private-key-file".into(),
            self.path("serving.key"),
        ]
    }
}

/// Who talks to the kubelet port.
enum As<'a> {
    /// The API server's client certificate.
    ApiServer,
    /// A bearer token.
    Token(&'a str),
    /// Nobody.
    Anonymous,
}

/// A kube-rs client whose cluster URL is the node's kubelet port.
fn kubelet_client(vk: &Vk, pki: &Pki, who: As<'_>) -> anyhow::Result<Client> {
    let mut cfg = kube::Config::new(format!("https://127.0.0.1:{}", vk.kubelet_port).parse()?);
    cfg.root_cert = Some(vec![pki.ca_der.clone()]);
    match who {
        As::ApiServer => {
            cfg.auth_info.client_certificate = Some(pki.path("client.crt"));
            cfg.auth_info.client_key = Some(pki.path("client.key"));
        }
        As::Token(t) => cfg
            .headers
            .push((http::header::AUTHORIZATION, format!("Bearer {t}").parse()?)),
        As::Anonymous => {}
    }
    Ok(Client::try_from(cfg)?)
}

/// Starts the node with its certificates and sets the emulator's review rules; `None` (and
/// a message) on a real cluster.
fn start_node(c: &Case) -> anyhow::Result<Option<(Vk, Pki)>> {
    let Some(emu) = c.target.emulator() else {
        eprintln!(
            "SKIPPED: the kubelet API tests set TokenReview/SubjectAccessReview rules, which only the emulator takes"
        );
        return Ok(None);
    };
    emu.set_auth(AuthConfig {
        tokens: [
            (
                VIEWER_TOKEN.to_string(),
                ReviewUser {
                    username: "viewer".into(),
                    ..Default::default()
                },
            ),
            (
                APISERVER_TOKEN.to_string(),
                ReviewUser {
                    username: APISERVER_USER.into(),
                    ..Default::default()
                },
            ),
        ]
        .into_iter()
        .collect(),
        rules: vec![
            AllowRule {
                subject: APISERVER_USER.into(),
                verbs: vec!["*".into()],
                resource: "nodes".into(),
                subresource: "*".into(),
                name: c.node.clone(),
            },
            // metrics-server's rights.
            AllowRule {
                subject: "viewer".into(),
                verbs: vec!["get".into()],
                resource: "nodes".into(),
                subresource: "stats".into(),
                name: String::new(),
            },
            AllowRule {
                subject: "viewer".into(),
                verbs: vec!["get".into()],
                resource: "nodes".into(),
                subresource: "metrics".into(),
                name: String::new(),
            },
        ],
    });
    let dir = e2e::operator::log_dir(Path::new(vk_common::BIN)).join(format!("pki-{}", c.node));
    let pki = Pki::make(&dir)?;
    let vk = Vk::start_with(&c.target, &c.z, &c.node, &pki.flags())?;
    Ok(Some((vk, pki)))
}

fn at<'a>(c: &'a Case, pod: &'a str) -> KubeletDebugParams<'a> {
    KubeletDebugParams {
        name: pod,
        namespace: &c.ns,
        pod_uid: None,
    }
}

/// The HTTP status of a kube-rs error (API errors and refused upgrades).
fn http_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(
            code,
        )) => Some(code.as_u16()),
        _ => None,
    }
}

/// Logs through the kubelet port (no follow).
async fn logs(
    client: &Client,
    c: &Case,
    pod: &str,
    container: &str,
    lp: &LogParams,
) -> Result<String, kube::Error> {
    let mut r = client.kubelet_node_logs(&at(c, pod), container, lp).await?;
    let mut out = String::new();
    futures::AsyncReadExt::read_to_string(&mut r, &mut out)
        .await
        .map_err(kube::Error::ReadEvents)?;
    Ok(out)
}

/// The container's entry of `/stats/summary`.
fn container_summary<'a>(summary: &'a Value, ns: &str, pod: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["namespace"] == ns && p["podRef"]["name"] == pod)?["containers"]
        .as_array()?
        .first()
}

#[tokio::test]
async fn seed_pod_logs_stats_and_refusals_through_the_kubelet_port() -> anyhow::Result<()> {
    let Some(c) = case("kapi-seed").await? else {
        return Ok(());
    };
    // Clean up whatever the body did, also when it failed or panicked.
    c.guarded(seed_body(&c)).await
}

async fn seed_body(c: &Case) -> anyhow::Result<()> {
    let Some((vk, pki)) = start_node(c)? else {
        return Ok(());
    };
    // The seed's example pod as the repository ships it, in this test's namespace and node.
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/virtual-kubelet/seed-pod.yaml");
    let mut pod: Pod = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)
        .with_context(|| format!("parsing {}", file.display()))?;
    pod.metadata.namespace = Some(c.ns.clone());
    pod.spec.as_mut().context("spec")?.node_name = Some(c.node.clone());
    let (name, container) = ("myapp-pod", "myapp-container");
    assert_eq!(pod.name_any(), name);
    c.pods().create(&PostParams::default(), &pod).await?;
    c.wait_pod(name, "the seed pod to run", &vk, |s| phase(s) == "Running")
        .await?;

    let admin = kubelet_client(&vk, &pki, As::ApiServer)?;
    let text = wait_for(
        LONG,
        POLL,
        "the greeting through the kubelet port",
        async || {
            let l = logs(&admin, c, name, container, &LogParams::default()).await?;
            Ok(if l.contains("Hello Kubernetes!") {
                Check::Done(l)
            } else {
                Check::Pending(format!("{l:?}"))
            })
        },
    )
    .await
    .with_context(|| vk.log_tail())?;
    assert_eq!(text, "Hello Kubernetes!\n");
    // timestamps: Docker's RFC 3339 stamp, then the line.
    let stamped = logs(
        &admin,
        c,
        name,
        container,
        &LogParams {
            timestamps: true,
            ..Default::default()
        },
    )
    .await?;
    let (stamp, line) = stamped.split_once(' ').context("a timestamp")?;
    let stamp: jiff::Timestamp = stamp.parse().with_context(|| format!("{stamped:?}"))?;
    assert_eq!(line, "Hello Kubernetes!\n");
    let age = jiff::Timestamp::now().duration_since(stamp);
    assert!(
        age.as_secs() >= 0 && age.as_secs() < 600,
        "{stamped:?} is not this run's line"
    );

    // /stats/summary as metrics-server reads it: the running
    // container's memory from Zun.
    let viewer = kubelet_client(&vk, &pki, As::Token(VIEWER_TOKEN))?;
    let ns = c.ns.clone();
    let summary = wait_for(
        LONG,
        POLL,
        "the pod's memory in /stats/summary",
        async || {
            let s: Value = viewer
                .request(http::Request::get("/stats/summary").body(Vec::new())?)
                .await?;
            let ws = container_summary(&s, &ns, name)
                .and_then(|c| c["memory"]["workingSetBytes"].as_u64())
                .unwrap_or(0);
            Ok(if ws > 0 {
                Check::Done(s)
            } else {
                Check::Pending(s.to_string())
            })
        },
    )
    .await
    .with_context(|| vk.log_tail())?;
    let cs = container_summary(&summary, &c.ns, name).context("the container")?;
    assert_eq!(cs["name"], container);
    let ws = cs["memory"]["workingSetBytes"].as_u64().unwrap_or(0);
    // busybox's sh and sleep: more than nothing, far less than the 512 MiB default.
    assert!(ws > 0 && ws < 512 << 20, "workingSetBytes {ws}");
    assert_eq!(summary["node"]["nodeName"], c.node.as_str());
    let resource = viewer
        .request_text(http::Request::get("/metrics/resource").body(Vec::new())?)
        .await?;
    let series = format!(
        "container_memory_working_set_bytes{{container=\"{container}\",namespace=\"{}\",pod=\"{name}\"}} ",
        c.ns
    );
    let value: f64 = resource
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{series} in:\n{resource}"))?;
    assert!(value > 0.0, "{value}");

    // The kubelet's refusals: a token without nodes/proxy is 403, nobody is 401.
    let denied = logs(&viewer, c, name, container, &LogParams::default())
        .await
        .expect_err("the viewer may not read logs");
    assert_eq!(http_status(&denied), Some(403), "{denied}");
    assert!(
        denied
            .to_string()
            .contains("user=viewer, verb=get, resource=nodes, subresource=proxy"),
        "{denied}"
    );
    let denied = viewer
        .kubelet_node_exec(&at(c, name), container, ["true"], &AttachParams::default())
        .await
        .err()
        .context("the viewer may not exec")?;
    assert_eq!(http_status(&denied), Some(403), "{denied}");
    for who in [As::Anonymous, As::Token("not-a-token")] {
        let nobody = kubelet_client(&vk, &pki, who)?;
        let e = logs(&nobody, c, name, container, &LogParams::default())
            .await
            .expect_err("unauthenticated");
        assert_eq!(http_status(&e), Some(401), "{e}");
        let e = nobody
            .request_text(http::Request::get("/stats/summary").body(Vec::new())?)
            .await
            .expect_err("unauthenticated");
        assert_eq!(http_status(&e), Some(401), "{e}");
    }
    // The kubelet's 404s.
    let e = logs(&admin, c, "no-such-pod", container, &LogParams::default())
        .await
        .expect_err("no such pod");
    assert_eq!(http_status(&e), Some(404), "{e}");
    assert!(
        e.to_string().contains("pod \"no-such-pod\" does not exist"),
        "{e}"
    );
    let e = logs(&admin, c, name, "nope", &LogParams::default())
        .await
        .expect_err("no such container");
    assert_eq!(http_status(&e), Some(404), "{e}");
    Ok(())
}

#[tokio::test]
async fn exec_returns_output_and_exit_code_and_takes_stdin() -> anyhow::Result<()> {
    let Some(c) = case("kapi-exec").await? else {
        return Ok(());
    };
    // Clean up whatever the body did, also when it failed or panicked.
    c.guarded(exec_body(&c)).await
}

async fn exec_body(c: &Case) -> anyhow::Result<()> {
    let Some((vk, pki)) = start_node(c)? else {
        return Ok(());
    };
    c.create(
        "shell",
        json!({"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}),
    )
    .await?;
    c.wait_pod("shell", "the pod to run", &vk, |s| phase(s) == "Running")
        .await?;
    let admin = kubelet_client(&vk, &pki, As::ApiServer)?;
    let pod = at(c, "shell");

    // Non-interactive (kubectl exec without -i): Zun's execute; the exit code comes on the
    // error channel as the kubelet's Status.
    let ap = AttachParams::default().stderr(false);
    let mut p = admin
        .kubelet_node_exec(&pod, "c", ["sh", "-c", "echo hi; exit 3"], &ap)
        .await
        .with_context(|| vk.log_tail())?;
    let mut out = String::new();
    p.stdout()
        .context("stdout")?
        .read_to_string(&mut out)
        .await?;
    let status = p
        .take_status()
        .context("status")?
        .await
        .context("a status")?;
    assert_eq!(out, "hi\n", "{status:?}");
    assert_eq!(status.status.as_deref(), Some("Failure"), "{status:?}");
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    let cause = status
        .details
        .and_then(|d| d.causes)
        .and_then(|c| c.into_iter().next())
        .context("a cause")?;
    assert_eq!(
        (cause.reason.as_deref(), cause.message.as_deref()),
        (Some("ExitCode"), Some("3"))
    );
    let mut ok = admin
        .kubelet_node_exec(&pod, "c", ["cat", "/proc/1/cmdline"], &ap)
        .await?;
    let mut out = String::new();
    ok.stdout()
        .context("stdout")?
        .read_to_string(&mut out)
        .await?;
    let status = ok
        .take_status()
        .context("status")?
        .await
        .context("a status")?;
    assert_eq!(out, "sleep\u{0}3600\u{0}", "it ran in the pod's container");
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

    // Interactive (kubectl exec -it): stdin reaches the process through Zun's interactive
    // execute and zun-wsproxy, and its answer comes back.
    let ap = AttachParams::interactive_tty();
    let mut p = admin
        .kubelet_node_exec(&pod, "c", ["sh", "-c", "read x; echo got:$x"], &ap)
        .await
        .with_context(|| vk.log_tail())?;
    let mut stdin = p.stdin().context("stdin")?;
    let mut stdout = p.stdout().context("stdout")?;
    stdin.write_all(b"ping\n").await?;
    stdin.flush().await?;
    let mut seen = String::new();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(STREAM, async {
        while !seen.contains("got:ping") {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        anyhow::Ok(())
    })
    .await
    .with_context(|| format!("waiting for the answer; so far {seen:?}\n{}", vk.log_tail()))??;
    if !seen.contains("got:ping") {
        let status = p.take_status().context("status")?.await;
        anyhow::bail!("the session ended with {seen:?} and status {status:?}");
    }
    // The process has exited: the stream ends with the node's status.
    drop(stdin);
    let status = tokio::time::timeout(STREAM, p.take_status().context("status")?)
        .await
        .context("the session to end")?
        .context("a status")?;
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

    // What the node refuses: exec into a container the pod lacks (404). Port-forward, attach
    // and TTY resizes: `streams_*` below.
    let e = admin
        .kubelet_node_exec(&pod, "nope", ["true"], &AttachParams::default())
        .await
        .err()
        .context("no such container")?;
    assert_eq!(http_status(&e), Some(404), "{e}");
    Ok(())
}

#[tokio::test]
async fn logs_follow_tail_and_limit_on_a_pod_printing_every_second() -> anyhow::Result<()> {
    let Some(c) = case("kapi-follow").await? else {
        return Ok(());
    };
    // Clean up whatever the body did, also when it failed or panicked.
    c.guarded(follow_body(&c)).await
}

async fn follow_body(c: &Case) -> anyhow::Result<()> {
    let Some((vk, pki)) = start_node(c)? else {
        return Ok(());
    };
    const LINES: usize = 15;
    // The ticker starts printing only once the stream is open (a file the test makes through
    // exec): how long Zun takes to report the container running then cannot decide how many
    // lines were printed before the follow began (under load, 13 of 15 once).
    c.create(
        "ticker",
        json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
            "command": ["sh", "-c", format!("while [ ! -e /tmp/go ]; do sleep 0.2; done; i=1; while [ $i -le {LINES} ]; do echo line $i; i=$((i+1)); sleep 1; done")]}]}),
    )
    .await?;
    c.wait_pod("ticker", "the pod to run", &vk, |s| phase(s) == "Running")
        .await?;
    let admin = kubelet_client(&vk, &pki, As::ApiServer)?;
    let before = logs(&admin, c, "ticker", "c", &LogParams::default())
        .await?
        .lines()
        .count();
    assert_eq!(before, 0, "the ticker printed before it was told to");
    let follow = LogParams {
        follow: true,
        ..Default::default()
    };
    let stream = admin
        .kubelet_node_logs(&at(c, "ticker"), "c", &follow)
        .await
        .with_context(|| vk.log_tail())?;
    let mut go = admin
        .kubelet_node_exec(
            &at(c, "ticker"),
            "c",
            ["touch", "/tmp/go"],
            &AttachParams::default().stderr(false),
        )
        .await
        .with_context(|| vk.log_tail())?;
    let status = tokio::time::timeout(STREAM, go.take_status().context("status")?)
        .await
        .context("the go signal's exec to end")?
        .context("a status")?;
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");
    let mut lines = stream.lines();
    let mut got: Vec<String> = Vec::new();
    // Lines printed after the stream opened that arrived while the container still ran.
    let mut streamed = Vec::new();
    let pods = c.pods();
    let ended = tokio::time::timeout(Duration::from_secs(LINES as u64) + STREAM, async {
        while let Some(line) = lines.next().await {
            let line = line?;
            let s = pods.get("ticker").await?.status.unwrap_or_default();
            if got.len() >= before && phase(&s) == "Running" {
                streamed.push(line.clone());
            }
            got.push(line);
        }
        anyhow::Ok(())
    })
    .await;
    ended.with_context(|| format!("the stream did not end; got {got:?}\n{}", vk.log_tail()))??;
    // Every line once, in order, up to the last.
    let want: Vec<String> = (1..=LINES).map(|i| format!("line {i}")).collect();
    assert!(
        !got.is_empty() && want.ends_with(&got),
        "followed {got:?}, want a suffix of {want:?}"
    );
    // Lines came while the container was still running (streamed, not read at the end),
    // and the stream closed once it had stopped.
    assert!(
        streamed.len() >= 3,
        "{streamed:?} of {got:?} came while the container ran ({before} were there before)"
    );
    let s = pods.get("ticker").await?.status.unwrap_or_default();
    assert_ne!(phase(&s), "Running", "the stream ended while the pod ran");

    // After the end: tailLines, limitBytes and timestamps on the whole log.
    let all = logs(&admin, c, "ticker", "c", &LogParams::default()).await?;
    assert_eq!(
        all,
        want.iter().map(|l| format!("{l}\n")).collect::<String>()
    );
    let tail = logs(
        &admin,
        c,
        "ticker",
        "c",
        &LogParams {
            tail_lines: Some(3),
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(
        tail,
        format!("line {}\nline {}\nline {LINES}\n", LINES - 2, LINES - 1)
    );
    let limited = logs(
        &admin,
        c,
        "ticker",
        "c",
        &LogParams {
            limit_bytes: Some(10),
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(limited, "line 1\nlin");
    let stamped = logs(
        &admin,
        c,
        "ticker",
        "c",
        &LogParams {
            tail_lines: Some(2),
            timestamps: true,
            ..Default::default()
        },
    )
    .await?;
    let stamps: Vec<jiff::Timestamp> = stamped
        .lines()
        .map(|l| {
            let (t, rest) = l.split_once(' ').context("a timestamp")?;
            anyhow::ensure!(rest.starts_with("line "), "{l:?}");
            Ok(t.parse::<jiff::Timestamp>()?)
        })
        .collect::<anyhow::Result<_>>()
        .with_context(|| format!("{stamped:?}"))?;
    assert_eq!(stamps.len(), 2, "{stamped:?}");
    // The pod sleeps a second between lines: the stamps are Docker's, not the node's.
    assert!(stamps[1] > stamps[0], "{stamped:?}");
    Ok(())
}

/// Reads `from` until what was read contains `want` (or the stream ends), within [`STREAM`].
async fn read_until(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    want: &str,
    seen: &mut String,
) -> anyhow::Result<bool> {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(STREAM, async {
        while !seen.contains(want) {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return anyhow::Ok(false);
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        Ok(true)
    })
    .await
    .with_context(|| format!("waiting for {want:?}; so far {seen:?}"))?
}

/// Asks the shell on `stdin` for its terminal size (`stty size`) until it answers
/// `rows cols`: a resize sent on the terminal-size channel is applied by Zun while the shell
/// runs, so the first answers may still be the old size.
async fn until_size(
    stdin: &mut (impl tokio::io::AsyncWrite + Unpin),
    stdout: &mut (impl tokio::io::AsyncRead + Unpin),
    rows: u16,
    cols: u16,
) -> anyhow::Result<()> {
    let want = format!("size={rows}x{cols}.");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(STREAM, async {
        while !seen.contains(&want) {
            stdin
                .write_all(b"echo size=$(stty size | tr ' ' x).\n")
                .await?;
            stdin.flush().await?;
            tokio::time::sleep(POLL).await;
            // Whatever the shell has answered so far (nothing yet is not an end).
            if let Ok(n) = tokio::time::timeout(POLL, stdout.read(&mut buf)).await {
                let n = n?;
                anyhow::ensure!(n > 0, "the session ended; it said {seen:?}");
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
        anyhow::Ok(())
    })
    .await
    .with_context(|| format!("waiting for {want:?}; so far {seen:?}"))?
}

/// The Docker endpoint zun-wsproxy attaches through (`[docker] docker_remote_api_host:port`,
/// `127.0.0.1:2375` on the test cloud). A test cloud started before `netns-fwd` forwarded it
/// has nothing there: the test then forwards it to `TEST_CLOUD_DOCKER_HOST` itself while it
/// runs.
struct DockerTcp(Option<std::process::Child>);

impl DockerTcp {
    fn ensure() -> anyhow::Result<Self> {
        if std::net::TcpStream::connect("127.0.0.1:2375").is_ok() {
            return Ok(DockerTcp(None));
        }
        let sock = std::env::var("TEST_CLOUD_DOCKER_HOST")
            .context("TEST_CLOUD_DOCKER_HOST (scripts/test-cloud env)")?;
        let sock = sock.trim_start_matches("unix://").to_string();
        let child = std::process::Command::new("socat")
            .arg("TCP-LISTEN:2375,bind=127.0.0.1,fork,reuseaddr")
            .arg(format!("UNIX-CONNECT:{sock}"))
            .spawn()
            .context("socat (forwarding 127.0.0.1:2375 to Docker for zun-wsproxy's attach)")?;
        let me = DockerTcp(Some(child));
        for _ in 0..100 {
            if std::net::TcpStream::connect("127.0.0.1:2375").is_ok() {
                return Ok(me);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("socat did not listen on 127.0.0.1:2375")
    }
}

impl Drop for DockerTcp {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test]
async fn streams_port_forward_attach_and_tty_resize() -> anyhow::Result<()> {
    let Some(c) = case("kapi-stream").await? else {
        return Ok(());
    };
    // Clean up whatever the body did, also when it failed or panicked.
    c.guarded(streams_body(&c)).await
}

async fn streams_body(c: &Case) -> anyhow::Result<()> {
    let Some((vk, pki)) = start_node(c)? else {
        return Ok(());
    };
    let _docker = DockerTcp::ensure()?;
    // An HTTP server bound to the container's localhost only: port-forward reaches it as
    // the kubelet's does, inside the pod's network namespace.
    c.create(
        "web",
        json!({"containers": [{"name": "c", "image": "busybox",
            "command": ["sh", "-c", "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /www"],
            "ports": [{"containerPort": 8080}]}]}),
    )
    .await?;
    // A process reading its stdin (attach without a TTY) and a shell on a TTY (attach with
    // one, resized).
    c.create(
        "talker",
        json!({"containers": [{"name": "c", "image": "busybox", "stdin": true,
            "command": ["sh", "-c", "while read l; do echo got:$l; done"]}]}),
    )
    .await?;
    for pod in ["web", "talker"] {
        c.wait_pod(pod, "the pod to run", &vk, |s| phase(s) == "Running")
            .await?;
    }
    let admin = kubelet_client(&vk, &pki, As::ApiServer)?;

    // Port-forward (`kubectl port-forward pod/web 8080`): an HTTP request and its answer,
    // through a relay in the container; 9 is a port nothing listens on: its error channel says so.
    let started = std::time::Instant::now();
    let mut pf = admin
        .kubelet_node_portforward(&at(c, "web"), &[8080, 9])
        .await
        .with_context(|| vk.log_tail())?;
    let mut conn = pf.take_stream(8080).context("the stream of 8080")?;
    conn.write_all(b"GET /index.html HTTP/1.0\r\nHost: web\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    tokio::time::timeout(STREAM, conn.read_to_end(&mut answer))
        .await
        .with_context(|| format!("the answer through port-forward\n{}", vk.log_tail()))??;
    let answer = String::from_utf8_lossy(&answer);
    eprintln!("port-forward: an HTTP answer in {:?}", started.elapsed());
    assert!(
        // busybox httpd answers HTTP/1.1 to an HTTP/1.0 request.
        answer.starts_with("HTTP/1.")
            && answer.contains(" 200 OK\r\n")
            && answer.ends_with("\r\n\r\nhello-from-pod\n"),
        "{answer:?}"
    );
    let err = tokio::time::timeout(STREAM, pf.take_error(9).context("the error of 9")?)
        .await
        .context("an error on port 9's channel")?
        .context("an error message")?;
    assert!(
        err.starts_with("error forwarding port 9 to pod web_") && err.contains("127.0.0.1:9"),
        "{err}"
    );
    drop(conn);
    // The forward must end; its result is kube-rs's, not the node's: kube-rs answers the
    // node's Close after closing and reports SendAfterClosing (see crates/virtual-kubelet/vk-kubelet-api/tests/suite/server.rs).
    let _ = tokio::time::timeout(STREAM, pf.join())
        .await
        .context("the port-forward to end")?;

    // Exec with a TTY (`kubectl exec -it web -- sh`): a terminal, resized from the
    // terminal-size channel through Zun's execute_resize.
    let mut p = admin
        .kubelet_node_exec(&at(c, "web"), "c", ["sh"], &AttachParams::interactive_tty())
        .await
        .with_context(|| vk.log_tail())?;
    let mut stdin = p.stdin().context("stdin")?;
    let mut stdout = p.stdout().context("stdout")?;
    let mut resize = p.terminal_size().context("terminal size")?;
    stdin
        .write_all(b"test -t 0 && test -t 1 && echo on-a-terminal\n")
        .await?;
    let mut seen = String::new();
    assert!(
        read_until(&mut stdout, "\non-a-terminal", &mut seen).await?,
        "{seen:?}"
    );
    for (rows, cols) in [(30, 100), (45, 132)] {
        futures::SinkExt::send(
            &mut resize,
            kube::api::TerminalSize {
                width: cols,
                height: rows,
            },
        )
        .await?;
        until_size(&mut stdin, &mut stdout, rows, cols)
            .await
            .with_context(|| vk.log_tail())?;
    }
    stdin.write_all(b"exit\n").await?;
    let status = tokio::time::timeout(STREAM, p.take_status().context("status")?)
        .await
        .context("the session to end")?
        .context("a status")?;
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

    // Attach (`kubectl attach -i talker`): stdin reaches the container's main process and
    // its stdout comes back.
    let ap = AttachParams::default().stdin(true).stderr(false);
    let mut a = admin
        .kubelet_node_attach(&at(c, "talker"), "c", &ap)
        .await
        .with_context(|| vk.log_tail())?;
    let mut stdin = a.stdin().context("stdin")?;
    let mut stdout = a.stdout().context("stdout")?;
    stdin.write_all(b"hello\n").await?;
    let mut seen = String::new();
    assert!(
        read_until(&mut stdout, "got:hello", &mut seen)
            .await
            .with_context(|| vk.log_tail())?,
        "{seen:?}"
    );
    a.abort();

    // `kubectl attach -it` to a `tty: true` shell: `stdin_eof_cp_and_scripts_…` below.
    Ok(())
}

/// The real kubectl (`/usr/bin/kubectl`) forced to SPDY.
async fn kubectl_spdy(
    kubeconfig: &Path,
    ns: &str,
    args: &[&str],
    stdin: &[u8],
) -> anyhow::Result<std::process::Output> {
    kubectl_with(kubeconfig, ns, args, stdin, false).await
}

/// The real kubectl over SPDY or, with `websockets`, its WebSocket (`v5.channel.k8s.io`).
async fn kubectl_with(
    kubeconfig: &Path,
    ns: &str,
    args: &[&str],
    stdin: &[u8],
    websockets: bool,
) -> anyhow::Result<std::process::Output> {
    let ws = if websockets { "true" } else { "false" };
    let mut child = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", ws)
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", ws)
        .arg("-n")
        .arg(ns)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("kubectl")?;
    // Written beside the wait: a kubectl that ends early (refused, or an error it prints)
    // closes its stdin, and the test must then report what it printed, not a broken pipe.
    let mut i = child.stdin.take().context("stdin")?;
    let input = stdin.to_vec();
    let writer = tokio::spawn(async move {
        let r = i.write_all(&input).await;
        drop(i);
        r
    });
    let out = tokio::time::timeout(STREAM, child.wait_with_output())
        .await
        .context("kubectl to finish")??;
    match writer.await? {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => anyhow::ensure!(
            !out.status.success(),
            "kubectl exited 0 without reading all of its stdin: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        r => r?,
    }
    Ok(out)
}

#[tokio::test]
async fn real_kubectl_over_spdy_through_an_api_server_proxy() -> anyhow::Result<()> {
    if !Path::new("/usr/bin/kubectl").exists() {
        eprintln!("SKIPPED: no /usr/bin/kubectl");
        return Ok(());
    }
    let Some(c) = case("kapi-spdy").await? else {
        return Ok(());
    };
    // Clean up whatever the body did, also when it failed or panicked.
    c.guarded(spdy_body(&c)).await
}

async fn spdy_body(c: &Case) -> anyhow::Result<()> {
    let Some((vk, pki)) = start_node(c)? else {
        return Ok(());
    };
    let _docker = DockerTcp::ensure()?;
    c.create(
        "web",
        json!({"containers": [{"name": "c", "image": "busybox",
            "command": ["sh", "-c", "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /www"],
            "ports": [{"containerPort": 8080}]}]}),
    )
    .await?;
    c.wait_pod("web", "the pod to run", &vk, |s| phase(s) == "Running")
        .await?;
    let kubelet: std::net::SocketAddr = format!("127.0.0.1:{}", vk.kubelet_port).parse()?;
    let kubeconfig = kube_emulator::kubelet_proxy::start(
        c.client.clone(),
        kubelet,
        pki.ca_der.clone(),
        APISERVER_TOKEN,
        &pki.dir,
    )
    .await?;
    let started = std::time::Instant::now();
    // Zun's execute interleaves stderr into stdout; the exit code is the error stream's Status.
    let out = kubectl_spdy(
        &kubeconfig,
        &c.ns,
        &[
            "exec",
            "web",
            "-c",
            "c",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    )
    .await?;
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("kubectl exec over SPDY: {:?}", started.elapsed());
    assert!(
        so.contains("out\n") && format!("{so}{se}").contains("err\n"),
        "stdout {so:?} stderr {se:?}\n{}",
        vk.log_tail()
    );
    assert_eq!(out.status.code(), Some(3), "stdout {so:?} stderr {se:?}");

    // stdin (`kubectl exec -i`): through zun-wsproxy, a line typed and its answer read while
    // stdin stays open (closing Zun's session input ends the session), then stdin closed.
    let mut child = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
        .args([
            "-n",
            &c.ns,
            "exec",
            "-i",
            "web",
            "-c",
            "c",
            "--",
            "sh",
            "-c",
            "read x; echo got:$x",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("kubectl exec -i")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut stdout = child.stdout.take().context("stdout")?;
    stdin.write_all(b"ping\n").await?;
    stdin.flush().await?;
    let mut seen = String::new();
    let answered = read_until(&mut stdout, "got:ping", &mut seen)
        .await
        .with_context(|| vk.log_tail())?;
    drop(stdin);
    let status = tokio::time::timeout(STREAM, child.wait())
        .await
        .context("kubectl exec -i to end")??;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).await?;
    }
    assert!(
        answered,
        "stdout {seen:?} stderr {err:?}\n{}",
        vk.log_tail()
    );
    assert_eq!(status.code(), Some(0), "stdout {seen:?} stderr {err:?}");
    eprintln!("kubectl exec -i over SPDY: {:?}", started.elapsed());

    // kubectl port-forward to the pod's localhost-only httpd, fetched with curl.
    let mut pf = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")
        .args(["-n", &c.ns, "port-forward", "web", ":8080"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("kubectl port-forward")?;
    let mut lines = tokio::io::BufReader::new(pf.stdout.take().context("stdout")?);
    let mut line = String::new();
    tokio::time::timeout(STREAM, async {
        use tokio::io::AsyncBufReadExt;
        while !line.contains("Forwarding from 127.0.0.1:") {
            line.clear();
            if lines.read_line(&mut line).await? == 0 {
                break;
            }
        }
        anyhow::Ok(())
    })
    .await
    .context("kubectl port-forward to listen")??;
    let local: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no local port in {line:?}"))?;
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "50",
            &format!("http://127.0.0.1:{local}/index.html"),
        ])
        .output()
        .await
        .context("curl")?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello-from-pod\n",
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        vk.log_tail()
    );
    eprintln!("kubectl port-forward over SPDY: {:?}", started.elapsed());
    let _ = pf.kill().await;
    Ok(())
}

/// 1 MiB of every byte value in a scrambled order (xorshift), Ctrl-C, Ctrl-D, CR and NUL
/// among them: what a TTY would take as signals, line editing or the end of input.
fn binary_mib() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v: Vec<u8> = (0..=255u8).collect();
    while v.len() < 1 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push((x >> 24) as u8);
    }
    v
}

/// Runs `cmd` in `pod` through `api` (kube-rs's `AttachedProcess`, WebSocket
/// `v5.channel.k8s.io`), writes `stdin` and closes it (v5's close signal), and gives what
/// it printed and the node's status.
async fn run_ws(
    api: &kube::Api<Pod>,
    pod: &str,
    cmd: &[&str],
    stdin: Option<&[u8]>,
) -> anyhow::Result<(
    Vec<u8>,
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Status,
)> {
    let ap = AttachParams::default()
        .container("c")
        .stdin(stdin.is_some())
        .stderr(false);
    let mut p = api.exec(pod, cmd.to_vec(), &ap).await?;
    let mut out = p.stdout().context("stdout")?;
    let writer = stdin.map(|data| {
        let mut w = p.stdin().expect("stdin asked for");
        let data = data.to_vec();
        tokio::spawn(async move {
            w.write_all(&data).await?;
            w.shutdown().await?;
            // Dropping the writer is the end of stdin.
            drop(w);
            anyhow::Ok(())
        })
    });
    let mut got = Vec::new();
    tokio::time::timeout(STREAM, out.read_to_end(&mut got))
        .await
        .with_context(|| format!("the output of {cmd:?} to end"))??;
    if let Some(w) = writer {
        w.await??;
    }
    let status = tokio::time::timeout(STREAM, p.take_status().context("status")?)
        .await
        .context("the status")?
        .context("a status")?;
    Ok((got, status))
}

/// The exit code in a node's status (0 for Success).
fn exit_code(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> Option<i32> {
    if s.status.as_deref() == Some("Success") {
        return Some(0);
    }
    s.details
        .as_ref()?
        .causes
        .as_ref()?
        .iter()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))?
        .message
        .as_ref()?
        .parse()
        .ok()
}

/// Three files (one binary) in `dir/in`.
fn three_files(dir: &Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let files = vec![
        ("a.txt".to_string(), b"first file\n".to_vec()),
        ("b.txt".to_string(), b"second\nwith two lines\n".to_vec()),
        ("c.bin".to_string(), binary_mib()[..3000].to_vec()),
    ];
    std::fs::create_dir_all(dir.join("in"))?;
    for (n, data) in &files {
        std::fs::write(dir.join("in").join(n), data)?;
    }
    Ok(files)
}

fn same_files(dir: &Path, files: &[(String, Vec<u8>)]) -> anyhow::Result<()> {
    for (n, data) in files {
        let got = std::fs::read(dir.join(n)).with_context(|| format!("{n} in {dir:?}"))?;
        assert!(
            got == *data,
            "{n}: {} bytes, want {}",
            got.len(),
            data.len()
        );
    }
    Ok(())
}

/// A local `tar` (what kubectl cp does in Go) over `data`.
fn local_tar(args: &[&str], dir: &Path, stdin: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut c = std::process::Command::new("tar")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("tar")?;
    c.stdin.take().context("stdin")?.write_all(stdin)?;
    let out = c.wait_with_output()?;
    anyhow::ensure!(out.status.success(), "tar {args:?}: {:?}", out.status);
    Ok(out.stdout)
}

#[tokio::test]
async fn stdin_eof_cp_and_scripts_over_websocket_and_spdy_and_attach_tty() -> anyhow::Result<()> {
    let Some(c) = case("kapi-stdin").await? else {
        return Ok(());
    };
    // Clean up whatever the body did, also when it failed or panicked.
    c.guarded(stdin_body(&c)).await
}

async fn stdin_body(c: &Case) -> anyhow::Result<()> {
    let Some((vk, pki)) = start_node(c)? else {
        return Ok(());
    };
    let _docker = DockerTcp::ensure()?;
    c.create(
        "box",
        json!({"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}),
    )
    .await?;
    c.create(
        "term",
        // Two words: a one-word `command` gets the image's CMD appended (`sh sh`).
        json!({"containers": [{"name": "c", "image": "busybox", "stdin": true, "tty": true,
            "command": ["sh", "-i"]}]}),
    )
    .await?;
    for pod in ["box", "term"] {
        c.wait_pod(pod, "the pod to run", &vk, |s| phase(s) == "Running")
            .await?;
    }
    let kubelet: std::net::SocketAddr = format!("127.0.0.1:{}", vk.kubelet_port).parse()?;
    let kubeconfig = kube_emulator::kubelet_proxy::start(
        c.client.clone(),
        kubelet,
        pki.ca_der.clone(),
        APISERVER_TOKEN,
        &pki.dir,
    )
    .await?;
    // kube-rs through the API server stand-in: its WebSocket (v5) is passed to the node.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let proxied =
        Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?;
    let pods: kube::Api<Pod> = kube::Api::namespaced(proxied, &c.ns);
    let mib = binary_mib();

    // `cat` and `wc -c` see 1 MiB of binary stdin and its end, byte for byte.
    let started = std::time::Instant::now();
    let (out, status) = run_ws(&pods, "box", &["cat"], Some(&mib))
        .await
        .with_context(|| vk.log_tail())?;
    eprintln!(
        "exec -i cat, 1 MiB both ways over v5: {:?}",
        started.elapsed()
    );
    assert!(
        out == mib,
        "cat gave {} bytes, want {} (first difference at {:?}); {status:?}",
        out.len(),
        mib.len(),
        out.iter().zip(&mib).position(|(a, b)| a != b)
    );
    assert_eq!(exit_code(&status), Some(0), "{status:?}");
    let (out, status) = run_ws(&pods, "box", &["wc", "-c"], Some(&mib)).await?;
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        "1048576",
        "{status:?}"
    );
    // The exit code of a command with stdin comes back.
    let (out, status) = run_ws(
        &pods,
        "box",
        &["sh", "-c", "read l; echo got:$l; exit 4"],
        Some(b"x\n"),
    )
    .await?;
    assert_eq!(out, b"got:x\n");
    assert_eq!(exit_code(&status), Some(4), "{status:?}");

    // `kubectl exec -i box -- sh < script`.
    let script = b"echo one\nx=$((6*7))\necho \"$x\" >&2\nexit 5\n";
    let (out, status) = run_ws(&pods, "box", &["sh"], Some(script)).await?;
    assert_eq!(out, b"one\n42\n", "stderr is merged into stdout");
    assert_eq!(exit_code(&status), Some(5), "{status:?}");

    // `kubectl cp` both ways, as kubectl does it: tar over exec stdin into the pod, tar over
    // exec stdout out of it.
    let tmp = tempfile::tempdir()?;
    let files = three_files(tmp.path())?;
    let archive = local_tar(&["cf", "-", "in"], tmp.path(), b"")?;
    let (_, status) = run_ws(&pods, "box", &["mkdir", "-p", "/data"], None).await?;
    assert_eq!(exit_code(&status), Some(0), "{status:?}");
    let (out, status) = run_ws(
        &pods,
        "box",
        &["tar", "-xmf", "-", "-C", "/data"],
        Some(&archive),
    )
    .await?;
    assert_eq!(exit_code(&status), Some(0), "{status:?} {out:?}");
    let (out, status) =
        run_ws(&pods, "box", &["tar", "cf", "-", "-C", "/data", "in"], None).await?;
    assert_eq!(exit_code(&status), Some(0), "{status:?}");
    let back = tempfile::tempdir()?;
    local_tar(&["xf", "-"], back.path(), &out)?;
    same_files(&back.path().join("in"), &files)?;

    // The same over SPDY: the real kubectl through the stand-in (stdin's end is the SPDY
    // stream's half-close).
    let out = kubectl_spdy(
        &kubeconfig,
        &c.ns,
        &["exec", "-i", "box", "--", "wc", "-c"],
        &mib,
    )
    .await?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1048576",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_spdy(
        &kubeconfig,
        &c.ns,
        &["exec", "-i", "box", "--", "sh"],
        script,
    )
    .await?;
    assert_eq!(out.stdout, b"one\n42\n");
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_spdy(
        &kubeconfig,
        &c.ns,
        &["exec", "-i", "box", "--", "cat"],
        &mib,
    )
    .await?;
    assert!(
        out.stdout == mib,
        "kubectl exec -i cat: {} bytes",
        out.stdout.len()
    );
    let src = tmp.path().join("in");
    let out = kubectl_spdy(
        &kubeconfig,
        &c.ns,
        &["cp", &src.display().to_string(), "box:/data/spdy"],
        b"",
    )
    .await?;
    assert!(
        out.status.success(),
        "kubectl cp in: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dest = tmp.path().join("out");
    let out = kubectl_spdy(
        &kubeconfig,
        &c.ns,
        &["cp", "box:/data/spdy", &dest.display().to_string()],
        b"",
    )
    .await?;
    eprintln!(
        "kubectl cp box:/data/spdy OUT (SPDY): exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubectl cp out: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    same_files(&dest, &files)?;
    // kubectl's own WebSocket (v5, its close signal) passed through to the node.
    let out = kubectl_with(
        &kubeconfig,
        &c.ns,
        &["exec", "-i", "box", "--", "cat"],
        &mib,
        true,
    )
    .await?;
    assert!(
        out.stdout == mib,
        "kubectl exec -i cat over WebSocket: {} bytes, {}",
        out.stdout.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_with(
        &kubeconfig,
        &c.ns,
        &["exec", "-i", "box", "--", "sh"],
        script,
        true,
    )
    .await?;
    assert_eq!(
        (out.stdout.as_slice(), out.status.code()),
        (&b"one\n42\n"[..], Some(5)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ws_dest = tmp.path().join("out-ws");
    let out = kubectl_with(
        &kubeconfig,
        &c.ns,
        &["cp", "box:/data/spdy", &ws_dest.display().to_string()],
        b"",
        true,
    )
    .await?;
    assert!(
        out.status.success(),
        "kubectl cp out (WebSocket): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    same_files(&ws_dest, &files)?;

    // `kubectl attach -it term` to a `tty: true` shell: what is typed is echoed and run.
    let ap = AttachParams::interactive_tty().container("c");
    let mut a = pods
        .attach("term", &ap)
        .await
        .with_context(|| vk.log_tail())?;
    let mut stdin = a.stdin().context("stdin")?;
    let mut stdout = a.stdout().context("stdout")?;
    stdin.write_all(b"echo typed-$((40+2))\n").await?;
    let mut seen = String::new();
    assert!(
        read_until(&mut stdout, "typed-42", &mut seen)
            .await
            .with_context(|| vk.log_tail())?,
        "{seen:?}"
    );
    assert!(
        seen.contains("echo typed-$((40+2))"),
        "the terminal's echo: {seen:?}"
    );
    a.abort();
    Ok(())
}

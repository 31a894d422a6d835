//! What the suite runs against: a Kubernetes API (a real cluster named by `E2E_KUBECONFIG`,
//! else an in-process kube-emulator) and an OpenStack cloud (`OS_CLOUD` in
//! `OS_CLIENT_CONFIG_FILE`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use kube_emulator::{Emulator, EmulatorOptions, Handle};
use openstack::Cloud;
use openstack::adapter::{ClientOptions, CloudSelector, Metrics};

use crate::wait::{Check, wait_for};

/// Field manager of every write the suite makes.
pub const FIELD_MANAGER: &str = "e2e";

/// The OpenStack cloud named by the environment.
#[derive(Clone, Debug)]
pub struct CloudEnv {
    /// `OS_CLOUD`: the entry of `clouds.yaml` to use.
    pub os_cloud: String,
    /// `OS_CLIENT_CONFIG_FILE`: the `clouds.yaml`.
    pub config_file: PathBuf,
    /// `TEST_CLOUD_IMAGE_URL_BASE`: where Glance can download test images from (optional).
    pub image_url_base: Option<String>,
}

impl CloudEnv {
    /// Reads `OS_CLOUD`, `OS_CLIENT_CONFIG_FILE` and `TEST_CLOUD_IMAGE_URL_BASE`; fails with
    /// instructions when the first two are unset.
    pub fn from_env() -> anyhow::Result<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let (Some(os_cloud), Some(file)) = (var("OS_CLOUD"), var("OS_CLIENT_CONFIG_FILE")) else {
            anyhow::bail!(
                "the end-to-end tests need an OpenStack cloud: set OS_CLOUD and OS_CLIENT_CONFIG_FILE \
                 (scripts/test does it; by hand: scripts/test-cloud up && eval \"$(scripts/test-cloud env)\")"
            );
        };
        let config_file = PathBuf::from(file);
        anyhow::ensure!(
            config_file.is_file(),
            "OS_CLIENT_CONFIG_FILE={} does not exist (is the test cloud up? scripts/test-cloud status)",
            config_file.display()
        );
        Ok(CloudEnv {
            os_cloud,
            config_file,
            image_url_base: var("TEST_CLOUD_IMAGE_URL_BASE")
                .map(|u| u.trim_end_matches('/').to_string()),
        })
    }

    /// The URL of a file served to Glance (`$TEST_CLOUD_IMAGE_URL_BASE/<file>`).
    pub fn image_url(&self, file: &str) -> anyhow::Result<String> {
        let base = self.image_url_base.as_deref().context(
            "TEST_CLOUD_IMAGE_URL_BASE is not set (eval \"$(scripts/test-cloud env)\" sets it): no image server for Glance",
        )?;
        Ok(format!("{base}/{file}"))
    }

    /// Connects to the cloud (no client-side rate limit), retrying transient failures for up
    /// to two minutes (a test cloud may still be starting).
    pub async fn connect(&self) -> anyhow::Result<Cloud> {
        let selector = CloudSelector::File {
            path: self.config_file.clone(),
            cloud: self.os_cloud.clone(),
        };
        let options = ClientOptions {
            requests_per_second: 0,
            timeout: Duration::from_secs(60),
            metrics: Metrics::new(),
            ..ClientOptions::default()
        };
        let what = format!(
            "a connection to OpenStack cloud {} ({})",
            self.os_cloud,
            self.config_file.display()
        );
        wait_for(
            Duration::from_secs(120),
            Duration::from_secs(3),
            &what,
            async || match Cloud::connect(&selector, options.clone()).await {
                Ok(c) => Ok(Check::Done(c)),
                Err(e) if e.is_transient() => Ok(Check::Pending(format!("transient error: {e}"))),
                Err(e) => Err(anyhow::anyhow!(e)),
            },
        )
        .await
    }
}

/// The Kubernetes API and OpenStack cloud of a test.
pub struct Target {
    kubeconfig: PathBuf,
    emulator: Option<Handle>,
    _dir: Option<tempfile::TempDir>,
    cloud: CloudEnv,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("kubeconfig", &self.kubeconfig)
            .field("emulated", &self.emulator.is_some())
            .field("cloud", &self.cloud)
            .finish()
    }
}

impl Target {
    /// With `E2E_KUBECONFIG` set, that cluster; otherwise a new in-process kube-emulator (on
    /// the current Tokio runtime) whose kubeconfig is written to a temporary directory. The
    /// cloud comes from [`CloudEnv::from_env`].
    pub async fn from_env() -> anyhow::Result<Self> {
        Self::with_cloud(CloudEnv::from_env()?).await
    }

    /// Like [`Target::from_env`], with `cloud` as the OpenStack side instead of the one the
    /// environment names (a cloud a test booted itself).
    pub async fn with_cloud(cloud: CloudEnv) -> anyhow::Result<Self> {
        if let Some(path) = std::env::var_os("E2E_KUBECONFIG").filter(|v| !v.is_empty()) {
            let kubeconfig = PathBuf::from(path);
            anyhow::ensure!(
                kubeconfig.is_file(),
                "E2E_KUBECONFIG={} does not exist",
                kubeconfig.display()
            );
            return Ok(Target {
                kubeconfig,
                emulator: None,
                _dir: None,
                cloud,
            });
        }
        let dir = tempfile::Builder::new()
            .prefix("e2e-kube-")
            .tempdir()
            .context("creating a temporary directory")?;
        let kubeconfig = dir.path().join("kubeconfig");
        let emulator = Emulator::start(EmulatorOptions {
            kubeconfig_path: Some(kubeconfig.clone()),
            ..EmulatorOptions::default()
        })
        .await
        .context("starting the in-process kube-emulator")?;
        Ok(Target {
            kubeconfig,
            emulator: Some(emulator),
            _dir: Some(dir),
            cloud,
        })
    }

    /// The kubeconfig the operator and the suite use.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Whether this is the in-process emulator (not a shared, real cluster).
    pub fn is_emulated(&self) -> bool {
        self.emulator.is_some()
    }

    /// The emulator's handle (fault hooks), when emulated.
    pub fn emulator(&self) -> Option<&Handle> {
        self.emulator.as_ref()
    }

    /// The OpenStack side.
    pub fn cloud_env(&self) -> &CloudEnv {
        &self.cloud
    }

    /// A new Kubernetes client from the kubeconfig.
    pub async fn client(&self) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// Server-side applies every CRD of `api::all_crds()` and waits until each is Established.
    pub async fn install_crds(&self, timeout: Duration) -> anyhow::Result<()> {
        let client = self.client().await?;
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let all = api::all_crds();
        for crd in &all {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.patch(&name, &params, &Patch::Apply(crd))
                .await
                .with_context(|| format!("applying CRD {name}"))?;
        }
        for crd in &all {
            let name = crd.metadata.name.clone().unwrap_or_default();
            wait_for(
                timeout,
                Duration::from_millis(200),
                &format!("CRD {name} to be Established"),
                async || {
                    let found = crds.get(&name).await?;
                    let conds = found.status.and_then(|s| s.conditions).unwrap_or_default();
                    if conds
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                    {
                        Ok(Check::Done(()))
                    } else {
                        Ok(Check::Pending(format!(
                            "conditions {:?}",
                            conds
                                .iter()
                                .map(|c| (&c.type_, &c.status))
                                .collect::<Vec<_>>()
                        )))
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Whether every CRD of `api::all_crds()` exists already.
    pub async fn crds_installed(&self) -> anyhow::Result<bool> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client().await?);
        for crd in api::all_crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            if crds
                .get_opt(&name)
                .await
                .with_context(|| format!("reading CRD {name}"))?
                .is_none()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A Kubernetes client for the current context of a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    Client::try_from(cfg).context("building a Kubernetes client")
}

/// GET a URL (e.g. a file of the test cloud's image server) and return the body; non-2xx
/// answers are errors.
pub async fn http_get(url: &str) -> anyhow::Result<Vec<u8>> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .no_proxy()
        .build()
        .context("building an HTTP client")?;
    let resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    anyhow::ensure!(status.is_success(), "GET {url} answered {status}");
    Ok(resp
        .bytes()
        .await
        .with_context(|| format!("reading the body of GET {url}"))?
        .to_vec())
}

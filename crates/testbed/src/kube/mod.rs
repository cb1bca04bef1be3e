//! A Kubernetes control plane of the test's own: etcd, `kube-apiserver` (RBAC, the
//! default admission plugins with PodSecurity among them, static bearer tokens) and
//! `kube-controller-manager` (the CronJob and Job controllers, garbage collection, the
//! service-account and TTL-after-finished controllers), each an owned child in one
//! temporary directory (their logs and etcd's data there), on ports picked free a
//! moment before. No kubelet, no scheduler: a pod the Job controller creates stays
//! Pending until something writes its status through the API.
//!
//! The binaries are the ones `scripts/kube-build.sh` builds once from Go modules and
//! caches by version (pinned there): building them stays that script's.
//!
//! `api` is the HTTPS client the test and the readiness checks use; `pki` the CA, the
//! serving certificate, the service-account keys and the tokens.

pub mod api;
pub mod pki;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub use api::{Api, Response};
use pki::Pki;

use crate::observe::{http_get, start_on_free_ports};
use crate::process::{Owned, Spawn, TempDir};

/// The controllers the controller manager runs (its `--controllers`): the CronJob's
/// and the Job's, the garbage collector (a Job's pods, a CronJob's Jobs), the
/// `default` service account of each namespace (the ServiceAccount admission plugin
/// refuses a pod without it) and the cleanup of finished Jobs.
pub const CONTROLLERS: &str = "cronjob-controller,job-controller,garbage-collector-controller,\
                               serviceaccount-controller,ttl-after-finished-controller";

/// The binaries' paths.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub apiserver: PathBuf,
    pub controller_manager: PathBuf,
}

/// The binaries, built once by `scripts/kube-build.sh` (its `NAME=PATH` lines).
pub fn binaries(scripts: &Path) -> crate::Result<Binaries> {
    let out = Command::new(scripts.join("kube-build.sh"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| crate::Error::Tool(format!("scripts/kube-build.sh: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let path = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(PathBuf::from)
    };
    match (
        out.status.success(),
        path("etcd"),
        path("kube-apiserver"),
        path("kube-controller-manager"),
    ) {
        (true, Some(etcd), Some(apiserver), Some(controller_manager)) => Ok(Binaries {
            etcd,
            apiserver,
            controller_manager,
        }),
        _ => Err(crate::Error::Tool(format!(
            "scripts/kube-build.sh could not build the control plane ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))),
    }
}

/// Why the controller manager could not be stopped or started.
#[derive(Debug, thiserror::Error)]
pub enum ControllerManagerError {
    #[error("stopping kube-controller-manager: {0}")]
    Stop(#[source] crate::Error),
    #[error("starting kube-controller-manager: {0}")]
    Start(#[source] std::io::Error),
    #[error("kube-controller-manager is running: stop it first")]
    Running,
}

/// A control plane; its servers stopped (the controller manager, the API server, then
/// etcd: the fields' order) and its directory removed when dropped.
#[derive(Debug)]
pub struct ControlPlane {
    /// `https://127.0.0.1:P`.
    pub url: String,
    /// The CA that signed the API server's certificate.
    pub ca: PathBuf,
    /// A bearer token of a user in `system:masters`.
    pub token: String,
    /// A kubeconfig of that user (`KUBECONFIG=… kubectl …`).
    pub kubeconfig: PathBuf,
    api: Api,
    controller_manager: Owned,
    apiserver: Owned,
    etcd: Owned,
    dir: TempDir,
}

impl ControlPlane {
    /// Starts one (waiting up to `KUBE_START_TIMEOUT` seconds for each server, default
    /// 120) and returns once the API server is ready (`/readyz`) and the controller
    /// manager's controllers run (the `default` namespace's service account exists).
    pub fn start() -> crate::Result<ControlPlane> {
        let limit = std::env::var("KUBE_START_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(120), Duration::from_secs);
        let bin = binaries(&crate::scripts::scripts_dir())?;
        let dir = TempDir::new("kube")?;
        let home = dir.path().to_owned();
        let pki = pki::make(&home)?;

        let (etcd, ports) = start_on_free_ports(
            "etcd",
            2,
            limit,
            Duration::from_millis(200),
            |p| Ok(etcd(&bin.etcd, &home, p[0], p[1])),
            |p| http_get(&format!("127.0.0.1:{}", p[0]), "/readyz").is_ok_and(|(s, _)| s == 200),
        )?;
        let etcd_url = format!("http://127.0.0.1:{}", ports[0]);

        let (apiserver, ports) = start_on_free_ports(
            "kube-apiserver",
            1,
            limit,
            Duration::from_millis(200),
            |p| Ok(apiserver(&bin.apiserver, &home, &pki, &etcd_url, p[0])),
            |p| {
                Api::new(&format!("127.0.0.1:{}", p[0]), &pki.ca, &pki.admin_token)
                    .is_ok_and(|c| c.get("/readyz").is_ok_and(|r| r.status == 200))
            },
        )?;
        let api = Api::new(
            &format!("127.0.0.1:{}", ports[0]),
            &pki.ca,
            &pki.admin_token,
        )?;
        let url = format!("https://127.0.0.1:{}", ports[0]);

        let write = |name: &str, token: &str| {
            let file = home.join(name);
            std::fs::write(&file, pki::kubeconfig(&url, &pki.ca, token))
                .map_err(crate::Error::at(&file))?;
            Ok::<_, crate::Error>(file)
        };
        let kubeconfig = write(
            "controller-manager.kubeconfig",
            &pki.controller_manager_token,
        )?;
        let admin = write("admin.kubeconfig", &pki.admin_token)?;
        let (controller_manager, _) = start_on_free_ports(
            "kube-controller-manager",
            1,
            limit,
            Duration::from_millis(200),
            |p| {
                Ok(controller_manager(
                    &bin.controller_manager,
                    &home,
                    &pki,
                    &kubeconfig,
                    p[0],
                ))
            },
            |_| {
                api.get("/api/v1/namespaces/default/serviceaccounts/default")
                    .is_ok_and(|r| r.status == 200)
            },
        )?;
        Ok(ControlPlane {
            url,
            ca: pki.ca,
            token: pki.admin_token,
            kubeconfig: admin,
            api,
            controller_manager,
            apiserver,
            etcd,
            dir,
        })
    }

    /// A client of the API server as the `system:masters` user.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Its directory (`etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`,
    /// the keys, the kubeconfigs, etcd's data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the controller manager (SIGTERM, its grace, KILL): no controller runs
    /// until [`ControlPlane::start_controller_manager`]; the API server goes on.
    pub fn stop_controller_manager(&mut self) -> Result<(), ControllerManagerError> {
        self.controller_manager
            .stop()
            .map(|_| ())
            .map_err(ControllerManagerError::Stop)
    }

    /// Starts the controller manager again, as it was started (its port, its
    /// flags); returns once its process runs (its controllers start within seconds).
    pub fn start_controller_manager(&mut self) -> Result<(), ControllerManagerError> {
        if self
            .controller_manager
            .try_wait()
            .map_err(ControllerManagerError::Start)?
            .is_none()
        {
            return Err(ControllerManagerError::Running);
        }
        self.controller_manager = self
            .controller_manager
            .spawned()
            .clone()
            .spawn()
            .map_err(ControllerManagerError::Start)?;
        Ok(())
    }

    /// The PIDs of etcd, the API server and the controller manager.
    pub fn pids(&self) -> [u32; 3] {
        [
            self.etcd.id(),
            self.apiserver.id(),
            self.controller_manager.id(),
        ]
    }
}

/// etcd alone, its data in `home/etcd`, listening for clients and peers on ports of
/// ours (its defaults are fixed ports).
fn etcd(bin: &Path, home: &Path, client: u16, peer: u16) -> Spawn {
    let client = format!("http://127.0.0.1:{client}");
    let peer = format!("http://127.0.0.1:{peer}");
    Spawn::new("etcd", bin)
        .arg("--name=test")
        .arg(format!("--data-dir={}", home.join("etcd").display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=test={peer}"))
        .arg("--log-level=warn")
        // The tests' data is thrown away: no fsync to wait for.
        .arg("--unsafe-no-fsync")
        .log(home.join("etcd.log"))
        .grace(Duration::from_secs(10))
}

fn apiserver(bin: &Path, home: &Path, pki: &Pki, etcd: &str, port: u16) -> Spawn {
    let path = |p: &Path| p.display().to_string();
    Spawn::new("kube-apiserver", bin)
        .arg(format!("--etcd-servers={etcd}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!(
            "--cert-dir={}",
            home.join("apiserver-certs").display()
        ))
        .arg(format!("--tls-cert-file={}", path(&pki.serving_cert)))
        .arg(format!("--tls-private-key-file={}", path(&pki.serving_key)))
        .arg(format!("--client-ca-file={}", path(&pki.ca)))
        .arg(format!("--token-auth-file={}", path(&pki.tokens)))
        .arg("--authorization-mode=Node,RBAC")
        .arg(format!("--service-account-key-file={}", path(&pki.sa_pub)))
        .arg(format!(
            "--service-account-signing-key-file={}",
            path(&pki.sa_key)
        ))
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!("--service-cluster-ip-range={}", pki::SERVICE_RANGE))
        .arg("--profiling=false")
        .log(home.join("kube-apiserver.log"))
        .grace(Duration::from_secs(15))
}

fn controller_manager(bin: &Path, home: &Path, pki: &Pki, kubeconfig: &Path, port: u16) -> Spawn {
    let path = |p: &Path| p.display().to_string();
    Spawn::new("kube-controller-manager", bin)
        .arg(format!("--kubeconfig={}", path(kubeconfig)))
        .arg(format!("--authentication-kubeconfig={}", path(kubeconfig)))
        .arg(format!("--authorization-kubeconfig={}", path(kubeconfig)))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!(
            "--cert-dir={}",
            home.join("controller-manager-certs").display()
        ))
        .arg("--leader-elect=false")
        .arg(format!("--controllers={CONTROLLERS}"))
        .arg("--use-service-account-credentials=true")
        .arg(format!("--root-ca-file={}", path(&pki.ca)))
        .arg(format!(
            "--service-account-private-key-file={}",
            path(&pki.sa_key)
        ))
        .arg("--profiling=false")
        .log(home.join("kube-controller-manager.log"))
        .grace(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listener_of_etcd_is_on_a_port_of_ours() {
        let line = etcd(Path::new("etcd"), Path::new("h"), 1001, 1002).command_line();
        assert!(
            line.contains("--listen-client-urls=http://127.0.0.1:1001"),
            "{line}"
        );
        assert!(
            line.contains("--listen-peer-urls=http://127.0.0.1:1002"),
            "{line}"
        );
    }
}

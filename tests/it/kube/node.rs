//! A test node: what a kubelet does for the pods of one namespace, with the job's own
//! binary as every container. It registers a `Node`, binds each pod the Job controller
//! creates to it (`pods/binding`), runs each container as the image's entrypoint would
//! (`booking-expire` with the container's `args`, `$(VAR)` expanded, the environment of
//! its `envFrom` Secrets and its `env`), and writes the pod's status (`pods/status`):
//! Running with each container running, then Succeeded or Failed with each container's
//! exit code, reason and times. A pod given a deletion timestamp (the Job controller at
//! `activeDeadlineSeconds`, an eviction) has its containers stopped as a kubelet stops
//! them: SIGTERM, the pod's grace period, SIGKILL; then its end is reported and the pod
//! removed (a delete with grace 0).
//!
//! A stuck node: pods started while [`Node::stick`] is set have their end reported no
//! sooner than that long after their deletion, whatever their containers did.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use booking_expire_testbed::kube::Api;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

/// The node's name.
pub const NODE: &str = "test-node";

/// How often the node looks at the pods.
const TICK: Duration = Duration::from_millis(250);

/// One container, started.
struct Container {
    name: String,
    child: Child,
    started: DateTime<Utc>,
    /// Its exit and when it was seen.
    ended: Option<(ExitStatus, DateTime<Utc>)>,
}

/// One pod the node runs.
struct Pod {
    name: String,
    containers: Vec<Container>,
    /// When the node saw its deletion timestamp and sent SIGTERM, and its grace.
    terminating: Option<(Instant, Duration)>,
    killed: bool,
    /// How long after its deletion its end may be reported (a stuck node), if set.
    stuck: Option<Duration>,
    reported: bool,
    removed: bool,
}

/// What the test sees of the node.
#[derive(Default)]
struct Shared {
    stick: Option<Duration>,
    /// Each container's exit code, by pod and container, once reported.
    exits: BTreeMap<String, BTreeMap<String, i32>>,
    /// Each container's exit code as the node saw it, reported or not.
    ended: BTreeMap<(String, String), i32>,
    /// What went wrong talking to the API (the test asserts it empty).
    errors: Vec<String>,
}

/// The node; stopped (its containers killed) when dropped.
pub struct Node {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    logs: PathBuf,
}

impl Node {
    /// Registers the node and starts serving the pods of `namespace`.
    pub fn start(api: &Api, namespace: &str) -> Node {
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": NODE },
        });
        let r = api
            .post("/api/v1/nodes", "application/json", &node.to_string())
            .unwrap();
        assert!(
            r.ok() || r.status == 409,
            "the Node: {} {}",
            r.status,
            r.body
        );
        let logs = std::env::temp_dir().join(format!("be-node-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&logs).unwrap();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut kubelet = Kubelet {
            api: api.clone(),
            ns: namespace.to_owned(),
            pods: HashMap::new(),
            shared: shared.clone(),
            logs: logs.clone(),
        };
        let stopping = stop.clone();
        // The containers are children of this thread (their death signal: they die
        // with it), so it lives as long as the node.
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                kubelet.tick();
                // Behaviour: a kubelet's sync period (it lists its pods, starts, stops
                // and reports them every TICK); no test waits on it: each waits for the
                // condition it asserts, through the API.
                std::thread::sleep(TICK);
            }
            for pod in kubelet.pods.values_mut() {
                for c in &mut pod.containers {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                }
            }
        });
        Node {
            shared,
            stop,
            thread: Some(thread),
            logs,
        }
    }

    /// Pods started from now on are stuck: their end is reported `hold` after their
    /// deletion at the soonest; `None` ends that for the pods started next.
    pub fn stick(&self, hold: Option<Duration>) {
        self.shared().stick = hold;
    }

    /// The exit codes of the containers of `pod`, once its end was reported.
    pub fn exits(&self, pod: &str) -> Option<BTreeMap<String, i32>> {
        self.shared().exits.get(pod).cloned()
    }

    /// The exit code of a container of `pod` as soon as the node saw it, reported or not.
    pub fn ended(&self, pod: &str, container: &str) -> Option<i32> {
        self.shared()
            .ended
            .get(&(pod.to_owned(), container.to_owned()))
            .copied()
    }

    /// What a container of a pod wrote (stdout, then stderr).
    pub fn log(&self, pod: &str, container: &str) -> String {
        ["stdout", "stderr"]
            .iter()
            .map(|s| {
                std::fs::read_to_string(self.logs.join(format!("{pod}.{container}.{s}")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The errors the node met talking to the API server.
    pub fn errors(&self) -> Vec<String> {
        self.shared().errors.clone()
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if std::thread::panicking() {
            eprintln!("the test node's container logs: {}", self.logs.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}

/// The node's loop's state.
struct Kubelet {
    api: Api,
    ns: String,
    /// By UID.
    pods: HashMap<String, Pod>,
    shared: Arc<Mutex<Shared>>,
    logs: PathBuf,
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Kubelet {
    fn error(&self, e: String) {
        eprintln!("test node: {e}");
        self.shared.lock().unwrap().errors.push(e);
    }

    fn tick(&mut self) {
        let list = match self
            .api
            .get(&format!("/api/v1/namespaces/{}/pods", self.ns))
        {
            Ok(r) if r.ok() => serde_json::from_str::<Value>(&r.body).unwrap(),
            // The API server away (a test restarting something): next tick.
            _ => return,
        };
        for pod in list["items"].as_array().into_iter().flatten() {
            let uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !self.pods.contains_key(&uid) {
                let phase = pod["status"]["phase"].as_str().unwrap_or_default();
                if phase == "Succeeded" || phase == "Failed" {
                    continue;
                }
                if let Err(e) = self.start(pod, &uid) {
                    self.error(e);
                }
                continue;
            }
            if let Err(e) = self.look(pod, &uid) {
                self.error(e);
            }
        }
    }

    /// Binds the pod, starts its containers, reports it Running.
    fn start(&mut self, pod: &Value, uid: &str) -> Result<(), String> {
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        if pod["spec"]["nodeName"].as_str().is_none() {
            let binding = json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": { "name": name },
                "target": { "apiVersion": "v1", "kind": "Node", "name": NODE },
            });
            let r = self
                .api
                .post(
                    &format!("/api/v1/namespaces/{}/pods/{name}/binding", self.ns),
                    "application/json",
                    &binding.to_string(),
                )
                .map_err(|e| e.to_string())?;
            if !r.ok() {
                return Err(format!("binding {name}: {} {}", r.status, r.body));
            }
        }
        let mut containers = Vec::new();
        for spec in pod["spec"]["containers"].as_array().into_iter().flatten() {
            containers.push(self.run(&name, spec)?);
        }
        let stuck = self.shared.lock().unwrap().stick;
        let mut started = Pod {
            name,
            containers,
            terminating: None,
            killed: false,
            stuck,
            reported: false,
            removed: false,
        };
        self.status(&mut started, false)?;
        self.pods.insert(uid.to_owned(), started);
        Ok(())
    }

    /// One container: the binary with its arguments and environment.
    fn run(&self, pod: &str, spec: &Value) -> Result<Container, String> {
        let name = spec["name"].as_str().unwrap().to_owned();
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        for from in spec["envFrom"].as_array().into_iter().flatten() {
            let secret = from["secretRef"]["name"]
                .as_str()
                .ok_or_else(|| format!("{pod}/{name}: envFrom other than a secretRef"))?;
            env.extend(self.secret(secret)?);
        }
        for var in spec["env"].as_array().into_iter().flatten() {
            let value = var["value"].as_str().unwrap_or_default();
            let value = expand(value, &env);
            env.insert(var["name"].as_str().unwrap().to_owned(), value);
        }
        let args: Vec<String> = spec["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| expand(a.as_str().unwrap(), &env))
            .collect();
        let mut cmd = Command::new(common::BIN);
        let file = |s: &str| {
            std::fs::File::create(self.logs.join(format!("{pod}.{name}.{s}")))
                .map_err(|e| e.to_string())
        };
        common::owned(&mut cmd)
            .args(&args)
            .env_clear()
            .envs(&env)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&self.logs)
            .stdout(file("stdout")?)
            .stderr(file("stderr")?);
        let child = cmd.spawn().map_err(|e| format!("{pod}/{name}: {e}"))?;
        Ok(Container {
            name,
            child,
            started: Utc::now(),
            ended: None,
        })
    }

    /// The decoded data of a Secret of the namespace.
    fn secret(&self, name: &str) -> Result<BTreeMap<String, String>, String> {
        let r = self
            .api
            .get(&format!("/api/v1/namespaces/{}/secrets/{name}", self.ns))
            .map_err(|e| e.to_string())?;
        if !r.ok() {
            return Err(format!("the Secret {name}: {} {}", r.status, r.body));
        }
        let secret: Value = serde_json::from_str(&r.body).map_err(|e| e.to_string())?;
        Ok(secret["data"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let bytes = base64(v.as_str().unwrap_or_default());
                (k.clone(), String::from_utf8(bytes).unwrap_or_default())
            })
            .collect())
    }

    /// A pod already started: its containers' exits, its deletion.
    fn look(&mut self, pod: &Value, uid: &str) -> Result<(), String> {
        let deleting = pod["metadata"]["deletionTimestamp"].is_string();
        let grace = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_u64()
            .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_u64())
            .unwrap_or(30);
        let mut p = self.pods.remove(uid).unwrap();
        let outcome = self.step(&mut p, deleting, grace);
        self.pods.insert(uid.to_owned(), p);
        outcome
    }

    fn step(&mut self, p: &mut Pod, deleting: bool, grace: u64) -> Result<(), String> {
        for c in &mut p.containers {
            if c.ended.is_none()
                && let Some(status) = c.child.try_wait().map_err(|e| e.to_string())?
            {
                c.ended = Some((status, Utc::now()));
                self.shared
                    .lock()
                    .unwrap()
                    .ended
                    .insert((p.name.clone(), c.name.clone()), exit_code(status));
            }
        }
        let all_ended = p.containers.iter().all(|c| c.ended.is_some());
        if deleting && p.terminating.is_none() {
            p.terminating = Some((Instant::now(), Duration::from_secs(grace)));
            for c in p.containers.iter().filter(|c| c.ended.is_none()) {
                common::send_signal(&c.child, "TERM");
            }
        }
        if let Some((since, grace)) = p.terminating
            && !p.killed
            && !all_ended
            && since.elapsed() >= grace
        {
            p.killed = true;
            for c in p.containers.iter_mut().filter(|c| c.ended.is_none()) {
                let _ = c.child.kill();
            }
        }
        if all_ended && !p.reported {
            let held = match (p.stuck, p.terminating) {
                (None, _) => false,
                (Some(hold), Some((since, _))) => since.elapsed() < hold,
                (Some(_), None) => true,
            };
            if !held {
                self.status(p, true)?;
                p.reported = true;
            }
        }
        if p.reported && deleting && !p.removed {
            let r = self
                .api
                .delete(&format!(
                    "/api/v1/namespaces/{}/pods/{}?gracePeriodSeconds=0",
                    self.ns, p.name
                ))
                .map_err(|e| e.to_string())?;
            if !r.ok() && r.status != 404 {
                return Err(format!("deleting {}: {} {}", p.name, r.status, r.body));
            }
            p.removed = true;
        }
        Ok(())
    }

    /// Writes the pod's status: Running, or (`ended`) Succeeded or Failed.
    fn status(&self, p: &mut Pod, ended: bool) -> Result<(), String> {
        let mut codes = BTreeMap::new();
        let statuses: Vec<Value> = p
            .containers
            .iter()
            .map(|c| {
                let state = match c.ended.filter(|_| ended) {
                    None => json!({ "running": { "startedAt": stamp(c.started) } }),
                    Some((status, at)) => {
                        let code = exit_code(status);
                        codes.insert(c.name.clone(), code);
                        json!({ "terminated": {
                            "exitCode": code,
                            "reason": if code == 0 { "Completed" } else { "Error" },
                            "startedAt": stamp(c.started),
                            "finishedAt": stamp(at),
                            "containerID": format!("test://{}", c.child.id()),
                        } })
                    }
                };
                json!({
                    "name": c.name,
                    "image": "registry.example.com/pin/booking-expire:0.1.0",
                    "imageID": "",
                    "containerID": format!("test://{}", c.child.id()),
                    "ready": !ended,
                    "started": !ended,
                    "restartCount": 0,
                    "state": state,
                })
            })
            .collect();
        let phase = match ended {
            false => "Running",
            true if codes.values().all(|&c| c == 0) => "Succeeded",
            true => "Failed",
        };
        let started = p
            .containers
            .iter()
            .map(|c| c.started)
            .min()
            .unwrap_or_else(Utc::now);
        let ready = if ended { "False" } else { "True" };
        let now = stamp(Utc::now());
        let patch = json!({ "status": {
            "phase": phase,
            "startTime": stamp(started),
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "conditions": [
                { "type": "Ready", "status": ready, "lastTransitionTime": now },
                { "type": "ContainersReady", "status": ready, "lastTransitionTime": now },
            ],
            "containerStatuses": statuses,
        } });
        let r = self
            .api
            .patch(
                &format!("/api/v1/namespaces/{}/pods/{}/status", self.ns, p.name),
                "application/strategic-merge-patch+json",
                &patch.to_string(),
            )
            .map_err(|e| e.to_string())?;
        if !r.ok() {
            return Err(format!("the status of {}: {} {}", p.name, r.status, r.body));
        }
        if ended {
            self.shared
                .lock()
                .unwrap()
                .exits
                .insert(p.name.clone(), codes);
        }
        Ok(())
    }
}

/// The code a container runtime reports: the exit code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// `$(NAME)` replaced by the variable's value where it is defined, as the kubelet does.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = text.to_owned();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    out
}

/// Standard base64 (a Secret's `data`).
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = text.bytes().filter_map(value).collect();
    sextets
        .chunks(4)
        .flat_map(|q| {
            let n = q
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &s)| n | u32::from(s) << (18 - 6 * i));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes.into_iter().take(q.len().saturating_sub(1))
        })
        .collect()
}

#[test]
fn base64_decodes_what_a_secret_holds() {
    assert_eq!(base64("cG9zdGdyZXM6Ly94"), b"postgres://x");
    assert_eq!(base64("YQ=="), b"a");
    assert_eq!(base64("YWI="), b"ab");
    let env = BTreeMap::from([("AS_OF".to_owned(), "now".to_owned())]);
    assert_eq!(expand("--as-of=$(AS_OF)", &env), "--as-of=now");
}

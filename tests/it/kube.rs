//! The manifests under Kubernetes' own API server and controllers: a control plane of
//! the test's own (etcd, kube-apiserver, kube-controller-manager, built from Go
//! modules once by scripts/kube-build.sh and started by the testbed crate), no kubelet.
//! `cronjob.yaml` and the operator Jobs of docs/runbooks/operator-jobs.yaml are
//! applied into a namespace that enforces (and warns about) Pod Security
//! "restricted", with strict field validation: the server accepts them without a
//! warning, the CronJob controller creates a Job at the next minute and the Job
//! controller its Pod, admitted and left Pending (nothing runs it).
//!
//! `node` is a test node that runs the pods' containers (the job's own binary) and
//! reports their status as a kubelet would; `scenarios` runs the CronJob's minutes and
//! the operator Jobs on it against the test's database and topic.

use crate::common;

use std::time::Duration;

use booking_expire_testbed::kube::{Api, ControlPlane, Response};
use common::*;
use serde_json::{Value, json};

mod node;
mod scenarios;

const NS: &str = "crm";
/// The Secrets the manifests read: the CronJob's, the operator Jobs', the migrate Job's.
const SECRETS: [&str; 3] = [
    "booking-expire",
    "booking-expire-operator",
    "booking-expire-migrate",
];
/// Server-side apply, the field manager named, unknown or duplicate fields refused.
const APPLY: &str = "fieldManager=booking-expire-it&fieldValidation=Strict";

fn json(r: &Response) -> Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

/// The answer, asserted 2xx and without a warning.
fn accepted(what: &str, r: booking_expire_testbed::Result<Response>) -> Value {
    let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(r.ok(), "{what}: {} {}", r.status, r.body);
    assert!(r.warnings.is_empty(), "{what} warned: {:#?}", r.warnings);
    json(&r)
}

/// The namespace, enforcing and warning about Pod Security "restricted", once its
/// `default` service account exists (the ServiceAccount admission plugin refuses a
/// pod without it; the controller manager makes it).
fn restricted_namespace(api: &Api) {
    let ns = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NS,
            "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        },
    });
    accepted(
        "the namespace",
        api.post("/api/v1/namespaces", "application/json", &ns.to_string()),
    );
    wait_until(
        Duration::from_secs(60),
        "the namespace's default service account",
        || {
            api.get(&format!("/api/v1/namespaces/{NS}/serviceaccounts/default"))
                .is_ok_and(|r| r.status == 200)
        },
    );
}

/// A Secret the manifests read (its keys: docs/guides/deploying.md's), of `data`.
fn secret(api: &Api, name: &str, data: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect();
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": name },
        "type": "Opaque",
        "stringData": data,
    });
    accepted(
        &format!("the Secret {name}"),
        api.post(
            &format!("/api/v1/namespaces/{NS}/secrets"),
            "application/json",
            &secret.to_string(),
        ),
    );
}

/// Applies one YAML document (server-side apply) to `collection` (its API path in the
/// namespace); its name read from its `metadata`.
fn apply(api: &Api, collection: &str, document: &str) -> Value {
    let name = document
        .split_once("\nmetadata:\n  name: ")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("no metadata.name in:\n{document}"));
    accepted(
        &format!("applying {collection}/{name}"),
        api.patch(
            &format!("/apis/batch/v1/namespaces/{NS}/{collection}/{name}?{APPLY}"),
            "application/apply-patch+yaml",
            document,
        ),
    )
}

/// The items of a list in the namespace whose controller (an owner reference with
/// `controller: true`) is the `kind` named `name`.
fn owned_by(api: &Api, list: &str, kind: &str, name: &str) -> Vec<Value> {
    let Ok(r) = api.get(&format!("{list}?limit=500")) else {
        return Vec::new();
    };
    if !r.ok() {
        return Vec::new();
    }
    json(&r)["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| {
            item["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == kind && o["name"] == name && o["controller"] == true)
        })
        .cloned()
        .collect()
}

/// The Pod the Job controller made for the Job `job`, waited for.
fn pod_of(api: &Api, job: &str) -> Value {
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    wait_for(
        Duration::from_secs(60),
        &format!("a Pod of the Job {job}"),
        || owned_by(api, &pods, "Job", job).pop(),
        || {
            api.get(&pods)
                .map(|r| r.body)
                .unwrap_or_else(|e| e.to_string())
        },
    )
}

/// What "no warning" and "accepted" are worth here: a Job whose pod template Pod
/// Security "restricted" refuses is warned about, and a field the schema lacks is
/// refused (dry runs: nothing is stored).
fn checks_bite(api: &Api) {
    let loose = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: loose\nspec:\n  template:\n    \
                 spec:\n      restartPolicy: Never\n      containers:\n        - name: c\n          \
                 image: example.invalid/c\n";
    let dry_run = |document: &str| {
        api.patch(
            &format!("/apis/batch/v1/namespaces/{NS}/jobs/loose?{APPLY}&dryRun=All"),
            "application/apply-patch+yaml",
            document,
        )
        .unwrap()
    };
    let r = dry_run(loose);
    assert!(r.ok(), "{} {}", r.status, r.body);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("would violate PodSecurity \"restricted:latest\"")),
        "{:#?}",
        r.warnings
    );
    let r = dry_run(&loose.replace("restartPolicy", "restartPolicyy"));
    assert!(
        !r.ok() && r.body.contains("restartPolicyy"),
        "{} {}",
        r.status,
        r.body
    );
}

#[test]
fn the_cronjob_makes_a_job_at_the_minute_and_the_job_a_pod_in_a_restricted_namespace() {
    let kube = ControlPlane::start().unwrap_or_else(|e| panic!("a control plane: {e}"));
    let api = kube.api();
    let version = json(&api.get("/version").unwrap());
    assert_eq!(version["minor"], "34", "{version}");

    restricted_namespace(api);
    checks_bite(api);
    let unreachable = [
        (
            "DATABASE_URL",
            "postgres://booking_expire@db.invalid:5432/crm",
        ),
        ("KAFKA_BROKERS", "kafka.invalid:9092"),
    ];
    for name in SECRETS {
        secret(api, name, &unreachable);
    }

    let manifest = std::fs::read_to_string(common::repo().join("cronjob.yaml")).unwrap();
    let cronjob = apply(api, "cronjobs", &manifest);
    assert_eq!(cronjob["spec"]["concurrencyPolicy"], "Forbid");
    let applied = cronjob["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_owned();

    // The operator Jobs: admitted under "restricted" (a pod of each), no warning.
    let runbook =
        std::fs::read_to_string(common::repo().join("docs/runbooks/operator-jobs.yaml")).unwrap();
    let operator_jobs: Vec<String> = runbook
        .split("\n---\n")
        .map(|document| {
            let job = apply(api, "jobs", document);
            job["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(operator_jobs.len(), 4, "{operator_jobs:?}");
    for job in &operator_jobs {
        let pod = pod_of(api, job);
        assert_eq!(pod["status"]["phase"], "Pending", "{pod}");
    }

    // The CronJob controller's Job, at the first minute after the apply (the controller
    // looks every 10 s at most; the minute is at most 60 s away).
    let jobs = format!("/apis/batch/v1/namespaces/{NS}/jobs");
    let job = wait_for(
        Duration::from_secs(100),
        "a Job of the CronJob",
        || owned_by(api, &jobs, "CronJob", "booking-expire").pop(),
        || {
            api.get(&jobs)
                .map(|r| r.body)
                .unwrap_or_else(|e| e.to_string())
        },
    );
    let name = job["metadata"]["name"].as_str().unwrap().to_owned();
    let scheduled =
        job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
            .as_str()
            .unwrap_or_else(|| panic!("no scheduled time on {job}"))
            .to_owned();
    assert!(scheduled.ends_with(":00Z"), "{scheduled}: not at a minute");
    assert!(scheduled > applied, "{scheduled} is not after {applied}");
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 55, "{job}");
    assert_eq!(job["spec"]["backoffLimit"], 0, "{job}");

    let pod = pod_of(api, &name);
    assert_eq!(pod["status"]["phase"], "Pending", "{pod}");
    let containers: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["run-once", "relay-outbox"]);
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false, "{pod}");

    // The CronJob's status names its Job as active and the minute it ran.
    let status = wait_for(
        Duration::from_secs(30),
        "the CronJob's status",
        || {
            let cj = json(
                &api.get(&format!(
                    "/apis/batch/v1/namespaces/{NS}/cronjobs/booking-expire"
                ))
                .ok()?,
            );
            (cj["status"]["lastScheduleTime"] == scheduled.as_str()).then(|| cj["status"].clone())
        },
        String::new,
    );
    let active: Vec<&str> = status["active"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(active, [name.as_str()], "{status}");
}

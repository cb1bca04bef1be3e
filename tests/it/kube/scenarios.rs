//! `cronjob.yaml` and the operator Jobs run by Kubernetes' own controllers, each pod's
//! containers the job's own binary on the test node (`node`), against a database and a
//! topic of the test's own on the suite's PostgreSQL and Kafka. Each scenario asserts
//! the conditions the controllers wrote (the Job's `Complete`, `Failed` and its reason,
//! the CronJob's `lastScheduleTime` and `active`), the containers' exit codes, and what
//! the database and the topic hold. Each runs on a control plane of its own, so the
//! scenarios run side by side; the CronJob's minutes bound them.
//!
//! run-once writes the contract's topic name on each outbox row; a trigger of the
//! test's database points each row at the test's topic as it is written (6 partitions,
//! as the relay expects), so the relay sends the scenario's events there and nowhere
//! else.

use crate::common;
use crate::postgres;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use booking_expire_testbed::kube::ControlPlane;
use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::pushgateway::{JOB, Pushgateway, samples};
use common::*;
use serde_json::Value;
use uuid::Uuid;

use super::node::Node;
use super::{NS, SECRETS, apply, json, owned_by, restricted_namespace, secret};

/// A control plane, a namespace enforcing Pod Security "restricted" with the Secrets
/// the manifests read pointing at the test's database and the suite's Kafka, a topic
/// of the test's own, and the test node serving the namespace's pods.
struct World {
    // Dropped first: the containers stop before their database goes.
    node: Node,
    kube: ControlPlane,
    db: TestDb,
    _reader: ReadOnlyRole,
    brokers: String,
    topic: String,
}

impl World {
    fn new() -> World {
        let kube = ControlPlane::start().unwrap_or_else(|e| panic!("a control plane: {e}"));
        let api = kube.api();
        restricted_namespace(api);
        let db = TestDb::new();
        let brokers = shared_brokers();
        let topic = unique_topic();
        create_topic(&brokers, &topic, 6, &[]);
        db.client()
            .batch_execute(&format!(
                "CREATE FUNCTION crm.to_the_tests_topic() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN NEW.topic := '{topic}'; RETURN NEW; END $$;
                 CREATE TRIGGER to_the_tests_topic BEFORE INSERT ON crm.outbox
                   FOR EACH ROW EXECUTE FUNCTION crm.to_the_tests_topic();"
            ))
            .unwrap();
        let reader = ReadOnlyRole::new(&db);
        let [job, operator, migrate] = SECRETS;
        secret(
            api,
            job,
            &[("DATABASE_URL", &db.url), ("KAFKA_BROKERS", &brokers)],
        );
        secret(
            api,
            operator,
            &[("DATABASE_URL", &reader.url), ("KAFKA_BROKERS", &brokers)],
        );
        secret(api, migrate, &[("DATABASE_URL", &db.url)]);
        let node = Node::start(api, NS);
        World {
            node,
            kube,
            db,
            _reader: reader,
            brokers,
            topic,
        }
    }

    fn api(&self) -> &booking_expire_testbed::kube::Api {
        self.kube.api()
    }

    /// Applies `cronjob.yaml`, after `edit`; returns the CronJob.
    fn cronjob(&self, edit: impl FnOnce(String) -> String) -> Value {
        let manifest = std::fs::read_to_string(common::repo().join("cronjob.yaml")).unwrap();
        apply(self.api(), "cronjobs", &edit(manifest))
    }

    /// The CronJob's Jobs, by their scheduled time.
    fn jobs(&self) -> BTreeMap<String, Value> {
        owned_by(
            self.api(),
            &format!("/apis/batch/v1/namespaces/{NS}/jobs"),
            "CronJob",
            "booking-expire",
        )
        .into_iter()
        .map(|job| (scheduled(&job), job))
        .collect()
    }

    /// The CronJob's Job scheduled at `at`, waited for.
    fn job_at(&self, at: &str, limit: Duration) -> Value {
        wait_for(
            limit,
            &format!("the CronJob's Job of {at}"),
            || self.jobs().remove(at),
            || format!("{:?}", self.jobs().keys().collect::<Vec<_>>()),
        )
    }

    /// The CronJob's first Job, waited for.
    fn first_job(&self) -> Value {
        wait_for(
            Duration::from_secs(100),
            "a Job of the CronJob",
            || self.jobs().into_values().next(),
            String::new,
        )
    }

    fn job(&self, name: &str) -> Value {
        json(
            &self
                .api()
                .get(&format!("/apis/batch/v1/namespaces/{NS}/jobs/{name}"))
                .unwrap(),
        )
    }

    /// The Job `name` once it has the condition `kind` true; the condition.
    fn finished(&self, name: &str, kind: &str, limit: Duration) -> (Value, Value) {
        wait_for(
            limit,
            &format!("the Job {name} {kind}"),
            || {
                let job = self.job(name);
                let c = condition(&job, kind)?;
                (c["status"] == "True").then_some((job, c))
            },
            || format!("{}", self.job(name)["status"]),
        )
    }

    /// The pods of the Job `name`.
    fn pods(&self, name: &str) -> Vec<Value> {
        owned_by(
            self.api(),
            &format!("/api/v1/namespaces/{NS}/pods"),
            "Job",
            name,
        )
    }

    fn cronjob_status(&self) -> Value {
        json(
            &self
                .api()
                .get(&format!(
                    "/apis/batch/v1/namespaces/{NS}/cronjobs/booking-expire"
                ))
                .unwrap(),
        )["status"]
            .clone()
    }

    /// The exit codes of each container of the pod `pod`, once the node reported them.
    fn exits(&self, pod: &str) -> BTreeMap<String, i32> {
        wait_for(
            Duration::from_secs(60),
            &format!("the end of the pod {pod}"),
            || self.node.exits(pod),
            String::new,
        )
    }

    fn client(&self) -> postgres::Client {
        self.db.client()
    }
}

/// The time a CronJob's Job was scheduled for (its annotation).
fn scheduled(job: &Value) -> String {
    job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        .as_str()
        .unwrap_or_else(|| panic!("no scheduled time on {job}"))
        .to_owned()
}

/// The condition `kind` of a Job's status.
fn condition(job: &Value, kind: &str) -> Option<Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

fn name(v: &Value) -> String {
    v["metadata"]["name"].as_str().unwrap().to_owned()
}

/// The ids of the bookings in `status`.
fn in_status(c: &mut postgres::Client, status: &str) -> BTreeSet<Uuid> {
    c.query("SELECT id FROM crm.bookings WHERE status = $1", &[&status])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Overdue bookings: `n` Reserved and `n` Booked; their ids.
fn overdue(c: &mut postgres::Client, n: usize) -> (BTreeSet<Uuid>, BTreeSet<Uuid>) {
    let reserved: Vec<Seed> = (0..n).map(|i| Seed::reserved(-60 - i as i64)).collect();
    let booked: Vec<Seed> = (0..n).map(|i| Seed::booked(-60 - i as i64)).collect();
    seed(c, &reserved);
    seed(c, &booked);
    (
        reserved.iter().map(|s| s.id).collect(),
        booked.iter().map(|s| s.id).collect(),
    )
}

/// The keys of the records on the test's topic, once `n` arrived (and whatever else
/// the topic held then).
fn keys_on_topic(w: &World, n: usize) -> BTreeSet<Uuid> {
    consume(&w.brokers, &w.topic, 6, n, Duration::from_secs(60))
        .iter()
        .map(|m| m.key.parse().unwrap())
        .collect()
}

#[test]
fn a_minutes_cycle_expires_the_overdue_bookings_and_the_job_completes() {
    let w = World::new();
    let mut c = w.client();
    let (reserved, booked) = overdue(&mut c, 3);
    let later = Seed::reserved(3600);
    seed(&mut c, std::slice::from_ref(&later));

    let cronjob = w.cronjob(|m| m);
    let applied = cronjob["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = w.first_job();
    let at = scheduled(&job);
    assert!(at.ends_with(":00Z") && at > applied, "{at} after {applied}");
    let job_name = name(&job);

    let (job, complete) = w.finished(&job_name, "Complete", Duration::from_secs(90));
    assert_eq!(complete["reason"], "CompletionsReached", "{complete}");
    assert_eq!(job["status"]["succeeded"], 1, "{}", job["status"]);
    assert_eq!(job["status"]["failed"], Value::Null, "{}", job["status"]);
    let pods = w.pods(&job_name);
    assert_eq!(pods.len(), 1, "{pods:#?}");
    let pod = name(&pods[0]);
    assert_eq!(
        pods[0]["status"]["phase"], "Succeeded",
        "{}",
        pods[0]["status"]
    );
    assert_eq!(
        w.exits(&pod),
        BTreeMap::from([("relay-outbox".into(), 0), ("run-once".into(), 0)]),
        "run-once:\n{}\nrelay-outbox:\n{}",
        w.node.log(&pod, "run-once"),
        w.node.log(&pod, "relay-outbox"),
    );

    assert_eq!(in_status(&mut c, "ReserveExpired"), reserved);
    assert_eq!(in_status(&mut c, "BookingExpired"), booked);
    assert_eq!(in_status(&mut c, "Reserved"), BTreeSet::from([later.id]));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        0,
        "every event marked sent"
    );
    let expired: BTreeSet<Uuid> = reserved.union(&booked).copied().collect();
    assert_eq!(keys_on_topic(&w, 6), expired);

    let status = w.cronjob_status();
    assert_eq!(status["lastScheduleTime"], at.as_str(), "{status}");
    assert!(status["lastSuccessfulTime"].is_string(), "{status}");
    assert!(
        status["active"]
            .as_array()
            .is_none_or(|a| a.iter().all(|r| r["name"] != job_name.as_str())),
        "{status}"
    );
    assert_eq!(w.node.errors(), Vec::<String>::new());
}

/// `at` (a scheduled time) plus `seconds`, as the API writes times.
fn plus(at: &str, seconds: i64) -> String {
    let t: chrono::DateTime<chrono::Utc> = at.parse().unwrap();
    (t + chrono::Duration::seconds(seconds)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The CronJob's Jobs that have neither `Complete` nor `Failed`, by name.
fn active(w: &World) -> Vec<String> {
    w.jobs()
        .values()
        .filter(|job| {
            ["Complete", "Failed"]
                .iter()
                .all(|k| condition(job, k).is_none_or(|c| c["status"] != "True"))
        })
        .map(name)
        .collect()
}

/// The reasons of the events about the object named `name`.
fn events(w: &World, name: &str) -> Vec<String> {
    let list = json(
        &w.api()
            .get(&format!(
                "/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{name}"
            ))
            .unwrap(),
    );
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}

/// A run that outlives its minute: the node reports its pod's end only 40 s after the
/// Job controller deleted it at `activeDeadlineSeconds` (the containers were done long
/// before). The next minute finds the Job active: Forbid holds the run back, and by
/// the time the stuck Job has failed (`DeadlineExceeded`) that minute is more than
/// `startingDeadlineSeconds` (30 s) past, so it is skipped; the minute after, a Job
/// runs and expires what became overdue meanwhile.
#[test]
fn a_run_that_outlives_its_minute_holds_the_next_back_and_the_one_after_catches_up() {
    let w = World::new();
    let mut c = w.client();
    let (reserved, booked) = overdue(&mut c, 2);
    w.node.stick(Some(Duration::from_secs(40)));
    let cronjob = w.cronjob(|m| m);
    assert_eq!(cronjob["spec"]["concurrencyPolicy"], "Forbid");
    let first = w.first_job();
    let at = scheduled(&first);
    let first_name = name(&first);
    let pod = wait_for(
        Duration::from_secs(60),
        "the first Job's pod running",
        || {
            w.pods(&first_name)
                .into_iter()
                .find(|p| p["status"]["phase"] == "Running")
        },
        String::new,
    );
    let pod = name(&pod);
    // Only the first run's pod is stuck.
    w.node.stick(None);
    wait_until(Duration::from_secs(60), "the stuck pod's run-once", || {
        w.node.ended(&pod, "run-once").is_some()
    });
    assert_eq!(
        w.node.ended(&pod, "run-once"),
        Some(0),
        "{}",
        w.node.log(&pod, "run-once")
    );
    assert_eq!(in_status(&mut c, "ReserveExpired"), reserved);
    assert_eq!(in_status(&mut c, "BookingExpired"), booked);
    // Overdue after the first run: the next run's work.
    let (late_reserved, late_booked) = overdue(&mut c, 2);

    // The next minute: the CronJob controller says it held the run back, and no second
    // Job is active beside the first.
    let next = plus(&at, 60);
    wait_until(
        Duration::from_secs(90),
        &format!("the CronJob controller's look at {next}"),
        || {
            events(&w, "booking-expire").contains(&"JobAlreadyActive".to_owned())
                || w.jobs().contains_key(&next)
        },
    );
    assert_eq!(
        active(&w),
        [first_name.as_str()],
        "one Job active at {next}"
    );
    let status = w.cronjob_status();
    assert_eq!(status["lastScheduleTime"], at.as_str(), "{status}");

    // The stuck Job ends at its deadline, once its node reports the pod's end.
    let (job, failed) = w.finished(&first_name, "Failed", Duration::from_secs(120));
    assert_eq!(failed["reason"], "DeadlineExceeded", "{failed}");
    assert_eq!(
        w.exits(&pod),
        BTreeMap::from([("relay-outbox".into(), 0), ("run-once".into(), 0)]),
        "the containers had ended well: only the node was late"
    );
    let ended = failed["lastTransitionTime"].as_str().unwrap();
    assert!(ended > plus(&at, 90).as_str(), "{ended}: {}", job["status"]);

    // The minute after: a Job on time, which catches up.
    let after = plus(&at, 120);
    let third = w.job_at(&after, Duration::from_secs(60));
    assert_eq!(
        w.jobs().keys().cloned().collect::<Vec<_>>(),
        [at.clone(), after.clone()],
        "{next} was skipped"
    );
    let third_name = name(&third);
    let (_, complete) = w.finished(&third_name, "Complete", Duration::from_secs(90));
    assert_eq!(complete["reason"], "CompletionsReached", "{complete}");
    let status = w.cronjob_status();
    assert_eq!(status["lastScheduleTime"], after.as_str(), "{status}");
    assert_eq!(
        in_status(&mut c, "ReserveExpired"),
        reserved.union(&late_reserved).copied().collect()
    );
    assert_eq!(
        in_status(&mut c, "BookingExpired"),
        booked.union(&late_booked).copied().collect()
    );
    let all: BTreeSet<Uuid> = [&reserved, &booked, &late_reserved, &late_booked]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    assert_eq!(keys_on_topic(&w, 8), all);
    assert_eq!(w.node.errors(), Vec::<String>::new());
}

/// A failed run: the Secret names a database that does not exist, so both containers
/// end 78 (configuration, docs/reference/exit-codes.md); with `backoffLimit: 0` the Job
/// fails at once with `BackoffLimitExceeded`, and nothing in the database changed.
#[test]
fn a_container_ending_78_fails_its_job_with_backoff_limit_exceeded() {
    let w = World::new();
    let mut c = w.client();
    let (reserved, booked) = overdue(&mut c, 1);
    let wrong = with_database(&w.db.url, &format!("{}_missing", w.db.name));
    let gateway = Pushgateway::start();
    let patch = serde_json::json!({ "stringData": {
        "DATABASE_URL": wrong,
        "PUSHGATEWAY_URL": gateway.url(),
    } });
    let r = w
        .api()
        .patch(
            &format!("/api/v1/namespaces/{NS}/secrets/{}", SECRETS[0]),
            "application/merge-patch+json",
            &patch.to_string(),
        )
        .unwrap();
    assert!(r.ok(), "{} {}", r.status, r.body);

    w.cronjob(|m| m);
    let job = w.first_job();
    let at = scheduled(&job);
    let job_name = name(&job);
    let (job, failed) = w.finished(&job_name, "Failed", Duration::from_secs(90));
    assert_eq!(failed["reason"], "BackoffLimitExceeded", "{failed}");
    assert_eq!(job["status"]["failed"], 1, "{}", job["status"]);
    assert_eq!(job["status"]["succeeded"], Value::Null, "{}", job["status"]);
    let pods = w.pods(&job_name);
    assert_eq!(pods.len(), 1, "{pods:#?}");
    let pod = name(&pods[0]);
    assert_eq!(
        w.exits(&pod),
        BTreeMap::from([("relay-outbox".into(), 78), ("run-once".into(), 78)]),
        "run-once:\n{}\nrelay-outbox:\n{}",
        w.node.log(&pod, "run-once"),
        w.node.log(&pod, "relay-outbox"),
    );
    assert_eq!(
        pods[0]["status"]["phase"], "Failed",
        "{}",
        pods[0]["status"]
    );
    let codes: Vec<(String, i64)> = pods[0]["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["state"]["terminated"]["exitCode"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        codes,
        [("run-once".to_owned(), 78), ("relay-outbox".to_owned(), 78)]
    );
    assert!(
        w.node
            .log(&pod, "run-once")
            .contains(&format!("{}_missing", w.db.name)),
        "{}",
        w.node.log(&pod, "run-once")
    );
    assert_eq!(in_status(&mut c, "Reserved"), reserved);
    assert_eq!(in_status(&mut c, "Booked"), booked);
    let status = w.cronjob_status();
    assert_eq!(status["lastScheduleTime"], at.as_str(), "{status}");
    assert_eq!(status["lastSuccessfulTime"], Value::Null, "{status}");

    // What the failed run pushed makes the failed-runs alert fire once it lasts.
    for step in ["run-once", "relay-outbox"] {
        let group = gateway.group(step);
        assert_eq!(
            group.get("crm_booking_expiration_errors"),
            Some(&1.0),
            "{step}: {group:?}"
        );
    }
    runs_failing_fires_on(&gateway.exposition());
    assert_eq!(w.node.errors(), Vec::<String>::new());
}

/// Runs `promtool test rules` with the shipped rules on `exposition` (every sample the
/// Pushgateway holds of the job), as if each failed minute pushed the same again: the
/// alert on failed runs (`BookingExpirationRunsFailing`, for 3m) fires at 4 minutes for
/// both steps, and not at 2.
fn runs_failing_fires_on(exposition: &str) {
    let series: Vec<String> = samples(exposition)
        .into_iter()
        .filter(|(_, labels, v)| {
            labels.get("job").map(String::as_str) == Some(JOB) && v.is_finite()
        })
        .map(|(name, labels, v)| {
            let labels: Vec<String> = labels
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| format!("{k}=\\\"{v}\\\""))
                .collect();
            format!(
                "      - series: \"{name}{{{}}}\"\n        values: '{v}x5'\n",
                labels.join(",")
            )
        })
        .collect();
    let firing = |step: &str| {
        format!(
            "          - labels: 'ALERTS{{alertname=\"BookingExpirationRunsFailing\",\
             alertstate=\"firing\",job=\"{JOB}\",severity=\"warning\",step=\"{step}\"}}'\n\
             \x20           value: 1\n"
        )
    };
    let rules = common::repo().join("monitoring/booking-expiration.rules.yml");
    let test = format!(
        "rule_files: ['{}']\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    \
         input_series:\n{}    promql_expr_test:\n      - expr: \
         'ALERTS{{alertname=\"BookingExpirationRunsFailing\",alertstate=\"firing\"}}'\n        \
         eval_time: 4m\n        exp_samples:\n{}{}      - expr: \
         'ALERTS{{alertname=\"BookingExpirationRunsFailing\",alertstate=\"firing\"}}'\n        \
         eval_time: 2m\n        exp_samples: []\n",
        rules.display(),
        series.concat(),
        firing("relay-outbox"),
        firing("run-once"),
    );
    let dir = std::env::temp_dir().join(format!("be-promtool-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("failed-runs.test.yml");
    std::fs::write(&file, &test).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("promtool");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pod evicted through the Eviction API while its run-once waits in its first batch
/// (a gate on the timeline's insert): the API server marks it `DisruptionTarget`, the
/// node stops its containers (SIGTERM, the grace period), the batch rolls back; the
/// podFailurePolicy ignores the failure, so the Job controller starts another pod in
/// the same Job, which expires everything and completes the Job.
#[test]
fn an_evicted_pod_is_ignored_by_the_failure_policy_and_its_replacement_does_the_work() {
    let w = World::new();
    let mut c = w.client();
    let (reserved, booked) = overdue(&mut c, 2);
    let key = 4_404;
    let mut gate = hold_gate(
        &w.db.url,
        key,
        "TRIGGER gate AFTER INSERT ON crm.deal_timeline FOR EACH STATEMENT",
    );
    w.cronjob(|m| m);
    let job = w.first_job();
    let job_name = name(&job);
    let pod = wait_for(
        Duration::from_secs(60),
        "the Job's pod running",
        || {
            w.pods(&job_name)
                .into_iter()
                .find(|p| p["status"]["phase"] == "Running")
        },
        String::new,
    );
    let pod = name(&pod);
    wait_until(
        Duration::from_secs(30),
        "run-once waiting at the gate",
        || job_waits_in(&mut c, &w.db.name, ""),
    );
    let eviction = serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": { "name": pod, "namespace": NS },
    });
    let r = w
        .api()
        .post(
            &format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction"),
            "application/json",
            &eviction.to_string(),
        )
        .unwrap();
    assert!(r.ok(), "the eviction: {} {}", r.status, r.body);
    let exits = w.exits(&pod);
    open_gate(&mut gate, key);
    assert_eq!(
        exits,
        BTreeMap::from([("relay-outbox".into(), 143), ("run-once".into(), 143)]),
        "run-once:\n{}\nrelay-outbox:\n{}",
        w.node.log(&pod, "run-once"),
        w.node.log(&pod, "relay-outbox"),
    );

    let (job, complete) = w.finished(&job_name, "Complete", Duration::from_secs(90));
    assert_eq!(complete["reason"], "CompletionsReached", "{complete}");
    // Not counted against backoffLimit 0: ignored.
    assert_eq!(job["status"]["failed"], Value::Null, "{}", job["status"]);
    assert_eq!(job["status"]["succeeded"], 1, "{}", job["status"]);
    let pods = w.pods(&job_name);
    let evicted: Vec<&Value> = pods.iter().filter(|p| name(p) == pod).collect();
    // The evicted pod is gone once its end was reported (the node deleted it), or
    // still there as Failed with the condition the API server wrote.
    for p in &evicted {
        let disruption = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "DisruptionTarget")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (&disruption["status"], &disruption["reason"]),
            (&Value::from("True"), &Value::from("EvictionByEvictionAPI")),
            "{}",
            p["status"]
        );
    }
    let others: Vec<String> = pods.iter().map(name).filter(|n| *n != pod).collect();
    assert_eq!(others.len(), 1, "one replacement: {others:?}");
    assert_eq!(
        w.exits(&others[0]),
        BTreeMap::from([("relay-outbox".into(), 0), ("run-once".into(), 0)])
    );
    assert_eq!(in_status(&mut c, "ReserveExpired"), reserved);
    assert_eq!(in_status(&mut c, "BookingExpired"), booked);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        0
    );
    let expired: BTreeSet<Uuid> = reserved.union(&booked).copied().collect();
    assert_eq!(keys_on_topic(&w, 4), expired);
    assert_eq!(w.node.errors(), Vec::<String>::new());
}

/// The operator Jobs of docs/runbooks/operator-jobs.yaml that need no window: migrate
/// (with its own Secret: nothing left to apply), dry-run and backlog (the read-only
/// login), each to `Complete`, each container ending 0 with what its runbook reads.
#[test]
fn the_operator_jobs_run_to_completion() {
    let w = World::new();
    let mut c = w.client();
    let (reserved, booked) = overdue(&mut c, 2);
    let runbook =
        std::fs::read_to_string(common::repo().join("docs/runbooks/operator-jobs.yaml")).unwrap();
    let wanted = [
        "booking-expire-migrate",
        "booking-expire-dry-run",
        "booking-expire-backlog",
    ];
    let mut applied = Vec::new();
    for document in runbook.split("\n---\n") {
        // The audit Job needs a window set on the way in: not this test's (the API
        // server's acceptance of it is kube.rs's). Not applied at all: a pod the test
        // node had started, deleted with its Job, raced the node's status write.
        if !wanted
            .iter()
            .any(|job| document.contains(&format!("\n  name: {job}\n")))
        {
            continue;
        }
        let job = apply(w.api(), "jobs", document);
        applied.push(name(&job));
    }
    applied.sort();
    let mut expected: Vec<String> = wanted.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(applied, expected);
    let mut logs = BTreeMap::new();
    for job in &applied {
        let (_, complete) = w.finished(job, "Complete", Duration::from_secs(120));
        assert_eq!(
            complete["reason"], "CompletionsReached",
            "{job}: {complete}"
        );
        let pods = w.pods(job);
        assert_eq!(pods.len(), 1, "{job}: {pods:#?}");
        let pod = name(&pods[0]);
        let exits = w.exits(&pod);
        assert_eq!(exits.values().collect::<Vec<_>>(), [&0], "{job}: {exits:?}");
        let container = exits.keys().next().unwrap().clone();
        logs.insert(container.clone(), w.node.log(&pod, &container));
    }
    assert!(
        logs["migrate"].contains("\"SchemaVersion\""),
        "{}",
        logs["migrate"]
    );
    // The dry run's tables name each booking by its id's first eight characters.
    for id in reserved.iter().chain(&booked) {
        let short = &id.to_string()[..8];
        assert!(
            logs["dry-run"].contains(short),
            "dry-run lists {id}:\n{}",
            logs["dry-run"]
        );
    }
    assert!(
        logs["dry-run"].contains("Reserve: 2 would expire")
            && logs["dry-run"].contains("Booking: 2 would expire"),
        "{}",
        logs["dry-run"]
    );
    let total = logs["backlog"]
        .lines()
        .find(|l| l.starts_with("overdue total"))
        .map(|l| l.split_whitespace().nth(2).unwrap_or_default().to_owned());
    assert_eq!(total.as_deref(), Some("4"), "{}", logs["backlog"]);
    // Read-only: nothing expired.
    assert_eq!(in_status(&mut c, "Reserved"), reserved);
    assert_eq!(in_status(&mut c, "Booked"), booked);
    assert_eq!(w.node.errors(), Vec::<String>::new());
}

/// Waits for the wall clock to reach `at` (an API time): what the scenario is about is
/// a moment of the CronJob's schedule, not an event.
fn wait_clock(at: &str) {
    let t: chrono::DateTime<chrono::Utc> = at.parse().unwrap();
    wait_until(
        Duration::from_secs(180),
        &format!("the clock at {at}"),
        || chrono::Utc::now() >= t,
    );
}

/// Seconds from the API time `from` to `to`.
fn seconds(from: &str, to: &str) -> i64 {
    let from: chrono::DateTime<chrono::Utc> = from.parse().unwrap();
    let to: chrono::DateTime<chrono::Utc> = to.parse().unwrap();
    (to - from).num_seconds()
}

/// A late start: the controller manager stopped 10 s before a scheduled minute T and
/// started 45 s after it: past `startingDeadlineSeconds` (30), that run is skipped and
/// T+60's Job is created on time. Stopped across T+120 and started 15 s after it: the
/// run of T+120 starts late, once.
#[test]
fn a_controller_manager_back_after_the_starting_deadline_skips_the_run_and_within_it_runs_late() {
    let mut w = World::new();
    let mut c = w.client();
    let (reserved, booked) = overdue(&mut c, 1);
    w.cronjob(|m| m);
    let soon = chrono::Utc::now() + chrono::Duration::seconds(20);
    let t = format!("{}:00Z", soon.format("%Y-%m-%dT%H:%M"));
    let t = plus(&t, 60);

    wait_clock(&plus(&t, -10));
    w.kube.stop_controller_manager().unwrap();
    wait_clock(&plus(&t, 45));
    w.kube.start_controller_manager().unwrap();
    // The first Job after the stop: T+60's, on time; none for T.
    let (first, on_time) = wait_for(
        Duration::from_secs(60),
        &format!("a Job of {t} or later"),
        || {
            w.jobs()
                .into_iter()
                .find(|(at, _)| at.as_str() >= t.as_str())
        },
        String::new,
    );
    assert_eq!(first, plus(&t, 60), "the run of {t} was skipped");
    let created = on_time["metadata"]["creationTimestamp"].as_str().unwrap();
    assert!(
        seconds(&first, created) < 10,
        "{created}: T+60's Job on time"
    );
    let (_, complete) = w.finished(&name(&on_time), "Complete", Duration::from_secs(90));
    assert_eq!(complete["reason"], "CompletionsReached", "{complete}");
    assert_eq!(in_status(&mut c, "ReserveExpired"), reserved);
    assert_eq!(in_status(&mut c, "BookingExpired"), booked);

    let t2 = plus(&t, 120);
    wait_clock(&plus(&t2, -10));
    w.kube.stop_controller_manager().unwrap();
    wait_clock(&plus(&t2, 15));
    w.kube.start_controller_manager().unwrap();
    let late = w.job_at(&t2, Duration::from_secs(60));
    let created = late["metadata"]["creationTimestamp"].as_str().unwrap();
    let lateness = seconds(&t2, created);
    assert!((15..30).contains(&lateness), "{created}: {lateness} s late");
    let (_, complete) = w.finished(&name(&late), "Complete", Duration::from_secs(90));
    assert_eq!(complete["reason"], "CompletionsReached", "{complete}");
    let scheduled: Vec<String> = w
        .jobs()
        .into_keys()
        .filter(|at| at.as_str() >= t.as_str())
        .collect();
    assert_eq!(
        scheduled,
        [plus(&t, 60), t2.clone()],
        "one late run, of {t2}"
    );
    let status = w.cronjob_status();
    assert_eq!(status["lastScheduleTime"], t2.as_str(), "{status}");
    let expired: BTreeSet<Uuid> = reserved.union(&booked).copied().collect();
    assert_eq!(keys_on_topic(&w, 2), expired);
    assert_eq!(w.node.errors(), Vec::<String>::new());
}

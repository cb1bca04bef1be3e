//! Kafka for the tests: the suite's broker (`KAFKA_BROKERS`, or the harness's own),
//! brokers of a test's own (to stop, kill and restart), topics, a real consumer, and
//! Java's murmur2 partitioner to check where keys land.

use crate::rdkafka;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use booking_expire_testbed::kafka::{Broker, Cluster, Kafka};
use booking_expire_testbed::process::Signal;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

pub use super::services::shared_brokers;

use super::kafka_admin::runtime;

/// What a relay test starts from: the suite's brokers, a topic of its own with
/// `partitions` partitions, and a database of its own.
pub struct Fresh {
    pub brokers: String,
    pub topic: String,
    pub db: super::TestDb,
}

impl Fresh {
    pub fn new(partitions: i32) -> Self {
        let brokers = shared_brokers();
        let topic = unique_topic();
        create_topic(&brokers, &topic, partitions, &[]);
        Fresh {
            brokers,
            topic,
            db: super::TestDb::new(),
        }
    }
}

/// A unique topic name for one test: every test uses topics of its own, so tests can
/// run side by side on one broker at any thread count. On a broker of yours
/// (`KAFKA_BROKERS`) the name is on the harness's record first, so a later run deletes
/// the topic (see `leftovers`).
pub fn unique_topic() -> String {
    recorded(format!("be-test-{}", uuid::Uuid::new_v4().simple()))
}

/// [`unique_topic`] with a word saying what it stands for (`v1`, `v2`), for a test
/// that needs several.
pub fn unique_topic_for(what: &str) -> String {
    recorded(format!("be-test-{what}-{}", uuid::Uuid::new_v4().simple()))
}

fn recorded(topic: String) -> String {
    if std::env::var_os("KAFKA_BROKERS").is_some() {
        super::record_made(super::Made::Topic, &topic);
    }
    topic
}

/// A single-node KRaft broker of the test's own (the testbed crate's, in a temporary
/// directory): killed when dropped, and when the test process dies (its death signal).
pub struct OwnBroker {
    pub brokers: String,
    broker: Mutex<Broker>,
}

impl OwnBroker {
    pub fn start() -> Self {
        let broker = Kafka::new()
            .start()
            .unwrap_or_else(|e| panic!("a broker of the test's own: {e}"));
        OwnBroker {
            brokers: broker.brokers(),
            broker: Mutex::new(broker),
        }
    }

    fn broker(&self) -> std::sync::MutexGuard<'_, Broker> {
        self.broker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Graceful stop (SIGTERM).
    pub fn stop(&self) {
        self.broker().stop();
    }

    /// SIGKILL, no goodbye.
    pub fn kill(&self) {
        self.broker().kill();
    }

    /// Starts it again on the same ports with its data.
    pub fn restart(&self) {
        let mut broker = self.broker();
        broker
            .restart()
            .unwrap_or_else(|e| panic!("restart the broker: {e}"));
        assert_eq!(
            broker.brokers(),
            self.brokers,
            "restarted on the same address"
        );
    }

    /// SIGSTOP: the broker keeps its connections open and answers nothing, as in a long
    /// GC pause or a frozen VM, until [`OwnBroker::resume`].
    pub fn pause(&self) {
        self.signal(Signal::Stop);
    }

    /// SIGCONT after [`OwnBroker::pause`].
    pub fn resume(&self) {
        self.signal(Signal::Cont);
    }

    fn signal(&self, signal: Signal) {
        self.broker()
            .signal(signal)
            .unwrap_or_else(|e| panic!("kill -{}: {e}", signal.name()));
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.broker().kill();
    }
}

/// Creates a topic (replication 1) with the given configs.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    create_and_wait(&admin, new, topic, partitions);
}

/// One record as a consumer sees it.
#[derive(Debug, Clone)]
pub struct Received {
    pub key: String,
    pub partition: i32,
    pub offset: i64,
    pub headers: BTreeMap<String, String>,
    pub payload: serde_json::Value,
    /// The value's bytes, exactly as sent.
    pub raw_payload: Vec<u8>,
}

/// Reads the whole topic from the beginning: until `expected` records arrived and then
/// every record the topic held at that moment (its partitions' high watermarks, so
/// extra copies already written are caught without waiting a fixed time), or until
/// `limit` passes.
pub fn consume(
    brokers: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
    limit: Duration,
) -> Vec<Received> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set(
            "group.id",
            format!("be-test-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    // Per partition: the offset after the last record read.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    // Once `expected` arrived: the high watermarks to read up to.
    let mut read_up_to: Option<BTreeMap<i32, i64>> = None;
    loop {
        if started.elapsed() > limit {
            break;
        }
        if got.len() >= expected && read_up_to.is_none() {
            read_up_to = Some(high_watermarks(&consumer, topic, partitions));
        }
        if let Some(ends) = &read_up_to
            && ends
                .iter()
                .all(|(p, end)| next.get(p).copied().unwrap_or(0) >= *end)
        {
            break;
        }
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let mut headers = BTreeMap::new();
            if let Some(h) = m.headers() {
                for header in h.iter() {
                    let value = header.value.map(|v| String::from_utf8(v.to_vec()).unwrap());
                    let previous = headers.insert(header.key.to_owned(), value.unwrap_or_default());
                    assert!(previous.is_none(), "header {} repeated", header.key);
                }
            }
            next.insert(m.partition(), m.offset() + 1);
            got.push(Received {
                key: String::from_utf8(m.key().unwrap().to_vec()).unwrap(),
                partition: m.partition(),
                offset: m.offset(),
                headers,
                payload: serde_json::from_slice(m.payload().unwrap()).unwrap(),
                raw_payload: m.payload().unwrap().to_vec(),
            });
        }
    }
    got
}

/// Each partition's high watermark (the offset the next record will get). The relay's
/// producer is idempotent, not transactional: no control records, so a partition
/// holds exactly `high - low` records.
fn high_watermarks(consumer: &BaseConsumer, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    (0..partitions)
        .map(|p| {
            let (_, high) = watermarks(consumer, topic, p);
            (p, high)
        })
        .collect()
}

/// A partition's low and high watermarks. A partition whose leadership is still
/// settling (just created, on a loaded broker) answers with a retriable error for a
/// moment: asked again until it answers, for at most 60 s.
fn watermarks(consumer: &BaseConsumer, topic: &str, p: i32) -> (i64, i64) {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let last = std::cell::RefCell::new(String::new());
    super::wait_for(
        Duration::from_secs(60),
        &format!("the watermarks of {topic}/{p}"),
        || match consumer.fetch_watermarks(topic, p, Duration::from_secs(30)) {
            Ok(marks) => Some(marks),
            Err(e)
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        Code::NotLeaderForPartition
                            | Code::LeaderNotAvailable
                            | Code::UnknownTopicOrPartition
                    )
                ) =>
            {
                *last.borrow_mut() = e.to_string();
                None
            }
            Err(e) => panic!("watermarks of {topic}/{p}: {e}"),
        },
        || last.borrow().clone(),
    )
}

/// How many records `topic` holds now, from its partitions' watermarks (no control
/// records, see [`consume`]): that nothing, or nothing more, was sent is known at once,
/// with no time window to watch.
pub fn records_on(brokers: &str, topic: &str, partitions: i32) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    (0..partitions)
        .map(|p| {
            let (low, high) = watermarks(&consumer, topic, p);
            high - low
        })
        .sum()
}

/// Kafka's Java `murmur2`, as its default partitioner uses it for keyed records.
pub fn java_murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ len as u32;
    for chunk in data.chunks_exact(4) {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = &data[len & !3..];
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Java's default partitioner picks for a key.
pub fn java_partition(key: &str, partitions: i32) -> i32 {
    (java_murmur2(key.as_bytes()) & 0x7fff_ffff) % partitions
}

/// A three-node KRaft cluster of the test's own (the testbed crate's): replication
/// factor 3, min.insync.replicas 2; each node can be killed, stopped and started again
/// on its own. Killed when dropped, and when the test process dies.
pub struct OwnCluster {
    /// The three brokers' addresses, comma-separated.
    pub brokers: String,
    cluster: Mutex<Cluster>,
    /// The nodes stopped or killed and not started since: [`OwnCluster::heal`] starts them.
    down: Mutex<Vec<u32>>,
    /// The one client that reads the cluster's metadata ([`OwnCluster::heal`],
    /// [`OwnCluster::leader`]): it follows the nodes as they go and come back.
    metadata: BaseConsumer,
}

impl OwnCluster {
    pub fn start() -> Self {
        let cluster = Kafka::new()
            .start_cluster()
            .unwrap_or_else(|e| panic!("a three-node cluster of the test's own: {e}"));
        let brokers = cluster.brokers();
        let metadata = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .unwrap_or_else(|e| panic!("a metadata client of the cluster {brokers}: {e}"));
        OwnCluster {
            brokers,
            cluster: Mutex::new(cluster),
            down: Mutex::new(Vec::new()),
            metadata,
        }
    }

    fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn down(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn went_down(&self, id: u32) {
        let mut down = self.down();
        if !down.contains(&id) {
            down.push(id);
        }
    }

    fn came_back(&self, ids: &[u32]) {
        self.down().retain(|id| !ids.contains(id));
    }

    /// SIGKILL node `id` (1..=3, its node.id).
    pub fn kill(&self, id: i32) {
        self.cluster().kill(node_id(id));
        self.went_down(node_id(id));
    }

    /// Graceful stop (SIGTERM) of node `id`.
    pub fn stop(&self, id: i32) {
        self.cluster().stop(node_id(id));
        self.went_down(node_id(id));
    }

    /// Starts node `id` again with its data.
    pub fn restart(&self, id: i32) {
        self.cluster()
            .restart(node_id(id))
            .unwrap_or_else(|e| panic!("restart node {id}: {e}"));
        self.came_back(&[node_id(id)]);
    }

    /// Starts the nodes `ids` again with their data, side by side.
    pub fn restart_together(&self, ids: &[i32]) {
        let ids: Vec<u32> = ids.iter().map(|&id| node_id(id)).collect();
        self.cluster()
            .restart_together(&ids)
            .unwrap_or_else(|e| panic!("restart nodes {ids:?}: {e}"));
        self.came_back(&ids);
    }

    /// The cluster whole again, as the next test needs it: the nodes a test left down
    /// started again with their data, and all three brokers in the cluster's metadata
    /// (registered and unfenced: a topic of replication factor 3 can be created).
    fn heal(&self) {
        let down = self.down().clone();
        if !down.is_empty() {
            let ids: Vec<i32> = down.iter().map(|&id| id as i32).collect();
            self.restart_together(&ids);
        }
        super::wait_for(
            Duration::from_secs(120),
            "the cluster's three brokers in its metadata",
            || {
                self.metadata
                    .fetch_metadata(None, Duration::from_secs(5))
                    .ok()
                    .filter(|m| m.brokers().len() == 3)
                    .map(|_| ())
            },
            || format!("nodes started again: {down:?}"),
        );
    }

    /// The node.id of the leader of `partition` of `topic`, as the cluster's metadata
    /// says now.
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let metadata = self
            .metadata
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        metadata.topics()[0]
            .partitions()
            .iter()
            .find(|p| p.id() == partition)
            .unwrap()
            .leader()
    }
}

fn node_id(id: i32) -> u32 {
    u32::try_from(id).unwrap_or_else(|_| panic!("node ids are 1..=3, not {id}"))
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.cluster().kill_all();
    }
}

/// The cluster the tests of a process share, one test at a time (three JVMs are what a
/// 2-core machine runs well), so that a run starts one cluster, not one per test. Each
/// test has a topic and a database of its own, so what an earlier one left on the
/// cluster is not what it asserts.
static SHARED_CLUSTER: Mutex<Option<OwnCluster>> = Mutex::new(None);
/// How many tests have asked for a [`ClusterTurn`] and not yet got it.
static WAITING_FOR_CLUSTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A test's turn on the shared three-node cluster ([`cluster_turn`]). When it ends and
/// no other test is waiting for one, the cluster is stopped and its files removed; a
/// test that asks later starts a new one.
pub struct ClusterTurn {
    cluster: std::sync::MutexGuard<'static, Option<OwnCluster>>,
}

/// Waits for this test's turn on the shared cluster, and hands it over whole: started
/// for the first test, healed ([`OwnCluster`]'s nodes started again) for the next.
pub fn cluster_turn() -> ClusterTurn {
    use std::sync::atomic::Ordering;
    WAITING_FOR_CLUSTER.fetch_add(1, Ordering::SeqCst);
    let mut cluster = SHARED_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    WAITING_FOR_CLUSTER.fetch_sub(1, Ordering::SeqCst);
    match cluster.as_ref() {
        Some(shared) => shared.heal(),
        None => *cluster = Some(OwnCluster::start()),
    }
    ClusterTurn { cluster }
}

impl std::ops::Deref for ClusterTurn {
    type Target = OwnCluster;

    fn deref(&self) -> &OwnCluster {
        self.cluster
            .as_ref()
            .expect("a turn holds a started cluster")
    }
}

impl Drop for ClusterTurn {
    fn drop(&mut self) {
        // Taken while this turn still holds the lock: a test that asks now waits, and
        // its heal or start comes after.
        if WAITING_FOR_CLUSTER.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            drop(self.cluster.take());
        }
    }
}

/// Creates a topic replicated on all three nodes of an [`OwnCluster`].
pub fn create_replicated_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(3))
        .set("min.insync.replicas", "2");
    create_and_wait(&admin, new, topic, partitions);
}

/// Creates `new` and waits until the brokers' metadata shows it with a leader for
/// every one of its `partitions`.
fn create_and_wait(
    admin: &AdminClient<DefaultClientContext>,
    new: NewTopic<'_>,
    topic: &str,
    partitions: i32,
) {
    let results = runtime()
        .block_on(admin.create_topics(&[new], &AdminOptions::new()))
        .unwrap();
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
    // Created is not yet known to every broker: the relay takes a topic that its
    // metadata does not show for a configuration fault (exit 78), so wait until it
    // shows the topic with a leader for every partition.
    let started = Instant::now();
    loop {
        let ready = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()
            .and_then(|m| {
                m.topics().first().map(|t| {
                    t.error().is_none()
                        && t.partitions().len() == partitions as usize
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                })
            })
            .unwrap_or(false);
        if ready {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "topic {topic} not in the brokers' metadata 90 s after it was created"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

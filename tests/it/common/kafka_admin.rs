//! Kafka's admin client on a runtime of its own: the one-thread runtime its futures
//! are run on (the topics `kafka` makes for the tests) and deleting a topic (the sweep
//! of a finished run's topics, `leftovers`). Below both, it knows neither.

use crate::rdkafka;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

/// A one-thread runtime for the admin client's futures.
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Deletes `topic` on `brokers`; one that does not exist there counts as deleted.
pub(super) fn delete_topic(brokers: &str, topic: &str) -> Result<(), String> {
    use rdkafka::types::RDKafkaErrorCode;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| e.to_string())?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = runtime()
        .block_on(admin.delete_topics(&[topic], &options))
        .map_err(|e| e.to_string())?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((t, e)) => return Err(format!("delete topic {t}: {e}")),
        }
    }
    Ok(())
}

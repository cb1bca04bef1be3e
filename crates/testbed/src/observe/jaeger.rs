//! Jaeger v2 all-in-one with in-memory storage, OTLP in (HTTP and gRPC) and its query
//! API out, every listener on a port of ours and its own metrics off (they would take
//! a fixed port). The binary is the one `scripts/go-tool.sh` builds once from the Go
//! module proxy and caches by version (`JAEGER_VERSION`, default v1.76.0): building it
//! stays that script's.

use crate::error::{Error, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{answers, start_on_free_ports, temp_dir, write};
use crate::ports::accepts;
use crate::process::{Owned, Spawn, TempDir};

/// The version built when `JAEGER_VERSION` is not set.
pub const DEFAULT_VERSION: &str = "v1.76.0";

/// A Jaeger of its own; stopped (SIGTERM, then KILL after 10 s) and its directory
/// removed when dropped.
#[derive(Debug)]
pub struct Jaeger {
    /// `http://127.0.0.1:P`: OTLP over HTTP (OTEL_EXPORTER_OTLP_ENDPOINT).
    pub otlp_http: String,
    /// `127.0.0.1:Q`: OTLP over gRPC.
    pub otlp_grpc: String,
    /// `127.0.0.1:R`: the query API (`/api/services`, `/api/traces/ID`).
    pub query: String,
    child: Owned,
    dir: TempDir,
}

fn config(p: &[u16]) -> String {
    let (http, grpc, query, query_grpc, health) = (p[0], p[1], p[2], p[3], p[4]);
    format!(
        "service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"
    )
}

/// The binary of `version`, built once by `scripts/go-tool.sh`.
pub fn binary(scripts: &Path, version: &str) -> Result<String> {
    let out = Command::new(scripts.join("go-tool.sh"))
        .args(["github.com/jaegertracing/jaeger/cmd/jaeger", version])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Tool(format!("scripts/go-tool.sh: {e}")))?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        Ok(path)
    } else {
        Err(Error::Server(format!(
            "scripts/go-tool.sh could not build Jaeger {version} ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

impl Jaeger {
    /// Starts one (`JAEGER_VERSION`; waiting up to `JAEGER_START_TIMEOUT`, default 60 s)
    /// and waits until its query API answers and its OTLP port accepts.
    pub fn start() -> Result<Jaeger> {
        let version = std::env::var("JAEGER_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_VERSION.into());
        let limit = std::env::var("JAEGER_START_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(60), Duration::from_secs);
        let bin = binary(&crate::scripts::scripts_dir(), &version)?;
        let dir = temp_dir("jaeger")?;
        let home = dir.path().to_owned();
        let (child, ports) = start_on_free_ports(
            "Jaeger",
            5,
            limit,
            Duration::from_millis(50),
            |ports| {
                let file = write(&home, "config.yaml", &config(ports))?;
                Ok(Spawn::new("Jaeger", &bin)
                    .arg("--config")
                    .arg(file)
                    .log(home.join("jaeger.log"))
                    .grace(Duration::from_secs(10)))
            },
            |p| answers(&format!("127.0.0.1:{}", p[2]), "/api/services") && accepts(p[0]),
        )?;
        Ok(Jaeger {
            otlp_http: format!("http://127.0.0.1:{}", ports[0]),
            otlp_grpc: format!("127.0.0.1:{}", ports[1]),
            query: format!("127.0.0.1:{}", ports[2]),
            child,
            dir,
        })
    }

    /// Its directory (`config.yaml`, `jaeger.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_listener_is_on_a_port_of_ours() {
        let text = super::config(&[1001, 1002, 1003, 1004, 1005]);
        for (what, port) in [
            ("http", 1001),
            ("grpc", 1002),
            ("query", 1003),
            ("query grpc", 1004),
            ("health", 1005),
        ] {
            assert!(
                text.contains(&format!("endpoint: 127.0.0.1:{port}\n")),
                "{what}"
            );
        }
        assert_eq!(text.matches("endpoint: ").count(), 5, "{text}");
    }
}

//! What a finished run of the binary left: its exit code and both streams (`Run`), and
//! the cycle's result JSON it printed (`CycleResult`), its field names checked. Plain
//! data, below the process that makes a `Run` (`process`) and the failure hook's tests.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// A finished process: exit code and both streams.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn result(&self) -> CycleResult {
        let lines: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "stdout must be one JSON line: {:?}",
            self.stdout
        );
        CycleResult::parse(lines[0])
    }
}

/// The cycle result JSON, with its exact field names checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleResult {
    pub run_id: Uuid,
    pub as_of: DateTime<Utc>,
    pub reserve: i64,
    pub booking: i64,
    pub skipped: i64,
    pub poison: i64,
    pub duration_ms: i64,
}

impl CycleResult {
    pub fn parse(line: &str) -> Self {
        let v: Value = serde_json::from_str(line).expect("result is JSON");
        let obj = v.as_object().expect("result is an object");
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "AsOf",
                "BookingExpiredCount",
                "DurationMs",
                "PoisonCount",
                "ReserveExpiredCount",
                "RunId",
                "SkippedLockedCount"
            ]
        );
        let int = |k: &str| {
            obj[k]
                .as_i64()
                .unwrap_or_else(|| panic!("{k} is an integer"))
        };
        CycleResult {
            run_id: obj["RunId"].as_str().unwrap().parse().unwrap(),
            as_of: DateTime::parse_from_rfc3339(obj["AsOf"].as_str().unwrap())
                .unwrap()
                .with_timezone(&Utc),
            reserve: int("ReserveExpiredCount"),
            booking: int("BookingExpiredCount"),
            skipped: int("SkippedLockedCount"),
            poison: int("PoisonCount"),
            duration_ms: int("DurationMs"),
        }
    }

    /// (ReserveExpiredCount, BookingExpiredCount, SkippedLockedCount, PoisonCount)
    pub fn counts(&self) -> (i64, i64, i64, i64) {
        (self.reserve, self.booking, self.skipped, self.poison)
    }
}

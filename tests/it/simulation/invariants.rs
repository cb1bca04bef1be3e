//! The invariants, checked after every minute against the model: expiries (ii–iv),
//! the new outbox rows (iii), what is due (i), the quarantine (vi), the active rows
//! (hourly), and the relay and the topic (vii).

use super::*;

impl Sim {
    /// (ii) nothing expires before its deadline, (iii) one audit, one timeline and one
    /// outbox row per expiry, (iv) a manager's committed change always wins: every
    /// expiry of the run is checked against the model.
    pub(super) fn check_expiries(
        &mut self,
        run_id: Uuid,
        as_of: DateTime<Utc>,
        manager_won: &HashSet<Uuid>,
        manager_lost: &HashSet<Uuid>,
    ) {
        let rows = self
            .sim
            .query(
                "SELECT booking_id, from_status, to_status, version, at
                   FROM crm.booking_audit WHERE run_id = $1",
                &[&run_id],
            )
            .unwrap();
        let ids: Vec<Uuid> = rows.iter().map(|r| r.get(0)).collect();
        if ids.is_empty() && manager_lost.is_empty() {
            return;
        }
        let keys: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        let counts = |sim: &mut Client, sql: &str, param: &(dyn postgres::types::ToSql + Sync)| {
            sim.query(sql, &[param])
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r.get::<_, String>(0),
                        (r.get::<_, i64>(1), r.get::<_, String>(2)),
                    )
                })
                .collect::<HashMap<String, (i64, String)>>()
        };
        let audits = counts(
            &mut self.sim,
            "SELECT booking_id::text, count(*), '' FROM crm.booking_audit
              WHERE booking_id = ANY($1) GROUP BY booking_id",
            &ids,
        );
        let timelines = counts(
            &mut self.sim,
            "SELECT booking_id::text, count(*), '' FROM crm.deal_timeline
              WHERE booking_id = ANY($1) GROUP BY booking_id",
            &ids,
        );
        let events = counts(
            &mut self.sim,
            "SELECT aggregateid, count(*), min(id::text) FROM crm.outbox
              WHERE aggregateid = ANY($1) GROUP BY aggregateid",
            &keys,
        );
        let mut expired_here = HashSet::new();
        for r in &rows {
            let id: Uuid = r.get(0);
            let from: String = r.get(1);
            let to: String = r.get(2);
            let version: i64 = r.get(3);
            let at: DateTime<Utc> = r.get(4);
            let key = id.to_string();
            let count_of = |m: &HashMap<String, (i64, String)>| m.get(&key).map_or(0, |c| c.0);
            let (audits, timelines, outboxes) =
                (count_of(&audits), count_of(&timelines), count_of(&events));
            let Some(b) = self.bookings.get(&id).cloned() else {
                self.violated(&format!("an expiry of a booking nobody created: {id}"));
            };
            self.check(!manager_won.contains(&id), || {
                format!("(iv) booking {id} expired although a manager's change committed")
            });
            self.check(b.status.active() && b.status.as_str() == from, || {
                format!(
                    "(iv) booking {id} expired from {from}, but it was {:?}",
                    b.status
                )
            });
            self.check(version == b.version + 1, || {
                format!(
                    "(iv) booking {id} expired at version {version}, expected {}",
                    b.version + 1
                )
            });
            self.check(to == b.status.expired_into().as_str(), || {
                format!("booking {id}: {from} expired into {to}")
            });
            let deadline = b.deadline().unwrap();
            self.check(deadline < at && at == as_of, || {
                format!("(ii) booking {id} expired at {at} with deadline {deadline}")
            });
            self.check(!b.bad(), || {
                format!("booking {id} is poison but was expired")
            });
            self.check(audits == 1 && timelines == 1 && outboxes == 1, || {
                format!(
                    "(iii) booking {id}: {audits} audit, {timelines} timeline, {outboxes} outbox rows"
                )
            });
            if let Some((_, event)) = events.get(&key) {
                self.events.insert(event.parse().unwrap());
            }
            self.active.remove(id, deadline);
            let mut e = b.clone();
            e.status = b.status.expired_into();
            e.version += 1;
            let status = e.status;
            self.bookings.insert(id, e);
            expired_here.insert(id);
            match status {
                St::ReserveExpired => self.stats.reserve_expired += 1,
                _ => self.stats.booking_expired += 1,
            }
        }
        for id in manager_lost {
            self.check(expired_here.contains(id), || {
                format!("(iv) the manager lost the race for {id}, yet the cycle did not expire it")
            });
        }
    }

    /// (iii) every outbox row written since the last look is the one event of an
    /// expiry the model knows: no second event for an expiry, none without one.
    pub(super) fn check_new_events(&mut self) {
        // Plain index reads (by seq, then by key): the checks must not depend on fresh
        // statistics either, right after a burst.
        let rows = self
            .sim
            .query(
                "WITH n AS (DELETE FROM sim.new_event RETURNING seq)
                 SELECT o.seq, o.aggregateid FROM n JOIN crm.outbox o USING (seq)
                  ORDER BY o.seq",
                &[],
            )
            .unwrap();
        if rows.is_empty() {
            return;
        }
        let keys: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
        let copies: HashMap<String, i64> = self
            .sim
            .query(
                "SELECT aggregateid, count(*) FROM crm.outbox WHERE aggregateid = ANY($1)
                  GROUP BY aggregateid",
                &[&keys],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for key in keys {
            let copies = copies.get(&key).copied().unwrap_or(0);
            let expired = key
                .parse::<Uuid>()
                .ok()
                .and_then(|id| self.bookings.get(&id))
                .is_some_and(|b| matches!(b.status, St::ReserveExpired | St::BookingExpired));
            self.check(copies == 1 && expired, || {
                format!("(iii) booking {key} has {copies} outbox rows (expired: {expired})")
            });
        }
    }

    /// (i) every booking due at AsOf — not poison, not held by a racing manager — is
    /// expired by the cycle at AsOf: its deadline t expired by t + 60 s + the cycle.
    pub(super) fn check_due_expired(&mut self, as_of: DateTime<Utc>, contested: &HashSet<Uuid>) {
        for id in self.active.due(as_of) {
            let b = &self.bookings[&id];
            if b.bad() || contested.contains(&id) {
                continue;
            }
            let deadline = b.deadline().unwrap();
            self.violated(&format!(
                "(i) booking {id} ({:?}, deadline {deadline}) is still active after the cycle at {as_of}",
                b.status
            ));
        }
        self.stats.checks += 1;
    }

    /// (vi) the quarantine holds only rows that are still bad, at the version they
    /// were quarantined with; a bad row that is due is in it. Checked after every cycle
    /// that ran whole.
    pub(super) fn check_quarantine(
        &mut self,
        as_of: DateTime<Utc>,
        fault: bool,
        contested: &HashSet<Uuid>,
        changed_after_the_cycle: &HashSet<Uuid>,
    ) {
        // A cycle that failed may not have done its upkeep (releasing stale entries):
        // the next one does, and is checked.
        if fault {
            return;
        }
        let rows = self
            .sim
            .query(
                "SELECT booking_id, booking_version, reason FROM crm.booking_expiration_poison",
                &[],
            )
            .unwrap();
        let mut quarantined = HashSet::new();
        for r in &rows {
            let id: Uuid = r.get(0);
            let version: Option<i64> = r.get(1);
            let reason: String = r.get(2);
            quarantined.insert(id);
            // A manager changed it after the cycle: the next cycle releases the entry.
            if changed_after_the_cycle.contains(&id) {
                continue;
            }
            let b = self.bookings.get(&id).cloned();
            self.check(
                b.as_ref()
                    .is_some_and(|b| b.bad() && b.status.active() && Some(b.version) == version),
                || format!("(vi) quarantine holds {id} at version {version:?}, but it is {b:?}"),
            );
            let expected = b
                .as_ref()
                .filter(|b| b.db_bad && !b.guard_bad)
                .and_then(|b| b.refusal.reason());
            self.check(expected.is_none_or(|e| e == reason), || {
                format!(
                    "(vi) booking {id} quarantined with reason {reason:?}, expected {expected:?}"
                )
            });
        }
        for id in self.active.due(as_of) {
            let b = &self.bookings[&id];
            if b.bad() && !contested.contains(&id) {
                self.check(quarantined.contains(&id), || {
                    format!("(vi) poison booking {id} is due but not quarantined")
                });
            }
        }
    }

    /// The model and the database agree on every active booking (hourly).
    pub(super) fn check_active_rows(&mut self) {
        let rows = self
            .sim
            .query(
                "SELECT id, version::int8 FROM crm.bookings
                  WHERE status IN ('Reserved', 'AwaitingPayment', 'Booked')",
                &[],
            )
            .unwrap();
        let in_db: HashMap<Uuid, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let in_model: HashMap<Uuid, i64> = self
            .active
            .list
            .iter()
            .map(|id| (*id, self.bookings[id].version))
            .collect();
        if in_db != in_model {
            let extra: Vec<_> = in_db
                .keys()
                .filter(|k| !in_model.contains_key(k))
                .take(3)
                .collect();
            let missing: Vec<_> = in_model
                .keys()
                .filter(|k| !in_db.contains_key(k))
                .take(3)
                .collect();
            self.violated(&format!(
                "the active bookings differ from the model: {} in the database, {} in the \
                 model (e.g. only in the database {extra:?}, only in the model {missing:?})",
                in_db.len(),
                in_model.len()
            ));
        }
        self.stats.checks += 1;
    }

    /// (vii) the relay, in process with the simulated clock: every row written before
    /// it ends published, none failed.
    pub(super) fn relay(&mut self) {
        let mut result = RelayResult {
            run_id: Uuid::new_v4(),
            ..Default::default()
        };
        if let Err(e) = relay::relay_outbox(
            &self.relay_cfg,
            Ambient {
                clock: &self.clock,
                monotonic: &SystemMonotonic,
                shutdown: &Shutdown::new(),
            },
            &mut result,
        ) {
            self.violated(&format!(
                "(vii) the relay failed with no fault injected: {e:#}"
            ));
        }
        self.stats.relay_runs += 1;
        self.stats.published += result.published;
        let left = self
            .sim
            // Through the two partial indexes, so the check costs the same after months
            // of published rows.
            .query_one(
                "SELECT (SELECT count(*) FROM crm.outbox
                          WHERE published_at IS NULL AND failed_at IS NULL),
                        (SELECT count(*) FROM crm.outbox WHERE failed_at IS NOT NULL)",
                &[],
            )
            .unwrap();
        let (pending, failed): (i64, i64) = (left.get(0), left.get(1));
        self.check(pending == 0 && failed == 0, || {
            format!("(vii) after the relay: {pending} rows pending, {failed} failed")
        });
    }

    /// (vii) at the end: every event ever written is on the topic, in per-key order.
    pub(super) fn check_topic(&mut self) {
        let got = consume(
            &self.brokers,
            &self.topic,
            6,
            self.events.len(),
            Duration::from_secs(300),
        );
        let mut seen: HashMap<String, Vec<i64>> = HashMap::new();
        let mut ids = HashSet::new();
        for m in &got {
            ids.insert(m.headers["ce_id"].parse::<Uuid>().unwrap());
            seen.entry(m.key.clone()).or_default().push(m.offset);
        }
        let lost: Vec<Uuid> = self
            .events
            .iter()
            .filter(|e| !ids.contains(e))
            .copied()
            .collect();
        let total = self.events.len();
        self.check(lost.is_empty(), || {
            format!(
                "(vii) {} of {total} events never reached the topic, e.g. {:?}",
                lost.len(),
                &lost[..lost.len().min(5)]
            )
        });
        for (key, offsets) in &seen {
            self.check(offsets.windows(2).all(|w| w[0] < w[1]), || {
                format!("(vii) key {key} out of order: {offsets:?}")
            });
        }
    }
}

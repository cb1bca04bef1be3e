//! The faults injected: odd deadlines, expiries the database refuses, read-only periods,
//! promotions of a standby, reconnections, a relay killed mid-batch, and the deliberate
//! breaks of an invariant (`SIM_SABOTAGE`) that show the checks catch them.

use super::*;

impl Sim {
    /// A few new bookings whose running deadline is one PostgreSQL holds and chrono
    /// cannot: `-infinity` is overdue at once, `infinity` and the year 290000 never due.
    pub(super) fn create_odd_deadlines(&mut self) {
        let n = 1 + self.rng.below(3) as usize;
        for id in self.create(n, 3_600, 86_400) {
            let (literal, model) = ODD_DEADLINES[self.rng.below(3) as usize];
            let mut b = self.bookings[&id].clone();
            self.active.remove(id, b.deadline().unwrap());
            let column = if b.status == St::Booked {
                b.booking = Some(model);
                "booking_expires_at"
            } else {
                b.reserve = model;
                "reserve_expires_at"
            };
            self.sim
                .execute(
                    &format!(
                        "UPDATE crm.bookings SET {column} = $2::text::timestamptz WHERE id = $1"
                    ),
                    &[&id, &literal],
                )
                .unwrap();
            self.active.insert(id, model);
            self.bookings.insert(id, b);
            self.stats.faults_odd_deadline += 1;
        }
    }

    /// A booking, due now if one is, whose expiry the database will refuse from now on:
    /// a deferred constraint, or a trigger dropping the update. Either must end in the
    /// quarantine with its reason, never in a failed cycle.
    pub(super) fn refuse_a_booking(&mut self, refusal: Refusal) {
        let due: Vec<Uuid> = self
            .active
            .due(self.now())
            .into_iter()
            .filter(|id| !self.bookings[id].bad())
            .collect();
        let id = if due.is_empty() {
            match self.active.pick(&mut self.rng) {
                Some(id) if !self.bookings[&id].bad() => id,
                _ => return,
            }
        } else {
            due[self.rng.below(due.len() as u64) as usize]
        };
        self.sim
            .execute(
                "INSERT INTO sim.refused VALUES ($1, $2)
                 ON CONFLICT (booking_id) DO UPDATE SET how = EXCLUDED.how",
                &[&id, &refusal.as_str()],
            )
            .unwrap();
        let b = self.bookings.get_mut(&id).unwrap();
        b.db_bad = true;
        b.refusal = refusal;
        match refusal {
            Refusal::Deferred => self.stats.faults_deferred += 1,
            _ => self.stats.faults_dropped += 1,
        }
    }

    /// The database turns read-only for new sessions (as a demoted primary does during
    /// a failover) or back. The simulation's own session stays writable: it is the CRM.
    pub(super) fn set_read_only(&mut self, on: bool) {
        let db: String = self
            .sim
            .query_one("SELECT current_database()", &[])
            .unwrap()
            .get(0);
        let sql = if on {
            format!("ALTER DATABASE \"{db}\" SET default_transaction_read_only = on")
        } else {
            format!("ALTER DATABASE \"{db}\" RESET default_transaction_read_only")
        };
        self.sim.batch_execute(&sql).unwrap();
    }

    /// A failover: the standby (made now for the first) replays everything, the
    /// primary dies as in a crash, the standby is promoted, and a fresh standby of the
    /// new primary waits for the next one. Waiting for the replay first means nothing
    /// committed is lost, so every invariant still holds; what an asynchronous standby
    /// loses when it lags is tested in tests/failover.rs.
    pub(super) fn promote(&mut self) {
        let standby = match self.standby.take() {
            Some(standby) => standby,
            None => OwnPostgres::standby_of(&self.pg),
        };
        self.pg.wait_replayed_by(&standby);
        self.pg.stop_immediately();
        standby.promote();
        drop(std::mem::replace(&mut self.pg, standby));
        let fresh = OwnPostgres::standby_of(&self.pg);
        // The standby first: the job must pick the primary by target_session_attrs.
        self.url = format!(
            "postgres://postgres@{},{}/postgres?target_session_attrs=read-write",
            fresh.address(),
            self.pg.address()
        );
        self.standby = Some(fresh);
        self.cfg = run_once_config(&self.url, CYCLE_FLAGS);
        self.relay_cfg = relay_config(&self.url, &self.brokers);
        self.reconnect_sim();
        self.promoted_at = Some(self.minute);
        self.stats.faults_promotion += 1;
    }

    pub(super) fn reconnect(&mut self) {
        let (db, stmts) = open_session(&self.cfg);
        self.db = db;
        self.stmts = stmts;
        self.reconnect_sim();
    }

    pub(super) fn reconnect_sim(&mut self) {
        self.sim = self.pg.client();
        // The CRM's writes go on through a read-only period: only the job's sessions
        // are the subject.
        self.sim
            .batch_execute("SET default_transaction_read_only = off")
            .unwrap();
    }

    pub(super) fn kill_a_relay_mid_batch(&mut self) {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args([
            "relay-outbox",
            "--database-url",
            &self.url,
            "--brokers",
            &self.brokers,
            "--batch-size",
            "50",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        let child = Background::start(cmd);
        // Behaviour: the kill lands at a random point of the relay's run, not after a condition.
        std::thread::sleep(Duration::from_millis(20 + self.rng.below(200)));
        send_signal(&child.child, "KILL");
        let _ = child.wait();
        self.stats.faults_relay_kill += 1;
    }

    pub(super) fn sabotage_now(&mut self, as_of: DateTime<Utc>) {
        let Some((what, at)) = self.sabotage else {
            return;
        };
        if self.minute != at {
            return;
        }
        match what {
            Sabotage::LoseEvent => {
                self.sim
                    .batch_execute(
                        "DELETE FROM crm.outbox WHERE id = (SELECT id FROM crm.outbox
                          WHERE published_at IS NULL ORDER BY seq DESC LIMIT 1)",
                    )
                    .unwrap();
            }
            Sabotage::DuplicateEvent => {
                self.sim
                    .batch_execute(
                        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic,
                                                 payload, headers, occurred_at)
                         SELECT gen_random_uuid(), aggregatetype, aggregateid, type, topic,
                                payload, headers, occurred_at
                           FROM crm.outbox ORDER BY seq DESC LIMIT 1",
                    )
                    .unwrap();
            }
            Sabotage::ExpireEarly => {
                let victim = self
                    .active
                    .by_deadline
                    .range((as_of + TimeDelta::days(1), Uuid::nil())..)
                    .next()
                    .map(|(_, id)| *id)
                    .expect("a booking due in more than a day");
                let run_id = Uuid::new_v4();
                let b = &self.bookings[&victim];
                let to = b.status.expired_into();
                self.sim
                    .execute(
                        "WITH e AS (UPDATE crm.bookings SET status = $2, expired_at = $3,
                                           version = version + 1
                                     WHERE id = $1 RETURNING id, tenant_id, version)
                         INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status,
                                     to_status, version, actor, run_id, at)
                         SELECT id, tenant_id, $4, $2, version, 'sabotage', $5, $3 FROM e",
                        &[&victim, &to.as_str(), &as_of, &b.status.as_str(), &run_id],
                    )
                    .unwrap();
                self.check_expiries(run_id, as_of, &HashSet::new(), &HashSet::new());
            }
        }
    }
}

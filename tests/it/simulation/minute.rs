//! One simulated minute: the clock moved, the workload and the faults of the minute,
//! the cycle (with managers holding and racing its rows), the checks, and the relay
//! every half hour.

use super::*;

impl Sim {
    pub(super) fn minute(&mut self) {
        let as_of = self.start + TimeDelta::minutes(self.minute as i64);
        self.clock.set(as_of);

        let t0 = Instant::now();
        // Work arriving: new bookings, a burst now and then, managers, repairs.
        let n = self.rng.below(13) as usize;
        self.create(n, 1, 3 * 86_400);
        if self.rng.one_in(1_440) {
            self.create(10_000, 1, 60);
            self.stats.bursts += 1;
        }
        // Odd rows, now and then: a few a week of each kind.
        if self.rng.one_in(720) {
            self.create_odd_deadlines();
        }
        if self.rng.one_in(720) {
            self.refuse_a_booking(Refusal::Deferred);
        }
        if self.rng.one_in(720) {
            self.refuse_a_booking(Refusal::Dropped);
        }
        self.managers();

        // Faults, announced: only these minutes may see a cycle fail. A statement
        // timeout is injected when there is work due, so that it bites.
        let mut fault = false;
        let due_now = self
            .active
            .due(as_of)
            .iter()
            .any(|id| !self.bookings[id].bad());
        if due_now && self.rng.one_in(360) {
            self.sim
                .batch_execute("UPDATE sim.slow SET on_ = true")
                .unwrap();
            self.db
                .client
                .driver_for_tests()
                .batch_execute("SET statement_timeout = '100ms'")
                .unwrap();
            fault = true;
            self.stats.faults_timeout += 1;
        }
        if self.rng.one_in(720) {
            self.pg.restart();
            // The CRM's own session reconnects at once (a read-only period may begin in
            // this same minute, through it); the job's learns of the restart itself.
            self.reconnect_sim();
            fault = true;
            self.stats.faults_restart += 1;
        }
        // A promotion, about three a week and at most one a day.
        if self.promoted_at.is_none_or(|at| self.minute >= at + 1_440) && self.rng.one_in(2_880) {
            self.promote();
            fault = true;
        }
        // A read-only period of 2 to 5 minutes, about one a day: every cycle in it is a
        // fresh run-once that must refuse before any work, naming target_session_attrs.
        let mut read_only = false;
        match self.read_only_until {
            Some(until) if self.minute >= until => {
                self.set_read_only(false);
                self.read_only_until = None;
                self.reconnect();
            }
            Some(_) => read_only = true,
            None if self.rng.one_in(1_440) => {
                self.set_read_only(true);
                self.read_only_until = Some(self.minute + 2 + self.rng.below(4));
                self.stats.faults_read_only += 1;
                read_only = true;
            }
            None => {}
        }
        if read_only {
            fault = true;
            self.stats.read_only_minutes += 1;
        }
        // The outbox's sequence CACHE altered now and then, as a DBA might: each session
        // of the job then draws seq from a block of its own, so a cycle's rows may take
        // lower seqs than rows an earlier cycle (on another session) committed.
        if !read_only && self.rng.one_in(360) {
            let cache = [1, 1, 20, 50][self.rng.below(4) as usize];
            self.sim
                .batch_execute(&format!(
                    "DO $$ BEGIN
                       EXECUTE format('ALTER SEQUENCE %s CACHE {cache}',
                                      pg_get_serial_sequence('crm.outbox', 'seq'));
                     END $$"
                ))
                .unwrap();
            self.stats.caches_altered += 1;
        }

        // Managers racing the cycle: some hold due rows locked through the whole cycle,
        // others try to change due rows while it runs.
        let due = self.active.due(as_of);
        let mut contested: HashSet<Uuid> = HashSet::new();
        let mut holder = None;
        let mut racers = Vec::new();
        if !fault && !due.is_empty() && self.rng.one_in(5) {
            let mut held: Vec<(Uuid, Change)> = Vec::new();
            for _ in 0..self.rng.below(3) + 1 {
                let id = due[self.rng.below(due.len() as u64) as usize];
                if !held.iter().any(|h| h.0 == id) {
                    held.push((id, Change::draw(&mut self.rng)));
                }
            }
            contested.extend(held.iter().map(|h| h.0));
            holder = Some(self.hold(held));
        }
        if !fault && !due.is_empty() && self.rng.one_in(5) {
            let id = due[self.rng.below(due.len() as u64) as usize];
            if !contested.contains(&id) {
                contested.insert(id);
                let change = Change::draw(&mut self.rng);
                let delay = self.rng.below(5);
                racers.push((id, change.clone(), self.race(id, change, delay)));
            }
        }

        let t1 = Instant::now();
        self.stats.time_workload += t1 - t0;
        // The cycle. Every hour the whole run-once (connect, clock and schema checks),
        // otherwise the cycle on the kept session.
        let mut result = CycleResult {
            run_id: Uuid::new_v4(),
            ..Default::default()
        };
        let shutdown = Shutdown::new();
        let outcome = if read_only || self.minute % 60 == 59 {
            cycle::run_once(
                &self.cfg,
                Ambient {
                    clock: &self.clock,
                    monotonic: &SystemMonotonic,
                    shutdown: &shutdown,
                },
                &mut result,
            )
        } else {
            cycle::run_cycle(
                &mut self.db,
                &self.stmts,
                &self.cfg,
                as_of,
                Ambient {
                    clock: &self.clock,
                    monotonic: &SystemMonotonic,
                    shutdown: &shutdown,
                },
                &mut result,
            )
        };
        self.stats.cycles += 1;
        // The wall-time split is reported at the end, never asserted.
        self.stats.time_cycle += t1.elapsed();
        let t2 = Instant::now();
        self.stats.skipped_locked += result.skipped_locked_count;
        self.stats.poison_seen += result.poison_count;

        // The racing managers end: the holders commit their change now.
        let mut manager_won = HashSet::new();
        if let Some((go, done)) = holder {
            go.send(()).unwrap();
            let committed: Vec<(Uuid, Change)> = done.recv().unwrap();
            for (id, change) in committed {
                self.model_change(id, &change, as_of);
                manager_won.insert(id);
                self.stats.racing_managers_won += 1;
            }
        }
        let mut manager_lost = HashSet::new();
        for (id, change, done) in racers {
            if done.join().unwrap() {
                self.model_change(id, &change, as_of);
                manager_won.insert(id);
                self.stats.racing_managers_won += 1;
            } else {
                manager_lost.insert(id);
                self.stats.racing_managers_lost += 1;
            }
        }

        if read_only {
            match &outcome {
                // Through the multi-host URL no server is writable: refused on connecting,
                // with the same advice.
                Err(e) if format!("{e:#}").contains("target_session_attrs=read-write") => {}
                Err(e) => self.violated(&format!(
                    "a cycle in a read-only period failed, but not naming \
                     target_session_attrs=read-write: {e:#}"
                )),
                Ok(()) => self.violated("a cycle ran whole in a read-only period"),
            }
        }
        if fault {
            if outcome.is_err() {
                self.stats.failed_cycles += 1;
            }
            // In a read-only period a multi-host URL finds no writable server: the
            // cycle's session is opened again when the period ends.
            if read_only {
                self.reconnect_sim();
            } else {
                self.reconnect();
            }
            self.sim
                .batch_execute("UPDATE sim.slow SET on_ = false")
                .unwrap();
        } else if let Err(e) = &outcome {
            self.violated(&format!("(v) a cycle failed with no fault injected: {e:#}"));
        }

        self.sabotage_now(as_of);
        self.check_expiries(result.run_id, as_of, &manager_won, &manager_lost);
        self.check_new_events();
        if !fault {
            self.check_due_expired(as_of, &contested);
        }
        self.check_quarantine(as_of, fault, &contested, &manager_won);
        if self.minute.is_multiple_of(60) {
            self.check_active_rows();
        }
        self.stats.time_checks += t2.elapsed();
        let t3 = Instant::now();
        // The relay writes too: in a read-only period it waits for the next half hour.
        if self.minute % 1_440 == 720 && !read_only {
            self.kill_a_relay_mid_batch();
        }
        if self.minute % 30 == 29 && !read_only {
            self.relay();
        }
        self.stats.time_relay += t3.elapsed();
    }
}

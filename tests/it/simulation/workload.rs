//! The seeded workload: new bookings (and bursts), managers who extend, confirm, cancel
//! and repair them, as the CRM writes it (version-guarded), also while a cycle holds
//! its locks or races it.

use super::*;

/// Uniform whole seconds in `[from, to)`.
pub(super) fn seconds(rng: &mut Rng, from: i64, to: i64) -> TimeDelta {
    TimeDelta::seconds(from + rng.below((to - from) as u64) as i64)
}

impl Sim {
    pub(super) fn create(&mut self, n: usize, deadline_from: i64, deadline_to: i64) -> Vec<Uuid> {
        let now = self.now();
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            let id = Uuid::from_u64_pair(self.rng.next(), self.rng.next());
            let status = match self.rng.below(10) {
                0..=3 => St::Reserved,
                4..=5 => St::AwaitingPayment,
                _ => St::Booked,
            };
            // One in ten deadlines falls exactly on a minute: an AsOf will equal it.
            let mut deadline = now + seconds(&mut self.rng, deadline_from, deadline_to);
            if self.rng.one_in(10) {
                deadline =
                    DateTime::from_timestamp(deadline.timestamp() - deadline.timestamp() % 60, 0)
                        .unwrap()
                        .max(now + TimeDelta::minutes(1));
            }
            let (reserve, booking) = match status {
                St::Booked => (now - TimeDelta::hours(1), Some(deadline)),
                _ => (deadline, None),
            };
            let guard_bad = self.rng.one_in(100);
            let db_bad = !guard_bad && self.rng.one_in(200);
            let b = Booking {
                status,
                reserve,
                booking,
                version: 1,
                guard_bad,
                db_bad,
                refusal: Refusal::Raise,
            };
            self.active.insert(id, deadline);
            rows.push((id, b.clone()));
            self.bookings.insert(id, b);
        }
        self.stats.created += n as u64;
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let statuses: Vec<&str> = rows.iter().map(|r| r.1.status.as_str()).collect();
        let reserves: Vec<DateTime<Utc>> = rows.iter().map(|r| r.1.reserve).collect();
        let bookings: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.1.booking).collect();
        let guard_bad: Vec<bool> = rows.iter().map(|r| r.1.guard_bad).collect();
        let refused: Vec<Uuid> = rows.iter().filter(|r| r.1.db_bad).map(|r| r.0).collect();
        self.sim
            .execute(
                "INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
                     reserve_expires_at, booking_expires_at, expired_at, created_at, updated_at,
                     version)
                 SELECT id, gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), s, r, b,
                        CASE WHEN g THEN $6::timestamptz - interval '1 day' END, $6, $6, 1
                   FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[],
                               $5::bool[]) AS x(id, s, r, b, g)",
                &[&ids, &statuses, &reserves, &bookings, &guard_bad, &now],
            )
            .unwrap();
        if !refused.is_empty() {
            self.sim
                .execute(
                    "INSERT INTO sim.refused SELECT unnest($1::uuid[])",
                    &[&refused],
                )
                .unwrap();
        }
        ids
    }

    /// A manager's committed change, version-guarded as the CRM writes it.
    pub(super) fn apply_change(&mut self, id: Uuid, change: &Change) -> bool {
        let b = self.bookings[&id].clone();
        let now = self.now();
        let updated = manager_update(&mut self.sim, id, &b, change, now);
        if updated == 1 {
            self.model_change(id, change, now);
        }
        updated == 1
    }

    pub(super) fn model_change(&mut self, id: Uuid, change: &Change, now: DateTime<Utc>) {
        let b = self.bookings[&id].clone();
        let (status, reserve, booking, clears) = change.after(&b, now);
        if let Some(d) = b.deadline() {
            self.active.remove(id, d);
        }
        let mut new = Booking {
            status,
            reserve,
            booking,
            version: b.version + 1,
            guard_bad: b.guard_bad && !clears,
            db_bad: b.db_bad && !matches!(change, Change::Repair),
            refusal: b.refusal,
        };
        if !status.active() {
            new.guard_bad = false;
            new.db_bad = false;
        }
        if let Some(d) = new.deadline() {
            self.active.insert(id, d);
        }
        self.bookings.insert(id, new);
    }

    pub(super) fn managers(&mut self) {
        let n = self.rng.below(4);
        for _ in 0..n {
            // Half of the time a booking that is due right now: the race that matters.
            let due = self.active.due(self.now());
            let id = if !due.is_empty() && self.rng.one_in(2) {
                due[self.rng.below(due.len() as u64) as usize]
            } else {
                match self.active.pick(&mut self.rng) {
                    Some(id) => id,
                    None => continue,
                }
            };
            let change = Change::draw(&mut self.rng);
            assert!(self.apply_change(id, &change), "uncontended change");
            self.stats.manager_actions += 1;
        }
        // Repairs of poison rows, and a cancel of one now and then.
        let bad: Vec<Uuid> = self
            .active
            .list
            .iter()
            .copied()
            .filter(|id| self.bookings[id].bad())
            .collect();
        for id in bad {
            if self.rng.one_in(240) {
                let change = if self.rng.one_in(4) {
                    Change::Cancel
                } else {
                    Change::Repair
                };
                if matches!(change, Change::Repair) && self.bookings[&id].db_bad {
                    self.sim
                        .execute("DELETE FROM sim.refused WHERE booking_id = $1", &[&id])
                        .unwrap();
                }
                assert!(self.apply_change(id, &change));
                self.stats.repairs += 1;
            }
        }
    }

    /// A manager that locks `rows` (its change written, not committed) before the
    /// cycle starts, and commits when told to, after the cycle.
    #[allow(clippy::type_complexity)]
    pub(super) fn hold(
        &mut self,
        rows: Vec<(Uuid, Change)>,
    ) -> (mpsc::Sender<()>, mpsc::Receiver<Vec<(Uuid, Change)>>) {
        let (go, wait) = mpsc::channel::<()>();
        let (done, result) = mpsc::channel();
        let (locked, is_locked) = mpsc::channel::<()>();
        let url = self.pg.url.clone();
        let now = self.now();
        let rows: Vec<(Uuid, Change, Booking)> = rows
            .into_iter()
            .map(|(id, ch)| {
                let b = self.bookings[&id].clone();
                (id, ch, b)
            })
            .collect();
        std::thread::spawn(move || {
            let mut c = Client::connect(&url, NoTls).unwrap();
            let mut tx = c.transaction().unwrap();
            let mut committed = Vec::new();
            for (id, change, b) in rows {
                let n = manager_update(&mut tx, id, &b, &change, now);
                assert_eq!(n, 1, "the holder locks before the cycle starts");
                committed.push((id, change));
            }
            locked.send(()).unwrap();
            wait.recv().unwrap();
            tx.commit().unwrap();
            done.send(committed).unwrap();
        });
        is_locked.recv().unwrap();
        (go, result)
    }

    /// A manager that tries, `delay_ms` into the cycle, to change a due booking, as
    /// the CRM would: waits for its lock, then writes only if the version is unchanged.
    pub(super) fn race(
        &self,
        id: Uuid,
        change: Change,
        delay_ms: u64,
    ) -> std::thread::JoinHandle<bool> {
        let url = self.pg.url.clone();
        let now = self.now();
        let b = self.bookings[&id].clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&url, NoTls).unwrap();
            // Behaviour: the manager's write comes a random moment into the cycle, racing it.
            std::thread::sleep(Duration::from_millis(delay_ms));
            manager_update(&mut c, id, &b, &change, now) == 1
        })
    }
}

/// What a manager does to a booking.
#[derive(Debug, Clone)]
pub(super) enum Change {
    /// A later deadline for the running phase.
    Extend(TimeDelta),
    /// Reserve → Booked with a booking deadline; Booked → Completed.
    Confirm(TimeDelta),
    Cancel,
    /// The data fixed: expired_at cleared, the CRM rule lifted.
    Repair,
}

impl Change {
    pub(super) fn draw(rng: &mut Rng) -> Change {
        match rng.below(3) {
            0 => Change::Extend(seconds(rng, 3_600, 2 * 86_400)),
            1 => Change::Confirm(seconds(rng, 3_600, 3 * 86_400)),
            _ => Change::Cancel,
        }
    }

    /// (status, reserve deadline, booking deadline, clears expired_at) after the change.
    pub(super) fn after(
        &self,
        b: &Booking,
        now: DateTime<Utc>,
    ) -> (St, DateTime<Utc>, Option<DateTime<Utc>>, bool) {
        match self {
            Change::Extend(by) => match b.status {
                St::Booked => (b.status, b.reserve, Some(now + *by), false),
                _ => (b.status, now + *by, b.booking, false),
            },
            Change::Confirm(by) if RESERVE_STATUSES.contains(&b.status) => {
                (St::Booked, b.reserve, Some(now + *by), false)
            }
            Change::Confirm(_) => (St::Completed, b.reserve, b.booking, false),
            Change::Cancel => (St::Cancelled, b.reserve, b.booking, false),
            Change::Repair => (b.status, b.reserve, b.booking, true),
        }
    }
}

/// A manager's change as the CRM writes it: guarded on the version it read, so a
/// booking changed meanwhile (expired by the cycle) is left alone. Returns the rows
/// changed (0 or 1).
pub(super) fn manager_update(
    c: &mut impl postgres::GenericClient,
    id: Uuid,
    b: &Booking,
    change: &Change,
    now: DateTime<Utc>,
) -> u64 {
    let (status, reserve, booking, clears) = change.after(b, now);
    // Only the deadlines that change are sent: an infinite one is kept as it is (the
    // model's stand-in for it cannot be encoded).
    let new_reserve = (reserve != b.reserve).then_some(reserve);
    let booking_changes = booking != b.booking;
    let new_booking = if booking_changes { booking } else { None };
    c.execute(
        "UPDATE crm.bookings
            SET status = $3, reserve_expires_at = COALESCE($4, reserve_expires_at),
                booking_expires_at = CASE WHEN $8 THEN $5 ELSE booking_expires_at END,
                expired_at = CASE WHEN $6 THEN NULL ELSE expired_at END,
                updated_at = $7, version = version + 1
          WHERE id = $1 AND version = $2::int8",
        &[
            &id,
            &b.version,
            &status.as_str(),
            &new_reserve,
            &new_booking,
            &clears,
            &now,
            &booking_changes,
        ],
    )
    .unwrap()
}

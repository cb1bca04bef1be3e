//! Isolating the rows that made the database refuse a batch: bisection over sub-batches,
//! generic over the [`Probe`] that tries one, so it runs (and is tested) without a
//! database. The write's probe is a savepoint (`write::Savepoints`).
//!
//! First the whole batch is tried and kept if it passes. Otherwise the refused rows are
//! narrowed down by probing halves whose success is undone (a probe writes nothing),
//! and each row refused on its own is set aside; then the rest is written, in one more
//! try as a rule. Rows refused only together (each passes alone) are separated while the
//! rest is written: a refused part is halved until a row is refused alone. With `k`
//! rows refused on their own in a batch of `n`, the isolation takes at most
//! `2 + 2k⌈log₂ n⌉` tries, and keeps at most one when the refusals are independent.

/// Whether a try that passes is kept (its rows written) or only probed (undone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    Yes,
    No,
}

/// Tries one sub-batch.
pub(super) trait Probe {
    /// What a kept try reports for the rows it wrote.
    type Written;
    /// Why the sub-batch was refused: one of its rows' data.
    type Refusal;
    /// What ends the isolation at once (an infrastructure error).
    type Error;

    /// Tries the rows `part` (indexes into the batch, ascending). `Ok(Ok(_))`: it
    /// passed, and with [`Keep::Yes`] its rows are written (with [`Keep::No`] nothing
    /// is, and what it returns is ignored); `Ok(Err(_))`: refused, nothing written.
    fn try_part(&mut self, part: &[usize], keep: Keep) -> Tried<Self>;
}

/// What one try of a [`Probe`] gives.
pub(super) type Tried<P> =
    Result<Result<Vec<<P as Probe>::Written>, <P as Probe>::Refusal>, <P as Probe>::Error>;

/// What the isolation did: what the kept tries wrote, in the order they were kept, and
/// each row refused, by index (ascending), with the refusal of its own try.
#[derive(Debug, PartialEq)]
pub(super) struct Isolated<W, R> {
    pub written: Vec<W>,
    pub refused: Vec<(usize, R)>,
}

/// Writes a batch of `n` rows through `probe`, setting aside the rows it refuses.
pub(super) fn isolate<P: Probe>(
    n: usize,
    probe: &mut P,
) -> Result<Isolated<P::Written, P::Refusal>, P::Error> {
    let mut out = Isolated {
        written: Vec::new(),
        refused: Vec::new(),
    };
    let all: Vec<usize> = (0..n).collect();
    if all.is_empty() {
        return Ok(out);
    }
    let first = match probe.try_part(&all, Keep::Yes)? {
        Ok(written) => {
            out.written = written;
            return Ok(out);
        }
        Err(refusal) => refusal,
    };
    find_refused(probe, &all, first, &mut out.refused)?;
    let refused: std::collections::HashSet<usize> = out.refused.iter().map(|(i, _)| *i).collect();
    let rest: Vec<usize> = all.into_iter().filter(|i| !refused.contains(i)).collect();
    write_rest(probe, &rest, &mut out)?;
    out.refused.sort_by_key(|(i, _)| *i);
    Ok(out)
}

/// `part` is known to be refused (with `refusal`): narrows it down by probing halves,
/// and records each single row that is refused on its own.
fn find_refused<P: Probe>(
    probe: &mut P,
    part: &[usize],
    refusal: P::Refusal,
    refused: &mut Vec<(usize, P::Refusal)>,
) -> Result<(), P::Error> {
    if let [only] = part {
        refused.push((*only, refusal));
        return Ok(());
    }
    let (left, right) = part.split_at(part.len() / 2);
    for half in [left, right] {
        if let Err(refusal) = probe.try_part(half, Keep::No)? {
            find_refused(probe, half, refusal, refused)?;
        }
    }
    // Both halves passed alone: rows refused only together, which `write_rest`
    // separates.
    Ok(())
}

/// Writes `part`, halving it while it is refused: the rows refused alone are set aside
/// already, so this normally takes one try.
fn write_rest<P: Probe>(
    probe: &mut P,
    part: &[usize],
    out: &mut Isolated<P::Written, P::Refusal>,
) -> Result<(), P::Error> {
    if part.is_empty() {
        return Ok(());
    }
    match probe.try_part(part, Keep::Yes)? {
        Ok(written) => out.written.extend(written),
        Err(refusal) => {
            if let [only] = part {
                out.refused.push((*only, refusal));
                return Ok(());
            }
            let (left, right) = part.split_at(part.len() / 2);
            write_rest(probe, left, out)?;
            write_rest(probe, right, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::convert::Infallible;

    use super::*;

    /// A batch whose rows the fake database refuses: `bad` ones always; of a pair in
    /// `together`, the second when the first is in the same try or written already (a
    /// unique key both claim). A refusal names the first refused row of the try.
    #[derive(Default)]
    struct Rows {
        bad: BTreeSet<usize>,
        together: Vec<(usize, usize)>,
        written: BTreeSet<usize>,
        tries: usize,
        kept: usize,
    }

    impl Rows {
        fn bad(rows: impl IntoIterator<Item = usize>) -> Self {
            Rows {
                bad: rows.into_iter().collect(),
                ..Rows::default()
            }
        }

        fn refused(&self, part: &[usize], row: usize) -> bool {
            self.bad.contains(&row)
                || self.together.iter().any(|&(first, second)| {
                    row == second && (part.contains(&first) || self.written.contains(&first))
                })
        }
    }

    impl Probe for Rows {
        type Written = usize;
        type Refusal = usize;
        type Error = Infallible;

        fn try_part(
            &mut self,
            part: &[usize],
            keep: Keep,
        ) -> Result<Result<Vec<usize>, usize>, Infallible> {
            self.tries += 1;
            assert!(!part.is_empty(), "an empty try");
            assert!(
                part.windows(2).all(|w| w[0] < w[1]),
                "{part:?} not ascending"
            );
            if let Some(&row) = part.iter().find(|&&row| self.refused(part, row)) {
                return Ok(Err(row));
            }
            if keep == Keep::Yes {
                self.kept += 1;
                for &row in part {
                    assert!(self.written.insert(row), "row {row} written twice");
                }
            }
            Ok(Ok(part.to_vec()))
        }
    }

    fn ceil_log2(n: usize) -> usize {
        n.next_power_of_two().trailing_zeros() as usize
    }

    /// Isolates a batch of `n` with `rows`, and checks what every isolation must hold:
    /// each refused row is refused with its own refusal, every other row is written
    /// once, and the bound on the tries.
    fn check(n: usize, mut rows: Rows) -> (Isolated<usize, usize>, Rows) {
        let Ok(out) = isolate(n, &mut rows);
        for (i, refusal) in &out.refused {
            assert_eq!(i, refusal, "row {i} set aside with another row's refusal");
        }
        let refused: BTreeSet<usize> = out.refused.iter().map(|(i, _)| *i).collect();
        assert_eq!(refused.len(), out.refused.len(), "a row refused twice");
        let written: BTreeSet<usize> = out.written.iter().copied().collect();
        assert_eq!(written.len(), out.written.len(), "a row reported twice");
        assert_eq!(written, rows.written, "reported ≠ written");
        assert_eq!(
            written.union(&refused).copied().collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>(),
            "every row is written or refused, not both"
        );
        assert!(written.is_disjoint(&refused));
        if rows.together.is_empty() {
            assert_eq!(refused, rows.bad, "n = {n}");
            let k = rows.bad.len();
            assert!(
                rows.tries <= 2 + 2 * k * ceil_log2(n),
                "n = {n}, k = {k}: {} tries",
                rows.tries
            );
            assert_eq!(rows.kept, usize::from(k < n), "n = {n}, k = {k}");
        }
        (out, rows)
    }

    #[test]
    fn a_batch_with_no_refused_row_is_written_in_one_try() {
        for n in [1, 2, 7, 500] {
            let (out, rows) = check(n, Rows::default());
            assert_eq!(out.written, (0..n).collect::<Vec<_>>());
            assert!(out.refused.is_empty());
            assert_eq!(rows.tries, 1);
        }
    }

    #[test]
    fn an_empty_batch_takes_no_try() {
        let mut rows = Rows::default();
        let Ok(out) = isolate(0, &mut rows);
        assert_eq!(
            out,
            Isolated {
                written: vec![],
                refused: vec![]
            }
        );
        assert_eq!(rows.tries, 0);
    }

    #[test]
    fn a_batch_of_one_refused_row_takes_one_try() {
        let (out, rows) = check(1, Rows::bad([0]));
        assert_eq!(out.refused, vec![(0, 0)]);
        assert!(out.written.is_empty());
        assert_eq!(rows.tries, 1);
    }

    #[test]
    fn one_refused_row_is_found_at_every_position() {
        for n in [2, 3, 8, 13, 64] {
            for bad in 0..n {
                let (out, rows) = check(n, Rows::bad([bad]));
                assert_eq!(out.refused, vec![(bad, bad)]);
                // The whole batch, two probes per level, the rest.
                assert!(
                    rows.tries <= 2 + 2 * ceil_log2(n),
                    "{n} {bad}: {}",
                    rows.tries
                );
            }
        }
    }

    #[test]
    fn several_refused_rows_are_all_found() {
        let (out, _) = check(10, Rows::bad([0, 4, 5, 9]));
        assert_eq!(out.refused, vec![(0, 0), (4, 4), (5, 5), (9, 9)]);
        assert_eq!(out.written, vec![1, 2, 3, 6, 7, 8]);
    }

    #[test]
    fn a_batch_of_refused_rows_only_writes_nothing() {
        for n in [1, 2, 5, 16] {
            let (out, rows) = check(n, Rows::bad(0..n));
            assert!(out.written.is_empty());
            assert_eq!(out.refused.len(), n);
            assert_eq!(rows.kept, 0);
            // Every node of the bisection tree once, and the whole batch: 2n − 1.
            assert_eq!(rows.tries, 2 * n - 1, "n = {n}");
        }
    }

    #[test]
    fn every_set_of_refused_rows_of_small_batches_is_isolated() {
        for n in 1..=10_usize {
            for mask in 0..(1_u32 << n) {
                check(n, Rows::bad((0..n).filter(|i| mask & (1 << i) != 0)));
            }
        }
    }

    #[test]
    fn the_tries_grow_with_the_refused_rows_times_the_depth_not_the_batch() {
        let n = 1000;
        for bad in [
            vec![999],
            vec![0, 500, 999],
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        ] {
            let k = bad.len();
            let (_, rows) = check(n, Rows::bad(bad));
            assert!(
                rows.tries <= 2 + 2 * k * 10,
                "k = {k}: {} tries",
                rows.tries
            );
            assert_eq!(rows.kept, 1);
        }
    }

    #[test]
    fn of_rows_refused_only_together_the_later_is_set_aside() {
        // Rows 2 and 5 each pass alone; together (or 5 after 2 is written) they do not.
        let rows = Rows {
            together: vec![(2, 5)],
            ..Rows::default()
        };
        let (out, rows) = check(8, rows);
        assert_eq!(out.refused, vec![(5, 5)]);
        assert_eq!(out.written, vec![0, 1, 2, 3, 4, 6, 7]);
        // With a row refused alone as well.
        let mut with_bad = Rows::bad([0]);
        with_bad.together = vec![(2, 5)];
        let (out, _) = check(8, with_bad);
        assert_eq!(out.refused, vec![(0, 0), (5, 5)]);
        assert!(rows.kept <= 4, "{} kept tries", rows.kept);
    }

    #[test]
    fn an_error_ends_the_isolation_at_once() {
        /// Refuses every part with more than one row; fails on the `fail_at`-th try.
        struct Failing {
            tries: usize,
            fail_at: usize,
        }
        impl Probe for Failing {
            type Written = usize;
            type Refusal = ();
            type Error = &'static str;
            fn try_part(
                &mut self,
                part: &[usize],
                _: Keep,
            ) -> Result<Result<Vec<usize>, ()>, &'static str> {
                self.tries += 1;
                if self.tries == self.fail_at {
                    return Err("connection lost");
                }
                Ok(if part.len() > 1 {
                    Err(())
                } else {
                    Ok(part.to_vec())
                })
            }
        }
        for fail_at in 1..=4 {
            let mut probe = Failing { tries: 0, fail_at };
            assert_eq!(isolate(6, &mut probe), Err("connection lost"));
            assert_eq!(probe.tries, fail_at);
        }
    }
}

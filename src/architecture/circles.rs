//! The circles of a directed graph: the room-level ones each once (every elementary
//! cycle), the file-level ones by their strongly connected parts (each tangle of files
//! that import each other): for every edge of a tangle, the shortest circle through it,
//! each circle once. A tangle is broken when none of its circles is left.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Every elementary cycle of `edges`, each once, from its smallest node and back to it.
pub(super) fn every_cycle<V>(edges: &BTreeMap<String, BTreeMap<String, V>>) -> Vec<Vec<String>> {
    fn walk<V>(
        edges: &BTreeMap<String, BTreeMap<String, V>>,
        start: &str,
        path: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        let here = path.last().unwrap().clone();
        for next in edges.get(&here).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_owned());
                found.push(cycle);
            } else if next.as_str() > start && !path.contains(next) {
                path.push(next.clone());
                walk(edges, start, path, found);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in edges.keys() {
        walk(edges, start, &mut vec![start.clone()], &mut found);
    }
    found
}

/// The strongly connected parts of `edges` with more than one node, each sorted.
fn tangles<V>(edges: &BTreeMap<String, BTreeMap<String, V>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::from([from.to_owned()]);
        let mut queue = VecDeque::from([from.to_owned()]);
        while let Some(here) = queue.pop_front() {
            for next in edges.get(&here).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.clone()) {
                    queue.push_back(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|k| (k, reach(k))).collect();
    let mut parts: Vec<BTreeSet<String>> = Vec::new();
    for (node, from_it) in &reachable {
        if parts.iter().any(|p| p.contains(*node)) {
            continue;
        }
        let part: BTreeSet<String> = from_it
            .iter()
            .filter(|other| reachable.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        if part.len() > 1 {
            parts.push(part);
        }
    }
    parts
}

/// For every edge of every tangle of `edges`, the shortest circle through it (from its
/// smallest node and back to it), each circle once, in order.
pub(super) fn circles<V>(edges: &BTreeMap<String, BTreeMap<String, V>>) -> Vec<Vec<String>> {
    let mut found = BTreeSet::new();
    for part in tangles(edges) {
        for from in &part {
            for to in edges[from].keys().filter(|t| part.contains(*t)) {
                // The shortest way back from `to` to `from`, inside the tangle.
                let mut back: BTreeMap<String, String> = BTreeMap::new();
                let mut queue = VecDeque::from([to.clone()]);
                let mut seen = BTreeSet::from([to.clone()]);
                while let Some(here) = queue.pop_front() {
                    if here == *from {
                        break;
                    }
                    for next in edges.get(&here).into_iter().flat_map(|e| e.keys()) {
                        if part.contains(next) && seen.insert(next.clone()) {
                            back.insert(next.clone(), here.clone());
                            queue.push_back(next.clone());
                        }
                    }
                }
                let mut circle = vec![from.clone()];
                let mut at = from.clone();
                while at != *to {
                    at = back[&at].clone();
                    circle.push(at.clone());
                }
                circle.reverse();
                // `circle` is to … from; the circle is from → to → … → from.
                circle.insert(0, from.clone());
                let circle: Vec<String> = circle[..circle.len() - 1].to_vec();
                let smallest = (0..circle.len()).min_by_key(|i| &circle[*i]).unwrap();
                let mut turned: Vec<String> = circle[smallest..]
                    .iter()
                    .chain(&circle[..smallest])
                    .cloned()
                    .collect();
                turned.push(turned[0].clone());
                found.insert(turned);
            }
        }
    }
    found.into_iter().collect()
}

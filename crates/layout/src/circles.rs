//! The circles of a directed graph, by its strongly connected parts (each tangle of
//! nodes that reach each other): for every edge of a tangle, the shortest circle
//! through it, each circle once, from its smallest node and back to it. A tangle is
//! broken when none of its circles is left.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Node → node → what the edge is (its first place).
pub type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// The strongly connected parts of `edges` with more than one node.
fn tangles(edges: &Edges) -> Vec<BTreeSet<String>> {
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
pub fn circles(edges: &Edges) -> Vec<Vec<String>> {
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
                // from → to → … → from, walked back from `from`.
                let mut circle = vec![from.clone()];
                let mut at = from.clone();
                while at != *to {
                    at = back[&at].clone();
                    circle.push(at.clone());
                }
                circle.push(from.clone());
                circle.reverse();
                circle.pop();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(pairs: &[(&str, &str)]) -> Edges {
        let mut e = Edges::new();
        for (a, b) in pairs {
            e.entry((*a).to_owned())
                .or_default()
                .insert((*b).to_owned(), String::new());
        }
        e
    }

    #[test]
    fn each_edge_of_a_tangle_gets_its_shortest_circle_once() {
        let e = edges(&[("a", "b"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "d")]);
        assert_eq!(circles(&e), [vec!["a", "b", "a"], vec!["a", "b", "c", "a"]]);
        assert!(circles(&edges(&[("a", "b"), ("b", "c")])).is_empty());
    }
}

//! A consistent-hash ring with virtual nodes and weighted shards.

mod murmur;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

pub use murmur::murmur3_32;

/// Anything that can be placed on the ring.
pub trait Node: Clone + Eq + std::hash::Hash + fmt::Display {
    /// Relative capacity; a node of weight 2 gets twice the virtual nodes.
    fn weight(&self) -> u32 {
        1
    }
}

/// Errors the ring reports.
#[derive(Debug, PartialEq, Eq)]
pub enum RingError {
    Empty,
    Duplicate(String),
    Unknown(String),
    NotEnoughNodes { wanted: usize, have: usize },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::Empty => write!(f, "the ring has no nodes"),
            RingError::Duplicate(name) => write!(f, "node {name} is already on the ring"),
            RingError::Unknown(name) => write!(f, "node {name} is not on the ring"),
            RingError::NotEnoughNodes { wanted, have } => {
                write!(f, "wanted {wanted} distinct nodes, the ring has {have}")
            }
        }
    }
}

impl std::error::Error for RingError {}

/// The ring: points sorted by hash, each owned by one node.
pub struct HashRing<N: Node> {
    replicas: u32,
    points: BTreeMap<u32, N>,
    nodes: HashMap<N, Vec<u32>>,
}

impl<N: Node> HashRing<N> {
    /// A ring with `replicas` virtual nodes per unit of weight.
    pub fn new(replicas: u32) -> Self {
        assert!(replicas > 0, "replicas must be positive");
        HashRing { replicas, points: BTreeMap::new(), nodes: HashMap::new() }
    }

    /// Place `node` on the ring.
    pub fn add(&mut self, node: N) -> Result<(), RingError> {
        if self.nodes.contains_key(&node) {
            return Err(RingError::Duplicate(node.to_string()));
        }
        let count = self.replicas * node.weight();
        let mut placed = Vec::with_capacity(count as usize);
        for replica in 0..count {
            let label = format!("{node}#{replica}");
            let point = murmur3_32(label.as_bytes(), 0x9747_b28c);
            // Keep the first owner of a colliding point so placement stays deterministic.
            if self.points.contains_key(&point) {
                continue;
            }
            self.points.insert(point, node.clone());
            placed.push(point);
        }
        self.nodes.insert(node, placed);
        Ok(())
    }

    /// Take `node` off the ring; its keys move to the next node clockwise.
    pub fn remove(&mut self, node: &N) -> Result<(), RingError> {
        let placed = self
            .nodes
            .remove(node)
            .ok_or_else(|| RingError::Unknown(node.to_string()))?;
        for point in placed {
            self.points.remove(&point);
        }
        Ok(())
    }

    /// The node that owns `key`.
    pub fn owner(&self, key: &[u8]) -> Result<&N, RingError> {
        let hash = murmur3_32(key, 0x9747_b28c);
        self.points
            .range(hash..)
            .next()
            .or_else(|| self.points.iter().next())
            .map(|(_, node)| node)
            .ok_or(RingError::Empty)
    }

    /// The first `count` distinct nodes clockwise from `key`.
    pub fn owners(&self, key: &[u8], count: usize) -> Result<Vec<&N>, RingError> {
        if count > self.nodes.len() {
            return Err(RingError::NotEnoughNodes { wanted: count, have: self.nodes.len() });
        }
        let hash = murmur3_32(key, 0x9747_b28c);
        let mut result: Vec<&N> = Vec::with_capacity(count);
        for (_, node) in self.points.range(hash..).chain(self.points.range(..hash)) {
            if !result.contains(&node) {
                result.push(node);
                if result.len() == count {
                    break;
                }
            }
        }
        Ok(result)
    }

    /// Number of nodes on the ring.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the ring has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, Eq, Hash)]
    struct Shard(&'static str, u32);

    impl fmt::Display for Shard {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)
        }
    }

    impl Node for Shard {
        fn weight(&self) -> u32 {
            self.1
        }
    }

    #[test]
    fn owner_is_stable() {
        let mut ring = HashRing::new(32);
        ring.add(Shard("a", 1)).unwrap();
        ring.add(Shard("b", 2)).unwrap();
        let first = ring.owner(b"key-1").unwrap().to_string();
        assert_eq!(ring.owner(b"key-1").unwrap().to_string(), first);
    }

    #[test]
    fn duplicate_is_refused() {
        let mut ring = HashRing::new(8);
        ring.add(Shard("a", 1)).unwrap();
        assert_eq!(ring.add(Shard("a", 1)), Err(RingError::Duplicate("a".into())));
    }
}

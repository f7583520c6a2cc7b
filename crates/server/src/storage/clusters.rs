//! The PostgreSQL clusters a server routes to: `main` (`--database-url`, which holds the
//! directory of ledgers) and those of `--cluster NAME=URL`, each its own pool; and which
//! cluster each ledger's journal is on, as the directory says (`storage::ledgers`).

use super::Pool;
use ledger_core::ledger::{LedgerId, MAIN_CLUSTER};
use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

/// The pools by cluster, and the placement of every ledger the server has met that is not on
/// `main`.
pub struct Clusters {
    pools: BTreeMap<String, Pool>,
    placed: RwLock<HashMap<LedgerId, String>>,
}

impl Clusters {
    /// `main` and the others, by name (a name twice: the last one).
    pub fn new(main: Pool, others: Vec<(String, Pool)>) -> Clusters {
        let mut pools: BTreeMap<String, Pool> = others.into_iter().collect();
        pools.insert(MAIN_CLUSTER.to_owned(), main);
        Clusters {
            pools,
            placed: RwLock::new(HashMap::new()),
        }
    }

    /// The cluster `main`.
    pub fn main(&self) -> &Pool {
        &self.pools[MAIN_CLUSTER]
    }

    /// A cluster by name, if the server was started with it.
    pub fn named(&self, name: &str) -> Option<&Pool> {
        self.pools.get(name)
    }

    /// Every cluster, `main` among them, by name.
    pub fn all(&self) -> impl Iterator<Item = (&str, &Pool)> {
        self.pools.iter().map(|(n, p)| (n.as_str(), p))
    }

    /// The names of the clusters, in order.
    pub fn names(&self) -> Vec<&str> {
        self.pools.keys().map(String::as_str).collect()
    }

    /// Notes that `ledger` is on `cluster` (as the directory says).
    pub fn place(&self, ledger: LedgerId, cluster: &str) {
        let mut placed = self.placed.write().expect("placement lock");
        match cluster {
            MAIN_CLUSTER => placed.remove(&ledger),
            c => placed.insert(ledger, c.to_owned()),
        };
    }

    /// The cluster `ledger` is on, as last noted (`main` when none was).
    pub fn cluster_of(&self, ledger: LedgerId) -> String {
        let placed = self.placed.read().expect("placement lock");
        placed
            .get(&ledger)
            .cloned()
            .unwrap_or_else(|| MAIN_CLUSTER.to_owned())
    }

    /// The pool of the cluster `ledger` is on; `None` when that is a cluster this server was
    /// not started with.
    pub fn pool_of(&self, ledger: LedgerId) -> Option<Pool> {
        self.pools.get(&self.cluster_of(ledger)).cloned()
    }

    /// Closes every pool.
    pub fn close(&self) {
        for p in self.pools.values() {
            p.close();
        }
    }
}

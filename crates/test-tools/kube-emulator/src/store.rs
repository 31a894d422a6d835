//! In-memory object store with a global resourceVersion counter, a bounded
//! per-resource event history (for watch resumption and `410 Gone`), and the
//! registry of live watch connections.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::resources::StorageKey;
use crate::util::{meta_mut, meta_str};

/// Kind of change carried by a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// Wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A committed change, as kept in history and fanned out to watchers.
#[derive(Debug)]
pub struct StoredEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Change kind.
    pub type_: EventType,
    /// New state (last state for deletions), stored form.
    pub object: Value,
    /// Previous state, used to turn selector transitions into ADDED/DELETED.
    pub old: Option<Value>,
}

/// Message delivered to a watch connection.
#[derive(Debug, Clone)]
pub enum WatchMsg {
    /// A change.
    Event(Arc<StoredEvent>),
    /// A progress notification at the given resourceVersion.
    Bookmark(u64),
}

struct WatcherReg {
    id: u64,
    storage: StorageKey,
    bookmarks: bool,
    tx: mpsc::UnboundedSender<WatchMsg>,
}

#[derive(Default)]
struct History {
    events: VecDeque<Arc<StoredEvent>>,
    /// rv of the newest event that was evicted; resuming before it is impossible.
    compacted_rv: u64,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchFrom {
    /// rv unset or "0": synthetic ADDED events for the current state, then changes.
    Current,
    /// Only changes after this rv.
    After(u64),
}

/// A freshly registered watch.
pub struct WatchStart {
    /// Registration id (to unregister).
    pub id: u64,
    /// Events to replay before live ones.
    pub backlog: Vec<Arc<StoredEvent>>,
    /// Live events.
    pub rx: mpsc::UnboundedReceiver<WatchMsg>,
    /// Global rv at registration time.
    pub rv: u64,
}

/// Object key inside one resource: (namespace, name).
pub type ObjKey = (String, String);

/// The object store.
pub struct Store {
    rv: u64,
    objects: HashMap<StorageKey, BTreeMap<ObjKey, Value>>,
    history: HashMap<StorageKey, History>,
    global_compacted: u64,
    watchers: Vec<WatcherReg>,
    next_watcher: u64,
    history_limit: usize,
    /// Set on every write; cleared by the persistence task.
    pub dirty: bool,
}

impl Store {
    /// Empty store keeping `history_limit` events per resource.
    pub fn new(history_limit: usize) -> Self {
        Self {
            rv: 1,
            objects: HashMap::new(),
            history: HashMap::new(),
            global_compacted: 0,
            watchers: Vec::new(),
            next_watcher: 1,
            history_limit: history_limit.max(1),
            dirty: false,
        }
    }

    /// Current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Get one object.
    pub fn get(&self, key: &StorageKey, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(key)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
    }

    /// Objects of a resource, optionally restricted to one namespace, sorted by (namespace, name).
    pub fn list(&self, key: &StorageKey, ns: Option<&str>) -> Vec<&Value> {
        match self.objects.get(key) {
            None => Vec::new(),
            Some(m) => m
                .iter()
                .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
                .map(|(_, v)| v)
                .collect(),
        }
    }

    /// Every stored object with its storage key.
    pub fn iter_all(&self) -> impl Iterator<Item = (&StorageKey, &Value)> {
        self.objects
            .iter()
            .flat_map(|(k, m)| m.values().map(move |v| (k, v)))
    }

    /// Whether any object lives in the namespace.
    pub fn namespace_has_objects(&self, ns: &str) -> bool {
        self.objects
            .values()
            .any(|m| m.keys().any(|(ons, _)| ons == ns))
    }

    /// Store `obj` (stored form) with a fresh resourceVersion and emit `type_`; returns the stored object.
    pub fn put(&mut self, key: &StorageKey, mut obj: Value, type_: EventType) -> Value {
        self.rv += 1;
        let rv = self.rv;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let k = (
            meta_str(&obj, "namespace").to_string(),
            meta_str(&obj, "name").to_string(),
        );
        let old = self
            .objects
            .entry(key.clone())
            .or_default()
            .insert(k, obj.clone());
        self.emit(key, rv, type_, obj.clone(), old);
        obj
    }

    /// Remove an object, emitting DELETED with `last` (or the stored state) at a fresh rv.
    pub fn remove(
        &mut self,
        key: &StorageKey,
        ns: &str,
        name: &str,
        last: Option<Value>,
    ) -> Option<Value> {
        let old = self
            .objects
            .get_mut(key)?
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let rv = self.rv;
        let mut obj = last.unwrap_or_else(|| old.clone());
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.emit(key, rv, EventType::Deleted, obj.clone(), Some(old));
        Some(obj)
    }

    fn emit(
        &mut self,
        key: &StorageKey,
        rv: u64,
        type_: EventType,
        object: Value,
        old: Option<Value>,
    ) {
        self.dirty = true;
        let ev = Arc::new(StoredEvent {
            rv,
            type_,
            object,
            old,
        });
        let h = self.history.entry(key.clone()).or_default();
        h.events.push_back(ev.clone());
        while h.events.len() > self.history_limit {
            if let Some(evicted) = h.events.pop_front() {
                h.compacted_rv = evicted.rv;
            }
        }
        // a failed send means the connection is gone: forget it
        self.watchers
            .retain(|w| w.storage != *key || w.tx.send(WatchMsg::Event(ev.clone())).is_ok());
    }

    /// Register a watch; `Err(oldest)` if `from` is older than the kept history.
    pub fn watch(
        &mut self,
        key: &StorageKey,
        from: WatchFrom,
        bookmarks: bool,
    ) -> Result<WatchStart, u64> {
        let backlog = match from {
            WatchFrom::Current => self
                .list(key, None)
                .into_iter()
                .map(|o| {
                    Arc::new(StoredEvent {
                        rv: self.rv,
                        type_: EventType::Added,
                        object: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            WatchFrom::After(rv) => {
                let h = self.history.get(key);
                let compacted = h.map_or(0, |h| h.compacted_rv).max(self.global_compacted);
                if rv < compacted {
                    return Err(compacted);
                }
                h.map(|h| h.events.iter().filter(|e| e.rv > rv).cloned().collect())
                    .unwrap_or_default()
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_watcher;
        self.next_watcher += 1;
        self.watchers.push(WatcherReg {
            id,
            storage: key.clone(),
            bookmarks,
            tx,
        });
        Ok(WatchStart {
            id,
            backlog,
            rx,
            rv: self.rv,
        })
    }

    /// Forget a watch registration.
    pub fn unregister(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Close every watch connection (fault hook); returns how many were closed.
    pub fn drop_watches(&mut self) -> usize {
        let n = self.watchers.len();
        self.watchers.clear();
        n
    }

    /// Number of open watch connections.
    pub fn watch_count(&self) -> usize {
        self.watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }

    /// Forget all history so that resuming from any resourceVersion handed out so far
    /// (including the current one) yields 410 (fault hook).
    ///
    /// The counter advances by one (like an etcd compaction revision) so that a
    /// fresh list returns a resourceVersion that can be watched from again.
    pub fn compact(&mut self) {
        self.rv += 1;
        self.global_compacted = self.rv;
        for h in self.history.values_mut() {
            h.events.clear();
            h.compacted_rv = self.rv;
        }
    }

    /// Send a BOOKMARK at the current rv to every watcher that asked for bookmarks.
    pub fn send_bookmarks(&mut self) {
        let rv = self.rv;
        self.watchers
            .retain(|w| !w.bookmarks || w.tx.send(WatchMsg::Bookmark(rv)).is_ok());
    }

    /// Serializable snapshot of all objects (for `--state-dir`).
    pub fn snapshot(&self) -> Value {
        let objects: Vec<Value> = self
            .iter_all()
            .map(|(k, v)| json!({"group": k.group, "resource": k.resource, "object": v}))
            .collect();
        json!({"resourceVersion": self.rv, "objects": objects})
    }

    /// Load a snapshot written by [`Store::snapshot`]; history starts empty (older rvs get 410).
    pub fn restore(&mut self, snap: &Value) -> Result<(), String> {
        let rv = snap
            .get("resourceVersion")
            .and_then(Value::as_u64)
            .ok_or("snapshot has no resourceVersion")?;
        let objects = snap
            .get("objects")
            .and_then(Value::as_array)
            .ok_or("snapshot has no objects")?;
        for o in objects {
            let group = o.get("group").and_then(Value::as_str).unwrap_or("");
            let resource = o
                .get("resource")
                .and_then(Value::as_str)
                .ok_or("snapshot object without resource")?;
            let obj = o
                .get("object")
                .cloned()
                .ok_or("snapshot entry without object")?;
            let k = (
                meta_str(&obj, "namespace").to_string(),
                meta_str(&obj, "name").to_string(),
            );
            self.objects
                .entry(StorageKey::new(group, resource))
                .or_default()
                .insert(k, obj);
        }
        self.rv = rv;
        self.global_compacted = rv;
        Ok(())
    }
}

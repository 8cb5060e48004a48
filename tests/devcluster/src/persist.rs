//! Durable state in a redb database: objects, the resourceVersion counter, minted tokens.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;
use std::path::Path;

const OBJECTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
const TOKENS: TableDefinition<'_, &str, u64> = TableDefinition::new("tokens");

/// Persistence failures.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The database could not be opened, read or written.
    #[error("state database error")]
    Db(#[source] Box<redb::Error>),
    /// A stored object is not valid JSON.
    #[error("stored object {key} is corrupt")]
    Corrupt {
        /// The object key.
        key: String,
        /// Decode error.
        #[source]
        source: serde_json::Error,
    },
    /// A stored object decodes but is not one this server would have stored.
    #[error("stored object {key} is unreadable: {why}")]
    Unreadable {
        /// The object key.
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// A test made the commit fail.
    #[cfg(test)]
    #[error("injected commit failure")]
    Injected,
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for PersistError {
            fn from(e: $t) -> Self {
                PersistError::Db(Box::new(e.into()))
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// One change inside a write transaction.
#[derive(Debug, Clone)]
pub enum Op {
    /// Store (or replace) an object under its key.
    Put(String, Value),
    /// Remove an object.
    Delete(String),
    /// Remember a minted bearer token.
    Token(String),
}

/// Everything loaded at start.
#[derive(Debug, Default)]
pub struct Loaded {
    /// (key, object) pairs.
    pub objects: Vec<(String, Value)>,
    /// Last resourceVersion handed out.
    pub rv: u64,
    /// Minted tokens.
    pub tokens: Vec<String>,
    /// Keys of stored objects that could not be read and were skipped.
    pub skipped: Vec<String>,
}

/// Decodes one stored object; a record that is not a JSON object, or is nested
/// deeper than a request body may be, is refused like a corrupt one.
fn decode_record(key: &str, bytes: &[u8]) -> Result<Value, PersistError> {
    let corrupt = |source| PersistError::Corrupt {
        key: key.to_string(),
        source,
    };
    let v: Value = serde_json::from_slice(bytes).map_err(corrupt)?;
    if !v.is_object() {
        return Err(PersistError::Unreadable {
            key: key.to_string(),
            why: "not a JSON object".into(),
        });
    }
    crate::limits::check_value(&v).map_err(|e| PersistError::Unreadable {
        key: key.to_string(),
        why: e.to_string(),
    })?;
    Ok(v)
}

/// The redb database.
pub struct Persist {
    db: Database,
    /// Lets tests hold, count and fail commits.
    #[cfg(test)]
    pub(crate) hooks: TestHooks,
}

/// Test controls of [`Persist::commit`].
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct TestHooks {
    /// Every commit takes this lock first: a test holding it keeps commits in flight.
    pub gate: std::sync::Mutex<()>,
    /// Commits started.
    pub commits: std::sync::atomic::AtomicUsize,
    /// While true, every commit fails.
    pub fail: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Persist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Persist")
    }
}

impl Persist {
    /// Opens (or creates) `dir/state.redb`.
    pub fn open(dir: &Path) -> Result<Self, PersistError> {
        let path = dir.join("state.redb");
        let db = Database::create(&path)?;
        // It holds Secrets in clear: its owner's alone.
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| PersistError::Db(Box::new(redb::Error::Io(e))))?;
        }
        // Create the tables so a read on a fresh database finds them.
        let tx = db.begin_write()?;
        tx.open_table(OBJECTS)?;
        tx.open_table(META)?;
        tx.open_table(TOKENS)?;
        tx.commit()?;
        Ok(Persist {
            db,
            #[cfg(test)]
            hooks: TestHooks::default(),
        })
    }

    /// Reads the whole state.
    pub fn load(&self) -> Result<Loaded, PersistError> {
        let tx = self.db.begin_read()?;
        let mut out = Loaded::default();
        for row in tx.open_table(OBJECTS)?.iter()? {
            let (k, v) = row?;
            let key = k.value().to_string();
            // One unreadable record (corrupt, or nested deeper than serde_json
            // reads) must not cost every other object: it is skipped, logged and
            // counted (`GET /debug/store`), and stays in the file untouched.
            match decode_record(&key, v.value()) {
                Ok(obj) => out.objects.push((key, obj)),
                Err(e) => {
                    let cause = std::error::Error::source(&e)
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    tracing::error!(key = %key, error = %e, %cause, "skipping unreadable stored object");
                    out.skipped.push(key);
                }
            }
        }
        out.rv = tx
            .open_table(META)?
            .get("rv")?
            .map(|g| g.value())
            .unwrap_or(0);
        for row in tx.open_table(TOKENS)?.iter()? {
            let (k, _) = row?;
            out.tokens.push(k.value().to_string());
        }
        Ok(out)
    }

    /// Commits `ops` and the new resourceVersion durably (redb's default
    /// durability is Immediate: fsync before commit returns).
    pub fn commit(&self, ops: &[Op], rv: u64) -> Result<(), PersistError> {
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering;
            let _gate = self.hooks.gate.lock().unwrap_or_else(|e| e.into_inner());
            self.hooks.commits.fetch_add(1, Ordering::SeqCst);
            if self.hooks.fail.load(Ordering::SeqCst) {
                return Err(PersistError::Injected);
            }
        }
        let tx = self.db.begin_write()?;
        {
            let mut objects = tx.open_table(OBJECTS)?;
            let mut tokens = tx.open_table(TOKENS)?;
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        let bytes =
                            serde_json::to_vec(v).map_err(|source| PersistError::Corrupt {
                                key: k.clone(),
                                source,
                            })?;
                        objects.insert(k.as_str(), bytes.as_slice())?;
                    }
                    Op::Delete(k) => {
                        objects.remove(k.as_str())?;
                    }
                    Op::Token(t) => {
                        tokens.insert(t.as_str(), 0)?;
                    }
                }
            }
            tx.open_table(META)?.insert("rv", rv)?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_store_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let _p = super::Persist::open(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join("state.redb"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        {
            let p = Persist::open(dir.path()).unwrap();
            p.commit(
                &[
                    Op::Put("a".into(), json!({"x": 1})),
                    Op::Put("b".into(), json!(2)),
                    Op::Token("t".into()),
                ],
                7,
            )
            .unwrap();
            p.commit(&[Op::Delete("b".into())], 8).unwrap();
        }
        let p = Persist::open(dir.path()).unwrap();
        let l = p.load().unwrap();
        assert_eq!(l.rv, 8);
        assert_eq!(l.objects, vec![("a".to_string(), json!({"x": 1}))]);
        assert_eq!(l.tokens, vec!["t".to_string()]);
        assert!(l.skipped.is_empty());
    }

    #[test]
    fn unreadable_records_are_skipped_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        {
            let p = Persist::open(dir.path()).unwrap();
            p.commit(&[Op::Put("good".into(), json!({"x": 1}))], 3)
                .unwrap();
            let tx = p.db.begin_write().unwrap();
            {
                let mut t = tx.open_table(OBJECTS).unwrap();
                t.insert("broken", b"{not json".as_slice()).unwrap();
                t.insert("deep", deep.as_bytes()).unwrap();
                t.insert("scalar", b"5".as_slice()).unwrap();
            }
            tx.commit().unwrap();
        }
        let l = Persist::open(dir.path()).unwrap().load().unwrap();
        assert_eq!(l.objects, vec![("good".to_string(), json!({"x": 1}))]);
        assert_eq!(l.skipped, vec!["broken", "deep", "scalar"]);
        assert_eq!(l.rv, 3);
    }
}

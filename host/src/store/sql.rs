//! One small SQL surface over both backends, so every query is written once.
//!
//! SQLite runs through rusqlite, *inline* on the calling task: a statement over cached
//! pages takes microseconds, far less than handing it to a worker thread and back
//! (which is what dominated a run's time before). Writers share one connection
//! behind an async mutex, so a write transaction holds SQLite's lock only while its
//! statements execute. PostgreSQL runs through sqlx.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rusqlite::types::{ToSqlOutput, Value as SqliteValue, ValueRef};
use sqlx::{Column, Row as _};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::DbError;

/// Statements sent to a database by this process (BEGIN and COMMIT included): on
/// PostgreSQL each is a network round trip, so it is the figure to watch.
static STATEMENTS: AtomicUsize = AtomicUsize::new(0);

pub fn statements_sent() -> usize {
    STATEMENTS.load(Ordering::Relaxed)
}

fn sent(n: usize) {
    STATEMENTS.fetch_add(n, Ordering::Relaxed);
}

/// A bound parameter. Nulls keep their type: PostgreSQL needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(Option<i64>),
    Real(f64),
    Text(Option<String>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(Some(v))
    }
}
impl From<Option<i64>> for Param {
    fn from(v: Option<i64>) -> Self {
        Param::Int(v)
    }
}
impl From<f64> for Param {
    fn from(v: f64) -> Self {
        Param::Real(v)
    }
}
impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(Some(v.to_string()))
    }
}
impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(Some(v))
    }
}
impl From<&String> for Param {
    fn from(v: &String) -> Self {
        Param::Text(Some(v.clone()))
    }
}
impl From<Option<String>> for Param {
    fn from(v: Option<String>) -> Self {
        Param::Text(v)
    }
}
impl From<&Option<String>> for Param {
    fn from(v: &Option<String>) -> Self {
        Param::Text(v.clone())
    }
}
impl From<Option<&str>> for Param {
    fn from(v: Option<&str>) -> Self {
        Param::Text(v.map(str::to_string))
    }
}

/// `params![a, b, …]`: a parameter list from anything `Param: From` accepts.
#[macro_export]
macro_rules! params {
    ($($v:expr),* $(,)?) => { [$($crate::store::sql::Param::from($v)),*] };
}

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Int(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Param::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
            Param::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Param::Int(None) | Param::Text(None) => ToSqlOutput::Borrowed(ValueRef::Null),
        })
    }
}

/// One statement with its parameters, to run later or to merge with others.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<Param>,
}

impl Statement {
    pub fn new(sql: impl Into<String>, params: impl Into<Vec<Param>>) -> Self {
        Self {
            sql: sql.into(),
            params: params.into(),
        }
    }

    /// PostgreSQL: independent writes (`INSERT`/`UPDATE`/`DELETE` without
    /// `RETURNING`) as one statement, `WITH s0 AS (…), … <last>`: one round trip
    /// instead of one each. The parts run in no set order and none sees another's
    /// rows, so none may depend on another. `None` for no statements.
    pub fn chained(mut parts: Vec<Statement>) -> Option<Statement> {
        let last = parts.pop()?;
        if parts.is_empty() {
            return Some(last);
        }
        Some(Statement::with(Statement::numbered(parts), last))
    }

    /// Names parts `s0`, `s1`, … for [`Statement::with`] and [`Statement::gated_named`].
    pub fn numbered(parts: Vec<Statement>) -> Vec<(String, Statement)> {
        parts
            .into_iter()
            .enumerate()
            .map(|(i, part)| (format!("s{i}"), part))
            .collect()
    }

    /// PostgreSQL: `fence` (an `UPDATE` without `RETURNING`) and `parts` as one
    /// statement, `WITH fence AS (… RETURNING 1 AS held), s0 AS (…), … SELECT held FROM fence`:
    /// it returns one row when the fence matched. Parts that must depend on it say
    /// so in their own `WHERE` (`EXISTS (SELECT 1 FROM fence)`); all of it is one
    /// atomic statement and one round trip.
    pub fn gated(fence: Statement, parts: Vec<Statement>) -> Statement {
        Statement::gated_named(fence, Statement::numbered(parts), false)
    }

    /// [`Statement::gated`] with named parts, each of which may read what an earlier
    /// one returns (`FROM name`). `flush`: the statement's own implicit transaction
    /// is flushed to the WAL before it returns although the connection commits lazily
    /// (see [`Backend::Postgres`]) — it sets `synchronous_commit` for itself, and the
    /// commit at its end reads the setting.
    pub fn gated_named(
        fence: Statement,
        parts: Vec<(String, Statement)>,
        flush: bool,
    ) -> Statement {
        let mut fence = fence;
        fence.sql.push_str(" RETURNING 1 AS held");
        let mut named = vec![("fence".to_string(), fence)];
        named.extend(parts);
        // A part that writes nothing runs only if the final select reads it.
        let last = if flush {
            named.push((
                "durable".to_string(),
                Statement::new(
                    "SELECT set_config('synchronous_commit', 'on', true) AS durable",
                    Vec::new(),
                ),
            ));
            "SELECT held FROM fence, durable"
        } else {
            "SELECT held FROM fence"
        };
        Statement::with(named, Statement::new(last, Vec::new()))
    }

    /// PostgreSQL: `WITH name AS (…), … <last>`, parameters in placeholder order.
    /// Data-modifying parts all run, on one snapshot, in no set order; a part sees
    /// another's rows only through what that one returns (`FROM name`).
    pub fn with(parts: Vec<(String, Statement)>, last: Statement) -> Statement {
        // Sized up front: a commit's statement runs to kilobytes, and growing it
        // piece by piece copied it over and over.
        let length = parts
            .iter()
            .map(|(name, part)| name.len() + part.sql.len() + 7)
            .sum::<usize>();
        let mut sql = String::with_capacity(6 + length + last.sql.len());
        let mut params = Vec::with_capacity(
            parts.iter().map(|(_, p)| p.params.len()).sum::<usize>() + last.params.len(),
        );
        sql.push_str("WITH ");
        for (i, (name, part)) in parts.into_iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&name);
            sql.push_str(" AS (");
            sql.push_str(&part.sql);
            sql.push(')');
            params.extend(part.params);
        }
        sql.push(' ');
        sql.push_str(&last.sql);
        params.extend(last.params);
        Statement { sql, params }
    }
}

/// A cell as read back, the same on both backends: integer columns of any width
/// and booleans (0 and 1) as [`Cell::Int`], `real` and `double precision` as
/// [`Cell::Real`], text as [`Cell::Text`], and binary as text (invalid UTF-8
/// replaced). On PostgreSQL a column of any other type is an error when read.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

/// One result row; columns are read by name.
#[derive(Debug, Clone)]
pub struct Row {
    names: Arc<[String]>,
    cells: Vec<Cell>,
}

/// Types a cell converts to.
pub trait FromCell: Sized {
    fn from_cell(cell: &Cell) -> Option<Self>;
}

impl FromCell for i64 {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Int(v) => Some(*v),
            _ => None,
        }
    }
}
impl FromCell for f64 {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Real(v) => Some(*v),
            Cell::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
}
impl FromCell for String {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Text(v) => Some(v.clone()),
            _ => None,
        }
    }
}
impl<T: FromCell> FromCell for Option<T> {
    fn from_cell(cell: &Cell) -> Option<Self> {
        match cell {
            Cell::Null => Some(None),
            other => T::from_cell(other).map(Some),
        }
    }
}

impl Row {
    pub fn get<T: FromCell>(&self, name: &str) -> Result<T, DbError> {
        let at = self
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| DbError::Corrupt {
                table: "query",
                message: format!("no column `{name}`"),
            })?;
        T::from_cell(&self.cells[at]).ok_or_else(|| DbError::Corrupt {
            table: "query",
            message: format!("column `{name}` holds {:?}", self.cells[at]),
        })
    }
}

/// SQLite connections: one writer, a few readers (WAL lets them read beside it).
#[derive(Debug)]
pub(crate) struct Sqlite {
    writer: Arc<Mutex<rusqlite::Connection>>,
    /// Tasks waiting for the writer (see [`Writer::others_wait`]).
    waiting: Arc<AtomicUsize>,
    /// The writer's shared transaction, while one is open (see [`Group`]).
    group: Group,
    readers: Vec<Arc<Mutex<rusqlite::Connection>>>,
    next: AtomicUsize,
    /// Set by each write, taken by the checkpoint thread.
    checkpoint_due: Arc<AtomicBool>,
    checkpointer: std::thread::Thread,
}

/// How long the checkpoint thread lets writes gather before it copies them: each
/// checkpoint ends in an fsync, so it runs at most this often, and a burst of
/// commits is copied in one go. Short enough that the WAL rarely reaches the
/// writer's own threshold (at 1,000 runs/s about 1,200 frames gather in 20 ms).
const CHECKPOINT_GATHER: std::time::Duration = std::time::Duration::from_millis(20);

impl Sqlite {
    pub(crate) fn open(path: &str, readers: usize) -> Result<Self, String> {
        let open = || -> Result<rusqlite::Connection, rusqlite::Error> {
            let conn = rusqlite::Connection::open(path)?;
            // A busy writer (another process) is waited for, not failed at once.
            conn.busy_timeout(std::time::Duration::from_secs(5))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            // Commits survive a crash of the process; a power loss may lose the last
            // ones (WAL without a sync per commit). The embedded store is for one host.
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            conn.set_prepared_statement_cache_capacity(64);
            Ok(conn)
        };
        let open = || open().map_err(|e| e.to_string());
        let writer = open()?;
        // Checkpoints mostly run on their own thread (below), not inside whichever
        // commit fills the WAL: that commit would wait for the copy and an fsync.
        // The writer still checkpoints past 4,000 pages, so that under sustained
        // load (when the thread cannot catch up) the WAL stays bounded.
        writer
            .pragma_update(None, "wal_autocheckpoint", 4000)
            .map_err(|e| e.to_string())?;
        let writer = Arc::new(Mutex::new(writer));
        let readers = (0..readers.max(1))
            .map(|_| open().map(|c| Arc::new(Mutex::new(c))))
            .collect::<Result<_, _>>()?;
        let checkpointer = open()?;
        let alive = Arc::downgrade(&writer);
        let checkpoint_due = Arc::new(AtomicBool::new(false));
        let due = checkpoint_due.clone();
        let thread = std::thread::Builder::new()
            .name("caseops-sqlite-checkpoint".into())
            .spawn(move || {
                // Woken by writes, not by a clock: an idle server does no work here.
                // The timeout only notices that the store was dropped.
                while alive.strong_count() > 0 {
                    std::thread::park_timeout(std::time::Duration::from_secs(1));
                    if !due.swap(false, Ordering::AcqRel) {
                        continue;
                    }
                    std::thread::sleep(CHECKPOINT_GATHER);
                    // PASSIVE never blocks writers or readers; it copies what it can.
                    let _ = checkpointer.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
                }
            })
            .map_err(|e| format!("cannot start the checkpoint thread: {e}"))?;
        Ok(Self {
            writer,
            waiting: Arc::default(),
            group: Arc::default(),
            readers,
            next: AtomicUsize::new(0),
            checkpoint_due,
            checkpointer: thread.thread().clone(),
        })
    }

    async fn reader(&self) -> OwnedMutexGuard<rusqlite::Connection> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.readers.len() {
            let candidate = &self.readers[(start + i) % self.readers.len()];
            if let Ok(guard) = candidate.clone().try_lock_owned() {
                return guard;
            }
        }
        self.readers[start % self.readers.len()]
            .clone()
            .lock_owned()
            .await
    }

    /// The writer, with no transaction of a group left open on it.
    pub(crate) async fn writer(&self) -> Writer {
        let w = self.joining_writer().await;
        // Its members are told the outcome; this caller wrote nothing in it.
        let _ = flush_group(&w.conn, &self.group);
        w
    }

    async fn joining_writer(&self) -> Writer {
        // Counted while waiting, cancelled or not: the guard takes it back.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let waiting = Waiting(&self.waiting);
        let conn = self.writer.clone().lock_owned().await;
        drop(waiting);
        Writer {
            waiting: self.waiting.clone(),
            conn,
            due: self.checkpoint_due.clone(),
            checkpointer: self.checkpointer.clone(),
        }
    }
}

/// Group commit on SQLite: the write transactions that queue for the one writer
/// share one SQLite transaction, and one COMMIT makes them all durable.
///
/// The first opens it (`BEGIN IMMEDIATE`); each later one runs inside it under a
/// savepoint, so that one that fails or is dropped undoes only its own writes. A
/// transaction that commits while another task waits for the writer releases
/// its savepoint, hands the writer over and waits for the shared COMMIT; the
/// last one, with nobody waiting, commits for all and tells each the outcome. A
/// COMMIT that fails fails every member, none of which has returned yet, so no
/// caller ever acted on a write that was then lost. Why: at c=8 the writer was
/// what runs waited for (six acquisitions per run, 41% of a run's CPU held under
/// it), and each commit wrote its own WAL frames for pages the next one rewrote.
///
/// `None`: no transaction is open on the writer. `Some(members)`: one is, and
/// `members` have released their savepoints into it.
type Group = Arc<std::sync::Mutex<Option<Vec<tokio::sync::oneshot::Sender<Result<(), String>>>>>>;

/// Commits the writer's shared transaction, if one is open, tells its members
/// the outcome and returns it.
fn flush_group(conn: &rusqlite::Connection, group: &Group) -> Result<(), DbError> {
    let Some(members) = group.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return Ok(());
    };
    let done = if conn.is_autocommit() {
        // An error (a full disk, say) made SQLite roll the whole transaction back.
        Err(DbError::Task(
            "the shared write transaction was rolled back by an earlier error".into(),
        ))
    } else {
        conn.execute_batch("COMMIT").map_err(DbError::from)
    };
    if done.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    for member in members {
        let _ = member.send(done.as_ref().map(|_| ()).map_err(|e| e.to_string()));
    }
    done
}

/// The writer connection, held. What was written through it is copied into the
/// database shortly after it is let go: the checkpoint thread is told then, not
/// when the write begins, so a write that takes longer than the thread's gather
/// time is not left in the WAL until some later write.
pub(crate) struct Writer {
    waiting: Arc<AtomicUsize>,
    conn: OwnedMutexGuard<rusqlite::Connection>,
    due: Arc<AtomicBool>,
    checkpointer: std::thread::Thread,
}

impl Writer {
    /// Whether another task waits for the writer. The lock is handed to the first
    /// waiter when it is let go, but that task runs only when its worker thread
    /// gets to it: woken from this task, it sits in this thread's next-task slot,
    /// which the other thread cannot steal, behind whatever this task does next.
    fn others_wait(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }
}

impl std::ops::Deref for Writer {
    type Target = rusqlite::Connection;
    fn deref(&self) -> &rusqlite::Connection {
        &self.conn
    }
}

impl std::ops::DerefMut for Writer {
    fn deref_mut(&mut self) -> &mut rusqlite::Connection {
        &mut self.conn
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.due.swap(true, Ordering::AcqRel) {
            self.checkpointer.unpark();
        }
    }
}

fn sqlite_rows(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[Param],
) -> Result<Vec<Row>, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    let names: Arc<[String]> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let width = names.len();
    let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let mut cells = Vec::with_capacity(width);
        for i in 0..width {
            cells.push(match r.get::<_, SqliteValue>(i)? {
                SqliteValue::Null => Cell::Null,
                SqliteValue::Integer(v) => Cell::Int(v),
                SqliteValue::Real(v) => Cell::Real(v),
                SqliteValue::Text(v) => Cell::Text(v),
                SqliteValue::Blob(v) => Cell::Text(String::from_utf8_lossy(&v).into_owned()),
            });
        }
        out.push(Row {
            names: names.clone(),
            cells,
        });
    }
    Ok(out)
}

fn sqlite_execute(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[Param],
) -> Result<u64, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(sql)?;
    Ok(stmt.execute(rusqlite::params_from_iter(params.iter()))? as u64)
}

/// PostgreSQL numbers its placeholders: `?` becomes `$1, $2, …` (our SQL never
/// holds a `?` inside a literal).
fn numbered(sql: &str) -> String {
    // Runs on every PostgreSQL execution, over statements of several KB with dozens
    // of placeholders: copy the text between them whole, and write each number's
    // digits by hand (through `fmt` they cost a tenth of a run's formatting).
    let mut out = String::with_capacity(sql.len() + sql.len() / 16);
    let mut digits = [0u8; 20];
    for (n, piece) in sql.split('?').enumerate() {
        if n > 0 {
            let (mut rest, mut start) = (n, digits.len());
            loop {
                start -= 1;
                digits[start] = b'0' + (rest % 10) as u8;
                rest /= 10;
                if rest == 0 {
                    break;
                }
            }
            out.push('$');
            out.extend(digits[start..].iter().map(|&d| char::from(d)));
        }
        out.push_str(piece);
    }
    out
}

fn pg_query(
    sql: &str,
    params: &[Param],
) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
    let mut q = sqlx::query(sqlx::AssertSqlSafe(numbered(sql)));
    for p in params {
        q = match p {
            Param::Int(v) => q.bind(*v),
            Param::Real(v) => q.bind(*v),
            Param::Text(v) => q.bind(v.clone()),
        };
    }
    q
}

/// A row as SQLite would give it: integers (booleans as 0 and 1), doubles (a
/// `real` widened), text, and binary read as text. A value that does not decode
/// is an error naming its column, never a NULL in its place.
fn pg_row(row: &sqlx::any::AnyRow, names: &Arc<[String]>) -> Result<Row, DbError> {
    use sqlx::any::AnyTypeInfoKind as Kind;
    let cells = row
        .columns()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let cell = match column.type_info().kind() {
                Kind::Null => Ok(Cell::Null),
                Kind::Bool => row
                    .try_get::<Option<bool>, _>(i)
                    .map(|v| v.map_or(Cell::Null, |v| Cell::Int(v.into()))),
                Kind::SmallInt | Kind::Integer | Kind::BigInt => row
                    .try_get::<Option<i64>, _>(i)
                    .map(|v| v.map_or(Cell::Null, Cell::Int)),
                Kind::Real => row
                    .try_get::<Option<f32>, _>(i)
                    .map(|v| v.map_or(Cell::Null, |v| Cell::Real(v.into()))),
                Kind::Double => row
                    .try_get::<Option<f64>, _>(i)
                    .map(|v| v.map_or(Cell::Null, Cell::Real)),
                Kind::Blob => row.try_get::<Option<Vec<u8>>, _>(i).map(|v| {
                    v.map_or(Cell::Null, |v| {
                        Cell::Text(String::from_utf8_lossy(&v).into_owned())
                    })
                }),
                Kind::Text => row
                    .try_get::<Option<String>, _>(i)
                    .map(|v| v.map_or(Cell::Null, Cell::Text)),
            };
            cell.map_err(|e| DbError::Corrupt {
                table: "query",
                message: format!("column `{}` could not be read: {e}", column.name()),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Row {
        names: names.clone(),
        cells,
    })
}

/// PostgreSQL connections, leased one statement or transaction at a time.
///
/// sqlx's pool sends a `Sync` and waits for the answer whenever a connection goes
/// back to it, to find connections a cancelled statement left mid-protocol: one more
/// round trip for every statement, nearly half of a run's. Here a lease knows
/// whether its work finished (`clean`); an unfinished one (its future dropped, or an
/// error) closes its connection instead of returning it, and a finished one goes
/// back as it is. sqlx's pool still opens the connections (with their settings)
/// and runs the migrations.
#[derive(Debug)]
pub(crate) struct Pg {
    pub(crate) pool: sqlx::AnyPool,
    idle: std::sync::Mutex<Vec<sqlx::AnyConnection>>,
    /// Leased plus idle connections never exceed its permits.
    permits: Arc<tokio::sync::Semaphore>,
}

/// How long a statement waits for a connection when all are leased.
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Pg {
    pub(crate) fn new(pool: sqlx::AnyPool, max_connections: u32) -> Arc<Self> {
        Arc::new(Pg {
            pool,
            idle: Default::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(max_connections.max(1) as usize)),
        })
    }

    async fn lease(self: &Arc<Self>) -> Result<Lease, DbError> {
        let permit = tokio::time::timeout(ACQUIRE_TIMEOUT, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| DbError::Query(sqlx::Error::PoolTimedOut))?
            .map_err(|_| DbError::Query(sqlx::Error::PoolClosed))?;
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match idle {
            Some(conn) => conn,
            // A new connection through sqlx's pool (its `after_connect` settings),
            // then taken out of it: this lease's permit is what counts it.
            None => self.pool.acquire().await?.detach(),
        };
        Ok(Lease {
            conn: Some(conn),
            clean: false,
            home: self.clone(),
            _permit: permit,
        })
    }
}

/// One connection, leased; see [`Pg`].
pub(crate) struct Lease {
    conn: Option<sqlx::AnyConnection>,
    /// Set once the lease's work finished: only then may the connection be reused.
    clean: bool,
    home: Arc<Pg>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Lease {
    /// Runs `work` on the connection; the lease is clean again only if it finished,
    /// with a result or with an error the server answered.
    async fn run<T, F>(&mut self, work: F) -> Result<T, DbError>
    where
        F: for<'c> FnOnce(
            &'c mut sqlx::AnyConnection,
        ) -> futures_util::future::BoxFuture<'c, Result<T, sqlx::Error>>,
    {
        self.clean = false;
        let conn = self
            .conn
            .as_mut()
            .ok_or(DbError::Query(sqlx::Error::PoolClosed))?;
        let out = work(conn).await;
        // An error the server answered (a constraint, say) leaves the connection
        // ready for the next statement; any other may have left it mid-message.
        self.clean = matches!(&out, Ok(_) | Err(sqlx::Error::Database(_)));
        Ok(out?)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.clean
        {
            self.home
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
        // Otherwise the connection is dropped here, which closes its socket: the
        // server ends the session and rolls back whatever it had begun.
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("clean", &self.clean).finish()
    }
}

async fn pg_fetch(lease: &mut Lease, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
    let query = pg_query(sql, params);
    let rows = lease.run(|c| Box::pin(query.fetch_all(c))).await?;
    // The rows of one result share their column names, as SQLite's do.
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let names: Arc<[String]> = first
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    rows.iter().map(|row| pg_row(row, &names)).collect()
}

async fn pg_execute(lease: &mut Lease, sql: &str, params: &[Param]) -> Result<u64, DbError> {
    let query = pg_query(sql, params);
    Ok(lease
        .run(|c| Box::pin(query.execute(c)))
        .await?
        .rows_affected())
}

/// Where a statement runs.
#[derive(Debug)]
pub(crate) enum Backend {
    Sqlite(Sqlite),
    /// Its connections run with `synchronous_commit = off`: a statement outside a
    /// flushed transaction ([`Backend::begin_write`] with `lazy: false`) may reach
    /// the disk a moment after it returns. Everything that must survive a crash of
    /// the database (terminal runs, commits before writes, seeded reference data)
    /// is written in a flushed transaction, which also flushes all before it.
    Postgres(Arc<Pg>),
}

/// Runs a statement on a leased connection and reads every row it returns.
async fn pg_rows(pg: &Arc<Pg>, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
    pg_fetch(&mut pg.lease().await?, sql, params).await
}

impl Backend {
    pub(crate) async fn fetch_all(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
        sent(1);
        match self {
            Backend::Sqlite(s) => Ok(sqlite_rows(&*s.reader().await, sql, params)?),
            Backend::Postgres(pg) => pg_rows(pg, sql, params).await,
        }
    }

    pub(crate) async fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        sent(1);
        match self {
            Backend::Sqlite(s) => Ok(sqlite_execute(&*s.writer().await, sql, params)?),
            Backend::Postgres(pg) => pg_execute(&mut pg.lease().await?, sql, params).await,
        }
    }

    /// A statement that writes and returns rows (`… RETURNING`), outside any
    /// transaction (on SQLite, on the writer connection).
    pub(crate) async fn write_returning(
        &self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<Row>, DbError> {
        sent(1);
        match self {
            Backend::Sqlite(s) => Ok(sqlite_rows(&*s.writer().await, sql, params)?),
            Backend::Postgres(pg) => pg_rows(pg, sql, params).await,
        }
    }

    pub(crate) async fn begin_write(&self, lazy: bool) -> Result<Tx, DbError> {
        sent(1);
        match self {
            Backend::Sqlite(s) => {
                let conn = s.joining_writer().await;
                // A shared transaction an error rolled back is ended (its members
                // told) before a new one opens.
                if conn.is_autocommit() {
                    let _ = flush_group(&conn, &s.group);
                }
                let joined = {
                    let mut group = s.group.lock().unwrap_or_else(|e| e.into_inner());
                    if group.is_none() {
                        // Take the write lock up front: a transaction that reads first
                        // and then upgrades can fail at once with SQLITE_BUSY under
                        // another writer.
                        conn.execute_batch("BEGIN IMMEDIATE")?;
                        *group = Some(Vec::new());
                        false
                    } else {
                        true
                    }
                };
                if joined {
                    conn.execute_batch("SAVEPOINT batch")?;
                }
                Ok(Tx(TxInner::Sqlite(SqliteTx {
                    conn,
                    open: true,
                    joined,
                    group: s.group.clone(),
                })))
            }
            Backend::Postgres(pg) => {
                // Connections default to lazy commits (see `Backend::Postgres`); a
                // flushed transaction says so in its BEGIN (one simple query).
                let begin = if lazy {
                    "BEGIN"
                } else {
                    "BEGIN; SET LOCAL synchronous_commit = on"
                };
                let mut lease = pg.lease().await?;
                lease
                    .run(|c| Box::pin(async move { sqlx::raw_sql(begin).execute(c).await }))
                    .await?;
                // Inside a transaction the connection must not be reused until it
                // ends: a `Tx` dropped unfinished closes it, which rolls it back.
                lease.clean = false;
                Ok(Tx(TxInner::Postgres(lease)))
            }
        }
    }
}

/// A write transaction; dropped without [`Tx::commit`], it rolls back.
pub struct Tx(TxInner);

enum TxInner {
    Sqlite(SqliteTx),
    Postgres(Lease),
}

struct SqliteTx {
    conn: Writer,
    open: bool,
    /// Run under a savepoint in a shared transaction another opened (see [`Group`]).
    joined: bool,
    group: Group,
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // Nothing of an unfinished transaction is kept.
        if self.joined {
            let _ = self.conn.execute_batch("ROLLBACK TO batch; RELEASE batch");
            // The members before it still wait for a COMMIT.
            if !self.conn.others_wait() {
                let _ = flush_group(&self.conn, &self.group);
            }
        } else {
            // Its opener holds the writer until it hands it over, so nobody has
            // joined yet: the whole transaction is its own.
            let _ = self.conn.execute_batch("ROLLBACK");
            self.group.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
    }
}

/// How long a member of a shared transaction waits for its COMMIT before it
/// commits the transaction itself: the task it handed the writer to may have
/// been cancelled before it took it.
const GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

impl Tx {
    pub async fn fetch_all(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Row>, DbError> {
        sent(1);
        match &mut self.0 {
            TxInner::Sqlite(s) => Ok(sqlite_rows(&s.conn, sql, params)?),
            TxInner::Postgres(lease) => {
                let rows = pg_fetch(lease, sql, params).await;
                lease.clean = false;
                rows
            }
        }
    }

    pub async fn fetch_optional(
        &mut self,
        sql: &str,
        params: &[Param],
    ) -> Result<Option<Row>, DbError> {
        Ok(self.fetch_all(sql, params).await?.into_iter().next())
    }

    pub async fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, DbError> {
        sent(1);
        match &mut self.0 {
            TxInner::Sqlite(s) => Ok(sqlite_execute(&s.conn, sql, params)?),
            TxInner::Postgres(lease) => {
                let done = pg_execute(lease, sql, params).await;
                lease.clean = false;
                done
            }
        }
    }

    pub async fn commit(self) -> Result<(), DbError> {
        sent(1);
        match self.0 {
            TxInner::Sqlite(mut s) => {
                if s.joined {
                    s.conn.execute_batch("RELEASE batch")?;
                }
                s.open = false;
                if !s.conn.others_wait() {
                    return flush_group(&s.conn, &s.group);
                }
                // Hand the writer over and wait for the shared COMMIT (see [`Group`]).
                let (told, mut outcome) = tokio::sync::oneshot::channel();
                if let Some(members) = s.group.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    members.push(told);
                }
                let (group, writer) = (
                    s.group.clone(),
                    tokio::sync::OwnedMutexGuard::mutex(&s.conn.conn).clone(),
                );
                drop(s);
                loop {
                    match tokio::time::timeout(GROUP_WAIT, &mut outcome).await {
                        Ok(Ok(done)) => return done.map_err(DbError::Task),
                        Ok(Err(_)) => {
                            return Err(DbError::Task("the shared commit was abandoned".into()));
                        }
                        // The waiter gave up before it took the writer: commit here.
                        Err(_) => {
                            let _ = flush_group(&*writer.clone().lock_owned().await, &group);
                        }
                    }
                }
            }
            // COMMIT runs to its end even if the caller is dropped meanwhile: the
            // transaction is committed as soon as it was asked to be, and the
            // connection goes back (clean) only once the server said so. Awaited in
            // place, not spawned (see `Detachable`).
            TxInner::Postgres(mut lease) => crate::detachable::Detachable::new(async move {
                lease
                    .run(|c| Box::pin(async move { sqlx::raw_sql("COMMIT").execute(c).await }))
                    .await
                    .map(|_| ())
            })
            .await
            .ok_or_else(|| DbError::Task("the commit panicked".into()))?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_placeholder_is_numbered_in_order_and_the_text_between_kept() {
        assert_eq!(numbered("SELECT 1"), "SELECT 1");
        assert_eq!(numbered("?"), "$1");
        assert_eq!(
            numbered("UPDATE t SET a = ?, b = 'x' WHERE k IN (?,?)"),
            "UPDATE t SET a = $1, b = 'x' WHERE k IN ($2,$3)"
        );
        // Numbers of every width a statement reaches, each one where its `?` was.
        let sql = vec!["v = ?"; 1200].join(" AND ");
        let expected = (1..=1200)
            .map(|n| format!("v = ${n}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        assert_eq!(numbered(&sql), expected);
    }

    /// From the WAL-index (`-shm`) header (sqlite.org/walformat.html): the frames
    /// the WAL holds (`mxFrame`) and how many of them a checkpoint has copied into
    /// the database file (`nBackfill`).
    fn wal_frames(shm: &std::path::Path) -> (u32, u32) {
        let bytes = std::fs::read(shm).expect("read the -shm file");
        let at = |i: usize| u32::from_ne_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        (at(16), at(96))
    }

    #[tokio::test]
    async fn each_burst_of_writes_is_copied_into_the_database_without_a_later_commit_however_slow()
    {
        let dir = std::env::temp_dir().join(format!("caseops-checkpoint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let sqlite = Sqlite::open(path.to_str().unwrap(), 1).unwrap();
        let shm = dir.join("store.db-shm");
        // Far below the writer's own threshold (4,000 frames): only the checkpoint
        // thread copies these. The second burst comes after the thread has idled
        // past its timeout. Each write is held open past the thread's gather time,
        // as a slow commit on a busy machine is: it must still be copied.
        for burst in 0..2 {
            let writer = sqlite.writer().await;
            tokio::time::sleep(CHECKPOINT_GATHER * 4).await;
            writer
                .execute_batch("CREATE TABLE IF NOT EXISTS t (v TEXT); INSERT INTO t VALUES ('x')")
                .unwrap();
            drop(writer);
            let mut seen = (0, 0);
            for _ in 0..500 {
                seen = wal_frames(&shm);
                if seen.0 > 0 && seen.1 == seen.0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(
                seen.0 > 0 && seen.1 == seen.0,
                "burst {burst}: {} of {} WAL frames copied",
                seen.1,
                seen.0
            );
            tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
        }
        drop(sqlite);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_commit_lets_the_task_waiting_for_the_writer_run_before_it_goes_on() {
        let dir = tempfile_dir("handover");
        let backend = Arc::new(Backend::Sqlite(
            Sqlite::open(dir.join("store.db").to_str().unwrap(), 1).unwrap(),
        ));
        let mut tx = backend.begin_write(true).await.unwrap();
        tx.execute("CREATE TABLE t (v INTEGER)", &[]).await.unwrap();
        let got_it = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (backend, got_it) = (backend.clone(), got_it.clone());
            tokio::spawn(async move {
                let tx = backend.begin_write(true).await.unwrap();
                got_it.store(true, Ordering::SeqCst);
                tx.commit().await.unwrap();
            })
        };
        // The waiter queues for the writer while the transaction holds it.
        tokio::task::yield_now().await;
        assert!(!got_it.load(Ordering::SeqCst));
        tx.commit().await.unwrap();
        assert!(
            got_it.load(Ordering::SeqCst),
            "the committing task went on while the writer waited for its next holder"
        );
        waiter.await.unwrap();
        drop(backend);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_commit_with_nobody_waiting_returns_without_yielding() {
        let dir = tempfile_dir("alone");
        let backend =
            Backend::Sqlite(Sqlite::open(dir.join("store.db").to_str().unwrap(), 1).unwrap());
        let ran = Arc::new(AtomicBool::new(false));
        let other = {
            let ran = ran.clone();
            tokio::spawn(async move { ran.store(true, Ordering::SeqCst) })
        };
        let tx = backend.begin_write(true).await.unwrap();
        tx.commit().await.unwrap();
        // No task waited for the writer, so the spawned one has not run yet.
        assert!(!ran.load(Ordering::SeqCst));
        other.await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fresh SQLite store in its own folder, with a table `t (v TEXT PRIMARY KEY)`.
    async fn store_with_table(
        name: &str,
    ) -> (std::path::PathBuf, std::path::PathBuf, Arc<Backend>) {
        let dir = tempfile_dir(name);
        let path = dir.join("store.db");
        let backend = Arc::new(Backend::Sqlite(
            Sqlite::open(path.to_str().unwrap(), 1).unwrap(),
        ));
        backend
            .execute("CREATE TABLE t (v TEXT PRIMARY KEY)", &[])
            .await
            .unwrap();
        (dir, path, backend)
    }

    fn rows_of(path: &std::path::Path) -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_commits_share_the_writer_and_each_is_visible_when_it_returns() {
        let (dir, path, backend) = store_with_table("group").await;
        let mut tasks = Vec::new();
        for i in 0..16 {
            let (backend, path) = (backend.clone(), path.clone());
            tasks.push(tokio::spawn(async move {
                for j in 0..20 {
                    let v = format!("{i:02}-{j:02}");
                    let mut tx = backend.begin_write(true).await.unwrap();
                    tx.execute("INSERT INTO t VALUES (?)", &params![v.clone()])
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                    // Committed means readable by any other connection, at once.
                    let seen = rusqlite::Connection::open(&path)
                        .unwrap()
                        .query_row("SELECT count(*) FROM t WHERE v = ?", [&v], |r| {
                            r.get::<_, i64>(0)
                        })
                        .unwrap();
                    assert_eq!(seen, 1, "`{v}` was not committed when its commit returned");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(rows_of(&path).len(), 16 * 20);
        drop(backend);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_transaction_dropped_in_a_shared_one_undoes_only_its_own_writes() {
        let (dir, path, backend) = store_with_table("undo").await;
        let mut first = backend.begin_write(true).await.unwrap();
        first
            .execute("INSERT INTO t VALUES ('kept')", &[])
            .await
            .unwrap();
        let second = {
            let backend = backend.clone();
            tokio::spawn(async move {
                let mut tx = backend.begin_write(true).await.unwrap();
                tx.execute("INSERT INTO t VALUES ('undone')", &[])
                    .await
                    .unwrap();
                // Dropped unfinished, inside the transaction the first opened.
                drop(tx);
            })
        };
        tokio::task::yield_now().await;
        first.commit().await.unwrap();
        second.await.unwrap();
        assert_eq!(rows_of(&path), vec!["kept".to_string()]);
        // The writer is free and no transaction was left open on it.
        let mut third = backend.begin_write(true).await.unwrap();
        third
            .execute("INSERT INTO t VALUES ('later')", &[])
            .await
            .unwrap();
        third.commit().await.unwrap();
        assert_eq!(
            rows_of(&path),
            vec!["kept".to_string(), "later".to_string()]
        );
        drop(backend);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_full_disk_each_commit_that_returned_is_kept_and_each_that_failed_is_not() {
        let (dir, path, backend) = store_with_table("full").await;
        let pages: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        // A disk with room for a few dozen rows more, on the writer's connection.
        backend
            .write_returning(&format!("PRAGMA max_page_count = {}", pages + 40), &[])
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let backend = backend.clone();
            tasks.push(tokio::spawn(async move {
                let (mut kept, mut failed) = (Vec::new(), 0);
                for j in 0..40 {
                    // Each row takes most of a page of its own.
                    let v = format!("{i:02}-{j:02}-{}", "x".repeat(3000));
                    let mut tx = backend.begin_write(true).await.unwrap();
                    let written = match tx
                        .execute("INSERT INTO t VALUES (?)", &params![v.clone()])
                        .await
                    {
                        Ok(_) => tx.commit().await,
                        Err(e) => Err(e),
                    };
                    match written {
                        Ok(()) => kept.push(v[..5].to_string()),
                        Err(_) => failed += 1,
                    }
                }
                (kept, failed)
            }));
        }
        let (mut kept, mut failed) = (Vec::new(), 0);
        for t in tasks {
            let (k, f) = t.await.unwrap();
            kept.extend(k);
            failed += f;
        }
        assert!(failed > 0, "the disk never filled");
        assert!(!kept.is_empty(), "nothing fit");
        kept.sort();
        let on_disk: Vec<String> = rows_of(&path).iter().map(|v| v[..5].to_string()).collect();
        assert_eq!(
            on_disk, kept,
            "what is on disk is exactly what was answered as committed"
        );

        // With room again, the writer takes writes: no transaction was left open.
        backend
            .write_returning("PRAGMA max_page_count = 1073741823", &[])
            .await
            .unwrap();
        let mut tx = backend.begin_write(true).await.unwrap();
        tx.execute("INSERT INTO t VALUES ('later')", &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(rows_of(&path).len(), kept.len() + 1);
        drop(backend);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "caseops-writer-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_gated_commit_keeps_its_parameters_in_placeholder_order() {
        let gated = Statement::gated(
            Statement::new("UPDATE runs SET v = ? WHERE id = ?", params![1, "r"]),
            vec![
                Statement::new(
                    "INSERT INTO a SELECT ? WHERE EXISTS (SELECT 1 FROM fence)",
                    params![2],
                ),
                Statement::new("INSERT INTO b VALUES (?, ?)", params![3, "x"]),
            ],
        );
        assert_eq!(
            numbered(&gated.sql),
            "WITH fence AS (UPDATE runs SET v = $1 WHERE id = $2 RETURNING 1 AS held), \
             s0 AS (INSERT INTO a SELECT $3 WHERE EXISTS (SELECT 1 FROM fence)), \
             s1 AS (INSERT INTO b VALUES ($4, $5)) SELECT held FROM fence"
        );
        assert_eq!(gated.params, params![1, "r", 2, 3, "x"].to_vec());
    }

    #[test]
    fn placeholders_are_numbered_in_order_at_either_end_and_past_nine() {
        assert_eq!(numbered("SELECT 1"), "SELECT 1");
        assert_eq!(numbered("?"), "$1");
        assert_eq!(numbered("? = ?"), "$1 = $2");
        let eleven = ["?"; 11].join(",");
        assert_eq!(
            numbered(&format!("VALUES ({eleven})")),
            "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)"
        );
    }

    #[test]
    fn chained_writes_keep_their_parameters_in_placeholder_order() {
        assert!(Statement::chained(Vec::new()).is_none());
        let one = Statement::new("INSERT INTO a VALUES (?)", params![1]);
        assert_eq!(Statement::chained(vec![one.clone()]), Some(one));
        let chained = Statement::chained(vec![
            Statement::new("INSERT INTO a VALUES (?, ?)", params![1, "r"]),
            Statement::new("INSERT INTO b VALUES (?)", params![2]),
            Statement::new("INSERT INTO c VALUES (?)", params!["x"]),
        ])
        .unwrap();
        assert_eq!(
            numbered(&chained.sql),
            "WITH s0 AS (INSERT INTO a VALUES ($1, $2)), s1 AS (INSERT INTO b VALUES ($3)) \
             INSERT INTO c VALUES ($4)"
        );
        assert_eq!(chained.params, params![1, "r", 2, "x"].to_vec());
    }
}

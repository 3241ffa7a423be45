//! The lines a crash-test child prints and what the parent learns from
//! them: per session, the transactions that began, in order, and how many
//! of them were acknowledged.
//!
//! ```text
//! ready                          the database is open; the workload starts
//! begin <session> <seq> <op>     transaction <seq> of <session> starts now
//! ack <session> <seq>            its commit has returned
//! ```
//!
//! A session runs one transaction at a time, so after `begin … n` the next
//! line of that session is `ack … n`, and `begin … n+1` comes only after
//! it. What the parent holds after the kill is therefore, per session, a
//! prefix of acknowledged transactions and at most one more that began and
//! was not acknowledged: the one in doubt. [`History::record`] refuses any
//! other order, so that a harness bug is not mistaken for engine damage.

use std::collections::BTreeMap;
use std::fmt;

use super::workload::Component;

/// One transaction of a workload (or, for `vacuum` and `checkpoint`, one
/// maintenance statement, acknowledged the same way but changing no row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// INSERT of row (session, key).
    Insert { key: i64 },
    /// `UPDATE … SET v = v + 1` over every row; the table's generation
    /// `generation` once committed.
    Update { generation: i64 },
    /// COPY of batch `batch`.
    Copy { batch: i64 },
    /// DELETE of row `id`.
    Delete { id: i64 },
    /// `v = v + 1` for ids `first..=last` (those still there).
    UpdateRange { first: i64, last: i64 },
    /// DELETE of ids `first..=last`.
    DeleteRange { first: i64, last: i64 },
    /// INSERT of new ids `first..=last` with v = 0.
    InsertRange { first: i64, last: i64 },
    /// CREATE TABLE of table number `table`.
    Create { table: i64 },
    /// INSERT of table `table`'s rows.
    Fill { table: i64 },
    /// DROP TABLE of table `table`.
    Drop { table: i64 },
    /// CREATE TABLE of table number `table` and COPY of its rows in one
    /// transaction (the load skips the WAL and syncs the table at commit).
    Load { table: i64 },
    /// VACUUM of the component's table.
    Vacuum,
    /// CHECKPOINT.
    Checkpoint,
    /// A lock session's transaction: its own rows locked `FOR NO KEY
    /// UPDATE` and `v = v + 1` for each of them (generation `generation`
    /// once committed), with other rows locked in weaker modes meanwhile.
    LockUpdate { generation: i64 },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Insert { key } => write!(f, "insert {key}"),
            Op::Update { generation } => write!(f, "update {generation}"),
            Op::Copy { batch } => write!(f, "copy {batch}"),
            Op::Delete { id } => write!(f, "delete {id}"),
            Op::UpdateRange { first, last } => write!(f, "update-range {first} {last}"),
            Op::DeleteRange { first, last } => write!(f, "delete-range {first} {last}"),
            Op::InsertRange { first, last } => write!(f, "insert-range {first} {last}"),
            Op::Create { table } => write!(f, "create {table}"),
            Op::Fill { table } => write!(f, "fill {table}"),
            Op::Drop { table } => write!(f, "drop {table}"),
            Op::Load { table } => write!(f, "load {table}"),
            Op::Vacuum => write!(f, "vacuum"),
            Op::Checkpoint => write!(f, "checkpoint"),
            Op::LockUpdate { generation } => write!(f, "lock-update {generation}"),
        }
    }
}

impl Op {
    /// Parses what [`Op`]'s `Display` wrote.
    pub fn parse(words: &[&str]) -> Option<Op> {
        let n = |i: usize| words.get(i)?.parse::<i64>().ok();
        let (op, arity) = match *words.first()? {
            "insert" => (Op::Insert { key: n(1)? }, 2),
            "update" => (Op::Update { generation: n(1)? }, 2),
            "copy" => (Op::Copy { batch: n(1)? }, 2),
            "delete" => (Op::Delete { id: n(1)? }, 2),
            "update-range" => (
                Op::UpdateRange {
                    first: n(1)?,
                    last: n(2)?,
                },
                3,
            ),
            "delete-range" => (
                Op::DeleteRange {
                    first: n(1)?,
                    last: n(2)?,
                },
                3,
            ),
            "insert-range" => (
                Op::InsertRange {
                    first: n(1)?,
                    last: n(2)?,
                },
                3,
            ),
            "create" => (Op::Create { table: n(1)? }, 2),
            "fill" => (Op::Fill { table: n(1)? }, 2),
            "drop" => (Op::Drop { table: n(1)? }, 2),
            "load" => (Op::Load { table: n(1)? }, 2),
            "vacuum" => (Op::Vacuum, 1),
            "checkpoint" => (Op::Checkpoint, 1),
            "lock-update" => (Op::LockUpdate { generation: n(1)? }, 2),
            _ => return None,
        };
        (words.len() == arity).then_some(op)
    }
}

/// A session of the child: its component and its number within it
/// (`insert.2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionName {
    pub component: Component,
    pub index: u32,
}

impl fmt::Display for SessionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.component.name(), self.index)
    }
}

impl SessionName {
    fn parse(text: &str) -> Option<SessionName> {
        let (component, index) = text.split_once('.')?;
        Some(SessionName {
            component: Component::from_name(component)?,
            index: index.parse().ok()?,
        })
    }
}

/// What the parent knows of one session: every transaction that began,
/// in order, and how many of the first ones were acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionLog {
    ops: Vec<Op>,
    acked: usize,
}

impl SessionLog {
    /// The acknowledged transactions, in order.
    pub fn acked(&self) -> &[Op] {
        &self.ops[..self.acked]
    }

    /// The transaction that began and was not acknowledged, if any: it
    /// may have committed or not, and either is correct.
    pub fn in_doubt(&self) -> Option<Op> {
        debug_assert!(self.ops.len() <= self.acked + 1);
        self.ops.get(self.acked).copied()
    }

    /// Every transaction that began.
    pub fn began(&self) -> &[Op] {
        &self.ops
    }
}

/// Everything the child said, per session.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub ready: bool,
    sessions: BTreeMap<SessionName, SessionLog>,
}

impl History {
    /// Takes in one complete line of the child's output, refusing lines
    /// out of the protocol's order (see the module comment).
    pub fn record(&mut self, line: &str) -> Result<(), String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = |why: &str| format!("child protocol: {why} in line \"{line}\"");
        match words.as_slice() {
            ["ready"] if !self.ready => {
                self.ready = true;
                Ok(())
            }
            ["begin", session, seq, op @ ..] if self.ready => {
                let session = SessionName::parse(session).ok_or_else(|| bad("unknown session"))?;
                let seq: usize = seq.parse().map_err(|_| bad("no sequence number"))?;
                let op = Op::parse(op).ok_or_else(|| bad("unknown operation"))?;
                let log = self.sessions.entry(session).or_default();
                if log.ops.len() != log.acked || seq != log.ops.len() + 1 {
                    return Err(bad("a transaction began out of order"));
                }
                log.ops.push(op);
                Ok(())
            }
            ["ack", session, seq] if self.ready => {
                let session = SessionName::parse(session).ok_or_else(|| bad("unknown session"))?;
                let seq: usize = seq.parse().map_err(|_| bad("no sequence number"))?;
                let log = self
                    .sessions
                    .get_mut(&session)
                    .ok_or_else(|| bad("an acknowledgement of nothing"))?;
                if seq != log.acked + 1 || seq != log.ops.len() {
                    return Err(bad("an acknowledgement out of order"));
                }
                log.acked = seq;
                Ok(())
            }
            _ => Err(bad("an unexpected line")),
        }
    }

    /// The log of `session` (empty if it never began anything).
    pub fn session(&self, session: SessionName) -> SessionLog {
        self.sessions.get(&session).cloned().unwrap_or_default()
    }

    /// The logs of every session of `component`, with their names.
    pub fn sessions_of(&self, component: Component) -> Vec<(SessionName, &SessionLog)> {
        self.sessions
            .iter()
            .filter(|(name, _)| name.component == component)
            .map(|(name, log)| (*name, log))
            .collect()
    }

    /// Acknowledged transactions, all sessions.
    pub fn acked_count(&self) -> usize {
        self.sessions.values().map(|l| l.acked).sum()
    }

    /// Transactions in doubt, all sessions.
    pub fn in_doubt_count(&self) -> usize {
        self.sessions
            .values()
            .filter(|l| l.in_doubt().is_some())
            .count()
    }
}

/// The line that says a transaction begins.
pub fn begin_line(session: SessionName, seq: usize, op: Op) -> String {
    format!("begin {session} {seq} {op}")
}

/// The line that acknowledges it.
pub fn ack_line(session: SessionName, seq: usize) -> String {
    format!("ack {session} {seq}")
}

/// The first line.
pub const READY_LINE: &str = "ready";

#[cfg(test)]
mod tests {
    use super::*;

    const INSERT_1: SessionName = SessionName {
        component: Component::Insert,
        index: 1,
    };

    #[test]
    fn every_op_reads_back_as_written() {
        for op in [
            Op::Insert { key: 7 },
            Op::Update { generation: 3 },
            Op::Copy { batch: 2 },
            Op::Delete { id: 4711 },
            Op::UpdateRange { first: 1, last: 9 },
            Op::DeleteRange { first: 3, last: 3 },
            Op::InsertRange {
                first: 5001,
                last: 5010,
            },
            Op::Create { table: 4 },
            Op::Fill { table: 4 },
            Op::Drop { table: 1 },
            Op::Load { table: 5 },
            Op::Vacuum,
            Op::Checkpoint,
            Op::LockUpdate { generation: 6 },
        ] {
            let text = op.to_string();
            let words: Vec<&str> = text.split(' ').collect();
            assert_eq!(Op::parse(&words), Some(op), "{text}");
        }
        assert_eq!(Op::parse(&["insert"]), None);
        assert_eq!(Op::parse(&["vacuum", "1"]), None);
    }

    #[test]
    fn a_session_has_an_acknowledged_prefix_and_at_most_one_in_doubt() {
        let mut h = History::default();
        h.record("ready").unwrap();
        h.record(&begin_line(INSERT_1, 1, Op::Insert { key: 1 }))
            .unwrap();
        h.record(&ack_line(INSERT_1, 1)).unwrap();
        h.record(&begin_line(INSERT_1, 2, Op::Insert { key: 2 }))
            .unwrap();
        let log = h.session(INSERT_1);
        assert_eq!(log.acked(), [Op::Insert { key: 1 }]);
        assert_eq!(log.in_doubt(), Some(Op::Insert { key: 2 }));
        assert_eq!((h.acked_count(), h.in_doubt_count()), (1, 1));
        // A second transaction may not begin before the first's ack.
        let e = h
            .record(&begin_line(INSERT_1, 3, Op::Insert { key: 3 }))
            .unwrap_err();
        assert!(e.contains("out of order"), "{e}");
        // Nor may an ack skip one.
        let e = h.record(&ack_line(INSERT_1, 3)).unwrap_err();
        assert!(e.contains("out of order"), "{e}");
    }

    #[test]
    fn lines_before_ready_and_unknown_lines_are_refused() {
        let mut h = History::default();
        assert!(h.record("ack insert.0 1").is_err());
        h.record("ready").unwrap();
        assert!(h.record("begin nosuch.0 1 insert 1").is_err());
        assert!(h.record("begin insert.0 1 frobnicate").is_err());
        assert!(h.record("ack insert.0 1").is_err());
    }
}

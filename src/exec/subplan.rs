//! Subqueries inside expressions: PostgreSQL's SubPlans and InitPlans.
//!
//! A subquery in an expression (`EXISTS (…)`, `x IN (SELECT …)`, a scalar
//! `(SELECT …)`) is a plan tree of its own, a [`SubPlan`], which the
//! expression reaches through a [`SubPlanCall`]: `Expr`'s `SubPlan` kind.
//! Evaluating the expression runs the tree, which needs the session and
//! the snapshot, so such an expression is evaluated with an
//! [`ExecCx`] (see [`super::expr::EvalEnv`]). A scan evaluates its
//! filter under a page's content lock, where no other page may be read,
//! with the bare [`EvalContext`]; a filter that runs a subquery is
//! applied to the page's rows after the lock is released
//! (`SeqScanNode`), with the [`ExecCx`].
//!
//! A subquery that reads columns of the query around it (correlated) gets
//! them as parameters: the planner numbers each outer reference `$n`,
//! the subquery's expressions read `$n` from the [`EvalContext`], and the
//! call evaluates the outer expressions over the current row and sets the
//! parameters before each run. Each run after the first starts the tree
//! over with `rescan`, as a nested loop does its inner side, and every
//! run ends with `close`, so that no scan of the subquery holds pins or a
//! read stream between runs.
//!
//! How often the tree runs ([`SubPlanMode`]), as in PostgreSQL:
//!
//! ```text
//! correlated                      ─▶ PerRow: once per evaluation ("SubPlan n")
//! uncorrelated EXISTS / scalar    ─▶ Once: first use, then its value ("InitPlan n (returns $k)")
//! uncorrelated IN                 ─▶ Hashed: its rows hashed once ("hashed SubPlan n")
//! ```
//!
//! A hashed subquery keeps its rows in memory up to `work_mem`; beyond it
//! the set is dropped and the subquery runs per evaluation instead, reading
//! its rows again each time (slow, but within the memory limit: PostgreSQL
//! makes the same choice when planning, from its estimates).
//!
//! Three-valued logic follows PostgreSQL's `= ANY`: `x IN (…)` is true if
//! some row equals x, else NULL if x is NULL or some comparison was NULL,
//! else false; over no rows it is false even for a NULL x. `NOT IN` is its
//! negation, so a NULL among the subquery's values makes `x NOT IN (…)`
//! NULL for every x not found.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;

use super::agg::GroupKey;
use super::expr::Expr;
use super::plan::{drain_batches_of, ExecCx, Flow, PlanNode, BATCH_ROWS_MAX};
use super::ExecError;
use crate::sort::row_bytes;
use crate::types::{compare, ColumnType, Value};

/// What a subquery's rows mean to the expression around it.
pub enum SubLink {
    /// `EXISTS (…)`: whether it returns a row.
    Exists,
    /// `(SELECT …)` as a value: its one row's one column, NULL without a
    /// row, an error with more than one.
    Scalar,
    /// `left IN (SELECT …)`, PostgreSQL's `= ANY`: `right` is the
    /// comparison's right operand over a row of the subquery (its column,
    /// cast to the type it is compared in).
    Any { right: Expr },
    /// `ARRAY(SELECT …)`: its rows' one column as an array, in the rows'
    /// order; an empty array without a row. **Departure:** arrays are
    /// their text here (`{a,b}`, type text), as there is no array type.
    Array,
}

/// How often a subquery runs (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubPlanMode {
    PerRow,
    Once,
    Hashed,
}

/// A subquery's values, hashed ([`SubPlanMode::Hashed`]).
#[derive(Default)]
struct HashedRows {
    values: HashSet<GroupKey>,
    /// Some value was NULL.
    saw_null: bool,
    /// The subquery returned a row.
    any_rows: bool,
    /// The key a lookup searches for, kept to reuse its allocation: an
    /// outer row's lookup allocates nothing.
    probe: GroupKey,
}

/// Where a hashed subquery is.
enum HashState {
    NotBuilt,
    Built(HashedRows),
    /// Its values exceeded `work_mem`: it runs per evaluation.
    TooBig,
}

/// A subquery's plan tree and what its runs left.
pub struct SubPlan {
    /// PostgreSQL's plan id: "SubPlan 1", "InitPlan 2".
    pub number: usize,
    pub link: SubLink,
    pub mode: SubPlanMode,
    pub root: Box<dyn PlanNode>,
    /// The parameter an InitPlan's value is shown as (`$0`).
    pub output_param: usize,
    ty: Option<ColumnType>,
    /// The tree ran (the next run rescans it first).
    started: bool,
    /// A [`SubPlanMode::Once`] subquery's value, once computed.
    value: Option<Value>,
    hashed: HashState,
}

impl SubPlan {
    /// A subquery of `root`, whose value is `ty` for [`SubLink::Scalar`]
    /// (boolean otherwise).
    pub fn new(
        number: usize,
        link: SubLink,
        mode: SubPlanMode,
        root: Box<dyn PlanNode>,
        output_param: usize,
        ty: Option<ColumnType>,
    ) -> SubPlan {
        debug_assert!(
            mode != SubPlanMode::Hashed || matches!(link, SubLink::Any { .. }),
            "only IN is hashed"
        );
        let ty = match link {
            SubLink::Scalar => ty,
            SubLink::Array => Some(ColumnType::Text),
            SubLink::Exists | SubLink::Any { .. } => Some(ColumnType::Boolean),
        };
        SubPlan {
            number,
            link,
            mode,
            root,
            output_param,
            ty,
            started: false,
            value: None,
            hashed: HashState::NotBuilt,
        }
    }

    /// The line EXPLAIN shows above its tree.
    pub fn title(&self) -> String {
        match self.mode {
            SubPlanMode::Once => {
                format!("InitPlan {} (returns ${})", self.number, self.output_param)
            }
            SubPlanMode::PerRow | SubPlanMode::Hashed => format!("SubPlan {}", self.number),
        }
    }

    /// How an expression using it shows it (`$0`, `(SubPlan 1)`,
    /// `(hashed SubPlan 1)`), as PostgreSQL's EXPLAIN does.
    pub fn reference(&self) -> String {
        match self.mode {
            SubPlanMode::Once => format!("${}", self.output_param),
            SubPlanMode::PerRow => format!("(SubPlan {})", self.number),
            SubPlanMode::Hashed => format!("(hashed SubPlan {})", self.number),
        }
    }

    /// Its value for the current parameters, `left` being `Any`'s left
    /// operand.
    fn evaluate(&mut self, left: Option<Value>, cx: &mut ExecCx) -> Result<Value, ExecError> {
        match self.mode {
            SubPlanMode::Once => {
                if let Some(v) = &self.value {
                    return Ok(v.clone());
                }
                let v = self.run(left.as_ref(), cx)?;
                self.value = Some(v.clone());
                Ok(v)
            }
            SubPlanMode::PerRow => self.run(left.as_ref(), cx),
            SubPlanMode::Hashed => {
                if let HashState::NotBuilt = self.hashed {
                    self.hashed = self.build_hash(cx)?;
                }
                match &mut self.hashed {
                    HashState::Built(rows) => Ok(lookup(rows, left)),
                    _ => self.run(left.as_ref(), cx),
                }
            }
        }
    }

    /// Starts a run: the tree from the beginning.
    fn start(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        if std::mem::replace(&mut self.started, true) {
            self.root.rescan(cx)?;
        }
        Ok(())
    }

    /// One run of the tree, giving the link's value.
    fn run(&mut self, left: Option<&Value>, cx: &mut ExecCx) -> Result<Value, ExecError> {
        self.start(cx)?;
        let SubPlan { root, link, .. } = self;
        match link {
            SubLink::Exists => {
                let mut found = false;
                pull(root.as_mut(), cx, 1, |_, _| {
                    found = true;
                    Ok(false)
                })?;
                Ok(Value::Boolean(found))
            }
            SubLink::Scalar => {
                let mut value = None;
                pull(root.as_mut(), cx, 2, |row, _| {
                    if value.is_some() {
                        return Err(ExecError::SubqueryRows);
                    }
                    value = Some(row.first().cloned().unwrap_or(Value::Null));
                    Ok(true)
                })?;
                Ok(value.unwrap_or(Value::Null))
            }
            SubLink::Array => {
                let mut elements = Vec::new();
                pull(root.as_mut(), cx, BATCH_ROWS_MAX, |row, _| {
                    elements.push(match row.first() {
                        None | Some(Value::Null) => None,
                        Some(v) => Some(crate::types::value_to_text(v)),
                    });
                    Ok(true)
                })?;
                Ok(Value::Text(super::expr::array_text(elements.into_iter())))
            }
            SubLink::Any { right } => {
                let left = left.ok_or(ExecError::Internal("IN (SELECT …) without its operand"))?;
                let mut any_rows = false;
                let mut saw_null = false;
                let mut found = false;
                pull(root.as_mut(), cx, BATCH_ROWS_MAX, |row, cx| {
                    any_rows = true;
                    match compare(left, &*right.eval_ref(row, cx)?) {
                        Some(Ordering::Equal) => {
                            found = true;
                            Ok(false)
                        }
                        Some(_) => Ok(true),
                        None => {
                            saw_null = true;
                            // A NULL left operand compares with nothing:
                            // one row is enough to know the answer.
                            Ok(!left.is_null())
                        }
                    }
                })?;
                Ok(if found {
                    Value::Boolean(true)
                } else if any_rows && saw_null {
                    Value::Null
                } else {
                    Value::Boolean(false)
                })
            }
        }
    }

    /// Reads every value of the subquery into a set, unless they exceed
    /// `work_mem`.
    fn build_hash(&mut self, cx: &mut ExecCx) -> Result<HashState, ExecError> {
        self.start(cx)?;
        let limit = cx.session.settings.work_mem_bytes();
        let SubPlan { root, link, .. } = self;
        let SubLink::Any { right } = link else {
            return Err(ExecError::Internal("a hashed subquery that is not IN"));
        };
        let mut rows = HashedRows::default();
        let mut mem = 0usize;
        let mut too_big = false;
        pull(root.as_mut(), cx, BATCH_ROWS_MAX, |row, cx| {
            rows.any_rows = true;
            let v = right.eval(row, cx)?;
            if v.is_null() {
                rows.saw_null = true;
                return Ok(true);
            }
            let key = GroupKey(vec![v]);
            mem += row_bytes(&key.0) + std::mem::size_of::<GroupKey>();
            rows.values.insert(key);
            if mem > limit {
                too_big = true;
                return Ok(false);
            }
            Ok(true)
        })?;
        Ok(if too_big {
            HashState::TooBig
        } else {
            HashState::Built(rows)
        })
    }
}

/// `left IN (…)` over hashed values, with `= ANY`'s NULL rules; `left`
/// is moved into the reused probe key, not copied.
fn lookup(rows: &mut HashedRows, left: Option<Value>) -> Value {
    let left = left.unwrap_or(Value::Null);
    if !rows.any_rows {
        return Value::Boolean(false);
    }
    if left.is_null() {
        return Value::Null;
    }
    rows.probe.0.clear();
    rows.probe.0.push(left);
    if rows.values.contains(&rows.probe) {
        Value::Boolean(true)
    } else if rows.saw_null {
        Value::Null
    } else {
        Value::Boolean(false)
    }
}

/// Pulls rows of `root`, at most `max_rows` a batch, handing each to `f`
/// until it answers false or the rows end; closes `root` on every way out
/// (its scans let go of their pages between runs).
fn pull(
    root: &mut dyn PlanNode,
    cx: &mut ExecCx,
    max_rows: usize,
    mut f: impl FnMut(&[Value], &mut ExecCx) -> Result<bool, ExecError>,
) -> Result<(), ExecError> {
    drain_batches_of(root, cx, max_rows, |cx, batch| {
        for row in &batch.rows {
            if !f(row, cx)? {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    })
}

/// A use of a [`SubPlan`] in an expression: the subquery, the left operand
/// of `IN`, and the parameters it passes (`$n` and the expression over the
/// current row that gives it). Clones of an expression share the subplan.
#[derive(Clone)]
pub struct SubPlanCall {
    pub plan: Arc<Mutex<SubPlan>>,
    pub left: Option<Expr>,
    pub args: Vec<(usize, Expr)>,
}

impl std::fmt::Debug for SubPlanCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.plan.try_lock() {
            Some(p) => write!(f, "{}", p.reference()),
            None => write!(f, "(SubPlan running)"),
        }
    }
}

impl SubPlanCall {
    /// The value's type.
    pub fn ty(&self) -> Option<ColumnType> {
        self.plan
            .try_lock()
            .expect("a subquery's type is asked for outside its own run")
            .ty
    }

    /// The expressions it evaluates over the current row.
    pub fn outer_exprs(&self) -> impl Iterator<Item = &Expr> {
        self.left.iter().chain(self.args.iter().map(|(_, e)| e))
    }

    pub fn outer_exprs_mut(&mut self) -> impl Iterator<Item = &mut Expr> {
        self.left
            .iter_mut()
            .chain(self.args.iter_mut().map(|(_, e)| e))
    }

    /// Its value for `row`: the left operand and the parameters evaluated
    /// over it, then the subquery run (or its kept value used).
    pub fn evaluate(&self, row: &[Value], cx: &mut ExecCx) -> Result<Value, ExecError> {
        let left = match &self.left {
            Some(l) => Some(l.eval(row, cx)?),
            None => None,
        };
        for (n, e) in &self.args {
            let v = e.eval(row, cx)?;
            cx.eval.set_param(*n, v);
        }
        let mut plan = self.plan.try_lock().ok_or(ExecError::Internal(
            "a subquery evaluated inside its own run",
        ))?;
        plan.evaluate(left, cx)
    }
}

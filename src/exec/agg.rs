//! Aggregate functions and grouping.
//!
//! An [`Aggregate`] is type-checked when built; its running state is an
//! [`Acc`], one per group. Result types follow PostgreSQL where we have
//! the type: `count` is bigint; `sum` of integers is bigint (PostgreSQL
//! gives numeric for `sum(bigint)`, we give bigint and fail with "bigint out
//! of range" instead), of doubles double; `avg` is double precision
//! (PostgreSQL: numeric for integers); `sum` and `avg` of numerics are
//! numeric, exact (`avg` divided with numeric division's scale);
//! `min`/`max` keep their argument's type. Integer sums run in 128 bits,
//! so only the final result can overflow.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use super::expr::{EvalEnv, Expr};
use super::partition::{HashStats, Partitions, SPILL_DEPTH_MAX};
use super::ExecError;
use crate::sort::{row_bytes, SpillReader};
use crate::types::{as_f64, as_i64, compare, is_numeric, ColumnType, Numeric, TypeError, Value};

/// Which aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    /// `count(*)`: rows.
    CountStar,
    /// `count(x)`: rows where x is not NULL.
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// `string_agg(text, delimiter)`: the values joined, NULLs left
    /// out (the delimiter a constant, see [`Aggregate::string_agg`]).
    StringAgg,
}

impl AggFunc {
    /// Every aggregate SQL can name (`count(*)` is `count` planned with
    /// `*`).
    pub const ALL: [AggFunc; 6] = [
        AggFunc::Count,
        AggFunc::Sum,
        AggFunc::Avg,
        AggFunc::Min,
        AggFunc::Max,
        AggFunc::StringAgg,
    ];

    /// The aggregate called `name` (lower case) taking an argument.
    pub fn by_name(name: &str) -> Option<AggFunc> {
        AggFunc::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The name SQL calls it by.
    pub fn name(self) -> &'static str {
        match self {
            AggFunc::CountStar | AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Avg => "avg",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::StringAgg => "string_agg",
        }
    }
}

/// An aggregate call: function and argument.
#[derive(Debug, Clone)]
pub struct Aggregate {
    func: AggFunc,
    arg: Option<Expr>,
    ty: ColumnType,
    /// `string_agg`'s delimiter.
    delimiter: String,
}

impl Aggregate {
    /// `func(arg)`; `arg` is `None` only for `count(*)`.
    pub fn new(func: AggFunc, arg: Option<Expr>) -> Result<Aggregate, ExecError> {
        let arg_ty = arg.as_ref().and_then(Expr::ty);
        let numeric = arg_ty.is_none_or(is_numeric);
        let no_function = || ExecError::NoFunction {
            call: format!(
                "{}({})",
                func.name(),
                arg_ty.map_or("unknown", ColumnType::name)
            ),
            signature: "sum/avg(integer | bigint | numeric | double precision)",
        };
        let ty = match (func, &arg) {
            (AggFunc::CountStar, None) => ColumnType::BigInt,
            (AggFunc::CountStar, Some(_)) | (_, None) => {
                return Err(ExecError::Internal(
                    "count(*) takes no argument, others one",
                ))
            }
            (AggFunc::Count, Some(_)) => ColumnType::BigInt,
            (AggFunc::Sum | AggFunc::Avg, Some(_)) if !numeric => return Err(no_function()),
            (AggFunc::Sum | AggFunc::Avg, Some(_))
                if matches!(arg_ty, Some(ColumnType::Numeric(_))) =>
            {
                ColumnType::Numeric(None)
            }
            (AggFunc::Sum, Some(_)) => match arg_ty {
                Some(ColumnType::Double) => ColumnType::Double,
                _ => ColumnType::BigInt,
            },
            (AggFunc::Avg, Some(_)) => ColumnType::Double,
            (AggFunc::Min | AggFunc::Max, Some(_)) => arg_ty.unwrap_or(ColumnType::Text),
            (AggFunc::StringAgg, Some(_)) => {
                return Err(ExecError::Internal(
                    "string_agg is made by Aggregate::string_agg",
                ))
            }
        };
        Ok(Aggregate {
            func,
            arg,
            ty,
            delimiter: String::new(),
        })
    }

    /// `string_agg(arg, delimiter)`: `arg` of a character type.
    pub fn string_agg(arg: Expr, delimiter: String) -> Result<Aggregate, ExecError> {
        if !arg.ty().is_none_or(crate::types::is_text) {
            return Err(ExecError::NoFunction {
                call: format!("string_agg({}, text)", crate::types::type_name(arg.ty())),
                signature: "string_agg(text, text)",
            });
        }
        Ok(Aggregate {
            func: AggFunc::StringAgg,
            arg: Some(Expr::cast(arg, ColumnType::Text)?),
            ty: ColumnType::Text,
            delimiter,
        })
    }

    /// The result type.
    pub fn ty(&self) -> ColumnType {
        self.ty
    }

    /// A fresh running state.
    pub fn start(&self) -> Acc {
        match self.func {
            AggFunc::CountStar | AggFunc::Count => Acc::Count(0),
            AggFunc::Sum | AggFunc::Avg
                if self.arg.as_ref().and_then(Expr::ty) == Some(ColumnType::Double) =>
            {
                Acc::Double {
                    sum: 0.0,
                    n: 0,
                    sxx: 0.0,
                }
            }
            // `new` gave sum and avg of a numeric a numeric result.
            AggFunc::Sum | AggFunc::Avg if matches!(self.ty, ColumnType::Numeric(_)) => {
                Acc::Numeric {
                    sum: Numeric::from_i64(0),
                    n: 0,
                }
            }
            AggFunc::Sum | AggFunc::Avg => Acc::Integer { sum: 0, n: 0 },
            AggFunc::Min | AggFunc::Max => Acc::Extreme(Value::Null),
            AggFunc::StringAgg => Acc::Text(None),
        }
    }

    /// Adds `row` to `acc`.
    pub fn update<E: EvalEnv + ?Sized>(
        &self,
        acc: &mut Acc,
        row: &[Value],
        ctx: &mut E,
    ) -> Result<(), ExecError> {
        if let (AggFunc::CountStar, Acc::Count(n)) = (self.func, &mut *acc) {
            *n += 1;
            return Ok(());
        }
        let Some(arg) = &self.arg else {
            return Err(ExecError::Internal("aggregate without argument"));
        };
        let v = arg.eval_ref(row, ctx)?;
        if v.is_null() {
            return Ok(());
        }
        match acc {
            Acc::Count(n) => *n += 1,
            Acc::Text(joined) => {
                let Value::Text(t) = &*v else {
                    return Err(ExecError::Internal("string_agg of a non-text"));
                };
                match joined {
                    None => *joined = Some(t.clone()),
                    Some(j) => {
                        j.push_str(&self.delimiter);
                        j.push_str(t);
                    }
                }
            }
            Acc::Integer { sum, n } => {
                *sum += i128::from(as_i64(&v).unwrap_or(0));
                *n += 1;
            }
            Acc::Double { sum, n, sxx } => {
                let x = as_f64(&v).unwrap_or(0.0);
                let total = *sum + x;
                // As PostgreSQL's float8pl (sum) and float8_accum (avg):
                // finite numbers whose sum, or for avg whose sum of squared
                // deviations (Youngs-Cramer, as float8_accum keeps it),
                // grows to infinity are an error.
                let overflow = |before: f64, after: f64| {
                    after.is_infinite() && before.is_finite() && x.is_finite()
                };
                if overflow(*sum, total) {
                    return Err(ExecError::Overflow);
                }
                if self.func == AggFunc::Avg && *n > 0 {
                    let count = (*n + 1) as f64;
                    let deviation = x * count - total;
                    let grown = *sxx + deviation * deviation / (count * *n as f64);
                    if overflow(*sxx, grown) {
                        return Err(ExecError::Overflow);
                    }
                    *sxx = grown;
                }
                *sum = total;
                *n += 1;
            }
            Acc::Numeric { sum, n } => {
                let Value::Numeric(x) = &*v else {
                    return Err(ExecError::Internal("numeric aggregate of a non-numeric"));
                };
                *sum = sum.add(x)?;
                *n += 1;
            }
            Acc::Extreme(best) => {
                // Of equal numbers the later wins, as PostgreSQL's
                // numeric_smaller and float8_smaller (and their larger)
                // keep their second argument: min of 1.0 then 1.00 is 1.00.
                // Of equal texts the first stays (bpchar_smaller).
                let later_wins_ties = matches!(&*v, Value::Numeric(_) | Value::Double(_));
                let better = match compare(&v, best) {
                    None => true, // best is still NULL
                    Some(ord) if ord.is_eq() => later_wins_ties,
                    Some(ord) => {
                        (self.func == AggFunc::Min && ord.is_lt())
                            || (self.func == AggFunc::Max && ord.is_gt())
                    }
                };
                if better {
                    *best = v.into_owned();
                }
            }
        }
        Ok(())
    }

    /// The result of `acc`.
    pub fn result(&self, acc: &Acc) -> Result<Value, ExecError> {
        Ok(match (self.func, acc) {
            (_, Acc::Count(n)) => Value::BigInt(*n),
            (
                _,
                Acc::Integer { n: 0, .. } | Acc::Double { n: 0, .. } | Acc::Numeric { n: 0, .. },
            ) => Value::Null,
            (AggFunc::Avg, Acc::Numeric { sum, n }) => {
                Value::Numeric(sum.div(&Numeric::from_i64(*n))?)
            }
            (_, Acc::Numeric { sum, .. }) => Value::Numeric(sum.clone()),
            (AggFunc::Avg, Acc::Integer { sum, n }) => Value::Double(*sum as f64 / *n as f64),
            (AggFunc::Avg, Acc::Double { sum, n, .. }) => Value::Double(*sum / *n as f64),
            (_, Acc::Integer { sum, .. }) => Value::BigInt(
                i64::try_from(*sum).map_err(|_| TypeError::OutOfRange { ty: "bigint" })?,
            ),
            (_, Acc::Double { sum, .. }) => Value::Double(*sum),
            (_, Acc::Extreme(v)) => v.clone(),
            (_, Acc::Text(joined)) => joined.clone().map_or(Value::Null, Value::Text),
        })
    }
}

/// The running state of one aggregate in one group.
#[derive(Debug, Clone)]
pub enum Acc {
    Count(i64),
    Integer {
        sum: i128,
        n: i64,
    },
    Double {
        sum: f64,
        n: i64,
        /// Sum of squared deviations, kept for avg only (to fail where
        /// PostgreSQL's float8_accum does).
        sxx: f64,
    },
    /// Sum and count of numerics (exact).
    Numeric {
        sum: Numeric,
        n: i64,
    },
    /// min or max so far (NULL before the first value).
    Extreme(Value),
    /// `string_agg`'s text so far (None before the first value).
    Text(Option<String>),
}

impl Acc {
    /// Memory it owns beyond itself: the text a min or max holds.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Acc::Extreme(Value::Text(t) | Value::Char(t)) | Acc::Text(Some(t)) => t.capacity(),
            Acc::Extreme(Value::Numeric(x)) | Acc::Numeric { sum: x, .. } => x.heap_bytes(),
            _ => 0,
        }
    }
}

/// A group's key values, hashable: NULLs group together, and doubles by
/// value (NaN with NaN, -0 with 0), as PostgreSQL groups them.
#[derive(Debug, Clone, Default)]
pub struct GroupKey(pub Vec<Value>);

impl PartialEq for GroupKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| match (a, b) {
                (Value::Null, Value::Null) => true,
                _ => compare(a, b).is_some_and(|o| o.is_eq()),
            })
    }
}

impl Eq for GroupKey {}

impl Hash for GroupKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for v in &self.0 {
            match v {
                Value::Null => state.write_u8(0),
                // Integers of either width compare equal by value.
                Value::Integer(_) | Value::BigInt(_) => state.write_i64(as_i64(v).unwrap_or(0)),
                Value::Double(x) => {
                    let canonical = if x.is_nan() {
                        f64::NAN
                    } else if *x == 0.0 {
                        0.0
                    } else {
                        *x
                    };
                    state.write_u64(canonical.to_bits());
                }
                // char(n) equals text without its padding, so it hashes
                // as that text: 'a' and 'a  ' are one group.
                Value::Text(s) => s.hash(state),
                Value::Char(s) => crate::types::trim_char_padding(s).hash(state),
                Value::Boolean(b) => state.write_u8(2 + u8::from(*b)),
                Value::Date(d) => state.write_i32(*d),
                Value::Timestamp(t) => state.write_i64(*t),
                // Equal numerics of different scales hash alike.
                Value::Numeric(x) => x.hash(state),
            }
        }
    }
}

/// One group being aggregated: its key values and running states.
pub type Group = (Vec<Value>, Vec<Acc>);

/// Groups aggregated in memory, in order of first appearance, within a
/// memory limit (`work_mem`): once the groups fill it, rows of groups it
/// does not hold go to hash [`Partitions`] (after their key), while rows of
/// the groups it holds still aggregate in place. A group is thus wholly in
/// the table or wholly in one partition (as PostgreSQL 13+ spills hash
/// aggregation).
pub struct GroupTable {
    groups: Vec<Group>,
    index: HashMap<GroupKey, usize>,
    /// The current row's key (kept to reuse its allocation).
    key: GroupKey,
    mem: usize,
    limit: usize,
    depth: u32,
    dir: PathBuf,
    /// Set once full.
    spill: Option<Partitions>,
    /// Most memory the groups held.
    peak_mem: usize,
}

/// The rows of one spilled partition, to aggregate at `depth`.
pub struct SpilledGroups {
    pub rows: SpillReader,
    pub depth: u32,
}

impl GroupTable {
    /// An empty table for partitioning level `depth` (0 for a node's
    /// input), holding about `limit` bytes before it spills to `dir`.
    pub fn new(depth: u32, limit: usize, dir: &Path) -> GroupTable {
        GroupTable {
            groups: Vec::new(),
            index: HashMap::new(),
            key: GroupKey(Vec::new()),
            mem: 0,
            limit,
            depth,
            dir: dir.to_path_buf(),
            spill: None,
            peak_mem: 0,
        }
    }

    /// Adds `row` to its group (made if the table has room, else the row
    /// is spilled, after its key).
    pub fn add<E: EvalEnv + ?Sized>(
        &mut self,
        row: &[Value],
        groups: &[Expr],
        aggs: &[Aggregate],
        eval: &mut E,
    ) -> Result<(), ExecError> {
        self.key.0.clear();
        for g in groups {
            self.key.0.push(g.eval(row, eval)?);
        }
        self.add_keyed(row, aggs, eval)
    }

    /// Adds a row read back from a spilled partition: its group key (of
    /// `key_len` values), computed when it was first seen, then the row.
    /// The key is never computed again, so a volatile key (`random()`)
    /// still puts the row in exactly one group.
    pub fn add_spilled<E: EvalEnv + ?Sized>(
        &mut self,
        spilled: &[Value],
        key_len: usize,
        aggs: &[Aggregate],
        eval: &mut E,
    ) -> Result<(), ExecError> {
        let (key, row) = spilled.split_at(key_len);
        self.key.0.clear();
        self.key.0.extend_from_slice(key);
        self.add_keyed(row, aggs, eval)
    }

    /// Adds `row` to the group of `self.key`.
    fn add_keyed<E: EvalEnv + ?Sized>(
        &mut self,
        row: &[Value],
        aggs: &[Aggregate],
        eval: &mut E,
    ) -> Result<(), ExecError> {
        let at = match self.index.get(&self.key) {
            Some(&at) => at,
            None => {
                if let Some(spill) = &mut self.spill {
                    return spill.push(&self.key, row);
                }
                let at = self.groups.len();
                let accs: Vec<Acc> = aggs.iter().map(Aggregate::start).collect();
                // The key is held twice (the group and the index).
                self.mem += 2 * row_bytes(&self.key.0)
                    + std::mem::size_of_val(accs.as_slice())
                    + std::mem::size_of::<(Group, GroupKey, usize)>();
                self.groups.push((self.key.0.clone(), accs));
                self.index.insert(self.key.clone(), at);
                at
            }
        };
        for (agg, acc) in aggs.iter().zip(self.groups[at].1.iter_mut()) {
            // min and max of text hold a copy of their value, which may
            // grow the group by up to a text's limit.
            let held = acc.heap_bytes();
            agg.update(acc, row, eval)?;
            self.mem = self.mem + acc.heap_bytes() - held;
        }
        self.peak_mem = self.peak_mem.max(self.mem);
        if self.mem > self.limit && self.spill.is_none() && self.depth < SPILL_DEPTH_MAX {
            self.spill = Some(Partitions::new(self.depth, &self.dir));
        }
        Ok(())
    }

    /// Ends the input: the groups held, in order of first appearance, and
    /// the partitions spilled, one level deeper; what it cost is added to
    /// `stats`.
    pub fn finish(
        self,
        stats: &mut HashStats,
    ) -> Result<(Vec<Group>, Vec<SpilledGroups>), ExecError> {
        stats.table_built(self.peak_mem);
        let files = match self.spill {
            Some(p) => p.finish(stats)?,
            None => Vec::new(),
        };
        let spilled = files
            .into_iter()
            .flatten()
            .map(|rows| SpilledGroups {
                rows,
                depth: self.depth + 1,
            })
            .collect();
        Ok((self.groups, spilled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::expr::EvalContext;

    fn run(agg: &Aggregate, values: &[Value]) -> Value {
        let mut acc = agg.start();
        let mut ctx = EvalContext::new();
        for v in values {
            agg.update(&mut acc, std::slice::from_ref(v), &mut ctx)
                .unwrap();
        }
        agg.result(&acc).unwrap()
    }

    #[test]
    fn results_have_postgresql_types_and_skip_nulls() {
        let col = |ty| Some(Expr::column(0, ty));
        let ints = [Value::Integer(1), Value::Null, Value::Integer(4)];
        let sum = Aggregate::new(AggFunc::Sum, col(ColumnType::Integer)).unwrap();
        assert_eq!(sum.ty(), ColumnType::BigInt);
        assert_eq!(run(&sum, &ints), Value::BigInt(5));
        let avg = Aggregate::new(AggFunc::Avg, col(ColumnType::Integer)).unwrap();
        assert_eq!(run(&avg, &ints), Value::Double(2.5));
        let count = Aggregate::new(AggFunc::Count, col(ColumnType::Integer)).unwrap();
        assert_eq!(run(&count, &ints), Value::BigInt(2));
        let star = Aggregate::new(AggFunc::CountStar, None).unwrap();
        assert_eq!(run(&star, &ints), Value::BigInt(3));
        let min = Aggregate::new(AggFunc::Min, col(ColumnType::Integer)).unwrap();
        assert_eq!(run(&min, &ints), Value::Integer(1));
        assert_eq!(run(&min, &[]), Value::Null);
        assert_eq!(run(&sum, &[Value::Null]), Value::Null);
        let davg = Aggregate::new(AggFunc::Avg, col(ColumnType::Double)).unwrap();
        assert_eq!(
            run(&davg, &[Value::Double(1.0), Value::Double(2.0)]),
            Value::Double(1.5)
        );
        let text_sum = Aggregate::new(AggFunc::Sum, col(ColumnType::Text)).unwrap_err();
        assert!(text_sum.to_string().contains("sum(text)"), "{text_sum}");
    }

    #[test]
    fn a_bigint_sum_that_overflows_is_an_error_not_a_wrap() {
        let sum = Aggregate::new(AggFunc::Sum, Some(Expr::column(0, ColumnType::BigInt))).unwrap();
        let mut acc = sum.start();
        let mut ctx = EvalContext::new();
        for _ in 0..2 {
            sum.update(&mut acc, &[Value::BigInt(i64::MAX)], &mut ctx)
                .unwrap();
        }
        assert!(matches!(
            sum.result(&acc),
            Err(ExecError::Type(TypeError::OutOfRange { ty: "bigint" }))
        ));
    }

    #[test]
    fn group_keys_treat_nulls_and_zeros_alike() {
        use std::collections::HashSet;
        let keys: HashSet<GroupKey> = [
            GroupKey(vec![Value::Null]),
            GroupKey(vec![Value::Null]),
            GroupKey(vec![Value::Double(0.0)]),
            GroupKey(vec![Value::Double(-0.0)]),
            GroupKey(vec![Value::Double(f64::NAN)]),
            GroupKey(vec![Value::Double(f64::NAN)]),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys.len(), 3);
    }
}

//! Typed expressions: built (and type-checked) once by the front end,
//! evaluated per row by the executor.
//!
//! Every [`Expr`] knows its result type when it is built, so type errors
//! ("operator does not exist: integer + text") are raised before a
//! statement touches any data, and evaluation never has to guess. The only
//! expression without a type is a NULL literal (PostgreSQL's `unknown`),
//! which takes the type its context wants.
//!
//! Numeric operands are promoted `integer < bigint < numeric < double
//! precision`, as in PostgreSQL; integer arithmetic is checked and fails
//! with "integer out of range" rather than wrapping, and numeric
//! arithmetic is exact (a quotient rounded to the scale PostgreSQL picks). Comparisons and logic follow SQL's
//! three-valued rules: any comparison with NULL is NULL, `false AND NULL`
//! is false, `true OR NULL` is true.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use super::subplan::SubPlanCall;
use super::value::like_match;
use super::ExecError;
use crate::types::datetime::{date_add_days, date_difference};
use crate::types::{
    as_f64, as_i64, assign_value, can_cast, cast_value, category, compare, is_numeric, is_text,
    numeric_rank, type_name, value_to_text, Category, ColumnType, TypeError, Value,
};

/// Longest text a function may build (`repeat`, `||`): far beyond what a
/// row can hold (values larger than a page are refused), but it keeps a
/// typo like `repeat('x', 2000000000)` from exhausting memory.
pub const MAX_TEXT_BYTES: usize = 64 << 20;

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    /// `||`
    Concat,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinaryOp {
    /// The operator as SQL writes it.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Concat => "||",
            BinaryOp::Eq => "=",
            BinaryOp::Ne => "<>",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
        }
    }

    fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// A scalar function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `random()`: uniform in [0, 1).
    Random,
    /// `md5(text)`: hex digest.
    Md5,
    /// `repeat(text, integer)`.
    Repeat,
    /// `length(text)`: characters.
    Length,
    /// `abs(number)`.
    Abs,
    Lower,
    Upper,
    /// `round(x)`: half away from zero for numeric, half to even for
    /// double precision (C's `rint`, as PostgreSQL); `round(numeric, n)`.
    Round,
    /// `trunc(x)`, `trunc(numeric, n)`: towards zero.
    Trunc,
    /// `ceil(x)` (also `ceiling`).
    Ceil,
    /// `floor(x)`.
    Floor,
    /// `array_to_string(array, delimiter)`: the elements joined, NULL
    /// ones left out. Arrays are kept as their text (`{a,"b c"}`), which
    /// is what the `pg_catalog` relations hold (`exec::pg_catalog`).
    ArrayToString,
    /// `format_type(type_oid, typmod)` (`types::pg::format_type`).
    FormatType,
    /// `pg_encoding_to_char(encoding)`: 6 is `UTF8`, the one encoding.
    PgEncodingToChar,
    /// `pg_get_expr(expression, relation[, pretty])`: an expression kept
    /// in the catalog (a default, a partial index's predicate), which we
    /// keep as its SQL text; no relation of `pg_catalog` holds one yet.
    PgGetExpr,
    /// `array_upper(array, dimension)`: the last index of a
    /// one-dimensional array (its length), NULL if empty or another
    /// dimension.
    ArrayUpper,
    /// `pg_size_pretty(bytes)`: `8192 bytes`, `16 kB`, `3 MB` … `PB`, as
    /// PostgreSQL 15 rounds them.
    PgSizePretty,
    /// `array[i]`: the element at `i` (from 1), NULL beyond the ends.
    /// Its text takes the type the context wants, as a literal's does.
    ArrayElement,
}

impl Function {
    /// Every scalar function.
    pub const ALL: [Function; 17] = [
        Function::Random,
        Function::Md5,
        Function::Repeat,
        Function::Length,
        Function::Abs,
        Function::Lower,
        Function::Upper,
        Function::Round,
        Function::Trunc,
        Function::Ceil,
        Function::Floor,
        Function::ArrayToString,
        Function::FormatType,
        Function::PgEncodingToChar,
        Function::PgGetExpr,
        Function::ArrayUpper,
        Function::PgSizePretty,
    ];

    /// The function called `name` (lower case), if there is one.
    pub fn by_name(name: &str) -> Option<Function> {
        if name == "ceiling" {
            return Some(Function::Ceil);
        }
        Function::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The name SQL calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Function::Random => "random",
            Function::Md5 => "md5",
            Function::Repeat => "repeat",
            Function::Length => "length",
            Function::Abs => "abs",
            Function::Lower => "lower",
            Function::Upper => "upper",
            Function::Round => "round",
            Function::Trunc => "trunc",
            Function::Ceil => "ceil",
            Function::Floor => "floor",
            Function::ArrayToString => "array_to_string",
            Function::FormatType => "format_type",
            Function::PgEncodingToChar => "pg_encoding_to_char",
            Function::PgGetExpr => "pg_get_expr",
            Function::ArrayUpper => "array_upper",
            Function::PgSizePretty => "pg_size_pretty",
            Function::ArrayElement => "array subscript",
        }
    }

    /// The argument types it takes, for error messages.
    fn signature(self) -> &'static str {
        match self {
            Function::Random => "random()",
            Function::Md5 => "md5(text)",
            Function::Repeat => "repeat(text, integer)",
            Function::Length => "length(text)",
            Function::Abs => "abs(integer | bigint | numeric | double precision)",
            Function::Lower => "lower(text)",
            Function::Upper => "upper(text)",
            Function::Round => "round(numeric | double precision), round(numeric, integer)",
            Function::Trunc => "trunc(numeric | double precision), trunc(numeric, integer)",
            Function::Ceil => "ceil(numeric | double precision)",
            Function::Floor => "floor(numeric | double precision)",
            Function::ArrayToString => "array_to_string(array, text)",
            Function::FormatType => "format_type(oid, integer)",
            Function::PgEncodingToChar => "pg_encoding_to_char(integer)",
            Function::PgGetExpr => "pg_get_expr(text, oid[, boolean])",
            Function::ArrayUpper => "array_upper(array, integer)",
            Function::PgSizePretty => "pg_size_pretty(bigint)",
            Function::ArrayElement => "array[integer]",
        }
    }

    /// The result type for arguments of `args`, or `None` if it does not
    /// take them. An argument of unknown type (NULL) fits anything.
    fn result_type(self, args: &[Option<ColumnType>]) -> Option<Option<ColumnType>> {
        let text = |t: &Option<ColumnType>| t.is_none_or(is_text);
        let integer = |t: &Option<ColumnType>| {
            matches!(t, None | Some(ColumnType::Integer | ColumnType::BigInt))
        };
        match (self, args) {
            (Function::Random, []) => Some(Some(ColumnType::Double)),
            (Function::Md5 | Function::Lower | Function::Upper, [a]) if text(a) => {
                Some(Some(ColumnType::Text))
            }
            (Function::Repeat, [a, n]) if text(a) && integer(n) => Some(Some(ColumnType::Text)),
            (Function::Length, [a]) if text(a) => Some(Some(ColumnType::Integer)),
            (Function::Abs, [a]) if a.is_none_or(is_numeric) => {
                Some(a.map(ColumnType::without_modifier))
            }
            // As PostgreSQL resolves them: an integer argument alone goes
            // to the double precision version, beside a scale to numeric's.
            (Function::Round | Function::Trunc | Function::Ceil | Function::Floor, [a])
                if a.is_none_or(is_numeric) =>
            {
                Some(Some(match a {
                    Some(ColumnType::Numeric(_)) => ColumnType::Numeric(None),
                    _ => ColumnType::Double,
                }))
            }
            (Function::ArrayToString, [a, d]) if text(a) && text(d) => Some(Some(ColumnType::Text)),
            (Function::FormatType, [t, m]) if integer(t) && integer(m) => {
                Some(Some(ColumnType::Text))
            }
            (Function::PgEncodingToChar, [e]) if integer(e) => Some(Some(ColumnType::Text)),
            (Function::PgGetExpr, [x, r]) if text(x) && integer(r) => Some(Some(ColumnType::Text)),
            (Function::PgGetExpr, [x, r, p])
                if text(x) && integer(r) && matches!(p, None | Some(ColumnType::Boolean)) =>
            {
                Some(Some(ColumnType::Text))
            }
            (Function::PgSizePretty, [b]) if integer(b) => Some(Some(ColumnType::Text)),
            (Function::ArrayUpper, [a, d]) if text(a) && integer(d) => {
                Some(Some(ColumnType::Integer))
            }
            (Function::ArrayElement, [a, i]) if text(a) && integer(i) => {
                Some(Some(ColumnType::Text))
            }
            (Function::Round | Function::Trunc, [a, n])
                if a.is_none_or(|t| is_numeric(t) && t != ColumnType::Double)
                    && matches!(n, None | Some(ColumnType::Integer)) =>
            {
                Some(Some(ColumnType::Numeric(None)))
            }
            _ => None,
        }
    }
}

/// Per-statement state of evaluation: the generator behind `random()`,
/// and the values of the statement's parameters (`$n`: a subquery's
/// references to the columns of the query around it, set by the
/// [`super::subplan::SubPlanCall`] that runs it before each run).
pub struct EvalContext {
    rng: u64,
    params: Vec<Value>,
}

impl Default for EvalContext {
    fn default() -> Self {
        Self::new()
    }
}

impl EvalContext {
    /// A context whose `random()` is seeded from the operating system's
    /// randomness (through the standard library's hash seeds).
    pub fn new() -> EvalContext {
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        EvalContext {
            rng: seed | 1,
            params: Vec::new(),
        }
    }

    /// Sets parameter `n` (numbered per statement, from 0).
    pub fn set_param(&mut self, n: usize, v: Value) {
        if self.params.len() <= n {
            self.params.resize(n + 1, Value::Null);
        }
        self.params[n] = v;
    }

    /// Parameter `n`: NULL until set.
    pub fn param(&self, n: usize) -> &Value {
        self.params.get(n).unwrap_or(&Value::Null)
    }

    /// Uniform in [0, 1), 53 random bits (xorshift64*).
    fn random(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }
}

/// Where an expression is evaluated: its [`EvalContext`], and whether a
/// subquery in it can run there. An [`EvalContext`] alone cannot run one
/// (it is what a scan evaluates its filter with, under a page's content
/// lock, where no other page may be read; the planner never puts a
/// subquery there); an [`super::ExecCx`] can.
pub trait EvalEnv {
    fn context(&mut self) -> &mut EvalContext;

    /// The value of subquery `call` for `row`.
    fn run_subplan(&mut self, call: &SubPlanCall, row: &[Value]) -> Result<Value, ExecError>;
}

impl EvalEnv for EvalContext {
    fn context(&mut self) -> &mut EvalContext {
        self
    }

    fn run_subplan(&mut self, _: &SubPlanCall, _: &[Value]) -> Result<Value, ExecError> {
        Err(ExecError::Internal(
            "a subquery evaluated where no plan can run (a scan's filter)",
        ))
    }
}

/// A typed expression over the columns of an input row. Cloning,
/// printing, dropping and evaluating it recurse once per level of the
/// tree; a statement runs on a stack sized for its expressions' depth
/// (`sql::parse::with_stack_for_depth`), so none of them needs to grow the
/// stack itself (a check per node per row cost a fifth of a filter's time).
#[derive(Debug, Clone)]
pub struct Expr {
    kind: Kind,
    ty: Option<ColumnType>,
}

#[derive(Debug, Clone)]
enum Kind {
    Const(Value),
    Column(usize),
    /// Operands are numeric; evaluated in the expression's type.
    Arith(BinaryOp, Box<Expr>, Box<Expr>),
    /// `date ± integer`, `integer + date`, `date - date`.
    DateArith(BinaryOp, Box<Expr>, Box<Expr>),
    Concat(Box<Expr>, Box<Expr>),
    Compare(BinaryOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Negate(Box<Expr>),
    IsNull(Box<Expr>, bool),
    InList(Box<Expr>, Vec<Expr>, bool),
    Like(Box<Expr>, Box<Expr>, bool),
    Cast(Box<Expr>, ColumnType),
    /// A conversion for storing into a column of the type, which refuses
    /// text too long for it where a cast would cut it.
    AssignCast(Box<Expr>, ColumnType),
    Call(Function, Vec<Expr>),
    /// Parameter `$n` of the statement: in a subquery, a column of the
    /// query around it.
    Param(usize),
    /// A subquery's value for the row.
    SubPlan(Box<SubPlanCall>),
    /// `CASE WHEN c THEN r … ELSE e END`: the first branch whose
    /// condition is true (a simple `CASE x WHEN v` is planned as `x = v`).
    Case(Vec<(Expr, Expr)>, Box<Expr>),
    /// `text ~ pattern` and its negation and case-blind forms; the
    /// pattern compiled once when it is a constant.
    Regex(Box<Expr>, Box<Expr>, RegexOp, Option<Arc<regex::Regex>>),
    /// A function of an oid answered from the catalog as it was when the
    /// statement was planned.
    /// Its second key (`pg_get_indexdef`'s column number) is 0 if absent.
    Lookup(Box<Expr>, Option<Box<Expr>>, Arc<OidLookup>),
    /// `x = ANY (array)`: each element (of the array's text) read as a
    /// value of x's type and compared, with IN's NULL rules.
    AnyArray(Box<Expr>, Box<Expr>),
    /// COALESCE, GREATEST or LEAST of the arguments, all of its type.
    Pick(Pick, Vec<Expr>),
    /// `NULLIF(a, b)`: NULL where `a` equals `b` (both compared in the
    /// type they share, the third field where it is not `a`'s), else `a`.
    NullIf(Box<Expr>, Box<Expr>, Option<ColumnType>),
}

/// Which value of several [`Expr::pick`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The first that is not NULL; the later ones are not evaluated.
    Coalesce,
    /// The largest, NULLs left out (NULL if all are).
    Greatest,
    /// The smallest, NULLs left out.
    Least,
}

impl Pick {
    pub fn by_name(name: &str) -> Option<Pick> {
        match name {
            "coalesce" => Some(Pick::Coalesce),
            "greatest" => Some(Pick::Greatest),
            "least" => Some(Pick::Least),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pick::Coalesce => "COALESCE",
            Pick::Greatest => "GREATEST",
            Pick::Least => "LEAST",
        }
    }
}

/// Which of PostgreSQL's regular-expression match operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexOp {
    /// `!~`, `!~*`
    pub negated: bool,
    /// `~*`, `!~*`
    pub case_insensitive: bool,
}

/// A catalog function of an oid (`pg_get_userbyid`, `pg_get_indexdef`,
/// a cast to `regclass`, …) as a table from the oids the catalog holds to
/// their values, built when the statement is planned (by
/// `exec::pg_catalog`): evaluation has no catalog to ask, and a
/// statement sees the catalog of one moment anyway.
#[derive(Debug)]
pub struct OidLookup {
    /// The function's name, for EXPLAIN and errors.
    pub function: &'static str,
    /// By oid and a second key: 0, or for `pg_get_indexdef` a column
    /// number.
    pub values: std::collections::HashMap<(i64, i64), Value>,
    /// The value for an oid the table lacks (PostgreSQL's NULL, or
    /// `unknown (OID=n)` for `pg_get_userbyid`).
    pub missing: fn(i64) -> Value,
}

/// A condition an index can search by (see [`Expr::as_index_cond`]); the
/// columns are those of the rows the condition was planned over.
#[derive(Debug, Clone, Copy)]
pub enum IndexCond<'e> {
    /// `column op value`, op one of = < <= > >=.
    Compare {
        column: usize,
        op: BinaryOp,
        value: &'e Expr,
    },
    /// `column IN (values…)`.
    In { column: usize, values: &'e [Expr] },
    /// `column IS NULL`.
    IsNull { column: usize },
}

impl IndexCond<'_> {
    /// The column the condition is on.
    pub fn column(&self) -> usize {
        match *self {
            IndexCond::Compare { column, .. }
            | IndexCond::In { column, .. }
            | IndexCond::IsNull { column } => column,
        }
    }
}

/// Whether `ty` is a date or timestamp.
fn is_datetime(ty: ColumnType) -> bool {
    category(ty) == Category::DateTime
}

/// The operands of a comparison with PostgreSQL's implicit casts between
/// character types applied: `char(n)` against text compares as text (the
/// char side cast, losing its padding), against `varchar` as `bpchar`
/// (the varchar side cast, so its trailing spaces do not count either).
fn unify_character_operands(l: Expr, r: Expr) -> Result<(Expr, Expr), ExecError> {
    use ColumnType as T;
    Ok(match (l.ty, r.ty) {
        (Some(T::Char(_)), Some(T::Text)) => (Expr::cast(l, T::Text)?, r),
        (Some(T::Text), Some(T::Char(_))) => (l, Expr::cast(r, T::Text)?),
        (Some(T::Char(_)), Some(T::Varchar(_))) => (l, Expr::cast(r, T::Char(None))?),
        (Some(T::Varchar(_)), Some(T::Char(_))) => (Expr::cast(l, T::Char(None))?, r),
        _ => (l, r),
    })
}

/// The operands of an equality that must also hash alike (a hashed
/// `IN (SELECT …)`): type-checked as `l = r` is, numbers of two types
/// both in the wider one, a date against a timestamp as timestamps, and
/// character types as [`unify_character_operands`] makes them.
pub fn comparison_operands(l: Expr, r: Expr) -> Result<(Expr, Expr), ExecError> {
    use ColumnType as T;
    let (Some(a), Some(b)) = (l.ty, r.ty) else {
        return Ok((l, r));
    };
    if category(a) != category(b) {
        return Err(ExecError::NoOperator {
            left: a.name(),
            op: "=",
            right: b.name(),
        });
    }
    if a != b && is_numeric(a) && is_numeric(b) {
        let ty = promote(a, b);
        return Ok((Expr::cast(l, ty)?, Expr::cast(r, ty)?));
    }
    match (a, b) {
        (T::Date, T::Timestamp) => Ok((Expr::cast(l, T::Timestamp)?, r)),
        (T::Timestamp, T::Date) => Ok((l, Expr::cast(r, T::Timestamp)?)),
        _ => unify_character_operands(l, r),
    }
}

/// The wider of two numeric types.
fn promote(a: ColumnType, b: ColumnType) -> ColumnType {
    if numeric_rank(a) >= numeric_rank(b) {
        a
    } else {
        b
    }
}

impl Expr {
    /// The expressions directly inside this one.
    fn children(&self) -> Vec<&Expr> {
        match &self.kind {
            Kind::Const(_) | Kind::Column(_) | Kind::Param(_) => Vec::new(),
            Kind::Arith(_, a, b)
            | Kind::DateArith(_, a, b)
            | Kind::Concat(a, b)
            | Kind::Compare(_, a, b)
            | Kind::And(a, b)
            | Kind::Or(a, b)
            | Kind::Like(a, b, _) => vec![&**a, &**b],
            Kind::Not(a)
            | Kind::Negate(a)
            | Kind::IsNull(a, _)
            | Kind::Cast(a, _)
            | Kind::AssignCast(a, _) => vec![&**a],
            Kind::InList(a, list, _) => std::iter::once(&**a).chain(list).collect(),
            Kind::Call(_, args) => args.iter().collect(),
            // What it evaluates over the row: its left operand and the
            // values it passes in (the subquery's own expressions are
            // over its rows).
            Kind::SubPlan(call) => call.outer_exprs().collect(),
            Kind::Case(branches, otherwise) => branches
                .iter()
                .flat_map(|(c, r)| [c, r])
                .chain(std::iter::once(&**otherwise))
                .collect(),
            Kind::Regex(a, b, _, _) => vec![&**a, &**b],
            Kind::Lookup(a, b, _) => std::iter::once(&**a).chain(b.as_deref()).collect(),
            Kind::AnyArray(a, b) => vec![&**a, &**b],
            Kind::Pick(_, args) => args.iter().collect(),
            Kind::NullIf(a, b, _) => vec![&**a, &**b],
        }
    }

    /// The columns the expression reads, ascending, each once.
    pub fn columns_read(&self) -> Vec<usize> {
        fn walk(e: &Expr, read: &mut Vec<usize>) {
            if let Kind::Column(c) = e.kind {
                read.push(c);
            }
            for child in e.children() {
                walk(child, read);
            }
        }
        let mut read = Vec::new();
        walk(self, &mut read);
        read.sort_unstable();
        read.dedup();
        read
    }

    /// The expressions directly inside this one, to change (the same
    /// shape as [`Expr::children`]).
    fn children_mut(&mut self) -> Vec<&mut Expr> {
        match &mut self.kind {
            Kind::Const(_) | Kind::Column(_) | Kind::Param(_) => Vec::new(),
            Kind::Arith(_, a, b)
            | Kind::DateArith(_, a, b)
            | Kind::Concat(a, b)
            | Kind::Compare(_, a, b)
            | Kind::And(a, b)
            | Kind::Or(a, b)
            | Kind::Like(a, b, _) => vec![&mut **a, &mut **b],
            Kind::Not(a)
            | Kind::Negate(a)
            | Kind::IsNull(a, _)
            | Kind::Cast(a, _)
            | Kind::AssignCast(a, _) => vec![&mut **a],
            Kind::InList(a, list, _) => std::iter::once(&mut **a).chain(list.iter_mut()).collect(),
            Kind::Call(_, args) => args.iter_mut().collect(),
            Kind::SubPlan(call) => call.outer_exprs_mut().collect(),
            Kind::Case(branches, otherwise) => branches
                .iter_mut()
                .flat_map(|(c, r)| [c, r])
                .chain(std::iter::once(&mut **otherwise))
                .collect(),
            Kind::Regex(a, b, _, _) => vec![&mut **a, &mut **b],
            Kind::Lookup(a, b, _) => std::iter::once(&mut **a).chain(b.as_deref_mut()).collect(),
            Kind::AnyArray(a, b) => vec![&mut **a, &mut **b],
            Kind::Pick(_, args) => args.iter_mut().collect(),
            Kind::NullIf(a, b, _) => vec![&mut **a, &mut **b],
        }
    }

    /// The same expression over rows that start at column `start` of the
    /// rows it was planned for (one side of a join, planned over the
    /// joined row). Every column it reads must be at `start` or after.
    pub fn rebased(mut self, start: usize) -> Expr {
        fn shift(e: &mut Expr, start: usize) {
            if let Kind::Column(c) = &mut e.kind {
                assert!(
                    *c >= start,
                    "column {c} is before the rows' first column {start}"
                );
                *c -= start;
            }
            for child in e.children_mut() {
                shift(child, start);
            }
        }
        shift(&mut self, start);
        self
    }

    /// The same expression over rows laid out otherwise: column `c` of
    /// the rows it was planned for is column `layout[c]` of the new rows
    /// (a join run in another order than its items are written, whose
    /// rows hold the items' columns in the order joined). Every column it
    /// reads must have a place in `layout`.
    pub fn remapped(mut self, layout: &[Option<usize>]) -> Expr {
        fn visit(e: &mut Expr, layout: &[Option<usize>]) {
            if let Kind::Column(c) = &mut e.kind {
                let moved = layout.get(*c).copied().flatten();
                *c = moved.unwrap_or_else(|| panic!("column {c} has no place in the new rows"));
            }
            for child in e.children_mut() {
                visit(child, layout);
            }
        }
        visit(&mut self, layout);
        self
    }

    /// The same expression over the inner rows of a nested loop, which
    /// are the columns `inner` of the joined rows it was planned for; the
    /// outer row's columns (all the others, the outer row's column `c -
    /// outer_start` for joined column `c`) read as parameters: each such
    /// column becomes `$n`, `n` from `params` if the column has one there,
    /// else from `next_param`, recorded in `params` as (`n`, the column
    /// over the outer row). The loop sets them from each outer row before
    /// running its inner side.
    pub fn parameterized(
        mut self,
        inner: std::ops::Range<usize>,
        outer_start: usize,
        params: &mut Vec<(usize, Expr)>,
        next_param: &mut dyn FnMut() -> usize,
    ) -> Expr {
        fn visit(
            e: &mut Expr,
            inner: &std::ops::Range<usize>,
            outer_start: usize,
            params: &mut Vec<(usize, Expr)>,
            next_param: &mut dyn FnMut() -> usize,
        ) {
            if let Kind::Column(c) = e.kind {
                if inner.contains(&c) {
                    e.kind = Kind::Column(c - inner.start);
                } else {
                    assert!(
                        c >= outer_start,
                        "column {c} is neither the inner rows' nor the outer row's"
                    );
                    let outer = c - outer_start;
                    let known = params
                        .iter()
                        .find(|(_, o)| o.column_index() == Some(outer))
                        .map(|(n, _)| *n);
                    let n = known.unwrap_or_else(|| {
                        let n = next_param();
                        params.push((n, Expr::column(outer, e.ty.unwrap_or(ColumnType::Text))));
                        n
                    });
                    debug_assert!(params.iter().any(|(m, _)| *m == n));
                    e.kind = Kind::Param(n);
                }
                return;
            }
            for child in e.children_mut() {
                visit(child, inner, outer_start, params, next_param);
            }
        }
        visit(&mut self, &inner, outer_start, params, next_param);
        self
    }

    /// The comparison operator, if the expression is a comparison.
    pub fn comparison_op(&self) -> Option<BinaryOp> {
        match &self.kind {
            Kind::Compare(op, ..) => Some(*op),
            _ => None,
        }
    }

    /// A constant.
    pub fn constant(v: Value) -> Expr {
        Expr {
            ty: v.column_type(),
            kind: Kind::Const(v),
        }
    }

    /// A NULL of type `ty` (`None`: unknown, as a bare NULL literal).
    pub fn null(ty: Option<ColumnType>) -> Expr {
        Expr {
            kind: Kind::Const(Value::Null),
            ty,
        }
    }

    /// Column `index` of the input row, of type `ty`.
    pub fn column(index: usize, ty: ColumnType) -> Expr {
        Expr {
            kind: Kind::Column(index),
            ty: Some(ty),
        }
    }

    /// Parameter `$n`, of type `ty` (`None`: unknown).
    pub fn param(n: usize, ty: Option<ColumnType>) -> Expr {
        Expr {
            kind: Kind::Param(n),
            ty,
        }
    }

    /// A subquery's value (`call` knows its type).
    pub fn subplan(call: SubPlanCall) -> Expr {
        Expr {
            ty: call.ty(),
            kind: Kind::SubPlan(Box::new(call)),
        }
    }

    /// Every subquery this expression runs, outermost first.
    pub fn subplans(&self) -> Vec<&SubPlanCall> {
        fn walk<'e>(e: &'e Expr, out: &mut Vec<&'e SubPlanCall>) {
            if let Kind::SubPlan(call) = &e.kind {
                out.push(call);
            }
            for child in e.children() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Whether it runs a subquery (and so cannot be a scan's filter).
    pub fn has_subplan(&self) -> bool {
        matches!(self.kind, Kind::SubPlan(_)) || self.children().into_iter().any(Expr::has_subplan)
    }

    /// The result type; `None` for an untyped NULL.
    pub fn ty(&self) -> Option<ColumnType> {
        self.ty
    }

    /// `l op r`, type-checked.
    pub fn binary(op: BinaryOp, l: Expr, r: Expr) -> Result<Expr, ExecError> {
        let no_operator = || ExecError::NoOperator {
            left: type_name(l.ty),
            op: op.symbol(),
            right: type_name(r.ty),
        };
        match op {
            BinaryOp::And | BinaryOp::Or => {
                for side in [&l, &r] {
                    require_boolean(side, op.symbol())?;
                }
                let (l, r) = (Box::new(l), Box::new(r));
                Ok(Expr {
                    kind: if op == BinaryOp::And {
                        Kind::And(l, r)
                    } else {
                        Kind::Or(l, r)
                    },
                    ty: Some(ColumnType::Boolean),
                })
            }
            BinaryOp::Concat => {
                // text || anything (as PostgreSQL's anynonarray), not
                // number || number.
                let texty = |t: Option<ColumnType>| t.is_none_or(is_text);
                if !texty(l.ty) && !texty(r.ty) {
                    return Err(no_operator());
                }
                Ok(Expr {
                    kind: Kind::Concat(Box::new(l), Box::new(r)),
                    ty: Some(ColumnType::Text),
                })
            }
            _ if op.is_comparison() => {
                if let (Some(a), Some(b)) = (l.ty, r.ty) {
                    if category(a) != category(b) {
                        return Err(no_operator());
                    }
                }
                let (l, r) = unify_character_operands(l, r)?;
                Ok(Expr {
                    kind: Kind::Compare(op, Box::new(l), Box::new(r)),
                    ty: Some(ColumnType::Boolean),
                })
            }
            _ if l.ty.is_some_and(is_datetime) || r.ty.is_some_and(is_datetime) => {
                use ColumnType as T;
                let ty = match (op, l.ty, r.ty) {
                    (BinaryOp::Add | BinaryOp::Sub, Some(T::Date), None | Some(T::Integer))
                    | (BinaryOp::Add, None | Some(T::Integer), Some(T::Date)) => T::Date,
                    (BinaryOp::Sub, Some(T::Date), Some(T::Date)) => T::Integer,
                    (BinaryOp::Sub, Some(a), Some(b)) if is_datetime(a) && is_datetime(b) => {
                        return Err(ExecError::NoInterval {
                            left: a.name(),
                            right: b.name(),
                        })
                    }
                    _ => return Err(no_operator()),
                };
                Ok(Expr {
                    kind: Kind::DateArith(op, Box::new(l), Box::new(r)),
                    ty: Some(ty),
                })
            }
            _ => {
                let numeric = |t: Option<ColumnType>| t.is_none_or(is_numeric);
                if !numeric(l.ty) || !numeric(r.ty) {
                    return Err(no_operator());
                }
                let ty = match (l.ty, r.ty) {
                    (Some(a), Some(b)) => Some(promote(a, b)),
                    (a, b) => a.or(b),
                }
                .map(ColumnType::without_modifier);
                // PostgreSQL has no % for double precision.
                if op == BinaryOp::Mod && ty == Some(ColumnType::Double) {
                    return Err(no_operator());
                }
                // Numeric arithmetic takes numerics, and a numeric meeting
                // a double becomes one (an error if beyond its range): the
                // casts PostgreSQL applies implicitly.
                let operand = |e: Expr| match (ty, e.ty) {
                    (Some(to @ ColumnType::Numeric(_)), Some(from)) if from != to => {
                        Expr::cast(e, to)
                    }
                    (Some(ColumnType::Double), Some(ColumnType::Numeric(_))) => {
                        Expr::cast(e, ColumnType::Double)
                    }
                    _ => Ok(e),
                };
                let (l, r) = (operand(l)?, operand(r)?);
                Ok(Expr {
                    kind: Kind::Arith(op, Box::new(l), Box::new(r)),
                    ty,
                })
            }
        }
    }

    /// `NOT e`.
    pub fn negation(e: Expr) -> Result<Expr, ExecError> {
        require_boolean(&e, "NOT")?;
        Ok(Expr {
            kind: Kind::Not(Box::new(e)),
            ty: Some(ColumnType::Boolean),
        })
    }

    /// `-e`.
    pub fn negate(e: Expr) -> Result<Expr, ExecError> {
        if e.ty.is_some_and(|t| !is_numeric(t)) {
            return Err(ExecError::NoPrefixOperator {
                op: "-",
                ty: type_name(e.ty),
            });
        }
        Ok(Expr {
            ty: e.ty.map(ColumnType::without_modifier),
            kind: Kind::Negate(Box::new(e)),
        })
    }

    /// `e IS [NOT] NULL`.
    pub fn is_null(e: Expr, negated: bool) -> Expr {
        Expr {
            kind: Kind::IsNull(Box::new(e), negated),
            ty: Some(ColumnType::Boolean),
        }
    }

    /// `e [NOT] IN (list…)`.
    pub fn in_list(e: Expr, list: Vec<Expr>, negated: bool) -> Result<Expr, ExecError> {
        for item in &list {
            if let (Some(a), Some(b)) = (e.ty, item.ty) {
                if category(a) != category(b) {
                    return Err(ExecError::NoOperator {
                        left: a.name(),
                        op: "=",
                        right: b.name(),
                    });
                }
            }
        }
        // Items compare with `e` as `e = item` would: a char(n) `e`
        // against text items is cast once, here, for all of them.
        let e = match e.ty {
            Some(ColumnType::Char(_))
                if list
                    .iter()
                    .any(|i| i.ty.is_some_and(|t| t == ColumnType::Text)) =>
            {
                Expr::cast(e, ColumnType::Text)?
            }
            _ => e,
        };
        let list = list
            .into_iter()
            .map(|item| match (e.ty, item.ty) {
                (Some(ColumnType::Char(_)), Some(ColumnType::Varchar(_))) => {
                    Expr::cast(item, ColumnType::Char(None))
                }
                (Some(ColumnType::Text), Some(ColumnType::Char(_))) => {
                    Expr::cast(item, ColumnType::Text)
                }
                _ => Ok(item),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr {
            kind: Kind::InList(Box::new(e), list, negated),
            ty: Some(ColumnType::Boolean),
        })
    }

    /// `e [NOT] BETWEEN low AND high`, as `e >= low AND e <= high`.
    pub fn between(e: Expr, low: Expr, high: Expr, negated: bool) -> Result<Expr, ExecError> {
        let range = Expr::binary(
            BinaryOp::And,
            Expr::binary(BinaryOp::Ge, e.clone(), low)?,
            Expr::binary(BinaryOp::Le, e, high)?,
        )?;
        if negated {
            Expr::negation(range)
        } else {
            Ok(range)
        }
    }

    /// `e [NOT] LIKE pattern` (`%` any run, `_` one character, `\`
    /// escapes).
    pub fn like(e: Expr, pattern: Expr, negated: bool) -> Result<Expr, ExecError> {
        for side in [&e, &pattern] {
            if !side.ty.is_none_or(is_text) {
                return Err(ExecError::NoOperator {
                    left: type_name(e.ty),
                    op: "LIKE",
                    right: type_name(pattern.ty),
                });
            }
        }
        Ok(Expr {
            kind: Kind::Like(Box::new(e), Box::new(pattern), negated),
            ty: Some(ColumnType::Boolean),
        })
    }

    /// `e ~ pattern` (and `!~`, `~*`, `!~*`), both text.
    pub fn regex(e: Expr, pattern: Expr, op: RegexOp) -> Result<Expr, ExecError> {
        let symbol = match (op.negated, op.case_insensitive) {
            (false, false) => "~",
            (true, false) => "!~",
            (false, true) => "~*",
            (true, true) => "!~*",
        };
        for side in [&e, &pattern] {
            if !side.ty.is_none_or(is_text) {
                return Err(ExecError::NoOperator {
                    left: type_name(e.ty),
                    op: symbol,
                    right: type_name(pattern.ty),
                });
            }
        }
        // char(n) matches without its padding, as PostgreSQL casts
        // bpchar to text for `~`.
        let unpadded = |x: Expr| match x.ty {
            Some(ColumnType::Char(_)) => Expr::cast(x, ColumnType::Text),
            _ => Ok(x),
        };
        let (e, pattern) = (unpadded(e)?, unpadded(pattern)?);
        let compiled = match pattern.as_const() {
            Some(Value::Text(p) | Value::Char(p)) => Some(Arc::new(compile_regex(p, op)?)),
            _ => None,
        };
        Ok(Expr {
            kind: Kind::Regex(Box::new(e), Box::new(pattern), op, compiled),
            ty: Some(ColumnType::Boolean),
        })
    }

    /// `CASE WHEN c THEN r … ELSE otherwise END`. The results must share
    /// a type: a branch of unknown type (NULL) takes the others', numbers
    /// are promoted as arithmetic promotes them, and the character types
    /// meet in text (PostgreSQL's rules for a CASE, in short).
    pub fn case(branches: Vec<(Expr, Expr)>, otherwise: Expr) -> Result<Expr, ExecError> {
        for (c, _) in &branches {
            require_boolean(c, "CASE/WHEN")?;
        }
        let results = branches.iter().map(|(_, r)| r).chain([&otherwise]);
        let ty = common_type("CASE", results)?;
        let fit = |r: Expr| fit_to(r, ty);
        let branches = branches
            .into_iter()
            .map(|(c, r)| Ok((c, fit(r)?)))
            .collect::<Result<Vec<_>, ExecError>>()?;
        Ok(Expr {
            kind: Kind::Case(branches, Box::new(fit(otherwise)?)),
            ty,
        })
    }

    /// `e = ANY (array)`, the array in its text form.
    pub fn any_array(e: Expr, array: Expr) -> Result<Expr, ExecError> {
        if !array.ty.is_none_or(is_text) {
            return Err(ExecError::NoOperator {
                left: type_name(e.ty),
                op: "= ANY",
                right: type_name(array.ty),
            });
        }
        Ok(Expr {
            kind: Kind::AnyArray(Box::new(e), Box::new(array)),
            ty: Some(ColumnType::Boolean),
        })
    }

    /// `function(e[, second])` answered by `lookup` (see [`OidLookup`]);
    /// `e` is an oid (integer here), `second` an integer.
    pub fn lookup(
        e: Expr,
        second: Option<Expr>,
        lookup: Arc<OidLookup>,
        ty: ColumnType,
    ) -> Result<Expr, ExecError> {
        let integer = |t: Option<ColumnType>| {
            matches!(t, None | Some(ColumnType::Integer | ColumnType::BigInt))
        };
        if !integer(e.ty) || !integer(second.as_ref().and_then(|s| s.ty)) {
            return Err(ExecError::NoFunction {
                call: format!(
                    "{}({})",
                    lookup.function,
                    std::iter::once(&e)
                        .chain(&second)
                        .map(|a| type_name(a.ty))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                signature: "an oid (integer)",
            });
        }
        Ok(Expr {
            kind: Kind::Lookup(Box::new(e), second.map(Box::new), lookup),
            ty: Some(ty),
        })
    }

    /// `e::to`. A constant is converted at once, so that a bad literal is
    /// reported before the statement runs.
    pub fn cast(e: Expr, to: ColumnType) -> Result<Expr, ExecError> {
        Expr::convert(e, to, true)
    }

    /// `e` converted for storing into a column of type `to` (the cast an
    /// assignment applies: like [`Expr::cast`], except that text too long
    /// for a `varchar(n)` or `char(n)` is an error instead of cut).
    pub fn assign_cast(e: Expr, to: ColumnType) -> Result<Expr, ExecError> {
        Expr::convert(e, to, false)
    }

    fn convert(e: Expr, to: ColumnType, explicit: bool) -> Result<Expr, ExecError> {
        if e.ty == Some(to) {
            return Ok(e);
        }
        if let Some(from) = e.ty {
            if !can_cast(from, to) {
                return Err(TypeError::NoCast {
                    from: from.name(),
                    to: to.name(),
                }
                .into());
            }
        }
        if let Kind::Const(v) = &e.kind {
            let v = if explicit {
                cast_value(v, to)?
            } else {
                assign_value(v, to)?
            };
            return Ok(Expr {
                kind: Kind::Const(v),
                ty: Some(to),
            });
        }
        let e = Box::new(e);
        Ok(Expr {
            kind: if explicit {
                Kind::Cast(e, to)
            } else {
                Kind::AssignCast(e, to)
            },
            ty: Some(to),
        })
    }

    /// A call of scalar function `f`.
    pub fn call(f: Function, args: Vec<Expr>) -> Result<Expr, ExecError> {
        // Functions of text take char(n) as text, without its padding
        // (PostgreSQL's implicit bpchar-to-text cast; its `length` of
        // bpchar also leaves the padding out).
        let args = args
            .into_iter()
            .map(|a| match a.ty {
                Some(ColumnType::Char(_)) => Expr::cast(a, ColumnType::Text),
                _ => Ok(a),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let types: Vec<Option<ColumnType>> = args.iter().map(|a| a.ty).collect();
        let result = f.result_type(&types);
        // The rounding functions evaluate in their result type: the
        // argument rounded is cast to it (an integer to double precision
        // or numeric, as the version chosen takes).
        let args = match (f, result) {
            (
                Function::Round | Function::Trunc | Function::Ceil | Function::Floor,
                Some(Some(to)),
            ) => {
                let mut args = args;
                let first = args.remove(0);
                args.insert(0, Expr::cast(first, to)?);
                args
            }
            _ => args,
        };
        let Some(ty) = result else {
            return Err(ExecError::NoFunction {
                call: format!(
                    "{}({})",
                    f.name(),
                    types
                        .iter()
                        .map(|t| type_name(*t))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                signature: f.signature(),
            });
        };
        Ok(Expr {
            kind: Kind::Call(f, args),
            ty,
        })
    }

    /// Whether evaluating it may give a different value each time (it
    /// calls `random()`), so it must not be computed once up front.
    pub fn is_volatile(&self) -> bool {
        matches!(self.kind, Kind::Call(Function::Random, _))
            || self.children().into_iter().any(Expr::is_volatile)
    }

    /// The parts of an AND, however nested.
    pub fn conjuncts(&self) -> Vec<&Expr> {
        match &self.kind {
            Kind::And(a, b) => {
                let mut parts = a.conjuncts();
                parts.extend(b.conjuncts());
                parts
            }
            _ => vec![self],
        }
    }

    /// The value, if the expression is a constant (what the planner can
    /// look up in the statistics).
    pub fn as_const(&self) -> Option<&Value> {
        match &self.kind {
            Kind::Const(v) => Some(v),
            _ => None,
        }
    }

    /// The parts of an OR, however nested (the expression itself if it
    /// is no OR).
    pub fn disjuncts(&self) -> Vec<&Expr> {
        match &self.kind {
            Kind::Or(a, b) => {
                let mut parts = a.disjuncts();
                parts.extend(b.disjuncts());
                parts
            }
            _ => vec![self],
        }
    }

    /// COALESCE, GREATEST or LEAST of `args` (at least one), each cast to
    /// the type they share as a CASE's results share one.
    pub fn pick(which: Pick, args: Vec<Expr>) -> Result<Expr, ExecError> {
        assert!(!args.is_empty(), "{} of nothing", which.name());
        let ty = common_type(which.name(), args.iter())?;
        let args = args
            .into_iter()
            .map(|a| fit_to(a, ty))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Expr {
            kind: Kind::Pick(which, args),
            ty,
        })
    }

    /// `NULLIF(a, b)`, of `a`'s type (PostgreSQL's), the two compared in
    /// the type they share.
    pub fn null_if(a: Expr, b: Expr) -> Result<Expr, ExecError> {
        let common = common_type("NULLIF", [&a, &b].into_iter())?;
        let b = fit_to(b, common)?;
        let ty = a.ty;
        let compare_as = common.filter(|&c| a.ty.is_some_and(|t| t != c));
        Ok(Expr {
            kind: Kind::NullIf(Box::new(a), Box::new(b), compare_as),
            ty,
        })
    }

    /// Whether the expression has one value for the whole of a scan: it
    /// reads no column, runs no subquery but an InitPlan (computed once)
    /// and calls nothing volatile (constants, parameters, and what is
    /// computed from them), so that an index scan can search for it.
    pub fn is_scan_constant(&self) -> bool {
        match &self.kind {
            Kind::Column(_) | Kind::Call(Function::Random, _) => false,
            Kind::SubPlan(call) => {
                call.plan
                    .try_lock()
                    .is_some_and(|p| p.mode == super::subplan::SubPlanMode::Once)
                    && call.outer_exprs().all(Expr::is_scan_constant)
            }
            _ => self.children().into_iter().all(Expr::is_scan_constant),
        }
    }

    /// The column, if the expression is just one column of its row.
    pub fn column_index(&self) -> Option<usize> {
        match self.kind {
            Kind::Column(c) => Some(c),
            _ => None,
        }
    }

    /// The column this expression is, with its type, if it is a bare
    /// column, or a `char(n)` column cast to text (which compares as the
    /// column itself does: both ignore the padding).
    fn as_column(&self) -> Option<(usize, ColumnType)> {
        match &self.kind {
            Kind::Column(c) => Some((*c, self.ty?)),
            Kind::Cast(inner, ColumnType::Text) => match (&inner.kind, inner.ty) {
                (Kind::Column(c), Some(ty @ ColumnType::Char(_))) => Some((*c, ty)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The condition as an index can search by it: a column compared with
    /// a scan constant (turned around if the constant came first), a
    /// column in a list of them, or a column IS NULL.
    pub fn as_index_cond(&self) -> Option<IndexCond<'_>> {
        match &self.kind {
            Kind::Compare(op, l, r) => {
                let flipped = match op {
                    BinaryOp::Eq => BinaryOp::Eq,
                    BinaryOp::Lt => BinaryOp::Gt,
                    BinaryOp::Le => BinaryOp::Ge,
                    BinaryOp::Gt => BinaryOp::Lt,
                    BinaryOp::Ge => BinaryOp::Le,
                    _ => return None,
                };
                if let (Some((column, _)), true) = (l.as_column(), r.is_scan_constant()) {
                    Some(IndexCond::Compare {
                        column,
                        op: *op,
                        value: r,
                    })
                } else if let (Some((column, _)), true) = (r.as_column(), l.is_scan_constant()) {
                    Some(IndexCond::Compare {
                        column,
                        op: flipped,
                        value: l,
                    })
                } else {
                    None
                }
            }
            Kind::InList(e, list, false) if list.iter().all(Expr::is_scan_constant) => {
                let (column, _) = e.as_column()?;
                Some(IndexCond::In {
                    column,
                    values: list,
                })
            }
            Kind::IsNull(e, false) => match e.kind {
                Kind::Column(column) => Some(IndexCond::IsNull { column }),
                _ => None,
            },
            _ => None,
        }
    }

    /// Evaluates against `row`.
    pub fn eval<E: EvalEnv + ?Sized>(
        &self,
        row: &[Value],
        ctx: &mut E,
    ) -> Result<Value, ExecError> {
        match &self.kind {
            Kind::Const(_) | Kind::Column(_) => Ok(self.eval_ref(row, ctx)?.into_owned()),
            Kind::Param(n) => Ok(ctx.context().param(*n).clone()),
            Kind::SubPlan(call) => ctx.run_subplan(call, row),
            Kind::Arith(op, l, r) => {
                let a = l.eval_ref(row, ctx)?;
                let b = r.eval_ref(row, ctx)?;
                match self.ty {
                    Some(ty) if !a.is_null() && !b.is_null() => arith(*op, &a, &b, ty),
                    _ => Ok(Value::Null),
                }
            }
            Kind::DateArith(op, l, r) => {
                let a = l.eval_ref(row, ctx)?;
                let b = r.eval_ref(row, ctx)?;
                date_arith(*op, &a, &b)
            }
            Kind::Concat(l, r) => {
                let a = l.eval_ref(row, ctx)?;
                let b = r.eval_ref(row, ctx)?;
                if a.is_null() || b.is_null() {
                    return Ok(Value::Null);
                }
                let mut s = value_to_text(&a);
                let b = value_to_text(&b);
                check_text_len(s.len() + b.len())?;
                s.push_str(&b);
                Ok(Value::Text(s))
            }
            Kind::Compare(op, l, r) => {
                let a = l.eval_ref(row, ctx)?;
                let b = r.eval_ref(row, ctx)?;
                Ok(match compare(&a, &b) {
                    None => Value::Null,
                    Some(ord) => Value::Boolean(match op {
                        BinaryOp::Eq => ord == Ordering::Equal,
                        BinaryOp::Ne => ord != Ordering::Equal,
                        BinaryOp::Lt => ord == Ordering::Less,
                        BinaryOp::Le => ord != Ordering::Greater,
                        BinaryOp::Gt => ord == Ordering::Greater,
                        _ => ord != Ordering::Less,
                    }),
                })
            }
            Kind::And(l, r) => {
                let a = l.eval(row, ctx)?;
                if a == Value::Boolean(false) {
                    return Ok(a);
                }
                let b = r.eval(row, ctx)?;
                Ok(match (a, b) {
                    (_, Value::Boolean(false)) => Value::Boolean(false),
                    (Value::Boolean(true), Value::Boolean(true)) => Value::Boolean(true),
                    _ => Value::Null,
                })
            }
            Kind::Or(l, r) => {
                let a = l.eval(row, ctx)?;
                if a == Value::Boolean(true) {
                    return Ok(a);
                }
                let b = r.eval(row, ctx)?;
                Ok(match (a, b) {
                    (_, Value::Boolean(true)) => Value::Boolean(true),
                    (Value::Boolean(false), Value::Boolean(false)) => Value::Boolean(false),
                    _ => Value::Null,
                })
            }
            Kind::Not(e) => Ok(match *e.eval_ref(row, ctx)? {
                Value::Boolean(b) => Value::Boolean(!b),
                _ => Value::Null,
            }),
            Kind::Negate(e) => match *e.eval_ref(row, ctx)? {
                Value::Integer(x) => x
                    .checked_neg()
                    .map(Value::Integer)
                    .ok_or(TypeError::OutOfRange { ty: "integer" }.into()),
                Value::BigInt(x) => x
                    .checked_neg()
                    .map(Value::BigInt)
                    .ok_or(TypeError::OutOfRange { ty: "bigint" }.into()),
                Value::Double(x) => Ok(Value::Double(-x)),
                Value::Numeric(ref x) => Ok(Value::Numeric(x.neg())),
                _ => Ok(Value::Null),
            },
            Kind::IsNull(e, negated) => {
                Ok(Value::Boolean(e.eval_ref(row, ctx)?.is_null() != *negated))
            }
            Kind::InList(e, list, negated) => {
                let v = e.eval_ref(row, ctx)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    match compare(&v, &*item.eval_ref(row, ctx)?) {
                        Some(Ordering::Equal) => return Ok(Value::Boolean(!negated)),
                        Some(_) => {}
                        None => saw_null = true,
                    }
                }
                Ok(if saw_null {
                    Value::Null
                } else {
                    Value::Boolean(*negated)
                })
            }
            Kind::Like(e, pattern, negated) => {
                match (&*e.eval_ref(row, ctx)?, &*pattern.eval_ref(row, ctx)?) {
                    // char(n) matches with its padding, as PostgreSQL's
                    // bpcharlike does ('a'::char(3) LIKE 'a' is false).
                    (Value::Text(s) | Value::Char(s), Value::Text(p) | Value::Char(p)) => {
                        Ok(Value::Boolean(like_match(s, p)? != *negated))
                    }
                    _ => Ok(Value::Null),
                }
            }
            Kind::Cast(e, to) => Ok(cast_value(&*e.eval_ref(row, ctx)?, *to)?),
            Kind::AssignCast(e, to) => Ok(assign_value(&*e.eval_ref(row, ctx)?, *to)?),
            Kind::Call(f, args) => call(*f, args, row, ctx),
            Kind::Case(branches, otherwise) => {
                for (condition, result) in branches {
                    if *condition.eval_ref(row, ctx)? == Value::Boolean(true) {
                        return result.eval(row, ctx);
                    }
                }
                otherwise.eval(row, ctx)
            }
            Kind::Regex(e, pattern, op, compiled) => {
                let v = e.eval_ref(row, ctx)?;
                let (Value::Text(s) | Value::Char(s)) = &*v else {
                    return Ok(Value::Null);
                };
                let matched = match compiled {
                    Some(re) => re.is_match(s),
                    None => match &*pattern.eval_ref(row, ctx)? {
                        Value::Text(p) | Value::Char(p) => compile_regex(p, *op)?.is_match(s),
                        _ => return Ok(Value::Null),
                    },
                };
                Ok(Value::Boolean(matched != op.negated))
            }
            Kind::NullIf(a, b, compare_as) => {
                let v = a.eval(row, ctx)?;
                let w = b.eval(row, ctx)?;
                if v == Value::Null || w == Value::Null {
                    return Ok(v);
                }
                let left = match compare_as {
                    Some(t) => Cow::Owned(cast_value(&v, *t)?),
                    None => Cow::Borrowed(&v),
                };
                Ok(if compare(&left, &w) == Some(Ordering::Equal) {
                    Value::Null
                } else {
                    v
                })
            }
            Kind::Pick(Pick::Coalesce, args) => {
                for a in args {
                    let v = a.eval(row, ctx)?;
                    if v != Value::Null {
                        return Ok(v);
                    }
                }
                Ok(Value::Null)
            }
            Kind::Pick(which, args) => {
                let wanted = if *which == Pick::Greatest {
                    Ordering::Greater
                } else {
                    Ordering::Less
                };
                let mut best = Value::Null;
                for a in args {
                    let v = a.eval(row, ctx)?;
                    if v != Value::Null
                        && (best == Value::Null || compare(&v, &best) == Some(wanted))
                    {
                        best = v;
                    }
                }
                Ok(best)
            }
            Kind::AnyArray(e, array) => {
                let v = e.eval_ref(row, ctx)?;
                let (Value::Text(a) | Value::Char(a)) = &*array.eval_ref(row, ctx)? else {
                    return Ok(Value::Null);
                };
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let ty = e.ty.unwrap_or(ColumnType::Text);
                let mut saw_null = false;
                for element in array_elements(a)? {
                    let Some(element) = element else {
                        saw_null = true;
                        continue;
                    };
                    let element = cast_value(&Value::Text(element), ty)?;
                    if compare(&v, &element) == Some(Ordering::Equal) {
                        return Ok(Value::Boolean(true));
                    }
                }
                Ok(if saw_null {
                    Value::Null
                } else {
                    Value::Boolean(false)
                })
            }
            Kind::Lookup(e, second, lookup) => {
                let (Some(key), Some(second)) = (
                    as_i64(&*e.eval_ref(row, ctx)?),
                    match second {
                        Some(s) => as_i64(&*s.eval_ref(row, ctx)?),
                        None => Some(0),
                    },
                ) else {
                    return Ok(Value::Null);
                };
                Ok(lookup
                    .values
                    .get(&(key, second))
                    .cloned()
                    .unwrap_or_else(|| (lookup.missing)(key)))
            }
        }
    }

    /// Evaluates against `row`, borrowing a constant or a column of the
    /// row instead of copying it: the per-row path (a WHERE comparing a
    /// text column, `count(note)`) then allocates nothing.
    pub(crate) fn eval_ref<'a, E: EvalEnv + ?Sized>(
        &'a self,
        row: &'a [Value],
        ctx: &mut E,
    ) -> Result<Cow<'a, Value>, ExecError> {
        match &self.kind {
            Kind::Const(v) => Ok(Cow::Borrowed(v)),
            Kind::Column(i) => row.get(*i).map(Cow::Borrowed).ok_or(ExecError::Internal(
                "expression reads a column the row does not have",
            )),
            _ => self.eval(row, ctx).map(Cow::Owned),
        }
    }
}

/// The type `exprs` share, by PostgreSQL's rules for a CASE's results,
/// in short: those without a type (NULL) take the others', numeric types
/// are promoted as arithmetic promotes them, and the character types
/// meet in text. `construct` names the refusal.
fn common_type<'e>(
    construct: &'static str,
    exprs: impl Iterator<Item = &'e Expr>,
) -> Result<Option<ColumnType>, ExecError> {
    let mut ty: Option<ColumnType> = None;
    for e in exprs {
        let Some(t) = e.ty else { continue };
        ty = Some(match ty {
            None => t,
            Some(u) if u == t => u,
            Some(u) if is_numeric(u) && is_numeric(t) => promote(u, t),
            Some(u) if is_text(u) && is_text(t) => ColumnType::Text,
            Some(u) => {
                return Err(ExecError::CaseTypes {
                    construct,
                    first: u.name(),
                    other: t.name(),
                })
            }
        });
    }
    Ok(ty)
}

/// `e` cast to `ty` where it has another type.
fn fit_to(e: Expr, ty: Option<ColumnType>) -> Result<Expr, ExecError> {
    match ty {
        Some(t) if e.ty.is_some() && e.ty != Some(t) => Expr::cast(e, t),
        _ => Ok(e),
    }
}

fn require_boolean(e: &Expr, context: &'static str) -> Result<(), ExecError> {
    match e.ty {
        None | Some(ColumnType::Boolean) => Ok(()),
        Some(other) => Err(ExecError::NotBoolean {
            context,
            ty: other.name(),
        }),
    }
}

fn check_text_len(len: usize) -> Result<(), ExecError> {
    if len > MAX_TEXT_BYTES {
        return Err(ExecError::TextTooLong {
            bytes: len,
            limit: MAX_TEXT_BYTES,
        });
    }
    Ok(())
}

/// Most arguments a scalar function takes.
const MAX_FUNCTION_ARGS: usize = 3;

fn call<E: EvalEnv + ?Sized>(
    f: Function,
    args: &[Expr],
    row: &[Value],
    ctx: &mut E,
) -> Result<Value, ExecError> {
    let type_check =
        || ExecError::Internal("function called with arguments its type check refused");
    if f == Function::Random {
        return Ok(Value::Double(ctx.context().random()));
    }
    if args.len() > MAX_FUNCTION_ARGS {
        return Err(type_check());
    }
    let mut values: [Cow<Value>; MAX_FUNCTION_ARGS] =
        [const { Cow::Owned(Value::Null) }; MAX_FUNCTION_ARGS];
    for (slot, a) in values.iter_mut().zip(args) {
        *slot = a.eval_ref(row, ctx)?;
        // Every other function is strict: NULL in, NULL out.
        if slot.is_null() {
            return Ok(Value::Null);
        }
    }
    Ok(match (f, &*values[0], &*values[1]) {
        (Function::Md5, Value::Text(s), _) => {
            Value::Text(format!("{:x}", md5::compute(s.as_bytes())))
        }
        (Function::Lower, Value::Text(s), _) if s.is_ascii() => Value::Text(s.to_ascii_lowercase()),
        (Function::Upper, Value::Text(s), _) if s.is_ascii() => Value::Text(s.to_ascii_uppercase()),
        (Function::Lower, Value::Text(s), _) => Value::Text(map_case(s, lower_char)),
        (Function::Upper, Value::Text(s), _) => Value::Text(map_case(s, char::to_uppercase)),
        (Function::Length, Value::Text(s), _) => {
            Value::Integer(i32::try_from(s.chars().count()).unwrap_or(i32::MAX))
        }
        (Function::Repeat, Value::Text(s), n) => {
            let n = as_i64(n).unwrap_or(0).max(0) as u64;
            let len = (s.len() as u64).saturating_mul(n);
            check_text_len(usize::try_from(len).unwrap_or(usize::MAX))?;
            Value::Text(s.repeat(n as usize))
        }
        (Function::Abs, Value::Integer(x), _) => x
            .checked_abs()
            .map(Value::Integer)
            .ok_or(TypeError::OutOfRange { ty: "integer" })?,
        (Function::Abs, Value::BigInt(x), _) => x
            .checked_abs()
            .map(Value::BigInt)
            .ok_or(TypeError::OutOfRange { ty: "bigint" })?,
        (Function::Abs, Value::Double(x), _) => Value::Double(x.abs()),
        (Function::Abs, Value::Numeric(x), _) => Value::Numeric(x.abs()),
        (Function::Round, Value::Double(x), _) => Value::Double(x.round_ties_even()),
        (Function::Trunc, Value::Double(x), _) => Value::Double(x.trunc()),
        (Function::Ceil, Value::Double(x), _) => Value::Double(x.ceil()),
        (Function::Floor, Value::Double(x), _) => Value::Double(x.floor()),
        (Function::Round | Function::Trunc, Value::Numeric(x), n) => {
            // One argument, or a NULL scale (then the call is NULL, above).
            let scale = as_i64(n).unwrap_or(0);
            Value::Numeric(if f == Function::Round {
                x.round(scale)?
            } else {
                x.trunc(scale)?
            })
        }
        (Function::ArrayToString, Value::Text(a), Value::Text(d)) => Value::Text(
            array_elements(a)?
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(d),
        ),
        (Function::FormatType, t, m) => {
            let (Some(t), Some(m)) = (as_i64(t), as_i64(m)) else {
                return Err(type_check());
            };
            Value::Text(crate::types::pg::format_type(
                u32::try_from(t).unwrap_or(0),
                i32::try_from(m).ok(),
            ))
        }
        (Function::PgGetExpr, Value::Text(x), _) => Value::Text(x.clone()),
        (Function::PgSizePretty, b, _) => Value::Text(size_pretty(as_i64(b).unwrap_or(0))),
        (Function::ArrayUpper, Value::Text(a), d) => {
            let n = array_elements(a)?.len();
            if as_i64(d) == Some(1) && n > 0 {
                Value::Integer(i32::try_from(n).unwrap_or(i32::MAX))
            } else {
                Value::Null
            }
        }
        (Function::ArrayElement, Value::Text(a), i) => {
            let i = as_i64(i).unwrap_or(0);
            usize::try_from(i - 1)
                .ok()
                .and_then(|i| array_elements(a).ok()?.into_iter().nth(i))
                .flatten()
                .map_or(Value::Null, Value::Text)
        }
        (Function::PgEncodingToChar, e, _) => Value::Text(match as_i64(e) {
            Some(crate::types::pg::ENCODING_UTF8) => "UTF8".to_string(),
            _ => String::new(),
        }),
        (Function::Ceil, Value::Numeric(x), _) => Value::Numeric(x.ceil()?),
        (Function::Floor, Value::Numeric(x), _) => Value::Numeric(x.floor()?),
        _ => return Err(type_check()),
    })
}

/// PostgreSQL 15's `pg_size_pretty`: each unit is used below its limit,
/// the others rounded half away from zero from one more bit kept.
fn size_pretty(bytes: i64) -> String {
    // (name, limit, rounded, bits of the unit)
    const UNITS: [(&str, i64, bool, u32); 6] = [
        ("bytes", 10 * 1024, false, 0),
        ("kB", 20 * 1024 - 1, true, 10),
        ("MB", 20 * 1024 - 1, true, 20),
        ("GB", 20 * 1024 - 1, true, 30),
        ("TB", 20 * 1024 - 1, true, 40),
        ("PB", 20 * 1024 - 1, true, 50),
    ];
    let mut size = bytes;
    // One pass over the units, each taken once at most.
    let mut unit = 0;
    loop {
        let (name, limit, rounded, bits) = UNITS[unit];
        match UNITS.get(unit + 1) {
            Some(&(_, _, next_rounded, next_bits))
                if size.unsigned_abs() >= limit.unsigned_abs() =>
            {
                size /= 1i64 << (next_bits - bits - u32::from(next_rounded) + u32::from(rounded));
                unit += 1;
            }
            _ => {
                if rounded {
                    size = (size + if size < 0 { -1 } else { 1 }) / 2;
                }
                return format!("{size} {name}");
            }
        }
    }
}

/// Compiles `pattern` for `op`. **Departure:** the `regex` crate's syntax,
/// not PostgreSQL's (ARE): the same for the anchors, classes,
/// alternations and repetitions psql's patterns use, but without
/// back-references and look-around.
fn compile_regex(pattern: &str, op: RegexOp) -> Result<regex::Regex, ExecError> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(op.case_insensitive)
        .build()
        .map_err(|e| ExecError::Regex(e.to_string()))
}

/// `items` as an array's text (PostgreSQL's `array_out`): `{a,"b c",NULL}`,
/// quoting an element when it is empty, `NULL` spelt out, or holds a
/// delimiter, quote, backslash or space; None is NULL.
pub fn array_text(items: impl Iterator<Item = Option<String>>) -> String {
    let quoted: Vec<String> = items
        .map(|item| {
            let Some(item) = item else {
                return "NULL".to_string();
            };
            let plain = !item.is_empty()
                && !item.eq_ignore_ascii_case("null")
                && !item
                    .chars()
                    .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_whitespace());
            if plain {
                item
            } else {
                format!("\"{}\"", item.replace('\\', "\\\\").replace('"', "\\\""))
            }
        })
        .collect();
    format!("{{{}}}", quoted.join(","))
}

/// The elements of an array in its text form (`{a,"b c",NULL}`), NULL
/// ones as None: one dimension, as the `pg_catalog` relations' arrays
/// are.
pub fn array_elements(text: &str) -> Result<Vec<Option<String>>, ExecError> {
    let malformed = || {
        ExecError::Type(TypeError::InvalidInput {
            ty: "array",
            text: text.to_string(),
        })
    };
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(malformed)?;
    let mut elements = Vec::new();
    if inner.trim().is_empty() {
        return Ok(elements);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut element = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => element.push(chars.next().ok_or_else(malformed)?),
                    Some(c) => element.push(c),
                    None => return Err(malformed()),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                if c == '{' || c == '}' || c == '"' {
                    return Err(malformed());
                }
                element.push(c);
                chars.next();
            }
            element.truncate(element.trim_end().len());
        }
        let null = !quoted && element.eq_ignore_ascii_case("null");
        elements.push((!null).then_some(element));
        match chars.next() {
            None => return Ok(elements),
            Some(',') => {}
            Some(_) => return Err(malformed()),
        }
    }
}

/// `s` with each character mapped by `map` (`char::to_uppercase` or
/// `to_lowercase`) where that gives exactly one character, and kept where
/// it would expand (`ß` has no one-character upper case): PostgreSQL maps
/// case character by character, so `upper('straße')` is `STRAßE`, not
/// Rust's `STRASSE`, and the length in characters never changes.
fn map_case<M: Iterator<Item = char>>(s: &str, map: impl Fn(char) -> M) -> String {
    s.chars()
        .map(|c| {
            let mut mapped = map(c);
            match (mapped.next(), mapped.next()) {
                (Some(one), None) => one,
                _ => c,
            }
        })
        .collect()
}

/// `c` in lower case (for [`map_case`]): U+0130 (İ) is the one character
/// whose full lower case expands (to `i` and a combining dot) while its
/// simple one, which PostgreSQL's `towlower` gives, is `i`.
fn lower_char(c: char) -> std::char::ToLowercase {
    const CAPITAL_I_WITH_DOT: char = '\u{130}';
    if c == CAPITAL_I_WITH_DOT { 'i' } else { c }.to_lowercase()
}

/// `date ± integer` and `date - date` (NULL if either is NULL).
fn date_arith(op: BinaryOp, a: &Value, b: &Value) -> Result<Value, ExecError> {
    Ok(match (op, a, b) {
        (_, Value::Null, _) | (_, _, Value::Null) => Value::Null,
        (BinaryOp::Add, Value::Date(d), Value::Integer(n))
        | (BinaryOp::Add, Value::Integer(n), Value::Date(d)) => {
            Value::Date(date_add_days(*d, i64::from(*n))?)
        }
        (BinaryOp::Sub, Value::Date(d), Value::Integer(n)) => {
            Value::Date(date_add_days(*d, -i64::from(*n))?)
        }
        (BinaryOp::Sub, Value::Date(x), Value::Date(y)) => Value::Integer(date_difference(*x, *y)?),
        _ => {
            return Err(ExecError::Internal(
                "date operator on operands it does not take",
            ))
        }
    })
}

fn arith(op: BinaryOp, a: &Value, b: &Value, ty: ColumnType) -> Result<Value, ExecError> {
    match ty {
        ColumnType::Integer | ColumnType::BigInt => {
            let (Some(x), Some(y)) = (as_i64(a), as_i64(b)) else {
                return Err(ExecError::Internal("integer operator on a non-integer"));
            };
            let out_of_range = TypeError::OutOfRange { ty: ty.name() };
            let r = match op {
                BinaryOp::Add => x.checked_add(y),
                BinaryOp::Sub => x.checked_sub(y),
                BinaryOp::Mul => x.checked_mul(y),
                BinaryOp::Div | BinaryOp::Mod if y == 0 => return Err(ExecError::DivisionByZero),
                BinaryOp::Div => x.checked_div(y),
                // x % -1 is 0 even where the division overflows.
                BinaryOp::Mod => Some(if y == -1 { 0 } else { x % y }),
                _ => return Err(ExecError::Internal("not an arithmetic operator")),
            }
            .ok_or(out_of_range)?;
            if ty == ColumnType::Integer {
                i32::try_from(r)
                    .map(Value::Integer)
                    .map_err(|_| TypeError::OutOfRange { ty: "integer" }.into())
            } else {
                Ok(Value::BigInt(r))
            }
        }
        ColumnType::Double => {
            let (Some(x), Some(y)) = (as_f64(a), as_f64(b)) else {
                return Err(ExecError::Internal("double operator on a non-number"));
            };
            let r = match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div if y == 0.0 => return Err(ExecError::DivisionByZero),
                BinaryOp::Div => x / y,
                _ => return Err(ExecError::Internal("not a double operator")),
            };
            // Overflow from finite operands, as PostgreSQL refuses it.
            if r.is_infinite() && x.is_finite() && y.is_finite() {
                return Err(ExecError::Overflow);
            }
            // And underflow to zero, as float8mul and float8div do: a
            // product of non-zero numbers, or a quotient of a non-zero
            // number by a finite one.
            let underflow = match op {
                BinaryOp::Mul => x != 0.0 && y != 0.0,
                BinaryOp::Div => x != 0.0 && y.is_finite(),
                _ => false,
            };
            if r == 0.0 && underflow {
                return Err(ExecError::Underflow);
            }
            Ok(Value::Double(r))
        }
        ColumnType::Numeric(_) => {
            let (Value::Numeric(x), Value::Numeric(y)) = (a, b) else {
                return Err(ExecError::Internal("numeric operator on a non-numeric"));
            };
            Ok(Value::Numeric(match op {
                BinaryOp::Add => x.add(y)?,
                BinaryOp::Sub => x.sub(y)?,
                BinaryOp::Mul => x.mul(y)?,
                BinaryOp::Div => x.div(y)?,
                BinaryOp::Mod => x.rem(y)?,
                _ => return Err(ExecError::Internal("not a numeric operator")),
            }))
        }
        _ => Err(ExecError::Internal("arithmetic on a non-numeric type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(x: i32) -> Expr {
        Expr::constant(Value::Integer(x))
    }

    fn eval(e: &Expr) -> Result<Value, ExecError> {
        e.eval(&[], &mut EvalContext::new())
    }

    #[test]
    fn integer_arithmetic_is_checked_not_wrapped() {
        let e = Expr::binary(BinaryOp::Add, int(i32::MAX), int(1)).unwrap();
        assert!(matches!(
            eval(&e),
            Err(ExecError::Type(TypeError::OutOfRange { ty: "integer" }))
        ));
        let e = Expr::binary(BinaryOp::Div, int(i32::MIN), int(-1)).unwrap();
        assert!(matches!(
            eval(&e),
            Err(ExecError::Type(TypeError::OutOfRange { .. }))
        ));
        let e = Expr::binary(BinaryOp::Mod, int(i32::MIN), int(-1)).unwrap();
        assert_eq!(eval(&e).unwrap(), Value::Integer(0));
        let e = Expr::binary(BinaryOp::Div, int(7), int(0)).unwrap();
        assert!(matches!(eval(&e), Err(ExecError::DivisionByZero)));
        // integer + bigint is bigint.
        let e = Expr::binary(
            BinaryOp::Mul,
            int(i32::MAX),
            Expr::constant(Value::BigInt(2)),
        )
        .unwrap();
        assert_eq!(e.ty(), Some(ColumnType::BigInt));
        assert_eq!(eval(&e).unwrap(), Value::BigInt(2 * i64::from(i32::MAX)));
    }

    #[test]
    fn operators_refuse_mismatched_types_naming_them() {
        let err = Expr::binary(
            BinaryOp::Add,
            int(1),
            Expr::constant(Value::Text("a".into())),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string().split(';').next().unwrap(),
            "operator does not exist: integer + text"
        );
        let err =
            Expr::binary(BinaryOp::And, int(1), Expr::constant(Value::Boolean(true))).unwrap_err();
        assert!(
            err.to_string()
                .contains("argument of AND must be type boolean, not type integer"),
            "{err}"
        );
    }

    #[test]
    fn remapped_moves_every_column_read_and_nothing_else() {
        let col = |c: usize| Expr::column(c, ColumnType::Integer);
        // (c0 + c3 = c1) AND c3 IN (c0, $2, 7), planned over rows of
        // items (c0 c1 | c2 c3) now joined second item first.
        let sum = Expr::binary(BinaryOp::Add, col(0), col(3)).unwrap();
        let eq = Expr::binary(BinaryOp::Eq, sum, col(1)).unwrap();
        let list = Expr::in_list(
            col(3),
            vec![col(0), Expr::param(2, Some(ColumnType::Integer)), int(7)],
            false,
        )
        .unwrap();
        let e = Expr::binary(BinaryOp::And, eq, list).unwrap();
        assert_eq!(e.columns_read(), [0, 1, 3]);
        let layout = [Some(2), Some(3), Some(0), Some(1)];
        let moved = e.clone().remapped(&layout);
        assert_eq!(moved.columns_read(), [1, 2, 3]);
        // Evaluated over the moved row, it gives what the original gives
        // over the original row.
        let mut cx = EvalContext::new();
        cx.set_param(2, Value::Integer(9));
        for row in [[1, 8, 5, 7], [2, 9, 0, 7], [3, 3, 0, 0], [4, 5, 6, 9]] {
            let original: Vec<Value> = row.iter().map(|&v| Value::Integer(v)).collect();
            let mut permuted = vec![Value::Null; 4];
            for (c, &to) in layout.iter().enumerate() {
                permuted[to.unwrap()] = original[c].clone();
            }
            assert_eq!(
                moved.eval(&permuted, &mut cx).unwrap(),
                e.eval(&original, &mut cx).unwrap(),
                "{row:?}"
            );
        }
        let same = e.clone().remapped(&[Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(same.columns_read(), e.columns_read());
    }

    /// A column left without a place is a planner bug, never a silently
    /// wrong column.
    #[test]
    #[should_panic(expected = "column 2 has no place in the new rows")]
    fn remapped_refuses_a_column_without_a_place() {
        let col = |c: usize| Expr::column(c, ColumnType::Integer);
        let e = Expr::binary(BinaryOp::Lt, col(0), col(2)).unwrap();
        e.remapped(&[Some(1), Some(0), None]);
    }

    #[test]
    fn three_valued_logic() {
        let null = || Expr::null(None);
        let f = || Expr::constant(Value::Boolean(false));
        let t = || Expr::constant(Value::Boolean(true));
        let and = Expr::binary(BinaryOp::And, null(), f()).unwrap();
        assert_eq!(eval(&and).unwrap(), Value::Boolean(false));
        let or = Expr::binary(BinaryOp::Or, null(), t()).unwrap();
        assert_eq!(eval(&or).unwrap(), Value::Boolean(true));
        let or = Expr::binary(BinaryOp::Or, null(), f()).unwrap();
        assert_eq!(eval(&or).unwrap(), Value::Null);
        let cmp = Expr::binary(BinaryOp::Eq, int(1), null()).unwrap();
        assert_eq!(eval(&cmp).unwrap(), Value::Null);
        let list = Expr::in_list(int(3), vec![int(1), Expr::null(None)], false).unwrap();
        assert_eq!(eval(&list).unwrap(), Value::Null);
        let list = Expr::in_list(int(3), vec![int(1), int(3)], true).unwrap();
        assert_eq!(eval(&list).unwrap(), Value::Boolean(false));
    }

    #[test]
    fn size_pretty_rounds_as_postgresql_15() {
        // What PostgreSQL 15's pg_size_pretty prints for each.
        for (bytes, pretty) in [
            (0, "0 bytes"),
            (1, "1 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (10752, "11 kB"),
            (20479 * 1024, "20 MB"),
            (20480 * 1024, "20 MB"),
            (1 << 30, "1024 MB"),
            (-10240, "-10 kB"),
            (-20480 * 1024, "-20 MB"),
            (i64::MAX, "8192 PB"),
        ] {
            assert_eq!(size_pretty(bytes), pretty, "{bytes}");
        }
    }

    #[test]
    fn array_text_reads_back_with_quotes_nulls_and_escapes() {
        let items = vec![
            Some("a".to_string()),
            None,
            Some(String::new()),
            Some("b c".to_string()),
            Some("NULL".to_string()),
            Some("x\"y\\z,{}".to_string()),
        ];
        let text = array_text(items.clone().into_iter());
        assert_eq!(text, r#"{a,NULL,"","b c","NULL","x\"y\\z,{}"}"#);
        assert_eq!(array_elements(&text).unwrap(), items);
        assert_eq!(
            array_elements(" { } ").unwrap(),
            Vec::<Option<String>>::new()
        );
        assert_eq!(
            array_elements("{1, 2 ,3}").unwrap(),
            ["1", "2", "3"].map(|e| Some(e.to_string()))
        );
        for malformed in ["", "1,2", "{a", "{\"a}", "{{a}}", "{a\"b}"] {
            assert!(array_elements(malformed).is_err(), "{malformed}");
        }
    }

    #[test]
    fn functions_check_their_arguments() {
        let err = Expr::call(Function::Md5, vec![int(1)]).unwrap_err();
        assert!(err.to_string().contains("md5(integer)"), "{err}");
        let e = Expr::call(
            Function::Repeat,
            vec![Expr::constant(Value::Text("ab".into())), int(3)],
        )
        .unwrap();
        assert_eq!(eval(&e).unwrap(), Value::Text("ababab".into()));
        let e = Expr::call(
            Function::Repeat,
            vec![Expr::constant(Value::Text("ab".into())), int(i32::MAX)],
        )
        .unwrap();
        assert!(matches!(eval(&e), Err(ExecError::TextTooLong { .. })));
        let r = Expr::call(Function::Random, vec![]).unwrap();
        let mut ctx = EvalContext::new();
        for _ in 0..1000 {
            let Value::Double(x) = r.eval(&[], &mut ctx).unwrap() else {
                panic!()
            };
            assert!((0.0..1.0).contains(&x));
        }
    }
}

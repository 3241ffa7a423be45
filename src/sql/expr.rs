//! From `sqlparser` expressions to the executor's typed expressions:
//! names resolved against a scope, literals typed, functions and
//! aggregates looked up, unsupported constructs refused with their
//! position.
//!
//! Literal strings are PostgreSQL's `unknown` type: compared with (or
//! stored into) a column of another type, the literal is converted to that
//! type while planning, so `WHERE id = '7'` works and `WHERE id = 'x'` is
//! an error before the statement reads anything.
//!
//! In an aggregated query (GROUP BY, or an aggregate anywhere in the select
//! list, HAVING or ORDER BY) expressions are planned over the aggregate's
//! output row, `[group keys…, aggregate results…]`: an expression equal to
//! a GROUP BY expression becomes that key's column, an aggregate call
//! becomes its result's column (its argument is planned over the input
//! row), and any other column reference is an error.

use sqlparser::ast::{
    self, BinaryOperator, CastKind, DataType, DuplicateTreatment, FunctionArg, FunctionArgExpr,
    FunctionArguments, Ident, ObjectName, ObjectNamePart, Spanned, UnaryOperator,
};
use sqlparser::tokenizer::Span;

use std::cell::Cell;

use super::{Position, SqlError};
use crate::catalog::TableDef;
use crate::database::Database;
use crate::exec::agg::{AggFunc, Aggregate};
use crate::exec::expr::{Function, Pick, RegexOp};
use crate::exec::pg_catalog::CatalogFunction;
use crate::exec::{
    BinaryOp, ExecError, Expr, Filter, SubLink, SubPlan, SubPlanCall, SubPlanMode, Utility,
    UtilityCall,
};
use crate::types::{
    as_i64, can_assign, is_numeric, ColumnType, NumericTypmod, Value, MAX_CHAR_LENGTH,
};

/// The statement being planned: for error positions, and whose tables it
/// sees.
pub(crate) struct StmtCx {
    pub number: usize,
    pub start: Position,
    /// The id of the statement's transaction, if it has one: a table it
    /// created (pending until it commits) is seen by its own statements.
    pub viewer: Option<crate::txn::Xid>,
    /// What `now()`, `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP` and (its day)
    /// `CURRENT_DATE` give: the transaction's start, a timestamp.
    pub now: i64,
    /// Which join methods a join on an equality may use
    /// (`enable_hashjoin`, `enable_mergejoin`, `enable_nestloop`).
    pub joins: crate::config::JoinMethods,
    /// FROM items whose join order is searched (`join_collapse_limit`).
    pub join_collapse_limit: usize,
    /// Whether tables may be read through indexes, or sequentially.
    pub scans: crate::config::ScanMethods,
    /// The planner's cost parameters.
    pub costs: crate::config::Costs,
    /// Subqueries numbered so far (PostgreSQL's "SubPlan n", from 1).
    pub subplans: Cell<usize>,
    /// Parameters numbered so far (`$n`, from 0): a subquery's
    /// references to outer columns, and InitPlans' values.
    pub params: Cell<usize>,
    /// How deeply the subquery being planned is nested.
    pub subquery_depth: Cell<usize>,
    /// The statement's `$n` placeholders (a prepared statement's
    /// parameters): their types, and their values once bound.
    pub placeholders: Placeholders,
    /// Planning fixed a value that holds for this run of the statement
    /// only (a LIMIT's parameter, an index left out for the snapshot):
    /// its plan is not kept for another run.
    pub fixed_for_run: Cell<bool>,
    /// No snapshot the statement reads with has an older xmin
    /// ([`crate::database::Session::snapshot_xmin_bound`]): indexes it
    /// may not use are left out.
    pub snapshot_xmin: crate::txn::Xid,
}

/// Most parameters a statement may have (PostgreSQL's limit: the count is
/// an int16 in the protocol's Bind message).
pub const MAX_PARAMETERS: usize = 65535;

/// The `$n` placeholders of a statement being prepared or run.
///
/// Preparing plans the statement with no values: a placeholder whose type
/// was not given is of PostgreSQL's `unknown` type, like a string literal,
/// and takes the type its context wants (`id = $1` with an integer `id`),
/// which is recorded as the parameter's type. Running it plans it again,
/// either with the values bound, each of its parameter's type, so that
/// the statement is planned for the values it runs with (a custom plan),
/// or without them (a generic plan, [`Placeholders::generic`]): `$n` is
/// then the executor's parameter `n - 1`, read at each run, and the plan
/// may be kept for the next runs (see `prepared`).
#[derive(Debug, Default)]
pub struct Placeholders {
    /// Each parameter's type, where the client or an earlier planning
    /// fixed it.
    pub types: Vec<Option<ColumnType>>,
    /// The values, when running (then every type is known).
    pub values: Option<Vec<Value>>,
    /// Planned to describe it, with no values yet. Neither this nor
    /// values: a statement given no parameters, in which `$n` is an
    /// error.
    preparing: bool,
    /// Planned to run without the values, each `$n` an executor
    /// parameter (the first `types.len()` of them).
    generic: bool,
    /// Types inferred from context while preparing, and the highest `$n`
    /// seen.
    inferred: std::cell::RefCell<Vec<Option<ColumnType>>>,
}

impl Placeholders {
    /// For preparing, with the types the client gave (`None`: infer).
    pub fn preparing(types: Vec<Option<ColumnType>>) -> Placeholders {
        Placeholders {
            types,
            preparing: true,
            ..Default::default()
        }
    }

    /// For running with `values`, of `types`.
    pub fn bound(types: Vec<ColumnType>, values: Vec<Value>) -> Placeholders {
        assert_eq!(types.len(), values.len(), "a value for every parameter");
        Placeholders {
            types: types.into_iter().map(Some).collect(),
            values: Some(values),
            ..Default::default()
        }
    }

    /// For planning a generic plan of a statement whose parameters are
    /// of `types`: each `$n` is the executor's parameter `n - 1`.
    pub fn generic(types: Vec<ColumnType>) -> Placeholders {
        Placeholders {
            types: types.into_iter().map(Some).collect(),
            generic: true,
            ..Default::default()
        }
    }

    /// How many executor parameters the placeholders take: those of a
    /// generic plan, and its statement time after them
    /// ([`Placeholders::time_param`]); the planner numbers its own (a
    /// subquery's outer references) after these.
    pub fn params_taken(&self) -> usize {
        if self.generic {
            self.types.len() + 1
        } else {
            0
        }
    }

    /// The executor parameter that holds a generic plan's statement time
    /// (what `now()` gives, a timestamp, set at each run), after the
    /// placeholders; `None` when planning with the values, where the time
    /// is a constant (`StmtCx::now`).
    pub fn time_param(&self) -> Option<usize> {
        self.generic.then_some(self.types.len())
    }

    /// The parameters' types after preparing: given, else inferred, else
    /// text (as PostgreSQL resolves a parameter nothing constrains).
    pub fn resolved_types(&self) -> Vec<ColumnType> {
        let inferred = self.inferred.borrow();
        (0..self.types.len().max(inferred.len()))
            .map(|i| {
                self.types
                    .get(i)
                    .copied()
                    .flatten()
                    .or(inferred.get(i).copied().flatten())
                    .unwrap_or(ColumnType::Text)
            })
            .collect()
    }

    /// The 0-based index of placeholder `$n`.
    fn index(text: &str) -> Option<usize> {
        let n: usize = text.strip_prefix('$')?.parse().ok()?;
        (1..=MAX_PARAMETERS).contains(&n).then(|| n - 1)
    }

    /// Records that placeholder `e` (if it is one, of no given type) is
    /// used where `ty` is wanted.
    fn infer(&self, e: &ast::Expr, ty: Option<ColumnType>) {
        let (Some(i), Some(ty)) = (placeholder(e).and_then(Placeholders::index), ty) else {
            return;
        };
        if self.types.get(i).copied().flatten().is_some() {
            return;
        }
        let mut inferred = self.inferred.borrow_mut();
        if let Some(slot @ None) = inferred.get_mut(i) {
            *slot = Some(ty.without_modifier());
        }
    }
}

/// The text of placeholder `e` (`$1`), if it is one.
fn placeholder(e: &ast::Expr) -> Option<&str> {
    match unparenthesized(e) {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => Some(p),
            _ => None,
        },
        _ => None,
    }
}

/// Most levels of subqueries nested in one another's expressions or FROM
/// (each level's planning and execution recurse through several frames,
/// far more stack than a level of parentheses).
pub const MAX_SUBQUERY_DEPTH: usize = 64;

impl StmtCx {
    /// The number of the next subquery ("SubPlan n").
    pub fn next_subplan(&self) -> usize {
        self.subplans.set(self.subplans.get() + 1);
        self.subplans.get()
    }

    /// The number of the next parameter (`$n`).
    pub fn next_param(&self) -> usize {
        let n = self.params.get();
        self.params.set(n + 1);
        n
    }

    /// Runs `f` one subquery level deeper, refusing more than
    /// [`MAX_SUBQUERY_DEPTH`] levels.
    pub fn nested<R>(
        &self,
        span: Span,
        f: impl FnOnce() -> Result<R, SqlError>,
    ) -> Result<R, SqlError> {
        let depth = self.subquery_depth.get();
        if depth >= MAX_SUBQUERY_DEPTH {
            return Err(SqlError::TooDeep {
                statement: self.number,
                at: self.at(span),
                limit: MAX_SUBQUERY_DEPTH,
                what: "levels of subqueries",
            });
        }
        self.subquery_depth.set(depth + 1);
        let result = f();
        self.subquery_depth.set(depth);
        result
    }

    /// The table called `name` as this statement sees it.
    pub fn table(
        &self,
        db: &Database,
        name: &str,
    ) -> Result<std::sync::Arc<TableDef>, crate::catalog::CatalogError> {
        db.catalog().table_for(name, self.viewer)
    }

    /// Where `span` starts, or the statement's start if it has no span.
    pub fn at(&self, span: Span) -> Position {
        if span.start.line == 0 {
            self.start
        } else {
            Position {
                line: span.start.line,
                column: span.start.column,
            }
        }
    }

    /// "`construct` is not supported" at `span`.
    pub fn unsupported(&self, span: Span, construct: impl Into<String>) -> SqlError {
        self.unsupported_hint(span, construct, "")
    }

    /// The same with a hint ("; use …").
    pub fn unsupported_hint(
        &self,
        span: Span,
        construct: impl Into<String>,
        hint: &str,
    ) -> SqlError {
        SqlError::Unsupported {
            statement: self.number,
            at: self.at(span),
            construct: construct.into(),
            hint: hint.to_string(),
        }
    }
}

/// A name as PostgreSQL reads it: folded to lower case unless quoted.
pub(crate) fn ident(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// A one-part object name (no schema).
pub(crate) fn object_name(cx: &StmtCx, name: &ObjectName) -> Result<String, SqlError> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(i)] => Ok(ident(i)),
        _ => Err(cx.unsupported_hint(
            name.span(),
            format!("the qualified name {name}"),
            "; name tables without a schema",
        )),
    }
}

/// The length `n` of `varchar(n)` or `char(n)`, checked as PostgreSQL's
/// `anychar_typmodin` checks it (`ty` is the name its messages use).
fn char_length_modifier(
    length: &Option<ast::CharacterLength>,
    ty: &'static str,
) -> Result<Option<u32>, SqlError> {
    match length {
        None => Ok(None),
        Some(ast::CharacterLength::IntegerLength { length, unit: None }) => {
            char_length_value(*length, ty).map(Some)
        }
        Some(other) => Err(SqlError::UnknownType {
            name: format!("{ty}({other})"),
        }),
    }
}

fn char_length_value(length: u64, ty: &'static str) -> Result<u32, SqlError> {
    if length < 1 {
        return Err(SqlError::TypeLength {
            ty,
            problem: "must be at least 1".into(),
        });
    }
    u32::try_from(length)
        .ok()
        .filter(|&n| n <= MAX_CHAR_LENGTH)
        .ok_or_else(|| SqlError::TypeLength {
            ty,
            problem: format!("cannot exceed {MAX_CHAR_LENGTH}"),
        })
}

/// The precision and scale of `numeric(p, s)`, checked as PostgreSQL
/// checks them.
fn numeric_typmod(precision: u64, scale: i64) -> Result<NumericTypmod, SqlError> {
    let precision = i64::try_from(precision).unwrap_or(i64::MAX);
    Ok(NumericTypmod::new(precision, scale).map_err(ExecError::from)?)
}

/// The column type SQL's `dt` names.
pub(crate) fn column_type(dt: &DataType) -> Result<ColumnType, SqlError> {
    use DataType as D;
    let unknown = || SqlError::UnknownType {
        name: dt.to_string(),
    };
    Ok(match dt {
        D::Int(None) | D::Integer(None) | D::Int4(None) => ColumnType::Integer,
        D::BigInt(None) | D::Int8(None) => ColumnType::BigInt,
        D::DoublePrecision | D::Float8 | D::Double(ast::ExactNumberInfo::None) => {
            ColumnType::Double
        }
        D::Text | D::String(None) => ColumnType::Text,
        D::Varchar(n) | D::CharacterVarying(n) | D::CharVarying(n) => {
            ColumnType::Varchar(char_length_modifier(n, "varchar")?)
        }
        // `char` alone is char(1), as the SQL standard says.
        D::Char(n) | D::Character(n) => {
            ColumnType::Char(Some(char_length_modifier(n, "char")?.unwrap_or(1)))
        }
        D::Bool | D::Boolean => ColumnType::Boolean,
        // `numeric(p)` is numeric(p, 0), as in PostgreSQL.
        D::Numeric(info) | D::Decimal(info) | D::Dec(info) => ColumnType::Numeric(match info {
            ast::ExactNumberInfo::None => None,
            ast::ExactNumberInfo::Precision(p) => Some(numeric_typmod(*p, 0)?),
            ast::ExactNumberInfo::PrecisionAndScale(p, s) => Some(numeric_typmod(*p, *s)?),
        }),
        // **Departure:** an array is its text (`{1,2}`), as the
        // `pg_catalog` relations hold them; there is no array type.
        D::Array(ast::ArrayElemTypeDef::SquareBracket(element, None)) => {
            column_type(element)?;
            ColumnType::Text
        }
        D::Date => ColumnType::Date,
        D::Timestamp(None, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => {
            ColumnType::Timestamp
        }
        D::Custom(object, modifiers) => {
            let name = match catalog_name(object) {
                Some(name) => name,
                None => return Err(unknown()),
            };
            // `varchar(n)` and `bpchar(n)` when the parser did not take
            // them as its own types.
            let length = match modifiers.as_slice() {
                [] => None,
                [n] => match n.parse::<u64>() {
                    Ok(n) => Some(n),
                    Err(_) => return Err(unknown()),
                },
                _ => return Err(unknown()),
            };
            match (name.as_str(), length) {
                ("varchar", n) => {
                    ColumnType::Varchar(n.map(|n| char_length_value(n, "varchar")).transpose()?)
                }
                ("bpchar", n) => {
                    ColumnType::Char(n.map(|n| char_length_value(n, "char")).transpose()?)
                }
                (_, Some(_)) => return Err(unknown()),
                // PostgreSQL's catalog types, as the `pg_catalog`
                // relations hold them (exec::pg_catalog).
                ("int" | "int4" | "integer" | "int2" | "smallint" | "oid", None) => {
                    ColumnType::Integer
                }
                ("name", None) => ColumnType::Text,
                ("int8" | "bigint", None) => ColumnType::BigInt,
                ("float8", None) => ColumnType::Double,
                ("text", None) => ColumnType::Text,
                ("bool" | "boolean", None) => ColumnType::Boolean,
                ("date", None) => ColumnType::Date,
                ("timestamp", None) => ColumnType::Timestamp,
                ("numeric" | "decimal", None) => ColumnType::Numeric(None),
                _ => return Err(unknown()),
            }
        }
        _ => return Err(unknown()),
    })
}

/// The text of a string literal, if `v` is one.
pub(crate) fn string_literal(v: &ast::Value) -> Option<&str> {
    match v {
        ast::Value::SingleQuotedString(s)
        | ast::Value::EscapedStringLiteral(s)
        | ast::Value::UnicodeStringLiteral(s) => Some(s),
        ast::Value::DollarQuotedString(d) => Some(&d.value),
        _ => None,
    }
}

/// `e` without the parentheses around it: `('7')` is still the literal
/// `'7'`, of unknown type, as in PostgreSQL.
fn unparenthesized(mut e: &ast::Expr) -> &ast::Expr {
    while let ast::Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

/// Whether `e` is a string literal, or a placeholder, which is converted
/// as one: to the type its context wants.
fn is_string_literal(e: &ast::Expr) -> bool {
    matches!(unparenthesized(e), ast::Expr::Value(v) if string_literal(&v.value).is_some())
        || placeholder(e).is_some()
}

/// Whether `e` is an array's element (`a[i]`), whose text takes the type
/// its context wants, as a literal does (arrays are their text here).
fn is_array_element(e: &ast::Expr) -> bool {
    matches!(unparenthesized(e), ast::Expr::CompoundFieldAccess { .. })
}

/// Whether `e` is of PostgreSQL's `unknown` type: a string literal or
/// NULL (parenthesized or not), which takes the type its context wants.
pub(crate) fn is_unknown_literal(e: &ast::Expr) -> bool {
    is_string_literal(e)
        || matches!(unparenthesized(e), ast::Expr::Value(v) if v.value == ast::Value::Null)
}

/// The value of a numeric literal: integer if it fits, else bigint, else
/// double precision (PostgreSQL would say numeric).
fn number(text: &str) -> Result<Value, SqlError> {
    if let Ok(x) = text.parse::<i32>() {
        return Ok(Value::Integer(x));
    }
    if let Ok(x) = text.parse::<i64>() {
        return Ok(Value::BigInt(x));
    }
    // As PostgreSQL types it: a literal with a point or an exponent, or
    // too large for bigint, is numeric (exact: `0.1 + 0.2` is 0.3).
    crate::types::Numeric::parse(text)
        .map(Value::Numeric)
        .map_err(|e| ExecError::Type(e).into())
}

/// A literal `e` evaluated, if it is a constant one (for LIMIT, utility
/// arguments, table options).
pub(crate) fn constant(e: &ast::Expr) -> Option<Value> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(s, _) => number(s).ok(),
            ast::Value::Boolean(b) => Some(Value::Boolean(*b)),
            ast::Value::Null => Some(Value::Null),
            other => string_literal(other).map(|s| Value::Text(s.to_string())),
        },
        ast::Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match &**expr {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(s, _) => number(&format!("-{s}")).ok(),
                _ => None,
            },
            _ => None,
        },
        ast::Expr::Nested(inner) => constant(inner),
        _ => None,
    }
}

/// The name PostgreSQL gives a cast's column: the target type as its
/// grammar spells it internally (`integer` is `int4`, `double precision`
/// `float8`, `boolean` `bool`, `character varying` `varchar`, `char(n)`
/// `bpchar`).
fn cast_name(dt: &DataType) -> Option<&'static str> {
    // An array type is named as its element type (`x::text[]` is `text`).
    if let DataType::Array(ast::ArrayElemTypeDef::SquareBracket(element, _)) = dt {
        return cast_name(element);
    }
    Some(match column_type(dt).ok()? {
        ColumnType::Integer => "int4",
        ColumnType::BigInt => "int8",
        ColumnType::Double => "float8",
        ColumnType::Text => "text",
        ColumnType::Boolean => "bool",
        ColumnType::Date => "date",
        ColumnType::Timestamp => "timestamp",
        ColumnType::Varchar(_) => "varchar",
        ColumnType::Char(_) => "bpchar",
        ColumnType::Numeric(_) => "numeric",
    })
}

/// The name PostgreSQL gives a select-list item without an alias.
///
/// As PostgreSQL's `FigureColname`, a name comes with a strength: a
/// column or function name (2) beats a cast's type name (1), so
/// `id::text` is `id` while `1::int4::text` is `text`, the outer cast's
/// type replacing the inner one's.
pub(crate) fn output_name(e: &ast::Expr) -> String {
    /// A name that a column or function gives (beats a type name).
    const STRENGTH_NAME: u8 = 2;
    /// A name that a cast's type gives.
    const STRENGTH_TYPE: u8 = 1;
    fn name(e: &ast::Expr) -> Option<(String, u8)> {
        match e {
            ast::Expr::Identifier(i) => Some((ident(i), STRENGTH_NAME)),
            ast::Expr::CompoundIdentifier(parts) => parts.last().map(|i| (ident(i), STRENGTH_NAME)),
            ast::Expr::Function(f) => f.name.0.last().and_then(|p| match p {
                ObjectNamePart::Identifier(i) => Some((ident(i), STRENGTH_NAME)),
                _ => None,
            }),
            ast::Expr::Cast {
                expr, data_type, ..
            } => match name(expr) {
                Some(inner) if inner.1 == STRENGTH_NAME => Some(inner),
                inner => cast_name(data_type)
                    .map(|t| (t.to_string(), STRENGTH_TYPE))
                    .or(inner),
            },
            ast::Expr::TypedString(t) => {
                cast_name(&t.data_type).map(|n| (n.to_string(), STRENGTH_TYPE))
            }
            ast::Expr::Nested(inner) => name(inner),
            // The parser's own nodes for two functions.
            ast::Expr::Ceil { .. } => Some(("ceil".into(), STRENGTH_NAME)),
            ast::Expr::Floor { .. } => Some(("floor".into(), STRENGTH_NAME)),
            // `(SELECT max(y) …)` is named as its column; EXISTS `exists`.
            ast::Expr::Subquery(q) => query_column_name(q).map(|n| (n, STRENGTH_NAME)),
            ast::Expr::Exists { .. } => Some(("exists".into(), STRENGTH_NAME)),
            // As PostgreSQL's FigureColname: `case`, the collated
            // expression's name, the array's name for `a[i]`.
            ast::Expr::Case { .. } => Some(("case".into(), STRENGTH_NAME)),
            ast::Expr::Collate { expr, .. } => name(expr),
            ast::Expr::CompoundFieldAccess { root, .. } => name(root),
            _ => None,
        }
    }
    /// The name of a query's first column, as its first SELECT names it.
    fn query_column_name(q: &ast::Query) -> Option<String> {
        let mut body = &*q.body;
        // Bounded by the query's nesting, which the parser bounds.
        loop {
            match body {
                ast::SetExpr::Select(select) => {
                    return match select.projection.first()? {
                        ast::SelectItem::UnnamedExpr(e) => name(e).map(|(n, _)| n),
                        ast::SelectItem::ExprWithAlias { alias, .. } => Some(ident(alias)),
                        _ => None,
                    }
                }
                ast::SetExpr::Query(inner) => body = &inner.body,
                ast::SetExpr::SetOperation { left, .. } => body = left,
                _ => return None,
            }
        }
    }
    name(e).map_or_else(|| "?column?".to_string(), |(n, _)| n)
}

/// Whether `e` calls an aggregate (outside any nested aggregate).
pub(crate) fn has_aggregate(e: &ast::Expr) -> bool {
    use ast::Expr as A;
    match e {
        A::Function(f) => {
            let is_agg = function_name(f).is_some_and(|n| AggFunc::by_name(&n).is_some());
            is_agg
                || match &f.args {
                    FunctionArguments::List(list) => list.args.iter().any(|a| match a {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => has_aggregate(x),
                        _ => false,
                    }),
                    _ => false,
                }
        }
        A::BinaryOp { left, right, .. } => has_aggregate(left) || has_aggregate(right),
        A::UnaryOp { expr, .. }
        | A::Nested(expr)
        | A::Cast { expr, .. }
        | A::Ceil { expr, .. }
        | A::Floor { expr, .. }
        | A::IsNull(expr)
        | A::IsNotNull(expr) => has_aggregate(expr),
        A::InList { expr, list, .. } => has_aggregate(expr) || list.iter().any(has_aggregate),
        A::Between {
            expr, low, high, ..
        } => has_aggregate(expr) || has_aggregate(low) || has_aggregate(high),
        A::Like { expr, pattern, .. } => has_aggregate(expr) || has_aggregate(pattern),
        A::Collate { expr, .. } => has_aggregate(expr),
        A::AnyOp { left, right, .. } => has_aggregate(left) || has_aggregate(right),
        A::CompoundFieldAccess { root, access_chain } => {
            has_aggregate(root)
                || access_chain.iter().any(|a| match a {
                    ast::AccessExpr::Subscript(ast::Subscript::Index { index }) => {
                        has_aggregate(index)
                    }
                    _ => false,
                })
        }
        A::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            operand.as_deref().is_some_and(has_aggregate)
                || conditions
                    .iter()
                    .any(|w| has_aggregate(&w.condition) || has_aggregate(&w.result))
                || else_result.as_deref().is_some_and(has_aggregate)
        }
        _ => false,
    }
}

pub(crate) fn function_name(f: &ast::Function) -> Option<String> {
    catalog_name(&f.name)
}

/// The name `name` gives, unqualified or in schema `pg_catalog` (where
/// PostgreSQL's built-in functions, types and system relations are, and
/// which psql names them by).
pub(crate) fn catalog_name(name: &ObjectName) -> Option<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(i)] => Some(ident(i)),
        [ObjectNamePart::Identifier(schema), ObjectNamePart::Identifier(i)]
            if ident(schema) == "pg_catalog" =>
        {
            Some(ident(i))
        }
        _ => None,
    }
}

/// The regular-expression operator `op` is, if it is one: `~`, `!~`,
/// `~*`, `!~*`, or `OPERATOR(pg_catalog.~)` (psql's spelling).
fn regex_op(op: &BinaryOperator) -> Option<RegexOp> {
    let (negated, case_insensitive) = match op {
        BinaryOperator::PGRegexMatch => (false, false),
        BinaryOperator::PGRegexNotMatch => (true, false),
        BinaryOperator::PGRegexIMatch => (false, true),
        BinaryOperator::PGRegexNotIMatch => (true, true),
        BinaryOperator::PGCustomBinaryOperator(parts) => {
            let symbol = match parts.as_slice() {
                [schema, symbol] if schema.eq_ignore_ascii_case("pg_catalog") => symbol,
                [symbol] => symbol,
                _ => return None,
            };
            match symbol.as_str() {
                "~" => (false, false),
                "!~" => (true, false),
                "~*" => (false, true),
                "!~*" => (true, true),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(RegexOp {
        negated,
        case_insensitive,
    })
}

/// A short name for an expression we do not support.
fn describe(e: &ast::Expr) -> String {
    use ast::Expr as A;
    match e {
        A::Case { .. } => "CASE".into(),
        A::IsTrue(_) | A::IsNotTrue(_) | A::IsFalse(_) | A::IsNotFalse(_) => {
            "IS [NOT] TRUE / FALSE".into()
        }
        A::IsDistinctFrom(..) | A::IsNotDistinctFrom(..) => "IS [NOT] DISTINCT FROM".into(),
        A::ILike { .. } => "ILIKE".into(),
        A::SimilarTo { .. } => "SIMILAR TO".into(),
        A::Array(_) => "arrays (outside read_stream_for_blocks)".into(),
        A::Tuple(_) => "row constructors".into(),
        A::Interval(_) => "intervals".into(),
        A::TypedString(_) => "typed literals".into(),
        other => {
            let text = other.to_string();
            let short: String = text.chars().take(60).collect();
            if short.len() < text.len() {
                format!("the expression `{short}…`")
            } else {
                format!("the expression `{short}`")
            }
        }
    }
}

/// A column a scope offers.
pub(crate) struct ScopeColumn {
    pub name: String,
    pub ty: ColumnType,
    /// The FROM item it belongs to (an index into [`Scope::items`]).
    pub item: usize,
}

/// A FROM item as names see it.
pub(crate) struct ScopeItem {
    /// The name that qualifies its columns (table name or alias).
    pub qualifier: String,
    /// For messages: `table "t"`, `view "buffers"`, …
    pub describe: String,
}

/// What names mean in an expression: the columns of the FROM items, in
/// order (a joined row is its items' rows one after the other).
pub(crate) struct Scope {
    pub items: Vec<ScopeItem>,
    pub columns: Vec<ScopeColumn>,
}

impl Scope {
    /// No columns (SELECT without FROM, VALUES, LIMIT).
    pub fn empty() -> Scope {
        Scope {
            items: Vec::new(),
            columns: Vec::new(),
        }
    }

    /// One FROM item of `columns`, named `qualifier`.
    pub fn single(
        qualifier: String,
        describe: String,
        columns: Vec<(String, ColumnType)>,
    ) -> Scope {
        Scope {
            items: vec![ScopeItem {
                qualifier,
                describe,
            }],
            columns: columns
                .into_iter()
                .map(|(name, ty)| ScopeColumn { name, ty, item: 0 })
                .collect(),
        }
    }

    /// The columns of `table`, qualified by `alias` or its name.
    pub fn of_table(table: &TableDef, alias: Option<&str>) -> Scope {
        Scope::single(
            alias.unwrap_or(table.name()).to_string(),
            format!("table \"{}\"", table.name()),
            table
                .columns
                .iter()
                .map(|c| (c.name.clone(), c.ty))
                .collect(),
        )
    }

    /// This scope's items followed by `other`'s (a join).
    pub fn join(mut self, other: Scope) -> Scope {
        let first = self.items.len();
        self.items.extend(other.items);
        self.columns
            .extend(other.columns.into_iter().map(|c| ScopeColumn {
                item: c.item + first,
                ..c
            }));
        self
    }

    /// What the names are looked up in, for messages.
    pub fn describe(&self) -> String {
        match &self.items[..] {
            [] => "a statement without FROM".into(),
            [one] => one.describe.clone(),
            many => format!(
                "the FROM items ({})",
                many.iter()
                    .map(|i| i.qualifier.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The item called `qualifier`.
    pub fn item(&self, qualifier: &str) -> Option<usize> {
        self.items.iter().position(|i| i.qualifier == qualifier)
    }

    /// The column called `name` (of item `item`, if given; among the
    /// items `visible`, if given): `Err` if several items have one.
    pub fn find_in(
        &self,
        item: Option<usize>,
        visible: Option<std::ops::Range<usize>>,
        name: &str,
    ) -> Result<Option<usize>, ()> {
        let mut found = self
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.name == name
                    && item.is_none_or(|i| c.item == i)
                    && visible.as_ref().is_none_or(|v| v.contains(&c.item))
            })
            .map(|(at, _)| at);
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some(at), None) => Ok(Some(at)),
            (Some(_), Some(_)) => Err(()),
        }
    }

    /// The column called `name`, unqualified.
    pub fn find(&self, name: &str) -> Result<Option<usize>, ()> {
        self.find_in(None, None, name)
    }

    /// The range of columns of item `item`.
    pub fn item_columns(&self, item: usize) -> std::ops::Range<usize> {
        let start = self
            .columns
            .iter()
            .position(|c| c.item == item)
            .unwrap_or(0);
        let len = self.columns.iter().filter(|c| c.item == item).count();
        start..start + len
    }
}

/// The aggregated side of a query (see the module comment).
pub(crate) struct Grouping {
    pub keys: Vec<ast::Expr>,
    /// The input column of each key that is a plain column reference, so
    /// that `t.id`, `id` and `"id"` all match it.
    pub key_columns: Vec<Option<usize>>,
    pub key_types: Vec<Option<ColumnType>>,
    pub aggs: Vec<(ast::Expr, Aggregate)>,
}

/// Plans expressions over one scope.
pub(crate) struct ExprPlanner<'a> {
    cx: &'a StmtCx,
    db: &'a Database,
    scope: &'a Scope,
    /// Columns of the scope some expression reads.
    pub used: Vec<bool>,
    pub grouping: Option<Grouping>,
    /// Utility calls of a SELECT without FROM: they become the source's
    /// row, one column each. `None` where they are not allowed.
    pub utilities: Option<Vec<UtilityCall>>,
    /// The clause being planned, for "not allowed in WHERE".
    pub clause: &'static str,
    /// The FROM items names may refer to, if not all: a JOIN's ON sees
    /// only the items of its comma-separated group joined so far.
    pub visible: Option<std::ops::Range<usize>>,
    /// Subqueries may appear (where the plan evaluates the expression
    /// with the executor's context: a SELECT's clauses, VALUES, UPDATE
    /// and DELETE; not GROUP BY, LIMIT or a function in FROM).
    pub subqueries: bool,
    /// The query this one is a subquery of: where a name not found here
    /// is looked up next.
    outer: Outer<'a>,
    /// While a subquery of this query is planned: the parameters it takes
    /// from this query's row (`$n`, and what gives it here).
    sub_args: Vec<(usize, Expr)>,
    /// The subqueries planned here: their text, and how EXPLAIN shows
    /// them instead (`$0`, `(SubPlan 1)`), for filters' labels.
    sublinks: Vec<(String, String)>,
    in_aggregate: bool,
}

/// The query around a subquery, as the subquery's planner sees it.
pub(crate) trait OuterScope {
    /// `e`, a column reference the subquery does not have, planned in this
    /// query (or further out) and passed to the subquery as a new
    /// parameter, which is returned; None if no query around has it.
    fn outer_reference(&mut self, e: &ast::Expr) -> Result<Option<Expr>, SqlError>;
}

/// Where a subquery's planner looks up names it does not have.
pub(crate) type Outer<'o> = Option<&'o mut dyn OuterScope>;

/// `outer`, lent for a shorter while (to a planner of a part of the
/// query). The object's lifetime shortens with the loan, which a plain
/// `as_deref_mut` cannot do behind `&mut`.
pub(crate) fn reborrow<'s>(outer: &'s mut Outer<'_>) -> Outer<'s> {
    match outer {
        Some(o) => {
            let o: &'s mut dyn OuterScope = &mut **o;
            Some(o)
        }
        None => None,
    }
}

impl OuterScope for ExprPlanner<'_> {
    fn outer_reference(&mut self, e: &ast::Expr) -> Result<Option<Expr>, SqlError> {
        let planned = match self.plan(e) {
            Ok(x) => x,
            Err(SqlError::UnknownColumn { .. } | SqlError::MissingFromItem { .. }) => {
                return Ok(None)
            }
            Err(other) => return Err(other),
        };
        let n = self.cx.next_param();
        let ty = planned.ty();
        self.sub_args.push((n, planned));
        Ok(Some(Expr::param(n, ty)))
    }
}

/// What kind of subquery an expression holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LinkKind {
    Exists,
    Scalar,
    In,
    /// `ARRAY(SELECT …)`.
    Array,
}

impl<'a> ExprPlanner<'a> {
    /// A planner over `scope`, starting in `clause`.
    pub fn new(cx: &'a StmtCx, db: &'a Database, scope: &'a Scope, clause: &'static str) -> Self {
        ExprPlanner {
            cx,
            db,
            scope,
            used: vec![false; scope.columns.len()],
            grouping: None,
            utilities: None,
            clause,
            visible: None,
            subqueries: false,
            outer: None,
            sub_args: Vec::new(),
            sublinks: Vec::new(),
            in_aggregate: false,
        }
    }

    /// A planner for a query inside another (`outer`), which may itself
    /// contain subqueries.
    pub fn nested(
        cx: &'a StmtCx,
        db: &'a Database,
        scope: &'a Scope,
        clause: &'static str,
        outer: Outer<'a>,
    ) -> Self {
        let mut planner = ExprPlanner::with_outer_columns(cx, db, scope, clause, outer);
        planner.subqueries = true;
        planner
    }

    /// A planner of expressions that may read the columns of the query
    /// around (`outer`) but hold no subquery: a table function's
    /// arguments in a correlated subquery, evaluated where no subquery
    /// can run (`generate_series(0, array_upper(outer.a, 1))`).
    pub fn with_outer_columns(
        cx: &'a StmtCx,
        db: &'a Database,
        scope: &'a Scope,
        clause: &'static str,
        outer: Outer<'a>,
    ) -> Self {
        let mut planner = ExprPlanner::new(cx, db, scope, clause);
        planner.outer = outer;
        planner
    }

    /// The scope it plans over.
    pub fn scope(&self) -> &'a Scope {
        self.scope
    }

    /// The statement it plans for.
    pub fn cx(&self) -> &'a StmtCx {
        self.cx
    }

    /// A predicate (WHERE, HAVING): must be boolean.
    pub fn plan_predicate(
        &mut self,
        e: &ast::Expr,
        clause: &'static str,
    ) -> Result<Expr, SqlError> {
        self.clause = clause;
        let p = self.plan(e)?;
        match p.ty() {
            None | Some(ColumnType::Boolean) => Ok(p),
            Some(other) => Err(ExecError::NotBoolean {
                context: clause,
                ty: other.name(),
            }
            .into()),
        }
    }

    /// A WHERE or HAVING clause, if the statement has one, as a filter.
    pub fn plan_filter(
        &mut self,
        e: Option<&ast::Expr>,
        clause: &'static str,
    ) -> Result<Option<Filter>, SqlError> {
        e.map(|e| {
            let mark = self.sublinks.len();
            let predicate = self.plan_predicate(e, clause)?;
            let arms = disjuncts(e);
            let arm_labels = if arms.len() > 1 {
                arms.into_iter().map(|a| self.label(a, mark)).collect()
            } else {
                Vec::new()
            };
            Ok(Filter {
                predicate,
                label: self.label(e, mark),
                arm_labels,
            })
        })
        .transpose()
    }

    /// EXPLAIN's text for condition `e`, its subqueries planned since
    /// `mark` shown as PostgreSQL shows them (`(a = $0)`,
    /// `(NOT (hashed SubPlan 1))`).
    fn label(&self, e: &ast::Expr, mark: usize) -> String {
        let sublinks = &self.sublinks[mark..];
        let whole = e.to_string();
        if let [(text, shown)] = sublinks {
            if *text == whole {
                return shown.clone();
            }
        }
        let mut label = format!("({whole})");
        for (text, shown) in sublinks {
            if let Some(at) = label.find(text.as_str()) {
                label.replace_range(at..at + text.len(), shown);
            }
        }
        label
    }

    /// `e` to be stored in column `column` of `table`: converted as an
    /// assignment converts (literals to any type, numbers among numbers).
    pub fn plan_assignment(
        &mut self,
        e: &ast::Expr,
        table: &TableDef,
        column: usize,
    ) -> Result<Expr, SqlError> {
        let planned = self.plan(e)?;
        self.cx
            .placeholders
            .infer(e, table.columns.get(column).map(|c| c.ty));
        assign(planned, is_string_literal(e), table, column)
    }

    /// `e`, a string literal converted to `ty` when `ty` is another type.
    pub(crate) fn plan_against(
        &mut self,
        e: &ast::Expr,
        ty: Option<ColumnType>,
    ) -> Result<Expr, SqlError> {
        let planned = self.plan(e)?;
        coerce_literal(self.cx, planned, e, ty)
    }

    /// Placeholder `p` (`$n`): its bound value when running; when
    /// preparing, a NULL of its given type, or of none (it takes its
    /// context's type, see [`Placeholders`]).
    fn plan_placeholder(&mut self, p: &str, e: &ast::Expr) -> Result<Expr, SqlError> {
        let placeholders = &self.cx.placeholders;
        let Some(i) = Placeholders::index(p) else {
            return Err(self.cx.unsupported_hint(
                e.span(),
                format!("the placeholder {p}"),
                &format!("; number parameters $1 to ${MAX_PARAMETERS}"),
            ));
        };
        if placeholders.generic {
            let Some(&Some(ty)) = placeholders.types.get(i) else {
                return Err(SqlError::UnknownParameter {
                    number: i + 1,
                    at: self.cx.at(e.span()),
                });
            };
            return Ok(Expr::param(i, Some(ty)));
        }
        let Some(values) = &placeholders.values else {
            if !placeholders.preparing {
                return Err(SqlError::UnknownParameter {
                    number: i + 1,
                    at: self.cx.at(e.span()),
                });
            }
            let mut inferred = placeholders.inferred.borrow_mut();
            if inferred.len() <= i {
                inferred.resize(i + 1, None);
            }
            return Ok(Expr::null(placeholders.types.get(i).copied().flatten()));
        };
        let (Some(value), Some(Some(ty))) = (values.get(i), placeholders.types.get(i)) else {
            return Err(SqlError::UnknownParameter {
                number: i + 1,
                at: self.cx.at(e.span()),
            });
        };
        Ok(match value {
            Value::Null => Expr::null(Some(*ty)),
            v => Expr::cast(Expr::constant(v.clone()), *ty)?,
        })
    }

    /// Plans `e`.
    pub fn plan(&mut self, e: &ast::Expr) -> Result<Expr, SqlError> {
        use ast::Expr as A;
        if let Some(g) = &self.grouping {
            let column = self.column_of(e);
            let key =
                g.keys.iter().position(|k| k == e).or_else(|| {
                    column.and_then(|c| g.key_columns.iter().position(|k| *k == Some(c)))
                });
            if let Some(i) = key {
                return Ok(match g.key_types[i] {
                    Some(ty) => Expr::column(i, ty),
                    None => Expr::null(None),
                });
            }
        }
        match e {
            A::Identifier(_) | A::CompoundIdentifier(_) => {
                let (index, name) = match self.resolve(e) {
                    Ok(found) => found,
                    Err(
                        not_here @ (SqlError::UnknownColumn { .. }
                        | SqlError::MissingFromItem { .. }),
                    ) => {
                        // A column of a query around this one (a
                        // correlated subquery), else the error here.
                        return match self.outer.as_deref_mut() {
                            Some(outer) => outer.outer_reference(e)?.ok_or(not_here),
                            None => Err(not_here),
                        };
                    }
                    Err(other) => return Err(other),
                };
                if self.grouping.is_some() {
                    return Err(SqlError::NotGrouped {
                        column: name,
                        at: self.cx.at(e.span()),
                    });
                }
                self.used[index] = true;
                Ok(Expr::column(index, self.scope.columns[index].ty))
            }
            A::Value(v) => match &v.value {
                ast::Value::Number(s, _) => Ok(Expr::constant(number(s)?)),
                ast::Value::Boolean(b) => Ok(Expr::constant(Value::Boolean(*b))),
                ast::Value::Null => Ok(Expr::null(None)),
                ast::Value::Placeholder(p) => self.plan_placeholder(p, e),
                other => match string_literal(other) {
                    Some(s) => Ok(Expr::constant(Value::Text(s.to_string()))),
                    None => Err(self
                        .cx
                        .unsupported(e.span(), format!("the literal {other}"))),
                },
            },
            A::Nested(inner) => self.plan(inner),
            A::UnaryOp { op, expr } => self.plan_unary(e, op, expr),
            A::BinaryOp { left, op, right } => self.plan_binary(e, left, op, right),
            A::IsNull(x) => Ok(Expr::is_null(self.plan(x)?, false)),
            A::IsNotNull(x) => Ok(Expr::is_null(self.plan(x)?, true)),
            A::InList {
                expr,
                list,
                negated,
            } => self.plan_in_list(expr, list, *negated),
            A::Between {
                expr,
                negated,
                low,
                high,
            } => self.plan_between(expr, low, high, *negated),
            A::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => Ok(Expr::like(self.plan(expr)?, self.plan(pattern)?, *negated)?),
            A::Cast {
                kind: CastKind::Cast | CastKind::DoubleColon,
                expr,
                data_type,
                format: None,
            } => {
                if let DataType::Custom(name, modifiers) = data_type {
                    let cast = catalog_name(name).and_then(|n| CatalogFunction::by_cast(&n));
                    if let (Some(cast), true) = (cast, modifiers.is_empty()) {
                        let oid = self.plan(expr)?;
                        return self.catalog_call(cast, oid, None);
                    }
                }
                let ty = column_type(data_type)?;
                // `$1::integer` makes the parameter an integer, as in
                // PostgreSQL.
                let planned = self.plan(expr)?;
                self.cx.placeholders.infer(expr, Some(ty));
                Ok(Expr::cast(planned, ty)?)
            }
            A::Function(f) => self.function(f, e),
            // `x = ANY (array)`; `ANY (SELECT …)` is IN.
            A::AnyOp {
                left,
                compare_op: BinaryOperator::Eq,
                right,
                ..
            } => match unparenthesized(right) {
                A::Subquery(q) => self.plan_sublink(e, q, LinkKind::In, Some(left), false),
                array => {
                    let x = self.plan(left)?;
                    let array = self.plan(array)?;
                    Ok(Expr::any_array(x, array)?)
                }
            },
            // `array[i]`.
            A::CompoundFieldAccess { root, access_chain } => match access_chain.as_slice() {
                [ast::AccessExpr::Subscript(ast::Subscript::Index { index })] => {
                    let array = self.plan(root)?;
                    let index = self.plan(index)?;
                    Ok(Expr::call(Function::ArrayElement, vec![array, index])?)
                }
                _ => Err(self.cx.unsupported(e.span(), describe(e))),
            },
            A::Case {
                operand,
                conditions,
                else_result,
                ..
            } => self.plan_case(operand.as_deref(), conditions, else_result.as_deref()),
            // Text compares byte by byte whatever the collation, as
            // PostgreSQL's C collation does: the default, C and POSIX are
            // that one.
            A::Collate { expr, collation } => match catalog_name(collation).as_deref() {
                Some("default" | "C" | "POSIX" | "c" | "posix") => self.plan(expr),
                _ => Err(self
                    .cx
                    .unsupported(e.span(), format!("the collation {collation}"))),
            },
            // `ceil(x)` and `floor(x)`, which the parser reads itself (for
            // forms PostgreSQL lacks: `CEIL(x TO DAY)`, `FLOOR(x, 2)`).
            A::Ceil {
                expr,
                field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
            } => Ok(Expr::call(Function::Ceil, vec![self.plan(expr)?])?),
            A::Floor {
                expr,
                field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
            } => Ok(Expr::call(Function::Floor, vec![self.plan(expr)?])?),
            A::Subquery(q) => self.plan_sublink(e, q, LinkKind::Scalar, None, false),
            A::Exists { subquery, negated } => {
                self.plan_sublink(e, subquery, LinkKind::Exists, None, *negated)
            }
            A::InSubquery {
                expr,
                subquery,
                negated,
            } => self.plan_sublink(e, subquery, LinkKind::In, Some(expr), *negated),
            // `DATE '2026-11-23'`, `TIMESTAMP '…'`: a cast of the string.
            A::TypedString(typed) if !typed.uses_odbc_syntax => {
                match string_literal(&typed.value.value) {
                    Some(s) => Ok(Expr::cast(
                        Expr::constant(Value::Text(s.to_string())),
                        column_type(&typed.data_type)?,
                    )?),
                    None => Err(self.cx.unsupported(e.span(), describe(e))),
                }
            }
            other => Err(self.cx.unsupported(other.span(), describe(other))),
        }
    }

    // `plan` recurses once per level of an expression, so each arm with
    // much to do is its own function: in a debug build a function's frame
    // holds every arm's temporaries, and `plan` with them all inline took
    // 17 KiB per level, overflowing an 8 MiB stack within the depth that
    // `parse` allows.

    /// `CASE [operand] WHEN … THEN … [ELSE …] END`; a simple CASE's
    /// `WHEN v` is `operand = v`.
    fn plan_case(
        &mut self,
        operand: Option<&ast::Expr>,
        conditions: &[ast::CaseWhen],
        else_result: Option<&ast::Expr>,
    ) -> Result<Expr, SqlError> {
        let operand = operand
            .map(|o| Ok::<_, SqlError>((self.plan(o)?, o)))
            .transpose()?;
        let mut branches = Vec::with_capacity(conditions.len());
        for when in conditions {
            let condition = match &operand {
                Some((x, x_ast)) => {
                    let v = self.plan(&when.condition)?;
                    let (xt, vt) = (x.ty(), v.ty());
                    let x = coerce_literal(self.cx, x.clone(), x_ast, vt)?;
                    let v = coerce_literal(self.cx, v, &when.condition, xt)?;
                    Expr::binary(BinaryOp::Eq, x, v)?
                }
                None => self.plan(&when.condition)?,
            };
            branches.push((condition, self.plan(&when.result)?));
        }
        let otherwise = match else_result {
            Some(e) => self.plan(e)?,
            None => Expr::null(None),
        };
        // A string literal result takes the type of the first other
        // result that has one, as PostgreSQL's select_common_type gives
        // `unknown` the others' type (`THEN 1 ELSE '2'` is an integer).
        let results: Vec<&ast::Expr> = conditions
            .iter()
            .map(|w| &w.result)
            .chain(else_result)
            .collect();
        let known = branches
            .iter()
            .map(|(_, r)| r)
            .chain([&otherwise])
            .zip(&results)
            .find(|(_, e)| !is_unknown_literal(e))
            .and_then(|(r, _)| r.ty());
        let mut coerced = Vec::with_capacity(branches.len());
        for ((condition, result), e) in branches.into_iter().zip(&results) {
            coerced.push((condition, coerce_literal(self.cx, result, e, known)?));
        }
        let otherwise = match else_result {
            Some(e) => coerce_literal(self.cx, otherwise, e, known)?,
            None => otherwise,
        };
        Ok(Expr::case(coerced, otherwise)?)
    }

    /// `function(oid)` of a catalog function, its values taken from the
    /// catalog now (see `exec::pg_catalog`).
    fn catalog_call(
        &mut self,
        function: CatalogFunction,
        oid: Expr,
        second: Option<Expr>,
    ) -> Result<Expr, SqlError> {
        let lookup = function.lookup(self.db, self.cx.viewer)?;
        Ok(Expr::lookup(
            oid,
            second,
            std::sync::Arc::new(lookup),
            function.result_type(),
        )?)
    }

    fn plan_unary(
        &mut self,
        e: &ast::Expr,
        op: &UnaryOperator,
        expr: &ast::Expr,
    ) -> Result<Expr, SqlError> {
        match op {
            UnaryOperator::Not => Ok(Expr::negation(self.plan(expr)?)?),
            UnaryOperator::Minus => match constant(e) {
                // -2147483648 is an integer, not minus a bigint.
                Some(v) => Ok(Expr::constant(v)),
                None => Ok(Expr::negate(self.plan(expr)?)?),
            },
            UnaryOperator::Plus => {
                // +x is x, for numbers only.
                let x = self.plan(expr)?;
                match x.ty() {
                    Some(ty) if !is_numeric(ty) => Err(ExecError::NoPrefixOperator {
                        op: "+",
                        ty: ty.name(),
                    }
                    .into()),
                    _ => Ok(x),
                }
            }
            other => Err(self
                .cx
                .unsupported(e.span(), format!("the prefix operator {other}"))),
        }
    }

    fn plan_binary(
        &mut self,
        e: &ast::Expr,
        left: &ast::Expr,
        op: &BinaryOperator,
        right: &ast::Expr,
    ) -> Result<Expr, SqlError> {
        self.refuse_chained_comparison(left, op)?;
        if let Some(regex) = regex_op(op) {
            let l = self.plan(left)?;
            let r = self.plan(right)?;
            return Ok(Expr::regex(l, r, regex)?);
        }
        let Some(op) = binary_op(op) else {
            return Err(self.cx.unsupported(e.span(), format!("the operator {op}")));
        };
        let l = self.plan(left)?;
        let r = self.plan(right)?;
        // Concatenation takes a literal as the text it is.
        let (l, r) = if op == BinaryOp::Concat {
            (l, r)
        } else {
            let (lt, rt) = (l.ty(), r.ty());
            (
                coerce_literal(self.cx, l, left, rt)?,
                coerce_literal(self.cx, r, right, lt)?,
            )
        };
        Ok(Expr::binary(op, l, r)?)
    }

    fn plan_in_list(
        &mut self,
        expr: &ast::Expr,
        list: &[ast::Expr],
        negated: bool,
    ) -> Result<Expr, SqlError> {
        let x = self.plan(expr)?;
        let ty = x.ty();
        let mut items = Vec::with_capacity(list.len());
        for item in list {
            items.push(self.plan_against(item, ty)?);
        }
        // `$1 IN (a, 3)`: an operand of unknown type takes the list's.
        let x = match (ty, items.iter().find_map(Expr::ty)) {
            (None, Some(list_ty)) => coerce_literal(self.cx, x, expr, Some(list_ty))?,
            _ => x,
        };
        Ok(Expr::in_list(x, items, negated)?)
    }

    fn plan_between(
        &mut self,
        expr: &ast::Expr,
        low: &ast::Expr,
        high: &ast::Expr,
        negated: bool,
    ) -> Result<Expr, SqlError> {
        let x = self.plan(expr)?;
        let ty = x.ty();
        let (low_ast, high_ast) = (low, high);
        let low = self.plan_against(low_ast, ty)?;
        let high = self.plan_against(high_ast, ty)?;
        // `$1 BETWEEN a AND 5`: an operand of unknown type takes the
        // bounds' (and a bound of unknown type the other's).
        let (x, low, high) = match (ty, low.ty().or(high.ty())) {
            (None, Some(bound_ty)) => (
                coerce_literal(self.cx, x, expr, Some(bound_ty))?,
                coerce_literal(self.cx, low, low_ast, Some(bound_ty))?,
                coerce_literal(self.cx, high, high_ast, Some(bound_ty))?,
            ),
            _ => (x, low, high),
        };
        Ok(Expr::between(x, low, high, negated)?)
    }

    /// Column `index` of the scope, read by position (a `*`'s column,
    /// outside an aggregated query).
    pub fn plan_scope_column(&mut self, index: usize) -> Expr {
        self.used[index] = true;
        Expr::column(index, self.scope.columns[index].ty)
    }

    /// A subquery in an expression (`e`): planned as a query of its own
    /// whose names not found there resolve here (and further out), each
    /// such reference becoming a parameter the call passes in. See
    /// `exec::subplan` for how it runs.
    fn plan_sublink(
        &mut self,
        e: &ast::Expr,
        q: &ast::Query,
        kind: LinkKind,
        left: Option<&ast::Expr>,
        negated: bool,
    ) -> Result<Expr, SqlError> {
        let span = e.span();
        // Group keys are computed, and spilled groups keyed, where no
        // subquery runs (and GROUP BY matches the select list's
        // expressions against its own by text, which would plan a
        // subquery twice).
        if !self.subqueries || (self.clause == "GROUP BY" && !self.in_aggregate) {
            return Err(self
                .cx
                .unsupported(span, format!("a subquery in {}", self.clause)));
        }
        let left = left
            .map(|l| Ok::<_, SqlError>((self.plan(l)?, l)))
            .transpose()?;
        let (cx, db) = (self.cx, self.db);
        let saved = std::mem::take(&mut self.sub_args);
        let planned = cx.nested(span, || {
            super::query::plan_query_in(cx, db, q, Some(&mut *self as &mut dyn OuterScope))
        });
        let args = std::mem::replace(&mut self.sub_args, saved);
        let planned = planned?;
        let columns = planned.columns.len();
        let at = cx.at(q.span());
        let one_column = |few: &'static str, many: &'static str| match columns {
            1 => Ok(()),
            0 => Err(SqlError::SubqueryColumns { problem: few, at }),
            _ => Err(SqlError::SubqueryColumns { problem: many, at }),
        };
        let first = planned.columns.first().map(|c| c.ty);
        let (link, left) = match kind {
            LinkKind::Exists => (SubLink::Exists, None),
            LinkKind::Scalar => {
                one_column(
                    "subquery must return a column",
                    "subquery must return only one column",
                )?;
                (SubLink::Scalar, None)
            }
            LinkKind::Array => {
                one_column(
                    "subquery must return a column",
                    "subquery must return only one column",
                )?;
                (SubLink::Array, None)
            }
            LinkKind::In => {
                one_column(
                    "subquery has too few columns",
                    "subquery has too many columns",
                )?;
                let Some((l, l_ast)) = left else {
                    return Err(ExecError::Internal("IN (SELECT …) without its operand").into());
                };
                let right = Expr::column(0, first.unwrap_or(ColumnType::Text));
                let l = coerce_literal(self.cx, l, l_ast, first)?;
                let (l, right) = crate::exec::expr::comparison_operands(l, right)?;
                (SubLink::Any { right }, Some(l))
            }
        };
        let mode = match (args.is_empty(), kind) {
            (false, _) => SubPlanMode::PerRow,
            (true, LinkKind::In) => SubPlanMode::Hashed,
            (true, _) => SubPlanMode::Once,
        };
        let number = cx.next_subplan();
        let output_param = if mode == SubPlanMode::Once {
            cx.next_param()
        } else {
            0
        };
        let plan = SubPlan::new(number, link, mode, planned.query.root, output_param, first);
        let reference = plan.reference();
        let call = SubPlanCall {
            plan: std::sync::Arc::new(parking_lot::Mutex::new(plan)),
            left,
            args,
        };
        let value = Expr::subplan(call);
        let (value, shown) = if negated {
            (Expr::negation(value)?, format!("(NOT {reference})"))
        } else {
            (value, reference)
        };
        self.sublinks.push((e.to_string(), shown));
        Ok(value)
    }

    /// Refuses `a < b = c`: PostgreSQL's comparison operators do not
    /// associate, so a comparison whose operand is an unparenthesized
    /// comparison is a syntax error there, while `sqlparser` reads it as
    /// `(a < b) = c`. Its left-to-right loop makes such a chain a left
    /// operand; the right one would need parentheses, which are kept.
    fn refuse_chained_comparison(
        &self,
        left: &ast::Expr,
        op: &BinaryOperator,
    ) -> Result<(), SqlError> {
        let is_comparison = |op: &BinaryOperator| {
            matches!(
                op,
                BinaryOperator::Eq
                    | BinaryOperator::NotEq
                    | BinaryOperator::Lt
                    | BinaryOperator::LtEq
                    | BinaryOperator::Gt
                    | BinaryOperator::GtEq
            )
        };
        match left {
            ast::Expr::BinaryOp { op: inner, .. } if is_comparison(op) && is_comparison(inner) => {
                let after = left.span().end;
                Err(SqlError::Syntax {
                    statement: self.cx.number,
                    message: format!(
                        "syntax error at or near \"{op}\" (after line {}, column {}): \
                         comparison operators do not chain; parenthesize one comparison, \
                         as (a < b) = c",
                        after.line, after.column
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// The scope column `e` names, if it is a column reference that
    /// resolves.
    pub fn column_of(&self, e: &ast::Expr) -> Option<usize> {
        match e {
            ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => {
                self.resolve(e).ok().map(|(index, _)| index)
            }
            ast::Expr::Nested(inner) => self.column_of(inner),
            _ => None,
        }
    }

    /// The scope column `e` (an identifier) names.
    fn resolve(&self, e: &ast::Expr) -> Result<(usize, String), SqlError> {
        let (qualifier, name) = match e {
            ast::Expr::Identifier(i) => (None, i),
            ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                (Some(&parts[0]), &parts[1])
            }
            _ => {
                return Err(self
                    .cx
                    .unsupported(e.span(), format!("the qualified name {e}")))
            }
        };
        let column = ident(name);
        let at = self.cx.at(e.span());
        let visible = |item: usize| self.visible.as_ref().is_none_or(|v| v.contains(&item));
        let item = match qualifier {
            None => None,
            Some(q) => match self.scope.item(&ident(q)) {
                Some(item) if visible(item) => Some(item),
                Some(_) => return Err(SqlError::InvalidFromReference { name: ident(q), at }),
                None => return Err(SqlError::MissingFromItem { name: ident(q), at }),
            },
        };
        let unknown = || SqlError::UnknownColumn {
            column: match qualifier {
                Some(q) => format!("{}.{column}", ident(q)),
                None => column.clone(),
            },
            relation: match item {
                Some(i) => self.scope.items[i].describe.clone(),
                None => self.scope.describe(),
            },
            at,
        };
        match self.scope.find_in(item, self.visible.clone(), &column) {
            Ok(Some(index)) => Ok((index, column)),
            Ok(None) => Err(unknown()),
            Err(()) => Err(SqlError::AmbiguousColumn { column, at }),
        }
    }

    fn function(&mut self, f: &ast::Function, e: &ast::Expr) -> Result<Expr, SqlError> {
        // Where the call starts: the name's span, which is where the
        // call's span starts too, without walking the arguments (a walk
        // that would not grow the stack, at every level of nested calls).
        let span = f.name.span();
        let at = self.cx.at(span);
        let Some(name) = function_name(f) else {
            return Err(self.cx.unsupported(
                f.name.span(),
                format!("the qualified function name {}", f.name),
            ));
        };
        if f.over.is_some() {
            return Err(self.cx.unsupported(span, "window functions (OVER)"));
        }
        if f.filter.is_some() {
            return Err(self.cx.unsupported(span, "FILTER (WHERE …)"));
        }
        if f.uses_odbc_syntax
            || f.null_treatment.is_some()
            || !f.within_group.is_empty()
            || !matches!(f.parameters, FunctionArguments::None)
        {
            return Err(self
                .cx
                .unsupported(span, format!("this form of calling {name}()")));
        }
        if let Some(now) = self.current_time(f, &name) {
            return now;
        }
        if let (FunctionArguments::Subquery(q), "array") = (&f.args, name.as_str()) {
            return self.plan_sublink(e, q, LinkKind::Array, None, false);
        }
        let args = function_args(self.cx, f, &name, span)?;
        if let Some(func) = AggFunc::by_name(&name) {
            return self.aggregate(func, &args, e, at);
        }
        // The arguments as expressions (`f(*)` is an aggregate's form).
        let asts = args
            .iter()
            .map(|a| match a {
                FunctionArgExpr::Expr(x) => Ok(x),
                _ => Err(self.cx.unsupported(span, format!("{name}(*)"))),
            })
            .collect::<Result<Vec<_>, _>>();
        if let Some(which) = Pick::by_name(&name) {
            let asts = asts?;
            let planned = asts
                .iter()
                .map(|x| self.plan(x))
                .collect::<Result<Vec<_>, _>>()?;
            if planned.is_empty() {
                return Err(self
                    .cx
                    .unsupported(span, format!("{name}() without arguments")));
            }
            // A string literal takes the first typed argument's type, as
            // a CASE's result does.
            let known = planned
                .iter()
                .zip(&asts)
                .find(|(_, e)| !is_unknown_literal(e))
                .and_then(|(p, _)| p.ty());
            let mut coerced = Vec::with_capacity(planned.len());
            for (p, e) in planned.into_iter().zip(asts) {
                coerced.push(coerce_literal(self.cx, p, e, known)?);
            }
            return Ok(Expr::pick(which, coerced)?);
        }
        if name == "nullif" {
            let [FunctionArgExpr::Expr(a), FunctionArgExpr::Expr(b)] = args.as_slice() else {
                return Err(self
                    .cx
                    .unsupported(span, "this call of nullif(); it takes two values"));
            };
            let (pa, pb) = (self.plan(a)?, self.plan(b)?);
            let (ta, tb) = (pa.ty(), pb.ty());
            let pa = coerce_literal(self.cx, pa, a, tb)?;
            let pb = coerce_literal(self.cx, pb, b, ta)?;
            return Ok(Expr::null_if(pa, pb)?);
        }
        if let Some(func) = Function::by_name(&name) {
            let planned = asts?
                .iter()
                .map(|x| self.plan(x))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Expr::call(func, planned)?);
        }
        if let Some(function) = CatalogFunction::by_name(&name) {
            return self.catalog_function(function, &args, span);
        }
        if let Some(utility) = Utility::by_name(&name) {
            let (Some(calls), [(_, ty)]) = (&mut self.utilities, utility.columns()) else {
                return Err(SqlError::UtilityPlacement { name, at });
            };
            calls.push(utility_call(self.cx, self.db, utility, &args, span)?);
            return Ok(Expr::column(calls.len() - 1, *ty));
        }
        if name == "generate_series" {
            return Err(self.cx.unsupported_hint(
                span,
                "generate_series() in the select list",
                "; use it in FROM: SELECT … FROM generate_series(1, 10) AS g(i)",
            ));
        }
        Err(SqlError::UnknownFunction {
            name,
            at,
            known: known_functions(),
        })
    }

    /// A call of a catalog function: its oid planned, a column number too
    /// (`pg_get_indexdef`'s, 0 for the whole definition), any other
    /// argument a constant it ignores (a `pretty` flag: pretty or not,
    /// the text here is the same; a catalog's name).
    fn catalog_function(
        &mut self,
        function: CatalogFunction,
        args: &[&FunctionArgExpr],
        span: Span,
    ) -> Result<Expr, SqlError> {
        let name = function.name();
        let refuse = |cx: &StmtCx| {
            cx.unsupported(
                span,
                format!(
                    "this call of {name}(); it takes an oid, then at most {} more (a column number, constants)",
                    function.extra_args()
                ),
            )
        };
        let Some((FunctionArgExpr::Expr(first), rest)) = args.split_first() else {
            return Err(refuse(self.cx));
        };
        if rest.len() > function.extra_args() {
            return Err(refuse(self.cx));
        }
        let mut column = None;
        for (i, a) in rest.iter().enumerate() {
            let FunctionArgExpr::Expr(x) = a else {
                return Err(refuse(self.cx));
            };
            let planned = self.plan(x)?;
            if i == 0 && function.takes_column() {
                column = Some(coerce_literal(
                    self.cx,
                    planned,
                    x,
                    Some(ColumnType::Integer),
                )?);
                continue;
            }
            if planned.as_const().is_none() {
                return Err(refuse(self.cx));
            }
        }
        let oid = self.plan(first)?;
        let oid = coerce_literal(self.cx, oid, first, Some(ColumnType::Integer))?;
        self.catalog_call(function, oid, column)
    }

    /// `CURRENT_DATE`, `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP` (written
    /// without parentheses) and `now()`, if `f` is one: the statement's
    /// transaction start time, a constant for the whole statement.
    /// **Departure:** PostgreSQL's `now()` and `CURRENT_TIMESTAMP` are
    /// `timestamp with time zone`, which we lack; they are `timestamp`
    /// here, in UTC.
    fn current_time(&self, f: &ast::Function, name: &str) -> Option<Result<Expr, SqlError>> {
        let bare = matches!(f.args, FunctionArguments::None);
        let no_args = matches!(&f.args, FunctionArguments::List(l) if l.args.is_empty());
        // A generic plan reads it at each run.
        let now = match self.cx.placeholders.time_param() {
            Some(n) => Expr::param(n, Some(ColumnType::Timestamp)),
            None => Expr::constant(Value::Timestamp(self.cx.now)),
        };
        match name {
            "current_date" if bare => Some(Expr::cast(now, ColumnType::Date).map_err(Into::into)),
            "current_timestamp" | "localtimestamp" if bare => Some(Ok(now)),
            "now" if no_args => Some(Ok(now)),
            "current_date" | "current_timestamp" | "localtimestamp" => {
                Some(Err(self.cx.unsupported(
                    f.name.span(),
                    format!("{name} with a precision or parentheses"),
                )))
            }
            _ => None,
        }
    }

    fn aggregate(
        &mut self,
        func: AggFunc,
        args: &[&FunctionArgExpr],
        e: &ast::Expr,
        at: Position,
    ) -> Result<Expr, SqlError> {
        if self.in_aggregate {
            return Err(SqlError::AggregateNotAllowed {
                clause: "the argument of an aggregate",
                at,
            });
        }
        let Some(mut grouping) = self.grouping.take() else {
            return Err(SqlError::AggregateNotAllowed {
                clause: self.clause,
                at,
            });
        };
        let nkeys = grouping.keys.len();
        let planned = match grouping.aggs.iter().position(|(a, _)| a == e) {
            Some(j) => Ok(Expr::column(nkeys + j, grouping.aggs[j].1.ty())),
            None => {
                // The argument is over the input row: plan it without
                // grouping.
                self.in_aggregate = true;
                let agg = self.aggregate_call(func, args, e);
                self.in_aggregate = false;
                agg.map(|agg| {
                    let ty = agg.ty();
                    grouping.aggs.push((e.clone(), agg));
                    Expr::column(nkeys + grouping.aggs.len() - 1, ty)
                })
            }
        };
        self.grouping = Some(grouping);
        planned
    }

    /// The aggregate `func(args)`, its argument planned over the input row.
    fn aggregate_call(
        &mut self,
        func: AggFunc,
        args: &[&FunctionArgExpr],
        e: &ast::Expr,
    ) -> Result<Aggregate, SqlError> {
        let (func, arg) = match (func, args) {
            (AggFunc::StringAgg, [FunctionArgExpr::Expr(x), FunctionArgExpr::Expr(d)]) => {
                let x = self.plan(x)?;
                return match self.plan(d)?.as_const() {
                    Some(Value::Text(d)) => Ok(Aggregate::string_agg(x, d.clone())?),
                    _ => Err(self.cx.unsupported(
                        e.span(),
                        "string_agg() with a delimiter that is not a text constant",
                    )),
                };
            }
            (AggFunc::Count, [FunctionArgExpr::Wildcard]) => (AggFunc::CountStar, None),
            (_, [FunctionArgExpr::Expr(x)]) => (func, Some(self.plan(x)?)),
            _ => {
                return Err(self.cx.unsupported(
                    e.span(),
                    format!("{}() with these arguments; it takes one", func.name()),
                ))
            }
        };
        Ok(Aggregate::new(func, arg)?)
    }
}

/// Converts a string literal `planned` (from `e`) to `ty` if that is
/// another type.
fn coerce_literal(
    cx: &StmtCx,
    planned: Expr,
    e: &ast::Expr,
    ty: Option<ColumnType>,
) -> Result<Expr, SqlError> {
    cx.placeholders.infer(e, ty);
    match ty {
        // To the type without its modifier, as the operator takes it:
        // `c = 'abcdef'` with c char(3) must not cut the literal.
        Some(ty) if ty != ColumnType::Text && (is_string_literal(e) || is_array_element(e)) => {
            Ok(Expr::cast(planned, ty.without_modifier())?)
        }
        _ => Ok(planned),
    }
}

/// `planned` stored into column `column` of `table`.
pub(crate) fn assign(
    planned: Expr,
    literal: bool,
    table: &TableDef,
    column: usize,
) -> Result<Expr, SqlError> {
    let Some(def) = table.columns.get(column) else {
        return Err(ExecError::Internal("assignment to a column the table does not have").into());
    };
    match planned.ty() {
        None => Ok(Expr::assign_cast(planned, def.ty)?),
        Some(ty) if ty == def.ty => Ok(planned),
        Some(ty) if literal || can_assign(ty, def.ty) => Ok(Expr::assign_cast(planned, def.ty)?),
        Some(ty) => Err(ExecError::ColumnType {
            table: table.name().to_string(),
            column: def.name.clone(),
            expected: def.ty.name(),
            found: ty.name(),
        }
        .into()),
    }
}

fn binary_op(op: &BinaryOperator) -> Option<BinaryOp> {
    Some(match op {
        BinaryOperator::Plus => BinaryOp::Add,
        BinaryOperator::Minus => BinaryOp::Sub,
        BinaryOperator::Multiply => BinaryOp::Mul,
        BinaryOperator::Divide => BinaryOp::Div,
        BinaryOperator::Modulo => BinaryOp::Mod,
        BinaryOperator::StringConcat => BinaryOp::Concat,
        BinaryOperator::Eq => BinaryOp::Eq,
        BinaryOperator::NotEq => BinaryOp::Ne,
        BinaryOperator::Lt => BinaryOp::Lt,
        BinaryOperator::LtEq => BinaryOp::Le,
        BinaryOperator::Gt => BinaryOp::Gt,
        BinaryOperator::GtEq => BinaryOp::Ge,
        BinaryOperator::And => BinaryOp::And,
        BinaryOperator::Or => BinaryOp::Or,
        _ => return None,
    })
}

/// Every function name, for "function x() does not exist".
fn known_functions() -> String {
    let mut names: Vec<&str> = AggFunc::ALL.map(AggFunc::name).to_vec();
    names.push("generate_series");
    names.extend(["now", "current_date", "current_timestamp", "localtimestamp"]);
    names.extend(["coalesce", "greatest", "least", "nullif"]);
    names.extend(Function::ALL.map(Function::name));
    names.extend(Utility::ALL.map(Utility::name));
    names.extend(CatalogFunction::ALL.map(CatalogFunction::name));
    names.join(", ")
}

/// The plain positional arguments of `f`.
pub(crate) fn function_args<'f>(
    cx: &StmtCx,
    f: &'f ast::Function,
    name: &str,
    span: Span,
) -> Result<Vec<&'f FunctionArgExpr>, SqlError> {
    let list = match &f.args {
        FunctionArguments::List(list) => list,
        FunctionArguments::None => {
            return Err(cx.unsupported_hint(
                span,
                format!("{name} without parentheses"),
                "; write {name}()",
            ))
        }
        FunctionArguments::Subquery(_) => return Err(cx.unsupported(span, "subqueries")),
    };
    if list.duplicate_treatment == Some(DuplicateTreatment::Distinct) {
        return Err(cx.unsupported(span, format!("{name}(DISTINCT …)")));
    }
    if !list.clauses.is_empty() {
        return Err(cx.unsupported(span, format!("clauses inside {name}(…)")));
    }
    table_function_args(cx, &list.args, name, span)
}

/// Positional arguments of a call, refusing named ones.
pub(crate) fn table_function_args<'f>(
    cx: &StmtCx,
    args: &'f [FunctionArg],
    name: &str,
    span: Span,
) -> Result<Vec<&'f FunctionArgExpr>, SqlError> {
    args.iter()
        .map(|a| match a {
            FunctionArg::Unnamed(x) => Ok(x),
            _ => Err(cx.unsupported(span, format!("named arguments of {name}()"))),
        })
        .collect()
}

/// A call of `utility` with constant arguments: a table name and, for
/// `read_stream_for_blocks`, an array of block numbers.
pub(crate) fn utility_call(
    cx: &StmtCx,
    db: &Database,
    utility: Utility,
    args: &[&FunctionArgExpr],
    span: Span,
) -> Result<UtilityCall, SqlError> {
    let bad = || SqlError::UtilityArguments {
        name: utility.name().to_string(),
        signature: utility.signature(),
        at: cx.at(span),
    };
    let table_name = |a: &FunctionArgExpr| match a {
        FunctionArgExpr::Expr(x) => match constant(x) {
            Some(Value::Text(name)) => Ok(name),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    };
    if let (Utility::VerifyIndex, [index]) = (utility, args) {
        let index = super::relation_name_from_text(&table_name(index)?);
        let def = db
            .catalog()
            .index(&index)
            .map_err(|_| SqlError::UnknownIndex {
                name: index.clone(),
            })?;
        let table = db
            .catalog()
            .tables()
            .into_iter()
            .find(|t| t.oid == def.table_oid)
            .ok_or_else(|| SqlError::UnknownIndex {
                name: index.clone(),
            })?;
        return Ok(UtilityCall {
            utility,
            table,
            index: Some(index),
            blocks: Vec::new(),
        });
    }
    let (name, blocks) = match (utility, args) {
        (Utility::Prewarm | Utility::EvictRelation, [table]) => (table_name(table)?, Vec::new()),
        (Utility::ReadStreamForBlocks, [table, FunctionArgExpr::Expr(ast::Expr::Array(array))]) => {
            let mut blocks = Vec::with_capacity(array.elem.len());
            for e in &array.elem {
                match constant(e).as_ref().and_then(as_i64) {
                    Some(b) => blocks.push(u32::try_from(b).map_err(|_| bad())?),
                    None => return Err(bad()),
                }
            }
            (table_name(table)?, blocks)
        }
        _ => return Err(bad()),
    };
    let name = super::relation_name_from_text(&name);
    let table = cx.table(db, &name).map_err(|_| SqlError::UnknownTable {
        name: name.clone(),
        hint: String::new(),
    })?;
    Ok(UtilityCall {
        utility,
        table,
        index: None,
        blocks,
    })
}

/// The ORed parts of a condition, however nested or parenthesised: as
/// [`Expr::disjuncts`] splits the planned condition, part for part.
fn disjuncts(e: &ast::Expr) -> Vec<&ast::Expr> {
    match e {
        ast::Expr::BinaryOp {
            left,
            op: BinaryOperator::Or,
            right,
        } => {
            let mut parts = disjuncts(left);
            parts.extend(disjuncts(right));
            parts
        }
        ast::Expr::Nested(inner) => disjuncts(inner),
        other => vec![other],
    }
}

//! Splitting a text into statements and parsing them, keeping each
//! statement's number and position for error messages.
//!
//! The text is tokenized once; before parsing, a pass over the tokens
//! bounds how deeply expressions can nest ([`MAX_NESTING_DEPTH`] levels
//! of parentheses, calls, CASE and prefix operators, chains of
//! [`MAX_OPERATOR_DEPTH`] infix operators, which `sqlparser` builds in a
//! loop), and refuses deeper with PostgreSQL's "stack depth limit
//! exceeded". Within the bounds no walk of a tree overflows the stack:
//! parsing and each statement's planning and execution run under
//! [`with_stack_for_depth`], on a stack sized once for the depth the pass
//! measured, which covers every walk in them (ours, and `sqlparser`'s
//! derived Clone, PartialEq, drop glue and spans, which cannot grow a
//! stack); `sqlparser`'s parser grows its own as well. Its recursion
//! counter ([`MAX_PARSER_RECURSION`]) is only a backstop.
//!
//! `CHECKPOINT` is handled here: `sqlparser` does not know it. So are
//! the locking clauses it does not parse ([`rewrite_locking_clauses`]).

use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::{Position, SqlError};

/// Most operators one expression may chain (summed over the enclosing
/// parentheses). This bounds memory: the stack `with_stack_for_depth`
/// sets aside grows with it.
pub const MAX_OPERATOR_DEPTH: usize = 512;

/// Most levels of parentheses, brackets, CASE and prefix operators one
/// expression may nest (a call's or CAST's parentheses and an IN list's
/// count as a level), checked before parsing. PostgreSQL's bound is its
/// 2 MB `max_stack_depth`, a few thousand levels; generated SQL nests far
/// deeper than a person writes, and a statement runs on a stack sized for
/// its depth (`with_stack_for_depth`), so the bound is about memory and
/// time, not the thread's stack.
pub const MAX_NESTING_DEPTH: usize = 1000;

/// Parser recursion a statement takes before its expressions (statement,
/// query, select item), measured.
const PARSER_LEVELS_PER_STATEMENT: usize = 4;

/// Parser recursion one level of nesting can take: two when it is an
/// operand (`1 + (…)`: the operand, then the parenthesized expression),
/// measured.
const PARSER_LEVELS_PER_NESTING: usize = 2;

/// How deeply `sqlparser` may recurse (its counter is decremented per
/// nested expression, query and statement): enough that it never runs
/// out within [`MAX_NESTING_DEPTH`], where it would report a confusing
/// syntax error (inside CASE it retries `case` as a column name). Its
/// recursive functions grow their stack on demand (its default
/// `recursive-protection` feature), so the counter is a backstop for
/// what [`check_depth`] does not count, not a guard of the stack.
pub const MAX_PARSER_RECURSION: usize =
    PARSER_LEVELS_PER_STATEMENT + PARSER_LEVELS_PER_NESTING * MAX_NESTING_DEPTH;

/// Stack one level of expression nesting may take in the deepest of what
/// a statement does with it: parsing (sqlparser grows its own), planning
/// (our recursion, and sqlparser's derived `Clone`, `PartialEq`, drop glue
/// and spans, which cannot grow a stack), evaluating and dropping the
/// plan. Planning takes the most: about 11 KiB a level unoptimised (nested
/// calls), far less in release.
const TREE_WALK_BYTES_PER_LEVEL: usize = 24 << 10;

/// Stack for what runs around the expressions (the statement's planning
/// and execution down to them) at any depth.
const TREE_WALK_BYTES_BASE: usize = 256 << 10;

/// Runs `f`, a statement's planning and execution, with stack enough for
/// its expressions `depth` levels deep: on the current stack if that has
/// room, else on a new one (which a statement as shallow as a person
/// writes never needs where a thread has the usual 2 MiB). One check per
/// statement, instead of one per recursive call.
pub(crate) fn with_stack_for_depth<R>(depth: usize, f: impl FnOnce() -> R) -> R {
    let bytes = TREE_WALK_BYTES_BASE + depth * TREE_WALK_BYTES_PER_LEVEL;
    stacker::maybe_grow(bytes, bytes, f)
}

/// A statement of the text.
pub(crate) struct Parsed {
    /// 1-based.
    pub number: usize,
    /// Where its first token is.
    pub start: Position,
    pub statement: Stmt,
    /// A bound on how deeply its syntax tree nests (for
    /// [`with_stack_for_depth`]).
    pub depth: usize,
}

pub(crate) enum Stmt {
    Ast(Box<Statement>),
    Checkpoint,
    /// `VACUUM ANALYZE [t]`, which `sqlparser` does not know: the VACUUM
    /// without its ANALYZE.
    VacuumAnalyze(Box<Statement>),
}

fn position(t: &TokenWithSpan) -> Position {
    Position {
        line: t.span.start.line,
        column: t.span.start.column,
    }
}

/// Whether `t` extends an operator chain: every token except names,
/// literals and punctuation (a new operator in `sqlparser` counts without
/// being listed here), and the keywords that act as operators.
fn is_operator(t: &Token) -> bool {
    match t {
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::XOR
                | Keyword::NOT
                | Keyword::IS
                | Keyword::NOTNULL
                | Keyword::IN
                | Keyword::BETWEEN
                | Keyword::OVERLAPS
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::RLIKE
                | Keyword::REGEXP
                | Keyword::SIMILAR
                | Keyword::GLOB
                | Keyword::MATCH
                | Keyword::MEMBER
                | Keyword::OPERATOR
                | Keyword::DIV
                | Keyword::AT
                | Keyword::COLLATE
        ),
        Token::EOF
        | Token::Number(..)
        | Token::Char(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::TripleSingleQuotedString(_)
        | Token::TripleDoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::SingleQuotedByteStringLiteral(_)
        | Token::DoubleQuotedByteStringLiteral(_)
        | Token::TripleSingleQuotedByteStringLiteral(_)
        | Token::TripleDoubleQuotedByteStringLiteral(_)
        | Token::SingleQuotedRawStringLiteral(_)
        | Token::DoubleQuotedRawStringLiteral(_)
        | Token::TripleSingleQuotedRawStringLiteral(_)
        | Token::TripleDoubleQuotedRawStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::QuoteDelimitedStringLiteral(_)
        | Token::NationalQuoteDelimitedStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::UnicodeStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Placeholder(_)
        | Token::Comma
        | Token::Whitespace(_)
        | Token::Period
        | Token::SemiColon
        | Token::LParen
        | Token::RParen
        | Token::LBracket
        | Token::RBracket
        | Token::LBrace
        | Token::RBrace => false,
        _ => true,
    }
}

/// What opened a level of nesting.
#[derive(PartialEq)]
enum Opener {
    /// The statement itself (never closed but by `;`).
    Statement,
    /// `(` or `[`.
    Bracket,
    /// `CASE`, closed by `END`.
    Case,
}

/// An open level of nesting, the operators of its current chain and the
/// prefix operators open in it.
struct Level {
    opener: Opener,
    operators: usize,
    /// Prefix operators (`- - x`, `NOT NOT x`) since the chain's last
    /// infix operator: each nests its operand one level deeper.
    prefixes: usize,
}

impl Level {
    fn new(opener: Opener) -> Level {
        Level {
            opener,
            operators: 0,
            prefixes: 0,
        }
    }
}

/// Whether an operator after `previous` (the last token that is not
/// whitespace) is a prefix operator: at the start of an expression,
/// after punctuation that opens one, another operator or a keyword that
/// a clause or CASE branch begins with.
fn starts_operand(previous: Option<&Token>) -> bool {
    match previous {
        None | Some(Token::LParen | Token::LBracket | Token::Comma | Token::SemiColon) => true,
        Some(t @ Token::Word(w)) => {
            matches!(
                w.keyword,
                Keyword::SELECT
                    | Keyword::DISTINCT
                    | Keyword::WHERE
                    | Keyword::HAVING
                    | Keyword::ON
                    | Keyword::BY
                    | Keyword::CASE
                    | Keyword::WHEN
                    | Keyword::THEN
                    | Keyword::ELSE
                    | Keyword::RETURNING
                    | Keyword::LIMIT
                    | Keyword::OFFSET
            ) || is_operator(t)
        }
        Some(t) => is_operator(t),
    }
}

/// What [`MAX_NESTING_DEPTH`] counts, for its error.
const NESTING_WHAT: &str = "levels of parentheses, calls, CASE and prefix operators";

/// Refuses expressions deeper than [`MAX_OPERATOR_DEPTH`] operators or
/// [`MAX_NESTING_DEPTH`] levels (see the module comment); returns the
/// most operators and levels open at once, a bound on how deep the
/// text's syntax trees are (less [`PARSER_LEVELS_PER_STATEMENT`]).
fn check_depth(tokens: &[TokenWithSpan]) -> Result<usize, SqlError> {
    let mut levels: Vec<Level> = vec![Level::new(Opener::Statement)];
    // Operators of the chains open at this point, summed over `levels`.
    let mut depth = 0usize;
    // Levels of nesting open at this point: the levels but the
    // statement's own, and their prefix operators.
    let mut nesting = 0usize;
    let mut deepest = 0usize;
    let mut statement = 1;
    let mut previous: Option<&Token> = None;
    let too_deep = |statement, t: &TokenWithSpan, limit, what| SqlError::TooDeep {
        statement,
        at: position(t),
        limit,
        what,
    };
    let is_keyword = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k);
    // Closes the top level's chain: its operators and prefix operators
    // no longer enclose what follows.
    let end_chain = |top: &mut Level, depth: &mut usize, nesting: &mut usize| {
        *depth -= top.operators;
        *nesting -= top.prefixes;
        top.operators = 0;
        top.prefixes = 0;
    };
    for t in tokens {
        let top = levels.last().map(|l| &l.opener);
        match &t.token {
            Token::Whitespace(_) => continue,
            Token::LParen | Token::LBracket => {
                levels.push(Level::new(Opener::Bracket));
                nesting += 1;
            }
            token if is_keyword(token, Keyword::CASE) => {
                levels.push(Level::new(Opener::Case));
                nesting += 1;
            }
            Token::RParen | Token::RBracket if top == Some(&Opener::Bracket) => {
                if let Some(mut closed) = levels.pop() {
                    end_chain(&mut closed, &mut depth, &mut nesting);
                    nesting -= 1;
                }
            }
            token if is_keyword(token, Keyword::END) && top == Some(&Opener::Case) => {
                if let Some(mut closed) = levels.pop() {
                    end_chain(&mut closed, &mut depth, &mut nesting);
                    nesting -= 1;
                }
            }
            // A comma, and a CASE's WHEN, THEN and ELSE, start a new
            // expression at the same level.
            token
                if *token == Token::Comma
                    || (top == Some(&Opener::Case)
                        && [Keyword::WHEN, Keyword::THEN, Keyword::ELSE]
                            .into_iter()
                            .any(|k| is_keyword(token, k))) =>
            {
                if let Some(top) = levels.last_mut() {
                    end_chain(top, &mut depth, &mut nesting);
                }
            }
            Token::SemiColon => {
                levels.clear();
                levels.push(Level::new(Opener::Statement));
                depth = 0;
                nesting = 0;
                statement += 1;
            }
            token if is_operator(token) => {
                let Some(top) = levels.last_mut() else {
                    continue;
                };
                if starts_operand(previous) {
                    // A prefix operator nests its operand (`- - x` is
                    // `-(-(x))`): a level, not a link of a chain.
                    top.prefixes += 1;
                    nesting += 1;
                } else {
                    // An infix or postfix operator ends its left operand,
                    // and with it the prefix operators applied to it.
                    nesting -= top.prefixes;
                    top.prefixes = 0;
                    top.operators += 1;
                    depth += 1;
                }
                if depth > MAX_OPERATOR_DEPTH {
                    return Err(too_deep(statement, t, MAX_OPERATOR_DEPTH, "operators"));
                }
            }
            _ => {}
        }
        previous = Some(&t.token);
        if nesting > MAX_NESTING_DEPTH {
            return Err(too_deep(statement, t, MAX_NESTING_DEPTH, NESTING_WHAT));
        }
        deepest = deepest.max(depth + nesting);
    }
    Ok(deepest)
}

/// The text a literal or name token holds (after its escapes are undone).
fn token_text(t: &Token) -> Option<&str> {
    match t {
        Token::Word(w) => Some(&w.value),
        Token::DollarQuotedString(d) => Some(&d.value),
        Token::SingleQuotedString(s)
        | Token::DoubleQuotedString(s)
        | Token::TripleSingleQuotedString(s)
        | Token::TripleDoubleQuotedString(s)
        | Token::NationalStringLiteral(s)
        | Token::EscapedStringLiteral(s)
        | Token::UnicodeStringLiteral(s) => Some(s),
        _ => None,
    }
}

/// How a literal spells a NUL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NulEscape {
    /// A byte: `\0` to `\000` (octal, PostgreSQL keeping the low byte),
    /// `\x0`/`\x00`, or a raw NUL.
    Byte,
    /// A code point: `\u0000`, `\U00000000`, `U&'\0000'`.
    Unicode,
}

impl NulEscape {
    /// The error PostgreSQL gives for it.
    fn error(self, statement: usize, at: Position) -> SqlError {
        match self {
            NulEscape::Byte => SqlError::NulInText { statement, at },
            NulEscape::Unicode => SqlError::NulUnicodeEscape { statement, at },
        }
    }
}

/// How the escaped string literal (`E'…'`) that `text` starts with spells
/// a NUL, if one of its escapes stands for one.
fn escaped_literal_nul(text: &str) -> Option<NulEscape> {
    let body = text
        .strip_prefix("E'")
        .or_else(|| text.strip_prefix("e'"))?;
    let bytes = body.as_bytes();
    // The value of the up to `max` digits of `radix` at `at`, and how
    // many there were.
    let digits = |at: usize, max: usize, radix: u32| {
        let mut value = 0u32;
        let mut n = 0;
        while n < max {
            match bytes.get(at + n).and_then(|&b| (b as char).to_digit(radix)) {
                Some(d) => value = value.wrapping_mul(radix).wrapping_add(d),
                None => break,
            }
            n += 1;
        }
        (value, n)
    };
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' if bytes.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return None,
            b'\\' => {
                let (value, n) = match bytes.get(i + 1) {
                    Some(b'0'..=b'7') => digits(i + 1, 3, 8),
                    Some(b'x') => digits(i + 2, 2, 16),
                    Some(b'u') => digits(i + 2, 4, 16),
                    Some(b'U') => digits(i + 2, 8, 16),
                    _ => (1, 0),
                };
                if n > 0 && value & 0xFF == 0 && (value == 0 || bytes[i + 1].is_ascii_digit()) {
                    return Some(if matches!(bytes[i + 1], b'u' | b'U') {
                        NulEscape::Unicode
                    } else {
                        NulEscape::Byte
                    });
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    None
}

/// Refuses a NUL character in a literal or name (`E'\x00'`, `U&'\0000'`,
/// or a raw one): PostgreSQL's text cannot hold one, and reports it as
/// invalid UTF-8.
fn check_no_nul(tokens: &[TokenWithSpan]) -> Result<(), SqlError> {
    let mut statement = 1;
    for t in tokens {
        if t.token == Token::SemiColon {
            statement += 1;
        }
        if token_text(&t.token).is_some_and(|text| text.contains('\0')) {
            let how = match t.token {
                Token::UnicodeStringLiteral(_) => NulEscape::Unicode,
                _ => NulEscape::Byte,
            };
            return Err(how.error(statement, position(t)));
        }
    }
    Ok(())
}

/// Parses every statement of `text`.
pub(crate) fn parse(text: &str) -> Result<Vec<Parsed>, SqlError> {
    let dialect = PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| {
            let offset = text
                .len()
                .min(offset_of(text, e.location.line, e.location.column));
            let statement = 1 + text[..offset].matches(';').count();
            // The tokenizer refuses an escape that makes a NUL as if the
            // literal were unterminated; say what PostgreSQL says.
            if let Some(how) = escaped_literal_nul(&text[offset..]) {
                let at = Position {
                    line: e.location.line,
                    column: e.location.column,
                };
                return how.error(statement, at);
            }
            SqlError::Syntax {
                statement,
                message: e.to_string(),
            }
        })?;
    let depth = check_depth(&tokens)? + PARSER_LEVELS_PER_STATEMENT;
    check_no_nul(&tokens)?;
    // The parser grows its own stack, but a tree it drops on an error
    // does not.
    with_stack_for_depth(depth, || parse_tokens(&dialect, &tokens, depth))
}

/// Spells the value of a COPY option that takes a boolean (`FREEZE ON`,
/// `HEADER off`, `FREEZE 1`) as TRUE or FALSE, the only spellings the
/// parser takes there; PostgreSQL takes every boolean spelling (pgbench
/// sends `FREEZE ON`).
fn spell_copy_booleans(tokens: &mut [TokenWithSpan]) {
    let words = |t: &Token, w: &[&str]| matches!(t, Token::Word(x) if x.quote_style.is_none() && w.iter().any(|w| x.value.eq_ignore_ascii_case(w)));
    let mut after_option = false;
    for t in tokens.iter_mut() {
        if matches!(t.token, Token::Whitespace(_)) {
            continue;
        }
        if after_option {
            let value = if words(&t.token, &["on", "yes"])
                || t.token == Token::Number("1".into(), false)
            {
                Some("TRUE")
            } else if words(&t.token, &["off", "no"]) || t.token == Token::Number("0".into(), false)
            {
                Some("FALSE")
            } else {
                None
            };
            if let Some(v) = value {
                t.token = Token::make_keyword(v);
            }
        }
        after_option = words(&t.token, &["freeze", "header"]);
    }
}

/// The first part a locking clause's `OF` name is given, for the
/// strengths `sqlparser` does not know (see [`rewrite_locking_clauses`]).
/// No name can hold it: a control character the rewrite alone writes.
pub(crate) const KEY_SHARE_MARK: &str = "\u{1}key share";
pub(crate) const NO_KEY_UPDATE_MARK: &str = "\u{1}no key update";

/// Rewrites the locking clauses of a statement's tokens that `sqlparser`
/// does not take into ones it does: it knows `FOR UPDATE` and `FOR SHARE`
/// with at most one `OF` name, PostgreSQL also `FOR NO KEY UPDATE`, `FOR
/// KEY SHARE` and `OF a, b`. A clause of several names becomes one per
/// name (`FOR UPDATE OF a FOR UPDATE OF b`, each with the clause's
/// `NOWAIT` or `SKIP LOCKED`: PostgreSQL reads the list so), and a weak
/// strength becomes the stronger spelling with [`KEY_SHARE_MARK`] or
/// [`NO_KEY_UPDATE_MARK`] as its name's first part (the whole name
/// without `OF`), which the planner reads back (`query::lock_clause`).
/// A clause `sqlparser` takes is left as it is.
fn rewrite_locking_clauses(tokens: &mut Vec<TokenWithSpan>) {
    let keyword = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => w.keyword,
        _ => Keyword::NoKeyword,
    };
    let mut at = 0;
    while at < tokens.len() {
        if keyword(&tokens[at].token) != Keyword::FOR {
            at += 1;
            continue;
        }
        // The significant tokens after FOR, by position.
        let significant: Vec<usize> = (at + 1..tokens.len())
            .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
            .collect();
        let word = |k: usize| {
            significant
                .get(k)
                .map_or(Keyword::NoKeyword, |&i| keyword(&tokens[i].token))
        };
        let (mark, strength, mut k) = match (word(0), word(1), word(2)) {
            (Keyword::NO, Keyword::KEY, Keyword::UPDATE) => {
                (Some(NO_KEY_UPDATE_MARK), Keyword::UPDATE, 3)
            }
            (Keyword::KEY, Keyword::SHARE, _) => (Some(KEY_SHARE_MARK), Keyword::SHARE, 2),
            (Keyword::UPDATE, ..) => (None, Keyword::UPDATE, 1),
            (Keyword::SHARE, ..) => (None, Keyword::SHARE, 1),
            _ => {
                at += 1;
                continue;
            }
        };
        let token_at = |k: usize| significant.get(k).map(|&i| &tokens[i].token);
        // OF name [, name …], each name words joined by dots.
        let mut names: Vec<Vec<Token>> = Vec::new();
        if word(k) == Keyword::OF {
            k += 1;
            loop {
                let mut name = Vec::new();
                while let Some(t @ Token::Word(_)) = token_at(k) {
                    name.push(t.clone());
                    k += 1;
                    if token_at(k) != Some(&Token::Period) {
                        break;
                    }
                    name.push(Token::Period);
                    k += 1;
                }
                if name.is_empty() {
                    break;
                }
                names.push(name);
                if token_at(k) != Some(&Token::Comma) {
                    break;
                }
                k += 1;
            }
        }
        let nonblock: Vec<Token> = match (word(k), word(k + 1)) {
            (Keyword::NOWAIT, _) => vec![Token::make_keyword("NOWAIT")],
            (Keyword::SKIP, Keyword::LOCKED) => {
                vec![Token::make_keyword("SKIP"), Token::make_keyword("LOCKED")]
            }
            _ => Vec::new(),
        };
        let end = significant
            .get(k + nonblock.len())
            .copied()
            .unwrap_or(tokens.len());
        if mark.is_none() && names.len() <= 1 {
            at = end;
            continue;
        }
        let span = tokens[at].span;
        let strength = match strength {
            Keyword::UPDATE => "UPDATE",
            _ => "SHARE",
        };
        let mut clauses: Vec<Token> = Vec::new();
        let names = if names.is_empty() {
            vec![Vec::new()]
        } else {
            names
        };
        for name in names {
            clauses.push(Token::make_keyword("FOR"));
            clauses.push(Token::make_keyword(strength));
            if mark.is_some() || !name.is_empty() {
                clauses.push(Token::make_keyword("OF"));
            }
            if let Some(mark) = mark {
                clauses.push(Token::make_word(mark, Some('"')));
                if !name.is_empty() {
                    clauses.push(Token::Period);
                }
            }
            clauses.extend(name);
            clauses.extend(nonblock.iter().cloned());
        }
        let written = clauses.len();
        tokens.splice(
            at..end,
            clauses
                .into_iter()
                .map(|token| TokenWithSpan { token, span }),
        );
        at += written;
    }
}

/// Parses the statements of `tokens`, a text that [`check_depth`] found
/// nests at most `depth` levels.
fn parse_tokens(
    dialect: &PostgreSqlDialect,
    tokens: &[TokenWithSpan],
    depth: usize,
) -> Result<Vec<Parsed>, SqlError> {
    // Each statement is parsed from its own tokens, up to its `;`: a
    // parser given the rest of the text would, after `COPY … FROM STDIN`,
    // take that rest as inline data (psql's script form), and here the
    // data comes from the statement's input.
    let mut parsed = Vec::new();
    let is_blank = |t: &TokenWithSpan| matches!(t.token, Token::Whitespace(_));
    for piece in tokens.split(|t| t.token == Token::SemiColon) {
        let Some(first) = piece.iter().find(|t| !is_blank(t)) else {
            continue;
        };
        let number = parsed.len() + 1;
        let syntax = |message: String| SqlError::Syntax {
            statement: number,
            message,
        };
        // VACUUM ANALYZE: parsed as the VACUUM it also is.
        let words: Vec<(usize, &TokenWithSpan)> = piece
            .iter()
            .enumerate()
            .filter(|(_, t)| !is_blank(t))
            .take(2)
            .collect();
        let is_word = |t: &TokenWithSpan, w: &[&str]| matches!(&t.token, Token::Word(x) if w.iter().any(|w| x.value.eq_ignore_ascii_case(w)));
        let vacuum_analyze = match words[..] {
            [(_, v), (at, a)] if is_word(v, &["vacuum"]) && is_word(a, &["analyze", "analyse"]) => {
                Some(at)
            }
            _ => None,
        };
        // CREATE USER: PostgreSQL's CREATE ROLE … LOGIN, which `sqlparser`
        // parses as another dialect's CREATE USER; parsed as the CREATE
        // ROLE it is, LOGIN added below.
        let create_user = match words[..] {
            [(_, c), (at, u)] if is_word(c, &["create"]) && is_word(u, &["user"]) => Some(at),
            _ => None,
        };
        let mut tokens = piece.to_vec();
        if let Some(at) = vacuum_analyze {
            tokens.remove(at);
        }
        if is_word(first, &["copy"]) {
            spell_copy_booleans(&mut tokens);
        }
        if let Some(at) = create_user {
            tokens[at].token = Token::make_keyword("ROLE");
        }
        rewrite_locking_clauses(&mut tokens);
        let mut parser = Parser::new(dialect)
            .with_recursion_limit(MAX_PARSER_RECURSION)
            .with_tokens_with_locations(tokens);
        let statement = match &first.token {
            Token::Word(w) if w.value.eq_ignore_ascii_case("checkpoint") => {
                parser.next_token();
                Stmt::Checkpoint
            }
            _ => {
                let statement = parser.parse_statement().map_err(|e| match e {
                    ParserError::RecursionLimitExceeded => SqlError::TooDeep {
                        statement: number,
                        at: position(first),
                        limit: MAX_PARSER_RECURSION,
                        what: "levels of prefix operators, calls and subexpressions",
                    },
                    e => syntax(format!("{e} (the statement starts at {})", position(first))),
                })?;
                match (vacuum_analyze, statement) {
                    (Some(_), statement) => Stmt::VacuumAnalyze(Box::new(statement)),
                    (None, Statement::CreateRole(mut role)) if create_user.is_some() => {
                        role.login.get_or_insert(true);
                        Stmt::Ast(Box::new(Statement::CreateRole(role)))
                    }
                    (None, statement) => Stmt::Ast(Box::new(statement)),
                }
            }
        };
        let next = parser.peek_token();
        if next.token != Token::EOF {
            return Err(syntax(format!(
                "expected ; or the end of the text, found \"{}\" at {}",
                next.token,
                position(&next)
            )));
        }
        parsed.push(Parsed {
            number,
            start: position(first),
            statement,
            depth,
        });
    }
    Ok(parsed)
}

/// Byte offset of (1-based) `line`, `column` in `text` (for counting the
/// statements before a tokenizer error).
fn offset_of(text: &str, line: u64, column: u64) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i as u64 + 1 == line {
            return offset
                + l.char_indices()
                    .nth(column.saturating_sub(1) as usize)
                    .map_or(l.len(), |(at, _)| at);
        }
        offset += l.len();
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_numbered_and_checkpoint_is_recognised() {
        let parsed = parse("SELECT 1;\n\n  checkpoint ; ; SELECT 2").unwrap();
        assert_eq!(parsed.len(), 3);
        assert!(matches!(parsed[1].statement, Stmt::Checkpoint));
        assert_eq!(parsed[1].start, Position { line: 3, column: 3 });
        assert_eq!(parsed[2].number, 3);
    }

    #[test]
    fn syntax_errors_name_the_statement() {
        let Err(SqlError::Syntax { statement, message }) = parse("SELECT 1; SELEC 2") else {
            panic!("expected a syntax error")
        };
        assert_eq!(statement, 2);
        assert!(message.contains("SELEC"), "{message}");
        let Err(SqlError::Syntax { statement, .. }) = parse("SELECT 1; SELECT 'unterminated")
        else {
            panic!("expected a syntax error")
        };
        assert_eq!(statement, 2);
        assert!(matches!(parse("SELECT 1 2"), Err(SqlError::Syntax { .. })));
    }

    #[test]
    fn long_operator_chains_are_refused_before_parsing() {
        let ok = format!("SELECT 1{}", "+1".repeat(MAX_OPERATOR_DEPTH));
        assert!(parse(&ok).is_ok());
        let deep = format!("SELECT 1{}", "+1".repeat(100_000));
        assert!(matches!(
            parse(&deep),
            Err(SqlError::TooDeep { statement: 1, .. })
        ));
        // Parentheses do not reset the count, commas do.
        let nested = format!("SELECT {}1{}", "(1+".repeat(20), ")".repeat(20));
        assert!(parse(&nested).is_ok());
        let list = format!("SELECT {}", vec!["1+1+1"; 1000].join(", "));
        assert!(parse(&list).is_ok());
        let chained = format!(
            "SELECT ({})+({})",
            "1+".repeat(300) + "1",
            "1+".repeat(300) + "1"
        );
        assert!(parse(&chained).is_ok(), "each parenthesis closes its chain");
        let stacked = format!("SELECT {}({})", "1+".repeat(300), "1+".repeat(300) + "1");
        assert!(matches!(parse(&stacked), Err(SqlError::TooDeep { .. })));
    }

    #[test]
    fn a_nul_character_in_a_literal_is_refused_however_written() {
        for text in [
            "SELECT E'a\\x00b'",
            "SELECT E'\\0'",
            "SELECT E'\\000'",
            "SELECT 'raw\0nul'",
            "SELECT $$\0$$",
            "SELECT 1; SELECT 'x' || E'\\x00'",
        ] {
            assert!(
                matches!(parse(text), Err(SqlError::NulInText { .. })),
                "{text:?}: {:?}",
                parse(text).err()
            );
        }
        // A code point escape for NUL: PostgreSQL's own message.
        for text in ["SELECT U&'\\0000'", "SELECT E'\\u0000'"] {
            assert!(
                matches!(parse(text), Err(SqlError::NulUnicodeEscape { .. })),
                "{text:?}: {:?}",
                parse(text).err()
            );
        }
        assert!(parse("SELECT E'\\x01', '\\0', E'\\\\0'").is_ok());
    }

    #[test]
    fn nesting_up_to_the_bound_parses_and_deeper_is_refused_before_parsing() {
        let n = MAX_NESTING_DEPTH;
        for (open, close) in [("(", ")"), ("CASE WHEN true THEN ", " END"), ("abs(", ")")] {
            let ok = format!("SELECT {}1{}", open.repeat(n), close.repeat(n));
            assert!(parse(&ok).is_ok(), "{open}: {:?}", parse(&ok).err());
            let deep = format!("SELECT {}1{}", open.repeat(n + 1), close.repeat(n + 1));
            assert!(
                matches!(parse(&deep), Err(SqlError::TooDeep { limit, .. }) if limit == n),
                "{open}"
            );
        }
        // The branches of a CASE are separate expressions, as list items.
        let branches = (0..1000)
            .map(|i| format!("WHEN x = {i} THEN {i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(parse(&format!("SELECT CASE {branches} END FROM t")).is_ok());
        // Prefix operators nest as parentheses do.
        let ok = format!("SELECT {}1", "- ".repeat(n));
        assert!(parse(&ok).is_ok());
        let negations = format!("SELECT {}1", "- ".repeat(n + 1));
        assert!(matches!(
            parse(&negations),
            Err(SqlError::TooDeep { limit, .. }) if limit == n
        ));
        // An infix operator ends the prefix operators of its left
        // operand: they do not add up along a chain.
        let terms = format!("SELECT {}", vec!["- - 1"; 500].join(" + "));
        assert!(parse(&terms).is_ok());
    }
}

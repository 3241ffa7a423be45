//! Splitting a text into statements and parsing them, keeping each
//! statement's number and position for error messages.
//!
//! The text is tokenized once; before parsing, a pass over the tokens
//! bounds how deeply expressions can nest, so that no walk of a syntax
//! tree (the planner, the evaluator, printing it in a message, or just
//! dropping it) can overflow the stack. Trees get deep in two ways:
//!
//! - By recursion in `sqlparser`: parentheses, prefix operators (`- - 1`,
//!   `NOT NOT x`), function arguments, CASE, CAST, subqueries. Its
//!   recursion counter bounds these; we set it to
//!   [`MAX_PARSER_RECURSION`] and report running out as "stack depth
//!   limit exceeded".
//! - Without recursion: a chain of infix or postfix operators such as
//!   `1+1+1+…`, `1 ^ 1 ^ …`, `x::int::int…` becomes a left-deep tree
//!   built in a loop, so its depth is bounded only here, by counting the
//!   operators of the chains open at each point (every operator token and
//!   operator keyword counts, not a chosen few).
//!
//! Together they bound every tree's depth by about
//! `MAX_OPERATOR_DEPTH + MAX_PARSER_RECURSION`.
//!
//! `CHECKPOINT` is handled here: `sqlparser` does not know it.

use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::{Position, SqlError};

/// Most operators one expression may chain (summed over the enclosing
/// parentheses): deep enough for any hand-written query, shallow enough
/// that walking the tree stays within a 2 MiB thread stack in an
/// optimised build (the tests' `opt-level = 1` included). An unoptimised
/// build's planner takes about 11 KiB per level, so the deepest
/// expression allowed needs about 6 MiB there: within a main thread's
/// 8 MiB, not within a 2 MiB thread.
pub const MAX_OPERATOR_DEPTH: usize = 512;

/// How deeply `sqlparser` may recurse (its counter is decremented per
/// nested expression, query and statement). `sqlparser`'s own default:
/// its frames are large in a debug build, and 50 levels stay well within
/// a 2 MiB thread stack.
pub const MAX_PARSER_RECURSION: usize = 50;

/// Parser recursion a statement takes before its expressions (statement,
/// query, select item), measured.
const PARSER_LEVELS_PER_STATEMENT: usize = 4;

/// Parser recursion one level of parentheses or CASE can take: two when
/// it is an operand (`1 + (…)`: the operand, then the parenthesized
/// expression), measured.
const PARSER_LEVELS_PER_NESTING: usize = 2;

/// Most levels of parentheses, brackets and CASE one statement may open,
/// checked before parsing so that the parser never reaches
/// [`MAX_PARSER_RECURSION`] inside them: where it does inside CASE, it
/// retries `case` as a column name and reports a confusing syntax error
/// instead of running out of depth.
pub const MAX_NESTING_DEPTH: usize =
    (MAX_PARSER_RECURSION - PARSER_LEVELS_PER_STATEMENT) / PARSER_LEVELS_PER_NESTING;

/// A statement of the text.
pub(crate) struct Parsed {
    /// 1-based.
    pub number: usize,
    /// Where its first token is.
    pub start: Position,
    pub statement: Stmt,
}

pub(crate) enum Stmt {
    Ast(Box<Statement>),
    Checkpoint,
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

/// An open level of nesting and the operators of its current chain.
struct Level {
    opener: Opener,
    operators: usize,
}

/// Refuses expressions deeper than [`MAX_OPERATOR_DEPTH`] operators or
/// [`MAX_NESTING_DEPTH`] levels (see the module comment).
fn check_depth(tokens: &[TokenWithSpan]) -> Result<(), SqlError> {
    let statement_level = || Level {
        opener: Opener::Statement,
        operators: 0,
    };
    let mut levels: Vec<Level> = vec![statement_level()];
    // Operators of the chains open at this point, summed over `levels`.
    let mut depth = 0usize;
    let mut statement = 1;
    let too_deep = |statement, t: &TokenWithSpan, limit, what| SqlError::TooDeep {
        statement,
        at: position(t),
        limit,
        what,
    };
    let is_keyword = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k);
    for t in tokens {
        let top = levels.last().map(|l| &l.opener);
        match &t.token {
            Token::LParen | Token::LBracket => levels.push(Level {
                opener: Opener::Bracket,
                operators: 0,
            }),
            token if is_keyword(token, Keyword::CASE) => levels.push(Level {
                opener: Opener::Case,
                operators: 0,
            }),
            Token::RParen | Token::RBracket if top == Some(&Opener::Bracket) => {
                depth -= levels.pop().map_or(0, |l| l.operators);
            }
            token if is_keyword(token, Keyword::END) && top == Some(&Opener::Case) => {
                depth -= levels.pop().map_or(0, |l| l.operators);
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
                    depth -= top.operators;
                    top.operators = 0;
                }
            }
            Token::SemiColon => {
                levels.clear();
                levels.push(statement_level());
                depth = 0;
                statement += 1;
            }
            token if is_operator(token) => {
                if let Some(top) = levels.last_mut() {
                    top.operators += 1;
                }
                depth += 1;
                if depth > MAX_OPERATOR_DEPTH {
                    return Err(too_deep(statement, t, MAX_OPERATOR_DEPTH, "operators"));
                }
            }
            _ => {}
        }
        // The statement's own level is not nesting.
        if levels.len() - 1 > MAX_NESTING_DEPTH {
            return Err(too_deep(
                statement,
                t,
                MAX_NESTING_DEPTH,
                "levels of parentheses and CASE",
            ));
        }
    }
    Ok(())
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

/// Whether `text` starts with an escaped string literal (`E'…'`) one of
/// whose escapes stands for NUL: `\0` to `\000` (octal, PostgreSQL
/// keeping the low byte), `\x0`/`\x00`, `\u0000`, `\U00000000`.
fn escaped_literal_has_nul(text: &str) -> bool {
    let Some(body) = text.strip_prefix("E'").or_else(|| text.strip_prefix("e'")) else {
        return false;
    };
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
            b'\'' => return false,
            b'\\' => {
                let (value, n) = match bytes.get(i + 1) {
                    Some(b'0'..=b'7') => digits(i + 1, 3, 8),
                    Some(b'x') => digits(i + 2, 2, 16),
                    Some(b'u') => digits(i + 2, 4, 16),
                    Some(b'U') => digits(i + 2, 8, 16),
                    _ => (1, 0),
                };
                if n > 0 && value & 0xFF == 0 && (value == 0 || bytes[i + 1].is_ascii_digit()) {
                    return true;
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    false
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
            return Err(SqlError::NulInText {
                statement,
                at: position(t),
            });
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
            if escaped_literal_has_nul(&text[offset..]) {
                return SqlError::NulInText {
                    statement,
                    at: Position {
                        line: e.location.line,
                        column: e.location.column,
                    },
                };
            }
            SqlError::Syntax {
                statement,
                message: e.to_string(),
            }
        })?;
    check_depth(&tokens)?;
    check_no_nul(&tokens)?;
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
        let mut parser = Parser::new(&dialect)
            .with_recursion_limit(MAX_PARSER_RECURSION)
            .with_tokens_with_locations(piece.to_vec());
        let statement = match &first.token {
            Token::Word(w) if w.value.eq_ignore_ascii_case("checkpoint") => {
                parser.next_token();
                Stmt::Checkpoint
            }
            _ => Stmt::Ast(Box::new(parser.parse_statement().map_err(|e| match e {
                ParserError::RecursionLimitExceeded => SqlError::TooDeep {
                    statement: number,
                    at: position(first),
                    limit: MAX_PARSER_RECURSION,
                    what: "levels of prefix operators, calls and subexpressions",
                },
                e => syntax(format!("{e} (the statement starts at {})", position(first))),
            })?)),
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
            "SELECT U&'\\0000'",
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
        assert!(parse("SELECT E'\\x01', '\\0', E'\\\\0'").is_ok());
    }

    #[test]
    fn nesting_up_to_the_bound_parses_and_deeper_is_refused_before_parsing() {
        let n = MAX_NESTING_DEPTH;
        for (open, close) in [
            ("1 + (", ")"),
            ("CASE WHEN true THEN ", " END"),
            ("abs(", ")"),
        ] {
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
        // Prefix operators recurse in the parser; running out of its
        // depth is the same error.
        let negations = format!("SELECT {}1", "- ".repeat(MAX_PARSER_RECURSION));
        assert!(matches!(
            parse(&negations),
            Err(SqlError::TooDeep {
                limit: MAX_PARSER_RECURSION,
                ..
            })
        ));
    }
}

//! Splitting a text into statements and parsing them, keeping each
//! statement's number and position for error messages.
//!
//! The text is tokenized once; before parsing, a pass over the tokens
//! bounds how deeply expressions can nest. `sqlparser` limits nesting by
//! parentheses, but a chain such as `1+1+1+…` becomes a left-deep tree
//! without recursion in the parser, and a tree tens of thousands deep
//! overflows the stack of whoever walks it (the planner, the evaluator, or
//! just dropping it). Counting the operators of the chains open at each
//! point keeps every walk shallow.
//!
//! `CHECKPOINT` is handled here: `sqlparser` does not know it.

use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::{Position, SqlError};

/// Most operators one expression may chain (summed over the enclosing
/// parentheses): deep enough for any hand-written query, shallow enough
/// that walking the tree stays far from the end of a 2 MiB thread stack.
pub const MAX_OPERATOR_DEPTH: usize = 512;

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

fn is_operator(t: &Token) -> bool {
    match t {
        Token::Plus
        | Token::Minus
        | Token::Mul
        | Token::Div
        | Token::Mod
        | Token::StringConcat
        | Token::Eq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::DoubleColon => true,
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::NOT
                | Keyword::IS
                | Keyword::IN
                | Keyword::BETWEEN
                | Keyword::LIKE
        ),
        _ => false,
    }
}

/// Refuses expressions deeper than [`MAX_OPERATOR_DEPTH`] (see the module
/// comment). `statement` counts `;`s, for the message.
fn check_depth(tokens: &[TokenWithSpan]) -> Result<(), SqlError> {
    // Operators in the current chain of each open parenthesis level.
    let mut chains: Vec<usize> = vec![0];
    let mut depth = 0usize;
    let mut statement = 1;
    for t in tokens {
        match &t.token {
            Token::LParen | Token::LBracket => chains.push(0),
            Token::RParen | Token::RBracket if chains.len() > 1 => {
                depth -= chains.pop().unwrap_or(0);
            }
            Token::Comma => {
                if let Some(top) = chains.last_mut() {
                    depth -= *top;
                    *top = 0;
                }
            }
            Token::SemiColon => {
                chains.clear();
                chains.push(0);
                depth = 0;
                statement += 1;
            }
            token if is_operator(token) => {
                if let Some(top) = chains.last_mut() {
                    *top += 1;
                }
                depth += 1;
                if depth > MAX_OPERATOR_DEPTH {
                    return Err(SqlError::TooDeep {
                        statement,
                        at: position(t),
                        limit: MAX_OPERATOR_DEPTH,
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Parses every statement of `text`.
pub(crate) fn parse(text: &str) -> Result<Vec<Parsed>, SqlError> {
    let dialect = PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| SqlError::Syntax {
            statement: 1 + text[..text.len().min(offset_of(
                text,
                e.location.line,
                e.location.column,
            ))]
                .matches(';')
                .count(),
            message: e.to_string(),
        })?;
    check_depth(&tokens)?;
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
        let mut parser = Parser::new(&dialect).with_tokens_with_locations(piece.to_vec());
        let statement = match &first.token {
            Token::Word(w) if w.value.eq_ignore_ascii_case("checkpoint") => {
                parser.next_token();
                Stmt::Checkpoint
            }
            _ => Stmt::Ast(Box::new(parser.parse_statement().map_err(|e| {
                syntax(format!("{e} (the statement starts at {})", position(first)))
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
}

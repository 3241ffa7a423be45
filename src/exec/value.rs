//! Operations on values that belong to evaluating SQL rather than to the
//! values' types: the truth a WHERE clause keeps, and LIKE. Ordering,
//! casts and text forms are the `types` layer's ([`crate::types`]).

use super::ExecError;
use crate::types::Value;

/// True if `v` is boolean true (WHERE keeps only such rows).
pub fn is_true(v: &Value) -> bool {
    matches!(v, Value::Boolean(true))
}

/// An element of a LIKE pattern.
#[derive(Clone, Copy, PartialEq)]
enum LikeToken {
    /// `%`
    Any,
    /// `_`
    One,
    Char(char),
}

/// The pattern element starting at byte `at` of `pattern`, and the byte
/// where the next one starts; `None` at the end (or at a trailing escape,
/// which [`like_match`] refuses first).
fn like_token(pattern: &str, at: usize) -> Option<(LikeToken, usize)> {
    let mut chars = pattern.get(at..)?.chars();
    let token = match chars.next()? {
        '%' => LikeToken::Any,
        '_' => LikeToken::One,
        '\\' => LikeToken::Char(chars.next()?),
        c => LikeToken::Char(c),
    };
    Some((token, pattern.len() - chars.as_str().len()))
}

/// SQL LIKE: `%` matches any run of characters, `_` exactly one, `\`
/// takes the next pattern character literally. Backtracks only to the
/// last `%`, so it runs in O(len(s) × len(p)) without recursion, and it
/// walks both strings in place: a WHERE clause allocates nothing per row.
pub fn like_match(s: &str, pattern: &str) -> Result<bool, ExecError> {
    // Refused even where matching would stop before it, so that the
    // answer does not depend on the data.
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.next().is_none() {
            return Err(ExecError::LikeEscape);
        }
    }
    let char_len = |at: usize| s[at..].chars().next().map_or(0, char::len_utf8);
    // Byte offsets into s and pattern.
    let (mut si, mut pi) = (0usize, 0usize);
    // After the last %: where its pattern continues, and where in s the
    // run it swallows ends.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let c_len = char_len(si);
        match like_token(pattern, pi) {
            Some((LikeToken::Any, next)) => {
                star = Some((next, si));
                pi = next;
            }
            Some((LikeToken::One, next)) => {
                si += c_len;
                pi = next;
            }
            Some((LikeToken::Char(c), next)) if s[si..].starts_with(c) => {
                si += c_len;
                pi = next;
            }
            _ => match star {
                Some((after_star, swallowed)) => {
                    // Let the % swallow one more character and retry.
                    let swallowed = swallowed + char_len(swallowed);
                    star = Some((after_star, swallowed));
                    pi = after_star;
                    si = swallowed;
                }
                None => return Ok(false),
            },
        }
    }
    while let Some((token, next)) = like_token(pattern, pi) {
        if token != LikeToken::Any {
            return Ok(false);
        }
        pi = next;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_matches_runs_and_single_characters() {
        for (s, p, want) in [
            ("abc", "a%", true),
            ("abc", "%c", true),
            ("abc", "a_c", true),
            ("abc", "a_", false),
            ("", "%", true),
            ("a%c", "a\\%c", true),
            ("abc", "a\\%c", false),
            ("aXbXc", "%b%c", true),
            ("mississippi", "%iss%pi", true),
            ("mississippi", "%iss%px", false),
            ("ünï", "_n_", true),
        ] {
            assert_eq!(like_match(s, p).unwrap(), want, "{s:?} LIKE {p:?}");
        }
        assert!(like_match("a", "a\\").is_err());
        assert!(like_match("x", "a\\").is_err(), "refused before matching");
    }

    /// LIKE by its definition, trying every split at each `%`.
    fn like_reference(s: &[char], p: &[char]) -> bool {
        match p {
            [] => s.is_empty(),
            ['%', rest @ ..] => (0..=s.len()).any(|k| like_reference(&s[k..], rest)),
            ['_', rest @ ..] => !s.is_empty() && like_reference(&s[1..], rest),
            ['\\', c, rest @ ..] | [c, rest @ ..] => {
                s.first() == Some(c) && like_reference(&s[1..], rest)
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn like_agrees_with_its_definition(s in "[abü%]{0,8}", p in "[abü%_\\\\]{0,8}") {
            let chars = |x: &str| x.chars().collect::<Vec<_>>();
            match like_match(&s, &p) {
                Ok(got) => proptest::prop_assert_eq!(got, like_reference(&chars(&s), &chars(&p))),
                Err(_) => proptest::prop_assert!(p.ends_with('\\')),
            }
        }
    }
}

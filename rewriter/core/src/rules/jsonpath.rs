//! The JSONPath subset (RFC 9535) used for field locations: `$`, `.name`, `['name']`,
//! `["name"]`, `[*]` and `.*`.
//!
//! Locations are compiled into the streaming plan at load time. A general JSONPath engine
//! (jsonpath-rust) evaluates queries over an in-memory `Value`; the rewriter never builds one for
//! the objects it streams, so only the parser is needed, and filters or slices have no meaning
//! for a fixed field location. This parser accepts exactly the segments the plan can follow and
//! names the offending column otherwise.

/// One step of a location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// A member name.
    Name(String),
    /// Every member of an object or element of an array.
    Wildcard,
}

/// A parse error: 0-based character offset and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathError {
    /// Character offset in the expression.
    pub(crate) at: usize,
    /// What is wrong.
    pub(crate) msg: String,
}

/// Parses a location such as `$.spec.template.spec.tolerations[*].key`.
pub(crate) fn parse(expr: &str) -> Result<Vec<Segment>, PathError> {
    let chars: Vec<char> = expr.chars().collect();
    let err = |at: usize, msg: &str| PathError {
        at,
        msg: msg.to_owned(),
    };
    if chars.first() != Some(&'$') {
        return Err(err(0, "a location must start with `$`"));
    }
    let mut i = 1;
    let mut out = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'.') {
                    return Err(err(
                        i,
                        "descendant segments (`..`) are not supported in a field location",
                    ));
                }
                if chars.get(i) == Some(&'*') {
                    out.push(Segment::Wildcard);
                    i += 1;
                    continue;
                }
                let s = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '-') {
                    i += 1;
                }
                if s == i {
                    return Err(err(s, "expected a member name after `.`"));
                }
                out.push(Segment::Name(chars[s..i].iter().collect()));
            }
            '[' => {
                i += 1;
                match chars.get(i) {
                    Some('*') => {
                        i += 1;
                        out.push(Segment::Wildcard);
                    }
                    Some(&q @ ('\'' | '"')) => {
                        i += 1;
                        let mut name = String::new();
                        loop {
                            match chars.get(i) {
                                None => return Err(err(i, "unterminated quoted name")),
                                Some('\\') => {
                                    let Some(&c) = chars.get(i + 1) else {
                                        return Err(err(i, "unterminated escape"));
                                    };
                                    name.push(c);
                                    i += 2;
                                }
                                Some(&c) if c == q => {
                                    i += 1;
                                    break;
                                }
                                Some(&c) => {
                                    name.push(c);
                                    i += 1;
                                }
                            }
                        }
                        out.push(Segment::Name(name));
                    }
                    _ => return Err(err(i, "only `[*]` and quoted names are supported inside `[]`")),
                }
                if chars.get(i) != Some(&']') {
                    return Err(err(i, "expected `]`"));
                }
                i += 1;
            }
            _ => return Err(err(i, "expected `.` or `[`")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Segment::*;

    #[test]
    fn parses_the_subset() {
        assert_eq!(
            parse("$.spec['template'].x[*].y.*").unwrap(),
            vec![
                Name("spec".into()),
                Name("template".into()),
                Name("x".into()),
                Wildcard,
                Name("y".into()),
                Wildcard
            ]
        );
        assert_eq!(parse(r#"$["a.b"]"#).unwrap(), vec![Name("a.b".into())]);
        assert_eq!(parse("$").unwrap(), vec![]);
    }

    #[test]
    fn rejects_the_rest_with_a_column() {
        assert_eq!(parse("spec").unwrap_err().at, 0);
        assert_eq!(parse("$..a").unwrap_err().at, 2);
        assert_eq!(parse("$.a[0]").unwrap_err().at, 4);
        assert_eq!(parse("$.a[?@.x]").unwrap_err().at, 4);
        assert_eq!(parse("$.a['x'").unwrap_err().at, 7);
    }
}

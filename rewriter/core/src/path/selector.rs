//! Label and field selectors in query strings.
//!
//! Label selectors follow the grammar of Kubernetes' `labels.Parse` (`k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`, comma-separated). Unlike the Go
//! rewriter, which normalised the selector (sorted, `!=` turned into `notin`) and re-encoded the
//! whole query, only the keys and values that change are replaced; the rest of the text (spacing,
//! operators, order, percent-encoding) stays as the client sent it.
//!
//! Field selectors follow `fields.ParseSelector` (`lhs=v`, `lhs==v`, `lhs!=v`, comma-separated,
//! `\` escapes in values). Only a few fields are rewritten, see [`FieldScope`].

use super::query::{Decoded, query_escape};
use crate::rules::{Group, NameRules};
use crate::{Direction, Rules};

/// What a label selector token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenKind {
    Ident,
    In,
    NotIn,
    Comma,
    Eq,
    DoubleEq,
    NotEq,
    Not,
    LParen,
    RParen,
    Gt,
    Lt,
    End,
}

/// A token of a label selector: its kind and its byte span `a..b`.
#[derive(Debug, Clone, Copy)]
struct Token {
    k: TokenKind,
    a: usize,
    b: usize,
}

impl Token {
    /// An identifier where values are expected (`in`/`notin` are plain words there).
    fn is_value(&self) -> bool {
        matches!(self.k, TokenKind::Ident | TokenKind::In | TokenKind::NotIn)
    }
}

fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The Kubernetes selector lexer. `None` on a NUL byte (Go's lexer stops there).
fn lex(s: &[u8]) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < s.len() && is_ws(s[i]) {
            i += 1;
        }
        let Some(&c) = s.get(i) else {
            out.push(Token {
                k: TokenKind::End,
                a: i,
                b: i,
            });
            return Some(out);
        };
        let a = i;
        let k = if c == 0 {
            return None;
        } else if is_special(c) {
            let next = s.get(i + 1).copied();
            let (k, n) = match (c, next) {
                (b'!', Some(b'=')) => (TokenKind::NotEq, 2),
                (b'=', Some(b'=')) => (TokenKind::DoubleEq, 2),
                (b'!', _) => (TokenKind::Not, 1),
                (b'=', _) => (TokenKind::Eq, 1),
                (b'(', _) => (TokenKind::LParen, 1),
                (b')', _) => (TokenKind::RParen, 1),
                (b',', _) => (TokenKind::Comma, 1),
                (b'>', _) => (TokenKind::Gt, 1),
                _ => (TokenKind::Lt, 1),
            };
            i += n;
            k
        } else {
            while i < s.len() && !is_ws(s[i]) && !is_special(s[i]) && s[i] != 0 {
                i += 1;
            }
            match &s[a..i] {
                b"in" => TokenKind::In,
                b"notin" => TokenKind::NotIn,
                _ => TokenKind::Ident,
            }
        };
        out.push(Token { k, a, b: i });
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Exists,
    NotExists,
    /// `=`, `==`, `!=`: one value (possibly empty: then its span is empty, right after the operator).
    Exact,
    /// `in`, `notin`: the non-empty values in parentheses.
    Set,
    /// `>`, `<`: a number, never renamed.
    Cmp,
}

/// One requirement of a label selector (`key`, `key=value`, `key in (a,b)`, `!key`): byte spans.
#[derive(Debug, Clone)]
struct Requirement {
    key: (usize, usize),
    op: Op,
    values: Vec<(usize, usize)>,
}

/// Parses a label selector into requirements (decoded byte spans). `None` when Kubernetes would
/// reject the syntax.
fn parse_labels(s: &[u8]) -> Option<Vec<Requirement>> {
    let toks = lex(s)?;
    let t = |i: usize| toks.get(i).copied();
    let mut reqs = Vec::new();
    let mut i = 0;
    loop {
        let cur = t(i)?;
        match cur.k {
            TokenKind::End => return Some(reqs),
            TokenKind::Ident | TokenKind::In | TokenKind::NotIn | TokenKind::Not => {}
            _ => return None,
        }
        // [!]key
        let not = cur.k == TokenKind::Not;
        if not {
            i += 1;
        }
        let key = t(i)?;
        if !key.is_value() {
            return None;
        }
        i += 1;
        let next = t(i)?;
        let req = if matches!(next.k, TokenKind::End | TokenKind::Comma) {
            Requirement {
                key: (key.a, key.b),
                op: if not { Op::NotExists } else { Op::Exists },
                values: vec![],
            }
        } else if not {
            return None;
        } else {
            i += 1;
            match next.k {
                TokenKind::In | TokenKind::NotIn => {
                    if t(i)?.k != TokenKind::LParen {
                        return None;
                    }
                    i += 1;
                    let mut values = Vec::new();
                    // Identifiers and commas up to `)`; empty entries (`(,a)`, `()`) are allowed.
                    let mut want_value = true;
                    loop {
                        let v = t(i)?;
                        i += 1;
                        match v.k {
                            TokenKind::RParen => break,
                            TokenKind::Comma => want_value = true,
                            _ if v.is_value() && want_value => {
                                values.push((v.a, v.b));
                                want_value = false;
                            }
                            _ => return None,
                        }
                    }
                    Requirement {
                        key: (key.a, key.b),
                        op: Op::Set,
                        values,
                    }
                }
                TokenKind::Eq | TokenKind::DoubleEq | TokenKind::NotEq | TokenKind::Gt | TokenKind::Lt => {
                    let op = if matches!(next.k, TokenKind::Gt | TokenKind::Lt) {
                        Op::Cmp
                    } else {
                        Op::Exact
                    };
                    let v = t(i)?;
                    let value = if matches!(v.k, TokenKind::End | TokenKind::Comma) {
                        (next.b, next.b)
                    } else if v.is_value() {
                        i += 1;
                        (v.a, v.b)
                    } else {
                        return None;
                    };
                    Requirement {
                        key: (key.a, key.b),
                        op,
                        values: vec![value],
                    }
                }
                _ => return None,
            }
        };
        reqs.push(req);
        match t(i)?.k {
            TokenKind::End => return Some(reqs),
            TokenKind::Comma => {
                i += 1;
                let n = t(i)?;
                if !(n.is_value() || n.k == TokenKind::Not) {
                    return None;
                }
            }
            _ => return None,
        }
    }
}

/// The replacements (decoded spans → new decoded text) for a label selector.
fn label_replacements(
    labels: &NameRules,
    dir: Direction,
    d: &Decoded,
) -> Option<Vec<((usize, usize), String)>> {
    let reqs = parse_labels(&d.bytes)?;
    let mut out = Vec::new();
    for r in reqs {
        let key = d.text(r.key.0, r.key.1)?;
        let values: Vec<String> = match r.op {
            Op::Exact | Op::Set => r
                .values
                .iter()
                .map(|&(a, b)| d.text(a, b).map(str::to_owned))
                .collect::<Option<_>>()?,
            Op::Exists | Op::NotExists | Op::Cmp => Vec::new(),
        };
        let (new_key, new_values) = labels.rewrite_requirement(dir, key, &values);
        if new_key != key {
            out.push((r.key, new_key));
        }
        for ((span, old), new) in r.values.iter().zip(&values).zip(new_values) {
            if *old != new {
                out.push((*span, new));
            }
        }
    }
    Some(out)
}

/// Rewrites a (decoded) label selector with the label rules, keeping its syntax and order.
/// `None` when nothing changes or the selector does not parse.
///
/// ```
/// use kube_api_rewriter::{Direction, Rules, path::rewrite_label_selector};
/// let rules = Rules::builtin_kubevirt();
/// let s = rewrite_label_selector(rules.labels(), Direction::Rename, "kubevirt.io/created-by!=x, tier");
/// assert_eq!(s.as_deref(), Some("kubevirt.internal.virtualization.deckhouse.io/created-by!=x, tier"));
/// ```
pub fn rewrite_label_selector(labels: &NameRules, dir: Direction, selector: &str) -> Option<String> {
    let d = Decoded::plain(selector);
    let repl = label_replacements(labels, dir, &d)?;
    if repl.is_empty() {
        None
    } else {
        d.splice(selector, repl)
    }
}

/// Rewrites the raw (percent-encoded) value of a `labelSelector` query parameter. Only changed
/// keys and values are re-encoded. `None` when nothing changes, the value has an invalid escape,
/// or the selector does not parse.
pub(super) fn rewrite_label_selector_query(labels: &NameRules, dir: Direction, raw: &str) -> Option<String> {
    let d = Decoded::form(raw)?;
    let repl = label_replacements(labels, dir, &d)?;
    let repl: Vec<_> = repl.into_iter().map(|(s, t)| (s, query_escape(&t))).collect();
    if repl.is_empty() {
        None
    } else {
        d.splice(raw, repl)
    }
}

/// Which fields of a `fieldSelector` are rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FieldScope {
    /// CRD lists: `metadata.name=<plural>.<group>`.
    Crd,
    /// Core events: `involvedObject.kind`, `involvedObject.apiVersion`.
    CoreEvents,
    /// `events.k8s.io` events: as core, plus `regarding.kind`, `regarding.apiVersion`.
    Events,
}

#[derive(Debug)]
struct Term<'a> {
    lhs: &'a str,
    /// True for `=`/`==`, false for `!=`.
    positive: bool,
    value: String,
    span: (usize, usize),
}

/// Splits a field selector like `fields.ParseSelector`. `None` when Kubernetes would reject it.
fn parse_fields(d: &Decoded) -> Option<Vec<Term<'_>>> {
    let s = &d.bytes;
    let mut ranges = Vec::new();
    let (mut start, mut slash) = (0, false);
    for (i, &c) in s.iter().enumerate() {
        if slash {
            slash = false;
        } else if c == b'\\' {
            slash = true;
        } else if c == b',' {
            ranges.push((start, i));
            start = i + 1;
        }
    }
    ranges.push((start, s.len()));
    let mut terms = Vec::new();
    for (a, b) in ranges {
        if a == b {
            continue;
        }
        let (at, len, positive) = (a..b).find_map(|i| {
            let rest = &s[i..b];
            if rest.starts_with(b"!=") {
                Some((i, 2, false))
            } else if rest.starts_with(b"==") {
                Some((i, 2, true))
            } else if rest.starts_with(b"=") {
                Some((i, 1, true))
            } else {
                None
            }
        })?;
        let lhs = d.text(a, at)?;
        let value = unescape_value(d.text(at + len, b)?)?;
        terms.push(Term {
            lhs,
            positive,
            value,
            span: (at + len, b),
        });
    }
    Some(terms)
}

/// `fields.UnescapeValue`: `\\`, `\,`, `\=` are escapes; other escapes and bare `,`/`=` are errors.
fn unescape_value(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut slash = false;
    for c in s.chars() {
        if slash {
            if !matches!(c, '\\' | ',' | '=') {
                return None;
            }
            out.push(c);
            slash = false;
        } else {
            match c {
                '\\' => slash = true,
                ',' | '=' => return None,
                _ => out.push(c),
            }
        }
    }
    (!slash).then_some(out)
}

/// `fields.EscapeValue`.
fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Rewrites the raw value of a `fieldSelector` query parameter for `scope`. `None` when nothing
/// changes, the value has an invalid escape, or the selector does not parse.
pub(super) fn rewrite_field_selector_query(
    rules: &Rules,
    dir: Direction,
    scope: FieldScope,
    raw: &str,
) -> Option<String> {
    let d = Decoded::form(raw)?;
    let terms = parse_fields(&d)?;
    let mut repl: Vec<((usize, usize), String)> = Vec::new();
    let mut push = |t: &Term<'_>, new: Option<String>| {
        if let Some(new) = new
            && new != t.value
        {
            repl.push((t.span, query_escape(&escape_value(&new))));
        }
    };
    match scope {
        FieldScope::Crd => {
            for t in terms.iter().filter(|t| t.lhs == "metadata.name") {
                push(t, super::rewrite_crd_name(rules, dir, &t.value));
            }
        }
        FieldScope::CoreEvents | FieldScope::Events => {
            let objs: &[&str] = if scope == FieldScope::Events {
                &["involvedObject", "regarding"]
            } else {
                &["involvedObject"]
            };
            for obj in objs {
                let kind_field = format!("{obj}.kind");
                let av_field = format!("{obj}.apiVersion");
                let positive = |f: &str| {
                    terms
                        .iter()
                        .find(|t| t.lhs == f && t.positive)
                        .map(|t| t.value.as_str())
                };
                let (kind, av) = (positive(&kind_field), positive(&av_field));
                for t in &terms {
                    if t.lhs == kind_field {
                        push(t, rewrite_event_kind(rules, dir, &t.value, av));
                    } else if t.lhs == av_field {
                        push(
                            t,
                            match dir {
                                Direction::Rename => rules.rename_api_version(&t.value),
                                Direction::Restore => rules.restore_api_version(&t.value, kind),
                            },
                        );
                    }
                }
            }
        }
    }
    if repl.is_empty() {
        None
    } else {
        d.splice(raw, repl)
    }
}

/// The kind of an event's object: prefixed when it is a kind of a ruled group (the group of
/// `api_version` when the selector names one, else any ruled group), and back.
fn rewrite_event_kind(
    rules: &Rules,
    dir: Direction,
    kind: &str,
    api_version: Option<&str>,
) -> Option<String> {
    let group_of = |av: &str| av.split_once('/').map_or("", |(g, _)| g).to_owned();
    fn holds(k: &str) -> impl Fn(&Group) -> bool + '_ {
        move |g| g.resource_by_kind(k).is_some_and(|(_, list)| !list)
    }
    match dir {
        Direction::Rename => {
            let ok = match api_version {
                Some(av) => rules.group(&group_of(av)).is_some_and(holds(kind)),
                None => rules.groups().iter().any(holds(kind)),
            };
            ok.then(|| format!("{}{kind}", rules.kind_prefix))
        }
        Direction::Restore => {
            let stripped = kind.strip_prefix(rules.kind_prefix.as_str())?;
            let ok = match api_version {
                Some(av) => rules.groups_renamed_to(&group_of(av)).any(holds(stripped)),
                None => rules.groups().iter().any(holds(stripped)),
            };
            ok.then(|| stripped.to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rules;

    const MB: &str = "app.kubernetes.io/managed-by";

    #[test]
    fn label_selectors_rename_keep_syntax() {
        let rules = Rules::builtin_kubevirt();
        let r = |s: &str| rewrite_label_selector(&rules.labels, Direction::Rename, s);
        let kv = "kubevirt.internal.virtualization.deckhouse.io";
        let cases: &[(&str, Option<String>)] = &[
            ("kubevirt.io/created-by=x", Some(format!("{kv}/created-by=x"))),
            ("kubevirt.io/created-by==x", Some(format!("{kv}/created-by==x"))),
            (
                "kubevirt.io/created-by != x",
                Some(format!("{kv}/created-by != x")),
            ),
            (
                "tier=a,kubevirt.io/x,!kubevirt.io/y",
                Some(format!("tier=a,{kv}/x,!{kv}/y")),
            ),
            ("kubevirt.io/x in (a,b)", Some(format!("{kv}/x in (a,b)"))),
            (
                "kubevirt.io/x notin ( a , b )",
                Some(format!("{kv}/x notin ( a , b )")),
            ),
            ("kubevirt.io/x in ()", Some(format!("{kv}/x in ()"))),
            ("kubevirt.io/x>3", Some(format!("{kv}/x>3"))),
            ("kubevirt.io", Some(kv.to_owned())),
            ("kubevirt.io=", Some(format!("{kv}="))),
            (
                &format!("{MB} in (virt-operator)"),
                Some(format!("{MB} in (virt-operator-internal-virtualization)")),
            ),
            (
                &format!("{MB} notin (helm, kubevirt-operator)"),
                Some(format!(
                    "{MB} notin (helm, kubevirt-operator-internal-virtualization)"
                )),
            ),
            (
                &format!("{MB}!=virt-operator"),
                Some(format!("{MB}!=virt-operator-internal-virtualization")),
            ),
            (&format!("{MB}=helm"), None),
            (
                "preserved-original-kubevirt.io/x=1",
                Some("kubevirt.io/x=1".to_owned()),
            ),
            ("tier=backend,app in (a)", None),
            ("", None),
            ("in=x", None),
            ("xkubevirt.io/a=1", None),
        ];
        for (input, want) in cases {
            assert_eq!(r(input).as_deref(), want.as_deref(), "{input:?}");
        }
    }

    #[test]
    fn label_selectors_restore() {
        let rules = Rules::builtin_kubevirt();
        let r = |s: &str| rewrite_label_selector(&rules.labels, Direction::Restore, s);
        let kv = "kubevirt.internal.virtualization.deckhouse.io";
        assert_eq!(
            r(&format!("{kv}/created-by=x,tier")).as_deref(),
            Some("kubevirt.io/created-by=x,tier")
        );
        assert_eq!(r(&format!("!{kv}/a")).as_deref(), Some("!kubevirt.io/a"));
        assert_eq!(
            r(&format!("{MB} in (virt-operator-internal-virtualization,x)")).as_deref(),
            Some(format!("{MB} in (virt-operator,x)").as_str())
        );
        // Original-looking keys on the server side are shown as preserved.
        assert_eq!(
            r("kubevirt.io/a=1").as_deref(),
            Some("preserved-original-kubevirt.io/a=1")
        );
    }

    #[test]
    fn unparseable_label_selectors_are_left_alone() {
        let rules = Rules::builtin_kubevirt();
        for s in [
            "kubevirt.io/x=a=b",
            "kubevirt.io/x in (a",
            "kubevirt.io/x in a",
            "kubevirt.io/x,",
            ",kubevirt.io/x",
            "!kubevirt.io/x=1",
            "kubevirt.io/x in (a b)",
            "kubevirt.io/x\0",
            "=",
            "(",
            "kubevirt.io/x notin",
        ] {
            assert_eq!(
                rewrite_label_selector(&rules.labels, Direction::Rename, s),
                None,
                "{s:?}"
            );
        }
    }

    #[test]
    fn lexer_matches_kubernetes() {
        let kinds = |s: &str| lex(s.as_bytes()).unwrap().iter().map(|t| t.k).collect::<Vec<_>>();
        use TokenKind::*;
        assert_eq!(kinds("a!=b"), vec![Ident, NotEq, Ident, End]);
        assert_eq!(kinds("a==b"), vec![Ident, DoubleEq, Ident, End]);
        assert_eq!(
            kinds("!a,b in (c),d notin(e)"),
            vec![
                Not, Ident, Comma, Ident, In, LParen, Ident, RParen, Comma, Ident, NotIn, LParen, Ident,
                RParen, End
            ]
        );
        assert_eq!(kinds("a>=1"), vec![Ident, Gt, Eq, Ident, End]);
        assert_eq!(kinds(" \t"), vec![End]);
    }

    #[test]
    fn query_label_selectors_reencode_only_changes() {
        let rules = Rules::builtin_kubevirt();
        let r = |s: &str| rewrite_label_selector_query(&rules.labels, Direction::Rename, s);
        assert_eq!(
            r("kubevirt.io%2Fcreated-by%3Dx%2Ctier%3Dbackend").as_deref(),
            Some("kubevirt.internal.virtualization.deckhouse.io%2Fcreated-by%3Dx%2Ctier%3Dbackend")
        );
        // Raw separators and `+` spaces are kept where nothing changed.
        assert_eq!(
            r("tier=a,kubevirt.io/x+in+(a,b)").as_deref(),
            Some("tier=a,kubevirt.internal.virtualization.deckhouse.io%2Fx+in+(a,b)")
        );
        assert_eq!(r("tier%3Dbackend"), None);
        assert_eq!(r("kubevirt.io%2Fx%3D%zz"), None);
    }

    #[test]
    fn field_selector_parsing() {
        let d = Decoded::plain(r"a=b,c==d,e!=f\,g,,h=");
        let t = parse_fields(&d).unwrap();
        let got: Vec<_> = t.iter().map(|t| (t.lhs, t.positive, t.value.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("a", true, "b"),
                ("c", true, "d"),
                ("e", false, "f,g"),
                ("h", true, "")
            ]
        );
        assert!(parse_fields(&Decoded::plain("novalue")).is_none());
        assert!(parse_fields(&Decoded::plain("a=b=c")).is_none());
        assert!(parse_fields(&Decoded::plain(r"a=b\")).is_none());
        assert_eq!(escape_value(r"a,b=c\"), r"a\,b\=c\\");
    }

    #[test]
    fn crd_field_selectors() {
        let rules = Rules::builtin_kubevirt();
        let r = |d, s: &str| rewrite_field_selector_query(&rules, d, FieldScope::Crd, s);
        let ren = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
        for (op, raw_op) in [("=", "%3D"), ("=", "="), ("==", "%3D%3D"), ("!=", "!%3D")] {
            let input = format!("metadata.name{raw_op}virtualmachines.kubevirt.io");
            let want = format!("metadata.name{raw_op}{ren}");
            assert_eq!(
                r(Direction::Rename, &input).as_deref(),
                Some(want.as_str()),
                "{op}"
            );
            assert_eq!(
                r(Direction::Restore, &want).as_deref(),
                Some(input.as_str()),
                "{op}"
            );
        }
        assert_eq!(r(Direction::Rename, "metadata.name%3Dfoos.example.com"), None);
        assert_eq!(
            r(
                Direction::Rename,
                "metadata.name%3Dvirtualmachines.kubevirt.io%2Cx"
            ),
            None,
            "bad term"
        );
        assert_eq!(
            r(Direction::Restore, "metadata.name%3Dvirtualmachines.kubevirt.io"),
            None
        );
    }

    #[test]
    fn event_field_selectors() {
        let rules = Rules::builtin_kubevirt();
        let r = |d, sc, s: &str| rewrite_field_selector_query(&rules, d, sc, s);
        let cases = [
            (
                FieldScope::CoreEvents,
                "involvedObject.kind%3DVirtualMachine%2CinvolvedObject.name%3Dvm1",
                "involvedObject.kind%3DInternalVirtualizationVirtualMachine%2CinvolvedObject.name%3Dvm1",
            ),
            (
                FieldScope::CoreEvents,
                "involvedObject.apiVersion=kubevirt.io%2Fv1,involvedObject.kind=VirtualMachine",
                "involvedObject.apiVersion=internal.virtualization.deckhouse.io%2Fv1,\
                 involvedObject.kind=InternalVirtualizationVirtualMachine",
            ),
            (
                FieldScope::Events,
                "regarding.kind=VirtualMachineSnapshot,regarding.apiVersion=snapshot.kubevirt.io%2Fv1alpha1",
                "regarding.kind=InternalVirtualizationVirtualMachineSnapshot,\
                 regarding.apiVersion=snapshot.internal.virtualization.deckhouse.io%2Fv1alpha1",
            ),
            (
                FieldScope::CoreEvents,
                "involvedObject.kind!=VirtualMachineInstance",
                "involvedObject.kind!=InternalVirtualizationVirtualMachineInstance",
            ),
        ];
        for (scope, orig, renamed) in cases {
            assert_eq!(
                r(Direction::Rename, scope, orig).as_deref(),
                Some(renamed),
                "{orig}"
            );
            assert_eq!(
                r(Direction::Restore, scope, renamed).as_deref(),
                Some(orig),
                "{renamed}"
            );
        }
        for (scope, s) in [
            // Kinds of unruled groups, including same-named kinds of another group.
            (FieldScope::CoreEvents, "involvedObject.kind=Pod"),
            (
                FieldScope::CoreEvents,
                "involvedObject.kind=VirtualMachine,involvedObject.apiVersion=virtualization.deckhouse.io/v1alpha2",
            ),
            (FieldScope::CoreEvents, "involvedObject.kind=VirtualMachineList"),
            // `regarding` only exists on events.k8s.io.
            (FieldScope::CoreEvents, "regarding.kind=VirtualMachine"),
            (FieldScope::Crd, "involvedObject.kind=VirtualMachine"),
        ] {
            assert_eq!(r(Direction::Rename, scope, s), None, "{s}");
        }
        assert_eq!(
            r(
                Direction::Restore,
                FieldScope::CoreEvents,
                "involvedObject.kind=InternalVirtualizationPod"
            ),
            None
        );
    }
}

//! JSON string text: decoding the escapes of a string the scanner validated, and writing
//! strings with only the escapes JSON requires.

/// Decodes the escapes of a validated string body.
pub(crate) fn unescape(raw: &[u8]) -> Result<String, (usize, &'static str)> {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let Some(off) = memchr::memchr(b'\\', &raw[i..]) else {
            out.push_str(std::str::from_utf8(&raw[i..]).map_err(|_| (i, "invalid UTF-8 in string"))?);
            break;
        };
        out.push_str(std::str::from_utf8(&raw[i..i + off]).map_err(|_| (i, "invalid UTF-8 in string"))?);
        let j = i + off;
        let e = raw[j + 1];
        i = j + 2;
        let c = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => {
                let hi = hex4(&raw[j + 2..j + 6]);
                i = j + 6;
                if (0xD800..0xDC00).contains(&hi) {
                    if raw.get(i) != Some(&b'\\') || raw.get(i + 1) != Some(&b'u') || raw.len() < i + 6 {
                        return Err((j, "lone leading surrogate in \\u escape"));
                    }
                    let lo = hex4(&raw[i + 2..i + 6]);
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err((i, "invalid low surrogate in \\u escape"));
                    }
                    i += 6;
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    char::from_u32(c).ok_or((j, "invalid \\u escape"))?
                } else if (0xDC00..0xE000).contains(&hi) {
                    return Err((j, "lone trailing surrogate in \\u escape"));
                } else {
                    char::from_u32(hi).ok_or((j, "invalid \\u escape"))?
                }
            }
        };
        out.push(c);
    }
    Ok(out)
}

pub(crate) fn hex4(h: &[u8]) -> u32 {
    h.iter()
        .fold(0, |acc, &b| acc * 16 + (b as char).to_digit(16).unwrap_or(0))
}

/// Writes `s` as a JSON string (escaping only what JSON requires).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    escape_into(out, s);
    out.push(b'"');
}

/// True when `s` has a byte JSON strings escape (`"`, `\\`, control characters).
#[inline]
pub(crate) fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Appends `s` escaped for the inside of a JSON string (no quotes).
#[inline]
pub(crate) fn escape_into(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    if !needs_escape(s) {
        out.extend_from_slice(bytes);
        return;
    }
    let mut last = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&bytes[last..i]);
                out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                last = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[last..i]);
        out.extend_from_slice(esc);
        last = i + 1;
    }
    out.extend_from_slice(&bytes[last..]);
}

/// Returns `s` as a JSON string literal.
pub(crate) fn quote(s: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(s.len() + 2);
    write_str(&mut v, s);
    v
}

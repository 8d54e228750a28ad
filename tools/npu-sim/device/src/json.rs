//! Minimal JSON: writer helpers and a small parser (std only).
use std::collections::BTreeMap;
use std::fmt::Write;

pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A number: integers without a fraction, non-finite as null.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        "null".into()
    } else if v.fract() == 0.0 && v.abs() < 9e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{:.6e}", v);
        // prefer plain notation for moderate values
        if v.abs() >= 1e-4 && v.abs() < 1e9 {
            let t = format!("{:.6}", v);
            let t = t.trim_end_matches('0').trim_end_matches('.').to_string();
            return t;
        }
        s
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(BTreeMap<String, J>),
}

impl J {
    pub fn get(&self, k: &str) -> Option<&J> {
        match self {
            J::Obj(m) => m.get(k),
            _ => None,
        }
    }
    pub fn s(&self, k: &str) -> Option<&str> {
        match self.get(k) {
            Some(J::Str(s)) => Some(s),
            _ => None,
        }
    }
    pub fn n(&self, k: &str) -> Option<f64> {
        match self.get(k) {
            Some(J::Num(n)) => Some(*n),
            _ => None,
        }
    }
    pub fn b(&self, k: &str) -> Option<bool> {
        match self.get(k) {
            Some(J::Bool(b)) => Some(*b),
            _ => None,
        }
    }
    pub fn arr(&self, k: &str) -> &[J] {
        match self.get(k) {
            Some(J::Arr(a)) => a,
            _ => &[],
        }
    }
}

pub fn parse(s: &str) -> Result<J, String> {
    let b = s.as_bytes();
    let mut i = 0;
    let v = val(b, &mut i)?;
    ws(b, &mut i);
    if i != b.len() {
        return Err(format!("trailing characters at {}", i));
    }
    Ok(v)
}

fn ws(b: &[u8], i: &mut usize) {
    while *i < b.len() && (b[*i] as char).is_ascii_whitespace() {
        *i += 1;
    }
}

fn val(b: &[u8], i: &mut usize) -> Result<J, String> {
    ws(b, i);
    if *i >= b.len() {
        return Err("unexpected end".into());
    }
    match b[*i] {
        b'{' => {
            *i += 1;
            let mut m = BTreeMap::new();
            ws(b, i);
            if *i < b.len() && b[*i] == b'}' {
                *i += 1;
                return Ok(J::Obj(m));
            }
            loop {
                ws(b, i);
                let k = match val(b, i)? {
                    J::Str(s) => s,
                    _ => return Err("object key must be a string".into()),
                };
                ws(b, i);
                if *i >= b.len() || b[*i] != b':' {
                    return Err("expected ':'".into());
                }
                *i += 1;
                let v = val(b, i)?;
                m.insert(k, v);
                ws(b, i);
                if *i < b.len() && b[*i] == b',' {
                    *i += 1;
                } else if *i < b.len() && b[*i] == b'}' {
                    *i += 1;
                    return Ok(J::Obj(m));
                } else {
                    return Err("expected ',' or '}'".into());
                }
            }
        }
        b'[' => {
            *i += 1;
            let mut a = vec![];
            ws(b, i);
            if *i < b.len() && b[*i] == b']' {
                *i += 1;
                return Ok(J::Arr(a));
            }
            loop {
                a.push(val(b, i)?);
                ws(b, i);
                if *i < b.len() && b[*i] == b',' {
                    *i += 1;
                } else if *i < b.len() && b[*i] == b']' {
                    *i += 1;
                    return Ok(J::Arr(a));
                } else {
                    return Err("expected ',' or ']'".into());
                }
            }
        }
        b'"' => {
            *i += 1;
            let mut o: Vec<u8> = vec![];
            while *i < b.len() && b[*i] != b'"' {
                if b[*i] == b'\\' && *i + 1 < b.len() {
                    *i += 1;
                    match b[*i] {
                        b'n' => o.push(b'\n'),
                        b't' => o.push(b'\t'),
                        b'r' => o.push(b'\r'),
                        b'b' => o.push(8),
                        b'f' => o.push(12),
                        b'u' => {
                            let h = std::str::from_utf8(&b[*i + 1..(*i + 5).min(b.len())]).map_err(|_| "bad \\u")?;
                            let c = u32::from_str_radix(h, 16).map_err(|_| "bad \\u")?;
                            let ch = char::from_u32(c).unwrap_or('?');
                            let mut buf = [0u8; 4];
                            o.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            *i += 4;
                        }
                        c => o.push(c),
                    }
                } else {
                    o.push(b[*i]);
                }
                *i += 1;
            }
            *i += 1;
            Ok(J::Str(String::from_utf8_lossy(&o).into_owned()))
        }
        b't' if b[*i..].starts_with(b"true") => {
            *i += 4;
            Ok(J::Bool(true))
        }
        b'f' if b[*i..].starts_with(b"false") => {
            *i += 5;
            Ok(J::Bool(false))
        }
        b'n' if b[*i..].starts_with(b"null") => {
            *i += 4;
            Ok(J::Null)
        }
        _ => {
            let st = *i;
            while *i < b.len() && matches!(b[*i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                *i += 1;
            }
            let t = std::str::from_utf8(&b[st..*i]).unwrap();
            t.parse::<f64>().map(J::Num).map_err(|_| format!("bad value at {}", st))
        }
    }
}

//! The program a kernel's host code hands to the device: allocations, commands, waits and
//! orderings, each with the source location that issued it. It is plain data in one direction
//! (host → device); nothing the device computes flows back to the host code.
//!
//! Wire format (text, one op per line, fields separated by one space):
//!
//! ```text
//! npu-program 1
//! f <file-index> <escaped path>          a source file (spans name it by index)
//! <op> <file>:<line>:<col> <fields...>   one op (see `Op`)
//! end <ops>                              the host code returned; <ops> ops were sent
//! ```
//!
//! A program without its `end` line is incomplete (the host code crashed or was stopped).
use crate::types::*;

/// Where in the kernel's source an op was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanRef {
    pub file: u32,
    pub line: u32,
    pub col: u32,
}

/// One step of a program. Ops marked *command* return a token; tokens are numbered by the
/// order of command ops (0, 1, 2, ...), and `After`/`Wait` name them by that number.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `k.tensor(name)` with a name the kernel does not have (the device reports it).
    BadTensor { name: String },
    HbmAlloc { bytes: u64 },
    DmAlloc { slice: usize, bytes: u32 },
    VrfAlloc { slice: usize, len: u32 },
    TrfAlloc { slice: usize, len: u32 },
    After { deps: Vec<usize> },
    Wait { token: usize },
    /// command
    Copy { eng: Engine, src: Loc, dst: Loc, bytes: u32, packet: u32 },
    /// command
    Dma { eng: Engine, src: Loc, dst: Loc, packet: u32, seq: Vec<Loop> },
    /// command
    Switch { src: Loc, dst: Loc, bytes: u32 },
    /// command
    Pass(Pass),
    /// command
    Vload { src: Loc, dt: Dt, dst: Vrf },
    /// command
    Vstore { src: Vrf, dst: Loc, dt: Dt },
    /// command
    ToTrf { src: Vrf, dst: Trf },
    /// command
    Vsumsq { src: Vrf, dst: Vrf, accumulate: bool },
    /// command
    Vrms { src: Vrf, sumsq: Vrf, n: u32, eps: f32, dst: Vrf },
    /// command: 0 mul, 1 add, 2 muls, 3 geglu
    Vbin { kind: u8, a: Vrf, b: Vrf, dst: Vrf },
    /// command
    Vcopy { src: Vrf, dst: Vrf },
    /// command
    Vfill { dst: Vrf, value: f32 },
    /// command
    Vrope { src: Vrf, dst: Vrf, pos: u32, head_dim: u32, theta: f32 },
    /// The host code panicked here (message capped).
    Panic { msg: String },
}

impl Op {
    /// Does this op issue a command (and so return a token)?
    pub fn is_command(&self) -> bool {
        !matches!(self, Op::BadTensor { .. } | Op::HbmAlloc { .. } | Op::DmAlloc { .. } | Op::VrfAlloc { .. } | Op::TrfAlloc { .. } | Op::After { .. } | Op::Wait { .. } | Op::Panic { .. })
    }
}

/// A decoded program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub files: Vec<String>,
    pub ops: Vec<(Op, SpanRef)>,
    /// the host code returned (an `end` line was received)
    pub complete: bool,
}

/// Longest message a program may carry (panic text, tensor names).
pub const MAX_TEXT: usize = 500;

pub const HEADER: &str = "npu-program 1";

// ------------------------------------------------------------------ encoding

/// Escape a string into one field: no spaces, newlines or control characters.
pub fn esc_field(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut b = [0u8; 4];
            for x in c.encode_utf8(&mut b).bytes() {
                o.push_str(&format!("%{:02X}", x));
            }
        } else {
            o.push(c);
        }
    }
    if o.is_empty() {
        o.push('%');
        o.push('-');
    }
    o
}

fn unesc_field(s: &str) -> Result<String, String> {
    if s == "%-" {
        return Ok(String::new());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3).ok_or("bad escape")?;
            out.push(u8::from_str_radix(h, 16).map_err(|_| "bad escape")?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "bad utf-8 in a field".to_string())
}

fn dt_code(d: Dt) -> u8 {
    match d {
        Dt::Fp8E4m3 => 0,
        Dt::Fp4E2m1 => 1,
        Dt::Bf16 => 2,
        Dt::F32 => 3,
        Dt::I32 => 4,
    }
}
fn dt_of(c: u64) -> Result<Dt, String> {
    Ok(match c {
        0 => Dt::Fp8E4m3,
        1 => Dt::Fp4E2m1,
        2 => Dt::Bf16,
        3 => Dt::F32,
        4 => Dt::I32,
        _ => return Err(format!("bad dtype code {}", c)),
    })
}

fn loc(l: &Loc) -> String {
    match l {
        Loc::Hbm(a) => format!("h{}", a),
        Loc::Dm(s, a) => format!("d{}.{}", s, a),
    }
}
fn vrf(v: &Vrf) -> String {
    format!("{}.{}.{}", v.slice, v.off, v.len)
}
fn trf(v: &Trf) -> String {
    format!("{}.{}.{}", v.slice, v.off, v.len)
}
fn tile(t: &Tile) -> String {
    format!("{}.{}.{}.{}.{}", t.addr, t.rows, t.cols, t.pitch, dt_code(t.dt))
}

/// Encode one op (without its trailing newline).
pub fn encode_op(op: &Op, sp: SpanRef) -> String {
    let s = format!("{}:{}:{}", sp.file, sp.line, sp.col);
    match op {
        Op::BadTensor { name } => format!("T {} {}", s, esc_field(name)),
        Op::HbmAlloc { bytes } => format!("ah {} {}", s, bytes),
        Op::DmAlloc { slice, bytes } => format!("ad {} {} {}", s, slice, bytes),
        Op::VrfAlloc { slice, len } => format!("av {} {} {}", s, slice, len),
        Op::TrfAlloc { slice, len } => format!("at {} {} {}", s, slice, len),
        Op::After { deps } => {
            let mut o = format!("A {} {}", s, deps.len());
            for d in deps {
                o.push_str(&format!(" {}", d));
            }
            o
        }
        Op::Wait { token } => format!("W {} {}", s, token),
        Op::Copy { eng, src, dst, bytes, packet } => format!("C {} {}.{} {} {} {} {}", s, eng.cluster, eng.index, loc(src), loc(dst), bytes, packet),
        Op::Dma { eng, src, dst, packet, seq } => {
            let mut o = format!("D {} {}.{} {} {} {} {}", s, eng.cluster, eng.index, loc(src), loc(dst), packet, seq.len());
            for l in seq {
                o.push_str(&format!(" {}.{}.{}", l.count, l.src_stride, l.dst_stride));
            }
            o
        }
        Op::Switch { src, dst, bytes } => format!("S {} {} {} {}", s, loc(src), loc(dst), bytes),
        Op::Pass(p) => format!(
            "P {} {} {} {} {} {} {}",
            s,
            p.slice,
            tile(&p.w),
            p.scales.as_ref().map(tile).unwrap_or_else(|| "-".into()),
            trf(&p.x),
            vrf(&p.acc),
            p.accumulate as u8
        ),
        Op::Vload { src, dt, dst } => format!("vl {} {} {} {}", s, loc(src), dt_code(*dt), vrf(dst)),
        Op::Vstore { src, dst, dt } => format!("vs {} {} {} {}", s, vrf(src), loc(dst), dt_code(*dt)),
        Op::ToTrf { src, dst } => format!("vt {} {} {}", s, vrf(src), trf(dst)),
        Op::Vsumsq { src, dst, accumulate } => format!("vq {} {} {} {}", s, vrf(src), vrf(dst), *accumulate as u8),
        Op::Vrms { src, sumsq, n, eps, dst } => format!("vr {} {} {} {} {} {}", s, vrf(src), vrf(sumsq), n, eps.to_bits(), vrf(dst)),
        Op::Vbin { kind, a, b, dst } => format!("vb {} {} {} {} {}", s, kind, vrf(a), vrf(b), vrf(dst)),
        Op::Vcopy { src, dst } => format!("vc {} {} {}", s, vrf(src), vrf(dst)),
        Op::Vfill { dst, value } => format!("vf {} {} {}", s, vrf(dst), value.to_bits()),
        Op::Vrope { src, dst, pos, head_dim, theta } => format!("vp {} {} {} {} {} {}", s, vrf(src), vrf(dst), pos, head_dim, theta.to_bits()),
        Op::Panic { msg } => format!("X {} {}", s, esc_field(&cap(msg))),
    }
}

/// `s` cut to MAX_TEXT bytes (on a character boundary).
pub fn cap(s: &str) -> String {
    cut(s, MAX_TEXT)
}

/// `s` cut to `n` bytes on a character boundary, marked with `…` when cut.
pub fn cut(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut e = n;
    while !s.is_char_boundary(e) {
        e -= 1;
    }
    format!("{}…", &s[..e])
}

/// Encode a whole program.
pub fn encode(p: &Program) -> String {
    let mut o = String::new();
    o.push_str(HEADER);
    o.push('\n');
    for (i, f) in p.files.iter().enumerate() {
        o.push_str(&format!("f {} {}\n", i, esc_field(f)));
    }
    for (op, sp) in &p.ops {
        o.push_str(&encode_op(op, *sp));
        o.push('\n');
    }
    if p.complete {
        o.push_str(&format!("end {}\n", p.ops.len()));
    }
    o
}

// ------------------------------------------------------------------ decoding

struct Fields<'a> {
    it: std::str::Split<'a, char>,
}
impl<'a> Fields<'a> {
    fn next(&mut self) -> Result<&'a str, String> {
        self.it.next().filter(|s| !s.is_empty()).ok_or_else(|| "missing field".to_string())
    }
    fn u64(&mut self) -> Result<u64, String> {
        let f = self.next()?;
        f.parse().map_err(|_| format!("bad number `{}`", f))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let f = self.next()?;
        f.parse().map_err(|_| format!("bad number `{}`", f))
    }
    fn usize(&mut self) -> Result<usize, String> {
        Ok(self.u32()? as usize)
    }
    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_bits(self.u32()?))
    }
    fn bool(&mut self) -> Result<bool, String> {
        match self.next()? {
            "0" => Ok(false),
            "1" => Ok(true),
            f => Err(format!("bad flag `{}`", f)),
        }
    }
    fn done(&mut self) -> Result<(), String> {
        match self.it.next() {
            None => Ok(()),
            Some(f) => Err(format!("unexpected field `{}`", f)),
        }
    }
}

fn nums<const N: usize>(f: &str) -> Result<[i64; N], String> {
    let mut o = [0i64; N];
    let mut it = f.split('.');
    for x in o.iter_mut() {
        let p = it.next().ok_or_else(|| format!("bad compound `{}`", f))?;
        *x = p.parse().map_err(|_| format!("bad compound `{}`", f))?;
    }
    if it.next().is_some() {
        return Err(format!("bad compound `{}`", f));
    }
    Ok(o)
}
fn nonneg(v: i64, max: i64) -> Result<i64, String> {
    if v < 0 || v > max {
        return Err(format!("value {} out of range", v));
    }
    Ok(v)
}
fn u32f(v: i64) -> Result<u32, String> {
    Ok(nonneg(v, u32::MAX as i64)? as u32)
}

fn dloc(f: &str) -> Result<Loc, String> {
    if let Some(a) = f.strip_prefix('h') {
        return a.parse().map(Loc::Hbm).map_err(|_| format!("bad location `{}`", f));
    }
    if let Some(r) = f.strip_prefix('d') {
        let [s, a] = nums::<2>(r)?;
        return Ok(Loc::Dm(u32f(s)? as usize, u32f(a)?));
    }
    Err(format!("bad location `{}`", f))
}
fn dvrf(f: &str) -> Result<Vrf, String> {
    let [s, o, l] = nums::<3>(f)?;
    Ok(Vrf { slice: u32f(s)? as usize, off: u32f(o)?, len: u32f(l)? })
}
fn dtrf(f: &str) -> Result<Trf, String> {
    let [s, o, l] = nums::<3>(f)?;
    Ok(Trf { slice: u32f(s)? as usize, off: u32f(o)?, len: u32f(l)? })
}
fn dtile(f: &str) -> Result<Tile, String> {
    let [a, r, c, p, d] = nums::<5>(f)?;
    Ok(Tile { addr: u32f(a)?, rows: u32f(r)?, cols: u32f(c)?, pitch: u32f(p)?, dt: dt_of(u32f(d)? as u64)? })
}
fn deng(f: &str) -> Result<Engine, String> {
    let [c, i] = nums::<2>(f)?;
    Ok(Engine { cluster: u32f(c)? as usize, index: u32f(i)? as usize })
}

/// Decode one op line; `ntok` is the number of commands so far (tokens must name earlier ones).
pub fn decode_op(line: &str, nfiles: usize, ntok: usize) -> Result<(Op, SpanRef), String> {
    let mut f = Fields { it: line.split(' ') };
    let code = f.next()?;
    let [fi, ln, col] = nums::<3>(&f.next()?.replace(':', "."))?;
    let sp = SpanRef { file: u32f(fi)?, line: u32f(ln)?, col: u32f(col)? };
    if sp.file as usize >= nfiles {
        return Err(format!("span names unknown file {}", sp.file));
    }
    let tok = |t: usize| -> Result<usize, String> {
        if t >= ntok {
            Err(format!("token {} names a command that was not issued yet", t))
        } else {
            Ok(t)
        }
    };
    let op = match code {
        "T" => {
            let name = unesc_field(f.next()?)?;
            Op::BadTensor { name: cap(&name) }
        }
        "ah" => Op::HbmAlloc { bytes: f.u64()? },
        "ad" => Op::DmAlloc { slice: f.usize()?, bytes: f.u32()? },
        "av" => Op::VrfAlloc { slice: f.usize()?, len: f.u32()? },
        "at" => Op::TrfAlloc { slice: f.usize()?, len: f.u32()? },
        "A" => {
            let n = f.usize()?;
            if n > 1 << 16 {
                return Err("too many dependencies".into());
            }
            let mut deps = Vec::with_capacity(n);
            for _ in 0..n {
                deps.push(tok(f.usize()?)?);
            }
            Op::After { deps }
        }
        "W" => Op::Wait { token: tok(f.usize()?)? },
        "C" => Op::Copy { eng: deng(f.next()?)?, src: dloc(f.next()?)?, dst: dloc(f.next()?)?, bytes: f.u32()?, packet: f.u32()? },
        "D" => {
            let (eng, src, dst, packet) = (deng(f.next()?)?, dloc(f.next()?)?, dloc(f.next()?)?, f.u32()?);
            let n = f.usize()?;
            if n > 64 {
                return Err("sequencer program too long to encode".into());
            }
            let mut seq = Vec::with_capacity(n);
            for _ in 0..n {
                let [c, s, d] = nums::<3>(f.next()?)?;
                seq.push(Loop { count: u32f(c)?, src_stride: s, dst_stride: d });
            }
            Op::Dma { eng, src, dst, packet, seq }
        }
        "S" => Op::Switch { src: dloc(f.next()?)?, dst: dloc(f.next()?)?, bytes: f.u32()? },
        "P" => {
            let slice = f.usize()?;
            let w = dtile(f.next()?)?;
            let sc = f.next()?;
            let scales = if sc == "-" { None } else { Some(dtile(sc)?) };
            Op::Pass(Pass { slice, w, scales, x: dtrf(f.next()?)?, acc: dvrf(f.next()?)?, accumulate: f.bool()? })
        }
        "vl" => Op::Vload { src: dloc(f.next()?)?, dt: dt_of(f.u64()?)?, dst: dvrf(f.next()?)? },
        "vs" => Op::Vstore { src: dvrf(f.next()?)?, dst: dloc(f.next()?)?, dt: dt_of(f.u64()?)? },
        "vt" => Op::ToTrf { src: dvrf(f.next()?)?, dst: dtrf(f.next()?)? },
        "vq" => Op::Vsumsq { src: dvrf(f.next()?)?, dst: dvrf(f.next()?)?, accumulate: f.bool()? },
        "vr" => Op::Vrms { src: dvrf(f.next()?)?, sumsq: dvrf(f.next()?)?, n: f.u32()?, eps: f.f32()?, dst: dvrf(f.next()?)? },
        "vb" => {
            let kind = f.u32()?;
            if kind > 3 {
                return Err(format!("bad vector op kind {}", kind));
            }
            Op::Vbin { kind: kind as u8, a: dvrf(f.next()?)?, b: dvrf(f.next()?)?, dst: dvrf(f.next()?)? }
        }
        "vc" => Op::Vcopy { src: dvrf(f.next()?)?, dst: dvrf(f.next()?)? },
        "vf" => Op::Vfill { dst: dvrf(f.next()?)?, value: f.f32()? },
        "vp" => Op::Vrope { src: dvrf(f.next()?)?, dst: dvrf(f.next()?)?, pos: f.u32()?, head_dim: f.u32()?, theta: f.f32()? },
        "X" => Op::Panic { msg: cap(&unesc_field(f.next()?)?) },
        _ => return Err(format!("unknown op `{}`", cap(code))),
    };
    f.done()?;
    Ok((op, sp))
}

/// Limits on what a program may be (the device refuses anything larger).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_ops: usize,
    pub max_files: usize,
    pub max_line: usize,
}
impl Default for Limits {
    fn default() -> Limits {
        Limits { max_ops: 4_000_000, max_files: 64, max_line: 4096 }
    }
}

/// Incremental decoder: feed lines as they arrive.
pub struct Decoder {
    pub prog: Program,
    lim: Limits,
    ntok: usize,
    header: bool,
    ended: bool,
}
impl Decoder {
    pub fn new(lim: Limits) -> Decoder {
        Decoder { prog: Program::default(), lim, ntok: 0, header: false, ended: false }
    }
    /// One line (without its newline).
    pub fn line(&mut self, line: &str) -> Result<(), String> {
        if line.len() > self.lim.max_line {
            return Err(format!("a program line is longer than {} bytes", self.lim.max_line));
        }
        if self.ended {
            return Err("data after the end of the program".into());
        }
        if !self.header {
            if line != HEADER {
                return Err("the kernel binary did not send a program (bad header)".into());
            }
            self.header = true;
            return Ok(());
        }
        if let Some(r) = line.strip_prefix("f ") {
            let (i, name) = r.split_once(' ').ok_or("bad file line")?;
            if i.parse::<usize>().ok() != Some(self.prog.files.len()) || self.prog.files.len() >= self.lim.max_files {
                return Err("bad or too many file entries".into());
            }
            self.prog.files.push(cap(&unesc_field(name)?));
            return Ok(());
        }
        if let Some(r) = line.strip_prefix("end ") {
            if r.parse::<usize>().ok() != Some(self.prog.ops.len()) {
                return Err("the program's end line does not match the ops received".into());
            }
            self.ended = true;
            self.prog.complete = true;
            return Ok(());
        }
        if self.prog.ops.len() >= self.lim.max_ops {
            return Err(format!("the program has more than {} ops", self.lim.max_ops));
        }
        let (op, sp) = decode_op(line, self.prog.files.len(), self.ntok)?;
        if op.is_command() {
            self.ntok += 1;
        }
        self.prog.ops.push((op, sp));
        Ok(())
    }
}

/// Decode a whole program text.
pub fn decode(text: &str, lim: Limits) -> Result<Program, String> {
    let mut d = Decoder::new(lim);
    for (i, l) in text.lines().enumerate() {
        d.line(l).map_err(|e| format!("program line {}: {}", i + 1, e))?;
    }
    Ok(d.prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(line: u32) -> SpanRef {
        SpanRef { file: 0, line, col: 5 }
    }

    #[test]
    fn every_op_survives_the_wire() {
        let v = Vrf { slice: 3, off: 8, len: 16 };
        let t = Trf { slice: 3, off: 0, len: 64 };
        let tile = Tile { addr: 256, rows: 8, cols: 64, pitch: 64, dt: Dt::Fp4E2m1 };
        let ops = vec![
            Op::BadTensor { name: "no such tensor".into() },
            Op::HbmAlloc { bytes: 1 << 40 },
            Op::DmAlloc { slice: 15, bytes: 4096 },
            Op::VrfAlloc { slice: 1, len: 8 },
            Op::TrfAlloc { slice: 2, len: 1024 },
            Op::Copy { eng: engine(1, 7), src: Loc::Hbm(4096), dst: Loc::Dm(9, 512), bytes: 8192, packet: 4096 },
            Op::After { deps: vec![] },
            Op::After { deps: vec![0] },
            Op::Dma { eng: engine(0, 1), src: Loc::Dm(0, 0), dst: Loc::Hbm(1 << 33), packet: 256, seq: vec![lp(4, -256, 512), lp(2, 0, 0)] },
            Op::Dma { eng: engine(0, 1), src: Loc::Dm(0, 0), dst: Loc::Hbm(0), packet: 256, seq: vec![] },
            Op::Wait { token: 1 },
            Op::Switch { src: Loc::Dm(0, 0), dst: Loc::Dm(1, 256), bytes: 512 },
            Op::Pass(Pass { slice: 3, w: tile, scales: Some(Tile { addr: 0, rows: 8, cols: 4, pitch: 4, dt: Dt::Fp8E4m3 }), x: t, acc: v, accumulate: true }),
            Op::Pass(Pass { slice: 3, w: Tile { dt: Dt::Bf16, ..tile }, scales: None, x: t, acc: v, accumulate: false }),
            Op::Vload { src: Loc::Dm(3, 64), dt: Dt::Bf16, dst: v },
            Op::Vstore { src: v, dst: Loc::Dm(3, 64), dt: Dt::F32 },
            Op::ToTrf { src: v, dst: t },
            Op::Vsumsq { src: v, dst: v.sub(0, 1), accumulate: true },
            Op::Vrms { src: v, sumsq: v.sub(0, 1), n: 3840, eps: 1e-6, dst: v },
            Op::Vbin { kind: 3, a: v, b: v, dst: v },
            Op::Vcopy { src: v, dst: v },
            Op::Vfill { dst: v, value: -0.1 },
            Op::Vrope { src: v, dst: v, pos: 77, head_dim: 16, theta: 10000.0 },
            Op::Panic { msg: "index out of bounds: the len is 3 but the index is 7".into() },
        ];
        let prog = Program { files: vec!["/tmp/a kernel%.rs".into()], ops: ops.into_iter().enumerate().map(|(i, o)| (o, sp(i as u32 + 1))).collect(), complete: true };
        let text = encode(&prog);
        assert_eq!(decode(&text, Limits::default()).unwrap(), prog);
    }

    #[test]
    fn malformed_programs_are_refused_with_a_reason() {
        let ok = format!("{}\nf 0 k.rs\n", HEADER);
        for (bad, why) in [
            ("W 0:1:1 0\n", "not issued yet"),
            ("C 0:1:1 0.0 h0 d0.0 4096\n", "missing field"),
            ("C 0:1:1 0.0 h0 d0.0 4096 4096 extra\n", "unexpected field"),
            ("zz 0:1:1\n", "unknown op"),
            ("W 3:1:1 0\n", "unknown file"),
            ("vb 0:1:1 9 0.0.1 0.0.1 0.0.1\n", "kind"),
            ("end 5\n", "does not match"),
        ] {
            let e = decode(&(ok.clone() + bad), Limits::default()).unwrap_err();
            assert!(e.contains(why), "{:?}: {}", bad, e);
        }
        assert!(decode("{\"type\":\"run\",\"cycles\":1}\n", Limits::default()).unwrap_err().contains("header"));
        let lim = Limits { max_ops: 2, ..Limits::default() };
        let many = ok + "ah 0:1:1 1\nah 0:1:1 1\nah 0:1:1 1\n";
        assert!(decode(&many, lim).unwrap_err().contains("more than 2 ops"));
    }

    #[test]
    fn a_program_without_its_end_line_is_incomplete() {
        let p = decode(&format!("{}\nf 0 k.rs\nah 0:1:1 64\n", HEADER), Limits::default()).unwrap();
        assert!(!p.complete);
        assert_eq!(p.ops.len(), 1);
    }
}
